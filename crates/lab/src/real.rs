//! `clarion-lab bench --pcap FILE`: the file path of `clarion run` timed on
//! a real capture held in memory, against the floors under it.
//!
//! 1. Read the whole capture into one buffer and check the events file as
//!    `clarion run` does (not timed). The resident set size after loading
//!    is reported, so the reader can see the capture is in memory.
//! 2. On a thread pinned to one core, `--runs` rounds, each timing three
//!    passes over the same bytes in turn (alternating, so drift in the
//!    machine's speed hits all three alike):
//!    - **read**: the capture reader alone ([`SliceReader`]), every frame
//!      handed out and dropped;
//!    - **read + parse**: plus `clarion_wire::parse_frame` on each frame;
//!    - **file path**: [`clarion_host::replay`], the one loop `clarion run
//!      --pcap` runs, into a [`Monitor`] (or [`Workers`] with `--workers`)
//!      configured and loaded as `clarion run` does with its default flags,
//!      with a driver that counts reports and drops them. Building the
//!      monitor is not timed; its final sweep (`finish`) is.
//! 3. Print each pass's ns per frame (median and min–max over rounds) and
//!    packets/s, the split it implies (parse = read + parse − read; the
//!    monitor and batching = file path − read + parse) and the ratio of
//!    the file path to the read + parse floor, issue 19's acceptance figure
//!    (at most 2).
//!
//! With `--records` and `--gpv`, each round also times the file path with
//! a flow meter beside the event stage ([`FlowRecords`] in a [`Pipeline`],
//! as `clarion run --records` builds it, its records dropped: the meter's
//! work without a sink's) and with a GPV cache beside it ([`Gpvs`],
//! `--gpv`, *Flow's default cache, GPVs dropped), in the same alternation, and prints each one's ns
//! per packet and its ratio to the file path alone, round by round (the
//! issue 20 figures: what flow records and GPVs cost the monitor).
//!
//! With one worker a fourth pass, not part of the three above, splits the
//! monitor's time: the file path again, each call into the monitor timed
//! ([`Timed`]; two clock reads a batch of 32 packets). Batches in which no
//! sweep ran give the packet path's cost a packet (flow lookup and insert,
//! match and scatter); the rest (batches that swept, less their packets at
//! that cost, plus the final sweep) is the sweeps' (with their reports).
//! The engine keeps counters, not clocks, so finer splits come from `perf
//! record` (docs/performance.md, "Real traffic in memory").

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use clap::Args;
use serde_json::json;

use clarion_capture::{CaptureError, PacketSource, SliceReader};
use clarion_engine::{Counters, Monitor, MonitorConfig, Report, Unparsed};
use clarion_flows::FlowConfig;
use clarion_gpv::CacheConfig;
use clarion_host::{replay, Driver, ReplayOptions, Workers, WorkersConfig};
use clarion_lang::spec::EventSpec;
use clarion_pipeline::{Error as PipelineError, FlowRecords, Gpvs, Outputs, Pipeline, Stage, Stages};
use clarion_wire::PacketRecord;

use crate::thousands;
use crate::Failure;

/// The acceptance bound of issue 19: the file path within this many times
/// the read-and-parse floor.
const TARGET_RATIO: f64 = 2.0;

/// `clarion-lab bench` flags that --pcap does not use: the synthetic
/// workload's, the triggers', the loop's and the monitor's.
const NOT_WITH_PCAP: &[&str] = &[
    "packets",
    "batch",
    "no_opt",
    "verify_prefix",
    "flow_capacity",
    "history_windows",
    "flow_timeout",
    "dos_threshold",
    "dos_auto_raise",
    "dos_filter_slots",
    "rate",
    "size",
    "flows",
    "arrival",
    "flow_sizes",
    "burst",
    "dos_fraction",
    "dos_packets",
    "retransmit_fraction",
    "seed",
    "triggers",
    "per_packet",
    "patterns",
    "interval",
];

