//! The frame nearly every packet is: untagged Ethernet, IPv4 without
//! options and not a later fragment, then UDP (not to a tunnel port), or
//! TCP without options or with timestamps alone.
//! It is read here with two length checks and fixed offsets, skipping the
//! general walk (link match, tag loop, version and length checks, option
//! scan) that costs several times more per packet.
//!
//! Anything else, including every frame the general path would refuse,
//! gives `None` and goes down the general path, so both paths always give
//! the same record (`fast_path_agrees_with_the_general_path` checks it).

use crate::record::{proto, FlowKey, PacketRecord, TcpInfo};

/// Ethernet (14) + IPv4 without options (20) + UDP (8).
const ETH_IPV4_UDP: usize = 42;
/// Offset of the transport header.
const L4: usize = 34;

#[inline(always)]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline(always)]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Writes the record of an Ethernet frame of the common shape into `out`
/// (every field); false, with `out` untouched, for any other frame.
#[inline(always)]
pub(super) fn ethernet_ipv4(frame: &[u8], ts_ns: u64, out: &mut PacketRecord) -> bool {
    // One checked view of fixed size: the indexing below needs no further checks.
    let Some(h) = frame
        .get(..ETH_IPV4_UDP)
        .and_then(|h| <&[u8; ETH_IPV4_UDP]>::try_from(h).ok())
    else {
        return false;
    };
    // EtherType IPv4 (so no VLAN tag), version 4 with a 20-byte header.
    if h[12] != 0x08 || h[13] != 0x00 || h[14] != 0x45 {
        return false;
    }
    let total = be16(h, 16);
    // A total below the header is malformed; a fragment offset means no transport header.
    if total < 20 || be16(h, 20) & 0x1fff != 0 {
        return false;
    }
    let (tcp, l4_header) = match h[23] {
        proto::TCP => {
            let Some(t) = frame.get(L4..L4 + 20).and_then(|t| <&[u8; 20]>::try_from(t).ok()) else {
                return false;
            };
            let header = match t[12] >> 4 {
                // No options, so neither window scale nor MSS.
                5 => 20,
                // NOP, NOP, timestamps: the options Linux puts on every
                // segment after the handshake (most TCP packets of real
                // traces), again neither window scale nor MSS. The
                // general scan reads none from them either, whether the
                // timestamps were captured in full or cut short.
                8 if frame.get(L4 + 20..L4 + 24) == Some(&[1, 1, 8, 10]) => 32,
                _ => return false,
            };
            let info = TcpInfo {
                seq: be32(t, 4),
                ack: be32(t, 8),
                window: be16(t, 14),
                flags: t[13],
                wscale: None,
                mss: None,
            };
            (Some(info), header)
        }
        // A tunnel's inner packet is the general path's business.
        proto::UDP if crate::tunnel::is_tunnel_port(be16(h, L4 + 2)) => return false,
        proto::UDP => (None, 8),
        _ => return false,
    };
    // An IPv4 address fills the first 4 bytes of the 16 (as little-endian
    // bytes of a u128 whatever the target): one load, two stores.
    let v4 =
        |at: usize| u128::from(u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]])).to_le_bytes();
    let key = FlowKey {
        src_ip: v4(26),
        dst_ip: v4(30),
        src_port: be16(h, L4),
        dst_port: be16(h, L4 + 2),
        vlan: 0,
        proto: h[23],
        flags: FlowKey::HAS_PORTS,
        vni: 0,
    };
    *out = PacketRecord {
        ts_ns,
        key,
        size: u32::from(total),
        volume: u32::from(total - 20).saturating_sub(l4_header),
        ttl: h[22],
        ecn: h[15] & 0x03,
        is_later_fragment: false,
        tcp,
        captured_len: u32::try_from(frame.len()).unwrap_or(u32::MAX),
    };
    true
}
