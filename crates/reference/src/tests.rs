//! Hand-computed cases: each expected number was worked out on paper from docs/semantics.md.

use super::*;
use clarion_lang::spec::Scope;
use clarion_wire::TcpInfo;

const MS: u64 = 1_000_000;
/// An aligned base time (a multiple of every interval used here).
const T0: u64 = 1_700_000_000_000_000_000;

// ---------------------------------------------------------------- builders

fn ip(s: &str) -> IpAddr {
    s.parse().expect("test address")
}

fn rec(ts: u64, key: FlowKey, size: u32, volume: u32) -> PacketRecord {
    PacketRecord {
        ts_ns: ts,
        key,
        size,
        volume,
        ttl: 64,
        ecn: 0,
        is_later_fragment: false,
        tcp: None,
        captured_len: size,
    }
}

fn udp(ts: u64, src: &str, dst: &str, sport: u16, dport: u16, size: u32) -> Input {
    let key = FlowKey::new(ip(src), ip(dst), proto::UDP, Some((sport, dport)), None);
    Input::Packet(rec(ts, key, size, size.saturating_sub(28)))
}

fn tcp_rec(ts: u64, key: FlowKey, flags: u8, window: u16, wscale: Option<u8>) -> PacketRecord {
    PacketRecord {
        tcp: Some(TcpInfo {
            flags,
            window,
            wscale,
            ..TcpInfo::default()
        }),
        ..rec(ts, key, 40, 0)
    }
}

fn tcp_key(src: &str, dst: &str, sport: u16, dport: u16) -> FlowKey {
    FlowKey::new(ip(src), ip(dst), proto::TCP, Some((sport, dport)), None)
}

fn icmp(ts: u64, src: &str, dst: &str, size: u32) -> Input {
    let p = if ip(src).is_ipv4() {
        proto::ICMP
    } else {
        proto::ICMPV6
    };
    let key = FlowKey::new(ip(src), ip(dst), p, None, None);
    Input::Packet(rec(ts, key, size, size.saturating_sub(28)))
}

fn vlan_udp(ts: u64, src: &str, dst: &str, vlan: u16, size: u32) -> Input {
    let key = FlowKey::new(ip(src), ip(dst), proto::UDP, Some((1000, 53)), Some(vlan));
    Input::Packet(rec(ts, key, size, size.saturating_sub(28)))
}

fn var(b: BaseVar) -> PacketExpr {
    PacketExpr::Var(Var {
        base: b,
        last_epoch: false,
    })
}

fn int(n: i64) -> PacketExpr {
    PacketExpr::Int(n)
}

fn bx<T>(t: T) -> Box<T> {
    Box::new(t)
}

fn call(func: AggFunc, arg: PacketExpr) -> AggCall {
    AggCall { func, arg }
}

fn agg(func: AggFunc, arg: PacketExpr) -> Pred {
    Pred::Agg(call(func, arg))
}

fn cmp(op: CmpOp, l: Pred, r: Pred) -> Pred {
    Pred::Cmp(op, bx(l), bx(r))
}

fn num(x: f64) -> Pred {
    Pred::Num(x)
}

fn or(l: Pred, r: Pred) -> Pred {
    Pred::Or(bx(l), bx(r))
}

fn and(l: Pred, r: Pred) -> Pred {
    Pred::And(bx(l), bx(r))
}

/// `sum(packets) > 0`: fires for every group that exists.
fn always() -> Pred {
    cmp(CmpOp::Gt, agg(AggFunc::Sum, var(BaseVar::Packets)), num(0.0))
}

fn event(name: &str, filters: Vec<Filter>, predicate: Pred, granularity: Granularity, ms: u64) -> EventSpec {
    EventSpec {
        capture: None,
        priority: None,
        name: name.into(),
        filters,
        predicate,
        granularity,
        interval_ns: ms * MS,
        scope: Scope::Host,
        drill_downs: Vec::new(),
        on_demand: false,
    }
}

fn all() -> Vec<Filter> {
    vec![Filter::default()]
}

fn no_group() -> Granularity {
    Granularity::default()
}

fn run(events: &[EventSpec], inputs: &[Input]) -> Vec<Report> {
    evaluate(events, inputs, &Config::default())
}

fn value(r: &Report, key: &str) -> f64 {
    r.values
        .iter()
        .find(|(k, _)| **k == *key)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no value {key} in {:?}", r.values))
}

fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

// ---------------------------------------------------------------- aggregates

/// Three UDP packets of sizes 100, 200, 600 in one window, one group.
fn three_sizes() -> Vec<Input> {
    vec![
        udp(T0 + MS, "10.0.0.1", "10.0.0.2", 1000, 53, 100),
        udp(T0 + 2 * MS, "10.0.0.1", "10.0.0.2", 1000, 53, 200),
        udp(T0 + 3 * MS, "10.0.0.1", "10.0.0.2", 1000, 53, 600),
    ]
}

#[test]
fn every_aggregate_by_hand() {
    let size = || var(BaseVar::Size);
    let big = PacketExpr::Cmp(CmpOp::Gt, bx(size()), bx(int(150)));
    // Or-chain so that every aggregate is in the predicate (and so in the values).
    let pred = or(
        or(
            or(agg(AggFunc::Sum, size()), agg(AggFunc::Count, big.clone())),
            or(agg(AggFunc::Min, size()), agg(AggFunc::Max, size())),
        ),
        or(agg(AggFunc::Avg, size()), agg(AggFunc::Stddev, size())),
    );
    let ev = event("e", all(), pred, no_group(), 10);
    let out = run(&[ev], &three_sizes());
    assert_eq!(out.len(), 1);
    let r = &out[0];
    let keys: Vec<&str> = r.values.iter().map(|(k, _)| &**k).collect();
    assert_eq!(keys[0], "sum(size)");
    assert_eq!(keys[2], "min(size)");
    assert_eq!(keys[3], "max(size)");
    assert_eq!(keys[4], "avg(size)");
    assert_eq!(keys[5], "stddev(size)");
    assert_eq!(keys[1], call(AggFunc::Count, big).to_string());
    assert_eq!(value(r, "sum(size)"), 900.0);
    assert_eq!(r.values[1].1, 2.0);
    assert_eq!(value(r, "min(size)"), 100.0);
    assert_eq!(value(r, "max(size)"), 600.0);
    assert_eq!(value(r, "avg(size)"), 300.0);
    // N = 3·(100² + 200² + 600²) − 900² = 1_230_000 − 810_000 = 420_000; stddev = sqrt(N / 9).
    assert!(same(value(r, "stddev(size)"), (420_000f64 / 9.0).sqrt()));
    assert_eq!(
        r.window,
        Window {
            start_ns: T0,
            end_ns: T0 + 10 * MS
        }
    );
    assert_eq!(r.group, GroupKey::default());
}

#[test]
fn values_are_deduplicated_in_first_use_order() {
    let s = || agg(AggFunc::Sum, var(BaseVar::Size));
    let m = || agg(AggFunc::Max, var(BaseVar::Ttl));
    let pred = and(cmp(CmpOp::Gt, m(), s()), or(cmp(CmpOp::Lt, s(), num(1.0)), m()));
    let out = run(&[event("e", all(), pred, no_group(), 10)], &three_sizes());
    // max(ttl) = 64 is not > 900: nothing fires.
    assert!(out.is_empty());
    let pred = or(cmp(CmpOp::Lt, m(), s()), or(s(), m()));
    let out = run(&[event("e", all(), pred, no_group(), 10)], &three_sizes());
    let keys: Vec<&str> = out[0].values.iter().map(|(k, _)| &**k).collect();
    assert_eq!(keys, ["max(ttl)", "sum(size)"]);
}

#[test]
fn avg_is_sum_over_n_in_f64() {
    // 100 + 200 + 201 = 501; 501 / 3 = 167 exactly; and 1/3-style rounding for 100 + 101 + 101.
    let inputs = vec![
        udp(T0, "10.0.0.1", "10.0.0.2", 1, 2, 100),
        udp(T0 + 1, "10.0.0.1", "10.0.0.2", 1, 2, 101),
        udp(T0 + 2, "10.0.0.1", "10.0.0.2", 1, 2, 101),
    ];
    let out = run(
        &[event(
            "e",
            all(),
            agg(AggFunc::Avg, var(BaseVar::Size)),
            no_group(),
            1,
        )],
        &inputs,
    );
    assert!(same(value(&out[0], "avg(size)"), 302.0 / 3.0));
}

#[test]
fn stddev_edge_cases() {
    // One value, identical values and values at the i64 limit all have deviation 0.
    let one = vec![udp(T0, "10.0.0.1", "10.0.0.2", 1, 2, 1500)];
    let sd = || agg(AggFunc::Stddev, var(BaseVar::Size));
    let pred = cmp(CmpOp::Ge, sd(), num(0.0));
    let out = run(&[event("e", all(), pred.clone(), no_group(), 1)], &one);
    assert_eq!(value(&out[0], "stddev(size)"), 0.0);

    let huge = PacketExpr::Arith(ArithOp::Mul, bx(var(BaseVar::Size)), bx(int(i64::MAX)));
    let pred = cmp(CmpOp::Ge, agg(AggFunc::Stddev, huge.clone()), num(0.0));
    let out = run(&[event("e", all(), pred, no_group(), 10)], &three_sizes());
    assert_eq!(out[0].values[0].1, 0.0);
    assert_eq!(stddev(&[i64::MAX; 3], 3 * i128::from(i64::MAX)), 0.0);

    // Two values 0 and 10: N = 2·100 − 100 = 100; sqrt(100 / 4) = 5.
    assert_eq!(stddev(&[0, 10], 10), 5.0);
    // Negative values: -3, 3 → 3.
    assert_eq!(stddev(&[-3, 3], 0), 3.0);
    // No values: undefined. Beyond 128-bit intermediates: undefined too (a documented limit).
    assert!(stddev(&[], 0).is_nan());
    assert!(stddev(&[i64::MAX, i64::MIN], -1).is_nan());
    // 1, 2, 4: N = 3·21 − 49 = 14; sqrt(14 / 9).
    assert!(same(stddev(&[1, 2, 4], 7), (14f64 / 9.0).sqrt()));
}

