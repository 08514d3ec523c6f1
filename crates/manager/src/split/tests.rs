use clarion_lang::spec::{BaseVar, Filter, Granularity, Scope, Var};
use proptest::prelude::*;

use super::*;

fn var(base: BaseVar) -> PacketExpr {
    PacketExpr::Var(Var {
        base,
        last_epoch: false,
    })
}

fn agg(func: AggFunc, base: BaseVar) -> Pred {
    Pred::Agg(AggCall { func, arg: var(base) })
}

fn cmp(op: CmpOp, l: Pred, r: Pred) -> Pred {
    Pred::Cmp(op, Box::new(l), Box::new(r))
}

fn event(pred: Pred) -> EventSpec {
    EventSpec {
        capture: None,
        priority: None,
        name: "spike".into(),
        filters: vec![Filter::default()],
        predicate: pred,
        granularity: Granularity::FIVE_TUPLE,
        interval_ns: 10_000_000,
        scope: Scope::Network,
        drill_downs: Vec::new(),
        on_demand: false,
    }
}

fn local_text(pred: Pred, hosts: usize) -> Result<String, ManagerError> {
    split(&event(pred), hosts).map(|s| s.local.predicate.to_string())
}

#[test]
fn sums_and_counts_split_their_threshold_evenly() {
    let p = cmp(CmpOp::Gt, agg(AggFunc::Sum, BaseVar::Volume), Pred::Num(100e6));
    assert_eq!(local_text(p, 4).as_deref(), Ok("sum(volume) > 25000000"));
    // `c < count(..)` is `count(..) > c`.
    let p = cmp(CmpOp::Lt, Pred::Num(50.0), agg(AggFunc::Count, BaseVar::Volume));
    assert_eq!(local_text(p, 2).as_deref(), Ok("count(volume) > 25"));
    // A linear form: sum(a) - 2 * count(b) >= 10 over 5 hosts.
    let l = Pred::Arith(
        ArithOp::Sub,
        Box::new(agg(AggFunc::Sum, BaseVar::Volume)),
        Box::new(Pred::Arith(
            ArithOp::Mul,
            Box::new(Pred::Num(2.0)),
            Box::new(agg(AggFunc::Count, BaseVar::Ttl)),
        )),
    );
    assert_eq!(
        local_text(cmp(CmpOp::Ge, l, Pred::Num(10.0)), 5).as_deref(),
        Ok("sum(volume) - 2 * count(ttl) >= 2")
    );
}

#[test]
fn the_local_trigger_is_host_scoped_and_the_event_stays_network_wide() {
    let ev = event(cmp(
        CmpOp::Gt,
        agg(AggFunc::Sum, BaseVar::Volume),
        Pred::Num(100e6),
    ));
    let s = split(&ev, 4).expect("a sum splits");
    assert_eq!(s.local.scope, Scope::Host, "monitors install only host triggers");
    assert_eq!(s.network().scope, Scope::Network);
    assert_eq!(
        (&s.local.filters, s.local.interval_ns),
        (&ev.filters, ev.interval_ns)
    );
}

#[test]
fn max_min_and_avg_have_their_own_rules() {
    let p = cmp(CmpOp::Gt, agg(AggFunc::Max, BaseVar::Ttl), Pred::Num(60.0));
    assert_eq!(local_text(p, 3).as_deref(), Ok("max(ttl) > 60"));
    let p = cmp(CmpOp::Le, agg(AggFunc::Min, BaseVar::Ttl), Pred::Num(5.0));
    assert_eq!(local_text(p, 3).as_deref(), Ok("min(ttl) <= 5"));
    let p = cmp(CmpOp::Gt, agg(AggFunc::Avg, BaseVar::Volume), Pred::Num(500.0));
    assert_eq!(
        local_text(p, 3).as_deref(),
        Ok("sum(volume) - 500 * sum(volume * 0 + 1) > 0")
    );
}

#[test]
fn and_becomes_or_so_no_host_needs_both_sides() {
    let a = cmp(CmpOp::Gt, agg(AggFunc::Sum, BaseVar::Volume), Pred::Num(100.0));
    let b = cmp(CmpOp::Gt, agg(AggFunc::Max, BaseVar::Ttl), Pred::Num(60.0));
    let p = Pred::And(Box::new(a), Box::new(b));
    assert_eq!(
        local_text(p, 2).as_deref(),
        Ok("sum(volume) > 50 or max(ttl) > 60")
    );
}

