//! What the worker loop needs of a receive queue.

use std::os::fd::RawFd;
use std::time::Duration;

use clarion_wire::LinkType;

use crate::packet_ring::{PacketRing, RingMode};
use crate::{Frame, LiveError};

/// A receive queue the worker polls: an AF_PACKET ring (or an AF_XDP socket).
pub trait Source: Send {
    fn link(&self) -> LinkType;
    /// Hands up to `max` frames to `f` without blocking; returns how many.
    fn recv(&mut self, max: usize, f: &mut dyn FnMut(Frame<'_>)) -> usize;
    /// Queue occupancy in units of `capacity()` (blocks or frames), counted
    /// up to `limit`: the loop only asks whether it is above a mark.
    fn backlog(&self, limit: usize) -> usize;
    fn capacity(&self) -> usize;
    /// Descriptor to wait on for new frames.
    fn fd(&self) -> RawFd;
    /// Packets dropped by the kernel since the previous call.
    fn take_drops(&mut self) -> Result<u64, LiveError>;
    /// The interface captured: its name and index (to watch it).
    fn interface(&self) -> (&str, u32);
    /// Whether the socket reported its interface going down or away since
    /// the previous call. The kernel says so once per event, as a pending
    /// socket error (ENETDOWN) that reading clears.
    fn went_down(&mut self) -> bool {
        take_socket_error(self.fd()) == Some(libc::ENETDOWN)
    }
    /// Opens the capture anew on the interface that now has its name (the
    /// one captured was removed and another created under that name);
    /// returns the new index.
    fn reopen(&mut self) -> Result<u32, LiveError>;
    /// Longest a received packet may stay invisible to `recv` (a TPACKET_V3
    /// block is handed over when full or after its retire timeout; a
    /// TPACKET_V2 frame or an AF_XDP descriptor at once): the
    /// worker's clock lags the wall clock by this much, so that no packet
    /// arrives older than an epoch already swept.
    fn hidden_delay(&self) -> Duration;
}

impl Source for PacketRing {
    fn link(&self) -> LinkType {
        self.interface().link
    }

    fn recv(&mut self, max: usize, f: &mut dyn FnMut(Frame<'_>)) -> usize {
        PacketRing::recv(self, max, f)
    }

    fn backlog(&self, limit: usize) -> usize {
        self.backlog_blocks(limit)
    }

    fn capacity(&self) -> usize {
        self.blocks()
    }

    fn fd(&self) -> RawFd {
        PacketRing::fd(self)
    }

    fn take_drops(&mut self) -> Result<u64, LiveError> {
        Ok(self.stats()?.drops)
    }

    fn interface(&self) -> (&str, u32) {
        let i = PacketRing::interface(self);
        (&i.name, i.index)
    }

    fn reopen(&mut self) -> Result<u32, LiveError> {
        PacketRing::reopen(self)?;
        // Bound while the new interface was still down, the socket holds an
        // ENETDOWN of no news: it is down until seen up.
        take_socket_error(self.fd());
        Ok(PacketRing::interface(self).index)
    }

    fn hidden_delay(&self) -> Duration {
        if self.mode() == RingMode::Frames {
            // Each frame is handed over as soon as it is written.
            return Duration::ZERO;
        }
        // The kernel's retire timer runs in jiffies and retires a block only
        // when it fires twice on the same block: up to two timeouts, each
        // rounded up to whole jiffies, plus the jiffy the first one started in.
        let jiffy = jiffy();
        let tov = Duration::from_millis(u64::from(self.retire_ms()));
        let ticks = tov.as_nanos().div_ceil(jiffy.as_nanos().max(1)) as u32;
        jiffy * (2 * ticks + 1)
    }
}

/// Reads and clears a socket's pending error (SO_ERROR).
pub(crate) fn take_socket_error(fd: RawFd) -> Option<i32> {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `err` and `len` are valid for writes of the given size.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0 && err != 0).then_some(err)
}

/// The kernel's timer tick: the resolution of its coarse clock (1/HZ).
pub fn jiffy() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is valid for writes; the clock id exists on every Linux since 2.6.32.
    let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    let d = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
    if rc != 0 || d.is_zero() || d > Duration::from_millis(10) {
        // HZ is at least 100.
        Duration::from_millis(10)
    } else {
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jiffy_is_a_plausible_timer_tick() {
        let j = jiffy();
        assert!(
            j >= Duration::from_micros(100) && j <= Duration::from_millis(10),
            "{j:?}"
        );
    }
}