/// `bench`'s flags for a real capture (`--pcap`); the workload flags do not apply.
#[derive(Args, Debug)]
pub struct PcapArgs {
    /// Time `clarion run`'s file path on this capture (pcap or pcapng), held
    /// in memory, against reading and parsing it alone, with `clarion run`'s
    /// default monitor: the synthetic workload's flags and the monitor's
    /// are refused beside it (only --events, --workers, --runs, --core and
    /// --json apply).
    #[arg(long, value_name = "FILE", conflicts_with_all = NOT_WITH_PCAP)]
    pub pcap: Option<PathBuf>,

    /// Events installed for --pcap, as `clarion run --events` installs them.
    #[arg(
        long,
        default_value = "examples/demo.clarion",
        value_name = "FILE",
        requires = "pcap"
    )]
    pub events: PathBuf,

    /// Monitors for --pcap, as `clarion run --workers` (flows spread over threads).
    #[arg(long, default_value_t = 1, value_name = "N", requires = "pcap",
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,

    /// Rounds for --pcap, each timing the three passes in turn; figures are
    /// medians (and min-max) over rounds.
    #[arg(long, default_value_t = 5, value_name = "N", requires = "pcap",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,

    /// With --pcap, also time the file path with a flow meter beside the
    /// monitor (`clarion run --records`'s default cache and timeouts;
    /// records kept in memory, no sink) and give its ratio to the monitor alone.
    #[arg(long, requires = "pcap")]
    pub records: bool,

    /// With --pcap, also time the file path with a GPV cache beside the
    /// monitor (*Flow's default cache; GPVs dropped) and give its ratio to
    /// the monitor alone.
    #[arg(long, requires = "pcap")]
    pub gpv: bool,
}

/// What runs beside the event stage in a file-path pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Beside {
    Nothing,
    /// A flow meter, its records pushed into a `Vec` and dropped.
    Records,
    /// A GPV cache, its GPVs dropped.
    Gpv,
}

/// Replays into `stage` alone or with `beside` (built here, untimed) in a
/// pipeline, as `clarion run` does (its records and GPVs dropped: the
/// stage's work without a sink's); returns what replay returned, the
/// elapsed time, the stage's counters and the records or GPVs made.
fn replay_beside<S: Stage>(
    src: &mut SliceReader<'_>,
    stage: S,
    beside: Beside,
    driver: &mut Discard,
    options: &ReplayOptions,
) -> Result<(clarion_host::Replayed, Duration, Counters, u64), Failure> {
    fn go<St: Stage>(
        src: &mut SliceReader<'_>,
        stage: &mut St,
        driver: &mut Discard,
        options: &ReplayOptions,
    ) -> Result<(clarion_host::Replayed, Duration), Failure> {
        let started = Instant::now();
        let run = replay(src, stage, driver, options)?;
        Ok((run, started.elapsed()))
    }
    let mut stages = Stages::default();
    match beside {
        Beside::Nothing => {
            let mut stage = stage;
            let (run, elapsed) = go(src, &mut stage, driver, options)?;
            return Ok((run, elapsed, stage.counters(), 0));
        }
        Beside::Records => {
            let meter = FlowRecords::new(FlowConfig::default())
                .map_err(|e| Failure::Runtime(anyhow!("the default flow meter: {e}")))?;
            stages.records = Some(meter);
        }
        Beside::Gpv => {
            let cache = Gpvs::new(CacheConfig::default())
                .map_err(|e| Failure::Runtime(anyhow!("the default GPV cache: {e}")))?;
            stages.gpvs = Some(cache);
        }
    }
    let mut p = Pipeline::new(stage, stages);
    let (run, elapsed) = go(src, &mut p, driver, options)?;
    let records = p.stage::<FlowRecords>().map(|r| r.stats().records);
    let made = records.or_else(|| p.stage::<Gpvs>().map(|g| g.stats().gpvs));
    Ok((run, elapsed, p.counters(), made.unwrap_or(0)))
}

/// One timed pass over the capture.
#[derive(Clone, Copy, Debug, Default)]
struct Pass {
    elapsed: Duration,
    /// Frames read.
    frames: u64,
}

