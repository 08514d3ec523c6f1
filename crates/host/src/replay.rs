//! The replay loop: a capture into a stage, reports to a driver.
//!
//! Frames are parsed as they are read and handed to the stage in batches
//! of up to [`BATCH`] records ([`Stage::batch`] overlaps their cache
//! misses). A frame that does not parse ends the batch before it, so the
//! stage sees every frame in input order. The clock is packet time: the
//! stage is flushed ([`Stage::flush`]) every [`FLUSH_EVERY_NS`] of it,
//! after the batch that reached it. Every
//! [`ReplayOptions::service_every`] frames the batch is flushed, its
//! reports delivered and [`Driver::service`] called, which may stop the
//! replay. Paced replays ([`ReplayOptions::speed`]) flush before waiting
//! for a packet's time and call `service` about every millisecond while
//! they wait.
//!
//! Frames of several inputs (one capture per host, [`crate::MergedCaptures`])
//! come merged by time; the stage is told when the input changes
//! ([`Stage::switch_input`]), between batches.
//!
//! A frame the source skips (a pcapng interface of a link type Clarion
//! cannot parse) is counted by the stage as malformed at the time of the
//! frame read before it (or after it, for the first), so that the
//! completeness of its window says it was not seen; with several inputs
//! it is counted on the input read last.
//!
//! A fatal capture error (damage) ends the input: the stage is finished
//! and the windows before the damage reported, and the error is returned
//! in [`Replayed::damage`] for the caller to report.

use std::time::{Duration, Instant};

use clarion_capture::{CaptureError, RawPacket, SourceStats};
use clarion_engine::{Report, Unparsed, BATCH};
use clarion_pipeline::{Frame, Outputs, Stage};
use clarion_wire::PacketRecord;

use crate::{Frames, HostError};

/// Frames between progress calls.
const PROGRESS_EVERY: u64 = 65_536;

/// Packet time between flushes of the stage (header datagrams of export
/// policies that have waited this long leave at the next).
pub const FLUSH_EVERY_NS: u64 = clarion_export::FLUSH_AFTER_NS;

/// How to read the capture.
#[derive(Clone, Copy, Debug)]
pub struct ReplayOptions {
    /// Replay at this many times the capture's own pace (1: as captured);
    /// `None`: as fast as possible.
    pub speed: Option<f64>,
    /// Frames between calls of [`Driver::service`] (at least 1).
    pub service_every: u64,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            speed: None,
            service_every: 64,
        }
    }
}

/// The caller's side of a replay.
pub trait Driver<St: ?Sized> {
    type Error: From<HostError>;

    /// Takes the stage's reports (all of `reports`, in order).
    fn reports(&mut self, stage: &mut St, reports: &mut Vec<Report>) -> Result<(), Self::Error>;

    /// Runs between frames (and while a paced replay waits); `false` stops
    /// the replay. Every report made so far has been handed to
    /// [`Driver::reports`] before: an agent answers polls here, after its
    /// reports of the windows closed (its manager relies on that order).
    fn service(&mut self, _stage: &mut St) -> Result<bool, Self::Error> {
        Ok(true)
    }

    /// A frame the source skipped (e.g. a pcapng interface of an unsupported link type).
    fn warning(&mut self, _error: &CaptureError) {}

    /// The source's counters, every 65,536 frames (progress bars).
    fn progress(&mut self, _stats: &SourceStats) {}
}

/// How a replay went.
#[derive(Debug)]
pub struct Replayed {
    /// Frames read (parsed or not).
    pub frames: u64,
    /// The source's counters at the end (skipped and dropped frames).
    pub source: SourceStats,
    pub elapsed: Duration,
    /// The capture was damaged here: the reports cover the frames before it.
    pub damage: Option<CaptureError>,
    /// The driver stopped the replay before the input ended.
    pub stopped: bool,
}

