//! Per-flow TCP connection state: retransmissions, acknowledgements,
//! duplicate acks and RTT samples (`docs/semantics.md`, *TCP connection
//! state*).
//!
//! One [`TcpState`] belongs to one flow direction and one life of it. The
//! flow's own segments advance `snd_max`; segments of the reverse flow
//! acknowledge its data ([`TcpState::on_ack`]). Sequence numbers are kept
//! unwrapped, relative to the first one seen, in 64-bit integers.
//!
//! The list of first transmissions (for RTT samples and Karn's rule) is the
//! only state that grows; it is bounded by the configured limit, and a
//! segment that finds it full is not listed (the caller counts it).

use std::collections::VecDeque;

use clarion_wire::tcp_flags::{FIN, RST, SYN};
use clarion_wire::TcpInfo;

/// A first transmission awaiting its acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sent {
    start: i64,
    end: i64,
    time: u64,
    retransmitted: bool,
}

/// A flow's list of first transmissions (empty unless a trigger reads `rtt`).
pub(crate) type SentList = VecDeque<Sent>;

/// See the module documentation. Half a cache line, aligned: the packet
/// path's second miss for a TCP flow (after its entry) is one line, not
/// the two a 72-byte state straddled; the list of first transmissions is
/// kept apart ([`TcpStates`]), so that a state costs 32 bytes, not 64,
/// where nothing reads `rtt`.
#[derive(Clone, Debug)]
#[repr(align(32))]
pub(crate) struct TcpState {
    isn: u32,
    /// Largest payload sent.
    mss: u32,
    /// Highest sequence sent (exclusive end), relative to `isn`.
    pub(crate) snd_max: i64,
    /// Highest cumulative acknowledgement received, relative to `isn`.
    pub(crate) snd_una: i64,
    /// Bytes estimated delivered beyond `snd_una` (one `mss` per duplicate ack).
    pub(crate) dup: i64,
}

/// No connection state ([`TcpStates`]).
pub(crate) const NO_TCP: u32 = u32::MAX;

/// The connection states of the flows that keep one, in one slab indexed
/// by their flow entries' numbers, not a `Box` each: a new TCP flow
/// allocated and a freed one returned an 80-byte block to the allocator
/// (malloc, free and their consolidation were ~8 % of a run at a million
/// flows), and boxes were spread over 4 KiB pages the flow table's huge
/// pages do not cover. A flow's state is at its entry's number, so the
/// packet loop starts loading it with the entry, from the table's slot,
/// instead of after the entry has arrived (the state's load was the
/// packet path's largest stall at 100 k flows, ~10 % of its samples). The
/// slab is reserved for the flow capacity at once (address space only:
/// pages are touched as states are first used, up to the highest entry
/// with one), so it never moves, and it is advised for huge pages.
///
/// The lists of first transmissions are a second vector indexed as the
/// states, grown to a state's index only when one of its segments is
/// listed: where no trigger reads `rtt` (most), a state is its 32 bytes.
///
/// # Invariants
/// - A state in use is at its flow entry's number, which the entry names
///   ([`crate::flow_table::FlowEntry::tcp`]); an entry without one names
///   [`NO_TCP`].
/// - A released state keeps its segment list's memory for its next flow.
/// - `none` is empty: it stands for the list of a state that has none,
///   given only where nothing is listed.
#[derive(Debug, Default)]
pub(crate) struct TcpStates {
    states: Vec<TcpState>,
    sent: Vec<SentList>,
    none: SentList,
    /// States in use.
    live: usize,
}

