//! An agent's side of the manager's conversation, with no I/O.
//!
//! The desk knows which of the monitor's triggers stands for which
//! network-wide event, tells the agent which reports are satisfaction
//! reports for the manager, and answers the manager's polls from the
//! monitor's kept windows ([`Monitor::window_values`]). Polls come in
//! batches (the manager sends a host every poll it has for it at once); a
//! batch with a window the monitor has not closed yet (this host is behind
//! the one that fired) waits on the desk until every window of it is
//! closed: [`HostDesk::ready`] hands back the answers that became possible.

use std::collections::HashMap;

use clarion_engine::{Monitor, TriggerId, WindowValues};
use clarion_lang::spec::EventSpec;
use clarion_report::Report;

use crate::protocol::{Answer, PollRequest, Trigger};
use crate::NatsError;

/// What the desk needs of the host's monitoring: one [`Monitor`] (a
/// replaying agent), or a live host's workers, installed alike and merged,
/// with the merged windows kept for polls.
pub trait Triggers {
    /// From the next window boundary, or for the windows in `[start_ns,
    /// end_ns)`; an error is the reason, for the operator.
    fn install(
        &mut self,
        spec: EventSpec,
        start_ns: Option<u64>,
        end_ns: Option<u64>,
    ) -> Result<TriggerId, String>;
    fn remove(&mut self, id: TriggerId);
    fn set_end(&mut self, id: TriggerId, end_ns: Option<u64>);
    /// Whether an installed event has this name.
    fn has_event(&self, name: &str) -> bool;
    /// Every window ending at or before this is closed.
    fn closed_to(&self) -> u64;
    fn window_values(&self, id: TriggerId, window_start_ns: u64) -> Option<WindowValues>;
}

impl Triggers for Monitor {
    fn install(
        &mut self,
        spec: EventSpec,
        start_ns: Option<u64>,
        end_ns: Option<u64>,
    ) -> Result<TriggerId, String> {
        match start_ns {
            Some(start) => self.install_at(spec, start, end_ns),
            None => Monitor::install(self, spec),
        }
        .map_err(|e| e.to_string())
    }
    fn remove(&mut self, id: TriggerId) {
        let _ = Monitor::remove(self, id);
    }
    fn set_end(&mut self, id: TriggerId, end_ns: Option<u64>) {
        Monitor::set_end(self, id, end_ns)
    }
    fn has_event(&self, name: &str) -> bool {
        Monitor::has_event(self, name)
    }
    fn closed_to(&self) -> u64 {
        Monitor::closed_to(self)
    }
    fn window_values(&self, id: TriggerId, window_start_ns: u64) -> Option<WindowValues> {
        Monitor::window_values(self, id, window_start_ns)
    }
}

#[derive(Debug)]
struct Local {
    id: TriggerId,
    name: String,
    interval_ns: u64,
    needs: usize,
}

/// See the module documentation. `R` is how a poll is answered (a reply subject).
#[derive(Debug)]
pub struct HostDesk<R> {
    by_event: HashMap<u64, Local>,
    by_name: HashMap<String, u64>,
    deferred: Vec<(Vec<PollRequest>, R)>,
}

impl<R> Default for HostDesk<R> {
    fn default() -> Self {
        HostDesk {
            by_event: HashMap::new(),
            by_name: HashMap::new(),
            deferred: Vec::new(),
        }
    }
}

