//! Random traffic: frames over a small pool of flows, with out-of-order
//! timestamps, long idle gaps, non-IP and malformed frames mixed in, and
//! TCP connections played by both their ends ([`crate::connection`]).
//!
//! Each frame is planned as a [`FramePlan`] (what it should mean) and built
//! into bytes with `clarion_wire::build` (what the monitor reads).
//! [`expected_inputs`] derives the records from the plans alone, by this
//! crate's own reading of `docs/semantics.md`, an oracle the parser is
//! checked against; [`parse_traffic`] goes through the real bytes.

use std::net::IpAddr;

use clarion_reference::Input;
use clarion_wire::build::{self, IpPair, Ipv6Ext, TcpSpec, Vlan};
use clarion_wire::{
    ethertype, proto, tcp_flags, EthernetFrame, FlowKey, LinkType, LoopbackPacket, PacketRecord, Sll2Packet,
    SllPacket, TcpInfo,
};
use proptest::prelude::*;

use crate::connection;
use crate::pool::{V4, V6};

pub(crate) const MS: u64 = 1_000_000;

/// The flow timeout the generated traffic is meant to be replayed with: some
/// gaps are longer than it, so flows restart (and forget their window scale).
pub const TEST_FLOW_TIMEOUT_NS: u64 = 400 * MS;

/// The burst gap the generated traffic is meant to be replayed with (the
/// default, 1 ms): connections space packets below, at and above it.
pub const TEST_BURST_GAP_NS: u64 = MS;

/// Ethernet frames shorter than this are padded on the wire, and captures show the padding.
const ETHERNET_MIN: usize = 60;

/// One captured frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub ts_ns: u64,
    pub link: LinkType,
    pub bytes: Vec<u8>,
}

/// Frames in capture order, with the plans they were built from (same order, same length).
#[derive(Clone, Debug, PartialEq)]
pub struct Traffic {
    pub frames: Vec<Frame>,
    pub plans: Vec<FramePlan>,
}

/// What a frame is meant to be.
#[derive(Clone, Debug, PartialEq)]
pub struct FramePlan {
    pub ts_ns: u64,
    pub content: Content,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Content {
    /// A whole IP packet. With `snap`, only that many bytes of the transport
    /// payload were captured (snap-length truncation: still a packet). A short
    /// Ethernet frame carries padding up to 60 bytes.
    Ip {
        spec: build::FrameSpec,
        snap: Option<usize>,
    },
    /// An ARP request (a non-IP loopback family on BSD loopback links): not IP.
    NotIp { link: LinkType },
    /// A frame cut inside the headers the parser needs (link, IP, IPv6
    /// extensions, the fixed TCP header, UDP; not ICMP, which it does not
    /// read, nor TCP options): malformed.
    /// `keep` bytes of the frame remain.
    Truncated { spec: build::FrameSpec, keep: usize },
    /// A whole packet (an Ethernet frame) carried in VXLAN with this VNI,
    /// in an Ethernet/IPv4/UDP frame between two tunnel endpoints: the
    /// packet of `spec`, with the VNI in its key.
    Tunnelled { spec: build::FrameSpec, vni: u32 },
}

impl FramePlan {
    pub fn link(&self) -> LinkType {
        match &self.content {
            Content::Ip { spec, .. } | Content::Truncated { spec, .. } => spec.link,
            Content::NotIp { link } => *link,
            // The outer frame's.
            Content::Tunnelled { .. } => LinkType::Ethernet,
        }
    }
}

// ---------------------------------------------------------------- the flow pool

#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Tcp {
        sport: u16,
        dport: u16,
        wscale: Option<u8>,
    },
    Udp {
        sport: u16,
        dport: u16,
    },
    Icmp,
    Other(u8),
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct FlowDef {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub kind: Kind,
    /// VLAN ids, outermost first: 0 tags, a 802.1Q tag, or QinQ (802.1ad outside).
    pub vlans: &'static [u16],
    /// Carried in VXLAN with this VNI (its tags inside the tunnel).
    pub vni: Option<u32>,
}

const fn v4(i: usize) -> IpAddr {
    IpAddr::V4(V4[i])
}

const fn v6(i: usize) -> IpAddr {
    IpAddr::V6(V6[i])
}

