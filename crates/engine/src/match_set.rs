//! Match sets: the interned set of triggers a flow matched, and the layout
//! and storage of the statistics such flows keep.
//!
//! Flows that matched the same triggers share one [`MatchSet`], so the
//! per-flow state is just a set id and the index of the flow's record in
//! each of the set's two epoch logs (`epoch_log.rs`): the statistics of
//! the member flows written in an epoch, one record each, appended on the
//! flow's first write in the epoch, so nothing is ever cleared in bulk and
//! a flow idle in an epoch has no statistics there. A record counts the
//! packets the flow had in that epoch: RTT samples write a record too, and
//! a group exists only where there were packets.

use clarion_wire::PacketRecord;

use crate::decaying_peak::DecayingPeak;
use crate::epoch_log::{EpochLog, FIRST_MEASURE, NO_EPOCH, PACKETS, TAG};
use crate::measure::{
    add_sum, common_index, common_values, Acc, Arg, Expr, FlowContext, Slot, StatFlags, COMMON_VARS,
};
use crate::prefetch::prefetch;
use crate::trigger_index::TriggerId;

/// The index of no record: a flow's entry holds it for the running epoch
/// when the flow has written statistics in the epoch but has no record in
/// its set (it joined the set since).
pub(crate) const NO_REC: u32 = u32::MAX;

/// What the packet path knows of the record index a flow's entry holds
/// for the running epoch ([`MatchSet::record`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The flow's first write in the epoch: it has no record yet (a record
    /// is only made by a write, which moves the entry's `stats_epoch` into
    /// the epoch).
    First,
    /// The flow wrote in the epoch: the index is its record's, or
    /// [`NO_REC`] if it joined the set since (`Monitor::migrate_to` keeps
    /// this so), and is used without reading the record's owner.
    Known,
    /// Either (the flow acknowledged itself in this packet, which may or
    /// may not have written): the record's owner tells.
    Unsure,
}

/// A depth of a chain no flow has needed yet (`MatchSet::chain`).
pub(crate) const UNINTERNED: u32 = u32::MAX;

