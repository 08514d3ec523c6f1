//! One worker: a monitor fed by its receive queues, in Trumpet's loop.
//!
//! ```text
//! loop
//!     take up to RECV frames from each queue, parse, hand each frame to
//!         the chain and process the records in batches (the monitor, then
//!         what its host put beside it)
//!     if a sweep is pending and the queues are empty or below the low-water mark
//!         run sweep steps for at most the step budget
//!     else if nothing arrived
//!         advance the clock to now - hidden delay (ends quiet epochs)
//!         wait for packets or the next epoch's end
//!     send what the chain made to the host
//! ```
//!
//! What the worker drives is a [`Chain`]: the monitor, whose clock,
//! sweeps and blind spans are the worker's business, and whatever its
//! host put beside it (flow records, GPVs, export policies, a ring of
//! frames for captures around events: `clarion-pipeline`), which the
//! worker only feeds and flushes ([`EXPORT_TICK`]). The worker measures
//! each epoch ([`EpochStats`]) and sends it and the chain's outputs
//! ([`WorkerEvent::Outputs`]) over a channel; it never blocks on that
//! channel (unbounded), so a slow sink cannot make the kernel drop
//! packets unnoticed.
//!
//! The chain changes at runtime through [`Command`]s (an event installed
//! or removed, export policies replaced), applied between batches after
//! any pending sweep is finished: the frames wait in the queue, never
//! dropped for it.
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
//! [`Monitor::note_blind`]: clarion_engine::Monitor::note_blind

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clarion_adapt::Relief;
use clarion_engine::{Counters, Unparsed};
use clarion_wire::PacketRecord;

use crate::adapt::{LiveAdapt, Served};
use crate::interface::{LinkState, LinkWatch};
use crate::packet_ring::poll_fds;
use crate::stats::{DelayHistogram, EpochStats, WorkerMetrics};
use crate::{Chain, Frame, InterfaceLost, LiveError, Source};

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
/// The chain is flushed this often ([`Chain::flush`]: header datagrams of
/// export policies), busy wire or quiet: the longest a quiet worker waits
/// for packets.
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

/// What a worker sends to the host; `O` is its chain's outputs ([`Chain::Out`]).
#[derive(Debug)]
pub enum WorkerEvent<O> {
    /// Memory committed and the clock started: packets are processed from now on.
    Ready(u32),
    /// What the chain made since the last of these: reports, and what the
    /// stages beside the monitor made; at the end what must outlive the
    /// worker ([`Chain::end`]), in one last one before `Finished` or `Failed`.
    Outputs(u32, O),
    Epoch(EpochStats),
    Finished(u32, Box<WorkerSummary>),
    Failed(u32, LiveError),
    Link(u32, LinkEvent),
    /// Not from a worker: the host's reader is woken to look elsewhere
    /// (the host's `HostWaker`: a message for the agent arrived).
    Wake,
}

/// A change of a running worker's chain (an event installed or removed,
/// export policies replaced): run on the worker's thread between batches,
/// after any pending sweep is finished (a trigger removed mid-sweep would
/// lose the window being swept), so a command waits at most one sweep and
/// one wait for packets (10 ms). It answers through a channel of its own.
pub struct Command<C>(Box<dyn FnOnce(&mut C) + Send>);

impl<C> Command<C> {
    pub fn new(f: impl FnOnce(&mut C) + Send + 'static) -> Command<C> {
        Command(Box::new(f))
    }
}

impl<C> std::fmt::Debug for Command<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Command")
    }
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
    /// Kernel timestamps of the first and last frames of the receive pass
    /// (for relief, `adapt.rs`).
    pass_ts: Option<(u64, u64)>,
    swept: Option<(EpochStats, Instant)>,
}

/// See the module documentation.
pub struct Worker<C: Chain> {
    cfg: WorkerConfig,
    chain: C,
    sources: Vec<Box<dyn Source>>,
    tx: Sender<WorkerEvent<C::Out>>,
    metrics: Arc<WorkerMetrics>,
    batch: Vec<PacketRecord>,
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
    commands: Option<Receiver<Command<C>>>,
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
    /// When the chain was last flushed ([`EXPORT_TICK`]).
    flushed: Instant,
}

