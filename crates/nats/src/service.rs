//! The manager's service: the manager's loop (`clarion_manager::ManagerLoop`
//! over the `Manager` inside an [`EventBook`]) driven by NATS messages and
//! control-API commands; this file carries the loop's effects over NATS.
//!
//! One task owns the book and reads, in turn: registrations (answered with
//! the host's triggers), the agents' own subjects (satisfaction reports,
//! status and heartbeats, in each agent's order) and the replies to its
//! polls, both in the order the connection received them
//! (`crates/nats/src/arrivals.rs`), and control commands. Polls for one
//! host travel in one NATS request whose reply subject is one of the
//! manager's (`crates/nats/src/poll_requests.rs`: no task or timer per
//! request); a host that does not answer within the poll timeout (or no
//! longer keeps the window) is left out and the decision is made with the
//! others, marked partial, once no poll of it is outstanding.
//!
//! # Order
//! A host's satisfaction report of a window is handled before its answer
//! to a poll of that window, so that the report takes part in the
//! decision (its completeness counted) instead of arriving after it: the
//! agent sends the report first, NATS and the client keep the order of the
//! manager's connection, and `crates/nats/src/arrivals.rs` keeps it across
//! the two subscriptions. Tested there, and end to end with the manager's
//! state machine in this file's tests (`an_answer_read_before_its_hosts_report_*`).
//!
//! Export policies ([`crate::exports`]): the service keeps the set (and
//! stores each change before sending it: a restarted manager starts with
//! the set it last stored) and sends it whole to
//! every inventory host when it changes, in each registration reply, and
//! to a host back from silence; agents answer what they made of it.
//!
//! Several managers (`shared`): registrations go to the queue group
//! `clarion-managers` and satisfaction reports reach every manager; each
//! decides only the events it owns ([`crate::shared`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clarion_control::{Command, ControlError, EventInfo, ExportInfo, ExportsCommand, HostHealth, HostInfo};
use clarion_manager::{Effect, EventId, HostId, ManagerLoop, Poll};
use clarion_report::{GroupKey, Report};
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use futures_util::StreamExt;
use tokio::sync::{broadcast, mpsc};

use crate::acks::{AckHold, ACK_HOLD};
use crate::arrivals::{Arrival, Arrivals};
use crate::book::{EventBook, OnDuplicate, Prepared};
use crate::exports::{ExportBook, PolicyInfo};
use crate::poll_requests::{Pending, PollRequests};
use crate::protocol::{self, Answer, Control, PollRequest, Register, RegisterReply, Up};
use crate::shared::{Shared, SharedEvent, TEND_EVERY};
use crate::{NatsError, Security};
use clarion_store::StoredExport;
use tracing::{debug, info, warn};

/// The wall-clock time before which reports are older than `age`.
fn age_cut(age: Duration) -> u64 {
    crate::wall_ns().saturating_sub(age.as_nanos().min(u128::from(u64::MAX)) as u64)
}

/// A host not heard from for this long is `down`.
const HOST_SILENT: Duration = Duration::from_secs(3);
/// Most agent messages read in one go before the polls they cause are sent.
const UP_BATCH: usize = 4096;
/// The most time one go of agent messages takes before the loop reads the
/// API and poll outcomes again (a backlog of 4,096 took about 100 ms).
const UP_SLICE: Duration = Duration::from_millis(10);
/// The most time one turn of the service's loop spends sending queued
/// control messages ([`Service::drain_outbox`]) before it reads agents,
/// poll outcomes and the API again: what 20,000 installs can add to a
/// `GET /v1/hosts` or a decision.
const OUTBOX_SLICE: Duration = Duration::from_millis(5);
/// Events of a request recorded in one turn of the loop (20,000 took 30
/// ms in one go, release build: this many take 2 or 3).
const APPLY_SLICE: usize = 2_000;
/// How often the manager writes its progress to the store.
const STORE_EVERY: Duration = Duration::from_secs(1);

/// How long the shutdown waits for the NATS server to take what is still
/// buffered (`Done` to agents, acknowledgements). A server that went away
/// must not keep a stopped manager running: what is left is said and lost,
/// and agents see the manager gone by its silence.
pub(crate) const FLUSH_AT_EXIT: Duration = Duration::from_secs(5);

#[derive(Clone, Debug)]
pub struct ManagerOptions {
    pub url: String,
    pub security: Security,
    /// How long a polled host has to answer.
    pub poll_timeout: Duration,
    /// Stop once every inventory host has said its input ended and no
    /// decision is waiting (replays of capture files); else run until `stop`.
    pub until_finished: bool,
    /// Polls for one host that arise together (from the satisfaction
    /// reports read in one go) travel in one request of at most this many;
    /// 1 sends each alone.
    pub max_poll_batch: usize,
    /// Also keep fired events in the JetStream stream [`EVENTS_STREAM`]
    /// (created if missing) for durable consumers.
    pub jetstream: bool,
    /// Share the load with the other managers of the NATS account: events
    /// and owners in JetStream key-value buckets (see [`crate::shared`]);
    /// `shared_events` (an events file's text) is added to the bucket at
    /// start, leaving out names stored already.
    pub shared: bool,
    pub shared_events: Option<String>,
    /// Where the hosts' list (with their health) is written every second,
    /// for the manager's metrics page; none: not kept.
    pub hosts_board: Option<clarion_control::HostsBoard>,
    /// Keep the network-wide reports in the store, so bounded (none, or
    /// no store: not kept). See [`clarion_store::history`].
    pub history: Option<HistoryLimits>,
}

/// How much report history the manager keeps in its store: the newest
/// `max_reports` at most, none written longer than `max_age` ago.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryLimits {
    pub max_reports: u64,
    pub max_age: Option<Duration>,
}

/// The JetStream stream that keeps `clarion.events` with `--jetstream`.
pub const EVENTS_STREAM: &str = "CLARION_EVENTS";

/// Makes sure the events stream exists; the server stores what is published on its subject.
async fn ensure_stream(client: &async_nats::Client) -> Result<(), NatsError> {
    let js = async_nats::jetstream::new(client.clone());
    let config = async_nats::jetstream::stream::Config {
        name: EVENTS_STREAM.to_string(),
        subjects: vec![protocol::EVENTS.to_string()],
        ..Default::default()
    };
    js.get_or_create_stream(config).await.map_err(|e| {
        NatsError::Nats(format!(
            "cannot create the JetStream stream {EVENTS_STREAM} ({e}); is JetStream enabled on the server (nats-server -js)?"
        ))
    })?;
    Ok(())
}

/// The control API's side of the service: its commands, and where fired
/// events go as JSON text.
#[derive(Debug)]
pub struct ControlLink {
    pub commands: mpsc::Receiver<Command>,
    pub reports: broadcast::Sender<String>,
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
    /// Polls not sent, to hosts that left or fell silent (given up at once).
    pub not_polled: u64,
    /// Hosts that said goodbye or fell silent, each time.
    pub departures: u64,
    pub decisions: u64,
    pub fired: u64,
    /// Decisions made without every placed host's answer.
    pub partial: u64,
    /// Messages that could not be read, or from hosts not in the inventory.
    pub invalid: u64,
    /// Hosts' reports and answers refused as impossible, by reason
    /// ([`clarion_manager::ManagerError::refusal`]).
    pub refused: std::collections::BTreeMap<&'static str, u64>,
    /// Hosts heard from again after more than 3 s of silence (their triggers were re-sent).
    pub returns: u64,
    /// Time from the first satisfaction report of a window and group to its
    /// decision: the latest [`LATENCIES_KEPT`] decisions.
    pub decision_latency: std::collections::VecDeque<Duration>,
    /// Time from the end of a window (Unix time, as live hosts stamp
    /// packets) to its decision: the latest [`LATENCIES_KEPT`] decisions
    /// of windows that ended less than an hour before (replays of old
    /// captures are left out).
    pub window_to_decision: std::collections::VecDeque<Duration>,
    /// Per host (inventory order): the largest gap seen between the arrival
    /// of a satisfaction report and the end of its window, an upper bound of
    /// the host's clock skew plus its reporting delay (replays: their lag).
    pub report_lag: Vec<Option<Duration>>,
    /// Windows some host's satisfaction reports will never reach a
    /// manager for (the agent held more unacknowledged ones than it keeps,
    /// while no manager acknowledged them): host, first and last window
    /// start (nanoseconds), and how many reports.
    pub gaps: Vec<Gap>,
    /// Per host: the windows in which it was polled and did not answer:
    /// how many, the first and the last (window starts).
    pub missed_windows: Vec<Option<Missed>>,
    /// With other managers: satisfaction reports of events another manager
    /// decides (left to it), and events this one took over.
    pub not_owned: u64,
    pub claimed: u64,
    /// Drill-down instances installed.
    pub instances: u64,
    /// Reports kept in the store's history, dropped from it (over its
    /// bounds), and not kept because the store failed.
    pub history_kept: u64,
    pub history_dropped: u64,
    pub history_failed: u64,
}

type Key = (EventId, u64, GroupKey);

/// Decision latencies kept for the summary (a long-running manager keeps the latest).
pub const LATENCIES_KEPT: usize = 1 << 16;

/// The windows a host missed, in brief.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Missed {
    pub windows: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}

struct PollOutcome {
    poll: Poll,
    answer: Option<Answer>,
    /// Not sent: the host had left.
    skipped: bool,
}

/// A request's events prepared on a blocking task, with the API's reply.
type PreparedAdd = (Result<Prepared, ControlError>, Reply<Vec<EventInfo>>);

/// Where the API waits for a command's answer.
type Reply<T> = tokio::sync::oneshot::Sender<Result<T, ControlError>>;

/// A request's events recorded by the loop, back from being stored on a
/// blocking task (the store's own connection): the outcome, the events,
/// the API's reply.
type StoredAdd = (Result<(), String>, crate::book::Applied, Reply<Vec<EventInfo>>);

/// A control message waiting in [`Service::outbox`].
#[derive(Debug)]
enum Outgoing {
    /// Event `event`'s trigger to each of `hosts`: built and encoded once
    /// when sent (so 20,000 events queue as ids, not as 20,000 × hosts
    /// triggers); none if the event was removed meanwhile.
    Install {
        event: EventId,
        hosts: Vec<HostId>,
    },
    Control {
        host: HostId,
        control: Control,
    },
}

