//! Rule sets drawn from ClassBench's `acl1_seed` and `fw1_seed` against the
//! files' own tables: every distribution the generator draws from
//! (protocols, port pair classes given the protocol, AR and EM ports,
//! prefix-length pairs given the class) measured on a generated set by a
//! plain count and compared cell by cell, and the nesting thresholds
//! counted by brute force over the set's distinct prefixes.
//!
//! Tolerance: a cell with expected fraction `p` among `m` draws may be off
//! by five binomial standard deviations, `5 sqrt(p (1 - p) / m)`, plus
//! 0.002 for the files' rounding (their fractions sum to 1 within 1e-6,
//! the generator renormalises); a wrong table is off by far more in the
//! cells it moves.

use std::collections::HashMap;
use std::net::IpAddr;

use clarion_classify::gen::{self, Kind, PortClass, Seed, PAIRS};
use clarion_classify::{IpPrefix, Rule};
use proptest::prelude::*;

/// The class of one side's port condition, by its values alone.
fn class_of(p: Option<(u16, u16)>) -> PortClass {
    match p {
        None => PortClass::Wc,
        Some((1024, 65535)) => PortClass::Hi,
        Some((0, 1023)) => PortClass::Lo,
        Some((lo, hi)) if lo == hi => PortClass::Em,
        Some(_) => PortClass::Ar,
    }
}

fn len(p: Option<IpPrefix>) -> u8 {
    p.map_or(0, |p| p.len)
}

/// Compares measured counts with expected weights (normalised here);
/// keys missing from either side count as 0.
fn check<K: std::hash::Hash + Eq + std::fmt::Debug + Copy>(
    what: &str,
    counts: &HashMap<K, usize>,
    weights: &[(K, f64)],
) {
    let m: usize = counts.values().sum();
    if m == 0 {
        return;
    }
    let total: f64 = weights.iter().map(|w| w.1).sum();
    let mut expected: HashMap<K, f64> = HashMap::new();
    for &(k, w) in weights {
        *expected.entry(k).or_default() += w / total;
    }
    for k in counts.keys() {
        assert!(
            expected.contains_key(k),
            "{what}: {k:?} drawn but not in the seed"
        );
    }
    for (k, p) in expected {
        let got = counts.get(&k).copied().unwrap_or(0) as f64 / m as f64;
        let tol = 5.0 * (p * (1.0 - p) / m as f64).sqrt() + 0.002;
        assert!(
            (got - p).abs() <= tol,
            "{what}: {k:?} measured {got:.4}, seed {p:.4} (m = {m}, tolerance {tol:.4})"
        );
    }
}

fn count<K: std::hash::Hash + Eq>(it: impl Iterator<Item = K>) -> HashMap<K, usize> {
    let mut c = HashMap::new();
    for k in it {
        *c.entry(k).or_default() += 1;
    }
    c
}

fn class_index(r: &Rule) -> usize {
    let pair = (class_of(r.src_port), class_of(r.dst_port));
    PAIRS
        .iter()
        .position(|&p| p == pair)
        .expect("every pair of classes is one of the 25")
}