impl<C: Chain> Worker<C> {
    /// `chain`'s monitor must not sweep synchronously (`MonitorConfig::synchronous_sweep` false).
    pub fn new(
        cfg: WorkerConfig,
        chain: C,
        sources: Vec<Box<dyn Source>>,
        tx: Sender<WorkerEvent<C::Out>>,
        metrics: Arc<WorkerMetrics>,
    ) -> Worker<C> {
        // A packet handed over late must still find its epoch open.
        let lag = sources.iter().map(|s| s.hidden_delay()).max().unwrap_or_default() + cfg.clock_lag;
        let monitor_adapts = chain.monitor().shed().is_some();
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
        Worker {
            cfg,
            chain,
            sources,
            tx,
            metrics,
            batch: Vec::with_capacity(clarion_engine::BATCH),
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
            flushed: Instant::now(),
        }
    }

    /// Takes changes of its chain from `commands` while it runs.
    pub fn with_commands(mut self, commands: Receiver<Command<C>>) -> Worker<C> {
        self.commands = Some(commands);
        self
    }

    /// Applies the commands waiting, finishing a pending sweep first.
    fn apply_commands(&mut self) {
        let Some(rx) = &self.commands else { return };
        let Ok(first) = rx.try_recv() else { return };
        if self.chain.monitor().sweep_pending() {
            while !self.chain.sweep_step(usize::MAX) {}
            self.after_monitor();
        }
        let mut next = Some(first);
        while let Some(Command(cmd)) = next {
            cmd(&mut self.chain);
            next = self.commands.as_ref().and_then(|rx| rx.try_recv().ok());
        }
    }

    /// Runs until the stop flag is set or the deadline passes, then drains
    /// the queues, sweeps the current epoch, closes every window and sends
    /// the last outputs and its summary.
    pub fn run(mut self) {
        let id = self.cfg.id;
        // A quiet epoch ends at a timed poll; with the kernel's default
        // timer slack (50 µs) every such end, and the decisions waiting on
        // it, would come that much later.
        // SAFETY: plain system call; it changes only the calling thread.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong) };
        self.chain.monitor_mut().prefault();
        let now = realtime_ns();
        self.chain.tick(now.saturating_sub(self.lag_ns()));
        self.track.current = self.new_epoch();
        let _ = self.tx.send(WorkerEvent::Ready(id));
        match self.turn_until_stopped() {
            Ok(()) => self.finish(),
            Err(e) => self.fail(e),
        }
    }

