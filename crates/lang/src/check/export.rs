//! Export policies: their filters are an event's (see [`super::filter`]),
//! but for `vni`, which the export classifier's key does not hold (a
//! condition on it is refused rather than ignored); their `send` clauses
//! are checked here.
//!
//! Which action goes where: headers go to a collector (the compressed
//! stream is a format of its own); packets go to a VXLAN analyzer or to
//! pcapng files. Every number is range-checked with the reason in the help.

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::ast::{Dest, Export, Field, Quantity, Send, SendWhat};
use crate::error::{codes, Diagnostic};
use crate::span::Span;
use crate::spec::{Destination, ExportAction, ExportSpec, SendSpec};

/// A pcapng file of less than this is refused: rotation would make one
/// file every few packets.
const MIN_ROTATE_BYTES: u64 = 4_000;
/// Nor may files be shorter than a second.
const MIN_ROTATE_NS: u64 = 1_000_000_000;
/// The largest frame a snap length can ask for (pcapng's usual maximum).
const MAX_SNAP: u64 = 262_144;

/// Lowers every policy of `file`, pushing a diagnostic per problem.
pub fn lower_exports(exports: &[Export], diags: &mut Vec<Diagnostic>) -> Vec<ExportSpec> {
    let mut first_by_name: HashMap<&str, Span> = HashMap::new();
    let mut specs = Vec::new();
    for x in exports {
        if let Some(first) = first_by_name.get(x.name.as_str()) {
            diags.push(
                Diagnostic::new(
                    codes::DUPLICATE_POLICY,
                    format!("duplicate export policy name `{}`", x.name),
                    x.name_span,
                )
                .here("defined again here")
                .label(*first, "first defined here")
                .help("policy names must be unique in a file: rename one of them"),
            );
        } else {
            first_by_name.insert(&x.name, x.name_span);
        }
        let before = diags.len();
        for c in x.filters.iter().flat_map(|f| &f.conds) {
            if c.field == Field::Vni {
                diags.push(
                    Diagnostic::new(
                        codes::BAD_FILTER_VALUE,
                        "export policies cannot select by `vni`".to_string(),
                        c.field_span,
                    )
                    .here("not available to export filters")
                    .help(
                        "export filters see the inner packet's addresses, ports, protocol and VLAN; \
                         to export one tenant's traffic, filter on its inner addresses",
                    ),
                );
            }
        }
        let filters = super::filter::lower_filters(&x.filters, diags);
        let sends: Vec<SendSpec> = x.sends.iter().filter_map(|s| lower_send(s, diags)).collect();
        let interfaces = interfaces(&x.interfaces, diags);
        if diags.len() == before {
            specs.push(ExportSpec {
                name: x.name.clone(),
                filters,
                interfaces,
                sends,
            });
        }
    }
    specs
}

/// Interface names as Linux takes them (1 to 15 bytes), each once.
fn interfaces(names: &[(String, Span)], diags: &mut Vec<Diagnostic>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (name, span) in names {
        if name.len() > 15 {
            diags.push(
                Diagnostic::new(
                    codes::BAD_SEND,
                    format!("`{name}` is longer than an interface name"),
                    *span,
                )
                .here("too long")
                .help("Linux interface names are at most 15 bytes"),
            );
        } else if out.contains(name) {
            diags.push(
                Diagnostic::new(
                    codes::BAD_SEND,
                    format!("interface `{name}` is listed twice"),
                    *span,
                )
                .here("again")
                .help("list each interface once"),
            );
        } else {
            out.push(name.clone());
        }
    }
    out
}

fn lower_send(s: &Send, diags: &mut Vec<Diagnostic>) -> Option<SendSpec> {
    let action = match &s.what {
        SendWhat::Headers => ExportAction::Headers,
        SendWhat::Packets { snap: None } => ExportAction::Packets { snap: None },
        SendWhat::Packets { snap: Some(q) } => ExportAction::Packets {
            snap: Some(snap(q, diags)?),
        },
    };
    let bad = |msg: String, span: Span, here: &str, help: &str| {
        Diagnostic::new(codes::BAD_SEND, msg, span).here(here).help(help)
    };
    let destination = match (&s.dest, action) {
        (Dest::Collector { addr, port }, ExportAction::Headers) => Destination::Collector(SocketAddr::new(
            *addr,
            port16(*port, Destination::COLLECTOR_PORT, diags)?,
        )),
        (Dest::Collector { .. }, ExportAction::Packets { .. }) => {
            diags.push(bad(
                "a collector receives headers, not packets".into(),
                s.span,
                "packets to a collector",
                "send packets to a VXLAN analyzer (`to vxlan ADDR`) or to files (`to pcapng`); send headers to the collector",
            ));
            return None;
        }
        (Dest::Vxlan { .. } | Dest::Pcapng { .. }, ExportAction::Headers) => {
            diags.push(bad(
                "headers go to a collector".into(),
                s.span,
                "headers to a packet destination",
                "write `send headers to collector ADDR` (`clarion collect` writes them as pcapng or JSON lines), or `send packets snap 128B to ...` to keep the first bytes of each packet",
            ));
            return None;
        }
        (Dest::Vxlan { addr, port, vni }, ExportAction::Packets { .. }) => {
            let port = port16(*port, Destination::VXLAN_PORT, diags)?;
            let vni = match vni {
                None => 0,
                Some((n, span)) => match u32::try_from(*n) {
                    Ok(v) if v < 1 << 24 => v,
                    _ => {
                        diags.push(bad(
                            format!("VNI {n} does not fit in 24 bits"),
                            *span,
                            "out of range",
                            "a VXLAN network identifier is 0 to 16777215",
                        ));
                        return None;
                    }
                },
            };
            Destination::Vxlan {
                analyzer: SocketAddr::new(*addr, port),
                vni,
            }
        }
        (Dest::Pcapng { rotate }, ExportAction::Packets { .. }) => rotation(rotate, diags)?,
    };
    Some(SendSpec { action, destination })
}