/// What the manager knows of each host.
#[derive(Clone, Debug, Default)]
struct HostState {
    last_seen: Option<Instant>,
    /// Not polled (it said goodbye, or was silent over [`HOST_SILENT`]):
    /// its polls are given up at once, until it is heard from again.
    gone: Option<Left>,
    finished: bool,
    satisfied: u64,
    answered: u64,
    missed: u64,
    /// Reports and answers refused as impossible, by reason.
    refused: std::collections::BTreeMap<&'static str, u64>,
    /// Messages it sent that could not be read (another protocol version, damaged).
    unreadable: u64,
    /// The latest health the host sent (none from older agents).
    health: Option<HostHealth>,
    /// It holds no window that ended before this (a live agent's start,
    /// [`Register::answers_from_ns`]): such polls are given up at once.
    answers_from_ns: Option<u64>,
    /// It registered with this run of the manager (a retried
    /// registration, [`Register::retry`], is then the same one).
    registered: bool,
}

/// How a host left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Left {
    /// It said goodbye ([`Up::Bye`]): it sends nothing more, so it is
    /// done as a finished host is.
    Bye,
    /// Silent over [`HOST_SILENT`] (killed, or cut off).
    Silent,
}

/// When the periodic chores last ran.
struct Chores {
    stored_at: Instant,
    tended_at: Instant,
}

/// Satisfaction reports a host forgot before any manager acknowledged them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gap {
    pub host: String,
    pub first_ns: u64,
    pub last_ns: u64,
    pub reports: u64,
}

/// Where the manager's fired network-wide reports go ([`serve`]): a
/// closure taking each report is one.
pub trait Decided {
    /// One fired report.
    fn report(&mut self, r: &Report);

    /// Called at every turn of the manager's tick (50 ms), reports or
    /// not: for a destination that acts on time passing, such as alerts
    /// that resolve once their windows have closed quiet (without it, an
    /// alert of a manager whose events all stopped firing resolved only
    /// at its next report or its exit).
    fn idle(&mut self) {}
}

impl<F: FnMut(&Report)> Decided for F {
    fn report(&mut self, r: &Report) {
        self(r);
    }
}

/// Runs the manager's service until `stop` is set (or, with
/// `until_finished`, until every host finished). Each fired network-wide
/// report goes to `on_report`, the control API's stream, and `clarion.events`.
pub fn serve(
    opts: &ManagerOptions,
    name: &str,
    book: EventBook,
    control: Option<ControlLink>,
    stop: Arc<AtomicBool>,
    on_report: &mut dyn Decided,
) -> Result<ManagerStats, NatsError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let (client, _) = crate::connect(
            &opts.url,
            &opts.security,
            &format!("clarion-manager {name}"),
            None,
        )
        .await?;
        if opts.jetstream {
            ensure_stream(&client).await?;
        }
        let mut s = Service::new(client.clone(), name, book, opts.poll_timeout);
        s.max_poll_batch = opts.max_poll_batch.max(1);
        s.restore_exports()?;
        s.start_history(opts.history)?;
        if opts.shared {
            s.shared = Some(Shared::open(&client, name).await?);
            s.sync_shared().await?;
            if let Some(text) = &opts.shared_events {
                s.add_shared(text, true).await.map_err(|e| NatsError::Install {
                    event: "(events file)".into(),
                    message: e.to_string(),
                })?;
            }
            s.tend().await;
        }
        s.run(opts, control, &stop, on_report).await?;
        let c = s.desk.counters();
        Ok(ManagerStats {
            polls: c.polls,
            decisions: c.decisions,
            fired: c.fired,
            partial: c.partial,
            instances: c.instances,
            ..s.stats
        })
    })
}

struct Service {
    client: async_nats::Client,
    name: String,
    book: EventBook,
    poll_timeout: Duration,
    /// The manager's loop: polls outstanding, decisions, drill-downs,
    /// reports in window order (the embedded transport runs the same one).
    desk: ManagerLoop,
    first_report: HashMap<Key, Instant>,
    hosts: Vec<HostState>,
    /// Wall clock when an earlier run of this manager was last alive (from the store).
    down_since: Option<u64>,
    /// Satisfaction reports (host, agent's sequence number) taking part in
    /// each pending decision: acknowledged once it is made, or, when it
    /// fired, once its report is written.
    taking_part: HashMap<Key, Vec<(HostId, u64)>>,
    /// Decisions that fired and whose report is not written yet (held
    /// behind an earlier window of its event), by the report's event name,
    /// window and group, in the order decided. Their satisfaction reports
    /// are acknowledged only when the report is written: acknowledged at
    /// the decision, a report held while an earlier window waited for a
    /// slow host was lost with a manager killed meanwhile, as no host sent
    /// it again (nats_crash.rs, on a loaded machine).
    unwritten: HashMap<(String, u64, GroupKey), VecDeque<Key>>,
    in_decision: HashSet<(HostId, u64)>,
    /// Acknowledgements waiting to be sent, held to go a host's several
    /// in one message ([`crate::acks`]).
    to_ack: AckHold,
    windows_to_ns: u64,
    stats: ManagerStats,
    results: (
        mpsc::UnboundedSender<PollOutcome>,
        mpsc::UnboundedReceiver<PollOutcome>,
    ),
    reports: Option<broadcast::Sender<String>>,
    /// Polls waiting to be sent, per host.
    to_poll: Vec<Vec<Poll>>,
    /// Each host's poll and control subjects, made once: not a name
    /// copied and formatted for each message.
    poll_subjects: Vec<async_nats::Subject>,
    control_subjects: Vec<async_nats::Subject>,
    /// The hosts with acknowledgements or polls waiting, each once: a
    /// flush after every slice of messages visits these, not every host
    /// of a 10,000-host inventory.
    to_flush: Vec<HostId>,
    /// Poll requests in flight, answered through one subscription.
    requests: PollRequests<Poll>,
    /// The agents' messages and the poll replies, in the connection's
    /// order (subscribed to as the service starts running).
    arrivals: Option<Arrivals<async_nats::Subscriber>>,
    /// The mark of the replies queued in `arrivals` not looked at yet
    /// ([`Arrivals::queued_replies_since`], `expire_polls`).
    replies_held: u64,
    max_poll_batch: usize,
    /// With other managers: the shared buckets and what this one owns.
    shared: Option<Shared>,
    /// The export policies every host runs.
    exports: ExportBook,
    /// Requests' events, checked, placed and split on a blocking task,
    /// back for the loop to apply (see [`Service::add`]).
    prepared: (
        mpsc::UnboundedSender<PreparedAdd>,
        mpsc::UnboundedReceiver<PreparedAdd>,
    ),
    /// Requests' events back from the store (see [`Service::apply`]), and
    /// how many are being stored: the loop's own writes (its progress)
    /// wait meanwhile, so that it never waits for the store's lock.
    stored: (
        mpsc::UnboundedSender<StoredAdd>,
        mpsc::UnboundedReceiver<StoredAdd>,
    ),
    storing: usize,
    /// The request whose events the loop is recording, [`APPLY_SLICE`] a
    /// turn (one at a time: the next prepared request waits for it).
    applying: Option<(crate::book::Applying, Reply<Vec<EventInfo>>)>,
    /// Control messages to hosts not sent yet, oldest first: installs of
    /// a large request, and every later message while any wait (so that a
    /// host gets them in the order they were made: a removal never
    /// overtakes its install). Sent a slice at a time between the loop's
    /// other work ([`Service::drain_outbox`]).
    outbox: VecDeque<Outgoing>,
    /// The report history's bounds (none: not kept).
    history: Option<HistoryLimits>,
    /// Reports written and not yet in the history, and the decisions whose
    /// satisfaction reports are acknowledged once they are (so that a
    /// manager killed meanwhile loses none from its history either: the
    /// hosts send them again, see `write_history`).
    history_pending: Vec<clarion_store::NewReport>,
    history_acks: Vec<Key>,
    /// `GET /v1/flows`' queries of the hosts' flow windows running.
    flows: crate::flows::Queries,
}

impl Service {
    fn new(client: async_nats::Client, name: &str, book: EventBook, poll_timeout: Duration) -> Service {
        let inbox = client.new_inbox();
        let n = book.manager().inventory().hosts().len();
        let down_since = book.store().and_then(|s| s.meta("alive_ns").ok()?);
        let poll_subjects = subjects(&book, protocol::poll);
        let control_subjects = subjects(&book, protocol::control);
        Service {
            client,
            name: name.to_string(),
            book,
            poll_timeout,
            desk: ManagerLoop::new(),
            first_report: HashMap::new(),
            hosts: vec![HostState::default(); n],
            down_since,
            taking_part: HashMap::new(),
            unwritten: HashMap::new(),
            in_decision: HashSet::new(),
            to_ack: AckHold::new(n, ACK_HOLD),
            windows_to_ns: 0,
            stats: ManagerStats {
                report_lag: vec![None; n],
                missed_windows: vec![None; n],
                ..ManagerStats::default()
            },
            results: mpsc::unbounded_channel(),
            reports: None,
            to_poll: vec![Vec::new(); n],
            poll_subjects,
            control_subjects,
            to_flush: Vec::new(),
            requests: PollRequests::new(inbox, poll_timeout),
            arrivals: None,
            replies_held: 0,
            max_poll_batch: 1,
            shared: None,
            exports: ExportBook::new(),
            prepared: mpsc::unbounded_channel(),
            stored: mpsc::unbounded_channel(),
            storing: 0,
            applying: None,
            outbox: VecDeque::new(),
            history: None,
            history_pending: Vec::new(),
            history_acks: Vec::new(),
            flows: crate::flows::Queries::new(poll_timeout),
        }
    }

    /// Keeps reports in the store's history from now on, within `limits`
    /// (trimmed at once to them: a manager restarted with lower bounds).
    fn start_history(&mut self, limits: Option<HistoryLimits>) -> Result<(), NatsError> {
        let (Some(limits), Some(store)) = (limits, self.book.store()) else {
            return Ok(());
        };
        let mut dropped = store.trim_reports(limits.max_reports)?;
        if let Some(age) = limits.max_age {
            dropped += store.expire_reports(age_cut(age))?;
        }
        let kept = store.reports_kept()?;
        self.stats.history_dropped += dropped;
        self.stats.history_kept = kept;
        if kept > 0 {
            info!(target: "manager", reports = kept, dropped, store = %store.path(),
                "report history: {kept} report(s) kept in {}", store.path());
        }
        self.history = Some(limits);
        Ok(())
    }

