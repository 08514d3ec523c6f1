//! `clarion manager`: the event manager on the NATS transport. It places
//! and splits the network-wide events of its events file over the hosts of
//! its inventory, hands each registering agent its triggers, polls the other
//! hosts when one's trigger fires, and writes (and publishes on
//! `clarion.events`) every network-wide report.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::fmt::Write as _;

use anyhow::Context;
use clap::Args;
use clarion_cmdline::log::LogFormat;
use clarion_control::{ControlError, ControlHandle, ServerToken};
use clarion_manager::Manager;
use clarion_nats::{serve, ControlLink, EventBook, ManagerOptions, ManagerStats, OnDuplicate};
use clarion_report::Report;
use clarion_sinks::{Sink, SinkError};
use clarion_store::Store;
use tokio::sync::{broadcast, mpsc};
use tracing::{info, warn};

use crate::args::{parse_duration, Format};
use crate::bus::NatsArgs;
use crate::network::read_inventory;
use crate::outputs::sink_error;
use crate::summary::{percentile, thousands};
use crate::Failure;

pub const AFTER_HELP: &str = "Examples:
  clarion manager --inventory hosts.txt --events service.clarion
  clarion manager --nats nats://10.0.0.5:4222 --inventory hosts.txt -o events.jsonl \\
      --api 0.0.0.0:8700 --api-token-file /etc/clarion/api-token --metrics 0.0.0.0:9465
  clarion manager --inventory hosts.txt --events service.clarion --until-finished --no-store
  clarion manager --inventory hosts.txt --webhook https://alerts.example.net/clarion \\
      --webhook-dead-letter /var/lib/clarion/dead.jsonl --syslog udp://loghost:514
  clarion events add spike.clarion && clarion events watch     # from another terminal

Every event must be network-wide (`across hosts`); a host's own events go to
its agent (clarion agent --events). Installed events are kept in --store and
reinstalled at the next start, under the same ids; --events adds to them
(replacing a stored event of the same name). An existing --store file that
is not a store (empty, or without its tables) is refused unless --init.
The newest --report-history network-wide reports (100,000; none older than
--report-history-age, 168h) are kept in --store too: the API's
/v1/reports/history pages through them and the console shows them.
Agents register by the names of the inventory. The API needs a bearer
token: the one given (--api-token), or the one kept in --api-token-file
(default ~/.config/clarion/api-token, which clarion events reads too),
generated at the first start and printed once; --api-no-auth (loopback
only) needs none. Reports go to --output (JSON lines or a table), to the
API's stream (clarion events watch) and, as JSON, to the NATS subject
clarion.events; and to --webhook and --syslog when given (docs/alerts.md:
at least once, retried, never waited for: with a full queue a report goes
to the dead-letter file; at exit, delivery goes on for --webhook-drain).
With --until-finished the manager exits once every host's agent has
replayed its capture and every decision is made; otherwise it runs until
Ctrl-C or --duration. docs/manager.md explains placement, threshold
splitting, the protocol and the API.";

#[derive(Args, Debug)]
pub struct ManagerArgs {
    #[command(flatten)]
    pub nats: NatsArgs,

    /// The hosts and the prefixes each owns, one host per line (see docs/manager.md).
    #[arg(long, value_name = "FILE")]
    pub inventory: PathBuf,

    /// Network-wide events (`across hosts`) to install at start, besides the stored ones.
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,