#[test]
fn what_cannot_split_is_refused_with_the_reason() {
    let why = |p: Pred| match split(&event(p), 4) {
        Err(ManagerError::NotSplittable { why, .. }) => why,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert!(why(cmp(
        CmpOp::Gt,
        agg(AggFunc::Stddev, BaseVar::Volume),
        Pred::Num(1.0)
    ))
    .contains("stddev"));
    assert!(
        why(cmp(CmpOp::Lt, agg(AggFunc::Max, BaseVar::Ttl), Pred::Num(9.0))).contains("every host's maximum")
    );
    assert!(
        why(cmp(CmpOp::Gt, agg(AggFunc::Min, BaseVar::Ttl), Pred::Num(9.0))).contains("every host's minimum")
    );
    assert!(
        why(cmp(CmpOp::Lt, agg(AggFunc::Sum, BaseVar::Volume), Pred::Num(9.0)))
            .contains("below a positive bound")
    );
    assert!(why(cmp(CmpOp::Eq, agg(AggFunc::Sum, BaseVar::Volume), Pred::Num(9.0))).contains("= and !="));
    let product = Pred::Arith(
        ArithOp::Mul,
        Box::new(agg(AggFunc::Sum, BaseVar::Volume)),
        Box::new(agg(AggFunc::Count, BaseVar::Volume)),
    );
    assert!(why(cmp(CmpOp::Gt, product, Pred::Num(9.0))).contains("product"));
    let not = Pred::Not(Box::new(cmp(
        CmpOp::Gt,
        agg(AggFunc::Sum, BaseVar::Volume),
        Pred::Num(9.0),
    )));
    assert!(why(not).contains("negates"));
    assert_eq!(
        split(
            &event(cmp(CmpOp::Gt, agg(AggFunc::Sum, BaseVar::Volume), Pred::Num(1.0))),
            0
        )
        .err(),
        Some(ManagerError::NoHosts)
    );
    let msg = split(
        &event(cmp(CmpOp::Lt, agg(AggFunc::Sum, BaseVar::Volume), Pred::Num(9.0))),
        2,
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        msg.starts_with("event `spike` cannot be evaluated network-wide: `sum(volume) < 9`"),
        "{msg}"
    );
}

#[test]
fn decide_checks_the_number_of_values() {
    let s = split(
        &event(cmp(
            CmpOp::Gt,
            agg(AggFunc::Sum, BaseVar::Volume),
            Pred::Num(100.0),
        )),
        2,
    )
    .expect("splits");
    assert_eq!(
        s.decide(&[&[1.0, 2.0]]).err(),
        Some(ManagerError::ValueCount { got: 2, want: 1 })
    );
    let (holds, values) = s.decide(&[&[60.0], &[50.0]]).expect("decides");
    assert!(holds);
    assert_eq!(values, vec![("sum(volume)".to_string(), 110.0)]);
}

// ----- property: never a missed event, and the decision is exact ---------

/// A packet: its volume and ttl, each possibly undefined.
type Packet = (Option<i64>, Option<i64>);

fn value(e: &PacketExpr, p: &Packet) -> Option<i64> {
    match e {
        PacketExpr::Int(k) => Some(*k),
        PacketExpr::Var(v) => match v.base {
            BaseVar::Volume => p.0,
            _ => p.1,
        },
        PacketExpr::Arith(ArithOp::Add, l, r) => Some(value(l, p)? + value(r, p)?),
        PacketExpr::Arith(ArithOp::Mul, l, r) => Some(value(l, p)? * value(r, p)?),
        _ => None,
    }
}

/// An aggregate over packets, straight from its definition.
fn aggregate(a: &AggCall, packets: &[Packet]) -> f64 {
    let vals: Vec<f64> = packets
        .iter()
        .filter_map(|p| value(&a.arg, p))
        .map(|v| v as f64)
        .collect();
    match a.func {
        AggFunc::Sum => vals.iter().sum(),
        AggFunc::Count => vals.iter().filter(|v| **v != 0.0).count() as f64,
        AggFunc::Max => vals.iter().copied().fold(f64::NAN, f64::max),
        AggFunc::Min => vals.iter().copied().fold(f64::NAN, f64::min),
        AggFunc::Avg if vals.is_empty() => f64::NAN,
        AggFunc::Avg => vals.iter().sum::<f64>() / vals.len() as f64,
        AggFunc::Stddev => f64::NAN,
    }
}

fn arb_agg() -> impl Strategy<Value = Pred> {
    (
        prop::sample::select(vec![
            AggFunc::Sum,
            AggFunc::Count,
            AggFunc::Max,
            AggFunc::Min,
            AggFunc::Avg,
        ]),
        prop::bool::ANY,
    )
        .prop_map(|(f, v)| agg(f, if v { BaseVar::Volume } else { BaseVar::Ttl }))
}

fn arb_atom() -> impl Strategy<Value = Pred> {
    let op = prop::sample::select(vec![CmpOp::Gt, CmpOp::Ge, CmpOp::Lt, CmpOp::Le]);
    let simple = (op.clone(), arb_agg(), -20i32..200, prop::bool::ANY).prop_map(|(op, a, c, flip)| {
        if flip {
            cmp(op, Pred::Num(f64::from(c)), a)
        } else {
            cmp(op, a, Pred::Num(f64::from(c)))
        }
    });
    let linear = (op, -3i32..4, -20i32..200).prop_map(|(op, k, c)| {
        let l = Pred::Arith(
            ArithOp::Add,
            Box::new(agg(AggFunc::Sum, BaseVar::Volume)),
            Box::new(Pred::Arith(
                ArithOp::Mul,
                Box::new(Pred::Num(f64::from(k))),
                Box::new(agg(AggFunc::Count, BaseVar::Ttl)),
            )),
        );
        cmp(op, l, Pred::Num(f64::from(c)))
    });
    prop_oneof![simple, linear]
}

fn arb_pred() -> impl Strategy<Value = Pred> {
    arb_atom().prop_recursive(2, 4, 2, |inner| {
        (inner.clone(), inner, prop::bool::ANY).prop_map(|(l, r, and)| {
            if and {
                Pred::And(Box::new(l), Box::new(r))
            } else {
                Pred::Or(Box::new(l), Box::new(r))
            }
        })
    })
}

fn arb_packet() -> impl Strategy<Value = Packet> {
    (
        prop::option::weighted(0.85, -5i64..60),
        prop::option::weighted(0.85, 0i64..70),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn a_network_wide_event_is_never_missed_and_decided_exactly(
        pred in arb_pred(),
        hosts in prop::collection::vec(prop::collection::vec(arb_packet(), 0..6), 1..5),
    ) {
        let ev = event(pred);
        let Ok(s) = split(&ev, hosts.len()) else { return Ok(()) };
        let union: Vec<Packet> = hosts.iter().flatten().copied().collect();
        prop_assume!(!union.is_empty());
        let truth = eval(&ev.predicate, &|a: &AggCall| aggregate(a, &union)) != 0.0;
        // Hosts without packets of the group have no group: they never report.
        let seen: Vec<&Vec<Packet>> = hosts.iter().filter(|h| !h.is_empty()).collect();
        let values: Vec<Vec<f64>> = seen
            .iter()
            .map(|h| s.needs.iter().map(|(a, _)| aggregate(a, h)).collect())
            .collect();
        let refs: Vec<&[f64]> = values.iter().map(Vec::as_slice).collect();
        let (decided, net) = s.decide(&refs).expect("decides");
        prop_assert_eq!(decided, truth, "network-wide decision of {}", ev.predicate);
        for (text, v) in &net {
            let a = ev.aggregates().into_iter().find(|a| a.to_string() == *text).expect("listed");
            let want = aggregate(&a, &union);
            prop_assert!(v == &want || (v.is_nan() && want.is_nan()) || (v - want).abs() < 1e-9 * want.abs().max(1.0),
                "{}: {} vs {}", text, v, want);
        }
        if truth {
            let fired = seen.iter().any(|h| {
                eval(&s.local.predicate, &|a: &AggCall| aggregate(a, h)) != 0.0
            });
            prop_assert!(fired, "missed: {} holds network-wide, but no host's {} does", ev.predicate, s.local.predicate);
        }
    }
}
