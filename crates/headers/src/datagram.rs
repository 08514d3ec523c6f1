//! Datagrams: records packed for UDP, each decodable alone.
//!
//! # Layout (version 2)
//!
//! A datagram is a header naming its exporter, `count` records coded as
//! in [`crate::codec`], and, when flag `TAG` is set, a 32-byte
//! HMAC-SHA256 tag over everything before it ([`crate::auth`]). All
//! integers are big-endian.
//!
//! | offset | size | field          | meaning |
//! |--------|------|----------------|---------|
//! | 0      | 4    | magic          | `CLHR` (0x434c4852) |
//! | 4      | 1    | version        | 2 (version 1 had no name, session nor tag, and is refused) |
//! | 5      | 1    | header length  | 49 + n at least; a decoder of version 2 skips any more |
//! | 6      | 2    | count          | records in this datagram |
//! | 8      | 2    | length         | bytes of the whole datagram, header and tag included |
//! | 10     | 2    | flags          | bit 0 `TAG`: the last 32 bytes are the tag; other bits 0 |
//! | 12     | 4    | worker         | the exporter's worker (0 for one worker or a file) |
//! | 16     | 8    | session        | random, drawn when the exporter's stream starts |
//! | 24     | 8    | sequence       | this datagram's number in its stream, from 0 |
//! | 32     | 8    | record sequence| records the stream sent before this datagram |
//! | 40     | 8    | first ts       | ns since the Unix epoch; the base of each interface's first ts delta |
//! | 48     | 1    | n              | bytes of the exporter's name, 1..=64 |
//! | 49     | n    | name           | the exporter (its host name by default), `A-Z a-z 0-9 . - _ :` |
//!
//! A *stream* is (name, worker, session): its sequences count from 0. A
//! restarted exporter draws a new session, so its datagrams start a new
//! stream instead of looking like a jump back (or a loss) in the old one;
//! two hosts sending to one collector are two streams even with the same
//! worker index.
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
//! [`Decoder::decode`] checks the tag first (with a key, a datagram
//! without a valid tag is refused before anything of it is believed),
//! then the header, decodes exactly `count` records that must end exactly
//! where the tag (or the datagram) starts, and reports where the datagram
//! stands in its stream ([`Arrival`]). Any inconsistency is an error for
//! that datagram alone (no record of it is returned) and never a panic.
//!
//! # Cost
//!
//! Encoding allocates nothing per record or datagram once its two buffers
//! (one being filled, one handed out) have grown to the MTU. Decoding
//! appends to a caller's vector ([`Decoder::decode_into`]) or a new one.

use std::collections::HashMap;

use crate::auth::{ExporterName, Key, MAX_NAME_LEN, TAG_LEN};
use crate::codec::{self, State, MAX_RECORD_LEN};
use crate::record::HeaderRecord;
use crate::varint::Reader;
use crate::{Fault, HeadersError};

/// The datagram magic, "CLHR".
pub const MAGIC: u32 = 0x434c_4852;
/// The layout version this crate writes and reads.
pub const VERSION: u8 = 2;
/// Bytes of the datagram header before the exporter's name.
pub const HEADER_LEN: usize = 49;
/// Flag: the datagram ends with a [`TAG_LEN`]-byte HMAC-SHA256 tag.
pub const FLAG_TAG: u16 = 1;
/// Default datagram size (UDP payload), see the module doc.
pub const DEFAULT_MTU: usize = 1400;
/// The smallest MTU: the longest header, a tag and one record of the largest size.
pub const MIN_MTU: usize = HEADER_LEN + MAX_NAME_LEN + TAG_LEN + MAX_RECORD_LEN;
/// The largest MTU: the 16-bit length field (and a UDP payload over IPv4).
pub const MAX_MTU: usize = 65_507;
/// Streams a [`Decoder`] tracks at most: each costs memory, and without a
/// key anyone could make new ones (new names or sessions) at will.
pub const MAX_STREAMS: usize = 4096;
/// A jump in a stream's sequence numbers beyond this many datagrams (about
/// 100 million headers) is not believed to be loss: it is counted as a
/// reset ([`Arrival::Reset`]) and the stream goes on from there.
pub const MAX_GAP: u64 = 1 << 20;

