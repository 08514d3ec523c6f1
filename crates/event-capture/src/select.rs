//! Which packets are the firing group's: they pass one of the event's
//! filters and their key falls in the report's group.
//!
//! Both tests follow `docs/semantics.md` word for word: a prefix matches
//! only its own family; a port or VLAN condition never matches a packet
//! without ports or tag; a group field of `Some(None)` (ports, VLAN) holds
//! the packets without one.

use std::net::IpAddr;

use clarion_lang::spec::{Filter, IpPrefix, PortRange};
use clarion_report::GroupKey;
use clarion_wire::FlowKey;

/// What one capture takes: the packets passing the event's filters, in
/// the report's group, with times in `[from_ns, to_ns)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    pub filters: Vec<Filter>,
    pub group: GroupKey,
    pub from_ns: u64,
    pub to_ns: u64,
}

impl Selection {
    /// Whether a packet of time `ts_ns` and key `key` is the capture's.
    pub fn takes(&self, ts_ns: u64, key: &FlowKey) -> bool {
        (self.from_ns..self.to_ns).contains(&ts_ns)
            && in_group(&self.group, key)
            && passes(&self.filters, key)
    }
}

/// Whether `key` passes any of `filters`.
pub fn passes(filters: &[Filter], key: &FlowKey) -> bool {
    filters.iter().any(|f| {
        prefix(f.src_ip.as_ref(), key.src_addr())
            && prefix(f.dst_ip.as_ref(), key.dst_addr())
            && port(f.src_port, key, key.src_port)
            && port(f.dst_port, key, key.dst_port)
            && f.proto.is_none_or(|p| p == key.proto)
            && f.vlan.is_none_or(|v| key.has_vlan() && key.vlan == v)
            && f.vni.is_none_or(|v| key.has_vni() && key.vni == v)
    })
}

/// Whether `key` is in group `g`.
pub fn in_group(g: &GroupKey, key: &FlowKey) -> bool {
    let addr = |f: Option<(IpAddr, u8)>, a: IpAddr| {
        f.is_none_or(|(addr, len)| prefix(Some(&IpPrefix { addr, len }), a))
    };
    fn present<T: PartialEq>(f: Option<Option<T>>, has: bool, v: T) -> bool {
        match f {
            None => true,
            Some(None) => !has,
            Some(Some(want)) => has && v == want,
        }
    }
    addr(g.src_ip, key.src_addr())
        && addr(g.dst_ip, key.dst_addr())
        && present(g.src_port, key.has_ports(), key.src_port)
        && present(g.dst_port, key.has_ports(), key.dst_port)
        && g.proto.is_none_or(|p| p == key.proto)
        && present(g.vlan, key.has_vlan(), key.vlan)
        && present(g.vni, key.has_vni(), key.vni)
}

fn prefix(p: Option<&IpPrefix>, a: IpAddr) -> bool {
    let Some(p) = p else { return true };
    match (p.addr, a) {
        (IpAddr::V4(x), IpAddr::V4(y)) => {
            let m = u32::MAX.checked_shl(32 - u32::from(p.len.min(32))).unwrap_or(0);
            u32::from(x) & m == u32::from(y) & m
        }
        (IpAddr::V6(x), IpAddr::V6(y)) => {
            let m = u128::MAX
                .checked_shl(128 - u32::from(p.len.min(128)))
                .unwrap_or(0);
            u128::from(x) & m == u128::from(y) & m
        }
        _ => false,
    }
}

fn port(r: Option<PortRange>, key: &FlowKey, v: u16) -> bool {
    r.is_none_or(|r| key.has_ports() && (r.lo..=r.hi).contains(&v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(src: &str, dst: &str, proto: u8, ports: Option<(u16, u16)>, vlan: Option<u16>) -> FlowKey {
        FlowKey::new(src.parse().unwrap(), dst.parse().unwrap(), proto, ports, vlan)
    }

    #[test]
    fn groups_hold_their_packets_only() {
        let g = GroupKey {
            src_ip: Some(("10.1.0.0".parse().unwrap(), 16)),
            dst_port: Some(None),
            ..GroupKey::default()
        };
        assert!(in_group(&g, &key("10.1.2.3", "1.1.1.1", 1, None, None)));
        assert!(!in_group(&g, &key("10.1.2.3", "1.1.1.1", 6, Some((1, 2)), None)));
        assert!(!in_group(&g, &key("10.2.2.3", "1.1.1.1", 1, None, None)));
        assert!(!in_group(&g, &key("::1", "::2", 1, None, None)));
        let g = GroupKey {
            dst_port: Some(Some(80)),
            vlan: Some(Some(7)),
            ..GroupKey::default()
        };
        assert!(in_group(&g, &key("::1", "::2", 6, Some((9, 80)), Some(7))));
        assert!(!in_group(&g, &key("::1", "::2", 6, Some((9, 80)), None)));
        assert!(in_group(&GroupKey::default(), &key("::1", "::2", 6, None, None)));
    }

    #[test]
    fn filters_as_the_language_says() {
        let specs = clarion_lang::check(
            "event e\n  filter src_ip in 10.0.0.0/8 and dst_port in 80..90\n  filter proto = icmp\n  when sum(packets) > 0\n",
        )
        .unwrap();
        let f = &specs[0].filters;
        assert!(passes(f, &key("10.9.9.9", "1.1.1.1", 6, Some((5, 85)), None)));
        assert!(!passes(f, &key("10.9.9.9", "1.1.1.1", 6, Some((5, 91)), None)));
        assert!(!passes(f, &key("10.9.9.9", "1.1.1.1", 17, None, None)));
        assert!(passes(f, &key("::1", "::2", 1, None, None)));
    }
}
