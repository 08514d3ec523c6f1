//! `clarion-lab fleet` end to end: a real nats-server, the manager in its
//! own process, 200 simulated hosts and 20 network-wide events for a few
//! seconds. Every decision the manager made equals the workload's
//! reference (none wrong, none missing, none partial), every report is
//! acknowledged, and the figures agree with each other. Skipped, saying
//! so, where nats-server is not installed (Debian package `nats-server`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use assert_cmd::Command;

fn nats_server() -> Option<PathBuf> {
    let out = std::process::Command::new("sh")
        .args(["-c", "command -v nats-server"])
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if out.status.success() && !path.is_empty() {
        return Some(PathBuf::from(path));
    }
    let sbin = PathBuf::from("/usr/sbin/nats-server");
    sbin.is_file().then_some(sbin)
}

fn require_server() -> Option<PathBuf> {
    let s = nats_server();
    if s.is_none() {
        eprintln!("skipped: nats-server is not installed (apt-get install nats-server)");
    }
    s
}

fn lab() -> Command {
    let mut c = Command::cargo_bin("clarion-lab").expect("the binary is built");
    c.timeout(Duration::from_secs(90));
    c
}

#[test]
fn a_small_fleet_is_decided_exactly_as_the_reference_says() {
    let Some(server) = require_server() else {
        return;
    };
    let began = Instant::now();
    let o = lab()
        .args([
            "fleet",
            "--hosts",
            "200",
            "--events",
            "20",
            "--per-event",
            "16",
            "--groups",
            "2",
            "--intervals",
            "10ms,50ms,100ms",
            "--duration",
            "4s",
            "--seed",
            "5",
            "--json",
            "--nats-server",
        ])
        .arg(&server)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "{err}\n{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    let n = |p: &str| {
        r.pointer(p)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or_else(|| panic!("{p} in {r}"))
    };
    // Precision: the manager's decisions are the reference's.
    assert_eq!(n("/decisions/wrong"), 0.0, "{r}");
    assert_eq!(n("/decisions/missing"), 0.0, "{r}");
    assert_eq!(n("/decisions/duplicates"), 0.0, "{r}");
    assert_eq!(n("/decisions/partial"), 0.0, "{r}");
    assert_eq!(n("/decisions/made"), n("/decisions/expected"), "{r}");
    assert_eq!(
        n("/decisions/fired_received"),
        n("/decisions/expected_fired"),
        "{r}"
    );
    // Both outcomes occur: fired, and decided without firing.
    assert!(n("/decisions/expected_fired") > 100.0, "{r}");
    assert!(
        n("/decisions/expected") > n("/decisions/expected_fired") + 100.0,
        "{r}"
    );
    // Every report sent as the model says, each acknowledged once decided.
    assert_eq!(n("/reports/sent"), n("/reports/expected"), "{r}");
    assert_eq!(n("/reports/lost"), 0.0, "{r}");
    assert_eq!(n("/reports/decided"), n("/reports/sent"), "{r}");
    assert_eq!(n("/polls/unexpected"), 0.0, "{r}");
    assert_eq!(n("/polls/timeouts"), 0.0, "{r}");
    // Sane figures: a rate near what was sent over the run, latencies
    // positive and under the poll timeout, a manager that used CPU and memory.
    let per_s = n("/reports/sent") / n("/duration_s");
    assert!((n("/reports/sent_per_s") - per_s).abs() <= per_s * 0.01, "{r}");
    assert!(n("/latency_fired/p50_ms") > 0.0, "{r}");
    assert!(n("/latency_fired/p99_ms") < 2000.0, "{r}");
    assert!(n("/latency_fired/p50_ms") <= n("/latency_fired/p99_ms"), "{r}");
    assert!(
        n("/latency_fired/samples") == n("/decisions/fired_received"),
        "{r}"
    );
    assert!(n("/manager/cores") > 0.0 && n("/manager/cores") < 2.5, "{r}");
    assert!(n("/manager/rss_kb/0") > 1000.0, "{r}");
    assert!(n("/manager/peak_rss_kb/0") >= n("/manager/rss_kb/0"), "{r}");
    assert!(n("/generator_cpu_s") > 0.0, "{r}");
    assert!(
        began.elapsed() < Duration::from_secs(60),
        "took {:?}",
        began.elapsed()
    );
}

#[test]
fn a_missing_server_or_an_unreachable_one_is_a_clear_error() {
    let o = lab()
        .args([
            "fleet",
            "--hosts",
            "10",
            "--events",
            "1",
            "--nats-server",
            "/nonexistent/nats-server",
        ])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot run /nonexistent/nats-server"), "{err}");

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let began = Instant::now();
    let o = lab()
        .args(["fleet", "--hosts", "10", "--events", "1", "--nats"])
        .arg(format!("nats://127.0.0.1:{port}"))
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("NATS server"), "{err}");
    assert!(began.elapsed() < Duration::from_secs(30), "{:?}", began.elapsed());
}

#[test]
fn bad_flags_are_usage_errors() {
    for args in [
        &["fleet", "--per-event", "12"][..],
        &["fleet", "--share", "0"],
        &["fleet", "--hosts", "70000"],
        &["fleet", "--intervals", "7ms"],
        &["fleet", "--shared", "0"],
    ] {
        let o = lab().args(args).output().expect("runs");
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
