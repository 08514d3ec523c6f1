//! Flow records and GPVs beside the events: a stage that hands each batch
//! to the event stage, to a flow meter (TurboFlow's microflow cache and
//! aggregator, `clarion-flows`) whose records go to record sinks, and to a
//! GPV cache (*Flow, `clarion-gpv`) whose grouped packet vectors go to a
//! GPV sink and to the metric apps running on the host; and each frame
//! to the export policies (Trident, `clarion-export`).
//!
//! ```text
//!  batch ──► inner stage (Monitor | Workers | Counting) ──► reports
//!        ├─► FlowMeter ──► FlowRecord ──► Sink<FlowRecord> (FanOut: JSON lines, IPFIX, Parquet)
//!        └─► GpvCache ──► Gpv ──► Sink<Gpv> (.gpv, Parquet) and AppRuntime (apps)
//!  frame ──► Exporter ──► header streams, VXLAN mirrors, pcapng files
//!        └─► Captures (ring) ◄── reports of events with `then capture` ──► pcapng per report
//! ```
//!
//! All read the same parsed packets, parsed once, on the thread that calls
//! the stage (the reading thread of a file replay). Records and GPVs reach
//! their sinks as they are made; the sinks are flushed once a second of
//! packet time (so a collector sees records while a long capture is read)
//! and finished at the end. A sink's error ends the run
//! ([`Error::Records`], [`Error::Gpvs`]): nothing is dropped
//! silently. Export destinations never end the run nor wait: what they
//! cannot take is counted in [`WithExports::export_stats`].

use clarion_capture::RawPacket;
use clarion_engine::{Counters, Health, Report, Unparsed};
use clarion_event_capture::{CaptureStats, Captures};
use clarion_export::{ExportStats, Exporter, Frame, FLUSH_AFTER_NS};
use clarion_flows::{FlowConfig, FlowMeter, FlowStats};
use clarion_gpv::{AppRuntime, CacheConfig, CacheStats, Gpv, GpvCache};
use clarion_records::FlowRecord;
use clarion_sinks::{BoxSink, FanOut, Sink};
use clarion_wire::PacketRecord;

use crate::{Error, Stage};

/// Packet time between flushes of the sinks.
const FLUSH_EVERY_NS: u64 = 1_000_000_000;

/// An event stage with flow records and GPVs beside it (see the module docs).
pub struct WithExports<S> {
    pub inner: S,
    records: Option<Records>,
    gpvs: Option<Gpvs>,
    exporter: Option<Exporter>,
    captures: Option<Captures>,
    input: u16,
    flushed_at_ns: u64,
    ticked_at_ns: u64,
    /// Frames that parsed, handed to [`Stage::frame`] so far.
    frames: u64,
}

struct Records {
    meter: FlowMeter,
    sink: FanOut<BoxSink<FlowRecord>>,
    out: Vec<FlowRecord>,
    written: u64,
}

struct Gpvs {
    cache: GpvCache,
    sink: Option<BoxSink<Gpv>>,
    apps: AppRuntime,
    out: Vec<Gpv>,
    written: u64,
}

impl<S: std::fmt::Debug> std::fmt::Debug for WithExports<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithExports")
            .field("inner", &self.inner)
            .field(
                "records",
                &self.records.as_ref().map(|r| r.sink.destination().to_string()),
            )
            .field(
                "gpvs",
                &self
                    .gpvs
                    .as_ref()
                    .map(|g| g.sink.as_ref().map(|s| s.destination().to_string())),
            )
            .finish()
    }
}

impl<S: Stage> WithExports<S> {
    /// `inner` alone; add exports with [`WithExports::records`] and [`WithExports::gpvs`].
    pub fn new(inner: S) -> WithExports<S> {
        WithExports {
            inner,
            records: None,
            gpvs: None,
            exporter: None,
            captures: None,
            input: 0,
            flushed_at_ns: 0,
            ticked_at_ns: 0,
            frames: 0,
        }
    }

