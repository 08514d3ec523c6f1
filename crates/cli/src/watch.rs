//! `clarion events watch`: the control API's stream of fired events
//! (`GET /v1/reports`), as the JSON lines it sends or as `clarion run`'s
//! table, of every event or of those named.
//!
//! The stream carries `clarion.report/1` objects. JSON lines pass through
//! as sent, byte for byte. The table needs the [`Report`] back:
//! `Report::from_json`, beside the writer in `clarion-report`.

use clap::Args;
use clarion_control::{Client, ClientError, Watched};
use clarion_report::{Report, SCHEMA};
use clarion_sinks::{Sink, TableSink};
use serde_json::Value;
use std::io::Write;

use crate::args::Format;
use crate::Failure;

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// Report format: 'json' (each report's line as the API sends it,
    /// schema clarion.report/1), 'table' (clarion run's aligned columns),
    /// or 'auto' (table on a terminal, else json).
    #[arg(long, value_enum, default_value_t = Format::Auto, value_name = "FORMAT")]
    pub format: Format,

    /// Only the reports of this event, and of its drill-down instances
    /// (NAME[...]); repeat for several (default: every event's).
    #[arg(long = "event", value_name = "NAME")]
    pub events: Vec<String>,
}

impl WatchArgs {
    /// Whether the reports of the event named `name` are watched.
    fn wants(&self, name: &str) -> bool {
        self.events.is_empty()
            || self.events.iter().any(|e| {
                name.strip_prefix(e.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('['))
            })
    }
}

/// Streams the reports until the server closes the stream or the reader
/// goes away. `is_tty`: standard output is a terminal (for 'auto').
/// One streamed report into the table, when it is of an event watched.
fn table_line<W: Write>(sink: &mut TableSink<W>, a: &WatchArgs, line: &str) -> Result<(), Failure> {
    match serde_json::from_str(line)
        .map_err(|e| e.to_string())
        .and_then(|v| Report::from_json(&v).map_err(|e| e.to_string()))
    {
        Ok(r) if a.wants(&r.event) => {
            sink.write(&r).map_err(crate::outputs::sink_error)?;
            sink.flush().map_err(crate::outputs::sink_error)?;
        }
        Ok(_) => {}
        Err(why) => skipped(line, &why),
    }
    Ok(())
}

/// One streamed report's line as it came, when it is of an event watched.
fn plain_line(out: &mut impl Write, a: &WatchArgs, line: &str) -> Result<(), Failure> {
    if !a.events.is_empty() {
        let v: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                skipped(line, &e.to_string());
                return Ok(());
            }
        };
        if !v["event"].as_str().is_some_and(|n| a.wants(n)) {
            return Ok(());
        }
    }
    writeln!(out, "{line}")
        .and_then(|_| out.flush())
        .map_err(crate::failure::io)
}

pub fn watch(
    client: &Client,
    failure: impl Fn(ClientError) -> Failure,
    a: &WatchArgs,
    out: &mut impl Write,
    is_tty: bool,
) -> Result<(), Failure> {
    if !a.events.is_empty() {
        // A name not installed is likely a typo; it may also be added later.
        let installed = client.list().map_err(&failure)?;
        for e in a
            .events
            .iter()
            .filter(|e| !installed.iter().any(|i| i.name == **e))
        {
            eprintln!("clarion: warning: --event {e}: no such event is installed (yet); watching for it");
        }
    }
    let table = match a.format {
        Format::Table => true,
        Format::Json => false,
        Format::Auto => is_tty,
    };
    let (mut sink, mut plain) = if table {
        (Some(TableSink::new(out, "standard output")), None)
    } else {
        (None, Some(out))
    };
    let mut failed = None;
    let mut each = |line: &str| -> Result<(), Failure> {
        if let Some(sink) = sink.as_mut() {
            table_line(sink, a, line)
        } else if let Some(out) = plain.as_mut() {
            plain_line(out, a, line)
        } else {
            Ok(())
        }
    };
    client
        .watch(|seen| match seen {
            Watched::Lost(n) => {
                lost(n);
                true
            }
            Watched::Report(line) => match each(line) {
                Ok(()) => true,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            },
        })
        .map_err(failure)?;
    failed.map_or(Ok(()), Err)
}

/// Reports the server dropped because this watcher fell behind: said, so
/// that a gap in the output is never silent, and the stream goes on.
fn lost(n: u64) {
    eprintln!(
        "clarion: warning: {n} report(s) lost: this watcher fell behind the manager's stream (its output is slower than the reports come)"
    );
}

/// A line of the stream that is not a report: said, and the stream goes on.
fn skipped(line: &str, why: &str) {
    let start: String = line.chars().take(80).collect();
    eprintln!(
        "clarion: warning: skipped a line of the stream that is not a {SCHEMA} report ({why}): {start}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_named_takes_its_drill_down_instances() {
        let a = WatchArgs {
            format: Format::Json,
            events: vec!["spike".into(), "low_ttl".into()],
        };
        assert!(a.wants("spike"));
        assert!(a.wants("spike[dst_ip=10.0.0.0/24]"));
        assert!(a.wants("low_ttl"));
        assert!(!a.wants("spikes"));
        assert!(!a.wants("heavy"));
        let all = WatchArgs {
            format: Format::Json,
            events: Vec::new(),
        };
        assert!(all.wants("anything"));
    }
}
