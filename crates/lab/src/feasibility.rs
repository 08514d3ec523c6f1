//! `clarion-lab feasibility`: the feasibility region of Trumpet's Figure 13
//! (SIGCOMM'16 §7.2): for each number of triggers per flow K, time interval
//! I and number of active flows, the highest packet rate at which no sweep
//! is late on one core.
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
//!    measured at (about) the rate they predict. A run holds `--packets` packets, or more
//!    so as to span [`MEASURE_EPOCHS`] epochs.
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
use plotters::prelude::*;

use clarion_workload::{TriggerSpec, WorkloadSpec};

use crate::bench::{measure_point, PointRun};
use crate::gen::usage;
use crate::Failure;

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
/// Measuring runs per point at most.
const MEASURE_PASSES: u32 = 3;
/// Fraction of the model's rate that is verified first.
const VERIFY_FACTOR: f64 = 0.95;
/// Steps of −10% tried after a failed verification.
const MAX_STEPS: u32 = 3;

pub const CSV_HEADER: &str = "per_flow,interval_ms,flows,ns_per_packet,sweep_p99_us,max_rate_mpps,verified";

#[derive(Args, Debug)]
pub struct FeasibilityArgs {
    /// Triggers each packet (each flow) matches, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [4u32, 8, 12, 16], value_name = "K,..")]
    pub per_flow: Vec<u32>,

    /// Trigger intervals (= epochs) in milliseconds, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1u64, 5, 10, 20], value_name = "MS,..")]
    pub intervals: Vec<u64>,

    /// Average numbers of active flows, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [300u32, 600, 1200], value_name = "N,..")]
    pub flows: Vec<u32>,

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
    #[arg(long, default_value_t = 32, value_name = "N")]
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
}

