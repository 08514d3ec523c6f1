//! IPFIX (RFC 7011) export of flow records over UDP, TCP and to files
//! (RFC 5655).
//!
//! Three parts, each in its own module:
//!
//! - [`encode`]: the message encoder, without I/O. Two templates (IPv4 and
//!   IPv6 flows) whose elements come from one table, [`ELEMENTS`], the
//!   mapping of [`FlowRecord`](clarion_records::FlowRecord) fields to
//!   information elements that `docs/records.md` mirrors.
//! - [`decode`]: a plain decoder written apart from the encoder, the
//!   reference the tests compare against (and a helper for tools).
//! - [`sink`]: [`IpfixSink`], the [`Sink<FlowRecord>`](clarion_sinks::Sink)
//!   of the three transports, opened from a destination string:
//!   `ipfix+udp://HOST:PORT`, `ipfix+tcp://HOST:PORT` or a path ending in
//!   `.ipfix`.

pub mod decode;
pub mod encode;
pub mod sink;

use std::io;

pub use decode::{Decoded, Decoder, Message};
pub use encode::{Element, Encoder, EncoderConfig, ELEMENTS};
pub use sink::{is_ipfix_destination, open, open_with, IpfixSink, SinkOptions, Transport};

/// Why IPFIX could not be encoded, decoded or sent.
#[derive(Debug, thiserror::Error)]
pub enum IpfixError {
    /// The maximum message size is outside what the records and the
    /// 16-bit length field allow.
    #[error("an IPFIX message size of {size} bytes is outside {min}..={max}")]
    MessageSize { size: usize, min: usize, max: usize },
    /// A destination string that is not an IPFIX destination, or a bad one.
    #[error("bad IPFIX destination {destination:?}: {reason}")]
    Destination { destination: String, reason: String },
    /// The destination could not be opened (resolved, connected, created).
    #[error("cannot open IPFIX destination {destination}")]
    Open {
        destination: String,
        #[source]
        source: io::Error,
    },
    /// Bytes that are not valid IPFIX (the decoder).
    #[error("malformed IPFIX: {0}")]
    Malformed(String),
}
