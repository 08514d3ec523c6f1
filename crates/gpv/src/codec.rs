//! The GPV stream format: a file (or socket stream) of GPVs.
//!
//! ```text
//! file   = magic(89 'G' 'P' 'V') version(u8 = 1) record*
//! record = varint(body length, 1..=MAX_RECORD_LEN) body
//! body   = key-flags(u8) proto(u8) src(4|16) dst(4|16)
//!          [src-port(u16 LE) dst-port(u16 LE)]  if HAS_PORTS
//!          [vlan(u16 LE)]                       if HAS_VLAN
//!          [vni(u32 LE)]                        if HAS_VNI
//!          varint(interface) varint(start_ns) cause(u8) varint(count)
//!          packet{count}
//! packet = tag(u8: bit 0 = TCP seq/ack follow) varint(zigzag(delta - previous delta))
//!          varint(size) tcp-flags(u8) [varint(zigzag(seq - previous seq))
//!          varint(zigzag(ack - previous ack))]  (wrapping 32-bit differences)
//! ```
//!
//! Varints are LEB128 (7 bits a byte, low first). Deltas, sequence and
//! acknowledgement numbers are stored as differences from the previous
//! packet's, so a GPV of a steady flow costs about 6 bytes a packet
//! without TCP numbers and 10 with them; the key is written once per GPV.
//! The length prefix lets a reader skip or bound a record before decoding
//! it, and lets the next version add trailing fields.
//!
//! # Damaged input
//!
//! [`GpvReader`] never panics and never allocates more than
//! [`MAX_RECORD_LEN`] for a record: every field is range-checked (key
//! flags, VLAN, interface, cause, each delta within 32 bits and the last
//! packet time within 64, size within 16 bits), a record must use exactly
//! its length, and the packet count is bounded by the length before the
//! vector is allocated. End of input between records ends the stream; end
//! of input inside one is [`GpvError::Truncated`]; anything else wrong is
//! [`GpvError::Corrupt`] with the record's byte offset. After an error the
//! reader yields nothing more.
//!
//! The writer refuses GPVs that would not read back equal
//! ([`GpvError::Inconsistent`]): a count that is not the vector's length, or
//! a key outside `FlowKey`'s layout (bytes of an absent field not zero).

use std::io::{self, Read, Write};

use clarion_wire::FlowKey;

use crate::gpv::{EvictCause, Gpv, GpvHeader, PacketFeatures, TcpSeq};
use crate::GpvError;

/// The file's first four bytes (a non-ASCII first byte, as PNG's, so a text
/// file is never mistaken for one).
pub const MAGIC: [u8; 4] = [0x89, b'G', b'P', b'V'];
/// The format version this build writes and reads.
pub const VERSION: u8 = 1;
/// The largest record body accepted (16 MiB, about 2 million packets).
pub const MAX_RECORD_LEN: u64 = 16 << 20;

/// The key flags a record may carry. `HAS_VNI` came after the first
/// files: a reader from before it refuses a tunnelled flow's record as
/// "unknown flow key flags" rather than misreading it.
const KEY_FLAGS: u8 = FlowKey::IPV6 | FlowKey::HAS_PORTS | FlowKey::HAS_VLAN | FlowKey::HAS_VNI;
const TAG_TCP: u8 = 0x01;
/// Fewest bytes a packet takes: tag, delta, size, flags.
const MIN_PACKET_LEN: usize = 4;

/// Writes a GPV stream. Buffer the sink (`BufWriter`) for files: each GPV is
/// two `write_all` calls.
pub struct GpvWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    written: u64,
}

impl<W: Write> GpvWriter<W> {
    /// Writes the file header.
    pub fn new(mut out: W) -> Result<GpvWriter<W>, GpvError> {
        out.write_all(&MAGIC)?;
        out.write_all(&[VERSION])?;
        Ok(GpvWriter {
            out,
            buf: Vec::new(),
            written: 0,
        })
    }

    pub fn write(&mut self, gpv: &Gpv) -> Result<(), GpvError> {
        self.buf.clear();
        encode_gpv(gpv, &mut self.buf)?;
        let mut len = Vec::with_capacity(5);
        put_varint(&mut len, self.buf.len() as u64);
        self.out.write_all(&len)?;
        self.out.write_all(&self.buf)?;
        self.written += 1;
        Ok(())
    }

