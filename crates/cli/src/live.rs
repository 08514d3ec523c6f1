//! `clarion run --interface`: flags in, a live host (`clarion_host::LiveHost`)
//! out; its reports to the sink, its epoch statistics and summary lines to
//! their files and standard error.
//!
//! With `--exports`, every worker runs the policies on its own frames
//! (`clarion_host::LiveConfig::exports`: its own header-stream id and
//! pcapng names); the summary gives each worker's export counters
//! ([`export_lines`]).
//!
//! With `--capture-dir`, every worker has a ring of `--capture-buffer`
//! bytes of recent frames, fed while an installed event says `then
//! capture` (one of the start's, or one added through the control API),
//! and each report of such an event names one file holding its group's
//! packets from every worker (`clarion_host::LiveConfig::captures`).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use clarion_engine::{MonitorConfig, Report};
use clarion_host::{HostError, Live, LiveConfig, LiveHost, LiveSource, LiveSummary, XdpMode};
use clarion_host_api::{ApiSettings, LocalEvents};
use clarion_live::{EpochStats, LinkEvent, LiveError, RingConfig, RingMode, WorkerMetrics};
use clarion_sinks::Sink;

use crate::args::{LiveArgs, RingModeArg, RunArgs, SourceKind, XdpModeArg};
use crate::exports::LiveExports;
use crate::failure::{runtime, stop_flag};
use crate::host_spec::{load_events, monitor_config, open_sink, write_all};
use crate::outputs::sink_error;
use crate::summary::{thousands, Summary};
use crate::Failure;

/// Longest wait for the workers before the control API and SIGHUP are served.
pub const SERVICE_EVERY: Duration = Duration::from_millis(20);

/// The ring layout asked for (frames unless --ring-mode says otherwise).
fn ring_mode(live: &LiveArgs) -> RingModeArg {
    live.ring_mode.unwrap_or(RingModeArg::Frames)
}

/// The first capture flag given that the source and layout would not read,
/// as a usage error: AF_XDP reads no ring flag nor `--snaplen` (`clarion_host`
/// sizes its sockets itself and copies whole frames), AF_PACKET no
/// `--xdp-mode`, and frames (TPACKET_V2) lay their slots out by the snap
/// length and hand each over at once, so neither the frame slot size nor
/// the retire timer of blocks (TPACKET_V3) has anything to set.
fn ring_flag_not_read(live: &LiveArgs) -> Option<String> {
    match (live.source, ring_mode(live)) {
        (SourceKind::Xdp, _) if live.snaplen.is_some() => Some(
            "clarion: --snaplen applies to --source packet only \
             (AF_XDP copies whole frames, up to its 2 KiB frame size)"
                .into(),
        ),
        (SourceKind::Packet, _) if live.xdp_mode.is_some() => {
            Some("clarion: --xdp-mode applies to --source xdp only".into())
        }
        (SourceKind::Xdp, _) => [
            ("--ring-mode", live.ring_mode.is_some()),
            ("--ring-block-size", live.ring_block_size.is_some()),
            ("--ring-blocks", live.ring_blocks.is_some()),
            ("--ring-frame-size", live.ring_frame_size.is_some()),
            ("--ring-retire", live.ring_retire.is_some()),
        ]
        .into_iter()
        .find(|&(_, given)| given)
        .map(|(flag, _)| {
            format!(
                "clarion: {flag} applies to --source packet only \
                 (AF_XDP has no AF_PACKET ring: its sockets size their own frames and rings)"
            )
        }),
        (SourceKind::Packet, RingModeArg::Frames) => {
            if live.ring_retire.is_some() {
                Some(
                    "clarion: --ring-retire applies to --ring-mode blocks only \
                     (frames are handed over one by one)"
                        .into(),
                )
            } else if live.ring_frame_size.is_some() {
                Some(
                    "clarion: --ring-frame-size applies to --ring-mode blocks only \
                     (frames take slots of the snap length plus 128 bytes)"
                        .into(),
                )
            } else {
                None
            }
        }
        (SourceKind::Packet, RingModeArg::Blocks) => None,
    }
}

