//! Degraded mode: MONA's monitoring states inside the monitor (`--adapt`).
//!
//! # States
//! A flow's *full state* is the match set of every trigger it matched. Its
//! lighter states drop those triggers one at a time, least important first
//! (lowest `priority`, then the costliest, then the newest), down to a
//! default state that measures nothing and only counts the flow: MONA's
//! state graph (Fig. 4) is one chain per full set, `MatchSet::chain`, whose
//! sets are interned apart from full sets of the same triggers (they carry
//! what they `dropped`). When a full set is interned its shed order and
//! the predicted cost of each depth are computed, and its default state
//! interned; the other depths' sets when a flow first needs them.
//!
//! # Shedding
//! The configuration is one [`Shed`] `{steps, extra}` for the whole
//! monitor: every flow goes `steps` states down its chain, and a fraction
//! `extra` of them (by a hash of the key, so the same flows every time)
//! one more (MONA Alg. 1's `(j, x)`). A flow takes its state for the epoch
//! at its first packet of the epoch, not mid-epoch: a window's flow is
//! then measured for an epoch entirely or not at all. It moves only once
//! the previous epoch's statistics are swept (else they would be gathered
//! into the lighter set's triggers and lost for the others): a flow whose
//! first packet comes while that sweep is still pending moves when it
//! ends (`apply_deferred`), in the middle of its epoch. Moving copies the
//! flow's record of the epoch into the other set's log: work the model
//! does not price, which makes frequent changes of depth costly.
//!
//! # The model
//! [`StateCosts`] predicts a packet's time: the lookup, the update (a fixed
//! part and a part per word of statistics the state keeps), TCP state if
//! the state needs it, and a flow's share of the sweep (one flow-trigger
//! pair per trigger of the state per epoch it is active). A new flow adds
//! the insertion. [`Monitor::adapt_to`] turns the time available per
//! packet into a processing budget (MONA Eq. 4, with the last epoch's
//! share of new flows) and finds the least shedding that fits it, from the
//! last swept epoch's packets and flow-epochs per full set, with
//! `clarion_adapt::routine`. Shedding is computed from the full states
//! every time, so headroom restores flows the same way, but half the way
//! per decision (`damped`: moving flows costs copies the model does not
//! price, and a noisy budget would move them back and forth).
//!
//! # Accuracy
//! The sweep counts, per trigger and window, flow-epochs measured (the
//! flow was gathered into the trigger) and unmeasured (the flow matched it
//! but its state dropped it). At each window's close the trigger's
//! `clarion_adapt::RecallEstimator` turns them and the window's reports
//! into a recall estimate, carried by each report's completeness and, for
//! every closing window, by the epoch's health record. Where the window
//! gives something to extrapolate from (a report, or a group that fires
//! scaled up), it is estimated from the window itself instead, by the
//! monitor and the multi-worker merger alike, counting the packets
//! dropped before the monitor too (`clarion_adapt::groups`,
//! docs/adapt.md): flows are shed by hash, a uniform share of each
//! group's, and drops thin every group's packets, so the groups missed
//! are those that fire once their sums and counts are scaled back up and
//! those not seen at all (`Trigger::window_recall`). A trigger tested
//! flow by flow keeps only its reports, so in an epoch with drops the
//! sweep tests each of its flows scaled back up as well and sums the
//! weights of those that fire (`Sweep::direct_scaled`, for aggregates
//! that grow with traffic); else, and in the merger, the share of its
//! reports that survives another thinning estimates the drops' toll
//! (`Trigger::rethinned_recall`).
//!
//! # Accuracy control
//! With `AdaptConfig::accuracy_threshold`, each sweep's end runs MONA's
//! Alg. 2 (`clarion_adapt::recovery`) over the graph of every set: states
//! whose events all have recall estimates above the threshold (and a
//! headroom) donate a share of their flows to the default state, and full
//! states with an event below it get as much back of the flows shedding
//! took from them, at equal predicted time (Eq. 9). The moves stand
//! (`Adapt::revert`, `Adapt::donate`: shares of flows by hashes
//! independent of the shedding's) and accumulate window by window; a
//! donor whose own estimate falls below the threshold takes half back;
//! all are dropped once nothing is shed or when the routine saturates, and
//! the flows given back are halved when more shedding is asked (the moves
//! are balanced at the depth they were made at, and the routine does not
//! price them).
//!
//! # Cost
//! Nothing in normal mode but a predictable branch per known flow's
//! packet. In degraded mode: a compare per packet, a hash and maybe a
//! move per flow-epoch when the configuration asks for another state, and
//! per set and flow-epoch a few counters in the sweep.

use clarion_adapt::{
    fit_chains, GraphBuilder, RecallEstimator, Recovery, RecoveryConfig, Shed, StateGraph, Transition,
    WindowObservation,
};
use clarion_report::EventAccuracy;
use rustc_hash::FxHashMap;

