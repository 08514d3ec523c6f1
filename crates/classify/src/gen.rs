//! ClassBench-style rule sets and traces (IPv4), seeded and deterministic.
//!
//! # Design
//!
//! ClassBench's `db_generator` draws, per rule, a protocol, then a *port
//! pair class* (each port wildcard, an arbitrary range, or an exact value)
//! given the protocol, then port values from per-class lists, then the
//! source and destination prefix lengths from a joint distribution given the
//! port pair class, and finally addresses from trees with nesting and skew.
//! We keep the first four steps with the distributions of the seed files
//! (tables below) and replace the address trees by a pool of "sites" (a
//! /24-ish base per site, hosts below it), which gives the overlap and
//! sharing that make TSS tuples and megaflow masks interesting without
//! ClassBench's tree machinery.
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
//! Linear in rules and packets; no I/O.

use clarion_wire::FlowKey;

use crate::cache_rng::CacheRng;
use crate::rule::{IpPrefix, Rule};

/// Which kind of rule set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Access-control lists: ClassBench's `acl1` seed.
    Acl,
    /// Firewalls: an approximation of ClassBench's `fw1` (see [`FW`]).
    Fw,
}

/// A port condition class (ClassBench: WC, HI, LO, AR, EM).
#[derive(Debug, Clone, Copy)]
enum Port {
    Wc,
    Hi,
    Ar,
    Em,
}

/// One protocol's row: its weight, then its port pair classes (src, dst)
/// with weights.
struct ProtoRow {
    proto: Option<u8>,
    weight: f64,
    pairs: &'static [(Port, Port, f64)],
}

/// Per port pair class: (total prefix length, weight, [(src length, weight)]).
type LenTable = &'static [(u8, f64, &'static [(u8, f64)])];

struct Seed {
    protos: &'static [ProtoRow],
    /// Destination arbitrary ranges (source ARs use the same list).
    ar: &'static [(f64, u16, u16)],
    /// Exact destination ports (source EMs use the same list).
    em: &'static [(f64, u16)],
    /// Prefix lengths for WC/WC, WC/AR and WC/EM (others use WC/EM's).
    wc_wc: LenTable,
    wc_ar: LenTable,
    wc_em: LenTable,
}

