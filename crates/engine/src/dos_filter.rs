//! The DoS filter table: a flow is matched and inserted only once it has
//! sent more than a threshold of bytes in the current epoch (Trumpet,
//! SIGCOMM'16 §5.6).
//!
//! # What?
//!
//! Matching a new flow against the triggers (one hash probe per filter
//! pattern), inserting it, listing it in every matched trigger and sweeping
//! it cost far more than updating a flow already known. An attacker who
//! sends one minimal packet per flow (a SYN flood) or flows just above any
//! fixed size makes the monitor pay that price on every packet until sweeps
//! no longer finish within an epoch. The filter sits on the flow table's
//! *miss* path only: a packet of an unknown flow adds its bytes to a small
//! counter, and the flow is matched and inserted only when the counter
//! exceeds the threshold. Packets of flows already in the table never reach
//! it.
//!
//! # Design
//!
//! A power-of-two array of 32-bit slots indexed by the high 32 bits of the
//! flow hash the monitor already computed (the flow table indexes by the low
//! bits, so the two do not collide together). No key is stored: a slot is
//! shared by every flow that hashes to it.
//!
//! - **Collisions admit earlier, never later.** A slot's count is the sum of
//!   the bytes of all flows sharing it, which is at least the bytes of any
//!   one of them; so a flow is admitted no later than it would be alone (a
//!   false positive: a small flow admitted because a neighbour was busy),
//!   and never later. Saturation keeps this: a saturated counter
//!   ([`MAX_COUNT`]) exceeds every threshold allowed ([`MAX_THRESHOLD`]).
//! - **Reset by epoch, at no cost per epoch.** Each slot packs a 16-bit
//!   epoch tag above a 16-bit byte count. *Invariant:* a slot's count holds
//!   bytes of the current epoch only when its tag equals the epoch's
//!   sequence number modulo 2^16; any other tag means the count is from an
//!   older epoch and reads as zero, and the first write of the epoch
//!   replaces it. Nothing is cleared in bulk. A slot left untouched for an
//!   exact multiple of 65,536 epochs reads its old count as current: an
//!   over-count, so again only an earlier admission.
//!
//! With threshold 0 the filter is off, allocates nothing and the monitor
//! behaves exactly as without it.

use crate::prefetch::prefetch;

/// Largest byte count a slot holds; it stays there (saturates).
pub(crate) const MAX_COUNT: u32 = u16::MAX as u32;

/// Largest threshold: below [`MAX_COUNT`], so a saturated slot always admits.
pub const MAX_THRESHOLD: u32 = MAX_COUNT - 1;

/// The threshold an automatic raise starts from when the filter was off:
/// one bare TCP/IPv4 segment (40 bytes of IP), so a lone SYN is filtered.
pub const FLOOR_THRESHOLD: u32 = 40;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct DosFilter {
    /// `(epoch tag << 16) | bytes`; empty while the filter is off.
    slots: Vec<u32>,
    /// Slots to allocate when the filter is first turned on (a power of two).
    size: usize,
    /// 0 = off.
    threshold: u32,
}

impl DosFilter {
    /// A filter of `slots` counters (rounded up to a power of two) with the given threshold.
    pub(crate) fn new(slots: usize, threshold: u32) -> Self {
        let mut f = DosFilter {
            slots: Vec::new(),
            size: slots.max(1).next_power_of_two(),
            threshold: 0,
        };
        f.set_threshold(threshold);
        f
    }

    pub(crate) fn threshold(&self) -> u32 {
        self.threshold
    }

    /// Sets the threshold (capped at [`MAX_THRESHOLD`]); the first non-zero one allocates the table.
    pub(crate) fn set_threshold(&mut self, threshold: u32) {
        self.threshold = threshold.min(MAX_THRESHOLD);
        if self.threshold > 0 && self.slots.is_empty() {
            self.slots = vec![0; self.size];
        }
    }

    /// Doubles the threshold (from [`FLOOR_THRESHOLD`] when off), capped;
    /// returns whether it changed.
    pub(crate) fn raise(&mut self) -> bool {
        let old = self.threshold;
        let new = if old == 0 {
            FLOOR_THRESHOLD
        } else {
            old.saturating_mul(2)
        };
        self.set_threshold(new);
        self.threshold != old
    }

