//! The manager's book of installed network-wide events: the manager's
//! state machine plus what the operator wrote (each event's canonical
//! source and when it came), kept in the persistent store when there is
//! one. Adding and removing go through here, from the events file at start
//! or from the control API, so both paths check, place and store alike.

use std::cell::OnceCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use clarion_control::{ControlError, EventInfo};
use clarion_manager::{EventId, Firing, Host, HostId, Instance, Inventory, Manager, NetworkEvent};
use clarion_report::{GroupKey, Window};
use clarion_store::{Store, StoredEvent, StoredInstance};

use crate::protocol::Trigger;

#[derive(Clone, Debug)]
struct Source {
    text: String,
    added_ns: u64,
    /// What `GET /v1/events` shows of it, built at the first listing and
    /// shared by every later one (all of it is fixed at install; a
    /// replaced event gets a new `Source`).
    listed: OnceCell<Arc<EventInfo>>,
}

impl Source {
    fn new(text: String, added_ns: u64) -> Source {
        Source {
            text,
            added_ns,
            listed: OnceCell::new(),
        }
    }
}

/// What [`EventBook::restore`] installed again, and what it could not.
#[derive(Debug, Default)]
pub struct Restored {
    pub events: usize,
    pub instances: usize,
    /// Each event's name and why.
    pub skipped_events: Vec<(String, String)>,
    /// Why each instance could not be (the message names it).
    pub skipped_instances: Vec<String>,
}

/// See the module documentation.
#[derive(Debug)]
pub struct EventBook {
    manager: Manager,
    sources: HashMap<EventId, Source>,
    store: Option<Store>,
    /// Drill-down instances: their first window's start (their triggers
    /// carry it with the row's end) and the row the store keeps; and
    /// whether they changed since last stored ([`EventBook::store_instances`]).
    instances: BTreeMap<EventId, (u64, StoredInstance)>,
    instances_changed: bool,
    /// Most events installed at once ([`EventBook::set_max_events`]).
    max_events: usize,
}

/// The default of [`EventBook::set_max_events`] (`clarion manager
/// --max-events`): far beyond what the split and the hosts' monitors are
/// measured with (docs/manager.md), and a bound on the store and on the
/// triggers every host is sent.
pub const MAX_EVENTS: usize = 100_000;

/// A request's events checked, placed and split by [`EventBook::prepare`]
/// apart from the loop that owns the book, for [`EventBook::apply`] to
/// record: all the costly work of adding events, done where it stalls no
/// decision.
#[derive(Debug)]
pub struct Prepared {
    events: Vec<PreparedEvent>,
}

#[derive(Debug)]
struct PreparedEvent {
    event: NetworkEvent,
    /// What the API answers, but for the id and time given at apply; its
    /// `source` is the event's canonical source (with what it installs).
    info: EventInfo,
}

impl Prepared {
    /// How many events (the `on demand` ones ride with their parents).
    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

/// A request being recorded a slice at a time ([`EventBook::begin_apply`]).
#[derive(Debug)]
pub struct Applying {
    todo: std::vec::IntoIter<PreparedEvent>,
    /// The first id set aside; the i-th event recorded gets `first + i`.
    first: EventId,
    added_ns: u64,
    added_text: String,
    done: Applied,
    rows: Vec<StoredEvent>,
}

impl Applying {
    /// What was recorded, and the rows to store.
    pub fn finish(self) -> (Applied, Vec<StoredEvent>) {
        (self.done, self.rows)
    }

    /// The ids recorded so far.
    pub fn added(&self) -> &[EventId] {
        &self.done.added
    }
}

/// What [`EventBook::apply`] did.
#[derive(Debug, Default)]
pub struct Applied {
    /// The ids given, in the request's order.
    pub added: Vec<EventId>,
    /// The ids of events replaced (removed) by one of the same name.
    pub replaced: Vec<EventId>,
    /// What the API answers: one per event added.
    pub infos: Vec<EventInfo>,
}

/// What [`EventBook::add`] does with an event whose name is installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnDuplicate {
    /// Refuse the whole request (the API: remove first).
    Refuse,
    /// Keep the installed one if it is the same, else replace it (the events file at start).
    Replace,
}

impl EventBook {
    pub fn new(manager: Manager, store: Option<Store>) -> EventBook {
        EventBook {
            manager,
            sources: HashMap::new(),
            store,
            instances: BTreeMap::new(),
            instances_changed: false,
            max_events: MAX_EVENTS,
        }
    }

    /// Refuse a request that would make more than `n` events installed.
    pub fn set_max_events(&mut self, n: usize) {
        self.max_events = n;
    }