use crate::config::{AdaptConfig, StateCosts};
use crate::flow_table::{hash_key, NO_ENTRY, NO_SET};
use crate::match_set::UNINTERNED;
use crate::measure::StatFlags;
use crate::trigger_index::TriggerId;

use super::bypass::MAX_BYPASS;
use super::Monitor;

/// Accuracy records kept for [`Monitor::take_accuracy`] when nobody takes them.
const KEPT_ACCURACY: usize = 4096;

/// Importance of an event without a `priority` (the middle of 0..=100).
const DEFAULT_PRIORITY: u8 = 50;

/// Degraded mode's state in a monitor.
#[derive(Debug)]
pub(super) struct Adapt {
    pub(super) config: AdaptConfig,
    pub(super) shed: Shed,
    recall: RecallBook,
    /// The last swept epoch's load, per full set: (set, packets, flow-epochs).
    pub(super) load: Vec<(u32, u64, u64)>,
    /// New flows in the current epoch and in the last swept one.
    pub(super) new_flows: u64,
    pub(super) last_new_flows: u64,
    /// The latest packet's flow entry, whether it was new, whether it was
    /// its flow's first of the epoch (for [`Monitor::last_packet_cost_ns`]).
    pub(super) last_packet: (u32, bool, bool),
    /// Windows closed by the sweep in progress, for its health record.
    pub(super) accuracy: Vec<EventAccuracy>,
    /// Without a health stream: closed windows' accuracy for
    /// [`Monitor::take_accuracy`], the latest [`KEPT_ACCURACY`] at most.
    ready: std::collections::VecDeque<EventAccuracy>,
    /// Latest recall estimate per trigger id (accuracy control).
    pub(super) recall_now: Vec<f64>,
    /// Accuracy control: the graph of every set (state id = set id) and
    /// Alg. 2's state over it, rebuilt when sets are added.
    control: Option<(StateGraph, Recovery)>,
    /// Accuracy control's standing moves: per full set, the share of its
    /// shed flows given back their full state; per set, the share of its
    /// flows sent to the default state (cumulative, by independent hashes).
    pub(super) revert: FxHashMap<u32, f64>,
    pub(super) donate: FxHashMap<u32, f64>,
    /// [`Monitor::adapt_to`]'s buffer of chain costs, kept between calls.
    scratch: Vec<f64>,
    /// Flows (entry, generation) whose move waits for the sweep in progress.
    pub(super) deferred: Vec<(u32, u32)>,
    /// The share of flows to bypass from the next epoch on (`bypass.rs`).
    pub(super) bypass: f64,
    /// Whether the latest packet was bypassed (for [`Monitor::last_packet_cost_ns`]).
    pub(super) last_bypassed: bool,
}

/// What [`Monitor::adapt_to`] decided, from the last swept epoch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShedDecision {
    /// The time per packet available, as given.
    pub available_ns: f64,
    /// What is left for processing once lookups and insertions are paid (MONA's T_p^target).
    pub target_ns: f64,
    /// Predicted processing time per packet with every flow in its full
    /// state, and with the routine's shedding (`routine`).
    pub full_ns: f64,
    pub predicted_ns: f64,
    /// What MONA's Alg. 1 asks for, and what is applied: the same, but
    /// when the routine asks for less shedding than in force, which is
    /// given back half the way each time (see [`Monitor::adapt_to`]).
    pub routine: Shed,
    pub shed: Shed,
    /// Even measuring nothing does not fit the target: the states' routine
    /// is saturated, and flows are bypassed (`bypass`).
    pub saturated: bool,
    /// The share of flows bypassed from the next epoch (`bypass.rs`):
    /// what is asked to bring the lightest states' time down to the
    /// time available, given back half the way when less is asked.
    pub bypass: f64,
}

/// The last swept epoch's figures in degraded mode.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EpochLoad {
    pub packets: u64,
    pub flow_epochs: u64,
    pub new_flows: u64,
    /// Predicted time of the epoch's work under its states, nanoseconds.
    pub predicted_ns: f64,
}

impl Adapt {
    pub(super) fn new(config: AdaptConfig) -> Self {
        Adapt {
            recall: RecallBook::new(&config),
            config,
            shed: Shed::NONE,
            load: Vec::new(),
            new_flows: 0,
            last_new_flows: 0,
            last_packet: (NO_ENTRY, false, false),
            accuracy: Vec::new(),
            ready: std::collections::VecDeque::new(),
            recall_now: Vec::new(),
            control: None,
            revert: FxHashMap::default(),
            donate: FxHashMap::default(),
            scratch: Vec::new(),
            deferred: Vec::new(),
            bypass: 0.0,
            last_bypassed: false,
        }
    }

