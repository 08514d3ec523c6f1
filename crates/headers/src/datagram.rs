//! Datagrams: records packed for UDP, each decodable alone.
//!
//! # Layout
//!
//! A datagram is a 40-byte header followed by `count` records coded as in
//! [`crate::codec`]. All integers are big-endian.
//!
//! | offset | size | field          | meaning |
//! |--------|------|----------------|---------|
//! | 0      | 4    | magic          | `CLHR` (0x434c4852) |
//! | 4      | 1    | version        | 1 |
//! | 5      | 1    | header length  | 40; a decoder of version 1 skips any more |
//! | 6      | 2    | count          | records in this datagram |
//! | 8      | 2    | length         | bytes of the whole datagram, header included |
//! | 10     | 2    | reserved       | 0 |
//! | 12     | 4    | observation id | the exporter (host) |
//! | 16     | 8    | sequence       | this datagram's number from its exporter, from 0 |
//! | 24     | 8    | record sequence| records the exporter sent before this datagram |
//! | 32     | 8    | first ts       | ns since the Unix epoch; the base of each interface's first ts delta |
//!
//! The two sequences let a collector count lost datagrams *and* the
//! records in them (as IPFIX's sequence number does), and tell a late or
//! duplicated datagram from a new one.
//!
//! # Self-contained datagrams
//!
//! The compression state is reset at every datagram's start: a datagram
//! lost, duplicated or reordered by UDP costs exactly its own records and
//! cannot corrupt the decoding of any other. The price is that each
//! datagram's first record of a conversation is sent in full (about 25
//! bytes); at 1400 bytes a datagram that is 5-10% of its payload.
//!
//! # Size
//!
//! At most [`EncoderConfig::mtu`] bytes (default [`DEFAULT_MTU`] = 1400):
//! an Ethernet MTU of 1500 less IPv6 (40) and UDP (8) leaves 1452, and
//! the 52 bytes beyond that leave room for one tunnel layer on the way
//! (VXLAN or Geneve over IPv4 adds 50), so export datagrams are not
//! fragmented on the paths a host's telemetry usually takes.
//!
//! # Decoding
//!
//! [`Decoder::decode`] checks the header, decodes exactly `count` records
//! that must end exactly at `length`, and reports where the datagram stands
//! in its exporter's sequence ([`Arrival`]). Any inconsistency is an error
//! for that datagram alone (no record of it is returned) and never a panic.
//!
//! # Cost
//!
//! Encoding allocates nothing per record or datagram once its two buffers
//! (one being filled, one handed out) have grown to the MTU. Decoding
//! appends to a caller's vector ([`Decoder::decode_into`]) or a new one.

use std::collections::HashMap;

use crate::codec::{self, State, MAX_RECORD_LEN};
use crate::record::HeaderRecord;
use crate::varint::Reader;
use crate::{Fault, HeadersError};

/// The datagram magic, "CLHR".
pub const MAGIC: u32 = 0x434c_4852;
/// The layout version this crate writes and reads.
pub const VERSION: u8 = 1;
/// Bytes of the datagram header.
pub const HEADER_LEN: usize = 40;
/// Default datagram size (UDP payload), see the module doc.
pub const DEFAULT_MTU: usize = 1400;
/// The smallest MTU: a header and one record of the largest size.
pub const MIN_MTU: usize = HEADER_LEN + MAX_RECORD_LEN;
/// The largest MTU: the 16-bit length field (and a UDP payload over IPv4).
pub const MAX_MTU: usize = 65_507;

/// The datagram header, as written and as decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DatagramHeader {
    pub observation_id: u32,
    pub sequence: u64,
    pub record_sequence: u64,
    pub first_ts_ns: u64,
    pub count: u16,
    pub length: u16,
}

