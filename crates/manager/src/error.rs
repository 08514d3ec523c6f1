//! The one error type of the manager's logic.

use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum ManagerError {
    /// The predicate cannot be split into host-local triggers that never
    /// miss a network-wide event; the text says which part and why.
    #[error("event `{event}` cannot be evaluated network-wide: {why}")]
    NotSplittable { event: String, why: String },
    #[error("a network-wide event needs at least one host")]
    NoHosts,
    #[error("inventory line {line}: {why}")]
    Inventory { line: usize, why: String },
    #[error("the inventory lists no host; write one per line: a name, then its prefixes")]
    EmptyInventory,
    #[error("event `{0}`: no host of the inventory owns an address its filters name, so no host can see its packets")]
    NoPlacement(String),
    #[error("event id {0} is taken")]
    IdTaken(usize),
    #[error("event id {id} is far beyond the ids in use (the next is {next}); was it edited by hand?")]
    IdTooFar { id: usize, next: usize },
    #[error("an event named `{0}` is installed already; remove it first or choose another name")]
    DuplicateName(String),
    #[error("no installed network-wide event has id {0}")]
    UnknownEvent(usize),
    #[error("drill-down instance `{instance}` cannot be installed again: {why}")]
    NotRestored { instance: String, why: String },
    #[error("host values have {got} entries, the split needs {want}")]
    ValueCount { got: usize, want: usize },
    #[error("a window from {start_ns} to {end_ns} ns is not one of event {event}'s windows (every {interval_ns} ns from 0)")]
    NotAWindow {
        event: usize,
        start_ns: u64,
        end_ns: u64,
        interval_ns: u64,
    },
    #[error("{value} cannot be a value of `{aggregate}`")]
    ImpossibleValue { aggregate: String, value: f64 },
    /// More than a link could carry in the window (see `manager.rs`).
    #[error("{value} cannot be `{aggregate}` in a window of {window_ns} ns: no link carries that much")]
    BeyondTheLink {
        aggregate: String,
        value: f64,
        window_ns: u64,
    },
    /// More than the host's own count of the window's packets allows (see `manager.rs`).
    #[error("{value} cannot be `{aggregate}` in a window in which the host counted {packets} packets")]
    BeyondItsCounters {
        aggregate: String,
        value: f64,
        packets: u64,
    },
    #[error("a window starting at {start_ns} ns is in the future (the manager's clock reads {now_ns} ns)")]
    FutureWindow { start_ns: u64, now_ns: u64 },
    #[error("group {group} is not one of event {event}'s groups: {why}")]
    WrongGroup {
        event: usize,
        group: String,
        why: String,
    },
    #[error("a report of host {host} names {origin} as its origin")]
    WrongOrigin { host: String, origin: String },
    #[error("event `{0}` is installed on demand, by another event's `then install`, not on its own")]
    OnDemand(String),
}

impl ManagerError {
    /// Why a host's message was refused, as one word for counters
    /// (`clarion_host_refused_total{host,reason}`); `None` for the errors
    /// that are not about a host's message.
    pub fn refusal(&self) -> Option<&'static str> {
        Some(match self {
            ManagerError::ValueCount { .. } => "value_count",
            ManagerError::NotAWindow { .. } => "not_a_window",
            ManagerError::ImpossibleValue { .. } => "impossible_value",
            ManagerError::BeyondTheLink { .. } => "beyond_the_link",
            ManagerError::BeyondItsCounters { .. } => "beyond_its_counters",
            ManagerError::FutureWindow { .. } => "future_window",
            ManagerError::WrongGroup { .. } => "wrong_group",
            ManagerError::WrongOrigin { .. } => "wrong_origin",
            _ => return None,
        })
    }
}