impl TcpStates {
    /// Heap bytes reserved: the slab and the segment lists.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.states.capacity() * std::mem::size_of::<TcpState>()
            + self.sent.capacity() * std::mem::size_of::<SentList>()
            + self
                .sent
                .iter()
                .map(|l| l.capacity() * std::mem::size_of::<Sent>())
                .sum::<usize>()
    }

    /// A slab for up to `capacity` states (reserved, not touched).
    pub(crate) fn new(capacity: usize, huge: bool) -> Self {
        let states = Vec::with_capacity(capacity);
        if huge {
            crate::huge_pages::advise(&states);
        }
        TcpStates {
            states,
            sent: Vec::new(),
            none: SentList::new(),
            live: 0,
        }
    }

    /// A fresh state starting at `isn` for flow entry `at`; its index (`at`).
    #[inline]
    pub(crate) fn alloc(&mut self, at: u32, isn: u32) -> u32 {
        let i = at as usize;
        if i >= self.states.len() {
            self.grow(i);
        }
        if let Some(st) = self.states.get_mut(i) {
            *st = TcpState::new(isn);
        }
        if let Some(list) = self.sent.get_mut(i) {
            list.clear();
        }
        self.live += 1;
        at
    }

    /// States up to `i`'s, out of the packet path (entries are numbered
    /// from 0 up as the table fills, so this grows by one mostly).
    #[cold]
    #[inline(never)]
    fn grow(&mut self, i: usize) {
        self.states.resize(i + 1, TcpState::new(0));
    }

    /// The state `*slot` (flow entry `at`'s) names, a fresh one from
    /// `isn` if it names none (then `*slot` is set to it), with its list
    /// of first transmissions (made if `listing`). One bounds check on the
    /// packet path.
    #[inline]
    pub(crate) fn get_or_alloc(
        &mut self,
        slot: &mut u32,
        at: u32,
        isn: u32,
        listing: bool,
    ) -> (&mut TcpState, &mut SentList) {
        if *slot as usize >= self.states.len() {
            *slot = self.alloc(at, isn);
        }
        let i = *slot as usize;
        if listing && i >= self.sent.len() {
            self.grow_lists(i);
        }
        // In bounds: `alloc` grows `states` to the index it returns.
        let list = self.sent.get_mut(i).unwrap_or(&mut self.none);
        (&mut self.states[i], list)
    }

    /// Lists up to state `i`'s, out of the packet path.
    #[cold]
    #[inline(never)]
    fn grow_lists(&mut self, i: usize) {
        self.sent.resize_with(i + 1, SentList::new);
    }

    /// State `i` and its list of first transmissions (an empty one if it has
    /// none: give it only where nothing is listed).
    #[inline]
    pub(crate) fn get_mut_with_list(&mut self, i: u32) -> Option<(&mut TcpState, &mut SentList)> {
        let st = self.states.get_mut(i as usize)?;
        let list = self.sent.get_mut(i as usize).unwrap_or(&mut self.none);
        Some((st, list))
    }

    /// Forgets state `i`'s first transmissions (when nothing reads `rtt` any more).
    pub(crate) fn forget_sent(&mut self, i: u32) {
        if let Some(list) = self.sent.get_mut(i as usize) {
            *list = SentList::new();
        }
    }

    /// Ends state `i`'s use (if any, [`NO_TCP`] is none).
    #[inline]
    pub(crate) fn release(&mut self, i: u32) {
        if i != NO_TCP {
            self.live -= 1;
        }
    }

    #[inline]
    pub(crate) fn get(&self, i: u32) -> Option<&TcpState> {
        self.states.get(i as usize)
    }

    /// Starts loading state `i` (one line; any `i`: a hint, as for flow
    /// entry `i`'s state before its entry says whether it has one).
    #[inline]
    pub(crate) fn prefetch(&self, i: u32) {
        crate::prefetch::prefetch(self.states.as_ptr().wrapping_add(i as usize));
    }

    /// States in use.
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> usize {
        self.live
    }
}

/// What one of the flow's own segments was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    pub(crate) is_lost: bool,
    /// A first transmission the full list could not take.
    pub(crate) unlisted: bool,
    /// `snd_max` after the segment, for the caller to use rather than
    /// reload: read back at once beside `snd_una` (one 16-byte load), the
    /// field just stored could not be forwarded and the load waited for
    /// the store to reach the cache (7 % of the packet path's samples).
    pub(crate) snd_max: i64,
}

impl TcpState {
    pub(crate) fn new(isn: u32) -> Self {
        TcpState {
            isn,
            snd_max: 0,
            snd_una: 0,
            dup: 0,
            mss: 0,
        }
    }

    /// The state of a new connection from `isn`, keeping the segment
    /// list's memory.
    pub(crate) fn restart(&mut self, sent: &mut SentList, isn: u32) {
        *self = TcpState::new(isn);
        sent.clear();
    }

    /// A SYN with another initial sequence number starts a new connection.
    #[inline]
    pub(crate) fn restarts(&self, tcp: &TcpInfo) -> bool {
        tcp.flags & SYN != 0 && tcp.seq != self.isn
    }

    /// `x` unwrapped to the 64-bit relative value nearest `snd_max`.
    #[inline]
    fn unwrap(&self, x: u32) -> i64 {
        let here = self.isn.wrapping_add(self.snd_max as u32);
        self.snd_max + i64::from(x.wrapping_sub(here) as i32)
    }

