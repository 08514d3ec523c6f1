//! Per-interface difference coding of header records (Trident's "Header
//! compression"; RFC 1144 and NetSight in spirit).
//!
//! # What?
//!
//! Packets seen on one interface look alike: the same few hosts, the same
//! conversations, sequence numbers that advance by a segment. Each record
//! is therefore sent as the difference from an earlier record of the same
//! interface in the same datagram: a bitmap of the fields that changed and
//! only those fields. The state is per datagram: it starts empty at every
//! datagram (so a lost datagram costs only its own records) and both ends
//! update it identically after every record.
//!
//! # State
//!
//! Per interface (in the order first seen in the datagram):
//!
//! - `prev_ts`: the interface's last timestamp; the datagram header's first
//!   timestamp before its first record.
//! - `history`: the interface's last [`HISTORY`] *conversations*, most
//!   recent first, each the last record of that conversation (either
//!   direction). A record whose flow key equals an entry's, or its reverse,
//!   replaces that entry and moves it to the front; any other record is
//!   inserted at the front, the oldest entry falling off when full.
//!
//! Trident compares with the interface's last packet only; keeping the last
//! sixteen conversations as candidate bases costs 16 key comparisons a
//! record and turns interleaved flows (the common case on a busy host)
//! back into runs, where the key is free and sequence numbers are deltas.
//!
//! Plus one datagram-wide value, `cur_if`, the interface of the previous
//! record (0 before the first).
//!
//! # Record layout
//!
//! ```text
//! +------+-----------+------------+-----------+---------------------+
//! | ctrl | interface | bitmap     | ts delta  | changed fields ...  |
//! | 1 B  | varint,   | LEB128,    | zigzag    | in the order of the |
//! |      | if IF bit | 1-3 B      | varint    | table below         |
//! +------+-----------+------------+-----------+---------------------+
//! ```
//!
//! `ctrl`: bits 0-3 `ref`, the base's index in the interface's history;
//! bit 4 `REV`, the base is taken reversed (addresses, ports, their family
//! bits, and seq/ack swapped); bit 5 `IF`, an interface (u16 varint)
//! follows and becomes `cur_if`, otherwise the record is on `cur_if`; bits
//! 6-7 are zero. With an empty history the base is the *zero record*
//! (every field 0, nothing present) and `ref` and `REV` must be 0.
//!
//! `ts delta`: `ts_ns - prev_ts` as a wrapping 64-bit difference, zigzag
//! coded, so clocks stepping back cost a byte, not ten.
//!
//! `bitmap`: bit *b* set means field *b* differs from the base and is sent.
//! Bits are numbered by how often they change on real traffic, so most
//! records need one byte. Bits above 17 must be zero.
//!
//! | bit | field        | encoding (wire order = row order by `pos`) | pos |
//! |-----|--------------|--------------------------------------------|-----|
//! | 0   | size         | varint (IP length)                         | 9   |
//! | 1   | seq          | see *sequence numbers*                     | 13  |
//! | 2   | ack          | see *sequence numbers*                     | 14  |
//! | 3   | tcp flags    | 1 B                                        | 16  |
//! | 4   | window       | 2 B big-endian                             | 15  |
//! | 5   | link extra   | zigzag varint of `captured_len - size`     | 11  |
//! | 6   | header bytes | zigzag varint of `size - volume`           | 10  |
//! | 7   | src port     | 2 B                                        | 5   |
//! | 8   | dst port     | 2 B                                        | 6   |
//! | 9   | src address  | see *addresses*                            | 3   |
//! | 10  | dst address  | see *addresses*                            | 4   |
//! | 11  | ttl          | 1 B                                        | 8   |
//! | 12  | misc         | 1 B, see below                             | 1   |
//! | 13  | proto        | 1 B                                        | 2   |
//! | 14  | vlan         | 2 B                                        | 7   |
//! | 15  | sample ratio | varint                                     | 12  |
//! | 16  | tcp options  | 1 B presence (bit 0 wscale, bit 1 mss), then wscale 1 B, mss 2 B if present | 17 |
//! | 17  | wire extra   | zigzag varint of `wire_len - captured_len` (version 2) | 11½: after link extra |
//!
//! `misc`: bit 0 src is IPv6, bit 1 dst is IPv6, bit 2 ports present, bit 3
//! VLAN present, bit 4 later fragment, bit 5 TCP present, bits 6-7 ECN.
//! Absent fields are 0 in the state, and a record saying a field is absent
//! while giving it a nonzero value is refused.
//!
//! *Addresses*: one byte, bit 7 `X` (share a prefix with the base's
//! *other* address instead of the same one), bits 0-4 `n` (bytes of prefix
//! shared, at most the address length), bits 5-6 zero; then the remaining
//! `4 - n` or `16 - n` bytes. A host in the same /24 costs 2 bytes, a
//! client that was the last packet's server 1.
//!
//! *Sequence numbers*: when the record and its base are the same
//! conversation (equal flow keys after `REV`) and both carry TCP, a zigzag
//! varint of the wrapping 32-bit difference (a segment later: 2 bytes);
//! otherwise the 4 raw bytes, big-endian (an unrelated base's numbers are
//! no better than zero).
//!
//! # Sizes
//!
//! A record takes at least 3 bytes (ctrl, bitmap, ts delta) and at most
//! [`MAX_RECORD_LEN`]; on the shared captures the mean is 12-17 bytes
//! against Trident's 22-49 (`docs/performance.md`, "Header compression").
//!
//! # Cost
//!
//! Encoding: one pass over at most 16 history keys, one comparison per
//! field, a memmove of at most 15 entries. No allocation: the interface
//! table grows once to the number of interfaces a datagram carries.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::record::{HeaderRecord, TcpHeader};
use crate::varint::{unzigzag, zigzag, ReadFault, Reader, Writer};
use crate::Fault;

