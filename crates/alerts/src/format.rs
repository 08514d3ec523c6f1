//! What a webhook receives: the report itself (`json`), or one readable
//! line for a chat room (`slack`, `matrix`).
//!
//! Design: the `json` body is exactly the JSON sink's line (the report's
//! `clarion.report/1` object, compact), so a receiver parses webhooks and
//! `--format json` output with the same code. The chat line is for people:
//! event, host, group, each value (against the predicate, when known),
//! window — in that order, on one line, so a room stays scannable. Pure
//! functions, no I/O; cost: one JSON encoding or one short string per report.

use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use clarion_report::Report;
use serde_json::json;

use crate::notice::Notice;

/// The body a webhook receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebhookFormat {
    /// The `clarion.report/1` object (docs/reports.md), POSTed.
    Json,
    /// A Slack incoming webhook: `{"text": LINE}`, POSTed.
    Slack,
    /// A Matrix room: `{"msgtype": "m.text", "body": LINE}`, PUT to the
    /// client-server send endpoint with the idempotency key as transaction id.
    Matrix,
}

/// Each event's predicate as written (`sum(volume) > 50KB`), for the chat
/// line's "value vs threshold"; events missing from it show values alone.
pub type Predicates = HashMap<String, String>;

/// The request body for one notice.
pub fn body(format: WebhookFormat, notice: &Notice, predicates: &Predicates) -> Vec<u8> {
    let line = || {
        let line = chat_line(&notice.report, predicates);
        match &notice.transition {
            None => line,
            Some(t) => format!("[{}] {line}", t.state.name().to_uppercase()),
        }
    };
    let v = match format {
        WebhookFormat::Json => notice.to_json(),
        WebhookFormat::Slack => json!({ "text": slack_escape(&line()) }),
        WebhookFormat::Matrix => json!({ "msgtype": "m.text", "body": line() }),
    };
    // A `Value` always encodes (its keys are strings).
    serde_json::to_vec(&v).unwrap_or_default()
}

/// Slack reads `&`, `<` and `>` as markup (links, mentions); its docs ask
/// for these three to be escaped in text, and nothing else.
fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// One line for people:
/// `heavy_tcp_flows on demo: src_ip=10.0.128.11 dst_port=5204 proto=tcp — sum(volume)=57920 (when sum(volume) > 50000) — window 2026-11-22T06:01:11.840Z +10ms`.
pub fn chat_line(report: &Report, predicates: &Predicates) -> String {
    let fields = report.group.fields();
    let group = if fields.is_empty() {
        "all traffic".to_string()
    } else {
        fields
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_deref().unwrap_or("none")))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let values = report
        .values
        .iter()
        .map(|(k, v)| format!("{k}={}", number(*v)))
        .collect::<Vec<_>>()
        .join(", ");
    let when = predicates
        .get(&*report.event)
        .map(|p| format!(" (when {p})"))
        .unwrap_or_default();
    let start = humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_nanos(report.window.start_ns));
    let len = Duration::from_nanos(report.window.end_ns.saturating_sub(report.window.start_ns));
    let mut line = format!(
        "{} on {}: {group} — {values}{when} — window {start} +{}",
        report.event,
        report.origin.host,
        humantime::format_duration(len)
    );
    if !report.missing_hosts.is_empty() {
        line.push_str(&format!(
            " (decided without {})",
            report.missing_host_names().join(", ")
        ));
    } else if !report.completeness.complete || report.completeness.dropped > 0 {
        line.push_str(" (window not seen in full)");
    }
    line
}

/// Whole numbers as integers, others to 4 significant decimals, undefined as such.
fn number(v: f64) -> String {
    if !v.is_finite() {
        "undefined".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.4}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use clarion_report::{Completeness, GroupKey, Origin, Window};
    use serde_json::Value;

    use super::*;

    fn report() -> Report {
        Report {
            event: "heavy_tcp_flows".into(),
            window: Window {
                start_ns: 1_795_327_271_840_000_000,
                end_ns: 1_795_327_271_850_000_000,
            },
            group: GroupKey {
                src_ip: Some(("10.0.128.11".parse::<IpAddr>().unwrap(), 32)),
                dst_port: Some(None),
                proto: Some(6),
                ..GroupKey::default()
            },
            values: vec![("sum(volume)".into(), 57920.0), ("avg(size)".into(), 1.0 / 3.0)].into(),
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

    fn notice(r: &Report) -> Notice {
        Notice::window(r.clone(), std::sync::Arc::default())
    }

    #[test]
    fn json_body_is_the_json_sinks_line() {
        let r = report();
        let mut sink = clarion_sinks::JsonLinesSink::new(Vec::new(), "memory");
        clarion_sinks::Sink::write(&mut sink, &r).unwrap();
        let line = sink.into_inner().unwrap();
        let mut b = body(WebhookFormat::Json, &notice(&r), &Predicates::new());
        b.push(b'\n');
        assert_eq!(b, line);
    }

    #[test]
    fn chat_line_reads_event_group_values_window() {
        let r = report();
        let mut p = Predicates::new();
        p.insert("heavy_tcp_flows".into(), "sum(volume) > 50KB".into());
        assert_eq!(
            chat_line(&r, &p),
            "heavy_tcp_flows on demo: src_ip=10.0.128.11 dst_port=none proto=tcp — \
             sum(volume)=57920, avg(size)=0.3333 (when sum(volume) > 50KB) — \
             window 2026-11-22T06:01:11.840Z +10ms"
        );
        let mut all = r.clone();
        all.group = GroupKey::default();
        all.values[0].1 = f64::NAN;
        all.completeness.complete = false;
        let line = chat_line(&all, &Predicates::new());
        assert!(
            line.contains(": all traffic — sum(volume)=undefined, avg(size)=0.3333 — window"),
            "{line}"
        );
        assert!(line.ends_with("(window not seen in full)"), "{line}");
        all.missing_hosts = vec!["web-2".into(), "web-4".into()].into();
        let line = chat_line(&all, &Predicates::new());
        assert!(line.ends_with("(decided without web-2, web-4)"), "{line}");
    }

    #[test]
    fn chat_bodies_are_the_services_shapes() {
        let mut r = report();
        r.event = "a<b>&c".into();
        let slack: Value =
            serde_json::from_slice(&body(WebhookFormat::Slack, &notice(&r), &Predicates::new())).unwrap();
        let text = slack["text"].as_str().unwrap();
        assert!(text.starts_with("a&lt;b&gt;&amp;c on demo"), "{text}");
        assert_eq!(slack.as_object().unwrap().len(), 1);
        let matrix: Value =
            serde_json::from_slice(&body(WebhookFormat::Matrix, &notice(&r), &Predicates::new())).unwrap();
        assert_eq!(matrix["msgtype"], "m.text");
        assert_eq!(matrix["body"], chat_line(&r, &Predicates::new()));
    }
}
