//! Export policies on the frames (Trident, `clarion-export`): every frame
//! that parses is classified and sent where its policies say (header
//! streams to a collector, VXLAN mirrors, pcapng files).
//!
//! The exporter belongs to the thread that drives the pipeline: no lock,
//! no copy, no channel on the packet path. Its sockets are non-blocking
//! and its files buffered, so a slow collector or disk costs counted
//! drops, never a wait. The driver's [`Stage::flush`] sends header
//! datagrams that have waited (a file: every 100 ms of packet time; a live
//! worker: every 10 ms of the wall clock, busy wire or quiet). Cost: one
//! classification per parsed frame (a hash lookup on a fast-path hit)
//! and, for a taken one, its destinations' work; an exporter without
//! policies (waiting for some at runtime) is offered nothing, at no cost.

use clarion_export::{ExportStats, Exporter};
use clarion_wire::PacketRecord;

use crate::{Error, Frame, Outputs, Stage};

/// An exporter on the frames. Its policies change between frames
/// ([`ExportPolicies::exporter_mut`] through
/// [`Pipeline::stage_mut`](crate::Pipeline::stage_mut)): from the next
/// frame on.
pub struct ExportPolicies {
    exporter: Exporter,
}

impl ExportPolicies {
    pub fn new(exporter: Exporter) -> ExportPolicies {
        ExportPolicies { exporter }
    }

    pub fn exporter(&self) -> &Exporter {
        &self.exporter
    }

    pub fn exporter_mut(&mut self) -> &mut Exporter {
        &mut self.exporter
    }
}

impl Stage for ExportPolicies {
    fn takes_frames(&self) -> bool {
        !self.exporter.is_empty()
    }

    #[inline]
    fn frame(&mut self, record: &PacketRecord, frame: &Frame<'_>) {
        self.exporter.offer(record, frame);
    }

    fn flush(&mut self, now_ns: u64) {
        self.exporter.tick(now_ns);
    }

    /// Sends the pending headers and closes the files; the counters go
    /// out unless no policy was ever installed (nothing to report).
    fn end(&mut self, out: &mut Outputs) -> Result<(), Error> {
        self.exporter.finish();
        let stats: ExportStats = self.exporter.stats();
        if !(stats.policies.is_empty() && stats.destinations.is_empty()) {
            out.exports = Some(stats);
        }
        Ok(())
    }
}
