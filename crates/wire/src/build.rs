//! Building frames: for tests, benches and traffic generators.
//!
//! A [`FrameSpec`] describes one frame by the fields Clarion cares about;
//! [`FrameSpec::emit_into`] appends its bytes to a vector without
//! allocating once the vector has grown, and [`FrameSpec::record`] says
//! which [`PacketRecord`] parsing those bytes must give, so a spec is both
//! the input and the expected output of a round-trip test.
//!
//! The builder writes through the same views the parser reads, fills every
//! checksum, and never panics: lengths that cannot fit are clamped (see the
//! field docs).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::ethernet::{self, ethertype};
use crate::ipv6ext::{self, next_header};
use crate::link::LinkType;
use crate::loopback;
use crate::record::{proto, FlowKey, PacketRecord, TcpInfo};
use crate::tcp::{self, MAX_WINDOW_SCALE};
use crate::{chdlc, icmp, ipv4, ipv6, sll, sll2, udp, vlan};

mod emit;

/// One VLAN tag: the TPID announcing it and the 12-bit id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vlan {
    /// 0x8100, 0x88a8 or 0x9100.
    pub tpid: u16,
    pub id: u16,
}

impl Vlan {
    pub fn dot1q(id: u16) -> Self {
        Vlan {
            tpid: ethertype::VLAN,
            id,
        }
    }

    pub fn dot1ad(id: u16) -> Self {
        Vlan {
            tpid: ethertype::QINQ,
            id,
        }
    }
}

/// Source and destination of one IP family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpPair {
    V4 { src: Ipv4Addr, dst: Ipv4Addr },
    V6 { src: Ipv6Addr, dst: Ipv6Addr },
}

/// TCP header fields; options are emitted MSS first, then NOP + window scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TcpSpec {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
    /// Written as sent; the parser clamps it to 14.
    pub wscale: Option<u8>,
    pub mss: Option<u16>,
}

/// The transport layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Tcp(TcpSpec),
    Udp {
        src_port: u16,
        dst_port: u16,
    },
    Icmp {
        msg_type: u8,
        code: u8,
    },
    Icmpv6 {
        msg_type: u8,
        code: u8,
    },
    /// Any other protocol number; only the payload follows the IP header.
    Other(u8),
}

impl Transport {
    pub fn protocol(&self) -> u8 {
        match *self {
            Transport::Tcp(_) => proto::TCP,
            Transport::Udp { .. } => proto::UDP,
            Transport::Icmp { .. } => proto::ICMP,
            Transport::Icmpv6 { .. } => proto::ICMPV6,
            Transport::Other(p) => p,
        }
    }
}

/// An IPv6 extension header, emitted zero-filled (valid padding) with the
/// given raw length field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ipv6Ext {
    /// Length field in 8-byte units beyond the first 8.
    HopByHop(u8),
    Routing(u8),
    DestOpts(u8),
    /// Length field in 4-byte units beyond the first 8 (RFC 4302).
    Auth(u8),
}

impl Ipv6Ext {
    fn kind(self) -> u8 {
        match self {
            Ipv6Ext::HopByHop(_) => next_header::HOP_BY_HOP,
            Ipv6Ext::Routing(_) => next_header::ROUTING,
            Ipv6Ext::DestOpts(_) => next_header::DEST_OPTS,
            Ipv6Ext::Auth(_) => next_header::AUTH,
        }
    }

    /// Bytes on the wire.
    pub fn wire_len(self) -> usize {
        match self {
            Ipv6Ext::HopByHop(n) | Ipv6Ext::Routing(n) | Ipv6Ext::DestOpts(n) => (usize::from(n) + 1) * 8,
            Ipv6Ext::Auth(n) => (usize::from(n) + 2) * 4,
        }
    }

    fn raw_len(self) -> u8 {
        match self {
            Ipv6Ext::HopByHop(n) | Ipv6Ext::Routing(n) | Ipv6Ext::DestOpts(n) | Ipv6Ext::Auth(n) => n,
        }
    }
}

