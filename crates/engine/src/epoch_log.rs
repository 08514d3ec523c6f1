//! Epoch logs: the statistics of the flows a match set's members wrote in
//! one epoch, appended in the order the flows were first written, and read
//! in that order by the epoch's sweep.
//!
//! # Design
//! A record is named by the offset of its first word in its log (no
//! multiplication or division by the set's stride on the packet path).
//! A set keeps two logs, one per epoch parity (double buffering: the
//! sweep reads the finished epoch's log while packets of the next epoch
//! append to the other). A flow's first write in an epoch appends a
//! record; its later writes in that epoch find the record again through
//! the index its entry keeps (`FlowEntry::rec`). A record holds the
//! flow's statistics and its entry number, so the sweep streams through
//! one array in order and tests thresholds without reading any flow
//! entry: before, every visit followed a list reference to the flow's
//! entry and from there to its statistics block, two dependent misses a
//! flow once flows outnumber the cache. The flow's key is read from its
//! entry only where the sweep needs it (a report, a group coarser than
//! the flow), prefetched by entry number from the record; a copy of the
//! key in every record (40 of the benchmark's 88 bytes) made each append
//! and each later write touch a second line, and the logs ~18 bytes a
//! flow bigger at a million flows. Statistics exist only for flows written in
//! the last two epochs, not a block for every flow tracked, and a log is
//! reused from epoch to epoch: a new flow allocates nothing here. A log
//! is one vector and an epoch, so a set's two logs share one cache line
//! (the packet path reads it to locate a record).
//!
//! # Record layout
//! `stride` words: [`TAG`] (the start of the epoch whose statistics the
//! record holds, [`NO_EPOCH`] once gathered or moved away), [`PACKETS`]
//! (packets, not RTT samples, it counted), [`OWNER`] (the flow's entry
//! number, [`NO_OWNER`] once moved away), then the measures from
//! [`FIRST_MEASURE`].
//!
//! # Invariants
//! - All records of a log are of its `epoch`; a log is emptied when a
//!   record of a later epoch is appended (lazily: nothing is cleared in
//!   bulk at an epoch's start) or once its sweep has gathered it.
//! - A flow has at most one record with its entry number as owner in a
//!   log: a record found by [`EpochLog::find`] is the flow's, an entry's
//!   index from an older epoch or another set finds nothing.
//! - A record's owner is live, with the key it had when the record was
//!   written, until the record's epoch is swept: the monitor frees an
//!   entry only once every epoch it wrote in is swept (`Monitor::reclaim`),
//!   and a flow's new life keeps its key.
//!
//! # Cost
//! An append is `stride` sequential words at the log's end (6 for the
//! benchmark's sets: 48 bytes); a later write is one access to the
//! record, whose first line holds the tag, owner and packet count. A sweep
//! visit reads the next record, in order, and the flow's entry where it
//! needs the key.

use crate::decaying_peak::DecayingPeak;
use crate::huge_pages;
use crate::prefetch::prefetch_span;

/// Word of a record holding its epoch's start.
pub(crate) const TAG: usize = 0;
/// Word of a record holding its packet count.
pub(crate) const PACKETS: usize = 1;
/// Word of a record holding its flow's entry number.
pub(crate) const OWNER: usize = 2;
/// Where a record's measures start.
pub(crate) const FIRST_MEASURE: usize = OWNER + 1;

/// Tag of a record that holds no epoch (gathered, or moved to another set).
pub(crate) const NO_EPOCH: u64 = u64::MAX;
/// Owner of a record moved to another set.
pub(crate) const NO_OWNER: u32 = u32::MAX;

/// See the module documentation. The stride (words per record) is the
/// set's, passed in: the log is kept to 32 bytes.
#[derive(Debug)]
pub(crate) struct EpochLog {
    /// Start of the epoch whose records it holds.
    epoch: u64,
    words: Vec<u64>,
}

impl Default for EpochLog {
    fn default() -> Self {
        EpochLog {
            epoch: NO_EPOCH,
            words: Vec::new(),
        }
    }
}

