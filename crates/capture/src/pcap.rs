//! Classic pcap: a 24-byte file header, then records of a 16-byte header
//! and the packet bytes.
//!
//! The magic number gives byte order and timestamp resolution:
//! `a1b2c3d4` microseconds, `a1b23c4d` nanoseconds, `a1b2cd34` the
//! "modified" format of old Red Hat tcpdump (microseconds, 24-byte record
//! headers). Either order of each is accepted.

use clarion_wire::LinkType;

use crate::decode::{Endian, Fail, Meta, Step, MAX_RECORD};
use crate::error::{Corruption, NotCapture, Want};

pub(crate) const FILE_HEADER_LEN: usize = 24;
const RECORD_HEADER_LEN: usize = 16;
const MODIFIED_RECORD_HEADER_LEN: usize = 24;

/// Decodes the records of one classic pcap file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PcapDecoder {
    endian: Endian,
    nanos: bool,
    record_header_len: usize,
    link: LinkType,
}

impl PcapDecoder {
    /// Reads the file header at the start of `window`: `Ok(None)` when the
    /// window is shorter than the header, else the decoder and the header length.
    pub fn from_header(window: &[u8]) -> Result<Option<(Self, usize)>, Fail> {
        let Some(magic) = window.first_chunk::<4>() else {
            return Ok(None);
        };
        let (endian, nanos, record_header_len) = match *magic {
            [0xd4, 0xc3, 0xb2, 0xa1] => (Endian::Little, false, RECORD_HEADER_LEN),
            [0xa1, 0xb2, 0xc3, 0xd4] => (Endian::Big, false, RECORD_HEADER_LEN),
            [0x4d, 0x3c, 0xb2, 0xa1] => (Endian::Little, true, RECORD_HEADER_LEN),
            [0xa1, 0xb2, 0x3c, 0x4d] => (Endian::Big, true, RECORD_HEADER_LEN),
            [0x34, 0xcd, 0xb2, 0xa1] => (Endian::Little, false, MODIFIED_RECORD_HEADER_LEN),
            [0xa1, 0xb2, 0xcd, 0x34] => (Endian::Big, false, MODIFIED_RECORD_HEADER_LEN),
            m => return Err(Fail::NotCapture(NotCapture::Magic(m))),
        };
        if window.len() < FILE_HEADER_LEN {
            return Ok(None);
        }
        let (major, minor) = (endian.u16(window, 4), endian.u16(window, 6));
        if major != 2 {
            return Err(Fail::Corrupt(Corruption::Version {
                format: "pcap",
                major,
                minor,
            }));
        }
        // The upper 16 bits hold FCS-length flags, not the link type.
        let dlt = endian.u32(window, 20) & 0xffff;
        let link = LinkType::from_dlt(dlt).ok_or(Fail::UnsupportedLinkType(dlt))?;
        Ok(Some((
            PcapDecoder {
                endian,
                nanos,
                record_header_len,
                link,
            },
            FILE_HEADER_LEN,
        )))
    }

