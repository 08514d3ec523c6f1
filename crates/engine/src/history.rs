//! A trigger's last few closed windows: every group's key and values, for
//! queries after the fact ([`crate::Monitor::window_values`]).
//!
//! # Layout
//! All windows share one ring of groups, in window order: with one value
//! per group (most triggers) and a small ring, each key sits beside its
//! value in a line of its own, so the sweep writes one line per group (once
//! the ring would grow past 64 groups, they are packed, 48 bytes a group,
//! in chunks that never move: see `Chunks`); with more values, keys and
//! values (`stride` a group) are two rings. Groups are numbered in the
//! order they were added (wrapping `u32`s); in a ring, group `n` sits at
//! `n` modulo the ring's capacity, a power of two. The kept windows, each
//! with the number of its first group, are a ring of their own, numbered
//! the same way. A new window is written after the newest; once `keep` are
//! kept, the oldest goes by moving the start of the windows' ring (O(1),
//! nothing read, moved or freed). So closing a window costs the same in
//! every sweep, and triggers started together never drop their old windows
//! all in one sweep (as a bulk drop did, with one `memmove` each): closing
//! a window only writes the rings' ends.
//!
//! Triggers tested flow by flow in the gather keep no history here: their
//! values go to the monitor's recent epochs (`recent.rs`). (The sweep
//! times quoted below were measured when they still wrote here.)
//!
//! The groups' ring learns where the oldest kept group is (`base`) only
//! when it looks full; it grows (doubling, re-laid out) only when the kept
//! windows hold more groups than it has room for. Once the rings have
//! grown to a steady load, closing a window allocates nothing.
//!
//! # Invariants
//! - `count` <= `keep` after `start_window`; the kept windows are numbers
//!   `first..first + count`, in closing order, their first groups in
//!   adding order.
//! - `base` is at or before the first group of the oldest kept window
//!   (`end` when none is kept), and the groups from `base` to `end` are
//!   stored: in a ring, `end - base` <= its capacity; in chunks, the
//!   chunks from `base`'s on are in the list, in order (chunks before it
//!   go only when a chunk is added).
//! - Both rings' capacities are 0 or powers of two; `values` holds
//!   `stride` slots per key slot.

use clarion_report::Window;
use clarion_wire::FlowKey;

use std::collections::VecDeque;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct History {
    /// Window ring: each kept window with the number of its first group.
    windows: Box<[Slot]>,
    /// Number of the oldest kept window.
    first: u32,
    /// Windows kept.
    count: u32,
    groups: Groups,
    /// At or before the first group of the oldest kept window.
    base: u32,
    /// Number the next group gets.
    end: u32,
    stride: u32,
    /// Windows kept (at least 1), as the latest `start_window` was told.
    keep: u32,
}

/// The groups' keys and values, as rings of the same capacity (0 or a
/// power of two): group `n` sits at `n & (capacity - 1)`.
#[derive(Debug)]
enum Groups {
    /// One value per group, beside its key, a line each.
    Pairs(Box<[Pair]>),
    /// The same packed in chunks, once a ring of pairs grew past
    /// [`PAIRS_MAX`] (see [`Chunks`]); boxed, so that the history's
    /// header stays within the trigger's first two lines.
    Chunked(Box<Chunks>),
    /// Any other number of values per group: `stride` values each.
    Split {
        keys: Box<[FlowKey]>,
        values: Box<[f64]>,
    },
}

/// Groups a chunk of [`Chunks`] holds (a power of two).
const CHUNK: usize = 64;
const CHUNK_SHIFT: u32 = CHUNK.trailing_zeros();
/// Chunk numbers wrap as group numbers do: at 2^32 / [`CHUNK`].
const CHUNK_NUMBERS: u32 = u32::MAX >> CHUNK_SHIFT;

