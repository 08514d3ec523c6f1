//! Traffic-classifier features per flow (*Flow §3.6, after Moore et al.):
//! the sizes of the flow's first [`FIRST_PACKETS`] packets, the
//! inter-arrival times between them, and the mean and standard deviation
//! of each.
//!
//! "First packets" are the flow's, not each GPV's: the app keeps each
//! flow's features across its GPVs (a flow's GPVs arrive in packet order)
//! and stops looking at a flow's packets once it has eight. An
//! inter-arrival is the gap to the flow's previous packet, clamped at 0 if
//! the capture's clock stepped back. Standard deviations are population
//! ones (divide by n); statistics of an empty list are `None`.
//!
//! Cost: one hash lookup a GPV, and per-packet work only for a flow's first
//! eight packets. Memory: one 96-byte entry per flow ever seen (no expiry).

use std::collections::BTreeMap;

use clarion_wire::FlowKey;
use rustc_hash::FxHashMap;
use serde_json::{json, Value};

use crate::app::{key_json, GpvApp};
use crate::gpv::Gpv;

/// How many of a flow's first packets the features describe.
pub const FIRST_PACKETS: usize = 8;

/// A flow's classifier features (fixed arrays: no allocation per flow).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowFeatures {
    /// All the flow's packets, not only the first eight.
    pub packets: u64,
    /// How many first packets are held (at most eight).
    held: u8,
    sizes: [u16; FIRST_PACKETS],
    gaps: [u64; FIRST_PACKETS - 1],
    last_ns: u64,
}

impl FlowFeatures {
    /// IP sizes of the first packets (at most eight).
    pub fn sizes(&self) -> &[u16] {
        &self.sizes[..usize::from(self.held)]
    }

    /// Gaps between consecutive first packets, ns (one fewer than the sizes).
    pub fn inter_arrivals_ns(&self) -> &[u64] {
        &self.gaps[..usize::from(self.held.saturating_sub(1))]
    }

    pub fn size_mean(&self) -> Option<f64> {
        mean(self.sizes().iter().map(|&s| f64::from(s)))
    }

    pub fn size_std(&self) -> Option<f64> {
        std_dev(self.sizes().iter().map(|&s| f64::from(s)))
    }

    pub fn inter_arrival_mean_ns(&self) -> Option<f64> {
        mean(self.inter_arrivals_ns().iter().map(|&g| g as f64))
    }

    pub fn inter_arrival_std_ns(&self) -> Option<f64> {
        std_dev(self.inter_arrivals_ns().iter().map(|&g| g as f64))
    }
}

fn mean(xs: impl Iterator<Item = f64> + Clone) -> Option<f64> {
    let n = xs.clone().count();
    (n > 0).then(|| xs.sum::<f64>() / n as f64)
}

fn std_dev(xs: impl Iterator<Item = f64> + Clone) -> Option<f64> {
    let m = mean(xs.clone())?;
    let n = xs.clone().count() as f64;
    Some((xs.map(|x| (x - m) * (x - m)).sum::<f64>() / n).sqrt())
}

/// The classifier-features app (`"classifier"`).
pub struct Classifier {
    name: String,
    flows: FxHashMap<FlowKey, FlowFeatures>,
}

impl Default for Classifier {
    fn default() -> Self {
        Classifier::new()
    }
}

impl Classifier {
    pub fn new() -> Classifier {
        Classifier::named("classifier")
    }

    pub fn named(name: &str) -> Classifier {
        Classifier {
            name: name.to_string(),
            flows: FxHashMap::default(),
        }
    }

    /// Every flow's features, by key.
    pub fn flows(&self) -> BTreeMap<FlowKey, &FlowFeatures> {
        self.flows.iter().map(|(k, f)| (*k, f)).collect()
    }
}

impl GpvApp for Classifier {
    fn name(&self) -> &str {
        &self.name
    }

    fn on_gpv(&mut self, gpv: &Gpv) {
        let f = self.flows.entry(gpv.header.key).or_default();
        f.packets += gpv.packets.len() as u64;
        for (t, p) in gpv.timed() {
            let n = usize::from(f.held);
            if n == FIRST_PACKETS {
                break;
            }
            if n > 0 {
                f.gaps[n - 1] = t.saturating_sub(f.last_ns);
            }
            f.sizes[n] = p.size;
            f.last_ns = t;
            f.held += 1;
        }
    }

    fn report(&mut self) -> Value {
        let flows: Vec<Value> = self
            .flows()
            .into_iter()
            .map(|(k, f)| {
                json!({
                    "flow": key_json(&k),
                    "packets": f.packets,
                    "sizes": f.sizes(),
                    "inter_arrivals_ns": f.inter_arrivals_ns(),
                    "size_mean": f.size_mean(),
                    "size_std": f.size_std(),
                    "inter_arrival_mean_ns": f.inter_arrival_mean_ns(),
                    "inter_arrival_std_ns": f.inter_arrival_std_ns(),
                })
            })
            .collect();
        json!({ "flows": flows })
    }
}