const fn tcp(sport: u16, dport: u16, wscale: Option<u8>) -> Kind {
    Kind::Tcp { sport, dport, wscale }
}

const fn udp(sport: u16, dport: u16) -> Kind {
    Kind::Udp { sport, dport }
}

const fn flow(src: IpAddr, dst: IpAddr, kind: Kind, vlans: &'static [u16]) -> FlowDef {
    FlowDef {
        src,
        dst,
        kind,
        vlans,
        vni: None,
    }
}

/// `f` carried in VXLAN with `vni`.
const fn in_vxlan(f: FlowDef, vni: u32) -> FlowDef {
    FlowDef { vni: Some(vni), ..f }
}

/// Both directions of a few TCP connections (with and without window scale,
/// one announcing an out-of-range 15), UDP (tagged, QinQ, plain), ICMP, GRE,
/// over IPv4 and IPv6. Each TCP flow always announces the same scale in its
/// SYNs, so "which SYN counts" never matters. The last ones come out of
/// VXLAN tunnels: the first connection again in two tenants' VNIs (the
/// same 5-tuple, three flows), a tagged UDP flow and an IPv6 one.
const FLOWS: [FlowDef; 19] = [
    flow(v4(0), v4(2), tcp(40000, 80, Some(7)), &[]),
    flow(v4(2), v4(0), tcp(80, 40000, Some(2)), &[]),
    flow(v4(1), v4(4), tcp(40001, 443, None), &[]),
    flow(v4(3), v4(1), tcp(443, 40001, Some(15)), &[10]),
    flow(v4(0), v4(1), udp(5353, 53), &[10]),
    flow(v4(5), v4(0), udp(123, 123), &[300, 20]),
    flow(v4(1), v4(4), Kind::Icmp, &[]),
    flow(v4(3), v4(5), Kind::Other(47), &[]),
    flow(v4(0), v4(3), udp(53, 5353), &[]),
    flow(v6(0), v6(2), tcp(40000, 443, Some(14)), &[]),
    flow(v6(2), v6(0), tcp(443, 40000, Some(0)), &[20]),
    flow(v6(1), v6(3), udp(53, 5353), &[20]),
    flow(v6(4), v6(0), Kind::Icmp, &[]),
    flow(v6(3), v6(1), udp(5353, 53), &[]),
    in_vxlan(flow(v4(0), v4(2), tcp(40000, 80, Some(7)), &[]), 5001),
    in_vxlan(flow(v4(2), v4(0), tcp(80, 40000, Some(2)), &[]), 5001),
    in_vxlan(flow(v4(0), v4(2), tcp(40000, 80, Some(7)), &[]), 0xff_ffff),
    in_vxlan(flow(v4(0), v4(1), udp(5353, 53), &[10]), 5001),
    in_vxlan(flow(v6(1), v6(3), udp(53, 5353), &[]), 0),
];

/// The tunnel endpoints of every VXLAN flow.
const VTEPS: IpPair = IpPair::V4 {
    src: std::net::Ipv4Addr::new(192, 0, 2, 1),
    dst: std::net::Ipv4Addr::new(192, 0, 2, 2),
};

// ---------------------------------------------------------------- the generator

