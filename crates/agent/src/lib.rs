//! The agent runtime: one host's monitor on the NATS transport, above
//! `clarion-host` (the replay loop, the live host) and `clarion-nats` (the
//! link to the manager, the desk that installs its triggers and answers
//! its polls). `clarion agent` maps its flags into [`AgentSettings`],
//! builds the host's pipeline or live host, and calls in here; nothing
//! here knows a flag.
//!
//! An [`Agent`] registers with the manager ([`Agent::register`]), installs
//! the network-wide triggers it is given, and then, between frames (a
//! replay: [`Agent::replay`], then [`Agent::linger`]) or between the live
//! host's waits ([`Agent::live_loop`]), routes the host's reports (a
//! network-wide trigger's to the manager as a satisfaction report, the
//! host's own to its sink or live output), takes the manager's messages
//! (install, remove, extend, done, export policies) and answers its polls
//! from the host's kept windows; a poll for a window not reached yet waits
//! until it is.
//!
//! Export policies come from the manager as a whole set, in the
//! registration reply and whenever it changes: checked with the language,
//! then applied by the loop that owns the exporter (a replay's pipeline,
//! from its next frame on; every worker of a live host), one path over
//! [`ExportTarget`]. The host's own policies (the command line's, its
//! API's) run beside them.
//!
//! Invariants:
//! - A window's reports are routed before polls of it are answered, so the
//!   manager reads a host's report of a window before its answer
//!   (clarion-nats' `arrivals`).
//! - A set of the manager's policies that does not check, takes the name
//!   of one of the host's own, or that the host refuses is refused (said
//!   on standard error and to the manager) and the policies running stay.
//! - The replay and the live agent route reports, apply policies and
//!   serve the manager through the same code ([`Agent::route`]).
//!
//! What it does not do: read flags or events files, open sinks or
//! outputs (the caller hands it the host's own report sink or, live, its
//! [`LiveOutputs`]), build the pipeline or the live host, or print
//! summaries (it gives [`Counts`]).

// Every function short (issue 34; clippy.toml sets the bound, 60 lines).
#![warn(clippy::too_many_lines)]

mod agent;
mod exports;
mod live;
mod replay;

use std::time::Duration;

pub use agent::{Agent, Counts, Registered};
pub use exports::ExportTarget;
pub use live::{wake, LiveOutputs, Merged};

/// What an agent is told by its command line (or any caller).
#[derive(Clone, Debug)]
pub struct AgentSettings {
    /// This host's name in the manager's inventory.
    pub host: String,
    /// The NATS server (or a comma-separated list of a cluster's servers).
    pub url: String,
    pub security: clarion_nats::Security,
    /// Prefixes this host owns, sent with the registration.
    pub prefixes: Vec<String>,
    /// How long to wait for a manager to answer the registration.
    pub register_timeout: Duration,
    /// A replay: after the capture ends, how long to keep answering polls
    /// unless the manager finishes first.
    pub linger: Duration,
    /// A replay: times the capture's own pace (none: as fast as possible).
    pub speed: Option<f64>,
    /// Fewer messages: no registration line, no line per export set applied.
    pub quiet: bool,
}

/// Why an agent failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No manager answered the registration, or the connection failed.
    #[error(transparent)]
    Register(clarion_nats::NatsError),
    /// A trigger of the registration could not be installed.
    #[error(transparent)]
    Install(clarion_nats::NatsError),
    /// The host's own reports could not be written to its sink.
    #[error("cannot write reports")]
    Reports(#[source] clarion_sinks::SinkError),
    #[error(transparent)]
    Host(#[from] clarion_host::HostError),
}
