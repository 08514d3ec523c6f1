//! Where exported headers and packets go: a collector's UDP header
//! stream, an analyzer's VXLAN mirror, rotating pcapng files.
//!
//! No destination ever blocks the packet path or ends the run:
//! - a collector's and a mirror's sockets are non-blocking; a datagram the kernel cannot
//!   take now (full socket buffer) is counted as dropped, and an error
//!   (the collector's port closed, no route) is counted, its first
//!   message kept;
//! - files stop at their first write error (a full disk), which is kept,
//!   and every later packet for them is counted as dropped.
//!
//! The host reports these counts and messages at the end and in its
//! summary: nothing is lost silently.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;

use clarion_capture::{RotatingPcapng, Rotation, WrittenFile};
use clarion_headers::{Encoder, EncoderConfig, HeaderRecord};
use clarion_wire::LinkType;

use crate::ExportError;

/// What one destination has done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DestinationStats {
    /// `collector 10.0.0.9:9739`, `pcapng web-…`, `vxlan 10.0.0.10:4789 vni 42`.
    pub label: String,
    /// Packets (or headers) handed to the destination.
    pub packets: u64,
    /// Datagrams sent (collector, VXLAN).
    pub datagrams: u64,
    /// Bytes written or sent.
    pub bytes: u64,
    /// Packets or datagrams the destination could not take (full socket
    /// buffer, a stopped file).
    pub dropped: u64,
    /// Send or write errors.
    pub errors: u64,
    /// The first error's message.
    pub first_error: Option<String>,
    /// Files written (pcapng).
    pub files: Vec<WrittenFile>,
    /// Headers' bytes as frames cut after the transport header (collector),
    /// against which `bytes` is the compressed size.
    pub header_bytes: u64,
    /// Packets the ones handed stand for: the sum of their sample ratios
    /// (`packets` when nothing is sampled).
    pub represented: u64,
}

impl DestinationStats {
    fn error(&mut self, e: impl std::fmt::Display) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e.to_string());
        }
    }
}

/// A UDP socket for `addr`, connected and non-blocking.
pub(crate) fn udp_socket(addr: SocketAddr) -> Result<UdpSocket, ExportError> {
    let local: SocketAddr = if addr.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let err = |error| ExportError::Socket { addr, error };
    let socket = UdpSocket::bind(local).map_err(err)?;
    socket.connect(addr).map_err(err)?;
    socket.set_nonblocking(true).map_err(err)?;
    Ok(socket)
}

/// Sends one datagram without waiting; see the module doc.
pub(crate) fn send(socket: &UdpSocket, datagram: &[u8], stats: &mut DestinationStats) {
    match socket.send(datagram) {
        Ok(n) => {
            stats.datagrams += 1;
            stats.bytes += n as u64;
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => stats.dropped += 1,
        Err(e) => stats.error(e),
    }
}

/// A random 64-bit session id. Not a secret (it travels in clear): it only
/// has to differ from the sessions before it, so the standard library's
/// randomly keyed hasher (seeded from the OS) and the clock suffice.
pub(crate) fn new_session() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.write_u32(std::process::id());
    h.finish()
}

/// The header stream to one collector.
#[derive(Debug)]
pub(crate) struct Collector {
    socket: UdpSocket,
    encoder: Encoder,
    /// Packet time of the first record in the datagram being filled.
    pending_since: Option<u64>,
    pub stats: DestinationStats,
}

impl Collector {
    /// The stream to `addr`, as `config` says but for its session: each
    /// stream draws its own, so that a stream started again (the exporter
    /// restarted, a policy removed and added back) is a new sequence to the
    /// collector, not a jump back or a loss in the old one.
    pub fn open(addr: SocketAddr, config: &EncoderConfig) -> Result<Collector, ExportError> {
        let config = EncoderConfig {
            session: new_session(),
            ..config.clone()
        };
        Ok(Collector {
            socket: udp_socket(addr)?,
            encoder: Encoder::new(config)?,
            pending_since: None,
            stats: DestinationStats {
                label: format!("collector {addr}"),
                ..DestinationStats::default()
            },
        })
    }

    pub fn push(&mut self, r: &HeaderRecord) {
        self.stats.packets += 1;
        if let Some(d) = self.encoder.push(r) {
            send(&self.socket, d, &mut self.stats);
            self.pending_since = None;
        }
        self.pending_since.get_or_insert(r.ts_ns);
    }

    /// Sends the datagram being filled if its first record is `max_wait_ns`
    /// older than `now_ns` (or at once with `max_wait_ns` 0).
    pub fn flush_older(&mut self, now_ns: u64, max_wait_ns: u64) {
        let Some(since) = self.pending_since else { return };
        if now_ns.saturating_sub(since) >= max_wait_ns {
            if let Some(d) = self.encoder.flush() {
                send(&self.socket, d, &mut self.stats);
            }
            self.pending_since = None;
        }
    }

    pub fn finish(&mut self) {
        self.flush_older(u64::MAX, 0);
        self.stats.header_bytes = self.encoder.stats().header_bytes;
    }
}

