//! `clarion-lab gen`: the benchmark workload as a capture file, and optionally
//! the synthesized events that go with it. The workload's flags are shared
//! with `clarion-lab bench` ([`WorkloadArgs`]).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use clarion_workload::{FlowSizes, TriggerSpec, WorkloadError, WorkloadSpec, WorkloadStats};

use crate::args::parse_duration;
use crate::thousands;
use crate::Failure;

/// The traffic and the triggers, as in Trumpet's evaluation (SIGCOMM'16 §7.2).
#[derive(Args, Debug, Clone)]
pub struct WorkloadArgs {
    /// Nominal packet rate in packets/s: sets the timestamps, so how many packets an epoch holds.
    #[arg(
        long,
        default_value_t = 14_880_000,
        value_name = "PPS",
        help_heading = "Workload"
    )]
    pub rate: u64,

    /// Bytes per frame as captured (no FCS).
    #[arg(long, default_value_t = 64, value_name = "BYTES", help_heading = "Workload")]
    pub size: usize,

    /// Average number of active flows (up to millions: 1000000 is a data
    /// center's server-rack load).
    #[arg(long, default_value_t = 300, value_name = "N", help_heading = "Workload")]
    pub flows: u32,

    /// New flows per second (exponential inter-arrival times); flows live flows/arrival s on average.
    #[arg(long, default_value_t = 1000.0, value_name = "N", help_heading = "Workload")]
    pub arrival: f64,

    /// How packets are shared among the active flows. 'uniform': every
    /// burst picks an active flow uniformly (Trumpet's workload).
    /// 'pareto:ALPHA': each flow draws a weight from a Pareto distribution of
    /// shape ALPHA when it starts and bursts pick flows in proportion, so a
    /// few elephants carry most packets and most flows are mice; the top
    /// tenth of long-lived flows carry about 0.1^(1-1/ALPHA) of the packets
    /// (pareto:1.2, data-center-like: ~68%; pareto:2: ~32%).
    #[arg(
        long,
        default_value = "uniform",
        value_name = "uniform|pareto:ALPHA",
        help_heading = "Workload"
    )]
    pub flow_sizes: FlowSizes,

    /// Consecutive packets of one flow (1: every packet changes flow).
    #[arg(long, default_value_t = 1, value_name = "N", help_heading = "Workload")]
    pub burst: u32,

    /// Share of packets sent by attack flows (0-1): new flows of --dos-packets minimal packets each.
    #[arg(long, default_value_t = 0.0, value_name = "F", help_heading = "Workload")]
    pub dos_fraction: f64,

    /// Packets per attack flow.
    #[arg(long, default_value_t = 1, value_name = "N", help_heading = "Workload")]
    pub dos_packets: u32,

    /// Share of TCP segments that are retransmissions (what `is_lost` counts).
    #[arg(long, default_value_t = 0.01, value_name = "F", help_heading = "Workload")]
    pub retransmit_fraction: f64,

    /// Seed: the same seed and flags give the same bytes.
    #[arg(long, default_value_t = 1, value_name = "S", help_heading = "Workload")]
    pub seed: u64,

    /// Triggers installed.
    #[arg(long, default_value_t = 4096, value_name = "N", help_heading = "Triggers")]
    pub triggers: u32,

    /// Triggers every packet matches.
    #[arg(long, default_value_t = 8, value_name = "K", help_heading = "Triggers")]
    pub per_packet: u32,

    /// Distinct filter patterns (tuple-space tables probed for each new flow).
    #[arg(long, default_value_t = 32, value_name = "P", help_heading = "Triggers")]
    pub patterns: u32,

    /// Every trigger's interval (e.g. 10ms, 500us).
    #[arg(long, default_value = "10ms", value_parser = parse_duration, value_name = "DURATION", help_heading = "Triggers")]
    pub interval: u64,
}

