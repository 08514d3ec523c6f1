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
//! A flow is bypassed for a whole epoch or not at all, as shedding takes
//! a flow's state for the epoch at its first packet. [`Monitor::adapt_to`]
//! lowers the share from the next epoch; it raises it at once (drops are
//! near), but a flow the raise adds is bypassed only if the epoch has not
//! measured it yet: for the rest of the epoch such a flow's packets are
//! looked up (its entry's last packet time says whether it had one), the
//! others' are not. A flow bypassed over its idle timeout comes back as a
//! new life of its flow (its connection state forgotten), as after any
//! silence.
//!
//! # Accuracy
//! The bypassed flows are a uniform sample of flows (a hash range of the
//! key), whatever triggers they match: of a trigger's flow-epochs in an
//! epoch with share `b`, the `n` the sweep saw (measured, or shed to a
//! lighter state) are a `1 − b` sample, so about `n · b / (1 − b)` were
//! bypassed (in an epoch whose share was raised, `b` counts the raise
//! for the part of the epoch after it). The sweep adds that to the trigger's unmeasured flow-epochs
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
//! a bypassed packet adds a counter; after a raise, until the epoch ends,
//! a packet of a flow the raise added costs a lookup more.

use super::Monitor;

/// Largest share of flows ever bypassed: a few flows stay measured, so
/// the recall estimate keeps a sample to scale (at a share of 1 it would
/// know nothing).
pub const MAX_BYPASS: f64 = 0.98;

/// The share of flows bypassed in the running epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Bypass {
    /// Flows whose [`bypass_bits`] fall below it are bypassed (0: none):
    /// the share in force since the epoch began.
    threshold: u64,
    /// At or above `threshold`: the share raised during the epoch. Flows
    /// between the two are bypassed unless measured in the epoch already.
    raised: u64,
    /// The two as shares of flows, in `[0, MAX_BYPASS]`.
    share: f64,
    raised_share: f64,
    /// Each raise's step times its packet time, summed (`Σ Δᵢ·tᵢ`): with
    /// `raised_share − share = Σ Δᵢ`, what [`Bypass::ratio`] needs of
    /// raises made at several times in the epoch (a relief may come
    /// several times, `Monitor::relieve`).
    raised_at_sum: f64,
}

/// Bits of [`bypass_bits`].
const BITS: u32 = 53;

/// Whether a flow is bypassed (see [`Bypass::test`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Take {
    No,
    Yes,
    /// Only if the flow was not measured in the epoch yet.
    UnlessMeasured,
}

fn clamped(share: f64) -> f64 {
    if share.is_nan() {
        0.0
    } else {
        share.clamp(0.0, MAX_BYPASS)
    }
}

fn bits_of(share: f64) -> u64 {
    (share * (1u64 << BITS) as f64) as u64
}

impl Bypass {
    pub(super) fn new(share: f64) -> Self {
        let share = clamped(share);
        Bypass {
            threshold: bits_of(share),
            raised: bits_of(share),
            share,
            raised_share: share,
            raised_at_sum: 0.0,
        }
    }

    /// Raises the share at `now_ns`, within the running epoch: a flow it
    /// adds is bypassed from its first packet after the raise, unless the
    /// epoch measured it already (a flow is measured for an epoch whole or
    /// not at all). Lowering waits for the next epoch.
    pub(super) fn raise(&mut self, share: f64, now_ns: u64) {
        let share = clamped(share);
        if share > self.raised_share {
            self.raised = bits_of(share);
            self.raised_at_sum += (share - self.raised_share) * now_ns as f64;
            self.raised_share = share;
        }
    }

    /// Whether some flows are bypassed.
    #[inline(always)]
    pub(super) fn on(&self) -> bool {
        self.raised != 0
    }

    /// Whether the flow whose key hashes to `h` is bypassed whatever it
    /// did in the epoch (no need to look it up).
    #[inline(always)]
    pub(super) fn takes(&self, h: u64) -> bool {
        bypass_bits(h) < self.threshold
    }

    /// Whether the flow whose key hashes to `h` is bypassed.
    #[inline(always)]
    pub(super) fn test(&self, h: u64) -> Take {
        let b = bypass_bits(h);
        if b < self.threshold {
            Take::Yes
        } else if b < self.raised {
            Take::UnlessMeasured
        } else {
            Take::No
        }
    }

    /// Bypassed flow-epochs per flow-epoch seen in the epoch
    /// `[start_ns, end_ns)`, `b / (1 − b)`, with `b` the share in force
    /// and each raise's step for the part of the epoch after it (the flows
    /// it added whose first packet came after it: a uniform spread of
    /// first packets over the epoch assumed). Raises are made within the
    /// epoch (`start_ns ≤ tᵢ ≤ end_ns`), so the part after them all is
    /// `Σ Δᵢ·(end − tᵢ) = end·Σ Δᵢ − Σ Δᵢ·tᵢ`.
    pub(super) fn ratio(&self, start_ns: u64, end_ns: u64) -> f64 {
        let mut b = self.share;
        let steps = self.raised_share - self.share;
        if steps > 0.0 && end_ns > start_ns {
            let span = (end_ns - start_ns) as f64;
            let after = (end_ns as f64 * steps - self.raised_at_sum).clamp(0.0, steps * span);
            b += after / span;
        }
        b / (1.0 - b)
    }