    pub fn manager(&self) -> &Manager {
        &self.manager
    }

    pub fn manager_mut(&mut self) -> &mut Manager {
        &mut self.manager
    }

    pub fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    /// Reinstalls the stored events under their ids, then the drill-down
    /// instances their firings installed (before anything else takes an
    /// id). Events that no longer check or place (the language or the
    /// inventory changed) are skipped and returned with the reason; they
    /// stay in the store. Instances that cannot be installed again (their
    /// parent gone or changed) are returned too and dropped from it.
    pub fn restore(&mut self) -> Result<Restored, ControlError> {
        let mut r = Restored::default();
        let Some(store) = &self.store else {
            return Ok(r);
        };
        let failed = |e: clarion_store::StoreError| ControlError::Failed(e.to_string());
        let stored = store.events().map_err(failed)?;
        let instances = store.instances().map_err(failed)?;
        for e in stored {
            match self.install_stored(e.id as EventId, &e.source, e.added_ns) {
                Ok(()) => r.events += 1,
                Err(why) => r.skipped_events.push((e.name, why)),
            }
        }
        for i in instances {
            match self.restore_instance(&i) {
                Ok(()) => r.instances += 1,
                Err(why) => {
                    r.skipped_instances.push(why);
                    self.instances_changed = true;
                }
            }
        }
        Ok(r)
    }

    fn restore_instance(&mut self, i: &StoredInstance) -> Result<(), String> {
        let group: GroupKey = serde_json::from_str(&i.group).map_err(|e| {
            format!(
                "drill-down instance `{}` cannot be installed again: its stored group {} is not a group: {e}",
                i.name, i.group
            )
        })?;
        let firing = Firing {
            parent: i.parent as EventId,
            drill: i.drill as usize,
            window: Window {
                start_ns: i.window_start_ns,
                end_ns: i.window_end_ns,
            },
            group,
            decided_ns: i.decided_ns,
        };
        let inst = self
            .manager
            .restore_instance(i.id as EventId, &i.name, firing, i.end_ns)
            .map_err(|e| e.to_string())?;
        self.instance_installed(&inst);
        Ok(())
    }

    /// Installs an event kept elsewhere (the store, at restart; the shared
    /// bucket) under its id; the error says why it cannot be.
    pub fn install_stored(&mut self, id: EventId, source: &str, added_ns: u64) -> Result<(), String> {
        // One event, with the `on demand` events its drill-downs install.
        let spec = match clarion_lang::check(source) {
            Ok(specs) => {
                let mut own = specs.into_iter().filter(|s| !s.on_demand);
                match (own.next(), own.next()) {
                    (Some(s), None) => s,
                    _ => return Err("the stored source is not one event".into()),
                }
            }
            Err(d) => return Err(d.render("store", source, false)),
        };
        // As the API checks it: an event edited into the store gets no further.
        Self::servable(&spec, true).map_err(|e| e.to_string())?;
        self.manager.install_as(id, &spec).map_err(|e| e.to_string())?;
        self.sources.insert(id, Source::new(source.to_string(), added_ns));
        Ok(())
    }

    /// Checks the events of a request as [`EventBook::add`] does, without
    /// installing them: their names and canonical sources, in order. Events
    /// whose name is installed are refused, or left out with `skip_installed`.
    pub fn check_new(&self, text: &str, skip_installed: bool) -> Result<Vec<(String, String)>, ControlError> {
        let file =
            clarion_lang::parse(text).map_err(|d| ControlError::Invalid(d.render("request", text, false)))?;
        let specs = clarion_lang::lower(&file)
            .map_err(|d| ControlError::Invalid(d.render("request", text, false)))?;
        let mut names = HashSet::new();
        let mut out = Vec::new();
        for (ast, spec) in file.events.iter().zip(specs) {
            Self::servable(&spec, false)?;
            if self.manager.id_of(&spec.name).is_some() {
                if skip_installed {
                    continue;
                }
                return Err(ControlError::Invalid(format!(
                    "an event named `{}` is installed already; remove it first (clarion events rm {})",
                    spec.name, spec.name
                )));
            }
            unique(&mut names, &spec.name)?;
            // Placement and split from the inventory alone: no copy of the
            // manager (that made N requests O(N x installed)).
            Manager::prepare(self.manager.inventory(), &spec)
                .map_err(|e| ControlError::Invalid(e.to_string()))?;
            out.push((spec.name.clone(), ast.to_string()));
        }
        Ok(out)
    }

