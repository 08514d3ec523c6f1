//! Self-metrics in the Prometheus text exposition format (version 0.0.4).
//!
//! # Design
//!
//! Rendered by hand: the page is a dozen families, and the format's rules
//! (one `# HELP` and `# TYPE` per family, counters named `_total`,
//! histograms as cumulative `_bucket{le=..}` ending at `+Inf`, then `_sum`
//! and `_count`) are checked by tests against Prometheus's own parser
//! (`promtool check metrics`, crates/cli/tests/prometheus.rs). Every
//! metric is listed in docs/metrics.md.
//!
//! Values are kept as integers (counts, nanoseconds) in atomics written by
//! their one owner and read by the endpoint; seconds are made by one
//! division at render time (`ns as f64 / 1e9`), which is correctly rounded,
//! so `{}`'s shortest round-trip printing shows `0.000006312`, never the
//! noise a multiplication by `1e-9` leaves.
//!
//! Histograms replace quantile gauges: a quantile of one worker's epoch
//! cannot be aggregated over workers or time, buckets can
//! (`histogram_quantile`). The queue-delay histogram is folded from the
//! worker's fine per-epoch [`DelayHistogram`] once per epoch (nothing more
//! on the per-packet path), so its bounds are tops of fine buckets,
//! 2^k − 1 ns (exact, if not round); the sweep histogram takes one
//! observation per epoch, with round bounds.
//!
//! Per-event series (`clarion_event_*{event=..}`) are fed from the reports
//! the host writes. Their label set is bounded: the first
//! [`MAX_EVENT_SERIES`] event names get a series each, later ones are
//! summed under `event="_other"`, so a runaway set of events cannot grow a
//! scraper's memory without bound.
//!
//! Report series carry `scope` ([`Scope`]): a host's reports (its own
//! events and its share of network-wide ones, the triggers) are `host`, a
//! manager's decisions `network`. The same network-wide event fires on
//! every host whose share of the threshold it passes and once more at the
//! manager, so summing a fleet's `clarion_event_fired_total` by event
//! alone counts it several times; by `(event, scope)` each line counts one
//! thing. A label rather than a second metric name: a process has one
//! scope, so the label adds no series, one query draws both levels side
//! by side, and selectors by `event` written before it keep matching.
//!
//! The last value of an event is kept per group for the [`TOP_GROUPS`]
//! largest groups of its latest window ([`LastWindow`]): a `per 5tuple`
//! event's single "latest report" was any flow's, which says little.
//!
//! # Cost
//!
//! Nothing on the packet path. Per epoch: a few relaxed atomic adds per
//! worker. Per written batch of reports: one mutex and a map lookup per
//! report. A scrape reads every atomic and `/proc/self` (four small files
//! and the fd directory).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clarion_report::{Name, Report};

use crate::{DelayHistogram, WorkerMetrics};

/// At most this many events get a series of their own; the others are
/// counted under `event="_other"`.
pub const MAX_EVENT_SERIES: usize = 1000;

/// The `event` label of the events beyond [`MAX_EVENT_SERIES`].
pub const OTHER_EVENT: &str = "_other";

/// At most this many groups of an event's latest window have a
/// `clarion_event_last_value` series: the largest by the predicate's first
/// aggregate.
pub const TOP_GROUPS: usize = 10;

/// An event's last values leave the page once it has reported nothing for
/// this long (wall time), so the groups of an event that stopped firing
/// are not shown forever. Prometheus's lookback is 5 minutes as well: a
/// graph of a quiet event ends as it would for a series never scraped again.
pub const LAST_VALUE_TTL: Duration = Duration::from_secs(300);

/// Whose reports a process writes: the `scope` label of its report series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// A host's (`clarion run`, `clarion agent`): its own events' reports
    /// and its firings of network-wide events' triggers, each a local share
    /// of a threshold.
    #[default]
    Host,
    /// A manager's network-wide decisions.
    Network,
}

