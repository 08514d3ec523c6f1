//! `--webhook` and `--syslog` of `clarion run`, `clarion agent` and
//! `clarion manager`: flags in, `clarion-alerts` sinks teed after the
//! run's own output out. The delivery semantics (keys, retries, dead
//! letters, order) are the library's and docs/alerts.md's.
//!
//! Every sink made is also watched for `/metrics` (`--metrics`): its
//! counters are rendered by `clarion_alerts::render_prometheus` under a
//! bounded `target` label ("webhook", "syslog"). Watched sinks are kept
//! for the process's life (a few words each) so counters never go back.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, ValueEnum};
use clarion_alerts::{
    AlertSink, Alerting, AlertmanagerConfig, DeadLetter, DeliveryConfig, Hold, Overflow, Predicates, Rule,
    Rules, Severity, StatsHandle, SyslogAddr, SyslogConfig, Threshold, WebhookConfig, WebhookFormat,
};

/// On live capture, how long after its end a window that sent no report
/// is taken as closed without a firing: the monitor reports a window
/// some epochs after it ends, well under this.
const LIVE_GRACE: Duration = Duration::from_secs(2);
use clarion_report::Report;
use clarion_sinks::{FanOut, Sink};

use crate::Failure;
use clarion_cmdline::parse_duration;

/// Where fired reports are also delivered, and how.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Alerts (docs/alerts.md)")]
pub struct AlertArgs {
    /// Deliver every report to this URL (http:// or https://), at least
    /// once, in window order per event, with an Idempotency-Key header;
    /// the run's own output is unchanged. Failed deliveries are retried
    /// (--webhook-retries), then written to --webhook-dead-letter.
    #[arg(long, value_name = "URL")]
    pub webhook: Option<String>,

    /// Body of each request: 'json' (the clarion.report/1 object, POST),
    /// 'slack' (an incoming webhook's {"text": LINE}, POST) or 'matrix'
    /// ({"msgtype": "m.text", "body": LINE}, PUT to URL/KEY: URL is the
    /// room's .../send/m.room.message endpoint). LINE reads: event, host,
    /// group, values against the predicate, window.
    #[arg(long, value_enum, default_value_t = FormatArg::Json, value_name = "FORMAT", requires = "webhook")]
    pub webhook_format: FormatArg,

    /// Extra request header, 'Name: value' (repeat for several), e.g.
    /// 'Authorization: Bearer TOKEN'; see --webhook-token-file to keep a
    /// token out of the process list.
    #[arg(long, value_name = "HEADER", value_parser = parse_header, requires = "webhook")]
    pub webhook_header: Vec<(String, String)>,

    /// Send 'Authorization: Bearer TOKEN' with TOKEN read from FILE (a
    /// Matrix access token, a receiver's secret).
    #[arg(long, value_name = "FILE", requires = "webhook")]
    pub webhook_token_file: Option<PathBuf>,

    /// Retries of a failed delivery (a timeout, a refused connection, HTTP
    /// 5xx, 408 or 429) before it is dead-lettered; other 4xx answers are
    /// not retried. Delays double from --webhook-backoff up to 60s, with
    /// jitter, or as the receiver's Retry-After asks. Syslog too.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub webhook_retries: u32,

    /// Longest one attempt may take (connect, send, answer). Syslog too.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub webhook_timeout: u64,

    /// Delay before the first retry; it doubles with each one. Syslog too.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub webhook_backoff: u64,

    /// Append reports that could not be delivered to FILE, one JSON line
    /// each (schema clarion.dead-letter/1: the report, the reason, the
    /// attempts, the key). Default: to standard error. Syslog too.
    #[arg(long, value_name = "FILE")]
    pub webhook_dead_letter: Option<PathBuf>,

    /// Reports waiting for delivery at most, per destination.
    #[arg(long, default_value_t = 4096, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=(1 << 20)))]
    pub webhook_queue: u32,