impl EpochLog {
    /// Heap bytes reserved.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.words.capacity() * std::mem::size_of::<u64>()
    }

    /// Records in the log of `stride` words each.
    pub(crate) fn len(&self, stride: usize) -> usize {
        self.words.len() / stride
    }

    /// Words in the log: a record's index is the offset of its first word,
    /// so the sweep walks `(0..words).step_by(stride)`.
    #[inline]
    pub(crate) fn words(&self) -> usize {
        self.words.len()
    }

    /// The start of the epoch whose records it holds.
    #[inline]
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The record at `rec` if it is of the epoch starting at `epoch` and
    /// belongs to flow `owner` (a flow's entry number); the index its entry
    /// kept may be from another epoch or set.
    #[inline]
    pub(crate) fn find(&self, epoch: u64, owner: u32, rec: u32) -> Option<u32> {
        if self.epoch != epoch {
            return None;
        }
        let at = (rec as usize).checked_add(OWNER)?;
        self.words
            .get(at)
            .is_some_and(|&w| w as u32 == owner)
            .then_some(rec)
    }

    /// Appends a record of the epoch starting at `epoch` for flow `owner`,
    /// its statistics `init` (one record, whose words up to
    /// [`FIRST_MEASURE`] are overwritten) and tag `tag`; its index. Empties
    /// the log first if it held an older epoch. Growing, it advises its
    /// memory for huge pages if `huge`.
    #[inline(always)]
    pub(crate) fn append(
        &mut self,
        stride: usize,
        epoch: u64,
        owner: u32,
        init: &[u64],
        tag: u64,
        huge: bool,
    ) -> u32 {
        if self.epoch != epoch {
            self.restart(epoch);
        }
        let base = self.words.len();
        if self.words.capacity() - base < stride {
            self.grow(stride, huge);
        }
        self.words.extend_from_slice(&init[..stride]);
        if let Some(w) = self.words.get_mut(base..base + FIRST_MEASURE) {
            w[TAG] = tag;
            w[OWNER] = u64::from(owner);
        }
        base as u32
    }

    /// Empties the log for the epoch starting at `epoch`; once an epoch a
    /// set is written, off the packet path.
    #[cold]
    #[inline(never)]
    fn restart(&mut self, epoch: u64) {
        self.clear();
        self.epoch = epoch;
    }

    /// Room for at least one more record (by half again: doubling left a
    /// log's capacity at up to twice what its epochs use, 2.4 times on
    /// average at a million flows), advised for huge pages if `huge` (a
    /// set's log of a busy epoch spans several).
    #[cold]
    #[inline(never)]
    fn grow(&mut self, stride: usize, huge: bool) {
        let more = (self.words.len() / 2).max(16 * stride);
        self.words.reserve_exact(more);
        if huge {
            huge_pages::advise(&self.words);
        }
    }

    /// Gives back memory if the (empty) log holds more than twice `peak`
    /// words (and more than a first growth): keeps a quarter over it.
    pub(crate) fn release_over(&mut self, peak: DecayingPeak, stride: usize, huge: bool) {
        let cut = peak.cut(self.words.capacity(), 16 * stride);
        if let Some(keep) = cut.filter(|_| self.words.is_empty()) {
            self.words = Vec::with_capacity(keep);
            if huge {
                huge_pages::advise(&self.words);
            }
        }
    }

    /// Empties the log (keeping its memory and its epoch: a record moved
    /// here during that epoch's sweep is still appended to it).
    pub(crate) fn clear(&mut self) {
        self.words.clear();
    }

    /// The words of record `rec`.
    #[inline]
    pub(crate) fn record(&self, stride: usize, rec: u32) -> &[u64] {
        let base = rec as usize;
        &self.words[base..base + stride]
    }

    /// The words of record `rec`, to write (`None` past the log's end).
    #[inline]
    pub(crate) fn record_mut(&mut self, stride: usize, rec: u32) -> Option<&mut [u64]> {
        let base = rec as usize;
        self.words.get_mut(base..base + stride)
    }

    /// The entry number of record `rec`'s flow ([`NO_OWNER`] past the log).
    #[inline]
    pub(crate) fn owner(&self, rec: u32) -> u32 {
        self.words
            .get(rec as usize + OWNER)
            .map_or(NO_OWNER, |&w| w as u32)
    }

    /// True when record `rec` holds statistics of the epoch starting at `epoch`.
    #[inline]
    pub(crate) fn has_epoch(&self, rec: u32, epoch: u64) -> bool {
        self.words.get(rec as usize + TAG) == Some(&epoch)
    }

    /// Marks record `rec` as gathered (or moved away, `owner_too`): its tag
    /// names no epoch, so no later visit gathers it again.
    #[inline]
    pub(crate) fn retire(&mut self, stride: usize, rec: u32, owner_too: bool) {
        let base = rec as usize;
        if let Some(w) = self.words.get_mut(base..base + stride) {
            w[TAG] = NO_EPOCH;
            if owner_too {
                w[OWNER] = u64::from(NO_OWNER);
            }
        }
    }

    /// Starts loading record `rec` (its first and last words' lines: a
    /// record is not line-aligned), if the log has it.
    #[inline]
    pub(crate) fn prefetch(&self, stride: usize, rec: usize) {
        let base = rec;
        if base + stride <= self.words.len() {
            // A record (48 bytes in the benchmark) straddles two lines
            // at half of the offsets.
            prefetch_span(
                self.words.as_ptr().wrapping_add(base),
                stride * std::mem::size_of::<u64>(),
            );
        }
    }

    /// Starts loading the lines the next append of a `stride`-word record
    /// writes (a log reused from epoch to epoch has them in memory the
    /// sweep read an epoch ago).
    #[inline]
    pub(crate) fn prefetch_tail(&self, stride: usize) {
        prefetch_span(
            self.words.as_ptr().wrapping_add(self.words.len()),
            stride * std::mem::size_of::<u64>(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRIDE: usize = FIRST_MEASURE + 2;

    #[test]
    fn a_burst_s_memory_is_given_back_once_quiet_not_before() {
        let blank = [0; STRIDE];
        let mut log = EpochLog::default();
        for i in 0..10_000 {
            log.append(STRIDE, 100, i, &blank, 100, false);
        }
        let burst = log.heap_bytes();
        let len = log.words();
        let peak = |words: usize| {
            let mut p = DecayingPeak::default();
            p.note(words);
            p
        };
        log.clear();
        // A peak near the burst's length keeps it (epochs that busy come back).
        log.release_over(peak(len * 3 / 4), STRIDE, false);
        assert_eq!(log.heap_bytes(), burst);
        // Not while it holds records.
        log.append(STRIDE, 200, 1, &blank, 200, false);
        log.release_over(peak(STRIDE), STRIDE, false);
        assert_eq!(log.heap_bytes(), burst);
        // Empty, with a peak of a few records: a quarter over the first growth.
        log.clear();
        log.release_over(peak(STRIDE), STRIDE, false);
        assert_eq!(log.heap_bytes(), 20 * STRIDE * 8);
        assert_eq!(log.epoch(), 200, "keeps its epoch");
    }

    #[test]
    fn a_record_is_found_by_its_owner_in_its_epoch_only() {
        let mut log = EpochLog::default();
        let mut blank = [0; STRIDE];
        blank[FIRST_MEASURE..].copy_from_slice(&[7, 8]);
        let a = log.append(STRIDE, 100, 3, &blank, 100, false);
        let b = log.append(STRIDE, 100, 9, &blank, 100, false);
        assert_eq!((a, b), (0, STRIDE as u32));
        assert_eq!(log.find(100, 3, a), Some(a));
        assert_eq!(log.find(100, 9, b), Some(b));
        // Another flow's index, an index past the end, another epoch.
        assert_eq!(log.find(100, 3, b), None);
        assert_eq!(log.find(100, 3, 7 * STRIDE as u32), None);
        assert_eq!(log.find(100, 3, 1), None, "not a record's start");
        assert_eq!(log.find(200, 3, a), None);
        assert_eq!(log.record(STRIDE, b)[FIRST_MEASURE..], [7, 8]);
        assert_eq!(log.owner(b), 9);
        assert!(log.has_epoch(a, 100));
        // Gathered: still its owner's (a later write of the same epoch
        // cannot happen), but never gathered again.
        log.retire(STRIDE, a, false);
        assert!(!log.has_epoch(a, 100));
        // Moved away: no longer found.
        log.retire(STRIDE, b, true);
        assert_eq!(log.find(100, 9, b), None);
        assert_eq!(log.owner(b), NO_OWNER);
        assert_eq!(log.owner(7 * STRIDE as u32), NO_OWNER, "past the log");
        // A later epoch's first append empties it.
        let c = log.append(STRIDE, 200, 9, &blank, 200, false);
        assert_eq!((c, log.len(STRIDE), log.epoch()), (0, 1, 200));
        assert_eq!(log.find(200, 9, c), Some(0));
        assert_eq!(log.find(100, 3, a), None);
    }

    #[test]
    fn cleared_it_keeps_its_epoch() {
        let mut log = EpochLog::default();
        log.append(STRIDE, 10, 1, &[0; STRIDE], 10, false);
        log.clear();
        assert_eq!((log.len(STRIDE), log.epoch()), (0, 10));
        assert_eq!(log.append(STRIDE, 10, 2, &[0; STRIDE], 10, false), 0);
        assert_eq!(log.len(STRIDE), 1);
    }
}