    /// Refuses what this manager does not serve: host events, and
    /// drill-downs unless `drill_ok` (several managers do not run them yet).
    fn servable(spec: &clarion_lang::spec::EventSpec, drill_ok: bool) -> Result<(), ControlError> {
        if !drill_ok && (spec.on_demand || !spec.drill_downs.is_empty()) {
            return Err(ControlError::Invalid(format!(
                "event `{}` takes part in a drill-down (`then install`, `on demand`), which managers \
                 sharing the load (--shared) do not run yet; run it with one manager",
                spec.name
            )));
        }
        if !spec.scope.is_network() {
            return Err(ControlError::Invalid(format!(
                "event `{}` is not network-wide: add `across hosts` (a host's own events belong to its agent)",
                spec.name
            )));
        }
        Ok(())
    }

    /// Records a drill-down instance installed by the manager's `drill`:
    /// its windows, so that its triggers carry them, and what the store
    /// keeps of it.
    pub fn instance_installed(&mut self, i: &Instance) {
        let f = &i.firing;
        let row = StoredInstance {
            id: i.event as u64,
            name: i.name.clone(),
            parent: f.parent as u64,
            drill: f.drill as u64,
            window_start_ns: f.window.start_ns,
            window_end_ns: f.window.end_ns,
            // A group always serializes.
            group: serde_json::to_string(&f.group).unwrap_or_default(),
            decided_ns: f.decided_ns,
            end_ns: i.end_ns,
        };
        self.instances.insert(i.event, (i.start_ns, row));
        self.instances_changed = true;
    }

    /// Moves an instance's end.
    pub fn set_end(&mut self, id: EventId, end_ns: Option<u64>) {
        if let Some((_, row)) = self.instances.get_mut(&id) {
            row.end_ns = end_ns;
            self.instances_changed = true;
        }
    }

    /// Forgets an instance (the manager forgot it).
    pub fn forget_instance(&mut self, id: EventId) {
        if self.instances.remove(&id).is_some() {
            self.instances_changed = true;
        }
    }

