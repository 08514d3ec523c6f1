//! `clarion run`: capture file → parser → monitor → report sink.
//!
//! This is the pipeline's seam: a source yields raw frames, the wire parser
//! turns each into a record, per-packet stages (today the monitor) consume
//! records, and reports go to a sink. Live capture, flow export and packet
//! export plug in at those three points.

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use clarion_capture::{CaptureFile, PacketSource};
use clarion_engine::{Monitor, MonitorConfig, Report, Unparsed};
use clarion_sinks::{JsonLinesSink, ReportSink, SinkError, TableSink};
use clarion_wire::PacketRecord;

use crate::args::{Format, RunArgs, When};
use crate::summary::Summary;
use crate::Failure;

/// Reads and checks an events file; errors are rendered for the terminal.
pub fn load_events(path: &Path) -> Result<Vec<clarion_lang::spec::EventSpec>, Failure> {
    let src = std::fs::read_to_string(path).map_err(|e| {
        Failure::Usage(format!(
            "clarion: cannot read events file {}: {e}",
            path.display()
        ))
    })?;
    let name = path.display().to_string();
    let specs = clarion_lang::check(&src)
        .map_err(|d| Failure::Usage(d.render(&name, &src, std::io::stderr().is_terminal())))?;
    if specs.is_empty() {
        return Err(Failure::Usage(format!(
            "clarion: {name} defines no events; add one, e.g.\n\n  event big_flows\n    when sum(volume) > 1MB\n"
        )));
    }
    Ok(specs)
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

pub fn sink_error(e: SinkError) -> Failure {
    match e {
        SinkError::BrokenPipe => Failure::BrokenPipe,
        other => Failure::Runtime(anyhow!(other).context("cannot write reports")),
    }
}

pub fn open_sink(a: &RunArgs) -> Result<Box<dyn ReportSink>, Failure> {
    open_sink_to(a.output.as_deref(), a.format)
}

/// Reports to a file, or to standard output (a table on a terminal, by default).
pub fn open_sink_to(output: Option<&Path>, format: Format) -> Result<Box<dyn ReportSink>, Failure> {
    let (writer, is_tty): (Box<dyn Write>, bool) = match output {
        Some(p) => {
            let f = File::create(p)
                .with_context(|| format!("cannot create output file {}", p.display()))
                .map_err(Failure::Runtime)?;
            (Box::new(f), false)
        }
        None => {
            let out = std::io::stdout();
            let tty = out.is_terminal();
            (Box::new(out), tty)
        }
    };
    let table = match format {
        Format::Table => true,
        Format::Json => false,
        Format::Auto => is_tty,
    };
    Ok(if table {
        Box::new(TableSink::new(writer))
    } else {
        Box::new(JsonLinesSink::new(writer))
    })
}

fn progress_bar(a: &RunArgs, total: Option<u64>) -> Option<ProgressBar> {
    let show = match a.progress {
        When::Always => true,
        When::Never => false,
        When::Auto => std::io::stderr().is_terminal() && !a.quiet,
    };
    if !show {
        return None;
    }
    let bar = match total {
        Some(t) => ProgressBar::with_draw_target(Some(t), ProgressDrawTarget::stderr()),
        None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
    };
    let style =
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(200));
    Some(bar)
}

/// The monitor configuration the flags describe (file and live runs alike).
pub fn monitor_config(a: &RunArgs) -> MonitorConfig {
    MonitorConfig {
        flow_capacity: a.flow_capacity,
        flow_timeout_ns: a.flow_timeout,
        burst_gap_ns: a.burst_gap,
        tcp_segment_limit: a.tcp_segment_limit,
        dos_threshold_bytes: a.dos_threshold.min(clarion_engine::DOS_MAX_THRESHOLD),
        dos_auto_raise: a.dos_auto_raise,
        host: a.host.clone().unwrap_or_else(host_name),
        ..MonitorConfig::default()
    }
}

/// A monitor with every event of `specs` installed.
pub fn build_monitor(
    a: &RunArgs,
    config: MonitorConfig,
    specs: &[clarion_lang::spec::EventSpec],
) -> Result<Monitor, Failure> {
    let mut monitor = Monitor::new(config);
    // `on demand` events come with the drill-downs of the events installing them.
    for s in specs.iter().filter(|s| !s.on_demand) {
        monitor
            .install(s.clone())
            .map_err(|e| Failure::Usage(format!("clarion: {}: {e}", a.events.display())))?;
    }
    Ok(monitor)
}

