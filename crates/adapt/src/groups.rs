//! The recall of one window of an event whose groups were sampled: by
//! shedding and bypassing (whole flows, by a hash of the key) and by drops
//! before the monitor (single packets: a ring or the kernel).
//!
//! # What?
//!
//! MONA's estimator ([`crate::recall`]) counts each unmeasured flow as a
//! possible event of its own. That is right for events per flow under
//! shedding, and wrong twice over otherwise: a group of many flows loses
//! only part of its sum when some of its flows are shed, and a dropped
//! packet is not a flow at all. This module estimates, from the groups the
//! monitor did see in a window, how many groups would have fired had it
//! seen everything.
//!
//! # Design (the derivation is in docs/adapt.md, "Drops and unseen groups")
//!
//! The window's two samplings, as the monitor knows them:
//!
//! - `p = measured / (measured + unmeasured)`: the share of the event's
//!   flow-epochs it measured. Flows are shed and bypassed by a hash of the
//!   key, a uniform sample of every group's flows.
//! - `s = seen / (seen + dropped)`: the share of the window's packets that
//!   reached the monitor. Modelled as a uniform thinning of packets (a
//!   ring that overflows drops whatever arrives while it is full).
//!
//! A group's sums and counts shrink to `p·s` of what they would be (`s`
//! alone for one-flow groups, whose shed flows MONA's estimator counts),
//! its averages, minima and maxima keep their expectation. So:
//!
//! 1. *Groups seen but not firing*: those that fire once every sum and
//!    count is scaled by `1 / (p·s)` (the caller tests it: it holds the
//!    predicate).
//! 2. *Groups not seen at all* (none of their flows measured, or every
//!    packet of them dropped): Horvitz–Thompson. Each group `g` that fires
//!    (as seen or scaled) was seen with a probability `π_g`; it stands for
//!    `1 / π_g` such groups. With `k_g` packets seen of the group and
//!    `k̄ = K / measured` packets per measured flow-epoch of the window:
//!    - one flow per group: `π_g = p·(1 − (1 − s)^(k_g / s))`, the chance
//!      that the flow was measured and not every one of its `k_g / s`
//!      packets dropped (without drops, `recall = p`: MONA's estimator
//!      with this window's reports per measured flow);
//!    - many: each flow is seen with `q = p·(1 − (1 − s)^(k̄ / s))`; the
//!      group had about `f_g / q` flows, `f_g = max(1, k_g / k̄)` of them
//!      measured, so `π_g = 1 − (1 − q)^(f_g / q)`.
//! 3. `recall = found / max(found, Σ_g 1 / π_g)`.
//!
//! # Invariants
//!
//! The result is in `[0, 1]`; `None` when no group fires even scaled up
//! (nothing to extrapolate from: the caller keeps MONA's estimate, which
//! draws on earlier windows).
//!
//! # Cost
//!
//! One `powf` per firing group, per window. No allocation.

/// One group of the window as the monitor saw it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeenGroup {
    /// The predicate holds on its values as seen.
    pub fires: bool,
    /// It holds with every sum and count scaled by [`WindowSample::scale`].
    pub fires_scaled: bool,
    /// Packets of the group the monitor measured.
    pub packets: u64,
}

/// What the monitor knows of a window's sampling (module doc).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowSample {
    /// Flow-epochs of the event measured, and not measured (shed, bypassed).
    pub measured: u64,
    pub unmeasured: u64,
    /// The window's packets that reached the monitor, and those dropped before it.
    pub seen_packets: u64,
    pub dropped_packets: u64,
    /// Every group is one flow.
    pub one_flow: bool,
}

impl WindowSample {
    /// `p`: the share of flow-epochs measured (1 with none).
    pub fn measured_share(&self) -> f64 {
        share(self.measured, self.unmeasured)
    }

    /// `s`: the share of packets seen (1 with none).
    pub fn seen_share(&self) -> f64 {
        share(self.seen_packets, self.dropped_packets)
    }

    /// Whether anything of the window was sampled away at all (else its
    /// groups are exact and the recall is 1).
    pub fn sampled(&self) -> bool {
        self.dropped_packets > 0 || self.unmeasured > 0
    }

    /// What a seen group's sums and counts are multiplied by to stand for
    /// the whole group: `1 / s`, and `1 / p` more for groups of many flows
    /// (a one-flow group is measured whole or not at all).
    pub fn scale(&self) -> f64 {
        let p = if self.one_flow { 1.0 } else { self.measured_share() };
        let ps = p * self.seen_share();
        if ps > 0.0 {
            1.0 / ps
        } else {
            1.0
        }
    }

