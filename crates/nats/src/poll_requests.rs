//! The manager's poll requests in flight, read by its loop: no task,
//! oneshot channel or timer per request.
//!
//! # Design
//! Each request is published with a reply subject of its own under one
//! inbox prefix the manager subscribes to once (`<inbox>.<id>`); the loop
//! reads the replies from that one subscription, in the connection's
//! order with agents' messages ([`crate::arrivals`]: an agent's
//! satisfaction report of a window is handled before its answer to a poll
//! of it). Before, each request was `send_request` in a task of its own,
//! with a timeout and a watch on its host's departure: at a fleet's rate
//! (`clarion-lab fleet`, docs/performance.md) the tasks, channels and
//! timers were most of a poll's cost.
//!
//! # Invariants
//! - A request is in `pending` from its send until its answer, its
//!   timeout or its host's departure, whichever comes first; then it is
//!   handed out once ([`PollRequests::answered`], [`PollRequests::expired`],
//!   [`PollRequests::of_host`]) and a late reply for it is ignored.
//! - Deadlines are queued in send order: every request has the same
//!   timeout, so the queue is ordered by deadline. An entry whose request
//!   is no longer pending is dropped when it reaches the front.
//! - A request is timed out only if its reply had not reached the
//!   manager's connection by its deadline: one whose reply is received and
//!   waits its turn in the loop's order ("in hand") stays pending until it
//!   is read, however far behind the loop is.
//! - A request a server answered "no responders" (the agent's poll
//!   subscription is not there yet) is sent again after [`RETRY`], until
//!   its deadline, as `send_request` was retried.
//!
//! # Cost
//! Per request a publish, a hash-map insertion and removal and a queue
//! push and pop; for a reply still waiting in the loop's queue when a
//! deadline passes, one look-up to hold it ([`PollRequests::hold`]),
//! once, however many deadlines pass while it waits.

use std::collections::VecDeque;
use std::time::Duration;

use foldhash::{HashMap, HashMapExt};

use tokio::time::Instant;

use clarion_manager::HostId;

use crate::protocol::{self, Answer};

/// How long a request a server found no responder for waits before it is
/// sent again.
pub(crate) const RETRY: Duration = Duration::from_millis(50);

/// A request in flight: what it asked, of whom, and until when.
#[derive(Debug)]
pub(crate) struct Pending<P> {
    pub(crate) host: HostId,
    /// What the loop needs of each poll asked, in the request's order.
    pub(crate) polls: Vec<P>,
    subject: async_nats::Subject,
    payload: bytes::Bytes,
    deadline: Instant,
    /// Its reply is received and waits its turn in the loop's order
    /// ([`PollRequests::hold`]): not timed out.
    in_hand: bool,
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct PollRequests<P> {
    /// Reply subjects are `<prefix>.<id>`.
    prefix: String,
    next: u64,
    pending: HashMap<u64, Pending<P>>,
    deadlines: VecDeque<(Instant, u64)>,
    retries: VecDeque<(Instant, u64)>,
    timeout: Duration,
}

impl<P> PollRequests<P> {
    /// Requests answered on subjects under `prefix` (an inbox of the
    /// client's), given up after `timeout`.
    pub(crate) fn new(prefix: String, timeout: Duration) -> Self {
        PollRequests {
            prefix,
            next: 0,
            pending: HashMap::new(),
            deadlines: VecDeque::new(),
            retries: VecDeque::new(),
            timeout,
        }
    }

    /// The subject to subscribe to for every reply.
    pub(crate) fn replies_subject(&self) -> String {
        format!("{}.*", self.prefix)
    }

    /// The reply subject of request `id` (the requests are numbered from 0).
    #[cfg(test)]
    pub(crate) fn reply_subject(&self, id: u64) -> String {
        format!("{}.{id}", self.prefix)
    }

    /// Requests in flight.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    /// Asks `host` on `subject` with `payload` for `polls`. A request the
    /// client could not send is handed back, answered by nobody.
    pub(crate) async fn send(
        &mut self,
        client: &async_nats::Client,
        host: HostId,
        subject: async_nats::Subject,
        payload: bytes::Bytes,
        polls: Vec<P>,
    ) -> Result<(), Pending<P>> {
        let (id, pending) = self.prepare(host, subject, payload, polls);
        if publish(client, &self.prefix, id, &pending).await.is_err() {
            return Err(pending);
        }
        self.track(id, pending);
        Ok(())
    }

