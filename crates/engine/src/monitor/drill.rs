//! Drill-downs in one monitor: when a trigger with `then install` fires,
//! its instances are installed (or extended) as soon as the sweep that
//! fired it finishes, and removed once their last window is closed.
//!
//! Why this is exact: the sweep closing the firing window begins at the
//! first frame after it, at packet time `t1`, and an instance starts at
//! `S`, the first boundary of its interval at or after the end of the
//! firing event's window holding `t1` (`clarion_drilldown::instance`). The
//! epoch divides every interval involved (`drill_gcd`), so the epoch
//! holding `t1` ends at or before `S`, and the sweep finishes within that
//! epoch: stepped between its packets, whole at its start, or forced before
//! the first packet after it (then counted late, but still before it). So
//! the instance is in place, with every flow already in the table matched
//! against it, before any packet at or after `S` is measured. Should that
//! ever fail (`drill_downs_late`), it starts at the next boundary instead.

use clarion_drilldown::{instance, Action};
use clarion_lang::spec::EventSpec;
use clarion_report::Report;

use super::Monitor;
use crate::trigger::Head;
use crate::{EngineError, TriggerId};

impl Monitor {
    /// Applies the drill-downs of the reports of the sweep that just finished.
    pub(super) fn apply_drill_downs(&mut self, reports: &[Report], decided_ns: u64) {
        if self.drill_parents.is_empty() && self.drill.is_empty() {
            return;
        }
        // After the end of input nothing more is seen: install nothing.
        if self.closed_to != u64::MAX {
            let fired: Vec<_> = reports
                .iter()
                .filter_map(|r| Some((*self.drill_parents.get(&*r.event)?.first()?, r.window, r.group)))
                .collect();
            for (tid, window, group) in fired {
                let Some(parent) = self.triggers.get(tid as usize).and_then(Option::as_ref) else {
                    continue;
                };
                let interval = parent.spec.interval_ns;
                let drills = parent.spec.drill_downs.clone();
                for d in &drills {
                    let Some(inst) = instance(d, interval, window, &group, decided_ns) else {
                        continue;
                    };
                    match self.drill.fired(inst) {
                        Action::Install(inst) => self.install_instance(inst),
                        Action::Extend { handle, end_ns } => {
                            self.set_end(handle, end_ns);
                            self.counters.drill_downs_extended += 1;
                        }
                        Action::Nothing => {}
                    }
                }
            }
        }
        for id in self.drill.expired(self.closed_to) {
            // Ended: every window of it is closed and reported. A failure
            // means it is gone already.
            let _ = self.remove(id);
        }
    }

    fn install_instance(&mut self, inst: clarion_drilldown::Instance) {
        let name = inst.spec.name.clone();
        if let Ok(id) = self.install_at(inst.spec, inst.start_ns, inst.end_ns) {
            self.counters.drill_downs_installed += 1;
            self.drill.installed(&name, id, inst.end_ns);
        }
        // Otherwise it cannot install where its parent did (it can: it is
        // a checked event narrowed): nothing to do.
    }

    /// Installs a host event for the windows in `[start_ns, end_ns)` (to
    /// the end without `end_ns`): a drill-down instance, here or decided by
    /// an event manager. `start_ns` is a multiple of the event's interval.
    /// Should a packet at or after `start_ns` have been measured already,
    /// the event starts at the next window boundary instead, and the
    /// instance is counted as started late (`drill_downs_late`).
    pub fn install_at(
        &mut self,
        spec: EventSpec,
        start_ns: u64,
        end_ns: Option<u64>,
    ) -> Result<TriggerId, EngineError> {
        if spec.on_demand {
            return Err(EngineError::OnDemand { event: spec.name });
        }
        let interval = spec.interval_ns.max(1);
        // On time when no packet it covers can have been measured: it
        // starts at a later epoch, or at this one before any packet of it.
        let next_boundary = self.epoch_start + self.epoch_ns;
        let on_time = !self.started
            || start_ns >= next_boundary
            || (start_ns == self.epoch_start && self.epoch_counts.packets == 0);
        let start_ns = if !on_time {
            self.counters.drill_downs_late += 1;
            next_boundary.div_ceil(interval) * interval
        } else {
            start_ns
        };
        let id = self.install_from(spec, start_ns)?;
        self.set_end(id, end_ns);
        Ok(id)
    }

