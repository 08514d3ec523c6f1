//! The webhook transport against a real HTTP server (tests/receiver):
//! what is sent (method, headers, body), which answers are retried, and
//! delivery across a receiver that is down for a while.
#![allow(clippy::unwrap_used)] // tests unwrap (clippy.toml allows it in #[test] only)

mod receiver;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use clarion_alerts::{
    idempotency_key, AlertSink, Alerting, DeadLetter, DeliveryConfig, Hold, Overflow, Predicates, Rule,
    Severity, WebhookConfig, WebhookFormat,
};
use clarion_report::{Completeness, GroupKey, Origin, Report, Window};
use clarion_sinks::Sink;
use receiver::Receiver;

fn report(event: &str, i: u64) -> Report {
    Report {
        event: event.into(),
        window: Window {
            start_ns: 1_795_327_271_000_000_000 + i * 10_000_000,
            end_ns: 1_795_327_271_010_000_000 + i * 10_000_000,
        },
        group: GroupKey {
            src_ip: Some(("10.0.0.1".parse::<IpAddr>().unwrap(), 32)),
            ..GroupKey::default()
        },
        values: vec![("sum(volume)".into(), 1000.0 + i as f64)].into(),
        origin: Origin {
            host: "demo".into(),
            worker: 0,
        },
        completeness: Completeness {
            complete: true,
            ..Completeness::default()
        },
        capture: None,
        missing_hosts: Box::default(),
    }
}

fn delivery(retries: u32) -> DeliveryConfig {
    DeliveryConfig {
        retries,
        timeout: Duration::from_secs(2),
        backoff: Duration::from_millis(5),
        backoff_max: Duration::from_millis(40),
        queue: 64,
        overflow: Overflow::Block,
        drain: Duration::from_secs(10),
        // These tests are of the per-window mode (one request per report);
        // transitions are below.
        alerting: Alerting {
            every_window: true,
            ..Alerting::default()
        },
    }
}

fn sink(url: String, format: WebhookFormat, retries: u32, dead: &std::path::Path) -> AlertSink {
    AlertSink::webhook(
        WebhookConfig {
            url,
            format,
            headers: vec![("Authorization".into(), "Bearer t0ken".into())],
            predicates: Predicates::new(),
        },
        delivery(retries),
        DeadLetter::open(dead).unwrap(),
        Arc::new(|m: &str| eprintln!("note: {m}")),
    )
    .unwrap()
}

fn dead_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn posts_the_report_json_with_its_key() {
    let rx = Receiver::start(Box::new(|_, _| 200));
    let dead = tempfile::NamedTempFile::new().unwrap();
    let mut s = sink(rx.url("/hook"), WebhookFormat::Json, 0, dead.path());
    let sent: Vec<Report> = (0..5).map(|i| report("big", i)).collect();
    for r in &sent {
        s.write(r).unwrap();
    }
    let stats = s.finish().unwrap();
    assert_eq!((stats.delivered, stats.dead_lettered), (5, 0));
    let got = rx.requests();
    assert_eq!(got.len(), 5);
    for (q, r) in got.iter().zip(&sent) {
        assert_eq!((q.method.as_str(), q.path.as_str()), ("POST", "/hook"));
        assert_eq!(q.header("content-type"), Some("application/json"));
        assert_eq!(q.header("authorization"), Some("Bearer t0ken"));
        assert_eq!(q.header("idempotency-key"), Some(idempotency_key(r).as_str()));
        assert_eq!(q.json(), r.to_json());
    }
}

