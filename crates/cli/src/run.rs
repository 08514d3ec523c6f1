//! `clarion run --pcap`: flags in, a host assembled by `clarion-host` out —
//! the capture replayed into one monitor, several merged workers, or a
//! network of hosts (`--inventory`), its reports to a sink.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::anyhow;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use clarion_capture::{CaptureError, CaptureFile, SourceStats};
use clarion_engine::Report;
use clarion_host::{
    replay, Driver, Frames, MergedCaptures, NetworkStage, ReplayOptions, Replayed, Workers, WorkersConfig,
};
use clarion_lang::spec::EventSpec;
use clarion_network::Network;
use clarion_pipeline::{Counting, EventCaptures, Sinks, Stage};
use clarion_sinks::Sink;

use crate::args::{CaptureArg, RunArgs, When};
use crate::host_spec::{
    build_monitor, events_name, load_events, monitor_config, open_capture, open_sink, run_host, write_all,
};
use crate::outputs::sink_error;
use crate::summary::Summary;
use crate::Failure;

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

pub fn run(a: &RunArgs) -> Result<ExitCode, Failure> {
    // Reports (of --events, or of events added through --api) go to --output or standard output.
    let reporting = a.events.is_some() || a.live.api.is_some();
    crate::exports::check_stdout(&a.export, reporting && a.output.is_none())?;
    if !a.interface.is_empty() {
        return run_live(a);
    }
    if let Some(msg) = crate::monitor::file_refusal(&a.monitor) {
        return Err(Failure::Usage(msg));
    }
    let specs = match &a.events {
        Some(events) => {
            let specs = load_events(events)?;
            crate::check::warn_cost(events, &specs, a.workers, a.quiet);
            Some(specs)
        }
        None => None,
    };
    if let Some(path) = &a.inventory {
        return run_inventory(a, path, specs);
    }
    let capture = one_capture(a)?;
    let mut exports = crate::exports::open(&a.export, &run_host(a))?;
    if let Some(specs) = &specs {
        exports.captures = crate::exports::open_captures(&a.export.policies, specs)?;
    }
    let mut source = open_capture(&capture.path)?;
    let file = replay_file(a, &mut source, specs.as_deref(), exports)?;
    if !a.quiet {
        let s = Summary {
            counters: file.counters,
            dos_threshold: file.dos_threshold,
            frames: file.run.frames,
            skipped: file.run.source.skipped,
            dropped: file.run.source.dropped,
            elapsed: file.run.elapsed,
            events: specs.as_ref().map(Vec::len),
        };
        eprint!("{s}{}", file.records.unwrap_or_default());
    }
    Ok(exit_code(file.run.damage))
}

/// `-i`: the cost of the events warned about first (the live run loads
/// the file again itself, and reports its errors).
fn run_live(a: &RunArgs) -> Result<ExitCode, Failure> {
    if let Some(events) = &a.events {
        if let Ok(specs) = load_events(events) {
            if !a.quiet {
                crate::check::warn_cost(events, &specs, a.workers, false);
            }
        }
    }
    crate::live::run_live(a)
}

/// `--inventory`: refused with what describes one host's traffic, else
/// [`run_network`].
fn run_inventory(a: &RunArgs, path: &Path, specs: Option<Vec<EventSpec>>) -> Result<ExitCode, Failure> {
    let exporting = !a.export.records.is_empty()
        || a.export.gpv.is_some()
        || !a.export.app.is_empty()
        || a.export.policies.exports.is_some();
    if exporting {
        return Err(Failure::Usage(
            "clarion: --records, --gpv, --app and --exports describe one host's traffic: not with --inventory"
                .into(),
        ));
    }
    let specs = specs.ok_or_else(|| Failure::Usage("clarion: --inventory needs --events".into()))?;
    if a.export.policies.capture_dir.is_some() || specs.iter().any(|s| s.capture.is_some()) {
        return Err(Failure::Usage(
            "clarion: `then capture` and --capture-dir describe one host's packets: not with --inventory"
                .into(),
        ));
    }
    run_network(a, path, &specs)
}

/// The one capture of a run without `--inventory`, refused when the flags
/// say several hosts', or several monitors where one is needed.
fn one_capture(a: &RunArgs) -> Result<&CaptureArg, Failure> {
    let [capture] = a.pcap.as_slice() else {
        return Err(Failure::Usage(
            "clarion: several captures are several hosts': give --inventory and each as --pcap NAME=FILE"
                .into(),
        ));
    };
    if let Some(host) = &capture.host {
        return Err(Failure::Usage(format!(
            "clarion: --pcap {host}=FILE names a host of an inventory: give --inventory, or the file alone"
        )));
    }
    if a.workers > 1 && a.health.is_some() {
        return Err(Failure::Usage(
            "clarion: --health is written by one monitor a host: give --workers 1 (the default)".into(),
        ));
    }
    Ok(capture)
}

