//! The worker's clock lag on a quiet wire (docs/live.md, "Time"): the
//! floor (`clock_lag` plus what the sources hide) while every packet shows
//! up at once, and more once a packet turns up that was stamped before the
//! worker last found its sources empty (the kernel held it back): that
//! packet is counted out of order, and the lag follows the gap it showed.
//! Without a network: a source the test fills, stamping frames as told.

use std::collections::VecDeque;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use clarion_engine::{Monitor, MonitorConfig};
use clarion_host::LiveChain;
use clarion_live::{realtime_ns, Frame, LiveError, Source, Worker, WorkerConfig, WorkerEvent, WorkerMetrics};
use clarion_pipeline::{Pipeline, Stages};
use clarion_wire::build::FrameSpec;
use clarion_wire::LinkType;

/// Frames waiting, each with the time it is stamped with (Unix ns).
type Queue = Arc<Mutex<VecDeque<(u64, Vec<u8>)>>>;

/// Frames with the timestamps the test gives them.
struct Stamped {
    frames: Queue,
    idle: UdpSocket,
}

impl Source for Stamped {
    fn link(&self) -> LinkType {
        LinkType::Ethernet
    }
    fn recv(&mut self, max: usize, f: &mut dyn FnMut(Frame<'_>)) -> usize {
        let mut n = 0;
        while n < max {
            let Some((ts_ns, data)) = self.frames.lock().expect("the queue").pop_front() else {
                break;
            };
            f(Frame {
                ts_ns,
                data: &data,
                orig_len: data.len() as u32,
            });
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
        Duration::ZERO
    }
}

/// Waits until `f` holds, or fails saying `what`.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(20), "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn the_lag_is_the_floor_until_a_packet_shows_the_kernel_held_it_back() {
    let frames: Queue = Arc::new(Mutex::new(VecDeque::new()));
    let source = Box::new(Stamped {
        frames: Arc::clone(&frames),
        idle: UdpSocket::bind("127.0.0.1:0").expect("a socket"),
    }) as Box<dyn Source>;
    let stop = Arc::new(AtomicBool::new(false));
    let cfg = WorkerConfig {
        id: 0,
        step_budget: Duration::from_micros(50),
        low_water: 0,
        clock_lag: Duration::from_micros(100),
        stop: Arc::clone(&stop),
        deadline: Some(Instant::now() + Duration::from_secs(60)),
        down_timeout: Duration::from_secs(3600),
    };
    let monitor = Monitor::new(MonitorConfig {
        synchronous_sweep: false,
        ..MonitorConfig::default()
    });
    let metrics = Arc::new(WorkerMetrics::default());
    let (tx, events) = mpsc::channel();
    let chain = LiveChain::new(Pipeline::new(monitor, Stages::default()), vec![0]);
    let worker = Worker::new(cfg, chain, vec![source], tx, Arc::clone(&metrics));
    let handle = std::thread::spawn(move || worker.run());
    let lag = || metrics.clock_lag_ns.load(Ordering::Relaxed);
    until("the worker ticks its clock on the quiet wire", || lag() > 0);
    assert_eq!(lag(), 100_000, "the floor: --clock-lag, nothing hidden");

    // Packets stamped as they are handed over leave the lag alone, however
    // late the worker takes them: asleep on a socket that never wakes it,
    // it finds them only at its next epoch's end, milliseconds later (the
    // queueing delay, which set the lag before, would have raised it).
    // Stamped under the queue's lock, none can predate an empty read.
    let frame = FrameSpec::default().build();
    for _ in 0..20 {
        let mut q = frames.lock().expect("the queue");
        q.push_back((realtime_ns(), frame.clone()));
        drop(q);
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(lag(), 100_000, "packets handed over at once");

    // One stamped a second ago: the worker found its sources empty since,
    // so the kernel held it for most of that second. Past the epoch's
    // end the lag follows, up to its ceiling (100 ms).
    frames
        .lock()
        .expect("the queue")
        .push_back((realtime_ns() - 1_000_000_000, frame.clone()));
    until("the lag follows the packet held back", || lag() == 100_000_000);

    stop.store(true, Ordering::Relaxed);
    handle.join().expect("the worker ends");
    let summary = events
        .try_iter()
        .find_map(|ev| match ev {
            WorkerEvent::Finished(_, s) => Some(s),
            _ => None,
        })
        .expect("a summary");
    assert_eq!(summary.counters.packets, 21);
    assert_eq!(
        summary.counters.out_of_order, 1,
        "the packet held back, and only it"
    );
}
