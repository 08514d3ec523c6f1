//! Random events over the traffic pool of [`crate::pool`].
//!
//! Thresholds are derived from a rough "typical value" carried along with
//! every generated expression, so that predicates fire often but not always
//! on the generated traffic; a predicate that never (or always) fires tests
//! little.

use clarion_lang::spec::{
    AggCall, AggFunc, ArithOp, BaseVar, CmpOp, DrillDown, EventSpec, Filter, Granularity, IpPrefix,
    PacketExpr, PortRange, Pred, PrefixLens, Scope, Var,
};
use clarion_wire::proto;
use proptest::prelude::*;
use proptest::sample::select;

use crate::pool;

const MS: u64 = 1_000_000;

/// Event intervals: multiples of 1 ms whose mixtures give varied gcd epochs.
pub const INTERVALS_MS: [u64; 9] = [1, 2, 3, 5, 10, 20, 25, 50, 100];

/// Name stems: their order differs from the generation order, so sorting by name is exercised.
const NAMES: [&str; 5] = ["heavy", "a", "zz", "Loss", "scan"];

/// Up to `max` events (at least one when `max > 0`) with unique names, over
/// every variable of the language, in aggregates and (the state values and
/// `X_lastepoch`) bare.
pub fn arb_events(max: usize) -> impl Strategy<Value = Vec<EventSpec>> {
    let min = usize::from(max > 0);
    prop::collection::vec((select(&NAMES[..]), arb_event_body()), min..=max).prop_map(|bodies| {
        bodies
            .into_iter()
            .enumerate()
            // The index keeps names unique; the word varies their sort order against event order.
            .map(|(i, (word, body))| spec(&format!("{word}{i}"), body))
            .collect()
    })
}

type Body = (Vec<Filter>, Pred, Granularity, u64);

/// Drill-downs: a parent event installing one or two `on demand` events
/// (`t1`, and `t2` either from the parent or from `t1`: a chain), each
/// narrowed on some of its parent's group fields (addresses at most as
/// long as the parent keeps them), with or without a duration. The parent
/// may read TCP state; the installed events may not (the checker refuses it).
pub fn arb_drill_down_events() -> impl Strategy<Value = Vec<EventSpec>> {
    let child = || {
        (
            arb_filters(),
            arb_pred(),
            arb_granularity(),
            select(&INTERVALS_MS[..]).prop_map(|ms| ms * MS),
        )
            .prop_filter("installed events read no TCP state", |(f, p, g, i)| {
                !spec("t", (f.clone(), p.clone(), *g, *i)).needs_connection_state()
            })
    };
    let link = || (arb_narrowing(), prop::option::of(1u64..=4));
    (arb_event_body(), child(), child(), link(), link(), 0u8..3).prop_map(
        |(parent, c1, c2, (on1, k1), (on2, k2), shape)| {
            let mut t2 = spec("t2", c2);
            t2.on_demand = true;
            let mut t1 = spec("t1", c1);
            t1.on_demand = true;
            let mut p = spec("p0", parent);
            // shape 0: p → t1; 1: p → t1 and p → t2; 2: p → t1 → t2.
            if shape == 2 {
                t1.drill_downs.push(drill(&t1, &t2, on2, k2));
            }
            p.drill_downs.push(drill(&p, &t1, on1, k1));
            if shape == 1 {
                p.drill_downs.push(drill(&p, &t2, on2, k2));
            }
            vec![p, t1, t2]
        },
    )
}

/// A host event: monitors and the reference run host triggers (the
/// network-wide split is the manager's, tested there).
fn spec(name: &str, (filters, predicate, granularity, interval_ns): Body) -> EventSpec {
    EventSpec {
        capture: None,
        priority: None,
        name: name.into(),
        filters,
        predicate,
        granularity,
        interval_ns,
        scope: Scope::Host,
        drill_downs: Vec::new(),
        on_demand: false,
    }
}

/// Which of the parent's group fields narrow (one flag per field) and how
/// short the addresses get (IPv4, IPv6 lengths, capped at the parent's).
type Narrowing = ([bool; 7], u8, u8);

fn arb_narrowing() -> impl Strategy<Value = Narrowing> {
    (
        prop::array::uniform7(prop::bool::weighted(0.5)),
        prop_oneof![select(&[8u8, 16, 24, 32][..]), 0u8..=32],
        prop_oneof![select(&[32u8, 64, 128][..]), 0u8..=128],
    )
}

