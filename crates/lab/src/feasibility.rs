//! `clarion-lab feasibility`: the feasibility region of Trumpet's Figure 13
//! (SIGCOMM'16 §7.2): for each number of triggers per flow K, time interval
//! I, number of active flows and flow arrival rate, the highest packet rate
//! at which no sweep is late on one core. The paper's grid varies the first
//! three at 1,000 new flows/s; `--flows` up to millions and `--arrivals` up
//! to 100,000 new flows/s (and heavy-tailed `--flow-sizes`) extend it
//! towards data-center traffic.
//!
//! For each point of the grid:
//!
//! 1. **Measure.** Generate the benchmark workload for the point (4,096
//!    triggers by default, K per packet, 32 patterns, interval I) and time it
//!    with `clarion-lab bench`'s loop ([`crate::bench::measure_point`]) on one
//!    pinned core: `p`, the ns per packet (parse + match-and-scatter, sweeps
//!    excluded), and `S`, the p99 of the sweep time over the epochs after a
//!    warm-up of [`WARMUP_EPOCHS`] (the cold start: every flow new, memory
//!    untouched; those epochs run up to 1.8x longer). `p` is the
//!    mean over the batches, not their median: the per-batch cost has a heavy
//!    tail (new flows probe every pattern; p99 is several times the median),
//!    an epoch pays for all of its packets, and a model built on the median
//!    (~30% lower) fails its own verification even three steps down. The
//!    median goes to standard error beside it. The first run is at
//!    14.88 Mpps; since `p` depends on the rate (new flows and per-epoch work
//!    per packet grow as the rate falls), the run is repeated at the model's
//!    rate R (step 2) while R is more than 10% away from the rate measured
//!    at, up to [`MEASURE_PASSES`] runs in all, so that `p` and `S` are
//!    measured at (about) the rate they predict. If the sweep alone
//!    overran the epoch at 14.88 Mpps (no rate is feasible by the model),
//!    the next run is at a tenth of that instead: the sweep walks the flows
//!    that had packets in the epoch, so with many flows it shrinks with the
//!    rate. A run holds `--packets` packets, or more so as to span
//!    [`MEASURE_EPOCHS`] epochs. When the warm-up would not show the
//!    monitor each flow active at the start [`PRIME_PER_FLOW`] times on
//!    average (hundreds of thousands of flows), that many packets per flow
//!    go through it first, untimed and uncounted: a monitor that has run a
//!    while knows its active flows, and without them nearly every packet of
//!    a slow run at a million flows would be a new flow's first.
//! 2. **Model.** An epoch of length I at R packets/s costs R·I·p of packet
//!    processing plus S of sweep, so the highest rate with no late sweep is
//!    the largest R with R·I·p + S ≤ I: R = (1 − S/I) / p (0 if S ≥ I).
//! 3. **Verify.** Regenerate the workload at 0.95·R (enough packets for at
//!    least [`VERIFY_EPOCHS`] epochs after the warm-up) and run it again: it
//!    passes if no epoch after the warm-up was over budget (packets plus
//!    sweep longer than the epoch). If not, step
//!    the rate down by 10% and rerun, at most [`MAX_STEPS`] times. The CSV's
//!    `verified` column says `yes@F` (passed at F·R), `no`, or `n/a` (the
//!    sweep alone is longer than the epoch: no rate is feasible).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{anyhow, Context};
use clap::Args;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use clarion_workload::{FlowSizes, TriggerSpec, WorkloadSpec};

use crate::bench::{measure_point, PointRun};
use crate::gen::usage;
use crate::{thousands, Failure};

/// Epochs at the start of a run left out of its figures (cold start).
const WARMUP_EPOCHS: usize = 2;
/// Epochs a measuring run spans at least, after the warm-up.
const MEASURE_EPOCHS: u64 = 10;
/// Epochs the verifying run spans at least, after the warm-up.
const VERIFY_EPOCHS: u64 = 6;
/// Nominal rate of the first measuring run (10 GbE, 64 B frames).
const MEASURE_RATE: u64 = 14_880_000;
/// Measure again at the model's rate when it is this far (relative) from the measuring rate.
const REMEASURE_OFF: f64 = 0.10;
/// Rate of the measuring run that follows one whose sweep alone overran the epoch.
const LOW_MEASURE_RATE: u64 = MEASURE_RATE / 10;
/// Times each flow active at the start is seen, on average, in the
/// packets that prime the monitor before a run's clock starts.
const PRIME_PER_FLOW: u64 = 3;
/// Measuring runs per point at most.
const MEASURE_PASSES: u32 = 3;
/// Fraction of the model's rate that is verified first.
const VERIFY_FACTOR: f64 = 0.95;
/// Steps of −10% tried after a failed verification.
const MAX_STEPS: u32 = 3;

