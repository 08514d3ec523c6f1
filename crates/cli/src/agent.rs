//! `clarion agent`: one host's monitor on the NATS transport. It registers
//! with the manager, installs the triggers it is given, replays the host's
//! capture, sends the manager a satisfaction report whenever a trigger of a
//! network-wide event fires, and answers the manager's polls from its kept
//! windows (a poll for a window it has not reached yet waits until it has).
//!
//! Export policies come from the manager too (`clarion exports add --api
//! MANAGER`): the whole set, in the registration reply and whenever it
//! changes, checked here with the language and applied between frames (a
//! replay: to its exporter, from the next frame on; live: to every
//! worker), replacing the manager's previous ones; the host's own (of
//! `--exports`, and added through its API) run beside them. A set that
//! does not check, that takes the name of one of the host's own, or that
//! the host refuses (a pcapng policy without `--export-dir`), is refused,
//! said on standard error and to the manager, and the policies running
//! stay. An agent always has an exporter, with
//! no policies until some arrive (no cost: it is offered no frame).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use clarion_capture::CaptureError;
use clarion_cmdline::log::LogFormat;
use clarion_engine::{Monitor, MonitorConfig, Report, TriggerId, WindowValues};
use clarion_host::{replay, Driver, Live, LiveHost, ReplayOptions};
use clarion_lang::spec::{EventSpec, ExportSpec};
use clarion_nats::protocol::{Control, ExportSet};
use clarion_nats::{AgentLink, AgentOptions, AppliedExports, Arrived, HostDesk, Inbound, Triggers, Wake};
use clarion_pipeline::{ExportPolicies, Pipeline, Sinks};
use clarion_sinks::Sink;
use tracing::{info, warn};

use crate::args::{parse_duration, parse_speed, ExportArgs, Format, LiveArgs, MonitorArgs};
use crate::bus::NatsArgs;
use crate::failure::runtime;
use crate::host_spec::load_events;
use crate::outputs::sink_error;
use crate::summary::thousands;
use crate::Failure;
use clarion_host_api::{monitor_health, LinkCounts, LocalEvents};

pub const AFTER_HELP: &str = "Examples:
  clarion agent --host web-1 --pcap web-1.pcap
  clarion agent --nats nats://10.0.0.5:4222 --host web-2 --pcap web-2.pcap --events local.clarion
  CLARION_NATS_TOKEN=s3cret clarion agent --host db --pcap db.pcap --linger 1m
  clarion agent --host web-1 --pcap web-1.pcap --speed 1      # at the capture's pace, like a live host
  clarion agent --host web-1 -i eth0 --workers 2 --filter 'not port 22'   # live
  clarion agent --host web-1 -i eth0 --flow-capacity 4194304 --adapt   # the monitor's flags, as run's
  clarion agent --host web-1 -i eth0 --syslog tcp://loghost:601 --webhook https://alerts.example.net/clarion

