//! Trident's fast path: USS mask arrays and a single-table uniflow cache.
//!
//! # What?
//!
//! Unified Space Search (Trident, Algorithms 2, 4 and 5) gives every packet,
//! from its header alone, one mask per field such that the box
//! `packet/mask` is never cut by a rule: every rule either contains the box
//! or misses it entirely. All packets of the box then classify alike, under
//! either semantics, so `<packet & mask, answer>` (a *uniflow*) can be cached
//! straight from the slow path's answer, and uniflows never conflict: one
//! hash table holds them all, and a lookup is exactly one hash probe.
//!
//! # Mask arrays
//!
//! Per field, the top `sub_bits` bits of the value (the *sub-prefix*,
//! `key::FIELDS`) index an array of prefix lengths. The paper stores, per
//! sub-prefix cell, the longest mask of any rule there. That alone is only
//! correct when the mask is at least the sub-prefix width: a shorter box
//! spills into neighbouring cells, whose rules may be longer (and a cell no
//! rule touches would get mask 0, a box over the whole field). So:
//!
//! - `L(c)` = the longest entry length among entries overlapping cell `c`
//!   (entries shorter than the sub-prefix overlap many cells; all count);
//! - the mask of `c` is the shortest `m <= sub_bits` such that every entry
//!   overlapping the aligned block `c/m` is at most `m` long, or `L(c)` when
//!   no such `m` exists (`L(c) > sub_bits`).
//!
//! Either way every entry overlapping the box has length <= the mask, so as
//! a prefix it contains the box. All cells of a block `c/m` get the same `m`
//! (a shorter answer for one would be one for all), so the mask depends on
//! the box only, and a lookup of any packet of the box forms the same key.
//! The refinement also gives a wider box than the paper's where the rules
//! allow it (a field no rule constrains gets mask 0 instead of `sub_bits`).
//!
//! Construction: a complete binary tree over the `sub_bits` levels (heap
//! order); each entry is recorded at its own node (or at its leaf cell when
//! longer than `sub_bits`); a pass down takes the max over ancestors, a pass
//! up the max over descendants, and a last pass down finds the shortest
//! sufficient level. O(entries + 2^sub_bits) per field.
//!
//! # Replacement: random
//!
//! A full cache overwrites a slot drawn from a seeded generator (as the
//! megaflow cache, so they compare like for like).
//!
//! # Invariants
//!
//! - `table` maps each slot's key to its index; slots and table agree.
//! - `space_sum` is the sum of the slots' `space_log2`.
//!
//! # Cost
//!
//! Per packet: 7 array reads and one hash lookup; on a miss, one insert.
//! Memory: ≈137 KiB of arrays whatever the rules (`key::FIELDS`), plus the
//! cache.

use rustc_hash::FxHashMap;

use crate::cache_rng::CacheRng;
use crate::key::{prefix_bits, Key, FIELDS, NFIELDS};
use crate::rule::Entry;

/// Per field, the USS mask length of every sub-prefix cell, and the masks
/// themselves by length.
pub(crate) struct MaskArrays {
    lens: [Vec<u8>; NFIELDS],
    /// `masks[f][l]` = field `f`'s prefix mask of length `l`, in place in the key.
    masks: [Vec<Key>; NFIELDS],
}

impl MaskArrays {
    pub(crate) fn new(entries: &[Entry]) -> MaskArrays {
        let lens = std::array::from_fn(|f| field_masks(entries, f));
        let masks = std::array::from_fn(|f| {
            let d = FIELDS[f];
            (0..=d.width)
                .map(|l| {
                    let mut k = Key::ZERO;
                    k.set(f, prefix_bits(d.width, l));
                    k
                })
                .collect()
        });
        MaskArrays { lens, masks }
    }

    /// The mask length of field `f`'s sub-prefix cell `cell`.
    #[inline]
    pub(crate) fn cell_len(&self, f: usize, cell: usize) -> u8 {
        self.lens[f].get(cell).copied().unwrap_or(FIELDS[f].width as u8)
    }

    /// The USS mask of packet `k` (Algorithm 4's first loop).
    #[inline]
    pub(crate) fn mask(&self, k: &Key) -> Key {
        let mut m = Key::ZERO;
        for (f, (d, (lens, masks))) in FIELDS.iter().zip(self.lens.iter().zip(&self.masks)).enumerate() {
            let cell = (k.get(f) >> (d.width - d.sub_bits)) as usize;
            let l = lens.get(cell).copied().unwrap_or(d.width as u8);
            if let Some(fm) = masks.get(usize::from(l)) {
                m = m.or(fm);
            }
        }
        m
    }
}

