//! Every classifier against the linear-scan reference (`reference.rs`), as
//! OVS's `test-classifier.c` compares its classifier with `tcls`: random
//! rule sets over small field spaces (so rules overlap a lot), generated
//! ACL and firewall sets with their traces, and the shared real captures
//! with rules drawn from their own flows. Fast-path caches are tiny in the
//! random cases so that replacement happens all the time. The batch call
//! (`classify_batch`) must give the per-packet calls' verdicts and counters.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use clarion_classify::gen::{self, Kind, Locality};
use clarion_classify::{
    reference, Classifier, ClassifyError, FastPath, IpPrefix, Rule, Semantics, UssTable, Verdict,
};
use clarion_wire::FlowKey;
use proptest::prelude::*;

const SEMANTICS: [Semantics; 2] = [Semantics::FirstMatch, Semantics::AllMatches];

fn fast_paths(capacity: usize) -> [FastPath; 3] {
    [
        FastPath::None,
        FastPath::Megaflow { capacity },
        FastPath::Uss { capacity },
    ]
}

/// Classifies `keys` with every classifier and compares each answer with
/// the reference, then checks the counters' identities; the full USS
/// table too wherever it fits in 2^20 uniflows.
fn check_all(rules: &[Rule], keys: &[FlowKey], capacity: usize) -> Result<(), TestCaseError> {
    let first: Vec<Option<u32>> = keys.iter().map(|k| reference::first_match(rules, k)).collect();
    let all: Vec<Vec<u32>> = keys.iter().map(|k| reference::all_matches(rules, k)).collect();
    for sem in SEMANTICS {
        for fp in fast_paths(capacity) {
            let mut c = Classifier::new(rules, sem, fp).expect("valid rules");
            let mut one_by_one = Vec::with_capacity(keys.len());
            for (i, k) in keys.iter().enumerate() {
                let v = c.classify(k);
                one_by_one.push(v);
                match sem {
                    Semantics::FirstMatch => {
                        let want = first[i].map_or(Verdict::NoMatch, Verdict::Action);
                        prop_assert_eq!(v, want, "{:?} {:?} packet {} {:?}", sem, fp, i, k);
                    }
                    Semantics::AllMatches => {
                        prop_assert_eq!(
                            c.actions_of(&v),
                            &all[i][..],
                            "{:?} {:?} packet {} {:?}",
                            sem,
                            fp,
                            i,
                            k
                        );
                    }
                }
            }
            let s = c.stats();
            // The batch call: the same verdicts and counters, appended in
            // two calls (so a batch starts on a warm cache and after
            // existing verdicts).
            let mut b = Classifier::new(rules, sem, fp).expect("valid rules");
            let mut batched = vec![Verdict::NoMatch; 1];
            let half = keys.len() / 2;
            b.classify_batch(&keys[..half], &mut batched);
            b.classify_batch(&keys[half..], &mut batched);
            prop_assert_eq!(&batched[1..], &one_by_one[..], "{:?} {:?} batch", sem, fp);
            prop_assert_eq!(b.stats(), s, "{:?} {:?} batch counters", sem, fp);
            prop_assert!(s.fast_lookups >= s.fast_hits);
            prop_assert_eq!(s.packets, keys.len() as u64);
            prop_assert_eq!(s.fast_hits + s.misses, s.packets);
            prop_assert!(s.cache_entries <= capacity as u64);
            if let FastPath::Uss { .. } = fp {
                prop_assert_eq!(s.fast_lookups, s.packets, "USS: one hash lookup per packet");
            }
        }
        // The full USS construction, where it fits in memory.
        match UssTable::new(rules, sem, 1 << 20) {
            Err(ClassifyError::TooManyUniflows { .. }) => {}
            Err(e) => panic!("{e}"),
            Ok(t) => {
                for (i, k) in keys.iter().enumerate() {
                    let v = t.classify(k);
                    let want: &[u32] = match sem {
                        Semantics::FirstMatch => first[i].as_slice(),
                        Semantics::AllMatches => &all[i],
                    };
                    prop_assert_eq!(t.actions_of(&v), want, "{:?} full USS packet {} {:?}", sem, i, k);
                }
            }
        }
    }
    Ok(())
}

