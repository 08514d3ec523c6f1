//! A trigger's last few closed windows: every group's key and values, for
//! queries after the fact ([`crate::Monitor::window_values`]).
//!
//! # Layout
//! All windows share one ring of groups, in window order: with one value
//! per group (most triggers) each key sits beside its value, so the sweep
//! writes one line per group; with more, keys and values (`stride` a
//! group) are two rings. Groups are numbered in the order they were added;
//! group `n` sits at `n` modulo the rings' capacity (a power of two).
//! `windows` says which group each kept window begins with. A new window
//! is appended at the end; once `keep` are kept, appending one drops the
//! oldest in O(1) (the ring's start moves to the next window's first
//! group; nothing is moved or freed). So closing a window costs the same
//! in every sweep, and triggers started together never drop their old
//! windows all in one sweep (as a bulk drop did, with one `memmove` each).
//! The rings grow (doubling, re-laid out) only when the kept windows hold
//! more groups than they have room for: once the arrays have grown to a
//! steady load, closing a window allocates nothing.
//!
//! # Invariants
//! - `windows` is in closing order, at most `keep` long, its first groups
//!   non-decreasing and in `base..=end`; `base` is the first group of the
//!   oldest kept window (`end` when none is kept).
//! - `end - base` <= the rings' capacity, which is 0 or a power of two;
//!   `values` holds `stride` slots per key slot.

use std::collections::VecDeque;

use clarion_report::Window;
use clarion_wire::FlowKey;

use crate::prefetch::prefetch;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct History {
    /// Kept windows, oldest first, with the number of their first group.
    windows: VecDeque<(Window, u64)>,
    groups: Groups,
    /// Number of the oldest kept group (of the oldest kept window).
    base: u64,
    /// Number the next group gets.
    end: u64,
    stride: u32,
    /// Windows kept (at least 1), as the latest `start_window` was told.
    keep: u32,
}

/// The groups' keys and values, as rings of the same capacity (0 or a
/// power of two): group `n` sits at `n & (capacity - 1)`.
#[derive(Debug)]
enum Groups {
    /// One value per group, beside its key.
    Pairs(Box<[(FlowKey, f64)]>),
    /// Any other number of values per group: `stride` values each.
    Split {
        keys: Box<[FlowKey]>,
        values: Box<[f64]>,
    },
}

impl Groups {
    fn capacity(&self) -> usize {
        match self {
            Groups::Pairs(p) => p.len(),
            Groups::Split { keys, .. } => keys.len(),
        }
    }

    /// Group `n`'s key and values (`n` among the kept ones).
    #[inline]
    fn get(&self, n: u64, stride: usize) -> (&FlowKey, &[f64]) {
        let mask = self.capacity().wrapping_sub(1);
        let i = n as usize & mask;
        match self {
            Groups::Pairs(p) => {
                let (k, v) = &p[i];
                (k, std::slice::from_ref(v))
            }
            Groups::Split { keys, values } => (&keys[i], &values[i * stride..(i + 1) * stride]),
        }
    }

    /// Rings of `capacity` (a power of two) holding groups `from..to` of
    /// these, at their new places.
    fn regrown(&self, capacity: usize, from: u64, to: u64, stride: usize) -> Groups {
        let old = self.capacity().wrapping_sub(1);
        let new = capacity - 1;
        match self {
            Groups::Pairs(p) => {
                let mut q = vec![(FlowKey::default(), f64::NAN); capacity].into_boxed_slice();
                for n in from..to {
                    q[n as usize & new] = p[n as usize & old];
                }
                Groups::Pairs(q)
            }
            Groups::Split { keys, values } => {
                let mut k = vec![FlowKey::default(); capacity].into_boxed_slice();
                let mut v = vec![f64::NAN; capacity * stride].into_boxed_slice();
                for n in from..to {
                    let (i, j) = (n as usize & old, n as usize & new);
                    k[j] = keys[i];
                    v[j * stride..(j + 1) * stride].copy_from_slice(&values[i * stride..(i + 1) * stride]);
                }
                Groups::Split { keys: k, values: v }
            }
        }
    }
}

