//! Flow records from packets, the TurboFlow way (Sonchack et al.,
//! EuroSys 2018; the dissertation's chapter 2 and §4.1).
//!
//! Two stages, as on a switch: a small [`MicroflowCache`] (the PFE's mFR
//! table) that folds each packet into its flow's *microflow record* and
//! evicts the slot's other flow on a collision, and an [`Aggregator`] (the
//! switch CPU's hash table) that stitches microflow records into
//! [`FlowRecord`]s, ending them at idle and active timeouts, TCP FIN/RST
//! and the final flush. [`FlowMeter`] joins the two behind one call per
//! packet; [`model`] predicts the cache's eviction ratio and packets per
//! microflow record from traffic statistics (Eq. 2.1/2.2) and measures them;
//! [`cost`] times the meter's per-packet cost components and predicts its
//! CPU time per packet from them.
//!
//! The records are exactly those of the per-flow semantics (see
//! [`meter`]'s module doc) whatever the cache's size and associativity: a
//! one-slot cache and a huge one give the same multiset of records; only
//! the work (microflow records reaching the aggregator) and the latency
//! differ. `clarion_reference::flows` is the judge.
//!
//! No I/O here: callers parse packets and write records elsewhere.
//!
//! [`FlowRecord`]: clarion_records::FlowRecord

pub mod aggregator;
pub mod cache;
pub mod cost;
pub mod meter;
pub mod model;

pub use aggregator::Aggregator;
pub use cache::{Microflow, MicroflowCache, Timeouts};
pub use cost::CostModel;
pub use meter::{FlowConfig, FlowMeter, FlowStats};

/// Why a flow meter cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    #[error("the microflow cache needs at least one slot")]
    NoSlots,
    #[error("the microflow cache needs at least one way per set")]
    NoWays,
    #[error("{slots} cache slots do not divide into sets of {ways} ways")]
    UnevenSets { slots: usize, ways: usize },
    #[error("the idle scan interval must be positive")]
    NoScanInterval,
}
