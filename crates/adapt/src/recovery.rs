//! Accuracy gap recovery (MONA §V-B, Alg. 2 with Eq. 9): CPU-neutral moves
//! of flows from tasks with accuracy to spare to tasks that lack it.
//!
//! # What?
//!
//! After shedding, some tasks' estimated recall ([`crate::recall`]) falls
//! below the threshold. A state is *poor* if it measures such a task and
//! adaptation moved some of its flows away (there is something to revert);
//! *rich* if every task it measures is at least `threshold + headroom` (the
//! headroom keeps a rich state from turning poor in one step) and moving
//! its flows to the default state saves time. Each window, for every
//! (rich, poor) pair, a fraction `Δ⁻` of the rich state's flows goes to
//! its default state and the time saved reverts a fraction `Δ⁺` of the
//! flows shed from the poor state back to it:
//!
//! ```text
//! Δ⁻·N_rich·(t_rich − t_default) = Δ⁺·N_shed(poor)·(t_poor − E[t_poor])    (Eq. 9)
//! E[t_poor] = Σ_j B[poor→j]·t_j / Σ_j B[poor→j]
//! ```
//!
//! with `B` the flows adaptation moved from each state to each lighter one
//! (recorded by the caller as [`Transition`]s) and `Δ⁻ = S_rich / n_poor`.
//!
//! # Step sizes (MM policy)
//!
//! Each state has a step `S` (a fraction of its flows), starting at
//! `step_init`. Each window a rich state's step is multiplied by
//! `increase` when its residual accuracy `H = A_w − threshold` exceeds its
//! last decrease `D = A_{w−1} − A_w` (another step of that size would keep
//! it above the threshold), else by `decrease`; clamped to
//! `[step_min, step_max]`. This follows the paper's text ("S is increased
//! if H > D"); Alg. 2's line 4 reads the other way round, which would grow
//! the step exactly when the state is about to turn poor.
//!
//! # Applying a move (the caller)
//!
//! A [`Move`] carries disjoint hash ranges: flows currently in `from_state`
//! whose hash fraction lies in `[minus_offset, minus_offset + delta_minus)`
//! go to `to_state` (its default); flows that adaptation moved away from
//! `revert_state` whose hash fraction lies in `[plus_offset, plus_offset +
//! delta_plus)` go back to it. Use a hash independent of the one that
//! chose the routine's `extra` share, so the ranges select an unbiased
//! share of each population.
//!
//! # Invariants
//!
//! - Every move satisfies Eq. 9 exactly (up to rounding).
//! - Per rich state, `Σ delta_minus ≤ S ≤ step_max ≤ 1`; per poor state,
//!   `Σ delta_plus ≤ 1` (a move is cut, both sides, when the poor state has
//!   no shed flows left to revert).
//! - No moves unless there is at least one rich and one poor state.
//!
//! # Cost
//!
//! O(states × tasks per state + transitions + rich × poor) per window; it
//! allocates the returned moves and a per-call scratch of O(states).

use crate::error::{check_range, AdaptError};
use crate::graph::{StateGraph, StateId};

/// Flows adaptation moved from `from` to the lighter state `to` (`B`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transition {
    pub from: StateId,
    pub to: StateId,
    pub flows: u64,
}

/// Thresholds and the MM step policy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RecoveryConfig {
    /// Accuracy (recall) a task must reach, in `[0, 1]`.
    pub threshold: f64,
    /// `ε`: a rich state's tasks are all ≥ `threshold + headroom`.
    pub headroom: f64,
    pub step_init: f64,
    pub step_min: f64,
    /// ≤ 1.
    pub step_max: f64,
    /// > 1.
    pub increase: f64,
    /// In `(0, 1)`.
    pub decrease: f64,
}

impl Default for RecoveryConfig {
    /// Threshold 0.9, headroom 0.02; steps from 1% within [0.25%, 10%]
    /// of a state's flows (the paper's range of initial steps), doubled or
    /// halved.
    fn default() -> Self {
        RecoveryConfig {
            threshold: 0.9,
            headroom: 0.02,
            step_init: 0.01,
            step_min: 0.0025,
            step_max: 0.1,
            increase: 2.0,
            decrease: 0.5,
        }
    }
}

