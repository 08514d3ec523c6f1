//! Whole-stack tests: byte fixtures, builder round trips, and properties.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::*;
use crate::build::{Fragment, FrameSpec, IpPair, Ipv6Ext, TcpSpec, Transport, Vlan};
use crate::tcp_flags;

/// Ethernet + IPv4 (total 52) + TCP with MSS and window scale, 4 payload bytes,
/// padded with 6 bytes beyond the IP length.
fn eth_ipv4_tcp() -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];
    f.extend_from_slice(&[
        0x45, 0x02, 0x00, 0x34, 0x00, 0x01, 0x40, 0x00, 0x37, 0x06, 0x00, 0x00, // ECN 2, TTL 55
        192, 0, 2, 1, 198, 51, 100, 7,
    ]);
    f.extend_from_slice(&[
        0x30, 0x39, 0x01, 0xbb, 0, 0, 0, 1, 0, 0, 0, 2, // 12345 -> 443, seq 1, ack 2
        0x70, 0x12, 0x72, 0x10, 0, 0, 0, 0, // doff 7, SYN|ACK, window 29200
        0x02, 0x04, 0x05, 0xb4, 0x01, 0x03, 0x03, 0x09, // MSS 1460, NOP, WS 9
        0xde, 0xad, 0xbe, 0xef,
    ]);
    f.extend_from_slice(&[0; 6]);
    f
}

#[test]
fn test_parse_ethernet_ipv4_tcp() {
    let f = eth_ipv4_tcp();
    let r = parse_frame(LinkType::Ethernet, &f, 7, f.len() as u32).unwrap();
    assert_eq!(r.ts_ns, 7);
    assert_eq!(
        r.key,
        FlowKey::new(
            Ipv4Addr::new(192, 0, 2, 1).into(),
            Ipv4Addr::new(198, 51, 100, 7).into(),
            proto::TCP,
            Some((12345, 443)),
            None
        )
    );
    assert_eq!((r.size, r.volume, r.ttl, r.ecn), (52, 4, 55, 2));
    assert!(!r.is_later_fragment);
    assert_eq!(r.captured_len, f.len() as u32);
    let tcp = r.tcp.unwrap();
    assert_eq!((tcp.seq, tcp.ack, tcp.window), (1, 2, 29200));
    assert_eq!(tcp.flags, tcp_flags::SYN | tcp_flags::ACK);
    assert_eq!((tcp.wscale, tcp.mss), (Some(9), Some(1460)));
}

#[test]
fn snap_length_keeps_header_sizes() {
    let f = eth_ipv4_tcp();
    // Cut inside the payload: sizes still come from the headers.
    let r = parse_frame(LinkType::Ethernet, &f[..64], 0, f.len() as u32).unwrap();
    assert_eq!((r.size, r.volume, r.captured_len), (52, 4, 64));
    // Cut inside the TCP options: the header is still there, the cut option is lost.
    let r = parse_frame(LinkType::Ethernet, &f[..58], 0, 0).unwrap();
    assert_eq!(r.tcp.map(|t| (t.mss, t.wscale)), Some((Some(1460), None)));
    // Cut inside the fixed TCP header: that header is needed.
    assert_eq!(
        parse_frame(LinkType::Ethernet, &f[..40], 0, 0),
        Err(ParseError::truncated(Layer::Tcp, 20, 6))
    );
}

#[test]
fn every_prefix_is_truncated_or_parsed() {
    let f = eth_ipv4_tcp();
    for len in 0..f.len() {
        match parse_frame(LinkType::Ethernet, &f[..len], 0, 0) {
            Ok(r) => assert!(len >= 54, "parsed at {len}: {r:?}"),
            Err(ParseError::Truncated { .. }) => assert!(len < 54),
            Err(e) => panic!("unexpected error at {len}: {e}"),
        }
    }
}

#[test]
fn later_ipv4_fragment_has_no_ports() {
    let mut f = eth_ipv4_tcp();
    f[20] = 0x00;
    f[21] = 0x10; // offset 16 units = 128 bytes
    f.truncate(40); // a later fragment needs nothing after the IP header
    let r = parse_frame(LinkType::Ethernet, &f, 0, 0).unwrap();
    assert!(r.is_later_fragment);
    assert!(!r.key.has_ports());
    assert_eq!(r.key.proto, proto::TCP);
    assert_eq!((r.size, r.volume), (52, 32));
    assert_eq!(r.tcp, None);
}

