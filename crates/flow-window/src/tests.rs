//! The window and its query against a plain model: every record pushed
//! kept in a `Vec`, the kept ones chosen by their position and time, each
//! tested field by field as docs/semantics.md words it (addresses masked
//! as numbers, not through `clarion-event-capture`), summed per key in a
//! `BTreeMap` and sorted.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::net::IpAddr;

use clarion_lang::spec::{IpPrefix, PortRange};
use clarion_records::EndReason;
use proptest::prelude::*;

use super::*;

const ADDRS: [&str; 5] = ["10.0.0.1", "10.0.0.2", "10.0.1.7", "fd00::1", "fd00:0:1::9"];
const PORTS: [Option<(u16, u16)>; 4] = [None, Some((1000, 80)), Some((1001, 80)), Some((1000, 443))];

fn key(src: usize, dst: usize, ports: usize, proto: u8, vlan: Option<u16>) -> FlowKey {
    let (s, d): (IpAddr, IpAddr) = (ADDRS[src].parse().unwrap(), ADDRS[dst].parse().unwrap());
    // Keep both ends in one family, as a packet would.
    let d = if s.is_ipv4() == d.is_ipv4() { d } else { s };
    FlowKey::new(s, d, proto, PORTS[ports], vlan)
}

fn record(k: FlowKey, first: u64, len: u64, packets: u64, bytes: u64) -> FlowRecord {
    FlowRecord {
        key: k,
        first_ns: first,
        last_ns: first + len,
        packets,
        bytes,
        tcp_flags: 0,
        min_size: 40,
        max_size: 1500,
        end_reason: EndReason::Idle,
    }
}

fn arb_key() -> impl Strategy<Value = FlowKey> {
    (
        0..ADDRS.len(),
        0..ADDRS.len(),
        0..PORTS.len(),
        prop::sample::select(vec![6u8, 17]),
        prop::option::of(Just(100u16)),
    )
        .prop_map(|(s, d, p, proto, vlan)| key(s, d, p, proto, vlan))
}

fn arb_record() -> impl Strategy<Value = FlowRecord> {
    // Times on a grid of 10 ns: window edges often equal a record's ends.
    (arb_key(), 0u64..100, 0u64..20, 1u64..20, 40u64..3_000)
        .prop_map(|(k, first, len, packets, bytes)| record(k, first * 10, len * 10, packets, bytes))
}

/// An address as a number, and its width in bits.
fn bits(a: IpAddr) -> (u128, u8) {
    match a {
        IpAddr::V4(x) => (u128::from(u32::from(x)), 32),
        IpAddr::V6(x) => (u128::from(x), 128),
    }
}

/// Whether `a` is under `p`: same family, the first `len` bits equal.
fn under(a: IpAddr, p: IpAddr, len: u8) -> bool {
    let ((x, w), (y, pw)) = (bits(a), bits(p));
    if w != pw {
        return false;
    }
    if len == 0 {
        return true;
    }
    let shift = u32::from(w - len.min(w));
    (x >> shift) == (y >> shift)
}

fn model_in_group(g: &GroupKey, k: &FlowKey) -> bool {
    let opt = |want: Option<Option<u16>>, has: bool, v: u16| match want {
        None => true,
        Some(None) => !has,
        Some(Some(w)) => has && v == w,
    };
    g.src_ip.is_none_or(|(a, l)| under(k.src_addr(), a, l))
        && g.dst_ip.is_none_or(|(a, l)| under(k.dst_addr(), a, l))
        && opt(g.src_port, k.has_ports(), k.src_port)
        && opt(g.dst_port, k.has_ports(), k.dst_port)
        && g.proto.is_none_or(|p| p == k.proto)
        && opt(g.vlan, k.has_vlan(), k.vlan)
        && match g.vni {
            None => true,
            Some(None) => !k.has_vni(),
            Some(Some(v)) => k.has_vni() && k.vni == v,
        }
}

fn model_passes(filters: &[Filter], k: &FlowKey) -> bool {
    filters.iter().any(|f| {
        let port = |r: Option<PortRange>, v: u16| r.is_none_or(|r| k.has_ports() && r.lo <= v && v <= r.hi);
        f.src_ip.is_none_or(|p| under(k.src_addr(), p.addr, p.len))
            && f.dst_ip.is_none_or(|p| under(k.dst_addr(), p.addr, p.len))
            && port(f.src_port, k.src_port)
            && port(f.dst_port, k.dst_port)
            && f.proto.is_none_or(|p| p == k.proto)
            && f.vlan.is_none_or(|v| k.has_vlan() && k.vlan == v)
            && f.vni.is_none_or(|v| k.has_vni() && k.vni == v)
    })
}

