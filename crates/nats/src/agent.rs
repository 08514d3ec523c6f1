//! An agent's connection to the manager, for a synchronous monitor loop.
//!
//! [`AgentLink::connect`] registers the host (retrying until a manager
//! answers) and returns with the host's triggers; a small runtime in the
//! background then turns the host's control and poll subjects into
//! [`Inbound`] items the monitor loop takes when it likes
//! ([`AgentLink::try_recv`]), and sends what the loop hands it
//! (satisfaction reports, answers, status) in the order given. Satisfaction
//! reports stay in the link's [`Outbox`] until the manager acknowledges
//! them, and are sent again until it does. The manager's export policies
//! come in the registration reply ([`AgentLink::take_exports`]) and then as
//! [`Control::Exports`]. With [`AgentOptions::health`], the host's health
//! goes with every heartbeat.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::Subject;
use bytes::Bytes;
use clarion_control::HealthHandle;
use clarion_report::Report;
use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot};

use crate::outbox::{Outbox, OUTBOX_CAP};
use crate::protocol::{self, Answer, Control, ExportSet, PollRequest, Register, RegisterReply, Trigger, Up};
use crate::{NatsError, Security};

#[derive(Clone, Debug)]
pub struct AgentOptions {
    pub url: String,
    pub security: Security,
    pub host: String,
    /// Prefixes this host owns, as it believes (the manager checks them against its inventory).
    pub prefixes: Vec<String>,
    /// How long to wait for a manager to answer the registration.
    pub register_timeout: Duration,
    /// The host's health, recorded by its packet loop: sent before every
    /// heartbeat (none: the agent sends no health).
    pub health: Option<HealthHandle>,
    /// Called whenever a message from the manager is ready for
    /// [`AgentLink::try_recv`]: a loop that waits on something else too
    /// (a live host's workers) wakes to answer a poll at once.
    pub wake: Option<Wake>,
    /// A live host: when its monitor started (see [`Register::answers_from_ns`]).
    pub answers_from_ns: Option<u64>,
    /// The host's recent flow records, for the manager's flows requests
    /// ([`crate::flows`]; none: each is refused, saying why).
    pub flows: Option<clarion_flow_window::SharedWindow>,
}

/// See [`AgentOptions::wake`].
#[derive(Clone)]
pub struct Wake(pub Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for Wake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Wake")
    }
}

/// What the manager sent this host.
#[derive(Debug)]
pub enum Inbound {
    Control(Control),
    /// A batch of polls: answer them all, in order, with [`AgentLink::answer`] and this reply subject.
    Poll {
        reqs: Vec<PollRequest>,
        reply: Subject,
    },
    /// A message that could not be read (logged by the loop; nothing else happens).
    Invalid(NatsError),
}

enum Outgoing {
    /// A poll's answers, to its reply subject.
    Publish(String, Bytes),
    Satisfied(Up, u64),
    Finished,
    /// The manager acknowledged these satisfaction reports.
    Acked(Vec<u64>),
    /// A second passed: heartbeat, and reports to send again.
    Beat,
    /// The agent leaves: [`Up::Bye`], then nothing more.
    Bye,
    Flush(oneshot::Sender<()>),
}

/// See the module documentation.
pub struct AgentLink {
    rt: tokio::runtime::Runtime,
    host: String,
    manager: String,
    triggers: Vec<Trigger>,
    exports: Option<ExportSet>,
    inbound: std_mpsc::Receiver<Inbound>,
    out: mpsc::UnboundedSender<Outgoing>,
    /// Satisfaction reports the manager has not acknowledged yet.
    unacked: Arc<AtomicU64>,
}

impl std::fmt::Debug for AgentLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentLink")
            .field("host", &self.host)
            .field("manager", &self.manager)
            .finish_non_exhaustive()
    }
}

