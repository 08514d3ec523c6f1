//! Adaptive sampling, end to end through the exporter, in a deterministic
//! simulation: an injected clock gives the packets' arrival times as the
//! wall clock and charges `cost` ns of export work per timed piece of
//! work, so the true export CPU of an interval is `cost` times the packets
//! the collector destination was handed (plus one flush), counted by the
//! destination and not by the controller.
//!
//! - Acceptance: offered load R, 2R, R (each over the budget), then one
//!   that needs half the budget: once settled (1 s after each change), the
//!   true export CPU of every 500 ms stays within ±20% of the budget, and
//!   2 s into the last load the ratio is back to exactly 1 and every taken
//!   packet is exported.
//! - Every header received by a local UDP collector carries a ratio that
//!   was in force when its packet was taken (⌊1/f⌋ or ⌈1/f⌉ of the
//!   fraction `f` before the packet), is the header of that very packet,
//!   and the ratios sum to an unbiased count of the packets taken.
//! - In real time (real clock, real sends): a budget far under the work
//!   raises the ratio, a budget over it never does.
//!
//! Packets: the shared capture pathspider_real.pcap when present, else
//! generated frames; their times are rewritten to the simulated arrivals.

use std::net::UdpSocket;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clarion_capture::{CaptureFile, PacketSource};
use clarion_export::sampling::ratios;
use clarion_export::{ExportConfig, Exporter, Frame, SamplingConfig, WorkClock};
use clarion_headers::{decode_datagram, HeaderRecord};
use clarion_wire::build::{FrameSpec, IpPair, Transport};
use clarion_wire::{parse_frame, LinkType, PacketRecord};

const INTERVAL: u64 = 100_000_000;
const EPOCH: u64 = 1_700_000_000_000_000_000;

struct Packet {
    link: LinkType,
    data: Vec<u8>,
    orig_len: u32,
    rec: PacketRecord,
}

/// pathspider_real.pcap's IP packets, or generated TCP and UDP frames.
fn packets() -> Vec<Packet> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures/pathspider_real.pcap");
    let mut out = Vec::new();
    match CaptureFile::open(&path) {
        Ok(mut src) => {
            while let Some(r) = src.next_packet() {
                let Ok(p) = r else { continue };
                if let Ok(rec) = parse_frame(p.link, p.data, p.ts_ns, p.orig_len) {
                    out.push(Packet {
                        link: p.link,
                        data: p.data.to_vec(),
                        orig_len: p.orig_len,
                        rec,
                    });
                }
            }
        }
        Err(e) => eprintln!("no capture at {} ({e}): generated packets only", path.display()),
    }
    if out.is_empty() {
        for i in 0..512u16 {
            let spec = FrameSpec {
                ip: IpPair::V4 {
                    src: [10, 0, (i >> 8) as u8, i as u8].into(),
                    dst: [10, 1, 0, 1].into(),
                },
                transport: if i % 3 == 0 {
                    Transport::Udp {
                        src_port: 1000 + i,
                        dst_port: 53,
                    }
                } else {
                    FrameSpec::default().transport
                },
                payload_len: usize::from(i % 7) * 100,
                ..FrameSpec::default()
            };
            let data = spec.build();
            out.push(Packet {
                link: LinkType::Ethernet,
                orig_len: data.len() as u32,
                rec: spec.record(0),
                data,
            });
        }
    }
    out
}

/// The simulation's wall clock and per-work cost.
#[derive(Default)]
struct Sim {
    now_ns: AtomicU64,
    cost_ns: AtomicU64,
}

struct SimClock(Arc<Sim>);

impl WorkClock for SimClock {
    fn now_ns(&mut self) -> u64 {
        self.0.now_ns.load(Ordering::Relaxed)
    }
    fn begin(&mut self) {}
    fn end(&mut self) -> (u64, u64) {
        (
            self.0.cost_ns.load(Ordering::Relaxed),
            self.0.now_ns.load(Ordering::Relaxed),
        )
    }
}

const POLICY: &str = "\
export transport
  filter proto = tcp
  filter proto = udp
  send headers to collector 127.0.0.1 port PORT
";

fn exporter(budget: f64, port: u16, sim: &Arc<Sim>, seed: u64) -> Exporter {
    let policies =
        clarion_lang::check_exports(&POLICY.replace("PORT", &port.to_string())).expect("the policy");
    let config = ExportConfig {
        sampling: SamplingConfig {
            budget: Some(budget),
            seed,
            ..SamplingConfig::default()
        },
        ..ExportConfig::default()
    };
    Exporter::with_clock(&policies, &config, Box::new(SimClock(sim.clone()))).expect("an exporter")
}

fn takes(r: &PacketRecord) -> bool {
    matches!(r.key.proto, 6 | 17)
}

/// One closed 100 ms interval of the simulation.
#[derive(Debug, Clone, Copy)]
struct Interval {
    end_ns: u64,
    /// True export CPU: packets handed to the collector and one flush, at `cost` each.
    share: f64,
    taken: u64,
    exported: u64,
    fraction: f64,
}

