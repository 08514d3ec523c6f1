//! Flow records beside the events: a stage that hands each batch to the
//! event stage and to a flow meter (TurboFlow's microflow cache and
//! aggregator, `clarion-flows`), whose records go to record sinks.
//!
//! ```text
//!  batch ──► inner stage (Monitor | Workers | Counting) ──► reports
//!        └─► FlowMeter ──► FlowRecord ──► RecordSink (FanOut: JSON lines, IPFIX, Parquet)
//! ```
//!
//! Both read the same parsed packets, once parsed. The meter runs on the
//! thread that calls the stage (the reading thread of a file replay).
//! Records reach the sinks as the meter ends them; sinks are flushed once
//! a second of packet time (so a collector sees records while a long
//! capture is read, and an idle flow's record within about its idle
//! timeout plus a second) and at the end. A sink's error ends the run
//! ([`HostError::Records`]): records are never dropped silently.

use clarion_engine::{Counters, Health, Report, Unparsed};
use clarion_flows::{FlowConfig, FlowMeter, FlowStats};
use clarion_records::{FanOut, FlowRecord, RecordSink};
use clarion_wire::PacketRecord;

use crate::{HostError, Stage};

/// Packet time between flushes of the record sinks.
const FLUSH_EVERY_NS: u64 = 1_000_000_000;

/// An event stage with a flow meter beside it (see the module docs).
#[derive(Debug)]
pub struct WithRecords<S> {
    pub inner: S,
    meter: FlowMeter,
    sink: FanOut,
    records: Vec<FlowRecord>,
    written: u64,
    flushed_at_ns: u64,
}

impl<S: Stage> WithRecords<S> {
    /// Fails on a configuration the meter refuses (e.g. cache slots not
    /// a multiple of its ways).
    pub fn new(inner: S, config: FlowConfig, sink: FanOut) -> Result<WithRecords<S>, HostError> {
        Ok(WithRecords {
            inner,
            meter: FlowMeter::new(config).map_err(|e| HostError::Usage(e.to_string()))?,
            sink,
            records: Vec::new(),
            written: 0,
            flushed_at_ns: 0,
        })
    }

    /// The meter's counters (packets, microflow records, records).
    pub fn flow_stats(&self) -> FlowStats {
        self.meter.stats()
    }

    /// Records handed to the sinks so far.
    pub fn records_written(&self) -> u64 {
        self.written
    }

    fn deliver(&mut self) -> Result<(), HostError> {
        for r in self.records.drain(..) {
            self.sink.write(&r).map_err(HostError::Records)?;
            self.written += 1;
        }
        Ok(())
    }
}

impl<S: Stage> Stage for WithRecords<S> {
    fn switch_input(&mut self, input: usize) {
        self.inner.switch_input(input);
    }

    fn process_batch(&mut self, packets: &[PacketRecord], out: &mut Vec<Report>) -> Result<(), HostError> {
        self.inner.process_batch(packets, out)?;
        self.meter.process_batch(packets, &mut self.records);
        self.deliver()?;
        if let Some(last) = packets.last() {
            if last.ts_ns >= self.flushed_at_ns.saturating_add(FLUSH_EVERY_NS) {
                self.sink.flush().map_err(HostError::Records)?;
                self.flushed_at_ns = last.ts_ns;
            }
        }
        Ok(())
    }

    fn note_unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Vec<Report>) -> Result<(), HostError> {
        self.inner.note_unparsed(ts_ns, why, out)
    }

    fn finish(&mut self, out: &mut Vec<Report>) -> Result<(), HostError> {
        self.inner.finish(out)?;
        self.meter.finish(&mut self.records);
        self.deliver()?;
        self.sink.finish().map_err(HostError::Records)
    }

    fn counters(&self) -> Counters {
        self.inner.counters()
    }

    fn take_health(&mut self, out: &mut Vec<Health>) {
        self.inner.take_health(out)
    }
}

/// A stage without events: it counts what it is given (flow records and
/// GPVs alone, `clarion run --records` without `--events`).
#[derive(Debug, Default)]
pub struct Counting {
    counters: Counters,
}

impl Stage for Counting {
    fn process_batch(&mut self, packets: &[PacketRecord], _out: &mut Vec<Report>) -> Result<(), HostError> {
        self.counters.packets += packets.len() as u64;
        self.counters.bytes += packets.iter().map(|p| u64::from(p.size)).sum::<u64>();
        Ok(())
    }

    fn note_unparsed(&mut self, _ts_ns: u64, why: Unparsed, _out: &mut Vec<Report>) -> Result<(), HostError> {
        match why {
            Unparsed::Malformed => self.counters.malformed += 1,
            Unparsed::NotIp => self.counters.not_ip += 1,
        }
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<Report>) -> Result<(), HostError> {
        Ok(())
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}