    /// Stores the drill-down instances if they changed since last stored.
    /// Called about once a second, not at each change: an instance is
    /// extended at every firing of its parent, and a restarted manager that
    /// lost a second of them installs or extends them at the next firing,
    /// as before the store kept them.
    pub fn store_instances(&mut self) -> Result<(), clarion_store::StoreError> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        if !self.instances_changed {
            return Ok(());
        }
        let rows: Vec<StoredInstance> = self.instances.values().map(|(_, row)| row.clone()).collect();
        store.set_instances(&rows)?;
        self.instances_changed = false;
        Ok(())
    }

    /// Forgets an event removed elsewhere (another manager, through the shared bucket).
    pub fn forget(&mut self, id: EventId) {
        self.sources.remove(&id);
        let _ = self.manager.remove(id);
    }

    /// Checks every event of an events file's text and installs them all,
    /// or none. Returns the ids installed and the ids removed (replaced).
    /// [`EventBook::prepare`] then [`EventBook::apply`], in one go.
    pub fn add(
        &mut self,
        text: &str,
        on_duplicate: OnDuplicate,
    ) -> Result<(Vec<EventId>, Vec<EventId>), ControlError> {
        let prepared = Self::prepare(self.manager.inventory(), text)?;
        let a = self.apply(prepared, on_duplicate)?;
        Ok((a.added, a.replaced))
    }

    /// The costly half of [`EventBook::add`], with nothing of the book but
    /// its inventory (`inventory` must be the book's manager's): parses,
    /// lowers, checks, places and splits every event of `text`, and makes
    /// what the API answers for each. Runs on any thread (the service's
    /// blocking task); O(N) in the request's events.
    pub fn prepare(inventory: &Inventory, text: &str) -> Result<Prepared, ControlError> {
        let file =
            clarion_lang::parse(text).map_err(|d| ControlError::Invalid(d.render("request", text, false)))?;
        let specs = clarion_lang::lower(&file)
            .map_err(|d| ControlError::Invalid(d.render("request", text, false)))?;
        if specs.is_empty() {
            return Err(ControlError::Invalid(
                "no event in the request; send an events file's text, e.g. `event spike ... across hosts`"
                    .into(),
            ));
        }
        let mut names = HashSet::new();
        let mut events = Vec::new();
        for (ast, spec) in file.events.iter().zip(specs) {
            Self::servable(&spec, true)?;
            if spec.on_demand {
                continue; // it comes with the events whose drill-downs install it
            }
            unique(&mut names, &spec.name)?;
            let source = with_installed_events(&file, ast, &spec);
            let event =
                Manager::prepare(inventory, &spec).map_err(|e| ControlError::Invalid(e.to_string()))?;
            let info = info_of(inventory.hosts(), 0, &event, source, 0);
            events.push(PreparedEvent { event, info });
        }
        Ok(Prepared { events })
    }

    /// The cheap half of [`EventBook::add`]: installs every prepared event,
    /// or none. Refuses an installed name (or, with
    /// [`OnDuplicate::Replace`], replaces it unless it is the same) and a
    /// request beyond the most events; records each event (O(1) apiece),
    /// then stores them in one transaction, undoing the records if the
    /// store fails.
    pub fn apply(&mut self, prepared: Prepared, on_duplicate: OnDuplicate) -> Result<Applied, ControlError> {
        let (applied, rows) = self.apply_in_memory(prepared, on_duplicate)?;
        if let Some(store) = &self.store {
            if let Err(e) = store.put_all(&rows) {
                self.undo(&applied.added);
                return Err(ControlError::Failed(e.to_string()));
            }
        }
        Ok(applied)
    }

    /// [`EventBook::apply`] without the store, in one go. Returns the rows
    /// to store (in one transaction, by the caller, e.g. on another
    /// connection: [`EventBook::store_path`]); if that fails,
    /// [`EventBook::undo`] takes the events out again.
    pub fn apply_in_memory(
        &mut self,
        prepared: Prepared,
        on_duplicate: OnDuplicate,
    ) -> Result<(Applied, Vec<StoredEvent>), ControlError> {
        let mut a = self.begin_apply(prepared, on_duplicate)?;
        while !self.apply_some(&mut a, usize::MAX)? {}
        Ok(a.finish())
    }

    /// The checks of [`EventBook::apply`] (names, the most events), the
    /// replaced events removed and ids set aside: what is left is
    /// recording the events, [`EventBook::apply_some`] at a time, so that
    /// the manager's loop records 20,000 (30 ms here) in slices between
    /// its other work. Names are not taken until recorded: the caller
    /// applies one request at a time.
    pub fn begin_apply(
        &mut self,
        prepared: Prepared,
        on_duplicate: OnDuplicate,
    ) -> Result<Applying, ControlError> {
        let mut todo = Vec::with_capacity(prepared.events.len());
        let mut replaced = Vec::new();
        for p in prepared.events {
            let name = &p.info.name;
            if let Some(id) = self.manager.id_of(name) {
                let same = self.sources.get(&id).is_some_and(|s| s.text == p.info.source);
                match on_duplicate {
                    OnDuplicate::Refuse => {
                        return Err(ControlError::Invalid(format!(
                            "an event named `{name}` is installed already; remove it first (clarion events rm {name})"
                        )))
                    }
                    OnDuplicate::Replace if same => continue,
                    OnDuplicate::Replace => replaced.push(id),
                }
            }
            todo.push(p);
        }
        let after = (self.sources.len() + todo.len()).saturating_sub(replaced.len());
        if after > self.max_events {
            return Err(ControlError::Invalid(format!(
                "the request would make {after} events installed ({} now, {} in it); at most {} \
                 (clarion manager --max-events)",
                self.sources.len(),
                todo.len(),
                self.max_events
            )));
        }
        for id in &replaced {
            self.remove_id(*id)?;
        }
        let added_ns = crate::wall_ns();
        let first = self.manager.reserve_ids(todo.len());
        Ok(Applying {
            rows: Vec::with_capacity(todo.len()),
            todo: todo.into_iter(),
            first,
            added_ns,
            added_text: clarion_report::rfc3339(added_ns),
            done: Applied {
                replaced,
                ..Applied::default()
            },
        })
    }

    /// Records at most `n` more events of `a`; true once all are. On an
    /// error (none is expected: names and ids were checked) the events
    /// recorded are taken out again.
    pub fn apply_some(&mut self, a: &mut Applying, n: usize) -> Result<bool, ControlError> {
        for _ in 0..n {
            let Some(mut p) = a.todo.next() else {
                return Ok(true);
            };
            let id = a.first + a.done.added.len();
            if let Err(e) = self.manager.install_prepared(id, p.event) {
                self.undo(&a.done.added);
                return Err(ControlError::Invalid(e.to_string()));
            }
            self.sources
                .insert(id, Source::new(p.info.source.clone(), a.added_ns));
            a.rows.push(StoredEvent {
                id: id as u64,
                name: p.info.name.clone(),
                source: p.info.source.clone(),
                added_ns: a.added_ns,
            });
            p.info.id = id as u64;
            p.info.added = a.added_text.clone();
            a.done.added.push(id);
            a.done.infos.push(p.info);
        }
        Ok(a.todo.len() == 0)
    }

    /// Takes out events [`EventBook::apply_in_memory`] recorded whose
    /// rows could not be stored.
    pub fn undo(&mut self, ids: &[EventId]) {
        for &id in ids {
            self.sources.remove(&id);
            let _ = self.manager.remove(id);
        }
    }

    /// The store's file, for a second connection that writes a large
    /// request's rows apart from the loop (none: no store, or one in memory).
    pub fn store_path(&self) -> Option<std::path::PathBuf> {
        let path = self.store.as_ref()?.path();
        (path != ":memory:").then(|| std::path::PathBuf::from(path))
    }

    /// Removes the event named `name`; returns what it was.
    pub fn remove(&mut self, name: &str) -> Result<(EventId, EventInfo), ControlError> {
        let id = self
            .manager
            .id_of(name)
            .ok_or_else(|| ControlError::NotFound(format!("no network-wide event is named `{name}`")))?;
        let info = self
            .info(id)
            .ok_or_else(|| ControlError::NotFound(name.to_string()))?;
        self.remove_id(id)?;
        Ok((id, info))
    }

    fn remove_id(&mut self, id: EventId) -> Result<(), ControlError> {
        if let Some(store) = &self.store {
            store
                .remove(id as u64)
                .map_err(|e| ControlError::Failed(e.to_string()))?;
        }
        self.sources.remove(&id);
        self.manager
            .remove(id)
            .map(|_| ())
            .map_err(|e| ControlError::NotFound(e.to_string()))
    }

    /// The hosts an event is placed on.
    pub fn hosts_of(&self, id: EventId) -> Vec<HostId> {
        self.manager
            .event(id)
            .map(|e| e.hosts.clone())
            .unwrap_or_default()
    }

    /// The trigger `host` installs for event `id`, if it is placed there.
    pub fn trigger(&self, id: EventId, host: HostId) -> Option<Trigger> {
        let e = self.manager.event(id)?;
        let span = self.instances.get(&id);
        e.hosts.contains(&host).then(|| Trigger {
            event: id as u64,
            spec: e.split.local.clone(),
            needs: e.split.needs.len(),
            start_ns: span.map(|(start, _)| *start),
            end_ns: span.and_then(|(_, row)| row.end_ns),
        })
    }

    /// Every trigger `host` installs.
    pub fn triggers_of(&self, host: HostId) -> Vec<Trigger> {
        self.triggers_page(host, 0, usize::MAX).0
    }

    /// The triggers `host` installs of events from id `from` on, in id
    /// order, until their encoded size would pass `budget` bytes (at least
    /// one, whatever its size); and the id of the first event left out,
    /// if any (a registration a page at a time, see
    /// [`crate::protocol::Register`]).
    pub fn triggers_page(
        &self,
        host: HostId,
        from: EventId,
        budget: usize,
    ) -> (Vec<Trigger>, Option<EventId>) {
        let mut page = Vec::new();
        let mut bytes = 0usize;
        for (id, _) in self
            .manager
            .events()
            .filter(|(id, e)| *id >= from && e.hosts.contains(&host))
        {
            let Some(t) = self.trigger(id, host) else { continue };
            if budget != usize::MAX {
                // A trigger is plain data: it always encodes.
                let size = serde_json::to_vec(&t).map_or(0, |v| v.len());
                if !page.is_empty() && bytes.saturating_add(size) > budget {
                    return (page, Some(id));
                }
                bytes = bytes.saturating_add(size);
            }
            page.push(t);
        }
        (page, None)
    }

    /// The events placed on `host`, by id: what [`EventBook::triggers_of`]
    /// would build, without building (or copying) any trigger.
    pub fn placed_on(&self, host: HostId) -> Vec<EventId> {
        let placed = self.manager.events().filter(|(_, e)| e.hosts.contains(&host));
        placed.map(|(id, _)| id).collect()
    }

    pub fn info(&self, id: EventId) -> Option<EventInfo> {
        let e = self.manager.event(id)?;
        let src = self.sources.get(&id);
        Some(info_of(
            self.manager.inventory().hosts(),
            id,
            e,
            src.map(|s| s.text.clone()).unwrap_or_default(),
            src.map_or(0, |s| s.added_ns),
        ))
    }

    pub fn infos(&self) -> Vec<EventInfo> {
        let ids: Vec<EventId> = self.manager.events().map(|(id, _)| id).collect();
        ids.into_iter().filter_map(|id| self.info(id)).collect()
    }

    /// Every event as [`EventBook::infos`], each built once and shared:
    /// listing 20,000 events costs the loop copies of pointers, not
    /// 20,000 infos (17 ms).
    pub fn listed(&self) -> Vec<Arc<EventInfo>> {
        let hosts = self.manager.inventory().hosts();
        let one = |(id, e): (EventId, &NetworkEvent)| match self.sources.get(&id) {
            Some(s) => Arc::clone(
                s.listed
                    .get_or_init(|| Arc::new(info_of(hosts, id, e, s.text.clone(), s.added_ns))),
            ),
            None => Arc::new(info_of(hosts, id, e, String::new(), 0)),
        };
        self.manager.events().map(one).collect()
    }
}

