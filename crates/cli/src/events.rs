//! `clarion events`: the control API from the command line (a manager's,
//! or a live host's for its own events).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use clarion_control::{Client, ClientError, EventInfo, HostInfo};

use crate::failure::io;
use crate::Failure;

pub const AFTER_HELP: &str = "Examples:
  clarion events add spike.clarion
  clarion events list
  clarion events show service_load_spike
  clarion events rm service_load_spike
  clarion events watch | jq .values
  clarion events watch --format table --event service_load_spike
  clarion events hosts
  clarion events hosts --json | jq '.[] | {name, completeness: .health.completeness}'
  clarion events --api http://10.0.0.5:8700 --token \"$TOKEN\" list
  clarion events --api http://127.0.0.1:8701 add local.clarion   # a live host's own events

The manager serves its API on 127.0.0.1:8700 unless told otherwise
(clarion manager --api); a live host serves the same routes for its own
events when started with --api (clarion run -i, clarion agent -i).
The token sent is --token (CLARION_API_TOKEN), else the one in
--token-file (CLARION_API_TOKEN_FILE), else the one in
~/.config/clarion/api-token ($XDG_CONFIG_HOME/clarion/api-token) if it
exists: where a server run by the same user keeps its own. A server run
as root keeps root's: use sudo, or copy the token.
`watch` prints each fired network-wide event (a host's: each report) as a
JSON line (schema clarion.report/1), or as a table row (--format table;
on a terminal by default), until interrupted; --event NAME keeps only
that event's reports (and its drill-down instances').";

/// Where the control API is and the token to send (`clarion events`,
/// `clarion apps`).
#[derive(Args, Debug)]
pub struct ApiArgs {
    /// The control API: a manager's, or a live host's (its --api).
    #[arg(
        long,
        env = "CLARION_API",
        default_value = "http://127.0.0.1:8700",
        value_name = "URL",
        global = true
    )]
    pub api: String,

    /// Bearer token (default: the token file's).
    #[arg(
        long,
        env = "CLARION_API_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true,
        global = true
    )]
    pub token: Option<String>,

    /// A file holding the token, e.g. a server's --api-token-file (default:
    /// ~/.config/clarion/api-token when it exists).
    #[arg(long, env = "CLARION_API_TOKEN_FILE", value_name = "FILE", global = true)]
    pub token_file: Option<PathBuf>,
}

impl ApiArgs {
    /// A client of the API, and how a refused call is reported (a 401
    /// also says which token was sent).
    pub fn client(&self) -> Result<(Client, impl Fn(ClientError) -> Failure), Failure> {
        let (token, looked) =
            clarion_control::token::client_token(self.token.as_deref(), self.token_file.as_deref())
                .map_err(crate::failure::token_failure)?;
        let sent = match (&self.token, &looked, &token) {
            (Some(_), _, _) => "the token given (--token, CLARION_API_TOKEN) is not the server's".to_string(),
            (None, Some(p), Some(_)) => format!("the token in {} is not the server's", p.display()),
            (None, Some(p), None) => format!("no token was sent: none given, and no {}", p.display()),
            (None, None, _) => "no token was sent: none given, and no HOME to find a token file in".into(),
        };
        Ok((Client::new(&self.api, token), move |e| failure(e, &sent)))
    }
}

#[derive(Args, Debug)]
pub struct EventsArgs {
    #[command(flatten)]
    pub api: ApiArgs,

    #[command(subcommand)]
    pub action: Action,
}

