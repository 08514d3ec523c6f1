//! The report: what a monitor says when an event fires for a group in a
//! window, and the versioned JSON schema it travels in.
//!
//! Every producer (the monitor, the reference evaluator, later the
//! network-wide manager) builds a [`Report`]; every sink renders one. The
//! schema is documented in `docs/reports.md`; bump [`SCHEMA`] on any change
//! that is not a pure addition.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{json, Map, Value};

mod read;
pub use read::{group_from_json, ReadError};

/// Schema identifier carried by every JSON report.
pub const SCHEMA: &str = "clarion.report/1";

/// A name reports share: an event's, an aggregate's, a host's. A monitor
/// makes tens of thousands of reports an epoch at a million flows; a
/// shared name is a reference count, not an allocation and a copy each.
pub type Name = Arc<str>;

/// A report's values, each with its name. One is kept in the report
/// itself, more on the heap: most events' predicates have one aggregate,
/// and a million-flow sweep makes tens of thousands of reports, each of
/// which allocated its one value (malloc and free ~3 % of a 1 M-flow run).
pub type Values = smallvec::SmallVec<[(Name, f64); 1]>;

/// One satisfied group in one window of one event.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Report {
    pub event: Name,
    pub window: Window,
    pub group: GroupKey,
    /// Each aggregate of the predicate, by its canonical text, in first-use order.
    #[cfg_attr(feature = "serde", serde(with = "crate::serde_values"))]
    pub values: Values,
    pub origin: Origin,
    pub completeness: Completeness,
    /// `then capture`: the file the group's packets around the window go
    /// to, or why there is none. Absent for events without it. Boxed: few
    /// reports have one, and every report is moved (a million-flow sweep
    /// makes tens of thousands).
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Option::is_none"))]
    pub capture: Option<Box<CaptureRef>>,
    /// A network-wide report decided without some placed hosts' answers
    /// (`completeness.complete` false): those hosts, by name, in inventory
    /// order. Empty otherwise (and for a host's own reports). A boxed
    /// slice, as the capture is boxed: reports are moved in bulk.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "<[_]>::is_empty"))]
    pub missing_hosts: Box<[Name]>,
}

/// Where a report's captured packets are (`then capture`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CaptureRef {
    /// The pcapng file, complete once packet time passes `to_ns`.
    pub file: Option<String>,
    /// The span of packet times captured, `[from_ns, to_ns)`. `from_ns`
    /// is later than asked when the host's packet buffer held no older packets.
    pub from_ns: u64,
    pub to_ns: u64,
    /// Why nothing is captured (no space left, too many captures at once).
    pub error: Option<String>,
}

/// A half-open time window `[start_ns, end_ns)`, nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Window {
    pub start_ns: u64,
    pub end_ns: u64,
}

/// The `worker` of a report made for a whole host (merged over its
/// workers) or for the network (a manager's): no one worker made it. It
/// is written `null` in JSON (`clarion_engine::MERGED_WORKER` and
/// `clarion_manager::NETWORK_WORKER` are this value).
pub const NO_WORKER: u32 = u32::MAX;

/// `worker` in JSON: the number, or `null` for [`NO_WORKER`].
fn worker_json(worker: u32) -> Value {
    if worker == NO_WORKER {
        Value::Null
    } else {
        json!(worker)
    }
}

/// Which monitor produced a report.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Origin {
    pub host: Name,
    pub worker: u32,
}

/// A group key: only the fields of the event's granularity are present.
///
/// For ports, VLAN and VNI, `Some(None)` means the field is part of the
/// key but the group's packets have none (ICMP, later fragments, untagged
/// frames, packets of no tunnel).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GroupKey {
    /// Address with its host bits cleared, and the prefix length kept.
    pub src_ip: Option<(IpAddr, u8)>,
    pub dst_ip: Option<(IpAddr, u8)>,
    #[cfg_attr(feature = "serde", serde(with = "crate::serde_present"))]
    pub src_port: Option<Option<u16>>,
    #[cfg_attr(feature = "serde", serde(with = "crate::serde_present"))]
    pub dst_port: Option<Option<u16>>,
    pub proto: Option<u8>,
    #[cfg_attr(feature = "serde", serde(with = "crate::serde_present"))]
    pub vlan: Option<Option<u16>>,
    /// The tunnel's VNI or GRE key (absent from the messages of hosts
    /// older than the field: not part of their keys).
    #[cfg_attr(feature = "serde", serde(default, with = "crate::serde_present"))]
    pub vni: Option<Option<u32>>,
}

