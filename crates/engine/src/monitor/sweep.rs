//! The gather of a sweep, set by set.
//!
//! A sweep visits the match sets some member flow wrote in the swept epoch
//! (`Monitor::active_sets`), not the triggers: the triggers of a set (the
//! workload's eight a flow) all read the same flows and the same
//! statistics, so walking the set's epoch log reads each flow's record
//! once and hands it to every trigger of the set in turn. That log is the
//! swept epoch's (`epoch_log.rs`): a record for each flow written in the
//! epoch (or moved to the set with the epoch's statistics), holding its
//! statistics and its entry number, so the walk reads one array in order:
//! no visit reads an idle flow, and none waits on a chain of misses from a
//! list to an entry to its statistics (a 1 M-flow sweep took 39 ms with
//! such lists, docs/performance.md). The flow's key is read from its entry
//! where a group or a report needs it: prefetched ahead of the walk when
//! every flow's is read (a group coarser than the flow, kept values), and
//! only for the flows that fire when every trigger is a threshold on a
//! sum. A trigger in
//! several active sets is reached from each; results never depend on the
//! order (accumulators are integer sums, minima, maxima and latest
//! values; a window's groups and the reports are sorted where order
//! shows).

use clarion_report::{Completeness, Origin, Report};
use clarion_wire::FlowKey;

use crate::config::Tuning;
use crate::epoch_log::{NO_OWNER, PACKETS};
use crate::flow_table::FlowTable;
use crate::int_threshold::{union_into, IntRange};
use crate::key::{group_of, report_group};
use crate::match_set::MatchSet;
use crate::measure::{narrow_sum, Acc};
use crate::merge::WindowPartial;
use crate::prefetch::prefetch;
use crate::recent::EpochValues;
use crate::trigger::{Head, Trigger};
use crate::trigger_index::TriggerId;

use super::firings::Firings;
use super::Monitor;

/// A sweep in progress: which epoch, and where it stopped.
#[derive(Debug)]
pub(super) struct Sweep {
    pub(super) epoch_start: u64,
    pub(super) epoch_end: u64,
    pub(super) half: usize,
    /// The swept epoch's sequence number (`Monitor::epoch_seq` in it).
    pub(super) seq: u64,
    /// Start of the epoch now running; `None` at end of input (close every window).
    pub(super) next_start: Option<u64>,
    /// Packet time when it began: that of the first frame after the epoch.
    pub(super) begun_ns: u64,
    /// Sets to visit (a set may appear twice: see `Monitor::migrate`).
    pub(super) order: Vec<u32>,
    pub(super) set_pos: usize,
    /// The next record of the visited set's log (its first word's offset).
    pub(super) pos: usize,
    /// The triggers of the set being visited that take part in this sweep.
    pub(super) parts: Vec<Part>,
    /// Triggers whose window this sweep opened.
    pub(super) opened: Vec<TriggerId>,
    /// Triggers tested flow by flow that keep latest values (for
    /// `X_lastepoch`): their epoch ends with the gather.
    pub(super) flow_lasts: Vec<TriggerId>,
    pub(super) reports: Vec<Report>,
    /// Triggers tested flow by flow: their firings, made into reports at
    /// the sweep's end (`firings.rs`); not with `merge` or `adapt`.
    pub(super) firings: Firings,
    pub(super) origin: Origin,
    /// For triggers tested per flow (see [`gather_set`]).
    pub(super) direct: Direct,
    /// Fast tests held, reported once their flows' keys arrive; empty
    /// between sets.
    pub(super) fired: std::collections::VecDeque<Fired>,
    /// The fast tests of the set being visited, when every part is one.
    pub(super) first_look: FirstLook,
    /// The swept epoch's traffic (what the merger sums over workers).
    pub(super) counts: Completeness,
    /// `merge_output`: results go to the merger, not to `out`.
    pub(super) merge: bool,
    /// `merge_output` or degraded mode: the trigger of each report, in step with `reports`.
    pub(super) report_triggers: Vec<TriggerId>,
    /// `merge_output`: the closed windows of exported triggers.
    pub(super) partials: Vec<WindowPartial>,
    /// Degraded mode: count flow-epochs per set and per trigger (`shed.rs`).
    pub(super) adapt: bool,
    /// Degraded mode: (set, flow-epochs, packets) of each visit of a set.
    pub(super) loads: Vec<(u32, u64, u64)>,
    /// Degraded mode: the triggers the visited set's flows are shed from,
    /// and whether each is tested flow by flow in this epoch.
    pub(super) shed_parts: Vec<(TriggerId, bool)>,
    /// Degraded mode: per trigger tested flow by flow, the epoch's
    /// flow-epochs measured and shed (its window is the epoch).
    pub(super) direct_counts: rustc_hash::FxHashMap<TriggerId, (u64, u64)>,
    /// Degraded mode: flow-epochs of a trigger estimated bypassed, per
    /// flow-epoch of it the sweep sees (`bypass.rs`; 0 when none were).
    pub(super) bypassed_per_seen: f64,
    /// Flow-epochs estimated bypassed, per trigger tested flow by flow.
    pub(super) direct_bypassed: rustc_hash::FxHashMap<TriggerId, f64>,
    /// Degraded mode: the share of the swept epoch's packets that reached
    /// the monitor (1: none dropped before it).
    pub(super) seen_share: f64,
    /// Scratch for [`gather_set`]'s weights, kept from set to set.
    pub(super) scaled_weights: Vec<f64>,
    /// Degraded mode with drops: per trigger tested flow by flow, the
    /// flows that fire as seen or with their sums and counts scaled by
    /// `1 / seen_share`, each weighed by `clarion_adapt::seen_flow_weight`
    /// (`shed.rs` makes the recall estimate of them).
    pub(super) direct_scaled: rustc_hash::FxHashMap<TriggerId, f64>,
    /// Degraded mode with `merge_output`: the counts of the windows of
    /// triggers tested here, for the merger's estimate.
    pub(super) window_counts: Vec<crate::merge::WindowCounts>,
    /// Degraded mode with `keep_health`: the swept epoch's record, pushed at
    /// the sweep's end with the accuracy of the windows it closed.
    pub(super) health: Option<clarion_report::Health>,
}

