//! The slow path: tuple space search over the expanded rules.
//!
//! # Design (Srinivasan et al.; Open vSwitch's `lib/classifier.c`)
//!
//! Entries sharing a mask (a *tuple*) go in one hash table keyed by the
//! masked value; a bucket lists the entries with that value, highest rank
//! first. A lookup masks the packet with each tuple's mask and probes that
//! table: one hash lookup per tuple, counted.
//!
//! **Priority pruning** (as `classifier_lookup__`): tuples are sorted by the
//! highest rank they hold, and a first-match lookup stops at the first tuple
//! that cannot beat the best match so far. An all-matches lookup must probe
//! every tuple.
//!
//! **Un-wildcarding**: every probed tuple's mask is ORed into the caller's
//! `wc`, the bits the answer depended on. This is what OVS does without its
//! optional refinements (staged lookup, prefix tries, port tries), which
//! un-wildcard fewer bits; they are not modelled here. Pruning is exact for
//! the megaflow: a packet agreeing with this one on `wc` probes the same
//! tuples, gets the same hits, and so stops at the same tuple.
//!
//! # Invariants
//!
//! - `tuples` is sorted by `max_rank`, descending; no tuple is empty.
//! - A bucket is sorted by rank, descending.
//!
//! # Cost
//!
//! O(tuples) hash lookups per packet (fewer with pruning); memory linear in
//! the entries.

use rustc_hash::FxHashMap;

use crate::key::Key;
use crate::rule::Entry;

struct Tuple {
    mask: Key,
    max_rank: u64,
    table: FxHashMap<Key, Vec<u32>>,
}

/// The tuple-space-search classifier over a fixed set of entries.
pub(crate) struct Tss {
    entries: Vec<Entry>,
    tuples: Vec<Tuple>,
}

impl Tss {
    pub(crate) fn new(entries: Vec<Entry>) -> Tss {
        let mut by_mask: FxHashMap<Key, Tuple> = FxHashMap::default();
        for (i, e) in entries.iter().enumerate() {
            let t = by_mask.entry(e.mask).or_insert_with(|| Tuple {
                mask: e.mask,
                max_rank: 0,
                table: FxHashMap::default(),
            });
            t.max_rank = t.max_rank.max(e.rank);
            t.table.entry(e.value).or_default().push(i as u32);
        }
        let mut tuples: Vec<Tuple> = by_mask.into_values().collect();
        for t in &mut tuples {
            for b in t.table.values_mut() {
                b.sort_by_key(|&i| std::cmp::Reverse(entries[i as usize].rank));
            }
        }
        // Ties broken by mask so that the order (and so the counters) is deterministic.
        tuples.sort_by(|a, b| b.max_rank.cmp(&a.max_rank).then(a.mask.cmp(&b.mask)));
        Tss { entries, tuples }
    }

    pub(crate) fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Number of tuples (distinct masks).
    pub(crate) fn tuple_count(&self) -> usize {
        self.tuples.len()
    }

    /// The highest-ranked matching entry's rule, un-wildcarding `wc` and
    /// counting hash lookups.
    pub(crate) fn first(&self, k: &Key, wc: &mut Key, lookups: &mut u64) -> Option<u32> {
        let mut best: Option<&Entry> = None; // invariant: the highest-ranked match among probed tuples
        for t in &self.tuples {
            if best.is_some_and(|b| b.rank >= t.max_rank) {
                break;
            }
            *wc = wc.or(&t.mask);
            *lookups += 1;
            if let Some(bucket) = t.table.get(&k.and(&t.mask)) {
                if let Some(e) = bucket.first().map(|&i| &self.entries[i as usize]) {
                    if best.is_none_or(|b| e.rank > b.rank) {
                        best = Some(e);
                    }
                }
            }
        }
        best.map(|e| e.rule)
    }

    /// Every matching entry's rule pushed on `out` (unsorted, may repeat),
    /// un-wildcarding `wc` and counting hash lookups.
    pub(crate) fn all(&self, k: &Key, wc: &mut Key, lookups: &mut u64, out: &mut Vec<u32>) {
        for t in &self.tuples {
            *wc = wc.or(&t.mask);
            *lookups += 1;
            if let Some(bucket) = t.table.get(&k.and(&t.mask)) {
                out.extend(bucket.iter().map(|&i| self.entries[i as usize].rule));
            }
        }
    }
}
