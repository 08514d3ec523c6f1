//! `clarion-lab bench`: the monitor on one pinned core over the benchmark
//! workload held in memory.
//!
//! 1. Generate the workload (`clarion-workload`) into one flat buffer and
//!    synthesize its triggers; install them in a monitor whose sweep the
//!    loop drives itself (`synchronous_sweep: false`). Not timed.
//! 2. On a thread pinned to one core, the timed loop: for each batch of
//!    `--batch` frames, parse them from their bytes
//!    (`clarion_wire::parse_frame_into`, in place; each frame's header is
//!    prefetched [`HEADER_PREFETCH_AHEAD`] frames earlier, as a NIC poll
//!    loop prefetches its next burst) and hand the records to
//!    `Monitor::process_batch`; when a sweep is pending (a packet crossed an
//!    epoch boundary), run it to completion with `sweep_step` and time that
//!    call alone: one epoch's sweep. The clock is read once per batch and
//!    twice per sweep; a batch's time, less the sweep in it, divided by its
//!    packets is one ns/packet sample.
//! 3. Check the reports of every window that closed within the first
//!    `--verify-prefix` packets against the reference evaluator run on the
//!    same packets (not timed; on all cores). Any difference is a missed or
//!    wrong event and makes the exit status 1.
//!
//! `--no-opt` switches optimizations off ([`Tuning`]); `--ablation` runs
//! the same workload with all of them on, each one off in turn and all off,
//! in interleaved rounds, and reports each one's contribution as a ratio
//! measured in the same run.
//!
//! Because the sweep runs the moment it is due, the monitor never counts it
//! late; `epochs_over_budget` answers the live question instead: in how many
//! epochs did the packets and the sweep take longer on this core than the
//! epoch lasts at the nominal rate (`--rate`), so that a monitor on a live
//! link at that rate would fall behind.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use clap::{Args, ValueEnum};
use serde_json::json;

use clarion_engine::{Counters, Monitor, MonitorConfig, Report, Tuning, Unparsed};
use clarion_lang::spec::EventSpec;
use clarion_reference::{evaluate, Config, Input};
use clarion_wire::{parse_frame, parse_frame_into, LinkType, PacketRecord};
use clarion_workload::{FrameRef, TriggerSpec, Workload, WorkloadSpec};

use clarion_cmdline::percentile;

use crate::args::parse_duration;
use crate::gen::{usage, WorkloadArgs};
use crate::thousands;
use crate::Failure;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Packets to generate and process.
    #[arg(long, default_value_t = 5_000_000, value_name = "N")]
    pub packets: u64,

    /// Packets run through the monitor (sweeps included) before the clock
    /// starts, and generated before the --packets timed ones. A monitor
    /// that has run a while knows the flows active at the start; an
    /// unprimed run meets them all in its first epochs (at --flows
    /// 1000000 a fifth of 5 M packets make new flows, not the 100,000 a
    /// second the workload asks for). 3 times --flows shows each about
    /// three times, as `clarion-lab feasibility` does. Their reports are
    /// verified with the others (--verify-prefix counts from the first
    /// primed packet); the monitor's counts (sweeps, reports, flows)
    /// include them, the times and rates do not.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub prime: u64,

    /// Packets per batch: parsed, then processed together (prefetching
    /// for all of them first) and timed together; ns/packet percentiles are
    /// over batches. The default is what replay and live workers hand the
    /// monitor.
    #[arg(long, default_value_t = clarion_engine::BATCH, value_name = "N")]
    pub batch: usize,

    /// Optimizations to switch off (comma-separated), to measure without them.
    #[arg(long, value_delimiter = ',', value_name = "OPT")]
    pub no_opt: Vec<Opt>,

    /// Run the workload with every optimization on, each one off in turn,
    /// and all off, interleaved over --rounds rounds, and report each one's
    /// contribution (no verification).
    #[arg(long, conflicts_with_all = ["no_opt", "pcap"])]
    pub ablation: bool,

    /// Rounds of --ablation; the figures are medians over rounds.
    #[arg(long, default_value_t = 3, value_name = "N", requires = "ablation")]
    pub rounds: usize,

    /// Print the results as one JSON object on standard output.
    #[arg(long)]
    pub json: bool,

    /// Compare the reports on the first N packets with the reference evaluator (0 skips).
    #[arg(long, default_value_t = 200_000, value_name = "N")]
    pub verify_prefix: u64,

    /// Core to pin the measured loop to (default: the last core this process may use).
    #[arg(long, value_name = "C")]
    pub core: Option<usize>,

    /// Most flows tracked at once; packets of further flows are counted as
    /// untracked (the summary warns). Default: 1,048,576 (as `clarion run`),
    /// or more when the workload's ordinary flows would not fit: the active
    /// flows plus those arriving within the run (or within --flow-timeout,
    /// if shorter), with a 10% margin.
    #[arg(long, value_name = "N")]
    pub flow_capacity: Option<usize>,

    /// Closed windows each trigger keeps for queries; for one-epoch
    /// per-5-tuple windows (the synthesized triggers'), the values of the
    /// last N epochs' per-flow tests: memory that grows with the flows that
    /// had packets in each epoch, not with the flows tracked. 0 by
    /// default, as on a host no event manager polls; 16 is what
    /// `clarion run --inventory` keeps.
    #[arg(long, default_value_t = MonitorConfig::default().history_windows, value_name = "N")]
    pub history_windows: usize,

    /// Forget a flow after it has been idle this long (e.g. 60s, 50ms).
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub flow_timeout: u64,

    /// DoS filter threshold: a new flow is matched and inserted only once it
    /// has sent more than BYTES (IP length) in one epoch. 'off' (0) disables
    /// the filter; 'auto' profiles this machine and takes the smallest
    /// threshold the cost model (`clarion-lab dos --help`) says keeps a
    /// threshold attack of --dos-fraction (0.96 when 0) within every epoch.
    #[arg(long, default_value = "off", value_parser = parse_dos_threshold, value_name = "BYTES|auto|off")]
    pub dos_threshold: DosThreshold,

    /// Raise the DoS threshold (double it; from 40 B when off) after every
    /// epoch whose packets and sweep overran the epoch at --rate: the
    /// bench's stand-in for a sweep left unfinished.
    #[arg(long)]
    pub dos_auto_raise: bool,

    /// Counters in the DoS filter table (a power of two; 4 bytes each).
    #[arg(long, default_value_t = 1 << 18, value_name = "N")]
    pub dos_filter_slots: usize,

    #[command(flatten)]
    pub workload: WorkloadArgs,

    #[command(flatten)]
    pub real: crate::real::PcapArgs,
}

/// An optimization `--no-opt` can switch off (see [`Tuning`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Opt {
    /// Batched processing with prefetch of flow slots, entries and statistics.
    BatchPrefetch,
    /// Prefetch of each frame's header 32 frames before it is parsed.
    HeaderPrefetch,
    /// Prefetch of trigger data and epoch logs in the sweep.
    SweepPrefetch,
    /// Skip the lookup for a packet of the previous packet's flow.
    LastFlow,
    /// Transparent huge pages for the flow table, statistics and triggers.
    HugePages,
    /// Sweep only the triggers whose flows had packets in the epoch.
    ActiveSweep,
    /// One-epoch per-5-tuple windows tested flow by flow in the gather.
    FlowWindows,
    /// Memory committed before traffic: the flow table and the heap the
    /// monitor grows into (no page faults in the first epochs).
    Prefault,
    /// A new flow's matched set cached by the key bits filters read (no tuple-space search on a hit).
    MatchCache,
    /// All of the above.
    All,
}

