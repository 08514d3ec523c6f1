//! A network on one machine: one monitor per host of an inventory and the
//! event manager, over one stream of packets (the embedded transport's
//! core, with no I/O: `clarion run --inventory` feeds it a capture).
//!
//! Each packet goes to the monitor of the host owning its source address
//! and to the one owning its destination (a packet between two hosts is
//! seen by both, as on a real network). Every monitor's clock follows the
//! stream, so all hosts close a window together: when a host's trigger of
//! a network-wide event fires, the manager's polls are answered at once
//! from the other hosts' kept windows (`Monitor::window_values`), and the
//! network-wide decision follows in the same step.
//!
//! Host events (without `across hosts`) run on every host, as `clarion run`
//! runs them on one; their reports name the host.

use std::collections::HashMap;

use clarion_engine::{Counters, Monitor, MonitorConfig, Report, TriggerId, Unparsed};
use clarion_lang::spec::{EventSpec, Scope};
use clarion_manager::{EventId, Inventory, Manager, ManagerError, Poll};
use clarion_wire::PacketRecord;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum NetworkError {
    #[error(transparent)]
    Manager(#[from] ManagerError),
    #[error("host {host}: {source}")]
    Engine {
        host: String,
        #[source]
        source: clarion_engine::EngineError,
    },
    #[error("two events are named `{0}`; network-wide events need distinct names")]
    DuplicateName(String),
}

/// What happened beyond the hosts' own counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetworkCounters {
    /// Packets whose addresses no host owns (seen by no monitor).
    pub unowned: u64,
    /// Network-wide decisions made, and how many fired.
    pub decisions: u64,
    pub fired: u64,
    /// Polls answered from the hosts' kept windows.
    pub polls: u64,
}

/// One network-wide event: its manager id and each host's trigger.
#[derive(Debug)]
struct Installed {
    event: EventId,
    triggers: Vec<Option<TriggerId>>,
}

/// See the crate documentation.
#[derive(Debug)]
pub struct Network {
    manager: Manager,
    monitors: Vec<Monitor>,
    network_events: HashMap<String, Installed>,
    pending: Vec<(usize, Report)>,
    counters: NetworkCounters,
}

impl Network {
    /// One monitor per host of `inventory` (`config` with each host's name),
    /// and a manager named `manager` (the origin of network-wide reports).
    pub fn new(inventory: Inventory, manager: &str, config: &MonitorConfig) -> Network {
        let monitors = inventory
            .hosts()
            .iter()
            .map(|h| {
                Monitor::new(MonitorConfig {
                    host: h.name.clone(),
                    synchronous_sweep: true,
                    ..config.clone()
                })
            })
            .collect();
        Network {
            manager: Manager::new(manager, inventory),
            monitors,
            network_events: HashMap::new(),
            pending: Vec::new(),
            counters: NetworkCounters::default(),
        }
    }

    /// Installs an event: a network-wide one through the manager on the
    /// hosts it places it on, a host event on every host.
    pub fn install(&mut self, spec: EventSpec) -> Result<(), NetworkError> {
        let names = self.manager.inventory().hosts().iter().map(|h| h.name.clone());
        let names: Vec<String> = names.collect();
        // A host event installed by its parents' drill-downs, which carry it.
        if spec.on_demand && spec.scope == Scope::Host {
            return Ok(());
        }
        if spec.scope == Scope::Host {
            for (m, host) in self.monitors.iter_mut().zip(&names) {
                m.install(spec.clone()).map_err(|source| NetworkError::Engine {
                    host: host.clone(),
                    source,
                })?;
            }
            return Ok(());
        }
        if self.network_events.contains_key(&spec.name) {
            return Err(NetworkError::DuplicateName(spec.name));
        }
        let (event, local) = self.manager.install(&spec)?;
        let mut triggers = vec![None; self.monitors.len()];
        for (h, local) in local {
            let id = self.monitors[h]
                .install(local)
                .map_err(|source| NetworkError::Engine {
                    host: names[h].clone(),
                    source,
                })?;
            triggers[h] = Some(id);
        }
        self.network_events
            .insert(spec.name, Installed { event, triggers });
        Ok(())
    }

