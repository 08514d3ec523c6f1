//! The flows behind a network-wide event: the manager asks each host that
//! carries it for its top talkers of a group and window, from the flow
//! records the host keeps in memory (`clarion-flow-window`), and merges
//! the answers (`clarion_flow_window::merge`) for its API's `/v1/flows`.
//!
//! # Exchange
//!
//! A request-reply on `clarion.host.<host>.flows` ([`subject`]): a
//! [`FlowsAsk`] (the event's local filters, the group, the window, how
//! many talkers ranked by what) answered by a [`FlowsReply`]. Per-host
//! credentials already cover it: a host subscribes only to
//! `clarion.host.<itself>.>` and answers only the requests it received
//! (`allow_responses`), so no host answers for another. Both are
//! MessagePack behind the protocol's version header ([`protocol::encode`]).
//!
//! # Bounds
//!
//! - The manager asks each host for ten times the talkers wanted (at
//!   least 100, at most [`clarion_flow_window::MAX_TOP`]): the merged
//!   top is then rarely `truncated`.
//! - An agent refuses a request over [`ASK_BYTES`], and answers with at
//!   most the talkers asked for (at most [`clarion_flow_window::MAX_TOP`]),
//!   fewer if the answer would pass [`ANSWER_BYTES`] (then `truncated`).
//!   Its query runs off the connection's runtime (a blocking task), one
//!   request at a time: a burst of requests queues, never delays the
//!   host's satisfaction reports or poll answers.
//! - The manager asks every host at once, but at most [`ASKED_AT_ONCE`]
//!   requests in flight, each given up after the timeout (its poll
//!   timeout); a host that timed out, had no subscriber (gone), refused or
//!   sent more than [`ANSWER_BYTES`] or an unreadable answer is named
//!   missing, with why. The whole query runs on a task of its own: the
//!   manager's loop only starts it. At most [`QUERIES_AT_ONCE`] queries
//!   run at once; more are refused, saying so.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use clarion_flow_window::merge::{merge, HostAnswer, Merged};
use clarion_flow_window::{FlowQuery, Rank, SharedWindow, Talker, MAX_TOP};
use clarion_lang::spec::Filter;
use clarion_report::GroupKey;
use clarion_wire::FlowKey;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use clarion_control::{ControlError, FlowsRequest};

use crate::book::EventBook;
use crate::protocol;

/// The subject a host answers flows requests on.
pub fn subject(host: &str) -> String {
    format!("clarion.host.{host}.flows")
}

/// The most bytes of a request an agent reads.
pub const ASK_BYTES: usize = 64 * 1024;
/// The most bytes of an answer: an agent lists fewer talkers to fit, a
/// manager refuses a larger one. A talker takes about 90 bytes: 1,000 fit.
pub const ANSWER_BYTES: usize = 256 * 1024;
/// The most requests of one query in flight at once.
pub const ASKED_AT_ONCE: usize = 64;
/// The most queries the manager runs at once.
pub const QUERIES_AT_ONCE: usize = 4;

/// The manager asks a host for the top talkers of a group and window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlowsAsk {
    /// The network-wide event's name (for messages only).
    pub event: String,
    /// The event's local trigger's filters (a record passes one of them).
    pub filters: Vec<Filter>,
    pub group: GroupKey,
    pub from_ns: u64,
    pub to_ns: u64,
    pub top: u32,
    /// Ranked by packets (otherwise bytes).
    pub by_packets: bool,
}

/// A host's answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FlowsReply {
    Answer(HostFlows),
    /// The host cannot answer (it keeps no flow records in memory; the
    /// request was unreadable or too large): why.
    Refused {
        reason: String,
    },
}

/// A host's top talkers and totals (`clarion_flow_window::Answer`, as sent).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostFlows {
    pub talkers: Vec<WireTalker>,
    pub flows: u64,
    pub records: u64,
    pub packets: u64,
    pub bytes: u64,
    pub complete: bool,
    /// Fewer talkers listed than flows counted.
    pub truncated: bool,
}

/// A talker: its key's fields as `clarion_wire::FlowKey` holds them, its totals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireTalker {
    pub src_ip: [u8; 16],
    pub dst_ip: [u8; 16],
    pub src_port: u16,
    pub dst_port: u16,
    pub vlan: u16,
    pub proto: u8,
    pub flags: u8,
    pub vni: u32,
    pub packets: u64,
    pub bytes: u64,
    pub records: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}

impl From<&Talker> for WireTalker {
    fn from(t: &Talker) -> WireTalker {
        let k = &t.key;
        WireTalker {
            src_ip: k.src_ip,
            dst_ip: k.dst_ip,
            src_port: k.src_port,
            dst_port: k.dst_port,
            vlan: k.vlan,
            proto: k.proto,
            flags: k.flags,
            vni: k.vni,
            packets: t.packets,
            bytes: t.bytes,
            records: t.records,
            first_ns: t.first_ns,
            last_ns: t.last_ns,
        }
    }
}