#[derive(Subcommand, Debug)]
pub enum Action {
    /// Install every event of an events file (all or none; `-` reads standard input).
    Add {
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// List the installed network-wide events.
    List,
    /// Show one event: its source, hosts and local predicate.
    Show {
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Remove an event (its hosts drop their triggers).
    #[command(alias = "remove")]
    Rm {
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Print fired network-wide events as they come: JSON lines, or a table.
    Watch(crate::watch::WatchArgs),
    /// List the inventory's hosts and their health: packets/s (over the
    /// last 5 s), packets lost (kernel drops, malformed, untracked), the
    /// share of packets inspected, the latest sweep's time and late sweeps
    /// ("-": the host sends no health, or does not measure it).
    Hosts {
        /// Print the hosts as the API gives them (a JSON array, health in
        /// the units docs/api/openapi.yaml gives) instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// `e` as a failure; a 401 also says which token was sent (`sent`).
fn failure(e: ClientError, sent: &str) -> Failure {
    match e {
        ClientError::Refused { status: 401, message } => {
            Failure::Usage(format!("clarion: {message}\n  ({sent})"))
        }
        // The manager refused what was asked (an invalid event, an unknown name): bad usage.
        ClientError::Refused { status, message } if status < 500 => {
            Failure::Usage(format!("clarion: {message}"))
        }
        other => Failure::Runtime(other.into()),
    }
}

/// A refusal of a file's text sent to the API: its diagnostics name the
/// file (the server only knows the text as `request`) so that an editor
/// or a terminal can jump to the place.
pub fn in_file(f: Failure, file: &std::path::Path) -> Failure {
    match f {
        Failure::Usage(m) => {
            let name = if file == std::path::Path::new("-") {
                "<stdin>".to_string()
            } else {
                file.display().to_string()
            };
            Failure::Usage(m.replace("[ request:", &format!("[ {name}:")))
        }
        other => other,
    }
}

fn print_event(out: &mut impl Write, e: &EventInfo) -> std::io::Result<()> {
    writeln!(
        out,
        "{} (id {}): on {} host(s) [{}], each testing {}",
        e.name,
        e.id,
        e.hosts.len(),
        e.hosts.join(", "),
        e.local_predicate
    )
}

pub fn events(a: &EventsArgs) -> Result<ExitCode, Failure> {
    let (client, failure) = a.api.client()?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match &a.action {
        Action::Add { file } => {
            let text = read_events(file)?;
            for e in client.add(&text).map_err(|e| in_file(failure(e), file))? {
                write!(out, "installed ").map_err(io)?;
                print_event(&mut out, &e).map_err(io)?;
            }
        }
        Action::List => {
            let list = client.list().map_err(failure)?;
            if list.is_empty() {
                eprintln!("clarion: no event is installed (clarion events add FILE)");
            }
            for e in list {
                print_event(&mut out, &e).map_err(io)?;
            }
        }
        Action::Show { name } => {
            let e = client.show(name).map_err(failure)?;
            print_event(&mut out, &e).map_err(io)?;
            writeln!(out, "installed {}\n\n{}", e.added, e.source).map_err(io)?;
        }
        Action::Rm { name } => {
            let e = client.remove(name).map_err(failure)?;
            write!(out, "removed ").map_err(io)?;
            print_event(&mut out, &e).map_err(io)?;
        }
        Action::Hosts { json: false } => {
            print_hosts(&mut out, client.hosts().map_err(failure)?).map_err(io)?
        }
        Action::Hosts { json: true } => {
            let hosts = client.hosts().map_err(failure)?;
            let text = serde_json::to_string_pretty(&hosts).map_err(|e| Failure::Runtime(e.into()))?;
            writeln!(out, "{text}").map_err(io)?;
        }
        Action::Watch(w) => {
            let is_tty = std::io::IsTerminal::is_terminal(&stdout);
            crate::watch::watch(&client, failure, w, &mut out, is_tty)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// An events file's text (`-`: standard input); invalid UTF-8 is shown
/// with line and column before anything is sent.
pub(crate) fn read_events(file: &std::path::Path) -> Result<String, Failure> {
    let color = std::io::IsTerminal::is_terminal(&std::io::stderr());
    if file.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
            .map_err(|e| Failure::Runtime(e.into()))?;
        return crate::check::events_text("standard input", bytes, color);
    }
    let bytes = std::fs::read(file).map_err(|e| {
        Failure::Usage(format!(
            "clarion: cannot read events file {}: {e}",
            file.display()
        ))
    })?;
    crate::check::events_text(&file.display().to_string(), bytes, color)
}

fn print_hosts(out: &mut impl Write, hosts: Vec<HostInfo>) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<16} {:<10} {:>9} {:>8} {:>10} {:>9} {:>7} {:>10} {:>8} {:>8} {:>9} {:>5}  prefixes",
        "host",
        "state",
        "seen",
        "triggers",
        "reports",
        "answered",
        "missed",
        "pkt/s",
        "drops",
        "complete",
        "sweep ms",
        "late"
    )?;
    for h in hosts {
        let seen = h
            .last_seen_ms
            .map_or("never".to_string(), |ms| format!("{:.1}s ago", ms as f64 / 1e3));
        let state = if h.finished {
            format!("{} (done)", h.state)
        } else {
            h.state
        };
        let dash = || "-".to_string();
        let health = h.health.as_ref();
        writeln!(
            out,
            "{:<16} {:<10} {:>9} {:>8} {:>10} {:>9} {:>7} {:>10} {:>8} {:>8} {:>9} {:>5}  {}",
            h.name,
            state,
            seen,
            h.triggers,
            h.satisfaction_reports,
            h.polls_answered,
            h.polls_missed,
            health.map_or_else(dash, |x| format!("{:.0}", x.packets_per_second)),
            health.map_or_else(dash, |x| x.drops_total.to_string()),
            health.map_or_else(dash, |x| percent(x.completeness)),
            health
                .and_then(|x| x.sweep_seconds_last)
                .map_or_else(dash, |s| format!("{:.3}", s * 1e3)),
            health.map_or_else(dash, |x| x.late_sweeps_total.to_string()),
            h.prefixes.join(" ")
        )?;
    }
    Ok(())
}

/// A share as a percentage with two decimals, rounded down: anything
/// short of the whole never reads "100%".
fn percent(share: f64) -> String {
    if share >= 1.0 {
        return "100%".into();
    }
    let hundredths = (share.max(0.0) * 10_000.0).floor() / 100.0;
    format!("{hundredths:.2}%")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(health: Option<clarion_control::HostHealth>) -> HostInfo {
        HostInfo {
            name: "web-1".into(),
            prefixes: vec!["10.0.0.0/24".into()],
            state: "up".into(),
            last_seen_ms: Some(1500),
            finished: false,
            triggers: 2,
            satisfaction_reports: 3,
            polls_answered: 4,
            polls_missed: 5,
            refused: Default::default(),
            health,
        }
    }

    fn table(h: HostInfo) -> Vec<String> {
        let mut out = Vec::new();
        print_hosts(&mut out, vec![h]).expect("writes");
        let text = String::from_utf8(out).expect("utf-8");
        let row = text.lines().nth(1).expect("a row").to_string();
        row.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn the_hosts_table_shows_health_in_its_units() {
        let mut meter = clarion_control::HealthMeter::new(0, 5_000_000_000, 0);
        meter.record(
            4_000_000_000,
            clarion_control::HealthCounters {
                packets: 10_000,
                drops_kernel: 1,
                malformed: 2,
                sweeps: 9,
                sweeps_late: 3,
                sweep_last_ns: Some(1_234_567),
                sweep_max_ns: Some(2_000_000),
                ..Default::default()
            },
        );
        let health = meter.health(4_000_000_000);
        let cells = table(host(Some(health.clone())));
        // host, state, seen ("1.5s ago": two cells), triggers, reports, answered, missed, then health.
        assert_eq!(cells[0..8], ["web-1", "up", "1.5s", "ago", "2", "3", "4", "5"]);
        assert_eq!(cells[8], format!("{}", 10_000 / 4));
        assert_eq!(cells[9], "3", "kernel drops and malformed");
        // 9,998 inspected of 10,001 offered: 99.97%, never rounded up.
        assert_eq!(cells[10], "99.97%");
        assert_eq!(cells[11], "1.235");
        assert_eq!(cells[12], "3");
        assert_eq!(cells[13], "10.0.0.0/24");
        let cells = table(host(None));
        assert_eq!(cells[8..13], ["-", "-", "-", "-", "-"]);
    }

    #[test]
    fn a_share_short_of_whole_never_reads_100() {
        assert_eq!(percent(1.0), "100%");
        assert_eq!(percent(0.999_999_9), "99.99%");
        assert_eq!(percent(0.5), "50.00%");
        assert_eq!(percent(0.0), "0.00%");
    }
}