    /// The loop of the module documentation, until the stop flag, the
    /// deadline or a lost interface ends it.
    fn turn_until_stopped(&mut self) -> Result<(), LiveError> {
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
                self.relieve(got, started);
            }
            if self.flushed.elapsed() >= EXPORT_TICK {
                self.flushed = Instant::now();
                self.chain.flush(realtime_ns());
            }
            // Drop counters and the queue's occupancy, every millisecond
            // whether or not the wire is busy.
            if last_drop_read.elapsed() >= DROP_READ {
                last_drop_read = Instant::now();
                self.read_drops()?;
            }
            if self.link_news || self.last_link_check.is_none_or(|t| t.elapsed() >= LINK_CHECK) {
                if self.check_links() {
                    fds = self.pollfds();
                }
                if let Some(lost) = self.lost.clone() {
                    let _ = self
                        .tx
                        .send(WorkerEvent::Link(self.cfg.id, LinkEvent::Lost(lost)));
                    return Ok(());
                }
            }
            if self.chain.monitor().sweep_pending() && (got == 0 || self.low() || self.sweep_overdue()) {
                self.sweep_step();
            } else if got == 0 {
                if stopping {
                    return Ok(());
                }
                self.quiet(polled, &mut fds)?;
            }
            self.chain.service();
            self.send_outputs()?;
        }
    }

    /// Degraded mode: a receive pass of `got` frames begun at `started`
    /// counts as busy, and may call for relief within the epoch
    /// (`adapt.rs`).
    fn relieve(&mut self, got: usize, started: Instant) {
        let pass = self.track.pass_ts.take();
        let Some(a) = self.adapt.as_mut() else { return };
        let busy_ns = started.elapsed().as_nanos() as u64;
        a.add_busy(busy_ns);
        let Some((first_ts_ns, last_ts_ns)) = pass else {
            return;
        };
        let served = Served {
            packets: got as u64,
            first_ts_ns,
            last_ts_ns,
            busy_ns,
            now_ns: realtime_ns(),
        };
        let sources = &self.sources;
        let over_mark = || {
            sources.iter().any(|s| {
                let mark = (s.capacity() as f64 * Relief::FILL).ceil() as usize;
                s.backlog(mark) >= mark
            })
        };
        if let Some(share) = a.on_batch(self.chain.monitor_mut(), served, over_mark) {
            self.metrics
                .bypass_milli
                .store((share * 1000.0) as u64, Ordering::Relaxed);
            self.metrics.reliefs.store(a.reliefs, Ordering::Relaxed);
        }
    }

    /// Whether every queue is at or below the low-water mark.
    fn low(&self) -> bool {
        let low = self.cfg.low_water;
        self.sources.iter().all(|s| s.backlog(low + 1) <= low)
    }

    /// Nothing arrived at `polled`: the clock moves to it less the lag,
    /// and the worker waits for packets or the next epoch's end.
    fn quiet(&mut self, polled: u64, fds: &mut [libc::pollfd]) -> Result<(), LiveError> {
        let lag = self.lag_ns();
        self.metrics.clock_lag_ns.store(lag, Ordering::Relaxed);
        // Before the tick: the windows it closes must know.
        self.note_outages(polled);
        let clock = polled.saturating_sub(lag);
        // A quiet wire still ends idle records and GPVs.
        self.chain.tick(clock);
        self.after_monitor();
        if self.chain.monitor().sweep_pending() {
            return Ok(());
        }
        let epoch = self.chain.monitor().epoch_ns().max(1);
        let next_end = clock - clock % epoch + epoch;
        let wait = Duration::from_nanos(next_end - clock).min(Duration::from_millis(10));
        if self.last_frames.elapsed() < BUSY {
            std::thread::sleep(wait.min(NAP));
            return Ok(());
        }
        poll_fds(fds, wait.max(MIN_WAIT)).map_err(|e| LiveError::os("poll", "wait for packets", e))
    }

    /// The input ended: the queues' last drops read, every window closed,
    /// the last outputs and the summary sent.
    fn finish(mut self) {
        let _ = self.read_drops();
        self.note_outages(realtime_ns());
        self.chain.finish();
        self.after_monitor();
        // Sent apart from what outlives the worker, which the host reads after them.
        let sent = self.send_outputs();
        self.chain.end();
        let sent = sent.and(self.send_outputs());
        let id = self.cfg.id;
        if let Err(e) = sent {
            let _ = self.tx.send(WorkerEvent::Failed(id, e));
            return;
        }
        self.summary.counters = self.chain.monitor().counters();
        let _ = self.tx.send(WorkerEvent::Finished(id, Box::new(self.summary)));
    }

    /// The worker failed: what outlives it is still handed over (a
    /// failure loses nothing the chain took), then the failure.
    fn fail(mut self, e: LiveError) {
        self.chain.end();
        let _ = self.send_outputs();
        let _ = self.tx.send(WorkerEvent::Failed(self.cfg.id, e));
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
                self.chain.monitor_mut().note_blind(o.since_ns, now);
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
        self.chain.monitor_mut().note_blind(o.since_ns, now);
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
            self.chain.monitor_mut().note_blind(o.since_ns, now);
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
        let epoch = self.chain.monitor().epoch_ns().max(1);
        let now = self.chain.monitor().now_ns();
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
            total += self.receive_from(i);
        }
        self.summary.frames += total as u64;
        if total > 0 {
            self.after_monitor();
        }
        total
    }

    /// Takes up to [`RECV`] frames from source `i`: each parsed, handed to
    /// the chain and its record batched; a frame that does not parse ends
    /// the batch before it, so the chain sees every frame in order.
    #[inline]
    fn receive_from(&mut self, i: usize) -> usize {
        let link = self.sources[i].link();
        let (chain, batch, delays) = (&mut self.chain, &mut self.batch, &mut self.track.delays);
        let (quiet, unseen, pass) = (
            self.quiet_ns,
            &mut self.track.unseen_max_ns,
            &mut self.track.pass_ts,
        );
        // Only relief reads the pass's span (degraded mode).
        let spanned = self.adapt.is_some();
        let mut handle = |fr: Frame<'_>| {
            *unseen = (*unseen).max(quiet.saturating_sub(fr.ts_ns));
            if spanned {
                *pass = Some(pass.map_or((fr.ts_ns, fr.ts_ns), |(a, b)| (a.min(fr.ts_ns), b.max(fr.ts_ns))));
            }
            match clarion_wire::parse_frame(link, fr.data, fr.ts_ns, fr.orig_len) {
                Ok(rec) => {
                    chain.frame(i, link, &rec, &fr);
                    batch.push(rec);
                    if batch.len() == batch.capacity() {
                        process(chain, batch, delays);
                    }
                }
                Err(e) => {
                    process(chain, batch, delays);
                    let why = if e.is_not_ip() {
                        Unparsed::NotIp
                    } else {
                        Unparsed::Malformed
                    };
                    chain.unparsed(fr.ts_ns, why);
                }
            }
        };
        let n = self.sources[i].recv(RECV, &mut handle);
        process(&mut self.chain, &mut self.batch, &mut self.track.delays);
        n
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
            if self.chain.sweep_step(STEP_VISITS) || started.elapsed() >= budget {
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
            self.chain.monitor_mut().note_dropped(drops);
            self.track.current.drops += drops;
            self.summary.drops += drops;
            self.metrics.drops.fetch_add(drops, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Follows the monitor's epochs: an epoch ended when its clock left it;
    /// the ended epoch's statistics go out once its sweep is done.
    fn after_monitor(&mut self) {
        let c = self.chain.monitor().counters();
        let late = c.sweeps_late > self.last_counters.sweeps_late;
        let now = self.chain.monitor().now_ns();
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
        if !self.chain.monitor().sweep_pending() {
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
        let (busy, decision) = a.on_epoch(
            self.chain.monitor_mut(),
            st.epoch_ns,
            st.packets + st.drops,
            backlog,
        );
        st.busy_ns = Some(busy);
        st.shed_depth = self.chain.monitor().shed().map(|s| s.depth());
        // Decided now, in force from the next epoch (unchanged without a decision).
        let bypass = decision.map_or(self.chain.monitor().bypass(), |d| d.bypass);
        st.bypass = Some(bypass);
        self.metrics
            .bypass_milli
            .store((bypass * 1000.0) as u64, Ordering::Relaxed);
        self.chain.monitor_mut().take_accuracy(&mut st.accuracy);
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
            .chain
            .monitor()
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

    /// Sends what the chain made; a failure of the chain ends the run.
    fn send_outputs(&mut self) -> Result<(), LiveError> {
        if let Some(out) = self.chain.take() {
            let _ = self.tx.send(WorkerEvent::Outputs(self.cfg.id, out));
        }
        match self.chain.failure() {
            Some(e) => Err(LiveError::Chain(e)),
            None => Ok(()),
        }
    }
}

/// Hands the batch to the chain and records each packet's queueing delay.
#[inline]
fn process<C: Chain>(chain: &mut C, batch: &mut Vec<PacketRecord>, delays: &mut DelayHistogram) {
    if batch.is_empty() {
        return;
    }
    chain.batch(batch);
    let now = realtime_ns();
    for p in batch.iter() {
        delays.record(now.saturating_sub(p.ts_ns));
    }
    batch.clear();
}