/// Refuses a second event of one name in a request.
fn unique(names: &mut HashSet<String>, name: &str) -> Result<(), ControlError> {
    if names.insert(name.to_string()) {
        return Ok(());
    }
    Err(ControlError::Invalid(format!(
        "two events of the request are named `{name}`; names are unique"
    )))
}

/// What the API says of an installed event.
fn info_of(hosts: &[Host], id: EventId, e: &NetworkEvent, source: String, added_ns: u64) -> EventInfo {
    EventInfo {
        id: id as u64,
        name: e.split.network().name.clone(),
        source,
        hosts: e.hosts.iter().map(|&h| hosts[h].name.clone()).collect(),
        local_predicate: e.split.local.predicate.to_string(),
        interval_ns: e.split.network().interval_ns,
        added: clarion_report::rfc3339(added_ns),
        starts_ns: None,
    }
}

/// The canonical source of `ast`, followed by those of the `on demand`
/// events its drill-downs install (at every level), so that it checks alone.
fn with_installed_events(
    file: &clarion_lang::ast::File,
    ast: &clarion_lang::ast::Event,
    spec: &clarion_lang::spec::EventSpec,
) -> String {
    let installed = spec.installed_events();
    let names: Vec<&str> = installed.iter().map(|e| e.name.as_str()).collect();
    let mut text = ast.to_string();
    if names.is_empty() {
        // Most events install none: no scan of the file (N events, N scans).
        return text;
    }
    for e in file.events.iter().filter(|e| names.contains(&e.name.as_str())) {
        text.push('\n');
        text.push_str(&e.to_string());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_manager::Inventory;

    const SPIKE: &str = "event spike\n  filter dst_ip in 10.0.0.0/23\n  when sum(volume) > 300\n  per dst_ip/16\n  every 10ms\n  across hosts\n";

    fn book(store: Option<Store>) -> EventBook {
        let inv = Inventory::parse("a 10.0.0.0/24\nb 10.0.1.0/24\nc 10.0.2.0/24\n").expect("inventory");
        EventBook::new(Manager::new("m", inv), store)
    }

    #[test]
    fn pages_hold_every_trigger_once_in_order_within_the_budget() {
        let mut b = book(None);
        let text: String = (0..50)
            .map(|i| SPIKE.replace("spike", &format!("e{i}")))
            .collect();
        b.add(&text, OnDuplicate::Refuse).expect("adds");
        let all = b.triggers_of(0);
        assert_eq!(all.len(), 50);
        let size = |t: &Trigger| serde_json::to_vec(t).expect("encodes").len();
        for budget in [1, size(&all[0]), 3 * size(&all[0]) + 1, 10_000, usize::MAX / 2] {
            let (mut got, mut from) = (Vec::new(), 0);
            loop {
                let (page, next) = b.triggers_page(0, from, budget);
                assert!(!page.is_empty(), "a page moves on");
                let bytes: usize = page.iter().map(size).sum();
                assert!(page.len() == 1 || bytes <= budget, "{bytes} > {budget}");
                got.extend(page);
                match next {
                    Some(n) => {
                        assert!(n > from);
                        from = n;
                    }
                    None => break,
                }
            }
            assert_eq!(got, all, "budget {budget}");
        }
        // A host with no trigger: one empty page.
        let none = book(None);
        assert_eq!(none.triggers_page(0, 0, 1), (Vec::new(), None));
    }

    #[test]
    fn the_shared_listing_follows_adds_replacements_and_removals() {
        let mut b = book(None);
        let named = |n: &str| SPIKE.replace("spike", n);
        let same = |b: &EventBook| {
            let listed: Vec<EventInfo> = b.listed().iter().map(|i| EventInfo::clone(i)).collect();
            assert_eq!(listed, b.infos());
        };
        b.add(&format!("{}\n{}", named("e1"), named("e2")), OnDuplicate::Refuse)
            .expect("adds");
        same(&b);
        let before = b.listed();
        assert!(Arc::ptr_eq(&before[0], &b.listed()[0]), "built once");
        b.add(&named("e1").replace("300", "400"), OnDuplicate::Replace)
            .expect("replaces");
        same(&b);
        assert!(b.listed().iter().any(|i| i.source.contains("400")));
        b.remove("e2").expect("removes");
        same(&b);
        assert_eq!(b.listed().len(), 1);
    }

    #[test]
    fn a_request_beyond_the_most_events_is_refused_whole() {
        let mut b = book(None);
        b.set_max_events(2);
        let named = |n: &str| SPIKE.replace("spike", n);
        let three = format!("{}\n{}\n{}", named("e1"), named("e2"), named("e3"));
        let e = b.add(&three, OnDuplicate::Refuse).expect_err("refused");
        assert_eq!(
            e.to_string(),
            "the request would make 3 events installed (0 now, 3 in it); at most 2 (clarion manager --max-events)"
        );
        assert_eq!(b.manager().events().count(), 0, "none of it installed");
        b.add(&format!("{}\n{}", named("e1"), named("e2")), OnDuplicate::Refuse)
            .expect("two fit");
        assert!(b.add(&named("e3"), OnDuplicate::Refuse).is_err());
        // Replacing one keeps the count.
        let changed = named("e2").replace("300", "400");
        b.add(&changed, OnDuplicate::Replace).expect("a replacement fits");
    }

    #[test]
    fn prepared_elsewhere_applied_in_the_loop_and_checked_again_there() {
        let mut b = book(None);
        let named = |n: &str| SPIKE.replace("spike", n);
        let inv = b.manager().inventory().clone();
        // Two requests prepared at once (two API calls); one name in both.
        let first = EventBook::prepare(&inv, &format!("{}\n{}", named("e1"), named("e2"))).expect("checks");
        let second = EventBook::prepare(&inv, &named("e2")).expect("checks alone");
        assert_eq!((first.len(), second.len()), (2, 1));
        let a = b.apply(first, OnDuplicate::Refuse).expect("applies");
        assert_eq!(a.added, [0, 1]);
        let names: Vec<&str> = a.infos.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["e1", "e2"]);
        assert_eq!(a.infos[1].id, 1);
        assert_eq!(
            a.infos[1],
            b.info(1).expect("installed"),
            "the answer is what is installed"
        );
        // The name was taken while the second was prepared: refused at apply.
        let e = b.apply(second, OnDuplicate::Refuse).expect_err("taken meanwhile");
        assert!(e.to_string().contains("remove it first"), "{e}");
        assert_eq!(b.manager().events().count(), 2);
        let e = EventBook::prepare(&inv, &format!("{}\n{}", named("x"), named("x"))).expect_err("twice");
        assert!(e.to_string().contains("`x`"), "{e}");
        assert_eq!(b.placed_on(0), [0, 1]);
        assert!(b.placed_on(2).is_empty());
    }

    #[test]
    fn added_events_are_placed_split_and_survive_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m.sqlite");
        let mut b = book(Some(Store::open(&path).expect("store")));
        let (added, _) = b.add(SPIKE, OnDuplicate::Refuse).expect("adds");
        let info = b.info(added[0]).expect("info");
        assert_eq!(info.hosts, ["a", "b"]);
        assert_eq!(info.local_predicate, "sum(volume) > 150");
        assert_eq!(b.triggers_of(0).len(), 1);
        assert!(b.triggers_of(2).is_empty());
        drop(b);
        let mut again = book(Some(Store::open(&path).expect("store")));
        let r = again.restore().expect("restores");
        assert_eq!((r.events, r.instances), (1, 0));
        assert!(r.skipped_events.is_empty() && r.skipped_instances.is_empty());
        assert_eq!(again.infos()[0].id, info.id);
        assert_eq!(again.infos()[0].source, info.source);
    }

    /// A drill-down instance installed by a firing, then extended, is
    /// stored; a restarted book installs it again under its id with its
    /// windows, and its hosts' triggers carry them. One whose parent is
    /// gone is said and dropped from the store.
    #[test]
    fn drill_down_instances_survive_a_restart() {
        const DRILL: &str = "event spike\n  filter dst_ip in 10.0.0.0/23\n  when sum(volume) > 300\n  per dst_ip\n  every 10ms\n  across hosts\n  then install by_src on dst_ip for 30ms\nevent by_src\n  filter dst_ip in 10.0.0.0/23\n  when sum(volume) > 10\n  per src_ip\n  every 10ms\n  across hosts\n  on demand\n";
        const MS: u64 = 1_000_000;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m.sqlite");
        let mut b = book(Some(Store::open(&path).expect("store")));
        let (added, _) = b.add(DRILL, OnDuplicate::Refuse).expect("adds");
        let spike = added[0];
        let group = GroupKey {
            dst_ip: Some(("10.0.1.5".parse().expect("addr"), 32)),
            ..GroupKey::default()
        };
        let firing = Firing {
            parent: spike,
            drill: 0,
            window: Window {
                start_ns: 100 * MS,
                end_ns: 110 * MS,
            },
            group,
            decided_ns: 111 * MS,
        };
        let name = "by_src[dst_ip=10.0.1.5/32]";
        // As the manager's `drill` installs it (an id above every event's).
        let id = b.manager().next_id();
        let inst = b
            .manager_mut()
            .restore_instance(id, name, firing, Some(150 * MS))
            .expect("installs");
        b.instance_installed(&inst);
        b.set_end(id, Some(160 * MS));
        b.store_instances().expect("stored");
        let before: Vec<Trigger> = b.triggers_of(1);
        drop(b);

        let mut again = book(Some(Store::open(&path).expect("store")));
        let r = again.restore().expect("restores");
        assert_eq!((r.events, r.instances), (1, 1), "{r:?}");
        let mut after = again.triggers_of(1);
        assert_eq!(
            after, before,
            "the same triggers, the instance's windows included"
        );
        after.retain(|t| t.event == id as u64);
        assert_eq!(
            (after[0].start_ns, after[0].end_ns),
            (Some(120 * MS), Some(160 * MS)),
            "{after:?}"
        );
        assert_eq!(again.manager().drill_instances(), 1);
        assert!(again.manager().next_id() > id, "later events get ids above it");

        // Its parent removed (and the store kept the instance): dropped.
        again.store_instances().expect("nothing to store");
        drop(again);
        let store = Store::open(&path).expect("store");
        store.remove(spike as u64).expect("removed");
        let mut third = book(Some(store));
        let r = third.restore().expect("restores");
        assert_eq!((r.events, r.instances), (0, 0));
        assert!(r.skipped_instances[0].contains(name), "{r:?}");
        third.store_instances().expect("stored");
        assert!(third
            .store()
            .expect("a store")
            .instances()
            .expect("read")
            .is_empty());
    }

    #[test]
    fn a_request_is_all_or_nothing_and_names_are_unique() {
        let mut b = book(None);
        let bad = format!("{SPIKE}\nevent unsplittable\n  when sum(volume) < 100\n  across hosts\n");
        let e = b.add(&bad, OnDuplicate::Refuse).expect_err("refused");
        assert!(e.to_string().contains("unsplittable"), "{e}");
        assert!(b.infos().is_empty(), "the first event was not installed either");
        b.add(SPIKE, OnDuplicate::Refuse).expect("adds");
        let e = b.add(SPIKE, OnDuplicate::Refuse).expect_err("duplicate");
        assert!(e.to_string().contains("remove it first"), "{e}");
        assert_eq!(
            b.add(SPIKE, OnDuplicate::Replace).expect("same: kept"),
            (vec![], vec![])
        );
        let changed = SPIKE.replace("300", "600");
        let (added, replaced) = b.add(&changed, OnDuplicate::Replace).expect("replaced");
        assert_eq!((added.len(), replaced.len()), (1, 1));
        assert_eq!(b.infos()[0].local_predicate, "sum(volume) > 300");
        let e = b
            .add("event h\n  when sum(volume) > 1\n", OnDuplicate::Refuse)
            .expect_err("host event");
        assert!(e.to_string().contains("across hosts"), "{e}");
        let e = b
            .add("event x\n  when bogus(volume) > 1\n", OnDuplicate::Refuse)
            .expect_err("invalid");
        assert!(matches!(e, ControlError::Invalid(_)), "{e:?}");
        assert!(matches!(b.remove("nope"), Err(ControlError::NotFound(_))));
        b.remove("spike").expect("removes");
        assert!(b.infos().is_empty());
        let drill = format!(
            "{}  then install detail\nevent detail when count(packets) > 1 every 10ms across hosts on demand\n",
            SPIKE
        );
        // Several managers do not run drill-downs yet; one does.
        let e = b.check_new(&drill, false).expect_err("not with --shared");
        assert!(e.to_string().contains("do not run yet"), "{e}");
        let (added, _) = b.add(&drill, OnDuplicate::Refuse).expect("one manager runs them");
        assert_eq!(added.len(), 1, "the `on demand` event comes with its parent");
        let source = b.infos()[0].source.clone();
        assert!(
            source.contains("then install detail") && source.contains("event detail"),
            "{source}"
        );
    }
}
