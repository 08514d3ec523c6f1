//! `clarion run --alertmanager` end to end on scenarios/ traffic: a real
//! Prometheus Alertmanager (Debian `prometheus-alertmanager`; skipped,
//! saying so, when it is not installed) routing to a webhook of ours,
//! grouped by event and host; two `clarion run --speed 1` (hosts `snd-a`
//! and `snd-b`) replay scenarios/golden/burst_loss.pcap, whose one TCP
//! connection loses segments in every 100 ms window of its bursty phase
//! (1.5 s) and none in its paced phase (1.5 s).
//!
//! At the capture's pace the firing reaches Alertmanager ~1.7 s before the
//! resolution, so Alertmanager notifies each on its own (unpaced, both
//! arrive milliseconds apart, and whether Alertmanager notified the firing
//! in between is a race with its dispatcher). Alertmanager's webhook must get, per
//! (event, host) group, exactly one firing and one resolved notification,
//! their times those of the episode computed from the run's own output.
#![allow(clippy::unwrap_used)] // tests unwrap

#[path = "../../alerts/tests/alertmanager_server/mod.rs"]
mod alertmanager_server;
mod bus;
mod common;
#[path = "../../alerts/tests/receiver/mod.rs"]
mod receiver;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{clarion_process, repo};
use receiver::Receiver;
use serde_json::Value;

/// Losses for 2 windows fire; 3 windows without resolve. `traffic` fires
/// in every window (its reports show that time passed: a file has no
/// other clock) and stays firing to the end.
const EVENTS: &str = "\
event losses
  filter proto = tcp
  when sum(is_lost) > 5
  per 5tuple
  every 100ms
  alert after 2 windows, resolve after 3 windows, severity critical

event traffic
  when sum(packets) > 0
  every 100ms
  alert severity info
";
const AFTER: usize = 2;
const RESOLVE: u64 = 3;
const HOSTS: [&str; 2] = ["snd-a", "snd-b"];

