//! A minimal classic-pcap writer, for tests and traffic generators.

use std::io::{self, Write};

use clarion_wire::LinkType;

/// Timestamp resolution of a written file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TsResolution {
    Micro,
    Nano,
}

/// The fields of a pcap file header the writer lets callers choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcapHeader {
    /// Link type number (any value, so tests can write unsupported ones).
    pub dlt: u32,
    pub resolution: TsResolution,
    pub snaplen: u32,
    /// Write big-endian (as a SPARC would) instead of little-endian.
    pub big_endian: bool,
}

/// Writes a pcap file: header first, then one record per packet.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    header: PcapHeader,
}

impl<W: Write> PcapWriter<W> {
    /// A little-endian file with a 262,144-byte snap length.
    pub fn new(out: W, link: LinkType, resolution: TsResolution) -> io::Result<Self> {
        let header = PcapHeader {
            dlt: link.dlt(),
            resolution,
            snaplen: 262_144,
            big_endian: false,
        };
        Self::with_header(out, header)
    }

    pub fn with_header(mut out: W, header: PcapHeader) -> io::Result<Self> {
        let magic: u32 = match header.resolution {
            TsResolution::Micro => 0xa1b2_c3d4,
            TsResolution::Nano => 0xa1b2_3c4d,
        };
        let mut h = [0u8; 24];
        let fields = [
            (0, magic),
            (8, 0),
            (12, 0),
            (16, header.snaplen),
            (20, header.dlt),
        ];
        for (at, v) in fields {
            h[at..at + 4].copy_from_slice(&order32(header.big_endian, v));
        }
        h[4..6].copy_from_slice(&order16(header.big_endian, 2));
        h[6..8].copy_from_slice(&order16(header.big_endian, 4));
        out.write_all(&h)?;
        Ok(PcapWriter { out, header })
    }

    /// Writes one record. `orig_len` is the frame's length on the wire
    /// (at least `data.len()` for a truthful file; not enforced, so tests
    /// can write odd files). Times past 2106 do not fit and are saturated.
    pub fn write_packet(&mut self, ts_ns: u64, data: &[u8], orig_len: u32) -> io::Result<()> {
        let caplen = u32::try_from(data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "packet longer than 4 GiB"))?;
        let secs = u32::try_from(ts_ns / 1_000_000_000).unwrap_or(u32::MAX);
        let sub = ts_ns % 1_000_000_000;
        let frac = match self.header.resolution {
            TsResolution::Micro => sub / 1_000,
            TsResolution::Nano => sub,
        } as u32;
        let be = self.header.big_endian;
        let mut h = [0u8; 16];
        for (at, v) in [(0, secs), (4, frac), (8, caplen), (12, orig_len)] {
            h[at..at + 4].copy_from_slice(&order32(be, v));
        }
        self.out.write_all(&h)?;
        self.out.write_all(data)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes and gives the output back.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

fn order32(big: bool, v: u32) -> [u8; 4] {
    if big {
        v.to_be_bytes()
    } else {
        v.to_le_bytes()
    }
}

fn order16(big: bool, v: u16) -> [u8; 2] {
    if big {
        v.to_be_bytes()
    } else {
        v.to_le_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_record_bytes() {
        let mut w = PcapWriter::new(Vec::new(), LinkType::Ethernet, TsResolution::Micro).unwrap();
        w.write_packet(1_000_002_999, &[0xaa, 0xbb], 60).unwrap();
        let b = w.into_inner().unwrap();
        assert_eq!(&b[..8], &[0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0]);
        assert_eq!(&b[16..24], &[0, 0, 4, 0, 1, 0, 0, 0]);
        assert_eq!(
            &b[24..],
            &[1, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 60, 0, 0, 0, 0xaa, 0xbb]
        );
    }

    #[test]
    fn big_endian_nanoseconds() {
        let header = PcapHeader {
            dlt: 147,
            resolution: TsResolution::Nano,
            snaplen: 100,
            big_endian: true,
        };
        let mut w = PcapWriter::with_header(Vec::new(), header).unwrap();
        w.write_packet(5, &[], 0).unwrap();
        let b = w.into_inner().unwrap();
        assert_eq!(&b[..4], &[0xa1, 0xb2, 0x3c, 0x4d]);
        assert_eq!(&b[20..24], &[0, 0, 0, 147]);
        assert_eq!(&b[28..32], &[0, 0, 0, 5]);
    }
}