    /// A new request's id and its state, deadline from now.
    fn prepare(
        &mut self,
        host: HostId,
        subject: async_nats::Subject,
        payload: bytes::Bytes,
        polls: Vec<P>,
    ) -> (u64, Pending<P>) {
        let id = self.next;
        self.next += 1;
        let deadline = Instant::now() + self.timeout;
        let pending = Pending {
            host,
            polls,
            subject,
            payload,
            deadline,
            in_hand: false,
        };
        (id, pending)
    }

    /// Request `id`, sent, is in flight.
    fn track(&mut self, id: u64, pending: Pending<P>) {
        self.deadlines.push_back((pending.deadline, id));
        self.pending.insert(id, pending);
    }

    /// The request a message on the replies subject is for (pending or not).
    pub(crate) fn id_of(&self, m: &async_nats::Message) -> Option<u64> {
        let id = m
            .subject
            .as_str()
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix('.')?;
        id.parse().ok()
    }

    /// A reply received, waiting its turn in the loop's order: its request,
    /// if pending, is no longer timed out ([`PollRequests::expired`]).
    pub(crate) fn hold(&mut self, m: &async_nats::Message) {
        if let Some(p) = self.id_of(m).and_then(|id| self.pending.get_mut(&id)) {
            p.in_hand = true;
        }
    }

    /// The host a reply comes from, if its request is pending.
    pub(crate) fn host_of(&self, m: &async_nats::Message) -> Option<HostId> {
        self.pending.get(&self.id_of(m)?).map(|p| p.host)
    }

    /// A message on the replies subject: the request it answers, with its
    /// answers (`None` if they do not decode or are not one per poll);
    /// nothing for a late or unknown reply, or a "no responders" that is
    /// retried later.
    pub(crate) fn answered(&mut self, m: &async_nats::Message) -> Option<(Pending<P>, Option<Vec<Answer>>)> {
        let id = self.id_of(m)?;
        if m.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
            let p = self.pending.get_mut(&id)?;
            // Read: no longer in hand (its retry's reply may be, later).
            p.in_hand = false;
            let now = Instant::now();
            let at = now + RETRY;
            if at < p.deadline {
                self.retries.push_back((at, id));
            } else if now >= p.deadline {
                // Read after its deadline (it was in hand then): given up now.
                return self.pending.remove(&id).map(|p| (p, None));
            }
            // Else its deadline gives it up.
            return None;
        }
        let p = self.pending.remove(&id)?;
        let answers = protocol::decode::<Vec<Answer>>(&m.subject, &m.payload)
            .ok()
            .filter(|a| a.len() == p.polls.len());
        Some((p, answers))
    }

    /// When [`PollRequests::expired`] next has something to do: the
    /// earliest deadline or retry of a request still pending (entries of
    /// requests answered since are dropped here, so that an answered
    /// request wakes nobody).
    pub(crate) fn next_wake(&mut self) -> Option<Instant> {
        let pending = &self.pending;
        for q in [&mut self.deadlines, &mut self.retries] {
            while q.front().is_some_and(|(_, id)| !pending.contains_key(id)) {
                q.pop_front();
            }
        }
        let d = self.deadlines.front().map(|d| d.0);
        let r = self.retries.front().map(|r| r.0);
        match (d, r) {
            (Some(d), Some(r)) => Some(d.min(r)),
            (d, r) => d.or(r),
        }
    }

    /// Whether a request still pending is past its deadline at `now`.
    pub(crate) fn any_past_deadline(&self, now: Instant) -> bool {
        self.deadlines
            .iter()
            .take_while(|(at, _)| *at <= now)
            .any(|(_, id)| self.pending.contains_key(id))
    }

