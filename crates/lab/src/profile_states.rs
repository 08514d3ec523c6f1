//! `clarion-lab profile-states`: MONA's offline profiling (§IV-A) of the
//! monitor's per-state costs, fitted to degraded mode's cost model
//! ([`StateCosts`], used by `Monitor::adapt_to`, `epoch_load` and
//! `last_packet_cost_ns`).
//!
//! # Design
//!
//! Every figure is the monitor in degraded mode
//! (`adapt: Some(AdaptConfig::default())`, the sweep driven by hand) on
//! generated IPv4 packets, built in chunks of [`CHUNK`] records just before
//! each timed `process_batch` (no I/O, no allocation in the timed part).
//! A *run* is one monitor: [`WARM_EPOCHS`] untimed epochs (flows inserted,
//! states taken), then `--repeat` timed epochs of `k` packets per flow, in
//! one random order of the flows repeated `k` times; each epoch is closed
//! by a `tick` and its sweep timed apart. A figure is the median over the
//! timed epochs. Events never fire (thresholds out of reach), so sweeps
//! cost their gather and tests, not reports.
//!
//! | cost | MONA | measured as |
//! |---|---|---|
//! | `T_r^H`, `T_r^M` | retrieval, hit / miss | ns/packet, known flows matching no event, [`HIT_FLOWS`] flows / `--flows` flows |
//! | `update_ns`, `per_word_ns` | `T_p` per state | ns/packet of states keeping 2..17 words per half (hit set), least squares line in words; `update_ns` = intercept − `T_r^H` |
//! | `tcp_ns` | | `sum(is_lost)` minus `sum(volume)` on the same TCP flows (both 4 words) |
//! | `pair_ns` | | sweep ns per flow-epoch against triggers per flow (1..32 events on one shared measure, [`PAIR_FLOWS`] flows): slope |
//! | `insert_ns` | `T_i` | a first packet of a new flow minus a known flow's first packet of an epoch, same flows, same event |
//! | `bypass_ns` | | `T_r^M`'s run with a share [`MAX_BYPASS`] of flows bypassed (`monitor/bypass.rs`), less the rest's `T_r^M`, over that share |
//!
//! Words per record are the engine's own: a probe monitor with costs
//! `per_word_ns = 1` (all else 0) prices a known flow's packet at exactly
//! its set's `update_words` (`set_cost`), 2 for the tag and packet count,
//! plus per distinct measure `sum` 2, `count` 1, `avg` 3, `stddev` 5.
//! The fitted `lookup_ns` is `T_r^M` (the monitor has no estimate of
//! MONA's hit probability P, and under-predicting costs drops).
//!
//! The check: mixed events (MONA's chain, thresholds out of reach) on
//! half-TCP traffic at three sheddings, each with the fitted costs and
//! with the current defaults: measured wall time of an epoch (its packets
//! and its sweep) over `epoch_load().predicted_ns`.
//!
//! # Invariants
//!
//! The same flags give the same packets and orders (fixed seed); only
//! timings vary. Every figure is a finite number; fitted slopes are
//! clamped at 0 (noise on a shared machine can tilt them below).
//!
//! # Cost
//!
//! Memory: the flow table of `--flows` flows, one order (4 B per flow)
//! and one chunk. Time: about 25 runs of (2 + `--repeat`) epochs of
//! `--packets` packets.

