//! Encapsulation against the wire crate's frame builder: a frame built
//! with any link type must come out as the Ethernet frame the builder
//! makes for the same packet (the builder's MACs are the synthetic ones),
//! and the parser must read the same record from both.

use clarion_wire::build::{FrameSpec, IpPair, TcpSpec, Transport, Vlan};
use clarion_wire::parse_frame;
use proptest::prelude::*;

use super::*;

#[test]
fn header_bytes() {
    let mut out = vec![0xee; 3];
    encapsulate(Vni::new(0x12_3456).unwrap(), &[1, 2, 3], &mut out);
    assert_eq!(out, [0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0, 1, 2, 3]);
    encapsulate(Vni::new(Vni::MAX).unwrap(), &[], &mut out);
    assert_eq!(out, [0x08, 0, 0, 0, 0xff, 0xff, 0xff, 0]);
    assert!(matches!(Vni::new(1 << 24), Err(MirrorError::Vni(0x100_0000))));
}

#[test]
fn frames_whose_protocol_cannot_be_told() {
    let vni = Vni::new(1).unwrap();
    let mut out = vec![1];
    let null_other_family = [99, 0, 0, 0, 0x45];
    let cases: [(LinkType, &[u8]); 6] = [
        (LinkType::RawIp, &[0x50, 0, 0]),
        (LinkType::RawIp, &[]),
        (LinkType::Null, &null_other_family),
        (LinkType::Loop, &[0, 0]),
        (LinkType::LinuxSll, &[0; 10]),
        // SLL protocol 4 (ETH_P_802_2): an LLC frame, no EtherType.
        (
            LinkType::LinuxSll,
            &[0, 0, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0, 0, 4, 0xaa],
        ),
    ];
    for (link, frame) in cases {
        let e = encapsulate_link(vni, link, frame, None, &mut out).unwrap_err();
        assert!(out.is_empty(), "{link:?}");
        assert!(e.to_string().starts_with("cannot mirror a"), "{e}");
    }
}

fn spec() -> impl Strategy<Value = FrameSpec> {
    let ip = prop_oneof![
        (any::<[u8; 4]>(), any::<[u8; 4]>()).prop_map(|(s, d)| IpPair::V4 {
            src: s.into(),
            dst: d.into()
        }),
        (any::<[u8; 16]>(), any::<[u8; 16]>()).prop_map(|(s, d)| IpPair::V6 {
            src: s.into(),
            dst: d.into()
        }),
    ];
    let transport = prop_oneof![
        (any::<u16>(), any::<u16>()).prop_map(|(s, d)| Transport::Udp {
            src_port: s,
            dst_port: d
        }),
        (any::<u16>(), any::<u16>(), any::<u32>()).prop_map(|(s, d, seq)| Transport::Tcp(TcpSpec {
            src_port: s,
            dst_port: d,
            seq,
            ..TcpSpec::default()
        })),
    ];
    let vlans = prop::collection::vec((0u16..4096).prop_map(Vlan::dot1q), 0..3);
    (
        prop::sample::select(LinkType::ALL.to_vec()),
        ip,
        transport,
        0usize..1500,
        vlans,
    )
        .prop_map(|(link, ip, transport, payload_len, vlans)| FrameSpec {
            link,
            ip,
            transport,
            payload_len,
            vlans,
            ..FrameSpec::default()
        })
}

proptest! {
    #[test]
    fn every_link_type_becomes_the_builders_ethernet_frame(
        spec in spec(),
        vni in 0u32..=Vni::MAX,
        snap in prop::option::of(0usize..200),
    ) {
        // IPv4-only and IPv6-only links carry one family.
        let fits = !matches!(
            (spec.link, spec.ip),
            (LinkType::Ipv4, IpPair::V6 { .. }) | (LinkType::Ipv6, IpPair::V4 { .. })
        );
        prop_assume!(fits);
        let frame = spec.build();
        let eth_spec = FrameSpec {
            link: LinkType::Ethernet,
            // Only EtherType-carrying links keep their tags.
            vlans: if matches!(spec.link, LinkType::Ethernet | LinkType::LinuxSll | LinkType::LinuxSll2) {
                spec.vlans.clone()
            } else {
                Vec::new()
            },
            ..spec.clone()
        };
        let reference = eth_spec.build();
        let vni = Vni::new(vni).unwrap();
        let mut out = Vec::new();
        encapsulate_link(vni, spec.link, &frame, None, &mut out).unwrap();
        prop_assert_eq!(&out[..HEADER_LEN], &[8, 0, 0, 0, (vni.get() >> 16) as u8, (vni.get() >> 8) as u8, vni.get() as u8, 0]);
        prop_assert_eq!(&out[HEADER_LEN..], &reference[..]);
        // The parser reads the same packet from the original and the inner frame.
        let len = frame.len() as u32;
        let a = parse_frame(spec.link, &frame, 7, len).unwrap();
        let b = parse_frame(LinkType::Ethernet, &out[HEADER_LEN..], 7, len).unwrap();
        prop_assert_eq!(a.key, b.key);
        prop_assert_eq!(a.size, b.size);
        // A snap length cuts the inner frame and nothing else.
        encapsulate_link(vni, spec.link, &frame, snap, &mut out).unwrap();
        let n = snap.map_or(reference.len(), |s| s.min(reference.len()));
        prop_assert_eq!(&out[HEADER_LEN..], &reference[..n]);
    }
}
