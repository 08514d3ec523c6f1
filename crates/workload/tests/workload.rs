//! The workload keeps its promises, measured from the bytes it produces:
//! determinism, the statistics of the spec, and K triggers and P patterns
//! per packet (checked by the monitor's own index and by a direct filter
//! evaluation).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use clarion_engine::{Monitor, MonitorConfig};
use clarion_lang::spec::{EventSpec, Filter};
use clarion_wire::{parse_frame, FlowKey, LinkType, PacketRecord};
use clarion_workload::{layout, FlowSizes, TriggerSpec, Workload, WorkloadSpec};

fn records(w: &Workload) -> Vec<PacketRecord> {
    w.iter()
        .map(|(d, ts)| {
            parse_frame(LinkType::Ethernet, d, ts, d.len() as u32).expect("generated frames parse")
        })
        .collect()
}

/// Attack flows use hosts 32–63 of their group's block.
fn is_dos(k: &FlowKey) -> bool {
    k.src_ip[3] & 0x3f >= layout::HOSTS as u8
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let spec = WorkloadSpec {
        packets: 20_000,
        dos_fraction: 0.1,
        dos_packets: 3,
        burst: 2,
        ..WorkloadSpec::default()
    };
    let (a, b) = (spec.generate().unwrap(), spec.generate().unwrap());
    assert_eq!(a.bytes(), b.bytes());
    assert_eq!(a.frames(), b.frames());
    let c = WorkloadSpec {
        seed: 2,
        ..spec.clone()
    }
    .generate()
    .unwrap();
    assert_eq!(a.len(), c.len());
    assert_ne!(a.bytes(), c.bytes());

    // The streamed pcap is the in-memory workload, byte for byte.
    let mut streamed = Vec::new();
    spec.write_pcap(&mut streamed).unwrap();
    let mut written = Vec::new();
    a.write_pcap(&mut written).unwrap();
    assert_eq!(streamed, written);
    assert_eq!(streamed.len(), 24 + a.len() * 16 + a.bytes().len());
}

#[test]
fn statistics_match_the_spec() {
    // 2 s of packet time at 100 kpps: ~2,000 arrivals, 300 active flows.
    let spec = WorkloadSpec {
        packets: 200_000,
        rate_pps: 100_000,
        dos_fraction: 0.2,
        dos_packets: 4,
        ..WorkloadSpec::default()
    };
    let w = spec.generate().unwrap();
    let recs = records(&w);
    let duration_s = (recs[recs.len() - 1].ts_ns - recs[0].ts_ns) as f64 / 1e9;
    assert!((duration_s - 2.0).abs() < 1e-3);

    // Attack share and packets per attack flow.
    let dos: Vec<&PacketRecord> = recs.iter().filter(|r| is_dos(&r.key)).collect();
    assert_eq!(dos.len(), 40_000);
    let mut per_dos_flow: HashMap<FlowKey, u32> = HashMap::new();
    for r in &dos {
        *per_dos_flow.entry(r.key).or_default() += 1;
    }
    assert!(per_dos_flow.values().all(|&n| n == 4));
    assert_eq!(per_dos_flow.len(), 10_000);

    // Ordinary flows: lifetime spans give the active average, first sightings the arrivals.
    let mut span: HashMap<FlowKey, (u64, u64)> = HashMap::new();
    for r in recs.iter().filter(|r| !is_dos(&r.key)) {
        let e = span.entry(r.key).or_insert((r.ts_ns, r.ts_ns));
        e.1 = r.ts_ns;
    }
    let active = span.values().map(|(a, b)| (b - a) as f64).sum::<f64>() / 1e9 / duration_s;
    assert!((active - 300.0).abs() < 30.0, "average active flows {active}");
    let arrivals = (span.len() as f64 - 300.0) / duration_s;
    assert!((arrivals - 1_000.0).abs() < 100.0, "arrival rate {arrivals}/s");
    let stats = w.stats();
    assert!((stats.mean_active_flows - 300.0).abs() < 30.0, "{stats:?}");
    assert!(
        (stats.arrivals as f64 / duration_s - 1_000.0).abs() < 100.0,
        "{stats:?}"
    );

    // Burst 1: no two consecutive ordinary packets of one flow.
    let ordinary: Vec<FlowKey> = recs.iter().filter(|r| !is_dos(&r.key)).map(|r| r.key).collect();
    assert!(ordinary.windows(2).all(|p| p[0] != p[1]));

    // Retransmissions show up as repeated sequence numbers.
    assert!(stats.retransmissions > 0);
}

