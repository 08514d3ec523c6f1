//! The six example events of the Trumpet paper (Table 2), as written in
//! `examples/paper.clarion`.

use std::net::IpAddr;

use clarion_lang::spec::{
    AggFunc, BaseVar, EventSpec, Filter, Granularity, IpPrefix, PortRange, Pred, PrefixLens, Var,
};
use clarion_lang::{check, lower, parse};

fn source() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/paper.clarion");
    std::fs::read_to_string(path).expect("examples/paper.clarion")
}

fn specs() -> Vec<EventSpec> {
    let src = source();
    check(&src).unwrap_or_else(|d| panic!("{}", d.render("paper.clarion", &src, false)))
}

fn prefix(s: &str, len: u8) -> Option<IpPrefix> {
    Some(IpPrefix {
        addr: s.parse::<IpAddr>().expect("address"),
        len,
    })
}

const MS: u64 = 1_000_000;

#[test]
fn all_six_parse_print_and_round_trip() {
    let src = source();
    let file = parse(&src).unwrap();
    assert_eq!(file.events.len(), 6);
    let printed = file.to_string();
    let again = parse(&printed).unwrap();
    assert!(file.eq_ignoring_spans(&again), "{printed}");
    assert_eq!(again.to_string(), printed, "printing is idempotent");
    assert_eq!(lower(&again).unwrap(), specs());
}

#[test]
fn names_and_intervals() {
    let got: Vec<(String, u64)> = specs().into_iter().map(|s| (s.name, s.interval_ns)).collect();
    let want = [
        ("rack_heavy_flows", 10 * MS),
        ("service_burst_loss", 10 * MS),
        ("tcp_congestion", 10 * MS),
        ("service_load_spike", 10 * MS),
        ("service_reachability_loss", 10 * MS),
        ("tenant_dependencies", 1000 * MS),
    ];
    assert_eq!(got, want.map(|(n, i)| (n.to_string(), i)));
}

#[test]
fn filters() {
    let s = specs();
    let f = |s: &EventSpec| s.filters.clone();
    assert_eq!(
        f(&s[0]),
        vec![Filter {
            dst_ip: prefix("10.0.128.0", 24),
            ..Filter::default()
        }]
    );
    assert_eq!(
        f(&s[1]),
        vec![Filter {
            src_ip: prefix("10.0.128.0", 24),
            ..Filter::default()
        }]
    );
    assert_eq!(
        f(&s[2]),
        vec![Filter {
            proto: Some(6),
            ..Filter::default()
        }]
    );
    assert_eq!(
        f(&s[3]),
        vec![Filter {
            dst_ip: prefix("10.0.128.0", 24),
            dst_port: Some(PortRange { lo: 80, hi: 80 }),
            ..Filter::default()
        }]
    );
    assert_eq!(
        f(&s[4]),
        vec![Filter {
            src_ip: prefix("10.0.128.0", 24),
            dst_ip: prefix("10.20.93.0", 24),
            ..Filter::default()
        }]
    );
    assert_eq!(
        f(&s[5]),
        vec![Filter {
            src_ip: prefix("10.0.128.0", 20),
            ..Filter::default()
        }]
    );
}

#[test]
fn predicates() {
    let text: Vec<String> = specs().iter().map(|s| s.predicate.to_string()).collect();
    assert_eq!(
        text,
        [
            "sum(volume) > 125000",
            "sum(is_lost and is_burst) / sum(packets) > 0.1",
            "1 - (ack - ack_lastepoch + dup) / (seq_lastepoch - ack_lastepoch) > 0.5",
            "sum(volume) > 100000000",
            "sum(is_lost) > 100",
            "sum(volume) > 10000000000",
        ]
    );
    let s = specs();
    let aggs: Vec<Vec<String>> = s
        .iter()
        .map(|s| s.aggregates().iter().map(|a| a.to_string()).collect())
        .collect();
    assert_eq!(aggs[1], ["sum(is_lost and is_burst)", "sum(packets)"]);
    assert!(aggs[2].is_empty());
    assert!(
        matches!(&s[0].predicate, Pred::Cmp(_, l, _) if matches!(&**l, Pred::Agg(a) if a.func == AggFunc::Sum))
    );
}

#[test]
fn granularities() {
    let g: Vec<Granularity> = specs().iter().map(|s| s.granularity).collect();
    let l = |n| Some(PrefixLens { v4: n, v6: n });
    assert_eq!(g[0], Granularity::FIVE_TUPLE);
    assert_eq!(g[1], Granularity::FIVE_TUPLE);
    assert_eq!(g[2], Granularity::FIVE_TUPLE);
    assert_eq!(
        g[3],
        Granularity {
            dst_ip: l(24),
            ..Granularity::default()
        }
    );
    assert_eq!(
        g[4],
        Granularity {
            src_ip: Some(PrefixLens::FULL),
            dst_ip: Some(PrefixLens::FULL),
            ..Granularity::default()
        }
    );
    assert_eq!(
        g[5],
        Granularity {
            src_ip: l(24),
            dst_ip: l(24),
            ..Granularity::default()
        }
    );
}

#[test]
fn tcp_state_events_are_exactly_the_connection_state_ones() {
    for s in specs() {
        let tcp_state = [
            "service_burst_loss",
            "tcp_congestion",
            "service_reachability_loss",
        ]
        .contains(&s.name.as_str());
        assert_eq!(s.needs_connection_state(), tcp_state, "{}", s.name);
        assert!(
            s.unsupported_variables().is_empty(),
            "{}: every variable is computed",
            s.name
        );
    }
    let congestion = &specs()[2];
    let var = |base, last_epoch| Var { base, last_epoch };
    assert_eq!(
        congestion.state_values(),
        vec![
            var(BaseVar::Ack, false),
            var(BaseVar::Ack, true),
            var(BaseVar::Dup, false),
            var(BaseVar::Seq, true),
        ]
    );
}
