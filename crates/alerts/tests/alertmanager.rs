//! The Alertmanager target against a real Prometheus Alertmanager (Debian
//! `prometheus-alertmanager`, scripts/deps.sh), on a free loopback port
//! with its own configuration and storage: two groups hold a condition
//! for a few windows, stop, and one holds it again. Alertmanager's API
//! must show the alerts firing, then gone; its webhook (a receiver of
//! ours) must get exactly one firing and one resolved per episode and group.
#![allow(clippy::unwrap_used)] // tests unwrap (clippy.toml allows it in #[test] only)

mod alertmanager_server;
mod receiver;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use alertmanager_server::Am;
use clarion_alerts::{
    AlertSink, Alerting, AlertmanagerConfig, DeadLetter, DeliveryConfig, Hold, Overflow, Rule, Rules,
    Severity,
};
use clarion_report::{Completeness, GroupKey, Origin, Report, Window};
use clarion_sinks::Sink;
use receiver::Receiver;

const WINDOW: u64 = 100_000_000;

/// Starts Alertmanager notifying `hook`; `None` (skipped) when it is not installed.
fn start(hook: &str) -> Option<Am> {
    // One notification group per (event, flow group); notified at once,
    // never repeated within the test.
    alertmanager_server::start(&alertmanager_server::webhook_config(
        hook,
        &["alertname", "group"],
        "0s",
        "200ms",
    ))
}

