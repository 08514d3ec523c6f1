//! The manager's loop, once for every transport: what happens between a
//! host's satisfaction report and the network-wide report that leaves the
//! manager. No I/O, no clock; a transport feeds it what hosts said and
//! carries out the [`Effect`]s it returns.
//!
//! ```text
//! satisfied(host, report, decided_ns) -> Poll of every other placed host, or a decision at once
//! answered(poll, values)              -> the decision, once every placed host has answered
//! unanswered(poll)                    -> the same, when the host is given up on: once no poll
//!                                        of the window and group is outstanding, the decision
//!                                        is made with the others (partial)
//! a decision                          -> Decided; when it fired, the drill-downs it asks for
//!                                        (Install, Extend) and its Report
//! expire_instances(closed_to)         -> Remove of the drill-down instances that ended
//! finish()                            -> every pending decision made with the answers so far
//! ```
//!
//! Two transports drive it: the embedded network (`clarion_network`: one
//! process, polls answered in the same step from the hosts' monitors) and
//! the NATS service (`clarion_nats`: polls are requests that may time
//! out). Both get the same decisions from the same reports and answers.
//!
//! Invariants:
//! - **Window order per event.** A fired report leaves ([`Effect::Report`])
//!   only when no earlier window of its event is still being decided, so
//!   each event's reports go out in window order, as one monitor's do; the
//!   groups of one window go out in the order they were decided. (A host
//!   sends its satisfaction report of a window before it answers any poll
//!   of a later one, so an earlier window's decision is pending, or made,
//!   before a later one can be.)
//! - **Every poll ends.** Each [`Effect::Poll`] is answered or given up on
//!   exactly once by the transport; a decision waits for no poll that can
//!   no longer be answered.
//! - **The drill-down clock is packet time.** A fired decision's
//!   instances start from the packet time at which the first host closed
//!   the window (`decided_ns` of the satisfaction reports), as on one
//!   monitor; after [`ManagerLoop::end_of_input`] no instance is installed
//!   (no packet would reach it).
//!
//! Cost: hash-map work per report, poll and decision; releasing held
//! reports scans those held (few: only while an earlier window is pending).

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use clarion_report::{GroupKey, Report, Window};
use foldhash::HashMap;

use crate::drill::{DrillAction, Instance};
use crate::manager::{Decision, EventId, HostId, Manager, Poll};
use crate::ManagerError;

type Key = (EventId, u64, GroupKey);

/// What the transport does next, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Ask `poll.host` for its values; tell the loop with
    /// [`ManagerLoop::answered`] or [`ManagerLoop::unanswered`].
    Poll(Poll),
    /// Install a drill-down instance on its hosts.
    Install(Instance),
    /// Instance `event`, on `hosts`, now lasts until `end_ns` (`None`: no end).
    Extend {
        event: EventId,
        hosts: Vec<HostId>,
        end_ns: Option<u64>,
    },
    /// Instance `event` is over and forgotten: remove its triggers from `hosts`.
    Remove { event: EventId, hosts: Vec<HostId> },
    /// A window and group was decided (fired or not); `partial` when some
    /// placed host did not answer.
    Decided {
        event: EventId,
        window: Window,
        group: GroupKey,
        partial: bool,
        fired: bool,
    },
    /// A fired network-wide report, in window order for its event.
    Report(Box<Report>),
}

/// What the loop did, for summaries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoopCounters {
    /// Satisfaction reports taken (of installed events, from placed hosts).
    pub satisfied: u64,
    pub polls: u64,
    /// Polls given up on.
    pub unanswered: u64,
    pub decisions: u64,
    /// Decisions made without every placed host's answer.
    pub partial: u64,
    pub fired: u64,
    /// Drill-down instances installed, extended and removed.
    pub instances: u64,
    pub extended: u64,
    pub removed: u64,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct ManagerLoop {
    /// Polls sent and not yet answered or given up on, per decision.
    outstanding: HashMap<Key, usize>,
    /// Per pending decision, the earliest packet time at which a host
    /// closed its window: when it was decided, for its drill-downs.
    decided_at: HashMap<Key, u64>,
    /// Fired reports waiting for an earlier window of their event; the
    /// last part of the key keeps one window's groups in decision order.
    held: BTreeMap<(EventId, u64, u64), Report>,
    decided_seq: u64,
    ended: bool,
    counters: LoopCounters,
}

