//! The per-packet path: parse the frame bytes, then match and scatter into
//! the monitor, with the sweep amortized in (epochs advance with the
//! packets' own timestamps at 15 Mpps).
//!
//! Workload (after Trumpet's evaluation): 64-byte frames, 300 active flows,
//! every packet from a different flow than the one before, 1,024 triggers of
//! which each flow matches 8, built from a handful of filter patterns.
//!
//! A second group, `tcp_state`, measures what connection state adds: the
//! same two-way TCP traffic (each flow's data segments with advancing
//! sequence numbers, and the receiver's acks) against the same 1,024
//! triggers, once as above (`plain`) and once with one of each flow's 8
//! triggers reading `is_lost` and `rtt` (`tracked`), so every data flow
//! keeps TCP state and every ack gives an RTT sample.
//!
//! Run: `cargo bench -p clarion-engine --bench per_packet`.

use std::net::Ipv4Addr;

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};

use clarion_engine::{Monitor, MonitorConfig};
use clarion_wire::build::{FrameSpec, IpPair, TcpSpec, Transport};
use clarion_wire::{parse_frame, LinkType};

const FLOWS: u32 = 300;
const BATCH: usize = 4096;
/// 15 Mpps: one packet every 66.7 ns.
const GAP_NS: u64 = 67;

fn flow_addrs(f: u32) -> (Ipv4Addr, Ipv4Addr) {
    (
        Ipv4Addr::new(10, 0, (f % 16) as u8, (f / 16) as u8),
        Ipv4Addr::new(10, 1, (f % 8) as u8, 1),
    )
}

/// Data segments of the 300 flows interleaved with the receivers' acks
/// (one ack per two segments); each frame with its flow number and whether it is an ack.
fn tcp_frames() -> Vec<(Vec<u8>, usize, bool)> {
    (0..BATCH as u32)
        .map(|i| {
            let f = (i / 3).wrapping_mul(7919) % FLOWS;
            let is_ack = i % 3 == 2;
            let (a, b) = flow_addrs(f);
            let (ip, src_port, dst_port, payload_len) = if is_ack {
                (IpPair::V4 { src: b, dst: a }, 80, 10_000 + f as u16, 0)
            } else {
                (IpPair::V4 { src: a, dst: b }, 10_000 + f as u16, 80, 100)
            };
            let spec = FrameSpec {
                ip,
                transport: Transport::Tcp(TcpSpec {
                    src_port,
                    dst_port,
                    flags: 0x10,
                    window: 512,
                    ..TcpSpec::default()
                }),
                payload_len,
                ..FrameSpec::default()
            };
            let mut buf = Vec::new();
            spec.emit_into(&mut buf);
            (buf, f as usize, is_ack)
        })
        .collect()
}

fn frames() -> Vec<Vec<u8>> {
    (0..BATCH as u32)
        .map(|i| {
            let f = i.wrapping_mul(7919) % FLOWS;
            let (src, dst) = flow_addrs(f);
            let spec = FrameSpec {
                ip: IpPair::V4 { src, dst },
                transport: Transport::Tcp(TcpSpec {
                    src_port: 10_000 + (f as u16),
                    dst_port: 80,
                    flags: 0x10,
                    window: 512,
                    ..TcpSpec::default()
                }),
                payload_len: 10,
                ..FrameSpec::default()
            };
            let mut buf = Vec::new();
            spec.emit_into(&mut buf);
            buf
        })
        .collect()
}

/// 1,024 triggers: for each of 128 source /24-ish blocks, 8 triggers of
/// different shapes, so every flow matches 8.
fn events() -> String {
    events_with(None)
}

