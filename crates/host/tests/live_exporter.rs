//! A worker's export policies on generated traffic, without a network:
//! two in-memory queues (one flow each is never split) hand a worker
//! frames built by `clarion_wire::build`, and
//! - the header stream, decoded from a UDP socket on loopback, holds the
//!   header record of every frame (time and the queue's interface number
//!   included), each flow's in order, and all of it arrives while the
//!   worker still runs, on the quiet wire after the frames (the exporter's
//!   tick, not its finish, sent it);
//! - the pcapng files hold exactly the UDP frames, each flow's in order;
//! - the summary counts every frame offered and every frame taken.
//!
//! The reference is the frames themselves, parsed by `parse_frame`.

use std::collections::{BTreeMap, VecDeque};
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use clarion_capture::PacketSource;
use clarion_engine::{Monitor, MonitorConfig};
use clarion_export::{ExportConfig, Exporter};
use clarion_headers::{Decoder, HeaderRecord};
use clarion_host::LiveChain;
use clarion_live::{realtime_ns, Frame, LiveError, Source, Worker, WorkerConfig, WorkerEvent, WorkerMetrics};
use clarion_pipeline::{ExportPolicies, Pipeline, Stages};
use clarion_wire::build::{FrameSpec, IpPair, TcpSpec, Transport};
use clarion_wire::LinkType;
use proptest::prelude::*;

/// Frames with the time they were handed over (Unix ns).
type Stamped = Vec<(u64, Vec<u8>)>;

/// A receive queue holding frames from the start, each stamped with the
/// wall clock when handed over (as the kernel stamps a packet when it
/// arrives) and logged so; its descriptor (an idle UDP socket) never
/// becomes readable, so a quiet worker waits its usual 10 ms at most.
struct Queue {
    frames: VecDeque<Vec<u8>>,
    handed: Arc<Mutex<Stamped>>,
    idle: UdpSocket,
    name: String,
    /// Fails (its drop counters unreadable) once every frame is handed over.
    fail_when_empty: bool,
}

