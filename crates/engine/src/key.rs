//! Masked flow keys: the vocabulary shared by the trigger index (filters as
//! value/mask pairs) and the sweep (group keys).
//!
//! A group key is a [`FlowKey`] with every field outside the granularity
//! zeroed and its presence bit cleared, and each address cut to the
//! granularity's prefix length for its family. Keeping the same 44-byte
//! layout means grouping is a handful of AND instructions and the result
//! hashes like any flow key.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use clarion_lang::spec::{Granularity, PrefixLens};
use clarion_report::GroupKey;
use clarion_wire::FlowKey;

/// A bit mask over every field of a [`FlowKey`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub(crate) struct KeyMask(pub(crate) FlowKey);

impl KeyMask {
    /// Keeps only the bits of `key` selected by the mask: whole-word ANDs
    /// (two addresses and one word of the rest), inlined, since a new
    /// flow's match applies every pattern's mask.
    #[inline(always)]
    pub(crate) fn apply(&self, key: &FlowKey) -> FlowKey {
        let m = &self.0;
        let and16 =
            |a: &[u8; 16], b: &[u8; 16]| (u128::from_ne_bytes(*a) & u128::from_ne_bytes(*b)).to_ne_bytes();
        FlowKey {
            src_ip: and16(&key.src_ip, &m.src_ip),
            dst_ip: and16(&key.dst_ip, &m.dst_ip),
            src_port: key.src_port & m.src_port,
            dst_port: key.dst_port & m.dst_port,
            vlan: key.vlan & m.vlan,
            proto: key.proto & m.proto,
            flags: key.flags & m.flags,
            vni: key.vni & m.vni,
        }
    }

    /// The bits either mask selects.
    pub(crate) fn union(&self, other: &KeyMask) -> KeyMask {
        let (a, b) = (&self.0, &other.0);
        let or16 =
            |x: &[u8; 16], y: &[u8; 16]| (u128::from_ne_bytes(*x) | u128::from_ne_bytes(*y)).to_ne_bytes();
        KeyMask(FlowKey {
            src_ip: or16(&a.src_ip, &b.src_ip),
            dst_ip: or16(&a.dst_ip, &b.dst_ip),
            src_port: a.src_port | b.src_port,
            dst_port: a.dst_port | b.dst_port,
            vlan: a.vlan | b.vlan,
            proto: a.proto | b.proto,
            flags: a.flags | b.flags,
            vni: a.vni | b.vni,
        })
    }
}

/// The first `bits` bits of a 16-byte address field set.
pub(crate) fn prefix_mask(bits: u8) -> [u8; 16] {
    let mut m = [0u8; 16];
    let bits = usize::from(bits.min(128));
    for (i, byte) in m.iter_mut().enumerate() {
        let start = i * 8;
        if bits >= start + 8 {
            *byte = 0xff;
        } else if bits > start {
            *byte = 0xffu8 << (8 - (bits - start));
        }
    }
    m
}

/// `addr` with all but its first `bits` bits cleared (the sweep does this per flow and trigger).
#[inline]
fn masked(addr: &[u8; 16], bits: u8) -> [u8; 16] {
    let bits = u32::from(bits.min(128));
    let m = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
    (u128::from_be_bytes(*addr) & m).to_be_bytes()
}

fn lens_for(l: PrefixLens, v6: bool) -> u8 {
    if v6 {
        l.v6.min(128)
    } else {
        l.v4.min(32)
    }
}

/// Which of the optional key fields some flow had: [`TAG_VLAN`] and
/// [`TAG_VNI`] bits ([`tags_of`] a key's flags, OR-ed over the packets).
pub(crate) type TagsSeen = u8;
pub(crate) const TAG_VLAN: TagsSeen = 1;
pub(crate) const TAG_VNI: TagsSeen = 2;
/// Every value a [`TagsSeen`] takes.
pub(crate) const TAG_STATES: usize = 4;

