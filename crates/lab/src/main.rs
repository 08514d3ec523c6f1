//! `clarion-lab`: Clarion's research harness, kept out of the product
//! binary (`clarion`, crate `clarion-cli`). It reproduces and extends the
//! evaluation of Trumpet (SIGCOMM'16) on this implementation:
//!
//! - `gen`: the benchmark workload (Trumpet's evaluation traffic and its
//!   synthesized triggers) as a pcap file and an events file;
//! - `bench`: the monitor on one pinned core over that workload held in
//!   memory, checked against the reference evaluator (`--ablation` measures
//!   what each optimization gives);
//! - `dos`: the DoS filter's cost model profiled on this machine, against
//!   the paper's two attacks measured;
//! - `feasibility`: the feasibility region (Trumpet's Figure 13), the
//!   highest rate with no late sweep over a grid of workloads.
//!
//! Argument parsing and dispatch only; each command lives in its own module.
//! Errors become one `clarion-lab:`-prefixed message and an exit status
//! (0 ok, 1 runtime failure or a missed event, 2 bad usage), as in `clarion`.

mod args;
mod bench;
mod dos;
mod feasibility;
mod gen;

use std::process::ExitCode;

use clap::Parser;
pub(crate) use clarion_cmdline::thousands;

use args::{Cli, Command};

/// How a command failed, which decides the exit status.
#[derive(Debug)]
pub enum Failure {
    /// Bad usage: exit 2. The message is already rendered.
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
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // clap prints help/version to stdout with exit 0 and usage errors with exit 2.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let result = match cli.command {
        Command::Gen(a) => gen::gen(&a),
        Command::Bench(a) => bench::bench(&a),
        Command::Feasibility(a) => feasibility::feasibility(&a),
        Command::Dos(a) => dos::dos(&a),
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
            eprintln!("clarion-lab: {e:#}");
            ExitCode::from(1)
        }
    }
}