/// The CSV's columns: `arrivals_per_s` came last, after the paper's axes
/// and results, so that readers of the older seven columns still work.
pub const CSV_HEADER: &str =
    "per_flow,interval_ms,flows,ns_per_packet,sweep_p99_us,max_rate_mpps,verified,arrivals_per_s";

#[derive(Args, Debug)]
pub struct FeasibilityArgs {
    /// Triggers each packet (each flow) matches, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [4u32, 8, 12, 16], value_name = "K,..")]
    pub per_flow: Vec<u32>,

    /// Trigger intervals (= epochs) in milliseconds, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1u64, 5, 10, 20], value_name = "MS,..")]
    pub intervals: Vec<u64>,

    /// Average numbers of active flows, comma-separated (up to millions,
    /// e.g. 300,10000,1000000).
    #[arg(long, value_delimiter = ',', default_values_t = [300u32, 600, 1200], value_name = "N,..")]
    pub flows: Vec<u32>,

    /// New flows per second, comma-separated (e.g. 1000,10000,100000):
    /// each flows/arrival pair is one panel of the plot.
    #[arg(long, value_delimiter = ',', default_values_t = [1000.0], value_name = "N,..")]
    pub arrivals: Vec<f64>,

    /// How packets are shared among flows at every point (as `clarion-lab
    /// bench --flow-sizes`): uniform, or pareto:ALPHA (heavy-tailed).
    #[arg(long, default_value = "uniform", value_name = "uniform|pareto:ALPHA")]
    pub flow_sizes: FlowSizes,

    /// Packets per measuring run (the verifying run may use more, to span enough epochs).
    #[arg(long, default_value_t = 1_500_000, value_name = "N")]
    pub packets: u64,

    /// Triggers installed at every point.
    #[arg(long, default_value_t = 4096, value_name = "N")]
    pub triggers: u32,

    /// Scale the triggers with K as the paper does: 512 per trigger per flow
    /// (8 per flow: 4,096; 16: 8,192), instead of --triggers at every point.
    #[arg(long)]
    pub scale_triggers: bool,

    /// Distinct filter patterns.
    #[arg(long, default_value_t = 32, value_name = "P")]
    pub patterns: u32,

    /// Packets per timed batch (as `clarion-lab bench --batch`).
    #[arg(long, default_value_t = clarion_engine::BATCH, value_name = "N")]
    pub batch: usize,

    /// Core to pin the measured loop to (default: the last core this process may use).
    #[arg(long, value_name = "C")]
    pub core: Option<usize>,

    /// Workload seed.
    #[arg(long, default_value_t = 1, value_name = "S")]
    pub seed: u64,

    /// Write the CSV to FILE (default: standard output).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,

    /// Draw the region as a PNG plot (like the paper's Figure 13) to FILE.
    #[arg(long, value_name = "FILE")]
    pub png: Option<PathBuf>,

    /// A tiny grid to check the command works: K 4,8; 5 ms; 300 flows; 100,000
    /// packets (replaces --per-flow, --intervals, --flows and --packets).
    #[arg(long)]
    pub quick: bool,

    /// Measure nothing: read the points from FILE, a CSV this command
    /// wrote, and draw them (--png) or write them again (--csv).
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = [
            "quick", "per_flow", "intervals", "flows", "arrivals", "flow_sizes", "packets",
            "triggers", "scale_triggers", "patterns", "batch", "core", "seed",
        ]
    )]
    pub from_csv: Option<PathBuf>,
}

/// One point of the grid, measured and verified.
#[derive(Clone, Debug)]
pub struct Point {
    pub per_flow: u32,
    pub interval_ms: u64,
    pub flows: u32,
    /// New flows per second.
    pub arrivals: f64,
    /// Mean over batches (the model's p).
    pub ns_per_packet: f64,
    /// Median over batches (for comparison; not in the CSV).
    pub ns_per_packet_median: f64,
    pub sweep_p99_us: f64,
    /// The model's highest rate, packets/s.
    pub max_rate_pps: f64,
    /// The fraction of `max_rate_pps` at which the verifying run passed.
    pub verified: Option<f64>,
}

impl Point {
    fn csv_row(&self) -> String {
        let verified = match self.verified {
            Some(f) => format!("yes@{f:.2}"),
            None if self.max_rate_pps < 1.0 => "n/a".into(),
            None => "no".into(),
        };
        format!(
            "{},{},{},{:.1},{:.1},{:.2},{verified},{}",
            self.per_flow,
            self.interval_ms,
            self.flows,
            self.ns_per_packet,
            self.sweep_p99_us,
            self.max_rate_pps / 1e6,
            self.arrivals
        )
    }
}

/// The highest rate R (packets/s) with R·I·p + S ≤ I, for p ns per packet, S ns of sweep, I ns of epoch.
pub fn max_rate(ns_per_packet: f64, sweep_ns: f64, interval_ns: f64) -> f64 {
    if ns_per_packet <= 0.0 || sweep_ns >= interval_ns {
        return 0.0;
    }
    (1.0 - sweep_ns / interval_ns) / (ns_per_packet * 1e-9)
}

