//! Several monitors on as many threads, merged into one host's reports.
//!
//! # Design
//! The caller's thread spreads packets over the workers by the symmetric
//! flow hash ([`fanout_worker`]: both directions of a connection on one
//! worker) and sends each worker its packets in batches over a bounded
//! channel (a slow worker holds the reader back; nothing is dropped).
//! Each worker runs a [`Monitor`] with `merge_output`, and sends the
//! partials of every finished sweep back; the caller's thread feeds them
//! to the [`Merger`], which releases a window's reports once every worker
//! has closed it.
//!
//! # Invariant: one monitor's reports
//! The merged reports equal one monitor's on the same input (values,
//! completeness, order; only the origin's worker is
//! [`clarion_engine::MERGED_WORKER`]) when the workers' clocks move as if
//! every worker were ticked to the host's latest time before each frame
//! (`docs/semantics.md`, "Several workers"; the conformance test
//! `workers_vs_single` drives them so). Sending every worker every tick
//! would cost a message per packet per worker; instead each packet
//! carries the host's clock before it, and its worker ticks to that clock
//! first when it is ahead of the packet (only then does the tick change
//! what the packet does). The other workers catch up lazily, which sweeps
//! the same epochs with the same contents, plus:
//! - every worker is ticked to the first frame's time, so all start
//!   observing together (completeness depends on it);
//! - every worker is ticked when the host's clock has moved on by
//!   [`TICK_EVERY_NS`] of packet time (at least an epoch), so each closes
//!   its windows and the merger releases them within that much;
//! - at the end every worker is ticked to the last time, then finished.
//!
//! Frames that do not parse go to the workers in turn.
//!
//! # Cost
//! One channel message per worker per [`WorkersConfig::batch`] packets and
//! a hash per packet on the reading thread; the merge work per window is
//! that of the groups the workers share. The reading thread parses every
//! frame, so N workers need N + 1 cores to gain: on 2 cores, 1 M packets of
//! `pathspider_real` x16 under one 5-tuple event take about twice as long
//! on 2 workers as on one (0.43-0.50 s against 0.22-0.27 s).

use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::JoinHandle;

use clarion_engine::{
    fanout_worker, Counters, Merger, MergerConfig, Monitor, MonitorConfig, Partials, Report, Unparsed, BATCH,
};
use clarion_lang::spec::EventSpec;
use clarion_wire::PacketRecord;

use crate::{HostError, Stage};

/// Packet time between ticks of every worker: how long a window may wait
/// for a worker without packets before the merger can release it. Ticking
/// at every epoch cost three messages a packet on sparse traffic.
const TICK_EVERY_NS: u64 = 100_000_000;

/// How packets are spread and queued.
#[derive(Clone, Copy, Debug)]
pub struct WorkersConfig {
    /// Worker threads (at least 1).
    pub workers: u32,
    /// Picks one of many spreads of flows over the workers.
    pub seed: u64,
    /// Packets sent to a worker in one message.
    pub batch: usize,
    /// Messages queued per worker before the reader waits.
    pub queue: usize,
}

impl Default for WorkersConfig {
    fn default() -> Self {
        WorkersConfig {
            workers: 2,
            seed: 0,
            batch: 1024,
            queue: 16,
        }
    }
}

/// One frame for a worker, with the host's clock before it.
#[derive(Debug)]
enum Item {
    Packet { clock: u64, rec: PacketRecord },
    Unparsed { clock: u64, ts_ns: u64, why: Unparsed },
}

#[derive(Debug)]
enum Msg {
    Frames(Vec<Item>),
    Tick(u64),
    /// Tick to this time, then finish.
    Finish(u64),
}

struct Thread {
    tx: Option<SyncSender<Msg>>,
    pending: Vec<Item>,
    /// Batches the worker has emptied, for reuse (no allocation, and no
    /// freeing on another thread, per batch).
    emptied: Receiver<Vec<Item>>,
    handle: Option<JoinHandle<Monitor>>,
}

/// See the module documentation.
pub struct Workers {
    config: WorkersConfig,
    threads: Vec<Thread>,
    partials: Receiver<(u32, Vec<Partials>)>,
    merger: Merger,
    /// The host's clock: the largest timestamp seen.
    clock: Option<u64>,
    epoch_ns: u64,
    /// The clock every worker was last ticked to.
    ticked: Option<u64>,
    next_unparsed: u32,
    /// The workers' counters, once they have finished.
    finished: Counters,
    reports: u64,
}

