//! The 5-tuple flow table: one entry per flow direction, sized once from
//! configuration.
//!
//! Two arrays: `slots`, an open-addressing (linear probing) index holding a
//! 32-bit hash and an entry number per slot, and `entries`, the entries
//! themselves. Entry numbers never move while a flow lives, so the sets'
//! flow lists name a flow by its entry number and a reverse flow's link by
//! `(entry, generation)`, with no pointer; removal shifts slots back (no
//! tombstones) but never entries.
//!
//! The table never grows: when `capacity` flows are live, a new flow is
//! refused and the caller counts it as untracked. The slot array is kept at
//! most 3/4 full so probe sequences stay short.

use clarion_wire::FlowKey;

use crate::huge_pages;
use crate::prefetch::prefetch;
use crate::tcp_state::{TcpStates, NO_TCP};

/// Marks an entry with no trigger set.
pub(crate) const NO_SET: u32 = u32::MAX;

/// Marks an entry whose reverse flow is unknown.
pub(crate) const NO_ENTRY: u32 = u32::MAX;

/// Per-flow state kept by the monitor.
///
/// Aligned to 32 bytes, so that its 96 bytes span two cache lines, the
/// two the prefetches name: at the allocator's 16-byte alignment every
/// other entry spanned three, and the middle one, holding the key's end,
/// was not prefetched (a fifth of the packet loop at 1 M flows).
#[derive(Clone, Debug)]
#[repr(align(32))]
pub(crate) struct FlowEntry {
    pub(crate) key: FlowKey,
    /// Packet time of the flow's latest packet.
    pub(crate) last_ts: u64,
    /// Packet time of the latest write to the flow's statistics (its
    /// packets, and RTT samples its reverse flow's acks give it).
    pub(crate) stats_ts: u64,
    /// Bumped each time the entry is freed, so a stale link to it (its
    /// reverse flow's [`FlowEntry::rev`]) is detected.
    pub(crate) gen: u32,
    /// Interned set of matched triggers ([`NO_SET`] when none).
    pub(crate) set: u32,
    /// Per epoch parity, the index of the flow's record in that epoch's
    /// log of its set (`epoch_log.rs`), if it has one there: the set
    /// checks that the record is the flow's before using it.
    pub(crate) rec: [u32; 2],
    /// Window-scale shift announced by this flow's SYN, in its current life.
    pub(crate) wscale: Option<u8>,
    /// TCP connection state of the current life, kept when the flow's
    /// triggers need it: its index in [`FlowTable::tcp`], or [`NO_TCP`].
    pub(crate) tcp: u32,
    /// The reverse flow's entry and generation, linked when either is created
    /// ([`NO_ENTRY`] if it had no entry then), so acknowledgements reach it
    /// without a second lookup per packet.
    pub(crate) rev: (u32, u32),
    pub(crate) live: bool,
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct FlowTable {
    /// 0 = empty, else `(hash32 << 32) | (entry + 1)`.
    slots: Vec<u64>,
    slot_mask: usize,
    pub(crate) entries: Vec<FlowEntry>,
    /// The connection states the entries name ([`FlowEntry::tcp`]).
    pub(crate) tcp: TcpStates,
    free: Vec<u32>,
    capacity: usize,
    len: usize,
}

/// A cheap, well-mixed hash of a flow key (no per-byte loop, no
/// allocation): each address folded to 64 bits (its upper half rotated
/// onto the lower, which an IPv4 address leaves as it is), then two folded
/// multiplies (the 128-bit product's halves xored, as foldhash and wyhash
/// do). Both halves of the result are used: the low 32 bits index the
/// flow table, the high 32 the DoS filter. The VNI goes into the
/// destination's word where an IPv4 address leaves zeros (bits 32-63).
#[inline]
pub(crate) fn hash_key(k: &FlowKey) -> u64 {
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
        w(&k.src_ip) ^ 0x243f_6a88_85a3_08d3,
        w(&k.dst_ip) ^ u64::from(k.vni) << 32 ^ 0x1319_8a2e_0370_7344,
    );
    fold(h ^ tail, 0x9e37_79b9_7f4a_7c15)
}

