//! What `clarion run`'s flags say its host is, in one place: its name, its
//! events, its monitor's configuration, where its reports go and the
//! capture it reads. A file run, a network of hosts and a live run all take
//! it from here (and an agent its events), so they cannot drift apart.

use std::io::IsTerminal;
use std::path::Path;

use anyhow::anyhow;
use clarion_capture::{CaptureError, CaptureFile};
use clarion_engine::{Monitor, MonitorConfig, Report};
use clarion_sinks::Sink;

use crate::args::RunArgs;
use crate::outputs::sink_error;
use crate::Failure;

/// Reads and checks an events file; errors are rendered for the terminal.
pub fn load_events(path: &Path) -> Result<Vec<clarion_lang::spec::EventSpec>, Failure> {
    let src = crate::check::read_events_file(path)?;
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

/// The run's output, and the alert sinks of `--webhook` and `--syslog` after it.
pub fn open_sink(a: &RunArgs) -> Result<Box<dyn Sink<Report>>, Failure> {
    let out = crate::outputs::reports(a.output.as_deref(), a.format, &run_host(a))?;
    crate::alerts::with_alerts(out, &a.alerts, !a.interface.is_empty(), a.events.as_deref())
}

/// This run's host: `--host`, else the machine's name.
pub fn run_host(a: &RunArgs) -> String {
    a.host.clone().unwrap_or_else(host_name)
}

/// The monitor configuration the flags describe (file and live runs
/// alike): the shared monitor flags, this run's host name and `--health`.
pub fn monitor_config(a: &RunArgs) -> MonitorConfig {
    crate::monitor::config(
        &a.monitor,
        crate::monitor::Role {
            host: run_host(a),
            keep_health: a.health.is_some(),
            history_windows: 0,
        },
    )
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
            .map_err(|e| Failure::Usage(format!("clarion: {}: {e}", events_name(a))))?;
    }
    Ok(monitor)
}

/// The events file, for messages.
pub fn events_name(a: &RunArgs) -> String {
    a.events
        .as_deref()
        .map_or_else(|| "(no events)".into(), |p| p.display().to_string())
}

/// Opens a capture file ("-": standard input); the error names the file and its reason, once.
pub fn open_capture(path: &Path) -> Result<CaptureFile, Failure> {
    CaptureFile::open(path).map_err(|e| {
        let why = match &e {
            CaptureError::Open { error, .. } => error.to_string(),
            other => other.to_string(),
        };
        Failure::Runtime(anyhow!("cannot read capture {}: {why}", path.display()))
    })
}

pub fn write_all(sink: &mut dyn Sink<Report>, reports: &mut Vec<Report>) -> Result<(), Failure> {
    for r in reports.drain(..) {
        sink.write(&r).map_err(sink_error)?;
    }
    Ok(())
}