/// Fragmentation: IPv4 flags/offset, or an IPv6 fragment header (emitted last in the chain).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Fragment {
    /// Offset in bytes, rounded down to a multiple of 8. Nonzero: no transport header is emitted.
    pub offset: u16,
    pub more: bool,
}

/// Everything needed to emit one frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameSpec {
    pub link: LinkType,
    /// Tags between the link header and IP, outermost first. Only the
    /// EtherType-carrying links (Ethernet, SLL, SLL2) can carry them; the
    /// others ignore this.
    pub vlans: Vec<Vlan>,
    pub ip: IpPair,
    pub transport: Transport,
    /// Zero bytes after the transport header, clamped so the IP length fits 16 bits.
    pub payload_len: usize,
    pub ttl: u8,
    /// The two ECN bits (higher bits ignored).
    pub ecn: u8,
    /// IPv4 identification (low 16 bits) or IPv6 fragment identification.
    pub ip_id: u32,
    /// Raw IPv4 option bytes, cut to 40 and padded with EOL to a multiple of 4.
    pub ipv4_options: Vec<u8>,
    /// IPv6 extension headers, in order (IPv6 only).
    pub ipv6_ext: Vec<Ipv6Ext>,
    pub fragment: Option<Fragment>,
}

impl Default for FrameSpec {
    /// Ethernet, 10.0.0.1:40000 → 10.0.0.2:80, TCP ACK, no payload, TTL 64.
    fn default() -> Self {
        FrameSpec {
            link: LinkType::Ethernet,
            vlans: Vec::new(),
            ip: IpPair::V4 {
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
            },
            transport: Transport::Tcp(TcpSpec {
                src_port: 40000,
                dst_port: 80,
                flags: crate::tcp_flags::ACK,
                window: 65535,
                ..TcpSpec::default()
            }),
            payload_len: 0,
            ttl: 64,
            ecn: 0,
            ip_id: 0,
            ipv4_options: Vec::new(),
            ipv6_ext: Vec::new(),
            fragment: None,
        }
    }
}

const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const MAX_IP_LEN: usize = u16::MAX as usize;

