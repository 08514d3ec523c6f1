//! `--records`, `--gpv`, `--app` and `--exports`: the destinations named
//! on the command line, opened, and the stages that feed them
//! (`clarion_pipeline`: the stages beside the events, and the `Sinks` their
//! records and GPVs go to, on a file's reading thread or a live host's).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::anyhow;

use clarion_event_capture::{CaptureConfig, CaptureStats, Captures};
use clarion_export::{ExportConfig, ExportStats, Exporter, FastPathKind};
use clarion_flows::FlowConfig;
use clarion_gpv::{app_by_name, AppRuntime, CacheConfig, Gpv};
use clarion_outputs::Kind;
use clarion_pipeline::{EventCaptures, ExportPolicies, FlowRecords, Gpvs, Pipeline, Sinks, Stage, Stages};
use clarion_records::FlowRecord;
use clarion_sinks::{BoxSink, FanOut};

use crate::args::{ExportArgs, FastPathArg, PolicyArgs};
use crate::outputs::write_error;
use crate::summary::thousands;
use crate::Failure;

/// The schema of the apps' output (`--app`, `clarion apps run`).
pub const APPS_SCHEMA: &str = "clarion.apps/1";

/// Every `--records` destination, fed the same records.
pub type Records = FanOut<BoxSink<FlowRecord>>;

/// The exports of a run, opened.
pub struct Exports {
    pub records: Option<(Records, FlowConfig)>,
    pub gpv_sink: Option<BoxSink<Gpv>>,
    pub gpv_config: CacheConfig,
    /// The apps fed by the GPVs, and where their report goes.
    pub apps: Option<(AppRuntime, Option<PathBuf>)>,
    /// The export policies of `--exports`.
    pub exporter: Option<Exporter>,
    /// Capture around the events that say `then capture`.
    pub captures: Option<Captures>,
}

impl Exports {
    pub fn is_empty(&self) -> bool {
        self.records.is_none() && !self.makes_gpvs() && self.exporter.is_none() && self.captures.is_none()
    }

    /// GPVs are made when they are written or apps read them.
    pub fn makes_gpvs(&self) -> bool {
        self.gpv_sink.is_some() || self.apps.is_some()
    }

    /// `stage` with the exports beside it, its records and GPVs delivered
    /// to their sinks as they are made; also where the apps' report goes.
    pub fn around<S: Stage>(self, stage: S) -> Result<(Pipeline<S>, Option<PathBuf>), Failure> {
        let usage = |e: &dyn std::fmt::Display| Failure::Usage(format!("clarion: {e}"));
        let makes_gpvs = self.makes_gpvs();
        let mut stages = Stages::default();
        let mut sinks = Sinks::default();
        if let Some((sink, config)) = self.records {
            stages.records = Some(FlowRecords::new(config).map_err(|e| usage(&e))?);
            sinks = sinks.with_records(sink);
        }
        let (apps, apps_out) = self.apps.unwrap_or_default();
        if makes_gpvs {
            stages.gpvs = Some(Gpvs::new(self.gpv_config).map_err(|e| usage(&e))?);
            sinks = sinks.with_gpvs(self.gpv_sink, apps);
        }
        stages.exports = self.exporter.map(ExportPolicies::new);
        stages.captures = self.captures.map(EventCaptures::new);
        Ok((Pipeline::new(stage, stages).deliver_to(sinks), apps_out))
    }
}

/// Opens every destination of `--records` and `--gpv`, and the apps of
/// `--app` (each error names its destination or app). Every destination
/// is checked before any is opened: a wrong one leaves no file behind.
/// `host` names the records where a destination tells hosts apart.
pub fn open(a: &ExportArgs, host: &str) -> Result<Exports, Failure> {
    let record_dests = a
        .records
        .iter()
        .map(|d| crate::outputs::parse::<FlowRecord>("--records", d).map(|d| d.with_host(host)))
        .collect::<Result<Vec<_>, _>>()?;
    let gpv_dest = match a.gpv.as_deref() {
        Some(p) => Some(crate::outputs::parse::<Gpv>(
            "--gpv",
            crate::outputs::text("--gpv", p)?,
        )?),
        None => None,
    };
    let records = if record_dests.is_empty() {
        None
    } else {
        let sinks = record_dests
            .iter()
            .map(|d| crate::outputs::open("--records", d))
            .collect::<Result<Vec<_>, _>>()?;
        let config = FlowConfig {
            cache_slots: a.record_cache as usize,
            idle_timeout_ns: a.record_idle_timeout,
            active_timeout_ns: a.record_active_timeout,
            ..FlowConfig::default()
        };
        Some((FanOut::new(sinks), config))
    };
    let gpv_sink = gpv_dest.map(|d| crate::outputs::open("--gpv", &d)).transpose()?;
    let apps = if a.app.is_empty() && a.app_output.is_none() {
        None
    } else {
        Some((app_runtime(&a.app)?, a.app_output.clone()))
    };
    Ok(Exports {
        records,
        gpv_sink,
        gpv_config: CacheConfig::default(),
        apps,
        exporter: open_policies(&a.policies)?,
        captures: None,
    })
}

