//! The cache against two references: the raw packets (every flow's
//! packets come out of its GPVs exactly, in order) and a model of the
//! eviction policy that only counts packets (the same GPV boundaries and
//! causes), plus the invariants of the cache's bounds.

mod common;

use std::collections::HashMap;

use clarion_gpv::{flow_hash, CacheConfig, EvictCause, Gpv, GpvCache, PacketFeatures, TcpSeq};
use clarion_wire::{FlowKey, PacketRecord};
use common::*;
use proptest::prelude::*;

type Seen = (u64, u16, u8, Option<TcpSeq>);

fn per_flow_raw(packets: &[PacketRecord]) -> HashMap<FlowKey, Vec<Seen>> {
    let mut m: HashMap<FlowKey, Vec<Seen>> = HashMap::new();
    for p in packets {
        let size = if p.size > 65535 { 65535 } else { p.size as u16 };
        let tcp = p.tcp.map(|t| TcpSeq {
            seq: t.seq,
            ack: t.ack,
        });
        m.entry(p.key)
            .or_default()
            .push((p.ts_ns, size, p.tcp.map_or(0, |t| t.flags), tcp));
    }
    m
}

fn per_flow_gpvs(gpvs: &[Gpv]) -> HashMap<FlowKey, Vec<Seen>> {
    let mut m: HashMap<FlowKey, Vec<Seen>> = HashMap::new();
    for g in gpvs {
        let v = m.entry(g.header.key).or_default();
        for p in &g.packets {
            v.push((g.header.start_ns + u64::from(p.delta), p.size, p.tcp_flags, p.tcp));
        }
    }
    m
}

/// The policy with counts instead of buffers: which packets end a GPV, and why.
fn model(packets: &[PacketRecord], cfg: &CacheConfig) -> Vec<(FlowKey, u64, u32, EvictCause)> {
    struct S {
        key: FlowKey,
        start: u64,
        n: u32,
        wide: bool,
    }
    let mut slots: Vec<Option<S>> = (0..cfg.slots).map(|_| None).collect();
    let mut free = if cfg.wide == 0 { 0 } else { cfg.pool };
    let mut out = Vec::new();
    let mut clock = 0u64;
    let mut next_scan = 0u64;
    let emit = |s: S, cause, free: &mut usize, out: &mut Vec<_>| {
        if s.wide {
            *free += 1;
        }
        out.push((s.key, s.start, s.n, cause));
    };
    for p in packets {
        clock = clock.max(p.ts_ns);
        if cfg.scan_interval_ns > 0 && clock >= next_scan {
            // On the grid of the interval, aged against the grid point.
            let at = clock - clock % cfg.scan_interval_ns;
            next_scan = at + cfg.scan_interval_ns;
            // Oldest first, ties by slot.
            let mut old: Vec<(u64, usize)> = slots
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.as_ref().map(|s| (s.start, i)))
                .filter(|&(start, _)| at.saturating_sub(start) > cfg.max_age_ns)
                .collect();
            old.sort();
            for (_, i) in old {
                emit(
                    slots[i].take().expect("occupied"),
                    EvictCause::Scan,
                    &mut free,
                    &mut out,
                );
            }
        }
        let i = ((flow_hash(&p.key) as u128 * cfg.slots as u128) >> 64) as usize;
        if let Some(s) = &mut slots[i] {
            let cap = cfg.narrow + if s.wide { cfg.wide } else { 0 };
            let cause = if s.key != p.key {
                Some(EvictCause::Collision)
            } else if p.ts_ns < s.start || p.ts_ns - s.start > u64::from(cfg.max_delta_ns) {
                Some(EvictCause::Split)
            } else if clock - s.start > cfg.max_age_ns {
                Some(EvictCause::Age)
            } else if s.n as usize == cap {
                if !s.wide && free > 0 {
                    free -= 1;
                    s.wide = true;
                    None
                } else {
                    Some(EvictCause::Full)
                }
            } else {
                None
            };
            if let Some(c) = cause {
                emit(slots[i].take().expect("occupied"), c, &mut free, &mut out);
            }
        }
        let s = slots[i].get_or_insert(S {
            key: p.key,
            start: p.ts_ns,
            n: 0,
            wide: false,
        });
        s.n += 1;
    }
    for slot in slots.iter_mut() {
        if let Some(s) = slot.take() {
            emit(s, EvictCause::Flush, &mut free, &mut out);
        }
    }
    out
}

