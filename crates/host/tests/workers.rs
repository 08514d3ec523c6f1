//! `Workers` (several monitors on threads, merged) against one monitor:
//! on generated events and traffic, and on the bundled and shared real
//! captures read by the replay loop, the merged reports must equal one
//! monitor's — events, windows, groups, values bit for bit, completeness,
//! order — with only the origin's worker differing.
//!
//! `PROPTEST_CASES` sets the number of generated cases (default 300).

use std::path::{Path, PathBuf};

use clarion_capture::CaptureFile;
use clarion_conformance::{
    arb_events, arb_traffic_with, parse_traffic, TEST_BURST_GAP_NS, TEST_FLOW_TIMEOUT_NS,
};
use clarion_engine::{Monitor, MonitorConfig, Unparsed, MERGED_WORKER};
use clarion_host::{replay, Driver, HostError, ReplayOptions, Workers, WorkersConfig};
use clarion_lang::spec::EventSpec;
use clarion_pipeline::{Outputs, Stage};
use clarion_reference::Input;
use clarion_report::Report;
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Feeds generated inputs to a stage, consecutive packets in batches of `batch`.
fn feed(stage: &mut dyn Stage, inputs: &[Input], batch: usize) -> Result<Vec<Report>, HostError> {
    let mut out = Outputs::default();
    let mut run = Vec::new();
    for input in inputs {
        match input {
            Input::Packet(p) => {
                run.push(*p);
                if run.len() == batch {
                    stage.batch(&run, &mut out)?;
                    run.clear();
                }
            }
            Input::Malformed { ts_ns } | Input::NotIp { ts_ns } => {
                stage.batch(&run, &mut out)?;
                run.clear();
                let why = match input {
                    Input::NotIp { .. } => Unparsed::NotIp,
                    _ => Unparsed::Malformed,
                };
                stage.unparsed(*ts_ns, why, &mut out)?;
            }
        }
    }
    stage.batch(&run, &mut out)?;
    stage.finish(&mut out)?;
    Ok(out.reports)
}

fn single(config: &MonitorConfig, events: &[EventSpec]) -> Monitor {
    let mut m = Monitor::new(config.clone());
    for e in events.iter().filter(|e| !e.on_demand) {
        m.install(e.clone()).expect("events install");
    }
    m
}

/// The reports as JSON with the origin's worker cleared (undefined values compare equal as `null`).
fn comparable(reports: &[Report], worker: u32) -> Vec<String> {
    reports
        .iter()
        .map(|r| {
            assert_eq!(r.origin.worker, worker, "{r:?}");
            let mut r = r.clone();
            r.origin.worker = 0;
            r.to_json().to_string()
        })
        .collect()
}

fn first_difference(got: &[String], expected: &[String]) -> Option<String> {
    (0..got.len().max(expected.len()))
        .find(|&i| got.get(i) != expected.get(i))
        .map(|i| {
            format!(
                "first difference at report {i} ({} merged, {} from one monitor):\n merged: {:?}\n single: {:?}",
                got.len(),
                expected.len(),
                got.get(i),
                expected.get(i)
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn merged_workers_equal_one_monitor(
        events in arb_events(4),
        traffic in arb_traffic_with(300, 0..=3),
        workers in 1u32..=3,
        seed in any::<u64>(),
        batch in 1usize..40,
        worker_batch in 1usize..300,
        queue in 1usize..4,
    ) {
        let inputs = parse_traffic(&traffic);
        let config = MonitorConfig {
            flow_capacity: 4096,
            flow_timeout_ns: TEST_FLOW_TIMEOUT_NS,
            burst_gap_ns: TEST_BURST_GAP_NS,
            host: "h".into(),
            ..MonitorConfig::default()
        };
        let expected = feed(&mut single(&config, &events), &inputs, batch).expect("one monitor");
        let mut w = Workers::start(&config, &events, WorkersConfig { workers, seed, batch: worker_batch, queue })
            .expect("workers start");
        let got = feed(&mut w, &inputs, batch).expect("workers");
        if let Some(d) = first_difference(&comparable(&got, MERGED_WORKER), &comparable(&expected, 0)) {
            return Err(TestCaseError::fail(d));
        }
        prop_assert_eq!(w.counters().reports, got.len() as u64);
    }
}

/// Collects a replay's reports.
struct Collect(Vec<Report>);

impl<St: Stage + ?Sized> Driver<St> for Collect {
    type Error = HostError;
    fn reports(&mut self, _stage: &mut St, reports: &mut Vec<Report>) -> Result<(), HostError> {
        self.0.append(reports);
        Ok(())
    }
}

fn replayed(path: &Path, stage: &mut dyn Stage) -> Vec<Report> {
    let mut source = CaptureFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Collect(Vec::new());
    let run = replay(&mut source, stage, &mut out, &ReplayOptions::default()).expect("replay");
    assert!(run.damage.is_none(), "{}: {:?}", path.display(), run.damage);
    out.0
}

fn events(path: &Path) -> Vec<EventSpec> {
    let src = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut events =
        clarion_lang::check(&src).unwrap_or_else(|d| panic!("{}", d.render("events", &src, false)));
    // Merged workers refuse drill-downs (a worker cannot decide what the host's values would install).
    events.retain(|e| !e.on_demand && e.drill_downs.is_empty());
    events
}

/// The bundled example and every shared capture beside the checkout,
/// replayed by the replay loop into one monitor and into 2 and 3 workers.
#[test]
fn replayed_captures_give_one_monitors_reports_on_any_number_of_workers() {
    let repo = repo();
    let demo = repo.join("examples/demo.pcap");
    let mut runs = vec![
        (demo.clone(), repo.join("examples/demo.clarion")),
        (demo, repo.join("examples/paper.clarion")),
    ];
    let real = repo.join("crates/conformance/tests/golden/real_captures.clarion");
    match std::fs::read_dir(repo.join("../shared/captures")) {
        Ok(dir) => {
            let mut files: Vec<_> = dir.flatten().map(|e| e.path()).collect();
            files.sort();
            runs.extend(files.into_iter().map(|f| (f, real.clone())));
        }
        Err(e) => eprintln!("../shared/captures: {e}; only the example runs"),
    }
    let config = MonitorConfig {
        host: "h".into(),
        ..MonitorConfig::default()
    };
    for (capture, events_file) in runs {
        let events = events(&events_file);
        let expected = comparable(&replayed(&capture, &mut single(&config, &events)), 0);
        assert!(
            !expected.is_empty(),
            "{}: no reports to compare",
            capture.display()
        );
        for workers in [2, 3] {
            let mut w = Workers::start(
                &config,
                &events,
                WorkersConfig {
                    workers,
                    ..WorkersConfig::default()
                },
            )
            .expect("workers start");
            let got = comparable(&replayed(&capture, &mut w), MERGED_WORKER);
            if let Some(d) = first_difference(&got, &expected) {
                panic!("{} on {workers} workers: {d}", capture.display());
            }
        }
        eprintln!(
            "{}: {} reports, equal on 1, 2 and 3 workers",
            capture.display(),
            expected.len()
        );
    }
}
