//! A trigger's last few closed windows: every group's key and values, for
//! queries after the fact ([`crate::Monitor::window_values`]).
//!
//! # Layout
//! All windows share one flat array of groups, in window order: with one
//! value per group (most triggers) each key sits beside its value, so the
//! sweep writes one line per group; with more, keys and values (`stride`
//! a group) are two arrays. `windows` says where each window's groups
//! begin. A new window is appended at the end. Windows older than the
//! newest `keep` are dropped in bulk, once as many again have been added,
//! with the groups before the oldest kept one (one `memmove`): closing a
//! window then touches only the arrays' ends, not their fronts, and each
//! group is moved O(1) times on average. Once the arrays have grown to a
//! steady load, closing a window allocates nothing.
//!
//! # Invariants
//! - `windows` is in closing order, its starts increasing, every start in
//!   `0..=groups.len()`; the newest `keep` of them are the kept ones.
//! - Groups before the oldest window's start belong to dropped windows
//!   (none, right after a bulk drop).

use std::collections::VecDeque;

use clarion_report::Window;
use clarion_wire::FlowKey;

use crate::prefetch::prefetch;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct History {
    /// Windows, oldest first, with the index of their first group; only
    /// the newest `keep` are kept (the others wait for a bulk drop).
    windows: VecDeque<(Window, usize)>,
    groups: Groups,
    stride: u32,
    /// Windows kept (at least 1), as the latest `start_window` was told.
    keep: u32,
}

/// The groups' keys and values.
#[derive(Debug)]
enum Groups {
    /// One value per group, beside its key.
    Pairs(Vec<(FlowKey, f64)>),
    /// Any other number of values per group: `stride` values each.
    Split { keys: Vec<FlowKey>, values: Vec<f64> },
}

impl Groups {
    fn len(&self) -> usize {
        match self {
            Groups::Pairs(p) => p.len(),
            Groups::Split { keys, .. } => keys.len(),
        }
    }

    /// Group `i`'s key and values.
    fn get(&self, i: usize, stride: usize) -> (&FlowKey, &[f64]) {
        match self {
            Groups::Pairs(p) => {
                let (k, v) = &p[i];
                (k, std::slice::from_ref(v))
            }
            Groups::Split { keys, values } => (&keys[i], &values[i * stride..(i + 1) * stride]),
        }
    }

    fn reserve_exact(&mut self, n: usize, stride: usize) {
        match self {
            Groups::Pairs(p) => p.reserve_exact(n),
            Groups::Split { keys, values } => {
                keys.reserve_exact(n);
                values.reserve_exact(n * stride);
            }
        }
    }

    /// Drops the first `n` groups.
    fn drain_front(&mut self, n: usize, stride: usize) {
        match self {
            Groups::Pairs(p) => {
                p.drain(..n);
            }
            Groups::Split { keys, values } => {
                keys.drain(..n);
                values.drain(..n * stride);
            }
        }
    }

    fn clear(&mut self) {
        match self {
            Groups::Pairs(p) => p.clear(),
            Groups::Split { keys, values } => {
                keys.clear();
                values.clear();
            }
        }
    }

    #[cfg(test)]
    fn capacity(&self) -> usize {
        match self {
            Groups::Pairs(p) => p.capacity(),
            Groups::Split { keys, .. } => keys.capacity(),
        }
    }
}

/// Most windows a trigger's history reserves room for up front.
const RESERVE_MAX: usize = 64;

impl History {
    /// An empty history of windows with `stride` values per group.
    pub(crate) fn new(stride: usize) -> Self {
        let groups = if stride == 1 {
            Groups::Pairs(Vec::new())
        } else {
            Groups::Split {
                keys: Vec::new(),
                values: Vec::new(),
            }
        };
        History {
            windows: VecDeque::new(),
            groups,
            stride: u32::try_from(stride).unwrap_or(u32::MAX),
            keep: 1,
        }
    }

    fn stride(&self) -> usize {
        self.stride as usize
    }

    /// Index in `windows` of the oldest kept window.
    fn oldest(&self) -> usize {
        self.windows.len().saturating_sub(self.keep as usize)
    }

    /// Windows kept.
    pub(crate) fn len(&self) -> usize {
        self.windows.len() - self.oldest()
    }

    /// The newest kept window.
    pub(crate) fn newest_window(&self) -> Option<Window> {
        self.windows.back().map(|(w, _)| *w)
    }

    /// Start of the oldest kept window.
    pub(crate) fn oldest_start(&self) -> Option<u64> {
        self.windows.get(self.oldest()).map(|(w, _)| w.start_ns)
    }

