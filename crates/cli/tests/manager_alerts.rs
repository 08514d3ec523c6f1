//! `clarion manager --webhook / --syslog` end to end: a real nats-server,
//! a manager and four agents replaying generated traffic (tests/bus), a
//! local HTTP receiver and a UDP syslog socket. The reference is the
//! manager's own `--output` (JSON lines, flushed per report): every report
//! in it must reach the receiver exactly once by idempotency key, each
//! event's in window order, or — receiver down — be in the dead-letter
//! file, exactly those. The manager's `/metrics` must count what the
//! receiver saw (delivered = distinct keys, retries = the other requests)
//! and pass `promtool check metrics` when promtool is installed.
//!
//! Skipped, saying so, without nats-server (Debian `nats-server`).
#![allow(clippy::unwrap_used)] // tests unwrap

mod bus;
mod common;
#[path = "../../alerts/tests/receiver/mod.rs"]
mod receiver;
#[path = "../../alerts/tests/syslog_parser/mod.rs"]
mod syslog_parser;

use std::collections::HashSet;
use std::net::UdpSocket;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use bus::*;
use receiver::Receiver;
use serde_json::Value;

/// Windows of generated traffic: enough for every event to fire (~100 reports).
const WINDOWS: u64 = 200;

fn lines(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A network (server, traffic, split captures) in a fresh directory.
fn network() -> Option<(tempfile::TempDir, Guard, String)> {
    let server = require_server()?;
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), WINDOWS);
    let (guard, port) = start_server(&server);
    Some((dir, guard, format!("nats://127.0.0.1:{port}")))
}

#[test]
fn every_manager_report_reaches_the_webhook_once_in_order() {
    let Some((dir, _server, url)) = network() else {
        return;
    };
    let d = dir.path();
    // Requests 3 to 6 get 500: one report retried, the others wait behind it.
    let rx = Receiver::start(Box::new(|_, n| if (3..7).contains(&n) { 500 } else { 200 }));
    let hook = rx.url("/hook");
    let m = run_network(
        d,
        &url,
        &[
            "--poll-timeout",
            "20s",
            "--webhook-every-window",
            "--webhook",
            &hook,
            "--webhook-backoff",
            "10ms",
            "--webhook-retries",
            "30",
            "--webhook-dead-letter",
            "dead.jsonl",
        ],
        &["--linger", "60s"],
    );
    let err = String::from_utf8_lossy(&m.stderr);
    assert!(m.status.success(), "{err}");
    let reference = lines(&d.join("net.jsonl"));
    assert!(lines(&d.join("dead.jsonl")).is_empty(), "{err}");
    receiver::assert_all_delivered_in_order(&rx.delivered(), &reference, 20);
    let reqs = rx.requests();
    assert_eq!(reqs.iter().filter(|q| q.status == 500).count(), 4);
    assert!(reqs.iter().all(|q| q.method == "POST" && q.path == "/hook"));
    // The reports are the manager's: its name is their host.
    assert!(
        reference.iter().all(|r| r["host"] == "manager"),
        "{:?}",
        reference[0]
    );
}

#[test]
fn a_receiver_down_the_whole_time_dead_letters_exactly_the_managers_reports() {
    let Some((dir, _server, url)) = network() else {
        return;
    };
    let d = dir.path();
    // A port nothing listens on: every attempt is refused.
    let hook = format!("http://127.0.0.1:{}/hook", free_port());
    let m = run_network(
        d,
        &url,
        &[
            "--poll-timeout",
            "20s",
            "--webhook-every-window",
            "--webhook",
            &hook,
            "--webhook-backoff",
            "1ms",
            "--webhook-retries",
            "1",
            "--webhook-dead-letter",
            "dead.jsonl",
        ],
        &["--linger", "60s"],
    );
    let err = String::from_utf8_lossy(&m.stderr);
    assert!(m.status.success(), "{err}");
    let reference = lines(&d.join("net.jsonl"));
    let dead = lines(&d.join("dead.jsonl"));
    assert!(reference.len() > 20, "the network fires: {}", reference.len());
    // One delivery thread, first in first out: the same reports, in order.
    let dead_reports: Vec<&Value> = dead.iter().map(|l| &l["report"]).collect();
    assert_eq!(dead_reports, reference.iter().collect::<Vec<_>>());
    let keys: HashSet<&str> = dead.iter().map(|l| l["key"].as_str().unwrap()).collect();
    assert_eq!(keys.len(), reference.len(), "a key per report");
    for l in &dead {
        assert_eq!(l["schema"], "clarion.dead-letter/1");
        assert_eq!(l["attempts"], 2, "{l}");
        assert!(
            l["reason"]
                .as_str()
                .unwrap()
                .starts_with("gave up after 2 attempts"),
            "{l}"
        );
    }
    let n = reference.len();
    assert!(
        err.contains(&format!(
            "0 of {n} reports delivered, {n} dead-lettered to dead.jsonl"
        )),
        "{err}"
    );
}