    /// The recall estimate of trigger `tid` for a window just closed
    /// (`None` if the estimator's settings are out of range), kept as the
    /// trigger's latest for accuracy control.
    pub(super) fn estimate(
        &mut self,
        tid: TriggerId,
        measured: u64,
        unmeasured: u64,
        found: u64,
    ) -> Option<f64> {
        let recall = self.recall.estimate(tid, measured, unmeasured, found)?;
        let i = tid as usize;
        if self.recall_now.len() <= i {
            self.recall_now.resize(i + 1, 1.0);
        }
        self.recall_now[i] = recall;
        Some(recall)
    }
}

impl Adapt {
    /// Keeps `recall` as trigger `tid`'s latest estimate (accuracy control),
    /// where it was estimated otherwise than by [`Adapt::estimate`].
    pub(super) fn note_recall(&mut self, tid: TriggerId, recall: f64) {
        let i = tid as usize;
        if self.recall_now.len() <= i {
            self.recall_now.resize(i + 1, 1.0);
        }
        self.recall_now[i] = recall;
    }
}

/// Each trigger's recall estimator (the monitor's, and a host merger's for
/// the windows it merges): MONA's per-flow estimator, a flow-epoch being
/// the unit.
#[derive(Debug)]
pub(crate) struct RecallBook {
    windows: usize,
    lambda: f64,
    /// By trigger id.
    estimators: Vec<Option<RecallEstimator>>,
}

impl RecallBook {
    pub(crate) fn new(config: &AdaptConfig) -> Self {
        RecallBook {
            windows: config.recall_windows,
            lambda: config.recall_lambda,
            estimators: Vec::new(),
        }
    }

    /// The recall estimate of trigger `tid` for a window just closed, with
    /// `found` reports from `measured` flow-epochs and `unmeasured` shed
    /// ones (`None` if the settings are out of range).
    pub(crate) fn estimate(
        &mut self,
        tid: TriggerId,
        measured: u64,
        unmeasured: u64,
        found: u64,
    ) -> Option<f64> {
        let i = tid as usize;
        if self.estimators.len() <= i {
            self.estimators.resize_with(i + 1, || None);
        }
        if self.estimators[i].is_none() {
            // Every report's group had a measured flow-epoch: at most one
            // report per flow-epoch, so the estimate per flow is capped at
            // 1. Shedding picks flows by hash, so a window's measured flows
            // are a uniform sample: a shift of the traffic resets the history.
            let e = RecallEstimator::new(self.windows, self.lambda)
                .and_then(|e| e.with_cap(1.0)?.with_shift_reset(3.0));
            self.estimators[i] = Some(e.ok()?);
        }
        self.estimators[i]
            .as_mut()?
            .observe(WindowObservation {
                measured_flows: measured,
                events_found: found,
                variance: None,
                unmeasured_flows: unmeasured,
            })
            .ok()
            .map(|e| e.recall)
    }
}