/// The exporter of `--exports`, its file checked and its destinations opened.
pub fn open_policies(a: &PolicyArgs) -> Result<Option<Exporter>, Failure> {
    let Some((policies, config)) = load_policies(a)? else {
        return Ok(None);
    };
    let name = a.exports.as_deref().unwrap_or(Path::new("")).display();
    Exporter::new(&policies, &config)
        .map(Some)
        .map_err(|e| Failure::Usage(format!("clarion: {name}: {e}")))
}

/// The policies of `--exports`, their file checked, and the exporter's
/// settings of the flags: for one exporter (`open_policies`) or one per
/// live worker (`clarion_host::LiveConfig::exports`).
pub fn load_policies(
    a: &PolicyArgs,
) -> Result<Option<(Vec<clarion_lang::spec::ExportSpec>, ExportConfig)>, Failure> {
    let Some(path) = &a.exports else { return Ok(None) };
    let name = path.display().to_string();
    let bytes = std::fs::read(path)
        .map_err(|e| Failure::Usage(format!("clarion: cannot read export policies {name}: {e}")))?;
    let color = std::io::stderr().is_terminal();
    let src = crate::check::events_text(&name, bytes, color)?;
    let policies =
        clarion_lang::check_exports(&src).map_err(|d| Failure::Usage(d.render(&name, &src, color)))?;
    if policies.is_empty() {
        return Err(Failure::Usage(format!(
            "clarion: {name} defines no export policy; add one, e.g.\n\n  export web_headers\n    filter proto = tcp and dst_port = 443\n    send headers to collector 127.0.0.1\n"
        )));
    }
    let config = export_config(a)?;
    if config.headers.key.is_none() {
        // Said once at start: a collector run as it should be (with --key)
        // refuses every one of these datagrams, and counts them.
        let collectors: Vec<String> = policies
            .iter()
            .flat_map(|p| &p.sends)
            .filter_map(|s| match s.destination {
                clarion_lang::spec::Destination::Collector(addr) => Some(addr.to_string()),
                _ => None,
            })
            .collect();
        if let Some(first) = collectors.first() {
            eprintln!(
                "clarion: warning: header datagrams to {first}{} are not authenticated (no --export-key): a collector takes them only when run with --insecure",
                if collectors.len() > 1 { " and others" } else { "" }
            );
        }
    }
    Ok(Some((policies, config)))
}

/// The exporter's settings of the flags (`--export-dir` and the others),
/// with or without `--exports` (an agent takes its policies from the manager).
pub fn export_config(a: &PolicyArgs) -> Result<ExportConfig, Failure> {
    let capacity = a.export_cache as usize;
    let exporter = match &a.exporter_name {
        Some(n) => clarion_headers::ExporterName::new(n)
            .map_err(|e| Failure::Usage(format!("clarion: --exporter-name: {e}")))?,
        None => clarion_headers::ExporterName::sanitized(&crate::collect::host_name()),
    };
    let key = a
        .export_key
        .as_deref()
        .map(crate::collect::read_key)
        .transpose()?;
    Ok(ExportConfig {
        export_dir: a.export_dir.clone(),
        fast_path: match a.export_fast_path {
            FastPathArg::Uss => FastPathKind::Uss { capacity },
            FastPathArg::Megaflow => FastPathKind::Megaflow { capacity },
            FastPathArg::None => FastPathKind::None,
        },
        run_id: run_id(),
        sampling: clarion_export::SamplingConfig {
            budget: a.export_cpu,
            ..clarion_export::SamplingConfig::default()
        },
        headers: clarion_headers::EncoderConfig {
            exporter,
            key,
            ..clarion_headers::EncoderConfig::default()
        },
        ..ExportConfig::default()
    })
}