/// How a frame's timestamp relates to the latest one before it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Tick {
    /// Forward by this many nanoseconds (0: the same timestamp).
    Forward(u64),
    /// Earlier than the latest timestamp by this much: out of order.
    Back(u64),
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum What {
    Packet,
    NotIp,
    /// Cut inside the needed headers at this fraction (of 256).
    Truncated(u8),
    /// Payload cut at this fraction (of 256).
    Snapped(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Frag {
    Whole,
    /// Offset 0, more fragments: carries the transport header.
    First,
    /// Offset > 0: no transport header, no ports.
    Later,
}

/// The random choices for one frame; turned into a [`FramePlan`] once the clock is known.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Step {
    pub tick: Tick,
    pub what: What,
    pub link: LinkType,
    pub flow: usize,
    pub fragment: Frag,
    pub more_fragments: bool,
    pub flags: u8,
    /// A window-scale option on a segment that is not a SYN (receivers ignore it).
    pub stray_wscale: bool,
    pub window: u16,
    pub seq: u32,
    pub ack: u32,
    pub payload: u16,
    pub ttl: u8,
    pub ecn: u8,
    pub ip_id: u32,
    /// IPv4 option bytes (NOPs) or IPv6 extension chain choice.
    pub ip_extra: u8,
}

/// Choices drawn from random words, low bits first.
///
/// Each frame is decoded from plain integers rather than composed from
/// per-field strategies: unions of strategies clone the test runner for
/// every lazily kept alternative, which made a 300-frame case cost ~20 ms.
/// All-zero words decode to the plainest frame (an Ethernet TCP ACK at the
/// same time as the previous one), so shrinking moves towards it.
pub(crate) struct Draw(pub u64);

impl Draw {
    pub fn bits(&mut self, n: u32) -> u64 {
        let v = self.0 & ((1u64 << n) - 1);
        self.0 >>= n;
        v
    }

    /// An index into `weights`, chosen with probability proportional to its weight (8 bits used).
    pub fn weighted(&mut self, weights: &[u64]) -> usize {
        let total: u64 = weights.iter().sum();
        let mut x = self.bits(8) * total / 256;
        for (i, &w) in weights.iter().enumerate() {
            if x < w {
                return i;
            }
            x -= w;
        }
        weights.len().saturating_sub(1)
    }

    /// One of `values`, chosen uniformly (8 bits used).
    pub fn pick<T: Copy>(&mut self, values: &[T]) -> T {
        let i = self.bits(8) as usize % values.len();
        values[i]
    }
}

const TCP_FLAGS: [u8; 7] = {
    use tcp_flags::*;
    [ACK, PSH | ACK, SYN, SYN | ACK, FIN | ACK, RST, ECE | CWR | ACK]
};

pub(crate) const LINKS: [LinkType; 7] = [
    LinkType::Ethernet,
    LinkType::LinuxSll,
    LinkType::LinuxSll2,
    LinkType::RawIp,
    LinkType::Null,
    LinkType::Loop,
    // Stands for "IPv4-only or IPv6-only, whichever the packet is"; see `link_for`.
    LinkType::Ipv4,
];

fn decode_step([a, b, c, d]: [u64; 4]) -> Step {
    let mut a = Draw(a);
    let tick = {
        let kind = a.weighted(&[10, 80, 5, 1]);
        let amount = a.bits(25);
        match kind {
            0 => Tick::Forward(0),
            1 => Tick::Forward(amount % (30 * MS + 1)),
            2 => Tick::Back(1 + amount % (20 * MS)),
            // Longer than the flow timeout: flows restart.
            _ => Tick::Forward(TEST_FLOW_TIMEOUT_NS + 1 + amount * 24),
        }
    };
    let what = {
        let kind = a.weighted(&[90, 4, 3, 3]);
        let fraction = a.bits(8) as u8;
        match kind {
            0 => What::Packet,
            1 => What::NotIp,
            2 => What::Truncated(fraction),
            _ => What::Snapped(fraction),
        }
    };
    let link = LINKS[a.weighted(&[70, 8, 6, 6, 3, 3, 4])];

    let mut b = Draw(b);
    let flow = b.bits(8) as usize % FLOWS.len();
    let fragment = [Frag::Whole, Frag::First, Frag::Later][b.weighted(&[18, 1, 1])];
    let more_fragments = b.bits(1) == 1;
    let flags = TCP_FLAGS[b.weighted(&[10, 6, 2, 1, 2, 1, 1])];
    let stray_wscale = b.weighted(&[97, 3]) == 1;
    let window = match b.weighted(&[1, 1]) {
        0 => b.pick(&[65535u16, 0, 1, 512, 8192, 29200]),
        _ => b.bits(16) as u16,
    };

    let mut c = Draw(c);
    let ttl = match c.weighted(&[1, 1]) {
        0 => c.pick(&[64u8, 1, 63, 128, 255]),
        _ => c.bits(8) as u8,
    };
    let ecn = c.bits(2) as u8;
    let payload = match c.weighted(&[2, 1, 3]) {
        0 => 0,
        1 => 1 + c.bits(6) as u16,
        _ => 1 + (c.bits(11) % 1460) as u16,
    };
    let ip_extra = match c.weighted(&[19, 1]) {
        0 => 0,
        _ => 1 + c.bits(3) as u8,
    };

    let mut d = Draw(d);
    let seq = d.bits(32) as u32;
    let ack = d.bits(32) as u32;
    Step {
        tick,
        what,
        link,
        flow,
        fragment,
        more_fragments,
        flags,
        stray_wscale,
        window,
        seq,
        ack,
        payload,
        ttl,
        ecn,
        ip_id: seq ^ ack,
        ip_extra,
    }
}

fn arb_step() -> impl Strategy<Value = Step> {
    any::<[u64; 4]>().prop_map(decode_step)
}

/// Most TCP connections in one case.
const MAX_CONNECTIONS: usize = 3;

/// Up to `max_packets` frames over the flow pool starting around 1.7·10¹⁸ ns,
/// and among them up to three TCP connections of up to `max_packets / 5`
/// actions each (see [`crate::connection`]), each starting somewhere in
/// the span of the other frames.
pub fn arb_traffic(max_packets: usize) -> impl Strategy<Value = Traffic> {
    arb_traffic_with(max_packets, 0..=MAX_CONNECTIONS)
}

/// [`arb_traffic`] with a number of TCP connections in `connections`
/// (at most `max_packets`).
pub fn arb_traffic_with(
    max_packets: usize,
    connections: std::ops::RangeInclusive<usize>,
) -> impl Strategy<Value = Traffic> {
    // A base that is not aligned to any interval: windows must be found, not assumed.
    let base = 1_700_000_000_000_000_000u64..1_700_000_100_000_000_000;
    let most = (*connections.end()).min(max_packets);
    let connections = prop::collection::vec(
        (any::<u16>(), connection::arb_script(max_packets / 5)),
        (*connections.start()).min(most)..=most,
    );
    (
        base,
        prop::collection::vec(arb_step(), 0..=max_packets),
        connections,
    )
        .prop_map(|(base, steps, connections)| {
            let mut clock = base;
            // (nominal time, plan): frames are captured in nominal order; a frame's
            // own timestamp may be earlier (out of order).
            let mut timed: Vec<(u64, FramePlan)> = steps
                .iter()
                .map(|s| {
                    let ts_ns = match s.tick {
                        Tick::Forward(d) => {
                            clock += d;
                            clock
                        }
                        Tick::Back(d) => clock - d,
                    };
                    (clock, plan_of(s, ts_ns))
                })
                .collect();
            let span = clock - base;
            for (at, script) in &connections {
                let start = base + span / 65536 * u64::from(*at);
                timed.extend(
                    connection::frames(script, start)
                        .into_iter()
                        .map(|t| (t.nominal, t.plan)),
                );
            }
            // Stable: frames with the same nominal time keep their order.
            timed.sort_by_key(|(nominal, _)| *nominal);
            let plans: Vec<FramePlan> = timed.into_iter().map(|(_, p)| p).collect();
            let frames = plans.iter().map(frame_of).collect();
            Traffic { frames, plans }
        })
}

/// The link a frame is captured on: IPv4-only and IPv6-only links follow the packet's family,
/// and tagged flows stay on links that carry tags.
fn link_for(s: &Step, flow: &FlowDef) -> LinkType {
    match s.link {
        // VXLAN carries Ethernet frames.
        _ if flow.vni.is_some() => LinkType::Ethernet,
        _ if !flow.vlans.is_empty()
            && !matches!(
                s.link,
                LinkType::Ethernet | LinkType::LinuxSll | LinkType::LinuxSll2
            ) =>
        {
            LinkType::Ethernet
        }
        LinkType::Ipv4 | LinkType::Ipv6 if flow.src.is_ipv6() => LinkType::Ipv6,
        LinkType::Ipv4 | LinkType::Ipv6 => LinkType::Ipv4,
        l => l,
    }
}

fn plan_of(s: &Step, ts_ns: u64) -> FramePlan {
    let flow = FLOWS[s.flow % FLOWS.len()];
    let options = match flow.kind {
        Kind::Tcp { wscale, .. } => {
            let syn = s.flags & tcp_flags::SYN != 0;
            TcpOptions {
                wscale: if syn || s.stray_wscale { wscale } else { None },
                mss: syn.then_some(1460),
            }
        }
        _ => TcpOptions::default(),
    };
    plan_for(&flow, s, options, ts_ns)
}

/// The TCP options of one segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TcpOptions {
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
}

