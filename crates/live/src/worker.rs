//! One worker: a monitor fed by its receive queues, in Trumpet's loop.
//!
//! ```text
//! loop
//!     take up to RECV frames from each queue, parse, process in batches
//!     if a sweep is pending and the queues are empty or below the low-water mark
//!         run sweep steps for at most the step budget
//!     else if nothing arrived
//!         advance the clock to now - hidden delay (ends quiet epochs)
//!         wait for packets or the next epoch's end
//! ```
//!
//! The worker measures each epoch ([`EpochStats`]) and sends it with the
//! reports over a channel; it never blocks on that channel (unbounded), so
//! a slow sink cannot make the kernel drop packets unnoticed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clarion_engine::{Counters, EngineError, Monitor, Partials, Report, TriggerId, Unparsed};
use clarion_lang::spec::EventSpec;
use clarion_wire::PacketRecord;

use crate::packet_ring::poll_fds;
use crate::stats::{DelayHistogram, EpochStats, WorkerMetrics};
use crate::{Frame, LiveError, Source};

/// Frames taken from one queue before looking at the others and the sweep.
const RECV: usize = 256;
/// Flow visits of a sweep step between clock reads.
const STEP_VISITS: usize = 16;
/// Epochs whose largest queueing delay sets the clock's lag.
const LAG_EPOCHS: usize = 128;
/// The lag never exceeds this: beyond it, late packets are counted out of order.
const LAG_MAX_NS: u64 = 100_000_000;
/// Kernel drop counters (and queue occupancy) are read this often.
const DROP_READ: Duration = Duration::from_millis(1);

/// Nanoseconds since the Unix epoch (the clock packet timestamps use).
pub fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is valid for writes; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub id: u32,
    /// Longest a sweep step runs before the queues are looked at again.
    pub step_budget: Duration,
    /// Backlog (blocks or frames) at or under which sweep steps run between batches.
    pub low_water: usize,
    pub stop: Arc<AtomicBool>,
    pub deadline: Option<Instant>,
}

/// What a worker sends to the host.
#[derive(Debug)]
pub enum WorkerEvent {
    /// Memory committed and the clock started: packets are processed from now on.
    Ready(u32),
    Reports(u32, Vec<Report>),
    /// With `MonitorConfig::merge_output`: each finished sweep's statistics, for the host's merger.
    Partials(u32, Vec<Partials>),
    Epoch(EpochStats),
    Finished(u32, Box<WorkerSummary>),
    Failed(u32, LiveError),
}

/// A change of a running worker's events. Applied between batches, after
/// any pending sweep is finished (a trigger removed mid-sweep would lose
/// the window being swept), so a command waits at most one sweep and one
/// wait for packets (10 ms).
#[derive(Debug)]
pub enum WorkerCommand {
    /// [`Monitor::install`] (from the next window boundary), or with
    /// `start_ns` [`Monitor::install_at`] until `end_ns`.
    Install {
        spec: Box<EventSpec>,
        start_ns: Option<u64>,
        end_ns: Option<u64>,
        /// The trigger's id and the start of its first window.
        reply: Sender<Result<(TriggerId, u64), EngineError>>,
    },
    Remove {
        id: TriggerId,
        reply: Sender<Result<(), EngineError>>,
    },
    /// [`Monitor::set_end`].
    SetEnd { id: TriggerId, end_ns: Option<u64> },
}

#[derive(Clone, Debug, Default)]
pub struct WorkerSummary {
    pub counters: Counters,
    pub frames: u64,
    pub drops: u64,
    pub delays: DelayHistogram,
    pub epochs: u64,
    pub max_sweep_wall_ns: u64,
}

/// The epoch being received and the one being swept.
#[derive(Debug, Default)]
struct EpochTrack {
    current: EpochStats,
    delays: DelayHistogram,
    swept: Option<(EpochStats, Instant)>,
}

pub struct Worker {
    cfg: WorkerConfig,
    monitor: Monitor,
    sources: Vec<Box<dyn Source>>,
    tx: Sender<WorkerEvent>,
    metrics: Arc<WorkerMetrics>,
    batch: Vec<PacketRecord>,
    reports: Vec<Report>,
    track: EpochTrack,
    summary: WorkerSummary,
    /// The monitor's clock lags the wall clock by at least this much when
    /// the wire is quiet (see [`Source::hidden_delay`]) ...
    lag_floor_ns: u64,
    /// ... and by more when packets were seen arriving later than that:
    /// the largest queueing delay of each of the last epochs.
    recent_delays: [u64; LAG_EPOCHS],
    recent_pos: usize,
    last_counters: Counters,
    commands: Option<Receiver<WorkerCommand>>,
}

