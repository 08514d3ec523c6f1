//! The per-packet time model (MONA Eq. 1–4) and its run-time inputs.
//!
//! # What?
//!
//! A packet of a known flow costs a retrieval (hash and flow-entry fetch)
//! plus its state's processing; a packet of a new flow costs an insertion:
//!
//! ```text
//! T_pkt = (1 − λ_f)·[T_r^H·P + T_r^M·(1 − P) + T_p] + λ_f·T_i      (Eq. 3)
//! ```
//!
//! with `λ_f` the share of new-flow packets and `P` the probability that a
//! flow entry is found in the cache. Setting `T_pkt = 1/λ_pkt` (the time
//! one packet may take at the arrival rate) and solving for `T_p` gives
//! the processing budget per packet for the next window (Eq. 4), which the
//! routine ([`crate::routine`]) then fits.
//!
//! # Design
//!
//! - [`CostModel`] holds the profiled constants (ns); [`OnlineEstimate`]
//!   the window's `λ_f`, `λ_pkt` (packets/s) and `P`.
//! - `P` comes from timing samples of flow retrieval: hit and miss times
//!   are modelled as (maximum) Gumbel distributions fitted at profiling by
//!   the method of moments ([`GumbelFit::from_samples`]); a sample `t`
//!   counts as a hit when `1 − CDF_hit(t) ≥ CDF_miss(t)` (§IV-B), and `P`
//!   is the share of hits. The left side falls and the right side rises
//!   with `t`, so the rule is `t ≤ t*` for one threshold, which
//!   [`HitClassifier`] finds once by bisection: per sample it is then one
//!   comparison, not two exponentials.
//! - Our addition: at `t*` both misclassification rates equal the same
//!   `α`, so the raw share `r̄` has expectation `α + P·(1 − 2α)`;
//!   [`HitClassifier::estimate_corrected`] inverts that. The paper's raw
//!   estimate stays available ([`estimate_hit_probability`]).
//! - Our addition: [`Calibration`]. Profiled costs assume the core's caches
//!   to ourselves; a co-runner thrashing them makes every cost larger. The
//!   host measures the busy time of each window and the model predicts it;
//!   an EWMA of their ratio (clamped to `[0.25, 16]`) scales predictions.
//!
//! # Invariants
//!
//! - Estimates are validated (`λ_f`, `P` in `[0, 1]`, `λ_pkt ≥ 0`, all
//!   finite); a budget below zero is clamped to 0 and flagged.
//! - A fit has a positive, finite scale.
//!
//! # Cost
//!
//! Eq. 4 is a few flops. Fitting is O(samples), offline. Classifying is
//! one comparison per sample; the threshold costs ~100 CDF evaluations
//! once per pair of fits.

use crate::error::{check_range, AdaptError};

/// Profiled constants of the pipeline, ns per packet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// Retrieval time when the flow entry is in the cache (`T_r^H`).
    pub t_r_hit_ns: f64,
    /// Retrieval time when it comes from memory (`T_r^M`).
    pub t_r_miss_ns: f64,
    /// Whole time of a new flow's packet, insertion included (`T_i`).
    pub t_i_ns: f64,
}

/// A window's run-time conditions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OnlineEstimate {
    /// `λ_f`: flow-table insertions / packets processed, in `[0, 1]`.
    pub new_flow_ratio: f64,
    /// `λ_pkt`: packets per second arriving at the queue, ≥ 0.
    pub packet_rate: f64,
    /// `P`: probability a flow entry is retrieved from the cache, `[0, 1]`.
    pub hit_probability: f64,
}

impl OnlineEstimate {
    fn validate(&self) -> Result<(), AdaptError> {
        check_range("new_flow_ratio", self.new_flow_ratio, 0.0, 1.0, "[0, 1]")?;
        check_range("hit_probability", self.hit_probability, 0.0, 1.0, "[0, 1]")?;
        check_range("packet_rate", self.packet_rate, 0.0, f64::MAX, "finite, >= 0")?;
        Ok(())
    }
}

/// Eq. 3: expected time of one packet when known flows cost `t_p_ns` to
/// process.
pub fn packet_time_ns(model: &CostModel, est: &OnlineEstimate, t_p_ns: f64) -> f64 {
    let p = est.hit_probability;
    let t_r = model.t_r_hit_ns * p + model.t_r_miss_ns * (1.0 - p);
    (1.0 - est.new_flow_ratio) * (t_r + t_p_ns) + est.new_flow_ratio * model.t_i_ns
}

