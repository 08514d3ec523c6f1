//! The manager's connection read in its order: agents' messages and the
//! replies to its poll requests, taken from their two subscriptions as one
//! queue.
//!
//! # Why
//! A host's answer to a poll of a window must be read after the host's own
//! satisfaction report of that window, when it sent one: read first, the
//! answer completes the decision, which then lacks the report's
//! completeness, and the report arrives for a window decided already (a
//! network-wide report unlike the reference's, found by
//! `scenarios/agents.sh`). The report is sent first, and nothing on its
//! way reorders the two:
//!
//! 1. An agent hands a window's reports to its link when its monitor
//!    closes the window, and answers a poll of a window only once it is
//!    closed ([`crate::desk::HostDesk`]); the link sends everything in the
//!    order handed over, on one connection ([`crate::agent`]).
//! 2. NATS delivers one publisher's messages in the order published
//!    ("source ordered delivery per publisher", its FAQ); the server
//!    writes every message for the manager's connection into that
//!    connection's one outbound buffer as it processes the publisher's
//!    input (nats-server's `client.deliverMsg`), whichever subscription
//!    it is for.
//! 3. The client (async-nats) reads that stream in one task and puts each
//!    message into its subscription's channel in the order read
//!    (`try_send`, nothing reordered; a full channel drops).
//!
//! Two channels lose that order between them; this rebuilds it:
//!
//! # Invariant
//! A reply is handed out only after every agent message that was in the
//! agents' channel when the reply was taken from its own, and so after
//! every agent message the connection read before the reply. Taking a
//! reply moves whatever waits in the agents' channel into the queue ahead
//! of it; the queue is handed out first, in order, so agents' messages
//! also keep their own order. (An agent message read *after* a reply may
//! be handed out before it: harmless, as nothing an agent sends after an
//! answer must come after it at the manager, but its goodbye, which gives
//! up its polls in flight: see `Service::left`.)
//!
//! An empty channel must be told from one the task may not read now: past
//! its cooperative budget, tokio's channels say "not ready" while holding
//! messages, which here would hand a reply out before the report ahead of
//! it. The channels are therefore read outside the budget
//! ([`tokio::task::unconstrained`]) whenever a "nothing there" decides the
//! order.
//!
//! # Cost
//! Per message a queue push and pop at most; nothing when the agents'
//! channel is empty as a reply is taken (the usual case).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::task::Poll;

use futures_util::{FutureExt, Stream, StreamExt};

/// The most messages [`Arrivals::take_replies_in`] holds in its queue (as
/// many as a subscription holds, `crate::connect`): a manager far behind
/// must not take its whole backlog into memory. Replies left in their
/// subscription past it are given up at their deadline, as those a full
/// subscription drops.
const QUEUE_MAX: usize = 1 << 17;

/// One message of the manager's connection, by the subscription it came on.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Arrival<M> {
    /// On the agents' subjects (`clarion.up.>`).
    Agent(M),
    /// A reply to one of the manager's poll requests.
    Reply(M),
}

/// See the module documentation. `S` is a subscription (a stream of
/// messages in the order the connection read them).
#[derive(Debug)]
pub(crate) struct Arrivals<S: Stream> {
    agents: S,
    replies: S,
    /// Taken from the subscriptions and not handed out yet, in order.
    queue: VecDeque<Arrival<S::Item>>,
    /// Messages ever put into `queue`. `queue[i]`'s number is
    /// `pushed - queue.len() + i`: a pop keeps every other message's
    /// number, a push numbers the new one `pushed`, and a removal from the
    /// middle ([`Arrivals::take_replies`]) only raises the numbers of
    /// those before it. So a message numbered at or above a mark still is
    /// after any change ([`Arrivals::queued_replies_since`]).
    pushed: u64,
}

impl<S: Stream + Unpin> Arrivals<S> {
    pub(crate) fn new(agents: S, replies: S) -> Self {
        Arrivals {
            agents,
            replies,
            queue: VecDeque::new(),
            pushed: 0,
        }
    }

    fn push(&mut self, a: Arrival<S::Item>) {
        self.queue.push_back(a);
        self.pushed += 1;
    }

    /// The next message, waiting for one; `None` once both subscriptions
    /// ended. Cancel-safe: a message taken is queued or returned within
    /// one poll.
    pub(crate) async fn next(&mut self) -> Option<Arrival<S::Item>> {
        if let Some(a) = self.queue.pop_front() {
            return Some(a);
        }
        poll_fn(|cx| {
            let agents = self.agents.poll_next_unpin(cx);
            if let Poll::Ready(Some(m)) = agents {
                return Poll::Ready(Some(Arrival::Agent(m)));
            }
            match self.replies.poll_next_unpin(cx) {
                Poll::Ready(Some(m)) => Poll::Ready(Some(self.behind(m))),
                Poll::Ready(None) if agents.is_ready() => Poll::Ready(None),
                _ => Poll::Pending,
            }
        })
        .await
    }

