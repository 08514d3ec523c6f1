//! One worker: a monitor fed by its receive queues, in Trumpet's loop.
//!
//! ```text
//! loop
//!     take up to RECV frames from each queue, parse, process in batches
//!         (by the monitor, then by the flow meter and the GPV cache when there are)
//!     if a sweep is pending and the queues are empty or below the low-water mark
//!         run sweep steps for at most the step budget
//!     else if nothing arrived
//!         advance the clock to now - hidden delay (ends quiet epochs)
//!         wait for packets or the next epoch's end
//! ```
//!
//! The worker measures each epoch ([`EpochStats`]) and sends it with the
//! reports (and its meter's flow records and its cache's GPVs) over a channel; it never blocks on that channel (unbounded), so
//! a slow sink cannot make the kernel drop packets unnoticed.
//!
//! # Interfaces going down or away
//! A packet socket reports its interface going down or being removed
//! (ENETDOWN, read with the drop counters every millisecond); lost carrier
//! and an interface coming back it does not, so the worker also reads each
//! interface's state ([`LinkWatch`]) every [`LINK_CHECK`]. While one is
//! down the worker keeps its clock and sweeps going and tells its monitor
//! it is blind ([`Monitor::note_blind`]), from the last time the interface
//! was seen up to the first time it is seen up again, so every window
//! overlapping the outage is reported incomplete. An interface set down
//! and up again needs nothing more (the kernel re-attaches the socket); one
//! removed and created again under its name is captured anew
//! ([`Source::reopen`]). One down longer than
//! [`WorkerConfig::down_timeout`] ends the worker's run as a stop would,
//! saying so ([`LinkEvent::Lost`]).
//!
//! # Export policies
//! A worker given an [`Exporter`] ([`Worker::with_exporter`]) offers it
//! every frame that parses, with the frame's bytes, as a file replay's
//! host stage does: the exporter is the worker's own (no lock, no copy,
//! no channel on the packet path; its sockets are non-blocking and its
//! files buffered, so a slow collector or disk costs counted drops, never
//! a wait on the wire). The host gives each worker's exporter its own
//! header-stream id and file names. It is ticked with the wall clock
//! every [`EXPORT_TICK`], busy wire or quiet, so a half-full header
//! datagram leaves at most [`clarion_export::FLUSH_AFTER_NS`] plus a tick
//! after its first packet, and finished when the worker ends; its
//! counters go out in the [`WorkerSummary`]. Cost: one classification per
//! parsed packet (a hash lookup on a fast-path hit) and, for a taken one,
//! its destinations' work.
//!
//! The policies change at runtime ([`WorkerCommand::SetExports`], between
//! batches, like an event install: the frames wait in the queue, never
//! dropped for it): the exporter keeps the sinks still used. A worker
//! given an exporter without policies offers it nothing (no cost) until
//! some arrive, and reports no export counters if none ever did.
//!
//! # Capture around events
//! A worker given a ring ([`Worker::with_captures`]: the host has a
//! capture directory) copies every frame that parses into it while an
//! installed event says `then capture`; before one is, the ring is kept
//! for no time and skips frames at no cost, and an install that captures
//! tells it how long to keep them ([`CaptureRequest::Keep`], before the
//! event itself is installed). The host, holding the merged report, asks every
//! worker to open the capture ([`CaptureRequest`], between batches): the
//! worker selects the ring's frames of the group and span, replies where
//! its ring still reaches back, adds its later frames, and sends them
//! ([`WorkerEvent::CaptureParts`]) once the monitor's clock passes the
//! span's end, over the unbounded event channel (never a wait on the
//! wire). As it ends, it hands the ring itself to the host
//! ([`WorkerEvent::CaptureRing`]), which serves the last reports' captures
//! from it. Cost: a frame copy per parsed packet, one more per open
//! capture taking it; memory: the ring's bytes per worker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clarion_engine::{Counters, EngineError, Monitor, Partials, Report, TriggerId, Unparsed};
use clarion_event_capture::{Part, RingJobs, Selection, StoredFrame};
use clarion_export::{ExportError, ExportStats, Exporter};
use clarion_flows::FlowMeter;
use clarion_gpv::{CacheConfig, Gpv, GpvCache};
use clarion_lang::spec::{EventSpec, ExportSpec};
use clarion_records::FlowRecord;
use clarion_wire::PacketRecord;

use crate::adapt::LiveAdapt;
use crate::interface::{LinkState, LinkWatch};
use crate::packet_ring::poll_fds;
use crate::stats::{DelayHistogram, EpochStats, WorkerMetrics};
use crate::{Frame, InterfaceLost, LiveError, Source};