#[test]
fn impossible_ipv4_lengths() {
    let mut f = eth_ipv4_tcp();
    f[17] = 19;
    assert_eq!(
        parse_frame(LinkType::Ethernet, &f, 0, 0),
        Err(ParseError::malformed(
            Layer::Ipv4,
            Malformation::Ipv4TotalLen {
                total: 19,
                header: 20
            }
        ))
    );
    let mut f = eth_ipv4_tcp();
    f[14] = 0x43;
    assert_eq!(
        parse_frame(LinkType::Ethernet, &f, 0, 0),
        Err(ParseError::malformed(Layer::Ipv4, Malformation::Ipv4HeaderLen(3)))
    );
    let mut f = eth_ipv4_tcp();
    f[14] = 0x65;
    assert_eq!(
        parse_frame(LinkType::Ethernet, &f, 0, 0),
        Err(ParseError::malformed(Layer::Ipv4, Malformation::IpVersion(6)))
    );
    let mut f = eth_ipv4_tcp();
    f[46] = 0x30;
    assert_eq!(
        parse_frame(LinkType::Ethernet, &f, 0, 0),
        Err(ParseError::malformed(Layer::Tcp, Malformation::TcpDataOffset(3)))
    );
}

#[test]
fn l4_header_beyond_ip_length_saturates_volume() {
    let mut f = eth_ipv4_tcp();
    f[17] = 40; // total length 40: the 28-byte TCP header overruns it
    let r = parse_frame(LinkType::Ethernet, &f, 0, 0).unwrap();
    assert_eq!((r.size, r.volume), (40, 0));
}

#[test]
fn not_ip() {
    let mut arp = vec![0xff; 12];
    arp.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    let e = parse_frame(LinkType::Ethernet, &arp, 0, 0).unwrap_err();
    assert!(e.is_not_ip());
    assert_eq!(e, ParseError::NotIpEtherType(0x0806));
    let mut lldp = vec![0x01, 0x80, 0xc2, 0, 0, 0x0e, 2, 0, 0, 0, 0, 1, 0x88, 0xcc];
    lldp.extend_from_slice(&[0; 20]);
    assert_eq!(
        parse_frame(LinkType::Ethernet, &lldp, 0, 0),
        Err(ParseError::NotIpEtherType(0x88cc))
    );
    // 802.3 with an LLC header: the "EtherType" is a length.
    let mut llc = vec![0; 12];
    llc.extend_from_slice(&[0x00, 0x26, 0x42, 0x42, 0x03]);
    assert!(parse_frame(LinkType::Ethernet, &llc, 0, 0)
        .unwrap_err()
        .is_not_ip());
    assert!(parse_frame(LinkType::Null, &[7, 0, 0, 0], 0, 0)
        .unwrap_err()
        .is_not_ip());
}

