use super::*;
use crate::checksum;
use crate::{tcp_flags, Ipv4Packet, Ipv6Packet, TcpPacket, UdpPacket};

#[test]
fn test_emit_ethernet_ipv4_udp() {
    let spec = FrameSpec {
        transport: Transport::Udp {
            src_port: 1000,
            dst_port: 53,
        },
        payload_len: 2,
        ttl: 9,
        ecn: 3,
        ip_id: 0x0102,
        ..FrameSpec::default()
    };
    let f = spec.build();
    #[rustfmt::skip]
    let expected: [u8; 44] = [
        0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00,
        0x45, 0x03, 0x00, 0x1e, 0x01, 0x02, 0x40, 0x00, 0x09, 0x11, 0x00, 0x00,
        10, 0, 0, 1, 10, 0, 0, 2,
        0x03, 0xe8, 0x00, 0x35, 0x00, 0x0a, 0x00, 0x00,
        0, 0,
    ];
    // Compare everything but the two checksums, then check those separately.
    let mut masked = f.clone();
    masked[24..26].fill(0);
    masked[40..42].fill(0);
    assert_eq!(masked, expected);
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    assert!(ip.verify_checksum());
    let udp = UdpPacket::new_checked(ip.payload()).unwrap();
    let sum = checksum::sum(
        checksum::pseudo_header(&[10, 0, 0, 1], &[10, 0, 0, 2], 17, 10),
        &f[34..],
    );
    assert_eq!(checksum::finish(sum), 0, "udp checksum {:#06x}", udp.checksum());
}

#[test]
fn tcp_and_icmpv6_checksums_verify() {
    let spec = FrameSpec {
        link: LinkType::RawIp,
        ip: IpPair::V6 {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
        },
        transport: Transport::Tcp(TcpSpec {
            src_port: 5,
            dst_port: 6,
            flags: tcp_flags::SYN,
            wscale: Some(7),
            mss: Some(1220),
            ..TcpSpec::default()
        }),
        payload_len: 33,
        ..FrameSpec::default()
    };
    let f = spec.build();
    let ip = Ipv6Packet::new_checked(&f[..]).unwrap();
    let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
    assert_eq!(tcp.header_len(), 28);
    assert_eq!(tcp.wscale_mss(), (Some(7), Some(1220)));
    let ph = checksum::pseudo_header(&f[8..24], &f[24..40], 6, 61);
    assert_eq!(checksum::finish(checksum::sum(ph, ip.payload())), 0);

    let spec = FrameSpec {
        transport: Transport::Icmpv6 {
            msg_type: 128,
            code: 0,
        },
        ..spec
    };
    let f = spec.build();
    let ph = checksum::pseudo_header(&f[8..24], &f[24..40], 58, 41);
    assert_eq!(checksum::finish(checksum::sum(ph, &f[40..])), 0);
}

#[test]
fn emit_into_appends_without_allocating() {
    let spec = FrameSpec {
        payload_len: 1000,
        ..FrameSpec::default()
    };
    let mut out = Vec::with_capacity(4096);
    let ptr = out.as_ptr();
    spec.emit_into(&mut out);
    spec.emit_into(&mut out);
    assert_eq!(out.len(), 2 * spec.frame_len());
    assert_eq!(out.as_ptr(), ptr);
    assert_eq!(&out[..spec.frame_len()], &out[spec.frame_len()..]);
}

#[test]
fn vlan_stack_layout() {
    let spec = FrameSpec {
        vlans: vec![Vlan::dot1ad(1), Vlan::dot1q(2)],
        ..FrameSpec::default()
    };
    let f = spec.build();
    assert_eq!(&f[12..22], &[0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 2, 0x08, 0x00]);
    // Links without an EtherType ignore the tags.
    let raw = FrameSpec {
        link: LinkType::RawIp,
        ..spec
    };
    assert_eq!(raw.build()[0], 0x45);
    assert!(!raw.flow_key().has_vlan());
}

#[test]
fn oversized_payload_is_clamped() {
    let spec = FrameSpec {
        payload_len: 1 << 20,
        ..FrameSpec::default()
    };
    assert_eq!(spec.ip_len(), 65535);
    let r = spec.record(0);
    assert_eq!((r.size, r.volume), (65535, 65535 - 40));
}

#[test]
fn ipv4_options_are_padded_and_cut() {
    let spec = FrameSpec {
        ipv4_options: vec![1; 5],
        ..FrameSpec::default()
    };
    let f = spec.build();
    assert_eq!(f[14], 0x47);
    assert_eq!(&f[34..42], &[1, 1, 1, 1, 1, 0, 0, 0]);
    let spec = FrameSpec {
        ipv4_options: vec![1; 50],
        ..FrameSpec::default()
    };
    assert_eq!(spec.build()[14], 0x4f);
}
