//! Trident's header export: per-packet header records, their compression,
//! and the datagrams a collector decodes (issue 21).
//!
//! - [`HeaderRecord`] (`record.rs`): what one exported header says, made
//!   from a parsed packet plus the interface and the sample ratio; back to
//!   an Ethernet frame ([`HeaderRecord::to_frame`]) for pcapng, and to JSON
//!   ([`JsonRecord`]) for `--format jsonl`.
//! - `codec.rs`: per-interface difference coding of records (the bit
//!   layout is specified there), state reset at every datagram.
//! - [`Encoder`] / [`Decoder`] (`datagram.rs`): records packed into
//!   self-contained datagrams of at most an MTU with a header naming the
//!   stream (exporter name, worker, session), datagram and record sequence
//!   numbers and the first timestamp; the decoder restores the records
//!   exactly and tells gaps, late, duplicated and implausible datagrams
//!   apart, per stream.
//! - `auth.rs`: the HMAC-SHA256 tag that lets a collector refuse datagrams
//!   no holder of the shared [`Key`] wrote, and [`ExporterName`].
//!
//! The crate does no I/O: the host stage hands datagrams to a socket and
//! the collector hands received ones to [`Decoder::decode`]. A damaged or
//! hostile datagram is a [`HeadersError`] for that datagram, never a panic.

mod auth;
mod codec;
mod datagram;
mod record;
mod varint;

use std::fmt;

pub use auth::{key_file_text, ExporterName, Key, MAX_NAME_LEN, MIN_KEY_LEN, TAG_LEN};
pub use codec::{HISTORY, MAX_RECORD_LEN};
pub use datagram::{
    decode_datagram, Arrival, Auth, DatagramHeader, Decoded, Decoder, Encoder, EncoderConfig, EncoderStats,
    ExporterStats, StreamId, DEFAULT_MTU, FLAG_TAG, HEADER_LEN, MAGIC, MAX_GAP, MAX_MTU, MAX_STREAMS,
    MIN_MTU, VERSION, WINDOW,
};
pub use record::{HeaderRecord, JsonRecord, TcpHeader};

/// Why a configuration or a datagram was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadersError {
    #[error(
        "MTU of {mtu} bytes is outside {MIN_MTU}..={MAX_MTU} (a header and the largest record must fit)"
    )]
    Mtu { mtu: usize },
    #[error("datagram of {len} bytes is shorter than the {HEADER_LEN}-byte header")]
    ShortHeader { len: usize },
    #[error("bad magic {found:#010x}: not a Clarion header datagram")]
    BadMagic { found: u32 },
    #[error(
        "datagram version {0} (this decoder reads version {VERSION}: update the exporter or the collector)"
    )]
    Version(u8),
    #[error("header length field {0} is below {HEADER_LEN} plus the name or beyond the datagram")]
    HeaderLen(u8),
    #[error("exporter name \"{0}\" is not 1 to {MAX_NAME_LEN} of A-Z a-z 0-9 . - _ :")]
    Name(String),
    #[error("key: {0}")]
    Key(String),
    #[error("no authentication tag, and the collector requires one (a key on both sides, or --insecure)")]
    Unauthenticated,
    #[error("authentication tag does not match (another key, or altered on the way)")]
    BadTag,
    #[error("more than {max} streams (exporter, worker, session): a new one is refused")]
    Streams { max: usize },
    #[error("length field says {field} bytes but the datagram has {actual} (truncated or padded)")]
    Length { field: u16, actual: usize },
    #[error("reserved flag bits set ({0:#06x})")]
    Reserved(u16),
    #[error("{count} records cannot fit in {bytes} bytes")]
    Count { count: u16, bytes: usize },
    #[error("record {index} of {count}: {fault}")]
    Record { index: u16, count: u16, fault: Fault },
    #[error("{extra} bytes left after the {count} records the header announces")]
    Trailing { count: u16, extra: usize },
}

impl HeadersError {
    /// A short name for the kind of refusal, for counts by reason
    /// (`version`, `unauthenticated`, `bad_tag`, ...).
    pub fn reason(&self) -> &'static str {
        match self {
            HeadersError::Mtu { .. } | HeadersError::Key(_) => "config",
            HeadersError::BadMagic { .. } => "not_clarion",
            HeadersError::Version(_) => "version",
            HeadersError::Unauthenticated => "unauthenticated",
            HeadersError::BadTag => "bad_tag",
            HeadersError::Streams { .. } => "too_many_streams",
            HeadersError::ShortHeader { .. }
            | HeadersError::HeaderLen(_)
            | HeadersError::Name(_)
            | HeadersError::Length { .. }
            | HeadersError::Reserved(_)
            | HeadersError::Count { .. }
            | HeadersError::Record { .. }
            | HeadersError::Trailing { .. } => "malformed",
        }
    }

    /// Whether the datagram was refused as not coming from a key holder
    /// (counted per source address by a collector).
    pub fn is_authentication(&self) -> bool {
        matches!(self, HeadersError::Unauthenticated | HeadersError::BadTag)
    }
}

/// What is wrong with one record of a datagram (see [`HeadersError::Record`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The datagram ends inside the record.
    Truncated,
    /// A varint longer than ten bytes or beyond 64 bits.
    Varint,
    /// Reserved control bits set.
    Reserved(u8),
    /// Bitmap bits beyond the defined fields.
    Bitmap(u64),
    /// A base beyond the interface's history.
    Reference { at: usize, history: usize },
    /// A bad address prefix byte.
    Address(u8),
    /// A value outside its field's range.
    OutOfRange(&'static str),
    /// A field given a value while said to be absent.
    Absent(&'static str),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Truncated => write!(f, "the datagram ends inside it"),
            Fault::Varint => write!(f, "a varint longer than 64 bits"),
            Fault::Reserved(c) => write!(f, "reserved control bits set ({c:#04x})"),
            Fault::Bitmap(m) => write!(f, "bitmap {m:#x} names undefined fields"),
            Fault::Reference { at, history } => {
                write!(
                    f,
                    "base {at} beyond the interface's {history} remembered conversations"
                )
            }
            Fault::Address(h) => write!(f, "bad address prefix byte {h:#04x}"),
            Fault::OutOfRange(what) => write!(f, "{what} out of range"),
            Fault::Absent(what) => write!(f, "{what} given while marked absent"),
        }
    }
}