#[test]
fn server_errors_are_retried_client_errors_are_not() {
    // Per report: 503, 429, 408, 500 then 200 — except event "bad", always 400.
    let rx = Receiver::start(Box::new(|q, _| {
        if q.json()["event"] == "bad" {
            return 400;
        }
        let key = q.header("idempotency-key").unwrap_or("").to_string();
        use std::sync::Mutex;
        static SEEN: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());
        let mut seen = SEEN.lock().unwrap();
        let n = seen.entry(key).or_default();
        *n += 1;
        [503, 429, 408, 500, 200][(*n - 1).min(4)]
    }));
    let dead = tempfile::NamedTempFile::new().unwrap();
    let mut s = sink(rx.url("/"), WebhookFormat::Json, 4, dead.path());
    s.write(&report("ok", 0)).unwrap();
    s.write(&report("bad", 1)).unwrap();
    s.write(&report("ok", 2)).unwrap();
    let stats = s.finish().unwrap();
    assert_eq!((stats.delivered, stats.dead_lettered), (2, 1));
    let got = rx.requests();
    let bad: Vec<_> = got.iter().filter(|q| q.json()["event"] == "bad").collect();
    assert_eq!(bad.len(), 1, "a 400 is not retried");
    assert_eq!(got.iter().filter(|q| q.status == 200).count(), 2);
    let d = dead_lines(dead.path());
    assert_eq!(d.len(), 1);
    assert_eq!(d[0]["report"], report("bad", 1).to_json());
    assert_eq!(d[0]["attempts"], 1);
    assert!(
        d[0]["reason"].as_str().unwrap().starts_with("refused: HTTP 400"),
        "{}",
        d[0]
    );
    // The URL's path is not written (it may hold a token).
    assert_eq!(d[0]["target"], format!("webhook http://{}/…", rx.addr));
}

#[test]
fn always_failing_receiver_fills_the_dead_letter_file() {
    let rx = Receiver::start(Box::new(|_, _| 500));
    let dead = tempfile::NamedTempFile::new().unwrap();
    let mut s = sink(rx.url("/x"), WebhookFormat::Json, 2, dead.path());
    let sent: Vec<Report> = (0..4).map(|i| report("e", i)).collect();
    for r in &sent {
        s.write(r).unwrap();
    }
    let stats = s.finish().unwrap();
    assert_eq!((stats.delivered, stats.dead_lettered), (0, 4));
    assert_eq!(rx.requests().len(), 12, "1 attempt + 2 retries each");
    let d = dead_lines(dead.path());
    let want: Vec<_> = sent.iter().map(|r| r.to_json()).collect();
    let got: Vec<_> = d.iter().map(|l| l["report"].clone()).collect();
    assert_eq!(got, want);
    assert!(d.iter().all(|l| l["attempts"] == 3));
}

#[test]
fn a_receiver_down_for_a_while_gets_everything_in_order() {
    let mut rx = Receiver::start(Box::new(|_, _| 200));
    let url = rx.url("/h");
    rx.stop();
    let dead = tempfile::NamedTempFile::new().unwrap();
    let mut s = sink(url, WebhookFormat::Json, 50, dead.path());
    let sent: Vec<Report> = (0..6).flat_map(|i| [report("a", i), report("b", i)]).collect();
    for r in &sent {
        s.write(r).unwrap();
    }
    std::thread::sleep(Duration::from_millis(150));
    rx.restart();
    let stats = s.finish().unwrap();
    assert_eq!((stats.delivered, stats.dead_lettered), (12, 0));
    assert!(stats.retries > 0, "the first attempts met a closed port");
    let got: Vec<_> = rx
        .requests()
        .iter()
        .filter(|q| q.status == 200)
        .map(|q| q.json())
        .collect();
    let want: Vec<_> = sent.iter().map(|r| r.to_json()).collect();
    assert_eq!(got, want);
}

