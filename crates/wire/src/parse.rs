//! From frame bytes to a [`PacketRecord`]: the one per-packet parse.
//!
//! Straight-line code over the typed views, no allocation, no dynamic
//! dispatch: the link match picks the decapsulation, and every later step
//! is a `new_checked` followed by infallible getters.
//!
//! Two kinds of length meet here. *Headers* are located by their own
//! length fields (IHL, extension-header lengths, data offset) in the
//! captured bytes; a header we need that the capture cut short is an error.
//! *Sizes* come from the IP length fields alone, so a frame cut by a snap
//! length or padded to the Ethernet minimum still reports what was sent.
//!
//! Tunnels (VXLAN, Geneve, GRE; see `crate::tunnel`) are opened after the
//! outer transport header: when the inner packet parses, its record
//! replaces the outer one, keeping the capture time and `captured_len`
//! (the bytes captured are the outer frame's); when it does not, the
//! outer record stands. The fast path never sees a tunnel: it leaves UDP
//! to the tunnel ports, and every protocol but TCP and UDP, to this one.

use crate::error::{Layer, Malformation, ParseError};
use crate::ipv6ext;
use crate::link::{decapsulate, LinkType, Network, L3};
use crate::record::{proto, FlowKey, PacketRecord, TcpInfo};
use crate::{icmp, ipv4, ipv6, tcp, tunnel, udp};

/// Parses one captured frame into a record.
///
/// `ts_ns` is the capture time (ns since the Unix epoch). `orig_len` is the
/// frame's length on the wire from the capture record; sizes come from the
/// IP headers instead, so it is accepted for symmetry with the capture
/// record and not used yet. `captured_len` in the record is `frame.len()`.
///
/// Never panics, whatever the bytes.
#[inline]
pub fn parse_frame(
    link: LinkType,
    frame: &[u8],
    ts_ns: u64,
    orig_len: u32,
) -> Result<PacketRecord, ParseError> {
    let mut rec = PacketRecord::default();
    parse_frame_into(link, frame, ts_ns, orig_len, &mut rec)?;
    Ok(rec)
}

/// [`parse_frame`] into `out`, which is left unspecified on error: a
/// caller filling a batch parses in place instead of copying each record
/// out of a `Result` (about 30 instructions a packet on the fast path).
#[inline(always)]
pub fn parse_frame_into(
    link: LinkType,
    frame: &[u8],
    ts_ns: u64,
    orig_len: u32,
    out: &mut PacketRecord,
) -> Result<(), ParseError> {
    let _ = orig_len;
    if link == LinkType::Ethernet && fast::ethernet_ipv4(frame, ts_ns, out) {
        return Ok(());
    }
    *out = parse_general(link, frame, ts_ns)?;
    Ok(())
}

/// [`parse_frame`] without the fast path: every link type and header.
/// Out of line, so that the fast path inlines into its caller.
#[inline(never)]
fn parse_general(link: LinkType, frame: &[u8], ts_ns: u64) -> Result<PacketRecord, ParseError> {
    let mut rec = PacketRecord {
        ts_ns,
        captured_len: len32(frame.len()),
        ..PacketRecord::default()
    };
    let carried = parse_network(&mut rec, decapsulate(link, frame)?)?;
    if let Some(tunnel) = tunnel::inner(&rec.key, carried) {
        open_tunnels(&mut rec, tunnel);
    }
    Ok(rec)
}

/// Replaces `rec` with the record of the tunnel's inner packet, opening
/// tunnels inside it up to [`tunnel::MAX_DEPTH`] levels in all; a level
/// that does not parse leaves the record of the level around it (never
/// lost). The record's `vni` is the identifier of the tunnel whose inner
/// packet it is (none for GRE without a key, whatever carried that GRE).
/// Out of line: most packets are not tunnels.
#[inline(never)]
fn open_tunnels(rec: &mut PacketRecord, mut tunnel: tunnel::Inner<'_>) {
    let empty = PacketRecord {
        ts_ns: rec.ts_ns,
        captured_len: rec.captured_len,
        ..PacketRecord::default()
    };
    for depth in 1..=tunnel::MAX_DEPTH {
        let mut inner = empty;
        let Ok(carried) = parse_network(&mut inner, tunnel.l3) else {
            return;
        };
        if let Some(id) = tunnel.id {
            inner.key.vni = id;
            inner.key.flags |= FlowKey::HAS_VNI;
        }
        *rec = inner;
        match tunnel::inner(&rec.key, carried) {
            Some(next) if depth < tunnel::MAX_DEPTH => tunnel = next,
            _ => return,
        }
    }
}