/// The grid, `--quick` applied and checked.
struct Grid {
    per_flow: Vec<u32>,
    intervals: Vec<u64>,
    flows: Vec<u32>,
    arrivals: Vec<f64>,
    packets: u64,
}

impl Grid {
    fn of(a: &FeasibilityArgs) -> Result<Grid, Failure> {
        let grid = if a.quick {
            Grid {
                per_flow: vec![4, 8],
                intervals: vec![5],
                flows: vec![300],
                arrivals: vec![1000.0],
                packets: 100_000,
            }
        } else {
            Grid {
                per_flow: a.per_flow.clone(),
                intervals: a.intervals.clone(),
                flows: a.flows.clone(),
                arrivals: a.arrivals.clone(),
                packets: a.packets,
            }
        };
        if grid.per_flow.is_empty()
            || grid.intervals.is_empty()
            || grid.flows.is_empty()
            || grid.arrivals.is_empty()
        {
            return Err(Failure::Usage("clarion-lab: the grid is empty".into()));
        }
        if grid.intervals.contains(&0) {
            return Err(Failure::Usage(
                "clarion-lab: --intervals must be at least 1 ms".into(),
            ));
        }
        if grid.packets == 0 {
            return Err(Failure::Usage("clarion-lab: --packets must be at least 1".into()));
        }
        Ok(grid)
    }

    fn len(&self) -> usize {
        self.per_flow.len() * self.intervals.len() * self.flows.len() * self.arrivals.len()
    }
}

