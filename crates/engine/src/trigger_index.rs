//! The trigger index: which triggers' filters does a flow match?
//!
//! # What?
//!
//! Given a flow key, return every installed trigger with at least one filter
//! that the key satisfies. It runs once per *flow* (on its first packet),
//! never per packet: the answer is remembered in the flow entry.
//!
//! # Design: tuple-space search
//!
//! Every filter condition is a value under a bit mask: an address prefix
//! masks the leading bits of an address field (and the family bit), an exact
//! port masks all 16 bits (and the has-ports bit), a protocol masks 8 bits.
//! A port *range* is not one mask, so it is first split into the minimal set
//! of aligned power-of-two blocks (`1024..65535` becomes six blocks), each a
//! value/mask pair. A filter is thus a small set of rules, each a (mask,
//! masked value) pair over the whole [`FlowKey`].
//!
//! Rules that share a mask form a *tuple*; each tuple is one hash table from
//! masked value to the triggers owning that rule. Matching a key means, for
//! each tuple, masking the key with the tuple's mask and looking the result
//! up: the cost is one hash probe per distinct mask pattern, independent of
//! the number of triggers. Operators install thousands of triggers built from
//! a few patterns ("each /24 of the rack", "port 80 of each service"), which
//! is exactly where this wins over a linear scan.
//!
//! # Invariants
//!
//! - `tuples` holds no empty tuple; a tuple's trigger lists are non-empty.
//! - A trigger appears once per rule; [`TriggerIndex::lookup`] sorts and
//!   deduplicates, so a flow matching several filters of one trigger (or
//!   several blocks of one range) counts it once.
//! - Removing a trigger removes exactly the rules its install added.
//!
//! # Cost of the simple design
//!
//! A range splits into at most 30 blocks, so a filter with ranges on both
//! ports can expand to 30×30 rules. That costs memory at install time only;
//! lookups still probe once per tuple.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use clarion_lang::spec::{Filter, IpPrefix, PortRange};
use clarion_wire::FlowKey;

use crate::flow_table::hash_key;
use crate::key::{prefix_mask, KeyMask};

/// Dense id of an installed trigger.
pub type TriggerId = u32;

#[derive(Default, Debug)]
struct Tuple {
    mask: KeyMask,
    rules: HashMap<Masked, Vec<TriggerId>, BuildHasherDefault<Prehashed>>,
}

/// A masked key, hashed with the flow table's [`hash_key`] (two
/// multiplies) rather than field by field: a new flow probes every tuple,
/// so this hash runs once per pattern per new flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Masked(FlowKey);

impl Hash for Masked {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(hash_key(&self.0));
    }
}

/// Hands on the one `u64` a [`Masked`] writes, already well mixed.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used (by `Masked`); anything else still hashes.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// Tuple-space search over all installed triggers' filters.
#[derive(Default, Debug)]
pub(crate) struct TriggerIndex {
    tuples: Vec<Tuple>,
}