impl Opt {
    const EACH: [Opt; 9] = [
        Opt::BatchPrefetch,
        Opt::HeaderPrefetch,
        Opt::SweepPrefetch,
        Opt::LastFlow,
        Opt::HugePages,
        Opt::ActiveSweep,
        Opt::FlowWindows,
        Opt::Prefault,
        Opt::MatchCache,
    ];

    fn name(self) -> &'static str {
        match self {
            Opt::BatchPrefetch => "batch-prefetch",
            Opt::HeaderPrefetch => "header-prefetch",
            Opt::SweepPrefetch => "sweep-prefetch",
            Opt::LastFlow => "last-flow",
            Opt::HugePages => "huge-pages",
            Opt::ActiveSweep => "active-sweep",
            Opt::FlowWindows => "flow-windows",
            Opt::Prefault => "prefault",
            Opt::MatchCache => "match-cache",
            Opt::All => "all",
        }
    }

    /// `t` with this optimization off.
    fn off(self, mut t: Tuning) -> Tuning {
        let flag = match self {
            Opt::BatchPrefetch => &mut t.batch_prefetch,
            Opt::HeaderPrefetch => &mut t.header_prefetch,
            Opt::SweepPrefetch => &mut t.sweep_prefetch,
            Opt::LastFlow => &mut t.last_flow,
            Opt::HugePages => &mut t.huge_pages,
            Opt::ActiveSweep => &mut t.active_sweep,
            Opt::FlowWindows => &mut t.flow_windows,
            Opt::Prefault => &mut t.prefault,
            Opt::MatchCache => &mut t.match_cache,
            Opt::All => return Tuning::NONE,
        };
        *flag = false;
        t
    }
}

/// The tuning left when `off` are switched off.
fn tuning_without(off: &[Opt]) -> Tuning {
    off.iter().fold(Tuning::ALL, |t, o| o.off(t))
}

/// `--dos-threshold`: bytes, or chosen by the cost model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DosThreshold {
    Bytes(u32),
    Auto,
}

pub fn parse_dos_threshold(s: &str) -> Result<DosThreshold, String> {
    match s.trim() {
        "off" => Ok(DosThreshold::Bytes(0)),
        "auto" => Ok(DosThreshold::Auto),
        n => match n.parse::<u32>() {
            Ok(b) if b <= clarion_engine::DOS_MAX_THRESHOLD => Ok(DosThreshold::Bytes(b)),
            Ok(b) => Err(format!(
                "{b} bytes is above the filter's largest threshold, {}",
                clarion_engine::DOS_MAX_THRESHOLD
            )),
            Err(_) => Err(format!("`{s}` is not a number of bytes, 'auto' or 'off'")),
        },
    }
}

/// What the timed loop saw.
struct Measured {
    pinned: Result<usize, String>,
    /// Packets timed (the primed ones not counted).
    packets: usize,
    elapsed: Duration,
    /// ns per packet of each batch, sweeps excluded.
    per_packet_ns: Vec<f64>,
    /// ns of each epoch's sweep.
    sweep_ns: Vec<u64>,
    epochs_over_budget: u64,
    /// ns from the end of the previous sweep (or the start) to the end of each epoch's sweep.
    epoch_ns: Vec<u64>,
    /// Times the kernel took the core from the loop during each epoch
    /// (involuntary context switches; empty where the count is unavailable).
    preempted: Vec<u32>,
    counters: Counters,
    reports: Vec<Report>,
    /// The monitor after the run (for queries such as the DoS threshold).
    monitor: Monitor,
    /// Page faults the measuring thread took inside the timed loop (each
    /// a stall of microseconds); `None` where the count is unavailable.
    page_faults: Option<u64>,
}

impl Measured {
    /// Epochs in which the kernel took the core from the loop at least once.
    fn epochs_preempted(&self) -> usize {
        self.preempted.iter().filter(|&&p| p > 0).count()
    }
}

/// Page faults (minor and major) this thread has taken so far; `None`
/// where the kernel does not count them per thread.
pub(crate) fn thread_page_faults() -> Option<u64> {
    thread_usage().map(|u| u64::try_from(u.ru_minflt).unwrap_or(0) + u64::try_from(u.ru_majflt).unwrap_or(0))
}

/// Involuntary context switches of the calling thread so far: the times
/// the kernel gave its core to something else.
fn thread_preemptions() -> Option<u64> {
    thread_usage().map(|u| u64::try_from(u.ru_nivcsw).unwrap_or(0))
}

