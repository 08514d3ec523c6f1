//! The seeded generator behind every random choice: PCG-64 (`pcg64_fast`),
//! which `rand_pcg` keeps value-stable, so a seed names the same workload
//! from one release to the next.

use rand_core::{Rng as _, SeedableRng};
use rand_pcg::Pcg64Mcg;

#[derive(Clone, Debug)]
pub(crate) struct Rng(Pcg64Mcg);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(Pcg64Mcg::seed_from_u64(seed))
    }

    pub(crate) fn u32(&mut self) -> u32 {
        self.0.next_u32()
    }

    /// Uniform in `0..n` (`n > 0`), by a widening multiply: the bias is below
    /// `n / 2^32`, far under anything a workload statistic can show.
    pub(crate) fn below(&mut self, n: u32) -> u32 {
        ((u64::from(self.u32()) * u64::from(n)) >> 32) as u32
    }

    /// Uniform in `0..n` (`n > 0`), as [`Rng::below`] with 64 bits.
    pub(crate) fn below_u64(&mut self, n: u64) -> u64 {
        ((u128::from(self.0.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Exponentially distributed with the given mean.
    pub(crate) fn exp(&mut self, mean: f64) -> f64 {
        // 1 - unit() is in (0, 1], so the logarithm is finite.
        -mean * (1.0 - self.unit()).ln()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_and_in_range() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1000 {
            assert_eq!(a.u32(), b.u32());
            assert!(a.below(10) < 10);
            b.below(10);
            let u = a.unit();
            assert!((0.0..1.0).contains(&u));
            b.unit();
        }
        let mean = (0..100_000).map(|_| a.exp(3.0)).sum::<f64>() / 100_000.0;
        assert!((mean - 3.0).abs() < 0.1, "{mean}");
    }
}