impl WorkloadArgs {
    /// The two specs, checked; a bad value is a usage error naming the flag's concept.
    pub fn specs(&self, packets: u64) -> Result<(WorkloadSpec, TriggerSpec), Failure> {
        let triggers = TriggerSpec {
            triggers: self.triggers,
            per_packet: self.per_packet,
            patterns: self.patterns,
            interval_ns: self.interval,
        };
        let traffic = WorkloadSpec {
            packets,
            rate_pps: self.rate,
            packet_size: self.size,
            active_flows: self.flows,
            arrival_rate: self.arrival,
            flow_sizes: self.flow_sizes,
            burst: self.burst,
            dos_fraction: self.dos_fraction,
            dos_packets: self.dos_packets,
            retransmit_fraction: self.retransmit_fraction,
            groups: triggers.traffic_groups(),
            seed: self.seed,
            ..WorkloadSpec::default()
        };
        triggers.validate().map_err(usage)?;
        traffic.validate().map_err(usage)?;
        Ok((traffic, triggers))
    }
}

pub fn usage(e: WorkloadError) -> Failure {
    Failure::Usage(format!("clarion-lab: {e}"))
}

#[derive(Args, Debug)]
pub struct GenArgs {
    /// Capture file to write (nanosecond pcap, Ethernet; '-' writes standard output).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,

    /// Packets to generate.
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    pub packets: u64,

    /// Also write the synthesized events (the event language) to FILE.
    #[arg(long, value_name = "FILE")]
    pub events_out: Option<PathBuf>,

    #[command(flatten)]
    pub workload: WorkloadArgs,

    /// Do not print the summary.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

fn create(path: &PathBuf) -> Result<Box<dyn Write>, Failure> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(BufWriter::new(std::io::stdout().lock())));
    }
    let f = File::create(path)
        .with_context(|| format!("cannot create {}", path.display()))
        .map_err(Failure::Runtime)?;
    Ok(Box::new(BufWriter::with_capacity(1 << 20, f)))
}

pub fn gen(a: &GenArgs) -> Result<ExitCode, Failure> {
    let (traffic, triggers) = a.workload.specs(a.packets)?;
    if let Some(path) = &a.events_out {
        let set = triggers.synthesize(&traffic).map_err(usage)?;
        let mut out = create(path)?;
        out.write_all(set.text.as_bytes())
            .and_then(|()| out.flush())
            .with_context(|| format!("cannot write {}", path.display()))
            .map_err(Failure::Runtime)?;
    }
    let out = create(&a.out)?;
    let stats = match traffic.write_pcap(out) {
        Ok(s) => s,
        Err(WorkloadError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            return Err(Failure::BrokenPipe)
        }
        Err(e) => {
            return Err(Failure::Runtime(
                anyhow::Error::new(e).context(format!("cannot write {}", a.out.display())),
            ))
        }
    };
    if !a.quiet {
        eprintln!("{}", summary(a, &traffic, &stats));
    }
    Ok(ExitCode::SUCCESS)
}

fn summary(a: &GenArgs, w: &WorkloadSpec, s: &WorkloadStats) -> String {
    let mut line = format!(
        "clarion-lab: wrote {} packets ({:.1} ms at {} packets/s) to {}: {} flows ({} at the start, {} sizes), {} attack packets in {} flows",
        thousands(s.packets),
        s.duration_ns as f64 / 1e6,
        thousands(w.rate_pps),
        a.out.display(),
        thousands(s.initial_flows + s.arrivals),
        thousands(s.initial_flows),
        w.flow_sizes,
        thousands(s.dos_packets),
        thousands(s.dos_flows),
    );
    if let Some(p) = &a.events_out {
        line.push_str(&format!(
            "; {} triggers ({} per packet, {} patterns) to {}",
            thousands(u64::from(a.workload.triggers)),
            a.workload.per_packet,
            a.workload.patterns,
            p.display()
        ));
    }
    line
}