/// The processing budget per packet for the next window (Eq. 4 solved).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Target {
    /// `T_p^target`, ns, ≥ 0; infinite when nothing arrives (or every
    /// packet is a new flow and insertions alone fit).
    pub t_p_ns: f64,
    /// The solution was negative (retrieval and insertion alone exceed the
    /// time per packet) and was clamped to 0: even the lightest states will
    /// not keep up.
    pub clamped: bool,
}

/// Eq. 4: `T_p` such that Eq. 3 equals `1/λ_pkt`.
pub fn target_processing_ns(model: &CostModel, est: &OnlineEstimate) -> Result<Target, AdaptError> {
    est.validate()?;
    if est.packet_rate == 0.0 {
        return Ok(Target {
            t_p_ns: f64::INFINITY,
            clamped: false,
        });
    }
    let per_packet = 1e9 / est.packet_rate;
    let lf = est.new_flow_ratio;
    let p = est.hit_probability;
    if lf == 1.0 {
        // T_p has no weight: either insertions fit or nothing helps.
        let fits = model.t_i_ns <= per_packet;
        return Ok(Target {
            t_p_ns: if fits { f64::INFINITY } else { 0.0 },
            clamped: !fits,
        });
    }
    let t_r = model.t_r_hit_ns * p + model.t_r_miss_ns * (1.0 - p);
    let t = (per_packet - lf * model.t_i_ns) / (1.0 - lf) - t_r;
    Ok(if t < 0.0 {
        Target {
            t_p_ns: 0.0,
            clamped: true,
        }
    } else {
        Target {
            t_p_ns: t,
            clamped: false,
        }
    })
}

/// Euler–Mascheroni constant: the mean of a standard Gumbel.
const EULER_GAMMA: f64 = 0.577_215_664_901_532_9;

/// A (maximum) Gumbel distribution: `CDF(t) = exp(−exp(−(t − location)/scale))`,
/// right-skewed like retrieval latencies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GumbelFit {
    pub location: f64,
    /// > 0.
    pub scale: f64,
}

impl GumbelFit {
    /// Method of moments: `scale = s·√6/π`, `location = mean − γ·scale`,
    /// with `s` the sample standard deviation. Needs ≥ 2 finite samples
    /// with spread.
    pub fn from_samples(samples: &[f64]) -> Result<Self, AdaptError> {
        let n = samples.len();
        let mean = samples.iter().sum::<f64>() / n as f64;
        let var = if n >= 2 {
            samples.iter().map(|&t| (t - mean) * (t - mean)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        let sd = var.sqrt();
        if n < 2 || !(sd.is_finite() && sd > 0.0) {
            return Err(AdaptError::DegenerateSamples { got: n, std_dev: sd });
        }
        let scale = sd * 6f64.sqrt() / std::f64::consts::PI;
        Ok(GumbelFit {
            location: mean - EULER_GAMMA * scale,
            scale,
        })
    }

    pub fn cdf(&self, t: f64) -> f64 {
        (-(-(t - self.location) / self.scale).exp()).exp()
    }

    /// The inverse CDF, for `u` in `(0, 1)`.
    pub fn quantile(&self, u: f64) -> f64 {
        self.location - self.scale * (-u.ln()).ln()
    }

    pub fn mean(&self) -> f64 {
        self.location + EULER_GAMMA * self.scale
    }
}

/// §IV-B's hit/miss rule for two fits, reduced to a threshold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HitClassifier {
    /// A sample `t ≤ threshold` counts as a hit.
    pub threshold: f64,
    /// Each misclassification rate at the threshold:
    /// `1 − CDF_hit(t*) = CDF_miss(t*)`.
    pub alpha: f64,
}

impl HitClassifier {
    pub fn new(hit: &GumbelFit, miss: &GumbelFit) -> Self {
        // g(t) = 1 − CDF_hit(t) − CDF_miss(t) falls from 1 to −1.
        let g = |t: f64| 1.0 - hit.cdf(t) - miss.cdf(t);
        let mut lo = hit.quantile(1e-12).min(miss.quantile(1e-12));
        let mut hi = hit.quantile(1.0 - 1e-12).max(miss.quantile(1.0 - 1e-12));
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if mid <= lo || mid >= hi {
                break;
            }
            if g(mid) >= 0.0 {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        HitClassifier {
            threshold: lo,
            alpha: miss.cdf(lo),
        }
    }

    /// Whether a retrieval time counts as a cache hit.
    pub fn is_hit(&self, t_ns: f64) -> bool {
        t_ns <= self.threshold
    }

    /// The paper's `P`: share of samples classified as hits (`None`
    /// without samples).
    pub fn estimate(&self, samples: &[f64]) -> Option<f64> {
        if samples.is_empty() {
            return None;
        }
        let hits = samples.iter().filter(|&&t| self.is_hit(t)).count();
        Some(hits as f64 / samples.len() as f64)
    }

    /// `P` with the classification bias removed: `(r̄ − α)/(1 − 2α)`,
    /// clamped to `[0, 1]` (the raw share when the fits cannot be told
    /// apart, `α ≥ 0.5`).
    pub fn estimate_corrected(&self, samples: &[f64]) -> Option<f64> {
        let raw = self.estimate(samples)?;
        if self.alpha >= 0.5 {
            return Some(raw);
        }
        Some(((raw - self.alpha) / (1.0 - 2.0 * self.alpha)).clamp(0.0, 1.0))
    }
}

/// §IV-B: the share of retrieval-time samples classified as cache hits.
pub fn estimate_hit_probability(hit: &GumbelFit, miss: &GumbelFit, samples: &[f64]) -> Option<f64> {
    HitClassifier::new(hit, miss).estimate(samples)
}

/// Our addition: an EWMA of measured over predicted busy time per window,
/// the factor by which real costs exceed profiled ones now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Calibration {
    factor: f64,
    weight: f64, // of the newest window, in (0, 1]
}

impl Calibration {
    pub const MIN_FACTOR: f64 = 0.25;
    pub const MAX_FACTOR: f64 = 16.0;

