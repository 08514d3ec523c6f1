//! What a live worker drives.

use clarion_engine::{Monitor, Unparsed};
use clarion_wire::{LinkType, PacketRecord};

use crate::Frame;

/// What a [`Worker`](crate::Worker) drives: the monitor at its head, whose
/// clock, sweeps, drop counts and blind spans the worker manages, and
/// whatever its host put beside it (`clarion_host::LiveChain`: the
/// `clarion_pipeline::Pipeline` of flow records, GPVs, export policies
/// and the capture ring). The worker knows nothing of those: it hands
/// each frame and batch over, ticks the clock on a quiet wire, runs the
/// sweep in steps, and sends what was made ([`Chain::take`]) to its host.
///
/// Every call comes from the worker's thread, in input order; the
/// pipeline's `Stage` contract says what each means to the stages. None
/// fails: a chain that does keeps the error for [`Chain::failure`], which
/// the worker reads after every batch of work and then stops.
pub trait Chain: Send + 'static {
    /// What goes to the host: reports, and what the stages made.
    type Out: Send + 'static;

    fn monitor(&self) -> &Monitor;
    fn monitor_mut(&mut self) -> &mut Monitor;
    /// A frame that parsed, from source `source` (whose link type is
    /// `link`), before its record joins a batch.
    fn frame(&mut self, source: usize, link: LinkType, record: &PacketRecord, frame: &Frame<'_>);
    fn batch(&mut self, packets: &[PacketRecord]);
    fn unparsed(&mut self, ts_ns: u64, why: Unparsed);
    /// No packet until `clock_ns` (the wall clock less the lag).
    fn tick(&mut self, clock_ns: u64);
    /// One step of the pending sweep, of at most `visits` flow visits;
    /// true when the sweep is done.
    fn sweep_step(&mut self, visits: usize) -> bool;
    /// Every [`EXPORT_TICK`](crate::EXPORT_TICK) of the wall clock (`now_ns`),
    /// busy wire or quiet.
    fn flush(&mut self, now_ns: u64);
    /// Between batches, every turn of the loop: requests from the host's
    /// thread are served, and what the monitor's clock made due is output.
    fn service(&mut self);
    /// The input ended: every window, record and vector is closed and output.
    fn finish(&mut self);
    /// The worker stops, after [`Chain::finish`] or after a failure: files
    /// are closed and what must outlive the worker is output.
    fn end(&mut self);
    /// What was made since the last call, if anything.
    fn take(&mut self) -> Option<Self::Out>;
    /// The first failure since the last call (the worker then stops).
    fn failure(&mut self) -> Option<Box<dyn std::error::Error + Send + Sync>>;
}