The host name must be in the manager's inventory (`clarion manager
--inventory`); the manager answers the registration with this host's
triggers. After a capture file ends the agent keeps answering polls until
the manager says it is done, or for --linger. Live (-i), it captures as
`clarion run -i` does until Ctrl-C, SIGTERM or --duration, sends each
satisfaction report as its window closes and answers polls from the
workers' merged windows (--history-windows of them). Reports of the host's own events
(--events, without `across hosts`) go to --output; network-wide reports come
from the manager. Export policies installed on the manager (clarion exports
--api MANAGER add FILE) run here too, beside the host's own --exports;
those writing pcapng need --export-dir. Live, the host's own events (of
--events or its --api) may say `then capture`, with --capture-dir.
docs/manager.md explains the protocol.";

#[derive(Args, Debug)]
// The manager may send policies: the export settings stand without --exports.
#[command(
    mut_arg("export_dir", |a| a.requires(clap::builder::Resettable::<clap::Id>::Reset)),
    mut_arg("export_fast_path", |a| a.requires(clap::builder::Resettable::<clap::Id>::Reset)),
    mut_arg("export_cache", |a| a.requires(clap::builder::Resettable::<clap::Id>::Reset)),
    mut_arg("export_cpu", |a| a.requires(clap::builder::Resettable::<clap::Id>::Reset))
)]
pub struct AgentArgs {
    #[command(flatten)]
    pub nats: NatsArgs,

    /// This host's name in the manager's inventory (letters, digits, `-`, `_`).
    #[arg(long, value_name = "NAME")]
    pub host: String,

    /// The host's traffic, as a pcap or pcapng file (`-` reads standard input).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "interface",
        conflicts_with = "interface"
    )]
    pub pcap: Option<PathBuf>,

    /// Capture this interface live (repeat for several), as `clarion run
    /// -i` does; runs until Ctrl-C, SIGTERM or --duration. Needs root or
    /// CAP_NET_RAW.
    #[arg(long, short = 'i', value_name = "IFACE", help_heading = "Live capture")]
    pub interface: Vec<String>,

    /// The host's own events (without `across hosts`), reported by this agent.
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,

    /// Prefixes this host owns, sent with the registration (the manager's inventory decides).
    #[arg(long = "prefix", value_name = "PREFIX")]
    pub prefixes: Vec<String>,

    /// Closed windows each trigger keeps to answer polls (for one-epoch
    /// per-5-tuple windows, tested flow by flow: those of the last N epochs
    /// swept). A host polled for a window it no longer keeps is left out of
    /// that decision (partial).
    #[arg(long, default_value_t = 4096, value_name = "N")]
    pub history_windows: usize,

    /// After the capture file ends, keep answering polls this long, unless the manager finishes first.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION", conflicts_with = "interface")]
    pub linger: u64,

    /// Replay at this many times the capture's own pace (1: as it was
    /// captured, like a live host); default: as fast as possible.
    #[arg(long, value_name = "FACTOR", value_parser = parse_speed, conflicts_with = "interface")]
    pub speed: Option<f64>,

    /// Wait this long for a manager to answer the registration.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub register_timeout: u64,

    /// Where the host's own events' reports go (default: standard output;
    /// nats://HOST:PORT/STREAM: a JetStream stream, subject clarion.reports.<--host>).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    #[arg(long, value_enum, default_value_t = Format::Auto, value_name = "FORMAT")]
    pub format: Format,

    /// No summary on standard error.
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// How the agent logs what happens while it runs (registration, export
    /// policies applied or refused, messages refused): 'human' lines, or
    /// 'json' lines for a log shipper (its summary too). Which: CLARION_LOG,
    /// in RUST_LOG's syntax (default info).
    #[arg(long, value_enum, default_value_t = LogFormat::Human, value_name = "FORMAT")]
    pub log_format: LogFormat,

    /// Live capture: worker threads, each with its own monitor and a share
    /// of the flows, merged into the host's values (as `clarion run -i`).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64), conflicts_with = "pcap")]
    pub workers: u32,

    #[command(flatten)]
    pub monitor: MonitorArgs,

    #[command(flatten)]
    pub export: ExportArgs,

    #[command(flatten)]
    pub alerts: crate::alerts::AlertArgs,

    // Last: its heading would carry over to the flags after it.
    #[command(flatten)]
    pub live: LiveArgs,
}

/// The agent's counts, for its summary.
#[derive(Default)]
struct Tally {
    /// Live: how long after its window closed here each satisfaction
    /// report left (wall clock minus window end minus the clock's lag).
    close_to_sent: Vec<u64>,
    satisfied: u64,
    answered: u64,
    invalid: u64,
    manager_done: bool,
}

struct Agent {
    link: AgentLink,
    desk: HostDesk<async_nats::Subject>,
    /// The host's own events' reports (a live agent hands it to its live output).
    sink: Option<Box<dyn Sink<Report>>>,
    tally: Tally,
    stop: Arc<AtomicBool>,
    /// The manager's export policies: the version applied last, and a set
    /// that checked, waiting to be applied by the loop that owns the exporter.
    exports: AppliedExports,
    pending_exports: Option<(u64, Vec<ExportSpec>)>,
    /// The names of the manager's policies the host runs: the others are
    /// the host's own (`--exports`, its API), kept beside them.
    from_manager: Vec<String>,
    quiet: bool,
    /// The host's health: recorded from the replay's monitor here (from
    /// the workers by `LocalEvents`, live), sent with every heartbeat.
    health: clarion_control::HealthHandle,
}