/// How much of the window this monitor actually saw, so a consumer can tell
/// a quiet interval from a blind one. Counts cover all traffic the monitor
/// handled in the window, not only the event's.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Completeness {
    /// IP packets processed by the monitor.
    pub packets: u64,
    /// Frames that could not be parsed, or that the capture reader skipped
    /// (an interface of a link type Clarion cannot parse).
    pub malformed: u64,
    /// Frames that are not IP (ARP, LLDP, …): seen and deliberately ignored.
    pub not_ip: u64,
    /// Packets lost before reaching the monitor (kernel or ring drops; 0 for files).
    pub dropped: u64,
    /// Packets of flows that could not be tracked because the flow table was full.
    pub untracked: u64,
    /// Packets whose timestamp went backwards (attributed to the latest time seen).
    pub out_of_order: u64,
    /// False when the window was not observed in full (the input ended inside it).
    pub complete: bool,
    /// Made in degraded mode (`--adapt`): the monitor may have shed this
    /// event's measurement for some flows to keep up, and says how much in
    /// `flows_unmeasured` and `recall_estimate` (`docs/adapt.md`).
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "std::ops::Not::not"))]
    pub degraded: bool,
    /// Degraded mode: flows of the event (matching its filters) that had
    /// packets in the window but were not measured for it, counted once per
    /// epoch they were active in.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "is_zero"))]
    pub flows_unmeasured: u64,
    /// Degraded mode: the estimated fraction of the window's true reports
    /// of this event that were made (MONA's recall estimate, in `[0, 1]`).
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Option::is_none"))]
    pub recall_estimate: Option<f64>,
}

#[cfg(feature = "serde")]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Completeness {
    /// Adds another part's counts (another epoch, worker or host); `complete` is left as it is.
    pub fn add_counts(&mut self, c: &Completeness) {
        self.packets += c.packets;
        self.malformed += c.malformed;
        self.not_ip += c.not_ip;
        self.dropped += c.dropped;
        self.untracked += c.untracked;
        self.out_of_order += c.out_of_order;
        self.flows_unmeasured += c.flows_unmeasured;
        self.degraded |= c.degraded;
    }

    /// True when nothing was lost: every frame was parsed or knowingly ignored,
    /// every flow tracked, the whole window observed.
    pub fn is_lossless(&self) -> bool {
        self.malformed == 0 && self.dropped == 0 && self.untracked == 0 && self.complete
    }
}

/// Report values on the wire: JSON has no NaN or infinity, so an undefined
/// value (NaN, e.g. the average of no packets) travels as `null`.
#[cfg(feature = "serde")]
pub mod serde_values {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Name;

