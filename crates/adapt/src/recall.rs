//! Online recall estimation per task (MONA §V-A), task-independent.
//!
//! # What?
//!
//! When work is shed, a task misses the events of flows it no longer
//! measures. Recall = found / (found + missed); `missed` is unknown, so it
//! is estimated as `F_miss · x̂`: the number of flows the task did not
//! measure this window times an estimate of the events per flow.
//!
//! # Design
//!
//! Per window the caller reports, per task, `n` measured flows, the events
//! found among them and their per-flow variance `σ²`. The estimator keeps
//! the last `q` windows' mean results `x̄ = found/n` and weights:
//!
//! - `μ = Σ w_k·x̄_k / Σ w_k` with `w_k = sqrt(n_k/σ²_k)` (the inverse of
//!   the standard error: more flows and less spread count more), over the
//!   last `q` windows including this one.
//! - `σ` = sample standard deviation of those `x̄_k` (0 with one window),
//!   `cv = σ/μ`.
//! - `x̂ = μ` when `cv ≤ 1` (quadratic loss: the mean), else `μ + λσ`
//!   (Chebyshev: the events per flow exceed it with probability ≤ 1/λ²).
//!
//! # Guards (our definitions where the paper is silent)
//!
//! - `σ²` not given: `x̄(1 − x̄)` when `x̄ ≤ 1` (a yes/no task: Bernoulli),
//!   else `x̄` (a count: Poisson).
//! - `σ²` (given or not) is floored at `1/n`: a window whose flows all
//!   agree (often all zero) weighs as much as one where a single flow
//!   differs, never infinitely.
//! - A window with `n = 0` has no `x̄` and is not recorded.
//! - `μ = 0` (every recorded `x̄` is 0, so `σ = 0`): the mean estimator.
//! - No window recorded yet: nothing is known about unmeasured flows;
//!   recall is 1 if none are unmeasured, else 0 (estimator `NoData`), so
//!   accuracy control gives the task flows back rather than trusting it.
//! - `found + missed = 0`: recall 1.
//!
//! # Options (our additions, off unless asked for)
//!
//! - [`RecallEstimator::with_cap`]: `x̂` at most the events one flow can
//!   give (1 for a yes/no task), where `μ + λσ` would exceed it.
//! - [`RecallEstimator::with_shift_reset`]: the history is dropped when a
//!   window's mean lies too many of its standard errors from it (a shift
//!   of the traffic rather than noise), since MONA's `MA(q)` assumes a
//!   stationary mean and lags a load swing by up to `q` windows.
//!
//! # Invariants
//!
//! - The history holds at most `q` windows, each with `n ≥ 1` and a finite
//!   `x̄ ≥ 0` and weight > 0.
//! - `recall ∈ [0, 1]`.
//!
//! # Cost
//!
//! O(q) per window per task, no allocation after `new`.

use std::collections::VecDeque;

use crate::error::{check_range, AdaptError};

/// One task's results in one window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowObservation {
    /// `n_w`: flows the task measured.
    pub measured_flows: u64,
    /// Events the task reported among them.
    pub events_found: u64,
    /// `σ²_w`: variance of the per-flow results, if the caller computed
    /// it (see the module doc for the fallback).
    pub variance: Option<f64>,
    /// `F_miss`: flows the task would have measured but did not (shed).
    pub unmeasured_flows: u64,
}

/// Which estimator of events per unmeasured flow was used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Estimator {
    /// `x̂ = μ` (low variability, `cv ≤ 1`).
    Mean,
    /// `x̂ = μ + λσ` (high variability).
    UpperBound,
    /// No window with measured flows yet.
    NoData,
}

/// The estimate after one window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RecallEstimate {
    pub recall: f64,
    /// `N_miss = F_miss · x̂`.
    pub missing_events: f64,
    pub estimator: Estimator,
    pub mu: f64,
    pub sigma: f64,
}

