//! Installing many events at once stalls no decision (issue 33): a POST of
//! 20,000 network-wide events to a manager while four agents replay their
//! captures through a real nats-server. The request's events are checked,
//! placed and split apart from the loop that reads the agents; the loop
//! applies them and sends their triggers a slice at a time. Meanwhile
//! `GET /v1/hosts` is asked every few milliseconds, and every decision of
//! the replay must be complete and the same as the reference evaluator's.
//!
//! The 20,000 events are placed on `web-5`, a host of the inventory that
//! runs no agent: what is measured is the manager (its API, its loop, its
//! store, its messages to hosts), not how fast an agent installs 5,000
//! triggers in the middle of a replay.
//!
//! Timing bounds: the figures (the POST under 2 s, every `GET
//! /v1/hosts` within 50 ms) with `cargo test --release`. The debug build
//! is unoptimised (checking 20,000 events alone takes seconds there) and
//! shares 2 cores with four agents: it is held to [`POST_LIMIT`] and
//! [`HOSTS_LIMIT`], and to no `GET /v1/hosts` waiting a third of the
//! POST. Before, the loop held every `GET` for the whole request (issue
//! 33: 34 s for 10,000 events, a `GET /v1/hosts` taking 33 s). The
//! figures measured are printed (`--nocapture`).

mod bus;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bus::*;

const BULK: usize = 20_000;

/// What the assertions allow (see the module documentation).
const POST_LIMIT: Duration = if cfg!(debug_assertions) {
    Duration::from_secs(60)
} else {
    Duration::from_secs(2)
};
const HOSTS_LIMIT: Duration = if cfg!(debug_assertions) {
    Duration::from_secs(2)
} else {
    Duration::from_millis(50)
};

/// `n` events on web-5's prefix, each its own name.
fn bulk(n: usize) -> String {
    let mut text = String::with_capacity(n * 90);
    for i in 0..n {
        text.push_str(&format!(
            "event b{i} filter dst_ip in 10.0.129.{}/32 when sum(volume) > 1MB per dst_ip every 10ms across hosts\n",
            i % 256
        ));
    }
    text
}

/// `GET /v1/hosts` on its own connection: the answer's body and how long it took.
fn get_hosts(port: u16) -> (String, Duration) {
    let t = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("the API accepts");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    write!(s, "GET /v1/hosts HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n").expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("answer");
    let took = t.elapsed();
    assert!(
        text.starts_with("HTTP/1.0 200") || text.starts_with("HTTP/1.1 200"),
        "{text}"
    );
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (body, took)
}

/// The replaying hosts (web-1 to web-4) that have finished their capture.
fn finished(body: &str) -> usize {
    let hosts: Vec<serde_json::Value> = serde_json::from_str(body).expect("JSON hosts");
    let done = hosts.iter().filter(|h| {
        h["name"].as_str().is_some_and(|n| n != "web-5") && h["finished"].as_bool() == Some(true)
    });
    done.count()
}

#[test]
fn twenty_thousand_events_install_while_hosts_are_answered_and_decisions_made() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // 6 s of traffic at the capture's pace: the request lands in the middle.
    let frames = setup(d, 600);
    std::fs::write(d.join("hosts.txt"), format!("{INVENTORY}web-5 10.0.129.0/24\n")).expect("inventory");
    let (_server, nats_port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{nats_port}");
    let (manager, port) = api_manager(
        d,
        &nats,
        &[
            "--events",
            "events.clarion",
            "--store",
            "m.sqlite",
            "--api-no-auth",
            "-o",
            "net.jsonl",
        ],
    );
    let agents = paced_agents(d, &nats);

    // Every GET /v1/hosts from now on, with when it was asked.
    let stop = Arc::new(AtomicBool::new(false));
    let asked: Arc<Mutex<Vec<(Instant, Duration, usize)>>> = Arc::default();
    let poller = {
        let (stop, asked) = (Arc::clone(&stop), Arc::clone(&asked));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let at = Instant::now();
                let (body, took) = get_hosts(port);
                asked.lock().expect("lock").push((at, took, finished(&body)));
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    // The replay is under way: every agent has sent a satisfaction report.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (body, _) = get_hosts(port);
        let hosts: Vec<serde_json::Value> = serde_json::from_str(&body).expect("JSON");
        let reporting = hosts
            .iter()
            .filter(|h| h["satisfaction_reports"].as_u64().unwrap_or(0) > 0)
            .count();
        if reporting == 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the agents did not start reporting: {body}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let text = bulk(BULK);
    let client = clarion_control::Client::new(&format!("http://127.0.0.1:{port}"), None);
    let posted_at = Instant::now();
    let added = client.add(&text);
    let post = posted_at.elapsed();

    // Until every replaying host has finished its capture.
    let deadline = Instant::now() + Duration::from_secs(120);
    while asked.lock().expect("lock").last().map_or(0, |a| a.2) < 4 {
        assert!(Instant::now() < deadline, "the agents did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    poller.join().expect("the poller ends");
    let listed = client.list().map(|l| l.len());
    let out = manager.terminate("the manager");
    let summary = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{summary}");
    wait_agents(agents, Duration::from_secs(60));
    let added = added.expect("the events are installed");
    assert_eq!(added.len(), BULK);
    assert!(added.iter().all(|e| e.hosts == ["web-5"]), "{:?}", added.first());

    let asked = asked.lock().expect("lock").clone();
    let during: Vec<Duration> = asked
        .iter()
        .filter(|(at, took, _)| *at + *took >= posted_at && *at <= posted_at + post)
        .map(|a| a.1)
        .collect();
    let worst = asked.iter().map(|a| a.1).max().unwrap_or_default();
    let worst_during = during.iter().max().copied().unwrap_or_default();
    let mut sorted: Vec<Duration> = asked.iter().map(|a| a.1).collect();
    sorted.sort();
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
    println!(
        "POST of {BULK} events: {post:?}; GET /v1/hosts: {} asked, median {median:?}, worst {worst:?}; \
         {} asked during the POST, worst {worst_during:?}",
        asked.len(),
        during.len()
    );
    assert!(post < POST_LIMIT, "POST of {BULK} events took {post:?}");
    assert!(
        worst < HOSTS_LIMIT,
        "a GET /v1/hosts took {worst:?} (median {median:?}, {} asked)",
        asked.len()
    );
    assert!(!during.is_empty(), "the hosts were asked during the POST");
    assert!(
        worst_during * 3 < post,
        "a GET /v1/hosts waited {worst_during:?} of the POST's {post:?}"
    );

    // Every decision of the replay complete, and the reference's.
    assert!(
        summary.contains("(0 unanswered, 0 for windows no longer kept, 0 not sent to hosts that had left)")
            && summary.contains(" 0 partial)"),
        "{summary}"
    );
    // (A report of the last window is marked incomplete all the same: the
    // captures end inside it.)
    let written = std::fs::read_to_string(d.join("net.jsonl")).expect("reports");
    assert_eq!(rows_of_jsonl(&written), reference(&frames));
    assert!(!summary.contains("refused as impossible"), "{summary}");
    assert_eq!(listed.expect("lists"), BULK + 3, "the file's 3 and the request's");
}
