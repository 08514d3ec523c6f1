//! The crate's one error type: bad parameters, and arrivals or times the
//! simulator cannot order.

/// Why a generator could not be built or a simulation could not go on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OverloadError {
    /// A parameter outside its domain (zero rate, zero window, amplitude
    /// outside 0..=1, a speedup that is not a positive finite number...).
    #[error("invalid {name}: {reason}")]
    Invalid { name: &'static str, reason: String },
    /// Arrival times must not decrease: the queue serves in arrival order.
    #[error("arrival {index} at {arrival_ns} ns comes before the previous one at {previous_ns} ns")]
    OutOfOrder {
        index: u64,
        previous_ns: u64,
        arrival_ns: u64,
    },
    /// A departure or a window end would pass u64 nanoseconds (584 years).
    #[error("simulated time passes u64::MAX ns ({what})")]
    TimeOverflow { what: &'static str },
}

pub(crate) fn invalid(name: &'static str, reason: impl Into<String>) -> OverloadError {
    OverloadError::Invalid {
        name,
        reason: reason.into(),
    }
}
