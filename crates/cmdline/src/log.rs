//! The manager's and agents' logs: what happens while they run
//! (registrations, departures, events and policies added or removed,
//! refused messages), as `tracing` events of target `manager` or `agent`.
//!
//! - **human** (the default): one line each, `clarion: TARGET: message`
//!   (`clarion: TARGET: warning: message` for warnings), as the rest of
//!   Clarion writes to standard error;
//! - **json**: one JSON object a line, for a log shipper (Vector, Fluent
//!   Bit, journald's JSON): `timestamp`, `level`, `target`, `message` and
//!   the event's fields (`host`, `event`, `reason`...) at the top level.
//!
//! Which events are written is a filter in `RUST_LOG`'s syntax, read from
//! `CLARION_LOG` (default: `info` for Clarion's own targets, `error` for
//! the libraries beneath, such as the NATS client). End-of-run summaries
//! go through [`summary`]: plain text in human mode, an event a line in
//! JSON mode, so that standard error stays one format.

use std::fmt;
use std::sync::OnceLock;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// How logs are written (`--log-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

/// The environment variable holding the filter.
pub const FILTER_VAR: &str = "CLARION_LOG";
/// The filter without [`FILTER_VAR`].
pub const DEFAULT_FILTER: &str = "error,manager=info,agent=info";

static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Installs the process's log writer; the first call wins (a second is a
/// no-op). A filter in [`FILTER_VAR`] that does not parse is an error
/// naming it.
pub fn init(format: LogFormat) -> Result<(), String> {
    if FORMAT.get().is_some() {
        return Ok(());
    }
    let filter = match std::env::var(FILTER_VAR) {
        Ok(f) if !f.trim().is_empty() => EnvFilter::try_new(&f).map_err(|e| {
            format!("{FILTER_VAR}={f:?} is not a log filter ({e}); write e.g. info or manager=debug")
        })?,
        _ => EnvFilter::new(DEFAULT_FILTER),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let set = match format {
        LogFormat::Human => builder.event_format(Human).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
    // Another subscriber (a test harness's) stays.
    let _ = set;
    let _ = FORMAT.set(format);
    Ok(())
}

/// Whether logs are JSON lines.
pub fn is_json() -> bool {
    FORMAT.get() == Some(&LogFormat::Json)
}

/// An end-of-run summary of `target` (`manager`, `agent`): written as is
/// in human mode, one info event a line in JSON mode (field `summary`).
pub fn summary(target: &'static str, text: &str) {
    if !is_json() {
        eprint!("{text}");
        return;
    }
    let prefix = format!("{target}: ");
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let line = line.trim_start().trim_start_matches("clarion: ");
        let line = line.strip_prefix(&prefix).unwrap_or(line);
        match target {
            "manager" => tracing::info!(target: "manager", summary = true, "{line}"),
            _ => tracing::info!(target: "agent", summary = true, "{line}"),
        }
    }
}

/// `clarion: TARGET: [warning: ]message`.
struct Human;

impl<S, N> FormatEvent<S, N> for Human
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let meta = event.metadata();
        write!(w, "clarion: ")?;
        // Clarion's targets are one word; a library's is its module path.
        write!(w, "{}: ", meta.target())?;
        match *meta.level() {
            Level::ERROR => write!(w, "error: ")?,
            Level::WARN => write!(w, "warning: ")?,
            _ => {}
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        writeln!(w, "{}", message.0)
    }
}

/// The `message` field of an event.
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_string();
        }
    }
}
