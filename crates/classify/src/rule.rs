//! Rules as the user gives them, and their expansion into internal entries.
//!
//! # Design
//!
//! A [`Rule`] states one condition per field (or none: wildcard) in the
//! user's terms: address prefixes, inclusive port and VLAN ranges, an exact
//! protocol, a family. The classifiers only know value/mask pairs, so
//! [`expand`] turns each rule into one or more [`Entry`]s: a range becomes
//! the minimal set of aligned power-of-two blocks (at most 30 for 16 bits),
//! and a rule with ranges on several fields becomes their product.
//!
//! # Invariants
//!
//! - Every entry's `value` is already masked (`value & mask == value`).
//! - All entries of one rule share its `rank`; ranks of distinct rules
//!   differ, and a higher rank wins (higher priority, then earlier rule).
//! - An entry with a port condition has a 0 top port bit, so it never matches
//!   [`crate::key::NO_PORTS`]; likewise VLAN and [`crate::key::UNTAGGED`].
//!
//! # Cost
//!
//! A rule with ranges on both ports and the VLAN may expand to 30×30×22
//! entries; [`expand`] refuses a rule set past [`MAX_ENTRIES`] instead of
//! running out of memory.

use std::net::IpAddr;

use crate::error::ClassifyError;
use crate::key::{self, prefix_bits, Key, FIELDS, NFIELDS};

/// At most this many entries after range expansion (about 200 MB of TSS
/// tables, a bound no policy set comes near).
pub const MAX_ENTRIES: usize = 1 << 21;
/// At most this many rules (rule indices live in a `u32` beside a sentinel).
pub const MAX_RULES: usize = 1 << 24;

/// An address prefix: `addr/len`. Host bits below `len` are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpPrefix {
    pub addr: IpAddr,
    pub len: u8,
}

/// IP family of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

/// One classification rule. `None` means "any" for that field.
///
/// Semantics (as the event language's filters): a port condition never
/// matches a packet without ports; a VLAN condition never matches an
/// untagged packet; an address prefix fixes the family, so an IPv4 prefix
/// never matches an IPv6 packet and vice versa.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rule {
    pub family: Option<Family>,
    pub src_ip: Option<IpPrefix>,
    pub dst_ip: Option<IpPrefix>,
    /// Inclusive range.
    pub src_port: Option<(u16, u16)>,
    /// Inclusive range.
    pub dst_port: Option<(u16, u16)>,
    pub proto: Option<u8>,
    /// Inclusive range of VLAN ids (0..=4095).
    pub vlan: Option<(u16, u16)>,
    /// Higher wins under [`crate::Semantics::FirstMatch`]; ties go to the
    /// rule given first.
    pub priority: u32,
    pub action: u32,
}

/// One value/mask pair of an expanded rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub value: Key,
    pub mask: Key,
    /// Prefix length per field (the mask, unpacked).
    pub lens: [u8; NFIELDS],
    /// `priority << 32 | (u32::MAX - rule)`: higher wins, ties to the first rule.
    pub rank: u64,
    /// Index of the rule in the original list.
    pub rule: u32,
}

/// The rank of rule `i` with priority `p`.
pub(crate) fn rank(p: u32, i: usize) -> u64 {
    (u64::from(p) << 32) | u64::from(u32::MAX - i as u32)
}

/// The minimal aligned blocks covering `lo..=hi` within a `width`-bit
/// space, as (value, prefix length) pairs.
pub(crate) fn range_to_prefixes(lo: u32, hi: u32, width: u32) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let (mut lo, hi) = (u64::from(lo), u64::from(hi));
    while lo <= hi {
        // The largest block aligned at `lo`: its lowest set bit (or the whole space at 0) ...
        let mut size = if lo == 0 {
            1u64 << width
        } else {
            lo & lo.wrapping_neg()
        };
        // ... shrunk until it ends within the range.
        while lo + size - 1 > hi {
            size >>= 1;
        }
        out.push((lo as u32, width - size.trailing_zeros()));
        lo += size;
    }
    out
}

/// A field's alternatives: (value, length) pairs, field-aligned values.
type Alts = Vec<(u128, u8)>;

fn ip_alt(rule: usize, field: &'static str, p: &IpPrefix) -> Result<(Family, Alts), ClassifyError> {
    let (fam, v, max) = match p.addr {
        IpAddr::V4(a) => (Family::V4, u128::from(u32::from(a)) << 96, 32u8),
        IpAddr::V6(a) => (Family::V6, u128::from(a), 128u8),
    };
    if p.len > max {
        return Err(ClassifyError::PrefixTooLong {
            rule,
            field,
            len: p.len,
            max,
        });
    }
    let l = u32::from(p.len);
    Ok((fam, vec![(v & prefix_bits(128, l), p.len)]))
}

/// A 16-bit port range (or a 12-bit VLAN range) inside a field one bit
/// wider whose top bit marks "absent": each block gains that 0 top bit.
fn range_alt(lo: u16, hi: u16, inner: u32) -> Alts {
    range_to_prefixes(u32::from(lo), u32::from(hi), inner)
        .into_iter()
        .map(|(v, l)| (u128::from(v), (l + 1) as u8))
        .collect()
}