    /// Where installed events are kept across restarts (SQLite; created if
    /// missing). An existing file that is not a Clarion store (empty, or
    /// without its tables) is refused unless --init.
    #[arg(
        long,
        default_value = "clarion-manager.sqlite",
        value_name = "FILE",
        conflicts_with = "no_store"
    )]
    pub store: PathBuf,

    /// Keep nothing: events live as long as this process.
    #[arg(long)]
    pub no_store: bool,

    /// Keep the newest N network-wide reports in --store, for the API's
    /// /v1/reports/history and the console's history (across restarts;
    /// the oldest dropped and counted); 0 keeps none.
    #[arg(long, value_name = "N", default_value_t = 100_000, conflicts_with_all = ["no_store", "shared"])]
    pub report_history: u64,

    /// ... and drop a kept report once it was written this long ago (0: no age bound).
    #[arg(long, default_value = "168h", value_parser = parse_duration, value_name = "DURATION", conflicts_with_all = ["no_store", "shared"])]
    pub report_history_age: u64,

    /// Most network-wide events installed at once: a request (or events
    /// file) that would make more is refused whole, saying so.
    #[arg(long, value_name = "N", default_value_t = clarion_nats::book::MAX_EVENTS)]
    pub max_events: usize,

    /// Create the store's tables in an existing --store file that lacks
    /// them: an empty file, or a database with no other table (a database
    /// holding other tables is never written to).
    #[arg(long, conflicts_with_all = ["no_store", "shared"])]
    pub init: bool,

    /// The control API's address (HTTP: events, hosts, a stream of fired events).
    #[arg(
        long,
        default_value = "127.0.0.1:8700",
        value_name = "ADDR",
        conflicts_with = "no_api"
    )]
    pub api: SocketAddr,

    /// Also accept requests naming this host (a DNS name or address the API
    /// is reached by; repeat for several). Loopback names and the bound
    /// address are always accepted; any other `Host` or `Origin` gets 403.
    #[arg(long = "api-host", value_name = "NAME")]
    pub api_hosts: Vec<String>,

    /// No control API.
    #[arg(long)]
    pub no_api: bool,

    /// Require `Authorization: Bearer TOKEN` on the API, instead of the token file's.
    #[arg(long, env = "CLARION_API_TOKEN", value_name = "TOKEN", hide_env_values = true)]
    pub api_token: Option<String>,

    /// Where the API's token is kept: read if present (it must be private,
    /// mode 0600), else generated there (and printed once). Default:
    /// $XDG_CONFIG_HOME/clarion/api-token (~/.config/clarion/api-token),
    /// where clarion events looks too.
    #[arg(long, env = "CLARION_API_TOKEN_FILE", value_name = "FILE")]
    pub api_token_file: Option<PathBuf>,

    /// No token: any local process may change events. Only with a loopback
    /// --api (tests, demos); a token given or a token file is then ignored.
    #[arg(long)]
    pub api_no_auth: bool,

    /// How long a polled host has to answer; after it, the decision is made
    /// with the hosts that answered and the report is marked incomplete.
    #[arg(long, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub poll_timeout: u64,

    /// Run with no NATS credentials (no --nats-nkey, --nats-token): any client
    /// of the server could then pose as a host. For tests and demos on a
    /// server no one else reaches; `clarion credentials` makes per-host keys.
    #[arg(long)]
    pub insecure: bool,

    /// Also keep fired events in the JetStream stream CLARION_EVENTS (created
    /// if missing; the server must run with JetStream, `nats-server -js`), for durable consumers.
    #[arg(long)]
    pub jetstream: bool,

    /// Exit once every inventory host's agent has finished its capture and every decision is made.
    #[arg(long)]
    pub until_finished: bool,

    /// Share the load with the other managers on this NATS server: the
    /// events and which manager decides each are kept in JetStream
    /// key-value buckets (clarion-events, clarion-owners; the server needs
    /// -js), every event is decided by one manager at a time, and a
    /// manager that stops or dies hands its events over within 3 s.
    /// Replaces the local store (--store).
    #[arg(long, conflicts_with = "store")]
    pub shared: bool,

    /// Stop after this long (default: until Ctrl-C or SIGTERM, or --until-finished).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Option<u64>,

    /// The manager's name: the `host` of its reports.
    #[arg(long, default_value = "manager", value_name = "NAME")]
    pub name: String,

    /// Where network-wide reports go (default: standard output;
    /// nats://HOST:PORT/STREAM: a JetStream stream, subject clarion.reports.<--name>).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    #[arg(long, value_enum, default_value_t = Format::Auto, value_name = "FORMAT")]
    pub format: Format,

    /// Serve the manager's metrics for Prometheus at http://ADDR/metrics
    /// (e.g. 127.0.0.1:9465): per event fired counts and last values,
    /// reports written, build and process metrics (docs/metrics.md). No
    /// token, as on clarion run: bind it to an address only your scraper reaches.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,

    /// No summary on standard error.
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// How the manager logs what happens while it runs (start, registrations,
    /// departures and returns, events and policies added or removed, refused
    /// messages): 'human' lines, or 'json' lines for a log shipper (its
    /// summary too). Which: CLARION_LOG, in RUST_LOG's syntax (default info;
    /// manager=debug adds every partial decision).
    #[arg(long, value_enum, default_value_t = LogFormat::Human, value_name = "FORMAT")]
    pub log_format: LogFormat,

    /// Every network-wide report also to a webhook and/or syslog.
    #[command(flatten)]
    pub alerts: crate::alerts::AlertArgs,
}