/// As [`events`]; with `tcp`, one of the 8 triggers each flow matches reads it instead.
fn events_with(tcp: Option<&str>) -> String {
    let mut src = String::new();
    for b in 0..128u32 {
        let net = format!("10.0.{}.0/24", b % 16);
        let extra = b / 16; // 8 variants of the same /24 → distinct triggers
        let mut preds = [
            format!("sum(volume) > {}KB", 100 + extra),
            format!("count(packets) > {}", 1000 + extra),
            format!("max(size) > {}", 1400 + extra),
            format!("sum(packets) > {}", 2000 + extra),
            format!("avg(volume) > {}", 1000 + extra),
            format!("sum(size) > {}MB", 1 + extra),
            format!("min(ttl) < {}", 2 + extra),
            format!("count(ecn == 3) > {}", 10 + extra),
        ];
        if let (Some(p), 0) = (tcp, extra) {
            // The trigger of this block that its flows match (below).
            preds[b as usize % 8] = format!("{p} > 100");
        }
        for (k, p) in preds.iter().enumerate() {
            if k == b as usize % 8 {
                src.push_str(&format!(
                    "event e{b}_{k}\n  filter src_ip in {net}\n  when {p}\n  every 10ms\n\n"
                ));
            } else {
                src.push_str(&format!(
                    "event e{b}_{k}\n  filter src_ip in {net} and dst_port = {}\n  when {p}\n  every 10ms\n\n",
                    9000 + k
                ));
            }
        }
    }
    src
}

fn bench(c: &mut Criterion) {
    let frames = frames();
    let specs = clarion_lang::check(&events()).expect("bench events are valid");
    let mut monitor = Monitor::new(MonitorConfig::default());
    for s in specs {
        monitor.install(s).expect("bench events install");
    }
    let mut ts: u64 = 1_700_000_000_000_000_000;
    let mut reports = Vec::new();
    let mut g = c.benchmark_group("per_packet");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("parse_match_scatter", |b| {
        b.iter_batched_ref(
            || (),
            |()| {
                for f in &frames {
                    ts += GAP_NS;
                    if let Ok(mut rec) = parse_frame(LinkType::Ethernet, f, 0, f.len() as u32) {
                        rec.ts_ns = ts;
                        monitor.process(black_box(&rec), &mut reports);
                    }
                }
                reports.clear();
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("parse_only", |b| {
        b.iter(|| {
            let mut n = 0u32;
            for f in &frames {
                if let Ok(rec) = parse_frame(LinkType::Ethernet, black_box(f), 0, f.len() as u32) {
                    n = n.wrapping_add(rec.volume);
                }
            }
            n
        })
    });
    g.finish();
    let c = monitor.counters();
    eprintln!(
        "monitor after bench: {} packets, {} flows, {} trigger matches ({} per flow), {} sweeps ({} late), {} patterns",
        c.packets,
        c.flows_created,
        c.triggers_matched,
        c.triggers_matched / c.flows_created.max(1),
        c.sweeps_completed,
        c.sweeps_late,
        monitor.patterns()
    );
}

fn monitor_with(events: &str) -> Monitor {
    let mut monitor = Monitor::new(MonitorConfig::default());
    for s in clarion_lang::check(events).expect("bench events are valid") {
        monitor.install(s).expect("bench events install");
    }
    monitor
}

fn bench_tcp_state(c: &mut Criterion) {
    let frames = tcp_frames();
    let mut g = c.benchmark_group("tcp_state");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (name, tcp) in [("plain", None), ("tracked", Some("sum(is_lost) + max(rtt)"))] {
        let mut monitor = monitor_with(&events_with(tcp));
        let mut ts: u64 = 1_700_000_000_000_000_000;
        let mut sent = vec![0u32; FLOWS as usize];
        let mut reports = Vec::new();
        g.bench_function(name, |b| {
            b.iter_batched_ref(
                || (),
                |()| {
                    for (f, flow, is_ack) in &frames {
                        ts += GAP_NS;
                        if let Ok(mut rec) = parse_frame(LinkType::Ethernet, f, 0, f.len() as u32) {
                            rec.ts_ns = ts;
                            if let Some(t) = rec.tcp.as_mut() {
                                // Advance the connection: new data, acks of all sent so far.
                                if *is_ack {
                                    t.ack = sent[*flow];
                                } else {
                                    t.seq = sent[*flow];
                                    sent[*flow] = sent[*flow].wrapping_add(rec.volume);
                                }
                            }
                            monitor.process(black_box(&rec), &mut reports);
                        }
                    }
                    reports.clear();
                },
                BatchSize::SmallInput,
            )
        });
        let c = monitor.counters();
        eprintln!(
            "tcp_state/{name}: {} packets, {} RTT samples, {} segments unlisted",
            c.packets, c.rtt_samples, c.tcp_segments_unlisted
        );
    }
    g.finish();
}

criterion_group!(benches, bench, bench_tcp_state);
criterion_main!(benches);
