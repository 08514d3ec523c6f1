//! What a worker measures about itself: per-epoch statistics, a delay
//! histogram, and counters shared with the metrics endpoint.

use std::sync::atomic::{AtomicU64, Ordering};

/// Queueing delays (kernel timestamp to processed), in log-scaled buckets:
/// four per power of two, so a quantile is known within 19%.
#[derive(Clone, Debug)]
pub struct DelayHistogram {
    buckets: [u32; 256],
    count: u64,
    /// Sum of the delays (for the metrics histogram's `_sum`).
    sum: u64,
    max: u64,
}

impl Default for DelayHistogram {
    fn default() -> Self {
        DelayHistogram {
            buckets: [0; 256],
            count: 0,
            sum: 0,
            max: 0,
        }
    }
}

fn bucket(ns: u64) -> usize {
    if ns < 4 {
        return ns as usize;
    }
    let log = 63 - ns.leading_zeros() as usize;
    let sub = ((ns >> (log - 2)) & 3) as usize;
    (log * 4 + sub).min(255)
}

/// Upper bound of a bucket (inclusive).
fn bucket_top(b: usize) -> u64 {
    if b < 8 {
        // 0..=3 hold themselves; 4..=7 are never used.
        return (b as u64).min(3);
    }
    let log = b / 4;
    let sub = (b % 4) as u64;
    if log >= 63 {
        return u64::MAX;
    }
    ((4 + sub + 1) << (log - 2)) - 1
}

impl DelayHistogram {
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.buckets[bucket(ns)] = self.buckets[bucket(ns)].saturating_add(1);
        self.count += 1;
        self.sum = self.sum.wrapping_add(ns);
        self.max = self.max.max(ns);
    }

    /// Sum of the recorded delays (wrapping, as a Prometheus counter may).
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// The non-empty buckets: (largest value it holds, how many), ascending.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.buckets
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(b, &n)| (bucket_top(b), u64::from(n)))
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// An upper bound of the `q` quantile (0 < q <= 1), never above the maximum.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let want = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0u64;
        for (b, &n) in self.buckets.iter().enumerate() {
            seen += u64::from(n);
            if seen >= want {
                return bucket_top(b).min(self.max);
            }
        }
        self.max
    }

    pub fn merge(&mut self, other: &DelayHistogram) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a = a.saturating_add(*b);
        }
        self.count += other.count;
        self.sum = self.sum.wrapping_add(other.sum);
        self.max = self.max.max(other.max);
    }
}

/// One epoch of one worker, sent when the epoch's sweep has finished.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EpochStats {
    pub worker: u32,
    /// Start of the epoch (Unix ns) and its length.
    pub epoch_start_ns: u64,
    pub epoch_ns: u64,
    /// Frames received in the epoch (by kernel timestamp, as the monitor counts them).
    pub packets: u64,
    /// Kernel drops read during the epoch.
    pub drops: u64,
    /// Queueing delay of the epoch's packets: kernel timestamp to processed.
    pub delay_p99_ns: u64,
    pub delay_max_ns: u64,
    /// Most blocks (or frames) waiting in the receive queue, sampled every millisecond.
    pub backlog_max: u64,
    /// From the epoch's end (as the worker saw it) to the end of its sweep.
    pub sweep_wall_ns: u64,
    /// Time spent in sweep steps.
    pub sweep_busy_ns: u64,
    /// The sweep was not finished when the next epoch ended (the monitor
    /// then finished it at once, holding packets back).
    pub late: bool,
    /// Time of the epoch during which an interface of the worker was down
    /// or away (the worker was blind; the epoch's windows are incomplete).
    pub down_ns: u64,
    /// Degraded mode (`--adapt`): wall time spent processing packets and
    /// sweeping in the epoch, and the shedding depth set at its end
    /// (`steps + extra`, see `docs/adapt.md`).
    pub busy_ns: Option<u64>,
    pub shed_depth: Option<f64>,
    /// Degraded mode: the share of flows bypassed from the next epoch
    /// (not looked up, only counted: `docs/adapt.md`).
    pub bypass: Option<f64>,
    /// Degraded mode: the accuracy of each event window the epoch's sweep closed.
    pub accuracy: Vec<clarion_engine::EventAccuracy>,
}

impl EpochStats {
    /// One JSON object (schema `clarion.epoch/1`), for `--epoch-stats`.
    pub fn to_json_line(&self) -> String {
        let line = format!(
            "{{\"schema\":\"clarion.epoch/1\",\"worker\":{},\"epoch_start_ns\":{},\"epoch_ns\":{},\"packets\":{},\
             \"drops\":{},\"delay_p99_ns\":{},\"delay_max_ns\":{},\"backlog_max\":{},\"sweep_wall_ns\":{},\
             \"sweep_busy_ns\":{},\"late\":{},\"down_ns\":{}}}",
            self.worker,
            self.epoch_start_ns,
            self.epoch_ns,
            self.packets,
            self.drops,
            self.delay_p99_ns,
            self.delay_max_ns,
            self.backlog_max,
            self.sweep_wall_ns,
            self.sweep_busy_ns,
            self.late,
            self.down_ns
        );
        match (self.busy_ns, self.shed_depth) {
            (Some(busy), Some(depth)) => {
                let mut line = line;
                line.pop();
                let accuracy: Vec<serde_json::Value> = self
                    .accuracy
                    .iter()
                    .map(clarion_engine::EventAccuracy::to_json)
                    .collect();
                format!(
                    "{line},\"busy_ns\":{busy},\"shed_depth\":{depth:.4},\"bypass\":{:.4},\"accuracy\":{}}}",
                    self.bypass.unwrap_or(0.0),
                    serde_json::Value::Array(accuracy)
                )
            }
            _ => line,
        }
    }
}