/// Conversations remembered per interface (fits `ref`'s four bits).
pub const HISTORY: usize = 16;

/// The longest a record can be: ctrl 1, interface 3, bitmap 3, ts 10,
/// misc 1, proto 1, addresses 2 × 17, ports 4, vlan 2, ttl 1, size 5,
/// header bytes 5, link extra 5, wire extra 5, ratio 5, seq 5, ack 5,
/// window 2, flags 1, options 4.
pub const MAX_RECORD_LEN: usize = 107;

mod bit {
    pub const SIZE: u32 = 1 << 0;
    pub const SEQ: u32 = 1 << 1;
    pub const ACK: u32 = 1 << 2;
    pub const TFLAGS: u32 = 1 << 3;
    pub const WINDOW: u32 = 1 << 4;
    pub const EXTRA: u32 = 1 << 5;
    pub const HDR: u32 = 1 << 6;
    pub const SPORT: u32 = 1 << 7;
    pub const DPORT: u32 = 1 << 8;
    pub const SRC: u32 = 1 << 9;
    pub const DST: u32 = 1 << 10;
    pub const TTL: u32 = 1 << 11;
    pub const MISC: u32 = 1 << 12;
    pub const PROTO: u32 = 1 << 13;
    pub const VLAN: u32 = 1 << 14;
    pub const RATIO: u32 = 1 << 15;
    pub const OPTS: u32 = 1 << 16;
    pub const WIRE: u32 = 1 << 17;
    pub const ALL: u32 = (1 << 18) - 1;
}

mod misc {
    pub const SRC_V6: u8 = 0x01;
    pub const DST_V6: u8 = 0x02;
    pub const PORTS: u8 = 0x04;
    pub const VLAN: u8 = 0x08;
    pub const LATER_FRAG: u8 = 0x10;
    pub const TCP: u8 = 0x20;
    pub const ECN_SHIFT: u8 = 6;
}

mod ctrl {
    pub const REF: u8 = 0x0f;
    pub const REV: u8 = 0x10;
    pub const IF: u8 = 0x20;
    pub const RESERVED: u8 = 0xc0;
}

