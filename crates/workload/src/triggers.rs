//! The trigger synthesizer.
//!
//! # Construction
//!
//! With `N` triggers, `K` per packet and `P` patterns, the traffic is spread
//! over `G = ⌊N/K⌋` groups of the [address plan](crate::layout), and
//! trigger `j` (0-based) gets
//!
//! - group `g = ⌊j/K⌋`: its filter selects exactly that group's flows. The
//!   `N mod K` triggers left over land in group `G`, which no traffic uses:
//!   they are installed and swept but match nothing. So every flow, hence
//!   every packet, matches exactly the `K` triggers of its group — ordinary
//!   and attack flows alike, since attack flows live in the same groups;
//! - pattern `j mod P` of [`layout::patterns`](crate::layout::patterns):
//!   as `j` runs over `0..N` with `N ≥ P`, every one of the first `P`
//!   patterns is used and no other, so the trigger index has exactly `P`
//!   tuples. A packet's `K` triggers use `min(K, P)` distinct patterns
//!   (consecutive `j`), and the lookup probes all `P` for every new flow;
//! - statistic `k mod 3` with `k = j mod K`: `sum(packets)`, `sum(volume)`,
//!   `sum(is_lost)` in turn, so the `K` triggers of a packet cover all three
//!   (for `K ≥ 3`), as in Trumpet's evaluation. `is_lost` makes the monitor
//!   keep TCP connection state for every TCP flow;
//! - a threshold `z` standard deviations above the statistic's mean for one
//!   flow over one interval, `z` from `[2, 3, 4, 6]` by `⌊k/3⌋ + g`. A flow
//!   gets each ordinary packet with probability 1/active, so its packet
//!   count is nearly Poisson (mean `m` = rate × interval / active flows,
//!   variance `m × burst`), its volume that times the payload (the volume
//!   threshold is the packet threshold times the payload, a whole number of
//!   packets), and its losses Poisson with mean `m × retransmit_fraction`.
//!   So triggers fire
//!   rarely, as events do in production — about 0.6% of (trigger, flow,
//!   window) triples, a few dozen reports per window at the defaults — but
//!   every window reports some, and the sweep's report path is exercised.
//!   With many flows a flow has less than one packet a window, and even
//!   the lowest threshold, one packet, fires on every second packet of a
//!   flow's window: at 1 M active flows (0.15 packets a flow a window)
//!   there are 0.11 reports a packet;
//! - granularity `per 5tuple` and the interval `every I`.
//!
//! Trigger `j` is named `g<g>_<k>`.

use std::fmt::Write as _;

use crate::layout::{self, Proto, MAX_GROUPS, MAX_PATTERNS};
use crate::traffic::WorkloadSpec;
use crate::{invalid, WorkloadError};

/// The triggers to synthesize. See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TriggerSpec {
    /// Triggers installed (N).
    pub triggers: u32,
    /// Triggers each packet matches (K).
    pub per_packet: u32,
    /// Distinct filter patterns (P): tuple-space tables probed per new flow.
    pub patterns: u32,
    /// Every trigger's interval.
    pub interval_ns: u64,
}

impl Default for TriggerSpec {
    /// Trumpet's evaluation: 4,096 triggers, 8 per packet, 32 patterns, 10 ms.
    fn default() -> Self {
        TriggerSpec {
            triggers: 4_096,
            per_packet: 8,
            patterns: 32,
            interval_ns: 10_000_000,
        }
    }
}

/// What a trigger measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Statistic {
    Packets,
    Volume,
    Loss,
}

impl Statistic {
    /// The aggregate in the event language.
    pub fn aggregate(self) -> &'static str {
        match self {
            Statistic::Packets => "sum(packets)",
            Statistic::Volume => "sum(volume)",
            Statistic::Loss => "sum(is_lost)",
        }
    }
}

/// Synthesized triggers: event-language text plus what it promises.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TriggerSet {
    /// The events, ready for `clarion_lang::check` or a file.
    pub text: String,
    pub triggers: u32,
    pub per_packet: u32,
    pub patterns: u32,
    /// Groups the traffic uses.
    pub groups: u32,
}

/// How many standard deviations above its mean a threshold sits.
const Z_SCORES: [f64; 4] = [2.0, 3.0, 4.0, 6.0];

