//! The Clarion packet monitor: Trumpet's two phases, with no I/O.
//!
//! - **Match and scatter**, per packet ([`Monitor::process`]): find the
//!   packet's 5-tuple flow entry; on a flow's first packet only, match it
//!   against the trigger index (a tuple-space search, see
//!   `trigger_index.rs`) and remember the matched set; then update only the
//!   statistics that set's triggers read.
//! - **Gather, test and report**, per epoch: a sweep walks the compact flow
//!   list of each match set written in the epoch, folds each flow's
//!   statistics for the finished epoch into the groups of every trigger of
//!   its set, and at the end of each of a trigger's windows evaluates the
//!   predicate and emits a [`Report`] for every group that satisfies it. The sweep runs at the epoch boundary (files) or in
//!   bounded steps interleaved with packets ([`Monitor::sweep_step`]).
//!
//! The exact meaning of every report is `docs/semantics.md`; the
//! `clarion-reference` crate implements that text independently and the
//! conformance tests hold the two to the same output.
//!
//! With several workers, each monitor hands its results to a host-level
//! [`Merger`] instead (`merge.rs`), which reports what one monitor would.
//!
//! Packets come in as [`clarion_wire::PacketRecord`]s and reports go out
//! into a `Vec` the caller drains: sources and sinks stay outside.

mod blind;
mod config;
pub mod cost;
mod decaying_peak;
mod dos_filter;
mod epoch_log;
mod flow_table;
mod heap;
mod history;
mod huge_pages;
mod int_threshold;
mod key;
mod match_cache;
mod match_set;
mod measure;
mod merge;
mod monitor;
mod prefetch;
mod recent;
mod tcp_state;
mod trigger;
mod trigger_index;

pub use clarion_adapt::Shed;
pub use clarion_report::{EventAccuracy, Health, Report};
pub use config::{
    AdaptConfig, Counters, MemoryUse, MonitorConfig, StateCosts, Tuning, POLLED_HISTORY_WINDOWS,
};
pub use dos_filter::{FLOOR_THRESHOLD as DOS_FLOOR_THRESHOLD, MAX_THRESHOLD as DOS_MAX_THRESHOLD};
pub use heap::HEAP_RESERVE;
pub use merge::{fanout_worker, join_window_values, Merger, MergerConfig, Partials, MERGED_WORKER};
pub use monitor::{EpochLoad, Monitor, ShedDecision, Unparsed, BATCH, MAX_BYPASS};
pub use prefetch::prefetch;
pub use trigger::WindowValues;
pub use trigger_index::TriggerId;

/// Why the monitor refused a request.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EngineError {
    #[error(
        "event `{event}` uses {variables}, which the monitor does not compute yet \
         (TCP connection-state variables arrive in a later release); `clarion check` accepts it"
    )]
    Unsupported { event: String, variables: String },
    #[error("event `{event}` has a zero-length interval")]
    BadInterval { event: String },
    #[error(
        "event `{event}` is network-wide (`across hosts`): a monitor runs host triggers; \
         give `clarion run` an inventory (--inventory) so the event manager splits it"
    )]
    NetworkWide { event: String },
    #[error("no trigger with id {0} is installed")]
    UnknownTrigger(TriggerId),
    #[error("partials from worker {worker}, but the merger has {workers} workers (0 to {workers} - 1)")]
    UnknownWorker { worker: u32, workers: u32 },
    #[error("partials from worker {worker} after its last ones (`finish`)")]
    AfterLastPartials { worker: u32 },
    #[error(
        "worker {worker} installed trigger {id} unlike another worker: install the same events \
         in the same order on every worker, with the same merge settings"
    )]
    TriggerMismatch { worker: u32, id: TriggerId },
    #[error("worker {worker} sent partials of trigger {id}, which it never installed (were partials lost?)")]
    NotInstalled { worker: u32, id: TriggerId },
    #[error(
        "worker {worker} sent partials of a window ending at {end_ns} ns, which its watermark had \
         passed: hand each worker's partials over in the order it made them"
    )]
    PartialsOutOfOrder { worker: u32, end_ns: u64 },
    #[error("worker {worker} sent partials of trigger {id} whose statistics do not fit its event")]
    BadPartials { worker: u32, id: TriggerId },
    #[error("event `{event}` is installed on demand, by another event's `then install`, not on its own")]
    OnDemand { event: String },
    #[error(
        "event `{event}` installs events when it fires (`then install`), which needs all of the \
         host's packets in one monitor: run it with one worker (--workers 1)"
    )]
    DrillDownAcrossWorkers { event: String },
}
