//! The crate's one error type: bad configuration, damaged GPV files, and
//! app runtime misuse. File errors carry the byte offset of the record
//! that failed, so a damaged file can be inspected with a hex dump.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum GpvError {
    #[error("GPV cache configuration: {0}")]
    Config(&'static str),
    #[error("I/O: {0}")]
    Io(#[from] io::Error),
    #[error("not a GPV file: the first bytes are not the GPV magic")]
    BadMagic,
    #[error("GPV file version {0} is not supported (this build reads version {supported})", supported = crate::codec::VERSION)]
    UnsupportedVersion(u8),
    #[error("GPV file truncated at byte {offset}: {what} is cut short")]
    Truncated { offset: u64, what: &'static str },
    #[error("GPV file damaged in the record at byte {offset}: {reason}")]
    Corrupt { offset: u64, reason: &'static str },
    #[error("GPV record at byte {offset} claims {len} bytes, more than the limit of {max}")]
    RecordTooLarge { offset: u64, len: u64, max: u64 },
    #[error("GPV to write is inconsistent: {0}")]
    Inconsistent(&'static str),
    #[error("an app named {0:?} is already running")]
    DuplicateApp(String),
    #[error("no app named {0:?} (known: profiler, classifier, microburst)")]
    UnknownApp(String),
}