fn drill(parent: &EventSpec, child: &EventSpec, (pick, v4, v6): Narrowing, k: Option<u64>) -> DrillDown {
    let g = parent.granularity;
    let lens = |l: Option<PrefixLens>, on: bool| {
        l.filter(|_| on).map(|l| PrefixLens {
            v4: v4.min(l.v4),
            v6: v6.min(l.v6),
        })
    };
    DrillDown {
        event: Box::new(child.clone()),
        on: Granularity {
            src_ip: lens(g.src_ip, pick[0]),
            dst_ip: lens(g.dst_ip, pick[1]),
            src_port: g.src_port && pick[2],
            dst_port: g.dst_port && pick[3],
            proto: g.proto && pick[4],
            vlan: g.vlan && pick[5],
            vni: g.vni && pick[6],
        },
        duration_ns: k.map(|k| k * child.interval_ns),
    }
}

/// Half the events are about TCP connections: their predicates read the
/// connection-state variables (in aggregates, bare, `_lastepoch`), their
/// filters often select TCP, their intervals are short.
fn arb_event_body() -> impl Strategy<Value = Body> {
    let classic = (
        arb_filters(),
        arb_pred(),
        arb_granularity(),
        select(&INTERVALS_MS[..]).prop_map(|ms| ms * MS),
    );
    let tcp = (
        arb_tcp_filters(),
        arb_tcp_pred(),
        arb_tcp_granularity(),
        select(&TCP_INTERVALS_MS[..]).prop_map(|ms| ms * MS),
    );
    prop_oneof![1 => classic, 1 => tcp]
}

/// Intervals of TCP events: mostly short, so that a connection spans several windows.
const TCP_INTERVALS_MS: [u64; 8] = [1, 2, 3, 5, 10, 10, 20, 25];

// ---------------------------------------------------------------- filters

/// One to three filters; each field present with some probability, often none (match-all).
pub fn arb_filters() -> impl Strategy<Value = Vec<Filter>> {
    prop_oneof![
        1 => Just(vec![Filter::default()]),
        4 => prop::collection::vec(arb_filter(), 1..=3),
    ]
}

fn sometimes<T: std::fmt::Debug + Clone + 'static>(
    p: f64,
    s: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Option<T>> {
    prop::option::weighted(p, s).boxed()
}

fn arb_filter() -> impl Strategy<Value = Filter> {
    (
        sometimes(0.3, arb_prefix()),
        sometimes(0.3, arb_prefix()),
        sometimes(0.2, arb_port_range()),
        sometimes(0.25, arb_port_range()),
        sometimes(0.25, select(&pool::PROTOS[..])),
        sometimes(0.1, select(&pool::VLANS[..])),
        sometimes(0.1, select(&pool::VNIS[..])),
    )
        .prop_map(|(src_ip, dst_ip, src_port, dst_port, proto, vlan, vni)| Filter {
            src_ip,
            dst_ip,
            src_port,
            dst_port,
            proto,
            vlan,
            vni,
        })
}

fn tcp_only(f: Filter) -> Filter {
    Filter {
        proto: Some(proto::TCP),
        ..f
    }
}

/// Filters of TCP events: often just `proto = tcp`; sometimes one direction
/// of the connections only (a port on one side), whose reverse flow the
/// event does not match but whose acks still count; sometimes anything.
fn arb_tcp_filters() -> impl Strategy<Value = Vec<Filter>> {
    let port = select(&pool::PORTS[..]).prop_map(|p| PortRange { lo: p, hi: p });
    let one_side = (port, any::<bool>()).prop_map(|(p, src)| {
        vec![tcp_only(if src {
            Filter {
                src_port: Some(p),
                ..Filter::default()
            }
        } else {
            Filter {
                dst_port: Some(p),
                ..Filter::default()
            }
        })]
    });
    prop_oneof![
        4 => Just(vec![tcp_only(Filter::default())]),
        2 => one_side,
        2 => prop::collection::vec(arb_filter().prop_map(tcp_only), 1..=2),
        1 => arb_filters(),
    ]
}

