//! The cost model: what a set of events, or an attack, costs the monitor.
//!
//! # What?
//!
//! Two predictions from per-operation figures, with no I/O:
//!
//! - [`Model`]: Trumpet's DoS cost model (SIGCOMM'16 §6, Eq. 1-4), the
//!   work of one epoch under an attack, from costs `clarion-lab dos`
//!   profiles on the machine ([`Costs`]). The lab uses it to choose a DoS
//!   threshold and to compare predicted with measured breaking points.
//! - [`predict`]: what an events file will cost before any packet is seen,
//!   from the fixed figures below, so that `clarion check`, `clarion run`
//!   and `clarion agent` can warn at load about an events set whose work
//!   grows as packets × events.
//!
//! # Where the time goes
//!
//! A packet of a known flow costs `Update` whatever its events: the flow
//! entry remembers its match set, and statistics shared by its triggers
//! are kept once. A flow's first packet costs `Match(P)`, one hash probe
//! per distinct filter mask (P patterns, see `trigger_index.rs`). The
//! per-event work is in the sweep, once per epoch: each flow that had
//! packets is folded into every trigger it matched (a flow-trigger *pair*),
//! and each trigger with traffic closes its windows. So the sweep of an
//! epoch is
//!
//! ```text
//! S = N · Trigger(N)  +  F · K · Pair
//! ```
//!
//! with N triggers that saw traffic, F flows active in the epoch and K the
//! triggers a flow matches. A trigger's state is cold at each epoch once
//! there are thousands (several cache and TLB misses), so `Trigger(N)`
//! grows with N until every touch misses.
//!
//! # The prediction
//!
//! [`predict`] finds, over the installed events' filters, the most events
//! one flow can match (K): every filter is a set of (mask, value) rules
//! ([`crate::trigger_index`]), and the flows matching most rules are
//! looked for among candidate keys, each rule's value merged greedily with
//! the compatible rules of the most events. The result is a lower bound of
//! the true maximum in contrived cases (a key no greedy merge reaches) and
//! counts an event once however many of its filters match. It then states
//! two worst cases:
//!
//! - **per packet**: `Update + K · Pair`, a packet whose flow is new in its
//!   epoch (short flows, scans): what a capture of such packets costs, and
//!   the rate a worker can take of them;
//! - **per epoch**: `N · Trigger(N)` when every event sees traffic, against
//!   the epoch (the gcd of the intervals): above it, the monitor falls
//!   behind at any packet rate.
//!
//! [`Prediction::warning`] fires when the first exceeds
//! [`PACKET_BUDGET_NS`] per worker (workers split the flows) or the second
//! exceeds the epoch (workers do not help: each sweeps every trigger).
//!
//! # Provenance of the figures
//!
//! Measured on the project's 2-core VM (Intel Xeon model 167, 2 MiB of L2
//! a core) at commit 21af154, release build:
//!
//! - `UPDATE_NS`, `MATCH_BASE_NS`, `MATCH_PER_PATTERN_NS`: `clarion-lab dos
//!   --model-only --packets 1000000` (4 Mpps, 4,096 triggers, K = 8, 32
//!   patterns): Update 38.8 ns, Match(P) 634 + 9.5·P ns.
//! - `PAIR_NS`: `clarion-lab bench --packets 1000000 --verify-prefix 0
//!   --rate 1000000 --flows 300 --triggers 4096 --per-packet K` for K =
//!   128, 1,024, 4,096: sweep median 0.43, 3.25, 15.0 ms an epoch, that is
//!   11.1, 10.4 and 12.1 ns per flow-trigger pair with each trigger's first
//!   touch included; 9 ns once that is counted apart.
//! - `Trigger(N)`: `clarion run -q --pcap examples/demo.pcap` (538 epochs of
//!   10 ms, 3.5 active flows an epoch on average) with N events `when
//!   sum(volume) > 1000000000000 per 5tuple every 10ms`, no filter: 0.23, 0.73, 2.81,
//!   9.69 and 22.0 s for N = 1,000, 2,000, 5,000, 10,000 and 20,000, that
//!   is 0.39, 0.66, 1.04, 1.80 and 2.04 µs per trigger and epoch.
//!
//! Other machines differ by small factors; the warning is about orders of
//! magnitude (sets that run 1,000 times slower than the traffic), so the
//! figures are fixed rather than profiled at every start.