/// Capturing around the events of `specs` that say `then capture`, into
/// `--capture-dir`; `None` when none does.
pub fn open_captures(
    a: &PolicyArgs,
    specs: &[clarion_lang::spec::EventSpec],
) -> Result<Option<Captures>, Failure> {
    let Some(config) = capture_config(a, specs)? else {
        return Ok(None);
    };
    let dir = config.dir.clone();
    Captures::new(specs, config)
        .map_err(|e| Failure::Runtime(anyhow!("cannot capture into {}: {e}", dir.display())))
}

/// Where `then capture` files go (`--capture-dir`, each ring
/// `--capture-buffer` bytes), refusing events that capture without it;
/// `None` without the flag. A live host takes it even when no event of
/// the start captures: events installed later may.
pub fn capture_config(
    a: &PolicyArgs,
    specs: &[clarion_lang::spec::EventSpec],
) -> Result<Option<CaptureConfig>, Failure> {
    let capturing: Vec<&str> = specs
        .iter()
        .filter(|s| s.capture.is_some())
        .map(|s| s.name.as_str())
        .collect();
    let Some(dir) = &a.capture_dir else {
        if capturing.is_empty() {
            return Ok(None);
        }
        return Err(Failure::Usage(format!(
            "clarion: event{} {} capture{} packets (`then capture`): give --capture-dir DIR for the files",
            if capturing.len() > 1 { "s" } else { "" },
            capturing.join(", "),
            if capturing.len() > 1 { "" } else { "s" },
        )));
    };
    Ok(Some(CaptureConfig {
        dir: dir.clone(),
        ring_bytes: a.capture_buffer,
        ..CaptureConfig::default()
    }))
}

/// The summary lines of the captures.
pub fn capture_summary(c: &CaptureStats) -> String {
    let packets: u64 = c.files.iter().map(|(_, n)| n).sum();
    let mut s = format!(
        "  captures: {} files, {} packets",
        thousands(c.files.len() as u64),
        thousands(packets)
    );
    if c.refused > 0 {
        s += &format!(
            ", {} REFUSED (see the reports' capture.error)",
            thousands(c.refused)
        );
    }
    if !c.errors.is_empty() {
        s += &format!(", {} NOT WRITTEN (said above)", thousands(c.errors.len() as u64));
    }
    s + "\n"
}

/// This run's start, UTC, as file names can carry it: `20261126T035313Z`.
fn run_id() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace(['-', ':'], "")
}

/// A runtime with the apps of these names.
pub fn app_runtime(names: &[String]) -> Result<AppRuntime, Failure> {
    let mut apps = AppRuntime::new();
    for name in names {
        let app = app_by_name(name).map_err(|e| Failure::Usage(format!("clarion: --app {name}: {e}")))?;
        apps.add(app)
            .map_err(|e| Failure::Usage(format!("clarion: --app {name}: {e}")))?;
    }
    Ok(apps)
}

/// `--records -` is standard output's only writer: refused beside the
/// reports (`reports_to_stdout`: no `--output`) or the apps' report
/// there, or given twice, each an interleaving no reader could split.
pub fn check_stdout(a: &ExportArgs, reports_to_stdout: bool) -> Result<(), Failure> {
    let dashes = a.records.iter().filter(|d| *d == "-").count();
    let other = if dashes == 0 {
        return Ok(());
    } else if dashes > 1 {
        "another --records -"
    } else if reports_to_stdout {
        "the reports (give --output FILE for them)"
    } else if !a.app.is_empty() && a.app_output.is_none() {
        "the apps' report (give --app-output FILE for it)"
    } else {
        return Ok(());
    };
    Err(Failure::Usage(format!(
        "clarion: --records -: standard output already carries {other}"
    )))
}

/// The apps' report as one JSON line (schema `clarion.apps/1`), to `out`
/// or standard output.
pub fn write_app_report(apps: &mut AppRuntime, out: Option<&Path>) -> Result<(), Failure> {
    let line = serde_json::json!({ "schema": APPS_SCHEMA, "apps": apps.report() }).to_string();
    let written = match out {
        Some(p) => std::fs::write(p, format!("{line}\n"))
            .map_err(|e| anyhow!("cannot write --app-output {}: {e}", p.display())),
        None => {
            writeln!(std::io::stdout(), "{line}").map_err(|e| anyhow!("cannot write the apps' report: {e}"))
        }
    };
    written.map_err(Failure::Runtime)
}

