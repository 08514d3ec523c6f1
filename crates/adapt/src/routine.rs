//! The adaptation routine (MONA Alg. 1): how deep to shed so the next
//! window's average processing time fits the budget.
//!
//! # What?
//!
//! Input: the graph, `m_i` = packets seen last window per *full* state (the
//! state a flow gets when nothing is shed) and the target average
//! processing time per packet `t_target` (from [`crate::cost`]). Output: a
//! [`Shed`] `{steps: j, extra: x}`: every flow goes `j` steps lighter from
//! its full state and a fraction `x` of flows (chosen by flow hash) one
//! step more. The routine always starts from the full states, so when load
//! falls the answer falls back to `Shed::NONE`: restoring is the same
//! computation as shedding.
//!
//! # Design
//!
//! `T^j = Σ m_i · t_p(walk(s_i, j)) / Σ m_i` is the average cost if every
//! flow went `j` steps lighter; it is non-increasing in `j` because a
//! lighter state never costs more (a [`StateGraph`] invariant). The routine
//! finds the least `j` with `T^j ≤ t_target`, then mixes the two
//! neighbouring configurations: `x = (T^{j-1} − t_target) / (T^{j-1} − T^j)`
//! makes the predicted average `(1−x)·T^{j-1} + x·T^j` equal to the target,
//! so the depth `j−1+x` is the least real depth that fits. If even the all
//! default configuration exceeds the target, it returns that with
//! `saturated` set: the caller cannot fit and should say so.
//!
//! To avoid walking chains per window, [`Routine::new`] precomputes
//! `cost_at_depth[s][d]` for `d = 0..=max_depth` (saturated past the
//! default state) in one flat row-major array; a window's computation is
//! then a dot product per depth tried, with no allocation.
//!
//! # Invariants
//!
//! - `cost[s·stride + d] = t_p(walk(s, d))`, `stride = max_depth + 1`;
//!   rows are non-increasing.
//! - The returned shed satisfies `0 ≤ extra < 1` and, unless `saturated`,
//!   `predicted_ns ≤ t_target` (up to rounding) with no smaller depth
//!   fitting.
//!
//! # Cost
//!
//! O(states × depths tried) multiply-adds: at most 64 × 51 for 64 states
//! on chains over 50 tasks. Measured (`cargo bench -p clarion-adapt
//! --bench routine`, this 2-core machine shared with other builds):
//! 0.11 µs when the full configuration fits, 1.1 µs when met half-way down a
//! 50-step chain, 3.8 µs saturated (every depth tried), for 64 states over
//! 50 tasks: within the 10 µs bound. Rebuild the `Routine` whenever the
//! graph changes (O(states × depths)).

use crate::error::AdaptError;
use crate::graph::{StateGraph, StateId};

/// A shedding depth: every flow `steps` states lighter than its full state,
/// and a fraction `extra` of flows (by flow hash) one more.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shed {
    pub steps: u32,
    /// In `[0, 1)`.
    pub extra: f64,
}

impl Shed {
    /// Nothing shed: every flow in its full state.
    pub const NONE: Shed = Shed { steps: 0, extra: 0.0 };

    /// Steps to walk for a flow whose hash maps to `hash_fraction` in
    /// `[0, 1)`: `steps`, plus one when `hash_fraction < extra`. Walking
    /// saturates at the default state ([`StateGraph::walk`]).
    pub fn steps_for(&self, hash_fraction: f64) -> u32 {
        self.steps + u32::from(hash_fraction < self.extra)
    }

    /// The depth as one real number, `steps + extra`.
    pub fn depth(&self) -> f64 {
        f64::from(self.steps) + self.extra
    }
}

/// The routine's answer for one window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    pub shed: Shed,
    /// `T^0`: the average processing time per packet with nothing shed, ns.
    pub full_ns: f64,
    /// The predicted average under `shed`, ns.
    pub predicted_ns: f64,
    /// Even every flow in its default state exceeds the target; `shed` is
    /// then the all-default depth.
    pub saturated: bool,
}

