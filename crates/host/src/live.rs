//! A live host: one worker thread per core on the interfaces' receive
//! queues (AF_PACKET rings or AF_XDP sockets), their reports, and — when
//! there are several, or the caller keeps windows for polls — their
//! statistics merged into one host's.
//!
//! ```text
//!  interfaces ─► worker 0 (clarion_live::Worker: LiveChain) ─┐ WorkerEvent channel
//!               worker n ───────────────────────────────────┼─► LiveHost::next ─► Live::Reports / Records
//!  install, remove, set_end, set_exports ─► Command, each ───┘     / Gpvs / Epoch (Merger when merged)
//! ```
//!
//! Each worker drives a [`LiveChain`]: its monitor and the stages beside
//! it (`clarion-pipeline`: flow records, GPVs, export policies, a ring of
//! frames for captures), built here, once, from the host's settings (a
//! setting a stage refuses fails the start) and moved to the worker's
//! thread. What a chain makes comes back as `WorkerEvent::Outputs`.
//!
//! The caller's thread owns the `LiveHost` and calls [`LiveHost::next`]
//! in a loop; everything the workers send arrives there, in each worker's
//! order. Events change at runtime through [`LiveHost::install`] and
//! [`LiveHost::remove`], applied by every worker in the same order (so
//! trigger ids agree, as the merger requires), each between its batches.
//! A merged host keeps every trigger's last closed windows
//! ([`LiveHost::window_values`]) for an event manager's polls.
//!
//! # Export policies
//! With [`LiveConfig::exports`], every worker runs an exporter of its own
//! on the frames it receives (`clarion_pipeline::ExportPolicies` in its chain),
//! rather than one shared exporter behind a channel: the packet path then
//! takes no lock and copies no frame, and the fanout hash already keeps a
//! flow's packets on one worker, so each flow's headers and frames leave
//! in order. Each worker is thus its own exporter ([`worker_exports`]):
//! worker k's header streams carry worker index `id + k` beside the
//! host's exporter name (a collector accounts sequences per name, worker
//! and session: two workers under one index would look like loss and
//! repeats) and its pcapng files are named with run id
//! `RUN-wK`, so no two workers write one file. A single worker keeps the
//! configured id and run id, as a file replay does. The workers' counters
//! come back in [`LiveSummary::exports`], per worker.
//!
//! The policies change at runtime ([`LiveHost::set_exports`]) as events
//! do: every worker gets the new set in the same order, between its
//! batches, and keeps the destinations still used. A host started with
//! export settings but no policies (`LiveExportConfig::policies` empty)
//! gives every worker an exporter without policies, which costs nothing
//! until some are installed; a host started without export settings
//! refuses them.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clarion_engine::{
    Counters, EngineError, Merger, MergerConfig, Monitor, MonitorConfig, Report, TriggerId, WindowValues,
};
use clarion_event_capture::{CaptureConfig, CaptureEvents, CaptureStats, Part, PartedCaptures, RingJobs};
use clarion_export::{ExportConfig, ExportError, ExportStats, Exporter};
use clarion_flows::FlowConfig;
use clarion_gpv::{CacheConfig, Gpv};
use clarion_lang::spec::{EventSpec, ExportSpec};
use clarion_live::{
    filter, realtime_ns, Chain, Command, DelayHistogram, EpochStats, HostMetrics, Interface, InterfaceLost,
    LinkEvent, PacketRing, RingConfig, Source, Worker, WorkerConfig, WorkerEvent, WorkerMetrics,
    WorkerSummary,
};
use clarion_pipeline::{
    CaptureRequest, CaptureRing, ExportPolicies, FlowRecords, Gpvs, Outputs, Pipeline, Stages,
};
use clarion_records::FlowRecord;

use crate::live_xdp::{attach_xdp, open_xdp, XdpMode, XdpProgram};
use crate::{HostError, LiveChain};

/// What a worker sends this host.
type Event = WorkerEvent<Outputs>;

/// The receive path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveSource {
    /// AF_PACKET TPACKET_V3 rings (every interface, both directions).
    Packet,
    /// AF_XDP copy-mode sockets, one per RX queue, behind an XDP program.
    Xdp(XdpMode),
}

/// How a live host is set up.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    pub interfaces: Vec<String>,
    pub source: LiveSource,
    pub workers: u32,
    /// Worker k is pinned to `cpus[k]` when given.
    pub cpus: Vec<usize>,
    /// A tcpdump expression applied in the kernel (AF_PACKET only).
    pub filter: Option<String>,
    pub ring: RingConfig,
    pub step_budget: Duration,
    pub low_water: usize,
    /// The workers' clock lag on a quiet wire, beyond what the rings hide
    /// ([`WorkerConfig::clock_lag`]).
    pub clock_lag: Duration,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// How long an interface may stay down or away before the run ends
    /// ([`LiveSummary::lost`]); zero ends it at once. Meanwhile the windows
    /// are reported incomplete.
    pub down_timeout: Duration,
    /// Every worker's monitor (its `worker` and merge settings are set here).
    pub monitor: MonitorConfig,
    /// Merge even one worker's statistics, so that the host keeps every
    /// trigger's closed windows for polls ([`LiveHost::window_values`]).
    pub keep_windows: bool,
    /// A flow meter on every worker, beside its monitor (`--records`):
    /// their records come as [`Live::Records`]. A flow's packets go to one
    /// worker (the fanout hash), so each record is one worker's, except
    /// for IP fragments after the first, which the hash may send elsewhere.
    pub records: Option<FlowConfig>,
    /// A GPV cache on every worker (`--gpv`, `--app`), its `interface`
    /// set to the worker's number: their GPVs come as [`Live::Gpvs`].
    pub gpvs: Option<CacheConfig>,
    /// Export policies on every worker, each worker its own exporter (see
    /// the module documentation). Header records carry the index of the
    /// frame's interface in `interfaces`.
    pub exports: Option<LiveExportConfig>,
    /// Capture around the events that say `then capture` (see the module
    /// documentation); `ring_bytes` is each worker's. The rings keep (and
    /// copy) nothing until an event that captures is installed, at the
    /// start or later ([`LiveHost::install`]); without this, installing
    /// one is refused.
    pub captures: Option<CaptureConfig>,
}