/// Everything the cache promises, checked on one run.
fn check(packets: &[PacketRecord], cfg: CacheConfig) {
    let mut cache = GpvCache::new(cfg).expect("valid config");
    let mut gpvs = Vec::new();
    let mut clock = 0u64;
    for p in packets {
        let before = gpvs.len();
        cache.push(p, &mut gpvs);
        // Bounded latency: a GPV leaves before the clock passes its start
        // by the age bound plus a scan interval (with the scan on).
        for g in &gpvs[before..] {
            if cfg.scan_interval_ns > 0 && g.header.start_ns <= clock {
                assert!(
                    clock - g.header.start_ns <= cfg.max_age_ns.saturating_add(cfg.scan_interval_ns),
                    "GPV {:?} left late",
                    g.header
                );
            }
        }
        clock = clock.max(p.ts_ns);
    }
    cache.finish(&mut gpvs);
    assert_eq!(cache.occupied(), 0);
    assert_eq!(
        cache.free_wide(),
        if cfg.wide == 0 { 0 } else { cfg.pool },
        "every wide buffer back in the pool"
    );
    for g in &gpvs {
        assert_eq!(g.header.packet_count as usize, g.packets.len());
        assert_eq!(g.header.interface, cfg.interface);
        assert!(!g.packets.is_empty());
        assert!(g.packets.len() <= cfg.narrow + cfg.wide.min(if cfg.pool > 0 { cfg.wide } else { 0 }));
        assert_eq!(g.packets[0].delta, 0);
        for p in &g.packets {
            assert!(p.delta <= cfg.max_delta_ns);
            assert!(u64::from(p.delta) <= cfg.max_age_ns);
        }
        if cfg.scan_interval_ns > 0 {
            assert!(
                clock - g.header.start_ns <= cfg.max_age_ns.saturating_add(cfg.scan_interval_ns)
                    || g.header.cause != EvictCause::Flush
            );
        }
    }
    // Every flow's packets, exactly and in order.
    assert_eq!(per_flow_gpvs(&gpvs), per_flow_raw(packets));
    // The same GPVs as the counting model.
    let got: Vec<_> = gpvs
        .iter()
        .map(|g| {
            (
                g.header.key,
                g.header.start_ns,
                g.header.packet_count,
                g.header.cause,
            )
        })
        .collect();
    assert_eq!(got, model(packets, &cfg));
    let s = cache.stats();
    assert_eq!(s.packets, packets.len() as u64);
    assert_eq!(s.gpvs, gpvs.len() as u64);
    for c in EvictCause::ALL {
        assert_eq!(
            s.evicted(c),
            gpvs.iter().filter(|g| g.header.cause == c).count() as u64,
            "{c:?}"
        );
    }
    assert_eq!(gpvs, ticked(packets, cfg), "ticks between packets change nothing");
}

/// The GPVs of `packets` with the clock also ticked between each packet
/// and the next, just before the next (a live host's quiet wire): the
/// scans run on a grid, so they must be the GPVs of the packets alone.
fn ticked(packets: &[PacketRecord], cfg: CacheConfig) -> Vec<Gpv> {
    let mut cache = GpvCache::new(cfg).expect("valid config");
    let mut gpvs = Vec::new();
    for (k, p) in packets.iter().enumerate() {
        cache.push(p, &mut gpvs);
        if let Some(next) = packets.get(k + 1) {
            cache.tick(next.ts_ns.saturating_sub(1), &mut gpvs);
        }
    }
    cache.finish(&mut gpvs);
    gpvs
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn generated_traffic(packets in traffic(), cfg in cache_config()) {
        check(&packets, cfg);
    }
}

#[test]
fn real_captures() {
    for (name, packets) in captures() {
        for cfg in small_configs() {
            eprintln!("{name}: {} packets, {cfg:?}", packets.len());
            check(&packets, cfg);
        }
    }
}

fn pkt(key: FlowKey, ts_ns: u64, size: u32) -> PacketRecord {
    PacketRecord {
        ts_ns,
        key,
        size,
        ..PacketRecord::default()
    }
}

fn key(n: u8) -> FlowKey {
    FlowKey::new(
        [10, 0, 0, n].into(),
        [10, 0, 1, 1].into(),
        17,
        Some((u16::from(n), 53)),
        None,
    )
}

fn run(cfg: CacheConfig, packets: &[PacketRecord]) -> (Vec<Gpv>, GpvCache) {
    let mut cache = GpvCache::new(cfg).expect("valid config");
    let mut out = Vec::new();
    for p in packets {
        cache.push(p, &mut out);
    }
    (out, cache)
}

const ONE: CacheConfig = CacheConfig {
    slots: 1,
    narrow: 2,
    wide: 3,
    pool: 1,
    max_age_ns: 1_000,
    scan_interval_ns: 0,
    max_delta_ns: 500,
    interface: 0,
};

