//! Typed views over packet bytes and the compact per-packet record.
//!
//! # The contract
//!
//! Every header has a view, `Packet<T: AsRef<[u8]>>`-style, over any
//! buffer: getters on `AsRef`, setters on `AsMut`, field offsets in a
//! private `mod field`. A view is made with `new_checked`, which runs
//! `check_len` once; **after that no getter can panic**, whatever the
//! bytes. `new_unchecked` is for writing packets into buffers the caller
//! sized; untrusted input must always go through `new_checked`. Payload
//! accessors on `Packet<&[u8]>` borrow from the original buffer, so layers
//! stack without copying.
//!
//! [`parse_frame`] is the one per-packet entry point: link type and frame
//! bytes in, [`PacketRecord`] out, no allocation, no panic, and an error
//! that tells *not IP* ([`ParseError::is_not_ip`]) from *truncated* or
//! *malformed* (with the layer at fault). Checksums are never verified:
//! captures taken on the sender carry offloaded, unfilled ones. Tunnelled
//! packets (VXLAN, Geneve, GRE) give the record of their inner packet;
//! MPLS stacks and PPPoE headers are walked past (docs/link-types.md).
//!
//! [`build::FrameSpec`] writes frames through the same views, for tests,
//! benches and traffic generators, and states the record each frame must
//! parse to.
//!
//! The protocol modules are private; this root re-exports one flat
//! vocabulary with prefixed names (`Ipv4Packet`, `TcpOption`, …).

mod bytes;
mod chdlc;
mod checksum;
mod error;
mod ethernet;
mod geneve;
mod gre;
mod icmp;
mod ipv4;
mod ipv6;
mod ipv6ext;
mod link;
mod loopback;
mod mpls;
mod parse;
mod ppp;
mod pppoe;
mod record;
mod sll;
mod sll2;
mod tcp;
mod tunnel;
mod udp;
mod vlan;
mod vxlan;

pub mod build;

pub use chdlc::{Packet as CiscoHdlcPacket, HEADER_LEN as CISCO_HDLC_HEADER_LEN};
pub use error::{Layer, Malformation, ParseError};
pub use ethernet::{ethertype, Frame as EthernetFrame, HEADER_LEN as ETHERNET_HEADER_LEN};
pub use geneve::{Packet as GenevePacket, HEADER_LEN as GENEVE_HEADER_LEN, PORT as GENEVE_PORT};
pub use gre::{Packet as GrePacket, HEADER_LEN as GRE_HEADER_LEN, PROTOCOL as GRE_PROTOCOL};
pub use icmp::{Packet as IcmpPacket, HEADER_LEN as ICMP_HEADER_LEN};
pub use ipv4::{Packet as Ipv4Packet, HEADER_LEN as IPV4_HEADER_LEN};
pub use ipv6::{Packet as Ipv6Packet, HEADER_LEN as IPV6_HEADER_LEN};
pub use ipv6ext::{
    next_header as ipv6_next_header, ExtHeader as Ipv6ExtHeader, FragHeader as Ipv6FragHeader,
};
pub use link::LinkType;
pub use loopback::{family as loopback_family, Packet as LoopbackPacket, HEADER_LEN as LOOPBACK_HEADER_LEN};
pub use mpls::{is_mpls, skip_stack as mpls_skip_stack, Entry as MplsEntry};
pub use parse::{parse_frame, parse_frame_into};
pub use ppp::{ethertype_of as ppp_ethertype, protocol as ppp_protocol, Packet as PppPacket};
pub use pppoe::{Packet as PppoePacket, ETHERTYPE_SESSION as PPPOE_SESSION, HEADER_LEN as PPPOE_HEADER_LEN};
pub use record::{proto, tcp_flags, FlowKey, PacketRecord, TcpInfo};
pub use sll::{Packet as SllPacket, HEADER_LEN as SLL_HEADER_LEN};
pub use sll2::{Packet as Sll2Packet, HEADER_LEN as SLL2_HEADER_LEN};
pub use tcp::{Packet as TcpPacket, TcpOption, HEADER_LEN as TCP_HEADER_LEN, MAX_WINDOW_SCALE};
pub use tunnel::TRANSPARENT_ETHERNET;
pub use udp::{Packet as UdpPacket, HEADER_LEN as UDP_HEADER_LEN};
pub use vlan::{Tag as VlanTag, HEADER_LEN as VLAN_TAG_LEN};
pub use vxlan::{Packet as VxlanPacket, HEADER_LEN as VXLAN_HEADER_LEN, PORT as VXLAN_PORT};
