//! Match sets: the interned set of triggers a flow matched, and the layout
//! and storage of the statistics such flows keep.
//!
//! Flows that matched the same triggers share one [`MatchSet`], so the
//! per-flow state is just a set id and a block number. A block holds two
//! halves, one per epoch parity (double buffering: the sweep reads the
//! finished epoch's half while packets of the next epoch write the other).
//! Each half starts with a tag, the start time of the epoch whose
//! statistics it holds; a half with a stale tag is reset on first write
//! (lazy reset), so nothing is ever cleared in bulk.

use clarion_lang::spec::AggCall;
use clarion_wire::PacketRecord;

use crate::measure::{Acc, Expr, FlowContext, Slot, StatFlags};
use crate::trigger_index::TriggerId;

/// Tag of a half that holds no epoch yet.
const NO_EPOCH: u64 = u64::MAX;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct MatchSet {
    /// Sorted, distinct.
    pub(crate) triggers: Vec<TriggerId>,
    /// Distinct measures with their place in a half block (offsets after the tag).
    measures: Vec<(Expr, Slot)>,
    /// For each trigger (same order as `triggers`), for each of its
    /// aggregates, the index of the measure it reads.
    per_trigger: Vec<Vec<usize>>,
    /// Words per half: the tag plus every measure's statistics.
    half_words: usize,
    slab: Vec<u64>,
    free: Vec<u32>,
    /// Live flows using this set.
    pub(crate) flows: usize,
}

impl MatchSet {
    /// Builds a set from its triggers' aggregates (`aggs[i]` belongs to `triggers[i]`).
    pub(crate) fn new(triggers: Vec<TriggerId>, aggs: &[&[AggCall]]) -> Self {
        let mut exprs: Vec<(Expr, StatFlags)> = Vec::new();
        let mut per_trigger = Vec::with_capacity(aggs.len());
        for trigger_aggs in aggs {
            let mut idxs = Vec::with_capacity(trigger_aggs.len());
            for a in trigger_aggs.iter() {
                let e = Expr::compile(&a.arg);
                let need = StatFlags::for_agg(a.func);
                let i = match exprs.iter().position(|(x, _)| *x == e) {
                    Some(i) => {
                        exprs[i].1 = exprs[i].1.union(need);
                        i
                    }
                    None => {
                        exprs.push((e, need));
                        exprs.len() - 1
                    }
                };
                idxs.push(i);
            }
            per_trigger.push(idxs);
        }
        let mut offset = 1;
        let measures = exprs
            .into_iter()
            .map(|(e, flags)| {
                let slot = Slot { offset, flags };
                offset += flags.words();
                (e, slot)
            })
            .collect();
        MatchSet {
            triggers,
            measures,
            per_trigger,
            half_words: offset,
            slab: Vec::new(),
            free: Vec::new(),
            flows: 0,
        }
    }

    /// A fresh block with both halves empty.
    pub(crate) fn alloc(&mut self) -> u32 {
        let bw = 2 * self.half_words;
        let block = match self.free.pop() {
            Some(b) => b,
            None => {
                self.slab.resize(self.slab.len() + bw, 0);
                (self.slab.len() / bw - 1) as u32
            }
        };
        let base = block as usize * bw;
        self.slab[base] = NO_EPOCH;
        self.slab[base + self.half_words] = NO_EPOCH;
        self.flows += 1;
        block
    }

    pub(crate) fn release(&mut self, block: u32) {
        self.free.push(block);
        self.flows = self.flows.saturating_sub(1);
    }

    #[inline]
    fn half_range(&self, block: u32, half: usize) -> std::ops::Range<usize> {
        let start = block as usize * 2 * self.half_words + half * self.half_words;
        start..start + self.half_words
    }

