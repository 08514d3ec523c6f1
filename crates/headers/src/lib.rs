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
//!   self-contained datagrams of at most an MTU with a 40-byte header
//!   (exporter id, datagram and record sequence numbers, first timestamp);
//!   the decoder restores the records exactly and tells gaps, late and
//!   duplicated datagrams apart.
//!
//! The crate does no I/O: the host stage hands datagrams to a socket and
//! the collector hands received ones to [`Decoder::decode`]. A damaged or
//! hostile datagram is a [`HeadersError`] for that datagram, never a panic.

mod codec;
mod datagram;
mod record;
mod varint;

use std::fmt;

pub use codec::{HISTORY, MAX_RECORD_LEN};
pub use datagram::{
    decode_datagram, Arrival, DatagramHeader, Decoded, Decoder, Encoder, EncoderConfig, EncoderStats,
    ExporterStats, DEFAULT_MTU, HEADER_LEN, MAGIC, MAX_MTU, MIN_MTU, VERSION, WINDOW,
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
    #[error("datagram version {0} (this decoder reads version {VERSION})")]
    Version(u8),
    #[error("header length field {0} is below {HEADER_LEN} or beyond the datagram")]
    HeaderLen(u8),
    #[error("length field says {field} bytes but the datagram has {actual} (truncated or padded)")]
    Length { field: u16, actual: usize },
    #[error("reserved header bits set ({0:#06x})")]
    Reserved(u16),
    #[error("{count} records cannot fit in {bytes} bytes")]
    Count { count: u16, bytes: usize },
    #[error("record {index} of {count}: {fault}")]
    Record { index: u16, count: u16, fault: Fault },
    #[error("{extra} bytes left after the {count} records the header announces")]
    Trailing { count: u16, extra: usize },
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
