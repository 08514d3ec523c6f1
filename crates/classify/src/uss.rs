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
//! # The hit path
//!
//! A hit is the whole point of the cache, so it is laid out for one
//! packet at a time with nothing but loads, ANDs and one table probe (the
//! first version spent about 150 instructions a packet on the masks alone,
//! through generic 128-bit field accessors, bounds-checked vectors and a
//! mask vector per length, then hashed 48 bytes through `FxHashMap`):
//!
//! - the address arrays hold prefix lengths (`u8`, 64 KiB each), turned
//!   into two mask words by a 4 KiB table indexed by the length;
//! - the narrow fields' arrays hold their masks already shifted into
//!   place in word 2, in one 28 KiB block (family and protocol share one
//!   array), so they are ORed together;
//! - every array has exactly as many cells as its index can name, so no
//!   read needs a bounds check or a fallback;
//! - the uniflow key is five words and goes to `flat.rs`'s table, which
//!   keeps key and answer in one cache line.
//!
//! `MaskArrays::mask` gives the same mask as a [`Key`] for misses and the
//! full table (`uss_full.rs`); the tests check both against the field by
//! field form of Algorithm 4.
//!
//! # Replacement: random
//!
//! A full cache overwrites an entry drawn from a seeded generator, with the
//! same draws as the megaflow cache, so they compare like for like
//! (`flat.rs`).
//!
//! # Cost
//!
//! Per hit: six array reads (two in the 64 KiB address arrays, four in
//! 28 KiB), two reads of the length-to-mask table, three multiplies for
//! the hash, 1.17 slot reads on average; 132 instructions a packet in
//! `Classifier::classify_batch` from the flow key to the verdict on a
//! 10,000-rule `acl1` set, about 45 of them building the packed key
//! (callgrind; the first version: 373, 140 before runs of hits,
//! [`UniflowCache::hit_run`]).
//! On a miss, the key is computed again and inserted. Memory: ≈156 KiB of
//! arrays whatever the rules, plus the cache (`flat.rs`: 64 bytes a slot,
//! 4-8 slots an entry).

use crate::classifier::Verdict;
use crate::flat::{FlatCache, Words};
use crate::key::{ones, prefix_bits, Key, DST_IP, DST_PORT, FAMILY, FIELDS, PROTO, SRC_IP, SRC_PORT, VLAN};
use crate::rule::Entry;

/// Cells of an address field's array (its 16-bit sub-prefixes).
const ADDR_CELLS: usize = 1 << FIELDS[SRC_IP].sub_bits;

// The packed arrays below are sized for these sub-prefix widths; a change
// to `key::FIELDS` must revisit them.
const _: () = assert!(FIELDS[SRC_IP].sub_bits == 16 && FIELDS[DST_IP].sub_bits == 16);
const _: () = assert!(FIELDS[SRC_IP].word == 0 && FIELDS[DST_IP].word == 1);
const _: () = assert!(FIELDS[SRC_PORT].sub_bits == 9 && FIELDS[DST_PORT].sub_bits == 9);
const _: () = assert!(FIELDS[PROTO].sub_bits == 8 && FIELDS[FAMILY].sub_bits == 1);
const _: () = assert!(FIELDS[VLAN].sub_bits == 13 && FIELDS[VLAN].shift == 0);

/// The right shift that brings field `f`'s sub-prefix to the bottom of word 2.
const fn cell_shift(f: usize) -> u32 {
    FIELDS[f].shift + FIELDS[f].width - FIELDS[f].sub_bits
}

/// A 128-bit prefix mask of every length as two words (high, low), indexed
/// by a `u8` so that no lookup needs a bounds check; lengths past 128 never
/// occur and read all ones.
static ADDR_MASKS: [[u64; 2]; 256] = {
    let mut t = [[u64::MAX; 2]; 256];
    let mut l = 0;
    while l <= 128 {
        let m = prefix_bits(128, l as u32);
        t[l] = [(m >> 64) as u64, m as u64];
        l += 1;
    }
    t
};

/// The narrow fields' arrays, holding each cell's mask already in place in
/// word 2 (so a lookup ORs them, with no length-to-mask step), together in
/// one allocation of 28 KiB.
struct NarrowMasks {
    /// Family and protocol together, indexed by `family << 8 | proto`:
    /// one read for both.
    family_proto: [u64; 512],
    src_port: [u64; 512],
    dst_port: [u64; 512],
    /// The VLAN sits at shift 0 and is 13 bits wide: its mask fits a `u16`.
    vlan: [u16; 8192],
}

/// Per field, the USS mask of every sub-prefix cell.
///
/// Laid out for the per-packet lookup: the address arrays hold prefix
/// lengths (`u8`, 64 KiB each) turned into masks through [`ADDR_MASKS`];
/// the narrow fields hold their masks in place. Every array has exactly
/// as many cells as its index can name, so the lookup has no bounds
/// checks and no fallbacks. One packet touches six cells: two in the
/// address arrays, four in the 28 KiB of narrow ones.
pub(crate) struct MaskArrays {
    src: Box<[u8; ADDR_CELLS]>,
    dst: Box<[u8; ADDR_CELLS]>,
    narrow: Box<NarrowMasks>,
}

