//! `clarion run --inventory`: network-wide events on the bundled capture.

use serde_json::Value;

mod common;
use common::clarion_process as clarion;

/// (event, window start, group, values) of each JSON report line.
fn reports(args: &[&str]) -> Vec<(String, u64, String, String)> {
    let out = clarion().args(args).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut v: Vec<_> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let r: Value = serde_json::from_str(l).expect("json");
            (
                r["event"].as_str().unwrap_or_default().to_string(),
                r["window"]["start_ns"].as_u64().unwrap_or_default(),
                r["group"].to_string(),
                r["values"].to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn both_senders_together_equal_one_monitor_on_the_whole_capture() {
    // Network-wide: the senders each see their own packets; the manager adds them up.
    let net = reports(&[
        "run",
        "--pcap",
        "examples/demo.pcap",
        "--inventory",
        "examples/demo-hosts.txt",
        "--events",
        "examples/network.clarion",
        "--format",
        "json",
        "--quiet",
    ]);
    let net: Vec<_> = net.into_iter().filter(|r| r.0 == "senders_to_receiver").collect();
    assert!(net.len() >= 5, "the example should fire: {net:?}");
    // One monitor on the whole capture, the same event without `across hosts`.
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/network.clarion"
    ))
    .expect("events");
    let host_scoped = src.replace("  across hosts\n", "\n");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("host.clarion");
    std::fs::write(&path, host_scoped).expect("write");
    let one = reports(&[
        "run",
        "--pcap",
        "examples/demo.pcap",
        "--events",
        path.to_str().expect("utf-8 path"),
        "--format",
        "json",
        "--quiet",
    ]);
    let one: Vec<_> = one.into_iter().filter(|r| r.0 == "senders_to_receiver").collect();
    assert_eq!(net, one);
}

/// Exit status and standard error of a run of the network example with an inventory of `text`.
fn with_inventory(text: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("hosts.txt");
    std::fs::write(&path, text).expect("write");
    let out = clarion()
        .args([
            "run",
            "--pcap",
            "examples/demo.pcap",
            "--events",
            "examples/network.clarion",
            "--inventory",
        ])
        .arg(&path)
        .output()
        .expect("runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn inventory_mistakes_are_usage_errors() {
    let (code, err) = with_inventory("a 10.0.0.0/24\na 10.0.1.0/24\n");
    assert_eq!(code, Some(2));
    assert!(
        err.contains("inventory line 2: host `a` is listed twice"),
        "{err}"
    );
    // An event whose filters name only addresses no host owns (here, the
    // example's) is placed on every host: it runs.
    let (code, err) = with_inventory("x 192.0.2.0/24\n");
    assert_eq!(code, Some(0), "{err}");
}
