//! `clarion agent`: one host's monitor on the NATS transport. It registers
//! with the manager, installs the triggers it is given, replays the host's
//! capture, sends the manager a satisfaction report whenever a trigger of a
//! network-wide event fires, and answers the manager's polls from its kept
//! windows (a poll for a window it has not reached yet waits until it has).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use clarion_capture::{CaptureError, CaptureFile};
use clarion_engine::{Monitor, MonitorConfig, Report};
use clarion_host::{replay, Driver, ReplayOptions};
use clarion_nats::protocol::Control;
use clarion_nats::{AgentLink, AgentOptions, HostDesk, Inbound};
use clarion_sinks::ReportSink;

use crate::args::{parse_duration, Format};
use crate::bus::NatsArgs;
use crate::live::runtime;
use crate::run::{load_events, open_sink_to, sink_error};
use crate::summary::thousands;
use crate::Failure;

pub const AFTER_HELP: &str = "Examples:
  clarion agent --host web-1 --pcap web-1.pcap
  clarion agent --nats nats://10.0.0.5:4222 --host web-2 --pcap web-2.pcap --events local.clarion
  CLARION_NATS_TOKEN=s3cret clarion agent --host db --pcap db.pcap --linger 1m
  clarion agent --host web-1 --pcap web-1.pcap --speed 1      # at the capture's pace, like a live host

