//! The one registry of destinations: a destination string opened as the
//! [`Sink`] of reports, flow records or GPVs.
//!
//! Every output flag (`--output`, `--records`, `--gpv`, on `clarion run`,
//! `clarion agent` and `clarion manager`) goes through here, so a form
//! works, or is refused with the same words, wherever a destination is
//! taken. What a string names is decided in two steps:
//!
//! 1. [`Destination::parse`] reads it as a [`Target`] (`-`, a URL by its
//!    scheme, or a path, with whether the path is a named pipe or a
//!    device) and finds the first [`Backend`] of [`BACKENDS`] that claims
//!    it and writes the item type asked for. Nothing is created or
//!    connected: a wrong form, or a back end this build left out (its
//!    cargo feature off), is refused here, before anything runs.
//! 2. [`Destination::open`] opens it once: the file created, the
//!    collector connected.
//!
//! # Adding a back end
//!
//! One module holding its sink (or calling its crate's) and a `pub const
//! BACKEND: Backend` (its name, forms, what it claims and an opener per
//! item type it writes), plus its line in [`BACKENDS`]: `csv.rs` is one.
//! Heavy ones sit behind a cargo feature: their `BACKEND` stays listed,
//! with `built: false` and openers that refuse, so the error names the
//! feature rather than calling the form unknown.

mod clickhouse;
mod csv;
mod gpv_file;
mod ipfix;
mod jetstream;
mod parquet;
mod text;

use std::io::{self, IsTerminal};
use std::path::{Path, PathBuf};

use clarion_gpv::Gpv;
use clarion_records::FlowRecord;
use clarion_report::Report;
use clarion_sinks::BoxSink;

pub use clarion_sinks::{FanOut, Sink, SinkError};

/// Every back end, in the order they are asked: the first that claims a
/// target and writes the item type opens it. JSON lines come last: they
/// take what is left (standard output, pipes, devices; any file of reports).
pub const BACKENDS: &[Backend] = &[
    ipfix::BACKEND,      // FILE.ipfix, ipfix+udp://, ipfix+tcp://
    jetstream::BACKEND,  // nats://HOST:PORT/STREAM, tls://
    clickhouse::BACKEND, // clickhouse+http://HOST:PORT/TABLE
    parquet::BACKEND,    // FILE.parquet (feature `parquet`)
    gpv_file::BACKEND,   // FILE.gpv
    csv::BACKEND,        // FILE.csv
    text::BACKEND,       // -, pipes, devices, FILE.jsonl; any file of reports
];

/// What the pipeline writes, as destinations take it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Reports,
    Records,
    Gpvs,
}

impl Kind {
    /// The plural noun, for messages.
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Reports => "reports",
            Kind::Records => "flow records",
            Kind::Gpvs => "GPVs",
        }
    }
}

/// An item type a destination can be opened for.
pub trait Item: Sized + 'static {
    const KIND: Kind;
    /// How `backend` opens a sink of this type; `None`: it writes none.
    fn opener(backend: &Backend) -> Option<Open<Self>>;
}

impl Item for Report {
    const KIND: Kind = Kind::Reports;
    fn opener(b: &Backend) -> Option<Open<Self>> {
        b.reports
    }
}

impl Item for FlowRecord {
    const KIND: Kind = Kind::Records;
    fn opener(b: &Backend) -> Option<Open<Self>> {
        b.records
    }
}

impl Item for Gpv {
    const KIND: Kind = Kind::Gpvs;
    fn opener(b: &Backend) -> Option<Open<Self>> {
        b.gpvs
    }
}

/// Opens a parsed destination as a sink of `T`.
pub type Open<T> = fn(&Destination<T>) -> Result<BoxSink<T>, OutputError>;

/// One kind of destination: the forms it takes and how it opens them.
#[derive(Clone, Copy)]
pub struct Backend {
    /// Its name in messages ("Parquet").
    pub name: &'static str,
    /// The cargo feature that builds it; `None`: always built.
    pub feature: Option<&'static str>,
    /// Whether this build has it (`cfg!(feature = ...)`).
    pub built: bool,
    /// The forms it takes, for messages ("FILE.parquet").
    pub forms: &'static str,
    /// Whether a target is one of its forms, for items of a kind.
    pub claims: fn(&Target, Kind) -> bool,
    pub reports: Option<Open<Report>>,
    pub records: Option<Open<FlowRecord>>,
    pub gpvs: Option<Open<Gpv>>,
}

/// What a destination string points at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `-`.
    Stdout,
    /// `SCHEME://...`.
    Url { scheme: String },
    /// A path. `stream`: it exists and is a named pipe or a character
    /// device (`/dev/null`, a terminal; links followed, so `/dev/stdout`
    /// is whatever descriptor 1 is): opened as it is, never truncated.
    File { path: PathBuf, stream: bool },
}

