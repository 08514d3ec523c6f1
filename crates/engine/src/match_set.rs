//! Match sets: the interned set of triggers a flow matched, and the layout
//! and storage of the statistics such flows keep.
//!
//! Flows that matched the same triggers share one [`MatchSet`], so the
//! per-flow state is just a set id and a block number. A block holds two
//! halves, one per epoch parity (double buffering: the sweep reads the
//! finished epoch's half while packets of the next epoch write the other).
//! Each half starts with a tag, the start time of the epoch whose
//! statistics it holds; a half with a stale tag is reset on first write
//! (lazy reset), so nothing is ever cleared in bulk. After the tag comes
//! the number of packets the flow had in that epoch: RTT samples write a
//! half too, and a group exists only where there were packets.

use clarion_wire::PacketRecord;

use crate::flow_list::{FlowList, FlowRef};
use crate::huge_pages;
use crate::measure::{
    add_sum, common_index, common_values, sum_value, Acc, Arg, Expr, FlowContext, Slot, StatFlags,
    COMMON_VARS,
};
use crate::prefetch::prefetch;
use crate::trigger_index::TriggerId;

/// A depth of a chain no flow has needed yet (`MatchSet::chain`).
pub(crate) const UNINTERNED: u32 = u32::MAX;

/// Tag of a half that holds no epoch yet.
const NO_EPOCH: u64 = u64::MAX;

/// See the module documentation.
///
/// What every packet reads comes first, in the first cache line (the
/// struct is aligned to one): a packet then misses at most once here.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct MatchSet {
    slab: Vec<u64>,
    /// Words per half: the tag plus every measure's statistics.
    half_words: usize,
    /// Per half, the start of the latest epoch in which some member flow
    /// wrote statistics: the monitor lists the set for that epoch's sweep once.
    marked: [u64; 2],
    /// When every measure is a bare common packet variable kept as a sum
    /// alone (as `sum(volume)`): for each such variable (by its
    /// [`common_index`]) the word offset of its sum in a half, 0 if no
    /// measure reads it. `update` then adds the values in straight-line
    /// code, without interpreting expressions or testing flags.
    plain_sums: Option<[u8; COMMON_VARS]>,
    /// Some trigger reads TCP connection state, so member flows keep it.
    pub(crate) needs_tcp: bool,
    /// Some measure reads RTT samples, so member flows list their first
    /// transmissions (else `is_lost` needs none of that list).
    pub(crate) needs_rtt: bool,
    // Second line: what the sweep reads per set.
    /// The member flows the sweep walks, per half: the flows whose half
    /// was first written in its epoch (or moved here with that epoch's
    /// statistics), each appended once per write that reset the half, and
    /// maybe stale references (see `flow_list.rs`); the sweep of that
    /// epoch walks it and empties it.
    pub(crate) written: [FlowList; 2],
    /// Sorted, distinct.
    pub(crate) triggers: Vec<TriggerId>,
    /// For each trigger (same order as `triggers`) that reads one measure
    /// only, the word offset of that measure's sum in a half, if it keeps
    /// one (else 0): a `sum(x)` tested per flow reads it without `gather`.
    sum_at: Vec<u32>,
    /// For each trigger (same order as `triggers`), for each statistic it
    /// reads ([`crate::trigger::Trigger::reads`]), the index of the measure.
    per_trigger: Vec<Vec<usize>>,
    /// Distinct measures with their place in a half block (offsets after
    /// the tag and packet count), and whether they read RTT samples rather than packets.
    measures: Vec<(Expr, Slot, bool)>,
    /// The measures packets update (not RTT samples), each argument in the
    /// form the packet path evaluates fastest.
    on_packets: Vec<(Arg, Slot)>,
    /// A half as a reset leaves it (tag aside): copied in whole, where
    /// resetting measure by measure took ~280 instructions a half.
    blank: Vec<u64>,
    free: Vec<u32>,
    /// Live flows using this set.
    pub(crate) flows: usize,
    /// Start of the epoch of the latest sweep this set was added to after
    /// it began (a flow moved here with that epoch's statistics).
    pub(crate) queued: u64,
    /// Advise the slab for huge pages as it grows.
    huge: bool,
    // Degraded mode (`monitor/shed.rs`); a set is its own full set otherwise.
    /// The set of every trigger the member flows matched (this one's id
    /// unless some were shed).
    pub(crate) full: u32,
    /// Triggers shed from `full` (sorted): the flows match them but are not measured for them.
    pub(crate) dropped: Vec<TriggerId>,
    /// On a full set in degraded mode: the set at each depth of shedding,
    /// `chain[0]` itself, the last one measuring nothing (MONA's states);
    /// [`UNINTERNED`] until a flow first needs that depth.
    pub(crate) chain: Vec<u32>,
    /// On a full set in degraded mode: its triggers, least important
    /// first (the order they are shed in), and the predicted update time
    /// of a member flow's packet at each depth.
    pub(crate) shed_order: Vec<TriggerId>,
    pub(crate) chain_costs: Vec<f64>,
    /// Predicted update time of a member flow's packet, nanoseconds.
    pub(crate) cost_ns: f64,
}