#[test]
fn undefined_values_on_non_tcp_packets() {
    let flags = || var(BaseVar::TcpFlags);
    let pred = or(
        or(
            or(agg(AggFunc::Sum, flags()), agg(AggFunc::Count, flags())),
            or(agg(AggFunc::Min, flags()), agg(AggFunc::Max, flags())),
        ),
        or(
            or(agg(AggFunc::Avg, flags()), agg(AggFunc::Stddev, flags())),
            agg(AggFunc::Sum, var(BaseVar::Packets)),
        ),
    );
    let out = run(&[event("e", all(), pred, no_group(), 10)], &three_sizes());
    let v: Vec<f64> = out[0].values.iter().map(|(_, v)| *v).collect();
    assert_eq!(v[0], 0.0, "sum of nothing is 0");
    assert_eq!(v[1], 0.0, "count of nothing is 0");
    assert!(v[2].is_nan() && v[3].is_nan() && v[4].is_nan() && v[5].is_nan());
    assert_eq!(v[6], 3.0);

    // Comparisons with an undefined value are 0; `not` of that is 1.
    let lt = cmp(CmpOp::Lt, agg(AggFunc::Min, flags()), num(1e9));
    assert!(run(&[event("e", all(), lt.clone(), no_group(), 10)], &three_sizes()).is_empty());
    let ne = cmp(CmpOp::Ne, agg(AggFunc::Min, flags()), num(1.0));
    assert!(run(&[event("e", all(), ne, no_group(), 10)], &three_sizes()).is_empty());
    let not = Pred::Not(bx(lt));
    assert_eq!(
        run(&[event("e", all(), not, no_group(), 10)], &three_sizes()).len(),
        1
    );
    // A bare undefined value is not true.
    assert!(run(
        &[event("e", all(), agg(AggFunc::Max, flags()), no_group(), 10)],
        &three_sizes()
    )
    .is_empty());
}

#[test]
fn one_undefined_variable_makes_the_expression_undefined() {
    let key = tcp_key("10.0.0.1", "10.0.0.2", 1, 2);
    let mut inputs = three_sizes();
    inputs.push(Input::Packet(tcp_rec(
        T0 + 4 * MS,
        key,
        tcp_flags::ACK,
        100,
        None,
    )));
    // packets + tcp_flags·0: defined only on the TCP packet, even though the product is 0.
    let e = PacketExpr::Arith(
        ArithOp::Add,
        bx(var(BaseVar::Packets)),
        bx(PacketExpr::Arith(
            ArithOp::Mul,
            bx(var(BaseVar::TcpFlags)),
            bx(int(0)),
        )),
    );
    let out = run(
        &[event("e", all(), agg(AggFunc::Sum, e), no_group(), 10)],
        &inputs,
    );
    assert_eq!(out[0].values[0].1, 1.0);
    // `0 and tcp_flags` is still undefined on UDP: count over 4 packets of (ttl > 0 or tcp_flags) = 1.
    let e = PacketExpr::Or(
        bx(PacketExpr::Cmp(CmpOp::Gt, bx(var(BaseVar::Ttl)), bx(int(0)))),
        bx(var(BaseVar::TcpFlags)),
    );
    let out = run(
        &[event("e", all(), agg(AggFunc::Count, e), no_group(), 10)],
        &inputs,
    );
    assert_eq!(out[0].values[0].1, 1.0);
}

#[test]
fn tcp_without_header_has_no_flags() {
    // A later fragment of a TCP packet: proto TCP, no ports, no TCP header.
    let key = FlowKey::new(ip("10.0.0.1"), ip("10.0.0.2"), proto::TCP, None, None);
    let frag = PacketRecord {
        is_later_fragment: true,
        ..rec(T0, key, 500, 480)
    };
    let pred = or(
        agg(AggFunc::Count, var(BaseVar::Rwnd)),
        agg(AggFunc::Sum, var(BaseVar::Packets)),
    );
    let out = run(&[event("e", all(), pred, no_group(), 1)], &[Input::Packet(frag)]);
    assert_eq!(out[0].values[0].1, 0.0);
    assert_eq!(out[0].values[1].1, 1.0);
}

#[test]
fn packet_arithmetic_saturates_and_logic_is_zero_one() {
    let size = || var(BaseVar::Size);
    // size · i64::MAX saturates on each packet; the i128 sum of three is exact.
    let huge = PacketExpr::Arith(ArithOp::Mul, bx(size()), bx(int(i64::MAX)));
    let out = run(
        &[event("e", all(), agg(AggFunc::Sum, huge), no_group(), 10)],
        &three_sizes(),
    );
    assert_eq!(out[0].values[0].1, (3 * i128::from(i64::MAX)) as f64);
    // -(i64::MIN) saturates to i64::MAX; i64::MIN - size saturates to i64::MIN.
    let neg = PacketExpr::Neg(bx(PacketExpr::Arith(ArithOp::Sub, bx(int(i64::MIN)), bx(size()))));
    let out = run(
        &[event("e", all(), agg(AggFunc::Max, neg), no_group(), 10)],
        &three_sizes(),
    );
    assert_eq!(out[0].values[0].1, i64::MAX as f64);
    // (size > 150 and ttl == 64) + not (size < 300) * 10 − (size != 200 or 0)
    //   100: 0 + 0 − 1 = −1; 200: 1 + 0 − 0 = 1; 600: 1 + 10 − 1 = 10 → sum 10.
    let e = PacketExpr::Arith(
        ArithOp::Sub,
        bx(PacketExpr::Arith(
            ArithOp::Add,
            bx(PacketExpr::And(
                bx(PacketExpr::Cmp(CmpOp::Gt, bx(size()), bx(int(150)))),
                bx(PacketExpr::Cmp(CmpOp::Eq, bx(var(BaseVar::Ttl)), bx(int(64)))),
            )),
            bx(PacketExpr::Arith(
                ArithOp::Mul,
                bx(PacketExpr::Not(bx(PacketExpr::Cmp(
                    CmpOp::Lt,
                    bx(size()),
                    bx(int(300)),
                )))),
                bx(int(10)),
            )),
        )),
        bx(PacketExpr::Or(
            bx(PacketExpr::Cmp(CmpOp::Ne, bx(size()), bx(int(200)))),
            bx(int(0)),
        )),
    );
    let pred = or(agg(AggFunc::Sum, e.clone()), agg(AggFunc::Min, e));
    let out = run(&[event("e", all(), pred, no_group(), 10)], &three_sizes());
    assert_eq!(out[0].values[0].1, 10.0);
    assert_eq!(out[0].values[1].1, -1.0);
    // Every comparison operator: over 100, 200, 600 against 200.
    for (op, want) in [
        (CmpOp::Lt, 1.0),
        (CmpOp::Le, 2.0),
        (CmpOp::Gt, 1.0),
        (CmpOp::Ge, 2.0),
        (CmpOp::Eq, 1.0),
        (CmpOp::Ne, 2.0),
    ] {
        let c = PacketExpr::Cmp(op, bx(size()), bx(int(200)));
        let pred = cmp(CmpOp::Ge, agg(AggFunc::Sum, c), num(0.0));
        let out = run(&[event("e", all(), pred, no_group(), 10)], &three_sizes());
        assert_eq!(out[0].values[0].1, want, "{op:?}");
    }
}

// ---------------------------------------------------------------- predicates

#[test]
fn predicate_division_by_zero_is_undefined() {
    let flags = agg(AggFunc::Sum, var(BaseVar::TcpFlags)); // 0 on UDP
    let size = agg(AggFunc::Sum, var(BaseVar::Size));
    let div = Pred::Arith(ArithOp::Div, bx(size.clone()), bx(flags));
    let gt = cmp(CmpOp::Gt, div.clone(), num(0.0));
    assert!(run(&[event("e", all(), gt.clone(), no_group(), 10)], &three_sizes()).is_empty());
    // NaN is not true in `or` either, and `not` makes it true.
    let pred = or(div.clone(), Pred::Not(bx(gt)));
    assert_eq!(
        run(&[event("e", all(), pred, no_group(), 10)], &three_sizes()).len(),
        1
    );
    // Anything computed from NaN is NaN: (x / 0) · 0 + 1 is still not true.
    let pred = Pred::Arith(
        ArithOp::Add,
        bx(Pred::Arith(ArithOp::Mul, bx(div), bx(num(0.0)))),
        bx(num(1.0)),
    );
    assert!(run(&[event("e", all(), pred, no_group(), 10)], &three_sizes()).is_empty());
    // Ordinary arithmetic: (900 − 100) · 2 / 4 = 400, and −400 is true.
    let pred = cmp(
        CmpOp::Eq,
        Pred::Arith(
            ArithOp::Div,
            bx(Pred::Arith(
                ArithOp::Mul,
                bx(Pred::Arith(ArithOp::Sub, bx(size.clone()), bx(num(100.0)))),
                bx(num(2.0)),
            )),
            bx(num(4.0)),
        ),
        num(400.0),
    );
    assert_eq!(
        run(&[event("e", all(), pred, no_group(), 10)], &three_sizes()).len(),
        1
    );
    let pred = Pred::Neg(bx(size));
    assert_eq!(
        run(&[event("e", all(), pred, no_group(), 10)], &three_sizes()).len(),
        1
    );
}

