//! The `clarion` binary: argument parsing and dispatch only. Each command
//! lives in its own module; errors become one `clarion:`-prefixed message
//! and an exit status (0 ok, 1 runtime failure, 2 bad usage or bad events).

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
mod live;
mod local_events;
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

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

use args::{Cli, Command};
pub use clarion_cmdline::Failure;

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
        Command::Completions(a) => completions::completions(&a),
        Command::Man(a) => manpages::man(&a),
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
