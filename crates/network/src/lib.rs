//! A network on one machine: one monitor per host of an inventory and the
//! manager's loop (`clarion_manager::ManagerLoop`), over one stream of
//! packets: the embedded transport, with no I/O (`clarion run --inventory`
//! feeds it captures).
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
use clarion_manager::{Effect, EventId, Instance, Inventory, Manager, ManagerError, ManagerLoop, Poll};
use clarion_wire::PacketRecord;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum NetworkError {
    #[error(transparent)]
    Manager(#[from] ManagerError),
    /// The engine's error is in the message, not a source: said once.
    #[error("host {host}: {error}")]
    Engine {
        host: String,
        error: clarion_engine::EngineError,
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
    /// Network-wide drill-down instances installed, and extended.
    pub drill_downs: u64,
    pub drill_downs_extended: u64,
}

/// One network-wide event: its manager id, each host's trigger, and the
/// windows it covers (a drill-down instance's; all for the others).
#[derive(Debug)]
struct Installed {
    event: EventId,
    triggers: Vec<Option<TriggerId>>,
    start_ns: u64,
    end_ns: u64,
}

/// See the crate documentation.
#[derive(Debug)]
pub struct Network {
    manager: Manager,
    /// The manager's loop; polls are answered in the step that asks them.
    desk: ManagerLoop,
    monitors: Vec<Monitor>,
    /// By name; two drill-down instances of one name may be installed at
    /// once (one ending, one starting), over windows that do not overlap.
    network_events: HashMap<String, Vec<Installed>>,
    pending: Vec<(usize, Report)>,
    counters: NetworkCounters,
    /// Packet time: the largest timestamp seen (when windows are decided).
    now: u64,
    /// Instances ending by this were removed already (see `expire_instances`).
    expired_to: u64,
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
                    // The manager polls these monitors.
                    history_windows: config.history_windows.max(clarion_engine::POLLED_HISTORY_WINDOWS),
                    ..config.clone()
                })
            })
            .collect();
        Network {
            manager: Manager::new(manager, inventory),
            desk: ManagerLoop::new(),
            monitors,
            network_events: HashMap::new(),
            pending: Vec::new(),
            counters: NetworkCounters::default(),
            now: 0,
            expired_to: 0,
        }
    }

    /// Installs an event: a network-wide one through the manager on the
    /// hosts it places it on, a host event on every host.
    pub fn install(&mut self, spec: EventSpec) -> Result<(), NetworkError> {
        let names = self.manager.inventory().hosts().iter().map(|h| h.name.clone());
        let names: Vec<String> = names.collect();
        // Installed by its parents' drill-downs, which carry it.
        if spec.on_demand {
            return Ok(());
        }
        if spec.scope == Scope::Host {
            for (m, host) in self.monitors.iter_mut().zip(&names) {
                m.install(spec.clone()).map_err(|error| NetworkError::Engine {
                    host: host.clone(),
                    error,
                })?;
            }
            return Ok(());
        }
        if self.network_events.contains_key(&spec.name) {
            return Err(NetworkError::DuplicateName(spec.name));
        }
        let (event, local) = self.manager.install(&spec)?;
        // Every host may get an instance of what its drill-downs install,
        // starting at a window boundary: make it an epoch boundary.
        for e in spec.installed_events() {
            for m in &mut self.monitors {
                m.include_interval(e.interval_ns);
            }
        }
        let mut triggers = vec![None; self.monitors.len()];
        for (h, local) in local {
            let id = self.monitors[h]
                .install(local)
                .map_err(|error| NetworkError::Engine {
                    host: names[h].clone(),
                    error,
                })?;
            triggers[h] = Some(id);
        }
        self.network_events.insert(
            spec.name,
            vec![Installed {
                event,
                triggers,
                start_ns: 0,
                end_ns: u64::MAX,
            }],
        );
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

    /// One packet captured on host `host` (its own capture or interface,
    /// by inventory index): every host's clock moves to its time, then
    /// that host measures it, whatever its addresses. A packet between two
    /// hosts is in both hosts' captures, so each measures it once, as
    /// [`Network::process`] has both measure it from one capture. An index
    /// outside the inventory counts the packet as of no host.
    pub fn process_on(&mut self, host: usize, p: &PacketRecord, out: &mut Vec<Report>) {
        self.tick(p.ts_ns, out);
        let Some(m) = self.monitors.get_mut(host) else {
            self.counters.unowned += 1;
            return;
        };
        let mut reports = Vec::new();
        m.process(p, &mut reports);
        self.pending.extend(reports.into_iter().map(|r| (host, r)));
        self.route(out);
    }

    /// A frame captured on host `host` that did not parse: every host's
    /// clock moves, and that host counts it (as its live agent would).
    pub fn note_unparsed_on(&mut self, host: usize, ts_ns: u64, why: Unparsed, out: &mut Vec<Report>) {
        self.tick(ts_ns, out);
        if let Some(m) = self.monitors.get_mut(host) {
            let mut reports = Vec::new();
            m.note_unparsed(ts_ns, why, &mut reports);
            self.pending.extend(reports.into_iter().map(|r| (host, r)));
            self.route(out);
        }
    }

    /// The inventory index of the host named `name`.
    pub fn host_index(&self, name: &str) -> Option<usize> {
        self.manager
            .inventory()
            .hosts()
            .iter()
            .position(|h| h.name == name)
    }

    /// A frame that did not parse: every host's clock still moves.
    pub fn note_unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Vec<Report>) {
        let _ = why;
        self.tick(ts_ns, out);
    }

    fn tick(&mut self, ts_ns: u64, out: &mut Vec<Report>) {
        self.now = self.now.max(ts_ns);
        for (h, m) in self.monitors.iter_mut().enumerate() {
            let mut reports = Vec::new();
            m.tick(ts_ns, &mut reports);
            self.pending.extend(reports.into_iter().map(|r| (h, r)));
        }
        self.route(out);
    }

    /// Ends the input: every host closes its windows, and the last decisions are made.
    pub fn finish(&mut self, out: &mut Vec<Report>) {
        // Nothing after this would see a drill-down's instance.
        self.desk.end_of_input();
        for (h, m) in self.monitors.iter_mut().enumerate() {
            let mut reports = Vec::new();
            m.finish(&mut reports);
            self.pending.extend(reports.into_iter().map(|r| (h, r)));
        }
        self.route(out);
        let mut effects = Vec::new();
        self.desk.finish(&mut self.manager, &mut effects);
        self.carry(effects, out);
    }

    /// Host reports go out; a network-wide trigger's report goes to the
    /// manager's loop, whose polls are answered at once from the hosts'
    /// kept windows. Every satisfaction report of the step reaches the
    /// manager before any poll is answered, as over NATS (a host's
    /// satisfaction report leaves before its answer to a poll of the same
    /// window), so a decision's completeness sums every satisfying host's
    /// on both transports.
    fn route(&mut self, out: &mut Vec<Report>) {
        let mut effects = Vec::new();
        for (host, r) in std::mem::take(&mut self.pending) {
            let Some(event) = self.installed(&r.event, r.window.start_ns).map(|i| i.event) else {
                out.push(r);
                continue;
            };
            // A report the manager refuses (its event just ended) decides nothing.
            let _ = self
                .desk
                .satisfied(&mut self.manager, host, event, &r, self.now, &mut effects);
        }
        self.carry(effects, out);
        // Only when windows closed since the last expiry.
        let closed_to = self.monitors.iter().map(Monitor::closed_to).min().unwrap_or(0);
        if closed_to > self.expired_to {
            self.expired_to = closed_to;
            let mut effects = Vec::new();
            self.desk
                .expire_instances(&mut self.manager, closed_to, &mut effects);
            self.carry(effects, out);
        }
    }

    /// Carries out the manager loop's effects, and those they cause, in order.
    fn carry(&mut self, effects: Vec<Effect>, out: &mut Vec<Report>) {
        let mut queue = std::collections::VecDeque::from(effects);
        let mut more = Vec::new();
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::Poll(poll) => {
                    let (values, packets) = self.answer(&poll);
                    // The hosts' own monitors answer: nothing to refuse (a
                    // refusal would be an answer lost, and the decisions
                    // would differ from the reference's).
                    let _ = self
                        .desk
                        .answered(&mut self.manager, &poll, values, packets, &mut more);
                }
                Effect::Install(Instance {
                    event,
                    name,
                    local,
                    start_ns,
                    end_ns,
                    ..
                }) => {
                    let mut triggers = vec![None; self.monitors.len()];
                    for (h, spec) in local {
                        // A split instance installs wherever its parent did.
                        if let Ok(id) = self.monitors[h].install_at(spec, start_ns, end_ns) {
                            triggers[h] = Some(id);
                        }
                    }
                    self.network_events.entry(name).or_default().push(Installed {
                        event,
                        triggers,
                        start_ns,
                        end_ns: end_ns.unwrap_or(u64::MAX),
                    });
                }
                Effect::Extend { event, end_ns, .. } => {
                    let found = self
                        .network_events
                        .values_mut()
                        .flatten()
                        .find(|i| i.event == event);
                    if let Some(inst) = found {
                        inst.end_ns = end_ns.unwrap_or(u64::MAX);
                        for (m, id) in self.monitors.iter_mut().zip(&inst.triggers) {
                            if let Some(id) = id {
                                m.set_end(*id, end_ns);
                            }
                        }
                    }
                }
                Effect::Remove { event, .. } => self.remove_instance(event),
                Effect::Decided { .. } => {}
                Effect::Report(r) => out.push(*r),
            }
            queue.extend(more.drain(..));
        }
    }

    /// The installed event named `name` covering the window starting at `window_start_ns`.
    fn installed(&self, name: &str, window_start_ns: u64) -> Option<&Installed> {
        self.network_events
            .get(name)?
            .iter()
            .find(|i| (i.start_ns..i.end_ns).contains(&window_start_ns))
    }

    /// Removes a drill-down instance's triggers from its hosts.
    fn remove_instance(&mut self, event: EventId) {
        for list in self.network_events.values_mut() {
            let Some(at) = list.iter().position(|i| i.event == event) else {
                continue;
            };
            let inst = list.remove(at);
            for (m, id) in self.monitors.iter_mut().zip(inst.triggers) {
                if let Some(id) = id {
                    // Gone already only if removed by hand.
                    let _ = m.remove(id);
                }
            }
        }
        self.network_events.retain(|_, list| !list.is_empty());
    }

    /// The polled host's values of every group of the polled window.
    fn polled_window(&self, poll: &Poll) -> Option<clarion_engine::WindowValues> {
        let name = &self.manager.event(poll.event)?.split.network().name;
        let inst = self.installed(name, poll.window_start_ns)?;
        let id = inst.triggers.get(poll.host).copied().flatten()?;
        self.monitors[poll.host].window_values(id, poll.window_start_ns)
    }

    /// A host's answer to a poll: its group's aggregates in the window
    /// (`None` when it had no packets of the group), and its packets in
    /// the window.
    fn answer(&self, poll: &Poll) -> (Option<Vec<f64>>, Option<u64>) {
        let Some(wv) = self.polled_window(poll) else {
            return (None, None);
        };
        let needs = self.manager.event(poll.event).map_or(0, |e| e.split.needs.len());
        let values = wv
            .groups
            .iter()
            .find(|(g, _)| *g == poll.group)
            .and_then(|(_, v)| v.get(..needs))
            .map(<[f64]>::to_vec);
        (values, wv.packets)
    }

    /// Moves every host's health records kept since the last call into
    /// `out` (with `MonitorConfig::keep_health`), host by host.
    pub fn take_health(&mut self, out: &mut Vec<clarion_engine::Health>) {
        for m in &mut self.monitors {
            m.take_health(out);
        }
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
        let l = self.desk.counters();
        NetworkCounters {
            decisions: l.decisions,
            fired: l.fired,
            polls: l.polls,
            drill_downs: l.instances,
            drill_downs_extended: l.extended,
            ..self.counters
        }
    }
}