/// A threshold on one sum, as the walk tests it: the integers it holds
/// for as [`IntRange::span`] gives them.
#[derive(Clone, Copy, Debug)]
struct FastSum {
    /// The sum's first word in a record.
    at: u32,
    flip: bool,
    start: i64,
    width: u64,
    range: IntRange,
}

/// What [`FastSum::test`] found.
enum SumTest {
    /// The threshold holds for the sum, of this value.
    Holds(f64),
    Fails(f64),
    /// The sum does not fit in 64 bits (or the record is short): test it
    /// as any predicate.
    Wide,
}

impl FastSum {
    fn new(at: u32, range: IntRange) -> Self {
        let (start, width, flip) = range.span();
        FastSum {
            at,
            flip,
            start,
            width,
            range,
        }
    }

    #[inline(always)]
    fn holds(&self, v: i64) -> bool {
        (v.wrapping_sub(self.start) as u64 <= self.width) != self.flip
    }

    /// Whether the threshold holds for `v` scaled by `scale` (degraded
    /// mode's recall estimate: what a flow thinned by drops had).
    fn holds_scaled(&self, v: f64, scale: f64) -> bool {
        // Saturating float-to-int: a sum past i64 holds as i64::MAX does.
        self.holds((v * scale).floor() as i64)
    }

    #[inline(always)]
    fn test(&self, words: &[u64]) -> SumTest {
        let Some(v) = narrow_sum(words, self.at as usize) else {
            return SumTest::Wide;
        };
        if self.holds(v) {
            SumTest::Holds(v as f64)
        } else {
            SumTest::Fails(v as f64)
        }
    }
}

/// The fast tests ([`FastSum`]) of a set whose every part is one, as the
/// walk's first look at a record takes them: nearly every record fails
/// them all, so this look is most of a sweep's work. The look reads each
/// sum the tests read once (a set's triggers share a few: the benchmark's
/// eight read three) and tests it against the union of their thresholds on
/// it (`int_threshold::union_into`: one interval where they all are `sum > c`),
/// without a branch; only a record where some test may hold goes through
/// the parts. 8 tests a record took ~290 instructions through the parts,
/// ~100 tested one by one, ~40 so (callgrind, 100 k flows).
#[derive(Debug, Default)]
pub(super) struct FirstLook {
    /// The distinct sums' first words, at most [`FIRST_LOOK_SUMS`].
    ats: Vec<u32>,
    /// The union of the thresholds on each sum: the sum's index in `ats`,
    /// an interval's start and width.
    spans: Vec<(usize, i64, u64)>,
    /// One sum's union, as [`union_into`] leaves it.
    union: Vec<(i64, i64)>,
}

