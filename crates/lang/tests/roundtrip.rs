//! parse → print → parse gives back the same tree, for random trees that
//! use every construct of the syntax (including ones the checker refuses:
//! the printer and parser do not care about meaning).

use std::net::IpAddr;

use clarion_lang::ast::{
    Across, AlertClause, BinOp, Capture, Cond, CondValue, Dest, Event, Export, Expr, ExprKind, Field, File,
    FilterClause, GroupField, NumLit, Per, PerKind, PrefixLen, Quantity, QuorumLit, Send, SendWhat, Severity,
    Then, UnOp, Unit,
};
use clarion_lang::parse;
use clarion_lang::span::Span;
use proptest::prelude::*;

const KEYWORDS: [&str; 12] = [
    "event", "export", "filter", "when", "per", "every", "across", "then", "and", "or", "not", "in",
];

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "volume",
            "size",
            "ttl",
            "is_lost",
            "ack_lastepoch",
            "tcp",
            "sum",
            "KB",
            "s"
        ])
        .prop_map(String::from),
        "[a-z_][a-z0-9_]{0,7}".prop_filter("keyword", |w| !KEYWORDS.contains(&w.as_str())),
    ]
}

fn name() -> impl Strategy<Value = String> {
    "[A-Za-z_][A-Za-z0-9_-]{0,10}".prop_filter("keyword", |w| !KEYWORDS.contains(&w.as_str()))
}

fn field() -> impl Strategy<Value = Field> {
    prop::sample::select(Field::ALL.to_vec())
}

fn num() -> impl Strategy<Value = NumLit> {
    prop_oneof![
        any::<u64>().prop_map(NumLit::Int),
        (0u64..100_000).prop_map(NumLit::Int),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|x| NumLit::Dec(x.abs())),
        (0u32..10_000, 1u32..1000).prop_map(|(a, b)| NumLit::Dec(f64::from(a) / f64::from(b))),
    ]
}

fn quantity() -> impl Strategy<Value = Quantity> {
    (num(), prop::option::of(prop::sample::select(Unit::ALL.to_vec()))).prop_map(|(value, unit)| Quantity {
        value,
        unit,
        span: Span::default(),
    })
}

fn expr() -> impl Strategy<Value = Expr> {
    let mk = |kind| Expr {
        kind,
        span: Span::default(),
    };
    let leaf = prop_oneof![quantity().prop_map(ExprKind::Num), word().prop_map(ExprKind::Var)].prop_map(mk);
    let ops = vec![
        BinOp::Or,
        BinOp::And,
        BinOp::Lt,
        BinOp::Le,
        BinOp::Gt,
        BinOp::Ge,
        BinOp::Eq,
        BinOp::Ne,
        BinOp::Add,
        BinOp::Sub,
        BinOp::Mul,
        BinOp::Div,
    ];
    leaf.prop_recursive(8, 64, 2, move |inner| {
        prop_oneof![
            (word(), inner.clone()).prop_map(|(func, arg)| ExprKind::Call {
                func,
                func_span: Span::default(),
                arg: Box::new(arg)
            }),
            (prop::sample::select(vec![UnOp::Neg, UnOp::Not]), inner.clone()).prop_map(|(op, e)| {
                ExprKind::Unary {
                    op,
                    op_span: Span::default(),
                    expr: Box::new(e),
                }
            }),
            (prop::sample::select(ops.clone()), inner.clone(), inner).prop_map(|(op, l, r)| {
                ExprKind::Binary {
                    op,
                    op_span: Span::default(),
                    left: Box::new(l),
                    right: Box::new(r),
                }
            }),
        ]
        .prop_map(move |kind| Expr {
            kind,
            span: Span::default(),
        })
    })
}

fn addr() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|a| IpAddr::from(a.to_be_bytes())),
        any::<u128>().prop_map(|a| IpAddr::from(a.to_be_bytes())),
        any::<u32>().prop_map(|a| IpAddr::V6(std::net::Ipv4Addr::from(a).to_ipv6_mapped())),
        (any::<u16>(), 0u32..128).prop_map(|(a, s)| IpAddr::from((u128::from(a) << s).to_be_bytes())),
    ]
}

