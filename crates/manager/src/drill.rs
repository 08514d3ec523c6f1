//! Network-wide drill-downs: a network-wide event with `then install`
//! that fires installs a narrowed network-wide instance, placed and split
//! like any event, for the windows `clarion_drilldown::instance` gives.
//!
//! The manager decides a window when the transport hands it the hosts'
//! values; the transport says at which packet time that was (`decided_ns`:
//! the first frame after the window, when hosts close windows as packets
//! come, as in the embedded network). The transport installs the
//! instance's host triggers for its windows (`Monitor::install_at`),
//! extends them, and removes them once [`Manager::drill_expired`] names
//! them.

use clarion_drilldown::{instance, Action};
use clarion_lang::spec::EventSpec;
use clarion_report::{GroupKey, Window};

use crate::error::ManagerError;
use crate::manager::{Decision, EventId, HostId, Manager, NetworkEvent};

/// A drill-down instance to install: `local` on each of its hosts, for
/// the windows in `[start_ns, end_ns)` (to the end without `end_ns`);
/// network-wide event `event`, named `name` in its reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    pub event: EventId,
    pub name: String,
    pub local: Vec<(HostId, EventSpec)>,
    pub start_ns: u64,
    pub end_ns: Option<u64>,
    /// What installed it: enough to install it again after a restart
    /// ([`Manager::restore_instance`]).
    pub firing: Firing,
}

/// The firing that installed an instance: drill-down `drill` (its index
/// in the parent's `then install` list) of event `parent`, fired for
/// `group` in `window` and decided at packet time `decided_ns`. The
/// instance is a function of these and the parent's source, so they are
/// what a store keeps of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Firing {
    pub parent: EventId,
    pub drill: usize,
    pub window: Window,
    pub group: GroupKey,
    pub decided_ns: u64,
}

/// What a transport does for a fired decision's drill-downs.
#[derive(Clone, Debug, PartialEq)]
pub enum DrillAction {
    Install(Instance),
    /// Instance `event` now lasts until `end_ns` (`None`: no end).
    Extend {
        event: EventId,
        end_ns: Option<u64>,
    },
}

impl Manager {
    /// The drill-downs of decision `d`, when it fired for an event with
    /// `then install`, decided at packet time `decided_ns`. An instance
    /// placed on no host is skipped.
    pub fn drill(&mut self, d: &Decision, decided_ns: u64) -> Vec<DrillAction> {
        if d.report.is_none() {
            return Vec::new();
        }
        let Some(e) = self.event(d.event) else {
            return Vec::new();
        };
        let spec = e.split.network();
        let (drills, interval) = (spec.drill_downs.clone(), spec.interval_ns);
        let mut out = Vec::new();
        for (k, dd) in drills.iter().enumerate() {
            let Some(inst) = instance(dd, interval, d.window, &d.group, decided_ns) else {
                continue;
            };
            match self.drill.fired(inst) {
                Action::Install(inst) => {
                    let id = self.next_id();
                    let Ok(local) = self.place(id, &inst.spec) else {
                        continue;
                    };
                    self.drill.installed(&inst.spec.name, id, inst.end_ns);
                    out.push(DrillAction::Install(Instance {
                        event: id,
                        name: inst.spec.name,
                        local,
                        start_ns: inst.start_ns,
                        end_ns: inst.end_ns,
                        firing: Firing {
                            parent: d.event,
                            drill: k,
                            window: d.window,
                            group: d.group,
                            decided_ns,
                        },
                    }));
                }
                Action::Extend { handle, end_ns } => out.push(DrillAction::Extend {
                    event: handle,
                    end_ns,
                }),
                Action::Nothing => {}
            }
        }
        out
    }

    /// The instances whose last window ends by `closed_to`, forgotten here
    /// (with their pending decisions); the transport removes their host
    /// triggers.
    pub fn drill_expired(&mut self, closed_to: u64) -> Vec<(EventId, NetworkEvent)> {
        self.drill
            .expired(closed_to)
            .into_iter()
            .filter_map(|id| Some((id, self.remove(id).ok()?)))
            .collect()
    }

    /// How many drill-down instances are installed.
    pub fn drill_instances(&self) -> usize {
        self.drill.len()
    }

