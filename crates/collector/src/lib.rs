//! The receiving end of header export: `clarion collect`.
//!
//! ```text
//!  UDP socket ──► Decoder (tag check; per stream: sequence, gaps, late, duplicates, resets) ──► HeaderOut
//!                                                                      ├─ JSON lines
//!                                                                      └─ pcapng (headers as frames)
//! ```
//!
//! - [`Collector`] owns the socket and the decoder. A datagram that is
//!   refused (no valid tag, damaged, not ours, another version) is counted
//!   by reason and by source address and its first error kept; it never
//!   stops the collector nor spoils the next one. A duplicate datagram's
//!   records are not written twice.
//! - [`HeaderOut`] is where records go: [`JsonLines`] or [`PcapngHeaders`]
//!   (each record rebuilt as the frame of its headers, with the packet's
//!   length on the wire, readable by tshark).
//! - [`Collector::run`] receives until a stop condition: a record count,
//!   a duration, or a flag (a signal); after the last two it drains what
//!   the socket still holds, and reads the kernel's drop count, so that
//!   [`CollectStats::losses`] names everything that did not make it.

mod error;
mod out;
mod socket;

pub use error::CollectError;
pub use out::{HeaderOut, JsonLines, PcapngHeaders};

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clarion_headers::{Arrival, Auth, Decoder, ExporterStats, HeaderRecord, StreamId};

/// How long the drain at a stop may take at most: exporters that go on
/// sending could otherwise keep the socket from ever being empty.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// Source addresses whose refusals are counted one by one; the rest are
/// summed under one line (a forger can use any number of addresses).
pub const MAX_REFUSING_SOURCES: usize = 1024;

/// When [`Collector::run`] returns.
#[derive(Clone, Copy, Debug, Default)]
pub struct Until {
    /// After this many records written.
    pub records: Option<u64>,
    /// After this long.
    pub duration: Option<Duration>,
}

/// What a collector has received.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollectStats {
    /// Datagrams received (decoded or not).
    pub datagrams: u64,
    /// Records written.
    pub records: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Datagrams refused, by reason ([`clarion_headers::HeadersError::reason`]).
    pub refused: BTreeMap<&'static str, u64>,
    /// The first refusal's message.
    pub first_error: Option<String>,
    /// Refused datagrams by source address (the first
    /// [`MAX_REFUSING_SOURCES`] addresses), and those of other addresses.
    pub refused_from: BTreeMap<SocketAddr, u64>,
    pub refused_from_others: u64,
    /// Per stream (exporter name, worker, session): sequence accounting.
    pub streams: Vec<(StreamId, ExporterStats)>,
    /// Datagrams the kernel dropped for this socket (its receive buffer
    /// was full), if the kernel says.
    pub kernel_drops: Option<u64>,
    /// Datagrams read after the stop (signal or duration) from what was
    /// queued in the socket.
    pub drained: u64,
    /// Whether the drain ended before the socket was empty (it took longer
    /// than [`DRAIN_LIMIT`]), and the bytes then still queued.
    pub left_unread: Option<u64>,
}

impl CollectStats {
    /// Datagrams refused, all reasons.
    pub fn refused_total(&self) -> u64 {
        self.refused.values().sum()
    }

    /// Refusals that lose headers of a real exporter: damaged datagrams,
    /// another format version, one stream too many. Not those of datagrams
    /// that are not Clarion's or not a key holder's (foreign traffic,
    /// counted and shown but not lost).
    pub fn refused_lost(&self) -> u64 {
        self.refused
            .iter()
            .filter(|(r, _)| !matches!(**r, "not_clarion" | "unauthenticated" | "bad_tag"))
            .map(|(_, n)| n)
            .sum()
    }

    /// Why the headers written are not all that was sent, one phrase per
    /// cause; empty when nothing is known lost.
    pub fn losses(&self) -> Vec<String> {
        let mut v = Vec::new();
        let lost: u64 = self.streams.iter().map(|(_, e)| e.lost_datagrams).sum();
        if lost > 0 {
            v.push(format!("{lost} datagrams missing from their streams"));
        }
        let resets: u64 = self.streams.iter().map(|(_, e)| e.resets).sum();
        if resets > 0 {
            v.push(format!(
                "{resets} implausible sequence jumps (what was lost there is unknown)"
            ));
        }
        if let Some(d) = self.kernel_drops.filter(|&d| d > 0) {
            v.push(format!(
                "{d} datagrams dropped by the kernel (receive buffer full)"
            ));
        }
        if let Some(b) = self.left_unread {
            v.push(format!(
                "{b} bytes of datagrams left unread in the socket at the stop"
            ));
        }
        let r = self.refused_lost();
        if r > 0 {
            v.push(format!(
                "{r} datagrams that could not be read (damaged, another version)"
            ));
        }
        v
    }
}