fn usage(e: ControlError) -> Failure {
    Failure::Usage(format!("clarion: {e}"))
}

/// A store that is not one (empty, foreign) is the operator's to fix: usage.
fn store_failure(e: clarion_store::StoreError) -> Failure {
    if e.is_usage() {
        Failure::Usage(format!("clarion: {e}"))
    } else {
        Failure::Runtime(
            anyhow::Error::new(e)
                .context("cannot open the event store (--store, or --no-store to keep nothing)"),
        )
    }
}

/// The stored events, then those of --events.
fn book(a: &ManagerArgs) -> Result<EventBook, Failure> {
    let inventory = read_inventory(&a.inventory)?;
    if a.shared {
        // The shared bucket holds the events; the service reads it and adds --events.
        let mut book = EventBook::new(Manager::new(&a.name, inventory), None);
        book.set_max_events(a.max_events);
        return Ok(book);
    }
    let store = if a.no_store {
        None
    } else {
        let opened = if a.init {
            Store::init(&a.store)
        } else {
            Store::open(&a.store)
        };
        Some(opened.map_err(store_failure)?)
    };
    let mut book = EventBook::new(Manager::new(&a.name, inventory), store);
    book.set_max_events(a.max_events);
    let restored = book.restore().map_err(|e| Failure::Runtime(e.into()))?;
    if restored.events > 0 && !a.quiet {
        let instances = match restored.instances {
            0 => String::new(),
            n => format!(" and {n} drill-down instance(s)"),
        };
        info!(target: "manager", events = restored.events, instances = restored.instances, store = %a.store.display(),
            "{} event(s){instances} restored from {}", restored.events, a.store.display());
    }
    for (name, why) in restored.skipped_events {
        warn!(target: "manager", event = %name, reason = %why,
            "stored event `{name}` not installed (it stays stored): {why}");
    }
    for why in restored.skipped_instances {
        warn!(target: "manager", reason = %why, "{why} (dropped from the store)");
    }
    if let Some(path) = &a.events {
        let text = crate::check::read_events_file(path)?;
        let (_, replaced) = book.add(&text, OnDuplicate::Replace).map_err(|e| match e {
            ControlError::Invalid(m) => Failure::Usage(format!("clarion: {}: {m}", path.display())),
            other => usage(other),
        })?;
        if !replaced.is_empty() && !a.quiet {
            info!(target: "manager", events = replaced.len(),
                "{} stored event(s) replaced by {}'s version", replaced.len(), path.display());
        }
    }
    Ok(book)
}

/// Starts the control API, with a token unless --api-no-auth (loopback only).
fn start_api(a: &ManagerArgs) -> Result<Option<ControlLink>, Failure> {
    if a.no_api {
        return Ok(None);
    }
    let token = ServerToken::resolve(
        a.api,
        a.api_no_auth,
        a.api_token.as_deref(),
        a.api_token_file.as_deref(),
    )
    .map_err(crate::failure::token_failure)?;
    let listener = std::net::TcpListener::bind(a.api)
        .with_context(|| {
            format!(
                "cannot serve the control API on {} (another manager there? use --api or --no-api)",
                a.api
            )
        })
        .map_err(Failure::Runtime)?;
    let (tx, rx) = mpsc::channel(64);
    let (reports, _) = broadcast::channel(4096);
    let handle = a.api_hosts.iter().fold(
        ControlHandle::new(tx, reports.clone(), token.token().map(str::to_string)),
        |h, n| h.allow_host(n),
    );
    let bound = clarion_control::spawn(listener, handle)
        .context("cannot start the control API")
        .map_err(Failure::Runtime)?;
    // Shown even with --quiet: it is the only time the token is printed.
    if let Some(said) = token.announcement(bound) {
        eprintln!("{said}");
    }
    if !a.quiet {
        info!(target: "manager", api = %bound, "control API on http://{bound}{}", clarion_host_api::auth_note(&token));
    }
    Ok(Some(ControlLink {
        commands: rx,
        reports,
    }))
}

