//! Link types and the walk from a frame's first byte to its IP header.
//!
//! The walk is a match on the link type, then, for links that carry an
//! EtherType, a loop over VLAN tags and a few framings that may sit
//! between the link header and IP: an MPLS label stack (its payload's
//! family guessed from the first nibble) and a PPPoE session header (its
//! PPP protocol mapped to an EtherType). Each step consumes a header of
//! the captured slice, so the walk ends; a header cut short is
//! `Truncated` with its layer, a payload that is not IP is *not IP*.
//! Tunnels (VXLAN, Geneve, GRE) are found after IP, in `crate::tunnel`.

use crate::error::{Layer, Malformation, ParseError};
use crate::ethernet::{self, ethertype};
use crate::loopback::{self, family};
use crate::{chdlc, mpls, ppp, pppoe, sll, sll2, vlan};

/// The link-layer framings Clarion reads, by pcap link type (DLT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// Ethernet II, optionally VLAN-tagged (DLT 1).
    Ethernet,
    /// IP with no link header, version from the first nibble (DLT 101, 12, 14).
    RawIp,
    /// Linux cooked capture v1 (DLT 113).
    LinuxSll,
    /// Linux cooked capture v2 (DLT 276).
    LinuxSll2,
    /// IPv4 only, no link header (DLT 228).
    Ipv4,
    /// IPv6 only, no link header (DLT 229).
    Ipv6,
    /// BSD loopback, family in host byte order (DLT 0).
    Null,
    /// OpenBSD loopback, family in network byte order (DLT 108).
    Loop,
    /// PPP, with or without the 0xFF 0x03 address and control bytes (DLT 9).
    Ppp,
    /// Cisco HDLC: address, control, EtherType (DLT 104).
    CiscoHdlc,
}

impl LinkType {
    /// Every link type, for tests and fuzzers.
    pub const ALL: [LinkType; 10] = [
        LinkType::Ethernet,
        LinkType::RawIp,
        LinkType::LinuxSll,
        LinkType::LinuxSll2,
        LinkType::Ipv4,
        LinkType::Ipv6,
        LinkType::Null,
        LinkType::Loop,
        LinkType::Ppp,
        LinkType::CiscoHdlc,
    ];

    /// Maps a pcap/pcapng link type number; `None` for those Clarion cannot read.
    pub fn from_dlt(dlt: u32) -> Option<LinkType> {
        Some(match dlt {
            0 => LinkType::Null,
            1 => LinkType::Ethernet,
            9 => LinkType::Ppp,
            // 12 and 14 are the historical BSD numbers for raw IP.
            12 | 14 | 101 => LinkType::RawIp,
            104 => LinkType::CiscoHdlc,
            108 => LinkType::Loop,
            113 => LinkType::LinuxSll,
            228 => LinkType::Ipv4,
            229 => LinkType::Ipv6,
            276 => LinkType::LinuxSll2,
            _ => return None,
        })
    }

    /// The canonical link type number to write into a capture file.
    pub fn dlt(self) -> u32 {
        match self {
            LinkType::Null => 0,
            LinkType::Ethernet => 1,
            LinkType::Ppp => 9,
            LinkType::CiscoHdlc => 104,
            LinkType::RawIp => 101,
            LinkType::Loop => 108,
            LinkType::LinuxSll => 113,
            LinkType::Ipv4 => 228,
            LinkType::Ipv6 => 229,
            LinkType::LinuxSll2 => 276,
        }
    }
}

/// Which IP version the link layer announced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Network {
    V4,
    V6,
}

/// The network layer of a frame, found by [`decapsulate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct L3<'a> {
    pub net: Network,
    /// The innermost VLAN id, if the frame was tagged.
    pub vlan: Option<u16>,
    pub bytes: &'a [u8],
}

