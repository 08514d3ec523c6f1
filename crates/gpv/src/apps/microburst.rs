//! Micro-burst culprit finder: given an instant `t` (when a queue was seen
//! congested) and a window `w`, which flows sent packets in `[t - w, t)`,
//! ranked by bytes, descending (ties by flow key, so the answer is
//! deterministic).
//!
//! *Flow's debugger (§3.6) is triggered by a high-queue flag in the packet
//! tuples; a host sees no switch queue, so here the instant is asked for
//! ([`MicroBurst::culprits`]), and [`GpvApp::report`] answers for the
//! window that ends just after the latest packet seen.
//!
//! The app keeps recent GPVs in arrival order and drops a GPV from the
//! front once its last packet is more than `retain_ns` before the latest
//! packet time seen (it may keep more: a GPV behind the front waits for
//! the front to go). A GPV is dropped only for its *own* last packet, so
//! however late the cache delivered it, a query for `[t - w, t)` is
//! complete whenever `t - w >= latest - retain_ns`; in particular the
//! report's window is complete whenever `retain_ns >= window_ns`.
//!
//! Cost: a GPV clone per GPV; a query scans every retained packet once.

use std::collections::VecDeque;

use clarion_wire::FlowKey;
use rustc_hash::FxHashMap;
use serde_json::{json, Value};

use crate::app::{key_json, GpvApp};
use crate::gpv::Gpv;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MicroBurstConfig {
    /// The window the report asks about (`w`).
    pub window_ns: u64,
    /// How long GPVs are kept, measured from their last packet to the
    /// latest packet seen (`u64::MAX`: forever).
    pub retain_ns: u64,
    /// How many culprits the report lists.
    pub top: usize,
}

impl Default for MicroBurstConfig {
    /// A 1 ms window, 10 s of history for queries into the past, the top
    /// 10 flows.
    fn default() -> Self {
        MicroBurstConfig {
            window_ns: 1_000_000,
            retain_ns: 10_000_000_000,
            top: 10,
        }
    }
}

/// A flow that sent in the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Culprit {
    pub key: FlowKey,
    pub bytes: u64,
    pub packets: u64,
}

struct Kept {
    last_ns: u64,
    gpv: Gpv,
}

/// The micro-burst app (`"microburst"`).
pub struct MicroBurst {
    name: String,
    cfg: MicroBurstConfig,
    kept: VecDeque<Kept>,
    latest: Option<u64>,
}

impl MicroBurst {
    pub fn new(cfg: MicroBurstConfig) -> MicroBurst {
        MicroBurst::named("microburst", cfg)
    }

    pub fn named(name: &str, cfg: MicroBurstConfig) -> MicroBurst {
        MicroBurst {
            name: name.to_string(),
            cfg,
            kept: VecDeque::new(),
            latest: None,
        }
    }

    /// The latest packet time seen.
    pub fn latest_ns(&self) -> Option<u64> {
        self.latest
    }

    /// GPVs held.
    pub fn retained(&self) -> usize {
        self.kept.len()
    }

    /// Flows with packets in `[t_ns - window_ns, t_ns)`, by bytes
    /// descending, then by key.
    pub fn culprits(&self, t_ns: u64, window_ns: u64) -> Vec<Culprit> {
        let from = t_ns.saturating_sub(window_ns);
        let mut by_flow: FxHashMap<FlowKey, (u64, u64)> = FxHashMap::default();
        for k in &self.kept {
            if k.last_ns < from || k.gpv.header.start_ns >= t_ns {
                continue;
            }
            for (t, p) in k.gpv.timed() {
                if (from..t_ns).contains(&t) {
                    let e = by_flow.entry(k.gpv.header.key).or_default();
                    e.0 += u64::from(p.size);
                    e.1 += 1;
                }
            }
        }
        let mut out: Vec<Culprit> = by_flow
            .into_iter()
            .map(|(key, (bytes, packets))| Culprit { key, bytes, packets })
            .collect();
        out.sort_unstable_by(|a, b| b.bytes.cmp(&a.bytes).then(a.key.cmp(&b.key)));
        out
    }
}

impl GpvApp for MicroBurst {
    fn name(&self) -> &str {
        &self.name
    }

    fn on_gpv(&mut self, gpv: &Gpv) {
        let Some(last_ns) = gpv.timed().map(|(t, _)| t).max() else {
            return;
        };
        let latest = self.latest.map_or(last_ns, |l| l.max(last_ns));
        self.latest = Some(latest);
        self.kept.push_back(Kept {
            last_ns,
            gpv: gpv.clone(),
        });
        while let Some(front) = self.kept.front() {
            if latest - front.last_ns <= self.cfg.retain_ns {
                break;
            }
            self.kept.pop_front();
        }
    }

    fn report(&mut self) -> Value {
        let Some(latest) = self.latest else {
            return json!({ "window_ns": self.cfg.window_ns, "end_ns": null, "culprits": [] });
        };
        let end = latest.saturating_add(1);
        let culprits: Vec<Value> = self
            .culprits(end, self.cfg.window_ns)
            .into_iter()
            .take(self.cfg.top)
            .map(|c| json!({ "flow": key_json(&c.key), "bytes": c.bytes, "packets": c.packets }))
            .collect();
        json!({ "window_ns": self.cfg.window_ns, "end_ns": end, "culprits": culprits })
    }
}