/// The ring the flags describe, defaults filled in; a ring flag the source
/// or layout would not read is a usage error, not ignored.
fn ring_config(live: &LiveArgs) -> Result<RingConfig, Failure> {
    if let Some(msg) = ring_flag_not_read(live) {
        return Err(Failure::Usage(msg));
    }
    let default = RingConfig::default();
    let retire_ms = match live.ring_retire {
        None => default.retire_ms,
        Some(ns) => {
            let ms = ns / 1_000_000;
            if ms == 0 || !ns.is_multiple_of(1_000_000) || ms > 10_000 {
                return Err(Failure::Usage(format!(
                    "clarion: --ring-retire must be whole milliseconds between 1ms and 10s, not {ns} ns"
                )));
            }
            ms as u32
        }
    };
    Ok(RingConfig {
        mode: match ring_mode(live) {
            RingModeArg::Frames => RingMode::Frames,
            RingModeArg::Blocks => RingMode::Blocks,
        },
        block_size: live.ring_block_size.unwrap_or(default.block_size),
        blocks: live.ring_blocks.unwrap_or(default.blocks),
        frame_size: live.ring_frame_size.unwrap_or(default.frame_size),
        snaplen: live.snaplen.unwrap_or(default.snaplen),
        retire_ms,
    })
}

/// The live host the flags describe (run and agent alike).
pub fn live_config(
    interfaces: &[String],
    live: &LiveArgs,
    workers: u32,
    monitor: MonitorConfig,
    exports: crate::exports::WorkerExports,
) -> Result<LiveConfig, Failure> {
    let mut exports = exports;
    // Frames carry their interface's index among these: policies name them.
    if let Some(x) = &mut exports.2 {
        x.config.interfaces = interfaces.to_vec();
    }
    Ok(LiveConfig {
        interfaces: interfaces.to_vec(),
        source: match live.source {
            SourceKind::Packet => LiveSource::Packet,
            SourceKind::Xdp => LiveSource::Xdp(match live.xdp_mode.unwrap_or(XdpModeArg::Native) {
                XdpModeArg::Native => XdpMode::Native,
                XdpModeArg::Generic => XdpMode::Generic,
            }),
        },
        workers,
        cpus: live.cpus.clone(),
        filter: live.filter.clone(),
        ring: ring_config(live)?,
        step_budget: Duration::from_nanos(live.step_budget),
        low_water: live.low_water,
        clock_lag: Duration::from_nanos(live.clock_lag),
        duration: live.duration.map(Duration::from_nanos),
        down_timeout: Duration::from_nanos(live.down_timeout),
        monitor,
        keep_windows: false,
        records: exports.0,
        gpvs: exports.1,
        exports: exports.2,
        captures: None,
    })
}

/// An Ethernet frame of the largest standard size with a VLAN tag: a
/// policy sending whole frames needs a snap length of at least this.
const WHOLE_FRAME: u32 = 1518;

/// A warning when the ring's snap length cuts frames a policy sends whole
/// (shorter than [`WHOLE_FRAME`]) or to a longer snap (the default keeps
/// headers only): what is exported would not be what a file replay exports.
pub fn snap_warning(config: &LiveConfig) -> Option<String> {
    if matches!(config.source, LiveSource::Xdp(_)) {
        // Whole frames: no snap length.
        return None;
    }
    let x = config.exports.as_ref()?;
    let snaplen = config.ring.snaplen;
    let cut: Vec<String> = x
        .policies
        .iter()
        .filter(|p| {
            p.sends.iter().any(|s| match s.action {
                clarion_lang::spec::ExportAction::Packets { snap } => snap.unwrap_or(WHOLE_FRAME) > snaplen,
                clarion_lang::spec::ExportAction::Headers => false,
            })
        })
        .map(|p| p.name.clone())
        .collect();
    (!cut.is_empty()).then(|| {
        format!(
            "clarion: warning: --snaplen {snaplen} cuts the frames export polic{} {} send{}; \
             raise --snaplen to the largest frame (1518, 9216 with jumbo frames)",
            if cut.len() == 1 { "y" } else { "ies" },
            cut.join(", "),
            if cut.len() == 1 { "s" } else { "" },
        )
    })
}