impl Agent {
    fn handle<T: Triggers + ?Sized>(&mut self, monitor: &mut T, item: Inbound) {
        match item {
            Inbound::Control(Control::Install(t)) => {
                let name = t.spec.name.clone();
                if let Err(e) = self.desk.install(monitor, t) {
                    warn!(target: "agent", event = %name, reason = %e, "cannot install {name}: {e}");
                }
            }
            Inbound::Control(Control::Remove { event }) => self.desk.remove(monitor, event),
            Inbound::Control(Control::Extend { event, end_ns }) => self.desk.extend(monitor, event, end_ns),
            Inbound::Control(Control::Done) => self.tally.manager_done = true,
            Inbound::Control(Control::Exports(set)) => self.exports_arrived(&set),
            // The link takes acknowledgements itself.
            Inbound::Control(Control::Ack { .. }) => {}
            Inbound::Poll { reqs, reply } => {
                if let Some((reply, answers)) = self.desk.poll(monitor, reqs, reply) {
                    self.tally.answered += answers.len() as u64;
                    self.link.answer(reply, &answers);
                }
            }
            Inbound::Invalid(e) => {
                self.tally.invalid += 1;
                if self.tally.invalid == 1 {
                    warn!(target: "agent", reason = %e, "{e} (ignored; later ones are counted in the summary)");
                }
            }
        }
    }

    /// The manager's export policies arrived: kept to apply if newer and
    /// checking, else refused (said here and to the manager).
    fn exports_arrived(&mut self, set: &ExportSet) {
        match self.exports.arrived(set) {
            Arrived::Stale => {}
            Arrived::Apply(specs) => self.pending_exports = Some((set.version, specs)),
            Arrived::Refused(why) => self.exports_done(set.version, Err(why)),
        }
    }

    /// The host applied (or refused) the export policies of `version`:
    /// said on standard error and to the manager. `applied`: where from.
    fn exports_done(&mut self, version: u64, applied: Result<String, String>) {
        self.exports.applied(version);
        match applied {
            Ok(from) => {
                if !self.quiet {
                    info!(target: "agent", version, "export policies of version {version} applied {from}");
                }
                self.link.exports_applied(version, None);
            }
            Err(why) => {
                warn!(target: "agent", version, reason = %why,
                    "the manager's export policies of version {version} are refused (the policies running stay): {why}");
                self.link.exports_applied(version, Some(why));
            }
        }
    }

    /// Applies waiting export policies to a replay's exporter, from its next frame on.
    fn apply_exports(&mut self, stage: &mut Pipeline<Monitor>) {
        let Some((version, specs)) = self.pending_exports.take() else {
            return;
        };
        let frames = stage.frames();
        let set = stage.stage_mut(|x: &mut ExportPolicies| {
            let x = x.exporter_mut();
            self.with_own(x.policies(), &specs)
                .and_then(|all| x.set_policies(&all).map_err(|e| e.to_string()))
        });
        let r = set.unwrap_or_else(|| Err("this agent has no exporter".into()));
        let r = r.map(|()| format!("from frame {frames} on: {}", names(&specs)));
        self.manager_applied(version, &specs, r);
    }

    /// The manager's new policies beside the host's own (those of the
    /// running set the manager did not send); refused if one takes an own name.
    fn with_own(&self, running: &[ExportSpec], specs: &[ExportSpec]) -> Result<Vec<ExportSpec>, String> {
        let mut all: Vec<ExportSpec> = running
            .iter()
            .filter(|p| !self.from_manager.contains(&p.name))
            .cloned()
            .collect();
        if let Some(p) = specs.iter().find(|p| all.iter().any(|o| o.name == p.name)) {
            return Err(format!(
                "policy `{}` is this host's own (--exports or its API): the manager's cannot replace it",
                p.name
            ));
        }
        all.extend(specs.iter().cloned());
        Ok(all)
    }

    fn manager_applied(&mut self, version: u64, specs: &[ExportSpec], r: Result<String, String>) {
        if r.is_ok() {
            self.from_manager = specs.iter().map(|p| p.name.clone()).collect();
        }
        self.exports_done(version, r);
    }

    /// Applies waiting export policies to every worker of a live host.
    fn apply_live_exports(&mut self, host: &mut LiveHost) {
        let Some((version, specs)) = self.pending_exports.take() else {
            return;
        };
        let running = host.export_policies().unwrap_or_default().to_vec();
        let r = self
            .with_own(&running, &specs)
            .and_then(|all| host.set_exports(&all).map_err(|e| e.to_string()));
        let r = r.map(|()| format!("on every worker: {}", names(&specs)));
        self.manager_applied(version, &specs, r);
    }