/// A prefix of a pool address, so that it matches some of the traffic.
fn arb_prefix() -> impl Strategy<Value = IpPrefix> {
    let v4 = (
        select(&pool::V4[..]),
        prop_oneof![select(&[0u8, 8, 16, 24, 31, 32][..]), 0u8..=32],
    );
    let v6 = (
        select(&pool::V6[..]),
        prop_oneof![select(&[0u8, 16, 32, 48, 64, 127, 128][..]), 0u8..=128],
    );
    prop_oneof![
        v4.prop_map(|(a, len)| pool::prefix(a.into(), len)),
        v6.prop_map(|(a, len)| pool::prefix(a.into(), len)),
    ]
}

fn arb_port_range() -> impl Strategy<Value = PortRange> {
    let around = (
        select(&pool::PORTS[..]),
        select(&[0u16, 1, 100, 40_000][..]),
        0u16..=2,
    );
    prop_oneof![
        3 => select(&pool::PORTS[..]).prop_map(|p| PortRange { lo: p, hi: p }),
        2 => around.prop_map(|(p, width, skew)| PortRange {
            lo: p.saturating_sub(width / (skew + 1)),
            hi: p.saturating_add(width),
        }),
        1 => Just(PortRange { lo: 0, hi: u16::MAX }),
        // A range containing no pool port.
        1 => Just(PortRange { lo: 1000, hi: 1010 }),
    ]
}

// ---------------------------------------------------------------- granularity

pub fn arb_granularity() -> impl Strategy<Value = Granularity> {
    let lens = prop_oneof![
        2 => Just(PrefixLens::FULL),
        1 => select(&[0u8, 8, 16, 24, 32][..]).prop_map(|l| PrefixLens { v4: l, v6: l }),
        2 => (
            prop_oneof![select(&[0u8, 8, 16, 24, 32][..]), 0u8..=32],
            prop_oneof![select(&[0u8, 32, 48, 64, 128][..]), 0u8..=128],
        )
            .prop_map(|(v4, v6)| PrefixLens { v4, v6 }),
    ]
    .boxed();
    let any = (
        sometimes(0.4, lens.clone()),
        sometimes(0.4, lens),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(src_ip, dst_ip, src_port, dst_port, proto, vlan, vni)| Granularity {
                src_ip,
                dst_ip,
                src_port,
                dst_port,
                proto,
                vlan,
                vni,
            },
        );
    prop_oneof![
        1 => Just(Granularity::default()),
        2 => Just(Granularity::FIVE_TUPLE),
        4 => any,
    ]
}

/// Granularities of TCP events: often the 5-tuple (one direction of one connection).
fn arb_tcp_granularity() -> impl Strategy<Value = Granularity> {
    prop_oneof![
        3 => Just(Granularity::FIVE_TUPLE),
        1 => Just(Granularity::default()),
        3 => arb_granularity(),
    ]
}

// ---------------------------------------------------------------- per-packet expressions

/// An expression with a rough typical (positive) magnitude of its value on one packet.
type Typed = (PacketExpr, f64);

fn var(base: BaseVar) -> PacketExpr {
    PacketExpr::Var(Var {
        base,
        last_epoch: false,
    })
}

fn bx<T>(t: T) -> Box<T> {
    Box::new(t)
}

/// The implemented variables with a typical value on the generated traffic.
const VARS: [(BaseVar, f64); 7] = [
    (BaseVar::Packets, 1.0),
    (BaseVar::Size, 500.0),
    (BaseVar::Volume, 400.0),
    (BaseVar::Ttl, 64.0),
    (BaseVar::Ecn, 1.0),
    (BaseVar::TcpFlags, 16.0),
    (BaseVar::Rwnd, 100_000.0),
];

/// The TCP variables with a typical value on the generated connections
/// (`rtt` in nanoseconds; `seq`, `ack`, `dup` relative to the ISN).
const TCP_VARS: [(BaseVar, f64); 6] = [
    (BaseVar::IsLost, 0.1),
    (BaseVar::IsBurst, 0.5),
    (BaseVar::Rtt, 2_000_000.0),
    (BaseVar::Seq, 30_000.0),
    (BaseVar::Ack, 20_000.0),
    (BaseVar::Dup, 1_000.0),
];

/// Every variable with its typical value.
fn typical(base: BaseVar) -> f64 {
    VARS.iter()
        .chain(&TCP_VARS)
        .find(|(b, _)| *b == base)
        .map_or(1.0, |(_, t)| *t)
}

fn arb_leaf() -> BoxedStrategy<Typed> {
    prop_oneof![
        5 => select(&VARS[..]).prop_map(|(b, t)| (var(b), t)),
        1 => select(&TCP_VARS[..]).prop_map(|(b, t)| (var(b), t)),
        1 => (0i64..=10).prop_map(|c| (PacketExpr::Int(c), c as f64)),
    ]
    .boxed()
}

