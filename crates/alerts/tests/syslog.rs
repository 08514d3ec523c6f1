//! Syslog messages checked by an independent RFC 5424 parser
//! (tests/syslog_parser): adversarial names and groups escape correctly,
//! and over UDP and TCP (octet counting) each report arrives as one
//! well-formed message.
#![allow(clippy::unwrap_used)] // tests unwrap (clippy.toml allows it in #[test] only)

mod syslog_parser;

use std::io::Read;
use std::net::{IpAddr, TcpListener, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use clarion_alerts::syslog::{message, parse_facility};
use clarion_alerts::{
    idempotency_key, transition_key, AlertSink, AlertState, Alerting, DeadLetter, DeliveryConfig, Notice,
    Rule, Severity, SyslogAddr, SyslogConfig, Transition,
};
use clarion_report::{Completeness, GroupKey, Origin, Report, Window};
use clarion_sinks::Sink;
use proptest::prelude::*;

fn report(event: &str, host: &str, i: u64, group: GroupKey) -> Report {
    Report {
        event: event.into(),
        window: Window {
            start_ns: 1_795_327_271_000_000_123 + i * 10_000_000,
            end_ns: 1_795_327_271_010_000_123 + i * 10_000_000,
        },
        group,
        values: vec![("sum(volume)".into(), 57920.0)].into(),
        origin: Origin {
            host: host.into(),
            worker: 0,
        },
        completeness: Completeness::default(),
        capture: None,
        missing_hosts: Box::default(),
    }
}

/// What every message of `r` must say, checked on the parsed message.
fn check(m: &syslog_parser::Message, r: &Report, facility: u8, severity: Severity) {
    assert_eq!(m.pri, facility * 8 + severity.syslog_code());
    assert_eq!(m.param("clarion@32473", "severity"), Some(severity.name()));
    assert_eq!(m.version, 1);
    // The window end, to the microsecond (RFC 5424 allows six digits).
    let micros = r.window.end_ns / 1000;
    let want_ts = humantime::format_rfc3339_micros(std::time::UNIX_EPOCH + Duration::from_micros(micros));
    assert_eq!(m.timestamp, want_ts.to_string());
    assert_eq!(m.app_name, "clarion");
    assert_eq!(m.procid, std::process::id().to_string());
    assert_eq!(m.msgid, "report");
    assert_eq!(m.sd.len(), 1);
    assert_eq!(m.sd[0].0, "clarion@32473");
    assert_eq!(m.param("clarion@32473", "event"), Some(&*r.event));
    assert_eq!(m.param("clarion@32473", "key"), Some(idempotency_key(r).as_str()));
    assert_eq!(
        m.param("clarion@32473", "window_end"),
        Some(clarion_report::rfc3339(r.window.end_ns).as_str())
    );
    for (name, value) in r.group.fields() {
        assert_eq!(
            m.param("clarion@32473", name),
            Some(value.as_deref().unwrap_or("null"))
        );
    }
    let json: serde_json::Value = serde_json::from_str(m.msg.as_deref().unwrap()).unwrap();
    assert_eq!(json, r.to_json());
    // The host, made printable: the same where it already was.
    if !r.origin.host.is_empty() && r.origin.host.bytes().all(|b| (33..=126).contains(&b)) {
        assert_eq!(m.hostname, &*r.origin.host);
    }
}

proptest! {
    #[test]
    fn adversarial_names_parse_back(
        event in "[a-z\"\\\\\\] \\[=é\n]{1,12}",
        host in "[a-z\"\\] é]{0,8}",
        src in proptest::option::of(any::<u32>()),
        port in proptest::option::of(proptest::option::of(any::<u16>())),
        facility in 0u8..24,
        severity in proptest::sample::select(vec![Severity::Critical, Severity::Error, Severity::Warning, Severity::Notice, Severity::Info]),
    ) {
        let group = GroupKey {
            src_ip: src.map(|a| (IpAddr::from(a.to_be_bytes()), 24)),
            dst_port: port,
            ..GroupKey::default()
        };
        let r = report(&event, &host, 0, group);
        let json = r.to_json().to_string();
        let rule = Arc::new(Rule { severity, ..Rule::default() });
        let text = message(&Notice::window(r.clone(), rule), &json, facility, std::process::id());
        let m = syslog_parser::parse(&text).map_err(|e| TestCaseError::fail(format!("{e}: {text}")))?;
        check(&m, &r, facility, severity);
    }
}

#[test]
fn the_parser_rejects_what_5424_forbids() {
    // So that the property above can fail: each of these breaks one rule.
    for bad in [
        "<132>1 2026-11-22T06:01:11.850000Z h clarion 1 report [clarion@32473 event=\"a]b\"] {}",
        "<132>1 2026-11-22T06:01:11.850000000Z h clarion 1 report - {}",
        "<192>1 - h clarion 1 report - {}",
        "<132>1 - h clarion 1 report [clarion@32473 event=\"a\"b\"] {}",
        "<132>1 - h c l 1 report - {}",
    ] {
        assert!(syslog_parser::parse(bad).is_err(), "{bad}");
    }
    let ok = syslog_parser::parse("<132>1 - h clarion 1 report [x@1 a=\"q\\\"\\]\\\\\"] m").unwrap();
    assert_eq!(ok.param("x@1", "a"), Some("q\"]\\"));
}

fn sink(addr: SyslogAddr) -> AlertSink {
    let dead = tempfile::NamedTempFile::new().unwrap();
    AlertSink::syslog(
        SyslogConfig {
            addr,
            facility: parse_facility("local0").unwrap(),
        },
        DeliveryConfig {
            backoff: Duration::from_millis(5),
            backoff_max: Duration::from_millis(20),
            drain: Duration::from_secs(5),
            // One message per report, as checked below.
            alerting: Alerting {
                every_window: true,
                ..Alerting::default()
            },
            ..DeliveryConfig::default()
        },
        DeadLetter::open(dead.path()).unwrap(),
        Arc::new(|m: &str| eprintln!("note: {m}")),
    )
    .unwrap()
}

fn some_reports() -> Vec<Report> {
    let g = GroupKey {
        src_ip: Some(("10.0.128.0".parse().unwrap(), 24)),
        proto: Some(6),
        src_port: Some(None),
        ..GroupKey::default()
    };
    (0..5)
        .flat_map(|i| {
            [
                report("udp_burst", "web-1", i, g),
                report("odd \"name]\\", "web-1", i, g),
            ]
        })
        .collect()
}

#[test]
fn over_udp_one_datagram_per_report() {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut s = sink(SyslogAddr::parse(&format!("udp://{}", rx.local_addr().unwrap())).unwrap());
    let sent = some_reports();
    for r in &sent {
        s.write(r).unwrap();
    }
    let stats = s.finish().unwrap();
    assert_eq!(stats.delivered, sent.len() as u64);
    let mut buf = [0u8; 65536];
    for r in &sent {
        let n = rx.recv(&mut buf).unwrap();
        let m = syslog_parser::parse(std::str::from_utf8(&buf[..n]).unwrap()).unwrap();
        check(&m, r, 16, Severity::Warning);
    }
}

#[test]
fn over_tcp_octet_counted() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut s = sink(SyslogAddr::parse(&format!("tcp://{}", l.local_addr().unwrap())).unwrap());
    let sent = some_reports();
    for r in &sent {
        s.write(r).unwrap();
    }
    let stats = s.finish().unwrap();
    assert_eq!(stats.delivered, sent.len() as u64);
    let (mut c, _) = l.accept().unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = Vec::new();
    let mut got = Vec::new();
    while got.len() < sent.len() {
        let mut chunk = [0u8; 4096];
        let n = c.read(&mut chunk).unwrap();
        assert!(n > 0, "stream ended after {} messages", got.len());
        buf.extend_from_slice(&chunk[..n]);
        got.extend(syslog_parser::frames(&mut buf).unwrap());
    }
    assert!(buf.is_empty());
    for (text, r) in got.iter().zip(&sent) {
        check(&syslog_parser::parse(text).unwrap(), r, 16, Severity::Warning);
    }
}

