//! The microflow aggregator: TurboFlow's mFR aggregator (§2.5), stitching
//! microflow records into flow records.
//!
//! # Design
//!
//! One hash map (Fx hash, flat values) from [`FlowKey`] to the flow's
//! *open part*: the totals of the microflows of its open record that left
//! the cache, with the packet clocks of the record's first and last
//! packets. The cache calls it twice per miss: [`Aggregator::absorb`] for
//! the evicted microflow (merged in, and the record emitted when the
//! microflow carries an end reason) and [`Aggregator::record_start`] for the
//! arriving flow (its open part ends first if the packet times it out).
//! [`Aggregator::expire_idle`] ends the open parts idle past the timeout
//! whose flow has nothing in the cache, and [`Aggregator::flush`] ends all.
//!
//! # Invariants
//!
//! 1. Each open part is a prefix of its flow's open record (the rest, if
//!    any, is the flow's cached microflow, `cache` invariant 2): its
//!    `first_clock` is the record's first packet clock, and its `last_clock`
//!    its latest packet clock unless the cache holds a later part.
//! 2. A record leaves exactly once, with all its packets: on an end
//!    reason from the cache (the cache held its last part), on a timeout in
//!    `record_start` or `expire_idle` (the cache held no part), or at
//!    `flush` (the cache was drained first).
//!
//! # Cost
//!
//! One hash lookup per call; `expire_idle` walks the map (`O(open flows)`,
//! once per scan interval).

use clarion_records::{EndReason, FlowRecord};
use clarion_wire::FlowKey;
use rustc_hash::FxHashMap;

use crate::cache::{Microflow, Timeouts};

/// A flow's open record as far as the aggregator holds it.
#[derive(Clone, Copy, Debug)]
struct OpenPart {
    record: FlowRecord,
    first_clock: u64,
    last_clock: u64,
}

/// The aggregator (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct Aggregator {
    open: FxHashMap<FlowKey, OpenPart>,
    records: u64,
}

#[inline]
fn merge(into: &mut FlowRecord, m: &FlowRecord) {
    into.first_ns = into.first_ns.min(m.first_ns);
    into.last_ns = into.last_ns.max(m.last_ns);
    into.packets += m.packets;
    into.bytes += m.bytes;
    into.tcp_flags |= m.tcp_flags;
    into.min_size = into.min_size.min(m.min_size);
    into.max_size = into.max_size.max(m.max_size);
}

impl Aggregator {
    pub fn new() -> Aggregator {
        Aggregator::default()
    }

    /// An aggregator with room for `flows` open parts before it grows.
    pub fn with_capacity(flows: usize) -> Aggregator {
        Aggregator {
            open: FxHashMap::with_capacity_and_hasher(flows, Default::default()),
            records: 0,
        }
    }

    #[inline]
    fn emit(&mut self, mut record: FlowRecord, reason: EndReason, out: &mut Vec<FlowRecord>) {
        record.end_reason = reason;
        self.records += 1;
        out.push(record);
    }

    /// Merges a microflow into its flow's open part; with `end`, the
    /// record (open part and microflow) then ends with that reason.
    #[inline]
    pub fn absorb(&mut self, m: &Microflow, end: Option<EndReason>, out: &mut Vec<FlowRecord>) {
        match end {
            None => {
                self.open
                    .entry(m.record.key)
                    .and_modify(|o| {
                        merge(&mut o.record, &m.record);
                        o.last_clock = o.last_clock.max(m.last_clock);
                    })
                    .or_insert(OpenPart {
                        record: m.record,
                        first_clock: m.record_first_clock,
                        last_clock: m.last_clock,
                    });
            }
            Some(reason) => {
                let mut record = m.record;
                if let Some(o) = self.open.remove(&m.record.key) {
                    let mut whole = o.record;
                    merge(&mut whole, &record);
                    record = whole;
                }
                self.emit(record, reason, out);
            }
        }
    }

    /// A packet of `key` at `clock` found no microflow of its flow in the
    /// cache: ends the flow's open part if the packet times it out (idle
    /// first, then active), and returns the packet clock at which the
    /// packet's record began (`clock` when it starts one).
    #[inline]
    pub fn record_start(&mut self, key: &FlowKey, clock: u64, t: Timeouts, out: &mut Vec<FlowRecord>) -> u64 {
        let Some(o) = self.open.get(key) else {
            return clock;
        };
        let reason = if clock.saturating_sub(o.last_clock) > t.idle_ns {
            EndReason::Idle
        } else if clock.saturating_sub(o.first_clock) > t.active_ns {
            EndReason::Active
        } else {
            return o.first_clock;
        };
        if let Some(o) = self.open.remove(key) {
            self.emit(o.record, reason, out);
        }
        clock
    }