impl Scope {
    pub fn label(self) -> &'static str {
        match self {
            Scope::Host => "host",
            Scope::Network => "network",
        }
    }
}

/// What the host adds to its workers' metrics.
#[derive(Debug, Default)]
pub struct HostMetrics {
    /// Reports written (after the merge, when workers are merged).
    pub reports: AtomicU64,
    /// Of those, reports whose completeness is not lossless (the table's `!`
    /// rows): the window was not seen whole, or packets were lost in it.
    pub reports_partial: AtomicU64,
    /// The interfaces captured, in the order given.
    pub interfaces: Vec<InterfaceMetrics>,
    /// Per event: reports written and their latest values.
    pub events: EventMetrics,
    /// The `scope` label of the report series.
    pub scope: Scope,
}

/// One captured interface, as the host saw it (whatever its workers).
#[derive(Debug)]
pub struct InterfaceMetrics {
    pub name: String,
    /// 1 while it is up and captured, 0 while down or away.
    pub up: AtomicU64,
    /// Times it went down or away.
    pub downs: AtomicU64,
}

impl HostMetrics {
    pub fn new(interfaces: &[String]) -> HostMetrics {
        HostMetrics {
            reports: AtomicU64::new(0),
            reports_partial: AtomicU64::new(0),
            interfaces: interfaces
                .iter()
                .map(|name| InterfaceMetrics {
                    name: name.clone(),
                    up: AtomicU64::new(1),
                    downs: AtomicU64::new(0),
                })
                .collect(),
            events: EventMetrics::default(),
            scope: Scope::Host,
        }
    }

    /// The same, counting reports under `scope` (a manager's: [`Scope::Network`]).
    pub fn with_scope(self, scope: Scope) -> HostMetrics {
        HostMetrics { scope, ..self }
    }

    pub fn interface(&self, name: &str) -> Option<&InterfaceMetrics> {
        self.interfaces.iter().find(|i| i.name == name)
    }

    /// Counts written reports: the total and each one's event.
    pub fn written(&self, reports: &[Report]) {
        self.reports.fetch_add(reports.len() as u64, Ordering::Relaxed);
        let partial = reports.iter().filter(|r| !r.completeness.is_lossless()).count();
        self.reports_partial.fetch_add(partial as u64, Ordering::Relaxed);
        self.events.observe(reports);
    }
}

/// Per event: how many reports it fired, and the values of the top groups
/// of its latest window.
#[derive(Debug, Default)]
pub struct EventMetrics {
    // Written by the host's output thread, read by scrapes: a mutex held for
    // a map update or one render.
    by_event: Mutex<BTreeMap<String, EventSeries>>,
}

#[derive(Debug, Default)]
struct EventSeries {
    fired: u64,
    last: LastWindow,
}

/// The top groups of an event's latest window that reported, with their
/// values. A report of a later window starts over (the groups of the
/// earlier one leave the page); one of an earlier window, arriving late,
/// is counted but not shown.
#[derive(Debug, Default)]
struct LastWindow {
    start_ns: u64,
    /// When a report of the event was last observed (`None`: never).
    seen: Option<Instant>,
    /// At most [`TOP_GROUPS`], largest first (see [`rank`]).
    groups: Vec<TopGroup>,
}

#[derive(Debug)]
struct TopGroup {
    /// The group as a label: its fields as `name=value`, space-separated.
    label: String,
    /// Each aggregate of the predicate, by its canonical text.
    values: clarion_report::Values,
}

/// A group's size: its first aggregate (the predicate's first, as
/// written), an undefined one (NaN) smallest.
fn rank(values: &[(Name, f64)]) -> f64 {
    values
        .first()
        .map(|(_, v)| *v)
        .filter(|v| !v.is_nan())
        .unwrap_or(f64::NEG_INFINITY)
}

