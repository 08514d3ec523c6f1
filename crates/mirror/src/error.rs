//! The one error type of the crate.

use std::io;

use clarion_wire::{LinkType, ParseError};

/// Why a packet could not be mirrored, or the mirror could not start.
///
/// An OS error's text is part of the message and not also its source, so
/// a chain printed in full says it once (as in `clarion-capture`).
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// VXLAN network identifiers are 24 bits.
    #[error("VXLAN VNI {0} is out of range (0 to 16777215)")]
    Vni(u32),

    /// A frame whose link layer could not be read to find its protocol.
    #[error("cannot mirror a {link:?} frame: {error}")]
    Frame { link: LinkType, error: ParseError },

    /// A frame with no link header whose first nibble is not 4 or 6.
    #[error("cannot mirror a {link:?} frame: IP version {version}, not 4 or 6")]
    IpVersion { link: LinkType, version: u8 },

    /// The analyzer address is neither `ip`, `ip:port` nor `host:port`.
    #[error("analyzer address {text:?}: {reason}")]
    Address { text: String, reason: String },

    /// The sending socket could not be opened.
    #[error("cannot open a UDP socket to mirror to {analyzer}: {error}")]
    Socket {
        analyzer: std::net::SocketAddr,
        error: io::Error,
    },
}