use std::collections::HashMap;

use clarion_lang::spec::EventSpec;
use clarion_wire::FlowKey;

use crate::key::KeyMask;
use crate::trigger_index::filter_rules;

// ----- figures -----------------------------------------------------------

/// ns per packet of a tracked flow (the DoS model's `Update`).
pub const UPDATE_NS: f64 = 39.0;
/// ns per new flow matched, apart from its patterns (`Match(P)` = base + P·per pattern).
pub const MATCH_BASE_NS: f64 = 634.0;
/// ns per distinct filter mask probed for a new flow.
pub const MATCH_PER_PATTERN_NS: f64 = 9.5;
/// ns of sweep per flow-trigger pair, a trigger's state already touched.
pub const PAIR_NS: f64 = 9.0;
/// `Trigger(N)` below this many triggers: state that stays in cache.
const TRIGGER_EPOCH_MIN_NS: f64 = 150.0;
/// `Trigger(N)` grows this much per trigger installed (the working set)...
const TRIGGER_EPOCH_PER_TRIGGER_NS: f64 = 0.16;
/// ...up to this, where every touch of a trigger misses.
const TRIGGER_EPOCH_MAX_NS: f64 = 2000.0;

/// Worst-case ns per packet a worker may spend before the warning: 10 µs,
/// 100,000 packets a second of flows new in their epoch (the K of about
/// 1,100 events matching every flow). Below it, sets cost at most tens of
/// times the baseline, which `clarion-lab feasibility` charts; above it,
/// one bad file turns a minute of capture into hours.
pub const PACKET_BUDGET_NS: f64 = 10_000.0;

/// ns of sweep per trigger with traffic and per epoch, `N` triggers installed.
pub fn trigger_epoch_ns(n: usize) -> f64 {
    (TRIGGER_EPOCH_MIN_NS + TRIGGER_EPOCH_PER_TRIGGER_NS * n as f64).min(TRIGGER_EPOCH_MAX_NS)
}

// ----- the DoS model -----------------------------------------------------

/// IP bytes of an attack packet in a TCP group (a bare SYN or ACK).
pub const TCP_ATTACK_BYTES: u32 = 40;
/// IP bytes of an attack packet in a UDP group (an empty datagram).
pub const UDP_ATTACK_BYTES: u32 = 28;
/// Most packets per attack flow the model considers.
pub const MAX_ATTACK_PACKETS: u32 = 1 << 16;

/// Packets per flow of a threshold attack at threshold `t`: the smallest
/// TCP flow that passes it.
pub fn threshold_flow_packets(t: u32) -> u32 {
    (t / TCP_ATTACK_BYTES + 1).min(MAX_ATTACK_PACKETS)
}

/// The four profiled costs of the DoS model, in ns, and what they were measured on.
#[derive(Clone, Debug)]
pub struct Costs {
    /// Per filtered packet (parse, lookup miss, filter).
    pub tp: f64,
    /// Per packet of a known flow.
    pub update: f64,
    /// Match(P) = match_base + match_per_pattern·P.
    pub match_base: f64,
    pub match_per_pattern: f64,
    /// Sweep per admitted flow (all its trigger pairs, every epoch it stays listed).
    pub sweep_per_flow: f64,
    /// The same per flow-trigger pair listed at a sweep.
    pub sweep_per_pair: f64,
    /// Epochs an admitted flow stays listed, on average (the paper assumes 1.5).
    pub listed_epochs: f64,
    /// Sweep per epoch with no attack.
    pub sweep_base: f64,
    /// Longest epoch minus mean epoch with no attack, in ns: the headroom
    /// the epoch-to-epoch variation takes (so the model's E + J ≤ I).
    pub jitter: f64,
}