/// The export policies of a live host and the settings its workers'
/// exporters derive from ([`worker_exports`]). `policies` may be empty:
/// the workers then take policies at runtime ([`LiveHost::set_exports`]).
#[derive(Clone, Debug)]
pub struct LiveExportConfig {
    pub policies: Vec<ExportSpec>,
    pub config: ExportConfig,
}

/// Worker `w`'s exporter settings of `workers`: worker index `id + w` in its header datagrams
/// and run id `RUN-wW` when there are several (see the module documentation).
pub fn worker_exports(config: &ExportConfig, w: u32, workers: u32) -> ExportConfig {
    let mut c = config.clone();
    if workers > 1 {
        c.headers.worker = config.headers.worker.wrapping_add(w);
        c.run_id = if config.run_id.is_empty() {
            format!("w{w}")
        } else {
            format!("{}-w{w}", config.run_id)
        };
    }
    c
}

/// What [`LiveHost::next`] found.
#[derive(Debug)]
pub enum Live {
    /// Reports of closed windows, in window order.
    Reports(Vec<Report>),
    /// Flow records a worker's meter ended (see [`LiveConfig::records`]).
    Records(Vec<FlowRecord>),
    /// GPVs a worker's cache evicted (see [`LiveConfig::gpvs`]).
    Gpvs(Vec<Gpv>),
    /// One worker's statistics of a finished epoch.
    Epoch(EpochStats),
    /// An interface went down, was removed or came back: once per
    /// interface, however many workers capture it (`since_ns` and
    /// `down_ns` the host's: from the first worker's outage to the last's).
    /// One not back in time ends the run ([`LiveSummary::lost`]).
    Link(LinkEvent),
    /// Nothing within the timeout, or woken by a [`HostWaker`].
    Idle,
    /// Every worker has finished (stopped, or past the duration).
    Ended,
}

/// Totals at the end of a live run.
#[derive(Clone, Debug, Default)]
pub struct LiveSummary {
    pub counters: Counters,
    pub frames: u64,
    pub drops: u64,
    pub delays: DelayHistogram,
    pub max_sweep_wall_ns: u64,
    pub elapsed: Duration,
    /// Times an interface went down or away, and how long they were down
    /// in all (an outage still going on at the end counted to the end).
    pub outages: u64,
    pub down: Duration,
    /// An interface that was not back within the down timeout: the run
    /// ended for it (the caller exits nonzero).
    pub lost: Option<InterfaceLost>,
    /// Each worker's export counters, by worker number (with
    /// [`LiveConfig::exports`]).
    pub exports: Vec<(u32, ExportStats)>,
    /// What capturing around events wrote (with [`LiveConfig::captures`]).
    pub captures: Option<CaptureStats>,
}

/// An interface some worker sees down.
#[derive(Debug)]
struct Outage {
    workers: BTreeSet<u32>,
    since_ns: u64,
    removed: bool,
}

/// What one worker gets besides the host's settings.
struct WorkerSetup {
    id: u32,
    workers: u32,
    merged: bool,
    deadline: Option<Instant>,
    sources: Vec<Box<dyn Source>>,
    events: mpsc::Sender<Event>,
}

/// Wakes [`LiveHost::next`] from another thread: whoever waits on the
/// host's workers and on something else too (an agent's messages from its
/// manager) answers the other at once instead of at the wait's timeout.
/// It holds a sender of the workers' channel until every worker thread
/// has ended, so that the channel still disconnects then ([`Live::Ended`]).
#[derive(Clone, Debug)]
pub struct HostWaker(Arc<std::sync::Mutex<Option<Sender<Event>>>>);

impl HostWaker {
    pub fn wake(&self) {
        let tx = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = tx.as_ref() {
            let _ = tx.send(WorkerEvent::Wake);
        }
    }