    /// Installs again, under its id `id`, the instance that `firing` made
    /// (a restarted manager, from its store), lasting until `end_ns` (its
    /// firings' extensions included). The parent must be installed (under
    /// its id of then) with that drill-down, and make an instance of that
    /// name: the error says what no longer holds.
    pub fn restore_instance(
        &mut self,
        id: EventId,
        name: &str,
        firing: Firing,
        end_ns: Option<u64>,
    ) -> Result<Instance, ManagerError> {
        let no = |why: String| ManagerError::NotRestored {
            instance: name.to_string(),
            why,
        };
        let parent = self
            .event(firing.parent)
            .ok_or_else(|| no(format!("no event has id {} any more", firing.parent)))?;
        let spec = parent.split.network();
        let dd = spec.drill_downs.get(firing.drill).ok_or_else(|| {
            no(format!(
                "event `{}` has no drill-down number {}",
                spec.name,
                firing.drill + 1
            ))
        })?;
        let inst = instance(
            dd,
            spec.interval_ns,
            firing.window,
            &firing.group,
            firing.decided_ns,
        )
        .filter(|i| i.spec.name == name)
        .ok_or_else(|| no(format!("event `{}` no longer installs it", spec.name)))?;
        self.check_id(id)?;
        let local = self.place(id, &inst.spec)?;
        self.drill.installed(name, id, end_ns);
        Ok(Instance {
            event: id,
            name: name.to_string(),
            local,
            start_ns: inst.start_ns,
            end_ns,
            firing,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Inventory;
    use clarion_report::{Completeness, GroupKey, Origin, Report, Window};

    const MS: u64 = 1_000_000;

    fn manager() -> Manager {
        Manager::new(
            "m",
            Inventory::parse("a 10.0.0.0/24\nb 10.0.1.0/24\n").expect("inventory"),
        )
    }

    const EVENTS: &str = "event spike when sum(volume) > 100 per (dst_ip, dst_port) every 10ms across hosts
  then install by_source on dst_port for 20ms
event by_source when sum(volume) > 10 per src_ip every 10ms across hosts on demand";

    fn fired(m: &mut Manager, event: EventId, start_ms: u64) -> Decision {
        let group = GroupKey {
            dst_ip: Some(("10.0.1.5".parse().expect("addr"), 32)),
            dst_port: Some(Some(80)),
            ..GroupKey::default()
        };
        let window = Window {
            start_ns: start_ms * MS,
            end_ns: (start_ms + 10) * MS,
        };
        let report = Report {
            capture: None,
            missing_hosts: Box::default(),
            event: "spike".into(),
            window,
            group,
            values: vec![("sum(volume)".into(), 150.0)].into(),
            origin: Origin::default(),
            completeness: Completeness {
                packets: 100,
                ..Completeness::default()
            },
        };
        let (polls, _) = m.satisfied(event, 0, &report).expect("satisfied");
        let mut d = None;
        for p in polls {
            d = m.answer(&p, Some(vec![0.0]), None).expect("answer");
        }
        d.expect("decided")
    }

    #[test]
    fn a_fired_decision_installs_then_extends_then_expires_its_instance() {
        let specs = clarion_lang::check(EVENTS).expect("checks");
        let mut m = manager();
        let (spike, _) = m.install(&specs[0]).expect("installs");
        assert!(
            m.install(&specs[1]).is_err(),
            "on demand: installed by drill-downs only"
        );
        let d = fired(&mut m, spike, 0);
        assert!(d.report.is_some());
        let actions = m.drill(&d, 12 * MS);
        let [DrillAction::Install(Instance {
            event,
            name,
            local,
            start_ns,
            end_ns,
            firing,
        })] = actions.as_slice()
        else {
            panic!("one install: {actions:?}")
        };
        assert_eq!(
            (firing.parent, firing.drill, firing.decided_ns),
            (spike, 0, 12 * MS)
        );
        assert_eq!(name, "by_source[dst_port=80]");
        assert_eq!((*start_ns, *end_ns), (20 * MS, Some(40 * MS)));
        assert_eq!(local.len(), 2, "placed on both hosts");
        assert!(local
            .iter()
            .all(|(_, s)| !s.scope.is_network() && s.drill_downs.is_empty()));
        let instance = *event;
        assert_eq!(
            m.event(instance).map(|e| e.split.network().name.as_str()),
            Some("by_source[dst_port=80]")
        );
        // Fired again, decided at 22 ms: [30, 50) reaches [20, 40): extended.
        let d = fired(&mut m, spike, 10);
        assert_eq!(
            m.drill(&d, 22 * MS),
            vec![DrillAction::Extend {
                event: instance,
                end_ns: Some(50 * MS)
            }]
        );
        // A restarted manager, its events under their ids, installs the
        // instance again from its firing, lasting as extended.
        let mut again = manager();
        again.install_as(spike, &specs[0]).expect("installs");
        let restored = again
            .restore_instance(instance, name, firing.clone(), Some(50 * MS))
            .expect("restores");
        assert_eq!(
            (
                &restored.name,
                &restored.local,
                restored.start_ns,
                restored.end_ns
            ),
            (name, local, 20 * MS, Some(50 * MS))
        );
        assert_eq!(again.drill_instances(), 1);
        assert_eq!(
            again.drill_expired(50 * MS).len(),
            1,
            "it expires as it would have"
        );
        let e = again
            .restore_instance(instance, "by_source[dst_port=81]", firing.clone(), None)
            .expect_err("another name");
        assert!(e.to_string().contains("no longer installs it"), "{e}");
        let wrong = Firing {
            drill: 1,
            ..firing.clone()
        };
        let e = again
            .restore_instance(instance, name, wrong, None)
            .expect_err("no such drill-down");
        assert!(e.to_string().contains("no drill-down number 2"), "{e}");

        assert!(m.drill_expired(49 * MS).is_empty());
        let gone = m.drill_expired(50 * MS);
        assert_eq!(gone.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![instance]);
        assert!(m.event(instance).is_none());
        assert_eq!(m.drill_instances(), 0);
    }
}
