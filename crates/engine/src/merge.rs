//! Host-level merge: several workers' monitors report as one.
//!
//! # What?
//! A host runs one [`Monitor`](crate::Monitor) per worker core, each with
//! its own flow table and triggers (no locks on the packet path), and its
//! driver spreads flows over the workers: all packets of a flow reach the
//! same worker, and both directions of a connection the same one (TCP state
//! and RTT samples need both). A group coarser than a flow (`per src_ip`,
//! `per dst_ip/24`, …) can then have flows on several workers, so no worker
//! may test its predicate alone.
//!
//! With [`MonitorConfig::merge_output`](crate::MonitorConfig::merge_output)
//! a worker's sweep hands out, for each window it closes, every group's
//! *statistics* (the accumulators the sweep merged flows into: counts, sums,
//! minima, maxima, sums of squares, latest values), not values and not
//! reports. The [`Merger`] combines the workers' statistics of the same
//! trigger, window and group, then computes the values, tests the predicate
//! and builds the reports with the very code a monitor uses. Statistics
//! merge exactly (integer sums and counts add, minima and maxima combine,
//! the latest value is the one with the latest time), and averages and
//! standard deviations come from the merged sums and counts, so a merged
//! report equals the one monitor's bit for bit.
//!
//! # Watermarks and order
//! Each finished sweep's [`Partials`] carry a watermark: every window
//! ending at or before it is closed on that worker. The merger releases a
//! window once every worker's watermark has reached its end, since nothing
//! more can come for it. Each release is sorted like a monitor's sweep (by
//! window end, event, group) and releases cover increasing ends, so the
//! output is in one monitor's order, whatever the interleaving of the
//! workers' partials. A worker without traffic still has to advance: its
//! driver ticks it ([`Monitor::tick`](crate::Monitor::tick)). A worker's
//! last partials ([`Monitor::finish`](crate::Monitor::finish)) release
//! every window it held back.
//!
//! # Completeness
//! A report's completeness covers all the traffic of the window, and the
//! traffic of one host is that of all its workers: every sweep's partials
//! carry the swept epoch's counts, the merger sums them per epoch over the
//! workers and a window's counts over its epochs. A window is `complete`
//! only when every worker observed all of it (it started at or after the
//! worker's first frame, and the worker's clock passed its end before its
//! input ended); a worker that never observed anything makes no window
//! complete. Nor is a window any worker was blind in (partials carry the
//! spans its driver noted, [`Monitor::note_blind`](crate::Monitor::note_blind)).
//!
//! # Triggers tested on the worker
//! When the driver spreads flows by their 5-tuple alone, both directions
//! together ([`fanout_worker`];
//! [`MonitorConfig::five_tuple_fanout`](crate::MonitorConfig::five_tuple_fanout)),
//! all flows of a group that keeps the whole 5-tuple (`per 5tuple`, with or
//! without `vlan`) share their 5-tuple, hence their worker, and so do the
//! RTT samples of their reverse flows. Such a trigger's values are then
//! the same on its worker as on one monitor, `X_lastepoch` included, so the
//! worker tests it itself (no statistics to ship; the flow-by-flow windows
//! of `Tuning::flow_windows` stay) and hands out only its reports; the
//! merger still holds them back until their window is released, and
//! replaces their completeness and origin with the host's.
//!
//! # Installs and removals
//! A worker's partials carry the triggers it installed (id, spec, first
//! window) and removed (and its watermark then) since its previous
//! partials. A driver installs every event on every worker in the same
//! order, so that ids agree (the merger refuses a trigger installed under
//! one id with different specs). A window is reported only if every worker
//! covered it: its trigger was installed there with a first window at or
//! before it, and not removed before the window closed. So a trigger
//! installed mid-stream reports from the first window all workers observed,
//! and one removed stops with the first worker that dropped it (a removal
//! while a worker's sweep is unfinished also loses the window being swept
//! there, as on one monitor). A trigger every worker removed is forgotten
//! once its last window is released.
//!
//! # Equal to one monitor
//! A worker's packet time is its own clock (the largest timestamp *it* has
//! seen). The merged reports equal one monitor's on the same traffic when
//! the workers' clocks move together: a driver that ticks every worker to
//! the host's latest time before handing a frame to one of them gets one
//! monitor's packet times, out-of-order counts, epochs and first and last
//! windows (the conformance test `workers_vs_single` does so). A live
//! driver ticks its workers from the wall clock instead; then a packet that
//! is late with respect to another worker's packets but not to its own
//! worker's is not counted out of order.
//!
//! # Must run single-threaded
//! A `Merger` takes `&mut self`; partials are `Send`. One merger per host,
//! fed by the workers (a channel each): each worker's partials in the order
//! [`Monitor::take_partials`](crate::Monitor::take_partials) gave them, the
//! workers in any interleaving.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use rustc_hash::{FxHashMap, FxHasher};

