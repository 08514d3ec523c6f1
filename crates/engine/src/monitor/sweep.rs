//! The gather of a sweep, set by set.
//!
//! A sweep visits the match sets some member flow wrote in the swept epoch
//! (`Monitor::active_sets`), not the triggers: the triggers of a set (the
//! workload's eight a flow) all read the same flows and the same
//! statistics halves, so walking the set's list reads each flow's
//! entry and half once and hands them to every trigger of the set in
//! turn. That list is the swept half's: the flows first written in the
//! epoch, each listed on the write that reset its half (or on moving to
//! the set with the epoch's statistics), so no visit reads an idle flow;
//! a 1 M-flow sweep took 72 ms with one list a set of the flows written
//! in the last two epochs, 39 ms with these (docs/performance.md). A
//! trigger in several active sets is reached from each; results
//! never depend on the order (accumulators are integer sums, minima,
//! maxima and latest values; a window's groups and the reports are sorted
//! where order shows).

use clarion_report::{Completeness, Origin, Report};
use clarion_wire::FlowKey;

use crate::config::Tuning;
use crate::flow_list::FlowRef;
use crate::flow_table::{FlowEntry, FlowTable};
use crate::key::group_of;
use crate::match_set::MatchSet;
use crate::measure::Acc;
use crate::merge::WindowPartial;
use crate::prefetch::prefetch;
use crate::recent::EpochValues;
use crate::trigger::{Head, Trigger};
use crate::trigger_index::TriggerId;

use super::Monitor;

/// A sweep in progress: which epoch, and where it stopped.
#[derive(Debug)]
pub(super) struct Sweep {
    pub(super) epoch_start: u64,
    pub(super) epoch_end: u64,
    pub(super) half: usize,
    /// Start of the epoch now running; `None` at end of input (close every window).
    pub(super) next_start: Option<u64>,
    /// Packet time when it began: that of the first frame after the epoch.
    pub(super) begun_ns: u64,
    /// Sets to visit (a set may appear twice: see `Monitor::migrate`).
    pub(super) order: Vec<u32>,
    pub(super) set_pos: usize,
    pub(super) chunk: usize,
    pub(super) pos: usize,
    /// The triggers of the set being visited that take part in this sweep.
    pub(super) parts: Vec<Part>,
    /// Triggers whose window this sweep opened.
    pub(super) opened: Vec<TriggerId>,
    /// Triggers tested flow by flow that keep latest values (for
    /// `X_lastepoch`): their epoch ends with the gather.
    pub(super) flow_lasts: Vec<TriggerId>,
    pub(super) reports: Vec<Report>,
    pub(super) origin: Origin,
    /// For triggers tested per flow (see [`gather_set`]).
    pub(super) direct: Direct,
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
    /// Degraded mode: a set visit's counts per trigger position (kept to reuse).
    pub(super) direct_scratch: Vec<u64>,
    /// Degraded mode with `merge_output`: the counts of the windows of
    /// triggers tested here, for the merger's estimate.
    pub(super) window_counts: Vec<crate::merge::WindowCounts>,
    /// Degraded mode with `keep_health`: the swept epoch's record, pushed at
    /// the sweep's end with the accuracy of the windows it closed.
    pub(super) health: Option<clarion_report::Health>,
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
}