/// Offers packets at `rate` per second for each phase's duration; the
/// exporter is ticked every 100 ms of (simulated) time, as the host does.
fn simulate(ex: &mut Exporter, sim: &Sim, pkts: &[Packet], phases: &[(f64, u64)]) -> Vec<Interval> {
    let cost = sim.cost_ns.load(Ordering::Relaxed);
    let mut out = Vec::new();
    let (mut t, mut next_tick, mut i) = (0f64, INTERVAL, 0usize);
    let mut taken = 0u64;
    let mut at_tick = (0u64, 0u64);
    let mut phase_start = 0f64;
    for &(rate, dur) in phases {
        let gap = 1e9 / rate;
        let end = phase_start + dur as f64;
        while t < end {
            let now = t as u64;
            while now >= next_tick {
                sim.now_ns.store(next_tick, Ordering::Relaxed);
                ex.tick(EPOCH + next_tick);
                let s = ex.stats();
                let handed = s.destinations[0].packets;
                out.push(Interval {
                    end_ns: next_tick,
                    share: ((handed - at_tick.0) + 1) as f64 * cost as f64 / INTERVAL as f64,
                    taken: taken - at_tick.1,
                    exported: handed - at_tick.0,
                    fraction: s.sampling.expect("a sampler").fraction,
                });
                at_tick = (handed, taken);
                next_tick += INTERVAL;
            }
            sim.now_ns.store(now, Ordering::Relaxed);
            let p = &pkts[i % pkts.len()];
            i += 1;
            let rec = PacketRecord {
                ts_ns: EPOCH + now,
                ..p.rec
            };
            taken += u64::from(takes(&rec));
            ex.offer(&rec, &frame(p));
            t += gap;
        }
        phase_start = end;
    }
    out
}

fn frame(p: &Packet) -> Frame<'_> {
    Frame {
        link: p.link,
        data: &p.data,
        orig_len: p.orig_len,
        interface: 0,
    }
}

/// A collector port nobody reads (the kernel drops what overflows it; the
/// sends still cost the exporter what they cost).
fn sink_port() -> (UdpSocket, u16) {
    let s = UdpSocket::bind("127.0.0.1:0").expect("a local socket");
    let port = s.local_addr().expect("its address").port();
    (s, port)
}

const SECOND: u64 = 1_000_000_000;
const SETTLE: u64 = SECOND;

/// The acceptance check of one run: R, 2R, R over the budget, then half the budget.
fn accept(budget: f64, rate: f64, overload: f64, seed: u64) {
    let pkts = packets();
    let taken_share = pkts.iter().filter(|p| takes(&p.rec)).count() as f64 / pkts.len() as f64;
    // The cost that makes R's taken packets, all exported, `overload` budgets.
    let cost = (overload * budget * 1e9 / (rate * taken_share)).round() as u64;
    let sim = Arc::new(Sim::default());
    sim.cost_ns.store(cost, Ordering::Relaxed);
    let (_sink, port) = sink_port();
    let mut ex = exporter(budget, port, &sim, seed);
    let phase = 3 * SECOND;
    // The last load is half the budget, all exported.
    let fits = rate * 0.5 / overload;
    let phases = [(rate, phase), (2.0 * rate, phase), (rate, phase), (fits, phase)];
    let iv = simulate(&mut ex, &sim, &pkts, &phases);
    let what = format!("budget {budget} rate {rate} overload {overload} cost {cost} ns");
    for (k, _) in phases.iter().enumerate().take(3) {
        let from = k as u64 * phase + SETTLE;
        let to = (k as u64 + 1) * phase;
        let settled: Vec<&Interval> = iv.iter().filter(|i| i.end_ns > from && i.end_ns <= to).collect();
        assert_eq!(settled.len(), 20, "{what}");
        for w in settled.chunks(5) {
            let share = w.iter().map(|i| i.share).sum::<f64>() / w.len() as f64;
            assert!(
                (share - budget).abs() <= 0.2 * budget,
                "{what}: phase {k}: 500 ms ending at {} ms used {share:.4} of a core: {:#?}",
                w[w.len() - 1].end_ns / 1_000_000,
                settled
            );
        }
        let mean = settled.iter().map(|i| i.share).sum::<f64>() / settled.len() as f64;
        eprintln!(
            "{what}: phase {k} (rate {:.0}): settled share {mean:.4} ({:+.1}% of budget), fraction {:.4}",
            phases[k].0,
            (mean / budget - 1.0) * 100.0,
            settled[settled.len() - 1].fraction
        );
    }
    // The last load fits: back to every packet, after at most 16 additive
    // steps of 1/16 (1.6 s).
    let from = 3 * phase + 2 * SECOND;
    for i in iv.iter().filter(|i| i.end_ns > from) {
        assert_eq!(i.fraction, 1.0, "{what}: {i:?}");
        assert_eq!(i.exported, i.taken, "{what}: {i:?}");
    }
    let s = ex.sampling().expect("a sampler");
    assert_eq!(s.ratio, 1.0, "{what}");
    assert!(s.decreases >= 2 && s.increases >= 2, "{what}: {s:?}");
}

