//! Runs the reference evaluator on generated cases and checks properties
//! that must hold whatever the events and traffic are. This exercises the
//! generators and guards the judge itself. A small classifier of the
//! generated TCP traffic counts what the generators cover and checks the
//! reference's totals.
//!
//! `PROPTEST_CASES` sets the number of cases (default 500, ~11 s unoptimised;
//! 10,000 take ~30 s with `--release` on two cores).

use std::collections::{BTreeMap, BTreeSet};

use clarion_conformance::{
    arb_events, arb_traffic, expected_inputs, parse_traffic, Traffic, TEST_BURST_GAP_NS, TEST_FLOW_TIMEOUT_NS,
};
use clarion_lang::spec::{
    AggCall, AggFunc, BaseVar, CmpOp, EventSpec, Filter, Granularity, PacketExpr, Pred, Scope, Var,
};
use clarion_reference::{evaluate, Config, Input};
use clarion_report::Report;
use clarion_wire::FlowKey;
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
        burst_gap_ns: TEST_BURST_GAP_NS,
        host: "ref".into(),
        worker: 1,
        ..Config::default()
    }
}

fn var(base: BaseVar) -> PacketExpr {
    PacketExpr::Var(Var {
        base,
        last_epoch: false,
    })
}

fn agg(func: AggFunc, arg: PacketExpr) -> AggCall {
    AggCall { func, arg }
}

fn packets_agg() -> AggCall {
    agg(AggFunc::Sum, var(BaseVar::Packets))
}