/// The exports' part of the end-of-run summary.
pub fn summary<S: Stage>(p: &Pipeline<S>) -> String {
    let mut s = String::new();
    let sinks = p.sinks();
    let records = sinks.map_or(0, Sinks::records_written);
    if let Some((st, written)) = p.stage::<FlowRecords>().map(|r| (r.stats(), records)) {
        s += &format!(
            "  flow records: {} written from {} packets ({} microflow records, cache eviction ratio {:.3})\n",
            thousands(written),
            thousands(st.packets),
            thousands(st.microflow_records),
            st.eviction_ratio(),
        );
    }
    let (_, gpvs) = sinks.map_or((0, 0), Sinks::gpvs_taken);
    if let Some((st, written)) = p.stage::<Gpvs>().map(|g| (g.stats(), gpvs)) {
        s += &format!(
            "  GPVs: {} made from {} packets, {} written\n",
            thousands(st.gpvs),
            thousands(st.packets),
            thousands(written),
        );
    }
    if let Some(x) = p.stage::<ExportPolicies>().map(|x| x.exporter().stats()) {
        s += &export_summary(&x);
    }
    s
}

/// The summary lines of the export policies: per policy the packets it
/// took, per destination what it sent and what it could not.
pub fn export_summary(x: &ExportStats) -> String {
    let mut s = String::new();
    let c = &x.classifier;
    s += &format!(
        "  exports: {} packets classified, fast path hit rate {:.3}, {:.2} hash lookups a packet\n",
        thousands(x.offered),
        c.hit_rate(),
        c.fast_lookups_per_packet(),
    );
    for p in &x.policies {
        s += &format!("    policy {}: {} packets\n", p.name, thousands(p.matched));
    }
    if let Some(m) = &x.sampling {
        s += &format!(
            "    sampling (budget {:.2} core): exporting 1 in {:.1} now; {} exported, {} skipped; {} decreases, {} increases in {} intervals\n",
            m.budget,
            m.ratio,
            thousands(m.exported),
            thousands(m.skipped),
            m.decreases,
            m.increases,
            m.intervals,
        );
    }
    for d in &x.destinations {
        s += &format!("    {}: {} packets", d.label, thousands(d.packets));
        if d.represented != d.packets {
            s += &format!(" (standing for {})", thousands(d.represented));
        }
        if d.datagrams > 0 {
            s += &format!(" in {} datagrams", thousands(d.datagrams));
        }
        s += &format!(", {} bytes", thousands(d.bytes));
        if d.header_bytes > 0 && d.bytes > 0 {
            s += &format!(
                " ({:.1}:1 against the headers)",
                d.header_bytes as f64 / d.bytes as f64
            );
        }
        if !d.files.is_empty() {
            s += &format!(", {} files", d.files.len());
        }
        if d.dropped > 0 {
            s += &format!(", {} DROPPED", thousands(d.dropped));
        }
        if let Some(e) = &d.first_error {
            s += &format!(", {} errors (first: {e})", thousands(d.errors));
        }
        s += "\n";
    }
    s
}

/// What every live worker makes beside its monitor: a flow meter's and a
/// GPV cache's settings, and the export policies each worker runs
/// (`None`: not made).
pub type WorkerExports = (
    Option<FlowConfig>,
    Option<CacheConfig>,
    Option<clarion_host::LiveExportConfig>,
);

/// A live run's exports: what the workers' meters and caches send, to the
/// sinks and apps (`clarion run -i`, `clarion agent -i`).
pub struct LiveExports {
    /// The records' and GPVs' sinks, and the apps on the GPVs (`--app`,
    /// and those the control API adds) when GPVs are made.
    sinks: Sinks,
    /// Where the apps' report goes at the end.
    apps_out: Option<PathBuf>,
    /// The sinks' clock (flushed once a second of it).
    started: Instant,
    /// Export policies run on the workers (their summary is the host's).
    policies: bool,
    /// The newest records, kept for the control API (`/v1/flows`).
    window: Option<clarion_flow_window::SharedWindow>,
}

