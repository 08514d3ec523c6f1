//! The compact per-packet record every later stage consumes.
//!
//! Parsing happens once, at the edge; after it, the monitor, the reference
//! evaluator and every future per-packet stage read only these few cache
//! lines and never touch the frame bytes again.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IP protocol numbers Clarion names.
pub mod proto {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ICMPV6: u8 = 58;
}

/// TCP flag bits as they sit in the header's flags byte.
pub mod tcp_flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
    pub const ECE: u8 = 0x40;
    pub const CWR: u8 = 0x80;
}

/// The identity of a flow: addresses, ports, protocol, VLAN and the
/// tunnel's network identifier.
///
/// IPv4 and IPv6 share one layout so that every table, filter and
/// granularity treats them alike: an IPv4 address sits in the first four
/// bytes of its field with the remaining twelve zero, and [`FlowKey::IPV6`]
/// tells the families apart. Fields a packet lacks (ports of a non-first
/// fragment or of ICMP, the VLAN of an untagged frame) are zero with their
/// presence bit clear, so a key is always fully defined and can be hashed
/// and compared as plain bytes.
///
/// A tunnelled packet's key is its inner packet's, with the VNI (VXLAN,
/// Geneve) or key (GRE) of the tunnel that carried it in `vni`: two tenants
/// using the same inner addresses in different VNIs are two flows. The
/// field costs the key 4 bytes (40 to 44) and a word compare.
// `PartialEq` and `Hash` are written out (as whole words, see below) but
// mean the derived field-by-field equality and agree with each other.
#[derive(Clone, Copy, Eq, PartialOrd, Ord, Default)]
#[repr(C)]
pub struct FlowKey {
    pub src_ip: [u8; 16],
    pub dst_ip: [u8; 16],
    pub src_port: u16,
    pub dst_port: u16,
    /// The innermost VLAN id (12 bits) when [`FlowKey::HAS_VLAN`] is set.
    pub vlan: u16,
    pub proto: u8,
    /// Bit set of [`FlowKey::IPV6`], [`FlowKey::HAS_PORTS`], [`FlowKey::HAS_VLAN`],
    /// [`FlowKey::HAS_VNI`].
    pub flags: u8,
    /// The VXLAN or Geneve VNI (24 bits) or GRE key (32 bits) of the
    /// innermost tunnel opened, when [`FlowKey::HAS_VNI`] is set.
    pub vni: u32,
}

impl std::hash::Hash for FlowKey {
    /// The words equality compares: the derived hash fed the eight
    /// fields to the hasher one by one, each address with its length
    /// (the sweep hashes a key for every group of every window).
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let (src, dst, tail) = self.words();
        state.write_u128(src);
        state.write_u128(dst);
        state.write_u64(tail);
        state.write_u32(self.vni);
    }
}

impl PartialEq for FlowKey {
    /// Every field equal, compared as two 128-bit, one 64-bit and one
    /// 32-bit word: the flow table and the batching compare keys on every
    /// packet, and the derived comparison tests the eight fields one by one.
    #[inline]
    fn eq(&self, o: &Self) -> bool {
        let ip = |a: [u8; 16], b: [u8; 16]| u128::from_ne_bytes(a) ^ u128::from_ne_bytes(b);
        let rest = (self.tail() ^ o.tail()) | u64::from(self.vni ^ o.vni);
        (ip(self.src_ip, o.src_ip) | ip(self.dst_ip, o.dst_ip) | u128::from(rest)) == 0
    }
}

impl FlowKey {
    /// The key's addresses and [`FlowKey::tail`]: what equality compares,
    /// with `vni`.
    #[inline(always)]
    fn words(&self) -> (u128, u128, u64) {
        (
            u128::from_ne_bytes(self.src_ip),
            u128::from_ne_bytes(self.dst_ip),
            self.tail(),
        )
    }

    /// Ports, VLAN, protocol and flags in one word (little-endian, in
    /// field order: one load where the target allows).
    #[inline(always)]
    fn tail(&self) -> u64 {
        u64::from(self.src_port)
            | u64::from(self.dst_port) << 16
            | u64::from(self.vlan) << 32
            | u64::from(self.proto) << 48
            | u64::from(self.flags) << 56
    }

    /// The addresses are IPv6 (otherwise IPv4 in the first four bytes).
    pub const IPV6: u8 = 0x01;
    /// `src_port`/`dst_port` are meaningful (TCP/UDP, first fragment or unfragmented).
    pub const HAS_PORTS: u8 = 0x02;
    /// `vlan` is meaningful.
    pub const HAS_VLAN: u8 = 0x04;
    /// `vni` is meaningful: the packet came out of a tunnel with an
    /// identifier (VXLAN, Geneve, GRE with its key bit).
    pub const HAS_VNI: u8 = 0x08;

    pub fn is_ipv6(&self) -> bool {
        self.flags & Self::IPV6 != 0
    }

    pub fn has_ports(&self) -> bool {
        self.flags & Self::HAS_PORTS != 0
    }

    pub fn has_vlan(&self) -> bool {
        self.flags & Self::HAS_VLAN != 0
    }

    pub fn has_vni(&self) -> bool {
        self.flags & Self::HAS_VNI != 0
    }

    /// The tunnel identifier, if the packet had one.
    pub fn tunnel_id(&self) -> Option<u32> {
        self.has_vni().then_some(self.vni)
    }