    /// Moves the end of an installed event's windows (a drill-down
    /// instance extended): no window starting at or after `end_ns` is
    /// gathered; `None`: no end. An extension that comes after a sweep
    /// passed the old end (a manager's, late) cannot bring those epochs
    /// back: the event then starts again at the first window boundary no
    /// sweep has reached, its windows in between unknown to
    /// [`Monitor::window_values`], and it counts as started late.
    pub fn set_end(&mut self, id: TriggerId, end_ns: Option<u64>) {
        let end = end_ns.unwrap_or(u64::MAX);
        // Every epoch before the current one is swept, or being swept.
        let (started, unswept) = (self.started, self.epoch_start);
        let Some(Some(t)) = self.triggers.get_mut(id as usize) else {
            return;
        };
        if end > t.end_ns() && started && t.end_ns() < unswept {
            let interval = t.interval().max(1);
            t.start_ns = unswept.div_ceil(interval) * interval;
            self.counters.drill_downs_late += 1;
        }
        t.set_end_ns(end);
        if let Some(h) = self.heads.get_mut(id as usize) {
            *h = Head::of(t, h.tested());
        }
    }
}

#[cfg(test)]
mod tests {
    use clarion_lang::spec::EventSpec;
    use clarion_report::Report;

    use crate::monitor::tests::{pkt, MS, T0};
    use crate::{Monitor, MonitorConfig};

    fn events(src: &str) -> Vec<EventSpec> {
        clarion_lang::check(src).expect("checks")
    }

    fn run(specs: &[EventSpec], packets: &[(u64, u8)]) -> (Vec<Report>, Monitor) {
        let (mut out, mut m) = feed(specs, packets);
        m.finish(&mut out);
        (out, m)
    }

    /// The monitor after `packets`, before the end of input.
    fn feed(specs: &[EventSpec], packets: &[(u64, u8)]) -> (Vec<Report>, Monitor) {
        let mut m = Monitor::new(MonitorConfig {
            synchronous_sweep: true,
            ..MonitorConfig::default()
        });
        for s in specs.iter().filter(|s| !s.on_demand) {
            m.install(s.clone()).expect("installs");
        }
        let mut out = Vec::new();
        for &(t, src) in packets {
            m.process(&pkt(T0 + t, src, 1000, 100), &mut out);
        }
        (out, m)
    }

    /// (event, window start from T0, first value) of the reports whose event starts with `prefix`.
    fn of<'a>(out: &'a [Report], prefix: &str) -> Vec<(&'a str, u64, f64)> {
        out.iter()
            .filter(|r| r.event.starts_with(prefix))
            .map(|r| (&*r.event, r.window.start_ns - T0, r.values[0].1))
            .collect()
    }

    const SPARSE: &str = "event p when sum(packets) > 0 per 5tuple every 1ms then install t
