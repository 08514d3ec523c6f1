//! `clarion model --pcap FILE`: TurboFlow's capacity model against the
//! flow meter on a capture, for a ladder of cache sizes.
//!
//! Thin: the capture is parsed into memory, then `clarion_flows::model`
//! measures its statistics and predicts each size's eviction probability
//! and packets per microflow record (Eq. 2.1/2.2 and the reuse-distance
//! model), `clarion_flows::cost` times the meter's cost components and
//! predicts its ns per packet, and a fresh [`FlowMeter`] per size (hash
//! seed 0, as `clarion run --records` builds it) gives the measured
//! figures. Its time is the median of `--runs` rounds over the in-memory
//! packets, cold (a fresh meter) and warm (a second pass through it).
//!
//! Cost: the capture's parsed packets in memory; per size, `--runs`
//! rounds of at least 5 ms each of meter passes.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use clap::Args;
use clarion_capture::{CaptureError, PacketSource};
use clarion_cmdline::parse_duration;
use clarion_flows::model::{measure, predict, Prediction, TrafficStats};
use clarion_flows::{CostModel, FlowConfig, FlowMeter, FlowStats};
use clarion_wire::PacketRecord;
use serde_json::{json, Value};

use crate::Failure;

/// Cache sizes when no --record-cache is given.
const LADDER: [u32; 5] = [256, 1024, 4096, 16384, 65536];
/// Each timing round runs meter passes for at least this long.
const ROUND: Duration = Duration::from_millis(5);

pub const AFTER_HELP: &str = "Examples:
  clarion model --pcap examples/demo.pcap
  clarion model --pcap trace.pcap --record-cache 1024 --record-cache 8192 --ways 4 --json