/// One point of the grid, measured and verified.
#[derive(Clone, Debug)]
pub struct Point {
    pub per_flow: u32,
    pub interval_ms: u64,
    pub flows: u32,
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
            "{},{},{},{:.1},{:.1},{:.2},{verified}",
            self.per_flow,
            self.interval_ms,
            self.flows,
            self.ns_per_packet,
            self.sweep_p99_us,
            self.max_rate_pps / 1e6
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

pub fn feasibility(a: &FeasibilityArgs) -> Result<ExitCode, Failure> {
    let (per_flow, intervals, flows, packets) = if a.quick {
        (vec![4, 8], vec![5], vec![300], 100_000)
    } else {
        (
            a.per_flow.clone(),
            a.intervals.clone(),
            a.flows.clone(),
            a.packets,
        )
    };
    if per_flow.is_empty() || intervals.is_empty() || flows.is_empty() {
        return Err(Failure::Usage("clarion-lab: the grid is empty".into()));
    }
    if intervals.contains(&0) {
        return Err(Failure::Usage(
            "clarion-lab: --intervals must be at least 1 ms".into(),
        ));
    }
    if packets == 0 {
        return Err(Failure::Usage("clarion-lab: --packets must be at least 1".into()));
    }
    let total = per_flow.len() * intervals.len() * flows.len();
    let started = Instant::now();
    let mut points = Vec::with_capacity(total);
    for &f in &flows {
        for &i in &intervals {
            for &k in &per_flow {
                let p = point(a, k, i, f, packets)?;
                eprintln!(
                    "[{}/{total} {:.0}s] K={k} interval={i}ms flows={f}: {:.1} ns/packet (median {:.1}), sweep p99 {:.1} us -> max {:.2} Mpps; verified: {}",
                    points.len() + 1,
                    started.elapsed().as_secs_f64(),
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
                points.push(p);
            }
        }
    }
    let mut csv = String::from(CSV_HEADER);
    csv.push('\n');
    for p in &points {
        csv.push_str(&p.csv_row());
        csv.push('\n');
    }
    match &a.csv {
        Some(path) => std::fs::write(path, &csv)
            .with_context(|| format!("cannot write {}", path.display()))
            .map_err(Failure::Runtime)?,
        None => print!("{csv}"),
    }
    if let Some(path) = &a.png {
        plot(&points, path).map_err(Failure::Runtime)?;
    }
    let failed = points
        .iter()
        .filter(|p| p.verified.is_none() && p.max_rate_pps >= 1.0)
        .count();
    eprintln!(
        "clarion-lab feasibility: {total} points in {:.0} s; {failed} not verified",
        started.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

fn specs(
    a: &FeasibilityArgs,
    k: u32,
    interval_ms: u64,
    flows: u32,
    packets: u64,
    rate: u64,
) -> Result<(WorkloadSpec, TriggerSpec), Failure> {
    let triggers = TriggerSpec {
        triggers: if a.scale_triggers { 512 * k } else { a.triggers },
        per_packet: k,
        patterns: a.patterns,
        interval_ns: interval_ms * 1_000_000,
    };
    let traffic = WorkloadSpec {
        packets,
        rate_pps: rate.max(1),
        active_flows: flows,
        groups: triggers.traffic_groups(),
        seed: a.seed,
        ..WorkloadSpec::default()
    };
    triggers.validate().map_err(usage)?;
    traffic.validate().map_err(usage)?;
    Ok((traffic, triggers))
}

fn run(a: &FeasibilityArgs, t: &WorkloadSpec, g: &TriggerSpec) -> Result<PointRun, Failure> {
    let r = measure_point(t, g, a.batch, a.core, WARMUP_EPOCHS)?;
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

/// Measures, models and verifies one point (see the module documentation).
fn point(a: &FeasibilityArgs, k: u32, interval_ms: u64, flows: u32, packets: u64) -> Result<Point, Failure> {
    let interval_ns = interval_ms * 1_000_000;
    // The per-packet cost depends on the rate, so measure at the line rate
    // first, then again at the model's rate while that is far from it.
    let mut rate = MEASURE_RATE;
    let mut m;
    let mut r;
    let mut pass = 0;
    loop {
        let n = packets_for(packets, rate, interval_ns, MEASURE_EPOCHS + WARMUP_EPOCHS as u64);
        let (t, g) = specs(a, k, interval_ms, flows, n, rate)?;
        m = run(a, &t, &g)?;
        r = max_rate(m.ns_per_packet_mean, m.sweep_p99_ns as f64, interval_ns as f64);
        pass += 1;
        let off = (r - rate as f64).abs() / rate as f64;
        if pass == MEASURE_PASSES || r < 1.0 || off <= REMEASURE_OFF {
            break;
        }
        rate = r as u64;
    }
    let sweep_ns = m.sweep_p99_ns as f64;
    let mut verified = None;
    if r >= 1.0 {
        let mut factor = VERIFY_FACTOR;
        for step in 0..=MAX_STEPS {
            if step > 0 {
                factor *= 0.9;
            }
            let rate = (r * factor) as u64;
            let n = packets_for(packets, rate, interval_ns, VERIFY_EPOCHS + WARMUP_EPOCHS as u64);
            let (t, g) = specs(a, k, interval_ms, flows, n, rate)?;
            let v = run(a, &t, &g)?;
            if v.warmup_over_budget > 0 {
                eprintln!(
                    "  K={k} interval={interval_ms}ms flows={flows}: {} warm-up epochs over budget at {:.2} Mpps (not counted)",
                    v.warmup_over_budget,
                    rate as f64 / 1e6
                );
            }
            if v.epochs > 0 && v.epochs_over_budget == 0 {
                verified = Some(factor);
                break;
            }
            eprintln!(
                "  K={k} interval={interval_ms}ms flows={flows}: {} of {} epochs over budget at {:.2} Mpps; stepping down",
                v.epochs_over_budget,
                v.epochs,
                rate as f64 / 1e6
            );
        }
    }
    Ok(Point {
        per_flow: k,
        interval_ms,
        flows,
        ns_per_packet: m.ns_per_packet_mean,
        ns_per_packet_median: m.ns_per_packet_median,
        sweep_p99_us: sweep_ns / 1e3,
        max_rate_pps: r,
        verified,
    })
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

/// Draws one panel per flow count: x triggers per flow, y the highest rate
/// with no late sweep, one line per interval (the paper's Figure 13): solid
/// with markers the rate verified, faint the model's R. Writes it as a PNG.
pub fn plot(points: &[Point], path: &Path) -> anyhow::Result<()> {
    let text = load_font();
    if !text {
        eprintln!("clarion-lab: warning: no TrueType font found (set CLARION_FONT); the plot has no text");
    }
    let mut flows: Vec<u32> = points.iter().map(|p| p.flows).collect();
    flows.sort_unstable();
    flows.dedup();
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
    let xpad = ((kmax - kmin) * 0.05).max(0.5);

    let (w, h) = (420 * flows.len() as u32 + 20, 460u32);
    let mut buf = vec![255u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
        let root = root.margin(10, 10, 10, 10);
        let panels = root.split_evenly((1, flows.len()));
        for (panel, &f) in panels.iter().zip(&flows) {
            let mut b = ChartBuilder::on(panel);
            b.margin(8);
            if text {
                b.caption(format!("{f} active flows"), ("sans-serif", 20))
                    .x_label_area_size(45)
                    .y_label_area_size(55);
            } else {
                b.x_label_area_size(10).y_label_area_size(10);
            }
            let mut chart = b
                .build_cartesian_2d((kmin - xpad)..(kmax + xpad), 0.0..ymax)
                .map_err(|e| anyhow!("{e:?}"))?;
            let mut mesh = chart.configure_mesh();
            mesh.light_line_style(RGBColor(245, 245, 245));
            if text {
                mesh.x_desc("Triggers per flow")
                    .y_desc("Max rate with no late sweep (Mpps)")
                    .x_label_formatter(&|x| {
                        // Ticks between whole trigger counts get no label.
                        if (x - x.round()).abs() < 1e-6 {
                            format!("{x:.0}")
                        } else {
                            String::new()
                        }
                    })
                    .y_label_formatter(&|y| format!("{y:.0}"))
                    .label_style(("sans-serif", 14))
                    .axis_desc_style(("sans-serif", 15));
            } else {
                mesh.x_labels(0).y_labels(0);
            }
            mesh.draw().map_err(|e| anyhow!("{e:?}"))?;
            // 10 GbE line rate at 64 B, Trumpet's target.
            let line = RGBColor(120, 120, 120);
            let s = chart
                .draw_series(LineSeries::new(
                    [(kmin - xpad, 14.88), (kmax + xpad, 14.88)],
                    line.stroke_width(1),
                ))
                .map_err(|e| anyhow!("{e:?}"))?;
            if text {
                s.label("14.88 Mpps (10 GbE, 64 B)")
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], line));
            }
            for (n, &i) in intervals.iter().enumerate() {
                let color = COLORS[n % COLORS.len()];
                let mut at: Vec<&Point> = points
                    .iter()
                    .filter(|p| p.flows == f && p.interval_ms == i)
                    .collect();
                at.sort_by_key(|p| p.per_flow);
                // The model's rate R, faint; the rate verified (F·R, or 0 when
                // no rate is feasible), solid with markers.
                let model: Vec<(f64, f64)> = at
                    .iter()
                    .map(|p| (f64::from(p.per_flow), p.max_rate_pps / 1e6))
                    .collect();
                chart
                    .draw_series(LineSeries::new(model, color.mix(0.35).stroke_width(1)))
                    .map_err(|e| anyhow!("{e:?}"))?;
                let verified: Vec<(f64, f64)> = at
                    .iter()
                    .filter_map(|p| match p.verified {
                        Some(v) => Some((f64::from(p.per_flow), v * p.max_rate_pps / 1e6)),
                        None if p.max_rate_pps < 1.0 => Some((f64::from(p.per_flow), 0.0)),
                        None => None,
                    })
                    .collect();
                let s = chart
                    .draw_series(LineSeries::new(verified.clone(), color.stroke_width(2)))
                    .map_err(|e| anyhow!("{e:?}"))?;
                if text {
                    s.label(format!("{i} ms")).legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
                }
                chart
                    .draw_series(verified.iter().map(|&p| Circle::new(p, 3, color.filled())))
                    .map_err(|e| anyhow!("{e:?}"))?;
            }
            if text {
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperRight)
                    .label_font(("sans-serif", 13))
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .draw()
                    .map_err(|e| anyhow!("{e:?}"))?;
            }
        }
        root.present().map_err(|e| anyhow!("{e:?}"))?;
    }
    let file = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc
        .write_header()
        .with_context(|| format!("cannot write {}", path.display()))?;
    writer
        .write_image_data(&buf)
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
}
