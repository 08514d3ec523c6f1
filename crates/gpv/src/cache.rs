//! The *Flow cache: packets in, GPVs out.
//!
//! # Design (dissertation §3.5)
//!
//! `slots` GPV slots, direct mapped by [`flow_hash`] of the flow key. Each
//! slot owns a *narrow* buffer of `narrow` packet features. A slot whose
//! narrow buffer is full takes one *wide* buffer of `wide` more features
//! from a shared pool of `pool` buffers (fewer than slots: only the busy
//! flows of the moment fill their narrow buffer, *source locality*), and
//! gives it back when its GPV is evicted. The pool is a stack of free
//! buffer indexes, as in *Flow's Tofino pipeline. Unlike the hardware, the
//! wide buffer is taken when the first packet that does not fit arrives,
//! not when the narrow buffer fills, so a flow that stops at exactly
//! `narrow` packets never holds one.
//!
//! A GPV is evicted, and its slot starts a new GPV with the packet at hand,
//! for the first of these causes ([`EvictCause`]) that applies:
//! 1. *Collision*: the slot holds another flow.
//! 2. *Split*: the packet's time is before the GPV's start or more than
//!    `max_delta_ns` after it (the delta field would overflow).
//! 3. *Age*: the GPV is older than `max_age_ns` (packet time, measured on
//!    the cache's clock, the largest packet time seen).
//! 4. *Full*: narrow full and no wide buffer free, or both full.
//!
//! Bounded detection latency: besides the age check on touch, at every
//! multiple of `scan_interval_ns` of packet time a scan evicts every GPV
//! older than `max_age_ns` at that multiple (*Scan*, oldest first, ties by
//! slot; on the grid, so a clock moved by ticks and one moved by packets
//! evict alike), so a flow that went
//! quiet still leaves within `max_age_ns + scan_interval_ns` of packet
//! time. The scan does not walk the slots: a min-heap holds each GPV's
//! (start, slot, serial) from its creation, and the scan pops the entries
//! old enough, evicting those whose slot still holds that GPV (the others
//! were evicted already and are dropped). Walking 16384 slots every 100 ms
//! of packet time was 95% of the time of replaying an hour-long capture. [`GpvCache::tick`]
//! advances the clock without a packet (a live host's idle link);
//! [`GpvCache::finish`] evicts everything (*Flush*).
//!
//! # Invariants
//!
//! - A slot is empty iff `len == 0`; an empty slot holds no wide buffer.
//! - `len <= narrow + (wide if the slot holds a wide buffer)`.
//! - Each wide buffer is either on the free stack or held by exactly one
//!   slot.
//! - A flow's GPVs leave in packet order (it only ever lives in its slot).
//!
//! # Cost
//!
//! A packet costs one hash (two 64×64→128 multiplies of the key's words
//! and one more to combine), one slot load and one feature store; an
//! eviction allocates the GPV's vector and copies its features. With the
//! scan on, a new GPV also pushes a heap entry (O(log heap)); the heap is
//! purged of evicted GPVs' entries when it grows past twice the slots, so
//! it never holds more than `2 × slots + 64` entries. Memory: `slots × (64 + 20·narrow) +
//! pool × 20·wide` bytes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use clarion_wire::{FlowKey, PacketRecord};

use crate::gpv::{EvictCause, Gpv, GpvHeader, PacketFeatures, TcpSeq};
use crate::GpvError;

/// The cache's shape and policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// Number of GPV slots (C).
    pub slots: usize,
    /// Packet features in each slot's narrow buffer (N, at least 1).
    pub narrow: usize,
    /// Packet features in each wide buffer (0 with `pool` 0: narrow only).
    pub wide: usize,
    /// Wide buffers in the shared pool (W, fewer than `slots` to be useful).
    pub pool: usize,
    /// A GPV older than this (packet time) is evicted when touched or scanned.
    pub max_age_ns: u64,
    /// Packet time between scans for old GPVs; 0 turns the scan off.
    pub scan_interval_ns: u64,
    /// Largest delta a packet may have (at most `u32::MAX`, the field's
    /// width; smaller values split GPVs earlier, e.g. to test splitting).
    pub max_delta_ns: u32,
    /// Written into every GPV header (interface or host id).
    pub interface: u16,
}