impl Target {
    pub fn parse(text: &str) -> Target {
        if text == "-" {
            return Target::Stdout;
        }
        if let Some((scheme, _)) = text.split_once("://") {
            return Target::Url {
                scheme: scheme.to_string(),
            };
        }
        let path = PathBuf::from(text);
        let stream = is_stream(&path);
        Target::File { path, stream }
    }

    /// A file's extension.
    pub fn extension(&self) -> Option<&str> {
        match self {
            Target::File { path, .. } => path.extension().and_then(|e| e.to_str()),
            _ => None,
        }
    }

    pub fn scheme(&self) -> Option<&str> {
        match self {
            Target::Url { scheme } => Some(scheme),
            _ => None,
        }
    }

    /// Standard output, a named pipe or a device: a stream, not a file to create.
    pub fn is_stream(&self) -> bool {
        matches!(self, Target::Stdout | Target::File { stream: true, .. })
    }
}

/// A named pipe or a character device.
fn is_stream(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;

    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_char_device())
}

/// How reports are rendered (`--format`); other items have one form.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReportFormat {
    /// A table on a terminal, JSON lines anywhere else.
    #[default]
    Auto,
    Json,
    Table,
}

/// A destination of items of type `T`, parsed and checked, not yet opened.
pub struct Destination<'a, T> {
    text: &'a str,
    backend: &'static Backend,
    opener: Open<T>,
    format: ReportFormat,
    host: Option<String>,
}

impl<T> std::fmt::Debug for Destination<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Destination")
            .field("text", &self.text)
            .field("backend", &self.backend.name)
            .finish()
    }
}

impl<'a, T: Item> Destination<'a, T> {
    /// Which back end writes `T` to `text` (see the crate docs); an error
    /// when none does or its feature is off.
    pub fn parse(text: &'a str) -> Result<Destination<'a, T>, OutputError> {
        let target = Target::parse(text);
        let found = BACKENDS
            .iter()
            .find_map(|b| Some((b, T::opener(b)?)).filter(|(b, _)| (b.claims)(&target, T::KIND)));
        let Some((backend, opener)) = found else {
            let forms = forms(T::KIND);
            let destination = text.to_string();
            return Err(match target {
                Target::Url { .. } => OutputError::UnknownScheme { destination, forms },
                _ => OutputError::UnknownFormat { destination, forms },
            });
        };
        if !backend.built {
            return Err(OutputError::NotBuilt {
                destination: text.to_string(),
                backend: backend.name,
                feature: backend.feature.unwrap_or(backend.name),
            });
        }
        Ok(Destination {
            text,
            backend,
            opener,
            format: ReportFormat::Auto,
            host: None,
        })
    }

    /// How reports are rendered; ignored for other items.
    pub fn with_format(self, format: ReportFormat) -> Self {
        Destination { format, ..self }
    }

    /// The name of the host whose items these are, for back ends that
    /// tell hosts apart (a stream's subject).
    pub fn with_host(self, host: &str) -> Self {
        Destination {
            host: Some(host.to_string()),
            ..self
        }
    }

    /// Opens it: the one place anything is created or connected.
    pub fn open(&self) -> Result<BoxSink<T>, OutputError> {
        (self.opener)(self)
    }
}

impl<T> Destination<'_, T> {
    /// The string as given.
    pub fn text(&self) -> &str {
        self.text
    }

    /// The back end that opens it.
    pub fn backend(&self) -> &'static Backend {
        self.backend
    }

    pub fn format(&self) -> ReportFormat {
        self.format
    }

    pub fn host(&self) -> Option<&str> {
        self.host.as_deref()
    }

    pub fn target(&self) -> Target {
        Target::parse(self.text)
    }

    /// How `-` is named in messages; any other destination as given.
    pub fn name(&self) -> &str {
        if self.text == "-" {
            "standard output"
        } else {
            self.text
        }
    }

    /// Whether reports go out as a table (`--format`, or a terminal).
    pub fn table(&self) -> bool {
        match self.format {
            ReportFormat::Table => true,
            ReportFormat::Json => false,
            ReportFormat::Auto => self.text == "-" && io::stdout().is_terminal(),
        }
    }
}

/// Opens `text` as a sink of `T` (parse, then open).
pub fn open<T: Item>(text: &str) -> Result<BoxSink<T>, OutputError> {
    Destination::<T>::parse(text)?.open()
}