#[derive(Clone, Copy, Debug)]
struct Recorded {
    mean: f64,   // x̄^obs
    weight: f64, // sqrt(n / σ²)
}

/// The per-task estimator state.
#[derive(Clone, Debug)]
pub struct RecallEstimator {
    q: usize,
    lambda: f64,
    /// Most events one flow can give, if the task bounds it ([`RecallEstimator::with_cap`]).
    cap: f64,
    /// [`RecallEstimator::with_shift_reset`]'s threshold, in standard errors.
    shift_z: Option<f64>,
    history: VecDeque<Recorded>, // newest last; len ≤ q
}

impl RecallEstimator {
    /// The paper's defaults: `q = 10`, `λ = 3`.
    pub const DEFAULT_Q: usize = 10;
    pub const DEFAULT_LAMBDA: f64 = 3.0;

    /// `q ≥ 1` windows of memory; `λ ≥ 0` standard deviations of margin.
    pub fn new(q: usize, lambda: f64) -> Result<Self, AdaptError> {
        if q == 0 {
            return Err(AdaptError::OutOfRange {
                what: "q",
                value: 0.0,
                range: ">= 1",
            });
        }
        check_range("lambda", lambda, 0.0, f64::MAX, "finite, >= 0")?;
        Ok(RecallEstimator {
            q,
            lambda,
            cap: f64::INFINITY,
            shift_z: None,
            history: VecDeque::with_capacity(q),
        })
    }

    /// Drops the history when a window's mean lies more than `z` standard
    /// errors (`sqrt(σ²/n)` of that window) from the history's weighted
    /// mean. MONA's `MA(q)` model assumes the mean per flow stationary over
    /// `q` windows; when the traffic shifts (a load swing), the older
    /// windows only bias the estimate, while this window's measured flows
    /// are a uniform sample of all (shedding picks flows by hash). With
    /// `z = 3` stationary traffic crosses it about one window in 400. Our
    /// addition to MONA's estimator.
    pub fn with_shift_reset(mut self, z: f64) -> Result<Self, AdaptError> {
        check_range("z", z, 0.0, f64::MAX, "finite, >= 0")?;
        self.shift_z = Some(z);
        Ok(self)
    }

    /// Bounds the events per unmeasured flow at `cap` (≥ 0): for a task
    /// where a flow gives at most that many (a yes/no task, or Clarion's
    /// monitor, where every report's group has at least one flow, so
    /// reports per flow are at most 1), `μ + λσ` above it only
    /// overestimates what was missed. Our addition to MONA's estimator.
    pub fn with_cap(mut self, cap: f64) -> Result<Self, AdaptError> {
        check_range("cap", cap, 0.0, f64::MAX, "finite, >= 0")?;
        self.cap = cap;
        Ok(self)
    }

    /// Folds in this window (dropping the oldest beyond `q`) and estimates
    /// its recall. Fails on a NaN, infinite or negative variance.
    pub fn observe(&mut self, obs: WindowObservation) -> Result<RecallEstimate, AdaptError> {
        if let Some(v) = obs.variance {
            check_range("variance", v, 0.0, f64::MAX, "finite, >= 0")?;
        }
        if obs.measured_flows > 0 {
            let n = obs.measured_flows as f64;
            let mean = obs.events_found as f64 / n;
            let var = obs
                .variance
                .unwrap_or(if mean <= 1.0 { mean * (1.0 - mean) } else { mean })
                .max(1.0 / n);
            if let Some(z) = self.shift_z.filter(|_| !self.history.is_empty()) {
                let (sw, swx) = self.history.iter().fold((0.0, 0.0), |(sw, swx), r| {
                    (sw + r.weight, swx + r.weight * r.mean)
                });
                if (mean - swx / sw).abs() > z * (var / n).sqrt() {
                    self.history.clear();
                }
            }
            if self.history.len() == self.q {
                self.history.pop_front();
            }
            self.history.push_back(Recorded {
                mean,
                weight: (n / var).sqrt(),
            });
        }
        Ok(self.estimate(obs.events_found as f64, obs.unmeasured_flows as f64))
    }