use clarion_lang::spec::EventSpec;
use clarion_report::{Completeness, EventAccuracy, GroupKey, Name, Origin, Report, Window};
use clarion_wire::FlowKey;

use crate::blind::BlindSpans;
use crate::key::report_group;
use crate::measure::Acc;
use crate::monitor::RecallBook;
use crate::trigger::{OpenWindow, Trigger, WindowValues};
use crate::trigger_index::TriggerId;
use crate::EngineError;

/// The `worker` of a merged report's origin: the host's workers together.
pub const MERGED_WORKER: u32 = u32::MAX;

/// The worker, of `workers`, that a flow's packets go to when a driver
/// spreads flows by their 5-tuple: a hash of the unordered pair of
/// endpoints (address and port), the protocol and the address family. Both
/// directions of a connection land together, and the VLAN and VNI are not read, so
/// every flow of a group that keeps the whole 5-tuple lands together (see
/// [`crate::MonitorConfig::five_tuple_fanout`]). `seed` picks one of many
/// such spreads (as an RSS key does).
pub fn fanout_worker(key: &FlowKey, workers: u32, seed: u64) -> u32 {
    if workers <= 1 {
        return 0;
    }
    let a = (key.src_ip, key.src_port);
    let b = (key.dst_ip, key.dst_port);
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let mut h = FxHasher::default();
    seed.hash(&mut h);
    lo.hash(&mut h);
    hi.hash(&mut h);
    key.proto.hash(&mut h);
    (key.flags & (FlowKey::IPV6 | FlowKey::HAS_PORTS)).hash(&mut h);
    // splitmix64's finalizer: every input bit reaches the high bits the range reduction reads.
    let mut x = h.finish();
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    ((u128::from(x) * u128::from(workers)) >> 64) as u32
}

/// A trigger a worker installed, as its next partials tell the merger.
#[derive(Clone, Debug)]
pub(crate) struct Installed {
    pub(crate) id: TriggerId,
    /// Start of the first window the worker gathers for it.
    pub(crate) start_ns: u64,
    pub(crate) spec: EventSpec,
    /// The worker tests it itself (see the module documentation).
    pub(crate) local: bool,
}

/// One trigger's groups in one window closed on one worker: their
/// statistics, `accs[i·reads..(i+1)·reads]` and `packets[i]` for `keys[i]`.
#[derive(Clone, Debug)]
pub(crate) struct WindowPartial {
    pub(crate) trigger: TriggerId,
    pub(crate) window: Window,
    pub(crate) keys: Vec<FlowKey>,
    pub(crate) packets: Vec<u64>,
    pub(crate) accs: Vec<Acc>,
    /// Degraded mode: the worker's flow-epochs measured and shed in the window.
    pub(crate) measured: u64,
    pub(crate) unmeasured: u64,
}

/// Degraded mode: the flow-epochs a worker measured and shed in a window
/// of a trigger it tests itself (its reports come beside).
#[derive(Clone, Copy, Debug)]
pub(crate) struct WindowCounts {
    pub(crate) trigger: TriggerId,
    pub(crate) window: Window,
    pub(crate) measured: u64,
    pub(crate) unmeasured: u64,
}

