//! [`HeaderRecord`]: what one exported header says.
//!
//! # Design
//!
//! A record is a [`PacketRecord`] (the parse every stage shares) plus the
//! two facts of the export: the interface the packet was seen on and the
//! sample ratio in force. Its fields are plain values with `Option` for what
//! a packet may lack (ports, VLAN, TCP), so equality is field equality and a
//! decoder can restore a record exactly.
//!
//! # Invariants
//!
//! - `ecn` holds the two ECN bits (0..=3); the codec sends two bits and
//!   [`HeaderRecord::from_packet`] masks the rest away.
//! - `src` and `dst` may differ in family (the codec sends a family bit per
//!   address), though a parsed packet never has that.
//!
//! # Back to frames and JSON
//!
//! [`HeaderRecord::to_frame`] writes the headers as an Ethernet frame
//! without payload whose IP length field still says the original size, so
//! a pcapng of them reads in tshark like a capture with a short snap
//! length. [`HeaderRecord`] serialises (serde) as one flat JSON object with
//! stable snake_case names, addresses as strings and `null` for what is
//! absent (see [`JsonRecord`]).
//!
//! # Cost
//!
//! `from_packet` copies a few words; `to_frame` allocates the frame (at
//! most 14 + 4 + 48 + 28 bytes) and writes it through `clarion_wire::build`.

use std::net::{IpAddr, Ipv6Addr};

use clarion_wire::build::{Fragment, FrameSpec, IpPair, TcpSpec, Transport, Vlan};
use clarion_wire::{proto, Ipv4Packet, Ipv6Packet, LinkType, PacketRecord, TcpInfo};
use serde::{Deserialize, Serialize};

/// Bytes of the Ethernet header [`HeaderRecord::to_frame`] writes.
const ETHERNET_LEN: u32 = clarion_wire::ETHERNET_HEADER_LEN as u32;
const VLAN_LEN: u32 = clarion_wire::VLAN_TAG_LEN as u32;

/// The TCP header fields a record keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TcpHeader {
    pub seq: u32,
    pub ack: u32,
    /// The raw window field, before scaling.
    pub window: u16,
    /// Flag bits, see [`clarion_wire::tcp_flags`].
    pub flags: u8,
    /// Window-scale option, if the segment carried one.
    pub wscale: Option<u8>,
    /// MSS option, if the segment carried one.
    pub mss: Option<u16>,
}

impl From<TcpInfo> for TcpHeader {
    fn from(t: TcpInfo) -> Self {
        TcpHeader {
            seq: t.seq,
            ack: t.ack,
            window: t.window,
            flags: t.flags,
            wscale: t.wscale,
            mss: t.mss,
        }
    }
}

/// One exported packet header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "JsonRecord", try_from = "JsonRecord")]
pub struct HeaderRecord {
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// The exporter's index of the interface the packet was seen on.
    pub interface: u16,
    /// The sampling in force: 1 = every packet, N = one in N.
    pub sample_ratio: u32,
    pub src: IpAddr,
    pub dst: IpAddr,
    /// Source and destination port (TCP/UDP, not a later fragment).
    pub ports: Option<(u16, u16)>,
    pub proto: u8,
    /// The innermost VLAN id.
    pub vlan: Option<u16>,
    /// IP length (IPv4 total length, IPv6 40 + payload length).
    pub size: u32,
    /// Transport payload bytes by the headers' lengths.
    pub volume: u32,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// The two ECN bits (0..=3).
    pub ecn: u8,
    /// An IP fragment other than the first.
    pub later_fragment: bool,
    /// Bytes the exporter captured of the frame.
    pub captured_len: u32,
    /// The frame's length on the wire, as captured (the capture's original
    /// length; `captured_len` or more): the length pcapng output records.
    pub wire_len: u32,
    pub tcp: Option<TcpHeader>,
}

impl HeaderRecord {
    /// The record of one parsed packet seen on `interface` while one packet
    /// in `sample_ratio` was exported. A [`PacketRecord`] does not know the
    /// frame's length on the wire: `wire_len` is the captured length until
    /// [`with_wire_len`](Self::with_wire_len) gives it.
    pub fn from_packet(p: &PacketRecord, interface: u16, sample_ratio: u32) -> Self {
        let k = &p.key;
        HeaderRecord {
            ts_ns: p.ts_ns,
            interface,
            sample_ratio,
            src: k.src_addr(),
            dst: k.dst_addr(),
            ports: k.has_ports().then_some((k.src_port, k.dst_port)),
            proto: k.proto,
            vlan: k.has_vlan().then_some(k.vlan),
            size: p.size,
            volume: p.volume,
            ttl: p.ttl,
            ecn: p.ecn & 3,
            later_fragment: p.is_later_fragment,
            captured_len: p.captured_len,
            wire_len: p.captured_len,
            tcp: p.tcp.map(TcpHeader::from),
        }
    }

