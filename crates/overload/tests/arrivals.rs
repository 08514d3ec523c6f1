//! The arrival generators against references written apart: `Sine`
//! against its rate integral (closed form without period reduction,
//! itself checked by Simpson's rule on the rate), `Constant` against exact
//! rationals, `Recorded` against integer arithmetic on real captures.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use clarion_overload::{Constant, Recorded, Sine};
use proptest::prelude::*;

/// Λ(t) in the plain closed form: m·t + m·a·T/(2π)·(1 − cos(2πt/T)), m per ns.
fn lambda(mean_pps: f64, a: f64, period: u64, t: u64) -> f64 {
    let m = mean_pps / 1e9;
    let (t, p) = (t as f64, period as f64);
    let w = 2.0 * std::f64::consts::PI / p;
    m * t + m * a / w * (1.0 - (w * t).cos())
}

/// Λ(t) by Simpson's rule on the rate.
fn simpson(mean_pps: f64, a: f64, period: u64, t: u64, steps: u32) -> f64 {
    let rate = |x: f64| mean_pps / 1e9 * (1.0 + a * (2.0 * std::f64::consts::PI * x / period as f64).sin());
    let h = t as f64 / f64::from(steps);
    let mut sum = rate(0.0) + rate(t as f64);
    for i in 1..steps {
        sum += rate(f64::from(i) * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    sum * h / 3.0
}

#[test]
fn the_closed_form_is_the_integral_of_the_rate() {
    for (pps, a, period, t) in [
        (7.4e6, 1.0, 100_000_000, 37_000_000),
        (1e6, 0.3, 1_000, 12_345),
        (5e5, 0.9, 250_000, 1_000_000),
    ] {
        let exact = lambda(pps, a, period, t);
        let numeric = simpson(pps, a, period, t, 20_000);
        assert!(
            (exact - numeric).abs() < 1e-6 * exact.max(1.0),
            "{exact} vs {numeric}"
        );
    }
}

/// Arrivals in [0, t) for each t, by a merge walk over sorted arrivals.
fn counts(arrivals: &[u64], ts: &[u64]) -> Vec<u64> {
    ts.iter()
        .map(|&t| arrivals.partition_point(|&a| a < t) as u64)
        .collect()
}

fn check_counts(pps: f64, a: f64, period: u64, horizon: u64, probes: u64) {
    let arrivals: Vec<u64> = Sine::new(pps, a, period)
        .unwrap()
        .take_while(|&t| t < horizon)
        .collect();
    assert!(arrivals.windows(2).all(|w| w[0] <= w[1]), "non-decreasing");
    let ts: Vec<u64> = (1..=probes).map(|i| horizon * i / probes).collect();
    for (t, n) in ts.iter().zip(counts(&arrivals, &ts)) {
        let expect = lambda(pps, a, period, *t).floor();
        assert!(
            (n as f64 - expect).abs() <= 1.0,
            "t={t}: {n} arrivals, floor(Λ)={expect} (pps {pps}, a {a}, T {period})"
        );
    }
}

#[test]
fn mona_sine_counts_follow_the_integral() {
    // MONA Fig. 7b: 0 to 14.8 Mpps, T = 100 ms; 0.3 s of it (2.2 M packets).
    check_counts(7.4e6, 1.0, 100_000_000, 300_000_000, 5_000);
}

#[test]
fn mean_rate_over_whole_periods() {
    for (pps, a, period, periods) in [
        (7.4e6, 1.0, 10_000_000, 5u64),
        (2e5, 0.5, 3_000_000, 7),
        (1e9, 1.0, 1_000, 1000),
    ] {
        let end = period * periods;
        let n = Sine::new(pps, a, period)
            .unwrap()
            .take_while(|&t| t < end)
            .count();
        let rate = n as f64 / (end as f64 / 1e9);
        assert!((rate - pps).abs() <= 1e-3 * pps, "{rate} vs {pps}");
    }
}

#[test]
fn cost_per_arrival_is_a_few_evaluations() {
    let mut s = Sine::new(7.4e6, 1.0, 100_000_000).unwrap();
    let n = s.by_ref().take(1_000_000).count() as f64;
    let per = s.evaluations() as f64 / n;
    eprintln!("Sine: {per:.2} evaluations of Λ per arrival");
    assert!(per < 8.0, "{per} evaluations per arrival");
}

#[test]
fn flat_sine_is_constant() {
    let a: Vec<u64> = Sine::new(1e6, 0.0, 777).unwrap().take(10_000).collect();
    let c: Vec<u64> = Constant::new(1_000_000).unwrap().take(10_000).collect();
    for (x, y) in a.iter().zip(&c) {
        assert!(x.abs_diff(*y) <= 1, "{x} vs {y}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn sine_counts_follow_the_integral(
        pps in 1e3f64..5e8,
        a in prop_oneof![Just(0.0), Just(1.0), 0.0f64..=1.0],
        period in 1u64..50_000_000,
    ) {
        // About 20,000 packets whatever the rate.
        let horizon = (2e4 / pps * 1e9) as u64 + 1;
        check_counts(pps, a, period, horizon, 400);
    }

    #[test]
    fn constant_is_the_exact_ceiling(pps in 1u64..2_000_000_000, k in 0u64..1_000_000) {
        let t = Constant::new(pps).unwrap().nth(k as usize).unwrap();
        // t = ⌈k·10⁹/pps⌉: t·pps ≥ k·10⁹ > (t−1)·pps.
        let (t, pps, k) = (u128::from(t), u128::from(pps), u128::from(k));
        prop_assert!(t * pps >= k * 1_000_000_000);
        prop_assert!(t == 0 || (t - 1) * pps < k * 1_000_000_000);
    }

    #[test]
    fn recorded_scales_gaps(stamps in prop::collection::vec(0u64..1u64 << 40, 1..200), speedup in 1u64..1000) {
        let got: Vec<u64> = Recorded::new(stamps.clone(), speedup as f64).unwrap().collect();
        let mut latest = stamps[0];
        for (ts, g) in stamps.iter().zip(got) {
            latest = latest.max(*ts);
            let off = latest - stamps[0];
            // round(off / s), halves up, in integers.
            prop_assert_eq!(g, (2 * off + speedup) / (2 * speedup));
        }
    }
}

#[test]
fn recorded_real_captures_keep_their_gaps() {
    for path in clarion_testdata::capture_files() {
        let stamps: Vec<u64> = clarion_testdata::frames(&path).iter().map(|f| f.ts_ns).collect();
        let mut r = Recorded::new(stamps.clone(), 1.0).unwrap();
        let same: Vec<u64> = r.by_ref().collect();
        // Stamped before some earlier packet (not only the one just before).
        let back = (1..stamps.len())
            .filter(|&i| stamps[..i].iter().any(|&e| e > stamps[i]))
            .count() as u64;
        assert_eq!(r.reordered(), back, "{}", path.display());
        let mut latest = stamps[0];
        for (ts, a) in stamps.iter().zip(&same) {
            latest = latest.max(*ts);
            assert_eq!(*a, latest - stamps[0]);
        }
        let fast: Vec<u64> = Recorded::new(stamps.clone(), 3.0).unwrap().collect();
        for (a, f) in same.iter().zip(&fast) {
            assert_eq!(*f, (2 * a + 3) / 6, "{}", path.display());
        }
    }
}