impl MatchSet {
    /// Builds a set from what its triggers read (`reads[i]` belongs to `triggers[i]`).
    pub(crate) fn new(
        triggers: Vec<TriggerId>,
        reads: &[&[(Expr, StatFlags)]],
        needs_tcp: bool,
        huge: bool,
    ) -> Self {
        let mut exprs: Vec<(Expr, StatFlags)> = Vec::new();
        let mut per_trigger = Vec::with_capacity(reads.len());
        for trigger_reads in reads {
            let mut idxs = Vec::with_capacity(trigger_reads.len());
            for (e, need) in trigger_reads.iter() {
                let i = match exprs.iter().position(|(x, _)| x == e) {
                    Some(i) => {
                        exprs[i].1 = exprs[i].1.union(*need);
                        i
                    }
                    None => {
                        exprs.push((e.clone(), *need));
                        exprs.len() - 1
                    }
                };
                idxs.push(i);
            }
            per_trigger.push(idxs);
        }
        let mut offset = 2;
        let measures: Vec<(Expr, Slot, bool)> = exprs
            .into_iter()
            .map(|(e, flags)| {
                let slot = Slot::new(offset, flags);
                offset += flags.words();
                let on_samples = e.reads_rtt();
                (e, slot, on_samples)
            })
            .collect();
        let needs_rtt = measures.iter().any(|m| m.2);
        let on_packets = measures
            .iter()
            .filter(|m| !m.2)
            .map(|(e, slot, _)| (Arg::of(e), *slot))
            .collect();
        let mut blank = vec![0; offset];
        for (_, slot, _) in &measures {
            slot.reset(&mut blank);
        }
        let sum_at = per_trigger
            .iter()
            .map(|idxs| match idxs[..] {
                [m] => measures[m]
                    .1
                    .sum_at()
                    .and_then(|at| u32::try_from(at).ok())
                    .unwrap_or(0),
                _ => 0,
            })
            .collect();
        let plain_sums = measures
            .iter()
            .try_fold([0; COMMON_VARS], |mut at, (e, slot, on_samples)| {
                let Expr::Var(v) = e else { return None };
                let i = usize::from(common_index(*v)?);
                // Offsets start at 2 (after the tag and packet count): 0 is free to mean "none".
                let offset = u8::try_from(slot.offset).ok()?;
                (!on_samples && slot.flags == StatFlags::SUM && at[i] == 0).then(|| {
                    at[i] = offset;
                    at
                })
            });
        MatchSet {
            triggers,
            sum_at,
            needs_rtt,
            measures,
            on_packets,
            blank,
            plain_sums,
            per_trigger,
            needs_tcp,
            half_words: offset,
            slab: Vec::new(),
            written: [FlowList::default(), FlowList::default()],
            free: Vec::new(),
            flows: 0,
            queued: NO_EPOCH,
            marked: [NO_EPOCH; 2],
            huge,
            full: u32::MAX,
            dropped: Vec::new(),
            chain: Vec::new(),
            shed_order: Vec::new(),
            chain_costs: Vec::new(),
            cost_ns: 0.0,
        }
    }

    /// 64-bit words of statistics a member flow keeps per epoch (tag and packet count included).
    pub(crate) fn half_words(&self) -> usize {
        self.half_words
    }

