//! Captures around events (`then capture`) where one thread sees every
//! frame and every report (a file replay): frames into a ring, and each
//! report of a capturing event opens its capture there and names its file
//! (`clarion-event-capture`'s `Captures`; files written on a thread of
//! their own).
//!
//! Reports come in window-end order, and a head may deliver them long
//! after it was handed their packets (worker threads), so the reports,
//! not the packets, are the ring's clock: it forgets only what no later
//! report can ask for.

use clarion_capture::RawPacket;
use clarion_engine::Report;
use clarion_event_capture::{CaptureStats, Captures};
use clarion_wire::PacketRecord;

use crate::{Frame, Stage};

/// See the module documentation.
#[derive(Debug)]
pub struct EventCaptures {
    captures: Captures,
}

impl EventCaptures {
    pub fn new(captures: Captures) -> EventCaptures {
        EventCaptures { captures }
    }

    /// Ends the captures (every open one written with what it has) and
    /// says what was written.
    pub fn finish_files(&mut self) -> CaptureStats {
        self.captures.finish()
    }
}

impl Stage for EventCaptures {
    fn takes_frames(&self) -> bool {
        true
    }

    #[inline]
    fn frame(&mut self, record: &PacketRecord, frame: &Frame<'_>) {
        let raw = RawPacket {
            index: 0,
            ts_ns: record.ts_ns,
            link: frame.link,
            data: frame.data,
            orig_len: frame.orig_len,
            byte_offset: 0,
        };
        self.captures.on_frame(record, &raw);
    }

    fn reports(&mut self, reports: &mut [Report]) {
        self.captures.on_reports(reports);
        if let Some(end) = reports.iter().map(|r| r.window.end_ns).max() {
            self.captures.processed(end);
        }
    }
}
