//! Export policies on the packet path: Trident's policy-based streaming
//! of headers and packets to analyzers.
//!
//! ```text
//!  PacketRecord + frame ──► Classifier (TSS slow path, USS or megaflow fast path)
//!                               │ set of policies
//!                               ▼
//!                           route (each destination once)
//!                               ├─► Collector: HeaderRecord ─► difference-coded datagrams ─► UDP
//!                               ├─► Vxlan: frame (cut to snap) ─► VXLAN datagram ─► analyzer
//!                               └─► Files: frame (cut to snap) ─► rotating pcapng
//! ```
//!
//! - [`policy`] turns the policies' filters into classification rules
//!   (`clarion-classify`) and picks the fast path.
//! - [`Exporter`] classifies each packet and feeds the destinations.
//! - [`sampling`] keeps the export work within a CPU budget (Trident's
//!   AIMD adaptive sampling), recording the ratio in every header.
//! - The destinations never block nor end the run: what they could not
//!   take is counted and reported ([`DestinationStats`]).
//!
//! Policies are written in the event language (`export NAME ...`,
//! `docs/exports.md`) and never change what events see.

mod destination;
mod error;
mod exporter;
pub mod policy;
pub mod sampling;

pub use destination::DestinationStats;
pub use error::ExportError;
pub use exporter::{ExportConfig, ExportStats, Exporter, Frame, PolicyStats, FLUSH_AFTER_NS};
pub use policy::FastPathKind;
pub use sampling::{SamplingConfig, SamplingStats, WorkClock};
