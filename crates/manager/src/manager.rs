//! The event manager's state machine (no I/O, no clock): installs
//! network-wide events as per-host triggers, and turns hosts' satisfaction
//! reports and poll answers into network-wide decisions.
//!
//! ```text
//! install(event)          -> the local trigger of each placed host
//! satisfied(host, report) -> polls: every other placed host, for the same window and group
//! answer(poll, values)    -> the decision, once every placed host has answered
//! expire(key)             -> the decision with the answers so far (hosts that did not
//!                            answer are listed; the report is marked incomplete)
//! ```
//!
//! [`crate::ManagerLoop`] drives it for every transport (in-process, or
//! over NATS), which carries installs, reports, polls and answers and
//! decides when to give up on a host.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::IpAddr;

use clarion_lang::spec::{
    AggCall, AggFunc, ArithOp, BaseVar, EventSpec, Granularity, PacketExpr, PrefixLens,
};
use clarion_report::{Completeness, GroupKey, Origin, Report, Window};
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use crate::inventory::{self, Inventory};
use crate::split::{split, Split};
use crate::ManagerError;

pub type EventId = usize;
pub type HostId = usize;

/// `Origin::worker` of a network-wide report: no single host or worker made it.
pub const NETWORK_WORKER: u32 = u32::MAX;

/// One network-wide event: its split and the hosts holding its trigger.
#[derive(Clone, Debug)]
pub struct NetworkEvent {
    pub split: Split,
    /// Placed hosts, ascending.
    pub hosts: Vec<HostId>,
}

/// Ask `host` for its values of `event`'s trigger in one window and group.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Poll {
    pub event: EventId,
    pub host: HostId,
    pub window_start_ns: u64,
    pub group: GroupKey,
}

/// What one (event, window, group) is waiting for.
#[derive(Clone, Debug)]
struct Pending {
    window: Window,
    /// Per placed host (same order as `NetworkEvent::hosts`): `None` until
    /// it answers; then its values, `None` inside when it had no packets of the group.
    answers: Vec<Option<Option<Vec<f64>>>>,
    polled: Vec<bool>,
    /// The satisfying hosts' completeness, summed.
    completeness: Completeness,
}

impl Pending {
    /// Every placed host has answered: the decision can be made.
    fn all_answered(&self) -> bool {
        self.answers.iter().all(Option::is_some)
    }
}

/// A network-wide decision for one window and group.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub event: EventId,
    /// The window and group decided.
    pub window: Window,
    pub group: GroupKey,
    /// The network-wide report when the predicate holds (values over all
    /// hosts that answered), `None` when it does not.
    pub report: Option<Report>,
    /// Placed hosts that answered (with values or "no packets").
    pub answered: Vec<HostId>,
    /// Placed hosts that did not answer before [`Manager::expire`]: the
    /// decision is partial, and the report is marked incomplete.
    pub missing: Vec<HostId>,
}

type Key = (EventId, u64, GroupKey);

/// How far beyond the ids used an id given to [`Manager::install_as`] may be.
pub const ID_GAP_MAX: usize = 1 << 20;

/// Decisions remembered, so that a host whose report arrives after the
/// decision (its values were already polled) does not start another.
const DECIDED_KEPT: usize = 1 << 16;

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct Manager {
    name: String,
    inventory: Inventory,
    events: Vec<Option<NetworkEvent>>,
    /// The ids of the events by name (more than one only while a drill-down
    /// instance shares its name with one ending): installing and finding by
    /// name is O(1), so adding N events is O(N), not O(N²).
    by_name: HashMap<String, BTreeSet<EventId>>,
    /// Per host (inventory order), how many installed events are placed on
    /// it: `GET /v1/hosts` without a pass over 20,000 events per host.
    placed: Vec<usize>,
    pending: HashMap<Key, Pending>,
    /// Per event, the window starts of its pending decisions and how many
    /// groups of each: [`Manager::oldest_pending`] in O(log n). (A scan of
    /// every pending decision per held report made a backlog quadratic: a
    /// manager behind by a few thousand decisions never caught up.)
    pending_starts: HashMap<EventId, BTreeMap<u64, u32>>,
    decided: HashSet<Key>,
    decided_order: VecDeque<Key>,
    /// Drill-down instances installed, by name (see [`crate::drill`]).
    pub(crate) drill: clarion_drilldown::Book<EventId>,
    /// Wall time as the transport last said ([`Manager::set_clock`]): a
    /// report of a window starting later than [`MAX_SKEW_NS`] after it is
    /// refused. `None` (replay in packet time): no such check.
    now_ns: Option<u64>,
}

/// How far ahead of the manager's clock a host's window may start (its
/// clock may run ahead of the manager's).
pub const MAX_SKEW_NS: u64 = 60_000_000_000;

/// The most packets and bytes a host can see in a nanosecond: a 1.6 Tb/s
/// of links, 1 packet and 200 bytes a nanosecond. A value beyond it for
/// the window is a lie, not traffic.
const MAX_PACKETS_PER_NS: f64 = 1.0;
const MAX_BYTES_PER_NS: f64 = 200.0;

/// The most bytes one packet can add to `sum(size)` or `sum(volume)`: the
/// largest IP packet (an IPv6 header and the largest payload its length
/// field can say; IPv4's total length stops at 65,535).
const MAX_PACKET_BYTES: f64 = 40.0 + 65_535.0;

impl Manager {
    /// A manager for the hosts of `inventory`; `name` goes in its reports' origin.
    pub fn new(name: &str, inventory: Inventory) -> Manager {
        Manager {
            name: name.to_string(),
            placed: vec![0; inventory.hosts().len()],
            inventory,
            events: Vec::new(),
            by_name: HashMap::new(),
            pending: HashMap::new(),
            pending_starts: HashMap::new(),
            decided: HashSet::new(),
            decided_order: VecDeque::new(),
            drill: clarion_drilldown::Book::default(),
            now_ns: None,
        }
    }