/// A bound socket and a decoder.
#[derive(Debug)]
pub struct Collector {
    socket: UdpSocket,
    decoder: Decoder,
    buf: Vec<u8>,
    records: Vec<HeaderRecord>,
    stats: CollectStats,
}

impl Collector {
    /// Listens on `addr` with a receive buffer of about `recv_buffer`
    /// bytes (see [`socket::bind`] for how much the kernel grants),
    /// believing the datagrams `auth` lets through.
    pub fn bind(addr: SocketAddr, recv_buffer: usize, auth: Auth) -> Result<Collector, CollectError> {
        Ok(Collector {
            socket: socket::bind(addr, recv_buffer)?,
            decoder: Decoder::with_auth(auth),
            buf: vec![0; 65_536],
            records: Vec::new(),
            stats: CollectStats::default(),
        })
    }

    pub fn local_addr(&self) -> Result<SocketAddr, CollectError> {
        self.socket.local_addr().map_err(CollectError::Socket)
    }

    /// The receive buffer the kernel granted, in bytes.
    pub fn recv_buffer(&self) -> usize {
        socket::recv_buffer(&self.socket)
    }

    /// Receives and writes until `until` or `stop` says so. At a stop by
    /// `stop` or the duration, what is queued in the socket is read too
    /// (see [`Collector::drain`]); at the record count it is not (the
    /// caller asked for that many).
    pub fn run(
        &mut self,
        out: &mut dyn HeaderOut,
        until: Until,
        stop: &AtomicBool,
    ) -> Result<(), CollectError> {
        let started = Instant::now();
        self.socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(CollectError::Socket)?;
        let full = |s: &CollectStats| until.records.is_some_and(|n| s.records >= n);
        loop {
            if full(&self.stats) {
                break;
            }
            if stop.load(Ordering::Relaxed) || until.duration.is_some_and(|d| started.elapsed() >= d) {
                self.drain(out, until.records)?;
                break;
            }
            match self.socket.recv_from(&mut self.buf) {
                Ok((n, from)) => self.datagram(n, from, out, until.records)?,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    out.flush().map_err(CollectError::Write)?;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(CollectError::Socket(e)),
            }
        }
        self.stats.kernel_drops = socket::kernel_drops(&self.socket);
        out.flush().map_err(CollectError::Write)
    }

