//! The flow meter's CPU cost per packet: components timed on this machine
//! at start, and a prediction for a cache size from the traffic's model.
//!
//! # The model
//!
//! TurboFlow sizes the switch CPU by its microflow rate: Eq. 2.2's
//! `E[m] = E[f] + (E[p] - E[f]) * P[eviction]` mFRs a second, each costing
//! the aggregator one lookup and merge (§2.6, §2.7 "Switch CPU
//! throughput"). In software the cache runs on the same core, so every
//! packet also pays the cache, and every record its export. Divided by
//! the packet rate `E[p]`:
//!
//! ```text
//! ns/packet = c_hit + P[miss] * (c_evict + c_merge) + (records / packets) * c_export
//! P[miss]   = E[m] / E[p] = 1 / (packets per microflow record)
//! ```
//!
//! - `c_hit`: a packet whose flow is cached: the meter's clock check, the
//!   hash ([`CostModel::hash_ns`] alone), the set probe and the fold;
//! - `c_evict`: what a miss adds besides the merge: the slot's microflow
//!   leaving, the aggregator's record-start lookup, the new microflow;
//! - `c_merge`: the aggregator folding a microflow into its open part;
//! - `c_export`: a finished record pushed into the output `Vec`.
//!
//! `P[miss]` comes from either model of [`crate::model`]; taking it as the
//! inverse of packets per microflow record counts one miss per microflow
//! record, which also charges the records that end on a hit (FIN/RST,
//! timeouts) a miss: a small overestimate, as is ignoring the idle scans.
//!
//! # Calibration
//!
//! Each component is timed by a small synthetic loop with
//! `std::time::Instant`, batches of 1024 operations until 2 ms have
//! passed, and the fastest of five repeats is kept (a shared machine only
//! ever adds time); the repeats go round the components in turn, so a
//! burst of load elsewhere spoils one repeat of each, not all of one. Misses run against an aggregator
//! holding `open_flows` open parts, so its table is as large (and as far
//! from the CPU caches) as the traffic's; hits run on 16 cached flows.
//! `c_evict` is a miss less a hit and a merge, clamped at zero.
//!
//! # Cost
//!
//! [`CostModel::calibrate`] takes about 50 ms (plus building the tables) and memory for `open_flows`
//! (at most 2^18) keys and open parts. No I/O.

use std::hint::black_box;
use std::time::{Duration, Instant};

use clarion_records::{EndReason, FlowRecord};
use clarion_wire::{FlowKey, PacketRecord};

use crate::aggregator::Aggregator;
use crate::cache::{hash_key, Microflow};
use crate::meter::{FlowConfig, FlowMeter};
use crate::model::{Prediction, TrafficStats};

/// Largest aggregator table the calibration builds (about 30 MB).
pub const MAX_CALIBRATION_FLOWS: usize = 1 << 18;
/// Operations between two clock reads.
const BATCH: u64 = 1024;
/// Flows of the hit loop: few enough that they share no slot.
const HIT_FLOWS: usize = 16;
/// Time each repeat of a component runs for, at least.
const RUN_FOR: Duration = Duration::from_millis(2);
/// Repeats of each component, interleaved; the fastest is kept.
const REPEATS: usize = 5;

/// Per-operation costs in nanoseconds, as timed on this machine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// Hashing one flow key (part of `hit_ns`).
    pub hash_ns: f64,
    /// A packet that hits its flow's cached microflow.
    pub hit_ns: f64,
    /// What a miss adds besides the merge.
    pub evict_ns: f64,
    /// Merging a microflow into the aggregator's open part.
    pub merge_ns: f64,
    /// Pushing a finished record into the output `Vec`.
    pub export_ns: f64,
    /// Open parts in the aggregator while misses were timed.
    pub open_flows: usize,
}

/// ns per call of `op` over one run of at least [`RUN_FOR`].
fn time_per_op(op: &mut dyn FnMut()) -> f64 {
    let started = Instant::now();
    let mut ops = 0u64;
    loop {
        for _ in 0..BATCH {
            op();
        }
        ops += BATCH;
        let elapsed = started.elapsed();
        if elapsed >= RUN_FOR {
            return elapsed.as_nanos() as f64 / ops as f64;
        }
    }
}

/// A cursor cycling through `0..n` without a division per step.
struct Cycle {
    at: usize,
    n: usize,
}

impl Cycle {
    fn next(&mut self) -> usize {
        let i = self.at;
        self.at = if i + 1 == self.n { 0 } else { i + 1 };
        i
    }
}