impl Default for CacheConfig {
    /// *Flow's Tofino configuration (Table 3.1): 16384 slots, narrow
    /// buffers of 4 features, 4096 wide buffers of 24; a GPV lives at most
    /// one second, scanned every 100 ms.
    fn default() -> Self {
        CacheConfig {
            slots: 16384,
            narrow: 4,
            wide: 24,
            pool: 4096,
            max_age_ns: 1_000_000_000,
            scan_interval_ns: 100_000_000,
            max_delta_ns: u32::MAX,
            interface: 0,
        }
    }
}

/// Counters of a cache's work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub packets: u64,
    pub gpvs: u64,
    /// Evictions by [`EvictCause::code`].
    pub evictions: [u64; 6],
    /// Wide buffers taken from the pool.
    pub wide_allocs: u64,
    /// A slot wanted a wide buffer and the pool was empty.
    pub wide_alloc_failures: u64,
    pub scans: u64,
}

impl CacheStats {
    pub fn evicted(&self, cause: EvictCause) -> u64 {
        self.evictions[usize::from(cause.code())]
    }
}

const NO_WIDE: u32 = u32::MAX;

#[derive(Clone, Copy, Default)]
struct Slot {
    key: FlowKey,
    start_ns: u64,
    /// Packets held; 0 means empty.
    len: u32,
    /// Index of the held wide buffer, or `NO_WIDE`.
    wide: u32,
    /// Which GPV the slot holds (the cache's count of GPVs started), to
    /// tell the scan heap's live entries from stale ones.
    serial: u64,
}

/// The *Flow cache. Single-threaded: one per packet stream (a host runs
/// one per worker, each with its own `interface`).
pub struct GpvCache {
    cfg: CacheConfig,
    slots: Vec<Slot>,
    narrow: Vec<PacketFeatures>, // slots × cfg.narrow
    wide: Vec<PacketFeatures>,   // pool × cfg.wide
    free: Vec<u32>,              // indexes of free wide buffers
    clock: u64,                  // largest packet time seen
    next_scan: u64,
    /// (start, slot, serial) of every GPV started since the last purge,
    /// oldest on top; only with the scan on.
    ages: BinaryHeap<Reverse<(u64, u32, u64)>>,
    started: u64,
    stats: CacheStats,
}

impl GpvCache {
    pub fn new(cfg: CacheConfig) -> Result<GpvCache, GpvError> {
        if cfg.slots == 0 {
            return Err(GpvError::Config("at least one slot is needed"));
        }
        if cfg.narrow == 0 {
            return Err(GpvError::Config("the narrow buffer needs room for a packet"));
        }
        if cfg
            .narrow
            .checked_add(cfg.wide)
            .is_none_or(|w| u32::try_from(w).is_err())
            || u32::try_from(cfg.pool).is_err()
            || u32::try_from(cfg.slots).is_err()
        {
            return Err(GpvError::Config("slots, buffer widths and pool must fit 32 bits"));
        }
        let pool = if cfg.wide == 0 { 0 } else { cfg.pool };
        let narrow_len = cfg.slots.checked_mul(cfg.narrow);
        let wide_len = pool.checked_mul(cfg.wide);
        let (Some(narrow_len), Some(wide_len)) = (narrow_len, wide_len) else {
            return Err(GpvError::Config("buffers too large"));
        };
        Ok(GpvCache {
            slots: vec![
                Slot {
                    wide: NO_WIDE,
                    ..Slot::default()
                };
                cfg.slots
            ],
            narrow: vec![PacketFeatures::default(); narrow_len],
            wide: vec![PacketFeatures::default(); wide_len],
            // Popped from the end: buffer 0 goes first.
            free: (0..pool as u32).rev().collect(),
            clock: 0,
            next_scan: 0,
            ages: BinaryHeap::new(),
            started: 0,
            stats: CacheStats::default(),
            cfg,
        })
    }