impl Worker {
    /// `monitor` must not sweep synchronously (`MonitorConfig::synchronous_sweep` false).
    pub fn new(
        cfg: WorkerConfig,
        monitor: Monitor,
        sources: Vec<Box<dyn Source>>,
        tx: Sender<WorkerEvent>,
        metrics: Arc<WorkerMetrics>,
    ) -> Worker {
        // One more millisecond for scheduling: a packet handed over late
        // must still find its epoch open.
        let lag =
            sources.iter().map(|s| s.hidden_delay()).max().unwrap_or_default() + Duration::from_millis(1);
        Worker {
            cfg,
            monitor,
            sources,
            tx,
            metrics,
            batch: Vec::with_capacity(clarion_engine::BATCH),
            reports: Vec::new(),
            track: EpochTrack::default(),
            summary: WorkerSummary::default(),
            lag_floor_ns: lag.as_nanos() as u64,
            recent_delays: [0; LAG_EPOCHS],
            recent_pos: 0,
            last_counters: Counters::default(),
            commands: None,
        }
    }

    /// Takes changes of its events from `commands` while it runs.
    pub fn with_commands(mut self, commands: Receiver<WorkerCommand>) -> Worker {
        self.commands = Some(commands);
        self
    }

    /// Applies the commands waiting, finishing a pending sweep first.
    fn apply_commands(&mut self) {
        let Some(rx) = &self.commands else { return };
        let Ok(first) = rx.try_recv() else { return };
        if self.monitor.sweep_pending() {
            while !self.monitor.sweep_step(usize::MAX, &mut self.reports) {}
            self.after_monitor();
        }
        let mut next = Some(first);
        while let Some(cmd) = next {
            match cmd {
                WorkerCommand::Install {
                    spec,
                    start_ns,
                    end_ns,
                    reply,
                } => {
                    let r = match start_ns {
                        Some(start) => self.monitor.install_at(*spec, start, end_ns),
                        None => self.monitor.install(*spec),
                    };
                    let first = |id| (id, self.monitor.first_window_ns(id).unwrap_or(0));
                    let _ = reply.send(r.map(first));
                }
                WorkerCommand::Remove { id, reply } => {
                    let _ = reply.send(self.monitor.remove(id).map(|_| ()));
                }
                WorkerCommand::SetEnd { id, end_ns } => self.monitor.set_end(id, end_ns),
            }
            next = self.commands.as_ref().and_then(|rx| rx.try_recv().ok());
        }
    }

    /// Runs until the stop flag is set or the deadline passes, then drains
    /// the queues, sweeps the current epoch, closes every window and sends
    /// the last reports and its summary.
    pub fn run(mut self) {
        let id = self.cfg.id;
        self.monitor.prefault();
        let now = realtime_ns();
        self.monitor
            .tick(now.saturating_sub(self.lag_ns()), &mut self.reports);
        self.track.current = self.new_epoch();
        let _ = self.tx.send(WorkerEvent::Ready(id));
        let mut last_drop_read = Instant::now();
        let mut fds: Vec<libc::pollfd> = self
            .sources
            .iter()
            .map(|s| libc::pollfd {
                fd: s.fd(),
                events: libc::POLLIN | libc::POLLERR,
                revents: 0,
            })
            .collect();
        loop {
            self.apply_commands();
            let stopping = self.cfg.stop.load(Ordering::Relaxed)
                || self.cfg.deadline.is_some_and(|d| Instant::now() >= d);
            let got = self.receive();
            // Drop counters and the queue's occupancy, every millisecond
            // whether or not the wire is busy.
            if last_drop_read.elapsed() >= DROP_READ {
                last_drop_read = Instant::now();
                if let Err(e) = self.read_drops() {
                    let _ = self.tx.send(WorkerEvent::Failed(id, e));
                    return;
                }
            }
            let low = self
                .sources
                .iter()
                .all(|s| s.backlog(self.cfg.low_water + 1) <= self.cfg.low_water);
            if self.monitor.sweep_pending() && (got == 0 || low || self.sweep_overdue()) {
                self.sweep_step();
            } else if got == 0 {
                if stopping {
                    break;
                }
                let now = realtime_ns();
                let lag = self.lag_ns();
                self.metrics.clock_lag_ns.store(lag, Ordering::Relaxed);
                let clock = now.saturating_sub(lag);
                self.monitor.tick(clock, &mut self.reports);
                self.after_monitor();
                if !self.monitor.sweep_pending() {
                    let epoch = self.monitor.epoch_ns().max(1);
                    let next_end = clock - clock % epoch + epoch;
                    let wait = Duration::from_nanos(next_end - clock).min(Duration::from_millis(10));
                    if let Err(e) = poll_fds(&mut fds, wait.max(Duration::from_micros(50))) {
                        let _ = self.tx.send(WorkerEvent::Failed(
                            id,
                            LiveError::os("poll", "wait for packets", e),
                        ));
                        return;
                    }
                }
            }
            self.flush_reports();
        }
        let _ = self.read_drops();
        self.monitor.finish(&mut self.reports);
        self.after_monitor();
        self.flush_reports();
        self.summary.counters = self.monitor.counters();
        let _ = self.tx.send(WorkerEvent::Finished(id, Box::new(self.summary)));
    }

