//! Trident's fast path: USS mask arrays and a single-table uniflow cache.
//!
//! # What?
//!
//! Unified Space Search (Trident, Algorithms 2, 4 and 5) gives every packet,
//! from its header alone, one mask per field such that the box
//! `packet/mask` is never cut by a rule: every rule either contains the box
//! or misses it entirely. All packets of the box then classify alike, under
//! either semantics, so `<packet & mask, answer>` (a *uniflow*) can be cached
//! straight from the slow path's answer, and one hash table holds them all:
//! a lookup is exactly one hash probe. The cache's boxes go further than
//! the paper's (below, "Priority-aware boxes"): they need only not be cut
//! by the rules that can decide them.
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
//! # Priority-aware boxes (beyond the paper)
//!
//! A box no rule cuts is bounded by *every* rule in its cells, although a
//! rule ranked below one that contains the whole box can never decide a
//! packet of it. On firewall sets that is most of them: `fw1` puts rules
//! such as "TCP, any address, any port" near the top, and the paper's
//! boxes, cut by the thousands of rules below, stay small where megaflows
//! (whose slow path stops at the first match) grow wide. So the cache's
//! arrays come in *groups*, one per protocol the rules name (up to
//! `MAX_GROUPS - 1`, the most named first) plus a default group for all
//! other protocols; the packet's protocol picks the group. Group `G`'s
//! arrays are built, by the construction above, from the entries `P_G`:
//!
//! - `R_G`: for a protocol `p`, the entries whose protocol is `p` or any
//!   (the group's arrays give the protocol mask all 8 bits, so its boxes
//!   hold protocol `p` only); for the default group, all entries;
//! - a *catch-all* of `G`: an entry of `R_G` with every field wildcard but
//!   the protocol (default group: every field): it contains every box of
//!   `G`. Under first match, `t` = the highest rank of a catch-all, and
//!   `P_G` = the entries of `R_G` ranked `>= t`; with no catch-all, or
//!   under all-matches semantics, `P_G = R_G`.
//!
//! *Claim.* For a packet `x` of group `G` and its box `B` (from `G`'s
//! arrays), every header of `B` has the same answer as `x`.
//!
//! *Proof.* (1) By the construction, every entry of `P_G` contains `B` or
//! misses it. (2) An entry outside `R_G` names another protocol than `p`,
//! and `B` holds `p` only: it misses `B`. (3) With a catch-all `c` in
//! `P_G`: `c` contains `B`, so let `w` be the highest-ranked entry of `P_G`
//! containing `B`; `rank(w) >= rank(c) = t`. An entry `e` ranked above `w`
//! is either in `P_G`, where it does not contain `B` (`w` is the highest),
//! so by (1) misses `B`; or outside `R_G`, and misses `B` by (2); or in
//! `R_G` ranked below `t <= rank(w)`, a contradiction. So every header of
//! `B` matches `w` and no entry ranked above it: its first match is `w`'s
//! rule. (4) Otherwise `P_G = R_G`, and by (1) and (2) every entry
//! contains or misses `B`: the set of matching rules is constant over `B`,
//! which fixes both semantics' answers. ∎
//!
//! *One table for all groups.* A uniflow's key is its box's lowest
//! corner. Two boxes with the same key both contain that corner, so by the
//! claim both answers are the corner's: a hit is right even on an entry a
//! packet of another group inserted. Within a protocol's group all packets
//! of a box have its protocol and form the same key; a truncated default
//! group may give a box over a grouped protocol, whose packets then form
//! their own keys (a duplicate, never a wrong answer).
//!
//! Cost: the address cells' reads wait for the family-and-protocol one,
//! which gives the group's index too; no more instructions a hit (132-133
//! on `acl_10000` and `fw_10000`, callgrind, before and after). Memory:
//! 156 KiB of arrays a group, all 8 allocated (1.2 MiB), so that the hit
//! path indexes them with a mask: a bounds check with a fallback there
//! cost 20 instructions a hit. `acl1` and `fw1` name 3 and 4 protocols. `UssTable` (the full table, `uss_full.rs`)
//! keeps Trident's one group of every entry: it cuts every rule into the
//! boxes, so a box must not be cut by any.
//!
//! # The hit path
//!
//! A hit is the whole point of the cache, so it is laid out for one
//! packet at a time with nothing but loads, ANDs and one table probe (the
//! first version spent about 150 instructions a packet on the masks alone,
//! through generic 128-bit field accessors, bounds-checked vectors and a
//! mask vector per length, then hashed 48 bytes through `FxHashMap`):
//!
//! - the family-and-protocol read also names the group, whose arrays are
//!   one block (an offset, no pointer to follow);
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
//! Per hit: six array reads (family and protocol with the group, two in
//! the group's 64 KiB address arrays, three in its 28 KiB), two reads of the
//! length-to-mask table, three multiplies for the hash, 1.17 slot reads on average; 132 instructions a packet in
//! `Classifier::classify_batch` from the flow key to the verdict on a
//! 10,000-rule `acl1` set, about 45 of them building the packed key
//! (callgrind; the first version: 373, 140 before runs of hits,
//! [`UniflowCache::hit_run`]).
//! On a miss, the key is computed again and inserted. Memory: 1.2 MiB of
//! arrays (8 groups of 156 KiB), plus the cache (`flat.rs`: 64
//! bytes a slot, 4-8 slots an entry).