/// The calling thread's resource usage; `None` where unavailable.
fn thread_usage() -> Option<libc::rusage> {
    #[cfg(target_os = "linux")]
    {
        let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `u` is a writable, properly sized rusage; getrusage only
        // writes it, and on success (0) every field is initialized.
        let r = unsafe { libc::getrusage(libc::RUSAGE_THREAD, u.as_mut_ptr()) };
        if r != 0 {
            return None;
        }
        // SAFETY: getrusage succeeded, so it filled the structure.
        Some(unsafe { u.assume_init() })
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// The process's resident memory at one moment, from `/proc/self/status`
/// (Linux; `None` elsewhere).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Rss {
    /// VmRSS: resident now, bytes.
    pub(crate) now: Option<u64>,
    /// VmHWM: the most resident so far, bytes.
    pub(crate) peak: Option<u64>,
    /// Bytes the allocator has handed out and not had back (glibc's
    /// `mallinfo2`, every arena: in-use chunks plus mmapped blocks); the
    /// rest of the resident heap is free memory it keeps.
    pub(crate) heap: Option<u64>,
}

impl Rss {
    pub(crate) fn now() -> Rss {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| {
            let line = status.lines().find(|l| l.starts_with(name))?;
            let kb: u64 = line[name.len()..]
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some(kb * 1024)
        };
        Rss {
            now: field("VmRSS:"),
            peak: field("VmHWM:"),
            heap: heap_in_use(),
        }
    }

    /// [`Rss::now`] once the allocator has given back what it holds free
    /// (glibc's `malloc_trim`: the generator's working memory), so that what
    /// the process grows by afterwards is new memory.
    pub(crate) fn settled() -> Rss {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only returns free memory to the kernel; it
        // touches no allocated block.
        unsafe {
            libc::malloc_trim(0);
        }
        Rss::now()
    }
}

/// See [`Rss::heap`].
fn heap_in_use() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's statistics.
        let m = unsafe { libc::mallinfo2() };
        Some((m.uordblks + m.hblkhd) as u64)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

/// The monitor's memory in a run: the process's resident memory before the
/// monitor was made (the workload already in memory) and after the run.
struct Memory {
    before: Rss,
    after: Rss,
    /// The flow table's capacity.
    capacity: usize,
}

impl Memory {
    /// What the monitor holds resident: the growth from before to after.
    fn monitor_bytes(&self) -> Option<u64> {
        Some(self.after.now?.saturating_sub(self.before.now?))
    }

    /// What the monitor has allocated and not freed: the allocator's growth.
    fn monitor_heap_bytes(&self) -> Option<u64> {
        Some(self.after.heap?.saturating_sub(self.before.heap?))
    }
}

/// The monitor's heap by part ([`clarion_engine::Monitor::memory`]), bytes.
fn memory_parts(u: &clarion_engine::MemoryUse) -> serde_json::Value {
    json!({
        "flow_slots": u.flow_slots,
        "flow_entries": u.flow_entries,
        "tcp_states": u.tcp_states,
        "epoch_logs": u.epoch_logs,
        "histories": u.histories,
        "recent_values": u.recent_values,
        "sweep_reports": u.sweep_reports,
    })
}

/// The reference's verdict on a prefix.
#[derive(Default)]
struct Verified {
    packets: usize,
    windows: u64,
    reports: usize,
    /// Reports in one list and not the other (counted with multiplicity).
    differing: usize,
    elapsed: Duration,
}

const HOST: &str = "bench";

pub fn bench(a: &BenchArgs) -> Result<ExitCode, Failure> {
    if let Some(path) = &a.real.pcap {
        return crate::real::bench_pcap(&a.real, path, a.core, a.json);
    }
    if a.batch == 0 {
        return Err(Failure::Usage("clarion-lab: --batch must be at least 1".into()));
    }
    let (traffic, triggers) = a.workload.specs(a.packets.saturating_add(a.prime))?;
    let mut config = monitor_config(a, &traffic);
    let auto = choose_dos_threshold(a, &traffic, &triggers, &mut config)?;
    if a.ablation {
        return ablation(a, &traffic, &triggers, &config);
    }
    // The workload first, so that the monitor's memory is what the process
    // grows by from here to the end of the run.
    let workload = traffic.generate().map_err(usage)?;
    let before = Rss::settled();
    let (specs, monitor) = setup(&traffic, &triggers, &config)?;
    let keep = verified_until(a, &workload);
    let run = Run {
        batch: a.batch,
        raise_on_overrun: a.dos_auto_raise,
        keep_until: keep,
        prime: usize::try_from(a.prime).unwrap_or(usize::MAX),
    };
    let measured = measure_pinned(&workload, monitor, a.core, run)?;
    let memory = Memory {
        before,
        after: Rss::now(),
        capacity: config.flow_capacity,
    };
    let verified = verify_prefix(a, &workload, &specs, &measured, &config, triggers.interval_ns);
    let results = Results {
        a,
        traffic: &traffic,
        triggers: &triggers,
        workload: &workload,
        m: &measured,
        v: &verified,
        dos_initial: config.dos_threshold_bytes,
        auto: auto.as_ref(),
        memory: &memory,
    };
    Ok(results.report())
}

/// The flow capacity a run of `traffic` needs so that none of its ordinary
/// flows goes untracked, with flows forgotten after `timeout_ns` idle:
/// [`MonitorConfig`]'s default (1,048,576), or the active flows plus the
/// arrivals within the run or the timeout, whichever is shorter, and 10%.
/// Attack flows are not counted: a full table under attack is measured, and
/// the summary says so.
pub(crate) fn flow_capacity_for(traffic: &WorkloadSpec, timeout_ns: u64) -> usize {
    let run_s = traffic.packets as f64 / traffic.rate_pps.max(1) as f64;
    let live_s = run_s.min(timeout_ns as f64 / 1e9);
    let flows = f64::from(traffic.active_flows) + traffic.arrival_rate * live_s;
    let needed = (flows * 1.1) as usize + 1024;
    needed.max(MonitorConfig::default().flow_capacity)
}

/// The monitor configuration of `a`, its DoS threshold left to [`choose_dos_threshold`].
fn monitor_config(a: &BenchArgs, traffic: &WorkloadSpec) -> MonitorConfig {
    MonitorConfig {
        flow_capacity: a
            .flow_capacity
            .unwrap_or_else(|| flow_capacity_for(traffic, a.flow_timeout)),
        flow_timeout_ns: a.flow_timeout,
        history_windows: a.history_windows,
        synchronous_sweep: false,
        dos_filter_slots: a.dos_filter_slots,
        dos_auto_raise: a.dos_auto_raise,
        host: HOST.into(),
        tuning: tuning_without(&a.no_opt),
        ..MonitorConfig::default()
    }
}

/// Sets the DoS threshold of `config`: as given, or chosen by the cost model
/// (`--dos-threshold auto`, said on standard error and returned).
fn choose_dos_threshold(
    a: &BenchArgs,
    traffic: &WorkloadSpec,
    triggers: &TriggerSpec,
    config: &mut MonitorConfig,
) -> Result<Option<crate::dos::AutoThreshold>, Failure> {
    match a.dos_threshold {
        DosThreshold::Bytes(b) => {
            config.dos_threshold_bytes = b;
            Ok(None)
        }
        DosThreshold::Auto => {
            let choice = crate::dos::auto_threshold(traffic, triggers, config, a.batch, a.core)?;
            eprintln!("{}", choice.describe());
            config.dos_threshold_bytes = choice.threshold;
            Ok(Some(choice))
        }
    }
}

/// The timestamp of the last packet [`verify_prefix`] may compare: the
/// timed loop keeps the reports of the windows closed by then and drops
/// the others as a sink would consume them (at a million flows they are
/// millions, and would be most of the process's memory). `None`: none kept.
fn verified_until(a: &BenchArgs, workload: &Workload) -> Option<u64> {
    let prefix = usize::try_from(a.verify_prefix)
        .unwrap_or(usize::MAX)
        .min(workload.len());
    prefix.checked_sub(1).map(|last| workload.frames()[last].ts_ns)
}

/// Moves the reports of `out` whose window ended by `until` to `kept`, and drops the others.
#[inline(always)]
fn keep_reports(kept: &mut Vec<Report>, out: &mut Vec<Report>, until: Option<u64>) {
    match until {
        Some(t) => kept.extend(out.drain(..).filter(|r| r.window.end_ns <= t)),
        None => out.clear(),
    }
}

/// [`verify`] on the first `--verify-prefix` packets, or on none while the
/// DoS filter was on: the reference evaluator has none, so reports
/// legitimately differ.
fn verify_prefix(
    a: &BenchArgs,
    workload: &Workload,
    specs: &[EventSpec],
    measured: &Measured,
    config: &MonitorConfig,
    interval_ns: u64,
) -> Verified {
    let filtering = config.dos_threshold_bytes > 0 || measured.counters.dos_threshold_raises > 0;
    let prefix = if filtering {
        0
    } else {
        usize::try_from(a.verify_prefix)
            .unwrap_or(usize::MAX)
            .min(workload.len())
    };
    verify(workload, specs, prefix, &measured.reports, config, interval_ns)
}

/// The synthesized events, checked, and a monitor with all of them installed
/// whose sweep the caller drives. Not timed.
pub(crate) fn setup(
    traffic: &WorkloadSpec,
    triggers: &TriggerSpec,
    config: &MonitorConfig,
) -> Result<(Vec<EventSpec>, Monitor), Failure> {
    let set = triggers.synthesize(traffic).map_err(usage)?;
    let specs = clarion_lang::check(&set.text).map_err(|d| {
        Failure::Runtime(anyhow!(
            "the synthesized events do not check (a bug): {}",
            d.render("synthesized", &set.text, false)
        ))
    })?;
    let mut monitor = Monitor::new(config.clone());
    for s in specs.iter().cloned() {
        monitor
            .install(s)
            .map_err(|e| Failure::Runtime(anyhow!("cannot install a synthesized event (a bug): {e}")))?;
    }
    Ok((specs, monitor))
}

/// [`measure`] on a thread pinned to `core` (default: the last one allowed).
fn measure_pinned(
    workload: &Workload,
    monitor: Monitor,
    core: Option<usize>,
    run: Run,
) -> Result<Measured, Failure> {
    std::thread::scope(|s| {
        s.spawn(move || {
            let pinned = pin(core);
            // As a live driver does before capture: commit the flow table
            // and the heap the monitor grows into over its first epochs.
            let mut monitor = monitor;
            monitor.prefault();
            measure(workload, monitor, pinned, run)
        })
        .join()
    })
    .map_err(|_| Failure::Runtime(anyhow!("the measured loop panicked")))
}

/// What one timed run over a workload gave, for other commands
/// (`clarion-lab feasibility`): the same loop and figures as `clarion-lab bench`.
pub struct PointRun {
    /// Median over batches of ns per packet (parse + match-and-scatter), sweeps excluded.
    pub ns_per_packet_median: f64,
    /// Mean over batches of the same.
    pub ns_per_packet_mean: f64,
    /// p99 of the sweep time over the epochs after the warm-up, in ns.
    pub sweep_p99_ns: u64,
    /// Mean of the same, in ns.
    pub sweep_mean_ns: f64,
    /// Mean over the epochs after the warm-up of the time their packets and sweep took, in ns.
    pub epoch_mean_ns: f64,
    /// The longest of the same, in ns.
    pub epoch_max_ns: u64,
    /// That longest epoch: its number after the warm-up and its sweep's ns.
    pub epoch_max_at: (usize, u64),
    /// Times the kernel took the core from the loop during that epoch
    /// (`None` where the count is unavailable).
    pub epoch_max_preempted: Option<u32>,
    /// The largest backlog a live monitor would have built, in ns: epochs
    /// over budget add their excess, epochs under it work it off (a queue
    /// fed at the nominal rate and served by this core).
    pub backlog_max_ns: u64,
    /// The monitor's counters at the end of the run.
    pub counters: Counters,
    /// Epochs after the warm-up.
    pub epochs: usize,
    /// Epochs after the warm-up whose packets and sweep took longer than the epoch at the workload's rate.
    pub epochs_over_budget: u64,
    /// Of those, the epochs during which the kernel took the core from the
    /// loop at least once (an involuntary context switch): over budget
    /// perhaps because of the machine, not the monitor. Still counted above.
    pub epochs_over_budget_preempted: u64,
    /// Warm-up epochs over budget (not counted above).
    pub warmup_over_budget: u64,
    /// The core the loop ran on, or why it was not pinned.
    pub pinned: Result<usize, String>,
}

/// Generates the workload and times the monitor over it exactly as
/// `clarion-lab bench` does (default monitor configuration, no verification).
/// The first `warmup` epochs (cold start: every flow new, memory untouched)
/// are left out of the sweep figure and the epochs over budget. The first
/// `prime` packets of `traffic` go through the monitor, sweeps included,
/// before the clock starts, and count nowhere: with many active flows they
/// let it meet the flows active at the start, which a monitor that has run
/// for a while knows (else most of a run's packets would be new flows).
pub fn measure_point(
    traffic: &WorkloadSpec,
    triggers: &TriggerSpec,
    batch: usize,
    core: Option<usize>,
    warmup: usize,
    prime: usize,
) -> Result<PointRun, Failure> {
    let config = MonitorConfig {
        synchronous_sweep: false,
        host: HOST.into(),
        flow_capacity: flow_capacity_for(traffic, MonitorConfig::default().flow_timeout_ns),
        ..MonitorConfig::default()
    };
    let workload = traffic.generate().map_err(usage)?;
    measure_primed(
        &workload,
        traffic,
        triggers,
        &config,
        (batch, core),
        warmup,
        prime,
    )
}

/// [`measure_point`] over a workload already generated, with a given
/// monitor configuration (its sweep is driven by the loop whatever
/// `synchronous_sweep` says).
pub fn measure_workload(
    workload: &Workload,
    traffic: &WorkloadSpec,
    triggers: &TriggerSpec,
    config: &MonitorConfig,
    batch: usize,
    core: Option<usize>,
    warmup: usize,
) -> Result<PointRun, Failure> {
    measure_primed(workload, traffic, triggers, config, (batch, core), warmup, 0)
}

/// [`measure_workload`] with the first `prime` packets untimed (see [`measure_point`]).
fn measure_primed(
    workload: &Workload,
    traffic: &WorkloadSpec,
    triggers: &TriggerSpec,
    config: &MonitorConfig,
    (batch, core): (usize, Option<usize>),
    warmup: usize,
    prime: usize,
) -> Result<PointRun, Failure> {
    let config = MonitorConfig {
        synchronous_sweep: false,
        ..config.clone()
    };
    let (_, monitor) = setup(traffic, triggers, &config)?;
    let run = Run {
        batch: batch.max(1),
        raise_on_overrun: false,
        keep_until: None,
        prime,
    };
    let m = measure_pinned(workload, monitor, core, run)?;
    let mut per = m.per_packet_ns;
    let mean = per.iter().sum::<f64>() / per.len().max(1) as f64;
    per.sort_by(f64::total_cmp);
    let mut sw = m.sweep_ns.get(warmup..).unwrap_or_default().to_vec();
    sw.sort_unstable();
    let sweep_mean_ns = sw.iter().sum::<u64>() as f64 / sw.len().max(1) as f64;
    let epoch = triggers.interval_ns;
    let over = |e: &[u64]| e.iter().filter(|&&t| t > epoch).count() as u64;
    let (cold, warm) = m.epoch_ns.split_at(warmup.min(m.epoch_ns.len()));
    let longest = warm.iter().enumerate().max_by_key(|&(_, &e)| e);
    Ok(PointRun {
        ns_per_packet_median: percentile(&per, 0.5),
        ns_per_packet_mean: mean,
        sweep_p99_ns: percentile(&sw, 0.99),
        sweep_mean_ns,
        epoch_mean_ns: warm.iter().sum::<u64>() as f64 / warm.len().max(1) as f64,
        epoch_max_ns: longest.map_or(0, |(_, &e)| e),
        epoch_max_at: longest.map_or((0, 0), |(n, _)| {
            (n, m.sweep_ns.get(warmup + n).copied().unwrap_or(0))
        }),
        backlog_max_ns: warm
            .iter()
            .scan(0u64, |backlog, &e| {
                *backlog = (*backlog + e).saturating_sub(epoch);
                Some(*backlog)
            })
            .max()
            .unwrap_or(0),
        counters: m.counters,
        epochs: warm.len(),
        epochs_over_budget: over(warm),
        epochs_over_budget_preempted: warm
            .iter()
            .enumerate()
            .filter(|&(n, &e)| e > epoch && m.preempted.get(warmup + n).is_some_and(|&p| p > 0))
            .count() as u64,
        epoch_max_preempted: longest.and_then(|(n, _)| m.preempted.get(warmup + n).copied()),
        warmup_over_budget: over(cold),
        pinned: m.pinned,
    })
}

/// Pins the calling thread; the core, or why not.
pub(crate) fn pin(core: Option<usize>) -> Result<usize, String> {
    let ids = core_affinity::get_core_ids().ok_or("cannot list the cores this process may use")?;
    let id = match core {
        Some(c) => ids
            .into_iter()
            .find(|i| i.id == c)
            .ok_or_else(|| format!("core {c} is not one this process may use"))?,
        None => *ids.last().ok_or("no core is available")?,
    };
    if core_affinity::set_for_current(id) {
        Ok(id.id)
    } else {
        Err(format!("sched_setaffinity to core {} failed", id.id))
    }
}

/// An empty vector with room for `n` values, its memory written once (with
/// `fill`, not 0, which the allocator may hand over unwritten), so that
/// filling it inside the timed loop takes no page fault.
fn committed<T: Clone>(n: usize, fill: T) -> Vec<T> {
    let mut v = vec![fill; n];
    v.clear();
    v
}

/// How many frames ahead of the one it parses the timed loop prefetches
/// (`Tuning::header_prefetch`). The frames stream from memory, as from a
/// NIC's ring: at 4 frames ahead the header's load still stalled parsing
/// (8: 32.1 ns a packet, 16: 31.9, 32: 31.4-31.7, 64: 31.9, 128: 32.3;
/// 34.2 without; the same run). Prefetching a whole batch at once, when
/// the batch before it began, was slower than none (37.1 ns).
const HEADER_PREFETCH_AHEAD: usize = 32;

/// How the timed loop runs.
#[derive(Clone, Copy, Debug)]
struct Run {
    /// Frames per batch.
    batch: usize,
    /// Each epoch over budget raises the monitor's DoS threshold, as a
    /// late sweep would on a live link.
    raise_on_overrun: bool,
    /// Reports of windows ended by then are kept, the others dropped ([`keep_reports`]).
    keep_until: Option<u64>,
    /// Frames processed (sweeps included) before the clock starts, counted nowhere.
    prime: usize,
}

/// The timed loop. See the module documentation and [`Run`]. Never inlined, so a profiler can count it
/// alone (`valgrind --tool=callgrind --toggle-collect='clarion_lab::bench::measure'`).
#[inline(never)]
fn measure(w: &Workload, mut monitor: Monitor, pinned: Result<usize, String>, run: Run) -> Measured {
    let Run {
        batch,
        raise_on_overrun,
        keep_until,
        prime,
    } = run;
    let mut out = Vec::new();
    let mut reports = Vec::new();
    let mut records = vec![PacketRecord::default(); batch];
    let prime = prime.min(w.len());
    let primer = Frames {
        bytes: w.bytes(),
        frames: &w.frames()[..prime],
        prefetch_headers: false,
    };
    for (c, chunk) in primer.frames.chunks(batch).enumerate() {
        primer.process(c * batch, chunk, &mut records, &mut monitor, &mut out);
        if monitor.sweep_pending() {
            monitor.sweep_step(usize::MAX, &mut out);
        }
        keep_reports(&mut reports, &mut out, keep_until);
    }
    let frames = Frames {
        bytes: w.bytes(),
        frames: &w.frames()[prime..],
        prefetch_headers: monitor.tuning().header_prefetch,
    };
    let mut samples = Samples::committed(frames.frames, batch, monitor.epoch_ns());
    let start = Instant::now();
    let mut batch_start = start;
    let mut epoch_start = start; // when the packets of the running epoch began

    // Frames are parsed in place into the batch's slots (no copy per record).
    let faults_before = thread_page_faults();
    for (c, chunk) in frames.frames.chunks(batch).enumerate() {
        let mut swept = Duration::ZERO; // sweep time inside this batch
        frames.process(c * batch, chunk, &mut records, &mut monitor, &mut out);
        if monitor.sweep_pending() {
            swept = samples.sweep(&mut monitor, &mut epoch_start, raise_on_overrun, &mut out);
            keep_reports(&mut reports, &mut out, keep_until);
        }
        let now = Instant::now();
        let busy = (now - batch_start).saturating_sub(swept);
        samples
            .per_packet_ns
            .push(busy.as_nanos() as f64 / chunk.len() as f64);
        batch_start = now;
    }
    let elapsed = batch_start - start;
    let page_faults = thread_page_faults()
        .zip(faults_before)
        .map(|(after, before)| after.saturating_sub(before));
    keep_reports(&mut reports, &mut out, keep_until);
    Measured {
        pinned,
        packets: frames.frames.len(),
        elapsed,
        per_packet_ns: samples.per_packet_ns,
        sweep_ns: samples.sweep_ns,
        epochs_over_budget: samples.epochs_over_budget,
        epoch_ns: samples.epoch_ns,
        preempted: samples.preempted,
        counters: monitor.counters(),
        reports,
        monitor,
        page_faults,
    }
}

/// The frames of the timed loop, as the workload holds them.
struct Frames<'a> {
    bytes: &'a [u8],
    frames: &'a [FrameRef],
    /// Prefetch each frame's header [`HEADER_PREFETCH_AHEAD`] frames earlier.
    prefetch_headers: bool,
}

