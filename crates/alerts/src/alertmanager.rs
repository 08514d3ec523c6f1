//! The Prometheus Alertmanager target: transitions POSTed to its v2 API
//! (`POST /api/v2/alerts`, a JSON array of alerts), as a Prometheus
//! server sends its rules' alerts.
//!
//! Design: an alert is identified by its labels — `alertname` (the
//! event), `host`, `group` (the flow group's fields, `all` for an event
//! without `per`) and `severity` — so Alertmanager deduplicates the
//! copies at-least-once delivery sends. Annotations carry the predicate,
//! the values and a one-line summary; `generatorURL` the console, when
//! configured. `startsAt` is the start of the run that fired.
//!
//! Alertmanager expects clients to re-send active alerts (every 30 s to
//! 3 min, its documentation says) and resolves an alert it has not heard
//! of by its `endsAt`. So, as Prometheus does (its resend delay is 1 min,
//! its `endsAt` four of them ahead): while firing, `endsAt` is now + 4 ×
//! `resend`, and every alert still firing is re-sent each `resend` (one
//! POST of all of them, from the sink's delivery thread when it is idle).
//! A monitor that stops thus has its alerts resolved by Alertmanager
//! within 4 × `resend`. Resolved: `endsAt` is the end of the last firing
//! window, and the alert is no longer re-sent.
//!
//! Cost: one request per transition, and one per `resend` while anything fires.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::lifecycle::AlertState;
use crate::notice::Notice;
use crate::transport::{answer, check_http_url, http_agent, redact, Failure, Transport};
use crate::AlertError;

/// Alertmanager's settings.
#[derive(Clone, Debug)]
pub struct AlertmanagerConfig {
    /// `http://HOST:PORT` (with a path prefix if Alertmanager has one,
    /// `--web.route-prefix`); `/api/v2/alerts` is appended.
    pub url: String,
    /// How often alerts still firing are re-sent.
    pub resend: Duration,
    /// Extra headers (a proxy's `Authorization`).
    pub headers: Vec<(String, String)>,
}

impl AlertmanagerConfig {
    /// Prometheus's resend delay.
    pub const DEFAULT_RESEND: Duration = Duration::from_secs(60);
}

pub(crate) struct Alertmanager {
    agent: ureq::Agent,
    endpoint: String,
    config: AlertmanagerConfig,
    /// Alerts firing, by their key; `endsAt` is set at each send.
    active: BTreeMap<String, Value>,
    describe: String,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The `group` label: the group's fields as `name=value`, space-separated.
fn group_label(notice: &Notice) -> String {
    notice.report.group.label()
}

/// One alert of the v2 API for `notice`, without `endsAt`.
pub fn alert(notice: &Notice) -> Value {
    let r = &notice.report;
    let values = r
        .values
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ");
    let group = group_label(notice);
    let starts = notice
        .transition
        .as_ref()
        .map_or(r.window.start_ns, |t| t.starts_at_ns);
    let mut annotations = json!({
        "values": values,
        "summary": format!("{} on {}: {group}: {values}", r.event, r.origin.host),
    });
    if let Some(p) = &notice.rule.predicate {
        annotations["predicate"] = json!(p);
    }
    let mut a = json!({
        "labels": {
            "alertname": &*r.event,
            "host": &*r.origin.host,
            "group": group,
            "severity": notice.rule.severity.name(),
        },
        "annotations": annotations,
        "startsAt": clarion_report::rfc3339(starts),
    });
    if let Some(c) = &notice.console {
        a["generatorURL"] = json!(c);
    }
    a
}

/// The identity of an alert in Alertmanager: its labels.
fn identity(a: &Value) -> String {
    a["labels"].to_string()
}

impl Alertmanager {
    pub(crate) fn new(config: AlertmanagerConfig) -> Result<Alertmanager, AlertError> {
        check_http_url(
            "Alertmanager",
            &config.url,
            "http://HOST:PORT or https://HOST:PORT",
        )?;
        Ok(Alertmanager {
            agent: http_agent(),
            endpoint: format!("{}/api/v2/alerts", config.url.trim_end_matches('/')),
            describe: format!("alertmanager {}", redact(&config.url)),
            active: BTreeMap::new(),
            config,
        })
    }

    fn post(&self, alerts: &[Value], timeout: Duration) -> Result<(), Failure> {
        let body = serde_json::to_vec(alerts).unwrap_or_default();
        let mut request = self
            .agent
            .post(&self.endpoint)
            .header("Content-Type", "application/json");
        for (name, value) in &self.config.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        answer(
            request
                .config()
                .timeout_global(Some(timeout))
                .build()
                .send(&body[..]),
        )
    }