    pub fn serialize<S: Serializer>(v: &[(Name, f64)], s: S) -> Result<S::Ok, S::Error> {
        let v: Vec<(&str, Option<f64>)> = v
            .iter()
            .map(|(k, x)| (&**k, x.is_finite().then_some(*x)))
            .collect();
        v.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<super::Values, D::Error> {
        let v: Vec<(String, Option<f64>)> = Vec::deserialize(d)?;
        Ok(v.into_iter()
            .map(|(k, x)| (Name::from(k), x.unwrap_or(f64::NAN)))
            .collect())
    }
}

/// A key field that may be absent from the key (`None`), present without
/// a value (`Some(None)`: e.g. an ICMP packet's port) or present with one.
/// JSON's `null` cannot tell the first two apart, so the field travels as
/// a list: `[]`, `[null]` or `[value]`.
#[cfg(feature = "serde")]
pub mod serde_present {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer, T: Serialize + Copy>(
        v: &Option<Option<T>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let list: Vec<Option<T>> = v.iter().copied().collect();
        list.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de> + Copy>(
        d: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        let list: Vec<Option<T>> = Vec::deserialize(d)?;
        match list.as_slice() {
            [] => Ok(None),
            [v] => Ok(Some(*v)),
            _ => Err(serde::de::Error::invalid_length(
                list.len(),
                &"a list of at most one value",
            )),
        }
    }
}

/// Human name of an IP protocol number for reports and tables.
pub fn proto_name(p: u8) -> Option<&'static str> {
    Some(match p {
        1 => "icmp",
        6 => "tcp",
        17 => "udp",
        58 => "icmpv6",
        _ => return None,
    })
}

/// RFC 3339 text with nanoseconds, UTC.
pub fn rfc3339(ns: u64) -> String {
    humantime::format_rfc3339_nanos(UNIX_EPOCH + Duration::from_nanos(ns)).to_string()
}

fn addr_text((addr, len): (IpAddr, u8)) -> String {
    let full = if addr.is_ipv4() { 32 } else { 128 };
    if len >= full {
        addr.to_string()
    } else {
        format!("{addr}/{len}")
    }
}

fn num(v: f64) -> Value {
    // JSON has no NaN: an undefined value is null. Integral values print
    // without a fraction so that counters read naturally.
    if !v.is_finite() {
        Value::Null
    } else if v.fract() == 0.0 && v.abs() < 9.007_199_254_740_992e15 {
        json!(v as i64)
    } else {
        json!(v)
    }
}

/// Bytes of a group's order key ([`GroupKey::order_key`]).
const ORDER_BYTES: usize = 52;
/// The same as big-endian words.
const ORDER_WORDS: usize = ORDER_BYTES.div_ceil(8);

impl GroupKey {
    /// Words that compare as the keys do: the key's bytes, each field in
    /// declaration order, an option's absence before its presence, an
    /// IPv4 address before an IPv6 one, numbers big-endian, read as
    /// big-endian words. Sorting these compares integers where the derived
    /// order matches on options and addresses field by field, and without
    /// a call to memcmp (see `canonical_order`).
    fn order_key(&self) -> [u64; ORDER_WORDS] {
        let mut b = [0u8; ORDER_BYTES];
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            b[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        for ip in [self.src_ip, self.dst_ip] {
            let mut f = [0u8; 18];
            match ip {
                None => {}
                Some((IpAddr::V4(a), len)) => {
                    f[0] = 1;
                    f[1..5].copy_from_slice(&a.octets());
                    f[17] = len;
                }
                Some((IpAddr::V6(a), len)) => {
                    f[0] = 2;
                    f[1..17].copy_from_slice(&a.octets());
                    f[17] = len;
                }
            }
            put(&f);
        }
        let port = |p: Option<Option<u16>>| match p {
            None => [0, 0, 0],
            Some(None) => [1, 0, 0],
            Some(Some(x)) => {
                let [h, l] = x.to_be_bytes();
                [2, h, l]
            }
        };
        put(&port(self.src_port));
        put(&port(self.dst_port));
        put(&match self.proto {
            None => [0, 0],
            Some(x) => [1, x],
        });
        put(&port(self.vlan));
        put(&match self.vni {
            None => [0; 5],
            Some(None) => [1, 0, 0, 0, 0],
            Some(Some(x)) => {
                let [a, b, c, d] = x.to_be_bytes();
                [2, a, b, c, d]
            }
        });
        debug_assert_eq!(at, ORDER_BYTES);
        std::array::from_fn(|k| {
            let mut w = [0u8; 8];
            let chunk = &b[(8 * k).min(ORDER_BYTES)..(8 * k + 8).min(ORDER_BYTES)];
            w[..chunk.len()].copy_from_slice(chunk);
            u64::from_be_bytes(w)
        })
    }

    /// `(field name, value text)` pairs in schema order; `None` text is JSON null.
    pub fn fields(&self) -> Vec<(&'static str, Option<String>)> {
        let mut out = Vec::new();
        if let Some(a) = self.src_ip {
            out.push(("src_ip", Some(addr_text(a))));
        }
        if let Some(a) = self.dst_ip {
            out.push(("dst_ip", Some(addr_text(a))));
        }
        if let Some(p) = self.src_port {
            out.push(("src_port", p.map(|p| p.to_string())));
        }
        if let Some(p) = self.dst_port {
            out.push(("dst_port", p.map(|p| p.to_string())));
        }
        if let Some(p) = self.proto {
            out.push((
                "proto",
                Some(proto_name(p).map(str::to_string).unwrap_or_else(|| p.to_string())),
            ));
        }
        if let Some(v) = self.vlan {
            out.push(("vlan", v.map(|v| v.to_string())));
        }
        if let Some(v) = self.vni {
            out.push(("vni", v.map(|v| v.to_string())));
        }
        out
    }

    /// The group as one label value (Prometheus, Alertmanager): its fields
    /// as `name=value`, space-separated (`dst_ip=10.0.0.0/24 dst_port=80`),
    /// `none` for a port or VLAN the packets lack, `all` for an event
    /// without `per`.
    pub fn label(&self) -> String {
        let fields = self.fields();
        if fields.is_empty() {
            return "all".into();
        }
        fields
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_deref().unwrap_or("none")))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn to_json(self) -> Value {
        let mut m = Map::new();
        if let Some(a) = self.src_ip {
            m.insert("src_ip".into(), json!(addr_text(a)));
        }
        if let Some(a) = self.dst_ip {
            m.insert("dst_ip".into(), json!(addr_text(a)));
        }
        if let Some(p) = self.src_port {
            m.insert("src_port".into(), json!(p));
        }
        if let Some(p) = self.dst_port {
            m.insert("dst_port".into(), json!(p));
        }
        if let Some(p) = self.proto {
            let v = proto_name(p).map(|n| json!(n)).unwrap_or_else(|| json!(p));
            m.insert("proto".into(), v);
        }
        if let Some(v) = self.vlan {
            m.insert("vlan".into(), json!(v));
        }
        if let Some(v) = self.vni {
            m.insert("vni".into(), json!(v));
        }
        Value::Object(m)
    }
}

impl Report {
    /// The report as a JSON object of schema [`SCHEMA`].
    pub fn to_json(&self) -> Value {
        let mut values = Map::new();
        for (k, v) in &self.values {
            values.insert(k.to_string(), num(*v));
        }
        let mut v = json!({
            "schema": SCHEMA,
            "event": &*self.event,
            "window": window_json(&self.window),
            "group": self.group.to_json(),
            "values": Value::Object(values),
            "host": &*self.origin.host,
            "worker": worker_json(self.origin.worker),
            "completeness": completeness_json(&self.completeness),
        });
        if let (Some(c), Value::Object(o)) = (&self.capture, &mut v) {
            let mut m = Map::new();
            if let Some(f) = &c.file {
                m.insert("file".into(), json!(f));
            }
            m.insert("from_ns".into(), json!(c.from_ns));
            m.insert("to_ns".into(), json!(c.to_ns));
            if let Some(e) = &c.error {
                m.insert("error".into(), json!(e));
            }
            o.insert("capture".into(), Value::Object(m));
        }
        // Beside the completeness it qualifies; absent when every host answered.
        if let (false, Some(Value::Object(c))) = (self.missing_hosts.is_empty(), v.get_mut("completeness")) {
            c.insert("missing_hosts".into(), json!(self.missing_host_names()));
        }
        v
    }