#[test]
fn over_a_unix_datagram_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let rx = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut s = sink(SyslogAddr::parse(&format!("unix://{}", path.display())).unwrap());
    let sent = some_reports();
    for r in &sent {
        s.write(r).unwrap();
    }
    assert_eq!(s.finish().unwrap().delivered, sent.len() as u64);
    let mut buf = [0u8; 65536];
    for r in &sent {
        let n = rx.recv(&mut buf).unwrap();
        check(
            &syslog_parser::parse(std::str::from_utf8(&buf[..n]).unwrap()).unwrap(),
            r,
            16,
            Severity::Warning,
        );
    }
}

#[test]
fn transitions_name_their_state_and_severity() {
    let r = report("burst", "web-1", 0, GroupKey::default());
    let rule = Arc::new(Rule {
        severity: Severity::Critical,
        ..Rule::default()
    });
    for (state, ends) in [
        (AlertState::Firing, None),
        (AlertState::Resolved, Some(r.window.end_ns)),
    ] {
        let t = Transition {
            state,
            starts_at_ns: r.window.start_ns,
            ends_at_ns: ends,
        };
        let n = Notice::change(r.clone(), t.clone(), rule.clone(), None);
        let json = n.to_json().to_string();
        let text = message(&n, &json, 16, 1);
        let m = syslog_parser::parse(&text).unwrap();
        // local0 (16) × 8 + critical (2).
        assert_eq!(m.pri, 130);
        assert_eq!(m.msgid, state.name());
        assert_eq!(m.param("clarion@32473", "state"), Some(state.name()));
        assert_eq!(
            m.param("clarion@32473", "key"),
            Some(transition_key(&r, &t).as_str())
        );
        assert_eq!(m.param("clarion@32473", "ends_at").is_some(), ends.is_some());
        let body: serde_json::Value = serde_json::from_str(m.msg.as_deref().unwrap()).unwrap();
        assert_eq!(body["state"], state.name());
    }
}
