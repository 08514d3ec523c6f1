//! Several workers and a host-level merger against one monitor, on
//! generated events and traffic: flows are spread over 2 and 3 workers by
//! a symmetric hash of their 5-tuple, each worker hands its partials to a
//! [`Merger`] (in a random interleaving of the workers), and the merged
//! reports must equal one monitor's on the whole traffic — events,
//! windows, groups, values bit for bit, completeness — with only the
//! origin's worker differing ([`MERGED_WORKER`]).
//!
//! The driver keeps the workers' clocks together (it ticks every worker to
//! the host's latest time before handing a frame to one), so packet times,
//! out-of-order counts and the first and last windows are one monitor's.
//! Cases vary the spread (its seed), whether per-5-tuple triggers are
//! tested on the workers or merged, whole or stepped sweeps, and some
//! install events and remove one while packets flow.
//!
//! `PROPTEST_CASES` sets the number of cases of each test (default 1,500).

mod common;

use std::collections::VecDeque;

use clarion_conformance::{
    arb_events, arb_traffic_with, parse_traffic, TEST_BURST_GAP_NS, TEST_FLOW_TIMEOUT_NS,
};
use clarion_engine::{
    fanout_worker, AdaptConfig, Merger, MergerConfig, Monitor, MonitorConfig, Partials, Shed, TriggerId,
    Tuning, MERGED_WORKER,
};
use clarion_lang::spec::EventSpec;
use clarion_reference::Input;
use clarion_report::Report;
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_500)
}

/// How a case spreads the traffic and drives the workers.
#[derive(Clone, Copy, Debug)]
struct Split {
    workers: u32,
    /// Picks the spread of flows over workers.
    seed: u64,
    /// Per-5-tuple triggers are tested on the workers (`five_tuple_fanout`).
    local: bool,
    /// Sweeps run in steps of 2 flow visits, every optimization off;
    /// else whole, every optimization on.
    stepped: bool,
    /// Picks the interleaving of the workers' partials at the merger.
    order: u64,
}

/// The monitors' settings for generated traffic.
fn generated() -> MonitorConfig {
    MonitorConfig {
        flow_capacity: 4096,
        flow_timeout_ns: TEST_FLOW_TIMEOUT_NS,
        burst_gap_ns: TEST_BURST_GAP_NS,
        host: "h".into(),
        ..MonitorConfig::default()
    }
}

/// `base` for worker `worker` of `split`, or for one monitor (`None`).
fn config(base: &MonitorConfig, worker: u32, split: Option<Split>) -> MonitorConfig {
    let stepped = split.is_some_and(|s| s.stepped);
    MonitorConfig {
        tuning: if stepped { Tuning::NONE } else { Tuning::ALL },
        synchronous_sweep: !stepped,
        worker,
        merge_output: split.is_some(),
        five_tuple_fanout: split.is_some_and(|s| s.local),
        ..base.clone()
    }
}

fn ts_of(input: &Input) -> u64 {
    match input {
        Input::Packet(p) => p.ts_ns,
        Input::Malformed { ts_ns } | Input::NotIp { ts_ns } => *ts_ns,
    }
}

/// Installs and removals while packets flow, the same for one monitor and
/// for the workers: the events from `late` on are installed before input
/// `install_at`, and one of the installed triggers (`pick`) is removed
/// before input `remove_at` (positions up to the number of inputs: after
/// the last). `None`: every event installed before the traffic.
#[derive(Clone, Copy, Debug)]
struct Churn {
    late: usize,
    install_at: usize,
    remove_at: usize,
    pick: usize,
}

/// Runs the control actions due before input `i` on every monitor (one,
/// or every worker, whose clocks are together), which must agree on ids.
fn control(
    monitors: &mut [Monitor],
    events: &[EventSpec],
    churn: Option<Churn>,
    i: usize,
    live: &mut Vec<TriggerId>,
) {
    let mut install = |events: &[EventSpec], live: &mut Vec<TriggerId>| {
        for e in events {
            let ids: Vec<_> = monitors
                .iter_mut()
                .map(|m| m.install(e.clone()).expect("generated events are installable"))
                .collect();
            assert!(ids.windows(2).all(|w| w[0] == w[1]), "same ids on every worker");
            live.extend(ids.first());
        }
    };
    let Some(c) = churn else {
        if i == 0 {
            install(events, live);
        }
        return;
    };
    let late = c.late.min(events.len());
    if i == 0 {
        install(&events[..late], live);
    }
    if i == c.install_at {
        install(&events[late..], live);
    }
    if i == c.remove_at && !live.is_empty() {
        let id = live.remove(c.pick % live.len());
        for m in monitors.iter_mut() {
            m.remove(id).expect("installed");
        }
    }
}