    /// The share of flows bypassed at their next first packet.
    pub(super) fn current(&self) -> f64 {
        self.raised_share
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
    /// Degraded mode: the share of flows bypassed at their next first
    /// packet of an epoch (0 in normal mode).
    pub fn bypass(&self) -> f64 {
        self.bypass.current()
    }

    /// Whether the flow of `key` is bypassed from its next packet on
    /// (unless measured in the running epoch already, under a share
    /// raised during it).
    pub fn bypasses(&self, key: &clarion_wire::FlowKey) -> bool {
        self.bypass.on() && self.bypass.test(crate::flow_table::hash_key(key)) != Take::No
    }

    /// Degraded mode: imposes the share of flows bypassed from the next
    /// epoch on (from the first packet if none came yet), clamped to
    /// `[0, MAX_BYPASS]`. For experiments and tests; [`Monitor::adapt_to`]
    /// decides it otherwise. Ignored in normal mode.
    pub fn set_bypass(&mut self, share: f64) {
        let Some(a) = self.adapt.as_mut() else { return };
        a.bypass = clamped(share);
        if !self.started {
            self.bypass = Bypass::new(a.bypass);
        }
    }

    /// Degraded mode, within an epoch: the driver falls behind (its ring
    /// fills) and cannot wait for the epoch's end, where
    /// [`Monitor::adapt_to`] decides from the epoch's load
    /// (`clarion_adapt::Relief` says when). `serving_ns` is what the
    /// packets served lately cost on average, in the driver's measure;
    /// `available_ns` what one may cost from now on. Of the flows not
    /// bypassed, a further share `x = (serving − available) /
    /// (serving − T_bypass)` is bypassed at once (those the epoch has not
    /// measured yet: a flow is measured for an epoch whole or not at all),
    /// and from the next epoch until a decision lowers it. The packets
    /// served lately mix bypassed and measured ones, so `x` is an
    /// underestimate when some were bypassed already: the driver asks
    /// again on the packets served after this. Never lowers the share.
    /// Returns the share now in force at a flow's first packet of an epoch
    /// (`None` in normal mode or for figures that are not numbers).
    pub fn relieve(&mut self, serving_ns: f64, available_ns: f64) -> Option<f64> {
        let a = self.adapt.as_mut()?;
        if !(serving_ns.is_finite() && available_ns.is_finite()) {
            return None;
        }
        let t_bypass = a.config.costs.bypass_ns;
        let current = self.bypass.current();
        if serving_ns > available_ns && serving_ns > t_bypass {
            let x = ((serving_ns - available_ns.max(t_bypass)) / (serving_ns - t_bypass)).clamp(0.0, 1.0);
            let share = clamped(current + (1.0 - current) * x);
            a.bypass = a.bypass.max(share);
            self.bypass.raise(share, self.now);
        }
        Some(self.bypass.current())
    }

    /// At an epoch's start: the share decided for it takes force.
    pub(super) fn enter_bypass(&mut self) {
        if let Some(a) = self.adapt.as_ref() {
            self.bypass = Bypass::new(a.bypass);
        }
    }

    /// Whether the packet of `key` (hash `h`, its entry likely `hint`) is
    /// bypassed: [`Bypass::test`], the flow looked up when the share was
    /// raised during the epoch.
    #[inline(always)]
    pub(super) fn bypassed(&self, key: &clarion_wire::FlowKey, h: u64, hint: u32) -> bool {
        match self.bypass.test(h) {
            Take::No => false,
            Take::Yes => true,
            Take::UnlessMeasured => !self.measured_in_epoch(key, h, hint),
        }
    }

    /// Whether the flow of `key` had a packet measured in the running epoch.
    #[cold]
    fn measured_in_epoch(&self, key: &clarion_wire::FlowKey, h: u64, hint: u32) -> bool {
        let at = if self.flows.holds(hint, key) {
            Some(hint)
        } else {
            self.flows.find(key, h)
        };
        at.and_then(|i| self.flows.entries.get(i as usize))
            .is_some_and(|e| e.stats_epoch == self.epoch_seq as u32)
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
        assert!((Bypass::new(0.5).ratio(0, 10) - 1.0).abs() < 1e-12);
    }

    /// Raises at several times each count for the part of the epoch
    /// after them.
    #[test]
    fn the_ratio_weighs_each_raise_by_the_time_after_it() {
        let mut b = Bypass::new(0.1);
        // Epoch [1,000, 2,000): 0.2 more from 1,500, 0.2 more from 1,750.
        b.raise(0.3, 1_500);
        b.raise(0.2, 1_600); // lower: ignored
        b.raise(0.5, 1_750);
        let share = 0.1 + 0.2 * 0.5 + 0.2 * 0.25;
        assert!((b.ratio(1_000, 2_000) - share / (1.0 - share)).abs() < 1e-12);
        assert_eq!(b.current(), 0.5);
        // One raise at the epoch's start: the raised share throughout.
        let mut c = Bypass::new(0.0);
        c.raise(0.5, 1_000);
        assert!((c.ratio(1_000, 2_000) - 1.0).abs() < 1e-12);
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