/// What one finished sweep of a worker hands the host's [`Merger`]
/// ([`crate::Monitor::take_partials`]): the swept epoch's traffic, the
/// statistics of every window it closed, the reports of the triggers the
/// worker tests itself, its watermark, and the installs and removals since
/// its previous partials. Opaque: move it to the merger.
#[derive(Clone, Debug)]
pub struct Partials {
    pub(crate) worker: u32,
    /// Time of the worker's first frame; `None` if it observed nothing.
    pub(crate) first_ns: Option<u64>,
    pub(crate) installed: Vec<Installed>,
    /// Removed triggers, each with the worker's watermark then.
    pub(crate) removed: Vec<(TriggerId, u64)>,
    /// Blind spans the worker's driver noted since its previous partials.
    pub(crate) blind: BlindSpans,
    /// Start of the swept epoch and its traffic.
    pub(crate) epoch: Option<(u64, Completeness)>,
    pub(crate) windows: Vec<WindowPartial>,
    /// Reports of triggers the worker tests itself, with their trigger.
    pub(crate) reports: Vec<(TriggerId, Report)>,
    /// Degraded mode: the counts of the windows of those triggers.
    pub(crate) counts: Vec<WindowCounts>,
    /// Every window ending at or before it is closed on the worker.
    pub(crate) watermark: u64,
    /// The worker's input ended: nothing follows.
    pub(crate) last: bool,
}

impl Partials {
    /// The worker that made them (`MonitorConfig::worker`).
    pub fn worker(&self) -> u32 {
        self.worker
    }

    /// Every window ending at or before this is closed on the worker.
    pub fn watermark(&self) -> u64 {
        self.watermark
    }

    /// True for a worker's last partials ([`crate::Monitor::finish`]).
    pub fn is_last(&self) -> bool {
        self.last
    }

    /// Groups whose statistics they carry (to size channels, or to watch).
    pub fn groups(&self) -> usize {
        self.windows.iter().map(|w| w.keys.len()).sum()
    }
}

/// How a host's merger is set up.
#[derive(Clone, Debug)]
pub struct MergerConfig {
    /// The host's name, for the reports' origin.
    pub host: String,
    /// Workers feeding the merger, numbered `0..workers` (their `MonitorConfig::worker`).
    pub workers: u32,
    /// Closed windows whose merged values each trigger keeps for
    /// [`Merger::window_values`] (as `MonitorConfig::history_windows`).
    pub history_windows: usize,
    /// Degraded mode (the workers' `MonitorConfig::adapt`): the merger
    /// estimates each window's recall from the workers' counts summed.
    pub adapt: Option<crate::AdaptConfig>,
}

impl Default for MergerConfig {
    fn default() -> Self {
        MergerConfig {
            host: "localhost".into(),
            workers: 1,
            history_windows: 16,
            adapt: None,
        }
    }
}

/// A worker's part in a trigger: from which window, until when.
#[derive(Clone, Copy, Debug)]
struct Coverage {
    start_ns: u64,
    /// The worker's watermark when it removed the trigger.
    removed_at: Option<u64>,
}

#[derive(Debug, Default)]
struct WorkerState {
    first_ns: Option<u64>,
    /// Its watermark before its input ended: windows ending by it were observed in full.
    closed_to: u64,
    done: bool,
    triggers: FxHashMap<TriggerId, Coverage>,
}

impl WorkerState {
    /// Windows ending at or before this are closed on the worker.
    fn watermark(&self) -> u64 {
        if self.done {
            u64::MAX
        } else {
            self.closed_to
        }
    }
}

#[derive(Debug)]
struct HostTrigger {
    /// Compiled as on a worker: values, predicate, reports, `X_lastepoch`, history.
    trigger: Trigger,
    local: bool,
}

/// A window waiting for every worker's watermark.
#[derive(Debug, Default)]
struct Pending {
    /// The workers' statistics merged so far (triggers merged here).
    open: Option<OpenWindow>,
    /// Reports of a trigger the workers test themselves.
    reports: Vec<Report>,
    /// Degraded mode: the workers' flow-epochs measured and shed, summed.
    measured: u64,
    unmeasured: u64,
}