fn lines(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// RFC 3339 (Alertmanager's, to the millisecond or finer) as ns since the epoch.
fn ns(s: &str) -> u64 {
    let t: SystemTime = humantime::parse_rfc3339(s).unwrap();
    t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// The episode of `losses` the run's output shows: (group label, start of
/// the run of windows, end of it, their length). The capture has one, in
/// one group (checked).
fn episode(reference: &[Value]) -> (String, u64, u64, u64) {
    let losses: Vec<&Value> = reference.iter().filter(|r| r["event"] == "losses").collect();
    let groups: std::collections::BTreeSet<String> = losses.iter().map(|r| r["group"].to_string()).collect();
    assert_eq!(groups.len(), 1, "one group loses: {groups:?}");
    let starts: Vec<u64> = losses
        .iter()
        .map(|r| r["window"]["start_ns"].as_u64().unwrap())
        .collect();
    let ends: Vec<u64> = losses
        .iter()
        .map(|r| r["window"]["end_ns"].as_u64().unwrap())
        .collect();
    let interval = ends[0] - starts[0];
    // One run of consecutive windows, long enough to fire.
    assert!(starts.windows(2).all(|w| w[1] == w[0] + interval), "{starts:?}");
    assert!(starts.len() >= AFTER, "{} windows", starts.len());
    let end = *ends.last().unwrap();
    // Alertmanager's `group` label: the group's fields, space-separated.
    let g = &losses[0]["group"];
    let label = ["src_ip", "dst_ip", "src_port", "dst_port", "proto"]
        .iter()
        .map(|f| {
            let v = &g[*f];
            format!("{f}={}", v.as_str().map_or_else(|| v.to_string(), str::to_string))
        })
        .collect::<Vec<_>>()
        .join(" ");
    (label, starts[0], end, interval)
}

/// (status, startsAt, endsAt for resolved) of each `losses` alert in each
/// notification, per host; every notification's group labels checked.
type Seen = BTreeMap<String, Vec<(String, String, u64, Option<u64>)>>;

fn notified(rx: &Receiver) -> Seen {
    let mut out = Seen::new();
    for q in rx.requests() {
        let n = q.json();
        if n["groupLabels"]["alertname"] != "losses" {
            continue;
        }
        // Grouped as configured: by event and host, nothing else.
        let gl = n["groupLabels"].as_object().unwrap();
        assert_eq!(gl.len(), 2, "{n}");
        let host = gl["host"].as_str().unwrap().to_string();
        for a in n["alerts"].as_array().unwrap() {
            assert_eq!(a["labels"]["alertname"], "losses", "{a}");
            assert_eq!(a["labels"]["host"], host.as_str(), "{a}");
            assert_eq!(a["labels"]["severity"], "critical", "{a}");
            let status = a["status"].as_str().unwrap().to_string();
            let ends = (status == "resolved").then(|| ns(a["endsAt"].as_str().unwrap()));
            out.entry(host.clone()).or_default().push((
                status,
                a["labels"]["group"].as_str().unwrap().to_string(),
                ns(a["startsAt"].as_str().unwrap()),
                ends,
            ));
        }
    }
    out
}

#[test]
fn one_firing_and_one_resolved_per_episode_and_group_on_scenario_traffic() {
    let started = Instant::now();
    let capture = repo().join("scenarios/golden/burst_loss.pcap");
    let rx = Receiver::start(Box::new(|_, _| 200));
    // Grouped by event and host. The episode's alert starts in the
    // capture's past, so Alertmanager notifies it at once (group_wait is
    // over); group_interval short so that the test waits little for the
    // resolution's notification.
    let config = alertmanager_server::webhook_config(&rx.url("/am"), &["alertname", "host"], "0s", "500ms");
    let Some(am) = alertmanager_server::start(&config) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("scenario.clarion");
    std::fs::write(&events, EVENTS).unwrap();
    let runs: Vec<_> = HOSTS
        .iter()
        .map(|host| {
            let child = clarion_process()
                .arg("run")
                .arg("--pcap")
                .arg(&capture)
                .arg("--events")
                .arg(&events)
                .args(["--speed", "1", "--host", host, "--format", "json", "-q"])
                .arg("--output")
                .arg(dir.path().join(format!("{host}.jsonl")))
                .args(["--alertmanager", &am.url])
                .arg("--webhook-dead-letter")
                .arg(dir.path().join(format!("{host}.dead.jsonl")))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (host, child)
        })
        .collect();
    let mut references = BTreeMap::new();
    for (host, child) in runs {
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{host}: {err}");
        assert!(
            !dir.path().join(format!("{host}.dead.jsonl")).exists()
                || lines(&dir.path().join(format!("{host}.dead.jsonl"))).is_empty(),
            "{host}: dead letters; {err}"
        );
        references.insert(host.to_string(), lines(&dir.path().join(format!("{host}.jsonl"))));
    }
    // Paced: the run took the capture's 3 s at least.
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let mut want = Seen::new();
    for (host, reference) in &references {
        let (group, start, end, interval) = episode(reference);
        // `traffic`'s reports show time passing the resolution.
        let latest = reference
            .iter()
            .map(|r| r["window"]["end_ns"].as_u64().unwrap())
            .max()
            .unwrap();
        assert!(latest > end + RESOLVE * interval, "time passes the resolution");
        want.insert(
            host.clone(),
            vec![
                ("firing".into(), group.clone(), start, None),
                ("resolved".into(), group, start, Some(end)),
            ],
        );
    }
    let t0 = Instant::now();
    while notified(&rx).values().map(Vec::len).sum::<usize>() < 4 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "timed out: {:?}",
            notified(&rx)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Let any extra notification come (four group intervals) before counting.
    std::thread::sleep(Duration::from_secs(2));
    // Alertmanager keeps milliseconds: the episode's times are whole
    // windows of 100 ms, so they compare exactly.
    assert_eq!(notified(&rx), want);
    // Gone from Alertmanager; `traffic` still active, one alert per host
    // and direction of the connection.
    let active = alertmanager_server::alerts(&am);
    assert!(
        !active.iter().any(|a| a["labels"]["alertname"] == "losses"),
        "{active:?}"
    );
    let traffic = active
        .iter()
        .filter(|a| a["labels"]["alertname"] == "traffic" && a["status"]["state"] == "active")
        .count();
    assert_eq!(traffic, 2 * HOSTS.len(), "{active:?}");
    eprintln!("took {:?}", started.elapsed());
}

/// The operator's path of issue 37 (a manager deciding for its agents):
/// `clarion manager --alertmanager`, its network-wide `losses` decided
/// from one agent replaying the same capture at its pace
/// (`clarion agent --pcap --speed 1`). The manager closes windows on the
/// reports' own time (weeks old here), moved on at the wall clock's pace
/// (on the wall clock it closed each window at once, and no alert held
/// for two windows). It closes them at every turn of its tick, reports or
/// not: nothing else fires after the episode, and the resolution comes
/// while the manager runs, 2 s (the grace) after the episode's last
/// windows closed quiet (before, only at its next report or its exit).
/// Exactly one firing and one resolved notification, at the times of the
/// manager's own output. Skipped without nats-server too.
#[test]
fn the_managers_decisions_on_a_replayed_capture_reach_alertmanager_once_per_episode() {
    let capture = repo().join("scenarios/golden/burst_loss.pcap");
    let rx = Receiver::start(Box::new(|_, _| 200));
    let config = alertmanager_server::webhook_config(&rx.url("/am"), &["alertname", "host"], "0s", "500ms");
    let Some(am) = alertmanager_server::start(&config) else {
        return;
    };
    let Some(server) = bus::require_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("hosts.txt"), "snd 10.0.128.0/24\n").unwrap();
    std::fs::write(
        d.join("net.clarion"),
        "event losses\n  filter proto = tcp and src_ip in 10.0.128.0/24\n  when sum(is_lost) > 5\n  per 5tuple\n  every 100ms\n  across hosts\n  alert after 2 windows, resolve after 3 windows, severity critical\n",
    )
    .unwrap();
    let (_nats, port) = bus::start_server(&server);
    let url = format!("nats://127.0.0.1:{port}");
    let manager = bus::Guard::new(bus::manager(
        d,
        &url,
        &[
            "--events",
            "net.clarion",
            "--no-store",
            "--no-api",
            "-o",
            "net.jsonl",
            "--alertmanager",
            &am.url,
            "--webhook-dead-letter",
            "dead.jsonl",
        ],
    ));
    let agent = bus::clarion()
        .args(["agent", "--nats", &url, "--host", "snd", "--pcap"])
        .arg(&capture)
        .args(["--speed", "1", "--linger", "2s"])
        .current_dir(d)
        .output()
        .unwrap();
    assert!(
        agent.status.success(),
        "{}",
        String::from_utf8_lossy(&agent.stderr)
    );
    // The firing, while the manager runs.
    let t0 = Instant::now();
    let wait_for = |n: usize| {
        while notified(&rx).values().map(Vec::len).sum::<usize>() < n {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "timed out: {:?}",
                notified(&rx)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_for(1);
    // The resolution, while the manager still runs.
    wait_for(2);
    let out = manager.terminate("clarion manager");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Let any extra notification come before counting.
    std::thread::sleep(Duration::from_secs(2));
    let dead = std::fs::read_to_string(d.join("dead.jsonl")).unwrap_or_default();
    assert!(dead.is_empty(), "dead letters: {dead}");
    let reference = lines(&d.join("net.jsonl"));
    let (group, start, end, _) = episode(&reference);
    let mut want = Seen::new();
    want.insert(
        "manager".into(),
        vec![
            ("firing".into(), group.clone(), start, None),
            ("resolved".into(), group, start, Some(end)),
        ],
    );
    assert_eq!(notified(&rx), want);
    let active = alertmanager_server::alerts(&am);
    assert!(
        !active.iter().any(|a| a["labels"]["alertname"] == "losses"),
        "{active:?}"
    );
}
