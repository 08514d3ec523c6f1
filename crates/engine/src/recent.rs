//! The values of the per-flow tests of the last few swept epochs, for
//! queries after the fact ([`crate::Monitor::window_values`]).
//!
//! A trigger tested flow by flow during the gather (`Tuning::flow_windows`:
//! a one-epoch window, one group per flow) writes each group's values here,
//! not into its own [`crate::history::History`]: every test of a sweep is
//! appended to one arena, in the order the sweep makes them. A history
//! kept per trigger cost three scattered lines a test (the group's slot,
//! the window's slot and the history's header, in rings spread over ~20 MB
//! for 4,096 triggers), a third of the sweep, which is bound by how many
//! lines it has in flight; appended rows are sequential lines, which the
//! hardware prefetches.
//!
//! # Invariants
//! - `epochs` holds at most `keep` arenas, oldest first, one per swept
//!   epoch, with increasing windows; an arena's rows are in test order,
//!   their `first` increasing, each row's key in `keys` and its values
//!   from its `first` to the next row's (the last row's, to the end).
//! - The arenas dropped from `epochs` wait in `spare`, emptied, so that in
//!   steady state a sweep allocates nothing.

use std::collections::VecDeque;

use clarion_report::Window;
use clarion_wire::FlowKey;

use crate::prefetch::prefetch;
use crate::trigger_index::TriggerId;

/// One group of one per-flow test: its key is `keys[key]`, its values
/// run from `first` to the next row's `first` (the last row's, to the end
/// of `values`).
#[derive(Clone, Copy, Debug)]
struct Row {
    tid: TriggerId,
    key: u32,
    first: u32,
}

/// The per-flow tests of one swept epoch (its window). The triggers of a
/// match set are tested one after the other on each flow, so a flow's key
/// is stored once for all of them: ~20 bytes a test, not ~60.
#[derive(Debug, Default)]
pub(crate) struct EpochValues {
    window: Window,
    keys: Vec<FlowKey>,
    rows: Vec<Row>,
    values: Vec<f64>,
}

/// How far ahead of the ends of `rows` and `values` a push prefetches,
/// in elements (a few lines): the arenas are written once an epoch, so
/// their lines come from memory, and without it the sweep was no faster
/// than with per-trigger histories (131 against 111 µs; 86-93 with it).
const ROWS_AHEAD: usize = 32;
const VALUES_AHEAD: usize = 64;

impl EpochValues {
    /// The window the values are for.
    pub(crate) fn window(&self) -> Window {
        self.window
    }

    /// Appends a group's values for trigger `tid`.
    #[inline]
    pub(crate) fn push(&mut self, tid: TriggerId, key: &FlowKey, values: &[f64]) {
        if self.keys.last() != Some(key) {
            prefetch(self.keys.as_ptr().wrapping_add(self.keys.len() + 2));
            self.keys.push(*key);
        }
        prefetch(self.rows.as_ptr().wrapping_add(self.rows.len() + ROWS_AHEAD));
        prefetch(
            self.values
                .as_ptr()
                .wrapping_add(self.values.len() + VALUES_AHEAD),
        );
        self.rows.push(Row {
            tid,
            key: self.keys.len() as u32 - 1,
            first: self.values.len() as u32,
        });
        self.values.extend_from_slice(values);
    }

    /// Every group of trigger `tid`, in test order.
    pub(crate) fn groups(&self, tid: TriggerId) -> impl Iterator<Item = (&FlowKey, &[f64])> {
        self.rows
            .iter()
            .enumerate()
            .filter(move |(_, r)| r.tid == tid)
            .filter_map(|(i, r)| {
                let to = self
                    .rows
                    .get(i + 1)
                    .map_or(self.values.len(), |n| n.first as usize);
                let key = self.keys.get(r.key as usize)?;
                Some((key, self.values.get(r.first as usize..to).unwrap_or_default()))
            })
    }

    /// Empties the arena, keeping its memory.
    fn clear(&mut self) {
        self.keys.clear();
        self.rows.clear();
        self.values.clear();
    }
}

/// The arenas of the last `keep` swept epochs. See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    epochs: VecDeque<EpochValues>,
    spare: Vec<EpochValues>,
}

