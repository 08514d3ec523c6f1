//! [`VxlanMirror`]: one non-blocking UDP socket to one analyzer, its
//! datagrams sent in batches.
//!
//! # Batches
//!
//! [`VxlanMirror::send`] encapsulates a frame into the next of `batch`
//! reused buffers (default 1; the exporter uses [`DEFAULT_BATCH`]) and
//! returns; when the batch is full it is sent with one `sendmmsg(2)`
//! (module `mmsg`). [`VxlanMirror::flush`] sends a partial batch: the
//! owner calls it on its tick (so no datagram waits longer than a tick)
//! and at the end; dropping the mirror flushes too. Datagrams leave in
//! the order of the `send` calls. One system call per batch instead of
//! one per packet is the saving: on loopback the sender also pays the
//! delivery to the receiving socket, which batching does not change.
//!
//! # Never stalling the caller
//!
//! The socket is non-blocking and unconnected. A flush never waits; each
//! datagram of the batch ends in exactly one counter of [`MirrorStats`]:
//! - sent: counted in `packets` and `bytes`;
//! - `EAGAIN`/`EWOULDBLOCK` (the socket buffer is full because the host
//!   cannot push datagrams out as fast as packets come): that datagram
//!   *and the rest of the batch* are dropped and counted in `dropped`
//!   (the kernel took the batch only partly; trying again at once would
//!   only spin). Mirroring is best effort, and a slow path to the
//!   analyzer must not slow down the monitored host;
//! - any other error (no route, `EMSGSIZE` for a frame over 64 KiB, ...):
//!   that datagram is counted in `send_errors`, the latest error kept for
//!   the operator ([`VxlanMirror::last_error`]), and the rest of the
//!   batch is sent;
//! - a frame whose network protocol cannot be told (non-Ethernet link,
//!   not IP): counted in `unencapsulable` by `send`, nothing queued.
//!
//! Counters are exact but count a datagram when its fate is known: the
//! ones still queued are [`VxlanMirror::pending`].
//!
//! Because the socket is unconnected, ICMP errors from the analyzer's
//! host (port unreachable while it restarts) are not reported to later
//! sends: mirroring resumes by itself when the analyzer is back.
//!
//! # Cost
//!
//! One copy of the frame into a reused buffer per packet, one system call
//! per batch; no allocation once the buffers have grown (`batch` buffers
//! of the largest datagram seen).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs, UdpSocket};

use clarion_wire::LinkType;
use socket2::SockAddr;

use crate::mmsg::{send_batch, MAX_BATCH};
use crate::vxlan::{encapsulate_link, Vni, DEFAULT_PORT};
use crate::MirrorError;

/// The batch the exporter uses: 32 datagrams a `sendmmsg`.
pub const DEFAULT_BATCH: usize = 32;

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
    /// Queued in the batch, sent by a later `send` or `flush`.
    Queued,
    /// Sent (it completed the batch, which was sent): the datagram's length.
    Sent(usize),
    /// The socket buffer was full.
    Dropped,
    /// The kernel refused it ([`VxlanMirror::last_error`] says why).
    Failed,
    /// Not IP on a link without an Ethernet header: nothing sent.
    Unencapsulable,
}

/// What became of the datagrams of one flush (also counted in
/// [`MirrorStats`]); `sent + dropped + failed` is the batch's length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flushed {
    pub sent: usize,
    pub dropped: usize,
    pub failed: usize,
}

/// Sends packets, VXLAN-encapsulated, to one analyzer.
#[derive(Debug)]
pub struct VxlanMirror {
    socket: UdpSocket,
    analyzer: SocketAddr,
    to: SockAddr,
    vni: Vni,
    snap: Option<usize>,
    /// Datagram buffers, reused; `slots[..queued]` wait to be sent.
    slots: Vec<Vec<u8>>,
    queued: usize, // <= batch <= slots.len() once a datagram was queued
    batch: usize,  // 1..=MAX_BATCH
    stats: MirrorStats,
    last_error: Option<io::Error>,
}