pub fn feasibility(a: &FeasibilityArgs) -> Result<ExitCode, Failure> {
    if let Some(from) = &a.from_csv {
        let text = std::fs::read_to_string(from)
            .with_context(|| format!("cannot read {}", from.display()))
            .map_err(Failure::Runtime)?;
        let points =
            read_csv(&text).map_err(|e| Failure::Usage(format!("clarion-lab: {}: {e}", from.display())))?;
        if a.csv.is_some() {
            write_csv(a.csv.as_deref(), &points)?;
        }
        if let Some(path) = &a.png {
            plot(&points, path).map_err(Failure::Runtime)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let grid = Grid::of(a)?;
    let started = Instant::now();
    let points = measure_grid(a, &grid, started)?;
    write_csv(a.csv.as_deref(), &points)?;
    if let Some(path) = &a.png {
        plot(&points, path).map_err(Failure::Runtime)?;
    }
    let failed = points
        .iter()
        .filter(|p| p.verified.is_none() && p.max_rate_pps >= 1.0)
        .count();
    eprintln!(
        "clarion-lab feasibility: {} points in {:.0} s; {failed} not verified",
        grid.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

/// Every point of the grid, flows outermost, then arrivals, and K
/// innermost, each with its progress line.
fn measure_grid(a: &FeasibilityArgs, grid: &Grid, started: Instant) -> Result<Vec<Point>, Failure> {
    let total = grid.len();
    let mut points = Vec::with_capacity(total);
    for &flows in &grid.flows {
        for &arrivals in &grid.arrivals {
            for &interval_ms in &grid.intervals {
                for &k in &grid.per_flow {
                    let at = At {
                        a,
                        k,
                        interval_ms,
                        flows,
                        arrivals,
                        packets: grid.packets,
                    };
                    let p = at.point()?;
                    print_progress(points.len() + 1, total, started, &p);
                    points.push(p);
                }
            }
        }
    }
    Ok(points)
}

/// The progress line of the `n`th point of `total`.
fn print_progress(n: usize, total: usize, started: Instant, p: &Point) {
    eprintln!(
        "[{n}/{total} {:.0}s] K={} interval={}ms flows={} new/s={}: {:.1} ns/packet (median {:.1}), sweep p99 {:.1} us -> max {:.2} Mpps; verified: {}",
        started.elapsed().as_secs_f64(),
        p.per_flow,
        p.interval_ms,
        p.flows,
        p.arrivals,
        p.ns_per_packet,
        p.ns_per_packet_median,
        p.sweep_p99_us,
        p.max_rate_pps / 1e6,
        match p.verified {
            _ if p.max_rate_pps < 1.0 => "infeasible (the sweep is longer than the epoch)".into(),
            Some(v) => format!("no epoch over budget at {:.2} Mpps ({v:.2} R)", v * p.max_rate_pps / 1e6),
            None => "FAILED".into(),
        }
    );
}

/// The points of a CSV [`write_csv`] wrote (a file of the seven older
/// columns too: its arrival rate is the paper's, 1,000 new flows/s).
/// Only what the plot reads is kept; the median ns per packet, not in the
/// CSV, is taken as the mean.
fn read_csv(text: &str) -> Result<Vec<Point>, String> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if CSV_HEADER.starts_with(h.trim()) && h.trim().starts_with("per_flow,") => {}
        _ => {
            return Err(format!(
                "not a feasibility CSV (its first line must be `{CSV_HEADER}`)"
            ))
        }
    }
    let mut points = Vec::new();
    for (n, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let at = |what: &str| format!("line {}: {what}", n + 1);
        let f: Vec<&str> = line.trim().split(',').collect();
        if f.len() < 7 {
            return Err(at("fewer than 7 columns"));
        }
        let num = |i: usize, name: &str| -> Result<f64, String> {
            f[i].parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| at(&format!("{name} `{}` is not a number", f[i])))
        };
        let verified = match f[6] {
            "no" | "n/a" => None,
            v => Some(
                v.strip_prefix("yes@")
                    .and_then(|x| x.parse::<f64>().ok())
                    .filter(|x| (0.0..=1.0).contains(x))
                    .ok_or_else(|| at(&format!("verified `{v}` is not yes@F, no or n/a")))?,
            ),
        };
        let ns = num(3, "ns_per_packet")?;
        points.push(Point {
            per_flow: num(0, "per_flow")? as u32,
            interval_ms: num(1, "interval_ms")? as u64,
            flows: num(2, "flows")? as u32,
            arrivals: if f.len() > 7 {
                num(7, "arrivals_per_s")?
            } else {
                1000.0
            },
            ns_per_packet: ns,
            ns_per_packet_median: ns,
            sweep_p99_us: num(4, "sweep_p99_us")?,
            max_rate_pps: num(5, "max_rate_mpps")? * 1e6,
            verified,
        });
    }
    if points.is_empty() {
        return Err("no points".into());
    }
    Ok(points)
}

/// The CSV of the points to `path`, or standard output.
fn write_csv(path: Option<&Path>, points: &[Point]) -> Result<(), Failure> {
    let mut csv = String::from(CSV_HEADER);
    csv.push('\n');
    for p in points {
        csv.push_str(&p.csv_row());
        csv.push('\n');
    }
    match path {
        Some(path) => std::fs::write(path, &csv)
            .with_context(|| format!("cannot write {}", path.display()))
            .map_err(Failure::Runtime)?,
        None => print!("{csv}"),
    }
    Ok(())
}

/// Packets that prime the monitor before a run of `t` (see the module
/// documentation): none when the warm-up epochs already show it each flow
/// active at the start [`PRIME_PER_FLOW`] times on average.
fn prime_packets(t: &WorkloadSpec, interval_ns: u64) -> u64 {
    let want = PRIME_PER_FLOW * u64::from(t.active_flows);
    let warmup = packets_for(0, t.rate_pps, interval_ns, WARMUP_EPOCHS as u64);
    if want <= warmup {
        0
    } else {
        want
    }
}

fn run(a: &FeasibilityArgs, t: &WorkloadSpec, g: &TriggerSpec, prime: u64) -> Result<PointRun, Failure> {
    let r = measure_point(t, g, a.batch, a.core, WARMUP_EPOCHS, prime as usize)?;
    if let Err(why) = &r.pinned {
        eprintln!("clarion-lab: warning: the measured loop is not pinned: {why}");
    }
    Ok(r)
}

/// At least `packets`, and enough to span `epochs` epochs at `rate`.
fn packets_for(packets: u64, rate: u64, interval_ns: u64, epochs: u64) -> u64 {
    let per_epoch = (u128::from(rate) * u128::from(interval_ns)).div_ceil(1_000_000_000) as u64;
    packets.max(per_epoch.saturating_mul(epochs))
}

/// One point of the grid, to be measured.
struct At<'a> {
    a: &'a FeasibilityArgs,
    k: u32,
    interval_ms: u64,
    flows: u32,
    arrivals: f64,
    /// Packets per measuring run at the least.
    packets: u64,
}

