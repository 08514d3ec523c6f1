//! `--records`, `--gpv` and `--app`: the destinations named on the command
//! line, opened, and the stage that feeds them (`clarion_host::WithExports`).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::anyhow;

use clarion_flows::FlowConfig;
use clarion_gpv::{app_by_name, AppRuntime, CacheConfig, GpvFile, GpvSink};
use clarion_host::{Stage, WithExports};
use clarion_records::{FanOut, JsonLinesRecords, RecordSink};

use crate::args::ExportArgs;
use crate::summary::thousands;
use crate::Failure;

/// What the forms of `--records DEST` are, for messages.
const FORMS: &str = "FILE.jsonl, FILE.parquet, FILE.ipfix, ipfix+udp://HOST:PORT or ipfix+tcp://HOST:PORT";

/// The schema of the apps' output (`--app`, `clarion apps run`).
pub const APPS_SCHEMA: &str = "clarion.apps/1";

/// The exports of a run, opened.
pub struct Exports {
    pub records: Option<(FanOut, FlowConfig)>,
    pub gpv_sink: Option<Box<dyn GpvSink>>,
    pub gpv_config: CacheConfig,
    /// The apps fed by the GPVs, and where their report goes.
    pub apps: Option<(AppRuntime, Option<PathBuf>)>,
}

impl Exports {
    pub fn is_empty(&self) -> bool {
        self.records.is_none() && !self.makes_gpvs()
    }

    /// GPVs are made when they are written or apps read them.
    pub fn makes_gpvs(&self) -> bool {
        self.gpv_sink.is_some() || self.apps.is_some()
    }

    /// `stage` with the exports beside it; also where the apps' report goes.
    pub fn around<S: Stage>(self, stage: S) -> Result<(WithExports<S>, Option<PathBuf>), Failure> {
        let usage = |e: clarion_host::HostError| Failure::Usage(format!("clarion: {e}"));
        let mut with = WithExports::new(stage);
        let makes_gpvs = self.makes_gpvs();
        if let Some((sink, config)) = self.records {
            with = with.records(config, sink).map_err(usage)?;
        }
        let (apps, apps_out) = self.apps.unwrap_or_default();
        if makes_gpvs {
            with = with.gpvs(self.gpv_config, self.gpv_sink, apps).map_err(usage)?;
        }
        Ok((with, apps_out))
    }
}

/// Opens every destination of `--records` and `--gpv`, and the apps of
/// `--app` (each error names its destination or app).
pub fn open(a: &ExportArgs) -> Result<Exports, Failure> {
    let records = if a.records.is_empty() {
        None
    } else {
        let mut sinks = Vec::new();
        for dest in &a.records {
            sinks.push(open_records(dest)?);
        }
        let config = FlowConfig {
            cache_slots: a.record_cache as usize,
            idle_timeout_ns: a.record_idle_timeout,
            active_timeout_ns: a.record_active_timeout,
            ..FlowConfig::default()
        };
        Some((FanOut::new(sinks), config))
    };
    let gpv_sink = a.gpv.as_deref().map(open_gpvs).transpose()?;
    let apps = if a.app.is_empty() {
        None
    } else {
        Some((app_runtime(&a.app)?, a.app_output.clone()))
    };
    Ok(Exports {
        records,
        gpv_sink,
        gpv_config: CacheConfig::default(),
        apps,
    })
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

fn open_records(dest: &str) -> Result<Box<dyn RecordSink + Send>, Failure> {
    if clarion_ipfix::is_ipfix_destination(dest) {
        let sink = clarion_ipfix::open(dest).map_err(|e| Failure::Runtime(anyhow!(e)))?;
        return Ok(Box::new(sink));
    }
    let path = Path::new(dest);
    match path.extension().and_then(|e| e.to_str()) {
        Some("jsonl" | "json" | "ndjson") => {
            let f = File::create(path)
                .map_err(|e| Failure::Runtime(anyhow!("cannot create --records {dest}: {e}")))?;
            Ok(Box::new(JsonLinesRecords::new(f, dest)))
        }
        Some("parquet") => {
            let sink = clarion_parquet::create(path).map_err(|e| Failure::Runtime(anyhow!(e)))?;
            Ok(Box::new(sink))
        }
        _ if dest.contains("://") => Err(Failure::Usage(format!(
            "clarion: --records {dest}: unknown scheme; give {FORMS}"
        ))),
        _ => Err(Failure::Usage(format!(
            "clarion: --records {dest}: the format is named by the file's extension; give {FORMS}"
        ))),
    }
}

fn open_gpvs(path: &Path) -> Result<Box<dyn GpvSink>, Failure> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("gpv") => Ok(Box::new(
            GpvFile::create(path).map_err(|e| Failure::Runtime(anyhow!(e)))?,
        )),
        Some("parquet") => Ok(Box::new(
            clarion_parquet::create_gpvs(path).map_err(|e| Failure::Runtime(anyhow!(e)))?,
        )),
        _ => Err(Failure::Usage(format!(
            "clarion: --gpv {}: the format is named by the file's extension; give FILE.gpv or FILE.parquet",
            path.display()
        ))),
    }
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
pub fn summary<S: Stage>(w: &WithExports<S>) -> String {
    let mut s = String::new();
    if let Some((st, written)) = w.record_stats() {
        s += &format!(
            "  flow records: {} written from {} packets ({} microflow records, cache eviction ratio {:.3})\n",
            thousands(written),
            thousands(st.packets),
            thousands(st.microflow_records),
            st.eviction_ratio(),
        );
    }
    if let Some((st, written)) = w.gpv_stats() {
        s += &format!(
            "  GPVs: {} made from {} packets, {} written\n",
            thousands(st.gpvs),
            thousands(st.packets),
            thousands(written),
        );
    }
    s
}