/// ClassBench `acl1_seed` (the 733-rule ACL), sections `-prots`, `-dpar`
/// (top 12 of 34), `-dpem` (top 24 of 72), `-wc_wc`, `-wc_ar`, `-wc_em`;
/// read from a public copy of ClassBench's parameter files
/// (JiaChangGit/classbench-packet-classification, `parameter_files/acl1_seed`).
/// Weights are renormalised when drawn, so truncated lists stay valid.
const ACL: Seed = Seed {
    protos: &[
        ProtoRow {
            proto: None,
            weight: 0.0846,
            pairs: &[(Port::Wc, Port::Wc, 1.0)],
        },
        ProtoRow {
            proto: Some(1),
            weight: 0.0314,
            pairs: &[(Port::Wc, Port::Wc, 1.0)],
        },
        ProtoRow {
            proto: Some(6),
            weight: 0.8731,
            pairs: &[
                (Port::Wc, Port::Wc, 0.2156),
                (Port::Wc, Port::Ar, 0.1312),
                (Port::Wc, Port::Em, 0.6531),
            ],
        },
        ProtoRow {
            proto: Some(17),
            weight: 0.0109,
            pairs: &[(Port::Wc, Port::Ar, 0.125), (Port::Wc, Port::Em, 0.875)],
        },
    ],
    ar: &[
        (0.0824, 1600, 1649),
        (0.0706, 1300, 1349),
        (0.0706, 1300, 1350),
        (0.0471, 7500, 7599),
        (0.0471, 2200, 2210),
        (0.0353, 1025, 65535),
        (0.0353, 1700, 1750),
        (0.0353, 5001, 65535),
        (0.0353, 32200, 32207),
        (0.0353, 8000, 8100),
        (0.0235, 61700, 61709),
        (0.0235, 61500, 61509),
    ],
    em: &[
        (0.1882, 1521),
        (0.0541, 1526),
        (0.0424, 1221),
        (0.0353, 1433),
        (0.0282, 1525),
        (0.0282, 135),
        (0.0282, 14753),
        (0.0235, 1712),
        (0.0235, 1711),
        (0.0235, 1704),
        (0.0235, 1708),
        (0.0212, 5555),
        (0.0212, 1705),
        (0.0212, 6000),
        (0.0212, 20),
        (0.0212, 21),
        (0.0212, 1724),
        (0.0212, 1717),
        (0.0188, 1707),
        (0.0188, 1733),
        (0.0188, 1706),
        (0.0188, 5540),
        (0.0188, 5541),
        (0.0047, 80),
    ],
    wc_wc: &[
        (0, 0.0045, &[(0, 1.0)]),
        (8, 0.0090, &[(0, 0.5), (8, 0.5)]),
        (13, 0.0045, &[(0, 1.0)]),
        (23, 0.0045, &[(23, 1.0)]),
        (24, 0.0045, &[(23, 1.0)]),
        (28, 0.0045, &[(23, 1.0)]),
        (39, 0.0538, &[(23, 1.0)]),
        (48, 0.0045, &[(23, 1.0)]),
        (52, 0.0179, &[(30, 1.0)]),
        (53, 0.0090, &[(31, 1.0)]),
        (54, 0.0897, &[(23, 0.1), (32, 0.9)]),
        (55, 0.1031, &[(23, 0.9565), (31, 0.0435)]),
        (56, 0.1121, &[(32, 1.0)]),
        (62, 0.0179, &[(30, 1.0)]),
        (63, 0.0314, &[(31, 0.8571), (32, 0.1429)]),
        (64, 0.4888, &[(32, 1.0)]),
    ],
    wc_ar: &[
        (55, 0.0118, &[(23, 1.0)]),
        (63, 0.0353, &[(31, 1.0)]),
        (64, 0.9529, &[(32, 1.0)]),
    ],
    wc_em: &[
        (51, 0.0047, &[(23, 1.0)]),
        (52, 0.0141, &[(30, 1.0)]),
        (53, 0.0071, &[(31, 1.0)]),
        (54, 0.0447, &[(23, 0.0526), (32, 0.9474)]),
        (55, 0.0282, &[(23, 1.0)]),
        (62, 0.0118, &[(32, 1.0)]),
        (63, 0.0424, &[(31, 0.6111), (32, 0.3889)]),
        (64, 0.8471, &[(32, 1.0)]),
    ],
};

/// Firewall-like rules. ClassBench's `fw1_seed` was not available to read,
/// so this follows what the ClassBench paper (Taylor and Turner, 2005)
/// reports of firewall sets rather than the seed's numbers: a wildcard
/// protocol is common, source addresses are often wildcards, destinations
/// mostly hosts, and port conditions include the HI range (1024:65535)
/// beside exact ports. It is therefore "FW-like", not `fw1`.
const FW: Seed = Seed {
    protos: &[
        ProtoRow {
            proto: None,
            weight: 0.2,
            pairs: &[(Port::Wc, Port::Wc, 1.0)],
        },
        ProtoRow {
            proto: Some(1),
            weight: 0.03,
            pairs: &[(Port::Wc, Port::Wc, 1.0)],
        },
        ProtoRow {
            proto: Some(6),
            weight: 0.62,
            pairs: &[
                (Port::Wc, Port::Wc, 0.15),
                (Port::Wc, Port::Em, 0.40),
                (Port::Wc, Port::Hi, 0.10),
                (Port::Hi, Port::Em, 0.10),
                (Port::Wc, Port::Ar, 0.15),
                (Port::Em, Port::Wc, 0.10),
            ],
        },
        ProtoRow {
            proto: Some(17),
            weight: 0.15,
            pairs: &[
                (Port::Wc, Port::Em, 0.6),
                (Port::Wc, Port::Wc, 0.2),
                (Port::Hi, Port::Em, 0.2),
            ],
        },
    ],
    ar: ACL.ar,
    em: ACL.em,
    wc_wc: &[
        (0, 0.10, &[(0, 1.0)]),
        (24, 0.10, &[(0, 0.9), (24, 0.1)]),
        (32, 0.25, &[(0, 0.8), (32, 0.2)]),
        (48, 0.10, &[(16, 0.5), (24, 0.5)]),
        (56, 0.20, &[(24, 1.0)]),
        (64, 0.25, &[(32, 1.0)]),
    ],
    wc_ar: &[
        (32, 0.5, &[(0, 1.0)]),
        (56, 0.2, &[(24, 1.0)]),
        (64, 0.3, &[(32, 1.0)]),
    ],
    wc_em: &[
        (0, 0.05, &[(0, 1.0)]),
        (24, 0.10, &[(0, 1.0)]),
        (32, 0.40, &[(0, 0.9), (32, 0.1)]),
        (56, 0.15, &[(24, 1.0)]),
        (64, 0.30, &[(32, 1.0)]),
    ],
};