impl At<'_> {
    fn interval_ns(&self) -> u64 {
        self.interval_ms * 1_000_000
    }

    /// Measures, models and verifies the point (see the module documentation).
    fn point(&self) -> Result<Point, Failure> {
        let (m, r) = self.measure()?;
        let verified = if r >= 1.0 { self.verify(r)? } else { None };
        Ok(Point {
            per_flow: self.k,
            interval_ms: self.interval_ms,
            flows: self.flows,
            arrivals: self.arrivals,
            ns_per_packet: m.ns_per_packet_mean,
            ns_per_packet_median: m.ns_per_packet_median,
            sweep_p99_us: m.sweep_p99_ns as f64 / 1e3,
            max_rate_pps: r,
            verified,
        })
    }

    /// The workload and triggers of a run of `packets` packets at `rate`, checked.
    fn specs(&self, packets: u64, rate: u64) -> Result<(WorkloadSpec, TriggerSpec), Failure> {
        let a = self.a;
        let triggers = TriggerSpec {
            triggers: if a.scale_triggers {
                512 * self.k
            } else {
                a.triggers
            },
            per_packet: self.k,
            patterns: a.patterns,
            interval_ns: self.interval_ns(),
        };
        let traffic = WorkloadSpec {
            packets,
            rate_pps: rate.max(1),
            active_flows: self.flows,
            arrival_rate: self.arrivals,
            flow_sizes: a.flow_sizes,
            groups: triggers.traffic_groups(),
            seed: a.seed,
            ..WorkloadSpec::default()
        };
        triggers.validate().map_err(usage)?;
        traffic.validate().map_err(usage)?;
        Ok((traffic, triggers))
    }

    /// A run at `rate` spanning `epochs` epochs after the warm-up (and `packets` at least).
    fn run(&self, rate: u64, epochs: u64) -> Result<PointRun, Failure> {
        let n = packets_for(
            self.packets,
            rate,
            self.interval_ns(),
            epochs + WARMUP_EPOCHS as u64,
        );
        let (t, _) = self.specs(n, rate)?;
        let prime = prime_packets(&t, self.interval_ns());
        let (t, g) = self.specs(n + prime, rate)?;
        run(self.a, &t, &g, prime)
    }

    /// The measuring run and the model's rate R from it. The per-packet cost
    /// depends on the rate, so measure at the line rate first, then again at
    /// the model's rate while that is far from it.
    fn measure(&self) -> Result<(PointRun, f64), Failure> {
        let mut rate = MEASURE_RATE;
        let mut pass = 0;
        loop {
            let m = self.run(rate, MEASURE_EPOCHS)?;
            let r = max_rate(
                m.ns_per_packet_mean,
                m.sweep_p99_ns as f64,
                self.interval_ns() as f64,
            );
            pass += 1;
            if r < 1.0 && pass < MEASURE_PASSES && rate > LOW_MEASURE_RATE {
                // The sweep alone overran the epoch. It walks the flows that
                // had packets, fewer at a lower rate (many fewer with a
                // million flows): measure again at a tenth of the line rate.
                rate = LOW_MEASURE_RATE;
                continue;
            }
            let off = (r - rate as f64).abs() / rate as f64;
            if pass == MEASURE_PASSES || r < 1.0 || off <= REMEASURE_OFF {
                return Ok((m, r));
            }
            rate = r as u64;
        }
    }

    /// The fraction of R at which a run had no epoch over budget after the
    /// warm-up, stepping down from [`VERIFY_FACTOR`]; `None` if none did.
    fn verify(&self, r: f64) -> Result<Option<f64>, Failure> {
        let (k, interval_ms, flows, arrivals) = (self.k, self.interval_ms, self.flows, self.arrivals);
        let mut factor = VERIFY_FACTOR;
        for step in 0..=MAX_STEPS {
            if step > 0 {
                factor *= 0.9;
            }
            let rate = (r * factor) as u64;
            let v = self.run(rate, VERIFY_EPOCHS)?;
            if v.warmup_over_budget > 0 {
                eprintln!(
                    "  K={k} interval={interval_ms}ms flows={flows} new/s={arrivals}: {} warm-up epochs over budget at {:.2} Mpps (not counted)",
                    v.warmup_over_budget,
                    rate as f64 / 1e6
                );
            }
            if v.epochs > 0 && v.epochs_over_budget == 0 {
                return Ok(Some(factor));
            }
            let (worst, sweep) = v.epoch_max_at;
            let taken = v
                .epoch_max_preempted
                .map_or(String::new(), |p| format!(", the core taken from it {p} times"));
            eprintln!(
                "  K={k} interval={interval_ms}ms flows={flows} new/s={arrivals}: {} of {} epochs over budget ({} with the core taken by the kernel) at {:.2} Mpps (longest: epoch {} after the warm-up, {:.2} ms, its sweep {:.2} ms{taken}); stepping down",
                v.epochs_over_budget,
                v.epochs,
                v.epochs_over_budget_preempted,
                rate as f64 / 1e6,
                worst + 1,
                v.epoch_max_ns as f64 / 1e6,
                sweep as f64 / 1e6,
            );
        }
        Ok(None)
    }
}

/// Registers a TrueType font for the plot's text; false if none is found.
/// `CLARION_FONT` names one; otherwise a few usual system paths are tried.
fn load_font() -> bool {
    const PATHS: &[&str] = &[
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
        "/System/Library/Fonts/Supplemental/Arial.ttf",
        "/Library/Fonts/Arial.ttf",
        "C:\\Windows\\Fonts\\arial.ttf",
    ];
    let env = std::env::var_os("CLARION_FONT").map(PathBuf::from);
    let candidates = env.into_iter().chain(PATHS.iter().map(PathBuf::from));
    for path in candidates {
        if let Ok(bytes) = std::fs::read(&path) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return true;
            }
        }
    }
    false
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Draws one panel per flow count and arrival rate: x triggers per flow, y the highest rate
/// with no late sweep, one line per interval (the paper's Figure 13): solid
/// with markers the rate verified, faint the model's R. Writes it as a PNG.
pub fn plot(points: &[Point], path: &Path) -> anyhow::Result<()> {
    let text = load_font();
    if !text {
        eprintln!("clarion-lab: warning: no TrueType font found (set CLARION_FONT); the plot has no text");
    }
    if let Some(scale) = Scale::of(points) {
        let (w, h) = (560 * scale.intervals.len() as u32 + 20, 460u32);
        let mut buf = vec![255u8; (w * h * 3) as usize];
        draw_scale(points, &scale, text, &mut buf, (w, h))?;
        return write_png(path, &buf, (w, h));
    }
    let axes = Axes::of(points);
    let (w, h) = (420 * axes.panels.len() as u32 + 20, 460u32);
    let mut buf = vec![255u8; (w * h * 3) as usize];
    draw(points, &axes, text, &mut buf, (w, h))?;
    write_png(path, &buf, (w, h))
}

