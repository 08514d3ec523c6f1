//! The simulated hosts: each a distinct host to the manager (its own name,
//! its own subject `clarion.up.<host>`, its own registration answered on
//! its own inbox), speaking the agents' protocol with `clarion_nats`'s
//! types: registration (a page at a time), a heartbeat a second,
//! satisfaction reports numbered and kept in an [`Outbox`] until
//! acknowledged (sent again after two seconds, as an agent does), answers
//! to batches of polls, and a goodbye.
//!
//! Few connections: the hosts are spread over `connections` NATS
//! connections (host `h` on connection `h % connections`), each driven by
//! its own task. Polls and control messages reach the connections through
//! wildcard queue subscriptions (`clarion.host.*.poll`, `...control`):
//! whichever connection gets a host's poll answers it, since a host's
//! values are a function of the seed ([`Model::volume`]), and a host's
//! outbox is shared by the connections behind a mutex.
//!
//! Time: windows are aligned to Unix time, as a live agent's are; a host
//! sends its satisfaction report of a window when the wall clock passes the
//! window's end (a live agent's window closes then, plus its `--clock-lag`
//! of 100 µs), and answers a poll of a window not yet ended once it ends.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clarion_nats::outbox::{Outbox, OUTBOX_CAP};
use clarion_nats::protocol::{self, Answer, Control, PollRequest, Register, RegisterReply, Up};
use clarion_report::{Completeness, Origin, Report, Window};
use futures_util::StreamExt;

use super::model::Model;

/// A registration request's wait for its reply.
const REGISTER_WAIT: Duration = Duration::from_secs(5);
/// Registrations in flight at once.
const REGISTER_PARALLEL: usize = 256;
/// A host's heartbeat period, as an agent's.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// The heartbeats of one period are spread over this many slices.
const HEARTBEAT_SLICES: u64 = 20;

pub fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// One simulated host's sending state.
#[derive(Debug)]
struct HostState {
    outbox: Outbox,
    /// Unacknowledged reports: sequence number → the window's end (ns).
    window_end: HashMap<u64, u64>,
}

/// What the simulated hosts counted.
#[derive(Debug, Default)]
pub struct Counters {
    pub sent: AtomicU64,
    pub resent: AtomicU64,
    pub acked: AtomicU64,
    /// Acknowledgement messages (each carries one or more reports' numbers).
    pub ack_messages: AtomicU64,
    pub heartbeats: AtomicU64,
    pub poll_batches: AtomicU64,
    pub polls: AtomicU64,
    /// Polls of an event not placed on the polled host, or of a group or
    /// window not of the event: the manager's placement differs from the model.
    pub unexpected_polls: AtomicU64,
    /// Control messages other than acknowledgements (installs, removals,
    /// done) and ones that could not be read.
    pub other_controls: AtomicU64,
    pub invalid: AtomicU64,
}

/// Latency samples, microseconds.
#[derive(Debug, Default)]
pub struct Samples {
    /// Window end → the report handed to the connection (the generator's own lag).
    pub send_lag: Mutex<Vec<u32>>,
    /// Window end → the report's acknowledgement received (its decision made).
    pub ack: Mutex<Vec<u32>>,
}

fn micros(ns: u64) -> u32 {
    u32::try_from(ns / 1000).unwrap_or(u32::MAX)
}

fn push(samples: &Mutex<Vec<u32>>, v: &[u32]) {
    if let Ok(mut s) = samples.lock() {
        s.extend_from_slice(v);
    }
}

/// The fleet: its hosts' state, shared by the connections' tasks.
pub struct Fleet {
    model: Arc<Model>,
    hosts: Vec<Mutex<HostState>>,
    /// The manager's event ids → the model's events (from the registration replies).
    ids: HashMap<u64, usize>,
    /// Model event → the manager's id.
    id_of: Vec<u64>,
    pub counters: Counters,
    pub samples: Samples,
    clients: Vec<async_nats::Client>,
}

/// Connects `connections` clients named for the fleet.
pub async fn connect(url: &str, connections: usize) -> anyhow::Result<Vec<async_nats::Client>> {
    let mut clients = Vec::with_capacity(connections);
    for c in 0..connections {
        let client = async_nats::ConnectOptions::new()
            .name(format!("clarion-lab fleet {c}"))
            .connection_timeout(Duration::from_secs(5))
            // A burst of polls must not be dropped by the client before the
            // task reads them: what is dropped would count against the manager.
            .subscription_capacity(1 << 20)
            .connect(url)
            .await
            .with_context(|| format!("cannot connect to the NATS server at {url}"))?;
        clients.push(client);
    }
    Ok(clients)
}