/// The [`TagsSeen`] bits of flags OR-ed over any number of keys: the VLAN
/// and VNI presence bits, moved down (one shift and mask, once per chunk).
#[inline(always)]
pub(crate) fn tags_of(flags: u8) -> TagsSeen {
    const _: () = assert!(FlowKey::HAS_VLAN == 4 && FlowKey::HAS_VNI == 8);
    (flags >> 2) & (TAG_VLAN | TAG_VNI)
}

/// True when [`group_of`] under `g` gives distinct flows distinct groups:
/// both full addresses, both ports and the protocol, and the VLAN and the
/// VNI too unless no flow has one (`seen`). Then a flow's group *is* its
/// key (see the test `one_flow_groups_are_the_keys_themselves`).
pub(crate) fn one_flow_per_group(g: &Granularity, seen: TagsSeen) -> bool {
    let full = |l: Option<clarion_lang::spec::PrefixLens>| l.is_some_and(|l| l.v4 >= 32 && l.v6 >= 128);
    full(g.src_ip)
        && full(g.dst_ip)
        && g.src_port
        && g.dst_port
        && g.proto
        && (g.vlan || seen & TAG_VLAN == 0)
        && (g.vni || seen & TAG_VNI == 0)
}

/// The group a flow belongs to under a granularity.
#[inline]
pub(crate) fn group_of(key: &FlowKey, g: &Granularity) -> FlowKey {
    let v6 = key.is_ipv6();
    let mut out = FlowKey::default();
    if g.src_ip.is_some() || g.dst_ip.is_some() {
        out.flags |= key.flags & FlowKey::IPV6;
    }
    if let Some(l) = g.src_ip {
        out.src_ip = masked(&key.src_ip, lens_for(l, v6));
    }
    if let Some(l) = g.dst_ip {
        out.dst_ip = masked(&key.dst_ip, lens_for(l, v6));
    }
    if (g.src_port || g.dst_port) && key.has_ports() {
        out.flags |= FlowKey::HAS_PORTS;
        if g.src_port {
            out.src_port = key.src_port;
        }
        if g.dst_port {
            out.dst_port = key.dst_port;
        }
    }
    if g.proto {
        out.proto = key.proto;
    }
    if g.vlan && key.has_vlan() {
        out.flags |= FlowKey::HAS_VLAN;
        out.vlan = key.vlan;
    }
    if g.vni && key.has_vni() {
        out.flags |= FlowKey::HAS_VNI;
        out.vni = key.vni;
    }
    out
}

fn addr(bytes: &[u8; 16], v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(*bytes))
    } else {
        IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]))
    }
}

