//! One host, assembled: a source of frames, the parser, the pipeline its
//! packets go through (`clarion-pipeline`) and a *driver* that takes the
//! reports where they go; live, its workers and what they send.
//!
//! ```text
//!  capture file(s), stdin ──► replay ──► parse_frame ──► Pipeline ──► Driver
//!  (clarion-capture)          (batches of BATCH records)    │         reports → sinks / manager
//!                                                            │         service → polls, control
//!                head: Monitor │ Workers (N threads + Merger) │ NetworkStage (hosts + manager)
//!  interfaces ──► LiveHost ──► clarion_live::Worker × N, each driving a LiveChain (its Pipeline)
//!                     └──► merged reports, records, GPVs, epochs ──► Live, to the caller
//! ```
//!
//! - The pipeline's [`Stage`](clarion_pipeline::Stage) is what consumes
//!   parsed packets; its head here is one monitor, several [`Workers`]
//!   merged into one host's reports, or a [`NetworkStage`] of hosts and
//!   the event manager, with the stages beside it (flow records, GPVs,
//!   export policies, captures around events).
//! - [`Frames`] is where a replay's frames come from: a capture file or
//!   standard input, or one capture per host merged by time
//!   ([`MergedCaptures`], each frame tagged with its host's input).
//! - [`replay`] is the one loop that reads a capture into a stage. It
//!   batches records for [`Stage::batch`](clarion_pipeline::Stage::batch),
//!   keeps input order between packets and frames that do not parse,
//!   flushes the stage on packet time, paces the input when asked, and
//!   stops at damage, reporting what was read before it.
//! - [`Driver`] is the caller's side of that loop: where reports go, and
//!   what runs between frames (an agent answers its manager there).
//! - [`LiveHost`] is the live host: one `clarion_live::Worker` per core,
//!   each driving its [`LiveChain`] (the same pipeline, on wall time), the
//!   merger, runtime changes of events and export policies, captures
//!   assembled from the workers' rings.

// Every function short (issue 34; clippy.toml sets the bound, 60 lines).
#![warn(clippy::too_many_lines)]

mod error;
mod live;
mod live_chain;
mod live_xdp;
mod network;
mod replay;
mod source;
mod workers;

pub use error::HostError;
pub use live::{
    worker_exports, HostWaker, Live, LiveConfig, LiveExportConfig, LiveHost, LiveSource, LiveSummary,
};
pub use live_chain::LiveChain;
pub use live_xdp::XdpMode;
pub use network::NetworkStage;
pub use replay::{replay, Driver, ReplayOptions, Replayed, FLUSH_EVERY_NS};
pub use source::{Frames, MergedCaptures};
pub use workers::{Workers, WorkersConfig};