    /// The record with the frame's original length (the capture's
    /// `orig_len`), never below what was captured.
    pub fn with_wire_len(self, orig_len: u32) -> Self {
        HeaderRecord {
            wire_len: orig_len.max(self.captured_len),
            ..self
        }
    }

    /// Bytes of IP and transport headers by the record's lengths (`size -
    /// volume`, zero if the record says otherwise).
    pub fn header_len(&self) -> u32 {
        self.size.saturating_sub(self.volume)
    }

    fn link_len(&self) -> u32 {
        ETHERNET_LEN + if self.vlan.is_some() { VLAN_LEN } else { 0 }
    }

    /// The packet's length as an Ethernet frame (without FCS): the pcap
    /// `orig_len` of [`to_frame`](Self::to_frame)'s frame.
    pub fn frame_len(&self) -> u32 {
        self.link_len().saturating_add(self.size)
    }

    /// The packet's headers alone as an Ethernet frame: the frame cut right
    /// after its transport header, what a capture with just the right snap
    /// length would keep. The export's input size in its byte statistics.
    pub fn header_frame_len(&self) -> u32 {
        self.link_len().saturating_add(self.header_len())
    }

    /// The headers as an Ethernet frame without payload (MACs
    /// 02:00:00:00:00:01 → :02, one 802.1Q tag if `vlan`), whose IP length
    /// field says `size`: write it to pcap(ng) with
    /// [`frame_len`](Self::frame_len) as the original length.
    ///
    /// Parsing the frame gives back the record's flow key, size, TTL, ECN,
    /// later-fragment flag and TCP fields, for every record `from_packet`
    /// makes of an Ethernet frame, with these limits: IPv4 options and IPv6
    /// extension headers are not kept (a later IPv6 fragment gets a
    /// fragment header), ICMP type and code are written as 0, and a size
    /// smaller than the written headers or too large for the IP length
    /// field leaves that field at the headers' length. Addresses of mixed
    /// families are written as IPv6, the IPv4 one mapped (`::ffff:a.b.c.d`).
    pub fn to_frame(&self) -> Vec<u8> {
        let spec = self.frame_spec();
        let mut frame = spec.build();
        let at = frame.len() - spec.ip_len();
        let ip = &mut frame[at..];
        let written = spec.ip_len() as u32;
        if self.size > written {
            match spec.ip {
                IpPair::V4 { .. } => {
                    if let Ok(total) = u16::try_from(self.size) {
                        let mut p = Ipv4Packet::new_unchecked(ip);
                        p.set_total_len(total);
                        p.fill_checksum();
                    }
                }
                IpPair::V6 { .. } => {
                    if let Ok(payload) = u16::try_from(self.size - clarion_wire::IPV6_HEADER_LEN as u32) {
                        Ipv6Packet::new_unchecked(ip).set_payload_len(payload);
                    }
                }
            }
        }
        frame
    }

    /// The frame [`to_frame`](Self::to_frame) writes, before its IP length
    /// is set to `size`.
    fn frame_spec(&self) -> FrameSpec {
        let ip = match (self.src, self.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => IpPair::V4 { src, dst },
            (s, d) => IpPair::V6 {
                src: as_v6(s),
                dst: as_v6(d),
            },
        };
        let (sport, dport) = self.ports.unwrap_or((0, 0));
        let transport = match (self.proto, self.tcp) {
            _ if self.later_fragment => Transport::Other(self.proto),
            (proto::TCP, Some(t)) => Transport::Tcp(TcpSpec {
                src_port: sport,
                dst_port: dport,
                seq: t.seq,
                ack: t.ack,
                flags: t.flags,
                window: t.window,
                wscale: t.wscale,
                mss: t.mss,
            }),
            (proto::UDP, _) if self.ports.is_some() => Transport::Udp {
                src_port: sport,
                dst_port: dport,
            },
            (proto::ICMP, _) => Transport::Icmp { msg_type: 0, code: 0 },
            (proto::ICMPV6, _) => Transport::Icmpv6 { msg_type: 0, code: 0 },
            (p, _) => Transport::Other(p),
        };
        FrameSpec {
            link: LinkType::Ethernet,
            vlans: self.vlan.map(Vlan::dot1q).into_iter().collect(),
            ip,
            transport,
            payload_len: 0,
            ttl: self.ttl,
            ecn: self.ecn,
            fragment: self.later_fragment.then_some(Fragment {
                offset: 8,
                more: false,
            }),
            ..FrameSpec::default()
        }
    }
}

