//! `clarion agent` takes the monitor's flags of `clarion run` (issue 34:
//! one `MonitorArgs`, one place building the monitor's configuration):
//! live, each flag reaches the workers; on a capture file, those a file
//! cannot use are usage errors naming them, as for `clarion run`.
//!
//! The live test runs an agent on `lo` (filtered to one UDP port) against
//! a real nats-server and manager, with `--flow-capacity 2
//! --dos-threshold 1000 --adapt`, and sends it 24 UDP flows: 20 small
//! ones first (two 48-byte packets each, never above the threshold in an
//! epoch), then 4 big ones (ten 500-byte packets each, above it after
//! two). What each flag changes is in its output: the small flows are
//! all filtered, never tracked (the summary's DoS filter line); of the big
//! ones 2 are tracked and the rest counted untracked (its flows line);
//! every epoch's statistics carry degraded mode's `busy_ns`, and every
//! report of the host's own event is marked degraded. Needs root and
//! nats-server; skipped, saying why, otherwise.

mod bus;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use bus::*;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The monitor flags a capture file cannot use, each refused with its
/// name and where it applies, by `clarion agent --pcap` before any
/// manager is looked for (none is there) and by `clarion run --pcap`.
#[test]
fn monitor_flags_a_file_cannot_use_are_usage_errors_naming_them() {
    let pcap = repo().join("examples/demo.pcap");
    let events = repo().join("examples/demo.clarion");
    for (flag, instead) in [
        ("--adapt", "clarion-lab overload"),
        ("--dos-auto-raise", "clarion-lab bench --dos-auto-raise"),
    ] {
        let agent = clarion()
            .args(["agent", "--host", "h", "--nats", "nats://127.0.0.1:1"])
            .args(["--register-timeout", "1s", "--pcap"])
            .arg(&pcap)
            .arg(flag)
            .output()
            .expect("runs");
        let run = clarion()
            .args(["run", "--pcap"])
            .arg(&pcap)
            .arg("--events")
            .arg(&events)
            .arg(flag)
            .output()
            .expect("runs");
        for (what, o) in [("agent", agent), ("run", run)] {
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{what} {flag}: {err}");
            assert!(
                err.contains(&format!("clarion: {flag} "))
                    && err.contains("give -i IFACE")
                    && err.contains(instead),
                "{what} {flag}: {err}"
            );
            assert!(o.stdout.is_empty(), "{what} {flag}: no reports");
        }
    }
}

/// `clarion agent --help` and `clarion run --help` list the same monitor
/// flags, under one heading of their own.
#[test]
fn agent_and_run_help_list_the_monitor_flags_under_their_heading() {
    for command in ["agent", "run"] {
        let o = clarion().args([command, "--help"]).output().expect("runs");
        let help = String::from_utf8_lossy(&o.stdout);
        let section = help
            .split("\nMonitor:\n")
            .nth(1)
            .and_then(|s| s.split("\n\n").next())
            .unwrap_or_else(|| panic!("{command} --help has a Monitor heading:\n{help}"));
        for flag in [
            "--flow-capacity <N>",
            "--flow-timeout <DURATION>",
            "--burst-gap <DURATION>",
            "--tcp-segment-limit <N>",
            "--dos-threshold <BYTES>",
            "--dos-auto-raise",
            "--adapt",
        ] {
            assert!(
                section.contains(flag),
                "{command}: {flag} under Monitor:\n{section}"
            );
        }
    }
}

/// The host's own event: every UDP flow, each 10 ms.
const OWN: &str = "\
event udp_flows
  filter proto = udp
  when count(packets) >= 1
  per 5tuple
  every 10ms
";

/// `n` flows from sockets of their own to `port` on the loopback, each
/// sending `packets` datagrams of `payload` bytes back to back.
fn flows(port: u16, n: usize, packets: usize, payload: usize) {
    let sockets: Vec<std::net::UdpSocket> = (0..n)
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").expect("a socket"))
        .collect();
    for s in &sockets {
        for _ in 0..packets {
            s.send_to(&vec![7u8; payload], ("127.0.0.1", port)).expect("sent");
        }
    }
}

