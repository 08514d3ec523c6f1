//! The seeded generator behind cache replacement and the rule and trace
//! generator: PCG-64 (`pcg64_fast`), value-stable across `rand_pcg`
//! releases, so a seed names the same rule set and the same run.

use rand_core::{Rng as _, SeedableRng};
use rand_pcg::Pcg64Mcg;

#[derive(Clone, Debug)]
pub(crate) struct CacheRng(Pcg64Mcg);

impl CacheRng {
    pub(crate) fn new(seed: u64) -> Self {
        CacheRng(Pcg64Mcg::seed_from_u64(seed))
    }

    pub(crate) fn u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..n` (`n > 0`) by a widening multiply (bias below `n / 2^64`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.0.next_u64()) * n as u128) >> 64) as usize
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_and_in_range() {
        let (mut a, mut b) = (CacheRng::new(3), CacheRng::new(3));
        for n in 1..1000 {
            let x = a.below(n);
            assert_eq!(x, b.below(n));
            assert!(x < n);
            assert!((0.0..1.0).contains(&a.unit()));
            b.unit();
        }
    }
}
