//! The alert lifecycle: per (host, event, group), pending → firing →
//! resolved, as Prometheus's alerting rules have it (`for`,
//! `keep_firing_for`), counted in the event's windows. Pure: no I/O, no
//! clock; the caller says what it saw and how far time has gone.
//!
//! # What the alert path sees
//!
//! Only reports: a report says "the predicate held for this group in this
//! window". A window that closed *without* a firing sends nothing. So a
//! window is known to have closed without a firing for a group when time
//! has passed its end and no report came for it. Time is known from two
//! sources, both through [`Lifecycle::close`]:
//!
//! - a later report: reports arrive in window-end order (docs/alerts.md),
//!   so a report whose window ends at `T` closes every window ending
//!   before `T`, of every event (`T - 1`; windows ending at `T` itself may
//!   still have reports of other groups to come);
//! - a clock, on live capture: the caller closes the windows ending before
//!   the wall clock minus a grace for the monitor's own lag.
//!
//! # The rule
//!
//! For an event with interval `I`, `fire_after = F` and `resolve_after = K`:
//!
//! - a group is *pending* while its predicate held in fewer than `F`
//!   consecutive windows; a window without a firing drops it (nothing sent);
//! - it *fires* in the window that makes `F` consecutive firings (with
//!   `F = 1`, at its first firing); the alert starts at the first of those
//!   windows' start;
//! - a firing group *resolves* once `K` consecutive windows closed without
//!   a firing (a firing in between starts the count again); it ends at the
//!   end of its last firing window. A new firing after that is a new
//!   episode.
//!
//! Windows are those of the report's own length (`end - start`), so the
//! window after one ending at `e` ends at `e + I`.
//!
//! # Cost
//!
//! One map look-up per report; [`Lifecycle::close`] walks the groups that
//! are pending or firing, and is meant to be called once per distinct
//! window end (the caller skips it when time has not moved). Resolved
//! groups are forgotten, so memory is bounded by the groups firing.

use std::collections::HashMap;
use std::hash::Hash;

/// Where an alert's episode is; the two states that are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AlertState {
    Firing,
    Resolved,
}

impl AlertState {
    pub fn name(self) -> &'static str {
        match self {
            AlertState::Firing => "firing",
            AlertState::Resolved => "resolved",
        }
    }
}

/// How a group's windows become alerts: both counts at least 1 (0 is
/// read as 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    /// Consecutive firing windows before the alert fires (`for`).
    pub fire_after: u64,
    /// Consecutive windows without a firing before it resolves (`keep_firing_for`).
    pub resolve_after: u64,
}

impl Default for Hold {
    /// Fire at once, resolve after one window without a firing.
    fn default() -> Self {
        Hold {
            fire_after: 1,
            resolve_after: 1,
        }
    }
}

/// A change of an alert's state, to be sent.
#[derive(Clone, Debug, PartialEq)]
pub struct Change<K, P> {
    pub key: K,
    pub state: AlertState,
    /// Start of the first window of the run that fired.
    pub starts_at_ns: u64,
    /// Resolved: end of the last firing window.
    pub ends_at_ns: Option<u64>,
    /// Firing: the window that fired; resolved: the last firing window.
    pub payload: P,
}

#[derive(Clone, Debug)]
struct Group<P> {
    hold: Hold,
    interval_ns: u64,
    firing: bool,
    /// Consecutive firing windows so far (counts up to `fire_after`).
    run: u64,
    run_start_ns: u64,
    /// End of the group's last firing window.
    last_end_ns: u64,
    last: P,
}

impl<P> Group<P> {
    /// Windows of this group ending after its last firing and at or before
    /// `through_ns`: closed without a firing.
    fn missed(&self, through_ns: u64) -> u64 {
        through_ns.saturating_sub(self.last_end_ns) / self.interval_ns.max(1)
    }
}

/// The state of every pending or firing group; see the module doc.
#[derive(Debug)]
pub struct Lifecycle<K, P> {
    groups: HashMap<K, Group<P>>,
    /// Every window ending at or before this is closed.
    closed_ns: u64,
}

impl<K: Hash + Eq + Clone, P: Clone> Default for Lifecycle<K, P> {
    fn default() -> Self {
        Lifecycle {
            groups: HashMap::new(),
            closed_ns: 0,
        }
    }
}