use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::anyhow;
use clap::Args;
use rand_core::{Rng as _, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde_json::{json, Value};

use clarion_engine::{AdaptConfig, Monitor, MonitorConfig, Shed, StateCosts, MAX_BYPASS};
use clarion_wire::{FlowKey, PacketRecord, TcpInfo};

use crate::Failure;

/// Flows of the cache-resident set (`T_r^H`, per-word and TCP costs):
/// a few hundred bytes each, well inside L2.
pub const HIT_FLOWS: u64 = 1024;
/// Flows active per epoch in the pair-cost sweep.
pub const PAIR_FLOWS: u64 = 16_384;
/// Triggers per flow in the pair-cost sweep.
pub const PAIR_TRIGGERS: [usize; 6] = [1, 2, 4, 8, 16, 32];
/// Records built, then processed in one timed call.
pub const CHUNK: usize = 4096;
/// Untimed epochs before the timed ones: flows inserted, then in their states.
pub const WARM_EPOCHS: u64 = 2;
/// Epoch (and every event's window): 100 ms.
const EPOCH_NS: u64 = 100_000_000;
/// Time of the first packet: a multiple of the epoch.
const BASE_NS: u64 = 1_700_000_000_000_000_000;
/// Transport payload of every packet.
const VOLUME: u32 = 1000;
/// Most flows: keys are 10.x.y.z sources.
const MAX_FLOWS: u64 = 1 << 24;

/// The states whose per-packet time gives the per-word line: one event per
/// flow, each keeping more statistics (words per half, with the tag and
/// packet count: 4, 5, 7, 12, 17).
pub const WORD_STATES: [&str; 5] = [
    "sum(volume) > 1000GB",
    "sum(volume) > 1000GB and count(ttl) > 1000000000",
    "stddev(volume) > 1000GB",
    "stddev(volume) > 1000GB and stddev(size) > 1000GB",
    "stddev(volume) > 1000GB and stddev(size) > 1000GB and stddev(ttl) > 1000000",
];

/// MONA's Config.1 chain (as crates/lab/tests/mona_chain.clarion), with
/// thresholds out of reach: the check's mixed states.
const MIXED: &str = "
event flow_count
  when count(packets) > 1000000000
  every 100ms
  priority 90
event heavy_sources
  when sum(volume) > 1000GB
  per src_ip
  every 100ms
  priority 80
event lossy_flows
  filter proto = tcp
  when sum(is_lost) > 1000000000
  every 100ms
  priority 60
event bursty_flows
  when count(is_burst) > 50% and sum(packets) > 1000000000
  every 100ms
  priority 40
event rtt_change
  filter proto = tcp
  when max(rtt) > 2 * avg(rtt) and max(rtt) > 1000s
  every 100ms
  priority 20
";

#[derive(Args, Debug)]
pub struct ProfileStatesArgs {
    /// Flows of the large set (T_r^M, insertion, the check): well over the L3.
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    pub flows: u64,

    /// Packets per timed epoch of each run (rounded to whole packets per flow).
    #[arg(long, default_value_t = 2_000_000, value_name = "N")]
    pub packets: u64,

    /// Timed epochs per run; each figure is their median.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub repeat: u64,

    /// Seed of the flows' order.
    #[arg(long, default_value_t = 1, value_name = "S")]
    pub seed: u64,

    /// Print the figures as one JSON object on standard output (the table goes to standard error).
    #[arg(long)]
    pub json: bool,
}

/// Traffic of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Udp,
    Tcp,
    /// Odd flows TCP, even ones UDP.
    Mixed,
}

/// One run's shape.
#[derive(Clone, Copy, Debug)]
struct Shape {
    flows: u64,
    /// Packets per flow per epoch.
    per_flow: u64,
    proto: Proto,
    /// First flow index (distinct ranges give distinct flows).
    first: u64,
}

impl Shape {
    fn new(flows: u64, packets: u64, proto: Proto) -> Shape {
        Shape {
            flows,
            per_flow: (packets / flows.max(1)).max(1),
            proto,
            first: 0,
        }
    }

    fn per_epoch(&self) -> u64 {
        self.flows * self.per_flow
    }

    /// Packet `pos` (in `0..per_epoch`) of epoch `epoch`, flow `flow`.
    fn packet(&self, flow: u64, epoch: u64, pos: u64) -> PacketRecord {
        let i = self.first + flow;
        let src = Ipv4Addr::new(10, (i >> 16) as u8, (i >> 8) as u8, i as u8);
        let tcp = match self.proto {
            Proto::Udp => false,
            Proto::Tcp => true,
            Proto::Mixed => i % 2 == 1,
        };
        let proto = if tcp { 6 } else { 17 };
        let key = FlowKey::new(
            IpAddr::V4(src),
            IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
            proto,
            Some((40_000 + (i % 1000) as u16, 443)),
            None,
        );
        let spacing = EPOCH_NS / self.per_epoch().max(1);
        let ordinal = epoch * self.per_flow + pos / self.flows;
        let header = if tcp { 40 } else { 28 };
        PacketRecord {
            ts_ns: BASE_NS + epoch * EPOCH_NS + pos * spacing.max(1),
            key,
            size: VOLUME + header,
            volume: VOLUME,
            ttl: 64,
            ecn: 0,
            is_later_fragment: false,
            // In-order segments: `is_lost` is read, never set.
            tcp: tcp.then(|| TcpInfo {
                seq: 1 + (ordinal as u32).wrapping_mul(VOLUME),
                ack: 1,
                window: 1000,
                flags: 0x10,
                wscale: None,
                mss: None,
            }),
            captured_len: VOLUME + header + 14,
        }
    }
}