impl ManagerLoop {
    pub fn new() -> ManagerLoop {
        ManagerLoop::default()
    }

    /// `host`'s trigger of `event` fired for `report`'s window and group;
    /// `decided_ns` is the packet time at which the host closed the window
    /// (0 when unknown: the window's end is taken). Returns whether the
    /// report began or completed a decision (a late report of a decided
    /// window does neither).
    pub fn satisfied(
        &mut self,
        manager: &mut Manager,
        host: HostId,
        event: EventId,
        report: &Report,
        decided_ns: u64,
        out: &mut Vec<Effect>,
    ) -> Result<bool, ManagerError> {
        let (polls, decided) = manager.satisfied(event, host, report)?;
        self.counters.satisfied += 1;
        let key = (event, report.window.start_ns, report.group);
        let live = !polls.is_empty() || decided.is_some();
        if decided_ns > 0 && (live || self.decided_at.contains_key(&key)) {
            let at = self.decided_at.entry(key).or_insert(decided_ns);
            *at = (*at).min(decided_ns);
        }
        if !polls.is_empty() {
            // One look-up for all (a report of a 16-host event polls up to
            // 15 hosts; the key holds a `GroupKey`, costly to hash and compare).
            *self.outstanding.entry(key).or_default() += polls.len();
            self.counters.polls += polls.len() as u64;
            out.extend(polls.into_iter().map(Effect::Poll));
        }
        if let Some(d) = decided {
            self.decided(manager, d, out);
        }
        Ok(live)
    }

    /// `poll.host` answered: its values (`None`: it had no packets of the
    /// group) and, if it still knew them, its packets in the window. An
    /// answer the event's aggregates cannot have, or beyond those packets,
    /// is refused (the error says why) and counts as no answer.
    pub fn answered(
        &mut self,
        manager: &mut Manager,
        poll: &Poll,
        values: Option<Vec<f64>>,
        packets: Option<u64>,
        out: &mut Vec<Effect>,
    ) -> Result<(), ManagerError> {
        let (d, refused) = match manager.answer(poll, values, packets) {
            Ok(d) => (d, Ok(())),
            Err(e) => {
                self.counters.unanswered += 1;
                (None, Err(e))
            }
        };
        self.poll_ended(manager, poll, d, out);
        refused
    }

    /// `poll`, not sent, needs no answer ([`Manager::answered_already`]:
    /// the host's own report came meanwhile): it is no longer outstanding,
    /// and not counted as a poll.
    pub fn needless(&mut self, manager: &mut Manager, poll: &Poll, out: &mut Vec<Effect>) {
        self.counters.polls = self.counters.polls.saturating_sub(1);
        self.poll_ended(manager, poll, None, out);
    }

    /// `poll.host` did not answer in time, or no longer keeps the window.
    pub fn unanswered(&mut self, manager: &mut Manager, poll: &Poll, out: &mut Vec<Effect>) {
        self.counters.unanswered += 1;
        self.poll_ended(manager, poll, None, out);
    }

    fn poll_ended(&mut self, manager: &mut Manager, poll: &Poll, d: Option<Decision>, out: &mut Vec<Effect>) {
        let key = (poll.event, poll.window_start_ns, poll.group);
        // One look-up (the key's `GroupKey` is costly to hash and compare).
        let left = match self.outstanding.entry(key) {
            Entry::Occupied(mut o) => {
                let n = o.get().saturating_sub(1);
                if d.is_some() || n == 0 {
                    o.remove();
                } else {
                    *o.get_mut() = n;
                }
                Some(n)
            }
            Entry::Vacant(_) => None,
        };
        let d = d.or_else(|| {
            (left == Some(0))
                .then(|| manager.expire(key.0, key.1, key.2))
                .flatten()
        });
        if let Some(d) = d {
            self.decided(manager, d, out);
        }
    }