impl<K: Hash + Eq + Clone, P: Clone> Lifecycle<K, P> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Groups pending or firing.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// How far time is known to have gone: windows ending at or before this are closed.
    pub fn closed_ns(&self) -> u64 {
        self.closed_ns
    }

    /// Every window ending at or before `through_ns` has closed: pending
    /// groups that missed one are dropped, firing groups that missed
    /// `resolve_after` resolve (returned in no particular order but the
    /// key's, which the caller sorts if it needs to). Going back in time
    /// is ignored.
    pub fn close(&mut self, through_ns: u64) -> Vec<Change<K, P>> {
        if through_ns <= self.closed_ns {
            return Vec::new();
        }
        self.closed_ns = through_ns;
        let mut out = Vec::new();
        self.groups.retain(|key, g| {
            let missed = g.missed(through_ns);
            if missed == 0 {
                return true;
            }
            if !g.firing {
                return false; // the run broke before it fired
            }
            if missed < g.hold.resolve_after.max(1) {
                return true;
            }
            out.push(Change {
                key: key.clone(),
                state: AlertState::Resolved,
                starts_at_ns: g.run_start_ns,
                ends_at_ns: Some(g.last_end_ns),
                payload: g.last.clone(),
            });
            false
        });
        out
    }

    /// The predicate held for `key` in the window `[start_ns, end_ns)`.
    /// Closes the windows before it first (reports come in window-end
    /// order, so they are over: [`Lifecycle::close`] through `end_ns - 1`),
    /// then returns what changed: resolutions of other groups, and this
    /// group's firing when this window makes one. A window at or before the
    /// group's last (a copy) changes nothing. A late window (time had gone
    /// past it) still counts: a firing seen late is still a firing.
    pub fn fired(&mut self, key: K, hold: Hold, start_ns: u64, end_ns: u64, payload: P) -> Vec<Change<K, P>> {
        let mut out = self.close(end_ns.saturating_sub(1));
        let interval_ns = end_ns.saturating_sub(start_ns).max(1);
        let g = self.groups.entry(key.clone()).or_insert_with(|| Group {
            hold,
            interval_ns,
            firing: false,
            run: 0,
            run_start_ns: start_ns,
            last_end_ns: end_ns.saturating_sub(interval_ns),
            last: payload.clone(),
        });
        if end_ns <= g.last_end_ns {
            return out;
        }
        g.last_end_ns = end_ns;
        g.last = payload;
        if g.firing {
            return out;
        }
        g.run += 1;
        if g.run >= g.hold.fire_after.max(1) {
            g.firing = true;
            out.push(Change {
                key,
                state: AlertState::Firing,
                starts_at_ns: g.run_start_ns,
                ends_at_ns: None,
                payload: g.last.clone(),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const I: u64 = 100;
    const T0: u64 = 1_000_000;

    fn start(i: usize) -> u64 {
        T0 + i as u64 * I
    }
    fn end(i: usize) -> u64 {
        start(i) + I
    }

    /// (state, starts_at, ends_at) of each change, in order.
    type Seen = Vec<(AlertState, u64, Option<u64>)>;

    /// The obviously-correct reference: one pass over a group's whole
    /// sequence of windows (true: the predicate held), the rule of the
    /// module doc read literally; `n` windows closed in all.
    fn reference(b: &[bool], hold: Hold) -> Seen {
        let (f, k) = (hold.fire_after.max(1), hold.resolve_after.max(1));
        let mut out = Vec::new();
        let (mut firing, mut run, mut quiet, mut first, mut last) = (false, 0u64, 0u64, 0usize, 0usize);
        for (i, &held) in b.iter().enumerate() {
            if held {
                quiet = 0;
                last = i;
                if !firing {
                    if run == 0 {
                        first = i;
                    }
                    run += 1;
                    if run == f {
                        firing = true;
                        out.push((AlertState::Firing, start(first), None));
                    }
                }
            } else if firing {
                quiet += 1;
                if quiet == k {
                    out.push((AlertState::Resolved, start(first), Some(end(last))));
                    firing = false;
                    run = 0;
                }
            } else {
                run = 0;
            }
        }
        out
    }

    /// The machine, fed as the sink feeds it: for each window that held,
    /// its firing; `closes`: extra closes (time
    /// seen from other events' reports) at the given windows; all closed
    /// at the end.
    fn machine(b: &[bool], hold: Hold, closes: &[usize]) -> Seen {
        let mut m: Lifecycle<u8, usize> = Lifecycle::new();
        let mut out = Vec::new();
        let mut push = |c: Change<u8, usize>| out.push((c.state, c.starts_at_ns, c.ends_at_ns));
        for (i, &held) in b.iter().enumerate() {
            if closes.contains(&i) {
                // Another event's report ending inside window i: window i is not closed yet.
                m.close(start(i) + I / 2 - 1).into_iter().for_each(&mut push);
            }
            if held {
                m.fired(0, hold, start(i), end(i), i)
                    .into_iter()
                    .for_each(&mut push);
            }
        }
        m.close(end(b.len().saturating_sub(1)))
            .into_iter()
            .for_each(&mut push);
        out
    }

    fn hold(f: u64, k: u64) -> Hold {
        Hold {
            fire_after: f,
            resolve_after: k,
        }
    }

    #[test]
    fn a_sustained_condition_fires_once_and_resolves_once() {
        // 10 windows held, then 3 quiet: one firing, one resolved.
        let b: Vec<bool> = (0..13).map(|i| i < 10).collect();
        assert_eq!(
            machine(&b, Hold::default(), &[]),
            vec![
                (AlertState::Firing, start(0), None),
                (AlertState::Resolved, start(0), Some(end(9)))
            ]
        );
    }

    #[test]
    fn fire_after_waits_and_a_gap_resets_pending() {
        let h = hold(3, 1);
        // Two, a gap, two: never three in a row.
        let b = [true, true, false, true, true, false];
        assert_eq!(machine(&b, h, &[]), vec![]);
        // Three in a row fires in the third, starting at the first.
        let b = [false, true, true, true, false];
        assert_eq!(
            machine(&b, h, &[]),
            vec![
                (AlertState::Firing, start(1), None),
                (AlertState::Resolved, start(1), Some(end(3)))
            ]
        );
    }

    #[test]
    fn resolve_after_holds_through_short_gaps() {
        let h = hold(1, 3);
        // Gaps of 2 do not resolve; the final 3 quiet windows do.
        let b = [true, false, false, true, false, false, true, false, false, false];
        assert_eq!(
            machine(&b, h, &[]),
            vec![
                (AlertState::Firing, start(0), None),
                (AlertState::Resolved, start(0), Some(end(6)))
            ]
        );
        // Without the time after the last firing, it stays firing.
        let mut m: Lifecycle<u8, ()> = Lifecycle::new();
        assert_eq!(m.fired(0, h, start(0), end(0), ()).len(), 1);
        assert!(m.close(end(2)).is_empty());
        assert_eq!(m.len(), 1);
        assert_eq!(m.close(end(3)).len(), 1);
        assert!(m.is_empty());
    }

    #[test]
    fn copies_and_late_windows_change_nothing() {
        let mut m: Lifecycle<u8, ()> = Lifecycle::new();
        let h = hold(2, 1);
        assert!(m.fired(0, h, start(0), end(0), ()).is_empty());
        assert!(m.fired(0, h, start(0), end(0), ()).is_empty());
        assert_eq!(m.fired(0, h, start(1), end(1), ()).len(), 1);
        assert!(m.fired(0, h, start(1), end(1), ()).is_empty());
        assert!(m.fired(0, h, start(0), end(0), ()).is_empty());
        // Time going back is ignored.
        assert!(m.close(end(0)).is_empty());
    }

    #[test]
    fn groups_are_independent() {
        let mut m: Lifecycle<u8, ()> = Lifecycle::new();
        let h = Hold::default();
        assert_eq!(m.fired(1, h, start(0), end(0), ()).len(), 1);
        assert_eq!(m.fired(2, h, start(0), end(0), ()).len(), 1);
        // Window 1: only group 2 fires; group 1 resolves once window 1 closes.
        assert!(m.fired(2, h, start(1), end(1), ()).is_empty());
        let r = m.close(end(2) - 1);
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].key, r[0].state, r[0].ends_at_ns),
            (1, AlertState::Resolved, Some(end(0)))
        );
    }

    proptest! {
        #[test]
        fn matches_the_reference(
            b in proptest::collection::vec(any::<bool>(), 0..60),
            f in 1u64..5,
            k in 1u64..5,
            closes in proptest::collection::vec(0usize..60, 0..20),
        ) {
            let h = hold(f, k);
            prop_assert_eq!(machine(&b, h, &closes), reference(&b, h));
        }

        #[test]
        fn firings_and_resolutions_alternate(
            b in proptest::collection::vec(any::<bool>(), 0..80),
            f in 0u64..4,
            k in 0u64..4,
        ) {
            let seen = machine(&b, hold(f, k), &[]);
            for (i, (state, _, _)) in seen.iter().enumerate() {
                let want = if i % 2 == 0 { AlertState::Firing } else { AlertState::Resolved };
                prop_assert_eq!(*state, want);
            }
        }
    }
}