/// The packet count `z` standard deviations above the mean of a count with
/// mean `mean` and variance `mean × burst`, rounded up to a whole packet.
fn packets_above(mean: f64, burst: f64, z: f64) -> u64 {
    (mean + z * (mean * burst).sqrt()).ceil() as u64
}

/// `10ms`, `250us`, `7ns`: the largest unit that divides the duration.
fn duration_text(ns: u64) -> String {
    for (unit, per) in [("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)] {
        if ns.is_multiple_of(per) {
            return format!("{}{unit}", ns / per);
        }
    }
    format!("{ns}ns")
}

impl TriggerSpec {
    /// Groups the traffic must be spread over: `⌊N/K⌋`.
    pub fn traffic_groups(&self) -> u32 {
        self.triggers / self.per_packet.max(1)
    }

    pub fn validate(&self) -> Result<(), WorkloadError> {
        if self.per_packet == 0 {
            return Err(invalid("triggers per packet", "must be at least 1"));
        }
        if self.triggers < self.per_packet {
            return Err(invalid(
                "trigger count",
                format!(
                    "{} triggers cannot give every packet {} matches",
                    self.triggers, self.per_packet
                ),
            ));
        }
        if self.patterns == 0 || self.patterns as usize > MAX_PATTERNS {
            return Err(invalid(
                "pattern count",
                format!("{} is outside 1..={MAX_PATTERNS}", self.patterns),
            ));
        }
        if self.patterns > self.triggers {
            return Err(invalid(
                "pattern count",
                format!(
                    "{} triggers cannot use {} distinct patterns",
                    self.triggers, self.patterns
                ),
            ));
        }
        let groups = self.triggers.div_ceil(self.per_packet);
        if groups > MAX_GROUPS {
            return Err(invalid(
                "trigger count",
                format!(
                    "{} triggers at {} per packet need {groups} address groups; the plan has {MAX_GROUPS}",
                    self.triggers, self.per_packet
                ),
            ));
        }
        if self.interval_ns == 0 {
            return Err(invalid("interval", "must be longer than zero"));
        }
        Ok(())
    }

    /// The events for `workload`, whose `groups` must be [`Self::traffic_groups`].
    pub fn synthesize(&self, workload: &WorkloadSpec) -> Result<TriggerSet, WorkloadError> {
        self.validate()?;
        workload.validate()?;
        let groups = self.traffic_groups();
        if workload.groups != groups {
            return Err(WorkloadError::GroupMismatch {
                traffic: workload.groups,
                triggers: self.triggers,
                per_packet: self.per_packet,
                needed: groups,
            });
        }
        let patterns = layout::patterns();
        let every = duration_text(self.interval_ns);
        let per_flow = workload.packets_per_flow(self.interval_ns);
        let mut text = String::with_capacity(self.triggers as usize * 120);
        let _ = writeln!(
            text,
            "# Synthesized by clarion-workload: {} triggers, {} matched by every packet, {} filter patterns, every {every}.\n\
             # Group g (0..{groups}) sends from 10.0.0.0/8 + g*1024 to 172.16.0.0/12 + g*64 + 1; see crates/workload/src/layout.rs.\n",
            self.triggers, self.per_packet, self.patterns
        );
        for j in 0..self.triggers {
            let (g, k) = (j / self.per_packet, j % self.per_packet);
            let pattern = patterns[(j % self.patterns) as usize];
            let stat = [Statistic::Packets, Statistic::Volume, Statistic::Loss][(k % 3) as usize];
            let z = Z_SCORES[((k / 3 + g) % 4) as usize];
            let payload = workload.payload_len(layout::proto(g)) as u64;
            let burst = f64::from(workload.burst);
            let threshold = match stat {
                Statistic::Packets => packets_above(per_flow, burst, z),
                // Every ordinary packet carries `payload` bytes, so a volume
                // is a packet count times it: the threshold is a whole number
                // of packets, or a flow with few packets an interval would
                // fire on one packet (2 M of 3 M at 1 M flows).
                Statistic::Volume => packets_above(per_flow, burst, z) * payload,
                Statistic::Loss if layout::proto(g) == Proto::Tcp => {
                    packets_above(per_flow * workload.retransmit_fraction, burst, z)
                }
                Statistic::Loss => 0,
            };
            let _ = writeln!(
                text,
                "event g{g}_{k}\n  filter {}\n  when {} > {threshold}\n  per 5tuple\n  every {every}\n",
                pattern.filter(g),
                stat.aggregate()
            );
        }
        Ok(TriggerSet {
            text,
            triggers: self.triggers,
            per_packet: self.per_packet,
            patterns: self.patterns,
            groups,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration_text(10_000_000), "10ms");
        assert_eq!(duration_text(2_000_000_000), "2s");
        assert_eq!(duration_text(250_000), "250us");
        assert_eq!(duration_text(7), "7ns");
    }

    #[test]
    fn refuses_impossible_counts() {
        let w = WorkloadSpec::default();
        for bad in [
            TriggerSpec {
                per_packet: 0,
                ..TriggerSpec::default()
            },
            TriggerSpec {
                triggers: 4,
                per_packet: 8,
                ..TriggerSpec::default()
            },
            TriggerSpec {
                patterns: 189,
                ..TriggerSpec::default()
            },
            TriggerSpec {
                triggers: 16,
                per_packet: 8,
                patterns: 17,
                ..TriggerSpec::default()
            },
            TriggerSpec {
                triggers: 1 << 20,
                per_packet: 1,
                ..TriggerSpec::default()
            },
        ] {
            assert!(bad.synthesize(&w).is_err(), "{bad:?}");
        }
        let mismatch = TriggerSpec {
            triggers: 1024,
            ..TriggerSpec::default()
        };
        assert!(matches!(
            mismatch.synthesize(&w),
            Err(WorkloadError::GroupMismatch { needed: 128, .. })
        ));
    }

    /// P(X > t) for X Poisson with mean `m`.
    fn poisson_above(m: f64, t: u64) -> f64 {
        let (mut term, mut below) = ((-m).exp(), 0.0);
        for k in 0..=t {
            below += term;
            term *= m / (k + 1) as f64;
        }
        (1.0 - below).max(0.0)
    }

    /// Triggers fire rarely at every number of active flows: reports a
    /// packet, from the thresholds written and the counts' Poisson law
    /// (bursts of one).
    #[test]
    fn triggers_fire_rarely_at_every_scale() {
        for flows in [300, 10_000, 100_000, 1_000_000] {
            let t = TriggerSpec::default();
            let w = WorkloadSpec {
                active_flows: flows,
                groups: t.traffic_groups(),
                ..WorkloadSpec::default()
            };
            let set = t.synthesize(&w).unwrap();
            let m = w.packets_per_flow(t.interval_ns);
            let mut chances = Vec::new();
            for (j, event) in set.text.split("\nevent ").skip(1).enumerate() {
                let g = j as u32 / t.per_packet;
                let when = event
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("when "))
                    .unwrap();
                let (stat, threshold) = when.split_once(" > ").unwrap();
                let threshold: u64 = threshold.parse().unwrap();
                let payload = w.payload_len(layout::proto(g)) as u64;
                chances.push(match stat {
                    "sum(packets)" => poisson_above(m, threshold),
                    "sum(volume)" => {
                        assert_eq!(threshold % payload, 0, "{when}: not whole packets");
                        poisson_above(m, threshold / payload)
                    }
                    "sum(is_lost)" if layout::proto(g) == Proto::Tcp => {
                        poisson_above(m * w.retransmit_fraction, threshold)
                    }
                    _ => 0.0,
                });
            }
            // Reports a packet: a flow's expected reports in a window (over
            // its group's triggers) over its packets in it.
            let per_packet = chances.iter().sum::<f64>() / f64::from(w.groups) / m;
            // 0.00008, 0.0022, 0.019 and 0.11 from 300 to 1 M flows: at 1 M
            // a flow has 0.15 packets a window, and a threshold of one
            // packet (z = 2) fires for 1% of flow-windows, 7% of packets.
            // A volume threshold below one packet's volume made it 0.42.
            assert!(
                per_packet < 0.15,
                "{flows} flows: {per_packet:.4} reports a packet"
            );
        }
    }

    #[test]
    fn names_and_shape() {
        let t = TriggerSpec {
            triggers: 10,
            per_packet: 3,
            patterns: 4,
            interval_ns: 5_000_000,
        };
        let w = WorkloadSpec {
            groups: t.traffic_groups(),
            ..WorkloadSpec::default()
        };
        let set = t.synthesize(&w).unwrap();
        assert_eq!(set.groups, 3);
        assert_eq!(set.text.matches("\nevent ").count(), 10);
        assert!(set.text.contains("event g3_0\n"), "{}", set.text);
        assert!(set.text.contains("every 5ms"));
    }
}
