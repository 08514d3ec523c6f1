//! Degraded mode's costs (MONA, `monitor/shed.rs`):
//!
//! - `adapt_to`: the end-of-window routine (MONA's ≤ 10 µs) with 50
//!   events and 70 monitoring states (a full set of all 50 events, and
//!   sets of 10, 5 and 1 of them, each with its chain of lighter states).
//! - `overhead`: the same epochs of packets (2,000 flows of 10 packets,
//!   8 events a flow) through a monitor in normal mode and in degraded
//!   mode with nothing shed: the ratio of the two is what `--adapt` costs
//!   when there is no overload; `overhead_300_events`: 200 flows matching
//!   300 events each, where the sweep dominates.
//!
//! Run: `cargo bench -p clarion-engine --bench adapt`.

use std::net::Ipv4Addr;

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};

use clarion_engine::{AdaptConfig, Monitor, MonitorConfig};
use clarion_wire::{FlowKey, PacketRecord};

const T0: u64 = 1_700_000_000_000_000_000;
const EPOCH: u64 = 10_000_000;

fn record(flow: u32, dst_port: u16, ts_ns: u64) -> PacketRecord {
    let src = Ipv4Addr::from(0x0a00_0000 | (flow & 0x00ff_ffff));
    PacketRecord {
        ts_ns,
        key: FlowKey::new(
            src.into(),
            Ipv4Addr::new(10, 200, 0, 1).into(),
            17,
            Some((10_000 + (flow % 50_000) as u16, dst_port)),
            None,
        ),
        size: 200,
        volume: 172,
        ttl: 64,
        ..PacketRecord::default()
    }
}

/// `n` events; event `i` takes destination ports below `(i + 1) · 1000`
/// (so a flow to port `p` matches the events from `p / 1000` on), each
/// reading two statistics.
fn events(n: usize) -> Vec<clarion_lang::spec::EventSpec> {
    let src: String = (0..n)
        .map(|i| {
            format!(
                "event e{i}\n filter dst_port in 0..{}\n when sum(volume) > {} and count(packets) > 1\n per 5tuple\n every 10ms\n",
                (i + 1) * 1000 - 1,
                1_000_000 + i
            )
        })
        .collect();
    clarion_lang::check(&src).expect("bench events check")
}

fn monitor(adapt: bool, evs: &[clarion_lang::spec::EventSpec]) -> Monitor {
    let mut m = Monitor::new(MonitorConfig {
        adapt: adapt.then(AdaptConfig::default),
        ..MonitorConfig::default()
    });
    for e in evs {
        m.install(e.clone()).expect("install");
    }
    m
}

fn adapt_to(c: &mut Criterion) {
    let evs = events(50);
    let mut m = monitor(true, &evs);
    let mut out = Vec::new();
    // Flows to ports matching all 50, the last 10, 5 and 1 events.
    for (k, port) in [500u16, 40_500, 45_500, 49_500].into_iter().enumerate() {
        for f in 0..200u32 {
            for i in 0..5u64 {
                m.process(
                    &record(f + 1000 * k as u32, port, T0 + i * 1000 + u64::from(f)),
                    &mut out,
                );
            }
        }
    }
    m.process(&record(0, 500, T0 + EPOCH), &mut out);
    assert!(m.adapt_to(50.0).is_some(), "no load to adapt to");
    let mut g = c.benchmark_group("adapt_to");
    g.bench_function("50_events_70_states", |b| {
        let mut available = 20.0;
        b.iter(|| {
            // From saturated to no shedding and back.
            available = if available > 400.0 { 20.0 } else { available * 1.1 };
            black_box(m.adapt_to(black_box(available)))
        })
    });
    g.finish();
}

fn overhead(c: &mut Criterion) {
    overhead_with(c, "overhead", 8, 2_000);
    overhead_with(c, "overhead_300_events", 300, 200);
}

/// `n_events` events every flow matches, `flows` flows of 10 packets an epoch.
fn overhead_with(c: &mut Criterion, group: &str, n_events: usize, flows: u32) {
    let src: String = (0..n_events)
        .map(|i| {
            format!(
                "event e{i}\n when sum(volume) > {} and count(packets) > 1\n per 5tuple\n every 10ms\n",
                1_000_000 + i
            )
        })
        .collect();
    let evs = clarion_lang::check(&src).expect("bench events check");
    let per_flow = 10u64;
    let epochs = 4u64;
    let packets: Vec<PacketRecord> = (0..epochs)
        .flat_map(|e| {
            (0..per_flow).flat_map(move |i| {
                (0..flows).map(move |f| {
                    let t = T0 + e * EPOCH + (i * u64::from(flows) + u64::from(f)) * 400;
                    record(f, 500, t)
                })
            })
        })
        .collect();
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(packets.len() as u64));
    for (name, adapt) in [("normal", false), ("degraded_nothing_shed", true)] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || monitor(adapt, &evs),
                |mut m| {
                    let mut out = Vec::new();
                    m.process_batch(&packets, &mut out);
                    m.finish(&mut out);
                    black_box(out.len())
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, adapt_to, overhead);
criterion_main!(benches);