// ---- random rules and packets over small spaces ----

fn v4(x: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, x >> 2, x << 6))
}
fn v6(x: u8) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(
        0x2001,
        0xdb8,
        0,
        u16::from(x >> 2),
        0,
        0,
        0,
        u16::from(x & 3),
    ))
}

fn prefix(is_v6: bool) -> impl Strategy<Value = Option<IpPrefix>> {
    let lens: Vec<u8> = if is_v6 {
        vec![0, 16, 48, 62, 64, 127, 128]
    } else {
        vec![0, 8, 16, 22, 24, 26, 32]
    };
    prop::option::weighted(0.6, (0u8..16, prop::sample::select(lens))).prop_map(move |o| {
        o.map(|(x, len)| IpPrefix {
            addr: if is_v6 { v6(x) } else { v4(x) },
            len,
        })
    })
}

fn range(max: u16) -> impl Strategy<Value = Option<(u16, u16)>> {
    prop::option::weighted(0.5, (0..=max, 0..=max)).prop_map(|o| o.map(|(a, b)| (a.min(b), a.max(b))))
}

fn port_range() -> impl Strategy<Value = Option<(u16, u16)>> {
    prop_oneof![3 => range(9), 1 => Just(Some((1024, 65535))), 1 => Just(Some((0, 65535)))]
}

prop_compose! {
    fn rule()(is_v6 in prop::bool::weighted(0.3))(
        is_v6 in Just(is_v6),
        src_ip in prefix(is_v6),
        dst_ip in prefix(is_v6),
        fam in 0u8..4,
        src_port in port_range(),
        dst_port in port_range(),
        proto in prop::option::weighted(0.5, prop::sample::select(vec![1u8, 6, 17])),
        vlan in range(5),
        priority in 0u32..4,
        action in 0u32..6,
    ) -> Rule {
        // Family: fixed by an address, else sometimes stated alone.
        let family = match (src_ip.is_some() || dst_ip.is_some(), fam) {
            (true, _) | (false, 0) => Some(if is_v6 { clarion_classify::Family::V6 } else { clarion_classify::Family::V4 }),
            _ => None,
        };
        Rule { family, src_ip, dst_ip, src_port, dst_port, proto, vlan, priority, action }
    }
}

/// A rule with no condition but perhaps the protocol, at any priority:
/// the catch-alls that let USS's boxes ignore the rules they shadow
/// (`uss.rs`, "Priority-aware boxes").
fn catch_all() -> impl Strategy<Value = Rule> {
    (
        prop::option::weighted(0.7, prop::sample::select(vec![1u8, 6, 17])),
        0u32..4,
        0u32..6,
    )
        .prop_map(|(proto, priority, action)| Rule {
            proto,
            priority,
            action,
            ..Rule::default()
        })
}

