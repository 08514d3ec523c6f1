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

use crate::error::{Layer, Malformation, ParseError};
use crate::ipv6ext;
use crate::link::{decapsulate, LinkType, Network};
use crate::record::{proto, FlowKey, PacketRecord, TcpInfo};
use crate::{icmp, ipv4, ipv6, tcp, udp};

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
    let l3 = decapsulate(link, frame)?;
    let mut rec = PacketRecord {
        ts_ns,
        captured_len: len32(frame.len()),
        ..PacketRecord::default()
    };
    if let Some(v) = l3.vlan {
        rec.key.vlan = v;
        rec.key.flags |= FlowKey::HAS_VLAN;
    }
    match l3.net {
        Network::V4 => parse_ipv4(&mut rec, l3.bytes)?,
        Network::V6 => parse_ipv6(&mut rec, l3.bytes)?,
    }
    Ok(rec)
}

#[inline]
fn parse_ipv4(rec: &mut PacketRecord, bytes: &[u8]) -> Result<(), ParseError> {
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
        return Ok(());
    }
    parse_transport(rec, ip.after_header(), ip_payload)
}

#[inline]
fn parse_ipv6(rec: &mut PacketRecord, bytes: &[u8]) -> Result<(), ParseError> {
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
        return Ok(());
    }
    parse_transport(rec, chain.rest, remaining)
}

/// Fills ports, TCP fields and volume from the transport header in `l4`.
/// `ip_payload` is what the IP header(s) declare after themselves.
#[inline]
fn parse_transport(rec: &mut PacketRecord, l4: &[u8], ip_payload: u32) -> Result<(), ParseError> {
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
            udp::HEADER_LEN as u32
        }
        // Nothing is read from ICMP, so its header need not be captured.
        proto::ICMP | proto::ICMPV6 => icmp::HEADER_LEN as u32,
        _ => 0,
    };
    rec.volume = ip_payload.saturating_sub(l4_header);
    Ok(())
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