/// A uniform fraction in `[0, 1)` from a flow's key, independent of where
/// the flow table puts it (another mix of the same hash's bits); `salt`
/// gives independent fractions for independent choices.
fn key_fraction(h: u64, salt: u64) -> f64 {
    let h = h ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mixed = (h ^ (h >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let mixed = mixed ^ (mixed >> 32);
    (mixed >> 11) as f64 / (1u64 << 53) as f64
}

/// Salts of the three choices a flow's hash makes.
const SALT_DEPTH: u64 = 0;
const SALT_REVERT: u64 = 1;
const SALT_DONATE: u64 = 2;

/// The shedding to apply when Alg. 1 asks for `wanted` and `current` is
/// in force: more shedding at once (drops are near), less only half the
/// way. Every change of depth moves flows between states, a copy of their
/// statistics each, which the model does not price; giving flows back by
/// halves keeps a noisy budget from moving them back and forth every
/// epoch, at the price of a few epochs' lag in restoring them (a depth
/// within 0.05 of the wanted one snaps to it).
fn damped(current: Shed, wanted: Shed) -> Shed {
    let (c, w) = (current.depth(), wanted.depth());
    if w >= c || c - w < 0.05 {
        return wanted;
    }
    let d = c - (c - w) / 2.0;
    Shed {
        steps: d.floor() as u32,
        extra: d - d.floor(),
    }
}

/// The share of flows to bypass when `wanted` is asked and `current` is
/// in force: as [`damped`], more at once, less half the way (a share
/// within 0.01 of the wanted one snaps to it): a flow that comes back from
/// being bypassed has lost its epoch's start, and may be a new flow again.
fn damped_share(current: f64, wanted: f64) -> f64 {
    if wanted >= current || current - wanted < 0.01 {
        wanted
    } else {
        current - (current - wanted) / 2.0
    }
}

/// The predicted update time of a set's member flow's packet.
pub(super) fn set_cost(costs: &StateCosts, update_words: usize, needs_tcp: bool) -> f64 {
    costs.update_ns + costs.per_word_ns * update_words as f64 + if needs_tcp { costs.tcp_ns } else { 0.0 }
}

impl Monitor {
    /// Prepares the chain of lighter states of full set `full` (degraded
    /// mode): the order its triggers are shed in and what each depth
    /// costs. The lighter sets themselves are interned when a flow first
    /// needs them ([`Monitor::chain_set`]), but the default state now (the
    /// one accuracy control donates to). Cost: O(K log K + K · reads) for
    /// K triggers.
    pub(super) fn build_chain(&mut self, full: u32) {
        let Some(adapt) = self.adapt.as_ref() else { return };
        let costs = adapt.config.costs;
        let triggers = self.sets[full as usize].triggers.clone();
        let live = |t: TriggerId| self.triggers.get(t as usize).and_then(Option::as_deref);
        // Least important first: lowest priority, then costliest, then newest.
        let mut order: Vec<(u8, std::cmp::Reverse<usize>, std::cmp::Reverse<TriggerId>)> = triggers
            .iter()
            .map(|&t| {
                let (prio, words) = live(t).map_or((DEFAULT_PRIORITY, 0), |tr| {
                    let words = tr.reads.iter().map(|(_, f)| f.words()).sum::<usize>()
                        + if tr.spec.needs_connection_state() { 8 } else { 0 };
                    (tr.spec.priority.unwrap_or(DEFAULT_PRIORITY), words)
                });
                (prio, std::cmp::Reverse(words), std::cmp::Reverse(t))
            })
            .collect();
        order.sort_unstable();
        let order: Vec<TriggerId> = order.into_iter().map(|(_, _, std::cmp::Reverse(t))| t).collect();
        // Costs from the default state up: the set at depth d keeps
        // order[d..]; its words are the union of their measures', as
        // `MatchSet::new` lays them out (tag and packet count included).
        let k = order.len();
        let mut chain_costs = vec![0.0; k + 1];
        let mut union: Vec<(&crate::measure::Expr, StatFlags)> = Vec::new();
        let mut tcp = false;
        chain_costs[k] = set_cost(&costs, 2, false);
        for d in (0..k).rev() {
            if let Some(tr) = live(order[d]) {
                for (e, f) in &tr.reads {
                    match union.iter_mut().find(|(x, _)| *x == e) {
                        Some(u) => u.1 = u.1.union(*f),
                        None => union.push((e, *f)),
                    }
                }
                tcp |= tr.spec.needs_connection_state();
            }
            let words = 2 + union.iter().map(|(_, f)| f.words()).sum::<usize>();
            chain_costs[d] = set_cost(&costs, words, tcp);
        }
        let mut chain = vec![UNINTERNED; k + 1];
        chain[0] = full;
        let set = &mut self.sets[full as usize];
        set.shed_order = order;
        set.chain_costs = chain_costs;
        set.chain = chain;
        self.chain_set(full, k);
    }

    /// The set of full set `full`'s chain at `depth` (at most its last),
    /// interned on first use.
    pub(super) fn chain_set(&mut self, full: u32, depth: usize) -> u32 {
        let Some(f) = self.sets.get(full as usize) else {
            return full;
        };
        let Some(last) = f.chain.len().checked_sub(1) else {
            return full;
        };
        let depth = depth.min(last);
        if f.chain[depth] != UNINTERNED {
            return f.chain[depth];
        }
        let mut dropped = f.shed_order[..depth].to_vec();
        let mut kept = f.shed_order[depth..].to_vec();
        dropped.sort_unstable();
        kept.sort_unstable();
        let s = self.intern_shed(&kept, &dropped);
        self.sets[full as usize].chain[depth] = s;
        s
    }

    /// Puts flow `idx` in the state the configuration gives it, at its
    /// first packet of an epoch (see the module documentation).
    #[cold]
    #[inline(never)]
    pub(super) fn apply_shed(&mut self, idx: u32) {
        let Some(adapt) = self.adapt.as_ref() else { return };
        let shed = adapt.shed;
        let e = &self.flows.entries[idx as usize];
        if e.set == NO_SET {
            return;
        }
        let set = &self.sets[e.set as usize];
        // Nothing shed nor moved, and the flow in its full state: the usual case.
        if shed == Shed::NONE && set.full == e.set && adapt.revert.is_empty() && adapt.donate.is_empty() {
            return;
        }
        let full = set.full;
        let Some(last) = self
            .sets
            .get(full as usize)
            .and_then(|f| f.chain.len().checked_sub(1))
        else {
            return;
        };
        let h = hash_key(&self.flows.key(idx));
        let depth = (shed.steps_for(key_fraction(h, SALT_DEPTH)) as usize).min(last);
        let current = e.set;
        // Accuracy control's standing moves (see `recover`).
        let at = if depth > 0
            && adapt
                .revert
                .get(&full)
                .is_some_and(|&f| key_fraction(h, SALT_REVERT) < f)
        {
            0
        } else {
            depth
        };
        let donated = at == depth;
        let mut want = self.chain_set(full, at);
        if donated {
            let Some(adapt) = self.adapt.as_ref() else { return };
            if adapt
                .donate
                .get(&want)
                .is_some_and(|&f| key_fraction(h, SALT_DONATE) < f)
            {
                want = self.chain_set(full, last);
            }
        }
        if want == current {
            return;
        }
        if let Some(s) = &self.sweep {
            let at = self.flows.entries[idx as usize].rec[s.half & 1];
            let set = &self.sets[current as usize];
            if set
                .find(s.half, s.epoch_start, idx, at)
                .is_some_and(|rec| set.has_epoch(rec, s.half, s.epoch_start))
            {
                // Its last epoch is not swept yet: moved when the sweep ends.
                let gen = self.flows.entries[idx as usize].gen;
                if let Some(a) = self.adapt.as_mut() {
                    a.deferred.push((idx, gen));
                }
                return;
            }
        }
        self.migrate_to(idx, want);
    }

    /// At a sweep's end: the flows whose move waited for it (their last
    /// epoch was being swept) take their state now, in the middle of
    /// their epoch. The epoch's packets so far count for the events both
    /// states measure; for the others the flow-epoch counts as shed (a
    /// flow leaving them) or as measured from then on (a flow coming back).
    pub(super) fn apply_deferred(&mut self) {
        let Some(a) = self.adapt.as_mut() else { return };
        let deferred = std::mem::take(&mut a.deferred);
        for &(idx, gen) in &deferred {
            let live = self
                .flows
                .entries
                .get(idx as usize)
                .is_some_and(|e| e.live && e.gen == gen);
            if live {
                self.apply_shed(idx);
            }
        }
        if let Some(a) = self.adapt.as_mut() {
            // The buffer, kept for the next sweep.
            let mut d = deferred;
            d.clear();
            if a.deferred.is_empty() {
                a.deferred = d;
            }
        }
    }

    /// Degraded mode's per-packet bookkeeping: what the predicted time of
    /// the packet just processed depends on, kept for
    /// [`Monitor::last_packet_cost_ns`] (computed only when asked).
    #[inline]
    pub(super) fn note_packet(&mut self, idx: u32, new_flow: bool, first_in_epoch: bool) {
        let Some(a) = self.adapt.as_mut() else { return };
        if new_flow {
            a.new_flows += 1;
        }
        a.last_packet = (idx, new_flow, first_in_epoch);
        a.last_bypassed = false;
    }

    /// Degraded mode: the predicted time of the latest packet processed,
    /// nanoseconds (0 in normal mode): the lookup, its state's update, a
    /// new flow's insertion, and the flow's share of the sweep on its
    /// first packet of an epoch. A simulated clock advances by it.
    pub fn last_packet_cost_ns(&self) -> f64 {
        let Some(a) = self.adapt.as_ref() else { return 0.0 };
        let (idx, new_flow, first_in_epoch) = a.last_packet;
        let c = a.config.costs;
        if a.last_bypassed {
            return c.bypass_ns;
        }
        let mut ns = c.lookup_ns;
        if new_flow {
            ns += c.insert_ns;
        }
        if let Some(set) = self
            .flows
            .entries
            .get(idx as usize)
            .filter(|e| e.set != NO_SET)
            .and_then(|e| self.sets.get(e.set as usize))
        {
            ns += set.cost_ns;
            if first_in_epoch {
                ns += c.pair_ns * set.triggers.len() as f64;
            }
        }
        ns
    }

    /// Keeps closed windows' accuracy for [`Monitor::take_accuracy`].
    pub(super) fn keep_accuracy(&mut self, records: Vec<EventAccuracy>) {
        let Some(a) = self.adapt.as_mut() else { return };
        a.ready.extend(records);
        while a.ready.len() > KEPT_ACCURACY {
            a.ready.pop_front();
        }
    }

    /// Degraded mode without `keep_health`: the accuracy of every window
    /// closed since the last call, oldest first (with `keep_health` it
    /// rides on the health records instead). At most the latest 4,096
    /// are kept between calls.
    pub fn take_accuracy(&mut self, out: &mut Vec<EventAccuracy>) {
        if let Some(a) = self.adapt.as_mut() {
            out.extend(a.ready.drain(..));
        }
    }

    /// Degraded mode: the shedding in force (`None` in normal mode).
    pub fn shed(&self) -> Option<Shed> {
        self.adapt.as_ref().map(|a| a.shed)
    }

    /// Degraded mode: imposes a shedding (flows take it at their next
    /// epoch). For experiments and tests; [`Monitor::adapt_to`] decides
    /// it otherwise. Ignored in normal mode.
    pub fn set_shed(&mut self, shed: Shed) {
        if let Some(a) = self.adapt.as_mut() {
            a.shed = shed;
        }
    }

    /// Degraded mode: the last swept epoch's load.
    pub fn epoch_load(&self) -> Option<EpochLoad> {
        let a = self.adapt.as_ref()?;
        let mut l = EpochLoad {
            new_flows: a.last_new_flows,
            ..EpochLoad::default()
        };
        let c = a.config.costs;
        for &(full, m, f) in &a.load {
            l.packets += m;
            l.flow_epochs += f;
            // At the depth the set's flows were in: approximated by the
            // configuration's average over the chain (exact per flow in
            // `last_packet_cost_ns`).
            let mut cost = Vec::new();
            self.chain_costs(full, m, f, &c, &mut cost);
            let d = a.shed.steps as usize;
            let at = |d: usize| {
                cost.get(d.min(cost.len().saturating_sub(1)))
                    .copied()
                    .unwrap_or(0.0)
            };
            let per = (1.0 - a.shed.extra) * at(d) + a.shed.extra * at(d + 1);
            l.predicted_ns += m as f64 * (c.lookup_ns + per);
        }
        l.predicted_ns += a.last_new_flows as f64 * c.insert_ns;
        Some(l)
    }

    /// Appends to `out` the per-packet processing time of full set
    /// `full`'s flows at each depth of its chain, for `m` packets and `f`
    /// flow-epochs an epoch.
    fn chain_costs(&self, full: u32, m: u64, f: u64, c: &StateCosts, out: &mut Vec<f64>) {
        let per_flow = if m == 0 { 0.0 } else { f as f64 / m as f64 };
        let Some(fs) = self.sets.get(full as usize) else {
            return;
        };
        if fs.chain_costs.is_empty() {
            out.push(fs.cost_ns + c.pair_ns * fs.triggers.len() as f64 * per_flow);
            return;
        }
        let k = fs.chain_costs.len() - 1;
        out.extend(
            fs.chain_costs
                .iter()
                .enumerate()
                .map(|(d, cost)| cost + c.pair_ns * (k - d) as f64 * per_flow),
        );
    }

    /// Degraded mode: chooses the shedding for the next epochs from the
    /// time available per packet (`available_ns`: the window over the
    /// packets expected in it, queue included) and the last swept epoch's
    /// load. `None` in normal mode or before any epoch was swept.
    pub fn adapt_to(&mut self, available_ns: f64) -> Option<ShedDecision> {
        let a = self.adapt.as_ref()?;
        if a.load.is_empty() {
            return None;
        }
        let c = a.config.costs;
        let usable = available_ns * a.config.utilization.clamp(0.0, 1.0);
        let packets: u64 = a.load.iter().map(|l| l.1).sum();
        let new_ratio = if packets == 0 {
            0.0
        } else {
            (a.last_new_flows as f64 / packets as f64).min(1.0)
        };
        // MONA Eq. 4: (1 - λf)(Tr + Tp) + λf·Ti = available, with Ti the
        // whole time of a new flow's packet (insertion, lookup, update).
        // When every packet began a flow (an epoch of a few packets), Eq. 4
        // does not depend on the shedding: nothing to shed if Ti fits, and
        // shedding cannot help if it does not (only bypassing can).
        let target = if new_ratio >= 1.0 {
            if usable >= c.insert_ns {
                f64::INFINITY
            } else {
                0.0
            }
        } else {
            ((usable - new_ratio * c.insert_ns) / (1.0 - new_ratio) - c.lookup_ns).max(0.0)
        };
        // The chains' costs, one flat buffer kept from call to call.
        let adapt = self.adapt.as_mut()?;
        let mut costs = std::mem::take(&mut adapt.scratch);
        let load = std::mem::take(&mut adapt.load);
        costs.clear();
        let mut bounds = Vec::with_capacity(load.len());
        for &(full, m, f) in &load {
            let from = costs.len();
            self.chain_costs(full, m, f, &c, &mut costs);
            bounds.push((m, from, costs.len()));
        }
        let rows: Vec<(u64, &[f64])> = bounds.iter().map(|&(m, a, b)| (m, &costs[a..b])).collect();
        let plan = fit_chains(&rows, target);
        drop(rows);
        if let Some(a) = self.adapt.as_mut() {
            a.scratch = costs;
            a.load = load;
        }
        let plan = plan.ok()?;
        let current = self.adapt.as_ref().map_or(Shed::NONE, |a| a.shed);
        let shed = damped(current, plan.shed);
        // Below the lightest states: bypass a share of flows, so that
        // (1 − b)·T_lightest + b·T_bypass is the time available, where
        // T_lightest is Eq. 4's left side at the routine's deepest shedding.
        let wanted_bypass = if plan.saturated {
            let lightest = (1.0 - new_ratio) * (c.lookup_ns + plan.predicted_ns) + new_ratio * c.insert_ns;
            if lightest > c.bypass_ns {
                ((lightest - usable) / (lightest - c.bypass_ns)).clamp(0.0, MAX_BYPASS)
            } else {
                0.0
            }
        } else {
            0.0
        };
        let current_bypass = self.adapt.as_ref().map_or(0.0, |a| a.bypass);
        let bypass = damped_share(current_bypass, wanted_bypass);
        if let Some(a) = self.adapt.as_mut() {
            // Accuracy control's moves are balanced at the depth they were
            // made at, and the routine does not price them: a load that
            // saturates the routine leaves no time to rebalance (they all
            // go), and a rising one (more shedding asked) halves the
            // flows they gave back.
            if plan.saturated {
                a.revert.clear();
                a.donate.clear();
            } else if plan.shed.depth() > current.depth() {
                a.revert.retain(|_, share| {
                    *share /= 2.0;
                    *share >= 1e-3
                });
            }
        }
        let decision = ShedDecision {
            available_ns,
            target_ns: target,
            full_ns: plan.full_ns,
            predicted_ns: plan.predicted_ns,
            routine: plan.shed,
            shed,
            saturated: plan.saturated,
            bypass,
        };
        if let Some(a) = self.adapt.as_mut() {
            a.shed = shed;
            a.bypass = bypass;
        }
        // More at once (drops are near), for the flows not yet measured in
        // the epoch; less from the next epoch.
        self.bypass.raise(bypass, self.now);
        Some(decision)
    }

    /// Degraded mode, after a sweep's gather: the recall of each trigger
    /// tested flow by flow, whose window is the swept epoch, onto its
    /// reports (all of the sweep's so far are such triggers').
    pub(super) fn estimate_direct(&mut self, s: &mut super::Sweep) {
        let Some(a) = self.adapt.as_mut() else { return };
        let counts = std::mem::take(&mut s.direct_counts);
        let scaled = std::mem::take(&mut s.direct_scaled);
        for (tid, (measured, shed)) in counts {
            let bypassed = s.direct_bypassed.get(&tid).copied().unwrap_or(0.0);
            let unmeasured = shed + bypassed.round() as u64;
            let found = s.report_triggers.iter().filter(|&&t| t == tid).count() as u64;
            if s.merge {
                s.window_counts.push(crate::merge::WindowCounts {
                    trigger: tid,
                    window: clarion_report::Window {
                        start_ns: s.epoch_start,
                        end_ns: s.epoch_end,
                    },
                    measured,
                    unmeasured,
                });
            }
            let mona = a.estimate(tid, measured, unmeasured, found);
            let Some(t) = self.triggers.get(tid as usize).and_then(Option::as_deref) else {
                continue;
            };
            let recall = match scaled.get(&tid) {
                // Drops: the measured share, times the reports over the
                // flows that fire as seen or scaled back up, each standing
                // for the flows like it every packet of which was dropped.
                Some(&weights) if weights > 0.0 && measured > 0 => {
                    let p = measured as f64 / (measured + unmeasured) as f64;
                    Some(p * (found as f64 / weights).min(1.0))
                }
                // No drops, or no flow fires even scaled up: the measured
                // share, times that of the reports that survive another
                // thinning by the drops (`mona` without a report).
                _ => {
                    let mine = s
                        .reports
                        .iter()
                        .zip(&s.report_triggers)
                        .filter(|(_, &t)| t == tid)
                        .map(|(r, _)| r);
                    t.rethinned_recall(mona, (measured, unmeasured), found, mine, &s.direct.completeness)
                }
            };
            if let Some(r) = recall.filter(|_| recall != mona) {
                a.note_recall(tid, r);
            }
            for (r, _) in s
                .reports
                .iter_mut()
                .zip(&s.report_triggers)
                .filter(|(_, &t)| t == tid)
            {
                r.completeness.degraded = true;
                r.completeness.flows_unmeasured = unmeasured;
                r.completeness.recall_estimate = recall;
            }
            a.accuracy.push(EventAccuracy {
                event: t.spec.name.clone(),
                window: clarion_report::Window {
                    start_ns: s.epoch_start,
                    end_ns: s.epoch_end,
                },
                reports: found,
                flows_measured: measured,
                flows_unmeasured: unmeasured,
                recall_estimate: recall.unwrap_or(f64::NAN),
            });
        }
    }

    /// Accuracy control at a sweep's end (MONA Alg. 2 with Eq. 9, see
    /// `clarion_adapt::recovery`): over the graph of every set, the
    /// latest recall estimate of each trigger, the flow-epochs of each set
    /// in the swept epoch and the flows shedding moved from each full set,
    /// finds CPU-neutral moves and adds them to the standing ones. Cleared
    /// when nothing is shed (no overload: every flow in its full state).
    pub(super) fn recover(&mut self, per_set: &[(u32, u64, u64)]) {
        let n = self.sets.len();
        let Some(a) = self.adapt.as_mut() else { return };
        let Some(threshold) = a.config.accuracy_threshold else {
            return;
        };
        if a.shed == Shed::NONE {
            a.revert.clear();
            a.donate.clear();
            return;
        }
        if a.control.as_ref().is_none_or(|(g, _)| g.len() != n) {
            a.control = None;
            let mut b = GraphBuilder::new();
            for (id, set) in self.sets.iter().enumerate() {
                // The next deeper state of its chain that exists.
                let lighter = self.sets.get(set.full as usize).and_then(|f| {
                    let d = f.chain.iter().position(|&c| c as usize == id)?;
                    f.chain[d + 1..].iter().copied().find(|&c| c != UNINTERNED)
                });
                let tasks: Vec<u16> = set
                    .triggers
                    .iter()
                    .filter_map(|&t| u16::try_from(t).ok())
                    .collect();
                b.add_state(lighter, set.cost_ns, &tasks);
            }
            let config = RecoveryConfig {
                threshold,
                headroom: 0.05,
                ..RecoveryConfig::default()
            };
            if let Ok(g) = b.build() {
                if let Ok(r) = Recovery::new(config, &g) {
                    a.control = Some((g, r));
                }
            }
        }
        let Some((graph, recovery)) = a.control.as_mut() else {
            return;
        };
        let mut flows = vec![0u64; n];
        let mut transitions = Vec::new();
        for &(sid, f, _) in per_set {
            if let Some(x) = flows.get_mut(sid as usize) {
                *x += f;
            }
            let full = self.sets[sid as usize].full;
            if full != sid {
                transitions.push(Transition {
                    from: full,
                    to: sid,
                    flows: f,
                });
            }
        }
        let mut accuracy = a.recall_now.clone();
        accuracy.resize(graph.task_count().max(accuracy.len()), 1.0);
        for x in &mut accuracy {
            *x = x.clamp(0.0, 1.0);
        }
        // A donor that fell below the threshold itself takes half its
        // donated flows back (Alg. 2 never makes a rich task poor on
        // purpose; the estimate's lag can).
        a.donate.retain(|&state, share| {
            let poor = graph
                .tasks(state)
                .iter()
                .any(|&t| accuracy.get(usize::from(t)).is_some_and(|&r| r < threshold));
            if poor {
                *share /= 2.0;
            }
            *share >= 1e-3
        });
        let Ok(moves) = recovery.rebalance(graph, &accuracy, &flows, &transitions) else {
            return;
        };
        for m in moves {
            let r = a.revert.entry(m.revert_state).or_insert(0.0);
            *r = (*r + m.delta_plus).min(1.0);
            let d = a.donate.entry(m.from_state).or_insert(0.0);
            *d = (*d + m.delta_minus).min(1.0);
        }
    }

    /// At a sweep's end (degraded mode): the epoch's load per full set,
    /// from what the sweep counted per set.
    pub(super) fn end_epoch_load(&mut self, per_set: &[(u32, u64, u64)]) {
        let Some(a) = self.adapt.as_mut() else { return };
        a.load.clear();
        let mut at: rustc_hash::FxHashMap<u32, usize> = rustc_hash::FxHashMap::default();
        for &(sid, flows, packets) in per_set {
            let full = self.sets.get(sid as usize).map_or(sid, |s| s.full);
            let i = *at.entry(full).or_insert_with(|| {
                a.load.push((full, 0, 0));
                a.load.len() - 1
            });
            a.load[i].1 += packets;
            a.load[i].2 += flows;
        }
        a.last_new_flows = std::mem::take(&mut a.new_flows);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_shedding_at_once_less_by_halves() {
        let s = |steps, extra| Shed { steps, extra };
        assert_eq!(damped(Shed::NONE, s(2, 0.5)), s(2, 0.5));
        assert_eq!(damped(s(1, 0.0), s(1, 0.2)), s(1, 0.2));
        assert_eq!(damped(s(4, 0.0), Shed::NONE), s(2, 0.0));
        assert_eq!(damped(s(2, 0.0), Shed::NONE), s(1, 0.0));
        assert_eq!(damped(s(1, 0.0), Shed::NONE), s(0, 0.5));
        assert_eq!(damped(s(0, 0.04), Shed::NONE), Shed::NONE);
        // Restoring converges: a dozen decisions take 40 steps back to none.
        let mut cur = s(40, 0.0);
        let mut n = 0;
        while cur != Shed::NONE {
            cur = damped(cur, Shed::NONE);
            n += 1;
        }
        assert!(n <= 12, "{n}");
    }
}