impl DatagramHeader {
    fn write(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        out[4] = VERSION;
        out[5] = HEADER_LEN as u8;
        out[6..8].copy_from_slice(&self.count.to_be_bytes());
        out[8..10].copy_from_slice(&self.length.to_be_bytes());
        out[10..12].fill(0);
        out[12..16].copy_from_slice(&self.observation_id.to_be_bytes());
        out[16..24].copy_from_slice(&self.sequence.to_be_bytes());
        out[24..32].copy_from_slice(&self.record_sequence.to_be_bytes());
        out[32..40].copy_from_slice(&self.first_ts_ns.to_be_bytes());
    }

    /// Reads and checks the header; returns it and where records start.
    pub fn parse(d: &[u8]) -> Result<(Self, usize), HeadersError> {
        if d.len() < HEADER_LEN {
            return Err(HeadersError::ShortHeader { len: d.len() });
        }
        let mut r = Reader::new(d, 0);
        let short = |_| HeadersError::ShortHeader { len: d.len() };
        let magic = r.be32().map_err(short)?;
        if magic != MAGIC {
            return Err(HeadersError::BadMagic { found: magic });
        }
        let version = r.u8().map_err(short)?;
        if version != VERSION {
            return Err(HeadersError::Version(version));
        }
        let header_len = r.u8().map_err(short)?;
        if usize::from(header_len) < HEADER_LEN || usize::from(header_len) > d.len() {
            return Err(HeadersError::HeaderLen(header_len));
        }
        let count = r.be16().map_err(short)?;
        let length = r.be16().map_err(short)?;
        if usize::from(length) != d.len() {
            return Err(HeadersError::Length {
                field: length,
                actual: d.len(),
            });
        }
        let reserved = r.be16().map_err(short)?;
        if reserved != 0 {
            return Err(HeadersError::Reserved(reserved));
        }
        let h = DatagramHeader {
            observation_id: r.be32().map_err(short)?,
            sequence: r.be64().map_err(short)?,
            record_sequence: r.be64().map_err(short)?,
            first_ts_ns: r.be64().map_err(short)?,
            count,
            length,
        };
        // Every record takes at least three bytes: refuse an absurd count
        // before decoding anything.
        let room = d.len() - usize::from(header_len);
        if usize::from(count) * 3 > room {
            return Err(HeadersError::Count { count, bytes: room });
        }
        Ok((h, usize::from(header_len)))
    }
}

/// How an [`Encoder`] packs datagrams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncoderConfig {
    /// The exporter's id, in every datagram.
    pub observation_id: u32,
    /// Largest datagram (UDP payload) in bytes, [`MIN_MTU`]..=[`MAX_MTU`].
    pub mtu: usize,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        EncoderConfig {
            observation_id: 0,
            mtu: DEFAULT_MTU,
        }
    }
}

/// What an [`Encoder`] has done so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct EncoderStats {
    /// Records encoded (in datagrams handed out or still pending).
    pub records: u64,
    /// Datagrams handed out.
    pub datagrams: u64,
    /// The records' headers as Ethernet frames cut after the transport
    /// header ([`HeaderRecord::header_frame_len`]).
    pub header_bytes: u64,
    /// The records' packets as whole Ethernet frames ([`HeaderRecord::frame_len`]).
    pub packet_bytes: u64,
    /// Bytes of the datagrams handed out (UDP payload).
    pub bytes_out: u64,
}

/// Packs records into datagrams.
///
/// Single-threaded; one per exporter (one observation id and sequence).
#[derive(Debug)]
pub struct Encoder {
    config: EncoderConfig,
    state: State,
    /// The datagram being filled: header space, then records.
    cur: Vec<u8>,
    cur_header: DatagramHeader,
    /// The last datagram handed out, valid until the next call.
    done: Vec<u8>,
    next_sequence: u64,
    stats: EncoderStats,
}

impl Encoder {
    pub fn new(config: EncoderConfig) -> Result<Self, HeadersError> {
        if !(MIN_MTU..=MAX_MTU).contains(&config.mtu) {
            return Err(HeadersError::Mtu { mtu: config.mtu });
        }
        Ok(Encoder {
            config,
            state: State::default(),
            cur: Vec::with_capacity(config.mtu),
            cur_header: DatagramHeader::default(),
            done: Vec::with_capacity(config.mtu),
            next_sequence: 0,
            stats: EncoderStats::default(),
        })
    }

