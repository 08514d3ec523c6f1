//! An agent's satisfaction reports from the moment they are sent until
//! the manager acknowledges them (no I/O): what makes their delivery
//! at-least-once (see [`crate::protocol`]).
//!
//! Each report gets the next sequence number and is kept with the time it
//! was last sent; [`Outbox::due`] hands back, in sequence order, those sent
//! [`RESEND_AFTER`] ago or more, and marks them sent again. At most `cap`
//! are kept: beyond it the oldest is forgotten and counted, and
//! [`Outbox::take_dropped`] says which windows the manager will never hear
//! of, so that it reports the gap instead of keeping silent.
//!
//! Cost: a B-tree insert per report and removal per acknowledgement;
//! `due` walks the reports held (once a second, few unless the manager is
//! away).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::protocol::{Up, RESEND_AFTER};

/// Reports kept for acknowledgement at most (~50 MB of JSON at most, ~a
/// minute of a busy host's reports with the manager away).
pub const OUTBOX_CAP: usize = 1 << 17;

#[derive(Debug)]
struct Held {
    payload: Bytes,
    window_start_ns: u64,
    sent: Instant,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Outbox {
    next_seq: u64,
    held: BTreeMap<u64, Held>,
    cap: usize,
    resend_after: Duration,
    /// Forgotten and not yet told: how many, first and last window start.
    dropped: Option<(u64, u64, u64)>,
}

impl Outbox {
    pub fn new(cap: usize) -> Outbox {
        Outbox {
            next_seq: 1,
            held: BTreeMap::new(),
            cap: cap.max(1),
            resend_after: RESEND_AFTER,
            dropped: None,
        }
    }

    /// Keeps a report of the window starting at `window_start_ns`, made by
    /// `encode` with its sequence number; returns the payload to send now.
    pub fn add(&mut self, now: Instant, window_start_ns: u64, encode: impl FnOnce(u64) -> Bytes) -> Bytes {
        let seq = self.next_seq;
        self.next_seq += 1;
        let payload = encode(seq);
        if self.held.len() >= self.cap {
            if let Some((_, old)) = self.held.pop_first() {
                let w = old.window_start_ns;
                let d = self.dropped.get_or_insert((0, w, w));
                *d = (d.0 + 1, d.1.min(w), d.2.max(w));
            }
        }
        self.held.insert(
            seq,
            Held {
                payload: payload.clone(),
                window_start_ns,
                sent: now,
            },
        );
        payload
    }

    /// The manager acknowledged these (unknown ones are ignored: acknowledged twice).
    pub fn ack(&mut self, seqs: &[u64]) {
        for s in seqs {
            self.held.remove(s);
        }
    }

    /// The reports to send again now, oldest first.
    pub fn due(&mut self, now: Instant) -> Vec<Bytes> {
        let mut out = Vec::new();
        for h in self.held.values_mut() {
            if now.saturating_duration_since(h.sent) >= self.resend_after {
                h.sent = now;
                out.push(h.payload.clone());
            }
        }
        out
    }

    /// Reports held for acknowledgement.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// What was forgotten since last asked, as the message that tells the manager.
    pub fn take_dropped(&mut self) -> Option<Up> {
        let (reports, first_ns, last_ns) = self.dropped.take()?;
        Some(Up::Dropped {
            reports,
            first_ns,
            last_ns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(o: &mut Outbox, now: Instant, window: u64) -> u64 {
        let mut seq = 0;
        o.add(now, window, |s| {
            seq = s;
            Bytes::from(s.to_string())
        });
        seq
    }

    #[test]
    fn reports_come_back_until_acknowledged_oldest_first() {
        let t0 = Instant::now();
        let mut o = Outbox::new(10);
        let a = add(&mut o, t0, 100);
        let b = add(&mut o, t0, 200);
        assert_eq!((a, b), (1, 2));
        assert!(o.due(t0 + Duration::from_millis(1_999)).is_empty());
        let again = o.due(t0 + RESEND_AFTER);
        assert_eq!(again, vec![Bytes::from("1"), Bytes::from("2")]);
        // Sent again just now: not due again before another RESEND_AFTER.
        assert!(o.due(t0 + RESEND_AFTER + Duration::from_millis(1)).is_empty());
        o.ack(&[1, 7]);
        assert_eq!(o.due(t0 + 2 * RESEND_AFTER), vec![Bytes::from("2")]);
        o.ack(&[2]);
        assert!(o.is_empty() && o.take_dropped().is_none());
    }

    #[test]
    fn beyond_the_cap_the_oldest_are_forgotten_and_told() {
        let t0 = Instant::now();
        let mut o = Outbox::new(2);
        for w in [30, 10, 20, 40] {
            add(&mut o, t0, w);
        }
        assert_eq!(o.len(), 2);
        assert_eq!(
            o.take_dropped(),
            Some(Up::Dropped {
                reports: 2,
                first_ns: 10,
                last_ns: 30
            })
        );
        assert_eq!(o.take_dropped(), None, "told once");
        assert_eq!(o.due(t0 + RESEND_AFTER), vec![Bytes::from("3"), Bytes::from("4")]);
    }
}
