//! The 5-tuple flow table: one entry per flow direction, sized once from
//! configuration.
//!
//! Two arrays: `slots`, an open-addressing (linear probing) index holding a
//! 32-bit hash and an entry number per slot, and `entries`, the entries
//! themselves, one 64-byte line each (a third, `wide`, holds the addresses
//! of IPv6 keys by entry number). Entry numbers never move while a flow
//! lives, so the epoch logs name a flow by its entry number and a reverse
//! flow's link by `(entry, generation)`, with no pointer; removal shifts
//! slots back (no tombstones) but never entries.
//!
//! The table never grows: when `capacity` flows are live, a new flow is
//! refused and the caller counts it as untracked. The slot array is kept at
//! most 3/4 full so probe sequences stay short.

use clarion_wire::FlowKey;

use crate::huge_pages;
use crate::prefetch::prefetch;
use crate::tcp_state::{TcpStates, NO_TCP};

/// Flow-table slots in a cache line.
const SLOTS_PER_LINE: usize = 64 / std::mem::size_of::<u64>();

/// The place in its line of a probe's first slot from which the batch
/// loop, once the slots outgrow the caches (`FOLLOW_FLOWS` in
/// `monitor.rs`), loads the next slot line too and
/// looks for the flow's slot in both ([`FlowTable::prefetch_slot`],
/// [`FlowTable::prefetch_entry`]). Looking in the first line only left
/// 5.5 % of a million flows' packets (those whose slot is past it, at half
/// load) without their entry or connection state loaded, each then
/// waiting for two misses in a row in [`FlowTable::find_as`] (the next
/// slot line, then the entry): a fifth of the packet loop's samples.
/// Following from the last two places left 1.4 %, from the last four
/// 0.7 %, from 2 on 0.3 %; median batch at 1 M flows 85.9 -> 68.9 ns
/// (docs/performance.md). With fewer flows the next line is cached and
/// loading it only costs: nothing is followed.
const FOLLOW_FROM: usize = 2;

/// The slot lines the batch loop loads, and looks for a flow's slot in,
/// for a probe beginning at slot `i`: its own, and with `follow` the next
/// one where [`FOLLOW_FROM`] says. One rule for both
/// [`FlowTable::prefetch_slot`] and [`FlowTable::prefetch_entry`], which
/// must agree.
#[inline(always)]
fn slot_lines(i: usize, follow: bool) -> usize {
    if follow && i % SLOTS_PER_LINE >= FOLLOW_FROM {
        2
    } else {
        1
    }
}

/// Marks an entry with no trigger set.
pub(crate) const NO_SET: u32 = u32::MAX;

/// Marks an entry whose reverse flow is unknown.
pub(crate) const NO_ENTRY: u32 = u32::MAX;

/// A flow's key as its entry keeps it: 20 bytes, as three words compared
/// at once. An address whose last 12 bytes are zero (every IPv4 address)
/// is its first 4; a key with another address is *wide*: its entry keeps
/// the first 4 bytes of each address here and both whole in
/// [`FlowTable::wide`].
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, packed(4))]
pub(crate) struct EntryKey {
    /// Source address (first 4 bytes) in the low half, destination's in the high.
    addrs: u64,
    /// Source port, destination port, then the VNI in the high half.
    ports_vni: u64,
    /// VLAN, protocol, flags.
    rest: u32,
}

impl PartialEq for EntryKey {
    /// One branch, not one a field: every packet compares a key.
    #[inline(always)]
    fn eq(&self, o: &Self) -> bool {
        let (a, b, c) = (self.addrs, self.ports_vni, self.rest);
        let (x, y, z) = (o.addrs, o.ports_vni, o.rest);
        ((a ^ x) | (b ^ y) | u64::from(c ^ z)) == 0
    }
}

impl Eq for EntryKey {}

impl EntryKey {
    /// The entry's form of `k`, and whether it is wide.
    #[inline(always)]
    pub(crate) fn of(k: &FlowKey) -> (EntryKey, bool) {
        let word = |a: &[u8; 16]| u128::from_le_bytes(*a);
        let (src, dst) = (word(&k.src_ip), word(&k.dst_ip));
        let key = EntryKey {
            addrs: (src as u32 as u64) | (dst as u32 as u64) << 32,
            ports_vni: u64::from(k.src_port) | u64::from(k.dst_port) << 16 | u64::from(k.vni) << 32,
            rest: u32::from(k.vlan) | u32::from(k.proto) << 16 | u32::from(k.flags) << 24,
        };
        (key, ((src | dst) >> 32) != 0)
    }

