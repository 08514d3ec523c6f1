//! Degraded mode live (`clarion run -i VETH --adapt`, MONA, issue 22):
//! real frames from `tcpreplay` into a veth pair between two network
//! namespaces, and MONA's §VI-A conditions: a rate the monitor cannot
//! take, and cache-thrashing co-runners (`clarion-lab thrash`).
//!
//! # What is checked, against what
//! - Light load: every report is marked degraded with a recall estimate
//!   in [0, 1]; nothing is shed, so every estimate is 1 and no flow is
//!   unmeasured; every frame `tcpreplay` says it sent is counted in the
//!   epoch statistics (packets + drops), which carry `busy_ns` and
//!   `shed_depth`.
//! - Overload: the same replay without and with `--adapt`; the kernel's
//!   drops (epoch statistics, and the summary line) must be fewer with it,
//!   the depth must rise above 0 and come back to 0 once the load is light.
//! - Co-runners: a steady load, then 1, 2, 3 thrash processes; the cost
//!   factor (`clarion_cost_factor` scraped from `/metrics`) must rise, the
//!   shedding follow it, and drops must not persist.
//!
//! Timing on a shared 2-core machine is noisy: every assertion compares
//! aggregates over hundreds of epochs, never one epoch. The overload and
//! co-runner tests are `#[ignore]`d while degraded mode does not yet hold
//! under live overload (measured figures and causes in docs/live.md,
//! "Degraded mode under load (measured)"); run them with `--ignored`
//! (after `cargo build --release -p clarion-lab`).
//!
//! Needs root, `ip`, `tcpreplay`, the shared captures and (co-runners) a
//! built `clarion-lab`; skipped, saying why, otherwise.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::netns::{clarion_in, in_netns, Net};
use common::repo;
use serde_json::Value;

/// The shared real capture replayed (one hour of an enterprise LAN).
fn capture() -> Option<PathBuf> {
    let p = repo().join("../shared/captures/pathspider_real.pcap");
    if p.exists() {
        Some(p)
    } else {
        eprintln!("skipped: the shared captures are missing ({})", p.display());
        None
    }
}

/// The network and the capture, or `None` after saying why not.
fn setup(tag: &str) -> Option<(Net, PathBuf)> {
    if Command::new("tcpreplay").arg("-V").output().is_err() {
        eprintln!("skipped: tcpreplay is not installed (apt-get install tcpreplay)");
        return None;
    }
    let cap = capture()?;
    Some((Net::new(tag)?, cap))
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// One line of `--epoch-stats` (`clarion.epoch/1`).
#[derive(Clone, Debug)]
struct Epoch {
    start_ns: u64,
    epoch_ns: u64,
    packets: u64,
    drops: u64,
    late: bool,
    busy_ns: Option<u64>,
    shed_depth: Option<f64>,
}

fn epochs(path: &Path) -> Vec<Epoch> {
    let text = std::fs::read_to_string(path).expect("epoch statistics");
    let mut out: Vec<Epoch> = text
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            assert_eq!(v["schema"], "clarion.epoch/1", "{l}");
            Epoch {
                start_ns: v["epoch_start_ns"].as_u64().expect("start"),
                epoch_ns: v["epoch_ns"].as_u64().expect("length"),
                packets: v["packets"].as_u64().expect("packets"),
                drops: v["drops"].as_u64().expect("drops"),
                late: v["late"].as_bool().expect("late"),
                busy_ns: v["busy_ns"].as_u64(),
                shed_depth: v["shed_depth"].as_f64(),
            }
        })
        .collect();
    out.sort_by_key(|e| e.start_ns);
    out
}

/// A running `clarion run -i va` in namespace `a`.
struct Monitor {
    child: Child,
    err: BufReader<std::process::ChildStderr>,
    first: String,
}