/// One file-path pass: its time and what the host did.
#[derive(Clone, Copy, Debug, Default)]
struct FilePass {
    pass: Pass,
    reports: u64,
    counters: Counters,
    /// Page faults the reading thread took in the pass (`None`: not counted here).
    page_faults: Option<u64>,
    /// Flow records or GPVs made beside the events (0 for the monitor alone).
    made: u64,
}

/// The monitor's time in a fourth pass, each batch timed: batches in
/// which no sweep ran give the packet path's cost; the rest of the time
/// (batches that also swept an epoch, less their packets at that cost,
/// plus the last sweep) is the sweeps'.
#[derive(Clone, Copy, Debug, Default)]
struct Split {
    quiet_ns: u64,
    quiet_packets: u64,
    swept_ns: u64,
    swept_packets: u64,
    finish_ns: u64,
    sweeps: u64,
    frames: u64,
    /// Reports, which must equal the file path's.
    reports: u64,
}

impl Split {
    /// ns a packet on the packet path (flow lookup and insert, match and scatter).
    fn packet_ns(&self) -> f64 {
        self.quiet_ns as f64 / self.quiet_packets.max(1) as f64
    }

    /// Sweep time (reports included), in all.
    fn sweep_ns(&self) -> f64 {
        let swept = self.swept_ns as f64 - self.swept_packets as f64 * self.packet_ns();
        swept.max(0.0) + self.finish_ns as f64
    }

    /// Sweep time spread over every frame.
    fn sweep_ns_per_packet(&self) -> f64 {
        self.sweep_ns() / self.frames.max(1) as f64
    }

    /// Mean time of a sweep, in µs.
    fn sweep_us_each(&self) -> f64 {
        self.sweep_ns() / self.sweeps.max(1) as f64 / 1e3
    }
}

/// A monitor whose every call is timed into a [`Split`].
struct Timed {
    m: Monitor,
    s: Split,
}

impl Timed {
    fn call(&mut self, packets: usize, f: impl FnOnce(&mut Monitor)) {
        let before = self.m.counters().sweeps_completed;
        let started = Instant::now();
        f(&mut self.m);
        let ns = started.elapsed().as_nanos() as u64;
        let after = self.m.counters().sweeps_completed;
        self.s.sweeps += after - before;
        if after > before {
            self.s.swept_ns += ns;
            self.s.swept_packets += packets as u64;
        } else {
            self.s.quiet_ns += ns;
            self.s.quiet_packets += packets as u64;
        }
    }
}

impl Stage for Timed {
    fn batch(&mut self, packets: &[PacketRecord], out: &mut Outputs) -> Result<(), PipelineError> {
        self.call(packets.len(), |m| m.process_batch(packets, &mut out.reports));
        Ok(())
    }

    fn unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Outputs) -> Result<(), PipelineError> {
        self.call(0, |m| m.note_unparsed(ts_ns, why, &mut out.reports));
        Ok(())
    }

    fn finish(&mut self, out: &mut Outputs) -> Result<(), PipelineError> {
        let before = self.m.counters().sweeps_completed;
        let started = Instant::now();
        self.m.finish(&mut out.reports);
        self.s.finish_ns += started.elapsed().as_nanos() as u64;
        self.s.sweeps += self.m.counters().sweeps_completed - before;
        Ok(())
    }

    fn counters(&self) -> Counters {
        self.m.counters()
    }
}

/// The fourth pass: the file path again, each call into the monitor timed.
#[inline(never)]
fn split_pass(
    bytes: &[u8],
    path: &Path,
    p: &PcapArgs,
    config: &MonitorConfig,
    specs: &[EventSpec],
) -> Result<Split, Failure> {
    let mut src = open(bytes, path)?;
    let mut timed = Timed {
        m: build_monitor(config, specs, &p.events)?,
        s: Split::default(),
    };
    let mut driver = Discard::default();
    let run = replay(&mut src, &mut timed, &mut driver, &ReplayOptions::default())?;
    Ok(Split {
        frames: run.frames,
        reports: driver.reports,
        ..timed.s
    })
}