use crate::classifier::Verdict;
use crate::flat::{FlatCache, Words};
use crate::key::{
    ones, prefix_bits, Key, DST_IP, DST_PORT, FAMILY, FIELDS, NFIELDS, PROTO, SRC_IP, SRC_PORT, VLAN,
};
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
/// one block of 28 KiB.
struct NarrowMasks {
    /// Family and protocol together, indexed by `family << 8 | proto`:
    /// one read for both.
    family_proto: [u64; 512],
    src_port: [u64; 512],
    dst_port: [u64; 512],
    /// The VLAN sits at shift 0 and is 13 bits wide: its mask fits a `u16`.
    vlan: [u16; 8192],
}

/// One group's arrays: what a packet of the group reads, 156 KiB in one
/// block (so a group costs the hit path one offset, not a pointer).
struct Arrays {
    src: [u8; ADDR_CELLS],
    dst: [u8; ADDR_CELLS],
    narrow: NarrowMasks,
}

/// At most this many groups of arrays (the default group and up to 7
/// protocols), so that the arrays stay within about 1.2 MiB whatever the
/// rules; ClassBench's seeds name 3 (`acl1`) and 4 (`fw1`) protocols.
const MAX_GROUPS: usize = 8;

/// Where `MaskArrays::family_proto` keeps the group's index: above every
/// field of word 2.
const GROUP_SHIFT: u32 = 56;
const _: () = assert!(W2_FIELDS >> GROUP_SHIFT == 0);

/// Every bit of word 2 that belongs to a field: a mask of all of them
/// fixes every field.
const W2_FIELDS: u64 = {
    let mut m = 0u64;
    let mut f = 0;
    while f < FIELDS.len() {
        if FIELDS[f].word == 2 {
            m |= (ones(FIELDS[f].width) << FIELDS[f].shift) as u64;
        }
        f += 1;
    }
    m
};

/// Per protocol group, the USS mask of every sub-prefix cell.
///
/// Laid out for the per-packet lookup: the family-and-protocol cell gives
/// the group too; in it, the address arrays hold prefix lengths (`u8`,
/// 64 KiB each) turned into masks through [`ADDR_MASKS`], the narrow
/// fields hold their masks in place. Every array has exactly as many
/// cells as its index can name, so the cell reads have no bounds checks
/// and no fallbacks (the group's index is masked). One packet touches six
/// cells: family and protocol, two in the address arrays, three in the
/// group's narrow ones.
pub(crate) struct MaskArrays {
    /// Indexed by `family << 8 | proto`: the family and protocol masks of
    /// the protocol's group in place in word 2, with the group's index
    /// above the fields (from `GROUP_SHIFT`), so that the hit path's first
    /// read gives both (word 2 of a key is zero there, so the bits vanish
    /// from the uniflow key). Invariant: the index names a group in use.
    family_proto: [u64; 512],
    /// Group 0 serves every protocol without a group of its own.
    groups: Box<[Arrays; MAX_GROUPS]>,
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

impl Arrays {
    /// The arrays of `entries`; with `proto_exact`, every cell's protocol
    /// mask fixes the whole protocol (the group's packets all have one).
    fn new(entries: &[Entry], proto_exact: bool) -> Arrays {
        let lens = |f: usize| field_masks(entries, f);
        let (fam, proto) = (lens(FAMILY), lens(PROTO));
        let mut family_proto = [0u64; 512];
        for (i, m) in family_proto.iter_mut().enumerate() {
            let l = |v: &[u8], c: usize| v.get(c).copied().unwrap_or(0);
            let p = if proto_exact { 8 } else { l(&proto, i & 0xff) };
            *m = narrow_mask(FAMILY, l(&fam, i >> 8)) | narrow_mask(PROTO, p);
        }
        let narrow = |f: usize| move |l: u8| narrow_mask(f, l);
        Arrays {
            src: fixed(0, &lens(SRC_IP), |l| l),
            dst: fixed(0, &lens(DST_IP), |l| l),
            narrow: NarrowMasks {
                family_proto,
                src_port: fixed(0, &lens(SRC_PORT), narrow(SRC_PORT)),
                dst_port: fixed(0, &lens(DST_PORT), narrow(DST_PORT)),
                vlan: fixed(0, &lens(VLAN), |l| narrow_mask(VLAN, l) as u16),
            },
        }
    }

