//! Adaptive sampling of export work: Trident's AIMD on the export ratio.
//!
//! # What?
//!
//! Export work (header records into datagrams, frames into VXLAN
//! datagrams or files, and the sends) is given a CPU budget, a fraction
//! of one core (`--export-cpu 0.3`). When the work would exceed it, only
//! a fraction `f` of the packets the policies take is exported, each
//! record carrying the ratio it stands for; events, classification and the
//! policies' counters still see every packet. No budget means no sampler
//! at all: the exporter pays one `Option` branch per taken packet.
//!
//! # The control rule (AIMD)
//!
//! Every control interval (default [`DEFAULT_INTERVAL_NS`], 100 ms of
//! wall clock) the controller computes the export work's share of the
//! interval, `s = work_ns / elapsed_ns`, and, with budget `b`:
//!
//! - `s > b` — **multiplicative decrease**: `f ← max(f·max(β, t/s), F_MIN)`,
//!   β = ½;
//! - `s < b·(1 − m)` — **additive increase**: `f ← min(1, f + a, f·t/s)`,
//!   a = 1/16;
//! - otherwise (the dead band `[b·(1 − m), b]`, m = 0.1) `f` stays;
//!
//! where `t = b·(1 − m/2)` is the middle of the band. At a given load the
//! work is proportional to `f`, so `f·t/s` is the fraction the last
//! interval predicts to land mid-band; both steps stop there:
//!
//! - The decrease factor is at least β: like TCP's halving, at most one
//!   halving per interval, so a single noisy interval cannot cut the
//!   export deeply. Unlike TCP, whose loss signal says nothing of the
//!   excess, the share measures it: a 1% excess (measurement noise at the
//!   band's top) costs 5%, not half, of the export.
//! - The increase is TCP's additive probe, capped: without the cap one
//!   step of `a` from a small `f` (1/1000 + 1/16) would overshoot many
//!   times over and the controller would saw between overload and halving.
//!
//! Why it converges: under a constant load, above the band `f` falls by
//! at least half the way to `t` each interval (⌈log₂(s/b)⌉ intervals at
//! most to get under `b`); below it, `f` grows by `a` or straight to `t`,
//! never past `b` by the model; inside it nothing changes. The band is a
//! fixed point, like TCP's window between losses, the dead band replacing
//! the probe that costs TCP its sawtooth. A doubling of the load is undone
//! by one decrease; a halving is recovered additively in at most
//! `⌈f/a⌉` intervals (0.8 s from ½ to 1 at 100 ms).
//! - When the load falls so that the whole stream fits, `f` climbs back to
//!   exactly 1 (the `min(1, …)`) and the exporter stops drawing at all.
//!
//! # Integer ratios from a real fraction
//!
//! Records carry an integer `sample_ratio` N (one packet stands for N), but
//! `f` is real so that the controller is not stuck between 1 and ½. Each
//! taken packet is exported with ratio `lo = ⌊1/f⌋` with probability
//! `q/lo`, with ratio `hi = lo + 1` with probability `(1 − q)/hi`, and
//! skipped otherwise, where `q = lo·(f·hi − 1)` makes the two add up to `f`.
//! Given its ratio N a packet is exported with probability 1/N, so the sum
//! of the ratios of the exported records is an unbiased estimate of the
//! packets taken (Horvitz–Thompson), whatever the changes of `f`. One draw
//! of a seeded PCG (`rand_pcg`, ~1 ns) and two compares per taken packet,
//! and none while `f = 1`.
//!
//! Packets, not flows, are sampled, as Trident's BPF sample ratio does: a
//! flow hash would keep whole flows but let one heavy flow make the
//! work, and the budget, swing by its own size; random packet sampling
//! also cannot alias with periodic traffic the way a 1-in-N counter can.
//! A packet taken by several destinations is exported to all or none.
//!
//! # Measuring the work
//!
//! The work is timed by a [`WorkClock`]: in production
//! [`MonotonicClock`] (`Instant`, ~20-25 ns a read through the vDSO),
//! in tests a simulated one. Timing every exported packet would cost two
//! reads, as much as a header record's encoding; so only about one
//! exported packet in `time_every` (default 8) is timed, the gaps drawn
//! uniformly from `1..=2·time_every − 1` (mean `time_every`, so no period
//! to alias with the encoder's datagram sends), and each timed duration
//! counts `time_every` times. Cost: 2 reads per 8 exported packets,
//! ~6 ns a packet. The timed packets' second read also serves as "now"
//! for closing an interval; [`crate::Exporter::tick`] times the flushes fully and
//! closes intervals when few packets are exported. Wall-clock time of the
//! work stands for its CPU time: the sends never block, so they differ
//! only by preemption, which a loaded host charges to the export (the
//! safe side).

