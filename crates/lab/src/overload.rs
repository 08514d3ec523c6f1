//! `clarion-lab overload`: MONA's overload experiments (§VI-A/B) on the
//! real monitor, in a deterministic simulated queue.
//!
//! # Design
//!
//! 1. **Packets.** The capture's IP packets (frames that do not parse as
//!    IP are left out: the cost model has no price for them), looped in
//!    file order as often as the run needs ([`Loop`]). Copy `k` (from 0)
//!    has `k` XORed into both ports of every packet that has ports, or
//!    into the last two bytes of both addresses otherwise, so that each
//!    copy's flows are new flows while a conversation's two directions
//!    stay one conversation. Timestamps are replaced by the simulated
//!    arrival times plus [`BASE_NS`] (a multiple of every window length,
//!    so event windows and queue windows line up).
//! 2. **Arrivals.** `--load sine`: `clarion_overload::Sine` with mean
//!    `--mean-rate`, `--amplitude` and `--period` (MONA's 0 to 2× is
//!    amplitude 1); `constant`: `Constant`. Arrivals in `[0, --duration)`.
//! 3. **The sustainable rate** (for `--mean-load L`, mean rate = L × it):
//!    the rate at which the monitor's mean predicted service time equals
//!    the inter-arrival time. The predicted time of a packet depends a
//!    little on the rate (a flow pays its share of the sweep once per
//!    epoch it is active in, so more packets an epoch cost less each), so
//!    the rate is a fixed point: a calibration pass feeds the looped input
//!    straight to the monitor (no queue, nothing shed) at a low rate,
//!    takes the mean of `last_packet_cost_ns`, and repeats at the rate it
//!    gives until two passes agree within 0.5% (at most [`CALIBRATION_PASSES`]).
//! 4. **The queue.** `clarion_overload::simulate` with a ring of `--ring`
//!    waiting packets and windows of `--window`. The server
//!    ([`MonitorServer`]) wraps a monitor in degraded mode
//!    (`adapt: Some(AdaptConfig::default())`): serving processes the next
//!    packet and takes `⌈last_packet_cost_ns⌉` (at least 1 ns) as its
//!    service time; a drop advances the input and tells the monitor
//!    (`note_dropped`) once its clock reaches the drop's arrival time (at
//!    the next packet served after it in arrival order), so that the drop
//!    counts in the epoch it happened in, as a live driver's does where
//!    the ring marks the place of a loss. Told at once, the monitor would
//!    count it in the epoch it is serving, up to a ring's depth earlier.
//! 5. **Modes.** `adapt`: at each window's end the time available per
//!    packet for the next window is MONA §IV-B's, as a live worker
//!    computes it (`clarion_adapt::Budget`): the window over the packets
//!    expected in it, the queue left at its end included (`--forecast
//!    rise`, the default and the product's: the last window's arrivals
//!    plus their rise; `last`: MONA's, the last window's arrivals; no
//!    packet expected: infinite, nothing shed), handed to
//!    `Monitor::adapt_to` as soon as the monitor has swept the window's
//!    epoch, as a live worker decides at its sweep's end: at the window's
//!    end if every packet that arrived in it was served (the clock ticks
//!    there, as a live worker's does on a quiet ring), else at the first
//!    packet served after it. Within a window, relief
//!    (`clarion_adapt::Relief`, `Monitor::relieve`; off with
//!    `--no-relief`): after each block of packets served with the ring at
//!    least half full, more flows are bypassed at once if the block cost
//!    more than drains the ring. `static`: the same monitor,
//!    the same cost model, never adapted, so the only difference is
//!    adaptation.
//! 6. **Truth.** `clarion_reference::evaluate` over every packet that
//!    arrived (dropped ones included: a drop loses events too) gives the
//!    true reports. Per event and window with at least one true report,
//!    the true recall is |monitor's reports ∩ true| / |true| (matched on
//!    event, window start and group); satisfaction is the share of those
//!    windows with a true recall of at least [`SATISFIED`] (MONA §VI-B);
//!    the estimate error is |estimated − true| where the monitor's health
//!    stream gave an estimate for the window.
//!
//! # Invariants
//!
//! No clock and no randomness: the same flags give the same figures
//! (the JSON holds no wall time). Each mode sees the same arrivals and
//! the same packets; every arrival is served or dropped once.
//!
//! # Cost
//!
//! The capture once in memory; the arrival times (8 bytes a packet) and,
//! for the reference, every arrived packet (about 100 bytes a packet):
//! about 1 GB per 10 M packets. Time: the monitor once per mode and per
//! calibration pass, the reference once.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::anyhow;
use clap::{Args, ValueEnum};
use serde_json::{json, Value};

use clarion_adapt::{Budget, Relief};
use clarion_capture::PacketSource;
use clarion_engine::{AdaptConfig, Counters, EpochLoad, Health, Monitor, MonitorConfig, Report};
use clarion_lang::spec::EventSpec;
use clarion_overload::{simulate, Constant, Server, Sine, WindowStats};
use clarion_reference::Input;
use clarion_wire::PacketRecord;

use crate::{thousands, Failure};

