//! The merge against a plain model: every host's talkers summed per key
//! in a `BTreeMap` (no capacity, no early exit), then sorted by a
//! comparator written out field by field.

#![allow(clippy::unwrap_used)]

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;

use super::*;

fn key(n: u8) -> FlowKey {
    let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, n));
    let b = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 1));
    FlowKey::new(a, b, 17, Some((1000 + u16::from(n), 80)), None)
}

fn talker(n: u8, packets: u64, bytes: u64, first_ns: u64, len: u64) -> Talker {
    Talker {
        key: key(n),
        packets,
        bytes,
        records: 1 + packets % 3,
        first_ns,
        last_ns: first_ns + len,
    }
}

fn arb_answer(host: usize) -> impl Strategy<Value = HostAnswer> {
    // Few keys: hosts often share one.
    let t = (0u8..12, 1u64..50, 40u64..5_000, 0u64..1_000, 0u64..500)
        .prop_map(|(n, p, b, f, l)| talker(n, p, b, f, l));
    (prop::collection::vec(t, 0..10), any::<bool>(), 0u64..5).prop_map(move |(ts, complete, more)| {
        // One host lists a key once, as a window's answer does.
        let mut seen = std::collections::HashSet::new();
        let talkers: Vec<Talker> = ts.into_iter().filter(|t| seen.insert(t.key)).collect();
        let flows = talkers.len() as u64 + more;
        HostAnswer {
            host: format!("web-{host}"),
            flows,
            records: talkers.iter().map(|t| t.records).sum::<u64>() + more,
            packets: talkers.iter().map(|t| t.packets).sum::<u64>() + more,
            bytes: talkers.iter().map(|t| t.bytes).sum::<u64>() + 40 * more,
            complete,
            truncated: more > 0,
            talkers,
        }
    })
}

/// (packets, bytes, records, first, last) per key, over every answer.
fn model(answers: &[HostAnswer], top: usize, by: Rank) -> Vec<Talker> {
    let mut sums: BTreeMap<FlowKey, (u64, u64, u64, u64, u64)> = BTreeMap::new();
    for t in answers.iter().flat_map(|a| &a.talkers) {
        let e = sums.entry(t.key).or_insert((0, 0, 0, u64::MAX, 0));
        e.0 += t.packets;
        e.1 += t.bytes;
        e.2 += t.records;
        e.3 = e.3.min(t.first_ns);
        e.4 = e.4.max(t.last_ns);
    }
    let mut all: Vec<Talker> = sums
        .into_iter()
        .map(|(key, (packets, bytes, records, first_ns, last_ns))| Talker {
            key,
            packets,
            bytes,
            records,
            first_ns,
            last_ns,
        })
        .collect();
    all.sort_by_key(|t| match by {
        Rank::Bytes => (Reverse(t.bytes), Reverse(t.packets), t.key),
        Rank::Packets => (Reverse(t.packets), Reverse(t.bytes), t.key),
    });
    all.truncate(top);
    all
}

proptest! {
    #[test]
    fn the_merge_equals_the_model(
        a in arb_answer(1),
        b in arb_answer(2),
        c in arb_answer(3),
        top in 1usize..15,
        packets in any::<bool>(),
    ) {
        let by = if packets { Rank::Packets } else { Rank::Bytes };
        let answers = vec![c, a, b];
        let want = model(&answers, top, by);
        let m = merge(answers.clone(), vec![("web-9".into(), "no answer".into())], top, by);
        prop_assert_eq!(&m.talkers, &want);
        prop_assert_eq!(m.packets, answers.iter().map(|a| a.packets).sum::<u64>());
        prop_assert_eq!(m.bytes, answers.iter().map(|a| a.bytes).sum::<u64>());
        prop_assert_eq!(m.complete, answers.iter().all(|a| a.complete));
        prop_assert_eq!(m.truncated, answers.iter().any(|a| a.truncated));
        let hosts: Vec<&str> = m.hosts.iter().map(|h| h.host.as_str()).collect();
        prop_assert_eq!(hosts, vec!["web-1", "web-2", "web-3"]);
    }
}

#[test]
fn a_flow_two_hosts_see_is_summed_and_spans_both() {
    let a = HostAnswer {
        host: "web-1".into(),
        talkers: vec![talker(1, 10, 1_000, 100, 50), talker(2, 1, 60, 0, 0)],
        flows: 2,
        records: 2,
        packets: 11,
        bytes: 1_060,
        complete: true,
        truncated: false,
    };
    let b = HostAnswer {
        host: "web-2".into(),
        talkers: vec![talker(1, 5, 500, 120, 100)],
        flows: 1,
        records: 1,
        packets: 5,
        bytes: 500,
        complete: false,
        truncated: false,
    };
    let m = merge(vec![b, a], Vec::new(), 10, Rank::Bytes);
    assert_eq!(m.talkers.len(), 2);
    let t = m.talkers[0];
    assert_eq!((t.key, t.packets, t.bytes), (key(1), 15, 1_500));
    assert_eq!((t.first_ns, t.last_ns), (100, 220));
    assert!(!m.complete && !m.truncated);
    let q = FlowQuery {
        filters: Vec::new(),
        group: clarion_report::group_from_json(&json!({})).unwrap(),
        from_ns: 0,
        to_ns: 1_000,
        top: 10,
        by: Rank::Bytes,
    };
    let v = m.to_json(&q);
    assert_eq!(v["missing_hosts"], json!([]));
    assert_eq!(v["complete"], false);
    assert_eq!(v["talkers"][0]["bytes"], 1_500);
    assert_eq!(v["hosts"][1]["host"], "web-2");
}

#[test]
fn the_missing_hosts_are_named_and_make_the_answer_incomplete() {
    let m = merge(
        Vec::new(),
        vec![
            ("web-2".into(), "timed out".into()),
            ("web-1".into(), "no responders".into()),
        ],
        10,
        Rank::Packets,
    );
    let q = FlowQuery {
        filters: Vec::new(),
        group: clarion_report::group_from_json(&json!({})).unwrap(),
        from_ns: 0,
        to_ns: 1,
        top: 10,
        by: Rank::Packets,
    };
    let v = m.to_json(&q);
    assert_eq!(v["missing_hosts"], json!(["web-1", "web-2"]));
    assert_eq!(v["missing"][1]["reason"], "timed out");
    assert_eq!(v["complete"], false);
}