/// Alg. 1 over one graph, with its chain costs precomputed.
#[derive(Clone, Debug)]
pub struct Routine {
    n: usize,
    stride: usize,  // max_depth + 1
    cost: Vec<f64>, // cost[s * stride + d] = t_p(walk(s, d))
}

impl Routine {
    pub fn new(graph: &StateGraph) -> Self {
        let n = graph.len();
        let stride = graph.max_depth() as usize + 1;
        let mut cost = Vec::with_capacity(n * stride);
        for s in graph.ids() {
            let mut cur = s;
            for _ in 0..stride {
                cost.push(graph.t_p_ns(cur));
                cur = graph.lighter(cur).unwrap_or(cur);
            }
        }
        Routine { n, stride, cost }
    }

    /// The deepest meaningful depth: every flow in its default state.
    pub fn max_depth(&self) -> u32 {
        (self.stride - 1) as u32
    }

    /// `t_p` of the state `d` steps lighter than `s` (saturating).
    ///
    /// # Panics
    /// If `s` is not a state of the graph.
    pub fn cost_at_depth(&self, s: StateId, d: u32) -> f64 {
        let d = (d as usize).min(self.stride - 1);
        self.cost[s as usize * self.stride + d]
    }

    fn check(&self, packets: &[u64]) -> Result<f64, AdaptError> {
        if packets.len() != self.n {
            return Err(AdaptError::LengthMismatch {
                what: "packets per full state",
                expected: self.n,
                got: packets.len(),
            });
        }
        Ok(packets.iter().map(|&m| m as f64).sum())
    }

    /// `T^d`, the average with every flow `d` steps lighter (0 with no
    /// packets).
    fn average_at(&self, packets: &[u64], total: f64, d: usize) -> f64 {
        if total == 0.0 {
            return 0.0;
        }
        let d = d.min(self.stride - 1);
        let mut sum = 0.0;
        for (i, &m) in packets.iter().enumerate() {
            sum += m as f64 * self.cost[i * self.stride + d];
        }
        sum / total
    }

    /// The predicted average processing time per packet under `shed`,
    /// given last window's packets per full state.
    pub fn average_ns(&self, packets: &[u64], shed: Shed) -> Result<f64, AdaptError> {
        let total = self.check(packets)?;
        let j = shed.steps as usize;
        let a = self.average_at(packets, total, j);
        if shed.extra == 0.0 {
            return Ok(a);
        }
        let b = self.average_at(packets, total, j + 1);
        Ok((1.0 - shed.extra) * a + shed.extra * b)
    }

    /// Alg. 1: the least depth whose predicted average fits `t_target_ns`.
    ///
    /// `t_target_ns` must not be NaN (it may be negative or infinite: a
    /// negative budget saturates). Fails only on a wrong-length `packets`.
    pub fn compute(&self, packets: &[u64], t_target_ns: f64) -> Result<Decision, AdaptError> {
        let total = self.check(packets)?;
        fit(self.max_depth(), t_target_ns, |d| {
            self.average_at(packets, total, d)
        })
    }
}

/// Alg. 1 over independent chains, without a graph: each row is a full
/// state's packets and the processing time of its chain, from the full
/// state (`costs[0]`) to its default state (the last), which deeper
/// depths keep. Costs must not increase along a row. The same answer as
/// [`Routine::compute`] on the graph of those chains, with no allocation:
/// for a caller whose costs change every window (they depend on the
/// window's flows per packet).
pub fn fit_chains(rows: &[(u64, &[f64])], t_target_ns: f64) -> Result<Decision, AdaptError> {
    let total: f64 = rows.iter().map(|r| r.0 as f64).sum();
    let max_depth = rows
        .iter()
        .map(|r| r.1.len().saturating_sub(1))
        .max()
        .unwrap_or(0);
    fit(max_depth as u32, t_target_ns, |d| {
        if total == 0.0 {
            return 0.0;
        }
        let sum: f64 = rows
            .iter()
            .filter_map(|(m, c)| Some(*m as f64 * *c.get(d.min(c.len().checked_sub(1)?))?))
            .sum();
        sum / total
    })
}