    /// Room for `keep` windows of a group each, once: most triggers have a
    /// group or two, and growing from nothing reallocates 3 times. The
    /// arrays get twice that, since they also hold dropped windows until
    /// the bulk drop: triggers started together would otherwise all grow
    /// in the same sweep, `keep` windows later. The monitor calls it when
    /// a trigger gets its first flow, so that the first sweep does not
    /// make every trigger's allocations at once. A long history (an agent
    /// keeps thousands of windows for polls) is reserved for
    /// [`RESERVE_MAX`] windows and grows as it fills.
    #[inline]
    pub(crate) fn reserve(&mut self, keep: usize) {
        if self.windows.capacity() == 0 {
            let keep = keep.clamp(1, RESERVE_MAX);
            self.windows.reserve_exact(2 * keep);
            let stride = self.stride();
            self.groups.reserve_exact(2 * keep, stride);
        }
    }

    /// Starts a new (newest) window, keeping at most `keep` windows in all
    /// (at least this one: its groups are read back for testing). Inlined:
    /// the sweep calls it for every trigger it tests, and it usually only
    /// appends.
    #[inline]
    pub(crate) fn start_window(&mut self, window: Window, keep: usize) {
        let keep = keep.clamp(1, u32::MAX as usize);
        self.keep = keep as u32;
        self.reserve(keep);
        if self.windows.len() >= 2 * keep {
            self.drop_old(keep);
        }
        self.windows.push_back((window, self.groups.len()));
    }

    /// Drops all windows but the newest `keep` − 1, and their groups.
    #[cold]
    #[inline(never)]
    fn drop_old(&mut self, keep: usize) {
        let drop = self.windows.len() + 1 - keep;
        self.windows.drain(..drop);
        let dead = self.windows.front().map_or(self.groups.len(), |w| w.1);
        if dead > 0 {
            let stride = self.stride();
            self.groups.drain_front(dead, stride);
            for w in &mut self.windows {
                w.1 -= dead;
            }
        }
    }

    /// Adds a group to the newest window; `values` must yield `stride` values.
    pub(crate) fn push_group(&mut self, key: FlowKey, values: impl IntoIterator<Item = f64>) {
        let stride = self.stride();
        match &mut self.groups {
            Groups::Pairs(p) => {
                // Keep the layout even if a caller gave none.
                let v = values.into_iter().next().unwrap_or(f64::NAN);
                p.push((key, v));
            }
            Groups::Split { keys, values: vals } => {
                keys.push(key);
                let before = vals.len();
                vals.extend(values);
                // Keep the layout even if a caller gave too few or too many.
                vals.resize(before + stride, f64::NAN);
            }
        }
    }

    /// [`History::push_group`] from a slice: one copy when it holds
    /// `stride` values (the sweep's per-flow test calls it per group).
    #[inline]
    pub(crate) fn push_slice(&mut self, key: FlowKey, values: &[f64]) {
        if values.len() != self.stride() {
            return self.push_group(key, values.iter().copied());
        }
        match &mut self.groups {
            Groups::Pairs(p) => p.push((key, values[0])),
            Groups::Split { keys, values: vals } => {
                keys.push(key);
                vals.extend_from_slice(values);
            }
        }
    }

    /// Starts loading what closing the next window reads and writes: the
    /// newest window (the sweep compares it with the window it tests), the
    /// slot the next one goes to, and where the next group goes.
    #[inline]
    pub(crate) fn prefetch_tail(&self) {
        if let Some(newest) = self.windows.back() {
            let p: *const (Window, usize) = newest;
            prefetch(p);
            // The next slot, unless the ring wraps there (then a wasted hint).
            prefetch(p.wrapping_add(1));
        }
        match &self.groups {
            Groups::Pairs(p) => prefetch(p.as_ptr().wrapping_add(p.len())),
            Groups::Split { keys, values } => {
                prefetch(keys.as_ptr().wrapping_add(keys.len()));
                prefetch(values.as_ptr().wrapping_add(values.len()));
            }
        }
    }

    /// Keeps nothing (the groups' memory stays for later windows).
    pub(crate) fn clear(&mut self) {
        self.windows.clear();
        self.groups.clear();
    }

    /// The kept window starting at `start_ns` and its groups.
    pub(crate) fn find(&self, start_ns: u64) -> Option<(Window, impl Iterator<Item = (&FlowKey, &[f64])>)> {
        let lo = self.oldest();
        let i = self
            .windows
            .range(lo..)
            .position(|(w, _)| w.start_ns == start_ns)?;
        Some(self.window_at(lo + i))
    }

    /// The newest window and its groups.
    pub(crate) fn newest(&self) -> Option<(Window, impl Iterator<Item = (&FlowKey, &[f64])>)> {
        let n = self.windows.len();
        (n > 0).then(|| self.window_at(n - 1))
    }

    fn window_at(&self, i: usize) -> (Window, impl Iterator<Item = (&FlowKey, &[f64])>) {
        let (window, from) = self.windows[i];
        let to = self.windows.get(i + 1).map_or(self.groups.len(), |w| w.1);
        let stride = self.stride();
        let groups = (from..to).map(move |i| self.groups.get(i, stride));
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