/// Serves the metrics endpoint when asked, and says where it is.
pub fn serve_metrics(live: &LiveArgs, host: &LiveHost, quiet: bool) -> Result<(), Failure> {
    if let Some(addr) = live.metrics {
        let (metrics, host_metrics) = host.metrics();
        let bound = crate::metrics_server::serve(addr, metrics, host_metrics)?;
        if !quiet {
            eprintln!("clarion: metrics at http://{bound}/metrics");
        }
    }
    Ok(())
}

/// "eth0, eth1 (AF_PACKET) with 2 workers"
pub fn capturing(interfaces: &[String], live: &LiveArgs, workers: u32) -> String {
    format!(
        "{} ({}) with {} worker{}",
        interfaces.join(", "),
        match (live.source, ring_mode(live)) {
            (SourceKind::Packet, RingModeArg::Frames) => "AF_PACKET frames",
            (SourceKind::Packet, RingModeArg::Blocks) => "AF_PACKET blocks",
            (SourceKind::Xdp, _) => "AF_XDP",
        },
        workers,
        if workers == 1 { "" } else { "s" },
    )
}

/// A live host's failure to start, as the command line reports it.
pub fn start_failure(e: HostError, events: &std::path::Path) -> Failure {
    match e {
        HostError::Usage(msg) => Failure::Usage(format!("clarion: {msg}")),
        HostError::Engine(e) => Failure::Usage(format!("clarion: {}: {e}", events.display())),
        other => runtime(other),
    }
}

pub fn run_live(a: &RunArgs) -> Result<ExitCode, Failure> {
    let events = a.events.as_deref();
    let specs = match events {
        Some(path) => load_events(path)?,
        None => Vec::new(),
    };
    let (mut exports, configs) = LiveExports::open(&a.export, &crate::host_spec::run_host(a))?;
    // Only the control API reads the window of recent records.
    let window = a.live.api.and_then(|_| exports.flow_window(&a.export));
    let mut config = live_config(&a.interface, &a.live, a.workers, monitor_config(a), configs)?;
    config.captures = crate::exports::capture_config(&a.export.policies, &specs)?;
    let stop = stop_flag()?;
    let mut host = LiveHost::start(&config, &specs, stop)
        .map_err(|e| start_failure(e, events.unwrap_or(Path::new("(no events)"))))?;
    serve_metrics(&a.live, &host, a.quiet)?;
    if !a.quiet {
        eprintln!(
            "clarion: capturing on {}, {} events{}; Ctrl-C stops",
            capturing(&a.interface, &a.live, a.workers),
            specs.len(),
            exports.describe()
        );
        if let Some(w) = snap_warning(&config) {
            eprintln!("{w}");
        }
    }
    let mut out = LiveOutput::open(&a.live, a.quiet, open_sink(a)?, exports, host.metrics().0)?;
    let mut local = local_events(&config.monitor.host, events, &host, &a.live, a.quiet)?
        .with_exports_file(a.export.policies.exports.as_deref(), &host)
        .with_flow_window(window);
    let looped = serve(&mut host, &mut out, &mut local);
    let (summary, exported) = end_run(host, out, looped, |last, out| out.take(Live::Reports(last)))?;
    if !a.quiet {
        print_summary(&summary, specs.len(), config.monitor.dos_threshold_bytes);
        eprint!("{exported}{}", export_lines(&summary));
    }
    if let Some(c) = &summary.captures {
        if !a.quiet {
            eprint!("{}", crate::exports::capture_summary(c));
        }
        for e in &c.errors {
            eprintln!("clarion: capture not written: {e}");
        }
    }
    outcome(&summary)
}

