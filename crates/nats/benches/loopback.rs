//! The manager over a real `nats-server` on loopback, with four simulated
//! agents that answer polls at once: the time from a window's first
//! satisfaction report to its network-wide decision, with 256 events
//! satisfied per 10 ms epoch (Trumpet's §7.3 setting), and the manager's
//! throughput when reports come as fast as the agents can send them.
//!
//! `cargo bench -p clarion-nats --bench loopback` (needs `nats-server`).
//! The manager's service runs on one thread (a current-thread runtime);
//! the agents and the server share the machine's other core(s).

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clarion_manager::{Inventory, Manager};
use clarion_nats::protocol::{self, Answer, PollRequest, Up};
use clarion_nats::{serve, EventBook, ManagerOptions, ManagerStats, OnDuplicate, Security};
use clarion_report::{Completeness, GroupKey, Origin, Report, Window};
use futures_util::StreamExt;

const HOSTS: usize = 4;
/// Windows sent ahead of the decisions when reports come as fast as they can.
const IN_FLIGHT: u64 = 4;
const EVENTS: usize = 256;
const MS: u64 = 1_000_000;
const T0: u64 = 1_700_000_000_000 * MS;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn book() -> EventBook {
    let inv: String = (0..HOSTS).map(|h| format!("h{h} 10.0.{h}.0/24\n")).collect();
    let inventory = Inventory::parse(&inv).expect("inventory");
    let mut book = EventBook::new(Manager::new("bench", inventory), None);
    let events: String = (0..EVENTS)
        .map(|k| {
            format!("event e{k}\n  filter dst_ip in 10.0.0.0/22\n  when sum(volume) > 1000\n  per dst_ip/16\n  every 10ms\n  across hosts\n")
        })
        .collect();
    book.add(&events, OnDuplicate::Refuse).expect("events install");
    book
}

fn report(event: usize, window: u64, host: usize) -> Report {
    Report {
        capture: None,
        missing_hosts: Box::default(),
        event: format!("e{event}").into(),
        window: Window {
            start_ns: T0 + window * 10 * MS,
            end_ns: T0 + (window + 1) * 10 * MS,
        },
        group: GroupKey {
            dst_ip: Some(("10.0.0.0".parse().expect("addr"), 16)),
            ..GroupKey::default()
        },
        values: vec![("sum(volume)".into(), 400.0)].into(),
        origin: Origin {
            host: format!("h{host}").into(),
            worker: 0,
        },
        completeness: Completeness {
            packets: 100,
            complete: true,
            ..Completeness::default()
        },
    }
}