    /// `endsAt` for an alert still firing.
    fn firing_until(&self) -> String {
        let ahead = self.config.resend.saturating_mul(4).as_nanos() as u64;
        clarion_report::rfc3339(now_ns().saturating_add(ahead))
    }
}

impl Transport for Alertmanager {
    fn send(&mut self, notice: &Notice, timeout: Duration) -> Result<(), Failure> {
        let mut a = alert(notice);
        let id = identity(&a);
        let state = notice.transition.as_ref().map_or(AlertState::Firing, |t| t.state);
        match state {
            AlertState::Firing => {
                a["endsAt"] = json!(self.firing_until());
                // Re-sent from now on, whatever this attempt's outcome: a
                // later re-send may get through where this one did not.
                self.active.insert(id, a.clone());
            }
            AlertState::Resolved => {
                let end = notice.transition.as_ref().and_then(|t| t.ends_at_ns);
                a["endsAt"] = json!(clarion_report::rfc3339(end.unwrap_or_else(now_ns)));
                self.active.remove(&id);
            }
        }
        self.post(&[a], timeout)
    }

    fn tick_every(&self) -> Option<Duration> {
        Some(self.config.resend.max(Duration::from_millis(10)))
    }

    fn tick(&mut self, timeout: Duration) -> Result<(), Failure> {
        if self.active.is_empty() {
            return Ok(());
        }
        let until = self.firing_until();
        let alerts: Vec<Value> = self
            .active
            .values_mut()
            .map(|a| {
                a["endsAt"] = json!(until);
                a.clone()
            })
            .collect();
        self.post(&alerts, timeout)
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use clarion_report::{Completeness, GroupKey, Origin, Report, Window};

    use super::*;
    use crate::notice::{Rule, Severity, Transition};

    fn notice(state: AlertState, group: GroupKey) -> Notice {
        let r = Report {
            event: "burst".into(),
            window: Window {
                start_ns: 1_000_000_000,
                end_ns: 1_100_000_000,
            },
            group,
            values: vec![("sum(packets)".into(), 42.0)].into(),
            origin: Origin {
                host: "web-1".into(),
                worker: 0,
            },
            completeness: Completeness::default(),
            capture: None,
            missing_hosts: Box::default(),
        };
        let rule = Arc::new(Rule {
            severity: Severity::Critical,
            predicate: Some("sum(packets) > 10".into()),
            ..Rule::default()
        });
        let t = Transition {
            state,
            starts_at_ns: 900_000_000,
            ends_at_ns: (state == AlertState::Resolved).then_some(1_100_000_000),
        };
        Notice::change(r, t, rule, Some("http://console:8700/".into()))
    }

    #[test]
    fn labels_identify_the_alert_and_annotations_describe_it() {
        let g = GroupKey {
            dst_port: Some(Some(53)),
            ..GroupKey::default()
        };
        let a = alert(&notice(AlertState::Firing, g));
        assert_eq!(
            a["labels"],
            json!({"alertname": "burst", "host": "web-1", "group": "dst_port=53", "severity": "critical"})
        );
        assert_eq!(a["annotations"]["predicate"], "sum(packets) > 10");
        assert_eq!(a["annotations"]["values"], "sum(packets)=42");
        assert_eq!(a["startsAt"], "1970-01-01T00:00:00.900000000Z");
        assert_eq!(a["generatorURL"], "http://console:8700/");
        // Firing and resolved of one group are one alert to Alertmanager.
        let r = alert(&notice(AlertState::Resolved, g));
        assert_eq!(identity(&a), identity(&r));
        let all = alert(&notice(AlertState::Firing, GroupKey::default()));
        assert_eq!(all["labels"]["group"], "all");
        assert_ne!(identity(&a), identity(&all));
    }

    #[test]
    fn urls_are_checked_at_start() {
        let cfg = |url: &str| AlertmanagerConfig {
            url: url.into(),
            resend: AlertmanagerConfig::DEFAULT_RESEND,
            headers: Vec::new(),
        };
        let am = Alertmanager::new(cfg("http://127.0.0.1:9093/")).unwrap();
        assert_eq!(am.endpoint, "http://127.0.0.1:9093/api/v2/alerts");
        for bad in ["127.0.0.1:9093", "ftp://h", "http://"] {
            assert!(Alertmanager::new(cfg(bad)).is_err(), "{bad}");
        }
    }
}
