//! Tunnels: finding the inner packet of VXLAN, Geneve and GRE.
//!
//! # What
//!
//! Once the outer IP and transport headers are read, a packet is a tunnel
//! if it is UDP to port 4789 (VXLAN, RFC 7348) or 6081 (Geneve,
//! RFC 8926), or IP protocol 47 (GRE, RFC 2784/2890). [`inner`] then
//! walks the tunnel header to the inner network layer, which the parser
//! reads as if it had been captured alone: the inner headers drive keys,
//! sizes and TCP fields. The tunnel's identifier (VXLAN or Geneve VNI,
//! GRE key) comes with it and becomes the key's `vni`.
//!
//! # Invariants
//!
//! * Recognition is by destination port or protocol number alone, as
//!   Linux does it; the source port of VXLAN and Geneve is a flow hash.
//! * Anything unexpected — a VXLAN header without its I flag, a Geneve
//!   version other than 0 or a payload other than Ethernet (0x6558), a
//!   GRE version other than 0 or with routing, a cut tunnel header, an
//!   inner frame that is not IP or is malformed — gives `None`, and the
//!   parser keeps the outer record: a tunnel never loses a packet.
//! * The walk only borrows from the captured frame and never allocates.
//!
//! # Cost
//!
//! Nothing for a packet that is not a tunnel beyond the protocol and
//! port compares (the fast path adds one port compare per UDP packet).
//! A tunnelled packet pays its tunnel header, an inner link walk and a
//! second IP/transport parse: about a plain packet's general-path cost
//! again.

use crate::ethernet;
use crate::link::{by_ethertype, L3};
use crate::record::{proto, FlowKey};
use crate::{geneve, gre, vxlan};

/// How many tunnels deep the parser goes: a tunnel inside a tunnel (VXLAN
/// over GRE, say) is opened too, up to this many levels; a deeper one
/// keeps the headers of the last level opened.
pub(crate) const MAX_DEPTH: usize = 3;

/// EtherType of an Ethernet frame carried whole (transparent Ethernet bridging).
pub const TRANSPARENT_ETHERNET: u16 = 0x6558;

/// Whether UDP destination port `p` is a tunnel's (the fast path's test).
#[inline(always)]
pub(crate) fn is_tunnel_port(p: u16) -> bool {
    p == vxlan::PORT || p == geneve::PORT
}

/// A tunnel opened: its inner network layer and its identifier (`None`
/// for GRE without a key).
pub(crate) struct Inner<'a> {
    pub l3: L3<'a>,
    pub id: Option<u32>,
}

/// The inner network layer of a tunnel, or `None` (see the module doc).
///
/// `key` is the outer record's key; `carried` the bytes after the outer
/// transport header (the UDP payload, or for GRE everything after IP).
#[inline(always)]
pub(crate) fn inner<'a>(key: &FlowKey, carried: &'a [u8]) -> Option<Inner<'a>> {
    let udp_tunnel = key.proto == proto::UDP && is_tunnel_port(key.dst_port) && key.has_ports();
    if udp_tunnel || key.proto == gre::PROTOCOL {
        open(key, carried)
    } else {
        None
    }
}

/// [`inner`] for a packet that may be a tunnel: out of line, so that the
/// parse of every other packet carries only the compares above.
#[inline(never)]
fn open<'a>(key: &FlowKey, carried: &'a [u8]) -> Option<Inner<'a>> {
    match key.proto {
        proto::UDP if key.has_ports() && key.dst_port == vxlan::PORT => {
            let v = vxlan::Packet::new_checked(carried).ok()?;
            if !v.vni_valid() {
                return None;
            }
            let l3 = ethernet_frame(v.payload())?;
            Some(Inner {
                l3,
                id: Some(v.vni()),
            })
        }
        proto::UDP if key.has_ports() && key.dst_port == geneve::PORT => {
            let g = geneve::Packet::new_checked(carried).ok()?;
            if g.version() != 0 || g.protocol() != TRANSPARENT_ETHERNET {
                return None;
            }
            let l3 = ethernet_frame(g.payload())?;
            Some(Inner {
                l3,
                id: Some(g.vni()),
            })
        }
        gre::PROTOCOL => {
            let g = gre::Packet::new_checked(carried).ok()?;
            if !g.is_plain() {
                return None;
            }
            let l3 = match g.protocol() {
                TRANSPARENT_ETHERNET => ethernet_frame(g.payload())?,
                // IPv4, IPv6, MPLS: the protocol type is an EtherType.
                t => by_ethertype(t, g.payload()).ok()?,
            };
            Some(Inner { l3, id: g.key() })
        }
        _ => None,
    }
}

#[inline]
fn ethernet_frame(bytes: &[u8]) -> Option<L3<'_>> {
    let eth = ethernet::Frame::new_checked(bytes).ok()?;
    by_ethertype(eth.ethertype(), eth.payload()).ok()
}