impl AgentLink {
    /// Connects, listens on the host's subjects, and registers. `waiting`
    /// is called once if no manager answers at first.
    pub fn connect(opts: &AgentOptions, waiting: impl FnOnce()) -> Result<AgentLink, NatsError> {
        protocol::check_host_name(&opts.host)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("clarion-nats")
            .enable_all()
            .build()?;
        let (in_tx, inbound) = std_mpsc::channel();
        let (out, out_rx) = mpsc::unbounded_channel();
        let unacked = Arc::new(AtomicU64::new(0));
        // Replies to this host (its registration) on its own inbox, which
        // per-host credentials let only it read.
        let inbox = crate::credentials::reply_inbox_prefix(&opts.host);
        let (manager, triggers, exports) = rt.block_on(async {
            let (client, refusals) = crate::connect(
                &opts.url,
                &opts.security,
                &format!("clarion-agent {}", opts.host),
                Some(inbox),
            )
            .await?;
            // Listen before registering: nothing the manager sends after its reply is missed.
            let control = client
                .subscribe(protocol::control(&opts.host))
                .await
                .map_err(|e| NatsError::Nats(e.to_string()))?;
            let polls = client
                .subscribe(protocol::poll(&opts.host))
                .await
                .map_err(|e| NatsError::Nats(e.to_string()))?;
            let flows = client
                .subscribe(crate::flows::subject(&opts.host))
                .await
                .map_err(|e| NatsError::Nats(e.to_string()))?;
            let reply = register(&client, opts, &refusals, waiting).await?;
            tokio::spawn(crate::flows::serve(client.clone(), flows, opts.flows.clone()));
            tokio::spawn(listen(control, polls, in_tx, out.clone(), opts.wake.clone()));
            let sender = Sender {
                client,
                subject: protocol::up(&opts.host),
                outbox: Outbox::new(OUTBOX_CAP),
                finished: false,
                left: false,
                unacked: Arc::clone(&unacked),
                health: opts.health.clone(),
            };
            tokio::spawn(sender.run(out_rx));
            tokio::spawn(heartbeat(out.clone()));
            Ok::<_, NatsError>(reply)
        })?;
        Ok(AgentLink {
            rt,
            host: opts.host.clone(),
            manager,
            triggers,
            exports,
            inbound,
            out,
            unacked,
        })
    }

    /// The manager's name, from its registration reply.
    pub fn manager(&self) -> &str {
        &self.manager
    }

    /// The triggers the registration reply carried (taken once).
    pub fn take_triggers(&mut self) -> Vec<Trigger> {
        std::mem::take(&mut self.triggers)
    }

    /// The export policies the registration reply carried (taken once).
    pub fn take_exports(&mut self) -> Option<ExportSet> {
        self.exports.take()
    }

    /// Tells the manager what this host made of the export policies of
    /// `version`: applied, or refused and why.
    pub fn exports_applied(&self, version: u64, refused: Option<String>) {
        let up = Up::Exports { version, refused };
        self.send(Outgoing::Publish(protocol::up(&self.host), protocol::encode(&up)));
    }

    pub fn try_recv(&self) -> Option<Inbound> {
        self.inbound.try_recv().ok()
    }

    /// Waits up to `timeout` for the next inbound item.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Inbound> {
        self.inbound.recv_timeout(timeout).ok()
    }

    fn send(&self, o: Outgoing) {
        // The sender task ends only with the runtime, which this link owns.
        let _ = self.out.send(o);
    }

    /// A local trigger of network-wide event `event` fired; the monitor
    /// closed its window at packet time `decided_ns`. Kept until the
    /// manager acknowledges it.
    pub fn satisfied(&self, event: u64, report: &Report, decided_ns: u64) {
        let up = Up::Satisfied {
            event,
            report: Box::new(report.clone()),
            decided_ns,
            seq: 0,
        };
        self.send(Outgoing::Satisfied(up, report.window.start_ns));
    }

    /// The input ended: every window is closed.
    pub fn finished(&self) {
        self.send(Outgoing::Finished);
    }

    /// The agent leaves: after everything handed over so far, the manager
    /// is told to poll this host no more ([`Up::Bye`]); waits until it has
    /// reached the server (at most `timeout`).
    pub fn bye(&self, timeout: Duration) {
        self.send(Outgoing::Bye);
        self.flush(timeout);
    }

    /// Answers a batch of polls, after everything handed over before (the
    /// satisfaction reports of the windows answered for, which the manager
    /// must handle first: `crates/nats/src/arrivals.rs`).
    pub fn answer(&self, reply: Subject, answers: &[Answer]) {
        self.send(Outgoing::Publish(
            reply.to_string(),
            protocol::encode_compact(&answers),
        ));
    }

    /// Satisfaction reports sent and not yet acknowledged by the manager
    /// (those handed over but not yet sent are not counted).
    pub fn unacked(&self) -> u64 {
        self.unacked.load(Ordering::Relaxed)
    }

    /// Waits until everything handed over so far has reached the server (at most `timeout`).
    pub fn flush(&self, timeout: Duration) {
        let (tx, rx) = oneshot::channel();
        if self.out.send(Outgoing::Flush(tx)).is_ok() {
            // The timer must be made inside the runtime.
            let _ = self
                .rt
                .block_on(async { tokio::time::timeout(timeout, rx).await });
        }
    }
}