/// IPv6 + hop-by-hop + AH + fragment (offset 0) + UDP, 10 payload bytes.
fn ipv6_ext_udp(frag_offset_units: u16) -> Vec<u8> {
    let mut f = vec![0x60, 0x30, 0, 0, 0, 0, 0x00, 0x20]; // TC 0x03 (CE), payload set below, HBH, hop 32
    f.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    f.extend_from_slice(&"2001:db8::9".parse::<Ipv6Addr>().unwrap().octets());
    f.extend_from_slice(&[51, 0, 0, 0, 0, 0, 0, 0]); // HBH, 8 bytes
    f.extend_from_slice(&[44, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // AH, 12 bytes
    let off = (frag_offset_units << 3) | 1;
    f.extend_from_slice(&[17, 0, (off >> 8) as u8, off as u8, 0, 0, 0, 5]); // fragment header
    f.extend_from_slice(&[0x13, 0x88, 0x00, 0x35, 0, 18, 0, 0]); // UDP 5000 -> 53
    f.extend_from_slice(&[0xab; 10]);
    let payload = (f.len() - 40) as u16;
    f[4..6].copy_from_slice(&payload.to_be_bytes());
    f
}

#[test]
fn test_parse_ipv6_extension_chain() {
    let f = ipv6_ext_udp(0);
    let r = parse_frame(LinkType::Ipv6, &f, 0, 0).unwrap();
    assert!(r.key.is_ipv6());
    assert_eq!(r.key.proto, proto::UDP);
    assert_eq!((r.key.src_port, r.key.dst_port), (5000, 53));
    assert_eq!((r.size, r.volume, r.ttl, r.ecn), (86, 10, 32, 3));
    assert!(!r.is_later_fragment);
    // Same packet as a later fragment: the "UDP header" is fragment data.
    let r = parse_frame(LinkType::RawIp, &ipv6_ext_udp(3), 0, 0).unwrap();
    assert!(r.is_later_fragment && !r.key.has_ports());
    assert_eq!((r.key.proto, r.volume), (proto::UDP, 18));
}

#[test]
fn ipv6_cut_extension_header_is_truncated() {
    let f = ipv6_ext_udp(0);
    assert_eq!(
        parse_frame(LinkType::Ipv6, &f[..52], 0, 0),
        Err(ParseError::truncated(Layer::Ipv6Ext, 12, 4))
    );
}

#[test]
fn ipv6_jumbogram_esp_and_unknown_protocols() {
    let mut f = ipv6_ext_udp(0);
    f[4] = 0;
    f[5] = 0;
    let r = parse_frame(LinkType::Ipv6, &f, 0, 0).unwrap();
    assert_eq!((r.size, r.volume), (86, 10));
    // ESP ends the walk and is the protocol.
    let mut f = ipv6_ext_udp(0);
    f[48] = 50;
    let r = parse_frame(LinkType::Ipv6, &f, 0, 0).unwrap();
    assert_eq!((r.key.proto, r.volume, r.key.has_ports()), (50, 26, false));
    // An unknown protocol right after the header: volume is the IP payload.
    let mut f = ipv6_ext_udp(0);
    f[6] = 132;
    let r = parse_frame(LinkType::Ipv6, &f, 0, 0).unwrap();
    assert_eq!((r.key.proto, r.volume), (132, 46));
}

#[test]
fn icmp_header_need_not_be_captured() {
    let spec = FrameSpec {
        transport: Transport::Icmp { msg_type: 8, code: 0 },
        payload_len: 56,
        ..FrameSpec::default()
    };
    let f = spec.build();
    let r = parse_frame(LinkType::Ethernet, &f[..36], 0, 0).unwrap();
    assert_eq!((r.size, r.volume, r.key.has_ports()), (84, 56, false));
}

fn v6pair() -> IpPair {
    IpPair::V6 {
        src: "fe80::1".parse().unwrap(),
        dst: "2001:db8::2".parse().unwrap(),
    }
}

fn sample_specs() -> Vec<FrameSpec> {
    let tcp = TcpSpec {
        src_port: 1,
        dst_port: 2,
        seq: 3,
        ack: 4,
        flags: tcp_flags::SYN,
        window: 5,
        wscale: Some(15),
        mss: Some(536),
    };
    let transports = [
        Transport::Tcp(tcp),
        Transport::Tcp(TcpSpec { wscale: None, ..tcp }),
        Transport::Udp {
            src_port: 53,
            dst_port: 5353,
        },
        Transport::Icmp {
            msg_type: 11,
            code: 0,
        },
        Transport::Icmpv6 {
            msg_type: 128,
            code: 0,
        },
        Transport::Other(47),
    ];
    let mut specs = Vec::new();
    for link in LinkType::ALL {
        for v6 in [false, true] {
            if (link == LinkType::Ipv4 && v6) || (link == LinkType::Ipv6 && !v6) {
                continue;
            }
            for transport in transports {
                let mut s = FrameSpec {
                    link,
                    transport,
                    payload_len: 100,
                    ttl: 3,
                    ecn: 1,
                    ..FrameSpec::default()
                };
                if v6 {
                    s.ip = v6pair();
                    s.ipv6_ext = vec![Ipv6Ext::HopByHop(0), Ipv6Ext::DestOpts(2), Ipv6Ext::Auth(1)];
                } else {
                    s.ipv4_options = vec![0x94, 0x04, 0, 0, 1]; // router alert, NOP
                }
                s.vlans = vec![Vlan::dot1ad(10), Vlan { tpid: 0x9100, id: 20 }, Vlan::dot1q(4095)];
                specs.push(s.clone());
                s.fragment = Some(Fragment {
                    offset: 0,
                    more: true,
                });
                specs.push(s.clone());
                s.fragment = Some(Fragment {
                    offset: 1480,
                    more: false,
                });
                specs.push(s);
            }
        }
    }
    specs
}

#[test]
fn round_trip_every_link_and_transport() {
    let specs = sample_specs();
    assert!(specs.len() > 200);
    for (i, spec) in specs.iter().enumerate() {
        let frame = spec.build();
        let got = parse_frame(spec.link, &frame, i as u64, frame.len() as u32);
        assert_eq!(got, Ok(spec.record(i as u64)), "spec {spec:?}");
    }
}

#[test]
fn record_matches_hand_values() {
    let spec = FrameSpec {
        vlans: vec![Vlan::dot1q(7)],
        payload_len: 10,
        ..FrameSpec::default()
    };
    let r = spec.record(0);
    assert_eq!(
        (r.size, r.volume, r.key.vlan, r.key.has_vlan()),
        (50, 10, 7, true)
    );
}

pub(super) fn arb_spec() -> impl Strategy<Value = FrameSpec> {
    let link = proptest::sample::select(LinkType::ALL.to_vec());
    let vlan = (
        prop_oneof![Just(0x8100u16), Just(0x88a8), Just(0x9100)],
        0u16..4096,
    )
        .prop_map(|(tpid, id)| Vlan { tpid, id });
    let ip = prop_oneof![
        any::<([u8; 4], [u8; 4])>().prop_map(|(s, d)| IpPair::V4 {
            src: s.into(),
            dst: d.into()
        }),
        any::<([u8; 16], [u8; 16])>().prop_map(|(s, d)| IpPair::V6 {
            src: s.into(),
            dst: d.into()
        }),
    ];
    let tcp = any::<(u16, u16, u32, u32, u8, u16, Option<u8>, Option<u16>)>().prop_map(
        |(src_port, dst_port, seq, ack, flags, window, wscale, mss)| {
            Transport::Tcp(TcpSpec {
                src_port,
                dst_port,
                seq,
                ack,
                flags,
                window,
                wscale,
                mss,
            })
        },
    );
    let transport = prop_oneof![
        tcp,
        any::<(u16, u16)>().prop_map(|(src_port, dst_port)| Transport::Udp { src_port, dst_port }),
        any::<(u8, u8)>().prop_map(|(msg_type, code)| Transport::Icmp { msg_type, code }),
        any::<(u8, u8)>().prop_map(|(msg_type, code)| Transport::Icmpv6 { msg_type, code }),
        // Protocols that are not extension headers, so the walk stops at them.
        prop_oneof![Just(47u8), Just(50), Just(59), Just(132), Just(255)].prop_map(Transport::Other),
    ];
    let ext = prop_oneof![
        any::<u8>().prop_map(Ipv6Ext::HopByHop),
        any::<u8>().prop_map(Ipv6Ext::Routing),
        any::<u8>().prop_map(Ipv6Ext::DestOpts),
        any::<u8>().prop_map(Ipv6Ext::Auth),
    ];
    let frag = proptest::option::of(
        (0u16..8192, any::<bool>()).prop_map(|(o, more)| Fragment { offset: o * 8, more }),
    );
    (
        (link, proptest::collection::vec(vlan, 0..4), ip, transport),
        (0usize..70000, any::<u8>(), 0u8..4, any::<u32>()),
        (
            proptest::collection::vec(any::<u8>(), 0..44),
            proptest::collection::vec(ext, 0..4),
            frag,
        ),
    )
        .prop_map(
            |((link, vlans, mut ip, transport), (payload_len, ttl, ecn, ip_id), (opts, ext, fragment))| {
                // The IPv4-only and IPv6-only links cannot carry the other family.
                ip = match (link, ip) {
                    (LinkType::Ipv4, IpPair::V6 { .. }) => IpPair::V4 {
                        src: [1; 4].into(),
                        dst: [2; 4].into(),
                    },
                    (LinkType::Ipv6, IpPair::V4 { .. }) => IpPair::V6 {
                        src: [1; 16].into(),
                        dst: [2; 16].into(),
                    },
                    (_, ip) => ip,
                };
                FrameSpec {
                    link,
                    vlans,
                    ip,
                    transport,
                    payload_len,
                    ttl,
                    ecn,
                    ip_id,
                    ipv4_options: opts,
                    ipv6_ext: ext,
                    fragment,
                }
            },
        )
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(link in 0usize..LinkType::ALL.len(), bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let link = LinkType::ALL[link];
        let _ = parse_frame(link, &bytes, 0, bytes.len() as u32);
    }

    #[test]
    fn mutated_frames_never_panic(
        idx in 0usize..1000,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>(),
    ) {
        let specs = sample_specs();
        let spec = &specs[idx % specs.len()];
        let mut frame = spec.build();
        for (at, v) in flips {
            let n = frame.len();
            frame[at % n] = v;
        }
        let cut = cut % (frame.len() + 1);
        let _ = parse_frame(spec.link, &frame[..cut], 0, 0);
    }

    #[test]
    fn built_frames_parse_to_their_record(spec in arb_spec(), ts in any::<u64>()) {
        let frame = spec.build();
        prop_assert_eq!(frame.len(), spec.frame_len());
        prop_assert_eq!(parse_frame(spec.link, &frame, ts, 0), Ok(spec.record(ts)));
    }
}

/// Ethernet + IPv4 + TCP (no options) or UDP, 10 payload bytes: the fast path's shape.
/// The frame shapes the fast path takes.
#[derive(Clone, Copy, Debug)]
enum Shape {
    Udp,
    Tcp,
    /// TCP with NOP, NOP, timestamps.
    TcpTimestamps,
}

const SHAPES: [Shape; 3] = [Shape::Udp, Shape::Tcp, Shape::TcpTimestamps];

fn plain_frame(shape: Shape) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];
    let (total, p): (u8, u8) = match shape {
        Shape::Udp => (38, 17),
        Shape::Tcp => (50, 6),
        Shape::TcpTimestamps => (62, 6),
    };
    f.extend_from_slice(&[
        0x45, 0x01, 0, total, 0, 1, 0x40, 0, 64, p, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    f.extend_from_slice(&[0x30, 0x39, 0x01, 0xbb]);
    match shape {
        Shape::Udp => f.extend_from_slice(&[0, 18, 0, 0]),
        Shape::Tcp => f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2, 0x50, 0x18, 0x72, 0x10, 0, 0, 0, 0]),
        Shape::TcpTimestamps => {
            f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2, 0x80, 0x18, 0x72, 0x10, 0, 0, 0, 0]);
            f.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 8]);
        }
    }
    f.extend_from_slice(&[7; 10]);
    f
}