pub fn run(a: &RunArgs) -> Result<ExitCode, Failure> {
    if !a.interface.is_empty() {
        return crate::live::run_live(a);
    }
    let Some(pcap) = &a.pcap else {
        return Err(Failure::Usage(
            "clarion: give a capture file (--pcap FILE) or an interface (--interface IFACE)".into(),
        ));
    };
    let specs = load_events(&a.events)?;
    let n_events = specs.len();
    match &a.inventory {
        Some(path) => {
            let mut net = crate::network::build(a, path, &specs)?;
            let (code, run) = replay(a, pcap, &mut net)?;
            if !a.quiet {
                crate::network::print_summary(&net, &run, n_events);
            }
            Ok(code)
        }
        None => {
            let mut monitor = build_monitor(a, monitor_config(a), &specs)?;
            let (code, run) = replay(a, pcap, &mut monitor)?;
            if !a.quiet {
                let s = Summary {
                    counters: monitor.counters(),
                    dos_threshold: monitor.dos_threshold(),
                    frames: run.frames,
                    skipped: run.skipped,
                    dropped: run.dropped,
                    elapsed: run.elapsed,
                    events: n_events,
                };
                eprint!("{s}");
            }
            Ok(code)
        }
    }
}

/// What consumes a capture's packets: one monitor, or a network of them.
pub trait Stage {
    fn process(&mut self, p: &PacketRecord, out: &mut Vec<Report>);
    fn note_unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Vec<Report>);
    fn finish(&mut self, out: &mut Vec<Report>);
}

impl Stage for Monitor {
    fn process(&mut self, p: &PacketRecord, out: &mut Vec<Report>) {
        Monitor::process(self, p, out)
    }
    fn note_unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Vec<Report>) {
        Monitor::note_unparsed(self, ts_ns, why, out)
    }
    fn finish(&mut self, out: &mut Vec<Report>) {
        Monitor::finish(self, out)
    }
}

impl Stage for clarion_network::Network {
    fn process(&mut self, p: &PacketRecord, out: &mut Vec<Report>) {
        clarion_network::Network::process(self, p, out)
    }
    fn note_unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Vec<Report>) {
        clarion_network::Network::note_unparsed(self, ts_ns, why, out)
    }
    fn finish(&mut self, out: &mut Vec<Report>) {
        clarion_network::Network::finish(self, out)
    }
}

/// How a replay went, for the summary.
pub struct Replay {
    pub frames: u64,
    pub skipped: u64,
    pub dropped: u64,
    pub elapsed: Duration,
}

/// Reads the capture into `stage`, writing reports as they come; the exit
/// status is 1 when the capture is damaged (reports then cover the packets before).
fn replay(a: &RunArgs, pcap: &Path, stage: &mut dyn Stage) -> Result<(ExitCode, Replay), Failure> {
    let mut source = CaptureFile::open(pcap)
        .with_context(|| format!("cannot read capture {}", pcap.display()))
        .map_err(Failure::Runtime)?;
    let mut sink = open_sink(a)?;
    let bar = progress_bar(a, source.stats().bytes_total);

    let started = Instant::now();
    let mut reports: Vec<Report> = Vec::new();
    let mut damage = None;
    let mut frames: u64 = 0;
    while let Some(item) = source.next_packet() {
        let raw = match item {
            Ok(raw) => raw,
            Err(e) if e.is_fatal() => {
                damage = Some(e);
                break;
            }
            Err(e) => {
                // E.g. a pcapng interface of an unsupported link type: its packets are skipped.
                eprintln!("clarion: warning: {e}");
                continue;
            }
        };
        frames += 1;
        match clarion_wire::parse_frame(raw.link, raw.data, raw.ts_ns, raw.orig_len) {
            Ok(rec) => stage.process(&rec, &mut reports),
            Err(e) if e.is_not_ip() => stage.note_unparsed(raw.ts_ns, Unparsed::NotIp, &mut reports),
            Err(_) => stage.note_unparsed(raw.ts_ns, Unparsed::Malformed, &mut reports),
        }
        if !reports.is_empty() {
            write_all(&mut *sink, &mut reports)?;
        }
        if frames.is_multiple_of(65_536) {
            if let Some(b) = &bar {
                b.set_position(source.stats().bytes_read);
            }
        }
    }
    stage.finish(&mut reports);
    write_all(&mut *sink, &mut reports)?;
    sink.flush().map_err(sink_error)?;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let st = source.stats();
    let run = Replay {
        frames,
        skipped: st.skipped,
        dropped: st.dropped,
        elapsed: started.elapsed(),
    };
    let code = match damage {
        Some(e) => {
            eprintln!("clarion: warning: {e}; reports cover the packets before the damage");
            ExitCode::from(1)
        }
        None => ExitCode::SUCCESS,
    };
    Ok((code, run))
}

pub fn write_all(sink: &mut dyn ReportSink, reports: &mut Vec<Report>) -> Result<(), Failure> {
    for r in reports.drain(..) {
        sink.write(&r).map_err(sink_error)?;
    }
    Ok(())
}
