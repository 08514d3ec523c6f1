//! Several hosts' answers to one query, merged: the flows behind a
//! network-wide event, whose group spans hosts (the manager's
//! `GET /v1/flows`).
//!
//! Each host answers from its own window ([`crate::FlowWindow::query`])
//! with at most `top` talkers. The merge sums the talkers of one key
//! (packets, bytes, records; the earliest first packet, the latest last)
//! as the manager sums the hosts' values of an event: a flow two hosts
//! both see (one sends, the other receives) counts at each, as its
//! packets count in each host's part of the event's aggregate. Then it
//! ranks as one host does (by bytes or packets, the other and then the
//! key breaking ties) and keeps the top.
//!
//! # When the ranking is not exact
//!
//! A host that counted more flows than it listed (`flows` > its
//! talkers) left some out: one of those, summed with another host's
//! part, could have ranked in the merged top. The answer then says
//! `truncated`; its totals stay exact (each host's totals are over every
//! record it counted, not only those listed). The merge keeps at most
//! [`MAX_MERGED`] distinct keys: beyond, a key is left out and the answer
//! is truncated too (a thousand hosts of a thousand talkers each).

use std::collections::HashMap;

use clarion_wire::FlowKey;
use serde_json::{json, Value};

use crate::{answer_head, rank_key, FlowQuery, Rank, Talker};

/// The most distinct keys a merge keeps.
pub const MAX_MERGED: usize = 200_000;

/// One host's answer, as it travels to the manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostAnswer {
    pub host: String,
    /// Its top talkers, ranked.
    pub talkers: Vec<Talker>,
    /// Over every record it counted, not only those listed.
    pub flows: u64,
    pub records: u64,
    pub packets: u64,
    pub bytes: u64,
    /// No record that could have counted was dropped from its window.
    pub complete: bool,
    /// It listed fewer talkers than it counted flows (see the module's documentation).
    pub truncated: bool,
}

/// The merged answer of every host asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Merged {
    /// The top talkers over every host, ranked.
    pub talkers: Vec<Talker>,
    /// Sums of the hosts' totals (a flow two hosts count, counted twice in `flows`).
    pub flows: u64,
    pub records: u64,
    pub packets: u64,
    pub bytes: u64,
    /// Every host that answered was complete.
    pub complete: bool,
    /// A host listed fewer talkers than it counted, or the merge left keys out.
    pub truncated: bool,
    /// The hosts that answered, with their totals, by name.
    pub hosts: Vec<HostAnswer>,
    /// The hosts that did not answer, and why, by name.
    pub missing: Vec<(String, String)>,
}

/// Merges `answers` (see the module's documentation); `missing` names
/// the hosts asked that gave none.
pub fn merge(answers: Vec<HostAnswer>, mut missing: Vec<(String, String)>, top: usize, by: Rank) -> Merged {
    let mut by_key: HashMap<FlowKey, Talker> = HashMap::new();
    let mut m = Merged {
        talkers: Vec::new(),
        flows: 0,
        records: 0,
        packets: 0,
        bytes: 0,
        complete: true,
        truncated: false,
        hosts: Vec::new(),
        missing: Vec::new(),
    };
    for a in &answers {
        m.flows = m.flows.saturating_add(a.flows);
        m.records = m.records.saturating_add(a.records);
        m.packets = m.packets.saturating_add(a.packets);
        m.bytes = m.bytes.saturating_add(a.bytes);
        m.complete &= a.complete;
        m.truncated |= a.truncated;
        for t in &a.talkers {
            if let Some(s) = by_key.get_mut(&t.key) {
                s.packets = s.packets.saturating_add(t.packets);
                s.bytes = s.bytes.saturating_add(t.bytes);
                s.records = s.records.saturating_add(t.records);
                s.first_ns = s.first_ns.min(t.first_ns);
                s.last_ns = s.last_ns.max(t.last_ns);
            } else if by_key.len() < MAX_MERGED {
                by_key.insert(t.key, *t);
            } else {
                m.truncated = true;
            }
        }
    }
    let mut talkers: Vec<Talker> = by_key.into_values().collect();
    talkers.sort_unstable_by(|a, b| rank_key(b, by).cmp(&rank_key(a, by)).then(a.key.cmp(&b.key)));
    talkers.truncate(top.min(crate::MAX_TOP));
    m.talkers = talkers;
    m.hosts = answers;
    m.hosts.sort_by(|a, b| a.host.cmp(&b.host));
    missing.sort();
    m.missing = missing;
    m
}

impl Merged {
    /// The manager's API body: the host's `FlowsAnswer` fields (but
    /// `window`, which is per host) and which hosts answered, which did
    /// not, whether the ranking is exact (`ManagerFlowsAnswer` in
    /// docs/api/openapi.yaml).
    pub fn to_json(&self, q: &FlowQuery) -> Value {
        let totals = [self.flows, self.records, self.packets, self.bytes];
        let mut m = answer_head(q, &self.talkers, totals);
        m.insert("complete".into(), json!(self.complete && self.missing.is_empty()));
        m.insert("truncated".into(), json!(self.truncated));
        let hosts: Vec<Value> = self
            .hosts
            .iter()
            .map(|h| {
                json!({
                    "host": h.host,
                    "talkers": h.talkers.len(),
                    "flows": h.flows,
                    "records": h.records,
                    "packets": h.packets,
                    "bytes": h.bytes,
                    "complete": h.complete,
                    "truncated": h.truncated,
                })
            })
            .collect();
        m.insert("hosts".into(), hosts.into());
        let names: Vec<&str> = self.missing.iter().map(|(h, _)| h.as_str()).collect();
        m.insert("missing_hosts".into(), json!(names));
        let why: Vec<Value> = self
            .missing
            .iter()
            .map(|(h, why)| json!({"host": h, "reason": why}))
            .collect();
        m.insert("missing".into(), why.into());
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests;