/// The frame `s` describes on `flow`; for TCP flows, with `options`.
pub(crate) fn plan_for(flow: &FlowDef, s: &Step, options: TcpOptions, ts_ns: u64) -> FramePlan {
    let flow = *flow;
    let link = link_for(s, &flow);
    let v6 = flow.src.is_ipv6();
    let (transport, payload_len) = match flow.kind {
        Kind::Tcp { sport, dport, .. } => {
            let t = TcpSpec {
                src_port: sport,
                dst_port: dport,
                seq: s.seq,
                ack: s.ack,
                flags: s.flags,
                window: s.window,
                wscale: options.wscale,
                mss: options.mss,
            };
            (build::Transport::Tcp(t), s.payload)
        }
        Kind::Udp { sport, dport } => (
            build::Transport::Udp {
                src_port: sport,
                dst_port: dport,
            },
            s.payload.min(512),
        ),
        Kind::Icmp if v6 => (
            build::Transport::Icmpv6 {
                msg_type: 128,
                code: 0,
            },
            s.payload.min(64),
        ),
        Kind::Icmp => (build::Transport::Icmp { msg_type: 8, code: 0 }, s.payload.min(64)),
        Kind::Other(p) => (build::Transport::Other(p), s.payload.min(100)),
    };
    let fragment = match (flow.kind, s.fragment) {
        (Kind::Icmp | Kind::Other(_), _) | (_, Frag::Whole) => None,
        (_, Frag::First) => Some(build::Fragment {
            offset: 0,
            more: true,
        }),
        (_, Frag::Later) => Some(build::Fragment {
            offset: 1480,
            more: s.more_fragments,
        }),
    };
    let ip = match (flow.src, flow.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => IpPair::V4 { src, dst },
        (IpAddr::V6(src), IpAddr::V6(dst)) => IpPair::V6 { src, dst },
        // The pool never mixes families; keep the source's family.
        (IpAddr::V4(src), IpAddr::V6(_)) => IpPair::V4 { src, dst: src },
        (IpAddr::V6(src), IpAddr::V4(_)) => IpPair::V6 { src, dst: src },
    };
    let vlans = match flow.vlans {
        [outer, inner] => vec![Vlan::dot1ad(*outer), Vlan::dot1q(*inner)],
        tags => tags.iter().map(|&id| Vlan::dot1q(id)).collect(),
    };
    let (ipv4_options, ipv6_ext) = match (v6, s.ip_extra) {
        (_, 0) => (Vec::new(), Vec::new()),
        // NOPs: the header grows by a multiple of 4 bytes, the payload does not.
        (false, n) => (vec![1u8; usize::from(n) * 4], Vec::new()),
        (true, n) => (
            Vec::new(),
            match n % 4 {
                0 => vec![Ipv6Ext::HopByHop(0)],
                1 => vec![Ipv6Ext::DestOpts(1)],
                2 => vec![Ipv6Ext::HopByHop(0), Ipv6Ext::Routing(0)],
                _ => vec![Ipv6Ext::Auth(4)],
            },
        ),
    };
    let spec = build::FrameSpec {
        link,
        vlans,
        ip,
        transport,
        payload_len: usize::from(payload_len),
        ttl: s.ttl,
        ecn: s.ecn,
        ip_id: s.ip_id,
        ipv4_options,
        ipv6_ext,
        fragment,
    };
    // A tunnelled flow's packet stays whole: cutting it short gives its
    // outer packet, which the tunnel tests of crates/wire check.
    if let (Some(vni), false) = (flow.vni, matches!(s.what, What::NotIp)) {
        let content = Content::Tunnelled { spec, vni };
        return FramePlan { ts_ns, content };
    }
    let content = match s.what {
        What::Packet => Content::Ip { spec, snap: None },
        What::NotIp => match link {
            // Raw IP links cannot carry anything else.
            LinkType::RawIp | LinkType::Ipv4 | LinkType::Ipv6 => Content::Ip { spec, snap: None },
            link => Content::NotIp { link },
        },
        What::Truncated(f) => {
            // Nothing is read from an ICMP header, so the parser need not see
            // it; TCP options cut short are read as far as they go (the
            // parser's choice, not the contract's), so cuts stop before them.
            let unread = match (spec.transport, spec.fragment) {
                (_, Some(f)) if f.offset >= 8 => 0,
                (build::Transport::Icmp { .. } | build::Transport::Icmpv6 { .. }, _) => 8,
                (build::Transport::Tcp(t), _) => t.mss.map_or(0, |_| 4) + t.wscale.map_or(0, |_| 4),
                _ => 0,
            };
            let needed = spec.frame_len().saturating_sub(spec.payload_len + unread);
            let keep = needed * usize::from(f) / 256;
            Content::Truncated { spec, keep }
        }
        What::Snapped(f) => {
            let snap = (spec.payload_len > 0).then(|| spec.payload_len * usize::from(f) / 256);
            Content::Ip { spec, snap }
        }
    };
    FramePlan { ts_ns, content }
}