/// Simulated time 0 as a packet timestamp: 2023-11-14T22:13:20Z, a
/// multiple of every window up to 100 s.
pub const BASE_NS: u64 = 1_700_000_000_000_000_000;

/// True recall at or above which a window counts as satisfied (MONA §VI-B's 75%).
pub const SATISFIED: f64 = 0.75;

/// Most calibration passes (each one runs the monitor over the input once).
const CALIBRATION_PASSES: usize = 6;

/// The rate of the first calibration pass, packets a second.
const CALIBRATION_START_PPS: f64 = 100_000.0;

/// Copies of the capture a run can hold: the XOR mask has 16 bits.
const MAX_COPIES: u64 = 1 << 16;

#[derive(Args, Debug)]
pub struct OverloadArgs {
    /// The capture to loop (pcap or pcapng).
    #[arg(long, value_name = "FILE")]
    pub pcap: PathBuf,

    /// Events the monitor runs (their `priority` orders the shedding).
    #[arg(long, value_name = "FILE")]
    pub events: PathBuf,

    /// Shape of the arrival rate over time.
    #[arg(long, value_enum, default_value_t = Load::Sine)]
    pub load: Load,

    /// Mean arrival rate, packets a second.
    #[arg(long, value_name = "PPS", conflicts_with = "mean_load")]
    pub mean_rate: Option<f64>,

    /// Mean arrival rate as a multiple of the sustainable rate (default 1.0).
    #[arg(long, value_name = "L")]
    pub mean_load: Option<f64>,

    /// Period of the sine.
    #[arg(long, default_value = "250ms", value_parser = clarion_cmdline::parse_duration, value_name = "D")]
    pub period: u64,

    /// Amplitude of the sine, relative to the mean (1: from 0 to twice the mean).
    #[arg(long, default_value_t = 1.0, value_name = "A")]
    pub amplitude: f64,

    /// Packets that can wait in the ring (the one in service not counted).
    #[arg(long, default_value_t = 4096, value_name = "N")]
    pub ring: usize,

    /// Adaptation window (and the per-window table's rows).
    #[arg(long, default_value = "10ms", value_parser = clarion_cmdline::parse_duration, value_name = "D")]
    pub window: u64,

    /// Adapt mode without relief within a window: the bypassed share is
    /// raised only at windows' ends, as MONA decides (to measure what the
    /// relief gives)
    #[arg(long)]
    pub no_relief: bool,

    /// Simulated time the arrivals span.
    #[arg(long, default_value = "1s", value_parser = clarion_cmdline::parse_duration, value_name = "D")]
    pub duration: u64,

    /// Which monitor to run: never adapted, adapted every window, or both.
    #[arg(long, value_enum, default_value_t = Mode::Both)]
    pub mode: Mode,

    /// The packets expected in the next window: the window's arrivals
    /// plus their rise over the window before (`rise`, what a live worker
    /// expects), or the window's arrivals alone (`last`, MONA's).
    #[arg(long, value_enum, default_value_t = Forecast::Rise)]
    pub forecast: Forecast,

    /// Accuracy control (MONA Alg. 2) in adapt mode: the recall each event
    /// should keep; 0 turns it off (MONA's "Adapt" against "Acc.Ctrl").
    #[arg(long, default_value_t = 0.75, value_name = "RECALL")]
    pub accuracy_threshold: f64,

    /// Print one JSON object (with the per-window table) on standard output.
    #[arg(long)]
    pub json: bool,