    /// The wall time now, for the plausibility of reports' windows.
    pub fn set_clock(&mut self, now_ns: u64) {
        self.now_ns = Some(now_ns);
    }

    pub fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    /// Places and splits `spec`; returns its id and the trigger each placed host installs.
    pub fn install(&mut self, spec: &EventSpec) -> Result<(EventId, Vec<(HostId, EventSpec)>), ManagerError> {
        let id = self.next_id();
        self.install_as(id, spec).map(|local| (id, local))
    }

    /// An id above every id used.
    pub fn next_id(&self) -> EventId {
        self.events.len()
    }

    /// Installs `spec` under a given id (one it had before a restart, so
    /// that hosts still holding its trigger keep it); later installs get
    /// ids above every id used.
    pub fn install_as(
        &mut self,
        id: EventId,
        spec: &EventSpec,
    ) -> Result<Vec<(HostId, EventSpec)>, ManagerError> {
        self.check_id(id)?;
        let e = Manager::prepare(&self.inventory, spec)?;
        let local = e.hosts.iter().map(|&h| (h, e.split.local.clone())).collect();
        self.install_prepared(id, e)?;
        Ok(local)
    }

    /// Checks, places and splits `spec` as [`Manager::install_as`] does,
    /// with nothing of any manager's state but its inventory: the costly
    /// part of installing an event (the language's checks, placement and
    /// the split of the event and of what its drill-downs install), so
    /// that it can run apart from the loop that owns the manager, which
    /// then only records the result ([`Manager::install_prepared`], O(1)).
    pub fn prepare(inventory: &Inventory, spec: &EventSpec) -> Result<NetworkEvent, ManagerError> {
        if spec.on_demand {
            return Err(ManagerError::OnDemand(spec.name.clone()));
        }
        // What its drill-downs install must split too, at every level.
        for e in spec.installed_events() {
            split(e, 1)?;
        }
        let hosts = inventory.placement(spec);
        if hosts.is_empty() {
            return Err(ManagerError::NoPlacement(spec.name.clone()));
        }
        let split = split(spec, hosts.len())?;
        Ok(NetworkEvent { split, hosts })
    }

    /// Sets aside `n` ids for events to be installed a few at a time
    /// ([`Manager::install_prepared`]): later installs (drill-down
    /// instances) get ids above them. Returns the first.
    pub fn reserve_ids(&mut self, n: usize) -> EventId {
        let first = self.events.len();
        self.events.resize_with(first + n, || None);
        first
    }

    /// Records an event [`Manager::prepare`] made from this manager's
    /// inventory under `id`: refused only when the id is taken or far off,
    /// or the name installed; O(1) (an index by name, a table by id).
    pub fn install_prepared(&mut self, id: EventId, e: NetworkEvent) -> Result<(), ManagerError> {
        self.check_id(id)?;
        if self.id_of(&e.split.network().name).is_some() {
            return Err(ManagerError::DuplicateName(e.split.network().name.clone()));
        }
        self.record(id, e);
        Ok(())
    }

    /// Whether `id` can be given to a new event.
    pub(crate) fn check_id(&self, id: EventId) -> Result<(), ManagerError> {
        if self.event(id).is_some() {
            return Err(ManagerError::IdTaken(id));
        }
        // Ids index a table: one edited into a store far beyond every id
        // used would make it huge.
        if id > self.events.len().saturating_add(ID_GAP_MAX) {
            return Err(ManagerError::IdTooFar {
                id,
                next: self.events.len(),
            });
        }
        Ok(())
    }

    /// Places, splits and records `spec` under `id`, whatever its name (a
    /// drill-down instance may share its name with one ending).
    pub(crate) fn place(
        &mut self,
        id: EventId,
        spec: &EventSpec,
    ) -> Result<Vec<(HostId, EventSpec)>, ManagerError> {
        let hosts = self.inventory.placement(spec);
        if hosts.is_empty() {
            return Err(ManagerError::NoPlacement(spec.name.clone()));
        }
        let split = split(spec, hosts.len())?;
        let local = hosts.iter().map(|&h| (h, split.local.clone())).collect();
        self.record(id, NetworkEvent { split, hosts });
        Ok(local)
    }

    /// Puts `e` under `id` (replacing what was there) and in the index by name.
    fn record(&mut self, id: EventId, e: NetworkEvent) {
        if self.events.len() <= id {
            self.events.resize_with(id + 1, || None);
        }
        let name = e.split.network().name.clone();
        for &h in &e.hosts {
            if let Some(n) = self.placed.get_mut(h) {
                *n += 1;
            }
        }
        if let Some(old) = self.events[id].replace(e) {
            self.unname(id, &old);
        }
        self.by_name.entry(name).or_default().insert(id);
    }

    /// The id of the installed event named `name`.
    pub fn id_of(&self, name: &str) -> Option<EventId> {
        self.by_name.get(name).and_then(|ids| ids.first().copied())
    }

    /// How many installed events are placed on `host`.
    pub fn placed_count(&self, host: HostId) -> usize {
        self.placed.get(host).copied().unwrap_or(0)
    }