use std::time::Instant;

use rand_core::{Rng as _, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::ExportError;

/// The default control interval: 100 ms of wall clock.
pub const DEFAULT_INTERVAL_NS: u64 = 100_000_000;
/// The deepest multiplicative decrease of the fraction in one interval.
pub const BETA: f64 = 0.5;
/// Additive increase of the fraction per interval below the band.
pub const STEP: f64 = 1.0 / 16.0;
/// Width of the dead band under the budget, as a fraction of it.
pub const MARGIN: f64 = 0.1;
/// The smallest fraction (ratio 1,000,000), so that the ratio fits a record.
pub const F_MIN: f64 = 1e-6;

/// How export work is sampled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingConfig {
    /// The export work's CPU budget as a fraction of one core, in (0, 1];
    /// `None`: export every packet, no sampler.
    pub budget: Option<f64>,
    /// The control interval, wall clock.
    pub interval_ns: u64,
    /// About one exported packet in this many is timed (≥ 1).
    pub time_every: u32,
    /// Seeds the sampling draws (runs with one seed and one load repeat).
    pub seed: u64,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        SamplingConfig {
            budget: None,
            interval_ns: DEFAULT_INTERVAL_NS,
            time_every: 8,
            seed: 0x0074_7269_6465_6e74, // "trident"
        }
    }
}

/// Wall-clock time and the timing of export work.
///
/// `begin` and `end` bracket one piece of export work; `end` returns its
/// duration and the time it ended (one clock read for both). Times are
/// monotonic. Real: [`MonotonicClock`]; tests inject simulated time and
/// simulated costs.
pub trait WorkClock: Send {
    /// Nanoseconds since some fixed origin; never decreases.
    fn now_ns(&mut self) -> u64;
    /// Export work starts.
    fn begin(&mut self);
    /// Export work ends: `(its duration, now)` in nanoseconds.
    fn end(&mut self) -> (u64, u64);
}

/// [`WorkClock`] of `std::time::Instant` (one read per call).
#[derive(Debug)]
pub struct MonotonicClock {
    origin: Instant,
    started: Instant,
}