    /// Stores the reports written since last time in one transaction,
    /// then acknowledges the satisfaction reports of their decisions. Not
    /// while a request's events are being stored on the store's other
    /// connection (the loop never waits for its lock), unless `now` (at
    /// exit). A store that fails is said, and the reports acknowledged
    /// anyway: the manager's output has them.
    fn write_history(&mut self, now: bool) {
        if self.history_pending.is_empty() || (self.storing > 0 && !now) {
            return;
        }
        let (Some(limits), Some(store)) = (self.history, self.book.store()) else {
            return;
        };
        let rows = std::mem::take(&mut self.history_pending);
        match store.append_reports(&rows, limits.max_reports) {
            Ok(dropped) => {
                self.stats.history_dropped += dropped;
                self.stats.history_kept = store.reports_kept().unwrap_or(self.stats.history_kept);
            }
            Err(e) => {
                if self.stats.history_failed == 0 {
                    warn!(target: "manager", reason = %e,
                        "{} report(s) not kept in the history (they are in the output; said once): {e}", rows.len());
                }
                self.stats.history_failed += rows.len() as u64;
            }
        }
        for key in std::mem::take(&mut self.history_acks) {
            self.decided(key);
        }
    }

    /// A page of the report history, as `HistoryPage` in docs/api/openapi.yaml.
    fn history_page(
        &mut self,
        r: clarion_control::HistoryRequest,
    ) -> Result<serde_json::Value, ControlError> {
        let limits = match (self.history, self.book.store()) {
            (Some(limits), Some(_)) => limits,
            _ => {
                return Err(ControlError::NotFound(
                    "this manager keeps no report history (it runs with --no-store, --shared or --report-history 0)".into(),
                ))
            }
        };
        // What was written already is in the page.
        self.write_history(false);
        let Some(store) = self.book.store() else {
            return Err(ControlError::Failed("the store went away".into()));
        };
        let page = store
            .reports_page(&clarion_store::HistoryQuery {
                event: r.event,
                from_ns: r.from_ns,
                to_ns: r.to_ns,
                limit: r.limit,
                before: r.before,
                after: r.after,
            })
            .map_err(|e| ControlError::Failed(e.to_string()))?;
        let reports: Vec<serde_json::Value> = page
            .reports
            .iter()
            .map(|x| {
                let report: serde_json::Value = serde_json::from_str(&x.report)
                    .map_err(|e| ControlError::Failed(format!("stored report {} is not JSON: {e}", x.seq)))?;
                Ok(serde_json::json!({ "seq": x.seq, "report": report }))
            })
            .collect::<Result<_, ControlError>>()?;
        Ok(serde_json::json!({
            "reports": reports,
            "older": page.older,
            "newer": page.newer,
            "last": page.last,
            "kept": page.kept,
            "dropped": page.dropped,
            "max_reports": limits.max_reports,
            "max_age_s": limits.max_age.map(|a| a.as_secs()),
        }))
    }

    fn host_name(&self, h: HostId) -> String {
        self.book.manager().inventory().hosts()[h].name.clone()
    }

    /// Sends `c` to `host` now, or after what waits in the outbox (in order).
    async fn send_control(&mut self, host: HostId, c: &Control) {
        if self.outbox.is_empty() {
            self.publish_control(host, c).await;
        } else {
            self.outbox.push_back(Outgoing::Control {
                host,
                control: c.clone(),
            });
        }
    }

    async fn publish_control(&self, host: HostId, c: &Control) {
        let payload = match c {
            // The most frequent, and of fields none skipped.
            Control::Ack { .. } => protocol::encode_compact(c),
            _ => protocol::encode(c),
        };
        let _ = self
            .client
            .publish(self.control_subjects[host].clone(), payload)
            .await;
    }

    /// Sends `host` every trigger it should hold (installs are idempotent on
    /// the agent), and the export policies (an agent ignores a set it has),
    /// through the outbox: a host holding 20,000 triggers gets them a slice
    /// at a time, not in one stall of the loop.
    async fn send_triggers(&mut self, host: HostId) {
        for event in self.book.placed_on(host) {
            self.outbox.push_back(Outgoing::Install {
                event,
                hosts: vec![host],
            });
        }
        if let Some(set) = self.exports.set() {
            self.send_control(host, &Control::Exports(set)).await;
        }
    }

    /// Sends what waits in the outbox for at most `slice` (everything with
    /// `None`), oldest first. Each install is built and encoded once for
    /// all its hosts.
    async fn drain_outbox(&mut self, slice: Option<Duration>) {
        let started = Instant::now();
        while let Some(next) = self.outbox.pop_front() {
            match next {
                Outgoing::Control { host, control } => self.publish_control(host, &control).await,
                Outgoing::Install { event, hosts } => {
                    let Some(t) = hosts.first().and_then(|&h| self.book.trigger(event, h)) else {
                        continue; // removed meanwhile: its removal follows
                    };
                    let bytes = protocol::encode(&Control::Install(t));
                    for h in hosts {
                        let subject = self.control_subjects[h].clone();
                        let _ = self.client.publish(subject, bytes.clone()).await;
                    }
                }
            }
            if slice.is_some_and(|s| started.elapsed() >= s) {
                break;
            }
        }
    }

    /// The export policies changed: every host gets the whole set.
    async fn send_exports(&mut self) {
        if let Some(set) = self.exports.set() {
            for h in 0..self.hosts.len() {
                self.send_control(h, &Control::Exports(set.clone())).await;
            }
        }
    }

    /// Adds the export policies of `source` (all or none, checked with the
    /// language's diagnostics), stores the new set and sends it to every host.
    async fn add_exports(&mut self, source: &str) -> Result<Vec<PolicyInfo>, ControlError> {
        let before = self.exports.clone();
        let added = self.exports.add(source, crate::wall_ns())?;
        self.keep_exports(before)?;
        for p in &added {
            info!(target: "manager", policy = %p.name, version = self.exports.version(),
                "export policy {} added; every host gets it", p.name);
        }
        self.send_exports().await;
        Ok(added)
    }

    /// Removes an export policy from every host (and the store).
    async fn remove_export(&mut self, name: &str) -> Result<PolicyInfo, ControlError> {
        let before = self.exports.clone();
        let gone = self.exports.remove(name, crate::wall_ns())?;
        self.keep_exports(before)?;
        info!(target: "manager", policy = %name, version = self.exports.version(),
            "export policy {name} removed from every host");
        self.send_exports().await;
        Ok(gone)
    }

    /// Stores the export policies' set after a change; if the store fails,
    /// the change is undone (`before`) and refused: a policy the hosts run
    /// is one a restarted manager still has.
    fn keep_exports(&mut self, before: ExportBook) -> Result<(), ControlError> {
        self.store_exports().map_err(|e| {
            self.exports = before;
            ControlError::Failed(format!("the export policies were not changed: {e}"))
        })
    }

    fn store_exports(&self) -> Result<(), clarion_store::StoreError> {
        let Some(store) = self.book.store() else {
            return Ok(());
        };
        let rows: Vec<StoredExport> = self
            .exports
            .list()
            .iter()
            .map(|p| StoredExport {
                name: p.name.clone(),
                source: p.source.clone(),
                added_ns: p.added_ns,
            })
            .collect();
        store.set_exports(&rows, self.exports.version())
    }

    /// Starts with the export policies the store kept (see
    /// [`ExportBook::restored`]); those that no longer check are said and
    /// dropped from it.
    fn restore_exports(&mut self) -> Result<(), NatsError> {
        let Some(store) = self.book.store() else {
            return Ok(());
        };
        let (rows, version) = store.exports()?;
        let path = store.path().to_string();
        let policies = rows
            .into_iter()
            .map(|r| PolicyInfo {
                name: r.name,
                source: r.source,
                added_ns: r.added_ns,
            })
            .collect();
        let (book, skipped) = ExportBook::restored(policies, version, crate::wall_ns());
        self.exports = book;
        for (name, why) in &skipped {
            warn!(target: "manager", policy = %name, reason = %why,
                "stored export policy `{name}` not installed (dropped from the store): {why}");
        }
        if !skipped.is_empty() {
            self.store_exports()?;
        }
        if !self.exports.list().is_empty() {
            let n = self.exports.list().len();
            info!(target: "manager", policies = n, store = %path,
                "{n} export policy(ies) restored from {path}; every host gets them");
        }
        Ok(())
    }

    async fn run(
        &mut self,
        opts: &ManagerOptions,
        control: Option<ControlLink>,
        stop: &AtomicBool,
        on_report: &mut dyn Decided,
    ) -> Result<(), NatsError> {
        let nats = |e: async_nats::SubscribeError| NatsError::Nats(e.to_string());
        let mut registrations = self
            .client
            .queue_subscribe(protocol::REGISTER, protocol::MANAGER_QUEUE.to_string())
            .await
            .map_err(nats)?;
        let ups = self.client.subscribe(protocol::UP_ALL).await.map_err(nats)?;
        let replies = self
            .client
            .subscribe(self.requests.replies_subject())
            .await
            .map_err(nats)?;
        self.arrivals = Some(Arrivals::new(ups, replies));
        let (mut commands, reports) = match control {
            Some(c) => (Some(c.commands), Some(c.reports)),
            None => (None, None),
        };
        self.reports = reports;
        // Hosts that registered with an earlier run of this manager get their triggers again.
        for h in 0..self.hosts.len() {
            self.send_triggers(h).await;
        }
        if let Some(ns) = self.down_since {
            let alive = clarion_report::rfc3339(ns);
            info!(target: "manager", last_alive = %alive,
                "restarted (last alive {alive}); hosts send again every satisfaction report it had not acknowledged, and the windows they cover are decided now");
        }
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        let mut chores = Chores {
            stored_at: Instant::now(),
            tended_at: Instant::now(),
        };
        loop {
            let wake = self.requests.next_wake();
            // In this order, not at random. The tick first, as it is ready
            // only every 50 ms and must not starve.
            tokio::select! {
                biased;
                _ = tick.tick() => {
                    if stop.load(Ordering::Relaxed) || !self.tick(opts, &mut chores, on_report).await {
                        break;
                    }
                },
                Some(m) = registrations.next() => self.register(m).await,
                // The API before agents' messages: a backlog of those
                // (thousands, read a slice at a time) must not keep an
                // operator's `GET /v1/hosts` waiting until it is gone.
                Some(c) = async { commands.as_mut()?.recv().await } => self.command(c).await,
                Some((prepared, reply)) = self.prepared.1.recv(), if self.applying.is_none() => self.apply(prepared, reply),
                Some((r, applied, reply)) = self.stored.1.recv() => self.stored(r, applied, reply).await,
                // Deadlines before the messages: a backlog must not hold
                // timeouts back (a reply received already is still an
                // answer, see `expire_polls`).
                () = sleep_until_some(wake) => self.expire_polls(on_report).await,
                // Agents' messages and poll replies in the order the
                // connection received them (see the module's "Order": a
                // host's report before its answer, by construction, not by
                // which the loop happens to read first). What else has
                // arrived is taken too, so that the polls it causes go out
                // together; for at most UP_SLICE, so that the API is read
                // between slices of a backlog.
                Some(a) = async { self.arrivals.as_mut()?.next().await } => {
                    let started = Instant::now();
                    let mut next = Some(a);
                    let mut n = 0;
                    while let Some(a) = next.take() {
                        self.arrived(a, on_report).await;
                        n += 1;
                        if n < UP_BATCH && started.elapsed() < UP_SLICE {
                            next = self.arrivals.as_mut().and_then(Arrivals::next_now);
                        }
                    }
                    self.drop_needless_polls(on_report).await;
                    self.flush_polls().await;
                },
                Some(o) = self.results.1.recv() => {
                    let effects = self.outcome(o);
                    self.carry(effects, on_report).await;
                },
                // Last: only when nothing else is ready, the loop goes on
                // with the outbox below.
                () = std::future::ready(()), if !self.outbox.is_empty() || self.applying.is_some() => {},
            }
            // A slice of the request being recorded, then of the queued
            // control messages, after every message read.
            if self.applying.is_some() {
                self.apply_slice().await;
            }
            // A slice of the queued control messages after every message
            // read: installs of a large request go out while agents are
            // still read and the API still answered.
            if !self.outbox.is_empty() {
                self.drain_outbox(Some(OUTBOX_SLICE)).await;
            }
        }
        self.shut_down(on_report).await;
        Ok(())
    }