/// Every round's passes.
#[derive(Default)]
struct Rounds {
    read: Vec<Pass>,
    parse: Vec<Pass>,
    file: Vec<FilePass>,
    /// The file path with a flow meter, and with a GPV cache, beside the events (if asked).
    records: Vec<FilePass>,
    gpv: Vec<FilePass>,
    /// The monitor's time split by batch (one worker only).
    split: Vec<Split>,
    /// Frames that parsed, and that did not (read + parse pass).
    parsed: u64,
    unparsed: u64,
    pinned: Option<Result<usize, String>>,
}

/// ns per frame of a pass.
fn ns_per_frame(p: &Pass) -> f64 {
    p.elapsed.as_nanos() as f64 / p.frames.max(1) as f64
}

/// Median, min and max of `v` (not empty).
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    };
    (
        median,
        v.first().copied().unwrap_or(0.0),
        v.last().copied().unwrap_or(0.0),
    )
}

/// The resident set size and its peak, in KiB, from /proc/self/status;
/// `None` where the kernel has no such file.
fn rss_kib() -> (Option<u64>, Option<u64>) {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return (None, None);
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Reads and checks the events file as `clarion run` does (decoded, checked,
/// at least one event).
pub(crate) fn load_events(path: &Path) -> Result<Vec<EventSpec>, Failure> {
    let bytes = std::fs::read(path).map_err(|e| {
        Failure::Usage(format!(
            "clarion-lab: cannot read events file {}: {e}\n",
            path.display()
        ))
    })?;
    let name = path.display().to_string();
    let src = clarion_lang::decode(&bytes)
        .map_err(|d| Failure::Usage(d.render(&name, &String::from_utf8_lossy(&bytes), false)))?;
    let specs = clarion_lang::check(src).map_err(|d| Failure::Usage(d.render(&name, src, false)))?;
    if specs.is_empty() {
        return Err(Failure::Usage(format!("clarion-lab: {name} defines no events\n")));
    }
    Ok(specs)
}

/// `clarion run`'s monitor configuration with its default flags (the host
/// name aside, which changes no count).
pub(crate) fn run_config() -> MonitorConfig {
    MonitorConfig {
        host: "bench".into(),
        ..MonitorConfig::default()
    }
}

/// A monitor with the events installed as `clarion run` installs them
/// (`on demand` events come with the drill-downs installing them).
pub(crate) fn build_monitor(
    config: &MonitorConfig,
    specs: &[EventSpec],
    events: &Path,
) -> Result<Monitor, Failure> {
    let mut monitor = Monitor::new(config.clone());
    for s in specs.iter().filter(|s| !s.on_demand) {
        monitor
            .install(s.clone())
            .map_err(|e| Failure::Usage(format!("clarion-lab: {}: {e}\n", events.display())))?;
    }
    Ok(monitor)
}

/// A driver that counts the reports and drops them: the file path less
/// formatting and writing.
#[derive(Default)]
struct Discard {
    reports: u64,
}

impl<St: Stage + ?Sized> Driver<St> for Discard {
    type Error = Failure;

    fn reports(&mut self, _stage: &mut St, reports: &mut Vec<Report>) -> Result<(), Failure> {
        self.reports += reports.len() as u64;
        reports.clear();
        Ok(())
    }
}

fn open<'a>(bytes: &'a [u8], path: &Path) -> Result<SliceReader<'a>, Failure> {
    SliceReader::new(bytes)
        .map_err(|e| Failure::Runtime(anyhow!("cannot read capture {}: {e}", path.display())))
}

/// Whether a reader's error ends the input (damage) or skips one frame.
fn ends(e: &CaptureError) -> bool {
    e.is_fatal()
}

