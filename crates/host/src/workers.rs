//! Several monitors, worker 0 on the caller's thread and each other on a
//! thread of its own, merged into one host's reports.
//!
//! # Design
//! The caller's thread spreads packets over the workers by the symmetric
//! flow hash ([`fanout_worker`]: both directions of a connection on one
//! worker). Worker 0 runs inline: the caller's thread holds its
//! [`Monitor`] and processes its packets itself, in runs of [`BATCH`].
//! Each other worker gets its packets in batches of
//! [`WorkersConfig::batch`] over a bounded channel (a slow worker holds the
//! reader back; nothing is dropped) and sends the partials of every
//! finished sweep back. Every worker runs its monitor with `merge_output`,
//! and its frames and ticks take one path (`Worker`), inline or on a
//! thread. The caller's thread feeds the partials to the [`Merger`], which
//! releases a window's reports once every worker has closed it.
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
//! A hash per packet on the reading thread, and one channel message per
//! worker thread per [`WorkersConfig::batch`] of its packets; the merge
//! work per window is that of the groups the workers share, also on the
//! reading thread. That thread reads and parses every frame too, so
//! worker 0 takes a smaller part of the flows: one share of the hash to
//! [`THREAD_SHARES`] (4) for each other worker, a fifth of the flows on 2
//! workers. N workers then use N threads, and gain on N cores when the
//! monitors' work outweighs reading and parsing. On 2 cores shared with
//! other builds, 1 M packets of `pathspider_real` x16 (21 alternating runs,
//! median wall time of `clarion run`): `examples/demo.clarion` 0.33 s on
//! one monitor (`--workers 1`), 0.28 s on 2 workers; one 5-tuple event
//! (`scripts/peers-5tuple.clarion`) 0.19 s on both. With a thread per
//! worker (the reader a third thread) the same runs took 0.33 s and 0.22 s
//! on 2 workers. The best share depends on the events; in another session
//! (one monitor 0.38 s and 0.19 s; 4 shares 0.28 s and 0.18 s) an even
//! split took 0.37 s and 0.23 s, 2 shares 0.31 s and 0.20 s, 8 shares
//! 0.32 s and 0.17 s, and nearly nothing inline (a reader and one worker)
//! 0.34 s and 0.15 s.

use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::JoinHandle;

use clarion_engine::{
    fanout_worker, Counters, Merger, MergerConfig, Monitor, MonitorConfig, Partials, Report, Unparsed, BATCH,
};
use clarion_lang::spec::EventSpec;
use clarion_pipeline::{Error, Outputs, Stage};
use clarion_wire::{FlowKey, PacketRecord};

use crate::HostError;

/// Packet time between ticks of every worker: how long a window may wait
/// for a worker without packets before the merger can release it. Ticking
/// at every epoch cost three messages a packet on sparse traffic.
const TICK_EVERY_NS: u64 = 100_000_000;

/// Shares of the flow hash each worker thread takes for worker 0's one:
/// worker 0 runs on the reading thread, which also reads, parses and
/// spreads every frame. Measured on 2 cores (module documentation, "Cost").
const THREAD_SHARES: u32 = 4;

/// The worker, of `workers`, that a flow's packets go to: [`fanout_worker`]
/// over one share for worker 0 and [`THREAD_SHARES`] for each other, so both
/// directions of a connection still land together.
fn worker_of(key: &FlowKey, workers: u32, seed: u64) -> u32 {
    let shares = THREAD_SHARES.saturating_mul(workers - 1).saturating_add(1);
    match fanout_worker(key, shares, seed) {
        0 => 0,
        s => 1 + (s - 1) / THREAD_SHARES,
    }
}

/// How packets are spread and queued.
#[derive(Clone, Copy, Debug)]
pub struct WorkersConfig {
    /// Workers (at least 1): worker 0 on the caller's thread, each other
    /// on a thread of its own.
    pub workers: u32,
    /// Picks one of many spreads of flows over the workers.
    pub seed: u64,
    /// Packets sent to a worker thread in one message.
    pub batch: usize,
    /// Messages queued per worker thread before the reader waits.
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

/// A worker: its monitor and the packets it was given but has not
/// processed yet. The one handling of frames and ticks, whether the worker
/// runs on a thread of its own ([`work`]) or inline on the caller's.
struct Worker {
    m: Monitor,
    /// Packets in input order, processed by [`BATCH`] or before anything
    /// else reaches the monitor (a tick, a frame that did not parse).
    run: Vec<PacketRecord>,
    /// With `merge_output` a monitor reports nothing itself.
    none: Vec<Report>,
}

impl Worker {
    fn new(m: Monitor) -> Worker {
        Worker {
            m,
            run: Vec::with_capacity(BATCH),
            none: Vec::new(),
        }
    }