/// The report form of a group key produced by [`group_of`].
pub(crate) fn report_group(group: &FlowKey, g: &Granularity) -> GroupKey {
    let v6 = group.is_ipv6();
    let port = |p: u16| if group.has_ports() { Some(p) } else { None };
    GroupKey {
        src_ip: g.src_ip.map(|l| (addr(&group.src_ip, v6), lens_for(l, v6))),
        dst_ip: g.dst_ip.map(|l| (addr(&group.dst_ip, v6), lens_for(l, v6))),
        src_port: g.src_port.then(|| port(group.src_port)),
        dst_port: g.dst_port.then(|| port(group.dst_port)),
        proto: g.proto.then_some(group.proto),
        vlan: g.vlan.then(|| group.has_vlan().then_some(group.vlan)),
        vni: g.vni.then(|| group.tunnel_id()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(src: &str, dst: &str, ports: Option<(u16, u16)>) -> FlowKey {
        FlowKey::new(src.parse().unwrap(), dst.parse().unwrap(), 6, ports, None)
    }

    #[test]
    fn one_flow_groups_are_the_keys_themselves() {
        let with_vlan = Granularity {
            vlan: true,
            ..Granularity::FIVE_TUPLE
        };
        let with_both = Granularity {
            vni: true,
            ..with_vlan
        };
        assert!(one_flow_per_group(&Granularity::FIVE_TUPLE, 0));
        for seen in 1..TAG_STATES as TagsSeen {
            assert!(!one_flow_per_group(&Granularity::FIVE_TUPLE, seen));
            assert!(one_flow_per_group(&with_both, seen));
        }
        assert!(one_flow_per_group(&with_vlan, TAG_VLAN));
        assert!(!one_flow_per_group(&with_vlan, TAG_VNI));
        assert_eq!(
            tags_of(FlowKey::HAS_VLAN | FlowKey::HAS_PORTS | FlowKey::IPV6),
            TAG_VLAN
        );
        assert_eq!(tags_of(FlowKey::HAS_VNI), TAG_VNI);
        let keys = [
            key("10.0.0.1", "10.0.0.2", Some((1, 2))),
            key("10.0.0.1", "10.0.0.2", None),
            key("2001:db8::1", "2001:db8::2", Some((443, 50000))),
            key("2001:db8::1", "2001:db8::2", None),
        ];
        for k in keys {
            assert_eq!(group_of(&k, &Granularity::FIVE_TUPLE), k, "{k:?}");
            assert_eq!(group_of(&k, &with_vlan), k, "{k:?}");
            let tagged = FlowKey {
                vlan: 7,
                flags: k.flags | FlowKey::HAS_VLAN,
                ..k
            };
            assert_eq!(group_of(&tagged, &with_vlan), tagged);
            let tunnelled = FlowKey {
                vni: 0xab_cdef,
                flags: tagged.flags | FlowKey::HAS_VNI,
                ..tagged
            };
            assert_eq!(group_of(&tunnelled, &with_both), tunnelled);
            // Without `vni` in the granularity, the VNI is dropped.
            assert_eq!(group_of(&tunnelled, &with_vlan), tagged);
        }
    }

    #[test]
    fn masking_keeps_exactly_the_prefix() {
        let addr: [u8; 16] = std::array::from_fn(|i| 0xa5 ^ (i as u8).wrapping_mul(37));
        for bits in 0..=130u8 {
            let m = prefix_mask(bits);
            let want: [u8; 16] = std::array::from_fn(|i| addr[i] & m[i]);
            assert_eq!(masked(&addr, bits), want, "{bits} bits");
        }
    }

    #[test]
    fn prefix_masks() {
        assert_eq!(prefix_mask(0), [0; 16]);
        assert_eq!(prefix_mask(12)[..3], [0xff, 0xf0, 0]);
        assert_eq!(prefix_mask(128), [0xff; 16]);
        assert_eq!(prefix_mask(200), [0xff; 16]);
    }

    #[test]
    fn groups_cut_addresses_per_family() {
        let g = Granularity {
            src_ip: Some(PrefixLens { v4: 24, v6: 64 }),
            dst_port: true,
            ..Granularity::default()
        };
        let a = group_of(&key("10.0.128.7", "10.1.1.1", Some((1, 80))), &g);
        let b = group_of(&key("10.0.128.9", "10.9.9.9", Some((2, 80))), &g);
        assert_eq!(a, b);
        let r = report_group(&a, &g);
        assert_eq!(r.src_ip, Some(("10.0.128.0".parse().unwrap(), 24)));
        assert_eq!(r.dst_port, Some(Some(80)));
        let v6 = group_of(&key("2001:db8:1:2:3::1", "::1", None), &g);
        let r6 = report_group(&v6, &g);
        assert_eq!(r6.src_ip, Some(("2001:db8:1:2::".parse().unwrap(), 64)));
        assert_eq!(r6.dst_port, Some(None));
    }

    #[test]
    fn families_never_merge_when_an_address_is_grouped() {
        let g = Granularity {
            src_ip: Some(PrefixLens { v4: 0, v6: 0 }),
            ..Granularity::default()
        };
        let a = group_of(&key("10.0.0.1", "10.0.0.2", None), &g);
        let b = group_of(&key("::1", "::2", None), &g);
        assert_ne!(a, b);
    }
}
