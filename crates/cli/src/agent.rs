//! `clarion agent`: one host's monitor on the NATS transport. It registers
//! with the manager, installs the triggers it is given, replays the host's
//! capture, sends the manager a satisfaction report whenever a trigger of a
//! network-wide event fires, and answers the manager's polls from its kept
//! windows (a poll for a window it has not reached yet waits until it has).
//!
//! Export policies come from the manager too (`clarion exports add --api
//! MANAGER`): the whole set, in the registration reply and whenever it
//! changes, checked with the language and applied between frames (a
//! replay: to its exporter, from the next frame on; live: to every
//! worker), replacing the manager's previous ones; the host's own (of
//! `--exports`, and added through its API) run beside them. A set that
//! does not check, that takes the name of one of the host's own, or that
//! the host refuses (a pcapng policy without `--export-dir`), is refused,
//! said on standard error and to the manager, and the policies running
//! stay. An agent always has an exporter, with
//! no policies until some arrive (no cost: it is offered no frame).
//!
//! The runtime is `clarion-agent`'s: here the flags become its
//! [`AgentSettings`] ([`agent_settings`], the one place), the host's
//! pipeline or live host and its outputs are built as `clarion run`'s
//! are, and the summary is printed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use clarion_agent::{Agent, AgentSettings, Counts, LiveOutputs, Merged};
use clarion_cmdline::log::LogFormat;
use clarion_engine::{Monitor, MonitorConfig, Report};
use clarion_host::{Live, LiveHost};
use clarion_lang::spec::EventSpec;
use clarion_pipeline::{Pipeline, Sinks};
use clarion_sinks::Sink;
use tracing::{info, warn};

use crate::args::{parse_duration, parse_speed, ExportArgs, Format, LiveArgs, MonitorArgs};
use crate::bus::NatsArgs;
use crate::failure::runtime;
use crate::host_spec::load_events;
use crate::live::LiveOutput;
use crate::outputs::sink_error;
use crate::summary::thousands;
use crate::Failure;

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

/// The agent's settings, from its flags (here only).
pub fn agent_settings(a: &AgentArgs) -> Result<AgentSettings, Failure> {
    Ok(AgentSettings {
        host: a.host.clone(),
        url: a.nats.url.clone(),
        security: a.nats.security()?,
        prefixes: a.prefixes.clone(),
        register_timeout: Duration::from_nanos(a.register_timeout),
        linger: Duration::from_nanos(a.linger),
        speed: a.speed,
        quiet: a.quiet,
    })
}

/// The agent's failures as the command line reports them.
fn failure(e: clarion_agent::Error) -> Failure {
    use clarion_agent::Error;
    match e {
        Error::Register(e) | Error::Install(e) => runtime(e),
        Error::Reports(e) => sink_error(e),
        Error::Host(e) => runtime(e),
    }
}

/// A live agent's output is `clarion run -i`'s.
impl LiveOutputs for LiveOutput {
    type Error = Failure;

    fn take(&mut self, l: Live) -> Result<(), Failure> {
        LiveOutput::take(self, l)
    }

    fn tick(&mut self) -> Result<(), Failure> {
        LiveOutput::tick(self)
    }