impl FlowTable {
    /// Heap bytes reserved: (slots and free list, entries, TCP states).
    pub(crate) fn heap_bytes(&self) -> (usize, usize, usize) {
        (
            self.slots.capacity() * std::mem::size_of::<u64>() + self.free.capacity() * 4,
            self.entries.capacity() * std::mem::size_of::<FlowEntry>(),
            self.tcp.heap_bytes(),
        )
    }

    /// A table for `capacity` flows, its arrays advised for huge pages if `huge`.
    pub(crate) fn new(capacity: usize, huge: bool) -> Self {
        let capacity = capacity.max(1);
        let slots = (capacity + capacity / 3 + 1).next_power_of_two();
        let t = FlowTable {
            slots: vec![0; slots],
            slot_mask: slots - 1,
            entries: Vec::with_capacity(capacity),
            tcp: TcpStates::new(capacity, huge),
            free: Vec::new(),
            capacity,
            len: 0,
        };
        if huge {
            // Both arrays are allocated once, at full size: advise them now.
            huge_pages::advise(&t.slots);
            huge_pages::advise(&t.entries);
        }
        t
    }

    /// Faults in both arrays now (see [`huge_pages::populate`]).
    pub(crate) fn populate(&self) {
        huge_pages::populate(&self.slots);
        huge_pages::populate(&self.entries);
    }

    /// Starts loading the slot where the probe for `hash` begins.
    #[inline]
    pub(crate) fn prefetch_slot(&self, hash: u64) {
        let i = hash as u32 as usize & self.slot_mask;
        prefetch(self.slots.as_ptr().wrapping_add(i));
    }

    /// Starts loading the entry the probe for `hash` most likely ends at
    /// (the first slot whose hash matches, among those of the probe that
    /// share its first slot's cache line; keys are not compared) and gives
    /// its number. Only the first slot would miss a third of the flows at
    /// half load, whose probe is longer than one slot.
    #[inline]
    pub(crate) fn prefetch_entry(&self, hash: u64) -> Option<u32> {
        const PER_LINE: usize = 64 / std::mem::size_of::<u64>();
        let h32 = hash as u32;
        let mut i = h32 as usize & self.slot_mask;
        let s = loop {
            let s = *self.slots.get(i)?;
            if s == 0 {
                return None;
            }
            if (s >> 32) as u32 == h32 {
                break s;
            }
            i += 1;
            if i.is_multiple_of(PER_LINE) {
                return None;
            }
        };
        let idx = (s as u32).wrapping_sub(1);
        let e = self.entries.as_ptr().wrapping_add(idx as usize);
        // An entry (96 bytes, 32-aligned) spans two lines: load its first and last.
        prefetch(e);
        prefetch(e.wrapping_add(1).cast::<u8>().wrapping_sub(1));
        Some(idx)
    }

    /// Starts loading entry `idx` (its first and last line).
    #[inline]
    pub(crate) fn prefetch_entry_at(&self, idx: u32) {
        let e = self.entries.as_ptr().wrapping_add(idx as usize);
        prefetch(e);
        prefetch(e.wrapping_add(1).cast::<u8>().wrapping_sub(1));
    }