/// The DoS model for one workload: its costs and shape. An epoch of length
/// I at rate R, with a share f of attack packets in attack flows of N
/// packets of which a share `a` pass the filter, costs
///
/// ```text
/// E(f) = R·I·((1 − f)·Update + f·Tp) + R·I·f·a/N·(Match(P) + Sweep) + S0
/// ```
///
/// and the monitor keeps up while E(f) + max(0, J − Q) ≤ I (the jitter J,
/// less what the receive ring absorbs, Q). `crates/lab/src/dos.rs` says how
/// each cost is profiled.
#[derive(Clone, Debug)]
pub struct Model {
    pub costs: Costs,
    pub rate: f64,
    pub interval_ns: f64,
    pub patterns: u32,
    pub slots: f64,
    /// Share of the address groups that carry TCP.
    pub tcp_share: f64,
    /// New good flows per epoch.
    pub good_arrivals: f64,
    /// How long the receive ring lasts at the rate, in ns (0: strict).
    pub ring_ns: f64,
}

/// P(Poisson(λ) ≥ k).
fn poisson_at_least(lambda: f64, k: u32) -> f64 {
    if k == 0 {
        return 1.0;
    }
    let mut term = (-lambda).exp();
    let mut below = term;
    for i in 1..k {
        term *= lambda / f64::from(i);
        below += term;
    }
    (1.0 - below).max(0.0)
}

impl Model {
    /// Match(P) at the model's patterns.
    pub fn match_ns(&self) -> f64 {
        (self.costs.match_base + self.costs.match_per_pattern * f64::from(self.patterns)).max(0.0)
    }

    /// Share of attack flows of `n` packets the filter at `t` admits.
    pub fn admitted(&self, t: u32, n: u32, fraction: f64) -> f64 {
        if t == 0 {
            return 1.0;
        }
        let packets = self.rate * self.interval_ns / 1e9;
        let flows = packets * fraction / f64::from(n.max(1)) + self.good_arrivals;
        // A flow meets, on average, half the epoch's other flows in its slot before its last packet.
        let lambda = flows / self.slots / 2.0;
        let share = |bytes: u32| {
            let own = bytes.saturating_mul(n);
            if own > t {
                1.0
            } else {
                poisson_at_least(lambda, (t - own) / bytes + 1)
            }
        };
        self.tcp_share * share(TCP_ATTACK_BYTES) + (1.0 - self.tcp_share) * share(UDP_ATTACK_BYTES)
    }

    /// Time an epoch must leave free for the variation between epochs: the
    /// jitter, less what the receive ring absorbs.
    pub fn headroom(&self) -> f64 {
        (self.costs.jitter - self.ring_ns).max(0.0)
    }

    /// E(f): ns of work in one epoch with attack flows of `n` packets, filter threshold `t`.
    pub fn epoch_ns(&self, n: u32, t: u32, fraction: f64) -> f64 {
        let c = &self.costs;
        let packets = self.rate * self.interval_ns / 1e9;
        let admitted_flows = packets * fraction * self.admitted(t, n, fraction) / f64::from(n.max(1));
        packets * ((1.0 - fraction) * c.update + fraction * c.tp)
            + admitted_flows * (self.match_ns() + c.sweep_per_flow)
            + c.sweep_base
    }

    /// The largest f ≤ `max` such that every f' ≤ f keeps E(f') ≤ I (0 if even no attack does not).
    pub fn max_fraction(&self, n: u32, t: u32, max: f64) -> f64 {
        let steps = 1000;
        let mut best = 0.0;
        for i in 0..=steps {
            let f = max * f64::from(i) / f64::from(steps);
            if self.epoch_ns(n, t, f) + self.headroom() > self.interval_ns {
                break;
            }
            best = f;
        }
        best
    }

    /// The smallest threshold at which a threshold attack of `fraction` keeps E ≤ I, if any.
    pub fn min_threshold(&self, fraction: f64, max_threshold: u32) -> Option<u32> {
        let mut t = 0u32;
        loop {
            if self.epoch_ns(threshold_flow_packets(t), t, fraction) + self.headroom() <= self.interval_ns {
                return Some(t);
            }
            // Thresholds that change N: one attack packet more per flow each step.
            t += TCP_ATTACK_BYTES;
            if t > max_threshold {
                return None;
            }
        }
    }
}