#[test]
fn chat_formats() {
    let rx = Receiver::start(Box::new(|_, _| 200));
    let dead = tempfile::NamedTempFile::new().unwrap();
    let r = report("big", 0);
    let mut slack = sink(rx.url("/services/T/B/X"), WebhookFormat::Slack, 0, dead.path());
    slack.write(&r).unwrap();
    slack.finish().unwrap();
    let mut matrix = sink(
        rx.url("/_matrix/client/v3/rooms/!r:example.org/send/m.room.message"),
        WebhookFormat::Matrix,
        0,
        dead.path(),
    );
    matrix.write(&r).unwrap();
    matrix.finish().unwrap();
    let got = rx.requests();
    let line = clarion_alerts::chat_line(&r, &Predicates::new());
    assert_eq!(got[0].method, "POST");
    assert_eq!(got[0].json(), serde_json::json!({ "text": line }));
    assert_eq!(got[1].method, "PUT");
    assert_eq!(
        got[1].path,
        format!(
            "/_matrix/client/v3/rooms/!r:example.org/send/m.room.message/{}",
            idempotency_key(&r)
        )
    );
    assert_eq!(
        got[1].json(),
        serde_json::json!({ "msgtype": "m.text", "body": line })
    );
}

/// Issue 37: a sustained condition is one firing and one resolved per
/// episode, not a request per window; a blip shorter than `after` is none.
#[test]
fn transitions_not_windows() {
    let rx = Receiver::start(Box::new(|_, _| 200));
    let dead = tempfile::NamedTempFile::new().unwrap();
    let mut rules = clarion_alerts::Rules::new();
    rules.insert(
        "burst".into(),
        Rule {
            hold: Hold {
                fire_after: 2,
                resolve_after: 3,
            },
            severity: Severity::Critical,
            predicate: Some("sum(volume) > 500".into()),
            thresholds: Vec::new(),
        },
    );
    let mut cfg = delivery(0);
    cfg.alerting = Alerting {
        every_window: false,
        rules: Arc::new(rules),
        console: Some("http://127.0.0.1:8700/".into()),
        clock_grace: None,
    };
    let mut s = AlertSink::webhook(
        WebhookConfig {
            url: rx.url("/hook"),
            format: WebhookFormat::Json,
            headers: Vec::new(),
            predicates: Predicates::new(),
        },
        cfg,
        DeadLetter::open(dead.path()).unwrap(),
        Arc::new(|m: &str| eprintln!("note: {m}")),
    )
    .unwrap();
    // `burst` holds in windows 0-9 and 20-24, and alone in 15 (a blip);
    // `tick` fires every window, so time is seen to pass.
    let burst = |i: u64| (0..10).contains(&i) || (20..25).contains(&i) || i == 15;
    let mut sent = 0;
    for i in 0..31 {
        if burst(i) {
            s.write(&report("burst", i)).unwrap();
            sent += 1;
        }
        s.write(&report("tick", i)).unwrap();
    }
    let stats = s.finish().unwrap();
    let got: Vec<serde_json::Value> = rx.requests().iter().map(|q| q.json()).collect();
    let of = |e: &str| -> Vec<(String, u64, Option<u64>)> {
        got.iter()
            .filter(|v| v["event"] == e)
            .map(|v| {
                assert_eq!(v["schema"], clarion_alerts::ALERT_SCHEMA);
                (
                    v["state"].as_str().unwrap().to_string(),
                    v["starts_at_ns"].as_u64().unwrap(),
                    v["ends_at_ns"].as_u64(),
                )
            })
            .collect()
    };
    let w = |i: u64| report("burst", i).window;
    assert_eq!(
        of("burst"),
        vec![
            ("firing".into(), w(0).start_ns, None),
            ("resolved".into(), w(0).start_ns, Some(w(9).end_ns)),
            ("firing".into(), w(20).start_ns, None),
            ("resolved".into(), w(20).start_ns, Some(w(24).end_ns)),
        ]
    );
    // `tick` fires throughout: it fired and has not resolved.
    assert_eq!(of("tick").len(), 1);
    let first = got.iter().find(|v| v["event"] == "burst").unwrap();
    assert_eq!(first["severity"], "critical");
    assert_eq!(first["predicate"], "sum(volume) > 500");
    assert_eq!(first["console"], "http://127.0.0.1:8700/");
    // The firing carries the window that fired: the second of the run.
    assert_eq!(first["report"], report("burst", 1).to_json());
    assert_eq!(stats.delivered, 5);
    assert!(sent > 5);
}