impl Frames<'_> {
    /// Parses `chunk`, the frames from index `first` on, into `records` and
    /// hands them to the monitor in order, unparsed frames between them.
    #[inline(always)]
    fn process(
        &self,
        first: usize,
        chunk: &[FrameRef],
        records: &mut [PacketRecord],
        monitor: &mut Monitor,
        out: &mut Vec<Report>,
    ) {
        let mut n = 0;
        for (j, f) in chunk.iter().enumerate() {
            if let Some(g) = self
                .frames
                .get(first + j + HEADER_PREFETCH_AHEAD)
                .filter(|_| self.prefetch_headers)
            {
                clarion_engine::prefetch(self.bytes.as_ptr().wrapping_add(g.offset as usize));
            }
            let at = f.offset as usize;
            let (Some(data), Some(slot)) = (self.bytes.get(at..at + f.len as usize), records.get_mut(n))
            else {
                continue;
            };
            let why = match parse_frame_into(LinkType::Ethernet, data, f.ts_ns, f.len, slot) {
                Ok(()) => {
                    n += 1;
                    continue;
                }
                Err(e) if e.is_not_ip() => Unparsed::NotIp,
                Err(_) => Unparsed::Malformed,
            };
            // Keep the order: the packets before this frame first.
            monitor.process_batch(&records[..n], out);
            n = 0;
            monitor.note_unparsed(f.ts_ns, why, out);
        }
        monitor.process_batch(&records[..n], out);
    }
}

