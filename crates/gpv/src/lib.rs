//! Grouped packet vectors (*Flow, Sonchack's dissertation, chapter 3): the
//! GPV cache that groups per-packet features by flow, the GPV file format,
//! and metric apps bound at run time.
//!
//! The pipeline is `PacketRecord`s → [`GpvCache`] → [`Gpv`]s → (a file via
//! [`GpvWriter`] / [`GpvReader`], or directly) → [`AppRuntime`] → reports.
//! A GPV keeps every packet's features, so any metric derivable from them
//! can be computed later, by apps added or removed while the stream runs;
//! grouping by flow amortises the flow lookup over the GPV's packets.
//!
//! Invariants every stage relies on:
//! - A packet's time is exactly `gpv.header.start_ns + delta` (deltas are
//!   nanoseconds from the GPV's start): GPVs lose no timing precision.
//! - A flow's GPVs leave the cache in the order of their packets (a flow
//!   lives in one slot, and its GPV is evicted before the next one
//!   starts), so an app that keeps per-flow state sees each flow's packets
//!   in arrival order even though GPVs of different flows interleave.
//!
//! No I/O here besides the codec over `Read`/`Write`.

pub mod app;
pub mod apps;
pub mod cache;
pub mod codec;
mod error;
pub mod gpv;
mod sink;

pub use app::{key_json, AppRuntime, GpvApp};
pub use apps::{app_by_name, Classifier, MicroBurst, MicroBurstConfig, Profiler, APP_NAMES};
pub use cache::{flow_hash, CacheConfig, CacheStats, GpvCache};
pub use codec::{decode_gpv, encode_gpv, GpvReader, GpvWriter, MAGIC, MAX_RECORD_LEN, VERSION};
pub use error::GpvError;
pub use gpv::{EvictCause, Gpv, GpvHeader, PacketFeatures, TcpSeq};
pub use sink::GpvFile;