/// A record's fields as the codec compares them: absent fields are zero,
/// lengths are differences that stay constant along a conversation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Flat {
    misc: u8,
    proto: u8,
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    vlan: u16,
    ttl: u8,
    size: u32,
    /// `size - volume`.
    hdr: i64,
    /// `captured_len - size`.
    extra: i64,
    /// `wire_len - captured_len` (0 unless the capture cut the frame).
    wire: i64,
    ratio: u32,
    seq: u32,
    ack: u32,
    window: u16,
    tflags: u8,
    /// Bit 0 wscale present, bit 1 mss present.
    opts: u8,
    wscale: u8,
    mss: u16,
}

impl Flat {
    fn of(r: &HeaderRecord) -> Self {
        let (src, src6) = addr_bytes(r.src);
        let (dst, dst6) = addr_bytes(r.dst);
        let mut m = (r.ecn & 3) << misc::ECN_SHIFT;
        m |= if src6 { misc::SRC_V6 } else { 0 };
        m |= if dst6 { misc::DST_V6 } else { 0 };
        m |= if r.ports.is_some() { misc::PORTS } else { 0 };
        m |= if r.vlan.is_some() { misc::VLAN } else { 0 };
        m |= if r.later_fragment { misc::LATER_FRAG } else { 0 };
        m |= if r.tcp.is_some() { misc::TCP } else { 0 };
        let (sport, dport) = r.ports.unwrap_or((0, 0));
        let t = r.tcp.unwrap_or_default();
        Flat {
            misc: m,
            proto: r.proto,
            src,
            dst,
            sport,
            dport,
            vlan: r.vlan.unwrap_or(0),
            ttl: r.ttl,
            size: r.size,
            hdr: i64::from(r.size) - i64::from(r.volume),
            extra: i64::from(r.captured_len) - i64::from(r.size),
            wire: i64::from(r.wire_len) - i64::from(r.captured_len),
            ratio: r.sample_ratio,
            seq: t.seq,
            ack: t.ack,
            window: t.window,
            tflags: t.flags,
            opts: u8::from(t.wscale.is_some()) | u8::from(t.mss.is_some()) << 1,
            wscale: t.wscale.unwrap_or(0),
            mss: t.mss.unwrap_or(0),
        }
    }

    /// The record, or what is inconsistent about it.
    fn record(&self, ts_ns: u64, interface: u16) -> Result<HeaderRecord, Fault> {
        let m = self.misc;
        let ports = m & misc::PORTS != 0;
        let vlan = m & misc::VLAN != 0;
        let tcp = m & misc::TCP != 0;
        if !ports && (self.sport | self.dport) != 0 {
            return Err(Fault::Absent("ports"));
        }
        if !vlan && self.vlan != 0 {
            return Err(Fault::Absent("vlan"));
        }
        let tcp_zero = self.seq == 0
            && self.ack == 0
            && self.window == 0
            && self.tflags == 0
            && self.opts == 0
            && self.wscale == 0
            && self.mss == 0;
        if !tcp && !tcp_zero {
            return Err(Fault::Absent("tcp"));
        }
        if (self.opts & 1 == 0 && self.wscale != 0) || (self.opts & 2 == 0 && self.mss != 0) {
            return Err(Fault::Absent("tcp options"));
        }
        let src = to_addr(&self.src, m & misc::SRC_V6 != 0).ok_or(Fault::Absent("ipv4 address tail"))?;
        let dst = to_addr(&self.dst, m & misc::DST_V6 != 0).ok_or(Fault::Absent("ipv4 address tail"))?;
        // Checked: the differences come off the wire and may be anything.
        let volume = i64::from(self.size)
            .checked_sub(self.hdr)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or(Fault::OutOfRange("volume"))?;
        let captured_len = i64::from(self.size)
            .checked_add(self.extra)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or(Fault::OutOfRange("captured_len"))?;
        let wire_len = i64::from(captured_len)
            .checked_add(self.wire)
            .and_then(|w| u32::try_from(w).ok())
            .ok_or(Fault::OutOfRange("wire_len"))?;
        Ok(HeaderRecord {
            ts_ns,
            interface,
            sample_ratio: self.ratio,
            src,
            dst,
            ports: ports.then_some((self.sport, self.dport)),
            proto: self.proto,
            vlan: vlan.then_some(self.vlan),
            size: self.size,
            volume,
            ttl: self.ttl,
            ecn: m >> misc::ECN_SHIFT,
            later_fragment: m & misc::LATER_FRAG != 0,
            captured_len,
            wire_len,
            tcp: tcp.then_some(TcpHeader {
                seq: self.seq,
                ack: self.ack,
                window: self.window,
                flags: self.tflags,
                wscale: (self.opts & 1 != 0).then_some(self.wscale),
                mss: (self.opts & 2 != 0).then_some(self.mss),
            }),
        })
    }