/// What the timed loop records, its memory committed before the loop.
struct Samples {
    /// ns per packet of each batch, sweeps excluded.
    per_packet_ns: Vec<f64>,
    /// ns of each epoch's sweep.
    sweep_ns: Vec<u64>,
    /// ns from the end of the previous sweep (or the start) to the end of each epoch's sweep.
    epoch_ns: Vec<u64>,
    /// Involuntary context switches in each epoch ([`Measured::preempted`]).
    preempted: Vec<u32>,
    /// The thread's count of involuntary context switches at the end of the last epoch.
    switches: Option<u64>,
    epochs_over_budget: u64,
}

impl Samples {
    /// Room for every batch of `batch` of `frames` and every epoch of `epoch` ns they span.
    fn committed(frames: &[FrameRef], batch: usize, epoch: u64) -> Samples {
        let span = match (frames.first(), frames.last()) {
            (Some(a), Some(b)) => b.ts_ns.saturating_sub(a.ts_ns),
            _ => 0,
        };
        let epochs = usize::try_from(span / epoch.max(1)).unwrap_or(0) + 2;
        Samples {
            per_packet_ns: committed(frames.len() / batch + 1, 1.0),
            sweep_ns: committed(epochs, 1u64),
            epoch_ns: committed(epochs, 1u64),
            preempted: committed(epochs, 1u32),
            switches: thread_preemptions(),
            epochs_over_budget: 0,
        }
    }