    fn retire(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// See the module documentation.
pub struct LiveHost {
    stop: Arc<AtomicBool>,
    rx: Receiver<Event>,
    /// Given out by [`LiveHost::waker`]; retired once the workers ended.
    waker: HostWaker,
    handles: Vec<JoinHandle<()>>,
    commands: Vec<Sender<Command<LiveChain>>>,
    metrics: Vec<Arc<WorkerMetrics>>,
    host_metrics: Arc<HostMetrics>,
    merger: Option<Merger>,
    /// Kept attached until the workers are done.
    xdp: Vec<XdpProgram>,
    /// Events that arrived while waiting for the workers to be ready.
    early: VecDeque<Event>,
    /// What the workers' outputs gave that [`LiveHost::next`] has not
    /// handed out yet, in order.
    ready: VecDeque<Live>,
    finished: Vec<(u32, WorkerSummary)>,
    /// Each worker's export counters, as it ended.
    exported: Vec<(u32, ExportStats)>,
    failure: Option<HostError>,
    written: u64,
    started: Instant,
    /// Installed events by trigger id (the same on every worker).
    events: BTreeMap<TriggerId, String>,
    /// How many installed events have each name ([`LiveHost::has_event`]).
    names: HashMap<String, u32>,
    /// Interfaces down, by name.
    outages: BTreeMap<String, Outage>,
    outage_count: u64,
    down_ns: u64,
    lost: Option<InterfaceLost>,
    /// The export policies on every worker (`None`: no export settings).
    exports: Option<Vec<ExportSpec>>,
    captures: Option<HostCaptures>,
}

/// A live host's captures around events: the files, and each worker's
/// way to its ring (see the module documentation).
struct HostCaptures {
    parted: PartedCaptures,
    /// By worker: where its capture requests go.
    requests: Vec<Sender<CaptureRequest>>,
    /// By worker: its ring, once it has ended and handed it over.
    rings: Vec<Option<Box<RingJobs>>>,
    /// Bytes and time each worker's ring keeps.
    ring_bytes: usize,
    keep_ns: u64,
}

/// Longest wait for a worker to open a capture on its ring.
const CAPTURE_REPLY: Duration = Duration::from_secs(2);
/// Time a worker's ring keeps beyond the events' need: the merger waits
/// for every worker before a report leaves, and a request waits for a
/// worker's batch.
const CAPTURE_MARGIN_NS: u64 = 2_000_000_000;

/// Worker `setup.id`'s settings: its clock and budget.
fn worker_config(config: &LiveConfig, setup: &WorkerSetup, stop: Arc<AtomicBool>) -> WorkerConfig {
    WorkerConfig {
        id: setup.id,
        step_budget: config.step_budget,
        low_water: config.low_water,
        clock_lag: config.clock_lag,
        stop,
        deadline: setup.deadline,
        down_timeout: config.down_timeout,
    }
}

/// Worker `w`'s stages beside its monitor, each built (and so checked)
/// once: a setting one refuses fails the start.
fn worker_stages(config: &LiveConfig, w: u32, workers: u32) -> Result<Stages, HostError> {
    let usage = |e: &dyn std::fmt::Display| HostError::Usage(e.to_string());
    let gpvs = config.gpvs.map(|c| {
        Gpvs::new(CacheConfig {
            interface: w as u16,
            ..c
        })
    });
    let gpvs = gpvs.transpose().map_err(|e| usage(&e))?;
    let records = config.records.map(FlowRecords::new).transpose();
    let records = records.map_err(|e| usage(&e))?;
    let exports = match &config.exports {
        Some(x) => Some(ExportPolicies::new(
            Exporter::new(&x.policies, &worker_exports(&x.config, w, workers))
                .map_err(|e| HostError::Usage(format!("export policies: {e}")))?,
        )),
        None => None,
    };
    Ok(Stages {
        records,
        gpvs,
        exports,
        ..Stages::default()
    })
}

/// Each source's interface as its number in the host's list (for the
/// exporter's header streams).
fn source_interfaces(config: &LiveConfig, sources: &[Box<dyn Source>]) -> Vec<u16> {
    sources
        .iter()
        .map(|s| {
            let name = s.interface().0;
            let k = config.interfaces.iter().position(|i| i == name).unwrap_or(0);
            u16::try_from(k).unwrap_or(u16::MAX)
        })
        .collect()
}

/// The start's capture rings and files (`config.captures`).
fn host_captures(config: &LiveConfig, specs: &[EventSpec]) -> Result<Option<HostCaptures>, HostError> {
    let Some(cfg) = &config.captures else {
        return Ok(None);
    };
    // Rings even when no event of the start captures: one may be
    // installed later (their rings are then fed from its install).
    let parted = PartedCaptures::new(specs, cfg.clone())
        .map_err(|e| HostError::Usage(format!("cannot capture into {}: {e}", cfg.dir.display())))?;
    Ok(Some(HostCaptures {
        keep_ns: ring_keep(&parted),
        ring_bytes: cfg.ring_bytes,
        parted,
        requests: Vec::new(),
        rings: Vec::new(),
    }))
}

impl LiveHost {
    /// Opens every queue, starts the workers with `specs` installed and
    /// waits until each has committed its memory and started its clock
    /// (packets meanwhile wait in the queues). `stop` ends the run.
    pub fn start(
        config: &LiveConfig,
        specs: &[EventSpec],
        stop: Arc<AtomicBool>,
    ) -> Result<LiveHost, HostError> {
        let workers = config.workers.max(1);
        let xdp = match config.source {
            LiveSource::Xdp(mode) => attach_xdp(config, mode, workers)?,
            LiveSource::Packet => Vec::new(),
        };
        let rings = match config.source {
            LiveSource::Packet => packet_interfaces(config)?,
            LiveSource::Xdp(_) => Vec::new(),
        };
        pin_off_workers(&config.cpus);
        let merged = workers > 1 || config.keep_windows;
        let deadline = config.duration.map(|d| Instant::now() + d);
        let (tx, rx) = mpsc::channel();
        let mut host = LiveHost::idle(config, stop, &tx, rx, xdp, merged.then_some(workers));
        host.captures = host_captures(config, specs)?;
        for w in 0..workers {
            let sources = match config.source {
                LiveSource::Packet => open_rings(&rings, &config.ring, workers)?,
                LiveSource::Xdp(_) => open_xdp(&host.xdp, w, workers)?,
            };
            let worker = WorkerSetup {
                id: w,
                workers,
                merged,
                deadline,
                sources,
                events: tx.clone(),
            };
            host.spawn(config, specs, worker)?;
        }
        drop(tx);
        host.wait_ready(workers)?;
        host.started = Instant::now();
        Ok(host)
    }

    /// A host with no worker yet; `merged`: the number of workers whose
    /// monitors a merger merges (none: one worker's reports go out as made).
    fn idle(
        config: &LiveConfig,
        stop: Arc<AtomicBool>,
        tx: &mpsc::Sender<Event>,
        rx: mpsc::Receiver<Event>,
        xdp: Vec<XdpProgram>,
        merged: Option<u32>,
    ) -> LiveHost {
        LiveHost {
            stop,
            rx,
            waker: HostWaker(Arc::new(std::sync::Mutex::new(Some(tx.clone())))),
            handles: Vec::new(),
            commands: Vec::new(),
            metrics: Vec::new(),
            host_metrics: Arc::new(HostMetrics::new(&config.interfaces)),
            merger: merged.map(|workers| {
                Merger::new(MergerConfig {
                    host: config.monitor.host.clone(),
                    workers,
                    history_windows: config.monitor.history_windows,
                    adapt: config.monitor.adapt.clone(),
                })
            }),
            xdp,
            early: VecDeque::new(),
            ready: VecDeque::new(),
            finished: Vec::new(),
            exported: Vec::new(),
            failure: None,
            written: 0,
            started: Instant::now(),
            events: BTreeMap::new(),
            names: HashMap::new(),
            outages: BTreeMap::new(),
            outage_count: 0,
            down_ns: 0,
            lost: None,
            exports: config.exports.as_ref().map(|x| x.policies.clone()),
            captures: None,
        }
    }

    /// Worker `w`'s chain on a thread of its own.
    fn spawn(
        &mut self,
        config: &LiveConfig,
        specs: &[EventSpec],
        setup: WorkerSetup,
    ) -> Result<(), HostError> {
        let w = setup.id;
        let chain = self.chain(config, specs, &setup)?;
        let m = Arc::new(WorkerMetrics::default());
        self.metrics.push(Arc::clone(&m));
        let cfg = worker_config(config, &setup, Arc::clone(&self.stop));
        let (ctx, crx) = mpsc::channel();
        self.commands.push(ctx);
        let worker = Worker::new(cfg, chain, setup.sources, setup.events, m).with_commands(crx);
        let cpu = config.cpus.get(w as usize).copied();
        let handle = std::thread::Builder::new()
            .name(format!("clarion-worker-{w}"))
            .spawn(move || {
                if let Some(id) = cpu {
                    core_affinity::set_for_current(core_affinity::CoreId { id });
                }
                worker.run()
            })
            .map_err(|e| HostError::worker(w, format!("cannot start: {e}")))?;
        self.handles.push(handle);
        Ok(())
    }

    /// Worker `setup.id`'s monitor with every event installed, and the
    /// stages beside it: its ring of frames when the host captures.
    fn chain(
        &mut self,
        config: &LiveConfig,
        specs: &[EventSpec],
        setup: &WorkerSetup,
    ) -> Result<LiveChain, HostError> {
        let w = setup.id;
        let mut monitor = Monitor::new(MonitorConfig {
            synchronous_sweep: false,
            worker: w,
            // Every trigger goes through the merger: the kernel's fanout
            // hash leaves out the ports of IP fragments, so even a
            // 5-tuple's packets are not promised to one worker.
            merge_output: setup.merged,
            ..config.monitor.clone()
        });
        for s in specs.iter().filter(|s| !s.on_demand) {
            let id = monitor.install(s.clone())?;
            self.named(id, &s.name);
        }
        let mut stages = worker_stages(config, w, setup.workers)?;
        if let Some(c) = &mut self.captures {
            let (tx, rx) = mpsc::channel();
            c.requests.push(tx);
            c.rings.push(None);
            stages.ring = Some(CaptureRing::new(RingJobs::new(c.ring_bytes, c.keep_ns), rx));
        }
        let interfaces = source_interfaces(config, &setup.sources);
        Ok(LiveChain::new(Pipeline::new(monitor, stages), interfaces))
    }

    fn wait_ready(&mut self, workers: u32) -> Result<(), HostError> {
        let mut ready = 0;
        while ready < workers {
            match self.rx.recv_timeout(Duration::from_millis(100)) {
                Ok(WorkerEvent::Ready(_)) => ready += 1,
                Ok(WorkerEvent::Failed(w, e)) => {
                    self.stop.store(true, Ordering::Relaxed);
                    return Err(HostError::Live { worker: w, source: e });
                }
                Ok(other) => self.early.push_back(other),
                // The waker's sender keeps the channel open: a worker
                // thread that ended without a word is seen by its handle.
                Err(RecvTimeoutError::Timeout) if !self.handles.iter().all(|h| h.is_finished()) => {}
                Err(_) => break,
            }
        }
        Ok(())
    }

    /// The workers' and the host's self-metrics (for a metrics endpoint).
    pub fn metrics(&self) -> (Vec<Arc<WorkerMetrics>>, Arc<HostMetrics>) {
        (self.metrics.clone(), Arc::clone(&self.host_metrics))
    }

    /// Wakes [`LiveHost::next`] from another thread (see [`HostWaker`]).
    pub fn waker(&self) -> HostWaker {
        self.waker.clone()
    }

    /// Waits up to `timeout` for what the workers send next.
    pub fn next(&mut self, timeout: Duration) -> Live {
        // Workers that ended have dropped their senders; the waker's would
        // keep the channel from saying so.
        if self.handles.iter().all(|h| h.is_finished()) {
            self.waker.retire();
        }
        loop {
            if let Some(live) = self.ready.pop_front() {
                return live;
            }
            let event = match self.early.pop_front() {
                Some(e) => Ok(e),
                None => self.rx.recv_timeout(timeout),
            };
            let event = match event {
                Ok(WorkerEvent::Wake) | Err(RecvTimeoutError::Timeout) => return Live::Idle,
                Ok(e) => e,
                Err(RecvTimeoutError::Disconnected) => return Live::Ended,
            };
            match event {
                WorkerEvent::Ready(_) | WorkerEvent::Wake => {}
                WorkerEvent::Outputs(w, out) => self.outputs(w, out),
                WorkerEvent::Epoch(mut st) => {
                    // Degraded mode over merged workers: the host's windows'
                    // accuracy, merged, rides on the next epoch's statistics.
                    if let Some(m) = self.merger.as_mut() {
                        m.take_accuracy(&mut st.accuracy);
                    }
                    return Live::Epoch(st);
                }
                WorkerEvent::Finished(w, s) => self.finished.push((w, *s)),
                WorkerEvent::Failed(w, e) => self.fail(HostError::Live { worker: w, source: e }),
                WorkerEvent::Link(w, ev) => {
                    if let Some(ev) = self.link(w, ev) {
                        return Live::Link(ev);
                    }
                }
            }
        }
    }

    /// Worker `w`'s outputs, in the order it made them: its reports (a
    /// merged host's from its partials), records and GPVs for the caller;
    /// its capture parts and ring for the files; its export counters, as
    /// it ended, for the summary.
    fn outputs(&mut self, w: u32, out: Outputs) {
        let Outputs {
            reports,
            records,
            gpvs,
            partials,
            capture_parts,
            capture_ring,
            exports,
        } = out;
        if !reports.is_empty() {
            let live = self.written(reports);
            self.ready.push_back(live);
        }
        if !records.is_empty() {
            self.ready.push_back(Live::Records(records));
        }
        if !gpvs.is_empty() {
            self.ready.push_back(Live::Gpvs(gpvs));
        }
        if !partials.is_empty() {
            let merged = self.merge(w, partials);
            if !merged.is_empty() {
                let live = self.written(merged);
                self.ready.push_back(live);
            }
        }
        if let Some(c) = &mut self.captures {
            capture_parts.into_iter().for_each(|p| c.parted.part(p));
            if let Some(ring) = capture_ring {
                c.ring_ended(w, ring);
            }
        }
        if let Some(x) = exports {
            self.exported.push((w, x));
        }
    }

    /// Worker `w`'s partial statistics into the merger; the reports of the
    /// windows it closes (a refusal stops the host).
    fn merge(&mut self, w: u32, partials: Vec<clarion_engine::Partials>) -> Vec<Report> {
        let mut merged = Vec::new();
        let mut refused = None;
        if let Some(m) = self.merger.as_mut() {
            for p in partials {
                if let Err(source) = m.push(p, &mut merged) {
                    refused.get_or_insert(source);
                }
            }
        }
        if let Some(source) = refused {
            self.fail(clarion_pipeline::Error::Merge { worker: w, source }.into());
        }
        merged
    }

    /// Follows the interfaces' outages over the workers: an interface is
    /// down from the first worker's word to the last one's return. Returns
    /// what to tell the caller.
    fn link(&mut self, w: u32, ev: LinkEvent) -> Option<LinkEvent> {
        match ev {
            LinkEvent::Down { interface, since_ns } => {
                if let Some(o) = self.outages.get_mut(&interface) {
                    o.workers.insert(w);
                    o.since_ns = o.since_ns.min(since_ns);
                    return None;
                }
                self.outage_count += 1;
                if let Some(m) = self.host_metrics.interface(&interface) {
                    m.up.store(0, Ordering::Relaxed);
                    m.downs.fetch_add(1, Ordering::Relaxed);
                }
                let o = Outage {
                    workers: BTreeSet::from([w]),
                    since_ns,
                    removed: false,
                };
                self.outages.insert(interface.clone(), o);
                Some(LinkEvent::Down { interface, since_ns })
            }
            LinkEvent::Removed { interface } => {
                let o = self.outages.get_mut(&interface)?;
                (!std::mem::replace(&mut o.removed, true)).then_some(LinkEvent::Removed { interface })
            }
            LinkEvent::Up {
                interface,
                since_ns,
                down_ns,
                reopened,
            } => {
                let o = self.outages.get_mut(&interface)?;
                o.workers.remove(&w);
                if !o.workers.is_empty() {
                    return None;
                }
                let first = o.since_ns;
                self.outages.remove(&interface);
                let down_ns = (since_ns + down_ns).saturating_sub(first);
                self.down_ns += down_ns;
                if let Some(m) = self.host_metrics.interface(&interface) {
                    m.up.store(1, Ordering::Relaxed);
                }
                Some(LinkEvent::Up {
                    interface,
                    since_ns: first,
                    down_ns,
                    reopened,
                })
            }
            LinkEvent::Lost(lost) => {
                // Not a failure: the workers finish as on a stop, and the
                // summary says why the run ended.
                self.stop.store(true, Ordering::Relaxed);
                self.lost.get_or_insert(lost);
                None
            }
        }
    }

    fn written(&mut self, mut reports: Vec<Report>) -> Live {
        self.capture(&mut reports);
        self.written += reports.len() as u64;
        self.host_metrics.written(&reports);
        Live::Reports(reports)
    }

    /// Starts the capture of every report of a capturing event on every
    /// worker's ring (or on the ring of a worker that has ended), and
    /// states in the report where the file starts: the latest of the
    /// rings' starts (see `PartedCaptures`).
    fn capture(&mut self, reports: &mut [Report]) {
        let Some(c) = self.captures.as_mut() else { return };
        let workers = c.requests.len();
        for r in reports.iter_mut() {
            let Some((id, sel)) = c.parted.start(r, workers as u32) else {
                continue;
            };
            let mut replies = Vec::new();
            for w in 0..workers {
                if c.rings[w].is_none() {
                    let (tx, rx) = mpsc::channel();
                    let req = CaptureRequest::Open {
                        id,
                        sel: sel.clone(),
                        reply: tx,
                    };
                    if c.requests[w].send(req).is_ok() {
                        replies.push((w, rx));
                        continue;
                    }
                }
                open_on_ring(c, &self.rx, &mut self.early, w, id, &sel, r);
            }
            for (w, rx) in replies {
                match rx.recv_timeout(CAPTURE_REPLY) {
                    Ok(from) => c.parted.covered_from(id, r, from),
                    // Ended with the request unread: its ring comes.
                    Err(RecvTimeoutError::Disconnected) => {
                        open_on_ring(c, &self.rx, &mut self.early, w, id, &sel, r);
                    }
                    Err(RecvTimeoutError::Timeout) => c
                        .parted
                        .missing(id, &format!("worker {w} did not open the capture in time")),
                }
            }
        }
    }

    /// Records the first failure and stops every worker.
    fn fail(&mut self, e: HostError) {
        self.stop.store(true, Ordering::Relaxed);
        self.failure.get_or_insert(e);
    }

    /// Installs an event on every worker (from the next window boundary, or
    /// for the windows in `[start_ns, end_ns)`), waiting until each has it;
    /// returns its trigger id and the first window every worker covers
    /// (the host's first report can be of that window).
    pub fn install(
        &mut self,
        spec: &EventSpec,
        start_ns: Option<u64>,
        end_ns: Option<u64>,
    ) -> Result<(TriggerId, u64), HostError> {
        self.capture_for(spec)?;
        let spec_ = spec.clone();
        let replies = self.on_every_worker(move |c| -> Result<(TriggerId, u64), EngineError> {
            let m = c.monitor_mut();
            let id = match start_ns {
                Some(start) => m.install_at(spec_.clone(), start, end_ns),
                None => m.install(spec_.clone()),
            }?;
            Ok((id, m.first_window_ns(id).unwrap_or(0)))
        })?;
        let mut id = None;
        let mut first = 0;
        for (w, reply) in replies.into_iter().enumerate() {
            let (got, start) = reply?;
            first = first.max(start);
            if id.is_some_and(|i| i != got) {
                let what = format!("installed `{}` under another id", spec.name);
                return Err(HostError::worker(w as u32, what));
            }
            id = Some(got);
        }
        let id = id.ok_or(HostError::worker(0, "is missing"))?;
        self.named(id, &spec.name);
        Ok((id, first))
    }

    /// Why this host cannot install `spec`, if it cannot, before anything
    /// is installed (a request installs all its events or none): it
    /// captures packets and the host has no capture directory.
    pub fn check_install(&self, spec: &EventSpec) -> Result<(), HostError> {
        if self.captures.is_some() || !captures_packets(spec) {
            return Ok(());
        }
        Err(no_capture_dir(spec))
    }

    /// Readies the captures of `spec` if it (or a drill-down of it)
    /// says `then capture`, before it is installed: its reports capture
    /// like those of the events of the start, and every worker's ring
    /// keeps frames long enough for it from now on. The one path for the
    /// events of the start's rings, the control API's and a manager's.
    fn capture_for(&mut self, spec: &EventSpec) -> Result<(), HostError> {
        if !captures_packets(spec) {
            return Ok(());
        }
        let Some(c) = self.captures.as_mut() else {
            return Err(no_capture_dir(spec));
        };
        c.parted.add_event(spec);
        c.keep_ns = ring_keep(&c.parted);
        for r in &c.requests {
            // A worker that has ended needs no more frames.
            let _ = r.send(CaptureRequest::Keep(c.keep_ns));
        }
        Ok(())
    }

    /// Removes an event from every worker; it stops at the end of its current window.
    pub fn remove(&mut self, id: TriggerId) -> Result<(), HostError> {
        let replies = self.on_every_worker(move |c| c.monitor_mut().remove(id).map(|_| ()));
        if let Some(name) = self.events.remove(&id) {
            if let Some(n) = self.names.get_mut(&name) {
                *n -= 1;
                if *n == 0 {
                    self.names.remove(&name);
                }
            }
        }
        for reply in replies? {
            reply?;
        }
        Ok(())
    }

    /// Runs `f` on every worker's chain, between its batches, and gives
    /// each worker's answer in worker order once every one has answered.
    fn on_every_worker<R: Send + 'static>(
        &self,
        f: impl Fn(&mut LiveChain) -> R + Clone + Send + 'static,
    ) -> Result<Vec<R>, HostError> {
        let mut replies = Vec::new();
        for (w, c) in self.commands.iter().enumerate() {
            let (tx, rx) = mpsc::channel();
            let f = f.clone();
            let cmd = Command::new(move |chain: &mut LiveChain| {
                let _ = tx.send(f(chain));
            });
            c.send(cmd).map_err(|_| gone(w))?;
            replies.push(rx);
        }
        let answers = replies.into_iter().enumerate();
        answers.map(|(w, rx)| rx.recv().map_err(|_| gone(w))).collect()
    }

    fn named(&mut self, id: TriggerId, name: &str) {
        self.events.insert(id, name.to_owned());
        *self.names.entry(name.to_owned()).or_default() += 1;
    }

    /// Whether an event of this name is installed.
    pub fn has_event(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// The installed events' trigger ids and names.
    pub fn events(&self) -> impl Iterator<Item = (TriggerId, &str)> {
        self.events.iter().map(|(id, n)| (*id, n.as_str()))
    }

    /// Moves the end of an event's windows on every worker.
    pub fn set_end(&mut self, id: TriggerId, end_ns: Option<u64>) {
        for c in &self.commands {
            let _ = c.send(Command::new(move |chain: &mut LiveChain| {
                chain.monitor_mut().set_end(id, end_ns)
            }));
        }
    }

    /// The export policies installed (`None`: the host was started
    /// without export settings, [`LiveConfig::exports`]).
    pub fn export_policies(&self) -> Option<&[ExportSpec]> {
        self.exports.as_deref()
    }

    /// Replaces the export policies of every worker (see the module
    /// documentation), waiting until each has them. If a worker refuses
    /// them (a collector's socket, the export directory), the workers that
    /// took them get the previous set back and the error is returned.
    pub fn set_exports(&mut self, policies: &[ExportSpec]) -> Result<(), HostError> {
        let Some(old) = self.exports.clone() else {
            return Err(HostError::Usage(
                "this host was started without export settings: no export policies can be installed".into(),
            ));
        };
        match self.send_exports(policies) {
            Ok(()) => {
                self.exports = Some(policies.to_vec());
                Ok(())
            }
            Err(e) => {
                // Back to one set on every worker (a worker that refused
                // still has the old one: setting it again changes nothing).
                let _ = self.send_exports(&old);
                Err(e)
            }
        }
    }

    fn send_exports(&self, policies: &[ExportSpec]) -> Result<(), HostError> {
        let shared: Arc<[ExportSpec]> = policies.into();
        let replies = self.on_every_worker(move |c| -> Option<Result<(), ExportError>> {
            let policies = &shared;
            c.pipeline_mut()
                .stage_mut(|x: &mut ExportPolicies| x.exporter_mut().set_policies(policies))
        })?;
        let mut first = None;
        for (w, reply) in replies.into_iter().enumerate() {
            let failed = match reply {
                Some(Ok(())) => None,
                Some(Err(e)) => Some(format!("export policies: {e}")),
                None => Some("has no exporter".to_string()),
            };
            if let (Some(what), None) = (failed, &first) {
                first = Some(HostError::worker(w as u32, what));
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Every worker's export counters so far, by worker number (empty
    /// without export settings).
    pub fn export_stats(&self) -> Result<Vec<(u32, ExportStats)>, HostError> {
        let replies = self.on_every_worker(|c| {
            c.pipeline()
                .stage::<ExportPolicies>()
                .map(|x| x.exporter().stats())
        })?;
        let stats = (0..).zip(replies);
        Ok(stats.filter_map(|(w, s)| Some((w, s?))).collect())
    }

    /// How far the workers' clocks lag the wall clock (the largest): a
    /// window closes this long after it ends when the wire is quiet.
    pub fn clock_lag_ns(&self) -> u64 {
        self.metrics
            .iter()
            .map(|m| m.clock_lag_ns.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }

    /// A closed window's values, kept for polls (a merged host only).
    pub fn window_values(&self, id: TriggerId, window_start_ns: u64) -> Option<WindowValues> {
        self.merger.as_ref()?.window_values(id, window_start_ns)
    }

    /// Every window ending at or before this is closed on every worker.
    pub fn closed_to(&self) -> u64 {
        self.merger.as_ref().map_or(0, Merger::released_to)
    }

    /// Stops the workers (they sweep the current epoch and close every
    /// window), waits for them and detaches the XDP programs. Reports
    /// still queued are handed to `rest`.
    pub fn finish(mut self, rest: &mut dyn FnMut(Live)) -> Result<LiveSummary, HostError> {
        self.stop.store(true, Ordering::Relaxed);
        loop {
            match self.next(Duration::from_millis(100)) {
                Live::Ended => break,
                Live::Idle => {}
                other => rest(other),
            }
        }
        for h in std::mem::take(&mut self.handles) {
            let _ = h.join();
        }
        self.xdp.clear();
        // Written on a failure too: the workers have handed over their rings.
        let captures = self.captures.as_mut().map(|c| c.parted.finish());
        if let Some(e) = self.failure.take() {
            return Err(e);
        }
        let mut s = LiveSummary {
            elapsed: self.started.elapsed(),
            ..LiveSummary::default()
        };
        self.finished.sort_by_key(|(w, _)| *w);
        self.exported.sort_by_key(|(w, _)| *w);
        s.exports = std::mem::take(&mut self.exported);
        for (_, f) in &self.finished {
            s.counters.add(&f.counters);
            s.frames += f.frames;
            s.drops += f.drops;
            s.delays.merge(&f.delays);
            s.max_sweep_wall_ns = s.max_sweep_wall_ns.max(f.max_sweep_wall_ns);
        }
        // Merging workers report nothing themselves: count what was written.
        s.counters.reports = self.written;
        let now = realtime_ns();
        let still_down: u64 = self
            .outages
            .values()
            .map(|o| now.saturating_sub(o.since_ns))
            .sum();
        s.outages = self.outage_count;
        s.down = Duration::from_nanos(self.down_ns + still_down);
        s.lost = self.lost.take();
        s.captures = captures;
        Ok(s)
    }
}

impl Drop for LiveHost {
    /// A host dropped unfinished (an error while starting, or the caller's)
    /// stops its workers rather than leaving them capturing.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// How long every worker's ring keeps frames for the capturing events
/// of `parted`: 0 (not fed) while there is none.
fn ring_keep(parted: &PartedCaptures) -> u64 {
    match parted.events().is_empty() {
        true => 0,
        false => parted.events().keep_ns().saturating_add(CAPTURE_MARGIN_NS),
    }
}

impl HostCaptures {
    /// Worker `w` has ended and handed over its ring: the captures open
    /// on it are complete (no frame will come), later ones open on it here.
    fn ring_ended(&mut self, w: u32, mut ring: Box<RingJobs>) {
        let mut parts: Vec<Part> = Vec::new();
        ring.take_all(&mut parts);
        parts.into_iter().for_each(|p| self.parted.part(p));
        if let Some(slot) = self.rings.get_mut(w as usize) {
            *slot = Some(ring);
        }
    }
}

/// Opens capture `id` on the ring worker `w` handed over as it ended,
/// waiting for the ring if it is still on its way (the other events read
/// meanwhile kept, in order, for [`LiveHost::next`]); a part that cannot
/// come is noted missing.
fn open_on_ring(
    c: &mut HostCaptures,
    rx: &Receiver<Event>,
    early: &mut VecDeque<Event>,
    w: usize,
    id: u64,
    sel: &clarion_event_capture::Selection,
    r: &mut Report,
) {
    let waited = Instant::now();
    if c.rings[w].is_none() {
        let held = early.iter_mut().find_map(|e| match e {
            WorkerEvent::Outputs(x, o) if *x as usize == w => o.capture_ring.take().map(|ring| (*x, ring)),
            _ => None,
        });
        if let Some((x, ring)) = held {
            c.ring_ended(x, ring);
        }
    }
    while c.rings[w].is_none() {
        let left = CAPTURE_REPLY.saturating_sub(waited.elapsed());
        match rx.recv_timeout(left) {
            Ok(mut other) => {
                if let WorkerEvent::Outputs(x, o) = &mut other {
                    if let Some(ring) = o.capture_ring.take() {
                        c.ring_ended(*x, ring);
                    }
                }
                early.push_back(other);
            }
            Err(_) => break,
        }
    }
    let Some(ring) = c.rings[w].as_mut() else {
        c.parted
            .missing(id, &format!("worker {w} ended without handing over its ring"));
        return;
    };
    let from = ring.open(id, sel.clone());
    let mut parts = Vec::new();
    ring.take_all(&mut parts);
    c.parted.covered_from(id, r, from);
    parts.into_iter().for_each(|p| c.parted.part(p));
}

fn gone(worker: usize) -> HostError {
    HostError::worker(worker as u32, "stopped")
}

/// Keeps the caller's thread (merging, writing reports, metrics) off the
/// workers' CPUs when there is another one, so it never preempts them.
fn pin_off_workers(cpus: &[usize]) {
    if cpus.is_empty() {
        return;
    }
    let spare = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .find(|c| !cpus.contains(&c.id));
    if let Some(core) = spare {
        core_affinity::set_for_current(core);
    }
}

/// Every interface with its compiled filter.
fn packet_interfaces(config: &LiveConfig) -> Result<Vec<(Interface, Vec<filter::Insn>)>, HostError> {
    let mut out = Vec::new();
    for name in &config.interfaces {
        let iface = Interface::lookup(name).map_err(HostError::Setup)?;
        let prog = match &config.filter {
            Some(expr) => filter::compile(expr, iface.link, config.ring.snaplen)
                .map_err(|e| HostError::Usage(e.to_string()))?,
            None => filter::snap_only(config.ring.snaplen),
        };
        out.push((iface, prog));
    }
    Ok(out)
}

/// Worker `w`'s ring on every interface (in each interface's fanout group when several workers share it).
fn open_rings(
    ifaces: &[(Interface, Vec<filter::Insn>)],
    cfg: &RingConfig,
    workers: u32,
) -> Result<Vec<Box<dyn Source>>, HostError> {
    let mut out: Vec<Box<dyn Source>> = Vec::new();
    for (k, (iface, prog)) in ifaces.iter().enumerate() {
        // One group per interface, distinct from other processes' groups.
        let group = (std::process::id() as u16)
            .wrapping_mul(31)
            .wrapping_add(k as u16);
        let fanout = (workers > 1).then_some(group);
        let ring = PacketRing::open(iface, cfg, prog, fanout).map_err(HostError::Setup)?;
        out.push(Box::new(ring));
    }
    Ok(out)
}

/// Whether `spec` (or a drill-down of it) says `then capture`.
fn captures_packets(spec: &EventSpec) -> bool {
    !CaptureEvents::from_specs(std::slice::from_ref(spec)).is_empty()
}

/// Refuses `spec`, which captures packets, on a host with no capture directory.
fn no_capture_dir(spec: &EventSpec) -> HostError {
    HostError::Usage(format!(
        "event `{}` captures packets (`then capture`), and this host has no capture directory (--capture-dir)",
        spec.name
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Several workers' exporters never share a worker index nor a
        /// file name, and keep everything else; one worker is unchanged.
        #[test]
        fn workers_are_distinct_exporters(id in any::<u32>(), run in "[0-9TZ]{0,16}", workers in 1u32..64) {
            let mut base = ExportConfig { run_id: run.clone(), ..ExportConfig::default() };
            base.headers.worker = id;
            let all: Vec<ExportConfig> = (0..workers).map(|w| worker_exports(&base, w, workers)).collect();
            let ids: BTreeSet<u32> = all.iter().map(|c| c.headers.worker).collect();
            let runs: BTreeSet<&str> = all.iter().map(|c| c.run_id.as_str()).collect();
            prop_assert_eq!(ids.len(), workers as usize);
            prop_assert_eq!(runs.len(), workers as usize);
            for (w, c) in all.iter().enumerate() {
                prop_assert_eq!(c.headers.mtu, base.headers.mtu);
                prop_assert_eq!(&c.export_dir, &base.export_dir);
                if workers == 1 {
                    prop_assert_eq!((c.headers.worker, c.run_id.as_str()), (id, run.as_str()));
                } else {
                    // Names stay POLICY-RUN-wK-NNNNNN: the run's files sort together.
                    let suffix = format!("w{}", w);
                    prop_assert!(c.run_id.starts_with(run.as_str()) && c.run_id.ends_with(&suffix));
                }
            }
        }
    }
}
