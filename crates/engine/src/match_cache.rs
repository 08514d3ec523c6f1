//! The match cache: a new flow's matched set, remembered by the bits of
//! its key that any filter reads.
//!
//! # Why
//! A flow's first packet matches its key against every tuple of the
//! trigger index (`trigger_index.rs`: 32 hash probes at Trumpet's
//! workload), sorts the matched ids and interns them into a match set.
//! At a million flows a fifth of packets are first packets, and that was
//! ~700 ns each. But most new flows differ from earlier ones only in bits
//! no filter reads (a source port, the host bits below every prefix), so
//! their answer is already known.
//!
//! # Design
//! The index's *shape* is the union of its tuples' masks
//! ([`crate::trigger_index::TriggerIndex::shape`]). Two keys equal under
//! it match exactly the same triggers: each tuple's mask is a subset of
//! the shape, so each probe sees the same masked value. The cache maps
//! the shaped key to the interned set (or to "none"), in a direct-mapped
//! array of [`SLOTS`] slots (a colliding shape replaces the older one), so
//! a hit costs one hash and one line, and memory is fixed (~416 KiB,
//! allocated on first use). When the shape reads every bit (a filter on
//! source ports, say) every new flow misses: one probe more than without
//! the cache.
//!
//! # Invariants
//! - A slot is valid only under the generation it was written in; any
//!   change of the installed triggers bumps the generation
//!   ([`MatchCache::reset`]), so no answer outlives the index it came from.
//! - Set ids never change meaning while valid: sets are interned by their
//!   trigger list and never renumbered.

use clarion_wire::FlowKey;

use crate::flow_table::hash_key;
use crate::key::KeyMask;

/// Slots of the cache (a power of two).
const SLOTS: usize = 8192;

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    key: FlowKey,
    set: u32,
    gen: u32,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct MatchCache {
    slots: Vec<Slot>,
    shape: KeyMask,
    /// Slots of other generations are empty. Starts at 1: a fresh slot (0) is empty.
    gen: u32,
}

impl MatchCache {
    /// Forgets every answer: the installed triggers changed and `shape` is
    /// the index's new one.
    pub(crate) fn reset(&mut self, shape: KeyMask) {
        self.shape = shape;
        self.gen = self.gen.wrapping_add(1);
        if self.gen == 0 {
            // Wrapped: old slots could look current.
            self.slots.iter_mut().for_each(|s| s.gen = 0);
            self.gen = 1;
        }
    }

    /// The key as the cache knows it, and its slot.
    #[inline]
    fn place(&self, key: &FlowKey) -> (FlowKey, usize) {
        let shaped = self.shape.apply(key);
        (shaped, hash_key(&shaped) as usize & (SLOTS - 1))
    }

    /// The set `key`'s flow matched ([`crate::flow_table::NO_SET`] for
    /// none), if known.
    #[inline]
    pub(crate) fn get(&self, key: &FlowKey) -> Option<u32> {
        if self.gen == 0 {
            return None;
        }
        let (shaped, i) = self.place(key);
        let s = self.slots.get(i)?;
        (s.gen == self.gen && s.key == shaped).then_some(s.set)
    }

    /// Remembers that `key`'s flow matched `set`.
    pub(crate) fn put(&mut self, key: &FlowKey, set: u32) {
        if self.gen == 0 {
            // Never reset: the shape is not known yet.
            return;
        }
        if self.slots.is_empty() {
            self.slots = vec![Slot::default(); SLOTS];
        }
        let (shaped, i) = self.place(key);
        if let Some(s) = self.slots.get_mut(i) {
            *s = Slot {
                key: shaped,
                set,
                gen: self.gen,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trigger_index::{filter_rules, TriggerIndex};
    use clarion_lang::spec::Filter;

    fn k(src: &str, dst: &str, ports: (u16, u16)) -> FlowKey {
        FlowKey::new(src.parse().unwrap(), dst.parse().unwrap(), 6, Some(ports), None)
    }

    fn filter(text: &str) -> Filter {
        let src = format!("event e\n  filter {text}\n  when sum(packets) > 1\n  per 5tuple\n  every 10ms\n");
        let specs = clarion_lang::check(&src).expect("compiles");
        specs[0].filters[0].clone()
    }

    #[test]
    fn keys_equal_under_the_shape_share_an_answer_and_others_do_not() {
        let mut index = TriggerIndex::default();
        index.insert(
            0,
            &filter_rules(&filter("src_ip in 10.0.0.0/24 and dst_port = 80")),
        );
        index.insert(1, &filter_rules(&filter("dst_ip in 172.16.0.0/16")));
        let mut c = MatchCache::default();
        let a = k("10.0.0.1", "172.16.0.1", (1000, 80));
        assert_eq!(c.get(&a), None, "before the first reset nothing is known");
        c.put(&a, 7);
        assert_eq!(c.get(&a), None, "nor remembered");
        c.reset(index.shape());
        c.put(&a, 7);
        // Another source port and host: bits no filter reads.
        assert_eq!(c.get(&k("10.0.0.200", "172.16.0.1", (2000, 80))), Some(7));
        // Bits a filter reads: another /24, another port, another destination.
        assert_eq!(c.get(&k("10.0.1.1", "172.16.0.1", (1000, 80))), None);
        assert_eq!(c.get(&k("10.0.0.1", "172.16.0.1", (1000, 81))), None);
        assert_eq!(c.get(&k("10.0.0.1", "172.17.0.1", (1000, 80))), None);
        c.reset(index.shape());
        assert_eq!(c.get(&a), None, "a reset forgets");
    }

    /// The property the cache rests on: the index's answer for a key is its
    /// answer for the key under the shape, for random keys and filters.
    #[test]
    fn the_index_answers_alike_under_its_shape() {
        let filters = [
            "src_ip in 10.0.0.0/22",
            "src_ip in 10.0.4.0/26 and proto = tcp",
            "dst_ip in 172.16.0.0/28 and dst_port = 53",
            "dst_port in 1000..2000",
            "src_port = 5 and dst_ip in 172.16.0.0/12",
            "vlan = 7",
        ];
        let mut index = TriggerIndex::default();
        for (i, f) in filters.iter().enumerate() {
            index.insert(i as u32, &filter_rules(&filter(f)));
        }
        let shape = index.shape();
        let mut x: u64 = 11;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u32
        };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..20_000 {
            let src = std::net::Ipv4Addr::new(10, 0, (next() % 8) as u8, (next() % 256) as u8);
            let dst = std::net::Ipv4Addr::new(172, 16, 0, (next() % 32) as u8);
            let proto = [6, 17][(next() % 2) as usize];
            let vlan = (next() % 3 == 0).then_some((next() % 9) as u16);
            let ports = ((next() % 8) as u16, 990 + (next() % 1020) as u16);
            let key = FlowKey::new(src.into(), dst.into(), proto, Some(ports), vlan);
            index.lookup(&key, &mut a);
            index.lookup(&shape.apply(&key), &mut b);
            assert_eq!(a, b, "{key:?}");
        }
    }
}