    /// Runs the pending sweep to completion and records it and its epoch
    /// (begun at `epoch_start`, which moves to its end); the sweep's time.
    #[inline(always)]
    fn sweep(
        &mut self,
        monitor: &mut Monitor,
        epoch_start: &mut Instant,
        raise_on_overrun: bool,
        out: &mut Vec<Report>,
    ) -> Duration {
        let s0 = Instant::now();
        monitor.sweep_step(usize::MAX, out);
        let s1 = Instant::now();
        self.sweep_ns.push((s1 - s0).as_nanos() as u64);
        self.epoch_ns.push((s1 - *epoch_start).as_nanos() as u64);
        // One getrusage an epoch (about a microsecond): whether the kernel
        // took the core says whether an epoch over budget was the
        // monitor's or the machine's.
        let switches = thread_preemptions();
        if let (Some(now), Some(before)) = (switches, self.switches) {
            self.preempted
                .push(u32::try_from(now.saturating_sub(before)).unwrap_or(u32::MAX));
        }
        self.switches = switches;
        if (s1 - *epoch_start).as_nanos() > u128::from(monitor.epoch_ns()) {
            self.epochs_over_budget += 1;
            if raise_on_overrun {
                monitor.raise_dos_threshold();
            }
        }
        *epoch_start = s1;
        s1 - s0
    }
}

/// One variant of `--ablation`: its name and medians over rounds.
struct Variant {
    name: String,
    tuning: Tuning,
    runs: Vec<(Figures, u64)>,
}

impl Variant {
    /// All on, each optimization off in turn, all off.
    fn all() -> Vec<Variant> {
        std::iter::once(("all on".to_string(), Tuning::ALL))
            .chain(
                Opt::EACH
                    .iter()
                    .map(|o| (format!("no {}", o.name()), o.off(Tuning::ALL))),
            )
            .chain(std::iter::once(("all off".to_string(), Tuning::NONE)))
            .map(|(name, tuning)| Variant {
                name,
                tuning,
                runs: Vec::new(),
            })
            .collect()
    }

    /// Median over rounds of one figure.
    fn median(&self, f: impl Fn(&Figures, u64) -> f64) -> f64 {
        let mut v: Vec<f64> = self.runs.iter().map(|(x, over)| f(x, *over)).collect();
        v.sort_by(f64::total_cmp);
        percentile(&v, 0.5)
    }

    /// The medians of the table.
    fn medians(&self) -> Medians {
        Medians {
            mpps: self.median(|f, _| f.pps / 1e6),
            mean: self.median(|f, _| f.mean),
            median: self.median(|f, _| f.median),
            sweep_us: self.median(|f, _| f.sweep_median as f64 / 1e3),
            sweep_p99_us: self.median(|f, _| f.sweep_p99 as f64 / 1e3),
            over: self.median(|_, o| o as f64),
        }
    }
}

/// A variant's medians over rounds.
struct Medians {
    mpps: f64,
    /// ns per packet.
    mean: f64,
    median: f64,
    sweep_us: f64,
    sweep_p99_us: f64,
    /// Epochs over budget.
    over: f64,
}

/// `--ablation`: the workload with every optimization on, each off in
/// turn and all off, in interleaved rounds (so drift on a shared machine
/// hits every variant alike); medians over rounds, as ratios.
fn ablation(
    a: &BenchArgs,
    traffic: &WorkloadSpec,
    triggers: &TriggerSpec,
    base: &MonitorConfig,
) -> Result<ExitCode, Failure> {
    let mut variants = Variant::all();
    let workload = traffic.generate().map_err(usage)?;
    let runs = Ablation {
        a,
        traffic,
        triggers,
        base,
        workload: &workload,
    };
    // A first, unrecorded run touches the frames and warms the allocator,
    // which would otherwise count against whichever variant runs first.
    runs.measure(base)?;
    let rounds = a.rounds.max(1);
    for round in 1..=rounds {
        runs.round(&mut variants, round, rounds)?;
    }
    let (on, off) = match (variants.first(), variants.last()) {
        (Some(on), Some(off)) => (on.medians(), off.medians()),
        _ => return Err(Failure::Runtime(anyhow!("no variant ran"))),
    };
    let rows: Vec<(String, Medians)> = variants.iter().map(|v| (v.name.clone(), v.medians())).collect();
    let table = ablation_table(&rows, &on, &off);
    // The table goes to standard output, unless the JSON object does.
    if !a.json {
        print!("{table}");
        return Ok(ExitCode::SUCCESS);
    }
    eprint!("{table}");
    let rows: Vec<_> = rows
        .iter()
        .map(|(name, m)| ablation_json(name, m, &on, &off))
        .collect();
    println!(
        "{}",
        json!({
            "schema": "clarion.bench.ablation/1",
            "packets": workload.len(),
            "rounds": rounds,
            "batch": a.batch,
            "variants": rows,
        })
    );
    Ok(ExitCode::SUCCESS)
}

/// What every run of `--ablation` shares.
struct Ablation<'a> {
    a: &'a BenchArgs,
    traffic: &'a WorkloadSpec,
    triggers: &'a TriggerSpec,
    base: &'a MonitorConfig,
    workload: &'a Workload,
}

impl Ablation<'_> {
    /// One timed run with `config`.
    fn measure(&self, config: &MonitorConfig) -> Result<Measured, Failure> {
        let (_, monitor) = setup(self.traffic, self.triggers, config)?;
        let run = Run {
            batch: self.a.batch,
            raise_on_overrun: self.a.dos_auto_raise,
            keep_until: None,
            prime: usize::try_from(self.a.prime).unwrap_or(usize::MAX),
        };
        measure_pinned(self.workload, monitor, self.a.core, run)
    }

    /// Round `round` of `rounds`: every variant once, each with its progress line.
    fn round(&self, variants: &mut [Variant], round: usize, rounds: usize) -> Result<(), Failure> {
        // Rotate the order each round, so no variant always follows the same one.
        let n = variants.len();
        for k in 0..n {
            let v = &mut variants[(k + round - 1) % n];
            let config = MonitorConfig {
                tuning: v.tuning,
                ..self.base.clone()
            };
            let m = self.measure(&config)?;
            let f = Figures::of(&m, m.packets);
            eprintln!(
                "clarion-lab bench: round {round}/{rounds}, {:<18} {:.2} Mpps, sweep median {:.1} us",
                v.name,
                f.pps / 1e6,
                f.sweep_median as f64 / 1e3
            );
            v.runs.push((f, m.epochs_over_budget));
        }
        Ok(())
    }
}

