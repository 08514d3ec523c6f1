//! The classifier the export stage uses: a TSS slow path behind an optional
//! fast path (megaflows or USS uniflows), with counters.
//!
//! # Design
//!
//! Answers are carried as a `u32` *code* so the caches store one word
//! whatever the semantics: under [`Semantics::FirstMatch`] the code is the
//! winning rule's index + 1 (0: no rule), under [`Semantics::AllMatches`] it
//! is an interned set of actions ([`SetId`]; 0 is the empty set). A megaflow
//! hit turns the code into a [`Verdict`] without allocating; the USS cache
//! stores the finished [`Verdict`] (its slot has room), so a USS hit
//! returns it as is. Only a slow-path lookup yielding a set never seen
//! before allocates (to intern it).
//!
//! Hits are inline and misses out of line (`#[cold]`), so the hit path
//! stays short wherever the caller inlines it. [`Classifier::classify_batch`]
//! classifies a slice in one call: the fast path is chosen once and the
//! hits run in one loop, about 45 instructions a packet fewer than one
//! call a packet (callgrind, USS at a 100% hit rate: 184 → 140).
//!
//! # Concurrency
//!
//! `classify` takes `&mut self` (it fills caches and counters): one
//! classifier per thread, as one per host stage.
//!
//! # Cost
//!
//! Fast-path hit: one hash lookup (USS) or one per megaflow subtable probed;
//! miss: the slow path's one lookup per TSS tuple, plus one cache insert.

use clarion_wire::FlowKey;
use rustc_hash::FxHashMap;

use crate::error::ClassifyError;
use crate::key::Key;
use crate::megaflow::MegaflowCache;
use crate::rule::{expand, Rule};
use crate::tss::Tss;
use crate::uss::UniflowCache;

/// What a lookup returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Semantics {
    /// The action of the highest-priority matching rule (ties: the rule
    /// given first): Trident, OVS and ClassBench semantics.
    FirstMatch,
    /// The set of actions of every matching rule (several export policies
    /// may each take a packet).
    AllMatches,
}

/// Which fast path sits in front of the TSS slow path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FastPath {
    /// Every packet takes the slow path.
    None,
    /// Open vSwitch's megaflow cache of at most `capacity` entries.
    Megaflow { capacity: usize },
    /// Trident's USS mask arrays and uniflow cache of at most `capacity` entries.
    Uss { capacity: usize },
}

/// An interned set of actions; see [`Classifier::set_actions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SetId(pub u32);

impl SetId {
    /// The empty set (no rule matched).
    pub const EMPTY: SetId = SetId(0);
}

/// The answer for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// [`Semantics::FirstMatch`]: no rule matched.
    NoMatch,
    /// [`Semantics::FirstMatch`]: the winning rule's action.
    Action(u32),
    /// [`Semantics::AllMatches`]: the actions of every matching rule.
    Set(SetId),
}

/// Counters since the classifier was built.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stats {
    /// Packets classified.
    pub packets: u64,
    /// Packets answered by the fast path.
    pub fast_hits: u64,
    /// Packets that took the slow path (all of them without a fast path).
    pub misses: u64,
    /// Hash lookups made by the fast path (hits and misses).
    pub fast_lookups: u64,
    /// Hash lookups made by the slow path.
    pub slow_lookups: u64,
    /// Entries in the fast-path cache now.
    pub cache_entries: u64,
    /// Cache entries replaced to make room.
    pub evictions: u64,
    /// Sum over the cached entries of log2 of the packets each covers
    /// (see [`Key::space_log2`]).
    pub cached_space_log2_sum: u64,
    /// Tuples of the slow path (distinct masks of the expanded rules).
    pub slow_tuples: u64,
    /// Megaflow subtables now (0 for other fast paths; USS has one table).
    pub fast_subtables: u64,
}

