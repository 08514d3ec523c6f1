//! The meter's records against `clarion_reference::flows`, whatever the
//! cache: generated traffic (few keys, so slots collide; gaps around the
//! timeouts; FIN/RST; timestamps that go back) and every real capture.

use clarion_flows::{FlowConfig, FlowMeter};
use clarion_records::{EndReason, FlowRecord};
use clarion_reference::flows::flow_records;
use clarion_wire::{tcp_flags, FlowKey, PacketRecord, TcpInfo};
use proptest::prelude::*;

type Sortable = (FlowKey, u64, u64, u64, u64, u8, u32, u32, EndReason);

fn sorted(records: &[FlowRecord]) -> Vec<Sortable> {
    let mut v: Vec<Sortable> = records
        .iter()
        .map(|r| {
            (
                r.key,
                r.first_ns,
                r.last_ns,
                r.packets,
                r.bytes,
                r.tcp_flags,
                r.min_size,
                r.max_size,
                r.end_reason,
            )
        })
        .collect();
    v.sort();
    v
}

fn run(packets: &[PacketRecord], config: FlowConfig) -> (Vec<FlowRecord>, clarion_flows::FlowStats) {
    let mut m = FlowMeter::new(config).expect("valid config");
    let mut out = Vec::new();
    // Batches of uneven sizes: a batch boundary must not matter.
    for chunk in packets.chunks(7) {
        m.process_batch(chunk, &mut out);
    }
    m.finish(&mut out);
    (out, m.stats())
}

/// The meter equals the reference, and the totals and counters add up.
fn check(packets: &[PacketRecord], config: FlowConfig) -> Result<(), TestCaseError> {
    let (got, stats) = run(packets, config);
    let want = flow_records(packets, config.idle_timeout_ns, config.active_timeout_ns);
    prop_assert_eq!(sorted(&got), sorted(&want), "config {:?}", config);
    let packets_in: u64 = got.iter().map(|r| r.packets).sum();
    let bytes_in: u64 = got.iter().map(|r| r.bytes).sum();
    let bytes: u64 = packets.iter().map(|p| u64::from(p.size)).sum();
    prop_assert_eq!((packets_in, bytes_in), (packets.len() as u64, bytes));
    prop_assert_eq!(stats.packets, packets.len() as u64);
    prop_assert_eq!(stats.records, got.len() as u64);
    prop_assert_eq!(stats.active_flows, 0);
    prop_assert!(stats.collisions <= stats.microflow_records);
    prop_assert!(stats.records <= stats.microflow_records);
    prop_assert!(stats.microflow_records <= stats.packets);
    Ok(())
}

fn key(n: u8) -> FlowKey {
    match n % 3 {
        // TCP, UDP, and a port-less key (a later fragment or ICMP).
        0 => FlowKey::new(
            [10, 0, 0, n].into(),
            [10, 0, 0, 1].into(),
            6,
            Some((1000, 80)),
            None,
        ),
        1 => FlowKey::new(
            [10, 0, 0, n].into(),
            [10, 0, 0, 1].into(),
            17,
            Some((53, 53)),
            Some(5),
        ),
        _ => FlowKey::new([10, 0, 0, n].into(), [10, 0, 0, 1].into(), 1, None, None),
    }
}

/// One generated packet: key, time step, TCP flags, size.
fn step(keys: u8, idle: u64, active: u64) -> impl Strategy<Value = (u8, i64, u8, u32)> {
    let idle = idle as i64;
    let active = active as i64;
    let gap = prop_oneof![
        3 => 0i64..4,
        2 => Just(idle).prop_flat_map(|i| (i - 1)..=(i + 1)),
        1 => Just(active).prop_flat_map(|a| (a / 4)..=(a / 4 + 2)),
        1 => 0i64..(2 * idle + 2),
        1 => -idle..0, // the clock stays, the stamp goes back
    ];
    let flags = prop_oneof![
        8 => Just(tcp_flags::ACK),
        1 => Just(tcp_flags::FIN | tcp_flags::ACK),
        1 => Just(tcp_flags::RST),
        1 => Just(tcp_flags::SYN),
    ];
    (0..keys, gap, flags, 40u32..1500)
}

fn packets(steps: &[(u8, i64, u8, u32)]) -> Vec<PacketRecord> {
    let mut ts: i64 = 1_000_000;
    steps
        .iter()
        .map(|&(k, gap, flags, size)| {
            ts = (ts + gap).max(0);
            let key = key(k);
            PacketRecord {
                ts_ns: ts as u64,
                key,
                size,
                tcp: (key.proto == 6).then_some(TcpInfo {
                    flags,
                    ..TcpInfo::default()
                }),
                ..PacketRecord::default()
            }
        })
        .collect()
}

fn case() -> impl Strategy<Value = (Vec<(u8, i64, u8, u32)>, FlowConfig)> {
    (
        1u8..8,
        1u64..200,
        1u64..2_000,
        1usize..=16,
        prop_oneof![Just(1usize), Just(2), Just(4)],
    )
        .prop_flat_map(|(keys, idle, active, sets, ways)| {
            let scan = prop_oneof![Just(u64::MAX), 1u64..400];
            (prop::collection::vec(step(keys, idle, active), 0..300), scan).prop_map(move |(steps, scan)| {
                let config = FlowConfig {
                    cache_slots: (sets * ways).min(64),
                    ways: if sets * ways > 64 { 1 } else { ways },
                    idle_timeout_ns: idle,
                    active_timeout_ns: active,
                    scan_interval_ns: scan,
                    hash_seed: idle ^ active,
                };
                (steps, config)
            })
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn generated_traffic_matches_the_reference((steps, config) in case()) {
        check(&packets(&steps), config)?;
    }

    #[test]
    fn the_cache_size_changes_only_the_work((steps, config) in case()) {
        // A one-slot cache and a roomy one: the same records.
        let p = packets(&steps);
        let (a, _) = run(&p, FlowConfig { cache_slots: 1, ways: 1, ..config });
        let (b, sb) = run(&p, FlowConfig { cache_slots: 64, ways: 4, ..config });
        prop_assert_eq!(sorted(&a), sorted(&b));
        prop_assert!(sb.microflow_records >= sb.records);
    }
}

#[test]
fn every_capture_matches_the_reference() {
    let shapes = [(1, 1), (16, 1), (64, 4), (4096, 1)];
    let timeouts = [
        (15_000_000_000, 300_000_000_000),
        (1_000_000_000, 10_000_000_000),
        (50_000_000, 200_000_000),
    ];
    for path in clarion_testdata::capture_files() {
        let packets = clarion_testdata::records(&path);
        assert!(!packets.is_empty(), "{} parses to nothing", path.display());
        for &(slots, ways) in &shapes {
            for &(idle, active) in &timeouts {
                let config = FlowConfig {
                    cache_slots: slots,
                    ways,
                    idle_timeout_ns: idle,
                    active_timeout_ns: active,
                    ..FlowConfig::default()
                };
                if let Err(e) = check(&packets, config) {
                    panic!("{}: {e}", path.display());
                }
            }
        }
        let (records, stats) = run(&packets, FlowConfig::default());
        eprintln!(
            "{}: {} packets, {} records, {} microflow records, eviction ratio {:.3}",
            path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
            packets.len(),
            records.len(),
            stats.microflow_records,
            stats.eviction_ratio()
        );
    }
}