/// What the panels share: their flow counts and arrival rates, the
/// intervals (one line each), and the ranges of the axes.
struct Axes {
    /// (active flows, new flows/s) of each panel.
    panels: Vec<(u32, f64)>,
    /// More than one arrival rate: the captions say which.
    arrivals_vary: bool,
    intervals: Vec<u64>,
    kmin: f64,
    kmax: f64,
    /// Of the rate, in Mpps.
    ymax: f64,
    /// Room left and right of the triggers per flow.
    xpad: f64,
}

impl Axes {
    fn of(points: &[Point]) -> Axes {
        let mut panels: Vec<(u32, f64)> = points.iter().map(|p| (p.flows, p.arrivals)).collect();
        panels.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        panels.dedup();
        let arrivals_vary = panels.iter().any(|p| p.1 != panels[0].1);
        let mut intervals: Vec<u64> = points.iter().map(|p| p.interval_ms).collect();
        intervals.sort_unstable();
        intervals.dedup();
        let kmin = points.iter().map(|p| p.per_flow).min().unwrap_or(0) as f64;
        let kmax = points.iter().map(|p| p.per_flow).max().unwrap_or(1) as f64;
        let ymax = points
            .iter()
            .map(|p| p.max_rate_pps / 1e6)
            .fold(14.88_f64, f64::max)
            * 1.1;
        Axes {
            panels,
            arrivals_vary,
            intervals,
            kmin,
            kmax,
            ymax,
            xpad: ((kmax - kmin) * 0.05).max(0.5),
        }
    }
}

/// The data-center layout, for a grid of one K over several flow counts:
/// one panel per interval, x the active flows (log scale), one line per
/// arrival rate. Figure 13's layout would give each flow count and
/// arrival rate a panel of one point.
struct Scale {
    per_flow: u32,
    intervals: Vec<u64>,
    arrivals: Vec<f64>,
    /// log10 of the fewest and most active flows.
    lmin: f64,
    lmax: f64,
    ymax: f64,
}

impl Scale {
    fn of(points: &[Point]) -> Option<Scale> {
        let first = points.first()?;
        if points.iter().any(|p| p.per_flow != first.per_flow)
            || points.iter().all(|p| p.flows == first.flows)
        {
            return None;
        }
        let mut intervals: Vec<u64> = points.iter().map(|p| p.interval_ms).collect();
        intervals.sort_unstable();
        intervals.dedup();
        let mut arrivals: Vec<f64> = points.iter().map(|p| p.arrivals).collect();
        arrivals.sort_by(f64::total_cmp);
        arrivals.dedup();
        let log = |f: u32| f64::from(f.max(1)).log10();
        Some(Scale {
            per_flow: first.per_flow,
            intervals,
            arrivals,
            lmin: points.iter().map(|p| log(p.flows)).fold(f64::INFINITY, f64::min),
            lmax: points.iter().map(|p| log(p.flows)).fold(0.0, f64::max),
            ymax: points
                .iter()
                .map(|p| p.max_rate_pps / 1e6)
                .fold(14.88_f64, f64::max)
                * 1.1,
        })
    }
}

/// 1000 as `1k`, 1000000 as `1M`.
fn short_count(n: f64) -> String {
    match n {
        n if n >= 1e6 => format!("{}M", n / 1e6),
        n if n >= 1e3 => format!("{}k", n / 1e3),
        n => format!("{n}"),
    }
}

