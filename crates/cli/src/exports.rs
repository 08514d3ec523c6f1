//! `--records` and `--gpv`: the destinations named on the command line,
//! opened, and the stage that feeds them (`clarion_host::WithRecords`).

use std::fs::File;
use std::path::Path;

use anyhow::anyhow;

use clarion_flows::FlowConfig;
use clarion_host::{Stage, WithRecords};
use clarion_records::{FanOut, JsonLinesRecords, RecordSink};

use crate::args::ExportArgs;
use crate::summary::thousands;
use crate::Failure;

/// What the forms of `--records DEST` are, for messages.
const FORMS: &str = "FILE.jsonl, FILE.parquet, FILE.ipfix, ipfix+udp://HOST:PORT or ipfix+tcp://HOST:PORT";

/// The record sinks and the meter's settings of a run.
#[derive(Debug)]
pub struct Exports {
    records: Option<(FanOut, FlowConfig)>,
}

impl Exports {
    pub fn is_empty(&self) -> bool {
        self.records.is_none()
    }

    /// The sinks and the meter's settings, for a live host's workers.
    pub fn into_parts(self) -> (Option<FanOut>, Option<FlowConfig>) {
        match self.records {
            Some((sink, config)) => (Some(sink), Some(config)),
            None => (None, None),
        }
    }

    /// `stage` with the flow meter beside it (an empty fan-out when no
    /// records were asked for).
    pub fn around<S: Stage>(self, stage: S) -> Result<WithRecords<S>, Failure> {
        let (sink, config) = self
            .records
            .unwrap_or_else(|| (FanOut::new(Vec::new()), FlowConfig::default()));
        WithRecords::new(stage, config, sink).map_err(|e| Failure::Usage(format!("clarion: {e}")))
    }
}

/// Opens every destination of `--records` (each error names its destination).
pub fn open(a: &ExportArgs) -> Result<Exports, Failure> {
    if let Some(gpv) = &a.gpv {
        return Err(Failure::Usage(format!(
            "clarion: --gpv {}: grouped packet vectors are not made by this build",
            gpv.display()
        )));
    }
    if a.records.is_empty() {
        return Ok(Exports { records: None });
    }
    let mut sinks = Vec::new();
    for dest in &a.records {
        sinks.push(open_one(dest)?);
    }
    let config = FlowConfig {
        cache_slots: a.record_cache as usize,
        idle_timeout_ns: a.record_idle_timeout,
        active_timeout_ns: a.record_active_timeout,
        ..FlowConfig::default()
    };
    Ok(Exports {
        records: Some((FanOut::new(sinks), config)),
    })
}

fn open_one(dest: &str) -> Result<Box<dyn RecordSink + Send>, Failure> {
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

/// The records part of the end-of-run summary.
pub fn summary<S: Stage>(w: &WithRecords<S>) -> String {
    let s = w.flow_stats();
    format!(
        "  flow records: {} written from {} packets ({} microflow records, cache eviction ratio {:.3})\n",
        thousands(w.records_written()),
        thousands(s.packets),
        thousands(s.microflow_records),
        s.eviction_ratio(),
    )
}