event t when sum(packets) > 0 every 10ms on demand";

    #[test]
    fn an_instance_starts_after_the_decision_even_after_a_gap() {
        // p fires in [0, 1) ms, decided by the packet at 10 ms: due at the
        // end of p's window then, 11 ms; t's 10 ms grid gives 20 ms. So the
        // packet at 25 ms counts, the one at 10 ms does not.
        let packets = [(0, 1), (10 * MS, 2), (25 * MS, 3)];
        let (out, m) = run(&events(SPARSE), &packets);
        assert_eq!(of(&out, "t"), vec![("t", 20 * MS, 1.0)], "{out:?}");
        // p fires again in [10, 11) and [25, 26): t is installed for good already.
        let c = m.counters();
        assert_eq!(
            (
                c.drill_downs_installed,
                c.drill_downs_extended,
                c.drill_downs_late
            ),
            (1, 0, 0)
        );
        let two = SPARSE.replace("then install t", "then install u then install t")
            + "\nevent u when sum(packets) < 0 every 1ms on demand";
        let (out, m) = run(&events(&two), &packets);
        assert_eq!(of(&out, "t").len(), 1, "{out:?}");
        assert_eq!(m.counters().drill_downs_installed, 2);
    }

    #[test]
    fn instances_are_narrowed_extended_and_removed() {
        let src = "event p when sum(packets) > 0 per src_ip every 10ms then install t on src_ip for 20ms
event t when sum(packets) > 0 per src_ip every 10ms on demand";
        // Source .1 sends at 1, 6, 11, 16, 41 ms; .2 at 21, 26, 31, 36 ms.
        let packets = [
            (1, 1),
            (6, 1),
            (11, 1),
            (16, 1),
            (21, 2),
            (26, 2),
            (31, 2),
            (36, 2),
            (41, 1),
        ];
        let packets: Vec<(u64, u8)> = packets.iter().map(|&(t, s)| (t * MS, s)).collect();
        let (out, m) = run(&events(src), &packets);
        // p fires for .1 in [0, 10) (decided at 11: t[.1] covers [20, 40)),
        // and in [10, 20) (decided at 21: extended to [30, 50)); the packet
        // at 41 ms counts. .2's instance (fired in [20, 30), decided at 31)
        // covers [40, 60) and sees nothing; .1 fires again in [40, 50),
        // undecided at the end of input.
        assert_eq!(
            of(&out, "t["),
            vec![("t[src_ip=10.0.0.1/32]", 40 * MS, 1.0)],
            "{out:?}"
        );
        let c = m.counters();
        assert_eq!((c.drill_downs_installed, c.drill_downs_extended), (2, 2));
        // At the end of input every window is closed: both ended, both removed.
        assert_eq!(m.drill.len(), 0);
        assert_eq!(m.triggers().count(), 1);
    }

    #[test]
    fn ended_instances_are_removed() {
        let src = "event p when sum(packets) > 0 per src_ip every 10ms then install t on src_ip for 10ms
event t when sum(packets) > 0 per src_ip every 10ms on demand";
        let packets: Vec<(u64, u8)> = [1, 11, 21, 31, 41, 51].iter().map(|&t| (t * MS, 1)).collect();
        // Fired in [0, 10) decided at 11: covers [20, 30); fired in [10, 20)
        // at 21: [30, 40), touching, extended; and so on. Removed at the end.
        let (out, m) = run(&events(src), &packets[..3]);
        assert_eq!(
            of(&out, "t["),
            vec![("t[src_ip=10.0.0.1/32]", 20 * MS, 1.0)],
            "{out:?}"
        );
        assert_eq!(m.drill.len(), 0);
        let (out, m) = run(&events(src), &packets);
        let windows: Vec<u64> = of(&out, "t[").iter().map(|r| r.1 / MS).collect();
        assert_eq!(windows, vec![20, 30, 40, 50], "{out:?}");
        assert_eq!(m.counters().drill_downs_installed, 1);
        // A gap: fired in [0, 10) (decided at 11: [20, 30)) and [10, 20)
        // (at 21: [30, 40), extended), then in [20, 30) decided at 45 only:
        // [50, 60), after a gap, a second instance. The first one is
        // removed once its last window is closed, at the packet of 45 ms.
        let gap: Vec<(u64, u8)> = [1, 11, 21, 45].iter().map(|&t| (t * MS, 1)).collect();
        let (out, m) = feed(&events(src), &gap);
        assert_eq!(
            of(&out, "t["),
            vec![("t[src_ip=10.0.0.1/32]", 20 * MS, 1.0)],
            "{out:?}"
        );
        let c = m.counters();
        assert_eq!(
            (c.drill_downs_installed, c.drill_downs_extended, m.drill.len()),
            (2, 1, 1)
        );
        assert_eq!(m.triggers().count(), 2);
    }

    #[test]
    fn a_late_extension_restarts_the_instance_and_leaves_the_gap_unknown() {
        let spec = events("event t when sum(packets) > 0 per src_ip every 10ms")[0].clone();
        let mut m = Monitor::new(MonitorConfig {
            synchronous_sweep: true,
            history_windows: crate::POLLED_HISTORY_WINDOWS,
            ..MonitorConfig::default()
        });
        let mut out = Vec::new();
        m.process(&pkt(T0 + MS, 1, 1000, 100), &mut out);
        // Installed for [10, 30) ms, as a manager would.
        let id = m
            .install_at(spec, T0 + 10 * MS, Some(T0 + 30 * MS))
            .expect("installs");
        for t in [11, 21, 31, 41, 51] {
            m.process(&pkt(T0 + t * MS, 1, 1000, 100), &mut out);
        }
        // [30, 40) and [40, 50) were swept without it: extending now restarts it at 50.
        m.set_end(id, Some(T0 + 80 * MS));
        assert_eq!(m.counters().drill_downs_late, 1);
        for t in [61, 71, 81] {
            m.process(&pkt(T0 + t * MS, 1, 1000, 100), &mut out);
        }
        let windows: Vec<u64> = of(&out, "t").iter().map(|r| r.1 / MS).collect();
        assert_eq!(windows, vec![10, 20, 50, 60, 70], "{out:?}");
        assert!(m.window_values(id, T0 + 20 * MS).is_some());
        assert!(
            m.window_values(id, T0 + 30 * MS).is_none(),
            "the gap is unknown, not empty"
        );
        assert!(m.window_values(id, T0 + 40 * MS).is_none());
        // An extension in time changes nothing else.
        m.set_end(id, Some(T0 + 90 * MS));
        assert_eq!(m.counters().drill_downs_late, 1);
    }
}