fn cond() -> impl Strategy<Value = Cond> {
    let value = prop_oneof![
        Just(CondValue::Any),
        any::<u64>().prop_map(CondValue::Int),
        (any::<u64>(), any::<u64>()).prop_map(|(a, b)| CondValue::Range(a, b)),
        (addr(), prop::option::of(0u64..200)).prop_map(|(addr, len)| CondValue::Addr { addr, len }),
        word().prop_map(CondValue::Name),
    ];
    (field(), value).prop_map(|(field, value)| Cond {
        field,
        field_span: Span::default(),
        value,
        value_span: Span::default(),
    })
}

fn group_field() -> impl Strategy<Value = GroupField> {
    let len = any::<u64>().prop_map(|value| PrefixLen {
        value,
        span: Span::default(),
    });
    (field(), prop::collection::vec(len, 0..=2)).prop_map(|(field, lens)| GroupField {
        field,
        lens,
        span: Span::default(),
    })
}

fn then() -> impl Strategy<Value = Then> {
    (
        name(),
        prop::collection::vec(group_field(), 0..3),
        prop::option::of(quantity()),
    )
        .prop_map(|(event, on, duration)| Then {
            event,
            event_span: Span::default(),
            on,
            duration,
            span: Span::default(),
        })
}

fn per() -> impl Strategy<Value = Per> {
    prop_oneof![
        Just(PerKind::FiveTuple),
        prop::collection::vec(group_field(), 1..5).prop_map(PerKind::Fields)
    ]
    .prop_map(|kind| Per {
        kind,
        span: Span::default(),
    })
}

fn event() -> impl Strategy<Value = Event> {
    let filter = prop::collection::vec(cond(), 0..4).prop_map(|conds| FilterClause {
        conds,
        span: Span::default(),
    });
    (
        name(),
        prop::collection::vec(filter, 0..3),
        expr(),
        prop::option::of(per()),
        prop::option::of(quantity()),
        prop::option::of(prop::option::of((0u64..200, any::<bool>()))),
        prop::collection::vec(then(), 0..3),
        any::<bool>(),
        prop::option::of(
            (prop::option::of(quantity()), prop::option::of(quantity()))
                .prop_filter("one side at least", |(b, a)| b.is_some() || a.is_some()),
        ),
        // Any number: the parser keeps what is written, the checker ranges it.
        prop::option::of(prop_oneof![0u64..=100, any::<u64>()]),
        alert_clause(),
    )
        .prop_map(
            |(name, filters, when, per, every, across, then, on_demand, capture, priority, alert)| Event {
                name,
                name_span: Span::default(),
                filters,
                when,
                per,
                every,
                across: across.map(|quorum| Across {
                    span: Span::default(),
                    quorum: quorum.map(|(n, percent)| QuorumLit {
                        n,
                        percent,
                        span: Span::default(),
                    }),
                }),
                then,
                capture: capture.map(|(before, after)| Capture {
                    before,
                    after,
                    span: Span::default(),
                }),
                on_demand: on_demand.then(Span::default),
                priority: priority.map(|n| (n, Span::default())),
                alert,
                span: Span::default(),
            },
        )
}

/// Any alert clause with at least one part; counts as written (the
/// checker ranges them).
fn alert_clause() -> impl Strategy<Value = Option<AlertClause>> {
    prop::option::of(
        (
            spanned(),
            spanned(),
            prop::option::of(prop::sample::select(Severity::ALL.to_vec())),
        )
            .prop_filter("one part at least", |(a, r, s)| {
                a.is_some() || r.is_some() || s.is_some()
            })
            .prop_map(|(after, resolve_after, severity)| AlertClause {
                after,
                resolve_after,
                severity: severity.map(|s| (s, Span::default())),
                span: Span::default(),
            }),
    )
}

fn spanned() -> impl Strategy<Value = Option<(u64, Span)>> {
    prop::option::of(any::<u64>().prop_map(|n| (n, Span::default())))
}

