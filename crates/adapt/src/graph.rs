//! Monitoring states and the order in which work is shed.
//!
//! # What?
//!
//! A *task* is an installed event (dense id `0..k`). A *monitoring state* is
//! the set of tasks a flow is measured for, with its profiled per-packet
//! processing time `t_p`. Each state names at most one *lighter* state
//! (MONA's s_{i-1}, Fig. 4): where its flows go when work must be shed. A
//! state without a lighter one is a *default* state (it typically only
//! counts packets). For a flow matching tasks {A,B,C} ranked A>B>C the
//! caller builds {A,B,C} → {A,B} → {A} → {}.
//!
//! # Design
//!
//! The graph is a forest of chains toward default states; chains may share
//! states ({A,B} can be lighter for both {A,B,C} and {A,B,D}). States are
//! added to a [`GraphBuilder`] in any order (a lighter state may be named
//! before it is added) and [`GraphBuilder::build`] validates once, then the
//! [`StateGraph`] is immutable and every walk is safe.
//!
//! # Invariants (checked by `build`)
//!
//! - Every `lighter` names an existing state, and following `lighter`
//!   always reaches a default state (no cycle).
//! - A lighter state costs no more per packet (`t_p` finite, ≥ 0, and
//!   non-increasing along a chain), so shedding a step never adds work and
//!   the routine's average cost is non-increasing in depth.
//! - Each state's task list is sorted and deduplicated.
//! - `depth(s)` is the number of steps from `s` to its default state.
//!
//! # Cost
//!
//! `build` is O(states + total task entries) plus a sort per task list.
//! `walk(s, k)` is O(min(k, depth(s))); `has_task` is a binary search.
//! Accessors panic on a state id not from this graph, like slice indexing:
//! ids come from the builder, never from packets.

use crate::error::AdaptError;

/// Dense id of a monitoring state (`0..graph.len()`).
pub type StateId = u32;
/// Dense id of a task (an installed event).
pub type TaskId = u16;

#[derive(Clone, Debug, PartialEq)]
struct State {
    lighter: Option<StateId>,
    t_p_ns: f64,
    tasks: Vec<TaskId>, // sorted, deduplicated
}

/// Collects states in any order; [`build`](Self::build) validates them.
#[derive(Clone, Debug, Default)]
pub struct GraphBuilder {
    states: Vec<State>,
}

impl GraphBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a state measuring `tasks` at `t_p_ns` per packet, shedding to
    /// `lighter` (which may be added later), and returns its id (ids are
    /// dense, in order of addition).
    pub fn add_state(&mut self, lighter: Option<StateId>, t_p_ns: f64, tasks: &[TaskId]) -> StateId {
        let mut tasks = tasks.to_vec();
        tasks.sort_unstable();
        tasks.dedup();
        self.states.push(State {
            lighter,
            t_p_ns,
            tasks,
        });
        (self.states.len() - 1) as StateId
    }

    /// Re-points a state's lighter state (for states added before their
    /// lighter one was known).
    pub fn set_lighter(&mut self, state: StateId, lighter: Option<StateId>) -> Result<(), AdaptError> {
        let len = self.states.len();
        let s = self
            .states
            .get_mut(state as usize)
            .ok_or(AdaptError::NoSuchState { state, len })?;
        s.lighter = lighter;
        Ok(())
    }

    /// Validates the invariants of the module doc and returns the graph.
    pub fn build(self) -> Result<StateGraph, AdaptError> {
        let states = self.states;
        let n = states.len();
        for s in &states {
            if !(s.t_p_ns.is_finite() && s.t_p_ns >= 0.0) {
                return Err(AdaptError::OutOfRange {
                    what: "t_p_ns",
                    value: s.t_p_ns,
                    range: "finite, >= 0",
                });
            }
        }
        for (i, s) in states.iter().enumerate() {
            let id = i as StateId;
            if let Some(l) = s.lighter {
                let Some(ls) = states.get(l as usize) else {
                    return Err(AdaptError::DanglingLighter {
                        state: id,
                        lighter: l,
                    });
                };
                if ls.t_p_ns > s.t_p_ns {
                    return Err(AdaptError::NotLighter {
                        state: id,
                        lighter: l,
                        t_p_ns: s.t_p_ns,
                        lighter_t_p_ns: ls.t_p_ns,
                    });
                }
            }
        }
        // Depths by walking each chain until a state of known depth; a walk
        // longer than n states has met a cycle.
        const UNKNOWN: u32 = u32::MAX;
        let mut depth = vec![UNKNOWN; n];
        let mut root = vec![0 as StateId; n];
        let mut path: Vec<usize> = Vec::new();
        for start in 0..n {
            path.clear();
            let mut cur = start;
            let (base_depth, base_root) = loop {
                if depth[cur] != UNKNOWN {
                    break (depth[cur], root[cur]);
                }
                path.push(cur);
                if path.len() > n {
                    return Err(AdaptError::Cycle {
                        state: start as StateId,
                    });
                }
                match states[cur].lighter {
                    // The default state itself: depth 0, and popped below.
                    None => {
                        path.pop();
                        depth[cur] = 0;
                        root[cur] = cur as StateId;
                        break (0, cur as StateId);
                    }
                    Some(l) => cur = l as usize,
                }
            };
            // path holds the states above `cur`, nearest-to-start first.
            for (k, &p) in path.iter().rev().enumerate() {
                depth[p] = base_depth + 1 + k as u32;
                root[p] = base_root;
            }
        }
        let max_depth = depth.iter().copied().max().unwrap_or(0);
        let task_count = states
            .iter()
            .filter_map(|s| s.tasks.last())
            .map(|&t| usize::from(t) + 1)
            .max()
            .unwrap_or(0);
        Ok(StateGraph {
            states,
            depth,
            root,
            max_depth,
            task_count,
        })
    }
}