fn as_v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// The JSON form of a [`HeaderRecord`] (`clarion collect --format jsonl`):
/// one flat object, snake_case names that do not change, addresses as
/// strings, `null` for absent ports, VLAN and TCP fields. `family` is 4 or
/// 6, the source address's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonRecord {
    pub ts_ns: u64,
    pub interface: u16,
    pub sample_ratio: u32,
    pub family: u8,
    pub src_ip: String,
    pub dst_ip: String,
    pub src_port: Option<u16>,
    pub dst_port: Option<u16>,
    pub proto: u8,
    pub vlan: Option<u16>,
    pub size: u32,
    pub volume: u32,
    pub ttl: u8,
    pub ecn: u8,
    pub later_fragment: bool,
    pub captured_len: u32,
    pub wire_len: u32,
    pub tcp_seq: Option<u32>,
    pub tcp_ack: Option<u32>,
    pub tcp_window: Option<u16>,
    pub tcp_flags: Option<u8>,
    pub tcp_wscale: Option<u8>,
    pub tcp_mss: Option<u16>,
}

impl From<HeaderRecord> for JsonRecord {
    fn from(r: HeaderRecord) -> Self {
        let t = r.tcp;
        JsonRecord {
            ts_ns: r.ts_ns,
            interface: r.interface,
            sample_ratio: r.sample_ratio,
            family: if r.src.is_ipv6() { 6 } else { 4 },
            src_ip: r.src.to_string(),
            dst_ip: r.dst.to_string(),
            src_port: r.ports.map(|p| p.0),
            dst_port: r.ports.map(|p| p.1),
            proto: r.proto,
            vlan: r.vlan,
            size: r.size,
            volume: r.volume,
            ttl: r.ttl,
            ecn: r.ecn,
            later_fragment: r.later_fragment,
            captured_len: r.captured_len,
            wire_len: r.wire_len,
            tcp_seq: t.map(|t| t.seq),
            tcp_ack: t.map(|t| t.ack),
            tcp_window: t.map(|t| t.window),
            tcp_flags: t.map(|t| t.flags),
            tcp_wscale: t.and_then(|t| t.wscale),
            tcp_mss: t.and_then(|t| t.mss),
        }
    }
}

impl TryFrom<JsonRecord> for HeaderRecord {
    type Error = String;

    fn try_from(j: JsonRecord) -> Result<Self, String> {
        let addr = |s: &str| s.parse::<IpAddr>().map_err(|e| format!("address {s:?}: {e}"));
        let (src, dst) = (addr(&j.src_ip)?, addr(&j.dst_ip)?);
        if j.family != if src.is_ipv6() { 6 } else { 4 } {
            return Err(format!("family {} but src_ip {}", j.family, j.src_ip));
        }
        let ports = match (j.src_port, j.dst_port) {
            (Some(s), Some(d)) => Some((s, d)),
            (None, None) => None,
            _ => return Err("src_port and dst_port must be both present or both null".into()),
        };
        let tcp = match (j.tcp_seq, j.tcp_ack, j.tcp_window, j.tcp_flags) {
            (Some(seq), Some(ack), Some(window), Some(flags)) => Some(TcpHeader {
                seq,
                ack,
                window,
                flags,
                wscale: j.tcp_wscale,
                mss: j.tcp_mss,
            }),
            (None, None, None, None) if j.tcp_wscale.is_none() && j.tcp_mss.is_none() => None,
            _ => return Err("the tcp_ fields must be all present or all null".into()),
        };
        if j.ecn > 3 {
            return Err(format!("ecn {} is not two bits", j.ecn));
        }
        Ok(HeaderRecord {
            ts_ns: j.ts_ns,
            interface: j.interface,
            sample_ratio: j.sample_ratio,
            src,
            dst,
            ports,
            proto: j.proto,
            vlan: j.vlan,
            size: j.size,
            volume: j.volume,
            ttl: j.ttl,
            ecn: j.ecn,
            later_fragment: j.later_fragment,
            captured_len: j.captured_len,
            wire_len: j.wire_len,
            tcp,
        })
    }
}
