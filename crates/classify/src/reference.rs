//! The obviously-correct classifier every other one is tested against.
//!
//! A linear scan over the ORIGINAL rules, read straight from the
//! [`FlowKey`] with `std::net` addresses and inclusive ranges: it shares no
//! code with the key packing, the range expansion or any table, so a bug
//! in those cannot hide in both. Cost: O(rules) per packet; tests only.

use std::net::IpAddr;

use clarion_wire::FlowKey;

use crate::rule::{Family, IpPrefix, Rule};

fn addr(k: &FlowKey, src: bool) -> IpAddr {
    let b = if src { k.src_ip } else { k.dst_ip };
    if k.is_ipv6() {
        IpAddr::from(b)
    } else {
        IpAddr::from([b[0], b[1], b[2], b[3]])
    }
}

fn prefix_matches(p: &IpPrefix, a: IpAddr) -> bool {
    match (p.addr, a) {
        (IpAddr::V4(p4), IpAddr::V4(a4)) => {
            let sh = 32 - u32::from(p.len);
            u32::from(p4).checked_shr(sh).unwrap_or(0) == u32::from(a4).checked_shr(sh).unwrap_or(0)
        }
        (IpAddr::V6(p6), IpAddr::V6(a6)) => {
            let sh = 128 - u32::from(p.len);
            u128::from(p6).checked_shr(sh).unwrap_or(0) == u128::from(a6).checked_shr(sh).unwrap_or(0)
        }
        _ => false,
    }
}

/// Does `r` match packet `k`?
pub fn matches(r: &Rule, k: &FlowKey) -> bool {
    let fam = if k.is_ipv6() { Family::V6 } else { Family::V4 };
    let in_range = |range: Option<(u16, u16)>, v: u16, present: bool| match range {
        None => true,
        Some((lo, hi)) => present && lo <= v && v <= hi,
    };
    r.family.is_none_or(|f| f == fam)
        && r.src_ip.is_none_or(|p| prefix_matches(&p, addr(k, true)))
        && r.dst_ip.is_none_or(|p| prefix_matches(&p, addr(k, false)))
        && in_range(r.src_port, k.src_port, k.has_ports())
        && in_range(r.dst_port, k.dst_port, k.has_ports())
        && in_range(r.vlan, k.vlan & 0x0fff, k.has_vlan())
        && r.proto.is_none_or(|p| p == k.proto)
}

/// The action of the highest-priority matching rule, ties to the first.
pub fn first_match(rules: &[Rule], k: &FlowKey) -> Option<u32> {
    let mut best: Option<&Rule> = None;
    for r in rules {
        if matches(r, k) && best.is_none_or(|b| r.priority > b.priority) {
            best = Some(r);
        }
    }
    best.map(|r| r.action)
}

/// The sorted, deduplicated actions of every matching rule.
pub fn all_matches(rules: &[Rule], k: &FlowKey) -> Vec<u32> {
    let mut v: Vec<u32> = rules.iter().filter(|r| matches(r, k)).map(|r| r.action).collect();
    v.sort_unstable();
    v.dedup();
    v
}