/// One run's timed figures: medians over its timed epochs.
#[derive(Clone, Copy, Debug, Default)]
struct Timed {
    ns_per_packet: f64,
    sweep_ns: f64,
    /// Packets and sweep of an epoch, and the model's prediction of it.
    epoch_ns: f64,
    predicted_ns: f64,
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Least squares line through `points`: (intercept, slope).
pub fn fit_line(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    Some((my - slope * mx, slope))
}

fn config(costs: StateCosts, flows: u64) -> MonitorConfig {
    MonitorConfig {
        host: "profile-states".into(),
        // A flow that sends every epoch never idles out; room for all.
        flow_capacity: (2 * flows as usize).max(1 << 16),
        synchronous_sweep: false,
        adapt: Some(AdaptConfig {
            costs,
            ..AdaptConfig::default()
        }),
        ..MonitorConfig::default()
    }
}

/// A monitor running `events` (bare conditions become `per 5tuple every
/// 100ms` events `e0`, `e1`, …; a full events file is installed as is).
fn monitor(events: &[String], costs: StateCosts, flows: u64, shed: Shed) -> anyhow::Result<Monitor> {
    let text: String = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            if e.trim_start().starts_with("event") || e.trim().is_empty() {
                e.clone()
            } else {
                format!("event e{i}\n  when {e}\n  per 5tuple\n  every 100ms\n")
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let specs = clarion_lang::check(&text).map_err(|d| anyhow!("{}", d.render("profile", &text, false)))?;
    let mut m = Monitor::new(config(costs, flows));
    for s in specs {
        m.install(s).map_err(|e| anyhow!("installing the events: {e}"))?;
    }
    m.set_shed(shed);
    Ok(m)
}

/// A random order of `n` flows (Fisher-Yates).
fn order(n: u64, seed: u64) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n as u32).collect();
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    for i in (1..v.len()).rev() {
        let j = ((u128::from(rng.next_u64()) * (i as u128 + 1)) >> 64) as usize;
        v.swap(i, j);
    }
    v
}

/// Feeds epoch `epoch` of `shape` in `order` (repeated per packet of a
/// flow), then closes it; returns (process ns, sweep ns).
fn epoch(m: &mut Monitor, shape: &Shape, order: &[u32], epoch: u64) -> (f64, f64) {
    let mut chunk = Vec::with_capacity(CHUNK);
    let mut out = Vec::new();
    let mut busy = 0.0;
    let total = shape.per_epoch();
    let mut pos = 0;
    while pos < total {
        chunk.clear();
        while chunk.len() < CHUNK && pos < total {
            let flow = u64::from(order[(pos % shape.flows) as usize]);
            chunk.push(shape.packet(flow, epoch, pos));
            pos += 1;
        }
        let t = Instant::now();
        m.process_batch(&chunk, &mut out);
        busy += t.elapsed().as_nanos() as f64;
        out.clear();
    }
    m.tick(BASE_NS + (epoch + 1) * EPOCH_NS, &mut out);
    let t = Instant::now();
    while m.sweep_pending() {
        m.sweep_step(usize::MAX, &mut out);
    }
    let swept = t.elapsed().as_nanos() as f64;
    (busy, swept)
}

/// One run (see the module documentation).
fn run(m: &mut Monitor, shape: &Shape, repeat: u64, seed: u64) -> Timed {
    let order = order(shape.flows, seed);
    for e in 0..WARM_EPOCHS {
        epoch(m, shape, &order, e);
    }
    let (mut per, mut sweep, mut wall, mut pred) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for e in WARM_EPOCHS..WARM_EPOCHS + repeat.max(1) {
        let (busy, swept) = epoch(m, shape, &order, e);
        per.push(busy / shape.per_epoch() as f64);
        sweep.push(swept);
        wall.push(busy + swept);
        pred.push(m.epoch_load().map_or(f64::NAN, |l| l.predicted_ns));
    }
    Timed {
        ns_per_packet: median(&mut per),
        sweep_ns: median(&mut sweep),
        epoch_ns: median(&mut wall),
        predicted_ns: median(&mut pred),
    }
}

