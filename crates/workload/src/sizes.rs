//! How the packets are shared among the active flows: evenly, or
//! heavy-tailed (a few elephants carry most packets, most flows are mice).
//!
//! # Model
//!
//! Under [`FlowSizes::Pareto`] every flow draws a weight when it starts,
//! from a Pareto distribution of shape α (scale [`MIN_WEIGHT`], capped at
//! [`MAX_WEIGHT`]), and a burst picks an active flow with probability
//! proportional to its weight instead of uniformly. Lifetimes are drawn as
//! before, so the number of active flows and the arrival rate are those of
//! the spec; a flow's packets are its weight times its life, so their
//! distribution has the Pareto's tail: with flows that outlive the run, the
//! top tenth of them carry about 0.1^(1 − 1/α) of the packets (α = 1.2:
//! 68%; α = 2: 32%; α ≤ 1 tends to a handful of flows carrying nearly all).
//!
//! # Sampling
//!
//! [`Weights`] is a Fenwick tree of integer weights by generator slot: set
//! a slot's weight, and find the slot in which a number below the total
//! falls, both in O(log n) for n slots (20 steps at a million flows).
//! Integers, not floats, so adding and removing a million flows leaves no
//! rounding drift and a seed names the same bytes everywhere.

use std::fmt;
use std::str::FromStr;

use crate::rng::Rng;

/// The smallest weight (the Pareto's scale): weights are integers, so this
/// sets their resolution.
pub const MIN_WEIGHT: u64 = 1 << 10;

/// The largest weight, 2^30 times the smallest: keeps the total below 2^64
/// for up to 2^24 flows even for α ≤ 1, whose draws are unbounded.
pub const MAX_WEIGHT: u64 = MIN_WEIGHT << 30;

/// The distribution of packets over flows (`--flow-sizes`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum FlowSizes {
    /// Every active flow is as likely to send the next burst (Trumpet's workload).
    #[default]
    Uniform,
    /// Flows weighted by a Pareto draw of shape `alpha`. See the module documentation.
    Pareto { alpha: f64 },
}

impl FlowSizes {
    /// Whether the parameters are usable; the reason if not.
    pub fn check(&self) -> Result<(), String> {
        match *self {
            FlowSizes::Uniform => Ok(()),
            FlowSizes::Pareto { alpha } if alpha.is_finite() && alpha > 0.0 && alpha <= 100.0 => Ok(()),
            FlowSizes::Pareto { alpha } => Err(format!("the Pareto shape {alpha} is outside (0, 100]")),
        }
    }

    /// A new flow's weight, or `None` when flows are not weighted (no draw is made).
    pub(crate) fn draw(&self, rng: &mut Rng) -> Option<u64> {
        match *self {
            FlowSizes::Uniform => None,
            FlowSizes::Pareto { alpha } => {
                // Inverse transform: scale · U^(−1/α), U in (0, 1].
                let u = 1.0 - rng.unit();
                let w = MIN_WEIGHT as f64 * u.powf(-1.0 / alpha);
                Some(if w >= MAX_WEIGHT as f64 {
                    MAX_WEIGHT
                } else {
                    (w as u64).max(MIN_WEIGHT)
                })
            }
        }
    }
}

impl fmt::Display for FlowSizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlowSizes::Uniform => f.write_str("uniform"),
            FlowSizes::Pareto { alpha } => write!(f, "pareto:{alpha}"),
        }
    }
}

impl FromStr for FlowSizes {
    type Err = String;

    /// `uniform` or `pareto:ALPHA` (e.g. `pareto:1.2`).
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s == "uniform" {
            return Ok(FlowSizes::Uniform);
        }
        let Some(alpha) = s.strip_prefix("pareto:") else {
            return Err(format!(
                "`{s}` is neither 'uniform' nor 'pareto:ALPHA' (e.g. pareto:1.2)"
            ));
        };
        let alpha: f64 = alpha
            .parse()
            .map_err(|_| format!("`{alpha}` is not a number (the Pareto shape, e.g. pareto:1.2)"))?;
        let sizes = FlowSizes::Pareto { alpha };
        sizes.check()?;
        Ok(sizes)
    }
}

/// Integer weights by slot in a Fenwick tree. See the module documentation.
#[derive(Clone, Debug, Default)]
pub(crate) struct Weights {
    /// 1-based: `tree[i]` is the sum of the weights of slots `(i − lowbit(i), i]` (1-based).
    tree: Vec<u64>,
    weight: Vec<u64>,
    total: u64,
}

fn lowbit(i: usize) -> usize {
    i & i.wrapping_neg()
}

impl Weights {
    /// The weight of every slot below `slot` (the sum of slots `0..slot`).
    fn prefix(&self, slot: usize) -> u64 {
        let (mut i, mut s) = (slot, 0u64);
        while i > 0 {
            s = s.wrapping_add(self.tree[i]);
            i -= lowbit(i);
        }
        s
    }