    /// The window's recall (module doc) from `found` reports and the
    /// groups seen, each of which stands for `every` groups (1: all of
    /// them are given; more: a sample, every `every`th); `total_packets`
    /// is the sum of all groups' `packets`. `None` when no group fires,
    /// even scaled up: nothing to extrapolate from.
    pub fn recall(
        &self,
        found: u64,
        total_packets: u64,
        groups: impl IntoIterator<Item = SeenGroup>,
        every: u64,
    ) -> Option<f64> {
        let s = self.seen_share();
        let lost = 1.0 - s;
        let p = self.measured_share();
        let per_flow = if self.measured == 0 {
            0.0
        } else {
            total_packets as f64 / self.measured as f64
        };
        // A flow's chance of being seen at all: measured, and not every one
        // of its packets dropped.
        let q = p * (1.0 - lost.powf(per_flow / s));
        let (mut expected, mut firing) = (0u64, 0u64);
        for g in groups.into_iter().filter(|g| g.fires || g.fires_scaled) {
            firing += 1;
            let k = g.packets as f64;
            // One flow: its chance of being measured, `p`, is the same for
            // every group and multiplies the recall below.
            let pi = if self.one_flow {
                1.0 - lost.powf(k / s)
            } else if per_flow > 0.0 && q > 0.0 {
                let measured_flows = (k / per_flow).max(1.0);
                1.0 - (1.0 - q).powf(measured_flows / q)
            } else {
                1.0
            };
            // A group was seen, so its probability is not 0; a tiny one
            // (a group of one packet seen of an almost total drop) would
            // weigh without bound. In fixed point: integer sums do not
            // depend on the groups' order, which differs between one
            // monitor and merged workers.
            expected += (FIXED / pi.max(MIN_INCLUSION)).round() as u64 * every.max(1);
        }
        if firing == 0 {
            return None;
        }
        let expected = expected as f64 / FIXED;
        let found = found as f64;
        let recall = if expected <= found { 1.0 } else { found / expected };
        Some(if self.one_flow { p * recall } else { recall })
    }
}

/// The Horvitz–Thompson weight of a flow seen with `packets` packets when
/// each packet reached the monitor with probability `seen_share` (`s`):
/// it had about `packets / s`, all of which were dropped with probability
/// `(1 − s)^(packets / s)`, so it stands for `1 / (1 − that)` flows like
/// it (the weight [`WindowSample::recall`] gives a one-flow group). What
/// a trigger tested flow by flow sums over its flows that fire, as seen
/// or with their sums and counts scaled by `1 / s`, for `recall = p ·
/// found / Σ weights` (docs/adapt.md).
pub fn seen_flow_weight(packets: u64, seen_share: f64) -> f64 {
    let s = seen_share.clamp(0.0, 1.0);
    if s >= 1.0 {
        return 1.0;
    }
    if s <= 0.0 {
        return 1.0 / MIN_INCLUSION;
    }
    let pi = 1.0 - (1.0 - s).powf(packets as f64 / s);
    1.0 / pi.max(MIN_INCLUSION)
}

/// `kept / (kept + lost)`, 1 when both are 0.
fn share(kept: u64, lost: u64) -> f64 {
    match kept + lost {
        0 => 1.0,
        all => kept as f64 / all as f64,
    }
}

/// The fixed point of the sum of weights: 2^32 (a weight is at most 20).
const FIXED: f64 = 4_294_967_296.0;