    fn decided(&mut self, manager: &mut Manager, d: Decision, out: &mut Vec<Effect>) {
        let key = (d.event, d.window.start_ns, d.group);
        let decided_ns = self.decided_at.remove(&key).unwrap_or(d.window.end_ns);
        self.counters.decisions += 1;
        let partial = !d.missing.is_empty();
        self.counters.partial += u64::from(partial);
        out.push(Effect::Decided {
            event: d.event,
            window: d.window,
            group: d.group,
            partial,
            fired: d.report.is_some(),
        });
        if !self.ended {
            for action in manager.drill(&d, decided_ns) {
                out.push(self.drill_effect(manager, action));
            }
        }
        if let Some(r) = d.report {
            self.counters.fired += 1;
            self.decided_seq += 1;
            self.held.insert((key.0, key.1, self.decided_seq), r);
        }
        self.release_event(manager, Some(d.event), out);
    }

    fn drill_effect(&mut self, manager: &Manager, action: DrillAction) -> Effect {
        match action {
            DrillAction::Install(instance) => {
                self.counters.instances += 1;
                Effect::Install(instance)
            }
            DrillAction::Extend { event, end_ns } => {
                self.counters.extended += 1;
                let hosts = manager.event(event).map(|e| e.hosts.clone()).unwrap_or_default();
                Effect::Extend { event, hosts, end_ns }
            }
        }
    }

