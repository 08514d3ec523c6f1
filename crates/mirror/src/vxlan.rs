//! VXLAN encapsulation (RFC 7348 section 5): an 8-byte header, then the
//! inner Ethernet frame.
//!
//! ```text
//!  0               1               2               3
//! |R|R|R|R|I|R|R|R|            Reserved (24 bits)                |
//! |        VXLAN Network Identifier (24 bits)    |  Reserved (8)  |
//! ```
//!
//! The I flag (0x08) says the VNI is valid; every reserved bit is 0.
//!
//! Frames of other link types get a synthetic 14-byte Ethernet header in
//! front of their network-layer bytes: destination [`SYNTHETIC_DST_MAC`],
//! source [`SYNTHETIC_SRC_MAC`] (locally administered unicast addresses,
//! so they clash with no vendor's), and the EtherType the link header
//! announced (Linux cooked captures, which carry one; VLAN tags after it
//! are kept, and Cisco HDLC) or the packet's IP version (raw IP,
//! IPv4/IPv6-only links, BSD loopback), or for PPP the EtherType of its
//! protocol. The link header itself is dropped.
//!
//! Cost: one copy of the (cut) frame into the caller's reused buffer; no
//! allocation once it has grown.

use clarion_wire::{
    ethertype, loopback_family, ppp_ethertype, CiscoHdlcPacket, LinkType, LoopbackPacket, ParseError,
    PppPacket, Sll2Packet, SllPacket,
};

use crate::MirrorError;

/// Length of the VXLAN header.
pub const HEADER_LEN: usize = 8;
/// The IANA port for VXLAN (RFC 7348 section 5).
pub const DEFAULT_PORT: u16 = 4789;
/// The "VNI is valid" flag, the only flag VXLAN defines.
pub const FLAG_VNI_VALID: u8 = 0x08;
/// Destination MAC of synthetic Ethernet headers.
pub const SYNTHETIC_DST_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x02];
/// Source MAC of synthetic Ethernet headers.
pub const SYNTHETIC_SRC_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];

const ETHERNET_HEADER_LEN: usize = 14;
/// Linux cooked-capture protocol values below this are not EtherTypes
/// (802.3 lengths, ETH_P_802_2 and friends).
const MIN_ETHERTYPE: u16 = 0x0600;

/// A 24-bit VXLAN network identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Vni(u32);

impl Vni {
    pub const MAX: u32 = 0x00ff_ffff;

    pub fn new(vni: u32) -> Result<Vni, MirrorError> {
        if vni > Self::MAX {
            return Err(MirrorError::Vni(vni));
        }
        Ok(Vni(vni))
    }

    pub fn get(self) -> u32 {
        self.0
    }
}

/// Replaces `out` with one VXLAN payload: the header for `vni`, then the
/// Ethernet `frame` as it is.
pub fn encapsulate(vni: Vni, frame: &[u8], out: &mut Vec<u8>) {
    header(vni, out);
    out.extend_from_slice(frame);
}

/// Replaces `out` with the VXLAN payload of a frame of any link type
/// (non-Ethernet frames get the synthetic header of the module doc), the
/// inner frame cut to `snap` bytes when given. Fails, leaving `out`
/// empty, on a frame whose network protocol cannot be told.
pub fn encapsulate_link(
    vni: Vni,
    link: LinkType,
    frame: &[u8],
    snap: Option<usize>,
    out: &mut Vec<u8>,
) -> Result<(), MirrorError> {
    out.clear();
    let cut = |inner_len: usize| snap.map_or(inner_len, |s| inner_len.min(s));
    if link == LinkType::Ethernet {
        header(vni, out);
        out.extend_from_slice(&frame[..cut(frame.len())]);
        return Ok(());
    }
    let (etype, payload) = network(link, frame)?;
    header(vni, out);
    let mut eth = [0u8; ETHERNET_HEADER_LEN];
    eth[0..6].copy_from_slice(&SYNTHETIC_DST_MAC);
    eth[6..12].copy_from_slice(&SYNTHETIC_SRC_MAC);
    eth[12..14].copy_from_slice(&etype.to_be_bytes());
    let n = cut(ETHERNET_HEADER_LEN + payload.len());
    out.extend_from_slice(&eth[..n.min(ETHERNET_HEADER_LEN)]);
    out.extend_from_slice(&payload[..n.saturating_sub(ETHERNET_HEADER_LEN)]);
    Ok(())
}

/// The EtherType and the bytes after the link header of a non-Ethernet frame.
fn network(link: LinkType, frame: &[u8]) -> Result<(u16, &[u8]), MirrorError> {
    let fail = |error| MirrorError::Frame { link, error };
    let by_version = |bytes: &[u8]| match bytes.first().map(|b| b >> 4) {
        Some(4) => Ok(ethertype::IPV4),
        Some(6) => Ok(ethertype::IPV6),
        Some(version) => Err(MirrorError::IpVersion { link, version }),
        None => Err(MirrorError::Frame {
            link,
            error: ParseError::Truncated {
                layer: clarion_wire::Layer::Ip,
                need: 1,
                have: 0,
            },
        }),
    };
    let by_ethertype = |p: u16, bytes| {
        if p >= MIN_ETHERTYPE {
            Ok((p, bytes))
        } else {
            Err(fail(ParseError::NotIpEtherType(p)))
        }
    };
    let by_family = |fam: u32, bytes| match fam {
        loopback_family::INET => Ok((ethertype::IPV4, bytes)),
        f if loopback_family::is_inet6(f) => Ok((ethertype::IPV6, bytes)),
        f => Err(fail(ParseError::NotIpFamily(f))),
    };
    match link {
        LinkType::Ethernet => Ok((0, frame)), // not reached: encapsulated as is
        LinkType::RawIp => Ok((by_version(frame)?, frame)),
        LinkType::Ipv4 => Ok((ethertype::IPV4, frame)),
        LinkType::Ipv6 => Ok((ethertype::IPV6, frame)),
        LinkType::LinuxSll => {
            let p = SllPacket::new_checked(frame).map_err(fail)?;
            by_ethertype(p.protocol(), p.payload())
        }
        LinkType::LinuxSll2 => {
            let p = Sll2Packet::new_checked(frame).map_err(fail)?;
            by_ethertype(p.protocol(), p.payload())
        }
        LinkType::Null => {
            let p = LoopbackPacket::new_checked(frame).map_err(fail)?;
            by_family(p.family(), p.payload())
        }
        LinkType::Loop => {
            let p = LoopbackPacket::new_checked(frame).map_err(fail)?;
            by_family(p.family_network_order(), p.payload())
        }
        LinkType::CiscoHdlc => {
            let p = CiscoHdlcPacket::new_checked(frame).map_err(fail)?;
            by_ethertype(p.protocol(), p.payload())
        }
        LinkType::Ppp => {
            let p = PppPacket::new_checked(frame).map_err(fail)?;
            match ppp_ethertype(p.protocol()) {
                Some(t) => Ok((t, p.payload())),
                None => Err(fail(ParseError::NotIpPpp(p.protocol()))),
            }
        }
    }
}

/// Replaces `out` with the 8-byte header.
fn header(vni: Vni, out: &mut Vec<u8>) {
    out.clear();
    let v = vni.0.to_be_bytes();
    out.extend_from_slice(&[FLAG_VNI_VALID, 0, 0, 0, v[1], v[2], v[3], 0]);
}

#[cfg(test)]
mod tests;