fn distributions_match(s: &Seed, rules: &[Rule]) {
    // The reference class_of relies on no AR entry looking like HI, LO or
    // an exact port.
    for &(_, lo, hi) in s.spar.iter().chain(&s.dpar) {
        assert!(lo < hi && (lo, hi) != (1024, 65535) && (lo, hi) != (0, 1023));
    }
    let protos: Vec<(Option<u8>, f64)> = s.protos.iter().map(|p| (p.proto, p.weight)).collect();
    check("protocol", &count(rules.iter().map(|r| r.proto)), &protos);
    for row in &s.protos {
        let of_proto = rules.iter().filter(|r| r.proto == row.proto);
        let weights: Vec<(usize, f64)> = row.classes.iter().copied().enumerate().collect();
        check(
            &format!("classes of {:?}", row.proto),
            &count(of_proto.map(class_index)),
            &weights,
        );
    }
    for (c, table) in s.lengths.iter().enumerate() {
        let of_class = rules.iter().filter(|r| class_index(r) == c);
        let total: f64 = table.iter().map(|t| t.weight).sum();
        let mut weights = Vec::new();
        for t in table {
            let sum: f64 = t.src.iter().map(|x| x.1).sum();
            for &(src, w) in &t.src {
                weights.push(((src, t.total - src), t.weight / total * w / sum));
            }
        }
        let pairs = count(of_class.map(|r| (len(r.src_ip), len(r.dst_ip))));
        check(&format!("prefix lengths of {:?}", PAIRS[c]), &pairs, &weights);
    }
    type Side = fn(&Rule) -> Option<(u16, u16)>;
    let sides: [(&str, Side, _, _); 2] = [
        ("source", |r: &Rule| r.src_port, &s.spar, &s.spem),
        ("destination", |r: &Rule| r.dst_port, &s.dpar, &s.dpem),
    ];
    for (side, get, ar, em) in sides {
        for (class, list) in [(PortClass::Ar, ar), (PortClass::Em, em)] {
            let drawn = rules
                .iter()
                .filter_map(get)
                .filter(|&p| class_of(Some(p)) == class);
            let weights: Vec<((u16, u16), f64)> = list.iter().map(|e| ((e.1, e.2), e.0)).collect();
            check(&format!("{side} {class:?} ports"), &count(drawn), &weights);
        }
    }
}

/// The most distinct prefixes (length 1 and up) one address matches, by
/// checking every pair.
fn max_nesting(prefixes: impl Iterator<Item = Option<IpPrefix>>) -> usize {
    let mut distinct: Vec<(u32, u8)> = prefixes
        .flatten()
        .filter(|p| p.len > 0)
        .map(|p| match p.addr {
            IpAddr::V4(a) => (u32::from(a) & (u32::MAX << (32 - u32::from(p.len))), p.len),
            IpAddr::V6(_) => panic!("the generator makes IPv4 rules"),
        })
        .collect();
    distinct.sort_unstable();
    distinct.dedup();
    let contains = |outer: (u32, u8), inner: (u32, u8)| {
        outer.1 <= inner.1 && (inner.0 ^ outer.0) & (u32::MAX << (32 - u32::from(outer.1))) == 0
    };
    distinct
        .iter()
        .map(|&p| distinct.iter().filter(|&&q| contains(q, p)).count())
        .max()
        .unwrap_or(0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn generated_sets_follow_their_seed(fw in any::<bool>(), n in 3000usize..6000, seed in any::<u64>()) {
        let kind = if fw { Kind::Fw } else { Kind::Acl };
        let s = kind.seed();
        let rules = gen::rules(kind, n, seed);
        prop_assert_eq!(rules.len(), n);
        distributions_match(s, &rules);
        let src = max_nesting(rules.iter().map(|r| r.src_ip));
        let dst = max_nesting(rules.iter().map(|r| r.dst_ip));
        prop_assert!(src as u32 <= s.src.nest, "source nesting {} > {}", src, s.src.nest);
        prop_assert!(dst as u32 <= s.dst.nest, "destination nesting {} > {}", dst, s.dst.nest);
        // The trees share leading bits (real sets have few sites): far fewer
        // distinct /16s than prefixes of 16 bits or more.
        let long: Vec<u32> = rules.iter().filter_map(|r| r.dst_ip).filter(|p| p.len >= 16).map(|p| match p.addr {
            IpAddr::V4(a) => u32::from(a) >> 16,
            IpAddr::V6(_) => 0,
        }).collect();
        let distinct: std::collections::HashSet<_> = long.iter().collect();
        prop_assert!(distinct.len() * 4 < long.len().max(4), "{} distinct /16s of {}", distinct.len(), long.len());
    }
}

/// The 10,000-rule sets the lab measures keep the thresholds too.
#[test]
fn ten_thousand_rule_sets_keep_nesting() {
    for kind in [Kind::Acl, Kind::Fw] {
        let s = kind.seed();
        let rules = gen::rules(kind, 10_000, 1);
        assert!(max_nesting(rules.iter().map(|r| r.src_ip)) as u32 <= s.src.nest);
        assert!(max_nesting(rules.iter().map(|r| r.dst_ip)) as u32 <= s.dst.nest);
    }
}