/// Draws [`Scale`]'s panels into `buf`, an RGB image of `size`.
fn draw_scale(
    points: &[Point],
    sc: &Scale,
    text: bool,
    buf: &mut [u8],
    size: (u32, u32),
) -> anyhow::Result<()> {
    let root = BitMapBackend::with_buffer(buf, size).into_drawing_area();
    root.fill(&WHITE).map_err(drawing)?;
    let root = root.margin(10, 10, 10, 10);
    let panels = root.split_evenly((1, sc.intervals.len()));
    let x = (sc.lmin - 0.25)..(sc.lmax + 0.25);
    for (panel, &i) in panels.iter().zip(&sc.intervals) {
        let mut b = ChartBuilder::on(panel);
        b.margin(8);
        if text {
            b.caption(
                format!("{i} ms epochs, {} triggers per flow", sc.per_flow),
                ("sans-serif", 20),
            )
            .x_label_area_size(45)
            .y_label_area_size(55);
        } else {
            b.x_label_area_size(10).y_label_area_size(10);
        }
        let mut chart = b.build_cartesian_2d(x.clone(), 0.0..sc.ymax).map_err(drawing)?;
        let label = |x: f64| short_count(10f64.powf(x.round()));
        draw_mesh(&mut chart, text, "Active flows (log scale)", &label)?;
        draw_line_rate(&mut chart, (x.start, x.end), text)?;
        for (n, &arr) in sc.arrivals.iter().enumerate() {
            let at: Vec<(f64, &Point)> = points
                .iter()
                .filter(|p| p.interval_ms == i && p.arrivals == arr)
                .map(|p| (f64::from(p.flows.max(1)).log10(), p))
                .collect();
            let name = format!("{} new flows/s", short_count(arr));
            draw_points(&mut chart, at, name, COLORS[n % COLORS.len()], text)?;
        }
        if text {
            draw_legend(&mut chart)?;
        }
    }
    root.present().map_err(drawing)
}

/// A panel's chart: triggers per flow by Mpps.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A drawing error of plotters, as text.
fn drawing(e: impl std::fmt::Debug) -> anyhow::Error {
    anyhow!("{e:?}")
}

/// Draws the panels into `buf`, an RGB image of `size`.
fn draw(points: &[Point], axes: &Axes, text: bool, buf: &mut [u8], size: (u32, u32)) -> anyhow::Result<()> {
    let root = BitMapBackend::with_buffer(buf, size).into_drawing_area();
    root.fill(&WHITE).map_err(drawing)?;
    let root = root.margin(10, 10, 10, 10);
    let panels = root.split_evenly((1, axes.panels.len()));
    for (panel, &(f, arrivals)) in panels.iter().zip(&axes.panels) {
        let mut b = ChartBuilder::on(panel);
        b.margin(8);
        if text {
            let caption = if axes.arrivals_vary {
                format!(
                    "{} active flows, {} new/s",
                    thousands(u64::from(f)),
                    thousands(arrivals as u64)
                )
            } else {
                format!("{} active flows", thousands(u64::from(f)))
            };
            b.caption(caption, ("sans-serif", 20))
                .x_label_area_size(45)
                .y_label_area_size(55);
        } else {
            b.x_label_area_size(10).y_label_area_size(10);
        }
        let mut chart = b
            .build_cartesian_2d((axes.kmin - axes.xpad)..(axes.kmax + axes.xpad), 0.0..axes.ymax)
            .map_err(drawing)?;
        draw_mesh(&mut chart, text, "Triggers per flow", &|x| format!("{x:.0}"))?;
        draw_line_rate(&mut chart, (axes.kmin - axes.xpad, axes.kmax + axes.xpad), text)?;
        for (n, &i) in axes.intervals.iter().enumerate() {
            let at: Vec<&Point> = points
                .iter()
                .filter(|p| p.flows == f && p.arrivals == arrivals && p.interval_ms == i)
                .collect();
            let at = at.into_iter().map(|p| (f64::from(p.per_flow), p)).collect();
            draw_points(&mut chart, at, format!("{i} ms"), COLORS[n % COLORS.len()], text)?;
        }
        if text {
            draw_legend(&mut chart)?;
        }
    }
    root.present().map_err(drawing)
}

/// The grid, and with text the axes' labels: `x_desc` under the x axis,
/// `x_label` at whole ticks (ticks between them get none).
fn draw_mesh<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    text: bool,
    x_desc: &str,
    x_label: &dyn Fn(f64) -> String,
) -> anyhow::Result<()> {
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(RGBColor(245, 245, 245));
    let whole = |x: &f64| {
        if (x - x.round()).abs() < 1e-6 {
            x_label(*x)
        } else {
            String::new()
        }
    };
    if text {
        mesh.x_desc(x_desc)
            .y_desc("Max rate with no late sweep (Mpps)")
            .x_label_formatter(&whole)
            .y_label_formatter(&|y| format!("{y:.0}"))
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15));
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(drawing)
}

/// 10 GbE line rate at 64 B, Trumpet's target, across `x`.
fn draw_line_rate<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    x: (f64, f64),
    text: bool,
) -> anyhow::Result<()> {
    let line = RGBColor(120, 120, 120);
    let s = chart
        .draw_series(LineSeries::new(
            [(x.0, 14.88), (x.1, 14.88)],
            line.stroke_width(1),
        ))
        .map_err(drawing)?;
    if text {
        s.label("14.88 Mpps (10 GbE, 64 B)")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], line));
    }
    Ok(())
}

