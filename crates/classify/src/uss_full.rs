//! Trident's full USS construction (Algorithms 1-3): every rule cut into
//! uniflows ahead of time, so classification is one hash lookup with no
//! slow path at all.
//!
//! # Design
//!
//! With the mask arrays of `uss.rs`, the sub-prefix cells of a field are
//! partitioned into *boxes* (a cell's mask `m` at most the sub-prefix width
//! spans the aligned block of cells sharing it; a longer `m` cuts its cell
//! into `2^(m - sub_bits)` boxes). Every entry's prefix is a union of whole
//! boxes: a box it overlaps has a mask at least the entry's length, so the
//! entry contains it. Algorithm 1 ("align the rule to the longest masks")
//! is then: per field, list the boxes inside the entry's prefix; the
//! entry's uniflows are their product. Equal uniflows of different entries
//! merge (the highest rank under first-match, the union of actions under
//! all-matches), and a packet's lookup key (Algorithm 4) is exactly the
//! uniflow of the box it falls in.
//!
//! # Cost
//!
//! One hash lookup per packet; memory one entry per uniflow, which explodes
//! when wide rules sit among long masks (a /0 address next to /32s becomes
//! 2^16 boxes or more): the paper's reason to cache uniflows instead.
//! [`UssTable::new`] counts before building and refuses past its limit.

use clarion_wire::FlowKey;
use rustc_hash::FxHashMap;

use crate::classifier::{Interner, Semantics, SetId, Verdict};
use crate::error::ClassifyError;
use crate::key::{Key, FIELDS, NFIELDS};
use crate::rule::{expand, Entry, Rule};
use crate::uss::MaskArrays;

/// A complete USS classifier: mask arrays and one uniflow table.
pub struct UssTable {
    arrays: MaskArrays,
    /// Uniflow key to code (rule index + 1, or a set id; see `classifier.rs`).
    table: FxHashMap<Key, u32>,
    semantics: Semantics,
    actions: Vec<u32>,
    sets: Interner,
}

/// Calls `each(value, len)` for every box of field `f` inside the entry's
/// prefix, or only counts them when `each` is `None`; stops counting past
/// `limit`.
fn boxes(
    arrays: &MaskArrays,
    e: &Entry,
    f: usize,
    limit: u128,
    mut each: Option<&mut dyn FnMut(u128)>,
) -> u128 {
    let d = FIELDS[f];
    let (w, x) = (d.width, d.sub_bits);
    let (v, l) = (e.value.get(f), u32::from(e.lens[f]));
    let mut n: u128 = 0;
    // Boxes of length m > x inside one cell starting at `base`: 2^(m - from) of them.
    let mut cut = |base: u128, from: u32, m: u32, n: &mut u128| {
        let k = m.saturating_sub(from);
        if k >= 100 {
            *n = limit + 1;
            return;
        }
        let count = 1u128 << k;
        *n = n.saturating_add(count);
        if let Some(each) = each.as_deref_mut() {
            if *n <= limit {
                for i in 0..count {
                    each(base + i.checked_shl(w - m).unwrap_or(0)); // m = 0: one box, i = 0
                }
            }
        }
    };
    if l >= x {
        let cell = (v >> (w - x)) as usize;
        let m = u32::from(arrays.cell_len(f, cell)).max(l);
        cut(v, l, m, &mut n);
        return n;
    }
    let first = if l == 0 { 0 } else { (v >> (w - x)) as usize };
    let end = first + (1usize << (x - l));
    let mut c = first;
    while c < end && n <= limit {
        let m = u32::from(arrays.cell_len(f, c));
        if m <= x {
            // One box: the aligned block of 2^(x - m) cells sharing mask m.
            let block = (c >> (x - m)) as u128;
            let value = if m == 0 { 0 } else { block << (w - m) };
            cut(value, m, m, &mut n);
            c = ((block as usize) + 1) << (x - m);
        } else {
            cut((c as u128) << (w - x), x, m, &mut n);
            c += 1;
        }
    }
    n
}