    /// The conversation's key fields (family bits, presence of ports and
    /// VLAN, protocol, addresses, ports, VLAN) equal.
    #[inline]
    fn same_flow(&self, o: &Flat) -> bool {
        const KEY: u8 = misc::SRC_V6 | misc::DST_V6 | misc::PORTS | misc::VLAN;
        self.misc & KEY == o.misc & KEY
            && self.proto == o.proto
            && self.sport == o.sport
            && self.dport == o.dport
            && self.vlan == o.vlan
            && self.src == o.src
            && self.dst == o.dst
    }

    /// The other direction's view: addresses, ports, their family bits and
    /// seq/ack swapped.
    fn reversed(&self) -> Flat {
        let fam = self.misc & (misc::SRC_V6 | misc::DST_V6);
        let swapped = (fam & misc::SRC_V6) << 1 | (fam & misc::DST_V6) >> 1;
        Flat {
            misc: self.misc & !(misc::SRC_V6 | misc::DST_V6) | swapped,
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            seq: self.ack,
            ack: self.seq,
            ..*self
        }
    }

    fn has_tcp(&self) -> bool {
        self.misc & misc::TCP != 0
    }

    fn addr_len(&self, v6_bit: u8) -> usize {
        if self.misc & v6_bit != 0 {
            16
        } else {
            4
        }
    }
}

fn addr_bytes(a: IpAddr) -> ([u8; 16], bool) {
    let mut out = [0u8; 16];
    match a {
        IpAddr::V4(v4) => {
            out[..4].copy_from_slice(&v4.octets());
            (out, false)
        }
        IpAddr::V6(v6) => (v6.octets(), true),
    }
}

/// `None` for an IPv4 address with nonzero bytes beyond the fourth.
fn to_addr(b: &[u8; 16], v6: bool) -> Option<IpAddr> {
    if v6 {
        Some(IpAddr::V6(Ipv6Addr::from(*b)))
    } else if b[4..].iter().all(|&x| x == 0) {
        Some(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])))
    } else {
        None
    }
}

/// One interface's state within a datagram.
#[derive(Clone, Copy, Debug)]
struct Iface {
    id: u16,
    prev_ts: u64,
    len: usize,
    history: [Flat; HISTORY],
}

impl Iface {
    /// Puts `rec` at the front: over the entry it continues (`replace`),
    /// or before all, the oldest falling off.
    fn commit(&mut self, replace: Option<usize>, rec: Flat) {
        let end = match replace {
            Some(i) => i,
            None => {
                self.len = (self.len + 1).min(HISTORY);
                self.len - 1
            }
        };
        self.history.copy_within(0..end, 1);
        self.history[0] = rec;
    }
}

/// The compression state of one datagram, shared by encoder and decoder.
#[derive(Debug, Default)]
pub(crate) struct State {
    ifaces: Vec<Iface>,
    cur_if: u16,
    first_ts: u64,
}

impl State {
    /// Starts a datagram whose header says `first_ts`.
    pub fn reset(&mut self, first_ts: u64) {
        self.ifaces.clear();
        self.cur_if = 0;
        self.first_ts = first_ts;
    }

