//! What every Clarion Parquet file shares, whatever its rows: the schema
//! name in the key-value metadata, the writer's properties, creating a
//! file with an error naming it, opening one (checking the schema name),
//! and the writing sink itself, [`Table`].
//!
//! Properties: Snappy compression (pure Rust here, and read by every
//! Parquet implementation; zstd would shrink files ~20% more but builds C
//! code), dictionary encoding on (the default: `end_reason`, ports and
//! addresses repeat), row groups of a fixed number of rows (a reader skips
//! or parallelizes by row group; 64 Ki rows of flow records are a few MB).
//!
//! # The table: one state machine for every sink
//!
//! [`Table`] holds the encoder, the schema and the Arrow builders of one
//! schema ([`Builders`]: append a row, count the rows, finish a batch).
//! `write` appends and, every `row_group_rows` rows, hands the builders'
//! batch to the encoder, which then writes one row group; `flush` hands
//! a partial batch to the encoder (it joins the row group in progress, so
//! flushing never splits a row group) and pushes finished row groups out
//! of the encoder's buffer to `W`; `finish` writes the last row group and
//! the footer. Memory is bounded by one row group encoded plus one of
//! builders.
//!
//! Invariant (the sink seam's contract): after any failure, or after
//! `finish`, nothing more is written; every later call returns
//! [`SinkError::Closed`], or `BrokenPipe` again when the reader went away.
//! Failures are [`Failure`]s, named in the seam's error once
//! ([`Failure::into_sink_error`]), so the state machine is written once for
//! flow records and GPVs.
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use arrow_array::{Array, RecordBatch};
use arrow_schema::{ArrowError, SchemaRef};
use clarion_sinks::SinkError;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use crate::ParquetError;

/// The key-value metadata key holding the schema name and version
/// (`clarion.flow/1` for flow records).
pub const SCHEMA_KEY: &str = "clarion.schema";

/// Rows in a row group unless the writer is told otherwise.
pub const DEFAULT_ROW_GROUP_ROWS: usize = 65_536;

/// The writer properties of every Clarion file.
fn properties(schema_name: &str, row_group_rows: usize) -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(row_group_rows.max(1)))
        .set_created_by(format!("clarion {}", env!("CARGO_PKG_VERSION")))
        .set_key_value_metadata(Some(vec![KeyValue::new(
            SCHEMA_KEY.to_string(),
            schema_name.to_string(),
        )]))
        .build()
}

/// Creates (or truncates) the file at `path`.
pub(crate) fn create_file(path: &Path) -> Result<File, ParquetError> {
    File::create(path).map_err(|source| ParquetError::Create {
        path: path.to_path_buf(),
        source,
    })
}

/// Starts a Parquet stream on `out`: writes the header (the magic bytes).
pub(crate) fn start<W: Write + Send>(
    out: W,
    destination: &str,
    schema: SchemaRef,
    schema_name: &str,
    row_group_rows: usize,
) -> Result<ArrowWriter<W>, ParquetError> {
    let props = properties(schema_name, row_group_rows);
    ArrowWriter::try_new(out, schema, Some(props)).map_err(|source| ParquetError::Start {
        destination: destination.to_string(),
        source,
    })
}

/// Opens a finished Clarion Parquet file of schema `schema_name`.
pub(crate) fn open(
    path: &Path,
    schema_name: &'static str,
) -> Result<ParquetRecordBatchReaderBuilder<File>, ParquetError> {
    let file = File::open(path).map_err(|source| ParquetError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|source| ParquetError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let found = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|k| k.key == SCHEMA_KEY))
        .and_then(|k| k.value.clone());
    if found.as_deref() != Some(schema_name) {
        return Err(ParquetError::Schema {
            path: path.to_path_buf(),
            want: schema_name,
            message: match found {
                Some(v) => format!("its metadata {SCHEMA_KEY} is {v:?}"),
                None => format!("no {SCHEMA_KEY} in its metadata"),
            },
        });
    }
    Ok(builder)
}

