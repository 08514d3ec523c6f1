//! Mirroring packets to a remote analyzer in VXLAN (RFC 7348) over UDP.
//!
//! Trident exports some packets whole, to an analyzer that is not on the
//! host. VXLAN is what analyzers, switches and Linux (`ip link add ...
//! type vxlan`) already take: each packet becomes one UDP datagram, the
//! 8-byte VXLAN header followed by the packet as an Ethernet frame.
//!
//! - [`encapsulate`] and [`encapsulate_link`] (module `vxlan`): the bytes
//!   of one datagram, pure functions without I/O. Frames of link types
//!   other than Ethernet get a synthetic Ethernet header
//!   ([`SYNTHETIC_DST_MAC`], [`SYNTHETIC_SRC_MAC`], the EtherType of the
//!   packet's network protocol); a snap length cuts the inner frame.
//! - [`VxlanMirror`]: a non-blocking UDP socket to one analyzer (IPv4 or
//!   IPv6, default port [`DEFAULT_PORT`] 4789) with counters. It never
//!   stalls the caller: a datagram that does not fit the socket buffer is
//!   counted as dropped and the caller goes on (see [`VxlanMirror::send`]).
//!   Its datagrams go out in batches of up to [`MAX_BATCH`], one
//!   `sendmmsg(2)` each, flushed by the owner's tick
//!   ([`VxlanMirror::flush`]).
//!
//! The outer IP and UDP headers are the kernel's: the datagrams leave
//! from an ephemeral port of the host's address, so the usual routing,
//! firewalling and MTU rules apply. An inner frame plus 50 bytes of outer
//! headers (IPv4; 70 for IPv6) over the path MTU is fragmented by IP.

mod error;
mod mmsg;
mod sender;
mod vxlan;

pub use error::MirrorError;
pub use mmsg::MAX_BATCH;
pub use sender::{parse_analyzer, Flushed, MirrorStats, SendOutcome, VxlanMirror, DEFAULT_BATCH};
pub use vxlan::{
    encapsulate, encapsulate_link, Vni, DEFAULT_PORT, FLAG_VNI_VALID, HEADER_LEN, SYNTHETIC_DST_MAC,
    SYNTHETIC_SRC_MAC,
};