    /// Every 50 ms: held reports, progress, expired instances, sharing.
    /// False when the manager is done (`until_finished`).
    async fn tick(
        &mut self,
        opts: &ManagerOptions,
        chores: &mut Chores,
        on_report: &mut dyn Decided,
    ) -> bool {
        // Held reports of events removed since.
        let mut effects = Vec::new();
        self.desk.release(self.book.manager(), &mut effects);
        self.carry(effects, on_report).await;
        on_report.idle();
        if opts.until_finished && self.all_finished() {
            return false;
        }
        if chores.stored_at.elapsed() >= STORE_EVERY {
            chores.stored_at = Instant::now();
            self.store_progress();
            self.expire_history();
            self.silent_hosts();
            if let Some(board) = &opts.hosts_board {
                board.set(self.host_infos());
            }
            self.expire_instances(on_report).await;
            self.forget_undecided();
        }
        self.flush_polls().await;
        self.send_acks(false).await;
        if self.shared.is_some() && chores.tended_at.elapsed() >= TEND_EVERY {
            chores.tended_at = Instant::now();
            if let Err(e) = self.sync_shared().await {
                warn!(target: "manager", "{e}");
            }
            self.tend().await;
        }
        true
    }

    /// Decides what is still undecided with the answers received,
    /// acknowledges, stores progress and, alone, tells agents it is done.
    async fn shut_down(&mut self, on_report: &mut dyn Decided) {
        // Installs and removals still queued go before the end.
        self.drain_outbox(None).await;
        let mut effects = Vec::new();
        self.desk.finish(self.book.manager_mut(), &mut effects);
        self.carry(effects, on_report).await;
        // Their reports are kept, then acknowledged, with every
        // acknowledgement held.
        self.write_history(true);
        self.flush_polls().await;
        self.send_acks(true).await;
        self.store_progress();
        // Agents stop when told; other managers may still need them.
        let alone = match &mut self.shared {
            Some(sh) => {
                sh.leave().await;
                sh.others().await == 0
            }
            None => true,
        };
        if alone {
            for h in 0..self.hosts.len() {
                self.send_control(h, &Control::Done).await;
            }
        }
        if tokio::time::timeout(FLUSH_AT_EXIT, self.client.flush())
            .await
            .is_err()
        {
            warn!(target: "manager",
                "the NATS server took nothing for {}s at exit (gone?); the last messages to agents are lost",
                FLUSH_AT_EXIT.as_secs());
        }
    }

    /// Installs the events other managers added to the shared bucket, and
    /// forgets those they removed.
    async fn sync_shared(&mut self) -> Result<(), NatsError> {
        let Some(sh) = &self.shared else { return Ok(()) };
        let stored = sh.stored().await?;
        let installed: Vec<EventId> = self.book.manager().events().map(|(id, _)| id).collect();
        for id in installed {
            if !stored.contains_key(&id) {
                self.book.forget(id);
            }
        }
        for (id, e) in stored {
            if self.book.manager().event(id).is_some() {
                continue;
            }
            match self.book.install_stored(id, &e.source, e.added_ns) {
                Ok(()) => {
                    for h in self.book.hosts_of(id) {
                        if let Some(t) = self.book.trigger(id, h) {
                            self.send_control(h, &Control::Install(t)).await;
                        }
                    }
                }
                Err(why) => warn!(target: "manager", event = %e.name, reason = %why,
                    "shared event `{}` not installed: {why}", e.name),
            }
        }
        Ok(())
    }

    /// Adds a request's events to the shared bucket (ids taken there) and installs them.
    async fn add_shared(&mut self, text: &str, skip_installed: bool) -> Result<Vec<EventId>, ControlError> {
        let new = self.book.check_new(text, skip_installed)?;
        let mut added = Vec::new();
        for (name, source) in new {
            let Some(sh) = &self.shared else { break };
            let from = self.book.manager().next_id();
            let e = SharedEvent {
                id: 0,
                name: name.clone(),
                source: source.clone(),
                added_ns: crate::wall_ns(),
            };
            let failed = |e: NatsError| ControlError::Failed(e.to_string());
            let mut id = sh.add(e, from).await.map_err(failed)?;
            // Two managers adding one name at once: the lowest id stays.
            let stored = sh.stored().await.map_err(failed)?;
            if let Some((&first, _)) = stored.iter().find(|(_, e)| e.name == name) {
                if first != id {
                    sh.remove(id).await.map_err(failed)?;
                    id = first;
                }
            }
            if self.book.manager().event(id).is_some() {
                continue;
            }
            let added_ns = crate::wall_ns();
            self.book
                .install_stored(id, &source, added_ns)
                .map_err(ControlError::Invalid)?;
            added.push(id);
        }
        Ok(added)
    }

    /// Refreshes, gives back and claims events; says what moved.
    async fn tend(&mut self) {
        let Some(sh) = &mut self.shared else { return };
        let events: Vec<EventId> = self.book.manager().events().map(|(id, _)| id).collect();
        match sh.tend(&events).await {
            Ok(t) => {
                let name = |id: &EventId| {
                    self.book
                        .manager()
                        .event(*id)
                        .map_or_else(|| id.to_string(), |e| e.split.network().name.clone())
                };
                let list = |ids: &[EventId]| ids.iter().map(name).collect::<Vec<_>>().join(", ");
                if !t.claimed.is_empty() {
                    self.stats.claimed += t.claimed.len() as u64;
                    info!(target: "manager", manager = %self.name, events = t.claimed.len(), managers = t.managers,
                        "{} now deciding {} ({} manager(s) present)", self.name, list(&t.claimed), t.managers);
                }
                if !t.released.is_empty() || !t.lost.is_empty() {
                    let gone = [t.released, t.lost].concat();
                    info!(target: "manager", manager = %self.name, events = gone.len(), managers = t.managers,
                        "{} handed over {} ({} manager(s) present)", self.name, list(&gone), t.managers);
                }
            }
            Err(e) => warn!(target: "manager", "{e}"),
        }
    }

    fn store_progress(&mut self) {
        if self.storing > 0 {
            // The store's lock is another connection's: next time.
            return;
        }
        if let Some(store) = self.book.store() {
            let _ = store.set_meta("alive_ns", crate::wall_ns());
        }
        if let Err(e) = self.book.store_instances() {
            warn!(target: "manager", reason = %e, "drill-down instances not stored (tried again in a second): {e}");
        }
    }

    /// Drops the reports older than the history's age bound.
    fn expire_history(&mut self) {
        let age = self.history.and_then(|h| h.max_age);
        let (Some(age), Some(store)) = (age, self.book.store()) else {
            return;
        };
        if self.storing > 0 {
            return; // as store_progress
        }
        match store.expire_reports(age_cut(age)) {
            Ok(n) => {
                self.stats.history_dropped += n;
                self.stats.history_kept = self.stats.history_kept.saturating_sub(n);
            }
            Err(e) => {
                warn!(target: "manager", reason = %e, "old reports not dropped from the history (tried again in a second): {e}")
            }
        }
    }

    fn all_finished(&self) -> bool {
        let done = |h: &HostState| h.finished || h.gone == Some(Left::Bye);
        self.hosts.iter().all(done) && !self.desk.waiting(self.book.manager())
    }