    /// Steps 2–5: one of the flow's own segments, with `payload` bytes, at
    /// `time`. First transmissions are listed up to `limit`; 0 lists none
    /// (no trigger reads `rtt`: `is_lost` needs only `snd_max`).
    /// Inlined into the packet path; the list's work is out of line.
    #[inline]
    pub(crate) fn on_segment(
        &mut self,
        sent: &mut SentList,
        tcp: &TcpInfo,
        payload: u32,
        time: u64,
        limit: usize,
    ) -> Segment {
        let syn_fin = i64::from(tcp.flags & SYN != 0) + i64::from(tcp.flags & FIN != 0);
        self.mss = self.mss.max(payload);
        let payload = i64::from(payload);
        let len = payload + syn_fin;
        let start = self.unwrap(tcp.seq);
        let end = start + len;
        let probe = syn_fin == 0 && payload == 1 && end == self.snd_max;
        let is_lost = len > 0 && start < self.snd_max && !probe;
        let mut unlisted = false;
        if len > 0 && start >= self.snd_max && limit > 0 {
            unlisted = !list(sent, start, end, time, limit);
        }
        if is_lost && !sent.is_empty() {
            mark_retransmitted(sent, start, end);
        }
        self.snd_max = self.snd_max.max(end);
        Segment {
            is_lost,
            unlisted,
            snd_max: self.snd_max,
        }
    }

    /// Step 6: a segment of the reverse flow acknowledging this flow's data
    /// at `time`. Gives the RTT sample, if any.
    pub(crate) fn on_ack(
        &mut self,
        sent: &mut SentList,
        ack_tcp: &TcpInfo,
        ack_payload: u32,
        time: u64,
    ) -> Option<i64> {
        let a = self.unwrap(ack_tcp.ack);
        if a > self.snd_una {
            let mut latest = None;
            let mut karn = false;
            // First transmissions are listed in increasing `end`.
            while let Some(s) = sent.front().filter(|s| s.end <= a) {
                latest = Some(s.time);
                karn |= s.retransmitted;
                sent.pop_front();
            }
            self.dup = (self.dup - (a - self.snd_una)).max(0);
            self.snd_una = a;
            return match latest {
                Some(t0) if !karn => Some(time.saturating_sub(t0) as i64),
                _ => None,
            };
        }
        let pure = ack_payload == 0 && ack_tcp.flags & (SYN | FIN | RST) == 0;
        if a == self.snd_una && pure && self.snd_max > self.snd_una {
            self.dup += i64::from(self.mss);
        }
        None
    }
}

/// Lists a first transmission; false when the list is full.
#[inline(never)]
fn list(sent: &mut SentList, start: i64, end: i64, time: u64, limit: usize) -> bool {
    if sent.len() >= limit {
        return false;
    }
    sent.push_back(Sent {
        start,
        end,
        time,
        retransmitted: false,
    });
    true
}