The host name must be in the manager's inventory (`clarion manager
--inventory`); the manager answers the registration with this host's
triggers. After the capture ends the agent keeps answering polls until the
manager says it is done, or for --linger. Reports of the host's own events
(--events, without `across hosts`) go to --output; network-wide reports come
from the manager. docs/manager.md explains the protocol.";

#[derive(Args, Debug)]
pub struct AgentArgs {
    #[command(flatten)]
    pub nats: NatsArgs,

    /// This host's name in the manager's inventory (letters, digits, `-`, `_`).
    #[arg(long, value_name = "NAME")]
    pub host: String,

    /// The host's traffic, as a pcap or pcapng file (`-` reads standard input).
    #[arg(long, value_name = "FILE")]
    pub pcap: PathBuf,

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

    /// After the capture ends, keep answering polls this long, unless the manager finishes first.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub linger: u64,

    /// Replay at this many times the capture's own pace (1: as it was
    /// captured, like a live host); default: as fast as possible.
    #[arg(long, value_name = "FACTOR", value_parser = parse_speed)]
    pub speed: Option<f64>,

    /// Wait this long for a manager to answer the registration.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub register_timeout: u64,

    /// Where the host's own events' reports go (default: standard output).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    #[arg(long, value_enum, default_value_t = Format::Auto, value_name = "FORMAT")]
    pub format: Format,

    /// No summary on standard error.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

fn parse_speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a speed: give a factor above 0, e.g. 1 (capture pace) or 10"
        )),
    }
}

/// The agent's counts, for its summary.
#[derive(Default)]
struct Tally {
    satisfied: u64,
    answered: u64,
    invalid: u64,
    manager_done: bool,
}

struct Agent {
    link: AgentLink,
    desk: HostDesk<async_nats::Subject>,
    sink: Box<dyn ReportSink>,
    tally: Tally,
    stop: Arc<AtomicBool>,
}

impl Agent {
    fn handle(&mut self, monitor: &mut Monitor, item: Inbound) {
        match item {
            Inbound::Control(Control::Install(t)) => {
                let name = t.spec.name.clone();
                if let Err(e) = self.desk.install(monitor, t) {
                    eprintln!("clarion: warning: cannot install {name}: {e}");
                }
            }
            Inbound::Control(Control::Remove { event }) => self.desk.remove(monitor, event),
            Inbound::Control(Control::Extend { event, end_ns }) => self.desk.extend(monitor, event, end_ns),
            Inbound::Control(Control::Done) => self.tally.manager_done = true,
            Inbound::Poll { reqs, reply } => {
                if let Some((reply, answers)) = self.desk.poll(monitor, reqs, reply) {
                    self.tally.answered += answers.len() as u64;
                    self.link.answer(reply, &answers);
                }
            }
            Inbound::Invalid(e) => {
                self.tally.invalid += 1;
                if self.tally.invalid == 1 {
                    eprintln!("clarion: warning: {e} (ignored; later ones are counted in the summary)");
                }
            }
        }
    }

    /// Takes what the manager sent, and answers the polls whose windows have closed.
    fn serve(&mut self, monitor: &mut Monitor) {
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
        for r in reports.drain(..) {
            match self.desk.network_event(&r) {
                Some(event) => {
                    self.tally.satisfied += 1;
                    self.link.satisfied(event, &r, monitor.now_ns());
                }
                None => self.sink.write(&r).map_err(sink_error)?,
            }
        }
        Ok(())
    }

    fn service(&mut self, monitor: &mut Monitor) -> Result<bool, Failure> {
        self.serve(monitor);
        Ok(!self.stop.load(Ordering::Relaxed))
    }

    fn warning(&mut self, error: &CaptureError) {
        eprintln!("clarion: warning: {error}");
    }
}

pub fn agent(a: &AgentArgs) -> Result<ExitCode, Failure> {
    let own = match &a.events {
        Some(p) => load_events(p)?,
        None => Vec::new(),
    };
    if let Some(s) = own.iter().find(|s| s.scope.is_network()) {
        return Err(Failure::Usage(format!(
            "clarion: event `{}` is network-wide (`across hosts`): give it to the manager (clarion manager --events); an agent's --events are its host's own",
            s.name
        )));
    }
    let mut source = CaptureFile::open(&a.pcap)
        .with_context(|| format!("cannot read capture {}", a.pcap.display()))
        .map_err(Failure::Runtime)?;
    let stop = crate::live::stop_flag()?;
    let opts = AgentOptions {
        url: a.nats.url.clone(),
        security: a.nats.security()?,
        host: a.host.clone(),
        prefixes: a.prefixes.clone(),
        register_timeout: Duration::from_nanos(a.register_timeout),
    };
    let url = a.nats.url.clone();
    let mut link = AgentLink::connect(&opts, || {
        eprintln!("clarion: waiting for a manager on {url} (subject clarion.register)")
    })
    .map_err(runtime)?;
    let mut monitor = Monitor::new(MonitorConfig {
        host: a.host.clone(),
        history_windows: a.history_windows,
        ..MonitorConfig::default()
    });
    for s in own.into_iter().filter(|s| !s.on_demand) {
        let name = s.name.clone();
        monitor
            .install(s)
            .map_err(|e| Failure::Usage(format!("clarion: event {name}: {e}")))?;
    }
    let mut desk = HostDesk::new();
    for t in link.take_triggers() {
        desk.install(&mut monitor, t).map_err(runtime)?;
    }
    if !a.quiet {
        eprintln!(
            "clarion: agent {} registered with manager {}: {} network-wide trigger(s)",
            a.host,
            link.manager(),
            desk.events()
        );
    }
    let sink = open_sink_to(a.output.as_deref(), a.format)?;
    let mut ag = Agent {
        link,
        desk,
        sink,
        tally: Tally::default(),
        stop: Arc::clone(&stop),
    };
    let options = ReplayOptions {
        speed: a.speed,
        ..ReplayOptions::default()
    };
    let run = replay(&mut source, &mut monitor, &mut ag, &options)?;
    ag.sink.flush().map_err(sink_error)?;
    ag.serve(&mut monitor);
    ag.link.finished();

    // Every window is closed now: polls are answered at once.
    let linger_until = Instant::now() + Duration::from_nanos(a.linger);
    while !ag.tally.manager_done && !stop.load(Ordering::Relaxed) && Instant::now() < linger_until {
        if let Some(item) = ag.link.recv_timeout(Duration::from_millis(50)) {
            ag.handle(&mut monitor, item);
        }
        ag.serve(&mut monitor);
    }
    ag.link.flush(Duration::from_secs(5));
    if !a.quiet {
        let c = monitor.counters();
        eprintln!(
            "clarion: agent {}: {} frames, {} packets in {:.2}s; {} satisfaction reports sent, {} polls answered{}{}",
            a.host,
            thousands(run.frames),
            thousands(c.packets),
            run.elapsed.as_secs_f64(),
            thousands(ag.tally.satisfied),
            thousands(ag.tally.answered),
            if ag.desk.deferred() > 0 {
                format!(", {} polls for windows never reached", ag.desk.deferred())
            } else {
                String::new()
            },
            if ag.tally.invalid > 0 {
                format!(", {} unreadable messages", ag.tally.invalid)
            } else {
                String::new()
            },
        );
    }
    match run.damage {
        Some(e) => {
            eprintln!("clarion: warning: {e}; reports cover the packets before the damage");
            Ok(ExitCode::from(1))
        }
        None => Ok(ExitCode::SUCCESS),
    }
}
