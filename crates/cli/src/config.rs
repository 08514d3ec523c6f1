//! `--config FILE` (or `CLARION_CONFIG`): a TOML file of settings for
//! `run`, `agent` and `manager`, one table per command, each key a flag's
//! long name and its value what the flag would take:
//!
//! ```toml
//! [agent]
//! nats = "nats://10.0.0.5:4222"
//! host = "web-1"
//! interface = ["eth0"]     # a flag given several times: an array
//! workers = 2
//! quiet = true             # a switch
//! ```
//!
//! A setting is the flag's default: a flag on the command line (or its
//! environment variable) overrides it. Of the two inputs of `run` and
//! `agent`, `pcap` and `interface`, one given on the command line replaces
//! the other from the file. Unknown commands and keys, and values a flag
//! would refuse, are errors (those of a key naming the file, the table and
//! the key; those of a value as the flag's own).
//! Relative paths are relative to the current directory, as on the command
//! line.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::Command;

/// Tables a config file may have: the commands that take settings.
const COMMANDS: [&str; 3] = ["run", "agent", "manager"];

/// A flag required unless one of these is present (`required_unless_present_any`):
/// one of them set in the file satisfies it, which clap does not count.
const UNLESS: [(&str, &[&str]); 1] = [("events", &["records", "gpv", "app", "exports"])];

/// An input given on the command line (its flags) replaces this one from the file.
const INPUTS: [(&[&str], &str); 2] = [(&["--pcap"], "interface"), (&["--interface", "-i"], "pcap")];

/// Whether the arguments give one of `flags` (`--flag V`, `--flag=V`, `-iV`).
fn given(args: &[OsString], flags: &[&str]) -> bool {
    args.iter()
        .skip(1)
        .map(|a| a.to_string_lossy())
        .take_while(|a| a != "--")
        .any(|a| {
            flags.iter().any(|f| {
                a == *f
                    || a.starts_with(&format!("{f}="))
                    || (f.len() == 2 && a.starts_with(f) && !a.starts_with("--"))
            })
        })
}

/// The config file named on the command line (`--config FILE`,
/// `--config=FILE`) or by `CLARION_CONFIG`.
fn config_path(args: &[OsString]) -> Option<PathBuf> {
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == "--" {
            break;
        }
        if s == "--config" {
            return it.next().map(PathBuf::from);
        }
        if let Some(v) = s.strip_prefix("--config=") {
            return Some(PathBuf::from(v));
        }
    }
    std::env::var_os("CLARION_CONFIG").map(PathBuf::from)
}

/// `cmd` with the settings of the config file the arguments name as
/// defaults; an error says what is wrong with the file.
pub fn with_config(mut cmd: Command, args: &[OsString]) -> Result<Command, String> {
    let Some(path) = config_path(args) else {
        return Ok(cmd);
    };
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("cannot read config {}: {e}", path.display()))?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| format!("config {}: {e}", path.display()))?;
    for (section, settings) in table {
        if !COMMANDS.contains(&section.as_str()) {
            return Err(format!(
                "config {}: unknown table [{section}]; the tables are [{}]",
                path.display(),
                COMMANDS.join("], [")
            ));
        }
        let toml::Value::Table(settings) = settings else {
            return Err(format!(
                "config {}: `{section}` must be a table ([{section}])",
                path.display()
            ));
        };
        let sub = cmd
            .find_subcommand(&section)
            .cloned()
            .ok_or_else(|| format!("no command {section}"))?;
        let mut defaults = Vec::new();
        for (key, value) in settings {
            let (id, values) = setting(&path, &sub, &section, &key, &value)?;
            if INPUTS
                .iter()
                .any(|(flags, input)| *input == key && given(args, flags))
            {
                continue;
            }
            defaults.push((id, values));
        }
        cmd = with_defaults(cmd, &sub, &section, defaults);
    }
    Ok(cmd)
}

/// `section`'s command (`sub` as it stands) with `defaults` from the file,
/// and the flags they stand for no longer required.
fn with_defaults(
    cmd: Command,
    sub: &Command,
    section: &str,
    defaults: Vec<(clap::Id, Vec<String>)>,
) -> Command {
    // A required flag, or one of two required inputs, set in the file
    // need not be given: clap counts only flags given as present.
    let groups: Vec<clap::Id> = sub
        .get_groups()
        .filter(|g| g.get_args().any(|a| defaults.iter().any(|(id, _)| id == a)))
        .map(|g| g.get_id().clone())
        .collect();
    let input = defaults.iter().any(|(id, _)| id == "pcap" || id == "interface");
    // Flags required unless another is present, that other set in the file.
    let satisfied: Vec<&str> = UNLESS
        .iter()
        .filter(|(_, any)| defaults.iter().any(|(id, _)| any.contains(&id.as_str())))
        .map(|(arg, _)| *arg)
        .collect();
    let unrequire = |a: clap::Arg| a.required_unless_present(clap::builder::Resettable::<clap::Id>::Reset);
    cmd.mut_subcommand(section, |mut s| {
        for (id, values) in defaults {
            // `Reset` clears `required_unless_present_any` too (one list in clap).
            s = s.mut_arg(id, |a| unrequire(a.default_values(values).required(false)));
        }
        for g in groups {
            s = s.mut_group(g, |g| g.required(false));
        }
        for arg in satisfied {
            if s.get_arguments().any(|a| a.get_id() == arg) {
                s = s.mut_arg(arg, unrequire);
            }
        }
        if input {
            s = s.mut_arg("pcap", unrequire);
        }
        s
    })
}