    /// The next message received already, without waiting.
    pub(crate) fn next_now(&mut self) -> Option<Arrival<S::Item>> {
        if let Some(a) = self.queue.pop_front() {
            return Some(a);
        }
        if let Some(m) = now(&mut self.agents) {
            return Some(Arrival::Agent(m));
        }
        let reply = now(&mut self.replies)?;
        Some(self.behind(reply))
    }

    /// A reply just taken, in its place: after every agent message
    /// waiting (the invariant); the first of those, if any.
    fn behind(&mut self, reply: S::Item) -> Arrival<S::Item> {
        self.queue_agents();
        match self.queue.pop_front() {
            None => Arrival::Reply(reply),
            Some(first) => {
                self.push(Arrival::Reply(reply));
                first
            }
        }
    }

    fn queue_agents(&mut self) {
        while let Some(m) = now(&mut self.agents) {
            self.push(Arrival::Agent(m));
        }
    }

    /// Takes every reply received so far into the queue (each behind the
    /// agent messages waiting when it was taken), so that a request given
    /// up at its deadline is one whose reply the connection had not
    /// received; up to [`QUEUE_MAX`] messages queued. Returns how many
    /// were taken.
    pub(crate) fn take_replies_in(&mut self) -> usize {
        let mut n = 0;
        while self.queue.len() < QUEUE_MAX {
            let Some(reply) = now(&mut self.replies) else {
                break;
            };
            self.queue_agents();
            self.push(Arrival::Reply(reply));
            n += 1;
        }
        n
    }

    /// The replies taken and not handed out yet that were queued at or
    /// after `mark` (0: all of them), and the mark of what is queued next.
    /// A caller that keeps the mark sees each queued reply once (or again,
    /// after a [`Arrivals::take_replies`]), never misses one, and pays for
    /// the new ones only, not for the whole queue: a manager far behind
    /// holds up to [`QUEUE_MAX`] messages, and scanned them all at every
    /// poll deadline (20 % of its CPU at 1,000 hosts and 300 events, in
    /// `clarion-lab fleet`).
    pub(crate) fn queued_replies_since(&self, mark: u64) -> (impl Iterator<Item = &S::Item>, u64) {
        let first = self.pushed - self.queue.len() as u64;
        let skip = usize::try_from(mark.saturating_sub(first)).unwrap_or(usize::MAX);
        let replies = self.queue.iter().skip(skip).filter_map(|a| match a {
            Arrival::Reply(m) => Some(m),
            Arrival::Agent(_) => None,
        });
        (replies, self.pushed)
    }

    /// Takes out of the order every reply received so far for which
    /// `mine` holds. Only for a host whose messages before them have all
    /// been handed out: its goodbye, handed out now (its reports precede
    /// its goodbye on the agents' subscription, and so were handed out).
    pub(crate) fn take_replies(&mut self, mut mine: impl FnMut(&S::Item) -> bool) -> Vec<S::Item> {
        self.take_replies_in();
        let mut out = Vec::new();
        let mut rest = VecDeque::with_capacity(self.queue.len());
        for a in self.queue.drain(..) {
            match a {
                Arrival::Reply(m) if mine(&m) => out.push(m),
                other => rest.push_back(other),
            }
        }
        self.queue = rest;
        out
    }
}

