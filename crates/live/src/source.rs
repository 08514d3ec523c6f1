//! What the worker loop needs of a receive queue.

use std::os::fd::RawFd;
use std::time::Duration;

use clarion_wire::LinkType;

use crate::packet_ring::PacketRing;
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
    /// Longest a received packet may stay invisible to `recv` (a TPACKET_V3
    /// block is handed over when full or after its retire timeout): the
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

    fn hidden_delay(&self) -> Duration {
        // The kernel's retire timer runs in jiffies and retires a block only
        // when it fires twice on the same block: up to two timeouts, each
        // rounded up to whole jiffies, plus the jiffy the first one started in.
        let jiffy = jiffy();
        let tov = Duration::from_millis(u64::from(self.retire_ms()));
        let ticks = tov.as_nanos().div_ceil(jiffy.as_nanos().max(1)) as u32;
        jiffy * (2 * ticks + 1)
    }
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
