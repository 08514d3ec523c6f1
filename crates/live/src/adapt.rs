//! A live worker's adaptation under overload (degraded mode, `--adapt`):
//! MONA's online estimation and adaptation routine, once per epoch.
//!
//! # What the worker measures
//! Per epoch, the wall time it spent processing packets and sweeping
//! (`busy_ns`), the packets that arrived (processed and dropped) and, when
//! the epoch's sweep ends, how many frames wait in its receive queues.
//!
//! # The decision
//! The next epoch must take the packets expected in it and the backlog
//! waiting now, within the epoch ([`Budget`], with the last epoch's rise
//! added to its arrivals: [`Forecast::Rise`]). The first epoch is not
//! judged: its time is the warm-up's (page faults, cold caches). The monitor's cost model predicts, per
//! packet, what each monitoring state costs on a quiet machine; a
//! co-runner thrashing the cache or a slower CPU makes everything dearer
//! by a common factor, which [`Calibration`] follows as an average of
//! measured over predicted busy time (of epochs with enough packets for
//! their cost to be the packets'). The monitor then sheds as little as
//! fits `available / factor` ([`Monitor::adapt_to`]). An idle epoch
//! leaves the shedding as it was: no traffic says nothing of the next.
//!
//! # Relief within an epoch
//! The decision comes once an epoch, from the epoch before; a surge that
//! fills the receive ring within an epoch (the first one of a run, or one
//! after a quiet spell) would drop packets before it. After each block of
//! [`Relief::BLOCK`] packets the worker served, if a ring is at least
//! [`Relief::FILL`] full, the time available a packet is what drains the
//! backlog over one epoch at the block's arrival rate, the backlog being
//! the packets that arrived since the last one served (its queueing delay
//! at that rate); if the block cost more (wall time, in the profile's
//! measure by the calibration), the monitor bypasses more flows at once
//! ([`Monitor::relieve`]; docs/adapt.md, "Relief within a window").
//!
//! # Cost
//! Two clock reads per receive batch and sweep step, and once per epoch a
//! walk over the receive queues and the routine (microseconds); a walk
//! over half a ring's blocks once a block of packets (256) when judging
//! relief.

use std::time::Instant;

use clarion_adapt::{Budget, Calibration, Forecast, Relief};
use clarion_engine::{Monitor, ShedDecision};

/// Weight of the newest epoch in the calibration's average.
const CALIBRATION_WEIGHT: f64 = 0.3;

/// Fewest packets an epoch needs to calibrate: below, its busy time is
/// the epoch's fixed costs (sweep, wake-ups, clock reads), not its
/// packets', and one such epoch (2 packets, 181 µs) would set the factor
/// to its ceiling for the next rise in load.
const CALIBRATION_MIN_PACKETS: u64 = 128;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct LiveAdapt {
    calibration: Calibration,
    /// Busy time of the epoch being received.
    busy_ns: u64,
    pub(crate) last: Option<ShedDecision>,
    budget: Budget,
    /// Epochs seen (the first is the warm-up's).
    epochs: u64,
    /// Relief within an epoch, made at the first batch (its horizon is
    /// the monitor's epoch).
    relief: Option<Relief>,
    /// Reliefs given since the start.
    pub(crate) reliefs: u64,
}

/// A receive batch served, for [`LiveAdapt::on_batch`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Served {
    pub(crate) packets: u64,
    /// Kernel timestamps of the batch's first and last packets (Unix ns).
    pub(crate) first_ts_ns: u64,
    pub(crate) last_ts_ns: u64,
    /// Wall time the batch took.
    pub(crate) busy_ns: u64,
    /// The wall clock when it was done (Unix ns).
    pub(crate) now_ns: u64,
}

impl LiveAdapt {
    pub(crate) fn new() -> Option<LiveAdapt> {
        Some(LiveAdapt {
            calibration: Calibration::new(CALIBRATION_WEIGHT).ok()?,
            busy_ns: 0,
            last: None,
            budget: Budget::new(Forecast::Rise),
            epochs: 0,
            relief: None,
            reliefs: 0,
        })
    }