    /// Drops `id` (which held `e`) from the index by name and the counts by host.
    fn unname(&mut self, id: EventId, e: &NetworkEvent) {
        for &h in &e.hosts {
            if let Some(n) = self.placed.get_mut(h) {
                *n = n.saturating_sub(1);
            }
        }
        let name = &e.split.network().name;
        if let Some(ids) = self.by_name.get_mut(name) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_name.remove(name);
            }
        }
    }

    /// Forgets an event and its pending decisions.
    pub fn remove(&mut self, event: EventId) -> Result<NetworkEvent, ManagerError> {
        let e = self
            .events
            .get_mut(event)
            .and_then(Option::take)
            .ok_or(ManagerError::UnknownEvent(event))?;
        self.unname(event, &e);
        self.pending.retain(|k, _| k.0 != event);
        self.pending_starts.remove(&event);
        self.drill.forget(event);
        Ok(e)
    }

    pub fn event(&self, event: EventId) -> Option<&NetworkEvent> {
        self.events.get(event).and_then(Option::as_ref)
    }

    /// Installed events, by id.
    pub fn events(&self) -> impl Iterator<Item = (EventId, &NetworkEvent)> {
        self.events
            .iter()
            .enumerate()
            .filter_map(|(i, e)| Some((i, e.as_ref()?)))
    }

    /// Decisions waiting for answers.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// `host`'s trigger of `event` fired (its report carries the local
    /// aggregates' values). Returns the polls to send: each placed host
    /// that has neither answered nor been asked. A decision may already be
    /// possible (one placed host).
    pub fn satisfied(
        &mut self,
        event: EventId,
        host: HostId,
        report: &Report,
    ) -> Result<(Vec<Poll>, Option<Decision>), ManagerError> {
        let e = self.event(event).ok_or(ManagerError::UnknownEvent(event))?;
        let Some(slot) = e.hosts.iter().position(|&h| h == host) else {
            return Ok((Vec::new(), None));
        };
        let values: Vec<f64> = report.values.iter().map(|(_, v)| *v).collect();
        let interval_ns = e.split.local.interval_ns;
        check_values(e, &values, interval_ns)?;
        let w = report.window;
        if interval_ns == 0
            || !w.start_ns.is_multiple_of(interval_ns)
            || w.end_ns != w.start_ns.saturating_add(interval_ns)
        {
            return Err(ManagerError::NotAWindow {
                event,
                start_ns: w.start_ns,
                end_ns: w.end_ns,
                interval_ns,
            });
        }
        if let Some(now_ns) = self
            .now_ns
            .filter(|&n| w.start_ns > n.saturating_add(MAX_SKEW_NS))
        {
            return Err(ManagerError::FutureWindow {
                start_ns: w.start_ns,
                now_ns,
            });
        }
        check_group(&e.split.local.granularity, &report.group).map_err(|why| ManagerError::WrongGroup {
            event,
            group: group_text(&report.group),
            why,
        })?;
        let name = self.inventory.hosts().get(host).map_or("", |h| h.name.as_str());
        // Naming no origin is no lie (a host's origin goes in no decision).
        if !report.origin.host.is_empty() && &*report.origin.host != name {
            return Err(ManagerError::WrongOrigin {
                host: name.to_string(),
                origin: report.origin.host.chars().take(64).collect(),
            });
        }
        // Last, so that a report failing an earlier check keeps its reason.
        check_own_counts(e, &values, report.completeness.packets, interval_ns)?;
        let n = e.hosts.len();
        let hosts = e.hosts.clone();
        let key = (event, report.window.start_ns, report.group);
        if self.decided.contains(&key) {
            // Decided already, with this host's values (it was polled).
            return Ok((Vec::new(), None));
        }
        let starts = &mut self.pending_starts;
        let p = self.pending.entry(key).or_insert_with(|| {
            *starts.entry(event).or_default().entry(key.1).or_default() += 1;
            Pending {
                window: report.window,
                answers: vec![None; n],
                polled: vec![false; n],
                completeness: Completeness {
                    complete: true,
                    ..Completeness::default()
                },
            }
        });
        p.completeness.add_counts(&report.completeness);
        p.completeness.complete &= report.completeness.complete;
        p.answers[slot] = Some(Some(values));
        p.polled[slot] = true;
        let mut polls = Vec::new();
        for (i, &h) in hosts.iter().enumerate() {
            if !p.polled[i] {
                p.polled[i] = true;
                polls.push(Poll {
                    event,
                    host: h,
                    window_start_ns: key.1,
                    group: key.2,
                });
            }
        }
        // Ready told from the entry in hand, not looked up again.
        let decided = match p.all_answered() {
            true => self.decide(&key),
            false => None,
        };
        Ok((polls, decided))
    }

    /// A host's answer to a poll: its values of the split's needs for the
    /// group (`None` when it had no packets of the group) and, when it
    /// still knew them, its packets in the window, which bound the values
    /// as a satisfaction report's completeness does. Returns the decision
    /// when this was the last answer missing.
    pub fn answer(
        &mut self,
        poll: &Poll,
        values: Option<Vec<f64>>,
        packets: Option<u64>,
    ) -> Result<Option<Decision>, ManagerError> {
        let e = self
            .event(poll.event)
            .ok_or(ManagerError::UnknownEvent(poll.event))?;
        let interval_ns = e.split.local.interval_ns;
        if let Some(v) = &values {
            check_values(e, v, interval_ns)?;
            if let Some(packets) = packets {
                check_own_counts(e, v, packets, interval_ns)?;
            }
        }
        let Some(slot) = e.hosts.iter().position(|&h| h == poll.host) else {
            return Ok(None);
        };
        let key = (poll.event, poll.window_start_ns, poll.group);
        let Some(p) = self.pending.get_mut(&key) else {
            return Ok(None);
        };
        if p.answers[slot].is_none() {
            p.answers[slot] = Some(values);
        }
        // Ready told from the entry in hand, not looked up again.
        if p.all_answered() {
            return Ok(self.decide(&key));
        }
        Ok(None)
    }

    /// Whether `poll` would add nothing to its decision: the host's values
    /// are in already (its own report of the window came after the poll
    /// was made, before it was sent), or the window and group are no
    /// longer pending (decided, or their event removed).
    pub fn answered_already(&self, poll: &Poll) -> bool {
        let key = (poll.event, poll.window_start_ns, poll.group);
        let (Some(p), Some(e)) = (self.pending.get(&key), self.event(poll.event)) else {
            return true;
        };
        let slot = e.hosts.iter().position(|&h| h == poll.host);
        slot.is_none_or(|s| p.answers.get(s).is_none_or(Option::is_some))
    }

    /// Decides now with the answers so far (a transport's timeout).
    pub fn expire(&mut self, event: EventId, window_start_ns: u64, group: GroupKey) -> Option<Decision> {
        self.decide(&(event, window_start_ns, group))
    }

    /// The start of the oldest window of `event` still waiting for answers.
    pub fn oldest_pending(&self, event: EventId) -> Option<u64> {
        let starts = self.pending_starts.get(&event)?;
        starts.first_key_value().map(|(&start, _)| start)
    }

    /// Every pending decision's key, for a transport that expires them by age.
    pub fn pending_keys(&self) -> Vec<(EventId, u64, GroupKey)> {
        let mut keys: Vec<Key> = self.pending.keys().copied().collect();
        keys.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)).then_with(|| a.2.cmp(&b.2)));
        keys
    }

    fn decide(&mut self, key: &Key) -> Option<Decision> {
        let p = self.pending.remove(key)?;
        if let Some(starts) = self.pending_starts.get_mut(&key.0) {
            if let Some(n) = starts.get_mut(&key.1) {
                *n -= 1;
                if *n == 0 {
                    starts.remove(&key.1);
                }
            }
            if starts.is_empty() {
                self.pending_starts.remove(&key.0);
            }
        }
        if self.decided.insert(*key) {
            self.decided_order.push_back(*key);
            if self.decided_order.len() > DECIDED_KEPT {
                if let Some(old) = self.decided_order.pop_front() {
                    self.decided.remove(&old);
                }
            }
        }
        let e = self.event(key.0)?;
        let mut answered = Vec::new();
        let mut missing = Vec::new();
        let mut values: Vec<&[f64]> = Vec::new();
        for (i, a) in p.answers.iter().enumerate() {
            match a {
                None => missing.push(e.hosts[i]),
                Some(v) => {
                    answered.push(e.hosts[i]);
                    if let Some(v) = v {
                        values.push(v);
                    }
                }
            }
        }
        // Lengths were checked on the way in.
        let (holds, net) = e.split.decide(&values).ok()?;
        let report = holds.then(|| {
            let mut completeness = p.completeness;
            completeness.complete &= missing.is_empty();
            let hosts = self.inventory.hosts();
            Report {
                capture: None,
                missing_hosts: missing.iter().map(|&h| hosts[h].name.as_str().into()).collect(),
                event: e.split.network().name.clone().into(),
                window: p.window,
                group: key.2,
                values: net.into_iter().map(|(k, v)| (k.into(), v)).collect(),
                origin: Origin {
                    host: self.name.clone().into(),
                    worker: NETWORK_WORKER,
                },
                completeness,
            }
        });
        Some(Decision {
            event: key.0,
            window: p.window,
            group: key.2,
            report,
            answered,
            missing,
        })
    }
}