/// Expands every rule into entries; see the module doc.
pub(crate) fn expand(rules: &[Rule]) -> Result<Vec<Entry>, ClassifyError> {
    if rules.len() > MAX_RULES {
        return Err(ClassifyError::TooManyRules {
            rules: rules.len(),
            limit: MAX_RULES,
        });
    }
    let mut out = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        let mut alts: [Alts; NFIELDS] = Default::default();
        let mut family = r.family;
        for (f, name, p) in [
            (key::SRC_IP, "src_ip", &r.src_ip),
            (key::DST_IP, "dst_ip", &r.dst_ip),
        ] {
            if let Some(p) = p {
                let (fam, a) = ip_alt(i, name, p)?;
                if family.is_some_and(|x| x != fam) {
                    return Err(ClassifyError::FamilyConflict { rule: i });
                }
                family = Some(fam);
                alts[f] = a;
            }
        }
        if let Some(fam) = family {
            alts[key::FAMILY] = vec![(u128::from(fam == Family::V6), 1)];
        }
        for (f, name, range) in [
            (key::SRC_PORT, "src_port", r.src_port),
            (key::DST_PORT, "dst_port", r.dst_port),
        ] {
            if let Some((lo, hi)) = range {
                if lo > hi {
                    return Err(ClassifyError::EmptyRange {
                        rule: i,
                        field: name,
                        lo,
                        hi,
                    });
                }
                alts[f] = range_alt(lo, hi, 16);
            }
        }
        if let Some(p) = r.proto {
            alts[key::PROTO] = vec![(u128::from(p), 8)];
        }
        if let Some((lo, hi)) = r.vlan {
            if lo > hi {
                return Err(ClassifyError::EmptyRange {
                    rule: i,
                    field: "vlan",
                    lo,
                    hi,
                });
            }
            if hi > 4095 {
                return Err(ClassifyError::VlanOutOfRange { rule: i, value: hi });
            }
            alts[key::VLAN] = range_alt(lo, hi, 12);
        }
        for a in alts.iter_mut() {
            if a.is_empty() {
                a.push((0, 0)); // wildcard
            }
        }
        let count: usize = alts.iter().map(Vec::len).product();
        if out.len() + count > MAX_ENTRIES {
            return Err(ClassifyError::TooManyEntries { limit: MAX_ENTRIES });
        }
        // Odometer over the product of alternatives.
        let mut idx = [0usize; NFIELDS];
        loop {
            let mut value = Key::ZERO;
            let mut lens = [0u8; NFIELDS];
            for f in 0..NFIELDS {
                let (v, l) = alts[f][idx[f]];
                value.set(f, v & prefix_bits(FIELDS[f].width, u32::from(l)));
                lens[f] = l;
            }
            out.push(Entry {
                value,
                mask: Key::mask_of(&lens),
                lens,
                rank: rank(r.priority, i),
                rule: i as u32,
            });
            let mut f = 0;
            while f < NFIELDS {
                idx[f] += 1;
                if idx[f] < alts[f].len() {
                    break;
                }
                idx[f] = 0;
                f += 1;
            }
            if f == NFIELDS {
                break;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn range_blocks_known_case() {
        // 1024..=65535 is six blocks (a /6, /5, ..., /1 in 16 bits).
        let b = range_to_prefixes(1024, 65535, 16);
        assert_eq!(b.len(), 6);
        assert_eq!(range_to_prefixes(0, 65535, 16), vec![(0, 0)]);
        assert_eq!(range_to_prefixes(80, 80, 16), vec![(80, 16)]);
    }

    proptest! {
        /// The blocks cover exactly the range: every value inside is in one
        /// block, every value outside in none (checked by enumeration over a
        /// 10-bit space).
        #[test]
        fn range_blocks_cover_exactly(a in 0u32..1024, b in 0u32..1024) {
            let (lo, hi) = (a.min(b), a.max(b));
            let blocks = range_to_prefixes(lo, hi, 10);
            for x in 0..1024u32 {
                let n = blocks.iter().filter(|&&(v, l)| {
                    let m = if l == 0 { 0 } else { (1023u32 >> (10 - l)) << (10 - l) };
                    x & m == v
                }).count();
                prop_assert_eq!(n, usize::from((lo..=hi).contains(&x)));
            }
        }
    }

    #[test]
    fn bad_rules_are_errors() {
        let r = Rule {
            src_port: Some((9, 3)),
            ..Default::default()
        };
        assert!(matches!(expand(&[r]), Err(ClassifyError::EmptyRange { .. })));
        let r = Rule {
            vlan: Some((1, 5000)),
            ..Default::default()
        };
        assert!(matches!(expand(&[r]), Err(ClassifyError::VlanOutOfRange { .. })));
        let r = Rule {
            src_ip: Some(IpPrefix {
                addr: "10.0.0.0".parse().unwrap(),
                len: 33,
            }),
            ..Default::default()
        };
        assert!(matches!(expand(&[r]), Err(ClassifyError::PrefixTooLong { .. })));
        let r = Rule {
            src_ip: Some(IpPrefix {
                addr: "10.0.0.0".parse().unwrap(),
                len: 8,
            }),
            dst_ip: Some(IpPrefix {
                addr: "::1".parse().unwrap(),
                len: 8,
            }),
            ..Default::default()
        };
        assert!(matches!(expand(&[r]), Err(ClassifyError::FamilyConflict { .. })));
        // 1..=65534 on both ports and 1..=4094 on the VLAN: 30×30×22 entries per rule.
        let r = Rule {
            src_port: Some((1, 65534)),
            dst_port: Some((1, 65534)),
            vlan: Some((1, 4094)),
            ..Default::default()
        };
        let many = vec![r; 200];
        assert!(matches!(expand(&many), Err(ClassifyError::TooManyEntries { .. })));
    }
}
