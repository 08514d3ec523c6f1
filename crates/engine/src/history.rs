//! A trigger's last few closed windows: every group's key and values, for
//! queries after the fact ([`crate::Monitor::window_values`]).
//!
//! # Layout
//! All windows share two flat arrays, keys and values (`stride` values per
//! group), in window order; `windows` says where each window's groups
//! begin. A new window is appended at the end; the oldest is dropped by
//! moving `windows`' front forward, and the dead prefix of the arrays is
//! cut off (one `memmove`) only once it is at least half of them. So, once
//! the arrays have grown to a steady load, closing a window allocates
//! nothing, and each group is moved O(1) times on average.
//!
//! # Invariants
//! - `windows` is in closing order, its starts increasing, every start in
//!   `0..=keys.len()`; `values.len() == keys.len() * stride`.
//! - Groups before the oldest window's start belong to dropped windows.

use std::collections::VecDeque;

use clarion_report::Window;
use clarion_wire::FlowKey;

use crate::prefetch::prefetch;

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct History {
    /// Kept windows, oldest first, with the index of their first group.
    windows: VecDeque<(Window, usize)>,
    keys: Vec<FlowKey>,
    values: Vec<f64>,
    stride: usize,
}

/// Most windows a trigger's history reserves room for up front.
const RESERVE_MAX: usize = 64;

impl History {
    /// An empty history of windows with `stride` values per group.
    pub(crate) fn new(stride: usize) -> Self {
        History {
            stride,
            ..History::default()
        }
    }

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

    /// Room for `keep` windows of a group each, once: most triggers have a
    /// group or two, and growing from nothing reallocates 3 times. The
    /// arrays get twice that, since they also hold dropped windows' groups
    /// until those are half of them: triggers started together would
    /// otherwise all grow in the same sweep, `keep` windows later. The
    /// monitor calls it when a trigger gets its first flow, so that the
    /// first sweep does not make every trigger's allocations at once. A
    /// long history (an agent keeps thousands of windows for polls) is
    /// reserved for [`RESERVE_MAX`] windows and grows as it fills.
    #[inline]
    pub(crate) fn reserve(&mut self, keep: usize) {
        if self.windows.capacity() == 0 {
            let keep = keep.clamp(1, RESERVE_MAX);
            self.windows.reserve_exact(keep);
            self.keys.reserve_exact(2 * keep);
            self.values.reserve_exact(2 * keep * self.stride);
        }
    }

    /// Starts a new (newest) window, keeping at most `keep` windows in all
    /// (at least this one: its groups are read back for testing).
    pub(crate) fn start_window(&mut self, window: Window, keep: usize) {
        let keep = keep.max(1);
        self.reserve(keep);
        while self.windows.len() >= keep {
            self.windows.pop_front();
        }
        // Groups of dropped windows, cut off once they are half the arrays.
        let dead = self.windows.front().map_or(self.keys.len(), |w| w.1);
        if dead > 0 && 2 * dead >= self.keys.len() {
            self.keys.drain(..dead);
            self.values.drain(..dead * self.stride);
            for w in &mut self.windows {
                w.1 -= dead;
            }
        }
        self.windows.push_back((window, self.keys.len()));
    }

    /// Adds a group to the newest window; `values` must yield `stride` values.
    pub(crate) fn push_group(&mut self, key: FlowKey, values: impl IntoIterator<Item = f64>) {
        self.keys.push(key);
        let before = self.values.len();
        self.values.extend(values);
        // Keep the layout even if a caller gave too few or too many.
        self.values.resize(before + self.stride, f64::NAN);
    }

    /// [`History::push_group`] from a slice: one copy when it holds
    /// `stride` values (the sweep's per-flow test calls it per group).
    #[inline]
    pub(crate) fn push_slice(&mut self, key: FlowKey, values: &[f64]) {
        if values.len() != self.stride {
            return self.push_group(key, values.iter().copied());
        }
        self.keys.push(key);
        self.values.extend_from_slice(values);
    }

    /// Starts loading where the next group's key and values go.
    #[inline]
    pub(crate) fn prefetch_tail(&self) {
        prefetch(self.keys.as_ptr().wrapping_add(self.keys.len()));
        prefetch(self.values.as_ptr().wrapping_add(self.values.len()));
    }

    /// Keeps nothing (the groups' memory stays for later windows).
    pub(crate) fn clear(&mut self) {
        self.windows.clear();
        self.keys.clear();
        self.values.clear();
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
        let to = self.windows.get(i + 1).map_or(self.keys.len(), |w| w.1);
        let s = self.stride;
        let groups = (from..to).map(move |i| (&self.keys[i], &self.values[i * s..(i + 1) * s]));
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
        let mut h = History::new(2);
        let mut model: VecDeque<ModelWindow> = VecDeque::new();
        let keep = 3;
        let mut capacity_after_warmup = None;
        for i in 0..200u64 {
            h.start_window(window(i), keep);
            if model.len() >= keep {
                model.pop_front();
            }
            let groups: Vec<_> = (0..(i % 5) as u32)
                .map(|g| (key(g), vec![i as f64, f64::from(g)]))
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
                assert_eq!(&got, groups);
            }
            assert_eq!(h.len(), model.len());
            assert_eq!(h.oldest_start(), model.front().map(|m| m.0));
            assert!(h.find(i * 10 + 5).is_none());
            assert_eq!(
                h.newest().map(|(w, g)| (w.start_ns, g.count())),
                Some((i * 10, (i % 5) as usize))
            );
            if i == 50 {
                capacity_after_warmup = Some(h.keys.capacity());
            }
        }
        assert_eq!(
            Some(h.keys.capacity()),
            capacity_after_warmup,
            "a steady load allocates nothing"
        );
        h.clear();
        assert_eq!((h.len(), h.newest().is_none()), (0, true));
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