    /// One packet: every host's clock moves to its time (closing the
    /// windows that ended), then the owners of its addresses measure it.
    /// Host reports and network-wide reports go to `out`.
    pub fn process(&mut self, p: &PacketRecord, out: &mut Vec<Report>) {
        self.tick(p.ts_ns, out);
        let inv = self.manager.inventory();
        let src = inv.owner(p.key.src_addr());
        let dst = inv.owner(p.key.dst_addr()).filter(|d| Some(*d) != src);
        if src.is_none() && dst.is_none() {
            self.counters.unowned += 1;
            return;
        }
        for h in [src, dst].into_iter().flatten() {
            let mut reports = Vec::new();
            self.monitors[h].process(p, &mut reports);
            self.pending.extend(reports.into_iter().map(|r| (h, r)));
        }
        self.route(out);
    }

    /// A frame that did not parse: every host's clock still moves.
    pub fn note_unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Vec<Report>) {
        let _ = why;
        self.tick(ts_ns, out);
    }

    fn tick(&mut self, ts_ns: u64, out: &mut Vec<Report>) {
        for (h, m) in self.monitors.iter_mut().enumerate() {
            let mut reports = Vec::new();
            m.tick(ts_ns, &mut reports);
            self.pending.extend(reports.into_iter().map(|r| (h, r)));
        }
        self.route(out);
    }

    /// Ends the input: every host closes its windows, and the last decisions are made.
    pub fn finish(&mut self, out: &mut Vec<Report>) {
        for (h, m) in self.monitors.iter_mut().enumerate() {
            let mut reports = Vec::new();
            m.finish(&mut reports);
            self.pending.extend(reports.into_iter().map(|r| (h, r)));
        }
        self.route(out);
    }

    /// Host reports go out; a network-wide trigger's report goes to the
    /// manager, whose polls are answered from the hosts' kept windows.
    fn route(&mut self, out: &mut Vec<Report>) {
        for (host, r) in std::mem::take(&mut self.pending) {
            let Some(inst) = self.network_events.get(&r.event) else {
                out.push(r);
                continue;
            };
            let event = inst.event;
            let Ok((polls, decided)) = self.manager.satisfied(event, host, &r) else {
                continue;
            };
            let mut decisions: Vec<_> = decided.into_iter().collect();
            for poll in polls {
                let values = self.answer(&poll);
                self.counters.polls += 1;
                if let Ok(Some(d)) = self.manager.answer(&poll, values) {
                    decisions.push(d);
                }
            }
            for d in decisions {
                self.counters.decisions += 1;
                if let Some(r) = d.report {
                    self.counters.fired += 1;
                    out.push(r);
                }
            }
        }
    }

    /// A host's values for a poll: its group's aggregates in the window, or
    /// `None` when it had no packets of the group.
    fn answer(&self, poll: &Poll) -> Option<Vec<f64>> {
        let name = &self.manager.event(poll.event)?.split.network().name;
        let inst = self.network_events.get(name)?;
        let id = inst.triggers.get(poll.host).copied().flatten()?;
        let needs = self.manager.event(poll.event)?.split.needs.len();
        let wv = self.monitors[poll.host].window_values(id, poll.window_start_ns)?;
        let (_, values) = wv.groups.iter().find(|(g, _)| *g == poll.group)?;
        values.get(..needs).map(<[f64]>::to_vec)
    }

    /// Each host's name and counters, in inventory order.
    pub fn host_counters(&self) -> Vec<(String, Counters)> {
        self.manager
            .inventory()
            .hosts()
            .iter()
            .zip(&self.monitors)
            .map(|(h, m)| (h.name.clone(), m.counters()))
            .collect()
    }

    pub fn counters(&self) -> NetworkCounters {
        self.counters
    }
}
