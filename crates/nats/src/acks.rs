//! The manager's acknowledgements, held a little and sent together (no I/O).
//!
//! An acknowledgement is not urgent: it only lets the agent forget a
//! satisfaction report it would otherwise send again after
//! [`RESEND_AFTER`] (2 s). Sent at each decision, it was one message per
//! host and decision, about one for every satisfaction report under a
//! fleet's load (a host's reports are decided at different times): a
//! seventh of the manager's messages (docs/performance.md, Fleet scale).
//! Held for [`ACK_HOLD`] from the first one a host has waiting, a host's
//! acknowledgements go in one [`Control::Ack`](crate::protocol::Control)
//! (a host reporting 17 times a second: about four in one message).
//!
//! [`AckHold::hold`] takes one; [`AckHold::due`] hands back, in the order
//! their first acknowledgement was held, the hosts whose first is
//! `ACK_HOLD` old or more, with every sequence number each has waiting, in
//! the order held; [`AckHold::all`] hands back every one (at shut-down).
//! Nothing is handed back twice or lost.
//!
//! Cost: a push per acknowledgement, and a queue entry per host and batch.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use clarion_manager::HostId;

use crate::protocol::RESEND_AFTER;

/// How long a host's first waiting acknowledgement is held before its
/// batch is sent: well under [`RESEND_AFTER`], so that a report decided
/// at once is never sent again (the service looks every 50 ms: an
/// acknowledgement leaves 250 to 300 ms after its decision).
pub const ACK_HOLD: Duration = Duration::from_millis(250);

const _: () = assert!(ACK_HOLD.as_millis() * 4 <= RESEND_AFTER.as_millis());

/// See the module documentation.
#[derive(Debug)]
pub struct AckHold {
    hold: Duration,
    /// Per host: the sequence numbers waiting, in the order held.
    waiting: Vec<Vec<u64>>,
    /// Hosts with acknowledgements waiting, each once, by when the first waited.
    queue: VecDeque<(Instant, HostId)>,
}

impl AckHold {
    /// For `hosts` hosts (ids `0..hosts`), each batch held for `hold`.
    pub fn new(hosts: usize, hold: Duration) -> AckHold {
        AckHold {
            hold,
            waiting: vec![Vec::new(); hosts],
            queue: VecDeque::new(),
        }
    }

    /// `host`'s report `seq` is to be acknowledged. A host outside the
    /// inventory's ids is ignored (the service hands only its own ids).
    pub fn hold(&mut self, now: Instant, host: HostId, seq: u64) {
        let Some(w) = self.waiting.get_mut(host) else {
            return;
        };
        if w.is_empty() {
            self.queue.push_back((now, host));
        }
        w.push(seq);
    }

    /// The hosts whose first waiting acknowledgement was held `hold` ago or
    /// more, each with all it has waiting.
    pub fn due(&mut self, now: Instant) -> Vec<(HostId, Vec<u64>)> {
        let mut out = Vec::new();
        while let Some(&(since, host)) = self.queue.front() {
            if now.saturating_duration_since(since) < self.hold {
                break;
            }
            self.queue.pop_front();
            out.push((host, std::mem::take(&mut self.waiting[host])));
        }
        out
    }

    /// Every host's waiting acknowledgements, now.
    pub fn all(&mut self) -> Vec<(HostId, Vec<u64>)> {
        let queue = std::mem::take(&mut self.queue);
        queue
            .into_iter()
            .map(|(_, host)| (host, std::mem::take(&mut self.waiting[host])))
            .collect()
    }

    /// How many acknowledgements wait.
    pub fn len(&self) -> usize {
        self.queue.iter().map(|&(_, h)| self.waiting[h].len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_hosts_acknowledgements_leave_together_once_the_first_is_old_enough() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut a = AckHold::new(3, ms(250));
        a.hold(t0, 2, 7);
        a.hold(t0 + ms(100), 0, 1);
        a.hold(t0 + ms(200), 2, 9);
        assert_eq!(a.len(), 3);
        assert!(
            a.due(t0 + ms(249)).is_empty(),
            "held until the first is 250 ms old"
        );
        assert_eq!(a.due(t0 + ms(250)), vec![(2, vec![7, 9])]);
        assert_eq!(a.due(t0 + ms(300)), vec![]);
        // Host 2 again: a new batch, held from now.
        a.hold(t0 + ms(300), 2, 11);
        assert_eq!(a.due(t0 + ms(400)), vec![(0, vec![1])]);
        assert_eq!(a.all(), vec![(2, vec![11])]);
        assert!(a.is_empty());
        a.hold(t0, 3, 1);
        assert!(a.is_empty(), "a host outside the inventory is ignored");
    }

    proptest! {
        /// Against the obvious reference: every acknowledgement held comes
        /// out exactly once, in each host's order, in a batch that left no
        /// sooner than `hold` after the batch's first and, looking at every
        /// step, no later than the first look `hold` after it.
        #[test]
        fn every_acknowledgement_leaves_once_in_order_and_in_time(
            steps in proptest::collection::vec((0usize..5, 0u64..40, any::<bool>()), 0..200),
        ) {
            let hold = Duration::from_millis(50);
            let t0 = Instant::now();
            let mut a = AckHold::new(5, hold);
            let mut now = t0;
            let mut seq = 0u64;
            let mut sent: Vec<Vec<u64>> = vec![Vec::new(); 5];
            let mut held: Vec<Vec<u64>> = vec![Vec::new(); 5];
            let mut first: Vec<Option<Instant>> = vec![None; 5];
            for (host, advance, look) in steps {
                now += Duration::from_millis(advance);
                seq += 1;
                a.hold(now, host, seq);
                held[host].push(seq);
                first[host].get_or_insert(now);
                if look {
                    let out = a.due(now);
                    for (h, seqs) in out {
                        let f = first[h].take().expect("a batch of a host with one waiting");
                        prop_assert!(now.duration_since(f) >= hold);
                        prop_assert!(!seqs.is_empty());
                        sent[h].extend(seqs);
                    }
                    for (h, f) in first.iter().enumerate() {
                        prop_assert!(f.is_none_or(|f| now.duration_since(f) < hold), "host {h} overdue");
                    }
                }
            }
            prop_assert_eq!(a.len(), held.iter().zip(&sent).map(|(h, s)| h.len() - s.len()).sum::<usize>());
            for (h, seqs) in a.all() {
                sent[h].extend(seqs);
            }
            prop_assert!(a.is_empty());
            prop_assert_eq!(sent, held);
        }
    }
}
