//! ClassBench rule sets and traces (IPv4), seeded and deterministic.
//!
//! # Design
//!
//! Rule sets follow a ClassBench parameter file ([`Seed`], `seed.rs`;
//! `acl1_seed` and `fw1_seed` are built in) the way ClassBench's
//! `db_generator` does, without its smoothing and scope options. Per rule:
//!
//! 1. a protocol by the `-prots` fractions (0 there is a wildcard);
//! 2. a port pair class (each side WC, HI = 1024:65535, LO = 0:1023, an
//!    arbitrary range AR or an exact port EM) by that protocol's fractions;
//! 3. the AR and EM ports from the side's `-spar`/`-spem` or
//!    `-dpar`/`-dpem` list;
//! 4. the total prefix length and then the source length given it from the
//!    class's table (`-wc_em` ...), the destination's being the rest;
//! 5. addresses, once all lengths are known, from one binary prefix tree
//!    per side grown by the `-sskew`/`-dskew` statistics (below), under
//!    the `-snest`/`-dnest` thresholds.
//!
//! *Addresses.* Per side, the rules with a prefix (length 1 and up) are
//! shuffled and split top down, as ClassBench builds its trees: the rules
//! ending at a node take its bits; the rest go to one child, or, with the
//! probability that a node of that depth has two children (the file's
//! `two_children`), to two, the heavier child taking `1 / (2 - skew)` of
//! them (a skew of `1 - light/heavy` gives the light side `1 - skew` times
//! the heavy side's rules). So prefixes share leading bits as the real
//! set's do, and the number of distinct nodes per depth follows the
//! file, not the set's size. Nesting: each node carries how many more
//! prefixes a path below it may meet (the `-snest`/`-dnest` threshold at
//! the root); where one more is left, the rules ending at a child and
//! the longer ones go to different children, so no address matches more
//! than the threshold of one side's prefixes (wildcards are not prefixes
//! here). `-pcorr` (how often the two sides' trees agree) is not
//! modelled.
//!
//! Traces follow ClassBench's `trace_generator`: each header is drawn from
//! the space of a random rule (uniform within each of its fields), then
//! repeated `max(1, floor(b / U^(1/a)))` times (Pareto locality of
//! reference; `a = 1, b = 0.1` as in ClassBench's examples).
//!
//! Rules are in priority order, as ClassBench's: rule `i` of `n` has
//! priority `n - i` and action `i`.
//!
//! # Cost
//!
//! `O(n log n)` in rules (a sort per tree level), linear in packets; no
//! I/O.

use std::net::Ipv4Addr;
use std::sync::OnceLock;

use clarion_wire::FlowKey;

use crate::cache_rng::CacheRng;
use crate::rule::{IpPrefix, Rule};
pub use crate::seed::{PortClass, Seed, Tree, PAIRS};

/// Which built-in rule set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Access-control lists: ClassBench's `acl1_seed`.
    Acl,
    /// Firewalls: ClassBench's `fw1_seed`.
    Fw,
}

impl Kind {
    /// The parsed built-in parameter file.
    pub fn seed(self) -> &'static Seed {
        static ACL: OnceLock<Seed> = OnceLock::new();
        static FW: OnceLock<Seed> = OnceLock::new();
        // The files are part of the crate, not input: `seed::tests` parses
        // both, so a failure here is a build that shipped a broken file.
        match self {
            Kind::Acl => {
                ACL.get_or_init(|| Seed::parse(crate::seed::ACL1).expect("built-in acl1_seed parses"))
            }
            Kind::Fw => FW.get_or_init(|| Seed::parse(crate::seed::FW1).expect("built-in fw1_seed parses")),
        }
    }
}

/// Draws an index by weight (the last one if rounding leaves a remainder).
fn pick<T>(rng: &mut CacheRng, items: &[T], weight: impl Fn(&T) -> f64) -> usize {
    let total: f64 = items.iter().map(&weight).sum();
    let mut x = rng.unit() * total;
    for (i, it) in items.iter().enumerate() {
        x -= weight(it);
        if x < 0.0 {
            return i;
        }
    }
    items.len().saturating_sub(1)
}