#[test]
fn bad_destinations_stop_the_manager_before_it_starts() {
    // No NATS server needed: the flags are refused first.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hosts.txt"), INVENTORY).unwrap();
    for (flags, needle) in [
        (&["--webhook", "ftp://h/x"][..], "must be http://"),
        (&["--syslog", "h:514"][..], "udp://HOST:514"),
        (
            &["--syslog", "udp://h", "--syslog-facility", "local9"][..],
            "not a syslog facility",
        ),
    ] {
        let o = clarion()
            .args([
                "manager",
                "--insecure",
                "--no-store",
                "--no-api",
                "--inventory",
                "hosts.txt",
            ])
            .args(["--nats", "nats://127.0.0.1:1"])
            .args(flags)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(needle), "{flags:?}: {err}");
    }
}

#[test]
fn a_slow_receiver_never_holds_the_manager_up() {
    let Some((dir, _server, url)) = network() else {
        return;
    };
    let d = dir.path();
    // Half a second per answer, a queue of 2: the decisions overflow it
    // (however busy the machine, they come faster than that on average).
    let rx = Receiver::start(Box::new(|_, _| {
        std::thread::sleep(Duration::from_millis(500));
        200
    }));
    let hook = rx.url("/hook");
    let m = run_network(
        d,
        &url,
        &[
            "--poll-timeout",
            "20s",
            "--webhook-every-window",
            "--webhook",
            &hook,
            "--webhook-queue",
            "2",
            "--webhook-dead-letter",
            "dead.jsonl",
        ],
        &["--linger", "60s"],
    );
    let err = String::from_utf8_lossy(&m.stderr);
    assert!(m.status.success(), "{err}");
    let reference = lines(&d.join("net.jsonl"));
    let dead = lines(&d.join("dead.jsonl"));
    // The default for the manager is live: spilled at once, not waited for.
    assert!(!dead.is_empty(), "the queue never filled: {err}");
    for l in &dead {
        assert_eq!(l["attempts"], 0, "{l}");
        assert!(
            l["reason"].as_str().unwrap().starts_with("queue full (2 reports"),
            "{l}"
        );
    }
    // Delivered and spilled: every report once, none in both.
    let mut got: Vec<Value> = rx.delivered();
    got.extend(dead.iter().map(|l| l["report"].clone()));
    let key = |r: &Value| {
        (
            r["event"].to_string(),
            r["window"]["end_ns"].as_u64(),
            r["group"].to_string(),
        )
    };
    got.sort_by_key(key);
    let mut want = reference.clone();
    want.sort_by_key(key);
    assert!(want.len() > 20, "the network fires: {}", want.len());
    assert_eq!(got, want);
    eprintln!(
        "{} reports: {} delivered, {} spilled",
        want.len(),
        want.len() - dead.len(),
        dead.len()
    );
}