/// Records a set's log holds from which its visit builds a [`FirstLook`]
/// (building one costs about as much as testing ten records through the
/// parts: at 300 flows, a record or two a set, always building it made
/// the sweep 19 % slower).
const FIRST_LOOK_RECORDS: usize = 16;

/// Distinct sums a [`FirstLook`] reads; a set reading more takes every
/// record through its parts.
const FIRST_LOOK_SUMS: usize = 4;

impl FirstLook {
    /// The look for `sums`; false (and empty) if they read too many sums.
    fn build(&mut self, sums: impl Iterator<Item = FastSum> + Clone) -> bool {
        self.ats.clear();
        self.spans.clear();
        for f in sums.clone() {
            if !self.ats.contains(&f.at) {
                if self.ats.len() == FIRST_LOOK_SUMS {
                    self.ats.clear();
                    return false;
                }
                self.ats.push(f.at);
            }
        }
        for (k, &at) in self.ats.iter().enumerate() {
            let ranges = sums.clone().filter(|f| f.at == at).map(|f| f.range);
            union_into(ranges, &mut self.union);
            let spans = self
                .union
                .iter()
                .map(|&(lo, hi)| (k, lo, hi.wrapping_sub(lo) as u64));
            self.spans.extend(spans);
        }
        true
    }

    /// Whether some test may hold in record `words`: one holds, or some
    /// sum is too wide to tell here.
    #[inline(always)]
    fn any_holds(&self, words: &[u64]) -> bool {
        let mut vals = [0i64; FIRST_LOOK_SUMS];
        for (v, &at) in vals.iter_mut().zip(&self.ats) {
            match narrow_sum(words, at as usize) {
                Some(x) => *v = x,
                None => return true,
            }
        }
        let mut any = false;
        for &(k, start, width) in &self.spans {
            any |= vals[k % FIRST_LOOK_SUMS].wrapping_sub(start) as u64 <= width;
        }
        any
    }
}

/// The vectors a sweep grows as it goes, kept from one sweep for the
/// next (emptied): built afresh, they were grown and freed at every
/// sweep, an eighth of a sweep's instructions on a sparse capture where
/// a sweep has a few flows (docs/performance.md, "A reclaim paced by
/// packet time").
#[derive(Debug, Default)]
pub(super) struct Spares {
    pub(super) parts: Vec<Part>,
    pub(super) opened: Vec<TriggerId>,
    pub(super) flow_lasts: Vec<TriggerId>,
    pub(super) accs: Vec<Acc>,
    pub(super) values: Vec<f64>,
    pub(super) scratch: Vec<f64>,
    pub(super) scaled_weights: Vec<f64>,
    pub(super) fired: std::collections::VecDeque<Fired>,
    pub(super) first_look: FirstLook,
    pub(super) loads: Vec<(u32, u64, u64)>,
    pub(super) shed_parts: Vec<(TriggerId, bool)>,
}

impl Spares {
    /// Takes a finished sweep's vectors, emptied (what is still to be read
    /// of it stays).
    pub(super) fn keep(s: &mut Sweep) -> Spares {
        fn emptied<T>(v: &mut Vec<T>) -> Vec<T> {
            let mut v = std::mem::take(v);
            v.clear();
            v
        }
        let mut fired = std::mem::take(&mut s.fired);
        fired.clear();
        let mut first_look = std::mem::take(&mut s.first_look);
        first_look.ats.clear();
        first_look.spans.clear();
        first_look.union.clear();
        Spares {
            parts: emptied(&mut s.parts),
            opened: emptied(&mut s.opened),
            flow_lasts: emptied(&mut s.flow_lasts),
            accs: emptied(&mut s.direct.accs),
            values: emptied(&mut s.direct.values),
            scratch: emptied(&mut s.direct.scratch),
            scaled_weights: emptied(&mut s.scaled_weights),
            fired,
            first_look,
            loads: emptied(&mut s.loads),
            shed_parts: emptied(&mut s.shed_parts),
        }
    }
}