    pub fn config(&self) -> &CacheConfig {
        &self.cfg
    }

    pub fn stats(&self) -> &CacheStats {
        &self.stats
    }

    /// GPVs currently in the cache.
    pub fn occupied(&self) -> usize {
        self.slots.iter().filter(|s| s.len > 0).count()
    }

    /// Wide buffers currently free.
    pub fn free_wide(&self) -> usize {
        self.free.len()
    }

    /// Adds a packet; evicted GPVs are appended to `out`.
    pub fn push(&mut self, rec: &PacketRecord, out: &mut Vec<Gpv>) {
        let ts = rec.ts_ns;
        self.stats.packets += 1;
        self.advance(ts, out);
        let idx = self.slot_of(&rec.key);
        let slot = self.slots[idx];
        if slot.len > 0 {
            let cause = if slot.key != rec.key {
                Some(EvictCause::Collision)
            } else if ts < slot.start_ns || ts - slot.start_ns > u64::from(self.cfg.max_delta_ns) {
                Some(EvictCause::Split)
            } else if self.clock - slot.start_ns > self.cfg.max_age_ns {
                Some(EvictCause::Age)
            } else if slot.len as usize
                == self.cfg.narrow + if slot.wide == NO_WIDE { 0 } else { self.cfg.wide }
            {
                self.grow(idx)
            } else {
                None
            };
            if let Some(cause) = cause {
                self.evict(idx, cause, out);
            }
        }
        if self.slots[idx].len == 0 {
            self.start_gpv(idx, rec.key, ts);
        }
        let slot = &mut self.slots[idx];
        // In range: `ts - start_ns <= max_delta_ns` was checked above or the GPV starts now.
        let features = PacketFeatures {
            delta: (ts - slot.start_ns) as u32,
            size: PacketFeatures::size_of(rec.size),
            tcp_flags: rec.tcp.map_or(0, |t| t.flags),
            tcp: rec.tcp.map(|t| TcpSeq {
                seq: t.seq,
                ack: t.ack,
            }),
        };
        let at = slot.len as usize;
        if at < self.cfg.narrow {
            self.narrow[idx * self.cfg.narrow + at] = features;
        } else {
            self.wide[slot.wide as usize * self.cfg.wide + (at - self.cfg.narrow)] = features;
        }
        slot.len += 1;
    }

    /// Advances the cache's clock to `now_ns` without a packet, running the
    /// scan if one is due: a live host calls it on an idle link so quiet
    /// flows still leave within the age bound.
    pub fn tick(&mut self, now_ns: u64, out: &mut Vec<Gpv>) {
        self.advance(now_ns, out);
    }

    /// Evicts every GPV (the input ended).
    pub fn finish(&mut self, out: &mut Vec<Gpv>) {
        for idx in 0..self.slots.len() {
            if self.slots[idx].len > 0 {
                self.evict(idx, EvictCause::Flush, out);
            }
        }
    }

    fn advance(&mut self, now: u64, out: &mut Vec<Gpv>) {
        self.clock = self.clock.max(now);
        let every = self.cfg.scan_interval_ns;
        if every > 0 && self.clock >= self.next_scan {
            // Scans run on a grid of the interval and age GPVs against the
            // grid point, not the clock: a live host's ticks and a file's
            // packets reach a point at different clocks, and must evict the
            // same GPVs in the same order (crates/cli/tests/same_outputs.rs).
            // Every packet before the point is in already, none after it.
            let at = self.clock - self.clock % every;
            self.next_scan = at.saturating_add(every);
            self.stats.scans += 1;
            while let Some(&Reverse((start, idx, serial))) = self.ages.peek() {
                // A GPV started after the grid point (a tick came late) is young.
                if at.saturating_sub(start) <= self.cfg.max_age_ns {
                    break;
                }
                self.ages.pop();
                if self.slots[idx as usize].serial == serial {
                    self.evict(idx as usize, EvictCause::Scan, out);
                }
            }
        }
    }

