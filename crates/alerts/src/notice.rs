//! What a target is given: a [`Notice`], either one report (the
//! per-window mode, the old behaviour) or a change of an alert's state
//! (firing, resolved) with the event's rule: severity, predicate,
//! thresholds. Pure: the `clarion.alert/1` payload and its key.
//!
//! Design: a transition's payload carries the report of the window that
//! made it (firing: the window that fired; resolved: the last firing
//! window) whole, under `report`, so a receiver of both modes reads values
//! and group with the same code; the alert's own fields (state, start and
//! end, severity, predicate) are beside it. Its idempotency key names the
//! episode and the state — (host, event, group, start, state) — so the
//! firing and the resolved of one episode have different keys, and a
//! copy of either has the same one.

use std::collections::HashMap;
use std::sync::Arc;

use clarion_report::Report;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::lifecycle::{AlertState, Hold};

/// Schema of a transition's JSON payload.
pub const ALERT_SCHEMA: &str = "clarion.alert/1";

/// An event's severity, as its `alert` clause names it: the syslog
/// severity of its messages (RFC 5424 §6.2.1) and Alertmanager's
/// `severity` label.
pub use clarion_lang::ast::Severity;

/// One comparison of an event's predicate: `sum(volume) > 125KB`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Threshold {
    /// The left side as written (`sum(volume)`).
    pub value: String,
    pub op: String,
    /// The right side as written (`125KB`).
    pub threshold: String,
}

/// How one event alerts; see `docs/alerts.md`. Events without a rule get
/// the default: fire at once, resolve after a window, warning.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rule {
    pub hold: Hold,
    pub severity: Severity,
    /// The `when` as written; `None` for events not in `--events`.
    pub predicate: Option<String>,
    pub thresholds: Vec<Threshold>,
}

/// Each event's rule, by name.
pub type Rules = HashMap<String, Rule>;

/// A change of state, with what the payload says of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub state: AlertState,
    /// Start of the first window of the run that fired.
    pub starts_at_ns: u64,
    /// Resolved: end of the last firing window.
    pub ends_at_ns: Option<u64>,
}

/// One thing to deliver.
#[derive(Clone, Debug)]
pub struct Notice {
    pub report: Report,
    /// `None`: one window's report (per-window mode).
    pub transition: Option<Transition>,
    pub rule: Arc<Rule>,
    /// The console's page for the event, when a console is configured.
    pub console: Option<String>,
    /// The idempotency key.
    pub key: String,
}

impl Notice {
    /// The per-window notice: the report itself, under its own key.
    pub fn window(report: Report, rule: Arc<Rule>) -> Notice {
        Notice {
            key: crate::key::idempotency_key(&report),
            report,
            transition: None,
            rule,
            console: None,
        }
    }

    /// A change of an alert's state.
    pub fn change(
        report: Report,
        transition: Transition,
        rule: Arc<Rule>,
        console: Option<String>,
    ) -> Notice {
        Notice {
            key: transition_key(&report, &transition),
            report,
            transition: Some(transition),
            rule,
            console,
        }
    }

    /// The JSON a webhook (`json`) and syslog's MSG carry: the report
    /// (per-window) or the `clarion.alert/1` object.
    pub fn to_json(&self) -> Value {
        let Some(t) = &self.transition else {
            return self.report.to_json();
        };
        let r = &self.report;
        let mut group = serde_json::Map::new();
        for (k, v) in r.group.fields() {
            group.insert(k.to_string(), v.map_or(Value::Null, Value::String));
        }
        let values: serde_json::Map<String, Value> = r
            .values
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    serde_json::Number::from_f64(*v).map_or(Value::Null, Value::Number),
                )
            })
            .collect();
        let thresholds: Vec<Value> = self
            .rule
            .thresholds
            .iter()
            .map(|t| json!({"value": t.value, "op": t.op, "threshold": t.threshold}))
            .collect();
        json!({
            "schema": ALERT_SCHEMA,
            "state": t.state.name(),
            "event": &*r.event,
            "host": &*r.origin.host,
            "group": group,
            "severity": self.rule.severity.name(),
            "predicate": self.rule.predicate,
            "thresholds": thresholds,
            "values": values,
            "starts_at": clarion_report::rfc3339(t.starts_at_ns),
            "starts_at_ns": t.starts_at_ns,
            "ends_at": t.ends_at_ns.map(clarion_report::rfc3339),
            "ends_at_ns": t.ends_at_ns,
            "console": self.console,
            "report": r.to_json(),
        })
    }
}