/// See the module documentation.
///
/// What every packet reads comes first, in the first two cache lines (the
/// struct is aligned to one): the logs, to locate a record, then what
/// updates it.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct MatchSet {
    /// Per epoch parity, the statistics of the member flows written in
    /// that epoch (or moved here with them); the sweep of that epoch walks
    /// it and empties it.
    logs: [EpochLog; 2],
    // Second line.
    /// Words per record: tag, packet count, owner, key and every measure's statistics.
    stride: usize,
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
    /// Advise the logs for huge pages as they grow.
    huge: bool,
    /// A record as a flow's first write finds it (tag, owner and key
    /// aside): copied in whole, where resetting measure by measure took
    /// ~280 instructions a record.
    blank: Vec<u64>,
    // Third line: what the sweep reads per set.
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
    /// Per half, the log's length in words, decaying: see [`MatchSet::clear_log`].
    log_peak: [DecayingPeak; 2],
    /// The measures packets update (not RTT samples), each argument in the
    /// form the packet path evaluates fastest.
    on_packets: Vec<(Arg, Slot)>,
    /// Live flows using this set.
    pub(crate) flows: usize,
    /// Start of the epoch of the latest sweep this set was added to after
    /// it began (a flow moved here with that epoch's statistics).
    pub(crate) queued: u64,
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
    /// Heap bytes reserved by its epoch logs.
    pub(crate) fn log_bytes(&self) -> usize {
        self.logs.iter().map(EpochLog::heap_bytes).sum()
    }

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
        let mut offset = FIRST_MEASURE;
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
                // Offsets start at FIRST_MEASURE (after the tag, packet count and owner): 0 is free to mean "none".
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
            stride: offset,
            logs: [EpochLog::default(), EpochLog::default()],
            log_peak: [DecayingPeak::default(); 2],
            huge,
            flows: 0,
            queued: NO_EPOCH,
            marked: [NO_EPOCH; 2],
            full: u32::MAX,
            dropped: Vec::new(),
            chain: Vec::new(),
            shed_order: Vec::new(),
            chain_costs: Vec::new(),
            cost_ns: 0.0,
        }
    }

    /// 64-bit words a packet of a member flow updates in an epoch (tag and
    /// packet count included, owner and key not): what the cost model
    /// counts (`shed::set_cost`, as the chains' predicted costs).
    pub(crate) fn update_words(&self) -> usize {
        self.stride - FIRST_MEASURE + 2
    }

    /// A flow joins the set.
    pub(crate) fn join(&mut self) {
        self.flows += 1;
    }

    /// A flow leaves the set (its records stay where they are, to be swept).
    pub(crate) fn leave(&mut self) {
        self.flows = self.flows.saturating_sub(1);
    }

    /// The record of flow `owner` (its entry number) in the
    /// log of `half` for the epoch starting at `epoch`, given what the
    /// caller knows of `rec`, the index the flow's entry kept (see
    /// [`Lookup`]); appended if the flow has none. The flag is true when it
    /// was appended: the set must then be listed for that epoch's sweep
    /// ([`MatchSet::mark`]).
    #[inline(always)]
    pub(crate) fn record(
        &mut self,
        half: usize,
        epoch: u64,
        owner: u32,
        rec: u32,
        lookup: Lookup,
    ) -> (u32, bool) {
        match self.existing(half, epoch, owner, rec, lookup) {
            Some(rec) => (rec, false),
            None => (self.append_blank(half, epoch, owner), true),
        }
    }

    /// The flow's record in the log of `half`, if what the caller knows of
    /// `rec` ([`Lookup`]) says it has one: a known index as it is, an
    /// unsure one if the record's owner is the flow.
    #[inline(always)]
    fn existing(&self, half: usize, epoch: u64, owner: u32, rec: u32, lookup: Lookup) -> Option<u32> {
        match lookup {
            Lookup::Known if rec != NO_REC => {
                debug_assert_eq!(
                    self.logs[half & 1].find(epoch, owner, rec),
                    Some(rec),
                    "a known record is the flow's"
                );
                Some(rec)
            }
            Lookup::Unsure => self.find_unsure(half, epoch, owner, rec),
            _ => None,
        }
    }

    /// [`MatchSet::find`] for [`Lookup::Unsure`] (a flow acknowledging
    /// itself): rare, out of line, so that the packet path stays small.
    #[inline(never)]
    fn find_unsure(&self, half: usize, epoch: u64, owner: u32, rec: u32) -> Option<u32> {
        self.find(half, epoch, owner, rec)
    }

    /// A record of the epoch for flow `owner` appended to the log of
    /// `half` as a flow's first write finds it (blank); its index.
    #[inline(never)]
    fn append_blank(&mut self, half: usize, epoch: u64, owner: u32) -> u32 {
        self.logs[half & 1].append(self.stride, epoch, owner, &self.blank, epoch, self.huge)
    }

    /// The record of flow `owner` in the log of `half` for the epoch
    /// starting at `epoch`, if it has one at `rec`.
    #[inline]
    pub(crate) fn find(&self, half: usize, epoch: u64, owner: u32, rec: u32) -> Option<u32> {
        self.logs[half & 1].find(epoch, owner, rec)
    }

    /// Folds a packet at packet time `t` into record `rec` of `half` (of
    /// the running epoch, from [`MatchSet::record`]). Inlined: a call
    /// passes the flow context through memory and saves registers, a
    /// third of its cost.
    #[inline(always)]
    pub(crate) fn update(&mut self, rec: u32, half: usize, p: &PacketRecord, cx: FlowContext, t: u64) {
        let Some(w) = self.logs[half & 1].record_mut(self.stride, rec) else {
            return;
        };
        fold_packet(w, &self.plain_sums, &self.on_packets, p, cx, t);
    }

    /// [`MatchSet::record`] and [`MatchSet::update`] in one: a record
    /// appended is built with the packet already folded in and then
    /// stored, so the packet path never loads words it has just stored to
    /// a line still on its way (a profile put a third of a 100 k-flow
    /// packet path on that load; staging took its median batch from 140
    /// to 133 ns). The flag is [`MatchSet::record`]'s.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_packet(
        &mut self,
        half: usize,
        epoch: u64,
        owner: u32,
        rec: u32,
        lookup: Lookup,
        p: &PacketRecord,
        cx: FlowContext,
        t: u64,
    ) -> (u32, bool) {
        match self.existing(half, epoch, owner, rec, lookup) {
            Some(rec) => {
                self.update(rec, half, p, cx, t);
                (rec, false)
            }
            None => (self.append_packet(half, epoch, owner, p, cx, t), true),
        }
    }

    /// A record of the epoch for flow `owner` appended to the log of
    /// `half` with the packet folded in (see [`MatchSet::write_packet`]);
    /// its index. Out of line.
    #[inline(never)]
    fn append_packet(
        &mut self,
        half: usize,
        epoch: u64,
        owner: u32,
        p: &PacketRecord,
        cx: FlowContext,
        t: u64,
    ) -> u32 {
        let mut buf = [0u64; STAGED_WORDS];
        let Some(w) = buf.get_mut(..self.stride) else {
            // A record too long to stage: appended, then written.
            let rec = self.append_blank(half, epoch, owner);
            self.update(rec, half, p, cx, t);
            return rec;
        };
        w.copy_from_slice(&self.blank);
        fold_packet(w, &self.plain_sums, &self.on_packets, p, cx, t);
        self.logs[half & 1].append(self.stride, epoch, owner, w, epoch, self.huge)
    }

    /// Folds an RTT sample taken at time `t` into the measures of record
    /// `rec` of `half` that read `rtt`.
    pub(crate) fn update_sample(&mut self, rec: u32, half: usize, rtt: i64, t: u64) {
        let Some(w) = self.logs[half & 1].record_mut(self.stride, rec) else {
            return;
        };
        for (e, slot, _) in self.measures.iter().filter(|m| m.2) {
            if let Some(v) = e.eval_sample(rtt) {
                slot.update(w, v, t);
            }
        }
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

    /// Records in the log of `half`.
    pub(crate) fn log_len(&self, half: usize) -> usize {
        self.logs[half & 1].len(self.stride)
    }

    /// The index of the record after the one at `rec` in the log of `half`
    /// (a record's index is the offset of its first word), if there is one.
    #[inline]
    pub(crate) fn next_record(&self, rec: usize, half: usize) -> Option<usize> {
        let next = rec + self.stride;
        (next <= self.logs[half & 1].words()).then_some(next)
    }

    /// Words per record.
    #[inline]
    pub(crate) fn stride(&self) -> usize {
        self.stride
    }

    /// The entry number of record `rec`'s flow, in the log of `half`.
    #[inline]
    pub(crate) fn owner(&self, rec: u32, half: usize) -> u32 {
        self.logs[half & 1].owner(rec)
    }

    /// Empties the log of `half` once its sweep has gathered it, and gives
    /// back memory a burst grew it to once its epochs have been half of
    /// that for a while (`decaying_peak.rs`). A million-flow run kept its
    /// logs at 2.4 times what an epoch wrote: 58 bytes a flow where a
    /// steady epoch needs about 25.
    pub(crate) fn clear_log(&mut self, half: usize) {
        let h = half & 1;
        self.log_peak[h].note(self.logs[h].words());
        self.logs[h].clear();
        self.logs[h].release_over(self.log_peak[h], self.stride, self.huge);
    }

    /// Starts loading every line of the header the sweep reads: up to the
    /// sum offsets (the logs and trigger ids are on the second line, the
    /// sum offsets' pointer on the third).
    #[inline]
    pub(crate) fn prefetch_header(&self) {
        let base: *const u8 = (self as *const Self).cast();
        let end = std::mem::offset_of!(MatchSet, sum_at) + std::mem::size_of::<Vec<u32>>();
        for off in (0..end).step_by(64) {
            prefetch(base.wrapping_add(off));
        }
    }

    /// Starts loading the two lines of the header the packet path reads.
    #[inline]
    pub(crate) fn prefetch_for_packets(&self) {
        let base: *const u8 = (self as *const Self).cast();
        prefetch(base);
        prefetch(base.wrapping_add(64));
    }

    /// Starts loading where the next record of `half` goes.
    #[inline]
    pub(crate) fn prefetch_tail(&self, half: usize) {
        self.logs[half & 1].prefetch_tail(self.stride);
    }

    /// Starts loading record `rec` of `half`, if its log has one there.
    #[inline]
    pub(crate) fn prefetch(&self, rec: u32, half: usize) {
        self.logs[half & 1].prefetch(self.stride, rec as usize);
    }

    /// Starts loading the record at word `rec` of `half` as the sweep,
    /// reading in order, reaches it (the hardware's stream prefetch starts
    /// later).
    #[inline]
    pub(crate) fn prefetch_for_sweep(&self, rec: usize, half: usize) {
        self.logs[half & 1].prefetch(self.stride, rec);
    }

    /// True when record `rec` of `half` holds statistics of the epoch starting at `epoch`.
    #[inline]
    pub(crate) fn has_epoch(&self, rec: u32, half: usize, epoch: u64) -> bool {
        self.logs[half & 1].has_epoch(rec, epoch)
    }

    /// Marks record `rec` of `half` as gathered by the sweep of its epoch,
    /// so that no later visit (the set listed twice in a sweep) gathers it
    /// again.
    #[inline]
    pub(crate) fn consume(&mut self, rec: u32, half: usize) {
        self.logs[half & 1].retire(self.stride, rec, false);
    }

    /// Retires record `rec` of `half`: its flow left the set for none, and
    /// no sweep gathers it.
    pub(crate) fn retire(&mut self, rec: u32, half: usize) {
        self.logs[half & 1].retire(self.stride, rec, true);
    }

    /// Where the sums' offsets of the triggers are (to prefetch them).
    #[inline]
    pub(crate) fn sum_at_ptr(&self) -> *const u32 {
        self.sum_at.as_ptr()
    }

    /// Position of a trigger in this set.
    pub(crate) fn position(&self, t: TriggerId) -> Option<usize> {
        self.triggers.binary_search(&t).ok()
    }

    /// Where the sum the trigger at `trigger_pos` reads lies in a record,
    /// if it reads one sum only (else see [`MatchSet::gather`]).
    #[inline]
    pub(crate) fn sum_word(&self, trigger_pos: usize) -> Option<usize> {
        let at = *self.sum_at.get(trigger_pos)? as usize;
        (at != 0).then_some(at)
    }

    /// The words of record `rec` of `half`.
    #[inline]
    pub(crate) fn record_words(&self, rec: u32, half: usize) -> &[u64] {
        self.logs[half & 1].record(self.stride, rec)
    }

    /// The words of record `rec` of `half`, to write (tests).
    #[cfg(test)]
    pub(crate) fn record_words_mut(&mut self, rec: u32, half: usize) -> Option<&mut [u64]> {
        self.logs[half & 1].record_mut(self.stride, rec)
    }

    /// Adds the statistics a trigger reads to `accs` (one per read); gives
    /// the flow's packet count in the record.
    #[inline]
    pub(crate) fn gather(&self, rec: u32, half: usize, trigger_pos: usize, accs: &mut [Acc]) -> u64 {
        let w = self.logs[half & 1].record(self.stride, rec);
        for (acc, &m) in accs.iter_mut().zip(&self.per_trigger[trigger_pos]) {
            self.measures[m].1.merge_into(w, acc);
        }
        w[PACKETS]
    }

    /// Moves record `rec` of `half` of set `from` (flow `owner`) here:
    /// appends a record keeping the statistics of every measure both sets
    /// share, with the same tag, and retires the one in `from`. Its index
    /// here.
    pub(crate) fn move_from(&mut self, half: usize, owner: u32, from: &mut MatchSet, rec: u32) -> u32 {
        let h = half & 1;
        let src_log = &from.logs[h];
        let epoch = src_log.epoch();
        let src = src_log.record(from.stride, rec);
        let mut init = self.blank.clone();
        init[TAG] = src[TAG];
        init[PACKETS] = src[PACKETS];
        for (e, slot, _) in &self.measures {
            if let Some((_, there, _)) = from.measures.iter().find(|(x, _, _)| x == e) {
                slot.copy_common(&mut init, there, src);
            }
        }
        let here = self.logs[h].append(self.stride, epoch, owner, &init, init[TAG], self.huge);
        from.logs[h].retire(from.stride, rec, true);
        here
    }

    /// Number of aggregates the trigger at `trigger_pos` reads.
    #[cfg(test)]
    pub(crate) fn aggregate_count(&self, trigger_pos: usize) -> usize {
        self.per_trigger[trigger_pos].len()
    }
}