/// Which stream a datagram belongs to (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct StreamId {
    pub exporter: ExporterName,
    pub worker: u32,
    pub session: u64,
}

/// The datagram header, as written and as decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DatagramHeader {
    pub stream: StreamId,
    pub sequence: u64,
    pub record_sequence: u64,
    pub first_ts_ns: u64,
    pub count: u16,
    pub length: u16,
    /// The datagram carries a tag (it was verified if the decoder has a key).
    pub tagged: bool,
}

impl DatagramHeader {
    /// Bytes of this header: the fixed part and the name.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.stream.exporter.as_bytes().len()
    }

    /// Writes the header into `out`, exactly [`DatagramHeader::header_len`] bytes.
    fn write(&self, out: &mut [u8]) {
        let name = self.stream.exporter.as_bytes();
        out[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        out[4] = VERSION;
        // At most 49 + 64: fits a byte.
        out[5] = self.header_len() as u8;
        out[6..8].copy_from_slice(&self.count.to_be_bytes());
        out[8..10].copy_from_slice(&self.length.to_be_bytes());
        let flags = if self.tagged { FLAG_TAG } else { 0 };
        out[10..12].copy_from_slice(&flags.to_be_bytes());
        out[12..16].copy_from_slice(&self.stream.worker.to_be_bytes());
        out[16..24].copy_from_slice(&self.stream.session.to_be_bytes());
        out[24..32].copy_from_slice(&self.sequence.to_be_bytes());
        out[32..40].copy_from_slice(&self.record_sequence.to_be_bytes());
        out[40..48].copy_from_slice(&self.first_ts_ns.to_be_bytes());
        out[48] = name.len() as u8;
        out[49..49 + name.len()].copy_from_slice(name);
    }

    /// Reads and checks the header; returns it and where records start.
    /// Does not check the tag ([`Decoder`] does, before this).
    pub fn parse(d: &[u8]) -> Result<(Self, usize), HeadersError> {
        let (length, flags) = Self::frame(d)?;
        let short = |_| HeadersError::ShortHeader { len: d.len() };
        let mut r = Reader::new(d, 5);
        let header_len = r.u8().map_err(short)?;
        let count = r.be16().map_err(short)?;
        r.pos = 12;
        let worker = r.be32().map_err(short)?;
        let session = r.be64().map_err(short)?;
        let sequence = r.be64().map_err(short)?;
        let record_sequence = r.be64().map_err(short)?;
        let first_ts_ns = r.be64().map_err(short)?;
        let name_len = usize::from(r.u8().map_err(short)?);
        let tagged = flags & FLAG_TAG != 0;
        let body_end = d.len() - if tagged { TAG_LEN } else { 0 };
        let hl = usize::from(header_len);
        if hl < HEADER_LEN + name_len || hl > body_end {
            return Err(HeadersError::HeaderLen(header_len));
        }
        let name = r.bytes(name_len).map_err(short)?;
        let exporter = ExporterName::from_bytes(name)
            .ok_or_else(|| HeadersError::Name(String::from_utf8_lossy(name).escape_default().to_string()))?;
        let h = DatagramHeader {
            stream: StreamId {
                exporter,
                worker,
                session,
            },
            sequence,
            record_sequence,
            first_ts_ns,
            count,
            length,
            tagged,
        };
        // Every record takes at least three bytes: refuse an absurd count
        // before decoding anything.
        let room = body_end - hl;
        if usize::from(count) * 3 > room {
            return Err(HeadersError::Count { count, bytes: room });
        }
        Ok((h, hl))
    }

    /// The checks needed before the tag can be found: magic, version,
    /// length and flags. Gives the length field and the flags.
    fn frame(d: &[u8]) -> Result<(u16, u16), HeadersError> {
        let short = |_| HeadersError::ShortHeader { len: d.len() };
        // The magic and version are read before the length is checked, so
        // that short junk is refused as not ours and an old exporter's
        // datagram as another version, whatever their lengths.
        let n = d.len().min(4);
        if d[..n] != MAGIC.to_be_bytes()[..n] {
            let mut m = [0u8; 4];
            m[..n].copy_from_slice(&d[..n]);
            return Err(HeadersError::BadMagic {
                found: u32::from_be_bytes(m),
            });
        }
        if let Some(&v) = d.get(4) {
            if v != VERSION {
                return Err(HeadersError::Version(v));
            }
        }
        if d.len() < HEADER_LEN + 1 {
            return Err(HeadersError::ShortHeader { len: d.len() });
        }
        let mut r = Reader::new(d, 8);
        let length = r.be16().map_err(short)?;
        if usize::from(length) != d.len() {
            return Err(HeadersError::Length {
                field: length,
                actual: d.len(),
            });
        }
        let flags = r.be16().map_err(short)?;
        if flags & !FLAG_TAG != 0 {
            return Err(HeadersError::Reserved(flags));
        }
        if flags & FLAG_TAG != 0 && d.len() < HEADER_LEN + 1 + TAG_LEN {
            return Err(HeadersError::ShortHeader { len: d.len() });
        }
        Ok((length, flags))
    }
}