    /// A receive batch `b` served (module documentation, *Relief within an
    /// epoch*): when it completes a block and `over_mark` says a ring is
    /// at least [`Relief::FILL`] full, relieves the monitor if the block
    /// cost more than drains the backlog. Returns the share of flows now
    /// bypassed when it did.
    pub(crate) fn on_batch(
        &mut self,
        monitor: &mut Monitor,
        b: Served,
        over_mark: impl FnOnce() -> bool,
    ) -> Option<f64> {
        let relief = self.relief.get_or_insert_with(|| Relief::new(monitor.epoch_ns()));
        let block = relief.served_batch(b.packets, b.first_ts_ns, b.last_ts_ns, b.busy_ns as f64)?;
        if !over_mark() {
            return None;
        }
        // Behind the last packet served: those that arrived while it waited.
        let waited = b.now_ns.saturating_sub(b.last_ts_ns) as f64;
        let waiting = if block.rate.is_finite() {
            block.rate * waited
        } else {
            0.0
        };
        let due = block.relieve(relief.horizon_ns(), waiting)?;
        let share = monitor.relieve(
            self.calibration.to_profiled(due.serving_ns),
            self.calibration.to_profiled(due.available_ns),
        )?;
        self.reliefs += 1;
        Some(share)
    }

    /// Counts the time since `started` as busy.
    #[inline]
    pub(crate) fn busy_since(&mut self, started: Instant) {
        self.add_busy(started.elapsed().as_nanos() as u64);
    }

    /// Counts `ns` as busy.
    #[inline]
    pub(crate) fn add_busy(&mut self, ns: u64) {
        self.busy_ns += ns;
    }

    /// At an epoch's end (its sweep done): folds in what it cost and sets
    /// the shedding for the next ones. Returns the epoch's busy time and
    /// the decision, if one was made.
    pub(crate) fn on_epoch(
        &mut self,
        monitor: &mut Monitor,
        epoch_ns: u64,
        arrivals: u64,
        backlog: u64,
    ) -> (u64, Option<ShedDecision>) {
        let busy = std::mem::take(&mut self.busy_ns);
        self.epochs += 1;
        let available = self.budget.after_window(epoch_ns, arrivals, backlog);
        if self.epochs == 1 {
            return (busy, None);
        }
        let Some(load) = monitor.epoch_load() else {
            return (busy, None);
        };
        if load.packets >= CALIBRATION_MIN_PACKETS && busy > 0 {
            self.calibration.observe(busy as f64, load.predicted_ns);
        }
        if available.is_infinite() {
            return (busy, None);
        }
        let decision = monitor.adapt_to(self.calibration.to_profiled(available));
        if decision.is_some() {
            self.last = decision;
        }
        (busy, decision)
    }