    /// Sends again the requests whose retry is due, and hands out those
    /// past their deadline (unanswered), except those held
    /// ([`PollRequests::hold`]: their reply is received and waits its
    /// turn; they stay pending).
    pub(crate) async fn expired(&mut self, client: &async_nats::Client) -> Vec<Pending<P>> {
        let now = Instant::now();
        for id in self.due_retries(now) {
            if let Some(p) = self.pending.get(&id) {
                // A failed resend is left to its deadline.
                let _ = publish(client, &self.prefix, id, p).await;
            }
        }
        self.timed_out(now)
    }

    /// The requests in flight whose retry is due at `now`.
    fn due_retries(&mut self, now: Instant) -> Vec<u64> {
        let mut out = Vec::new();
        while let Some(&(at, id)) = self.retries.front() {
            if at > now {
                break;
            }
            self.retries.pop_front();
            if self.pending.contains_key(&id) {
                out.push(id);
            }
        }
        out
    }

    /// The requests past their deadline at `now` and not held, no longer
    /// in flight.
    fn timed_out(&mut self, now: Instant) -> Vec<Pending<P>> {
        let mut out = Vec::new();
        while let Some(&(at, id)) = self.deadlines.front() {
            if at > now {
                break;
            }
            self.deadlines.pop_front();
            if self.pending.get(&id).is_some_and(|p| !p.in_hand) {
                out.extend(self.pending.remove(&id));
            }
        }
        out
    }

    /// Hands out every request of `host` in flight (it left: none will be answered).
    pub(crate) fn of_host(&mut self, host: HostId) -> Vec<Pending<P>> {
        let ids: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.host == host)
            .map(|(&id, _)| id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.pending.remove(&id))
            .collect()
    }
}

