//! Live capture on Linux, and the worker loop that runs a monitor on it.
//!
//! - [`PacketRing`]: AF_PACKET with a TPACKET_V3 memory-mapped ring, an
//!   optional hash fanout group (several workers share an interface, each
//!   flow on one of them, both directions together) and a classic BPF
//!   filter ([`filter`]) that also sets the snap length.
//! - [`XdpSource`]: an AF_XDP socket of one RX queue (crate clarion-xdp).
//! - [`Worker`]: Trumpet's main loop for one core. Packets are processed
//!   in batches; when an epoch ends its sweep runs in steps of bounded time
//!   whenever the receive queue is empty or below a low-water mark, so no
//!   packet waits long and no sweep is late. Epochs follow the packets'
//!   kernel timestamps and, when the wire is quiet, the wall clock (Unix
//!   time, so epoch boundaries agree across hosts).
//! - [`Chain`]: what a worker drives, the monitor and whatever its host
//!   puts beside it (`clarion-pipeline`: flow records, GPVs, export
//!   policies, captures around events), which this crate does not know.
//!
//! The engine stays free of I/O; everything here is the driver around it:
//! sources, parsing, sweep steps, drops and links.

// Every function short (issue 34; clippy.toml sets the bound, 60 lines).
#![warn(clippy::too_many_lines)]

mod adapt;
mod chain;
mod error;
pub mod filter;
mod interface;
mod metrics;
mod packet_ring;
mod source;
mod stats;
mod worker;
#[cfg(feature = "xdp")]
mod xdp_source;

pub use chain::Chain;
pub use error::{InterfaceLost, LiveError};
pub use interface::{link_type, Interface, LinkState, LinkWatch};
pub use metrics::{
    render as render_metrics, EventMetrics, Histogram, HostMetrics, InterfaceMetrics, ProcessStats,
    QueueDelayHistogram, Scope, SweepHistogram, LAST_VALUE_TTL, MAX_EVENT_SERIES, OTHER_EVENT, TOP_GROUPS,
};
pub use packet_ring::{poll_fds, PacketRing, RingConfig, RingMode, RingStats};
pub use source::{jiffy, Source};
pub use stats::{DelayHistogram, EpochStats, WorkerMetrics};
pub use worker::{
    realtime_ns, Command, LinkEvent, Worker, WorkerConfig, WorkerEvent, WorkerSummary, EXPORT_TICK,
};
#[cfg(feature = "xdp")]
pub use xdp_source::XdpSource;

/// One received frame, borrowed from the ring for the duration of a callback.
#[derive(Clone, Copy, Debug)]
pub struct Frame<'a> {
    /// Kernel receive time, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// The captured bytes (at most the snap length).
    pub data: &'a [u8],
    /// Length on the wire.
    pub orig_len: u32,
}
