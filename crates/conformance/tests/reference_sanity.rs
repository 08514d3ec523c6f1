//! Runs the reference evaluator on generated cases and checks properties
//! that must hold whatever the events and traffic are. This exercises the
//! generators and guards the judge itself.
//!
//! `PROPTEST_CASES` sets the number of cases (default 500, ~8 s unoptimised;
//! 10,000 take ~40 s with `--release`).

use std::collections::{BTreeMap, BTreeSet};

use clarion_conformance::{
    arb_events, arb_traffic, expected_inputs, parse_traffic, Traffic, TEST_FLOW_TIMEOUT_NS,
};
use clarion_lang::spec::{
    AggCall, AggFunc, BaseVar, CmpOp, EventSpec, Filter, Granularity, PacketExpr, Pred, Var,
};
use clarion_reference::{evaluate, Config, Input};
use clarion_report::Report;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

const MAX_EVENTS: usize = 4;
const MAX_PACKETS: usize = 300;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(500)
}

fn config() -> Config {
    Config {
        flow_timeout_ns: TEST_FLOW_TIMEOUT_NS,
        host: "ref".into(),
        worker: 1,
    }
}

fn packets_agg() -> AggCall {
    AggCall {
        func: AggFunc::Sum,
        arg: PacketExpr::Var(Var {
            base: BaseVar::Packets,
            last_epoch: false,
        }),
    }
}

/// `sum(packets) > 0`: true for every group that exists.
fn always() -> Pred {
    Pred::Cmp(
        CmpOp::Gt,
        Box::new(Pred::Agg(packets_agg())),
        Box::new(Pred::Num(0.0)),
    )
}

/// The event with a predicate that always holds but keeps the original's aggregates first.
fn probe_of(e: &EventSpec) -> EventSpec {
    EventSpec {
        name: format!("probe-{}", e.name),
        predicate: Pred::Or(Box::new(e.predicate.clone()), Box::new(always())),
        ..e.clone()
    }
}