impl RecoveryConfig {
    fn validate(&self) -> Result<(), AdaptError> {
        check_range("threshold", self.threshold, 0.0, 1.0, "[0, 1]")?;
        check_range("headroom", self.headroom, 0.0, 1.0, "[0, 1]")?;
        check_range("step_max", self.step_max, 0.0, 1.0, "[0, 1]")?;
        check_range("step_min", self.step_min, 0.0, self.step_max, "[0, step_max]")?;
        check_range(
            "step_init",
            self.step_init,
            self.step_min,
            self.step_max,
            "[step_min, step_max]",
        )?;
        check_range("increase", self.increase, 1.0, f64::MAX, ">= 1")?;
        check_range("decrease", self.decrease, f64::MIN_POSITIVE, 1.0, "(0, 1]")?;
        Ok(())
    }
}

/// One rebalancing action of a (rich, poor) pair (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Move {
    /// The rich state giving up flows.
    pub from_state: StateId,
    /// Its default state.
    pub to_state: StateId,
    /// Fraction of `from_state`'s flows to move, with its hash range start.
    pub delta_minus: f64,
    pub minus_offset: f64,
    /// The poor state taking flows back.
    pub revert_state: StateId,
    /// Fraction of the flows shed from `revert_state` to revert, with its
    /// hash range start.
    pub delta_plus: f64,
    pub plus_offset: f64,
    /// The populations the fractions apply to: flows in `from_state`, and
    /// flows shed from `revert_state` (`Σ_j B[revert→j]`).
    pub rich_flows: u64,
    pub shed_flows: u64,
    /// CPU time per packet the move frees on the rich side, ×flows (ns);
    /// equal to what it spends on the poor side.
    pub balance_ns: f64,
}

/// Alg. 2's state across windows: each state's step and last accuracy.
#[derive(Clone, Debug)]
pub struct Recovery {
    config: RecoveryConfig,
    steps: Vec<f64>,
    last: Vec<Option<f64>>, // state accuracy in the previous window
}

impl Recovery {
    pub fn new(config: RecoveryConfig, graph: &StateGraph) -> Result<Self, AdaptError> {
        config.validate()?;
        Ok(Recovery {
            config,
            steps: vec![config.step_init; graph.len()],
            last: vec![None; graph.len()],
        })
    }

    /// The current step of state `s`, or `None` for an unknown state.
    pub fn step(&self, s: StateId) -> Option<f64> {
        self.steps.get(s as usize).copied()
    }

