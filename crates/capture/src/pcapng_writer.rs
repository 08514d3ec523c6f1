//! A pcapng writer: one section, interfaces added on demand, enhanced
//! packet blocks with an optional comment.
//!
//! # Layout
//!
//! [`PcapngWriter::new`] writes the section header block (little-endian,
//! version 1.0, section length "unknown" so the file can grow, and
//! `shb_userappl` "clarion 0.1.0", the crate version). [`PcapngWriter::add_interface`]
//! writes an interface description block (link type, snap length,
//! optional `if_name`, and `if_tsresol` = 9 so timestamps are whole
//! nanoseconds, the unit of [`crate::RawPacket::ts_ns`]) and returns its
//! id, numbered from 0 in the order added; pcapng allows an interface
//! block anywhere before its first packet, so interfaces can appear
//! mid-file. [`PcapngWriter::write_packet`] writes an enhanced packet
//! block, optionally with an `opt_comment`.
//!
//! # Invariants
//!
//! Every block is built whole in one reusable buffer and handed to the
//! output with one `write_all`, so a well-behaved output never holds half
//! a block from this writer unless it failed mid-write (then the error is
//! returned and the file ends in damage our reader reports as truncation).
//! A packet naming an interface not added is refused before anything is
//! written. [`PcapngWriter::bytes_written`] counts exactly the bytes handed
//! to the output, and [`packet_block_len`] predicts a packet block's size,
//! which is what file rotation needs to honour a byte limit.
//!
//! # Cost
//!
//! One copy of each packet into the block buffer (which stops growing at
//! the largest packet) and one `write_all` per block; wrap files in a
//! `BufWriter`. No allocation per packet once the buffer has grown.
//!
//! Errors are `io::Error`s, like [`crate::PcapWriter`]'s: the writer has no
//! path to name; [`crate::RotatingPcapng`], which has, turns them into
//! [`crate::CaptureError`]s.

use std::io::{self, Write};

use clarion_wire::LinkType;

use crate::decode::MAX_RECORD;

const SHB_TYPE: u32 = 0x0a0d_0d0a;
const IDB_TYPE: u32 = 1;
const EPB_TYPE: u32 = 6;
const BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;

const OPT_END: u16 = 0;
const OPT_COMMENT: u16 = 1;
const SHB_USERAPPL: u16 = 4;
const IF_NAME: u16 = 2;
const IF_TSRESOL: u16 = 9;

/// Block header (type, length) and trailer (length).
const BLOCK_OVERHEAD: usize = 12;
/// Interface id, timestamp (2 words), captured and original length.
const EPB_FIXED: usize = 20;
/// Option values longer than this cannot be written (the length is a u16).
const MAX_OPTION: usize = u16::MAX as usize;

/// The application named in every section header.
const USER_APPL: &str = concat!("clarion ", env!("CARGO_PKG_VERSION"));

/// Writes a pcapng file: section header first, then interfaces and packets.
#[derive(Debug)]
pub struct PcapngWriter<W: Write> {
    out: W,
    /// Snap length of each interface, by id (only their count is checked).
    interfaces: Vec<u32>,
    /// The block being built; reused.
    block: Vec<u8>,
    bytes_written: u64,
}

impl<W: Write> PcapngWriter<W> {
    /// Writes the section header block.
    pub fn new(out: W) -> io::Result<Self> {
        let mut w = PcapngWriter {
            out,
            interfaces: Vec::new(),
            block: Vec::with_capacity(256),
            bytes_written: 0,
        };
        w.begin(SHB_TYPE);
        w.put32(BYTE_ORDER_MAGIC);
        w.put16(1); // major
        w.put16(0); // minor
        w.block.extend_from_slice(&u64::MAX.to_le_bytes()); // section length: unknown
        w.option(SHB_USERAPPL, USER_APPL.as_bytes());
        w.put_end_of_options();
        w.finish_block()?;
        Ok(w)
    }