impl From<&WireTalker> for Talker {
    fn from(w: &WireTalker) -> Talker {
        // Any bytes make a key (flags a peer set wrong only change how
        // the key prints), and a span given backwards is put right.
        let key = FlowKey {
            src_ip: w.src_ip,
            dst_ip: w.dst_ip,
            src_port: w.src_port,
            dst_port: w.dst_port,
            vlan: w.vlan,
            proto: w.proto,
            flags: w.flags,
            vni: w.vni,
        };
        Talker {
            key,
            packets: w.packets,
            bytes: w.bytes,
            records: w.records,
            first_ns: w.first_ns.min(w.last_ns),
            last_ns: w.first_ns.max(w.last_ns),
        }
    }
}

// ---- the agent's side

/// Answers the flows requests of `sub` from `window` (none: each is
/// refused, saying why), one at a time, until the subscription ends.
pub(crate) async fn serve(
    client: async_nats::Client,
    mut sub: async_nats::Subscriber,
    window: Option<SharedWindow>,
) {
    while let Some(m) = sub.next().await {
        let Some(reply) = m.reply else { continue };
        let window = window.clone();
        let subject = m.subject.to_string();
        let answered =
            tokio::task::spawn_blocking(move || answer(&subject, &m.payload, window.as_ref())).await;
        let body = answered
            .unwrap_or_else(|_| refused("the host's flow window is unusable (a query panicked)".into()));
        // A reply the server cannot take is the manager's loss: it names
        // this host missing once its request times out.
        let _ = client.publish(reply, body).await;
    }
}

fn refused(reason: String) -> Bytes {
    protocol::encode(&FlowsReply::Refused { reason })
}

/// A request's encoded reply (see the module's documentation for the bounds).
pub(crate) fn answer(subject: &str, payload: &[u8], window: Option<&SharedWindow>) -> Bytes {
    if payload.len() > ASK_BYTES {
        return refused(format!(
            "a flows request of {} bytes, over the {ASK_BYTES} an agent reads",
            payload.len()
        ));
    }
    let ask = match protocol::decode::<FlowsAsk>(subject, payload) {
        Ok(a) => a,
        Err(e) => return refused(e.to_string()),
    };
    let Some(window) = window else {
        return refused(
            "this host keeps no flow records in memory: a live agent (-i) with --records DEST does (not a replay, nor --flow-window 0)"
                .into(),
        );
    };
    let q = FlowQuery {
        filters: ask.filters,
        group: ask.group,
        from_ns: ask.from_ns,
        to_ns: ask.to_ns,
        top: (ask.top as usize).clamp(1, MAX_TOP),
        by: if ask.by_packets {
            Rank::Packets
        } else {
            Rank::Bytes
        },
    };
    let Ok(w) = window.lock() else {
        return refused("the host's flow window is unusable (a query panicked)".into());
    };
    let a = w.query(&q);
    drop(w);
    let flows = HostFlows {
        talkers: a.talkers.iter().map(WireTalker::from).collect(),
        flows: a.flows,
        records: a.records,
        packets: a.packets,
        bytes: a.bytes,
        complete: a.complete,
        truncated: (a.talkers.len() as u64) < a.flows,
    };
    within_bounds(flows)
}

/// `flows` encoded in at most [`ANSWER_BYTES`]: while larger, the lowest
/// ranked talkers go, and the answer says it is truncated.
fn within_bounds(mut flows: HostFlows) -> Bytes {
    loop {
        let body = protocol::encode(&FlowsReply::Answer(flows.clone()));
        if body.len() <= ANSWER_BYTES || flows.talkers.is_empty() {
            return body;
        }
        let keep = flows.talkers.len() * ANSWER_BYTES / body.len();
        flows.talkers.truncate(keep.min(flows.talkers.len() - 1));
        flows.truncated = true;
    }
}

// ---- the manager's side

/// One host to ask: its name and the request.
pub(crate) struct Asked {
    pub host: String,
    pub ask: Bytes,
}

/// The hosts carrying `r`'s event, each with its request, and the query
/// as the answer repeats it; the event unknown, the group not one of
/// its, or its filters too large to send, refused.
pub(crate) fn asked(book: &EventBook, r: &FlowsRequest) -> Result<(Vec<Asked>, FlowQuery), ControlError> {
    let manager = book.manager();
    let event = manager
        .id_of(&r.event)
        .and_then(|id| manager.event(id))
        .ok_or_else(|| ControlError::NotFound(format!("no event named {}", r.event)))?;
    let local = &event.split.local;
    let group = clarion_flow_window::group_of(&r.event, &local.granularity, &r.group)
        .map_err(ControlError::Invalid)?;
    let q = FlowQuery {
        filters: Vec::new(),
        group,
        from_ns: r.from_ns,
        to_ns: r.to_ns,
        top: r.top.clamp(1, MAX_TOP),
        by: Rank::parse(&r.by).unwrap_or(Rank::Bytes),
    };
    let ask = protocol::encode(&FlowsAsk {
        event: r.event.clone(),
        filters: local.filters.clone(),
        group: q.group,
        from_ns: q.from_ns,
        to_ns: q.to_ns,
        top: per_host_top(q.top) as u32,
        by_packets: q.by == Rank::Packets,
    });
    if ask.len() > ASK_BYTES {
        return Err(ControlError::Invalid(format!(
            "{}'s filters take {} bytes, over the {ASK_BYTES} a host reads of a flows request",
            r.event,
            ask.len()
        )));
    }
    let hosts = manager.inventory().hosts();
    let asked = event
        .hosts
        .iter()
        .filter_map(|&h| hosts.get(h))
        .map(|h| Asked {
            host: h.name.clone(),
            ask: ask.clone(),
        })
        .collect();
    Ok((asked, q))
}