Columns, one row per cache size:
  slots        microflow cache slots (--record-cache), in sets of --ways
  a            active flows: time average of flow keys seen within the idle timeout
  P[ev] Eq2.1  predicted chance a packet evicts another flow's microflow: 1-(1-1/T)^a
               (L ways: P[Binomial(a, L/T) >= L])
  ev meas      collisions / packets of the meter
  pkt/mFR      packets per microflow record reaching the aggregator: Eq. 2.2
               (one a for the whole capture: a worst-case bound), reuse (each packet's
               own reuse distance: the distinct flows since its flow's previous packet),
               and measured
  ns/pkt       the meter's CPU time per packet: predicted from components timed at
               start, c_hit + P[miss](c_evict + c_merge) + (records/packets) c_export
               with P[miss] = 1 / reuse pkt/mFR; measured over the packets in memory
               (median of --runs rounds): warm, a second pass through the same meter,
               and cold, a fresh meter's pass, which also pays the first touch of its
               tables (about 100 B a slot). Both include the idle scans (O(slots/64)
               each, once a second of packet time), which the prediction leaves out

The models predict an average over hash functions; the meter is one (seed 0),
so on a capture of a few flows a small cache's measured figures scatter around
the prediction. See docs/records.md, \"Sizing the cache\".";

#[derive(Args, Debug)]
pub struct ModelArgs {
    /// The capture (pcap or pcapng); read whole into memory.
    #[arg(long, value_name = "FILE")]
    pub pcap: PathBuf,

    /// Microflow cache slots to model (repeat for several; default 256,
    /// 1024, 4096, 16384, 65536).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=(1 << 24)))]
    pub record_cache: Vec<u32>,

    /// Ways per set of the cache (LRU inside a set); must divide every size.
    #[arg(long, default_value_t = 1, value_name = "L", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub ways: u32,

    /// A flow's record ends after it has been idle this long.
    #[arg(long, default_value = "15s", value_parser = parse_duration, value_name = "DURATION")]
    pub record_idle_timeout: u64,

    /// A long flow's record ends after this long.
    #[arg(long, default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    pub record_active_timeout: u64,

    /// Timing rounds per size (the measured ns/pkt is their median).
    #[arg(long, default_value_t = 5, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub runs: u32,

    /// One JSON object (schema clarion.model/1) instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// The capture's parsed packets and what was left out.
struct Loaded {
    packets: Vec<PacketRecord>,
    frames: u64,
    not_ip: u64,
}

/// Every frame parsed as the replay loop parses it; damage is an error
/// naming the file (the model of part of a capture would mislead).
fn load(path: &Path) -> Result<Loaded, Failure> {
    let mut src = crate::host_spec::open_capture(path)?;
    let mut l = Loaded {
        packets: Vec::new(),
        frames: 0,
        not_ip: 0,
    };
    while let Some(item) = src.next_packet() {
        let raw = match item {
            Ok(r) => r,
            Err(e) if e.is_fatal() => {
                return Err(Failure::Runtime(anyhow!(
                    "damaged capture {}: {e}",
                    path.display()
                )));
            }
            Err(e) if matches!(e.in_file(), CaptureError::Skipped { .. }) => continue,
            Err(e) => {
                eprintln!("clarion: warning: {}: {e}", path.display());
                continue;
            }
        };
        l.frames += 1;
        match clarion_wire::parse_frame(raw.link, raw.data, raw.ts_ns, raw.orig_len) {
            Ok(rec) => l.packets.push(rec),
            Err(_) => l.not_ip += 1,
        }
    }
    Ok(l)
}

/// One cache size: the models' figures and the meter's.
struct Row {
    slots: usize,
    predicted: Prediction,
    /// ns per packet from Eq. 2.2's and the reuse model's P[miss].
    ns_eq22: f64,
    ns_reuse: f64,
    measured: Measured,
}

/// The meter's counters and times over `runs` rounds.
struct Measured {
    stats: FlowStats,
    /// Median ns per packet of a fresh meter's pass (first touch of its tables included).
    cold_ns: f64,
    /// Median ns per packet of a second pass through the same meter.
    warm_ns: f64,
}

/// A fresh meter over the packets (its counters are the measured figures),
/// then again over them shifted past the first pass's clock, so the second
/// pass does the same work on tables already touched; each timed, repeated
/// for at least [`ROUND`] a round, medians over `runs` rounds.
fn run_meter(packets: &[PacketRecord], config: FlowConfig, runs: u32) -> Result<Measured, Failure> {
    let usage = |e: clarion_flows::FlowError| Failure::Usage(format!("clarion: {e}"));
    let last = packets.iter().map(|p| p.ts_ns).max().unwrap_or(0);
    let first = packets.iter().map(|p| p.ts_ns).min().unwrap_or(0);
    let shift = last - first + 1;
    let again: Vec<PacketRecord> = packets
        .iter()
        .map(|p| PacketRecord {
            ts_ns: p.ts_ns.saturating_add(shift),
            ..*p
        })
        .collect();
    let mut out = Vec::new();
    let mut stats = FlowStats::default();
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    let n = packets.len().max(1) as f64;
    for _ in 0..runs {
        let (mut t_cold, mut t_warm, mut passes) = (Duration::ZERO, Duration::ZERO, 0u32);
        while passes == 0 || t_cold + t_warm < ROUND {
            // Building the meter (allocating the slots) is not per-packet work.
            let mut m = FlowMeter::new(config).map_err(usage)?;
            for (input, total) in [(packets, &mut t_cold), (&again[..], &mut t_warm)] {
                let started = Instant::now();
                m.process_batch(input, &mut out);
                m.finish(&mut out);
                *total += started.elapsed();
                out.clear();
                if passes == 0 && std::ptr::eq(input, packets) {
                    stats = m.stats();
                }
            }
            passes += 1;
        }
        cold.push(t_cold.as_nanos() as f64 / (f64::from(passes) * n));
        warm.push(t_warm.as_nanos() as f64 / (f64::from(passes) * n));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    Ok(Measured {
        stats,
        cold_ns: median(cold),
        warm_ns: median(warm),
    })
}

pub fn model(a: &ModelArgs) -> Result<ExitCode, Failure> {
    let sizes: Vec<u32> = if a.record_cache.is_empty() {
        LADDER.to_vec()
    } else {
        a.record_cache.clone()
    };
    let ways = a.ways as usize;
    if let Some(bad) = sizes.iter().find(|&&s| !(s as usize).is_multiple_of(ways)) {
        return Err(Failure::Usage(format!(
            "clarion: --record-cache {bad} does not divide into sets of --ways {ways}"
        )));
    }
    let loaded = load(&a.pcap)?;
    let base = FlowConfig {
        ways,
        idle_timeout_ns: a.record_idle_timeout,
        active_timeout_ns: a.record_active_timeout,
        ..FlowConfig::default()
    };
    let stats = measure(&loaded.packets, base.timeouts());
    let cost = CostModel::calibrate(stats.active_flows.ceil() as usize);
    let mut rows = Vec::new();
    for &slots in &sizes {
        let config = FlowConfig {
            cache_slots: slots as usize,
            ..base
        };
        let predicted = predict(&stats, config.cache_slots, ways);
        let (ns_eq22, ns_reuse) = cost.predict(&stats, &predicted);
        let measured = run_meter(&loaded.packets, config, a.runs)?;
        rows.push(Row {
            slots: config.cache_slots,
            predicted,
            ns_eq22,
            ns_reuse,
            measured,
        });
    }
    let report = Report {
        a,
        loaded: &loaded,
        stats: &stats,
        cost: &cost,
        rows: &rows,
    };
    if a.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.table());
    }
    Ok(ExitCode::SUCCESS)
}

struct Report<'a> {
    a: &'a ModelArgs,
    loaded: &'a Loaded,
    stats: &'a TrafficStats,
    cost: &'a CostModel,
    rows: &'a [Row],
}