/// The host's own events and its control API (`--api`: where, and its
/// token), served beside `host` (`clarion-host-api`).
pub fn local_events(
    host_name: &str,
    events: Option<&Path>,
    host: &LiveHost,
    live: &LiveArgs,
    quiet: bool,
) -> Result<LocalEvents, Failure> {
    let api = live.api.map(|addr| ApiSettings {
        addr,
        token: live.api_token.clone(),
        token_file: live.api_token_file.clone(),
        no_auth: live.api_no_auth,
        hosts: live.api_hosts.clone(),
    });
    LocalEvents::start(host_name, events, host, api, quiet).map_err(|e| match e {
        clarion_host_api::Error::Events(msg) => Failure::Usage(msg),
        clarion_host_api::Error::Token(e) => crate::failure::token_failure(e),
        other => Failure::Runtime(other.into()),
    })
}

/// The live run's loop: reports to the control API's watchers and the
/// output, the API served, until the host ends or an output fails.
fn serve(host: &mut LiveHost, out: &mut LiveOutput, local: &mut LocalEvents) -> Result<(), Failure> {
    loop {
        match host.next(out.timeout().min(SERVICE_EVERY)) {
            Live::Ended => return Ok(()),
            Live::Reports(reports) => {
                reports.iter().for_each(|r| local.publish(r));
                out.take(Live::Reports(reports))?;
            }
            other => out.take(other)?,
        }
        local.service(host, out.apps());
        out.tick()?;
    }
}

/// Ends a live run on every exit path, a failed loop's included: the host
/// finished (its workers joined, so their export policies' pcapng files
/// are complete, and the captures around events written), the last
/// reports given to `last` (the sink; an agent's manager too), and every
/// output closed (Parquet footers, the report sink, epoch statistics).
/// The loop's failure comes first, then the host's, then the outputs';
/// else the summary and the outputs' summary lines.
pub fn end_run(
    host: LiveHost,
    mut out: LiveOutput,
    looped: Result<(), Failure>,
    last: impl FnOnce(Vec<Report>, &mut LiveOutput) -> Result<(), Failure>,
) -> Result<(LiveSummary, String), Failure> {
    let ended = finish_host(host, &mut out).and_then(|(summary, reports)| {
        last(reports, &mut out)?;
        Ok(summary)
    });
    let closed = out.close();
    looped?;
    let summary = ended?;
    Ok((summary, closed?))
}

/// The export policies' summary lines: one worker's as a file replay's,
/// several workers' each under its number (each is its own exporter).
pub fn export_lines(s: &LiveSummary) -> String {
    match s.exports.as_slice() {
        [] => String::new(),
        [(_, x)] => crate::exports::export_summary(x),
        all => all
            .iter()
            .map(|(w, x)| {
                let lines = crate::exports::export_summary(x);
                let indented: String = lines.lines().map(|l| format!("  {l}\n")).collect();
                format!("  worker {w}:\n{indented}")
            })
            .collect(),
    }
}