/// The service's options the flags describe.
fn options(a: &ManagerArgs) -> Result<ManagerOptions, Failure> {
    let shared_events = match (&a.events, a.shared) {
        (Some(path), true) => Some(crate::check::read_events_file(path)?),
        _ => None,
    };
    let security = a.nats.security()?;
    if security.auth == clarion_nats::Auth::None && !a.insecure {
        return Err(Failure::Usage(
            "clarion: manager: no NATS credentials: any client of the server could pose as a host and forge its reports; \
give --nats-nkey FILE (`clarion credentials` makes one per host and the server's authorization) or --nats-token, \
or --insecure to run without"
                .into(),
        ));
    }
    Ok(ManagerOptions {
        url: a.nats.url.clone(),
        security,
        poll_timeout: Duration::from_nanos(a.poll_timeout),
        until_finished: a.until_finished,
        max_poll_batch: 1024,
        jetstream: a.jetstream,
        shared: a.shared,
        shared_events,
        hosts_board: None,
        history: (a.report_history > 0 && !a.no_store && !a.shared).then(|| clarion_nats::HistoryLimits {
            max_reports: a.report_history,
            max_age: (a.report_history_age > 0).then(|| Duration::from_nanos(a.report_history_age)),
        }),
    })
}

/// Sets `stop` once `after` has passed (`--duration`).
fn stop_after(after: Duration, stop: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        std::thread::sleep(after);
        stop.store(true, Ordering::Relaxed);
    });
}

/// The manager's metrics (`--metrics`): its decisions, and the hosts'
/// health as per-host series (the board the service writes every second).
fn serve_metrics(
    a: &ManagerArgs,
) -> Result<
    (
        Arc<clarion_live::HostMetrics>,
        Option<clarion_control::HostsBoard>,
    ),
    Failure,
> {
    // Its reports are decisions: `scope="network"`, apart from its hosts' firings.
    let metrics = Arc::new(clarion_live::HostMetrics::new(&[]).with_scope(clarion_live::Scope::Network));
    let board = a.metrics.map(|_| clarion_control::HostsBoard::default());
    if let Some(b) = board.clone() {
        crate::metrics_server::add_source(Box::new(move |page| {
            page.push_str(&clarion_control::health::render_prometheus(&b.get()))
        }));
    }
    if let Some(addr) = a.metrics {
        let bound = crate::metrics_server::serve(addr, Vec::new(), Arc::clone(&metrics))?;
        if !a.quiet {
            info!(target: "manager", metrics = %bound, "metrics at http://{bound}/metrics");
        }
    }
    Ok((metrics, board))
}

/// The manager's start line: its name, its events and hosts.
fn announce(a: &ManagerArgs, events: usize, hosts: usize) {
    let events = if a.shared {
        "the shared bucket's events".to_string()
    } else {
        format!("{events} network-wide event(s)")
    };
    // "manager manager" read oddly: the default name is left out.
    let named = if a.name == "manager" {
        String::new()
    } else {
        format!("`{}` ", a.name)
    };
    info!(target: "manager", name = %a.name, nats = %a.nats.url, hosts = hosts,
        "{named}started on {}: {events} over {} host(s); waiting for agents", a.nats.url, hosts);
}

