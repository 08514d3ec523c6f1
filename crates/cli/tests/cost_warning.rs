//! The cost warning at load (issue 18): an events set whose work grows as
//! packets × events is named before it runs, by `clarion check` and
//! `clarion run`; the bundled examples are not.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod common;
use common::{clarion, repo, stderr};

/// `n` events without a filter: every packet matches all of them.
fn every_packet(dir: &Path, n: usize) -> PathBuf {
    let text: String = (0..n)
        .map(|i| format!("event all_{i}\n  when sum(volume) > 1000000000000\n  per 5tuple\n  every 10ms\n\n"))
        .collect();
    let path = dir.join(format!("every_packet_{n}.clarion"));
    std::fs::write(&path, text).expect("the events file is written");
    path
}

#[test]
fn check_warns_of_20000_events_matching_every_packet() {
    let dir = tempfile::tempdir().unwrap();
    let events = every_packet(dir.path(), 20_000);
    let started = Instant::now();
    let o = clarion().arg("check").arg(&events).output().unwrap();
    assert!(o.status.success(), "a warning, not an error: {}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("clarion: warning: "), "{err}");
    assert!(err.contains("a flow can match 20,000 events"), "{err}");
    assert!(
        err.contains("`all_0`, `all_1`, `all_2` and 19,997 more"),
        "names the dominant events: {err}"
    );
    assert!(err.contains("20,000 have no filter"), "{err}");
    assert!(err.contains("falls behind at any packet rate"), "{err}");
    assert!(err.contains("help: narrow the filters"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    // --cost prints the prediction; -q silences the warning but not what --cost asked for.
    let o = clarion()
        .args(["check", "-q", "--cost"])
        .arg(&events)
        .output()
        .unwrap();
    assert!(o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("clarion: note: ") && err.contains("a flow matches at most 20,000 events"),
        "{err}"
    );
    assert!(!err.contains("warning"), "{err}");
    assert!(o.stdout.is_empty());
}

#[test]
fn run_warns_at_load_and_quiet_silences_it() {
    // 2,000 events: enough to warn (up to ~18 µs a packet), quick on the demo capture.
    let dir = tempfile::tempdir().unwrap();
    let events = every_packet(dir.path(), 2_000);
    let run = |extra: &[&str]| {
        clarion()
            .args([
                "run",
                "--pcap",
                "examples/demo.pcap",
                "--format",
                "json",
                "--events",
            ])
            .arg(&events)
            .args(extra)
            .output()
            .unwrap()
    };
    let o = run(&[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("clarion: warning: ") && err.contains("a flow can match 2,000 events"),
        "{err}"
    );
    // The warning comes at load, before the summary.
    let (warned, summary) = (err.find("warning"), err.find("frames in"));
    assert!(warned < summary && summary.is_some(), "{err}");
    let o = run(&["-q"]);
    assert!(o.status.success());
    assert!(o.stderr.is_empty(), "{}", stderr(&o));
    // Workers share the per-packet work: four of them take this set.
    let o = run(&["--workers", "4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
}

#[test]
fn the_examples_do_not_warn() {
    let mut checked = 0;
    for entry in std::fs::read_dir(repo().join("examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "clarion") {
            continue;
        }
        // A file of export policies has no event to cost.
        let text = std::fs::read_to_string(&path).unwrap();
        if clarion_lang::parse(&text).is_ok_and(|f| f.events.is_empty()) {
            continue;
        }
        let o = clarion().args(["check", "--cost"]).arg(&path).output().unwrap();
        assert!(o.status.success(), "{}: {}", path.display(), stderr(&o));
        let err = stderr(&o);
        assert!(!err.contains("warning"), "{}: {err}", path.display());
        assert!(err.contains("predicted cost"), "{}: {err}", path.display());
        checked += 1;
    }
    assert!(checked >= 5, "{checked}");
    let o = clarion()
        .args([
            "run",
            "--pcap",
            "examples/demo.pcap",
            "--events",
            "examples/demo.clarion",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
}