/// Expands a filter into (mask, value) rules; empty when it can never match.
pub(crate) fn filter_rules(f: &Filter) -> Vec<(KeyMask, FlowKey)> {
    let mut base_mask = FlowKey::default();
    let mut base_val = FlowKey::default();
    let mut family: Option<bool> = None;
    for (prefix, is_src) in [(f.src_ip, true), (f.dst_ip, false)] {
        let Some(IpPrefix { addr, len }) = prefix else {
            continue;
        };
        let v6 = addr.is_ipv6();
        if family.is_some_and(|fam| fam != v6) {
            // An IPv4 source and an IPv6 destination: no packet has both.
            return Vec::new();
        }
        family = Some(v6);
        let (bytes, len) = match addr {
            std::net::IpAddr::V4(a) => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&a.octets());
                (b, len.min(32))
            }
            std::net::IpAddr::V6(a) => (a.octets(), len.min(128)),
        };
        let m = prefix_mask(len);
        let (mask_field, val_field) = if is_src {
            (&mut base_mask.src_ip, &mut base_val.src_ip)
        } else {
            (&mut base_mask.dst_ip, &mut base_val.dst_ip)
        };
        for i in 0..16 {
            mask_field[i] = m[i];
            val_field[i] = bytes[i] & m[i];
        }
        base_mask.flags |= FlowKey::IPV6;
        if v6 {
            base_val.flags |= FlowKey::IPV6;
        }
    }
    if let Some(p) = f.proto {
        base_mask.proto = 0xff;
        base_val.proto = p;
    }
    if let Some(v) = f.vlan {
        base_mask.vlan = 0x0fff;
        base_val.vlan = v & 0x0fff;
        base_mask.flags |= FlowKey::HAS_VLAN;
        base_val.flags |= FlowKey::HAS_VLAN;
    }
    if let Some(v) = f.vni {
        base_mask.vni = u32::MAX;
        base_val.vni = v;
        base_mask.flags |= FlowKey::HAS_VNI;
        base_val.flags |= FlowKey::HAS_VNI;
    }
    if f.src_port.is_some() || f.dst_port.is_some() {
        base_mask.flags |= FlowKey::HAS_PORTS;
        base_val.flags |= FlowKey::HAS_PORTS;
    }
    let any = [(0u16, 0u16)];
    let src_blocks = f.src_port.map(range_blocks);
    let dst_blocks = f.dst_port.map(range_blocks);
    let mut out = Vec::new();
    for &(sv, sm) in src_blocks.as_deref().unwrap_or(&any) {
        for &(dv, dm) in dst_blocks.as_deref().unwrap_or(&any) {
            let mut mask = base_mask;
            let mut val = base_val;
            mask.src_port = sm;
            val.src_port = sv;
            mask.dst_port = dm;
            val.dst_port = dv;
            out.push((KeyMask(mask), val));
        }
    }
    out
}

/// Splits an inclusive port range into aligned (value, mask) blocks.
pub(crate) fn range_blocks(r: PortRange) -> Vec<(u16, u16)> {
    let mut out = Vec::new();
    let (mut lo, hi) = (u32::from(r.lo), u32::from(r.hi));
    while lo <= hi {
        // Largest aligned block starting at `lo` that fits below `hi`.
        let mut size = if lo == 0 {
            1u32 << 16
        } else {
            1u32 << lo.trailing_zeros()
        };
        while lo + size - 1 > hi {
            size >>= 1;
        }
        let mask = (!(size - 1) & 0xffff) as u16;
        out.push((lo as u16, mask));
        lo += size;
    }
    out
}

impl TriggerIndex {
    /// Adds a trigger's rules.
    pub(crate) fn insert(&mut self, id: TriggerId, rules: &[(KeyMask, FlowKey)]) {
        for (mask, val) in rules {
            let pos = match self.tuples.iter().position(|t| t.mask == *mask) {
                Some(p) => p,
                None => {
                    self.tuples.push(Tuple {
                        mask: *mask,
                        rules: HashMap::default(),
                    });
                    self.tuples.len() - 1
                }
            };
            self.tuples[pos].rules.entry(Masked(*val)).or_default().push(id);
        }
    }

    /// Removes every rule of a trigger.
    pub(crate) fn remove(&mut self, id: TriggerId) {
        for t in &mut self.tuples {
            t.rules.retain(|_, ids| {
                ids.retain(|&x| x != id);
                !ids.is_empty()
            });
        }
        self.tuples.retain(|t| !t.rules.is_empty());
    }

    /// Triggers matching `key`, sorted and deduplicated, appended to `out` (cleared first).
    pub(crate) fn lookup(&self, key: &FlowKey, out: &mut Vec<TriggerId>) {
        out.clear();
        for t in &self.tuples {
            if let Some(ids) = t.rules.get(&Masked(t.mask.apply(key))) {
                out.extend_from_slice(ids);
            }
        }
        out.sort_unstable();
        out.dedup();
    }

    /// Every bit some tuple's mask reads: keys equal under it match the
    /// same triggers (each tuple's mask is part of it), which is what lets
    /// the monitor cache matches by it (`match_cache.rs`).
    pub(crate) fn shape(&self) -> KeyMask {
        self.tuples
            .iter()
            .fold(KeyMask::default(), |m, t| m.union(&t.mask))
    }

