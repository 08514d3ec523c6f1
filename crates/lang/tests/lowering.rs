//! Lowering: what each construct becomes in the `spec` model.

use std::net::IpAddr;

use clarion_lang::spec::{
    AggCall, AggFunc, ArithOp, BaseVar, CmpOp, EventSpec, Filter, Granularity, IpPrefix, PacketExpr,
    PortRange, Pred, PrefixLens, Scope, Var,
};
use clarion_lang::{check, codes};

fn one(src: &str) -> EventSpec {
    match check(src) {
        Ok(mut specs) if specs.len() == 1 => specs.remove(0),
        Ok(specs) => panic!("expected one event, got {specs:?}"),
        Err(d) => panic!("{}", d.render("test", src, false)),
    }
}

fn pred(when: &str) -> Pred {
    one(&format!("event e when {when}")).predicate
}

fn pred_every(when: &str, every: &str) -> Pred {
    one(&format!("event e when {when} every {every}")).predicate
}

fn codes_of(src: &str) -> Vec<&'static str> {
    match check(src) {
        Ok(specs) => panic!("expected an error for {src:?}, got {specs:?}"),
        Err(d) => d.iter().map(|d| d.code).collect(),
    }
}

fn var(base: BaseVar) -> Var {
    Var {
        base,
        last_epoch: false,
    }
}

fn agg(func: AggFunc, base: BaseVar) -> Pred {
    Pred::Agg(AggCall {
        func,
        arg: PacketExpr::Var(var(base)),
    })
}

fn gt(l: Pred, r: Pred) -> Pred {
    Pred::Cmp(CmpOp::Gt, Box::new(l), Box::new(r))
}

fn prefix(s: &str, len: u8) -> Option<IpPrefix> {
    Some(IpPrefix {
        addr: s.parse::<IpAddr>().expect("address"),
        len,
    })
}

#[test]
fn defaults() {
    let s = one("event e when sum(volume) > 1");
    assert_eq!(s.name, "e");
    assert_eq!(s.filters, vec![Filter::default()]);
    assert_eq!(s.granularity, Granularity::FIVE_TUPLE);
    assert_eq!(s.interval_ns, 10_000_000);
    assert_eq!(s.scope, Scope::Host);
}

#[test]
fn across_hosts_makes_the_event_network_wide_and_changes_nothing_else() {
    let host = one("event e filter dst_port = 80 when sum(volume) > 100MB per dst_ip/24 every 10ms");
    let network =
        one("event e filter dst_port = 80 when sum(volume) > 100MB per dst_ip/24 every 10ms across hosts");
    assert_eq!(host.scope, Scope::Host);
    assert_eq!(network.scope, Scope::Network);
    assert_eq!(
        EventSpec {
            scope: Scope::Host,
            drill_downs: Vec::new(),
            on_demand: false,
            ..network
        },
        host
    );
}