/// Fills `rec` from the network layer on; returns what the transport
/// header carries (see [`parse_transport`]). Inlined into both callers:
/// a call here cost the general path about 30 instructions a packet.
#[inline(always)]
fn parse_network<'a>(rec: &mut PacketRecord, l3: L3<'a>) -> Result<&'a [u8], ParseError> {
    if let Some(v) = l3.vlan {
        rec.key.vlan = v;
        rec.key.flags |= FlowKey::HAS_VLAN;
    }
    match l3.net {
        Network::V4 => parse_ipv4(rec, l3.bytes),
        Network::V6 => parse_ipv6(rec, l3.bytes),
    }
}

#[inline]
fn parse_ipv4<'a>(rec: &mut PacketRecord, bytes: &'a [u8]) -> Result<&'a [u8], ParseError> {
    check_version(Layer::Ipv4, bytes, 4)?;
    let ip = ipv4::Packet::new_checked(bytes)?;
    let key = &mut rec.key;
    key.src_ip[..4].copy_from_slice(&ip.src_addr().octets());
    key.dst_ip[..4].copy_from_slice(&ip.dst_addr().octets());
    key.proto = ip.protocol();
    rec.size = u32::from(ip.total_len());
    rec.ttl = ip.ttl();
    rec.ecn = ip.ecn();
    // check_len guarantees total length >= header length.
    let ip_payload = rec.size.saturating_sub(u32::from(ip.header_len()));
    if ip.frag_offset() != 0 {
        rec.is_later_fragment = true;
        rec.volume = ip_payload;
        return Ok(&[]);
    }
    parse_transport(rec, ip.after_header(), ip_payload)
}

#[inline]
fn parse_ipv6<'a>(rec: &mut PacketRecord, bytes: &'a [u8]) -> Result<&'a [u8], ParseError> {
    check_version(Layer::Ipv6, bytes, 6)?;
    let ip = ipv6::Packet::new_checked(bytes)?;
    let key = &mut rec.key;
    key.flags |= FlowKey::IPV6;
    key.src_ip = ip.src_addr().octets();
    key.dst_ip = ip.dst_addr().octets();
    rec.ttl = ip.hop_limit();
    rec.ecn = ip.ecn();
    let payload_len = match ip.payload_len() {
        // Jumbogram: the real length sits in a hop-by-hop option; use what was captured.
        0 => len32(ip.after_header().len()),
        n => u32::from(n),
    };
    rec.size = payload_len.saturating_add(ipv6::HEADER_LEN as u32);
    let chain = ipv6ext::walk(ip.next_header(), ip.after_header())?;
    rec.key.proto = chain.protocol;
    let remaining = payload_len.saturating_sub(chain.ext_len);
    if chain.later_fragment {
        rec.is_later_fragment = true;
        rec.volume = remaining;
        return Ok(&[]);
    }
    parse_transport(rec, chain.rest, remaining)
}

/// Fills ports, TCP fields and volume from the transport header in `l4`.
/// `ip_payload` is what the IP header(s) declare after themselves.
///
/// Returns what a tunnel would be in: the UDP payload, or the whole of
/// `l4` for a protocol without a header read here (GRE); empty for TCP
/// and ICMP.
#[inline]
fn parse_transport<'a>(
    rec: &mut PacketRecord,
    l4: &'a [u8],
    ip_payload: u32,
) -> Result<&'a [u8], ParseError> {
    let mut carried: &[u8] = &[];
    let l4_header = match rec.key.proto {
        proto::TCP => {
            let tcp = tcp::Packet::new_checked(l4)?;
            set_ports(&mut rec.key, tcp.src_port(), tcp.dst_port());
            let (wscale, mss) = tcp.wscale_mss();
            rec.tcp = Some(TcpInfo {
                seq: tcp.seq_number(),
                ack: tcp.ack_number(),
                window: tcp.window_len(),
                flags: tcp.flags(),
                wscale,
                mss,
            });
            u32::from(tcp.header_len())
        }
        proto::UDP => {
            let udp = udp::Packet::new_checked(l4)?;
            set_ports(&mut rec.key, udp.src_port(), udp.dst_port());
            carried = udp.payload();
            udp::HEADER_LEN as u32
        }
        // Nothing is read from ICMP, so its header need not be captured.
        proto::ICMP | proto::ICMPV6 => icmp::HEADER_LEN as u32,
        _ => {
            carried = l4;
            0
        }
    };
    rec.volume = ip_payload.saturating_sub(l4_header);
    Ok(carried)
}

#[inline(always)]
fn set_ports(key: &mut FlowKey, src: u16, dst: u16) {
    key.src_port = src;
    key.dst_port = dst;
    key.flags |= FlowKey::HAS_PORTS;
}

/// The version nibble must match what the link layer announced; an empty
/// buffer falls through to the header's own length check.
#[inline(always)]
fn check_version(layer: Layer, bytes: &[u8], want: u8) -> Result<(), ParseError> {
    match bytes.first() {
        Some(&b) if b >> 4 != want => Err(ParseError::malformed(layer, Malformation::IpVersion(b >> 4))),
        _ => Ok(()),
    }
}

#[inline(always)]
fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

mod fast;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tunnel_tests;