    /// The mask length of field `f`'s cell `cell` (the field's width for a
    /// cell out of range).
    fn cell_len(&self, f: usize, cell: usize) -> u8 {
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
}

/// The protocols given a group of their own: those an entry names, the
/// most named first (ties: the lower number), at most `MAX_GROUPS - 1`.
fn grouped_protocols(entries: &[Entry]) -> Vec<u8> {
    let mut count = [0usize; 256];
    for e in entries.iter().filter(|e| e.lens[PROTO] == 8) {
        if let Some(c) = count.get_mut(e.value.get(PROTO) as usize) {
            *c += 1;
        }
    }
    let mut named: Vec<u8> = (0..=255u8).filter(|&p| count[usize::from(p)] > 0).collect();
    named.sort_by_key(|&p| std::cmp::Reverse(count[usize::from(p)]));
    named.truncate(MAX_GROUPS - 1);
    named
}

/// The entries a group's arrays are built from (see "Priority-aware
/// boxes" in the module doc): those whose protocol condition holds for
/// the group's protocol (`None`: every entry, the default group), and,
/// under first match, only those ranked at or above the group's best
/// catch-all (an entry no box of the group can escape).
fn group_members(entries: &[Entry], proto: Option<u8>, first_match: bool) -> Vec<Entry> {
    let holds = |e: &&Entry| match proto {
        None => true,
        Some(p) => e.lens[PROTO] == 0 || e.value.get(PROTO) == u128::from(p),
    };
    // A group's boxes fix the protocol when it has one, so only the other
    // fields must be wildcards for an entry to contain them all.
    let catch_all = |e: &&Entry| (0..NFIELDS).all(|f| e.lens[f] == 0 || (f == PROTO && proto.is_some()));
    let floor = if first_match {
        entries
            .iter()
            .filter(holds)
            .filter(catch_all)
            .map(|e| e.rank)
            .max()
    } else {
        None
    };
    entries
        .iter()
        .filter(holds)
        .filter(|e| floor.is_none_or(|t| e.rank >= t))
        .copied()
        .collect()
}

/// `groups` padded to `MAX_GROUPS` with unused arrays, so that the hit
/// path indexes them with a mask instead of a bounds check.
fn all_groups(mut groups: Vec<Arrays>) -> Box<[Arrays; MAX_GROUPS]> {
    groups.truncate(MAX_GROUPS);
    while groups.len() < MAX_GROUPS {
        groups.push(Arrays::new(&[], false));
    }
    match groups.into_boxed_slice().try_into() {
        Ok(g) => g,
        Err(_) => unreachable!("exactly MAX_GROUPS groups"),
    }
}

impl MaskArrays {
    /// Trident's arrays: one group, every entry (the full table,
    /// `uss_full.rs`, enumerates boxes field by field from them).
    pub(crate) fn new(entries: &[Entry]) -> MaskArrays {
        let a = Arrays::new(entries, false);
        MaskArrays {
            family_proto: a.narrow.family_proto,
            groups: all_groups(vec![a]),
        }
    }

