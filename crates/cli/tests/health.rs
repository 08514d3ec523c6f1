//! `--health FILE`: every epoch not seen in full is written, whether or
//! not an event fired in it (issue 18, completeness).

use std::path::Path;

mod common;
use common::clarion_process as clarion;

fn records(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("the health stream")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn epochs_with_untracked_packets_are_written_though_no_event_fires() {
    let dir = tempfile::tempdir().expect("tempdir");
    let events = dir.path().join("never.clarion");
    std::fs::write(
        &events,
        "event never\n  when sum(volume) > 1000000000000\n  per 5tuple\n  every 10ms\n",
    )
    .expect("written");
    let health = dir.path().join("health.jsonl");
    // A flow table of 4 flows: most packets of the demo capture go untracked.
    let out = clarion()
        .args([
            "run",
            "--pcap",
            "examples/demo.pcap",
            "-q",
            "--flow-capacity",
            "4",
            "--events",
        ])
        .arg(&events)
        .arg("--health")
        .arg(&health)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty(), "no event fires");
    let recs = records(&health);
    let untracked: u64 = recs
        .iter()
        .map(|r| r["completeness"]["untracked"].as_u64().expect("count"))
        .sum();
    assert!(
        recs.len() > 10 && untracked > 1_000,
        "{} records, {untracked} untracked",
        recs.len()
    );
    for r in &recs {
        assert_eq!(r["schema"], "clarion.health/1");
        let c = &r["completeness"];
        let lossy =
            c["untracked"].as_u64() > Some(0) || c["malformed"].as_u64() > Some(0) || c["complete"] == false;
        assert!(lossy, "only epochs not seen in full: {r}");
    }
    // In window order.
    let starts: Vec<u64> = recs
        .iter()
        .map(|r| r["window"]["start_ns"].as_u64().expect("start"))
        .collect();
    assert!(starts.windows(2).all(|w| w[0] < w[1]), "{starts:?}");

    // With room for every flow, only the epochs the capture starts and ends inside.
    let out = clarion()
        .args(["run", "--pcap", "examples/demo.pcap", "-q", "--events"])
        .arg(&events)
        .arg("--health")
        .arg(&health)
        .output()
        .expect("runs");
    assert!(out.status.success());
    let recs = records(&health);
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert!(recs.iter().all(|r| r["completeness"]["complete"] == false));
}

#[test]
fn health_needs_one_monitor_a_host() {
    let out = clarion()
        .args([
            "run",
            "--pcap",
            "examples/demo.pcap",
            "--events",
            "examples/demo.clarion",
        ])
        .args(["--workers", "2", "--health", "/dev/null"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--health"));
}