/// Combines the partials of a host's workers into the reports one monitor
/// would make. See the module documentation.
#[derive(Debug)]
pub struct Merger {
    config: MergerConfig,
    origin: Origin,
    workers: Vec<WorkerState>,
    triggers: BTreeMap<TriggerId, HostTrigger>,
    /// Longest interval of any trigger seen (how far back `epochs` reaches).
    max_interval_ns: u64,
    /// By (end, start, trigger): release order, each trigger's windows in time order.
    pending: BTreeMap<(u64, u64, TriggerId), Pending>,
    /// Traffic per epoch start, summed over the workers.
    epochs: BTreeMap<u64, Completeness>,
    /// Epochs starting before this are no longer in `epochs`.
    epochs_known_from: u64,
    /// When some worker was blind, back to the oldest window still pending.
    blind: BlindSpans,
    /// Triggers some worker removed, until the merger forgets them.
    removed: Vec<TriggerId>,
    /// Every window ending at or before this is released.
    released_to: u64,
    /// Degraded mode: each trigger's recall estimator, and the accuracy of
    /// the windows released since [`Merger::take_accuracy`].
    recall: Option<RecallBook>,
    accuracy: Vec<EventAccuracy>,
}

impl Merger {
    pub fn new(config: MergerConfig) -> Self {
        let origin = Origin {
            host: Name::from(config.host.as_str()),
            worker: MERGED_WORKER,
        };
        Merger {
            workers: (0..config.workers).map(|_| WorkerState::default()).collect(),
            origin,
            triggers: BTreeMap::new(),
            max_interval_ns: 0,
            pending: BTreeMap::new(),
            epochs: BTreeMap::new(),
            epochs_known_from: 0,
            blind: BlindSpans::default(),
            removed: Vec::new(),
            released_to: 0,
            recall: config.adapt.as_ref().map(RecallBook::new),
            accuracy: Vec::new(),
            config,
        }
    }

    /// Degraded mode: the accuracy of every window released since the last
    /// call (merged over the workers), oldest first.
    pub fn take_accuracy(&mut self, out: &mut Vec<EventAccuracy>) {
        out.append(&mut self.accuracy);
    }

    /// Takes one worker's partials and appends to `out` the reports of
    /// every window that all workers have now closed. An error means the
    /// driver broke a rule (partials lost, reordered or from an unknown
    /// worker; events installed differently): the partials are refused
    /// whole and nothing changes.
    pub fn push(&mut self, p: Partials, out: &mut Vec<Report>) -> Result<(), EngineError> {
        let new_triggers = self.check(&p)?;
        let w = p.worker as usize;
        for (id, t) in new_triggers {
            self.max_interval_ns = self.max_interval_ns.max(t.trigger.interval());
            self.triggers.insert(id, t);
        }
        let Some(state) = self.workers.get_mut(w) else {
            return Err(EngineError::UnknownWorker {
                worker: p.worker,
                workers: self.config.workers,
            });
        };
        for ins in &p.installed {
            let cover = Coverage {
                start_ns: ins.start_ns,
                removed_at: None,
            };
            state.triggers.insert(ins.id, cover);
        }
        for &(id, at) in &p.removed {
            if let Some(c) = state.triggers.get_mut(&id) {
                c.removed_at = Some(at);
                if !self.removed.contains(&id) {
                    self.removed.push(id);
                }
            }
        }
        if p.first_ns.is_some() {
            state.first_ns = p.first_ns;
        }
        if p.last {
            state.done = true;
        } else {
            state.closed_to = p.watermark;
        }
        if let Some((start, counts)) = p.epoch {
            self.epochs.entry(start).or_default().add_counts(&counts);
        }
        for (from, to) in p.blind.iter() {
            self.blind.add(from, to);
        }
        for part in p.windows {
            let Some(t) = self.triggers.get(&part.trigger) else {
                continue;
            };
            let reads = t.trigger.reads_len();
            let key = (part.window.end_ns, part.window.start_ns, part.trigger);
            let pending = self.pending.entry(key).or_default();
            pending.measured += part.measured;
            pending.unmeasured += part.unmeasured;
            let open = pending.open.get_or_insert_with(|| OpenWindow {
                start_ns: part.window.start_ns,
                groups: FxHashMap::default(),
                packets: Vec::new(),
                accs: Vec::new(),
                measured: 0,
                unmeasured: 0,
                bypassed: 0.0,
            });
            for (i, (g, &n)) in part.keys.iter().zip(&part.packets).enumerate() {
                let (accs, packets) = open.group(*g, reads);
                *packets += n;
                let theirs = part.accs.get(i * reads..(i + 1) * reads).unwrap_or_default();
                for (a, b) in accs.iter_mut().zip(theirs) {
                    a.merge(b);
                }
            }
        }
        for (id, r) in p.reports {
            let key = (r.window.end_ns, r.window.start_ns, id);
            self.pending.entry(key).or_default().reports.push(r);
        }
        for c in p.counts {
            let key = (c.window.end_ns, c.window.start_ns, c.trigger);
            let pending = self.pending.entry(key).or_default();
            pending.measured += c.measured;
            pending.unmeasured += c.unmeasured;
        }
        self.release(out);
        Ok(())
    }