/// One side's port condition of the class, from that side's lists.
fn port(
    rng: &mut CacheRng,
    class: PortClass,
    ar: &[(f64, u16, u16)],
    em: &[(f64, u16, u16)],
) -> Option<(u16, u16)> {
    let from =
        |rng: &mut CacheRng, list: &[(f64, u16, u16)]| list.get(pick(rng, list, |e| e.0)).map(|e| (e.1, e.2));
    match class {
        PortClass::Wc => None,
        PortClass::Hi => Some((1024, 65535)),
        PortClass::Lo => Some((0, 1023)),
        PortClass::Ar => from(rng, ar),
        PortClass::Em => from(rng, em),
    }
}

/// One side's top-down split: the prefix lengths (0: wildcard) and the
/// addresses being given.
struct Split<'a> {
    rng: &'a mut CacheRng,
    tree: &'a Tree,
    lens: &'a [u8],
    out: Vec<u32>,
}

impl Split<'_> {
    /// One node: depth `d`, its leading bits, the rules (indices into
    /// `lens`, all longer than `d`) below it, and how many more prefixes a
    /// path below it may still meet (`budget >= 1`).
    fn node(&mut self, d: u8, bits: u32, items: &mut [usize], budget: u32) {
        if items.is_empty() || d >= 32 {
            return;
        }
        let lens = self.lens;
        // Rules ending at the children first (a stable partition keeps the
        // initial shuffle's randomness in both halves).
        let ends = items.iter().filter(|&&i| lens[i] == d + 1).count();
        items.sort_by_key(|&i| lens[i] != d + 1);
        let s = self.tree.skew[usize::from(d)];
        let k = items.len();
        let first = if budget == 1 && ends > 0 && ends < k {
            // One more prefix on any path: the rules ending at the child
            // and the longer ones must not share it.
            ends
        } else if k >= 2 && self.rng.unit() < s.two_children {
            let heavy = 1.0 / (2.0 - s.skew.clamp(0.0, 1.0));
            ((k as f64 * heavy).round() as usize).clamp(1, k - 1)
        } else {
            k
        };
        let side = self.rng.below(2);
        let (a, b) = items.split_at_mut(first);
        for (part, bit) in [(a, side), (b, 1 - side)] {
            let c = if bit == 1 {
                bits | (1 << (31 - u32::from(d)))
            } else {
                bits
            };
            // The rules ending at the child lead the part (sorted above).
            let ending = part.iter().take_while(|&&i| lens[i] == d + 1).count();
            for &i in &part[..ending] {
                self.out[i] = c;
            }
            // A child holding prefixes spends one of the budget below it;
            // at a budget of 1 such a child holds no longer rules.
            let below = budget - u32::from(ending > 0);
            debug_assert!(below >= 1 || ending == part.len());
            self.node(d + 1, c, &mut part[ending..], below.max(1));
        }
    }
}

/// Addresses for prefixes of the given lengths (0: wildcard) from one
/// top-down split of a shuffled list.
fn addresses(rng: &mut CacheRng, tree: &Tree, lens: &[u8]) -> Vec<Option<IpPrefix>> {
    let mut items: Vec<usize> = (0..lens.len()).filter(|&i| lens[i] > 0).collect();
    for i in (1..items.len()).rev() {
        items.swap(i, rng.below(i + 1));
    }
    let mut split = Split {
        rng,
        tree,
        lens,
        out: vec![0; lens.len()],
    };
    split.node(0, 0, &mut items, tree.nest);
    lens.iter()
        .zip(split.out)
        .map(|(&len, a)| {
            (len > 0).then(|| IpPrefix {
                addr: Ipv4Addr::from(a).into(),
                len,
            })
        })
        .collect()
}

/// `n` IPv4 rules of the given built-in kind, the same for the same seed.
pub fn rules(kind: Kind, n: usize, seed: u64) -> Vec<Rule> {
    rules_from(kind.seed(), n, seed)
}

