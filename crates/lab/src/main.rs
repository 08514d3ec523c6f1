//! `clarion-lab`: Clarion's research harness, kept out of the product
//! binary (`clarion`, crate `clarion-cli`). It reproduces and extends the
//! evaluation of Trumpet (SIGCOMM'16) on this implementation:
//!
//! - `gen`: the benchmark workload (Trumpet's evaluation traffic and its
//!   synthesized triggers) as a pcap file and an events file;
//! - `bench`: the monitor on one pinned core over that workload held in
//!   memory, checked against the reference evaluator (`--ablation` measures
//!   what each optimization gives); with `--pcap`, `clarion run`'s file
//!   path on a real capture in memory against its read and parse floors;
//! - `dos`: the DoS filter's cost model profiled on this machine, against
//!   the paper's two attacks measured;
//! - `feasibility`: the feasibility region (Trumpet's Figure 13), the
//!   highest rate with no late sweep over a grid of workloads;
//! - `classify`: Trident's fast paths for export policies, USS + uniflows
//!   against OVS's TSS + megaflows (Trident's Table 2 and Fig. 6);
//! - `export-cost`: what export policies cost the host at a paced rate
//!   (headers, pcapng, VXLAN, a fraction), against the monitor alone;
//! - `overload`: MONA's overload experiments (sine or constant load into a
//!   bounded ring, the monitor static or adapting every window), in a
//!   deterministic simulated queue, against the reference evaluator;
//! - `profile-states`: MONA's offline profiling of degraded mode's
//!   per-state costs (lookup, update per word, TCP, sweep pair, insertion);
//! - `fleet`: the network-wide event manager under thousands of simulated
//!   agents over a real NATS server: reports decided per second, decision
//!   latency, the manager's CPU and memory, decisions against a reference;
//! - `thrash`: a co-runner that thrashes the shared cache (MONA's
//!   contention experiment), to run beside the monitor.
//!
//! Argument parsing and dispatch only; each command lives in its own module.
//! Errors become one `clarion-lab:`-prefixed message and an exit status
//! (0 ok, 1 runtime failure or a missed event, 2 bad usage), as in `clarion`.

mod args;
mod bench;
mod classify;
mod dos;
mod export_cost;
mod feasibility;
mod fleet;
mod gen;
mod overload;
mod profile_states;
mod real;
mod thrash;

use std::process::ExitCode;

use clap::Parser;
pub(crate) use clarion_cmdline::{thousands, Failure};

use args::{Cli, Command};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return clarion_cmdline::parse_exit(&e),
    };
    let result = match cli.command {
        Command::Gen(a) => gen::gen(&a),
        Command::Bench(a) => bench::bench(&a),
        Command::Feasibility(a) => feasibility::feasibility(&a),
        Command::Dos(a) => dos::dos(&a),
        Command::Classify(a) => classify::classify(&a),
        Command::ExportCost(a) => export_cost::export_cost(&a),
        Command::Thrash(a) => thrash::thrash(&a),
        Command::Overload(a) => overload::overload(&a),
        Command::ProfileStates(a) => profile_states::profile_states(&a),
        Command::Fleet(a) => fleet::fleet(&a),
        Command::FleetManager(a) => fleet::fleet_manager(&a),
    };
    clarion_cmdline::exit("clarion-lab", result)
}