    fn start_gpv(&mut self, idx: usize, key: FlowKey, ts: u64) {
        self.started += 1;
        let slot = &mut self.slots[idx];
        slot.key = key;
        slot.start_ns = ts;
        slot.serial = self.started;
        if self.cfg.scan_interval_ns > 0 {
            self.ages.push(Reverse((ts, idx as u32, self.started)));
            if self.ages.len() > 2 * self.slots.len() + 64 {
                // An evicted slot's serial is 0: only live GPVs' entries stay.
                let slots = &self.slots;
                self.ages
                    .retain(|&Reverse((_, i, serial))| slots[i as usize].serial == serial);
            }
        }
    }

    /// The slot's buffers are full: take a wide buffer if it has none and
    /// one is free (`None`: no eviction needed), else it must go.
    fn grow(&mut self, idx: usize) -> Option<EvictCause> {
        if self.slots[idx].wide != NO_WIDE || self.wide.is_empty() {
            return Some(EvictCause::Full);
        }
        match self.free.pop() {
            Some(w) => {
                self.slots[idx].wide = w;
                self.stats.wide_allocs += 1;
                None
            }
            None => {
                self.stats.wide_alloc_failures += 1;
                Some(EvictCause::Full)
            }
        }
    }

    fn evict(&mut self, idx: usize, cause: EvictCause, out: &mut Vec<Gpv>) {
        let slot = self.slots[idx];
        let len = slot.len as usize;
        let n = self.cfg.narrow;
        let mut packets = Vec::with_capacity(len);
        packets.extend_from_slice(&self.narrow[idx * n..idx * n + len.min(n)]);
        if slot.wide != NO_WIDE {
            let w = slot.wide as usize * self.cfg.wide;
            packets.extend_from_slice(&self.wide[w..w + (len - len.min(n))]);
            self.free.push(slot.wide);
        }
        self.slots[idx] = Slot {
            wide: NO_WIDE,
            ..Slot::default()
        };
        self.stats.gpvs += 1;
        self.stats.evictions[usize::from(cause.code())] += 1;
        out.push(Gpv {
            header: GpvHeader {
                key: slot.key,
                interface: self.cfg.interface,
                start_ns: slot.start_ns,
                packet_count: slot.len,
                cause,
            },
            packets,
        });
    }

    #[inline]
    fn slot_of(&self, key: &FlowKey) -> usize {
        // Lemire's multiply-shift range reduction: any slot count, no division.
        ((u128::from(flow_hash(key)) * self.slots.len() as u128) >> 64) as usize
    }
}

/// A 64×64→128 multiply folded to 64 bits (as in wyhash): every input bit
/// reaches the middle output bits.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// The cache's hash of a flow key: the key's five 64-bit words (two per
/// address, one of ports, VLAN, protocol and flags) mixed by three folded
/// multiplies with fixed odd constants. Not keyed: the cache is a
/// measurement structure, and an adversary who aims flows at one slot only
/// causes evictions, which the GPV stream survives.
#[inline]
pub fn flow_hash(key: &FlowKey) -> u64 {
    const K: [u64; 6] = [
        0xa076_1d64_78bd_642f,
        0xe703_7ed1_a0b4_28db,
        0x8ebc_6af0_9c88_c6e3,
        0x5899_65cc_7537_4cc3,
        0x1d8e_4e27_c47d_124f,
        0x9e37_79b9_7f4a_7c15,
    ];
    let s = u128::from_le_bytes(key.src_ip);
    let d = u128::from_le_bytes(key.dst_ip);
    let tail = u64::from(key.src_port)
        | u64::from(key.dst_port) << 16
        | u64::from(key.vlan) << 32
        | u64::from(key.proto) << 48
        | u64::from(key.flags) << 56;
    let a = fold(s as u64 ^ K[0], (s >> 64) as u64 ^ K[1]);
    let b = fold(d as u64 ^ K[2], (d >> 64) as u64 ^ K[3] ^ u64::from(key.vni));
    fold(a ^ tail ^ K[4], b ^ K[5])
}