#[test]
fn each_cause() {
    let (a, b) = (key(1), key(2));
    // Collision: one slot, two flows.
    let (out, _) = run(ONE, &[pkt(a, 0, 100), pkt(b, 1, 100)]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].header.cause, EvictCause::Collision);
    assert_eq!(
        out[0].packets,
        vec![PacketFeatures {
            delta: 0,
            size: 100,
            tcp_flags: 0,
            tcp: None
        }]
    );
    // Narrow (2) then wide (3): the sixth packet evicts five.
    let ps: Vec<_> = (0..6).map(|i| pkt(a, i, 60)).collect();
    let (out, cache) = run(ONE, &ps);
    assert_eq!(
        (out.len(), out[0].packets.len(), out[0].header.cause),
        (1, 5, EvictCause::Full)
    );
    assert_eq!(cache.stats().wide_allocs, 1);
    assert_eq!(cache.free_wide(), 1, "the evicted GPV gave its wide buffer back");
    // Two slots, one wide buffer: the second busy flow finds the pool empty.
    let two = CacheConfig { slots: 2, ..ONE };
    let (c, d) = {
        let mut ks = (1..=40).map(key);
        let c = ks.next().unwrap();
        let slot = |k: &FlowKey| ((flow_hash(k) as u128 * 2) >> 64) as usize;
        (c, ks.find(|k| slot(k) != slot(&c)).unwrap())
    };
    let ps: Vec<_> = (0..3).flat_map(|i| [pkt(c, i, 1), pkt(d, i, 1)]).collect();
    let (out, cache) = run(two, &ps);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].header.key, out[0].header.cause, out[0].packets.len()),
        (d, EvictCause::Full, 2)
    );
    assert_eq!(
        (cache.stats().wide_allocs, cache.stats().wide_alloc_failures),
        (1, 1)
    );
    // Split: the clock steps back before the start, or a delta passes 500.
    let (out, _) = run(ONE, &[pkt(a, 100, 1), pkt(a, 99, 1), pkt(a, 600, 1)]);
    let got: Vec<_> = out.iter().map(|g| (g.header.start_ns, g.header.cause)).collect();
    assert_eq!(got, vec![(100, EvictCause::Split), (99, EvictCause::Split)]);
    // Age on touch (max delta out of the way), then the periodic scan.
    let aged = CacheConfig {
        max_delta_ns: u32::MAX,
        ..ONE
    };
    let (out, _) = run(aged, &[pkt(a, 0, 1), pkt(a, 1_000, 1), pkt(a, 1_001, 1)]);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].header.cause, out[0].packets.len()), (EvictCause::Age, 2));
    let scanned = CacheConfig {
        slots: 2,
        scan_interval_ns: 100,
        ..aged
    };
    let (out, mut cache) = run(scanned, &[pkt(c, 0, 1), pkt(d, 1_000, 1)]);
    assert!(out.is_empty(), "1000 ns is not older than the bound");
    let mut out = Vec::new();
    cache.tick(1_099, &mut out);
    assert!(out.is_empty(), "the next scan is due at 1000 + 100");
    cache.tick(1_100, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].header.key, out[0].header.cause), (c, EvictCause::Scan));
    cache.finish(&mut out);
    assert_eq!((out[1].header.key, out[1].header.cause), (d, EvictCause::Flush));
    assert_eq!(cache.stats().evicted(EvictCause::Scan), 1);
}

#[test]
fn bad_configs() {
    for cfg in [
        CacheConfig { slots: 0, ..ONE },
        CacheConfig { narrow: 0, ..ONE },
        CacheConfig {
            wide: usize::MAX,
            ..ONE
        },
    ] {
        assert!(GpvCache::new(cfg).is_err(), "{cfg:?}");
    }
}

/// Keys that differ in one field spread evenly over the slots (chi-square
/// well under the 0.1% critical value for 255 degrees of freedom, 330).
#[test]
fn hash_spreads_keys() {
    let variants: [&dyn Fn(u32) -> FlowKey; 4] = [
        &|i| {
            FlowKey::new(
                [10, 0, 0, 1].into(),
                [10, 0, 0, 2].into(),
                6,
                Some((i as u16, 80)),
                None,
            )
        },
        &|i| {
            FlowKey::new(
                std::net::Ipv4Addr::from(0x0a00_0000 + i).into(),
                [10, 0, 0, 2].into(),
                6,
                Some((1, 80)),
                None,
            )
        },
        &|i| {
            FlowKey::new(
                [10, 0, 0, 1].into(),
                std::net::Ipv4Addr::from(0xc0a8_0000 + (i << 8)).into(),
                17,
                Some((53, 53)),
                None,
            )
        },
        &|i| {
            FlowKey::new(
                std::net::Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(i) << 64).into(),
                std::net::Ipv6Addr::LOCALHOST.into(),
                17,
                Some((53, 53)),
                None,
            )
        },
    ];
    for (v, make) in variants.iter().enumerate() {
        let mut counts = [0u32; 256];
        let n = 25_600;
        for i in 0..n {
            counts[(flow_hash(&make(i)) >> 56) as usize] += 1;
        }
        let expect = f64::from(n) / 256.0;
        let chi2: f64 = counts
            .iter()
            .map(|&c| (f64::from(c) - expect).powi(2) / expect)
            .sum();
        assert!(chi2 < 330.0, "variant {v}: chi-square {chi2}");
    }
}

/// The generated traffic and the small configurations reach every cause
/// (else the model comparison above would prove little).
#[test]
fn tests_reach_every_cause() {
    let mut seen = [0u64; 6];
    for (_, packets) in captures() {
        for cfg in small_configs() {
            let mut cache = GpvCache::new(cfg).unwrap();
            let mut out = Vec::new();
            packets.iter().for_each(|p| cache.push(p, &mut out));
            cache.finish(&mut out);
            for c in EvictCause::ALL {
                seen[usize::from(c.code())] += cache.stats().evicted(c);
            }
        }
    }
    if clarion_testdata::captures_dir().is_some() {
        assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    }
}