/// Registers, then takes the host's triggers a page at a time (see
/// [`Register`]). Each request is tried again until a manager answers or
/// `opts.register_timeout` has passed since the first.
async fn register(
    client: &async_nats::Client,
    opts: &AgentOptions,
    refusals: &crate::Refusals,
    waiting: impl FnOnce(),
) -> Result<(String, Vec<Trigger>, Option<ExportSet>), NatsError> {
    let deadline = Instant::now() + opts.register_timeout;
    let mut waiting = Some(waiting);
    let mut triggers = Vec::new();
    let mut first: Option<(String, Option<ExportSet>)> = None;
    let mut from = None;
    loop {
        let mut msg = Register {
            host: opts.host.clone(),
            prefixes: opts.prefixes.clone(),
            pages: true,
            from,
            answers_from_ns: opts.answers_from_ns,
            retry: false,
        };
        let reply = request(client, &mut msg, deadline, opts, refusals, &mut waiting).await?;
        match protocol::decode::<RegisterReply>(protocol::REGISTER, &reply)? {
            RegisterReply::Accepted {
                manager,
                triggers: page,
                exports,
                next,
            } => {
                triggers.extend(page);
                // The manager and its policies come with the first page.
                let head = first.get_or_insert((manager, exports));
                // A page must move on: a manager that answers `next` at or
                // before what was asked would have the agent ask forever.
                match next.filter(|&n| from.is_none_or(|f| n > f)) {
                    Some(n) => from = Some(n),
                    None => {
                        let (manager, exports) = std::mem::take(head);
                        return Ok((manager, triggers, exports));
                    }
                }
            }
            RegisterReply::Refused { reason } => {
                return Err(NatsError::Refused {
                    host: opts.host.clone(),
                    reason,
                })
            }
        }
    }
}

/// How long a registration request waits for its reply before it is
/// sent again: a quarter of a second at first (a manager answers in
/// milliseconds), then twice the last wait, up to 2 s (a manager slow to
/// answer, thousands of hosts registering at once, is asked a few times
/// more, not four times a second).
///
/// A request a manager took and died with gets no reply and no "no
/// responders": waited for 2 s at once, it kept the agent 2 s behind the
/// agents that had registered before the manager died, and the restarted
/// manager's polls of its windows timed out (its poll timeout is 2 s), so
/// that a run of windows was decided without it (nats_crash.rs,
/// `a_registration_lost_with_a_killed_manager_costs_no_window`).
pub(crate) fn register_wait(last: Option<Duration>) -> Duration {
    const FIRST: Duration = Duration::from_millis(250);
    const MOST: Duration = Duration::from_secs(2);
    last.map_or(FIRST, |w| (w * 2).min(MOST))
}