impl Fleet {
    /// Listens for polls and control messages, then registers every host
    /// (a page of triggers at a time) and checks that the manager placed
    /// on each host exactly the model's events. Fails if a registration is
    /// not answered by `deadline`, refused, or places otherwise.
    pub async fn register(
        model: Arc<Model>,
        clients: Vec<async_nats::Client>,
        deadline: Instant,
    ) -> anyhow::Result<Arc<Fleet>> {
        let n = model.hosts;
        let mut ids: HashMap<u64, usize> = HashMap::new();
        let by_host = clients.clone();
        let replies = futures_util::stream::iter(0..n)
            .map(|h| {
                let client = by_host[h % by_host.len()].clone();
                async move { (h, register_host(&client, h, deadline).await) }
            })
            .buffer_unordered(REGISTER_PARALLEL);
        let mut replies = std::pin::pin!(replies);
        while let Some((h, got)) = replies.next().await {
            let triggers = got?;
            let mut placed = Vec::with_capacity(triggers.len());
            for (id, name) in triggers {
                let e = model.event_of(&name).ok_or_else(|| {
                    anyhow!(
                        "host {} got a trigger of an unknown event `{name}`",
                        Model::host_name(h)
                    )
                })?;
                if let Some(&other) = ids.get(&id).filter(|&&o| o != e) {
                    bail!("the manager gave event id {id} to both f{other} and f{e}");
                }
                ids.insert(id, e);
                placed.push(e);
            }
            placed.sort_unstable();
            let want = model.events_of(h);
            if placed != want {
                bail!(
                    "the manager placed {} events on host {} where the model places {} ({:?}… against {:?}…)",
                    placed.len(),
                    Model::host_name(h),
                    want.len(),
                    &placed[..placed.len().min(5)],
                    &want[..want.len().min(5)]
                );
            }
        }
        let mut id_of = vec![u64::MAX; model.events.len()];
        for (&id, &e) in &ids {
            id_of[e] = id;
        }
        let hosts = (0..n)
            .map(|_| {
                Mutex::new(HostState {
                    outbox: Outbox::new(OUTBOX_CAP),
                    window_end: HashMap::new(),
                })
            })
            .collect();
        Ok(Arc::new(Fleet {
            model,
            hosts,
            ids,
            id_of,
            counters: Counters::default(),
            samples: Samples::default(),
            clients,
        }))
    }

    /// Starts answering polls and taking acknowledgements on every connection.
    pub async fn listen(self: &Arc<Fleet>) -> anyhow::Result<()> {
        for client in &self.clients {
            let polls = client
                .queue_subscribe("clarion.host.*.poll", "clarion-lab-fleet".to_string())
                .await
                .map_err(|e| anyhow!("subscribing to polls: {e}"))?;
            let controls = client
                .queue_subscribe("clarion.host.*.control", "clarion-lab-fleet".to_string())
                .await
                .map_err(|e| anyhow!("subscribing to control messages: {e}"))?;
            tokio::spawn(Arc::clone(self).answer_polls(client.clone(), polls));
            tokio::spawn(Arc::clone(self).take_controls(controls));
        }
        Ok(())
    }

    /// The simulated host a `clarion.host.<name>.…` subject names.
    fn host_of_subject(&self, subject: &str) -> Option<usize> {
        subject.split('.').nth(2).and_then(|n| self.model.host_of(n))
    }