    /// When the queue is full: 'block' (the monitor waits for the
    /// receiver; default when reading a file) or 'dead-letter' (the report
    /// goes to the dead-letter file at once, reason "queue full"; default
    /// on live capture, where waiting would drop packets).
    #[arg(long, value_enum, value_name = "WHAT")]
    pub webhook_queue_full: Option<QueueFullArg>,

    /// At exit, how long delivery goes on; what is still undelivered then
    /// is dead-lettered.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub webhook_drain: u64,

    /// Also send every report to syslog, RFC 5424 (MSG: the report's JSON;
    /// structured data: event, window, group, key): udp://HOST[:514],
    /// tcp://HOST[:601] (octet-counted, RFC 6587) or unix:///dev/log.
    #[arg(long, value_name = "ADDR")]
    pub syslog: Option<String>,

    /// Syslog facility: local0..local7, daemon, user, ... or 0-23.
    #[arg(long, default_value = "local0", value_parser = clarion_alerts::syslog::parse_facility, value_name = "NAME", requires = "syslog")]
    pub syslog_facility: u8,

    /// Send the webhook every window's report (clarion.report/1), as
    /// before alerts had a lifecycle, instead of only the transitions
    /// (firing, resolved; clarion.alert/1).
    #[arg(long, requires = "webhook")]
    pub webhook_every_window: bool,

    /// Send syslog one message per window's report instead of only the
    /// transitions.
    #[arg(long, requires = "syslog")]
    pub syslog_every_window: bool,

    /// Also send alerts to a Prometheus Alertmanager (its v2 API at
    /// URL/api/v2/alerts, e.g. http://127.0.0.1:9093): labels alertname
    /// (the event), host, group, severity; firing alerts re-sent every
    /// --alertmanager-resend.
    #[arg(long, value_name = "URL")]
    pub alertmanager: Option<String>,

    /// How often alerts still firing are re-sent to Alertmanager (their
    /// endsAt is four of these ahead, as Prometheus does).
    #[arg(long, default_value = "1m", value_parser = parse_duration, value_name = "DURATION", requires = "alertmanager")]
    pub alertmanager_resend: u64,

    /// The web console's URL, linked from every alert (the payload's
    /// `console`, Alertmanager's generatorURL).
    #[arg(long, value_name = "URL")]
    pub alert_console_url: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    Json,
    Slack,
    Matrix,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum QueueFullArg {
    Block,
    DeadLetter,
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    match s.split_once(':') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_string(), value.trim().to_string()))
        }
        _ => Err(format!("`{s}` is not a header; write 'Name: value'")),
    }
}

/// Each event's predicate as written, for chat lines.
fn predicates(rules: &Rules) -> Predicates {
    rules
        .iter()
        .filter_map(|(name, r)| Some((name.clone(), r.predicate.clone()?)))
        .collect()
}

/// Each event's alert rule (its `alert` clause, predicate and
/// thresholds), from the events file. Events installed otherwise (the
/// control API, a manager's store) get the default rule.
fn rules(events: Option<&Path>) -> Rules {
    let Some(text) = events.and_then(|p| std::fs::read_to_string(p).ok()) else {
        return Rules::new();
    };
    // The file was checked already; a parse failure only loses the rules.
    let Ok(file) = clarion_lang::parse(&text) else {
        return Rules::new();
    };
    file.events.iter().map(|e| (e.name.clone(), rule(e))).collect()
}

fn rule(e: &clarion_lang::ast::Event) -> Rule {
    let mut thresholds = Vec::new();
    comparisons(&e.when, &mut thresholds);
    let (hold, severity) = match &e.alert {
        None => (Hold::default(), Severity::Warning),
        Some(a) => (
            Hold {
                fire_after: a.fire_after(),
                resolve_after: a.resolve_after_windows(),
            },
            a.severity(),
        ),
    };
    Rule {
        hold,
        severity,
        predicate: Some(e.when.to_string()),
        thresholds,
    }
}