/// Reads the finished file at `path`, of schema `schema_name`, in file
/// order: `decode` appends a batch's rows to its output, or says how a
/// row breaks the schema.
pub(crate) fn read<T>(
    path: &Path,
    schema_name: &'static str,
    mut decode: impl FnMut(&RecordBatch, &mut Vec<T>) -> Result<(), String>,
) -> Result<Vec<T>, ParquetError> {
    let reader = open(path, schema_name)?
        .build()
        .map_err(|source| ParquetError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| ParquetError::Read {
            path: path.to_path_buf(),
            source: e.into(),
        })?;
        decode(&batch, &mut out).map_err(|message| ParquetError::Schema {
            path: path.to_path_buf(),
            want: schema_name,
            message,
        })?;
    }
    Ok(out)
}

/// The column `name` of `batch` as an array of type `T`.
pub(crate) fn column<'a, T: Array + 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T, String> {
    let c = batch
        .column_by_name(name)
        .ok_or_else(|| format!("no column {name}"))?;
    c.as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| format!("column {name} is {}", c.data_type()))
}

/// The I/O error under a failure of the format library (`W` failed), or
/// the failure's message when it is another.
pub(crate) fn io_source(e: parquet::errors::ParquetError) -> Result<io::Error, String> {
    match e {
        parquet::errors::ParquetError::External(inner) => match inner.downcast::<io::Error>() {
            Ok(source) => Ok(*source),
            Err(other) => Err(other.to_string()),
        },
        other => Err(other.to_string()),
    }
}

/// The Arrow builders of one schema, one per column, in its order.
pub(crate) trait Builders {
    /// What one row is made of.
    type Row: ?Sized;
    /// The schema's name and version, the metadata [`SCHEMA_KEY`].
    const SCHEMA_NAME: &'static str;

    /// The Arrow schema the batches have.
    fn schema() -> SchemaRef;

    /// Empty builders.
    fn new() -> Self;

    /// Appends one row, or says why the schema cannot hold it (appending
    /// nothing then).
    fn append(&mut self, row: &Self::Row) -> Result<(), String>;

    /// Rows appended since the last batch.
    fn len(&self) -> usize;

    /// The rows so far as a batch of `schema`; the builders start empty
    /// again.
    fn finish_batch(&mut self, schema: &SchemaRef) -> Result<RecordBatch, ArrowError>;
}

/// Why a table failed; the sink's seam names it ([`SinkError`]).
#[derive(Debug)]
pub(crate) enum Failure {
    /// A row the schema cannot hold ([`Builders::append`] says why).
    Refused(String),
    /// The builders' arrays do not make a batch of the schema.
    Batch(ArrowError),
    /// The format library, or `W` under it, failed.
    Write(parquet::errors::ParquetError),
}

impl Failure {
    /// Whether `W` failed because its reader went away.
    fn is_broken_pipe(&self) -> bool {
        match self {
            Failure::Write(parquet::errors::ParquetError::External(inner)) => inner
                .downcast_ref::<io::Error>()
                .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe),
            _ => false,
        }
    }
}