fn value(r: &Report, key: &str) -> Option<f64> {
    r.values.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

fn check_case(events: &[EventSpec], traffic: &Traffic) -> Result<(), TestCaseError> {
    for e in events {
        // Generated events use implemented variables only, so the monitor must accept them too.
        prop_assert_eq!(clarion_reference::unsupported(e), None, "{}", e.predicate);
    }
    let inputs = parse_traffic(traffic);
    let cfg = config();
    let reports = evaluate(events, &inputs, &cfg);
    let ip_packets = inputs.iter().filter(|i| matches!(i, Input::Packet(_))).count() as u64;
    // Time runs from the first input (later ones earlier than it count at the running maximum).
    let first_time = inputs.first().map(Input::ts_ns);
    let last_time = inputs.iter().map(Input::ts_ns).max();

    // Canonical order, no duplicates.
    let keys: Vec<_> = reports.iter().map(Report::sort_key).collect();
    prop_assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "reports not strictly sorted"
    );

    let by_name: BTreeMap<&str, &EventSpec> = events.iter().map(|e| (e.name.as_str(), e)).collect();
    for r in &reports {
        let e = by_name
            .get(r.event.as_str())
            .ok_or_else(|| TestCaseError::fail("unknown event"))?;
        let i = e.interval_ns;
        prop_assert_eq!(r.window.start_ns % i, 0);
        prop_assert_eq!(r.window.end_ns - r.window.start_ns, i);
        let want: Vec<String> = e.aggregates().iter().map(|a| a.to_string()).collect();
        let got: Vec<&String> = r.values.iter().map(|(k, _)| k).collect();
        prop_assert_eq!(got, want.iter().collect::<Vec<_>>());
        prop_assert_eq!(&r.origin.host, "ref");
        prop_assert_eq!(r.origin.worker, 1);
        let c = r.completeness;
        prop_assert!(c.packets >= 1 && c.packets <= ip_packets);
        prop_assert_eq!(c.dropped, 0);
        prop_assert_eq!(c.untracked, 0);
        prop_assert!(c.out_of_order <= c.packets + c.malformed + c.not_ip);
        // Complete: the input neither started nor ended inside the window.
        let inside = first_time.is_some_and(|t| t <= r.window.start_ns)
            && last_time.is_some_and(|t| r.window.end_ns <= t);
        prop_assert_eq!(c.complete, inside);
        // Aggregates over the group's packets.
        let n = value(r, "sum(packets)");
        for (a, (_, v)) in e.aggregates().iter().zip(&r.values) {
            match a.func {
                AggFunc::Count => {
                    prop_assert!(*v >= 0.0 && v.fract() == 0.0 && *v <= c.packets as f64);
                    if let Some(n) = n {
                        // The percentage form count(x) / sum(packets) lies in [0, 1].
                        prop_assert!(*v <= n, "count {} above packets {}", v, n);
                    }
                }
                AggFunc::Stddev => prop_assert!(v.is_nan() || *v >= 0.0),
                AggFunc::Sum | AggFunc::Min | AggFunc::Max | AggFunc::Avg => prop_assert!(!v.is_infinite()),
            }
        }
        if let Some(n) = n {
            prop_assert!(n >= 1.0 && n <= c.packets as f64);
        }
    }

    // Probes: the same events with always-true predicates. Every group of every
    // window is reported, the original's values come first and are identical,
    // and the original fired only for groups the probe has.
    let probes: Vec<EventSpec> = events.iter().map(probe_of).collect();
    let probe_reports = evaluate(&probes, &inputs, &cfg);
    let probe_index: BTreeMap<_, &Report> = probe_reports
        .iter()
        .map(|r| ((r.event.clone(), r.window, r.group), r))
        .collect();
    for r in &reports {
        let p = probe_index
            .get(&(format!("probe-{}", r.event), r.window, r.group))
            .ok_or_else(|| TestCaseError::fail(format!("no probe report for {r:?}")))?;
        prop_assert_eq!(p.completeness, r.completeness);
        for ((k1, v1), (k2, v2)) in r.values.iter().zip(&p.values) {
            prop_assert_eq!(k1, k2);
            prop_assert!(v1.to_bits() == v2.to_bits() || (v1.is_nan() && v2.is_nan()));
        }
    }
    for p in &probe_reports {
        let e = by_name
            .get(&p.event["probe-".len()..])
            .ok_or_else(|| TestCaseError::fail("unknown probe"))?;
        let n = value(p, "sum(packets)").ok_or_else(|| TestCaseError::fail("probe without sum(packets)"))?;
        prop_assert!(n >= 1.0);
        for (a, (_, v)) in e.aggregates().iter().zip(&p.values) {
            if a.func == AggFunc::Count {
                prop_assert!(*v <= n);
            }
            if matches!(
                a.func,
                AggFunc::Min | AggFunc::Max | AggFunc::Avg | AggFunc::Stddev
            ) {
                // Undefined exactly when the argument is undefined on every packet; min ≤ avg ≤ max.
                let min = value(
                    p,
                    &AggCall {
                        func: AggFunc::Min,
                        arg: a.arg.clone(),
                    }
                    .to_string(),
                );
                let max = value(
                    p,
                    &AggCall {
                        func: AggFunc::Max,
                        arg: a.arg.clone(),
                    }
                    .to_string(),
                );
                if let (Some(lo), Some(hi)) = (min, max) {
                    prop_assert_eq!(lo.is_nan(), v.is_nan());
                    if !v.is_nan() {
                        let spread = hi - lo;
                        match a.func {
                            AggFunc::Avg => {
                                prop_assert!(*v >= lo - 1e-9 * lo.abs() && *v <= hi + 1e-9 * hi.abs())
                            }
                            AggFunc::Stddev => prop_assert!(*v <= spread / 2.0 + 1e-9 * spread.max(1.0)),
                            _ => prop_assert!(lo <= hi),
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// Match-all events with an always-true predicate, one per interval and granularity.
fn grid_events() -> Vec<EventSpec> {
    let mut out = Vec::new();
    for (gi, g) in [Granularity::default(), Granularity::FIVE_TUPLE]
        .into_iter()
        .enumerate()
    {
        // A few intervals suffice here (each 1 ms grid event is hundreds of reports per case).
        for ms in [1, 3, 10, 25] {
            out.push(EventSpec {
                name: format!("grid-{gi}-{ms}"),
                filters: vec![Filter::default()],
                predicate: always(),
                granularity: g,
                interval_ns: ms * 1_000_000,
            });
        }
    }
    out
}

/// Over each interval's grid, the windows' completeness counts add up to the input,
/// and groups partition each window's packets.
fn check_grid(traffic: &Traffic) -> Result<(), TestCaseError> {
    let inputs = parse_traffic(traffic);
    let ip_packets = inputs.iter().filter(|i| matches!(i, Input::Packet(_))).count() as u64;
    let reports = evaluate(&grid_events(), &inputs, &config());
    let mut packets_by_event: BTreeMap<&str, u64> = BTreeMap::new();
    let mut windows_seen: BTreeSet<(&str, u64)> = BTreeSet::new();
    let mut group_sums: BTreeMap<(&str, u64), (f64, u64)> = BTreeMap::new();
    for r in &reports {
        let n = value(r, "sum(packets)").ok_or_else(|| TestCaseError::fail("no sum(packets)"))?;
        let entry = group_sums
            .entry((r.event.as_str(), r.window.start_ns))
            .or_insert((0.0, 0));
        entry.0 += n;
        entry.1 = r.completeness.packets;
        if windows_seen.insert((r.event.as_str(), r.window.start_ns)) {
            *packets_by_event.entry(r.event.as_str()).or_default() += r.completeness.packets;
        }
    }
    for e in grid_events() {
        let total = packets_by_event.get(e.name.as_str()).copied().unwrap_or(0);
        prop_assert_eq!(total, ip_packets, "event {}", e.name);
    }
    for ((event, start), (sum, packets)) in group_sums {
        prop_assert_eq!(sum, packets as f64, "{} window {}", event, start);
    }
    Ok(())
}

fn runner() -> TestRunner {
    TestRunner::new(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })
}

#[test]
fn reference_reports_are_consistent() {
    let strategy = (arb_events(MAX_EVENTS), arb_traffic(MAX_PACKETS));
    runner()
        .run(&strategy, |(events, traffic)| check_case(&events, &traffic))
        .unwrap();
}

#[test]
fn completeness_and_groups_partition_the_input() {
    runner()
        .run(&arb_traffic(MAX_PACKETS), |t| check_grid(&t))
        .unwrap();
}

#[test]
fn parser_agrees_with_the_generator() {
    runner()
        .run(&arb_traffic(MAX_PACKETS), |t| {
            prop_assert_eq!(t.frames.len(), t.plans.len());
            let parsed = parse_traffic(&t);
            let expected = expected_inputs(&t);
            for (i, (p, e)) in parsed.iter().zip(&expected).enumerate() {
                prop_assert_eq!(p, e, "frame {}: {:?}", i, &t.plans[i]);
            }
            prop_assert_eq!(parsed.len(), expected.len());
            Ok(())
        })
        .unwrap();
}

/// The generators are worth something only if they produce the interesting
/// situations often enough: predicates that fire sometimes but not always,
/// out-of-order frames, malformed and non-IP frames, flow restarts.
#[test]
fn generators_cover_the_interesting_cases() {
    let mut runner = TestRunner::deterministic();
    let strategy = (arb_events(MAX_EVENTS), arb_traffic(MAX_PACKETS));
    let (mut fired, mut candidates) = (0usize, 0usize);
    let (mut events_firing, mut events_total) = (0usize, 0usize);
    let (mut out_of_order, mut malformed, mut not_ip, mut v6, mut tagged) = (0u64, 0u64, 0u64, 0u64, 0u64);
    for _ in 0..200 {
        let (events, traffic) = strategy.new_tree(&mut runner).expect("strategy").current();
        let inputs = parse_traffic(&traffic);
        let reports = evaluate(&events, &inputs, &config());
        let probes: Vec<EventSpec> = events.iter().map(probe_of).collect();
        let probe_reports = evaluate(&probes, &inputs, &config());
        fired += reports.len();
        candidates += probe_reports.len();
        for e in &events {
            let probe = format!("probe-{}", e.name);
            let some = probe_reports.iter().any(|r| r.event == probe);
            if some {
                events_total += 1;
                events_firing += usize::from(reports.iter().any(|r| r.event == e.name));
            }
        }
        let mut max = 0;
        for i in &inputs {
            out_of_order += u64::from(i.ts_ns() < max);
            max = max.max(i.ts_ns());
            match i {
                Input::Malformed { .. } => malformed += 1,
                Input::NotIp { .. } => not_ip += 1,
                Input::Packet(p) => {
                    v6 += u64::from(p.key.is_ipv6());
                    tagged += u64::from(p.key.has_vlan());
                }
            }
        }
    }
    let rate = fired as f64 / candidates as f64;
    let event_rate = events_firing as f64 / events_total as f64;
    eprintln!(
        "fired {fired}/{candidates} ({rate:.2}); events firing {events_firing}/{events_total} ({event_rate:.2}); \
         out of order {out_of_order}, malformed {malformed}, not IP {not_ip}, v6 {v6}, tagged {tagged}"
    );
    assert!((0.05..=0.95).contains(&rate), "group firing rate {rate}");
    assert!(
        (0.2..=0.98).contains(&event_rate),
        "event firing rate {event_rate}"
    );
    for (what, n) in [
        ("out of order", out_of_order),
        ("malformed", malformed),
        ("not ip", not_ip),
        ("v6", v6),
        ("tagged", tagged),
    ] {
        assert!(n > 100, "{what}: {n}");
    }
}
