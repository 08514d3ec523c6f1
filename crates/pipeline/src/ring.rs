//! Captures around events where frames and reports meet on different
//! threads (a live host): each worker keeps a ring of its recent frames,
//! the host, holding the merged report, asks every worker to open the
//! capture on its ring ([`CaptureRequest`], served between batches), and
//! the worker sends each capture's frames ([`Outputs::capture_parts`])
//! once its clock passes the span's end. As it ends, the worker hands
//! the ring itself over ([`Outputs::capture_ring`]), and the host serves
//! the last reports' captures from it.
//!
//! Before an event that captures is installed the ring is kept for no
//! time and skips frames at no cost; an install that captures tells it
//! how long to keep them ([`CaptureRequest::Keep`], before the event
//! itself is installed). Cost: a frame copy per parsed packet, one more
//! per open capture taking it; memory: the ring's bytes per worker.

use std::sync::mpsc::{Receiver, Sender};

use clarion_event_capture::{RingJobs, Selection, StoredFrame};
use clarion_wire::PacketRecord;

use crate::{Error, Frame, Outputs, Stage};

/// What the host asks of a worker's ring of recent frames.
#[derive(Debug)]
pub enum CaptureRequest {
    /// A capture around an event to open on the ring: `reply` gets where
    /// the ring's frames of it start (see [`RingJobs::open`]); its frames
    /// come back as [`Outputs::capture_parts`] of the same `id`.
    Open {
        id: u64,
        sel: Selection,
        reply: Sender<u64>,
    },
    /// Keep frames at least this long behind the monitor's clock: an event
    /// that captures was installed (a ring kept for no time is not fed).
    Keep(u64),
}

/// A worker's ring of recent frames and where capture requests come from.
#[derive(Debug)]
pub struct CaptureRing {
    /// `None` once handed over.
    jobs: Option<RingJobs>,
    requests: Receiver<CaptureRequest>,
}

impl CaptureRing {
    pub fn new(jobs: RingJobs, requests: Receiver<CaptureRequest>) -> CaptureRing {
        CaptureRing {
            jobs: Some(jobs),
            requests,
        }
    }

    /// Does what the host asked, in the order asked.
    fn serve_requests(&mut self) {
        let Some(jobs) = &mut self.jobs else { return };
        while let Ok(req) = self.requests.try_recv() {
            match req {
                CaptureRequest::Open { id, sel, reply } => {
                    let from = jobs.open(id, sel);
                    // The host stops waiting after a while: it may be gone.
                    let _ = reply.send(from);
                }
                CaptureRequest::Keep(keep_ns) => jobs.keep_at_least(keep_ns),
            }
        }
    }
}

impl Stage for CaptureRing {
    fn takes_frames(&self) -> bool {
        self.jobs.is_some()
    }

    #[inline]
    fn frame(&mut self, record: &PacketRecord, frame: &Frame<'_>) {
        let Some(jobs) = &mut self.jobs else { return };
        if jobs.wants_frames() {
            jobs.push(StoredFrame {
                ts_ns: record.ts_ns,
                link: frame.link,
                orig_len: frame.orig_len,
                key: record.key,
                data: frame.data.into(),
            });
        } else {
            jobs.skip(record.ts_ns);
        }
    }

    /// Opens the captures asked for, lets the ring forget what the clock
    /// has left behind, and outputs the captures it ended.
    fn service(&mut self, clock_ns: u64, out: &mut Outputs) {
        self.serve_requests();
        let Some(jobs) = &mut self.jobs else { return };
        jobs.processed(clock_ns);
        jobs.advance(clock_ns);
        jobs.take_due(&mut out.capture_parts);
    }

    /// Hands the ring and its open captures over, with the captures asked
    /// for meanwhile opened on it.
    fn end(&mut self, out: &mut Outputs) -> Result<(), Error> {
        self.serve_requests();
        out.capture_ring = self.jobs.take().map(Box::new);
        Ok(())
    }
}