    /// Starts loading what [`FlowTable::remove`] of `idx` reads besides
    /// the entry: the slot its probe starts at and its TCP state (which
    /// the free reads). Reads the entry, so it should be loaded already:
    /// reclaim frees flows idle for a timeout, long out of cache, and
    /// these two misses were 80% of a sweep's own time.
    #[inline]
    pub(crate) fn prefetch_removal(&self, idx: u32) {
        let Some(e) = self.entries.get(idx as usize) else {
            return;
        };
        if !e.live {
            return;
        }
        self.prefetch_slot(hash_key(&e.key));
        if e.tcp != NO_TCP {
            self.tcp.prefetch(e.tcp);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Finds the entry of `key`, whose [`hash_key`] is `hash`.
    #[inline]
    pub(crate) fn find(&self, key: &FlowKey, hash: u64) -> Option<u32> {
        let h32 = hash as u32;
        let mut i = h32 as usize & self.slot_mask;
        loop {
            let s = self.slots[i];
            if s == 0 {
                return None;
            }
            if (s >> 32) as u32 == h32 {
                let idx = (s as u32) - 1;
                if self.entries[idx as usize].key == *key {
                    return Some(idx);
                }
            }
            i = (i + 1) & self.slot_mask;
        }
    }

    /// Inserts a new flow (the caller checked it is absent). `None` when full.
    pub(crate) fn insert(&mut self, key: FlowKey, hash: u64, ts: u64) -> Option<u32> {
        if self.len >= self.capacity {
            return None;
        }
        let entry = FlowEntry {
            key,
            last_ts: ts,
            stats_ts: ts,
            gen: 0,
            set: NO_SET,
            rec: [u32::MAX; 2],
            wscale: None,
            tcp: NO_TCP,
            rev: (NO_ENTRY, 0),
            live: true,
        };
        let idx = match self.free.pop() {
            Some(i) => {
                let gen = self.entries[i as usize].gen;
                self.entries[i as usize] = FlowEntry { gen, ..entry };
                i
            }
            None => {
                self.entries.push(entry);
                (self.entries.len() - 1) as u32
            }
        };
        // The entry the next new flow takes is out of cache (freed long
        // ago, or never written), and writing it, then reading it back,
        // stalls on it: start loading it now. At 1 M flows with a third of
        // the packets new these stalls were most of a new flow's cost.
        match self.free.last() {
            Some(&next) => self.prefetch_entry_at(next),
            // Within the allocation (reserved at `capacity`); a hint only.
            None => self.prefetch_entry_at(self.entries.len() as u32),
        }
        let h32 = hash as u32;
        let mut i = h32 as usize & self.slot_mask;
        while self.slots[i] != 0 {
            i = (i + 1) & self.slot_mask;
        }
        self.slots[i] = (u64::from(h32) << 32) | u64::from(idx + 1);
        self.len += 1;
        Some(idx)
    }

    /// Frees an entry: its slot is removed by backward shifting and its
    /// generation bumped. The entry's trigger set is the caller's to leave.
    pub(crate) fn remove(&mut self, idx: u32) {
        let Some(e) = self.entries.get(idx as usize) else {
            return;
        };
        if !e.live {
            return;
        }
        let h32 = hash_key(&e.key) as u32;
        let mut i = h32 as usize & self.slot_mask;
        while self.slots[i] as u32 != idx + 1 {
            i = (i + 1) & self.slot_mask;
        }
        // Backward-shift deletion: pull later members of the probe run into the hole.
        let mut hole = i;
        let mut j = (i + 1) & self.slot_mask;
        while self.slots[j] != 0 {
            let ideal = (self.slots[j] >> 32) as usize & self.slot_mask;
            // Move slot j into the hole unless its ideal position lies cyclically in (hole, j].
            let dist_hole = hole.wrapping_sub(ideal) & self.slot_mask;
            let dist_j = j.wrapping_sub(ideal) & self.slot_mask;
            if dist_hole < dist_j {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
            j = (j + 1) & self.slot_mask;
        }
        self.slots[hole] = 0;
        let e = &mut self.entries[idx as usize];
        e.live = false;
        e.gen = e.gen.wrapping_add(1);
        e.set = NO_SET;
        self.tcp.release(e.tcp);
        e.tcp = NO_TCP;
        self.free.push(idx);
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    /// The two lines [`FlowTable::prefetch_entry`] loads hold every entry.
    #[test]
    fn an_entry_spans_two_lines() {
        assert_eq!(std::mem::size_of::<FlowEntry>(), 96);
        let t = FlowTable::new(1_000, false);
        let base = t.entries.as_ptr() as usize;
        assert_eq!(base % 32, 0);
        for i in 0..8 {
            let start = base + i * std::mem::size_of::<FlowEntry>();
            assert_eq!(start / 64 + 1, (start + 95) / 64, "entry {i}");
        }
    }

    fn key(i: u32) -> FlowKey {
        FlowKey::new(
            IpAddr::V4(Ipv4Addr::from(i)),
            IpAddr::V4(Ipv4Addr::from(!i)),
            6,
            Some((1, 2)),
            None,
        )
    }

    /// Keys that differ in one field only, as real traffic's do, spread
    /// evenly over both halves of the hash (flow table and DoS filter).
    #[test]
    fn hashes_of_similar_keys_spread_evenly() {
        use std::net::Ipv6Addr;
        let v4 = |i: u32| {
            FlowKey::new(
                IpAddr::V4(Ipv4Addr::new(10, 0, (i >> 8) as u8, i as u8)),
                IpAddr::V4(Ipv4Addr::new(10, 1, 0, 1)),
                6,
                Some((40_000 + (i >> 16) as u16, 443)),
                None,
            )
        };
        let v6 = |i: u32| {
            // Only the upper half (the prefix) differs.
            FlowKey::new(
                IpAddr::V6(Ipv6Addr::new(
                    0x2001,
                    0xdb8,
                    i as u16,
                    (i >> 16) as u16,
                    0,
                    0,
                    0,
                    1,
                )),
                IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2)),
                17,
                Some((53, 53)),
                None,
            )
        };
        let ports = |i: u32| {
            FlowKey::new(
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                6,
                Some((i as u16, 80)),
                None,
            )
        };
        let keys: [&dyn Fn(u32) -> FlowKey; 3] = [&v4, &v6, &ports];
        for (kind, make) in keys.iter().enumerate() {
            const N: u32 = 1 << 16;
            const BUCKETS: usize = 1 << 10;
            for shift in [0u32, 32] {
                let mut load = vec![0u32; BUCKETS];
                for i in 0..N {
                    load[(hash_key(&make(i)) >> shift) as usize % BUCKETS] += 1;
                }
                // 64 expected per bucket; a uniform hash stays far inside 2x.
                let max = load.iter().copied().max().unwrap_or(0);
                let min = load.iter().copied().min().unwrap_or(0);
                assert!(
                    max < 128 && min > 16,
                    "key kind {kind}, bits from {shift}: loads {min}..{max}"
                );
            }
        }
        let (a, b) = (key(7), key(7).reversed());
        assert_ne!(hash_key(&a), hash_key(&b), "a flow and its reverse differ");
    }

    #[test]
    fn insert_find_remove_against_a_model() {
        let mut t = FlowTable::new(200, false);
        let mut model = std::collections::HashMap::new();
        let mut x: u64 = 1;
        for step in 0..20_000u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = key((x >> 40) as u32 % 300);
            let h = hash_key(&k);
            match (t.find(&k, h), model.get(&k).copied()) {
                (Some(i), Some(j)) => {
                    assert_eq!(i, j);
                    if step % 3 == 0 {
                        t.remove(i);
                        model.remove(&k);
                    }
                }
                (None, None) => {
                    if let Some(i) = t.insert(k, h, 0) {
                        model.insert(k, i);
                    } else {
                        assert_eq!(model.len(), 200);
                    }
                }
                other => panic!("table and model disagree: {other:?}"),
            }
            assert_eq!(t.len(), model.len());
        }
    }

    #[test]
    fn full_table_refuses_and_generations_advance() {
        let mut t = FlowTable::new(2, true);
        let a = t.insert(key(1), hash_key(&key(1)), 0).unwrap();
        t.insert(key(2), hash_key(&key(2)), 0).unwrap();
        assert!(t.insert(key(3), hash_key(&key(3)), 0).is_none());
        let g = t.entries[a as usize].gen;
        t.remove(a);
        assert_eq!(t.entries[a as usize].gen, g + 1);
        assert!(t.insert(key(3), hash_key(&key(3)), 0).is_some());
    }
}
