//! The Trumpet evaluation workload: traffic and triggers to measure the
//! monitor against (SIGCOMM 2016, §7.2).
//!
//! Two halves that share one address plan ([`layout`]):
//!
//! - [`WorkloadSpec`] describes the traffic — packet rate, packet size,
//!   average number of active flows, flow arrival rate, how packets are
//!   shared among flows ([`FlowSizes`]: evenly, or heavy-tailed), burst
//!   size, the share of denial-of-service packets — and a seed. [`Generator`] turns it
//!   into Ethernet frames one at a time; [`WorkloadSpec::generate`] puts them
//!   all in one flat buffer ([`Workload`]) for a benchmark to replay from
//!   memory, and [`WorkloadSpec::write_pcap`] streams them to a capture file.
//!   Same spec and seed, same bytes.
//! - [`TriggerSpec`] describes the triggers — how many, how many each packet
//!   matches, how many distinct filter patterns, the interval — and
//!   [`TriggerSpec::synthesize`] writes them in the event language, so that
//!   every packet of the workload matches exactly that many triggers and the
//!   triggers use exactly that many tuple-space patterns.
//!
//! The crate does no I/O of its own beyond the pcap writer it is handed.
//!
//! ```
//! use clarion_workload::{TriggerSpec, WorkloadSpec};
//!
//! let triggers = TriggerSpec { triggers: 64, per_packet: 8, patterns: 4, ..TriggerSpec::default() };
//! let traffic = WorkloadSpec { packets: 1_000, groups: triggers.traffic_groups(), ..WorkloadSpec::default() };
//! let workload = traffic.generate()?;
//! let events = triggers.synthesize(&traffic)?;
//! assert_eq!(workload.len(), 1_000);
//! assert!(events.text.starts_with("# Synthesized"));
//! # Ok::<(), clarion_workload::WorkloadError>(())
//! ```

pub mod layout;
mod rng;
mod sizes;
mod traffic;
mod triggers;

pub use sizes::{FlowSizes, MAX_WEIGHT, MIN_WEIGHT};
pub use traffic::{
    FrameRef, Generator, Workload, WorkloadSpec, WorkloadStats, DOS_FRAME_LEN, MIN_PACKET_SIZE,
};
pub use triggers::{Statistic, TriggerSet, TriggerSpec};

/// Why a workload or trigger set cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// A parameter is out of range; `reason` says which values are allowed.
    #[error("invalid {name}: {reason}")]
    Invalid { name: &'static str, reason: String },
    /// The traffic is spread over a different number of address groups than
    /// the triggers cover, so packets would not match exactly K triggers.
    #[error(
        "the traffic uses {traffic} address groups but {triggers} triggers with {per_packet} per packet \
         cover {needed}; set the workload's groups to TriggerSpec::traffic_groups()"
    )]
    GroupMismatch {
        traffic: u32,
        triggers: u32,
        per_packet: u32,
        needed: u32,
    },
    /// The OS error is in the message, not a source: said once.
    #[error("cannot write the capture: {0}")]
    Io(std::io::Error),
}

impl From<std::io::Error> for WorkloadError {
    fn from(e: std::io::Error) -> Self {
        WorkloadError::Io(e)
    }
}

pub(crate) fn invalid(name: &'static str, reason: impl Into<String>) -> WorkloadError {
    WorkloadError::Invalid {
        name,
        reason: reason.into(),
    }
}