    pub fn config(&self) -> EncoderConfig {
        self.config
    }

    pub fn stats(&self) -> EncoderStats {
        self.stats
    }

    /// Records waiting in the datagram being filled.
    pub fn pending(&self) -> u16 {
        self.cur_header.count
    }

    /// Adds a record. Returns a finished datagram when this record did not
    /// fit in the current one (the record then starts the next); the slice
    /// is valid until the next call.
    pub fn push(&mut self, r: &HeaderRecord) -> Option<&[u8]> {
        let mut scratch = [0u8; MAX_RECORD_LEN];
        if self.cur.is_empty() {
            self.start(r.ts_ns);
        }
        let (mut len, mut pending) = codec::encode(&self.state, r, &mut scratch);
        let full = self.cur.len() + len > self.config.mtu || self.cur_header.count == u16::MAX;
        if full {
            self.finish();
            self.start(r.ts_ns);
            (len, pending) = codec::encode(&self.state, r, &mut scratch);
        }
        self.cur.extend_from_slice(&scratch[..len]);
        codec::commit(&mut self.state, &pending);
        self.cur_header.count += 1;
        self.stats.records += 1;
        self.stats.header_bytes += u64::from(r.header_frame_len());
        self.stats.packet_bytes += u64::from(r.frame_len());
        full.then_some(&self.done[..])
    }

    /// Hands out the datagram being filled, if it holds any record (at the
    /// end, or on a timer so records do not wait long).
    pub fn flush(&mut self) -> Option<&[u8]> {
        if self.cur_header.count == 0 {
            return None;
        }
        self.finish();
        Some(&self.done[..])
    }

    fn start(&mut self, first_ts_ns: u64) {
        self.cur.clear();
        self.cur.resize(HEADER_LEN, 0);
        self.cur_header = DatagramHeader {
            observation_id: self.config.observation_id,
            sequence: self.next_sequence,
            record_sequence: self.stats.records,
            first_ts_ns,
            count: 0,
            length: 0,
        };
        self.state.reset(first_ts_ns);
    }

    /// Moves the current datagram, header filled in, to `done`.
    fn finish(&mut self) {
        // The MTU bounds the length to MAX_MTU, which fits 16 bits.
        self.cur_header.length = u16::try_from(self.cur.len()).unwrap_or(u16::MAX);
        self.cur_header.write(&mut self.cur[..HEADER_LEN]);
        std::mem::swap(&mut self.cur, &mut self.done);
        self.cur.clear();
        self.cur_header.count = 0;
        self.next_sequence += 1;
        self.stats.datagrams += 1;
        self.stats.bytes_out += self.done.len() as u64;
    }
}

/// Decodes one datagram on its own (no sequence tracking), appending its
/// records to `out`; on error `out` is left as it was.
pub fn decode_datagram(d: &[u8], out: &mut Vec<HeaderRecord>) -> Result<DatagramHeader, HeadersError> {
    decode_with(&mut State::default(), d, out)
}

fn decode_with(
    state: &mut State,
    d: &[u8],
    out: &mut Vec<HeaderRecord>,
) -> Result<DatagramHeader, HeadersError> {
    let (h, start) = DatagramHeader::parse(d)?;
    state.reset(h.first_ts_ns);
    let mark = out.len();
    let mut r = Reader::new(d, start);
    let fail = |index: u16, fault: Fault| HeadersError::Record {
        index,
        count: h.count,
        fault,
    };
    for index in 0..h.count {
        match codec::decode(state, &mut r) {
            Ok(rec) => out.push(rec),
            Err(f) => {
                out.truncate(mark);
                return Err(fail(index, f));
            }
        }
    }
    if r.remaining() != 0 {
        out.truncate(mark);
        return Err(HeadersError::Trailing {
            count: h.count,
            extra: r.remaining(),
        });
    }
    Ok(h)
}