#[test]
fn percentage_in_lowered_form() {
    // "count(size > 150) > 50%" lowers to count(size > 150) / sum(packets) > 0.5.
    let big = PacketExpr::Cmp(CmpOp::Gt, bx(var(BaseVar::Size)), bx(int(150)));
    let pct = |threshold: f64| {
        cmp(
            CmpOp::Gt,
            Pred::Arith(
                ArithOp::Div,
                bx(agg(AggFunc::Count, big.clone())),
                bx(agg(AggFunc::Sum, var(BaseVar::Packets))),
            ),
            num(threshold),
        )
    };
    let out = run(&[event("e", all(), pct(0.5), no_group(), 10)], &three_sizes());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].values[0].1, 2.0);
    assert_eq!(out[0].values[1], ("sum(packets)".into(), 3.0));
    // 2/3 is not above 0.7.
    assert!(run(&[event("e", all(), pct(0.7), no_group(), 10)], &three_sizes()).is_empty());
}

// ---------------------------------------------------------------- groups

fn mixed_traffic() -> Vec<Input> {
    vec![
        udp(T0, "10.1.2.3", "192.168.0.1", 1111, 53, 100),
        udp(T0 + 1, "10.1.2.200", "192.168.0.1", 2222, 53, 100),
        udp(T0 + 2, "10.1.3.3", "192.168.0.1", 1111, 53, 100),
        icmp(T0 + 3, "10.1.2.3", "192.168.0.1", 84),
        udp(T0 + 4, "2001:db8:aaaa::1", "2001:db8::53", 1111, 53, 100),
        udp(T0 + 5, "2001:db8:aaaa:bbbb::1", "2001:db8::53", 1111, 53, 100),
        icmp(T0 + 6, "2001:db8:cccc::1", "2001:db8::53", 84),
        vlan_udp(T0 + 7, "10.1.2.3", "192.168.0.1", 7, 100),
    ]
}

/// The groups an event with granularity `g` reports over [`mixed_traffic`], with their packet counts.
fn groups(g: Granularity) -> Vec<(GroupKey, f64)> {
    let ev = event("e", all(), always(), g, 10);
    run(&[ev], &mixed_traffic())
        .into_iter()
        .map(|r| (r.group, r.values[0].1))
        .collect()
}

fn addr(s: &str, len: u8) -> Option<(IpAddr, u8)> {
    Some((ip(s), len))
}

#[test]
fn granularity_no_fields_is_one_group() {
    assert_eq!(groups(no_group()), vec![(GroupKey::default(), 8.0)]);
}

#[test]
fn granularity_masks_addresses_per_family() {
    let g = Granularity {
        src_ip: Some(PrefixLens { v4: 24, v6: 32 }),
        ..no_group()
    };
    let key = |a| GroupKey {
        src_ip: a,
        ..GroupKey::default()
    };
    assert_eq!(
        groups(g),
        vec![
            (key(addr("10.1.2.0", 24)), 4.0),
            (key(addr("10.1.3.0", 24)), 1.0),
            (key(addr("2001:db8::", 32)), 3.0),
        ]
    );
    // Single-length form (`src_ip/24` cuts both families to 24 bits) is PrefixLens { 24, 24 }.
    let g = Granularity {
        src_ip: Some(PrefixLens { v4: 24, v6: 24 }),
        ..no_group()
    };
    assert_eq!(
        groups(g),
        vec![
            (key(addr("10.1.2.0", 24)), 4.0),
            (key(addr("10.1.3.0", 24)), 1.0),
            (key(addr("2001:d00::", 24)), 3.0),
        ]
    );
    // /0 keeps only the family: IPv4 and IPv6 never merge.
    let g = Granularity {
        src_ip: Some(PrefixLens { v4: 0, v6: 0 }),
        ..no_group()
    };
    assert_eq!(
        groups(g),
        vec![(key(addr("0.0.0.0", 0)), 5.0), (key(addr("::", 0)), 3.0)]
    );
    // /48 on IPv6 splits aaaa from cccc; full length keeps whole addresses.
    let g = Granularity {
        src_ip: Some(PrefixLens { v4: 32, v6: 48 }),
        ..no_group()
    };
    let got = groups(g);
    assert_eq!(got.len(), 5);
    assert!(got.contains(&(key(addr("2001:db8:aaaa::", 48)), 2.0)));
    assert!(got.contains(&(key(addr("10.1.2.3", 32)), 3.0)));
}

#[test]
fn granularity_dst_ip() {
    let g = Granularity {
        dst_ip: Some(PrefixLens::FULL),
        ..no_group()
    };
    let key = |a| GroupKey {
        dst_ip: a,
        ..GroupKey::default()
    };
    assert_eq!(
        groups(g),
        vec![
            (key(addr("192.168.0.1", 32)), 5.0),
            (key(addr("2001:db8::53", 128)), 3.0)
        ]
    );
}

#[test]
fn granularity_ports_proto_vlan_with_none() {
    let g = Granularity {
        src_port: true,
        ..no_group()
    };
    let key = |p| GroupKey {
        src_port: Some(p),
        ..GroupKey::default()
    };
    // ICMP has no ports: "none" sorts first.
    assert_eq!(
        groups(g),
        vec![
            (key(None), 2.0),
            (key(Some(1000)), 1.0),
            (key(Some(1111)), 4.0),
            (key(Some(2222)), 1.0)
        ]
    );

    let g = Granularity {
        dst_port: true,
        proto: true,
        ..no_group()
    };
    let key = |p, pr| GroupKey {
        dst_port: Some(p),
        proto: Some(pr),
        ..GroupKey::default()
    };
    assert_eq!(
        groups(g),
        vec![
            (key(None, proto::ICMP), 1.0),
            (key(None, proto::ICMPV6), 1.0),
            (key(Some(53), proto::UDP), 6.0),
        ]
    );

    let g = Granularity {
        vlan: true,
        ..no_group()
    };
    let key = |v| GroupKey {
        vlan: Some(v),
        ..GroupKey::default()
    };
    assert_eq!(groups(g), vec![(key(None), 7.0), (key(Some(7)), 1.0)]);
}

#[test]
fn granularity_combination() {
    // src_ip/16/32 + dst_port + vlan.
    let g = Granularity {
        src_ip: Some(PrefixLens { v4: 16, v6: 32 }),
        dst_port: true,
        vlan: true,
        ..no_group()
    };
    let key = |a, p, v| GroupKey {
        src_ip: a,
        dst_port: Some(p),
        vlan: Some(v),
        ..GroupKey::default()
    };
    assert_eq!(
        groups(g),
        vec![
            (key(addr("10.1.0.0", 16), None, None), 1.0),
            (key(addr("10.1.0.0", 16), Some(53), None), 3.0),
            (key(addr("10.1.0.0", 16), Some(53), Some(7)), 1.0),
            (key(addr("2001:db8::", 32), None, None), 1.0),
            (key(addr("2001:db8::", 32), Some(53), None), 2.0),
        ]
    );
}

#[test]
fn granularity_five_tuple() {
    let got = groups(Granularity::FIVE_TUPLE);
    // All eight packets differ in their 5-tuple.
    assert_eq!(got.len(), 8);
    let first = GroupKey {
        src_ip: addr("10.1.2.3", 32),
        dst_ip: addr("192.168.0.1", 32),
        src_port: Some(Some(1111)),
        dst_port: Some(Some(53)),
        proto: Some(proto::UDP),
        vlan: None,
        vni: None,
    };
    assert!(got.contains(&(first, 1.0)));
    let icmp = GroupKey {
        src_port: Some(None),
        dst_port: Some(None),
        proto: Some(proto::ICMP),
        ..first
    };
    assert!(got.contains(&(icmp, 1.0)));
    let vlan = GroupKey {
        src_port: Some(Some(1000)),
        ..first
    };
    assert!(got.contains(&(vlan, 1.0)));
    // VLAN is not part of the 5-tuple: tagged and untagged copies of one flow merge.
    let inputs = vec![
        vlan_udp(T0, "10.1.2.3", "192.168.0.1", 7, 100),
        vlan_udp(T0 + 1, "10.1.2.3", "192.168.0.1", 8, 100),
        udp(T0 + 2, "10.1.2.3", "192.168.0.1", 1000, 53, 100),
    ];
    let out = run(
        &[event("e", all(), always(), Granularity::FIVE_TUPLE, 10)],
        &inputs,
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].values[0].1, 3.0);
}

// ---------------------------------------------------------------- filters

fn prefix(s: &str, len: u8) -> Option<IpPrefix> {
    Some(IpPrefix { addr: ip(s), len })
}

/// Number of [`mixed_traffic`] packets an event with these filters sees.
fn matched(filters: Vec<Filter>) -> f64 {
    let out = run(&[event("e", filters, always(), no_group(), 10)], &mixed_traffic());
    out.first().map_or(0.0, |r| r.values[0].1)
}

#[test]
fn address_filters_match_their_family_only() {
    let f = |src_ip| Filter {
        src_ip,
        ..Filter::default()
    };
    assert_eq!(matched(vec![f(prefix("0.0.0.0", 0))]), 5.0);
    assert_eq!(matched(vec![f(prefix("::", 0))]), 3.0);
    assert_eq!(matched(vec![f(prefix("10.1.2.0", 24))]), 4.0);
    assert_eq!(matched(vec![f(prefix("10.1.2.3", 32))]), 3.0);
    assert_eq!(matched(vec![f(prefix("2001:db8:aaaa::", 48))]), 2.0);
    assert_eq!(matched(vec![f(prefix("2001:db8:aaaa::1", 128))]), 1.0);
    let d = |dst_ip| Filter {
        dst_ip,
        ..Filter::default()
    };
    assert_eq!(matched(vec![d(prefix("2001:db8::", 32))]), 3.0);
    assert_eq!(matched(vec![d(prefix("192.168.0.0", 16))]), 5.0);
    assert_eq!(matched(vec![d(prefix("192.168.1.0", 24))]), 0.0);
}