    /// The key of a narrow entry (its addresses' last 12 bytes zero).
    fn narrow(&self) -> FlowKey {
        let (addrs, ports_vni, rest) = (self.addrs, self.ports_vni, self.rest);
        let mut k = FlowKey {
            src_port: ports_vni as u16,
            dst_port: (ports_vni >> 16) as u16,
            vni: (ports_vni >> 32) as u32,
            vlan: rest as u16,
            proto: (rest >> 16) as u8,
            flags: (rest >> 24) as u8,
            ..FlowKey::default()
        };
        k.src_ip[..4].copy_from_slice(&(addrs as u32).to_le_bytes());
        k.dst_ip[..4].copy_from_slice(&((addrs >> 32) as u32).to_le_bytes());
        k
    }
}

/// Per-flow state kept by the monitor: one cache line.
///
/// What a packet reads is here, in 64 bytes, so a flow is one miss, not
/// two (the entry was 96 bytes with a 44-byte key; at a million flows the
/// entries were 108 bytes a flow of the 257 the monitor held). The key
/// is its 20-byte [`EntryKey`]; an IPv6 flow's addresses are in a second
/// array ([`FlowTable::wide`]), read on its key compare.
#[derive(Clone, Debug)]
#[repr(align(64))]
pub(crate) struct FlowEntry {
    pub(crate) key: EntryKey,
    /// Packet time of the flow's latest packet.
    pub(crate) last_ts: u64,
    /// Bumped each time the entry is freed, so a stale link to it (its
    /// reverse flow's [`FlowEntry::rev`]) is detected.
    pub(crate) gen: u32,
    /// Interned set of matched triggers ([`NO_SET`] when none).
    pub(crate) set: u32,
    /// Per epoch parity, the index of the flow's record in that epoch's
    /// log of its set (`epoch_log.rs`), if it has one there: the set
    /// checks that the record is the flow's before using it.
    pub(crate) rec: [u32; 2],
    /// TCP connection state of the current life, kept when the flow's
    /// triggers need it: its index in [`FlowTable::tcp`] (the entry's own
    /// number), or [`NO_TCP`].
    pub(crate) tcp: u32,
    /// The reverse flow's entry and generation, linked when either is created
    /// ([`NO_ENTRY`] if it had no entry then), so acknowledgements reach it
    /// without a second lookup per packet.
    pub(crate) rev: (u32, u32),
    /// The epoch (the monitor's sequence number, its low 32 bits) of the
    /// latest write to the flow's statistics (its packets, and RTT samples
    /// its reverse flow's acks give it). Compared by wrapping difference;
    /// the monitor's reclaim keeps it within 2^30 epochs of the current
    /// one (`Monitor::reclaim`).
    pub(crate) stats_epoch: u32,
    /// Window-scale shift announced by this flow's SYN, in its current life.
    pub(crate) wscale: Option<u8>,
    pub(crate) live: bool,
    /// The key's addresses are in [`FlowTable::wide`].
    pub(crate) wide: bool,
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct FlowTable {
    /// 0 = empty, else `(hash32 << 32) | (entry + 1)`.
    slots: Vec<u64>,
    slot_mask: usize,
    pub(crate) entries: Vec<FlowEntry>,
    /// Both addresses of the wide keys, by entry number (grown only to the
    /// highest wide entry: nothing for IPv4 traffic).
    wide: Vec<[[u8; 16]; 2]>,
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
    /// Heap bytes reserved: (slots and free list, entries and wide keys, TCP states).
    pub(crate) fn heap_bytes(&self) -> (usize, usize, usize) {
        (
            self.slots.capacity() * std::mem::size_of::<u64>() + self.free.capacity() * 4,
            self.entries.capacity() * std::mem::size_of::<FlowEntry>()
                + self.wide.capacity() * std::mem::size_of::<[[u8; 16]; 2]>(),
            self.tcp.heap_bytes(),
        )
    }

    /// A table for `capacity` flows, its arrays advised for huge pages if `huge`.
    pub(crate) fn new(capacity: usize, huge: bool) -> Self {
        let capacity = capacity.max(1);
        // A power of two, at most 3/4 full. Sized to exactly 3/4 (a slot
        // found by a multiply-shift; 12 bytes a flow at the bench's million
        // flows instead of 16.6) the table ran at 0.66 load there instead
        // of 0.48, and the longer probes cost more than the memory saved:
        // 96.9 -> 98.9 ns median batch at 1 M flows (4b4b2be, reverted).
        let slots = (capacity + capacity / 3 + 1).next_power_of_two();
        let t = FlowTable {
            slots: vec![0; slots],
            slot_mask: slots - 1,
            entries: Vec::with_capacity(capacity),
            wide: Vec::new(),
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

    /// The slot where the probe for a key of 32-bit hash `h32` begins.
    #[inline(always)]
    fn home(&self, h32: u32) -> usize {
        h32 as usize & self.slot_mask
    }

    /// Starts loading the slot where the probe for `hash` begins, and with
    /// `follow` the next slot line where [`FOLLOW_FROM`] says.
    #[inline]
    pub(crate) fn prefetch_slot(&self, hash: u64, follow: bool) {
        let i = self.home(hash as u32);
        let at = self.slots.as_ptr().wrapping_add(i);
        prefetch(at);
        if slot_lines(i, follow) == 2 {
            prefetch(at.wrapping_add(SLOTS_PER_LINE));
        }
    }

    /// Starts loading the entry the probe for `hash` most likely ends at
    /// (the first slot whose hash matches, among those of the probe in its
    /// first slot's cache line, and in the next one with `follow` where
    /// [`FOLLOW_FROM`] says; keys are not compared) and gives its number.
    /// Only the first slot would miss a third of the flows at half load,
    /// whose probe is longer than one slot.
    #[inline]
    pub(crate) fn prefetch_entry(&self, hash: u64, follow: bool) -> Option<u32> {
        let h32 = hash as u32;
        let mut i = self.home(h32);
        // The probe is followed through the lines
        // [`FlowTable::prefetch_slot`] loaded.
        let end = (i | (SLOTS_PER_LINE - 1)) + 1 + (slot_lines(i, follow) - 1) * SLOTS_PER_LINE;
        let s = loop {
            let s = *self.slots.get(i)?;
            if s == 0 {
                return None;
            }
            if (s >> 32) as u32 == h32 {
                break s;
            }
            i += 1;
            if i == end {
                return None;
            }
        };
        let idx = (s as u32).wrapping_sub(1);
        // An entry is one line.
        prefetch(self.entries.as_ptr().wrapping_add(idx as usize));
        Some(idx)
    }

    /// Starts loading entry `idx` (one line).
    #[inline]
    pub(crate) fn prefetch_entry_at(&self, idx: u32) {
        prefetch(self.entries.as_ptr().wrapping_add(idx as usize));
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
        self.prefetch_slot(hash_key(&self.key_at(e, idx)), false);
        if e.tcp != NO_TCP {
            self.tcp.prefetch(e.tcp);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The key of entry `e`, number `idx`.
    #[inline]
    fn key_at(&self, e: &FlowEntry, idx: u32) -> FlowKey {
        let mut k = e.key.narrow();
        if e.wide {
            if let Some([src, dst]) = self.wide.get(idx as usize) {
                k.src_ip = *src;
                k.dst_ip = *dst;
            }
        }
        k
    }

    /// The key of entry `idx` (a freed entry's last key; a default key
    /// past the entries).
    #[inline]
    pub(crate) fn key(&self, idx: u32) -> FlowKey {
        self.entries
            .get(idx as usize)
            .map_or_else(FlowKey::default, |e| self.key_at(e, idx))
    }

    /// True when entry `idx` is live and holds `key`, whose entry form is
    /// `ek` (wide if `wide`).
    #[inline(always)]
    pub(crate) fn holds_as(&self, idx: u32, key: &FlowKey, ek: &EntryKey, wide: bool) -> bool {
        let Some(e) = self.entries.get(idx as usize) else {
            return false;
        };
        e.live
            && e.key == *ek
            && e.wide == wide
            && (!wide || self.wide.get(idx as usize) == Some(&[key.src_ip, key.dst_ip]))
    }

    /// True when entry `idx` is live and holds `key`.
    #[inline(always)]
    pub(crate) fn holds(&self, idx: u32, key: &FlowKey) -> bool {
        let (ek, wide) = EntryKey::of(key);
        self.holds_as(idx, key, &ek, wide)
    }

    /// Finds the entry of `key`, whose [`hash_key`] is `hash`.
    #[inline]
    pub(crate) fn find(&self, key: &FlowKey, hash: u64) -> Option<u32> {
        let (ek, wide) = EntryKey::of(key);
        self.find_as(key, &ek, wide, hash)
    }

    /// [`FlowTable::find`] of a key whose entry form the caller has.
    #[inline]
    pub(crate) fn find_as(&self, key: &FlowKey, ek: &EntryKey, wide: bool, hash: u64) -> Option<u32> {
        let h32 = hash as u32;
        let mut i = self.home(h32);
        loop {
            let s = self.slots[i];
            if s == 0 {
                return None;
            }
            if (s >> 32) as u32 == h32 {
                let idx = (s as u32) - 1;
                if self.holds_as(idx, key, ek, wide) {
                    return Some(idx);
                }
            }
            i = (i + 1) & self.slot_mask;
        }
    }

    /// Inserts a new flow (the caller checked it is absent) at packet time
    /// `ts` in epoch `epoch` (see [`FlowEntry::stats_epoch`]). `None` when full.
    pub(crate) fn insert(&mut self, key: FlowKey, hash: u64, ts: u64, epoch: u32) -> Option<u32> {
        if self.len >= self.capacity {
            return None;
        }
        let (ek, wide) = EntryKey::of(&key);
        let entry = FlowEntry {
            key: ek,
            last_ts: ts,
            gen: 0,
            set: NO_SET,
            rec: [u32::MAX; 2],
            tcp: NO_TCP,
            rev: (NO_ENTRY, 0),
            stats_epoch: epoch,
            wscale: None,
            live: true,
            wide,
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
        if wide {
            let i = idx as usize;
            if self.wide.len() <= i {
                self.wide.resize(i + 1, [[0; 16]; 2]);
            }
            self.wide[i] = [key.src_ip, key.dst_ip];
        }
        // The entry the next new flow takes is out of cache (freed long
        // ago, or never written), and writing it, then reading it back,
        // stalls on it: start loading it now. At 1 M flows with a third of
        // the packets new these stalls were most of a new flow's cost.
        // Its connection state likewise, at its number.
        let next = self.free.last().copied().unwrap_or(self.entries.len() as u32);
        // Within the allocations (reserved at `capacity`); hints only.
        self.prefetch_entry_at(next);
        self.tcp.prefetch(next);
        let h32 = hash as u32;
        let mut i = self.home(h32);
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
        let h32 = hash_key(&self.key_at(e, idx)) as u32;
        let mut i = self.home(h32);
        while self.slots[i] as u32 != idx + 1 {
            i = (i + 1) & self.slot_mask;
        }
        // Backward-shift deletion: pull later members of the probe run into the hole.
        let mut hole = i;
        let mut j = (i + 1) & self.slot_mask;
        while self.slots[j] != 0 {
            let ideal = self.home((self.slots[j] >> 32) as u32);
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

    /// The line [`FlowTable::prefetch_entry`] loads holds the whole entry.
    #[test]
    fn an_entry_is_one_line() {
        assert_eq!(std::mem::size_of::<FlowEntry>(), 64);
        let t = FlowTable::new(1_000, false);
        assert_eq!(t.entries.as_ptr() as usize % 64, 0);
    }

    /// Every key comes back from its entry, IPv4 and IPv6, and a key
    /// differing in any byte is another flow's.
    #[test]
    fn keys_survive_their_entry_and_differ_in_any_byte() {
        use std::net::Ipv6Addr;
        let v6 = |a: u16, b: u16| {
            FlowKey::new(
                IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, a)),
                IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, b)),
                17,
                Some((53, 53)),
                Some(7),
            )
        };
        // IPv6 keys alike in their first 4 bytes, and one of an IPv4
        // address's bytes in the IPv6 part (wide although not IPv6).
        let mut odd = key(5);
        odd.src_ip[15] = 1;
        let mut tunnelled = key(9);
        tunnelled.vni = 0x00ab_cdef;
        tunnelled.flags |= FlowKey::HAS_VNI;
        let keys = [
            key(1),
            key(2),
            v6(1, 2),
            v6(2, 1),
            v6(1, 3),
            odd,
            key(5),
            tunnelled,
        ];
        let mut t = FlowTable::new(64, false);
        let idx: Vec<u32> = keys
            .iter()
            .map(|k| t.insert(*k, hash_key(k), 0, 0).expect("room"))
            .collect();
        for (k, &i) in keys.iter().zip(&idx) {
            assert_eq!(t.key(i), *k);
            assert_eq!(t.find(k, hash_key(k)), Some(i));
            for (other, &j) in keys.iter().zip(&idx) {
                assert_eq!(t.holds(j, k), i == j, "{k:?} in the entry of {other:?}");
            }
            // One byte off anywhere: not this flow.
            for byte in 0..16 {
                let mut near = *k;
                near.src_ip[byte] ^= 0x10;
                assert!(!t.holds(i, &near));
                near = *k;
                near.dst_ip[byte] ^= 0x10;
                assert!(!t.holds(i, &near));
            }
        }
        // Removed, an IPv6 entry reused by an IPv4 flow and back.
        t.remove(idx[2]);
        let a = t.insert(key(40), hash_key(&key(40)), 0, 0).expect("room");
        assert_eq!(a, idx[2]);
        assert_eq!(t.key(a), key(40));
        assert!(!t.holds(a, &keys[2]));
        t.remove(a);
        let b = t.insert(keys[4], hash_key(&keys[4]), 0, 0).expect("room");
        assert_eq!(t.key(b), keys[4]);
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
        // Small tables wrap their probes round the end often.
        for capacity in [1, 3, 7, 50, 200] {
            table_against_a_model(capacity);
        }
    }

    fn table_against_a_model(capacity: usize) {
        let mut t = FlowTable::new(capacity, false);
        let mut model = std::collections::HashMap::new();
        let mut x: u64 = capacity as u64;
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
                    if let Some(i) = t.insert(k, h, 0, 0) {
                        model.insert(k, i);
                    } else {
                        assert_eq!(model.len(), capacity);
                    }
                }
                other => panic!("table and model disagree: {other:?}"),
            }
            assert_eq!(t.len(), model.len());
        }
    }

    /// The batch loop's guess of a flow's entry, read from the slot lines
    /// it prefetched: a full table's flows nearly all found there when
    /// probes are followed into the next line, and a guess is always an
    /// entry whose slot carries the key's hash bits (the loop checks the key).
    #[test]
    fn a_followed_guess_finds_nearly_every_flow() {
        let n = 20_000;
        let mut t = FlowTable::new(n, false);
        for i in 0..n as u32 {
            t.insert(key(i), hash_key(&key(i)), 0, 0).unwrap();
        }
        let missed = |follow: bool| {
            (0..n as u32)
                .filter(|&i| {
                    let h = hash_key(&key(i));
                    match t.prefetch_entry(h, follow) {
                        Some(e) => {
                            let own = t.find(&key(i), h) == Some(e);
                            assert!(own || hash_key(&t.key(e)) as u32 == h as u32);
                            !own
                        }
                        None => true,
                    }
                })
                .count()
        };
        let (first_line, followed) = (missed(false), missed(true));
        // At this load (0.61) about one flow in eleven has its slot past
        // its first slot's line; following finds all but about one in a
        // hundred.
        assert!(first_line > n / 20, "{first_line}");
        assert!(
            followed < n / 50 && followed * 5 < first_line,
            "{followed} of {first_line}"
        );
    }

    #[test]
    fn full_table_refuses_and_generations_advance() {
        let mut t = FlowTable::new(2, true);
        let a = t.insert(key(1), hash_key(&key(1)), 0, 0).unwrap();
        t.insert(key(2), hash_key(&key(2)), 0, 0).unwrap();
        assert!(t.insert(key(3), hash_key(&key(3)), 0, 0).is_none());
        let g = t.entries[a as usize].gen;
        t.remove(a);
        assert_eq!(t.entries[a as usize].gen, g + 1);
        assert!(t.insert(key(3), hash_key(&key(3)), 0, 0).is_some());
    }
}