    /// Export policies on every frame that parses.
    pub fn exporter(mut self, exporter: Exporter) -> WithExports<S> {
        self.exporter = Some(exporter);
        self
    }

    /// The export policies' exporter, to change its policies between
    /// frames ([`Exporter::set_policies`]: from the next frame on).
    pub fn exporter_mut(&mut self) -> Option<&mut Exporter> {
        self.exporter.as_mut()
    }

    /// Frames that parsed, seen so far: a change of policies between
    /// frames applies from this frame (counted from 0) on.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Capture around the events that say `then capture`: frames into its
    /// ring, reports of those events into files (their `capture` filled in).
    pub fn captures(mut self, captures: Captures) -> WithExports<S> {
        self.captures = Some(captures);
        self
    }

    /// Ends the captures (every open one written with what it has) and
    /// says what was written; `None` without captures.
    pub fn finish_captures(&mut self) -> Option<CaptureStats> {
        self.captures.as_mut().map(Captures::finish)
    }

    /// What the export policies have done, if any are installed.
    pub fn export_stats(&self) -> Option<ExportStats> {
        self.exporter.as_ref().map(Exporter::stats)
    }

    /// Flow records of a meter of `config` to `sink`. Fails on a
    /// configuration the meter refuses (cache slots not a multiple of its ways).
    pub fn records(
        mut self,
        config: FlowConfig,
        sink: FanOut<BoxSink<FlowRecord>>,
    ) -> Result<WithExports<S>, Error> {
        self.records = Some(Records {
            meter: FlowMeter::new(config).map_err(|e| Error::Usage(e.to_string()))?,
            sink,
            out: Vec::new(),
            written: 0,
        });
        Ok(self)
    }

    /// GPVs of a cache of `config` to `sink` (if any) and to `apps`.
    pub fn gpvs(
        mut self,
        config: CacheConfig,
        sink: Option<BoxSink<Gpv>>,
        apps: AppRuntime,
    ) -> Result<WithExports<S>, Error> {
        self.gpvs = Some(Gpvs {
            cache: GpvCache::new(config).map_err(|e| Error::Usage(e.to_string()))?,
            sink,
            apps,
            out: Vec::new(),
            written: 0,
        });
        Ok(self)
    }

    /// The meter's counters, and the records handed to the sinks.
    pub fn record_stats(&self) -> Option<(FlowStats, u64)> {
        self.records.as_ref().map(|r| (r.meter.stats(), r.written))
    }

    /// The GPV cache's counters, and the GPVs handed to the sink.
    pub fn gpv_stats(&self) -> Option<(CacheStats, u64)> {
        self.gpvs.as_ref().map(|g| (*g.cache.stats(), g.written))
    }

    /// The apps fed by the GPVs (their reports), if GPVs are made.
    pub fn apps(&mut self) -> Option<&mut AppRuntime> {
        self.gpvs.as_mut().map(|g| &mut g.apps)
    }

    /// Starts the captures of the reports from `first` on; the ring may
    /// then forget what no later report can ask for. Reports come in
    /// window-end order, and a stage may deliver them long after it was
    /// handed their packets (worker threads), so the reports, not the
    /// packets, are the ring's clock.
    fn capture_reports(&mut self, out: &mut [Report], first: usize) {
        if let (Some(c), Some(new)) = (&mut self.captures, out.get_mut(first..)) {
            c.on_reports(new);
            if let Some(end) = new.iter().map(|r| r.window.end_ns).max() {
                c.processed(end);
            }
        }
    }