/// Frames taken from one queue before looking at the others and the sweep.
const RECV: usize = 256;
/// Flow visits of a sweep step between clock reads.
const STEP_VISITS: usize = 16;
/// Epochs whose longest unseen packet sets the clock's lag.
const LAG_EPOCHS: usize = 128;
/// The lag never exceeds this: beyond it, late packets are counted out of order.
const LAG_MAX_NS: u64 = 100_000_000;
/// Within this long of the last frames the wire counts as busy: a worker
/// that finds its sources empty naps for [`NAP`] instead of sleeping on
/// them. Asleep on a socket it would be woken by every packet (a frames
/// ring or AF_XDP signals each one), a wake-up the kernel pays for on the
/// packet's path: at 1 Mpps that halved the rate a veth could deliver.
const BUSY: Duration = Duration::from_millis(1);
/// A nap on a busy wire: at most this much delay added to a packet, at
/// most 1/NAP wake-ups a second whatever the packet rate.
const NAP: Duration = Duration::from_micros(20);
/// The shortest wait on the sockets (below, a timer costs more than it saves).
const MIN_WAIT: Duration = Duration::from_micros(5);
/// Kernel drop counters (and queue occupancy) are read this often.
const DROP_READ: Duration = Duration::from_millis(1);
/// Each interface's state is read this often: the longest lost carrier,
/// or an interface back up, goes unnoticed.
pub const LINK_CHECK: Duration = Duration::from_millis(100);
/// The exporter is ticked this often (the longest a quiet worker waits
/// for packets, so a quiet wire ticks it as often as a busy one).
pub const EXPORT_TICK: Duration = Duration::from_millis(10);

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
    /// How far the monitor's clock stays behind the wall clock on a quiet
    /// wire beyond what the sources hide ([`Source::hidden_delay`]): room
    /// for a packet the kernel stamped but has not yet put in the ring.
    pub clock_lag: Duration,
    pub stop: Arc<AtomicBool>,
    pub deadline: Option<Instant>,
    /// How long an interface may stay down (or away) before the worker
    /// stops with [`LinkEvent::Lost`]; zero stops at once.
    pub down_timeout: Duration,
    /// A flow meter beside the monitor (`--records`): its records go out
    /// as [`WorkerEvent::Records`].
    pub records: Option<FlowMeter>,
    /// A GPV cache beside the monitor (`--gpv`, `--app`): its GPVs go out
    /// as [`WorkerEvent::Gpvs`]. The caller checks the configuration
    /// (`GpvCache::new`); one it refuses makes no GPVs.
    pub gpvs: Option<CacheConfig>,
}

/// What a worker found of its interfaces (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkEvent {
    /// Down since about `since_ns` (Unix ns: the last time it was seen up).
    Down { interface: String, since_ns: u64 },
    /// The interface down is not there any more: the worker waits for one
    /// of its name.
    Removed { interface: String },
    /// Up again after `down_ns`; `reopened` when it had been removed and
    /// the capture was opened on the interface now of its name.
    Up {
        interface: String,
        since_ns: u64,
        down_ns: u64,
        reopened: bool,
    },
    /// Down longer than the timeout: the worker stops.
    Lost(InterfaceLost),
}

/// What a worker sends to the host.
#[derive(Debug)]
pub enum WorkerEvent {
    /// Memory committed and the clock started: packets are processed from now on.
    Ready(u32),
    Reports(u32, Vec<Report>),
    /// Flow records the worker's meter ended (see [`WorkerConfig::records`]).
    Records(u32, Vec<FlowRecord>),
    /// GPVs the worker's cache evicted (see [`WorkerConfig::gpvs`]).
    Gpvs(u32, Vec<Gpv>),
    /// With `MonitorConfig::merge_output`: each finished sweep's statistics, for the host's merger.
    Partials(u32, Vec<Partials>),
    Epoch(EpochStats),
    Finished(u32, Box<WorkerSummary>),
    Failed(u32, LiveError),
    Link(u32, LinkEvent),
    /// Captures around events whose span has passed (see [`Worker::with_captures`]).
    CaptureParts(u32, Vec<Part>),
    /// The worker's ring of recent frames, with the captures still open
    /// on it, handed over as it ends (before `Finished` or `Failed`): the
    /// host serves later captures from it.
    CaptureRing(u32, Box<RingJobs>),
    /// Not from a worker: the host's reader is woken to look elsewhere
    /// (the host's `HostWaker`: a message for the agent arrived).
    Wake,
}

/// What the host asks of a worker's ring of recent frames.
#[derive(Debug)]
pub enum CaptureRequest {
    /// A capture around an event to open on the ring: `reply` gets where
    /// the ring's frames of it start (see [`RingJobs::open`]); its frames
    /// come back as a [`WorkerEvent::CaptureParts`] of the same `id`.
    Open {
        id: u64,
        sel: Selection,
        reply: Sender<u64>,
    },
    /// Keep frames at least this long behind the monitor's clock: an event
    /// that captures was installed (a ring kept for no time is not fed).
    Keep(u64),
}