/// Trident's Fig. 8 demo: 10% of a core, 150 then 300 kpps.
#[test]
fn export_cpu_stays_within_a_fifth_of_the_budget_and_the_ratio_returns_to_one() {
    accept(0.1, 150_000.0, 1.5, 1);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(6))]
    #[test]
    fn any_budget_rate_and_overload(
        budget in 0.02f64..0.6,
        rate in 20_000f64..120_000.0,
        overload in 1.2f64..6.0,
        seed in 0u64..1000,
    ) {
        accept(budget, rate, overload, seed);
    }
}

/// Every received header is the header of an offered packet (found by its
/// unique time) with a ratio of the fraction in force before it.
#[test]
fn every_header_carries_the_ratio_in_force() {
    let pkts = packets();
    let receiver = UdpSocket::bind("127.0.0.1:0").expect("a local socket");
    receiver
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("a timeout");
    let port = receiver.local_addr().expect("its address").port();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65_536];
        while let Ok(n) = receiver.recv(&mut buf) {
            decode_datagram(&buf[..n], &mut got).expect("a datagram that decodes");
        }
        got
    });
    let sim = Arc::new(Sim::default());
    // 20 kpps offered, each exported packet 40 µs: 0.8 of a core against
    // 0.1, then 0.05 (the fraction climbs back to 1): many ratios.
    sim.cost_ns.store(40_000, Ordering::Relaxed);
    let mut ex = exporter(0.1, port, &sim, 9);
    // Per offered packet (by time): the ratios allowed, if taken.
    let mut allowed: std::collections::HashMap<u64, (PacketRecord, u32, u32)> = Default::default();
    let mut taken = 0u64;
    let gap = 50_000u64;
    let n = 60_000u64;
    let mut next_tick = INTERVAL;
    for k in 0..n {
        // 20 kpps, then 1.25 kpps.
        let now = if k < n / 2 {
            k * gap
        } else {
            (n / 2) * gap + (k - n / 2) * gap * 16
        };
        while now >= next_tick {
            sim.now_ns.store(next_tick, Ordering::Relaxed);
            ex.tick(EPOCH + next_tick);
            next_tick += INTERVAL;
        }
        sim.now_ns.store(now, Ordering::Relaxed);
        let p = &pkts[k as usize % pkts.len()];
        let rec = PacketRecord {
            ts_ns: EPOCH + now,
            ..p.rec
        };
        let f = ex.sampling().expect("a sampler").fraction;
        let (lo, hi) = if f >= 1.0 { (1, 1) } else { ratios(f) };
        if takes(&rec) {
            taken += 1;
            allowed.insert(rec.ts_ns, (rec, lo, hi));
        }
        ex.offer(&rec, &frame(p));
        // Paced, so that loopback's socket buffer keeps up.
        if k % 256 == 255 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    ex.finish();
    let got = reader.join().expect("the reader");
    let stats = ex.stats();
    let d = &stats.destinations[0];
    assert_eq!(
        got.len() as u64,
        d.packets,
        "every header handed was received: {d:?}"
    );
    let s = stats.sampling.expect("a sampler");
    assert_eq!(s.exported, d.packets);
    assert_eq!(s.exported + s.skipped, taken);
    let mut ratios_seen = std::collections::BTreeSet::new();
    let mut weight = 0u64;
    let mut last_ts = 0;
    for h in &got {
        let (rec, lo, hi) = allowed.get(&h.ts_ns).expect("a header of an offered packet");
        assert!(h.ts_ns > last_ts, "in order, each once");
        last_ts = h.ts_ns;
        assert!(
            h.sample_ratio == *lo || h.sample_ratio == *hi,
            "ratio {} not of the fraction in force ({lo} or {hi})",
            h.sample_ratio
        );
        // The wire length is the frame's (checked in real_captures.rs).
        assert_eq!(
            *h,
            HeaderRecord::from_packet(rec, 0, h.sample_ratio).with_wire_len(h.wire_len)
        );
        ratios_seen.insert(h.sample_ratio);
        weight += u64::from(h.sample_ratio);
    }
    assert_eq!(weight, d.represented);
    assert!(
        ratios_seen.len() >= 3 && ratios_seen.contains(&1),
        "{ratios_seen:?}"
    );
    assert!(s.skipped > taken / 4, "sampling took effect: {s:?}");
    // Σ ratio estimates the packets taken: each term has variance ≤ ratio.
    let sd = got
        .iter()
        .map(|h| f64::from(h.sample_ratio).powi(2))
        .sum::<f64>()
        .sqrt();
    assert!(
        (weight as f64 - taken as f64).abs() <= 6.0 * sd,
        "Σ ratio {weight} against {taken} taken (sd {sd:.0})"
    );
    eprintln!(
        "{} headers of {taken} taken packets, ratios {ratios_seen:?}, Σ ratio {weight} (sd {sd:.0})",
        got.len()
    );
}