/// The least inclusion probability a seen group is given: it then stands
/// for at most 20 groups.
const MIN_INCLUSION: f64 = 0.05;

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(measured: u64, unmeasured: u64, seen: u64, dropped: u64, one_flow: bool) -> WindowSample {
        WindowSample {
            measured,
            unmeasured,
            seen_packets: seen,
            dropped_packets: dropped,
            one_flow,
        }
    }

    fn g(fires: bool, fires_scaled: bool, packets: u64) -> SeenGroup {
        SeenGroup {
            fires,
            fires_scaled,
            packets,
        }
    }

    #[test]
    fn nothing_sampled_is_exact() {
        let w = sample(10, 0, 100, 0, false);
        assert!(!w.sampled());
        assert_eq!(w.scale(), 1.0);
        assert_eq!(
            w.recall(2, 100, [g(true, true, 50), g(true, true, 50)], 1),
            Some(1.0)
        );
    }

    #[test]
    fn groups_that_fire_scaled_up_are_missed() {
        // Half the packets dropped, nothing shed, big groups (π = 1).
        let w = sample(100, 0, 1000, 1000, true);
        assert_eq!(w.scale(), 2.0);
        let groups = [g(true, true, 400), g(false, true, 300), g(false, false, 300)];
        assert!((w.recall(1, 1000, groups, 1).unwrap() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn one_packet_flows_under_drops_stand_for_more() {
        // s = 1/2: a flow seen with one packet had about two; both were
        // dropped with probability 1/4, so it stands for 4/3 flows.
        let w = sample(3, 0, 3, 3, true);
        let r = w.recall(3, 3, [g(true, true, 1); 3], 1).unwrap();
        assert!((r - 0.75).abs() < 1e-9, "{r}");
        // Shed flows too: a third of them measured.
        let w = sample(3, 6, 3, 3, true);
        let r = w.recall(3, 3, [g(true, true, 1); 3], 1).unwrap();
        assert!((r - 0.25).abs() < 1e-9, "{r}");
    }

    #[test]
    fn groups_of_many_flows_none_measured_are_counted() {
        // A tenth of the flows measured, no drops; a group seen with one
        // measured flow (of 100 packets, the window's mean) had about ten
        // flows: seen with probability 1 − 0.9^10 = 0.65.
        let w = sample(10, 90, 1000, 0, false);
        assert_eq!(w.scale(), 10.0);
        let r = w
            .recall(1, 1000, [g(true, true, 100), g(false, false, 900)], 1)
            .unwrap();
        let pi = 1.0 - 0.9f64.powf(10.0);
        assert!((r - pi).abs() < 1e-9, "{r} against {pi}");
        // A group with many measured flows is seen for sure.
        let r = w
            .recall(1, 1000, [g(true, true, 900), g(false, false, 100)], 1)
            .unwrap();
        assert!(r > 0.999, "{r}");
    }

    #[test]
    fn a_seen_flow_stands_for_those_dropped_whole() {
        assert_eq!(seen_flow_weight(5, 1.0), 1.0);
        // s = 1/2, one packet seen: about two, both dropped with
        // probability 1/4, so 4/3 flows, as `recall` weighs a one-flow group.
        assert!((seen_flow_weight(1, 0.5) - 4.0 / 3.0).abs() < 1e-12);
        let w = sample(3, 0, 3, 3, true);
        let r = w.recall(3, 3, [g(true, true, 1); 3], 1).unwrap();
        assert!((r - 3.0 / (3.0 * seen_flow_weight(1, 0.5))).abs() < 1e-9, "{r}");
        // Many packets: seen for sure.
        assert!((seen_flow_weight(100, 0.5) - 1.0).abs() < 1e-12);
        // A seen packet stands for about 1 / s: all of them were dropped
        // with probability at most 1/e, however few reached the monitor.
        let most = 1.0 / (1.0 - (-1.0f64).exp());
        assert!(seen_flow_weight(1, 1e-9) <= most + 1e-6);
        // Nothing reached it: bounded.
        assert_eq!(seen_flow_weight(1, 0.0), 1.0 / MIN_INCLUSION);
        for s in [0.01, 0.2, 0.7, 0.99] {
            for k in [1, 2, 10] {
                let w = seen_flow_weight(k, s);
                assert!((1.0..=most + 1e-6).contains(&w), "{k} {s}: {w}");
                assert!(seen_flow_weight(k + 1, s) <= w);
            }
        }
    }

    #[test]
    fn a_sample_of_the_groups_stands_for_all() {
        let w = sample(100, 0, 1000, 1000, true);
        let all = [
            g(true, true, 400),
            g(false, true, 300),
            g(true, true, 400),
            g(false, true, 300),
        ];
        let every_other = [all[0], all[1]];
        assert_eq!(w.recall(2, 1400, all, 1), w.recall(2, 1400, every_other, 2));
    }

    #[test]
    fn the_recall_is_a_share() {
        for (m, u, s, d) in [(1, 1000, 1, 1000), (0, 5, 10, 0), (5, 0, 0, 0), (7, 3, 10, 90)] {
            for one in [false, true] {
                let w = sample(m, u, s, d, one);
                let r = w.recall(1, 3, [g(true, true, 1), g(false, true, 2)], 1);
                assert!(r.is_some_and(|r| (0.0..=1.0).contains(&r)), "{w:?}: {r:?}");
                assert!(w.scale().is_finite() && w.scale() >= 1.0);
            }
        }
        assert_eq!(sample(5, 5, 10, 10, false).recall(0, 0, [], 1), None);
        assert_eq!(
            sample(5, 5, 10, 10, false).recall(0, 5, [g(false, false, 5)], 1),
            None
        );
    }
}