impl WorkerCapture {
    /// Does what the host asked, in the order asked.
    fn serve_requests(&mut self) {
        while let Ok(req) = self.requests.try_recv() {
            match req {
                CaptureRequest::Open { id, sel, reply } => {
                    let from = self.jobs.open(id, sel);
                    // The host stops waiting after a while: it may be gone.
                    let _ = reply.send(from);
                }
                CaptureRequest::Keep(keep_ns) => self.jobs.keep_at_least(keep_ns),
            }
        }
    }
}

/// A worker's ring of recent frames and where capture requests come from.
struct WorkerCapture {
    jobs: RingJobs,
    requests: Receiver<CaptureRequest>,
    parts: Vec<Part>,
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
    /// [`Exporter::set_policies`]; a worker without an exporter replies
    /// `None` (see [`Worker::with_exporter`]).
    SetExports {
        policies: Arc<[ExportSpec]>,
        reply: Sender<Option<Result<(), ExportError>>>,
    },
    /// The exporter's counters so far (`None` without an exporter).
    ExportStats { reply: Sender<Option<ExportStats>> },
}

#[derive(Clone, Debug, Default)]
pub struct WorkerSummary {
    pub counters: Counters,
    pub frames: u64,
    pub drops: u64,
    pub delays: DelayHistogram,
    pub epochs: u64,
    pub max_sweep_wall_ns: u64,
    /// The exporter's counters, finished (see [`Worker::with_exporter`]).
    pub exports: Option<ExportStats>,
}

/// An interface down, as its worker saw it.
#[derive(Debug)]
struct Outage {
    /// The last time it was seen up (Unix ns): the worker is blind from then.
    since_ns: u64,
    /// When the worker noticed (the timeout counts from here).
    noticed: Instant,
    /// Removed (its name gone, or now another interface's).
    gone: bool,
    /// Captured anew on the interface now of its name.
    reopened: bool,
    /// Why the last attempt to capture it anew failed.
    why: Option<String>,
}

/// One source's interface.
#[derive(Debug)]
struct Link {
    /// `None` when no socket could be opened to watch it: then only the
    /// packet socket's ENETDOWN tells (never seen; not worth failing for).
    watch: Option<LinkWatch>,
    name: String,
    down: Option<Outage>,
    /// The last time a state check found it up (Unix ns).
    seen_up_ns: u64,
}

/// The epoch being received and the one being swept.
#[derive(Debug, Default)]
struct EpochTrack {
    current: EpochStats,
    delays: DelayHistogram,
    /// The longest a packet of the epoch stayed unseen (see [`Worker::quiet_ns`]).
    unseen_max_ns: u64,
    swept: Option<(EpochStats, Instant)>,
}

pub struct Worker {
    cfg: WorkerConfig,
    monitor: Monitor,
    /// Taken from `cfg.records`.
    meter: Option<FlowMeter>,
    /// Built from `cfg.gpvs`.
    gpv_cache: Option<GpvCache>,
    gpvs: Vec<Gpv>,
    sources: Vec<Box<dyn Source>>,
    tx: Sender<WorkerEvent>,
    metrics: Arc<WorkerMetrics>,
    batch: Vec<PacketRecord>,
    reports: Vec<Report>,
    /// The flow meter's ended records, sent with the reports.
    records: Vec<FlowRecord>,
    track: EpochTrack,
    /// Degraded mode (the monitor was built with `MonitorConfig::adapt`).
    adapt: Option<LiveAdapt>,
    summary: WorkerSummary,
    /// The monitor's clock lags the wall clock by at least this much when
    /// the wire is quiet (see [`Source::hidden_delay`]) ...
    lag_floor_ns: u64,
    /// ... and by more when packets were seen arriving later than that:
    /// the longest a packet of each of the last epochs stayed unseen.
    recent_unseen: [u64; LAG_EPOCHS],
    recent_pos: usize,
    /// When the sources were last found empty (Unix ns, read before them):
    /// a packet stamped before it that a later read finds was unseen in
    /// the kernel for at least the difference. That is the gap the lag
    /// must cover; the queueing delay also counts the worker's own wake-up,
    /// which costs no packet its epoch.
    quiet_ns: u64,
    /// When the sources last gave frames (see [`BUSY`]).
    last_frames: Instant,
    last_counters: Counters,
    commands: Option<Receiver<WorkerCommand>>,
    /// Beside `sources`, one each.
    links: Vec<Link>,
    /// When the interfaces' states were last read (`None`: not yet).
    last_link_check: Option<Instant>,
    /// A socket reported its interface down: read the states at once.
    link_news: bool,
    /// When the drop counters and socket errors were last read (Unix ns):
    /// an interface a socket reports down was up then.
    last_drop_read_ns: u64,
    /// An interface down for longer than the timeout: the run ends.
    lost: Option<InterfaceLost>,
    /// Export policies on the frames (see the module documentation).
    exporter: Option<WorkerExporter>,
    /// Captures around events (see [`Worker::with_captures`]).
    capture: Option<WorkerCapture>,
}