    /// The hosts a network-wide report was decided without, by name.
    pub fn missing_host_names(&self) -> Vec<&str> {
        self.missing_hosts.iter().map(|h| &**h).collect()
    }

    /// The canonical order of reports: by window end, event name, then group.
    pub fn sort_key(&self) -> (u64, u64, &str, GroupKey) {
        (self.window.end_ns, self.window.start_ns, &*self.event, self.group)
    }
}

fn window_json(w: &Window) -> Value {
    json!({
        "start_ns": w.start_ns,
        "end_ns": w.end_ns,
        "start": rfc3339(w.start_ns),
        "end": rfc3339(w.end_ns),
    })
}

fn completeness_json(c: &Completeness) -> Value {
    let mut v = json!({
        "packets": c.packets,
        "malformed": c.malformed,
        "not_ip": c.not_ip,
        "dropped": c.dropped,
        "untracked": c.untracked,
        "out_of_order": c.out_of_order,
        "complete": c.complete,
    });
    // Degraded mode only: in normal mode the object is as it always was.
    if c.degraded {
        if let Value::Object(m) = &mut v {
            m.insert("degraded".into(), json!(true));
            m.insert("flows_unmeasured".into(), json!(c.flows_unmeasured));
            if let Some(r) = c.recall_estimate.filter(|r| r.is_finite()) {
                m.insert("recall_estimate".into(), json!(round_recall(r)));
            }
        }
    }
    v
}

/// A recall to four decimals: finer digits are float noise, not information.
fn round_recall(r: f64) -> f64 {
    (r.clamp(0.0, 1.0) * 10_000.0).round() / 10_000.0
}

/// The schema name every health record carries.
pub const HEALTH_SCHEMA: &str = "clarion.health/1";

/// A monitor epoch that was not seen in full, whether or not any event
/// fired in it: frames malformed or skipped, packets dropped or untracked,
/// the input starting or ending inside it, or the driver blind during it
/// (`completeness.is_lossless()` is false). The health stream
/// (`--health FILE`) is made of these.
#[derive(Clone, Debug, PartialEq)]
pub struct Health {
    pub window: Window,
    pub origin: Origin,
    pub completeness: Completeness,
    /// Degraded mode (`--adapt`): the accuracy of each event whose window
    /// closed with this epoch, whether or not it fired (a report carries
    /// the same figures only when the event fires). Empty otherwise.
    pub accuracy: Vec<EventAccuracy>,
}

/// One event's accuracy in one window, in degraded mode (`docs/adapt.md`).
#[derive(Clone, Debug, PartialEq)]
pub struct EventAccuracy {
    pub event: String,
    pub window: Window,
    /// Reports made for the window.
    pub reports: u64,
    /// Flow-epochs of the event measured and not measured in the window.
    pub flows_measured: u64,
    pub flows_unmeasured: u64,
    /// The estimated recall (see [`Completeness::recall_estimate`]).
    pub recall_estimate: f64,
}

impl Health {
    /// The record as a JSON object of schema [`HEALTH_SCHEMA`]: a report's
    /// window, host, worker and completeness.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "schema": HEALTH_SCHEMA,
            "window": window_json(&self.window),
            "host": &*self.origin.host,
            "worker": worker_json(self.origin.worker),
            "completeness": completeness_json(&self.completeness),
        });
        if !self.accuracy.is_empty() {
            let events: Vec<Value> = self.accuracy.iter().map(EventAccuracy::to_json).collect();
            if let Value::Object(m) = &mut v {
                m.insert("accuracy".into(), Value::Array(events));
            }
        }
        v
    }
}