/// The frame's bytes.
fn frame_of(plan: &FramePlan) -> Frame {
    let bytes = match &plan.content {
        Content::Ip { spec, snap } => {
            let mut b = spec.build();
            match snap {
                Some(kept) => b.truncate(spec.frame_len().saturating_sub(spec.payload_len) + kept),
                None if spec.link == LinkType::Ethernet && b.len() < ETHERNET_MIN => {
                    b.resize(ETHERNET_MIN, 0)
                }
                None => {}
            }
            b
        }
        Content::Truncated { spec, keep } => {
            let mut b = spec.build();
            b.truncate(*keep);
            b
        }
        Content::NotIp { link } => not_ip_frame(*link),
        Content::Tunnelled { spec, vni } => vxlan_frame(&spec.build(), *vni),
    };
    Frame {
        ts_ns: plan.ts_ns,
        link: plan.link(),
        bytes,
    }
}

/// `inner` (an Ethernet frame) in VXLAN (RFC 7348: the I flag, the VNI
/// in bytes 4-6) over Ethernet/IPv4/UDP to port 4789.
fn vxlan_frame(inner: &[u8], vni: u32) -> Vec<u8> {
    let v = (vni << 8).to_be_bytes();
    let mut carried = vec![0x08, 0, 0, 0, v[0], v[1], v[2], 0];
    carried.extend_from_slice(inner);
    let outer = build::FrameSpec {
        link: LinkType::Ethernet,
        ip: VTEPS,
        transport: build::Transport::Udp {
            src_port: 49152,
            dst_port: 4789,
        },
        payload_len: carried.len(),
        ..build::FrameSpec::default()
    };
    let mut frame = outer.build();
    let at = frame.len() - carried.len();
    frame[at..].copy_from_slice(&carried);
    frame
}

