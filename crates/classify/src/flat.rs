//! The uniflow cache's table: flat, open-addressed, the key and the answer
//! inline, bounded, with random replacement.
//!
//! # Why not a `HashMap`
//!
//! A USS hit is one exact-match lookup, so the table *is* the fast path.
//! The first version used an `FxHashMap<Key, slot index>` beside a slot
//! vector: a hit hashed 48 bytes through the `Hasher` interface (a length
//! prefix and six multiply steps), probed hashbrown's control bytes,
//! compared the 48-byte key through a `memcmp` call, then followed the
//! index into the slot vector for the answer: two to three cache lines and
//! about 80 instructions (callgrind), on top of the mask arrays.
//!
//! # Design
//!
//! - **Keys are five words**: the uniflow key's two addresses as high and
//!   low halves plus word 2 (whose upper half is always zero), compared by
//!   XOR and OR without a call.
//! - **One slot is one cache line** (`repr(align(64))`): key, answer,
//!   hash and bookkeeping together, so a probe that hits reads one line.
//!   The answer is the finished [`Verdict`], not a code to resolve.
//! - **Linear probing** at a load of at most 1/4 (the table doubles as the
//!   cache fills, up to 4-8 slots an entry), so a hit costs 1.17 probes
//!   on average (Knuth: (1 + 1/(1 - load)) / 2). The load is about
//!   mispredicted branches, not lines: at a load of 1/2 (1.5 probes) the
//!   branch after a slot that does not match mispredicted often enough to
//!   cost 15% of a hit (9.7 against 8.3 ns on a 1,000-entry cache, `perf
//!   record` putting an eighth of the loop's samples on that branch).
//!   Comparing the home slot and the next without a branch between them
//!   was slower (9.7 ns).
//!   Deletion shifts later entries back (Knuth's Algorithm R), so there are
//!   no tombstones and probe chains never grow with churn.
//! - **Hash**: a folded multiply (the 128-bit product's halves XORed, as
//!   foldhash and wyhash do) over the words in two independent pairs, three
//!   multiplies in all, keyed by per-table seeds from the standard library's
//!   `RandomState`, so crafted headers cannot aim at one probe chain. The
//!   seeds only place entries: hits, misses and evictions do not depend on
//!   them (replacement draws from `live`, which follows insertion order).
//! - **Random replacement**: `live` lists the occupied positions; a full
//!   cache overwrites `live[r]` for `r` drawn from a seeded generator, and
//!   the new entry takes over index `r`. This is exactly the draw sequence
//!   of the megaflow cache's slot vector, so both caches evict alike.
//!
//! # Invariants
//!
//! - `slots.len()` is a power of two and at least `LOAD_INV` (4) times
//!   `live.len()`, so every probe sequence reaches an empty slot.
//! - A slot is empty iff its `live` is [`EMPTY`]; an empty slot's key is
//!   [`EMPTY_KEY`], which no real key equals (word 2 uses 56 bits).
//! - `live[slots[p].live] == p` for every occupied `p`, and each occupied
//!   slot lies on the probe sequence from its home `hash & (len - 1)` with
//!   no empty slot in between.
//! - `space_sum` is the sum of the occupied slots' `space`.
//!
//! # Cost
//!
//! Hit: three multiplies, one or two slot reads. Miss: the same, then an
//! insert that may evict (a backward shift over the following cluster) and
//! may double the table (a rehash from the stored hashes). Memory: 64 bytes
//! a slot, fewer than `8 × capacity` slots (256 to 512 bytes an entry: 256
//! KiB for the lab's 1,000 entries, 1 MiB for the export stage's 4,096).

use std::hash::BuildHasher;

use crate::cache_rng::CacheRng;
use crate::classifier::Verdict;

/// A uniflow key (or mask) as stored: src high, src low, dst high, dst low,
/// word 2.
pub(crate) type Words = [u64; 5];

/// The `live` of an empty slot.
const EMPTY: u32 = u32::MAX;
/// The key of an empty slot: word 2 of a real key never has its top bit set.
const EMPTY_KEY: Words = [u64::MAX; 5];
/// The smallest table, in slots.
const MIN_SLOTS: usize = 16;
/// The table grows past a load of 1 / `LOAD_INV`.
const LOAD_INV: usize = 4;
/// The largest capacity honoured: positions and `live` indices are `u32`,
/// and 2^30 entries would be 256 GiB of table already.
pub(crate) const MAX_CAPACITY: usize = 1 << 30;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Slot {
    key: Words,
    /// The full hash, so that growing and deleting never rehash a key.
    hash: u64,
    /// The answer itself, not a code to look up: a hit returns it as is.
    answer: Verdict,
    /// Index of this slot in `live`, or [`EMPTY`].
    live: u32,
    /// log2 of the packets the entry covers (`Key::space_log2`).
    space: u32,
}