    /// How far behind the wall clock a tick may move the monitor's clock:
    /// the floor, or a quarter more than the largest recent queueing delay.
    fn lag_ns(&self) -> u64 {
        let seen = self.recent_delays.iter().max().copied().unwrap_or(0);
        self.lag_floor_ns.max((seen + seen / 4).min(LAG_MAX_NS))
    }

    fn new_epoch(&self) -> EpochStats {
        let epoch = self.monitor.epoch_ns().max(1);
        let now = self.monitor.now_ns();
        EpochStats {
            worker: self.cfg.id,
            epoch_start_ns: now - now % epoch,
            epoch_ns: epoch,
            ..EpochStats::default()
        }
    }

    /// Takes what the queues hold, up to [`RECV`] frames each; returns how many.
    fn receive(&mut self) -> usize {
        let mut total = 0;
        for i in 0..self.sources.len() {
            let link = self.sources[i].link();
            let monitor = &mut self.monitor;
            let batch = &mut self.batch;
            let reports = &mut self.reports;
            let delays = &mut self.track.delays;
            let mut handle =
                |fr: Frame<'_>| match clarion_wire::parse_frame(link, fr.data, fr.ts_ns, fr.orig_len) {
                    Ok(rec) => {
                        batch.push(rec);
                        if batch.len() == batch.capacity() {
                            process(monitor, batch, reports, delays);
                        }
                    }
                    Err(e) => {
                        process(monitor, batch, reports, delays);
                        let why = if e.is_not_ip() {
                            Unparsed::NotIp
                        } else {
                            Unparsed::Malformed
                        };
                        monitor.note_unparsed(fr.ts_ns, why, reports);
                    }
                };
            let n = self.sources[i].recv(RECV, &mut handle);
            process(
                &mut self.monitor,
                &mut self.batch,
                &mut self.reports,
                &mut self.track.delays,
            );
            total += n;
        }
        self.summary.frames += total as u64;
        if total > 0 {
            self.after_monitor();
        }
        total
    }

    /// A sweep pending for half an epoch runs between batches even when
    /// the queue stays above the low-water mark, so it ends before the next
    /// epoch does (a late sweep would stop packet processing until it ends).
    fn sweep_overdue(&self) -> bool {
        self.track
            .swept
            .as_ref()
            .is_some_and(|(st, began)| began.elapsed().as_nanos() as u64 * 2 >= st.epoch_ns)
    }

    fn sweep_step(&mut self) {
        let started = Instant::now();
        let budget = self.cfg.step_budget;
        loop {
            if self.monitor.sweep_step(STEP_VISITS, &mut self.reports) || started.elapsed() >= budget {
                break;
            }
        }
        if let Some((st, _)) = self.track.swept.as_mut() {
            st.sweep_busy_ns += started.elapsed().as_nanos() as u64;
        }
        self.after_monitor();
    }

    /// Reads the kernel's drop counters into the monitor, and samples the
    /// queues' occupancy (a walk over the ring, so not on every batch).
    fn read_drops(&mut self) -> Result<(), LiveError> {
        let mut drops = 0;
        for s in &mut self.sources {
            drops += s.take_drops()?;
            let backlog = s.backlog(s.capacity()) as u64;
            self.track.current.backlog_max = self.track.current.backlog_max.max(backlog);
        }
        if drops > 0 {
            self.monitor.note_dropped(drops);
            self.track.current.drops += drops;
            self.summary.drops += drops;
            self.metrics.drops.fetch_add(drops, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Follows the monitor's epochs: an epoch ended when its clock left it;
    /// the ended epoch's statistics go out once its sweep is done.
    fn after_monitor(&mut self) {
        let c = self.monitor.counters();
        let late = c.sweeps_late > self.last_counters.sweeps_late;
        let now = self.monitor.now_ns();
        let cur = &self.track.current;
        let epoch_ended = now >= cur.epoch_start_ns + cur.epoch_ns;
        if epoch_ended {
            if let Some((mut st, _)) = self.track.swept.take() {
                // Its sweep was finished on the spot by the monitor: late.
                st.late = true;
                self.emit(st);
            }
            let next = self.new_epoch();
            let mut st = std::mem::replace(&mut self.track.current, next);
            st.packets = c.packets - self.last_counters.packets;
            st.delay_p99_ns = self.track.delays.quantile(0.99);
            st.delay_max_ns = self.track.delays.max();
            self.recent_delays[self.recent_pos] = st.delay_max_ns;
            self.recent_pos = (self.recent_pos + 1) % LAG_EPOCHS;
            self.summary.delays.merge(&self.track.delays);
            self.track.delays = DelayHistogram::default();
            self.track.swept = Some((st, Instant::now()));
            self.last_counters.packets = c.packets;
        } else if late {
            if let Some((mut st, _)) = self.track.swept.take() {
                st.late = true;
                self.emit(st);
            }
        }
        if !self.monitor.sweep_pending() {
            if let Some((mut st, began)) = self.track.swept.take() {
                st.sweep_wall_ns = began.elapsed().as_nanos() as u64;
                self.emit(st);
            }
        }
        self.last_counters.sweeps_late = c.sweeps_late;
        let m = &self.metrics;
        m.packets.store(c.packets, Ordering::Relaxed);
        m.bytes.store(c.bytes, Ordering::Relaxed);
        m.malformed.store(c.malformed, Ordering::Relaxed);
        m.sweeps_late.store(c.sweeps_late, Ordering::Relaxed);
        m.reports.store(c.reports, Ordering::Relaxed);
        m.flows_active.store(c.flows_active, Ordering::Relaxed);
    }

    fn emit(&mut self, st: EpochStats) {
        self.summary.epochs += 1;
        self.summary.max_sweep_wall_ns = self.summary.max_sweep_wall_ns.max(st.sweep_wall_ns);
        let m = &self.metrics;
        m.epochs.fetch_add(1, Ordering::Relaxed);
        m.delay_max_ns.fetch_max(st.delay_max_ns, Ordering::Relaxed);
        m.last_delay_p99_ns.store(st.delay_p99_ns, Ordering::Relaxed);
        m.last_sweep_wall_ns.store(st.sweep_wall_ns, Ordering::Relaxed);
        m.max_sweep_wall_ns.fetch_max(st.sweep_wall_ns, Ordering::Relaxed);
        let _ = self.tx.send(WorkerEvent::Epoch(st));
    }

    fn flush_reports(&mut self) {
        if !self.reports.is_empty() {
            let r = std::mem::take(&mut self.reports);
            let _ = self.tx.send(WorkerEvent::Reports(self.cfg.id, r));
        }
        let p = self.monitor.take_partials();
        if !p.is_empty() {
            let _ = self.tx.send(WorkerEvent::Partials(self.cfg.id, p));
        }
    }
}

/// Processes the batch and records each packet's queueing delay.
fn process(
    monitor: &mut Monitor,
    batch: &mut Vec<PacketRecord>,
    reports: &mut Vec<Report>,
    delays: &mut DelayHistogram,
) {
    if batch.is_empty() {
        return;
    }
    monitor.process_batch(batch, reports);
    let now = realtime_ns();
    for p in batch.iter() {
        delays.record(now.saturating_sub(p.ts_ns));
    }
    batch.clear();
}