    fn host_id(&self, name: &str) -> Option<HostId> {
        self.book.manager().inventory().host_id(name)
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
            // The reply goes to the asking host's inbox, which per-host
            // credentials let only it read: a host cannot get another's triggers.
            Ok(r) if !crate::credentials::is_hosts_reply(&r.host, &reply) => RegisterReply::Refused {
                reason: format!(
                    "a registration as `{}` must be answered on its inbox ({}.…), not {reply}",
                    r.host,
                    crate::credentials::reply_inbox_prefix(&r.host)
                ),
            },
            Ok(r) => match self.host_id(&r.host) {
                None => RegisterReply::Refused {
                    reason: format!(
                        "`{}` is not in the manager's inventory; add a line `{} <its prefixes>`",
                        r.host, r.host
                    ),
                },
                Some(h) => self.accept(h, &r),
            },
        };
        // An agent from before protocol version 1 reads JSON only: it is
        // told why it is refused in the language it reads.
        let answer = if protocol::is_json(&m.payload) {
            serde_json::to_vec(&answer).unwrap_or_default().into()
        } else {
            protocol::encode(&answer)
        };
        let _ = self.client.publish(reply, answer).await;
    }

    /// A host in the inventory registers, or asks for its next page of
    /// triggers ([`Register::from`]: that changes nothing here).
    fn accept(&mut self, h: HostId, r: &Register) -> RegisterReply {
        let from = r.from.map(|f| usize::try_from(f).unwrap_or(usize::MAX));
        if from.is_none() {
            // A host that registers again (it restarted) replays its input anew.
            let st = &mut self.hosts[h];
            let again = st.last_seen.is_some();
            // The agent asking again for a reply this manager was slow to
            // send: the same registration, counted and said once.
            let repeat = r.retry && st.registered;
            st.registered = true;
            st.finished = false;
            st.gone = None;
            st.last_seen = Some(Instant::now());
            st.answers_from_ns = r.answers_from_ns;
            let triggers = self.book.manager().placed_count(h);
            if repeat {
                debug!(target: "manager", host = %r.host, "host {} asked again for its registration's reply", r.host);
            } else {
                self.stats.registrations += 1;
            }
            match r.answers_from_ns.filter(|_| again) {
                _ if repeat => {}
                Some(from) => {
                    let from = clarion_report::rfc3339(from);
                    info!(target: "manager", host = %r.host, again, triggers, answers_from = %from,
                        "host {} registered again: {triggers} trigger(s); it restarted and answers for windows from {from} on (earlier ones are decided without it, marked partial)", r.host);
                }
                None => info!(target: "manager", host = %r.host, again, triggers,
                    "host {} registered{}: {triggers} trigger(s)", r.host, if again { " again" } else { "" }),
            }
            // Its counters started again: what it said before is gone.
            st.health = None;
        }
        let budget = if r.pages {
            protocol::REGISTER_PAGE_BYTES
        } else {
            // An agent from before pages: everything in one reply, if it fits.
            protocol::REGISTER_PAGE_BYTES * 2 - 64 * 1024
        };
        let (triggers, next) = self.book.triggers_page(h, from.unwrap_or(0), budget);
        if !r.pages && next.is_some() {
            return RegisterReply::Refused {
                reason: format!(
                    "`{}` holds {} triggers, more than one registration reply carries; \
                     an agent of this manager's version takes them a page at a time",
                    r.host,
                    self.book.manager().placed_count(h)
                ),
            };
        }
        RegisterReply::Accepted {
            manager: self.name.clone(),
            triggers,
            // The policies travel once, with the first page.
            exports: if from.is_none() { self.exports.set() } else { None },
            next: next.map(|n| n as u64),
        }
    }

    /// An agent's message: what the manager's loop makes of it.
    async fn up(&mut self, m: async_nats::Message) -> Vec<Effect> {
        let host_name = m.subject.as_str().strip_prefix("clarion.up.").unwrap_or_default();
        let Some(host) = self.host_id(host_name) else {
            self.stats.invalid += 1;
            return Vec::new();
        };
        let up = match protocol::decode::<Up>(&m.subject, &m.payload) {
            Ok(up) => up,
            Err(e) => {
                // Counted; the first of each host named (another version of
                // Clarion, or a damaged message).
                self.stats.invalid += 1;
                self.hosts[host].unreadable += 1;
                if self.hosts[host].unreadable == 1 {
                    warn!(target: "manager", host = %host_name, reason = %e,
                        "cannot read a message of host {host_name}: {e} (later ones are counted in the summary)");
                }
                return Vec::new();
            }
        };
        let silent = self.hosts[host]
            .last_seen
            .map(|t| t.elapsed())
            .filter(|s| *s > HOST_SILENT);
        self.hosts[host].last_seen = Some(Instant::now());
        let was_gone = self.hosts[host].gone.take().is_some();
        if let Some(s) = silent {
            // It was silent (disconnected, or the manager missed it): it may have lost installs.
            self.send_triggers(host).await;
            self.stats.returns += 1;
            info!(target: "manager", host = %host_name, silent_s = s.as_secs_f64(),
                "host {host_name} is back after {:.1} s of silence; its triggers were sent again; polled again",
                s.as_secs_f64());
        } else if was_gone && !matches!(up, Up::Bye) {
            info!(target: "manager", host = %host_name, "host {host_name} is back; polled again");
        }
        let (event, report, decided_ns, seq) = match up {
            Up::Heartbeat => return Vec::new(),
            Up::Bye if was_gone => {
                self.hosts[host].gone = Some(Left::Bye);
                return Vec::new();
            }
            Up::Bye => {
                self.left(host, Left::Bye, "it said goodbye".into());
                return Vec::new();
            }
            Up::Health(h) => {
                self.hosts[host].health = Some(h);
                return Vec::new();
            }
            Up::Exports { version, refused } => {
                if let Some(why) = refused {
                    warn!(target: "manager", host = %host_name, version, reason = %why,
                        "host {host_name} refused the export policies of version {version} (it keeps its previous ones): {why}");
                }
                return Vec::new();
            }
            Up::Finished { unacked } => {
                // Done once every report it sent is acknowledged.
                self.hosts[host].finished = unacked == 0;
                return Vec::new();
            }
            Up::Dropped {
                reports,
                first_ns,
                last_ns,
            } => {
                self.dropped(host, reports, first_ns, last_ns);
                return Vec::new();
            }
            Up::Satisfied {
                event,
                report,
                decided_ns,
                seq,
            } => (event, report, decided_ns, seq),
        };
        self.satisfied(host, event, &report, decided_ns, seq)
    }

    /// A host's satisfaction report: what the manager's loop makes of it.
    fn satisfied(
        &mut self,
        host: HostId,
        event: u64,
        report: &Report,
        decided_ns: u64,
        seq: u64,
    ) -> Vec<Effect> {
        if seq > 0 && self.in_decision.contains(&(host, seq)) {
            // Sent again while its decision is still being made.
            return Vec::new();
        }
        self.stats.satisfied += 1;
        self.hosts[host].satisfied += 1;
        self.windows_to_ns = self.windows_to_ns.max(report.window.end_ns);
        let now_ns = crate::wall_ns();
        let lag = Some(Duration::from_nanos(now_ns.saturating_sub(report.window.end_ns)));
        if let Some(l) = self.stats.report_lag.get_mut(host) {
            *l = (*l).max(lag);
        }
        let Ok(event) = EventId::try_from(event) else {
            self.stats.invalid += 1;
            self.ack(host, seq);
            return Vec::new();
        };
        if self.shared.as_ref().is_some_and(|sh| !sh.owns(event)) {
            // Another manager decides it, and acknowledges it.
            self.stats.not_owned += 1;
            return Vec::new();
        }
        let key = (event, report.window.start_ns, report.group);
        let arrived = Instant::now();
        let mut effects = Vec::new();
        let manager = self.book.manager_mut();
        // Windows far beyond the wall clock are refused (`MAX_SKEW_NS`).
        manager.set_clock(now_ns);
        match self
            .desk
            .satisfied(manager, host, event, report, decided_ns, &mut effects)
        {
            Err(e) => {
                self.refused(host, &e);
                self.ack(host, seq);
            }
            // Only a report that starts a decision starts its clock (a late
            // one for a decided window starts nothing, and must leave nothing behind).
            Ok(true) => {
                self.first_report.entry(key).or_insert(arrived);
                if seq > 0 {
                    // Acknowledged when the decision is made (in `carry`).
                    self.taking_part.entry(key).or_default().push((host, seq));
                    self.in_decision.insert((host, seq));
                }
            }
            // Decided already (it was polled): nothing more to do with it.
            Ok(false) => self.ack(host, seq),
        }
        effects
    }

    /// A host's report or answer that cannot be true (an impossible
    /// value, a window not of its event) is refused and counted; the first
    /// of each host is named. One of an event removed meanwhile is no fault.
    fn refused(&mut self, host: HostId, e: &clarion_manager::ManagerError) {
        let Some(reason) = e.refusal() else {
            // Not about the message (an event removed meanwhile): no fault.
            return;
        };
        *self.stats.refused.entry(reason).or_default() += 1;
        *self.hosts[host].refused.entry(reason).or_default() += 1;
        if self.hosts[host].refused.values().sum::<u64>() == 1 {
            let name = self.host_name(host);
            warn!(target: "manager", host = %name, reason = %e,
                "refused a message of host {name}: {e} (later ones are counted in the summary)");
        }
    }

    fn ack(&mut self, host: HostId, seq: u64) {
        if seq > 0 {
            self.to_ack.hold(Instant::now(), host, seq);
        }
    }

    /// Sends the acknowledgements held long enough (all: every one).
    async fn send_acks(&mut self, all: bool) {
        let due = if all {
            self.to_ack.all()
        } else {
            self.to_ack.due(Instant::now())
        };
        for (host, seqs) in due {
            self.send_control(host, &Control::Ack { seqs }).await;
        }
    }

    /// The reports that took part in a decision just made are acknowledged.
    fn decided(&mut self, key: Key) {
        for (host, seq) in self.taking_part.remove(&key).unwrap_or_default() {
            self.in_decision.remove(&(host, seq));
            self.ack(host, seq);
        }
    }

    /// Reports of pending decisions that went away without one (their
    /// event was removed, or its instance expired) are acknowledged.
    fn forget_undecided(&mut self) {
        let manager = self.book.manager();
        let gone: Vec<Key> = self
            .taking_part
            .keys()
            .filter(|k| manager.event(k.0).is_none())
            .copied()
            .collect();
        for k in gone {
            self.decided(k);
        }
    }

    /// A host forgot reports no manager acknowledged: the gap is reported.
    fn dropped(&mut self, host: HostId, reports: u64, first_ns: u64, last_ns: u64) {
        let host = self.host_name(host);
        warn!(target: "manager", host = %host, reports, first_ns, last_ns,
            "host {host} could not keep {reports} satisfaction report(s) of windows from {} to {} until a manager acknowledged them: those windows are not decided",
            clarion_report::rfc3339(first_ns),
            clarion_report::rfc3339(last_ns));
        self.stats.gaps.push(Gap {
            host,
            first_ns,
            last_ns,
            reports,
        });
    }

    /// `host` is about to have a poll waiting.
    fn waiting(&mut self, host: HostId) {
        if self.to_poll[host].is_empty() {
            self.to_flush.push(host);
        }
    }

    /// Polls waiting to be sent whose answer the manager has already are
    /// not sent: at a window's end several placed hosts report at once,
    /// and the first report read polls the others before theirs are read,
    /// in the same slice (a 16-host event of which 4 report: 15 polls
    /// made, 12 needed).
    async fn drop_needless_polls(&mut self, on_report: &mut dyn Decided) {
        let mut effects = Vec::new();
        let manager = self.book.manager_mut();
        for &host in &self.to_flush {
            self.to_poll[host].retain(|p| {
                let needless = manager.answered_already(p);
                if needless {
                    self.desk.needless(manager, p, &mut effects);
                }
                !needless
            });
        }
        if !effects.is_empty() {
            self.carry(effects, on_report).await;
        }
    }

    /// Sends the waiting polls (one request per host and batch), after
    /// writing the reports decided so far to the history (they are kept
    /// before their acknowledgements leave).
    async fn flush_polls(&mut self) {
        self.write_history(false);
        let hosts = std::mem::take(&mut self.to_flush);
        for host in hosts {
            if self.to_poll[host].is_empty() {
                continue;
            }
            let mut polls = std::mem::take(&mut self.to_poll[host]);
            if let Some(from) = self.hosts[host].answers_from_ns {
                // Windows that ended before the host's monitor started: it
                // kept none of them (answered as a window no longer kept).
                let manager = self.book.manager();
                let before = |p: &Poll| {
                    manager.event(p.event).is_some_and(|e| {
                        p.window_start_ns.saturating_add(e.split.network().interval_ns) <= from
                    })
                };
                let (early, rest): (Vec<Poll>, Vec<Poll>) = polls.into_iter().partition(before);
                polls = rest;
                for poll in early {
                    let _ = self.results.0.send(PollOutcome {
                        poll,
                        answer: Some(Answer::Gone),
                        skipped: false,
                    });
                }
                if polls.is_empty() {
                    continue;
                }
            }
            if self.hosts[host].gone.is_some() {
                // Decided at once without it (the loop reads these next).
                for poll in polls {
                    let _ = self.results.0.send(PollOutcome {
                        poll,
                        answer: None,
                        skipped: true,
                    });
                }
                continue;
            }
            let subject = &self.poll_subjects[host];
            for chunk in polls.chunks(self.max_poll_batch) {
                let reqs: Vec<PollRequest> = chunk
                    .iter()
                    .map(|p| PollRequest {
                        event: p.event as u64,
                        window_start_ns: p.window_start_ns,
                        group: p.group,
                        counts: true,
                    })
                    .collect();
                let sent = self
                    .requests
                    .send(
                        &self.client,
                        host,
                        subject.clone(),
                        protocol::encode_compact(&reqs),
                        chunk.to_vec(),
                    )
                    .await;
                if let Err(p) = sent {
                    // Not sent: unanswered, as a request that timed out.
                    self.outcomes_later(p, None, false);
                }
            }
        }
    }

    /// One message of the manager's connection, in its order.
    async fn arrived(&mut self, a: Arrival<async_nats::Message>, on_report: &mut dyn Decided) {
        match a {
            Arrival::Agent(m) => {
                let effects = self.up(m).await;
                self.carry(effects, on_report).await;
            }
            Arrival::Reply(m) => {
                if let Some((p, answers)) = self.requests.answered(&m) {
                    self.polls_done(p, answers, on_report).await;
                }
            }
        }
    }

    /// Poll requests past their deadline are given up (their polls
    /// unanswered) and those a server found no responder for are sent
    /// again. One whose reply the connection has received is not given
    /// up, however far behind the loop is: it is read in its turn.
    async fn expire_polls(&mut self, on_report: &mut dyn Decided) {
        let past = self.requests.any_past_deadline(tokio::time::Instant::now());
        if let (true, Some(arrivals)) = (past, self.arrivals.as_mut()) {
            // The connection's task (on this thread) is let read what its
            // socket holds first, again while replies keep coming.
            for _ in 0..8 {
                tokio::task::yield_now().await;
                if arrivals.take_replies_in() == 0 {
                    break;
                }
            }
            // The replies queued since the last look are held (those
            // before are already): each is looked at once, not at every
            // deadline while it waits.
            let (replies, mark) = arrivals.queued_replies_since(self.replies_held);
            for m in replies {
                self.requests.hold(m);
            }
            self.replies_held = mark;
        }
        let expired = self.requests.expired(&self.client).await;
        for p in expired {
            self.polls_done(p, None, on_report).await;
        }
    }

    /// A poll request's end: each of its polls' outcome, answered or not.
    async fn polls_done(
        &mut self,
        p: Pending<Poll>,
        answers: Option<Vec<Answer>>,
        on_report: &mut dyn Decided,
    ) {
        for o in poll_outcomes(p, answers, false) {
            let effects = self.outcome(o);
            self.carry(effects, on_report).await;
        }
    }

    /// A request's polls' outcomes, for the loop to read next (from a
    /// place that cannot carry their effects).
    fn outcomes_later(&self, p: Pending<Poll>, answers: Option<Vec<Answer>>, skipped: bool) {
        for o in poll_outcomes(p, answers, skipped) {
            let _ = self.results.0.send(o);
        }
    }

    /// A poll's outcome, for the manager's loop.
    fn outcome(&mut self, o: PollOutcome) -> Vec<Effect> {
        let host = o.poll.host;
        let mut effects = Vec::new();
        let manager = self.book.manager_mut();
        let answer = match o.answer {
            Some(Answer::Values(values)) => Ok((values, None)),
            Some(Answer::Counted { values, packets }) => Ok((values, Some(packets))),
            other => Err(other),
        };
        match answer {
            Ok((values, packets)) => {
                self.hosts[host].answered += 1;
                self.hosts[host].last_seen = Some(Instant::now());
                if let Err(e) = self
                    .desk
                    .answered(manager, &o.poll, values, packets, &mut effects)
                {
                    self.refused(host, &e);
                }
            }
            Err(other) => {
                match other {
                    Some(Answer::Gone) => self.stats.gone += 1,
                    None if o.skipped => self.stats.not_polled += 1,
                    None => self.stats.poll_timeouts += 1,
                    _ => {}
                }
                self.desk.unanswered(manager, &o.poll, &mut effects);
                self.missed(host, o.poll.window_start_ns);
            }
        }
        effects
    }

    /// `host` left (`why`): it is not polled until heard from again.
    fn left(&mut self, host: HostId, how: Left, why: String) {
        self.hosts[host].gone = Some(how);
        if how == Left::Bye {
            // Its answers received already count. Its goodbye is read now,
            // so every report it sent before them has been read (the
            // agents' messages keep their order): they may be read out of
            // turn ([`Arrivals::take_replies`]).
            let requests = &self.requests;
            let answered = match self.arrivals.as_mut() {
                Some(a) => a.take_replies(|m| requests.host_of(m) == Some(host)),
                None => Vec::new(),
            };
            for m in answered {
                if let Some((p, answers)) = self.requests.answered(&m) {
                    self.outcomes_later(p, answers, false);
                }
            }
        }
        // Its other polls in flight are given up at once (an agent that
        // said goodbye answers none of them).
        for p in self.requests.of_host(host) {
            self.outcomes_later(p, None, true);
        }
        self.stats.departures += 1;
        let name = self.host_name(host);
        let said = format!(
            "host {name} left ({why}): decisions are made without it, marked partial, until it is heard from again"
        );
        // A goodbye is an agent stopping as asked; silence is news.
        match how {
            Left::Bye => info!(target: "manager", host = %name, reason = %why, "{said}"),
            Left::Silent => warn!(target: "manager", host = %name, reason = %why, "{said}"),
        }
    }

    /// Hosts silent for over [`HOST_SILENT`] are taken for gone (a killed
    /// agent says no goodbye): their polls would each wait the poll timeout.
    /// Silent next to the host heard from last, not to the clock: a manager
    /// behind on reading its messages (a loaded machine) has heard from no
    /// host lately, and must not take them all for gone.
    fn silent_hosts(&mut self) {
        let Some(newest) = self.hosts.iter().filter_map(|h| h.last_seen).max() else {
            return;
        };
        for h in 0..self.hosts.len() {
            let st = &self.hosts[h];
            let silent = st
                .last_seen
                .map(|t| newest.duration_since(t))
                .filter(|s| *s > HOST_SILENT);
            if let Some(s) = silent.filter(|_| st.gone.is_none()) {
                self.left(h, Left::Silent, format!("silent for {:.1} s", s.as_secs_f64()));
            }
        }
    }

    fn missed(&mut self, host: HostId, window_start_ns: u64) {
        self.hosts[host].missed += 1;
        let m = self.stats.missed_windows[host].get_or_insert(Missed {
            windows: 0,
            first_ns: window_start_ns,
            last_ns: window_start_ns,
        });
        if m.windows == 0 || m.last_ns != window_start_ns {
            m.windows += 1;
        }
        m.first_ns = m.first_ns.min(window_start_ns);
        m.last_ns = m.last_ns.max(window_start_ns);
    }

    /// Carries out the manager loop's effects: polls wait for
    /// [`Service::flush_polls`], drill-down instances go to their hosts,
    /// fired reports out.
    async fn carry(&mut self, effects: Vec<Effect>, on_report: &mut dyn Decided) {
        for effect in effects {
            match effect {
                Effect::Poll(p) => {
                    self.waiting(p.host);
                    self.to_poll[p.host].push(p);
                }
                Effect::Install(i) => {
                    let event = i.event;
                    self.book.instance_installed(&i);
                    for h in self.book.hosts_of(event) {
                        if let Some(t) = self.book.trigger(event, h) {
                            self.send_control(h, &Control::Install(t)).await;
                        }
                    }
                }
                Effect::Extend { event, hosts, end_ns } => {
                    self.book.set_end(event, end_ns);
                    let c = Control::Extend {
                        event: event as u64,
                        end_ns,
                    };
                    for h in hosts {
                        self.send_control(h, &c).await;
                    }
                }
                Effect::Remove { event, hosts } => {
                    self.book.forget_instance(event);
                    for h in hosts {
                        self.send_control(h, &Control::Remove { event: event as u64 })
                            .await;
                    }
                }
                Effect::Decided {
                    event,
                    window,
                    group,
                    fired,
                    partial,
                } => {
                    let key = (event, window.start_ns, group);
                    let name = self
                        .book
                        .manager()
                        .event(event)
                        .map(|e| e.split.network().name.clone());
                    if partial && tracing::enabled!(target: "manager", tracing::Level::DEBUG) {
                        let name = name.as_deref().unwrap_or("?");
                        let start = clarion_report::rfc3339(window.start_ns);
                        debug!(target: "manager", event = %name, window_start = %start, fired,
                            "{name}'s window from {start} decided without every placed host's answer");
                    }
                    match name.filter(|_| fired) {
                        Some(name) => self
                            .unwritten
                            .entry((name, window.start_ns, group))
                            .or_default()
                            .push_back(key),
                        None => self.decided(key),
                    }
                    self.note_decision(event, window, group);
                }
                Effect::Report(r) => {
                    on_report.report(&r);
                    let written = (r.event.to_string(), r.window.start_ns, r.group);
                    let (key, emptied) = match self.unwritten.get_mut(&written) {
                        Some(keys) => (keys.pop_front(), keys.is_empty()),
                        None => (None, false),
                    };
                    if emptied {
                        self.unwritten.remove(&written);
                    }
                    let value = r.to_json();
                    let json = value.to_string();
                    if self.history.is_some() {
                        self.history_pending.push(clarion_store::NewReport {
                            event: written.0,
                            window_start_ns: written.1,
                            group: value["group"].to_string(),
                            written_ns: crate::wall_ns(),
                            report: json.clone(),
                        });
                        self.history_acks.extend(key);
                    } else if let Some(key) = key {
                        self.decided(key);
                    }
                    if let Some(tx) = &self.reports {
                        // No subscriber is not an error.
                        let _ = tx.send(json.clone());
                    }
                    let _ = self.client.publish(protocol::EVENTS, json.into()).await;
                }
            }
        }
    }

    /// A decision's latencies (every decision's, fired or not).
    fn note_decision(&mut self, event: EventId, window: clarion_report::Window, group: GroupKey) {
        if let Some(t) = self.first_report.remove(&(event, window.start_ns, group)) {
            if self.stats.decision_latency.len() == LATENCIES_KEPT {
                self.stats.decision_latency.pop_front();
            }
            self.stats.decision_latency.push_back(t.elapsed());
        }
        let since_end = crate::wall_ns()
            .checked_sub(window.end_ns)
            .map(Duration::from_nanos);
        if let Some(since_end) = since_end.filter(|d| d.as_secs() < 3600) {
            if self.stats.window_to_decision.len() == LATENCIES_KEPT {
                self.stats.window_to_decision.pop_front();
            }
            self.stats.window_to_decision.push_back(since_end);
        }
    }

    /// Removes the drill-down instances whose windows all ended a while ago
    /// (their decisions are made: polls last at most the poll timeout).
    async fn expire_instances(&mut self, on_report: &mut dyn Decided) {
        let margin = 2 * self.poll_timeout.as_nanos().min(u128::from(u64::MAX / 4)) as u64;
        let closed = self.windows_to_ns.saturating_sub(margin);
        let mut effects = Vec::new();
        self.desk
            .expire_instances(self.book.manager_mut(), closed, &mut effects);
        self.carry(effects, on_report).await;
    }

    async fn command(&mut self, c: Command) {
        match c {
            Command::Apps { .. }
            | Command::AddApp { .. }
            | Command::ShowApp { .. }
            | Command::RemoveApp { .. } => {
                c.refuse_apps(
                    "the manager runs no metric apps: a live host does (clarion run -i ... --api ADDR with --gpv FILE or --app NAME)",
                );
            }
            Command::Exports(x) => self.exports_command(x).await,
            Command::History { request, reply } => {
                let _ = reply.send(self.history_page(request));
            }
            Command::Flows { request, reply } => self.flows(request, reply),
            Command::List { reply } => {
                let _ = reply.send(Ok(self.book.listed()));
            }
            Command::Show { name, reply } => {
                let found = self.book.manager().id_of(&name).and_then(|id| self.book.info(id));
                let _ = reply.send(found.ok_or_else(|| not_found(&name)));
            }
            Command::Hosts { reply } => {
                let _ = reply.send(Ok(self.host_infos()));
            }
            Command::Add { source, reply } => self.add(source, reply).await,
            Command::Remove { name, reply } => {
                let r = match self.book.remove(&name) {
                    Ok((id, info)) => {
                        info!(target: "manager", event = %name, id, "event {name} removed");
                        if let Some(sh) = &self.shared {
                            if let Err(e) = sh.remove(id).await {
                                warn!(target: "manager", "{e}");
                            }
                        }
                        let hosts: Vec<HostId> = info.hosts.iter().filter_map(|h| self.host_id(h)).collect();
                        for host in hosts {
                            self.send_control(host, &Control::Remove { event: id as u64 })
                                .await;
                        }
                        Ok(info)
                    }
                    Err(e) => Err(e),
                };
                let _ = reply.send(r);
            }
        }
    }

    /// The control API's export routes: the policies every host runs. The
    /// manager does not see the hosts' packets: `matched` is 0 here (each
    /// host's own API counts them).
    /// `GET /v1/flows` of a network-wide event: the hosts that carry it
    /// asked, their answers merged, on a task of its own ([`crate::flows`]).
    fn flows(&self, r: clarion_control::FlowsRequest, reply: Reply<serde_json::Value>) {
        let started = crate::flows::asked(&self.book, &r).and_then(|(asked, q)| {
            let query = self.flows.start(self.client.clone(), asked, q.top, q.by)?;
            Ok((query, q))
        });
        match started {
            Ok((query, q)) => {
                tokio::spawn(async move {
                    let merged = query.await;
                    let _ = reply.send(Ok(crate::flows::answer_json(&merged, &q, r)));
                });
            }
            Err(e) => drop(reply.send(Err(e))),
        }
    }

    async fn exports_command(&mut self, c: ExportsCommand) {
        match c {
            ExportsCommand::List { reply } => {
                let _ = reply.send(Ok(self.exports.list().iter().map(export_info).collect()));
            }
            ExportsCommand::Show { name, reply } => {
                let found = self.exports.show(&name).map(export_info);
                let _ = reply.send(found.ok_or_else(|| crate::exports::not_found(&name)));
            }
            ExportsCommand::Add { source, reply } => {
                let r = if self.shared.is_some() {
                    // Each manager's set is its own: agents registering with
                    // another would not get it.
                    Err(ControlError::Invalid(
                        "managers sharing the load (--shared) do not install export policies yet; run one manager to install them"
                            .into(),
                    ))
                } else {
                    self.add_exports(&source).await
                };
                let _ = reply.send(r.map(|v| v.iter().map(export_info).collect()));
            }
            ExportsCommand::Remove { name, reply } => {
                let r = self.remove_export(&name).await;
                let _ = reply.send(r.map(|p| export_info(&p)));
            }
        }
    }

    /// `POST /v1/events`. One manager: the request's events are parsed,
    /// checked, placed and split on a blocking task, apart from this loop
    /// (the costly part, O(N)); the loop gets them back ready and applies
    /// them ([`Service::apply`]). Meanwhile it goes on reading agents and
    /// answering the API. With others (`--shared`), in the loop, as ids are
    /// taken in the shared bucket one by one.
    async fn add(&mut self, source: String, reply: Reply<Vec<EventInfo>>) {
        if self.shared.is_some() {
            let r = self.add_shared_now(&source).await;
            let _ = reply.send(r);
            return;
        }
        let inventory = self.book.manager().inventory().clone();
        let back = self.prepared.0.clone();
        tokio::task::spawn_blocking(move || {
            let prepared = EventBook::prepare(&inventory, &source);
            // The loop is gone only when the manager stops: the API then says so.
            let _ = back.send((prepared, reply));
        });
    }

    /// A request's prepared events, to be installed (all or none): names
    /// and the most events checked again here (another request may have
    /// been applied meanwhile), ids set aside, then recorded
    /// [`APPLY_SLICE`] a turn ([`Service::apply_slice`]).
    fn apply(&mut self, prepared: Result<Prepared, ControlError>, reply: Reply<Vec<EventInfo>>) {
        match prepared.and_then(|p| self.book.begin_apply(p, OnDuplicate::Refuse)) {
            Ok(a) => self.applying = Some((a, reply)),
            Err(e) => drop(reply.send(Err(e))),
        }
    }

    /// Records a slice of the request being applied; once all are, stores
    /// them on a blocking task with the store's own connection (20,000
    /// rows: ~80 ms of SQLite, which would hold every `GET` and decision),
    /// and answers when stored ([`Service::stored`]).
    async fn apply_slice(&mut self) {
        let Some((mut a, reply)) = self.applying.take() else {
            return;
        };
        match self.book.apply_some(&mut a, APPLY_SLICE) {
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
            Ok(false) => {
                self.applying = Some((a, reply));
                return;
            }
            Ok(true) => {}
        }
        let (applied, rows) = a.finish();
        debug_assert!(applied.replaced.is_empty());
        self.storing += 1;
        match self.book.store_path() {
            Some(path) if !rows.is_empty() => {
                let back = self.stored.0.clone();
                tokio::task::spawn_blocking(move || {
                    let r = clarion_store::Store::open(&path)
                        .and_then(|s| s.put_all(&rows))
                        .map_err(|e| e.to_string());
                    let _ = back.send((r, applied, reply));
                });
            }
            _ => {
                // No store, or one in memory (tests): at once.
                let r = match self.book.store() {
                    Some(store) => store.put_all(&rows).map_err(|e| e.to_string()),
                    None => Ok(()),
                };
                self.stored(r, applied, reply).await;
            }
        }
    }

    /// A request's events stored (or not): answered, and their triggers
    /// queued for the hosts; if the store failed, taken out again (and
    /// out of any host that got them at its registration meanwhile).
    async fn stored(
        &mut self,
        r: Result<(), String>,
        applied: crate::book::Applied,
        reply: Reply<Vec<EventInfo>>,
    ) {
        self.storing = self.storing.saturating_sub(1);
        if let Err(e) = r {
            let placed: Vec<(EventId, Vec<HostId>)> = applied
                .added
                .iter()
                .map(|&id| (id, self.book.hosts_of(id)))
                .collect();
            self.book.undo(&applied.added);
            for (id, hosts) in placed {
                for h in hosts {
                    self.send_control(h, &Control::Remove { event: id as u64 }).await;
                }
            }
            let _ = reply.send(Err(ControlError::Failed(e)));
            return;
        }
        for &event in &applied.added {
            if self.book.manager().event(event).is_none() {
                // Removed while it was being stored: not kept either.
                if let Some(store) = self.book.store() {
                    let _ = store.remove(event as u64);
                }
                continue;
            }
            let hosts = self.book.hosts_of(event);
            self.outbox.push_back(Outgoing::Install { event, hosts });
        }
        log_added(&applied.infos);
        let _ = reply.send(Ok(applied.infos));
    }

    async fn add_shared_now(&mut self, source: &str) -> Result<Vec<EventInfo>, ControlError> {
        let added = self.add_shared(source, false).await?;
        let mut infos = Vec::new();
        for id in added {
            for host in self.book.hosts_of(id) {
                if let Some(t) = self.book.trigger(id, host) {
                    self.send_control(host, &Control::Install(t)).await;
                }
            }
            infos.extend(self.book.info(id));
        }
        log_added(&infos);
        Ok(infos)
    }

    fn host_infos(&self) -> Vec<HostInfo> {
        let inv = self.book.manager().inventory();
        inv.hosts()
            .iter()
            .zip(&self.hosts)
            .enumerate()
            .map(|(i, (h, st))| HostInfo {
                name: h.name.clone(),
                prefixes: h
                    .prefixes
                    .iter()
                    .map(|p| format!("{}/{}", p.addr, p.len))
                    .collect(),
                state: match st.last_seen {
                    None => "unknown".into(),
                    // It said goodbye: down at once.
                    Some(_) if st.gone == Some(Left::Bye) => "down".into(),
                    Some(t) if t.elapsed() <= HOST_SILENT => "up".into(),
                    Some(_) => "down".into(),
                },
                last_seen_ms: st.last_seen.map(|t| t.elapsed().as_millis() as u64),
                finished: st.finished,
                // Counted, not built: 20,000 triggers copied for each host
                // made this answer take longer than the decisions it waits for.
                triggers: self.book.manager().placed_count(i),
                satisfaction_reports: st.satisfied,
                polls_answered: st.answered,
                polls_missed: st.missed,
                refused: st.refused.iter().map(|(r, n)| (r.to_string(), *n)).collect(),
                health: st.health.clone(),
            })
            .collect()
    }
}