/// Words per half and TCP state of the state `events` put a known flow
/// in, as the engine prices them (see the module documentation).
fn words_of(events: &[String], shed: Shed) -> anyhow::Result<(f64, bool)> {
    let probe = |costs: StateCosts| -> anyhow::Result<f64> {
        let mut m = monitor(events, costs, 1, shed)?;
        let s = Shape::new(1, 1, Proto::Tcp);
        let mut out = Vec::new();
        // Epoch 0 inserts and is swept; epoch 1 puts the flow in its state.
        for e in 0..3 {
            m.process(&s.packet(0, e, 0), &mut out);
            m.tick(BASE_NS + (e + 1) * EPOCH_NS, &mut out);
            while m.sweep_pending() {
                m.sweep_step(usize::MAX, &mut out);
            }
        }
        m.process(&s.packet(0, 3, 0), &mut out);
        // A second packet in the epoch: no pair share, no insertion.
        let mut p = s.packet(0, 3, 0);
        p.ts_ns += 1;
        m.process(&p, &mut out);
        Ok(m.last_packet_cost_ns())
    };
    let zero = StateCosts {
        lookup_ns: 0.0,
        insert_ns: 0.0,
        update_ns: 0.0,
        per_word_ns: 0.0,
        tcp_ns: 0.0,
        pair_ns: 0.0,
        bypass_ns: 0.0,
    };
    let words = probe(StateCosts {
        per_word_ns: 1.0,
        ..zero
    })?;
    let tcp = probe(StateCosts { tcp_ns: 1.0, ..zero })? > 0.5;
    Ok((words, tcp))
}

/// Everything measured, and the costs fitted from it.
#[derive(Debug)]
pub struct Profile {
    pub lookup_hit_ns: f64,
    pub lookup_miss_ns: f64,
    /// The same flows as the miss, a share [`MAX_BYPASS`] of them bypassed.
    pub bypassed_ns: f64,
    /// (words per half, ns per packet, events)
    pub words: Vec<(f64, f64, String)>,
    /// Intercept and slope of the words line (hit set).
    pub update_line: (f64, f64),
    pub tcp_base_ns: f64,
    pub tcp_lost_ns: f64,
    /// (triggers per flow, sweep ns per flow-epoch)
    pub pairs: Vec<(f64, f64)>,
    pub pair_line: (f64, f64),
    pub new_flow_ns: f64,
    pub known_first_ns: f64,
    pub fitted: StateCosts,
    /// (flows, shed, measured epoch ns, predicted fitted, predicted default,
    /// of the measured: the sweep's ns)
    pub check: Vec<(u64, Shed, f64, f64, f64, f64)>,
}

fn progress(what: &str) {
    eprintln!("clarion-lab profile-states: {what}");
}

