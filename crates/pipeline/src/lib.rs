//! The pipeline: the one chain a host's parsed packets go through, for
//! capture files and live capture alike.
//!
//! # What?
//!
//! A host measures its packets with a monitor (its events) and, beside
//! it, makes flow records, grouped packet vectors, exports by policy and
//! captures around events, each from the same parsed packets. This crate
//! is that chain and nothing around it: no source of frames, no parser,
//! no thread, no clock. Two drivers feed it: a file replay
//! (`clarion_host::replay`, one thread reading, parsing and calling it)
//! and a live worker (`clarion_live::Worker`, one per core, on its
//! receive queues), which send what it makes to the host's thread.
//!
//! ```text
//!  driver: frame ─► parse_frame ─► Pipeline
//!    frame ─► ExportPolicies, EventCaptures | CaptureRing         (stages that take the bytes)
//!    batch ─► head: Monitor | Workers | NetworkStage | Counting ─► reports ─► each stage's `reports`
//!          ─► FlowRecords ─► records
//!          ─► Gpvs ─► GPVs
//!    all of it ─► Outputs ─► the driver
//!  a file replay: records, GPVs ─► Sinks, on its thread    live: Outputs ─► host thread ─► Sinks
//! ```
//!
//! # Design: one contract, a head and stages beside it
//!
//! Everything that consumes packets is a [`Stage`] ([`stage.rs`]: its
//! contract of order, outputs, clock, finish and errors). The *head* is
//! the event stage, whose reports the host writes: a [`Monitor`], worker
//! threads merged into one host's reports, a network of hosts, or
//! [`Counting`] when there are no events. The stages *beside* it see the
//! same frames and batches after it, and the head's reports as they are
//! made. A [`Pipeline`] is a head and its stages, and is itself a stage,
//! so a driver drives a bare monitor and a full chain alike.
//!
//! Everything a call makes goes into one [`Outputs`] (reports, records,
//! GPVs, a merging monitor's partial statistics, capture parts, and what
//! must outlive a worker: its ring of frames, its export counters), in
//! the order made. The driver takes it away between calls. Where it goes
//! is the driver's business: a file replay's pipeline writes records and
//! GPVs to its [`Sinks`] before each call returns, on the reading thread;
//! a live worker sends the outputs to the host's thread, which holds the
//! sinks (one for all workers).
//!
//! # Invariants
//!
//! - **Input order.** Every stage sees frames and packets in input order;
//!   the head sees a batch before the stages beside it; a frame's
//!   [`Stage::frame`] comes before the batch holding its record. A change
//!   of a stage between calls ([`Pipeline::stage_mut`]: export policies
//!   at runtime) applies from the next frame on.
//! - **One parse.** The driver parses each frame once; stages get its
//!   [`PacketRecord`](clarion_wire::PacketRecord) and, if they ask, its
//!   bytes ([`Frame`]).
//! - **The driver's clock.** Nothing here reads a clock. Time is the
//!   packets' and the driver's calls: [`Stage::tick`] on a quiet wire (the
//!   wall clock less the worker's lag), [`Stage::flush`] on the driver's
//!   cadence (a file every 100 ms of packet time, live every 10 ms of the
//!   wall clock), [`Stage::service`] between batches. Flow records and
//!   GPVs end on a grid of their scan interval, so the same packets give
//!   the same records, in the same order, from a file and live
//!   (`crates/cli/tests/same_outputs.rs`).
//! - **Nothing dropped silently.** A sink's error ends the run; an export
//!   destination's is counted. [`Stage::end`] runs on every exit path the
//!   driver has (finished or failed): sinks and files are finished.
//!
//! # Adding a stage
//!
//! One module implementing [`Stage`], and one line in the `stages!` list
//! below: its field in [`Stages`] (what a host sets to run it) and its
//! place in the order every hook calls the stages in. Nothing else
//! changes for the drivers: a live worker and a file replay drive it as
//! they drive the others, and its outputs go where theirs go.
//!
//! # Cost
//!
//! Per frame: a load and a branch ([`Stage::takes_frames`], which the
//! drivers ask before making a frame), and a call on each stage that
//! takes frames now (an exporter without policies does not). Per batch:
//! one call per stage (docs/performance.md, "One pipeline for files and
//! live capture": instructions unchanged for a monitor alone, +0.5 % with
//! flow records or GPVs). A pipeline is `Send`: a live worker's is built
//! by the host and moved to the worker's thread.
//!
//! [`stage.rs`]: Stage
//! [`Monitor`]: clarion_engine::Monitor

// Every function short (issue 34; clippy.toml sets the bound, 60 lines).
#![warn(clippy::too_many_lines)]

mod captures;
mod error;
mod exports;
mod gpvs;
mod outputs;
mod pipeline;
mod records;
mod ring;
mod sinks;
mod stage;

pub use captures::EventCaptures;
pub use error::Error;
pub use exports::ExportPolicies;
pub use gpvs::Gpvs;
pub use outputs::Outputs;
pub use pipeline::Pipeline;
pub use records::FlowRecords;
pub use ring::{CaptureRequest, CaptureRing};
pub use sinks::{Sinks, FLUSH_EVERY_NS};
pub use stage::{Counting, Frame, Stage};

use pipeline::Beside;

/// The registry: every stage beside the head, one line each, in the order
/// each hook calls them. It declares [`Stages`], one optional field per
/// stage, and the order.
macro_rules! stages {
    ($($(#[$doc:meta])* $field:ident: $stage:ty,)*) => {
        /// The stages beside a pipeline's head, each one built (and its
        /// configuration checked) by its own `new`; `None` leaves it out.
        #[derive(Default)]
        pub struct Stages {
            $($(#[$doc])* pub $field: Option<$stage>,)*
        }

        impl Stages {
            /// The stages given, in the registry's order.
            fn into_list(self) -> Vec<Box<dyn Beside>> {
                let mut list: Vec<Box<dyn Beside>> = Vec::new();
                $(if let Some(s) = self.$field {
                    list.push(Box::new(s));
                })*
                list
            }
        }
    };
}

stages! {
    /// Flow records (TurboFlow), `--records`.
    records: FlowRecords,
    /// Grouped packet vectors (*Flow), `--gpv`, `--app`.
    gpvs: Gpvs,
    /// Export policies (Trident), `--exports`, or set at runtime.
    exports: ExportPolicies,
    /// `then capture` where one thread sees frames and reports (a file).
    captures: EventCaptures,
    /// `then capture` on a live worker's ring, assembled by its host.
    ring: CaptureRing,
}
