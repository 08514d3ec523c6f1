//! A host's recent flow records, kept in memory so that the control API
//! can answer "which flows were behind this firing?" (`GET /v1/flows`,
//! the console's top talkers) without a records store.
//!
//! # What is kept
//!
//! [`FlowWindow`] holds the flow records the host's meter emitted, in the
//! order they came (a record comes when its flow ends: idle or active
//! timeout, or the end of the run; `docs/records.md`), bounded twice:
//!
//! - by count: at most `max_records`; a record beyond it drops the oldest;
//! - by age, in packet time: a record whose last packet is more than
//!   `max_age_ns` older than the newest record's last packet is dropped
//!   once it is the oldest kept.
//!
//! Every record dropped is counted, and the latest last-packet time among
//! them is kept, so that an answer can say whether it is whole: a record
//! that overlapped the asked window may have been dropped exactly when a
//! dropped record ended at or after the window's start.
//!
//! # Which records an answer counts
//!
//! A query names a window `[from_ns, to_ns)` (a report's), a group (a
//! report's, in the event's granularity) and the event's filters. A
//! record counts when
//!
//! - its span overlaps the window: `first_ns < to_ns` and `last_ns >=
//!   from_ns` (a record is the closed span of its packets' times);
//! - its key is in the group (`clarion_event_capture::select::in_group`: each
//!   field of the group equal to the key's, addresses under the group's
//!   prefix) and passes one of the event's filters (`passes`).
//!
//! A record partly in the window counts **whole**: a flow record keeps
//! totals, not packet times, so its packets and bytes cannot be split at
//! the window's edges. The answer's totals can therefore exceed what the
//! event measured in the window. Records of the same key (one flow cut by
//! the active timeout) are summed into one talker, ranked by bytes or
//! packets (the other, then the key, breaks ties), the top N returned.
//!
//! # Cost
//!
//! A record is 88 bytes: 100,000 (the default) take 9 to 12 MB (the
//! deque's capacity is a power of two). Pushing is amortized O(1) (6 to
//! 50 ns a record, measured). A query walks every record kept: 0.6 ms at
//! 100,000 for one group's window (1,242 records counted), 45 to 52 ms
//! when all 100,000 count, each its own flow to sum and sort (release
//! build, one core of this 2-core machine, best of 20). Nothing is
//! indexed: queries are an operator's clicks, records come per flow, not
//! per packet.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use clarion_event_capture::select::{in_group, passes};
use clarion_lang::spec::{Filter, Granularity};
use clarion_records::FlowRecord;
use clarion_report::{rfc3339, GroupKey};
use clarion_wire::FlowKey;
use serde_json::{json, Value};

/// Records kept by default: 100,000 (about 10 MB).
pub const DEFAULT_RECORDS: usize = 100_000;
/// Packet time kept by default: 15 minutes.
pub const DEFAULT_AGE_NS: u64 = 15 * 60 * 1_000_000_000;
/// The most talkers an answer lists.
pub const MAX_TOP: usize = 1_000;

/// The window, shared by the loop that pushes records and the API that queries it.
pub type SharedWindow = Arc<Mutex<FlowWindow>>;

/// A bounded window of recent flow records (see the crate's documentation).
#[derive(Debug)]
pub struct FlowWindow {
    records: VecDeque<FlowRecord>,
    max_records: usize,
    max_age_ns: u64,
    /// Largest `last_ns` pushed so far: "now" in packet time.
    newest_ns: Option<u64>,
    dropped: u64,
    /// Largest `last_ns` of a dropped record.
    dropped_last_ns: Option<u64>,
}

/// What talkers are ranked by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rank {
    Bytes,
    Packets,
}

impl Rank {
    /// `bytes` or `packets`.
    pub fn parse(s: &str) -> Option<Rank> {
        match s {
            "bytes" => Some(Rank::Bytes),
            "packets" => Some(Rank::Packets),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Rank::Bytes => "bytes",
            Rank::Packets => "packets",
        }
    }
}

/// A query: the flows of one group of an event in one window.
#[derive(Clone, Debug)]
pub struct FlowQuery {
    /// The event's filters (a record passes one of them).
    pub filters: Vec<Filter>,
    pub group: GroupKey,
    pub from_ns: u64,
    pub to_ns: u64,
    /// How many talkers to list (at most [`MAX_TOP`]).
    pub top: usize,
    pub by: Rank,
}