    /// Write one JSON line per mode, event and event window (schema
    /// clarion.overload-window/1): the queue's arrivals and drops, the shed
    /// depth and bypassed share, the true reports, the monitor's, how many
    /// of them were true and false, the true recall and the estimate, so
    /// that the estimator can be checked window by window.
    #[arg(long, value_name = "FILE")]
    pub windows: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Load {
    Sine,
    Constant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Forecast {
    Last,
    Rise,
}

impl Forecast {
    fn budget(self) -> Budget {
        Budget::new(match self {
            Forecast::Last => clarion_adapt::Forecast::Last,
            Forecast::Rise => clarion_adapt::Forecast::Rise,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Static,
    Adapt,
    Both,
}

// ---------------------------------------------------------------------
// The looped input.
// ---------------------------------------------------------------------

/// The capture's IP packets, looped with new flows per copy (module doc, 1).
pub struct Loop {
    packets: Vec<PacketRecord>,
}

impl Loop {
    pub fn new(packets: Vec<PacketRecord>) -> Self {
        Loop { packets }
    }

    /// Reads the capture's IP packets, as `clarion run` parses them.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let mut src = clarion_capture::open(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        let mut packets = Vec::new();
        while let Some(item) = src.next_packet() {
            let raw = item.map_err(|e| anyhow!("{}: {e}", path.display()))?;
            if let Ok(rec) = clarion_wire::parse_frame(raw.link, raw.data, raw.ts_ns, raw.orig_len) {
                packets.push(rec);
            }
        }
        Ok(Loop::new(packets))
    }

    pub fn len(&self) -> usize {
        self.packets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    /// Packet `i` of the looped stream, stamped `ts_ns`; `None` for an
    /// empty capture.
    pub fn packet(&self, i: u64, ts_ns: u64) -> Option<PacketRecord> {
        let n = self.packets.len() as u64;
        let at = usize::try_from(i.checked_rem(n)?).ok()?;
        let mut p = *self.packets.get(at)?;
        vary(&mut p, i / n);
        p.ts_ns = ts_ns;
        Some(p)
    }
}

/// Makes copy `copy`'s flows new flows (module doc, 1).
fn vary(p: &mut PacketRecord, copy: u64) {
    let m = (copy % MAX_COPIES) as u16;
    if m == 0 {
        return;
    }
    let k = &mut p.key;
    if k.has_ports() {
        k.src_port ^= m;
        k.dst_port ^= m;
    } else {
        // IPv4 sits in the first four bytes, IPv6 in all sixteen.
        let at = if k.is_ipv6() { 14 } else { 2 };
        let [hi, lo] = m.to_be_bytes();
        for a in [&mut k.src_ip, &mut k.dst_ip] {
            a[at] ^= hi;
            a[at + 1] ^= lo;
        }
    }
}

// ---------------------------------------------------------------------
// The monitor as the queue's server.
// ---------------------------------------------------------------------

/// One window of a run, as the table prints it.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub stats: WindowStats,
    /// The shedding in force during the window: steps + extra.
    pub shed_depth: f64,
    /// The share of flows bypassed during the window (not looked up).
    pub bypass: f64,
    /// The adaptation made at the window's end (adapt mode), if any.
    pub available_ns: Option<f64>,
    /// Its predicted processing time per packet (lookups and insertions
    /// not included), and whether even the lightest states miss the target.
    pub predicted_ns: Option<f64>,
    pub saturated: bool,
    /// The last swept epoch's load the decision was made from.
    pub load: Option<EpochLoad>,
    /// Reliefs given within the window (adapt mode: the ring filled).
    pub reliefs: u32,
}

/// The monitor in degraded mode behind the simulated queue.
pub struct MonitorServer<'a> {
    monitor: Monitor,
    input: &'a Loop,
    adapt: bool,
    budget: Budget,
    next: u64,
    reports: Vec<Report>,
    rows: Vec<Row>,
    /// Adapt mode: the time available for the window after the latest
    /// one to end, its row, and that window's end on the monitor's clock:
    /// decided as soon as the monitor has swept the epoch ending there.
    pending: Option<(f64, usize, u64)>,
    /// Arrival times of drops the monitor has not been told of yet: it is
    /// told when its clock reaches them (module doc, step 4).
    drops: std::collections::VecDeque<u64>,
    /// Adapt mode: relief within a window once the ring fills (module
    /// doc, step 5), and the ring's capacity; `None` without it.
    relief: Option<(Relief, usize)>,
    /// Reliefs given in the open window.
    reliefs: u32,
}

/// The monitor configuration of every pass: degraded mode with the default
/// cost model and accuracy control at `accuracy` (`None`: off), health
/// kept (it carries the recall estimates).
fn monitor_config(accuracy: Option<f64>) -> MonitorConfig {
    MonitorConfig {
        host: "overload".into(),
        keep_health: true,
        adapt: Some(AdaptConfig {
            accuracy_threshold: accuracy,
            ..AdaptConfig::default()
        }),
        ..MonitorConfig::default()
    }
}

fn new_monitor(specs: &[EventSpec], accuracy: Option<f64>) -> anyhow::Result<Monitor> {
    let mut m = Monitor::new(monitor_config(accuracy));
    for e in specs.iter().filter(|e| !e.on_demand) {
        m.install(e.clone())
            .map_err(|e| anyhow!("installing the events: {e}"))?;
    }
    Ok(m)
}

/// The service time of the packet the monitor just processed.
fn service_ns(m: &Monitor) -> u64 {
    // Saturating float-to-int; a service takes at least 1 ns.
    (m.last_packet_cost_ns().ceil() as u64).max(1)
}

impl<'a> MonitorServer<'a> {
    /// `relief`: in adapt mode, relief within a window over `window_ns`
    /// once a ring of `ring` packets fills (`None`: per-window decisions only).
    pub fn new(
        specs: &[EventSpec],
        input: &'a Loop,
        adapt: bool,
        forecast: Forecast,
        accuracy: Option<f64>,
        relief: Option<(u64, usize)>,
    ) -> anyhow::Result<Self> {
        Ok(MonitorServer {
            monitor: new_monitor(specs, accuracy)?,
            input,
            adapt,
            budget: forecast.budget(),
            next: 0,
            reports: Vec::new(),
            rows: Vec::new(),
            pending: None,
            drops: std::collections::VecDeque::new(),
            relief: relief
                .filter(|_| adapt)
                .map(|(window_ns, ring)| (Relief::new(window_ns), ring)),
            reliefs: 0,
        })
    }

    /// Adapt mode: the pending decision, once the epoch it waits for is
    /// swept (as a live worker decides at its sweep's end).
    fn decide_when_swept(&mut self) {
        let Some((available, row, end)) = self.pending else {
            return;
        };
        if self.monitor.closed_to() < end {
            return;
        }
        self.pending = None;
        let Some(row) = self.rows.get_mut(row) else { return };
        row.load = self.monitor.epoch_load();
        if let Some(d) = self.monitor.adapt_to(available) {
            row.predicted_ns = Some(d.predicted_ns);
            row.saturated = d.saturated;
        }
    }

    /// Tells the monitor of the drops that arrived up to `until_ns`.
    fn note_drops(&mut self, until_ns: u64) {
        let mut n = 0;
        while self.drops.front().is_some_and(|&t| t <= until_ns) {
            self.drops.pop_front();
            n += 1;
        }
        if n > 0 {
            self.monitor.note_dropped(n);
        }
    }

    /// Finishes the monitor: its reports, health records, window rows and counters.
    pub fn finish(mut self) -> (Vec<Report>, Vec<Health>, Vec<Row>, Counters) {
        self.note_drops(u64::MAX);
        self.monitor.finish(&mut self.reports);
        let mut health = Vec::new();
        self.monitor.take_health(&mut health);
        let counters = self.monitor.counters();
        (self.reports, health, self.rows, counters)
    }
}

impl Server for MonitorServer<'_> {
    fn serve(&mut self, arrival_ns: u64, _start_ns: u64, waiting: usize) -> u64 {
        let Some(p) = self.input.packet(self.next, BASE_NS + arrival_ns) else {
            return 1;
        };
        self.next += 1;
        self.note_drops(arrival_ns);
        self.monitor.process(&p, &mut self.reports);
        let ns = service_ns(&self.monitor);
        if self.pending.is_some() {
            self.decide_when_swept();
        }
        if let Some((relief, ring)) = self.relief.as_mut() {
            if let Some(r) = relief.served(arrival_ns, ns as f64, waiting as u64, *ring as u64) {
                self.monitor.relieve(r.serving_ns, r.available_ns);
                self.reliefs += 1;
            }
        }
        ns
    }

    fn window_end(&mut self, w: &WindowStats) {
        let shed_depth = self.monitor.shed().map_or(0.0, |s| f64::from(s.steps) + s.extra);
        let mut row = Row {
            stats: w.clone(),
            shed_depth,
            bypass: self.monitor.bypass(),
            available_ns: None,
            predicted_ns: None,
            saturated: false,
            load: None,
            reliefs: std::mem::take(&mut self.reliefs),
        };
        let available = self.adapt.then(|| {
            self.budget
                .after_window(w.end_ns - w.start_ns, w.arrivals, w.queue_at_end as u64)
        });
        row.available_ns = available;
        self.rows.push(row);
        if let Some(available) = available {
            // Decided once the window's epoch is swept: at once if every
            // packet that arrived in it was served (the clock may then
            // move to the window's end, as a live worker's on a quiet
            // ring), else when the first packet after it is.
            let end = BASE_NS + w.end_ns;
            self.pending = Some((available, self.rows.len() - 1, end));
            if w.queue_at_end == 0 {
                self.note_drops(w.end_ns);
                self.monitor.tick(end, &mut self.reports);
            }
            self.decide_when_swept();
        }
    }

    fn dropped(&mut self, arrival_ns: u64) {
        self.next += 1;
        self.drops.push_back(arrival_ns);
    }
}

// ---------------------------------------------------------------------
// Calibration and arrivals.
// ---------------------------------------------------------------------

/// One calibration pass: the mean predicted service time of `n` packets
/// fed at a constant `pps`, nothing shed, no queue.
pub fn mean_cost_at(specs: &[EventSpec], input: &Loop, pps: f64, n: u64) -> anyhow::Result<f64> {
    let mut m = new_monitor(specs, None)?;
    let mut out = Vec::new();
    let mut total = 0.0;
    let arrivals = Constant::new(pps.round().max(1.0) as u64)?;
    for (i, t) in arrivals.take(n as usize).enumerate() {
        let Some(p) = input.packet(i as u64, BASE_NS + t) else {
            break;
        };
        m.process(&p, &mut out);
        out.clear(); // reports are not wanted here
        total += service_ns(&m) as f64;
    }
    Ok(if n == 0 { 0.0 } else { total / n as f64 })
}

/// The sustainable rate (module doc, 3): (rate, mean service ns, passes).
pub fn sustainable(specs: &[EventSpec], input: &Loop, duration_ns: u64) -> anyhow::Result<(f64, f64, usize)> {
    let mut rate = CALIBRATION_START_PPS;
    let mut mean = 0.0;
    for pass in 1..=CALIBRATION_PASSES {
        // The run's length at that rate, at least one copy of the capture.
        let n = ((rate * duration_ns as f64 / 1e9) as u64).max(input.len() as u64);
        mean = mean_cost_at(specs, input, rate, n)?;
        let next = 1e9 / mean.max(1.0);
        let settled = (next - rate).abs() <= 0.005 * rate;
        rate = next;
        if settled {
            return Ok((rate, mean, pass));
        }
    }
    Ok((rate, mean, CALIBRATION_PASSES))
}

/// The arrival times in `[0, duration)`.
fn arrivals(a: &OverloadArgs, mean_pps: f64) -> anyhow::Result<Vec<u64>> {
    let d = a.duration;
    Ok(match a.load {
        Load::Sine => Sine::new(mean_pps, a.amplitude, a.period)?
            .take_while(|&t| t < d)
            .collect(),
        Load::Constant => Constant::new(mean_pps.round().max(1.0) as u64)?
            .take_while(|&t| t < d)
            .collect(),
    })
}

// ---------------------------------------------------------------------
// Accuracy against the reference.
// ---------------------------------------------------------------------

type WindowKey = (String, u64);

/// Reports by (event, window start): their groups.
pub fn by_window(reports: &[Report]) -> BTreeMap<WindowKey, BTreeSet<String>> {
    let mut m: BTreeMap<WindowKey, BTreeSet<String>> = BTreeMap::new();
    for r in reports {
        m.entry((r.event.to_string(), r.window.start_ns))
            .or_default()
            .insert(format!("{:?}", r.group));
    }
    m
}

/// One event's accuracy over a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventFigures {
    /// Windows with at least one true report.
    pub windows: u64,
    /// Of those, windows whose true recall is at least [`SATISFIED`].
    pub satisfied: u64,
    pub true_recall_sum: f64,
    /// Windows with an estimate, and the sum of |estimated − true|.
    pub estimated: u64,
    pub error_sum: f64,
}

/// One event window of one mode, as `--windows` writes it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WindowFigures {
    /// The window on the simulated clock (from 0), ns.
    pub start_ns: u64,
    pub end_ns: u64,
    /// Groups the reference reports, the monitor reports, and both.
    pub true_reports: u64,
    pub reports: u64,
    pub found: u64,
    /// The monitor's degraded-mode record of the window, if it made one:
    /// (flow-epochs measured, unmeasured, recall estimate).
    pub accuracy: Option<(u64, u64, f64)>,
}