impl Source for Queue {
    fn link(&self) -> LinkType {
        LinkType::Ethernet
    }
    fn recv(&mut self, max: usize, f: &mut dyn FnMut(Frame<'_>)) -> usize {
        let mut n = 0;
        while n < max {
            let Some(data) = self.frames.pop_front() else {
                break;
            };
            let ts_ns = realtime_ns();
            f(Frame {
                ts_ns,
                data: &data,
                orig_len: data.len() as u32,
            });
            self.handed.lock().expect("the log").push((ts_ns, data));
            n += 1;
        }
        n
    }
    fn backlog(&self, limit: usize) -> usize {
        self.frames.len().min(limit)
    }
    fn capacity(&self) -> usize {
        1
    }
    fn fd(&self) -> RawFd {
        self.idle.as_raw_fd()
    }
    fn take_drops(&mut self) -> Result<u64, LiveError> {
        if self.fail_when_empty && self.frames.is_empty() {
            return Err(LiveError::NoInterface(self.name.clone()));
        }
        Ok(0)
    }
    fn interface(&self) -> (&str, u32) {
        (&self.name, 0)
    }
    fn went_down(&mut self) -> bool {
        false
    }
    fn reopen(&mut self) -> Result<u32, LiveError> {
        Ok(0)
    }
    fn hidden_delay(&self) -> Duration {
        Duration::from_millis(1)
    }
}

/// A flow: addresses, ports, TCP or UDP.
#[derive(Clone, Copy, Debug)]
struct Flow {
    src: u32,
    dst: u32,
    sport: u16,
    dport: u16,
    udp: bool,
}

fn flow() -> impl Strategy<Value = Flow> {
    (any::<u32>(), any::<u32>(), 1u16.., 1u16.., any::<bool>()).prop_map(|(src, dst, sport, dport, udp)| {
        Flow {
            src,
            dst,
            sport,
            dport,
            udp,
        }
    })
}

fn frame(f: &Flow, payload: usize, n: u32) -> FrameSpec {
    FrameSpec {
        ip: IpPair::V4 {
            src: f.src.into(),
            dst: f.dst.into(),
        },
        transport: if f.udp {
            Transport::Udp {
                src_port: f.sport,
                dst_port: f.dport,
            }
        } else {
            Transport::Tcp(TcpSpec {
                src_port: f.sport,
                dst_port: f.dport,
                seq: n.wrapping_mul(1000),
                ack: 1,
                flags: clarion_wire::tcp_flags::ACK,
                window: 512,
                ..TcpSpec::default()
            })
        },
        payload_len: payload,
        ..FrameSpec::default()
    }
}

/// Per flow, what `f` gives of each item, in order.
fn by_flow<T, K: Ord, U>(items: &[T], key: impl Fn(&T) -> K, f: impl Fn(&T) -> U) -> BTreeMap<K, Vec<U>> {
    let mut m: BTreeMap<K, Vec<U>> = BTreeMap::new();
    for i in items {
        m.entry(key(i)).or_default().push(f(i));
    }
    m
}

/// A header record's flow (one direction).
fn header_key(h: &HeaderRecord) -> (std::net::IpAddr, std::net::IpAddr, Option<(u16, u16)>, u8) {
    (h.src, h.dst, h.ports, h.proto)
}

/// Runs a worker with both queues and the policies; returns the frames
/// handed over, what the collector received (and before the stop), the
/// files' frames and the summary's counters.
fn run(queues: [Vec<Vec<u8>>; 2], interfaces: [u16; 2], fail: bool) -> Outcome {
    let want_headers: usize = queues.iter().map(Vec::len).sum();
    let handed = [Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new()))];
    let collector = UdpSocket::bind("127.0.0.1:0").expect("a collector socket");
    collector
        .set_read_timeout(Some(Duration::from_millis(1)))
        .expect("a timeout");
    let port = collector.local_addr().expect("its address").port();
    let policies = clarion_lang::check_exports(&format!(
        "export udp\n  filter proto = udp\n  send packets to pcapng\n\
         export all\n  send headers to collector 127.0.0.1 port {port}\n"
    ))
    .expect("policies");
    let dir = tempfile::tempdir().expect("a directory");
    let config = ExportConfig {
        export_dir: Some(dir.path().to_path_buf()),
        run_id: "t".into(),
        ..ExportConfig::default()
    };
    let exporter = Exporter::new(&policies, &config).expect("an exporter");
    let sources: Vec<Box<dyn Source>> = queues
        .into_iter()
        .enumerate()
        .map(|(i, frames)| {
            Box::new(Queue {
                frames: frames.into(),
                handed: Arc::clone(&handed[i]),
                idle: UdpSocket::bind("127.0.0.1:0").expect("a socket"),
                name: format!("clarion-test-none{i}"),
                fail_when_empty: fail,
            }) as Box<dyn Source>
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let cfg = WorkerConfig {
        id: 0,
        step_budget: Duration::from_micros(50),
        low_water: 0,
        clock_lag: Duration::from_millis(1),
        stop: Arc::clone(&stop),
        deadline: Some(Instant::now() + Duration::from_secs(30)),
        // The queues' made-up interfaces are "down": never stop for it.
        down_timeout: Duration::from_secs(3600),
    };
    let monitor = Monitor::new(MonitorConfig {
        synchronous_sweep: false,
        ..MonitorConfig::default()
    });
    let (tx, rx) = mpsc::channel();
    let stages = Stages {
        exports: Some(ExportPolicies::new(exporter)),
        ..Stages::default()
    };
    let chain = LiveChain::new(Pipeline::new(monitor, stages), interfaces.to_vec());
    let worker = Worker::new(cfg, chain, sources, tx, Arc::new(WorkerMetrics::default()));
    let started = Instant::now();
    let handle = std::thread::spawn(move || worker.run());
    let mut decoder = Decoder::new();
    let mut headers = Vec::new();
    let mut last = None;
    let mut buf = vec![0u8; 65_536];
    // Headers while the worker runs: up to 3 s for all of them.
    while headers.len() < want_headers && started.elapsed() < Duration::from_secs(3) {
        if let Ok(n) = collector.recv(&mut buf) {
            decoder.decode_into(&buf[..n], &mut headers).expect("a datagram");
            last = Some(realtime_ns());
        }
    }
    let before_stop = headers.len();
    stop.store(true, Ordering::Relaxed);
    handle.join().expect("the worker ends");
    while let Ok(n) = collector.recv(&mut buf) {
        decoder.decode_into(&buf[..n], &mut headers).expect("a datagram");
    }
    let mut summary = None;
    let mut failed = false;
    for ev in rx.try_iter() {
        match ev {
            WorkerEvent::Outputs(_, o) if o.exports.is_some() => summary = o.exports,
            WorkerEvent::Failed(..) => failed = true,
            _ => {}
        }
    }
    let mut files: Vec<_> = std::fs::read_dir(dir.path())
        .map(|d| d.map(|e| e.expect("an entry").path()).collect())
        .unwrap_or_default();
    files.sort();
    let mut written = Vec::new();
    for f in files {
        let mut src = clarion_capture::CaptureFile::open(&f).expect("a pcapng");
        while let Some(p) = src.next_packet() {
            let p = p.expect("a packet");
            written.push((p.ts_ns, p.data.to_vec(), p.orig_len));
        }
    }
    Outcome {
        headers,
        before_stop,
        last_ns: last,
        handed: handed.map(|h| std::mem::take(&mut *h.lock().expect("the log"))),
        written,
        stats: summary,
        failed,
    }
}

struct Outcome {
    headers: Vec<HeaderRecord>,
    before_stop: usize,
    /// When the last header arrived (Unix ns).
    last_ns: Option<u64>,
    /// Each queue's frames as handed over, stamped.
    handed: [Stamped; 2],
    written: Vec<(u64, Vec<u8>, u32)>,
    /// The worker's export counters (not when it failed).
    stats: Option<clarion_export::ExportStats>,
    failed: bool,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn a_workers_exports_equal_its_frames(
        flows in prop::collection::vec(flow(), 1..8),
        packets in prop::collection::vec((any::<prop::sample::Index>(), 0usize..300), 1..400),
        interfaces in any::<[u16; 2]>(),
    ) {
        // Flow k goes to queue k % 2, so each flow's frames stay in order.
        let mut queues: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
        for (n, (which, payload)) in packets.iter().enumerate() {
            let k = which.index(flows.len());
            queues[k % 2].push(frame(&flows[k], *payload, n as u32).build());
        }
        let got = run(queues, interfaces, false);
        let stats = got.stats.clone().expect("the worker's export counters");
        let mut want_headers = Vec::new();
        let mut want_udp = Vec::new();
        for (q, handed) in got.handed.iter().enumerate() {
            for (ts, data) in handed {
                let rec = clarion_wire::parse_frame(LinkType::Ethernet, data, *ts, data.len() as u32)
                    .expect("a built frame parses");
                want_headers.push(HeaderRecord::from_packet(&rec, interfaces[q], 1));
                if rec.key.proto == 17 {
                    want_udp.push((*ts, data.clone(), data.len() as u32));
                }
            }
        }
        prop_assert_eq!(want_headers.len(), packets.len(), "every frame handed over");
        let last_ts = got.handed.iter().flatten().map(|(ts, _)| *ts).max().unwrap_or(0);
        let delay = got.last_ns.map(|t| Duration::from_nanos(t.saturating_sub(last_ts)));

        // Every header before the stop, sent by the tick on the quiet wire
        // FLUSH_AFTER_NS (100 ms) of packet time and a tick (10 ms) after
        // the frame that began its datagram; a second's slack for a loaded machine.
        eprintln!("{} headers, the last {:?} after the last frame", want_headers.len(), delay);
        prop_assert_eq!(got.before_stop, want_headers.len(), "headers before the stop");
        prop_assert!(delay.is_some_and(|t| t < Duration::from_secs(1)), "{:?}", delay);
        prop_assert_eq!(got.headers.len(), want_headers.len());
        prop_assert_eq!(
            by_flow(&got.headers, header_key, |h| *h),
            by_flow(&want_headers, header_key, |h| *h)
        );
        let frame_key = |f: &(u64, Vec<u8>, u32)| {
            clarion_wire::parse_frame(LinkType::Ethernet, &f.1, f.0, f.2).expect("a frame").key
        };
        prop_assert_eq!(got.written.len(), want_udp.len());
        prop_assert_eq!(by_flow(&got.written, frame_key, Clone::clone), by_flow(&want_udp, frame_key, Clone::clone));

        prop_assert_eq!(stats.offered, want_headers.len() as u64);
        let matched: Vec<(String, u64)> = stats.policies.iter().map(|p| (p.name.clone(), p.matched)).collect();
        prop_assert_eq!(
            matched,
            vec![("udp".to_string(), want_udp.len() as u64), ("all".to_string(), want_headers.len() as u64)]
        );
    }
}

/// A worker that fails (here its queue's drop counters cannot be read once
/// every frame is handed over) still finishes its exporter: every header
/// it took arrives and its pcapng file is complete, with every UDP frame.
#[test]
fn a_failing_worker_still_finishes_its_exports() {
    let udp = Flow {
        src: 0x0a00_0001,
        dst: 0x0a00_0002,
        sport: 5000,
        dport: 53,
        udp: true,
    };
    let tcp = Flow { udp: false, ..udp };
    let frames: Vec<Vec<u8>> = (0..50)
        .map(|n| frame(if n % 2 == 0 { &udp } else { &tcp }, 10, n).build())
        .collect();
    let got = run([frames, Vec::new()], [0, 1], true);
    assert!(got.failed, "the worker failed");
    assert_eq!(got.handed[0].len(), 50);
    assert_eq!(got.headers.len(), 50, "every header sent");
    let want: Vec<(u64, Vec<u8>, u32)> = got.handed[0]
        .iter()
        .filter(|(_, d)| {
            clarion_wire::parse_frame(LinkType::Ethernet, d, 0, d.len() as u32)
                .is_ok_and(|r| r.key.proto == 17)
        })
        .map(|(ts, d)| (*ts, d.clone(), d.len() as u32))
        .collect();
    assert_eq!(want.len(), 25);
    assert_eq!(got.written, want, "the file is complete");
}

/// A queue for measuring: frames handed over in a loop by index, no log;
/// it notes when it handed the first frame and when the last.
struct Timed {
    frames: Vec<Vec<u8>>,
    next: usize,
    idle: UdpSocket,
    span: Arc<Mutex<(Option<Instant>, Option<Instant>)>>,
}

impl Source for Timed {
    fn link(&self) -> LinkType {
        LinkType::Ethernet
    }
    fn recv(&mut self, max: usize, f: &mut dyn FnMut(Frame<'_>)) -> usize {
        let end = (self.next + max).min(self.frames.len());
        if self.next == 0 && end > 0 {
            self.span.lock().expect("span").0 = Some(Instant::now());
        }
        let ts_ns = realtime_ns();
        for data in &self.frames[self.next..end] {
            f(Frame {
                ts_ns,
                data,
                orig_len: data.len() as u32,
            });
        }
        let n = end - self.next;
        self.next = end;
        if n > 0 && end == self.frames.len() {
            self.span.lock().expect("span").1 = Some(Instant::now());
        }
        n
    }
    fn backlog(&self, limit: usize) -> usize {
        (self.frames.len() - self.next).min(limit)
    }
    fn capacity(&self) -> usize {
        1
    }
    fn fd(&self) -> RawFd {
        self.idle.as_raw_fd()
    }
    fn take_drops(&mut self) -> Result<u64, LiveError> {
        Ok(0)
    }
    fn interface(&self) -> (&str, u32) {
        ("clarion-test-none", 0)
    }
    fn went_down(&mut self) -> bool {
        false
    }
    fn reopen(&mut self) -> Result<u32, LiveError> {
        Ok(0)
    }
    fn hidden_delay(&self) -> Duration {
        Duration::from_millis(1)
    }
}

/// The worker's packet rate with and without export policies (headers of
/// every packet to a collector on loopback that reads nothing, so full
/// buffers are counted as drops, and the UDP third of the frames to
/// pcapng), on 1,000,000 frames of 1,000 flows. A measurement, run by
/// hand: `cargo test --release -p clarion-live --test exporter -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_worker_rate_with_and_without_exports() {
    let frames: Vec<Vec<u8>> = (0..1_000_000u32)
        .map(|n| {
            let k = n % 1000;
            let f = Flow {
                src: 0x0a00_0000 + k,
                dst: 0x0a01_0000 + k * 7,
                sport: 10_000 + k as u16,
                dport: 443,
                udp: k % 3 == 0,
            };
            frame(&f, 100, n).build()
        })
        .collect();
    let sink = UdpSocket::bind("127.0.0.1:0").expect("a socket");
    let port = sink.local_addr().expect("its address").port();
    let headers = format!("export all\n  send headers to collector 127.0.0.1 port {port}\n");
    let files = "export udp\n  filter proto = udp\n  send packets to pcapng\n".to_string();
    let variants = [
        ("none", String::new()),
        ("headers", headers.clone()),
        ("pcapng", files.clone()),
        ("both", format!("{files}{headers}")),
    ];
    for (name, text) in variants.iter().chain(&variants) {
        let exports = !text.is_empty();
        let dir = tempfile::tempdir().expect("a directory");
        let span = Arc::new(Mutex::new((None, None)));
        let queue = Timed {
            frames: frames.clone(),
            next: 0,
            idle: UdpSocket::bind("127.0.0.1:0").expect("a socket"),
            span: Arc::clone(&span),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let cfg = WorkerConfig {
            id: 0,
            step_budget: Duration::from_micros(50),
            low_water: 0,
            clock_lag: Duration::from_millis(1),
            stop: Arc::clone(&stop),
            deadline: Some(Instant::now() + Duration::from_secs(120)),
            down_timeout: Duration::from_secs(3600),
        };
        let monitor = Monitor::new(MonitorConfig {
            synchronous_sweep: false,
            ..MonitorConfig::default()
        });
        let (tx, rx) = mpsc::channel();
        let mut stages = Stages::default();
        if exports {
            let policies = clarion_lang::check_exports(text).expect("policies");
            let config = ExportConfig {
                export_dir: Some(dir.path().to_path_buf()),
                run_id: "m".into(),
                ..ExportConfig::default()
            };
            stages.exports = Some(ExportPolicies::new(
                Exporter::new(&policies, &config).expect("an exporter"),
            ));
        }
        let chain = LiveChain::new(Pipeline::new(monitor, stages), vec![0]);
        let worker = Worker::new(
            cfg,
            chain,
            vec![Box::new(queue)],
            tx,
            Arc::new(WorkerMetrics::default()),
        );
        let handle = std::thread::spawn(move || worker.run());
        while span.lock().expect("span").1.is_none() {
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
        handle.join().expect("the worker ends");
        let (first, last) = *span.lock().expect("span");
        let took = last.expect("drained") - first.expect("started");
        let (mut stats, mut exported) = (None, None);
        for ev in rx.try_iter() {
            match ev {
                WorkerEvent::Finished(_, s) => stats = Some(s),
                WorkerEvent::Outputs(_, o) if o.exports.is_some() => exported = o.exports,
                _ => {}
            }
        }
        let s = stats.expect("the summary");
        assert_eq!(s.counters.packets, frames.len() as u64);
        if let Some(x) = &exported {
            assert_eq!(x.offered, frames.len() as u64);
        }
        eprintln!(
            "exports {name}: {} frames in {:?}: {:.2} Mpps, {:.0} ns a frame{}",
            frames.len(),
            took,
            frames.len() as f64 / took.as_secs_f64() / 1e6,
            took.as_nanos() as f64 / frames.len() as f64,
            exported
                .map(|x| format!(
                    "; {:?}",
                    x.destinations
                        .iter()
                        .map(|d| (d.label.clone(), d.packets, d.datagrams, d.dropped))
                        .collect::<Vec<_>>()
                ))
                .unwrap_or_default()
        );
    }
}