prop_compose! {
    fn packet()(
        is_v6 in prop::bool::weighted(0.3),
        s in 0u8..16, d in 0u8..16, host in any::<u8>(),
        has_ports in prop::bool::weighted(0.8),
        sp in prop_oneof![0u16..12, Just(1024u16), any::<u16>()],
        dp in prop_oneof![0u16..12, Just(65535u16), any::<u16>()],
        proto in prop::sample::select(vec![1u8, 6, 17, 47]),
        has_vlan in prop::bool::weighted(0.4),
        vlan in 0u16..7,
    ) -> FlowKey {
        let mut k = FlowKey { proto, ..FlowKey::default() };
        let put = |a: IpAddr, out: &mut [u8; 16]| match a {
            IpAddr::V4(a) => out[..4].copy_from_slice(&a.octets()),
            IpAddr::V6(a) => *out = a.octets(),
        };
        let (sa, da) = if is_v6 { (v6(s), v6(d)) } else { (v4(s), v4(d)) };
        put(sa, &mut k.src_ip);
        put(da, &mut k.dst_ip);
        // Vary the host bits a little so long prefixes sometimes miss.
        let last = if is_v6 { 15 } else { 3 };
        k.src_ip[last] ^= host & 0x21;
        k.dst_ip[last] ^= host & 0x12;
        if is_v6 { k.flags |= FlowKey::IPV6; }
        if has_ports { k.flags |= FlowKey::HAS_PORTS; k.src_port = sp; k.dst_port = dp; }
        if has_vlan { k.flags |= FlowKey::HAS_VLAN; k.vlan = vlan; }
        k
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_rules_equal_reference(
        rules in prop::collection::vec(prop_oneof![6 => rule(), 1 => catch_all()], 0..24),
        packets in prop::collection::vec(packet(), 1..80),
        capacity in 1usize..6,
    ) {
        // Twice over, so that later packets can hit what earlier ones cached.
        let keys: Vec<FlowKey> = packets.iter().chain(packets.iter()).copied().collect();
        check_all(&rules, &keys, capacity)?;
    }
}

// ---- generated ACL and FW sets ----

#[test]
fn generated_sets_equal_reference() {
    for kind in [Kind::Acl, Kind::Fw] {
        for (n, seed) in [(100, 1u64), (1000, 2)] {
            let rules = gen::rules(kind, n, seed);
            let mut keys = gen::trace(&rules, 6000, Some(Locality::CLASSBENCH), seed);
            // Plus random headers that mostly match nothing or only wide rules.
            keys.extend(gen::trace(&[], 500, None, seed));
            check_all(&rules, &keys, 64).unwrap_or_else(|e| panic!("{kind:?} {n}: {e}"));
        }
    }
}

// ---- real captures, rules from their own flows ----

fn load(path: &Path) -> Vec<FlowKey> {
    clarion_testdata::records(path).iter().map(|r| r.key).collect()
}

/// A rule from a flow: its addresses under random prefix lengths (or
/// wildcards), its protocol or any, its ports exact, as a range around them,
/// or any; priorities and actions from a small set so ties and shared
/// actions occur.
fn rule_from(k: &FlowKey, r: u64) -> Rule {
    let bits = |i: u32, n: u64| (r >> i) % n;
    let ip = |a: &[u8; 16], sel: u64| -> Option<IpPrefix> {
        let (addr, lens): (IpAddr, [u8; 4]) = if k.is_ipv6() {
            (IpAddr::from(*a), [16, 48, 64, 128])
        } else {
            (IpAddr::from([a[0], a[1], a[2], a[3]]), [8, 16, 24, 32])
        };
        (sel < 4).then(|| IpPrefix {
            addr,
            len: lens[sel as usize],
        })
    };
    let port = |p: u16, sel: u64| match sel {
        0 => Some((p, p)),
        1 => Some((p.saturating_sub(100), p.saturating_add(100))),
        2 => Some((1024, 65535)),
        _ => None,
    };
    Rule {
        src_ip: ip(&k.src_ip, bits(0, 6)),
        dst_ip: ip(&k.dst_ip, bits(3, 6)),
        proto: (bits(6, 3) != 0).then_some(k.proto),
        src_port: if k.has_ports() {
            port(k.src_port, bits(8, 6))
        } else {
            None
        },
        dst_port: if k.has_ports() {
            port(k.dst_port, bits(11, 4))
        } else {
            None
        },
        vlan: (k.has_vlan() && bits(14, 2) == 0).then_some((k.vlan, k.vlan)),
        priority: bits(16, 5) as u32,
        action: bits(20, 9) as u32,
        ..Rule::default()
    }
}

#[test]
fn captures_equal_reference() {
    for f in clarion_testdata::capture_files() {
        let mut keys = load(&f);
        assert!(!keys.is_empty(), "{}", f.display());
        // The reference is linear in rules: 6,000 packets of each file suffice.
        keys.truncate(6000);
        let mut distinct = keys.clone();
        distinct.sort();
        distinct.dedup();
        let step = (distinct.len() / 60).max(1);
        let rules: Vec<Rule> = distinct
            .iter()
            .step_by(step)
            .enumerate()
            .map(|(i, k)| rule_from(k, (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)))
            .collect();
        eprintln!("{}: {} packets, {} rules", f.display(), keys.len(), rules.len());
        for cap in [4, 256] {
            check_all(&rules, &keys, cap).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        }
    }
}

// ---- counters ----

/// On a repeated trace with a cache large enough to keep every uniflow, the
/// second pass hits on every packet at exactly one hash lookup each; the
/// megaflow path needs at least one lookup per packet.
#[test]
fn uss_hits_cost_one_lookup() {
    for kind in [Kind::Acl, Kind::Fw] {
        let rules = gen::rules(kind, 1000, 3);
        let keys = gen::trace(&rules, 3000, None, 3);
        for sem in SEMANTICS {
            let mut c = Classifier::new(&rules, sem, FastPath::Uss { capacity: 1 << 16 }).unwrap();
            for k in &keys {
                c.classify(k);
            }
            let before = c.stats();
            assert_eq!(before.evictions, 0);
            for k in &keys {
                c.classify(k);
            }
            let after = c.stats();
            let n = keys.len() as u64;
            assert_eq!(
                after.fast_hits - before.fast_hits,
                n,
                "{kind:?} {sem:?}: every packet hits"
            );
            assert_eq!(
                after.fast_lookups - before.fast_lookups,
                n,
                "{kind:?} {sem:?}: one lookup per hit"
            );
            assert_eq!(after.slow_lookups, before.slow_lookups);
            assert!(after.mean_cached_space_log2() >= 0.0);
        }
    }
}

/// Eviction keeps the cache at its capacity and is counted.
#[test]
fn caches_stay_bounded() {
    let rules = gen::rules(Kind::Fw, 1000, 4);
    let keys = gen::trace(&rules, 5000, None, 4);
    for fp in [
        FastPath::Megaflow { capacity: 50 },
        FastPath::Uss { capacity: 50 },
    ] {
        let mut c = Classifier::new(&rules, Semantics::FirstMatch, fp).unwrap();
        for k in &keys {
            c.classify(k);
        }
        let s = c.stats();
        assert_eq!(s.cache_entries, 50, "{fp:?}");
        assert_eq!(
            s.cache_entries + s.evictions,
            s.misses,
            "{fp:?}: one insert per miss"
        );
    }
}

#[test]
fn zero_capacity_is_an_error() {
    assert!(Classifier::new(&[], Semantics::FirstMatch, FastPath::Uss { capacity: 0 }).is_err());
    assert!(Classifier::new(&[], Semantics::FirstMatch, FastPath::Megaflow { capacity: 0 }).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, max_global_rejects: 4096, ..ProptestConfig::default() })]

    /// The full USS table on small random rule sets that fit (the shared
    /// check above skips the many that explode): proptest gives up, failing,
    /// if too few fit.
    #[test]
    fn full_uss_equals_reference(
        rules in prop::collection::vec(rule(), 0..6),
        packets in prop::collection::vec(packet(), 1..80),
    ) {
        for sem in SEMANTICS {
            let t = UssTable::new(&rules, sem, 1 << 18);
            prop_assume!(t.is_ok());
            let t = t.expect("fits");
            for k in &packets {
                let v = t.classify(k);
                match sem {
                    Semantics::FirstMatch => {
                        let want = reference::first_match(&rules, k);
                        prop_assert_eq!(t.actions_of(&v), want.as_slice());
                    }
                    Semantics::AllMatches => prop_assert_eq!(t.actions_of(&v), &reference::all_matches(&rules, k)[..]),
                }
            }
        }
    }
}

/// The full construction refuses an exploding set instead of allocating it,
/// and builds a set whose rules sit at the sub-prefix widths.
#[test]
fn full_uss_limit() {
    let wide = Rule {
        action: 1,
        ..Rule::default()
    };
    let host = |x: u8| Rule {
        src_ip: Some(IpPrefix {
            addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, x)),
            len: 32,
        }),
        action: 2,
        ..Rule::default()
    };
    // A /0 beside /32s: 2^16 boxes in the /32s' cell alone (times 2: the family).
    let r = UssTable::new(&[wide.clone(), host(1), host(2)], Semantics::FirstMatch, 1000);
    assert!(matches!(r, Err(ClassifyError::TooManyUniflows { limit: 1000 })));
    let t = UssTable::new(&[wide, host(1), host(2)], Semantics::FirstMatch, 1 << 18).unwrap();
    assert!(t.uniflow_count() > 1 << 16);
    let k = gen::ipv4_key(0x0a00_0001, 1, 6, 1, 2);
    assert_eq!(
        t.classify(&k),
        Verdict::Action(1),
        "the /0 rule comes first at equal priority"
    );
}