impl WindowFigures {
    /// Reports the reference does not make.
    pub fn false_reports(&self) -> u64 {
        self.reports - self.found
    }

    /// found / true reports; `None` without a true report.
    pub fn true_recall(&self) -> Option<f64> {
        (self.true_reports > 0).then(|| self.found as f64 / self.true_reports as f64)
    }
}

/// Per event and event window (on the monitor's clock): what `--windows`
/// writes, from the true reports, the monitor's, and its health records'
/// accuracy. A window appears if any of the three has it.
pub fn window_figures(
    truth: &BTreeMap<WindowKey, BTreeSet<String>>,
    reports: &[Report],
    health: &[Health],
) -> BTreeMap<WindowKey, WindowFigures> {
    let made = by_window(reports);
    let mut out: BTreeMap<WindowKey, WindowFigures> = BTreeMap::new();
    let mut ends: BTreeMap<WindowKey, u64> = BTreeMap::new();
    for r in reports {
        ends.insert((r.event.to_string(), r.window.start_ns), r.window.end_ns);
    }
    for a in health.iter().flat_map(|h| &h.accuracy) {
        let key = (a.event.clone(), a.window.start_ns);
        ends.insert(key.clone(), a.window.end_ns);
        out.entry(key).or_default().accuracy =
            Some((a.flows_measured, a.flows_unmeasured, a.recall_estimate));
    }
    for (key, groups) in truth {
        let w = out.entry(key.clone()).or_default();
        w.true_reports = groups.len() as u64;
        w.found = made.get(key).map_or(0, |g| g.intersection(groups).count() as u64);
    }
    for (key, groups) in &made {
        out.entry(key.clone()).or_default().reports = groups.len() as u64;
    }
    for (key, w) in &mut out {
        w.start_ns = key.1;
        w.end_ns = ends.get(key).copied().unwrap_or(key.1);
    }
    out
}

