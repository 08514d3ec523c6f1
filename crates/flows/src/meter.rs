//! The flow meter: a [`MicroflowCache`] in front of an [`Aggregator`], one
//! call per packet, flow records out.
//!
//! # The semantics (what `clarion_reference::flows` evaluates)
//!
//! Packets are taken in input order. The *packet clock* is the largest
//! timestamp seen so far (a packet stamped earlier than one before it is
//! judged at the later time; records keep the packets' own smallest and
//! largest timestamps). Per flow key (directional 5-tuple + VLAN, as
//! parsed: a later IP fragment has no ports and is its own key):
//!
//! 1. A packet starts a new record if its flow has no open record; if the
//!    clock is more than `idle_timeout_ns` past the open record's last
//!    packet clock (the open record first ends with reason `Idle`); or if it
//!    is more than `active_timeout_ns` past the open record's first packet
//!    clock (it first ends with reason `Active`). Idle is tested first.
//! 2. Otherwise the packet joins the open record.
//! 3. A packet with TCP FIN or RST set then ends its record, reason `End`.
//! 4. At the end of input ([`FlowMeter::finish`]), each open record ends:
//!    with `Idle` if the final clock is more than the idle timeout past its
//!    last packet, otherwise with `Flush`.
//!
//! Rule 4's `Idle` is what makes early emission exact: every
//! `scan_interval_ns` of packet clock the meter ends the records already
//! idle (cache first, then aggregator), and such a record would end `Idle`
//! under rules 1 and 4 anyway, since the clock never goes back. So records
//! idle for the timeout come out at most one scan interval (plus the
//! wait for the next packet) late, and the output does not depend on
//! when scans ran, nor on the cache's size or associativity.
//!
//! # Cost
//!
//! Per packet: the cache's hit (one hash, `ways` compares) or miss (plus
//! two aggregator lookups); per scan: `O(cache slots + open flows)`.

use clarion_records::FlowRecord;
use clarion_wire::PacketRecord;

use crate::aggregator::Aggregator;
use crate::cache::{MicroflowCache, Timeouts};
use crate::FlowError;

/// Default microflow cache slots.
pub const DEFAULT_CACHE_SLOTS: usize = 4096;
/// Default idle timeout: 15 s (Cisco NetFlow's inactive timeout).
pub const DEFAULT_IDLE_TIMEOUT_NS: u64 = 15_000_000_000;
/// Default active timeout: 300 s (ipfixprobe's; nProbe uses 120 s).
pub const DEFAULT_ACTIVE_TIMEOUT_NS: u64 = 300_000_000_000;
/// Default interval between idle scans: 1 s of packet clock.
pub const DEFAULT_SCAN_INTERVAL_NS: u64 = 1_000_000_000;

/// How to build a [`FlowMeter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowConfig {
    /// Microflow cache slots (`C`, any positive multiple of `ways`).
    pub cache_slots: usize,
    /// Ways per set (`L`): 1 is direct mapped; LRU inside a set.
    pub ways: usize,
    pub idle_timeout_ns: u64,
    pub active_timeout_ns: u64,
    /// Packet-clock time between scans for idle records (latency only:
    /// the records do not depend on it).
    pub scan_interval_ns: u64,
    /// Seed of the cache's hash (the model averages over seeds).
    pub hash_seed: u64,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            cache_slots: DEFAULT_CACHE_SLOTS,
            ways: 1,
            idle_timeout_ns: DEFAULT_IDLE_TIMEOUT_NS,
            active_timeout_ns: DEFAULT_ACTIVE_TIMEOUT_NS,
            scan_interval_ns: DEFAULT_SCAN_INTERVAL_NS,
            hash_seed: 0,
        }
    }
}

impl FlowConfig {
    pub fn timeouts(&self) -> Timeouts {
        Timeouts {
            idle_ns: self.idle_timeout_ns,
            active_ns: self.active_timeout_ns,
        }
    }
}

/// A meter's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowStats {
    pub packets: u64,
    /// Microflow records that reached the aggregator (any reason).
    pub microflow_records: u64,
    /// Microflow records evicted by another flow's packet.
    pub collisions: u64,
    /// Flow records emitted.
    pub records: u64,
    /// Flows with an open record now.
    pub active_flows: u64,
}

impl FlowStats {
    /// `collisions / packets` (TurboFlow's `P[eviction]` per packet).
    pub fn eviction_ratio(&self) -> f64 {
        ratio(self.collisions, self.packets)
    }