/// The model's answer over the records `kept`.
fn model(kept: &[FlowRecord], q: &FlowQuery) -> (Vec<Talker>, u64, u64, u64, u64) {
    let mut sums: BTreeMap<FlowKey, Talker> = BTreeMap::new();
    let (mut n, mut p, mut b) = (0, 0, 0);
    for r in kept {
        let overlaps = !(r.last_ns < q.from_ns || r.first_ns >= q.to_ns);
        if !(overlaps && model_in_group(&q.group, &r.key) && model_passes(&q.filters, &r.key)) {
            continue;
        }
        n += 1;
        p += r.packets;
        b += r.bytes;
        let t = sums.entry(r.key).or_insert(Talker {
            key: r.key,
            packets: 0,
            bytes: 0,
            records: 0,
            first_ns: u64::MAX,
            last_ns: 0,
        });
        t.packets += r.packets;
        t.bytes += r.bytes;
        t.records += 1;
        t.first_ns = t.first_ns.min(r.first_ns);
        t.last_ns = t.last_ns.max(r.last_ns);
    }
    let flows = sums.len() as u64;
    let mut all: Vec<Talker> = sums.into_values().collect();
    // Stable: equal values stay in key order.
    all.sort_by(|a, b| match q.by {
        Rank::Bytes => (b.bytes, b.packets).cmp(&(a.bytes, a.packets)),
        Rank::Packets => (b.packets, b.bytes).cmp(&(a.packets, a.bytes)),
    });
    all.truncate(q.top);
    (all, flows, n, p, b)
}

fn arb_filter() -> impl Strategy<Value = Filter> {
    (
        prop::option::of((0..ADDRS.len(), prop::sample::select(vec![8u8, 24, 32, 64, 128]))),
        prop::option::of(prop::sample::select(vec![(80u16, 80u16), (0, 1000), (443, 443)])),
        prop::option::of(prop::sample::select(vec![6u8, 17])),
        prop::option::of(Just(100u16)),
    )
        .prop_map(|(src, dst_port, proto, vlan)| Filter {
            src_ip: src.map(|(i, len)| {
                let addr: IpAddr = ADDRS[i].parse().unwrap();
                IpPrefix {
                    addr,
                    len: if addr.is_ipv4() { len.min(32) } else { len },
                }
            }),
            dst_port: dst_port.map(|(lo, hi)| PortRange { lo, hi }),
            proto,
            vlan,
            ..Filter::default()
        })
}

/// A group made from a key, masked: the fields an event's granularity
/// would keep (each chosen or not), so that some records fall in it.
fn arb_group() -> impl Strategy<Value = GroupKey> {
    (
        arb_key(),
        any::<[bool; 5]>(),
        prop::sample::select(vec![16u8, 24, 32, 48, 128]),
    )
        .prop_map(|(k, on, len)| {
            let masked = |a: IpAddr| -> (IpAddr, u8) {
                let (x, w) = bits(a);
                let l = len.min(w);
                let m = if l == 0 { 0 } else { x >> (w - l) << (w - l) };
                let addr = match a {
                    IpAddr::V4(_) => IpAddr::from(u32::try_from(m).unwrap().to_be_bytes()),
                    IpAddr::V6(_) => IpAddr::from(m.to_be_bytes()),
                };
                (addr, l)
            };
            let present = |p: u16| if k.has_ports() { Some(p) } else { None };
            GroupKey {
                src_ip: on[0].then(|| masked(k.src_addr())),
                dst_ip: on[1].then(|| masked(k.dst_addr())),
                src_port: None,
                dst_port: on[2].then(|| present(k.dst_port)),
                proto: on[3].then_some(k.proto),
                vlan: on[4].then(|| k.has_vlan().then_some(k.vlan)),
                vni: None,
            }
        })
}