/// The search of Alg. 1 given `T^d` for each depth `d ≤ max_depth`.
fn fit(max_depth: u32, t_target_ns: f64, average_at: impl Fn(usize) -> f64) -> Result<Decision, AdaptError> {
    if t_target_ns.is_nan() {
        return Err(AdaptError::OutOfRange {
            what: "t_target_ns",
            value: t_target_ns,
            range: "not NaN",
        });
    }
    let full = average_at(0);
    let mut prev = full; // T^{j-1}, > target inside the loop
    if prev <= t_target_ns {
        return Ok(Decision {
            shed: Shed::NONE,
            full_ns: full,
            predicted_ns: full,
            saturated: false,
        });
    }
    for j in 1..=max_depth as usize {
        let t = average_at(j);
        if t <= t_target_ns {
            // prev > target >= t, so the denominator is positive.
            let x = (prev - t_target_ns) / (prev - t);
            let shed = if x >= 1.0 {
                Shed {
                    steps: j as u32,
                    extra: 0.0,
                }
            } else {
                Shed {
                    steps: j as u32 - 1,
                    extra: x,
                }
            };
            return Ok(Decision {
                shed,
                full_ns: full,
                predicted_ns: (1.0 - x) * prev + x * t,
                saturated: false,
            });
        }
        prev = t;
    }
    Ok(Decision {
        shed: Shed {
            steps: max_depth,
            extra: 0.0,
        },
        full_ns: full,
        predicted_ns: prev,
        saturated: true,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::graph::GraphBuilder;
    use proptest::prelude::*;

    /// {A,B,C}=120 → {A,B}=80 → {A}=40 → {}=10, and {A,B,D}=130 → {A,B}.
    fn sample() -> StateGraph {
        let mut b = GraphBuilder::new();
        let def = b.add_state(None, 10.0, &[]);
        let a = b.add_state(Some(def), 40.0, &[0]);
        let ab = b.add_state(Some(a), 80.0, &[0, 1]);
        b.add_state(Some(ab), 120.0, &[0, 1, 2]);
        b.add_state(Some(ab), 130.0, &[0, 1, 3]);
        b.build().unwrap()
    }

    #[test]
    fn hand_computed() {
        let r = Routine::new(&sample());
        let m = [0, 0, 0, 100, 100];
        // T^0 = 125, T^1 = 80, T^2 = 40, T^3 = 10.
        let d = r.compute(&m, 200.0).unwrap();
        assert_eq!(d.shed, Shed::NONE);
        assert_eq!(d.full_ns, 125.0);
        let d = r.compute(&m, 100.0).unwrap();
        assert_eq!(d.shed.steps, 0);
        assert!((d.shed.extra - 25.0 / 45.0).abs() < 1e-12);
        assert!((d.predicted_ns - 100.0).abs() < 1e-9);
        let d = r.compute(&m, 80.0).unwrap();
        assert_eq!(d.shed, Shed { steps: 1, extra: 0.0 });
        let d = r.compute(&m, 25.0).unwrap();
        assert_eq!(d.shed.steps, 2);
        assert!((d.shed.extra - 0.5).abs() < 1e-12);
        let d = r.compute(&m, 5.0).unwrap();
        assert!(d.saturated);
        assert_eq!(d.shed, Shed { steps: 3, extra: 0.0 });
        assert_eq!(d.predicted_ns, 10.0);
        let d = r.compute(&[0; 5], 0.0).unwrap();
        assert_eq!(d.shed, Shed::NONE);
        assert!(r.compute(&[1; 4], 1.0).is_err());
        assert!(r.compute(&m, f64::NAN).is_err());
        assert_eq!(r.cost_at_depth(4, 1), 80.0);
        assert_eq!(r.cost_at_depth(4, 9), 10.0);
    }

    #[test]
    fn steps_for_splits_by_hash() {
        let s = Shed {
            steps: 2,
            extra: 0.25,
        };
        assert_eq!(s.steps_for(0.0), 3);
        assert_eq!(s.steps_for(0.2499), 3);
        assert_eq!(s.steps_for(0.25), 2);
        assert_eq!(s.steps_for(0.99), 2);
        assert_eq!(Shed::NONE.steps_for(0.0), 0);
        assert_eq!(s.depth(), 2.25);
    }

    /// A random forest: state i names a lighter state among 0..i (or
    /// none), with a cost no higher, so the graph is always valid.
    pub(crate) fn arb_graph(max_states: usize) -> impl Strategy<Value = StateGraph> {
        (1..=max_states)
            .prop_flat_map(|n| {
                (
                    proptest::collection::vec((any::<bool>(), any::<u32>(), 0.0f64..100.0), n),
                    0.0f64..20.0,
                )
            })
            .prop_map(|(spec, base)| {
                let mut b = GraphBuilder::new();
                let mut costs: Vec<f64> = Vec::new();
                for (i, (has, pick, add)) in spec.into_iter().enumerate() {
                    let lighter = if has && i > 0 { Some(pick % i as u32) } else { None };
                    let c = lighter.map_or(base, |l| costs[l as usize]) + add;
                    costs.push(c);
                    b.add_state(lighter, c, &[]);
                }
                b.build().unwrap()
            })
    }

    /// The reference: the average cost at a real depth, by walking each
    /// state with the graph (not the routine's table) and mixing.
    fn reference_average(g: &StateGraph, m: &[u64], depth: f64) -> f64 {
        let total: f64 = m.iter().map(|&x| x as f64).sum();
        if total == 0.0 {
            return 0.0;
        }
        let j = depth.floor() as u32;
        let x = depth - depth.floor();
        let mut sum = 0.0;
        for s in g.ids() {
            let w = m[s as usize] as f64;
            sum += w * ((1.0 - x) * g.t_p_ns(g.walk(s, j)) + x * g.t_p_ns(g.walk(s, j + 1)));
        }
        sum / total
    }

    fn arb_case() -> impl Strategy<Value = (StateGraph, Vec<u64>, f64)> {
        arb_graph(24).prop_flat_map(|g| {
            let n = g.len();
            (
                Just(g),
                proptest::collection::vec(0u64..10_000, n),
                -10.0f64..400.0,
            )
        })
    }

    /// The bench's shape: a 51-state chain over 50 tasks and 13 states
    /// branching into it, 64 in all; every budget from all-default to full
    /// against the grid reference.
    #[test]
    fn sixty_four_states_fifty_tasks() {
        let mut b = GraphBuilder::new();
        let mut prev = b.add_state(None, 10.0, &[]);
        let mut chain = vec![prev];
        for k in 1..=50u16 {
            let tasks: Vec<u16> = (0..k).collect();
            prev = b.add_state(Some(prev), 10.0 + 4.0 * f64::from(k), &tasks);
            chain.push(prev);
        }
        for i in 0..13u16 {
            let base = usize::from(10 + 3 * i);
            let mut tasks: Vec<u16> = (0..base as u16).collect();
            tasks.push(49 - i);
            b.add_state(Some(chain[base]), 10.0 + 4.0 * base as f64 + 7.0, &tasks);
        }
        let g = b.build().unwrap();
        assert_eq!((g.len(), g.task_count(), g.max_depth()), (64, 50, 50));
        let r = Routine::new(&g);
        let m: Vec<u64> = (0..64u64).map(|i| 1_000 + 37 * i).collect();
        let full = reference_average(&g, &m, 0.0);
        let mut last_depth = f64::INFINITY;
        for step in 0..=200 {
            let target = 5.0 + (full - 5.0) * f64::from(step) / 200.0;
            let d = r.compute(&m, target).unwrap();
            assert_eq!(d.saturated, target < 10.0);
            assert!(d.shed.depth() <= last_depth);
            last_depth = d.shed.depth();
            if d.saturated {
                continue;
            }
            let at = reference_average(&g, &m, d.shed.depth());
            assert!(at <= target * (1.0 + 1e-12), "{at} > {target}");
            let shallower = d.shed.depth() - 1.0 / 1024.0;
            if shallower >= 0.0 {
                assert!(reference_average(&g, &m, shallower) > target);
            }
        }
        assert_eq!(last_depth, 0.0);
    }

    proptest! {
        /// Against a grid search over real depths: the answer fits, and no
        /// grid depth below it (by more than the grid step) fits.
        #[test]
        fn minimal_and_fits((g, m, target) in arb_case()) {
            let r = Routine::new(&g);
            let d = r.compute(&m, target).unwrap();
            prop_assert!(d.shed.extra >= 0.0 && d.shed.extra < 1.0);
            let depth = d.shed.depth();
            let at = reference_average(&g, &m, depth);
            prop_assert!((at - d.predicted_ns).abs() <= 1e-9 * at.abs().max(1.0));
            let all_default = reference_average(&g, &m, f64::from(g.max_depth()));
            if d.saturated {
                prop_assert!(all_default > target);
                prop_assert_eq!(d.shed, Shed { steps: g.max_depth(), extra: 0.0 });
            } else {
                prop_assert!(at <= target + 1e-9 * target.abs().max(1.0));
                const STEP: f64 = 1.0 / 512.0;
                let mut k = 0.0;
                while k < depth - STEP {
                    prop_assert!(reference_average(&g, &m, k) > target, "depth {k} < {depth} fits");
                    k += STEP;
                }
            }
            // Through the public mixer too.
            let avg = r.average_ns(&m, d.shed).unwrap();
            prop_assert!((avg - at).abs() <= 1e-9 * at.abs().max(1.0));
        }

        /// A lower budget never sheds less; a higher one never sheds more.
        #[test]
        fn monotone_in_target((g, m, target) in arb_case(), less in 0.0f64..100.0) {
            let r = Routine::new(&g);
            let hi = r.compute(&m, target).unwrap();
            let lo = r.compute(&m, target - less).unwrap();
            prop_assert!(lo.shed.depth() >= hi.shed.depth() - 1e-12);
            prop_assert!(lo.saturated >= hi.saturated);
        }

        /// The table matches walking, and saturates past the default state.
        #[test]
        fn table_matches_walk(g in arb_graph(24), extra in 0u32..5) {
            let r = Routine::new(&g);
            for s in g.ids() {
                for d in 0..=g.max_depth() + extra {
                    prop_assert_eq!(r.cost_at_depth(s, d), g.t_p_ns(g.walk(s, d)));
                }
            }
        }
    }

    proptest! {
        /// `fit_chains` is `Routine::compute` on the graph of the same chains.
        #[test]
        fn fit_chains_equals_the_routine_on_their_graph(
            chains in proptest::collection::vec(
                (0u64..1000, proptest::collection::vec(0.0f64..50.0, 1..6)),
                1..8,
            ),
            target in -10.0f64..300.0,
        ) {
            // Costs non-increasing along each chain: cumulative sums from the default up.
            let rows: Vec<(u64, Vec<f64>)> = chains
                .into_iter()
                .map(|(m, steps)| {
                    let mut acc = 0.0;
                    let mut up: Vec<f64> = steps.iter().map(|s| { acc += s; acc }).collect();
                    up.reverse();
                    (m, up)
                })
                .collect();
            let mut b = GraphBuilder::new();
            let mut packets = Vec::new();
            for (m, costs) in &rows {
                let mut lighter = None;
                for (i, &c) in costs.iter().enumerate().rev() {
                    lighter = Some(b.add_state(lighter, c, &[]));
                    packets.push(if i == 0 { *m } else { 0 });
                }
            }
            let g = b.build().unwrap();
            let want = Routine::new(&g).compute(&packets, target).unwrap();
            let views: Vec<(u64, &[f64])> = rows.iter().map(|(m, c)| (*m, c.as_slice())).collect();
            let got = fit_chains(&views, target).unwrap();
            prop_assert_eq!(got.shed, want.shed);
            prop_assert_eq!(got.saturated, want.saturated);
            prop_assert!((got.predicted_ns - want.predicted_ns).abs() <= 1e-9 * want.predicted_ns.abs().max(1.0));
        }
    }
}
