//! The format-independent decoder seam: one record at a time over a window.
//!
//! A decoder sees only the bytes from the current record's start to the end
//! of what the input holds, and answers with a [`Step`]: a packet (where its
//! data lies and how long the record is), a record to skip, or "I need at
//! least N bytes". It never reads and never allocates per packet, so the
//! same code serves a capture in memory (where "need more" means the file
//! is truncated) and a pipe (where it means "read more").

use std::ops::Range;

use clarion_wire::LinkType;

use crate::error::{CaptureError, Corruption, NotCapture, Truncation, Want};
use crate::pcap::PcapDecoder;
use crate::pcapng::NgDecoder;

/// The largest record or block accepted; libpcap's own limit for pcapng
/// blocks, far above any snap length.
pub(crate) const MAX_RECORD: u32 = 16 * 1024 * 1024;

/// Byte order of a file or section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endian {
    Little,
    Big,
}

impl Endian {
    /// Reads a u16 at `at`; out-of-range reads give 0 so a length slip can
    /// never panic (callers check lengths first).
    #[inline(always)]
    pub fn u16(self, b: &[u8], at: usize) -> u16 {
        match b.get(at..at + 2) {
            Some(&[x, y]) => match self {
                Endian::Little => u16::from_le_bytes([x, y]),
                Endian::Big => u16::from_be_bytes([x, y]),
            },
            _ => 0,
        }
    }

    /// Reads a u32 at `at`, 0 when out of range (see [`Endian::u16`]).
    #[inline(always)]
    pub fn u32(self, b: &[u8], at: usize) -> u32 {
        match b.get(at..at + 4) {
            Some(&[w, x, y, z]) => match self {
                Endian::Little => u32::from_le_bytes([w, x, y, z]),
                Endian::Big => u32::from_be_bytes([w, x, y, z]),
            },
            _ => 0,
        }
    }

    #[inline(always)]
    pub fn u64(self, b: &[u8], at: usize) -> u64 {
        let (hi, lo) = match self {
            Endian::Little => (self.u32(b, at + 4), self.u32(b, at)),
            Endian::Big => (self.u32(b, at), self.u32(b, at + 4)),
        };
        (u64::from(hi) << 32) | u64::from(lo)
    }
}

/// What one packet record says about its packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    pub ts_ns: u64,
    pub link: LinkType,
    pub orig_len: u32,
}

/// A decoder's answer for the window it was shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// A packet whose data is `window[data]`; the record is `consumed` bytes.
    Packet {
        meta: Meta,
        data: Range<usize>,
        consumed: usize,
    },
    /// A record or block with no packet for the caller.
    Skip(usize),
    /// A packet on an interface whose link type Clarion cannot parse.
    Unsupported {
        dlt: u32,
        interface: u32,
        first: bool,
        consumed: usize,
    },
    /// The window must hold `need` bytes before this record can be decided.
    Need { want: Want, need: usize },
}

/// Fatal problems a decoder finds; the reader adds where they happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fail {
    NotCapture(NotCapture),
    Corrupt(Corruption),
    UnsupportedLinkType(u32),
}

impl Fail {
    pub fn into_error(self, packet_index: u64, byte_offset: u64) -> CaptureError {
        match self {
            Fail::NotCapture(n) => CaptureError::NotCapture(n),
            Fail::Corrupt(detail) => CaptureError::Corrupt {
                packet_index,
                byte_offset,
                detail,
            },
            Fail::UnsupportedLinkType(dlt) => CaptureError::UnsupportedLinkType {
                dlt,
                interface: None,
                packet_index: None,
            },
        }
    }
}

/// Turns a too-short window at end of input into the operator's error.
pub(crate) fn truncated(
    want: Want,
    need: usize,
    have: usize,
    packet_index: u64,
    byte_offset: u64,
) -> CaptureError {
    CaptureError::Truncated {
        packet_index,
        byte_offset,
        detail: Truncation { want, need, have },
    }
}

/// Decoder of either format, chosen by the magic number.
#[derive(Debug)]
pub(crate) enum Decoder {
    Start,
    Pcap(PcapDecoder),
    Pcapng(NgDecoder),
}

const PCAPNG_SHB: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

impl Decoder {
    /// Decodes the record at the start of `window`.
    #[inline]
    pub fn step(&mut self, window: &[u8]) -> Result<Step, Fail> {
        match self {
            Decoder::Pcap(d) => d.step(window),
            Decoder::Pcapng(d) => d.step(window),
            Decoder::Start => self.start(window),
        }
    }

    /// Whether the format is still unknown (a short input is then "not a capture").
    pub fn at_start(&self) -> bool {
        matches!(self, Decoder::Start)
    }

    /// Packets lost before they reached the file, as far as the file says.
    pub fn dropped(&self) -> u64 {
        match self {
            Decoder::Pcapng(d) => d.dropped(),
            _ => 0,
        }
    }

    fn start(&mut self, window: &[u8]) -> Result<Step, Fail> {
        let Some(magic) = window.first_chunk::<4>() else {
            return Ok(Step::Need {
                want: Want::FileHeader,
                need: 4,
            });
        };
        if *magic == PCAPNG_SHB {
            *self = Decoder::Pcapng(NgDecoder::new());
            return Ok(Step::Skip(0));
        }
        match PcapDecoder::from_header(window)? {
            Some((d, consumed)) => {
                *self = Decoder::Pcap(d);
                Ok(Step::Skip(consumed))
            }
            None => Ok(Step::Need {
                want: Want::FileHeader,
                need: crate::pcap::FILE_HEADER_LEN,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endian_reads() {
        let b = [1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(Endian::Little.u16(&b, 0), 0x0201);
        assert_eq!(Endian::Big.u32(&b, 0), 0x0102_0304);
        assert_eq!(Endian::Little.u64(&b, 0), 0x0807_0605_0403_0201);
        assert_eq!(Endian::Big.u64(&b, 0), 0x0102_0304_0506_0708);
        assert_eq!(Endian::Big.u32(&b, 6), 0, "out of range reads 0");
    }

    #[test]
    fn detects_formats_and_rejects_others() {
        let mut d = Decoder::Start;
        assert_eq!(
            d.step(&[0x0a, 0x0d]),
            Ok(Step::Need {
                want: Want::FileHeader,
                need: 4
            })
        );
        assert_eq!(d.step(&PCAPNG_SHB), Ok(Step::Skip(0)));
        assert!(matches!(d, Decoder::Pcapng(_)));
        let mut d = Decoder::Start;
        assert_eq!(
            d.step(b"<html>"),
            Err(Fail::NotCapture(NotCapture::Magic(*b"<htm")))
        );
        let mut d = Decoder::Start;
        assert_eq!(
            d.step(&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0]),
            Ok(Step::Need {
                want: Want::FileHeader,
                need: 24
            })
        );
    }
}