/// Words of the longest record [`MatchSet::write_packet`] builds on the
/// stack before appending it (longer ones are appended, then written).
const STAGED_WORDS: usize = 32;

/// Folds a packet at packet time `t` into a record's words `w`.
#[inline(always)]
fn fold_packet(
    w: &mut [u64],
    plain_sums: &Option<[u8; COMMON_VARS]>,
    on_packets: &[(Arg, Slot)],
    p: &PacketRecord,
    cx: FlowContext,
    t: u64,
) {
    if let Some(n) = w.get_mut(PACKETS) {
        *n += 1;
    }
    match plain_sums {
        Some(at) => {
            let (values, defined) = common_values(p, &cx);
            for (i, &at) in at.iter().enumerate() {
                if at != 0 && defined & (1 << i) != 0 {
                    add_sum(w, usize::from(at), values[i]);
                }
            }
        }
        None => update_general(w, on_packets, p, &cx, t),
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

    /// The record of flow 0 in `half` for `epoch`, as the packet path finds it.
    fn rec(s: &mut MatchSet, half: usize, epoch: u64, at: u32) -> u32 {
        s.record(half, epoch, 0, at, Lookup::Unsure).0
    }

    #[test]
    fn shared_measures_and_a_record_per_epoch() {
        let t0 = [
            read(AggFunc::Sum, BaseVar::Volume),
            read(AggFunc::Max, BaseVar::Ttl),
        ];
        let t1 = [read(AggFunc::Avg, BaseVar::Volume)];
        let mut s = MatchSet::new(vec![3, 7], &[&t0, &t1], false, false);
        assert_eq!(s.measures.len(), 2);
        assert_eq!(s.aggregate_count(0), 2);
        let p = PacketRecord {
            volume: 100,
            ttl: 64,
            ..PacketRecord::default()
        };
        let (b, fresh) = s.record(0, 10, 0, 0, Lookup::First);
        assert!(fresh);
        s.update(b, 0, &p, FlowContext::default(), 11);
        assert_eq!(s.record(0, 10, 0, b, Lookup::Known), (b, false));
        s.update(b, 0, &p, FlowContext::default(), 12);
        let mut accs = vec![Acc::default(); 2];
        assert_eq!(s.gather(b, 0, 0, &mut accs), 2);
        assert_eq!(values(&[AggFunc::Sum, AggFunc::Max], &accs), vec![200.0, 64.0]);
        // A new epoch in the same half: a fresh record, the old epoch's gone.
        let (b2, fresh) = s.record(0, 30, 0, b, Lookup::Unsure);
        assert!(fresh);
        s.update(b2, 0, &p, FlowContext::default(), 31);
        assert!(s.has_epoch(b2, 0, 30) && !s.has_epoch(b2, 0, 10));
        let mut accs = vec![Acc::default(); 1];
        assert_eq!(s.gather(b2, 0, 1, &mut accs), 1);
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
        let (bf, bs) = (rec(&mut fast, 1, 10, 0), rec(&mut slow, 1, 10, 0));
        for (i, volume) in [100, 0, 7].into_iter().enumerate() {
            let p = PacketRecord {
                volume,
                size: 60 + i as u32,
                ttl: 64,
                ..PacketRecord::default()
            };
            fast.update(bf, 1, &p, FlowContext::default(), 11);
            slow.update(bs, 1, &p, FlowContext::default(), 11);
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
        let b = rec(&mut s, 1, 10, 0);
        s.update_sample(b, 1, 500, 12);
        s.update_sample(b, 1, 300, 14);
        s.update(b, 1, &PacketRecord::default(), FlowContext::default(), 15);
        let mut accs = vec![Acc::default(); 3];
        assert_eq!(s.gather(b, 1, 0, &mut accs), 1);
        assert_eq!(values(&[AggFunc::Max, AggFunc::Sum], &accs), vec![500.0, 1.0]);
        assert_eq!(accs[2].last_value(), 300.0);
    }

    #[test]
    fn records_too_long_to_stage_are_written_alike() {
        // Six standard deviations: 8 + 6 * 5 words, more than STAGED_WORDS.
        let vars = [
            BaseVar::Volume,
            BaseVar::Size,
            BaseVar::Ttl,
            BaseVar::Packets,
            BaseVar::Ecn,
            BaseVar::TcpFlags,
        ];
        let reads: Vec<_> = vars.iter().map(|&v| read(AggFunc::Stddev, v)).collect();
        let short = [read(AggFunc::Stddev, BaseVar::Volume)];
        let mut long = MatchSet::new(vec![0], &[&reads], false, false);
        let mut one = MatchSet::new(vec![0], &[&short], false, false);
        assert!(long.stride > STAGED_WORDS && one.stride <= STAGED_WORDS);
        let mut at = (NO_REC, NO_REC);
        for (i, volume) in [10u32, 30, 20].into_iter().enumerate() {
            let p = PacketRecord {
                volume,
                ..PacketRecord::default()
            };
            let lookup = if i == 0 { Lookup::First } else { Lookup::Known };
            at.0 = long
                .write_packet(0, 10, 0, at.0, lookup, &p, FlowContext::default(), 11)
                .0;
            at.1 = one
                .write_packet(0, 10, 0, at.1, lookup, &p, FlowContext::default(), 11)
                .0;
        }
        let (mut a, mut b) = (vec![Acc::default(); vars.len()], vec![Acc::default(); 1]);
        assert_eq!(long.gather(at.0, 0, 0, &mut a), 3);
        assert_eq!(one.gather(at.1, 0, 0, &mut b), 3);
        let sd = a[0].value(AggFunc::Stddev);
        assert!((sd - (200.0f64 / 3.0).sqrt()).abs() < 1e-9, "{sd}");
        assert_eq!(sd, b[0].value(AggFunc::Stddev));
    }

    #[test]
    fn a_moved_record_keeps_the_shared_measures_and_leaves_its_set() {
        let vol = read(AggFunc::Sum, BaseVar::Volume);
        let ttl = read(AggFunc::Max, BaseVar::Ttl);
        let mut from = MatchSet::new(vec![1], &[&[vol.clone(), ttl]], false, false);
        let mut to = MatchSet::new(
            vec![1, 2],
            &[
                std::slice::from_ref(&vol),
                &[read(AggFunc::Sum, BaseVar::Packets)],
            ],
            false,
            false,
        );
        let (r, _) = from.record(0, 10, 4, 0, Lookup::First);
        let p = PacketRecord {
            volume: 30,
            ttl: 5,
            ..PacketRecord::default()
        };
        from.update(r, 0, &p, FlowContext::default(), 11);
        let here = to.move_from(0, 4, &mut from, r);
        assert_eq!(from.find(0, 10, 4, r), None);
        assert!(!from.has_epoch(r, 0, 10));
        assert_eq!(to.find(0, 10, 4, here), Some(here));
        assert_eq!(to.owner(here, 0), 4);
        let mut accs = vec![Acc::default(); 1];
        assert_eq!(to.gather(here, 0, 0, &mut accs), 1);
        assert_eq!(values(&[AggFunc::Sum], &accs), vec![30.0]);
        // A measure the old set did not keep starts blank.
        let mut accs = vec![Acc::default(); 1];
        to.gather(here, 0, 1, &mut accs);
        assert_eq!(values(&[AggFunc::Sum], &accs), vec![0.0]);
    }
}