/// The table of `--ablation`. Columns: throughput and its ratio to all off
/// (the naive baseline) and to all on (how much this optimization gives);
/// sweep figures and the sweep's ratio to all on.
fn ablation_table(rows: &[(String, Medians)], on: &Medians, off: &Medians) -> String {
    let mut table = format!(
        "{:<20} {:>7} {:>8} {:>8} {:>8} {:>9} {:>9} {:>6} {:>9} {:>9}\n",
        "variant",
        "Mpps",
        "/all_off",
        "on/this",
        "ns/pkt",
        "sweep_us",
        "sweep_p99",
        "over",
        "sweep/on",
        "median_ns"
    );
    for (name, m) in rows {
        table += &format!(
            "{:<20} {:>7.2} {:>8.2} {:>8.2} {:>8.1} {:>9.1} {:>9.1} {:>6} {:>9.2} {:>9.1}\n",
            name,
            m.mpps,
            m.mpps / off.mpps,
            on.mpps / m.mpps,
            m.mean,
            m.sweep_us,
            m.sweep_p99_us,
            m.over,
            m.sweep_us / on.sweep_us,
            m.median,
        );
    }
    table
}

/// One variant of the `--ablation` JSON object: its medians and ratios.
fn ablation_json(name: &str, m: &Medians, on: &Medians, off: &Medians) -> serde_json::Value {
    json!({
        "variant": name,
        "mpps": m.mpps,
        "ns_per_packet_mean": m.mean,
        "ns_per_packet_median": m.median,
        "sweep_median_us": m.sweep_us,
        "sweep_p99_us": m.sweep_p99_us,
        "epochs_over_budget": m.over,
        "speedup_over_all_off": m.mpps / off.mpps,
        "all_on_over_this": on.mpps / m.mpps,
        "sweep_over_all_on": m.sweep_us / on.sweep_us,
    })
}

/// The reference evaluator on the first `prefix` packets, against the
/// monitor's reports of the windows that closed within them.
fn verify(
    w: &Workload,
    specs: &[EventSpec],
    prefix: usize,
    reports: &[Report],
    config: &MonitorConfig,
    interval_ns: u64,
) -> Verified {
    let inputs = reference_inputs(w, prefix);
    let (Some(first), Some(last)) = (inputs.first().map(Input::ts_ns), inputs.last().map(Input::ts_ns))
    else {
        return Verified::default();
    };
    let started = Instant::now();
    let expected = reference_reports(specs, &inputs, config);
    // Windows that closed within the prefix; the last one may still be open in either.
    let closed = |r: &&Report| r.window.end_ns <= last;
    let mut diff: HashMap<String, i64> = HashMap::new();
    for r in expected.iter().filter(closed) {
        *diff.entry(r.to_json().to_string()).or_default() += 1;
    }
    let mut compared = 0;
    for r in reports.iter().filter(closed) {
        *diff.entry(r.to_json().to_string()).or_default() -= 1;
        compared += 1;
    }
    let interval = interval_ns.max(1);
    let windows = (last / interval).saturating_sub(first.div_ceil(interval));
    Verified {
        packets: inputs.len(),
        windows,
        reports: compared,
        differing: diff.values().map(|d| d.unsigned_abs() as usize).sum(),
        elapsed: started.elapsed(),
    }
}

/// The first `prefix` frames of `w` as the reference evaluator takes them.
fn reference_inputs(w: &Workload, prefix: usize) -> Vec<Input> {
    (0..prefix)
        .filter_map(|i| w.frame(i))
        .map(
            |(d, ts)| match parse_frame(LinkType::Ethernet, d, ts, d.len() as u32) {
                Ok(r) => Input::Packet(r),
                Err(e) if e.is_not_ip() => Input::NotIp { ts_ns: ts },
                Err(_) => Input::Malformed { ts_ns: ts },
            },
        )
        .collect()
}