/// Window `i`, a minute ago (so a resolved alert's end is in Alertmanager's past).
fn report(event: &str, src: Option<&str>, i: u64, t0: u64) -> Report {
    Report {
        event: event.into(),
        window: Window {
            start_ns: t0 + i * WINDOW,
            end_ns: t0 + (i + 1) * WINDOW,
        },
        group: GroupKey {
            src_ip: src.map(|s| (s.parse::<IpAddr>().unwrap(), 32)),
            ..GroupKey::default()
        },
        values: vec![("sum(packets)".into(), 100.0 + i as f64)].into(),
        origin: Origin {
            host: "web-1".into(),
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

/// Alertmanager's active alerts of event `burst`: their `group` labels.
fn active_burst(am: &Am) -> Vec<String> {
    let alerts = alertmanager_server::alerts(am);
    let mut groups: Vec<String> = alerts
        .iter()
        .filter(|a| a["labels"]["alertname"] == "burst" && a["status"]["state"] == "active")
        .map(|a| a["labels"]["group"].as_str().unwrap().to_string())
        .collect();
    groups.sort();
    groups
}

/// The webhook's notifications so far, per (group label, status): the
/// startsAt of each alert notified.
fn notified(rx: &Receiver) -> BTreeMap<(String, String), Vec<String>> {
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for q in rx.requests() {
        for a in q.json()["alerts"].as_array().unwrap() {
            if a["labels"]["alertname"] != "burst" {
                continue;
            }
            let key = (
                a["labels"]["group"].as_str().unwrap().to_string(),
                a["status"].as_str().unwrap().to_string(),
            );
            out.entry(key)
                .or_default()
                .push(a["startsAt"].as_str().unwrap().to_string());
        }
    }
    out
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn one_firing_and_one_resolved_per_episode_and_group() {
    let started = Instant::now();
    let rx = Receiver::start(Box::new(|_, _| 200));
    let Some(am) = start(&rx.url("/am")) else { return };
    let mut rules = Rules::new();
    rules.insert(
        "burst".into(),
        Rule {
            hold: Hold {
                fire_after: 2,
                resolve_after: 2,
            },
            severity: Severity::Critical,
            predicate: Some("sum(packets) > 50".into()),
            thresholds: Vec::new(),
        },
    );
    let dead = tempfile::NamedTempFile::new().unwrap();
    let mut sink = AlertSink::alertmanager(
        AlertmanagerConfig {
            url: am.url.clone(),
            // Short, so that re-sends happen during the test.
            resend: Duration::from_millis(300),
            headers: Vec::new(),
        },
        DeliveryConfig {
            backoff: Duration::from_millis(20),
            backoff_max: Duration::from_millis(200),
            queue: 64,
            overflow: Overflow::Block,
            drain: Duration::from_secs(10),
            alerting: Alerting {
                rules: Arc::new(rules),
                ..Alerting::default()
            },
            ..DeliveryConfig::default()
        },
        DeadLetter::open(dead.path()).unwrap(),
        Arc::new(|m: &str| eprintln!("note: {m}")),
    )
    .unwrap();
    // A minute ago, to the millisecond (Alertmanager keeps milliseconds).
    let t0 = (SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64 - 60_000) * 1_000_000;
    let (a, b) = ("src_ip=10.0.0.1", "src_ip=10.0.0.2");
    // `tick` fires every window: time is seen to pass.
    let mut feed = |range: std::ops::Range<u64>, srcs: &[&str]| {
        for i in range {
            for s in srcs {
                sink.write(&report("burst", Some(s), i, t0)).unwrap();
            }
            sink.write(&report("tick", None, i, t0)).unwrap();
        }
    };
    // Episode 1: both groups hold in windows 0-5.
    feed(0..6, &["10.0.0.1", "10.0.0.2"]);
    wait_until("both firing in Alertmanager", || active_burst(&am) == vec![a, b]);
    wait_until("both firing notified", || {
        let n = notified(&rx);
        n.contains_key(&(a.into(), "firing".into())) && n.contains_key(&(b.into(), "firing".into()))
    });
    // Re-sent while firing (and still one alert each).
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(active_burst(&am), vec![a, b]);
    // Both stop: resolved after 2 windows without a firing.
    feed(6..10, &[]);
    wait_until("both resolved in Alertmanager", || active_burst(&am).is_empty());
    wait_until("both resolved notified", || {
        let n = notified(&rx);
        n.contains_key(&(a.into(), "resolved".into())) && n.contains_key(&(b.into(), "resolved".into()))
    });
    // Episode 2: only `a`, windows 10-14; a one-window blip of `b` in 12 is pending only.
    for i in 10..15 {
        sink.write(&report("burst", Some("10.0.0.1"), i, t0)).unwrap();
        if i == 12 {
            sink.write(&report("burst", Some("10.0.0.2"), i, t0)).unwrap();
        }
        sink.write(&report("tick", None, i, t0)).unwrap();
    }
    wait_until("a firing again", || active_burst(&am) == vec![a]);
    wait_until("a's second firing notified", || {
        notified(&rx)
            .get(&(a.into(), "firing".into()))
            .is_some_and(|v| v.len() == 2)
    });
    for i in 15..18 {
        sink.write(&report("tick", None, i, t0)).unwrap();
    }
    wait_until("a resolved again", || active_burst(&am).is_empty());
    wait_until("a's second resolved notified", || {
        notified(&rx)
            .get(&(a.into(), "resolved".into()))
            .is_some_and(|v| v.len() == 2)
    });
    let stats = sink.finish().unwrap();
    assert_eq!(stats.dead_lettered, 0);
    // Let any extra notification arrive before counting.
    std::thread::sleep(Duration::from_millis(600));
    let starts = |i: u64| clarion_report::rfc3339(t0 + i * WINDOW);
    let mut want = BTreeMap::new();
    want.insert((a.to_string(), "firing".to_string()), vec![starts(0), starts(10)]);
    want.insert(
        (a.to_string(), "resolved".to_string()),
        vec![starts(0), starts(10)],
    );
    want.insert((b.to_string(), "firing".to_string()), vec![starts(0)]);
    want.insert((b.to_string(), "resolved".to_string()), vec![starts(0)]);
    // Alertmanager writes times to the millisecond; compared as instants.
    let got: BTreeMap<_, Vec<String>> = notified(&rx)
        .into_iter()
        .map(|(k, v)| {
            (
                k,
                v.iter()
                    .map(|s| {
                        let t: SystemTime = humantime::parse_rfc3339(s).unwrap();
                        clarion_report::rfc3339(t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64)
                    })
                    .collect(),
            )
        })
        .collect();
    assert_eq!(got, want);
    eprintln!("took {:?}", started.elapsed());
}