    /// The uniflow cache's arrays: a group per protocol the rules name
    /// (up to `MAX_GROUPS - 1`), each built from the rules that can hold
    /// for its packets, and under `first_match` only from those not
    /// shadowed by a catch-all (module doc, "Priority-aware boxes").
    pub(crate) fn grouped(entries: &[Entry], first_match: bool) -> MaskArrays {
        let protos = grouped_protocols(entries);
        let mut group_of = [0u8; 256];
        let mut groups = Vec::with_capacity(protos.len() + 1);
        groups.push(Arrays::new(&group_members(entries, None, first_match), false));
        for (g, &p) in protos.iter().enumerate() {
            // g + 1 <= MAX_GROUPS - 1 fits a u8.
            group_of[usize::from(p)] = (g + 1) as u8;
            groups.push(Arrays::new(&group_members(entries, Some(p), first_match), true));
        }
        let mut family_proto = [0u64; 512];
        for (i, m) in family_proto.iter_mut().enumerate() {
            let g = group_of[i & 0xff];
            let own = groups.get(usize::from(g)).map_or(0, |a| a.narrow.family_proto[i]);
            *m = own | u64::from(g) << GROUP_SHIFT;
        }
        MaskArrays {
            family_proto,
            groups: all_groups(groups),
        }
    }

    /// The mask length of field `f`'s sub-prefix cell `cell` in the
    /// default group (the field's width for a cell out of range).
    pub(crate) fn cell_len(&self, f: usize, cell: usize) -> u8 {
        self.group_cell_len(0, f, cell)
    }

    /// As [`MaskArrays::cell_len`], in group `g` (a group out of range
    /// reads as all cells out of range).
    pub(crate) fn group_cell_len(&self, g: usize, f: usize, cell: usize) -> u8 {
        match self.groups.get(g) {
            Some(a) => a.cell_len(f, cell),
            None => FIELDS[f].width as u8,
        }
    }

    /// The group of protocol `proto`.
    #[cfg(test)]
    fn group_of(&self, proto: u8) -> usize {
        (self.family_proto[usize::from(proto)] >> GROUP_SHIFT) as usize
    }