#[test]
fn bursts_have_the_requested_length() {
    let spec = WorkloadSpec {
        packets: 100_000,
        burst: 4,
        ..WorkloadSpec::default()
    };
    let recs = records(&spec.generate().unwrap());
    let runs = 1 + recs.windows(2).filter(|p| p[0].key != p[1].key).count();
    let mean = recs.len() as f64 / runs as f64;
    assert!((mean - 4.0).abs() < 0.05, "mean burst {mean}");
}

/// Whether a filter selects a key, written from the language reference.
fn filter_matches(f: &Filter, k: &FlowKey) -> bool {
    fn in_prefix(p: &clarion_lang::spec::IpPrefix, a: IpAddr) -> bool {
        match (p.addr, a) {
            (IpAddr::V4(net), IpAddr::V4(a)) => {
                let mask = if p.len == 0 {
                    0
                } else {
                    u32::MAX << (32 - u32::from(p.len))
                };
                u32::from(net) & mask == u32::from(a) & mask
            }
            _ => false,
        }
    }
    f.src_ip.is_none_or(|p| in_prefix(&p, k.src_addr()))
        && f.dst_ip.is_none_or(|p| in_prefix(&p, k.dst_addr()))
        && f.proto.is_none_or(|p| p == k.proto)
        && f.src_port
            .is_none_or(|r| k.has_ports() && (r.lo..=r.hi).contains(&k.src_port))
        && f.dst_port
            .is_none_or(|r| k.has_ports() && (r.lo..=r.hi).contains(&k.dst_port))
        && f.vlan.is_none()
}

fn check_k_and_p(t: TriggerSpec, dos_fraction: f64) {
    let spec = WorkloadSpec {
        // Three 10 ms windows.
        packets: 30_000,
        rate_pps: 1_000_000,
        groups: t.traffic_groups(),
        dos_fraction,
        ..WorkloadSpec::default()
    };
    let set = t.synthesize(&spec).expect("valid trigger spec");
    let events: Vec<EventSpec> = clarion_lang::check(&set.text)
        .unwrap_or_else(|d| panic!("{}", d.render("synthesized", &set.text, false)));
    assert_eq!(events.len(), t.triggers as usize);

    // Direct evaluation: every flow key matches exactly K events.
    let w = spec.generate().expect("valid workload");
    let recs = records(&w);
    let keys: HashSet<FlowKey> = recs.iter().map(|r| r.key).collect();
    for k in &keys {
        let n = events
            .iter()
            .filter(|e| e.filters.iter().any(|f| filter_matches(f, k)))
            .count();
        assert_eq!(n, t.per_packet as usize, "{t:?}: flow {k:?} matches {n}");
    }

    // The monitor agrees, and its index has exactly P patterns.
    let mut m = Monitor::new(MonitorConfig::default());
    for e in events {
        m.install(e).expect("synthesized events install");
    }
    assert_eq!(m.patterns(), t.patterns as usize, "{t:?}");
    let mut out = Vec::new();
    for r in &recs {
        m.process(r, &mut out);
    }
    m.finish(&mut out);
    let c = m.counters();
    assert_eq!(c.flows_created, keys.len() as u64);
    assert_eq!(
        c.triggers_matched,
        u64::from(t.per_packet) * c.flows_created,
        "{t:?}"
    );
    assert_eq!(c.packets_untracked, 0);
    assert!(c.reports > 0, "thresholds never reached: {c:?}");
}

#[test]
fn every_packet_matches_k_triggers_over_p_patterns() {
    check_k_and_p(TriggerSpec::default(), 0.1);
    // A remainder (N mod K ≠ 0), K > P, P = 1, the most patterns.
    for (n, k, p) in [
        (100, 7, 5),
        (64, 16, 4),
        (32, 4, 1),
        (376, 2, 188),
        (16_384, 16, 32),
    ] {
        check_k_and_p(
            TriggerSpec {
                triggers: n,
                per_packet: k,
                patterns: p,
                ..TriggerSpec::default()
            },
            0.0,
        );
    }
}