/// A host's values must be as many as the split needs, each one its
/// aggregate can take: a host that lies (or is broken) is refused, not
/// summed into a network-wide decision.
fn check_values(e: &NetworkEvent, values: &[f64], window_ns: u64) -> Result<(), ManagerError> {
    if values.len() != e.split.needs.len() {
        return Err(ManagerError::ValueCount {
            got: values.len(),
            want: e.split.needs.len(),
        });
    }
    for ((call, _), &v) in e.split.needs.iter().zip(values) {
        if !possible(call, v) {
            return Err(ManagerError::ImpossibleValue {
                aggregate: call.to_string(),
                value: v,
            });
        }
        if let Some(most) = most_in(call, window_ns) {
            if v > most {
                return Err(ManagerError::BeyondTheLink {
                    aggregate: call.to_string(),
                    value: v,
                    window_ns,
                });
            }
        }
    }
    Ok(())
}

/// What an aggregate counts, when it counts packets or their bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Counts {
    /// `count(...)`, `sum(packets)`: at most one a packet.
    Packets,
    /// `sum(volume)`, `sum(size)`: at most [`MAX_PACKET_BYTES`] a packet.
    Bytes,
}

fn counts(call: &AggCall) -> Option<Counts> {
    let var = match &call.arg {
        PacketExpr::Var(v) if !v.last_epoch => Some(v.base),
        _ => None,
    };
    match (call.func, var) {
        (AggFunc::Count, _) | (AggFunc::Sum, Some(BaseVar::Packets)) => Some(Counts::Packets),
        (AggFunc::Sum, Some(BaseVar::Volume | BaseVar::Size)) => Some(Counts::Bytes),
        _ => None,
    }
}

/// The most `call` can be in a window of `window_ns` on any host, for the
/// aggregates of packet counts and sizes (`count(...)`, `sum(packets)`,
/// `sum(volume)`, `sum(size)`); `None` for others.
fn most_in(call: &AggCall, window_ns: u64) -> Option<f64> {
    let w = window_ns as f64;
    Some(match counts(call)? {
        Counts::Packets => w * MAX_PACKETS_PER_NS,
        Counts::Bytes => w * MAX_BYTES_PER_NS,
    })
}

