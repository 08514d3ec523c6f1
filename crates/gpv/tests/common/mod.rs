//! Shared by the integration tests: generated traffic, real captures, and
//! the cache and file round trips.
#![allow(dead_code)]

use clarion_gpv::{CacheConfig, Gpv, GpvCache, GpvReader, GpvWriter};
use clarion_wire::{FlowKey, PacketRecord, TcpInfo};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Every capture's IP packets, by file name.
pub fn captures() -> Vec<(String, Vec<PacketRecord>)> {
    clarion_testdata::capture_files()
        .into_iter()
        .map(|p| (clarion_testdata::name(&p), clarion_testdata::records(&p)))
        .collect()
}

/// Small caches that force every eviction cause on real traffic.
pub fn small_configs() -> Vec<CacheConfig> {
    vec![
        CacheConfig {
            slots: 7,
            narrow: 2,
            wide: 3,
            pool: 2,
            max_age_ns: 50_000_000,
            scan_interval_ns: 10_000_000,
            max_delta_ns: 20_000_000,
            interface: 3,
        },
        CacheConfig {
            slots: 64,
            narrow: 4,
            wide: 16,
            pool: 8,
            max_age_ns: 1_000_000_000,
            scan_interval_ns: 0,
            max_delta_ns: u32::MAX,
            interface: 0,
        },
        CacheConfig {
            slots: 1,
            narrow: 1,
            wide: 0,
            pool: 0,
            max_age_ns: u64::MAX,
            scan_interval_ns: 0,
            max_delta_ns: 1_000,
            interface: 1,
        },
        CacheConfig::default(),
    ]
}

pub fn build_gpvs(packets: &[PacketRecord], cfg: CacheConfig) -> Vec<Gpv> {
    let mut cache = GpvCache::new(cfg).expect("test fixture");
    let mut out = Vec::new();
    for p in packets {
        cache.push(p, &mut out);
    }
    cache.finish(&mut out);
    out
}

pub fn through_file(gpvs: &[Gpv]) -> Vec<Gpv> {
    let mut w = GpvWriter::new(Vec::new()).expect("test fixture");
    for g in gpvs {
        w.write(g).expect("test fixture");
    }
    let bytes = w.finish().expect("test fixture");
    GpvReader::new(&bytes[..])
        .expect("test fixture")
        .collect::<Result<Vec<_>, _>>()
        .expect("test fixture")
}

fn key_of(flow: u8) -> FlowKey {
    // A few hosts, several flows each; v4 and v6, TCP, UDP and ICMP.
    let host = flow % 5;
    let (src, dst): (IpAddr, IpAddr) = if flow % 7 == 6 {
        (
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, u16::from(host)).into(),
            Ipv6Addr::LOCALHOST.into(),
        )
    } else {
        (
            Ipv4Addr::new(10, 0, 0, host).into(),
            Ipv4Addr::new(192, 168, 1, flow / 5).into(),
        )
    };
    match flow % 3 {
        0 => FlowKey::new(src, dst, 6, Some((1000 + u16::from(flow), 443)), None),
        1 => FlowKey::new(
            src,
            dst,
            17,
            Some((53, 2000 + u16::from(flow))),
            Some(u16::from(flow)),
        ),
        _ => FlowKey::new(src, dst, 1, None, None),
    }
}

/// Generated traffic: packets of up to 24 flows; gaps from 0 to seconds
/// (so ages, scans and delta splits all happen), a clock that sometimes
/// steps back, sizes up to 65535 and beyond.
pub fn traffic() -> impl Strategy<Value = Vec<PacketRecord>> {
    let packet = (
        0u8..24,
        prop_oneof![
            0u64..1_000,
            0u64..5_000_000,
            0u64..3_000_000_000,
            Just(5_000_000_000)
        ],
        0u8..20,
        20u32..70_000,
        any::<(u8, u32, u32)>(),
    );
    prop::collection::vec(packet, 0..300).prop_map(|ps| {
        let mut ts = 1_600_000_000_000_000_000u64;
        ps.into_iter()
            .map(|(flow, gap, back, size, (flags, seq, ack))| {
                // One packet in 20 steps the clock back by up to a millisecond.
                ts = if back == 0 {
                    ts - gap.min(1_000_000)
                } else {
                    ts + gap
                };
                let key = key_of(flow);
                PacketRecord {
                    ts_ns: ts,
                    key,
                    size,
                    tcp: (key.proto == 6).then_some(TcpInfo {
                        seq,
                        ack,
                        flags,
                        ..TcpInfo::default()
                    }),
                    ..PacketRecord::default()
                }
            })
            .collect()
    })
}

pub fn cache_config() -> impl Strategy<Value = CacheConfig> {
    (
        1usize..40,
        1usize..6,
        0usize..10,
        0usize..6,
        prop_oneof![Just(u64::MAX), 1u64..2_000_000_000],
        prop_oneof![Just(0u64), 1u64..500_000_000],
        prop_oneof![Just(u32::MAX), 1u32..100_000_000],
    )
        .prop_map(
            |(slots, narrow, wide, pool, max_age_ns, scan_interval_ns, max_delta_ns)| CacheConfig {
                slots,
                narrow,
                wide,
                pool,
                max_age_ns,
                scan_interval_ns,
                max_delta_ns,
                interface: 9,
            },
        )
}