/// Copies a field's cell lengths into a fixed-size array (cells past the
/// vector's end, which `field_masks` never leaves, keep length 0).
fn fixed<T: Copy, const N: usize>(zero: T, lens: &[u8], f: impl Fn(u8) -> T) -> [T; N] {
    let mut out = [zero; N];
    for (o, &l) in out.iter_mut().zip(lens) {
        *o = f(l);
    }
    out
}

/// Field `f`'s mask of length `l`, in place in word 2.
fn narrow_mask(f: usize, l: u8) -> u64 {
    let d = FIELDS[f];
    (prefix_bits(d.width, u32::from(l)) << d.shift) as u64
}

impl MaskArrays {
    pub(crate) fn new(entries: &[Entry]) -> MaskArrays {
        let lens = |f: usize| field_masks(entries, f);
        let addr = |f: usize| -> Box<[u8; ADDR_CELLS]> {
            let mut a = Box::new([0u8; ADDR_CELLS]);
            for (o, &l) in a.iter_mut().zip(&lens(f)) {
                *o = l;
            }
            a
        };
        let narrow = |f: usize| move |l: u8| narrow_mask(f, l);
        MaskArrays {
            src: addr(SRC_IP),
            dst: addr(DST_IP),
            narrow: Box::new(NarrowMasks {
                family_proto: {
                    let (fam, proto) = (lens(FAMILY), lens(PROTO));
                    let mut t = [0u64; 512];
                    for (i, m) in t.iter_mut().enumerate() {
                        let l = |v: &[u8], c: usize| v.get(c).copied().unwrap_or(0);
                        *m = narrow_mask(FAMILY, l(&fam, i >> 8)) | narrow_mask(PROTO, l(&proto, i & 0xff));
                    }
                    t
                },
                src_port: fixed(0, &lens(SRC_PORT), narrow(SRC_PORT)),
                dst_port: fixed(0, &lens(DST_PORT), narrow(DST_PORT)),
                vlan: fixed(0, &lens(VLAN), |l| narrow_mask(VLAN, l) as u16),
            }),
        }
    }

    /// The mask length of field `f`'s sub-prefix cell `cell` (the field's
    /// width for a cell out of range).
    pub(crate) fn cell_len(&self, f: usize, cell: usize) -> u8 {
        let n = &self.narrow;
        let in_place = |m: Option<u64>| {
            // A narrow mask is a prefix of its field: its length is its
            // popcount (within the field: `family_proto` holds two).
            let d = FIELDS[f];
            m.map_or(d.width as u8, |m| {
                ((u128::from(m) >> d.shift) & ones(d.width)).count_ones() as u8
            })
        };
        match f {
            SRC_IP => self.src.get(cell).copied().unwrap_or(128),
            DST_IP => self.dst.get(cell).copied().unwrap_or(128),
            FAMILY => in_place(n.family_proto.get(cell << 8).copied()),
            PROTO => in_place(n.family_proto.get(cell).copied()),
            SRC_PORT => in_place(n.src_port.get(cell).copied()),
            DST_PORT => in_place(n.dst_port.get(cell).copied()),
            _ => in_place(n.vlan.get(cell).map(|&m| u64::from(m))),
        }
    }

    /// The USS mask of packet `k` (Algorithm 4's first loop) as the cache's
    /// five words: source address high and low, destination high and low,
    /// word 2. Seven array reads, two of them through [`ADDR_MASKS`].
    #[inline]
    pub(crate) fn mask_words(&self, k: &Key) -> Words {
        let [a, b, w2] = k.w;
        let w2 = w2 as u64; // bits above 56 are zero (key.rs invariant)
        let ma = ADDR_MASKS[usize::from(self.src[(a >> 112) as usize])];
        let mb = ADDR_MASKS[usize::from(self.dst[(b >> 112) as usize])];
        let n = &*self.narrow;
        let fp =
            ((w2 >> (cell_shift(FAMILY) - 8)) as usize & 0x100) | ((w2 >> cell_shift(PROTO)) as usize & 0xff);
        let m2 = n.family_proto[fp]
            | n.src_port[(w2 >> cell_shift(SRC_PORT)) as usize & 0x1ff]
            | n.dst_port[(w2 >> cell_shift(DST_PORT)) as usize & 0x1ff]
            | u64::from(n.vlan[w2 as usize & 0x1fff]);
        [ma[0], ma[1], mb[0], mb[1], m2]
    }

    /// The uniflow key of `k`: the packet under its USS mask, as five words.
    #[inline]
    pub(crate) fn ukey(&self, k: &Key) -> Words {
        let m = self.mask_words(k);
        let w = words(k);
        [w[0] & m[0], w[1] & m[1], w[2] & m[2], w[3] & m[3], w[4] & m[4]]
    }