    /// `packets / microflow_records` (Table 2.5's "Packets : mFR").
    pub fn packets_per_microflow_record(&self) -> f64 {
        ratio(self.packets, self.microflow_records)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// The flow meter (see the module doc). Single-threaded; one per worker.
#[derive(Clone, Debug)]
pub struct FlowMeter {
    config: FlowConfig,
    timeouts: Timeouts,
    cache: MicroflowCache,
    agg: Aggregator,
    /// Largest timestamp so far (0 before the first packet).
    clock: u64,
    /// Packet clock at which the next idle scan runs (`None` before the first packet).
    next_scan: Option<u64>,
    /// At most the `last_clock` of every cached microflow and open part
    /// (new ones start at the clock, updates raise it, the aggregator
    /// takes the cache's): a scan while `clock - floor <= idle` would end
    /// nothing and is skipped.
    floor: u64,
}

impl FlowMeter {
    pub fn new(config: FlowConfig) -> Result<FlowMeter, FlowError> {
        if config.scan_interval_ns == 0 {
            return Err(FlowError::NoScanInterval);
        }
        Ok(FlowMeter {
            config,
            timeouts: config.timeouts(),
            cache: MicroflowCache::new(config.cache_slots, config.ways, config.hash_seed)?,
            agg: Aggregator::with_capacity(config.cache_slots),
            clock: 0,
            next_scan: None,
            floor: 0,
        })
    }

    pub fn config(&self) -> &FlowConfig {
        &self.config
    }

    /// Takes one packet; records that end go to `out`.
    #[inline]
    pub fn process(&mut self, p: &PacketRecord, out: &mut Vec<FlowRecord>) {
        self.clock = self.clock.max(p.ts_ns);
        match self.next_scan {
            Some(at) if self.clock < at => {}
            Some(_) => self.scan_on_grid(out),
            None => self.next_scan = Some(self.grid_point().saturating_add(self.config.scan_interval_ns)),
        }
        self.cache
            .process(p, self.clock, self.timeouts, &mut self.agg, out);
    }

    /// Takes packets in order.
    pub fn process_batch(&mut self, packets: &[PacketRecord], out: &mut Vec<FlowRecord>) {
        for p in packets {
            self.process(p, out);
        }
    }

    /// The last multiple of the scan interval the clock has reached.
    fn grid_point(&self) -> u64 {
        self.clock - self.clock % self.config.scan_interval_ns
    }

    /// The idle scans that are due, each at its grid point: a live worker's
    /// ticks and a file's packets reach the points at different clocks and
    /// must end the same records in the same order
    /// (crates/cli/tests/same_outputs.rs). At a point every packet before
    /// it is in and none after it; a clock that jumped over several points
    /// scans at each where a record can end (from `floor + idle` on), as a
    /// tick per point would, for a scan's records leave in slot order.
    fn scan_on_grid(&mut self, out: &mut Vec<FlowRecord>) {
        let every = self.config.scan_interval_ns;
        let last = self.grid_point();
        while let Some(at) = self.next_scan.filter(|&at| at <= last) {
            let first_idle = self.floor.saturating_add(self.timeouts.idle_ns).saturating_add(1);
            let at = at.max(first_idle.div_ceil(every).saturating_mul(every)).min(last);
            self.scan(at, out);
            self.next_scan = Some(at.saturating_add(every));
        }
    }

    /// Ends the records idle at `now` (semantics rule 1/4).
    fn scan(&mut self, now: u64, out: &mut Vec<FlowRecord>) {
        let idle = self.timeouts.idle_ns;
        if now.saturating_sub(self.floor) <= idle {
            return;
        }
        let cached = self.cache.scan_idle(now, idle, &mut self.agg, out);
        let cache = &self.cache;
        let open = self.agg.expire_idle(now, idle, |k| cache.contains(k), out);
        // Parts and microflows made later start at the clock, past `now`.
        self.floor = cached.min(open).min(now);
    }

    /// Advances the clock to `now_ns` with no packet (a live worker on a
    /// quiet wire), ending the records idle by then, as a packet at that
    /// time would. Never moves the clock back; before the first packet it
    /// does nothing.
    pub fn tick(&mut self, now_ns: u64, out: &mut Vec<FlowRecord>) {
        let Some(at) = self.next_scan else { return };
        self.clock = self.clock.max(now_ns);
        if self.clock >= at {
            self.scan_on_grid(out);
        }
    }

    /// End of input: every open record ends (rule 4). The meter is empty
    /// afterwards and may take more packets.
    pub fn finish(&mut self, out: &mut Vec<FlowRecord>) {
        if self.next_scan.is_some() {
            self.scan(self.clock, out);
        }
        self.cache.drain(&mut self.agg, out);
        self.agg.flush(out);
    }

    pub fn stats(&self) -> FlowStats {
        let cached_only = self
            .cache
            .microflows()
            .filter(|m| !self.agg.contains(&m.record.key))
            .count();
        FlowStats {
            packets: self.cache.packets(),
            microflow_records: self.cache.sent(),
            collisions: self.cache.collisions(),
            records: self.agg.records(),
            active_flows: (self.agg.open_flows() + cached_only) as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_records::EndReason;
    use clarion_wire::FlowKey;

    fn pkt(n: u8, ts: u64) -> PacketRecord {
        PacketRecord {
            ts_ns: ts,
            key: FlowKey::new([10, 0, 0, n].into(), [10, 0, 0, 1].into(), 17, Some((5, 6)), None),
            size: 60,
            ..PacketRecord::default()
        }
    }

    fn small() -> FlowConfig {
        FlowConfig {
            cache_slots: 4,
            idle_timeout_ns: 1_000,
            active_timeout_ns: 100_000,
            scan_interval_ns: 100,
            ..FlowConfig::default()
        }
    }

    #[test]
    fn a_tick_ends_idle_records_on_a_quiet_wire() {
        let mut m = FlowMeter::new(small()).unwrap();
        let mut out = Vec::new();
        m.tick(5_000, &mut out);
        assert!(out.is_empty(), "nothing before the first packet");
        m.process(&pkt(1, 10_000), &mut out);
        m.tick(10_900, &mut out);
        assert!(out.is_empty(), "not idle yet");
        m.tick(9_000, &mut out);
        m.tick(11_001, &mut out);
        assert!(
            out.is_empty(),
            "the scan's grid point, 11,000, is not past the timeout"
        );
        m.tick(11_100, &mut out);
        assert_eq!(out.len(), 1, "idle strictly past the timeout");
        assert_eq!((out[0].last_ns, out[0].end_reason), (10_000, EndReason::Idle));
        // The flow's next packet opens a new record.
        m.process(&pkt(1, 11_500), &mut out);
        m.finish(&mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(
            (out[1].first_ns, out[1].packets, out[1].end_reason),
            (11_500, 1, EndReason::Flush)
        );
    }

    #[test]
    fn idle_records_leave_while_traffic_goes_on() {
        let mut m = FlowMeter::new(small()).unwrap();
        let mut out = Vec::new();
        m.process(&pkt(1, 0), &mut out);
        // Flow 2 keeps the clock moving; flow 1 went idle at 1_000.
        let mut ts = 0;
        while out.is_empty() {
            ts += 50;
            m.process(&pkt(2, ts), &mut out);
        }
        assert_eq!((out[0].key, out[0].end_reason), (pkt(1, 0).key, EndReason::Idle));
        assert!(ts <= 1_000 + 100 + 50, "within one scan interval: {ts}");
        let s = m.stats();
        assert_eq!((s.packets, s.records, s.active_flows), (ts / 50 + 1, 1, 1));
        m.finish(&mut out);
        assert_eq!(out[1].end_reason, EndReason::Flush);
        assert_eq!(m.stats().active_flows, 0);
    }

    #[test]
    fn finish_ends_idle_records_idle_and_the_rest_flush() {
        let mut m = FlowMeter::new(FlowConfig {
            scan_interval_ns: u64::MAX,
            ..small()
        })
        .unwrap();
        let mut out = Vec::new();
        m.process_batch(&[pkt(1, 0), pkt(2, 5_000)], &mut out);
        assert!(out.is_empty(), "no scan ran");
        m.finish(&mut out);
        out.sort_by_key(|r| r.first_ns);
        assert_eq!(out[0].end_reason, EndReason::Idle);
        assert_eq!(out[1].end_reason, EndReason::Flush);
    }

    /// A live worker ticks its meter on a quiet wire, between packets; the
    /// scans stay on their grid points, so the records and their order are
    /// those of the packets alone.
    #[test]
    fn ticks_between_packets_end_the_same_records_in_the_same_order() {
        let mut idle = 0;
        for seed in 1..40u64 {
            // 300 packets of 12 flows, 1 to 400 ns apart (a xorshift stream):
            // flows go quiet and end idle at scans (small(): every 100 ns).
            let (mut x, mut t) = (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15), 0);
            let packets: Vec<PacketRecord> = (0..300)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    t += 1 + x % 400;
                    pkt((x >> 32) as u8 % 12, t)
                })
                .collect();
            let run = |ticks: bool| {
                let mut m = FlowMeter::new(small()).unwrap();
                let mut out = Vec::new();
                for (k, p) in packets.iter().enumerate() {
                    if let (true, Some(prev)) = (ticks, k.checked_sub(1)) {
                        m.tick((packets[prev].ts_ns + p.ts_ns) / 2, &mut out);
                    }
                    m.process(p, &mut out);
                }
                m.finish(&mut out);
                out
            };
            let plain = run(false);
            idle += plain.iter().filter(|r| r.end_reason == EndReason::Idle).count();
            assert_eq!(run(true), plain, "seed {seed}");
        }
        assert!(idle > 100, "records ended idle: {idle}");
    }

    #[test]
    fn rejects_a_zero_scan_interval() {
        let c = FlowConfig {
            scan_interval_ns: 0,
            ..FlowConfig::default()
        };
        assert_eq!(FlowMeter::new(c).unwrap_err(), FlowError::NoScanInterval);
    }
}