impl Monitor {
    fn start(net: &Net, events: &Path, out: &Path, stats: &Path, extra: &[&str]) -> Monitor {
        let mut child = clarion_in(&net.a)
            .args(["run", "-i", "va", "--stats-every", "0", "--duration", "120s"])
            .args(["--format", "json", "-o"])
            .arg(out)
            .arg("--epoch-stats")
            .arg(stats)
            .arg("--events")
            .arg(events)
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .expect("clarion run starts");
        let mut err = BufReader::new(child.stderr.take().expect("its stderr"));
        // Lines before it, e.g. where the metrics are served.
        let mut first = String::new();
        while !first.contains("capturing on va") {
            let n = err.read_line(&mut first).expect("its first lines");
            assert!(n > 0, "clarion run ended: {first}");
        }
        Monitor { child, err, first }
    }

    /// SIGINT, then its summary once it ended successfully.
    fn stop(mut self) -> String {
        // SAFETY: kill on our own child's pid (`ip netns exec` became clarion).
        assert_eq!(
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) },
            0
        );
        let mut rest = String::new();
        self.err.read_to_string(&mut rest).expect("its summary");
        assert!(self.child.wait().expect("ends").success(), "{}{rest}", self.first);
        rest
    }
}

/// `tcpreplay` from `vb` in namespace `b`; the frames it says it sent.
fn replay(net: &Net, args: &[&str], cap: &Path) -> u64 {
    let out = Command::new("ip")
        .args(["netns", "exec", &net.b, "tcpreplay", "-i", "vb"])
        .args(args)
        .arg(cap)
        .output()
        .expect("tcpreplay runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tcpreplay: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    // "Actual: 15000 packets (1101227 bytes) sent in 2.99 seconds"
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Actual: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no packet count in {text}"))
}

/// How many of the first `limit` frames of `cap` the monitor counts (the
/// ones that parse: not ARP and the like), the reference for what
/// `tcpreplay` sent.
fn parsed(cap: &Path, limit: usize) -> u64 {
    use clarion_capture::PacketSource;
    let mut src = clarion_capture::CaptureFile::open(cap).expect("open capture");
    let mut n = 0;
    for _ in 0..limit {
        let Some(p) = src.next_packet() else { break };
        let p = p.expect("undamaged capture");
        n += u64::from(clarion_wire::parse_frame(p.link, p.data, p.ts_ns, p.orig_len).is_ok());
    }
    n
}

fn all_frames(cap: &Path) -> u64 {
    use clarion_capture::PacketSource;
    let mut src = clarion_capture::CaptureFile::open(cap).expect("open capture");
    let mut n = 0;
    while src.next_packet().is_some() {
        n += 1;
    }
    n
}

/// The kernel drops of a run's summary ("live: N kernel drops, ...").
fn summary_drops(summary: &str) -> u64 {
    summary
        .lines()
        .find_map(|l| l.trim().strip_prefix("live: "))
        .and_then(|l| l.split_whitespace().next())
        .map(|n| n.replace(',', ""))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no drops in {summary}"))
}

/// `n` events matching every packet, per 5-tuple every 10 ms, whose
/// thresholds are never reached (the cost is in measuring, not
/// reporting); every third reads TCP state. Priorities spread over 0..100
/// so shedding has an order to follow.
fn heavy_events(n: usize) -> String {
    (0..n)
        .map(|i| {
            let when = if i % 3 == 0 {
                format!("sum(is_lost) > {}", 1_000_000 + i)
            } else {
                format!("sum(volume) > {}GB", 1_000 + i)
            };
            format!(
                "event heavy{i}\n  when {when}\n  per 5tuple\n  every 10ms\n  priority {}\n",
                i % 100
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A small receive ring (4 blocks of 64 KiB, ~1,000 frames of this
/// capture), so falling behind for a few milliseconds drops frames.
const SMALL_RING: [&str; 2] = ["--ring-blocks", "4"];

const LIGHT_EVENTS: &str = "\
event tcp_flows
  filter proto = tcp
  when count(packets) >= 1
  per 5tuple
  every 10ms
  priority 80

event talkers
  when sum(volume) > 100B
  per src_ip
  every 100ms
  priority 20
";

#[test]
fn light_load_reports_are_degraded_with_full_recall_and_nothing_is_shed() {
    let Some((net, cap)) = setup("al") else { return };
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let (events, out, stats) = (
        tmp.path().join("e.clarion"),
        tmp.path().join("reports.jsonl"),
        tmp.path().join("epochs.jsonl"),
    );
    std::fs::write(&events, LIGHT_EVENTS).expect("events written");
    let m = Monitor::start(&net, &events, &out, &stats, &["--adapt"]);
    let sent = replay(&net, &["--pps", "5000", "--limit", "15000"], &cap);
    std::thread::sleep(Duration::from_millis(400));
    let summary = m.stop();

    let ep = epochs(&stats);
    let (packets, drops): (u64, u64) = ep.iter().fold((0, 0), |a, e| (a.0 + e.packets, a.1 + e.drops));
    assert_eq!(drops, 0, "{summary}");
    assert_eq!(sent, 15_000, "tcpreplay sent its limit");
    assert_eq!(
        packets,
        parsed(&cap, 15_000),
        "every frame sent is counted: {summary}"
    );
    let busy: Vec<&Epoch> = ep.iter().filter(|e| e.packets > 0).collect();
    assert!(busy.len() > 200, "{} epochs with packets", busy.len());
    for e in &busy {
        assert!(!e.late, "{e:?}");
        let b = e
            .busy_ns
            .unwrap_or_else(|| panic!("busy_ns in degraded mode: {e:?}"));
        assert!(b > 0 && b < 4 * e.epoch_ns, "{e:?}");
        assert_eq!(
            e.shed_depth,
            Some(0.0),
            "nothing to shed at 5,000 frames/s: {e:?}"
        );
    }

    let reports: Vec<Value> = std::fs::read_to_string(&out)
        .expect("reports")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a report"))
        .collect();
    for name in ["tcp_flows", "talkers"] {
        assert!(
            reports.iter().filter(|r| r["event"] == name).count() > 20,
            "{name} reported"
        );
    }
    for r in &reports {
        let c = &r["completeness"];
        assert_eq!(c["degraded"], true, "{r}");
        assert_eq!(c["flows_unmeasured"], 0, "{r}");
        let recall = c["recall_estimate"]
            .as_f64()
            .unwrap_or_else(|| panic!("a recall estimate: {r}"));
        assert!((0.0..=1.0).contains(&recall), "{r}");
        assert_eq!(recall, 1.0, "nothing shed: {r}");
    }
    eprintln!(
        "light load: {sent} frames, {} epochs with packets, {} reports, all degraded with recall 1",
        busy.len(),
        reports.len()
    );
}

/// One overload run: the heavy replay, then a light tail (so the worker
/// sees headroom again: an idle epoch decides nothing). Its epochs, the
/// summary's drops and when the heavy part ended.
fn overload_run(net: &Net, cap: &Path, events: &Path, adapt: bool) -> (Vec<Epoch>, u64, u64) {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let (out, stats) = (tmp.path().join("r.jsonl"), tmp.path().join("e.jsonl"));
    let mut extra = SMALL_RING.to_vec();
    if adapt {
        extra.push("--adapt");
    }
    let m = Monitor::start(net, events, &out, &stats, &extra);
    let sent = replay(net, &["-q", "--topspeed", "--loop", "3"], cap);
    let heavy_end = now_ns();
    let tail = replay(net, &["-q", "--pps", "2000", "--limit", "3000"], cap);
    let all = parsed(cap, usize::MAX);
    assert_eq!(
        (sent, tail),
        (3 * all_frames(cap), 3_000),
        "tcpreplay sent it all"
    );
    std::thread::sleep(Duration::from_millis(300));
    let summary = m.stop();
    let ep = epochs(&stats);
    let (packets, drops) = ep.iter().fold((0, 0), |a, e| (a.0 + e.packets, a.1 + e.drops));
    assert_eq!(drops, summary_drops(&summary), "{summary}");
    // The kernel drops frames that would not parse too: counted plus
    // dropped lies between the parsing frames sent and all frames sent.
    assert!(
        (3 * all + parsed(cap, 3_000)..=sent + tail).contains(&(packets + drops)),
        "frames sent = counted + dropped: {packets} + {drops}, {summary}"
    );
    (ep, drops, heavy_end)
}

/// (epochs with drops, longest run of consecutive epochs with drops).
fn drop_runs(ep: &[Epoch]) -> (usize, usize) {
    let (mut n, mut run, mut longest) = (0, 0, 0);
    for e in ep.iter().filter(|e| e.packets + e.drops > 0) {
        if e.drops > 0 {
            n += 1;
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    (n, longest)
}

#[test]
#[ignore = "adaptive drops are not reliably fewer than static here (fewer in 4 of 5 repeats, never zero: docs/live.md, Degraded mode under load (measured)); run with --ignored"]
fn under_overload_adaptive_drops_fewer_than_static_and_restores() {
    let Some((net, cap)) = setup("ao") else { return };
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let events = tmp.path().join("heavy.clarion");
    std::fs::write(&events, heavy_events(300)).expect("events written");
    // Twice each, alternating, so a burst of someone else's load on this
    // shared machine does not fall on one mode only; the totals compare.
    let mut total = [0u64; 2];
    let mut runs = Vec::new();
    for _ in 0..2 {
        for (i, adapt) in [false, true].into_iter().enumerate() {
            let (ep, drops, heavy_end) = overload_run(&net, &cap, &events, adapt);
            total[i] += drops;
            runs.push((adapt, ep, drops, heavy_end));
        }
    }
    for (adapt, ep, drops, _) in &runs {
        let (n, longest) = drop_runs(ep);
        let depths: Vec<f64> = ep.iter().filter_map(|e| e.shed_depth).collect();
        let max = depths.iter().copied().fold(0.0, f64::max);
        eprintln!(
            "overload, adapt {adapt}: {drops} drops in {n} epochs (longest run {longest}), {} late sweeps, max depth {max:.2}",
            ep.iter().filter(|e| e.late).count()
        );
    }
    for (_, ep, _, _) in runs.iter().filter(|r| r.0) {
        // The depth over time, one decision in five: (ms, depth, drops).
        let t0 = ep.iter().find(|e| e.packets > 0).map_or(0, |e| e.start_ns);
        let timeline: Vec<String> = ep
            .iter()
            .filter(|e| e.packets + e.drops > 0 && e.shed_depth.is_some())
            .step_by(5)
            .map(|e| {
                let ms = (e.start_ns - t0) / 1_000_000;
                format!("{ms}:{:.0}/{}", e.shed_depth.unwrap_or(0.0), e.drops)
            })
            .collect();
        eprintln!("adaptive depth/drops by ms: {}", timeline.join(" "));
    }
    eprintln!(
        "overload totals: static {} drops, adaptive {}",
        total[0], total[1]
    );
    assert!(total[0] > 0, "the replay overloads the static monitor: {total:?}");
    assert!(
        total[1] < total[0],
        "adaptive drops {} < static drops {}",
        total[1],
        total[0]
    );
    for (_, ep, _, heavy_end) in runs.iter().filter(|r| r.0) {
        assert!(
            ep.iter().any(|e| e.shed_depth.is_some_and(|d| d > 0.0)),
            "the overload is shed"
        );
        // Restoration: in the light tail, the depth is back to 0.
        let tail: Vec<f64> = ep
            .iter()
            .filter(|e| e.start_ns > heavy_end + 500_000_000 && e.packets > 0)
            .filter_map(|e| e.shed_depth)
            .collect();
        assert!(tail.len() > 10, "tail epochs decided: {}", tail.len());
        assert_eq!(tail.last(), Some(&0.0), "restored after the load: {tail:?}");
    }
}

/// `clarion-lab`, built beside `clarion` (`cargo build --release -p clarion-lab`).
fn clarion_lab() -> Option<PathBuf> {
    let p = assert_cmd::cargo::cargo_bin("clarion").with_file_name("clarion-lab");
    if p.exists() {
        Some(p)
    } else {
        eprintln!(
            "skipped: clarion-lab is not built ({}; cargo build --release -p clarion-lab)",
            p.display()
        );
        None
    }
}

/// A co-runner thrashing the L3 (32 MiB here) for `seconds`, once it
/// chases (its buffer built); its standard error stays open (read it to
/// the end before waiting).
fn thrash(lab: &Path, seconds: u64) -> (Child, BufReader<std::process::ChildStderr>) {
    // On the other core than the monitor's (MONA's co-runners run on
    // cores 2..n), so they share its cache, not its CPU time.
    let mut c = Command::new("taskset")
        .args(["-c", "1"])
        .arg(lab)
        .args(["thrash", "--bytes", "128MiB", "--seconds"])
        .arg(seconds.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("clarion-lab thrash starts");
    let mut err = BufReader::new(c.stderr.take().expect("its stderr"));
    let mut line = String::new();
    while err.read_line(&mut line).is_ok_and(|n| n > 0) {
        if line.contains("clarion-lab thrash: chasing") {
            break;
        }
        line.clear();
    }
    assert!(line.contains("chasing"), "thrash started: {line}");
    (c, err)
}

/// One scrape of `/metrics`: (Unix ns, cost factor, shed depth).
type Sample = (u64, f64, f64);

/// Scrapes `/metrics` in namespace `ns` every 20 ms until `stop`.
fn scraper(ns: &str, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Sample>> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        in_netns(&ns, move || {
            let mut out = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Some(page) = get_metrics() {
                    let gauge = |name: &str| {
                        page.lines()
                            .find(|l| l.starts_with(name) && l.contains("worker=\"0\""))
                            .and_then(|l| l.split_whitespace().last())
                            .and_then(|v| v.parse::<f64>().ok())
                    };
                    if let (Some(f), Some(d)) = (gauge("clarion_cost_factor{"), gauge("clarion_shed_depth{"))
                    {
                        out.push((now_ns(), f, d));
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            out
        })
        .unwrap_or_default()
    })
}

fn get_metrics() -> Option<String> {
    let mut c = std::net::TcpStream::connect("127.0.0.1:9464").ok()?;
    c.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .ok()?;
    let mut page = String::new();
    c.read_to_string(&mut page).ok()?;
    Some(page)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
#[ignore = "the cost factor does not follow co-runners reliably here and the depth does not follow the factor (docs/live.md, Degraded mode under load (measured)); run with --ignored"]
fn co_runners_raise_the_cost_factor_and_shedding_follows_without_lasting_drops() {
    let Some((net, cap)) = setup("ac") else { return };
    let Some(lab) = clarion_lab() else { return };
    if Command::new("taskset").arg("-V").output().is_err() {
        eprintln!("skipped: taskset is not installed (apt-get install util-linux)");
        return;
    }
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let (events, out, stats) = (
        tmp.path().join("heavy.clarion"),
        tmp.path().join("r.jsonl"),
        tmp.path().join("e.jsonl"),
    );
    std::fs::write(&events, heavy_events(300)).expect("events written");
    let mut extra = SMALL_RING.to_vec();
    extra.extend(["--adapt", "--metrics", "127.0.0.1:9464", "--cpus", "0"]);
    let m = Monitor::start(&net, &events, &out, &stats, &extra);
    let stop = Arc::new(AtomicBool::new(false));
    let samples = scraper(&net.a, stop.clone());
    // A steady load for the whole run, near what the monitor takes here
    // with every flow measured: ~1.25 s a loop at 50,000 frames/s.
    let mut load = Command::new("ip")
        .args(["netns", "exec", &net.b, "tcpreplay", "-q", "-i", "vb"])
        .args(["--pps", "50000", "--loop", "8"])
        .arg(&cap)
        .stdout(Stdio::null())
        .spawn()
        .expect("tcpreplay starts");
    // Phases of 2 s: 0, 1, 2, then 3 co-runners (each ends by itself).
    let phase = Duration::from_secs(2);
    std::thread::sleep(Duration::from_millis(1500));
    let mut bounds = vec![now_ns()];
    let mut co = Vec::new();
    std::thread::sleep(phase);
    for k in 1..=3u64 {
        bounds.push(now_ns());
        // Every co-runner lasts to the end of the third phase.
        co.push(thrash(&lab, 2 * (4 - k)));
        std::thread::sleep(phase);
    }
    bounds.push(now_ns());
    for (mut c, mut err) in co {
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
        assert!(c.wait().expect("thrash ends").success(), "{rest}");
    }
    assert!(load.wait().expect("tcpreplay ends").success(), "tcpreplay ran");
    stop.store(true, Ordering::Relaxed);
    let samples = samples.join().expect("the scraper");
    let summary = m.stop();
    let ep = epochs(&stats);

    assert!(samples.len() > 100, "{} scrapes", samples.len());
    let factor: Vec<f64> = (0..4)
        .map(|k| {
            median(
                samples
                    .iter()
                    .filter(|s| s.0 >= bounds[k] + 300_000_000 && s.0 < bounds[k + 1])
                    .map(|s| s.1)
                    .collect(),
            )
        })
        .collect();
    let phase_drops: Vec<u64> = (0..4)
        .map(|k| {
            ep.iter()
                .filter(|e| e.start_ns >= bounds[k] && e.start_ns < bounds[k + 1])
                .map(|e| e.drops)
                .sum()
        })
        .collect();
    let phase_depth: Vec<f64> = (0..4)
        .map(|k| {
            median(
                ep.iter()
                    .filter(|e| e.start_ns >= bounds[k] && e.start_ns < bounds[k + 1])
                    .filter_map(|e| e.shed_depth)
                    .collect(),
            )
        })
        .collect();
    // When the factor first rose 20% over the quiet phase's (the median
    // of five scrapes, not one noisy epoch), and the first
    // epoch after that whose decision deepened the shedding.
    let rise = samples
        .windows(5)
        .find(|w| w[0].0 >= bounds[1] && median(w.iter().map(|s| s.1).collect()) > factor[0] * 1.2)
        .map(|w| w[0].0);
    let quiet_depth = phase_depth[0];
    let deeper = rise.and_then(|t| {
        ep.iter()
            .find(|e| {
                e.start_ns + e.epoch_ns >= t.saturating_sub(40_000_000)
                    && e.shed_depth.is_some_and(|d| d > quiet_depth)
            })
            .map(|e| e.start_ns + e.epoch_ns)
    });
    let (n, longest) = drop_runs(&ep[ep.partition_point(|e| e.start_ns < bounds[1])..]);
    eprintln!(
        "co-runners 0..3: cost factor {factor:.2?}, median depth {phase_depth:.2?}, drops {phase_drops:?}; \
         factor rise at {rise:?}, depth deeper at {deeper:?}; with co-runners {n} epochs with drops, longest run {longest}; {}",
        summary.trim()
    );
    assert!(
        factor[3] > factor[0] * 1.2 && factor[1..].iter().sum::<f64>() / 3.0 > factor[0],
        "the cost factor rises with co-runners: {factor:?}"
    );
    let (rise, deeper) = (rise.expect("a rise"), deeper.expect("deeper shedding"));
    // The scrape sees the factor up to a scrape period (20 ms) after the
    // decision that set it, and the depth is set by the same decision.
    assert!(
        deeper <= rise + 20_000_000,
        "shedding follows the factor within an epoch: rise {rise}, deeper {deeper}"
    );
    assert!(
        longest <= 2,
        "drops do not persist: {n} epochs with drops, longest run {longest}"
    );
}