// A worker moves to its own thread with its exporter (sockets, files,
// classifier): all must be Send, checked here at compile time.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Exporter>();
    send::<Worker>();
};

/// A worker's exporter, and the interface number its header records carry
/// for each source's frames.
struct WorkerExporter {
    exporter: Exporter,
    /// Beside `sources`, one each.
    interfaces: Vec<u16>,
    ticked: Instant,
}

impl Worker {
    /// `monitor` must not sweep synchronously (`MonitorConfig::synchronous_sweep` false).
    pub fn new(
        mut cfg: WorkerConfig,
        monitor: Monitor,
        sources: Vec<Box<dyn Source>>,
        tx: Sender<WorkerEvent>,
        metrics: Arc<WorkerMetrics>,
    ) -> Worker {
        // A packet handed over late must still find its epoch open.
        let lag = sources.iter().map(|s| s.hidden_delay()).max().unwrap_or_default() + cfg.clock_lag;
        let monitor_adapts = monitor.shed().is_some();
        if monitor_adapts {
            metrics.adapting.store(true, Ordering::Relaxed);
            metrics.cost_factor_milli.store(1000, Ordering::Relaxed);
        }
        let now = realtime_ns();
        let links = sources
            .iter()
            .map(|s| {
                let (name, index) = s.interface();
                Link {
                    watch: LinkWatch::new(name, index).ok(),
                    name: name.to_string(),
                    down: None,
                    seen_up_ns: now,
                }
            })
            .collect();
        let meter = cfg.records.take();
        let gpv_cache = cfg.gpvs.and_then(|c| GpvCache::new(c).ok());
        Worker {
            cfg,
            monitor,
            meter,
            sources,
            tx,
            metrics,
            batch: Vec::with_capacity(clarion_engine::BATCH),
            reports: Vec::new(),
            records: Vec::new(),
            gpv_cache,
            gpvs: Vec::new(),
            track: EpochTrack::default(),
            adapt: monitor_adapts.then(LiveAdapt::new).flatten(),
            summary: WorkerSummary::default(),
            lag_floor_ns: lag.as_nanos() as u64,
            recent_unseen: [0; LAG_EPOCHS],
            recent_pos: 0,
            quiet_ns: 0,
            last_frames: Instant::now(),
            last_counters: Counters::default(),
            commands: None,
            links,
            last_link_check: None,
            link_news: false,
            last_drop_read_ns: now,
            lost: None,
            exporter: None,
            capture: None,
        }
    }

    /// Keeps every frame that parses in `jobs`' ring, opens the captures
    /// `requests` ask for on it, and sends each capture's frames once the
    /// monitor's clock passes its end (see the module documentation).
    pub fn with_captures(mut self, jobs: RingJobs, requests: Receiver<CaptureRequest>) -> Worker {
        self.capture = Some(WorkerCapture {
            jobs,
            requests,
            parts: Vec::new(),
        });
        self
    }

    /// Opens the captures asked for, lets the ring forget what the
    /// monitor's clock has left behind, and sends the captures it ended.
    fn service_captures(&mut self) {
        let Some(c) = &mut self.capture else { return };
        c.serve_requests();
        let now = self.monitor.now_ns();
        c.jobs.processed(now);
        c.jobs.advance(now);
        c.jobs.take_due(&mut c.parts);
        if !c.parts.is_empty() {
            let parts = std::mem::take(&mut c.parts);
            let _ = self.tx.send(WorkerEvent::CaptureParts(self.cfg.id, parts));
        }
    }

    /// Hands the ring and its open captures to the host (the worker ends),
    /// with the captures asked for meanwhile opened on it.
    fn finish_captures(&mut self) {
        let Some(mut c) = self.capture.take() else { return };
        c.serve_requests();
        let _ = self
            .tx
            .send(WorkerEvent::CaptureRing(self.cfg.id, Box::new(c.jobs)));
    }