    /// The USS mask of packet `k` as a [`Key`] (misses and the full table).
    pub(crate) fn mask(&self, k: &Key) -> Key {
        let m = self.mask_words(k);
        Key {
            w: [
                (u128::from(m[0]) << 64) | u128::from(m[1]),
                (u128::from(m[2]) << 64) | u128::from(m[3]),
                u128::from(m[4]),
            ],
        }
    }
}

/// A key as the cache's five words (word 2's upper half is always zero).
#[inline]
fn words(k: &Key) -> Words {
    let [a, b, w2] = k.w;
    [(a >> 64) as u64, a as u64, (b >> 64) as u64, b as u64, w2 as u64]
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

/// The uniflow cache: one table of `<packet & USS mask, answer>`.
pub(crate) struct UniflowCache {
    arrays: MaskArrays,
    table: FlatCache,
}

impl UniflowCache {
    pub(crate) fn new(entries: &[Entry], capacity: usize) -> Self {
        UniflowCache {
            arrays: MaskArrays::new(entries),
            table: FlatCache::new(capacity, 0x7573_7321),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    pub(crate) fn evictions(&self) -> u64 {
        self.table.evictions
    }

    pub(crate) fn space_sum(&self) -> u64 {
        self.table.space_sum
    }

    /// Algorithm 4: the mask arrays, then exactly one hash lookup.
    #[inline]
    pub(crate) fn lookup(&self, k: &Key) -> Option<Verdict> {
        let ukey = self.arrays.ukey(k);
        self.table.get(&ukey, self.table.hash(&ukey))
    }

    /// Looks up `keys` from the front while they hit, each answer written to
    /// `out`; returns how many hit before the first miss (or the end).
    ///
    /// Over `&self` with no call inside, the loop keeps the table's and
    /// arrays' pointers and the hash seeds in registers across packets;
    /// in the batch loop, where a miss may change the cache, they were
    /// reloaded for every packet.
    #[inline]
    pub(crate) fn hit_run(&self, keys: &[clarion_wire::FlowKey], out: &mut [Verdict]) -> usize {
        let mut n = 0;
        for (f, o) in keys.iter().zip(out.iter_mut()) {
            match self.lookup(&Key::from_flow(f)) {
                Some(v) => *o = v,
                None => break,
            }
            n += 1;
        }
        n
    }

    /// Algorithm 5: cache the slow path's answer for packet `k` (which
    /// just missed). The key and its hash are computed again: a miss costs
    /// the slow path's many lookups anyway, and the hit path stays free of
    /// anything kept for misses.
    pub(crate) fn insert(&mut self, k: &Key, answer: Verdict) {
        let mask = self.arrays.mask(k);
        let ukey = self.arrays.ukey(k);
        let space_log2 = k.and(&mask).space_log2(&mask);
        self.table
            .insert(ukey, self.table.hash(&ukey), answer, space_log2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache_rng::CacheRng;
    use crate::gen::{self, Kind};
    use crate::key::{self, NFIELDS, VLAN};
    use crate::rule::{expand, Rule};

    /// The packed arrays hold what `field_masks` computed, and the
    /// per-packet mask (five words, no per-field loop) is Algorithm 4's
    /// field-by-field mask, on generated traces and on random keys of
    /// both families with VLANs and without ports.
    #[test]
    fn packed_arrays_equal_field_masks() {
        for kind in [Kind::Acl, Kind::Fw] {
            let rules = gen::rules(kind, 500, 4);
            let entries = expand(&rules).unwrap();
            let a = MaskArrays::new(&entries);
            for f in 0..NFIELDS {
                for (c, &l) in field_masks(&entries, f).iter().enumerate() {
                    assert_eq!(a.cell_len(f, c), l, "field {f} cell {c}");
                }
            }
            let mut rng = CacheRng::new(7);
            let random = (0..5000).map(|_| {
                let mut k = Key::ZERO;
                for (f, d) in FIELDS.iter().enumerate() {
                    let v = (u128::from(rng.u64()) << 64) | u128::from(rng.u64());
                    k.set(f, v >> (128 - d.width));
                }
                k
            });
            let traced = gen::trace(&rules, 5000, None, 4)
                .into_iter()
                .map(|k| Key::from_flow(&k));
            for k in traced.chain(random) {
                let mut want = Key::ZERO;
                for (f, d) in FIELDS.iter().enumerate() {
                    let cell = (k.get(f) >> (d.width - d.sub_bits)) as usize;
                    want.set(f, prefix_bits(d.width, u32::from(a.cell_len(f, cell))));
                }
                assert_eq!(a.mask(&k), want, "{k:?}");
                assert_eq!(a.ukey(&k), words(&k.and(&want)), "{k:?}");
            }
        }
    }

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