/// Measures and fits (see the module documentation).
pub fn profile(a: &ProfileStatesArgs) -> anyhow::Result<Profile> {
    let defaults = StateCosts::default();
    let large = a.flows;
    let hit = HIT_FLOWS.min(large);
    let r = a.repeat;
    // An event no generated packet matches: flows tracked, in no set.
    let nothing = vec!["event none\n  filter dst_port = 1\n  when sum(volume) > 1000GB\n".to_string()];

    progress("lookup (no event matches), hit and miss");
    let shape_hit = Shape::new(hit, a.packets, Proto::Udp);
    let shape_large = Shape::new(large, a.packets, Proto::Udp);
    let lookup_hit_ns = run(
        &mut monitor(&nothing, defaults, hit, Shed::NONE)?,
        &shape_hit,
        r,
        a.seed,
    )
    .ns_per_packet;
    let lookup_miss_ns = run(
        &mut monitor(&nothing, defaults, large, Shed::NONE)?,
        &shape_large,
        r,
        a.seed,
    )
    .ns_per_packet;

    progress("bypass (no event matches, nearly every flow bypassed)");
    let bypassed_ns = {
        let mut m = monitor(&nothing, defaults, large, Shed::NONE)?;
        m.set_bypass(MAX_BYPASS);
        run(&mut m, &shape_large, r, a.seed).ns_per_packet
    };

    progress("update per word (hit set)");
    let mut words = Vec::new();
    // The default state: the first state shed all the way down.
    let deep = Shed {
        steps: 64,
        extra: 0.0,
    };
    let first = vec![WORD_STATES[0].to_string()];
    let (w, _) = words_of(&first, deep)?;
    let t = run(&mut monitor(&first, defaults, hit, deep)?, &shape_hit, r, a.seed).ns_per_packet;
    words.push((w, t, "(default state)".to_string()));
    for s in WORD_STATES {
        let ev = vec![s.to_string()];
        let (w, _) = words_of(&ev, Shed::NONE)?;
        let t = run(
            &mut monitor(&ev, defaults, hit, Shed::NONE)?,
            &shape_hit,
            r,
            a.seed,
        )
        .ns_per_packet;
        words.push((w, t, s.to_string()));
    }
    let points: Vec<(f64, f64)> = words.iter().map(|w| (w.0, w.1)).collect();
    let update_line = fit_line(&points).ok_or_else(|| anyhow!("the word states have one size"))?;

    progress("TCP state (hit set)");
    let shape_tcp = Shape::new(hit, a.packets, Proto::Tcp);
    let base = vec!["sum(volume) > 1000GB".to_string()];
    let lost = vec!["sum(is_lost) > 1000000000".to_string()];
    let tcp_base_ns = run(
        &mut monitor(&base, defaults, hit, Shed::NONE)?,
        &shape_tcp,
        r,
        a.seed,
    )
    .ns_per_packet;
    let tcp_lost_ns = run(
        &mut monitor(&lost, defaults, hit, Shed::NONE)?,
        &shape_tcp,
        r,
        a.seed,
    )
    .ns_per_packet;

    progress("sweep per flow-trigger pair");
    let pair_flows = PAIR_FLOWS.min(large);
    let shape_pair = Shape::new(pair_flows, a.packets, Proto::Udp);
    let mut pairs = Vec::new();
    for n in PAIR_TRIGGERS {
        // Distinct triggers on one measure: the state's words stay 4.
        let ev: Vec<String> = (0..n).map(|i| format!("sum(volume) > {}000GB", i + 1)).collect();
        let t = run(
            &mut monitor(&ev, defaults, pair_flows, Shed::NONE)?,
            &shape_pair,
            r,
            a.seed,
        );
        pairs.push((n as f64, t.sweep_ns / pair_flows as f64));
    }
    let pair_line = fit_line(&pairs).ok_or_else(|| anyhow!("one pair size"))?;

    progress("insertion (every packet a new flow)");
    let (mut new_ns, mut known_ns) = (Vec::new(), Vec::new());
    let fresh = large.min(a.packets).max(1);
    for k in 0..r.max(1) {
        let mut m = monitor(&base, defaults, fresh, Shed::NONE)?;
        let shape = Shape {
            flows: fresh,
            per_flow: 1,
            proto: Proto::Udp,
            first: 0,
        };
        let ord = order(fresh, a.seed + k);
        let (b0, _) = epoch(&mut m, &shape, &ord, 0);
        let (b1, _) = epoch(&mut m, &shape, &ord, 1);
        new_ns.push(b0 / fresh as f64);
        known_ns.push(b1 / fresh as f64);
    }
    let new_flow_ns = median(&mut new_ns);
    let known_first_ns = median(&mut known_ns);

    let fitted = StateCosts {
        lookup_ns: lookup_miss_ns,
        insert_ns: (new_flow_ns - known_first_ns).max(0.0),
        update_ns: (update_line.0 - lookup_hit_ns).max(0.0),
        per_word_ns: update_line.1.max(0.0),
        tcp_ns: (tcp_lost_ns - tcp_base_ns).max(0.0),
        pair_ns: pair_line.1.max(0.0),
        // The rest of the flows were looked up: T = b·T_bypass + (1 − b)·T_r.
        bypass_ns: ((bypassed_ns - (1.0 - MAX_BYPASS) * lookup_miss_ns) / MAX_BYPASS).max(0.0),
    };

    progress("check: mixed states, measured against predicted");
    let mixed = vec![MIXED.to_string()];
    let mut check = Vec::new();
    for flows in [hit, large] {
        let shape = Shape::new(flows, a.packets, Proto::Mixed);
        for shed in [
            Shed::NONE,
            Shed { steps: 1, extra: 0.5 },
            Shed { steps: 3, extra: 0.0 },
        ] {
            let f = run(&mut monitor(&mixed, fitted, flows, shed)?, &shape, r, a.seed);
            let d = run(&mut monitor(&mixed, defaults, flows, shed)?, &shape, r, a.seed);
            check.push((
                flows,
                shed,
                f.epoch_ns,
                f.predicted_ns,
                d.predicted_ns,
                f.sweep_ns,
            ));
        }
    }
    Ok(Profile {
        lookup_hit_ns,
        lookup_miss_ns,
        bypassed_ns,
        words,
        update_line,
        tcp_base_ns,
        tcp_lost_ns,
        pairs,
        pair_line,
        new_flow_ns,
        known_first_ns,
        fitted,
        check,
    })
}