    fn find(&self, id: u16) -> Option<usize> {
        self.ifaces.iter().position(|i| i.id == id)
    }

    fn iface_mut(&mut self, id: u16) -> &mut Iface {
        let at = match self.find(id) {
            Some(at) => at,
            None => {
                self.ifaces.push(Iface {
                    id,
                    prev_ts: self.first_ts,
                    len: 0,
                    history: [Flat::default(); HISTORY],
                });
                self.ifaces.len() - 1
            }
        };
        &mut self.ifaces[at]
    }
}

/// What encoding a record decided, to apply once it is known to fit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pending {
    interface: u16,
    ts_ns: u64,
    /// The history entry the record continues, if any.
    replace: Option<usize>,
    flat: Flat,
}

/// Encodes `r` against `state` into `out` without changing the state;
/// returns the length and what [`commit`] must apply.
pub(crate) fn encode(state: &State, r: &HeaderRecord, out: &mut [u8; MAX_RECORD_LEN]) -> (usize, Pending) {
    let rec = Flat::of(r);
    let iface = state.find(r.interface).map(|i| &state.ifaces[i]);
    let prev_ts = iface.map_or(state.first_ts, |i| i.prev_ts);
    let mut c = 0u8;
    let mut replace = None;
    let zero = Flat::default();
    let mut base = zero;
    if let Some(i) = iface.filter(|i| i.len > 0) {
        base = i.history[0];
        for (at, h) in i.history[..i.len].iter().enumerate() {
            if rec.same_flow(h) {
                (c, base, replace) = (at as u8, *h, Some(at));
                break;
            }
            let rev = h.reversed();
            if rec.same_flow(&rev) {
                (c, base, replace) = (at as u8 | ctrl::REV, rev, Some(at));
                break;
            }
        }
    }
    if r.interface != state.cur_if {
        c |= ctrl::IF;
    }
    let mut w = Writer { buf: out, len: 0 };
    w.u8(c);
    if c & ctrl::IF != 0 {
        w.varint(u64::from(r.interface));
    }
    let b = &base;
    let mut map = 0u32;
    let mut set = |cond: bool, f: u32| {
        if cond {
            map |= f
        }
    };
    set(rec.size != b.size, bit::SIZE);
    set(rec.seq != b.seq, bit::SEQ);
    set(rec.ack != b.ack, bit::ACK);
    set(rec.tflags != b.tflags, bit::TFLAGS);
    set(rec.window != b.window, bit::WINDOW);
    set(rec.extra != b.extra, bit::EXTRA);
    set(rec.wire != b.wire, bit::WIRE);
    set(rec.hdr != b.hdr, bit::HDR);
    set(rec.sport != b.sport, bit::SPORT);
    set(rec.dport != b.dport, bit::DPORT);
    set(rec.src != b.src, bit::SRC);
    set(rec.dst != b.dst, bit::DST);
    set(rec.ttl != b.ttl, bit::TTL);
    set(rec.misc != b.misc, bit::MISC);
    set(rec.proto != b.proto, bit::PROTO);
    set(rec.vlan != b.vlan, bit::VLAN);
    set(rec.ratio != b.ratio, bit::RATIO);
    set(
        (rec.opts, rec.wscale, rec.mss) != (b.opts, b.wscale, b.mss),
        bit::OPTS,
    );
    w.varint(u64::from(map));
    w.varint(zigzag(r.ts_ns.wrapping_sub(prev_ts) as i64));
    if map & bit::MISC != 0 {
        w.u8(rec.misc);
    }
    if map & bit::PROTO != 0 {
        w.u8(rec.proto);
    }
    if map & bit::SRC != 0 {
        put_addr(&mut w, &rec.src, rec.addr_len(misc::SRC_V6), &b.src, &b.dst);
    }
    if map & bit::DST != 0 {
        put_addr(&mut w, &rec.dst, rec.addr_len(misc::DST_V6), &b.dst, &b.src);
    }
    if map & bit::SPORT != 0 {
        w.be16(rec.sport);
    }
    if map & bit::DPORT != 0 {
        w.be16(rec.dport);
    }
    if map & bit::VLAN != 0 {
        w.be16(rec.vlan);
    }
    if map & bit::TTL != 0 {
        w.u8(rec.ttl);
    }
    if map & bit::SIZE != 0 {
        w.varint(u64::from(rec.size));
    }
    if map & bit::HDR != 0 {
        w.varint(zigzag(rec.hdr));
    }
    if map & bit::EXTRA != 0 {
        w.varint(zigzag(rec.extra));
    }
    if map & bit::WIRE != 0 {
        w.varint(zigzag(rec.wire));
    }
    if map & bit::RATIO != 0 {
        w.varint(u64::from(rec.ratio));
    }
    let deltas = seq_deltas(&rec, b);
    for (f, v, old) in [(bit::SEQ, rec.seq, b.seq), (bit::ACK, rec.ack, b.ack)] {
        if map & f != 0 {
            if deltas {
                w.varint(zigzag(i64::from(v.wrapping_sub(old) as i32)));
            } else {
                w.be32(v);
            }
        }
    }
    if map & bit::WINDOW != 0 {
        w.be16(rec.window);
    }
    if map & bit::TFLAGS != 0 {
        w.u8(rec.tflags);
    }
    if map & bit::OPTS != 0 {
        w.u8(rec.opts);
        if rec.opts & 1 != 0 {
            w.u8(rec.wscale);
        }
        if rec.opts & 2 != 0 {
            w.be16(rec.mss);
        }
    }
    let pending = Pending {
        interface: r.interface,
        ts_ns: r.ts_ns,
        replace,
        flat: rec,
    };
    (w.len, pending)
}

