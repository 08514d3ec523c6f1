//! The chain: a head (the event stage) and the stages beside it, each fed
//! the same parsed packets, parsed once, on the thread that drives it.
//!
//! ```text
//!  frame ─► the stages that take frames now, in the registry's order
//!  batch ─► head (Monitor | Workers | NetworkStage | Counting) ─► reports ─► every stage's `reports`
//!        ─► every stage beside it, in the registry's order ─► records, GPVs, ...
//!  all of it ─► Outputs ─► the driver (records and GPVs first to the Sinks, when delivered here)
//! ```

use std::any::Any;

use clarion_engine::{Counters, Health, Monitor, Report, Unparsed};
use clarion_wire::PacketRecord;

use crate::{Error, Frame, Outputs, Sinks, Stage, Stages};

/// A stage beside the head, as the pipeline keeps it: sent with the
/// pipeline to a live worker's thread, and found again by its type.
pub(crate) trait Beside: Stage + Send {
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Stage + Send + 'static> Beside for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// An event stage with the stages beside it (see the crate documentation).
pub struct Pipeline<E> {
    head: E,
    stages: Vec<Box<dyn Beside>>,
    /// Indices in `stages` of those that take frames now.
    framed: Vec<usize>,
    /// Where records and GPVs go as they are made, when the driver's
    /// thread is also the sinks' (a file replay).
    sinks: Option<Sinks>,
    /// Frames that parsed, handed over in batches so far.
    frames: u64,
}

impl<E: std::fmt::Debug> std::fmt::Debug for Pipeline<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("head", &self.head)
            .field("stages", &self.stages.len())
            .field("sinks", &self.sinks)
            .finish()
    }
}

impl<E: Stage> Pipeline<E> {
    /// `head` with `stages` beside it; their records and GPVs stay in the
    /// outputs for the driver until [`Pipeline::deliver_to`].
    pub fn new(head: E, stages: Stages) -> Pipeline<E> {
        let mut p = Pipeline {
            head,
            stages: stages.into_list(),
            framed: Vec::new(),
            sinks: None,
            frames: 0,
        };
        p.refresh();
        p
    }

    /// Records and GPVs go to `sinks` before each call returns, which
    /// then flushes them every [`crate::FLUSH_EVERY_NS`] of packet time
    /// and finishes them at [`Stage::end`].
    pub fn deliver_to(mut self, sinks: Sinks) -> Pipeline<E> {
        self.sinks = Some(sinks);
        self
    }

    /// Whether nothing is beside the head (no stage, no sinks).
    pub fn is_bare(&self) -> bool {
        self.stages.is_empty() && self.sinks.is_none()
    }

    pub fn head(&self) -> &E {
        &self.head
    }

    pub fn head_mut(&mut self) -> &mut E {
        &mut self.head
    }

    pub fn into_head(self) -> E {
        self.head
    }

    pub fn sinks(&self) -> Option<&Sinks> {
        self.sinks.as_ref()
    }

    pub fn sinks_mut(&mut self) -> Option<&mut Sinks> {
        self.sinks.as_mut()
    }

    /// Frames that parsed, handed over in batches so far: a change between
    /// calls applies from this frame (counted from 0) on.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// The stage of type `T` beside the head, if there is one.
    pub fn stage<T: Stage + 'static>(&self) -> Option<&T> {
        self.stages.iter().find_map(|s| s.as_any().downcast_ref())
    }

    /// Runs `f` on the stage of type `T` beside the head, if there is one
    /// (between calls: a change applies from the next frame on).
    pub fn stage_mut<T: Stage + 'static, R>(&mut self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let r = self
            .stages
            .iter_mut()
            .find_map(|s| s.as_any_mut().downcast_mut())
            .map(f);
        self.refresh();
        r
    }

    /// Asks each stage again whether it takes frames.
    fn refresh(&mut self) {
        self.framed.clear();
        self.framed
            .extend((0..self.stages.len()).filter(|&i| self.stages[i].takes_frames()));
    }

    /// The head's reports from `first` on, shown to every stage beside it.
    fn after_head(&mut self, out: &mut Outputs, first: usize) {
        let new = &mut out.reports[first..];
        for s in &mut self.stages {
            s.reports(new);
        }
    }

    fn deliver(&mut self, out: &mut Outputs) -> Result<(), Error> {
        match &mut self.sinks {
            Some(s) => s.deliver(out),
            None => Ok(()),
        }
    }
}