fn costs_json(c: &StateCosts) -> Value {
    json!({
        "lookup_ns": c.lookup_ns,
        "insert_ns": c.insert_ns,
        "update_ns": c.update_ns,
        "per_word_ns": c.per_word_ns,
        "tcp_ns": c.tcp_ns,
        "pair_ns": c.pair_ns,
        "bypass_ns": c.bypass_ns,
    })
}

pub fn to_json(a: &ProfileStatesArgs, p: &Profile) -> Value {
    json!({
        "flows": a.flows,
        "hit_flows": HIT_FLOWS.min(a.flows),
        "packets": a.packets,
        "repeat": a.repeat,
        "lookup_hit_ns": p.lookup_hit_ns,
        "lookup_miss_ns": p.lookup_miss_ns,
        "bypassed_ns": p.bypassed_ns,
        "words": p.words.iter().map(|(w, t, e)| json!({"words": w, "ns_per_packet": t, "events": e})).collect::<Vec<_>>(),
        "update_line": {"intercept_ns": p.update_line.0, "per_word_ns": p.update_line.1},
        "tcp": {"sum_volume_ns": p.tcp_base_ns, "sum_is_lost_ns": p.tcp_lost_ns},
        "pairs": p.pairs.iter().map(|(n, s)| json!({"triggers": n, "sweep_ns_per_flow_epoch": s})).collect::<Vec<_>>(),
        "pair_line": {"intercept_ns": p.pair_line.0, "pair_ns": p.pair_line.1},
        "insert": {"new_flow_ns": p.new_flow_ns, "known_first_ns": p.known_first_ns},
        "fitted": costs_json(&p.fitted),
        "default": costs_json(&StateCosts::default()),
        "check": p.check.iter().map(|&(flows, shed, wall, fit, def, sweep)| json!({
            "flows": flows,
            "measured_sweep_ns": sweep,
            "shed": f64::from(shed.steps) + shed.extra,
            "measured_epoch_ns": wall,
            "predicted_fitted_ns": fit,
            "ratio_fitted": wall / fit,
            "predicted_default_ns": def,
            "ratio_default": wall / def,
        })).collect::<Vec<_>>(),
    })
}

fn table(p: &Profile) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "lookup (T_r)     hit {:.1} ns   miss {:.1} ns   {:.0}% bypassed {:.1} ns",
        p.lookup_hit_ns,
        p.lookup_miss_ns,
        100.0 * MAX_BYPASS,
        p.bypassed_ns
    );
    for (w, t, e) in &p.words {
        let _ = writeln!(s, "state {w:>4.0} words  {t:>7.1} ns/packet   {e}");
    }
    let _ = writeln!(
        s,
        "  line: {:.1} ns + {:.2} ns/word",
        p.update_line.0, p.update_line.1
    );
    let _ = writeln!(
        s,
        "TCP              sum(volume) {:.1} ns   sum(is_lost) {:.1} ns",
        p.tcp_base_ns, p.tcp_lost_ns
    );
    for (n, t) in &p.pairs {
        let _ = writeln!(s, "sweep {n:>3.0} triggers/flow  {t:>8.1} ns per flow-epoch");
    }
    let _ = writeln!(
        s,
        "  line: {:.1} ns + {:.2} ns/pair",
        p.pair_line.0, p.pair_line.1
    );
    let _ = writeln!(
        s,
        "new flow         {:.1} ns   known first of epoch {:.1} ns",
        p.new_flow_ns, p.known_first_ns
    );
    let d = StateCosts::default();
    let f = p.fitted;
    let _ = writeln!(s, "\n{:<12} {:>10} {:>10}", "cost", "fitted", "default");
    for (name, x, y) in [
        ("lookup_ns", f.lookup_ns, d.lookup_ns),
        ("insert_ns", f.insert_ns, d.insert_ns),
        ("update_ns", f.update_ns, d.update_ns),
        ("per_word_ns", f.per_word_ns, d.per_word_ns),
        ("tcp_ns", f.tcp_ns, d.tcp_ns),
        ("pair_ns", f.pair_ns, d.pair_ns),
        ("bypass_ns", f.bypass_ns, d.bypass_ns),
    ] {
        let _ = writeln!(s, "{name:<12} {x:>10.2} {y:>10.2}");
    }
    let _ = writeln!(s, "\ncheck (mixed states): measured / predicted per epoch");
    let _ = writeln!(
        s,
        "{:>9} {:>5} {:>12} {:>9} {:>8} {:>8}",
        "flows", "shed", "measured_ms", "sweep_ms", "fitted", "default"
    );
    for &(flows, shed, wall, fit, def, sweep) in &p.check {
        let _ = writeln!(
            s,
            "{flows:>9} {:>5.1} {:>12.3} {:>9.3} {:>8.2} {:>8.2}",
            f64::from(shed.steps) + shed.extra,
            wall / 1e6,
            sweep / 1e6,
            wall / fit,
            wall / def
        );
    }
    s
}