/// The one-value groups of a busy trigger (hundreds a window under an
/// attack whose flows pass the DoS filter) in fixed chunks of [`CHUNK`]
/// packed groups, oldest first, instead of one ring: adding a chunk never
/// moves a group, and the chunks the oldest kept window no longer reaches
/// are reused for new ones. A ring that doubles copies every kept group
/// instead, and triggers started together double in the same sweep: with
/// 12 % of the packets in attack flows, the sweeps where that happened
/// took 4.5–7.4 ms against ~1.3 ms (`clarion-lab bench --rate 4000000
/// --dos-fraction 0.12 --flow-timeout 20ms`).
#[derive(Debug)]
struct Chunks {
    /// Chunk `k` holds the groups numbered `(first + k) * CHUNK ..`.
    list: VecDeque<Box<[(FlowKey, f64)]>>,
    /// Number of the chunk `list[0]` (modulo [`CHUNK_NUMBERS`] + 1).
    first: u32,
}

impl Chunks {
    /// Where group `n` is: its chunk's index in `list` (maybe past the
    /// end) and its slot there.
    #[inline]
    fn place(&self, n: u32) -> (usize, usize) {
        let chunk = ((n >> CHUNK_SHIFT).wrapping_sub(self.first) & CHUNK_NUMBERS) as usize;
        (chunk, n as usize & (CHUNK - 1))
    }

    /// Group `n`, which must be in a chunk.
    #[inline]
    fn get(&self, n: u32) -> &(FlowKey, f64) {
        let (c, i) = self.place(n);
        &self.list[c][i]
    }

    #[inline]
    fn get_mut(&mut self, n: u32) -> &mut (FlowKey, f64) {
        let (c, i) = self.place(n);
        &mut self.list[c][i]
    }

    /// True when group `n` has no chunk yet.
    #[inline]
    fn lacks(&self, n: u32) -> bool {
        self.list.is_empty() || self.place(n).0 >= self.list.len()
    }

    /// Adds the chunk of group `end` (the next after the last chunk's),
    /// reusing one the groups from `base` on do not reach.
    #[cold]
    #[inline(never)]
    fn add(&mut self, end: u32, base: u32) {
        let unused = self.place(base).0.min(self.list.len());
        let mut spare = None;
        for _ in 0..unused {
            spare = self.list.pop_front();
            self.first = self.first.wrapping_add(1) & CHUNK_NUMBERS;
        }
        if self.list.is_empty() {
            self.first = end >> CHUNK_SHIFT;
        }
        let chunk = spare.unwrap_or_else(|| vec![(FlowKey::default(), f64::NAN); CHUNK].into_boxed_slice());
        self.list.push_back(chunk);
    }

    /// Chunks holding groups `from..to` of `groups`.
    fn from_groups(groups: &Groups, from: u32, to: u32) -> Chunks {
        let mut c = Chunks {
            list: VecDeque::new(),
            first: from >> CHUNK_SHIFT,
        };
        for n in (0..to.wrapping_sub(from)).map(|k| from.wrapping_add(k)) {
            if c.lacks(n) {
                c.add(n, from);
            }
            let (key, values) = groups.get(n, 1);
            *c.get_mut(n) = (*key, values.first().copied().unwrap_or(f64::NAN));
        }
        c
    }
}

impl Groups {
    /// Groups the rings hold (for chunks: the chunks' room).
    fn capacity(&self) -> usize {
        match self {
            Groups::Pairs(p) => p.len(),
            Groups::Chunked(c) => c.list.len() * CHUNK,
            Groups::Split { keys, .. } => keys.len(),
        }
    }

    /// Group `n`'s key and values (`n` in the ring).
    #[inline]
    fn get(&self, n: u32, stride: usize) -> (&FlowKey, &[f64]) {
        let i = n as usize & self.capacity().wrapping_sub(1);
        match self {
            Groups::Pairs(p) => {
                let Pair { key, value } = &p[i];
                (key, std::slice::from_ref(value))
            }
            Groups::Chunked(c) => {
                let (k, v) = c.get(n);
                (k, std::slice::from_ref(v))
            }
            Groups::Split { keys, values } => (&keys[i], &values[i * stride..(i + 1) * stride]),
        }
    }