/// A satisfaction report's or poll answer's values against the host's own
/// count of the window's packets, which the same message carries (a
/// report's completeness: every IP packet the host's monitor handled in the
/// window, of the event or not). A group's packets are some of those: `count(...)` and
/// `sum(packets)` are at most that many, `sum(volume)` and `sum(size)` at
/// most that many largest packets. The count itself is held to what a link
/// carries. A host that lies about both its values and its count stays
/// within its links (the bound above); one whose monitor is sound cannot
/// trip this.
fn check_own_counts(
    e: &NetworkEvent,
    values: &[f64],
    counted: u64,
    window_ns: u64,
) -> Result<(), ManagerError> {
    let packets = counted as f64;
    if packets > window_ns as f64 * MAX_PACKETS_PER_NS {
        return Err(ManagerError::BeyondTheLink {
            aggregate: "packets counted".into(),
            value: packets,
            window_ns,
        });
    }
    for ((call, _), &v) in e.split.needs.iter().zip(values) {
        let most = match counts(call) {
            Some(Counts::Packets) => packets,
            Some(Counts::Bytes) => packets * MAX_PACKET_BYTES,
            None => continue,
        };
        if v > most {
            return Err(ManagerError::BeyondItsCounters {
                aggregate: call.to_string(),
                value: v,
                packets: counted,
            });
        }
    }
    Ok(())
}

/// `{src_ip=10.0.0.0/24, dst_port=80}`, for messages.
fn group_text(g: &GroupKey) -> String {
    let fields: Vec<String> = g
        .fields()
        .into_iter()
        .map(|(k, v)| format!("{k}={}", v.as_deref().unwrap_or("none")))
        .collect();
    format!("{{{}}}", fields.join(", "))
}

/// Whether `g` is a group of `gran`: every field the granularity keeps
/// present (the VNI may be absent: hosts older than it do not send it),
/// none other; addresses with the granularity's prefix length for their
/// family and no bits set beyond it.
fn check_group(gran: &Granularity, g: &GroupKey) -> Result<(), String> {
    fn addr(field: &str, lens: Option<PrefixLens>, a: Option<(IpAddr, u8)>) -> Result<(), String> {
        match (lens, a) {
            (None, None) => Ok(()),
            (Some(_), None) => Err(format!("it has no {field}")),
            (None, Some(_)) => Err(format!("it has a {field}, which the event does not group by")),
            (Some(l), Some((ip, len))) => {
                let want = if ip.is_ipv4() { l.v4 } else { l.v6 };
                if len != want {
                    return Err(format!(
                        "its {field} has prefix length {len}, the event's is {want}"
                    ));
                }
                // As the inventory checks its prefixes.
                let (b, _) = inventory::bits(ip);
                if b & !inventory::mask(len) != 0 {
                    return Err(format!("its {field} {ip}/{len} has bits set beyond /{len}"));
                }
                Ok(())
            }
        }
    }
    fn present<T>(field: &str, wanted: bool, v: &Option<T>) -> Result<(), String> {
        match (wanted, v.is_some()) {
            (true, false) => Err(format!("it has no {field}")),
            (false, true) => Err(format!("it has a {field}, which the event does not group by")),
            _ => Ok(()),
        }
    }
    addr("source address", gran.src_ip, g.src_ip)?;
    addr("destination address", gran.dst_ip, g.dst_ip)?;
    present("source port", gran.src_port, &g.src_port)?;
    present("destination port", gran.dst_port, &g.dst_port)?;
    present("protocol", gran.proto, &g.proto)?;
    present("VLAN", gran.vlan, &g.vlan)?;
    if !gran.vni && g.vni.is_some() {
        return Err("it has a VNI, which the event does not group by".into());
    }
    Ok(())
}

/// Whether `v` can be `call`'s value in a window: a count is a whole
/// number, no aggregate of a quantity that is never negative is negative,
/// only min, max, avg and stddev can be undefined (NaN), none is infinite.
fn possible(call: &AggCall, v: f64) -> bool {
    if v.is_infinite() {
        return false;
    }
    let undefined_ok = !matches!(call.func, AggFunc::Count | AggFunc::Sum);
    if v.is_nan() {
        return undefined_ok;
    }
    match call.func {
        AggFunc::Count => v >= 0.0 && v.fract() == 0.0,
        AggFunc::Stddev => v >= 0.0,
        _ => v >= 0.0 || !never_negative(&call.arg),
    }
}