/// A validated forest of chains of monitoring states (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct StateGraph {
    states: Vec<State>,
    depth: Vec<u32>,    // steps to the default state
    root: Vec<StateId>, // the default state ending each chain
    max_depth: u32,     // max of depth
    task_count: usize,  // 1 + the largest task id named
}

impl StateGraph {
    /// Number of states.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// 1 + the largest task id any state names (0 with no task).
    pub fn task_count(&self) -> usize {
        self.task_count
    }

    /// The state flows of `s` are shed to, `None` for a default state.
    pub fn lighter(&self, s: StateId) -> Option<StateId> {
        self.states[s as usize].lighter
    }

    /// Profiled processing time per packet of `s`, ns.
    pub fn t_p_ns(&self, s: StateId) -> f64 {
        self.states[s as usize].t_p_ns
    }

    /// The tasks `s` measures, sorted.
    pub fn tasks(&self, s: StateId) -> &[TaskId] {
        &self.states[s as usize].tasks
    }

    /// Whether `s` measures `task`.
    pub fn has_task(&self, s: StateId, task: TaskId) -> bool {
        self.states[s as usize].tasks.binary_search(&task).is_ok()
    }

    /// Steps from `s` to its default state.
    pub fn depth(&self, s: StateId) -> u32 {
        self.depth[s as usize]
    }

    /// The largest `depth` of any state (0 for an empty graph).
    pub fn max_depth(&self) -> u32 {
        self.max_depth
    }

    /// The default state ending `s`'s chain (`s` itself for a default state).
    pub fn default_of(&self, s: StateId) -> StateId {
        self.root[s as usize]
    }

    /// The state `k` steps lighter than `s`, saturating at the default state.
    pub fn walk(&self, s: StateId, k: u32) -> StateId {
        if k >= self.depth(s) {
            return self.default_of(s);
        }
        let mut cur = s;
        for _ in 0..k {
            // depth(cur) > 0 on every step, so lighter is Some.
            cur = self.lighter(cur).unwrap_or(cur);
        }
        cur
    }