/// Completes the workers' unfinished sweeps when a control action is due:
/// a trigger removed while a sweep is unfinished loses the window being
/// swept, on one monitor too, and the one monitor's sweeps are whole.
fn finish_sweeps_before_control(workers: &mut [Monitor], churn: Option<Churn>, i: usize) {
    if churn.is_some_and(|c| i == c.install_at || i == c.remove_at) {
        let mut none = Vec::new();
        for m in workers {
            m.sweep_step(usize::MAX, &mut none);
        }
        assert!(none.is_empty());
    }
}

/// One monitor on the whole traffic.
/// Monitors in degraded mode (`base.adapt`) shed as `shed` says.
fn single(
    base: &MonitorConfig,
    events: &[EventSpec],
    inputs: &[Input],
    churn: Option<Churn>,
    shed: Shed,
) -> Vec<Report> {
    let mut m = [Monitor::new(config(base, 0, None))];
    m[0].set_shed(shed);
    let mut live = Vec::new();
    let mut out = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        control(&mut m, events, churn, i, &mut live);
        common::feed(&mut m[0], input, &mut out);
    }
    control(&mut m, events, churn, inputs.len(), &mut live);
    m[0].finish(&mut out);
    out
}

/// A small deterministic generator for the interleaving (xorshift64*).
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// The workers' partials, each worker's in the order it made them.
fn run_workers(
    base: &MonitorConfig,
    events: &[EventSpec],
    inputs: &[Input],
    split: Split,
    churn: Option<Churn>,
    shed: Shed,
) -> Vec<VecDeque<Partials>> {
    let n = split.workers;
    let mut workers: Vec<Monitor> = (0..n)
        .map(|w| {
            let mut m = Monitor::new(config(base, w, Some(split)));
            m.set_shed(shed);
            m
        })
        .collect();
    let mut live = Vec::new();
    let mut partials: Vec<VecDeque<Partials>> = (0..n).map(|_| VecDeque::new()).collect();
    let collect = |workers: &mut [Monitor], partials: &mut [VecDeque<Partials>]| {
        for (m, q) in workers.iter_mut().zip(partials.iter_mut()) {
            q.extend(m.take_partials());
        }
    };
    // Workers report nothing themselves: everything goes through the merger.
    let mut none = Vec::new();
    let mut now: Option<u64> = None;
    for (i, input) in inputs.iter().enumerate() {
        let ts = ts_of(input);
        // The host's clock before this frame (its own time for the first,
        // after the events installed before the traffic).
        if let Some(t) = now {
            for m in &mut workers {
                m.tick(t, &mut none);
            }
        }
        finish_sweeps_before_control(&mut workers, churn, i);
        control(&mut workers, events, churn, i, &mut live);
        let clock = now.unwrap_or(ts);
        for m in &mut workers {
            m.tick(clock, &mut none);
        }
        let w = match input {
            Input::Packet(p) => fanout_worker(&p.key, n, split.seed),
            _ => i as u32 % n,
        };
        common::feed(&mut workers[w as usize], input, &mut none);
        now = Some(clock.max(ts));
        if split.stepped {
            for m in &mut workers {
                m.sweep_step(2, &mut none);
            }
        }
        collect(&mut workers, &mut partials);
    }
    for m in &mut workers {
        if let Some(t) = now {
            m.tick(t, &mut none);
        }
    }
    finish_sweeps_before_control(&mut workers, churn, inputs.len());
    control(&mut workers, events, churn, inputs.len(), &mut live);
    for m in &mut workers {
        m.finish(&mut none);
    }
    collect(&mut workers, &mut partials);
    assert!(none.is_empty(), "a worker reported by itself: {none:?}");
    for m in &workers {
        assert_eq!(m.counters().packets_untracked, 0, "tables fit every flow");
    }
    partials
}