/// The forms of every back end that writes items of `kind`, for messages.
pub fn forms(kind: Kind) -> String {
    BACKENDS
        .iter()
        .filter(|b| match kind {
            Kind::Reports => b.reports.is_some(),
            Kind::Records => b.records.is_some(),
            Kind::Gpvs => b.gpvs.is_some(),
        })
        .map(|b| b.forms)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The opener of a back end whose feature is off: it refuses, naming the
/// feature (parsing refuses first; this keeps the listing whole).
#[cfg(not(feature = "parquet"))]
pub(crate) fn unbuilt<T>(d: &Destination<T>) -> Result<BoxSink<T>, OutputError> {
    Err(OutputError::NotBuilt {
        destination: d.text.to_string(),
        backend: d.backend.name,
        feature: d.backend.feature.unwrap_or(d.backend.name),
    })
}

/// Why a destination could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// No back end claims the path (exit status 2 at the command line).
    #[error("{destination}: the format is named by the file's extension; give {forms}")]
    UnknownFormat { destination: String, forms: String },
    #[error("{destination}: unknown scheme; give {forms}")]
    UnknownScheme { destination: String, forms: String },
    /// The back end exists, but this build left its cargo feature out.
    #[error(
        "{destination}: this clarion was built without {backend} output (cargo feature `{feature}`); \
         build it with `--features {feature}`, or the default features"
    )]
    NotBuilt {
        destination: String,
        backend: &'static str,
        feature: &'static str,
    },
    #[error("cannot create {destination}")]
    Create {
        destination: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot open {destination}")]
    Open {
        destination: String,
        #[source]
        source: io::Error,
    },
    /// A back end's own error, which names the destination.
    #[error(transparent)]
    Backend(Box<dyn std::error::Error + Send + Sync>),
}

impl OutputError {
    /// Whether the user named a destination wrongly (rather than it failing to open).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            OutputError::UnknownFormat { .. }
                | OutputError::UnknownScheme { .. }
                | OutputError::NotBuilt { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend<T: Item>(text: &str) -> Result<&'static str, String> {
        Destination::<T>::parse(text)
            .map(|d| d.backend().name)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn each_form_finds_its_back_end() {
        assert_eq!(backend::<FlowRecord>("f.jsonl"), Ok("JSON lines"));
        assert_eq!(backend::<FlowRecord>("f.ndjson"), Ok("JSON lines"));
        assert_eq!(backend::<FlowRecord>("-"), Ok("JSON lines"));
        assert_eq!(backend::<FlowRecord>("/dev/null"), Ok("JSON lines"));
        assert_eq!(backend::<FlowRecord>("f.ipfix"), Ok("IPFIX"));
        assert_eq!(backend::<FlowRecord>("ipfix+udp://127.0.0.1:4739"), Ok("IPFIX"));
        assert_eq!(backend::<FlowRecord>("ipfix+tcp://c:4739"), Ok("IPFIX"));
        assert_eq!(backend::<Gpv>("g.gpv"), Ok("GPV"));
        assert_eq!(
            backend::<FlowRecord>("nats://127.0.0.1:4222/FLOWS"),
            Ok("NATS JetStream")
        );
        assert_eq!(backend::<Report>("tls://n:4222/REPORTS"), Ok("NATS JetStream"));
        assert_eq!(
            backend::<FlowRecord>("clickhouse+http://ch:8123/flows"),
            Ok("ClickHouse")
        );
        assert!(backend::<Report>("clickhouse+http://ch:8123/flows").is_err());
        assert!(backend::<Gpv>("nats://127.0.0.1:4222/FLOWS").is_err());
        assert_eq!(backend::<Report>("-"), Ok("JSON lines"));
        // --output has always taken any file name: --format says the form.
        assert_eq!(backend::<Report>("reports.txt"), Ok("JSON lines"));
        #[cfg(feature = "parquet")]
        {
            assert_eq!(backend::<FlowRecord>("f.parquet"), Ok("Parquet"));
            assert_eq!(backend::<Gpv>("g.parquet"), Ok("Parquet"));
        }
    }

    #[test]
    fn wrong_forms_are_refused_before_anything_is_made() {
        let e = backend::<FlowRecord>("flows.txt").unwrap_err();
        assert!(
            e.starts_with("flows.txt: the format is named") && e.contains("FILE.jsonl"),
            "{e}"
        );
        let e = backend::<FlowRecord>("kafka://broker:9092").unwrap_err();
        assert!(e.contains("unknown scheme"), "{e}");
        let e = backend::<Gpv>("g.jsonl").unwrap_err();
        assert!(e.contains("FILE.gpv") && !e.contains("ipfix"), "{e}");
        assert!(backend::<Gpv>("-").is_err());
        assert!(
            backend::<Report>("x.ipfix").is_ok(),
            "a file of reports, as before"
        );
        assert!(!Path::new("flows.txt").exists());
    }

    #[cfg(not(feature = "parquet"))]
    #[test]
    fn a_back_end_left_out_names_its_feature() {
        let e = Destination::<FlowRecord>::parse("f.parquet").unwrap_err();
        assert!(e.is_usage());
        assert!(e.to_string().contains("cargo feature `parquet`"), "{e}");
    }
}