/// One setting as the arg it sets and its default values, checked as the flag would check them.
fn setting(
    path: &Path,
    sub: &Command,
    section: &str,
    key: &str,
    value: &toml::Value,
) -> Result<(clap::Id, Vec<String>), String> {
    let at = || format!("config {}: [{section}] {key}", path.display());
    let arg = sub
        .get_arguments()
        .find(|a| a.get_long() == Some(key) && key != "config" && key != "help")
        .ok_or_else(|| format!("{}: `clarion {section}` has no flag --{key}", at()))?;
    let many = arg.get_num_args().is_some_and(|n| n.max_values() > 1)
        || matches!(arg.get_action(), clap::ArgAction::Append);
    let values: Vec<String> = match value {
        toml::Value::Array(items) if many => items.iter().map(scalar).collect::<Option<_>>(),
        toml::Value::Array(_) => None,
        v => scalar(v).map(|s| vec![s]),
    }
    .ok_or_else(|| {
        format!(
            "{}: give a string, number or boolean{}",
            at(),
            if many { ", or an array of them" } else { "" }
        )
    })?;
    Ok((arg.get_id().clone(), values))
}

fn scalar(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cli;
    use clap::{CommandFactory, FromArgMatches};

    fn parse(config: &str, args: &[&str]) -> Result<Cli, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join("clarion.toml");
        std::fs::write(&path, config).map_err(|e| e.to_string())?;
        let mut argv: Vec<OsString> = vec!["clarion".into(), "--config".into(), path.clone().into()];
        argv.extend(args.iter().map(OsString::from));
        let cmd = with_config(Cli::command(), &argv)?;
        let m = cmd.try_get_matches_from(&argv).map_err(|e| e.to_string())?;
        Cli::from_arg_matches(&m).map_err(|e| e.to_string())
    }

    fn run_args(cli: Cli) -> crate::args::RunArgs {
        match cli.command {
            crate::Command::Run(a) => a,
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn settings_are_defaults_that_flags_override() {
        let config =
            "[run]\nevents = \"examples/demo.clarion\"\nworkers = 2\nformat = \"json\"\nquiet = true\n";
        let a = run_args(parse(config, &["run", "--pcap", "x.pcap"]).expect("parses"));
        assert_eq!(a.events, Some(PathBuf::from("examples/demo.clarion")));
        assert_eq!(
            (a.workers, a.format, a.quiet),
            (2, crate::args::Format::Json, true)
        );
        let a = run_args(parse(config, &["run", "--pcap", "x.pcap", "--workers", "3"]).expect("parses"));
        assert_eq!(a.workers, 3, "the flag wins");
    }

    #[test]
    fn records_from_the_file_make_events_optional() {
        let config = "[run]\nrecords = [\"flows.jsonl\", \"ipfix+udp://127.0.0.1:4739\"]\n";
        let a = run_args(parse(config, &["run", "--pcap", "x.pcap"]).expect("parses"));
        assert_eq!(a.events, None);
        assert_eq!(a.export.records, ["flows.jsonl", "ipfix+udp://127.0.0.1:4739"]);
        let e = parse("", &["run", "--pcap", "x.pcap"]).expect_err("neither events nor records");
        assert!(e.contains("--events"), "{e}");
    }

    #[test]
    fn an_input_on_the_command_line_replaces_the_file_s() {
        let config = "[run]\nevents = \"e.clarion\"\ninterface = [\"eth0\", \"eth1\"]\n";
        let a = run_args(parse(config, &["run"]).expect("parses"));
        assert_eq!(a.interface, ["eth0", "eth1"]);
        let a = run_args(parse(config, &["run", "--pcap", "x.pcap"]).expect("parses"));
        assert!(a.interface.is_empty(), "{:?}", a.interface);
        assert_eq!(a.pcap.len(), 1);
    }

    #[test]
    fn mistakes_name_the_file_table_and_key() {
        let e = parse("[run]\nworkerz = 2\n", &["run"]).expect_err("unknown key");
        assert!(
            e.contains("[run] workerz") && e.contains("no flag --workerz"),
            "{e}"
        );
        let e = parse("[rnu]\n", &["run"]).expect_err("unknown table");
        assert!(e.contains("unknown table [rnu]"), "{e}");
        let e = parse("[run]\nworkers = 0\n", &["run", "--pcap", "x.pcap"]).expect_err("bad value");
        assert!(e.contains("--workers") && e.contains("'0'"), "{e}");
        let e = parse("[run]\nformat = [\"json\"]\n", &["run"]).expect_err("not an array");
        assert!(e.contains("[run] format"), "{e}");
        let e = parse("[run\n", &["run"]).expect_err("not TOML");
        assert!(e.contains("clarion.toml"), "{e}");
    }
}