fn arb_tcp_leaf() -> BoxedStrategy<Typed> {
    prop_oneof![
        6 => select(&TCP_VARS[..]).prop_map(|(b, t)| (var(b), t)),
        2 => select(&VARS[..]).prop_map(|(b, t)| (var(b), t)),
        1 => (0i64..=10).prop_map(|c| (PacketExpr::Int(c), c as f64)),
    ]
    .boxed()
}

/// A factor small enough that products never approach i64 (or the i128 of stddev) limits.
fn arb_small_factor() -> BoxedStrategy<Typed> {
    prop_oneof![
        3 => (0i64..=10).prop_map(|c| (PacketExpr::Int(c), c as f64)),
        1 => Just((var(BaseVar::Ecn), 1.0)),
        1 => Just((var(BaseVar::Packets), 1.0)),
        1 => Just((var(BaseVar::Ttl), 64.0)),
    ]
    .boxed()
}

fn cmp_op() -> impl Strategy<Value = CmpOp> {
    select(&[CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge, CmpOp::Eq, CmpOp::Ne][..])
}

/// A per-packet expression of nesting depth at most `depth`.
pub fn arb_expr(depth: u32) -> BoxedStrategy<PacketExpr> {
    arb_typed_expr(depth).prop_map(|(e, _)| e).boxed()
}

fn arb_typed_expr(depth: u32) -> BoxedStrategy<Typed> {
    typed_expr(depth, arb_leaf)
}

fn typed_expr(depth: u32, leaf: fn() -> BoxedStrategy<Typed>) -> BoxedStrategy<Typed> {
    if depth == 0 {
        return leaf();
    }
    let sub = typed_expr(depth - 1, leaf);
    let factor = select(&[0.0, 0.5, 1.0, 1.5][..]);
    prop_oneof![
        6 => leaf(),
        1 => (sub.clone(), sub.clone()).prop_map(|((l, a), (r, b))| {
            (PacketExpr::Arith(ArithOp::Add, bx(l), bx(r)), a + b)
        }),
        1 => (sub.clone(), sub.clone()).prop_map(|((l, a), (r, b))| {
            (PacketExpr::Arith(ArithOp::Sub, bx(l), bx(r)), (a - b).abs().max(1.0))
        }),
        2 => (sub.clone(), arb_small_factor(), any::<bool>()).prop_map(|((l, a), (r, b), swap)| {
            let (l, r) = if swap { (r, l) } else { (l, r) };
            (PacketExpr::Arith(ArithOp::Mul, bx(l), bx(r)), a * b)
        }),
        1 => sub.clone().prop_map(|(e, t)| (PacketExpr::Neg(bx(e)), t)),
        // Comparisons against a constant near the operand's typical value: 0/1 results.
        3 => (cmp_op(), sub.clone(), factor).prop_map(|(op, (e, t), f)| {
            let c = PacketExpr::Int((t * f).round() as i64);
            (PacketExpr::Cmp(op, bx(e), bx(c)), 0.5)
        }),
        1 => (sub.clone(), sub.clone()).prop_map(|((l, _), (r, _))| {
            (PacketExpr::And(bx(l), bx(r)), 0.5)
        }),
        1 => (sub.clone(), sub.clone()).prop_map(|((l, _), (r, _))| {
            (PacketExpr::Or(bx(l), bx(r)), 0.5)
        }),
        1 => sub.prop_map(|(e, _)| (PacketExpr::Not(bx(e)), 0.5)),
    ]
    .boxed()
}

fn pvar(base: BaseVar) -> Box<PacketExpr> {
    bx(var(base))
}

fn int(c: i64) -> Box<PacketExpr> {
    bx(PacketExpr::Int(c))
}

/// RTT thresholds in nanoseconds, around the generated round trips.
const RTT_NS: [i64; 6] = [0, 100_000, 500_000, 1_000_000, 2_000_000, 5_000_000];