    async fn answer_polls(self: Arc<Fleet>, client: async_nats::Client, mut polls: async_nats::Subscriber) {
        while let Some(m) = polls.next().await {
            let host = self.host_of_subject(&m.subject);
            let reqs = protocol::decode::<Vec<PollRequest>>(&m.subject, &m.payload);
            let (Some(h), Ok(reqs), Some(reply)) = (host, reqs, m.reply) else {
                self.counters.invalid.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            self.counters.poll_batches.fetch_add(1, Ordering::Relaxed);
            self.counters
                .polls
                .fetch_add(reqs.len() as u64, Ordering::Relaxed);
            // A batch naming a window not yet ended waits for its end, as an agent's does.
            let latest_end = reqs
                .iter()
                .filter_map(|r| {
                    self.ids
                        .get(&r.event)
                        .map(|&e| r.window_start_ns + self.model.events[e].interval_ns)
                })
                .max()
                .unwrap_or(0);
            let answers: Vec<Answer> = reqs.iter().map(|r| self.answer(h, r)).collect();
            let payload = protocol::encode_compact(&answers);
            let wait = latest_end.saturating_sub(wall_ns());
            if wait == 0 {
                let _ = client.publish(reply, payload).await;
            } else {
                let client = client.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_nanos(wait)).await;
                    let _ = client.publish(reply, payload).await;
                });
            }
        }
    }

    fn answer(&self, h: usize, r: &PollRequest) -> Answer {
        let m = &self.model;
        let Some(&e) = self.ids.get(&r.event) else {
            self.counters.unexpected_polls.fetch_add(1, Ordering::Relaxed);
            return Answer::UnknownEvent;
        };
        let g = m.group_of(e, &r.group);
        let aligned = r.window_start_ns.is_multiple_of(m.events[e].interval_ns);
        let (Some(g), true, true) = (g, aligned, m.events[e].hosts.contains(&h)) else {
            self.counters.unexpected_polls.fetch_add(1, Ordering::Relaxed);
            return Answer::UnknownEvent;
        };
        let v = m.volume(e, r.window_start_ns, g, h);
        let values = v.map(|v| vec![v as f64]);
        if r.counts {
            Answer::Counted {
                values,
                packets: Model::packets(v),
            }
        } else {
            Answer::Values(values)
        }
    }

    async fn take_controls(self: Arc<Fleet>, mut controls: async_nats::Subscriber) {
        while let Some(m) = controls.next().await {
            let host = self.host_of_subject(&m.subject);
            match (host, protocol::decode::<Control>(&m.subject, &m.payload)) {
                (Some(h), Ok(Control::Ack { seqs })) => {
                    self.counters.ack_messages.fetch_add(1, Ordering::Relaxed);
                    let now = wall_ns();
                    let mut lat = Vec::with_capacity(seqs.len());
                    if let Ok(mut st) = self.hosts[h].lock() {
                        let before = st.outbox.len();
                        st.outbox.ack(&seqs);
                        let acked = before - st.outbox.len();
                        self.counters.acked.fetch_add(acked as u64, Ordering::Relaxed);
                        for s in &seqs {
                            if let Some(end) = st.window_end.remove(s) {
                                lat.push(micros(now.saturating_sub(end)));
                            }
                        }
                    }
                    push(&self.samples.ack, &lat);
                }
                (Some(_), Ok(_)) => {
                    self.counters.other_controls.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    self.counters.invalid.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Connection `c`'s hosts send their satisfaction reports of every
    /// window that starts at or after `from_ns` and ends by `to_ns`, each
    /// as the window ends, and heartbeat every second until `stop` is set.
    pub async fn send(self: Arc<Fleet>, c: usize, from_ns: u64, to_ns: u64, stop: Arc<AtomicBool>) {
        let m = Arc::clone(&self.model);
        let conns = self.clients.len();
        let client = self.clients[c].clone();
        let mine = |h: &usize| h % conns == c;
        // The next window end of each event with hosts on this connection.
        let mut due: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
        for (e, ev) in m.events.iter().enumerate() {
            if ev.hosts.clone().any(|h| mine(&h)) {
                if let Some(start) = m.windows(e, from_ns, to_ns).next() {
                    due.push(Reverse((start + ev.interval_ns, e)));
                }
            }
        }
        let my_hosts: Vec<usize> = (0..m.hosts).filter(mine).collect();
        let slice_ns = HEARTBEAT.as_nanos() as u64 / HEARTBEAT_SLICES;
        let mut next_beat = wall_ns();
        let mut slice = 0u64;
        let mut lags = Vec::new();
        loop {
            let now = wall_ns();
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if now >= next_beat {
                self.heartbeat(&client, &my_hosts, slice).await;
                slice = (slice + 1) % HEARTBEAT_SLICES;
                next_beat += slice_ns;
            }
            while let Some(&Reverse((end, e))) = due.peek() {
                if end > now {
                    break;
                }
                due.pop();
                let ev = &m.events[e];
                let start = end - ev.interval_ns;
                for g in 0..m.groups {
                    for h in ev.hosts.clone().filter(mine) {
                        if !m.satisfies(e, start, g, h) {
                            continue;
                        }
                        let Some(v) = m.volume(e, start, g, h) else {
                            continue;
                        };
                        self.satisfied(&client, e, start, g, h, v).await;
                        lags.push(micros(wall_ns().saturating_sub(end)));
                    }
                }
                if end + ev.interval_ns <= to_ns {
                    due.push(Reverse((end + ev.interval_ns, e)));
                }
            }
            if lags.len() >= 4096 {
                push(&self.samples.send_lag, &std::mem::take(&mut lags));
            }
            let next = due.peek().map_or(next_beat, |r| r.0 .0).min(next_beat);
            let wait = next.saturating_sub(wall_ns());
            if wait > 0 {
                tokio::time::sleep(Duration::from_nanos(wait)).await;
            }
        }
        push(&self.samples.send_lag, &lags);
    }

    async fn satisfied(&self, client: &async_nats::Client, e: usize, start: u64, g: usize, h: usize, v: u64) {
        let m = &self.model;
        let ev = &m.events[e];
        let name = Model::host_name(h);
        let report = Report {
            capture: None,
            missing_hosts: Box::default(),
            event: ev.name.as_str().into(),
            window: Window {
                start_ns: start,
                end_ns: start + ev.interval_ns,
            },
            group: m.group_key(e, g),
            values: vec![("sum(volume)".into(), v as f64)].into(),
            origin: Origin {
                host: name.as_str().into(),
                worker: 0,
            },
            completeness: Completeness {
                packets: Model::packets(Some(v)),
                complete: true,
                ..Completeness::default()
            },
        };
        let mut up = Up::Satisfied {
            event: self.id_of[e],
            report: Box::new(report),
            decided_ns: wall_ns(),
            seq: 0,
        };
        let payload = match self.hosts[h].lock() {
            Ok(mut st) => {
                let payload = st.outbox.add(Instant::now(), start, |seq| {
                    if let Up::Satisfied { seq: s, .. } = &mut up {
                        *s = seq;
                    }
                    protocol::encode(&up)
                });
                if let Up::Satisfied { seq, .. } = up {
                    st.window_end.insert(seq, start + ev.interval_ns);
                }
                payload
            }
            Err(_) => return,
        };
        self.counters.sent.fetch_add(1, Ordering::Relaxed);
        let _ = client.publish(protocol::up(&name), payload).await;
    }

    /// One slice of the hosts' heartbeats, after the reports due again.
    async fn heartbeat(&self, client: &async_nats::Client, hosts: &[usize], slice: u64) {
        let beat = protocol::encode(&Up::Heartbeat);
        for (i, &h) in hosts.iter().enumerate() {
            if i as u64 % HEARTBEAT_SLICES != slice {
                continue;
            }
            let again = match self.hosts[h].lock() {
                Ok(mut st) => st.outbox.due(Instant::now()),
                Err(_) => Vec::new(),
            };
            let subject = protocol::up(&Model::host_name(h));
            self.counters
                .resent
                .fetch_add(again.len() as u64, Ordering::Relaxed);
            for payload in again {
                let _ = client.publish(subject.clone(), payload).await;
            }
            self.counters.heartbeats.fetch_add(1, Ordering::Relaxed);
            let _ = client.publish(subject, beat.clone()).await;
        }
    }

    /// Reports sent and not acknowledged yet.
    pub fn unacked(&self) -> u64 {
        self.hosts
            .iter()
            .map(|h| h.lock().map_or(0, |s| s.outbox.len() as u64))
            .sum()
    }

    /// Every host says goodbye; waits (at most `timeout`) until the server has it all.
    pub async fn bye(&self, timeout: Duration) {
        let bye = protocol::encode(&Up::Bye);
        for h in 0..self.model.hosts {
            let client = &self.clients[h % self.clients.len()];
            let _ = client
                .publish(protocol::up(&Model::host_name(h)), bye.clone())
                .await;
        }
        for client in &self.clients {
            let _ = tokio::time::timeout(timeout, client.flush()).await;
        }
    }
}

/// Registers host `h` (every page); returns its triggers' ids and event names.
async fn register_host(
    client: &async_nats::Client,
    h: usize,
    deadline: Instant,
) -> anyhow::Result<Vec<(u64, String)>> {
    let name = Model::host_name(h);
    let mut triggers = Vec::new();
    let mut from = None;
    let mut n = 0u64;
    loop {
        let msg = protocol::encode(&Register {
            host: name.clone(),
            prefixes: vec![Model::host_prefix(h)],
            pages: true,
            from,
            answers_from_ns: None,
            retry: false,
        });
        n += 1;
        // The reply on the host's own inbox, as the manager requires.
        let inbox = format!(
            "{}.fleet.{n}",
            clarion_nats::credentials::reply_inbox_prefix(&name)
        );
        let req = async_nats::Request::new()
            .payload(msg)
            .timeout(Some(REGISTER_WAIT))
            .inbox(inbox);
        let reply = match client.send_request(protocol::REGISTER, req).await {
            Ok(r) => r,
            // No responder yet (the manager is starting) or a slow one: again.
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Err(e) => bail!("no manager answered the registration of host {name} in time ({e})"),
        };
        match protocol::decode::<RegisterReply>(protocol::REGISTER, &reply.payload)? {
            RegisterReply::Accepted {
                triggers: page, next, ..
            } => {
                triggers.extend(page.into_iter().map(|t| (t.event, t.spec.name)));
                match next.filter(|&n| from.is_none_or(|f| n > f)) {
                    Some(n) => from = Some(n),
                    None => return Ok(triggers),
                }
            }
            RegisterReply::Refused { reason } => bail!("the manager refused host {name}: {reason}"),
        }
    }
}