/// Strips the link layer (and any VLAN tags) off `frame`.
#[inline]
pub(crate) fn decapsulate(link: LinkType, frame: &[u8]) -> Result<L3<'_>, ParseError> {
    match link {
        LinkType::Ethernet => {
            let eth = ethernet::Frame::new_checked(frame)?;
            by_ethertype(eth.ethertype(), eth.payload())
        }
        LinkType::LinuxSll => {
            let p = sll::Packet::new_checked(frame)?;
            by_ethertype(p.protocol(), p.payload())
        }
        LinkType::LinuxSll2 => {
            let p = sll2::Packet::new_checked(frame)?;
            by_ethertype(p.protocol(), p.payload())
        }
        LinkType::RawIp => {
            let Some(&first) = frame.first() else {
                return Err(ParseError::truncated(Layer::Ip, 1, 0));
            };
            let net = match first >> 4 {
                4 => Network::V4,
                6 => Network::V6,
                v => return Err(ParseError::malformed(Layer::Ip, Malformation::IpVersion(v))),
            };
            Ok(L3 {
                net,
                vlan: None,
                bytes: frame,
            })
        }
        LinkType::Ipv4 => Ok(L3 {
            net: Network::V4,
            vlan: None,
            bytes: frame,
        }),
        LinkType::Ipv6 => Ok(L3 {
            net: Network::V6,
            vlan: None,
            bytes: frame,
        }),
        LinkType::Null => {
            let p = loopback::Packet::new_checked(frame)?;
            by_family(p.family(), p.payload())
        }
        LinkType::Loop => {
            let p = loopback::Packet::new_checked(frame)?;
            by_family(p.family_network_order(), p.payload())
        }
        LinkType::Ppp => {
            let p = ppp::Packet::new_checked(frame)?;
            let (net, bytes) = by_ppp_protocol(p.protocol(), p.payload())?;
            Ok(L3 {
                net,
                vlan: None,
                bytes,
            })
        }
        LinkType::CiscoHdlc => {
            let p = chdlc::Packet::new_checked(frame)?;
            by_ethertype(p.protocol(), p.payload())
        }
    }
}

/// Follows VLAN tags (keeping the innermost id), then an MPLS label stack
/// or a PPPoE session header if one is there, to the network layer.
#[inline]
pub(crate) fn by_ethertype(mut etype: u16, mut bytes: &[u8]) -> Result<L3<'_>, ParseError> {
    let mut vlan = None;
    // Terminates: each tag consumes 4 bytes of a finite slice.
    while ethertype::is_vlan(etype) {
        let tag = vlan::Tag::new_checked(bytes)?;
        vlan = Some(tag.vlan_id());
        etype = tag.ethertype();
        bytes = tag.payload();
    }
    let (net, bytes) = match etype {
        ethertype::IPV4 => (Network::V4, bytes),
        ethertype::IPV6 => (Network::V6, bytes),
        other => by_shim(other, bytes)?,
    };
    Ok(L3 { net, vlan, bytes })
}

/// The rarer framings between the EtherType and IP (MPLS, PPPoE), out of
/// line so that the common walk stays small enough to inline.
#[inline(never)]
fn by_shim(etype: u16, bytes: &[u8]) -> Result<(Network, &[u8]), ParseError> {
    match etype {
        t if mpls::is_mpls(t) => by_first_nibble(mpls::skip_stack(bytes)?),
        pppoe::ETHERTYPE_SESSION => {
            let p = pppoe::Packet::new_checked(bytes)?;
            by_ppp_protocol(p.protocol(), p.payload())
        }
        other => Err(ParseError::NotIpEtherType(other)),
    }
}

/// After an MPLS stack: the first nibble is the only hint (RFC 3032 says
/// nothing of the payload).
#[inline]
fn by_first_nibble(bytes: &[u8]) -> Result<(Network, &[u8]), ParseError> {
    match bytes.first().map(|b| b >> 4) {
        Some(4) => Ok((Network::V4, bytes)),
        Some(6) => Ok((Network::V6, bytes)),
        Some(v) => Err(ParseError::NotIpMpls(v)),
        None => Err(ParseError::truncated(Layer::Ip, 1, 0)),
    }
}

