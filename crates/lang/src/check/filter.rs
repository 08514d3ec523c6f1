//! `filter` clauses: header conditions.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::ast::{Cond, CondValue, Field, FilterClause};
use crate::error::{codes, Diagnostic};
use crate::span::Span;
use crate::spec::{Filter, IpPrefix, PortRange};
use crate::suggest::closest;

const PROTOCOLS: [(&str, u8); 4] = [("tcp", 6), ("udp", 17), ("icmp", 1), ("icmpv6", 58)];

/// One [`Filter`] per clause; no clause means one filter that matches everything.
pub fn lower_filters(clauses: &[FilterClause], diags: &mut Vec<Diagnostic>) -> Vec<Filter> {
    if clauses.is_empty() {
        return vec![Filter::default()];
    }
    clauses.iter().map(|c| lower_filter(c, diags)).collect()
}

fn lower_filter(clause: &FilterClause, diags: &mut Vec<Diagnostic>) -> Filter {
    let mut f = Filter::default();
    // Each field's first condition, looked up in constant time: a filter
    // has no length limit, and every repeat is checked against it.
    let mut seen: HashMap<Field, Span> = HashMap::new();
    for c in &clause.conds {
        if let Some(first) = seen.get(&c.field) {
            diags.push(
                Diagnostic::new(
                    codes::DUPLICATE_FIELD,
                    format!("`{}` appears twice in one filter", c.field.name()),
                    c.field_span,
                )
                .here("second condition on this field")
                .label(*first, "first condition on it here")
                .help(
                    "all conditions of a filter must hold; to match either value, write two `filter` clauses",
                ),
            );
            continue;
        }
        seen.insert(c.field, c.field_span);
        if c.value == CondValue::Any {
            continue;
        }
        let cx = Cx {
            cond: c,
            diags: &mut *diags,
        };
        match c.field {
            Field::SrcIp => f.src_ip = cx.prefix(),
            Field::DstIp => f.dst_ip = cx.prefix(),
            Field::SrcPort => f.src_port = cx.ports(),
            Field::DstPort => f.dst_port = cx.ports(),
            Field::Proto => f.proto = cx.proto(),
            Field::Vlan => f.vlan = cx.vlan(),
            Field::Vni => f.vni = cx.vni(),
        }
    }
    f
}

/// Checking one condition.
struct Cx<'a> {
    cond: &'a Cond,
    diags: &'a mut Vec<Diagnostic>,
}

fn describe(v: &CondValue) -> String {
    match v {
        CondValue::Any => "`*`".into(),
        CondValue::Int(n) => format!("the number `{n}`"),
        CondValue::Range(lo, hi) => format!("the range `{lo}..{hi}`"),
        CondValue::Addr { .. } => "an IP address".into(),
        CondValue::Name(n) => format!("`{n}`"),
    }
}