/// The reference evaluator's reports of `specs` over `inputs`, with the
/// monitor's configuration; the events (independent) split over the cores.
fn reference_reports(specs: &[EventSpec], inputs: &[Input], config: &MonitorConfig) -> Vec<Report> {
    let rc = Config {
        flow_timeout_ns: config.flow_timeout_ns,
        burst_gap_ns: config.burst_gap_ns,
        max_first_transmissions: config.tcp_segment_limit,
        host: config.host.clone(),
        worker: config.worker,
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = specs.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = specs
            .chunks(chunk)
            .map(|part| s.spawn(|| evaluate(part, inputs, &rc)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

struct Results<'a> {
    a: &'a BenchArgs,
    traffic: &'a WorkloadSpec,
    triggers: &'a TriggerSpec,
    workload: &'a Workload,
    m: &'a Measured,
    v: &'a Verified,
    /// The DoS threshold the run started with.
    dos_initial: u32,
    auto: Option<&'a crate::dos::AutoThreshold>,
    memory: &'a Memory,
}

struct Figures {
    pps: f64,
    mean: f64,
    median: f64,
    p99: f64,
    sweep_median: u64,
    sweep_p99: u64,
    sweep_max: u64,
}

impl Figures {
    /// The figures of a run over `packets` packets.
    fn of(m: &Measured, packets: usize) -> Figures {
        let mut per = m.per_packet_ns.clone();
        per.sort_by(f64::total_cmp);
        let mut sw = m.sweep_ns.clone();
        sw.sort_unstable();
        let secs = m.elapsed.as_secs_f64();
        let n = packets as f64;
        Figures {
            pps: if secs > 0.0 { n / secs } else { 0.0 },
            mean: if n > 0.0 { secs * 1e9 / n } else { 0.0 },
            median: percentile(&per, 0.5),
            p99: percentile(&per, 0.99),
            sweep_median: percentile(&sw, 0.5),
            sweep_p99: percentile(&sw, 0.99),
            sweep_max: sw.last().copied().unwrap_or(0),
        }
    }
}

impl Results<'_> {
    fn figures(&self) -> Figures {
        Figures::of(self.m, self.m.packets)
    }

    /// Prints the summary, its warnings and `--json`'s object; exit status 1
    /// if any report differed from the reference evaluator's.
    fn report(&self) -> ExitCode {
        let v = self.v;
        eprintln!("{}", self.summary());
        if v.packets > 0 && v.windows == 0 {
            eprintln!(
                "clarion-lab: warning: the first {} packets span no complete {} ms window, so no report was verified; raise --verify-prefix",
                thousands(v.packets as u64),
                self.triggers.interval_ns as f64 / 1e6
            );
        }
        let c = &self.m.counters;
        if c.packets_untracked > 0 {
            eprintln!(
                "clarion-lab: warning: {} packets were not tracked (no trigger saw them): the flow table was full \
                 at {} flows; raise --flow-capacity",
                thousands(c.packets_untracked),
                thousands(self.memory.capacity as u64)
            );
        }
        if self.a.json {
            println!("{}", self.json());
        }
        if v.differing > 0 {
            eprintln!(
                "clarion-lab: {} reports differ between the monitor and the reference evaluator on the first {} packets",
                thousands(v.differing as u64),
                thousands(v.packets as u64)
            );
            return ExitCode::from(1);
        }
        ExitCode::SUCCESS
    }

    /// Whether the DoS filter was on at any time of the run.
    fn filtering(&self) -> bool {
        self.dos_initial > 0 || self.m.counters.dos_threshold_raises > 0
    }

    fn summary(&self) -> String {
        let f = self.figures();
        let c = &self.m.counters;
        let pinned = match &self.m.pinned {
            Ok(core) => format!("pinned to core {core}"),
            Err(why) => format!("NOT pinned ({why})"),
        };
        let (dos, verified) = (self.dos_summary(), self.verified_summary());
        let memory = match self.memory.monitor_bytes() {
            Some(b) => format!("{:.1} MiB resident", b as f64 / f64::from(1 << 20)),
            None => "memory unknown".into(),
        };
        format!(
            "clarion-lab bench: {}, {} triggers ({} per packet, {} patterns): {:.2} Mpps, {:.1} ns/packet \
             (median {:.1}, p99 {:.1} per {}-packet batch); sweep median {:.1} us, p99 {:.1} us, max {:.1} us; \
             {} sweeps ({} late, {} epochs over budget at {} pps, the core taken by the kernel in {}); {} reports{dos}; {} flows tracked, {memory}; \
             {verified}; {pinned}",
            self.packets_text(),
            thousands(u64::from(self.triggers.triggers)),
            self.triggers.per_packet,
            self.triggers.patterns,
            f.pps / 1e6,
            f.mean,
            f.median,
            f.p99,
            self.a.batch,
            f.sweep_median as f64 / 1e3,
            f.sweep_p99 as f64 / 1e3,
            f.sweep_max as f64 / 1e3,
            thousands(c.sweeps_completed),
            c.sweeps_late,
            self.m.epochs_over_budget,
            thousands(self.traffic.rate_pps),
            self.m.epochs_preempted(),
            thousands(c.reports),
            thousands(c.flows_active),
        )
    }

    /// The packets timed, and those primed before them.
    fn packets_text(&self) -> String {
        let timed = thousands(self.m.packets as u64);
        match self.a.prime {
            0 => format!("{timed} packets"),
            p => format!("{timed} packets after {} primed", thousands(p)),
        }
    }

    /// The summary's part on the DoS filter (empty when it was off).
    fn dos_summary(&self) -> String {
        let c = &self.m.counters;
        if !self.filtering() {
            return String::new();
        }
        format!(
            "; DoS threshold {} B (from {} B, {} raises{}), {} packets filtered",
            thousands(u64::from(self.m.monitor.dos_threshold())),
            thousands(u64::from(self.dos_initial)),
            c.dos_threshold_raises,
            if self.auto.is_some() {
                ", chosen by the model"
            } else {
                ""
            },
            thousands(c.packets_dos_filtered)
        )
    }

    /// The summary's part on the verification.
    fn verified_summary(&self) -> String {
        if self.v.packets > 0 {
            format!(
                "{} missed events in {} reports over the first {} packets",
                self.v.differing,
                thousands(self.v.reports as u64),
                thousands(self.v.packets as u64)
            )
        } else if self.filtering() {
            "not verified (DoS filter on: the reference evaluator has none)".into()
        } else {
            "not verified".into()
        }
    }

    fn json(&self) -> serde_json::Value {
        let f = self.figures();
        let c = &self.m.counters;
        json!({
            "schema": "clarion.bench/1",
            "workload": self.workload_json(),
            "triggers": {
                "count": self.triggers.triggers,
                "per_packet": self.triggers.per_packet,
                "patterns": self.triggers.patterns,
                "interval_ns": self.triggers.interval_ns,
            },
            "core": self.m.pinned.as_ref().ok(),
            "pin_error": self.m.pinned.as_ref().err(),
            "batch": self.a.batch,
            "prime": self.a.prime,
            "packets_timed": self.m.packets,
            "elapsed_s": self.m.elapsed.as_secs_f64(),
            "packets_per_s": f.pps,
            "ns_per_packet": { "mean": f.mean, "median": f.median, "p99": f.p99 },
            "sweep_ns": {
                "count": self.m.sweep_ns.len(),
                "median": f.sweep_median,
                "p99": f.sweep_p99,
                "max": f.sweep_max,
                "samples": self.m.sweep_ns,
            },
            "sweeps_completed": c.sweeps_completed,
            "sweeps_late": c.sweeps_late,
            "epochs_over_budget": self.m.epochs_over_budget,
            "epochs_preempted": self.m.epochs_preempted(),
            "page_faults": self.m.page_faults,
            "reports": c.reports,
            "flows_created": c.flows_created,
            "triggers_matched": c.triggers_matched,
            "packets_untracked": c.packets_untracked,
            "memory": self.memory_json(),
            "dos": self.dos_json(),
            "missed_events": self.v.differing,
            "verify": {
                "packets": self.v.packets,
                "windows": self.v.windows,
                "reports": self.v.reports,
                "differing": self.v.differing,
                "elapsed_s": self.v.elapsed.as_secs_f64(),
            },
        })
    }

    /// The monitor's memory: resident bytes before it was made and after the
    /// run, their difference, the peak, and the flows it tracked.
    fn memory_json(&self) -> serde_json::Value {
        let m = self.memory;
        json!({
            "rss_before_monitor_bytes": m.before.now,
            "rss_after_run_bytes": m.after.now,
            "monitor_rss_bytes": m.monitor_bytes(),
            "monitor_heap_bytes": m.monitor_heap_bytes(),
            "peak_rss_bytes": m.after.peak,
            "flow_capacity": m.capacity,
            "flows_tracked": self.m.counters.flows_active,
            "parts": memory_parts(&self.m.monitor.memory()),
        })
    }

    /// The workload as asked for and as generated.
    fn workload_json(&self) -> serde_json::Value {
        let t = self.traffic;
        let s = self.workload.stats();
        json!({
            "packets": s.packets,
            "rate_pps": t.rate_pps,
            "packet_size": t.packet_size,
            "active_flows": t.active_flows,
            "arrival_rate": t.arrival_rate,
            "flow_sizes": t.flow_sizes.to_string(),
            "burst": t.burst,
            "dos_fraction": t.dos_fraction,
            "dos_packets": t.dos_packets,
            "retransmit_fraction": t.retransmit_fraction,
            "seed": t.seed,
            "measured": {
                "mean_active_flows": s.mean_active_flows,
                "initial_flows": s.initial_flows,
                "arrivals": s.arrivals,
                "dos_packets": s.dos_packets,
                "dos_flows": s.dos_flows,
                "duration_ns": s.duration_ns,
            },
        })
    }

    fn dos_json(&self) -> serde_json::Value {
        let c = &self.m.counters;
        json!({
            "threshold_bytes": self.dos_initial,
            "final_threshold_bytes": self.m.monitor.dos_threshold(),
            "auto_raise": self.a.dos_auto_raise,
            "threshold_raises": c.dos_threshold_raises,
            "packets_filtered": c.packets_dos_filtered,
            "model": self.auto.map(crate::dos::AutoThreshold::json),
        })
    }
}