/// The `n`-th synthetic flow key (distinct for every `n < 2^32`).
fn key(n: u64) -> FlowKey {
    let b = (n as u32).to_be_bytes();
    FlowKey::new(
        [10, b[1], b[2], b[3]].into(),
        [10, 255, b[0], 1].into(),
        17,
        Some((4000, 53)),
        None,
    )
}

fn packet(key: FlowKey, ts_ns: u64) -> PacketRecord {
    PacketRecord {
        ts_ns,
        key,
        size: 100,
        ..PacketRecord::default()
    }
}

/// Timeouts no synthetic loop reaches: no record ends inside a loop.
fn endless(cache_slots: usize) -> FlowConfig {
    FlowConfig {
        cache_slots,
        idle_timeout_ns: u64::MAX / 4,
        active_timeout_ns: u64::MAX / 4,
        scan_interval_ns: u64::MAX / 4,
        ..FlowConfig::default()
    }
}

impl CostModel {
    /// Times the components (see the module doc); misses against an
    /// aggregator of `open_flows` open parts (clamped to 2..=2^18).
    pub fn calibrate(open_flows: usize) -> CostModel {
        let flows = open_flows.clamp(2, MAX_CALIBRATION_FLOWS);
        let keys: Vec<FlowKey> = (0..flows as u64).map(key).collect();
        let packets: Vec<PacketRecord> = keys.iter().map(|&k| packet(k, 0)).collect();
        let hit_flows = HIT_FLOWS.min(flows);

        let mut c = Cycle { at: 0, n: flows };
        let mut hash = || {
            black_box(hash_key(&keys[c.next()], 0));
        };

        // Hits: 16 flows in 4096 slots; their first packets miss, so warm up.
        let mut hit_meter = FlowMeter::new(endless(4096)).ok();
        let (mut hit_out, mut ts, mut c) = (Vec::new(), 0u64, Cycle { at: 0, n: hit_flows });
        let mut hit = || {
            ts += 1;
            let p = PacketRecord {
                ts_ns: ts,
                ..packets[c.next()]
            };
            if let Some(m) = hit_meter.as_mut() {
                m.process(&p, &mut hit_out);
            }
        };
        (0..hit_flows).for_each(|_| hit());

        // Misses: one slot, round robin, so every packet evicts the
        // previous flow into an aggregator holding all the others.
        let mut miss_meter = FlowMeter::new(endless(1)).ok();
        let (mut miss_out, mut ts, mut c) = (Vec::new(), 0u64, Cycle { at: 0, n: flows });
        let mut miss = || {
            ts += 1;
            let p = PacketRecord {
                ts_ns: ts,
                ..packets[c.next()]
            };
            if let Some(m) = miss_meter.as_mut() {
                m.process(&p, &mut miss_out);
            }
        };
        (0..flows).for_each(|_| miss());

        // Merges alone, into a table of the same size.
        let mut agg = Aggregator::with_capacity(flows);
        let micros: Vec<Microflow> = keys
            .iter()
            .map(|&k| Microflow {
                record: FlowRecord::of_packet(k, 0, 100, 0),
                last_clock: 0,
                record_first_clock: 0,
            })
            .collect();
        let (mut merge_out, mut c) = (Vec::new(), Cycle { at: 0, n: flows });
        let mut merge = || agg.absorb(&micros[c.next()], None, &mut merge_out);
        (0..flows).for_each(|_| merge());

        // Exports: a finished record into a Vec, emptied as a sink would.
        let done = FlowRecord {
            end_reason: EndReason::Idle,
            ..FlowRecord::of_packet(keys[0], 0, 100, 0)
        };
        let mut out = Vec::with_capacity(BATCH as usize);
        let mut n = 0u64;
        let mut export = || {
            if out.len() == out.capacity() {
                black_box(&out);
                out.clear();
            }
            n += 1;
            out.push(FlowRecord { packets: n, ..done });
        };

        // Repeats interleaved, so a burst of load elsewhere inflates one
        // repeat of each component rather than every repeat of one.
        let mut best = [f64::INFINITY; 5];
        for _ in 0..REPEATS {
            let ops: [&mut dyn FnMut(); 5] = [&mut hash, &mut hit, &mut miss, &mut merge, &mut export];
            for (b, op) in best.iter_mut().zip(ops) {
                *b = b.min(time_per_op(op));
            }
        }
        let [hash_ns, hit_ns, miss_ns, merge_ns, export_ns] = best;

        CostModel {
            hash_ns,
            hit_ns,
            evict_ns: (miss_ns - hit_ns - merge_ns).max(0.0),
            merge_ns,
            export_ns,
            open_flows: flows,
        }
    }

