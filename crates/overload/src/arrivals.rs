//! Arrival-time generators: iterators of packet arrival times, in
//! nanoseconds from t = 0, never decreasing.
//!
//! # Design
//!
//! A rate `λ(t)` (packets per ns) has the cumulative count
//! `Λ(t) = ∫₀ᵗ λ`. Packet k (from 0) arrives at the first integer
//! nanosecond `n` with `Λ(n) ≥ k`: packet 0 at t = 0, and the number of
//! arrivals in `[0, t)` is `⌈Λ(t)⌉`, within one of `Λ(t)`. Rounding up to
//! whole nanoseconds loses nothing over a run (no drift): each arrival is
//! placed against `Λ` itself, not after the previous one.
//!
//! - [`Constant`]: `Λ(t) = pps·t/10⁹`, inverted exactly in integers.
//! - [`Sine`]: `λ(t) = m·(1 + a·sin(2πt/T))`, so
//!   `Λ(t) = m·t + m·a·T/(2π)·(1 − cos(2πt/T))`; inverted numerically.
//! - [`Recorded`]: a capture's own timestamps, offsets from the first
//!   divided by a speedup.
//!
//! # Cost
//!
//! `Constant`: one 128-bit multiply and divide per arrival. `Sine`: a
//! safeguarded Newton iteration on `Λ` (bisection whenever a Newton step
//! leaves the bracket, e.g. where the rate is near 0), then an exact
//! integer fix-up; each step is one cosine. [`Sine::evaluations`] counts
//! them: about 5 per arrival on MONA's sine (tested). `Recorded`: one
//! division per arrival.

use crate::error::{invalid, OverloadError};

const NS_PER_S: f64 = 1e9;

/// Arrivals at a constant rate: packet k at `⌈k·10⁹/pps⌉` ns.
#[derive(Clone, Debug)]
pub struct Constant {
    pps: u64,
    k: u64,
}

impl Constant {
    /// Fails for `pps == 0`.
    pub fn new(pps: u64) -> Result<Self, OverloadError> {
        if pps == 0 {
            return Err(invalid("packet rate", "must be at least 1 packet/s"));
        }
        Ok(Constant { pps, k: 0 })
    }
}

impl Iterator for Constant {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let num = u128::from(self.k) * 1_000_000_000;
        let t = num.div_ceil(u128::from(self.pps));
        let t = u64::try_from(t).ok()?; // past 584 years: the stream ends
        self.k += 1;
        Some(t)
    }
}

/// Arrivals whose rate follows a sine: `mean·(1 + amplitude·sin(2πt/T))`.
///
/// With amplitude 1 the rate swings between 0 and twice the mean (MONA's
/// 0 to 14.8 Mpps is `mean_pps = 7.4e6, amplitude = 1`); it starts at the
/// mean, rising.
#[derive(Clone, Debug)]
pub struct Sine {
    /// Mean rate, packets per ns.
    m: f64,
    amplitude: f64,
    period: u64,
    /// `m·a·T/(2π)`: the cosine term's weight in `Λ`.
    c: f64,
    /// Next packet's number.
    k: u64,
    /// Previous arrival: the next one is not earlier.
    prev: u64,
    evaluations: u64,
}

impl Sine {
    /// Fails unless `mean_pps` is positive and finite, `amplitude` is in
    /// `0..=1` and `period_ns > 0`.
    pub fn new(mean_pps: f64, amplitude: f64, period_ns: u64) -> Result<Self, OverloadError> {
        if !(mean_pps.is_finite() && mean_pps > 0.0) {
            return Err(invalid(
                "mean rate",
                format!("{mean_pps} is not a positive packet rate"),
            ));
        }
        if !(0.0..=1.0).contains(&amplitude) {
            return Err(invalid("amplitude", format!("{amplitude} is not within 0..=1")));
        }
        if period_ns == 0 {
            return Err(invalid("period", "must be at least 1 ns"));
        }
        let m = mean_pps / NS_PER_S;
        Ok(Sine {
            m,
            amplitude,
            period: period_ns,
            c: m * amplitude * period_ns as f64 / std::f64::consts::TAU,
            k: 0,
            prev: 0,
            evaluations: 0,
        })
    }

    /// `Λ(t)`: the expected number of packets in `[0, t)`.
    pub fn expected(&self, t_ns: u64) -> f64 {
        // Whole periods in integers, so the phase stays exact far from 0.
        let (q, r) = (t_ns / self.period, t_ns % self.period);
        self.m * (q as f64 * self.period as f64) + self.partial(r as f64)
    }

    /// The rate at `t_ns`, packets per second.
    pub fn rate_pps(&self, t_ns: u64) -> f64 {
        let r = (t_ns % self.period) as f64;
        self.rate(r) * NS_PER_S
    }

    /// How many times `Λ` was evaluated so far: the generator's cost.
    pub fn evaluations(&self) -> u64 {
        self.evaluations
    }

    /// `Λ` over a part `r` of one period (`0 ≤ r < T`).
    fn partial(&self, r: f64) -> f64 {
        self.m * r + self.c * (1.0 - (std::f64::consts::TAU * r / self.period as f64).cos())
    }

    /// The rate in packets per ns at phase `r` ns into a period.
    fn rate(&self, r: f64) -> f64 {
        self.m * (1.0 + self.amplitude * (std::f64::consts::TAU * r / self.period as f64).sin())
    }

    /// `Λ` at a real time `t ≥ 0`, reduced by whole periods like [`Self::expected`].
    fn lambda(&mut self, t: f64) -> f64 {
        self.evaluations += 1;
        let p = self.period as f64;
        let q = (t / p).floor();
        self.m * q * p + self.partial(t - q * p)
    }

