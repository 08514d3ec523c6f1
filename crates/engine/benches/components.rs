//! The monitor's parts, each alone (through the public API, parsing excluded):
//!
//! - `flow_lookup`: packets of already-known flows and no trigger: the
//!   per-packet floor (clock, counters, flow-table probe), for a table that
//!   fits the caches (300 flows) and one that does not (200,000 flows).
//! - `trigger_match`: every packet starts a new flow, so each is matched
//!   against the tuple-space index of 4,096 triggers in 8 or 32 mask
//!   patterns and interned into its trigger set.
//! - `sweep`: one epoch's gather, test and report over 10,000 active flows
//!   each matched by 8 of 1,024 triggers; and over 10,000 listed flows of
//!   which 1,000 sent in the epoch (the rest idle until the flow timeout).
//!
//! Run: `cargo bench -p clarion-engine --bench components`.

use std::net::Ipv4Addr;

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};

use clarion_engine::{Monitor, MonitorConfig};
use clarion_wire::{FlowKey, PacketRecord};

const T0: u64 = 1_700_000_000_000_000_000;
const EPOCH: u64 = 10_000_000;

fn record(flow: u32, ts_ns: u64) -> PacketRecord {
    let src = Ipv4Addr::from(0x0a00_0000 | (flow & 0x00ff_ffff));
    let dst = Ipv4Addr::new(10, 200, (flow % 7) as u8, 1);
    PacketRecord {
        ts_ns,
        key: FlowKey::new(
            src.into(),
            dst.into(),
            6,
            Some((10_000 + (flow % 50_000) as u16, 80)),
            None,
        ),
        size: 50,
        volume: 10,
        ttl: 64,
        ..PacketRecord::default()
    }
}

/// `n` triggers over `patterns` mask patterns (source prefix lengths 8..=31
/// and with or without the destination port), each flow of `record` matched
/// by `per_flow` of them.
fn events(n: usize, patterns: usize, per_flow: usize) -> String {
    let mut src = String::new();
    for i in 0..n {
        let p = i % patterns;
        let len = 8 + (p / 2) % 24;
        let port = if p.is_multiple_of(2) {
            ""
        } else {
            " and dst_port = 80"
        };
        // Only the first `per_flow` triggers cover 10.0.0.0/8; the rest watch other /8s.
        let net = if i < per_flow { 10 } else { 11 + (i % 200) };
        let mask = u32::MAX << (32 - len);
        let addr = Ipv4Addr::from((net as u32) << 24 & mask);
        src.push_str(&format!(
            "event t{i}\n  filter src_ip in {addr}/{len}{port}\n  when sum(volume) > {}KB\n  every 10ms\n\n",
            100 + i
        ));
    }
    src
}

fn monitor_with(events: &str, capacity: usize) -> Monitor {
    let mut m = Monitor::new(MonitorConfig {
        flow_capacity: capacity,
        synchronous_sweep: false,
        ..MonitorConfig::default()
    });
    for s in clarion_lang::check(events).expect("bench events are valid") {
        m.install(s).expect("bench events install");
    }
    m
}

fn flow_lookup(c: &mut Criterion) {
    let mut g = c.benchmark_group("flow_lookup");
    const BATCH: u32 = 4096;
    g.throughput(Throughput::Elements(u64::from(BATCH)));
    for flows in [300u32, 200_000] {
        let mut m = monitor_with("", 1 << 20);
        let mut out = Vec::new();
        let mut ts = T0;
        for f in 0..flows {
            m.process(&record(f, ts), &mut out);
        }
        let mut next = 0u32;
        g.bench_function(format!("{flows}_flows"), |b| {
            b.iter(|| {
                for _ in 0..BATCH {
                    ts += 1;
                    next = (next + 7919) % flows;
                    m.process(black_box(&record(next, ts)), &mut out);
                }
                m.sweep_step(usize::MAX, &mut out);
                out.clear();
            })
        });
    }
    g.finish();
}

fn trigger_match(c: &mut Criterion) {
    let mut g = c.benchmark_group("trigger_match");
    const BATCH: u32 = 4096;
    g.throughput(Throughput::Elements(u64::from(BATCH)));
    for patterns in [8usize, 32] {
        let evs = events(4096, patterns, 8);
        let template = monitor_with(&evs, 1 << 16);
        assert_eq!(template.patterns(), patterns);
        g.bench_function(format!("4096_triggers_{patterns}_patterns"), |b| {
            b.iter_batched(
                || monitor_with(&evs, 1 << 16),
                |mut m| {
                    let mut out = Vec::new();
                    for f in 0..BATCH {
                        m.process(black_box(&record(f, T0 + u64::from(f))), &mut out);
                    }
                    m
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

/// Times one epoch's sweep; `setup` builds a monitor whose sweep is pending.
fn bench_sweep(
    g: &mut criterion::BenchmarkGroup<criterion::measurement::WallTime>,
    name: &str,
    setup: impl Fn() -> Monitor,
) {
    g.bench_function(name, |b| {
        b.iter_batched(
            || {
                let m = setup();
                assert!(m.sweep_pending());
                m
            },
            |mut m| {
                let mut out = Vec::new();
                m.sweep_step(usize::MAX, &mut out);
                (m, out)
            },
            BatchSize::LargeInput,
        )
    });
}

/// A monitor with these events after one packet of each flow in `flows`,
/// and the first packet of the next epoch, which starts that epoch's sweep.
fn swept_after(events: &str, flows: impl Iterator<Item = u32>) -> Monitor {
    let mut m = monitor_with(events, 1 << 16);
    let mut out = Vec::new();
    for f in flows {
        m.process(&record(f, T0 + u64::from(f)), &mut out);
    }
    m.process(&record(0, T0 + EPOCH), &mut out);
    m
}

fn sweep(c: &mut Criterion) {
    let mut g = c.benchmark_group("sweep");
    const FLOWS: u32 = 10_000;
    g.throughput(Throughput::Elements(u64::from(FLOWS)));
    let evs = events(1024, 32, 8);
    bench_sweep(&mut g, "10000_flows_8_triggers_each", || {
        swept_after(&evs, 0..FLOWS)
    });
    // Trumpet's regime: many triggers, few active flows (300 flows, 8 of
    // 4,096 triggers each): per-trigger costs dominate.
    let many = events(4096, 32, 8);
    bench_sweep(&mut g, "300_flows_4096_triggers", || swept_after(&many, 0..300));
    // Steady state of a long run: most listed flows are idle until the flow
    // timeout frees them; one in ten sent in the swept epoch.
    bench_sweep(&mut g, "10000_listed_1000_active", || {
        let mut m = swept_after(&evs, 0..FLOWS);
        let mut out = Vec::new();
        m.sweep_step(usize::MAX, &mut out);
        for f in (0..FLOWS).step_by(10) {
            m.process(&record(f, T0 + EPOCH + u64::from(f)), &mut out);
        }
        m.process(&record(0, T0 + 2 * EPOCH), &mut out);
        m
    });
    g.finish();
}

criterion_group!(benches, flow_lookup, trigger_match, sweep);
criterion_main!(benches);
