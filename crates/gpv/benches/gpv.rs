//! GPV throughput: packets/s through the cache building GPVs, and GPVs/s
//! through the app runtime with the three apps (together and each alone),
//! on synthetic traffic and on `pathspider_real.pcap` held in memory.
//!
//! *Flow reports 0.6 M GPVs/s a core for its agent (GPV reassembly in a
//! hash map) and 1.5 M/s for the profiler. The synthetic traffic sends
//! trains of 1-32 packets from 20000 flows with skewed popularity, so
//! the default cache (16384 slots) sees collisions, wide-buffer pressure
//! and splits.

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::path::Path;

use clarion_capture::{CaptureFile, PacketSource};
use clarion_gpv::{app_by_name, AppRuntime, CacheConfig, Gpv, GpvCache, GpvReader, GpvWriter};
use clarion_wire::{parse_frame, FlowKey, PacketRecord, TcpInfo};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn synthetic() -> Vec<PacketRecord> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut out = Vec::with_capacity(500_000);
    let mut ts = 1_700_000_000_000_000_000u64;
    while out.len() < 500_000 {
        // Skewed popularity: the product of two uniforms favours low ids.
        let flow = ((rand() % 20_000) * (rand() % 20_000) / 20_000) as u32;
        let key = FlowKey::new(
            Ipv4Addr::from(0x0a00_0000 + (flow % 2000)).into(),
            Ipv4Addr::from(0xc0a8_0000 + flow / 2000).into(),
            6,
            Some((10_000 + (flow % 50_000) as u16, 443)),
            None,
        );
        for i in 0..1 + rand() % 32 {
            ts += rand() % 20_000;
            let seq = i as u32 * 1448;
            out.push(PacketRecord {
                ts_ns: ts,
                key,
                size: 40 + (rand() % 1461) as u32,
                tcp: Some(TcpInfo {
                    seq,
                    ack: 1,
                    flags: 0x10,
                    ..TcpInfo::default()
                }),
                ..PacketRecord::default()
            });
        }
    }
    out
}

fn pathspider() -> Option<Vec<PacketRecord>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures/pathspider_real.pcap");
    let mut file = CaptureFile::open(&path).ok()?;
    let mut out = Vec::new();
    while let Some(Ok(p)) = file.next_packet() {
        if let Ok(rec) = parse_frame(p.link, p.data, p.ts_ns, p.orig_len) {
            out.push(rec);
        }
    }
    Some(out)
}

fn gpvs_of(packets: &[PacketRecord]) -> Vec<Gpv> {
    let mut cache = GpvCache::new(CacheConfig::default()).expect("default config");
    let mut out = Vec::new();
    packets.iter().for_each(|p| cache.push(p, &mut out));
    cache.finish(&mut out);
    out
}

fn bench(c: &mut Criterion) {
    let mut inputs = vec![("synthetic", synthetic())];
    match pathspider() {
        Some(p) => inputs.push(("pathspider_real", p)),
        None => eprintln!("skipped pathspider_real: no capture"),
    }
    let mut g = c.benchmark_group("cache");
    for (name, packets) in &inputs {
        g.throughput(Throughput::Elements(packets.len() as u64));
        g.bench_with_input(BenchmarkId::new("packets", name), packets, |b, packets| {
            let mut out = Vec::with_capacity(packets.len());
            b.iter(|| {
                let mut cache = GpvCache::new(CacheConfig::default()).expect("default config");
                out.clear();
                packets.iter().for_each(|p| cache.push(p, &mut out));
                cache.finish(&mut out);
                black_box(out.len())
            })
        });
    }
    for (name, packets) in &inputs {
        g.throughput(Throughput::Elements(packets.len() as u64));
        let no_scan = CacheConfig {
            scan_interval_ns: 0,
            ..CacheConfig::default()
        };
        g.bench_with_input(
            BenchmarkId::new("packets_no_scan", name),
            packets,
            |b, packets| {
                let mut out = Vec::with_capacity(packets.len());
                b.iter(|| {
                    let mut cache = GpvCache::new(no_scan).expect("valid config");
                    out.clear();
                    packets.iter().for_each(|p| cache.push(p, &mut out));
                    cache.finish(&mut out);
                    black_box(out.len())
                })
            },
        );
    }
    g.finish();

    let mut g = c.benchmark_group("apps");
    for (name, packets) in &inputs {
        let gpvs = gpvs_of(packets);
        eprintln!(
            "{name}: {} packets, {} GPVs ({:.1} packets a GPV)",
            packets.len(),
            gpvs.len(),
            packets.len() as f64 / gpvs.len() as f64
        );
        g.throughput(Throughput::Elements(gpvs.len() as u64));
        let sets: [(&str, &[&str]); 4] = [
            ("all", &["profiler", "classifier", "microburst"]),
            ("profiler", &["profiler"]),
            ("classifier", &["classifier"]),
            ("microburst", &["microburst"]),
        ];
        for (set, apps) in sets {
            g.bench_with_input(BenchmarkId::new(set, name), &gpvs, |b, gpvs| {
                b.iter(|| {
                    let mut rt = AppRuntime::new();
                    for a in apps {
                        rt.add(app_by_name(a).expect("known app")).expect("unique");
                    }
                    gpvs.iter().for_each(|g| rt.on_gpv(g));
                    black_box(rt.gpvs())
                })
            });
        }
        // Decoding a GPV file in memory.
        let mut w = GpvWriter::new(Vec::new()).expect("memory");
        gpvs.iter().for_each(|g| w.write(g).expect("memory"));
        let bytes = w.finish().expect("memory");
        g.bench_with_input(BenchmarkId::new("read_file", name), &bytes, |b, bytes| {
            b.iter(|| {
                black_box(
                    GpvReader::new(&bytes[..])
                        .expect("header")
                        .filter(|g| g.is_ok())
                        .count(),
                )
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(std::time::Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