#[test]
fn port_filters_never_match_portless_packets() {
    let f = |src_port, dst_port| Filter {
        src_port,
        dst_port,
        ..Filter::default()
    };
    let r = |lo, hi| Some(PortRange { lo, hi });
    assert_eq!(matched(vec![f(None, r(0, 65535))]), 6.0);
    assert_eq!(matched(vec![f(r(0, 65535), None)]), 6.0);
    assert_eq!(matched(vec![f(r(1111, 1111), None)]), 4.0);
    // Inclusive bounds.
    assert_eq!(matched(vec![f(r(1000, 1111), None)]), 5.0);
    assert_eq!(matched(vec![f(r(1112, 2221), None)]), 0.0);
    assert_eq!(matched(vec![f(r(1112, 2222), r(53, 53))]), 1.0);
}

#[test]
fn proto_and_vlan_filters() {
    let p = |proto| Filter {
        proto: Some(proto),
        ..Filter::default()
    };
    assert_eq!(matched(vec![p(proto::UDP)]), 6.0);
    assert_eq!(matched(vec![p(proto::ICMP)]), 1.0);
    assert_eq!(matched(vec![p(proto::TCP)]), 0.0);
    let v = |vlan| Filter {
        vlan: Some(vlan),
        ..Filter::default()
    };
    assert_eq!(matched(vec![v(7)]), 1.0);
    // Untagged frames never match a VLAN condition, not even vlan 0.
    assert_eq!(matched(vec![v(0)]), 0.0);
}

#[test]
fn packet_matching_several_filters_counts_once() {
    let a = Filter {
        src_ip: prefix("10.0.0.0", 8),
        ..Filter::default()
    };
    let b = Filter {
        proto: Some(proto::UDP),
        ..Filter::default()
    };
    // 10/8: 5 packets; UDP: 6; union: 7 (the IPv6 ICMP matches neither).
    assert_eq!(matched(vec![a.clone(), b.clone()]), 7.0);
    assert_eq!(matched(vec![a.clone(), a.clone()]), 5.0);
    // A conjunction in one filter.
    let c = Filter {
        proto: Some(proto::UDP),
        ..a
    };
    assert_eq!(matched(vec![c]), 4.0);
    // No filters at all match nothing.
    assert_eq!(matched(vec![]), 0.0);
}

// ---------------------------------------------------------------- time and completeness

#[test]
fn out_of_order_packets_take_the_latest_time() {
    let inputs = vec![
        udp(T0 + 5 * MS, "10.0.0.1", "10.0.0.2", 1, 2, 100),
        udp(T0 + 12 * MS, "10.0.0.1", "10.0.0.2", 1, 2, 200),
        // Back in time: belongs to [10, 20) with packet time 12 ms.
        udp(T0 + 3 * MS, "10.0.0.1", "10.0.0.2", 1, 2, 400),
        udp(T0 + 25 * MS, "10.0.0.1", "10.0.0.2", 1, 2, 800),
    ];
    let pred = agg(AggFunc::Sum, var(BaseVar::Size));
    let out = run(&[event("e", all(), pred, no_group(), 10)], &inputs);
    let got: Vec<(u64, f64, Completeness)> = out
        .iter()
        .map(|r| ((r.window.start_ns - T0) / MS, r.values[0].1, r.completeness))
        .collect();
    let c = |packets, out_of_order, complete| Completeness {
        packets,
        out_of_order,
        complete,
        ..Completeness::default()
    };
    assert_eq!(
        got,
        vec![
            // The input starts at 5 ms, inside the first window.
            (0, 100.0, c(1, 0, false)),
            (10, 600.0, c(2, 1, true)),
            (20, 800.0, c(1, 0, false)),
        ]
    );
}

#[test]
fn equal_timestamps_are_not_out_of_order() {
    let inputs = vec![
        udp(T0, "10.0.0.1", "10.0.0.2", 1, 2, 100),
        udp(T0, "10.0.0.1", "10.0.0.2", 1, 2, 100),
    ];
    let out = run(&[event("e", all(), always(), no_group(), 10)], &inputs);
    assert_eq!(out[0].completeness.out_of_order, 0);
}

#[test]
fn other_frames_advance_time_and_are_counted() {
    let inputs = vec![
        Input::NotIp { ts_ns: T0 + MS },
        udp(T0 + 2 * MS, "10.0.0.1", "10.0.0.2", 1, 2, 100),
        Input::Malformed { ts_ns: T0 + 9 * MS },
        // Out of order twice: a malformed frame, and an IP packet attributed to 11 ms.
        Input::NotIp { ts_ns: T0 + 11 * MS },
        Input::Malformed { ts_ns: T0 + 4 * MS },
        udp(T0 + 8 * MS, "10.0.0.1", "10.0.0.2", 1, 2, 300),
        // Ends the input at 20 ms exactly, so [10, 20) is complete.
        Input::NotIp { ts_ns: T0 + 20 * MS },
    ];
    let out = run(
        &[event(
            "e",
            all(),
            agg(AggFunc::Sum, var(BaseVar::Size)),
            no_group(),
            10,
        )],
        &inputs,
    );
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].values[0].1, 100.0);
    assert_eq!(
        out[0].completeness,
        Completeness {
            packets: 1,
            malformed: 1,
            not_ip: 1,
            // The input starts at 1 ms, inside this window.
            complete: false,
            ..Completeness::default()
        }
    );
    assert_eq!(out[1].values[0].1, 300.0);
    assert_eq!(
        out[1].completeness,
        Completeness {
            packets: 1,
            malformed: 1,
            not_ip: 1,
            out_of_order: 2,
            complete: true,
            ..Completeness::default()
        }
    );
}

#[test]
fn completeness_counts_all_traffic_not_only_the_events() {
    let only_icmp = vec![Filter {
        proto: Some(proto::ICMP),
        ..Filter::default()
    }];
    let out = run(
        &[event("e", only_icmp, always(), no_group(), 10)],
        &mixed_traffic(),
    );
    assert_eq!(out[0].values[0].1, 1.0);
    assert_eq!(out[0].completeness.packets, 8);
    assert!(!out[0].completeness.complete);
}

#[test]
fn windows_of_several_intervals_are_aligned_to_the_epoch() {
    // T0 + 3 ms is not a multiple of 20 ms: windows are still aligned to multiples of 20 ms.
    let base = T0 + 3 * MS;
    let inputs: Vec<Input> = [0, 10, 16, 17, 40, 41, 77]
        .iter()
        .map(|&ms| udp(base + ms * MS, "10.0.0.1", "10.0.0.2", 1, 2, 100))
        .collect();
    let e20 = event("b20", all(), always(), no_group(), 20);
    let e50 = event("a50", all(), always(), no_group(), 50);
    let out = run(&[e20, e50], &inputs);
    let got: Vec<(&str, u64, u64, f64, bool)> = out
        .iter()
        .map(|r| {
            (
                &*r.event,
                (r.window.start_ns - T0) / MS,
                (r.window.end_ns - T0) / MS,
                r.values[0].1,
                r.completeness.complete,
            )
        })
        .collect();
    // Packet times 3, 13, 19, 20, 43, 44, 80 ms; sorted by end, then start, then name.
    assert_eq!(
        got,
        vec![
            // The input starts at 3 ms: both first windows are partial.
            ("b20", 0, 20, 3.0, false),
            ("b20", 20, 40, 1.0, true),
            ("a50", 0, 50, 6.0, false),
            ("b20", 40, 60, 2.0, true),
            ("a50", 50, 100, 1.0, false),
            ("b20", 80, 100, 1.0, false),
        ]
    );
    // T0 is a multiple of 50 ms as well, so these are real epoch alignments.
    assert_eq!(T0 % (50 * MS), 0);
}

#[test]
fn reports_sort_by_group_within_a_window() {
    let g = Granularity {
        src_port: true,
        ..no_group()
    };
    let out = run(&[event("e", all(), always(), g, 10)], &mixed_traffic());
    let keys: Vec<GroupKey> = out.iter().map(|r| r.group).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
}

#[test]
fn origin_comes_from_config() {
    let cfg = Config {
        host: "h7".into(),
        worker: 3,
        ..Config::default()
    };
    let out = evaluate(
        &[event("e", all(), always(), no_group(), 10)],
        &three_sizes(),
        &cfg,
    );
    assert_eq!(
        out[0].origin,
        Origin {
            host: "h7".into(),
            worker: 3
        }
    );
}

#[test]
fn empty_input_gives_no_reports() {
    assert!(run(&[event("e", all(), always(), no_group(), 10)], &[]).is_empty());
}

// ---------------------------------------------------------------- rwnd

fn rwnds(inputs: &[Input], timeout_ns: u64) -> Vec<f64> {
    let g = Granularity {
        src_port: true,
        ..no_group()
    };
    // One window per packet (1 ms) and sum(rwnd) gives each packet's value.
    let ev = event("e", all(), agg(AggFunc::Sum, var(BaseVar::Rwnd)), g, 1);
    let cfg = Config {
        flow_timeout_ns: timeout_ns,
        ..Config::default()
    };
    let mut out: Vec<(u64, f64)> = evaluate(&[ev], inputs, &cfg)
        .into_iter()
        .map(|r| (r.window.start_ns, r.values[0].1))
        .collect();
    out.sort_by_key(|&(t, _)| t);
    out.into_iter().map(|(_, v)| v).collect()
}

#[test]
fn rwnd_is_scaled_by_the_flows_syn() {
    let a = tcp_key("10.0.0.1", "10.0.0.2", 40000, 80);
    let b = a.reversed();
    let p = |ms: u64, key, flags, window, ws| Input::Packet(tcp_rec(T0 + ms * MS, key, flags, window, ws));
    let inputs = vec![
        // SYN announces scale 7, its own window unscaled.
        p(0, a, tcp_flags::SYN, 1000, Some(7)),
        // The other direction never sent a SYN with a scale: unscaled.
        p(1, b, tcp_flags::SYN | tcp_flags::ACK, 2000, None),
        p(2, a, tcp_flags::ACK, 10, None),
        p(3, b, tcp_flags::ACK, 10, None),
        // A wscale option outside a SYN is ignored.
        p(4, b, tcp_flags::ACK, 10, Some(3)),
        p(5, a, tcp_flags::ACK, 10, Some(3)),
    ];
    assert_eq!(
        rwnds(&inputs, DEFAULT_FLOW_TIMEOUT_NS),
        vec![1000.0, 2000.0, 1280.0, 10.0, 10.0, 1280.0]
    );
}