/// Per event: the monitor's reports and health against the true reports.
pub fn accuracy(
    truth: &BTreeMap<WindowKey, BTreeSet<String>>,
    reports: &[Report],
    health: &[Health],
    events: &[String],
) -> BTreeMap<String, EventFigures> {
    let made = by_window(reports);
    let estimates: BTreeMap<WindowKey, f64> = health
        .iter()
        .flat_map(|h| &h.accuracy)
        .map(|a| ((a.event.clone(), a.window.start_ns), a.recall_estimate))
        .collect();
    let mut out: BTreeMap<String, EventFigures> = events
        .iter()
        .map(|e| (e.clone(), EventFigures::default()))
        .collect();
    for (key, true_groups) in truth {
        let found = made.get(key).map_or(0, |g| g.intersection(true_groups).count());
        let recall = found as f64 / true_groups.len() as f64;
        let f = out.entry(key.0.clone()).or_default();
        f.windows += 1;
        f.true_recall_sum += recall;
        if recall >= SATISFIED {
            f.satisfied += 1;
        }
        if let Some(est) = estimates.get(key) {
            f.estimated += 1;
            f.error_sum += (est - recall).abs();
        }
    }
    out
}

fn ratio(a: f64, b: u64) -> Option<f64> {
    (b > 0).then(|| a / b as f64)
}

