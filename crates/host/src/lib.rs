//! One host, assembled: a source of frames, the parser, a packet *stage*
//! and a *driver* that takes the stage's reports where they go.
//!
//! ```text
//!  capture file(s), stdin ──► replay ──► parse_frame ──► Stage ──► Driver
//!  (clarion-capture)          (batches of BATCH records)   │         reports → sinks / manager
//!                                                           │         service → polls, control
//!                  one Monitor │ Workers (N threads + Merger) │ Network (hosts + manager)
//! ```
//!
//! - [`Stage`] is what consumes parsed packets: one [`Monitor`], several
//!   [`Workers`] merged into one host's reports, or a
//!   [`clarion_network::Network`] of hosts and the event manager. Every
//!   capability that reads packets plugs in here.
//! - [`Frames`] is where a replay's frames come from: a capture file or
//!   standard input, or one capture per host merged by time
//!   ([`MergedCaptures`], each frame tagged with its host's input).
//! - [`replay`] is the one loop that reads a capture into a stage. It
//!   batches records for [`Stage::process_batch`], keeps input order
//!   between packets and frames that do not parse, paces the input when
//!   asked, and stops at damage, reporting what was read before it.
//! - [`WithExports`] puts flow records (TurboFlow's cache and aggregator)
//!   and GPVs (*Flow's cache, metric apps) beside a stage, from the same
//!   parsed packets, to their sinks; [`Counting`] is the stage without events.
//! - [`Driver`] is the caller's side of that loop: where reports go, and
//!   what runs between frames (an agent answers its manager there).
//!
//! [`Monitor`]: clarion_engine::Monitor

// Every function short (issue 34; clippy.toml sets the bound, 60 lines).
#![warn(clippy::too_many_lines)]

mod error;
mod live;
mod live_xdp;
mod replay;
mod source;
mod workers;

pub use clarion_pipeline::{Counting, PerHost, Stage, WithExports};
pub use error::HostError;
pub use live::{
    worker_exports, HostWaker, Live, LiveConfig, LiveExportConfig, LiveHost, LiveSource, LiveSummary,
};
pub use live_xdp::XdpMode;
pub use replay::{replay, Driver, ReplayOptions, Replayed};
pub use source::{Frames, MergedCaptures};
pub use workers::{Workers, WorkersConfig};