impl EventAccuracy {
    /// The JSON object health records and live epoch statistics carry.
    pub fn to_json(&self) -> Value {
        json!({
            "event": &*self.event,
            "window": window_json(&self.window),
            "reports": self.reports,
            "flows_measured": self.flows_measured,
            "flows_unmeasured": self.flows_unmeasured,
            "recall_estimate": self.recall_estimate.is_finite().then(|| round_recall(self.recall_estimate)),
        })
    }
}

/// Sorts reports into the canonical order ([`Report::sort_key`]), as a
/// stable sort by that key would.
///
/// A sweep in which many events fire sorts hundreds of reports: sorting
/// the reports themselves moved ~300-byte values and rebuilt both keys
/// at every comparison, ~2,400 instructions a report (as much as making
/// it). This sorts the keys once built, then moves the reports. The
/// event name enters the key as its rank among the distinct names: at
/// 60 k reports a sweep (a million flows), comparing the names themselves
/// was a fifth of the sweep.
pub fn sort_reports(reports: &mut [Report]) {
    let order = canonical_order(reports);
    permute(reports, &order);
}

/// Moves `reports`, in the canonical order of [`sort_reports`], to the
/// end of `out`, leaving `reports` empty with its capacity. Where the
/// in-place permutation swapped each report into place (three copies, at
/// random places: ~10 % of a million-flow run with 60 k reports a sweep),
/// this reads each at its place once and writes them in sequence.
pub fn sort_reports_into(reports: &mut Vec<Report>, out: &mut Vec<Report>) {
    let order = canonical_order(reports);
    move_in_order(reports, &order, out);
}

/// What the canonical order compares of a report ([`Report::sort_key`]),
/// borrowed: a report's parts, or those of one not built yet. The monitor
/// orders a sweep's firings by these and builds each report once, in its
/// place, instead of building, then moving, ~300-byte reports.
#[derive(Clone, Copy, Debug)]
pub struct SortParts<'a> {
    pub window: Window,
    /// The event's name. Names at one address are taken to be equal
    /// without comparing their text (reports share their event's name).
    pub event: &'a str,
    pub group: &'a GroupKey,
}

impl Report {
    /// What [`sort_reports`] compares of this report.
    pub fn sort_parts(&self) -> SortParts<'_> {
        SortParts {
            window: self.window,
            event: &self.event,
            group: &self.group,
        }
    }
}

/// The canonical order of `reports`: `order[i]` is the index of the
/// report that goes to place `i`. A permutation of `0..reports.len()`.
fn canonical_order(reports: &[Report]) -> Vec<u32> {
    canonical_order_by(reports.len(), |i| reports[i].sort_parts())
}

/// The canonical order of `n` reports, the `i`-th's parts given by
/// `parts(i)`: `order[k]` is the index of the report that goes to place
/// `k`, as a stable sort by [`Report::sort_key`] would place them. A
/// permutation of `0..n`.
pub fn canonical_order_by<'a>(n: usize, parts: impl Fn(usize) -> SortParts<'a>) -> Vec<u32> {
    if n < 2 {
        return (0..n as u32).collect();
    }
    // Each distinct name once, then ranked by sorting those. Reports of
    // one trigger share their name's allocation, so a name is looked up
    // by its address first (a word hashed and compared), and by its text
    // only at an address not met before (a trigger's first report): a
    // million-flow sweep's reports alternate between a flow's triggers,
    // and hashing and comparing their names' text was ~150 instructions
    // a report.
    let mut ids: rustc_hash::FxHashMap<&str, u32> = rustc_hash::FxHashMap::default();
    let mut at: rustc_hash::FxHashMap<usize, u32> = rustc_hash::FxHashMap::default();
    let mut distinct: Vec<&str> = Vec::new();
    let mut last: Option<(usize, u32)> = None;
    let name_ids: Vec<u32> = (0..n)
        .map(|i| {
            let name = parts(i).event;
            let addr = name.as_ptr() as usize;
            let id = match last {
                Some((a, id)) if a == addr => id,
                _ => *at.entry(addr).or_insert_with(|| {
                    *ids.entry(name).or_insert_with(|| {
                        distinct.push(name);
                        (distinct.len() - 1) as u32
                    })
                }),
            };
            last = Some((addr, id));
            id
        })
        .collect();
    let mut by_name: Vec<u32> = (0..distinct.len() as u32).collect();
    by_name.sort_unstable_by_key(|&id| distinct[id as usize]);
    let mut rank = vec![0u32; distinct.len()];
    for (r, &id) in by_name.iter().enumerate() {
        rank[id as usize] = r as u32;
    }
    // First by window and name: a counting sort on (window's rank, name's
    // rank), stable, so positions ascend within each run (a sweep's
    // reports have one to a few windows and at most a few thousand names;
    // comparison sorts of whole keys, then of integer tuples, were a fifth
    // of a million-flow sweep with 60 k reports). Then each run of one
    // window and name by group.
    // Each run of one window once (reports come in such runs).
    let mut windows: Vec<(u64, u64)> = Vec::new();
    for i in 0..n {
        let w = parts(i).window;
        let w = (w.end_ns, w.start_ns);
        if windows.last() != Some(&w) {
            windows.push(w);
        }
    }
    windows.sort_unstable();
    windows.dedup();
    let names = distinct.len();
    let bucket_of = |w: Window, id: u32| -> usize {
        // Present: `windows` holds every report's window.
        let w = windows.binary_search(&(w.end_ns, w.start_ns)).unwrap_or_default();
        w * names + rank[id as usize] as usize
    };
    let buckets: Vec<usize> = name_ids
        .iter()
        .enumerate()
        .map(|(i, &id)| bucket_of(parts(i).window, id))
        .collect();
    let n_buckets = windows.len().saturating_mul(names);
    let mut order: Vec<u32>;
    if n_buckets <= 4 * n + 1024 {
        let mut next = vec![0u32; n_buckets + 1];
        for &b in &buckets {
            next[b + 1] += 1;
        }
        for b in 1..next.len() {
            next[b] += next[b - 1];
        }
        order = vec![0u32; n];
        for (i, &b) in buckets.iter().enumerate() {
            order[next[b] as usize] = i as u32;
            next[b] += 1;
        }
    } else {
        // Many windows and names (a long run's reports sorted at once):
        // a stable comparison sort, no table of every pair.
        order = (0..n as u32).collect();
        order.sort_by_key(|&i| buckets[i as usize]);
    }
    let mut run: Vec<([u64; ORDER_WORDS], u32)> = Vec::new();
    let mut from = 0;
    while from < order.len() {
        let b = buckets[order[from] as usize];
        let to = from
            + order[from..]
                .iter()
                .take_while(|&&i| buckets[i as usize] == b)
                .count();
        if to - from > 1 {
            // By group, then position (unique): the stable sort's order.
            run.clear();
            run.extend(
                order[from..to]
                    .iter()
                    .map(|&i| (parts(i as usize).group.order_key(), i)),
            );
            run.sort_unstable();
            for (o, (_, i)) in order[from..to].iter_mut().zip(&run) {
                *o = *i;
            }
        }
        from = to;
    }
    order
}