// ---------------------------------------------------------------------
// The command.
// ---------------------------------------------------------------------

fn usage(msg: impl std::fmt::Display) -> Failure {
    Failure::Usage(format!("clarion-lab: {msg}\n"))
}

pub fn overload(a: &OverloadArgs) -> Result<ExitCode, Failure> {
    if a.window == 0 || a.duration == 0 || a.period == 0 {
        return Err(usage("--window, --duration and --period must be longer than 0"));
    }
    if !BASE_NS.is_multiple_of(a.window) {
        return Err(usage(
            "--window must divide 100 s (event windows line up with it)",
        ));
    }
    if !(0.0..=1.0).contains(&a.amplitude) {
        return Err(usage("--amplitude must be within 0..=1"));
    }
    if a.no_relief && a.mode == Mode::Static {
        return Err(usage(
            "--no-relief applies to adaptation: it cannot be used with --mode static",
        ));
    }
    for (flag, v) in [("--mean-rate", a.mean_rate), ("--mean-load", a.mean_load)] {
        if v.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
            return Err(usage(format!("{flag} must be a positive number")));
        }
    }
    let specs = crate::real::load_events(&a.events)?;
    let input = Loop::read(&a.pcap).map_err(|e| usage(format!("cannot read {e}")))?;
    if input.is_empty() {
        return Err(usage(format!("{} holds no IP packet", a.pcap.display())));
    }

    let (sustainable_pps, mean_service_ns, passes) =
        sustainable(&specs, &input, a.duration.min(100_000_000))?;
    let mean_pps = match (a.mean_rate, a.mean_load) {
        (Some(r), _) => r,
        (None, l) => l.unwrap_or(1.0) * sustainable_pps,
    };
    let times = arrivals(a, mean_pps)?;
    let copies = (times.len() as u64).div_ceil(input.len() as u64);
    if copies > MAX_COPIES {
        return Err(usage(format!(
            "{} packets would loop the capture more than {} times; lower the rate or --duration",
            thousands(times.len() as u64),
            thousands(MAX_COPIES)
        )));
    }
    eprintln!(
        "clarion-lab overload: sustainable {:.0} pps ({mean_service_ns:.1} ns a packet, {passes} calibration passes); mean {:.0} pps, {} arrivals, {copies} copies of {} packets",
        sustainable_pps,
        mean_pps,
        thousands(times.len() as u64),
        thousands(input.len() as u64)
    );

    // The truth: every arrived packet through the reference.
    let inputs: Vec<Input> = times
        .iter()
        .enumerate()
        .filter_map(|(i, &t)| input.packet(i as u64, BASE_NS + t).map(Input::Packet))
        .collect();
    let truth = by_window(&clarion_reference::evaluate(
        &specs,
        &inputs,
        &clarion_reference::Config {
            host: "overload".into(),
            ..clarion_reference::Config::default()
        },
    ));
    drop(inputs);
    let names: Vec<String> = specs
        .iter()
        .filter(|e| !e.on_demand)
        .map(|e| e.name.clone())
        .collect();

    let modes: &[(&str, bool)] = match a.mode {
        Mode::Static => &[("static", false)],
        Mode::Adapt => &[("adapt", true)],
        Mode::Both => &[("static", false), ("adapt", true)],
    };
    let mut windows_out = match &a.windows {
        Some(path) => Some(std::io::BufWriter::new(std::fs::File::create(path).map_err(
            |e| Failure::Runtime(anyhow!("cannot create {}: {e}", path.display())),
        )?)),
        None => None,
    };
    let mut results = Vec::new();
    for &(name, adapt) in modes {
        let control = (a.accuracy_threshold > 0.0).then_some(a.accuracy_threshold);
        let relief = (!a.no_relief).then_some((a.window, a.ring));
        let mut server = MonitorServer::new(&specs, &input, adapt, a.forecast, control, relief)?;
        let run = simulate(times.iter().copied(), a.ring, a.window, &mut server)?;
        let (reports, health, rows, counters) = server.finish();
        let figures = accuracy(&truth, &reports, &health, &names);
        if let Some(out) = windows_out.as_mut() {
            write_windows(out, name, &window_figures(&truth, &reports, &health), &rows)
                .map_err(|e| Failure::Runtime(anyhow!("writing --windows: {e}")))?;
        }
        let mut m = mode_json(name, &run, &rows, &figures);
        m["monitor"] = json!({
            "packets": counters.packets,
            "dropped": counters.dropped,
            "out_of_order": counters.out_of_order,
            "flows_created": counters.flows_created,
            "flows_evicted": counters.flows_evicted,
            "packets_untracked": counters.packets_untracked,
            "sweeps_late": counters.sweeps_late,
            "reports": counters.reports,
        });
        results.push(m);
    }

    if let Some(mut out) = windows_out {
        out.flush()
            .map_err(|e| Failure::Runtime(anyhow!("writing --windows: {e}")))?;
    }
    let out = json!({
        "pcap": a.pcap.display().to_string(),
        "events": a.events.display().to_string(),
        "load": match a.load { Load::Sine => "sine", Load::Constant => "constant" },
        "period_ns": a.period,
        "amplitude": a.amplitude,
        "ring": a.ring,
        "forecast": match a.forecast { Forecast::Last => "last", Forecast::Rise => "rise" },
        "window_ns": a.window,
        "duration_ns": a.duration,
        "sustainable_pps": sustainable_pps,
        "calibration_mean_ns": mean_service_ns,
        "calibration_passes": passes,
        "mean_pps": mean_pps,
        "mean_load": mean_pps / sustainable_pps,
        "packets": times.len(),
        "capture_packets": input.len(),
        "true_windows": truth.len(),
        "modes": results,
    });
    if a.json {
        println!("{out}");
    } else {
        print_table(&out);
    }
    Ok(ExitCode::SUCCESS)
}