/// The comparisons of a predicate (`sum(volume) > 125KB`), left to right.
fn comparisons(x: &clarion_lang::ast::Expr, out: &mut Vec<Threshold>) {
    use clarion_lang::ast::{BinOp, ExprKind};
    match &x.kind {
        ExprKind::Binary { op, left, right, .. } => match op {
            BinOp::Or | BinOp::And => {
                comparisons(left, out);
                comparisons(right, out);
            }
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne => out.push(Threshold {
                value: left.to_string(),
                op: op.symbol().to_string(),
                threshold: right.to_string(),
            }),
            _ => {}
        },
        ExprKind::Unary { expr, .. } => comparisons(expr, out),
        _ => {}
    }
}

/// The alert sinks of this process and their kinds, for `/metrics`.
static WATCHED: Mutex<Vec<(&'static str, StatsHandle)>> = Mutex::new(Vec::new());

/// Shows `sink`'s counters on the metrics page (the first one adds the source).
fn watch(kind: &'static str, sink: &AlertSink) {
    let first = {
        let mut w = WATCHED.lock().unwrap_or_else(|e| e.into_inner());
        w.push((kind, sink.watch()));
        w.len() == 1
    };
    // Outside WATCHED's lock: a page being served holds the sources' lock
    // and then takes WATCHED's.
    if first {
        crate::metrics_server::add_source(Box::new(|page: &mut String| {
            let w = WATCHED.lock().unwrap_or_else(|e| e.into_inner());
            clarion_alerts::render_prometheus(page, w.iter().map(|(k, h)| (*k, h.stats())));
        }));
    }
}

/// `sink`, with the alert sinks the flags ask for after it. `live`: the
/// monitor must not wait (the queue-full default).
pub fn with_alerts(
    sink: Box<dyn Sink<Report>>,
    a: &AlertArgs,
    live: bool,
    events: Option<&Path>,
) -> Result<Box<dyn Sink<Report>>, Failure> {
    if a.webhook.is_none() && a.syslog.is_none() && a.alertmanager.is_none() {
        return Ok(sink);
    }
    let opening = Opening {
        a,
        rules: Arc::new(rules(events)),
        live,
        notify: Arc::new(|m: &str| eprintln!("clarion: warning: {m}")),
    };
    let mut sinks = vec![sink];
    let mut add = |kind, s: AlertSink| {
        watch(kind, &s);
        sinks.push(Box::new(s) as Box<dyn Sink<Report>>);
    };
    if let Some(url) = &a.webhook {
        add("webhook", opening.webhook(url)?);
    }
    if let Some(addr) = &a.syslog {
        add("syslog", opening.syslog(addr)?);
    }
    if let Some(url) = &a.alertmanager {
        add("alertmanager", opening.alertmanager(url)?);
    }
    Ok(Box::new(FanOut::new(sinks)))
}

fn usage(m: String) -> Failure {
    Failure::Usage(format!("clarion: {m}"))
}

/// What the alert sinks of one run share while they are opened.
struct Opening<'a> {
    a: &'a AlertArgs,
    rules: Arc<Rules>,
    live: bool,
    notify: clarion_alerts::Notify,
}