/// Rearranges `v` so that `v[i]` becomes the old `v[order[i]]`
/// (`order` a permutation of `0..v.len()`), one cycle at a time.
fn permute<T>(v: &mut [T], order: &[u32]) {
    let mut placed = vec![false; v.len()];
    for start in 0..v.len() {
        let mut i = start;
        // The old `v[start]` travels along the cycle to its place.
        while !placed[i] {
            placed[i] = true;
            let j = order[i] as usize;
            if j == start {
                break;
            }
            v.swap(i, j);
            i = j;
        }
    }
}

/// How many places ahead [`move_in_order`] starts loading the report it
/// will read: the reads are at random places, the writes in sequence.
const MOVE_AHEAD: usize = 8;

/// Moves every element of `src` to the end of `dst`, in the order
/// `order` (the old `src[order[k]]` becomes the `k`-th appended); `src` is
/// left empty (its capacity kept).
///
/// # Panics
/// If `order` is not a permutation of `0..src.len()` (checked before
/// anything moves).
fn move_in_order<T>(src: &mut Vec<T>, order: &[u32], dst: &mut Vec<T>) {
    let n = src.len();
    assert_eq!(order.len(), n, "move_in_order: the order is not a permutation");
    let mut seen = vec![false; n];
    for &i in order {
        let slot = seen.get_mut(i as usize).filter(|s| !**s);
        let Some(slot) = slot else {
            panic!("move_in_order: the order is not a permutation");
        };
        *slot = true;
    }
    dst.reserve(n);
    let len = dst.len();
    let from = src.as_ptr();
    let to = dst.as_mut_ptr().wrapping_add(len);
    // SAFETY: `order` is a permutation of `0..n` (checked above), so every
    // element of `src` is read exactly once, and written to a distinct
    // place `len + k` (`k < n`) of `dst`, past its elements and within its
    // capacity (at least `len + n`, reserved above). `src`'s length is set to 0 before
    // any element is read, so those elements, now owned by `dst`, are
    // never dropped from `src`; nothing between the two `set_len` calls
    // can panic (raw pointer reads and writes only), so no element is
    // dropped twice or lost to a half-done move.
    unsafe {
        src.set_len(0);
        for (k, &i) in order.iter().enumerate() {
            if let Some(&ahead) = order.get(k + MOVE_AHEAD) {
                prefetch_read(from.add(ahead as usize));
            }
            std::ptr::copy_nonoverlapping(from.add(i as usize), to.add(k), 1);
        }
        dst.set_len(len + n);
    }
}