/// A trigger's part in the visit of one set: its position there, its id,
/// and whether it is tested flow by flow (else its flows join groups).
#[derive(Clone, Copy, Debug)]
pub(super) struct Part {
    pos: u32,
    tid: TriggerId,
    direct: bool,
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
                &mut self.flows,
                &mut self.sets,
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
            s.chunk = 0;
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
    /// | 4 | the set's header (every line the sweep reads) | `order` |
    /// | 3 | its list's first chunk, trigger ids and sum offsets | the header |
    /// | 2 | the first flow entries; the triggers' heads | the chunk, the ids |
    /// | 1 | the entries' statistics | the entries |
    ///
    /// So each set's data arrive while earlier ones are gathered. A load
    /// of a line not prefetched stalls the sweep: the header's second line
    /// and the trigger pointers were once ~40 % of its samples.
    #[inline]
    fn prefetch_sweep(&self, order: &[u32], pos: usize, half: usize) {
        let at = |k: usize| order.get(pos + k).and_then(|&s| self.sets.get(s as usize));
        if let Some(set) = at(4) {
            set.prefetch_header();
        }
        if let Some(set) = at(3) {
            prefetch(set.sweep_head(half).as_ptr());
            prefetch(set.triggers.as_ptr());
            prefetch(set.sum_at_ptr());
        }
        if let Some(set) = at(2) {
            for r in set.sweep_head(half).iter().take(2) {
                if let Some(e) = self.flows.entries.get(r.entry as usize) {
                    prefetch(e);
                }
            }
            // What a per-flow test reads of each trigger (see `Head`).
            let heads = self.heads.as_ptr();
            for &t in &set.triggers {
                prefetch(heads.wrapping_add(t as usize));
            }
        }
        if let Some(set) = at(1) {
            for r in set.sweep_head(half).iter().take(2) {
                if let Some(e) = self.flows.entries.get(r.entry as usize) {
                    set.prefetch(e.block, half);
                }
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
/// ran out. It walks the swept half's list of written flows and empties
/// it once walked.
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
fn gather_set(
    sid: u32,
    flows: &mut FlowTable,
    sets: &mut [MatchSet],
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
            parts.push(Part {
                pos: pos as u32,
                tid,
                direct,
            });
        }
    }
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
    // Degraded mode: flow-epochs per trigger tested flow by flow (by its
    // position in the set), and shed flow-epochs (each shed such trigger's).
    let mut direct_measured = std::mem::take(&mut s.direct_scratch);
    direct_measured.clear();
    if s.adapt {
        direct_measured.resize(set.triggers.len(), 0);
    }
    let any_direct_shed = shed_parts.iter().any(|p| p.1);
    let mut direct_shed = 0u64;
    let cost = parts.len().max(1);
    let mut list = std::mem::take(set.sweep_list(s.half));
    let mut done = true;
    'chunks: while s.chunk < list.chunk_count() {
        let Some(chunk) = list.chunk(s.chunk) else {
            break;
        };
        while s.pos < chunk.len() {
            if *budget == 0 {
                done = false;
                break 'chunks;
            }
            *budget = budget.saturating_sub(cost);
            if tuning.sweep_prefetch {
                prefetch_list(flows, set, chunk, s.pos, s.half, s.epoch_start);
            }
            let r = chunk[s.pos];
            let e = &flows.entries[r.entry as usize];
            // Stale (freed, or moved to another set): skipped before its
            // statistics are touched; the list is emptied after the visit.
            // Listed twice (moved away and back, or freed and its entry
            // reused in this set): the half's tag, consumed at the first
            // visit, tells.
            if !e.live || e.set != sid {
                s.pos += 1;
                continue;
            }
            let block = e.block;
            if set.has_epoch(block, s.half, s.epoch_start) {
                if s.adapt {
                    flow_epochs += 1;
                    packets_seen += set.packets_in(block, s.half);
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
                for p in &parts {
                    let pos = p.pos as usize;
                    if p.direct {
                        if s.adapt {
                            direct_measured[p.pos as usize] += 1;
                        }
                        let t = Triggers {
                            all: &mut *triggers,
                            heads: &mut *heads,
                        };
                        test_flow(t, p.tid, set, block, &e.key, pos, s);
                        continue;
                    }
                    let Some(trig) = triggers.get_mut(p.tid as usize).and_then(Option::as_deref_mut) else {
                        continue;
                    };
                    let g = group_of(&e.key, &trig.spec.granularity);
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
                    *packets += set.gather(block, s.half, pos, accs);
                }
                set.consume(block, s.half);
            }
            s.pos += 1;
        }
        s.chunk += 1;
        s.pos = 0;
    }
    if done {
        list.clear();
    }
    *set.sweep_list(s.half) = list;
    if s.adapt && flow_epochs > 0 {
        s.loads.push((sid, flow_epochs, packets_seen));
        for p in parts.iter().filter(|p| p.direct) {
            let n = direct_measured.get(p.pos as usize).copied().unwrap_or(0);
            s.direct_counts.entry(p.tid).or_default().0 += n;
        }
        for &(tid, _) in shed_parts.iter().filter(|p| p.1) {
            s.direct_counts.entry(tid).or_default().1 += direct_shed;
        }
    }
    s.parts = parts;
    s.shed_parts = shed_parts;
    s.direct_scratch = direct_measured;
    done
}

/// How far ahead in a set's list the sweep loads flow entries, and (half
/// that) the statistics of those entries: each visit is one entry and one
/// half, both misses once flows outnumber the cache, and a chain of
/// dependent misses per flow kept the sweep at one miss in flight (the
/// entry check was ~13 % of a 1 M-flow run's samples, the gather ~9 %).
const LIST_AHEAD: usize = 32;
const STATS_AHEAD: usize = LIST_AHEAD / 2;

/// Within one set's list, at visit `pos`: starts loading the entry
/// [`LIST_AHEAD`] flows on, and the swept half of the flow
/// [`STATS_AHEAD`] on if it had packets in the epoch (its entry was
/// requested `STATS_AHEAD` visits ago).
#[inline]
fn prefetch_list(flows: &FlowTable, set: &MatchSet, chunk: &[FlowRef], pos: usize, half: usize, epoch: u64) {
    if let Some(e) = chunk
        .get(pos + LIST_AHEAD)
        .and_then(|r| flows.entries.get(r.entry as usize))
    {
        // An entry (88 bytes) is not line-aligned: its first and last lines.
        let p: *const FlowEntry = e;
        prefetch(p);
        prefetch(p.wrapping_add(1).cast::<u8>().wrapping_sub(1));
    }
    if let Some(e) = chunk
        .get(pos + STATS_AHEAD)
        .and_then(|r| flows.entries.get(r.entry as usize))
    {
        if e.stats_ts >= epoch {
            set.prefetch(e.block, half);
        }
    }
}

/// Tests one flow of a trigger tested per flow (see [`gather_set`]): its
/// statistics in the swept half are the whole window of its group. A
/// `sum(x) op c` (the usual trigger) that does not hold reads nothing of
/// the trigger but its [`Head`]; the trigger itself is read to gather
/// other values and to report.
fn test_flow(
    t: Triggers,
    tid: TriggerId,
    set: &MatchSet,
    block: u32,
    key: &FlowKey,
    pos: usize,
    s: &mut Sweep,
) {
    let d = &mut s.direct;
    let Some(head) = t.heads.get_mut(tid as usize) else {
        return;
    };
    let one: f64;
    let (fires, values): (bool, &[f64]) = match head.sum_threshold().zip(set.read_sum(block, s.half, pos)) {
        Some((_, (0, _))) => return, // RTT samples only: no packet, no group
        Some((t, (_, v))) => {
            one = v;
            (t.holds(v), std::slice::from_ref(&one))
        }
        None => {
            let Some(trig) = t.all.get_mut(tid as usize).and_then(Option::as_deref_mut) else {
                return;
            };
            d.accs.clear();
            d.accs.resize(trig.reads_len(), Acc::default());
            if set.gather(block, s.half, pos, &mut d.accs) == 0 {
                return;
            }
            trig.values_into(&d.accs, &mut d.values);
            if trig.flow_states(s.epoch_start, key, &d.accs, &mut d.values) {
                s.flow_lasts.push(tid);
            }
            (trig.fires(&d.values), &d.values)
        }
    };
    if !head.tested() {
        head.mark_tested();
    }
    // One flow per group: the group is the flow's key.
    if d.keep {
        d.kept.push(tid, key, values);
    }
    if fires {
        let Some(trig) = t.all.get(tid as usize).and_then(Option::as_deref) else {
            return;
        };
        debug_assert_eq!(*key, group_of(key, &trig.spec.granularity));
        s.reports
            .push(trig.report(d.kept.window(), key, values, &s.origin, d.completeness));
        if s.merge || s.adapt {
            s.report_triggers.push(tid);
        }
    }
}