/// What testing windows per flow, during the gather, needs: such a
/// trigger's window is this one epoch, and each flow is its own group.
#[derive(Debug)]
pub(super) struct Direct {
    /// Whether some packet so far had a VLAN tag or a VNI (else `per 5tuple` keeps flows apart).
    pub(super) tags_seen: crate::key::TagsSeen,
    /// The swept epoch's traffic, the window's completeness.
    pub(super) completeness: Completeness,
    /// Every group's values, for the monitor's recent epochs.
    pub(super) kept: EpochValues,
    /// Whether any are kept (`MonitorConfig::history_windows` > 0): if
    /// not, the tests write nothing there.
    pub(super) keep: bool,
    pub(super) accs: Vec<Acc>,
    pub(super) values: Vec<f64>,
    /// Scratch for a scaled test (degraded mode with drops).
    pub(super) scratch: Vec<f64>,
}

/// A trigger's part in the visit of one set: its position there, its id,
/// and whether it is tested flow by flow (else its flows join groups).
#[derive(Clone, Copy, Debug)]
pub(super) struct Part {
    pos: u32,
    tid: TriggerId,
    direct: bool,
    /// Tested flow by flow as one threshold on one sum (`sum(x) op c`,
    /// the usual trigger): where the sum lies in a record, and the
    /// threshold. Such a test reads two words of the record and nothing
    /// of the trigger (see [`gather_set`]).
    fast: Option<FastSum>,
    /// Degraded mode, an epoch with drops: the trigger's flows are also
    /// tested with their sums scaled back up, for the recall estimate
    /// (`Sweep::direct_scaled`; its aggregates scale with traffic).
    scales: bool,
}

impl Monitor {
    /// Gathers the sweep's sets from where it stopped; false when the
    /// budget ran out first.
    pub(super) fn gather_sets(&mut self, s: &mut Sweep, budget: &mut usize) -> bool {
        let tuning = self.config.tuning;
        while s.set_pos < s.order.len() {
            if tuning.sweep_prefetch {
                self.prefetch_sweep(&s.order, s.set_pos, s.half);
            }
            let sid = s.order[s.set_pos];
            if !gather_set(
                sid,
                &mut self.sets,
                &self.flows,
                Triggers {
                    all: &mut self.triggers,
                    heads: &mut self.heads,
                },
                tuning,
                s,
                budget,
            ) {
                return false;
            }
            s.set_pos += 1;
            s.pos = 0;
        }
        true
    }

    /// Starts loading what the sweep will read for the sets a few places
    /// ahead of `pos` in `order`, one level of indirection per distance,
    /// each level reading only lines the level before loaded:
    ///
    /// | ahead | loads | reading |
    /// |---|---|---|
    /// | 3 | the set's header (every line the sweep reads) | `order` |
    /// | 2 | its log's first records and keys, trigger ids and sum offsets | the header |
    /// | 1 | the triggers' heads | the ids |
    ///
    /// So each set's data arrive while earlier ones are gathered. A load
    /// of a line not prefetched stalls the sweep: the header's second line
    /// and the trigger pointers were once ~40 % of its samples.
    #[inline]
    fn prefetch_sweep(&self, order: &[u32], pos: usize, half: usize) {
        let at = |k: usize| order.get(pos + k).and_then(|&s| self.sets.get(s as usize));
        if let Some(set) = at(3) {
            set.prefetch_header();
        }
        if let Some(set) = at(2) {
            for rec in 0..2 {
                set.prefetch_for_sweep(rec * set.stride(), half);
            }
            prefetch(set.triggers.as_ptr());
            prefetch(set.sum_at_ptr());
        }
        if let Some(set) = at(1) {
            // What a per-flow test reads of each trigger (see `Head`).
            let heads = self.heads.as_ptr();
            for &t in &set.triggers {
                prefetch(heads.wrapping_add(t as usize));
            }
        }
    }
}

/// The monitor's triggers by id and their heads (see [`Head`]), as the
/// sweep borrows them.
struct Triggers<'a> {
    all: &'a mut [Option<Box<Trigger>>],
    heads: &'a mut [Head],
}

