//! A live host's control API, above `clarion-host` (the `LiveHost` it
//! drives) and beside an agent's NATS side: the host's own events at
//! runtime (`clarion run -i`, `clarion agent -i`): the control API's commands (`--api`: add, list, show, remove, the
//! same routes as the manager's) and SIGHUP's reload of the events file,
//! applied to the `LiveHost` between the live loop's waits.
//!
//! An added event starts at the next window boundary every worker reaches
//! (its `starts_ns` says which); a removed one stops at the end of its
//! current window: it gathers no later window, and leaves the workers once
//! that window has been reported.
//!
//! Export policies change the same way (`/v1/exports`; SIGHUP reloads the
//! `--exports` file given to [`LocalEvents::with_exports_file`], making
//! the installed set the file's): every worker gets the new set between
//! its batches (`LiveHost::set_exports`), keeping the destinations still
//! used, so an unchanged policy's stream and files go on.
//!
//! The host's health (`/v1/hosts`) is read from its workers' counters
//! every 100 ms into a [`HealthHandle`] (an agent's heartbeat sends the
//! same one to the manager).

//!
//! The command line maps its flags into [`ApiSettings`] and calls
//! [`LocalEvents::start`]; nothing here knows a flag.

// Every function short (issue 34; clippy.toml sets the bound, 60 lines).
#![warn(clippy::too_many_lines)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clarion_control::{
    AppsInfo, Command, ControlError, ControlHandle, EventInfo, ExportInfo, ExportsCommand, FlowsRequest,
    HealthCounters, HealthHandle, HostInfo, ServerToken,
};
use clarion_engine::TriggerId;
use clarion_flow_window::{FlowQuery, Rank, SharedWindow};
use clarion_gpv::{app_by_name, AppRuntime, APP_NAMES};
use clarion_host::LiveHost;
use clarion_lang::spec::{EventSpec, ExportSpec};
use tokio::sync::{broadcast, mpsc};