impl LiveExports {
    /// Opens the destinations; also the meter's and the cache's settings
    /// for the workers (`None`: not made). `host` names the records as
    /// [`open`] does.
    pub fn open(a: &ExportArgs, host: &str) -> Result<(LiveExports, WorkerExports), Failure> {
        // The policies' exporters are the workers' (one each, built by the
        // host): not one here.
        let policies = load_policies(&a.policies)?
            .map(|(policies, config)| clarion_host::LiveExportConfig { policies, config });
        let from_file = policies.is_some();
        // Without --exports the workers still get the settings: policies
        // can be installed at runtime (the control API, SIGHUP).
        let policies = Some(match policies {
            Some(p) => p,
            None => clarion_host::LiveExportConfig {
                policies: Vec::new(),
                config: export_config(&a.policies)?,
            },
        });
        let mut no_policies = a.clone();
        no_policies.policies.exports = None;
        let e = open(&no_policies, host)?;
        let makes_gpvs = e.makes_gpvs();
        let gpv_config = makes_gpvs.then_some(e.gpv_config);
        let mut sinks = Sinks::default();
        let mut record_config = None;
        if let Some((sink, config)) = e.records {
            sinks = sinks.with_records(sink);
            record_config = Some(config);
        }
        let (apps, apps_out) = e.apps.unwrap_or_default();
        if makes_gpvs {
            sinks = sinks.with_gpvs(e.gpv_sink, apps);
        }
        let out = LiveExports {
            sinks,
            apps_out,
            started: Instant::now(),
            policies: from_file,
            window: None,
        };
        Ok((out, (record_config, gpv_config, policies)))
    }

    /// ", flow records, GPVs" for the line saying what is captured.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        if self.sinks.has_records() {
            s += ", flow records";
        }
        if self.sinks.takes_gpvs() {
            s += ", GPVs";
        }
        if self.policies {
            s += ", export policies";
        }
        s
    }

    /// The apps on the GPVs; `None` when the host makes none.
    pub fn apps_mut(&mut self) -> Option<&mut AppRuntime> {
        self.sinks.apps_mut()
    }

    /// The window of recent records the control API reads (`/v1/flows`),
    /// made on the first call; `None` when the host writes no records or
    /// `--flow-window 0`. Only a host serving its API keeps one.
    pub fn flow_window(&mut self, a: &ExportArgs) -> Option<clarion_flow_window::SharedWindow> {
        if !self.sinks.has_records() || a.flow_window == 0 {
            return None;
        }
        let w = self
            .window
            .get_or_insert_with(|| clarion_flow_window::FlowWindow::shared(a.flow_window, a.flow_window_age));
        Some(Arc::clone(w))
    }

    pub fn records(&mut self, records: &[FlowRecord]) -> Result<(), Failure> {
        self.sinks.write_records(records).map_err(live_write_error)?;
        // A poisoned lock (a panicked API query) leaves the window as it was.
        if let Some(mut w) = self.window.as_ref().and_then(|w| w.lock().ok()) {
            records.iter().for_each(|r| w.push(r));
        }
        Ok(())
    }

    pub fn gpvs(&mut self, gpvs: &[Gpv]) -> Result<(), Failure> {
        self.sinks.write_gpvs(gpvs).map_err(live_write_error)
    }

    /// Flushes the sinks once a second.
    pub fn tick(&mut self) -> Result<(), Failure> {
        let now = self.started.elapsed().as_nanos() as u64;
        self.sinks.flush_due(now).map_err(live_write_error)
    }

    /// Finishes the sinks (each whatever the other does: a failed one
    /// still leaves the other's file whole) and writes the apps' report;
    /// the summary's lines.
    pub fn close(&mut self) -> Result<String, Failure> {
        let mut s = String::new();
        self.sinks.finish().map_err(live_write_error)?;
        if self.sinks.has_records() {
            s += &format!(
                "  flow records: {} written\n",
                thousands(self.sinks.records_written())
            );
        }
        if let Some(apps) = self.sinks.apps_mut().filter(|a| !a.names().is_empty()) {
            write_app_report(apps, self.apps_out.as_deref())?;
        }
        if self.sinks.takes_gpvs() {
            s += &format!("  GPVs: {} made\n", thousands(self.sinks.gpvs_taken().0));
        }
        Ok(s)
    }
}

/// A live run's sink error as the command line says it ([`write_error`]).
fn live_write_error(e: clarion_pipeline::Error) -> Failure {
    match e {
        clarion_pipeline::Error::Records(e) => write_error(Kind::Records, e),
        clarion_pipeline::Error::Gpvs(e) => write_error(Kind::Gpvs, e),
        other => Failure::Runtime(anyhow!(other)),
    }
}

/// A replay's failure, a records destination's closed reader (`--records -`
/// into `| head`) made the quiet broken pipe a report sink's is.
pub fn replay_failure(f: Failure) -> Failure {
    use clarion_host::HostError;
    use clarion_sinks::SinkError;

    match f {
        Failure::Runtime(e)
            if matches!(
                e.downcast_ref::<HostError>(),
                Some(HostError::Pipeline(clarion_pipeline::Error::Records(
                    SinkError::BrokenPipe
                )))
            ) =>
        {
            Failure::BrokenPipe
        }
        f => f,
    }
}