/// Gathers one set's flows for the sweep's epoch into its triggers; false
/// when the budget (flow visits, each counted once per trigger of the set)
/// ran out. It walks the swept epoch's log of the set and empties it once
/// walked.
///
/// With `tuning.flow_windows`, a trigger whose window is this one epoch
/// and whose groups are single flows is tested flow by flow, here: each
/// flow's statistics are its group's, so there is nothing to merge and no
/// open window to keep; its values go straight to the epoch's arena
/// (`recent.rs`) and, if the predicate holds, to a report. Values read
/// outside aggregates (`ack`, `seq_lastepoch`) come from the trigger's
/// latest values of the last window, kept by key as a closed window keeps
/// them ([`Trigger::flow_states`]), so testing a trigger flow by flow in
/// one epoch and by groups in the next (or back) changes no value.
///
/// Such a trigger whose predicate is one threshold on one sum (the usual
/// `sum(x) op c`) is a [`FastSum`]: two words of the record against the
/// integers the threshold holds for (`int_threshold.rs`), nothing read of
/// the trigger, the flow's key decoded only if it fires. When every part
/// of the set is one, the walk is a tight loop over them (~27
/// instructions a trigger and record, against ~100 through the general
/// test: docs/performance.md).
fn gather_set(
    sid: u32,
    sets: &mut [MatchSet],
    flows: &FlowTable,
    t: Triggers,
    tuning: Tuning,
    s: &mut Sweep,
    budget: &mut usize,
) -> bool {
    let Triggers { all: triggers, heads } = t;
    let Some(set) = sets.get_mut(sid as usize) else {
        return true;
    };
    let epoch_len = s.epoch_end - s.epoch_start;
    let aligned = s.epoch_start.is_multiple_of(epoch_len);
    // Whether trigger `tid` takes part in this sweep (`None`: installed
    // during the epoch, not due yet, or ended), and if so whether it is
    // tested flow by flow (fixed for the whole sweep: such a trigger opens
    // no window).
    let taking_part = |tid: TriggerId| {
        let head = heads.get(tid as usize).filter(|h| h.live())?;
        let end = || {
            triggers
                .get(tid as usize)
                .and_then(Option::as_deref)
                .map_or(0, Trigger::end_ns)
        };
        head.gathers(s.epoch_start, end)
            .then(|| tuning.flow_windows && head.tested_per_flow(epoch_len, aligned, s.direct.tags_seen))
    };
    let mut parts = std::mem::take(&mut s.parts);
    parts.clear();
    for (pos, &tid) in set.triggers.iter().enumerate() {
        if let Some(direct) = taking_part(tid) {
            let fast = direct
                .then(|| {
                    let head = heads.get(tid as usize)?;
                    Some(FastSum::new(set.sum_word(pos)? as u32, head.sum_range()?))
                })
                .flatten();
            // Degraded mode with drops: also tried scaled back up.
            let scales = direct
                && s.adapt
                && s.seen_share < 1.0
                && triggers
                    .get(tid as usize)
                    .and_then(Option::as_deref)
                    .is_some_and(Trigger::scales_with_traffic);
            parts.push(Part {
                pos: pos as u32,
                tid,
                direct,
                fast,
                scales,
            });
        }
    }
    let fast_only = !s.direct.keep && parts.iter().all(|p| p.fast.is_some());
    // Degraded mode with drops: a fast test whose trigger scales with
    // traffic is also tried on the sum scaled back up
    // (`Sweep::direct_scaled`), so every record goes through the parts.
    let scale = 1.0 / s.seen_share.max(f64::MIN_POSITIVE);
    let scaled = parts.iter().any(|p| p.scales && p.fast.is_some());
    let mut weights = std::mem::take(&mut s.scaled_weights);
    weights.clear();
    if scaled {
        weights.resize(parts.len(), 0.0);
    }
    // Built where it pays: a set of a few records (most sets at a few
    // hundred flows) tests them through its parts.
    let look = !scaled
        && fast_only
        && set.log_len(s.half) >= FIRST_LOOK_RECORDS
        && s.first_look.build(parts.iter().filter_map(|p| p.fast));
    // Whether some record of this visit was tested by the fast parts
    // (each is then marked tested once, after the walk).
    let mut fast_tested = false;
    let mut shed_parts = std::mem::take(&mut s.shed_parts);
    shed_parts.clear();
    if s.adapt {
        shed_parts.extend(
            set.dropped
                .iter()
                .filter_map(|&tid| Some((tid, taking_part(tid)?))),
        );
    }
    let (mut flow_epochs, mut packets_seen) = (0u64, 0u64);
    // Degraded mode: shed flow-epochs (each shed trigger tested flow by
    // flow counts them; each one measuring counts every flow-epoch).
    let any_direct_shed = shed_parts.iter().any(|p| p.1);
    let mut direct_shed = 0u64;
    let cost = parts.len().max(1);
    let mut done = true;
    // The log's length is read at each visit: a flow moved here during
    // the sweep (between its steps) appends to it.
    let ahead = LOG_AHEAD * set.stride();
    // Records visited, for the reports of fast tests left waiting.
    let mut visits = 0usize;
    while let Some(next) = set.next_record(s.pos, s.half) {
        if *budget == 0 {
            done = false;
            break;
        }
        *budget = budget.saturating_sub(cost);
        if tuning.sweep_prefetch {
            set.prefetch_for_sweep(s.pos + ahead, s.half);
            // Half as far ahead, the record prefetched above has arrived:
            // its flow's entry, which holds the key (records keep none).
            if !fast_only {
                let owner = set.owner((s.pos + ahead / 2) as u32, s.half);
                if owner != NO_OWNER {
                    flows.prefetch_entry_at(owner);
                }
            }
        }
        let rec = s.pos as u32;
        s.pos = next;
        // Gathered already (the set listed twice in this sweep) or moved
        // to another set: skipped.
        if !set.has_epoch(rec, s.half, s.epoch_start) {
            continue;
        }
        // The key is decoded only when a group, a report or the kept
        // values need it: a flow that fires no fast test needs none.
        let mut key: Option<FlowKey> = None;
        let words = set.record_words(rec, s.half);
        let packets = words.get(PACKETS).copied().unwrap_or(0);
        if s.adapt {
            flow_epochs += 1;
            packets_seen += packets;
            direct_shed += u64::from(any_direct_shed);
            for &(tid, direct) in &shed_parts {
                if direct {
                    continue;
                }
                let Some(trig) = triggers.get_mut(tid as usize).and_then(Option::as_deref_mut) else {
                    continue;
                };
                if !trig.is_open() {
                    s.opened.push(tid);
                    if let Some(h) = heads.get_mut(tid as usize) {
                        h.set_open(true);
                    }
                }
                trig.window_for(s.epoch_start).unmeasured += 1;
            }
        }
        if fast_only {
            // Every part one threshold on a sum, nothing kept: the loop
            // reads two words a trigger and decodes the key only to report.
            if packets != 0 {
                fast_tested = true;
            }
            if packets != 0 && (!look || s.first_look.any_holds(words)) {
                for (i, p) in parts.iter().enumerate() {
                    let Some(f) = p.fast else { continue };
                    let test = f.test(words);
                    if p.scales {
                        weigh(&mut weights[i], f, &test, packets, s.seen_share, scale);
                    }
                    match test {
                        SumTest::Fails(_) => {}
                        SumTest::Holds(value) => {
                            // Reported a few visits later, once its entry
                            // (the key) has arrived.
                            let owner = set.owner(rec, s.half);
                            flows.prefetch_entry_at(owner);
                            s.fired.push_back(Fired {
                                visit: visits,
                                owner,
                                tid: p.tid,
                                value,
                            });
                        }
                        SumTest::Wide => {
                            let k = *key.get_or_insert_with(|| flows.key(set.owner(rec, s.half)));
                            let t = Triggers {
                                all: &mut *triggers,
                                heads: &mut *heads,
                            };
                            test_flow(t, p.tid, set, rec, &k, p.pos as usize, s);
                        }
                    }
                }
            }
            set.consume(rec, s.half);
            visits += 1;
            while let Some(f) = s
                .fired
                .front()
                .copied()
                .filter(|f| f.visit + FIRED_DEFER <= visits)
            {
                s.fired.pop_front();
                f.report(triggers, flows, s);
            }
            continue;
        }
        for (i, p) in parts.iter().enumerate() {
            let pos = p.pos as usize;
            if let Some(f) = p.fast {
                // A record of RTT samples only has no group to test.
                if packets == 0 {
                    continue;
                }
                fast_tested = true;
                let test = f.test(words);
                if p.scales {
                    weigh(&mut weights[i], f, &test, packets, s.seen_share, scale);
                }
                let (fires, v) = match test {
                    SumTest::Holds(v) => (true, v),
                    SumTest::Fails(v) => (false, v),
                    SumTest::Wide => {
                        let k = *key.get_or_insert_with(|| flows.key(set.owner(rec, s.half)));
                        let t = Triggers {
                            all: &mut *triggers,
                            heads: &mut *heads,
                        };
                        test_flow(t, p.tid, set, rec, &k, pos, s);
                        continue;
                    }
                };
                if fires || s.direct.keep {
                    let k = *key.get_or_insert_with(|| flows.key(set.owner(rec, s.half)));
                    flow_tested(triggers, p.tid, &k, &[v], fires, s);
                }
                continue;
            }
            let key = &*key.get_or_insert_with(|| flows.key(set.owner(rec, s.half)));
            if p.direct {
                let t = Triggers {
                    all: &mut *triggers,
                    heads: &mut *heads,
                };
                test_flow(t, p.tid, set, rec, key, pos, s);
                continue;
            }
            let Some(trig) = triggers.get_mut(p.tid as usize).and_then(Option::as_deref_mut) else {
                continue;
            };
            let g = group_of(key, &trig.spec.granularity);
            if !trig.is_open() {
                s.opened.push(p.tid);
                if let Some(h) = heads.get_mut(p.tid as usize) {
                    h.set_open(true);
                }
            }
            let n_reads = trig.reads_len();
            let w = trig.window_for(s.epoch_start);
            w.measured += 1;
            let (accs, packets) = w.group(g, n_reads);
            *packets += set.gather(rec, s.half, pos, accs);
        }
        set.consume(rec, s.half);
    }
    while let Some(f) = s.fired.pop_front() {
        f.report(triggers, flows, s);
    }
    if fast_tested {
        for p in parts.iter().filter(|p| p.fast.is_some()) {
            if let Some(h) = heads.get_mut(p.tid as usize) {
                h.mark_tested();
            }
        }
    }
    if done {
        set.clear_log(s.half);
    }
    if s.adapt && flow_epochs > 0 && s.bypassed_per_seen > 0.0 {
        // Every trigger of the set, measured or shed, saw these flow-epochs
        // (a windowed one's window is open: the walk above opened it at the
        // first flow-epoch it counted).
        let bypassed = flow_epochs as f64 * s.bypassed_per_seen;
        let all = parts
            .iter()
            .map(|p| (p.tid, p.direct))
            .chain(shed_parts.iter().copied());
        for (tid, direct) in all {
            if direct {
                *s.direct_bypassed.entry(tid).or_default() += bypassed;
            } else if let Some(trig) = triggers.get_mut(tid as usize).and_then(Option::as_deref_mut) {
                trig.window_for(s.epoch_start).bypassed += bypassed;
            }
        }
    }
    if scaled {
        // Fast tests' weights (the others' were added by `test_flow`).
        for (p, &w) in parts
            .iter()
            .zip(&weights)
            .filter(|(p, _)| p.scales && p.fast.is_some())
        {
            *s.direct_scaled.entry(p.tid).or_default() += w;
        }
    }
    s.scaled_weights = weights;
    if s.adapt && flow_epochs > 0 {
        s.loads.push((sid, flow_epochs, packets_seen));
        for p in parts.iter().filter(|p| p.direct) {
            s.direct_counts.entry(p.tid).or_default().0 += flow_epochs;
        }
        for &(tid, _) in shed_parts.iter().filter(|p| p.1) {
            s.direct_counts.entry(tid).or_default().1 += direct_shed;
        }
    }
    s.parts = parts;
    s.shed_parts = shed_parts;
    done
}