/// A PPP payload by its protocol: IPv4, IPv6, or an MPLS stack.
#[inline]
fn by_ppp_protocol(p: u16, bytes: &[u8]) -> Result<(Network, &[u8]), ParseError> {
    match p {
        ppp::protocol::IPV4 => Ok((Network::V4, bytes)),
        ppp::protocol::IPV6 => Ok((Network::V6, bytes)),
        ppp::protocol::MPLS => by_first_nibble(mpls::skip_stack(bytes)?),
        other => Err(ParseError::NotIpPpp(other)),
    }
}

#[inline]
fn by_family(fam: u32, bytes: &[u8]) -> Result<L3<'_>, ParseError> {
    let net = match fam {
        family::INET => Network::V4,
        f if family::is_inet6(f) => Network::V6,
        other => return Err(ParseError::NotIpFamily(other)),
    };
    Ok(L3 {
        net,
        vlan: None,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dlt_mapping() {
        for link in LinkType::ALL {
            assert_eq!(LinkType::from_dlt(link.dlt()), Some(link));
        }
        assert_eq!(LinkType::from_dlt(12), Some(LinkType::RawIp));
        assert_eq!(LinkType::from_dlt(14), Some(LinkType::RawIp));
        assert_eq!(LinkType::from_dlt(105), None);
        assert_eq!(LinkType::from_dlt(u32::MAX), None);
    }

    #[test]
    fn qinq_keeps_innermost_tag() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[
            0x88, 0xa8, 0x00, 0x0a, 0x91, 0x00, 0x00, 0x14, 0x81, 0x00, 0x20, 0x1e,
        ]);
        f.extend_from_slice(&[0x86, 0xdd, 0x60]);
        let l3 = decapsulate(LinkType::Ethernet, &f).unwrap();
        assert_eq!(
            l3,
            L3 {
                net: Network::V6,
                vlan: Some(30),
                bytes: &[0x60]
            }
        );
    }

    #[test]
    fn not_ip_and_cut_tags() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x06, 0, 1]);
        assert_eq!(
            decapsulate(LinkType::Ethernet, &f),
            Err(ParseError::NotIpEtherType(0x0806))
        );
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x81, 0x00, 0x00]);
        assert_eq!(
            decapsulate(LinkType::Ethernet, &f),
            Err(ParseError::truncated(Layer::Vlan, 4, 1))
        );
    }

    #[test]
    fn raw_ip_version() {
        assert_eq!(decapsulate(LinkType::RawIp, &[0x45]).unwrap().net, Network::V4);
        assert_eq!(decapsulate(LinkType::RawIp, &[0x60]).unwrap().net, Network::V6);
        assert_eq!(
            decapsulate(LinkType::RawIp, &[0x50]),
            Err(ParseError::malformed(Layer::Ip, Malformation::IpVersion(5)))
        );
        assert_eq!(
            decapsulate(LinkType::RawIp, &[]),
            Err(ParseError::truncated(Layer::Ip, 1, 0))
        );
    }

    #[test]
    fn loopback_families() {
        assert_eq!(
            decapsulate(LinkType::Null, &[2, 0, 0, 0, 0x45]).unwrap().net,
            Network::V4
        );
        assert_eq!(
            decapsulate(LinkType::Null, &[0, 0, 0, 28]).unwrap().net,
            Network::V6
        );
        assert_eq!(
            decapsulate(LinkType::Loop, &[0, 0, 0, 24]).unwrap().net,
            Network::V6
        );
        assert_eq!(
            decapsulate(LinkType::Loop, &[0, 0, 0, 7]),
            Err(ParseError::NotIpFamily(7))
        );
        // DLT_LOOP is network order only: a little-endian 2 is family 0x02000000.
        assert_eq!(
            decapsulate(LinkType::Loop, &[2, 0, 0, 0]),
            Err(ParseError::NotIpFamily(0x0200_0000))
        );
    }
}