/// Per-packet expressions about TCP connections: the variables alone, the
/// combinations events are written with (`is_lost and is_burst`, `rtt >
/// 500000`, `seq - ack`, lost bytes), and random compositions of them.
fn arb_tcp_typed_expr() -> BoxedStrategy<Typed> {
    use BaseVar::*;
    use PacketExpr as E;
    let fixed: Vec<Typed> = vec![
        (E::And(pvar(IsLost), pvar(IsBurst)), 0.05),
        (E::Or(pvar(IsLost), bx(E::Not(pvar(IsBurst)))), 0.5),
        (E::Not(pvar(IsBurst)), 0.5),
        (E::Arith(ArithOp::Sub, pvar(Seq), pvar(Ack)), 5_000.0),
        (E::Cmp(CmpOp::Gt, pvar(Dup), int(0)), 0.2),
        (E::Cmp(CmpOp::Gt, pvar(Seq), pvar(Ack)), 0.5),
        (E::Arith(ArithOp::Mul, pvar(IsLost), pvar(Volume)), 100.0),
        (E::Arith(ArithOp::Mul, pvar(Size), pvar(IsLost)), 100.0),
        (E::Arith(ArithOp::Mul, pvar(IsBurst), pvar(Volume)), 200.0),
        (
            E::And(pvar(IsLost), bx(E::Cmp(CmpOp::Gt, pvar(Volume), int(0)))),
            0.1,
        ),
        (E::Arith(ArithOp::Add, pvar(Seq), pvar(Dup)), 30_000.0),
        (E::Arith(ArithOp::Sub, pvar(Rtt), int(1_000_000)), 1_000_000.0),
        // Undefined everywhere: no packet has both.
        (E::Arith(ArithOp::Add, pvar(Rtt), pvar(Volume)), 1.0),
        (E::Neg(pvar(Rtt)), 2_000_000.0),
    ];
    let rtt_cmp = (cmp_op(), select(&RTT_NS[..])).prop_map(|(op, c)| (E::Cmp(op, pvar(Rtt), int(c)), 0.5));
    prop_oneof![
        6 => select(&TCP_VARS[..]).prop_map(|(b, t)| (var(b), t)),
        4 => select(fixed),
        2 => rtt_cmp,
        3 => typed_expr(2, arb_tcp_leaf),
    ]
    .boxed()
}

// ---------------------------------------------------------------- predicates

/// A predicate expression with a rough typical value for one group in one window.
type TypedPred = (Pred, f64);

/// Packets per group and window the thresholds assume.
const GROUP_PACKETS: f64 = 4.0;

fn arb_agg() -> BoxedStrategy<TypedPred> {
    agg_over(arb_typed_expr(2))
}

fn arb_tcp_agg() -> BoxedStrategy<TypedPred> {
    agg_over(arb_tcp_typed_expr())
}

fn agg_over(arg: BoxedStrategy<Typed>) -> BoxedStrategy<TypedPred> {
    (select(&AggFunc::ALL[..]), arg)
        .prop_map(|(func, (arg, t))| {
            let typical = match func {
                AggFunc::Sum => t * GROUP_PACKETS,
                AggFunc::Count => GROUP_PACKETS / 2.0,
                AggFunc::Min | AggFunc::Max | AggFunc::Avg => t,
                AggFunc::Stddev => t / 3.0,
            };
            (Pred::Agg(AggCall { func, arg }), typical)
        })
        .boxed()
}

fn packets_sum() -> Pred {
    Pred::Agg(AggCall {
        func: AggFunc::Sum,
        arg: var(BaseVar::Packets),
    })
}

/// Numeric predicate expressions over aggregates (before comparison).
fn arb_numeric() -> BoxedStrategy<TypedPred> {
    numeric_over(arb_agg())
}

fn numeric_over(agg: BoxedStrategy<TypedPred>) -> BoxedStrategy<TypedPred> {
    let num = select(&[0.5, 1.0, 2.0, 3.0, 10.0][..]).prop_map(|x| (Pred::Num(x), x));
    prop_oneof![
        6 => agg.clone(),
        1 => (agg.clone(), agg.clone()).prop_map(|((l, a), (r, b))| {
            (Pred::Arith(ArithOp::Add, bx(l), bx(r)), a + b)
        }),
        1 => (agg.clone(), agg.clone()).prop_map(|((l, a), (r, b))| {
            (Pred::Arith(ArithOp::Sub, bx(l), bx(r)), (a - b).abs())
        }),
        1 => (agg.clone(), num.clone()).prop_map(|((l, a), (r, b))| {
            (Pred::Arith(ArithOp::Mul, bx(l), bx(r)), a * b)
        }),
        // Division can hit zero: the predicate must then be undefined, not infinite.
        1 => (agg.clone(), agg.clone()).prop_map(|((l, a), (r, b))| {
            (Pred::Arith(ArithOp::Div, bx(l), bx(r)), a / b.max(1.0))
        }),
        1 => (agg, num).prop_map(|((l, a), (r, b))| (Pred::Arith(ArithOp::Div, bx(l), bx(r)), a / b)),
    ]
    .boxed()
}