impl LastWindow {
    fn observe(&mut self, r: &Report, now: Instant) {
        let expired = self
            .seen
            .is_none_or(|t| now.saturating_duration_since(t) > LAST_VALUE_TTL);
        if expired || r.window.start_ns > self.start_ns {
            self.start_ns = r.window.start_ns;
            self.groups.clear();
        } else if r.window.start_ns < self.start_ns {
            return;
        }
        self.seen = Some(now);
        let label = r.group.label();
        self.groups.retain(|g| g.label != label);
        let at = self
            .groups
            .partition_point(|g| larger(rank(&g.values), &g.label, rank(&r.values), &label));
        if at < TOP_GROUPS {
            self.groups.insert(
                at,
                TopGroup {
                    label,
                    values: r.values.clone(),
                },
            );
            self.groups.truncate(TOP_GROUPS);
        }
    }

    /// The groups to show at `now`: none once [`LAST_VALUE_TTL`] passed.
    fn shown(&self, now: Instant) -> &[TopGroup] {
        match self.seen {
            Some(t) if now.saturating_duration_since(t) <= LAST_VALUE_TTL => &self.groups,
            _ => &[],
        }
    }
}

/// Whether group `(a, la)` comes before `(b, lb)`: larger first, then by
/// label, so equal sizes keep one order whatever their arrival.
fn larger(a: f64, la: &str, b: f64, lb: &str) -> bool {
    match a.total_cmp(&b) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => la < lb,
    }
}

impl EventMetrics {
    /// Counts each report under its event (or [`OTHER_EVENT`] once
    /// [`MAX_EVENT_SERIES`] events have a series) and keeps its values
    /// among its window's top groups.
    pub fn observe(&self, reports: &[Report]) {
        self.observe_at(reports, Instant::now());
    }

    fn observe_at(&self, reports: &[Report], now: Instant) {
        if reports.is_empty() {
            return;
        }
        let mut map = self.by_event.lock().unwrap_or_else(|p| p.into_inner());
        for r in reports {
            let own = map.contains_key(&*r.event) || map.len() < MAX_EVENT_SERIES;
            let key = if own { &*r.event } else { OTHER_EVENT };
            let s = match map.get_mut(key) {
                Some(s) => s,
                None => map.entry(key.to_string()).or_default(),
            };
            s.fired += 1;
            s.last.observe(r, now);
        }
    }

    /// (event, fired) for every series, in label order (for tests and summaries).
    pub fn fired(&self) -> Vec<(String, u64)> {
        let map = self.by_event.lock().unwrap_or_else(|p| p.into_inner());
        map.iter().map(|(e, s)| (e.clone(), s.fired)).collect()
    }

    fn render(&self, out: &mut String, scope: Scope, now: Instant) {
        let map = self.by_event.lock().unwrap_or_else(|p| p.into_inner());
        let scope = scope.label();
        header(
            out,
            "clarion_event_fired_total",
            "counter",
            "Reports an event fired (one per group and window), by event and scope (host: a host's firings, network: a manager's decisions); events beyond the first 1000 are summed under event=\"_other\".",
        );
        for (e, s) in map.iter() {
            let _ = writeln!(
                out,
                "clarion_event_fired_total{{event=\"{}\",scope=\"{scope}\"}} {}",
                label(e),
                s.fired
            );
        }
        header(
            out,
            "clarion_event_last_value",
            "gauge",
            &format!(
                "Each aggregate of the event's predicate for the {TOP_GROUPS} largest groups of its latest window, by event, scope, group and aggregate; gone {} s after the event's last report.",
                LAST_VALUE_TTL.as_secs()
            ),
        );
        for (e, s) in map.iter() {
            for g in s.last.shown(now) {
                for (agg, v) in &g.values {
                    let _ = writeln!(
                        out,
                        "clarion_event_last_value{{event=\"{}\",scope=\"{scope}\",group=\"{}\",aggregate=\"{}\"}} {}",
                        label(e),
                        label(&g.label),
                        label(agg),
                        float(*v)
                    );
                }
            }
        }
    }
}