/// Ready at `at`; never without it.
/// The outcome of each poll of request `p`: the answer at its position,
/// if the request was answered.
fn poll_outcomes(
    p: Pending<Poll>,
    answers: Option<Vec<Answer>>,
    skipped: bool,
) -> impl Iterator<Item = PollOutcome> {
    let mut answers = answers.map(Vec::into_iter);
    p.polls.into_iter().map(move |poll| PollOutcome {
        poll,
        answer: answers.as_mut().and_then(Iterator::next),
        skipped,
    })
}

/// One subject per host of the inventory, by host id.
fn subjects(book: &EventBook, subject: fn(&str) -> String) -> Vec<async_nats::Subject> {
    let hosts = book.manager().inventory().hosts();
    hosts.iter().map(|h| subject(&h.name).into()).collect()
}

async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn export_info(p: &PolicyInfo) -> ExportInfo {
    ExportInfo {
        name: p.name.clone(),
        source: p.source.clone(),
        matched: 0,
        added: clarion_report::rfc3339(p.added_ns),
    }
}

fn not_found(name: &str) -> ControlError {
    ControlError::NotFound(format!("no network-wide event is named `{name}`"))
}

/// Events added (through the API, or the shared bucket), said once a request.
fn log_added(infos: &[EventInfo]) {
    match infos {
        [] => {}
        [one] => info!(target: "manager", event = %one.name, id = one.id, "event {} added", one.name),
        many => info!(target: "manager", events = many.len(),
            "{} events added ({} ... {})", many.len(), many[0].name, many[many.len() - 1].name),
    }
}