#[test]
fn an_unwritable_dead_letter_file_stops_the_manager() {
    let Some((dir, _server, url)) = network() else {
        return;
    };
    let d = dir.path();
    // Every report is refused, and its dead letter cannot be written: the
    // manager must stop at once, not run on (--duration 300s) losing reports.
    let hook = format!("http://127.0.0.1:{}/hook", free_port());
    let m = manager(
        d,
        &url,
        &[
            "--events",
            "events.clarion",
            "--no-store",
            "--no-api",
            "-o",
            "net.jsonl",
            "--duration",
            "300s",
            "--webhook-every-window",
            "--webhook",
            &hook,
            "--webhook-retries",
            "0",
            "--webhook-dead-letter",
            "/dev/full",
        ],
    );
    let m = Guard::new(m);
    let _agents: Vec<Guard> = (1..=4)
        .map(|i| paced_agent(d, &url, &format!("web-{i}"), &format!("hosts/web-{i}.pcap")))
        .collect();
    let o = wait(m.take(), "the manager", Duration::from_secs(90));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot write a dead letter to /dev/full"), "{err}");
}

#[test]
fn at_sigterm_the_manager_drains_for_webhook_drain_then_dead_letters() {
    let Some((dir, _server, url)) = network() else {
        return;
    };
    let d = dir.path();
    // Refused all along, with retries that would outlast any test: only
    // the drain deadline can end delivery.
    let hook = format!("http://127.0.0.1:{}/hook", free_port());
    let m = Guard::new(manager(
        d,
        &url,
        &[
            "--events",
            "events.clarion",
            "--no-store",
            "--no-api",
            "-o",
            "net.jsonl",
            "--duration",
            "300s",
            "--webhook-every-window",
            "--webhook",
            &hook,
            "--webhook-retries",
            "1000",
            "--webhook-backoff",
            "100ms",
            "--webhook-drain",
            "1s",
            "--webhook-dead-letter",
            "dead.jsonl",
        ],
    ));
    let _agents: Vec<Guard> = (1..=4)
        .map(|i| paced_agent(d, &url, &format!("web-{i}"), &format!("hosts/web-{i}.pcap")))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines(&d.join("net.jsonl")).len() < 5 {
        assert!(Instant::now() < deadline, "the manager wrote no reports");
        std::thread::sleep(Duration::from_millis(20));
    }
    let t0 = Instant::now();
    let o = m.terminate("the manager");
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    // 1 s of drain, and the rest of a clean stop; far from 1000 retries.
    assert!(took < Duration::from_secs(20), "{took:?}: {err}");
    let reference = lines(&d.join("net.jsonl"));
    let dead = lines(&d.join("dead.jsonl"));
    let dead_reports: Vec<&Value> = dead.iter().map(|l| &l["report"]).collect();
    assert_eq!(dead_reports, reference.iter().collect::<Vec<_>>(), "{err}");
    for l in &dead {
        let why = l["reason"].as_str().unwrap();
        assert!(why.starts_with("not delivered before the exit deadline"), "{l}");
    }
    let n = reference.len();
    assert!(
        err.contains(&format!("0 of {n} reports delivered, {n} dead-lettered")),
        "{err}"
    );
}

#[test]
fn syslog_from_the_manager_one_message_per_report() {
    let Some((dir, _server, url)) = network() else {
        return;
    };
    let d = dir.path();
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = format!("udp://{}", sock.local_addr().unwrap());
    // Read while the manager sends, into a large buffer, until it has
    // exited and nothing more is queued (no guess of how long it takes).
    common::grow_receive_buffer(&sock);
    sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let finished = done.clone();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            match sock.recv(&mut buf) {
                Ok(n) => got.push(String::from_utf8(buf[..n].to_vec()).unwrap()),
                Err(_) if finished.load(std::sync::atomic::Ordering::SeqCst) => return got,
                Err(_) => {}
            }
        }
    });
    let m = run_network(
        d,
        &url,
        &[
            "--poll-timeout",
            "20s",
            "--syslog",
            &addr,
            "--syslog-every-window",
            "--name",
            "mgr-1",
        ],
        &["--linger", "60s"],
    );
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let got = reader.join().unwrap();
    let reference = lines(&d.join("net.jsonl"));
    assert!(reference.len() > 20, "the network fires: {}", reference.len());
    assert_eq!(got.len(), reference.len(), "one message per report");
    for (text, want) in got.iter().zip(&reference) {
        let m = syslog_parser::parse(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(m.pri, 16 * 8 + 4, "local0.warning");
        assert_eq!((m.app_name.as_str(), m.msgid.as_str()), ("clarion", "report"));
        assert_eq!(m.hostname, "mgr-1");
        assert_eq!(m.param("clarion@32473", "event"), want["event"].as_str());
        assert_eq!(
            m.param("clarion@32473", "window_end"),
            want["window"]["end"].as_str()
        );
        let json: Value = serde_json::from_str(m.msg.as_deref().unwrap()).unwrap();
        assert_eq!(&json, want);
    }
}

