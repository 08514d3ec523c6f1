//! A worker's export policies replaced while it runs
//! (a `Command` on its chain's `ExportPolicies`), on generated traffic, without a network:
//! the worker starts with an exporter without policies; frames of phase
//! one arrive; a `send packets to pcapng` policy is installed; frames of
//! phase two arrive; it is removed; frames of phase three arrive. The
//! files hold exactly phase two's UDP frames (the reference: the frames
//! handed over, parsed by `parse_frame`), the exporter's counters say so
//! while it runs (another `Command`) and as it ends.
//! A worker whose exporter never had a policy reports no export counters.

use std::collections::VecDeque;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use clarion_capture::PacketSource;
use clarion_engine::{Monitor, MonitorConfig};
use clarion_export::{ExportConfig, ExportStats, Exporter};
use clarion_host::LiveChain;
use clarion_live::{
    realtime_ns, Command, Frame, LiveError, Source, Worker, WorkerConfig, WorkerEvent, WorkerMetrics,
};
use clarion_pipeline::{ExportPolicies, Outputs, Pipeline, Stages};
use clarion_wire::build::{FrameSpec, IpPair, Transport};
use clarion_wire::LinkType;
use proptest::prelude::*;

/// Frames handed over, with their times (Unix ns).
type Log = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

/// Frames the test pushes while the worker runs; each is stamped with
/// the wall clock when handed over and logged so.
struct Queue {
    frames: Arc<Mutex<VecDeque<Vec<u8>>>>,
    handed: Log,
    idle: UdpSocket,
}

