//! Output flags to sinks: every destination (`--output`, `--records`,
//! `--gpv`) opened through `clarion-outputs`' one registry, and the seam's
//! errors as the command line says them.

use std::path::Path;

use anyhow::anyhow;

use clarion_outputs::{Destination, Item, Kind, OutputError, ReportFormat};
use clarion_report::Report;
use clarion_sinks::{BoxSink, SinkError};

use crate::args::Format;
use crate::Failure;

/// The destination `text` of `flag`, checked (no file made yet): a wrong
/// form is a usage error naming the flag.
pub fn parse<'a, T: Item>(flag: &str, text: &'a str) -> Result<Destination<'a, T>, Failure> {
    Destination::parse(text).map_err(|e| failure(flag, e))
}

/// Opens a checked destination.
pub fn open<T: Item>(flag: &str, d: &Destination<'_, T>) -> Result<BoxSink<T>, Failure> {
    d.open().map_err(|e| failure(flag, e))
}

/// A path flag's text: the registry reads destinations as text.
pub fn text<'a>(flag: &str, path: &'a Path) -> Result<&'a str, Failure> {
    path.to_str()
        .ok_or_else(|| Failure::Usage(format!("clarion: {flag} {}: not UTF-8", path.display())))
}

/// Reports to `--output` (a file) or standard output (a table on a
/// terminal, by default), in `--format`; `host` names them where the
/// destination tells hosts apart (a stream's subject).
pub fn reports(output: Option<&Path>, format: Format, host: &str) -> Result<BoxSink<Report>, Failure> {
    let text = output.map_or(Ok("-"), |p| text("--output", p))?;
    let format = match format {
        Format::Auto => ReportFormat::Auto,
        Format::Json => ReportFormat::Json,
        Format::Table => ReportFormat::Table,
    };
    open(
        "--output",
        &parse("--output", text)?.with_format(format).with_host(host),
    )
}

fn failure(flag: &str, e: OutputError) -> Failure {
    if e.is_usage() {
        Failure::Usage(format!("clarion: {flag} {e}"))
    } else {
        Failure::Runtime(anyhow!(e))
    }
}

/// A sink's error writing items of `kind`: a closed reader (`| head`) is
/// the quiet broken pipe, anything else ends the run.
pub fn write_error(kind: Kind, e: SinkError) -> Failure {
    match e {
        SinkError::BrokenPipe => Failure::BrokenPipe,
        other => Failure::Runtime(anyhow!(other).context(format!("cannot write {}", kind.noun()))),
    }
}

/// [`write_error`] of reports.
pub fn sink_error(e: SinkError) -> Failure {
    write_error(Kind::Reports, e)
}