    /// Network-wide triggers' reports go to the manager (`decided_ns`: the
    /// host's time as their windows closed), the host's own to the sink.
    fn route(&mut self, reports: &mut Vec<Report>, decided_ns: u64) -> Result<(), Failure> {
        for r in reports.drain(..) {
            match self.desk.network_event(&r) {
                Some(event) => {
                    self.tally.satisfied += 1;
                    self.link.satisfied(event, &r, decided_ns.max(r.window.end_ns));
                }
                None => {
                    if let Some(sink) = self.sink.as_mut() {
                        sink.write(&r).map_err(sink_error)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Takes what the manager sent, and answers the polls whose windows have
    /// closed. Called after the reports of those windows were routed, so
    /// that a host's report of a window leaves before its answer to a poll
    /// of it, which the manager handles in that order (clarion-nats'
    /// `arrivals`).
    fn serve<T: Triggers + ?Sized>(&mut self, monitor: &mut T) {
        while let Some(item) = self.link.try_recv() {
            self.handle(monitor, item);
        }
        for (reply, answers) in self.desk.ready(monitor) {
            self.tally.answered += answers.len() as u64;
            self.link.answer(reply, &answers);
        }
    }
}

/// The agent's side of the replay: network-wide triggers' reports go to
/// the manager, the host's own to the sink; between frames, the manager's
/// messages are served.
impl Driver<Monitor> for Agent {
    type Error = Failure;

    fn reports(&mut self, monitor: &mut Monitor, reports: &mut Vec<Report>) -> Result<(), Failure> {
        self.route(reports, monitor.now_ns())
    }

    fn service(&mut self, monitor: &mut Monitor) -> Result<bool, Failure> {
        self.health.record(monitor_health(&monitor.counters()));
        self.serve(monitor);
        Ok(!self.stop.load(Ordering::Relaxed))
    }

    fn warning(&mut self, error: &CaptureError) {
        eprintln!("clarion: warning: {error}");
    }
}

/// The policies' names, for messages.
fn names(specs: &[ExportSpec]) -> String {
    if specs.is_empty() {
        return "none".into();
    }
    specs
        .iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The monitor with the exports beside it (an agent always has an exporter).
impl Driver<Pipeline<Monitor>> for Agent {
    type Error = Failure;

    fn reports(&mut self, stage: &mut Pipeline<Monitor>, reports: &mut Vec<Report>) -> Result<(), Failure> {
        Driver::<Monitor>::reports(self, stage.head_mut(), reports)
    }

    fn service(&mut self, stage: &mut Pipeline<Monitor>) -> Result<bool, Failure> {
        let go_on = Driver::<Monitor>::service(self, stage.head_mut())?;
        self.apply_exports(stage);
        Ok(go_on)
    }

    fn warning(&mut self, error: &CaptureError) {
        Driver::<Monitor>::warning(self, error)
    }
}

/// The agent's export settings: its header streams are named after its
/// `--host` unless `--exporter-name` says otherwise (the name the manager
/// and the collector's summary then share).
fn export_args(a: &AgentArgs) -> crate::args::ExportArgs {
    let mut e = a.export.clone();
    if e.policies.exporter_name.is_none() {
        e.policies.exporter_name = Some(a.host.clone());
    }
    e
}

pub fn agent(a: &AgentArgs) -> Result<ExitCode, Failure> {
    clarion_cmdline::log::init(a.log_format).map_err(|e| Failure::Usage(format!("clarion: {e}")))?;
    // The host's own reports (of --events, or of events added through --api) go to --output or standard output.
    let reporting = a.events.is_some() || a.live.api.is_some();
    crate::exports::check_stdout(&a.export, reporting && a.output.is_none())?;
    // Before the events are read and the manager is looked for.
    if a.interface.is_empty() {
        if let Some(msg) = crate::monitor::file_refusal(&a.monitor) {
            return Err(Failure::Usage(msg));
        }
    }
    let own = own_events(a)?;
    let stop = crate::failure::stop_flag()?;
    let monitor = crate::monitor::config(
        &a.monitor,
        crate::monitor::Role {
            host: a.host.clone(),
            keep_health: false,
            history_windows: a.history_windows,
        },
    );
    if !a.interface.is_empty() {
        return live_agent(a, &own, monitor, stop);
    }
    replay_agent(a, &own, monitor, stop)
}

/// The host's own events (`--events`), refused when the manager's
/// (network-wide) or when they capture packets on a replaying agent.
fn own_events(a: &AgentArgs) -> Result<Vec<EventSpec>, Failure> {
    let own = match &a.events {
        Some(p) => {
            let specs = load_events(p)?;
            crate::check::warn_cost(p, &specs, a.workers, a.quiet);
            specs
        }
        None => Vec::new(),
    };
    if let Some(s) = own.iter().find(|s| s.scope.is_network()) {
        return Err(Failure::Usage(format!(
            "clarion: event `{}` is network-wide (`across hosts`): give it to the manager (clarion manager --events); an agent's --events are its host's own",
            s.name
        )));
    }
    // Live, the host captures as `clarion run -i` does (LiveHost); a
    // replaying agent's loop has no captures.
    let replaying = a.interface.is_empty();
    if let Some(s) = own.iter().find(|s| replaying && s.capture.is_some()) {
        return Err(Failure::Usage(format!(
            "clarion: event `{}` captures packets (`then capture`), which a replaying agent does not do: `clarion agent -i` and `clarion run` do",
            s.name
        )));
    }
    if replaying && a.export.policies.capture_dir.is_some() {
        return Err(Failure::Usage(
            "clarion: --capture-dir is for events with `then capture`, which a replaying agent does not run: `clarion agent -i` and `clarion run` do".into(),
        ));
    }
    Ok(own)
}

/// `clarion agent --pcap`: the host's capture replayed; polls are answered
/// from its monitor's kept windows, then while it lingers.
fn replay_agent(
    a: &AgentArgs,
    own: &[EventSpec],
    monitor: MonitorConfig,
    stop: Arc<AtomicBool>,
) -> Result<ExitCode, Failure> {
    let Some(pcap) = &a.pcap else {
        return Err(Failure::Usage(
            "clarion: give the host's traffic: --pcap FILE or -i IFACE".into(),
        ));
    };
    let mut source = crate::host_spec::open_capture(pcap)?;
    let (mut with, apps_out) = replay_stage(a, own, monitor)?;
    let mut ag = Agent::register(a, with.head_mut(), stop, None, None, None)?;
    // The manager's policies apply from the first frame.
    ag.apply_exports(&mut with);
    let options = ReplayOptions {
        speed: a.speed,
        ..ReplayOptions::default()
    };
    let run = replay(&mut source, &mut with, &mut ag, &options).map_err(crate::exports::replay_failure)?;
    let apps = with.sinks_mut().and_then(Sinks::apps_mut);
    if let Some(apps) = apps.filter(|r| !r.names().is_empty()) {
        crate::exports::write_app_report(apps, apps_out.as_deref())?;
    }
    let records = crate::exports::summary(&with);
    let mut monitor = with.into_head();
    if let Some(sink) = ag.sink.as_mut() {
        sink.flush().map_err(sink_error)?;
    }
    ag.health.record(monitor_health(&monitor.counters()));
    ag.linger(&mut monitor, a.linger);
    if !a.quiet {
        let text = ag.summary(&a.host, run.frames, monitor.counters().packets, run.elapsed);
        clarion_cmdline::log::summary("agent", &format!("{text}{records}"));
    }
    match run.damage {
        Some(e) => {
            warn!(target: "agent", "{e}; reports cover the packets before the damage");
            Ok(ExitCode::from(1))
        }
        None => Ok(ExitCode::SUCCESS),
    }
}

/// A replaying agent's stage: a monitor with the host's own events, its
/// exports around it (an exporter without policies until the manager
/// sends some), and where the apps' report goes.
fn replay_stage(
    a: &AgentArgs,
    own: &[EventSpec],
    monitor: MonitorConfig,
) -> Result<(Pipeline<Monitor>, Option<PathBuf>), Failure> {
    let mut own_monitor = Monitor::new(monitor);
    for s in own.iter().filter(|s| !s.on_demand) {
        own_monitor
            .install(s.clone())
            .map_err(|e| Failure::Usage(format!("clarion: event {}: {e}", s.name)))?;
    }
    let export = export_args(a);
    let mut exports = crate::exports::open(&export, &a.host)?;
    if exports.exporter.is_none() {
        // No policies until the manager sends some.
        let config = crate::exports::export_config(&export.policies)?;
        exports.exporter = Some(
            clarion_export::Exporter::new(&[], &config)
                .map_err(|e| Failure::Usage(format!("clarion: {e}")))?,
        );
    }
    exports.around(own_monitor)
}

/// `clarion agent -i`: the host's interfaces captured live; polls are
/// answered from the merged workers' kept windows.
fn live_agent(
    a: &AgentArgs,
    own: &[EventSpec],
    monitor: MonitorConfig,
    stop: Arc<AtomicBool>,
) -> Result<ExitCode, Failure> {
    let export = export_args(a);
    let (mut exports, mut configs) = crate::exports::LiveExports::open(&export, &a.host)?;
    // Read by its own API and its manager's flows requests: kept without --api too.
    let window = exports.flow_window(&export);
    if configs.2.is_none() {
        // Workers with exporters without policies, until the manager sends some.
        configs.2 = Some(clarion_host::LiveExportConfig {
            policies: Vec::new(),
            config: crate::exports::export_config(&export.policies)?,
        });
    }
    let mut config = crate::live::live_config(&a.interface, &a.live, a.workers, monitor, configs)?;
    config.keep_windows = true;
    config.captures = crate::exports::capture_config(&a.export.policies, own)?;
    let events = a.events.clone().unwrap_or_default();
    let mut host = LiveHost::start(&config, own, Arc::clone(&stop))
        .map_err(|e| crate::live::start_failure(e, &events))?;
    crate::live::serve_metrics(&a.live, &host, a.quiet)?;
    // A poll is answered as it arrives, not when the wait for the
    // workers' next event times out.
    let waker = host.waker();
    let wake = Wake(Arc::new(move || waker.wake()));
    // Its monitor started just now: it holds no earlier window.
    let started = clarion_live::realtime_ns();
    let (wake, started, flows) = (Some(wake), Some(started), window.clone());
    let mut ag = Agent::register(a, &mut Merged(&mut host), stop, wake, started, flows)?;
    ag.apply_live_exports(&mut host);
    if !a.quiet {
        announce_capture(a, &config);
    }
    // The host's own reports go out with the live output's.
    let sink = match ag.sink.take() {
        Some(s) => s,
        None => own_sink(a)?,
    };
    let mut out = crate::live::LiveOutput::open(&a.live, a.quiet, sink, exports, host.metrics().0)?;
    let mut local = crate::live::local_events(&a.host, a.events.as_deref(), &host, &a.live, a.quiet)?
        .with_exports_file(a.export.policies.exports.as_deref(), &host)
        .with_health(ag.health.clone())
        .with_flow_window(window);
    let looped = ag.live_loop(&mut host, &mut out, &mut local);
    let lag_ms = host.clock_lag_ns() as f64 / 1e6;
    // Windows closed because the agent stopped still reach the manager and
    // the sink, untimed.
    let timed = ag.tally.close_to_sent.len();
    let (summary, exported) = crate::live::end_run(host, out, looped, |mut last, out| {
        ag.route_live(&mut last, u64::MAX, 0, out, &local)
    })?;
    ag.tally.close_to_sent.truncate(timed);
    ag.link.finished();
    ag.link.bye(Duration::from_secs(5));
    for e in summary.captures.iter().flat_map(|c| &c.errors) {
        warn!(target: "agent", reason = %e, "capture not written: {e}");
    }
    if !a.quiet {
        let mut text = crate::live::summary_text(&summary, own.len(), config.monitor.dos_threshold_bytes);
        text.push_str(&format!("{exported}{}", crate::live::export_lines(&summary)));
        if let Some(c) = &summary.captures {
            text.push_str(&crate::exports::capture_summary(c));
        }
        text.push_str(&ag.summary(&a.host, summary.frames, summary.counters.packets, summary.elapsed));
        text.push_str(&ag.close_to_sent(lag_ms));
        clarion_cmdline::log::summary("agent", &text);
    }
    crate::live::outcome(&summary)
}

/// A live agent's start line, and the snap length's warning.
fn announce_capture(a: &AgentArgs, config: &clarion_host::LiveConfig) {
    let on = crate::live::capturing(&a.interface, &a.live, a.workers);
    info!(target: "agent", host = %a.host, "{} capturing on {on}; Ctrl-C stops", a.host);
    if let Some(w) = crate::live::snap_warning(config) {
        let w = w.trim_start_matches("clarion: warning: ");
        warn!(target: "agent", "{w}");
    }
}

/// Where the host's own reports go when the manager takes none of them:
/// `--output` (or standard output), and the alert sinks after it.
fn own_sink(a: &AgentArgs) -> Result<Box<dyn Sink<Report>>, Failure> {
    crate::alerts::with_alerts(
        crate::outputs::reports(a.output.as_deref(), a.format, &a.host)?,
        &a.alerts,
        a.pcap.is_none(),
        a.events.as_deref(),
    )
}

/// A live host's workers as the desk sees them: installed alike, merged,
/// their closed windows kept by the merger.
struct Merged<'a>(&'a mut LiveHost);

impl Triggers for Merged<'_> {
    fn install(
        &mut self,
        spec: EventSpec,
        start_ns: Option<u64>,
        end_ns: Option<u64>,
    ) -> Result<TriggerId, String> {
        self.0
            .install(&spec, start_ns, end_ns)
            .map(|(id, _)| id)
            .map_err(|e| e.to_string())
    }
    fn remove(&mut self, id: TriggerId) {
        if let Err(e) = self.0.remove(id) {
            warn!(target: "agent", trigger = id, reason = %e, "cannot remove trigger {id}: {e}");
        }
    }
    fn set_end(&mut self, id: TriggerId, end_ns: Option<u64>) {
        self.0.set_end(id, end_ns)
    }
    fn has_event(&self, name: &str) -> bool {
        self.0.has_event(name)
    }
    fn closed_to(&self) -> u64 {
        self.0.closed_to()
    }
    fn window_values(&self, id: TriggerId, window_start_ns: u64) -> Option<WindowValues> {
        self.0.window_values(id, window_start_ns)
    }
}

impl Agent {
    /// Registers with a manager and installs the network-wide triggers it sends.
    /// `wake` is called whenever a message from the manager arrives;
    /// `answers_from_ns`: a live host's start (see `Register::answers_from_ns`);
    /// `flows`: its recent flow records, for the manager's flows requests.
    fn register<T: Triggers + ?Sized>(
        a: &AgentArgs,
        host: &mut T,
        stop: Arc<AtomicBool>,
        wake: Option<Wake>,
        answers_from_ns: Option<u64>,
        flows: Option<clarion_flow_window::SharedWindow>,
    ) -> Result<Agent, Failure> {
        let opts = AgentOptions {
            url: a.nats.url.clone(),
            security: a.nats.security()?,
            host: a.host.clone(),
            prefixes: a.prefixes.clone(),
            register_timeout: Duration::from_nanos(a.register_timeout),
            health: Some(clarion_control::HealthHandle::new()),
            wake,
            answers_from_ns,
            flows,
        };
        let health = opts.health.clone().unwrap_or_default();
        let url = a.nats.url.clone();
        let mut link = AgentLink::connect(&opts, || {
            info!(target: "agent", nats = %url, "waiting for a manager on {url} (subject clarion.register)")
        })
        .map_err(runtime)?;
        let mut desk = HostDesk::new();
        for t in link.take_triggers() {
            desk.install(host, t).map_err(runtime)?;
        }
        let registered_exports = link.take_exports();
        if !a.quiet {
            // "manager manager" read oddly: the default name is left out.
            let named = match link.manager() {
                "manager" => String::new(),
                m => format!(" `{m}`"),
            };
            info!(target: "agent", host = %a.host, manager = %link.manager(), triggers = desk.events(),
                "{} registered with manager{named}: {} network-wide trigger(s)", a.host, desk.events());
        }
        let mut ag = Agent {
            link,
            desk,
            sink: Some(own_sink(a)?),
            tally: Tally::default(),
            stop,
            exports: AppliedExports::default(),
            pending_exports: None,
            from_manager: Vec::new(),
            quiet: a.quiet,
            health,
        };
        if let Some(set) = registered_exports {
            ag.exports_arrived(&set);
        }
        Ok(ag)
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// After a replay: every window is closed now, so polls are answered
    /// at once, until the manager is done, the agent stopped or `linger_ns`
    /// over; then goodbye.
    fn linger(&mut self, monitor: &mut Monitor, linger_ns: u64) {
        self.serve(monitor);
        self.link.finished();
        let linger_until = Instant::now() + Duration::from_nanos(linger_ns);
        while !self.tally.manager_done && !self.stopped() && Instant::now() < linger_until {
            if let Some(item) = self.link.recv_timeout(Duration::from_millis(50)) {
                self.handle(monitor, item);
            }
            self.serve(monitor);
        }
        self.link.bye(Duration::from_secs(5));
    }

    /// As [`Agent::route`], the host's own reports to the live output's
    /// sink; `lag_ns`: how far the workers' clocks lag the wall clock.
    fn route_live(
        &mut self,
        reports: &mut Vec<Report>,
        decided_ns: u64,
        lag_ns: u64,
        out: &mut crate::live::LiveOutput,
        local: &LocalEvents,
    ) -> Result<(), Failure> {
        let own: Vec<Report> = reports
            .drain(..)
            .filter_map(|r| match self.desk.network_event(&r) {
                Some(event) => {
                    self.tally.satisfied += 1;
                    self.link.satisfied(event, &r, decided_ns.max(r.window.end_ns));
                    let since_close = clarion_live::realtime_ns()
                        .saturating_sub(r.window.end_ns)
                        .saturating_sub(lag_ns);
                    self.tally.close_to_sent.push(since_close);
                    None
                }
                None => Some(r),
            })
            .collect();
        own.iter().for_each(|r| local.publish(r));
        if !own.is_empty() {
            out.take(Live::Reports(own))?;
        }
        Ok(())
    }

    /// Until the host ends: its reports routed, the manager's messages and
    /// the host's own control API served between short waits.
    fn live_loop(
        &mut self,
        host: &mut LiveHost,
        out: &mut crate::live::LiveOutput,
        local: &mut LocalEvents,
    ) -> Result<(), Failure> {
        loop {
            match host.next(Duration::from_micros(500)) {
                Live::Ended => return Ok(()),
                Live::Reports(mut reports) => {
                    let decided = host.closed_to();
                    self.route_live(&mut reports, decided, host.clock_lag_ns(), out, local)?;
                }
                other => out.take(other)?,
            }
            self.serve(&mut Merged(host));
            self.apply_live_exports(host);
            // Before a SIGHUP reload of --exports, which keeps them.
            local.keep_managers_exports(&self.from_manager);
            local.set_link_counts(LinkCounts {
                satisfaction_reports: self.tally.satisfied,
                polls_answered: self.tally.answered,
            });
            local.service(host, out.apps());
            out.tick()?;
        }
    }

    /// How long after their window closed the satisfaction reports left (a summary line).
    fn close_to_sent(&mut self, lag_ms: f64) -> String {
        let mut d = std::mem::take(&mut self.tally.close_to_sent);
        if d.is_empty() {
            return String::new();
        }
        d.sort_unstable();
        let at = |q: f64| d[((d.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
        format!(
            "  satisfaction reports left p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs after their window closed here (its end plus the clock's lag, {lag_ms:.1} ms)\n",
            at(0.5),
            at(0.99),
            at(1.0),
        )
    }

    /// The agent's summary line.
    fn summary(&self, host: &str, frames: u64, packets: u64, elapsed: Duration) -> String {
        format!(
            "clarion: agent {}: {} frames, {} packets in {:.2}s; {} satisfaction reports sent, {} polls answered{}{}{}\n",
            host,
            thousands(frames),
            thousands(packets),
            elapsed.as_secs_f64(),
            thousands(self.tally.satisfied),
            thousands(self.tally.answered),
            match self.link.unacked() {
                0 => String::new(),
                n => format!(
                    ", {} satisfaction reports never acknowledged by a manager (their windows may be undecided)",
                    thousands(n)
                ),
            },
            if self.desk.deferred() > 0 {
                format!(", {} polls for windows never reached", self.desk.deferred())
            } else {
                String::new()
            },
            if self.tally.invalid > 0 {
                format!(", {} unreadable messages", self.tally.invalid)
            } else {
                String::new()
            },
        )
    }
}