/// Reads `source` into `stage` until its end, its damage or the driver
/// stops it, then finishes the stage; see the module documentation.
pub fn replay<S, St, D>(
    source: &mut S,
    stage: &mut St,
    driver: &mut D,
    options: &ReplayOptions,
) -> Result<Replayed, D::Error>
where
    S: Frames + ?Sized,
    St: Stage + ?Sized,
    D: Driver<St>,
{
    let started = Instant::now();
    let mut p = Pending::new();
    let mut frames: u64 = 0;
    let mut first_ts: Option<u64> = None;
    let mut damage = None;
    let mut stopped = false;
    let mut input = 0;
    while !stopped {
        let (k, raw) = match source.next_frame() {
            None => break,
            Some(Ok(frame)) => frame,
            Some(Err(e)) if e.is_fatal() => {
                damage = Some(e);
                break;
            }
            Some(Err(e)) => {
                // Told once per interface; counted every time.
                if !matches!(e.in_file(), CaptureError::Skipped { .. }) {
                    driver.warning(&e);
                }
                p.skipped += 1;
                continue;
            }
        };
        frames += 1;
        p.seen(stage, driver, raw.ts_ns)?;
        if k != input {
            p.deliver(stage, driver)?;
            stage.switch_input(k);
            input = k;
            p.input = u16::try_from(k).unwrap_or(u16::MAX);
        }
        if let Some(speed) = options.speed {
            let first = *first_ts.get_or_insert(raw.ts_ns);
            let offset = raw.ts_ns.saturating_sub(first) as f64 / 1e9 / speed;
            let due = started + Duration::from_secs_f64(offset);
            // When the driver stops it, this packet is processed; the replay stops after it.
            stopped = !p.pace(stage, driver, due)?;
        }
        p.parse_into(stage, driver, &raw)?;
        if frames.is_multiple_of(options.service_every.max(1)) {
            p.deliver(stage, driver)?;
            if !driver.service(stage)? {
                stopped = true;
            }
        }
        if frames.is_multiple_of(PROGRESS_EVERY) {
            driver.progress(&source.source_stats());
        }
    }
    p.finish(stage, driver)?;
    Ok(Replayed {
        frames,
        source: source.source_stats(),
        elapsed: started.elapsed(),
        damage,
        stopped,
    })
}

/// The records parsed and not yet handed to the stage, and the reports
/// the stage made and not yet handed to the driver.
struct Pending {
    batch: Vec<PacketRecord>,
    out: Outputs,
    /// Skipped frames not yet counted.
    skipped: u64,
    /// The latest frame time seen.
    last_ts: Option<u64>,
    /// The input being read, as its frames' interface number.
    input: u16,
    /// Packet time of the last [`Stage::flush`].
    flushed_ns: u64,
}

impl Pending {
    fn new() -> Pending {
        Pending {
            batch: Vec::with_capacity(BATCH),
            out: Outputs::default(),
            skipped: 0,
            last_ts: None,
            input: 0,
            flushed_ns: 0,
        }
    }

    /// A frame at `ts_ns` came: the skipped frames before it are counted
    /// first, at the time of the frame before them (else at its own).
    #[inline]
    fn seen<St, D>(&mut self, stage: &mut St, driver: &mut D, ts_ns: u64) -> Result<(), D::Error>
    where
        St: Stage + ?Sized,
        D: Driver<St>,
    {
        if self.skipped > 0 {
            let at = self.last_ts.unwrap_or(ts_ns);
            let n = std::mem::take(&mut self.skipped);
            self.count_skipped(stage, driver, at, n)?;
        }
        self.last_ts = Some(ts_ns);
        Ok(())
    }