fn arb_query() -> impl Strategy<Value = FlowQuery> {
    (
        prop::collection::vec(arb_filter(), 1..3),
        arb_group(),
        (0u64..110).prop_map(|t| t * 10),
        (1u64..40).prop_map(|t| t * 10),
        0usize..8,
        any::<bool>(),
    )
        .prop_map(|(filters, group, from, len, top, bytes)| FlowQuery {
            filters,
            group,
            from_ns: from,
            to_ns: from + len,
            top,
            by: if bytes { Rank::Bytes } else { Rank::Packets },
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Bounded by count only: the last `max` records pushed are kept.
    #[test]
    fn answers_are_the_models_over_the_newest_records(
        records in prop::collection::vec(arb_record(), 0..120),
        max in 1usize..150,
        q in arb_query(),
    ) {
        let mut w = FlowWindow::new(max, u64::MAX);
        for r in &records {
            w.push(r);
        }
        let kept = &records[records.len().saturating_sub(max)..];
        let (talkers, flows, n, p, b) = model(kept, &q);
        let a = w.query(&q);
        prop_assert_eq!(&a.talkers, &talkers);
        prop_assert_eq!((a.flows, a.records, a.packets, a.bytes), (flows, n, p, b));
        let dropped = &records[..records.len() - kept.len()];
        prop_assert_eq!(a.coverage.dropped, dropped.len() as u64);
        prop_assert_eq!(a.coverage.dropped_last_ns, dropped.iter().map(|r| r.last_ns).max());
        // Whole exactly when no dropped record could have overlapped the window.
        prop_assert_eq!(a.complete, dropped.iter().all(|r| r.last_ns < q.from_ns));
        if a.complete {
            // Then the window's answer is the answer over every record pushed.
            let (all, ..) = model(&records, &q);
            prop_assert_eq!(&a.talkers, &all);
        }
    }

    /// Records coming in order of their end, bounded by count and age:
    /// kept are the newest `max` that ended within `age` of the newest end.
    #[test]
    fn the_age_bound_keeps_what_ended_recently(
        mut records in prop::collection::vec(arb_record(), 0..120),
        max in 1usize..150,
        age in 0u64..600,
        q in arb_query(),
    ) {
        records.sort_by_key(|r| r.last_ns);
        let mut w = FlowWindow::new(max, age);
        for r in &records {
            w.push(r);
        }
        let newest = records.iter().map(|r| r.last_ns).max().unwrap_or(0);
        let kept: Vec<FlowRecord> = records[records.len().saturating_sub(max)..]
            .iter()
            .filter(|r| r.last_ns + age >= newest)
            .copied()
            .collect();
        prop_assert_eq!(w.len(), kept.len());
        prop_assert_eq!(w.coverage().dropped, (records.len() - kept.len()) as u64);
        let (talkers, flows, ..) = model(&kept, &q);
        let a = w.query(&q);
        prop_assert_eq!(a.talkers, talkers);
        prop_assert_eq!(a.flows, flows);
    }
}

#[test]
fn a_record_partly_in_the_window_counts_whole() {
    let k = key(0, 1, 1, 6, None);
    let mut w = FlowWindow::new(10, u64::MAX);
    w.push(&record(k, 50, 100, 10, 10_000)); // [50, 150]
    w.push(&record(k, 200, 0, 1, 60)); // [200, 200]: after the window
    w.push(&record(key(0, 1, 2, 6, None), 0, 99, 3, 300)); // [0, 99]: ends at the start
    let q = FlowQuery {
        filters: vec![Filter::default()],
        group: GroupKey::default(),
        from_ns: 99,
        to_ns: 200,
        top: 10,
        by: Rank::Bytes,
    };
    let a = w.query(&q);
    // The last packet at the window's start counts; one at its end does not.
    assert_eq!(a.records, 2);
    assert_eq!(a.talkers[0].bytes, 10_000, "the whole record, not its share");
    assert_eq!(a.talkers[1].key, key(0, 1, 2, 6, None));
    let v = a.to_json(&q);
    assert_eq!(v["talkers"][0]["src_ip"], "10.0.0.1");
    assert_eq!(v["talkers"][0]["dst_port"], 80);
    assert_eq!(v["talkers"][0]["vlan"], Value::Null);
    assert_eq!(v["total"]["bytes"], 10_300);
    assert_eq!(v["talkers"][0]["first"], "1970-01-01T00:00:00.000000050Z");
    assert_eq!(v["to"], "1970-01-01T00:00:00.000000200Z");
    assert_eq!(v["complete"], true);
}

#[test]
fn memory_stays_within_the_bound() {
    let mut w = FlowWindow::new(1_000, u64::MAX);
    for i in 0..100_000u64 {
        w.push(&record(key(0, 1, 1, 6, None), i, 1, 1, 100));
    }
    assert_eq!(w.len(), 1_000);
    assert_eq!(w.coverage().dropped, 99_000);
    assert_eq!(w.coverage().dropped_last_ns, Some(98_999 + 1));
}