#[cfg(test)]
mod tests {
    //! The order of a host's report and its answer, end to end through the
    //! service and the manager's state machine (see the module's "Order").

    use super::*;
    use clarion_manager::{Inventory, Manager};
    use clarion_report::{Completeness, Origin, Window};
    use futures_util::Stream;

    const MS: u64 = 1_000_000;
    const SPIKE: &str = "event spike\n  filter dst_ip in 10.0.0.0/23\n  when sum(volume) > 300\n  per dst_ip/16\n  every 10ms\n  across hosts\n";

    /// A client of no server (none is needed): what the service publishes
    /// (its poll request, acknowledgements, the report) waits in it.
    async fn offline_client() -> async_nats::Client {
        async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect("127.0.0.1:1")
            .await
            .expect("a client that connects later")
    }

    /// Hosts a and b hold `spike`'s trigger (each its half: 150 bytes).
    async fn service() -> Service {
        let inv = Inventory::parse("a 10.0.0.0/24\nb 10.0.1.0/24\n").expect("inventory");
        let mut book = EventBook::new(Manager::new("m", inv), None);
        book.add(SPIKE, OnDuplicate::Refuse).expect("adds");
        Service::new(offline_client().await, "m", book, Duration::from_secs(2))
    }

    /// A recent window (the manager refuses windows far from its clock).
    fn window() -> Window {
        let start = (crate::wall_ns() / (10 * MS) - 10) * (10 * MS);
        Window {
            start_ns: start,
            end_ns: start + 10 * MS,
        }
    }

