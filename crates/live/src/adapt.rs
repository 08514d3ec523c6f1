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
//! # Cost
//! Two clock reads per receive batch and sweep step, and once per epoch a
//! walk over the receive queues and the routine (microseconds).

use std::time::Instant;

use clarion_adapt::{Budget, Calibration, Forecast};
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
}

impl LiveAdapt {
    pub(crate) fn new() -> Option<LiveAdapt> {
        Some(LiveAdapt {
            calibration: Calibration::new(CALIBRATION_WEIGHT).ok()?,
            busy_ns: 0,
            last: None,
            budget: Budget::new(Forecast::Rise),
            epochs: 0,
        })
    }

    /// Counts the time since `started` as busy.
    #[inline]
    pub(crate) fn busy_since(&mut self, started: Instant) {
        self.busy_ns += started.elapsed().as_nanos() as u64;
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