    /// Validates partials before any change; returns the triggers they
    /// install that the merger does not know yet, compiled.
    fn check(&self, p: &Partials) -> Result<Vec<(TriggerId, HostTrigger)>, EngineError> {
        let worker = p.worker;
        let state = self
            .workers
            .get(worker as usize)
            .ok_or(EngineError::UnknownWorker {
                worker,
                workers: self.config.workers,
            })?;
        if state.done {
            return Err(EngineError::AfterLastPartials { worker });
        }
        let mut new: Vec<(TriggerId, HostTrigger)> = Vec::new();
        for ins in &p.installed {
            let known = self
                .triggers
                .get(&ins.id)
                .or_else(|| new.iter().find(|(id, _)| *id == ins.id).map(|(_, t)| t));
            match known {
                Some(t) if t.trigger.spec == ins.spec && t.local == ins.local => {}
                Some(_) => return Err(EngineError::TriggerMismatch { worker, id: ins.id }),
                None => {
                    let trigger =
                        Trigger::new(ins.spec.clone(), Vec::new(), ins.start_ns).ok_or_else(|| {
                            EngineError::Unsupported {
                                event: ins.spec.name.clone(),
                                variables: "connection state".into(),
                            }
                        })?;
                    let local = ins.local;
                    new.push((ins.id, HostTrigger { trigger, local }));
                }
            }
            if state.triggers.contains_key(&ins.id) {
                return Err(EngineError::TriggerMismatch { worker, id: ins.id });
            }
        }
        let installed =
            |id: TriggerId| state.triggers.contains_key(&id) || p.installed.iter().any(|i| i.id == id);
        // Windows end after the worker's previous watermark, which the
        // merger's own is at most: one that does not came out of order.
        let in_order = |w: &Window| w.end_ns > state.closed_to;
        for part in &p.windows {
            let id = part.trigger;
            if !installed(id) {
                return Err(EngineError::NotInstalled { worker, id });
            }
            if !in_order(&part.window) {
                return Err(EngineError::PartialsOutOfOrder {
                    worker,
                    end_ns: part.window.end_ns,
                });
            }
            let reads = self
                .triggers
                .get(&id)
                .or_else(|| new.iter().find(|(i, _)| *i == id).map(|(_, t)| t))
                .map_or(0, |t| t.trigger.reads_len());
            let n = part.keys.len();
            if part.packets.len() != n || part.accs.len() != n * reads {
                return Err(EngineError::BadPartials { worker, id });
            }
        }
        for (id, r) in &p.reports {
            if !installed(*id) {
                return Err(EngineError::NotInstalled { worker, id: *id });
            }
            if !in_order(&r.window) {
                return Err(EngineError::PartialsOutOfOrder {
                    worker,
                    end_ns: r.window.end_ns,
                });
            }
        }
        Ok(new)
    }