#[test]
fn filters() {
    let s = one("event e filter * when count(packets) > 1");
    assert_eq!(s.filters, vec![Filter::default()]);
    let s = one("event e
           filter src_ip == 10.0.0.1 and dst_ip in 2001:db8::/32 and src_port in 1024..65535
           filter dst_port = 80 and proto = udp and vlan in 7 and src_ip = *
           filter proto == 132
           filter vni = 16777215 and dst_port = 443
           filter vni = 4294967295
           when count(packets) > 1");
    let f0 = Filter {
        src_ip: prefix("10.0.0.1", 32),
        dst_ip: prefix("2001:db8::", 32),
        src_port: Some(PortRange { lo: 1024, hi: 65535 }),
        ..Filter::default()
    };
    let f1 = Filter {
        dst_port: Some(PortRange { lo: 80, hi: 80 }),
        proto: Some(17),
        vlan: Some(7),
        ..Filter::default()
    };
    let f2 = Filter {
        proto: Some(132),
        ..Filter::default()
    };
    // A VXLAN/Geneve VNI (24 bits), a GRE key (32).
    let f3 = Filter {
        vni: Some(0xff_ffff),
        dst_port: Some(PortRange { lo: 443, hi: 443 }),
        ..Filter::default()
    };
    let f4 = Filter {
        vni: Some(u32::MAX),
        ..Filter::default()
    };
    assert_eq!(s.filters, vec![f0, f1, f2, f3, f4]);
    let s = one("event e filter dst_ip in ::1 and proto = icmpv6 when count(packets) > 1");
    assert_eq!(s.filters[0].dst_ip, prefix("::1", 128));
    assert_eq!(s.filters[0].proto, Some(58));
}

#[test]
fn sizes_and_plain_numbers() {
    let n = |x: f64| Box::new(Pred::Num(x));
    let vol = || Box::new(agg(AggFunc::Sum, BaseVar::Volume));
    assert_eq!(
        pred("sum(volume) > 125KB"),
        Pred::Cmp(CmpOp::Gt, vol(), n(125_000.0))
    );
    assert_eq!(
        pred("sum(volume) > 125 KiB"),
        Pred::Cmp(CmpOp::Gt, vol(), n(128_000.0))
    );
    assert_eq!(
        pred("sum(volume) >= 1.5MB"),
        Pred::Cmp(CmpOp::Ge, vol(), n(1_500_000.0))
    );
    assert_eq!(
        pred("sum(volume) < 2GiB"),
        Pred::Cmp(CmpOp::Lt, vol(), n(2_147_483_648.0))
    );
    assert_eq!(pred("sum(volume) != 7B"), Pred::Cmp(CmpOp::Ne, vol(), n(7.0)));
    assert_eq!(pred("sum(volume) == 0.25"), Pred::Cmp(CmpOp::Eq, vol(), n(0.25)));
}

#[test]
fn rates_are_bytes_per_interval() {
    let vol = || agg(AggFunc::Sum, BaseVar::Volume);
    assert_eq!(pred("sum(volume) > 1Gbps"), gt(vol(), Pred::Num(1_250_000.0)));
    assert_eq!(
        pred_every("sum(volume) > 8 Mbps", "1s"),
        gt(vol(), Pred::Num(1_000_000.0))
    );
    assert_eq!(
        pred_every("sum(volume) > 80Kbps", "100ms"),
        gt(vol(), Pred::Num(1_000.0))
    );
    assert_eq!(
        pred_every("sum(volume) > 800bps", "1s"),
        gt(vol(), Pred::Num(100.0))
    );
}

#[test]
fn percentages_are_shares_of_packets() {
    let share = |func, base| {
        Pred::Arith(
            ArithOp::Div,
            Box::new(agg(func, base)),
            Box::new(agg(AggFunc::Sum, BaseVar::Packets)),
        )
    };
    assert_eq!(
        pred("sum(is_lost) > 10%"),
        gt(share(AggFunc::Sum, BaseVar::IsLost), Pred::Num(0.1))
    );
    assert_eq!(
        pred("12.5% < count(ttl)"),
        Pred::Cmp(
            CmpOp::Lt,
            Box::new(Pred::Num(0.125)),
            Box::new(share(AggFunc::Count, BaseVar::Ttl))
        )
    );
}

#[test]
fn state_variables_and_operators() {
    let st = |base, last_epoch| Pred::State(Var { base, last_epoch });
    let p = pred("ack - ack_lastepoch > 0 && !(dup == 0) || volume_lastepoch < 1");
    let lhs = Pred::And(
        Box::new(gt(
            Pred::Arith(
                ArithOp::Sub,
                Box::new(st(BaseVar::Ack, false)),
                Box::new(st(BaseVar::Ack, true)),
            ),
            Pred::Num(0.0),
        )),
        Box::new(Pred::Not(Box::new(Pred::Cmp(
            CmpOp::Eq,
            Box::new(st(BaseVar::Dup, false)),
            Box::new(Pred::Num(0.0)),
        )))),
    );
    let rhs = Pred::Cmp(
        CmpOp::Lt,
        Box::new(st(BaseVar::Volume, true)),
        Box::new(Pred::Num(1.0)),
    );
    assert_eq!(p, Pred::Or(Box::new(lhs), Box::new(rhs)));
}

#[test]
fn packet_expressions() {
    let p = pred("sum(volume + 1KB * -2) > 0");
    let Pred::Cmp(_, l, _) = p else { panic!() };
    let arg = PacketExpr::Arith(
        ArithOp::Add,
        Box::new(PacketExpr::Var(var(BaseVar::Volume))),
        Box::new(PacketExpr::Arith(
            ArithOp::Mul,
            Box::new(PacketExpr::Int(1000)),
            Box::new(PacketExpr::Neg(Box::new(PacketExpr::Int(2)))),
        )),
    );
    assert_eq!(
        *l,
        Pred::Agg(AggCall {
            func: AggFunc::Sum,
            arg
        })
    );
}

#[test]
fn aggregate_text() {
    let cases = [
        ("sum(volume)", "sum(volume)"),
        ("sum(is_lost && is_burst)", "sum(is_lost and is_burst)"),
        ("count((ttl < 64))", "count(ttl < 64)"),
        ("stddev(size)", "stddev(size)"),
        ("max((volume + 1) * 2)", "max((volume + 1) * 2)"),
        ("min(-(ttl - 1))", "min(-(ttl - 1))"),
        ("avg(!(ttl < 5 || ecn == 3))", "avg(not (ttl < 5 or ecn == 3))"),
        ("sum(volume - (size - 1))", "sum(volume - (size - 1))"),
        ("sum((ttl < 5) == (ecn > 1))", "sum((ttl < 5) == (ecn > 1))"),
        ("sum(not not ttl)", "sum(not not ttl)"),
        ("sum(1KiB)", "sum(1024)"),
    ];
    for (src, text) in cases {
        let s = one(&format!("event e when {src} > 0"));
        assert_eq!(s.aggregates()[0].to_string(), text, "{src}");
    }
    let s = one("event e when sum(volume) / (sum(packets) - -1) > 0.5 * 2KB or not ack_lastepoch");
    assert_eq!(
        s.predicate.to_string(),
        "sum(volume) / (sum(packets) - -1) > 0.5 * 2000 or not ack_lastepoch"
    );
}

#[test]
fn granularities() {
    let g = |per: &str| one(&format!("event e when sum(volume) > 1 per {per}")).granularity;
    assert_eq!(g("5tuple"), Granularity::FIVE_TUPLE);
    assert_eq!(
        g("(src_ip, dst_ip, src_port, dst_port, proto)"),
        Granularity::FIVE_TUPLE
    );
    let l = |v4, v6| Some(PrefixLens { v4, v6 });
    assert_eq!(
        g("dst_ip/24"),
        Granularity {
            dst_ip: l(24, 24),
            ..Granularity::default()
        }
    );
    assert_eq!(
        g("dst_ip/24 and dst_port"),
        Granularity {
            dst_ip: l(24, 24),
            dst_port: true,
            ..Granularity::default()
        }
    );
    assert_eq!(
        g("(src_ip/24/64, proto, vlan)"),
        Granularity {
            src_ip: l(24, 64),
            proto: true,
            vlan: true,
            ..Granularity::default()
        }
    );
    assert_eq!(
        g("(vni, dst_port)"),
        Granularity {
            vni: true,
            dst_port: true,
            ..Granularity::default()
        }
    );
    assert_eq!(
        g("src_ip/0/128"),
        Granularity {
            src_ip: l(0, 128),
            ..Granularity::default()
        }
    );
}

#[test]
fn intervals() {
    let every = |e: &str| one(&format!("event e when sum(volume) > 1 every {e}")).interval_ns;
    assert_eq!(every("10ms"), 10_000_000);
    assert_eq!(every("1s"), 1_000_000_000);
    assert_eq!(every("1.5 s"), 1_500_000_000);
    assert_eq!(every("10000us"), 10_000_000);
    assert_eq!(every("3600s"), 3_600_000_000_000);
}

#[test]
fn clauses_in_any_order() {
    let a = one("event e every 1s per dst_ip filter proto = tcp when sum(volume) > 1 filter proto = udp");
    let b = one(
        "event e\n filter proto = tcp\n filter proto = udp\n when sum(volume) > 1\n per dst_ip\n every 1s",
    );
    assert_eq!(a, b);
}

#[test]
fn mistakes_have_codes() {
    let cases: &[(&str, &str)] = &[
        (
            "event e when sum(volume) > 1 when sum(size) > 1",
            codes::DUPLICATE_CLAUSE,
        ),
        (
            "event e per dst_ip per src_ip when sum(volume) > 1",
            codes::DUPLICATE_CLAUSE,
        ),
        (
            "event e every 1s every 2s when sum(volume) > 1",
            codes::DUPLICATE_CLAUSE,
        ),
        ("event e filter proto = tcp", codes::MISSING_WHEN),
        ("event e when 1 < 2 < 3", codes::CHAINED_COMPARISON),
        ("event e when sum(volume) > 1 wen", codes::UNKNOWN_CLAUSE),
        ("event e when sum(volume) > 1 KBs", codes::UNKNOWN_CLAUSE),
        ("event e when sum(volume) > 1XB", codes::UNKNOWN_UNIT),
        ("event when sum(volume) > 1", codes::BAD_EVENT_NAME),
        (
            "event e filter dport = 80 when sum(volume) > 1",
            codes::UNKNOWN_FIELD,
        ),
        (
            "event e per 5-tuple when sum(volume) > 1",
            codes::UNEXPECTED_TOKEN,
        ),
        (
            "event e per five_tuple when sum(volume) > 1",
            codes::UNKNOWN_FIELD,
        ),
        (
            "event e filter src_ip in 10.0.0/8 when sum(volume) > 1",
            codes::BAD_ADDRESS,
        ),
        (
            "event e filter src_ip in 10/8 when sum(volume) > 1",
            codes::BAD_ADDRESS,
        ),
        (
            "event e when sum(volume) > 1\nevent e when sum(volume) > 2",
            codes::DUPLICATE_EVENT,
        ),
        (
            "event e filter src_ip = 80 when sum(volume) > 1",
            codes::BAD_FILTER_VALUE,
        ),
        (
            "event e filter src_ip in 10.0.0.0/33 when sum(volume) > 1",
            codes::BAD_FILTER_VALUE,
        ),
        (
            "event e filter dst_port in 1024..80 when sum(volume) > 1",
            codes::BAD_FILTER_VALUE,
        ),
        (
            "event e filter dst_port = 65536 when sum(volume) > 1",
            codes::BAD_FILTER_VALUE,
        ),
        (
            "event e filter proto = tpc when sum(volume) > 1",
            codes::BAD_FILTER_VALUE,
        ),
        (
            "event e filter proto = 256 when sum(volume) > 1",
            codes::BAD_FILTER_VALUE,
        ),
        (
            "event e filter vlan = 4096 when sum(volume) > 1",
            codes::BAD_FILTER_VALUE,
        ),
        (
            "event e filter vni = 4294967296 when sum(volume) > 1",
            codes::BAD_FILTER_VALUE,
        ),
        (
            "event e filter vni = tcp when sum(volume) > 1",
            codes::BAD_FILTER_VALUE,
        ),
        ("event e when sum(volume) > 1 per vni/24", codes::BAD_GRANULARITY),
        (
            "event e filter src_ip in 10.0.128.1/24 when sum(volume) > 1",
            codes::HOST_BITS,
        ),
        (
            "event e filter src_ip in 2001:db8::1/32 when sum(volume) > 1",
            codes::HOST_BITS,
        ),
        (
            "event e filter proto = tcp and proto = udp when sum(volume) > 1",
            codes::DUPLICATE_FIELD,
        ),
        (
            "event e per (dst_ip, dst_ip/24) when sum(volume) > 1",
            codes::DUPLICATE_FIELD,
        ),
        ("event e when sum(bytes) > 1", codes::UNKNOWN_VARIABLE),
        ("event e when ttl > 1", codes::BARE_VARIABLE),
        (
            "event e when sum(ack_lastepoch) > 1",
            codes::LASTEPOCH_IN_AGGREGATE,
        ),
        ("event e when summ(volume) > 1", codes::UNKNOWN_FUNCTION),
        ("event e when sum(max(volume)) > 1", codes::NESTED_AGGREGATE),
        ("event e when sum(volume / 2) > 1", codes::DIVISION_IN_AGGREGATE),
        ("event e when sum(volume * 1.5) > 1", codes::BAD_PACKET_NUMBER),
        (
            "event e when sum(volume * 10000000000GB) > 1",
            codes::BAD_PACKET_NUMBER,
        ),
        ("event e when max(ttl) > 10%", codes::MISPLACED_PERCENT),
        ("event e when sum(volume) + 1 > 10%", codes::MISPLACED_PERCENT),
        ("event e when 10% > 5%", codes::MISPLACED_PERCENT),
        ("event e when sum(volume * 10%) > 1", codes::MISPLACED_PERCENT),
        ("event e when sum(volume * 5%) > 1", codes::MISPLACED_PERCENT),
        ("event e when sum(volume * 1Mbps) > 1", codes::MISPLACED_UNIT),
        (
            "event e when sum(volume) > 1 per dst_port/16",
            codes::BAD_GRANULARITY,
        ),
        (
            "event e when sum(volume) > 1 per dst_ip/33",
            codes::BAD_GRANULARITY,
        ),
        (
            "event e when sum(volume) > 1 per dst_ip/24/129",
            codes::BAD_GRANULARITY,
        ),
        (
            "event e when sum(volume) > 1 per dst_ip/24/64/8",
            codes::BAD_GRANULARITY,
        ),
        ("event e when sum(volume) > 1 every 10", codes::BAD_INTERVAL),
        ("event e when sum(volume) > 1 every 10KB", codes::BAD_INTERVAL),
        ("event e when sum(volume) > 1 every 0ms", codes::BAD_INTERVAL),
        ("event e when sum(volume) > 1 every 1500us", codes::BAD_INTERVAL),
        ("event e when sum(volume) > 1 every 0.5ms", codes::BAD_INTERVAL),
        ("event e when sum(volume) > 1 every 2h", codes::UNKNOWN_UNIT),
        ("event e when sum(volume) > 1 every 3601s", codes::BAD_INTERVAL),
        ("event e when sum(volume) > 1.", codes::BAD_NUMBER),
        ("event e when sum(volume) > .5", codes::BAD_NUMBER),
        ("event e when sum(volume) > 1 ; ", codes::UNEXPECTED_CHAR),
        ("when sum(volume) > 1", codes::UNEXPECTED_TOKEN),
        ("event e when sum(volume, size) > 1", codes::UNEXPECTED_TOKEN),
        ("event e when (sum(volume) > 1", codes::UNEXPECTED_TOKEN),
    ];
    for (src, code) in cases {
        let mut found = codes_of(src);
        found.dedup();
        assert_eq!(found, vec![*code], "{src}");
    }
}

#[test]
fn one_error_per_broken_event_and_all_semantic_errors() {
    let src = "event a when > 1\nevent b when sum(volume) >\nevent c when ttl > 1 per vlan/3\nevent d when sum(x) > 1";
    let found = codes_of(src);
    assert_eq!(
        found,
        vec![
            codes::UNEXPECTED_TOKEN,
            codes::UNEXPECTED_TOKEN,
            codes::BARE_VARIABLE,
            codes::BAD_GRANULARITY,
            codes::UNKNOWN_VARIABLE
        ]
    );
}

#[test]
fn depth_is_limited() {
    let nested = |n: usize| format!("event e when {}sum(volume){} > 1", "(".repeat(n), ")".repeat(n));
    assert!(check(&nested(60)).is_ok());
    assert_eq!(codes_of(&nested(100)), vec![codes::TOO_DEEP]);
    assert_eq!(codes_of(&nested(100_000)), vec![codes::TOO_DEEP]);
    let chain = |n: usize| format!("event e when sum(volume){} > 1", " + 1".repeat(n));
    assert!(check(&chain(60)).is_ok());
    assert_eq!(codes_of(&chain(100_000)), vec![codes::TOO_DEEP]);
    assert_eq!(
        codes_of(&format!("event e when {}1", "-".repeat(100_000))),
        vec![codes::TOO_DEEP]
    );
    assert_eq!(
        codes_of(&format!("event e when {}1", "not ".repeat(100_000))),
        vec![codes::TOO_DEEP]
    );
}

#[test]
fn packet_expr_text_of_hand_built_trees() {
    let x = || Box::new(PacketExpr::Var(var(BaseVar::Ttl)));
    let e = PacketExpr::Arith(ArithOp::Sub, x(), Box::new(PacketExpr::Int(-5)));
    assert_eq!(e.to_string(), "ttl - -5");
    let e = PacketExpr::Cmp(CmpOp::Le, Box::new(PacketExpr::Cmp(CmpOp::Lt, x(), x())), x());
    assert_eq!(e.to_string(), "(ttl < ttl) <= ttl");
    let e = PacketExpr::Neg(Box::new(PacketExpr::Arith(ArithOp::Mul, x(), x())));
    assert_eq!(e.to_string(), "-(ttl * ttl)");
    let e = PacketExpr::And(Box::new(PacketExpr::Or(x(), x())), Box::new(PacketExpr::Not(x())));
    assert_eq!(
        AggCall {
            func: AggFunc::Max,
            arg: e
        }
        .to_string(),
        "max((ttl or ttl) and not ttl)"
    );
}

#[test]
fn times_are_nanoseconds() {
    let rtt = |f| agg(f, BaseVar::Rtt);
    assert_eq!(pred("max(rtt) > 2ms"), gt(rtt(AggFunc::Max), Pred::Num(2e6)));
    assert_eq!(pred("avg(rtt) > 1.5s"), gt(rtt(AggFunc::Avg), Pred::Num(1.5e9)));
    let Pred::Cmp(_, l, _) = pred("count(rtt > 500us) > 3") else {
        panic!("a comparison")
    };
    let Pred::Agg(a) = *l else { panic!("an aggregate") };
    let PacketExpr::Cmp(_, _, r) = a.arg else {
        panic!("a comparison")
    };
    assert_eq!(*r, PacketExpr::Int(500_000));
}
