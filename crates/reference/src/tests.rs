//! Hand-computed cases: each expected number was worked out on paper from docs/semantics.md.

use super::*;
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
        name: name.into(),
        filters,
        predicate,
        granularity,
        interval_ns: ms * MS,
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
        .find(|(k, _)| k == key)
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
    let keys: Vec<&str> = r.values.iter().map(|(k, _)| k.as_str()).collect();
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
    let keys: Vec<&str> = out[0].values.iter().map(|(k, _)| k.as_str()).collect();
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
    assert_eq!(out[0].values[1], ("sum(packets)".to_string(), 3.0));
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
                r.event.as_str(),
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
fn unsupported_events_are_skipped() {
    let state = Pred::State(Var {
        base: BaseVar::Ack,
        last_epoch: false,
    });
    let rtt = agg(AggFunc::Max, var(BaseVar::Rtt));
    let last = agg(
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
        event("state", all(), or(always(), state), no_group(), 10),
        event("rtt", all(), rtt, no_group(), 10),
        event("last", all(), last, no_group(), 10),
        event("div", all(), div, no_group(), 10),
        zero,
        event("ok", all(), always(), no_group(), 10),
    ];
    for e in &events[..5] {
        assert!(unsupported(e).is_some(), "{}", e.name);
    }
    assert_eq!(unsupported(&events[5]), None);
    let out = run(&events, &three_sizes());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].event, "ok");
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
    assert_eq!(out[0].values[0].0, "sum((size + 1) * ttl)");
}
