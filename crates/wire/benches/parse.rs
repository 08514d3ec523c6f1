//! Per-packet parse cost over a mix of built frames.
//!
//! The mix is weighted like ordinary traffic: mostly Ethernet/IPv4/TCP data
//! segments, some IPv6, VLAN-tagged, UDP, ICMP and cooked-capture frames.
//! Beside it, the most common frame alone, and the same inside VXLAN.

use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};

use clarion_wire::build::{FrameSpec, IpPair, TcpSpec, Transport, Vlan};
use clarion_wire::{parse_frame, tcp_flags, LinkType};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn mix() -> Vec<(LinkType, Vec<u8>)> {
    let v6 = IpPair::V6 {
        src: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
        dst: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
    };
    let data = Transport::Tcp(TcpSpec {
        src_port: 443,
        dst_port: 50000,
        seq: 1,
        ack: 2,
        flags: tcp_flags::ACK | tcp_flags::PSH,
        window: 501,
        ..TcpSpec::default()
    });
    let syn = Transport::Tcp(TcpSpec {
        src_port: 50000,
        dst_port: 443,
        flags: tcp_flags::SYN,
        window: 64240,
        wscale: Some(7),
        mss: Some(1460),
        ..TcpSpec::default()
    });
    let base = FrameSpec {
        transport: data,
        payload_len: 1448,
        ..FrameSpec::default()
    };
    let specs = vec![
        base.clone(),
        base.clone(),
        base.clone(),
        FrameSpec {
            payload_len: 0,
            ..base.clone()
        },
        FrameSpec {
            transport: syn,
            payload_len: 0,
            ..base.clone()
        },
        FrameSpec {
            ip: v6,
            ..base.clone()
        },
        FrameSpec {
            vlans: vec![Vlan::dot1q(100)],
            ..base.clone()
        },
        FrameSpec {
            transport: Transport::Udp {
                src_port: 53,
                dst_port: 33000,
            },
            payload_len: 120,
            ..base.clone()
        },
        FrameSpec {
            transport: Transport::Icmp { msg_type: 8, code: 0 },
            payload_len: 56,
            ..base.clone()
        },
        FrameSpec {
            link: LinkType::LinuxSll,
            ip: IpPair::V4 {
                src: Ipv4Addr::new(192, 168, 1, 1),
                dst: Ipv4Addr::new(8, 8, 8, 8),
            },
            ..base.clone()
        },
    ];
    specs.iter().map(|s| (s.link, s.build())).collect()
}

/// `inner` (an Ethernet frame) in VXLAN over Ethernet/IPv4/UDP 4789.
fn vxlan(inner: &[u8]) -> Vec<u8> {
    let mut carried = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
    carried.extend_from_slice(inner);
    let spec = FrameSpec {
        transport: Transport::Udp {
            src_port: 49152,
            dst_port: 4789,
        },
        payload_len: carried.len(),
        ..FrameSpec::default()
    };
    let mut f = spec.build();
    let at = f.len() - carried.len();
    f[at..].copy_from_slice(&carried);
    f
}

fn bench_parse(c: &mut Criterion) {
    let frames = mix();
    let mut g = c.benchmark_group("parse_frame");
    g.throughput(Throughput::Elements(frames.len() as u64));
    g.bench_function("mix", |b| {
        b.iter(|| {
            for (link, f) in &frames {
                let _ = black_box(parse_frame(*link, black_box(f), 0, f.len() as u32));
            }
        })
    });
    let (link, f) = &frames[0];
    g.throughput(Throughput::Elements(1));
    g.bench_function("ethernet_ipv4_tcp", |b| {
        b.iter(|| black_box(parse_frame(*link, black_box(f), 0, f.len() as u32)))
    });
    // The same segment inside VXLAN: the tunnel's cost.
    let vxlan = vxlan(f);
    g.bench_function("vxlan_ethernet_ipv4_tcp", |b| {
        b.iter(|| {
            black_box(parse_frame(
                LinkType::Ethernet,
                black_box(&vxlan),
                0,
                vxlan.len() as u32,
            ))
        })
    });
    g.finish();
}

criterion_group!(benches, bench_parse);
criterion_main!(benches);