/// How an [`Encoder`] packs datagrams.
#[derive(Clone, Debug)]
pub struct EncoderConfig {
    /// The exporter's name, in every datagram.
    pub exporter: ExporterName,
    /// The exporter's worker index, in every datagram.
    pub worker: u32,
    /// The stream's session, in every datagram: draw it at random when the
    /// stream starts (see the module doc).
    pub session: u64,
    /// Largest datagram (UDP payload) in bytes, [`MIN_MTU`]..=[`MAX_MTU`].
    pub mtu: usize,
    /// Tag every datagram with this key (`None`: untagged datagrams, which
    /// a collector takes only when run `--insecure`).
    pub key: Option<Key>,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        EncoderConfig {
            exporter: ExporterName::default(),
            worker: 0,
            session: 0,
            mtu: DEFAULT_MTU,
            key: None,
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
/// Single-threaded; one per stream (one name, worker, session and sequence).
#[derive(Debug)]
pub struct Encoder {
    config: EncoderConfig,
    state: State,
    /// The datagram being filled: header space, then records.
    cur: Vec<u8>,
    cur_header: DatagramHeader,
    /// Where records may end: the MTU less the tag, if any.
    room: usize,
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
        let room = config.mtu - if config.key.is_some() { TAG_LEN } else { 0 };
        Ok(Encoder {
            cur: Vec::with_capacity(config.mtu),
            done: Vec::with_capacity(config.mtu),
            room,
            config,
            state: State::default(),
            cur_header: DatagramHeader::default(),
            next_sequence: 0,
            stats: EncoderStats::default(),
        })
    }

    pub fn config(&self) -> &EncoderConfig {
        &self.config
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
        let full = self.cur.len() + len > self.room || self.cur_header.count == u16::MAX;
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
        self.cur_header = DatagramHeader {
            stream: StreamId {
                exporter: self.config.exporter,
                worker: self.config.worker,
                session: self.config.session,
            },
            sequence: self.next_sequence,
            record_sequence: self.stats.records,
            first_ts_ns,
            count: 0,
            length: 0,
            tagged: self.config.key.is_some(),
        };
        self.cur.clear();
        self.cur.resize(self.cur_header.header_len(), 0);
        self.state.reset(first_ts_ns);
    }

    /// Moves the current datagram, header filled in and tagged, to `done`.
    fn finish(&mut self) {
        let tag_len = if self.config.key.is_some() { TAG_LEN } else { 0 };
        // The MTU bounds the length to MAX_MTU, which fits 16 bits.
        self.cur_header.length = u16::try_from(self.cur.len() + tag_len).unwrap_or(u16::MAX);
        let hl = self.cur_header.header_len();
        self.cur_header.write(&mut self.cur[..hl]);
        if let Some(key) = &self.config.key {
            let tag = key.tag(&self.cur);
            self.cur.extend_from_slice(&tag);
        }
        std::mem::swap(&mut self.cur, &mut self.done);
        self.cur.clear();
        self.cur_header.count = 0;
        self.next_sequence += 1;
        self.stats.datagrams += 1;
        self.stats.bytes_out += self.done.len() as u64;
    }
}

/// Decodes one datagram on its own (no sequence tracking, and **no
/// authentication**: a tag is skipped unchecked), appending its records to
/// `out`; on error `out` is left as it was. For tools and tests; a
/// collector uses a [`Decoder`].
pub fn decode_datagram(d: &[u8], out: &mut Vec<HeaderRecord>) -> Result<DatagramHeader, HeadersError> {
    decode_with(&mut State::default(), d, out, &Auth::Insecure(None))
}

/// Which datagrams a [`Decoder`] believes.
#[derive(Clone, Debug)]
pub enum Auth {
    /// Only datagrams with a valid tag of this key.
    Key(Key),
    /// Any datagram (`--insecure`); tagged ones are still checked against
    /// the key, if one is given, so that a key holder's stream cannot be
    /// imitated by one that tags with another key.
    Insecure(Option<Key>),
}

fn decode_with(
    state: &mut State,
    d: &[u8],
    out: &mut Vec<HeaderRecord>,
    auth: &Auth,
) -> Result<DatagramHeader, HeadersError> {
    let (_, flags) = DatagramHeader::frame(d)?;
    let tagged = flags & FLAG_TAG != 0;
    // The tag first: nothing of a datagram no key holder wrote is believed.
    let key = match auth {
        Auth::Key(k) => Some(k),
        Auth::Insecure(k) => k.as_ref(),
    };
    let body = if tagged {
        // `frame` checked that the datagram holds a header and a tag.
        let (body, tag) = d.split_at(d.len() - TAG_LEN);
        if let Some(k) = key {
            if !k.verify(body, tag) {
                return Err(HeadersError::BadTag);
            }
        }
        body
    } else {
        if matches!(auth, Auth::Key(_)) {
            return Err(HeadersError::Unauthenticated);
        }
        d
    };
    let (h, start) = DatagramHeader::parse(d)?;
    state.reset(h.first_ts_ns);
    let mark = out.len();
    let mut r = Reader::new(body, start);
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

/// Where a datagram stands in its stream's sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// The first datagram seen of this stream.
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
    /// More than [`MAX_GAP`] datagrams away from the newest, either way
    /// (`jump` is the signed distance from the one expected): no exporter
    /// loses or reorders that much, so it is counted as an anomaly (a
    /// forged or corrupted sequence number, an exporter's bug), not as
    /// loss, and the stream goes on from it.
    Reset { jump: i128 },
}

/// How many datagrams behind the newest a decoder tells late from duplicate.
pub const WINDOW: u64 = 64;

/// What a [`Decoder`] saw of one stream.
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
    /// Implausible jumps ([`Arrival::Reset`]).
    pub resets: u64,
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

/// Decodes datagrams from any number of exporters, tracking each stream's
/// sequence. Single-threaded; one per collector socket.
#[derive(Debug)]
pub struct Decoder {
    state: State,
    auth: Auth,
    streams: HashMap<StreamId, Track>,
    errors: u64,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    /// A decoder that believes any datagram (as `--insecure`): for tools
    /// and tests. A collector facing a network uses [`Decoder::with_auth`].
    pub fn new() -> Self {
        Decoder::with_auth(Auth::Insecure(None))
    }