    /// Packets (not RTT samples) the block's half counted in its epoch.
    #[inline]
    pub(crate) fn packets_in(&self, block: u32, half: usize) -> u64 {
        self.slab[self.half_range(block, half).start + 1]
    }

    /// A fresh block with both halves empty.
    pub(crate) fn alloc(&mut self) -> u32 {
        let bw = 2 * self.half_words;
        let block = match self.free.pop() {
            Some(b) => b,
            None => {
                let cap = self.slab.capacity();
                self.slab.resize(self.slab.len() + bw, 0);
                if self.huge && self.slab.capacity() != cap {
                    huge_pages::advise(&self.slab);
                }
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

    /// Folds a packet at packet time `t` into the block's half for the
    /// epoch starting at `epoch`; true when that was the half's first write
    /// in the epoch (it was reset). Inlined: a call passes the flow
    /// context through memory and saves registers, a third of its cost.
    #[inline(always)]
    pub(crate) fn update(
        &mut self,
        block: u32,
        half: usize,
        epoch: u64,
        p: &PacketRecord,
        cx: FlowContext,
        t: u64,
    ) -> bool {
        let r = self.half_range(block, half);
        let (w, fresh) = half_for(&mut self.slab[r], &self.blank, epoch);
        w[1] += 1;
        match &self.plain_sums {
            Some(at) => {
                let (values, defined) = common_values(p, &cx);
                for (i, &at) in at.iter().enumerate() {
                    if at != 0 && defined & (1 << i) != 0 {
                        add_sum(w, usize::from(at), values[i]);
                    }
                }
            }
            None => update_general(w, &self.on_packets, p, &cx, t),
        }
        fresh
    }

    /// Folds an RTT sample taken at time `t` into the measures that read
    /// `rtt`; true when that was the half's first write in the epoch.
    pub(crate) fn update_sample(&mut self, block: u32, half: usize, epoch: u64, rtt: i64, t: u64) -> bool {
        let r = self.half_range(block, half);
        let (w, fresh) = half_for(&mut self.slab[r], &self.blank, epoch);
        for (e, slot, _) in self.measures.iter().filter(|m| m.2) {
            if let Some(v) = e.eval_sample(rtt) {
                slot.update(w, v, t);
            }
        }
        fresh
    }

    /// Marks the set as written in the epoch starting at `epoch` (in
    /// `half`); true the first time, when the monitor lists it for that
    /// epoch's sweep.
    #[inline]
    pub(crate) fn mark(&mut self, half: usize, epoch: u64) -> bool {
        let first = self.marked[half] != epoch;
        self.marked[half] = epoch;
        first
    }

    /// The list the sweep of `half` walks.
    #[inline]
    pub(crate) fn sweep_list(&mut self, half: usize) -> &mut FlowList {
        &mut self.written[half & 1]
    }

    /// The first chunk of the list the sweep of `half` walks (to prefetch it).
    #[inline]
    pub(crate) fn sweep_head(&self, half: usize) -> &[FlowRef] {
        self.written[half & 1].head()
    }

    /// Starts loading every line of the header the sweep reads: up to the
    /// sum offsets (the list and trigger ids are on the second line, the
    /// sum offsets' pointer on the third).
    #[inline]
    pub(crate) fn prefetch_header(&self) {
        let base: *const u8 = (self as *const Self).cast();
        let end = std::mem::offset_of!(MatchSet, sum_at) + std::mem::size_of::<Vec<u32>>();
        for off in (0..end).step_by(64) {
            prefetch(base.wrapping_add(off));
        }
    }

    /// Starts loading the start of a block's half.
    #[inline]
    pub(crate) fn prefetch(&self, block: u32, half: usize) {
        let r = self.half_range(block, half);
        // A half is not line-aligned: load its first and last word's lines.
        prefetch(self.slab.as_ptr().wrapping_add(r.start));
        prefetch(self.slab.as_ptr().wrapping_add(r.end - 1));
    }

    /// True when the half holds statistics of the epoch starting at `epoch`.
    #[inline]
    pub(crate) fn has_epoch(&self, block: u32, half: usize, epoch: u64) -> bool {
        self.slab[self.half_range(block, half).start] == epoch
    }

    /// Marks the half as gathered by the sweep of its epoch (its tag no
    /// longer matches any epoch), so that a flow moved to another set
    /// during that sweep (an install or removal between sweep steps) is
    /// not gathered twice. Its next write resets it as usual.
    #[inline]
    pub(crate) fn consume(&mut self, block: u32, half: usize) {
        let at = self.half_range(block, half).start;
        self.slab[at] = NO_EPOCH;
    }

    /// The half's tag: the start of the epoch whose statistics it holds.
    #[inline]
    pub(crate) fn epoch_of(&self, block: u32, half: usize) -> u64 {
        self.slab[self.half_range(block, half).start]
    }

    /// Where the sums' offsets of the triggers are (to prefetch them).
    #[inline]
    pub(crate) fn sum_at_ptr(&self) -> *const u32 {
        self.sum_at.as_ptr()
    }

    /// The packets of a block's half and the value of the sum the trigger
    /// at `trigger_pos` reads, if it reads one sum only (else `None`: see
    /// [`MatchSet::gather`]).
    #[inline]
    pub(crate) fn read_sum(&self, block: u32, half: usize, trigger_pos: usize) -> Option<(u64, f64)> {
        let at = *self.sum_at.get(trigger_pos)? as usize;
        let w = &self.slab[self.half_range(block, half)];
        (at != 0).then(|| (w[1], sum_value(w, at)))
    }

    /// Position of a trigger in this set.
    pub(crate) fn position(&self, t: TriggerId) -> Option<usize> {
        self.triggers.binary_search(&t).ok()
    }

    /// Adds the statistics a trigger reads to `accs` (one per read); gives
    /// the flow's packet count in the half.
    #[inline]
    pub(crate) fn gather(&self, block: u32, half: usize, trigger_pos: usize, accs: &mut [Acc]) -> u64 {
        let w = &self.slab[self.half_range(block, half)];
        for (acc, &m) in accs.iter_mut().zip(&self.per_trigger[trigger_pos]) {
            self.measures[m].1.merge_into(w, acc);
        }
        w[1]
    }

    /// Copies both halves of `block` of `from` into `block_here`, keeping
    /// the statistics of every measure both sets share.
    pub(crate) fn copy_from(&mut self, block_here: u32, from: &MatchSet, block_there: u32) {
        for half in 0..2 {
            let src = &from.slab[from.half_range(block_there, half)];
            let r = self.half_range(block_here, half);
            let dst = &mut self.slab[r];
            dst[0] = src[0];
            dst[1] = src[1];
            for (e, slot, _) in &self.measures {
                slot.reset(dst);
                if let Some((_, there, _)) = from.measures.iter().find(|(x, _, _)| x == e) {
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

/// `MatchSet::update` for any measures: interpreted, out of line so that
/// the plain sums' path stays small enough to inline.
#[inline(never)]
fn update_general(w: &mut [u64], measures: &[(Arg, Slot)], p: &PacketRecord, cx: &FlowContext, t: u64) {
    for (arg, slot) in measures {
        if let Some(v) = arg.eval(p, cx) {
            slot.update(w, v, t);
        }
    }
}

/// A block's half (`w`) made ready for the epoch starting at `epoch`:
/// reset if it held an older one (then the flag is true).
#[inline(always)]
fn half_for<'a>(w: &'a mut [u64], blank: &[u64], epoch: u64) -> (&'a mut [u64], bool) {
    if w[0] == epoch {
        return (w, false);
    }
    reset_half(w, blank, epoch);
    (w, true)
}

/// Once per flow and epoch: kept out of line, off the packet path.
#[cold]
#[inline(never)]
fn reset_half(w: &mut [u64], blank: &[u64], epoch: u64) {
    if w.len() == blank.len() {
        w.copy_from_slice(blank);
    }
    w[0] = epoch;
    w[1] = 0;
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_lang::spec::{AggFunc, BaseVar};

    fn read(func: AggFunc, v: BaseVar) -> (Expr, StatFlags) {
        (Expr::Var(v), StatFlags::for_agg(func))
    }

    fn values(funcs: &[AggFunc], accs: &[Acc]) -> Vec<f64> {
        funcs.iter().zip(accs).map(|(f, a)| a.value(*f)).collect()
    }

    #[test]
    fn shared_measures_and_lazy_reset() {
        let t0 = [
            read(AggFunc::Sum, BaseVar::Volume),
            read(AggFunc::Max, BaseVar::Ttl),
        ];
        let t1 = [read(AggFunc::Avg, BaseVar::Volume)];
        let mut s = MatchSet::new(vec![3, 7], &[&t0, &t1], false, false);
        assert_eq!(s.measures.len(), 2);
        assert_eq!(s.aggregate_count(0), 2);
        let b = s.alloc();
        let p = PacketRecord {
            volume: 100,
            ttl: 64,
            ..PacketRecord::default()
        };
        s.update(b, 0, 10, &p, FlowContext::default(), 11);
        s.update(b, 0, 10, &p, FlowContext::default(), 12);
        let mut accs = vec![Acc::default(); 2];
        assert_eq!(s.gather(b, 0, 0, &mut accs), 2);
        assert_eq!(values(&[AggFunc::Sum, AggFunc::Max], &accs), vec![200.0, 64.0]);
        // A new epoch in the same half resets it on first write.
        s.update(b, 0, 30, &p, FlowContext::default(), 31);
        assert!(s.has_epoch(b, 0, 30) && !s.has_epoch(b, 0, 10));
        let mut accs = vec![Acc::default(); 1];
        assert_eq!(s.gather(b, 0, 1, &mut accs), 1);
        assert_eq!(values(&[AggFunc::Avg], &accs), vec![100.0]);
    }

    #[test]
    fn plain_sums_take_the_fast_path_with_the_same_results() {
        let sums = [
            read(AggFunc::Sum, BaseVar::Volume),
            read(AggFunc::Sum, BaseVar::Packets),
            read(AggFunc::Sum, BaseVar::Size),
        ];
        // The same sums next to a maximum: interpreted.
        let mixed = [
            sums[0].clone(),
            sums[1].clone(),
            sums[2].clone(),
            read(AggFunc::Max, BaseVar::Ttl),
        ];
        let mut fast = MatchSet::new(vec![0], &[&sums], false, false);
        let mut slow = MatchSet::new(vec![0], &[&mixed], false, false);
        assert!(fast.plain_sums.is_some() && slow.plain_sums.is_none());
        let (bf, bs) = (fast.alloc(), slow.alloc());
        for (i, volume) in [100, 0, 7].into_iter().enumerate() {
            let p = PacketRecord {
                volume,
                size: 60 + i as u32,
                ttl: 64,
                ..PacketRecord::default()
            };
            fast.update(bf, 1, 10, &p, FlowContext::default(), 11);
            slow.update(bs, 1, 10, &p, FlowContext::default(), 11);
        }
        let (mut af, mut a_s) = (vec![Acc::default(); 3], vec![Acc::default(); 4]);
        assert_eq!(fast.gather(bf, 1, 0, &mut af), 3);
        assert_eq!(slow.gather(bs, 1, 0, &mut a_s), 3);
        let funcs = [AggFunc::Sum; 3];
        assert_eq!(values(&funcs, &af), vec![107.0, 3.0, 183.0]);
        assert_eq!(values(&funcs, &af), values(&funcs, &a_s[..3]));
    }

    #[test]
    fn rtt_samples_reach_only_rtt_measures_and_are_not_packets() {
        let last = StatFlags::N.union(StatFlags::LAST);
        let t0 = [
            read(AggFunc::Max, BaseVar::Rtt),
            read(AggFunc::Sum, BaseVar::Packets),
            (Expr::Var(BaseVar::Rtt), last),
        ];
        let mut s = MatchSet::new(vec![0], &[&t0], true, true);
        let b = s.alloc();
        s.update_sample(b, 1, 10, 500, 12);
        s.update_sample(b, 1, 10, 300, 14);
        s.update(b, 1, 10, &PacketRecord::default(), FlowContext::default(), 15);
        let mut accs = vec![Acc::default(); 3];
        assert_eq!(s.gather(b, 1, 0, &mut accs), 1);
        assert_eq!(values(&[AggFunc::Max, AggFunc::Sum], &accs), vec![500.0, 1.0]);
        assert_eq!(accs[2].last_value(), 300.0);
    }
}