#[test]
fn flow_timeout_forgets_the_scale() {
    let a = tcp_key("10.0.0.1", "10.0.0.2", 40000, 80);
    let other = tcp_key("10.0.0.3", "10.0.0.2", 40000, 80);
    let p = |ms: u64, key, flags, window, ws| Input::Packet(tcp_rec(T0 + ms * MS, key, flags, window, ws));
    // Timeout 10 ms: a gap of exactly 10 ms keeps the flow, 11 ms restarts it.
    let inputs = vec![
        p(0, a, tcp_flags::SYN, 1000, Some(2)),
        p(10, a, tcp_flags::ACK, 10, None),
        // Another flow's traffic does not keep `a` alive.
        p(15, other, tcp_flags::ACK, 1, None),
        p(21, a, tcp_flags::ACK, 10, None),
        p(22, a, tcp_flags::SYN, 1000, Some(1)),
        p(23, a, tcp_flags::ACK, 10, None),
    ];
    let timeout = 10 * MS;
    assert_eq!(
        rwnds(&inputs, timeout),
        vec![1000.0, 40.0, 1.0, 10.0, 1000.0, 20.0]
    );
}

#[test]
fn flow_gap_uses_packet_times_not_raw_timestamps() {
    let a = tcp_key("10.0.0.1", "10.0.0.2", 40000, 80);
    let p = |ms: u64, key, flags, window, ws| Input::Packet(tcp_rec(T0 + ms * MS, key, flags, window, ws));
    // The ACK's raw timestamp is 0 ms but its packet time is 30 ms: gap from the SYN at 25 ms is 5 ms.
    let inputs = vec![
        Input::NotIp { ts_ns: T0 + 20 * MS },
        p(25, a, tcp_flags::SYN, 1000, Some(4)),
        Input::NotIp { ts_ns: T0 + 30 * MS },
        p(0, a, tcp_flags::ACK, 1, None),
    ];
    assert_eq!(rwnds(&inputs, 10 * MS), vec![1000.0, 16.0]);
}

// ---------------------------------------------------------------- unsupported events

#[test]
fn only_what_the_checker_refuses_is_unsupported() {
    // Every variable is evaluated, in aggregates and (state, `_lastepoch`) outside them.
    for base in BaseVar::ALL {
        let inside = event("in", all(), agg(AggFunc::Sum, var(base)), no_group(), 10);
        assert_eq!(unsupported(&inside), None, "{}", base.name());
        let last = Pred::State(Var {
            base,
            last_epoch: true,
        });
        let outside = event("out", all(), or(always(), last), no_group(), 10);
        assert_eq!(unsupported(&outside), None, "{}", base.name());
    }
    let state = Pred::State(Var {
        base: BaseVar::Ack,
        last_epoch: false,
    });
    let last_inside = agg(
        AggFunc::Sum,
        PacketExpr::Var(Var {
            base: BaseVar::Volume,
            last_epoch: true,
        }),
    );
    let div = agg(
        AggFunc::Sum,
        PacketExpr::Arith(ArithOp::Div, bx(var(BaseVar::Size)), bx(int(2))),
    );
    let mut zero = event("zero", all(), always(), no_group(), 10);
    zero.interval_ns = 0;
    let events = vec![
        event("last_inside", all(), last_inside, no_group(), 10),
        event("div", all(), div, no_group(), 10),
        zero,
        event("ok", all(), always(), no_group(), 10),
        event("state", all(), or(always(), state), no_group(), 10),
    ];
    for e in &events[..3] {
        assert!(unsupported(e).is_some(), "{}", e.name);
    }
    for e in &events[3..] {
        assert_eq!(unsupported(e), None, "{}", e.name);
    }
    let out = run(&events, &three_sizes());
    let names: Vec<&str> = out.iter().map(|r| &*r.event).collect();
    assert_eq!(names, ["ok", "state"]);
    // `ack` is undefined on UDP: reported as NaN after the aggregates.
    assert_eq!(out[1].values[0], ("sum(packets)".into(), 3.0));
    assert_eq!(out[1].values[1].0, "ack".into());
    assert!(out[1].values[1].1.is_nan());
}

#[test]
fn values_are_keyed_by_canonical_text() {
    let e = PacketExpr::Arith(
        ArithOp::Mul,
        bx(PacketExpr::Arith(
            ArithOp::Add,
            bx(var(BaseVar::Size)),
            bx(int(1)),
        )),
        bx(var(BaseVar::Ttl)),
    );
    let out = run(
        &[event("e", all(), agg(AggFunc::Sum, e), no_group(), 10)],
        &three_sizes(),
    );
    assert_eq!(out[0].values[0].0, "sum((size + 1) * ttl)".into());
}

// ---------------------------------------------------------------- TCP connection state

use clarion_wire::build::{FrameSpec, IpPair, TcpSpec, Transport};
use clarion_wire::tcp_flags::{ACK, FIN, PSH, RST, SYN};
use clarion_wire::{parse_frame, LinkType};

const US: u64 = 1_000;
/// Initial sequence numbers of the client (10.0.0.1:40000) and the server (10.0.0.2:80).
const CI: u32 = 1000;
const SI: u32 = 5000;

fn client() -> FlowKey {
    tcp_key("10.0.0.1", "10.0.0.2", 40000, 80)
}

fn server() -> FlowKey {
    client().reversed()
}

/// One TCP segment between the client and the server.
#[derive(Clone, Copy)]
struct Seg {
    from_client: bool,
    tcp: TcpSpec,
    payload: usize,
}

fn seg(from_client: bool, seq: u32, ack: u32, flags: u8, payload: usize) -> Seg {
    let (src_port, dst_port) = if from_client { (40000, 80) } else { (80, 40000) };
    Seg {
        from_client,
        tcp: TcpSpec {
            src_port,
            dst_port,
            seq,
            ack,
            flags,
            window: 1000,
            wscale: None,
            mss: None,
        },
        payload,
    }
}

fn cli(seq: u32, ack: u32, flags: u8, payload: usize) -> Seg {
    seg(true, seq, ack, flags, payload)
}

fn srv(seq: u32, ack: u32, flags: u8, payload: usize) -> Seg {
    seg(false, seq, ack, flags, payload)
}

impl Seg {
    fn options(mut self, window: u16, wscale: u8, mss: u16) -> Self {
        self.tcp.window = window;
        self.tcp.wscale = Some(wscale);
        self.tcp.mss = Some(mss);
        self
    }

    fn window(mut self, window: u16) -> Self {
        self.tcp.window = window;
        self
    }

    fn spec(&self) -> FrameSpec {
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let (src, dst) = if self.from_client { (a, b) } else { (b, a) };
        FrameSpec {
            ip: IpPair::V4 { src, dst },
            transport: Transport::Tcp(self.tcp),
            payload_len: self.payload,
            ..FrameSpec::default()
        }
    }
}

/// The segment `us` microseconds after T0, built as an Ethernet frame and parsed back.
fn at(us: u64, seg: Seg) -> Input {
    let spec = seg.spec();
    let ts = T0 + us * US;
    let bytes = spec.build();
    let record = parse_frame(LinkType::Ethernet, &bytes, ts, bytes.len() as u32).expect("built frames parse");
    assert_eq!(record, spec.record(ts));
    Input::Packet(record)
}

/// `is_lost`, `seq`, `ack`, `dup` of one packet.
type TcpVals = Option<(i64, i64, i64, i64)>;

fn v(is_lost: i64, seq: i64, ack: i64, dup: i64) -> TcpVals {
    Some((is_lost, seq, ack, dup))
}

/// What the replay gives: per packet its TCP values, `is_burst` and `rwnd`;
/// the RTT samples as (acked flow is the client's, µs after T0, rtt).
struct Replayed {
    tcp: Vec<TcpVals>,
    is_burst: Vec<i64>,
    rwnd: Vec<Option<i64>>,
    samples: Vec<(bool, u64, i64)>,
}

fn replayed_with(inputs: &[Input], config: &Config) -> Replayed {
    let frames = packet_times(inputs);
    let (packets, samples) = replay(&frames, config);
    Replayed {
        tcp: packets
            .iter()
            .map(|p| p.tcp.map(|t| (t.is_lost, t.seq, t.ack, t.dup)))
            .collect(),
        is_burst: packets.iter().map(|p| p.is_burst).collect(),
        rwnd: packets.iter().map(|p| p.rwnd).collect(),
        samples: samples
            .iter()
            .map(|s| {
                assert!(s.flow == client() || s.flow == server(), "{:?}", s.flow);
                (s.flow == client(), (s.time - T0) / US, s.rtt)
            })
            .collect(),
    }
}

fn replayed(inputs: &[Input]) -> Replayed {
    replayed_with(inputs, &Config::default())
}

/// SYN (wscale 7, MSS 1460) at 0 µs, SYN-ACK (wscale 8, MSS 1400) at 100, ACK at 200.
fn handshake() -> Vec<Input> {
    vec![
        at(0, cli(CI, 0, SYN, 0).options(65535, 7, 1460)),
        at(100, srv(SI, CI + 1, SYN | ACK, 0).options(65535, 8, 1400)),
        at(200, cli(CI + 1, SI + 1, ACK, 0)),
    ]
}

/// The handshake's values: the SYN-ACK acknowledges the SYN, the ACK the SYN-ACK.
fn handshake_values() -> Vec<TcpVals> {
    vec![v(0, 1, 0, 0), v(0, 1, 0, 0), v(0, 1, 1, 0)]
}

fn handshake_samples() -> Vec<(bool, u64, i64)> {
    vec![(true, 100, 100_000), (false, 200, 100_000)]
}