    /// The factor by which real costs exceed the model's now.
    pub(crate) fn factor(&self) -> f64 {
        self.calibration.factor()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clarion_engine::{AdaptConfig, MonitorConfig, Shed};
    use clarion_wire::{FlowKey, PacketRecord};

    /// A monitor in degraded mode with two events, fed `flows` flows of
    /// `per_flow` packets in one 10 ms epoch, then the next epoch's first packet.
    fn loaded(flows: u32, per_flow: u32) -> Monitor {
        let mut m = Monitor::new(MonitorConfig {
            adapt: Some(AdaptConfig::default()),
            ..MonitorConfig::default()
        });
        let src = "event a\n when sum(volume) > 1KB\n per 5tuple\n every 10ms\n priority 90\n\
                   event b\n when count(packets) > 3\n per src_ip\n every 10ms\n priority 10\n";
        for e in clarion_lang::check(src).unwrap() {
            m.install(e).unwrap();
        }
        let t0 = 1_000_000_000_000u64;
        let mut out = Vec::new();
        for f in 0..flows {
            let key = FlowKey::new(
                std::net::Ipv4Addr::new(10, 0, (f >> 8) as u8, f as u8).into(),
                std::net::Ipv4Addr::new(10, 1, 0, 1).into(),
                17,
                Some((1000, 53)),
                None,
            );
            for i in 0..per_flow {
                let p = PacketRecord {
                    ts_ns: t0 + u64::from(f * per_flow + i),
                    key,
                    size: 500,
                    volume: 472,
                    ..PacketRecord::default()
                };
                m.process(&p, &mut out);
            }
        }
        let next = PacketRecord {
            ts_ns: t0 + 10_000_000,
            ..PacketRecord::default()
        };
        m.process(&next, &mut out);
        m
    }

    #[test]
    fn sheds_when_the_time_per_packet_is_short_and_restores_with_headroom() {
        let mut m = loaded(200, 10);
        let load = m.epoch_load().unwrap();
        assert_eq!(
            (load.packets, load.flow_epochs, load.new_flows),
            (2_000, 200, 200)
        );
        let mut a = LiveAdapt::new().unwrap();
        // The first epoch is the warm-up's: not judged.
        let (_, d) = a.on_epoch(&mut m, 10_000_000, 2_000, 0);
        assert!(d.is_none());
        // 2,000 packets in 10 ms at the model's cost: no shedding needed.
        let (_, d) = a.on_epoch(&mut m, 10_000_000, 2_000, 0);
        assert_eq!(d.unwrap().shed, Shed::NONE);
        // From a million packets expected down to a thousand: the depth
        // never grows with more time per packet, saturates at first, fits
        // the target whenever it can, and is partial somewhere between.
        let mut depths = Vec::new();
        let mut partial = false;
        let mut arrivals = 1_000_000.0;
        while arrivals > 1_000.0 {
            let (_, d) = a.on_epoch(&mut m, 10_000_000, arrivals as u64, 0);
            let d = d.unwrap();
            assert_eq!(m.shed(), Some(d.shed));
            if !d.saturated {
                assert!(d.predicted_ns <= d.target_ns * (1.0 + 1e-9) + 1e-9, "{d:?}");
            }
            partial |= !d.saturated && d.routine != Shed::NONE;
            // Applied: never shallower than the routine asks; given back by halves.
            assert!(d.shed.depth() >= d.routine.depth(), "{d:?}");
            depths.push((d.saturated, d.routine.depth(), d.shed.depth()));
            arrivals /= 1.05;
        }
        assert!(depths[0].0, "{depths:?}");
        assert!(
            depths.windows(2).all(|w| w[1].1 <= w[0].1 && w[1].2 <= w[0].2),
            "{depths:?}"
        );
        assert_eq!(depths.last().map(|d| d.1), Some(0.0));
        assert!(partial, "{depths:?}");
        // A backlog counts as packets to take.
        let (_, d) = a.on_epoch(&mut m, 10_000_000, 2_000, 1_000_000);
        assert!(d.unwrap().saturated);
        // A rising load is expected to go on rising: the same arrivals
        // after a rise give less time per packet than when steady.
        let steady = {
            let (_, d) = a.on_epoch(&mut m, 10_000_000, 100_000, 0);
            let (_, d2) = a.on_epoch(&mut m, 10_000_000, 100_000, 0);
            assert!(d.is_some());
            d2.unwrap().available_ns
        };
        a.on_epoch(&mut m, 10_000_000, 50_000, 0);
        let (_, rising) = a.on_epoch(&mut m, 10_000_000, 100_000, 0);
        assert!((rising.unwrap().available_ns - steady * 2.0 / 3.0).abs() < 1e-6 * steady);
        // Headroom again: everything restored within a few epochs.
        let restored = (0..12).any(|_| {
            let (_, d) = a.on_epoch(&mut m, 10_000_000, 2_000, 0);
            d.is_some_and(|d| d.shed == Shed::NONE)
        });
        assert!(restored, "{:?}", m.shed());
    }

    /// Batches of 32 packets arriving every 200 ns that cost `cost` ns
    /// each, the last of each having waited `waited` ns.
    fn batches(
        a: &mut LiveAdapt,
        m: &mut Monitor,
        n: u64,
        cost: u64,
        waited: u64,
        full: bool,
    ) -> Vec<Option<f64>> {
        let t0 = 1_000_000_000_000u64;
        (0..n)
            .map(|b| {
                let first = t0 + b * 32 * 200;
                let served = Served {
                    packets: 32,
                    first_ts_ns: first,
                    last_ts_ns: first + 31 * 200,
                    busy_ns: 32 * cost,
                    now_ns: first + 31 * 200 + waited,
                };
                a.on_batch(m, served, || full)
            })
            .collect()
    }

    #[test]
    fn a_ring_filling_within_the_first_epoch_is_relieved_at_once() {
        // 50,000 packets expected in the 10 ms epoch and 3,000 waiting
        // (600 µs at 200 ns): 189 ns available a packet, 250 spent.
        let mut m = loaded(200, 10);
        let before = m.bypass();
        let mut a = LiveAdapt::new().unwrap();
        let got = batches(&mut a, &mut m, 8, 250, 600_000, true);
        assert!(got[..7].iter().all(Option::is_none), "{got:?}");
        let share = got[7].expect("the block of 256 packets is judged");
        assert!(share > before, "{share} {before}");
        assert_eq!(a.reliefs, 1);
        // Below the fill mark, or when the packets fit (150 ns each, the
        // 10 ms epoch's 50,000 and 1,000 waiting take 7.7 ms): nothing.
        let mut m = loaded(200, 10);
        let mut a = LiveAdapt::new().unwrap();
        assert!(batches(&mut a, &mut m, 16, 250, 600_000, false)
            .iter()
            .all(Option::is_none));
        assert!(batches(&mut a, &mut m, 16, 150, 200_000, true)
            .iter()
            .all(Option::is_none));
        assert_eq!((a.reliefs, m.bypass()), (0, before));
    }

    #[test]
    fn an_epoch_of_a_few_packets_does_not_calibrate() {
        let mut few = loaded(3, 2);
        let mut a = LiveAdapt::new().unwrap();
        for _ in 0..5 {
            // 181 µs for 6 packets: the epoch's fixed costs.
            a.busy_ns = 181_000;
            a.on_epoch(&mut few, 10_000_000, 6, 0);
        }
        assert_eq!(a.factor(), 1.0);
        assert_eq!(few.shed().map(|s| s.depth()), Some(0.0));
        // Enough packets for their cost to show: it calibrates.
        let mut many = loaded(200, 10);
        let predicted = many.epoch_load().unwrap().predicted_ns;
        for _ in 0..3 {
            a.busy_ns = (predicted * 2.0) as u64;
            a.on_epoch(&mut many, 10_000_000, 2_000, 0);
        }
        assert!(a.factor() > 1.5, "{}", a.factor());
    }

    #[test]
    fn a_slower_machine_sheds_more_for_the_same_load() {
        let mut m = loaded(200, 10);
        let mut fast = LiveAdapt::new().unwrap();
        let mut slow = LiveAdapt::new().unwrap();
        let predicted = m.epoch_load().unwrap().predicted_ns;
        for _ in 0..20 {
            fast.busy_ns = predicted as u64;
            slow.busy_ns = (predicted * 4.0) as u64;
            fast.on_epoch(&mut m, 10_000_000, 0, 0);
            slow.on_epoch(&mut m, 10_000_000, 0, 0);
        }
        assert!((fast.factor() - 1.0).abs() < 0.01, "{}", fast.factor());
        assert!((slow.factor() - 4.0).abs() < 0.05, "{}", slow.factor());
        // The highest rate the model fits without shedding: at four times
        // the cost it does not fit.
        let mut arrivals = 1_000u64;
        loop {
            let (_, f) = fast.on_epoch(&mut m, 10_000_000, arrivals * 2, 0);
            if f.unwrap().routine != Shed::NONE {
                break;
            }
            arrivals *= 2;
        }
        let (_, f) = fast.on_epoch(&mut m, 10_000_000, arrivals, 0);
        let (_, s) = slow.on_epoch(&mut m, 10_000_000, arrivals, 0);
        assert_eq!(f.unwrap().routine, Shed::NONE);
        assert!(s.unwrap().routine.depth() > 0.0);
    }
}
