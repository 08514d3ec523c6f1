//! The manager's service: the event manager's state machine
//! (`clarion_manager::Manager`) driven by NATS messages.
//!
//! One task owns the manager and reads, in turn: registrations (answered
//! with the host's triggers), the agents' own subjects (satisfaction
//! reports and status, in each agent's order), and the outcomes of its
//! polls. Each poll is a NATS request in its own task with the poll
//! timeout; a host that does not answer in time (or no longer keeps the
//! window) is left out and the decision is made with the others, marked
//! partial, once no poll of it is outstanding.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clarion_manager::{Decision, EventId, HostId, Manager, Poll};
use clarion_report::{GroupKey, Report};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::protocol::{self, Answer, Control, PollRequest, Register, RegisterReply, Trigger, Up};
use crate::{Auth, NatsError};

#[derive(Clone, Debug)]
pub struct ManagerOptions {
    pub url: String,
    pub auth: Auth,
    /// How long a polled host has to answer.
    pub poll_timeout: Duration,
    /// Stop once every inventory host has said its input ended and no
    /// decision is waiting (replays of capture files); else run until `stop`.
    pub until_finished: bool,
}

/// What the service did, for the summary.
#[derive(Clone, Debug, Default)]
pub struct ManagerStats {
    pub registrations: u64,
    pub satisfied: u64,
    pub polls: u64,
    /// Polls not answered in time (or sent to a host with no responder).
    pub poll_timeouts: u64,
    /// Polls answered "window no longer kept".
    pub gone: u64,
    pub decisions: u64,
    pub fired: u64,
    /// Decisions made without every placed host's answer.
    pub partial: u64,
    /// Messages that could not be read, or from hosts not in the inventory.
    pub invalid: u64,
    /// Time from the first satisfaction report of a window and group to its decision.
    pub decision_latency: Vec<Duration>,
    /// Per host (inventory order): the largest gap seen between the arrival
    /// of a satisfaction report and the end of its window, an upper bound of
    /// the host's clock skew plus its reporting delay (replays: their lag).
    pub report_lag: Vec<Option<Duration>>,
}

type Key = (EventId, u64, GroupKey);

struct PollOutcome {
    poll: Poll,
    answer: Option<Answer>,
}

/// Runs the manager's service until `stop` is set (or, with
/// `until_finished`, until every host finished). Each fired network-wide
/// report goes to `on_report` and is published on `clarion.events`.
pub fn serve(
    opts: &ManagerOptions,
    name: &str,
    manager: Manager,
    triggers: HashMap<HostId, Vec<Trigger>>,
    stop: Arc<AtomicBool>,
    on_report: &mut dyn FnMut(&Report),
) -> Result<ManagerStats, NatsError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let client = crate::connect(&opts.url, &opts.auth, &format!("clarion-manager {name}")).await?;
        let mut s = Service::new(client, name, manager, triggers, opts.poll_timeout);
        s.run(opts, &stop, on_report).await?;
        Ok(s.stats)
    })
}

struct Service {
    client: async_nats::Client,
    name: String,
    manager: Manager,
    triggers: HashMap<HostId, Vec<Trigger>>,
    poll_timeout: Duration,
    outstanding: HashMap<Key, usize>,
    first_report: HashMap<Key, Instant>,
    finished: HashSet<HostId>,
    stats: ManagerStats,
    results: (
        mpsc::UnboundedSender<PollOutcome>,
        mpsc::UnboundedReceiver<PollOutcome>,
    ),
}

impl Service {
    fn new(
        client: async_nats::Client,
        name: &str,
        manager: Manager,
        triggers: HashMap<HostId, Vec<Trigger>>,
        poll_timeout: Duration,
    ) -> Service {
        let hosts = manager.inventory().hosts().len();
        Service {
            client,
            name: name.to_string(),
            manager,
            triggers,
            poll_timeout,
            outstanding: HashMap::new(),
            first_report: HashMap::new(),
            finished: HashSet::new(),
            stats: ManagerStats {
                report_lag: vec![None; hosts],
                ..ManagerStats::default()
            },
            results: mpsc::unbounded_channel(),
        }
    }

    async fn run(
        &mut self,
        opts: &ManagerOptions,
        stop: &AtomicBool,
        on_report: &mut dyn FnMut(&Report),
    ) -> Result<(), NatsError> {
        let nats = |e: async_nats::SubscribeError| NatsError::Nats(e.to_string());
        let mut registrations = self
            .client
            .queue_subscribe(protocol::REGISTER, protocol::MANAGER_QUEUE.to_string())
            .await
            .map_err(nats)?;
        let mut ups = self.client.subscribe(protocol::UP_ALL).await.map_err(nats)?;
        // Hosts that registered before this manager started get their triggers again.
        for (host, triggers) in &self.triggers {
            let name = &self.manager.inventory().hosts()[*host].name;
            for t in triggers {
                let msg = protocol::encode(&Control::Install(t.clone()));
                let _ = self.client.publish(protocol::control(name), msg).await;
            }
        }
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        loop {
            tokio::select! {
                Some(m) = registrations.next() => self.register(m).await,
                Some(m) = ups.next() => {
                    for r in self.up(m) {
                        self.emit(r, on_report).await;
                    }
                },
                Some(o) = self.results.1.recv() => {
                    if let Some(d) = self.outcome(o) {
                        self.emit(d, on_report).await;
                    }
                },
                _ = tick.tick() => {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    if opts.until_finished && self.all_finished() {
                        break;
                    }
                },
            }
        }
        // Whatever is still undecided is decided with the answers received.
        for (event, start, group) in self.manager.pending_keys() {
            if let Some(d) = self.manager.expire(event, start, group) {
                self.emit(d, on_report).await;
            }
        }
        for h in self.manager.inventory().hosts() {
            let msg = protocol::encode(&Control::Done);
            let _ = self.client.publish(protocol::control(&h.name), msg).await;
        }
        let _ = self.client.flush().await;
        Ok(())
    }

