//! A live worker's chain: its monitor with the stages beside it (a
//! [`Pipeline`]), as `clarion_live::Worker` drives it.

use clarion_engine::{Monitor, Unparsed};
use clarion_live::Chain;
use clarion_pipeline::{Error, Frame, Outputs, Pipeline, Stage};
use clarion_wire::{LinkType, PacketRecord};

/// See the module documentation. Its outputs go to the host's thread
/// whole, reports and partials with what the stages made.
pub struct LiveChain {
    pipeline: Pipeline<Monitor>,
    out: Outputs,
    /// By source: the number its frames carry as their interface (the
    /// interface's index in the host's list).
    interfaces: Vec<u16>,
    failure: Option<Error>,
}

impl LiveChain {
    pub fn new(pipeline: Pipeline<Monitor>, interfaces: Vec<u16>) -> LiveChain {
        LiveChain {
            pipeline,
            out: Outputs::default(),
            interfaces,
            failure: None,
        }
    }

    pub fn pipeline(&self) -> &Pipeline<Monitor> {
        &self.pipeline
    }

    /// The pipeline, for a command between batches (an event installed,
    /// export policies replaced).
    pub fn pipeline_mut(&mut self) -> &mut Pipeline<Monitor> {
        &mut self.pipeline
    }

    /// Keeps the first failure for [`Chain::failure`].
    fn note(&mut self, r: Result<(), Error>) {
        if let Err(e) = r {
            self.failure.get_or_insert(e);
        }
    }
}

impl Chain for LiveChain {
    type Out = Outputs;

    fn monitor(&self) -> &Monitor {
        self.pipeline.head()
    }

    fn monitor_mut(&mut self) -> &mut Monitor {
        self.pipeline.head_mut()
    }

    #[inline]
    fn frame(
        &mut self,
        source: usize,
        link: LinkType,
        record: &PacketRecord,
        frame: &clarion_live::Frame<'_>,
    ) {
        // No frame made when no stage takes one (an exporter without policies).
        if !self.pipeline.takes_frames() {
            return;
        }
        let frame = Frame {
            link,
            data: frame.data,
            orig_len: frame.orig_len,
            interface: self.interfaces.get(source).copied().unwrap_or(u16::MAX),
        };
        self.pipeline.frame(record, &frame);
    }

    fn batch(&mut self, packets: &[PacketRecord]) {
        let r = self.pipeline.batch(packets, &mut self.out);
        self.note(r);
    }

    fn unparsed(&mut self, ts_ns: u64, why: Unparsed) {
        let r = self.pipeline.unparsed(ts_ns, why, &mut self.out);
        self.note(r);
    }

    fn tick(&mut self, clock_ns: u64) {
        let r = self.pipeline.tick(clock_ns, &mut self.out);
        self.note(r);
    }

    fn sweep_step(&mut self, visits: usize) -> bool {
        self.pipeline.sweep_step(visits, &mut self.out)
    }

    fn flush(&mut self, now_ns: u64) {
        self.pipeline.flush(now_ns);
    }

    fn service(&mut self) {
        let clock = self.pipeline.head().now_ns();
        self.pipeline.service(clock, &mut self.out);
    }

    fn finish(&mut self) {
        let r = self.pipeline.finish(&mut self.out);
        self.note(r);
    }

    fn end(&mut self) {
        let r = self.pipeline.end(&mut self.out);
        self.note(r);
    }

    fn take(&mut self) -> Option<Outputs> {
        let partials = self.pipeline.head_mut().take_partials();
        if self.out.partials.is_empty() {
            self.out.partials = partials;
        } else {
            self.out.partials.extend(partials);
        }
        (!self.out.is_empty()).then(|| std::mem::take(&mut self.out))
    }

    fn failure(&mut self) -> Option<Box<dyn std::error::Error + Send + Sync>> {
        self.failure.take().map(|e| Box::new(e) as _)
    }
}