    /// Sets `slot`'s weight (0 when its flow ends), growing the tree as needed.
    pub(crate) fn set(&mut self, slot: u32, w: u64) {
        let slot = slot as usize;
        if self.tree.is_empty() {
            self.tree.push(0);
        }
        while self.weight.len() <= slot {
            // A new last node covers (i − lowbit(i), i]: all of it weight 0 but its own, 0 too.
            let i = self.weight.len() + 1;
            let node = self.prefix(i - 1).wrapping_sub(self.prefix(i - lowbit(i)));
            self.tree.push(node);
            self.weight.push(0);
        }
        let old = std::mem::replace(&mut self.weight[slot], w);
        self.total = self.total.wrapping_sub(old).wrapping_add(w);
        let mut i = slot + 1;
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].wrapping_sub(old).wrapping_add(w);
            i += lowbit(i);
        }
    }

    /// The slot in which `t` (below the total) falls: the first with `prefix(slot + 1) > t`.
    fn find(&self, mut t: u64) -> u32 {
        let n = self.weight.len();
        let (mut pos, mut step) = (0usize, n.checked_ilog2().map_or(0, |b| 1usize << b));
        while step > 0 {
            if pos + step <= n && self.tree[pos + step] <= t {
                pos += step;
                t -= self.tree[pos];
            }
            step >>= 1;
        }
        pos as u32
    }

    /// A slot drawn with probability proportional to its weight, other than
    /// `skip` when another has weight. `None` when every weight is 0.
    pub(crate) fn pick(&self, rng: &mut Rng, skip: Option<u32>) -> Option<u32> {
        let skipped = skip
            .and_then(|s| self.weight.get(s as usize).map(|&w| (s, w)))
            .filter(|&(_, w)| w < self.total);
        match skipped {
            // Draw below the others' total and step over the skipped slot's range.
            Some((s, w)) => {
                let mut t = rng.below_u64(self.total - w);
                if t >= self.prefix(s as usize) {
                    t += w;
                }
                Some(self.find(t))
            }
            None if self.total == 0 => None,
            None => Some(self.find(rng.below_u64(self.total))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        assert_eq!("uniform".parse(), Ok(FlowSizes::Uniform));
        assert_eq!("pareto:1.2".parse(), Ok(FlowSizes::Pareto { alpha: 1.2 }));
        assert_eq!(FlowSizes::Pareto { alpha: 1.2 }.to_string(), "pareto:1.2");
        for bad in [
            "pareto",
            "pareto:",
            "pareto:0",
            "pareto:-1",
            "pareto:inf",
            "zipf:1",
        ] {
            assert!(bad.parse::<FlowSizes>().is_err(), "{bad}");
        }
    }

    #[test]
    fn fenwick_sums_and_finds_like_a_linear_scan() {
        let mut rng = Rng::new(3);
        let mut w = Weights::default();
        let mut model: Vec<u64> = Vec::new();
        for round in 0..2_000u32 {
            let slot = rng.below(200);
            let value = if round % 3 == 0 {
                0
            } else {
                u64::from(rng.below(1000))
            };
            w.set(slot, value);
            if model.len() <= slot as usize {
                model.resize(slot as usize + 1, 0);
            }
            model[slot as usize] = value;
            let total: u64 = model.iter().sum();
            assert_eq!(w.total, total);
            for s in [0, slot as usize, model.len()] {
                assert_eq!(w.prefix(s), model[..s].iter().sum::<u64>());
            }
            if total > 0 {
                let t = rng.below_u64(total);
                let found = w.find(t) as usize;
                let before: u64 = model[..found].iter().sum();
                assert!(before <= t && t < before + model[found], "{t} in slot {found}");
            }
        }
    }

    #[test]
    fn pick_skips_and_follows_the_weights() {
        let mut rng = Rng::new(9);
        let mut w = Weights::default();
        for (s, v) in [(0, 100), (1, 0), (2, 300), (3, 600)] {
            w.set(s, v);
        }
        let mut hits = [0u32; 4];
        for _ in 0..100_000 {
            hits[w.pick(&mut rng, None).unwrap() as usize] += 1;
        }
        assert_eq!(hits[1], 0);
        assert!((hits[3] as f64 / 1e5 - 0.6).abs() < 0.01, "{hits:?}");
        for _ in 0..10_000 {
            assert_ne!(w.pick(&mut rng, Some(3)), Some(3));
            assert_ne!(w.pick(&mut rng, Some(0)), Some(0));
        }
        // The only flow with weight is picked even when skipped.
        let mut one = Weights::default();
        one.set(5, 7);
        assert_eq!(one.pick(&mut rng, Some(5)), Some(5));
        one.set(5, 0);
        assert_eq!(one.pick(&mut rng, None), None);
    }
}