impl FrameSpec {
    /// The whole frame in a new vector.
    pub fn build(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.frame_len());
        self.emit_into(&mut out);
        out
    }

    /// Appends the frame to `out`; allocates only if `out` must grow.
    pub fn emit_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + self.frame_len(), 0);
        let buf = &mut out[start..];
        let link_len = self.emit_link(buf);
        let ip = &mut buf[link_len..];
        let l4_at = match self.ip {
            IpPair::V4 { src, dst } => self.emit_ipv4(ip, src, dst),
            IpPair::V6 { src, dst } => self.emit_ipv6(ip, src, dst),
        };
        if !self.is_later_fragment() {
            self.emit_transport(ip, l4_at);
        }
    }

    /// Bytes [`emit_into`](Self::emit_into) appends.
    pub fn frame_len(&self) -> usize {
        self.link_len() + self.ip_len()
    }

    /// The IP length: IPv4 total length, IPv6 40 + payload length.
    pub fn ip_len(&self) -> usize {
        let fixed = self.ip_header_len() + self.l4_header_len();
        fixed + self.payload_len.min(MAX_IP_LEN.saturating_sub(fixed))
    }

    /// The flow key parsing this frame gives.
    pub fn flow_key(&self) -> FlowKey {
        let (src, dst) = match self.ip {
            IpPair::V4 { src, dst } => (IpAddr::V4(src), IpAddr::V4(dst)),
            IpPair::V6 { src, dst } => (IpAddr::V6(src), IpAddr::V6(dst)),
        };
        let ports = match self.transport {
            _ if self.is_later_fragment() => None,
            Transport::Tcp(t) => Some((t.src_port, t.dst_port)),
            Transport::Udp { src_port, dst_port } => Some((src_port, dst_port)),
            _ => None,
        };
        let vlan = self.tags().last().map(|t| t.id);
        FlowKey::new(src, dst, self.transport.protocol(), ports, vlan)
    }

    /// The record parsing this frame gives, given its capture time.
    ///
    /// Holds for any spec whose IP family suits its link (no IPv6 on the
    /// IPv4-only link and vice versa) and whose headers fit in 64 KiB.
    pub fn record(&self, ts_ns: u64) -> PacketRecord {
        let size = self.ip_len();
        let l4 = if self.is_later_fragment() {
            0
        } else {
            self.l4_header_len()
        };
        let tcp = match self.transport {
            Transport::Tcp(t) if !self.is_later_fragment() => Some(TcpInfo {
                seq: t.seq,
                ack: t.ack,
                window: t.window,
                flags: t.flags,
                wscale: t.wscale.map(|s| s.min(MAX_WINDOW_SCALE)),
                mss: t.mss,
            }),
            _ => None,
        };
        PacketRecord {
            ts_ns,
            key: self.flow_key(),
            size: size as u32,
            volume: size.saturating_sub(self.ip_header_len() + l4) as u32,
            ttl: self.ttl,
            ecn: self.ecn & 3,
            is_later_fragment: self.is_later_fragment(),
            tcp,
            captured_len: self.frame_len() as u32,
        }
    }

    fn is_later_fragment(&self) -> bool {
        self.fragment.is_some_and(|f| f.offset >= 8)
    }

    fn tags(&self) -> &[Vlan] {
        match self.link {
            LinkType::Ethernet | LinkType::LinuxSll | LinkType::LinuxSll2 => &self.vlans,
            _ => &[],
        }
    }

    fn link_len(&self) -> usize {
        let base = match self.link {
            LinkType::Ethernet => ethernet::HEADER_LEN,
            LinkType::LinuxSll => sll::HEADER_LEN,
            LinkType::LinuxSll2 => sll2::HEADER_LEN,
            LinkType::Null | LinkType::Loop => loopback::HEADER_LEN,
            // Address and control bytes, then the 2-byte protocol.
            LinkType::Ppp => 4,
            LinkType::CiscoHdlc => chdlc::HEADER_LEN,
            LinkType::RawIp | LinkType::Ipv4 | LinkType::Ipv6 => 0,
        };
        base + self.tags().len() * vlan::HEADER_LEN
    }

    fn ipv4_options_len(&self) -> usize {
        self.ipv4_options.len().min(40).next_multiple_of(4)
    }

    fn ip_header_len(&self) -> usize {
        match self.ip {
            IpPair::V4 { .. } => ipv4::HEADER_LEN + self.ipv4_options_len(),
            IpPair::V6 { .. } => {
                let frag = if self.fragment.is_some() {
                    ipv6ext::MIN_HEADER_LEN
                } else {
                    0
                };
                ipv6::HEADER_LEN + self.ipv6_ext.iter().map(|e| e.wire_len()).sum::<usize>() + frag
            }
        }
    }

    fn l4_header_len(&self) -> usize {
        if self.is_later_fragment() {
            return 0;
        }
        match self.transport {
            Transport::Tcp(t) => tcp::HEADER_LEN + tcp_options_len(&t),
            Transport::Udp { .. } => udp::HEADER_LEN,
            Transport::Icmp { .. } | Transport::Icmpv6 { .. } => icmp::HEADER_LEN,
            Transport::Other(_) => 0,
        }
    }

    fn ethertype(&self) -> u16 {
        match self.ip {
            IpPair::V4 { .. } => ethertype::IPV4,
            IpPair::V6 { .. } => ethertype::IPV6,
        }
    }
}

fn tcp_options_len(t: &TcpSpec) -> usize {
    t.mss.map_or(0, |_| 4) + t.wscale.map_or(0, |_| 4)
}

#[cfg(test)]
mod tests;