/// Where a datagram stands in its exporter's sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// The first datagram seen from this exporter.
    First,
    /// The next one expected.
    InOrder,
    /// Newer than expected: `datagrams` (holding `records`) are missing
    /// before it, and counted lost until they arrive late.
    Gap { datagrams: u64, records: u64 },
    /// Older than the newest, not seen before: it had been counted lost.
    Late,
    /// Seen before (the records are returned again; a collector drops them).
    Duplicate,
    /// Older than the [`WINDOW`] datagrams remembered: whether it is late
    /// or a duplicate cannot be told.
    TooOld,
}

/// How many datagrams behind the newest a decoder tells late from duplicate.
pub const WINDOW: u64 = 64;

/// What a [`Decoder`] saw from one exporter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ExporterStats {
    pub datagrams: u64,
    pub records: u64,
    /// Datagrams missing now (gaps less those that arrived late).
    pub lost_datagrams: u64,
    /// Records in them, from the record sequence.
    pub lost_records: u64,
    pub late: u64,
    pub duplicates: u64,
    pub too_old: u64,
}

#[derive(Clone, Copy, Debug)]
struct Track {
    /// The sequence number expected next (newest seen + 1).
    next: u64,
    /// The record sequence expected next.
    next_record: u64,
    /// Bit i: datagram `next - 1 - i` was seen.
    seen: u64,
    stats: ExporterStats,
}

/// One decoded datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    pub header: DatagramHeader,
    pub arrival: Arrival,
    pub records: Vec<HeaderRecord>,
}

/// Decodes datagrams from any number of exporters, tracking each one's
/// sequence. Single-threaded; one per collector socket.
#[derive(Debug, Default)]
pub struct Decoder {
    state: State,
    exporters: HashMap<u32, Track>,
    errors: u64,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes one datagram into a new vector.
    pub fn decode(&mut self, d: &[u8]) -> Result<Decoded, HeadersError> {
        let mut records = Vec::new();
        let (header, arrival) = self.decode_into(d, &mut records)?;
        Ok(Decoded {
            header,
            arrival,
            records,
        })
    }

    /// Decodes one datagram, appending its records to `out` (left as it was
    /// on error), and places it in its exporter's sequence.
    pub fn decode_into(
        &mut self,
        d: &[u8],
        out: &mut Vec<HeaderRecord>,
    ) -> Result<(DatagramHeader, Arrival), HeadersError> {
        let h = match decode_with(&mut self.state, d, out) {
            Ok(h) => h,
            Err(e) => {
                self.errors += 1;
                return Err(e);
            }
        };
        let arrival = self.place(&h);
        Ok((h, arrival))
    }

    fn place(&mut self, h: &DatagramHeader) -> Arrival {
        let count = u64::from(h.count);
        let end_record = h.record_sequence.wrapping_add(count);
        let s = h.sequence;
        let t = self.exporters.entry(h.observation_id).or_insert(Track {
            next: s,
            next_record: h.record_sequence,
            seen: 0,
            stats: ExporterStats::default(),
        });
        let first = t.stats.datagrams == 0 && t.seen == 0;
        t.stats.datagrams += 1;
        t.stats.records += count;
        if first {
            (t.next, t.next_record, t.seen) = (s.wrapping_add(1), end_record, 1);
            return Arrival::First;
        }
        if s >= t.next {
            let gap = s - t.next;
            let lost_records = h.record_sequence.saturating_sub(t.next_record);
            t.seen = if gap + 1 >= WINDOW {
                1
            } else {
                t.seen << (gap + 1) | 1
            };
            (t.next, t.next_record) = (s.wrapping_add(1), end_record);
            if gap == 0 {
                return Arrival::InOrder;
            }
            t.stats.lost_datagrams += gap;
            t.stats.lost_records += lost_records;
            return Arrival::Gap {
                datagrams: gap,
                records: lost_records,
            };
        }
        let behind = t.next - 1 - s;
        if behind >= WINDOW {
            t.stats.too_old += 1;
            return Arrival::TooOld;
        }
        if t.seen & (1 << behind) != 0 {
            t.stats.duplicates += 1;
            return Arrival::Duplicate;
        }
        t.seen |= 1 << behind;
        t.stats.late += 1;
        t.stats.lost_datagrams = t.stats.lost_datagrams.saturating_sub(1);
        t.stats.lost_records = t.stats.lost_records.saturating_sub(count);
        Arrival::Late
    }