    /// Rings of `capacity` (a power of two) holding groups `from..to` of
    /// these, at their new places; chunks past [`PAIRS_MAX`] one-value
    /// groups.
    fn regrown(&self, capacity: usize, from: u32, to: u32, stride: usize) -> Groups {
        let old = self.capacity().wrapping_sub(1);
        let new = capacity - 1;
        let numbers = (0..to.wrapping_sub(from)).map(|k| from.wrapping_add(k) as usize);
        match self {
            Groups::Pairs(p) if capacity <= PAIRS_MAX => {
                let mut q = vec![Pair::default(); capacity].into_boxed_slice();
                for n in numbers {
                    q[n & new] = p[n & old];
                }
                Groups::Pairs(q)
            }
            // Many groups a window: chunks, which never grow again.
            Groups::Pairs(_) | Groups::Chunked(_) => {
                Groups::Chunked(Box::new(Chunks::from_groups(self, from, to)))
            }
            Groups::Split { keys, values } => {
                let mut k = vec![FlowKey::default(); capacity].into_boxed_slice();
                let mut v = vec![f64::NAN; capacity * stride].into_boxed_slice();
                for n in numbers {
                    let (i, j) = (n & old, n & new);
                    k[j] = keys[i];
                    v[j * stride..(j + 1) * stride].copy_from_slice(&values[i * stride..(i + 1) * stride]);
                }
                Groups::Split { keys: k, values: v }
            }
        }
    }
}

/// A group of a history with one value a group: a line each (the ring is
/// line-aligned), so that writing one never touches two lines (at 48
/// bytes, half of them straddled two). Only while the ring holds at most
/// [`PAIRS_MAX`] groups: a trigger with tens of groups a window writes
/// them in a row, where the padding is only more lines (`clarion-lab bench
/// --flows 20000 --arrival 20000` swept in 15.7 ms instead of 9.4 with
/// every ring of lines), so a ring grown past it packs them
/// (packed in a ring, 9.4 ms; as two rings, keys and values, 10.8 ms;
/// now in chunks, [`Groups::Chunked`]).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Pair {
    key: FlowKey,
    value: f64,
}

impl Default for Pair {
    fn default() -> Self {
        Pair {
            key: FlowKey::default(),
            value: f64::NAN,
        }
    }
}

/// A kept window and the number of its first group: half a line, so that
/// writing one never touches two lines.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
struct Slot {
    window: Window,
    first: u32,
}

/// Most groups a ring of [`Pair`]s holds (see there).
const PAIRS_MAX: usize = 64;

/// Most windows a trigger's history reserves room for up front.
const RESERVE_MAX: usize = 64;

/// Groups a trigger's history reserves room for up front at four a window
/// (a 4 KB ring of one-value groups); past that, at two a window.
const RESERVE_GROUPS: usize = 64;

/// A window slot's filler.
const NO_WINDOW: Slot = Slot {
    window: Window {
        start_ns: 0,
        end_ns: 0,
    },
    first: 0,
};