    /// Sends the held reports of `event` (every event's with `None`) that
    /// no earlier undecided window holds back.
    fn release_event(&mut self, manager: &Manager, event: Option<EventId>, out: &mut Vec<Effect>) {
        let Some(e) = event else {
            let events: BTreeSet<EventId> = self.held.keys().map(|k| k.0).collect();
            for e in events {
                self.release_event(manager, Some(e), out);
            }
            return;
        };
        // The event's held reports, in window order, up to the oldest
        // window still pending: O(released + log held), not a pass over
        // every held report (quadratic in a backlog).
        let oldest = manager.oldest_pending(e).unwrap_or(u64::MAX);
        let ready: Vec<(EventId, u64, u64)> = self
            .held
            .range((e, 0, 0)..=(e, oldest, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        for k in ready {
            if let Some(r) = self.held.remove(&k) {
                out.push(Effect::Report(Box::new(r)));
            }
        }
    }

    /// Sends the held reports nothing holds back any more (of events
    /// removed since, whose pending decisions went with them).
    pub fn release(&mut self, manager: &Manager, out: &mut Vec<Effect>) {
        if !self.held.is_empty() {
            self.release_event(manager, None, out);
        }
    }

    /// Forgets the drill-down instances whose last window ends by
    /// `closed_to` (every decision of them made), and says which host
    /// triggers to remove.
    pub fn expire_instances(&mut self, manager: &mut Manager, closed_to: u64, out: &mut Vec<Effect>) {
        for (event, e) in manager.drill_expired(closed_to) {
            self.counters.removed += 1;
            out.push(Effect::Remove {
                event,
                hosts: e.hosts,
            });
        }
        // Their pending decisions went with them.
        self.outstanding.retain(|k, _| manager.event(k.0).is_some());
        self.decided_at.retain(|k, _| manager.event(k.0).is_some());
        self.release(manager, out);
    }

    /// The input has ended: fired decisions install no drill-down from now on.
    pub fn end_of_input(&mut self) {
        self.ended = true;
    }

    /// Makes every pending decision with the answers so far (in window
    /// order), and sends every held report.
    pub fn finish(&mut self, manager: &mut Manager, out: &mut Vec<Effect>) {
        self.ended = true;
        for (event, start, group) in manager.pending_keys() {
            if let Some(d) = manager.expire(event, start, group) {
                self.decided(manager, d, out);
            }
        }
        self.outstanding.clear();
        self.release(manager, out);
    }

    /// Whether a decision is waiting for an answer.
    pub fn waiting(&self, manager: &Manager) -> bool {
        !self.outstanding.is_empty() || manager.pending() > 0
    }

    pub fn counters(&self) -> LoopCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Inventory;
    use clarion_report::{Completeness, Origin};

    const MS: u64 = 1_000_000;

    const EVENTS: &str = "event spike when sum(volume) > 100 per dst_ip every 10ms across hosts
  then install by_source on dst_ip for 20ms
event by_source when sum(volume) > 10 per src_ip every 10ms across hosts on demand";

    /// Hosts a and b; `spike` placed on both.
    fn setup() -> (Manager, ManagerLoop, EventId) {
        let inventory = Inventory::parse("a 10.0.0.0/24\nb 10.0.1.0/24\n").expect("inventory");
        let mut m = Manager::new("m", inventory);
        let specs = clarion_lang::check(EVENTS).expect("checks");
        let (spike, local) = m.install(&specs[0]).expect("installs");
        assert_eq!(local.len(), 2);
        (m, ManagerLoop::new(), spike)
    }

    fn report(start_ms: u64, dst: &str, volume: f64) -> Report {
        Report {
            capture: None,
            missing_hosts: Box::default(),
            event: "spike".into(),
            window: Window {
                start_ns: start_ms * MS,
                end_ns: (start_ms + 10) * MS,
            },
            group: GroupKey {
                dst_ip: Some((dst.parse().expect("addr"), 32)),
                ..GroupKey::default()
            },
            values: vec![("sum(volume)".into(), volume)].into(),
            origin: Origin::default(),
            // The host's own count of the window's packets bounds its values.
            completeness: Completeness {
                packets: 100,
                ..Completeness::default()
            },
        }
    }

    fn polls(effects: &[Effect]) -> Vec<Poll> {
        let polls = effects.iter().filter_map(|e| match e {
            Effect::Poll(p) => Some(p.clone()),
            _ => None,
        });
        polls.collect()
    }

    fn reports(effects: &[Effect]) -> Vec<(u64, f64)> {
        let reports = effects.iter().filter_map(|e| match e {
            Effect::Report(r) => Some((r.window.start_ns / MS, r.values[0].1)),
            _ => None,
        });
        reports.collect()
    }

    #[test]
    fn reports_leave_in_window_order_whatever_order_answers_come_in() {
        let (mut m, mut l, spike) = setup();
        let mut fx = Vec::new();
        assert!(l
            .satisfied(&mut m, 0, spike, &report(0, "10.0.1.5", 150.0), 0, &mut fx)
            .expect("ok"));
        assert!(l
            .satisfied(&mut m, 0, spike, &report(10, "10.0.1.5", 160.0), 0, &mut fx)
            .expect("ok"));
        let p = polls(&fx);
        assert_eq!(p.len(), 2, "host b polled for each window");
        let mut out = Vec::new();
        // The later window's answer first: decided, but held back.
        l.answered(&mut m, &p[1], Some(vec![5.0]), None, &mut out)
            .expect("valid");
        assert!(reports(&out).is_empty(), "held: {out:?}");
        l.answered(&mut m, &p[0], None, None, &mut out).expect("valid");
        assert_eq!(reports(&out), vec![(0, 150.0), (10, 165.0)]);
        assert!(!l.waiting(&m));
        let c = l.counters();
        assert_eq!(
            (c.satisfied, c.polls, c.decisions, c.fired, c.partial),
            (2, 2, 2, 2, 0)
        );
    }

    #[test]
    fn a_poll_of_a_host_whose_report_came_meanwhile_is_needless() {
        let (mut m, mut l, spike) = setup();
        let mut fx = Vec::new();
        l.satisfied(&mut m, 0, spike, &report(0, "10.0.1.5", 150.0), 0, &mut fx)
            .expect("ok");
        let p = polls(&fx);
        assert!(!m.answered_already(&p[0]), "b's values are not in");
        // b's own report of the window, read before the poll is sent.
        let mut out = Vec::new();
        l.satisfied(&mut m, 1, spike, &report(0, "10.0.1.5", 20.0), 0, &mut out)
            .expect("ok");
        assert_eq!(reports(&out), vec![(0, 170.0)], "decided with both reports");
        assert!(m.answered_already(&p[0]));
        let mut after = Vec::new();
        l.needless(&mut m, &p[0], &mut after);
        assert!(after.is_empty(), "{after:?}");
        assert!(!l.waiting(&m), "nothing outstanding");
        let c = l.counters();
        assert_eq!((c.polls, c.decisions, c.partial), (0, 1, 0), "no poll sent");
    }

    #[test]
    fn a_window_is_decided_partial_once_its_last_poll_is_given_up_on() {
        let (mut m, mut l, spike) = setup();
        let mut fx = Vec::new();
        l.satisfied(&mut m, 0, spike, &report(0, "10.0.1.5", 150.0), 0, &mut fx)
            .expect("ok");
        let p = polls(&fx);
        let mut out = Vec::new();
        l.unanswered(&mut m, &p[0], &mut out);
        let decided = out.iter().find_map(|e| match e {
            Effect::Decided { partial, fired, .. } => Some((*partial, *fired)),
            _ => None,
        });
        assert_eq!(decided, Some((true, true)));
        let Some(Effect::Report(r)) = out.last() else {
            panic!("a report: {out:?}")
        };
        assert!(!r.completeness.complete, "host b's values are missing");
        assert_eq!(r.missing_host_names(), ["b"], "and the report names it");
        assert_eq!(r.to_json()["completeness"]["missing_hosts"][0], "b");
        // Host b's report of the decided window, late, starts nothing.
        let mut late = Vec::new();
        let started = l.satisfied(&mut m, 1, spike, &report(0, "10.0.1.5", 150.0), 0, &mut late);
        assert!(!started.expect("ok") && late.is_empty());
    }

    #[test]
    fn drill_downs_start_from_the_first_host_to_close_the_window() {
        let (mut m, mut l, spike) = setup();
        let mut fx = Vec::new();
        // Host a closed [0, 10) at 13 ms, host b at 12 ms.
        l.satisfied(&mut m, 0, spike, &report(0, "10.0.1.5", 90.0), 13 * MS, &mut fx)
            .expect("ok");
        l.satisfied(&mut m, 1, spike, &report(0, "10.0.1.5", 20.0), 12 * MS, &mut fx)
            .expect("ok");
        let install = fx.iter().find_map(|e| match e {
            Effect::Install(i) => Some((i.start_ns, i.end_ns)),
            _ => None,
        });
        // Decided at 12 ms: the next boundary is 20 ms, for 20 ms.
        assert_eq!(install, Some((20 * MS, Some(40 * MS))));
        assert_eq!(reports(&fx), vec![(0, 110.0)]);
        let mut gone = Vec::new();
        l.expire_instances(&mut m, 39 * MS, &mut gone);
        assert!(gone.is_empty());
        l.expire_instances(&mut m, 40 * MS, &mut gone);
        // The instance watches 10.0.1.5: placed on b only.
        assert!(
            matches!(gone.as_slice(), [Effect::Remove { hosts, .. }] if hosts == &[1]),
            "{gone:?}"
        );
    }

    #[test]
    fn finish_decides_what_is_pending_and_installs_nothing() {
        let (mut m, mut l, spike) = setup();
        let mut fx = Vec::new();
        l.satisfied(&mut m, 0, spike, &report(0, "10.0.1.5", 150.0), 12 * MS, &mut fx)
            .expect("ok");
        let mut out = Vec::new();
        l.finish(&mut m, &mut out);
        assert_eq!(reports(&out), vec![(0, 150.0)]);
        assert!(!out.iter().any(|e| matches!(e, Effect::Install(_))));
        assert!(!l.waiting(&m));
    }
}