    /// Starts loading the slot of the flow with hash `hash` (while the filter is on).
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        if self.threshold != 0 {
            let i = (hash >> 32) as usize & (self.slots.len() - 1);
            prefetch(self.slots.as_ptr().wrapping_add(i));
        }
    }

    /// True when a packet of an unknown flow must be kept out of the flow
    /// table: the filter is on and the flow's slot, with this packet's
    /// `size` bytes added, is still at or below the threshold.
    #[inline]
    pub(crate) fn blocks(&mut self, hash: u64, size: u32, epoch_seq: u64) -> bool {
        self.threshold != 0 && !self.admit(hash, size, epoch_seq)
    }

    /// Adds `size` bytes to the slot of the flow with hash `hash` in epoch
    /// `epoch_seq`; true when the slot's count now exceeds the threshold.
    /// Always true while the filter is off.
    #[inline]
    pub(crate) fn admit(&mut self, hash: u64, size: u32, epoch_seq: u64) -> bool {
        if self.threshold == 0 {
            return true;
        }
        let i = (hash >> 32) as usize & (self.slots.len() - 1);
        let tag = (epoch_seq as u32 & 0xffff) << 16;
        let s = self.slots[i];
        // Another epoch's count reads as zero (lazy reset; see the module doc).
        let before = if s & 0xffff_0000 == tag { s & MAX_COUNT } else { 0 };
        let count = before.saturating_add(size).min(MAX_COUNT);
        self.slots[i] = tag | count;
        count > self.threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hashes whose filter slots (high 32 bits) are `slot`.
    fn h(slot: u64, low: u64) -> u64 {
        (slot << 32) | low
    }

    #[test]
    fn admits_once_more_than_the_threshold_has_been_sent() {
        let mut f = DosFilter::new(1024, 100);
        assert!(!f.admit(h(7, 0), 40, 0)); // 40
        assert!(!f.admit(h(7, 0), 60, 0)); // 100: not more than 100
        assert!(f.admit(h(7, 0), 1, 0)); // 101
        assert!(f.admit(h(7, 0), 1, 0));
    }

    #[test]
    fn off_admits_everything_and_allocates_nothing() {
        let mut f = DosFilter::new(1 << 20, 0);
        assert!(f.slots.is_empty());
        assert!(f.admit(h(1, 0), 1, 0));
        assert!(!f.blocks(h(1, 0), 1, 0));
    }

    #[test]
    fn a_new_epoch_starts_every_slot_from_zero() {
        let mut f = DosFilter::new(16, 100);
        assert!(!f.admit(h(3, 0), 90, 5));
        // Epoch 6: the 90 bytes of epoch 5 are forgotten without any clearing.
        assert!(!f.admit(h(3, 0), 90, 6));
        assert!(f.admit(h(3, 0), 20, 6));
        // Tags alias every 65,536 epochs: an over-count, so only earlier admission.
        assert!(f.admit(h(3, 0), 1, 6 + 65_536));
    }

    #[test]
    fn saturated_counters_always_admit() {
        let mut f = DosFilter::new(16, u32::MAX);
        assert_eq!(f.threshold(), MAX_THRESHOLD);
        assert!(!f.admit(h(0, 0), 60_000, 0));
        assert!(f.admit(h(0, 0), 60_000, 0)); // saturates at MAX_COUNT > MAX_THRESHOLD
        assert!(f.admit(h(0, 0), u32::MAX, 0));
    }

    #[test]
    fn raise_doubles_from_the_floor_up_to_the_cap() {
        let mut f = DosFilter::new(16, 0);
        assert!(f.raise());
        assert_eq!(f.threshold(), FLOOR_THRESHOLD);
        assert!(f.raise());
        assert_eq!(f.threshold(), 2 * FLOOR_THRESHOLD);
        while f.raise() {}
        assert_eq!(f.threshold(), MAX_THRESHOLD);
        assert!(!f.slots.is_empty());
    }

    /// The filter against a trivial model: exact per-flow byte counts. With
    /// a tiny table every flow shares its slot with others, yet no flow is
    /// admitted later than its own bytes say (collisions only admit
    /// earlier), and the slot sums explain every early admission.
    #[test]
    fn collisions_admit_earlier_never_later() {
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let flow_hash: Vec<u64> = (0..64).map(|_| next()).collect();
        let threshold = 500;
        let mut f = DosFilter::new(8, threshold);
        let mut early = 0;
        for epoch in 0..3u64 {
            let mut own = vec![0u32; flow_hash.len()];
            let mut slot_sum = [0u32; 8];
            for _ in 0..2_000 {
                let flow = (next() % flow_hash.len() as u64) as usize;
                let size = 28 + (next() % 100) as u32;
                own[flow] += size;
                let slot = (flow_hash[flow] >> 32) as usize & 7;
                slot_sum[slot] = (slot_sum[slot] + size).min(MAX_COUNT);
                let admitted = f.admit(flow_hash[flow], size, epoch);
                if own[flow] > threshold {
                    assert!(admitted, "flow {flow} sent {} bytes but was refused", own[flow]);
                }
                assert_eq!(admitted, slot_sum[slot] > threshold);
                if admitted && own[flow] <= threshold {
                    early += 1;
                }
            }
        }
        assert!(early > 0, "the test should exercise false positives");
    }
}
