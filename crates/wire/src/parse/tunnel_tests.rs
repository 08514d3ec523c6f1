//! Tunnels and the framings between link and IP, against the obvious
//! reference: a packet wrapped in VXLAN, Geneve, GRE, MPLS, PPPoE, PPP or
//! Cisco HDLC must parse to the record of the same packet parsed alone
//! (only `captured_len`, the bytes of the frame as captured, differs).
//! A damaged or cut tunnel gives the outer record, never an error.

use proptest::prelude::*;

use super::tests::arb_spec;
use super::*;
use crate::build::{FrameSpec, IpPair, Transport};
use crate::{geneve, gre, vxlan};

/// A tunnel header and what it carries.
#[derive(Clone, Debug)]
enum Tunnel {
    Vxlan {
        vni: u32,
    },
    /// `options`: whole 4-byte words, random bytes.
    Geneve {
        vni: u32,
        options: Vec<[u8; 4]>,
        flags: u8,
    },
    /// Checksum, key and sequence words present, their contents, and
    /// whether the payload is an Ethernet frame (0x6558) or IP.
    Gre {
        c: bool,
        k: bool,
        s: bool,
        words: [u32; 3],
        ethernet: bool,
    },
}

impl Tunnel {
    /// The identifier the inner packet's key carries as `vni`.
    fn id(&self) -> Option<u32> {
        match self {
            Tunnel::Vxlan { vni } | Tunnel::Geneve { vni, .. } => Some(*vni),
            Tunnel::Gre { k, words, .. } => k.then_some(words[1]),
        }
    }

    fn carries_ethernet(&self) -> bool {
        match self {
            Tunnel::Vxlan { .. } | Tunnel::Geneve { .. } => true,
            Tunnel::Gre { ethernet, .. } => *ethernet,
        }
    }

    /// The outer transport: UDP to the tunnel's port, or GRE.
    fn transport(&self, src_port: u16) -> Transport {
        match self {
            Tunnel::Vxlan { .. } => Transport::Udp {
                src_port,
                dst_port: vxlan::PORT,
            },
            Tunnel::Geneve { .. } => Transport::Udp {
                src_port,
                dst_port: geneve::PORT,
            },
            Tunnel::Gre { .. } => Transport::Other(gre::PROTOCOL),
        }
    }

    /// The tunnel header for an inner packet of `inner_ip` family.
    fn header(&self, inner_ip: &IpPair) -> Vec<u8> {
        match self {
            Tunnel::Vxlan { vni } => {
                let v = (vni << 8).to_be_bytes();
                vec![0x08, 0, 0, 0, v[0], v[1], v[2], 0]
            }
            Tunnel::Geneve { vni, options, flags } => {
                let v = (vni << 8).to_be_bytes();
                let mut h = vec![options.len() as u8, flags & 0xc0, 0x65, 0x58, v[0], v[1], v[2], 0];
                options.iter().for_each(|o| h.extend_from_slice(o));
                h
            }
            Tunnel::Gre {
                c,
                k,
                s,
                words,
                ethernet,
            } => {
                let flags = u16::from(*c) << 15 | u16::from(*k) << 13 | u16::from(*s) << 12;
                let proto = match (ethernet, inner_ip) {
                    (true, _) => 0x6558u16,
                    (false, IpPair::V4 { .. }) => 0x0800,
                    (false, IpPair::V6 { .. }) => 0x86dd,
                };
                let mut h = Vec::new();
                h.extend_from_slice(&flags.to_be_bytes());
                h.extend_from_slice(&proto.to_be_bytes());
                for (present, w) in [*c, *k, *s].into_iter().zip(words) {
                    if present {
                        h.extend_from_slice(&w.to_be_bytes());
                    }
                }
                h
            }
        }
    }
}

fn arb_tunnel() -> impl Strategy<Value = Tunnel> {
    prop_oneof![
        (0u32..1 << 24).prop_map(|vni| Tunnel::Vxlan { vni }),
        (
            0u32..1 << 24,
            proptest::collection::vec(any::<[u8; 4]>(), 0..8),
            any::<u8>()
        )
            .prop_map(|(vni, options, flags)| Tunnel::Geneve { vni, options, flags }),
        (any::<(bool, bool, bool)>(), any::<[u32; 3]>(), any::<bool>()).prop_map(
            |((c, k, s), words, ethernet)| Tunnel::Gre {
                c,
                k,
                s,
                words,
                ethernet
            }
        ),
    ]
}

