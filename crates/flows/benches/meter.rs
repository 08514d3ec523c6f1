//! Throughput of the flow meter's two stages.
//!
//! - `aggregator`: microflow records per second into [`Aggregator::absorb`]
//!   alone (TurboFlow's §2.7 figure: 13.73 M mFRs/s on a Xeon D-1517), for
//!   1 M microflow records of 100 k or 10 k flows, one in 8 ending its record.
//! - `meter/synthetic`: packets per second through [`FlowMeter`] (default
//!   4096-slot direct-mapped cache), 1 M packets of 20 k flows in trains
//!   (a flow sends 1 to 16 packets in a row; flows drawn with a skew).
//! - `meter/pathspider_real`: the same on `pathspider_real.pcap` parsed
//!   into memory first (skipped when the capture is absent).
//!
//! Run: `cargo bench -p clarion-flows --bench meter`.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};

use clarion_flows::{Aggregator, FlowConfig, FlowMeter, Microflow};
use clarion_records::{EndReason, FlowRecord};
use clarion_wire::{FlowKey, PacketRecord, TcpInfo};

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

fn key(f: u32) -> FlowKey {
    let b = f.to_be_bytes();
    FlowKey::new(
        [10, b[1], b[2], b[3]].into(),
        [192, 168, b[3], 1].into(),
        6,
        Some((1024 + (f % 50_000) as u16, 443)),
        None,
    )
}

fn microflows(n: usize, flows: u32) -> Vec<(Microflow, Option<EndReason>)> {
    let mut r = Rng(0x1234_5678);
    let mut ts = 1_000_000_000u64;
    (0..n)
        .map(|_| {
            ts += 100;
            let f = r.below(u64::from(flows)) as u32;
            let mut record = FlowRecord::of_packet(key(f), ts, 1500, 0x10);
            record.packets = 1 + r.below(8);
            record.bytes = record.packets * 1500;
            let end = (r.below(8) == 0).then_some(EndReason::End);
            (
                Microflow {
                    record,
                    last_clock: ts,
                    record_first_clock: ts,
                },
                end,
            )
        })
        .collect()
}

fn synthetic_packets(n: usize, flows: u32) -> Vec<PacketRecord> {
    let mut r = Rng(0x9e37_79b9);
    let mut ts = 1_000_000_000u64;
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        // Skewed choice: the minimum of two uniform draws favours low numbers.
        let f = r.below(u64::from(flows)).min(r.below(u64::from(flows))) as u32;
        for _ in 0..=r.below(16) {
            ts += 200;
            v.push(PacketRecord {
                ts_ns: ts,
                key: key(f),
                size: 64 + r.below(1400) as u32,
                tcp: Some(TcpInfo {
                    flags: 0x10,
                    ..TcpInfo::default()
                }),
                ..PacketRecord::default()
            });
        }
    }
    v.truncate(n);
    v
}

fn bench_aggregator(c: &mut Criterion) {
    let mut g = c.benchmark_group("aggregator");
    g.sample_size(20);
    // 100 k flows: a 14 MB table, beyond the last-level cache of small
    // CPUs; 10 k flows: one that fits.
    for flows in [100_000, 10_000] {
        let mfrs = microflows(1_000_000, flows);
        g.throughput(Throughput::Elements(mfrs.len() as u64));
        g.bench_function(format!("absorb_{}k_flows", flows / 1000), |b| {
            let mut out = Vec::with_capacity(mfrs.len());
            // One aggregator throughout: its table keeps its size after a
            // flush, so each iteration measures a warm table.
            let mut agg = Aggregator::new();
            b.iter(|| {
                out.clear();
                for (m, end) in &mfrs {
                    agg.absorb(m, *end, &mut out);
                }
                agg.flush(&mut out);
                black_box(out.len())
            })
        });
    }
    g.finish();
}

fn run_meter(packets: &[PacketRecord], out: &mut Vec<FlowRecord>) -> usize {
    let mut m = FlowMeter::new(FlowConfig::default()).expect("default config");
    out.clear();
    m.process_batch(packets, out);
    m.finish(out);
    out.len()
}

fn bench_meter(c: &mut Criterion) {
    let mut g = c.benchmark_group("meter");
    g.sample_size(20);
    let synthetic = synthetic_packets(1_000_000, 20_000);
    g.throughput(Throughput::Elements(synthetic.len() as u64));
    let mut out = Vec::new();
    g.bench_function("synthetic", |b| {
        b.iter(|| black_box(run_meter(&synthetic, &mut out)))
    });
    let real = clarion_testdata::capture("pathspider_real.pcap").map(|p| clarion_testdata::records(&p));
    match real {
        Some(packets) => {
            g.throughput(Throughput::Elements(packets.len() as u64));
            g.bench_function("pathspider_real", |b| {
                b.iter(|| black_box(run_meter(&packets, &mut out)))
            });
        }
        None => eprintln!("skipped: pathspider_real.pcap is absent"),
    }
    g.finish();
}

criterion_group!(benches, bench_aggregator, bench_meter);
criterion_main!(benches);