/// `--windows`: one line per event window of mode `mode`, with the queue
/// windows inside it (`rows`): arrivals and drops summed, the shed depth
/// and bypassed share averaged.
fn write_windows(
    out: &mut impl Write,
    mode: &str,
    windows: &BTreeMap<WindowKey, WindowFigures>,
    rows: &[Row],
) -> std::io::Result<()> {
    for ((event, _), w) in windows {
        let (start, end) = (
            w.start_ns.saturating_sub(BASE_NS),
            w.end_ns.saturating_sub(BASE_NS),
        );
        let inside: Vec<&Row> = rows
            .iter()
            .filter(|r| r.stats.start_ns >= start && r.stats.end_ns <= end)
            .collect();
        let n = inside.len().max(1) as f64;
        let line = json!({
            "schema": "clarion.overload-window/1",
            "mode": mode,
            "event": event,
            "start_ns": start,
            "end_ns": end,
            "arrivals": inside.iter().map(|r| r.stats.arrivals).sum::<u64>(),
            "drops": inside.iter().map(|r| r.stats.dropped).sum::<u64>(),
            "shed": inside.iter().map(|r| r.shed_depth).sum::<f64>() / n,
            "bypass": inside.iter().map(|r| r.bypass).sum::<f64>() / n,
            "true_reports": w.true_reports,
            "reports": w.reports,
            "true_positives": w.found,
            "false_reports": w.false_reports(),
            "true_recall": w.true_recall(),
            "flows_measured": w.accuracy.map(|a| a.0),
            "flows_unmeasured": w.accuracy.map(|a| a.1),
            "recall_estimate": w.accuracy.map(|a| a.2).filter(|e| e.is_finite()),
            "estimate_error": w.accuracy
                .map(|a| a.2)
                .zip(w.true_recall())
                .map(|(e, t)| (e - t).abs())
                .filter(|e| e.is_finite()),
        });
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn mode_json(
    name: &str,
    run: &clarion_overload::Run,
    rows: &[Row],
    figures: &BTreeMap<String, EventFigures>,
) -> Value {
    let t = &run.totals;
    let windows = rows.len() as u64;
    let with_drops = rows.iter().filter(|r| r.stats.dropped > 0).count();
    let negative = rows
        .iter()
        .filter(|r| r.stats.packet_balance().is_some_and(|b| b < 0.0))
        .count();
    let depths = rows.iter().map(|r| r.shed_depth);
    let shed_mean = ratio(depths.clone().sum(), windows);
    let shed_min = depths.clone().reduce(f64::min);
    let shed_max = depths.reduce(f64::max);
    let events: Vec<Value> = figures
        .iter()
        .map(|(e, f)| {
            json!({
                "event": e,
                "windows": f.windows,
                "satisfied": f.satisfied,
                "satisfaction": ratio(f.satisfied as f64, f.windows),
                "mean_true_recall": ratio(f.true_recall_sum, f.windows),
                "estimated_windows": f.estimated,
                "mean_estimate_error": ratio(f.error_sum, f.estimated),
            })
        })
        .collect();
    let table: Vec<Value> = rows
        .iter()
        .map(|r| {
            let w = &r.stats;
            json!({
                "window": w.index,
                "arrivals": w.arrivals,
                "drops": w.dropped,
                "queue_max": w.queue_max,
                "queue_at_end": w.queue_at_end,
                "shed": r.shed_depth,
                "bypass": r.bypass,
                "busy_share": w.busy_ns as f64 / (w.end_ns - w.start_ns) as f64,
                "mean_service_ns": w.mean_service_ns(),
                "packet_balance": w.packet_balance(),
                "available_ns": r.available_ns.filter(|v| v.is_finite()),
                "predicted_ns": r.predicted_ns.filter(|v| v.is_finite()),
                "saturated": r.saturated,
                "reliefs": r.reliefs,
                "epoch_packets": r.load.map(|l| l.packets),
                "epoch_flow_epochs": r.load.map(|l| l.flow_epochs),
                "epoch_new_flows": r.load.map(|l| l.new_flows),
                "epoch_predicted_ns": r.load.map(|l| l.predicted_ns),
            })
        })
        .collect();
    json!({
        "mode": name,
        "packets": t.arrivals,
        "served": t.served,
        "drops": t.dropped,
        "drop_share": run.loss(),
        "windows": windows,
        "windows_with_drops": with_drops,
        "windows_negative_balance": negative,
        "saturated_windows": rows.iter().filter(|r| r.saturated).count(),
        "shed_mean": shed_mean,
        "shed_min": shed_min,
        "shed_max": shed_max,
        "bypass_mean": ratio(rows.iter().map(|r| r.bypass).sum(), windows),
        "bypass_max": rows.iter().map(|r| r.bypass).reduce(f64::max),
        "windows_bypassing": rows.iter().filter(|r| r.bypass > 0.0).count(),
        "queue_max": t.queue_max,
        "events": events,
        "table": table,
    })
}

fn print_table(out: &Value) {
    println!(
        "sustainable {:.0} pps; mean {:.0} pps (load {:.2}); {} packets over {} ns; ring {}",
        out["sustainable_pps"].as_f64().unwrap_or(0.0),
        out["mean_pps"].as_f64().unwrap_or(0.0),
        out["mean_load"].as_f64().unwrap_or(0.0),
        thousands(out["packets"].as_u64().unwrap_or(0)),
        out["duration_ns"],
        out["ring"],
    );
    let f = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.3}"));
    for m in out["modes"].as_array().into_iter().flatten() {
        println!(
            "\n{}: drops {} ({}), windows with drops {} / {}, negative balance {}, saturated {}, shed depth mean {} min {} max {}, bypassing in {} windows (mean share {}, max {})",
            m["mode"].as_str().unwrap_or(""),
            thousands(m["drops"].as_u64().unwrap_or(0)),
            f(&m["drop_share"]),
            m["windows_with_drops"],
            m["windows"],
            m["windows_negative_balance"],
            m["saturated_windows"],
            f(&m["shed_mean"]),
            f(&m["shed_min"]),
            f(&m["shed_max"]),
            m["windows_bypassing"],
            f(&m["bypass_mean"]),
            f(&m["bypass_max"]),
        );
        println!(
            "  {:<24} {:>8} {:>12} {:>12} {:>14}",
            "event", "windows", "satisfaction", "true recall", "|est - true|"
        );
        for e in m["events"].as_array().into_iter().flatten() {
            println!(
                "  {:<24} {:>8} {:>12} {:>12} {:>14}",
                e["event"].as_str().unwrap_or(""),
                e["windows"],
                f(&e["satisfaction"]),
                f(&e["mean_true_recall"]),
                f(&e["mean_estimate_error"]),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_vary_ports_or_addresses_and_keep_conversations() {
        use clarion_wire::FlowKey;
        let tcp = FlowKey::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            6,
            Some((40000, 80)),
            None,
        );
        let icmp = FlowKey::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            1,
            None,
            None,
        );
        let pkt = |key| PacketRecord {
            key,
            ..PacketRecord::default()
        };
        let l = Loop::new(vec![pkt(tcp), pkt(tcp.reversed()), pkt(icmp)]);
        assert_eq!(l.packet(0, 5).unwrap().key, tcp);
        assert_eq!(l.packet(0, 5).unwrap().ts_ns, 5);
        let (a, b, c) = (
            l.packet(3, 0).unwrap(),
            l.packet(4, 0).unwrap(),
            l.packet(5, 0).unwrap(),
        );
        assert_ne!(a.key, tcp);
        assert_eq!(b.key, a.key.reversed(), "a conversation stays one");
        assert_ne!(c.key, icmp);
        assert_eq!(c.key.proto, 1);
        assert!(Loop::new(Vec::new()).packet(0, 0).is_none());
    }

    proptest::proptest! {
        /// On generated keys: each copy of a flow is another flow, and a
        /// conversation's two directions stay each other's reverse.
        #[test]
        fn copies_are_new_flows_of_the_same_conversations(
            src in proptest::array::uniform16(0u8..),
            dst in proptest::array::uniform16(0u8..),
            ports in proptest::option::of((0u16.., 0u16..)),
            v6 in proptest::bool::ANY,
            copies in (0u64..MAX_COPIES, 0u64..MAX_COPIES),
        ) {
            use clarion_wire::FlowKey;
            use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
            let addr = |b: [u8; 16]| -> IpAddr {
                if v6 { Ipv6Addr::from(b).into() } else { Ipv4Addr::new(b[0], b[1], b[2], b[3]).into() }
            };
            let key = FlowKey::new(addr(src), addr(dst), if ports.is_some() { 17 } else { 1 }, ports, None);
            let l = Loop::new(vec![PacketRecord { key, ..PacketRecord::default() }, PacketRecord { key: key.reversed(), ..PacketRecord::default() }]);
            let (a, b) = copies;
            let ka = l.packet(2 * a, 0).unwrap().key;
            let ra = l.packet(2 * a + 1, 0).unwrap().key;
            proptest::prop_assert_eq!(ra, ka.reversed());
            proptest::prop_assert_eq!((ka.proto, ka.flags), (key.proto, key.flags));
            let kb = l.packet(2 * b, 0).unwrap().key;
            proptest::prop_assert_eq!(ka == kb, a == b);
        }
    }
}