/// The number before `word` on the summary line starting with `prefix`
/// ("  flows 2 created, 0 evicted, 14 packets untracked" → `flows`,
/// "created" → 2; `flows`, "packets" → 14).
fn count(summary: &str, prefix: &str, word: &str) -> u64 {
    let line = summary
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line in the summary:\n{summary}"));
    let words: Vec<&str> = line.split([' ', ',']).filter(|w| !w.is_empty()).collect();
    words
        .windows(2)
        .find(|w| w[1] == word)
        .and_then(|w| w[0].parse().ok())
        .unwrap_or_else(|| panic!("no count before `{word}` in `{line}`"))
}

#[test]
fn a_live_agent_takes_flow_capacity_dos_threshold_and_adapt() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: opening a packet socket needs root");
        return;
    }
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("hosts.txt"), "vm 127.0.0.0/8\n").expect("inventory");
    std::fs::write(d.join("own.clarion"), OWN).expect("events");
    let (_nats, nats_port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{nats_port}");
    let _manager = Guard::new(manager(d, &nats, &["--no-store", "--no-api"]));
    let udp = free_port();
    let err = d.join("agent.err");
    let agent = clarion()
        .args(["agent", "--nats", &nats, "--host", "vm", "-i", "lo"])
        .args(["--filter", &format!("udp and dst port {udp}")])
        .args(["--duration", "60s", "--stats-every", "0"])
        .args(["--flow-capacity", "2", "--dos-threshold", "1000", "--adapt"])
        .args([
            "--events",
            "own.clarion",
            "--format",
            "json",
            "-o",
            "reports.jsonl",
        ])
        .args(["--epoch-stats", "epochs.jsonl"])
        .current_dir(d)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).expect("a file"))
        .spawn()
        .expect("agent starts");
    let agent = Guard::new(agent);
    let t = Instant::now();
    while !std::fs::read_to_string(&err)
        .unwrap_or_default()
        .contains("capturing on")
    {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the agent never captured: {}",
            std::fs::read_to_string(&err).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // 20 small flows (2 × 48 B in IP length), then, epochs later, 4 big
    // ones (10 × 500 B): a big flow's counter never holds a small one's bytes.
    flows(udp, 20, 2, 20);
    std::thread::sleep(Duration::from_millis(100));
    flows(udp, 4, 10, 472);
    std::thread::sleep(Duration::from_millis(300));
    let out = agent.terminate("the agent");
    let summary = std::fs::read_to_string(&err).expect("its standard error");
    assert!(out.status.success(), "{summary}");

    assert!(
        summary.lines().any(|l| l.trim().starts_with("packets 80 (")),
        "every datagram counted:\n{summary}"
    );
    // --flow-capacity: 2 of the 4 big flows tracked, the others' packets untracked.
    assert_eq!(count(&summary, "flows", "created"), 2, "{summary}");
    assert!(count(&summary, "flows", "packets") > 0, "{summary}");
    // --dos-threshold: every small flow's packets filtered, and the big
    // flows' first ones of an epoch.
    assert!(
        summary.contains("DoS filter: threshold 1,000 B (0 raises"),
        "{summary}"
    );
    assert!(count(&summary, "DoS filter", "packets") >= 40, "{summary}");
    // --adapt: the workers measure each epoch for degraded mode...
    let epochs = std::fs::read_to_string(d.join("epochs.jsonl")).expect("epoch statistics");
    assert!(!epochs.is_empty(), "{summary}");
    for line in epochs.lines() {
        let e: Value = serde_json::from_str(line).expect("a JSON line");
        assert!(e["busy_ns"].is_u64() && e["shed_depth"].is_f64(), "{line}");
    }
    // ... and the merged reports say they were made in it.
    let reports = std::fs::read_to_string(d.join("reports.jsonl")).expect("reports");
    let reports: Vec<Value> = reports
        .lines()
        .map(|l| serde_json::from_str(l).expect("a report"))
        .collect();
    assert!(!reports.is_empty(), "the tracked flows are reported: {summary}");
    for r in &reports {
        assert_eq!(r["completeness"]["degraded"], true, "{r}");
    }
    assert!(
        reports
            .iter()
            .any(|r| r["completeness"]["untracked"].as_u64() > Some(0)),
        "a window holds untracked packets: {reports:?}"
    );
    eprintln!(
        "live agent: {} epochs, {} reports, all degraded; its summary:\n{summary}",
        epochs.lines().count(),
        reports.len()
    );
}