impl Workers {
    /// Starts `config.workers` threads, each a monitor configured by
    /// `monitor` (its `worker`, `merge_output` and `five_tuple_fanout` set
    /// here) with every event of `specs` installed, in order.
    pub fn start(
        monitor: &MonitorConfig,
        specs: &[EventSpec],
        config: WorkersConfig,
    ) -> Result<Workers, HostError> {
        let n = config.workers.max(1);
        let (ptx, prx) = mpsc::channel();
        let mut threads = Vec::with_capacity(n as usize);
        let mut epoch_ns = 1;
        for w in 0..n {
            let mut m = Monitor::new(MonitorConfig {
                worker: w,
                merge_output: true,
                five_tuple_fanout: true,
                synchronous_sweep: true,
                ..monitor.clone()
            });
            for s in specs.iter().filter(|s| !s.on_demand) {
                m.install(s.clone())?;
            }
            epoch_ns = m.epoch_ns().max(1);
            let (tx, rx) = mpsc::sync_channel(config.queue.max(1));
            let (etx, erx) = mpsc::channel();
            let ptx = ptx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("clarion-worker-{w}"))
                .spawn(move || work(w, m, rx, ptx, etx))
                .map_err(|e| HostError::Worker {
                    worker: w,
                    what: format!("cannot start: {e}"),
                })?;
            threads.push(Thread {
                tx: Some(tx),
                pending: Vec::with_capacity(config.batch),
                emptied: erx,
                handle: Some(handle),
            });
        }
        Ok(Workers {
            config: WorkersConfig { workers: n, ..config },
            threads,
            partials: prx,
            merger: Merger::new(MergerConfig {
                host: monitor.host.clone(),
                workers: n,
                history_windows: monitor.history_windows,
            }),
            clock: None,
            epoch_ns,
            ticked: None,
            next_unparsed: 0,
            finished: Counters::default(),
            reports: 0,
        })
    }

    /// The host's clock before a frame of time `ts_ns`; every worker is
    /// ticked to it when it is the first frame's time or at least
    /// [`TICK_EVERY_NS`] (and an epoch) past the last such tick.
    fn clock_before(&mut self, ts_ns: u64, out: &mut Vec<Report>) -> Result<u64, HostError> {
        let clock = self.clock.unwrap_or(ts_ns);
        let due = match self.ticked {
            None => true,
            Some(t) => clock >= t.saturating_add(TICK_EVERY_NS.max(self.epoch_ns)),
        };
        if due {
            self.broadcast(|| Msg::Tick(clock), out)?;
            self.ticked = Some(clock);
        }
        self.clock = Some(clock.max(ts_ns));
        Ok(clock)
    }

    fn push(&mut self, w: u32, item: Item, out: &mut Vec<Report>) -> Result<(), HostError> {
        let t = &mut self.threads[w as usize];
        t.pending.push(item);
        if t.pending.len() >= self.config.batch {
            self.send_pending(w)?;
            self.merge_ready(out)?;
        }
        Ok(())
    }

    fn send_pending(&mut self, w: u32) -> Result<(), HostError> {
        let t = &mut self.threads[w as usize];
        if t.pending.is_empty() {
            return Ok(());
        }
        let next = t
            .emptied
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(self.config.batch));
        let items = std::mem::replace(&mut t.pending, next);
        self.send(w, Msg::Frames(items))
    }

    fn send(&mut self, w: u32, msg: Msg) -> Result<(), HostError> {
        let t = &mut self.threads[w as usize];
        let sent = t.tx.as_ref().is_some_and(|tx| tx.send(msg).is_ok());
        if sent {
            Ok(())
        } else {
            Err(self.died(w))
        }
    }

    /// Why worker `w` stopped taking messages (its thread ended early).
    fn died(&mut self, w: u32) -> HostError {
        let t = &mut self.threads[w as usize];
        t.tx = None;
        let what = match t.handle.take().map(JoinHandle::join) {
            Some(Err(panic)) => {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown".into());
                format!("failed: {msg}")
            }
            _ => "stopped before its input ended".into(),
        };
        HostError::Worker { worker: w, what }
    }

    /// Sends every worker its pending frames, then `msg`.
    fn broadcast(&mut self, msg: impl Fn() -> Msg, out: &mut Vec<Report>) -> Result<(), HostError> {
        for w in 0..self.config.workers {
            self.send_pending(w)?;
            self.send(w, msg())?;
        }
        self.merge_ready(out)
    }

    /// Merges the partials the workers have sent so far.
    fn merge_ready(&mut self, out: &mut Vec<Report>) -> Result<(), HostError> {
        while let Ok((w, parts)) = self.partials.try_recv() {
            self.merge(w, parts, out)?;
        }
        Ok(())
    }

    fn merge(&mut self, worker: u32, parts: Vec<Partials>, out: &mut Vec<Report>) -> Result<(), HostError> {
        let before = out.len();
        for p in parts {
            self.merger
                .push(p, out)
                .map_err(|source| HostError::Merge { worker, source })?;
        }
        self.reports += (out.len() - before) as u64;
        Ok(())
    }
}