/// One registration request, sent again until a manager answers or
/// `deadline` passes: at once after a wait for its reply
/// ([`register_wait`], the request then marked [`Register::retry`]), 200
/// ms after the server said no manager listens. `waiting` is called the
/// first time none answers. The server refusing this host's subjects
/// (credentials of another host) ends it at once, saying so: no manager
/// could answer.
async fn request(
    client: &async_nats::Client,
    msg: &mut Register,
    deadline: Instant,
    opts: &AgentOptions,
    refusals: &crate::Refusals,
    waiting: &mut Option<impl FnOnce()>,
) -> Result<Bytes, NatsError> {
    let refused = || {
        let refused = refusals.lock().ok().and_then(|r| r.clone());
        refused.map(|refused| NatsError::NotThisHost {
            host: opts.host.clone(),
            refused,
        })
    };
    let mut wait = register_wait(None);
    loop {
        if let Some(e) = refused() {
            return Err(e);
        }
        let req = async_nats::Request::new()
            .payload(protocol::encode(msg))
            .timeout(Some(wait));
        match client.send_request(protocol::REGISTER, req).await {
            Ok(m) => return Ok(m.payload),
            Err(e) => {
                if Instant::now() >= deadline {
                    return Err(refused().unwrap_or(NatsError::NoManager(opts.register_timeout)));
                }
                let timed_out = match e.kind() {
                    async_nats::RequestErrorKind::TimedOut => true,
                    async_nats::RequestErrorKind::NoResponders => false,
                    // The connection failed, or a request no server takes.
                    _ => return Err(NatsError::Nats(e.to_string())),
                };
                if let Some(w) = waiting.take() {
                    w();
                }
                if timed_out {
                    // Waited already: asked again at once, a little longer.
                    msg.retry = true;
                    wait = register_wait(Some(wait));
                } else {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
}

async fn listen(
    mut control: async_nats::Subscriber,
    mut polls: async_nats::Subscriber,
    tx: std_mpsc::Sender<Inbound>,
    out: mpsc::UnboundedSender<Outgoing>,
    wake: Option<Wake>,
) {
    loop {
        let item = tokio::select! {
            Some(m) = control.next() => match protocol::decode::<Control>(&m.subject, &m.payload) {
                // Acknowledgements concern the sender, not the monitor loop.
                Ok(Control::Ack { seqs }) => {
                    let _ = out.send(Outgoing::Acked(seqs));
                    continue;
                }
                Ok(c) => Inbound::Control(c),
                Err(e) => Inbound::Invalid(e),
            },
            Some(m) = polls.next() => {
                let decoded = protocol::decode::<Vec<PollRequest>>(&m.subject, &m.payload);
                match (decoded, m.reply) {
                    (Ok(reqs), Some(reply)) => Inbound::Poll { reqs, reply },
                    (Err(e), _) => Inbound::Invalid(e),
                    (Ok(_), None) => Inbound::Invalid(NatsError::Decode {
                        subject: m.subject.to_string(),
                        message: "a poll without a reply subject".into(),
                    }),
                }
            },
            else => return,
        };
        if tx.send(item).is_err() {
            return;
        }
        if let Some(w) = &wake {
            (w.0)();
        }
    }
}

/// Every second: the sender heartbeats and sends unacknowledged reports again.
async fn heartbeat(out: mpsc::UnboundedSender<Outgoing>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        every.tick().await;
        if out.send(Outgoing::Beat).is_err() {
            return;
        }
    }
}

/// The task that sends everything, in the order handed over, on the
/// host's subject (answers on their reply subjects).
struct Sender {
    client: async_nats::Client,
    subject: String,
    outbox: Outbox,
    finished: bool,
    /// Said goodbye: no more heartbeats (the manager would take the
    /// host for back).
    left: bool,
    unacked: Arc<AtomicU64>,
    health: Option<HealthHandle>,
}

impl Sender {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Outgoing>) {
        while let Some(o) = rx.recv().await {
            match o {
                Outgoing::Publish(subject, payload) => self.publish(subject, payload).await,
                Outgoing::Satisfied(mut up, window_start_ns) => {
                    let payload = self.outbox.add(Instant::now(), window_start_ns, |seq| {
                        if let Up::Satisfied { seq: s, .. } = &mut up {
                            *s = seq;
                        }
                        protocol::encode(&up)
                    });
                    self.publish(self.subject.clone(), payload).await;
                }
                Outgoing::Finished => {
                    self.finished = true;
                    self.status().await;
                }
                Outgoing::Acked(seqs) => {
                    let before = self.outbox.len();
                    self.outbox.ack(&seqs);
                    // The manager may be waiting for this host to be done.
                    if self.finished && before > 0 && self.outbox.is_empty() {
                        self.status().await;
                    }
                }
                Outgoing::Bye => {
                    self.left = true;
                    self.publish(self.subject.clone(), protocol::encode(&Up::Bye))
                        .await;
                }
                Outgoing::Beat if self.left => {}
                Outgoing::Beat => {
                    for payload in self.outbox.due(Instant::now()) {
                        self.publish(self.subject.clone(), payload).await;
                    }
                    self.status().await;
                }
                Outgoing::Flush(done) => {
                    // Bounded: a server gone must not keep a stopping agent.
                    if tokio::time::timeout(crate::service::FLUSH_AT_EXIT, self.client.flush())
                        .await
                        .is_err()
                    {
                        tracing::warn!(target: "agent",
                            "the NATS server took nothing for {}s (gone?); what it did not take is lost",
                            crate::service::FLUSH_AT_EXIT.as_secs());
                    }
                    let _ = done.send(());
                }
            }
            self.unacked.store(self.outbox.len() as u64, Ordering::Relaxed);
        }
    }

    /// The heartbeat (once finished, "finished" with what is still
    /// unacknowledged) after the host's health, and any gap.
    async fn status(&mut self) {
        if self.left {
            return;
        }
        if let Some(dropped) = self.outbox.take_dropped() {
            self.publish(self.subject.clone(), protocol::encode(&dropped))
                .await;
        }
        if let Some(h) = &self.health {
            let up = Up::Health(h.health());
            self.publish(self.subject.clone(), protocol::encode(&up)).await;
        }
        let up = if self.finished {
            Up::Finished {
                unacked: self.outbox.len() as u64,
            }
        } else {
            Up::Heartbeat
        };
        self.publish(self.subject.clone(), protocol::encode(&up)).await;
    }

    async fn publish(&self, subject: String, payload: Bytes) {
        // While disconnected the client buffers and reconnects by itself.
        let _ = self.client.publish(subject, payload).await;
    }
}
