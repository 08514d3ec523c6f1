//! AF_XDP sockets (clarion-xdp) as worker sources.
//!
//! AF_XDP hands frames over one by one as they arrive, so nothing is hidden
//! from the worker, but it carries no timestamp: a frame is stamped with
//! the clock when the worker takes it, once per `recv` call (the frames of
//! one call arrived within the time the previous call took).

use std::os::fd::RawFd;
use std::time::Duration;

use clarion_wire::LinkType;
use clarion_xdp::XdpSocket;

use crate::worker::realtime_ns;
use crate::{Frame, LiveError, Source};

pub struct XdpSource {
    socket: XdpSocket,
    ring_size: usize,
    /// Cumulative drops already reported.
    dropped: u64,
    /// The interface of the socket's queue (name, index).
    interface: (String, u32),
}

impl XdpSource {
    pub fn new(socket: XdpSocket, ring_size: u32, interface: &str, index: u32) -> XdpSource {
        XdpSource {
            socket,
            ring_size: ring_size as usize,
            dropped: 0,
            interface: (interface.to_string(), index),
        }
    }
}

impl Source for XdpSource {
    fn link(&self) -> LinkType {
        LinkType::Ethernet
    }

    fn recv(&mut self, max: usize, f: &mut dyn FnMut(Frame<'_>)) -> usize {
        let ts_ns = realtime_ns();
        let mut handle = |data: &[u8]| {
            f(Frame {
                ts_ns,
                data,
                orig_len: data.len() as u32,
            })
        };
        // A failing ring (never seen) reads as empty; its frames then show up as drops.
        self.socket.recv(max, &mut handle).unwrap_or(0)
    }

    fn backlog(&self, limit: usize) -> usize {
        (self.socket.rx_pending() as usize).min(limit)
    }

    fn capacity(&self) -> usize {
        self.ring_size
    }

    fn fd(&self) -> RawFd {
        self.socket.fd()
    }

    fn take_drops(&mut self) -> Result<u64, LiveError> {
        let total = self.socket.stats()?.dropped();
        let new = total.saturating_sub(self.dropped);
        self.dropped = total;
        Ok(new)
    }

    fn hidden_delay(&self) -> Duration {
        Duration::ZERO
    }

    fn interface(&self) -> (&str, u32) {
        (&self.interface.0, self.interface.1)
    }

    /// The XDP program went with the removed interface, and the host
    /// attaches programs only when it starts.
    fn reopen(&mut self) -> Result<u32, LiveError> {
        Err(LiveError::Reopened {
            interface: self.interface.0.clone(),
            why: "AF_XDP cannot follow a re-created interface (its XDP program went with the \
                  old one); restart Clarion, or use --source packet"
                .into(),
        })
    }
}
