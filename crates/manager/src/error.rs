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
    #[error("host values have {got} entries, the split needs {want}")]
    ValueCount { got: usize, want: usize },
}