pub fn profile_states(a: &ProfileStatesArgs) -> Result<ExitCode, Failure> {
    if a.flows == 0 || a.flows > MAX_FLOWS {
        return Err(Failure::Usage(format!(
            "clarion-lab: --flows must be 1 to {MAX_FLOWS}"
        )));
    }
    if a.packets == 0 || a.repeat == 0 {
        return Err(Failure::Usage(
            "clarion-lab: --packets and --repeat must be positive".into(),
        ));
    }
    let p = profile(a)?;
    if a.json {
        eprint!("{}", table(&p));
        println!("{}", to_json(a, &p));
    } else {
        print!("{}", table(&p));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn word_states_keep_the_words_the_layout_gives() {
        // 2 (tag, packets) + sum 2, count 1, stddev 5 per distinct measure.
        let expect = [4.0, 5.0, 7.0, 12.0, 17.0];
        for (s, w) in WORD_STATES.iter().zip(expect) {
            let (got, tcp) = words_of(&[s.to_string()], Shed::NONE).unwrap();
            assert_eq!(got, w, "{s}");
            assert!(!tcp);
        }
        let deep = Shed {
            steps: 64,
            extra: 0.0,
        };
        assert_eq!(words_of(&[WORD_STATES[0].to_string()], deep).unwrap().0, 2.0);
        assert!(
            words_of(&["sum(is_lost) > 1000000000".to_string()], Shed::NONE)
                .unwrap()
                .1
        );
    }

    #[test]
    fn shapes_give_distinct_ordered_packets() {
        let s = Shape::new(7, 30, Proto::Mixed);
        let ord = order(7, 3);
        let mut sorted = ord.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..7).collect::<Vec<_>>());
        let ps: Vec<_> = (0..s.per_epoch())
            .map(|p| s.packet(u64::from(ord[(p % 7) as usize]), 1, p))
            .collect();
        assert!(ps.windows(2).all(|w| w[0].ts_ns < w[1].ts_ns));
        let keys: std::collections::BTreeSet<_> = ps.iter().map(|p| (p.key.src_ip, p.key.proto)).collect();
        assert_eq!(keys.len(), 7);
        assert!(ps.iter().all(|p| (p.key.proto == 6) == p.tcp.is_some()));
    }

    proptest! {
        #[test]
        fn fit_recovers_a_line(a in -1e3f64..1e3, b in -1e2f64..1e2, xs in proptest::collection::btree_set(0u32..1000, 2..20)) {
            let pts: Vec<(f64, f64)> = xs.iter().map(|&x| (f64::from(x), a + b * f64::from(x))).collect();
            let (i, s) = fit_line(&pts).unwrap();
            prop_assert!((i - a).abs() < 1e-6 * (1.0 + a.abs() + 1000.0 * b.abs()));
            prop_assert!((s - b).abs() < 1e-9 * (1.0 + b.abs()) * 1000.0);
        }

        #[test]
        fn median_is_the_middle_of_the_sorted(v in proptest::collection::vec(-1e6f64..1e6, 1..30)) {
            let mut sorted = v.clone();
            sorted.sort_by(f64::total_cmp);
            let m = median(&mut v.clone());
            let below = sorted.iter().filter(|&&x| x < m).count();
            let above = sorted.iter().filter(|&&x| x > m).count();
            prop_assert!(below <= v.len() / 2 && above <= v.len() / 2);
        }
    }
}