    /// Takes one frame: first ticks to the host's clock before it when
    /// that is ahead of the frame (see the module documentation).
    fn take(&mut self, item: Item) {
        match item {
            Item::Packet { clock, rec } => {
                if clock > rec.ts_ns {
                    self.tick(clock);
                }
                self.run.push(rec);
                if self.run.len() == BATCH {
                    self.flush();
                }
            }
            Item::Unparsed { clock, ts_ns, why } => {
                self.tick(clock);
                self.m.note_unparsed(ts_ns, why, &mut self.none);
            }
        }
    }

    /// Processes the packets taken so far.
    fn flush(&mut self) {
        if !self.run.is_empty() {
            self.m.process_batch(&self.run, &mut self.none);
            self.run.clear();
        }
    }

    fn tick(&mut self, t: u64) {
        self.flush();
        self.m.tick(t, &mut self.none);
    }

    /// Ticks to `t`, then finishes.
    fn finish(&mut self, t: u64) {
        self.tick(t);
        self.m.finish(&mut self.none);
    }

    /// The partials of the sweeps finished since the last call.
    fn partials(&mut self) -> Vec<Partials> {
        debug_assert!(self.none.is_empty(), "a merging worker reported by itself");
        self.none.clear();
        self.m.take_partials()
    }
}

/// A worker on a thread of its own (workers 1 to N - 1), as the caller's
/// thread sees it.
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
    /// Worker 0, run on the caller's thread.
    inline: Worker,
    /// Workers 1 to N - 1: `threads[i]` is worker `i + 1`.
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
    /// Starts `config.workers` workers, worker 0 on the caller's thread
    /// and each other on a thread of its own, each a monitor configured by
    /// `monitor` (its `worker`, `merge_output` and `five_tuple_fanout` set
    /// here) with every event of `specs` installed, in order.
    pub fn start(
        monitor: &MonitorConfig,
        specs: &[EventSpec],
        config: WorkersConfig,
    ) -> Result<Workers, HostError> {
        let n = config.workers.max(1);
        let (ptx, prx) = mpsc::channel();
        let mut monitors = Vec::with_capacity(n as usize);
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
            monitors.push(m);
        }
        let mut monitors = monitors.into_iter();
        let inline = Worker::new(monitors.next().expect("at least one worker"));
        let epoch_ns = inline.m.epoch_ns().max(1);
        let mut threads = Vec::with_capacity(n as usize - 1);
        for (w, m) in (1..n).zip(monitors) {
            let (tx, rx) = mpsc::sync_channel(config.queue.max(1));
            let (etx, erx) = mpsc::channel();
            let ptx = ptx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("clarion-worker-{w}"))
                .spawn(move || work(w, Worker::new(m), rx, ptx, etx))
                .map_err(|e| HostError::worker(w, format!("cannot start: {e}")))?;
            threads.push(Thread {
                tx: Some(tx),
                pending: Vec::with_capacity(config.batch),
                emptied: erx,
                handle: Some(handle),
            });
        }
        Ok(Workers {
            config: WorkersConfig { workers: n, ..config },
            inline,
            threads,
            partials: prx,
            merger: Merger::new(MergerConfig {
                host: monitor.host.clone(),
                workers: n,
                history_windows: monitor.history_windows,
                adapt: monitor.adapt.clone(),
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
    fn clock_before(&mut self, ts_ns: u64, out: &mut Vec<Report>) -> Result<u64, Error> {
        let clock = self.clock.unwrap_or(ts_ns);
        let due = match self.ticked {
            None => true,
            Some(t) => clock >= t.saturating_add(TICK_EVERY_NS.max(self.epoch_ns)),
        };
        if due {
            self.tick_all(clock, out)?;
            self.ticked = Some(clock);
        }
        self.clock = Some(clock.max(ts_ns));
        Ok(clock)
    }

    /// Gives worker `w` a frame: worker 0 takes it now, the others in
    /// their next batch.
    fn push(&mut self, w: u32, item: Item, out: &mut Vec<Report>) -> Result<(), Error> {
        let Some(i) = w.checked_sub(1) else {
            self.inline.take(item);
            return Ok(());
        };
        let t = &mut self.threads[i as usize];
        t.pending.push(item);
        if t.pending.len() >= self.config.batch {
            self.send_pending(i)?;
            self.merge_ready(out)?;
        }
        Ok(())
    }

    /// Sends thread `i` (worker `i + 1`) its pending frames.
    fn send_pending(&mut self, i: u32) -> Result<(), Error> {
        let t = &mut self.threads[i as usize];
        if t.pending.is_empty() {
            return Ok(());
        }
        let next = t
            .emptied
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(self.config.batch));
        let items = std::mem::replace(&mut t.pending, next);
        self.send(i, Msg::Frames(items))
    }

    fn send(&mut self, i: u32, msg: Msg) -> Result<(), Error> {
        let t = &mut self.threads[i as usize];
        let sent = t.tx.as_ref().is_some_and(|tx| tx.send(msg).is_ok());
        if sent {
            Ok(())
        } else {
            Err(self.died(i))
        }
    }

    /// Why thread `i` (worker `i + 1`) stopped taking messages (it ended early).
    fn died(&mut self, i: u32) -> Error {
        let t = &mut self.threads[i as usize];
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
        Error::Worker { worker: i + 1, what }
    }

    /// Sends every worker thread its pending frames and a tick to `t`,
    /// then ticks worker 0.
    fn tick_all(&mut self, t: u64, out: &mut Vec<Report>) -> Result<(), Error> {
        for i in 0..self.threads.len() as u32 {
            self.send_pending(i)?;
            self.send(i, Msg::Tick(t))?;
        }
        self.inline.tick(t);
        self.merge_ready(out)
    }

    /// Merges the partials worker 0 has and the other workers have sent
    /// so far.
    fn merge_ready(&mut self, out: &mut Vec<Report>) -> Result<(), Error> {
        let parts = self.inline.partials();
        if !parts.is_empty() {
            self.merge(0, parts, out)?;
        }
        while let Ok((w, parts)) = self.partials.try_recv() {
            self.merge(w, parts, out)?;
        }
        Ok(())
    }

    fn merge(&mut self, worker: u32, parts: Vec<Partials>, out: &mut Vec<Report>) -> Result<(), Error> {
        let before = out.len();
        for p in parts {
            self.merger
                .push(p, out)
                .map_err(|source| Error::Merge { worker, source })?;
        }
        self.reports += (out.len() - before) as u64;
        Ok(())
    }
}

impl Stage for Workers {
    fn batch(&mut self, packets: &[PacketRecord], out: &mut Outputs) -> Result<(), Error> {
        let out = &mut out.reports;
        for rec in packets {
            let clock = self.clock_before(rec.ts_ns, out)?;
            let w = worker_of(&rec.key, self.config.workers, self.config.seed);
            self.push(w, Item::Packet { clock, rec: *rec }, out)?;
        }
        self.merge_ready(out)
    }

    fn unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Outputs) -> Result<(), Error> {
        let out = &mut out.reports;
        let clock = self.clock_before(ts_ns, out)?;
        let w = self.next_unparsed;
        self.next_unparsed = (w + 1) % self.config.workers;
        self.push(w, Item::Unparsed { clock, ts_ns, why }, out)?;
        self.merge_ready(out)
    }

    fn finish(&mut self, out: &mut Outputs) -> Result<(), Error> {
        let out = &mut out.reports;
        let last = self.clock.unwrap_or(0);
        for i in 0..self.threads.len() as u32 {
            self.send_pending(i)?;
            self.send(i, Msg::Finish(last))?;
            // Dropping the sender ends the worker's loop after its last message.
            self.threads[i as usize].tx = None;
        }
        // Worker 0 finishes while the threads do.
        self.inline.finish(last);
        let mut counters = self.inline.m.counters();
        for (w, t) in (1..).zip(&mut self.threads) {
            let Some(handle) = t.handle.take() else {
                continue;
            };
            match handle.join() {
                Ok(m) => counters.add(&m.counters()),
                Err(_) => {
                    return Err(Error::Worker {
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

/// A worker thread's loop: frames in, each finished sweep's partials out.
fn work(
    id: u32,
    mut worker: Worker,
    rx: Receiver<Msg>,
    tx: Sender<(u32, Vec<Partials>)>,
    emptied: Sender<Vec<Item>>,
) -> Monitor {
    for msg in rx {
        match msg {
            Msg::Frames(mut items) => {
                for item in items.drain(..) {
                    worker.take(item);
                }
                worker.flush();
                let _ = emptied.send(items);
            }
            Msg::Tick(t) => worker.tick(t),
            Msg::Finish(t) => worker.finish(t),
        }
        let parts = worker.partials();
        if !parts.is_empty() && tx.send((id, parts)).is_err() {
            break;
        }
    }
    worker.m
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;

    /// Both directions of a connection on one worker, and each worker's
    /// part of the flows its shares: one for worker 0, [`THREAD_SHARES`]
    /// for each thread.
    #[test]
    fn worker_of_keeps_connections_together_and_gives_worker_0_one_share() {
        const FLOWS: u32 = 20_000;
        for workers in 1..=4u32 {
            let mut seen = vec![0u32; workers as usize];
            for i in 0..FLOWS {
                let k = FlowKey::new(
                    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)),
                    IpAddr::V4(Ipv4Addr::new(10, 1, 0, 1)),
                    6,
                    Some((1024 + (i % 7) as u16, 443)),
                    None,
                );
                let w = worker_of(&k, workers, 7);
                assert_eq!(worker_of(&k.reversed(), workers, 7), w, "{k:?}");
                seen[w as usize] += 1;
            }
            let shares = 1 + THREAD_SHARES * (workers - 1);
            for (w, &n) in seen.iter().enumerate() {
                let expected = if w == 0 { 1 } else { THREAD_SHARES } * FLOWS / shares;
                assert!(
                    n.abs_diff(expected) < expected / 10 + 100,
                    "{workers} workers: {seen:?}, worker {w} expected about {expected}"
                );
            }
        }
    }
}
