//! Degraded mode's state below "count only": flows the monitor does not
//! look up at all (`--adapt` under an overload that shedding cannot absorb).
//!
//! # Why
//! Shedding (`shed.rs`) walks a flow down its chain to the default state,
//! which measures nothing but still finds the flow's entry, inserts a new
//! flow and writes its packet count: MONA's T_r and T_i, about half a
//! packet's cost, which no monitoring state sheds. At twice the
//! sustainable rate the lightest state does not fit (docs/performance.md,
//! "Overload and adaptation"), and a 2× surge cannot be absorbed.
//!
//! # Design
//! A share `b` of flows, chosen by a range of their key's hash (salted,
//! independent of where the table puts them and of the shedding's
//! choices), is *bypassed*: its packets are counted in the epoch's totals
//! and nothing else. The test needs only the hash the batch loop computes
//! anyway, before any flow-table slot is touched: a bypassed packet costs
//! a mix and a compare after read and parse, and the batch loop does not
//! prefetch its slot.
//!
//! The share in force changes only at epoch boundaries
//! ([`Monitor::adapt_to`] decides the next epoch's), so a flow is
//! bypassed for a whole epoch or not at all, as shedding takes a flow's
//! state for the epoch at its first packet. A flow bypassed over its idle
//! timeout comes back as a new life of its flow (its connection state
//! forgotten), as after any silence.
//!
//! # Accuracy
//! The bypassed flows are a uniform sample of flows (a hash range of the
//! key), whatever triggers they match: of a trigger's flow-epochs in an
//! epoch with share `b`, the `n` the sweep saw (measured, or shed to a
//! lighter state) are a `1 − b` sample, so about `n · b / (1 − b)` were
//! bypassed. The sweep adds that to the trigger's unmeasured flow-epochs
//! of the window, so it enters `flows_unmeasured` and MONA's recall
//! estimate as shed flows do. Nothing about the bypassed flows is known
//! beyond their number: the estimate holds on average, not flow by flow.
//!
//! # Exactness
//! With a constant share the monitor sees exactly the packets of the
//! flows not bypassed: its reports equal the reference evaluator's over
//! those packets (`tests.rs`, `a_constant_bypass_equals_the_reference_on_the_flows_kept`).
//!
//! # Cost
//! Normal mode and a share of 0: one predictable branch a packet. A share
//! above 0: a multiply-xorshift of the key's hash and a compare a packet;
//! a bypassed packet adds a counter.

use super::Monitor;

/// Largest share of flows ever bypassed: a few flows stay measured, so
/// the recall estimate keeps a sample to scale (at a share of 1 it would
/// know nothing).
pub const MAX_BYPASS: f64 = 0.98;

/// The share of flows bypassed in the running epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Bypass {
    /// Flows whose [`bypass_bits`] fall below it are bypassed (0: none).
    threshold: u64,
    /// The same as a share of flows, in `[0, MAX_BYPASS]`.
    pub(super) share: f64,
}

/// Bits of [`bypass_bits`].
const BITS: u32 = 53;

impl Bypass {
    pub(super) fn new(share: f64) -> Self {
        let share = if share.is_nan() {
            0.0
        } else {
            share.clamp(0.0, MAX_BYPASS)
        };
        Bypass {
            threshold: (share * (1u64 << BITS) as f64) as u64,
            share,
        }
    }

    /// Whether some flows are bypassed.
    #[inline(always)]
    pub(super) fn on(&self) -> bool {
        self.threshold != 0
    }

    /// Whether the flow whose key hashes to `h` is bypassed.
    #[inline(always)]
    pub(super) fn takes(&self, h: u64) -> bool {
        bypass_bits(h) < self.threshold
    }

    /// Bypassed flow-epochs per flow-epoch seen, `b / (1 − b)`.
    pub(super) fn ratio(&self) -> f64 {
        self.share / (1.0 - self.share)
    }
}

/// A uniform 53-bit number from a flow's key hash, independent of the
/// table's slot (the low bits) and of the shedding's choices (their
/// salts, `shed.rs`): another multiply-xorshift of the same bits.
#[inline(always)]
fn bypass_bits(h: u64) -> u64 {
    let h = h ^ 0x2545_f491_4f6c_dd1d;
    let mixed = (h ^ (h >> 31)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (mixed ^ (mixed >> 29)) >> (64 - BITS)
}

impl Monitor {
    /// Degraded mode: the share of flows bypassed in the running epoch (0
    /// in normal mode).
    pub fn bypass(&self) -> f64 {
        self.bypass.share
    }

    /// Whether the flow of `key` is bypassed in the running epoch.
    pub fn bypasses(&self, key: &clarion_wire::FlowKey) -> bool {
        self.bypass.on() && self.bypass.takes(crate::flow_table::hash_key(key))
    }

    /// Degraded mode: imposes the share of flows bypassed from the next
    /// epoch on (from the first packet if none came yet), clamped to
    /// `[0, MAX_BYPASS]`. For experiments and tests; [`Monitor::adapt_to`]
    /// decides it otherwise. Ignored in normal mode.
    pub fn set_bypass(&mut self, share: f64) {
        let Some(a) = self.adapt.as_mut() else { return };
        a.bypass = Bypass::new(share).share;
        if !self.started {
            self.bypass = Bypass::new(a.bypass);
        }
    }

    /// At an epoch's start: the share decided for it takes force.
    pub(super) fn enter_bypass(&mut self) {
        if let Some(a) = self.adapt.as_ref() {
            self.bypass = Bypass::new(a.bypass);
        }
    }

    /// A bypassed packet (already counted in the epoch's totals).
    #[cold]
    pub(super) fn note_bypassed(&mut self) {
        self.counters.packets_bypassed += 1;
        if let Some(a) = self.adapt.as_mut() {
            a.last_bypassed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_takes_that_share_of_hashes() {
        for share in [0.0, 0.1, 0.5, 0.9, MAX_BYPASS] {
            let b = Bypass::new(share);
            let n = 200_000u64;
            // Hashes as the flow table's: spread over all 64 bits.
            let taken = (0..n)
                .filter(|&i| b.takes(crate::flow_table::hash_key(&key(i))))
                .count() as f64;
            assert!(
                (taken / n as f64 - share).abs() < 0.005,
                "{share}: {}",
                taken / n as f64
            );
        }
        assert!(!Bypass::new(0.0).on());
        assert_eq!(Bypass::new(2.0).share, MAX_BYPASS);
        assert_eq!(Bypass::new(f64::NAN).share, 0.0);
        assert!((Bypass::new(0.5).ratio() - 1.0).abs() < 1e-12);
    }

    fn key(i: u64) -> clarion_wire::FlowKey {
        let mut src_ip = [0u8; 16];
        src_ip[12..].copy_from_slice(&[10, 0, (i >> 8) as u8, i as u8]);
        clarion_wire::FlowKey {
            src_ip,
            src_port: (i >> 16) as u16,
            dst_port: 80,
            proto: 6,
            flags: clarion_wire::FlowKey::HAS_PORTS,
            ..Default::default()
        }
    }
}