impl<R> HostDesk<R> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Installs a network-wide event's local trigger (again, if the manager re-sends it).
    pub fn install<T: Triggers + ?Sized>(&mut self, monitor: &mut T, t: Trigger) -> Result<(), NatsError> {
        if self.by_event.get(&t.event).is_some_and(|l| l.name == t.spec.name) {
            return Ok(());
        }
        let name = t.spec.name.clone();
        // The same event under another id (a manager that restarted without
        // its store), or another event under this id: the manager's word is the latest.
        if let Some(&old) = self.by_name.get(&name) {
            self.remove(monitor, old);
        }
        if self.by_event.contains_key(&t.event) {
            self.remove(monitor, t.event);
        }
        if monitor.has_event(&name) {
            return Err(NatsError::Install {
                event: name,
                message: "one of this host's own events (--events) has the same name; rename one".into(),
            });
        }
        let interval_ns = t.spec.interval_ns;
        // With a start: a drill-down instance, its windows as the manager decided them.
        let installed = monitor.install(t.spec, t.start_ns, t.end_ns);
        let id = installed.map_err(|message| NatsError::Install {
            event: name.clone(),
            message,
        })?;
        self.by_name.insert(name.clone(), t.event);
        self.by_event.insert(
            t.event,
            Local {
                id,
                name,
                interval_ns,
                needs: t.needs,
            },
        );
        Ok(())
    }

    /// Moves the end of a drill-down instance's windows.
    pub fn extend<T: Triggers + ?Sized>(&mut self, monitor: &mut T, event: u64, end_ns: Option<u64>) {
        if let Some(l) = self.by_event.get(&event) {
            monitor.set_end(l.id, end_ns);
        }
    }

    /// Removes an event's local trigger; its polls in deferred batches will
    /// be answered "unknown event" (the manager forgot it already).
    pub fn remove<T: Triggers + ?Sized>(&mut self, monitor: &mut T, event: u64) {
        if let Some(l) = self.by_event.remove(&event) {
            self.by_name.remove(&l.name);
            monitor.remove(l.id);
        }
    }

    /// The network-wide event a report's trigger stands for, if it is one
    /// (else the report is the host's own event's).
    pub fn network_event(&self, r: &Report) -> Option<u64> {
        self.by_name.get(&*r.event).copied()
    }

    /// Installed network-wide events.
    pub fn events(&self) -> usize {
        self.by_event.len()
    }

    /// Batches of polls waiting for a window to close.
    pub fn deferred(&self) -> usize {
        self.deferred.len()
    }

    /// Answers a batch of polls now (in order), or keeps it until every
    /// window it names is closed.
    pub fn poll<T: Triggers + ?Sized>(
        &mut self,
        monitor: &T,
        reqs: Vec<PollRequest>,
        reply: R,
    ) -> Option<(R, Vec<Answer>)> {
        match self.try_answer_all(monitor, &reqs) {
            Some(a) => Some((reply, a)),
            None => {
                self.deferred.push((reqs, reply));
                None
            }
        }
    }

    /// The deferred batches whose windows have all closed since, with their answers.
    pub fn ready<T: Triggers + ?Sized>(&mut self, monitor: &T) -> Vec<(R, Vec<Answer>)> {
        if self.deferred.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut still = Vec::new();
        for (reqs, reply) in std::mem::take(&mut self.deferred) {
            match self.try_answer_all(monitor, &reqs) {
                Some(a) => out.push((reply, a)),
                None => still.push((reqs, reply)),
            }
        }
        self.deferred = still;
        out
    }

    fn try_answer_all<T: Triggers + ?Sized>(&self, monitor: &T, reqs: &[PollRequest]) -> Option<Vec<Answer>> {
        reqs.iter().map(|r| self.try_answer(monitor, r)).collect()
    }

    fn try_answer<T: Triggers + ?Sized>(&self, monitor: &T, req: &PollRequest) -> Option<Answer> {
        let Some(l) = self.by_event.get(&req.event) else {
            return Some(Answer::UnknownEvent);
        };
        let end = req.window_start_ns.saturating_add(l.interval_ns);
        if end > monitor.closed_to() {
            return None;
        }
        let Some(wv) = monitor.window_values(l.id, req.window_start_ns) else {
            return Some(Answer::Gone);
        };
        let values = wv
            .groups
            .iter()
            .find(|(g, _)| *g == req.group)
            .and_then(|(_, v)| v.get(..l.needs))
            .map(<[f64]>::to_vec);
        Some(match wv.packets.filter(|_| req.counts) {
            Some(packets) => Answer::Counted { values, packets },
            None => Answer::Values(values),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_engine::MonitorConfig;
    use clarion_report::GroupKey;
    use clarion_wire::{FlowKey, PacketRecord};

    const MS: u64 = 1_000_000;
    const T0: u64 = 1_700_000_000_000 * MS;

    fn trigger(event: u64, name: &str) -> Trigger {
        let src = format!("event {name}\n  when sum(volume) > 100\n  per dst_ip\n  every 10ms\n");
        let spec = clarion_lang::check(&src).expect("valid").remove(0);
        Trigger {
            event,
            spec,
            needs: 1,
            start_ns: None,
            end_ns: None,
        }
    }

    fn packet(ts: u64, volume: u32) -> PacketRecord {
        PacketRecord {
            ts_ns: ts,
            key: FlowKey::new(
                "10.0.0.1".parse().expect("addr"),
                "10.0.1.1".parse().expect("addr"),
                17,
                Some((1000, 80)),
                None,
            ),
            size: volume + 28,
            volume,
            ..PacketRecord::default()
        }
    }

    fn group() -> GroupKey {
        GroupKey {
            dst_ip: Some(("10.0.1.1".parse().expect("addr"), 32)),
            ..GroupKey::default()
        }
    }

    fn monitor() -> Monitor {
        Monitor::new(MonitorConfig {
            history_windows: 4,
            ..MonitorConfig::default()
        })
    }

    #[test]
    fn a_poll_waits_for_its_window_then_gets_the_values() {
        let mut m = monitor();
        let mut desk = HostDesk::new();
        desk.install(&mut m, trigger(7, "spike")).expect("installs");
        let mut out = Vec::new();
        m.process(&packet(T0 + MS, 60), &mut out);
        let req = PollRequest {
            event: 7,
            window_start_ns: T0,
            group: group(),
            counts: true,
        };
        assert_eq!(desk.poll(&m, vec![req.clone()], "r1"), None, "window still open");
        assert_eq!(desk.deferred(), 1);
        assert!(desk.ready(&m).is_empty());
        m.process(&packet(T0 + 10 * MS, 500), &mut out);
        assert_eq!(
            desk.ready(&m),
            vec![(
                "r1",
                vec![Answer::Counted {
                    values: Some(vec![60.0]),
                    packets: 1
                }]
            )]
        );
        assert_eq!(desk.deferred(), 0);
        // A manager that does not ask for counts gets values only.
        let plain = PollRequest {
            counts: false,
            ..req.clone()
        };
        assert_eq!(
            desk.poll(&m, vec![plain], "r0"),
            Some(("r0", vec![Answer::Values(Some(vec![60.0]))]))
        );
        // The next window's report (500 > 100) is a satisfaction report for event 7.
        m.finish(&mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(desk.network_event(&out[0]), Some(7));
        // Another group had no packets; an unknown event is said so.
        let other = PollRequest {
            group: GroupKey::default(),
            ..req.clone()
        };
        let unknown = PollRequest {
            event: 9,
            ..req.clone()
        };
        assert_eq!(
            desk.poll(&m, vec![other, unknown, req], "r2"),
            Some((
                "r2",
                vec![
                    Answer::Counted {
                        values: None,
                        packets: 1
                    },
                    Answer::UnknownEvent,
                    Answer::Counted {
                        values: Some(vec![60.0]),
                        packets: 1
                    }
                ]
            )),
            "a batch is answered in order"
        );
    }

    #[test]
    fn an_instance_counts_only_its_windows_and_an_extension_moves_its_end() {
        let mut m = monitor();
        let mut desk = HostDesk::new();
        let mut out = Vec::new();
        m.process(&packet(T0 + MS, 10), &mut out);
        // A drill-down instance for [20, 40) ms.
        let mut t = Trigger {
            start_ns: Some(T0 + 20 * MS),
            end_ns: Some(T0 + 40 * MS),
            ..trigger(3, "spike")
        };
        t.spec.name = "spike[dst_ip=10.0.1.0/24]".into();
        desk.install(&mut m, t).expect("installs");
        desk.extend(&mut m, 3, Some(T0 + 50 * MS));
        for ms in [11, 21, 31, 41, 51, 61] {
            m.process(&packet(T0 + ms * MS, 10), &mut out);
        }
        let poll = |at: u64| PollRequest {
            event: 3,
            window_start_ns: T0 + at * MS,
            group: group(),
            counts: true,
        };
        let answers = desk.poll(&m, vec![poll(10), poll(20), poll(40), poll(50)], ());
        let unknown = Answer::Gone;
        assert_eq!(
            answers,
            Some((
                (),
                vec![
                    unknown.clone(),
                    Answer::Counted {
                        values: Some(vec![10.0]),
                        packets: 1
                    },
                    Answer::Counted {
                        values: Some(vec![10.0]),
                        packets: 1
                    },
                    unknown
                ]
            )),
            "before its start and after its (extended) end it knows nothing"
        );
    }

    #[test]
    fn windows_older_than_the_history_are_gone() {
        let mut m = monitor();
        let mut desk = HostDesk::new();
        desk.install(&mut m, trigger(1, "spike")).expect("installs");
        let mut out = Vec::new();
        for i in 0..10 {
            m.process(&packet(T0 + i * 10 * MS + MS, 10), &mut out);
        }
        let req = PollRequest {
            event: 1,
            window_start_ns: T0,
            group: group(),
            counts: true,
        };
        assert_eq!(desk.poll(&m, vec![req], ()), Some(((), vec![Answer::Gone])));
    }

    #[test]
    fn reinstalls_replace_and_a_host_event_name_clash_is_refused() {
        let mut m = monitor();
        let mut desk: HostDesk<()> = HostDesk::new();
        desk.install(&mut m, trigger(1, "spike")).expect("installs");
        desk.install(&mut m, trigger(1, "spike"))
            .expect("a re-sent install is a no-op");
        assert_eq!(m.triggers().count(), 1);
        desk.install(&mut m, trigger(2, "spike"))
            .expect("the same event under a new id replaces it");
        assert_eq!((desk.events(), m.triggers().count()), (1, 1));
        desk.remove(&mut m, 2);
        assert_eq!(desk.events(), 0);
        assert_eq!(m.triggers().count(), 0);
        let own = clarion_lang::check("event mine\n  when sum(volume) > 1\n").expect("valid");
        m.install(own[0].clone()).expect("the host's own event");
        assert!(
            desk.install(&mut m, trigger(3, "mine")).is_err(),
            "clashes with a host event"
        );
    }
}
