//! The monitor against the reference evaluator on generated events and
//! traffic: same reports — events, windows, groups, values (bit for bit),
//! completeness — or the case fails and proptest shrinks it.
//!
//! Each case also runs the monitor with its sweep in tiny bounded steps
//! interleaved with the packets, which must not change a single report.
//!
//! `PROPTEST_CASES` sets the number of cases (default 10,000).

mod common;

use clarion_conformance::{
    arb_drill_down_events, arb_events, arb_traffic, parse_traffic, TEST_BURST_GAP_NS, TEST_FLOW_TIMEOUT_NS,
};
use clarion_engine::{Monitor, MonitorConfig, Tuning};
use clarion_lang::spec::EventSpec;
use clarion_reference::{evaluate, Config, Input};
use clarion_report::Report;
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000)
}

/// Reports with values as bit patterns, so undefined (NaN) values compare equal.
/// Every value counts: the aggregates and, after them, the values read
/// outside aggregates (`ack`, `seq_lastepoch`), keys and order included.
fn comparable(reports: &[Report]) -> Vec<(Report, Vec<u64>)> {
    reports
        .iter()
        .map(|r| {
            let bits = r
                .values
                .iter()
                .map(|(_, v)| if v.is_nan() { u64::MAX } else { v.to_bits() })
                .collect();
            let mut r = r.clone();
            for (_, v) in &mut r.values {
                *v = 0.0;
            }
            (r, bits)
        })
        .collect()
}

/// Equal reports, or a failure naming the first difference (the whole lists are long).
fn same_reports(got: &[Report], expected: &[Report]) -> Result<(), TestCaseError> {
    let (g, e) = (comparable(got), comparable(expected));
    if let Some(i) = (0..g.len().max(e.len())).find(|&i| g.get(i) != e.get(i)) {
        return Err(TestCaseError::fail(format!(
            "first difference at report {i} ({} from the monitor, {} from the reference):\n monitor:   {:?}\n reference: {:?}",
            got.len(),
            expected.len(),
            got.get(i),
            expected.get(i)
        )));
    }
    Ok(())
}

/// How the monitor is driven: every way must give the reference's reports.
#[derive(Clone, Copy)]
enum Drive {
    /// One packet at a time, each sweep run whole at its epoch boundary.
    Whole(Tuning),
    /// Sweeps in bounded steps of this many flow visits, one step per input.
    Stepped(usize, Tuning),
    /// Runs of packets through `process_batch`, sweeps whole.
    Batched(Tuning),
}

/// Runs the monitor as `drive` says.
fn monitor_reports(events: &[EventSpec], inputs: &[Input], drive: Drive) -> Vec<Report> {
    let (step, tuning) = match drive {
        Drive::Whole(t) | Drive::Batched(t) => (None, t),
        Drive::Stepped(budget, t) => (Some(budget), t),
    };
    let cfg = MonitorConfig {
        tuning,
        flow_capacity: 4096,
        flow_timeout_ns: TEST_FLOW_TIMEOUT_NS,
        burst_gap_ns: TEST_BURST_GAP_NS,
        host: "h".into(),
        worker: 0,
        synchronous_sweep: step.is_none(),
        ..MonitorConfig::default()
    };
    let mut m = Monitor::new(cfg);
    for e in events.iter().filter(|e| !e.on_demand) {
        m.install(e.clone()).expect("generated events are installable");
    }
    let mut out = Vec::new();
    if let Drive::Batched(_) = drive {
        let mut run = Vec::new();
        for input in inputs {
            match input {
                Input::Packet(p) => run.push(*p),
                other => {
                    m.process_batch(&run, &mut out);
                    run.clear();
                    common::feed(&mut m, other, &mut out);
                }
            }
        }
        m.process_batch(&run, &mut out);
    } else {
        for input in inputs {
            common::feed(&mut m, input, &mut out);
            if let Some(budget) = step {
                m.sweep_step(budget, &mut out);
            }
        }
    }
    m.finish(&mut out);
    assert_eq!(
        m.counters().packets_untracked,
        0,
        "the table is sized for every generated flow"
    );
    out
}

/// The reference's reports over `traffic`, and the monitor's driven every
/// way (whole sweeps with every optimization; stepped sweeps with every
/// optimization off, the naive baseline, and on; batches) must equal them.
fn check_every_drive(
    events: &[EventSpec],
    traffic: &clarion_conformance::Traffic,
) -> Result<(), TestCaseError> {
    let inputs = parse_traffic(traffic);
    let cfg = Config {
        flow_timeout_ns: TEST_FLOW_TIMEOUT_NS,
        burst_gap_ns: TEST_BURST_GAP_NS,
        host: "h".into(),
        worker: 0,
        ..Config::default()
    };
    let expected = evaluate(events, &inputs, &cfg);
    for drive in [
        Drive::Whole(Tuning::ALL),
        Drive::Stepped(2, Tuning::NONE),
        Drive::Stepped(3, Tuning::ALL),
        Drive::Batched(Tuning::ALL),
    ] {
        same_reports(&monitor_reports(events, &inputs, drive), &expected)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 4096, ..ProptestConfig::default() })]

    #[test]
    fn monitor_equals_reference(events in arb_events(4), traffic in arb_traffic(300)) {
        check_every_drive(&events, &traffic)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases() / 4, max_shrink_iters: 4096, ..ProptestConfig::default() })]

    /// Drill-downs: the instances the parent's reports install, their
    /// windows (from when the firing window is decided, for their
    /// duration, extended when fired again) and their narrowed groups.
    #[test]
    fn drill_downs_equal_reference(events in arb_drill_down_events(), traffic in arb_traffic(300)) {
        check_every_drive(&events, &traffic)?;
    }
}

/// The generated drill-down cases exercise instances (else the property
/// above would test little): in a fixed sample, a good share report from
/// at least one instance, and some from a chained one.
#[test]
fn generated_drill_downs_report_from_instances() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let cfg = Config {
        flow_timeout_ns: TEST_FLOW_TIMEOUT_NS,
        burst_gap_ns: TEST_BURST_GAP_NS,
        ..Config::default()
    };
    let (n, mut instances, mut chained) = (200, 0, 0);
    for _ in 0..n {
        let events = arb_drill_down_events()
            .new_tree(&mut runner)
            .expect("events")
            .current();
        // 400 frames over the pool's 19 flows: as many per flow as 300 over
        // the 14 the pool had before its tunnelled flows.
        let traffic = arb_traffic(400).new_tree(&mut runner).expect("traffic").current();
        let reports = evaluate(&events, &parse_traffic(&traffic), &cfg);
        instances += usize::from(reports.iter().any(|r| r.event.starts_with('t')));
        let t1_installs_t2 = events[1].drill_downs.iter().any(|d| d.event.name == "t2");
        chained += usize::from(t1_installs_t2 && reports.iter().any(|r| r.event.starts_with("t2")));
    }
    eprintln!("{instances} of {n} cases report from an instance, {chained} from a chained one");
    assert!(instances * 4 >= n, "{instances} of {n}");
    assert!(chained * 50 >= n, "{chained} of {n}");
}
