//! The crate's one error type: creating, starting or reading a Parquet
//! file. Errors while records or GPVs flow are the sink seam's
//! ([`clarion_sinks::SinkError`]).

use std::io;
use std::path::PathBuf;

/// Why a Parquet file could not be created, started or read.
#[derive(Debug, thiserror::Error)]
pub enum ParquetError {
    #[error("cannot create the Parquet file {path}")]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The format library refused the schema or could not write the
    /// file's header.
    #[error("cannot start the Parquet file {destination}")]
    Start {
        destination: String,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("cannot open the Parquet file {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The footer is missing or damaged, or a row group cannot be decoded.
    #[error(
        "cannot read {path} as Parquet (a Clarion Parquet file is readable only after \
         its writer finished: a file still being written, or one whose run was killed, \
         has no footer)"
    )]
    Read {
        path: PathBuf,
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A readable Parquet file, but not of the schema asked for.
    #[error("{path} is not a Clarion {want} Parquet file: {message}")]
    Schema {
        path: PathBuf,
        want: &'static str,
        message: String,
    },
}