    /// Starts at factor 1; `weight` in `(0, 1]` is the newest window's share.
    pub fn new(weight: f64) -> Result<Self, AdaptError> {
        check_range("calibration weight", weight, f64::MIN_POSITIVE, 1.0, "(0, 1]")?;
        Ok(Calibration { factor: 1.0, weight })
    }

    /// Folds in one window: `busy_ns` measured, `predicted_ns` by the
    /// model for the same packets. Windows without a positive finite
    /// prediction, or with a negative or non-finite measurement, carry no
    /// information and are ignored (a measured 0 is a sample: free work).
    pub fn observe(&mut self, busy_ns: f64, predicted_ns: f64) {
        if !(busy_ns.is_finite() && predicted_ns.is_finite() && busy_ns >= 0.0 && predicted_ns > 0.0) {
            return;
        }
        let ratio = busy_ns / predicted_ns;
        self.factor = ((1.0 - self.weight) * self.factor + self.weight * ratio)
            .clamp(Self::MIN_FACTOR, Self::MAX_FACTOR);
    }

    /// Real cost / profiled cost, in `[0.25, 16]`.
    pub fn factor(&self) -> f64 {
        self.factor
    }

    /// The model with every profiled cost scaled to what it costs now:
    /// solve Eq. 4 with this.
    pub fn apply(&self, model: &CostModel) -> CostModel {
        CostModel {
            t_r_hit_ns: model.t_r_hit_ns * self.factor,
            t_r_miss_ns: model.t_r_miss_ns * self.factor,
            t_i_ns: model.t_i_ns * self.factor,
        }
    }