/// Applies an encoded (or decoded) record to the state.
pub(crate) fn commit(state: &mut State, p: &Pending) {
    state.cur_if = p.interface;
    let iface = state.iface_mut(p.interface);
    iface.prev_ts = p.ts_ns;
    iface.commit(p.replace, p.flat);
}

/// Sequence numbers go as deltas when the base is the same conversation
/// and both carry TCP.
fn seq_deltas(rec: &Flat, base: &Flat) -> bool {
    rec.has_tcp() && base.has_tcp() && rec.same_flow(base)
}

fn put_addr(w: &mut Writer<'_>, a: &[u8; 16], len: usize, same: &[u8; 16], other: &[u8; 16]) {
    let shared = |b: &[u8; 16]| a[..len].iter().zip(b).take_while(|(x, y)| x == y).count();
    let (n_same, n_other) = (shared(same), shared(other));
    let (x, n) = if n_other > n_same {
        (0x80, n_other)
    } else {
        (0, n_same)
    };
    w.u8(x | n as u8);
    w.bytes(&a[n..len]);
}

/// Decodes one record at `r` against `state` and commits it.
pub(crate) fn decode(state: &mut State, r: &mut Reader<'_>) -> Result<HeaderRecord, Fault> {
    let c = r.u8()?;
    if c & ctrl::RESERVED != 0 {
        return Err(Fault::Reserved(c));
    }
    let interface = if c & ctrl::IF != 0 {
        u16::try_from(r.varint()?).map_err(|_| Fault::OutOfRange("interface"))?
    } else {
        state.cur_if
    };
    let at = usize::from(c & ctrl::REF);
    let rev = c & ctrl::REV != 0;
    let (prev_ts, base, continues) = match state.find(interface).map(|i| &state.ifaces[i]) {
        Some(i) if i.len > 0 => {
            if at >= i.len {
                return Err(Fault::Reference { at, history: i.len });
            }
            let h = i.history[at];
            (i.prev_ts, if rev { h.reversed() } else { h }, true)
        }
        found => {
            if c & (ctrl::REF | ctrl::REV) != 0 {
                return Err(Fault::Reference { at, history: 0 });
            }
            (
                found.map_or(state.first_ts, |i| i.prev_ts),
                Flat::default(),
                false,
            )
        }
    };
    let map = r.varint()?;
    if map & !u64::from(bit::ALL) != 0 {
        return Err(Fault::Bitmap(map));
    }
    let map = map as u32;
    let ts_ns = prev_ts.wrapping_add(unzigzag(r.varint()?) as u64);
    let b = &base;
    let mut rec = base;
    if map & bit::MISC != 0 {
        rec.misc = r.u8()?;
    }
    if map & bit::PROTO != 0 {
        rec.proto = r.u8()?;
    }
    if map & bit::SRC != 0 {
        rec.src = get_addr(r, rec.addr_len(misc::SRC_V6), &b.src, &b.dst)?;
    }
    if map & bit::DST != 0 {
        rec.dst = get_addr(r, rec.addr_len(misc::DST_V6), &b.dst, &b.src)?;
    }
    if map & bit::SPORT != 0 {
        rec.sport = r.be16()?;
    }
    if map & bit::DPORT != 0 {
        rec.dport = r.be16()?;
    }
    if map & bit::VLAN != 0 {
        rec.vlan = r.be16()?;
    }
    if map & bit::TTL != 0 {
        rec.ttl = r.u8()?;
    }
    if map & bit::SIZE != 0 {
        rec.size = u32::try_from(r.varint()?).map_err(|_| Fault::OutOfRange("size"))?;
    }
    if map & bit::HDR != 0 {
        rec.hdr = unzigzag(r.varint()?);
    }
    if map & bit::EXTRA != 0 {
        rec.extra = unzigzag(r.varint()?);
    }
    if map & bit::WIRE != 0 {
        rec.wire = unzigzag(r.varint()?);
    }
    if map & bit::RATIO != 0 {
        rec.ratio = u32::try_from(r.varint()?).map_err(|_| Fault::OutOfRange("sample_ratio"))?;
    }
    let deltas = seq_deltas(&rec, b);
    for (f, slot) in [(bit::SEQ, &mut rec.seq), (bit::ACK, &mut rec.ack)] {
        if map & f != 0 {
            *slot = if deltas {
                let d = i32::try_from(unzigzag(r.varint()?)).map_err(|_| Fault::OutOfRange("seq delta"))?;
                slot.wrapping_add(d as u32)
            } else {
                r.be32()?
            };
        }
    }
    if map & bit::WINDOW != 0 {
        rec.window = r.be16()?;
    }
    if map & bit::TFLAGS != 0 {
        rec.tflags = r.u8()?;
    }
    if map & bit::OPTS != 0 {
        rec.opts = r.u8()?;
        if rec.opts & !3 != 0 {
            return Err(Fault::OutOfRange("tcp options"));
        }
        rec.wscale = if rec.opts & 1 != 0 { r.u8()? } else { 0 };
        rec.mss = if rec.opts & 2 != 0 { r.be16()? } else { 0 };
    }
    let out = rec.record(ts_ns, interface)?;
    let replace = (continues && rec.same_flow(b)).then_some(at);
    commit(
        state,
        &Pending {
            interface,
            ts_ns,
            replace,
            flat: rec,
        },
    );
    Ok(out)
}

fn get_addr(r: &mut Reader<'_>, len: usize, same: &[u8; 16], other: &[u8; 16]) -> Result<[u8; 16], Fault> {
    let h = r.u8()?;
    let n = usize::from(h & 0x1f);
    if h & 0x60 != 0 || n > len {
        return Err(Fault::Address(h));
    }
    let mut a = [0u8; 16];
    a[..n].copy_from_slice(&if h & 0x80 != 0 { other } else { same }[..n]);
    a[n..len].copy_from_slice(r.bytes(len - n)?);
    Ok(a)
}

impl From<ReadFault> for Fault {
    fn from(f: ReadFault) -> Self {
        match f {
            ReadFault::Short => Fault::Truncated,
            ReadFault::Varint => Fault::Varint,
        }
    }
}
