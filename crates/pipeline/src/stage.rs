//! The seam between the packets and what consumes them.

use clarion_engine::{Counters, Health, Monitor, Report, Unparsed};
use clarion_wire::PacketRecord;

use crate::{Error, Outputs};

/// A frame that parsed, as its driver received it (link type, bytes,
/// length on the wire, the input or interface it came from by number):
/// for the stages that need the bytes themselves (export policies,
/// captures around events). Its time is its record's. The exporter's own
/// type, so the frame reaches it as the driver made it.
pub use clarion_export::Frame;

/// What consumes a host's parsed packets: the event stage at a
/// pipeline's head (one [`Monitor`], worker threads merged, a network of
/// hosts, or [`Counting`]), each stage beside it, and the
/// [`Pipeline`](crate::Pipeline) of them all.
///
/// # Contract
///
/// - **Order.** Calls come in input order: a batch's packets, and frames
///   that did not parse between them, in the order they were read. A
///   frame's [`Stage::frame`] comes before the batch holding its record.
/// - **Outputs.** What a call makes goes to `out` as it is made
///   (reports in the order of a monitor's sweep: window end, event,
///   group); the driver takes it away between calls.
/// - **Clock.** A stage has no clock of its own: the packets' times, and
///   the driver's calls say what time it is ([`Stage::tick`] on a quiet
///   wire, [`Stage::flush`] and [`Stage::service`] as often as it
///   likes). A file replay's clock is packet time, a live worker's the
///   wall clock less its lag; the stage cannot tell them apart.
/// - **Finish** is called once, after the last packet: every window,
///   record and vector the input reached is closed and output. Then
///   [`Stage::end`] once, also when a driver stops without finishing (a
///   failure): what must outlive the stage goes out. Nothing after that.
/// - **Errors** end the run: the driver reports the error and stops
///   feeding the stage (a worker that died, a merger that refused its
///   statistics, a sink). Bad packets are never an error; they are
///   counted. Export destinations never fail either: what they cannot
///   take is counted in their statistics.
///
/// Every method has a default that does nothing, so a stage writes only
/// what it does. The last three are the head's alone: a stage beside it
/// keeps no counters of the host's packets.
pub trait Stage {
    /// Whether [`Stage::frame`] is to be called: a driver asks before
    /// making the frame, so stages that do not read frames cost nothing
    /// per frame (a pipeline asks its stages again after every change
    /// through [`Pipeline::stage_mut`](crate::Pipeline::stage_mut)).
    #[inline(always)]
    fn takes_frames(&self) -> bool {
        false
    }
    /// A frame that parsed, with its bytes, just before its record joins
    /// the batch for [`Stage::batch`] (so in input order, and before that
    /// batch's reports).
    #[inline(always)]
    fn frame(&mut self, _record: &PacketRecord, _frame: &Frame<'_>) {}
    fn batch(&mut self, _packets: &[PacketRecord], _out: &mut Outputs) -> Result<(), Error> {
        Ok(())
    }
    fn unparsed(&mut self, _ts_ns: u64, _why: Unparsed, _out: &mut Outputs) -> Result<(), Error> {
        Ok(())
    }
    /// No packet until `clock_ns` (a quiet wire): what ended by then is output.
    fn tick(&mut self, _clock_ns: u64, _out: &mut Outputs) -> Result<(), Error> {
        Ok(())
    }
    /// The head's reports made by the call just returned, before the
    /// driver takes them: a stage may fill them in (a capture's file).
    fn reports(&mut self, _reports: &mut [Report]) {}
    /// Between batches, as often as the driver likes, with its clock
    /// (the monitor's): requests from other threads are served, and what
    /// is due by `clock_ns` is output.
    fn service(&mut self, _clock_ns: u64, _out: &mut Outputs) {}
    /// The driver's periodic flush (a file: every 100 ms of packet time; a
    /// live worker: every 10 ms of the wall clock): what waits to be sent
    /// is sent.
    fn flush(&mut self, _now_ns: u64) {}
    fn finish(&mut self, _out: &mut Outputs) -> Result<(), Error> {
        Ok(())
    }
    /// The driver stops, after [`Stage::finish`] or without it (a
    /// failure): files and sinks are finished, and what must outlive the
    /// stage goes to `out`.
    fn end(&mut self, _out: &mut Outputs) -> Result<(), Error> {
        Ok(())
    }

    /// The frames that follow come from input `input` of several (one
    /// capture per host); 0 until told otherwise. Stages of one host's
    /// traffic ignore it.
    fn switch_input(&mut self, _input: usize) {}
    /// The host's counters so far (summed over its workers or hosts).
    fn counters(&self) -> Counters {
        Counters::default()
    }
    /// Moves the health records kept since the last call into `out`
    /// (epochs not seen in full; `MonitorConfig::keep_health`). Stages that
    /// keep none (worker threads) add nothing.
    fn take_health(&mut self, _out: &mut Vec<Health>) {}
}

impl Stage for Monitor {
    fn batch(&mut self, packets: &[PacketRecord], out: &mut Outputs) -> Result<(), Error> {
        Monitor::process_batch(self, packets, &mut out.reports);
        Ok(())
    }
    fn unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Outputs) -> Result<(), Error> {
        Monitor::note_unparsed(self, ts_ns, why, &mut out.reports);
        Ok(())
    }
    fn tick(&mut self, clock_ns: u64, out: &mut Outputs) -> Result<(), Error> {
        Monitor::tick(self, clock_ns, &mut out.reports);
        Ok(())
    }
    fn finish(&mut self, out: &mut Outputs) -> Result<(), Error> {
        Monitor::finish(self, &mut out.reports);
        Ok(())
    }
    fn counters(&self) -> Counters {
        Monitor::counters(self)
    }
    fn take_health(&mut self, out: &mut Vec<Health>) {
        Monitor::take_health(self, out)
    }
}

/// A head without events: it counts what it is given (flow records and
/// GPVs alone, `clarion run --records` without `--events`).
#[derive(Debug, Default)]
pub struct Counting {
    counters: Counters,
}

impl Stage for Counting {
    fn batch(&mut self, packets: &[PacketRecord], _out: &mut Outputs) -> Result<(), Error> {
        self.counters.packets += packets.len() as u64;
        self.counters.bytes += packets.iter().map(|p| u64::from(p.size)).sum::<u64>();
        Ok(())
    }

    fn unparsed(&mut self, _ts_ns: u64, why: Unparsed, _out: &mut Outputs) -> Result<(), Error> {
        match why {
            Unparsed::Malformed => self.counters.malformed += 1,
            Unparsed::NotIp => self.counters.not_ip += 1,
        }
        Ok(())
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}