/// One flow (a key) of an answer: its records in the window, summed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Talker {
    pub key: FlowKey,
    pub packets: u64,
    pub bytes: u64,
    /// How many records of the key counted.
    pub records: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}

/// How much the window holds, for an answer to say whether it is whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coverage {
    pub kept: usize,
    pub max_records: usize,
    pub max_age_ns: u64,
    pub dropped: u64,
    pub dropped_last_ns: Option<u64>,
    pub newest_ns: Option<u64>,
}

/// The answer to a [`FlowQuery`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The top talkers, ranked.
    pub talkers: Vec<Talker>,
    /// Over every record that counted, not only the top: distinct flows,
    /// records, packets, bytes.
    pub flows: u64,
    pub records: u64,
    pub packets: u64,
    pub bytes: u64,
    pub coverage: Coverage,
    /// No record that could have counted was dropped.
    pub complete: bool,
}

impl FlowWindow {
    /// A window of at most `max_records` records (at least 1) spanning at
    /// most `max_age_ns` of packet time.
    pub fn new(max_records: usize, max_age_ns: u64) -> FlowWindow {
        FlowWindow {
            records: VecDeque::new(),
            max_records: max_records.max(1),
            max_age_ns,
            newest_ns: None,
            dropped: 0,
            dropped_last_ns: None,
        }
    }

    pub fn shared(max_records: usize, max_age_ns: u64) -> SharedWindow {
        Arc::new(Mutex::new(FlowWindow::new(max_records, max_age_ns)))
    }

    /// Keeps `r`, dropping the oldest past either bound.
    pub fn push(&mut self, r: &FlowRecord) {
        let newest = self.newest_ns.map_or(r.last_ns, |n| n.max(r.last_ns));
        self.newest_ns = Some(newest);
        self.records.push_back(*r);
        while self.records.len() > self.max_records {
            self.drop_oldest();
        }
        let cutoff = newest.saturating_sub(self.max_age_ns);
        while self.records.front().is_some_and(|o| o.last_ns < cutoff) {
            self.drop_oldest();
        }
    }