#[test]
fn fast_path_takes_plain_frames() {
    for shape in SHAPES {
        let f = plain_frame(shape);
        let mut rec = PacketRecord::default();
        assert!(fast::ethernet_ipv4(&f, 5, &mut rec), "plain frame");
        assert_eq!(Ok(rec), parse_general(LinkType::Ethernet, &f, 5));
        assert_eq!(rec.volume, 10);
        // Every field is written: a stale record in the slot changes nothing.
        let mut stale = PacketRecord {
            is_later_fragment: true,
            key: FlowKey::new(
                Ipv6Addr::LOCALHOST.into(),
                Ipv6Addr::LOCALHOST.into(),
                6,
                Some((1, 2)),
                Some(3),
            ),
            ..rec
        };
        stale.tcp = Some(TcpInfo::default());
        assert!(fast::ethernet_ipv4(&f, 5, &mut stale));
        assert_eq!(stale, rec);
    }
    // Options, tags, IPv6 and fragments go the general way.
    let mut f = eth_ipv4_tcp();
    let mut rec = PacketRecord::default();
    assert!(!fast::ethernet_ipv4(&f, 0, &mut rec));
    f[14] = 0x46;
    assert!(!fast::ethernet_ipv4(&f, 0, &mut rec));
    assert_eq!(rec, PacketRecord::default());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn fast_path_agrees_with_the_general_path(
        shape in 0usize..3,
        flips in proptest::collection::vec((0usize..80, any::<u8>()), 0..4),
        cut in 0usize..90,
    ) {
        let mut frame = plain_frame(SHAPES[shape]);
        for (at, v) in flips {
            let n = frame.len();
            // Mostly single bits, so that many mutants stay near the fast path's shape.
            frame[at % n] ^= if v & 0x80 == 0 { 1 << (v & 7) } else { v };
        }
        let frame = &frame[..cut.min(frame.len())];
        let general = parse_general(LinkType::Ethernet, frame, 9);
        prop_assert_eq!(parse_frame(LinkType::Ethernet, frame, 9, 0), general);
        // In place, over a slot holding another packet's record.
        let mut slot = PacketRecord { ts_ns: 1, size: 2, tcp: Some(TcpInfo::default()), ..PacketRecord::default() };
        let into = parse_frame_into(LinkType::Ethernet, frame, 9, 0, &mut slot).map(|()| slot);
        prop_assert_eq!(into, general);
    }
}