/// Starts loading the lines of `*p` (a hint: never faults, never reads).
#[inline(always)]
fn prefetch_read<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        let start: *const i8 = p.cast();
        let mut off = 0;
        while off < std::mem::size_of::<T>() {
            // SAFETY: a prefetch is a hint that never faults, whatever the
            // address (`_mm_prefetch` is safe on x86_64 with SSE).
            unsafe {
                std::arch::x86_64::_mm_prefetch(start.wrapping_add(off), std::arch::x86_64::_MM_HINT_T0);
            }
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn sample() -> Report {
        Report {
            capture: None,
            missing_hosts: Box::default(),
            event: "heavy".into(),
            window: Window {
                start_ns: 1_000_000_000,
                end_ns: 1_010_000_000,
            },
            group: GroupKey {
                src_ip: Some((IpAddr::V4(Ipv4Addr::new(10, 0, 128, 0)), 24)),
                dst_port: Some(None),
                proto: Some(6),
                ..GroupKey::default()
            },
            values: vec![
                ("sum(volume)".into(), 1500.0),
                ("avg(size)".into(), 12.5),
                ("min(ttl)".into(), f64::NAN),
            ]
            .into(),
            origin: Origin {
                host: "h1".into(),
                worker: 0,
            },
            completeness: Completeness {
                packets: 3,
                complete: true,
                ..Completeness::default()
            },
        }
    }

    #[test]
    fn json_has_schema_names_and_nulls() {
        let v = sample().to_json();
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(v["window"]["start"], "1970-01-01T00:00:01.000000000Z");
        assert_eq!(v["group"]["src_ip"], "10.0.128.0/24");
        assert_eq!(v["group"]["dst_port"], Value::Null);
        assert_eq!(v["group"]["proto"], "tcp");
        assert_eq!(v["values"]["sum(volume)"], 1500);
        assert_eq!(v["values"]["avg(size)"], 12.5);
        assert_eq!(v["values"]["min(ttl)"], Value::Null);
        assert!(v["group"].get("vlan").is_none());
        assert!(v["group"].get("vni").is_none());
    }

    /// `vni` in the group: the VNI, or null for packets of no tunnel; and
    /// the messages of hosts that had no `vni` field still read.
    #[cfg(feature = "serde")]
    #[test]
    fn vni_prints_and_reads_back() {
        for (vni, text) in [(Some(5001), json!(5001)), (None, Value::Null)] {
            let mut r = sample();
            r.group.vni = Some(vni);
            assert_eq!(r.to_json()["group"]["vni"], text);
            let wire = serde_json::to_string(&r.group).unwrap();
            assert_eq!(serde_json::from_str::<GroupKey>(&wire).unwrap(), r.group);
        }
        let old = r#"{"src_ip":null,"dst_ip":null,"src_port":[],"dst_port":[8080],"proto":6,"vlan":[]}"#;
        let g: GroupKey = serde_json::from_str(old).unwrap();
        assert_eq!((g.dst_port, g.vni), (Some(Some(8080)), None));
    }

    /// A host's merged report and a manager's carry `"worker": null`, not
    /// the sentinel; a worker's number is kept, 0 and the largest real one too.
    #[test]
    fn merged_reports_have_a_null_worker() {
        for (worker, want) in [
            (NO_WORKER, Value::Null),
            (0, json!(0)),
            (7, json!(7)),
            (NO_WORKER - 1, json!(4294967294u64)),
        ] {
            let mut r = sample();
            r.origin.worker = worker;
            let v = r.to_json();
            assert_eq!(v.get("worker"), Some(&want), "{v}");
            let h = Health {
                window: r.window,
                origin: r.origin.clone(),
                completeness: r.completeness,
                accuracy: Vec::new(),
            };
            assert_eq!(h.to_json().get("worker"), Some(&want));
        }
        assert!(!sample_with_worker(NO_WORKER).contains("4294967295"));
    }

    fn sample_with_worker(worker: u32) -> String {
        let mut r = sample();
        r.origin.worker = worker;
        r.to_json().to_string()
    }

    #[test]
    fn full_length_address_prints_without_prefix() {
        let g = GroupKey {
            dst_ip: Some(("2001:db8::1".parse().unwrap(), 128)),
            ..GroupKey::default()
        };
        assert_eq!(g.fields(), vec![("dst_ip", Some("2001:db8::1".to_string()))]);
    }

    /// Reports are moved in bulk (tens of thousands a million-flow
    /// sweep): what is rare stays out of line.
    #[test]
    fn a_report_stays_small() {
        let size = std::mem::size_of::<Report>();
        assert!(size <= 256, "{size} bytes");
    }

    #[test]
    fn order_keys_compare_as_the_keys() {
        let mut next = draws(11);
        let mut keys = Vec::new();
        for _ in 0..400 {
            let mut ip = || match next(3) {
                0 => None,
                1 => Some((
                    IpAddr::from([10, 0, next(3) as u8, next(256) as u8]),
                    next(33) as u8,
                )),
                _ => Some((
                    IpAddr::from([0xfd00, 0, 0, 0, 0, 0, next(3) as u16, next(65536) as u16]),
                    next(129) as u8,
                )),
            };
            let (src_ip, dst_ip) = (ip(), ip());
            let mut opt16 = || match next(3) {
                0 => None,
                1 => Some(None),
                _ => Some(Some([0, 1, 255, 256, 65535][next(5) as usize])),
            };
            let (src_port, dst_port, vlan) = (opt16(), opt16(), opt16());
            keys.push(GroupKey {
                src_ip,
                dst_ip,
                src_port,
                dst_port,
                proto: [None, Some(6), Some(17), Some(255)][next(4) as usize],
                vlan,
                vni: [
                    None,
                    Some(None),
                    Some(Some(1)),
                    Some(Some(1 << 24)),
                    Some(Some(u32::MAX)),
                ][next(5) as usize],
            });
        }
        for a in &keys {
            for b in &keys {
                assert_eq!(a.order_key().cmp(&b.order_key()), a.cmp(b), "{a:?} {b:?}");
            }
        }
    }

    /// Pseudo-random draws below `m` (a fixed LCG from `seed`: the tests
    /// are the same every run).
    fn draws(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut x = seed;
        move |m| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        }
    }

    #[test]
    fn sort_reports_is_the_stable_sort_by_key() {
        // Small ranges, so that keys tie often; the values tell reports apart.
        let mut next = draws(7);
        // What `sort_reports_into` appends to stays first. Without the
        // sample's NaN, which equals nothing.
        let mut head = sample();
        head.event = "already there".into();
        head.values.clear();
        let mut out = vec![head.clone()];
        // Names shared (a trigger's reports) and not (equal text elsewhere).
        let pool: Vec<Name> = (0..12).map(|k| format!("e{k}").into()).collect();
        for n in [0, 1, 2, 3, 17, 200, 2000] {
            let reports: Vec<Report> = (0..n)
                .map(|i| {
                    let mut r = sample();
                    let k = next(12);
                    r.event = if i % 3 == 0 {
                        format!("e{k}").into()
                    } else {
                        Name::clone(&pool[k as usize])
                    };
                    r.window.start_ns = next(3) * 10;
                    r.window.end_ns = r.window.start_ns + 10 * (1 + next(2));
                    r.group.src_port = Some(Some(next(3) as u16));
                    r.values = vec![("i".into(), f64::from(i))].into();
                    r
                })
                .collect();
            let mut expected = reports.clone();
            expected.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
            let mut moved = reports.clone();
            let mut got = reports;
            sort_reports(&mut got);
            assert_eq!(got, expected, "{n} reports");
            out.truncate(1);
            sort_reports_into(&mut moved, &mut out);
            assert_eq!(out[1..], expected, "{n} reports, sort_reports_into");
            assert_eq!(out[0], head, "what was in out stays first");
            assert!(moved.is_empty());
        }
        // Many windows and names for few reports: the comparison sort
        // rather than a table of every (window, name).
        let reports: Vec<Report> = (0..300)
            .map(|i| {
                let mut r = sample();
                r.event = format!("e{}", next(250)).into();
                r.window.start_ns = next(200) * 10;
                r.window.end_ns = r.window.start_ns + 10;
                r.group.src_port = Some(Some(next(2) as u16));
                r.values = vec![("i".into(), f64::from(i))].into();
                r
            })
            .collect();
        let mut expected = reports.clone();
        expected.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
        let mut got = reports;
        sort_reports(&mut got);
        assert_eq!(got, expected, "300 reports of many windows and names");
    }

    #[test]
    fn permute_places_each_element() {
        let mut v = vec!['a', 'b', 'c', 'd', 'e'];
        permute(&mut v, &[3, 0, 4, 1, 2]);
        assert_eq!(v, vec!['d', 'a', 'e', 'b', 'c']);
    }

    #[test]
    fn move_in_order_moves_each_element_once() {
        // Owned values (drops counted by the strings' heap): each moved once,
        // the source left empty with its capacity.
        let mut src: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).into();
        let cap = src.capacity();
        let mut dst = vec![String::from("z")];
        move_in_order(&mut src, &[3, 0, 4, 1, 2], &mut dst);
        assert_eq!(dst, ["z", "d", "a", "e", "b", "c"]);
        assert!(src.is_empty() && src.capacity() == cap);
    }

    #[test]
    fn move_in_order_refuses_what_is_not_a_permutation() {
        for order in [&[0, 0, 1][..], &[0, 1], &[0, 1, 3]] {
            let mut src: Vec<String> = ["a", "b", "c"].map(String::from).into();
            let mut dst = Vec::new();
            let moved = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                move_in_order(&mut src, order, &mut dst)
            }));
            assert!(moved.is_err(), "{order:?}");
            // Nothing moved: the source is whole.
            assert_eq!(src, ["a", "b", "c"]);
            assert!(dst.is_empty());
        }
    }
}
