//! Where a pipeline's flow records and GPVs go: every `--records`
//! destination (one [`FanOut`]), the `--gpv` destination and the metric
//! apps fed with the GPVs. One type for both drivers: a file replay's
//! pipeline delivers into its own ([`Pipeline::deliver_to`](crate::Pipeline::deliver_to)),
//! on the reading thread; a live host's thread delivers what its
//! workers send.
//!
//! Records and GPVs reach their sinks as they are made; the sinks are
//! flushed once a second of the caller's clock (so a collector sees
//! records while a long capture is read) and finished at the end. A
//! sink's error ends the run ([`Error::Records`], [`Error::Gpvs`]):
//! nothing is dropped silently.

use clarion_gpv::{AppRuntime, Gpv};
use clarion_records::FlowRecord;
use clarion_sinks::{BoxSink, FanOut, Sink};

use crate::{Error, Outputs};

/// Time between flushes of the sinks (packet time for a file, the wall
/// clock live).
pub const FLUSH_EVERY_NS: u64 = 1_000_000_000;

/// See the module documentation.
#[derive(Default)]
pub struct Sinks {
    records: Option<FanOut<BoxSink<FlowRecord>>>,
    gpvs: Option<BoxSink<Gpv>>,
    /// The apps on the GPVs, when GPVs are made.
    apps: Option<AppRuntime>,
    flushed_ns: Option<u64>,
    records_written: u64,
    gpvs_seen: u64,
    gpvs_written: u64,
}

impl Sinks {
    /// Flow records to `sink`.
    pub fn with_records(mut self, sink: FanOut<BoxSink<FlowRecord>>) -> Sinks {
        self.records = Some(sink);
        self
    }

    /// GPVs to `sink` (if any) and to `apps`.
    pub fn with_gpvs(mut self, sink: Option<BoxSink<Gpv>>, apps: AppRuntime) -> Sinks {
        self.gpvs = sink;
        self.apps = Some(apps);
        self
    }

    /// Whether records are written.
    pub fn has_records(&self) -> bool {
        self.records.is_some()
    }

    /// Whether GPVs are taken (written, or read by apps).
    pub fn takes_gpvs(&self) -> bool {
        self.apps.is_some()
    }

    /// The apps on the GPVs; `None` when no GPVs are taken.
    pub fn apps_mut(&mut self) -> Option<&mut AppRuntime> {
        self.apps.as_mut()
    }

    /// Records handed to the record sinks.
    pub fn records_written(&self) -> u64 {
        self.records_written
    }

    /// GPVs taken (by the apps and the sink), and those handed to the sink.
    pub fn gpvs_taken(&self) -> (u64, u64) {
        (self.gpvs_seen, self.gpvs_written)
    }

    /// Writes `records` to every record sink.
    pub fn write_records(&mut self, records: &[FlowRecord]) -> Result<(), Error> {
        if let Some(sink) = &mut self.records {
            for r in records {
                sink.write(r).map_err(Error::Records)?;
                self.records_written += 1;
            }
        }
        Ok(())
    }

    /// Hands `gpvs` to the apps and writes them to the GPV sink.
    pub fn write_gpvs(&mut self, gpvs: &[Gpv]) -> Result<(), Error> {
        for g in gpvs {
            if let Some(apps) = &mut self.apps {
                apps.on_gpv(g);
            }
            self.gpvs_seen += 1;
            if let Some(sink) = &mut self.gpvs {
                sink.write(g).map_err(Error::Gpvs)?;
                self.gpvs_written += 1;
            }
        }
        Ok(())
    }

    /// Takes the records and GPVs out of `out` into the sinks.
    pub fn deliver(&mut self, out: &mut Outputs) -> Result<(), Error> {
        let records = self.write_records(&out.records);
        out.records.clear();
        records?;
        let gpvs = self.write_gpvs(&out.gpvs);
        out.gpvs.clear();
        gpvs
    }

    /// Flushes the sinks when [`FLUSH_EVERY_NS`] has passed on the
    /// caller's clock since the last flush (the first call flushes).
    pub fn flush_due(&mut self, now_ns: u64) -> Result<(), Error> {
        if self
            .flushed_ns
            .is_some_and(|t| now_ns < t.saturating_add(FLUSH_EVERY_NS))
        {
            return Ok(());
        }
        self.flushed_ns = Some(now_ns);
        if let Some(sink) = &mut self.records {
            sink.flush().map_err(Error::Records)?;
        }
        if let Some(sink) = &mut self.gpvs {
            sink.flush().map_err(Error::Gpvs)?;
        }
        Ok(())
    }

    /// Finishes the sinks, each whatever the other does (a failed one
    /// still leaves the other's file whole); the first error.
    pub fn finish(&mut self) -> Result<(), Error> {
        let records = self.records.as_mut().map(|r| r.finish().map_err(Error::Records));
        let gpvs = self.gpvs.as_mut().map(|g| g.finish().map_err(Error::Gpvs));
        records.transpose()?;
        gpvs.transpose()?;
        Ok(())
    }
}

impl std::fmt::Debug for Sinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sinks")
            .field(
                "records",
                &self.records.as_ref().map(|r| r.destination().to_string()),
            )
            .field("gpvs", &self.gpvs.as_ref().map(|g| g.destination().to_string()))
            .finish()
    }
}