/// What a capture replayed on one host gave: for its summary.
struct FileRun {
    run: Replayed,
    counters: clarion_engine::Counters,
    dos_threshold: u32,
    /// The exports' lines of the summary.
    records: Option<String>,
}

/// Replays `source` into the stage the flags ask for: no monitor (records
/// alone), merged workers or one monitor, with `exports` beside it.
fn replay_file(
    a: &RunArgs,
    source: &mut CaptureFile,
    specs: Option<&[EventSpec]>,
    exports: crate::exports::Exports,
) -> Result<FileRun, Failure> {
    let file = |(run, counters, dos_threshold, records)| FileRun {
        run,
        counters,
        dos_threshold,
        records,
    };
    match specs {
        None if a.workers > 1 => Err(Failure::Usage(
            "clarion: --workers shares the events' work; records alone are made on the reading thread: give --events, or --workers 1"
                .into(),
        )),
        None => {
            let (run, stage, records) = replay_exporting(a, source, Counting::default(), exports)?;
            Ok(file((run, stage.counters(), 0, records)))
        }
        Some(specs) if a.workers > 1 => {
            let config = WorkersConfig {
                workers: a.workers,
                ..WorkersConfig::default()
            };
            let workers = Workers::start(&monitor_config(a), specs, config)
                .map_err(|e| Failure::Usage(format!("clarion: {}: {e}", events_name(a))))?;
            let (run, workers, records) = replay_exporting(a, source, workers, exports)?;
            // A file's sweeps are never late: every worker kept the threshold.
            let dos_threshold = monitor_config(a).dos_threshold_bytes;
            Ok(file((run, workers.counters(), dos_threshold, records)))
        }
        Some(specs) => {
            let monitor = build_monitor(a, monitor_config(a), specs)?;
            let (run, monitor, records) = replay_exporting(a, source, monitor, exports)?;
            Ok(file((run, monitor.counters(), monitor.dos_threshold(), records)))
        }
    }
}

/// Replays the capture into `stage`, with flow records and GPVs beside
/// it when asked (`exports`); gives the stage back, and the exports' lines
/// of the summary. The apps' report is written at the end.
fn replay_exporting<F: Frames, S: Stage>(
    a: &RunArgs,
    source: &mut F,
    stage: S,
    exports: crate::exports::Exports,
) -> Result<(Replayed, S, Option<String>), Failure> {
    if exports.is_empty() {
        let mut stage = stage;
        let run = replay_into(a, source, &mut stage)?;
        return Ok((run, stage, None));
    }
    let (mut with, apps_out) = exports.around(stage)?;
    let run = replay_into(a, source, &mut with)?;
    let apps = with.sinks_mut().and_then(Sinks::apps_mut);
    if let Some(apps) = apps.filter(|r| !r.names().is_empty()) {
        crate::exports::write_app_report(apps, apps_out.as_deref())?;
    }
    let mut summary = crate::exports::summary(&with);
    if let Some(c) = with.stage_mut(EventCaptures::finish_files) {
        summary += &crate::exports::capture_summary(&c);
        for e in &c.errors {
            eprintln!("clarion: capture not written: {e}");
        }
    }
    Ok((run, with.into_head(), Some(summary)))
}

/// `--inventory`: one capture of several hosts' traffic, or one per host.
fn run_network(a: &RunArgs, inventory: &Path, specs: &[EventSpec]) -> Result<ExitCode, Failure> {
    if a.workers > 1 {
        return Err(Failure::Usage(
            "clarion: --workers applies to one host's traffic; with --inventory each host runs one monitor"
                .into(),
        ));
    }
    let net = crate::network::build(a, inventory, specs)?;
    let run = match a.pcap.as_slice() {
        [one] if one.host.is_none() => {
            let mut stage = NetworkStage::whole(net);
            let run = replay_into(a, &mut open_capture(&one.path)?, &mut stage)?;
            (run, stage.network)
        }
        captures => {
            let (hosts, files) = per_host(&net, captures)?;
            let mut source = MergedCaptures::new(files);
            let mut stage = NetworkStage::per_host(net, hosts);
            let run = replay_into(a, &mut source, &mut stage)?;
            (run, stage.network)
        }
    };
    if !a.quiet {
        let dos_threshold = monitor_config(a).dos_threshold_bytes;
        crate::network::print_summary(&run.1, &run.0, specs.len(), dos_threshold);
    }
    Ok(exit_code(run.0.damage))
}

