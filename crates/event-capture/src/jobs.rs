//! A ring of recent frames with the captures open on it: what a file
//! replay's host and each live worker both run.
//!
//! A capture opens with a [`Selection`] and an id: it takes the ring's
//! frames it selects at once (from where the ring still holds every
//! frame, [`FrameRing::covers_from`], which it returns), then each frame
//! pushed that it selects. Once time reaches its end it is handed out as
//! a [`Part`] ([`RingJobs::take_due`]). Time is the newest frame's, or a
//! clock the caller advances on a quiet wire ([`RingJobs::advance`]).
//!
//! Invariant: a part holds exactly the frames of its selection pushed
//! (or in the ring when it opened) with times in `[from_ns, to_ns)`, in
//! the order pushed. Cost: per frame, one copy into the ring and one more
//! per open capture taking it; opening walks the ring once.

use crate::ring::{FrameRing, StoredFrame};
use crate::select::Selection;

/// A capture's frames, handed out when its span has passed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub id: u64,
    /// Where the frames start: the selection's start, or later when the
    /// ring no longer held it.
    pub from_ns: u64,
    pub frames: Vec<StoredFrame>,
}

#[derive(Debug)]
struct Open {
    id: u64,
    sel: Selection,
    frames: Vec<StoredFrame>,
}

/// See the module doc.
#[derive(Debug)]
pub struct RingJobs {
    ring: FrameRing,
    open: Vec<Open>,
    now_ns: u64,
}

impl RingJobs {
    /// A ring of at most `ring_bytes`, keeping `keep_ns` before what was processed.
    pub fn new(ring_bytes: usize, keep_ns: u64) -> RingJobs {
        RingJobs {
            ring: FrameRing::new(ring_bytes, keep_ns),
            open: Vec::new(),
            now_ns: 0,
        }
    }

    /// Whether a frame is wanted: the ring keeps frames (an installed event
    /// captures) or a capture is open. If not, [`RingJobs::skip`] it
    /// rather than copying it for [`RingJobs::push`].
    pub fn wants_frames(&self) -> bool {
        self.ring.keeps() || !self.open.is_empty()
    }

    /// A frame at `ts_ns` not wanted: time moves on, and the ring covers
    /// only what comes after it.
    pub fn skip(&mut self, ts_ns: u64) {
        self.now_ns = self.now_ns.max(ts_ns);
        self.ring.skip(ts_ns);
    }

    /// Keeps frames at least `keep_ns` before what was processed (an event
    /// that captures was installed while frames flow).
    pub fn keep_at_least(&mut self, keep_ns: u64) {
        self.ring.keep_at_least(keep_ns);
    }

    /// A frame: into the captures it belongs to, and the ring.
    pub fn push(&mut self, frame: StoredFrame) {
        self.now_ns = self.now_ns.max(frame.ts_ns);
        for job in &mut self.open {
            if job.sel.takes(frame.ts_ns, &frame.key) {
                job.frames.push(frame.clone());
            }
        }
        self.ring.push(frame);
    }

    /// Opens capture `id` on the ring; returns where its frames start.
    pub fn open(&mut self, id: u64, mut sel: Selection) -> u64 {
        sel.from_ns = sel.from_ns.max(self.ring.covers_from());
        let frames = self
            .ring
            .iter()
            .filter(|f| sel.takes(f.ts_ns, &f.key))
            .cloned()
            .collect();
        let from = sel.from_ns;
        self.open.push(Open { id, sel, frames });
        from
    }

    /// See [`FrameRing::processed`].
    pub fn processed(&mut self, ts_ns: u64) {
        self.ring.processed(ts_ns);
    }

    /// Time has reached `now_ns` without a frame (a quiet wire).
    pub fn advance(&mut self, now_ns: u64) {
        self.now_ns = self.now_ns.max(now_ns);
    }

    /// The captures whose span time has passed, into `out`.
    pub fn take_due(&mut self, out: &mut Vec<Part>) {
        let now = self.now_ns;
        self.take_where(out, |o| o.sel.to_ns <= now);
    }

    /// Every open capture, with what it has, into `out` (the end of input).
    pub fn take_all(&mut self, out: &mut Vec<Part>) {
        self.take_where(out, |_| true);
    }

    fn take_where(&mut self, out: &mut Vec<Part>, due: impl Fn(&Open) -> bool) {
        let mut i = 0;
        while i < self.open.len() {
            if due(&self.open[i]) {
                let o = self.open.remove(i);
                out.push(Part {
                    id: o.id,
                    from_ns: o.sel.from_ns,
                    frames: o.frames,
                });
            } else {
                i += 1;
            }
        }
    }

    /// Captures open now.
    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    /// The ring's bytes held.
    pub fn ring_bytes(&self) -> usize {
        self.ring.bytes()
    }
}