    /// Builds a key from standard address types (tests, examples, generators).
    pub fn new(src: IpAddr, dst: IpAddr, proto: u8, ports: Option<(u16, u16)>, vlan: Option<u16>) -> Self {
        let mut key = FlowKey {
            proto,
            ..FlowKey::default()
        };
        let v6 = matches!(src, IpAddr::V6(_)) || matches!(dst, IpAddr::V6(_));
        if v6 {
            key.flags |= Self::IPV6;
        }
        key.src_ip = addr_bytes(src);
        key.dst_ip = addr_bytes(dst);
        if let Some((s, d)) = ports {
            key.src_port = s;
            key.dst_port = d;
            key.flags |= Self::HAS_PORTS;
        }
        if let Some(v) = vlan {
            key.vlan = v & 0x0fff;
            key.flags |= Self::HAS_VLAN;
        }
        key
    }

    pub fn src_addr(&self) -> IpAddr {
        to_addr(&self.src_ip, self.is_ipv6())
    }

    pub fn dst_addr(&self) -> IpAddr {
        to_addr(&self.dst_ip, self.is_ipv6())
    }

    /// The same flow seen from the other end (addresses and ports swapped).
    pub fn reversed(&self) -> Self {
        FlowKey {
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            src_port: self.dst_port,
            dst_port: self.src_port,
            ..*self
        }
    }
}

fn addr_bytes(a: IpAddr) -> [u8; 16] {
    let mut out = [0u8; 16];
    match a {
        IpAddr::V4(v4) => out[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => out = v6.octets(),
    }
    out
}

fn to_addr(b: &[u8; 16], v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(*b))
    } else {
        IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
    }
}

impl fmt::Debug for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.proto, self.src_addr())?;
        if self.has_ports() {
            write!(f, ":{}", self.src_port)?;
        }
        write!(f, " > {}", self.dst_addr())?;
        if self.has_ports() {
            write!(f, ":{}", self.dst_port)?;
        }
        if self.has_vlan() {
            write!(f, " vlan {}", self.vlan)?;
        }
        if self.has_vni() {
            write!(f, " vni {}", self.vni)?;
        }
        Ok(())
    }
}

/// TCP header fields, valid when the packet is TCP and carries a TCP header
/// (first fragment or unfragmented). See [`PacketRecord::tcp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TcpInfo {
    pub seq: u32,
    pub ack: u32,
    /// The raw 16-bit window field, before any scaling.
    pub window: u16,
    /// Flag bits, see [`tcp_flags`].
    pub flags: u8,
    /// Window-scale option shift (0..=14 after clamping), if the segment carried one.
    pub wscale: Option<u8>,
    /// MSS option, if the segment carried one.
    pub mss: Option<u16>,
}

/// One parsed packet: its time, its flow and the header fields the event
/// language can refer to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PacketRecord {
    /// Capture timestamp, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    pub key: FlowKey,
    /// IP length from the header: IPv4 total length; IPv6 40 + payload length.
    /// Taken from the header, not from the captured length, so snap-length
    /// truncation does not distort it.
    pub size: u32,
    /// Transport payload bytes according to the headers' length fields
    /// (`size` minus IP header, extension headers and the TCP/UDP/ICMP header),
    /// saturating at zero. For a non-first fragment: its IP payload length.
    pub volume: u32,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// The two ECN bits of the IP traffic class (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE).
    pub ecn: u8,
    /// Set when the packet is an IP fragment other than the first.
    pub is_later_fragment: bool,
    /// TCP fields when `key.proto == TCP` and the TCP header was present.
    pub tcp: Option<TcpInfo>,
    /// Bytes captured on the wire for this frame (captured length), for accounting.
    pub captured_len: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    type Fields = ([u8; 16], [u8; 16], u16, u16, u16, u8, u8, u32);

    fn fields(k: &FlowKey) -> Fields {
        (
            k.src_ip, k.dst_ip, k.src_port, k.dst_port, k.vlan, k.proto, k.flags, k.vni,
        )
    }

    #[test]
    fn key_equality_is_field_equality() {
        let base = FlowKey::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            6,
            Some((1234, 80)),
            Some(7),
        );
        let mut keys = vec![base, base.reversed(), FlowKey::default()];
        for i in 0..16 {
            let mut k = base;
            k.src_ip[i] ^= 1;
            keys.push(k);
            let mut k = base;
            k.dst_ip[i] ^= 0x80;
            keys.push(k);
        }
        for f in 0..8 {
            let mut k = base;
            match f {
                0 => k.src_port ^= 0x100,
                1 => k.dst_port ^= 1,
                2 => k.vlan ^= 0x800,
                3 => k.proto ^= 0x80,
                4 => k.flags ^= 1,
                5 => k.vni ^= 1,
                6 => k.vni ^= 0x8000_0000,
                _ => {
                    k.vni = 7;
                    k.flags |= FlowKey::HAS_VNI;
                }
            }
            keys.push(k);
        }
        let hash = |k: &FlowKey| {
            use std::hash::{BuildHasher, BuildHasherDefault};
            BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(k)
        };
        for a in &keys {
            for b in &keys {
                assert_eq!(a == b, fields(a) == fields(b), "{a:?} vs {b:?}");
                // Equal keys hash alike; these distinct ones all differ.
                assert_eq!(a == b, hash(a) == hash(b), "{a:?} vs {b:?}");
            }
        }
    }
}