    /// The input ended: skipped frames at its end counted, the last batch
    /// delivered, the stage finished and its last reports handed over.
    fn finish<St, D>(&mut self, stage: &mut St, driver: &mut D) -> Result<(), D::Error>
    where
        St: Stage + ?Sized,
        D: Driver<St>,
    {
        if let (Some(at), true) = (self.last_ts, self.skipped > 0) {
            self.count_skipped(stage, driver, at, self.skipped)?;
        }
        self.deliver(stage, driver)?;
        stage.finish(&mut self.out).map_err(HostError::from)?;
        stage.end(&mut self.out).map_err(HostError::from)?;
        driver.reports(stage, &mut self.out.reports)
    }

    /// Waits until `due` (`ReplayOptions::speed`), the pending batch
    /// delivered first, serving the driver meanwhile; false when the driver
    /// stops the replay.
    fn pace<St, D>(&mut self, stage: &mut St, driver: &mut D, due: Instant) -> Result<bool, D::Error>
    where
        St: Stage + ?Sized,
        D: Driver<St>,
    {
        if due <= Instant::now() {
            return Ok(true);
        }
        self.deliver(stage, driver)?;
        while let Some(left) = due.checked_duration_since(Instant::now()) {
            if !driver.service(stage)? {
                return Ok(false);
            }
            std::thread::sleep(left.min(Duration::from_millis(1)));
        }
        Ok(true)
    }

    /// Parses one frame into the batch (delivered when full), or notes it
    /// unparsed in order, after the records before it.
    #[inline]
    fn parse_into<St, D>(
        &mut self,
        stage: &mut St,
        driver: &mut D,
        raw: &RawPacket<'_>,
    ) -> Result<(), D::Error>
    where
        St: Stage + ?Sized,
        D: Driver<St>,
    {
        match clarion_wire::parse_frame(raw.link, raw.data, raw.ts_ns, raw.orig_len) {
            Ok(rec) => {
                if stage.takes_frames() {
                    let frame = Frame {
                        link: raw.link,
                        data: raw.data,
                        orig_len: raw.orig_len,
                        interface: self.input,
                    };
                    stage.frame(&rec, &frame);
                }
                self.batch.push(rec);
                if self.batch.len() == BATCH {
                    self.deliver(stage, driver)?;
                }
            }
            Err(e) => {
                let why = if e.is_not_ip() {
                    Unparsed::NotIp
                } else {
                    Unparsed::Malformed
                };
                self.deliver(stage, driver)?;
                stage
                    .unparsed(raw.ts_ns, why, &mut self.out)
                    .map_err(HostError::from)?;
            }
        }
        Ok(())
    }

    /// Counts `n` skipped frames as malformed at time `at` (after the pending batch).
    fn count_skipped<St, D>(
        &mut self,
        stage: &mut St,
        driver: &mut D,
        at: u64,
        n: u64,
    ) -> Result<(), D::Error>
    where
        St: Stage + ?Sized,
        D: Driver<St>,
    {
        self.deliver(stage, driver)?;
        for _ in 0..n {
            stage
                .unparsed(at, Unparsed::Malformed, &mut self.out)
                .map_err(HostError::from)?;
        }
        Ok(())
    }

    /// Hands the pending batch to the stage (flushing it when packet time
    /// has moved on by [`FLUSH_EVERY_NS`]) and its reports to the driver.
    /// Records and GPVs are a pipeline's to deliver to its sinks
    /// (`Pipeline::deliver_to`); what a stage leaves of them is dropped.
    fn deliver<St, D>(&mut self, stage: &mut St, driver: &mut D) -> Result<(), D::Error>
    where
        St: Stage + ?Sized,
        D: Driver<St>,
    {
        if let Some(last) = self.batch.last().map(|p| p.ts_ns) {
            stage.batch(&self.batch, &mut self.out).map_err(HostError::from)?;
            self.batch.clear();
            if last >= self.flushed_ns.saturating_add(FLUSH_EVERY_NS) {
                stage.flush(last);
                self.flushed_ns = last;
            }
            self.out.records.clear();
            self.out.gpvs.clear();
        }
        if !self.out.reports.is_empty() {
            driver.reports(stage, &mut self.out.reports)?;
        }
        Ok(())
    }
}
