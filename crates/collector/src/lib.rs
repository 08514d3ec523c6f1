//! The receiving end of header export: `clarion collect`.
//!
//! ```text
//!  UDP socket ──► Decoder (per exporter: sequence, gaps, late, duplicates) ──► HeaderOut
//!                                                                      ├─ JSON lines
//!                                                                      └─ pcapng (headers as frames)
//! ```
//!
//! - [`Collector`] owns the socket and the decoder. A datagram that does
//!   not decode (damaged, not ours, a lying peer) is counted and its first
//!   error kept; it never stops the collector nor spoils the next one.
//!   A duplicate datagram's records are not written twice.
//! - [`HeaderOut`] is where records go: [`JsonLines`] or [`PcapngHeaders`]
//!   (each record rebuilt as the frame of its headers, with the packet's
//!   length on the wire, readable by tshark).
//! - [`Collector::run`] receives until a stop condition: a record count,
//!   a duration, or a flag (a signal).

mod error;
mod out;
mod socket;

pub use error::CollectError;
pub use out::{HeaderOut, JsonLines, PcapngHeaders};

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clarion_headers::{Arrival, Decoder, ExporterStats, HeaderRecord};

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
    /// Datagrams that did not decode, and the first one's error.
    pub bad_datagrams: u64,
    pub first_error: Option<String>,
    /// Per exporter (observation id): sequence accounting.
    pub exporters: Vec<(u32, ExporterStats)>,
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
    /// bytes (see [`socket::bind`] for how much the kernel grants).
    pub fn bind(addr: SocketAddr, recv_buffer: usize) -> Result<Collector, CollectError> {
        Ok(Collector {
            socket: socket::bind(addr, recv_buffer)?,
            decoder: Decoder::new(),
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

    /// Receives and writes until `until` or `stop` says so.
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
        loop {
            if stop.load(Ordering::Relaxed)
                || until.records.is_some_and(|n| self.stats.records >= n)
                || until.duration.is_some_and(|d| started.elapsed() >= d)
            {
                break;
            }
            match self.socket.recv(&mut self.buf) {
                Ok(n) => self.datagram(n, out, until.records)?,
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
        out.flush().map_err(CollectError::Write)
    }

    fn datagram(
        &mut self,
        n: usize,
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
                self.stats.bad_datagrams += 1;
                if self.stats.first_error.is_none() {
                    self.stats.first_error = Some(e.to_string());
                }
            }
        }
        Ok(())
    }

    pub fn stats(&self) -> CollectStats {
        let mut s = self.stats.clone();
        s.exporters = self.decoder.exporters().collect();
        s.exporters.sort_by_key(|(id, _)| *id);
        s
    }
}
