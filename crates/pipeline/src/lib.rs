//! The seam between a host's parsed packets and what consumes them
//! ([`Stage`]: one monitor, a network of hosts, or one of them with flow
//! records, GPVs, export policies and captures beside it,
//! [`WithExports`]), moved out of `clarion-host` as it was.

mod error;
mod pipeline;
mod stage;

pub use error::Error;
pub use pipeline::{Counting, WithExports};
pub use stage::{PerHost, Stage};