    fn estimate(&self, found: f64, f_miss: f64) -> RecallEstimate {
        let k = self.history.len();
        if k == 0 {
            return RecallEstimate {
                recall: if f_miss == 0.0 { 1.0 } else { 0.0 },
                missing_events: if f_miss == 0.0 { 0.0 } else { f64::INFINITY },
                estimator: Estimator::NoData,
                mu: 0.0,
                sigma: 0.0,
            };
        }
        let (sw, swx) = self.history.iter().fold((0.0, 0.0), |(sw, swx), r| {
            (sw + r.weight, swx + r.weight * r.mean)
        });
        let mu = swx / sw;
        let sigma = if k < 2 {
            0.0
        } else {
            let avg = self.history.iter().map(|r| r.mean).sum::<f64>() / k as f64;
            let ss = self
                .history
                .iter()
                .map(|r| (r.mean - avg) * (r.mean - avg))
                .sum::<f64>();
            (ss / (k - 1) as f64).sqrt()
        };
        let cv_le_1 = if mu > 0.0 { sigma / mu <= 1.0 } else { sigma == 0.0 };
        let (estimator, x_hat) = if cv_le_1 {
            (Estimator::Mean, mu)
        } else {
            (Estimator::UpperBound, mu + self.lambda * sigma)
        };
        let x_hat = x_hat.min(self.cap);
        let missing = f_miss * x_hat;
        let recall = if found + missing == 0.0 {
            1.0
        } else {
            found / (found + missing)
        };
        RecallEstimate {
            recall,
            missing_events: missing,
            estimator,
            mu,
            sigma,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;
    use rand_core::SeedableRng;
    use rand_pcg::Pcg64Mcg;

    fn obs(n: u64, found: u64, var: Option<f64>, miss: u64) -> WindowObservation {
        WindowObservation {
            measured_flows: n,
            events_found: found,
            variance: var,
            unmeasured_flows: miss,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
    }

    #[test]
    fn hand_computed() {
        let mut e = RecallEstimator::new(2, 3.0).unwrap();
        // Window 1: x̄ = 0.2, σ² = 0.16, w = sqrt(100/0.16) = 25.
        let r = e.observe(obs(100, 20, Some(0.16), 50)).unwrap();
        assert_eq!(r.estimator, Estimator::Mean);
        assert!(close(r.mu, 0.2) && r.sigma == 0.0);
        assert!(close(r.missing_events, 10.0));
        assert!(close(r.recall, 20.0 / 30.0));
        // Window 2: x̄ = 0.5, σ² = 0.25, w = sqrt(400/0.25) = 40.
        // μ = (25·0.2 + 40·0.5)/65 = 25/65; σ = sd(0.2, 0.5) = 0.3/√2.
        let r = e.observe(obs(400, 200, Some(0.25), 100)).unwrap();
        let mu = 25.0 / 65.0;
        let sigma = 0.3 / 2f64.sqrt();
        assert!(close(r.mu, mu) && close(r.sigma, sigma));
        assert_eq!(r.estimator, Estimator::Mean); // cv = 0.55
        assert!(close(r.recall, 200.0 / (200.0 + 100.0 * mu)));
        // Window 3 (q = 2 drops window 1): x̄ = 0.01 with σ² floored to
        // 1/n = 0.01 (given 0): w = sqrt(100/0.01) = 100.
        // μ = (40·0.5 + 100·0.01)/140 = 0.15; σ = 0.49/√2 ≈ 0.346 > μ.
        let r = e.observe(obs(100, 1, Some(0.0), 10)).unwrap();
        let mu = 21.0 / 140.0;
        let sigma = 0.49 / 2f64.sqrt();
        assert!(close(r.mu, mu) && close(r.sigma, sigma));
        assert_eq!(r.estimator, Estimator::UpperBound);
        assert!(close(r.missing_events, 10.0 * (mu + 3.0 * sigma)));
        assert!(close(r.recall, 1.0 / (1.0 + 10.0 * (mu + 3.0 * sigma))));
    }

    #[test]
    fn guards() {
        let mut e = RecallEstimator::new(10, 3.0).unwrap();
        // Nothing measured yet.
        let r = e.observe(obs(0, 0, None, 0)).unwrap();
        assert_eq!((r.recall, r.estimator), (1.0, Estimator::NoData));
        let r = e.observe(obs(0, 0, None, 5)).unwrap();
        assert_eq!((r.recall, r.estimator), (0.0, Estimator::NoData));
        // Fallback variance for counts (x̄ = 3 > 1): Poisson, σ² = 3.
        let r = e.observe(obs(10, 30, None, 1)).unwrap();
        assert!(close(r.mu, 3.0) && close(r.recall, 30.0 / 33.0));
        // A window with n = 0 records nothing: μ unchanged.
        let r = e.observe(obs(0, 0, None, 2)).unwrap();
        assert!(close(r.mu, 3.0) && close(r.missing_events, 6.0));
        // All zero: found = missing = 0 → recall 1.
        let mut z = RecallEstimator::new(10, 3.0).unwrap();
        let r = z.observe(obs(50, 0, None, 50)).unwrap();
        assert_eq!((r.recall, r.estimator), (1.0, Estimator::Mean));
        assert!(RecallEstimator::new(0, 3.0).is_err());
        assert!(RecallEstimator::new(10, f64::NAN).is_err());
        assert!(e.observe(obs(1, 1, Some(-1.0), 0)).is_err());
        assert!(e.observe(obs(1, 1, Some(f64::INFINITY), 0)).is_err());
    }

    fn arb_history() -> impl Strategy<Value = Vec<(u64, u64, Option<f64>)>> {
        proptest::collection::vec(
            (0u64..500).prop_flat_map(|n| (Just(n), 0..=3 * n + 1, proptest::option::of(0.0f64..4.0))),
            1..15,
        )
    }

    proptest! {
        /// No unmeasured flows → recall 1; more unmeasured flows → recall
        /// no higher; always within [0, 1].
        #[test]
        fn recall_properties(hist in arb_history(), found in 0u64..1000, a in 0u64..1000, b in 0u64..1000) {
            let mut e = RecallEstimator::new(10, 3.0).unwrap();
            for (n, f, v) in hist {
                e.observe(obs(n, f, v, 0)).unwrap();
            }
            let (lo, hi) = (a.min(b), a.max(b));
            let none = e.clone().observe(obs(found, found, None, 0)).unwrap();
            prop_assert_eq!(none.recall, 1.0);
            let r_lo = e.clone().observe(obs(found, found, None, lo)).unwrap();
            let r_hi = e.clone().observe(obs(found, found, None, hi)).unwrap();
            prop_assert!((0.0..=1.0).contains(&r_lo.recall) && (0.0..=1.0).contains(&r_hi.recall));
            prop_assert!(r_hi.recall <= r_lo.recall);
        }

        /// μ is a weighted mean: within the range of the recorded x̄.
        #[test]
        fn mu_within_range(hist in arb_history()) {
            let mut e = RecallEstimator::new(10, 3.0).unwrap();
            let mut means = Vec::new();
            let mut last = None;
            for (n, f, v) in hist {
                if n > 0 { means.push(f as f64 / n as f64); }
                last = Some(e.observe(obs(n, f, v, 1)).unwrap());
            }
            let r = last.unwrap();
            let recent = &means[means.len().saturating_sub(10)..];
            if recent.is_empty() {
                prop_assert_eq!(r.estimator, Estimator::NoData);
            } else {
                let lo = recent.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = recent.iter().copied().fold(0.0, f64::max);
                prop_assert!(r.mu >= lo - 1e-12 && r.mu <= hi + 1e-12);
            }
        }
    }

    fn uniform(rng: &mut Pcg64Mcg) -> f64 {
        (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Per-flow results i.i.d. Bernoulli(p), a random subset of flows
    /// unmeasured each window: the estimate is within 20% of the true
    /// recall (found among measured / all events) in ≥ 95% of windows.
    #[test]
    fn bernoulli_flows_within_20_percent() {
        let mut rng = Pcg64Mcg::seed_from_u64(2022);
        let (mut windows, mut within, mut err_sum) = (0u32, 0u32, 0.0);
        for _run in 0..20 {
            let p = 0.02 + 0.5 * uniform(&mut rng);
            let flows = 1000 + (uniform(&mut rng) * 4000.0) as u64;
            let mut e = RecallEstimator::new(10, 3.0).unwrap();
            for _w in 0..50 {
                let unmeasured_share = 0.8 * uniform(&mut rng);
                let (mut n, mut found, mut f_miss, mut missed) = (0u64, 0u64, 0u64, 0u64);
                for _ in 0..flows {
                    let event = uniform(&mut rng) < p;
                    if uniform(&mut rng) < unmeasured_share {
                        f_miss += 1;
                        missed += u64::from(event);
                    } else {
                        n += 1;
                        found += u64::from(event);
                    }
                }
                let x = found as f64 / n.max(1) as f64;
                let est = e.observe(obs(n, found, Some(x * (1.0 - x)), f_miss)).unwrap();
                let truth = if found + missed == 0 {
                    1.0
                } else {
                    found as f64 / (found + missed) as f64
                };
                let err = (est.recall - truth).abs() / truth;
                windows += 1;
                within += u32::from(err <= 0.2);
                err_sum += err;
            }
        }
        let share = f64::from(within) / f64::from(windows);
        eprintln!(
            "bernoulli recall: {windows} windows, {:.1}% within 20%, mean relative error {:.4}",
            100.0 * share,
            err_sum / f64::from(windows)
        );
        assert!(share >= 0.95);
    }

    #[test]
    fn the_cap_bounds_the_events_per_unmeasured_flow() {
        // Windows alternating 0.1 and 0.9: cv < 1 here, so force the upper
        // bound with a wide spread around a small mean.
        let mut e = RecallEstimator::new(10, 3.0).unwrap().with_cap(1.0).unwrap();
        let mut free = RecallEstimator::new(10, 3.0).unwrap();
        let mut last = (None, None);
        for (n, found) in [(100, 0), (100, 0), (100, 0), (100, 90), (100, 0), (100, 0)] {
            last = (
                Some(e.observe(obs(n, found, Some(0.25), 100)).unwrap()),
                Some(free.observe(obs(n, found, Some(0.25), 100)).unwrap()),
            );
        }
        let (capped, uncapped) = (last.0.unwrap(), last.1.unwrap());
        assert_eq!(uncapped.estimator, Estimator::UpperBound);
        assert!(uncapped.missing_events > 100.0, "{uncapped:?}");
        assert!(close(capped.missing_events, 100.0), "{capped:?}");
        assert!(RecallEstimator::new(10, 3.0).unwrap().with_cap(-1.0).is_err());
    }

    #[test]
    fn a_shift_of_the_traffic_drops_the_history() {
        let mut e = RecallEstimator::new(10, 3.0)
            .unwrap()
            .with_shift_reset(3.0)
            .unwrap();
        for _ in 0..9 {
            e.observe(obs(1000, 100, None, 0)).unwrap();
        }
        // x̄ jumps from 0.1 to 0.4: 30 standard errors away.
        let r = e.observe(obs(1000, 400, None, 1000)).unwrap();
        assert!(close(r.mu, 0.4), "{r:?}");
        assert!(close(r.missing_events, 400.0), "{r:?}");
        // Noise within 3 standard errors keeps it: SE = sqrt(0.4·0.6/1000) ≈ 0.0155.
        let r = e.observe(obs(1000, 420, None, 1000)).unwrap();
        assert!(r.mu > 0.4 && r.mu < 0.42, "{r:?}");
    }
}