impl Report<'_> {
    fn table(&self) -> String {
        let (s, c) = (self.stats, self.cost);
        let mut t = format!(
            "clarion model --pcap {}: {} packets ({} frames, {} not IP), {} flow records, {:.1} s, \
             a = {:.1} active flows\n",
            self.a.pcap.display(),
            s.packets,
            self.loaded.frames,
            self.loaded.not_ip,
            s.records,
            s.duration_ns as f64 / 1e9,
            s.active_flows,
        );
        t += &format!(
            "cost components (ns, timed now): hash {:.1}, hit {:.1}, evict {:.1}, merge {:.1}, export {:.1} \
             (aggregator of {} open flows)\n",
            c.hash_ns, c.hit_ns, c.evict_ns, c.merge_ns, c.export_ns, c.open_flows
        );
        t += &format!(
            "{:>8} {:>4} {:>8} {:>11} {:>8} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8}\n",
            "slots",
            "ways",
            "a",
            "P[ev]Eq2.1",
            "ev meas",
            "pkt/mFR",
            "pkt/mFR",
            "pkt/mFR",
            "ns/pkt",
            "ns/pkt",
            "ns/pkt"
        );
        t += &format!(
            "{:>8} {:>4} {:>8} {:>11} {:>8} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8}\n",
            "", "", "", "", "", "Eq2.2", "reuse", "measured", "predicted", "warm", "cold"
        );
        for r in self.rows {
            t += &format!(
                "{:>8} {:>4} {:>8.1} {:>11.4} {:>8.4} {:>10.3} {:>10.3} {:>10.3} {:>10.1} {:>8.1} {:>8.1}\n",
                r.slots,
                self.a.ways,
                s.active_flows,
                r.predicted.p_eviction,
                r.measured.stats.eviction_ratio(),
                r.predicted.packets_per_record,
                r.predicted.reuse_packets_per_record,
                r.measured.stats.packets_per_microflow_record(),
                r.ns_reuse,
                r.measured.warm_ns,
                r.measured.cold_ns,
            );
        }
        t
    }

    fn json(&self) -> Value {
        let (s, c) = (self.stats, self.cost);
        json!({
            "schema": "clarion.model/1",
            "capture": self.a.pcap.display().to_string(),
            "frames": self.loaded.frames,
            "not_ip": self.loaded.not_ip,
            "packets": s.packets,
            "records": s.records,
            "duration_ns": s.duration_ns,
            "active_flows": s.active_flows,
            "idle_timeout_ns": self.a.record_idle_timeout,
            "active_timeout_ns": self.a.record_active_timeout,
            "ways": self.a.ways,
            "cost_ns": {
                "hash": c.hash_ns,
                "hit": c.hit_ns,
                "evict": c.evict_ns,
                "merge": c.merge_ns,
                "export": c.export_ns,
                "open_flows": c.open_flows,
            },
            "rows": self.rows.iter().map(|r| json!({
                "slots": r.slots,
                "predicted": {
                    "p_eviction": r.predicted.p_eviction,
                    "packets_per_record_eq22": r.predicted.packets_per_record,
                    "packets_per_record_reuse": r.predicted.reuse_packets_per_record,
                    "ns_per_packet_eq22": r.ns_eq22,
                    "ns_per_packet_reuse": r.ns_reuse,
                },
                "measured": {
                    "eviction_ratio": r.measured.stats.eviction_ratio(),
                    "packets_per_record": r.measured.stats.packets_per_microflow_record(),
                    "microflow_records": r.measured.stats.microflow_records,
                    "collisions": r.measured.stats.collisions,
                    "records": r.measured.stats.records,
                    "ns_per_packet_warm": r.measured.warm_ns,
                    "ns_per_packet_cold": r.measured.cold_ns,
                },
            })).collect::<Vec<_>>(),
        })
    }
}