/// Whether an expression over packet variables (all counts and sizes,
/// never negative) can never be negative.
fn never_negative(x: &PacketExpr) -> bool {
    match x {
        PacketExpr::Int(i) => *i >= 0,
        PacketExpr::Var(_) => true,
        PacketExpr::Neg(_) | PacketExpr::Arith(ArithOp::Sub | ArithOp::Div, _, _) => false,
        PacketExpr::Arith(_, l, r) => never_negative(l) && never_negative(r),
        // Truth values: 0 or 1.
        PacketExpr::Cmp(..) | PacketExpr::And(..) | PacketExpr::Or(..) | PacketExpr::Not(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_lang::spec::{
        AggCall, AggFunc, BaseVar, CmpOp, Filter, Granularity, IpPrefix, PacketExpr, Pred, Scope, Var,
    };

    fn inventory() -> Inventory {
        Inventory::parse("a 10.0.0.0/24\nb 10.0.1.0/24\nc 10.0.2.0/24\n").expect("valid")
    }

    /// sum(volume) > 300, per destination, 10 ms, for traffic to 10.0.0.0/23 (hosts a and b).
    fn spike() -> EventSpec {
        EventSpec {
            capture: None,
            priority: None,
            name: "spike".into(),
            filters: vec![Filter {
                dst_ip: Some(IpPrefix {
                    addr: "10.0.0.0".parse().expect("addr"),
                    len: 23,
                }),
                ..Filter::default()
            }],
            predicate: Pred::Cmp(
                CmpOp::Gt,
                Box::new(Pred::Agg(AggCall {
                    func: AggFunc::Sum,
                    arg: PacketExpr::Var(Var {
                        base: BaseVar::Volume,
                        last_epoch: false,
                    }),
                })),
                Box::new(Pred::Num(300.0)),
            ),
            granularity: Granularity {
                dst_ip: Some(clarion_lang::spec::PrefixLens { v4: 16, v6: 64 }),
                ..Granularity::default()
            },
            interval_ns: 10_000_000,
            scope: Scope::Network,
            drill_downs: Vec::new(),
            on_demand: false,
        }
    }

    /// A group of `spike` (per dst_ip/16).
    fn group() -> GroupKey {
        GroupKey {
            dst_ip: Some(("10.0.0.0".parse().expect("addr"), 16)),
            ..GroupKey::default()
        }
    }

    fn report(host: &str, volume: f64) -> Report {
        Report {
            capture: None,
            missing_hosts: Box::default(),
            event: "spike".into(),
            window: Window {
                start_ns: 10_000_000,
                end_ns: 20_000_000,
            },
            group: group(),
            values: vec![("sum(volume)".into(), volume)].into(),
            origin: Origin {
                host: host.into(),
                worker: 0,
            },
            completeness: Completeness {
                packets: 7,
                complete: true,
                ..Completeness::default()
            },
        }
    }

    #[test]
    fn installs_on_the_placed_hosts_with_the_split_threshold() {
        let mut m = Manager::new("mgr", inventory());
        let (id, local) = m.install(&spike()).expect("installs");
        assert_eq!(id, 0);
        let hosts: Vec<HostId> = local.iter().map(|(h, _)| *h).collect();
        assert_eq!(hosts, [0, 1]);
        assert_eq!(local[0].1.predicate.to_string(), "sum(volume) > 150");
        // A service's virtual address, which no host owns: any host may send to it.
        let mut vip = spike();
        vip.name = "vip".into();
        vip.filters[0].dst_ip = Some(IpPrefix {
            addr: "192.0.2.10".parse().expect("addr"),
            len: 32,
        });
        let (_, local) = m.install(&vip).expect("placed on every host");
        assert_eq!(local.len(), m.inventory().hosts().len());
    }

    #[test]
    fn a_satisfied_host_polls_the_others_and_the_last_answer_decides() {
        let mut m = Manager::new("mgr", inventory());
        let (id, _) = m.install(&spike()).expect("installs");
        // Host a: 200 > 150 locally.
        let (polls, now) = m.satisfied(id, 0, &report("a", 200.0)).expect("satisfied");
        assert!(now.is_none());
        assert_eq!(polls.len(), 1);
        assert_eq!(polls[0].host, 1);
        // Host b had 120: 320 > 300 network-wide.
        let d = m
            .answer(&polls[0], Some(vec![120.0]), None)
            .expect("answer")
            .expect("decided");
        let r = d.report.expect("fires");
        assert_eq!(r.values[..], [("sum(volume)".into(), 320.0)]);
        assert_eq!(&*r.origin.host, "mgr");
        assert_eq!(r.origin.worker, NETWORK_WORKER);
        assert!(r.completeness.complete && r.missing_hosts.is_empty());
        assert!(r.to_json()["completeness"].get("missing_hosts").is_none());
        assert_eq!((d.answered, d.missing), (vec![0, 1], vec![]));
        assert_eq!(m.pending(), 0);
        // A late duplicate answer is ignored.
        assert_eq!(m.answer(&polls[0], Some(vec![1.0]), None).expect("answer"), None);
    }

    #[test]
    fn below_the_network_threshold_nothing_fires_and_silence_is_partial() {
        let mut m = Manager::new("mgr", inventory());
        let (id, _) = m.install(&spike()).expect("installs");
        let (polls, _) = m.satisfied(id, 0, &report("a", 160.0)).expect("satisfied");
        let d = m.answer(&polls[0], None, None).expect("answer").expect("decided");
        assert_eq!(d.report, None, "160 alone is not above 300");
        // Host b never answers (next window): the transport expires the decision.
        let mut late = report("a", 400.0);
        late.window.start_ns += 10_000_000;
        late.window.end_ns += 10_000_000;
        let (polls, _) = m.satisfied(id, 0, &late).expect("satisfied");
        assert_eq!(polls.len(), 1);
        assert_eq!(m.pending_keys().len(), 1);
        let d = m.expire(id, 20_000_000, group()).expect("decided");
        assert_eq!(d.missing, vec![1]);
        let r = d.report.expect("400 alone is above 300");
        assert!(
            !r.completeness.complete,
            "a partial decision is marked incomplete"
        );
        // Both hosts satisfied (another window): the second report answers the first's poll.
        let mut a = report("a", 200.0);
        a.window.start_ns += 20_000_000;
        a.window.end_ns += 20_000_000;
        let mut b = report("b", 200.0);
        b.window = a.window;
        let (p1, _) = m.satisfied(id, 0, &a).expect("satisfied");
        let (p2, d) = m.satisfied(id, 1, &b).expect("satisfied");
        assert_eq!((p1.len(), p2.len()), (1, 0));
        assert_eq!(d.expect("decided").report.expect("fires").values[0].1, 400.0);
        // A report for a decided window starts nothing.
        assert_eq!(m.satisfied(id, 1, &b).expect("ignored"), (vec![], None));
    }

    #[test]
    fn an_id_from_before_a_restart_is_kept_and_names_stay_unique() {
        let mut m = Manager::new("mgr", inventory());
        m.install_as(5, &spike()).expect("installs at 5");
        assert_eq!(m.id_of("spike"), Some(5));
        assert_eq!(m.install_as(5, &spike()).err(), Some(ManagerError::IdTaken(5)));
        assert_eq!(
            m.install(&spike()).err(),
            Some(ManagerError::DuplicateName("spike".into()))
        );
        let mut other = spike();
        other.name = "other".into();
        let (id, _) = m.install(&other).expect("installs");
        assert_eq!(id, 6, "new ids come after every id used");
        m.remove(5).expect("removes");
        assert_eq!(m.id_of("spike"), None);
    }

    #[test]
    fn an_event_prepared_elsewhere_installs_as_install_does() {
        let inv = inventory();
        // Made from the inventory alone (the API's blocking task).
        let prepared = Manager::prepare(&inv, &spike()).expect("places and splits");
        assert_eq!(prepared.hosts, [0, 1]);
        let mut m = Manager::new("mgr", inv.clone());
        m.install_prepared(3, prepared.clone()).expect("installs");
        let mut direct = Manager::new("mgr", inv.clone());
        direct.install_as(3, &spike()).expect("installs");
        let (a, b) = (m.event(3).expect("there"), direct.event(3).expect("there"));
        assert_eq!((&a.hosts, &a.split.local), (&b.hosts, &b.split.local));
        assert_eq!(m.id_of("spike"), Some(3));
        assert_eq!((m.placed_count(0), m.placed_count(2)), (1, 0));
        assert_eq!(
            m.install_prepared(4, prepared.clone()).err(),
            Some(ManagerError::DuplicateName("spike".into()))
        );
        assert_eq!(
            m.install_prepared(3, prepared.clone()).err(),
            Some(ManagerError::IdTaken(3))
        );
        // Ids set aside: later installs go above them.
        let first = m.reserve_ids(2);
        assert_eq!((first, m.next_id()), (4, 6));
        let mut other = spike();
        other.name = "other".into();
        let (id, _) = m.install(&other).expect("installs");
        assert_eq!(id, 6);
        let mut third = prepared;
        third.split = split(
            &{
                let mut t = spike();
                t.name = "third".into();
                t
            },
            2,
        )
        .expect("splits");
        m.install_prepared(first, third).expect("a reserved id");
    }

    #[test]
    fn wrong_input_is_an_error_not_a_panic() {
        let mut m = Manager::new("mgr", inventory());
        let (id, _) = m.install(&spike()).expect("installs");
        let mut bad = report("a", 1.0);
        bad.values.push(("x".into(), 2.0));
        assert_eq!(
            m.satisfied(id, 0, &bad).err(),
            Some(ManagerError::ValueCount { got: 2, want: 1 })
        );
        assert_eq!(
            m.satisfied(9, 0, &report("a", 1.0)).err(),
            Some(ManagerError::UnknownEvent(9))
        );
        // A host without the trigger is ignored.
        assert_eq!(
            m.satisfied(id, 2, &report("c", 999.0)).expect("ignored").0,
            vec![]
        );
        assert_eq!(m.placed_count(0), 1);
        m.remove(id).expect("removes");
        assert_eq!(m.placed_count(0), 0, "counted out");
        assert_eq!(m.remove(id).err(), Some(ManagerError::UnknownEvent(id)));
        assert_eq!(m.events().count(), 0);
        assert_eq!(
            m.install_as(usize::MAX, &spike()).err(),
            Some(ManagerError::IdTooFar {
                id: usize::MAX,
                next: 1
            })
        );
    }

    #[test]
    fn what_a_host_cannot_have_seen_is_refused() {
        let mut m = Manager::new("mgr", inventory());
        let (id, _) = m.install(&spike()).expect("installs");
        for v in [-1.0, f64::NAN, f64::INFINITY] {
            let e = m.satisfied(id, 0, &report("a", v)).expect_err("refused");
            assert!(matches!(e, ManagerError::ImpossibleValue { .. }), "{v}: {e}");
            assert!(e.to_string().contains("sum(volume)"), "{e}");
        }
        for (start_ns, end_ns) in [
            (10_000_001, 20_000_001),
            (10_000_000, 10_000_001),
            (0, 20_000_000),
        ] {
            let mut r = report("a", 400.0);
            r.window = Window { start_ns, end_ns };
            let e = m.satisfied(id, 0, &r).expect_err("refused");
            assert!(matches!(e, ManagerError::NotAWindow { .. }), "{e}");
        }
        // More than a link carries in 10 ms (2 GB at 200 B/ns).
        for v in [1e12, 1e300] {
            let e = m.satisfied(id, 0, &report("a", v)).expect_err("refused");
            assert_eq!(e.refusal(), Some("beyond_the_link"), "{e}");
        }
        let mut busy = report("a", 1e9);
        busy.completeness.packets = 20_000;
        assert!(m.satisfied(id, 0, &busy).is_ok(), "1 GB in 10 ms can be");
        let mut m = Manager::new("mgr", inventory());
        let (id, _) = m.install(&spike()).expect("installs");
        // Groups not of `per dst_ip/16`.
        let dst = |a: &str, len| GroupKey {
            dst_ip: Some((a.parse().expect("addr"), len)),
            ..GroupKey::default()
        };
        for g in [
            dst("10.0.0.5", 16),
            dst("10.0.0.0", 24),
            dst("10.0.0.128", 33),
            GroupKey::default(),
            GroupKey {
                dst_port: Some(Some(80)),
                ..group()
            },
            GroupKey {
                vni: Some(Some(7)),
                ..group()
            },
        ] {
            let mut r = report("a", 400.0);
            r.group = g;
            let e = m.satisfied(id, 0, &r).expect_err("refused");
            assert_eq!(e.refusal(), Some("wrong_group"), "{g:?}: {e}");
        }
        // Another host's name as origin.
        let e = m.satisfied(id, 0, &report("b", 400.0)).expect_err("refused");
        assert_eq!(e.to_string(), "a report of host a names b as its origin");
        // A window beyond the clock and its skew (the year 2100).
        m.set_clock(1_795_000_000_000_000_000);
        let mut r = report("a", 400.0);
        r.window = Window {
            start_ns: 4_102_444_800_000_000_000,
            end_ns: 4_102_444_800_010_000_000,
        };
        let e = m.satisfied(id, 0, &r).expect_err("refused");
        assert_eq!(e.refusal(), Some("future_window"), "{e}");
        assert_eq!(m.pending(), 0, "nothing refused starts a decision");
        let (polls, _) = m.satisfied(id, 0, &report("a", 400.0)).expect("valid");
        assert!(
            m.answer(&polls[0], Some(vec![-5.0]), None).is_err(),
            "a poll's answer too"
        );
        assert!(m
            .answer(&polls[0], Some(vec![5.0]), None)
            .expect("valid")
            .is_some());
    }

    #[test]
    fn values_beyond_the_hosts_own_count_of_the_window_are_refused() {
        let mut m = Manager::new("mgr", inventory());
        let (id, _) = m.install(&spike()).expect("installs");
        // 7 packets counted (`report`): at most 7 of the largest IP packets.
        let most = 7.0 * 65_575.0;
        assert!(
            m.satisfied(id, 0, &report("a", most)).is_ok(),
            "7 jumbo-free packets can be"
        );
        let mut m = Manager::new("mgr", inventory());
        let (id, _) = m.install(&spike()).expect("installs");
        let e = m.satisfied(id, 0, &report("a", most + 1.0)).expect_err("refused");
        assert_eq!(e.refusal(), Some("beyond_its_counters"), "{e}");
        assert_eq!(
            e.to_string(),
            "459026 cannot be `sum(volume)` in a window in which the host counted 7 packets"
        );
        // A count no link carries in the window is a lie too.
        let mut r = report("a", 400.0);
        r.completeness.packets = 20_000_001;
        let e = m.satisfied(id, 0, &r).expect_err("refused");
        assert_eq!(e.refusal(), Some("beyond_the_link"), "{e}");
        // Counts: at most one a packet.
        let mut counting = spike();
        counting.name = "counting".into();
        counting.predicate = Pred::Cmp(
            CmpOp::Gt,
            Box::new(Pred::Agg(AggCall {
                func: AggFunc::Count,
                arg: PacketExpr::Var(Var {
                    base: BaseVar::Ttl,
                    last_epoch: false,
                }),
            })),
            Box::new(Pred::Num(4.0)),
        );
        let (cid, _) = m.install(&counting).expect("installs");
        let mut r = report("a", 7.0);
        r.event = "counting".into();
        assert!(m.satisfied(cid, 0, &r).is_ok(), "{:?}", m.satisfied(cid, 0, &r));
        r.values[0].1 = 8.0;
        r.window.start_ns += 10_000_000;
        r.window.end_ns += 10_000_000;
        let e = m.satisfied(cid, 0, &r).expect_err("8 of 7 packets");
        assert_eq!(e.refusal(), Some("beyond_its_counters"), "{e}");
        assert_eq!(m.pending(), 1, "only the sound report started a decision");
    }

    #[test]
    fn a_poll_answer_beyond_the_hosts_own_count_is_refused() {
        let mut m = Manager::new("mgr", inventory());
        let (id, _) = m.install(&spike()).expect("installs");
        let (polls, _) = m.satisfied(id, 0, &report("a", 400.0)).expect("valid");
        // 3 packets in the window: at most 3 of the largest IP packets.
        let e = m
            .answer(&polls[0], Some(vec![3.0 * 65_575.0 + 1.0]), Some(3))
            .expect_err("refused");
        assert_eq!(e.refusal(), Some("beyond_its_counters"), "{e}");
        let e = m
            .answer(&polls[0], Some(vec![5.0]), Some(20_000_001))
            .expect_err("no link carries it");
        assert_eq!(e.refusal(), Some("beyond_the_link"), "{e}");
        assert_eq!(m.pending(), 1, "refused answers count as none");
        let d = m.answer(&polls[0], Some(vec![3.0 * 65_575.0]), Some(3));
        assert!(d.expect("sound").is_some(), "decided with the sound answer");
    }

    #[test]
    fn only_what_can_be_negative_or_undefined_may_be() {
        let var = |base| {
            PacketExpr::Var(Var {
                base,
                last_epoch: false,
            })
        };
        let call = |func, arg| AggCall { func, arg };
        let ttl = || var(BaseVar::Ttl);
        assert!(possible(&call(AggFunc::Count, ttl()), 3.0));
        assert!(!possible(&call(AggFunc::Count, ttl()), 2.5));
        assert!(!possible(&call(AggFunc::Count, ttl()), f64::NAN));
        assert!(
            possible(&call(AggFunc::Avg, ttl()), f64::NAN),
            "no packets: undefined"
        );
        assert!(!possible(&call(AggFunc::Max, ttl()), -1.0));
        assert!(!possible(&call(AggFunc::Stddev, ttl()), -0.5));
        let diff = PacketExpr::Arith(ArithOp::Sub, Box::new(ttl()), Box::new(PacketExpr::Int(64)));
        assert!(possible(&call(AggFunc::Sum, diff.clone()), -10.0));
        assert!(possible(
            &call(AggFunc::Min, PacketExpr::Neg(Box::new(ttl()))),
            -1.0
        ));
        let scaled = PacketExpr::Arith(ArithOp::Mul, Box::new(ttl()), Box::new(PacketExpr::Int(2)));
        assert!(!possible(&call(AggFunc::Sum, scaled), -2.0));
    }
}