async fn publish<P>(
    client: &async_nats::Client,
    prefix: &str,
    id: u64,
    p: &Pending<P>,
) -> Result<(), async_nats::PublishError> {
    client
        .publish_with_reply(p.subject.clone(), format!("{prefix}.{id}"), p.payload.clone())
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(
        prefix: &str,
        id: u64,
        payload: &[u8],
        status: Option<async_nats::StatusCode>,
    ) -> async_nats::Message {
        async_nats::Message {
            subject: format!("{prefix}.{id}").into(),
            reply: None,
            payload: bytes::Bytes::copy_from_slice(payload),
            headers: None,
            status,
            description: None,
            length: payload.len(),
        }
    }

    /// A request of `polls` to `host`, as `send` records it once published.
    fn sent(r: &mut PollRequests<u32>, host: HostId, polls: Vec<u32>) -> u64 {
        let (id, p) = r.prepare(host, "clarion.host.h.poll".into(), bytes::Bytes::new(), polls);
        r.track(id, p);
        id
    }

    #[tokio::test(start_paused = true)]
    async fn answered_once_then_late_replies_and_strangers_are_ignored() {
        let mut r = PollRequests::new("_INBOX.m".into(), Duration::from_secs(2));
        assert_eq!(r.replies_subject(), "_INBOX.m.*");
        let a = sent(&mut r, 1, vec![10, 11]);
        let b = sent(&mut r, 2, vec![20]);
        assert_eq!(r.len(), 2);
        // Two answers for two polls.
        let answers = protocol::encode(&vec![Answer::Gone, Answer::Gone]);
        let (p, got) = r
            .answered(&reply("_INBOX.m", a, &answers, None))
            .expect("request a");
        assert_eq!((p.host, p.polls), (1, vec![10, 11]));
        assert_eq!(got.map(|g| g.len()), Some(2));
        assert!(
            r.answered(&reply("_INBOX.m", a, &answers, None)).is_none(),
            "answered once"
        );
        assert!(
            r.answered(&reply("_INBOX.m", 99, &answers, None)).is_none(),
            "unknown id"
        );
        // The wrong number of answers, or not JSON: answered by nobody.
        let (p, got) = r
            .answered(&reply("_INBOX.m", b, &answers, None))
            .expect("request b");
        assert_eq!((p.polls, got), (vec![20], None));
        assert_eq!(r.len(), 0);
        // Answered requests' deadlines wake nobody.
        assert_eq!(r.next_wake(), None);
        // Replies of another inbox are not this one's.
        assert_eq!(r.id_of(&reply("_INBOX.mx", a, b"", None)), None);
        assert_eq!(r.id_of(&reply("_INBOX.m", a, b"", None)), Some(a));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reply_in_hand_at_the_deadline_is_an_answer_not_a_timeout() {
        let mut r: PollRequests<u32> = PollRequests::new("_INBOX.m".into(), Duration::from_secs(1));
        let a = sent(&mut r, 1, vec![1]);
        let b = sent(&mut r, 2, vec![2]);
        let c = sent(&mut r, 3, vec![3]);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(r.any_past_deadline(Instant::now()));
        // The replies of a and c were received, not read yet: they stay
        // pending. A reply of a request given up or unknown holds nothing.
        for id in [a, c, 99] {
            r.hold(&reply("_INBOX.m", id, b"", None));
        }
        assert_eq!(expire_now(&mut r), vec![2]);
        assert_eq!(r.host_of(&reply("_INBOX.m", a, b"", None)), Some(1));
        assert_eq!(r.host_of(&reply("_INBOX.m", b, b"", None)), None, "given up");
        let answers = protocol::encode(&vec![Answer::Gone]);
        let (p, got) = r
            .answered(&reply("_INBOX.m", a, &answers, None))
            .expect("still pending");
        assert_eq!((p.polls, got.map(|g| g.len())), (vec![1], Some(1)));
        // c's reply was "no responders": past its deadline, given up as it is read.
        let none = Some(async_nats::StatusCode::NO_RESPONDERS);
        let (p, got) = r.answered(&reply("_INBOX.m", c, b"", none)).expect("given up");
        assert_eq!((p.polls, got), (vec![3], None));
        assert_eq!((r.len(), r.next_wake()), (0, None));
    }

    #[tokio::test(start_paused = true)]
    async fn deadlines_in_order_and_a_host_that_leaves() {
        let mut r: PollRequests<u32> = PollRequests::new("_INBOX.m".into(), Duration::from_secs(2));
        let a = sent(&mut r, 1, vec![1]);
        tokio::time::advance(Duration::from_millis(500)).await;
        let _b = sent(&mut r, 2, vec![2]);
        let _c = sent(&mut r, 1, vec![3]);
        assert_eq!(r.next_wake(), Some(Instant::now() + Duration::from_millis(1500)));
        // Host 1 leaves: its two requests, at once.
        let mut gone: Vec<u32> = r.of_host(1).into_iter().flat_map(|p| p.polls).collect();
        gone.sort_unstable();
        assert_eq!(gone, vec![1, 3]);
        assert!(
            r.answered(&reply("_INBOX.m", a, b"[]", None)).is_none(),
            "given up already"
        );
        // The rest time out at their deadline, not before.
        tokio::time::advance(Duration::from_millis(1400)).await;
        assert_eq!(expire_now(&mut r), Vec::<u32>::new());
        tokio::time::advance(Duration::from_millis(700)).await;
        assert_eq!(expire_now(&mut r), vec![2]);
        assert_eq!(r.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn no_responders_waits_then_its_deadline_gives_it_up() {
        let mut r: PollRequests<u32> = PollRequests::new("_INBOX.m".into(), Duration::from_millis(120));
        let a = sent(&mut r, 1, vec![1]);
        let none = Some(async_nats::StatusCode::NO_RESPONDERS);
        assert!(r.answered(&reply("_INBOX.m", a, b"", none)).is_none());
        assert_eq!(r.len(), 1, "still in flight");
        assert_eq!(
            r.next_wake(),
            Some(Instant::now() + RETRY),
            "retried before its deadline"
        );
        tokio::time::advance(RETRY).await;
        assert_eq!(r.due_retries(Instant::now()), vec![a]);
        tokio::time::advance(Duration::from_millis(50)).await;
        // Too close to its deadline to be retried again.
        assert!(r.answered(&reply("_INBOX.m", a, b"", none)).is_none());
        tokio::time::advance(Duration::from_millis(30)).await;
        assert_eq!(expire_now(&mut r), vec![1]);
    }

    fn expire_now(r: &mut PollRequests<u32>) -> Vec<u32> {
        r.timed_out(Instant::now())
            .into_iter()
            .flat_map(|p| p.polls)
            .collect()
    }
}