impl Recent {
    /// Heap bytes reserved by the arenas kept and spare.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.epochs
            .iter()
            .chain(&self.spare)
            .map(|e| {
                e.keys.capacity() * std::mem::size_of::<FlowKey>()
                    + e.rows.capacity() * std::mem::size_of::<Row>()
                    + e.values.capacity() * std::mem::size_of::<f64>()
            })
            .sum()
    }

    /// An empty arena for the sweep of `window` (a reused one when there is).
    pub(crate) fn open(&mut self, window: Window) -> EpochValues {
        let mut e = self.spare.pop().unwrap_or_default();
        e.window = window;
        e
    }

    /// Keeps a swept epoch's arena, the newest of at most `keep` (the
    /// oldest go back to the spares).
    pub(crate) fn close(&mut self, e: EpochValues, keep: usize) {
        self.epochs.push_back(e);
        while self.epochs.len() > keep {
            let Some(mut old) = self.epochs.pop_front() else {
                break;
            };
            old.clear();
            self.spare.push(old);
        }
    }

    /// The arena of the epoch starting at `start_ns`, if kept.
    pub(crate) fn find(&self, start_ns: u64) -> Option<&EpochValues> {
        let i = self
            .epochs
            .binary_search_by_key(&start_ns, |e| e.window.start_ns)
            .ok()?;
        self.epochs.get(i)
    }

    /// Start of the oldest kept epoch once `keep` are kept (windows before
    /// it may have had values, now dropped); `None` while fewer are.
    pub(crate) fn full_from(&self, keep: usize) -> Option<u64> {
        let oldest = self.epochs.front()?;
        (self.epochs.len() >= keep).then_some(oldest.window.start_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(start_ns: u64) -> Window {
        Window {
            start_ns,
            end_ns: start_ns + 10,
        }
    }

    fn key(port: u16) -> FlowKey {
        FlowKey::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            6,
            Some((port, 80)),
            None,
        )
    }

    #[test]
    fn groups_of_one_trigger_in_test_order() {
        let mut r = Recent::default();
        let mut e = r.open(w(0));
        e.push(3, &key(1), &[1.0]);
        e.push(4, &key(2), &[2.0, 20.0]);
        e.push(3, &key(3), &[3.0]);
        e.push(5, &key(3), &[4.0]);
        assert_eq!(
            (e.keys.len(), e.rows.len()),
            (3, 4),
            "one key for a flow's tests in a row"
        );
        r.close(e, 4);
        let e = r.find(0).unwrap();
        assert_eq!(e.window(), w(0));
        let g: Vec<(u16, Vec<f64>)> = e.groups(3).map(|(k, v)| (k.src_port, v.to_vec())).collect();
        assert_eq!(g, vec![(1, vec![1.0]), (3, vec![3.0])]);
        let g: Vec<Vec<f64>> = e.groups(4).map(|(_, v)| v.to_vec()).collect();
        assert_eq!(g, vec![vec![2.0, 20.0]]);
        let g: Vec<(u16, Vec<f64>)> = e.groups(5).map(|(k, v)| (k.src_port, v.to_vec())).collect();
        assert_eq!(g, vec![(3, vec![4.0])]);
        assert_eq!(e.groups(6).count(), 0);
    }

    #[test]
    fn keeps_the_last_epochs_and_reuses_the_dropped() {
        let mut r = Recent::default();
        for i in 0..5u64 {
            let mut e = r.open(w(i * 10));
            e.push(1, &key(i as u16), &[i as f64]);
            r.close(e, 3);
        }
        assert!(r.find(10).is_none(), "dropped");
        assert_eq!(r.full_from(3), Some(20));
        assert_eq!(r.full_from(4), None, "fewer than 4 kept");
        let e = r.find(40).unwrap();
        assert_eq!(e.groups(1).map(|(_, v)| v[0]).collect::<Vec<_>>(), vec![4.0]);
        // A reused arena starts empty.
        let e = r.open(w(50));
        assert_eq!((e.keys.len(), e.rows.len(), e.values.len()), (0, 0, 0));
        assert_eq!(e.window(), w(50));
    }

    #[test]
    fn keep_zero_keeps_nothing() {
        let mut r = Recent::default();
        let mut e = r.open(w(0));
        e.push(1, &key(1), &[1.0]);
        r.close(e, 0);
        assert!(r.find(0).is_none());
        assert_eq!(r.full_from(0), None);
    }
}