    /// Ends, with reason `Idle`, the open parts whose last packet is more
    /// than `idle_ns` before `clock` and whose flow `cached` says has no
    /// microflow in the cache (a cached part is later, invariant 1; the
    /// cache's own idle scan runs first, so a cached part is not idle).
    /// Returns the smallest `last_clock` of the parts left (`u64::MAX`
    /// when none).
    pub fn expire_idle(
        &mut self,
        clock: u64,
        idle_ns: u64,
        cached: impl Fn(&FlowKey) -> bool,
        out: &mut Vec<FlowRecord>,
    ) -> u64 {
        let mut ended = 0;
        let mut oldest = u64::MAX;
        self.open.retain(|k, o| {
            let idle = clock.saturating_sub(o.last_clock) > idle_ns && !cached(k);
            if idle {
                let mut r = o.record;
                r.end_reason = EndReason::Idle;
                out.push(r);
                ended += 1;
            } else {
                oldest = oldest.min(o.last_clock);
            }
            !idle
        });
        self.records += ended;
        oldest
    }

    /// Ends every open part with reason `Flush` (drain the cache first).
    pub fn flush(&mut self, out: &mut Vec<FlowRecord>) {
        self.records += self.open.len() as u64;
        out.extend(self.open.drain().map(|(_, o)| FlowRecord {
            end_reason: EndReason::Flush,
            ..o.record
        }));
    }

    /// Whether the key has an open part here.
    pub fn contains(&self, key: &FlowKey) -> bool {
        self.open.contains_key(key)
    }

    /// Flows with an open part here.
    pub fn open_flows(&self) -> usize {
        self.open.len()
    }

    /// Records emitted.
    pub fn records(&self) -> u64 {
        self.records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timeouts = Timeouts {
        idle_ns: 100,
        active_ns: 1_000,
    };

    fn mfr(n: u8, first: u64, last: u64, packets: u64, record_first: u64) -> Microflow {
        let key = FlowKey::new(
            [10, 0, 0, n].into(),
            [10, 0, 0, 99].into(),
            17,
            Some((1, 2)),
            None,
        );
        let mut record = FlowRecord::of_packet(key, first, 50, 0);
        record.last_ns = last;
        record.packets = packets;
        record.bytes = 50 * packets;
        Microflow {
            record,
            last_clock: last,
            record_first_clock: record_first,
        }
    }

    #[test]
    fn parts_merge_until_an_end_reason() {
        let mut a = Aggregator::new();
        let mut out = Vec::new();
        a.absorb(&mfr(1, 0, 10, 2, 0), None, &mut out);
        a.absorb(&mfr(1, 20, 30, 3, 0), None, &mut out);
        assert!(out.is_empty());
        a.absorb(&mfr(1, 40, 50, 1, 0), Some(EndReason::End), &mut out);
        assert_eq!(out.len(), 1);
        let r = out[0];
        assert_eq!((r.first_ns, r.last_ns, r.packets, r.bytes), (0, 50, 6, 300));
        assert_eq!(r.end_reason, EndReason::End);
        assert_eq!((a.open_flows(), a.records()), (0, 1));
    }

    #[test]
    fn record_start_ends_timed_out_parts() {
        let mut a = Aggregator::new();
        let mut out = Vec::new();
        a.absorb(&mfr(1, 0, 50, 2, 0), None, &mut out);
        let k = mfr(1, 0, 0, 1, 0).record.key;
        assert_eq!(a.record_start(&k, 150, T, &mut out), 0, "100 after: not idle");
        assert_eq!(a.record_start(&k, 151, T, &mut out), 151, "101 after: idle");
        assert_eq!(out[0].end_reason, EndReason::Idle);
        // A part whose record began at 0 (its earlier part left the cache).
        a.absorb(&mfr(1, 960, 1_000, 2, 0), None, &mut out);
        assert_eq!(
            a.record_start(&k, 1_000, T, &mut out),
            0,
            "1_000 after the start: not yet"
        );
        assert_eq!(a.record_start(&k, 1_050, T, &mut out), 1_050, "active");
        assert_eq!(out[1].end_reason, EndReason::Active);
        let other = mfr(2, 0, 0, 1, 0).record.key;
        assert_eq!(a.record_start(&other, 7, T, &mut out), 7, "no part: a new record");
    }

    #[test]
    fn expire_idle_spares_cached_flows_and_flush_ends_all() {
        let mut a = Aggregator::new();
        let mut out = Vec::new();
        a.absorb(&mfr(1, 0, 10, 1, 0), None, &mut out);
        a.absorb(&mfr(2, 0, 10, 1, 0), None, &mut out);
        a.absorb(&mfr(3, 0, 90, 1, 0), None, &mut out);
        let cached = mfr(2, 0, 0, 1, 0).record.key;
        let oldest = a.expire_idle(120, T.idle_ns, |k| *k == cached, &mut out);
        assert_eq!(oldest, 10, "flow 2, spared");
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].key, mfr(1, 0, 0, 1, 0).record.key);
        a.flush(&mut out);
        assert_eq!(out.len(), 3);
        assert!(out[1..].iter().all(|r| r.end_reason == EndReason::Flush));
        assert_eq!((a.open_flows(), a.records()), (0, 3));
    }
}