impl Stats {
    /// Fast-path hash lookups per packet (misses probe too: a megaflow
    /// miss probes every subtable, a USS miss its one table).
    pub fn fast_lookups_per_packet(&self) -> f64 {
        ratio(self.fast_lookups, self.packets)
    }
    /// Share of packets answered by the fast path.
    pub fn hit_rate(&self) -> f64 {
        ratio(self.fast_hits, self.packets)
    }
    /// Mean over the cached entries of log2 of the space each covers
    /// (Trident's Fig. 6, in log2).
    pub fn mean_cached_space_log2(&self) -> f64 {
        ratio(self.cached_space_log2_sum, self.cache_entries)
    }
    /// The counters of what happened since `earlier` (a snapshot of the
    /// same classifier): event counts subtracted, the cache's size, space
    /// and shape as now.
    pub fn since(&self, earlier: &Stats) -> Stats {
        Stats {
            packets: self.packets.saturating_sub(earlier.packets),
            fast_hits: self.fast_hits.saturating_sub(earlier.fast_hits),
            misses: self.misses.saturating_sub(earlier.misses),
            fast_lookups: self.fast_lookups.saturating_sub(earlier.fast_lookups),
            slow_lookups: self.slow_lookups.saturating_sub(earlier.slow_lookups),
            evictions: self.evictions.saturating_sub(earlier.evictions),
            ..*self
        }
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

enum Fast {
    None,
    Megaflow(MegaflowCache),
    // Boxed: its mask arrays' headers make it the large variant.
    Uss(Box<UniflowCache>),
}

/// Interned action sets; `sets[0]` is the empty set.
pub(crate) struct Interner {
    pub(crate) sets: Vec<Box<[u32]>>,
    ids: FxHashMap<Box<[u32]>, u32>,
}

impl Interner {
    pub(crate) fn new() -> Self {
        let empty: Box<[u32]> = Box::new([]);
        let mut ids = FxHashMap::default();
        ids.insert(empty.clone(), 0);
        Interner {
            sets: vec![empty],
            ids,
        }
    }

    pub(crate) fn intern(&mut self, sorted: &[u32]) -> u32 {
        if let Some(&id) = self.ids.get(sorted) {
            return id;
        }
        let id = self.sets.len() as u32;
        let b: Box<[u32]> = sorted.into();
        self.sets.push(b.clone());
        self.ids.insert(b, id);
        id
    }
}

/// The slow path and what it needs, apart from the cache (so both can be
/// borrowed at once).
struct Slow {
    semantics: Semantics,
    tss: Tss,
    actions: Vec<u32>,
    sets: Interner,
    scratch: Vec<u32>,
}

impl Slow {
    /// The answer's code for `k`, un-wildcarding `wc`.
    fn lookup(&mut self, k: &Key, wc: &mut Key, lookups: &mut u64) -> u32 {
        match self.semantics {
            Semantics::FirstMatch => self.tss.first(k, wc, lookups).map_or(0, |r| r + 1),
            Semantics::AllMatches => {
                self.scratch.clear();
                self.tss.all(k, wc, lookups, &mut self.scratch);
                for r in self.scratch.iter_mut() {
                    *r = self.actions.get(*r as usize).copied().unwrap_or(0);
                }
                self.scratch.sort_unstable();
                self.scratch.dedup();
                self.sets.intern(&self.scratch)
            }
        }
    }

    /// A miss of the fast path (or a packet without one), counted: the
    /// answer's code and the bits the slow path's probes read.
    fn miss(&mut self, k: &Key, stats: &mut Stats) -> (u32, Key) {
        stats.misses += 1;
        let mut wc = Key::ZERO;
        let code = self.lookup(k, &mut wc, &mut stats.slow_lookups);
        (code, wc)
    }

    #[inline]
    fn verdict(&self, code: u32) -> Verdict {
        match self.semantics {
            Semantics::FirstMatch => match code.checked_sub(1) {
                None => Verdict::NoMatch,
                Some(r) => self
                    .actions
                    .get(r as usize)
                    .map_or(Verdict::NoMatch, |&a| Verdict::Action(a)),
            },
            Semantics::AllMatches => Verdict::Set(SetId(code)),
        }
    }
}

/// A packet classifier over a fixed rule set.
pub struct Classifier {
    slow: Slow,
    fast: Fast,
    stats: Stats,
}

impl Classifier {
    /// Builds the classifier; refuses bad ranges, prefixes longer than their
    /// address, a prefix of the other family, a zero cache capacity, and rule
    /// sets too large for memory (see [`crate::MAX_ENTRIES`]).
    pub fn new(rules: &[Rule], semantics: Semantics, fast: FastPath) -> Result<Classifier, ClassifyError> {
        let entries = expand(rules)?;
        let fast = match fast {
            FastPath::None => Fast::None,
            FastPath::Megaflow { capacity: 0 } | FastPath::Uss { capacity: 0 } => {
                return Err(ClassifyError::ZeroCapacity)
            }
            FastPath::Megaflow { capacity } => Fast::Megaflow(MegaflowCache::new(capacity)),
            FastPath::Uss { capacity } => Fast::Uss(Box::new(UniflowCache::new(
                &entries,
                capacity,
                semantics == Semantics::FirstMatch,
            ))),
        };
        let tss = Tss::new(entries);
        let stats = Stats {
            slow_tuples: tss.tuple_count() as u64,
            ..Stats::default()
        };
        Ok(Classifier {
            slow: Slow {
                semantics,
                tss,
                actions: rules.iter().map(|r| r.action).collect(),
                sets: Interner::new(),
                scratch: Vec::new(),
            },
            fast,
            stats,
        })
    }

    /// Classifies one parsed packet.
    #[inline]
    pub fn classify(&mut self, k: &FlowKey) -> Verdict {
        self.classify_key(&Key::from_flow(k))
    }

    /// Classifies one packed key (see [`Key::from_flow`]).
    ///
    /// Only the fast-path hits are inline: a miss (and the slow path alone)
    /// goes through `Classifier::miss`, out of line, so that the hit
    /// path stays a few dozen instructions wherever it is inlined.
    #[inline]
    pub fn classify_key(&mut self, k: &Key) -> Verdict {
        let st = &mut self.stats;
        st.packets += 1;
        let hit = match &mut self.fast {
            Fast::None => None,
            Fast::Megaflow(c) => c.lookup(k, &mut st.fast_lookups),
            Fast::Uss(c) => {
                st.fast_lookups += 1;
                if let Some(v) = c.lookup(k) {
                    st.fast_hits += 1;
                    return v;
                }
                None
            }
        };
        match hit {
            Some(code) => {
                st.fast_hits += 1;
                self.slow.verdict(code)
            }
            None => self.miss(k),
        }
    }

    /// Classifies `keys` in order, appending one verdict per key to `out`:
    /// the same verdicts and counters as [`Classifier::classify`] on each
    /// key in turn, in one call.
    ///
    /// The fast path is chosen once for the whole slice and each hit runs
    /// inline in one tight loop, with the counters kept in registers, for
    /// either fast path alike; misses still go out of line. (Grouping
    /// packets to form 16 USS keys ahead of their probes, with the slots
    /// prefetched, was tried: no faster with a cache of 1,000 entries,
    /// whose table stays in L2, and 4% more instructions.)
    pub fn classify_batch(&mut self, keys: &[FlowKey], out: &mut Vec<Verdict>) {
        // Verdicts are written in place (no capacity check a packet).
        let start = out.len();
        out.resize(start + keys.len(), Verdict::NoMatch);
        let Some(out) = out.get_mut(start..) else { return };
        let Classifier { slow, fast, stats } = self;
        stats.packets += keys.len() as u64;
        let mut hits = 0u64;
        match fast {
            Fast::None => {
                for (k, o) in keys.iter().zip(out) {
                    *o = Self::miss_of(slow, fast, stats, &Key::from_flow(k));
                }
            }
            Fast::Megaflow(c) => {
                for (f, o) in keys.iter().zip(out) {
                    *o = match c.lookup(&Key::from_flow(f), &mut stats.fast_lookups) {
                        Some(code) => {
                            hits += 1;
                            slow.verdict(code)
                        }
                        // The key is formed again there: passing the flow
                        // key keeps the packed one in registers here.
                        None => Self::megaflow_miss(slow, c, stats, &Key::from_flow(f)),
                    };
                }
            }
            Fast::Uss(c) => {
                stats.fast_lookups += keys.len() as u64;
                // Runs of hits, each ended by one miss.
                let mut i = 0;
                while let (Some(ks), Some(os)) = (keys.get(i..), out.get_mut(i..)) {
                    let n = c.hit_run(ks, os);
                    hits += n as u64;
                    i += n;
                    let (Some(f), Some(o)) = (keys.get(i), out.get_mut(i)) else {
                        break;
                    };
                    *o = Self::uss_miss(slow, c, stats, &Key::from_flow(f));
                    i += 1;
                }
            }
        }
        stats.fast_hits += hits;
    }

    /// A fast-path miss (or any packet without a fast path): the slow
    /// path, then a cache insert.
    #[cold]
    #[inline(never)]
    fn miss(&mut self, k: &Key) -> Verdict {
        let Classifier { slow, fast, stats } = self;
        Self::miss_of(slow, fast, stats, k)
    }

    /// [`Classifier::miss`] on the classifier's parts, so that a loop
    /// holding one of them can call it.
    fn miss_of(slow: &mut Slow, fast: &mut Fast, stats: &mut Stats, k: &Key) -> Verdict {
        match fast {
            Fast::None => {
                let (code, _) = slow.miss(k, stats);
                slow.verdict(code)
            }
            Fast::Megaflow(c) => Self::megaflow_miss(slow, c, stats, k),
            Fast::Uss(c) => Self::uss_miss(slow, c, stats, k),
        }
    }

    #[cold]
    #[inline(never)]
    fn megaflow_miss(slow: &mut Slow, c: &mut MegaflowCache, stats: &mut Stats, k: &Key) -> Verdict {
        let (code, wc) = slow.miss(k, stats);
        c.insert(k, wc, code);
        slow.verdict(code)
    }

    #[cold]
    #[inline(never)]
    fn uss_miss(slow: &mut Slow, c: &mut UniflowCache, stats: &mut Stats, k: &Key) -> Verdict {
        // The USS mask, not the slow path's un-wildcarded bits, bounds the
        // uniflow (see uss.rs).
        let (code, _) = slow.miss(k, stats);
        let v = slow.verdict(code);
        c.insert(k, v);
        v
    }

    /// The sorted actions of an interned set (empty for an unknown id).
    pub fn set_actions(&self, id: SetId) -> &[u32] {
        self.slow.sets.sets.get(id.0 as usize).map_or(&[], |s| &s[..])
    }

    /// The verdict's actions, sorted: none, one, or the set's.
    pub fn actions_of<'a>(&'a self, v: &'a Verdict) -> &'a [u32] {
        match v {
            Verdict::NoMatch => &[],
            Verdict::Action(a) => std::slice::from_ref(a),
            Verdict::Set(id) => self.set_actions(*id),
        }
    }

    /// The semantics chosen at build time.
    pub fn semantics(&self) -> Semantics {
        self.slow.semantics
    }

    /// Internal entries after range expansion.
    pub fn entry_count(&self) -> usize {
        self.slow.tss.entries().len()
    }

    /// The counters, with the cache's current size and space.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats;
        match &self.fast {
            Fast::None => {}
            Fast::Megaflow(c) => {
                s.cache_entries = c.len() as u64;
                s.evictions = c.evictions;
                s.cached_space_log2_sum = c.space_sum;
                s.fast_subtables = c.subtable_count() as u64;
            }
            Fast::Uss(c) => {
                s.cache_entries = c.len() as u64;
                s.evictions = c.evictions();
                s.cached_space_log2_sum = c.space_sum();
                s.fast_subtables = 1;
            }
        }
        s
    }
}