impl UssTable {
    /// Builds the table; refuses the rules `Classifier::new` refuses, and
    /// rule sets that would make more than `max_uniflows` uniflows.
    pub fn new(rules: &[Rule], semantics: Semantics, max_uniflows: usize) -> Result<UssTable, ClassifyError> {
        let entries = expand(rules)?;
        let arrays = MaskArrays::new(&entries);
        let limit = max_uniflows as u128;
        let too_many = ClassifyError::TooManyUniflows { limit: max_uniflows };
        // Count first, so an explosion is refused before it allocates.
        let mut total: u128 = 0;
        for e in &entries {
            let mut product: u128 = 1;
            for f in 0..NFIELDS {
                product = product.saturating_mul(boxes(&arrays, e, f, limit, None));
                if product > limit {
                    return Err(too_many);
                }
            }
            total += product;
            if total > limit {
                return Err(too_many);
            }
        }
        // Per uniflow: the best rank and its rule (first match), or the rules (all matches).
        let mut best: FxHashMap<Key, (u64, u32)> = FxHashMap::default();
        let mut all: FxHashMap<Key, Vec<u32>> = FxHashMap::default();
        let mut per_field: [Vec<u128>; NFIELDS] = Default::default();
        for e in &entries {
            for (f, out) in per_field.iter_mut().enumerate() {
                out.clear();
                boxes(&arrays, e, f, limit, Some(&mut |v| out.push(v)));
            }
            // Odometer over the product of the fields' boxes.
            let mut idx = [0usize; NFIELDS];
            loop {
                let mut k = Key::ZERO;
                for f in 0..NFIELDS {
                    k.set(f, per_field[f][idx[f]]);
                }
                match semantics {
                    Semantics::FirstMatch => {
                        let slot = best.entry(k).or_insert((e.rank, e.rule));
                        if e.rank > slot.0 {
                            *slot = (e.rank, e.rule);
                        }
                    }
                    Semantics::AllMatches => all.entry(k).or_default().push(e.rule),
                }
                let mut f = 0;
                while f < NFIELDS {
                    idx[f] += 1;
                    if idx[f] < per_field[f].len() {
                        break;
                    }
                    idx[f] = 0;
                    f += 1;
                }
                if f == NFIELDS {
                    break;
                }
            }
        }
        let actions: Vec<u32> = rules.iter().map(|r| r.action).collect();
        let mut sets = Interner::new();
        let table = match semantics {
            Semantics::FirstMatch => best.into_iter().map(|(k, (_, r))| (k, r + 1)).collect(),
            Semantics::AllMatches => all
                .into_iter()
                .map(|(k, rs)| {
                    let mut acts: Vec<u32> = rs
                        .iter()
                        .filter_map(|&r| actions.get(r as usize).copied())
                        .collect();
                    acts.sort_unstable();
                    acts.dedup();
                    (k, sets.intern(&acts))
                })
                .collect(),
        };
        Ok(UssTable {
            arrays,
            table,
            semantics,
            actions,
            sets,
        })
    }

    /// Number of uniflows in the table (after merging equal ones).
    pub fn uniflow_count(&self) -> usize {
        self.table.len()
    }

    /// Classifies one parsed packet: the mask arrays, then one hash lookup.
    pub fn classify(&self, k: &FlowKey) -> Verdict {
        let k = Key::from_flow(k);
        let code = self
            .table
            .get(&k.and(&self.arrays.mask(&k)))
            .copied()
            .unwrap_or(0);
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

    /// The verdict's actions, sorted: none, one, or the set's.
    pub fn actions_of<'a>(&'a self, v: &'a Verdict) -> &'a [u32] {
        match v {
            Verdict::NoMatch => &[],
            Verdict::Action(a) => std::slice::from_ref(a),
            Verdict::Set(id) => self.sets.sets.get(id.0 as usize).map_or(&[], |s| &s[..]),
        }
    }
}