/// The mask length of every cell of field `f`; see the module doc.
fn field_masks(entries: &[Entry], f: usize) -> Vec<u8> {
    let d = FIELDS[f];
    let x = d.sub_bits;
    let leaves = 1usize << x;
    // Heap order: node (level l, value v) at 2^l + v; the leaves at 2^x + cell.
    let mut own = vec![0u8; 2 * leaves]; // longest entry recorded at the node
    for e in entries {
        let l = u32::from(e.lens[f]);
        let v = e.value.get(f);
        let node = if l >= x {
            leaves + (v >> (d.width - x)) as usize
        } else if l == 0 {
            1
        } else {
            (1usize << l) + (v >> (d.width - l)) as usize
        };
        own[node] = own[node].max(e.lens[f]);
    }
    // down[n]: longest entry at n or an ancestor; up[n]: at n or a descendant.
    let mut down = own.clone();
    for n in 2..2 * leaves {
        down[n] = down[n].max(down[n / 2]);
    }
    let mut up = own;
    for n in (1..leaves).rev() {
        up[n] = up[n].max(up[2 * n]).max(up[2 * n + 1]);
    }
    // eff[n]: the shortest sufficient level on the path root..n, or NONE.
    const NONE: u8 = u8::MAX;
    let mut eff = vec![NONE; 2 * leaves];
    for n in 1..2 * leaves {
        let level = usize::BITS - 1 - n.leading_zeros(); // n in [2^level, 2^(level+1))
        let inherited = if n > 1 { eff[n / 2] } else { NONE };
        eff[n] = if inherited != NONE {
            inherited
        } else if u32::from(down[n].max(up[n])) <= level {
            level as u8
        } else {
            NONE
        };
    }
    (0..leaves)
        .map(|c| {
            let n = leaves + c;
            if eff[n] != NONE {
                eff[n]
            } else {
                down[n].max(up[n]) // longer than x: the cell's longest entry
            }
        })
        .collect()
}

struct Slot {
    key: Key,
    code: u32,
    space_log2: u32,
}

/// The uniflow cache: one hash table of `<packet & USS mask, answer>`.
pub(crate) struct UniflowCache {
    arrays: MaskArrays,
    table: FxHashMap<Key, u32>,
    slots: Vec<Slot>,
    capacity: usize,
    rng: CacheRng,
    pub(crate) evictions: u64,
    pub(crate) space_sum: u64,
}

impl UniflowCache {
    pub(crate) fn new(entries: &[Entry], capacity: usize) -> Self {
        UniflowCache {
            arrays: MaskArrays::new(entries),
            table: FxHashMap::default(),
            slots: Vec::with_capacity(capacity.min(1 << 20)),
            capacity,
            rng: CacheRng::new(0x7573_7321),
            evictions: 0,
            space_sum: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The uniflow key of `k` (its cache key), computed once per packet and
    /// handed back to [`UniflowCache::insert`] on a miss.
    #[inline]
    pub(crate) fn key_of(&self, k: &Key) -> (Key, Key) {
        let m = self.arrays.mask(k);
        (k.and(&m), m)
    }

    /// Algorithm 4's table lookup: exactly one hash lookup.
    #[inline]
    pub(crate) fn lookup(&self, ukey: &Key) -> Option<u32> {
        self.table
            .get(ukey)
            .and_then(|&s| self.slots.get(s as usize))
            .map(|s| s.code)
    }

    /// Algorithm 5: cache the slow path's answer under the uniflow key.
    pub(crate) fn insert(&mut self, ukey: Key, mask: &Key, code: u32) {
        let space_log2 = ukey.space_log2(mask);
        let slot = Slot {
            key: ukey,
            code,
            space_log2,
        };
        let at = if self.slots.len() < self.capacity {
            self.slots.push(slot);
            self.slots.len() - 1
        } else {
            let victim = self.rng.below(self.slots.len());
            self.table.remove(&self.slots[victim].key);
            self.space_sum -= u64::from(self.slots[victim].space_log2);
            self.evictions += 1;
            self.slots[victim] = slot;
            victim
        };
        self.space_sum += u64::from(space_log2);
        self.table.insert(ukey, at as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{self, VLAN};
    use crate::rule::{expand, Rule};

    fn vlan_rule(lo: u16, hi: u16) -> Rule {
        Rule {
            vlan: Some((lo, hi)),
            ..Default::default()
        }
    }

    /// Brute force over a field's cells: for each cell, the mask must make
    /// every entry contain or miss the box, and no shorter sufficient mask
    /// may exist at or below the sub-prefix width.
    #[test]
    fn vlan_masks_are_sufficient_and_minimal() {
        let rules = vec![
            vlan_rule(0, 4095),
            vlan_rule(8, 15),
            vlan_rule(100, 100),
            vlan_rule(2048, 3000),
        ];
        let entries = expand(&rules).unwrap();
        let lens = field_masks(&entries, VLAN);
        let w = FIELDS[VLAN].width;
        let ok = |c: u128, m: u32| {
            let bm = prefix_bits(w, m);
            entries.iter().all(|e| {
                let em = prefix_bits(w, u32::from(e.lens[VLAN]));
                let ev = e.value.get(VLAN);
                let overlaps = (c & bm & em) == (ev & bm & em);
                !overlaps || u32::from(e.lens[VLAN]) <= m
            })
        };
        for c in 0..(1u128 << w) {
            let m = u32::from(lens[c as usize]);
            assert!(ok(c, m), "cell {c} mask {m}");
            if m > 0 {
                assert!(!ok(c, m - 1), "cell {c} mask {m} not minimal");
            }
        }
        // The untagged marker's cell (top bit 1) is untouched by any VLAN condition.
        assert_eq!(lens[key::UNTAGGED as usize], 1);
    }
}