    /// What was seen from one exporter.
    pub fn exporter(&self, observation_id: u32) -> Option<ExporterStats> {
        self.exporters.get(&observation_id).map(|t| t.stats)
    }

    /// Every exporter seen, by id.
    pub fn exporters(&self) -> impl Iterator<Item = (u32, ExporterStats)> + '_ {
        self.exporters.iter().map(|(&id, t)| (id, t.stats))
    }

    /// Datagrams refused.
    pub fn errors(&self) -> u64 {
        self.errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::TcpHeader;
    use std::net::{IpAddr, Ipv4Addr};

    /// A TCP ACK and its answer, and their datagram byte for byte, as the
    /// tables in codec.rs and here lay them out (assembled by hand).
    fn fixture() -> (Vec<HeaderRecord>, Vec<u8>) {
        let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let b = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        let ts = 1_700_000_000_000_000_000u64;
        let tcp = TcpHeader {
            seq: 1000,
            ack: 2000,
            window: 502,
            flags: 0x10,
            wscale: None,
            mss: None,
        };
        let first = HeaderRecord {
            ts_ns: ts,
            interface: 0,
            sample_ratio: 1,
            src: a,
            dst: b,
            ports: Some((40000, 80)),
            proto: 6,
            vlan: None,
            size: 52,
            volume: 0,
            ttl: 64,
            ecn: 0,
            later_fragment: false,
            captured_len: 66,
            tcp: Some(tcp),
        };
        let answer = HeaderRecord {
            ts_ns: ts + 1000,
            src: b,
            dst: a,
            ports: Some((80, 40000)),
            tcp: Some(TcpHeader {
                seq: 2000,
                ack: 1100,
                ..tcp
            }),
            ..first
        };
        let mut d = b"CLHR".to_vec();
        d.extend([1, 40, 0, 2, 0, 83, 0, 0]); // version, header length, count 2, length 83, reserved
        d.extend(7u32.to_be_bytes()); // observation id
        d.extend(0u64.to_be_bytes()); // sequence
        d.extend(0u64.to_be_bytes()); // record sequence
        d.extend(ts.to_be_bytes()); // first ts
        #[rustfmt::skip]
        d.extend([
            // First record, against the zero record: ctrl 0; bitmap bits 0-13
            // and 15 (0xbfff) as LEB128; ts delta 0.
            0x00, 0xff, 0xff, 0x02, 0x00,
            0x24, 0x06,                     // misc: ports and TCP; proto 6
            0x00, 10, 0, 0, 1,              // src: no prefix shared, 4 bytes
            0x00, 10, 0, 0, 2,              // dst
            0x9c, 0x40, 0x00, 0x50,         // ports 40000, 80
            64, 52,                         // ttl, size
            104, 28,                        // zigzag(52 header bytes), zigzag(14 link extra)
            1,                              // sample ratio
            0, 0, 0x03, 0xe8, 0, 0, 0x07, 0xd0, // seq, ack raw: the base has no TCP
            0x01, 0xf6, 0x10,               // window 502, flags ACK
            // The answer: ctrl REV on entry 0; bitmap: ack only; ts delta
            // zigzag(1000) = 2000; ack delta zigzag(+100) = 200.
            0x10, 0x04, 0xd0, 0x0f, 0xc8, 0x01,
        ]);
        (vec![first, answer], d)
    }

    #[test]
    fn emit_matches_the_layout() {
        let (recs, want) = fixture();
        let mut enc = Encoder::new(EncoderConfig {
            observation_id: 7,
            mtu: DEFAULT_MTU,
        })
        .unwrap();
        assert!(recs.iter().all(|r| enc.push(r).is_none()));
        assert_eq!(enc.flush(), Some(&want[..]));
        assert_eq!(enc.flush(), None);
    }

    #[test]
    fn parse_matches_the_layout() {
        let (recs, d) = fixture();
        let mut out = Vec::new();
        let h = decode_datagram(&d, &mut out).unwrap();
        assert_eq!(out, recs);
        assert_eq!(
            h,
            DatagramHeader {
                observation_id: 7,
                sequence: 0,
                record_sequence: 0,
                first_ts_ns: recs[0].ts_ns,
                count: 2,
                length: 83,
            }
        );
    }

    #[test]
    fn record_faults_are_named() {
        let (_, d) = fixture();
        let mut out = Vec::new();
        let at = HEADER_LEN + 37; // the answer's ctrl byte
        let fault = |bad: &[u8]| match decode_datagram(bad, &mut Vec::new()) {
            Err(HeadersError::Record { index, fault, .. }) => (index, fault),
            other => panic!("{other:?}"),
        };
        let mut bad = d.clone();
        bad[at] = 0x40;
        assert_eq!(fault(&bad), (1, Fault::Reserved(0x40)));
        bad[at] = 0x03;
        assert_eq!(fault(&bad), (1, Fault::Reference { at: 3, history: 1 }));
        let mut bad = d.clone();
        bad[HEADER_LEN] = 0x01; // the first record refers to an empty history
        assert_eq!(fault(&bad), (0, Fault::Reference { at: 1, history: 0 }));
        let mut bad = d.clone();
        bad[HEADER_LEN + 3] = 0x0a; // bitmap bits 15 and 17
        assert_eq!(fault(&bad).1, Fault::Bitmap(0x2bfff));
        let mut bad = d.clone();
        bad[HEADER_LEN + 5] = 0x20; // misc without ports: ports given while absent
        assert_eq!(fault(&bad), (0, Fault::Absent("ports")));
        let mut bad = d.clone();
        bad[HEADER_LEN + 7] = 0x05; // src shares 5 bytes of a 4-byte address
        assert_eq!(fault(&bad), (0, Fault::Address(0x05)));
        assert!(out.is_empty());
        out.push(fixture().0[0]);
        assert!(decode_datagram(&bad, &mut out).is_err());
        assert_eq!(out.len(), 1, "a failed decode leaves the vector as it was");
    }

    #[test]
    fn sequence_tracking() {
        let mut dec = Decoder::new();
        let h = |sequence, record_sequence, count| DatagramHeader {
            observation_id: 1,
            sequence,
            record_sequence,
            count,
            ..DatagramHeader::default()
        };
        let steps = [
            (h(10, 100, 5), Arrival::First),
            (h(11, 105, 5), Arrival::InOrder),
            (
                h(14, 120, 5),
                Arrival::Gap {
                    datagrams: 2,
                    records: 10,
                },
            ),
            (h(12, 110, 4), Arrival::Late),
            (h(12, 110, 4), Arrival::Duplicate),
            (h(14, 120, 5), Arrival::Duplicate),
            (
                h(15 + WINDOW, 500, 1),
                Arrival::Gap {
                    datagrams: WINDOW,
                    records: 375,
                },
            ),
            (h(13, 114, 6), Arrival::TooOld),
            (
                h(u64::MAX, 0, 1),
                Arrival::Gap {
                    datagrams: u64::MAX - 16 - WINDOW,
                    records: 0,
                },
            ),
        ];
        for (i, (hd, want)) in steps.iter().enumerate() {
            assert_eq!(dec.place(hd), *want, "step {i}");
        }
        let s = dec.exporter(1).unwrap();
        assert_eq!((s.late, s.duplicates, s.too_old), (1, 2, 1));
        assert_eq!(s.lost_datagrams, 1 + WINDOW + (u64::MAX - 16 - WINDOW));
    }
}
