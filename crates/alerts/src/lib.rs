//! Alerts that reach people: fired reports delivered to a webhook (the
//! report's JSON, or a line for Slack or Matrix) or to syslog (RFC 5424),
//! at least once, in order, without stalling the monitor.
//!
//! Each destination is one [`AlertSink`], a report [`clarion_sinks::Sink`]: the monitor's
//! thread queues the report, a delivery thread sends it, retrying with
//! exponential backoff and jitter, and what cannot be delivered goes to a
//! dead-letter file (`clarion.dead-letter/1` lines) with the reason — never
//! silently dropped. Every request carries an `Idempotency-Key` derived
//! from (host, event, window end, group), so a receiver can drop the
//! copies that at-least-once delivery sends. A [`clarion_sinks::FanOut`]
//! gives the same reports to the usual output and the alert sinks.
//!
//! Layout: `key` (the idempotency key), `format` (bodies and chat lines),
//! `syslog` (RFC 5424 text and RFC 6587 framing), `metrics` (the
//! delivery counters as Prometheus text) are pure; `transport`
//! (HTTP, sockets), `deadletter` (the file) and `delivery` (the queue,
//! the thread, retries) do the I/O. Semantics for users: `docs/alerts.md`.

mod alertmanager;
mod deadletter;
mod delivery;
mod format;
mod key;
mod lifecycle;
mod metrics;
mod notice;
pub mod syslog;
mod transport;

pub use alertmanager::{alert as alertmanager_alert, AlertmanagerConfig};
pub use deadletter::{DeadLetter, DEAD_LETTER_SCHEMA};
pub use delivery::{AlertSink, Alerting, DeliveryConfig, Notify, Overflow, Stats, StatsHandle};
pub use format::{body, chat_line, Predicates, WebhookFormat};
pub use key::idempotency_key;
pub use lifecycle::{AlertState, Change, Hold, Lifecycle};
pub use metrics::render_prometheus;
pub use notice::{transition_key, Notice, Rule, Rules, Severity, Threshold, Transition, ALERT_SCHEMA};
pub use transport::{Failure, SyslogAddr, SyslogConfig, Transport, WebhookConfig};

/// Why an alert sink could not start or finished badly.
#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    /// A destination that cannot work (bad URL, unknown host, bad header).
    #[error("{0}")]
    Target(String),
    /// The dead-letter file cannot be opened.
    #[error("cannot open the dead-letter file {path}: {source}")]
    DeadLetterFile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the delivery thread: {0}")]
    Thread(#[source] std::io::Error),
    /// A report may be lost: a dead letter could not be written.
    #[error("{0}")]
    Failed(String),
}