/// One policy's rotating pcapng files, opened at its first packet.
#[derive(Debug)]
pub(crate) struct Files {
    base: PathBuf,
    rotation: Rotation,
    writer: Option<RotatingPcapng>,
    /// The file interface of each link type seen.
    interfaces: Vec<(LinkType, u32)>,
    stopped: bool,
    pub stats: DestinationStats,
}

impl Files {
    pub fn new(base: PathBuf, rotation: Rotation) -> Files {
        let label = format!("pcapng {}-*.pcapng", base.display());
        Files {
            base,
            rotation,
            writer: None,
            interfaces: Vec::new(),
            stopped: false,
            stats: DestinationStats {
                label,
                ..DestinationStats::default()
            },
        }
    }

    pub fn write(&mut self, link: LinkType, ts_ns: u64, data: &[u8], orig_len: u32) {
        self.stats.packets += 1;
        if self.stopped {
            self.stats.dropped += 1;
            return;
        }
        if let Err(e) = self.try_write(link, ts_ns, data, orig_len) {
            self.stats.error(e);
            self.stats.dropped += 1;
            self.stopped = true;
        }
    }

    fn try_write(
        &mut self,
        link: LinkType,
        ts_ns: u64,
        data: &[u8],
        orig_len: u32,
    ) -> Result<(), clarion_capture::CaptureError> {
        let writer = match &mut self.writer {
            Some(w) => w,
            None => self
                .writer
                .insert(RotatingPcapng::create(&self.base, self.rotation)?),
        };
        let interface = match self.interfaces.iter().find(|(l, _)| *l == link) {
            Some((_, id)) => *id,
            None => {
                let id = writer.add_interface(link, 262_144, None)?;
                self.interfaces.push((link, id));
                id
            }
        };
        writer.write_packet(interface, ts_ns, data, orig_len)?;
        self.stats.bytes += data.len() as u64;
        Ok(())
    }

    pub fn flush(&mut self) {
        if let (Some(w), false) = (&mut self.writer, self.stopped) {
            if let Err(e) = w.flush() {
                self.stats.error(e);
                self.stopped = true;
            }
        }
    }

    pub fn finish(&mut self) {
        let Some(w) = self.writer.take() else { return };
        if self.stopped {
            self.stats.files = w.files().to_vec();
            return;
        }
        let files = w.files().to_vec();
        match w.finish() {
            Ok(files) => self.stats.files = files,
            Err(e) => {
                self.stats.files = files;
                self.stats.error(e);
            }
        }
    }
}

/// A VXLAN mirror to one analyzer (`clarion-mirror`), its datagrams sent
/// [`clarion_mirror::DEFAULT_BATCH`] at a time with one `sendmmsg`, the
/// rest by [`Vxlan::flush`] on the exporter's tick and at the end (so a
/// datagram waits at most a tick). Its stats copy the mirror's after
/// each call: `datagrams`, `bytes`, `errors` once sent or refused,
/// `dropped` for a full buffer (the rest of its batch with it) and for
/// frames that cannot be encapsulated.
#[derive(Debug)]
pub(crate) struct Vxlan {
    mirror: clarion_mirror::VxlanMirror,
    pub stats: DestinationStats,
}

impl Vxlan {
    pub fn open(analyzer: SocketAddr, vni: u32, snap: Option<u32>) -> Result<Vxlan, ExportError> {
        let vni = clarion_mirror::Vni::new(vni).map_err(|e| ExportError::Mirror {
            addr: analyzer,
            error: e,
        })?;
        let mirror = clarion_mirror::VxlanMirror::new(analyzer, vni)
            .map_err(|e| ExportError::Mirror {
                addr: analyzer,
                error: e,
            })?
            .with_snap(snap.map(|n| n as usize))
            .with_batch(clarion_mirror::DEFAULT_BATCH);
        Ok(Vxlan {
            mirror,
            stats: DestinationStats {
                label: format!("vxlan {analyzer} vni {}", vni.get()),
                ..DestinationStats::default()
            },
        })
    }

    pub fn send(&mut self, link: LinkType, frame: &[u8]) {
        self.stats.packets += 1;
        if self.mirror.send(link, frame) != clarion_mirror::SendOutcome::Queued {
            self.sync();
        }
    }

    /// Sends the datagrams queued; call on every tick and at the end.
    pub fn flush(&mut self) {
        self.mirror.flush();
        self.sync();
    }

    /// Copies the mirror's counters (and its first error's message).
    fn sync(&mut self) {
        let m = self.mirror.stats();
        self.stats.datagrams = m.packets;
        self.stats.bytes = m.bytes;
        self.stats.dropped = m.dropped + m.unencapsulable;
        if m.send_errors > self.stats.errors && self.stats.first_error.is_none() {
            self.stats.first_error = Some(
                self.mirror
                    .last_error()
                    .map_or_else(|| "send failed".to_string(), ToString::to_string),
            );
        }
        self.stats.errors = m.send_errors;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each stream draws its own session: a stream started again is a new
    /// sequence to the collector, never a jump back in the old one.
    #[test]
    fn streams_draw_distinct_sessions() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = receiver.local_addr().unwrap();
        let config = EncoderConfig::default();
        let sessions: std::collections::BTreeSet<u64> = (0..16)
            .map(|_| Collector::open(addr, &config).unwrap().encoder.config().session)
            .collect();
        assert_eq!(sessions.len(), 16);
    }
}