pub fn manager(a: &ManagerArgs) -> Result<ExitCode, Failure> {
    clarion_cmdline::log::init(a.log_format).map_err(|e| Failure::Usage(format!("clarion: {e}")))?;
    let book = book(a)?;
    let events = book.manager().events().count();
    let hosts: Vec<String> = book
        .manager()
        .inventory()
        .hosts()
        .iter()
        .map(|h| h.name.clone())
        .collect();
    let control = start_api(a)?;
    let stop = crate::failure::stop_flag()?;
    if let Some(d) = a.duration {
        stop_after(Duration::from_nanos(d), Arc::clone(&stop));
    }
    // Live: the manager must never wait for a slow receiver (a full queue
    // is dead-lettered unless --webhook-queue-full block).
    // A stream's subject names the manager by its --name.
    let out = crate::outputs::reports(a.output.as_deref(), a.format, &a.name)?;
    let mut sink = crate::alerts::with_alerts(out, &a.alerts, true, a.events.as_deref())?;
    let (metrics, board) = serve_metrics(a)?;
    if !a.quiet {
        announce(a, events, hosts.len());
    }
    let opts = ManagerOptions {
        hosts_board: board,
        ..options(a)?
    };
    let mut out = Written {
        sink: &mut sink,
        metrics: &metrics,
        error: None,
        halt: Arc::clone(&stop),
    };
    let stats =
        serve(&opts, &a.name, book, control, stop, &mut out).map_err(|e| Failure::Runtime(e.into()))?;
    if let Some(e) = out.error {
        return Err(sink_error(e));
    }
    sink.flush().map_err(sink_error)?;
    // The alert sinks deliver what is queued, for at most --webhook-drain,
    // and dead-letter the rest (saying so), as clarion run's do at its end.
    drop(sink);
    if !a.quiet {
        clarion_cmdline::log::summary("manager", &summary(&stats, &hosts));
    }
    Ok(ExitCode::SUCCESS)
}

/// Where the manager's decisions go: its output and alerts, and the
/// metrics of what was written. A report that cannot be written (output,
/// or a dead letter of the alerts) stops the manager, as it stops clarion
/// run: running on while losing every later report would be silent loss.
struct Written<'a> {
    sink: &'a mut Box<dyn Sink<Report>>,
    metrics: &'a clarion_live::HostMetrics,
    error: Option<SinkError>,
    halt: Arc<AtomicBool>,
}

impl Written<'_> {
    fn keep(&mut self, result: Result<(), SinkError>) {
        if let (Err(e), None) = (result, &self.error) {
            self.error = Some(e);
            self.halt.store(true, Ordering::Relaxed);
        }
    }
}

impl clarion_nats::Decided for Written<'_> {
    fn report(&mut self, r: &Report) {
        // The manager runs for days: each fired event reaches the file at
        // once (a reader tailing it sees it; a crash loses none).
        self.metrics.written(std::slice::from_ref(r));
        if self.error.is_none() {
            let done = self.sink.write(r).and_then(|()| self.sink.flush());
            self.keep(done);
        }
    }

    /// Alerts resolve as their windows close quiet, reports or not: a
    /// flush closes them (`clarion_alerts::AlertSink`).
    fn idle(&mut self) {
        if self.error.is_none() {
            let done = self.sink.flush();
            self.keep(done);
        }
    }
}

/// p50, p99 and max of some latencies, when there are any.
fn latency(out: &mut String, what: &str, kept: &std::collections::VecDeque<Duration>) {
    let mut lat: Vec<Duration> = kept.iter().copied().collect();
    lat.sort();
    if !lat.is_empty() {
        let _ = writeln!(
            out,
            "  {what}: p50 {}, p99 {}, max {} over {} decisions",
            human(percentile(&lat, 0.5)),
            human(percentile(&lat, 0.99)),
            human(percentile(&lat, 1.0)),
            thousands(lat.len() as u64)
        );
    }
}