    /// Number of distinct mask patterns (tuples), the lookup cost.
    pub(crate) fn patterns(&self) -> usize {
        self.tuples.len()
    }
}

/// Direct (index-free) test of a filter, used when a trigger is installed
/// while flows already exist.
pub(crate) fn filter_matches(rules: &[(KeyMask, FlowKey)], key: &FlowKey) -> bool {
    rules.iter().any(|(m, v)| m.apply(key) == *v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(src: &str, dst: &str, proto: u8, ports: Option<(u16, u16)>, vlan: Option<u16>) -> FlowKey {
        FlowKey::new(src.parse().unwrap(), dst.parse().unwrap(), proto, ports, vlan)
    }

    fn prefix(s: &str) -> IpPrefix {
        let (a, l) = s.split_once('/').unwrap();
        IpPrefix {
            addr: a.parse().unwrap(),
            len: l.parse().unwrap(),
        }
    }

    #[test]
    fn range_blocks_cover_exactly() {
        for (lo, hi) in [
            (0, 65535),
            (1024, 65535),
            (80, 80),
            (1, 2),
            (3, 17),
            (65535, 65535),
            (0, 0),
        ] {
            let blocks = range_blocks(PortRange { lo, hi });
            for p in 0..=65535u16 {
                let hits = blocks.iter().filter(|(v, m)| p & m == *v).count();
                assert_eq!(hits, usize::from(p >= lo && p <= hi), "port {p} in {lo}..{hi}");
            }
        }
        assert_eq!(range_blocks(PortRange { lo: 1024, hi: 65535 }).len(), 6);
    }

    #[test]
    fn tuple_space_matches_like_a_linear_scan() {
        let filters = [
            Filter {
                dst_ip: Some(prefix("10.0.128.0/24")),
                ..Filter::default()
            },
            Filter {
                src_ip: Some(prefix("10.0.0.0/8")),
                dst_port: Some(PortRange { lo: 80, hi: 80 }),
                ..Filter::default()
            },
            Filter {
                proto: Some(17),
                vlan: Some(100),
                ..Filter::default()
            },
            Filter {
                src_ip: Some(prefix("2001:db8::/32")),
                ..Filter::default()
            },
            Filter::default(),
            Filter {
                src_port: Some(PortRange { lo: 1000, hi: 2000 }),
                ..Filter::default()
            },
        ];
        let mut idx = TriggerIndex::default();
        let rules: Vec<_> = filters.iter().map(filter_rules).collect();
        for (i, r) in rules.iter().enumerate() {
            idx.insert(i as u32, r);
        }
        let keys = [
            k("10.1.1.1", "10.0.128.5", 6, Some((1500, 80)), None),
            k("192.168.1.1", "10.0.128.5", 17, Some((53, 53)), Some(100)),
            k("2001:db8::1", "2001:db8::2", 58, None, None),
            k("10.0.0.1", "10.0.129.1", 1, None, None),
            k("10.0.0.1", "10.0.129.1", 6, Some((999, 80)), Some(100)),
        ];
        let mut out = Vec::new();
        for key in keys {
            idx.lookup(&key, &mut out);
            let expect: Vec<u32> = (0..filters.len() as u32)
                .filter(|&i| filter_matches(&rules[i as usize], &key))
                .collect();
            assert_eq!(out, expect, "{key:?}");
        }
        idx.remove(4);
        idx.lookup(&keys[3], &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn v4_prefix_never_matches_v6_and_ports_need_ports() {
        let r = filter_rules(&Filter {
            dst_ip: Some(prefix("0.0.0.0/0")),
            ..Filter::default()
        });
        assert!(!filter_matches(&r, &k("::1", "::2", 6, Some((1, 2)), None)));
        assert!(filter_matches(
            &r,
            &k("1.1.1.1", "2.2.2.2", 6, Some((1, 2)), None)
        ));
        let r = filter_rules(&Filter {
            dst_port: Some(PortRange { lo: 0, hi: 65535 }),
            ..Filter::default()
        });
        assert!(!filter_matches(&r, &k("1.1.1.1", "2.2.2.2", 1, None, None)));
    }
}
