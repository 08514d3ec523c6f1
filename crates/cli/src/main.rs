//! The `clarion` binary: argument parsing and dispatch only. Each command
//! lives in its own module; errors become one `clarion:`-prefixed message
//! and an exit status (0 ok, 1 runtime failure, 2 bad usage or bad events).

// Every function short (issue 34; clippy.toml sets the bound, 60 lines).
#![warn(clippy::too_many_lines)]

mod agent;
mod alerts;
mod apps;
mod args;
mod bus;
mod check;
mod collect;
mod completions;
mod config;
mod credentials;
mod events;
mod exports;
mod exports_cmd;
mod failure;
mod host_spec;
mod live;
mod manager;
mod manpages;
mod metrics_server;
mod model;
mod monitor;
mod network;
mod outputs;
mod run;
mod split;
mod summary;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

pub use clarion_cmdline::Failure;

const ABOUT: &str = "Clarion: per-packet network event monitoring.

Clarion inspects every packet, keeps per-flow statistics, and reports each
time window in which a user-defined event (filter + predicate + flow
granularity + time interval) holds — precisely, because nothing is sampled.";

const AFTER_HELP: &str = "Examples:
  Run the bundled events on the bundled capture, as a table:
    clarion run --pcap examples/demo.pcap --events examples/demo.clarion --format table

  Write JSON lines for another program:
    clarion run --pcap trace.pcapng --events rack.clarion --output reports.jsonl

  Validate an events file and print it in canonical form:
    clarion check examples/paper.clarion

  Benchmark, feasibility region, DoS profiling: the research harness, its own binary:
    clarion-lab --help

Exit status: 0 ok, 1 runtime failure (unreadable or damaged capture, write
error), 2 bad usage or an invalid events file.
Language reference: docs/language.md. Report schema: docs/reports.md.";

#[derive(Parser, Debug)]
#[command(name = "clarion", version, about = ABOUT, after_help = AFTER_HELP, max_term_width = 100)]
pub struct Cli {
    /// Settings for run, agent and manager from a TOML file, one table per
    /// command with the flags' names (examples/clarion.toml); flags override.
    #[arg(long, global = true, env = "CLARION_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Monitor a capture file or interfaces: report every window in which an event holds;
    /// write flow records and packet vectors (--records, --gpv); export headers and packets
    /// (--exports).
    #[command(after_help = RUN_AFTER_HELP)]
    Run(args::RunArgs),
    /// Validate an events file (or a file of export policies) and print it in canonical form.
    #[command(after_help = CHECK_AFTER_HELP)]
    Check(args::CheckArgs),
    /// One host's monitor on the NATS transport: register with the manager, replay the
    /// host's capture, report to the manager and answer its polls.
    #[command(after_help = agent::AFTER_HELP)]
    Agent(agent::AgentArgs),
    /// The event manager on the NATS transport: network-wide events placed on the agents'
    /// hosts, decided from their reports and answers.
    #[command(after_help = manager::AFTER_HELP)]
    Manager(manager::ManagerArgs),
    /// Split a capture of several hosts' traffic into one capture per host of an inventory.
    #[command(after_help = split::AFTER_HELP)]
    Split(split::SplitArgs),
    /// Add, list, show and remove the manager's network-wide events, follow fired ones, list hosts.
    #[command(after_help = events::AFTER_HELP)]
    Events(events::EventsArgs),
    /// Run metric apps (*Flow) over a file of grouped packet vectors (`run --gpv`), or start
    /// and stop them on a running host (its --api).
    #[command(after_help = apps::AFTER_HELP)]
    Apps(apps::AppsArgs),
    /// Add, list, show and remove a running host's export policies (its --api).
    #[command(after_help = exports_cmd::AFTER_HELP)]
    Exports(exports_cmd::ExportsArgs),
    /// Make an nkey per host of an inventory and one for the manager, and the nats-server
    /// authorization that lets each host speak only as itself.
    #[command(after_help = credentials::AFTER_HELP)]
    Credentials(credentials::CredentialsArgs),
    /// TurboFlow's capacity model on a capture: predicted against measured eviction ratio,
    /// packets per microflow record and CPU per packet, for each microflow cache size.
    #[command(after_help = model::AFTER_HELP)]
    Model(model::ModelArgs),
    /// Receive the header streams of export policies (`send headers to collector`) and write
    /// them as pcapng or JSON lines, counting what was lost on the way.
    #[command(after_help = collect::AFTER_HELP)]
    Collect(collect::CollectArgs),
    /// Print a shell completion script for bash, zsh, fish, elvish or PowerShell.
    #[command(after_help = completions::AFTER_HELP)]
    Completions(completions::CompletionsArgs),
    /// Write the manual pages (clarion(1) and one per command) as roff files.
    #[command(after_help = manpages::AFTER_HELP)]
    Man(manpages::ManArgs),
}