/// A message `s` holds now, if any: read outside the task's cooperative
/// budget, so that `None` means the channel is empty (or ended), not that
/// this task has read enough for now (see the module documentation).
fn now<S: Stream + Unpin>(s: &mut S) -> Option<S::Item> {
    tokio::task::unconstrained(s.next()).now_or_never().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    /// A subscription's channel, as async-nats' connection task fills it.
    type Sub = std::pin::Pin<Box<dyn Stream<Item = &'static str> + Send>>;

    fn subscription() -> (mpsc::UnboundedSender<&'static str>, Sub) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let s = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
        (tx, Box::pin(s))
    }

    fn setup() -> (
        mpsc::UnboundedSender<&'static str>,
        mpsc::UnboundedSender<&'static str>,
        Arrivals<Sub>,
    ) {
        let (agents, a) = subscription();
        let (replies, r) = subscription();
        (agents, replies, Arrivals::new(a, r))
    }

    use Arrival::{Agent, Reply};

    fn queued_since(arr: &Arrivals<Sub>, mark: u64) -> (Vec<&'static str>, u64) {
        let (replies, next) = arr.queued_replies_since(mark);
        (replies.copied().collect(), next)
    }

    #[tokio::test]
    async fn a_mark_sees_each_queued_reply_once_whatever_leaves_the_queue() {
        let (agents, replies, mut arr) = setup();
        agents.send("report a").expect("open");
        replies.send("answer a").expect("open");
        replies.send("answer b").expect("open");
        assert_eq!(arr.take_replies_in(), 2);
        let (seen, mark) = queued_since(&arr, 0);
        assert_eq!(seen, vec!["answer a", "answer b"]);
        // Nothing new: nothing seen again.
        assert_eq!(queued_since(&arr, mark), (vec![], mark));
        // Messages handed out, one taken from the middle, new ones queued:
        // only the new ones are seen.
        assert_eq!(arr.next_now(), Some(Agent("report a")));
        agents.send("bye b").expect("open");
        replies.send("answer c").expect("open");
        replies.send("answer d").expect("open");
        assert_eq!(arr.take_replies(|m| m.ends_with(" b")), vec!["answer b"]);
        let (seen, mark) = queued_since(&arr, mark);
        assert_eq!(seen, vec!["answer c", "answer d"]);
        assert_eq!(arr.next_now(), Some(Reply("answer a")));
        agents.send("report e").expect("open");
        replies.send("answer e").expect("open");
        assert_eq!(arr.take_replies_in(), 1);
        assert_eq!(queued_since(&arr, mark).0, vec!["answer e"]);
        // Everything still queued, from the start.
        assert_eq!(queued_since(&arr, 0).0, vec!["answer c", "answer d", "answer e"]);
    }

    #[tokio::test]
    async fn a_reply_comes_after_the_agent_messages_read_before_it() {
        let (agents, replies, mut arr) = setup();
        // The connection read: a report, the same host's answer, another report.
        agents.send("report b").expect("open");
        replies.send("answer b").expect("open");
        agents.send("report c").expect("open");
        // Whatever is asked first, the answer comes after the report read before it.
        assert_eq!(arr.next_now(), Some(Agent("report b")));
        assert_eq!(arr.next_now(), Some(Agent("report c")));
        assert_eq!(arr.next_now(), Some(Reply("answer b")));
        assert_eq!(arr.next_now(), None);
    }

    #[tokio::test]
    async fn taking_a_reply_first_still_hands_out_the_reports_ahead_of_it() {
        let (agents, replies, mut arr) = setup();
        replies.send("answer a").expect("open");
        assert_eq!(arr.next().await, Some(Reply("answer a")), "nothing ahead of it");
        // A reply taken while reports wait (what the reverted loop did
        // when it read replies in a go of their own): they come first.
        agents.send("report b").expect("open");
        agents.send("report c").expect("open");
        replies.send("answer b").expect("open");
        assert_eq!(arr.take_replies_in(), 1);
        assert_eq!(queued_since(&arr, 0), (vec!["answer b"], 3));
        assert_eq!(arr.next().await, Some(Agent("report b")));
        agents.send("report d").expect("open");
        assert_eq!(arr.next().await, Some(Agent("report c")));
        assert_eq!(arr.next().await, Some(Reply("answer b")));
        assert_eq!(arr.next().await, Some(Agent("report d")));
    }

    #[tokio::test]
    async fn a_task_past_its_budget_still_sees_the_report_ahead_of_an_answer() {
        let (agents, replies, mut arr) = setup();
        agents.send("report b").expect("open");
        replies.send("answer b").expect("open");
        // Spend the task's budget on another channel (tokio's is 128 reads a poll).
        let (burst, mut other) = mpsc::unbounded_channel();
        for _ in 0..300 {
            burst.send(()).expect("open");
        }
        let mut read = 0;
        while let Some(Some(())) = other.recv().now_or_never() {
            read += 1;
        }
        assert!(read < 300, "the budget is spent (else this test shows nothing)");
        // A budgeted read of the agents' channel now says "not ready", as
        // one of the replies' would; the order is still kept.
        assert_eq!(StreamExt::next(&mut arr.agents).now_or_never(), None);
        assert_eq!(arr.take_replies_in(), 1);
        assert_eq!(arr.next_now(), Some(Agent("report b")));
        assert_eq!(arr.next_now(), Some(Reply("answer b")));
        assert_eq!(arr.next_now(), None);
    }

    #[tokio::test]
    async fn a_host_leaving_takes_its_answers_out_of_the_order() {
        let (agents, replies, mut arr) = setup();
        // The connection read: a's report, b's and a's answers, a's goodbye.
        agents.send("report a").expect("open");
        replies.send("answer b").expect("open");
        replies.send("answer a").expect("open");
        agents.send("bye a").expect("open");
        agents.send("report c").expect("open");
        assert_eq!(arr.next_now(), Some(Agent("report a")));
        // Agents' messages first: the goodbye comes before the answers.
        assert_eq!(arr.next_now(), Some(Agent("bye a")));
        // Everything a sent before its goodbye was handed out: its answer
        // may be taken out of turn.
        let mine = arr.take_replies(|m| m.ends_with(" a"));
        assert_eq!(mine, vec!["answer a"]);
        assert_eq!(arr.next_now(), Some(Agent("report c")));
        assert_eq!(arr.next_now(), Some(Reply("answer b")));
        assert_eq!(arr.next_now(), None);
    }

    #[tokio::test]
    async fn ends_when_both_subscriptions_end() {
        let (agents, replies, mut arr) = setup();
        replies.send("answer").expect("open");
        drop(replies);
        assert_eq!(arr.next().await, Some(Reply("answer")));
        agents.send("last").expect("open");
        drop(agents);
        assert_eq!(arr.next().await, Some(Agent("last")));
        assert_eq!(arr.next().await, None);
    }
}