    pub fn with_auth(auth: Auth) -> Self {
        Decoder {
            state: State::default(),
            auth,
            streams: HashMap::new(),
            errors: 0,
        }
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
    /// on error), and places it in its stream's sequence.
    pub fn decode_into(
        &mut self,
        d: &[u8],
        out: &mut Vec<HeaderRecord>,
    ) -> Result<(DatagramHeader, Arrival), HeadersError> {
        let mark = out.len();
        let placed = decode_with(&mut self.state, d, out, &self.auth).and_then(|h| {
            if !self.streams.contains_key(&h.stream) && self.streams.len() >= MAX_STREAMS {
                return Err(HeadersError::Streams { max: MAX_STREAMS });
            }
            Ok(h)
        });
        match placed {
            Ok(h) => {
                let arrival = self.place(&h);
                Ok((h, arrival))
            }
            Err(e) => {
                out.truncate(mark);
                self.errors += 1;
                Err(e)
            }
        }
    }

    fn place(&mut self, h: &DatagramHeader) -> Arrival {
        let count = u64::from(h.count);
        let end_record = h.record_sequence.wrapping_add(count);
        let s = h.sequence;
        let t = self.streams.entry(h.stream).or_insert(Track {
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
        let jump = i128::from(s) - i128::from(t.next);
        if jump.unsigned_abs() > u128::from(MAX_GAP) {
            // Not loss: start over from this datagram (see Arrival::Reset).
            (t.next, t.next_record, t.seen) = (s.wrapping_add(1), end_record, 1);
            t.stats.resets += 1;
            return Arrival::Reset { jump };
        }
        if s >= t.next {
            let gap = s - t.next;
            // A record sequence that ran further than the datagrams between
            // could hold is not believed either: those records are not
            // counted lost (the datagrams are).
            let lost_records = h
                .record_sequence
                .saturating_sub(t.next_record)
                .min(gap.saturating_mul(u64::from(u16::MAX)));
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

    /// What was seen of one stream.
    pub fn stream(&self, id: &StreamId) -> Option<ExporterStats> {
        self.streams.get(id).map(|t| t.stats)
    }

    /// Every stream seen, by name, worker and session.
    pub fn streams(&self) -> impl Iterator<Item = (StreamId, ExporterStats)> + '_ {
        self.streams.iter().map(|(&id, t)| (id, t.stats))
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
            wire_len: 66,
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
        d.extend([2, 51, 0, 2, 0, 94, 0, 0]); // version, header length, count 2, length 94, flags
        d.extend(7u32.to_be_bytes()); // worker
        d.extend(SESSION.to_be_bytes()); // session
        d.extend(0u64.to_be_bytes()); // sequence
        d.extend(0u64.to_be_bytes()); // record sequence
        d.extend(ts.to_be_bytes()); // first ts
        d.extend([2, b'h', b'1']); // the name, "h1"
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

    const SESSION: u64 = 0x1122_3344_5566_7788;

    fn config(key: Option<Key>) -> EncoderConfig {
        EncoderConfig {
            exporter: ExporterName::new("h1").unwrap(),
            worker: 7,
            session: SESSION,
            mtu: DEFAULT_MTU,
            key,
        }
    }

    fn key(b: u8) -> Key {
        Key::new(&[b; 32]).unwrap()
    }

    #[test]
    fn emit_matches_the_layout() {
        let (recs, want) = fixture();
        let mut enc = Encoder::new(config(None)).unwrap();
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
                stream: StreamId {
                    exporter: ExporterName::new("h1").unwrap(),
                    worker: 7,
                    session: SESSION,
                },
                sequence: 0,
                record_sequence: 0,
                first_ts_ns: recs[0].ts_ns,
                count: 2,
                length: 94,
                tagged: false,
            }
        );
    }

    #[test]
    fn a_tag_is_the_hmac_of_the_rest() {
        let (recs, plain) = fixture();
        let mut enc = Encoder::new(config(Some(key(1)))).unwrap();
        assert!(recs.iter().all(|r| enc.push(r).is_none()));
        let d = enc.flush().unwrap().to_vec();
        assert_eq!(d.len(), plain.len() + TAG_LEN);
        // The same bytes but the length and the flag, then the tag.
        let mut body = plain.clone();
        body[8..10].copy_from_slice(&(d.len() as u16).to_be_bytes());
        body[11] = 1;
        assert_eq!(&d[..plain.len()], &body[..]);
        assert_eq!(&d[plain.len()..], &key(1).tag(&body)[..]);
        // The right key decodes it; the stateless decoder skips the tag.
        let mut dec = Decoder::with_auth(Auth::Key(key(1)));
        let got = dec.decode(&d).unwrap();
        assert_eq!((got.records, got.header.tagged), (recs.clone(), true));
        let mut out = Vec::new();
        assert!(decode_datagram(&d, &mut out).is_ok());
        assert_eq!(out, recs);
    }

    #[test]
    fn a_wrong_or_missing_tag_is_refused() {
        let (recs, plain) = fixture();
        let mut enc = Encoder::new(config(Some(key(1)))).unwrap();
        assert!(recs.iter().all(|r| enc.push(r).is_none()));
        let d = enc.flush().unwrap().to_vec();
        let mut dec = Decoder::with_auth(Auth::Key(key(2)));
        let mut out = Vec::new();
        assert_eq!(dec.decode_into(&d, &mut out), Err(HeadersError::BadTag));
        assert_eq!(
            dec.decode_into(&plain, &mut out),
            Err(HeadersError::Unauthenticated)
        );
        // One bit changed anywhere, the tag included, is refused.
        let mut dec = Decoder::with_auth(Auth::Key(key(1)));
        for at in [0, 12, 20, 60, d.len() - 1] {
            let mut bad = d.clone();
            bad[at] ^= 0x10;
            assert!(dec.decode_into(&bad, &mut out).is_err(), "byte {at}");
        }
        assert!(out.is_empty());
        assert_eq!(dec.errors(), 5);
        assert_eq!(dec.streams().count(), 0, "nothing refused makes a stream");
        assert_eq!(HeadersError::BadTag.reason(), "bad_tag");
        assert!(HeadersError::Unauthenticated.is_authentication());
        // Insecure: untagged taken; tagged checked when a key is given.
        let mut dec = Decoder::with_auth(Auth::Insecure(Some(key(2))));
        assert!(dec.decode_into(&plain, &mut out).is_ok());
        assert_eq!(dec.decode_into(&d, &mut out), Err(HeadersError::BadTag));
        assert!(Decoder::new().decode(&d).is_ok());
    }

    #[test]
    fn other_versions_are_refused_by_version() {
        let (_, d) = fixture();
        for v in [0u8, 1, 3, 255] {
            let mut bad = d.clone();
            bad[4] = v;
            let e = Decoder::new().decode(&bad).unwrap_err();
            assert_eq!(e, HeadersError::Version(v));
            assert_eq!(e.reason(), "version");
        }
        // A version 1 datagram (40-byte header) is refused as such.
        let mut v1 = b"CLHR".to_vec();
        v1.extend([1, 40, 0, 0, 0, 40, 0, 0]);
        v1.resize(40, 0);
        assert_eq!(Decoder::new().decode(&v1), Err(HeadersError::Version(1)));
        assert_eq!(Decoder::new().decode(&v1[..6]), Err(HeadersError::Version(1)));
        // Short junk and bad names are errors, never panics.
        for n in 0..d.len() {
            let _ = Decoder::new().decode(&d[..n]);
        }
        let mut bad = d.clone();
        bad[HEADER_LEN] = b' ';
        assert!(matches!(Decoder::new().decode(&bad), Err(HeadersError::Name(_))));
    }

    #[test]
    fn streams_are_told_apart_by_name_worker_and_session() {
        let (recs, _) = fixture();
        let mut dec = Decoder::new();
        let mut seen = Vec::new();
        for (name, worker, session) in [("a", 0, 1), ("b", 0, 1), ("a", 1, 1), ("a", 0, 2)] {
            let mut enc = Encoder::new(EncoderConfig {
                exporter: ExporterName::new(name).unwrap(),
                worker,
                session,
                ..EncoderConfig::default()
            })
            .unwrap();
            for _ in 0..3 {
                enc.push(&recs[0]);
                let d = enc.flush().unwrap().to_vec();
                seen.push(dec.decode(&d).unwrap().arrival);
            }
        }
        // Each stream starts First and goes on InOrder: no collision, no loss.
        let want = [Arrival::First, Arrival::InOrder, Arrival::InOrder];
        assert_eq!(seen, want.repeat(4));
        assert_eq!(dec.streams().count(), 4);
        assert!(dec
            .streams()
            .all(|(_, s)| s.datagrams == 3 && s.lost_datagrams == 0));
    }

    #[test]
    fn record_faults_are_named() {
        let (_, d) = fixture();
        let mut out = Vec::new();
        let rs = HEADER_LEN + 2; // records start after the name "h1"
        let at = rs + 37; // the answer's ctrl byte
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
        bad[rs] = 0x01; // the first record refers to an empty history
        assert_eq!(fault(&bad), (0, Fault::Reference { at: 1, history: 0 }));
        let mut bad = d.clone();
        bad[rs + 3] = 0x12; // bitmap bits 15 and 18 (17 is the wire length's)
        assert_eq!(fault(&bad).1, Fault::Bitmap(0x4bfff));
        let mut bad = d.clone();
        bad[rs + 5] = 0x20; // misc without ports: ports given while absent
        assert_eq!(fault(&bad), (0, Fault::Absent("ports")));
        let mut bad = d.clone();
        bad[rs + 7] = 0x05; // src shares 5 bytes of a 4-byte address
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
            // The forged sequence number: an anomaly, not 2^51 lost.
            (
                h(1 << 51, 0, 1),
                Arrival::Reset {
                    jump: (1i128 << 51) - i128::from(16 + WINDOW),
                },
            ),
            // The real stream goes on, and is written (not "too old").
            (
                h(16 + WINDOW, 501, 1),
                Arrival::Reset {
                    jump: -(1i128 << 51) - 1 + i128::from(16 + WINDOW),
                },
            ),
            (h(17 + WINDOW, 502, 1), Arrival::InOrder),
            // A gap right at the bound is still loss; one past it is not.
            (
                h(17 + WINDOW + MAX_GAP, 602, 1),
                Arrival::Gap {
                    datagrams: MAX_GAP - 1,
                    records: 99,
                },
            ),
            (
                h(19 + WINDOW + 2 * MAX_GAP, 700, 1),
                Arrival::Reset {
                    jump: i128::from(MAX_GAP) + 1,
                },
            ),
            (
                h(u64::MAX, 0, 1),
                Arrival::Reset {
                    jump: i128::from(u64::MAX - 20 - WINDOW - 2 * MAX_GAP),
                },
            ),
        ];
        for (i, (hd, want)) in steps.iter().enumerate() {
            assert_eq!(dec.place(hd), *want, "step {i}");
        }
        let s = dec.stream(&StreamId::default()).unwrap();
        assert_eq!((s.late, s.duplicates, s.too_old, s.resets), (1, 2, 1, 4));
        assert_eq!(s.lost_datagrams, 1 + WINDOW + MAX_GAP - 1);
    }

    #[test]
    fn record_sequences_beyond_the_datagrams_are_not_believed() {
        let mut dec = Decoder::new();
        let h = |sequence, record_sequence| DatagramHeader {
            sequence,
            record_sequence,
            count: 1,
            ..DatagramHeader::default()
        };
        dec.place(&h(0, 0));
        // One datagram missing cannot hold 2^60 records.
        assert_eq!(
            dec.place(&h(2, 1 << 60)),
            Arrival::Gap {
                datagrams: 1,
                records: u64::from(u16::MAX)
            }
        );
    }
}
