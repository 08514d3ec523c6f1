//! The ring of recent packets: what `then capture ... before` reaches back into.
//!
//! Frames are kept, oldest first, while both bounds hold: their bytes
//! within `max_bytes`, and their times within `keep_ns` of the last
//! packet the monitor has measured ([`FrameRing::processed`]; not the
//! newest frame pushed, which is read ahead of the monitor). Either bound evicts from the front. [`FrameRing::covers_from`]
//! says how far back the ring still reaches, so a capture that asks for
//! more than it holds says so instead of pretending.
//!
//! Cost: one allocation and copy of the frame a packet (the ring is only
//! fed when an installed event captures: a ring kept for no time is not,
//! and covers only what comes after the frames it skipped), amortized
//! O(1) eviction.

use std::collections::VecDeque;

use clarion_wire::{FlowKey, LinkType};

/// One kept frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredFrame {
    pub ts_ns: u64,
    pub link: LinkType,
    pub orig_len: u32,
    pub key: FlowKey,
    pub data: Box<[u8]>,
}

/// Recent frames, bounded by bytes and by time (see the module doc).
#[derive(Debug)]
pub struct FrameRing {
    frames: VecDeque<StoredFrame>,
    bytes: usize,
    max_bytes: usize,
    keep_ns: u64,
    /// The time of the newest frame evicted: the ring covers only what
    /// came after it.
    evicted_until_ns: Option<u64>,
}

impl FrameRing {
    pub fn new(max_bytes: usize, keep_ns: u64) -> FrameRing {
        FrameRing {
            frames: VecDeque::new(),
            bytes: 0,
            max_bytes,
            keep_ns,
            evicted_until_ns: None,
        }
    }

    /// Adds a frame; the oldest go while the bytes are over the bound.
    pub fn push(&mut self, frame: StoredFrame) {
        self.bytes += frame.data.len();
        self.frames.push_back(frame);
        while self.bytes > self.max_bytes {
            self.evict();
        }
    }

    /// The packets up to `processed_ns` have been measured (their windows
    /// reported, up to the one still open): frames older than `keep_ns`
    /// before it go. Frames are read ahead of the monitor (a batch), so
    /// the newest frame pushed cannot be the clock: after a gap it would
    /// push out the packets of the windows it has yet to close.
    pub fn processed(&mut self, processed_ns: u64) {
        let oldest_kept = processed_ns.saturating_sub(self.keep_ns);
        while self.frames.front().is_some_and(|f| f.ts_ns < oldest_kept) {
            self.evict();
        }
    }

    /// Keeps frames at least `keep_ns` before what was processed (an event
    /// that captures further back was installed).
    pub fn keep_at_least(&mut self, keep_ns: u64) {
        self.keep_ns = self.keep_ns.max(keep_ns);
    }

    /// Whether frames are kept at all: a ring kept for no time (no event
    /// captures yet) is not fed, and costs no copy.
    pub fn keeps(&self) -> bool {
        self.keep_ns > 0
    }

    /// A frame at `ts_ns` not kept (see [`FrameRing::keeps`]): the ring
    /// covers only what comes after it, as after an eviction.
    pub fn skip(&mut self, ts_ns: u64) {
        self.evicted_until_ns = Some(self.evicted_until_ns.map_or(ts_ns, |e| e.max(ts_ns)));
    }

    fn evict(&mut self) {
        if let Some(f) = self.frames.pop_front() {
            self.bytes -= f.data.len();
            self.skip(f.ts_ns);
        }
    }

    /// The earliest time from which the ring holds every frame it was given:
    /// just after the newest evicted one (0 when nothing was evicted).
    pub fn covers_from(&self) -> u64 {
        self.evicted_until_ns.map_or(0, |t| t.saturating_add(1))
    }

    pub fn iter(&self) -> impl Iterator<Item = &StoredFrame> {
        self.frames.iter()
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ts_ns: u64, len: usize) -> StoredFrame {
        StoredFrame {
            ts_ns,
            link: LinkType::Ethernet,
            orig_len: len as u32,
            key: FlowKey::default(),
            data: vec![0u8; len].into(),
        }
    }

    #[test]
    fn keeps_what_both_bounds_allow_and_says_from_when() {
        let mut r = FrameRing::new(1000, 10);
        for t in 0..20u64 {
            r.push(frame(t, 100));
        }
        // 10 frames of 100 bytes fit the bytes.
        assert_eq!(
            r.iter().map(|f| f.ts_ns).collect::<Vec<_>>(),
            (10..20).collect::<Vec<_>>()
        );
        assert_eq!(r.covers_from(), 10);
        assert_eq!(r.bytes(), 1000);
        let mut r = FrameRing::new(10_000, 5);
        for t in 0..20u64 {
            r.push(frame(t, 100));
        }
        assert_eq!(r.len(), 20, "time evicts only what was processed");
        r.processed(12);
        assert_eq!(
            r.iter().map(|f| f.ts_ns).collect::<Vec<_>>(),
            (7..20).collect::<Vec<_>>()
        );
        assert_eq!(r.covers_from(), 7);
        // A frame after a gap pushes nothing out by itself.
        r.push(frame(1000, 100));
        assert_eq!(r.iter().next().map(|f| f.ts_ns), Some(7));
        r.processed(1000);
        assert_eq!(r.iter().map(|f| f.ts_ns).collect::<Vec<_>>(), [1000]);
        let r = FrameRing::new(10, 5);
        assert_eq!(r.covers_from(), 0);
    }

    /// A live host with a capture directory but no capturing event yet:
    /// its rings skip frames until an event that captures is installed,
    /// and then cover only from there.
    #[test]
    fn a_ring_kept_for_no_time_skips_until_told_to_keep() {
        let mut r = FrameRing::new(10_000, 0);
        assert!(!r.keeps());
        for t in 0..5u64 {
            r.skip(t);
        }
        assert_eq!((r.len(), r.covers_from()), (0, 5), "covers nothing skipped");
        r.keep_at_least(3);
        r.keep_at_least(2);
        assert!(r.keeps());
        for t in 5..10u64 {
            r.push(frame(t, 100));
        }
        r.processed(9);
        assert_eq!(
            r.iter().map(|f| f.ts_ns).collect::<Vec<_>>(),
            [6, 7, 8, 9],
            "kept 3 before what was processed, the longest asked"
        );
        assert_eq!(r.covers_from(), 6);
    }
}