    /// Folds a packet into the block's half for the epoch starting at `epoch`.
    #[inline]
    pub(crate) fn update(&mut self, block: u32, half: usize, epoch: u64, p: &PacketRecord, cx: FlowContext) {
        let r = self.half_range(block, half);
        let w = &mut self.slab[r];
        if w[0] != epoch {
            w[0] = epoch;
            for (_, slot) in &self.measures {
                slot.reset(w);
            }
        }
        for (e, slot) in &self.measures {
            if let Some(v) = e.eval(p, cx) {
                slot.update(w, v);
            }
        }
    }

    /// True when the half holds statistics of the epoch starting at `epoch`.
    #[inline]
    pub(crate) fn has_epoch(&self, block: u32, half: usize, epoch: u64) -> bool {
        self.slab[self.half_range(block, half).start] == epoch
    }

    /// Position of a trigger in this set.
    pub(crate) fn position(&self, t: TriggerId) -> Option<usize> {
        self.triggers.binary_search(&t).ok()
    }

    /// Adds the statistics a trigger's aggregates read to `accs` (one per aggregate).
    pub(crate) fn gather(&self, block: u32, half: usize, trigger_pos: usize, accs: &mut [Acc]) {
        let w = &self.slab[self.half_range(block, half)];
        for (acc, &m) in accs.iter_mut().zip(&self.per_trigger[trigger_pos]) {
            acc.merge(&self.measures[m].1.read(w));
        }
    }

    /// Copies both halves of `block` of `from` into `block_here`, keeping
    /// the statistics of every measure both sets share.
    pub(crate) fn copy_from(&mut self, block_here: u32, from: &MatchSet, block_there: u32) {
        for half in 0..2 {
            let src = &from.slab[from.half_range(block_there, half)];
            let r = self.half_range(block_here, half);
            let dst = &mut self.slab[r];
            dst[0] = src[0];
            for (e, slot) in &self.measures {
                slot.reset(dst);
                if let Some((_, there)) = from.measures.iter().find(|(x, _)| x == e) {
                    slot.copy_common(dst, there, src);
                }
            }
        }
    }

    /// Number of aggregates the trigger at `trigger_pos` reads.
    #[cfg(test)]
    pub(crate) fn aggregate_count(&self, trigger_pos: usize) -> usize {
        self.per_trigger[trigger_pos].len()
    }
}

/// The value of each aggregate from its accumulator.
pub(crate) fn values(aggs: &[AggCall], accs: &[Acc]) -> Vec<f64> {
    aggs.iter().zip(accs).map(|(a, acc)| acc.value(a.func)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_lang::spec::{AggFunc, BaseVar, PacketExpr, Var};

    fn agg(func: AggFunc, v: BaseVar) -> AggCall {
        AggCall {
            func,
            arg: PacketExpr::Var(Var {
                base: v,
                last_epoch: false,
            }),
        }
    }

    #[test]
    fn shared_measures_and_lazy_reset() {
        let t0 = [
            agg(AggFunc::Sum, BaseVar::Volume),
            agg(AggFunc::Max, BaseVar::Ttl),
        ];
        let t1 = [agg(AggFunc::Avg, BaseVar::Volume)];
        let mut s = MatchSet::new(vec![3, 7], &[&t0, &t1]);
        assert_eq!(s.measures.len(), 2);
        assert_eq!(s.aggregate_count(0), 2);
        let b = s.alloc();
        let p = PacketRecord {
            volume: 100,
            ttl: 64,
            ..PacketRecord::default()
        };
        s.update(b, 0, 10, &p, FlowContext::default());
        s.update(b, 0, 10, &p, FlowContext::default());
        let mut accs = vec![Acc::default(); 2];
        s.gather(b, 0, 0, &mut accs);
        assert_eq!(values(&t0, &accs), vec![200.0, 64.0]);
        // A new epoch in the same half resets it on first write.
        s.update(b, 0, 30, &p, FlowContext::default());
        assert!(s.has_epoch(b, 0, 30) && !s.has_epoch(b, 0, 10));
        let mut accs = vec![Acc::default(); 1];
        s.gather(b, 0, 1, &mut accs);
        assert_eq!(values(&t1, &accs), vec![100.0]);
    }
}