/// Most windows a trigger's history reserves room for up front.
const RESERVE_MAX: usize = 64;

impl History {
    /// An empty history of windows with `stride` values per group.
    pub(crate) fn new(stride: usize) -> Self {
        let groups = if stride == 1 {
            Groups::Pairs(Box::default())
        } else {
            Groups::Split {
                keys: Box::default(),
                values: Box::default(),
            }
        };
        History {
            windows: VecDeque::new(),
            groups,
            base: 0,
            end: 0,
            stride: u32::try_from(stride).unwrap_or(u32::MAX),
            keep: 1,
        }
    }

    fn stride(&self) -> usize {
        self.stride as usize
    }

    /// Windows kept.
    pub(crate) fn len(&self) -> usize {
        self.windows.len()
    }

    /// The newest kept window.
    pub(crate) fn newest_window(&self) -> Option<Window> {
        self.windows.back().map(|(w, _)| *w)
    }

    /// Start of the oldest kept window.
    pub(crate) fn oldest_start(&self) -> Option<u64> {
        self.windows.front().map(|(w, _)| w.start_ns)
    }

    /// Room for `keep` windows and twice as many groups, once: most
    /// triggers have a group or two, and growing from nothing reallocates
    /// several times (room for two a window keeps the triggers with two
    /// from growing at all). The monitor calls it when a trigger gets its
    /// first flow, so that the first sweep does not make every trigger's
    /// allocations at once. A long history (an agent keeps thousands of
    /// windows for polls) is reserved for [`RESERVE_MAX`] windows and
    /// grows as it fills.
    #[inline]
    pub(crate) fn reserve(&mut self, keep: usize) {
        if self.windows.capacity() == 0 {
            self.reserve_first(keep);
        }
    }

    #[cold]
    #[inline(never)]
    fn reserve_first(&mut self, keep: usize) {
        let keep = keep.clamp(1, RESERVE_MAX);
        self.windows.reserve_exact(keep);
        if self.groups.capacity() == 0 {
            self.grow(2 * keep);
        }
    }