    /// Writes an interface description block and returns the interface's
    /// id (0, 1, ... in the order added). `snaplen` 0 means "no limit".
    /// A name longer than 65,535 bytes is cut at a character boundary.
    pub fn add_interface(&mut self, link: LinkType, snaplen: u32, name: Option<&str>) -> io::Result<u32> {
        let id = u32::try_from(self.interfaces.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many pcapng interfaces"))?;
        self.begin(IDB_TYPE);
        // Every LinkType's number fits the IDB's 16-bit field (the largest is 276).
        self.put16(link.dlt() as u16);
        self.put16(0); // reserved
        self.put32(snaplen);
        if let Some(name) = name {
            self.option(IF_NAME, cut(name).as_bytes());
        }
        self.option(IF_TSRESOL, &[9]);
        self.put_end_of_options();
        self.finish_block()?;
        self.interfaces.push(snaplen);
        Ok(id)
    }

    /// Number of interfaces added.
    pub fn interfaces(&self) -> u32 {
        // Bounded by add_interface's check.
        self.interfaces.len() as u32
    }

    /// Writes one enhanced packet block. `orig_len` is the frame's length
    /// on the wire (at least `data.len()` for a truthful file; not
    /// enforced, as in [`crate::PcapWriter::write_packet`]).
    pub fn write_packet(&mut self, interface: u32, ts_ns: u64, data: &[u8], orig_len: u32) -> io::Result<()> {
        self.write_packet_with_comment(interface, ts_ns, data, orig_len, None)
    }

    /// [`PcapngWriter::write_packet`] with an optional `opt_comment` (cut
    /// at a character boundary to 65,535 bytes). Refuses, writing nothing,
    /// an interface not added and a block larger than readers accept
    /// (16 MiB, libpcap's limit).
    pub fn write_packet_with_comment(
        &mut self,
        interface: u32,
        ts_ns: u64,
        data: &[u8],
        orig_len: u32,
        comment: Option<&str>,
    ) -> io::Result<()> {
        if interface as usize >= self.interfaces.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "pcapng packet names interface {interface} but only {} were added",
                    self.interfaces.len()
                ),
            ));
        }
        let len = packet_block_len(data.len(), comment);
        if len > u64::from(MAX_RECORD) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("pcapng packet block of {len} bytes is over the {MAX_RECORD}-byte limit"),
            ));
        }
        self.begin(EPB_TYPE);
        self.put32(interface);
        self.put32((ts_ns >> 32) as u32);
        self.put32(ts_ns as u32);
        // Fits: the block, which holds it, is under MAX_RECORD.
        self.put32(data.len() as u32);
        self.put32(orig_len);
        self.block.extend_from_slice(data);
        self.pad();
        if let Some(c) = comment {
            self.option(OPT_COMMENT, cut(c).as_bytes());
            self.put_end_of_options();
        }
        self.finish_block()
    }

    /// Bytes handed to the output so far (the file's size once flushed).
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The output, for inspection (e.g. a `BufWriter`'s file).
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// Flushes and gives the output back.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }

    fn begin(&mut self, block_type: u32) {
        self.block.clear();
        self.put32(block_type);
        self.put32(0); // length, patched by finish_block
    }

    fn put16(&mut self, v: u16) {
        self.block.extend_from_slice(&v.to_le_bytes());
    }

    fn put32(&mut self, v: u32) {
        self.block.extend_from_slice(&v.to_le_bytes());
    }

    fn pad(&mut self) {
        let n = self.block.len().next_multiple_of(4);
        self.block.resize(n, 0);
    }

    /// One option; `value` is at most MAX_OPTION bytes (callers cut it).
    fn option(&mut self, code: u16, value: &[u8]) {
        self.put16(code);
        self.put16(value.len().min(MAX_OPTION) as u16);
        self.block
            .extend_from_slice(&value[..value.len().min(MAX_OPTION)]);
        self.pad();
    }

    fn put_end_of_options(&mut self) {
        self.put32(u32::from(OPT_END));
    }

    /// Patches the length, appends the trailer, writes the block.
    fn finish_block(&mut self) -> io::Result<()> {
        let len = (self.block.len() + 4) as u32;
        self.block[4..8].copy_from_slice(&len.to_le_bytes());
        self.put32(len);
        self.out.write_all(&self.block)?;
        self.bytes_written += u64::from(len);
        Ok(())
    }
}

/// The size in bytes of the enhanced packet block
/// [`PcapngWriter::write_packet_with_comment`] writes for a packet of
/// `data_len` captured bytes and this comment.
pub fn packet_block_len(data_len: usize, comment: Option<&str>) -> u64 {
    let options = comment.map_or(0, |c| 4 + cut(c).len().next_multiple_of(4) + 4);
    (BLOCK_OVERHEAD + EPB_FIXED + data_len.next_multiple_of(4) + options) as u64
}

/// `s` cut to at most MAX_OPTION bytes at a character boundary.
fn cut(s: &str) -> &str {
    if s.len() <= MAX_OPTION {
        return s;
    }
    let mut end = MAX_OPTION;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests;