/// `n` IPv4 rules following a parameter file, the same for the same seed.
pub fn rules_from(s: &Seed, n: usize, seed: u64) -> Vec<Rule> {
    let mut rng = CacheRng::new(seed);
    let mut out = Vec::with_capacity(n);
    let (mut slens, mut dlens) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let row = &s.protos[pick(&mut rng, &s.protos, |r| r.weight)];
        let c = pick(&mut rng, &row.classes, |w| *w);
        let (sc, dc) = PAIRS[c];
        let table = &s.lengths[c];
        // `Seed::parse` refused a drawable class with an empty table; the
        // fallback (both wildcards) is for a hand-made `Seed`.
        let (slen, dlen) = match table.get(pick(&mut rng, table, |t| t.weight)) {
            Some(t) => {
                let src = t.src.get(pick(&mut rng, &t.src, |x| x.1)).map_or(0, |x| x.0);
                (src.min(32), t.total.saturating_sub(src).min(32))
            }
            None => (0, 0),
        };
        slens.push(slen);
        dlens.push(dlen);
        out.push(Rule {
            src_port: port(&mut rng, sc, &s.spar, &s.spem),
            dst_port: port(&mut rng, dc, &s.dpar, &s.dpem),
            proto: row.proto,
            priority: (n - i) as u32,
            action: i as u32,
            ..Rule::default()
        });
    }
    let src = addresses(&mut rng, &s.src, &slens);
    let dst = addresses(&mut rng, &s.dst, &dlens);
    for ((r, s), d) in out.iter_mut().zip(src).zip(dst) {
        r.src_ip = s;
        r.dst_ip = d;
    }
    out
}

/// An IPv4 flow key (ports only for TCP and UDP, untagged).
pub fn ipv4_key(src: u32, dst: u32, proto: u8, sport: u16, dport: u16) -> FlowKey {
    let mut k = FlowKey {
        proto,
        ..FlowKey::default()
    };
    k.src_ip[..4].copy_from_slice(&src.to_be_bytes());
    k.dst_ip[..4].copy_from_slice(&dst.to_be_bytes());
    if proto == 6 || proto == 17 {
        k.flags |= FlowKey::HAS_PORTS;
        k.src_port = sport;
        k.dst_port = dport;
    }
    k
}

/// Pareto locality of reference for [`trace`]: each header is repeated
/// `max(1, floor(b / U^(1/a)))` times (at most 10,000).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Locality {
    pub a: f64,
    pub b: f64,
}

impl Locality {
    /// ClassBench's example parameters (`trace_generator 1 0.1 ...`).
    pub const CLASSBENCH: Locality = Locality { a: 1.0, b: 0.1 };
}

/// `packets` IPv4 headers, each from the space of a random rule (IPv4 rules
/// only; an empty or IPv6-only set gives random headers).
pub fn trace(rules: &[Rule], packets: usize, locality: Option<Locality>, seed: u64) -> Vec<FlowKey> {
    let mut rng = CacheRng::new(seed ^ 0x7472_6163_6521);
    let v4: Vec<&Rule> = rules
        .iter()
        .filter(|r| ![r.src_ip, r.dst_ip].iter().flatten().any(|p| p.addr.is_ipv6()))
        .collect();
    let mut out = Vec::with_capacity(packets);
    while out.len() < packets {
        let r = v4.get(rng.below(v4.len().max(1))).copied();
        let ip = |rng: &mut CacheRng, p: Option<IpPrefix>| -> u32 {
            let x = rng.u64() as u32;
            match p {
                Some(IpPrefix {
                    addr: std::net::IpAddr::V4(a),
                    len,
                }) if len > 0 => {
                    let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                    (u32::from(a) & m) | (x & !m)
                }
                _ => x,
            }
        };
        let pt = |rng: &mut CacheRng, p: Option<(u16, u16)>| -> u16 {
            let (lo, hi) = p.unwrap_or((0, 65535));
            lo + rng.below(usize::from(hi - lo) + 1) as u16
        };
        let r = r.cloned().unwrap_or_default();
        let has_port_cond = r.src_port.is_some() || r.dst_port.is_some();
        let proto = r.proto.unwrap_or_else(|| {
            if has_port_cond {
                6
            } else {
                [6u8, 17, 1, 6][rng.below(4)]
            }
        });
        let key = ipv4_key(
            ip(&mut rng, r.src_ip),
            ip(&mut rng, r.dst_ip),
            proto,
            pt(&mut rng, r.src_port),
            pt(&mut rng, r.dst_port),
        );
        let copies = match locality {
            None => 1,
            Some(l) => {
                let u = 1.0 - rng.unit(); // (0, 1]
                ((l.b / u.powf(1.0 / l.a)).floor() as usize).clamp(1, 10_000)
            }
        };
        for _ in 0..copies.min(packets - out.len()) {
            out.push(key);
        }
    }
    out
}

