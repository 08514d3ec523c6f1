//! MONA's adaptation and accuracy control (issue 22), as pure arithmetic.
//!
//! The monitor must never drop a packet. When a window's predicted
//! per-packet time exceeds what the packet rate leaves, MONA sheds
//! measurement work per flow in a known order (each monitoring state names
//! a lighter one), then estimates each task's recall and trades flows
//! between tasks that have accuracy to spare and tasks that lack it.
//!
//! This crate holds only the decisions; the engine keeps the per-flow
//! states and the host measures windows and applies the decisions:
//!
//! - [`budget`]: the time available per packet in the next window, from
//!   the arrivals forecast and the backlog.
//! - [`graph`]: monitoring states and their lighter-than chains
//!   ([`StateGraph`], built and validated by [`GraphBuilder`]).
//! - [`cost`]: Eq. 1–4 (the per-packet time budget), Gumbel models of flow
//!   retrieval times and the cache-hit estimate, and a run-time
//!   [`Calibration`] of the profiled costs.
//! - [`routine`]: Alg. 1, the depth of shedding ([`Shed`]) that fits the
//!   budget.
//! - [`recall`]: §V-A, each task's estimated recall from partial results.
//! - [`groups`]: a window's recall from the groups seen, when flows were
//!   shed and packets dropped before the monitor (our extension).
//! - [`relief`]: within a window, the time available a packet once the
//!   receive ring fills (our extension: MONA decides per window only).
//! - [`recovery`]: Alg. 2 with Eq. 9, CPU-neutral moves of flows from rich
//!   to poor tasks.
//!
//! Everything is deterministic, allocation-free where it runs per window
//! on the packet core (the routine), and does no I/O.

pub mod budget;
pub mod cost;
mod error;
pub mod graph;
pub mod groups;
pub mod recall;
pub mod recovery;
pub mod relief;
pub mod routine;

pub use budget::{Budget, Forecast};
pub use cost::{
    estimate_hit_probability, packet_time_ns, target_processing_ns, Calibration, CostModel, GumbelFit,
    HitClassifier, OnlineEstimate, Target,
};
pub use error::AdaptError;
pub use graph::{GraphBuilder, StateGraph, StateId, TaskId};
pub use groups::{seen_flow_weight, SeenGroup, WindowSample};
pub use recall::{Estimator, RecallEstimate, RecallEstimator, WindowObservation};
pub use recovery::{Move, Recovery, RecoveryConfig, Transition};
pub use relief::{Block, Relief, Relieve};
pub use routine::{fit_chains, Decision, Routine, Shed};