fn snap(q: &Quantity, diags: &mut Vec<Diagnostic>) -> Option<u32> {
    let bytes = match (q.value, q.unit) {
        (crate::ast::NumLit::Int(n), None) => Some(n),
        (crate::ast::NumLit::Int(n), Some(u)) => u.bytes().and_then(|b| n.checked_mul(b)),
        _ => None,
    };
    match bytes {
        Some(b @ 1..=MAX_SNAP) => u32::try_from(b).ok(),
        _ => {
            diags.push(
                Diagnostic::new(
                    codes::BAD_SEND,
                    format!("`snap {q}` is not a frame length"),
                    q.span,
                )
                .here("not a length")
                .help(format!(
                    "a snap length is a whole number of bytes, 1 to {MAX_SNAP}, e.g. `snap 128B`"
                )),
            );
            None
        }
    }
}

fn port16(port: Option<(u64, Span)>, default: u16, diags: &mut Vec<Diagnostic>) -> Option<u16> {
    let Some((n, span)) = port else {
        return Some(default);
    };
    match u16::try_from(n) {
        Ok(p) if p > 0 => Some(p),
        _ => {
            diags.push(
                Diagnostic::new(codes::BAD_SEND, format!("port {n} is not a UDP port"), span)
                    .here("out of range")
                    .help("a port is 1 to 65535"),
            );
            None
        }
    }
}

/// `rotate` limits: at most one size and one duration.
fn rotation(rotate: &[Quantity], diags: &mut Vec<Diagnostic>) -> Option<Destination> {
    let (mut max_bytes, mut max_age_ns) = (None, None);
    let mut ok = true;
    for q in rotate {
        let err = |msg: String, here: &str, help: &str| {
            Diagnostic::new(codes::BAD_SEND, msg, q.span)
                .here(here)
                .help(help)
        };
        let unit = q.unit;
        let value = q.value.as_f64();
        if let Some(b) = unit.and_then(|u| u.bytes()) {
            let bytes = value * b as f64;
            if max_bytes.is_some() {
                diags.push(err(
                    "two sizes to rotate at".into(),
                    "second size",
                    "give one size and at most one duration, e.g. `rotate 100MB or 60s`",
                ));
                ok = false;
            } else if !(bytes >= MIN_ROTATE_BYTES as f64 && bytes < 1e18) {
                diags.push(err(
                    format!("files of `{q}` are too small or too large"),
                    "out of range",
                    "rotate at 4KB or more, e.g. `rotate 100MB`",
                ));
                ok = false;
            } else {
                max_bytes = Some(bytes as u64);
            }
        } else if let Some(ns) = unit.and_then(|u| u.nanos()) {
            let total = value * ns as f64;
            if max_age_ns.is_some() {
                diags.push(err(
                    "two durations to rotate at".into(),
                    "second duration",
                    "give one size and at most one duration, e.g. `rotate 100MB or 60s`",
                ));
                ok = false;
            } else if !(total >= MIN_ROTATE_NS as f64 && total < 1e18) {
                diags.push(err(
                    format!("files of `{q}` are too short or too long"),
                    "out of range",
                    "rotate at 1s or more, e.g. `rotate 60s` or `rotate 3600s`",
                ));
                ok = false;
            } else {
                max_age_ns = Some(total as u64);
            }
        } else {
            diags.push(err(
                format!("`{q}` is neither a size nor a duration"),
                "no size or time unit",
                "write a size (`100MB`, `1GiB`) or a duration (`60s`)",
            ));
            ok = false;
        }
    }
    ok.then_some(Destination::Pcapng {
        max_bytes,
        max_age_ns,
    })
}