/// An inner packet: any generated frame, as Ethernet or as bare IP, with a
/// payload small enough that the outer packet fits in 64 KiB.
fn arb_inner(ethernet: bool) -> impl Strategy<Value = FrameSpec> {
    arb_spec().prop_map(move |mut s| {
        s.link = if ethernet {
            LinkType::Ethernet
        } else {
            LinkType::RawIp
        };
        s.payload_len %= 1500;
        s
    })
}

/// An outer packet of any link and family, unfragmented; transport and
/// payload are set by [`wrap`].
fn arb_outer() -> impl Strategy<Value = FrameSpec> {
    arb_spec().prop_map(|mut s| {
        s.fragment = None;
        s.ipv6_ext.truncate(1);
        s
    })
}

/// A tunnelled frame: `outer` carrying `tunnel` carrying `inner`.
struct Wrapped {
    outer: FrameSpec,
    frame: Vec<u8>,
    /// Where the tunnel header starts (the outer transport payload).
    tunnel_at: usize,
    /// Where the inner frame (Ethernet or IP) starts.
    inner_at: usize,
    inner_link: LinkType,
}

fn wrap(mut outer: FrameSpec, tunnel: &Tunnel, inner: &FrameSpec, src_port: u16) -> Wrapped {
    let mut carried = tunnel.header(&inner.ip);
    let header_len = carried.len();
    carried.extend_from_slice(&inner.build());
    outer.transport = tunnel.transport(src_port);
    outer.payload_len = carried.len();
    let mut frame = outer.build();
    let tunnel_at = frame.len() - carried.len();
    frame[tunnel_at..].copy_from_slice(&carried);
    Wrapped {
        outer,
        frame,
        tunnel_at,
        inner_at: tunnel_at + header_len,
        // GRE declares its IP payload's family (0x0800, 0x86dd): parsed
        // alone, the inner packet is read as that family, not guessed
        // from a version nibble a damaged packet may have changed.
        inner_link: match (tunnel, &inner.ip) {
            (Tunnel::Gre { ethernet: false, .. }, IpPair::V4 { .. }) => LinkType::Ipv4,
            (Tunnel::Gre { ethernet: false, .. }, IpPair::V6 { .. }) => LinkType::Ipv6,
            _ => inner.link,
        },
    }
}

fn with_captured(r: PacketRecord, len: usize) -> PacketRecord {
    PacketRecord {
        captured_len: len as u32,
        ..r
    }
}

