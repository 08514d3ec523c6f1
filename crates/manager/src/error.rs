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
    #[error("event `{0}` is installed on demand, by another event's `then install`, not on its own")]
    OnDemand(String),
}