fn with_handshake<T: Clone>(start: Vec<T>, rest: &[T]) -> Vec<T> {
    let mut all = start;
    all.extend_from_slice(rest);
    all
}

#[test]
fn handshake_with_options_data_and_an_rtt_sample() {
    let mut inputs = handshake();
    inputs[2] = at(200, cli(CI + 1, SI + 1, ACK, 0).window(100));
    inputs.push(at(300, cli(CI + 1, SI + 1, ACK | PSH, 100).window(100)));
    inputs.push(at(1300, srv(SI + 1, CI + 101, ACK, 0).window(10)));
    let r = replayed(&inputs);
    assert_eq!(
        r.tcp,
        with_handshake(handshake_values(), &[v(0, 101, 1, 0), v(0, 1, 1, 0)])
    );
    // SYNs unscaled; then each direction by the scale it announced itself.
    assert_eq!(
        r.rwnd,
        vec![
            Some(65535),
            Some(65535),
            Some(100 << 7),
            Some(100 << 7),
            Some(10 << 8)
        ]
    );
    assert_eq!(
        r.samples,
        with_handshake(handshake_samples(), &[(true, 1300, 1_000_000)])
    );
}

#[test]
fn a_delayed_ack_samples_from_the_latest_segment() {
    let inputs = with_handshake(
        handshake(),
        &[
            at(300, cli(CI + 1, SI + 1, ACK, 100)),
            at(400, cli(CI + 101, SI + 1, ACK, 100)),
            // Acks both: one sample, from the second.
            at(900, srv(SI + 1, CI + 201, ACK, 0)),
            at(1000, cli(CI + 201, SI + 1, ACK, 100)),
            // Covers only half of [201, 301): nothing removed, no sample.
            at(1500, srv(SI + 1, CI + 251, ACK, 0)),
            at(1800, srv(SI + 1, CI + 301, ACK, 0)),
            at(1900, cli(CI + 301, SI + 1, ACK, 0)),
        ],
    );
    let r = replayed(&inputs);
    assert_eq!(
        r.tcp,
        with_handshake(
            handshake_values(),
            &[
                v(0, 101, 1, 0),
                v(0, 201, 1, 0),
                v(0, 1, 1, 0),
                v(0, 301, 201, 0),
                v(0, 1, 1, 0),
                v(0, 1, 1, 0),
                v(0, 301, 301, 0),
            ]
        )
    );
    assert_eq!(
        r.samples,
        with_handshake(
            handshake_samples(),
            &[(true, 900, 500_000), (true, 1800, 800_000)]
        )
    );
}

#[test]
fn retransmissions_are_lost_and_karn_skips_their_samples() {
    let inputs = with_handshake(
        handshake(),
        &[
            at(300, cli(CI + 1, SI + 1, ACK, 100)),
            at(400, cli(CI + 101, SI + 1, ACK, 100)),
            // [1, 101) again: lost, and marks the first transmission.
            at(500, cli(CI + 1, SI + 1, ACK, 100)),
            // Acks a range holding a retransmitted segment: no sample (Karn).
            at(600, srv(SI + 1, CI + 201, ACK, 0)),
            // [301, 401) before [201, 301): the late one counts as lost (reordering looks like loss)...
            at(700, cli(CI + 301, SI + 1, ACK, 100)),
            at(800, cli(CI + 201, SI + 1, ACK, 100)),
            // ... but marks nothing it does not overlap: [301, 401) still gives a sample.
            at(1000, srv(SI + 1, CI + 401, ACK, 0)),
            // Partly old, partly new: lost, not listed, yet it advances seq.
            at(1100, cli(CI + 351, SI + 1, ACK, 100)),
            at(1200, srv(SI + 1, CI + 451, ACK, 0)),
            at(1300, cli(CI + 451, SI + 1, ACK, 0)),
        ],
    );
    let r = replayed(&inputs);
    assert_eq!(
        r.tcp,
        with_handshake(
            handshake_values(),
            &[
                v(0, 101, 1, 0),
                v(0, 201, 1, 0),
                v(1, 201, 1, 0),
                v(0, 1, 1, 0),
                v(0, 401, 201, 0),
                v(1, 401, 201, 0),
                v(0, 1, 1, 0),
                v(1, 451, 401, 0),
                v(0, 1, 1, 0),
                v(0, 451, 451, 0),
            ]
        )
    );
    assert_eq!(
        r.samples,
        with_handshake(handshake_samples(), &[(true, 1000, 300_000)])
    );
}

#[test]
fn keep_alives_are_not_lost() {
    let inputs = with_handshake(
        handshake(),
        &[
            at(300, cli(CI + 1, SI + 1, ACK, 100)),
            at(400, srv(SI + 1, CI + 101, ACK, 0)),
            // The last byte sent again: a keep-alive (or zero-window probe).
            at(10_000, cli(CI + 100, SI + 1, ACK, 1)),
            // Its ack repeats snd_una with nothing outstanding: not a duplicate.
            at(10_100, srv(SI + 1, CI + 101, ACK, 0)),
            // Zero-length keep-alive: no sequence space at all.
            at(10_200, cli(CI + 100, SI + 1, ACK, 0)),
            // Two bytes ending at snd_max, or one byte before it: retransmissions.
            at(10_300, cli(CI + 99, SI + 1, ACK, 2)),
            at(10_400, cli(CI + 50, SI + 1, ACK, 1)),
            // One byte ending at snd_max but with FIN: not a probe.
            at(10_500, cli(CI + 100, SI + 1, ACK | FIN, 1)),
        ],
    );
    let r = replayed(&inputs);
    assert_eq!(
        r.tcp,
        with_handshake(
            handshake_values(),
            &[
                v(0, 101, 1, 0),
                v(0, 1, 1, 0),
                v(0, 101, 101, 0),
                v(0, 1, 1, 0),
                v(0, 101, 101, 0),
                v(1, 101, 101, 0),
                v(1, 101, 101, 0),
                v(1, 102, 101, 0),
            ]
        )
    );
    assert_eq!(
        r.samples,
        with_handshake(handshake_samples(), &[(true, 400, 100_000)])
    );
}

#[test]
fn duplicate_acks_grow_dup_by_the_largest_payload_and_advances_shrink_it() {
    let inputs = with_handshake(
        handshake(),
        &[
            at(300, cli(CI + 1, SI + 1, ACK, 100)),
            at(310, cli(CI + 101, SI + 1, ACK, 60)),
            at(320, cli(CI + 161, SI + 1, ACK, 100)),
            at(400, srv(SI + 1, CI + 101, ACK, 0)),
            // Three duplicates: dup grows by mss = 100 (the largest payload, not the MSS option).
            at(410, srv(SI + 1, CI + 101, ACK, 0)),
            at(420, srv(SI + 1, CI + 101, ACK, 0)),
            at(430, srv(SI + 1, CI + 101, ACK, 0)),
            // Same ack with data, with FIN, with RST: not duplicates.
            at(440, srv(SI + 1, CI + 101, ACK, 50)),
            at(450, srv(SI + 51, CI + 101, ACK | FIN, 0)),
            at(460, srv(SI + 52, CI + 101, ACK | RST, 0)),
            // The retransmission shows dup 300; its ack of server data carries a payload.
            at(500, cli(CI + 101, SI + 1, ACK, 60)),
            // Advance by 160: dup 300 − 160 = 140; no sample (Karn).
            at(600, srv(SI + 52, CI + 261, ACK, 0)),
            // Acks the server's data and FIN (sample from the later, the FIN at 450).
            at(610, cli(CI + 261, SI + 52, ACK, 100)),
            // Advance by 100: dup max(0, 140 − 100) = 40; then by 100 more: 0.
            at(700, srv(SI + 52, CI + 361, ACK, 0)),
            at(710, cli(CI + 361, SI + 52, ACK, 100)),
            at(800, srv(SI + 52, CI + 461, ACK, 0)),
            // Nothing outstanding: a repeated ack is not a duplicate.
            at(810, srv(SI + 52, CI + 461, ACK, 0)),
            at(820, cli(CI + 461, SI + 52, ACK, 0)),
        ],
    );
    let r = replayed(&inputs);
    assert_eq!(
        r.tcp,
        with_handshake(
            handshake_values(),
            &[
                v(0, 101, 1, 0),
                v(0, 161, 1, 0),
                v(0, 261, 1, 0),
                v(0, 1, 1, 0),
                v(0, 1, 1, 0),
                v(0, 1, 1, 0),
                v(0, 1, 1, 0),
                v(0, 51, 1, 0),
                v(0, 52, 1, 0),
                v(0, 52, 1, 0),
                v(1, 261, 101, 300),
                v(0, 52, 1, 0),
                v(0, 361, 261, 140),
                v(0, 52, 52, 0),
                v(0, 461, 361, 40),
                v(0, 52, 52, 0),
                v(0, 52, 52, 0),
                v(0, 461, 461, 0),
            ]
        )
    );
    assert_eq!(
        r.samples,
        with_handshake(
            handshake_samples(),
            &[
                (true, 400, 100_000),
                (false, 610, 160_000),
                (true, 700, 90_000),
                (true, 800, 90_000),
            ]
        )
    );
}