    /// One window: `accuracy[t]` per task (at least `graph.task_count()`
    /// entries), `flows[s]` flows currently in each state, `transitions`
    /// the flows adaptation moved (`B`). Returns the moves to apply.
    pub fn rebalance(
        &mut self,
        graph: &StateGraph,
        accuracy: &[f64],
        flows: &[u64],
        transitions: &[Transition],
    ) -> Result<Vec<Move>, AdaptError> {
        let n = graph.len();
        if self.steps.len() != n {
            return Err(AdaptError::LengthMismatch {
                what: "graph states (rebuild Recovery when the graph changes)",
                expected: self.steps.len(),
                got: n,
            });
        }
        if flows.len() != n {
            return Err(AdaptError::LengthMismatch {
                what: "flows per state",
                expected: n,
                got: flows.len(),
            });
        }
        if accuracy.len() < graph.task_count() {
            return Err(AdaptError::LengthMismatch {
                what: "accuracy per task",
                expected: graph.task_count(),
                got: accuracy.len(),
            });
        }
        for &a in accuracy {
            check_range("accuracy", a, 0.0, 1.0, "[0, 1]")?;
        }
        // Σ_j B[s→j] and Σ_j B[s→j]·t_j per state.
        let mut shed = vec![(0u64, 0.0f64); n];
        for tr in transitions {
            for s in [tr.from, tr.to] {
                if s as usize >= n {
                    return Err(AdaptError::NoSuchState { state: s, len: n });
                }
            }
            let e = &mut shed[tr.from as usize];
            e.0 += tr.flows;
            e.1 += tr.flows as f64 * graph.t_p_ns(tr.to);
        }

        let c = self.config;
        // A state's accuracy: its weakest task's; None without tasks.
        let state_acc: Vec<Option<f64>> = graph
            .ids()
            .map(|s| {
                graph
                    .tasks(s)
                    .iter()
                    .map(|&t| accuracy[usize::from(t)])
                    .reduce(f64::min)
            })
            .collect();
        let mut rich: Vec<StateId> = Vec::new();
        let mut poor: Vec<(StateId, u64, f64)> = Vec::new(); // (state, shed flows, t_poor − E[t_poor])
        for s in graph.ids() {
            let Some(a) = state_acc[s as usize] else { continue };
            let i = s as usize;
            if a < c.threshold {
                let (moved, cost) = shed[i];
                if moved > 0 {
                    let gain = graph.t_p_ns(s) - cost / moved as f64;
                    if gain > 0.0 {
                        poor.push((s, moved, gain));
                    }
                }
            } else if a >= c.threshold + c.headroom
                && flows[i] > 0
                && graph.t_p_ns(s) > graph.t_p_ns(graph.default_of(s))
            {
                rich.push(s);
            }
        }

        let mut moves = Vec::new();
        if !rich.is_empty() && !poor.is_empty() {
            for &x in &rich {
                let i = x as usize;
                if let (Some(prev), Some(now)) = (self.last[i], state_acc[i]) {
                    let decrease = prev - now;
                    let residual = now - c.threshold;
                    let factor = if residual > decrease {
                        c.increase
                    } else {
                        c.decrease
                    };
                    self.steps[i] = (self.steps[i] * factor).clamp(c.step_min, c.step_max);
                }
            }
            let n_poor = poor.len() as f64;
            let mut plus_used = vec![0.0f64; poor.len()];
            for &x in &rich {
                let i = x as usize;
                let def = graph.default_of(x);
                let per_flow_saving = graph.t_p_ns(x) - graph.t_p_ns(def);
                let rich_flows = flows[i];
                let mut minus_offset = 0.0;
                for (k, &(y, shed_flows, gain)) in poor.iter().enumerate() {
                    let mut dm = self.steps[i] / n_poor;
                    let mut balance = dm * rich_flows as f64 * per_flow_saving;
                    let mut dp = balance / (shed_flows as f64 * gain);
                    let room = 1.0 - plus_used[k];
                    if dp > room {
                        dp = room;
                        balance = dp * shed_flows as f64 * gain;
                        dm = balance / (rich_flows as f64 * per_flow_saving);
                    }
                    if dp <= 0.0 || dm <= 0.0 {
                        continue;
                    }
                    moves.push(Move {
                        from_state: x,
                        to_state: def,
                        delta_minus: dm,
                        minus_offset,
                        revert_state: y,
                        delta_plus: dp,
                        plus_offset: plus_used[k],
                        rich_flows,
                        shed_flows,
                        balance_ns: balance,
                    });
                    minus_offset += dm;
                    plus_used[k] += dp;
                }
            }
        }
        self.last = state_acc;
        Ok(moves)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::graph::GraphBuilder;
    use proptest::prelude::*;

    /// Tasks 0..3. Chain P: {0,1}=100 → {0}=60 → {}=10.
    /// Chain R: {2,3}=90 → {2}=50 → {}'=5.
    fn sample() -> StateGraph {
        let mut b = GraphBuilder::new();
        let d1 = b.add_state(None, 10.0, &[]);
        let p1 = b.add_state(Some(d1), 60.0, &[0]);
        b.add_state(Some(p1), 100.0, &[0, 1]); // 2
        let d2 = b.add_state(None, 5.0, &[]); // 3
        let r1 = b.add_state(Some(d2), 50.0, &[2]); // 4
        b.add_state(Some(r1), 90.0, &[2, 3]); // 5
        b.build().unwrap()
    }

    #[test]
    fn one_pair_by_hand() {
        let g = sample();
        let mut r = Recovery::new(RecoveryConfig::default(), &g).unwrap();
        // Task 1 poor (0.5); tasks 0, 2, 3 rich (≥ 0.92).
        let acc = [0.95, 0.5, 0.99, 0.97];
        let flows = [0, 0, 1000, 0, 0, 2000];
        // 300 flows of state 2 shed to 1 (t 60), 100 to 0 (t 10):
        // E = (300·60 + 100·10)/400 = 47.5, gain = 52.5.
        let tr = [
            Transition {
                from: 2,
                to: 1,
                flows: 300,
            },
            Transition {
                from: 2,
                to: 0,
                flows: 100,
            },
        ];
        let moves = r.rebalance(&g, &acc, &flows, &tr).unwrap();
        assert_eq!(moves.len(), 1);
        let m = moves[0];
        assert_eq!((m.from_state, m.to_state, m.revert_state), (5, 3, 2));
        // S = 0.01 (first window: no previous accuracy), one poor state.
        assert!((m.delta_minus - 0.01).abs() < 1e-15);
        // Saved 0.01·2000·(90 − 5) = 1700 = Δ⁺·400·52.5.
        assert!((m.balance_ns - 1700.0).abs() < 1e-9);
        assert!((m.delta_plus - 1700.0 / (400.0 * 52.5)).abs() < 1e-12);
        assert_eq!((m.rich_flows, m.shed_flows), (2000, 400));
    }

    #[test]
    fn no_moves_without_both_sides() {
        let g = sample();
        let flows = [0, 0, 1000, 0, 0, 2000];
        let tr = [Transition {
            from: 2,
            to: 1,
            flows: 300,
        }];
        let mut r = Recovery::new(RecoveryConfig::default(), &g).unwrap();
        // All rich.
        assert!(r.rebalance(&g, &[1.0; 4], &flows, &tr).unwrap().is_empty());
        // All poor.
        assert!(r.rebalance(&g, &[0.1; 4], &flows, &tr).unwrap().is_empty());
        // Poor but nothing was shed from it.
        assert!(r
            .rebalance(&g, &[0.95, 0.5, 0.99, 0.97], &flows, &[])
            .unwrap()
            .is_empty());
        // Rich only within the headroom (0.91 < 0.92).
        assert!(r
            .rebalance(&g, &[0.95, 0.5, 0.91, 0.97], &flows, &tr)
            .unwrap()
            .is_empty());
        // Inputs checked.
        assert!(r.rebalance(&g, &[1.0; 3], &flows, &tr).is_err());
        assert!(r.rebalance(&g, &[1.0; 4], &flows[..5], &tr).is_err());
        assert!(r.rebalance(&g, &[1.5; 4], &flows, &tr).is_err());
        let bad = [Transition {
            from: 9,
            to: 1,
            flows: 1,
        }];
        assert!(r.rebalance(&g, &[1.0; 4], &flows, &bad).is_err());
    }

    #[test]
    fn mm_step_policy() {
        let g = sample();
        let cfg = RecoveryConfig::default();
        let mut r = Recovery::new(cfg, &g).unwrap();
        let flows = [0, 0, 1000, 0, 0, 2000];
        let tr = [Transition {
            from: 2,
            to: 1,
            flows: 300,
        }];
        let run = |r: &mut Recovery, a: f64| r.rebalance(&g, &[0.95, 0.5, a, a], &flows, &tr).unwrap();
        run(&mut r, 1.0);
        assert_eq!(r.step(5), Some(0.01)); // no history yet
        run(&mut r, 0.99); // D = 0.01 < H = 0.09: increase
        assert_eq!(r.step(5), Some(0.02));
        run(&mut r, 0.98);
        assert_eq!(r.step(5), Some(0.04));
        run(&mut r, 0.93); // D = 0.05 > H = 0.03: decrease
        assert_eq!(r.step(5), Some(0.02));
        for _ in 0..20 {
            run(&mut r, 0.93); // D = 0 < H: increase, up to step_max
        }
        assert_eq!(r.step(5), Some(cfg.step_max));
        let mut a = 1.0;
        for _ in 0..20 {
            a -= 0.003; // D = 0.003 vs H shrinking from 0.097 to 0.04: increase
            run(&mut r, a);
        }
        assert_eq!(r.step(5), Some(cfg.step_max));
        for k in 1..=20 {
            // A window without poor states updates no step but records
            // accuracy 1.0; then a fall to 0.93 (D 0.07 > H 0.03) halves.
            r.rebalance(&g, &[1.0; 4], &flows, &tr).unwrap();
            let before = r.step(5).unwrap();
            run(&mut r, 0.93);
            let want = (cfg.step_max * cfg.decrease.powi(k)).max(cfg.step_min);
            assert_eq!(r.step(5), Some(want), "round {k} from {before}");
        }
        assert_eq!(r.step(5), Some(cfg.step_min));
        assert!(Recovery::new(
            RecoveryConfig {
                step_init: 0.5,
                ..cfg
            },
            &g
        )
        .is_err());
        assert!(Recovery::new(RecoveryConfig { decrease: 0.0, ..cfg }, &g).is_err());
    }

    /// A random graph of chains with tasks, random accuracies, flows and
    /// transitions toward lighter states.
    fn arb_case() -> impl Strategy<Value = (StateGraph, Vec<f64>, Vec<u64>, Vec<Transition>, u32)> {
        (1usize..6, 1usize..5)
            .prop_flat_map(|(chains, len)| {
                (
                    Just((chains, len)),
                    proptest::collection::vec(0.0f64..1.0, chains * len),
                    proptest::collection::vec(0u64..5000, chains * (len + 1)),
                    proptest::collection::vec((0usize..chains * (len + 1), 1usize..5, 1u64..2000), 0..20),
                    1u32..5,
                )
            })
            .prop_map(|((chains, len), acc, flows, raw_tr, rounds)| {
                // Chain c: default (id c·(len+1)), then states with tasks
                // c·len .. c·len + k, costs rising by 10..40 per task.
                let mut b = GraphBuilder::new();
                for c in 0..chains {
                    let mut prev = b.add_state(None, 5.0, &[]);
                    let mut cost = 5.0;
                    for k in 0..len {
                        cost += 10.0 + 30.0 * acc[c * len + k];
                        let tasks: Vec<u16> = (0..=k).map(|t| (c * len + t) as u16).collect();
                        prev = b.add_state(Some(prev), cost, &tasks);
                    }
                }
                let g = b.build().unwrap();
                let tr = raw_tr
                    .into_iter()
                    .filter_map(|(s, k, f)| {
                        let s = s as u32;
                        let to = g.walk(s, k as u32);
                        (to != s).then_some(Transition {
                            from: s,
                            to,
                            flows: f,
                        })
                    })
                    .collect();
                (g, acc, flows, tr, rounds)
            })
    }

    proptest! {
        /// Eq. 9 per move and in total; fractions within bounds; moves go
        /// rich → default and revert poor states; nothing without both.
        #[test]
        fn equilibrium_and_bounds((g, acc, flows, tr, rounds) in arb_case(), shift in -0.1f64..0.1) {
            let cfg = RecoveryConfig::default();
            let mut r = Recovery::new(cfg, &g).unwrap();
            for round in 0..rounds {
                let acc: Vec<f64> = acc.iter().map(|&a| (a + shift * f64::from(round)).clamp(0.0, 1.0)).collect();
                let moves = r.rebalance(&g, &acc, &flows, &tr).unwrap();
                let state_acc = |s: StateId| g.tasks(s).iter().map(|&t| acc[usize::from(t)]).reduce(f64::min);
                let (mut lhs, mut rhs) = (0.0, 0.0);
                let mut plus_sum = std::collections::HashMap::new();
                let mut minus_sum = std::collections::HashMap::new();
                for m in &moves {
                    // Independent recomputation of both sides of Eq. 9.
                    let shed: Vec<&Transition> = tr.iter().filter(|t| t.from == m.revert_state).collect();
                    let moved: u64 = shed.iter().map(|t| t.flows).sum();
                    let e = shed.iter().map(|t| t.flows as f64 * g.t_p_ns(t.to)).sum::<f64>() / moved as f64;
                    let l = m.delta_minus * flows[m.from_state as usize] as f64
                        * (g.t_p_ns(m.from_state) - g.t_p_ns(g.default_of(m.from_state)));
                    let rr = m.delta_plus * moved as f64 * (g.t_p_ns(m.revert_state) - e);
                    prop_assert!((l - rr).abs() <= 1e-9 * l.abs().max(rr.abs()), "{l} vs {rr}");
                    lhs += l;
                    rhs += rr;
                    prop_assert_eq!(m.to_state, g.default_of(m.from_state));
                    prop_assert!(state_acc(m.from_state).unwrap() >= cfg.threshold + cfg.headroom);
                    prop_assert!(state_acc(m.revert_state).unwrap() < cfg.threshold);
                    prop_assert!(m.delta_minus > 0.0 && m.delta_plus > 0.0);
                    *plus_sum.entry(m.revert_state).or_insert(0.0) += m.delta_plus;
                    *minus_sum.entry(m.from_state).or_insert(0.0) += m.delta_minus;
                }
                prop_assert!((lhs - rhs).abs() <= 1e-9 * lhs.abs().max(rhs.abs()));
                for (_, p) in plus_sum { prop_assert!(p <= 1.0 + 1e-12); }
                for (s, m) in minus_sum {
                    prop_assert!(m <= r.step(s).unwrap() + 1e-12 && m <= cfg.step_max + 1e-12);
                }
                let any_rich = g.ids().any(|s| state_acc(s).is_some_and(|a| a >= cfg.threshold + cfg.headroom));
                let any_poor = g.ids().any(|s| state_acc(s).is_some_and(|a| a < cfg.threshold));
                if !any_rich || !any_poor {
                    prop_assert!(moves.is_empty());
                }
            }
        }
    }
}