/// Degraded mode with drops: adds a flow's weight to `acc` if its sum
/// holds the threshold as seen or scaled by `scale`, the flow seen with
/// `packets` of each packet's `seen_share` (`clarion_adapt::seen_flow_weight`).
/// A wide sum is left to `test_flow`, which weighs it.
#[inline]
fn weigh(acc: &mut f64, f: FastSum, test: &SumTest, packets: u64, seen_share: f64, scale: f64) {
    let fires = match *test {
        SumTest::Holds(_) => true,
        SumTest::Fails(v) => f.holds_scaled(v, scale),
        SumTest::Wide => false,
    };
    if fires {
        *acc += clarion_adapt::seen_flow_weight(packets, seen_share);
    }
}

/// A flow that held a fast test ([`FastSum`]), its report waiting for
/// its entry, which holds the key: a report read it at once, a miss a
/// report at a million flows.
#[derive(Clone, Copy, Debug)]
pub(super) struct Fired {
    /// The walk's visit count when it held.
    visit: usize,
    owner: u32,
    tid: TriggerId,
    value: f64,
}

impl Fired {
    /// The held test's end, its flow's key read from the entry now.
    fn report(self, triggers: &[Option<Box<Trigger>>], flows: &FlowTable, s: &mut Sweep) {
        flow_tested(triggers, self.tid, &flows.key(self.owner), &[self.value], true, s);
    }
}