impl<E: Stage> Stage for Pipeline<E> {
    /// When no stage takes frames now, a driver asks this (a load and a
    /// branch) and makes no frame.
    #[inline]
    fn takes_frames(&self) -> bool {
        !self.framed.is_empty() || self.head.takes_frames()
    }

    #[inline]
    fn frame(&mut self, record: &PacketRecord, frame: &Frame<'_>) {
        for &i in &self.framed {
            self.stages[i].frame(record, frame);
        }
        self.head.frame(record, frame);
    }

    fn batch(&mut self, packets: &[PacketRecord], out: &mut Outputs) -> Result<(), Error> {
        self.frames += packets.len() as u64;
        let first = out.reports.len();
        self.head.batch(packets, out)?;
        self.after_head(out, first);
        for s in &mut self.stages {
            s.batch(packets, out)?;
        }
        self.deliver(out)?;
        if let (Some(s), Some(last)) = (&mut self.sinks, packets.last()) {
            s.flush_due(last.ts_ns)?;
        }
        Ok(())
    }

    fn unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Outputs) -> Result<(), Error> {
        let first = out.reports.len();
        self.head.unparsed(ts_ns, why, out)?;
        self.after_head(out, first);
        for s in &mut self.stages {
            s.unparsed(ts_ns, why, out)?;
        }
        Ok(())
    }

    fn tick(&mut self, clock_ns: u64, out: &mut Outputs) -> Result<(), Error> {
        let first = out.reports.len();
        self.head.tick(clock_ns, out)?;
        self.after_head(out, first);
        for s in &mut self.stages {
            s.tick(clock_ns, out)?;
        }
        self.deliver(out)
    }

    fn reports(&mut self, reports: &mut [Report]) {
        self.head.reports(reports);
        for s in &mut self.stages {
            s.reports(reports);
        }
    }

    fn service(&mut self, clock_ns: u64, out: &mut Outputs) {
        self.head.service(clock_ns, out);
        for s in &mut self.stages {
            s.service(clock_ns, out);
        }
    }

    fn flush(&mut self, now_ns: u64) {
        self.head.flush(now_ns);
        for s in &mut self.stages {
            s.flush(now_ns);
        }
    }

    fn finish(&mut self, out: &mut Outputs) -> Result<(), Error> {
        let first = out.reports.len();
        self.head.finish(out)?;
        self.after_head(out, first);
        for s in &mut self.stages {
            s.finish(out)?;
        }
        self.deliver(out)
    }

    /// The sinks are finished first, then every stage ends whatever they
    /// did; the first error.
    fn end(&mut self, out: &mut Outputs) -> Result<(), Error> {
        let mut first = self.sinks.as_mut().map_or(Ok(()), Sinks::finish);
        let head = self.head.end(out);
        first = first.and(head);
        for s in &mut self.stages {
            let ended = s.end(out);
            first = first.and(ended);
        }
        first
    }

    fn switch_input(&mut self, input: usize) {
        self.head.switch_input(input);
    }

    fn counters(&self) -> Counters {
        self.head.counters()
    }

    fn take_health(&mut self, out: &mut Vec<Health>) {
        self.head.take_health(out)
    }
}

impl Pipeline<Monitor> {
    /// One step of the monitor's pending sweep, of at most `visits` flow
    /// visits (a live worker between batches); true when the sweep is done.
    pub fn sweep_step(&mut self, visits: usize, out: &mut Outputs) -> bool {
        let first = out.reports.len();
        let done = self.head.sweep_step(visits, &mut out.reports);
        self.after_head(out, first);
        done
    }
}