    /// Every state id, in order.
    pub fn ids(&self) -> impl Iterator<Item = StateId> {
        0..self.states.len() as StateId
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    /// {A,B,C} → {A,B} → {A} → {} and {A,B,D} → {A,B}.
    fn sample() -> StateGraph {
        let mut b = GraphBuilder::new();
        let abc = b.add_state(None, 120.0, &[2, 0, 1]);
        let ab = b.add_state(None, 80.0, &[0, 1]);
        let a = b.add_state(None, 40.0, &[0]);
        let def = b.add_state(None, 10.0, &[]);
        b.add_state(Some(ab), 130.0, &[0, 1, 3, 3]);
        b.set_lighter(abc, Some(ab)).unwrap();
        b.set_lighter(ab, Some(a)).unwrap();
        b.set_lighter(a, Some(def)).unwrap();
        b.build().unwrap()
    }

    #[test]
    fn walks_and_saturates() {
        let g = sample();
        assert_eq!(g.len(), 5);
        assert_eq!(g.tasks(0), &[0, 1, 2]);
        assert_eq!(g.tasks(4), &[0, 1, 3]);
        assert_eq!(g.task_count(), 4);
        assert_eq!(g.depth(0), 3);
        assert_eq!(g.depth(4), 3);
        assert_eq!(g.depth(3), 0);
        assert_eq!(g.max_depth(), 3);
        assert_eq!(g.walk(0, 0), 0);
        assert_eq!(g.walk(0, 1), 1);
        assert_eq!(g.walk(4, 2), 2);
        assert_eq!(g.walk(0, 3), 3);
        assert_eq!(g.walk(0, 99), 3);
        assert_eq!(g.default_of(4), 3);
        assert!(g.has_task(4, 3) && !g.has_task(0, 3));
    }

    #[test]
    fn rejects_bad_graphs() {
        let mut b = GraphBuilder::new();
        b.add_state(Some(7), 1.0, &[]);
        assert_eq!(
            b.build(),
            Err(AdaptError::DanglingLighter { state: 0, lighter: 7 })
        );

        let mut b = GraphBuilder::new();
        b.add_state(Some(1), 1.0, &[]);
        b.add_state(Some(2), 1.0, &[]);
        b.add_state(Some(0), 1.0, &[]);
        assert!(matches!(b.build(), Err(AdaptError::Cycle { .. })));

        let mut b = GraphBuilder::new();
        b.add_state(Some(0), 1.0, &[]);
        assert!(matches!(b.build(), Err(AdaptError::Cycle { state: 0 })));

        let mut b = GraphBuilder::new();
        b.add_state(Some(1), 1.0, &[0]);
        b.add_state(None, 2.0, &[]);
        assert!(matches!(
            b.build(),
            Err(AdaptError::NotLighter {
                state: 0,
                lighter: 1,
                ..
            })
        ));

        let mut b = GraphBuilder::new();
        b.add_state(None, f64::NAN, &[]);
        assert!(matches!(b.build(), Err(AdaptError::OutOfRange { .. })));

        let mut b = GraphBuilder::new();
        assert_eq!(
            b.set_lighter(0, None),
            Err(AdaptError::NoSuchState { state: 0, len: 0 })
        );
        assert!(b.build().unwrap().is_empty());
    }

    /// Random parent pointers (possibly cyclic), costs decreasing by
    /// construction toward lower ids when acyclic.
    fn arb_links() -> impl Strategy<Value = Vec<Option<u32>>> {
        (1usize..40).prop_flat_map(|n| proptest::collection::vec(proptest::option::of(0..n as u32), n))
    }

    proptest! {
        /// `build` agrees with a naive reference: a state is on or above a
        /// cycle iff walking n steps never reaches a default state; else
        /// depth and root are what naive walking finds, and `walk` matches
        /// k naive steps.
        #[test]
        fn build_matches_naive_walking(links in arb_links(), k in 0u32..50) {
            let n = links.len();
            let mut b = GraphBuilder::new();
            for l in &links {
                b.add_state(*l, 0.0, &[]);
            }
            let naive = |s: usize| -> Option<(u32, usize)> {
                let mut cur = s;
                for d in 0..=n {
                    match links[cur] {
                        None => return Some((d as u32, cur)),
                        Some(l) => cur = l as usize,
                    }
                }
                None
            };
            let all_ok = (0..n).all(|s| naive(s).is_some());
            match b.build() {
                Ok(g) => {
                    prop_assert!(all_ok);
                    for s in 0..n {
                        let (d, r) = naive(s).unwrap();
                        prop_assert_eq!(g.depth(s as u32), d);
                        prop_assert_eq!(g.default_of(s as u32) as usize, r);
                        let mut cur = s;
                        for _ in 0..k {
                            if let Some(l) = links[cur] { cur = l as usize; }
                        }
                        prop_assert_eq!(g.walk(s as u32, k) as usize, cur);
                    }
                    prop_assert_eq!(g.max_depth(), (0..n).map(|s| naive(s).unwrap().0).max().unwrap());
                }
                Err(AdaptError::Cycle { state }) => {
                    prop_assert!(!all_ok);
                    prop_assert!(naive(state as usize).is_none());
                }
                Err(e) => prop_assert!(false, "unexpected {e}"),
            }
        }
    }
}