/// Whether the expression reads `rtt`: it then sees RTT samples, which are not packets.
fn reads_rtt(e: &PacketExpr) -> bool {
    let mut rtt = false;
    e.visit_vars(&mut |v| rtt |= v.base == BaseVar::Rtt);
    rtt
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
    r.values.iter().find(|(k, _)| &**k == key).map(|(_, v)| *v)
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
            .get(&*r.event)
            .ok_or_else(|| TestCaseError::fail("unknown event"))?;
        let i = e.interval_ns;
        prop_assert_eq!(r.window.start_ns % i, 0);
        prop_assert_eq!(r.window.end_ns - r.window.start_ns, i);
        // The aggregates, then the values read outside aggregates, each by its name.
        let want: Vec<String> = e
            .aggregates()
            .iter()
            .map(|a| a.to_string())
            .chain(e.state_values().iter().map(|v| v.to_string()))
            .collect();
        let got: Vec<&str> = r.values.iter().map(|(k, _)| &**k).collect();
        prop_assert_eq!(got, want.iter().map(String::as_str).collect::<Vec<_>>());
        for v in e.state_values() {
            let x = value(r, &v.to_string()).unwrap_or(f64::NAN);
            // Values on packets (or samples): integers; the state never goes below the ISN.
            prop_assert!(x.is_nan() || x.fract() == 0.0, "{} = {}", v, x);
            if matches!(v.base, BaseVar::Seq | BaseVar::Ack | BaseVar::Dup) {
                prop_assert!(x.is_nan() || x >= 0.0, "{} = {}", v, x);
            }
        }
        prop_assert_eq!(&*r.origin.host, "ref");
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
                AggFunc::Count if reads_rtt(&a.arg) => prop_assert!(*v >= 0.0 && v.fract() == 0.0),
                AggFunc::Count => {
                    prop_assert!(*v >= 0.0 && v.fract() == 0.0 && *v <= c.packets as f64);
                    if let Some(n) = n {
                        // The percentage form count(x) / sum(packets) lies in [0, 1]
                        // (unless x reads rtt: RTT samples are counted, not packets).
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
            .get(&(format!("probe-{}", r.event).into(), r.window, r.group))
            .ok_or_else(|| TestCaseError::fail(format!("no probe report for {r:?}")))?;
        prop_assert_eq!(p.completeness, r.completeness);
        // The probe may add `sum(packets)` between the aggregates and the state values.
        for (k, v1) in &r.values {
            let v2 = value(p, k).ok_or_else(|| TestCaseError::fail(format!("probe lacks {k}")))?;
            prop_assert!(
                v1.to_bits() == v2.to_bits() || (v1.is_nan() && v2.is_nan()),
                "{}",
                k
            );
        }
    }
    for p in &probe_reports {
        let e = by_name
            .get(&p.event["probe-".len()..])
            .ok_or_else(|| TestCaseError::fail("unknown probe"))?;
        let n = value(p, "sum(packets)").ok_or_else(|| TestCaseError::fail("probe without sum(packets)"))?;
        prop_assert!(n >= 1.0);
        for (a, (_, v)) in e.aggregates().iter().zip(&p.values) {
            if a.func == AggFunc::Count && !reads_rtt(&a.arg) {
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
    check_tcp_probes(events, &inputs)
}

// ---------------------------------------------------------------- TCP values

/// Values the TCP probe reads outside aggregates: the state and every `X_lastepoch`.
fn tcp_probe_states() -> Vec<Var> {
    let bare = [BaseVar::Seq, BaseVar::Ack, BaseVar::Dup].map(|base| Var {
        base,
        last_epoch: false,
    });
    bare.into_iter()
        .chain(BaseVar::ALL.iter().map(|&base| Var {
            base,
            last_epoch: true,
        }))
        .collect()
}

/// The aggregates the TCP probe reports.
fn tcp_probe_aggs() -> Vec<AggCall> {
    use BaseVar::*;
    let mut out = vec![packets_agg()];
    for b in [IsLost, IsBurst] {
        out.push(agg(AggFunc::Sum, var(b)));
        out.push(agg(AggFunc::Count, var(b)));
    }
    out.push(agg(
        AggFunc::Sum,
        PacketExpr::And(Box::new(var(IsLost)), Box::new(var(IsBurst))),
    ));
    out.push(agg(AggFunc::Count, var(Rtt)));
    out.push(agg(
        AggFunc::Count,
        PacketExpr::Cmp(CmpOp::Lt, Box::new(var(Rtt)), Box::new(PacketExpr::Int(0))),
    ));
    for b in BaseVar::ALL {
        out.push(agg(AggFunc::Min, var(b)));
        out.push(agg(AggFunc::Max, var(b)));
    }
    out
}

/// The event's filters, groups and windows, with an always-true predicate
/// that reads every TCP aggregate of [`tcp_probe_aggs`] and every value of
/// [`tcp_probe_states`].
fn tcp_probe_of(e: &EventSpec) -> EventSpec {
    let terms = tcp_probe_aggs()
        .into_iter()
        .map(Pred::Agg)
        .chain(tcp_probe_states().into_iter().map(Pred::State));
    let all = terms
        .reduce(|l, r| Pred::Or(Box::new(l), Box::new(r)))
        .expect("not empty");
    EventSpec {
        name: format!("tcp-{}", e.name),
        predicate: Pred::Or(Box::new(always()), Box::new(all)),
        ..e.clone()
    }
}

fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// On every group of every window of each event:
/// - `is_lost` and `is_burst` are 0 or 1, so their sums equal their counts;
/// - RTT samples are never negative; `seq`, `ack`, `dup` never below 0;
/// - the bare value of a variable is one of its values in the window
///   (between its min and max, defined when they are);
/// - `X_lastepoch` is the value `X` had in the previous window: the
///   previous window's bare value, or between its min and max of `X`;
///   undefined when the group had no packet there.
fn check_tcp_probes(events: &[EventSpec], inputs: &[Input]) -> Result<(), TestCaseError> {
    let probes: Vec<EventSpec> = events.iter().map(tcp_probe_of).collect();
    let reports = evaluate(&probes, inputs, &config());
    let by_place: BTreeMap<_, &Report> = reports
        .iter()
        .map(|r| ((&*r.event, r.window.start_ns, r.group), r))
        .collect();
    let interval: BTreeMap<String, u64> = probes.iter().map(|p| (p.name.clone(), p.interval_ns)).collect();
    for r in &reports {
        let get = |k: &str| value(r, k).ok_or_else(|| TestCaseError::fail(format!("no {k} in {r:?}")));
        let n = get("sum(packets)")?;
        prop_assert!(n >= 1.0);
        for x in ["is_lost", "is_burst"] {
            let (sum, count) = (get(&format!("sum({x})"))?, get(&format!("count({x})"))?);
            prop_assert_eq!(sum, count, "{} is 0 or 1", x);
            prop_assert!(count <= n);
            let max = get(&format!("max({x})"))?;
            prop_assert!(max.is_nan() || max == 0.0 || max == 1.0, "max({}) = {}", x, max);
            prop_assert!(get("sum(is_lost and is_burst)")? <= sum);
        }
        prop_assert_eq!(get("count(rtt < 0)")?, 0.0);
        for x in ["seq", "ack", "dup", "rtt"] {
            let lo = get(&format!("min({x})"))?;
            prop_assert!(lo.is_nan() || lo >= 0.0, "min({}) = {}", x, lo);
        }
        // Bare values: one of the window's values.
        for x in ["seq", "ack", "dup"] {
            let (v, lo, hi) = (get(x)?, get(&format!("min({x})"))?, get(&format!("max({x})"))?);
            prop_assert_eq!(v.is_nan(), lo.is_nan(), "{} defined with min({})", x, x);
            prop_assert!(
                v.is_nan() || (lo <= v && v <= hi),
                "{} = {} outside [{}, {}]",
                x,
                v,
                lo,
                hi
            );
        }
        // `X_lastepoch`: the previous window of the same group.
        let i = interval[&*r.event];
        let previous = r
            .window
            .start_ns
            .checked_sub(i)
            .and_then(|start| by_place.get(&(&*r.event, start, r.group)));
        for b in BaseVar::ALL {
            let x = b.name();
            let v = get(&format!("{x}_lastepoch"))?;
            match previous {
                None => prop_assert!(v.is_nan(), "{}_lastepoch = {} without a previous window", x, v),
                Some(p) => {
                    let pv = |k: &str| value(p, k).unwrap_or(f64::NAN);
                    if b.is_state() {
                        prop_assert!(same(v, pv(x)), "{}_lastepoch = {}, was {}", x, v, pv(x));
                    }
                    let (lo, hi) = (pv(&format!("min({x})")), pv(&format!("max({x})")));
                    prop_assert_eq!(
                        v.is_nan(),
                        lo.is_nan(),
                        "{}_lastepoch defined with min({}) before",
                        x,
                        x
                    );
                    prop_assert!(
                        v.is_nan() || (lo <= v && v <= hi),
                        "{}_lastepoch = {} outside [{}, {}]",
                        x,
                        v,
                        lo,
                        hi
                    );
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
                capture: None,
                priority: None,
                name: format!("grid-{gi}-{ms}"),
                filters: vec![Filter::default()],
                predicate: always(),
                granularity: g,
                interval_ns: ms * 1_000_000,
                scope: Scope::Host,
                drill_downs: Vec::new(),
                on_demand: false,
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
            .entry((&*r.event, r.window.start_ns))
            .or_insert((0.0, 0));
        entry.0 += n;
        entry.1 = r.completeness.packets;
        if windows_seen.insert((&*r.event, r.window.start_ns)) {
            *packets_by_event.entry(&*r.event).or_default() += r.completeness.packets;
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

// ---------------------------------------------------------------- a classifier of generated TCP traffic

/// What the generated traffic does to TCP connection state, counted by a
/// small replay of `docs/semantics.md` over the generator's own idea of
/// the frames ([`expected_inputs`]), independent of the reference.
#[derive(Clone, Copy, Debug, Default)]
struct TcpCoverage {
    /// TCP packets with a TCP header.
    segments: u64,
    /// `is_lost = 1`.
    retransmissions: u64,
    /// Retransmissions of exactly a first transmission.
    exact_retransmissions: u64,
    /// Retransmissions overlapping a first transmission without matching it.
    partial_retransmissions: u64,
    /// Retransmissions that also carry new bytes (end beyond `snd_max`).
    extending_retransmissions: u64,
    /// Retransmissions while the flow had duplicate acks (`dup > 0`).
    fast_retransmissions: u64,
    /// First transmissions leaving a hole (a later segment before an earlier one).
    holes: u64,
    /// One byte at `snd_max − 1`: not lost.
    keep_alives: u64,
    /// No byte at `snd_max − 1`.
    pure_ack_keep_alives: u64,
    dup_acks: u64,
    rtt_samples: u64,
    /// RTT samples of 0 ns (the ack at the same packet time as the data).
    zero_rtt_samples: u64,
    /// Acks of data with a retransmitted first transmission: no sample (Karn).
    karn: u64,
    /// Acks removing several first transmissions at once.
    delayed_acks: u64,
    /// Acks whose reverse flow has no TCP state or is not alive.
    acks_unheard: u64,
    /// Acks beyond the reverse flow's `snd_max`.
    acks_beyond: u64,
    /// Segments whose sequence number wrapped past 2³² since the ISN.
    wraps: u64,
    /// SYNs with another ISN: the state starts afresh.
    new_isn: u64,
    /// TCP flows whose state was forgotten after an idle gap.
    idle_restarts: u64,
    syn_without_wscale: u64,
    syn_without_mss: u64,
    fin: u64,
    rst: u64,
    /// Packets (all IP) with `is_burst = 1`, and those exactly the burst gap after the previous.
    bursts: u64,
    at_burst_gap: u64,
    /// Packets with a previous packet in their flow's life but `is_burst = 0`.
    gaps: u64,
    /// The longest list of first transmissions awaiting their ack (the monitor lists 1024).
    max_listed: usize,
}

#[derive(Default)]
struct Conn {
    isn: u32,
    snd_max: i64,
    snd_una: i64,
    dup: i64,
    mss: i64,
    /// (start, end, time, retransmitted)
    list: Vec<(i64, i64, u64, bool)>,
    /// Every first transmission of the life.
    firsts: Vec<(i64, i64)>,
}

impl Conn {
    fn new(isn: u32) -> Self {
        Conn {
            isn,
            ..Conn::default()
        }
    }

    fn unwrap(&self, x: u32) -> i64 {
        let here = self.isn.wrapping_add(self.snd_max as u32);
        self.snd_max + i64::from(x.wrapping_sub(here) as i32)
    }
}

struct Life {
    last: u64,
    conn: Option<Conn>,
}

fn classify(traffic: &Traffic, cov: &mut TcpCoverage) {
    use clarion_wire::tcp_flags::{ACK, FIN, RST, SYN};
    let mut flows: BTreeMap<FlowKey, Life> = BTreeMap::new();
    let mut now = 0u64;
    for input in expected_inputs(traffic) {
        now = now.max(input.ts_ns());
        let Input::Packet(p) = input else { continue };
        let t = now;
        let previous = flows
            .get(&p.key)
            .map(|l| l.last)
            .filter(|&l| t - l <= TEST_FLOW_TIMEOUT_NS);
        match previous {
            Some(l) if t - l <= TEST_BURST_GAP_NS => {
                cov.bursts += 1;
                cov.at_burst_gap += u64::from(t - l == TEST_BURST_GAP_NS);
            }
            Some(_) => cov.gaps += 1,
            None => {
                if let Some(old) = flows.insert(p.key, Life { last: t, conn: None }) {
                    cov.idle_restarts += u64::from(old.conn.is_some());
                }
            }
        }
        let life = flows.get_mut(&p.key).expect("inserted");
        life.last = t;
        let Some(tcp) = p.tcp else { continue };
        cov.segments += 1;
        let has = |bit: u8| tcp.flags & bit != 0;
        if has(SYN) {
            cov.syn_without_wscale += u64::from(tcp.wscale.is_none());
            cov.syn_without_mss += u64::from(tcp.mss.is_none());
        }
        cov.fin += u64::from(has(FIN));
        cov.rst += u64::from(has(RST));
        let payload = i64::from(p.volume);
        let c = life.conn.get_or_insert_with(|| Conn::new(tcp.seq));
        if has(SYN) && tcp.seq != c.isn {
            *c = Conn::new(tcp.seq);
            cov.new_isn += 1;
        }
        let len = payload + i64::from(has(SYN)) + i64::from(has(FIN));
        let start = c.unwrap(tcp.seq);
        let end = start + len;
        cov.wraps += u64::from(i64::from(c.isn) + start >= 1 << 32);
        let probe = !has(SYN) && !has(FIN) && payload == 1 && end == c.snd_max;
        cov.keep_alives += u64::from(probe);
        cov.pure_ack_keep_alives += u64::from(len == 0 && start == c.snd_max - 1 && c.snd_max > 0);
        let lost = len > 0 && start < c.snd_max && !probe;
        if lost {
            cov.retransmissions += 1;
            cov.exact_retransmissions += u64::from(c.firsts.contains(&(start, end)));
            cov.partial_retransmissions += u64::from(
                c.firsts
                    .iter()
                    .any(|&(s, e)| s < end && start < e && (s, e) != (start, end)),
            );
            cov.extending_retransmissions += u64::from(end > c.snd_max);
            cov.fast_retransmissions += u64::from(c.dup > 0);
            for f in &mut c.list {
                if f.0 < end && start < f.1 {
                    f.3 = true;
                }
            }
        }
        if len > 0 && start >= c.snd_max {
            cov.holes += u64::from(start > c.snd_max);
            c.list.push((start, end, t, false));
            c.firsts.push((start, end));
            cov.max_listed = cov.max_listed.max(c.list.len());
        }
        c.snd_max = c.snd_max.max(end);
        c.mss = c.mss.max(payload);
        if !has(ACK) {
            continue;
        }
        // The reverse flow (the flow itself for a connection from a socket to itself).
        let r = flows
            .get_mut(&p.key.reversed())
            .filter(|l| t - l.last <= TEST_FLOW_TIMEOUT_NS)
            .and_then(|l| l.conn.as_mut());
        let Some(r) = r else {
            cov.acks_unheard += 1;
            continue;
        };
        let a = r.unwrap(tcp.ack);
        cov.acks_beyond += u64::from(a > r.snd_max);
        if a > r.snd_una {
            let removed: Vec<_> = r.list.iter().filter(|f| f.1 <= a).copied().collect();
            r.list.retain(|f| f.1 > a);
            cov.delayed_acks += u64::from(removed.len() >= 2);
            if !removed.is_empty() {
                if removed.iter().any(|f| f.3) {
                    cov.karn += 1;
                } else {
                    cov.rtt_samples += 1;
                    let latest = removed.iter().map(|f| f.2).max().unwrap_or(t);
                    cov.zero_rtt_samples += u64::from(latest == t);
                }
            }
            r.dup = (r.dup - (a - r.snd_una)).max(0);
            r.snd_una = a;
        } else if a == r.snd_una && payload == 0 && !has(SYN | FIN | RST) && r.snd_max > r.snd_una {
            cov.dup_acks += 1;
            r.dup += r.mss;
        }
    }
}

/// Match-all, one group, totals of the classifier's counts.
fn totals_event() -> EventSpec {
    use BaseVar::*;
    let rtt_defined = PacketExpr::Cmp(CmpOp::Ge, Box::new(var(Rtt)), Box::new(PacketExpr::Int(0)));
    let terms = [
        agg(AggFunc::Sum, var(IsLost)),
        agg(AggFunc::Count, rtt_defined),
        agg(AggFunc::Sum, var(IsBurst)),
    ];
    EventSpec {
        capture: None,
        priority: None,
        name: "totals".into(),
        filters: vec![Filter::default()],
        predicate: terms
            .into_iter()
            .map(Pred::Agg)
            .fold(always(), |l, r| Pred::Or(Box::new(l), Box::new(r))),
        granularity: Granularity::default(),
        interval_ns: 10_000_000,
        scope: Scope::Host,
        drill_downs: Vec::new(),
        on_demand: false,
    }
}

/// The classifier and the reference agree on totals: retransmissions, RTT samples, bursts.
#[test]
fn classifier_agrees_with_reference_on_totals() {
    runner()
        .run(&arb_traffic(MAX_PACKETS), |t| {
            let mut cov = TcpCoverage::default();
            classify(&t, &mut cov);
            let reports = evaluate(&[totals_event()], &parse_traffic(&t), &config());
            let total = |k: &str| reports.iter().filter_map(|r| value(r, k)).sum::<f64>();
            prop_assert_eq!(total("sum(is_lost)"), cov.retransmissions as f64);
            prop_assert_eq!(total("count(rtt >= 0)"), cov.rtt_samples as f64);
            prop_assert_eq!(total("sum(is_burst)"), cov.bursts as f64);
            Ok(())
        })
        .unwrap();
}

fn coverage_cases() -> usize {
    std::env::var("COVERAGE_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

/// The generators are worth something only if they produce the interesting
/// situations often enough: predicates that fire sometimes but not always,
/// out-of-order frames, malformed and non-IP frames, flow restarts, and
/// every situation of TCP connection state; events that read the TCP
/// variables, in aggregates and outside them, and see them defined.
///
/// `COVERAGE_CASES` sets the number of cases (default 200).
#[test]
fn generators_cover_the_interesting_cases() {
    let cases = coverage_cases();
    let mut runner = TestRunner::deterministic();
    let strategy = (arb_events(MAX_EVENTS), arb_traffic(MAX_PACKETS));
    let (mut fired, mut candidates) = (0usize, 0usize);
    let (mut events_firing, mut events_total) = (0usize, 0usize);
    let (mut tcp_firing, mut tcp_total) = (0usize, 0usize);
    let (mut out_of_order, mut malformed, mut not_ip, mut v6, mut tagged) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut frames = 0usize;
    let mut cov = TcpCoverage::default();
    // Events by what they read, and reports with those values defined.
    let mut uses: BTreeMap<&str, u64> = BTreeMap::new();
    let mut defined: BTreeMap<String, u64> = BTreeMap::new();
    for _ in 0..cases {
        let (events, traffic) = strategy.new_tree(&mut runner).expect("strategy").current();
        classify(&traffic, &mut cov);
        frames += traffic.frames.len();
        let inputs = parse_traffic(&traffic);
        let reports = evaluate(&events, &inputs, &config());
        let probes: Vec<EventSpec> = events.iter().map(probe_of).collect();
        let probe_reports = evaluate(&probes, &inputs, &config());
        fired += reports.len();
        candidates += probe_reports.len();
        for e in &events {
            let mut reads = BTreeSet::new();
            e.predicate.visit_vars(&mut |v| {
                reads.insert(v.base.name());
            });
            for name in &reads {
                *uses.entry(name).or_default() += 1;
            }
            let states = e.state_values();
            *uses.entry("(state value)").or_default() += u64::from(!states.is_empty());
            *uses.entry("(X_lastepoch)").or_default() += u64::from(states.iter().any(|v| v.last_epoch));
            *uses.entry("(proto = tcp)").or_default() += u64::from(
                e.filters
                    .iter()
                    .all(|f| f.proto == Some(clarion_wire::proto::TCP)),
            );
            let probe = format!("probe-{}", e.name);
            if probe_reports.iter().any(|r| *r.event == *probe) {
                events_total += 1;
                let firing = reports.iter().any(|r| *r.event == *e.name);
                events_firing += usize::from(firing);
                if e.needs_connection_state() {
                    tcp_total += 1;
                    tcp_firing += usize::from(firing);
                }
            }
        }
        for r in &probe_reports {
            for (k, v) in &r.values {
                let tcp = ["is_lost", "rtt", "seq", "ack", "dup"]
                    .iter()
                    .any(|x| k.contains(x));
                if tcp && !v.is_nan() {
                    let kind = if k.contains('(') {
                        "(aggregate)".to_string()
                    } else {
                        k.to_string()
                    };
                    *defined.entry(kind).or_default() += 1;
                }
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
    let tcp_rate = tcp_firing as f64 / tcp_total as f64;
    eprintln!(
        "{cases} cases, {frames} frames; fired {fired}/{candidates} ({rate:.2}); events firing \
         {events_firing}/{events_total} ({event_rate:.2}), reading TCP state {tcp_firing}/{tcp_total} \
         ({tcp_rate:.2}); out of order {out_of_order}, malformed {malformed}, not IP {not_ip}, v6 {v6}, \
         tagged {tagged}"
    );
    eprintln!("{cov:#?}");
    eprintln!("events reading: {uses:?}");
    eprintln!("defined TCP values in probe reports: {defined:?}");
    assert!((0.05..=0.95).contains(&rate), "group firing rate {rate}");
    assert!(
        (0.2..=0.98).contains(&event_rate),
        "event firing rate {event_rate}"
    );
    assert!(
        (0.2..=0.98).contains(&tcp_rate),
        "firing rate of events reading TCP state {tcp_rate}"
    );
    // Thresholds are for 200 cases, scaled.
    let need = |n: u64| n * cases as u64 / 200;
    for (what, n) in [
        ("out of order", out_of_order),
        ("malformed", malformed),
        ("not ip", not_ip),
        ("v6", v6),
        ("tagged", tagged),
    ] {
        assert!(n > need(100), "{what}: {n}");
    }
    let c = cov;
    for (what, n, min) in [
        ("retransmissions", c.retransmissions, 500),
        ("exact retransmissions", c.exact_retransmissions, 100),
        ("partial retransmissions", c.partial_retransmissions, 50),
        ("extending retransmissions", c.extending_retransmissions, 50),
        ("fast retransmissions", c.fast_retransmissions, 50),
        ("holes", c.holes, 50),
        ("keep-alives", c.keep_alives, 50),
        ("pure-ack keep-alives", c.pure_ack_keep_alives, 50),
        ("dup acks", c.dup_acks, 200),
        ("rtt samples", c.rtt_samples, 500),
        ("zero rtt samples", c.zero_rtt_samples, 5),
        ("karn", c.karn, 50),
        ("delayed acks", c.delayed_acks, 100),
        ("acks unheard", c.acks_unheard, 100),
        ("acks beyond", c.acks_beyond, 20),
        ("wraps", c.wraps, 200),
        ("new isn", c.new_isn, 20),
        ("idle restarts", c.idle_restarts, 20),
        ("syn without wscale", c.syn_without_wscale, 20),
        ("syn without mss", c.syn_without_mss, 20),
        ("fin", c.fin, 50),
        ("rst", c.rst, 20),
        ("bursts", c.bursts, 1000),
        ("at the burst gap", c.at_burst_gap, 20),
        ("gaps", c.gaps, 1000),
    ] {
        assert!(n >= need(min), "{what}: {n}");
    }
    // Far from the monitor's bound on listed first transmissions: no case depends on it.
    assert!(c.max_listed <= 512, "{} first transmissions listed", c.max_listed);
    for v in [
        "is_lost",
        "is_burst",
        "rtt",
        "seq",
        "ack",
        "dup",
        "(state value)",
        "(X_lastepoch)",
        "(proto = tcp)",
    ] {
        let n = uses.get(v).copied().unwrap_or(0);
        assert!(n >= need(30), "events reading {v}: {n}");
    }
    for v in [
        "(aggregate)",
        "seq",
        "ack",
        "dup",
        "ack_lastepoch",
        "seq_lastepoch",
    ] {
        let n = defined.get(v).copied().unwrap_or(0);
        assert!(n >= need(100), "probe reports with {v} defined: {n}");
    }
}