/// Status 1 when the run ended because an interface did not come back.
pub fn outcome(summary: &LiveSummary) -> Result<ExitCode, Failure> {
    match &summary.lost {
        Some(lost) => Err(runtime(LiveError::Down(lost.clone()))),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// Stops the host; the epoch statistics its workers still send go to
/// `out`, and the reports of the windows they close are returned (an agent
/// routes them before they reach `out`).
pub fn finish_host(host: LiveHost, out: &mut LiveOutput) -> Result<(LiveSummary, Vec<Report>), Failure> {
    let mut failure = None;
    let mut last = Vec::new();
    let summary = host.finish(&mut |l| match l {
        Live::Reports(r) => last.extend(r),
        other => {
            if let Err(e) = out.take(other) {
                failure.get_or_insert(e);
            }
        }
    });
    if let Some(e) = failure {
        return Err(e);
    }
    Ok((summary.map_err(runtime)?, last))
}

/// Where a live run's output goes: reports to the sink, epoch statistics
/// to their file, a summary line to standard error now and then.
pub struct LiveOutput {
    pub sink: Box<dyn Sink<Report>>,
    exports: LiveExports,
    down_timeout: Duration,
    epochs: Option<BufWriter<File>>,
    every: Option<Duration>,
    next_line: Option<Instant>,
    started: Instant,
    window: Periodic,
    metrics: Vec<Arc<WorkerMetrics>>,
}

impl LiveOutput {
    pub fn open(
        live: &LiveArgs,
        quiet: bool,
        sink: Box<dyn Sink<Report>>,
        exports: LiveExports,
        metrics: Vec<Arc<WorkerMetrics>>,
    ) -> Result<LiveOutput, Failure> {
        let epochs = match &live.epoch_stats {
            Some(p) => Some(BufWriter::new(
                File::create(p)
                    .with_context(|| format!("cannot create {}", p.display()))
                    .map_err(runtime)?,
            )),
            None => None,
        };
        let started = Instant::now();
        let every = (live.stats_every > 0 && !quiet).then(|| Duration::from_nanos(live.stats_every));
        Ok(LiveOutput {
            sink,
            exports,
            down_timeout: Duration::from_nanos(live.down_timeout),
            epochs,
            every,
            next_line: every.map(|d| started + d),
            started,
            window: Periodic::default(),
            metrics,
        })
    }

    pub fn timeout(&self) -> Duration {
        self.next_line
            .map(|t| t.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(1))
    }

    pub fn take(&mut self, l: Live) -> Result<(), Failure> {
        match l {
            Live::Reports(mut reports) if !reports.is_empty() => {
                write_all(&mut *self.sink, &mut reports)?;
                // A live run has no end in sight: an epoch's reports reach the output at once.
                self.sink.flush().map_err(sink_error)?;
            }
            Live::Epoch(st) => {
                self.window.add(&st);
                if let Some(out) = self.epochs.as_mut() {
                    writeln!(out, "{}", st.to_json_line())
                        .context("cannot write epoch statistics")
                        .map_err(runtime)?;
                }
            }
            Live::Link(ev) => eprintln!("{}", link_line(&ev, self.down_timeout)),
            Live::Records(records) => self.exports.records(&records)?,
            Live::Gpvs(gpvs) => self.exports.gpvs(&gpvs)?,
            Live::Reports(_) | Live::Idle | Live::Ended => {}
        }
        Ok(())
    }

    /// The apps on the host's GPVs; `None` when it makes none.
    pub fn apps(&mut self) -> Option<&mut clarion_gpv::AppRuntime> {
        self.exports.apps_mut()
    }

    /// The periodic summary line, when due; the record sinks flushed once a second.
    pub fn tick(&mut self) -> Result<(), Failure> {
        self.exports.tick()?;
        if let (Some(t), Some(d)) = (self.next_line, self.every) {
            if Instant::now() >= t {
                eprintln!("{}", self.window.line(self.started.elapsed(), &self.metrics));
                self.window = Periodic::default();
                self.next_line = Some(t + d);
            }
        }
        Ok(())
    }

    /// Flushes everything, finishes the record and GPV sinks (a Parquet
    /// file's footer) and writes the apps' report, whatever fails first (a
    /// failed report sink still leaves finished Parquet files). Returns
    /// the first failure, or the exports' lines of the summary.
    pub fn close(mut self) -> Result<String, Failure> {
        let flushed = self.sink.flush().map_err(sink_error);
        let exported = self.exports.close();
        let epochs = match self.epochs.as_mut() {
            Some(out) => out
                .flush()
                .context("cannot write epoch statistics")
                .map_err(runtime),
            None => Ok(()),
        };
        flushed?;
        let exported = exported?;
        epochs?;
        Ok(exported)
    }
}

/// What standard error says of an interface's outage.
fn link_line(ev: &LinkEvent, timeout: Duration) -> String {
    match ev {
        LinkEvent::Down { interface, since_ns } => format!(
            "clarion: interface {interface} is down since {}; waiting up to {} for it \
             (windows meanwhile are reported incomplete)",
            millis_utc(*since_ns),
            seconds(timeout)
        ),
        LinkEvent::Removed { interface } => {
            format!("clarion: interface {interface} was removed; waiting for an interface of that name")
        }
        LinkEvent::Up {
            interface,
            down_ns,
            reopened,
            ..
        } => format!(
            "clarion: {interface} is back after {:.1} s{}",
            *down_ns as f64 / 1e9,
            if *reopened {
                " (created again: captured anew)"
            } else {
                ""
            }
        ),
        LinkEvent::Lost(lost) => format!("clarion: {lost}"),
    }
}

/// RFC 3339, UTC, to the millisecond.
fn millis_utc(ns: u64) -> String {
    let t = clarion_report::rfc3339(ns - ns % 1_000_000);
    t.strip_suffix("000000Z").map_or(t.clone(), |s| format!("{s}Z"))
}

/// "30s", "1.5s".
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

pub fn print_summary(s: &LiveSummary, events: usize, dos_threshold: u32) {
    eprint!("{}", summary_text(s, events, dos_threshold));
}

/// What [`print_summary`] prints. `dos_threshold`: the DoS filter's, as
/// configured: every worker's at the end unless one raised its own.
pub fn summary_text(s: &LiveSummary, events: usize, dos_threshold: u32) -> String {
    use std::fmt::Write as _;
    let summary = Summary {
        counters: s.counters,
        dos_threshold: if s.counters.dos_threshold_raises == 0 {
            dos_threshold
        } else {
            0
        },
        frames: s.frames,
        skipped: 0,
        dropped: s.drops,
        elapsed: s.elapsed,
        events: Some(events),
    };
    let mut out = summary.to_string();
    let _ = writeln!(
        out,
        "  live: {} kernel drops, queueing delay p99 {} max {}, longest sweep {}",
        thousands(s.drops),
        micros(s.delays.quantile(0.99)),
        micros(s.delays.max()),
        micros(s.max_sweep_wall_ns)
    );
    if s.outages > 0 {
        let _ = writeln!(
            out,
            "  interfaces: down {} time{}, {:.1} s in all (the windows of that time are incomplete)",
            s.outages,
            if s.outages == 1 { "" } else { "s" },
            s.down.as_secs_f64()
        );
    }
    out
}

fn micros(ns: u64) -> String {
    if ns >= 10_000_000 {
        format!("{:.0} ms", ns as f64 / 1e6)
    } else if ns >= 1_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else {
        format!("{:.0} µs", ns as f64 / 1e3)
    }
}

/// Epoch statistics since the previous summary line.
#[derive(Default)]
struct Periodic {
    epochs: u64,
    packets: u64,
    drops: u64,
    late: u64,
    delay_p99_max: u64,
    delay_max: u64,
    sweep_max: u64,
}

impl Periodic {
    fn add(&mut self, st: &EpochStats) {
        self.epochs += 1;
        self.packets += st.packets;
        self.drops += st.drops;
        self.late += u64::from(st.late);
        self.delay_p99_max = self.delay_p99_max.max(st.delay_p99_ns);
        self.delay_max = self.delay_max.max(st.delay_max_ns);
        self.sweep_max = self.sweep_max.max(st.sweep_wall_ns);
    }

    fn line(&self, elapsed: Duration, metrics: &[Arc<WorkerMetrics>]) -> String {
        let reports: u64 = metrics.iter().map(|m| WorkerMetrics::get(&m.reports)).sum();
        let flows: u64 = metrics.iter().map(|m| WorkerMetrics::get(&m.flows_active)).sum();
        format!(
            "clarion: {:.0}s: {} packets, {} drops, {} epochs ({} late), delay p99 {} max {}, sweep max {}, {} flows, {} reports",
            elapsed.as_secs_f64(),
            thousands(self.packets),
            thousands(self.drops),
            thousands(self.epochs),
            self.late,
            micros(self.delay_p99_max),
            micros(self.delay_max),
            micros(self.sweep_max),
            thousands(flows),
            thousands(reports)
        )
    }
}