/// A percentage in the lowered form: `sum(e)` or `count(e)` over `sum(packets)`, against a ratio.
fn arb_percentage() -> BoxedStrategy<Pred> {
    percentage_over(arb_expr(2))
}

/// Percentages over TCP expressions: `sum(is_lost) > 10%`, `count(rtt > 1ms) >= 50%`
/// (which counts RTT samples against packets, so may exceed 100%).
fn arb_tcp_percentage() -> BoxedStrategy<Pred> {
    percentage_over(arb_tcp_typed_expr().prop_map(|(e, _)| e).boxed())
}

fn percentage_over(arg: BoxedStrategy<PacketExpr>) -> BoxedStrategy<Pred> {
    let ratio = select(&[0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0][..]);
    (select(&[AggFunc::Sum, AggFunc::Count][..]), arg, cmp_op(), ratio)
        .prop_map(|(func, arg, op, r)| {
            let share = Pred::Arith(
                ArithOp::Div,
                bx(Pred::Agg(AggCall { func, arg })),
                bx(packets_sum()),
            );
            Pred::Cmp(op, bx(share), bx(Pred::Num(r)))
        })
        .boxed()
}

fn arb_atom() -> BoxedStrategy<Pred> {
    let factor = select(&[0.0, 0.3, 0.8, 1.0, 1.5, 3.0][..]);
    prop_oneof![
        6 => (cmp_op(), arb_numeric(), factor, any::<bool>()).prop_map(|(op, (l, t), f, round)| {
            let x = t * f;
            // Rounded thresholds give `==` a chance to hold on integer aggregates.
            let x = if round { x.round() } else { x };
            Pred::Cmp(op, bx(l), bx(Pred::Num(x)))
        }),
        2 => arb_percentage(),
        // Two aggregates compared directly.
        1 => (cmp_op(), arb_agg(), arb_agg()).prop_map(|(op, (l, _), (r, _))| Pred::Cmp(op, bx(l), bx(r))),
        // A bare aggregate is true when non-zero and defined.
        1 => arb_agg().prop_map(|(p, _)| p),
        1 => arb_numeric().prop_map(|(p, _)| Pred::Neg(bx(p))),
    ]
    .boxed()
}

fn state(base: BaseVar, last_epoch: bool) -> Pred {
    Pred::State(Var { base, last_epoch })
}

fn sub(l: Pred, r: Pred) -> Pred {
    Pred::Arith(ArithOp::Sub, bx(l), bx(r))
}

/// A value outside aggregates: `seq`, `ack`, `dup`, or any `X_lastepoch`.
fn arb_state_var() -> BoxedStrategy<(Pred, f64)> {
    let bare = (
        select(&[BaseVar::Seq, BaseVar::Ack, BaseVar::Dup][..]),
        prop::bool::weighted(0.3),
    );
    prop_oneof![
        3 => bare.prop_map(|(b, le)| (state(b, le), typical(b))),
        1 => select(&BaseVar::ALL[..]).prop_map(|b| (state(b, true), typical(b))),
    ]
    .boxed()
}

