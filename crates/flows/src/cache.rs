//! The microflow cache: TurboFlow's mFR table (§2.4), in software.
//!
//! # Design
//!
//! `C` slots in `C / L` sets of `L` ways (`L = 1`: direct mapped). A
//! flow's set is a hash of its [`FlowKey`] (seeded, so the model can
//! average over hash functions); inside the set a slot holds at most one
//! flow's [`Microflow`]: its packets since it entered the slot. A packet
//!
//! - **hits** when its flow is in the set: it is folded into the
//!   microflow (counts add, flags join, extremes widen), unless it starts a
//!   new flow record (below);
//! - **misses** otherwise: it takes an empty way, or else evicts the set's
//!   least recently used microflow to the [`Aggregator`] (a *collision*,
//!   the only eviction [`MicroflowCache::collisions`] counts), and asks the
//!   aggregator where the flow's open record began.
//!
//! # Record boundaries in the cache
//!
//! A microflow may not straddle two flow records, so the cache decides
//! the boundaries the semantics put inside it (see `meter`): on a hit, a
//! packet whose packet clock is more than the idle timeout past the
//! microflow's last packet, or more than the active timeout past the
//! *record's* first packet, sends the microflow to the aggregator with the
//! end reason (it merges it into its open part and emits the record) and
//! starts a fresh microflow; a packet with FIN or RST is folded in and the
//! microflow leaves at once with reason `End`.
//!
//! # Invariants
//!
//! 1. A key is in at most one slot, and only in its own set.
//! 2. A cached microflow is the *last* part of its flow's open record: any
//!    open record the aggregator holds for the key began earlier and
//!    continues into it, and `record_first_clock` is that record's first
//!    packet clock (the aggregator's `first_clock`, or the microflow's own
//!    first packet when the aggregator holds nothing for the key).
//! 3. `last_clock` is the packet clock of the microflow's latest packet,
//!    so it is the open record's last packet clock.
//! 4. Every packet is in exactly one microflow until it reaches the
//!    aggregator; `sent` counts the microflows that did.
//!
//! # Cost
//!
//! A hit is one hash, one set probe (`L` key compares) and the fold; a miss
//! adds one aggregator merge (the evicted microflow) and one aggregator
//! lookup (the record's start). [`MicroflowCache::scan_idle`] is `O(C)`.

use clarion_records::{EndReason, FlowRecord};
use clarion_wire::{tcp_flags, FlowKey, PacketRecord};

use crate::aggregator::Aggregator;
use crate::FlowError;

/// The timeouts that end flow records, in packet-clock nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// A packet more than this after its record's last packet starts a new record.
    pub idle_ns: u64,
    /// A packet more than this after its record's first packet starts a new record.
    pub active_ns: u64,
}

/// A flow's packets since it entered its cache slot (an mFR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Microflow {
    /// The packets' totals (`end_reason` is meaningless here).
    pub record: FlowRecord,
    /// Packet clock of the latest packet.
    pub last_clock: u64,
    /// Packet clock of the first packet of the flow record this is part of.
    pub record_first_clock: u64,
}

impl Microflow {
    fn start(p: &PacketRecord, clock: u64, record_first_clock: u64) -> Microflow {
        Microflow {
            record: FlowRecord::of_packet(p.key, p.ts_ns, p.size, flags_of(p)),
            last_clock: clock,
            record_first_clock,
        }
    }

    #[inline]
    fn add(&mut self, p: &PacketRecord, clock: u64) {
        let r = &mut self.record;
        r.first_ns = r.first_ns.min(p.ts_ns);
        r.last_ns = r.last_ns.max(p.ts_ns);
        r.packets += 1;
        r.bytes += u64::from(p.size);
        r.tcp_flags |= flags_of(p);
        r.min_size = r.min_size.min(p.size);
        r.max_size = r.max_size.max(p.size);
        self.last_clock = clock;
    }
}

