//! [`VxlanMirror`]: one non-blocking UDP socket to one analyzer.
//!
//! # Never stalling the caller
//!
//! The socket is non-blocking and unconnected. [`VxlanMirror::send`]
//! makes one `sendto` per packet and returns at once:
//! - sent: counted in `packets` and `bytes`;
//! - `EAGAIN`/`EWOULDBLOCK` (the socket buffer is full because the host
//!   cannot push datagrams out as fast as packets come): the datagram is
//!   dropped and counted in `dropped`; mirroring is best effort, and a
//!   slow path to the analyzer must not slow down the monitored host;
//! - any other error (no route, `EMSGSIZE` for a frame over 64 KiB, ...):
//!   counted in `send_errors`, the latest kept for the operator
//!   ([`VxlanMirror::last_error`]);
//! - a frame whose network protocol cannot be told (non-Ethernet link,
//!   not IP): counted in `unencapsulable`, nothing sent.
//!
//! Because the socket is unconnected, ICMP errors from the analyzer's
//! host (port unreachable while it restarts) are not reported to later
//! sends: mirroring resumes by itself when the analyzer is back.
//!
//! # Cost
//!
//! One copy of the frame into a reused datagram buffer and one system
//! call per packet; no allocation once the buffer has grown.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs, UdpSocket};

use clarion_wire::LinkType;

use crate::vxlan::{encapsulate_link, Vni, DEFAULT_PORT};
use crate::MirrorError;

/// Counters of a mirror since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MirrorStats {
    /// Datagrams sent.
    pub packets: u64,
    /// UDP payload bytes sent (VXLAN headers and inner frames).
    pub bytes: u64,
    /// Datagrams dropped because the socket buffer was full.
    pub dropped: u64,
    /// Datagrams the kernel refused for another reason.
    pub send_errors: u64,
    /// Frames not sent because their protocol could not be told.
    pub unencapsulable: u64,
}

/// What became of one packet (also counted in [`MirrorStats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOutcome {
    /// Sent: the datagram's length.
    Sent(usize),
    /// The socket buffer was full.
    Dropped,
    /// The kernel refused it ([`VxlanMirror::last_error`] says why).
    Failed,
    /// Not IP on a link without an Ethernet header: nothing sent.
    Unencapsulable,
}

/// Sends packets, VXLAN-encapsulated, to one analyzer.
#[derive(Debug)]
pub struct VxlanMirror {
    socket: UdpSocket,
    analyzer: SocketAddr,
    vni: Vni,
    snap: Option<usize>,
    datagram: Vec<u8>,
    stats: MirrorStats,
    last_error: Option<io::Error>,
}

impl VxlanMirror {
    /// Opens a non-blocking UDP socket of the analyzer's family, bound to
    /// an ephemeral port on every address.
    pub fn new(analyzer: SocketAddr, vni: Vni) -> Result<Self, MirrorError> {
        let any: IpAddr = match analyzer {
            SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
            SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
        };
        let socket = UdpSocket::bind((any, 0))
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .map_err(|error| MirrorError::Socket { analyzer, error })?;
        Ok(VxlanMirror {
            socket,
            analyzer,
            vni,
            snap: None,
            datagram: Vec::with_capacity(2048),
            stats: MirrorStats::default(),
            last_error: None,
        })
    }

    /// Cuts every inner frame to `snap` bytes (`None`: whole frames).
    pub fn with_snap(mut self, snap: Option<usize>) -> Self {
        self.snap = snap;
        self
    }

    /// Encapsulates and sends one frame; never blocks (see the module doc).
    pub fn send(&mut self, link: LinkType, frame: &[u8]) -> SendOutcome {
        if encapsulate_link(self.vni, link, frame, self.snap, &mut self.datagram).is_err() {
            self.stats.unencapsulable += 1;
            return SendOutcome::Unencapsulable;
        }
        match self.socket.send_to(&self.datagram, self.analyzer) {
            Ok(n) => {
                self.stats.packets += 1;
                self.stats.bytes += n as u64;
                SendOutcome::Sent(n)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.stats.dropped += 1;
                SendOutcome::Dropped
            }
            Err(e) => {
                self.stats.send_errors += 1;
                self.last_error = Some(e);
                SendOutcome::Failed
            }
        }
    }

    pub fn stats(&self) -> MirrorStats {
        self.stats
    }

    /// The latest error other than a full buffer, if any.
    pub fn last_error(&self) -> Option<&io::Error> {
        self.last_error.as_ref()
    }

    pub fn analyzer(&self) -> SocketAddr {
        self.analyzer
    }

    /// The local address datagrams leave from.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }
}

/// Reads an analyzer address: `192.0.2.9`, `192.0.2.9:4790`, `2001:db8::9`,
/// `[2001:db8::9]:4790`, `collector.example:4790` or `collector.example`
/// (a name is resolved once, here; its first address is used). The port
/// defaults to 4789.
pub fn parse_analyzer(text: &str) -> Result<SocketAddr, MirrorError> {
    let fail = |reason: String| MirrorError::Address {
        text: text.to_string(),
        reason,
    };
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Ok(ip) = text
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        return Ok(SocketAddr::new(ip, DEFAULT_PORT));
    }
    let resolved = match text.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => {
            let port: u16 = port
                .parse()
                .map_err(|_| fail(format!("port {port:?} is not a number from 0 to 65535")))?;
            (host, port).to_socket_addrs()
        }
        _ => (text, DEFAULT_PORT).to_socket_addrs(),
    };
    resolved
        .map_err(|e| fail(e.to_string()))?
        .next()
        .ok_or_else(|| fail("the name has no address".to_string()))
}

#[cfg(test)]
mod tests;
