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
//!   variance `m × burst`), its volume that times the payload, and its
//!   losses Poisson with mean `m × retransmit_fraction`. So triggers fire
//!   rarely, as events do in production — about 0.6% of (trigger, flow,
//!   window) triples, a few dozen reports per window at the defaults — but
//!   every window reports some, and the sweep's report path is exercised;
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
            let payload = workload.payload_len(layout::proto(g)) as f64;
            let burst = f64::from(workload.burst);
            let (mean, sd) = match stat {
                Statistic::Packets => (per_flow, (per_flow * burst).sqrt()),
                Statistic::Volume => (per_flow * payload, payload * (per_flow * burst).sqrt()),
                Statistic::Loss if layout::proto(g) == Proto::Tcp => {
                    let lost = per_flow * workload.retransmit_fraction;
                    (lost, (lost * burst).sqrt())
                }
                Statistic::Loss => (0.0, 0.0),
            };
            let threshold = (mean + z * sd).ceil() as u64;
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