#[test]
fn the_managers_metrics_count_what_the_receiver_saw() {
    let Some(server) = require_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let frames = setup(d, WINDOWS);
    let want = reference(&frames).len();
    let (_server, port) = start_server(&server);
    let url = format!("nats://127.0.0.1:{port}");
    // Every fifth request fails once (then its retry is taken: the next request).
    let rx = Receiver::start(Box::new(|_, n| if n % 5 == 2 { 503 } else { 200 }));
    let hook = rx.url("/hook");
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let syslog = format!("udp://{}", sink.local_addr().unwrap());
    // Runs until stopped, so its page can be read once every report is out.
    let mut child = manager(
        d,
        &url,
        &[
            "--events",
            "events.clarion",
            "--no-store",
            "--no-api",
            "-o",
            "net.jsonl",
            "--poll-timeout",
            "20s",
            "--duration",
            "300s",
            "--metrics",
            "127.0.0.1:0",
            "--webhook-every-window",
            "--webhook",
            &hook,
            "--webhook-backoff",
            "10ms",
            "--webhook-retries",
            "30",
            "--webhook-dead-letter",
            "dead.jsonl",
            "--syslog-every-window",
            "--syslog",
            &syslog,
        ],
    );
    let err = child.stderr.take().unwrap();
    let m = Guard::new(child);
    let addr = common::metrics::address(err);
    let agents: Vec<Guard> = (1..=4)
        .map(|i| {
            let host = format!("web-{i}");
            Guard::new(
                clarion()
                    .args([
                        "agent", "--nats", &url, "--host", &host, "--linger", "60s", "--pcap",
                    ])
                    .arg(format!("hosts/{host}.pcap"))
                    .current_dir(d)
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    // The manager decides as the agents report, and delivers; the agents
    // linger (answering polls) until killed at the end.
    let deadline = Instant::now() + Duration::from_secs(120);
    let out = d.join("net.jsonl");
    loop {
        let written = lines(&out).len();
        if written == want && rx.delivered().len() == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{written} of {want} reports written, {} delivered",
            rx.delivered().len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let page = common::metrics::page(&addr);
    let reqs = rx.requests();
    let keys: HashSet<&str> = reqs
        .iter()
        .map(|q| q.header("idempotency-key").unwrap())
        .collect();
    let n = want as f64;
    let webhook = |name: &str| common::metrics::sample(&page, &format!("{name}{{target=\"webhook\"}}"));
    let syslog = |name: &str| common::metrics::sample(&page, &format!("{name}{{target=\"syslog\"}}"));
    assert_eq!(webhook("clarion_alerts_accepted_total"), Some(n), "{page}");
    assert_eq!(webhook("clarion_alerts_delivered_total"), Some(keys.len() as f64));
    assert_eq!(
        webhook("clarion_alerts_retries_total"),
        Some((reqs.len() - keys.len()) as f64),
        "every request beyond a key's first is a retry"
    );
    assert!(reqs.iter().any(|q| q.status == 503));
    assert_eq!(webhook("clarion_alerts_dead_lettered_total"), Some(0.0));
    assert_eq!(webhook("clarion_alerts_queue_depth"), Some(0.0));
    assert_eq!(syslog("clarion_alerts_accepted_total"), Some(n));
    assert_eq!(syslog("clarion_alerts_delivered_total"), Some(n));
    assert_eq!(
        common::metrics::sample(&page, "clarion_reports_total{scope=\"network\"}"),
        Some(n)
    );
    common::metrics::promtool_accepts(&page, "clarion manager");
    drop(agents);
    let o = m.terminate("the manager");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(lines(&d.join("dead.jsonl")).is_empty());
}