/// The TCP flag byte of a packet (0 without a TCP header).
#[inline]
pub(crate) fn flags_of(p: &PacketRecord) -> u8 {
    p.tcp.map_or(0, |t| t.flags)
}

/// Whether the packet ends its flow (TCP FIN or RST).
#[inline]
pub(crate) fn ends_flow(p: &PacketRecord) -> bool {
    flags_of(p) & (tcp_flags::FIN | tcp_flags::RST) != 0
}

/// A 64-bit hash of the key's three words (multiply-fold, as the
/// engine's flow table does), mixed with `seed`, then a SplitMix64
/// finaliser: without it, keys one port apart never shared a set under
/// any seed (multiply-fold's top bits move with the low bits of a
/// difference), which the model's uniform hash does not allow.
#[inline]
pub fn hash_key(k: &FlowKey, seed: u64) -> u64 {
    let w = |b: &[u8; 16]| {
        let (mut lo, mut hi) = ([0u8; 8], [0u8; 8]);
        lo.copy_from_slice(&b[..8]);
        hi.copy_from_slice(&b[8..]);
        u64::from_le_bytes(lo) ^ u64::from_le_bytes(hi).rotate_left(32)
    };
    let fold = |a: u64, b: u64| {
        let p = u128::from(a) * u128::from(b);
        (p as u64) ^ ((p >> 64) as u64)
    };
    let tail = u64::from(k.src_port)
        | u64::from(k.dst_port) << 16
        | u64::from(k.vlan) << 32
        | u64::from(k.proto) << 48
        | u64::from(k.flags) << 56;
    let h = fold(
        w(&k.src_ip) ^ 0x243f_6a88_85a3_08d3 ^ seed,
        w(&k.dst_ip) ^ u64::from(k.vni) << 32 ^ 0x1319_8a2e_0370_7344,
    );
    let mut z = fold(h ^ tail, 0x9e37_79b9_7f4a_7c15 ^ seed.rotate_left(17));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The microflow cache (see the module doc).
#[derive(Clone, Debug)]
pub struct MicroflowCache {
    slots: Vec<Option<Microflow>>,
    /// Bit `i` set iff slot `i` is full: scans and drains visit only full
    /// slots (a sparse trace scanned 4096 slots a second of packet time
    /// for some 50 flows, most of its cost).
    occupied: Vec<u64>,
    /// Per slot: the `tick` of its last use (LRU inside a set).
    used: Vec<u64>,
    ways: usize,
    sets: usize,
    seed: u64,
    tick: u64,
    packets: u64,
    collisions: u64,
    sent: u64,
}

impl MicroflowCache {
    /// A cache of `slots` slots in sets of `ways` (any sizes with
    /// `ways` dividing `slots`), hashing with `seed`.
    pub fn new(slots: usize, ways: usize, seed: u64) -> Result<MicroflowCache, FlowError> {
        if slots == 0 {
            return Err(FlowError::NoSlots);
        }
        if ways == 0 {
            return Err(FlowError::NoWays);
        }
        if !slots.is_multiple_of(ways) {
            return Err(FlowError::UnevenSets { slots, ways });
        }
        Ok(MicroflowCache {
            slots: vec![None; slots],
            occupied: vec![0; slots.div_ceil(64)],
            used: vec![0; slots],
            ways,
            sets: slots / ways,
            seed,
            tick: 0,
            packets: 0,
            collisions: 0,
            sent: 0,
        })
    }

    /// The first slot of the key's set.
    #[inline]
    fn set_base(&self, key: &FlowKey) -> usize {
        // Multiply-shift range reduction: any set count, no division.
        let h = hash_key(key, self.seed);
        ((u128::from(h) * self.sets as u128) >> 64) as usize * self.ways
    }

    #[inline]
    fn find(&self, base: usize, key: &FlowKey) -> Option<usize> {
        (base..base + self.ways).find(|&i| self.slots[i].as_ref().is_some_and(|m| m.record.key == *key))
    }

    /// Whether the key has a microflow in the cache.
    pub fn contains(&self, key: &FlowKey) -> bool {
        self.find(self.set_base(key), key).is_some()
    }

    /// Sends a slot's microflow to the aggregator, ending its record with
    /// `end` if given.
    #[inline]
    fn send(&mut self, i: usize, end: Option<EndReason>, agg: &mut Aggregator, out: &mut Vec<FlowRecord>) {
        if let Some(m) = self.slots[i].take() {
            self.occupied[i / 64] &= !(1 << (i % 64));
            self.sent += 1;
            agg.absorb(&m, end, out);
        }
    }

    #[inline]
    fn put(&mut self, i: usize, m: Microflow) {
        self.occupied[i / 64] |= 1 << (i % 64);
        self.slots[i] = Some(m);
    }

    /// The full slots, in order (a copy of the bitmap: callers empty slots
    /// while they walk).
    fn full_slots(&self) -> impl Iterator<Item = usize> {
        let words = self.occupied.clone();
        words.into_iter().enumerate().flat_map(|(w, mut bits)| {
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    w * 64 + b
                })
            })
        })
    }

    /// Folds one packet in at packet clock `clock` (the largest timestamp
    /// so far, at least `p.ts_ns`); records that end go to `out`.
    #[inline]
    pub fn process(
        &mut self,
        p: &PacketRecord,
        clock: u64,
        t: Timeouts,
        agg: &mut Aggregator,
        out: &mut Vec<FlowRecord>,
    ) {
        self.packets += 1;
        self.tick += 1;
        let base = self.set_base(&p.key);
        let i = match self.find(base, &p.key) {
            Some(i) => {
                let boundary = match &mut self.slots[i] {
                    Some(m) if clock.saturating_sub(m.last_clock) > t.idle_ns => Some(EndReason::Idle),
                    Some(m) if clock.saturating_sub(m.record_first_clock) > t.active_ns => {
                        Some(EndReason::Active)
                    }
                    Some(m) => {
                        m.add(p, clock);
                        None
                    }
                    None => None, // `find` saw it full
                };
                if boundary.is_some() {
                    // Invariant 2: the aggregator's part continues into this
                    // one, so the record ends here and nothing stays open.
                    self.send(i, boundary, agg, out);
                    self.put(i, Microflow::start(p, clock, clock));
                }
                i
            }
            None => {
                let set = base..base + self.ways;
                let i = set
                    .clone()
                    .find(|&i| self.slots[i].is_none())
                    .or_else(|| set.min_by_key(|&i| self.used[i]))
                    .unwrap_or(base);
                if self.slots[i].is_some() {
                    self.collisions += 1;
                    self.send(i, None, agg, out);
                }
                let start = agg.record_start(&p.key, clock, t, out);
                self.put(i, Microflow::start(p, clock, start));
                i
            }
        };
        self.used[i] = self.tick;
        if ends_flow(p) {
            self.send(i, Some(EndReason::End), agg, out);
        }
    }

    /// Ends the records of microflows whose last packet is more than
    /// `idle_ns` before `clock` (invariant 3: their records are idle).
    /// Returns the smallest `last_clock` of the microflows left
    /// (`u64::MAX` when none).
    pub fn scan_idle(
        &mut self,
        clock: u64,
        idle_ns: u64,
        agg: &mut Aggregator,
        out: &mut Vec<FlowRecord>,
    ) -> u64 {
        let mut oldest = u64::MAX;
        for i in self.full_slots() {
            let Some(last) = self.slots[i].as_ref().map(|m| m.last_clock) else {
                continue;
            };
            if clock.saturating_sub(last) > idle_ns {
                self.send(i, Some(EndReason::Idle), agg, out);
            } else {
                oldest = oldest.min(last);
            }
        }
        oldest
    }

    /// Sends every microflow to the aggregator, records left open.
    pub fn drain(&mut self, agg: &mut Aggregator, out: &mut Vec<FlowRecord>) {
        for i in self.full_slots() {
            self.send(i, None, agg, out);
        }
    }

    /// The cached microflows.
    pub fn microflows(&self) -> impl Iterator<Item = &Microflow> {
        self.slots.iter().flatten()
    }

    /// Checks the occupancy bitmap against the slots (tests).
    #[cfg(test)]
    fn bitmap_agrees(&self) -> bool {
        self.full_slots()
            .eq((0..self.slots.len()).filter(|&i| self.slots[i].is_some()))
    }

    /// Packets processed.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Microflows evicted by another flow's packet (collisions only).
    pub fn collisions(&self) -> u64 {
        self.collisions
    }

    /// Microflows sent to the aggregator, for any reason.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// `collisions / packets` (0 before any packet).
    pub fn eviction_ratio(&self) -> f64 {
        if self.packets == 0 {
            0.0
        } else {
            self.collisions as f64 / self.packets as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_wire::{proto, TcpInfo};

    const T: Timeouts = Timeouts {
        idle_ns: 1_000,
        active_ns: 10_000,
    };

    fn key(n: u8) -> FlowKey {
        FlowKey::new(
            [10, 0, 0, n].into(),
            [10, 0, 1, 1].into(),
            proto::TCP,
            Some((1000 + u16::from(n), 80)),
            None,
        )
    }

    fn pkt(n: u8, ts: u64, flags: u8) -> PacketRecord {
        PacketRecord {
            ts_ns: ts,
            key: key(n),
            size: 100 + u32::from(n),
            tcp: Some(TcpInfo {
                flags,
                ..TcpInfo::default()
            }),
            ..PacketRecord::default()
        }
    }

    #[test]
    fn rejects_impossible_shapes() {
        assert_eq!(MicroflowCache::new(0, 1, 0).unwrap_err(), FlowError::NoSlots);
        assert_eq!(MicroflowCache::new(4, 0, 0).unwrap_err(), FlowError::NoWays);
        assert_eq!(
            MicroflowCache::new(6, 4, 0).unwrap_err(),
            FlowError::UnevenSets { slots: 6, ways: 4 }
        );
        assert!(
            MicroflowCache::new(6, 3, 0).is_ok(),
            "any size, not only powers of two"
        );
    }

    #[test]
    fn one_slot_evicts_on_every_flow_change_and_merges_hits() {
        let mut c = MicroflowCache::new(1, 1, 0).unwrap();
        let mut agg = Aggregator::new();
        let mut out = Vec::new();
        for (n, ts) in [(1, 0), (1, 1), (2, 2), (2, 3), (1, 4)] {
            c.process(&pkt(n, ts, 0), ts, T, &mut agg, &mut out);
        }
        assert!(out.is_empty(), "no record ended");
        assert_eq!((c.packets(), c.collisions(), c.sent()), (5, 2, 2));
        let m = c.microflows().next().unwrap();
        assert_eq!(
            (m.record.key, m.record.packets, m.record_first_clock),
            (key(1), 1, 0)
        );
        assert_eq!(c.eviction_ratio(), 2.0 / 5.0);
    }

    #[test]
    fn lru_keeps_the_recently_used_way() {
        // Two ways in one set: 1, 2, 1, 3 evicts 2 (least recently used), not 1.
        let mut c = MicroflowCache::new(2, 2, 0).unwrap();
        let mut agg = Aggregator::new();
        let mut out = Vec::new();
        for (n, ts) in [(1, 0), (2, 1), (1, 2), (3, 3)] {
            c.process(&pkt(n, ts, 0), ts, T, &mut agg, &mut out);
        }
        assert_eq!(c.collisions(), 1);
        assert!(c.contains(&key(1)) && c.contains(&key(3)) && !c.contains(&key(2)));
        let m = c.microflows().find(|m| m.record.key == key(1)).unwrap();
        assert_eq!(m.record.packets, 2);
    }

    #[test]
    fn boundaries_split_microflows() {
        let mut c = MicroflowCache::new(4, 1, 0).unwrap();
        let mut agg = Aggregator::new();
        let mut out = Vec::new();
        // Idle: 0, 500, then 1_600 (> 1_000 after 500).
        for ts in [0, 500, 1_600] {
            c.process(&pkt(1, ts, 0), ts, T, &mut agg, &mut out);
        }
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].packets, out[0].end_reason), (2, EndReason::Idle));
        // Active: every 900 ns until more than 10_000 after 1_600.
        let mut ts = 1_600;
        while ts <= 11_600 {
            ts += 900;
            c.process(&pkt(1, ts, 0), ts, T, &mut agg, &mut out);
        }
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].end_reason, EndReason::Active);
        assert_eq!(out[1].first_ns, 1_600);
        assert!(out[1].last_ns - out[1].first_ns <= T.active_ns);
        // FIN joins the open record and ends it; the slot empties.
        c.process(&pkt(1, ts + 1, tcp_flags::FIN), ts + 1, T, &mut agg, &mut out);
        assert_eq!(out.len(), 3);
        assert_eq!((out[2].packets, out[2].end_reason), (2, EndReason::End));
        assert!(!c.contains(&key(1)));
        assert_eq!(agg.open_flows(), 0);
    }

    #[test]
    fn scan_ends_idle_microflows_only() {
        let mut c = MicroflowCache::new(8, 1, 0).unwrap();
        let mut agg = Aggregator::new();
        let mut out = Vec::new();
        c.process(&pkt(1, 0, 0), 0, T, &mut agg, &mut out);
        c.process(&pkt(2, 900, 0), 900, T, &mut agg, &mut out);
        assert_eq!(
            c.scan_idle(1_001, T.idle_ns, &mut agg, &mut out),
            900,
            "the oldest left"
        );
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].key, out[0].end_reason), (key(1), EndReason::Idle));
        assert!(c.contains(&key(2)) && !c.contains(&key(1)));
    }

    #[test]
    fn occupancy_bitmap_follows_the_slots() {
        // 3 sets of 2 ways (not a power of two), 20 keys, FINs and scans.
        let mut c = MicroflowCache::new(6, 2, 3).unwrap();
        let mut agg = Aggregator::new();
        let mut out = Vec::new();
        let mut x = 12_345u64;
        for ts in 0..3_000u64 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let n = (x >> 40) as u8 % 20;
            let flags = if (x >> 20).is_multiple_of(13) {
                tcp_flags::FIN
            } else {
                0
            };
            c.process(&pkt(n, ts * 100, flags), ts * 100, T, &mut agg, &mut out);
            if ts.is_multiple_of(97) {
                c.scan_idle(ts * 100, T.idle_ns, &mut agg, &mut out);
            }
            assert!(c.bitmap_agrees(), "after packet {ts}");
        }
        c.drain(&mut agg, &mut out);
        assert!(c.bitmap_agrees() && c.microflows().next().is_none());
    }

    #[test]
    fn hash_spreads_keys_over_sets() {
        // 4096 keys into 64 sets: no set far from the mean of 64.
        let c = MicroflowCache::new(64, 1, 7).unwrap();
        let mut count = [0u32; 64];
        for a in 0..=255u8 {
            for b in 0..16u16 {
                let k = FlowKey::new(
                    [10, 0, 0, a].into(),
                    [10, 1, 0, 1].into(),
                    17,
                    Some((b, 53)),
                    None,
                );
                count[c.set_base(&k)] += 1;
            }
        }
        assert!(count.iter().all(|&n| (32..=110).contains(&n)), "{count:?}");
    }
}