    /// The USS mask of packet `k` (Algorithm 4's first loop) as the cache's
    /// five words: source address high and low, destination high and low,
    /// word 2. Seven array reads: family and protocol with the group, then
    /// five cells of the group, two of them through [`ADDR_MASKS`].
    #[inline]
    pub(crate) fn mask_words(&self, k: &Key) -> Words {
        let [a, b, w2] = k.w;
        let w2 = w2 as u64; // bits above 56 are zero (key.rs invariant)
        let fp =
            ((w2 >> (cell_shift(FAMILY) - 8)) as usize & 0x100) | ((w2 >> cell_shift(PROTO)) as usize & 0xff);
        let fpm = self.family_proto[fp];
        // Masked: no bounds check (the index is < the groups in use anyway).
        let g = &self.groups[(fpm >> GROUP_SHIFT) as usize & (MAX_GROUPS - 1)];
        let ma = ADDR_MASKS[usize::from(g.src[(a >> 112) as usize])];
        let mb = ADDR_MASKS[usize::from(g.dst[(b >> 112) as usize])];
        let n = &g.narrow;
        // The group's index rides along above the fields: `ukey` ANDs it
        // with the key's zeros there, `mask` clears it.
        let m2 = fpm
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
        let mut m = self.mask_words(k);
        m[4] &= W2_FIELDS;
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
    /// The cache of at most `capacity` uniflows; under `first_match` the
    /// boxes ignore rules shadowed by a catch-all (module doc).
    pub(crate) fn new(entries: &[Entry], capacity: usize, first_match: bool) -> Self {
        UniflowCache {
            arrays: MaskArrays::grouped(entries, first_match),
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

    /// The grouped arrays hold, group by group, `field_masks` of the
    /// group's members (but the protocol, which a protocol's group fixes),
    /// and the per-packet mask reads the packet's group.
    #[test]
    fn grouped_arrays_equal_members_field_masks() {
        for kind in [Kind::Acl, Kind::Fw] {
            let rules = gen::rules(kind, 300, 5);
            let entries = expand(&rules).unwrap();
            let a = MaskArrays::grouped(&entries, true);
            let protos = grouped_protocols(&entries);
            assert!(!protos.is_empty(), "{kind:?}: the seeds name protocols");
            let groups = std::iter::once(None).chain(protos.iter().map(|&p| Some(p)));
            for (g, p) in groups.enumerate() {
                if let Some(p) = p {
                    assert_eq!(a.group_of(p), g);
                }
                let members = group_members(&entries, p, true);
                for f in (0..NFIELDS).filter(|&f| f != PROTO || p.is_none()) {
                    for (c, &l) in field_masks(&members, f).iter().enumerate() {
                        assert_eq!(
                            a.group_cell_len(g, f, c),
                            l,
                            "{kind:?} group {g} field {f} cell {c}"
                        );
                    }
                }
            }
            for k in gen::trace(&rules, 3000, None, 6).iter().map(Key::from_flow) {
                let g = a.group_of(k.get(PROTO) as u8);
                let mut want = Key::ZERO;
                for (f, d) in FIELDS.iter().enumerate() {
                    let cell = (k.get(f) >> (d.width - d.sub_bits)) as usize;
                    want.set(f, prefix_bits(d.width, u32::from(a.group_cell_len(g, f, cell))));
                }
                assert_eq!(a.mask(&k), want, "{k:?}");
            }
        }
    }

    /// On `fw1`'s sets the catch-alls ("TCP, any address, any port") sit
    /// near the top: a protocol's group keeps only the few rules above
    /// its first one.
    #[test]
    fn catch_alls_truncate_the_firewall_groups() {
        let rules = gen::rules(Kind::Fw, 1000, 1);
        let entries = expand(&rules).unwrap();
        let tcp = group_members(&entries, Some(6), true);
        let all_tcp = group_members(&entries, Some(6), false);
        assert!(
            tcp.len() * 10 < all_tcp.len(),
            "{} of {}",
            tcp.len(),
            all_tcp.len()
        );
        // Under all-matches every rule of the protocol stays.
        assert!(all_tcp
            .iter()
            .all(|e| e.lens[PROTO] == 0 || e.value.get(PROTO) == 6));
    }

    /// The packet a key stands for, if a packet can have that key (IPv4
    /// addresses' low 96 bits zero, both ports present or both absent, the
    /// VLAN a 12-bit id or untagged).
    fn realize(k: &Key) -> Option<clarion_wire::FlowKey> {
        use clarion_wire::FlowKey;
        let v6 = k.get(key::FAMILY) == 1;
        let (sp, dp, vlan) = (k.get(SRC_PORT), k.get(DST_PORT), k.get(VLAN));
        let mut f = FlowKey {
            proto: k.get(PROTO) as u8,
            src_ip: k.get(SRC_IP).to_be_bytes(),
            dst_ip: k.get(DST_IP).to_be_bytes(),
            ..FlowKey::default()
        };
        if v6 {
            f.flags |= FlowKey::IPV6;
        }
        if sp < key::NO_PORTS && dp < key::NO_PORTS {
            f.flags |= FlowKey::HAS_PORTS;
            (f.src_port, f.dst_port) = (sp as u16, dp as u16);
        }
        if vlan < key::UNTAGGED {
            f.flags |= FlowKey::HAS_VLAN;
            f.vlan = vlan as u16;
        }
        (Key::from_flow(&f) == *k).then_some(f)
    }

    mod boxes {
        use super::*;
        use crate::reference;
        use crate::rule::{Family, IpPrefix};
        use clarion_wire::FlowKey;
        use proptest::prelude::*;
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

        fn addr(v6: bool, x: u32) -> IpAddr {
            if v6 {
                IpAddr::V6(Ipv6Addr::from(u128::from(x) << 96 | u128::from(x & 3)))
            } else {
                IpAddr::V4(Ipv4Addr::from(x))
            }
        }

        /// Addresses in a few /16s (so cells hold several rules) or anywhere.
        fn raw_addr() -> impl Strategy<Value = u32> {
            prop_oneof![3 => (0u32..4, any::<u16>()).prop_map(|(h, l)| 0x0a00_0000 | h << 16 | u32::from(l & 0xf0f)), 1 => any::<u32>()]
        }

        fn prefix(v6: bool) -> impl Strategy<Value = Option<IpPrefix>> {
            let lens = prop::sample::select(vec![0u8, 8, 14, 16, 20, 24, 32]);
            prop::option::weighted(0.6, (raw_addr(), lens)).prop_map(move |o| {
                o.map(|(x, len)| IpPrefix {
                    addr: addr(v6, x),
                    len: if v6 { len * 2 } else { len },
                })
            })
        }

        fn range(max: u16) -> impl Strategy<Value = Option<(u16, u16)>> {
            prop::option::weighted(0.5, (0..=max, 0..=max)).prop_map(|o| o.map(|(a, b)| (a.min(b), a.max(b))))
        }

        fn proto() -> impl Strategy<Value = Option<u8>> {
            prop::option::weighted(0.7, prop::sample::select(vec![1u8, 6, 17]))
        }

        prop_compose! {
            fn narrow_rule()(v6 in prop::bool::weighted(0.2))(
                v6 in Just(v6), src_ip in prefix(v6), dst_ip in prefix(v6),
                src_port in range(600), dst_port in prop_oneof![range(600), Just(Some((1024, 65535)))],
                proto in proto(), vlan in range(5), priority in 0u32..4, action in 0u32..8,
            ) -> Rule {
                let family = (src_ip.is_some() || dst_ip.is_some())
                    .then_some(if v6 { Family::V6 } else { Family::V4 });
                Rule { family, src_ip, dst_ip, src_port, dst_port, proto, vlan, priority, action }
            }
        }

        /// Catch-alls of a protocol (or of everything), at any priority.
        fn catch_all() -> impl Strategy<Value = Rule> {
            (proto(), 0u32..4, 0u32..8).prop_map(|(proto, priority, action)| Rule {
                proto,
                priority,
                action,
                ..Rule::default()
            })
        }

        prop_compose! {
            fn packet()(
                v6 in prop::bool::weighted(0.2), s in raw_addr(), d in raw_addr(),
                has_ports in prop::bool::weighted(0.8), sp in 0u16..700, dp in prop_oneof![0u16..700, any::<u16>()],
                proto in prop::sample::select(vec![1u8, 6, 17, 47]),
                has_vlan in prop::bool::weighted(0.3), vlan in 0u16..7,
            ) -> FlowKey {
                let mut k = FlowKey { proto, ..FlowKey::default() };
                let put = |a: IpAddr, out: &mut [u8; 16]| match a {
                    IpAddr::V4(a) => out[..4].copy_from_slice(&a.octets()),
                    IpAddr::V6(a) => *out = a.octets(),
                };
                put(addr(v6, s), &mut k.src_ip);
                put(addr(v6, d), &mut k.dst_ip);
                if v6 { k.flags |= FlowKey::IPV6; }
                if has_ports { k.flags |= FlowKey::HAS_PORTS; (k.src_port, k.dst_port) = (sp, dp); }
                if has_vlan { k.flags |= FlowKey::HAS_VLAN; k.vlan = vlan; }
                k
            }
        }

        /// Checks, for every packet `x` and every header `y` of `x`'s box
        /// among `samples` projected into it (the box's bits from `x`, the
        /// free bits from `y`), that the reference answers `y` as `x`;
        /// returns how many headers were checked.
        fn check(
            rules: &[Rule],
            first_match: bool,
            packets: &[FlowKey],
            samples: &[FlowKey],
        ) -> Result<usize, TestCaseError> {
            let entries = expand(rules).expect("valid rules");
            let a = MaskArrays::grouped(&entries, first_match);
            let answer = |k: &FlowKey| {
                if first_match {
                    reference::first_match(rules, k).into_iter().collect()
                } else {
                    reference::all_matches(rules, k)
                }
            };
            let mut checked = 0;
            for x in packets {
                let kx = Key::from_flow(x);
                let m = a.mask(&kx);
                let corner = kx.and(&m);
                let want = answer(x);
                let free = Key {
                    w: [!m.w[0], !m.w[1], !m.w[2]],
                };
                for y in samples.iter().chain(packets) {
                    let ky = corner.or(&Key::from_flow(y).and(&free));
                    let Some(fy) = realize(&ky) else { continue };
                    checked += 1;
                    prop_assert_eq!(
                        answer(&fy),
                        want.clone(),
                        "box {:?}/{:?} of {:?} holds {:?}",
                        corner,
                        m.lens(),
                        x,
                        fy
                    );
                }
            }
            Ok(checked)
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

            /// Every header in a priority-aware box (first match) or a
            /// protocol group's box (all matches) is answered by the linear
            /// reference as the packet that gave the box.
            #[test]
            fn every_header_of_a_box_classifies_alike(
                rules in prop::collection::vec(prop_oneof![5 => narrow_rule(), 1 => catch_all()], 1..20),
                packets in prop::collection::vec(packet(), 1..24),
                samples in prop::collection::vec(packet(), 1..48),
            ) {
                let mut checked = 0;
                for first_match in [true, false] {
                    checked += check(&rules, first_match, &packets, &samples)?;
                }
                // Each packet projects onto its own box.
                prop_assert!(checked >= 2 * packets.len());
            }
        }
    }
}