/// `r`, the record of a packet parsed alone, as it reads when `tunnel`
/// carried it: with the tunnel's identifier.
fn carried_by(mut r: PacketRecord, tunnel: &Tunnel) -> PacketRecord {
    if let Some(id) = tunnel.id() {
        r.key.vni = id;
        r.key.flags |= FlowKey::HAS_VNI;
    }
    r
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn tunnelled_packet_parses_as_the_inner_packet_alone(
        tunnel in arb_tunnel(),
        inner_eth in arb_inner(true),
        inner_ip in arb_inner(false),
        outer in arb_outer(),
        src_port in any::<u16>(),
        ts in any::<u64>(),
    ) {
        let inner = if tunnel.carries_ethernet() { inner_eth } else { inner_ip };
        let w = wrap(outer, &tunnel, &inner, src_port);
        let alone = parse_frame(w.inner_link, &w.frame[w.inner_at..], ts, 0);
        // The reference itself is right: the builder's own record.
        prop_assert_eq!(alone, Ok(inner.record(ts)));
        let want = carried_by(with_captured(inner.record(ts), w.frame.len()), &tunnel);
        prop_assert_eq!(parse_frame(w.outer.link, &w.frame, ts, 0), Ok(want));
        // The general path alone agrees (the fast path must not take tunnels).
        prop_assert_eq!(parse_general(w.outer.link, &w.frame, ts), Ok(want));
    }

    /// Cut anywhere after the outer transport header: the inner packet as
    /// far as it parses alone, else the outer record; never an error.
    #[test]
    fn cut_tunnels_give_the_inner_or_the_outer_record(
        tunnel in arb_tunnel(),
        inner_eth in arb_inner(true),
        inner_ip in arb_inner(false),
        outer in arb_outer(),
        cut in any::<prop::sample::Index>(),
    ) {
        let inner = if tunnel.carries_ethernet() { inner_eth } else { inner_ip };
        let w = wrap(outer, &tunnel, &inner, 1);
        let cut = w.tunnel_at + cut.index(w.frame.len() - w.tunnel_at + 1);
        let frame = &w.frame[..cut];
        let outer_rec = with_captured(w.outer.record(3), cut);
        let want = match frame.get(w.inner_at..).map(|b| parse_frame(w.inner_link, b, 3, 0)) {
            Some(Ok(r)) => carried_by(with_captured(r, cut), &tunnel),
            _ => outer_rec,
        };
        prop_assert_eq!(parse_frame(w.outer.link, frame, 3, 0), Ok(want));
    }

    /// Any bytes after the outer transport header: a record, never an
    /// error or a panic, and when it is not the inner packet's it is the outer one.
    #[test]
    fn damaged_tunnels_never_lose_the_packet(
        tunnel in arb_tunnel(),
        inner_eth in arb_inner(true),
        inner_ip in arb_inner(false),
        outer in arb_outer(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let inner = if tunnel.carries_ethernet() { inner_eth } else { inner_ip };
        let mut w = wrap(outer, &tunnel, &inner, 1);
        let mut header_touched = false;
        for (at, v) in flips {
            // Mostly within the tunnel header and the inner headers.
            let span = (w.frame.len() - w.tunnel_at).min(80);
            let i = w.tunnel_at + at.index(span);
            w.frame[i] ^= v;
            header_touched |= i < w.inner_at;
        }
        let got = parse_frame(w.outer.link, &w.frame, 3, 0);
        let outer_rec = with_captured(w.outer.record(3), w.frame.len());
        let alone = parse_frame(w.inner_link, &w.frame[w.inner_at..], 3, 0);
        match alone {
            // A damaged tunnel header may move or retype the inner packet
            // (flags that add words, another protocol): still a record.
            _ if header_touched => prop_assert!(got.is_ok(), "{:?}", got),
            Ok(r) => prop_assert_eq!(got, Ok(carried_by(with_captured(r, w.frame.len()), &tunnel))),
            Err(_) => prop_assert_eq!(got, Ok(outer_rec)),
        }
    }
}

#[test]
fn fast_path_leaves_tunnel_ports_to_the_general_path() {
    for port in [vxlan::PORT, geneve::PORT] {
        let f = FrameSpec {
            transport: Transport::Udp {
                src_port: 1,
                dst_port: port,
            },
            payload_len: 60,
            ..FrameSpec::default()
        }
        .build();
        let mut rec = PacketRecord::default();
        assert!(!fast::ethernet_ipv4(&f, 0, &mut rec), "port {port}");
        // Not a valid tunnel (zero flags, no inner frame): the outer record.
        assert_eq!(
            parse_frame(LinkType::Ethernet, &f, 0, 0).map(|r| r.key.dst_port),
            Ok(port)
        );
    }
}

#[test]
fn unusable_tunnel_headers_keep_the_outer_record() {
    let inner = FrameSpec::default();
    let outer = FrameSpec {
        ip: IpPair::V4 {
            src: [192, 0, 2, 1].into(),
            dst: [192, 0, 2, 2].into(),
        },
        ..FrameSpec::default()
    };
    let cases: [(Tunnel, usize, u8); 5] = [
        // VXLAN without the I flag.
        (Tunnel::Vxlan { vni: 1 }, 0, 0x00),
        // Geneve version 1.
        (
            Tunnel::Geneve {
                vni: 1,
                options: vec![],
                flags: 0,
            },
            0,
            0x40,
        ),
        // Geneve carrying IPv4 rather than Ethernet: kept outer, as documented.
        (
            Tunnel::Geneve {
                vni: 1,
                options: vec![],
                flags: 0,
            },
            2,
            0x08,
        ),
        // GRE version 1 (PPTP) and GRE with routing.
        (gre_plain(), 1, 0x01),
        (gre_plain(), 0, 0x40),
    ];
    for (tunnel, at, byte) in cases {
        let mut w = wrap(outer.clone(), &tunnel, &inner, 7);
        assert_eq!(
            parse_frame(LinkType::Ethernet, &w.frame, 0, 0).map(|r| r.key),
            Ok(carried_by(inner.record(0), &tunnel).key)
        );
        w.frame[w.tunnel_at + at] = byte;
        if at == 2 {
            w.frame[w.tunnel_at + 3] = 0x00;
        }
        let r = parse_frame(LinkType::Ethernet, &w.frame, 0, 0).unwrap();
        assert_eq!(r, with_captured(w.outer.record(0), w.frame.len()), "{tunnel:?}");
    }
}

fn gre_plain() -> Tunnel {
    Tunnel::Gre {
        c: false,
        k: false,
        s: false,
        words: [0; 3],
        ethernet: true,
    }
}

#[test]
fn nested_tunnels_are_opened_up_to_the_bound() {
    // The innermost packet, then wrapped in VXLAN, GRE, VXLAN, GRE (the
    // GREs with keys 101 and 103).
    let innermost = FrameSpec::default();
    let mut frame = innermost.build();
    let mut keys = vec![innermost.flow_key()];
    for level in 0..4u16 {
        let tunnel = if level % 2 == 0 {
            Tunnel::Vxlan { vni: 5 }
        } else {
            Tunnel::Gre {
                c: false,
                k: true,
                s: false,
                words: [0, 100 + u32::from(level), 0],
                ethernet: true,
            }
        };
        let outer = FrameSpec {
            ip: IpPair::V4 {
                src: [10, 9, level as u8, 1].into(),
                dst: [10, 9, level as u8, 2].into(),
            },
            ..FrameSpec::default()
        };
        let mut carried = tunnel.header(&outer.ip);
        carried.extend_from_slice(&frame);
        let spec = FrameSpec {
            transport: tunnel.transport(100 + level),
            payload_len: carried.len(),
            ..outer
        };
        frame = spec.build();
        let at = frame.len() - carried.len();
        frame[at..].copy_from_slice(&carried);
        keys.push(spec.flow_key());
    }
    // Four levels: the bound (3) stops one short of the innermost packet;
    // the packet reached is the one GRE key 101 carried.
    let r = parse_frame(LinkType::Ethernet, &frame, 0, 0).unwrap();
    let mut want = keys[4 - tunnel::MAX_DEPTH];
    want.vni = 101;
    want.flags |= FlowKey::HAS_VNI;
    assert_eq!(r.key, want);
    assert_eq!(tunnel::MAX_DEPTH, 3);
}

// ------------------------------------------------ framings before IP

/// Replaces the EtherType just before the IP header of `frame` (built from
/// a spec on Ethernet, SLL or Cisco HDLC, tags included) with `etype` and
/// `shim` bytes.
fn insert_before_ip(frame: &[u8], ip_at: usize, etype: u16, shim: &[u8]) -> Vec<u8> {
    let mut f = frame[..ip_at - 2].to_vec();
    f.extend_from_slice(&etype.to_be_bytes());
    f.extend_from_slice(shim);
    f.extend_from_slice(&frame[ip_at..]);
    f
}

fn arb_ethertype_link() -> impl Strategy<Value = FrameSpec> {
    (
        arb_spec(),
        prop_oneof![
            Just(LinkType::Ethernet),
            Just(LinkType::LinuxSll),
            Just(LinkType::CiscoHdlc)
        ],
    )
        .prop_map(|(mut s, link)| {
            s.link = link;
            s.payload_len %= 1500;
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn mpls_stack_is_skipped(
        spec in arb_ethertype_link(),
        labels in proptest::collection::vec(any::<u32>(), 1..5),
        multicast in any::<bool>(),
        ts in any::<u64>(),
    ) {
        let plain = spec.build();
        let ip_at = plain.len() - spec.ip_len();
        let mut stack = Vec::new();
        for (i, l) in labels.iter().enumerate() {
            let bottom = i + 1 == labels.len();
            let entry = (l & !0x100) | if bottom { 0x100 } else { 0 };
            stack.extend_from_slice(&entry.to_be_bytes());
        }
        let etype = if multicast { 0x8848 } else { 0x8847 };
        let f = insert_before_ip(&plain, ip_at, etype, &stack);
        prop_assert_eq!(parse_frame(spec.link, &f, ts, 0), Ok(with_captured(spec.record(ts), f.len())));
        // Cut inside the stack: the MPLS layer is named.
        let cut = ip_at - 2 + 2 + stack.len() - 1;
        let e = parse_frame(spec.link, &f[..cut], ts, 0).map(|_| ()).unwrap_err();
        prop_assert_eq!(e.layer(), Some(Layer::Mpls));
    }

    #[test]
    fn pppoe_session_is_skipped(
        spec in arb_ethertype_link().prop_filter("PPPoE runs over Ethernet", |s| s.link != LinkType::CiscoHdlc),
        session in any::<u16>(),
        ts in any::<u64>(),
    ) {
        let plain = spec.build();
        let ip_at = plain.len() - spec.ip_len();
        let proto: u16 = match spec.ip {
            IpPair::V4 { .. } => 0x0021,
            IpPair::V6 { .. } => 0x0057,
        };
        let len = (spec.ip_len() + 2) as u16;
        let mut shim = vec![0x11, 0x00];
        shim.extend_from_slice(&session.to_be_bytes());
        shim.extend_from_slice(&len.to_be_bytes());
        shim.extend_from_slice(&proto.to_be_bytes());
        let f = insert_before_ip(&plain, ip_at, 0x8864, &shim);
        prop_assert_eq!(parse_frame(spec.link, &f, ts, 0), Ok(with_captured(spec.record(ts), f.len())));
    }

    #[test]
    fn ppp_link_with_every_header_form(
        spec in arb_inner(false),
        address_control in any::<bool>(),
        compressed in any::<bool>(),
        ts in any::<u64>(),
    ) {
        let ip = spec.build();
        let proto: u16 = match spec.ip {
            IpPair::V4 { .. } => 0x0021,
            IpPair::V6 { .. } => 0x0057,
        };
        let mut f = Vec::new();
        if address_control {
            f.extend_from_slice(&[0xff, 0x03]);
        }
        if compressed {
            f.push(proto as u8);
        } else {
            f.extend_from_slice(&proto.to_be_bytes());
        }
        f.extend_from_slice(&ip);
        prop_assert_eq!(parse_frame(LinkType::Ppp, &f, ts, 0), Ok(with_captured(spec.record(ts), f.len())));
    }
}

#[test]
fn framings_that_carry_no_ip_are_not_ip() {
    // PPP LCP on the PPP link and inside PPPoE.
    let lcp = [0xff, 0x03, 0xc0, 0x21, 0x01, 0x01, 0x00, 0x04];
    assert_eq!(
        parse_frame(LinkType::Ppp, &lcp, 0, 0),
        Err(ParseError::NotIpPpp(0xc021))
    );
    let mut f = vec![0; 12];
    f.extend_from_slice(&[0x88, 0x64, 0x11, 0, 0, 1, 0, 6, 0xc0, 0x21, 1, 1, 0, 4]);
    let e = parse_frame(LinkType::Ethernet, &f, 0, 0).unwrap_err();
    assert_eq!(e, ParseError::NotIpPpp(0xc021));
    assert!(e.is_not_ip());
    // PPPoE discovery.
    f[13] = 0x63;
    assert_eq!(
        parse_frame(LinkType::Ethernet, &f, 0, 0),
        Err(ParseError::NotIpEtherType(0x8863))
    );
    // An MPLS pseudowire: control word (nibble 0) after the stack.
    let mut f = vec![0; 12];
    f.extend_from_slice(&[0x88, 0x47, 0x00, 0x01, 0x01, 0x40, 0x00, 0x00, 0x00, 0x00]);
    assert_eq!(
        parse_frame(LinkType::Ethernet, &f, 0, 0),
        Err(ParseError::NotIpMpls(0))
    );
    // Cisco HDLC keepalive (SLARP, 0x8035).
    assert_eq!(
        parse_frame(LinkType::CiscoHdlc, &[0x8f, 0, 0x80, 0x35, 0, 0], 0, 0),
        Err(ParseError::NotIpEtherType(0x8035))
    );
    assert_eq!(
        parse_frame(LinkType::CiscoHdlc, &[0x0f, 0, 0x08], 0, 0),
        Err(ParseError::truncated(Layer::CiscoHdlc, 4, 3))
    );
}