    fn all_finished(&self) -> bool {
        self.finished.len() == self.manager.inventory().hosts().len()
            && self.outstanding.is_empty()
            && self.manager.pending() == 0
    }

    fn host_id(&self, name: &str) -> Option<HostId> {
        self.manager
            .inventory()
            .hosts()
            .iter()
            .position(|h| h.name == name)
    }

    async fn register(&mut self, m: async_nats::Message) {
        let Some(reply) = m.reply.clone() else {
            self.stats.invalid += 1;
            return;
        };
        let answer = match protocol::decode::<Register>(&m.subject, &m.payload) {
            Err(e) => RegisterReply::Refused {
                reason: e.to_string(),
            },
            Ok(r) => match self.host_id(&r.host) {
                None => RegisterReply::Refused {
                    reason: format!(
                        "`{}` is not in the manager's inventory; add a line `{} <its prefixes>`",
                        r.host, r.host
                    ),
                },
                Some(h) => {
                    self.stats.registrations += 1;
                    // A host that registers again (it restarted) replays its input anew.
                    self.finished.remove(&h);
                    RegisterReply::Accepted {
                        manager: self.name.clone(),
                        triggers: self.triggers.get(&h).cloned().unwrap_or_default(),
                    }
                }
            },
        };
        let _ = self.client.publish(reply, protocol::encode(&answer)).await;
    }

    /// An agent's message: decisions made at once (one placed host), polls sent.
    fn up(&mut self, m: async_nats::Message) -> Vec<Decision> {
        let host_name = m.subject.as_str().strip_prefix("clarion.up.").unwrap_or_default();
        let Some(host) = self.host_id(host_name) else {
            self.stats.invalid += 1;
            return Vec::new();
        };
        let up = match protocol::decode::<Up>(&m.subject, &m.payload) {
            Ok(u) => u,
            Err(_) => {
                self.stats.invalid += 1;
                return Vec::new();
            }
        };
        let (event, report) = match up {
            Up::Finished => {
                self.finished.insert(host);
                return Vec::new();
            }
            Up::Satisfied { event, report } => (event, report),
        };
        self.stats.satisfied += 1;
        let lag = wall_ns().saturating_sub(report.window.end_ns);
        let lag = Some(Duration::from_nanos(lag));
        if let Some(l) = self.stats.report_lag.get_mut(host) {
            *l = (*l).max(lag);
        }
        let Ok(event) = EventId::try_from(event) else {
            self.stats.invalid += 1;
            return Vec::new();
        };
        let key = (event, report.window.start_ns, report.group);
        self.first_report.entry(key).or_insert_with(Instant::now);
        let Ok((polls, decided)) = self.manager.satisfied(event, host, &report) else {
            self.stats.invalid += 1;
            return Vec::new();
        };
        for p in polls {
            self.send_poll(p);
        }
        decided.into_iter().collect()
    }

    fn send_poll(&mut self, p: Poll) {
        let key = (p.event, p.window_start_ns, p.group);
        *self.outstanding.entry(key).or_default() += 1;
        self.stats.polls += 1;
        let name = self.manager.inventory().hosts()[p.host].name.clone();
        let req = protocol::encode(&PollRequest {
            event: p.event as u64,
            window_start_ns: p.window_start_ns,
            group: p.group,
        });
        let client = self.client.clone();
        let tx = self.results.0.clone();
        let timeout = self.poll_timeout;
        tokio::spawn(async move {
            let req = async_nats::Request::new().payload(req).timeout(Some(timeout));
            let answer = match client.send_request(protocol::poll(&name), req).await {
                Ok(m) => protocol::decode::<Answer>(&m.subject, &m.payload).ok(),
                Err(_) => None,
            };
            let _ = tx.send(PollOutcome { poll: p, answer });
        });
    }

    fn outcome(&mut self, o: PollOutcome) -> Option<Decision> {
        let key = (o.poll.event, o.poll.window_start_ns, o.poll.group);
        let left = self.outstanding.get_mut(&key).map(|n| {
            *n = n.saturating_sub(1);
            *n
        });
        let decided = match o.answer {
            Some(Answer::Values(v)) => self.manager.answer(&o.poll, v).ok().flatten(),
            Some(Answer::Gone) => {
                self.stats.gone += 1;
                None
            }
            Some(Answer::UnknownEvent) => None,
            None => {
                self.stats.poll_timeouts += 1;
                None
            }
        };
        if decided.is_some() || left == Some(0) {
            self.outstanding.remove(&key);
        }
        decided.or_else(|| {
            (left == Some(0))
                .then(|| self.manager.expire(key.0, key.1, key.2))
                .flatten()
        })
    }

    async fn emit(&mut self, d: Decision, on_report: &mut dyn FnMut(&Report)) {
        self.stats.decisions += 1;
        if !d.missing.is_empty() {
            self.stats.partial += 1;
        }
        // The latency is kept for every decision, fired or not.
        if let Some(t) = self.first_report.remove(&(d.event, d.window.start_ns, d.group)) {
            self.stats.decision_latency.push(t.elapsed());
        }
        if let Some(r) = d.report {
            self.stats.fired += 1;
            on_report(&r);
            let json = serde_json::to_vec(&r.to_json()).unwrap_or_default();
            let _ = self.client.publish(protocol::EVENTS, json.into()).await;
        }
    }
}

fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