impl Failure {
    /// The seam's name for the failure: a reader that went away is
    /// `BrokenPipe`, any other I/O error `Io`, the rest `Encode`.
    fn into_sink_error(self, destination: &str) -> SinkError {
        let message = match self {
            Failure::Refused(message) => message,
            Failure::Batch(e) => e.to_string(),
            Failure::Write(e) => match io_source(e) {
                Ok(source) => return SinkError::io(destination, source),
                Err(message) => message,
            },
        };
        SinkError::Encode {
            destination: destination.to_string(),
            message,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Finished,
    Failed,
    BrokenPipe,
}

/// A Parquet stream of the rows of `C` written to `W` (the module's
/// documentation has its state machine and cost).
pub(crate) struct Table<W: Write + Send, C> {
    writer: ArrowWriter<W>,
    schema: SchemaRef,
    columns: C,
    row_group_rows: usize,
    destination: String,
    state: State,
    /// The row groups of the file, once finished (the encoder's list is
    /// moved into the footer).
    finished_row_groups: Option<usize>,
}

impl<W: Write + Send, C: Builders> Table<W, C> {
    /// Starts a file on `out` (writes the magic bytes), with row groups of
    /// `rows` rows (at least 1); `destination` names it in errors.
    pub(crate) fn start(out: W, destination: String, rows: usize) -> Result<Self, ParquetError> {
        let schema = C::schema();
        let rows = rows.max(1);
        let writer = start(out, &destination, schema.clone(), C::SCHEMA_NAME, rows)?;
        Ok(Table {
            writer,
            schema,
            columns: C::new(),
            row_group_rows: rows,
            destination,
            state: State::Open,
            finished_row_groups: None,
        })
    }

    /// Row groups written to `W` so far (all of them after `finish`).
    pub(crate) fn row_groups(&self) -> usize {
        self.finished_row_groups
            .unwrap_or(self.writer.flushed_row_groups().len())
    }

    pub(crate) fn inner(&self) -> &W {
        self.writer.inner()
    }

    pub(crate) fn destination(&self) -> &str {
        &self.destination
    }

    fn check(&self) -> Result<(), SinkError> {
        match self.state {
            State::Open => Ok(()),
            State::BrokenPipe => Err(SinkError::BrokenPipe),
            State::Finished | State::Failed => Err(SinkError::Closed {
                destination: self.destination.clone(),
            }),
        }
    }

    /// Closes the table after `f` (the contract: nothing is written after).
    fn fail(&mut self, f: Failure) -> SinkError {
        self.state = if f.is_broken_pipe() {
            State::BrokenPipe
        } else {
            State::Failed
        };
        f.into_sink_error(&self.destination)
    }

    /// Appends one row; every `row_group_rows` rows become a row group.
    pub(crate) fn write(&mut self, row: &C::Row) -> Result<(), SinkError> {
        self.check()?;
        if let Err(why) = self.columns.append(row) {
            return Err(self.fail(Failure::Refused(why)));
        }
        if self.columns.len() >= self.row_group_rows {
            self.write_batch()?;
        }
        Ok(())
    }

    /// Hands the buffered rows to the encoder and pushes finished row
    /// groups to `W`. The file stays unreadable until `finish`.
    pub(crate) fn flush(&mut self) -> Result<(), SinkError> {
        self.check()?;
        self.write_batch()?;
        match self.writer.sync() {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(Failure::Write(e.into()))),
        }
    }

    /// Writes the last row group and the footer: the file is complete.
    pub(crate) fn finish(&mut self) -> Result<(), SinkError> {
        self.check()?;
        self.write_batch()?;
        match self.writer.finish() {
            Ok(meta) => {
                self.finished_row_groups = Some(meta.num_row_groups());
                self.state = State::Finished;
                Ok(())
            }
            Err(e) => Err(self.fail(Failure::Write(e))),
        }
    }

    /// Hands the buffered rows to the encoder, which writes a row group
    /// each time it holds `row_group_rows`.
    fn write_batch(&mut self) -> Result<(), SinkError> {
        if self.columns.len() == 0 {
            return Ok(());
        }
        let batch = match self.columns.finish_batch(&self.schema) {
            Ok(b) => b,
            Err(e) => return Err(self.fail(Failure::Batch(e))),
        };
        match self.writer.write(&batch) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(Failure::Write(e))),
        }
    }
}

/// A `W` whose reader went away: every write and flush fails with
/// `BrokenPipe`.
#[cfg(test)]
pub(crate) struct BrokenPipe;

#[cfg(test)]
impl Write for BrokenPipe {
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(io::ErrorKind::BrokenPipe.into())
    }
    fn flush(&mut self) -> io::Result<()> {
        Err(io::ErrorKind::BrokenPipe.into())
    }
}