    /// Makes the rings hold at least `need` groups (a power of two, at
    /// least twice what they held), keeping the kept groups.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, need: usize) {
        let capacity = need.max(2 * self.groups.capacity()).max(1).next_power_of_two();
        self.groups = self.groups.regrown(capacity, self.base, self.end, self.stride());
    }

    /// Where group `end` goes, making room for it if the rings are full.
    #[inline]
    fn next_slot(&mut self) -> usize {
        let held = (self.end - self.base) as usize;
        if held >= self.groups.capacity() {
            self.grow(held + 1);
        }
        self.end as usize & (self.groups.capacity() - 1)
    }

    /// Starts a new (newest) window, keeping at most `keep` windows in all
    /// (at least this one: its groups are read back for testing); the
    /// oldest ones go (see the module documentation). Inlined: the sweep
    /// calls it for every trigger it tests.
    #[inline]
    pub(crate) fn start_window(&mut self, window: Window, keep: usize) {
        let keep = keep.clamp(1, u32::MAX as usize);
        self.keep = keep as u32;
        self.reserve(keep);
        if self.windows.len() >= keep {
            // At a steady load, one goes for the one that comes.
            self.windows.pop_front();
            if self.windows.len() >= keep {
                self.trim(keep);
            }
            self.base = self.windows.front().map_or(self.end, |w| w.1);
        }
        self.windows.push_back((window, self.end));
    }

    /// Drops the oldest windows but `keep` − 1 (`keep` was lowered).
    #[cold]
    #[inline(never)]
    fn trim(&mut self, keep: usize) {
        let n = self.windows.len() + 1 - keep;
        self.windows.drain(..n);
    }

    /// Adds a group to the newest window; `values` must yield `stride` values.
    pub(crate) fn push_group(&mut self, key: FlowKey, values: impl IntoIterator<Item = f64>) {
        let stride = self.stride();
        let i = self.next_slot();
        match &mut self.groups {
            Groups::Pairs(p) => {
                // Keep the layout even if a caller gave none.
                let v = values.into_iter().next().unwrap_or(f64::NAN);
                p[i] = (key, v);
            }
            Groups::Split { keys, values: vals } => {
                keys[i] = key;
                let slots = &mut vals[i * stride..(i + 1) * stride];
                let mut given = values.into_iter();
                // Keep the layout even if a caller gave too few or too many.
                for s in slots {
                    *s = given.next().unwrap_or(f64::NAN);
                }
            }
        }
        self.end += 1;
    }

    /// [`History::push_group`] from a slice: one copy when it holds
    /// `stride` values (the sweep's per-flow test calls it per group).
    #[inline]
    pub(crate) fn push_slice(&mut self, key: FlowKey, values: &[f64]) {
        let stride = self.stride();
        if values.len() != stride {
            return self.push_group(key, values.iter().copied());
        }
        let i = self.next_slot();
        match &mut self.groups {
            Groups::Pairs(p) => p[i] = (key, values[0]),
            Groups::Split { keys, values: vals } => {
                keys[i] = key;
                vals[i * stride..(i + 1) * stride].copy_from_slice(values);
            }
        }
        self.end += 1;
    }

    /// Starts loading what closing the next window reads and writes: the
    /// newest window (the sweep compares it with the window it tests), the
    /// slot the next one goes to, the oldest two (dropping one reads the
    /// other's first group) and where the next group goes.
    #[inline]
    pub(crate) fn prefetch_tail(&self) {
        if let Some(newest) = self.windows.back() {
            let p: *const (Window, u64) = newest;
            prefetch(p);
            // The next slot, unless the ring wraps there (then a wasted hint).
            prefetch(p.wrapping_add(1));
        }
        if self.windows.len() >= self.keep as usize {
            if let Some(oldest) = self.windows.front() {
                let p: *const (Window, u64) = oldest;
                prefetch(p.wrapping_add(1));
            }
        }
        let i = self.end as usize & self.groups.capacity().wrapping_sub(1);
        match &self.groups {
            Groups::Pairs(p) => prefetch(p.as_ptr().wrapping_add(i)),
            Groups::Split { keys, values } => {
                prefetch(keys.as_ptr().wrapping_add(i));
                prefetch(values.as_ptr().wrapping_add(i * self.stride()));
            }
        }
    }

    /// Keeps nothing (the rings stay for later windows).
    pub(crate) fn clear(&mut self) {
        self.windows.clear();
        self.base = self.end;
    }

    /// The kept window starting at `start_ns` and its groups.
    pub(crate) fn find(&self, start_ns: u64) -> Option<(Window, impl Iterator<Item = (&FlowKey, &[f64])>)> {
        let i = self.windows.iter().position(|(w, _)| w.start_ns == start_ns)?;
        Some(self.window_at(i))
    }

    /// The newest window and its groups.
    pub(crate) fn newest(&self) -> Option<(Window, impl Iterator<Item = (&FlowKey, &[f64])>)> {
        let n = self.windows.len();
        (n > 0).then(|| self.window_at(n - 1))
    }

    fn window_at(&self, i: usize) -> (Window, impl Iterator<Item = (&FlowKey, &[f64])>) {
        let (window, from) = self.windows[i];
        let to = self.windows.get(i + 1).map_or(self.end, |w| w.1);
        let stride = self.stride();
        let groups = (from..to).map(move |n| self.groups.get(n, stride));
        (window, groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn key(i: u32) -> FlowKey {
        FlowKey::new(
            IpAddr::V4(Ipv4Addr::from(i)),
            IpAddr::V4(Ipv4Addr::from(0)),
            17,
            Some((1, 2)),
            None,
        )
    }

    fn window(i: u64) -> Window {
        Window {
            start_ns: i * 10,
            end_ns: i * 10 + 10,
        }
    }

    /// A model window: its start and its groups.
    type ModelWindow = (u64, Vec<(FlowKey, Vec<f64>)>);

    /// Against a model: a deque of windows, each a list of groups.
    #[test]
    fn keeps_the_last_windows_and_their_groups() {
        for (stride, keep) in [(1, 1), (1, 3), (2, 3), (3, 2), (1, 16)] {
            let mut h = History::new(stride);
            let mut model: VecDeque<ModelWindow> = VecDeque::new();
            let mut capacity_after_warmup = None;
            for i in 0..200u64 {
                h.start_window(window(i), keep);
                if model.len() >= keep {
                    model.pop_front();
                }
                let groups: Vec<_> = (0..(i % 5) as u32)
                    .map(|g| {
                        (
                            key(g),
                            (0..stride)
                                .map(|v| (i + v as u64) as f64 + f64::from(g))
                                .collect::<Vec<f64>>(),
                        )
                    })
                    .collect();
                for (j, (k, v)) in groups.iter().enumerate() {
                    if j % 2 == 0 {
                        h.push_group(*k, v.iter().copied());
                    } else {
                        h.push_slice(*k, v);
                    }
                }
                model.push_back((i * 10, groups));
                for (start, groups) in &model {
                    let (w, got) = h.find(*start).expect("kept");
                    assert_eq!(w.start_ns, *start);
                    let got: Vec<_> = got.map(|(k, v)| (*k, v.to_vec())).collect();
                    assert_eq!(&got, groups, "stride {stride}, keep {keep}");
                }
                assert_eq!(h.len(), model.len());
                assert_eq!(h.oldest_start(), model.front().map(|m| m.0));
                assert!(h.find(i * 10 + 5).is_none());
                if i >= keep as u64 {
                    assert!(h.find((i - keep as u64) * 10).is_none(), "dropped");
                }
                assert_eq!(
                    h.newest().map(|(w, g)| (w.start_ns, g.count())),
                    Some((i * 10, (i % 5) as usize))
                );
                if i == 100 {
                    capacity_after_warmup = Some(h.groups.capacity());
                }
            }
            assert_eq!(
                Some(h.groups.capacity()),
                capacity_after_warmup,
                "a steady load allocates nothing"
            );
            h.clear();
            assert_eq!((h.len(), h.newest().is_none()), (0, true));
        }
    }

    /// The ring against a model when `keep` moves both ways and a burst
    /// of groups makes it grow while it wraps around.
    #[test]
    fn keep_changes_and_growth_while_wrapped() {
        for stride in [0, 1, 3] {
            let mut h = History::new(stride);
            let mut model: VecDeque<ModelWindow> = VecDeque::new();
            for i in 0..300u64 {
                let keep = [4, 4, 9, 1, 6, 20][(i / 23 % 6) as usize];
                h.start_window(window(i), keep);
                while model.len() >= keep {
                    model.pop_front();
                }
                let n = if i % 37 == 0 { 70 } else { (i * 7 % 4) as u32 };
                let groups: Vec<_> = (0..n)
                    .map(|g| {
                        (
                            key(g),
                            (0..stride)
                                .map(|v| (i * 100 + v as u64) as f64)
                                .collect::<Vec<f64>>(),
                        )
                    })
                    .collect();
                for (k, v) in &groups {
                    h.push_slice(*k, v);
                }
                model.push_back((i * 10, groups));
                assert_eq!(h.len(), model.len());
                assert_eq!(h.oldest_start(), model.front().map(|m| m.0));
                for (start, groups) in &model {
                    let (_, got) = h.find(*start).expect("kept");
                    let got: Vec<_> = got.map(|(k, v)| (*k, v.to_vec())).collect();
                    assert_eq!(&got, groups, "stride {stride}, window {i}");
                }
            }
        }
    }

    #[test]
    fn keep_zero_still_holds_the_newest_window() {
        let mut h = History::new(1);
        h.start_window(window(0), 0);
        h.push_group(key(1), [5.0]);
        h.start_window(window(1), 0);
        h.push_group(key(2), [6.0, 7.0]);
        h.push_slice(key(3), &[]);
        let (w, g) = h.newest().unwrap();
        assert_eq!(w.start_ns, 10);
        let g: Vec<_> = g.map(|(k, v)| (*k, v.to_vec())).collect();
        assert_eq!(g[0], (key(2), vec![6.0]));
        assert_eq!(g[1].0, key(3));
        assert!(g[1].1.len() == 1 && g[1].1[0].is_nan());
        assert_eq!(h.len(), 1);
    }
}
