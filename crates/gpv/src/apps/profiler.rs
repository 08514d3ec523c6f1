//! Host timing profiler: for each source host, the distribution of its
//! packets' inter-arrival times, as a log2-bucket histogram.
//!
//! An inter-arrival is the time from a packet to the previous packet *of
//! the same flow* (clamped at 0 if the capture's clock stepped back),
//! counted under the flow's source address. GPVs split a flow into runs,
//! so the app keeps each flow's last packet time: the gap between two GPVs
//! of a flow counts like any other, and the histograms equal those
//! computed from the raw packets (the cache emits a flow's GPVs in packet
//! order). Per-flow gaps, not per-host: a host's packets of different
//! flows reach the app out of order (GPVs interleave), so host-level gaps
//! would need a sort the paper's agent does not do either.
//!
//! Bucket 0 counts gaps of 0 ns; bucket `b ≥ 1` counts gaps in
//! `[2^(b-1), 2^b)` ns, so 65 buckets cover every `u64`.
//!
//! Cost: two hash lookups a GPV (the flow's last time, the host's
//! histogram) and a leading-zero count a packet. Memory: one entry per flow
//! ever seen (no expiry) and 65 counters per host.

use std::collections::BTreeMap;
use std::net::IpAddr;

use clarion_wire::FlowKey;
use rustc_hash::FxHashMap;
use serde_json::{json, Value};

use crate::app::GpvApp;
use crate::gpv::Gpv;

/// Counts of values by power-of-two bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Log2Histogram {
    pub buckets: [u64; 65],
}

impl Default for Log2Histogram {
    fn default() -> Self {
        Log2Histogram { buckets: [0; 65] }
    }
}

impl Log2Histogram {
    /// The bucket of a value: 0 for 0, else the number of significant bits.
    #[inline]
    pub fn bucket_of(v: u64) -> usize {
        (u64::BITS - v.leading_zeros()) as usize
    }

    /// The values bucket `b` counts: `[lo, hi)`, `hi` `None` past `u64`.
    pub fn bounds(b: usize) -> (u64, Option<u64>) {
        match b {
            0 => (0, Some(1)),
            _ => (1 << (b - 1), 1u64.checked_shl(b as u32)),
        }
    }

    #[inline]
    pub fn add(&mut self, v: u64) {
        self.buckets[Self::bucket_of(v)] += 1;
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Host {
    packets: u64,
    gaps: Log2Histogram,
}

/// The profiler app (`"profiler"`).
pub struct Profiler {
    name: String,
    /// Each flow's last packet time (`None` only transiently).
    last: FxHashMap<FlowKey, Option<u64>>,
    hosts: FxHashMap<IpAddr, Host>,
}

impl Default for Profiler {
    fn default() -> Self {
        Profiler::new()
    }
}

impl Profiler {
    pub fn new() -> Profiler {
        Profiler::named("profiler")
    }

    /// A profiler known to the runtime by another name (two configurations at once).
    pub fn named(name: &str) -> Profiler {
        Profiler {
            name: name.to_string(),
            last: FxHashMap::default(),
            hosts: FxHashMap::default(),
        }
    }

    /// Each source host's inter-arrival histogram, by address.
    pub fn histograms(&self) -> BTreeMap<IpAddr, &Log2Histogram> {
        self.hosts.iter().map(|(a, h)| (*a, &h.gaps)).collect()
    }

    /// Packets seen from each source host.
    pub fn packets(&self) -> BTreeMap<IpAddr, u64> {
        self.hosts.iter().map(|(a, h)| (*a, h.packets)).collect()
    }
}

impl GpvApp for Profiler {
    fn name(&self) -> &str {
        &self.name
    }

    fn on_gpv(&mut self, gpv: &Gpv) {
        let key = gpv.header.key;
        if gpv.packets.is_empty() {
            return;
        }
        let host = self.hosts.entry(key.src_addr()).or_default();
        host.packets += gpv.packets.len() as u64;
        let start = gpv.header.start_ns;
        let last = self.last.entry(key).or_insert(None);
        let mut prev = *last; // None: the flow's first packet has no gap
        for p in &gpv.packets {
            let t = start.saturating_add(u64::from(p.delta));
            if let Some(prev) = prev {
                host.gaps.add(t.saturating_sub(prev));
            }
            prev = Some(t);
        }
        *last = prev;
    }

    fn report(&mut self) -> Value {
        let hosts: Vec<Value> = self
            .hosts
            .iter()
            .collect::<BTreeMap<_, _>>()
            .into_iter()
            .map(|(addr, h)| {
                let buckets: Vec<Value> = (0..65)
                    .filter(|&b| h.gaps.buckets[b] > 0)
                    .map(|b| {
                        let (lo, hi) = Log2Histogram::bounds(b);
                        json!({ "from_ns": lo, "below_ns": hi, "count": h.gaps.buckets[b] })
                    })
                    .collect();
                json!({
                    "host": addr.to_string(),
                    "packets": h.packets,
                    "inter_arrivals": h.gaps.count(),
                    "buckets": buckets,
                })
            })
            .collect();
        json!({ "hosts": hosts })
    }
}