    /// Reports every pending window that all workers have closed.
    fn release(&mut self, out: &mut Vec<Report>) {
        let to = self
            .workers
            .iter()
            .map(WorkerState::watermark)
            .min()
            .unwrap_or(u64::MAX);
        if to <= self.released_to {
            return;
        }
        let later = match to.checked_add(1) {
            Some(after) => self.pending.split_off(&(after, 0, 0)),
            None => BTreeMap::new(),
        };
        let ready = std::mem::replace(&mut self.pending, later);
        let first = out.len();
        let keep = self.config.history_windows;
        for ((end_ns, start_ns, id), p) in ready {
            let window = Window { start_ns, end_ns };
            if !self.covered(id, window) {
                continue;
            }
            let completeness = self.completeness(window);
            let Some(t) = self.triggers.get_mut(&id) else {
                continue;
            };
            let window_first = out.len();
            let closed = p.open.is_some();
            if let Some(open) = p.open {
                let trig = &mut t.trigger;
                trig.close(open, end_ns, keep);
                if let Some((window, groups)) = trig.history.newest() {
                    for (g, vals) in groups {
                        if trig.fires(vals) {
                            out.push(trig.report(window, g, vals, &self.origin, completeness));
                        }
                    }
                }
            }
            for mut r in p.reports {
                r.origin = self.origin.clone();
                r.completeness = completeness;
                out.push(r);
            }
            if let Some(book) = self.recall.as_mut() {
                let found = (out.len() - window_first) as u64;
                let mut recall = book.estimate(id, p.measured, p.unmeasured, found);
                // Drops, and groups of many flows: from the groups seen, as
                // a monitor does (`Trigger::window_recall`).
                recall = if closed {
                    t.trigger
                        .window_recall(recall, p.measured, p.unmeasured, found, &completeness)
                } else {
                    t.trigger.rethinned_recall(
                        recall,
                        (p.measured, p.unmeasured),
                        found,
                        &out[window_first..],
                        &completeness,
                    )
                };
                for r in &mut out[window_first..] {
                    r.completeness.degraded = true;
                    r.completeness.flows_unmeasured = p.unmeasured;
                    r.completeness.recall_estimate = recall;
                }
                self.accuracy.push(EventAccuracy {
                    event: t.trigger.spec.name.clone(),
                    window,
                    reports: found,
                    flows_measured: p.measured,
                    flows_unmeasured: p.unmeasured,
                    recall_estimate: recall.unwrap_or(f64::NAN),
                });
            }
            // Kept until the recall estimate has read the window's groups.
            if keep == 0 && closed {
                t.trigger.history.clear();
            }
        }
        clarion_report::sort_reports(&mut out[first..]);
        self.released_to = to;
        // Windows still to come end after `to`, so start after `to` minus
        // the longest interval (a trigger installed later starts later).
        if to == u64::MAX {
            // The end of input: the epochs kept stay for polls, as a
            // monitor's do.
            self.blind.clear();
        } else {
            let keep_from = to.saturating_sub(self.max_interval_ns);
            // Polls ask for the traffic of every kept window
            // (`window_values`): the epochs reach back over them.
            let log_from =
                crate::monitor::poll_log_from(to, self.max_interval_ns, self.config.history_windows);
            self.epochs = self.epochs.split_off(&log_from);
            self.epochs_known_from = self.epochs_known_from.max(log_from);
            while self.epochs.len() > crate::monitor::POLL_EPOCHS
                && self.epochs.first_key_value().is_some_and(|(&e, _)| e < keep_from)
            {
                if let Some((e, _)) = self.epochs.pop_first() {
                    self.epochs_known_from = self.epochs_known_from.max(e.saturating_add(1));
                }
            }
            self.blind.forget_to(keep_from);
        }
        self.forget_removed(to);
    }

    /// True when every worker gathered trigger `id` over all of `w`.
    fn covered(&self, id: TriggerId, w: Window) -> bool {
        self.workers.iter().all(|s| {
            s.triggers
                .get(&id)
                .is_some_and(|c| c.start_ns <= w.start_ns && c.removed_at.is_none_or(|at| w.end_ns <= at))
        })
    }

    /// The host's traffic in window `w`: every worker's, over its epochs.
    fn completeness(&self, w: Window) -> Completeness {
        let mut c = Completeness::default();
        for (_, counts) in self.epochs.range(w.start_ns..w.end_ns) {
            c.add_counts(counts);
        }
        c.complete = self
            .workers
            .iter()
            .all(|s| s.first_ns.is_some_and(|f| w.start_ns >= f) && w.end_ns <= s.closed_to)
            && !self.blind.overlaps(w.start_ns, w.end_ns);
        c
    }