// ----- events -------------------------------------------------------------

/// Candidate keys merged with the rules of this many of the heaviest rules.
const MERGE_WITH: usize = 64;
/// Work bound of the candidate search (candidates × patterns).
const SEARCH_WORK: usize = 4_000_000;
/// Candidates whose events are counted exactly (the rest by an upper bound).
const EXACT_CANDIDATES: usize = 8;
/// Events named in a warning.
const NAMED: usize = 3;

/// What an events set will cost, predicted at load (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// Events installed that can match some packet.
    pub events: usize,
    /// Most events one flow can match (K).
    pub per_flow: usize,
    /// Of those, the broadest filters first: at most [`NAMED`] names.
    pub dominant: Vec<String>,
    /// Events matching every packet (no filter).
    pub unfiltered: usize,
    /// Distinct filter masks (P): probes per new flow.
    pub patterns: usize,
    /// The monitor's epoch: the gcd of the intervals (0 without events).
    pub epoch_ns: u64,
    /// Worst case per packet: its flow new in the epoch (`Update + K·Pair`).
    pub packet_ns: f64,
    /// Per new flow: `Match(P)`.
    pub new_flow_ns: f64,
    /// Sweep per epoch when every event sees traffic: `N·Trigger(N)`.
    pub epoch_sweep_ns: f64,
}

/// A distinct (mask, value) rule and the events owning it, ascending.
struct Rule {
    mask: FlowKey,
    val: FlowKey,
    events: Vec<u32>,
}

fn or_key(a: &FlowKey, b: &FlowKey) -> FlowKey {
    let or16 = |x: &[u8; 16], y: &[u8; 16]| (u128::from_ne_bytes(*x) | u128::from_ne_bytes(*y)).to_ne_bytes();
    FlowKey {
        src_ip: or16(&a.src_ip, &b.src_ip),
        dst_ip: or16(&a.dst_ip, &b.dst_ip),
        src_port: a.src_port | b.src_port,
        dst_port: a.dst_port | b.dst_port,
        vlan: a.vlan | b.vlan,
        proto: a.proto | b.proto,
        flags: a.flags | b.flags,
        vni: a.vni | b.vni,
    }
}

/// Bits a mask constrains: fewer is a broader filter.
fn mask_bits(m: &FlowKey) -> u32 {
    u128::from_ne_bytes(m.src_ip).count_ones()
        + u128::from_ne_bytes(m.dst_ip).count_ones()
        + m.src_port.count_ones()
        + m.dst_port.count_ones()
        + m.vlan.count_ones()
        + m.proto.count_ones()
        + m.flags.count_ones()
        + m.vni.count_ones()
}

/// The events' rules, grouped by mask for lookups (a tuple space, as the trigger index).
struct Space {
    rules: Vec<Rule>,
    /// Per distinct mask, masked value → rule.
    tuples: Vec<(KeyMask, HashMap<FlowKey, usize>)>,
}

