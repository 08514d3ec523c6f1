//! `clarion manager`: the event manager on the NATS transport. It places
//! and splits the network-wide events of its events file over the hosts of
//! its inventory, hands each registering agent its triggers, polls the other
//! hosts when one's trigger fires, and writes (and publishes on
//! `clarion.events`) every network-wide report.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use clarion_lang::spec::Scope;
use clarion_manager::{HostId, Manager};
use clarion_nats::protocol::Trigger;
use clarion_nats::{serve, ManagerOptions, ManagerStats};

use crate::args::{parse_duration, Format};
use crate::bus::NatsArgs;
use crate::network::read_inventory;
use crate::run::{load_events, open_sink_to, sink_error};
use crate::summary::thousands;
use crate::Failure;

pub const AFTER_HELP: &str = "Examples:
  clarion manager --inventory hosts.txt --events service.clarion
  clarion manager --nats nats://10.0.0.5:4222 --inventory hosts.txt --events service.clarion -o events.jsonl
  clarion manager --inventory hosts.txt --events service.clarion --until-finished --poll-timeout 5s

Every event of --events must be network-wide (`across hosts`); a host's own
events go to its agent (clarion agent --events). Agents register by the
names of the inventory. Reports go to --output (JSON lines or a table) and,
as JSON, to the NATS subject clarion.events. With --until-finished the
manager exits once every host's agent has replayed its capture and every
decision is made; otherwise it runs until Ctrl-C or --duration.
docs/manager.md explains placement, threshold splitting and the protocol.";

#[derive(Args, Debug)]
pub struct ManagerArgs {
    #[command(flatten)]
    pub nats: NatsArgs,

    /// The hosts and the prefixes each owns, one host per line (see docs/manager.md).
    #[arg(long, value_name = "FILE")]
    pub inventory: PathBuf,

    /// The network-wide events (`across hosts`).
    #[arg(long, value_name = "FILE")]
    pub events: PathBuf,

    /// How long a polled host has to answer; after it, the decision is made
    /// with the hosts that answered and the report is marked incomplete.
    #[arg(long, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub poll_timeout: u64,

    /// Exit once every inventory host's agent has finished its capture and every decision is made.
    #[arg(long)]
    pub until_finished: bool,

    /// Stop after this long (default: until Ctrl-C or SIGTERM, or --until-finished).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Option<u64>,

    /// The manager's name: the `host` of its reports.
    #[arg(long, default_value = "manager", value_name = "NAME")]
    pub name: String,

    /// Where network-wide reports go (default: standard output).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    #[arg(long, value_enum, default_value_t = Format::Auto, value_name = "FORMAT")]
    pub format: Format,

    /// No summary on standard error.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

pub fn manager(a: &ManagerArgs) -> Result<ExitCode, Failure> {
    let inventory = read_inventory(&a.inventory)?;
    let specs = load_events(&a.events)?;
    let file = a.events.display();
    let mut names = HashSet::new();
    let mut m = Manager::new(&a.name, inventory);
    let mut triggers: HashMap<HostId, Vec<Trigger>> = HashMap::new();
    for s in &specs {
        if s.scope != Scope::Network {
            return Err(Failure::Usage(format!(
                "clarion: {file}: event `{}` is not network-wide: add `across hosts`, or give it to the agents (clarion agent --events)",
                s.name
            )));
        }
        if !names.insert(s.name.clone()) {
            return Err(Failure::Usage(format!(
                "clarion: {file}: two events are named `{}`; network-wide events need distinct names",
                s.name
            )));
        }
        let (id, local) = m
            .install(s)
            .map_err(|e| Failure::Usage(format!("clarion: {file}: {e}")))?;
        let needs = m.event(id).map_or(0, |e| e.split.needs.len());
        for (host, spec) in local {
            triggers.entry(host).or_default().push(Trigger {
                event: id as u64,
                spec,
                needs,
            });
        }
    }
    let hosts: Vec<String> = m.inventory().hosts().iter().map(|h| h.name.clone()).collect();
    let stop = crate::live::stop_flag()?;
    if let Some(d) = a.duration {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_nanos(d));
            stop.store(true, Ordering::Relaxed);
        });
    }
    let mut sink = open_sink_to(a.output.as_deref(), a.format)?;
    if !a.quiet {
        eprintln!(
            "clarion: manager {} on {}: {} network-wide event(s) over {} host(s); waiting for agents",
            a.name,
            a.nats.url,
            specs.len(),
            hosts.len()
        );
    }
    let opts = ManagerOptions {
        url: a.nats.url.clone(),
        auth: a.nats.auth()?,
        poll_timeout: Duration::from_nanos(a.poll_timeout),
        until_finished: a.until_finished,
    };
    let mut write_error = None;
    let stats = serve(&opts, &a.name, m, triggers, stop, &mut |r| {
        if write_error.is_none() {
            if let Err(e) = sink.write(r) {
                write_error = Some(e);
            }
        }
    })
    .map_err(|e| Failure::Runtime(e.into()))?;
    if let Some(e) = write_error {
        return Err(sink_error(e));
    }
    sink.flush().map_err(sink_error)?;
    if !a.quiet {
        print_summary(&stats, &hosts);
    }
    Ok(ExitCode::SUCCESS)
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn print_summary(s: &ManagerStats, hosts: &[String]) {
    let mut lat = s.decision_latency.clone();
    lat.sort();
    eprintln!(
        "clarion: manager: {} registrations, {} satisfaction reports, {} polls ({} unanswered, {} for windows no longer kept), {} decisions ({} fired, {} partial)",
        thousands(s.registrations),
        thousands(s.satisfied),
        thousands(s.polls),
        thousands(s.poll_timeouts),
        thousands(s.gone),
        thousands(s.decisions),
        thousands(s.fired),
        thousands(s.partial),
    );
    if !lat.is_empty() {
        eprintln!(
            "  first satisfaction report to decision: p50 {:?}, p99 {:?}, max {:?}",
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            percentile(&lat, 1.0)
        );
    }
    for (h, lag) in hosts.iter().zip(&s.report_lag) {
        match lag {
            Some(l) if l.as_secs() < 3600 => eprintln!(
                "  host {h}: reports arrived up to {:.3} ms after their window ended (clock skew + reporting delay)",
                l.as_secs_f64() * 1e3
            ),
            Some(_) => eprintln!("  host {h}: its windows are more than an hour old (a replayed capture)"),
            None => {}
        }
    }
    if s.invalid > 0 {
        eprintln!(
            "  {} messages could not be read or came from hosts not in the inventory",
            thousands(s.invalid)
        );
    }
}
