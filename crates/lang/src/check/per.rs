//! `per GRANULARITY`: the fields of the group key.

use std::collections::HashMap;

use crate::ast::{Field, GroupField, Per, PerKind, PrefixLen};
use crate::error::{codes, Diagnostic};
use crate::span::Span;
use crate::spec::{Granularity, PrefixLens};

/// The granularity (`5tuple` when absent). Problems are reported and the
/// offending field left out.
pub fn lower_per(per: Option<&Per>, diags: &mut Vec<Diagnostic>) -> Granularity {
    let Some(Per {
        kind: PerKind::Fields(fields),
        ..
    }) = per
    else {
        return Granularity::FIVE_TUPLE;
    };
    lower_fields(fields, "the granularity", diags)
}

/// The fields of a list (`per`, a drill-down's `on`), each at most once.
pub fn lower_fields(fields: &[GroupField], list: &str, diags: &mut Vec<Diagnostic>) -> Granularity {
    let mut g = Granularity::default();
    // Each field's first place, looked up in constant time: a list has no
    // length limit, and every repeat is checked against it.
    let mut seen: HashMap<Field, Span> = HashMap::new();
    for gf in fields {
        if let Some(first) = seen.get(&gf.field) {
            diags.push(
                Diagnostic::new(
                    codes::DUPLICATE_FIELD,
                    format!("`{}` appears twice in {list}", gf.field.name()),
                    gf.span,
                )
                .here("listed again")
                .label(*first, "first listed here")
                .help("list each field once"),
            );
            continue;
        }
        seen.insert(gf.field, gf.span);
        match gf.field {
            Field::SrcIp => g.src_ip = lens(gf, diags),
            Field::DstIp => g.dst_ip = lens(gf, diags),
            Field::SrcPort => g.src_port = no_lens(gf, diags),
            Field::DstPort => g.dst_port = no_lens(gf, diags),
            Field::Proto => g.proto = no_lens(gf, diags),
            Field::Vlan => g.vlan = no_lens(gf, diags),
            Field::Vni => g.vni = no_lens(gf, diags),
        }
    }
    g
}

fn no_lens(gf: &GroupField, diags: &mut Vec<Diagnostic>) -> bool {
    let (Some(first), Some(last)) = (gf.lens.first(), gf.lens.last()) else {
        return true;
    };
    let name = gf.field.name();
    diags.push(
        Diagnostic::new(
            codes::BAD_GRANULARITY,
            format!("`{name}` has no prefix length"),
            first.span.to(last.span),
        )
        .help(format!("only addresses take a length: write `{name}`")),
    );
    false
}

fn len(l: &PrefixLen, max: u8, family: &str, diags: &mut Vec<Diagnostic>) -> Option<u8> {
    let ok = u8::try_from(l.value).ok().filter(|v| *v <= max);
    if ok.is_none() {
        let help = if max == 32 {
            "IPv4 lengths are 0 to 32; for a separate IPv6 length write both, e.g. `src_ip/24/64`".to_string()
        } else {
            format!("{family} lengths are 0 to {max}")
        };
        diags.push(
            Diagnostic::new(
                codes::BAD_GRANULARITY,
                format!("prefix length {} is too long for {family}", l.value),
                l.span,
            )
            .help(help),
        );
    }
    ok
}

fn lens(gf: &GroupField, diags: &mut Vec<Diagnostic>) -> Option<PrefixLens> {
    match gf.lens.as_slice() {
        [] => Some(PrefixLens::FULL),
        [n] => len(n, 32, "IPv4", diags).map(|n| PrefixLens { v4: n, v6: n }),
        [n, m, ..] => {
            let v4 = len(n, 32, "IPv4", diags);
            let v6 = len(m, 128, "IPv6", diags);
            Some(PrefixLens { v4: v4?, v6: v6? })
        }
    }
}