    /// Drops triggers every worker removed once their last window is out.
    fn forget_removed(&mut self, to: u64) {
        let workers = &mut self.workers;
        let triggers = &mut self.triggers;
        self.removed.retain(|id| {
            let gone = workers.iter().all(|s| {
                s.triggers
                    .get(id)
                    .is_none_or(|c| c.removed_at.is_some_and(|at| at <= to))
            });
            if gone {
                triggers.remove(id);
                for s in workers.iter_mut() {
                    s.triggers.remove(id);
                }
            }
            !gone
        });
    }

    /// Every window ending at or before this is released (reported, or
    /// known to have no report).
    pub fn released_to(&self) -> u64 {
        self.released_to
    }

    /// Windows waiting for a worker's watermark.
    pub fn pending_windows(&self) -> usize {
        self.pending.len()
    }

    /// Whether the workers test trigger `id` themselves (then its values
    /// are theirs: join their [`crate::Monitor::window_values`] with
    /// [`join_window_values`]); `None` for a trigger the merger does not know.
    pub fn tests_locally(&self, id: TriggerId) -> Option<bool> {
        self.triggers.get(&id).map(|t| t.local)
    }

    /// The host's values of every group of trigger `id` in the window
    /// starting at `window_start_ns`, once released, if among the last few
    /// kept: as [`crate::Monitor::window_values`] of one monitor. `None`
    /// also for a trigger the workers test themselves
    /// ([`Merger::tests_locally`]).
    pub fn window_values(&self, id: TriggerId, window_start_ns: u64) -> Option<WindowValues> {
        let t = self.triggers.get(&id)?;
        if t.local {
            return None;
        }
        let trig = &t.trigger;
        let Some((window, groups)) = trig.history.find(window_start_ns) else {
            // Released without data (so not kept), and not older than the oldest kept window.
            let i = trig.interval();
            let window = Window {
                start_ns: window_start_ns,
                end_ns: window_start_ns.checked_add(i)?,
            };
            let after_oldest = match trig.history.oldest_start() {
                Some(oldest) if trig.history.len() >= self.config.history_windows => {
                    window_start_ns >= oldest
                }
                _ => true,
            };
            let known = window_start_ns.is_multiple_of(i)
                && after_oldest
                && window.end_ns <= self.released_to
                && self.covered(id, window);
            return known.then(|| WindowValues {
                window,
                groups: Vec::new(),
                packets: self.window_packets(window),
            });
        };
        let mut groups: Vec<(GroupKey, Vec<f64>)> = groups
            .map(|(g, v)| (report_group(g, &trig.spec.granularity), v.to_vec()))
            .collect();
        groups.sort_by_key(|g| g.0);
        Some(WindowValues {
            window,
            groups,
            packets: self.window_packets(window),
        })
    }

    /// The host's packets in released window `w`, while its epochs are kept.
    fn window_packets(&self, w: Window) -> Option<u64> {
        (w.start_ns >= self.epochs_known_from && w.end_ns <= self.released_to)
            .then(|| self.completeness(w).packets)
    }
}

/// The host's values of a trigger its workers test themselves, from every
/// worker's [`crate::Monitor::window_values`] for the same window: their
/// groups together (each group is on one worker), in key order. `None`
/// when a worker does not know the window, or the windows differ.
pub fn join_window_values(parts: impl IntoIterator<Item = Option<WindowValues>>) -> Option<WindowValues> {
    let mut joined: Option<WindowValues> = None;
    for part in parts {
        let part = part?;
        match &mut joined {
            None => joined = Some(part),
            Some(j) if j.window == part.window => {
                j.groups.extend(part.groups);
                // The host's packets are every worker's.
                j.packets = j.packets.zip(part.packets).map(|(a, b)| a + b);
            }
            Some(_) => return None,
        }
    }
    if let Some(j) = &mut joined {
        j.groups.sort_by_key(|g| g.0);
    }
    joined
}

#[cfg(test)]
mod tests;
