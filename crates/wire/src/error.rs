//! The one error type of the crate: why a frame did not become a record.
//!
//! Three kinds, because the monitor counts them differently: a frame that is
//! simply *not IP* (ARP, LLDP, …), a header that is *truncated* (the capture
//! stopped inside a header we need), and a header that is *malformed* (its
//! own fields are impossible). The error is small and `Copy` so the hot path
//! pays nothing for carrying it.

use std::fmt;

/// The layer a parse error refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layer {
    Ethernet,
    Vlan,
    LinuxSll,
    LinuxSll2,
    Loopback,
    /// Point-to-point protocol header (DLT 9, or inside PPPoE).
    Ppp,
    /// PPPoE session header.
    Pppoe,
    CiscoHdlc,
    /// An MPLS label stack entry.
    Mpls,
    /// The first byte of a raw-IP frame, before the version is known.
    Ip,
    Ipv4,
    Ipv6,
    Ipv6Ext,
    Tcp,
    Udp,
    Icmp,
    Vxlan,
    Geneve,
    Gre,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Ethernet => "Ethernet",
            Layer::Vlan => "VLAN tag",
            Layer::LinuxSll => "Linux cooked (SLL)",
            Layer::LinuxSll2 => "Linux cooked (SLL2)",
            Layer::Loopback => "loopback",
            Layer::Ppp => "PPP",
            Layer::Pppoe => "PPPoE",
            Layer::CiscoHdlc => "Cisco HDLC",
            Layer::Mpls => "MPLS label",
            Layer::Ip => "IP",
            Layer::Ipv4 => "IPv4",
            Layer::Ipv6 => "IPv6",
            Layer::Ipv6Ext => "IPv6 extension",
            Layer::Tcp => "TCP",
            Layer::Udp => "UDP",
            Layer::Icmp => "ICMP",
            Layer::Vxlan => "VXLAN",
            Layer::Geneve => "Geneve",
            Layer::Gre => "GRE",
        })
    }
}

/// What was impossible about a header whose bytes were all present.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Malformation {
    /// The IP version nibble is not the one the link layer announced (or not 4/6).
    IpVersion(u8),
    /// IPv4 IHL below 5 (the header cannot be shorter than 20 bytes).
    Ipv4HeaderLen(u8),
    /// IPv4 total length below the header length.
    Ipv4TotalLen { total: u16, header: u8 },
    /// TCP data offset below 5.
    TcpDataOffset(u8),
    /// A TCP option whose length is impossible (too short, wrong for its kind, past the end).
    TcpOption { kind: u8 },
}

impl fmt::Display for Malformation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Malformation::IpVersion(v) => write!(f, "unexpected IP version {v}"),
            Malformation::Ipv4HeaderLen(ihl) => write!(f, "IHL {ihl} is below the minimum of 5"),
            Malformation::Ipv4TotalLen { total, header } => {
                write!(f, "total length {total} is shorter than the {header}-byte header")
            }
            Malformation::TcpDataOffset(off) => write!(f, "data offset {off} is below the minimum of 5"),
            Malformation::TcpOption { kind } => write!(f, "option of kind {kind} has an impossible length"),
        }
    }
}

/// Why [`parse_frame`](crate::parse_frame) produced no record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ParseError {
    /// The frame carries something other than IPv4/IPv6 (ARP, LLDP, 802.3 LLC…).
    #[error("not IP: {}", ethertype_text(*.0))]
    NotIpEtherType(u16),
    /// A BSD loopback / NULL frame whose address family is not IPv4 or IPv6.
    #[error("not IP: loopback address family {0}")]
    NotIpFamily(u32),
    /// A PPP frame (DLT 9 or PPPoE) carrying a protocol other than IPv4/IPv6/MPLS (LCP, IPCP, …).
    #[error("not IP: PPP protocol {0:#06x}")]
    NotIpPpp(u16),
    /// What follows an MPLS label stack starts with neither version 4 nor 6
    /// (a pseudowire, say); the nibble found.
    #[error("not IP: MPLS payload starting with nibble {0}")]
    NotIpMpls(u8),
    /// A header we need is cut short by the end of the captured bytes.
    #[error("{layer} header truncated: {need} bytes needed, {have} captured")]
    Truncated { layer: Layer, need: u32, have: u32 },
    /// A header is present but its fields are impossible.
    #[error("malformed {layer} header: {reason}")]
    Malformed { layer: Layer, reason: Malformation },
}

impl ParseError {
    /// The frame is well formed but not IP: count it, don't complain about it.
    pub fn is_not_ip(&self) -> bool {
        matches!(
            self,
            ParseError::NotIpEtherType(_)
                | ParseError::NotIpFamily(_)
                | ParseError::NotIpPpp(_)
                | ParseError::NotIpMpls(_)
        )
    }

    /// The frame claims to be IP but could not be parsed (truncated or malformed).
    pub fn is_malformed(&self) -> bool {
        !self.is_not_ip()
    }

    /// The layer at fault, if any (none for "not IP").
    pub fn layer(&self) -> Option<Layer> {
        match *self {
            ParseError::Truncated { layer, .. } | ParseError::Malformed { layer, .. } => Some(layer),
            _ => None,
        }
    }

    /// Shorthand for a too-short buffer; lengths saturate at `u32::MAX`.
    pub(crate) fn truncated(layer: Layer, need: usize, have: usize) -> Self {
        ParseError::Truncated {
            layer,
            need: u32::try_from(need).unwrap_or(u32::MAX),
            have: u32::try_from(have).unwrap_or(u32::MAX),
        }
    }

    pub(crate) fn malformed(layer: Layer, reason: Malformation) -> Self {
        ParseError::Malformed { layer, reason }
    }
}

/// EtherTypes below 0x0600 are 802.3 length fields (LLC frames such as STP).
fn ethertype_text(t: u16) -> String {
    if t < 0x0600 {
        format!("802.3 frame with LLC (length field {t})")
    } else {
        format!("ethertype {t:#06x}")
    }
}

/// Fails with [`ParseError::Truncated`] when `buf` is shorter than `need`.
#[inline(always)]
pub(crate) fn need(layer: Layer, buf: &[u8], need: usize) -> Result<(), ParseError> {
    if buf.len() < need {
        Err(ParseError::truncated(layer, need, buf.len()))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_layer_and_numbers() {
        let e = ParseError::truncated(Layer::Tcp, 20, 7);
        assert_eq!(e.to_string(), "TCP header truncated: 20 bytes needed, 7 captured");
        assert!(e.is_malformed());
        assert_eq!(e.layer(), Some(Layer::Tcp));
        let e = ParseError::malformed(
            Layer::Ipv4,
            Malformation::Ipv4TotalLen {
                total: 10,
                header: 20,
            },
        );
        assert_eq!(
            e.to_string(),
            "malformed IPv4 header: total length 10 is shorter than the 20-byte header"
        );
        let e = ParseError::NotIpEtherType(0x0806);
        assert_eq!(e.to_string(), "not IP: ethertype 0x0806");
        assert!(e.is_not_ip());
        assert_eq!(e.layer(), None);
        assert_eq!(
            ParseError::NotIpEtherType(0x27).to_string(),
            "not IP: 802.3 frame with LLC (length field 39)"
        );
    }

    #[test]
    fn error_is_small() {
        assert!(std::mem::size_of::<ParseError>() <= 16);
    }
}
