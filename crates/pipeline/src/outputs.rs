//! What a pipeline makes, in one place.

use clarion_engine::{Partials, Report};
use clarion_event_capture::{Part, RingJobs};
use clarion_export::ExportStats;
use clarion_gpv::Gpv;
use clarion_records::FlowRecord;

/// Everything a pipeline's stages make, each kind in the order made. The
/// driver takes it away between calls: a file replay hands the reports to
/// its driver and the records and GPVs to its [`Sinks`](crate::Sinks); a
/// live worker sends the whole of it to its host's thread.
#[derive(Debug, Default)]
pub struct Outputs {
    /// Reports of closed windows (a monitor's, or merged workers').
    pub reports: Vec<Report>,
    /// Flow records the flow meter ended.
    pub records: Vec<FlowRecord>,
    /// GPVs the GPV cache evicted.
    pub gpvs: Vec<Gpv>,
    /// A merging monitor's statistics of each finished sweep, for the
    /// host's merger (a live worker's; `MonitorConfig::merge_output`).
    pub partials: Vec<Partials>,
    /// Captures around events whose span has passed, from a ring of
    /// recent frames (a live worker's).
    pub capture_parts: Vec<Part>,
    /// The ring of recent frames itself, with the captures still open on
    /// it, handed over at the end (a live worker's).
    pub capture_ring: Option<Box<RingJobs>>,
    /// The export policies' counters, at the end (when any was installed).
    pub exports: Option<ExportStats>,
}

impl Outputs {
    /// Whether there is nothing to take.
    pub fn is_empty(&self) -> bool {
        self.reports.is_empty()
            && self.records.is_empty()
            && self.gpvs.is_empty()
            && self.partials.is_empty()
            && self.capture_parts.is_empty()
            && self.capture_ring.is_none()
            && self.exports.is_none()
    }
}
