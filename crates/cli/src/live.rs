//! `clarion run --interface`: live capture, one worker thread per core,
//! reports and per-epoch statistics gathered on the main thread.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};

use clarion_live::{
    filter, EpochStats, Interface, PacketRing, RingConfig, Source, Worker, WorkerConfig, WorkerEvent,
    WorkerMetrics, WorkerSummary,
};

use clarion_engine::{Merger, MergerConfig, Report};

use clarion_live::{HostMetrics, XdpSource};
use clarion_xdp::{XdpConfig, XdpMode, XdpProgram, XdpSocket};

use crate::args::{RunArgs, SourceKind, XdpModeArg};
use crate::run::{build_monitor, load_events, monitor_config, open_sink, sink_error, write_all};
use crate::summary::{thousands, Summary};
use crate::Failure;

pub fn runtime(e: impl Into<anyhow::Error>) -> Failure {
    Failure::Runtime(e.into())
}

/// Stop flag set by SIGINT/SIGTERM; a second signal exits at once (status 1).
pub fn stop_flag() -> Result<Arc<AtomicBool>, Failure> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 1, Arc::clone(&stop))
            .and_then(|_| signal_hook::flag::register(sig, Arc::clone(&stop)))
            .map_err(|e| runtime(anyhow!(e).context("cannot install the signal handlers")))?;
    }
    Ok(stop)
}

fn ring_config(a: &RunArgs) -> Result<RingConfig, Failure> {
    let retire_ms = a.live.ring_retire / 1_000_000;
    if retire_ms == 0 || !a.live.ring_retire.is_multiple_of(1_000_000) || retire_ms > 10_000 {
        return Err(Failure::Usage(format!(
            "clarion: --ring-retire must be whole milliseconds between 1ms and 10s, not {} ns",
            a.live.ring_retire
        )));
    }
    Ok(RingConfig {
        block_size: a.live.ring_block_size,
        blocks: a.live.ring_blocks,
        frame_size: a.live.ring_frame_size,
        snaplen: a.live.snaplen,
        retire_ms: retire_ms as u32,
    })
}

/// Opens worker `w`'s ring on every interface (in each interface's fanout group when several workers share it).
fn open_rings(
    ifaces: &[(Interface, Vec<filter::Insn>)],
    cfg: &RingConfig,
    workers: u32,
) -> Result<Vec<Box<dyn Source>>, Failure> {
    let mut out: Vec<Box<dyn Source>> = Vec::new();
    for (k, (iface, prog)) in ifaces.iter().enumerate() {
        // One group per interface, distinct from other processes' groups.
        let group = (std::process::id() as u16)
            .wrapping_mul(31)
            .wrapping_add(k as u16);
        let fanout = (workers > 1).then_some(group);
        let ring = PacketRing::open(iface, cfg, prog, fanout).map_err(|e| runtime(anyhow!(e)))?;
        out.push(Box::new(ring));
    }
    Ok(out)
}

/// One XDP program per interface, kept attached until the workers are done.
fn attach_xdp(a: &RunArgs) -> Result<Vec<XdpProgram>, Failure> {
    if a.live.filter.is_some() {
        return Err(Failure::Usage(
            "clarion: --filter needs --source packet (AF_XDP takes every frame of its queues)".into(),
        ));
    }
    let mode = match a.live.xdp_mode {
        XdpModeArg::Native => XdpMode::Native,
        XdpModeArg::Generic => XdpMode::Generic,
    };
    let mut progs = Vec::new();
    for name in &a.interface {
        let prog = XdpProgram::attach(name, mode).map_err(|e| runtime(anyhow!(e)))?;
        if prog.queues() < a.workers {
            return Err(Failure::Usage(format!(
                "clarion: {name} has {} RX queue(s) and AF_XDP reads each with one worker; use --workers {} or fewer",
                prog.queues(),
                prog.queues()
            )));
        }
        progs.push(prog);
    }
    Ok(progs)
}