    /// Offers every frame that parses to `exporter` (see the module
    /// documentation). `interfaces[i]` is the interface number of source
    /// `i`'s frames in header records (missing ones: the source's index).
    pub fn with_exporter(mut self, exporter: Exporter, interfaces: &[u16]) -> Worker {
        let interfaces = (0..self.sources.len())
            .map(|i| {
                interfaces
                    .get(i)
                    .copied()
                    .unwrap_or(u16::try_from(i).unwrap_or(u16::MAX))
            })
            .collect();
        self.exporter = Some(WorkerExporter {
            exporter,
            interfaces,
            ticked: Instant::now(),
        });
        self
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
                WorkerCommand::SetExports { policies, reply } => {
                    let r = self.exporter.as_mut().map(|x| x.exporter.set_policies(&policies));
                    let _ = reply.send(r);
                }
                WorkerCommand::ExportStats { reply } => {
                    let _ = reply.send(self.exporter.as_ref().map(|x| x.exporter.stats()));
                }
            }
            next = self.commands.as_ref().and_then(|rx| rx.try_recv().ok());
        }
    }

    /// Runs until the stop flag is set or the deadline passes, then drains
    /// the queues, sweeps the current epoch, closes every window and sends
    /// the last reports and its summary.
    pub fn run(mut self) {
        let id = self.cfg.id;
        // A quiet epoch ends at a timed poll; with the kernel's default
        // timer slack (50 µs) every such end, and the decisions waiting on
        // it, would come that much later.
        // SAFETY: plain system call; it changes only the calling thread.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong) };
        self.monitor.prefault();
        let now = realtime_ns();
        self.monitor
            .tick(now.saturating_sub(self.lag_ns()), &mut self.reports);
        self.track.current = self.new_epoch();
        let _ = self.tx.send(WorkerEvent::Ready(id));
        let mut last_drop_read = Instant::now();
        let mut fds = self.pollfds();
        loop {
            self.apply_commands();
            let stopping = self.cfg.stop.load(Ordering::Relaxed)
                || self.cfg.deadline.is_some_and(|d| Instant::now() >= d);
            let started = Instant::now();
            // Read before the rings are: a packet stamped before
            // `polled - lag` that the rings did not yet show had been in
            // the kernel longer than the lag (read after, a worker held
            // back between the two would widen the gap unseen).
            let polled = realtime_ns();
            let got = self.receive();
            if got == 0 {
                self.quiet_ns = polled;
            } else {
                self.last_frames = started;
            }
            if got > 0 {
                if let Some(a) = self.adapt.as_mut() {
                    a.busy_since(started);
                }
            }
            if let Some(x) = self
                .exporter
                .as_mut()
                .filter(|x| x.ticked.elapsed() >= EXPORT_TICK)
            {
                x.ticked = Instant::now();
                x.exporter.tick(realtime_ns());
            }
            // Drop counters and the queue's occupancy, every millisecond
            // whether or not the wire is busy.
            if last_drop_read.elapsed() >= DROP_READ {
                last_drop_read = Instant::now();
                if let Err(e) = self.read_drops() {
                    self.finish_exports();
                    self.finish_captures();
                    let _ = self.tx.send(WorkerEvent::Failed(id, e));
                    return;
                }
            }
            if self.link_news || self.last_link_check.is_none_or(|t| t.elapsed() >= LINK_CHECK) {
                if self.check_links() {
                    fds = self.pollfds();
                }
                if let Some(lost) = self.lost.clone() {
                    let _ = self.tx.send(WorkerEvent::Link(id, LinkEvent::Lost(lost)));
                    break;
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
                let lag = self.lag_ns();
                self.metrics.clock_lag_ns.store(lag, Ordering::Relaxed);
                // Before the tick: the windows it closes must know.
                self.note_outages(polled);
                let clock = polled.saturating_sub(lag);
                self.monitor.tick(clock, &mut self.reports);
                if let Some(m) = &mut self.meter {
                    // A quiet wire still ends idle records.
                    m.tick(clock, &mut self.records);
                }
                if let Some(c) = &mut self.gpv_cache {
                    c.tick(clock, &mut self.gpvs);
                }
                self.after_monitor();
                if !self.monitor.sweep_pending() {
                    let epoch = self.monitor.epoch_ns().max(1);
                    let next_end = clock - clock % epoch + epoch;
                    let wait = Duration::from_nanos(next_end - clock).min(Duration::from_millis(10));
                    let waited = if self.last_frames.elapsed() < BUSY {
                        std::thread::sleep(wait.min(NAP));
                        Ok(())
                    } else {
                        poll_fds(&mut fds, wait.max(MIN_WAIT))
                    };
                    if let Err(e) = waited {
                        self.finish_exports();
                        self.finish_captures();
                        let _ = self.tx.send(WorkerEvent::Failed(
                            id,
                            LiveError::os("poll", "wait for packets", e),
                        ));
                        return;
                    }
                }
            }
            self.flush_reports();
            self.service_captures();
        }
        let _ = self.read_drops();
        self.note_outages(realtime_ns());
        self.monitor.finish(&mut self.reports);
        if let Some(m) = &mut self.meter {
            m.finish(&mut self.records);
        }
        if let Some(c) = &mut self.gpv_cache {
            c.finish(&mut self.gpvs);
        }
        self.after_monitor();
        self.flush_reports();
        self.finish_exports();
        self.finish_captures();
        self.summary.counters = self.monitor.counters();
        let _ = self.tx.send(WorkerEvent::Finished(id, Box::new(self.summary)));
    }

    /// Sends the exporter's pending headers, closes its files and keeps
    /// its counters for the summary (also when the worker fails: what was
    /// taken is not lost with it).
    fn finish_exports(&mut self) {
        if let Some(x) = &mut self.exporter {
            x.exporter.finish();
            let stats = x.exporter.stats();
            // An exporter that never had a policy did nothing to report.
            if !(stats.policies.is_empty() && stats.destinations.is_empty()) {
                self.summary.exports = Some(stats);
            }
        }
    }

    fn pollfds(&self) -> Vec<libc::pollfd> {
        self.sources
            .iter()
            .map(|s| libc::pollfd {
                fd: s.fd(),
                events: libc::POLLIN | libc::POLLERR,
                revents: 0,
            })
            .collect()
    }

    /// Reads every interface's state: notes outages and returns, captures
    /// re-created interfaces anew, and sets `lost` once one has been down
    /// past the timeout. Returns whether a source was opened anew (its
    /// descriptor changed).
    fn check_links(&mut self) -> bool {
        let news = std::mem::take(&mut self.link_news);
        self.last_link_check = Some(Instant::now());
        let now = realtime_ns();
        let mut reopened = false;
        for i in 0..self.links.len() {
            let Some(state) = self.links[i].watch.as_ref().map(LinkWatch::state) else {
                // Unwatched: only the socket's word, and no way to see it back.
                if news && self.links[i].down.is_none() {
                    self.link_down(i, false);
                }
                continue;
            };
            let down = self.links[i].down.as_ref();
            let must_reopen = down.is_some_and(|o| o.gone && !o.reopened);
            match state {
                LinkState::Up if must_reopen => reopened |= self.reopen(i, now),
                LinkState::Up => match down {
                    Some(_) => self.link_up(i, now),
                    None if news => {
                        // Down and up again between two checks: blind meanwhile.
                        self.link_down(i, false);
                        self.link_up(i, now);
                    }
                    None => self.links[i].seen_up_ns = now,
                },
                LinkState::Down if down.is_none() => self.link_down(i, false),
                LinkState::Gone if !down.is_some_and(|o| o.gone) => self.link_down(i, true),
                LinkState::Down | LinkState::Gone => {}
                LinkState::Replaced { up, .. } => {
                    if !down.is_some_and(|o| o.gone) {
                        self.link_down(i, true);
                    }
                    // Not before it is up: a socket joins a fanout group
                    // only on a running interface.
                    if up {
                        reopened |= self.reopen(i, now);
                    }
                }
            }
            if let Some(o) = &self.links[i].down {
                self.monitor.note_blind(o.since_ns, now);
                if o.noticed.elapsed() >= self.cfg.down_timeout && self.lost.is_none() {
                    self.lost = Some(InterfaceLost {
                        interface: self.links[i].name.clone(),
                        gone: o.gone,
                        down_for: Duration::from_nanos(now.saturating_sub(o.since_ns)),
                        timeout: self.cfg.down_timeout,
                        why: o.why.clone(),
                    });
                }
            }
        }
        reopened
    }

    /// Link `i` is down (`gone`: removed); from the last time it was seen up.
    fn link_down(&mut self, i: usize, gone: bool) {
        let id = self.cfg.id;
        let link = &mut self.links[i];
        match &mut link.down {
            Some(o) => o.gone |= gone,
            None => {
                link.down = Some(Outage {
                    since_ns: link.seen_up_ns,
                    noticed: Instant::now(),
                    gone,
                    reopened: false,
                    why: None,
                });
                let ev = LinkEvent::Down {
                    interface: link.name.clone(),
                    since_ns: link.seen_up_ns,
                };
                let _ = self.tx.send(WorkerEvent::Link(id, ev));
            }
        }
        if gone {
            let ev = LinkEvent::Removed {
                interface: link.name.clone(),
            };
            let _ = self.tx.send(WorkerEvent::Link(id, ev));
        }
    }

    /// Link `i` is up again at `now`: the outage ends there.
    fn link_up(&mut self, i: usize, now: u64) {
        let link = &mut self.links[i];
        link.seen_up_ns = now;
        let Some(o) = link.down.take() else { return };
        self.monitor.note_blind(o.since_ns, now);
        let ev = LinkEvent::Up {
            interface: link.name.clone(),
            since_ns: o.since_ns,
            down_ns: now.saturating_sub(o.since_ns),
            reopened: o.reopened,
        };
        let _ = self.tx.send(WorkerEvent::Link(self.cfg.id, ev));
    }

    /// Captures link `i` anew on the interface now of its name (up): the
    /// outage ends. Returns whether the source was opened.
    fn reopen(&mut self, i: usize, now: u64) -> bool {
        match self.sources[i].reopen() {
            Ok(index) => {
                let link = &mut self.links[i];
                if let Some(w) = link.watch.as_mut() {
                    w.set_index(index);
                }
                if let Some(o) = link.down.as_mut() {
                    o.reopened = true;
                    o.why = None;
                }
                self.link_up(i, now);
                true
            }
            Err(e) => {
                if let Some(o) = self.links[i].down.as_mut() {
                    o.why = Some(e.to_string());
                }
                false
            }
        }
    }

    /// Tells the monitor it is blind up to `now` for every interface down.
    fn note_outages(&mut self, now: u64) {
        for o in self.links.iter().filter_map(|l| l.down.as_ref()) {
            self.monitor.note_blind(o.since_ns, now);
        }
    }

    /// How far behind the wall clock a tick may move the monitor's clock:
    /// the floor, or a quarter more than the longest a recent packet stayed
    /// unseen (see [`Worker::quiet_ns`]).
    fn lag_ns(&self) -> u64 {
        let seen = self.recent_unseen.iter().max().copied().unwrap_or(0);
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
            let mut out = Outputs {
                monitor: &mut self.monitor,
                meter: self.meter.as_mut(),
                reports: &mut self.reports,
                records: &mut self.records,
                gpv_cache: self.gpv_cache.as_mut(),
                gpvs: &mut self.gpvs,
                delays: &mut self.track.delays,
            };
            let batch = &mut self.batch;
            // An exporter without policies is not offered frames (no cost).
            let mut export = self
                .exporter
                .as_mut()
                .filter(|x| !x.exporter.is_empty())
                .map(|x| {
                    let interface = x.interfaces.get(i).copied().unwrap_or(u16::MAX);
                    (&mut x.exporter, interface)
                });
            let mut ring = self.capture.as_mut().map(|c| &mut c.jobs);
            let (quiet, unseen) = (self.quiet_ns, &mut self.track.unseen_max_ns);
            let mut handle = |fr: Frame<'_>| {
                *unseen = (*unseen).max(quiet.saturating_sub(fr.ts_ns));
                match clarion_wire::parse_frame(link, fr.data, fr.ts_ns, fr.orig_len) {
                    Ok(rec) => {
                        if let Some((x, interface)) = export.as_mut() {
                            let frame = clarion_export::Frame {
                                link,
                                data: fr.data,
                                orig_len: fr.orig_len,
                                interface: *interface,
                            };
                            x.offer(&rec, &frame);
                        }
                        match ring.as_mut() {
                            Some(r) if r.wants_frames() => r.push(StoredFrame {
                                ts_ns: rec.ts_ns,
                                link,
                                orig_len: fr.orig_len,
                                key: rec.key,
                                data: fr.data.into(),
                            }),
                            Some(r) => r.skip(rec.ts_ns),
                            None => {}
                        }
                        batch.push(rec);
                        if batch.len() == batch.capacity() {
                            out.process(batch);
                        }
                    }
                    Err(e) => {
                        out.process(batch);
                        let why = if e.is_not_ip() {
                            Unparsed::NotIp
                        } else {
                            Unparsed::Malformed
                        };
                        out.monitor.note_unparsed(fr.ts_ns, why, out.reports);
                    }
                }
            };
            let n = self.sources[i].recv(RECV, &mut handle);
            out.process(&mut self.batch);
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
        if let Some(a) = self.adapt.as_mut() {
            a.busy_since(started);
        }
        self.after_monitor();
    }

    /// Reads the kernel's drop counters into the monitor, and samples the
    /// queues' occupancy (a walk over the ring, so not on every batch).
    fn read_drops(&mut self) -> Result<(), LiveError> {
        let mut drops = 0;
        let now = realtime_ns();
        for (s, link) in self.sources.iter_mut().zip(&mut self.links) {
            drops += s.take_drops()?;
            let backlog = s.backlog(s.capacity()) as u64;
            self.track.current.backlog_max = self.track.current.backlog_max.max(backlog);
            if s.went_down() && link.down.is_none() {
                // Up at the previous read, or the kernel would have said so then.
                link.seen_up_ns = link.seen_up_ns.max(self.last_drop_read_ns);
                self.link_news = true;
            }
        }
        self.last_drop_read_ns = now;
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
                self.adapt_epoch(&mut st);
                self.emit(st);
            }
            let next = self.new_epoch();
            let mut st = std::mem::replace(&mut self.track.current, next);
            st.packets = c.packets - self.last_counters.packets;
            st.delay_p99_ns = self.track.delays.quantile(0.99);
            st.delay_max_ns = self.track.delays.max();
            self.recent_unseen[self.recent_pos] = std::mem::take(&mut self.track.unseen_max_ns);
            self.recent_pos = (self.recent_pos + 1) % LAG_EPOCHS;
            self.summary.delays.merge(&self.track.delays);
            self.metrics.queue_delay.add(&self.track.delays);
            self.track.delays = DelayHistogram::default();
            self.track.swept = Some((st, Instant::now()));
            self.last_counters.packets = c.packets;
        } else if late {
            if let Some((mut st, _)) = self.track.swept.take() {
                st.late = true;
                self.adapt_epoch(&mut st);
                self.emit(st);
            }
        }
        if !self.monitor.sweep_pending() {
            if let Some((mut st, began)) = self.track.swept.take() {
                st.sweep_wall_ns = began.elapsed().as_nanos() as u64;
                self.adapt_epoch(&mut st);
                self.emit(st);
            }
        }
        self.last_counters.sweeps_late = c.sweeps_late;
        let m = &self.metrics;
        m.packets.store(c.packets, Ordering::Relaxed);
        m.bytes.store(c.bytes, Ordering::Relaxed);
        m.malformed.store(c.malformed, Ordering::Relaxed);
        m.not_ip.store(c.not_ip, Ordering::Relaxed);
        m.untracked.store(c.packets_untracked, Ordering::Relaxed);
        m.sweeps_late.store(c.sweeps_late, Ordering::Relaxed);
        m.reports.store(c.reports, Ordering::Relaxed);
        m.flows_active.store(c.flows_active, Ordering::Relaxed);
    }

    /// Degraded mode: the epoch `st` is swept; measure it and set the
    /// shedding for the next ones (see `adapt.rs`).
    fn adapt_epoch(&mut self, st: &mut EpochStats) {
        let backlog: u64 = self.sources.iter().map(|s| s.backlog(s.capacity()) as u64).sum();
        let Some(a) = self.adapt.as_mut() else { return };
        let (busy, decision) = a.on_epoch(&mut self.monitor, st.epoch_ns, st.packets + st.drops, backlog);
        st.busy_ns = Some(busy);
        st.shed_depth = self.monitor.shed().map(|s| s.depth());
        // Decided now, in force from the next epoch (unchanged without a decision).
        let bypass = decision.map_or(self.monitor.bypass(), |d| d.bypass);
        st.bypass = Some(bypass);
        self.metrics
            .bypass_milli
            .store((bypass * 1000.0) as u64, Ordering::Relaxed);
        self.monitor.take_accuracy(&mut st.accuracy);
        if let Some(d) = st.shed_depth {
            self.metrics
                .shed_depth_milli
                .store((d * 1000.0) as u64, Ordering::Relaxed);
        }
        self.metrics
            .cost_factor_milli
            .store((a.factor() * 1000.0) as u64, Ordering::Relaxed);
    }

    fn emit(&mut self, mut st: EpochStats) {
        st.down_ns = self
            .monitor
            .blind_ns(st.epoch_start_ns, st.epoch_start_ns + st.epoch_ns);
        self.summary.epochs += 1;
        self.summary.max_sweep_wall_ns = self.summary.max_sweep_wall_ns.max(st.sweep_wall_ns);
        let m = &self.metrics;
        m.epochs.fetch_add(1, Ordering::Relaxed);
        m.delay_max_ns.fetch_max(st.delay_max_ns, Ordering::Relaxed);
        m.last_delay_p99_ns.store(st.delay_p99_ns, Ordering::Relaxed);
        m.last_sweep_wall_ns.store(st.sweep_wall_ns, Ordering::Relaxed);
        m.max_sweep_wall_ns.fetch_max(st.sweep_wall_ns, Ordering::Relaxed);
        m.sweep.observe_ns(st.sweep_wall_ns);
        let _ = self.tx.send(WorkerEvent::Epoch(st));
    }

    fn flush_reports(&mut self) {
        if !self.reports.is_empty() {
            let r = std::mem::take(&mut self.reports);
            let _ = self.tx.send(WorkerEvent::Reports(self.cfg.id, r));
        }
        if !self.records.is_empty() {
            let r = std::mem::take(&mut self.records);
            let _ = self.tx.send(WorkerEvent::Records(self.cfg.id, r));
        }
        if !self.gpvs.is_empty() {
            let g = std::mem::take(&mut self.gpvs);
            let _ = self.tx.send(WorkerEvent::Gpvs(self.cfg.id, g));
        }
        let p = self.monitor.take_partials();
        if !p.is_empty() {
            let _ = self.tx.send(WorkerEvent::Partials(self.cfg.id, p));
        }
    }
}

/// What a batch goes through and where its results go, borrowed from the
/// worker while its sources are read.
struct Outputs<'a> {
    monitor: &'a mut Monitor,
    meter: Option<&'a mut FlowMeter>,
    reports: &'a mut Vec<Report>,
    records: &'a mut Vec<FlowRecord>,
    gpv_cache: Option<&'a mut GpvCache>,
    gpvs: &'a mut Vec<Gpv>,
    delays: &'a mut DelayHistogram,
}

impl Outputs<'_> {
    /// Processes the batch (monitor, then meter) and records each
    /// packet's queueing delay.
    fn process(&mut self, batch: &mut Vec<PacketRecord>) {
        if batch.is_empty() {
            return;
        }
        self.monitor.process_batch(batch, self.reports);
        if let Some(m) = self.meter.as_deref_mut() {
            m.process_batch(batch, self.records);
        }
        if let Some(c) = self.gpv_cache.as_deref_mut() {
            for p in batch.iter() {
                c.push(p, self.gpvs);
            }
        }
        let now = realtime_ns();
        for p in batch.iter() {
            self.delays.record(now.saturating_sub(p.ts_ns));
        }
        batch.clear();
    }
}