/// A latency for people: humantime's `1s 500ms`, `2ms 317us`, to the
/// microsecond (below it the figure is noise), not Rust's debug `1.500000000s`.
fn human(d: Duration) -> String {
    let us = Duration::from_micros(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    if us.is_zero() && !d.is_zero() {
        return "<1us".into();
    }
    humantime::format_duration(us).to_string()
}

/// Per host: how late its reports came, the windows it missed.
fn hosts_summary(out: &mut String, s: &ManagerStats, hosts: &[String]) {
    for (h, lag) in hosts.iter().zip(&s.report_lag) {
        match lag {
            Some(l) if l.as_secs() < 3600 => {
                let _ = writeln!(
                    out,
                    "  host {h}: reports arrived up to {:.3} ms after their window ended (clock skew + reporting delay)",
                    l.as_secs_f64() * 1e3
                );
            }
            Some(_) => {
                let _ = writeln!(
                    out,
                    "  host {h}: its windows are more than an hour old (a replayed capture)"
                );
            }
            None => {}
        }
    }
    for (h, missed) in hosts.iter().zip(&s.missed_windows) {
        if let Some(m) = missed {
            let _ = writeln!(
            out,
                "  host {h}: did not answer polls for {} window(s) from {} to {} (decided without it, marked incomplete)",
                m.windows,
                clarion_report::rfc3339(m.first_ns),
                clarion_report::rfc3339(m.last_ns)
            );
        }
    }
}

/// The end-of-run summary (see [`clarion_cmdline::log::summary`]).
fn summary(s: &ManagerStats, hosts: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "clarion: manager: {} registrations, {} satisfaction reports, {} polls ({} unanswered, {} for windows no longer kept, {} not sent to hosts that had left), {} decisions ({} fired, {} partial)",
        thousands(s.registrations),
        thousands(s.satisfied),
        thousands(s.polls),
        thousands(s.poll_timeouts),
        thousands(s.gone),
        thousands(s.not_polled),
        thousands(s.decisions),
        thousands(s.fired),
        thousands(s.partial),
    );
    notes(&mut out, s);
    latency(
        &mut out,
        "first satisfaction report to decision",
        &s.decision_latency,
    );
    latency(
        &mut out,
        "window end to decision (live hosts)",
        &s.window_to_decision,
    );
    hosts_summary(&mut out, s, hosts);
    losses(&mut out, s);
    out
}

/// The summary's lines on departures, drill-downs and shared events, when
/// there were any.
fn notes(out: &mut String, s: &ManagerStats) {
    if s.departures > 0 {
        let _ = writeln!(
            out,
            "  hosts left {} time(s) (a goodbye, or over 3 s of silence): {} polls were not sent to them",
            thousands(s.departures),
            thousands(s.not_polled)
        );
    }
    if s.instances > 0 {
        let _ = writeln!(
            out,
            "  {} drill-down instances installed (windows an agent installed too late to see are partial)",
            thousands(s.instances)
        );
    }
    if s.history_dropped > 0 || s.history_failed > 0 {
        let _ = writeln!(
            out,
            "  report history: {} kept in the store, {} older dropped (--report-history bounds), {} not kept (the store failed)",
            thousands(s.history_kept),
            thousands(s.history_dropped),
            thousands(s.history_failed)
        );
    }
    if s.claimed > 0 || s.not_owned > 0 {
        let _ = writeln!(
            out,
            "  shared: took {} event(s) over; left {} satisfaction reports to the managers deciding their events",
            thousands(s.claimed),
            thousands(s.not_owned)
        );
    }
}

/// The summary's lines on what was not decided or refused.
fn losses(out: &mut String, s: &ManagerStats) {
    for g in &s.gaps {
        let _ = writeln!(
            out,
            "  gap: windows from {} to {} were not decided ({} satisfaction report(s) host {} could not keep until acknowledged)",
            clarion_report::rfc3339(g.first_ns),
            clarion_report::rfc3339(g.last_ns),
            thousands(g.reports),
            g.host
        );
    }
    if s.invalid > 0 {
        let _ = writeln!(
            out,
            "  {} messages could not be read or came from hosts not in the inventory",
            thousands(s.invalid)
        );
    }
    if !s.refused.is_empty() {
        let total: u64 = s.refused.values().sum();
        let why: Vec<String> = s
            .refused
            .iter()
            .map(|(r, n)| format!("{} {r}", thousands(*n)))
            .collect();
        let _ = writeln!(
            out,
            "  {} host reports and answers refused as impossible: {}",
            thousands(total),
            why.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// humantime's own parser is the reference: what is printed reads back
    /// as the latency, to the microsecond.
    #[test]
    fn latencies_print_for_people_and_read_back() {
        for ns in [
            0u64,
            1_000,
            1_500,
            2_317_000,
            999_999_999,
            1_500_000_000,
            86_400_000_000_123,
        ] {
            let d = Duration::from_nanos(ns);
            let text = human(d);
            assert!(!text.contains("Duration") && !text.contains(".0"), "{text}");
            let back = humantime::parse_duration(&text).expect("humantime reads it");
            assert_eq!(back.as_micros(), d.as_micros(), "{text}");
        }
        assert_eq!(human(Duration::from_millis(1500)), "1s 500ms");
        assert_eq!(human(Duration::from_nanos(300)), "<1us");
    }
}