    fn deliver(&mut self) -> Result<(), Error> {
        if let Some(r) = &mut self.records {
            for rec in r.out.drain(..) {
                r.sink.write(&rec).map_err(Error::Records)?;
                r.written += 1;
            }
        }
        if let Some(g) = &mut self.gpvs {
            for gpv in g.out.drain(..) {
                g.apps.on_gpv(&gpv);
                if let Some(s) = &mut g.sink {
                    s.write(&gpv).map_err(Error::Gpvs)?;
                    g.written += 1;
                }
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Error> {
        if let Some(r) = &mut self.records {
            r.sink.flush().map_err(Error::Records)?;
        }
        if let Some(s) = self.gpvs.as_mut().and_then(|g| g.sink.as_mut()) {
            s.flush().map_err(Error::Gpvs)?;
        }
        Ok(())
    }
}

impl<S: Stage> Stage for WithExports<S> {
    fn switch_input(&mut self, input: usize) {
        self.inner.switch_input(input);
        self.input = u16::try_from(input).unwrap_or(u16::MAX);
    }

    #[inline]
    fn frame(&mut self, record: &PacketRecord, raw: &RawPacket<'_>) {
        self.frames += 1;
        // An exporter without policies (waiting for some) is offered nothing.
        if let Some(x) = self.exporter.as_mut().filter(|x| !x.policies().is_empty()) {
            let frame = Frame {
                link: raw.link,
                data: raw.data,
                orig_len: raw.orig_len,
                interface: self.input,
            };
            x.offer(record, &frame);
        }
        if let Some(c) = &mut self.captures {
            c.on_frame(record, raw);
        }
        self.inner.frame(record, raw);
    }

    fn process_batch(&mut self, packets: &[PacketRecord], out: &mut Vec<Report>) -> Result<(), Error> {
        let first = out.len();
        self.inner.process_batch(packets, out)?;
        self.capture_reports(out, first);
        if let Some(r) = &mut self.records {
            r.meter.process_batch(packets, &mut r.out);
        }
        if let Some(g) = &mut self.gpvs {
            for p in packets {
                g.cache.push(p, &mut g.out);
            }
        }
        self.deliver()?;
        if let Some(last) = packets.last() {
            if last.ts_ns >= self.flushed_at_ns.saturating_add(FLUSH_EVERY_NS) {
                self.flush()?;
                self.flushed_at_ns = last.ts_ns;
            }
            if let Some(x) = &mut self.exporter {
                if last.ts_ns >= self.ticked_at_ns.saturating_add(FLUSH_AFTER_NS) {
                    x.tick(last.ts_ns);
                    self.ticked_at_ns = last.ts_ns;
                }
            }
        }
        Ok(())
    }

    fn note_unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Vec<Report>) -> Result<(), Error> {
        let first = out.len();
        self.inner.note_unparsed(ts_ns, why, out)?;
        self.capture_reports(out, first);
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Report>) -> Result<(), Error> {
        let first = out.len();
        self.inner.finish(out)?;
        self.capture_reports(out, first);
        if let Some(r) = &mut self.records {
            r.meter.finish(&mut r.out);
        }
        if let Some(g) = &mut self.gpvs {
            g.cache.finish(&mut g.out);
        }
        self.deliver()?;
        if let Some(r) = &mut self.records {
            r.sink.finish().map_err(Error::Records)?;
        }
        if let Some(s) = self.gpvs.as_mut().and_then(|g| g.sink.as_mut()) {
            s.finish().map_err(Error::Gpvs)?;
        }
        if let Some(x) = &mut self.exporter {
            x.finish();
        }
        Ok(())
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
    fn process_batch(&mut self, packets: &[PacketRecord], _out: &mut Vec<Report>) -> Result<(), Error> {
        self.counters.packets += packets.len() as u64;
        self.counters.bytes += packets.iter().map(|p| u64::from(p.size)).sum::<u64>();
        Ok(())
    }

    fn note_unparsed(&mut self, _ts_ns: u64, why: Unparsed, _out: &mut Vec<Report>) -> Result<(), Error> {
        match why {
            Unparsed::Malformed => self.counters.malformed += 1,
            Unparsed::NotIp => self.counters.not_ip += 1,
        }
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<Report>) -> Result<(), Error> {
        Ok(())
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}