/// A workload for the fast paths at a 100% hit rate: the first `distinct`
/// distinct headers of `trace` (all of them if it has fewer), then
/// `packets` headers drawn uniformly from those, seeded.
///
/// Classifying the first vector once fills a cache of at least `distinct`
/// entries with everything the second needs (each header adds at most one
/// entry, only when it misses, so nothing is evicted): every packet of the
/// second vector then hits, in an order with no locality beyond the set's
/// own size, and the fast path alone is measured.
pub fn hot_trace(
    trace: &[FlowKey],
    distinct: usize,
    packets: usize,
    seed: u64,
) -> (Vec<FlowKey>, Vec<FlowKey>) {
    let mut seen = std::collections::HashSet::new();
    let headers: Vec<FlowKey> = trace
        .iter()
        .filter(|k| seen.insert(**k))
        .take(distinct)
        .copied()
        .collect();
    let mut rng = CacheRng::new(seed ^ 0x686f_7421);
    let hot = if headers.is_empty() {
        Vec::new()
    } else {
        (0..packets)
            .filter_map(|_| headers.get(rng.below(headers.len())).copied())
            .collect()
    };
    (headers, hot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference;

    #[test]
    fn deterministic_and_sized() {
        for kind in [Kind::Acl, Kind::Fw] {
            let a = rules(kind, 1000, 5);
            assert_eq!(a, rules(kind, 1000, 5));
            assert_ne!(a, rules(kind, 1000, 6));
            assert_eq!(a.len(), 1000);
            let t = trace(&a, 5000, Some(Locality::CLASSBENCH), 1);
            assert_eq!(t, trace(&a, 5000, Some(Locality::CLASSBENCH), 1));
            assert_eq!(t.len(), 5000);
        }
    }

    /// Every header of a trace without locality matches at least the rule
    /// it was drawn from (so, at least one rule), by the reference.
    #[test]
    fn trace_headers_match_some_rule() {
        for kind in [Kind::Acl, Kind::Fw] {
            let rs = rules(kind, 300, 9);
            for k in trace(&rs, 2000, None, 2) {
                assert!(reference::first_match(&rs, &k).is_some(), "{k:?}");
            }
        }
    }

    /// The hot trace's headers are distinct, drawn from the trace, and
    /// the only ones its packets use.
    #[test]
    fn hot_trace_uses_its_headers_only() {
        let rs = rules(Kind::Acl, 100, 3);
        let t = trace(&rs, 5000, Some(Locality::CLASSBENCH), 3);
        let (h, hot) = hot_trace(&t, 200, 3000, 1);
        assert_eq!(h.len(), 200);
        let set: std::collections::HashSet<_> = h.iter().collect();
        assert_eq!(set.len(), 200);
        assert!(h.iter().all(|k| t.contains(k)));
        assert_eq!(hot.len(), 3000);
        assert!(hot.iter().all(|k| set.contains(k)));
        assert!(hot_trace(&[], 10, 10, 1).1.is_empty());
    }
}
