//! The crate's one error type.
//!
//! Every variant names the culprit (a state id, an input's name and value)
//! so the caller can say what to fix without re-deriving it.

use crate::graph::StateId;

/// What went wrong building a graph or with a window's inputs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AdaptError {
    /// A state names a lighter state that was never added.
    #[error("state {state} names lighter state {lighter}, which does not exist")]
    DanglingLighter { state: StateId, lighter: StateId },
    /// Following `lighter` from `state` never reaches a default state: the
    /// chain loops.
    #[error("following lighter states from state {state} loops (every chain must end in a default state)")]
    Cycle { state: StateId },
    /// A state's lighter state costs more per packet, so shedding to it
    /// would not save time.
    #[error("state {state} ({t_p_ns} ns/packet) names lighter state {lighter}, which costs more ({lighter_t_p_ns} ns/packet)")]
    NotLighter {
        state: StateId,
        lighter: StateId,
        t_p_ns: f64,
        lighter_t_p_ns: f64,
    },
    /// A state id passed in is not a state of the graph.
    #[error("no state {state} (the graph has {len})")]
    NoSuchState { state: StateId, len: usize },
    /// A per-state or per-task slice has the wrong length.
    #[error("{what} has {got} entries, expected {expected}")]
    LengthMismatch {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// A number is NaN, infinite or outside its meaningful range.
    #[error("{what} = {value} is out of range ({range})")]
    OutOfRange {
        what: &'static str,
        value: f64,
        range: &'static str,
    },
    /// Too few samples, or samples without spread, to fit a distribution.
    #[error("cannot fit a distribution to {got} samples with standard deviation {std_dev}")]
    DegenerateSamples { got: usize, std_dev: f64 },
}

/// `value` when it is finite and within `lo..=hi`, else `OutOfRange`.
pub(crate) fn check_range(
    what: &'static str,
    value: f64,
    lo: f64,
    hi: f64,
    range: &'static str,
) -> Result<f64, AdaptError> {
    if value.is_finite() && value >= lo && value <= hi {
        Ok(value)
    } else {
        Err(AdaptError::OutOfRange { what, value, range })
    }
}
