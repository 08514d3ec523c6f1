//! The `clarion` binary: argument parsing and dispatch only. Each command
//! lives in its own module; errors become one `clarion:`-prefixed message
//! and an exit status (0 ok, 1 runtime failure, 2 bad usage or bad events).

mod agent;
mod args;
mod bus;
mod check;
mod config;
mod events;
mod live;
mod local_events;
mod manager;
mod metrics_server;
mod network;
mod run;
mod split;
mod summary;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

use args::{Cli, Command};

/// How a command failed, which decides the exit status.
#[derive(Debug)]
pub enum Failure {
    /// Bad usage or an invalid events file: exit 2. The message is already rendered.
    Usage(String),
    /// Runtime failure: exit 1.
    Runtime(anyhow::Error),
    /// Standard output was closed by the reader (`| head`): exit 0 quietly.
    BrokenPipe,
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Runtime(e)
    }
}

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
        Err(e) => {
            // clap prints help/version to stdout with exit 0 and usage errors with exit 2.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let result = match cli.command {
        Command::Run(a) => run::run(&a),
        Command::Check(a) => check::check(&a),
        Command::Agent(a) => agent::agent(&a),
        Command::Manager(a) => manager::manager(&a),
        Command::Split(a) => split::split(&a),
        Command::Events(a) => events::events(&a),
    };
    match result {
        Ok(code) => code,
        Err(Failure::BrokenPipe) => ExitCode::SUCCESS,
        Err(Failure::Usage(msg)) => {
            eprint!("{msg}");
            if !msg.ends_with('\n') {
                eprintln!();
            }
            ExitCode::from(2)
        }
        Err(Failure::Runtime(e)) => {
            eprintln!("clarion: {e:#}");
            ExitCode::from(1)
        }
    }
}