/// Visits a fired flow's report waits for its entry: at a million flows
/// a visit is ~35 ns and the entry a memory access away (4 visits left
/// the 1 M-flow sweep 5 % slower than with keys in the records; 16 as
/// fast).
const FIRED_DEFER: usize = 16;

/// How far ahead in a set's log the sweep loads records (a few lines,
/// which the hardware's stream prefetch would reach later: it follows a
/// stream only once it has seen it), and half as far the entries of
/// their flows where it reads every flow's key.
const LOG_AHEAD: usize = 8;

/// Tests one flow of a trigger tested per flow (see [`gather_set`]) as
/// any predicate (one threshold on a sum within 64 bits is tested in the
/// walk itself): its statistics in the swept half are the whole window of
/// its group.
fn test_flow(
    t: Triggers,
    tid: TriggerId,
    set: &MatchSet,
    rec: u32,
    key: &FlowKey,
    pos: usize,
    s: &mut Sweep,
) {
    let d = &mut s.direct;
    let Some(head) = t.heads.get_mut(tid as usize) else {
        return;
    };
    let Some(trig) = t.all.get_mut(tid as usize).and_then(Option::as_deref_mut) else {
        return;
    };
    d.accs.clear();
    d.accs.resize(trig.reads_len(), Acc::default());
    let packets = set.gather(rec, s.half, pos, &mut d.accs);
    if packets == 0 {
        return; // RTT samples only: no packet, no group
    }
    trig.values_into(&d.accs, &mut d.values);
    if trig.flow_states(s.epoch_start, key, &d.accs, &mut d.values) {
        s.flow_lasts.push(tid);
    }
    let fires = trig.fires(&d.values);
    if s.adapt && s.seen_share < 1.0 && trig.scales_with_traffic() {
        // Drops: weighed if it fires as seen or scaled back up (`weigh`).
        let scale = 1.0 / s.seen_share.max(f64::MIN_POSITIVE);
        if fires || trig.fires_scaled(&d.values, scale, &mut d.scratch) {
            *s.direct_scaled.entry(tid).or_default() +=
                clarion_adapt::seen_flow_weight(packets, s.seen_share);
        }
    }
    let d = &mut s.direct;
    if !head.tested() {
        head.mark_tested();
    }
    if fires || d.keep {
        // Lent to the call, which does not read `d.values` itself.
        let values = std::mem::take(&mut d.values);
        flow_tested(t.all, tid, key, &values, fires, s);
        s.direct.values = values;
    }
}

/// The end of a flow's test by trigger `tid` (its `values`, whether it
/// `fires`): the values kept for the epoch's history, the report.
fn flow_tested(
    triggers: &[Option<Box<Trigger>>],
    tid: TriggerId,
    key: &FlowKey,
    values: &[f64],
    fires: bool,
    s: &mut Sweep,
) {
    let d = &mut s.direct;
    // One flow per group: the group is the flow's key.
    if d.keep {
        d.kept.push(tid, key, values);
    }
    if fires {
        let Some(trig) = triggers.get(tid as usize).and_then(Option::as_deref) else {
            return;
        };
        debug_assert_eq!(*key, group_of(key, &trig.spec.granularity));
        if s.merge || s.adapt {
            s.reports
                .push(trig.report(d.kept.window(), key, values, &s.origin, d.completeness));
            s.report_triggers.push(tid);
        } else {
            s.firings
                .push(tid, report_group(key, &trig.spec.granularity), values);
        }
    }
}
