//! Parquet files of flow records and of grouped packet vectors, readable
//! by pyarrow, pandas, Polars and DuckDB with no Clarion code.
//!
//! [`ParquetRecords`] is a [`clarion_sinks::Sink`] of flow records: records are
//! buffered in Arrow column builders and written in row groups of
//! [`DEFAULT_ROW_GROUP_ROWS`] rows, compressed with Snappy (every Parquet
//! reader has it). The columns are the field names of
//! [`clarion_records::to_json`], in its order; the schema name
//! (`clarion.flow/1`) is the file's key-value metadata `clarion.schema`
//! instead of a column (`records.rs` has the table).
//!
//! [`ParquetGpvs`] is a [`clarion_sinks::Sink`] of GPVs writing one row per GPV
//! (`clarion.gpv/1`: the header's fields, and each packet's time, size,
//! flags, sequence and acknowledgement numbers in list columns;
//! `gpv.rs` has the table), and [`read_gpvs`] reads such a file back.
//!
//! # A Parquet file is readable only when finished
//!
//! Parquet keeps its schema and the place of every row group in a footer
//! at the end of the file. Until the sink's `finish` wrote it, the file is
//! not readable by any tool: `flush` does not change that (it hands the
//! buffered rows to the encoder and pushes finished row groups to the
//! file, bounding memory). A run that is killed leaves a file no reader
//! opens; [`read_records`] and [`read_gpvs`] say so in their error.
//!
//! # Layout for later files
//!
//! The conventions every Clarion Parquet file shares (the schema key in
//! the metadata, compression, row-group size, creating a file with an
//! error naming it, opening one with the hint above, reading one back)
//! and the writing sink's state machine (`Table`: row groups, flushes,
//! closing after an error or `finish`) live in `file.rs`; the flow key's
//! six columns, first in every schema, in `key.rs`. A writer
//! (`records.rs`, `gpv.rs`) is its schema, its column builders, how its
//! seam's error names a failure, and a thin public sink over `Table`.

mod error;
mod file;
mod gpv;
mod key;
mod records;

pub use error::ParquetError;
pub use file::{DEFAULT_ROW_GROUP_ROWS, SCHEMA_KEY};
pub use gpv::{create_gpvs, gpv_schema, read_gpvs, ParquetGpvs, DEFAULT_GPV_ROW_GROUP_ROWS, GPV_SCHEMA};
pub use records::{create, flow_schema, read_records, ParquetRecords};
