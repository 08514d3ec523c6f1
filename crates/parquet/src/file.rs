//! What every Clarion Parquet file shares, whatever its rows: the schema
//! name in the key-value metadata, the writer's properties, creating a
//! file with an error naming it, opening one (checking the schema name),
//! and turning the format library's errors into the sink seam's.
//!
//! Properties: Snappy compression (pure Rust here, and read by every
//! Parquet implementation; zstd would shrink files ~20% more but builds C
//! code), dictionary encoding on (the default: `end_reason`, ports and
//! addresses repeat), row groups of a fixed number of rows (a reader skips
//! or parallelizes by row group; 64 Ki rows of flow records are a few MB).

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use arrow_schema::SchemaRef;
use clarion_records::RecordError;
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

/// The sink seam's error for a failure of the format library: an I/O
/// error stays one (a broken pipe stays `BrokenPipe`), anything else is
/// an encoding error naming the destination.
pub(crate) fn record_error(destination: &str, e: parquet::errors::ParquetError) -> RecordError {
    let message = match e {
        parquet::errors::ParquetError::External(inner) => match inner.downcast::<io::Error>() {
            Ok(source) if source.kind() == io::ErrorKind::BrokenPipe => return RecordError::BrokenPipe,
            Ok(source) => {
                return RecordError::Io {
                    destination: destination.to_string(),
                    source: *source,
                }
            }
            Err(other) => other.to_string(),
        },
        other => other.to_string(),
    };
    RecordError::Encode {
        destination: destination.to_string(),
        message,
    }
}

/// A failure of the format library as a message for a sink error that
/// names its destination elsewhere (the GPV seam has no I/O variant).
pub(crate) fn library_message(e: parquet::errors::ParquetError) -> String {
    match e {
        parquet::errors::ParquetError::External(inner) => match inner.downcast::<io::Error>() {
            Ok(source) => format!("cannot write: {source}"),
            Err(other) => other.to_string(),
        },
        other => other.to_string(),
    }
}
