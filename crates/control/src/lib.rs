//! The event manager's control API: HTTP with JSON bodies, so operators and
//! programs can add, list, show and remove network-wide events at runtime
//! (and, on a live host, its own events, metric apps and export policies),
//! see the hosts and their health, and follow fired events as they come
//! (server-sent events). `docs/api/openapi.yaml` describes it.
//!
//! - [`model`]: the request and response bodies, and the [`model::Command`]s
//!   the server hands to whoever owns the manager (the NATS service), each
//!   with a channel for its answer.
//! - [`server`]: the axum router (bearer-token check, routes) and a server thread.
//! - [`client`]: the client `clarion events` uses.
//! - [`health`]: a host's health (packets/s, drops, completeness, sweeps)
//!   from its counters, shared between its packet loop and its reporters.
//! - [`token`]: the bearer token: given, or generated at first start and
//!   kept in a private file that clients read too.

pub mod client;
pub mod health;
pub mod model;
pub mod server;
pub mod token;

pub use client::{Client, ClientError, Watched};
pub use health::{HealthCounters, HealthHandle, HealthMeter, HostsBoard};
pub use model::{
    AppRequest, AppsInfo, Command, ControlError, EventInfo, ExportInfo, ExportsCommand, FlowsRequest,
    HistoryRequest, HostHealth, HostInfo,
};
pub use server::{spawn, ControlHandle};
pub use token::{ServerToken, TokenError};

/// The OpenAPI description of this API (served at `/v1/openapi.yaml`).
pub const OPENAPI: &str = include_str!("../../../docs/api/openapi.yaml");