    /// GPVs written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The sink, to flush it.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Flushes and returns the sink.
    pub fn finish(mut self) -> Result<W, GpvError> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Reads a GPV stream: an iterator of GPVs or the first error. Buffer the
/// source (`BufReader`) for files: the length prefix is read a byte at a time.
pub struct GpvReader<R: Read> {
    input: R,
    offset: u64,
    buf: Vec<u8>,
    done: bool,
}

impl<R: Read> GpvReader<R> {
    /// Reads and checks the file header.
    pub fn new(mut input: R) -> Result<GpvReader<R>, GpvError> {
        let mut head = [0u8; 5];
        let got = read_full(&mut input, &mut head)?;
        if head[..got.min(4)] != MAGIC[..got.min(4)] {
            return Err(GpvError::BadMagic);
        }
        if got < head.len() {
            return Err(GpvError::Truncated {
                offset: 0,
                what: "the file header",
            });
        }
        if head[4] != VERSION {
            return Err(GpvError::UnsupportedVersion(head[4]));
        }
        Ok(GpvReader {
            input,
            offset: head.len() as u64,
            buf: Vec::new(),
            done: false,
        })
    }

    /// Byte offset of the next record.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn next_gpv(&mut self) -> Result<Option<Gpv>, GpvError> {
        let at = self.offset;
        let Some(len) = self.read_len(at)? else {
            return Ok(None);
        };
        if len == 0 {
            return Err(GpvError::Corrupt {
                offset: at,
                reason: "empty record",
            });
        }
        if len > MAX_RECORD_LEN {
            return Err(GpvError::RecordTooLarge {
                offset: at,
                len,
                max: MAX_RECORD_LEN,
            });
        }
        self.buf.clear();
        (&mut self.input).take(len).read_to_end(&mut self.buf)?;
        self.offset += self.buf.len() as u64;
        if (self.buf.len() as u64) < len {
            return Err(GpvError::Truncated {
                offset: at,
                what: "a record",
            });
        }
        decode_gpv(&self.buf).map(Some).map_err(|e| match e {
            GpvError::Corrupt { reason, .. } => GpvError::Corrupt { offset: at, reason },
            e => e,
        })
    }

    /// The record's length prefix, or `None` at a clean end of input.
    fn read_len(&mut self, at: u64) -> Result<Option<u64>, GpvError> {
        let mut value = 0u64;
        for i in 0..10 {
            let mut b = [0u8; 1];
            if read_full(&mut self.input, &mut b)? == 0 {
                return if i == 0 {
                    Ok(None)
                } else {
                    Err(GpvError::Truncated {
                        offset: at,
                        what: "a record's length",
                    })
                };
            }
            self.offset += 1;
            let bits = u64::from(b[0] & 0x7f);
            if i == 9 && b[0] > 1 {
                break;
            }
            value |= bits << (7 * i);
            if b[0] & 0x80 == 0 {
                return Ok(Some(value));
            }
        }
        Err(GpvError::Corrupt {
            offset: at,
            reason: "record length is not a 64-bit varint",
        })
    }
}