    /// Reads what is queued in the socket without waiting, until it is
    /// empty (or [`DRAIN_LIMIT`] has passed, or the record count is
    /// reached): datagrams that had arrived before the stop are written
    /// and counted like the others, not silently dropped with the socket.
    fn drain(&mut self, out: &mut dyn HeaderOut, limit: Option<u64>) -> Result<(), CollectError> {
        self.socket.set_nonblocking(true).map_err(CollectError::Socket)?;
        let started = Instant::now();
        loop {
            if limit.is_some_and(|n| self.stats.records >= n) {
                return Ok(());
            }
            if started.elapsed() >= DRAIN_LIMIT {
                // Still not empty: say how much is left, never pretend.
                self.stats.left_unread = Some(socket::queued_bytes(&self.socket).unwrap_or(0).max(1));
                return Ok(());
            }
            match self.socket.recv_from(&mut self.buf) {
                Ok((n, from)) => {
                    self.stats.drained += 1;
                    self.datagram(n, from, out, limit)?;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(CollectError::Socket(e)),
            }
        }
    }

    fn datagram(
        &mut self,
        n: usize,
        from: SocketAddr,
        out: &mut dyn HeaderOut,
        limit: Option<u64>,
    ) -> Result<(), CollectError> {
        self.stats.datagrams += 1;
        self.stats.bytes += n as u64;
        self.records.clear();
        let data = self.buf.get(..n).unwrap_or_default();
        match self.decoder.decode_into(data, &mut self.records) {
            Ok((_, Arrival::Duplicate | Arrival::TooOld)) => {}
            Ok(_) => {
                for r in &self.records {
                    if limit.is_some_and(|l| self.stats.records >= l) {
                        break;
                    }
                    out.write(r).map_err(CollectError::Write)?;
                    self.stats.records += 1;
                }
            }
            Err(e) => {
                *self.stats.refused.entry(e.reason()).or_insert(0) += 1;
                let known = self.stats.refused_from.len() < MAX_REFUSING_SOURCES
                    || self.stats.refused_from.contains_key(&from);
                if known {
                    *self.stats.refused_from.entry(from).or_insert(0) += 1;
                } else {
                    self.stats.refused_from_others += 1;
                }
                if self.stats.first_error.is_none() {
                    self.stats.first_error = Some(format!("from {from}: {e}"));
                }
            }
        }
        Ok(())
    }

    pub fn stats(&self) -> CollectStats {
        let mut s = self.stats.clone();
        s.streams = self.decoder.streams().collect();
        s.streams.sort_by_key(|(id, _)| *id);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_headers::{Encoder, EncoderConfig, ExporterName, Key};

    /// Records kept in memory.
    #[derive(Default)]
    struct Kept(Vec<HeaderRecord>);

    impl HeaderOut for Kept {
        fn write(&mut self, r: &HeaderRecord) -> std::io::Result<()> {
            self.0.push(*r);
            Ok(())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn record(i: u32) -> HeaderRecord {
        let mut r = HeaderRecord::from_packet(&clarion_wire::PacketRecord::default(), 0, 1);
        r.size = 40 + i;
        r.wire_len = 1514;
        r
    }

    /// `n` one-record datagrams of exporter `name`, tagged with `key`.
    fn datagrams(name: &str, key: Option<Key>, n: u32) -> Vec<Vec<u8>> {
        let mut enc = Encoder::new(EncoderConfig {
            exporter: ExporterName::new(name).unwrap(),
            session: 7,
            key,
            ..EncoderConfig::default()
        })
        .unwrap();
        (0..n)
            .map(|i| {
                enc.push(&record(i));
                enc.flush().unwrap().to_vec()
            })
            .collect()
    }

    /// Datagrams queued before a stop are all read (the drain), the
    /// refused ones counted by reason and by source.
    #[test]
    fn a_stop_drains_the_socket_and_refusals_are_counted_by_source() {
        let key = Key::new(&[3; 32]).unwrap();
        let mut c = Collector::bind("127.0.0.1:0".parse().unwrap(), 4 << 20, Auth::Key(key.clone())).unwrap();
        let to = c.local_addr().unwrap();
        let good = UdpSocket::bind("127.0.0.1:0").unwrap();
        let bad = UdpSocket::bind("127.0.0.1:0").unwrap();
        for d in datagrams("a", Some(key), 50) {
            good.send_to(&d, to).unwrap();
        }
        for d in datagrams("a", None, 2) {
            bad.send_to(&d, to).unwrap();
        }
        for d in datagrams("a", Some(Key::new(&[4; 32]).unwrap()), 3) {
            bad.send_to(&d, to).unwrap();
        }
        bad.send_to(b"junk", to).unwrap();
        // Stopped before the first read: everything comes from the drain.
        let stop = AtomicBool::new(true);
        let mut out = Kept::default();
        c.run(&mut out, Until::default(), &stop).unwrap();
        let s = c.stats();
        assert_eq!(out.0, (0..50).map(record).collect::<Vec<_>>());
        assert_eq!((s.drained, s.datagrams, s.records), (56, 56, 50));
        assert_eq!(s.refused.get("unauthenticated"), Some(&2));
        assert_eq!(s.refused.get("bad_tag"), Some(&3));
        assert_eq!(s.refused.get("not_clarion"), Some(&1));
        assert_eq!(s.refused_from.get(&bad.local_addr().unwrap()), Some(&6));
        assert_eq!(s.refused_from.len(), 1);
        assert_eq!(s.refused_lost(), 0, "foreign datagrams are not loss");
        assert_eq!(s.streams.len(), 1);
        assert_eq!(s.streams[0].0.exporter.as_str(), "a");
        assert_eq!(s.kernel_drops, Some(0));
        assert!(s.losses().is_empty(), "{:?}", s.losses());
    }

    #[test]
    fn losses_are_named() {
        let mut s = CollectStats::default();
        assert!(s.losses().is_empty());
        s.kernel_drops = Some(3);
        s.refused.insert("version", 2);
        s.refused.insert("bad_tag", 5);
        let l = s.losses();
        assert_eq!(l.len(), 2, "{l:?}");
        assert!(l[0].contains("3 datagrams dropped by the kernel"));
        assert!(l[1].contains("2 datagrams that could not be read"));
    }
}