    /// A budget in real ns expressed in the graph's profiled ns, for
    /// [`crate::Routine::compute`].
    pub fn to_profiled(&self, real_ns: f64) -> f64 {
        real_ns / self.factor
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;
    use rand_core::SeedableRng;
    use rand_pcg::Pcg64Mcg;

    fn uniform(rng: &mut Pcg64Mcg) -> f64 {
        // (0, 1): never 0, so ln is finite.
        ((rng.next_u64() >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
    }

    fn draw(rng: &mut Pcg64Mcg, g: &GumbelFit, n: usize) -> Vec<f64> {
        (0..n).map(|_| g.quantile(uniform(rng))).collect()
    }

    fn model() -> CostModel {
        CostModel {
            t_r_hit_ns: 90.0,
            t_r_miss_ns: 200.0,
            t_i_ns: 210.0,
        }
    }

    proptest! {
        /// Eq. 4's answer put back into Eq. 3 gives 1/λ_pkt (when not clamped).
        #[test]
        fn eq4_inverts_eq3(lf in 0.0f64..0.99, p in 0.0f64..=1.0, rate in 1e5f64..2e7,
                           h in 10.0f64..200.0, m in 0.0f64..300.0, i in 10.0f64..500.0) {
            let model = CostModel { t_r_hit_ns: h, t_r_miss_ns: h + m, t_i_ns: i };
            let est = OnlineEstimate { new_flow_ratio: lf, packet_rate: rate, hit_probability: p };
            let t = target_processing_ns(&model, &est).unwrap();
            let back = packet_time_ns(&model, &est, t.t_p_ns);
            let want = 1e9 / rate;
            if t.clamped {
                prop_assert_eq!(t.t_p_ns, 0.0);
                prop_assert!(back > want);
            } else {
                prop_assert!((back - want).abs() <= 1e-9 * want, "{back} vs {want}");
            }
        }
    }

    #[test]
    fn eq4_edges() {
        let m = model();
        let est = |lf, rate, p| OnlineEstimate {
            new_flow_ratio: lf,
            packet_rate: rate,
            hit_probability: p,
        };
        assert_eq!(
            target_processing_ns(&m, &est(0.0, 0.0, 1.0)).unwrap().t_p_ns,
            f64::INFINITY
        );
        // 5 Mpps = 200 ns/packet, all hits: 200 − 90 = 110.
        let t = target_processing_ns(&m, &est(0.0, 5e6, 1.0)).unwrap();
        assert!((t.t_p_ns - 110.0).abs() < 1e-9 && !t.clamped);
        // 10 Mpps = 100 ns, all misses: 100 − 200 < 0.
        let t = target_processing_ns(&m, &est(0.0, 1e7, 0.0)).unwrap();
        assert_eq!(
            t,
            Target {
                t_p_ns: 0.0,
                clamped: true
            }
        );
        let t = target_processing_ns(&m, &est(1.0, 1e6, 0.5)).unwrap();
        assert_eq!(t.t_p_ns, f64::INFINITY);
        let t = target_processing_ns(&m, &est(1.0, 1e7, 0.5)).unwrap();
        assert!(t.clamped);
        for bad in [
            est(-0.1, 1.0, 0.5),
            est(0.1, -1.0, 0.5),
            est(0.1, 1.0, 1.5),
            est(0.1, f64::NAN, 0.5),
        ] {
            assert!(matches!(
                target_processing_ns(&m, &bad),
                Err(AdaptError::OutOfRange { .. })
            ));
        }
    }

    #[test]
    fn gumbel_fit_recovers_parameters() {
        let mut rng = Pcg64Mcg::seed_from_u64(7);
        for (loc, scale) in [(85.0, 8.0), (180.0, 35.0), (0.0, 1.0), (1e4, 3e3)] {
            let truth = GumbelFit { location: loc, scale };
            let s = draw(&mut rng, &truth, 100_000);
            let fit = GumbelFit::from_samples(&s).unwrap();
            // Standard errors at n = 1e5 are well under 1% of the scale.
            assert!((fit.scale - scale).abs() < 0.02 * scale, "{fit:?} vs {truth:?}");
            assert!((fit.location - loc).abs() < 0.02 * scale, "{fit:?} vs {truth:?}");
            // The fitted CDF agrees with the empirical one (KS distance).
            let mut sorted = s.clone();
            sorted.sort_by(f64::total_cmp);
            let ks = sorted
                .iter()
                .enumerate()
                .map(|(i, &t)| (fit.cdf(t) - (i as f64 + 0.5) / sorted.len() as f64).abs())
                .fold(0.0, f64::max);
            assert!(ks < 0.01, "KS {ks}");
        }
        assert!(GumbelFit::from_samples(&[]).is_err());
        assert!(GumbelFit::from_samples(&[3.0]).is_err());
        assert!(GumbelFit::from_samples(&[3.0, 3.0]).is_err());
        assert!(GumbelFit::from_samples(&[3.0, f64::NAN]).is_err());
    }

    proptest! {
        /// The threshold rule is the paper's two-CDF rule, away from the
        /// threshold's rounding.
        #[test]
        fn threshold_is_the_cdf_rule(hl in 50.0f64..150.0, hs in 1.0f64..30.0,
                                     ml in 100.0f64..400.0, ms in 5.0f64..80.0,
                                     t in 0.0f64..800.0) {
            let hit = GumbelFit { location: hl, scale: hs };
            let miss = GumbelFit { location: ml, scale: ms };
            let c = HitClassifier::new(&hit, &miss);
            let direct = 1.0 - hit.cdf(t) >= miss.cdf(t);
            if (t - c.threshold).abs() > 1e-6 * c.threshold.abs().max(1.0) {
                prop_assert_eq!(c.is_hit(t), direct);
            }
            prop_assert!((1.0 - hit.cdf(c.threshold) - c.alpha).abs() < 1e-9);
        }
    }

    /// P from mixtures of known P: samples drawn from profiled fits (the
    /// paper's figures: hit 90 ns with cv 0.11, miss 200 ns with cv 0.225),
    /// fits made from separate profiling samples, K = 1000 per window.
    #[test]
    fn hit_probability_within_5_percent() {
        let mut rng = Pcg64Mcg::seed_from_u64(22);
        let moments = |mean: f64, cv: f64| {
            let scale = mean * cv * 6f64.sqrt() / std::f64::consts::PI;
            GumbelFit {
                location: mean - EULER_GAMMA * scale,
                scale,
            }
        };
        let (hit_true, miss_true) = (moments(90.0, 0.11), moments(200.0, 0.225));
        let hit = GumbelFit::from_samples(&draw(&mut rng, &hit_true, 50_000)).unwrap();
        let miss = GumbelFit::from_samples(&draw(&mut rng, &miss_true, 50_000)).unwrap();
        let c = HitClassifier::new(&hit, &miss);
        let (mut worst_raw, mut worst_cor, mut sum_raw, mut sum_cor, mut n) = (0f64, 0f64, 0.0, 0.0, 0.0);
        for round in 0..200 {
            let p = f64::from(round % 101) / 100.0;
            let mut hits = 0u32;
            let samples: Vec<f64> = (0..1000)
                .map(|_| {
                    let is_hit = uniform(&mut rng) < p;
                    hits += u32::from(is_hit);
                    let g = if is_hit { &hit_true } else { &miss_true };
                    g.quantile(uniform(&mut rng))
                })
                .collect();
            // The realised share of hits is the truth for this window.
            let p = f64::from(hits) / 1000.0;
            let raw = estimate_hit_probability(&hit, &miss, &samples).unwrap();
            let cor = c.estimate_corrected(&samples).unwrap();
            let err_raw = (raw - p).abs();
            let err_cor = (cor - p).abs();
            worst_raw = worst_raw.max(err_raw);
            worst_cor = worst_cor.max(err_cor);
            sum_raw += err_raw;
            sum_cor += err_cor;
            n += 1.0;
        }
        eprintln!(
            "P estimation: alpha {:.4}, mean |error| raw {:.4} corrected {:.4}, worst raw {:.4} corrected {:.4}",
            c.alpha, sum_raw / n, sum_cor / n, worst_raw, worst_cor
        );
        assert!(worst_raw < 0.05 && worst_cor < 0.05);
        assert!(c.estimate(&[]).is_none());
    }

    /// With overlapping fits the raw share is biased toward 1/2 and the
    /// correction removes it.
    #[test]
    fn correction_removes_bias_on_overlap() {
        let mut rng = Pcg64Mcg::seed_from_u64(5);
        let hit = GumbelFit {
            location: 100.0,
            scale: 20.0,
        };
        let miss = GumbelFit {
            location: 130.0,
            scale: 25.0,
        };
        let c = HitClassifier::new(&hit, &miss);
        assert!(c.alpha > 0.2, "alpha {}", c.alpha);
        for p in [0.1, 0.5, 0.9] {
            let samples: Vec<f64> = (0..200_000)
                .map(|_| {
                    let g = if uniform(&mut rng) < p { &hit } else { &miss };
                    g.quantile(uniform(&mut rng))
                })
                .collect();
            let raw = c.estimate(&samples).unwrap();
            let cor = c.estimate_corrected(&samples).unwrap();
            assert!((cor - p).abs() < 0.02, "p {p}: corrected {cor}");
            if p != 0.5 {
                assert!((raw - p).abs() > 0.05, "p {p}: raw {raw} unexpectedly unbiased");
            }
        }
    }

    #[test]
    fn calibration_tracks_ratio_and_clamps() {
        let mut c = Calibration::new(0.5).unwrap();
        assert_eq!(c.factor(), 1.0);
        c.observe(300.0, 100.0); // ratio 3
        assert_eq!(c.factor(), 2.0);
        c.observe(300.0, 100.0);
        assert_eq!(c.factor(), 2.5);
        c.observe(1.0, 0.0); // ignored
        c.observe(f64::NAN, 1.0); // ignored
        assert_eq!(c.factor(), 2.5);
        for _ in 0..100 {
            c.observe(1e6, 1.0);
        }
        assert_eq!(c.factor(), Calibration::MAX_FACTOR);
        for _ in 0..100 {
            c.observe(0.0, 1.0);
        }
        assert_eq!(c.factor(), Calibration::MIN_FACTOR);
        let m = c.apply(&model());
        assert_eq!(m.t_i_ns, 210.0 * 0.25);
        assert_eq!(c.to_profiled(10.0), 40.0);
        assert!(Calibration::new(0.0).is_err() && Calibration::new(1.5).is_err());
    }
}
