//! Adaptive sampling in real time: the real clock, real header sends to a
//! local UDP socket.
//!
//! Only assertions a loaded machine cannot break are made: preemption
//! can only lengthen the measured work, so a budget far under the work
//! must raise the ratio; and with no packets at all, the flushes' few
//! microseconds per 100 ms interval let the fraction climb back to 1
//! (16 additive steps), which fails only if the thread is preempted for
//! milliseconds inside a microsecond-long flush in most intervals. The
//! ±20% band is checked in the simulation (tests/aimd.rs): on a shared
//! CI host a real share is not reproducible.
//!
//! The test also prints what an offered packet costs with no budget and
//! with a budget that never samples (the timing's overhead), for
//! docs/exports.md; those figures are not asserted.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use clarion_export::{ExportConfig, Exporter, Frame, SamplingConfig};
use clarion_wire::build::{FrameSpec, IpPair, Transport};
use clarion_wire::{LinkType, PacketRecord};

const EPOCH: u64 = 1_700_000_000_000_000_000;

fn frames() -> Vec<(Vec<u8>, PacketRecord)> {
    (0..256u16)
        .map(|i| {
            let spec = FrameSpec {
                ip: IpPair::V4 {
                    src: [10, 0, 0, i as u8].into(),
                    dst: [10, 1, 0, 1].into(),
                },
                transport: Transport::Udp {
                    src_port: 1000 + i,
                    dst_port: 53,
                },
                payload_len: usize::from(i % 5) * 64,
                ..FrameSpec::default()
            };
            (spec.build(), spec.record(0))
        })
        .collect()
}

fn exporter(port: u16, budget: Option<f64>) -> Exporter {
    let policies = clarion_lang::check_exports(&format!(
        "export dns\n  filter proto = udp\n  send headers to collector 127.0.0.1 port {port}\n"
    ))
    .expect("the policy");
    let config = ExportConfig {
        sampling: SamplingConfig {
            budget,
            ..SamplingConfig::default()
        },
        ..ExportConfig::default()
    };
    Exporter::new(&policies, &config).expect("an exporter")
}

/// Offers packets back to back for `wall`, ticking every 100 ms; ns per offer.
fn flood(ex: &mut Exporter, frames: &[(Vec<u8>, PacketRecord)], wall: Duration) -> f64 {
    let start = Instant::now();
    let mut next_tick = Duration::from_millis(100);
    let mut n = 0u64;
    loop {
        for (data, rec) in frames {
            let t = start.elapsed();
            let rec = PacketRecord {
                ts_ns: EPOCH + t.as_nanos() as u64,
                ..*rec
            };
            ex.offer(
                &rec,
                &Frame {
                    link: LinkType::Ethernet,
                    data,
                    orig_len: data.len() as u32,
                    interface: 0,
                },
            );
            n += 1;
        }
        let t = start.elapsed();
        if t >= next_tick {
            ex.tick(EPOCH + t.as_nanos() as u64);
            next_tick += Duration::from_millis(100);
        }
        if t >= wall {
            return t.as_nanos() as f64 / n as f64;
        }
    }
}

#[test]
fn a_budget_under_the_work_raises_the_ratio_and_idleness_brings_it_back() {
    let sink = UdpSocket::bind("127.0.0.1:0").expect("a local socket");
    let port = sink.local_addr().expect("its address").port();
    let frames = frames();
    let mut ex = exporter(port, Some(0.005));
    flood(&mut ex, &frames, Duration::from_millis(1500));
    let s = ex.sampling().expect("a sampler");
    eprintln!("flooded against 0.5% of a core: {s:?}");
    assert!(s.decreases >= 1 && s.fraction < 0.5, "{s:?}");
    assert!(s.skipped > 0);
    // Idle: only ticks.
    let start = Instant::now();
    while ex.sampling().expect("a sampler").fraction < 1.0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the fraction did not climb back: {:?}",
            ex.sampling()
        );
        std::thread::sleep(Duration::from_millis(20));
        ex.tick(EPOCH + 10_000_000_000 + start.elapsed().as_nanos() as u64);
    }
    let s = ex.sampling().expect("a sampler");
    eprintln!("after {:?} idle: {s:?}", start.elapsed());
    assert_eq!(s.ratio, 1.0);
}

#[test]
fn what_an_offered_packet_costs() {
    let sink = UdpSocket::bind("127.0.0.1:0").expect("a local socket");
    let port = sink.local_addr().expect("its address").port();
    let frames = frames();
    let wall = Duration::from_millis(400);
    let mut plain = exporter(port, None);
    let mut budget = exporter(port, Some(1.0));
    let mut tight = exporter(port, Some(0.01));
    // Alternated, so that the machine's load falls on both alike.
    let (mut a, mut b, mut c) = (f64::MAX, f64::MAX, f64::MAX);
    for _ in 0..3 {
        a = a.min(flood(&mut plain, &frames, wall));
        b = b.min(flood(&mut budget, &frames, wall));
        c = c.min(flood(&mut tight, &frames, wall));
    }
    let s = budget.sampling().expect("a sampler");
    let t = tight.sampling().expect("a sampler");
    eprintln!(
        "ns per offered packet (headers to a collector, best of 3 x {wall:?}): no budget {a:.1}, \
         budget 1.0 (timed, never sampled: fraction {}) {b:.1}, budget 0.01 (fraction {:.4}) {c:.1}",
        s.fraction, t.fraction
    );
}