/// An ARP request on `link` (on BSD loopback, an AppleTalk-family frame).
fn not_ip_frame(link: LinkType) -> Vec<u8> {
    let header = build::FrameSpec {
        link,
        ..build::FrameSpec::default()
    };
    let mut b = header.build();
    b.truncate(header.frame_len() - header.ip_len());
    match link {
        LinkType::Ethernet => EthernetFrame::new_unchecked(&mut b[..]).set_ethertype(ethertype::ARP),
        LinkType::LinuxSll => SllPacket::new_unchecked(&mut b[..]).set_protocol(ethertype::ARP),
        LinkType::LinuxSll2 => Sll2Packet::new_unchecked(&mut b[..]).set_protocol(ethertype::ARP),
        LinkType::Null => LoopbackPacket::new_unchecked(&mut b[..]).set_family_little_endian(16),
        LinkType::Loop => LoopbackPacket::new_unchecked(&mut b[..]).set_family_network_order(16),
        // Not generated (see `plan_of`): no link header to say "not IP".
        LinkType::RawIp | LinkType::Ipv4 | LinkType::Ipv6 => {}
        // Not in `LINKS`: never generated.
        LinkType::Ppp | LinkType::CiscoHdlc => {}
    }
    // htype 1, ptype IPv4, hlen 6, plen 4, request, sender and target hardware/protocol addresses.
    b.extend_from_slice(&[0, 1, 0x08, 0, 6, 4, 0, 1]);
    b.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2]);
    if link == LinkType::Ethernet {
        b.resize(ETHERNET_MIN, 0);
    }
    b
}

// ---------------------------------------------------------------- the oracle