/// The merger's reports, fed the workers' partials in an interleaving `split.order` picks.
fn merged(
    base: &MonitorConfig,
    events: &[EventSpec],
    inputs: &[Input],
    split: Split,
    churn: Option<Churn>,
    shed: Shed,
) -> Vec<Report> {
    let mut queues = run_workers(base, events, inputs, split, churn, shed);
    let mut merger = Merger::new(MergerConfig {
        host: base.host.clone(),
        workers: split.workers,
        history_windows: 4,
        adapt: base.adapt.clone(),
    });
    let mut out = Vec::new();
    let mut rng = split.order | 1;
    loop {
        let ready: Vec<usize> = (0..queues.len()).filter(|&q| !queues[q].is_empty()).collect();
        if ready.is_empty() {
            break;
        }
        let q = ready[(next(&mut rng) % ready.len() as u64) as usize];
        if let Some(p) = queues[q].pop_front() {
            merger.push(p, &mut out).expect("partials in order");
        }
    }
    assert_eq!(merger.pending_windows(), 0, "every window released at the end");
    out
}

/// Reports with the origin's worker cleared and values as bit patterns
/// (so undefined values compare equal).
fn comparable(reports: &[Report], worker: u32) -> Result<Vec<(Report, Vec<u64>)>, TestCaseError> {
    reports
        .iter()
        .map(|r| {
            prop_assert_eq!(r.origin.worker, worker);
            let bits = r
                .values
                .iter()
                .map(|(_, v)| if v.is_nan() { u64::MAX } else { v.to_bits() })
                .collect();
            let mut r = r.clone();
            r.origin.worker = 0;
            for (_, v) in &mut r.values {
                *v = 0.0;
            }
            Ok((r, bits))
        })
        .collect()
}

fn same_reports(got: &[Report], expected: &[Report], split: Split) -> Result<(), TestCaseError> {
    let (g, e) = (comparable(got, MERGED_WORKER)?, comparable(expected, 0)?);
    if let Some(i) = (0..g.len().max(e.len())).find(|&i| g.get(i) != e.get(i)) {
        return Err(TestCaseError::fail(format!(
            "{split:?}: first difference at report {i} ({} merged, {} from one monitor):\n merged: {:?}\n single: {:?}",
            got.len(),
            expected.len(),
            got.get(i),
            expected.get(i)
        )));
    }
    Ok(())
}

fn check(
    events: &[EventSpec],
    traffic: &clarion_conformance::Traffic,
    knobs: Knobs,
) -> Result<(), TestCaseError> {
    let inputs = parse_traffic(traffic);
    let base = generated();
    let (seed, local, stepped, order, churn) = knobs;
    // Positions as fractions of the traffic.
    let at = |f: u16| usize::from(f) * (inputs.len() + 1) / 65_536;
    let churn = churn.map(|(late, install, remove, pick)| Churn {
        late,
        install_at: at(install),
        remove_at: at(remove),
        pick,
    });
    let expected = single(&base, events, &inputs, churn, Shed::NONE);
    for workers in [2, 3] {
        let split = Split {
            workers,
            seed,
            local,
            stepped,
            order,
        };
        same_reports(
            &merged(&base, events, &inputs, split, churn, Shed::NONE),
            &expected,
            split,
        )
        .map_err(|e| TestCaseError::fail(format!("{churn:?}: {e}")))?;
    }
    Ok(())
}

/// Spread seed, local 5-tuple triggers, stepped sweeps, interleaving, churn
/// (first late event, install and removal positions as fractions of
/// 65,536, which trigger to remove).
type Knobs = (u64, bool, bool, u64, Option<(usize, u16, u16, usize)>);

fn knobs() -> impl Strategy<Value = Knobs> {
    let churn = (0..=4usize, any::<u16>(), any::<u16>(), any::<usize>());
    (
        any::<u64>(),
        any::<bool>(),
        prop::bool::weighted(0.25),
        any::<u64>(),
        prop::option::weighted(0.4, churn),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 4096, ..ProptestConfig::default() })]

    #[test]
    fn merged_workers_equal_one_monitor(
        events in arb_events(4),
        traffic in arb_traffic_with(300, 0..=0),
        knobs in knobs(),
    ) {
        check(&events, &traffic, knobs)?;
    }

    #[test]
    fn merged_workers_equal_one_monitor_with_tcp_connections(
        events in arb_events(4),
        traffic in arb_traffic_with(300, 1..=3),
        knobs in knobs(),
    ) {
        check(&events, &traffic, knobs)?;
    }
}