/// Draws an index by weight.
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

fn port(rng: &mut CacheRng, s: &Seed, c: Port) -> Option<(u16, u16)> {
    match c {
        Port::Wc => None,
        Port::Hi => Some((1024, 65535)),
        Port::Ar => s.ar.get(pick(rng, s.ar, |a| a.0)).map(|a| (a.1, a.2)),
        Port::Em => s.em.get(pick(rng, s.em, |a| a.0)).map(|a| (a.1, a.1)),
    }
}

/// `n` IPv4 rules of the given kind, the same for the same seed.
pub fn rules(kind: Kind, n: usize, seed: u64) -> Vec<Rule> {
    let s = match kind {
        Kind::Acl => &ACL,
        Kind::Fw => &FW,
    };
    let mut rng = CacheRng::new(seed);
    // Sites: a few hundred /24-ish bases per side at 10k rules, so prefixes
    // nest and share, as real policies' do.
    let nsites = (n / 16).clamp(4, 1024);
    let sites = |rng: &mut CacheRng| -> Vec<u32> { (0..nsites).map(|_| rng.u64() as u32 & !0xff).collect() };
    let (src_sites, dst_sites) = (sites(&mut rng), sites(&mut rng));
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let row = &s.protos[pick(&mut rng, s.protos, |r| r.weight)];
        let (sc, dc, _) = row.pairs[pick(&mut rng, row.pairs, |p| p.2)];
        let table = match (sc, dc) {
            (Port::Wc, Port::Wc) => s.wc_wc,
            (Port::Wc, Port::Ar) => s.wc_ar,
            _ => s.wc_em,
        };
        let (total, _, srcs) = table[pick(&mut rng, table, |t| t.1)];
        let slen = srcs[pick(&mut rng, srcs, |x| x.1)].0.min(total).min(32);
        let dlen = (total - slen).min(32);
        let addr = |rng: &mut CacheRng, sites: &[u32], len: u8| -> Option<IpPrefix> {
            (len > 0).then(|| {
                let base = sites[rng.below(sites.len())] | (rng.u64() as u32 & 0xff);
                IpPrefix {
                    addr: std::net::Ipv4Addr::from(base).into(),
                    len,
                }
            })
        };
        out.push(Rule {
            src_ip: addr(&mut rng, &src_sites, slen),
            dst_ip: addr(&mut rng, &dst_sites, dlen),
            src_port: port(&mut rng, s, sc),
            dst_port: port(&mut rng, s, dc),
            proto: row.proto,
            priority: (n - i) as u32,
            action: i as u32,
            ..Rule::default()
        });
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

    /// The ACL set follows the seed's protocol mix: TCP about 87 %.
    #[test]
    fn acl_protocol_mix() {
        let rs = rules(Kind::Acl, 10_000, 1);
        let tcp = rs.iter().filter(|r| r.proto == Some(6)).count() as f64 / 1e4;
        assert!((tcp - 0.873).abs() < 0.02, "{tcp}");
    }
}