/// Worker `w`'s AF_XDP sockets: the queues q with q mod workers = w of every interface.
fn open_xdp(progs: &[XdpProgram], w: u32, workers: u32) -> Result<Vec<Box<dyn Source>>, Failure> {
    // 16,384 frames (32 MiB) and an RX ring of 8,192 per queue: tens of
    // milliseconds of buffering at a million frames/s, like the AF_PACKET ring.
    let cfg = XdpConfig {
        frames: 1 << 14,
        ring_size: 1 << 13,
        ..XdpConfig::default()
    };
    let mut out: Vec<Box<dyn Source>> = Vec::new();
    for prog in progs {
        for q in (w..prog.queues()).step_by(workers as usize) {
            let sock = XdpSocket::open(prog, q, &cfg).map_err(|e| runtime(anyhow!(e)))?;
            out.push(Box::new(XdpSource::new(sock, cfg.ring_size)));
        }
    }
    Ok(out)
}

pub fn run_live(a: &RunArgs) -> Result<ExitCode, Failure> {
    let specs = load_events(&a.events)?;
    let n_events = specs.len();
    let workers = a.workers;
    let ring_cfg = ring_config(a)?;
    let xdp = match a.live.source {
        SourceKind::Xdp => attach_xdp(a)?,
        SourceKind::Packet => Vec::new(),
    };
    let mut ifaces = Vec::new();
    for name in a.interface.iter().filter(|_| xdp.is_empty()) {
        let iface = Interface::lookup(name).map_err(|e| runtime(anyhow!(e)))?;
        let prog = match &a.live.filter {
            Some(expr) => filter::compile(expr, iface.link, ring_cfg.snaplen)
                .map_err(|e| Failure::Usage(format!("clarion: {e}")))?,
            None => filter::snap_only(ring_cfg.snaplen),
        };
        ifaces.push((iface, prog));
    }
    let stop = stop_flag()?;
    if !a.live.cpus.is_empty() {
        // Keep the main thread (merging, writing reports, metrics) off the
        // workers' CPUs when there is another one, so it never preempts them.
        let spare = core_affinity::get_core_ids()
            .unwrap_or_default()
            .into_iter()
            .find(|c| !a.live.cpus.contains(&c.id));
        if let Some(core) = spare {
            core_affinity::set_for_current(core);
        }
    }
    let deadline = a.live.duration.map(|d| Instant::now() + Duration::from_nanos(d));
    let (tx, rx) = mpsc::channel();
    let mut metrics = Vec::new();
    let mut handles = Vec::new();
    for w in 0..workers {
        let mut config = monitor_config(a);
        config.synchronous_sweep = false;
        config.worker = w;
        // Several workers hand their statistics to one merger, which tests
        // the predicates on the host's values. Every trigger goes through
        // it: the kernel's fanout hash leaves out the ports of IP fragments,
        // so even a 5-tuple's packets are not promised to one worker.
        config.merge_output = workers > 1;
        let monitor = build_monitor(a, config, &specs)?;
        let sources = match a.live.source {
            SourceKind::Packet => open_rings(&ifaces, &ring_cfg, workers)?,
            SourceKind::Xdp => open_xdp(&xdp, w, workers)?,
        };
        let m = Arc::new(WorkerMetrics::default());
        metrics.push(Arc::clone(&m));
        let cfg = WorkerConfig {
            id: w,
            step_budget: Duration::from_nanos(a.live.step_budget),
            low_water: a.live.low_water,
            stop: Arc::clone(&stop),
            deadline,
        };
        let worker = Worker::new(cfg, monitor, sources, tx.clone(), m);
        let cpu = a.live.cpus.get(w as usize).copied();
        let h = std::thread::Builder::new()
            .name(format!("clarion-worker-{w}"))
            .spawn(move || {
                if let Some(id) = cpu {
                    core_affinity::set_for_current(core_affinity::CoreId { id });
                }
                worker.run()
            })
            .map_err(|e| runtime(anyhow!(e).context("cannot start a worker thread")))?;
        handles.push(h);
    }
    drop(tx);
    let host_metrics = Arc::new(HostMetrics::default());
    if let Some(addr) = a.live.metrics {
        let bound = crate::metrics_server::serve(addr, metrics.clone(), Arc::clone(&host_metrics))?;
        if !a.quiet {
            eprintln!("clarion: metrics at http://{bound}/metrics");
        }
    }
    // Wait until every worker has committed its memory and started its
    // clock (packets meanwhile wait in the rings), so "capturing" is true.
    let mut pending_events = std::collections::VecDeque::new();
    let mut ready = 0;
    while ready < workers {
        match rx.recv() {
            Ok(WorkerEvent::Ready(_)) => ready += 1,
            Ok(WorkerEvent::Failed(w, e)) => {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                return Err(runtime(anyhow!(e).context(format!("worker {w} failed"))));
            }
            Ok(other) => pending_events.push_back(other),
            Err(_) => break,
        }
    }
    if !a.quiet {
        let names: Vec<&str> = a.interface.iter().map(String::as_str).collect();
        eprintln!(
            "clarion: capturing on {} ({}) with {} worker{}, {} events; Ctrl-C stops",
            names.join(", "),
            match a.live.source {
                SourceKind::Packet => "AF_PACKET",
                SourceKind::Xdp => "AF_XDP",
            },
            workers,
            if workers == 1 { "" } else { "s" },
            n_events
        );
    }

    let mut sink = open_sink(a)?;
    let mut merger = (workers > 1).then(|| {
        Merger::new(MergerConfig {
            host: monitor_config(a).host,
            workers,
            history_windows: monitor_config(a).history_windows,
        })
    });
    let mut merged: Vec<Report> = Vec::new();
    let mut written: u64 = 0;
    let mut epoch_out = match &a.live.epoch_stats {
        Some(p) => Some(BufWriter::new(
            File::create(p)
                .with_context(|| format!("cannot create {}", p.display()))
                .map_err(runtime)?,
        )),
        None => None,
    };
    let started = Instant::now();
    let every = (a.live.stats_every > 0 && !a.quiet).then(|| Duration::from_nanos(a.live.stats_every));
    let mut next_line = every.map(|d| started + d);
    let mut finished: Vec<WorkerSummary> = Vec::new();
    let mut failure: Option<anyhow::Error> = None;
    let mut window = Periodic::default();
    loop {
        let timeout = next_line
            .map(|t| t.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(1));
        let event = match pending_events.pop_front() {
            Some(e) => Ok(e),
            None => rx.recv_timeout(timeout),
        };
        match event {
            Ok(WorkerEvent::Ready(_)) => {}
            Ok(WorkerEvent::Reports(_, mut reports)) => {
                written += reports.len() as u64;
                host_metrics
                    .reports
                    .store(written, std::sync::atomic::Ordering::Relaxed);
                write_all(&mut *sink, &mut reports)?;
                // A live run has no end in sight: an epoch's reports reach the output at once.
                sink.flush().map_err(sink_error)?;
            }
            Ok(WorkerEvent::Partials(w, parts)) => {
                if let Some(m) = merger.as_mut() {
                    for p in parts {
                        if let Err(e) = m.push(p, &mut merged) {
                            stop.store(true, std::sync::atomic::Ordering::Relaxed);
                            failure.get_or_insert(
                                anyhow!(e).context(format!("cannot merge worker {w}'s statistics")),
                            );
                        }
                    }
                    written += merged.len() as u64;
                    host_metrics
                        .reports
                        .store(written, std::sync::atomic::Ordering::Relaxed);
                    write_all(&mut *sink, &mut merged)?;
                    sink.flush().map_err(sink_error)?;
                }
            }
            Ok(WorkerEvent::Epoch(st)) => {
                window.add(&st);
                if let Some(out) = epoch_out.as_mut() {
                    writeln!(out, "{}", st.to_json_line())
                        .context("cannot write epoch statistics")
                        .map_err(runtime)?;
                }
            }
            Ok(WorkerEvent::Finished(_, s)) => finished.push(*s),
            Ok(WorkerEvent::Failed(w, e)) => {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                failure.get_or_insert(anyhow!(e).context(format!("worker {w} failed")));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if let (Some(t), Some(d)) = (next_line, every) {
            if Instant::now() >= t {
                eprintln!("{}", window.line(started.elapsed(), &metrics));
                window = Periodic::default();
                next_line = Some(t + d);
            }
        }
    }
    for h in handles {
        let _ = h.join();
    }
    // Detaches the XDP programs (their sockets went with the workers).
    drop(xdp);
    sink.flush().map_err(sink_error)?;
    if let Some(out) = epoch_out.as_mut() {
        out.flush()
            .context("cannot write epoch statistics")
            .map_err(runtime)?;
    }
    if !a.quiet {
        let mut counters = clarion_engine::Counters::default();
        let mut frames = 0;
        let mut drops = 0;
        let mut delays = clarion_live::DelayHistogram::default();
        let mut sweep_max = 0;
        for s in &finished {
            counters.add(&s.counters);
            frames += s.frames;
            drops += s.drops;
            delays.merge(&s.delays);
            sweep_max = sweep_max.max(s.max_sweep_wall_ns);
        }
        // Merging workers report nothing themselves: count what was written.
        counters.reports = written;
        let s = Summary {
            counters,
            dos_threshold: 0,
            frames,
            skipped: 0,
            dropped: drops,
            elapsed: started.elapsed(),
            events: n_events,
        };
        eprint!("{s}");
        eprintln!(
            "  live: {} kernel drops, queueing delay p99 {} max {}, longest sweep {}",
            thousands(drops),
            micros(delays.quantile(0.99)),
            micros(delays.max()),
            micros(sweep_max)
        );
    }
    match failure {
        Some(e) => Err(Failure::Runtime(e)),
        None => Ok(ExitCode::SUCCESS),
    }
}

fn micros(ns: u64) -> String {
    if ns >= 10_000_000 {
        format!("{:.0} ms", ns as f64 / 1e6)
    } else if ns >= 1_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else {
        format!("{:.0} µs", ns as f64 / 1e3)
    }
}

/// Epoch statistics since the previous summary line.
#[derive(Default)]
struct Periodic {
    epochs: u64,
    packets: u64,
    drops: u64,
    late: u64,
    delay_p99_max: u64,
    delay_max: u64,
    sweep_max: u64,
}

impl Periodic {
    fn add(&mut self, st: &EpochStats) {
        self.epochs += 1;
        self.packets += st.packets;
        self.drops += st.drops;
        self.late += u64::from(st.late);
        self.delay_p99_max = self.delay_p99_max.max(st.delay_p99_ns);
        self.delay_max = self.delay_max.max(st.delay_max_ns);
        self.sweep_max = self.sweep_max.max(st.sweep_wall_ns);
    }

    fn line(&self, elapsed: Duration, metrics: &[Arc<WorkerMetrics>]) -> String {
        let reports: u64 = metrics.iter().map(|m| WorkerMetrics::get(&m.reports)).sum();
        let flows: u64 = metrics.iter().map(|m| WorkerMetrics::get(&m.flows_active)).sum();
        format!(
            "clarion: {:.0}s: {} packets, {} drops, {} epochs ({} late), delay p99 {} max {}, sweep max {}, {} flows, {} reports",
            elapsed.as_secs_f64(),
            thousands(self.packets),
            thousands(self.drops),
            thousands(self.epochs),
            self.late,
            micros(self.delay_p99_max),
            micros(self.delay_max),
            micros(self.sweep_max),
            thousands(flows),
            thousands(reports)
        )
    }
}