/// A transition's key: SHA-256 over (schema, host, event, group, start,
/// state), each part length-prefixed, first 16 bytes in hex.
pub fn transition_key(report: &Report, t: &Transition) -> String {
    let mut h = Sha256::new();
    let mut part = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    };
    part(ALERT_SCHEMA.as_bytes());
    part(report.origin.host.as_bytes());
    part(report.event.as_bytes());
    for (name, value) in report.group.fields() {
        part(name.as_bytes());
        match value {
            Some(v) => part(format!("={v}").as_bytes()),
            None => part(b"null"),
        }
    }
    part(&t.starts_at_ns.to_be_bytes());
    part(t.state.name().as_bytes());
    let digest = h.finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use clarion_report::{Completeness, GroupKey, Origin, Window};

    use super::*;

    fn report(end_ns: u64) -> Report {
        Report {
            event: "burst".into(),
            window: Window {
                start_ns: end_ns - 100,
                end_ns,
            },
            group: GroupKey {
                dst_port: Some(Some(53)),
                ..GroupKey::default()
            },
            values: vec![("sum(packets)".into(), 42.0)].into(),
            origin: Origin {
                host: "h".into(),
                worker: 0,
            },
            completeness: Completeness::default(),
            capture: None,
            missing_hosts: Box::default(),
        }
    }

    fn rule() -> Arc<Rule> {
        Arc::new(Rule {
            severity: Severity::Critical,
            predicate: Some("sum(packets) > 10".into()),
            thresholds: vec![Threshold {
                value: "sum(packets)".into(),
                op: ">".into(),
                threshold: "10".into(),
            }],
            ..Rule::default()
        })
    }

    #[test]
    fn a_transition_carries_state_rule_values_times_and_report() {
        let t = Transition {
            state: AlertState::Resolved,
            starts_at_ns: 1_000,
            ends_at_ns: Some(2_000),
        };
        let n = Notice::change(report(2_000), t, rule(), Some("http://c/#/events/burst".into()));
        let v = n.to_json();
        assert_eq!(v["schema"], ALERT_SCHEMA);
        assert_eq!(v["state"], "resolved");
        assert_eq!(v["severity"], "critical");
        assert_eq!(v["predicate"], "sum(packets) > 10");
        assert_eq!(v["thresholds"][0]["threshold"], "10");
        assert_eq!(v["values"]["sum(packets)"], 42.0);
        assert_eq!(v["group"]["dst_port"], "53");
        assert_eq!(v["starts_at_ns"], 1_000);
        assert_eq!(v["ends_at_ns"], 2_000);
        assert_eq!(v["console"], "http://c/#/events/burst");
        assert_eq!(v["report"], report(2_000).to_json());
        // Per-window: exactly the report, under the report's key.
        let w = Notice::window(report(2_000), rule());
        assert_eq!(w.to_json(), report(2_000).to_json());
        assert_eq!(w.key, crate::key::idempotency_key(&report(2_000)));
    }

    #[test]
    fn keys_name_the_episode_and_state() {
        let t = |state, starts_at_ns| Transition {
            state,
            starts_at_ns,
            ends_at_ns: None,
        };
        let k = |r: &Report, t: &Transition| transition_key(r, t);
        let (a, b) = (report(2_000), report(3_000));
        // The same episode's firing, whatever window carried it: one key.
        assert_eq!(k(&a, &t(AlertState::Firing, 1)), k(&b, &t(AlertState::Firing, 1)));
        assert_ne!(
            k(&a, &t(AlertState::Firing, 1)),
            k(&a, &t(AlertState::Resolved, 1))
        );
        assert_ne!(k(&a, &t(AlertState::Firing, 1)), k(&a, &t(AlertState::Firing, 2)));
        assert_ne!(k(&a, &t(AlertState::Firing, 1)), crate::key::idempotency_key(&a));
    }
}