    fn drop_oldest(&mut self) {
        if let Some(o) = self.records.pop_front() {
            self.dropped += 1;
            self.dropped_last_ns = Some(self.dropped_last_ns.map_or(o.last_ns, |d| d.max(o.last_ns)));
        }
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn coverage(&self) -> Coverage {
        Coverage {
            kept: self.records.len(),
            max_records: self.max_records,
            max_age_ns: self.max_age_ns,
            dropped: self.dropped,
            dropped_last_ns: self.dropped_last_ns,
            newest_ns: self.newest_ns,
        }
    }

    /// The top talkers of `q` (see the crate's documentation for which
    /// records count).
    pub fn query(&self, q: &FlowQuery) -> Answer {
        let mut by_key: HashMap<FlowKey, Talker> = HashMap::new();
        let (mut records, mut packets, mut bytes) = (0u64, 0u64, 0u64);
        for r in self.records.iter().filter(|r| {
            r.first_ns < q.to_ns
                && r.last_ns >= q.from_ns
                && in_group(&q.group, &r.key)
                && passes(&q.filters, &r.key)
        }) {
            records += 1;
            packets += r.packets;
            bytes += r.bytes;
            by_key
                .entry(r.key)
                .and_modify(|t| {
                    t.packets += r.packets;
                    t.bytes += r.bytes;
                    t.records += 1;
                    t.first_ns = t.first_ns.min(r.first_ns);
                    t.last_ns = t.last_ns.max(r.last_ns);
                })
                .or_insert(Talker {
                    key: r.key,
                    packets: r.packets,
                    bytes: r.bytes,
                    records: 1,
                    first_ns: r.first_ns,
                    last_ns: r.last_ns,
                });
        }
        let flows = by_key.len() as u64;
        let mut talkers: Vec<Talker> = by_key.into_values().collect();
        talkers.sort_unstable_by(|a, b| rank_key(b, q.by).cmp(&rank_key(a, q.by)).then(a.key.cmp(&b.key)));
        talkers.truncate(q.top.min(MAX_TOP));
        Answer {
            talkers,
            flows,
            records,
            packets,
            bytes,
            coverage: self.coverage(),
            complete: self.dropped_last_ns.is_none_or(|d| d < q.from_ns),
        }
    }
}

/// The values a talker is ranked by, the first decisive.
fn rank_key(t: &Talker, by: Rank) -> (u64, u64) {
    match by {
        Rank::Bytes => (t.bytes, t.packets),
        Rank::Packets => (t.packets, t.bytes),
    }
}

/// A key's fields as a flow record's JSON line names them (`docs/records.md`).
fn key_json(k: &FlowKey) -> Value {
    let port = |p: u16| if k.has_ports() { json!(p) } else { Value::Null };
    json!({
        "src_ip": k.src_addr().to_string(),
        "dst_ip": k.dst_addr().to_string(),
        "src_port": port(k.src_port),
        "dst_port": port(k.dst_port),
        "proto": k.proto,
        "vlan": if k.has_vlan() { json!(k.vlan) } else { Value::Null },
        "vni": k.tunnel_id(),
    })
}

/// A talker as the API lists it: its key's fields, its totals and times.
pub fn talker_json(t: &Talker) -> Value {
    let mut v = key_json(&t.key);
    if let Value::Object(m) = &mut v {
        m.insert("packets".into(), json!(t.packets));
        m.insert("bytes".into(), json!(t.bytes));
        m.insert("records".into(), json!(t.records));
        m.insert("first_ns".into(), json!(t.first_ns));
        m.insert("last_ns".into(), json!(t.last_ns));
        // Also as text: a JSON reader's double loses nanoseconds.
        m.insert("first".into(), json!(rfc3339(t.first_ns)));
        m.insert("last".into(), json!(rfc3339(t.last_ns)));
    }
    v
}

/// The fields every flows answer starts with, a host's and the manager's
/// merge alike: the query's window and ranking, the ranked talkers, and
/// the totals (`[flows, records, packets, bytes]`) over every record
/// counted.
fn answer_head(q: &FlowQuery, talkers: &[Talker], totals: [u64; 4]) -> serde_json::Map<String, Value> {
    let [flows, records, packets, bytes] = totals;
    let mut m = query_json(q);
    m.insert("talkers".into(), talkers.iter().map(talker_json).collect());
    m.insert(
        "total".into(),
        json!({ "flows": flows, "records": records, "packets": packets, "bytes": bytes }),
    );
    m
}

/// The query's window and ranking, as an answer repeats them.
fn query_json(q: &FlowQuery) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert("from_ns".into(), json!(q.from_ns));
    m.insert("to_ns".into(), json!(q.to_ns));
    m.insert("from".into(), json!(rfc3339(q.from_ns)));
    m.insert("to".into(), json!(rfc3339(q.to_ns)));
    m.insert("by".into(), json!(q.by.name()));
    m.insert("top".into(), json!(q.top.min(MAX_TOP)));
    m
}

impl Answer {
    /// The API's body (`FlowsAnswer` in docs/api/openapi.yaml), the
    /// query's window and ranking repeated.
    pub fn to_json(&self, q: &FlowQuery) -> Value {
        let c = &self.coverage;
        let totals = [self.flows, self.records, self.packets, self.bytes];
        let mut m = answer_head(q, &self.talkers, totals);
        m.insert("complete".into(), json!(self.complete));
        m.insert(
            "window".into(),
            json!({
                "records": c.kept,
                "max_records": c.max_records,
                "max_age_ns": c.max_age_ns,
                "dropped": c.dropped,
                "dropped_last_ns": c.dropped_last_ns,
                "newest_ns": c.newest_ns,
            }),
        );
        Value::Object(m)
    }
}

/// The group a query names (a report's `group` object), checked against
/// the event's granularity `g`: a field the event does not group by is
/// refused, named, as is a value that is not a report's.
pub fn group_of(event: &str, g: &Granularity, group: &Value) -> Result<GroupKey, String> {
    let grouped = [
        ("src_ip", g.src_ip.is_some()),
        ("dst_ip", g.dst_ip.is_some()),
        ("src_port", g.src_port),
        ("dst_port", g.dst_port),
        ("proto", g.proto),
        ("vlan", g.vlan),
        ("vni", g.vni),
    ];
    if let Some(f) = group
        .as_object()
        .into_iter()
        .flat_map(|m| m.keys())
        .find(|f| !grouped.iter().any(|(name, on)| *on && name == f))
    {
        return Err(format!(
            "`group` names {f}, which is not in {event}'s groups (its `per`)"
        ));
    }
    clarion_report::group_from_json(group).map_err(|e| format!("`group` is not a report's group: {e}"))
}

pub mod merge;

#[cfg(test)]
mod tests;