/// The read floor: every frame handed out by the reader, nothing else.
#[inline(never)]
fn read_pass(bytes: &[u8], path: &Path) -> Result<Pass, Failure> {
    let mut src = open(bytes, path)?;
    let started = Instant::now();
    let mut frames = 0u64;
    let mut acc = 0u64; // keeps the frames' fields live, so the loop is not optimized away
    while let Some(item) = src.next_packet() {
        match item {
            Ok(p) => {
                frames += 1;
                acc = acc.wrapping_add(p.ts_ns ^ p.data.len() as u64);
            }
            Err(e) if ends(&e) => break,
            Err(_) => {}
        }
    }
    let elapsed = started.elapsed();
    black_box(acc);
    Ok(Pass { elapsed, frames })
}

/// The read + parse floor: each frame parsed as the replay loop parses it.
#[inline(never)]
fn parse_pass(bytes: &[u8], path: &Path) -> Result<(Pass, u64), Failure> {
    let mut src = open(bytes, path)?;
    let started = Instant::now();
    let (mut frames, mut parsed) = (0u64, 0u64);
    while let Some(item) = src.next_packet() {
        match item {
            Ok(p) => {
                frames += 1;
                if let Ok(rec) = clarion_wire::parse_frame(p.link, p.data, p.ts_ns, p.orig_len) {
                    parsed += 1;
                    black_box(&rec);
                }
            }
            Err(e) if ends(&e) => break,
            Err(_) => {}
        }
    }
    let elapsed = started.elapsed();
    Ok((Pass { elapsed, frames }, parsed))
}

/// The file path: `clarion_host::replay` into the stage `clarion run` builds.
/// Never inlined, so `valgrind --tool=callgrind
/// --toggle-collect='clarion_lab::real::file_pass*'` counts it alone.
#[inline(never)]
fn file_pass(
    bytes: &[u8],
    path: &Path,
    p: &PcapArgs,
    config: &MonitorConfig,
    specs: &[EventSpec],
    beside: Beside,
) -> Result<FilePass, Failure> {
    let mut src = open(bytes, path)?;
    let mut driver = Discard::default();
    let options = ReplayOptions::default();
    let faults = crate::bench::thread_page_faults();
    let (run, elapsed, counters, made) = if p.workers > 1 {
        let wc = WorkersConfig {
            workers: p.workers,
            ..WorkersConfig::default()
        };
        let workers = Workers::start(config, specs, wc)
            .map_err(|e| Failure::Usage(format!("clarion-lab: {}: {e}\n", p.events.display())))?;
        replay_beside(&mut src, workers, beside, &mut driver, &options)?
    } else {
        let monitor = build_monitor(config, specs, &p.events)?;
        replay_beside(&mut src, monitor, beside, &mut driver, &options)?
    };
    let page_faults = match (faults, crate::bench::thread_page_faults()) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    if let Some(e) = run.damage {
        // The floors stop at the same damage; said once per pass, as `clarion run` would.
        eprintln!("clarion-lab: warning: {e}; the passes cover the frames before the damage");
    }
    Ok(FilePass {
        pass: Pass {
            elapsed,
            frames: run.frames,
        },
        reports: driver.reports,
        counters,
        page_faults,
        made,
    })
}

/// Every round, on a thread pinned to `core` (default: the last one allowed).
fn measure(
    bytes: &[u8],
    path: &Path,
    p: &PcapArgs,
    core: Option<usize>,
    specs: &[EventSpec],
) -> Result<Rounds, Failure> {
    let config = run_config();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut r = Rounds {
                pinned: Some(crate::bench::pin(core)),
                ..Rounds::default()
            };
            for _ in 0..p.runs {
                r.read.push(read_pass(bytes, path)?);
                let (pass, parsed) = parse_pass(bytes, path)?;
                r.parsed = parsed;
                r.unparsed = pass.frames - parsed.min(pass.frames);
                r.parse.push(pass);
                r.file
                    .push(file_pass(bytes, path, p, &config, specs, Beside::Nothing)?);
                if p.records {
                    r.records
                        .push(file_pass(bytes, path, p, &config, specs, Beside::Records)?);
                }
                if p.gpv {
                    r.gpv
                        .push(file_pass(bytes, path, p, &config, specs, Beside::Gpv)?);
                }
                if p.workers <= 1 {
                    r.split.push(split_pass(bytes, path, p, &config, specs)?);
                }
            }
            Ok(r)
        })
        .join()
        .map_err(|_| Failure::Runtime(anyhow!("the measured loop panicked")))?
    })
}

