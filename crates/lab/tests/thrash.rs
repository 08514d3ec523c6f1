//! `clarion-lab thrash` end to end: it runs for --seconds, reports a
//! positive access rate that agrees with its own count and time, exits 0;
//! and SIGTERM stops it early, still reporting and exiting 0.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use assert_cmd::Command;

fn report(stdout: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn runs_for_its_seconds_and_reports_a_rate() {
    let began = Instant::now();
    let o = Command::cargo_bin("clarion-lab")
        .unwrap()
        .args([
            "thrash",
            "--bytes",
            "16MiB",
            "--seconds",
            "1",
            "--threads",
            "2",
            "--json",
        ])
        .output()
        .unwrap();
    let wall = began.elapsed();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = report(&o.stdout);
    let accesses = r["accesses"].as_u64().unwrap();
    let secs = r["seconds"].as_f64().unwrap();
    let rate = r["accesses_per_s"].as_f64().unwrap();
    assert!(accesses > 0 && rate > 0.0, "{r}");
    assert!((rate - accesses as f64 / secs).abs() <= 1e-6 * rate, "{r}");
    assert!(secs > 0.2 && secs <= 1.5, "chased for {secs} s of a 1 s run");
    assert!(wall < Duration::from_secs(20), "ran {wall:?}");
    assert_eq!(r["threads"], 2);
    assert_eq!(r["stopped_by_signal"], false);
    eprintln!("thrash: {rate:.0} accesses/s, {} ns/access", r["ns_per_access"]);
    // A buffer under 4x the L3 is said to be one.
    let l3 = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index3/size").unwrap_or_default();
    if let Some(kib) = l3.trim().strip_suffix('K').and_then(|k| k.parse::<u64>().ok()) {
        let warned = String::from_utf8_lossy(&o.stderr).contains("under 4x the L3");
        assert_eq!(warned, 16 << 20 < 4 * kib * 1024, "L3 {kib} KiB");
    }

    // The plain line says the same kind of figure.
    let o = Command::cargo_bin("clarion-lab")
        .unwrap()
        .args(["thrash", "--bytes", "1MiB", "--seconds", "200ms"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let line = String::from_utf8_lossy(&o.stdout);
    let n: u64 = line
        .split_whitespace()
        .next()
        .unwrap()
        .replace(',', "")
        .parse()
        .unwrap();
    assert!(n > 0 && line.contains("accesses/s"), "{line}");
}

#[test]
fn sigterm_stops_it_early() {
    let mut child = std::process::Command::cargo_bin("clarion-lab")
        .unwrap()
        .args(["thrash", "--bytes", "8MiB", "--seconds", "60", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the buffer is built and the chase has begun.
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("chasing") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "no chasing line");
    }
    std::thread::sleep(Duration::from_millis(300));
    let began = Instant::now();
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) takes no pointers; the pid is our child's, not yet waited on.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let o = child.wait_with_output().unwrap();
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "stopped in {:?}",
        began.elapsed()
    );
    assert!(o.status.success());
    let r = report(&o.stdout);
    assert!(r["accesses"].as_u64().unwrap() > 0);
    assert_eq!(r["stopped_by_signal"], true);
    assert!(r["seconds"].as_f64().unwrap() < 10.0);
}

#[test]
fn bad_sizes_are_usage_errors() {
    for args in [["--bytes", "64"], ["--bytes", "12XB"], ["--threads", "0"]] {
        let o = Command::cargo_bin("clarion-lab")
            .unwrap()
            .arg("thrash")
            .args(args)
            .args(["--seconds", "1"])
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