/// Marks the listed first transmissions a retransmission of `start..end` overlaps.
#[cold]
#[inline(never)]
fn mark_retransmitted(sent: &mut SentList, start: i64, end: i64) {
    // First transmissions are disjoint and in sequence order: find the
    // first that ends after `start`, mark on while they begin before `end`.
    let first = sent.partition_point(|s| s.end <= start);
    for s in sent.range_mut(first..).take_while(|s| s.start < end) {
        s.retransmitted = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_wire::tcp_flags::ACK;

    #[test]
    fn a_state_is_half_a_cache_line() {
        assert_eq!(std::mem::size_of::<TcpState>(), 32);
        assert_eq!(std::mem::align_of::<TcpState>(), 32);
    }

    fn seg(seq: u32, flags: u8) -> TcpInfo {
        TcpInfo {
            seq,
            flags,
            ..TcpInfo::default()
        }
    }

    fn ack(n: u32) -> TcpInfo {
        TcpInfo {
            ack: n,
            flags: ACK,
            ..TcpInfo::default()
        }
    }

    #[test]
    fn the_slab_reuses_released_states_as_new_connections() {
        let mut slab = TcpStates::new(4, false);
        let a = slab.alloc(0, 1000);
        let b = slab.alloc(2, 5000);
        assert_eq!((a, b), (0, 2), "at their entries");
        let mut slot = a;
        let (st, list) = slab.get_or_alloc(&mut slot, 0, 1000, true);
        st.on_segment(list, &seg(1000, SYN), 0, 10, 8);
        st.on_segment(list, &seg(1001, ACK), 100, 20, 8);
        assert_eq!(slot, a);
        assert_eq!(list.len(), 2, "the SYN and the data segment listed");
        assert_eq!(slab.get(a).unwrap().snd_max, 101);
        slab.release(a);
        slab.release(NO_TCP);
        assert_eq!(slab.in_use(), 1, "NO_TCP releases nothing");
        let c = slab.alloc(0, 7000);
        assert_eq!(c, a, "the entry's state is reused");
        let fresh = TcpState::new(7000);
        let (st, list) = slab.get_mut_with_list(c).unwrap();
        assert_eq!(
            (st.isn, st.snd_max, st.snd_una, st.dup, st.mss, list.len()),
            (fresh.isn, 0, 0, 0, 0, 0),
            "as a new connection's"
        );
        // A state that never listed has no list, and is given an empty one.
        let (_, none) = slab.get_mut_with_list(b).unwrap();
        assert!(none.is_empty());
        assert_eq!(
            (a, b, slab.sent.len()),
            (0, 2, 1),
            "lists up to the one that listed"
        );
        assert_eq!(slab.get(b).unwrap().isn, 5000, "others untouched");
        assert!(slab.get(NO_TCP).is_none());
    }

    #[test]
    fn handshake_data_and_a_delayed_ack() {
        let isn = 1000;
        let mut l = SentList::new();
        let mut s = TcpState::new(isn);
        assert!(!s.on_segment(&mut l, &seg(isn, SYN), 0, 10, 8).is_lost);
        assert_eq!(s.on_ack(&mut l, &ack(isn + 1), 0, 25), Some(15));
        s.on_segment(&mut l, &seg(isn + 1, ACK), 100, 30, 8);
        s.on_segment(&mut l, &seg(isn + 101, ACK), 100, 32, 8);
        // One ack covers both: the sample runs from the latest.
        assert_eq!(s.on_ack(&mut l, &ack(isn + 201), 0, 50), Some(18));
        assert_eq!((s.snd_max, s.snd_una, s.dup), (201, 201, 0));
    }

    #[test]
    fn retransmission_karn_and_dup_acks() {
        let mut l = SentList::new();
        let mut s = TcpState::new(0);
        s.on_segment(&mut l, &seg(0, ACK), 100, 0, 8);
        s.on_segment(&mut l, &seg(100, ACK), 100, 1, 8);
        // Two duplicate acks while data is outstanding: one mss each.
        assert_eq!(s.on_ack(&mut l, &ack(0), 0, 2), None);
        assert_eq!(s.on_ack(&mut l, &ack(0), 0, 3), None);
        assert_eq!(s.dup, 200);
        assert!(s.on_segment(&mut l, &seg(0, ACK), 100, 4, 8).is_lost);
        // The ack covers a retransmitted segment: no sample; dup shrinks.
        assert_eq!(s.on_ack(&mut l, &ack(100), 0, 9), None);
        assert_eq!(s.dup, 100);
        assert_eq!(s.on_ack(&mut l, &ack(200), 0, 9), Some(8));
        assert_eq!(s.dup, 0);
    }

    #[test]
    fn keepalive_is_not_lost_and_sequence_wraps() {
        let mut l = SentList::new();
        let mut s = TcpState::new(u32::MAX - 10);
        s.on_segment(&mut l, &seg(u32::MAX - 10, ACK), 100, 0, 8);
        assert_eq!(s.snd_max, 100);
        assert!(
            !s.on_segment(&mut l, &seg(88, ACK), 1, 1, 8).is_lost,
            "keep-alive at snd_max − 1"
        );
        assert!(s.on_segment(&mut l, &seg(80, ACK), 9, 2, 8).is_lost);
        // Karn: the acked segment was partly sent again.
        assert_eq!(s.on_ack(&mut l, &ack(89), 0, 5), None);
        assert_eq!(s.snd_una, 100);
    }

    #[test]
    fn the_list_is_bounded() {
        let mut l = SentList::new();
        let mut s = TcpState::new(0);
        assert!(!s.on_segment(&mut l, &seg(0, ACK), 10, 0, 1).unlisted);
        assert!(s.on_segment(&mut l, &seg(10, ACK), 10, 1, 1).unlisted);
        assert_eq!(s.on_ack(&mut l, &ack(20), 0, 3), Some(3));
        // Listing nothing at all is not a full list; losses are still seen.
        let mut l = SentList::new();
        let mut s = TcpState::new(0);
        assert!(!s.on_segment(&mut l, &seg(0, ACK), 10, 0, 0).unlisted);
        assert!(s.on_segment(&mut l, &seg(0, ACK), 10, 1, 0).is_lost);
        assert_eq!(
            s.on_ack(&mut l, &ack(10), 0, 5),
            None,
            "nothing listed, no sample"
        );
        assert_eq!(s.snd_una, 10);
    }
}