pub fn bench_pcap(p: &PcapArgs, path: &Path, core: Option<usize>, json: bool) -> Result<ExitCode, Failure> {
    let bytes = std::fs::read(path)
        .map_err(|e| Failure::Runtime(anyhow!("cannot read capture {}: {e}", path.display())))?;
    // Fails early, with the file's name, if it is no capture.
    open(&bytes, path)?;
    let (rss_loaded, _) = rss_kib();
    let specs = load_events(&p.events)?;
    let rounds = measure(&bytes, path, p, core, &specs)?;
    let (_, rss_peak) = rss_kib();
    let out = Output {
        p,
        path,
        capture_bytes: bytes.len() as u64,
        rss_loaded,
        rss_peak,
        installed: specs.iter().filter(|s| !s.on_demand).count(),
        r: &rounds,
    };
    let table = out.table();
    if json {
        eprint!("{table}");
        println!("{}", out.json());
    } else {
        print!("{table}");
    }
    let reports: Vec<u64> = (rounds.file.iter().map(|f| f.reports))
        .chain(rounds.records.iter().map(|f| f.reports))
        .chain(rounds.gpv.iter().map(|f| f.reports))
        .chain(rounds.split.iter().map(|s| s.reports))
        .collect();
    if reports.windows(2).any(|w| w[0] != w[1]) {
        eprintln!("clarion-lab: the file path's reports differ between rounds or from the timed pass's ({reports:?}): the loop is not deterministic");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// One pass's figures over the rounds.
struct Figures {
    /// ns per frame: median, min, max.
    ns: (f64, f64, f64),
    /// Frames per second at the median.
    pps: f64,
}

impl Figures {
    fn of(passes: impl Iterator<Item = Pass>) -> Figures {
        let ns = spread(passes.map(|p| ns_per_frame(&p)).collect());
        Figures {
            ns,
            pps: if ns.0 > 0.0 { 1e9 / ns.0 } else { 0.0 },
        }
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "ns_per_packet": { "median": self.ns.0, "min": self.ns.1, "max": self.ns.2 },
            "packets_per_s": self.pps,
        })
    }
}

struct Output<'a> {
    p: &'a PcapArgs,
    path: &'a Path,
    capture_bytes: u64,
    rss_loaded: Option<u64>,
    rss_peak: Option<u64>,
    installed: usize,
    r: &'a Rounds,
}

