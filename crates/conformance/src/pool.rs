//! The small address, port, protocol and VLAN pools that both the traffic
//! and the event generators draw from, so that filters actually match.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use clarion_lang::spec::IpPrefix;
use clarion_wire::proto;

pub const V4: [Ipv4Addr; 6] = [
    Ipv4Addr::new(10, 0, 0, 1),
    Ipv4Addr::new(10, 0, 0, 2),
    Ipv4Addr::new(10, 0, 1, 7),
    Ipv4Addr::new(10, 1, 0, 9),
    Ipv4Addr::new(192, 168, 1, 1),
    Ipv4Addr::new(172, 16, 5, 4),
];

pub const V6: [Ipv6Addr; 5] = [
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
    Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 7),
    Ipv6Addr::new(0x2001, 0xdb8, 0xff00, 0, 0, 0, 0, 9),
    Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1),
];

pub const PORTS: [u16; 7] = [53, 80, 123, 443, 5353, 40000, 40001];

/// Protocols of the traffic pool (47 = GRE: no ports).
pub const PROTOS: [u8; 5] = [proto::TCP, proto::UDP, proto::ICMP, proto::ICMPV6, 47];

pub const VLANS: [u16; 3] = [10, 20, 300];
/// VNIs of the tunnelled flows, and one no flow has.
pub const VNIS: [u32; 4] = [0, 5001, 0xff_ffff, 77];

/// `addr/len` with the bits beyond `len` cleared (lengths beyond the family's width are clamped).
pub fn prefix(addr: IpAddr, len: u8) -> IpPrefix {
    match addr {
        IpAddr::V4(a) => {
            let len = len.min(32);
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpPrefix {
                addr: IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask)),
                len,
            }
        }
        IpAddr::V6(a) => {
            let len = len.min(128);
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpPrefix {
                addr: IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask)),
                len,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_clears_host_bits() {
        let p = prefix(IpAddr::V4(V4[2]), 16);
        assert_eq!(p.addr, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)));
        assert_eq!(
            prefix(IpAddr::V4(V4[2]), 0).addr,
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        );
        assert_eq!(prefix(IpAddr::V4(V4[2]), 40).len, 32);
        let p = prefix(IpAddr::V6(V6[3]), 24);
        assert_eq!(p.addr, "2001:d00::".parse::<IpAddr>().unwrap());
    }
}