    fn lambda_at(&mut self, n: u64) -> f64 {
        self.evaluations += 1;
        self.expected(n)
    }

    /// The first integer ns `n ≥ prev` with `Λ(n) ≥ k`.
    fn invert(&mut self, k: f64) -> Option<u64> {
        let prev = self.prev;
        if self.lambda_at(prev) >= k {
            return Some(prev); // more than one packet in this nanosecond
        }
        // Λ(t) - m·t lies in [0, 2c], so the root lies in [k/m - 2c/m, k/m].
        let hi0 = k / self.m;
        if hi0 >= u64::MAX as f64 {
            return None;
        }
        let mut lo = (hi0 - 2.0 * self.c / self.m).max(prev as f64); // Λ(lo) < k
        let mut hi = hi0 + 1.0; // Λ(hi) ≥ k
        let mut t = lo + (k - self.lambda(lo)) / self.rate_at(lo).max(self.m * 1e-9);
        for _ in 0..200 {
            if !(t > lo && t < hi) {
                t = 0.5 * (lo + hi);
            }
            let f = self.lambda(t) - k;
            if f < 0.0 {
                lo = t;
            } else {
                hi = t;
            }
            if hi - lo < 0.5 {
                break;
            }
            let d = self.rate_at(t);
            let step = if d > 0.0 { f / d } else { f64::NAN };
            if step.abs() < 0.25 {
                t -= step;
                break; // within a nanosecond: the fix-up finishes
            }
            t -= step; // NaN or outside the bracket: bisect next round
        }
        let t = if t.is_finite() { t.clamp(lo, hi) } else { hi };
        // Exact in the integers (against Λ as evaluated): walk to the first
        // n with Λ(n) ≥ k. Λ grows, so both walks end; they are short
        // because t is within about a nanosecond of the root.
        let mut n = (t.ceil() as u64).max(prev);
        while self.lambda_at(n) < k {
            n = n.checked_add(1)?;
        }
        while n > prev && self.lambda_at(n - 1) >= k {
            n -= 1;
        }
        Some(n)
    }

    fn rate_at(&self, t: f64) -> f64 {
        let p = self.period as f64;
        self.rate(t - (t / p).floor() * p)
    }
}

impl Iterator for Sine {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let n = if self.k == 0 {
            0
        } else {
            self.invert(self.k as f64)?
        };
        self.k += 1;
        self.prev = n;
        Some(n)
    }
}

/// A capture's own arrival times, sped up: packet k arrives at
/// `round((ts_k − ts_0) / speedup)` ns.
///
/// Capture timestamps can step back (clock adjustments, merged files); a
/// packet stamped earlier than one before it arrives with that one (gap
/// 0), counted in [`Recorded::reordered`]. Offsets are exact up to 2⁵³ ns
/// (104 days) of capture; with `speedup == 1` they are exact always.
#[derive(Clone, Debug)]
pub struct Recorded<I> {
    timestamps: I,
    first: Option<u64>,
    latest: u64,
    speedup: f64,
    reordered: u64,
}

impl<I: Iterator<Item = u64>> Recorded<I> {
    /// `timestamps` in ns (any origin, e.g. since the Unix epoch); a
    /// `speedup` of 2 halves every gap. Fails unless `speedup` is positive
    /// and finite.
    pub fn new(timestamps: impl IntoIterator<IntoIter = I>, speedup: f64) -> Result<Self, OverloadError> {
        if !(speedup.is_finite() && speedup > 0.0) {
            return Err(invalid("speedup", format!("{speedup} is not a positive number")));
        }
        Ok(Recorded {
            timestamps: timestamps.into_iter(),
            first: None,
            latest: 0,
            speedup,
            reordered: 0,
        })
    }

    /// Packets stamped earlier than a packet before them (so far).
    pub fn reordered(&self) -> u64 {
        self.reordered
    }
}

impl<I: Iterator<Item = u64>> Iterator for Recorded<I> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let ts = self.timestamps.next()?;
        let first = *self.first.get_or_insert(ts);
        if ts < self.latest {
            self.reordered += 1;
        }
        self.latest = self.latest.max(ts);
        let offset = self.latest - first; // latest ≥ first: it started there
        if self.speedup == 1.0 {
            return Some(offset);
        }
        // Monotone in the offset, so arrivals never decrease.
        Some((offset as f64 / self.speedup).round() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_is_exact() {
        let a: Vec<u64> = Constant::new(3).unwrap().take(4).collect();
        assert_eq!(a, [0, 333_333_334, 666_666_667, 1_000_000_000]);
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(Constant::new(0).is_err());
        assert!(Sine::new(0.0, 0.5, 10).is_err());
        assert!(Sine::new(f64::NAN, 0.5, 10).is_err());
        assert!(Sine::new(1e6, 1.5, 10).is_err());
        assert!(Sine::new(1e6, -0.1, 10).is_err());
        assert!(Sine::new(1e6, 0.5, 0).is_err());
        assert!(Recorded::new([1u64], 0.0).is_err());
        assert!(Recorded::new([1u64], f64::INFINITY).is_err());
    }

    #[test]
    fn recorded_clamps_steps_back() {
        let mut r = Recorded::new([100u64, 110, 105, 130], 1.0).unwrap();
        let a: Vec<u64> = r.by_ref().collect();
        assert_eq!(a, [0, 10, 10, 30]);
        assert_eq!(r.reordered(), 1);
    }

    #[test]
    fn several_packets_per_nanosecond() {
        // 3 packets per ns on average: arrivals share nanoseconds, never decrease.
        let a: Vec<u64> = Sine::new(3e9, 1.0, 1000).unwrap().take(10_000).collect();
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        assert!(a.windows(3).any(|w| w[0] == w[2]));
    }
}