impl Cx<'_> {
    fn error_here<T>(self, here: &str, code: &'static str, message: String, help: String) -> Option<T> {
        self.diags.push(
            Diagnostic::new(code, message, self.cond.value_span)
                .here(here)
                .help(help),
        );
        None
    }

    fn wrong_kind<T>(self, wants: &str, example: &str) -> Option<T> {
        let field = self.cond.field.name();
        let message = format!("`{field}` needs {wants}, found {}", describe(&self.cond.value));
        self.error_here(
            &format!("expected {wants}"),
            codes::BAD_FILTER_VALUE,
            message,
            format!("e.g. `{field} {example}`"),
        )
    }

    fn prefix(self) -> Option<IpPrefix> {
        let CondValue::Addr { addr, len } = self.cond.value else {
            return self.wrong_kind("an IP address or prefix", "in 10.0.128.0/24");
        };
        let (full, family) = if addr.is_ipv4() {
            (32, "IPv4")
        } else {
            (128, "IPv6")
        };
        let len = len.unwrap_or(full);
        let Some(len) = u8::try_from(len).ok().filter(|l| u64::from(*l) <= full) else {
            let message = format!("prefix length /{len} is too long for an {family} address");
            return self.error_here(
                "too long",
                codes::BAD_FILTER_VALUE,
                message,
                format!("{family} prefixes are /0 to /{full}"),
            );
        };
        let masked = mask(addr, len);
        if masked != addr {
            let message = format!("`{addr}/{len}` has bits set after the first {len}");
            return self.error_here(
                "host bits set",
                codes::HOST_BITS,
                message,
                format!("did you mean {masked}/{len}?"),
            );
        }
        Some(IpPrefix { addr, len })
    }

    fn port(&self, n: u64) -> Option<u16> {
        u16::try_from(n).ok()
    }

    fn ports(self) -> Option<PortRange> {
        let (lo, hi) = match self.cond.value {
            CondValue::Int(n) => (n, n),
            CondValue::Range(lo, hi) => (lo, hi),
            _ => return self.wrong_kind("a port or a port range", "= 80"),
        };
        let (Some(plo), Some(phi)) = (self.port(lo), self.port(hi)) else {
            let bad = if self.port(lo).is_none() { lo } else { hi };
            let message = format!("port {bad} is out of range");
            return self.error_here(
                "out of range",
                codes::BAD_FILTER_VALUE,
                message,
                "ports are 0 to 65535".into(),
            );
        };
        if plo > phi {
            let message = format!("the port range `{lo}..{hi}` is empty");
            return self.error_here(
                "empty range",
                codes::BAD_FILTER_VALUE,
                message,
                format!("write the lower port first: `{hi}..{lo}`"),
            );
        }
        Some(PortRange { lo: plo, hi: phi })
    }

    fn proto(self) -> Option<u8> {
        match &self.cond.value {
            CondValue::Int(n) => match u8::try_from(*n) {
                Ok(p) => Some(p),
                Err(_) => self.error_here(
                    "out of range",
                    codes::BAD_FILTER_VALUE,
                    format!("protocol number {n} is out of range"),
                    "protocol numbers are 0 to 255".into(),
                ),
            },
            CondValue::Name(name) => {
                if let Some((_, p)) = PROTOCOLS.iter().find(|(n, _)| n == name) {
                    return Some(*p);
                }
                let help = match closest(name, PROTOCOLS.iter().map(|(n, _)| *n)) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => "write `tcp`, `udp`, `icmp`, `icmpv6` or a protocol number (0 to 255)".into(),
                };
                self.error_here(
                    "unknown protocol",
                    codes::BAD_FILTER_VALUE,
                    format!("unknown protocol `{name}`"),
                    help,
                )
            }
            _ => self.wrong_kind("a protocol name or number", "= tcp"),
        }
    }

    fn vlan(self) -> Option<u16> {
        let CondValue::Int(n) = self.cond.value else {
            return self.wrong_kind("a VLAN id", "= 100");
        };
        match u16::try_from(n).ok().filter(|v| *v <= 4095) {
            Some(v) => Some(v),
            None => self.error_here(
                "out of range",
                codes::BAD_FILTER_VALUE,
                format!("VLAN id {n} is out of range"),
                "VLAN ids are 0 to 4095".into(),
            ),
        }
    }

    /// A VXLAN/Geneve VNI is 24 bits, a GRE key 32: any 32-bit value.
    fn vni(self) -> Option<u32> {
        let CondValue::Int(n) = self.cond.value else {
            return self.wrong_kind("a tunnel VNI or GRE key", "= 5001");
        };
        match u32::try_from(n) {
            Ok(v) => Some(v),
            Err(_) => self.error_here(
                "out of range",
                codes::BAD_FILTER_VALUE,
                format!("VNI {n} is out of range"),
                "VXLAN and Geneve VNIs are 0 to 16777215, GRE keys 0 to 4294967295".into(),
            ),
        }
    }
}

/// `addr` with every bit after the first `len` cleared (`len` ≤ the family's width).
fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(len.min(32))).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(len.min(128))).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks() {
        let a: IpAddr = "10.0.128.7".parse().unwrap();
        assert_eq!(mask(a, 24), "10.0.128.0".parse::<IpAddr>().unwrap());
        assert_eq!(mask(a, 0), "0.0.0.0".parse::<IpAddr>().unwrap());
        assert_eq!(mask(a, 32), a);
        let b: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(mask(b, 32), "2001:db8::".parse::<IpAddr>().unwrap());
        assert_eq!(mask(b, 128), b);
    }
}
