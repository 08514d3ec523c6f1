//! Open vSwitch's fast path: a bounded cache of megaflows searched as a
//! tuple space.
//!
//! # Design (OVS `lib/dpif-netdev.c`, `dpcls`)
//!
//! A slow-path lookup returns its answer and `wc`, the bits it depended on
//! (see `tss.rs`). The megaflow `<packet & wc, answer>` then covers every
//! packet agreeing on those bits. Megaflows with the same mask share one
//! hash table (a *subtable*); a fast-path lookup probes the subtables in
//! turn until one hits, counting one hash lookup per probe. Two megaflows
//! may overlap, but both answer for the overlap with the slow path's
//! answer, so any hit is correct.
//!
//! Subtables are re-sorted by hits every [`RESORT_EVERY`] lookups, as
//! `dpcls_sort_subtable_vector` does once a second, so the busiest masks
//! are probed first.
//!
//! **Replacement: random.** A full cache overwrites a slot drawn from a
//! seeded generator (OVS revalidators evict idle flows instead; random
//! replacement needs no per-hit bookkeeping and is what USS's cache uses
//! too, so the two compare like for like).
//!
//! # Invariants
//!
//! - Every slot is in exactly one subtable, the one of its mask, under its
//!   masked key; `index` maps each subtable's mask to its position.
//! - No subtable is empty.
//! - `space_sum` is the sum of the slots' `space_log2`.
//!
//! # Cost
//!
//! A hit costs the probes up to its subtable; a miss probes every subtable.
//! Memory: `capacity` slots plus their hash entries.

use rustc_hash::FxHashMap;

use crate::cache_rng::CacheRng;
use crate::key::Key;

/// Lookups between two re-sorts of the subtables by hits.
pub const RESORT_EVERY: u64 = 1 << 14;

struct Subtable {
    mask: Key,
    table: FxHashMap<Key, u32>,
    hits: u64,
}

struct Slot {
    key: Key,
    mask: Key,
    code: u32,
    space_log2: u32,
}

pub(crate) struct MegaflowCache {
    subtables: Vec<Subtable>,
    index: FxHashMap<Key, usize>,
    slots: Vec<Slot>,
    capacity: usize,
    rng: CacheRng,
    since_sort: u64,
    pub(crate) evictions: u64,
    pub(crate) space_sum: u64,
}

impl MegaflowCache {
    pub(crate) fn new(capacity: usize) -> Self {
        MegaflowCache {
            subtables: Vec::new(),
            index: FxHashMap::default(),
            slots: Vec::with_capacity(capacity.min(1 << 20)),
            capacity,
            rng: CacheRng::new(0x6d65_6761),
            since_sort: 0,
            evictions: 0,
            space_sum: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn subtable_count(&self) -> usize {
        self.subtables.len()
    }

    /// The cached answer for `k`, counting one hash lookup per subtable probed.
    pub(crate) fn lookup(&mut self, k: &Key, lookups: &mut u64) -> Option<u32> {
        self.since_sort += 1;
        if self.since_sort >= RESORT_EVERY {
            self.resort();
        }
        for st in &mut self.subtables {
            *lookups += 1;
            if let Some(&slot) = st.table.get(&k.and(&st.mask)) {
                st.hits += 1;
                return self.slots.get(slot as usize).map(|s| s.code);
            }
        }
        None
    }

    fn resort(&mut self) {
        self.since_sort = 0;
        self.subtables.sort_by_key(|s| std::cmp::Reverse(s.hits));
        for (i, st) in self.subtables.iter_mut().enumerate() {
            st.hits /= 2; // decay, so the order follows the recent traffic
            self.index.insert(st.mask, i);
        }
    }

    /// Caches `<k & mask, code>`, replacing a random slot when full.
    pub(crate) fn insert(&mut self, k: &Key, mask: Key, code: u32) {
        let key = k.and(&mask);
        let space_log2 = key.space_log2(&mask);
        let slot = Slot {
            key,
            mask,
            code,
            space_log2,
        };
        let at = if self.slots.len() < self.capacity {
            self.slots.push(slot);
            self.slots.len() - 1
        } else {
            let victim = self.rng.below(self.slots.len());
            self.remove_from_subtable(victim);
            self.evictions += 1;
            self.space_sum -= u64::from(self.slots[victim].space_log2);
            self.slots[victim] = slot;
            victim
        };
        self.space_sum += u64::from(space_log2);
        let st = match self.index.get(&mask) {
            Some(&i) => i,
            None => {
                self.subtables.push(Subtable {
                    mask,
                    table: FxHashMap::default(),
                    hits: 0,
                });
                self.index.insert(mask, self.subtables.len() - 1);
                self.subtables.len() - 1
            }
        };
        // A miss means no subtable held this key, so this never replaces a
        // live slot; were it to, the old slot would stay counted but
        // unreachable, which only wastes room.
        self.subtables[st].table.insert(key, at as u32);
    }

    fn remove_from_subtable(&mut self, victim: usize) {
        let (key, mask) = (self.slots[victim].key, self.slots[victim].mask);
        let Some(&i) = self.index.get(&mask) else { return };
        self.subtables[i].table.remove(&key);
        if self.subtables[i].table.is_empty() {
            self.index.remove(&mask);
            self.subtables.swap_remove(i);
            if let Some(moved) = self.subtables.get(i) {
                self.index.insert(moved.mask, i);
            }
        }
    }
}