/// Predicate atoms over values outside aggregates.
fn arb_state_atom() -> BoxedStrategy<Pred> {
    use BaseVar::*;
    let factor = select(&[0.0, 0.3, 1.0, 3.0][..]);
    let ratio = select(&[0.0, 0.25, 0.5, 0.75, 1.0][..]);
    let num = |x: f64| bx(Pred::Num(x));
    prop_oneof![
        3 => (cmp_op(), arb_state_var(), factor).prop_map(move |(op, (v, t), f)| {
            Pred::Cmp(op, bx(v), num((t * f).round()))
        }),
        // Trumpet's congestion event: less than half of what was outstanding got acked.
        2 => (ratio, cmp_op()).prop_map(move |(r, op)| {
            let acked = Pred::Arith(
                ArithOp::Add,
                bx(sub(state(Ack, false), state(Ack, true))),
                bx(state(Dup, false)),
            );
            let outstanding = sub(state(Seq, true), state(Ack, true));
            let share = Pred::Arith(ArithOp::Div, bx(acked), bx(outstanding));
            Pred::Cmp(op, bx(sub(Pred::Num(1.0), share)), num(r))
        }),
        // Outstanding bytes now; progress since the previous window.
        2 => (cmp_op(), select(&[(Seq, Ack, false), (Seq, Seq, true), (Ack, Ack, true), (Dup, Dup, true)][..]),
              select(&[0.0, 1.0, 1000.0, 10_000.0][..]))
            .prop_map(move |(op, (a, b, le), c)| Pred::Cmp(op, bx(sub(state(a, false), state(b, le))), num(c))),
        // Defined or not: `ack_lastepoch >= 0`.
        1 => select(&BaseVar::ALL[..]).prop_map(move |b| Pred::Cmp(CmpOp::Ge, bx(state(b, true)), num(0.0))),
        // Bare: true when non-zero and defined.
        1 => arb_state_var().prop_map(|(v, _)| v),
        // Against an aggregate of this window: `max(ttl) != ttl_lastepoch`, `sum(volume) > seq - seq_lastepoch`.
        2 => (cmp_op(), select(&[AggFunc::Max, AggFunc::Min, AggFunc::Avg][..]), select(&BaseVar::ALL[..]))
            .prop_map(|(op, func, b)| Pred::Cmp(op, bx(Pred::Agg(AggCall { func, arg: var(b) })), bx(state(b, true)))),
        1 => cmp_op().prop_map(|op| Pred::Cmp(
            op,
            bx(Pred::Agg(AggCall { func: AggFunc::Sum, arg: var(Volume) })),
            bx(sub(state(Seq, false), state(Seq, true))),
        )),
    ]
    .boxed()
}

/// Predicate atoms of TCP events.
fn arb_tcp_atom() -> BoxedStrategy<Pred> {
    let factor = select(&[0.0, 0.3, 0.8, 1.0, 1.5, 3.0][..]);
    prop_oneof![
        5 => (cmp_op(), numeric_over(arb_tcp_agg()), factor, any::<bool>()).prop_map(|(op, (l, t), f, round)| {
            let x = t * f;
            let x = if round { x.round() } else { x };
            Pred::Cmp(op, bx(l), bx(Pred::Num(x)))
        }),
        // `max(rtt) > 2ms` (times are nanoseconds).
        1 => (cmp_op(), select(&[AggFunc::Max, AggFunc::Min, AggFunc::Avg][..]), select(&RTT_NS[..])).prop_map(|(op, func, c)| {
            Pred::Cmp(op, bx(Pred::Agg(AggCall { func, arg: var(BaseVar::Rtt) })), bx(Pred::Num(c as f64)))
        }),
        2 => arb_tcp_percentage(),
        4 => arb_state_atom(),
        1 => (cmp_op(), arb_tcp_agg(), arb_agg()).prop_map(|(op, (l, _), (r, _))| Pred::Cmp(op, bx(l), bx(r))),
        1 => arb_tcp_agg().prop_map(|(p, _)| p),
        2 => arb_atom(),
    ]
    .boxed()
}

/// A predicate of a TCP event: TCP atoms combined with `and`, `or`, `not`.
pub fn arb_tcp_pred() -> BoxedStrategy<Pred> {
    combine(arb_tcp_atom())
}

/// A predicate: atoms combined with `and`, `or`, `not` (two levels at most).
pub fn arb_pred() -> BoxedStrategy<Pred> {
    combine(arb_atom())
}

fn combine(atom: BoxedStrategy<Pred>) -> BoxedStrategy<Pred> {
    let level1 = prop_oneof![
        4 => atom.clone(),
        1 => (atom.clone(), atom.clone()).prop_map(|(l, r)| Pred::And(bx(l), bx(r))),
        1 => (atom.clone(), atom.clone()).prop_map(|(l, r)| Pred::Or(bx(l), bx(r))),
        1 => atom.prop_map(|p| Pred::Not(bx(p))),
    ]
    .boxed();
    prop_oneof![
        4 => level1.clone(),
        1 => (level1.clone(), level1.clone()).prop_map(|(l, r)| Pred::Or(bx(l), bx(r))),
        1 => (level1.clone(), level1).prop_map(|(l, r)| Pred::And(bx(l), bx(r))),
    ]
    .boxed()
}