impl Source for Queue {
    fn link(&self) -> LinkType {
        LinkType::Ethernet
    }
    fn recv(&mut self, max: usize, f: &mut dyn FnMut(Frame<'_>)) -> usize {
        let mut n = 0;
        while n < max {
            let Some(data) = self.frames.lock().expect("the queue").pop_front() else {
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
        self.frames.lock().expect("the queue").len().min(limit)
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

fn frame(n: u32, udp: bool, payload: usize) -> Vec<u8> {
    FrameSpec {
        ip: IpPair::V4 {
            src: 0x0a00_0001u32.wrapping_add(n % 7).into(),
            dst: 0x0a00_0002u32.into(),
        },
        transport: if udp {
            Transport::Udp {
                src_port: 1000 + (n % 13) as u16,
                dst_port: 53,
            }
        } else {
            FrameSpec::default().transport
        },
        payload_len: payload,
        ..FrameSpec::default()
    }
    .build()
}

struct Running {
    frames: Arc<Mutex<VecDeque<Vec<u8>>>>,
    handed: Log,
    commands: mpsc::Sender<Command<LiveChain>>,
    events: mpsc::Receiver<WorkerEvent<Outputs>>,
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<()>,
}

fn start(config: &ExportConfig) -> Running {
    let frames = Arc::new(Mutex::new(VecDeque::new()));
    let handed = Arc::new(Mutex::new(Vec::new()));
    let source = Box::new(Queue {
        frames: Arc::clone(&frames),
        handed: Arc::clone(&handed),
        idle: UdpSocket::bind("127.0.0.1:0").expect("a socket"),
    }) as Box<dyn Source>;
    let stop = Arc::new(AtomicBool::new(false));
    let cfg = WorkerConfig {
        id: 0,
        step_budget: Duration::from_micros(50),
        low_water: 0,
        clock_lag: Duration::from_millis(1),
        stop: Arc::clone(&stop),
        deadline: Some(Instant::now() + Duration::from_secs(60)),
        // The made-up interface is "down": never stop for it.
        down_timeout: Duration::from_secs(3600),
    };
    let monitor = Monitor::new(MonitorConfig {
        synchronous_sweep: false,
        ..MonitorConfig::default()
    });
    let (tx, events) = mpsc::channel();
    let (commands, crx) = mpsc::channel();
    let exporter = Exporter::new(&[], config).expect("an exporter without policies");
    let stages = Stages {
        exports: Some(ExportPolicies::new(exporter)),
        ..Stages::default()
    };
    let chain = LiveChain::new(Pipeline::new(monitor, stages), vec![0]);
    let worker =
        Worker::new(cfg, chain, vec![source], tx, Arc::new(WorkerMetrics::default())).with_commands(crx);
    let handle = std::thread::spawn(move || worker.run());
    Running {
        frames,
        handed,
        commands,
        events,
        stop,
        handle,
    }
}

impl Running {
    /// Pushes `frames` and waits until the worker has taken them all.
    fn phase(&self, frames: Vec<Vec<u8>>) {
        let want = self.handed.lock().expect("the log").len() + frames.len();
        self.frames.lock().expect("the queue").extend(frames);
        let t = Instant::now();
        while self.handed.lock().expect("the log").len() < want {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "the worker takes the frames"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn set(&self, text: &str) {
        let policies = clarion_lang::check_exports(text).expect("policies");
        let (tx, rx) = mpsc::channel();
        self.commands
            .send(Command::new(move |c: &mut LiveChain| {
                let set = c
                    .pipeline_mut()
                    .stage_mut(|x: &mut ExportPolicies| x.exporter_mut().set_policies(&policies));
                let _ = tx.send(set);
            }))
            .expect("the worker runs");
        let r = rx.recv().expect("a reply").expect("the worker has an exporter");
        r.expect("the policies installed");
    }

    fn stats(&self) -> ExportStats {
        let (tx, rx) = mpsc::channel();
        self.commands
            .send(Command::new(move |c: &mut LiveChain| {
                let _ = tx.send(
                    c.pipeline()
                        .stage::<ExportPolicies>()
                        .map(|x| x.exporter().stats()),
                );
            }))
            .expect("the worker runs");
        rx.recv().expect("a reply").expect("an exporter")
    }

    fn end(self) -> (Vec<(u64, Vec<u8>)>, Option<ExportStats>) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("the worker ends");
        let (mut finished, mut exported) = (false, None);
        for ev in self.events.try_iter() {
            match ev {
                WorkerEvent::Finished(..) => finished = true,
                WorkerEvent::Outputs(_, o) if o.exports.is_some() => exported = o.exports,
                _ => {}
            }
        }
        assert!(finished, "the worker's summary");
        let handed = std::mem::take(&mut *self.handed.lock().expect("the log"));
        (handed, exported)
    }
}

fn phase_frames(n0: u32, kinds: &[(bool, usize)]) -> Vec<Vec<u8>> {
    kinds
        .iter()
        .enumerate()
        .map(|(i, &(udp, payload))| frame(n0 + i as u32, udp, payload))
        .collect()
}

const POLICY: &str = "export udp\n  filter proto = udp\n  send packets to pcapng\n";

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn only_the_frames_while_installed_are_exported(
        one in prop::collection::vec((any::<bool>(), 0usize..200), 0..60),
        two in prop::collection::vec((any::<bool>(), 0usize..200), 0..60),
        three in prop::collection::vec((any::<bool>(), 0usize..200), 0..60),
    ) {
        let dir = tempfile::tempdir().expect("a directory");
        let config = ExportConfig {
            export_dir: Some(dir.path().to_path_buf()),
            run_id: "t".into(),
            ..ExportConfig::default()
        };
        let w = start(&config);
        w.phase(phase_frames(0, &one));
        w.set(POLICY);
        w.phase(phase_frames(1000, &two));
        let during = w.stats();
        w.set("");
        w.phase(phase_frames(2000, &three));
        let (handed, summary) = w.end();

        let is_udp = |d: &[u8]| {
            clarion_wire::parse_frame(LinkType::Ethernet, d, 0, d.len() as u32).expect("a frame").key.proto == 17
        };
        let want: Vec<(u64, Vec<u8>)> = handed[one.len()..one.len() + two.len()]
            .iter()
            .filter(|(_, d)| is_udp(d))
            .cloned()
            .collect();
        let mut files: Vec<_> = std::fs::read_dir(dir.path())
            .map(|d| d.map(|e| e.expect("an entry").path()).collect())
            .unwrap_or_default();
        files.sort();
        let mut written = Vec::new();
        for f in files {
            let mut src = clarion_capture::CaptureFile::open(&f).expect("a pcapng");
            while let Some(p) = src.next_packet() {
                let p = p.expect("a packet");
                written.push((p.ts_ns, p.data.to_vec()));
            }
        }
        prop_assert_eq!(handed.len(), one.len() + two.len() + three.len());
        prop_assert_eq!(written.len(), want.len());
        prop_assert!(written == want, "the files hold phase two's UDP frames");
        prop_assert_eq!(during.policies.len(), 1);
        prop_assert_eq!(during.policies[0].matched, want.len() as u64);
        let summary = summary.expect("export counters: a policy was installed");
        prop_assert!(summary.policies.is_empty());
        let packets: u64 = summary.destinations.iter().map(|d| d.packets).sum();
        prop_assert_eq!(packets, want.len() as u64);
    }
}

#[test]
fn a_worker_that_never_had_a_policy_reports_no_exports() {
    let w = start(&ExportConfig::default());
    w.phase(phase_frames(0, &[(true, 10), (false, 10)]));
    assert!(w.stats().policies.is_empty());
    let (handed, summary) = w.end();
    assert_eq!(handed.len(), 2);
    assert!(summary.is_none(), "{summary:?}");
}