/// The inputs the frames should parse to, derived from the plans alone.
///
/// Deliberately independent of `build::FrameSpec::record`: sizes, volumes
/// and keys are recomputed here from the header layout as the semantics
/// define them.
pub fn expected_inputs(t: &Traffic) -> Vec<Input> {
    t.plans
        .iter()
        .zip(&t.frames)
        .map(|(p, f)| match &p.content {
            Content::Ip { spec, .. } => Input::Packet(expected_record(spec, p.ts_ns, f.bytes.len())),
            Content::Tunnelled { spec, vni } => {
                let mut r = expected_record(spec, p.ts_ns, f.bytes.len());
                r.key.vni = *vni;
                r.key.flags |= FlowKey::HAS_VNI;
                Input::Packet(r)
            }
            Content::NotIp { .. } => Input::NotIp { ts_ns: p.ts_ns },
            Content::Truncated { .. } => Input::Malformed { ts_ns: p.ts_ns },
        })
        .collect()
}

fn expected_record(spec: &build::FrameSpec, ts_ns: u64, captured: usize) -> PacketRecord {
    let later = spec.fragment.is_some_and(|f| f.offset >= 8);
    let (src, dst, ip_header) = match spec.ip {
        IpPair::V4 { src, dst } => {
            let options = spec.ipv4_options.len().min(40).div_ceil(4) * 4;
            (IpAddr::V4(src), IpAddr::V4(dst), 20 + options)
        }
        IpPair::V6 { src, dst } => {
            let ext: usize = spec
                .ipv6_ext
                .iter()
                .map(|e| match *e {
                    Ipv6Ext::HopByHop(n) | Ipv6Ext::Routing(n) | Ipv6Ext::DestOpts(n) => {
                        (usize::from(n) + 1) * 8
                    }
                    Ipv6Ext::Auth(n) => (usize::from(n) + 2) * 4,
                })
                .sum();
            let fragment_header = if spec.fragment.is_some() { 8 } else { 0 };
            (IpAddr::V6(src), IpAddr::V6(dst), 40 + ext + fragment_header)
        }
    };
    let (proto, ports, transport_header, tcp) = match spec.transport {
        build::Transport::Tcp(t) => {
            let options = t.mss.map_or(0, |_| 4) + t.wscale.map_or(0, |_| 4);
            let info = TcpInfo {
                seq: t.seq,
                ack: t.ack,
                window: t.window,
                flags: t.flags,
                // RFC 7323: a shift above 14 is treated as 14.
                wscale: t.wscale.map(|w| w.min(14)),
                mss: t.mss,
            };
            (
                proto::TCP,
                Some((t.src_port, t.dst_port)),
                20 + options,
                Some(info),
            )
        }
        build::Transport::Udp { src_port, dst_port } => (proto::UDP, Some((src_port, dst_port)), 8, None),
        build::Transport::Icmp { .. } => (proto::ICMP, None, 8, None),
        build::Transport::Icmpv6 { .. } => (proto::ICMPV6, None, 8, None),
        build::Transport::Other(p) => (p, None, 0, None),
    };
    // A later fragment carries neither the transport header nor, therefore, ports or TCP fields.
    let (ports, transport_header, tcp) = if later {
        (None, 0, None)
    } else {
        (ports, transport_header, tcp)
    };
    let tagged = matches!(
        spec.link,
        LinkType::Ethernet | LinkType::LinuxSll | LinkType::LinuxSll2
    );
    let vlan = if tagged {
        spec.vlans.last().map(|v| v.id)
    } else {
        None
    };
    let size = ip_header + transport_header + spec.payload_len;
    PacketRecord {
        ts_ns,
        key: FlowKey::new(src, dst, proto, ports, vlan),
        size: to_u32(size),
        // Whatever the headers leave: the payload (for a later fragment, all of the IP payload).
        volume: to_u32(spec.payload_len),
        ttl: spec.ttl,
        ecn: spec.ecn & 3,
        is_later_fragment: later,
        tcp,
        captured_len: to_u32(captured),
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The frames as the monitor sees them: each parsed by `clarion_wire::parse_frame`,
/// not-IP frames and parse failures mapped to their [`Input`] kinds.
pub fn parse_traffic(t: &Traffic) -> Vec<Input> {
    t.frames
        .iter()
        .map(|f| {
            let orig_len = to_u32(f.bytes.len());
            match clarion_wire::parse_frame(f.link, &f.bytes, f.ts_ns, orig_len) {
                Ok(record) => Input::Packet(record),
                Err(e) if e.is_not_ip() => Input::NotIp { ts_ns: f.ts_ns },
                Err(_) => Input::Malformed { ts_ns: f.ts_ns },
            }
        })
        .collect()
}