/// One run: `windows` windows of 256 satisfied events, a window every
/// `pace` (None: as fast as possible). Returns the manager's stats and the
/// time from the first report sent to the last decision.
fn run(url: &str, windows: u64, pace: Option<Duration>, max_poll_batch: usize) -> (ManagerStats, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let fired = Arc::new(AtomicU64::new(0));
    let opts = ManagerOptions {
        url: url.to_string(),
        security: Security::default(),
        poll_timeout: Duration::from_secs(5),
        until_finished: false,
        max_poll_batch,
        jetstream: false,
        shared: false,
        shared_events: None,
        hosts_board: None,
        history: None,
    };
    let manager = {
        let (stop, fired) = (Arc::clone(&stop), Arc::clone(&fired));
        std::thread::spawn(move || {
            serve(&opts, "bench", book(), None, stop, &mut |_: &Report| {
                fired.fetch_add(1, Ordering::Relaxed);
            })
            .expect("the manager runs")
        })
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let elapsed = rt.block_on(async {
        let client = async_nats::connect(url).await.expect("connects");
        // The agents: each answers its polls at once with 300 (400 + 3 x 300 > 1000: fires).
        for h in 0..HOSTS {
            let mut polls = client
                .subscribe(protocol::poll(&format!("h{h}")))
                .await
                .expect("subscribes");
            let c = client.clone();
            tokio::spawn(async move {
                while let Some(m) = polls.next().await {
                    let polls = protocol::decode::<Vec<PollRequest>>("poll", &m.payload);
                    if let (Some(reply), Ok(reqs)) = (m.reply, polls) {
                        let answers = vec![Answer::Values(Some(vec![300.0])); reqs.len()];
                        let _ = c.publish(reply, protocol::encode(&answers)).await;
                    }
                }
            });
        }
        client.flush().await.expect("flush");
        tokio::time::sleep(Duration::from_millis(300)).await; // the manager subscribes
        let start = Instant::now();
        for w in 0..windows {
            for k in 0..EVENTS {
                let host = k % HOSTS;
                let up = Up::Satisfied {
                    event: k as u64,
                    report: Box::new(report(k, w, host)),
                    decided_ns: 0,
                    // These hosts want no acknowledgement.
                    seq: 0,
                };
                client
                    .publish(protocol::up(&format!("h{host}")), protocol::encode(&up))
                    .await
                    .expect("publish");
            }
            client.flush().await.expect("flush");
            match pace {
                Some(p) => tokio::time::sleep_until((start + p * (w as u32 + 1)).into()).await,
                None => {
                    // Closed loop: at most IN_FLIGHT windows undecided, so that
                    // the server's buffers never overflow (a slow consumer loses messages).
                    let decided = (w + 1).saturating_sub(IN_FLIGHT) * EVENTS as u64;
                    let stuck = Instant::now() + Duration::from_secs(10);
                    while fired.load(Ordering::Relaxed) < decided {
                        assert!(
                            Instant::now() < stuck,
                            "window {w}: {} of {decided} decisions fired after 10 s",
                            fired.load(Ordering::Relaxed)
                        );
                        tokio::time::sleep(Duration::from_micros(200)).await;
                    }
                }
            }
        }
        let want = windows * EVENTS as u64;
        let deadline = Instant::now() + Duration::from_secs(60);
        while fired.load(Ordering::Relaxed) < want && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        start.elapsed()
    });
    stop.store(true, Ordering::Relaxed);
    let stats = manager.join().expect("the manager thread");
    (stats, elapsed)
}

fn pct(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let port = free_port();
    let Ok(mut server) = Command::new("nats-server")
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        eprintln!("loopback bench skipped: nats-server is not installed (apt-get install nats-server)");
        return;
    };
    let url = format!("nats://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nats-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }

    // Each figure with polls batched per host (the default) and sent one by
    // one, in the same run, alternating, so that drift hits both alike.
    for round in 0..2 {
        for (label, batch) in [("batched", 1024), ("one by one", 1)] {
            let windows = 200;
            let (stats, _) = run(&url, windows, Some(Duration::from_millis(10)), batch);
            let mut lat: Vec<Duration> = stats.decision_latency.iter().copied().collect();
            lat.sort();
            println!(
                "round {round}, polls {label}: paced, {EVENTS} events x {windows} epochs of 10 ms over {HOSTS} agents: \
                 {} decisions ({} fired, {} partial), first report to decision p50 {:?}, p99 {:?}, max {:?}",
                stats.decisions,
                stats.fired,
                stats.partial,
                pct(&lat, 0.5),
                pct(&lat, 0.99),
                pct(&lat, 1.0)
            );
            let windows = 400;
            let (stats, elapsed) = run(&url, windows, None, batch);
            let secs = elapsed.as_secs_f64();
            println!(
                "round {round}, polls {label}: flood ({IN_FLIGHT} windows of {EVENTS} events in flight): {} decisions in {secs:.3} s: \
                 {:.0} decisions/s, {:.0} satisfaction reports/s",
                stats.decisions,
                stats.decisions as f64 / secs,
                stats.satisfied as f64 / secs,
            );
        }
    }
    let _ = server.kill();
    let _ = server.wait();
}