    /// A miss's cost beyond a hit: `c_evict + c_merge`.
    pub fn miss_ns(&self) -> f64 {
        self.evict_ns + self.merge_ns
    }

    /// The model's ns per packet for a miss probability and a ratio of
    /// flow records to packets (both clamped to `0..=1`).
    pub fn ns_per_packet(&self, p_miss: f64, records_per_packet: f64) -> f64 {
        let p = p_miss.clamp(0.0, 1.0);
        let r = records_per_packet.clamp(0.0, 1.0);
        self.hit_ns + p * self.miss_ns() + r * self.export_ns
    }

    /// ns per packet for traffic `stats` and a cache's `prediction`:
    /// `(Eq. 2.2's, the reuse-distance model's)`, each taking `P[miss]`
    /// as the inverse of its packets per microflow record.
    pub fn predict(&self, stats: &TrafficStats, prediction: &Prediction) -> (f64, f64) {
        let per_packet = |ppr: f64| if ppr > 0.0 { 1.0 / ppr } else { 1.0 };
        let records = if stats.packets > 0 {
            stats.records as f64 / stats.packets as f64
        } else {
            0.0
        };
        (
            self.ns_per_packet(per_packet(prediction.packets_per_record), records),
            self.ns_per_packet(per_packet(prediction.reuse_packets_per_record), records),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{measure, predict};

    #[test]
    fn components_are_positive_and_finite() {
        let c = CostModel::calibrate(1000);
        assert_eq!(c.open_flows, 1000);
        for (name, v) in [
            ("hash", c.hash_ns),
            ("hit", c.hit_ns),
            ("merge", c.merge_ns),
            ("export", c.export_ns),
        ] {
            assert!(v.is_finite() && v > 0.0, "{name}: {v}");
        }
        assert!(c.evict_ns.is_finite() && c.evict_ns >= 0.0, "{c:?}");
        assert_eq!(CostModel::calibrate(0).open_flows, 2, "clamped");
    }

    #[test]
    fn the_hit_loop_hits_and_the_miss_loop_misses() {
        let mut out = Vec::new();
        let mut m = FlowMeter::new(endless(4096)).unwrap();
        for i in 0..10 * HIT_FLOWS as u64 {
            m.process(&packet(key(i % HIT_FLOWS as u64), i), &mut out);
        }
        let s = m.stats();
        assert_eq!((s.microflow_records, s.collisions), (0, 0), "{s:?}");
        let mut m = FlowMeter::new(endless(1)).unwrap();
        for i in 0..100 {
            m.process(&packet(key(i % 10), i), &mut out);
        }
        assert_eq!(m.stats().collisions, 99);
        assert!(out.is_empty(), "no record ends in either loop");
    }

    #[test]
    fn the_prediction_follows_the_formula_and_grows_with_misses() {
        let c = CostModel {
            hash_ns: 1.0,
            hit_ns: 10.0,
            evict_ns: 20.0,
            merge_ns: 30.0,
            export_ns: 40.0,
            open_flows: 2,
        };
        assert_eq!(c.ns_per_packet(0.0, 0.0), 10.0);
        assert_eq!(c.ns_per_packet(0.5, 0.25), 10.0 + 25.0 + 10.0);
        assert_eq!(c.ns_per_packet(2.0, -1.0), 60.0, "clamped");
        // Measured components too: more misses, more time.
        let c = CostModel::calibrate(100);
        let v: Vec<f64> = [0.0, 0.1, 0.5, 1.0]
            .iter()
            .map(|&p| c.ns_per_packet(p, 0.01))
            .collect();
        assert!(v.windows(2).all(|w| w[1] > w[0]), "{v:?} from {c:?}");
    }

    #[test]
    fn smaller_caches_predict_more_time() {
        // 2000 flows round robin: the smaller cache misses more.
        let packets: Vec<PacketRecord> = (0..20_000u64).map(|i| packet(key(i % 2000), i)).collect();
        let stats = measure(&packets, FlowConfig::default().timeouts());
        let c = CostModel::calibrate(2000);
        let ns = |slots| c.predict(&stats, &predict(&stats, slots, 1));
        let (small, big) = (ns(256), ns(65536));
        assert!(small.0 > big.0 && small.1 > big.1, "{small:?} vs {big:?}");
        assert!(small.0 <= c.hit_ns + c.miss_ns() + c.export_ns);
    }
}
