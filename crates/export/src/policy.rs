//! Export policies as classification rules.
//!
//! Each filter of policy `i` becomes one [`Rule`] whose action is `i`;
//! the classifier, built with [`Semantics::AllMatches`], answers with the
//! set of policies that take a packet. A filter is the same conjunction
//! in both worlds: an address prefix fixes the family, a port condition
//! never matches a packet without ports, a VLAN condition never matches an
//! untagged frame (`docs/language.md`, *filter*). A filter whose two
//! prefixes are of different families matches nothing and becomes no rule.
//!
//! The TSS slow path is always there; [`FastPathKind`] picks what caches
//! its answers: Trident's USS with uniflows (default), Open vSwitch's
//! megaflows, or nothing.

use clarion_classify::{Classifier, Family, FastPath, IpPrefix, Rule, Semantics};
use clarion_lang::spec::{ExportSpec, Filter};

use crate::ExportError;

/// The fast path in front of the classifier's TSS slow path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FastPathKind {
    /// Trident's USS mask arrays and a uniflow cache of this many entries.
    Uss { capacity: usize },
    /// Open vSwitch's megaflow cache of this many entries.
    Megaflow { capacity: usize },
    /// Tuple space search for every packet.
    None,
}

impl Default for FastPathKind {
    /// USS with 4,096 uniflows: Trident's fast path; a few hundred
    /// kilobytes, more than the policies of a host ever need.
    fn default() -> Self {
        FastPathKind::Uss { capacity: 4096 }
    }
}

/// The rules of `policies`: one per filter, action = the policy's index.
pub fn rules(policies: &[ExportSpec]) -> Vec<Rule> {
    let mut out = Vec::new();
    for (i, p) in policies.iter().enumerate() {
        for f in &p.filters {
            if let Some(r) = rule(f, i as u32) {
                out.push(r);
            }
        }
    }
    out
}

fn rule(f: &Filter, action: u32) -> Option<Rule> {
    let family = |p: &clarion_lang::spec::IpPrefix| {
        if p.addr.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    };
    let fam = match (&f.src_ip, &f.dst_ip) {
        (Some(s), Some(d)) if family(s) != family(d) => return None,
        (Some(p), _) | (_, Some(p)) => Some(family(p)),
        (None, None) => None,
    };
    let prefix = |p: &clarion_lang::spec::IpPrefix| IpPrefix {
        addr: p.addr,
        len: p.len,
    };
    Some(Rule {
        family: fam,
        src_ip: f.src_ip.as_ref().map(prefix),
        dst_ip: f.dst_ip.as_ref().map(prefix),
        src_port: f.src_port.map(|r| (r.lo, r.hi)),
        dst_port: f.dst_port.map(|r| (r.lo, r.hi)),
        proto: f.proto,
        vlan: f.vlan.map(|v| (v, v)),
        priority: 0,
        action,
    })
}

/// The classifier of `policies`.
pub fn classifier(policies: &[ExportSpec], fast: FastPathKind) -> Result<Classifier, ExportError> {
    let fast = match fast {
        FastPathKind::Uss { capacity } => FastPath::Uss { capacity },
        FastPathKind::Megaflow { capacity } => FastPath::Megaflow { capacity },
        FastPathKind::None => FastPath::None,
    };
    Ok(Classifier::new(&rules(policies), Semantics::AllMatches, fast)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_classify::Verdict;
    use clarion_wire::FlowKey;

    fn policies(src: &str) -> Vec<ExportSpec> {
        clarion_lang::check_exports(src).expect("the policies check")
    }

    /// The policies' own filters (`Filter::matches`-style, written out
    /// here from the language's definition) agree with the classifier.
    fn by_definition(p: &ExportSpec, k: &FlowKey) -> bool {
        p.filters.iter().any(|f| {
            let addr = |pre: &Option<clarion_lang::spec::IpPrefix>, a: std::net::IpAddr| match pre {
                None => true,
                Some(pre) => match (pre.addr, a) {
                    (std::net::IpAddr::V4(x), std::net::IpAddr::V4(y)) => {
                        let m = u32::MAX.checked_shl(32 - u32::from(pre.len)).unwrap_or(0);
                        u32::from(x) & m == u32::from(y) & m
                    }
                    (std::net::IpAddr::V6(x), std::net::IpAddr::V6(y)) => {
                        let m = u128::MAX.checked_shl(128 - u32::from(pre.len)).unwrap_or(0);
                        u128::from(x) & m == u128::from(y) & m
                    }
                    _ => false,
                },
            };
            let port = |r: &Option<clarion_lang::spec::PortRange>, v: u16| match r {
                None => true,
                Some(r) => k.has_ports() && (r.lo..=r.hi).contains(&v),
            };
            addr(&f.src_ip, k.src_addr())
                && addr(&f.dst_ip, k.dst_addr())
                && port(&f.src_port, k.src_port)
                && port(&f.dst_port, k.dst_port)
                && f.proto.is_none_or(|p| p == k.proto)
                && f.vlan.is_none_or(|v| k.has_vlan() && k.vlan == v)
        })
    }

    #[test]
    fn classifier_takes_what_the_filters_say() {
        let ps = policies(
            "export web\n  filter proto = tcp and dst_port in 80..443\n  send headers to collector 10.0.0.9\n\
             export net\n  filter src_ip in 10.1.0.0/16\n  filter dst_ip in 2001:db8::/32 and vlan = 7\n  send packets to pcapng\n\
             export all\n  send headers to collector 10.0.0.9\n\
             export mixed\n  filter src_ip in 10.0.0.0/8 and dst_ip in 2001:db8::/32\n  send headers to collector 10.0.0.9\n",
        );
        for fast in [
            FastPathKind::None,
            FastPathKind::Uss { capacity: 2 },
            FastPathKind::Megaflow { capacity: 2 },
        ] {
            let mut c = classifier(&ps, fast).expect("a classifier");
            let keys = [
                FlowKey::new(
                    "10.1.2.3".parse().unwrap(),
                    "10.9.9.9".parse().unwrap(),
                    6,
                    Some((999, 443)),
                    None,
                ),
                FlowKey::new(
                    "10.1.2.3".parse().unwrap(),
                    "10.9.9.9".parse().unwrap(),
                    1,
                    None,
                    None,
                ),
                FlowKey::new(
                    "10.2.2.3".parse().unwrap(),
                    "10.9.9.9".parse().unwrap(),
                    6,
                    Some((80, 444)),
                    None,
                ),
                FlowKey::new(
                    "2001:db9::1".parse().unwrap(),
                    "2001:db8::2".parse().unwrap(),
                    17,
                    Some((5, 5)),
                    Some(7),
                ),
                FlowKey::new(
                    "2001:db9::1".parse().unwrap(),
                    "2001:db8::2".parse().unwrap(),
                    17,
                    Some((5, 5)),
                    None,
                ),
            ];
            for _ in 0..3 {
                for k in &keys {
                    let want: Vec<u32> = (0..ps.len() as u32)
                        .filter(|&i| by_definition(&ps[i as usize], k))
                        .collect();
                    let got = match c.classify(k) {
                        Verdict::Set(id) => c.set_actions(id).to_vec(),
                        other => panic!("all-matches classifier answered {other:?}"),
                    };
                    assert_eq!(got, want, "{k:?} with {fast:?}");
                }
            }
        }
    }
}
