//! Capture-file sources: pcap and pcapng, from a file or a stream.
//!
//! # Reading
//!
//! [`open`] (or [`CaptureFile::open`]) takes a path, or "-" for standard
//! input, and gives a [`CaptureFile`]; [`SliceReader`] and
//! [`StreamReader`] read captures already in memory or from any
//! [`std::io::Read`]. All implement [`PacketSource`], the seam live
//! capture will implement too: call [`PacketSource::next_packet`] until it
//! returns `None`. `open` returns the concrete [`CaptureFile`], an enum
//! over its backings, so the per-packet call is statically dispatched;
//! callers that mix sources can still hold a `Box<dyn PacketSource>`.
//!
//! Files, pipes and stdin are read through one reusable buffer (a file
//! truncated while read ends like a damaged one; see [`CaptureFile`] for
//! why not a memory map); captures in memory are read in place. Either
//! way a packet's bytes are valid until the next call, and nothing is
//! allocated per packet.
//!
//! # Writing
//!
//! [`PcapWriter`] writes classic pcap (for tests and generators);
//! [`PcapngWriter`] writes pcapng with interfaces added on demand,
//! nanosecond timestamps and packet comments; [`RotatingPcapng`] writes a
//! sequence of complete pcapng files cut by size or packet time, never
//! overwriting one, and reports what it wrote ([`WrittenFile`]).
//!
//! # Formats
//!
//! Classic pcap in both byte orders with microsecond or nanosecond
//! timestamps (and the old "modified" variant), and pcapng: sections in
//! either byte order, any number of interfaces each with its own link type
//! and `if_tsresol`, enhanced, simple and obsolete packet blocks; other
//! blocks are skipped. Timestamps become nanoseconds since the Unix epoch.
//!
//! # Damage
//!
//! A truncated or corrupt file is read up to the damage; then
//! `next_packet` returns one [`CaptureError::Truncated`] or
//! [`CaptureError::Corrupt`] naming the packet count and byte offset (or
//! [`CaptureError::Read`] when reading failed, or the file shrank while
//! read), and `None` after it. A [`CaptureFile`] opened by path wraps
//! these in [`CaptureError::File`], which names the file. The only error reading goes on after is a pcapng
//! interface whose link type Clarion cannot parse: reported once at its
//! first packet ([`CaptureError::is_fatal`] is false), its packets skipped.
//!
//! The parser is hand-written rather than built on `pcap-parser`: the
//! formats are small, and owning the loop gives exact damage positions,
//! operator-worded errors, one code path for maps and streams, and no
//! per-packet allocation.

mod decode;
mod error;
mod file;
mod input;
mod pcap;
mod pcapng;
mod pcapng_writer;
mod reader;
mod rotate;
mod writer;

#[cfg(test)]
mod testutil;

use clarion_wire::LinkType;

pub use error::{CaptureError, Corruption, NotCapture, Truncation, Want};
pub use file::{open, CaptureFile};
pub use pcapng_writer::{packet_block_len, PcapngWriter};
pub use reader::{SliceReader, StreamReader};
pub use rotate::{probe_create, RotatingPcapng, Rotation, WrittenFile};
pub use writer::{PcapHeader, PcapWriter, TsResolution};

/// One captured packet, borrowed from its source until the next call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawPacket<'a> {
    /// 0-based packet number in the file (skipped packets count too).
    pub index: u64,
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    pub link: LinkType,
    /// The captured bytes.
    pub data: &'a [u8],
    /// The frame's length on the wire (at least `data.len()` unless the file lies).
    pub orig_len: u32,
    /// Where the packet's record starts in the input.
    pub byte_offset: u64,
}

/// Counters a source keeps; the byte pair feeds progress bars.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SourceStats {
    /// Packets returned.
    pub packets: u64,
    /// Captured bytes of the packets returned.
    pub bytes: u64,
    /// Packets lost before they reached the source, as far as it knows
    /// (pcapng interface statistics; 0 for pcap).
    pub dropped: u64,
    /// Packets read but not returned (unsupported link type).
    pub skipped: u64,
    /// Input bytes consumed so far.
    pub bytes_read: u64,
    /// Input size, when known (files, not streams).
    pub bytes_total: Option<u64>,
}

/// A source of captured packets: a file now, a live interface later.
///
/// Contract: `next_packet` returns packets in input order; after a fatal
/// error ([`CaptureError::is_fatal`]) or the end of input it returns
/// `None` forever. Implementations must not panic on any input.
pub trait PacketSource {
    fn next_packet(&mut self) -> Option<Result<RawPacket<'_>, CaptureError>>;
    fn stats(&self) -> SourceStats;
}