impl Output<'_> {
    fn read(&self) -> Figures {
        Figures::of(self.r.read.iter().copied())
    }
    fn parse(&self) -> Figures {
        Figures::of(self.r.parse.iter().copied())
    }
    fn file(&self) -> Figures {
        Figures::of(self.r.file.iter().map(|f| f.pass))
    }

    /// The file path over the read + parse floor, round by round: median, min, max.
    fn ratio(&self) -> (f64, f64, f64) {
        spread(
            self.r
                .file
                .iter()
                .zip(&self.r.parse)
                .map(|(f, p)| ns_per_frame(&f.pass) / ns_per_frame(p).max(f64::MIN_POSITIVE))
                .collect(),
        )
    }

    /// A pass with something beside the events: its figures, its ratio to
    /// the file path alone round by round (median, min, max) and what it
    /// made; `None` when not asked for.
    fn beside(&self, v: &[FilePass]) -> Option<(Figures, (f64, f64, f64), u64)> {
        let made = v.last()?.made;
        let ratio = spread(
            v.iter()
                .zip(&self.r.file)
                .map(|(b, f)| ns_per_frame(&b.pass) / ns_per_frame(&f.pass).max(f64::MIN_POSITIVE))
                .collect(),
        );
        Some((Figures::of(v.iter().map(|f| f.pass)), ratio, made))
    }

    /// The passes beside the events, named: (table name, JSON name, what it makes, passes).
    fn besides(&self) -> [(&'static str, &'static str, &'static str, &[FilePass]); 2] {
        [
            (
                "+ flow meter (records to a Vec)",
                "records",
                "flow records",
                &self.r.records,
            ),
            ("+ GPV cache (GPVs dropped)", "gpv", "GPVs", &self.r.gpv),
        ]
    }

    fn frames(&self) -> u64 {
        self.r.read.first().map_or(0, |p| p.frames)
    }

    /// The split pass's medians over the rounds: packet path ns a packet,
    /// sweeps ns a packet, µs a sweep, and sweeps a round; `None` with workers.
    fn split(&self) -> Option<(f64, f64, f64, u64)> {
        let v = &self.r.split;
        let sweeps = v.last()?.sweeps;
        let med = |f: fn(&Split) -> f64| spread(v.iter().map(f).collect()).0;
        Some((
            med(Split::packet_ns),
            med(Split::sweep_ns_per_packet),
            med(Split::sweep_us_each),
            sweeps,
        ))
    }

    fn last(&self) -> FilePass {
        self.r.file.last().copied().unwrap_or_default()
    }

    fn pinned(&self) -> String {
        match &self.r.pinned {
            Some(Ok(core)) => format!("pinned to core {core}"),
            Some(Err(why)) => format!("NOT pinned ({why})"),
            None => "not pinned".into(),
        }
    }

    fn stage(&self) -> String {
        match self.p.workers {
            1 => "Monitor".into(),
            n => format!("Workers x{n}"),
        }
    }

    fn table(&self) -> String {
        let (read, parse, file) = (self.read(), self.parse(), self.file());
        let ratio = self.ratio();
        let last = self.last();
        let c = &last.counters;
        let mib = |k: Option<u64>| k.map_or("?".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0));
        let row = |name: &str, f: &Figures| {
            format!(
                "  {name:<34} {:>8.1} {:<17} {:>8.2}\n",
                f.ns.0,
                format!("({:.1}-{:.1})", f.ns.1, f.ns.2),
                f.pps / 1e6
            )
        };
        let mut s = format!(
            "clarion-lab bench --pcap {}: {} frames ({} parsed, {} not), {:.1} MB in memory (RSS {} after loading, peak {}); \
             events {} ({} installed); {} rounds, {}\n",
            self.path.display(),
            thousands(self.frames()),
            thousands(self.r.parsed),
            thousands(self.r.unparsed),
            self.capture_bytes as f64 / 1e6,
            mib(self.rss_loaded),
            mib(self.rss_peak),
            self.p.events.display(),
            self.installed,
            self.p.runs,
            self.pinned(),
        );
        s += &format!(
            "  {:<34} {:>8} {:<17} {:>8}\n",
            "pass", "ns/pkt", "(min-max)", "M pkt/s"
        );
        s += &row("read (capture reader)", &read);
        s += &row("read + parse (parse_frame)", &parse);
        s += &row(&format!("file path (replay, {})", self.stage()), &file);
        for (name, _, _, v) in self.besides() {
            if let Some((f, _, _)) = self.beside(v) {
                s += &row(&format!("  {name}"), &f);
            }
        }
        s += &format!(
            "  split at the medians: read {:.1} ns, parse {:.1} ns, monitor and batching {:.1} ns a packet \
             (flow lookup, match, sweep, reports: perf record, docs/performance.md)\n",
            read.ns.0,
            parse.ns.0 - read.ns.0,
            file.ns.0 - parse.ns.0,
        );
        if let Some((packet, sweep, each, sweeps)) = self.split() {
            s += &format!(
                "  the monitor, a fourth pass timing each batch: packet path {packet:.1} ns a packet (flow lookup and \
                 insert, match and scatter), sweeps {sweep:.1} ns a packet ({} sweeps, {each:.1} us each, reports included)\n",
                thousands(sweeps),
            );
        }
        s += &format!(
            "  file path / read + parse floor: {:.2}x (rounds {:.2}-{:.2}x); issue 19's target: at most {TARGET_RATIO:.0}x ({})\n",
            ratio.0,
            ratio.1,
            ratio.2,
            if ratio.0 <= TARGET_RATIO { "met" } else { "not met" }
        );
        for (name, _, what, v) in self.besides() {
            if let Some((f, ratio, made)) = self.beside(v) {
                s += &format!(
                    "  file path {name}: {:.2}x the file path alone (rounds {:.2}-{:.2}x), +{:.1} ns a packet at the medians; {} {what} ({:.1} frames each)\n",
                    ratio.0,
                    ratio.1,
                    ratio.2,
                    f.ns.0 - file.ns.0,
                    thousands(made),
                    self.frames() as f64 / made.max(1) as f64,
                );
            }
        }
        s += &format!(
            "  file path: {} reports, {} flows created, {} trigger matches, {} sweeps ({} late), {} packets untracked{}\n",
            thousands(last.reports),
            thousands(c.flows_created),
            thousands(c.triggers_matched),
            thousands(c.sweeps_completed),
            c.sweeps_late,
            thousands(c.packets_untracked),
            last.page_faults
                .map_or(String::new(), |f| format!(", {} page faults on the reading thread", thousands(f))),
        );
        s
    }

    fn json(&self) -> serde_json::Value {
        let (read, parse, file) = (self.read(), self.parse(), self.file());
        let ratio = self.ratio();
        let last = self.last();
        let c = &last.counters;
        json!({
            "schema": "clarion.bench-pcap/1",
            "capture": {
                "path": self.path.display().to_string(),
                "bytes": self.capture_bytes,
                "frames": self.frames(),
                "parsed": self.r.parsed,
                "unparsed": self.r.unparsed,
            },
            "rss_kib": { "after_loading": self.rss_loaded, "peak": self.rss_peak },
            "events": { "path": self.p.events.display().to_string(), "installed": self.installed },
            "workers": self.p.workers,
            "runs": self.p.runs,
            "core": self.r.pinned.as_ref().and_then(|p| p.as_ref().ok()),
            "pin_error": self.r.pinned.as_ref().and_then(|p| p.as_ref().err()),
            "passes": {
                "read": read.json(),
                "read_parse": parse.json(),
                "file_path": file.json(),
            },
            "beside": self.besides().iter().filter_map(|(_, key, _, v)| {
                let (f, ratio, made) = self.beside(v)?;
                Some(((*key).to_string(), json!({
                    "pass": f.json(),
                    "ratio_to_file_path": { "median": ratio.0, "min": ratio.1, "max": ratio.2 },
                    "ns_per_packet_added": f.ns.0 - file.ns.0,
                    "made": made,
                })))
            }).collect::<serde_json::Map<_, _>>(),
            "split_ns_per_packet": {
                "read": read.ns.0,
                "parse": parse.ns.0 - read.ns.0,
                "monitor": file.ns.0 - parse.ns.0,
            },
            "monitor_split": self.split().map(|(packet, sweep, each, sweeps)| json!({
                "packet_path_ns_per_packet": packet,
                "sweep_ns_per_packet": sweep,
                "sweep_us_each": each,
                "sweeps": sweeps,
            })),
            "ratio_file_path_to_read_parse": { "median": ratio.0, "min": ratio.1, "max": ratio.2 },
            "target_ratio": TARGET_RATIO,
            "reports": last.reports,
            "reports_per_round": self.r.file.iter().map(|f| f.reports).collect::<Vec<_>>(),
            "page_faults": last.page_faults,
            "counters": {
                "packets": c.packets,
                "malformed": c.malformed,
                "not_ip": c.not_ip,
                "flows_created": c.flows_created,
                "flows_evicted": c.flows_evicted,
                "packets_untracked": c.packets_untracked,
                "triggers_matched": c.triggers_matched,
                "sweeps_completed": c.sweeps_completed,
                "sweeps_late": c.sweeps_late,
                "reports": c.reports,
            },
        })
    }
}