const RUN_AFTER_HELP: &str = "Examples:
  clarion run --pcap examples/demo.pcap --events examples/demo.clarion
  tcpdump -i eth0 -w - | clarion run --pcap - --events rack.clarion --format json
  clarion run -i eth0 --events rack.clarion --duration 60s --epoch-stats epochs.jsonl
  clarion run -i eth0 -i eth1 --workers 2 --filter 'not port 22' --events rack.clarion
  clarion run -i mirror0 --source xdp --workers 2 --events rack.clarion
  clarion run -i eth0 --adapt --events examples/priority.clarion --epoch-stats epochs.jsonl
  clarion run --pcap dc.pcap --inventory hosts.txt --events service.clarion
  clarion run --inventory hosts.txt --pcap web-1=web-1.pcap --pcap web-2=web-2.pcap --events service.clarion
  clarion run --pcap big.pcap --workers 2 --events rack.clarion
  clarion run --pcap trace.pcap --speed 1 --events rack.clarion --alertmanager http://127.0.0.1:9093   # at the capture's pace
  clarion run --pcap trace.pcap --records flows.jsonl --records ipfix+udp://collector:4739
  clarion run -i eth0 --events rack.clarion --records flows.parquet --gpv live.gpv --app profiler
  clarion run --pcap trace.pcap --exports examples/exports.clarion --export-dir spool
  clarion run --pcap trace.pcap --events loss.clarion --capture-dir captures   # events with `then capture`
  clarion run -i eth0 --events rack.clarion --webhook https://alerts.example.net/clarion --webhook-dead-letter dead.jsonl
  clarion run -i eth0 --events rack.clarion --webhook-format slack --webhook https://hooks.slack.com/services/T/B/X
  clarion run -i eth0 --events rack.clarion --syslog udp://loghost:514 --syslog-facility local3

With --inventory, each host of the inventory runs its own monitor, and the
event manager splits every network-wide event (`across hosts`) into
per-host triggers and decides it from all hosts' values, as it would
across machines. One capture of several hosts' traffic gives each packet
to the hosts owning its source and destination addresses; one capture per
host (--pcap NAME=FILE, as tcpdump writes on each host's interface) gives
each host its own capture's packets, the captures merged by time.

Live capture (--interface) uses an AF_PACKET ring per worker and interface
(TPACKET_V2 frames, each handed over at once; --ring-mode blocks for
TPACKET_V3), or with --source xdp an AF_XDP socket per RX queue (worker k
takes the queues q with q mod N = k). Epochs are aligned multiples of Unix
time, so hosts agree; they end with the packets' kernel timestamps or, when
the wire is quiet, with the clock (lagging it by --clock-lag, plus three
kernel ticks with --ring-mode blocks, so no packet arrives after its epoch
was swept). Kernel drops are read every millisecond and reported in
the completeness of the windows they fall in, in the summary lines and in
--epoch-stats. Ctrl-C or SIGTERM finishes the current epoch's sweep, writes
the last reports and the summary; a second Ctrl-C exits at once.

Reports go to standard output (or --output) as they are produced; the
summary and any warning go to standard error. A damaged capture is processed
up to the damage, then reported with the packet number and byte offset, and
the exit status is 1.";

const CHECK_AFTER_HELP: &str = "Examples:
  clarion check examples/paper.clarion
  clarion check --quiet rack.clarion && echo valid

Errors name the line and column, underline the span and suggest a fix.";

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cmd = match config::with_config(Cli::command(), &args) {
        Ok(cmd) => cmd,
        Err(msg) => {
            eprintln!("clarion: {msg}");
            return ExitCode::from(2);
        }
    };
    let parsed = cmd
        .try_get_matches_from(&args)
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(c) => c,
        Err(e) => return clarion_cmdline::parse_exit(&e),
    };
    if let Some(hint) = stdout_hint(&cli.command) {
        if stdout_closed() {
            eprintln!("clarion: stdout is closed; {hint}");
            return ExitCode::from(1);
        }
    }
    let result = match cli.command {
        Command::Run(a) => run::run(&a),
        Command::Check(a) => check::check(&a),
        Command::Agent(a) => agent::agent(&a),
        Command::Manager(a) => manager::manager(&a),
        Command::Split(a) => split::split(&a),
        Command::Credentials(a) => credentials::credentials(&a),
        Command::Events(a) => events::events(&a),
        Command::Model(a) => model::model(&a),
        Command::Apps(a) => apps::apps(&a),
        Command::Exports(a) => exports_cmd::exports(&a),
        Command::Collect(a) => collect::collect(&a),
        Command::Completions(a) => completions::completions(&a, Cli::command()),
        Command::Man(a) => manpages::man(&a, Cli::command()),
    };
    clarion_cmdline::exit("clarion", result)
}

