//! Bodies of the control API and the commands behind its routes.

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::oneshot;

/// One installed network-wide event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventInfo {
    pub id: u64,
    pub name: String,
    /// The event's canonical source.
    pub source: String,
    /// The hosts holding its trigger.
    pub hosts: Vec<String>,
    /// The predicate each of those hosts tests (the split threshold).
    pub local_predicate: String,
    pub interval_ns: u64,
    /// When it was installed (RFC 3339).
    pub added: String,
    /// A live host's event added at runtime: the start of its first window
    /// (the next window boundary every worker reaches), nanoseconds since
    /// the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_ns: Option<u64>,
}

/// One host of the inventory as the manager sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    pub name: String,
    pub prefixes: Vec<String>,
    /// `up` (heard from in the last 3 s), `down` (heard from before, not since) or `unknown`.
    pub state: String,
    /// Milliseconds since the host was last heard from.
    pub last_seen_ms: Option<u64>,
    /// The host's capture ended (replays).
    pub finished: bool,
    /// Network-wide triggers installed on it.
    pub triggers: usize,
    pub satisfaction_reports: u64,
    pub polls_answered: u64,
    /// Polls it did not answer in time, or answered "window no longer kept".
    pub polls_missed: u64,
}

/// The body of every error response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}

/// Why a command failed; each maps to an HTTP status.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum ControlError {
    /// The request is wrong (an invalid event, a host event, a name in use): 400.
    #[error("{0}")]
    Invalid(String),
    /// No such event: 404.
    #[error("{0}")]
    NotFound(String),
    /// The manager could not do it (its store failed): 500.
    #[error("{0}")]
    Failed(String),
    /// The manager is shutting down: 503.
    #[error("the manager is shutting down")]
    Gone,
}

pub type Reply<T> = oneshot::Sender<Result<T, ControlError>>;

/// What a route asks of the manager.
#[derive(Debug)]
pub enum Command {
    /// Install every event of an events file's text (all or none).
    Add {
        source: String,
        reply: Reply<Vec<EventInfo>>,
    },
    Remove {
        name: String,
        reply: Reply<EventInfo>,
    },
    List {
        reply: Reply<Vec<EventInfo>>,
    },
    Show {
        name: String,
        reply: Reply<EventInfo>,
    },
    Hosts {
        reply: Reply<Vec<HostInfo>>,
    },
}