/// Each `NAME=FILE` capture's host (inventory index) and opened file.
fn per_host(net: &Network, captures: &[CaptureArg]) -> Result<(Vec<usize>, Vec<CaptureFile>), Failure> {
    let mut hosts = Vec::new();
    let mut files = Vec::new();
    for c in captures {
        let Some(name) = &c.host else {
            return Err(Failure::Usage(format!(
                "clarion: with several captures each is one host's: write --pcap NAME={}",
                c.path.display()
            )));
        };
        let Some(h) = net.host_index(name) else {
            return Err(Failure::Usage(format!(
                "clarion: --pcap {name}=…: the inventory lists no host {name}"
            )));
        };
        if hosts.contains(&h) {
            return Err(Failure::Usage(format!("clarion: two captures for host {name}")));
        }
        hosts.push(h);
        files.push(open_capture(&c.path)?);
    }
    let missing: Vec<String> = net
        .host_counters()
        .into_iter()
        .enumerate()
        .filter(|(h, _)| !hosts.contains(h))
        .map(|(_, (name, _))| name)
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "clarion: note: no capture for {} of the inventory: they see no packet, and decisions count them as hosts without traffic",
            missing.join(", ")
        );
    }
    Ok((hosts, files))
}

/// Status 1 when the capture was damaged (the reports cover the packets before).
fn exit_code(damage: Option<CaptureError>) -> ExitCode {
    match damage {
        Some(e) => {
            eprintln!("clarion: warning: {e}; reports cover the packets before the damage");
            ExitCode::from(1)
        }
        None => ExitCode::SUCCESS,
    }
}

/// Reports to a sink as they come, with a progress bar; health records
/// (`--health`) to their file.
struct ToSink {
    sink: Box<dyn Sink<Report>>,
    bar: Option<ProgressBar>,
    health: Option<HealthFile>,
}

impl<St: Stage + ?Sized> Driver<St> for ToSink {
    type Error = Failure;

    fn reports(&mut self, stage: &mut St, reports: &mut Vec<Report>) -> Result<(), Failure> {
        if let Some(h) = &mut self.health {
            h.write(stage)?;
        }
        write_all(&mut *self.sink, reports)
    }

    fn warning(&mut self, error: &CaptureError) {
        eprintln!("clarion: warning: {error}");
    }

    fn progress(&mut self, stats: &SourceStats) {
        if let Some(b) = &self.bar {
            b.set_position(stats.bytes_read);
        }
    }
}

/// Replays the capture into `stage`, writing its reports to the run's sink.
fn replay_into<S: Frames, St: Stage + ?Sized>(
    a: &RunArgs,
    source: &mut S,
    stage: &mut St,
) -> Result<Replayed, Failure> {
    let mut driver = ToSink {
        sink: open_sink(a)?,
        bar: progress_bar(a, source.source_stats().bytes_total),
        health: a.health.as_deref().map(HealthFile::create).transpose()?,
    };
    let run = replay(source, stage, &mut driver, &ReplayOptions::default())
        .map_err(crate::exports::replay_failure)?;
    if let Some(h) = &mut driver.health {
        h.write(stage)?;
        h.flush()?;
    }
    driver.sink.flush().map_err(sink_error)?;
    if let Some(b) = &driver.bar {
        b.finish_and_clear();
    }
    Ok(run)
}

/// The health stream: JSON lines of the epochs not seen in full.
struct HealthFile {
    path: std::path::PathBuf,
    out: std::io::BufWriter<std::fs::File>,
    records: Vec<clarion_engine::Health>,
}

impl HealthFile {
    fn create(path: &Path) -> Result<HealthFile, Failure> {
        let file = std::fs::File::create(path)
            .map_err(|e| Failure::Runtime(anyhow!("cannot write --health {}: {e}", path.display())))?;
        Ok(HealthFile {
            path: path.to_path_buf(),
            out: std::io::BufWriter::new(file),
            records: Vec::new(),
        })
    }

    /// Writes the records the stage kept since last asked.
    fn write<St: Stage + ?Sized>(&mut self, stage: &mut St) -> Result<(), Failure> {
        use std::io::Write;
        stage.take_health(&mut self.records);
        for h in self.records.drain(..) {
            writeln!(self.out, "{}", h.to_json()).map_err(|e| {
                Failure::Runtime(anyhow!("cannot write --health {}: {e}", self.path.display()))
            })?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Failure> {
        use std::io::Write;
        self.out
            .flush()
            .map_err(|e| Failure::Runtime(anyhow!("cannot write --health {}: {e}", self.path.display())))
    }
}