    fn message(subject: &str, payload: bytes::Bytes) -> async_nats::Message {
        async_nats::Message {
            subject: subject.into(),
            reply: None,
            length: payload.len(),
            payload,
            headers: None,
            status: None,
            description: None,
        }
    }

    /// `host`'s satisfaction report of `w`: `volume` bytes in `packets` packets.
    fn report(host: &str, w: Window, volume: f64, packets: u64, seq: u64) -> async_nats::Message {
        let r = Report {
            capture: None,
            missing_hosts: Box::default(),
            event: "spike".into(),
            window: w,
            group: group(),
            values: vec![("sum(volume)".into(), volume)].into(),
            origin: Origin {
                host: host.into(),
                worker: 0,
            },
            completeness: Completeness {
                packets,
                complete: true,
                ..Completeness::default()
            },
        };
        let up = Up::Satisfied {
            event: 0,
            report: Box::new(r),
            decided_ns: w.end_ns,
            seq,
        };
        message(&protocol::up(host), protocol::encode(&up))
    }

    fn group() -> GroupKey {
        GroupKey {
            dst_ip: Some(("10.0.0.0".parse().expect("addr"), 16)),
            ..GroupKey::default()
        }
    }

    type Sub = std::pin::Pin<Box<dyn Stream<Item = async_nats::Message> + Send>>;

    /// A subscription's channel, as async-nats' connection task fills it.
    fn subscription() -> (mpsc::UnboundedSender<async_nats::Message>, Sub) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        (
            tx,
            Box::pin(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))),
        )
    }

    /// a reports window W (volume 200 in 2 packets), so the manager polls
    /// b; then the connection receives b's own report of W (250 in 3) and,
    /// after it, b's answer to the poll. `read` hands them to the service
    /// in some order; returns the network-wide reports it made.
    async fn a_then_b(
        read: impl AsyncFnOnce(&mut Service, async_nats::Message, async_nats::Message, &mut dyn Decided),
    ) -> Vec<Report> {
        let mut s = service().await;
        let mut out = Vec::new();
        let mut on_report = |r: &Report| out.push(r.clone());
        let w = window();
        let a = Arrival::Agent(report("a", w, 200.0, 2, 1));
        s.arrived(a, &mut on_report).await;
        s.flush_polls().await;
        assert_eq!(s.requests.len(), 1, "b is polled");
        let answer = vec![Answer::Counted {
            values: Some(vec![250.0]),
            packets: 3,
        }];
        let b_report = report("b", w, 250.0, 3, 1);
        let b_answer = message(&s.requests.reply_subject(0), protocol::encode(&answer));
        read(&mut s, b_report, b_answer, &mut on_report).await;
        assert_eq!(s.requests.len(), 0, "answered");
        out
    }

    #[tokio::test]
    async fn an_answer_read_before_its_hosts_report_is_handled_after_it() {
        // The answer is taken from its subscription first, as the reverted
        // loop did when it read replies in a go of their own (or a reply
        // channel polled first): through the arrivals, the report still
        // comes first.
        let reports = a_then_b(async |s, b_report, b_answer, on_report| {
            let (agents_tx, agents) = subscription();
            let (replies_tx, replies) = subscription();
            let mut arrivals = Arrivals::new(agents, replies);
            agents_tx.send(b_report).expect("open");
            replies_tx.send(b_answer).expect("open");
            assert_eq!(arrivals.take_replies_in(), 1, "the answer is taken first");
            while let Some(a) = arrivals.next_now() {
                s.arrived(a, on_report).await;
            }
        })
        .await;
        assert_eq!(reports.len(), 1, "{reports:?}");
        let r = &reports[0];
        assert_eq!(r.values[..], [("sum(volume)".into(), 450.0)]);
        assert_eq!(
            (r.completeness.packets, r.completeness.complete),
            (5, true),
            "both hosts' reports counted: {r:?}"
        );
        assert!(r.missing_hosts.is_empty());
    }

    #[tokio::test]
    async fn an_answer_read_before_its_hosts_report_without_the_order_lacks_the_report() {
        // What the order prevents (the reverted loop's bug, found by
        // scenarios/agents.sh): handed the answer first, the service
        // decides with b's values but without b's report, which comes for a
        // window decided already.
        let reports = a_then_b(async |s, b_report, b_answer, on_report| {
            s.arrived(Arrival::Reply(b_answer), on_report).await;
            s.arrived(Arrival::Agent(b_report), on_report).await;
        })
        .await;
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert_eq!(reports[0].values[..], [("sum(volume)".into(), 450.0)]);
        assert_eq!(reports[0].completeness.packets, 2, "b's report is not counted");
    }

    /// A registration asked again because its reply was late is the
    /// same registration; one not marked so (the agent restarted) is a new one.
    #[tokio::test]
    async fn a_retried_registration_is_counted_once() {
        let mut s = service().await;
        let reg = |retry| Register {
            host: "a".into(),
            prefixes: Vec::new(),
            pages: true,
            from: None,
            answers_from_ns: None,
            retry,
        };
        for r in [reg(false), reg(true), reg(true)] {
            assert!(matches!(s.accept(0, &r), RegisterReply::Accepted { .. }));
        }
        assert_eq!(s.stats.registrations, 1);
        s.accept(0, &reg(false));
        assert_eq!(s.stats.registrations, 2, "the agent restarted");
        // A manager restarted meanwhile takes a retry as the host's first registration.
        let mut fresh = service().await;
        fresh.accept(0, &reg(true));
        assert_eq!(fresh.stats.registrations, 1);
    }
}