/// Packets per ordinary flow, largest first.
fn flow_sizes(w: &Workload) -> Vec<u64> {
    let mut per: HashMap<FlowKey, u64> = HashMap::new();
    for r in records(w).iter().filter(|r| !is_dos(&r.key)) {
        *per.entry(r.key).or_default() += 1;
    }
    let mut sizes: Vec<u64> = per.into_values().collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    sizes
}

/// Share of the packets the largest tenth of the flows carry.
fn top_tenth_share(sizes: &[u64]) -> f64 {
    let top: u64 = sizes[..sizes.len().div_ceil(10)].iter().sum();
    top as f64 / sizes.iter().sum::<u64>() as f64
}

#[test]
fn pareto_flow_sizes_are_heavy_tailed_and_seeded() {
    // 2,000 flows that outlive the 2 s run (mean life 200 s), 100 packets each on average.
    let uniform = WorkloadSpec {
        packets: 200_000,
        rate_pps: 100_000,
        active_flows: 2_000,
        arrival_rate: 10.0,
        ..WorkloadSpec::default()
    };
    let pareto = WorkloadSpec {
        flow_sizes: FlowSizes::Pareto { alpha: 1.2 },
        ..uniform.clone()
    };
    let (u, p) = (uniform.generate().unwrap(), pareto.generate().unwrap());

    // Uniform: the top tenth carries little more than a tenth (Poisson spread around 100).
    let su = flow_sizes(&u);
    let share_u = top_tenth_share(&su);
    assert!(share_u < 0.15, "uniform: top 10% of flows carry {share_u:.3}");

    // Pareto α = 1.2: about 0.1^(1 - 1/1.2) = 68% in theory; a finite sample's
    // largest draws vary, so the bound leaves room. Most flows are mice: the
    // median flow sends well under the mean, and the largest is an elephant.
    let sp = flow_sizes(&p);
    let share_p = top_tenth_share(&sp);
    assert!(share_p > 0.5, "pareto:1.2: top 10% of flows carry {share_p:.3}");
    let mean = sp.iter().sum::<u64>() as f64 / sp.len() as f64;
    let median = sp[sp.len() / 2] as f64;
    assert!(median < 0.5 * mean, "median {median}, mean {mean}");
    assert!(sp[0] as f64 > 20.0 * mean, "largest {} vs mean {mean}", sp[0]);
    // Heavier tails with a smaller shape.
    let heavier = WorkloadSpec {
        flow_sizes: FlowSizes::Pareto { alpha: 1.05 },
        ..uniform.clone()
    };
    assert!(top_tenth_share(&flow_sizes(&heavier.generate().unwrap())) > share_p);

    // Active flows and arrivals follow the spec as with uniform sizes.
    assert_eq!(p.stats().initial_flows, 2_000);
    assert!(
        (p.stats().mean_active_flows - 2_000.0).abs() < 50.0,
        "{:?}",
        p.stats()
    );

    // Seeded: same spec, same bytes; another seed, other bytes; the stream is the buffer.
    let again = pareto.generate().unwrap();
    assert_eq!(p.bytes(), again.bytes());
    assert_eq!(p.frames(), again.frames());
    let other = WorkloadSpec {
        seed: 2,
        ..pareto.clone()
    };
    assert_ne!(p.bytes(), other.generate().unwrap().bytes());
    let mut streamed = Vec::new();
    pareto.write_pcap(&mut streamed).unwrap();
    let mut written = Vec::new();
    p.write_pcap(&mut written).unwrap();
    assert_eq!(streamed, written);

    // Bursts still change flow: no two consecutive ordinary packets of one flow.
    let keys: Vec<FlowKey> = records(&p).iter().map(|r| r.key).collect();
    assert!(keys.windows(2).all(|w| w[0] != w[1]));
}

#[test]
fn uniform_flow_sizes_keep_the_bytes_of_before() {
    // SHA-256 would need a dependency; FNV-1a over the default workload's
    // frames, taken before flow sizes existed (commit 468ecec), pins them.
    let w = WorkloadSpec {
        packets: 50_000,
        ..WorkloadSpec::default()
    }
    .generate()
    .unwrap();
    let fnv = w.bytes().iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    assert_eq!(fnv, EXPECTED_FNV, "got {fnv:#x}");
}

const EXPECTED_FNV: u64 = 0x08dc_0b9a_a10d_cb38;