/// What to do instead of writing to standard output, for a command that
/// would; `None` for one that writes nothing there.
fn stdout_hint(command: &Command) -> Option<&'static str> {
    const OUTPUT: &str = "use --output FILE or redirect to /dev/null explicitly";
    match command {
        Command::Run(a) => a.output.is_none().then_some(OUTPUT),
        Command::Agent(a) => a.output.is_none().then_some(OUTPUT),
        Command::Manager(a) => a.output.is_none().then_some(OUTPUT),
        Command::Check(a) => (!a.quiet).then_some("use --quiet or redirect to /dev/null explicitly"),
        Command::Events(_) => Some("redirect it to a file or to /dev/null explicitly"),
        Command::Apps(a) => match &a.command {
            apps::AppsCommand::Run { output, .. } => output.is_none().then_some(OUTPUT),
            _ => Some("redirect it to a file or to /dev/null explicitly"),
        },
        Command::Model(_) | Command::Exports(_) => Some("redirect it to a file or to /dev/null explicitly"),
        Command::Collect(a) => a.output.is_none().then_some(OUTPUT),
        Command::Completions(_) => {
            Some("redirect it to a file, e.g. `clarion completions bash > /etc/bash_completion.d/clarion`")
        }
        Command::Split(_) | Command::Credentials(_) | Command::Man(_) => None,
    }
}

/// Whether the caller closed standard output (`>&-`), which would discard
/// every report without an error.
///
/// The Rust runtime reopens a closed descriptor 1 on `/dev/null` before
/// `main`, read-write; a shell's `>/dev/null` opens it write-only. So
/// descriptor 1 on `/dev/null` and opened read-write means closed
/// (`1<>/dev/null` looks the same and is refused too). Linux only, like
/// the rest: the mode is read from procfs. Anything unreadable: not closed.
fn stdout_closed() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;

    // fstat through a duplicate, so no `unsafe` is needed to borrow fd 1 as a File.
    let Ok(fd) = std::io::stdout().as_fd().try_clone_to_owned() else {
        return false;
    };
    let (Ok(out), Ok(null)) = (std::fs::File::from(fd).metadata(), std::fs::metadata("/dev/null")) else {
        return false;
    };
    if (out.dev(), out.ino()) != (null.dev(), null.ino()) {
        return false;
    }
    // "flags:\t0100002": the open flags in octal; O_ACCMODE is the low two bits, O_RDWR 2.
    let Ok(info) = std::fs::read_to_string("/proc/self/fdinfo/1") else {
        return false;
    };
    info.lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
        .is_some_and(|flags| flags & 0o3 == 0o2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