const EMPTY_SLOT: Slot = Slot {
    key: EMPTY_KEY,
    hash: 0,
    answer: Verdict::NoMatch,
    live: EMPTY,
    space: 0,
};

/// The 128-bit product of `a` and `b`, its halves XORed.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Key equality without a `memcmp` call.
#[inline(always)]
fn same(a: &Words, b: &Words) -> bool {
    ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4])) == 0
}

pub(crate) struct FlatCache {
    slots: Box<[Slot]>,
    /// Occupied positions; see the module doc.
    live: Vec<u32>,
    capacity: usize,
    seeds: [u64; 6],
    rng: CacheRng,
    pub(crate) evictions: u64,
    pub(crate) space_sum: u64,
}

impl FlatCache {
    /// An empty cache of at most `capacity` entries (at least 1, at most
    /// [`MAX_CAPACITY`]); `rng_seed` seeds replacement.
    pub(crate) fn new(capacity: usize, rng_seed: u64) -> Self {
        let rs = std::collections::hash_map::RandomState::new();
        FlatCache {
            slots: vec![EMPTY_SLOT; MIN_SLOTS].into_boxed_slice(),
            live: Vec::new(),
            capacity: capacity.clamp(1, MAX_CAPACITY),
            // Odd, so that no seed is zero.
            seeds: std::array::from_fn(|i| rs.hash_one(i) | 1),
            rng: CacheRng::new(rng_seed),
            evictions: 0,
            space_sum: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.live.len()
    }

    /// The key's hash: two independent folded multiplies over the address
    /// words, a third joining them with word 2.
    #[inline]
    pub(crate) fn hash(&self, k: &Words) -> u64 {
        let s = &self.seeds;
        let x = fold(k[0] ^ s[0], k[1] ^ s[1]);
        let y = fold(k[2] ^ s[2], k[3] ^ s[3]);
        fold(x ^ k[4] ^ s[4], y ^ s[5])
    }

    /// The answer cached under `key` (whose hash is `hash`).
    #[inline]
    pub(crate) fn get(&self, key: &Words, hash: u64) -> Option<Verdict> {
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        // The table is at most a quarter full, so an empty slot ends the
        // scan; the bound is for robustness only.
        for _ in 0..=mask {
            let s = self.slots.get(i)?;
            // An empty slot's key matches no real key (module invariants).
            if same(&s.key, key) {
                return Some(s.answer);
            }
            if s.live == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// Caches `key → answer`; `key` must not be cached already (the
    /// caller just missed it). A full cache first evicts a random entry.
    pub(crate) fn insert(&mut self, key: Words, hash: u64, answer: Verdict, space: u32) {
        debug_assert!(!same(&key, &EMPTY_KEY));
        let mut slot = Slot {
            key,
            hash,
            answer,
            live: EMPTY,
            space,
        };
        if self.live.len() >= self.capacity {
            let r = self.rng.below(self.live.len());
            if let Some(&victim) = self.live.get(r) {
                self.remove_at(victim as usize);
                self.evictions += 1;
                slot.live = r as u32;
                let at = self.place(slot);
                if let Some(l) = self.live.get_mut(r) {
                    *l = at as u32;
                }
                self.space_sum += u64::from(space);
                return;
            }
        }
        if LOAD_INV * (self.live.len() + 1) > self.slots.len() {
            self.grow();
        }
        slot.live = self.live.len() as u32;
        let at = self.place(slot);
        self.live.push(at as u32);
        self.space_sum += u64::from(space);
    }

    /// Puts `slot` in the first empty position of its probe sequence and
    /// returns that position (the caller keeps `live` in step).
    fn place(&mut self, slot: Slot) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = slot.hash as usize & mask;
        while self.slots[i].live != EMPTY {
            i = (i + 1) & mask;
        }
        self.slots[i] = slot;
        i
    }

    /// Empties position `p` and shifts the rest of its cluster back so
    /// that every entry stays reachable from its home (Algorithm R).
    fn remove_at(&mut self, p: usize) {
        let mask = self.slots.len() - 1;
        self.space_sum -= u64::from(self.slots[p].space);
        let mut hole = p;
        let mut j = p;
        loop {
            j = (j + 1) & mask;
            let s = self.slots[j];
            if s.live == EMPTY {
                break;
            }
            let home = s.hash as usize & mask;
            // `s` may fill the hole unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.slots[hole] = s;
                if let Some(l) = self.live.get_mut(s.live as usize) {
                    *l = hole as u32;
                }
                hole = j;
            }
        }
        self.slots[hole] = EMPTY_SLOT;
    }

    /// Doubles the table, re-placing every entry from its stored hash.
    fn grow(&mut self) {
        let bigger = vec![EMPTY_SLOT; self.slots.len() * 2].into_boxed_slice();
        let old = std::mem::replace(&mut self.slots, bigger);
        for &p in &self.live {
            let s = old[p as usize];
            let mask = self.slots.len() - 1;
            let mut i = s.hash as usize & mask;
            while self.slots[i].live != EMPTY {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
        // Positions changed: rebuild `live` from the slots' back-indices.
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(l) = self.live.get_mut(s.live as usize) {
                *l = i as u32;
            }
        }
    }

    /// Checks every invariant of the module doc (tests).
    #[cfg(test)]
    fn check(&self) {
        let mask = self.slots.len() - 1;
        assert!(self.slots.len().is_power_of_two());
        assert!(self.slots.len() >= LOAD_INV * self.live.len());
        assert!(self.live.len() <= self.capacity);
        let mut occupied = 0;
        let mut space = 0;
        for (p, s) in self.slots.iter().enumerate() {
            if s.live == EMPTY {
                assert!(same(&s.key, &EMPTY_KEY));
                continue;
            }
            occupied += 1;
            space += u64::from(s.space);
            assert_eq!(self.live[s.live as usize] as usize, p);
            assert_eq!(s.hash, self.hash(&s.key));
            let mut i = s.hash as usize & mask;
            while i != p {
                assert!(self.slots[i].live != EMPTY, "gap before slot {p}");
                i = (i + 1) & mask;
            }
        }
        assert_eq!(occupied, self.live.len());
        assert_eq!(space, self.space_sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn key(i: u64) -> Words {
        [i.wrapping_mul(0x9e37_79b9_7f4a_7c15), 0, i & 7, 0, i % 1000]
    }

    /// Against a `HashMap` model under random replacement: every cached
    /// key answers, every evicted one does not, invariants hold after
    /// every step; several table sizes, with forced collisions (a table of
    /// 16 slots shares homes all the time).
    #[test]
    fn equals_a_map_under_churn() {
        for capacity in [1, 2, 7, 8, 100, 1000] {
            let mut c = FlatCache::new(capacity, 5);
            let mut model: HashMap<Words, Verdict> = HashMap::new();
            let mut rng = CacheRng::new(capacity as u64);
            for step in 0..20_000u64 {
                let k = key(rng.below(3 * capacity + 5) as u64);
                let h = c.hash(&k);
                let got = c.get(&k, h);
                assert_eq!(got, model.get(&k).copied(), "capacity {capacity} step {step}");
                if got.is_none() {
                    let before: Vec<Words> = c.live.iter().map(|&p| c.slots[p as usize].key).collect();
                    c.insert(k, h, Verdict::Action(step as u32), (step % 64) as u32);
                    model.insert(k, Verdict::Action(step as u32));
                    // Model the eviction: the one key of `before` now gone.
                    if before.len() == capacity {
                        let gone: Vec<Words> = before
                            .into_iter()
                            .filter(|b| c.get(b, c.hash(b)).is_none())
                            .collect();
                        assert_eq!(gone.len(), 1, "one eviction");
                        model.remove(&gone[0]);
                    }
                }
                if step % 97 == 0 || capacity < 10 {
                    c.check();
                }
                assert_eq!(c.len(), model.len());
            }
            c.check();
            assert!(c.len() <= capacity);
        }
    }

    /// The replacement draws follow insertion order only: two caches with
    /// different hash seeds evict the same keys.
    #[test]
    fn evictions_do_not_depend_on_hash_seeds() {
        let (mut a, mut b) = (FlatCache::new(50, 9), FlatCache::new(50, 9));
        assert_ne!(a.seeds, b.seeds, "RandomState gives each table its own seeds");
        for i in 0..5_000u64 {
            let k = key(i % 400);
            let (ha, hb) = (a.hash(&k), b.hash(&k));
            let (ga, gb) = (a.get(&k, ha), b.get(&k, hb));
            assert_eq!(ga, gb, "step {i}");
            if ga.is_none() {
                a.insert(k, ha, Verdict::Set(crate::SetId(i as u32)), 1);
                b.insert(k, hb, Verdict::Set(crate::SetId(i as u32)), 1);
            }
        }
        assert_eq!(a.evictions, b.evictions);
    }

    #[test]
    fn slot_is_one_line() {
        assert_eq!(std::mem::size_of::<Slot>(), 64);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
    }
}
