//! The NATS transport: Clarion's agents (one per host, each with its
//! monitor) and the event manager talking through a NATS server, so that a
//! data center's thousands of hosts share one clustered message system.
//!
//! - [`protocol`]: subjects and messages (MessagePack, versioned).
//! - [`book`]: the manager's installed events with their sources, kept in
//!   the persistent store; adds and removals from the events file or the API.
//! - [`desk`]: the agent's side of the manager's conversation, with no I/O:
//!   which local trigger belongs to which network-wide event, and polls
//!   answered from the monitor's kept windows, or deferred until the
//!   polled window is closed.
//! - [`exports`]: export policies installed from the manager on every
//!   agent: the manager's set, versioned, and what an agent applied.
//! - [`agent`]: an agent's connection: registration, installs, polls,
//!   satisfaction reports, in a background runtime, for a synchronous
//!   monitor loop.
//! - [`outbox`]: an agent's satisfaction reports kept until the manager
//!   acknowledges them (delivery at least once, across manager restarts).
//! - [`service`]: the manager's service loop: registrations, satisfaction
//!   reports, polls with timeouts, decisions published on `clarion.events`;
//!   its poll requests in flight (`poll_requests`) and its connection read
//!   in order (`arrivals`: a host's report before its answer).
//! - [`acks`]: the manager's acknowledgements of satisfaction reports,
//!   held for a quarter of a second so that a host's several go in one message.
//! - [`credentials`]: per-host nkeys and the nats-server authorization
//!   that lets each host speak only as itself.
//! - [`stream_sink`]: flow records and reports published to a JetStream
//!   stream, one subject a host (`--records nats://HOST:PORT/STREAM`).
//! - [`flows`]: the flows behind a network-wide event, asked of the
//!   hosts that carry it (their in-memory flow windows) and merged.
//! - [`shared`]: several managers on one NATS account: events and their
//!   owners in JetStream key-value buckets, each event decided by one.
//!
//! The embedded transport (crate `clarion-network`) runs the same manager
//! logic (crate `clarion-manager`) in one process; both give the same events.

pub mod acks;
pub mod agent;
mod arrivals;
pub mod book;
pub mod credentials;
pub mod desk;
mod error;
pub mod exports;
pub mod flows;
pub mod outbox;
mod poll_requests;
pub mod protocol;
pub mod service;
pub mod shared;
pub mod stream_sink;

pub use agent::{AgentLink, AgentOptions, Inbound, Wake};
pub use book::{EventBook, OnDuplicate, Restored};
pub use desk::{HostDesk, Triggers};
pub use error::NatsError;
pub use exports::{AppliedExports, Arrived, ExportBook, ExportSet, PolicyInfo};
pub use service::{
    serve, ControlLink, Decided, Gap, HistoryLimits, ManagerOptions, ManagerStats, EVENTS_STREAM,
};
pub use stream_sink::{StreamKind, StreamSink};

/// How a client proves itself to the NATS server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Auth {
    #[default]
    None,
    /// The server's `authorization { token: ... }`.
    Token(String),
    /// An nkey seed (`SU...`); the server lists the public key under `nkeys`.
    NkeySeed(String),
}

/// Credentials and TLS for the connection to the NATS server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Security {
    pub auth: Auth,
    /// Trust this CA (PEM) for the server's certificate; TLS is then required.
    pub ca: Option<std::path::PathBuf>,
    /// A client certificate and its key (PEM), for servers that verify clients.
    pub client_cert: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// The wall clock, nanoseconds since the Unix epoch (0 before it).
pub(crate) fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// The last "permissions violation" the server sent this connection (a
/// publish or subscription its credentials do not allow): the server says
/// so only in an error message, while the refused request just times out.
pub(crate) type Refusals = std::sync::Arc<std::sync::Mutex<Option<String>>>;

/// Connects with a name, the given credentials, replies on `inbox_prefix`
/// (a host's own, see [`credentials`]; `_INBOX` without), and a clear
/// error when the server cannot be reached. The server's refusals are
/// kept in the [`Refusals`] returned.
pub(crate) async fn connect(
    url: &str,
    sec: &Security,
    name: &str,
    inbox_prefix: Option<String>,
) -> Result<(async_nats::Client, Refusals), NatsError> {
    let refusals = Refusals::default();
    let kept = std::sync::Arc::clone(&refusals);
    let mut opts = match &sec.auth {
        Auth::None => async_nats::ConnectOptions::new(),
        Auth::Token(t) => async_nats::ConnectOptions::with_token(t.clone()),
        Auth::NkeySeed(s) => async_nats::ConnectOptions::with_nkey(s.clone()),
    };
    if let Some(prefix) = inbox_prefix {
        opts = opts.custom_inbox_prefix(prefix);
    }
    if let Some(ca) = &sec.ca {
        opts = opts.add_root_certificates(ca.clone()).require_tls(true);
    }
    if let Some((cert, key)) = &sec.client_cert {
        opts = opts.add_client_certificate(cert.clone(), key.clone());
    }
    opts = opts.event_callback(move |event| {
        let kept = std::sync::Arc::clone(&kept);
        async move {
            if let async_nats::Event::ServerError(async_nats::ServerError::Other(m)) = event {
                if m.to_lowercase().contains("permissions violation") {
                    if let Ok(mut k) = kept.lock() {
                        *k = Some(m);
                    }
                }
            }
        }
    });
    let client = opts
        .name(name)
        // A subscription's overflow is dropped: a manager behind a fleet's
        // burst reads its poll replies from one subscription (65,536 by
        // default dropped replies under `clarion-lab fleet`'s load, each a
        // poll timed out). Channels allocate as they fill; bounded still,
        // so that a manager far behind holds at most this many messages a
        // subscription, not its whole backlog.
        .subscription_capacity(1 << 17)
        .connection_timeout(std::time::Duration::from_secs(5))
        .connect(url)
        .await
        .map_err(|e| NatsError::Connect {
            url: url.to_string(),
            message: e.to_string(),
        })?;
    Ok((client, refusals))
}