impl VxlanMirror {
    /// Opens a non-blocking UDP socket of the analyzer's family, bound to
    /// an ephemeral port on every address. Batches of 1: each `send`
    /// sends at once.
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
            to: SockAddr::from(analyzer),
            vni,
            snap: None,
            slots: Vec::new(),
            queued: 0,
            batch: 1,
            stats: MirrorStats::default(),
            last_error: None,
        })
    }

    /// Cuts every inner frame to `snap` bytes (`None`: whole frames).
    pub fn with_snap(mut self, snap: Option<usize>) -> Self {
        self.snap = snap;
        self
    }

    /// Sends datagrams `batch` at a time (clamped to 1..=64; see the
    /// module doc); the owner must [`flush`](Self::flush) on its tick.
    pub fn with_batch(mut self, batch: usize) -> Self {
        self.flush();
        self.batch = batch.clamp(1, MAX_BATCH);
        self
    }

    /// Encapsulates and queues one frame, sending the batch if it is now
    /// full; never blocks (see the module doc).
    pub fn send(&mut self, link: LinkType, frame: &[u8]) -> SendOutcome {
        if self.slots.len() <= self.queued {
            self.slots
                .resize_with(self.queued + 1, || Vec::with_capacity(2048));
        }
        let Some(slot) = self.slots.get_mut(self.queued) else {
            // Unreachable: the slot was just made.
            return SendOutcome::Failed;
        };
        if encapsulate_link(self.vni, link, frame, self.snap, slot).is_err() {
            self.stats.unencapsulable += 1;
            return SendOutcome::Unencapsulable;
        }
        self.queued += 1;
        if self.queued < self.batch {
            return SendOutcome::Queued;
        }
        self.flush_with_outcome().1
    }

    /// Sends the queued datagrams now; never blocks.
    pub fn flush(&mut self) -> Flushed {
        self.flush_with_outcome().0
    }

    fn flush_with_outcome(&mut self) -> (Flushed, SendOutcome) {
        let n = std::mem::take(&mut self.queued).min(self.slots.len());
        let (socket, to) = (&self.socket, &self.to);
        drain(
            &self.slots[..n],
            |d, sent| send_batch(socket, to, d, sent),
            &mut self.stats,
            &mut self.last_error,
        )
    }

    /// Datagrams queued, not sent yet.
    pub fn pending(&self) -> usize {
        self.queued
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

impl Drop for VxlanMirror {
    /// Queued datagrams are sent, not lost silently.
    fn drop(&mut self) {
        self.flush();
    }
}

/// Sends `queued` through `send_some` (which sends a prefix of what it is
/// given, as `sendmmsg`: module `mmsg`) until each datagram has a fate,
/// counted in `stats`; returns the counts and the last one's outcome.
/// Pure but for `send_some`: the unit tests drive it with a scripted one.
fn drain(
    queued: &[Vec<u8>],
    mut send_some: impl FnMut(&[&[u8]], &mut [usize]) -> io::Result<usize>,
    stats: &mut MirrorStats,
    last_error: &mut Option<io::Error>,
) -> (Flushed, SendOutcome) {
    let n = queued.len().min(MAX_BATCH);
    let mut datagrams: [&[u8]; MAX_BATCH] = [&[]; MAX_BATCH];
    for (d, q) in datagrams.iter_mut().zip(queued) {
        *d = q;
    }
    let mut lens = [0usize; MAX_BATCH];
    let mut done = Flushed::default();
    let mut last = SendOutcome::Queued;
    let mut i = 0; // datagrams[..i] have a fate
    while i < n {
        match send_some(&datagrams[i..n], &mut lens[i..n]) {
            Ok(k) if k > 0 => {
                let k = k.min(n - i);
                for &len in &lens[i..i + k] {
                    stats.packets += 1;
                    stats.bytes += len as u64;
                }
                done.sent += k;
                i += k;
                last = SendOutcome::Sent(lens[i - 1]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // A full buffer drops the rest of the batch. (Ok(0) cannot
            // happen with datagrams to send; taken as a full buffer so
            // that the loop ends whatever the kernel says.)
            Ok(_) => i = drop_rest(&mut done, &mut last, stats, i, n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                i = drop_rest(&mut done, &mut last, stats, i, n);
            }
            Err(e) => {
                stats.send_errors += 1;
                *last_error = Some(e);
                done.failed += 1;
                last = SendOutcome::Failed;
                i += 1;
            }
        }
    }
    (done, last)
}

/// Counts `datagrams[i..n]` dropped; returns `n`.
fn drop_rest(
    done: &mut Flushed,
    last: &mut SendOutcome,
    stats: &mut MirrorStats,
    i: usize,
    n: usize,
) -> usize {
    stats.dropped += (n - i) as u64;
    done.dropped += n - i;
    *last = SendOutcome::Dropped;
    n
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