#[test]
fn sequence_numbers_unwrap_across_two_to_the_32() {
    let isn = u32::MAX - 49;
    let mut inputs = vec![
        at(0, cli(isn, 0, SYN, 0)),
        at(100, srv(SI, isn.wrapping_add(1), SYN | ACK, 0)),
        // [1, 101): raw sequence numbers wrap inside it.
        at(200, cli(isn.wrapping_add(1), SI + 1, ACK, 100)),
        at(300, cli(isn.wrapping_add(101), SI + 1, ACK, 100)),
        at(400, srv(SI + 1, isn.wrapping_add(201), ACK, 0)),
        // From beyond the wrap, back before it: a retransmission of [1, 101).
        at(500, cli(isn.wrapping_add(1), SI + 1, ACK, 100)),
    ];
    let head = inputs.len();
    // Then more than 2³² bytes: 66,100 segments of 65,000, each acked 10 µs later.
    // Records straight from the spec (the 65 KB frames need not be built).
    let n: u32 = 66_100;
    let base = 1_000;
    for k in 0..n {
        let seq = isn.wrapping_add(201).wrapping_add(k.wrapping_mul(65_000));
        let t = base + u64::from(k) * 20;
        for (us, s) in [
            (t, cli(seq, SI + 1, ACK, 65_000)),
            (t + 10, srv(SI + 1, seq.wrapping_add(65_000), ACK, 0)),
        ] {
            inputs.push(Input::Packet(s.spec().record(T0 + us * US)));
        }
    }
    inputs.push(at(
        base + u64::from(n) * 20,
        cli(
            isn.wrapping_add(201).wrapping_add(n.wrapping_mul(65_000)),
            SI + 1,
            ACK,
            0,
        ),
    ));
    let r = replayed(&inputs);
    assert_eq!(
        r.tcp[..head],
        [
            v(0, 1, 0, 0),
            v(0, 1, 0, 0),
            v(0, 101, 1, 0),
            v(0, 201, 1, 0),
            v(0, 1, 1, 0),
            v(1, 201, 201, 0),
        ]
    );
    assert_eq!(
        r.samples[..3],
        [(true, 100, 100_000), (false, 200, 100_000), (true, 400, 100_000)]
    );
    let total: i64 = 201 + i64::from(n) * 65_000;
    assert!(total > 1 << 32);
    let last_data = r.tcp[r.tcp.len() - 3];
    assert_eq!(last_data, v(0, total, total - 65_000, 0));
    assert_eq!(r.tcp[r.tcp.len() - 1], v(0, total, total, 0));
    assert_eq!(r.samples.len(), 3 + n as usize);
    assert!(r.samples[3..].iter().all(|&(c, _, rtt)| c && rtt == 10_000));
}

#[test]
fn a_syn_with_a_new_isn_restarts_the_state() {
    let ni: u32 = 77_777;
    let si2: u32 = 99_999;
    let inputs = vec![
        at(0, cli(CI, 0, SYN, 0)),
        // The SYN again (same ISN): a retransmission, not a new connection.
        at(100, cli(CI, 0, SYN, 0)),
        // Acks the retransmitted SYN: no sample.
        at(200, srv(SI, CI + 1, SYN | ACK, 0)),
        at(300, cli(CI + 1, SI + 1, ACK, 100)),
        at(400, cli(CI + 101, SI + 1, ACK, 100)),
        // A new connection on the same ports: everything starts afresh on both sides.
        at(500, cli(ni, 0, SYN, 0)),
        at(600, srv(si2, ni + 1, SYN | ACK, 0)),
        at(700, cli(ni + 1, si2 + 1, ACK, 0)),
        // An ack for the old connection's data is behind the new one's snd_una: nothing.
        at(800, srv(si2 + 1, CI + 201, ACK, 0)),
        at(900, cli(ni + 1, si2 + 1, ACK, 0)),
    ];
    let r = replayed(&inputs);
    assert_eq!(
        r.tcp,
        vec![
            v(0, 1, 0, 0),
            v(1, 1, 0, 0),
            v(0, 1, 0, 0),
            v(0, 101, 1, 0),
            v(0, 201, 1, 0),
            v(0, 1, 0, 0),
            v(0, 1, 0, 0),
            v(0, 1, 1, 0),
            v(0, 1, 1, 0),
            v(0, 1, 1, 0),
        ]
    );
    assert_eq!(
        r.samples,
        vec![(false, 300, 100_000), (true, 600, 100_000), (false, 700, 100_000)]
    );
}

#[test]
fn acks_for_a_flow_that_is_not_alive_are_ignored() {
    let config = Config {
        flow_timeout_ns: 10 * MS,
        ..Config::default()
    };
    let inputs = vec![
        at(0, cli(CI, 0, SYN, 0)),
        // Exactly the timeout later: the client is still alive.
        at(10_000, srv(SI, CI + 1, SYN | ACK, 0)),
        // 21 ms after its SYN the client starts afresh (ISN = this seq); the server,
        // idle 11 ms, is not alive: the ack is ignored.
        at(21_000, cli(CI + 1, SI + 1, ACK, 100)),
        // The server starts afresh too; the client is alive: a sample for [0, 100).
        at(22_000, srv(SI + 1, CI + 101, ACK, 0)),
        // 14 ms after the client's last packet: not alive, no effect.
        at(35_000, srv(SI + 1, CI + 101, ACK, 0)),
        at(36_000, cli(CI + 101, SI + 1, ACK, 0)),
    ];
    let r = replayed_with(&inputs, &config);
    assert_eq!(
        r.tcp,
        vec![
            v(0, 1, 0, 0),
            v(0, 1, 0, 0),
            v(0, 100, 0, 0),
            v(0, 0, 0, 0),
            v(0, 0, 0, 0),
            v(0, 0, 0, 0),
        ]
    );
    assert_eq!(
        r.samples,
        vec![(true, 10_000, 10_000_000), (true, 22_000, 1_000_000)]
    );
}

#[test]
fn the_list_of_first_transmissions_is_bounded() {
    let config = Config {
        max_first_transmissions: 2,
        ..Config::default()
    };
    let inputs = vec![
        at(0, cli(CI, 0, SYN, 0)),
        at(100, srv(SI, CI + 1, SYN | ACK, 0)),
        // The SYN-ACK emptied the client's list: two data segments fit, the third does not.
        at(200, cli(CI + 1, SI + 1, ACK, 100)),
        at(300, cli(CI + 101, SI + 1, ACK, 100)),
        at(400, cli(CI + 201, SI + 1, ACK, 100)),
        at(500, srv(SI + 1, CI + 201, ACK, 0)),
        // Only the unlisted segment is acked: no sample.
        at(600, srv(SI + 1, CI + 301, ACK, 0)),
    ];
    let r = replayed_with(&inputs, &config);
    assert_eq!(
        r.samples,
        vec![(true, 100, 100_000), (false, 200, 100_000), (true, 500, 200_000)]
    );
    assert_eq!(r.tcp[4], v(0, 301, 1, 0));
}

#[test]
fn a_flow_that_is_its_own_reverse_acks_itself() {
    // Same address and port on both ends: step 6 finds the flow itself, after steps 1–5.
    let key = tcp_key("10.0.0.9", "10.0.0.9", 7, 7);
    let p = |us: u64, seq, ack, flags, volume: u32| {
        Input::Packet(PacketRecord {
            tcp: Some(TcpInfo {
                seq,
                ack,
                flags,
                ..TcpInfo::default()
            }),
            ..rec(T0 + us * US, key, 40 + volume, volume)
        })
    };
    let inputs = vec![p(0, 100, 0, SYN, 0), p(50, 101, 101, ACK, 10)];
    let frames = packet_times(&inputs);
    let (packets, samples) = replay(&frames, &Config::default());
    let vals: Vec<TcpValues> = packets.iter().map(|p| p.tcp.unwrap()).collect();
    assert_eq!(
        vals[1],
        TcpValues {
            is_lost: 0,
            seq: 11,
            ack: 1,
            dup: 0
        }
    );
    assert_eq!(
        samples,
        vec![RttSample {
            flow: key,
            time: T0 + 50 * US,
            rtt: 50_000
        }]
    );
}

// ---------------------------------------------------------------- is_burst

#[test]
fn is_burst_compares_with_the_flows_previous_packet() {
    let a = |us: u64| udp(T0 + us * US, "10.0.0.1", "10.0.0.2", 1, 2, 100);
    let b = |us: u64| udp(T0 + us * US, "10.0.0.2", "10.0.0.1", 2, 1, 100);
    let inputs = vec![
        a(0),
        // Exactly the gap: a burst.
        a(1_000),
        // 1.5 ms: not.
        a(2_500),
        // The reverse flow is another flow: its first packet is no burst, and it does not break a's.
        b(2_550),
        a(2_600),
        // Out of order: attributed to 2.6 ms, so 0 after a's last packet.
        a(100),
        b(4_000),
    ];
    let r = replayed(&inputs);
    assert_eq!(r.is_burst, vec![0, 1, 0, 0, 1, 1, 0]);
    // Defined on every packet; the TCP values are not.
    assert!(r.tcp.iter().all(Option::is_none));
    let ev = event(
        "e",
        all(),
        agg(AggFunc::Sum, var(BaseVar::IsBurst)),
        no_group(),
        10,
    );
    assert_eq!(run(&[ev], &inputs)[0].values[0].1, 3.0);

    // A flow that starts afresh has no previous packet, even when the gap exceeds the timeout only.
    let config = Config {
        flow_timeout_ns: 10 * MS,
        burst_gap_ns: 20 * MS,
        ..Config::default()
    };
    let inputs = vec![a(0), a(10_000), a(25_000), a(30_000), a(50_000)];
    assert_eq!(replayed_with(&inputs, &config).is_burst, vec![0, 1, 0, 1, 0]);
    // TCP packets have it too.
    let r = replayed(&handshake());
    assert_eq!(r.is_burst, vec![0, 0, 1]);
}

// ---------------------------------------------------------------- values outside aggregates

fn five(key: FlowKey) -> GroupKey {
    group_key(&Granularity::FIVE_TUPLE, &key)
}

fn state(base: BaseVar, last_epoch: bool) -> Pred {
    Pred::State(Var { base, last_epoch })
}

/// A report as `(window start in ms after T0, group, values)`.
type Fired = (u64, GroupKey, Vec<(String, f64)>);

fn fired(events: &[EventSpec], inputs: &[Input]) -> Vec<Fired> {
    run(events, inputs)
        .into_iter()
        .map(|r| {
            (
                (r.window.start_ns - T0) / MS,
                r.group,
                r.values.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            )
        })
        .collect()
}