/// Queue-delay bounds: 2^k − 1 ns for k = 10, 12, ..., 30 (1 µs to 1.07 s,
/// by fours). Each is the top of a [`DelayHistogram`] bucket, so folding
/// one into these is exact.
const QUEUE_DELAY_BOUNDS_NS: [u64; 11] = {
    let mut b = [0u64; 11];
    let mut i = 0;
    while i < 11 {
        b[i] = (1u64 << (10 + 2 * i)) - 1;
        i += 1;
    }
    b
};

/// Sweep-time bounds: 10 µs (a quiet host's sweep) to 2.5 s, 1-2.5-5 per decade.
const SWEEP_BOUNDS_NS: [u64; 17] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
];

/// A Prometheus histogram over nanoseconds, rendered in seconds.
/// `counts[i]` holds observations in `(bounds[i-1], bounds[i]]`, the last
/// one those above every bound; `_count` is their sum, so it always equals
/// the `+Inf` bucket, even when read while being written.
#[derive(Debug)]
pub struct Histogram {
    bounds_ns: &'static [u64],
    counts: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
}

impl Histogram {
    /// `bounds_ns`: ascending upper bounds (inclusive).
    pub fn new(bounds_ns: &'static [u64]) -> Histogram {
        Histogram {
            bounds_ns,
            counts: (0..=bounds_ns.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }

    /// The queue-delay histogram (kernel timestamp to processed).
    pub fn queue_delay() -> Histogram {
        Histogram::new(&QUEUE_DELAY_BOUNDS_NS)
    }

    /// The sweep-time histogram (an epoch's end to its sweep's end).
    pub fn sweep() -> Histogram {
        Histogram::new(&SWEEP_BOUNDS_NS)
    }

    fn slot(&self, ns: u64) -> usize {
        self.bounds_ns.partition_point(|&b| b < ns)
    }

    pub fn observe_ns(&self, ns: u64) {
        self.counts[self.slot(ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Adds every observation of `fine`. Exact when each bound is the top
    /// of one of `fine`'s buckets (as the queue-delay bounds are); else a
    /// fine bucket counts under the bound above its top.
    pub fn add(&self, fine: &DelayHistogram) {
        for (top, n) in fine.buckets() {
            self.counts[self.slot(top)].fetch_add(n, Ordering::Relaxed);
        }
        self.sum_ns.fetch_add(fine.sum(), Ordering::Relaxed);
    }

    /// (upper bound in ns or `None` for +Inf, cumulative count), then the sum in ns.
    pub fn snapshot(&self) -> (Vec<(Option<u64>, u64)>, u64) {
        let mut seen = 0;
        let cumulative = self
            .counts
            .iter()
            .enumerate()
            .map(|(i, c)| {
                seen += c.load(Ordering::Relaxed);
                (self.bounds_ns.get(i).copied(), seen)
            })
            .collect();
        (cumulative, self.sum_ns.load(Ordering::Relaxed))
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let (buckets, sum) = self.snapshot();
        let mut count = 0;
        for (le, c) in buckets {
            let le = match le {
                Some(ns) => seconds(ns),
                None => "+Inf".to_string(),
            };
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {c}");
            count = c;
        }
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", seconds(sum));
        let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
    }
}

/// [`Histogram::queue_delay`], as a field of [`WorkerMetrics`] (which is `Default`).
#[derive(Debug)]
pub struct QueueDelayHistogram(pub Histogram);

impl Default for QueueDelayHistogram {
    fn default() -> Self {
        QueueDelayHistogram(Histogram::queue_delay())
    }
}

impl std::ops::Deref for QueueDelayHistogram {
    type Target = Histogram;
    fn deref(&self) -> &Histogram {
        &self.0
    }
}

/// [`Histogram::sweep`], as a field of [`WorkerMetrics`].
#[derive(Debug)]
pub struct SweepHistogram(pub Histogram);

impl Default for SweepHistogram {
    fn default() -> Self {
        SweepHistogram(Histogram::sweep())
    }
}

impl std::ops::Deref for SweepHistogram {
    type Target = Histogram;
    fn deref(&self) -> &Histogram {
        &self.0
    }
}

/// A label value in the exposition format: backslash, quote and newline
/// escaped (an interface name may hold the first two).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Nanoseconds as seconds: one correctly rounded division, printed shortest.
fn seconds(ns: u64) -> String {
    float(ns as f64 / 1e9)
}

/// A sample value: Rust's shortest round-trip, with the format's spellings
/// of the non-finite values.
fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The metrics page: one sample per worker for each worker metric (none
/// when there are no workers, as on the manager), the host's, the events',
/// the build's and the process's.
pub fn render(workers: &[Arc<WorkerMetrics>], host: &HostMetrics) -> String {
    render_at(workers, host, Instant::now())
}

fn render_at(workers: &[Arc<WorkerMetrics>], host: &HostMetrics, now: Instant) -> String {
    let mut out = String::new();
    let scope = host.scope.label();
    render_workers(&mut out, workers);
    render_interfaces(&mut out, host);
    header(
        &mut out,
        "clarion_reports_total",
        "counter",
        "Reports written, by scope (host: a host's, network: a manager's decisions).",
    );
    let _ = writeln!(
        out,
        "clarion_reports_total{{scope=\"{scope}\"}} {}",
        host.reports.load(Ordering::Relaxed)
    );
    header(
        &mut out,
        "clarion_reports_partial_total",
        "counter",
        "Reports written whose window was not seen whole or lost packets (dropped, malformed, untracked).",
    );
    let _ = writeln!(
        out,
        "clarion_reports_partial_total{{scope=\"{scope}\"}} {}",
        host.reports_partial.load(Ordering::Relaxed)
    );
    host.events.render(&mut out, host.scope, now);
    render_build_info(&mut out);
    if let Some(p) = ProcessStats::read() {
        p.render(&mut out);
    }
    out
}

/// How a worker's value is shown: a count as is, nanoseconds as seconds,
/// thousandths as a decimal.
#[derive(Clone, Copy, PartialEq)]
enum Unit {
    Count,
    Nanos,
    Milli,
}

/// One worker metric family: name, type, help, the value, how it is
/// shown, and whether only degraded mode has it (a 0 would read as a
/// measurement where it is off).
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    get: fn(&WorkerMetrics) -> &AtomicU64,
    unit: Unit,
    degraded_only: bool,
}

/// A family every worker has.
const fn always(
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    get: fn(&WorkerMetrics) -> &AtomicU64,
    unit: Unit,
) -> Family {
    Family {
        name,
        kind,
        help,
        get,
        unit,
        degraded_only: false,
    }
}

/// A gauge of degraded mode (`--adapt`), in thousandths.
const fn degraded(name: &'static str, help: &'static str, get: fn(&WorkerMetrics) -> &AtomicU64) -> Family {
    Family {
        name,
        kind: "gauge",
        help,
        get,
        unit: Unit::Milli,
        degraded_only: true,
    }
}

/// The worker families, in the page's order.
static WORKER_FAMILIES: [Family; 15] = [
    always("clarion_packets_total", "counter", "IP packets processed.", |m| &m.packets, Unit::Count),
    always("clarion_bytes_total", "counter", "IP bytes processed.", |m| &m.bytes, Unit::Count),
    always(
        "clarion_kernel_drops_total",
        "counter",
        "Packets the kernel dropped before Clarion (full ring).",
        |m| &m.drops,
        Unit::Count,
    ),
    always("clarion_malformed_total", "counter", "Frames that could not be parsed.", |m| &m.malformed, Unit::Count),
    always("clarion_not_ip_total", "counter", "Frames that are not IP: seen and ignored.", |m| &m.not_ip, Unit::Count),
    always(
        "clarion_untracked_total",
        "counter",
        "IP packets of flows the full flow table could not track.",
        |m| &m.untracked,
        Unit::Count,
    ),
    always("clarion_epochs_total", "counter", "Epochs swept.", |m| &m.epochs, Unit::Count),
    always(
        "clarion_sweeps_late_total",
        "counter",
        "Sweeps unfinished when the next epoch ended.",
        |m| &m.sweeps_late,
        Unit::Count,
    ),
    always("clarion_flows_active", "gauge", "Flows in the flow table.", |m| &m.flows_active, Unit::Count),
    always(
        "clarion_queue_delay_seconds_max",
        "gauge",
        "Longest queueing delay (kernel timestamp to processed) since start.",
        |m| &m.delay_max_ns,
        Unit::Nanos,
    ),
    always(
        "clarion_sweep_seconds_max",
        "gauge",
        "Longest sweep since start.",
        |m| &m.max_sweep_wall_ns,
        Unit::Nanos,
    ),
    always(
        "clarion_clock_lag_seconds",
        "gauge",
        "How far the monitor's clock lags the wall clock on a quiet wire: windows close this long after they end.",
        |m| &m.clock_lag_ns,
        Unit::Nanos,
    ),
    degraded(
        "clarion_shed_depth",
        "Degraded mode (--adapt): monitoring states flows are moved down, steps plus the share moved one more (0: every flow measured for every event).",
        |m| &m.shed_depth_milli,
    ),
    degraded(
        "clarion_bypass_share",
        "Degraded mode (--adapt): share of flows bypassed (not looked up, only counted) because even the lightest monitoring states do not fit.",
        |m| &m.bypass_milli,
    ),
    degraded(
        "clarion_cost_factor",
        "Degraded mode (--adapt): measured over modelled processing time (above 1: the machine is slower than the profile, e.g. cache contention).",
        |m| &m.cost_factor_milli,
    ),
];

fn render_workers(out: &mut String, workers: &[Arc<WorkerMetrics>]) {
    if workers.is_empty() {
        return;
    }
    let adapting = workers.iter().any(|m| m.adapting.load(Ordering::Relaxed));
    for f in WORKER_FAMILIES.iter().filter(|f| adapting || !f.degraded_only) {
        header(out, f.name, f.kind, f.help);
        for (w, m) in workers.iter().enumerate() {
            let v = (f.get)(m).load(Ordering::Relaxed);
            let shown = match f.unit {
                Unit::Count => v.to_string(),
                Unit::Nanos => seconds(v),
                Unit::Milli => float(v as f64 / 1e3),
            };
            let _ = writeln!(out, "{}{{worker=\"{w}\"}} {shown}", f.name);
        }
    }
    type GetH = fn(&WorkerMetrics) -> &Histogram;
    let histograms: [(&str, &str, GetH); 2] = [
        (
            "clarion_queue_delay_seconds",
            "Queueing delay of each packet: kernel timestamp to processed.",
            |m| &m.queue_delay,
        ),
        (
            "clarion_sweep_seconds",
            "Sweep time of each epoch: the epoch's end to its sweep's end.",
            |m| &m.sweep,
        ),
    ];
    for (name, help, get) in histograms {
        header(out, name, "histogram", help);
        for (w, m) in workers.iter().enumerate() {
            get(m).render(out, name, &format!("worker=\"{w}\""));
        }
    }
}

fn render_interfaces(out: &mut String, host: &HostMetrics) {
    if host.interfaces.is_empty() {
        return;
    }
    type GetIf = fn(&InterfaceMetrics) -> &AtomicU64;
    let per_interface: [(&str, &str, &str, GetIf); 2] = [
        (
            "clarion_interface_up",
            "gauge",
            "1 while the interface is up and captured, 0 while it is down or away (its windows are then incomplete).",
            |i| &i.up,
        ),
        (
            "clarion_interface_down_total",
            "counter",
            "Times the interface went down or away.",
            |i| &i.downs,
        ),
    ];
    for (name, kind, help, get) in per_interface {
        header(out, name, kind, help);
        for i in &host.interfaces {
            let v = get(i).load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}{{interface=\"{}\"}} {v}", label(&i.name));
        }
    }
}

/// `clarion_build_info{version, commit}` = 1; `commit` only when the build
/// was given one (`CLARION_COMMIT=$(git rev-parse --short HEAD) cargo build`).
fn render_build_info(out: &mut String) {
    header(
        out,
        "clarion_build_info",
        "gauge",
        "Always 1; the labels say which Clarion runs.",
    );
    let version = env!("CARGO_PKG_VERSION");
    match option_env!("CLARION_COMMIT") {
        Some(c) if !c.is_empty() => {
            let _ = writeln!(
                out,
                "clarion_build_info{{version=\"{version}\",commit=\"{}\"}} 1",
                label(c)
            );
        }
        _ => {
            let _ = writeln!(out, "clarion_build_info{{version=\"{version}\"}} 1");
        }
    }
}

/// The standard process metrics (as Prometheus's client libraries name
/// them), read from `/proc/self`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessStats {
    /// User plus system CPU time, in clock ticks.
    pub cpu_ticks: u64,
    pub ticks_per_second: u64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub open_fds: u64,
    /// The soft limit on open files (`None`: unlimited).
    pub max_fds: Option<u64>,
    /// Start time, in clock ticks since the Unix epoch.
    pub start_ticks: u64,
}

impl ProcessStats {
    /// This process's, or `None` without a readable `/proc` (then the page
    /// has no process metrics rather than wrong ones).
    pub fn read() -> Option<ProcessStats> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let boot = std::fs::read_to_string("/proc/stat").ok()?;
        let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        // SAFETY: sysconf only reads a configuration value; no pointers.
        let (tck, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        let ticks_per_second = u64::try_from(tck).ok().filter(|&t| t > 0)?;
        let page = u64::try_from(page).ok().filter(|&p| p > 0)?;
        Self::parse(&stat, &boot, &limits, open_fds, ticks_per_second, page)
    }

    /// From the texts of `/proc/self/stat`, `/proc/stat` and `/proc/self/limits`.
    pub fn parse(
        stat: &str,
        boot: &str,
        limits: &str,
        open_fds: u64,
        ticks_per_second: u64,
        page: u64,
    ) -> Option<ProcessStats> {
        // The command name (field 2) may hold spaces and parentheses: the
        // fields that follow start after the last ')'; field 3 is at 0.
        let rest = &stat[stat.rfind(')')? + 1..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| -> Option<u64> { f.get(n - 3)?.parse().ok() };
        let btime: u64 = boot
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()?;
        let max_fds = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))?
            .split_whitespace()
            .nth(3)
            .and_then(|soft| soft.parse().ok());
        Some(ProcessStats {
            cpu_ticks: field(14)? + field(15)?,
            ticks_per_second,
            resident_bytes: field(24)? * page,
            virtual_bytes: field(23)?,
            open_fds,
            max_fds,
            start_ticks: btime * ticks_per_second + field(22)?,
        })
    }

    fn render(&self, out: &mut String) {
        let tps = self.ticks_per_second as f64;
        let mut one = |name: &str, kind: &str, help: &str, v: String| {
            header(out, name, kind, help);
            let _ = writeln!(out, "{name} {v}");
        };
        one(
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            float(self.cpu_ticks as f64 / tps),
        );
        one(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            self.resident_bytes.to_string(),
        );
        one(
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            self.virtual_bytes.to_string(),
        );
        one(
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            self.open_fds.to_string(),
        );
        if let Some(m) = self.max_fds {
            one(
                "process_max_fds",
                "gauge",
                "Maximum number of open file descriptors.",
                m.to_string(),
            );
        }
        one(
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            float(self.start_ticks as f64 / tps),
        );
    }
}

#[cfg(test)]
mod tests;