impl MonotonicClock {
    pub fn new() -> MonotonicClock {
        let now = Instant::now();
        MonotonicClock {
            origin: now,
            started: now,
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl WorkClock for MonotonicClock {
    fn now_ns(&mut self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn begin(&mut self) {
        self.started = Instant::now();
    }

    fn end(&mut self) -> (u64, u64) {
        let now = Instant::now();
        let ns = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        (ns(now - self.started), ns(now - self.origin))
    }
}

/// The AIMD controller of the exported fraction (see the module doc).
/// Pure: it is told the time and the work, and never reads a clock.
#[derive(Clone, Debug)]
pub struct Aimd {
    budget: f64,
    interval_ns: u64,
    fraction: f64,
    /// Start of the open interval (`None` until the first observation).
    since_ns: Option<u64>,
    /// Work in the open interval.
    work_ns: u64,
    total_work_ns: u64,
    last_share: f64,
    intervals: u64,
    decreases: u64,
    increases: u64,
}

impl Aimd {
    /// A controller of `budget` (a fraction of one core, in (0, 1]) and
    /// `interval_ns` (> 0), exporting every packet at first.
    pub fn new(budget: f64, interval_ns: u64) -> Result<Aimd, ExportError> {
        // Written to be false for NaN.
        if !(budget > 0.0 && budget <= 1.0) {
            return Err(ExportError::Budget(budget));
        }
        if interval_ns == 0 {
            return Err(ExportError::Interval);
        }
        Ok(Aimd {
            budget,
            interval_ns,
            fraction: 1.0,
            since_ns: None,
            work_ns: 0,
            total_work_ns: 0,
            last_share: 0.0,
            intervals: 0,
            decreases: 0,
            increases: 0,
        })
    }

    /// The fraction of taken packets exported, in [`F_MIN`], 1].
    pub fn fraction(&self) -> f64 {
        self.fraction
    }

    /// Export work done since the last observation.
    pub fn add_work(&mut self, ns: u64) {
        self.work_ns = self.work_ns.saturating_add(ns);
        self.total_work_ns = self.total_work_ns.saturating_add(ns);
    }

    /// The time is `now_ns`: closes the interval if it has lasted
    /// `interval_ns`, and applies the rule. True if the fraction changed.
    pub fn observe(&mut self, now_ns: u64) -> bool {
        let Some(since) = self.since_ns else {
            // The first observation opens the first interval; work before
            // it has no interval to be a share of.
            self.since_ns = Some(now_ns);
            self.work_ns = 0;
            return false;
        };
        let elapsed = now_ns.saturating_sub(since);
        if elapsed < self.interval_ns {
            return false;
        }
        let share = self.work_ns as f64 / elapsed as f64;
        self.since_ns = Some(now_ns);
        self.work_ns = 0;
        self.intervals += 1;
        self.last_share = share;
        let next = next_fraction(self.fraction, share, self.budget);
        if next < self.fraction {
            self.decreases += 1;
        } else if next > self.fraction {
            self.increases += 1;
        } else {
            return false;
        }
        self.fraction = next;
        true
    }
}

/// One step of the rule: the fraction after an interval in which the work
/// took `share` of the time, with `budget`.
pub fn next_fraction(f: f64, share: f64, budget: f64) -> f64 {
    let mid = budget * (1.0 - MARGIN / 2.0);
    if share > budget {
        (f * BETA.max(mid / share)).max(F_MIN)
    } else if share < budget * (1.0 - MARGIN) {
        let aim = if share > 0.0 {
            f * mid / share
        } else {
            f64::INFINITY
        };
        (f + STEP).min(aim).min(1.0)
    } else {
        f
    }
}

/// The sampler's state, for summaries.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingStats {
    pub budget: f64,
    /// The fraction of taken packets exported now.
    pub fraction: f64,
    /// `1 / fraction`: the mean ratio in force (records carry ⌊·⌋ or ⌈·⌉).
    pub ratio: f64,
    /// Taken packets exported, and skipped by sampling.
    pub exported: u64,
    pub skipped: u64,
    /// Control intervals closed, and the changes of the fraction.
    pub intervals: u64,
    pub decreases: u64,
    pub increases: u64,
    /// The last closed interval's share of export work.
    pub last_share: f64,
    /// Export work measured (estimated from the timed packets), ns.
    pub work_ns: u64,
}

/// The exporter's sampler: the controller, the per-packet draw and the
/// timing of the work.
pub(crate) struct Sampler {
    aimd: Aimd,
    clock: Box<dyn WorkClock>,
    rng: Pcg64Mcg,
    /// Ratios of the two ways to be exported, and the draw thresholds:
    /// a draw below `lo_below` exports with `lo`, below `take_below` with `hi`.
    lo: u32,
    hi: u32,
    lo_below: u64,
    take_below: u64,
    time_every: u32,
    /// Exported packets until the next timed one (≥ 1).
    until_timed: u32,
    exported: u64,
    skipped: u64,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("aimd", &self.aimd)
            .finish_non_exhaustive()
    }
}

impl Sampler {
    /// The sampler of `config`, or `None` without a budget.
    pub fn new(config: &SamplingConfig, clock: Box<dyn WorkClock>) -> Result<Option<Sampler>, ExportError> {
        let Some(budget) = config.budget else {
            return Ok(None);
        };
        if config.time_every == 0 {
            return Err(ExportError::TimeEvery);
        }
        let mut s = Sampler {
            aimd: Aimd::new(budget, config.interval_ns)?,
            clock,
            rng: Pcg64Mcg::seed_from_u64(config.seed),
            lo: 1,
            hi: 1,
            lo_below: u64::MAX,
            take_below: u64::MAX,
            time_every: config.time_every,
            until_timed: 1,
            exported: 0,
            skipped: 0,
        };
        let now = s.clock.now_ns();
        s.aimd.observe(now);
        s.set_thresholds();
        Ok(Some(s))
    }

    /// Whether to export a taken packet, and the ratio its records carry.
    #[inline]
    pub fn admit(&mut self) -> Option<u32> {
        if self.aimd.fraction >= 1.0 {
            self.exported += 1;
            return Some(1);
        }
        let u = self.rng.next_u64();
        if u < self.lo_below {
            self.exported += 1;
            Some(self.lo)
        } else if u < self.take_below {
            self.exported += 1;
            Some(self.hi)
        } else {
            self.skipped += 1;
            None
        }
    }

    /// Before an exported packet's work: true if it is timed (then call
    /// [`Sampler::end`] after the work).
    #[inline]
    pub fn begin(&mut self) -> bool {
        self.until_timed -= 1;
        if self.until_timed > 0 {
            return false;
        }
        let span = u64::from(self.time_every) * 2 - 1;
        // Uniform on 1..=span: `span` < 2^33, so the product fits 128 bits.
        let gap = ((u128::from(self.rng.next_u64()) * u128::from(span)) >> 64) as u64 + 1;
        self.until_timed = u32::try_from(gap).unwrap_or(u32::MAX);
        self.clock.begin();
        true
    }

    /// After a timed packet's work: counts it `time_every` times.
    pub fn end(&mut self) {
        let (ns, now) = self.clock.end();
        self.aimd.add_work(ns.saturating_mul(u64::from(self.time_every)));
        self.observe(now);
    }

    /// Runs `work` (flushes) timed in full, then closes an interval if due.
    pub fn tick(&mut self, work: impl FnOnce()) {
        self.clock.begin();
        work();
        let (ns, now) = self.clock.end();
        self.aimd.add_work(ns);
        self.observe(now);
    }

    fn observe(&mut self, now: u64) {
        if self.aimd.observe(now) {
            self.set_thresholds();
        }
    }

    /// The draw thresholds of the fraction in force (see the module doc).
    fn set_thresholds(&mut self) {
        let f = self.aimd.fraction;
        if f >= 1.0 {
            (self.lo, self.hi, self.lo_below, self.take_below) = (1, 1, u64::MAX, u64::MAX);
            return;
        }
        let (lo, hi) = ratios(f);
        let q = f64::from(lo) * (f * f64::from(hi) - 1.0);
        let scale = 2f64.powi(64);
        // Float to int casts saturate; f < 1 keeps both below 2^64.
        self.lo_below = (q / f64::from(lo) * scale) as u64;
        self.take_below = (f * scale) as u64;
        (self.lo, self.hi) = (lo, hi);
    }

    pub fn stats(&self) -> SamplingStats {
        SamplingStats {
            budget: self.aimd.budget,
            fraction: self.aimd.fraction,
            ratio: 1.0 / self.aimd.fraction,
            exported: self.exported,
            skipped: self.skipped,
            intervals: self.aimd.intervals,
            decreases: self.aimd.decreases,
            increases: self.aimd.increases,
            last_share: self.aimd.last_share,
            work_ns: self.aimd.total_work_ns,
        }
    }
}

/// `(⌊1/f⌋, ⌊1/f⌋ + 1)` for `f` in [`F_MIN`], 1): the two ratios a packet
/// may be exported with while the fraction is `f`.
pub fn ratios(f: f64) -> (u32, u32) {
    let lo = (1.0 / f).floor().clamp(1.0, f64::from(u32::MAX - 1)) as u32;
    (lo, lo + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Constant overload: each interval's work is `load · f` of the time
    /// (`load` = the share with every packet exported).
    fn run(aimd: &mut Aimd, load: f64, intervals: u64, t: &mut u64) -> Vec<f64> {
        let mut shares = Vec::new();
        for _ in 0..intervals {
            let work = (load * aimd.fraction() * DEFAULT_INTERVAL_NS as f64) as u64;
            aimd.add_work(work);
            *t += DEFAULT_INTERVAL_NS;
            shares.push(work as f64 / DEFAULT_INTERVAL_NS as f64);
            aimd.observe(*t);
        }
        shares
    }

    #[test]
    fn overload_raises_the_ratio_until_within_budget_and_a_fall_brings_it_back_to_one() {
        for (budget, load) in [(0.3, 0.9), (0.1, 5.0), (0.5, 0.51), (0.05, 100.0), (0.2, 0.6)] {
            let mut a = Aimd::new(budget, DEFAULT_INTERVAL_NS).unwrap();
            let mut t = 0;
            a.observe(t);
            let shares = run(&mut a, load, 60, &mut t);
            // Settled: the last 20 intervals inside the dead band.
            for s in &shares[40..] {
                assert!(
                    *s <= budget && *s >= budget * (1.0 - MARGIN) * 0.999,
                    "budget {budget} load {load}: {shares:?}"
                );
            }
            assert!(a.fraction() < 1.0);
            // The load falls under the budget: back to exactly 1.
            run(&mut a, budget * 0.5, 40, &mut t);
            assert_eq!(a.fraction(), 1.0, "budget {budget} load {load}");
        }
    }

    #[test]
    fn the_rule_written_out() {
        // Over budget: to mid-band, at most halving; floor at F_MIN.
        assert!((next_fraction(0.5, 0.31, 0.3) - 0.5 * 0.3 * 0.95 / 0.31).abs() < 1e-15);
        assert_eq!(next_fraction(0.5, 0.6, 0.3), 0.25);
        assert_eq!(next_fraction(0.5, 3.0, 0.3), 0.25);
        assert_eq!(next_fraction(F_MIN, 1.0, 0.3), F_MIN);
        // In the band: stays.
        assert_eq!(next_fraction(0.5, 0.28, 0.3), 0.5);
        assert_eq!(next_fraction(0.5, 0.3, 0.3), 0.5);
        // Below: + 1/16, capped by the prediction and by 1.
        assert_eq!(next_fraction(0.5, 0.1, 0.3), 0.5625);
        assert_eq!(next_fraction(0.01, 0.01, 0.3), 0.01 + STEP);
        assert!((next_fraction(0.01, 0.2, 0.3) - 0.01 * 0.3 * 0.95 / 0.2).abs() < 1e-15);
        assert_eq!(next_fraction(0.99, 0.0, 0.3), 1.0);
    }

    #[test]
    fn the_exporter_still_moves_to_worker_threads() {
        fn send<T: Send>() {}
        send::<crate::Exporter>();
    }

    #[test]
    fn refuses_budgets_that_are_no_budget() {
        for b in [0.0, -0.1, 1.5, f64::NAN, f64::INFINITY] {
            assert!(Aimd::new(b, 1).is_err(), "{b}");
        }
        assert!(Aimd::new(0.3, 0).is_err());
    }

    #[test]
    fn an_interval_closes_only_when_it_has_lasted() {
        let mut a = Aimd::new(0.1, 100).unwrap();
        assert!(!a.observe(1000));
        a.add_work(99);
        assert!(!a.observe(1099));
        assert_eq!(a.fraction(), 1.0);
        a.add_work(99);
        assert!(a.observe(1200));
        assert_eq!(a.fraction(), 0.5);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]
        /// The draw exports each packet with probability f, and the records'
        /// ratios are an unbiased count: checked against f by counting.
        #[test]
        fn ratios_are_the_fraction(f in 0.001f64..1.0) {
            let (lo, hi) = ratios(f);
            proptest::prop_assert!(1.0 / f64::from(hi) < f && f <= 1.0 / f64::from(lo));
            let mut s = Sampler {
                aimd: Aimd::new(0.5, 1).unwrap(),
                clock: Box::new(MonotonicClock::new()),
                rng: Pcg64Mcg::seed_from_u64(7),
                lo: 1, hi: 1, lo_below: 0, take_below: 0,
                time_every: 1, until_timed: 1, exported: 0, skipped: 0,
            };
            s.aimd.fraction = f;
            s.set_thresholds();
            let n = 200_000u64;
            let (mut taken, mut weight) = (0u64, 0u64);
            for _ in 0..n {
                if let Some(r) = s.admit() {
                    proptest::prop_assert!(r == lo || r == hi);
                    taken += 1;
                    weight += u64::from(r);
                }
            }
            // Binomial: 6 standard deviations (+1 for tiny counts).
            let sd = (n as f64 * f * (1.0 - f)).sqrt();
            proptest::prop_assert!((taken as f64 - n as f64 * f).abs() <= 6.0 * sd + 1.0);
            // Σ ratio estimates n; its variance is at most n·hi.
            let sd_w = (n as f64 * f64::from(hi)).sqrt();
            proptest::prop_assert!((weight as f64 - n as f64).abs() <= 6.0 * sd_w);
        }
    }
}