fn vals(list: &[(&str, f64)]) -> Vec<(String, f64)> {
    list.iter().map(|&(k, x)| (k.to_string(), x)).collect()
}

#[test]
fn acked_bytes_per_window_from_ack_and_ack_lastepoch() {
    let inputs = with_handshake(
        handshake(),
        &[
            at(300, cli(CI + 1, SI + 1, ACK, 100)),
            at(1_000, srv(SI + 1, CI + 101, ACK, 0)),
            at(5_000, cli(CI + 101, SI + 1, ACK, 100)),
            at(12_000, srv(SI + 1, CI + 201, ACK, 0)),
            at(13_000, cli(CI + 201, SI + 1, ACK, 0)),
            at(15_000, cli(CI + 201, SI + 1, ACK, 0)),
        ],
    );
    // ack - ack_lastepoch > 0
    let pred = cmp(
        CmpOp::Gt,
        Pred::Arith(
            ArithOp::Sub,
            bx(state(BaseVar::Ack, false)),
            bx(state(BaseVar::Ack, true)),
        ),
        num(0.0),
    );
    let ev = event("acked", all(), pred, Granularity::FIVE_TUPLE, 10);
    // Window 0: no previous window (NaN). Window 1: the client 101 → 201; the server 1 → 1.
    assert_eq!(
        fired(std::slice::from_ref(&ev), &inputs),
        vec![(
            10,
            five(client()),
            vals(&[("ack", 201.0), ("ack_lastepoch", 101.0)])
        )]
    );
    // Values follow the aggregates, in first-use order, undefined as NaN.
    let pred = or(
        or(
            state(BaseVar::Seq, false),
            agg(AggFunc::Sum, var(BaseVar::Packets)),
        ),
        or(state(BaseVar::Dup, true), state(BaseVar::Seq, false)),
    );
    let ev = event("all", all(), pred, Granularity::FIVE_TUPLE, 10);
    let out = fired(&[ev], &inputs);
    let keys: Vec<Vec<&str>> = out
        .iter()
        .map(|(_, _, v)| v.iter().map(|(k, _)| k.as_str()).collect())
        .collect();
    assert!(keys
        .iter()
        .all(|k| k == &["sum(packets)", "seq", "dup_lastepoch"]));
    let numbers: Vec<(u64, bool, f64, f64, bool)> = out
        .iter()
        .map(|(w, g, v)| (*w, *g == five(client()), v[0].1, v[1].1, v[2].1.is_nan()))
        .collect();
    assert_eq!(
        numbers,
        vec![
            // The client's group (10.0.0.1 first) sorts before the server's.
            (0, true, 4.0, 201.0, true),
            (0, false, 2.0, 1.0, true),
            (10, true, 2.0, 201.0, false),
            (10, false, 1.0, 1.0, false),
        ]
    );
}

#[test]
fn the_last_value_is_by_packet_time_then_largest() {
    let ttl = |us: u64, ttl: u8, size: u32| {
        let key = FlowKey::new(ip("10.0.0.1"), ip("10.0.0.2"), proto::UDP, Some((1, 2)), None);
        Input::Packet(PacketRecord {
            ttl,
            ..rec(T0 + us * US, key, size, size - 28)
        })
    };
    let inputs = vec![
        ttl(1_000, 200, 100),
        // Same packet time (the second is out of order): the largest value wins.
        ttl(5_000, 10, 100),
        ttl(4_000, 64, 100),
        ttl(5_000, 32, 100),
        // Window 1: its own last value is 7; window 2 has no packet.
        ttl(15_000, 7, 300),
        // Window 3: the previous window had no packet of the group.
        ttl(35_000, 9, 400),
    ];
    let pred = or(
        agg(AggFunc::Sum, var(BaseVar::Packets)),
        or(state(BaseVar::Ttl, true), state(BaseVar::Size, true)),
    );
    let out = fired(&[event("e", all(), pred, no_group(), 10)], &inputs);
    let got: Vec<(u64, f64, f64)> = out.iter().map(|(w, _, v)| (*w, v[1].1, v[2].1)).collect();
    assert_eq!(got.len(), 3);
    assert!(got[0].1.is_nan() && got[0].2.is_nan());
    assert_eq!(got[1], (10, 64.0, 100.0));
    assert_eq!(got[2].0, 30);
    assert!(got[2].1.is_nan() && got[2].2.is_nan());
}

// ---------------------------------------------------------------- RTT samples in groups

/// Handshake; data at 300 µs acked at 2 ms (1.7 ms); data at 9 ms acked at 11 ms (2 ms), when
/// the client sends nothing.
fn rtt_traffic() -> Vec<Input> {
    with_handshake(
        handshake(),
        &[
            at(300, cli(CI + 1, SI + 1, ACK, 100)),
            at(2_000, srv(SI + 1, CI + 101, ACK, 0)),
            at(9_000, cli(CI + 101, SI + 1, ACK, 100)),
            at(11_000, srv(SI + 1, CI + 201, ACK, 0)),
        ],
    )
}

fn max_rtt_above_1ms() -> Pred {
    cmp(CmpOp::Gt, agg(AggFunc::Max, var(BaseVar::Rtt)), num(1e6))
}

#[test]
fn max_rtt_above_a_millisecond() {
    let pred = and(
        max_rtt_above_1ms(),
        cmp(CmpOp::Gt, agg(AggFunc::Sum, var(BaseVar::Packets)), num(0.0)),
    );
    // Per 5-tuple: the sample belongs to the flow whose data was acked (the client's).
    // In window 1 the client's group has no packet: it does not exist, its sample is dropped.
    let per_flow = event("per_flow", all(), pred.clone(), Granularity::FIVE_TUPLE, 10);
    assert_eq!(
        fired(&[per_flow], &rtt_traffic()),
        vec![(
            0,
            five(client()),
            vals(&[("max(rtt)", 1_700_000.0), ("sum(packets)", 4.0)])
        )]
    );
    // One group for everything: it exists in window 1 (the server's ack), and the sample joins it.
    // Samples never count as packets.
    let whole = event("whole", all(), pred, no_group(), 10);
    assert_eq!(
        fired(&[whole], &rtt_traffic()),
        vec![
            (
                0,
                GroupKey::default(),
                vals(&[("max(rtt)", 1_700_000.0), ("sum(packets)", 6.0)])
            ),
            (
                10,
                GroupKey::default(),
                vals(&[("max(rtt)", 2_000_000.0), ("sum(packets)", 1.0)])
            ),
        ]
    );
    // Filters see the acked flow's key: the server's data only gave the 100 µs sample.
    let from_server = vec![Filter {
        src_port: Some(PortRange { lo: 80, hi: 80 }),
        ..Filter::default()
    }];
    let pred = or(agg(AggFunc::Max, var(BaseVar::Rtt)), always());
    let out = fired(&[event("srv", from_server, pred, no_group(), 10)], &rtt_traffic());
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].2[0].1, 100_000.0);
    assert!(out[1].2[0].1.is_nan());
}

#[test]
fn rtt_is_undefined_on_packets_and_everything_else_on_samples() {
    let rtt = || var(BaseVar::Rtt);
    let above = || PacketExpr::Cmp(CmpOp::Gt, bx(rtt()), bx(int(1_000_000)));
    // rtt > 1ms or is_lost: rtt is undefined on packets, is_lost on samples: never defined.
    let with_lost = PacketExpr::Or(bx(above()), bx(var(BaseVar::IsLost)));
    // rtt > 1ms or 0: defined on samples only.
    let with_zero = PacketExpr::Or(bx(above()), bx(int(0)));
    let pred = or(
        or(agg(AggFunc::Count, with_lost), agg(AggFunc::Count, with_zero)),
        or(
            or(agg(AggFunc::Sum, int(1)), agg(AggFunc::Avg, rtt())),
            or(agg(AggFunc::Min, rtt()), agg(AggFunc::Count, rtt())),
        ),
    );
    let out = fired(&[event("e", all(), pred, no_group(), 10)], &rtt_traffic());
    let numbers: Vec<Vec<f64>> = out
        .iter()
        .map(|(_, _, v)| v.iter().map(|x| x.1).collect())
        .collect();
    assert_eq!(
        numbers,
        vec![
            // Samples 100 µs, 100 µs, 1.7 ms over six packets (`sum(1)` counts packets only).
            vec![0.0, 1.0, 6.0, 1_900_000.0 / 3.0, 100_000.0, 3.0],
            vec![0.0, 1.0, 1.0, 2_000_000.0, 2_000_000.0, 1.0],
        ]
    );
    // In the predicate, an undefined max(rtt) makes the comparison 0: `or` falls through, `not` holds.
    let per_flow = |pred| event("e", all(), pred, Granularity::FIVE_TUPLE, 10);
    let not = Pred::Not(bx(max_rtt_above_1ms()));
    let got: Vec<(u64, bool)> = fired(&[per_flow(not)], &rtt_traffic())
        .into_iter()
        .map(|(w, g, _)| (w, g == five(client())))
        .collect();
    // The server's group: samples of 100 µs in window 0, none in window 1.
    assert_eq!(got, vec![(0, false), (10, false)]);
    let either = or(
        max_rtt_above_1ms(),
        cmp(CmpOp::Ge, agg(AggFunc::Min, var(BaseVar::Ttl)), num(64.0)),
    );
    assert_eq!(fired(&[per_flow(either)], &rtt_traffic()).len(), 3);
    // rtt_lastepoch: the last sample of the previous window (1.7 ms at 2 ms); the server's group had 100 µs.
    let last = or(always(), state(BaseVar::Rtt, true));
    let got: Vec<(u64, bool, f64)> = fired(&[per_flow(last)], &rtt_traffic())
        .into_iter()
        .map(|(w, g, v)| (w, g == five(client()), v[1].1))
        .collect();
    assert_eq!(got[2], (10, false, 100_000.0));
    assert!(got[0].2.is_nan() && got[1].2.is_nan());
}