    /// Decodes the record at the start of `window`.
    #[inline]
    pub fn step(&self, window: &[u8]) -> Result<Step, Fail> {
        let hl = self.record_header_len;
        if window.len() < hl {
            return Ok(Step::Need {
                want: Want::RecordHeader,
                need: hl,
            });
        }
        let e = self.endian;
        let caplen = e.u32(window, 8);
        if caplen > MAX_RECORD {
            return Err(Fail::Corrupt(Corruption::RecordTooLarge {
                caplen,
                limit: MAX_RECORD,
            }));
        }
        let end = hl + caplen as usize;
        if window.len() < end {
            return Ok(Step::Need {
                want: Want::RecordData { declared: caplen },
                need: end,
            });
        }
        let secs = u64::from(e.u32(window, 0));
        let frac = u64::from(e.u32(window, 4));
        // Cannot overflow: (2^32 - 1) * 10^9 + (2^32 - 1) * 10^3 < 2^64.
        let ts_ns = secs * 1_000_000_000 + if self.nanos { frac } else { frac * 1_000 };
        let meta = Meta {
            ts_ns,
            link: self.link,
            orig_len: e.u32(window, 12),
        };
        Ok(Step::Packet {
            meta,
            data: hl..end,
            consumed: end,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(magic: [u8; 4], big: bool, dlt: u32) -> Vec<u8> {
        let mut h = magic.to_vec();
        let (v, z, s, l) = if big {
            ([0, 2, 0, 4], [0; 8], 65535u32.to_be_bytes(), dlt.to_be_bytes())
        } else {
            ([2, 0, 4, 0], [0; 8], 65535u32.to_le_bytes(), dlt.to_le_bytes())
        };
        h.extend_from_slice(&v);
        h.extend_from_slice(&z);
        h.extend_from_slice(&s);
        h.extend_from_slice(&l);
        h
    }

    #[test]
    fn big_endian_nanosecond_record() {
        let mut f = header([0xa1, 0xb2, 0x3c, 0x4d], true, 101);
        let (d, n) = PcapDecoder::from_header(&f).unwrap().unwrap();
        assert_eq!(n, 24);
        assert_eq!(d.link, LinkType::RawIp);
        f.drain(..24);
        f.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0, 3, 0, 0, 0, 9, 0x45, 0, 0, 0xff]);
        let step = d.step(&f).unwrap();
        let meta = Meta {
            ts_ns: 2_000_000_007,
            link: LinkType::RawIp,
            orig_len: 9,
        };
        assert_eq!(
            step,
            Step::Packet {
                meta,
                data: 16..19,
                consumed: 19
            }
        );
    }

    #[test]
    fn little_endian_microsecond_and_modified() {
        let f = header([0xd4, 0xc3, 0xb2, 0xa1], false, 1);
        let (d, _) = PcapDecoder::from_header(&f).unwrap().unwrap();
        let rec = [1, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 60, 0, 0, 0];
        let meta = Meta {
            ts_ns: 1_000_005_000,
            link: LinkType::Ethernet,
            orig_len: 60,
        };
        assert_eq!(
            d.step(&rec),
            Ok(Step::Packet {
                meta,
                data: 16..16,
                consumed: 16
            })
        );
        let f = header([0x34, 0xcd, 0xb2, 0xa1], false, 1);
        let (d, _) = PcapDecoder::from_header(&f).unwrap().unwrap();
        assert_eq!(
            d.step(&rec),
            Ok(Step::Need {
                want: Want::RecordHeader,
                need: 24
            })
        );
    }

    #[test]
    fn header_problems() {
        let f = header([0xd4, 0xc3, 0xb2, 0xa1], false, 127);
        assert_eq!(PcapDecoder::from_header(&f), Err(Fail::UnsupportedLinkType(127)));
        // FCS flags in the upper bits do not hide the link type.
        let f = header([0xd4, 0xc3, 0xb2, 0xa1], false, 0x1400_0001);
        assert_eq!(
            PcapDecoder::from_header(&f).unwrap().unwrap().0.link,
            LinkType::Ethernet
        );
        let mut f = header([0xd4, 0xc3, 0xb2, 0xa1], false, 1);
        f[4] = 3;
        assert_eq!(
            PcapDecoder::from_header(&f),
            Err(Fail::Corrupt(Corruption::Version {
                format: "pcap",
                major: 3,
                minor: 4
            }))
        );
        assert_eq!(PcapDecoder::from_header(&f[..10]), Ok(None));
    }

    #[test]
    fn record_problems() {
        let f = header([0xd4, 0xc3, 0xb2, 0xa1], false, 1);
        let (d, _) = PcapDecoder::from_header(&f).unwrap().unwrap();
        let rec = [
            0, 0, 0, 0, 0, 0, 0, 0, 0xea, 0x05, 0, 0, 0xea, 0x05, 0, 0, 1, 2, 3,
        ];
        assert_eq!(
            d.step(&rec[..15]),
            Ok(Step::Need {
                want: Want::RecordHeader,
                need: 16
            })
        );
        assert_eq!(
            d.step(&rec),
            Ok(Step::Need {
                want: Want::RecordData { declared: 1514 },
                need: 1530
            })
        );
        let huge = [0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        assert_eq!(
            d.step(&huge),
            Err(Fail::Corrupt(Corruption::RecordTooLarge {
                caplen: u32::MAX,
                limit: MAX_RECORD
            }))
        );
    }
}