impl<R: Read> Iterator for GpvReader<R> {
    type Item = Result<Gpv, GpvError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_gpv() {
            Ok(Some(g)) => Some(Ok(g)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// Appends a GPV's record body (the format above, without the length).
pub fn encode_gpv(gpv: &Gpv, out: &mut Vec<u8>) -> Result<(), GpvError> {
    let h = &gpv.header;
    if h.packet_count as usize != gpv.packets.len() {
        return Err(GpvError::Inconsistent(
            "packet_count is not the number of packets",
        ));
    }
    let k = &h.key;
    let ip_len = if k.is_ipv6() { 16 } else { 4 };
    let canonical = k.flags & !KEY_FLAGS == 0
        && k.src_ip[ip_len..]
            .iter()
            .chain(&k.dst_ip[ip_len..])
            .all(|&b| b == 0)
        && (k.has_ports() || (k.src_port == 0 && k.dst_port == 0))
        && (if k.has_vlan() {
            k.vlan <= 0x0fff
        } else {
            k.vlan == 0
        })
        && (k.has_vni() || k.vni == 0);
    if !canonical {
        return Err(GpvError::Inconsistent("the flow key breaks FlowKey's layout"));
    }
    out.extend_from_slice(&[k.flags, k.proto]);
    out.extend_from_slice(&k.src_ip[..ip_len]);
    out.extend_from_slice(&k.dst_ip[..ip_len]);
    if k.has_ports() {
        out.extend_from_slice(&k.src_port.to_le_bytes());
        out.extend_from_slice(&k.dst_port.to_le_bytes());
    }
    if k.has_vlan() {
        out.extend_from_slice(&k.vlan.to_le_bytes());
    }
    if k.has_vni() {
        out.extend_from_slice(&k.vni.to_le_bytes());
    }
    put_varint(out, u64::from(h.interface));
    put_varint(out, h.start_ns);
    out.push(h.cause.code());
    put_varint(out, u64::from(h.packet_count));
    let (mut delta, mut seq, mut ack) = (0u32, 0u32, 0u32);
    for p in &gpv.packets {
        out.push(if p.tcp.is_some() { TAG_TCP } else { 0 });
        put_varint(out, zigzag(i64::from(p.delta) - i64::from(delta)));
        put_varint(out, u64::from(p.size));
        out.push(p.tcp_flags);
        if let Some(t) = p.tcp {
            put_varint(out, zigzag(i64::from(t.seq.wrapping_sub(seq) as i32)));
            put_varint(out, zigzag(i64::from(t.ack.wrapping_sub(ack) as i32)));
            (seq, ack) = (t.seq, t.ack);
        }
        delta = p.delta;
    }
    Ok(())
}

/// Decodes one record body (offsets in its errors are 0: the reader puts
/// in the record's).
pub fn decode_gpv(body: &[u8]) -> Result<Gpv, GpvError> {
    let mut c = Cursor { b: body, at: 0 };
    let corrupt = |reason| GpvError::Corrupt { offset: 0, reason };
    let flags = c.u8()?;
    if flags & !KEY_FLAGS != 0 {
        return Err(corrupt("unknown flow key flags"));
    }
    let mut key = FlowKey {
        flags,
        proto: c.u8()?,
        ..FlowKey::default()
    };
    let ip_len = if key.is_ipv6() { 16 } else { 4 };
    key.src_ip[..ip_len].copy_from_slice(c.bytes(ip_len)?);
    key.dst_ip[..ip_len].copy_from_slice(c.bytes(ip_len)?);
    if key.has_ports() {
        key.src_port = c.u16()?;
        key.dst_port = c.u16()?;
    }
    if key.has_vlan() {
        key.vlan = c.u16()?;
        if key.vlan > 0x0fff {
            return Err(corrupt("VLAN id over 12 bits"));
        }
    }
    if key.has_vni() {
        key.vni = c.u32()?;
    }
    let interface = u16::try_from(c.varint()?).map_err(|_| corrupt("interface over 16 bits"))?;
    let start_ns = c.varint()?;
    let cause = EvictCause::from_code(c.u8()?).ok_or(corrupt("unknown eviction cause"))?;
    let count = u32::try_from(c.varint()?).map_err(|_| corrupt("packet count over 32 bits"))?;
    if count as usize > c.left() / MIN_PACKET_LEN {
        return Err(corrupt("more packets than the record has bytes for"));
    }
    let mut packets = Vec::with_capacity(count as usize);
    let (mut delta, mut seq, mut ack) = (0u32, 0u32, 0u32);
    for _ in 0..count {
        let tag = c.u8()?;
        if tag & !TAG_TCP != 0 {
            return Err(corrupt("unknown packet tag bits"));
        }
        let d = i64::from(delta)
            .checked_add(unzigzag(c.varint()?))
            .and_then(|d| u32::try_from(d).ok())
            .ok_or(corrupt("packet delta outside 32 bits"))?;
        let size = u16::try_from(c.varint()?).map_err(|_| corrupt("packet size over 16 bits"))?;
        let tcp_flags = c.u8()?;
        let tcp = if tag & TAG_TCP != 0 {
            let mut diff = || {
                i32::try_from(unzigzag(c.varint()?))
                    .map_err(|_| corrupt("TCP number difference over 32 bits"))
            };
            seq = seq.wrapping_add(diff()? as u32);
            ack = ack.wrapping_add(diff()? as u32);
            Some(TcpSeq { seq, ack })
        } else {
            None
        };
        delta = d;
        packets.push(PacketFeatures {
            delta: d,
            size,
            tcp_flags,
            tcp,
        });
    }
    if c.left() != 0 {
        return Err(corrupt("bytes after the last packet"));
    }
    let last = packets.iter().map(|p| p.delta).max().unwrap_or(0);
    if start_ns.checked_add(u64::from(last)).is_none() {
        return Err(corrupt("packet time past the 64-bit clock"));
    }
    Ok(Gpv {
        header: GpvHeader {
            key,
            interface,
            start_ns,
            packet_count: count,
            cause,
        },
        packets,
    })
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> usize {
        self.b.len() - self.at
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], GpvError> {
        let s = self.b.get(self.at..self.at + n).ok_or(GpvError::Corrupt {
            offset: 0,
            reason: "record ends inside a field",
        })?;
        self.at += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, GpvError> {
        Ok(self.bytes(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, GpvError> {
        let b = self.bytes(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, GpvError> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn varint(&mut self) -> Result<u64, GpvError> {
        let mut value = 0u64;
        for i in 0..10 {
            let b = self.u8()?;
            if i == 9 && b > 1 {
                break;
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(GpvError::Corrupt {
            offset: 0,
            reason: "varint longer than 64 bits",
        })
    }
}