/// How many talkers each host is asked for when `top` are wanted: ten
/// times as many (at least 100, at most [`MAX_TOP`]), so that a flow
/// just below one host's top, which another host's part would lift into
/// the merged top, is rarely left out; a host that lists fewer than it
/// counted still makes the answer `truncated`.
fn per_host_top(top: usize) -> usize {
    top.saturating_mul(10).clamp(100, MAX_TOP)
}

/// The API's body of a merged answer: the query's, the event and group repeated.
pub(crate) fn answer_json(m: &Merged, q: &FlowQuery, r: FlowsRequest) -> serde_json::Value {
    let mut v = m.to_json(q);
    if let serde_json::Value::Object(o) = &mut v {
        o.insert("event".into(), r.event.into());
        o.insert("group".into(), r.group);
    }
    v
}

/// The manager's flows queries: how many run, and the timeout of each request.
#[derive(Clone, Debug)]
pub(crate) struct Queries {
    running: Arc<tokio::sync::Semaphore>,
    timeout: Duration,
}

impl Queries {
    pub(crate) fn new(timeout: Duration) -> Queries {
        Queries {
            running: Arc::new(tokio::sync::Semaphore::new(QUERIES_AT_ONCE)),
            timeout,
        }
    }

    /// The query asking every host of `asked` on `client` and merging
    /// their answers, to run on a task of its own; refused (saying why)
    /// when [`QUERIES_AT_ONCE`] queries run already.
    pub(crate) fn start(
        &self,
        client: async_nats::Client,
        asked: Vec<Asked>,
        top: usize,
        by: Rank,
    ) -> Result<impl std::future::Future<Output = Merged> + Send + 'static, ControlError> {
        let permit = Arc::clone(&self.running).try_acquire_owned().map_err(|_| {
            ControlError::Failed(format!(
                "the manager is answering {QUERIES_AT_ONCE} flows queries already: ask again in a moment"
            ))
        })?;
        let timeout = self.timeout;
        Ok(async move {
            let merged = ask_all(&client, asked, timeout, top, by).await;
            drop(permit);
            merged
        })
    }
}

/// Every host's answer, or why it gave none, merged.
async fn ask_all(
    client: &async_nats::Client,
    asked: Vec<Asked>,
    timeout: Duration,
    top: usize,
    by: Rank,
) -> Merged {
    let results: Vec<(String, Result<HostFlows, String>)> = futures_util::stream::iter(asked)
        .map(|a| async move {
            let got = ask_one(client, &a, timeout).await;
            (a.host, got)
        })
        .buffer_unordered(ASKED_AT_ONCE)
        .collect()
        .await;
    let mut answers = Vec::new();
    let mut missing = Vec::new();
    for (host, r) in results {
        match r {
            Ok(f) => answers.push(HostAnswer {
                host,
                talkers: f.talkers.iter().map(Talker::from).collect(),
                flows: f.flows,
                records: f.records,
                packets: f.packets,
                bytes: f.bytes,
                complete: f.complete,
                truncated: f.truncated,
            }),
            Err(why) => missing.push((host, why)),
        }
    }
    merge(answers, missing, top, by)
}

/// One host's answer, or why there is none.
async fn ask_one(client: &async_nats::Client, a: &Asked, timeout: Duration) -> Result<HostFlows, String> {
    let s = subject(&a.host);
    let req = async_nats::Request::new()
        .payload(a.ask.clone())
        .timeout(Some(timeout));
    let m = client
        .send_request(s.clone(), req)
        .await
        .map_err(|e| match e.kind() {
            async_nats::RequestErrorKind::TimedOut => format!("no answer within {timeout:?}"),
            async_nats::RequestErrorKind::NoResponders => {
                "not connected (no agent listens on its subject)".to_string()
            }
            _ => format!("the request failed: {e}"),
        })?;
    if m.payload.len() > ANSWER_BYTES {
        return Err(format!(
            "an answer of {} bytes, over the {ANSWER_BYTES} the manager reads",
            m.payload.len()
        ));
    }
    match protocol::decode::<FlowsReply>(&s, &m.payload).map_err(|e| e.to_string())? {
        FlowsReply::Answer(f) if f.talkers.len() <= MAX_TOP => Ok(f),
        FlowsReply::Answer(f) => Err(format!(
            "an answer of {} talkers, over the {MAX_TOP} asked at most",
            f.talkers.len()
        )),
        FlowsReply::Refused { reason } => Err(format!("refused: {reason}")),
    }
}

#[cfg(test)]
mod tests;