impl Opening<'_> {
    /// How a sink delivers; `every_window`: a notice for every window
    /// that fired, not only when an alert changes state.
    fn delivery(&self, every_window: bool) -> DeliveryConfig {
        let a = self.a;
        DeliveryConfig {
            retries: a.webhook_retries,
            timeout: Duration::from_nanos(a.webhook_timeout.max(1_000_000)),
            backoff: Duration::from_nanos(a.webhook_backoff),
            backoff_max: Duration::from_secs(60).max(Duration::from_nanos(a.webhook_backoff)),
            queue: a.webhook_queue as usize,
            overflow: match a.webhook_queue_full {
                Some(QueueFullArg::Block) => Overflow::Block,
                Some(QueueFullArg::DeadLetter) => Overflow::DeadLetter,
                None if self.live => Overflow::DeadLetter,
                None => Overflow::Block,
            },
            drain: Duration::from_nanos(a.webhook_drain),
            alerting: Alerting {
                every_window,
                rules: self.rules.clone(),
                console: a.alert_console_url.clone(),
                // Live: windows closed 2 s before the wall clock and not reported did not fire.
                clock_grace: self.live.then_some(LIVE_GRACE),
            },
        }
    }

    fn dead_letter(&self) -> Result<DeadLetter, Failure> {
        match &self.a.webhook_dead_letter {
            Some(p) => DeadLetter::open(p).map_err(|e| usage(e.to_string())),
            None => Ok(DeadLetter::Stderr),
        }
    }

    fn webhook(&self, url: &str) -> Result<AlertSink, Failure> {
        let a = self.a;
        let mut headers = a.webhook_header.clone();
        if let Some(p) = &a.webhook_token_file {
            let token = std::fs::read_to_string(p)
                .map_err(|e| usage(format!("cannot read --webhook-token-file {}: {e}", p.display())))?;
            headers.push(("Authorization".into(), format!("Bearer {}", token.trim())));
        }
        let format = match a.webhook_format {
            FormatArg::Json => WebhookFormat::Json,
            FormatArg::Slack => WebhookFormat::Slack,
            FormatArg::Matrix => WebhookFormat::Matrix,
        };
        let config = WebhookConfig {
            url: url.to_string(),
            format,
            headers,
            predicates: if format == WebhookFormat::Json {
                Predicates::new()
            } else {
                predicates(&self.rules)
            },
        };
        let d = self.delivery(a.webhook_every_window);
        AlertSink::webhook(config, d, self.dead_letter()?, self.notify.clone())
            .map_err(|e| usage(format!("--webhook: {e}")))
    }

    fn syslog(&self, addr: &str) -> Result<AlertSink, Failure> {
        let addr = SyslogAddr::parse(addr).map_err(|e| usage(format!("--syslog: {e}")))?;
        let config = SyslogConfig {
            addr,
            facility: self.a.syslog_facility,
        };
        let d = self.delivery(self.a.syslog_every_window);
        AlertSink::syslog(config, d, self.dead_letter()?, self.notify.clone())
            .map_err(|e| usage(format!("--syslog: {e}")))
    }

    fn alertmanager(&self, url: &str) -> Result<AlertSink, Failure> {
        let config = AlertmanagerConfig {
            url: url.to_string(),
            resend: Duration::from_nanos(self.a.alertmanager_resend.max(1_000_000)),
            headers: Vec::new(),
        };
        AlertSink::alertmanager(
            config,
            self.delivery(false),
            self.dead_letter()?,
            self.notify.clone(),
        )
        .map_err(|e| usage(format!("--alertmanager: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_come_from_the_alert_clause_and_predicate() {
        let file = clarion_lang::parse(
            "event burst\n  when sum(packets) > 50 and max(size) >= 1KB\n  every 100ms\n  alert after 3 windows, severity critical\nevent plain when sum(volume) > 1",
        )
        .unwrap();
        let r = rule(&file.events[0]);
        assert_eq!(
            r.hold,
            Hold {
                fire_after: 3,
                resolve_after: 1
            }
        );
        assert_eq!(r.severity, Severity::Critical);
        assert_eq!(
            r.predicate.as_deref(),
            Some("sum(packets) > 50 and max(size) >= 1KB")
        );
        let t: Vec<(&str, &str, &str)> = r
            .thresholds
            .iter()
            .map(|t| (t.value.as_str(), t.op.as_str(), t.threshold.as_str()))
            .collect();
        assert_eq!(t, vec![("sum(packets)", ">", "50"), ("max(size)", ">=", "1KB")]);
        let p = rule(&file.events[1]);
        assert_eq!((p.hold, p.severity), (Hold::default(), Severity::Warning));
    }

    #[test]
    fn headers_parse() {
        assert_eq!(
            parse_header("Authorization: Bearer x:y"),
            Ok(("Authorization".into(), "Bearer x:y".into()))
        );
        assert!(parse_header("no colon").is_err());
        assert!(parse_header(": v").is_err());
    }
}