/// One line over the points `at`, each at its x: faint the model's rate
/// R; solid with markers the rate verified (F·R, or 0 when no rate is
/// feasible); a cross at R where verification failed.
fn draw_points<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    mut at: Vec<(f64, &Point)>,
    name: String,
    color: RGBColor,
    text: bool,
) -> anyhow::Result<()> {
    at.sort_by(|a, b| a.0.total_cmp(&b.0));
    let model: Vec<(f64, f64)> = at.iter().map(|&(x, p)| (x, p.max_rate_pps / 1e6)).collect();
    chart
        .draw_series(LineSeries::new(model, color.mix(0.35).stroke_width(1)))
        .map_err(drawing)?;
    let verified: Vec<(f64, f64)> = at
        .iter()
        .filter_map(|&(x, p)| match p.verified {
            Some(v) => Some((x, v * p.max_rate_pps / 1e6)),
            None if p.max_rate_pps < 1.0 => Some((x, 0.0)),
            None => None,
        })
        .collect();
    let s = chart
        .draw_series(LineSeries::new(verified.clone(), color.stroke_width(2)))
        .map_err(drawing)?;
    if text {
        s.label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .draw_series(verified.iter().map(|&p| Circle::new(p, 3, color.filled())))
        .map_err(drawing)?;
    chart
        .draw_series(
            at.iter()
                .filter(|(_, p)| p.verified.is_none() && p.max_rate_pps >= 1.0)
                .map(|&(x, p)| Cross::new((x, p.max_rate_pps / 1e6), 5, color.stroke_width(2))),
        )
        .map_err(drawing)?;
    Ok(())
}

fn draw_legend<'a, DB: DrawingBackend + 'a>(chart: &mut Chart<'a, DB>) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(drawing)
}

/// Writes `buf`, an RGB image of `size`, to `path` as a PNG.
fn write_png(path: &Path, buf: &[u8], (w, h): (u32, u32)) -> anyhow::Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc
        .write_header()
        .with_context(|| format!("cannot write {}", path.display()))?;
    writer
        .write_image_data(buf)
        .with_context(|| format!("cannot write {}", path.display()))?;
    writer
        .finish()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model() {
        // 50 ns/packet, no sweep: 20 Mpps.
        assert!((max_rate(50.0, 0.0, 10e6) - 20e6).abs() < 1.0);
        // A sweep taking 10% of the epoch leaves 90% for packets.
        assert!((max_rate(50.0, 1e6, 10e6) - 18e6).abs() < 1.0);
        // A sweep longer than the epoch: infeasible.
        assert_eq!(max_rate(50.0, 11e6, 10e6), 0.0);
        assert_eq!(max_rate(0.0, 0.0, 10e6), 0.0);
    }

    fn point(flows: u32, arrivals: f64, verified: Option<f64>, rate: f64) -> Point {
        Point {
            per_flow: 8,
            interval_ms: 10,
            flows,
            arrivals,
            ns_per_packet: 33.4,
            ns_per_packet_median: 33.4,
            sweep_p99_us: 147.9,
            max_rate_pps: rate,
            verified,
        }
    }

    #[test]
    fn a_csv_read_back_gives_its_points() {
        let points = [
            point(1000, 1000.0, Some(0.95), 29.47e6),
            point(1_000_000, 100_000.0, None, 5.51e6),
            point(1_000_000, 10_000.0, None, 0.0),
        ];
        let mut csv = format!("{CSV_HEADER}\n");
        for p in &points {
            csv.push_str(&p.csv_row());
            csv.push('\n');
        }
        let back = read_csv(&csv).unwrap();
        let rows: Vec<String> = back.iter().map(Point::csv_row).collect();
        let want: Vec<String> = points.iter().map(Point::csv_row).collect();
        assert_eq!(rows, want);
        // The older seven columns: the paper's arrival rate.
        let old = "per_flow,interval_ms,flows,ns_per_packet,sweep_p99_us,max_rate_mpps,verified\n4,1,300,31.3,38.1,30.78,yes@0.85\n";
        assert_eq!(read_csv(old).unwrap()[0].arrivals, 1000.0);
        // The scale layout is for one K over several flow counts.
        assert!(Scale::of(&back).is_some());
        assert!(Scale::of(&back[..1]).is_none());
    }

    #[test]
    fn a_bad_csv_is_refused_with_its_line() {
        let bad = [
            ("", "not a feasibility CSV"),
            ("a,b\n", "not a feasibility CSV"),
            (&format!("{CSV_HEADER}\n"), "no points"),
            (
                &format!("{CSV_HEADER}\n8,10,1000\n"),
                "line 2: fewer than 7 columns",
            ),
            (
                &format!("{CSV_HEADER}\n8,10,x,1,1,1,no,1\n"),
                "line 2: flows `x` is not a number",
            ),
            (
                &format!("{CSV_HEADER}\n8,10,1,1,1,1,maybe,1\n"),
                "line 2: verified `maybe`",
            ),
        ];
        for (text, want) in bad {
            let e = read_csv(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
