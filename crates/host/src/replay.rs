//! The replay loop: a capture into a stage, reports to a driver.
//!
//! Frames are parsed as they are read and handed to the stage in batches
//! of up to [`BATCH`] records ([`Stage::process_batch`] overlaps their
//! cache misses). A frame that does not parse ends the batch before it,
//! so the stage sees every frame in input order. Every
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

use clarion_capture::{CaptureError, SourceStats};
use clarion_engine::{Report, Unparsed, BATCH};
use clarion_wire::PacketRecord;

use crate::{Frames, HostError, Stage};

/// Frames between progress calls.
const PROGRESS_EVERY: u64 = 65_536;

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
    let service_every = options.service_every.max(1);
    let mut batch: Vec<PacketRecord> = Vec::with_capacity(BATCH);
    let mut out: Vec<Report> = Vec::new();
    let mut frames: u64 = 0;
    let mut first_ts: Option<u64> = None;
    let mut damage = None;
    let mut stopped = false;
    let mut input = 0;
    // Skipped frames not yet counted, and the latest frame time seen.
    let mut skipped: u64 = 0;
    let mut last_ts: Option<u64> = None;
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
                skipped += 1;
                continue;
            }
        };
        frames += 1;
        if skipped > 0 {
            let at = last_ts.unwrap_or(raw.ts_ns);
            count_skipped(
                stage,
                driver,
                &mut batch,
                &mut out,
                at,
                std::mem::take(&mut skipped),
            )?;
        }
        last_ts = Some(raw.ts_ns);
        if k != input {
            deliver(stage, driver, &mut batch, &mut out)?;
            stage.switch_input(k);
            input = k;
        }
        if let Some(speed) = options.speed {
            let first = *first_ts.get_or_insert(raw.ts_ns);
            let offset = raw.ts_ns.saturating_sub(first) as f64 / 1e9 / speed;
            let due = started + Duration::from_secs_f64(offset);
            if due > Instant::now() {
                deliver(stage, driver, &mut batch, &mut out)?;
                while let Some(left) = due.checked_duration_since(Instant::now()) {
                    if !driver.service(stage)? {
                        // This packet is processed; the replay stops after it.
                        stopped = true;
                        break;
                    }
                    std::thread::sleep(left.min(Duration::from_millis(1)));
                }
            }
        }
        match clarion_wire::parse_frame(raw.link, raw.data, raw.ts_ns, raw.orig_len) {
            Ok(rec) => {
                stage.frame(&rec, &raw);
                batch.push(rec);
                if batch.len() == BATCH {
                    deliver(stage, driver, &mut batch, &mut out)?;
                }
            }
            Err(e) => {
                let why = if e.is_not_ip() {
                    Unparsed::NotIp
                } else {
                    Unparsed::Malformed
                };
                let ts_ns = raw.ts_ns;
                deliver(stage, driver, &mut batch, &mut out)?;
                stage.note_unparsed(ts_ns, why, &mut out)?;
            }
        }
        if frames.is_multiple_of(service_every) {
            deliver(stage, driver, &mut batch, &mut out)?;
            if !driver.service(stage)? {
                stopped = true;
            }
        }
        if frames.is_multiple_of(PROGRESS_EVERY) {
            driver.progress(&source.source_stats());
        }
    }
    if let (Some(at), true) = (last_ts, skipped > 0) {
        count_skipped(stage, driver, &mut batch, &mut out, at, skipped)?;
    }
    deliver(stage, driver, &mut batch, &mut out)?;
    stage.finish(&mut out)?;
    driver.reports(stage, &mut out)?;
    Ok(Replayed {
        frames,
        source: source.source_stats(),
        elapsed: started.elapsed(),
        damage,
        stopped,
    })
}

/// Counts `n` skipped frames as malformed at time `at` (after the pending batch).
fn count_skipped<St, D>(
    stage: &mut St,
    driver: &mut D,
    batch: &mut Vec<PacketRecord>,
    out: &mut Vec<Report>,
    at: u64,
    n: u64,
) -> Result<(), D::Error>
where
    St: Stage + ?Sized,
    D: Driver<St>,
{
    deliver(stage, driver, batch, out)?;
    for _ in 0..n {
        stage.note_unparsed(at, Unparsed::Malformed, out)?;
    }
    Ok(())
}

/// Hands the pending batch to the stage and its reports to the driver.
fn deliver<St, D>(
    stage: &mut St,
    driver: &mut D,
    batch: &mut Vec<PacketRecord>,
    out: &mut Vec<Report>,
) -> Result<(), D::Error>
where
    St: Stage + ?Sized,
    D: Driver<St>,
{
    if !batch.is_empty() {
        stage.process_batch(batch, out)?;
        batch.clear();
    }
    if !out.is_empty() {
        driver.reports(stage, out)?;
    }
    Ok(())
}