    fn apps(&mut self) -> Option<&mut clarion_gpv::AppRuntime> {
        LiveOutput::apps(self)
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
    let registered =
        Agent::register(agent_settings(a)?, with.head_mut(), stop, None, None, None).map_err(failure)?;
    let mut ag = registered.with_sink(Some(own_sink(a)?));
    let run = ag
        .replay(&mut source, &mut with)
        .map_err(failure)
        .map_err(crate::exports::replay_failure)?;
    let apps = with.sinks_mut().and_then(Sinks::apps_mut);
    if let Some(apps) = apps.filter(|r| !r.names().is_empty()) {
        crate::exports::write_app_report(apps, apps_out.as_deref())?;
    }
    let records = crate::exports::summary(&with);
    let mut monitor = with.into_head();
    ag.linger(&mut monitor).map_err(failure)?;
    if !a.quiet {
        let text = summary(
            &a.host,
            run.frames,
            monitor.counters().packets,
            run.elapsed,
            &ag.counts(),
        );
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
    let wake = clarion_agent::wake(&host);
    // Its monitor started just now: it holds no earlier window.
    let started = clarion_live::realtime_ns();
    let registered = Agent::register(
        agent_settings(a)?,
        &mut Merged(&mut host),
        stop,
        Some(wake),
        Some(started),
        window.clone(),
    )
    .map_err(failure)?;
    // The host's own reports go out with the live output's.
    let sink = own_sink(a)?;
    let mut ag = registered.with_sink(None);
    ag.apply_exports(&mut host);
    if !a.quiet {
        announce_capture(a, &config);
    }
    let mut out = LiveOutput::open(&a.live, a.quiet, sink, exports, host.metrics().0)?;
    let mut local = crate::live::local_events(&a.host, a.events.as_deref(), &host, &a.live, a.quiet)?
        .with_exports_file(a.export.policies.exports.as_deref(), &host)
        .with_health(ag.health())
        .with_flow_window(window);
    let looped = ag.live_loop(&mut host, &mut out, &mut local);
    let lag_ms = host.clock_lag_ns() as f64 / 1e6;
    // Windows closed because the agent stopped still reach the manager and
    // the sink, untimed.
    let (summary, exported) = crate::live::end_run(host, out, looped, |mut last, out| {
        ag.route_live(&mut last, u64::MAX, None, out, &local)
    })?;
    ag.bye();
    for e in summary.captures.iter().flat_map(|c| &c.errors) {
        warn!(target: "agent", reason = %e, "capture not written: {e}");
    }
    if !a.quiet {
        let text = live_summary(a, &summary, &exported, own.len(), &config, &mut ag, lag_ms);
        clarion_cmdline::log::summary("agent", &text);
    }
    crate::live::outcome(&summary)
}

/// A live agent's summary: `clarion run -i`'s, then the agent's lines.
fn live_summary(
    a: &AgentArgs,
    summary: &clarion_host::LiveSummary,
    exported: &str,
    events: usize,
    config: &clarion_host::LiveConfig,
    ag: &mut Agent,
    lag_ms: f64,
) -> String {
    let mut text = crate::live::summary_text(summary, events, config.monitor.dos_threshold_bytes);
    text.push_str(&format!("{exported}{}", crate::live::export_lines(summary)));
    if let Some(c) = &summary.captures {
        text.push_str(&crate::exports::capture_summary(c));
    }
    let (frames, packets) = (summary.frames, summary.counters.packets);
    text.push_str(&self::summary(
        &a.host,
        frames,
        packets,
        summary.elapsed,
        &ag.counts(),
    ));
    text.push_str(&close_to_sent(ag.take_close_to_sent(), lag_ms));
    text
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

/// How long after their window closed the satisfaction reports left (a summary line).
fn close_to_sent(mut d: Vec<u64>, lag_ms: f64) -> String {
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
fn summary(host: &str, frames: u64, packets: u64, elapsed: Duration, c: &Counts) -> String {
    format!(
        "clarion: agent {}: {} frames, {} packets in {:.2}s; {} satisfaction reports sent, {} polls answered{}{}{}\n",
        host,
        thousands(frames),
        thousands(packets),
        elapsed.as_secs_f64(),
        thousands(c.satisfied),
        thousands(c.answered),
        match c.unacked {
            0 => String::new(),
            n => format!(
                ", {} satisfaction reports never acknowledged by a manager (their windows may be undecided)",
                thousands(n)
            ),
        },
        if c.deferred > 0 {
            format!(", {} polls for windows never reached", c.deferred)
        } else {
            String::new()
        },
        if c.invalid > 0 {
            format!(", {} unreadable messages", c.invalid)
        } else {
            String::new()
        },
    )
}
