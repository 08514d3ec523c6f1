//! Packet classification for Trident's export policies (issue 21).
//!
//! # What?
//!
//! Given a packet's five-tuple-plus key (family, addresses, ports, protocol,
//! VLAN; [`Key`]) and a rule set ([`Rule`]: prefixes, ranges, exact values,
//! a priority and an action), answer either the action of the best
//! matching rule ([`Semantics::FirstMatch`]) or the set of actions of all
//! matching rules ([`Semantics::AllMatches`]).
//!
//! # Design, simplest first
//!
//! - `reference.rs`: a linear scan over the original rules; the oracle of
//!   every test.
//! - `tss.rs`, the slow path: tuple space search, one hash table per
//!   distinct mask of the expanded rules (`rule.rs` turns ranges into
//!   prefixes), with OVS's priority pruning and un-wildcarding.
//! - `megaflow.rs`, Open vSwitch's fast path: the slow path's answer cached
//!   under the bits it depended on; one table per distinct megaflow mask.
//! - `uss.rs`, Trident's fast path: per-field mask arrays indexed by
//!   sub-prefixes give every packet a box no rule cuts (beyond the paper:
//!   arrays per protocol, and under first match no rule shadowed by a
//!   catch-all above it); the answer is cached
//!   under that box (a uniflow) in ONE table, so a lookup is one hash probe:
//!   `flat.rs`'s open-addressed table, key and answer in one cache line.
//!   `uss_full.rs` builds the whole uniflow table ahead of time instead
//!   (Algorithms 1-3), within a size limit.
//! - `classifier.rs` puts a fast path in front of the slow path and counts
//!   (hash lookups, hits, misses, evictions, cached space); `gen.rs` makes
//!   ACL and firewall rule sets following ClassBench's real parameter
//!   files (`seed.rs` reads them; `acl1_seed` and `fw1_seed` are built in,
//!   `seeds/README.md`) and traces, for tests and the benchmark.
//!
//! # Errors
//!
//! Building refuses bad input ([`ClassifyError`]); classifying never fails
//! and never panics.

mod cache_rng;
mod classifier;
mod error;
mod flat;
pub mod gen;
pub mod key;
mod megaflow;
pub mod reference;
mod rule;
pub mod seed;
mod tss;
mod uss;
mod uss_full;

pub use classifier::{Classifier, FastPath, Semantics, SetId, Stats, Verdict};
pub use error::ClassifyError;
pub use key::Key;
pub use rule::{Family, IpPrefix, Rule, MAX_ENTRIES, MAX_RULES};
pub use uss_full::UssTable;