impl Stage for Workers {
    fn process_batch(&mut self, packets: &[PacketRecord], out: &mut Vec<Report>) -> Result<(), HostError> {
        for rec in packets {
            let clock = self.clock_before(rec.ts_ns, out)?;
            let w = fanout_worker(&rec.key, self.config.workers, self.config.seed);
            self.push(w, Item::Packet { clock, rec: *rec }, out)?;
        }
        Ok(())
    }

    fn note_unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Vec<Report>) -> Result<(), HostError> {
        let clock = self.clock_before(ts_ns, out)?;
        let w = self.next_unparsed;
        self.next_unparsed = (w + 1) % self.config.workers;
        self.push(w, Item::Unparsed { clock, ts_ns, why }, out)
    }

    fn finish(&mut self, out: &mut Vec<Report>) -> Result<(), HostError> {
        let last = self.clock.unwrap_or(0);
        for w in 0..self.config.workers {
            self.send_pending(w)?;
            self.send(w, Msg::Finish(last))?;
            // Dropping the sender ends the worker's loop after its last message.
            self.threads[w as usize].tx = None;
        }
        let mut counters = Counters::default();
        for w in 0..self.config.workers {
            let Some(handle) = self.threads[w as usize].handle.take() else {
                continue;
            };
            match handle.join() {
                Ok(m) => counters.add(&m.counters()),
                Err(_) => {
                    return Err(HostError::Worker {
                        worker: w,
                        what: "failed while finishing".into(),
                    })
                }
            }
        }
        // Every worker has ended, so every partial it sent is queued.
        self.merge_ready(out)?;
        self.finished = counters;
        Ok(())
    }

    fn counters(&self) -> Counters {
        Counters {
            reports: self.reports,
            ..self.finished
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // Unfinished (an error elsewhere): let the threads end on their own.
        for t in &mut self.threads {
            t.tx = None;
        }
    }
}

/// A worker's loop: frames in, each finished sweep's partials out.
fn work(
    id: u32,
    mut m: Monitor,
    rx: Receiver<Msg>,
    tx: Sender<(u32, Vec<Partials>)>,
    emptied: Sender<Vec<Item>>,
) -> Monitor {
    // With merge_output a monitor reports nothing itself.
    let mut none = Vec::new();
    let mut run: Vec<PacketRecord> = Vec::with_capacity(BATCH);
    for msg in rx {
        match msg {
            Msg::Frames(mut items) => {
                for item in items.drain(..) {
                    match item {
                        Item::Packet { clock, rec } => {
                            if clock > rec.ts_ns {
                                m.process_batch(&run, &mut none);
                                run.clear();
                                m.tick(clock, &mut none);
                            }
                            run.push(rec);
                            if run.len() == BATCH {
                                m.process_batch(&run, &mut none);
                                run.clear();
                            }
                        }
                        Item::Unparsed { clock, ts_ns, why } => {
                            m.process_batch(&run, &mut none);
                            run.clear();
                            m.tick(clock, &mut none);
                            m.note_unparsed(ts_ns, why, &mut none);
                        }
                    }
                }
                m.process_batch(&run, &mut none);
                run.clear();
                let _ = emptied.send(items);
            }
            Msg::Tick(t) => m.tick(t, &mut none),
            Msg::Finish(t) => {
                m.tick(t, &mut none);
                m.finish(&mut none);
            }
        }
        debug_assert!(none.is_empty(), "a merging worker reported by itself");
        none.clear();
        let parts = m.take_partials();
        if !parts.is_empty() && tx.send((id, parts)).is_err() {
            break;
        }
    }
    m
}