fn send() -> impl Strategy<Value = Send> {
    let int_quantity = (
        any::<u64>(),
        prop::option::of(prop::sample::select(Unit::ALL.to_vec())),
    )
        .prop_map(|(n, unit)| Quantity {
            value: NumLit::Int(n),
            unit,
            span: Span::default(),
        });
    let what = prop_oneof![
        Just(SendWhat::Headers),
        prop::option::of(int_quantity).prop_map(|snap| SendWhat::Packets { snap }),
    ];
    let dest = prop_oneof![
        (addr(), spanned()).prop_map(|(addr, port)| Dest::Collector { addr, port }),
        (addr(), spanned(), spanned()).prop_map(|(addr, port, vni)| Dest::Vxlan { addr, port, vni }),
        prop::collection::vec(quantity(), 0..3).prop_map(|rotate| Dest::Pcapng { rotate }),
    ];
    (what, dest).prop_map(|(what, dest)| Send {
        what,
        what_span: Span::default(),
        dest,
        dest_span: Span::default(),
        span: Span::default(),
    })
}

fn export() -> impl Strategy<Value = Export> {
    let filter = prop::collection::vec(cond(), 0..4).prop_map(|conds| FilterClause {
        conds,
        span: Span::default(),
    });
    let iface = "[a-z][a-z0-9_.-]{0,8}"
        .prop_filter("keyword", |w| !KEYWORDS.contains(&w.as_str()))
        .prop_map(|n| (n, Span::default()));
    (
        name(),
        prop::collection::vec(filter, 0..3),
        prop::collection::vec(iface, 0..3),
        prop::collection::vec(send(), 1..4),
    )
        .prop_map(|(name, filters, interfaces, sends)| Export {
            name,
            name_span: Span::default(),
            filters,
            interfaces,
            sends,
            span: Span::default(),
        })
}

fn file() -> impl Strategy<Value = File> {
    (
        prop::collection::vec(event(), 0..4),
        prop::collection::vec(export(), 0..3),
    )
        .prop_map(|(events, exports)| File { events, exports })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn print_then_parse_gives_the_same_tree(f in file()) {
        let printed = f.to_string();
        let parsed = match parse(&printed) {
            Ok(p) => p,
            Err(d) => return Err(TestCaseError::fail(d.render("printed", &printed, false))),
        };
        prop_assert_eq!(parsed.without_spans(), f, "printed:\n{}", printed);
        prop_assert_eq!(parsed.to_string(), printed);
    }

    #[test]
    fn spans_point_into_the_source(f in file()) {
        let printed = f.to_string();
        let parsed = parse(&printed).map_err(|d| TestCaseError::fail(d.to_string()))?;
        for e in &parsed.events {
            prop_assert_eq!(&printed[e.name_span.range()], e.name.as_str());
            prop_assert!(printed[e.span.range()].starts_with("event "));
            prop_assert_eq!(printed[e.when.span.range()].to_string(), e.when.to_string());
            if let Some((n, span)) = e.priority {
                prop_assert_eq!(&printed[span.range()], n.to_string());
            }
            if let Some(a) = &e.alert {
                prop_assert!(printed[a.span.range()].starts_with("alert "));
                for (n, span) in [a.after, a.resolve_after].into_iter().flatten() {
                    prop_assert_eq!(&printed[span.range()], n.to_string());
                }
                if let Some((s, span)) = a.severity {
                    prop_assert_eq!(&printed[span.range()], s.name());
                }
            }
        }
        for x in &parsed.exports {
            prop_assert_eq!(&printed[x.name_span.range()], x.name.as_str());
            prop_assert!(printed[x.span.range()].starts_with("export "));
            for s in &x.sends {
                prop_assert!(printed[s.span.range()].starts_with("send "));
                let word = match s.dest {
                    Dest::Collector { .. } => "collector ",
                    Dest::Vxlan { .. } => "vxlan ",
                    Dest::Pcapng { .. } => "pcapng",
                };
                prop_assert!(printed[s.dest_span.range()].starts_with(word));
            }
        }
    }
}