/// Why a live host's control API or its SIGHUP reload could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The events file could not be read or is invalid: the message as
    /// rendered for the user (with the program's prefix).
    #[error("{0}")]
    Events(String),
    #[error("cannot install the SIGHUP handler")]
    Signal(#[source] std::io::Error),
    /// `--api-token`, `--api-token-file` or `--api-no-auth` refused.
    #[error(transparent)]
    Token(#[from] clarion_control::TokenError),
    #[error("cannot serve the control API on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the control API")]
    Spawn(#[source] std::io::Error),
}

/// How long after a removed event's last window ends it leaves the workers
/// (its sweep and report are done by then).
const REMOVAL_GRACE_NS: u64 = 200_000_000;

struct Local {
    id: TriggerId,
    source: String,
    spec: EventSpec,
    added_ns: u64,
    starts_ns: Option<u64>,
}

/// Where a live host serves its control API (`--api`, `--api-host`) and
/// how it authenticates (`--api-token`, `--api-token-file`, `--api-no-auth`).
pub struct ApiSettings {
    pub addr: SocketAddr,
    pub token: Option<String>,
    pub token_file: Option<PathBuf>,
    pub no_auth: bool,
    pub hosts: Vec<String>,
}

/// The host's own events by name, and those stopping.
pub struct LocalEvents {
    host: String,
    file: Option<PathBuf>,
    events: BTreeMap<String, Local>,
    /// Removed events still reporting their last window: (id, leaves after).
    stopping: Vec<(TriggerId, u64)>,
    reload: Arc<AtomicBool>,
    api: Option<mpsc::Receiver<Command>>,
    /// Reports for the API's `/v1/reports` stream.
    pub reports: Option<broadcast::Sender<String>>,
    /// The installed export policies' canonical sources and when they
    /// were installed, by name (the policies themselves are the host's).
    exports: BTreeMap<String, (String, u64)>,
    /// `--exports`, reloaded on SIGHUP.
    exports_file: Option<PathBuf>,
    /// The names of the policies the host runs for its agent's manager:
    /// a reload of the file keeps them ([`LocalEvents::keep_managers_exports`]).
    managers: Vec<String>,
    /// The host's health, recorded from its workers' counters every
    /// [`HEALTH_EVERY`] (an agent shares it with its heartbeat).
    health: HealthHandle,
    health_at: Option<std::time::Instant>,
    /// The host's recent flow records (`--records` with `--api`), for `/v1/flows`.
    flows: Option<SharedWindow>,
    /// An agent's exchanges with its manager, for `/v1/hosts`.
    link: LinkCounts,
}

/// What an agent sent its manager, as `/v1/hosts` shows it on the host's
/// own API (a host without a manager: none). The manager's row of the
/// same host counts what it received: equal once both are quiet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkCounts {
    /// Satisfaction reports sent.
    pub satisfaction_reports: u64,
    /// Polls answered.
    pub polls_answered: u64,
}

/// How often the workers' counters are read into the host's health.
const HEALTH_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// A replayed monitor's counters as health: every frame it was handed,
/// parsed or not (a capture's every packet), and what it could not track.
pub fn monitor_health(c: &clarion_engine::Counters) -> HealthCounters {
    HealthCounters {
        packets: c.packets + c.not_ip + c.malformed,
        drops_kernel: c.dropped,
        malformed: c.malformed,
        untracked: c.packets_untracked,
        sweeps: c.sweeps_completed,
        sweeps_late: c.sweeps_late,
        // A replay sweeps between packets: no wall time of its own.
        sweep_last_ns: None,
        sweep_max_ns: None,
    }
}

/// A live host's workers' counters as health, summed (sweep times: the
/// slowest worker's).
pub fn workers_health(workers: &[Arc<clarion_live::WorkerMetrics>]) -> HealthCounters {
    use clarion_live::WorkerMetrics;
    let get = |v: &std::sync::atomic::AtomicU64| WorkerMetrics::get(v);
    let sum = |f: &dyn Fn(&WorkerMetrics) -> u64| workers.iter().map(|m| f(m)).sum::<u64>();
    let max = |f: &dyn Fn(&WorkerMetrics) -> u64| workers.iter().map(|m| f(m)).max();
    HealthCounters {
        packets: sum(&|m| get(&m.packets) + get(&m.malformed) + get(&m.not_ip)),
        drops_kernel: sum(&|m| get(&m.drops)),
        malformed: sum(&|m| get(&m.malformed)),
        untracked: sum(&|m| get(&m.untracked)),
        sweeps: sum(&|m| get(&m.epochs)),
        sweeps_late: sum(&|m| get(&m.sweeps_late)),
        sweep_last_ns: max(&|m| get(&m.last_sweep_wall_ns)),
        sweep_max_ns: max(&|m| get(&m.max_sweep_wall_ns)),
    }
}

/// Every export policy of a text with its canonical source.
pub fn parse_exports(text: &str, name: &str) -> Result<Vec<(ExportSpec, String)>, String> {
    let specs = clarion_lang::check_exports(text).map_err(|d| d.render(name, text, false))?;
    let file = clarion_lang::parse(text).map_err(|d| d.render(name, text, false))?;
    let sources: BTreeMap<&str, String> = file
        .exports
        .iter()
        .map(|x| (x.name.as_str(), x.to_string()))
        .collect();
    Ok(specs
        .into_iter()
        .map(|s| {
            let source = sources.get(s.name.as_str()).cloned().unwrap_or_default();
            (s, source)
        })
        .collect())
}

/// An apps command on the host's app runtime: apps start on the GPVs
/// from now on and stop with their last report.
fn app_command(cmd: Command, apps: &mut AppRuntime) {
    let info = |apps: &AppRuntime| AppsInfo {
        running: apps.names().into_iter().map(str::to_string).collect(),
        available: APP_NAMES.iter().map(|n| n.to_string()).collect(),
    };
    let missing = |name: &str| ControlError::NotFound(format!("no app `{name}` is running"));
    match cmd {
        Command::Apps { reply } => drop(reply.send(Ok(info(apps)))),
        Command::AddApp { name, reply } => {
            let added = app_by_name(&name)
                .and_then(|app| apps.add(app))
                .map(|()| {
                    eprintln!("clarion: app {name} started");
                    info(apps)
                })
                .map_err(|e| ControlError::Invalid(e.to_string()));
            drop(reply.send(added));
        }
        Command::ShowApp { name, reply } => {
            let report = apps
                .get_mut(&name)
                .map(|a| a.report())
                .ok_or_else(|| missing(&name));
            drop(reply.send(report));
        }
        Command::RemoveApp { name, reply } => {
            let report = apps
                .remove(&name)
                .map(|mut a| {
                    eprintln!("clarion: app {name} stopped");
                    a.report()
                })
                .ok_or_else(|| missing(&name));
            drop(reply.send(report));
        }
        other => other.refuse_apps("not an apps command"),
    }
}

/// How the API's clients authenticate, for its start line.
pub fn auth_note(token: &ServerToken) -> String {
    match token {
        ServerToken::Open => " (no token: --api-no-auth)".into(),
        ServerToken::Given(_) => " (token given)".into(),
        ServerToken::File { path, .. } => format!(" (token in {})", path.display()),
    }
}

/// An events file's text, read from `path` (errors rendered for a terminal
/// or not, as standard error is): [`events_text`] of its bytes.
pub fn read_events_file(path: &Path) -> Result<String, String> {
    use std::io::IsTerminal;
    let bytes = std::fs::read(path)
        .map_err(|e| format!("clarion: cannot read events file {}: {e}", path.display()))?;
    events_text(
        &path.display().to_string(),
        bytes,
        std::io::stderr().is_terminal(),
    )
}

/// An events file's text from its bytes (`name` is what errors call it).
/// Invalid UTF-8 is rendered in place like any error, with line and column;
/// a leading byte-order mark is left for the lexer to skip.
pub fn events_text(name: &str, bytes: Vec<u8>, color: bool) -> Result<String, String> {
    if let Err(d) = clarion_lang::decode(&bytes) {
        return Err(d.render(name, &String::from_utf8_lossy(&bytes), color));
    }
    // Checked just above: this conversion cannot fail, and copies nothing.
    String::from_utf8(bytes).map_err(|e| format!("clarion: {name}: {e}"))
}

/// Every event of an events file's text with its canonical source.
pub fn parse_events(text: &str, name: &str) -> Result<Vec<(EventSpec, String)>, String> {
    let file = clarion_lang::parse(text).map_err(|d| d.render(name, text, false))?;
    let specs = clarion_lang::lower(&file).map_err(|d| d.render(name, text, false))?;
    Ok(specs
        .into_iter()
        .zip(&file.events)
        .map(|(s, ast)| (s, ast.to_string()))
        .collect())
}

impl LocalEvents {
    /// The events `host` was started with (its events file's, read again
    /// for their sources), SIGHUP registered, and the control API at `api`.
    pub fn start(
        host_name: &str,
        file: Option<&Path>,
        host: &LiveHost,
        api: Option<ApiSettings>,
        quiet: bool,
    ) -> Result<LocalEvents, Error> {
        let reload = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&reload))
            .map_err(Error::Signal)?;
        let mut book = LocalEvents {
            host: host_name.to_string(),
            file: file.map(Path::to_path_buf),
            events: BTreeMap::new(),
            stopping: Vec::new(),
            reload,
            api: None,
            reports: None,
            exports: BTreeMap::new(),
            exports_file: None,
            managers: Vec::new(),
            health: HealthHandle::new(),
            health_at: None,
            flows: None,
            link: LinkCounts::default(),
        };
        if let Some(path) = file {
            let text = read_events_file(path).map_err(Error::Events)?;
            let parsed = parse_events(&text, &path.display().to_string()).map_err(Error::Events)?;
            let ids: BTreeMap<&str, TriggerId> = host.events().map(|(id, n)| (n, id)).collect();
            for (spec, source) in parsed {
                if let Some(&id) = ids.get(spec.name.as_str()) {
                    let local = Local {
                        id,
                        source,
                        spec,
                        added_ns: clarion_live::realtime_ns(),
                        starts_ns: None,
                    };
                    book.events.insert(local.spec.name.clone(), local);
                }
            }
        }
        if let Some(api) = api {
            book.serve(api, quiet)?;
        }
        Ok(book)
    }

    /// The `--exports` file the host was started with: its policies' sources
    /// are read again for the API, and SIGHUP reloads it.
    pub fn with_exports_file(mut self, file: Option<&Path>, host: &LiveHost) -> LocalEvents {
        self.exports_file = file.map(Path::to_path_buf);
        let now = clarion_live::realtime_ns();
        let sources: BTreeMap<String, String> = file
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|t| parse_exports(&t, "").ok())
            .map(|v| v.into_iter().map(|(s, src)| (s.name, src)).collect())
            .unwrap_or_default();
        for p in host.export_policies().unwrap_or_default() {
            let source = sources.get(&p.name).cloned().unwrap_or_default();
            self.exports.insert(p.name.clone(), (source, now));
        }
        self
    }

    /// Records the host's health in `health` (an agent's, which its
    /// heartbeat sends) rather than in one of its own.
    pub fn with_health(mut self, health: HealthHandle) -> LocalEvents {
        self.health = health;
        self
    }

    /// Answers `/v1/flows` from `window` (the host's recent flow records).
    pub fn with_flow_window(mut self, window: Option<SharedWindow>) -> LocalEvents {
        self.flows = window;
        self
    }

    /// An agent's counts of what it sent its manager so far (`/v1/hosts`).
    pub fn set_link_counts(&mut self, counts: LinkCounts) {
        self.link = counts;
    }

    /// The triggers a manager installed here: the host's events that are
    /// not its own (`--events`, the API), as the manager's `triggers`
    /// counts them for this host.
    fn managers_triggers(&self, host: &LiveHost) -> usize {
        let own: std::collections::HashSet<TriggerId> = self
            .events
            .values()
            .map(|l| l.id)
            .chain(self.stopping.iter().map(|&(id, _)| id))
            .collect();
        host.events().filter(|(id, _)| !own.contains(id)).count()
    }

    /// The top talkers of one group and window of an event installed here
    /// (`/v1/flows`; `clarion-flow-window` says which records count).
    fn flows(&self, r: FlowsRequest) -> Result<serde_json::Value, ControlError> {
        let Some(window) = &self.flows else {
            return Err(ControlError::NotFound(
                "this host keeps no flow records in memory: start it with --records DEST and --api (and not --flow-window 0)"
                    .into(),
            ));
        };
        let local = self.events.get(&r.event).ok_or_else(|| not_found(&r.event))?;
        let group = clarion_flow_window::group_of(&r.event, &local.spec.granularity, &r.group)
            .map_err(ControlError::Invalid)?;
        let q = FlowQuery {
            filters: local.spec.filters.clone(),
            group,
            from_ns: r.from_ns,
            to_ns: r.to_ns,
            top: r.top,
            by: Rank::parse(&r.by).unwrap_or(Rank::Bytes),
        };
        let answer = window
            .lock()
            .map_err(|_| ControlError::Failed("the flow window is unusable (a query panicked)".into()))?
            .query(&q);
        let mut v = answer.to_json(&q);
        if let serde_json::Value::Object(m) = &mut v {
            m.insert("event".into(), r.event.into());
            m.insert("group".into(), r.group);
        }
        Ok(v)
    }

    /// Starts the control API, with a token unless --api-no-auth (loopback only).
    fn serve(&mut self, api: ApiSettings, quiet: bool) -> Result<(), Error> {
        let addr = api.addr;
        let token = ServerToken::resolve(addr, api.no_auth, api.token.as_deref(), api.token_file.as_deref())?;
        let listener = std::net::TcpListener::bind(addr).map_err(|source| Error::Bind { addr, source })?;
        let (tx, rx) = mpsc::channel(64);
        let (reports, _) = broadcast::channel(4096);
        let handle = api.hosts.iter().fold(
            ControlHandle::new(tx, reports.clone(), token.token().map(str::to_string)).for_host(),
            |h, n| h.allow_host(n),
        );
        let bound = clarion_control::spawn(listener, handle).map_err(Error::Spawn)?;
        // Shown even when quiet: it is the only time the token is printed.
        if let Some(said) = token.announcement(bound) {
            eprintln!("{said}");
        }
        if !quiet {
            eprintln!(
                "clarion: control API for this host's events on http://{bound}/v1/events{}",
                auth_note(&token)
            );
        }
        self.api = Some(rx);
        self.reports = Some(reports);
        Ok(())
    }

    /// Serves what came since the last call: API commands (the events',
    /// and the apps' on the host's GPVs when it makes them), a SIGHUP
    /// reload, removed events whose last window has been reported.
    pub fn service(&mut self, host: &mut LiveHost, mut apps: Option<&mut AppRuntime>) {
        if self.health_at.is_none_or(|t| t.elapsed() >= HEALTH_EVERY) {
            self.health_at = Some(std::time::Instant::now());
            self.health.record(workers_health(&host.metrics().0));
        }
        while let Some(cmd) = self.api.as_mut().and_then(|rx| rx.try_recv().ok()) {
            self.command(cmd, host, apps.as_deref_mut());
        }
        if self.reload.swap(false, Ordering::Relaxed) {
            self.reload(host);
            self.reload_exports(host);
        }
        let now = clarion_live::realtime_ns();
        let (gone, kept): (Vec<_>, Vec<_>) = self.stopping.iter().partition(|&&(_, after)| now >= after);
        self.stopping = kept;
        for (id, _) in gone {
            if let Err(e) = host.remove(id) {
                eprintln!("clarion: warning: cannot remove trigger {id}: {e}");
            }
        }
    }

    fn command(&mut self, cmd: Command, host: &mut LiveHost, apps: Option<&mut AppRuntime>) {
        match cmd {
            Command::Apps { .. }
            | Command::AddApp { .. }
            | Command::ShowApp { .. }
            | Command::RemoveApp { .. } => match apps {
                Some(apps) => app_command(cmd, apps),
                None => cmd.refuse_apps(
                    "this host makes no GPVs, so it runs no apps: start it with --app NAME or --gpv FILE",
                ),
            },
            Command::Exports(x) => self.exports_command(x, host),
            Command::Flows { request, reply } => {
                let _ = reply.send(self.flows(request));
            }
            Command::History { reply, .. } => {
                let _ = reply.send(Err(ControlError::NotFound(
                    "a host keeps no report history: a manager does, in its store (clarion manager --store; its API's /v1/reports/history)".into(),
                )));
            }
            Command::Add { source, reply } => {
                let _ = reply.send(self.add(&source, host));
            }
            Command::Remove { name, reply } => {
                let _ = reply.send(self.remove(&name, host));
            }
            Command::List { reply } => {
                let _ = reply.send(Ok(self.events.values().map(|l| Arc::new(self.info(l))).collect()));
            }
            Command::Show { name, reply } => {
                let found = self.events.get(&name).map(|l| self.info(l));
                let _ = reply.send(found.ok_or_else(|| not_found(&name)));
            }
            Command::Hosts { reply } => {
                let _ = reply.send(Ok(vec![HostInfo {
                    name: self.host.clone(),
                    prefixes: Vec::new(),
                    state: "up".into(),
                    last_seen_ms: Some(0),
                    finished: false,
                    triggers: self.managers_triggers(host),
                    satisfaction_reports: self.link.satisfaction_reports,
                    polls_answered: self.link.polls_answered,
                    polls_missed: 0,
                    refused: Default::default(),
                    health: Some(self.health.health()),
                }]));
            }
        }
    }

    /// Installs every event of an events file's text, or none.
    fn add(&mut self, text: &str, host: &mut LiveHost) -> Result<Vec<EventInfo>, ControlError> {
        let parsed = parse_events(text, "request").map_err(ControlError::Invalid)?;
        if parsed.is_empty() {
            return Err(ControlError::Invalid("no event in the request".into()));
        }
        for (spec, _) in &parsed {
            if spec.scope.is_network() {
                return Err(ControlError::Invalid(format!(
                    "event `{}` is network-wide (`across hosts`): add it to the manager (clarion events add)",
                    spec.name
                )));
            }
            if self.events.contains_key(&spec.name) || host.events().any(|(_, n)| n == spec.name) {
                return Err(ControlError::Invalid(format!(
                    "an event named `{}` is installed already; remove it first",
                    spec.name
                )));
            }
            host.check_install(spec)
                .map_err(|e| ControlError::Invalid(e.to_string()))?;
        }
        let mut added = Vec::new();
        for (spec, source) in parsed.into_iter().filter(|(s, _)| !s.on_demand) {
            added.push(self.install(spec, source, host).map_err(ControlError::Invalid)?);
        }
        Ok(added)
    }

    fn install(&mut self, spec: EventSpec, source: String, host: &mut LiveHost) -> Result<EventInfo, String> {
        let (id, starts) = host.install(&spec, None, None).map_err(|e| e.to_string())?;
        eprintln!(
            "clarion: event {} added; its first window starts at {}",
            spec.name,
            clarion_report::rfc3339(starts)
        );
        let name = spec.name.clone();
        let local = Local {
            id,
            source,
            spec,
            added_ns: clarion_live::realtime_ns(),
            starts_ns: Some(starts),
        };
        let info = self.info(&local);
        self.events.insert(name, local);
        Ok(info)
    }

    /// Stops an event at the end of its current window.
    fn remove(&mut self, name: &str, host: &mut LiveHost) -> Result<EventInfo, ControlError> {
        let local = self.events.remove(name).ok_or_else(|| not_found(name))?;
        let info = self.info(&local);
        let interval = local.spec.interval_ns.max(1);
        // The window the host's clock is in: its end is the last one gathered.
        let clock = clarion_live::realtime_ns().saturating_sub(host.clock_lag_ns());
        let end = clock.div_ceil(interval) * interval;
        host.set_end(local.id, Some(end));
        self.stopping
            .push((local.id, end + host.clock_lag_ns() + REMOVAL_GRACE_NS));
        eprintln!(
            "clarion: event {name} removed; its last window ends at {}",
            clarion_report::rfc3339(end)
        );
        Ok(info)
    }

    /// SIGHUP: the events file again; events gone or changed are removed
    /// (at the end of their window), new or changed ones installed.
    fn reload(&mut self, host: &mut LiveHost) {
        let Some(path) = self.file.clone() else {
            eprintln!("clarion: SIGHUP: no events file to reload");
            return;
        };
        let parsed =
            read_events_file(&path).and_then(|text| parse_events(&text, &path.display().to_string()));
        let parsed = match parsed {
            Ok(p) => p,
            Err(why) => {
                eprintln!("clarion: SIGHUP: events unchanged: {why}");
                return;
            }
        };
        if let Some((s, _)) = parsed.iter().find(|(s, _)| s.scope.is_network()) {
            eprintln!(
                "clarion: SIGHUP: events unchanged: event `{}` is network-wide; give it to the manager",
                s.name
            );
            return;
        }
        let wanted: BTreeMap<&str, &String> = parsed.iter().map(|(s, src)| (s.name.as_str(), src)).collect();
        let stale: Vec<String> = self
            .events
            .iter()
            .filter(|(name, l)| wanted.get(name.as_str()) != Some(&&l.source))
            .map(|(name, _)| name.clone())
            .collect();
        for name in &stale {
            let _ = self.remove(name, host);
        }
        let mut added = 0;
        for (spec, source) in parsed.into_iter().filter(|(s, _)| !s.on_demand) {
            if self.events.contains_key(&spec.name) {
                continue;
            }
            let name = spec.name.clone();
            match self.install(spec, source, host) {
                Ok(_) => added += 1,
                Err(e) => eprintln!("clarion: SIGHUP: cannot install {name}: {e}"),
            }
        }
        eprintln!(
            "clarion: SIGHUP: reloaded {}: {} removed or changed, {} installed",
            path.display(),
            stale.len(),
            added
        );
    }

    fn info(&self, l: &Local) -> EventInfo {
        EventInfo {
            id: u64::from(l.id),
            name: l.spec.name.clone(),
            source: l.source.clone(),
            hosts: vec![self.host.clone()],
            local_predicate: l.spec.predicate.to_string(),
            interval_ns: l.spec.interval_ns,
            added: clarion_report::rfc3339(l.added_ns),
            starts_ns: l.starts_ns,
        }
    }

    fn exports_command(&mut self, cmd: ExportsCommand, host: &mut LiveHost) {
        match cmd {
            ExportsCommand::List { reply } => {
                self.sync_exports(host);
                let _ = reply.send(self.export_infos(host, None));
            }
            ExportsCommand::Show { name, reply } => {
                self.sync_exports(host);
                let found = self
                    .export_infos(host, Some(&name))
                    .and_then(|v| v.into_iter().next().ok_or_else(|| export_not_found(&name)));
                let _ = reply.send(found);
            }
            ExportsCommand::Add { source, reply } => {
                let _ = reply.send(self.add_exports(&source, host));
            }
            ExportsCommand::Remove { name, reply } => {
                let _ = reply.send(self.remove_export(&name, host));
            }
        }
    }

    /// Policies installed by others (an agent's manager) are noted as
    /// installed when first seen, without a source; those gone forgotten.
    fn sync_exports(&mut self, host: &LiveHost) {
        let Some(policies) = host.export_policies() else {
            return;
        };
        self.exports
            .retain(|name, _| policies.iter().any(|p| &p.name == name));
        for p in policies {
            self.exports
                .entry(p.name.clone())
                .or_insert_with(|| (String::new(), clarion_live::realtime_ns()));
        }
    }

    /// The installed policies (or the one named), with every worker's count.
    fn export_infos(&self, host: &LiveHost, only: Option<&str>) -> Result<Vec<ExportInfo>, ControlError> {
        let Some(policies) = host.export_policies() else {
            return Err(no_export_settings());
        };
        let stats = host
            .export_stats()
            .map_err(|e| ControlError::Failed(e.to_string()))?;
        Ok(policies
            .iter()
            .filter(|p| only.is_none_or(|n| n == p.name))
            .map(|p| self.export_info(&p.name, &stats))
            .collect())
    }

    fn export_info(&self, name: &str, stats: &[(u32, clarion_export::ExportStats)]) -> ExportInfo {
        let (source, added) = self.exports.get(name).cloned().unwrap_or_default();
        let matched = stats
            .iter()
            .flat_map(|(_, s)| &s.policies)
            .filter(|p| p.name == name)
            .map(|p| p.matched)
            .sum();
        ExportInfo {
            name: name.to_string(),
            source,
            matched,
            added: clarion_report::rfc3339(added),
        }
    }

    /// Installs every policy of the text beside those installed, or none.
    fn add_exports(&mut self, text: &str, host: &mut LiveHost) -> Result<Vec<ExportInfo>, ControlError> {
        let Some(installed) = host.export_policies() else {
            return Err(no_export_settings());
        };
        let parsed = parse_exports(text, "request").map_err(ControlError::Invalid)?;
        if parsed.is_empty() {
            return Err(ControlError::Invalid("no export policy in the request".into()));
        }
        if let Some((p, _)) = parsed
            .iter()
            .find(|(p, _)| installed.iter().any(|i| i.name == p.name))
        {
            return Err(ControlError::Invalid(format!(
                "an export policy named `{}` is installed already; remove it first",
                p.name
            )));
        }
        let mut all = installed.to_vec();
        all.extend(parsed.iter().map(|(p, _)| p.clone()));
        host.set_exports(&all)
            .map_err(|e| ControlError::Invalid(e.to_string()))?;
        let now = clarion_live::realtime_ns();
        for (p, source) in &parsed {
            self.exports.insert(p.name.clone(), (source.clone(), now));
            eprintln!("clarion: export policy {} added", p.name);
        }
        Ok(parsed
            .iter()
            .map(|(p, _)| self.export_info(&p.name, &[]))
            .collect())
    }

    fn remove_export(&mut self, name: &str, host: &mut LiveHost) -> Result<ExportInfo, ControlError> {
        let Some(installed) = host.export_policies() else {
            return Err(no_export_settings());
        };
        if !installed.iter().any(|p| p.name == name) {
            return Err(export_not_found(name));
        }
        let rest: Vec<ExportSpec> = installed.iter().filter(|p| p.name != name).cloned().collect();
        // Its count, read before its counters go.
        let stats = host.export_stats().unwrap_or_default();
        let info = self.export_info(name, &stats);
        host.set_exports(&rest)
            .map_err(|e| ControlError::Failed(e.to_string()))?;
        self.exports.remove(name);
        eprintln!("clarion: export policy {name} removed");
        Ok(info)
    }

    /// The policies named are an agent's manager's (the set it applied
    /// last): a SIGHUP reload of `--exports` keeps them running beside the
    /// file's, as the manager's next set would.
    pub fn keep_managers_exports(&mut self, names: &[String]) {
        if self.managers != names {
            self.managers = names.to_vec();
        }
    }

    /// SIGHUP: the `--exports` file again; the host's own policies become
    /// its, the manager's running ones stay.
    fn reload_exports(&mut self, host: &mut LiveHost) {
        let Some(path) = self.exports_file.clone() else {
            return;
        };
        let parsed = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| parse_exports(&t, &path.display().to_string()));
        let parsed = match parsed {
            Ok(p) => p,
            Err(why) => {
                eprintln!("clarion: SIGHUP: export policies unchanged: {why}");
                return;
            }
        };
        let specs = match self.with_managers(parsed.iter().map(|(p, _)| p.clone()).collect(), host) {
            Ok(all) => all,
            Err(why) => {
                eprintln!("clarion: SIGHUP: export policies unchanged: {why}");
                return;
            }
        };
        if let Err(e) = host.set_exports(&specs) {
            eprintln!("clarion: SIGHUP: export policies unchanged: {e}");
            return;
        }
        let now = clarion_live::realtime_ns();
        let mut old = std::mem::take(&mut self.exports);
        for name in &self.managers {
            if let Some(kept) = old.remove(name) {
                self.exports.insert(name.clone(), kept);
            }
        }
        let own = parsed.len();
        for (p, source) in parsed {
            // A policy unchanged keeps its time of installation.
            let added = match old.get(&p.name) {
                Some((s, t)) if *s == source => *t,
                _ => now,
            };
            self.exports.insert(p.name, (source, added));
        }
        let kept = match self.managers.is_empty() {
            true => String::new(),
            false => format!(" (and the manager's {} kept)", self.managers.join(", ")),
        };
        eprintln!(
            "clarion: SIGHUP: reloaded {}: {own} export policies{kept}",
            path.display()
        );
    }

    /// The file's policies and the manager's running ones; refused if the
    /// file names one of the manager's (as the agent refuses the manager's
    /// set that takes an own name).
    fn with_managers(&self, mut own: Vec<ExportSpec>, host: &LiveHost) -> Result<Vec<ExportSpec>, String> {
        if let Some(p) = own.iter().find(|p| self.managers.contains(&p.name)) {
            return Err(format!(
                "policy `{}` is the manager's: the host's own cannot replace it",
                p.name
            ));
        }
        let running = host.export_policies().unwrap_or_default();
        own.extend(
            running
                .iter()
                .filter(|p| self.managers.contains(&p.name))
                .cloned(),
        );
        Ok(own)
    }

    /// Hands a report to the API's stream, if anyone follows it.
    pub fn publish(&self, report: &clarion_report::Report) {
        if let Some(tx) = &self.reports {
            if tx.receiver_count() > 0 {
                let _ = tx.send(report.to_json().to_string());
            }
        }
    }
}

fn export_not_found(name: &str) -> ControlError {
    ControlError::NotFound(format!("no export policy of this host is named `{name}`"))
}

fn no_export_settings() -> ControlError {
    ControlError::Invalid(
        "this host was started without export settings, so it takes no export policies".into(),
    )
}

fn not_found(name: &str) -> ControlError {
    ControlError::NotFound(format!("no event of this host is named `{name}`"))
}