impl History {
    /// Heap bytes reserved (windows and groups).
    pub(crate) fn heap_bytes(&self) -> usize {
        let groups = match &self.groups {
            Groups::Pairs(p) => std::mem::size_of_val(&**p),
            Groups::Chunked(c) => {
                c.list.iter().map(|b| std::mem::size_of_val(&**b)).sum::<usize>()
                    + c.list.capacity() * std::mem::size_of::<Box<[(FlowKey, f64)]>>()
            }
            Groups::Split { keys, values } => {
                std::mem::size_of_val(&**keys) + std::mem::size_of_val(&**values)
            }
        };
        std::mem::size_of_val(&*self.windows) + groups
    }

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
            windows: Box::default(),
            first: 0,
            count: 0,
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
        self.count as usize
    }

    /// Slot in `windows` of window number `k`.
    #[inline]
    fn window_slot(&self, k: u32) -> usize {
        k as usize & self.windows.len().wrapping_sub(1)
    }

    /// Start of the oldest kept window.
    pub(crate) fn oldest_start(&self) -> Option<u64> {
        (self.count > 0).then(|| self.windows[self.window_slot(self.first)].window.start_ns)
    }

    /// Room for `keep` windows and, once, for four groups a window up to
    /// [`RESERVE_GROUPS`], two past it: most triggers have a group or two a window,
    /// and growing from nothing reallocates several times. Triggers
    /// started together with like loads fill their rings in the same
    /// sweep, so any growth comes in bursts (with room for two a window, a
    /// hundred triggers or more grew in each of sweeps 10-14 of `clarion
    /// bench`, at the default 16 windows); four a window there spares all
    /// but the busiest. The rings are written in full here (the memory is
    /// fresh), so that the sweep does not take those page faults: left to
    /// fill as groups came, the first sweep took ~200 µs instead of ~125.
    /// The monitor calls it when it makes a match set with the trigger
    /// (the trigger's first flow makes one), so that the first sweep does
    /// not make every trigger's allocations at once, and a new flow of a
    /// known set touches none of its triggers.
    /// A long history (an agent keeps thousands of windows for polls) is
    /// reserved for [`RESERVE_MAX`] windows and grows as it fills.
    #[inline]
    pub(crate) fn reserve(&mut self, keep: usize) {
        if self.windows.is_empty() {
            self.reserve_first(keep);
        }
    }

    /// Bytes [`History::reserve`] allocates for a one-value history
    /// keeping `keep` windows (the monitor commits that much heap per
    /// trigger before traffic, [`crate::Monitor::prefault`]).
    pub(crate) fn reserve_bytes(keep: usize) -> usize {
        let keep = keep.clamp(1, RESERVE_MAX);
        let groups = (4 * keep).min(RESERVE_GROUPS).max(2 * keep).next_power_of_two();
        keep.next_power_of_two() * std::mem::size_of::<Slot>() + groups * std::mem::size_of::<Pair>()
    }

    #[cold]
    #[inline(never)]
    fn reserve_first(&mut self, keep: usize) {
        let keep = keep.clamp(1, RESERVE_MAX);
        self.grow_windows(keep);
        if self.groups.capacity() == 0 {
            self.grow((4 * keep).min(RESERVE_GROUPS).max(2 * keep));
        }
    }

    /// Makes the window ring hold at least `need` windows (a power of
    /// two, at least twice what it held), keeping the kept ones.
    #[cold]
    #[inline(never)]
    fn grow_windows(&mut self, need: usize) {
        let capacity = need.max(2 * self.windows.len()).max(1).next_power_of_two();
        let mut w = vec![NO_WINDOW; capacity].into_boxed_slice();
        for k in (0..self.count).map(|i| self.first.wrapping_add(i)) {
            w[k as usize & (capacity - 1)] = self.windows[self.window_slot(k)];
        }
        self.windows = w;
    }

    /// Makes the group rings hold at least `need` groups (a power of two,
    /// at least twice what they held), keeping the groups from `base` on.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, need: usize) {
        let capacity = need.max(2 * self.groups.capacity()).max(1).next_power_of_two();
        self.groups = self.groups.regrown(capacity, self.base, self.end, self.stride());
    }

    /// Moves `base` up to the oldest kept window's first group (`end`
    /// when none is kept).
    fn move_base(&mut self) {
        self.base = if self.count > 0 {
            self.windows[self.window_slot(self.first)].first
        } else {
            self.end
        };
    }

    /// The group ring looked full: moves `base` up to the oldest kept
    /// window's first group, and grows the ring if it is full still.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self) {
        self.move_base();
        let held = self.end.wrapping_sub(self.base) as usize;
        if held >= self.groups.capacity() {
            self.grow(held + 1);
        }
    }

    /// Where group `end` goes in the rings, making room for it if they
    /// are full (for chunks: adding its chunk if it has none; the place
    /// returned is then unused). A ring of pairs with room, the sweep's
    /// usual case, is decided inline; the rest is out of line, so that
    /// it does not weigh on the code of the sweep it is inlined into.
    #[inline]
    fn next_slot(&mut self) -> usize {
        match &self.groups {
            Groups::Pairs(p) if (self.end.wrapping_sub(self.base) as usize) < p.len() => {
                self.end as usize & (p.len() - 1)
            }
            _ => self.next_slot_slow(),
        }
    }

    /// [`History::next_slot`] for full rings, split rings and chunks.
    #[inline(never)]
    fn next_slot_slow(&mut self) -> usize {
        let full = self.end.wrapping_sub(self.base) as usize >= self.groups.capacity();
        if full && !matches!(self.groups, Groups::Chunked(_)) {
            // May turn the ring into chunks.
            self.make_room();
        }
        match &self.groups {
            Groups::Chunked(c) => {
                if c.lacks(self.end) {
                    self.add_chunk();
                }
                0
            }
            _ => self.end as usize & (self.groups.capacity() - 1),
        }
    }

    /// Adds the chunk group `end` goes to, reusing one that no kept
    /// window reaches (`base` moves up to the oldest kept window's first
    /// group first).
    #[cold]
    #[inline(never)]
    fn add_chunk(&mut self) {
        self.move_base();
        let (end, base) = (self.end, self.base);
        if let Groups::Chunked(c) = &mut self.groups {
            c.add(end, base);
        }
    }

    /// Starts a new (newest) window, keeping at most `keep` windows in all
    /// (at least this one: its groups are read back for testing); the
    /// oldest ones go (see the module documentation).
    pub(crate) fn start_window(&mut self, window: Window, keep: usize) {
        let keep = keep.clamp(1, u32::MAX as usize) as u32;
        self.keep = keep;
        self.reserve(keep as usize);
        if self.count >= keep {
            // Usually one goes for the one that comes; more if `keep` was lowered.
            let drop = self.count + 1 - keep;
            self.first = self.first.wrapping_add(drop);
            self.count -= drop;
        }
        if self.count as usize >= self.windows.len() {
            self.grow_windows(self.count as usize + 1);
        }
        let slot = self.window_slot(self.first.wrapping_add(self.count));
        self.windows[slot] = Slot {
            window,
            first: self.end,
        };
        self.count += 1;
    }

    /// Adds a group to the newest window; `values` must yield `stride` values.
    pub(crate) fn push_group(&mut self, key: FlowKey, values: impl IntoIterator<Item = f64>) {
        let stride = self.stride();
        let i = self.next_slot();
        let end = self.end;
        match &mut self.groups {
            Groups::Pairs(p) => {
                // Keep the layout even if a caller gave none.
                let v = values.into_iter().next().unwrap_or(f64::NAN);
                p[i] = Pair { key, value: v };
            }
            Groups::Chunked(c) => {
                // Keep the layout even if a caller gave none.
                *c.get_mut(end) = (key, values.into_iter().next().unwrap_or(f64::NAN));
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
        self.end = self.end.wrapping_add(1);
    }

    /// Keeps nothing (the rings stay for later windows).
    pub(crate) fn clear(&mut self) {
        self.count = 0;
        self.base = self.end;
    }

    /// The kept window starting at `start_ns` and its groups.
    pub(crate) fn find(&self, start_ns: u64) -> Option<(Window, impl Iterator<Item = (&FlowKey, &[f64])>)> {
        let i = (0..self.count).position(|i| {
            self.windows[self.window_slot(self.first.wrapping_add(i))]
                .window
                .start_ns
                == start_ns
        })?;
        Some(self.window_at(i as u32))
    }

    /// The newest window and its groups.
    pub(crate) fn newest(&self) -> Option<(Window, impl Iterator<Item = (&FlowKey, &[f64])>)> {
        (self.count > 0).then(|| self.window_at(self.count - 1))
    }

    /// The `i`th kept window (0: the oldest) and its groups.
    fn window_at(&self, i: u32) -> (Window, impl Iterator<Item = (&FlowKey, &[f64])>) {
        let k = self.first.wrapping_add(i);
        let Slot { window, first: from } = self.windows[self.window_slot(k)];
        let to = if i + 1 < self.count {
            self.windows[self.window_slot(k.wrapping_add(1))].first
        } else {
            self.end
        };
        let stride = self.stride();
        let groups = (0..to.wrapping_sub(from)).map(move |j| self.groups.get(from.wrapping_add(j), stride));
        (window, groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
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
                for (k, v) in &groups {
                    h.push_group(*k, v.iter().copied());
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
                    h.push_group(*k, v.iter().copied());
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

    /// Window and group numbers wrap around `u32::MAX` unnoticed, also
    /// while the rings grow (window 10).
    #[test]
    fn numbers_wrap() {
        // 40 groups fit a ring of pairs; 150 turn it into chunks.
        for burst in [40, 150] {
            numbers_wrap_with(burst);
        }
    }

    fn numbers_wrap_with(burst: u32) {
        let mut h = History::new(1);
        h.reserve(3);
        (h.first, h.base, h.end) = (u32::MAX - 2, u32::MAX - 4, u32::MAX - 4);
        let groups = |j: u64| if j == 10 || j == 14 { burst } else { (j % 4) as u32 };
        for i in 0..20u64 {
            h.start_window(window(i), 3);
            for g in 0..groups(i) {
                h.push_group(key(g), [i as f64]);
            }
            let kept: Vec<_> = (i.saturating_sub(2)..=i).collect();
            assert_eq!(h.len(), kept.len());
            for &j in &kept {
                let (_, got) = h.find(j * 10).expect("kept");
                let got: Vec<_> = got.map(|(k, v)| (*k, v.to_vec())).collect();
                let want: Vec<_> = (0..groups(j)).map(|g| (key(g), vec![j as f64])).collect();
                assert_eq!(got, want, "window {j} after {i}");
            }
        }
        if burst > 64 {
            assert!(
                matches!(h.groups, Groups::Chunked(_)),
                "a burst past 64 groups makes chunks"
            );
        }
    }

    /// A one-value ring grows from lines of pairs to chunks.
    #[test]
    fn one_value_rings_turn_to_chunks_as_they_grow() {
        let mut h = History::new(1);
        h.reserve(2);
        assert!(matches!(h.groups, Groups::Pairs(_)));
        for i in 0..6u64 {
            h.start_window(window(i), 2);
            for g in 0..(i as u32 * 60) {
                h.push_group(key(g), [f64::from(g) + i as f64]);
            }
            for j in i.saturating_sub(1)..=i {
                let (_, got) = h.find(j * 10).expect("kept");
                let got: Vec<_> = got.map(|(k, v)| (*k, v.to_vec())).collect();
                let want: Vec<_> = (0..(j as u32 * 60))
                    .map(|g| (key(g), vec![f64::from(g) + j as f64]))
                    .collect();
                assert_eq!(got, want, "window {j} after {i}");
            }
        }
        assert!(matches!(h.groups, Groups::Chunked(_)));
        assert!(h.groups.capacity() >= 600);
    }

    #[test]
    fn keep_zero_still_holds_the_newest_window() {
        let mut h = History::new(1);
        h.start_window(window(0), 0);
        h.push_group(key(1), [5.0]);
        h.start_window(window(1), 0);
        h.push_group(key(2), [6.0, 7.0]);
        h.push_group(key(3), []);
        let (w, g) = h.newest().unwrap();
        assert_eq!(w.start_ns, 10);
        let g: Vec<_> = g.map(|(k, v)| (*k, v.to_vec())).collect();
        assert_eq!(g[0], (key(2), vec![6.0]));
        assert_eq!(g[1].0, key(3));
        assert!(g[1].1.len() == 1 && g[1].1[0].is_nan());
        assert_eq!(h.len(), 1);
    }
}