impl Space {
    fn new(specs: &[&EventSpec]) -> Self {
        let mut at: HashMap<(KeyMask, FlowKey), usize> = HashMap::new();
        let mut rules: Vec<Rule> = Vec::new();
        for (e, s) in specs.iter().enumerate() {
            let e = e as u32;
            for f in &s.filters {
                for (mask, val) in filter_rules(f) {
                    let i = *at.entry((mask, val)).or_insert_with(|| {
                        rules.push(Rule {
                            mask: mask.0,
                            val,
                            events: Vec::new(),
                        });
                        rules.len() - 1
                    });
                    // An event lists a rule once, however many of its filters expand to it.
                    if rules[i].events.last() != Some(&e) {
                        rules[i].events.push(e);
                    }
                }
            }
        }
        let mut by_mask: HashMap<KeyMask, usize> = HashMap::new();
        let mut tuples: Vec<(KeyMask, HashMap<FlowKey, usize>)> = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            let t = *by_mask.entry(KeyMask(r.mask)).or_insert_with(|| {
                tuples.push((KeyMask(r.mask), HashMap::new()));
                tuples.len() - 1
            });
            tuples[t].1.insert(r.val, i);
        }
        Space { rules, tuples }
    }

    /// Rules matching `key`.
    fn matching(&self, key: &FlowKey) -> impl Iterator<Item = &Rule> + '_ {
        let key = *key;
        self.tuples
            .iter()
            .filter_map(move |(m, vals)| vals.get(&m.apply(&key)).map(|&i| &self.rules[i]))
    }

    /// Events matching `key`, counted once per matching rule (an upper bound).
    fn bound(&self, key: &FlowKey) -> usize {
        self.matching(key).map(|r| r.events.len()).sum()
    }

    /// Events matching `key`, each once, ascending.
    fn exact(&self, key: &FlowKey) -> Vec<u32> {
        let mut out: Vec<u32> = self
            .matching(key)
            .flat_map(|r| r.events.iter().copied())
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The key of rule `r` merged with every compatible rule of `heavy`, in order.
    fn merged(&self, r: &Rule, heavy: &[usize]) -> FlowKey {
        let (mut mask, mut val) = (r.mask, r.val);
        for &h in heavy {
            let o = &self.rules[h];
            // Compatible when the two agree on the bits both constrain.
            if KeyMask(o.mask).apply(&val) == KeyMask(mask).apply(&o.val) {
                mask = or_key(&mask, &o.mask);
                val = or_key(&val, &o.val);
            }
        }
        val
    }

    /// The most events one key matches, as found (see the module documentation).
    fn most_matched(&self) -> Vec<u32> {
        let mut order: Vec<usize> = (0..self.rules.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(self.rules[i].events.len()));
        let heavy = &order[..order.len().min(MERGE_WITH)];
        let limit = (SEARCH_WORK / self.tuples.len().max(1)).max(1);
        let mut candidates: Vec<(usize, FlowKey)> = order
            .iter()
            .take(limit)
            .map(|&i| {
                let key = self.merged(&self.rules[i], heavy);
                (self.bound(&key), key)
            })
            .collect();
        candidates.sort_by_key(|c| std::cmp::Reverse(c.0));
        candidates
            .iter()
            .take(EXACT_CANDIDATES)
            .map(|(_, key)| self.exact(key))
            .max_by_key(Vec::len)
            .unwrap_or_default()
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Predicts what `specs` cost the monitor (the events installed on their
/// own: `on demand` ones come later, narrowed, with their drill-downs).
pub fn predict(specs: &[EventSpec]) -> Prediction {
    let installed: Vec<&EventSpec> = specs.iter().filter(|s| !s.on_demand).collect();
    let space = Space::new(&installed);
    let live: Vec<bool> = {
        let mut v = vec![false; installed.len()];
        for r in &space.rules {
            for &e in &r.events {
                v[e as usize] = true;
            }
        }
        v
    };
    let events = live.iter().filter(|&&l| l).count();
    // Per event, the fewest bits any of its rules constrains.
    let mut breadth = vec![u32::MAX; installed.len()];
    for r in &space.rules {
        let bits = mask_bits(&r.mask);
        for &e in &r.events {
            breadth[e as usize] = breadth[e as usize].min(bits);
        }
    }
    let unfiltered = breadth.iter().filter(|&&b| b == 0).count();
    let mut worst = space.most_matched();
    worst.sort_by_key(|&e| (breadth[e as usize], e));
    let dominant = worst
        .iter()
        .take(NAMED)
        .map(|&e| installed[e as usize].name.clone())
        .collect();
    let epoch_ns = installed
        .iter()
        .zip(&live)
        .filter(|(_, &l)| l)
        .fold(0, |g, (s, _)| gcd(g, s.interval_ns));
    let patterns = space.tuples.len();
    let per_flow = worst.len();
    Prediction {
        events,
        per_flow,
        dominant,
        unfiltered,
        patterns,
        epoch_ns,
        packet_ns: UPDATE_NS + per_flow as f64 * PAIR_NS,
        new_flow_ns: MATCH_BASE_NS + patterns as f64 * MATCH_PER_PATTERN_NS,
        epoch_sweep_ns: events as f64 * trigger_epoch_ns(events),
    }
}

/// `1,234,567`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1 event`, `2,000 events`.
fn count(n: usize, what: &str) -> String {
    format!("{} {what}{}", thousands(n as u64), if n == 1 { "" } else { "s" })
}

/// A duration in ns, in the unit that reads best.
fn duration(ns: f64) -> String {
    let (v, unit) = match ns {
        n if n < 1e3 => (n, "ns"),
        n if n < 1e6 => (n / 1e3, "µs"),
        n if n < 1e9 => (n / 1e6, "ms"),
        n if n < 120e9 => (n / 1e9, "s"),
        n if n < 7_200e9 => (n / 60e9, "min"),
        n => (n / 3_600e9, "h"),
    };
    if v < 10.0 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.0} {unit}")
    }
}

impl Prediction {
    /// The worst-case per-packet work exceeds the budget of `workers`.
    pub fn packet_over(&self, workers: u32) -> bool {
        self.packet_ns > PACKET_BUDGET_NS * f64::from(workers.max(1))
    }

    /// The sweep of an epoch in which every event saw traffic outlasts the epoch.
    pub fn epoch_over(&self) -> bool {
        self.epoch_ns > 0 && self.epoch_sweep_ns > self.epoch_ns as f64
    }

    /// The events one flow can match, named: "a, b, c and 1,997 more".
    fn who(&self) -> String {
        let mut s = self
            .dominant
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let more = self.per_flow.saturating_sub(self.dominant.len());
        if more > 0 {
            s.push_str(&format!(" and {} more", thousands(more as u64)));
        }
        s
    }

    /// The predicted figures, one line each (for `clarion check --cost`).
    pub fn note(&self) -> String {
        let mut s = format!(
            "predicted cost ({} that can match, {}, {} epochs):\n",
            count(self.events, "event"),
            count(self.patterns, "filter pattern"),
            duration(self.epoch_ns as f64),
        );
        s.push_str(&format!(
            "  a flow matches at most {}{}\n",
            count(self.per_flow, "event"),
            if self.per_flow > 0 {
                format!(" ({})", self.who())
            } else {
                String::new()
            }
        ));
        s.push_str(&format!(
            "  per packet: {} of a known flow, up to {} when its flow is new in the epoch; {} more per new flow\n",
            duration(UPDATE_NS),
            duration(self.packet_ns),
            duration(self.new_flow_ns),
        ));
        s.push_str(&format!(
            "  per epoch: about {} of sweep when every event sees traffic",
            duration(self.epoch_sweep_ns)
        ));
        s
    }

    /// A warning when the set exceeds either budget (see the module
    /// documentation), with the events that dominate and what to do.
    pub fn warning(&self, workers: u32) -> Option<String> {
        let (packet, epoch) = (self.packet_over(workers), self.epoch_over());
        if !packet && !epoch {
            return None;
        }
        let workers = workers.max(1);
        let mut s = String::from("these events may cost far more than the traffic can pay for:");
        if packet {
            let per_worker = self.packet_ns / f64::from(workers);
            s.push_str(&format!(
                "\n  - a flow can match {} events ({}{}): up to {} per packet whose flow is new in its epoch, \
                 ~{} for a capture of 1,000,000 such packets{}",
                thousands(self.per_flow as u64),
                self.who(),
                if self.unfiltered > 0 {
                    format!("; {} have no filter", thousands(self.unfiltered as u64))
                } else {
                    String::new()
                },
                duration(self.packet_ns),
                duration(per_worker * 1e6),
                if workers > 1 {
                    format!(" with {workers} workers")
                } else {
                    String::new()
                },
            ));
        }
        if epoch {
            s.push_str(&format!(
                "\n  - {} events cost about {} of sweep per {} epoch when each sees traffic: a live monitor \
                 falls behind at any packet rate, and a capture takes ~{:.0}× its own duration or more",
                thousands(self.events as u64),
                duration(self.epoch_sweep_ns),
                duration(self.epoch_ns as f64),
                self.epoch_sweep_ns / self.epoch_ns as f64,
            ));
        }
        s.push_str(
            "\n  help: narrow the filters of the events that match most packets, install fewer events, \
             or lengthen the shortest interval; --workers divides the per-packet work, not the per-epoch work \
             (`clarion check --cost` shows the prediction)",
        );
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> Model {
        Model {
            costs: Costs {
                tp: 30.0,
                update: 60.0,
                match_base: 500.0,
                match_per_pattern: 10.0,
                sweep_per_flow: 200.0,
                sweep_per_pair: 10.0,
                listed_epochs: 2.5,
                sweep_base: 1e6,
                jitter: 0.0,
            },
            rate: 4e6,
            interval_ns: 1e7,
            patterns: 32,
            slots: f64::from(1u32 << 18),
            tcp_share: 0.75,
            good_arrivals: 10.0,
            ring_ns: 0.0,
        }
    }

    #[test]
    fn threshold_attack_flows_just_pass_the_filter() {
        assert_eq!(threshold_flow_packets(0), 1);
        assert_eq!(threshold_flow_packets(832), 21);
        let m = model();
        assert_eq!(m.admitted(0, 1, 0.5), 1.0);
        // TCP flows pass; UDP flows (28 B packets) stay below unless a collision lifts them.
        let a = m.admitted(832, 21, 0.5);
        assert!((0.75..0.76).contains(&a), "{a}");
        // A lone SYN never exceeds a 40 B threshold; a few collide.
        let fp = m.admitted(40, 1, 0.5);
        assert!(fp > 0.0 && fp < 0.1, "{fp}");
    }

    #[test]
    fn epoch_cost_and_breaking_point() {
        let m = model();
        // No attack: 40,000 packets of 60 ns plus a 1 ms sweep.
        assert!((m.epoch_ns(1, 0, 0.0) - 3.4e6).abs() < 1.0);
        // SYN attack behind a filter: attack packets are cheaper than good ones.
        assert_eq!(m.max_fraction(1, 832, 0.96), 0.96);
        // Filter off: each attack packet costs 30 + 820 + 200 ns.
        let f = m.max_fraction(1, 0, 0.96);
        let e = m.epoch_ns(1, 0, f);
        assert!(e <= 1e7 && m.epoch_ns(1, 0, f + 0.001) > 1e7, "{f}");
        // Higher thresholds survive larger threshold attacks.
        let at = |t| m.max_fraction(threshold_flow_packets(t), t, 0.96);
        assert!(at(384) > at(40));
        let t = m.min_threshold(0.96, 1 << 20).unwrap();
        assert!(m.epoch_ns(threshold_flow_packets(t), t, 0.96) <= 1e7);
        assert!(
            t == 0 || {
                let below = t - TCP_ATTACK_BYTES;
                m.epoch_ns(threshold_flow_packets(below), below, 0.96) > 1e7
            }
        );
    }

    #[test]
    fn poisson_tail() {
        assert_eq!(poisson_at_least(0.5, 0), 1.0);
        assert!((poisson_at_least(0.5, 1) - (1.0 - (-0.5f64).exp())).abs() < 1e-12);
        assert!(poisson_at_least(0.5, 20) < 1e-15);
    }

    fn events(text: &str) -> Vec<EventSpec> {
        clarion_lang::check(text).unwrap()
    }

    fn repeated(n: usize, filter: impl Fn(usize) -> String) -> String {
        (0..n)
            .map(|i| {
                format!(
                    "event e{i}\n{}  when sum(volume) > 1000000000000\n  per 5tuple\n  every 10ms\n",
                    filter(i)
                )
            })
            .collect()
    }

    #[test]
    fn monotone_in_the_events_a_flow_matches() {
        let mut last = 0.0;
        for n in [1, 10, 100, 1000] {
            let p = predict(&events(&repeated(n, |_| String::new())));
            assert_eq!(p.per_flow, n);
            assert_eq!(p.unfiltered, n);
            assert!(p.packet_ns > last, "{n}: {p:?}");
            last = p.packet_ns;
        }
        // Overlapping filters of different shapes still add up on the flow they share.
        let text = repeated(30, |i| match i % 3 {
            0 => "  filter proto = tcp\n".into(),
            1 => "  filter dst_ip in 10.0.0.0/8\n".into(),
            _ => "  filter src_port in 1024..65535\n".into(),
        });
        assert_eq!(predict(&events(&text)).per_flow, 30);
    }

    #[test]
    fn disjoint_or_impossible_filters_cost_almost_nothing() {
        // 1,000 events, one per /32: a flow matches one of them.
        let p = predict(&events(&repeated(1000, |i| {
            format!("  filter dst_ip in 10.0.{}.{}/32\n", i / 256, i % 256)
        })));
        assert_eq!(p.per_flow, 1);
        assert!(p.packet_ns < 2.0 * (UPDATE_NS + PAIR_NS), "{p:?}");
        assert!(p.warning(1).is_none());
        // Added to 10 broad events, they raise a flow's count by one only.
        let mut text = repeated(10, |_| String::new());
        text.push_str(
            &repeated(1000, |i| format!("  filter dst_port = {}\n", i + 1)).replace("event e", "event p"),
        );
        assert_eq!(predict(&events(&text)).per_flow, 11);
        // An IPv4 source with an IPv6 destination matches no packet: no cost.
        let p = predict(&events(&repeated(100, |_| {
            "  filter src_ip in 10.0.0.0/8 and dst_ip in 2001:db8::/32\n".into()
        })));
        assert_eq!((p.events, p.per_flow, p.epoch_sweep_ns), (0, 0, 0.0));
    }

    #[test]
    fn figures_within_the_order_measured() {
        // Measured (module documentation): 20,000 unfiltered events on
        // examples/demo.pcap, 538 epochs of 10 ms, 22.0 s: 41 ms per epoch.
        let p = predict(&events(&repeated(20_000, |_| String::new())));
        assert_eq!(p.epoch_ns, 10_000_000);
        let measured_epoch = 22.0e9 / 538.0;
        assert!(
            (measured_epoch / 3.0..measured_epoch * 3.0).contains(&p.epoch_sweep_ns),
            "{p:?}"
        );
        assert!(p.packet_over(1) && p.epoch_over());
        // The bench at K = 1,024 (300 flows, 4,096 triggers): 3.25 ms of sweep an epoch.
        let p = predict(&events(&repeated(1024, |_| String::new())));
        let pairs = 300.0 * 1024.0 * PAIR_NS;
        assert!((3.25e6 / 3.0..3.25e6 * 3.0).contains(&pairs), "{pairs}");
        assert!(p.packet_ns < PACKET_BUDGET_NS, "{p:?}");
        // The DoS model's Update and Match(32), as profiled.
        assert!((30.0..50.0).contains(&UPDATE_NS));
        assert!((600.0..1200.0).contains(&(MATCH_BASE_NS + 32.0 * MATCH_PER_PATTERN_NS)));
    }

    #[test]
    fn the_warning_names_the_events_and_what_to_do() {
        let mut text = repeated(2000, |_| String::new());
        text.push_str("event narrow\n  filter dst_ip in 10.0.0.1/32\n  when sum(volume) > 1000000000000\n  every 10ms\n");
        let p = predict(&events(&text));
        assert_eq!(p.per_flow, 2001);
        let w = p.warning(1).unwrap();
        assert!(w.contains("`e0`, `e1`, `e2` and 1,998 more"), "{w}");
        assert!(w.contains("2,000 have no filter"), "{w}");
        assert!(w.contains("help: narrow the filters"), "{w}");
        // Enough workers take the per-packet part; the per-epoch part stays.
        assert!(p.warning(4).is_none(), "{w}");
        let note = p.note();
        assert!(note.contains("a flow matches at most 2,001 events"), "{note}");
    }
}