/// Running totals of one worker, written by it and read by the metrics
/// endpoint and the periodic summary (relaxed: each value is independent).
#[derive(Debug, Default)]
pub struct WorkerMetrics {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    pub drops: AtomicU64,
    pub malformed: AtomicU64,
    /// Frames that are not IP (ARP, LLDP, …): seen and ignored.
    pub not_ip: AtomicU64,
    /// IP packets of flows the full flow table could not track.
    pub untracked: AtomicU64,
    pub epochs: AtomicU64,
    pub sweeps_late: AtomicU64,
    pub reports: AtomicU64,
    /// The worker runs in degraded mode (`--adapt`).
    pub adapting: std::sync::atomic::AtomicBool,
    /// Degraded mode: the shedding depth in force, in thousandths.
    pub shed_depth_milli: AtomicU64,
    /// Degraded mode: the share of flows bypassed, in thousandths.
    pub bypass_milli: AtomicU64,
    /// Degraded mode: reliefs given within an epoch since the start.
    pub reliefs: AtomicU64,
    /// Degraded mode: measured over predicted cost (the calibration), in thousandths.
    pub cost_factor_milli: AtomicU64,
    pub flows_active: AtomicU64,
    pub delay_max_ns: AtomicU64,
    /// Of the latest finished epoch.
    pub last_delay_p99_ns: AtomicU64,
    pub last_sweep_wall_ns: AtomicU64,
    pub max_sweep_wall_ns: AtomicU64,
    /// Every packet's queueing delay (folded in once per epoch).
    pub queue_delay: crate::metrics::QueueDelayHistogram,
    /// Every epoch's sweep time.
    pub sweep: crate::metrics::SweepHistogram,
    /// How far the monitor's clock lags the wall clock when the wire is
    /// quiet (the receive queue's hidden delay, or recent queueing delays):
    /// a window closes this long after it ends.
    pub clock_lag_ns: AtomicU64,
}

impl WorkerMetrics {
    pub fn get(v: &AtomicU64) -> u64 {
        v.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_json_says_degraded_mode_only_in_it() {
        let plain = EpochStats::default().to_json_line();
        let v: serde_json::Value = serde_json::from_str(&plain).expect("json");
        assert!(
            v.get("shed_depth").is_none() && v.get("accuracy").is_none(),
            "{plain}"
        );
        let st = EpochStats {
            busy_ns: Some(1234),
            shed_depth: Some(1.25),
            bypass: Some(0.5),
            accuracy: vec![clarion_engine::EventAccuracy {
                event: "e".into(),
                window: clarion_report::Window {
                    start_ns: 10,
                    end_ns: 20,
                },
                reports: 3,
                flows_measured: 9,
                flows_unmeasured: 4,
                recall_estimate: 0.123456,
            }],
            ..EpochStats::default()
        };
        let line = st.to_json_line();
        let v: serde_json::Value = serde_json::from_str(&line).expect("json");
        assert_eq!(v["busy_ns"], 1234);
        assert_eq!(v["shed_depth"], 1.25);
        assert_eq!(v["bypass"], 0.5);
        assert_eq!(v["accuracy"][0]["event"], "e");
        assert_eq!(v["accuracy"][0]["flows_unmeasured"], 4);
        assert_eq!(v["accuracy"][0]["recall_estimate"], 0.1235);
    }

    #[test]
    fn quantiles_are_upper_bounds_within_a_bucket() {
        let mut h = DelayHistogram::default();
        for ns in 1..=1000u64 {
            h.record(ns * 1000);
        }
        let p99 = h.quantile(0.99);
        assert!((990_000..=990_000 * 5 / 4).contains(&p99), "{p99}");
        assert_eq!(h.quantile(1.0), 1_000_000);
        assert_eq!(h.max(), 1_000_000);
        assert_eq!(DelayHistogram::default().quantile(0.99), 0);
        for ns in [0u64, 1, 3, 4, 5, 7, 8, 1 << 20, (1 << 20) + 1, u64::MAX / 2] {
            assert!(bucket_top(bucket(ns)) >= ns, "{ns}");
            if bucket(ns) > 0 {
                assert!(bucket_top(bucket(ns) - 1) < ns, "{ns}");
            }
        }
        let mut m = DelayHistogram::default();
        m.merge(&h);
        m.merge(&h);
        assert_eq!(m.count(), 2000);
        assert_eq!(m.quantile(0.99), p99);
    }
}