/// (capture, events) to run: the bundled example with its events and the
/// paper's, and the real captures beside the checkout (those present)
/// with their golden events.
fn capture_runs() -> Vec<(std::path::PathBuf, std::path::PathBuf)> {
    let repo = common::repo();
    let demo = repo.join("examples/demo.pcap");
    let mut runs = vec![
        (demo.clone(), repo.join("examples/demo.clarion")),
        (demo, repo.join("examples/paper.clarion")),
    ];
    let real = repo.join("crates/conformance/tests/golden/real_captures.clarion");
    let captures = repo.join("../shared/captures");
    if let Ok(dir) = std::fs::read_dir(&captures) {
        let mut files: Vec<_> = dir.flatten().map(|e| e.path()).collect();
        files.sort();
        runs.extend(files.into_iter().map(|f| (f, real.clone())));
    } else {
        eprintln!("{}: not found, only the example runs", captures.display());
    }
    runs
}

/// The bundled example and the real captures beside the checkout (those
/// present), with their golden events, over 2 and 3 workers.
#[test]
fn merged_workers_equal_one_monitor_on_captures() {
    let base = MonitorConfig {
        host: "h".into(),
        ..MonitorConfig::default()
    };
    for (capture, events) in capture_runs() {
        let (inputs, mut events) = (common::read_inputs(&capture), common::events(&events));
        // Drill-downs need one monitor (merged workers refuse them; see the test below).
        events.retain(|e| !e.on_demand && e.drill_downs.is_empty());
        let expected = single(&base, &events, &inputs, None, Shed::NONE);
        for (workers, local) in [(2, true), (3, false)] {
            let split = Split {
                workers,
                seed: 7,
                local,
                stepped: false,
                order: 11,
            };
            let got = merged(&base, &events, &inputs, split, None, Shed::NONE);
            if let Err(e) = same_reports(&got, &expected, split) {
                panic!("{}: {e}", capture.display());
            }
        }
        eprintln!(
            "{}: {} reports, merged = one monitor",
            capture.display(),
            expected.len()
        );
    }
}

/// Workers merged on a host refuse an event with drill-downs: a worker sees
/// only its own flows, so it cannot decide what the host's would install.
#[test]
fn merged_workers_refuse_drill_downs() {
    let events = common::events(&common::repo().join("examples/drilldown.clarion"));
    let mut m = Monitor::new(MonitorConfig {
        merge_output: true,
        ..MonitorConfig::default()
    });
    let err = m.install(events[0].clone()).expect_err("refused");
    assert!(err.to_string().contains("--workers 1"), "{err}");
}

/// Degraded mode over merged workers: with flows shed, the merger sums the
/// workers' counts per window and estimates each window's recall as one
/// monitor does on the whole traffic (flows take their state by a hash of
/// their key, wherever they run): the same reports, unmeasured counts and
/// recall estimates, on the example and the real captures.
#[test]
fn merged_workers_equal_one_monitor_in_degraded_mode() {
    // Accuracy control off: its moves follow each monitor's own estimates.
    let base = MonitorConfig {
        host: "h".into(),
        adapt: Some(AdaptConfig {
            accuracy_threshold: None,
            ..AdaptConfig::default()
        }),
        ..MonitorConfig::default()
    };
    let mut shed_reports = 0;
    for (capture, events) in capture_runs() {
        let (inputs, mut events) = (common::read_inputs(&capture), common::events(&events));
        events.retain(|e| !e.on_demand && e.drill_downs.is_empty());
        for shed in [Shed::NONE, Shed { steps: 1, extra: 0.5 }] {
            let expected = single(&base, &events, &inputs, None, shed);
            shed_reports += expected
                .iter()
                .filter(|r| r.completeness.flows_unmeasured > 0)
                .count();
            for (workers, local) in [(2, true), (3, false)] {
                let split = Split {
                    workers,
                    seed: 7,
                    local,
                    stepped: false,
                    order: 11,
                };
                let got = merged(&base, &events, &inputs, split, None, shed);
                if let Err(e) = same_reports(&got, &expected, split) {
                    panic!("{} {shed:?}: {e}", capture.display());
                }
            }
        }
    }
    assert!(
        shed_reports > 0,
        "no report had shed flows: the test proves little"
    );
}
