//! JSON lines (and, for reports, the terminal table): standard output,
//! named pipes and devices, `FILE.jsonl` (`.json`, `.ndjson`), and any
//! file of reports (`--output` takes any name; `--format` says the form).

use std::fs::{File, OpenOptions};
use std::io::Write;

use clarion_records::FlowRecord;
use clarion_report::Report;
use clarion_sinks::{BoxSink, JsonLine, JsonLinesSink, TableSink};

use crate::{Backend, Destination, Kind, OutputError, Target};

pub const BACKEND: Backend = Backend {
    name: "JSON lines",
    feature: None,
    built: true,
    forms: "FILE.jsonl, - (JSON lines to standard output) or a named pipe or character device such as /dev/null (JSON lines)",
    claims,
    reports: Some(reports),
    records: Some(lines::<FlowRecord>),
    gpvs: None,
};

fn claims(t: &Target, kind: Kind) -> bool {
    t.is_stream()
        || matches!(t.extension(), Some("jsonl" | "json" | "ndjson"))
        || (kind == Kind::Reports && matches!(t, Target::File { .. }))
}

/// The writer under a destination: standard output; a stream opened as
/// it is (a pipe's reader or a device: nothing to truncate); else a file
/// created.
fn writer<T>(d: &Destination<T>) -> Result<Box<dyn Write + Send>, OutputError> {
    match d.target() {
        Target::Stdout => Ok(Box::new(std::io::stdout())),
        Target::File { path, stream: true } => OpenOptions::new()
            .write(true)
            .open(path)
            .map(|f| Box::new(f) as _)
            .map_err(|source| OutputError::Open {
                destination: d.text().to_string(),
                source,
            }),
        Target::File { path, stream: false } => {
            File::create(path)
                .map(|f| Box::new(f) as _)
                .map_err(|source| OutputError::Create {
                    destination: d.text().to_string(),
                    source,
                })
        }
        Target::Url { .. } => Err(OutputError::UnknownScheme {
            destination: d.text().to_string(),
            forms: BACKEND.forms.to_string(),
        }),
    }
}

fn lines<T: JsonLine + 'static>(d: &Destination<T>) -> Result<BoxSink<T>, OutputError> {
    Ok(Box::new(JsonLinesSink::new(writer(d)?, d.name())))
}

fn reports(d: &Destination<Report>) -> Result<BoxSink<Report>, OutputError> {
    if d.table() {
        return Ok(Box::new(TableSink::new(writer(d)?, d.name())));
    }
    lines(d)
}
