//! `then capture` on live capture (`--capture-dir`), whichever way the
//! capturing event reaches the host: given at the start (`clarion run -i
//! --events`, one worker and two), added at runtime through the host's
//! control API (`clarion events add` on `clarion run -i --api`), and on
//! an agent (`clarion agent -i`, registered with a manager over NATS,
//! the event added through its API). One path serves all three
//! (`LiveHost::install`). Every report of the capturing event names one
//! file holding exactly the frames of its group received in its stated
//! span, from every worker, in time order. The reference of what arrived
//! and when is the same run's export policy sending every frame to
//! pcapng (the kernel's timestamps; tcpreplay's differ from the file's).
//!
//! The frames go from `vb` in one network namespace to `va` in another
//! (tcpreplay, at a steady 10,000 frames a second). Needs root, `ip` and
//! `tcpreplay` (and nats-server for the agent); skipped, saying why,
//! otherwise.

mod common;

use std::io::BufReader;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clarion_capture::PacketSource;
use common::netns::{capturing_on_va, clarion_in, in_netns, tcpreplay, Net};
use common::repo;
use serde_json::Value;

const EVENTS: &str = "\
event busy_flow
  filter proto = tcp
  when sum(packets) >= 8
  per 5tuple
  every 1s
  then capture 1s before 500ms after
";

/// The control API's token in these tests.
const TOKEN: &str = "capture-live-test-token-0123456789abcdef";

/// How the capturing event reaches the live host.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Via {
    /// `clarion run -i --events`, at the start.
    Start,
    /// `clarion events add` on `clarion run -i --api`, once it captures.
    RunApi,
    /// `clarion events add` on `clarion agent -i --api`.
    AgentApi,
}

#[test]
fn every_live_capture_holds_its_groups_frames_with_one_and_two_workers() {
    let Some(net) = Net::new("c") else { return };
    if !tcpreplay() {
        return;
    }
    for workers in [1u32, 2] {
        check(&net, &repo().join("examples/demo.pcap"), workers, Via::Start);
    }
}

/// Issue 34: an event added while the host runs captures as one of the
/// start does, the rings fed from its install (none before: no event
/// captured), on `clarion run -i` and on `clarion agent -i`.
#[test]
fn events_added_at_runtime_capture_on_a_live_run_and_a_live_agent() {
    let Some(net) = Net::new("d") else { return };
    if !tcpreplay() {
        return;
    }
    check(&net, &repo().join("examples/demo.pcap"), 2, Via::RunApi);
    if common::tool("nats-server").is_none() {
        eprintln!("skipped (the agent): nats-server is not installed (apt-get install nats-server)");
        return;
    }
    check(&net, &repo().join("examples/demo.pcap"), 2, Via::AgentApi);
}

#[derive(Clone)]
struct Frame {
    ts_ns: u64,
    data: Vec<u8>,
    orig_len: u32,
    key: clarion_wire::FlowKey,
}

fn frames(path: &Path) -> Vec<Frame> {
    let mut src = clarion_capture::CaptureFile::open(path).expect("a capture");
    let mut out = Vec::new();
    while let Some(r) = src.next_packet() {
        let p = r.expect("a packet");
        if let Ok(rec) = clarion_wire::parse_frame(p.link, p.data, p.ts_ns, p.orig_len) {
            out.push(Frame {
                ts_ns: p.ts_ns,
                data: p.data.to_vec(),
                orig_len: p.orig_len,
                key: rec.key,
            });
        }
    }
    out
}

/// A 5-tuple group's frames (the event's filter: TCP), written out.
fn in_group(g: &Value, k: &clarion_wire::FlowKey) -> bool {
    let ip = |f: &str, a: std::net::IpAddr| {
        let t = g[f].as_str().expect("an address");
        let t = t.split_once('/').map_or(t, |(a, _)| a);
        t.parse::<std::net::IpAddr>().expect("an address") == a
    };
    let port = |f: &str, v: u16| g[f].as_u64() == Some(u64::from(v));
    k.proto == 6
        && k.has_ports()
        && ip("src_ip", k.src_addr())
        && ip("dst_ip", k.dst_addr())
        && port("src_port", k.src_port)
        && port("dst_port", k.dst_port)
}

/// Starts the host `via` says, with the policy writing every frame to
/// `refs` and captures to `caps`; returns it, its standard error past the
/// line saying it captures, and what else it needs kept running.
fn start(
    net: &Net,
    via: Via,
    workers: u32,
    dir: &Path,
) -> (Child, BufReader<std::process::ChildStderr>, Vec<Child>) {
    let events = dir.join("events.clarion");
    std::fs::write(&events, EVENTS).expect("events written");
    let policies = dir.join("p.clarion");
    std::fs::write(&policies, "export all\n  send packets to pcapng\n").expect("policies written");
    let mut others = Vec::new();
    let mut host = clarion_in(&net.a);
    if via == Via::AgentApi {
        others = nats_and_manager(net, dir);
        host.args(["agent", "--nats", "nats://127.0.0.1:4222", "--host", "vm"]);
    } else {
        host.arg("run");
    }
    host.args(["-i", "va", "--stats-every", "0", "--duration", "60s"])
        .args(["--snaplen", "2048", "--format", "json", "-o"])
        .arg(dir.join("reports.jsonl"))
        .args(["--workers", &workers.to_string()])
        .arg("--capture-dir")
        .arg(dir.join("caps"))
        .arg("--exports")
        .arg(&policies)
        .arg("--export-dir")
        .arg(dir.join("ref"));
    match via {
        Via::Start => host.arg("--events").arg(&events),
        Via::RunApi | Via::AgentApi => host.args(["--api", "127.0.0.1:8711", "--api-token", TOKEN]),
    };
    let mut run = host.stderr(Stdio::piped()).spawn().expect("the host starts");
    let mut err = BufReader::new(run.stderr.take().expect("its stderr"));
    capturing_on_va(&mut err, &format!("{via:?}"));
    if via != Via::Start {
        add_events(net, &events);
    }
    (run, err, others)
}

/// `clarion events add` on the host's API, retried while the API starts.
fn add_events(net: &Net, events: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = clarion_in(&net.a)
            .args([
                "events",
                "--api",
                "http://127.0.0.1:8711",
                "--token",
                TOKEN,
                "add",
            ])
            .arg(events)
            .output()
            .expect("clarion events runs");
        if out.status.success() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "events add: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A nats-server and a manager in namespace `a` (its own ports), the
/// server listening before the manager starts.
fn nats_and_manager(net: &Net, dir: &Path) -> Vec<Child> {
    let server = Command::new("ip")
        .args(["netns", "exec", &net.a])
        .arg(common::tool("nats-server").expect("nats-server"))
        .args(["-a", "127.0.0.1", "-p", "4222"])
        .stderr(Stdio::null())
        .spawn()
        .expect("nats-server starts");
    let deadline = Instant::now() + Duration::from_secs(10);
    while in_netns(&net.a, || std::net::TcpStream::connect("127.0.0.1:4222").is_ok()) != Some(true) {
        assert!(Instant::now() < deadline, "nats-server never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let hosts = dir.join("hosts.txt");
    std::fs::write(&hosts, "vm 10.0.0.0/8\n").expect("inventory");
    let manager = clarion_in(&net.a)
        .args(["manager", "--insecure", "--nats", "nats://127.0.0.1:4222"])
        .arg("--inventory")
        .arg(&hosts)
        .args(["--no-store", "--no-api", "-o"])
        .arg(dir.join("net.jsonl"))
        .stderr(Stdio::null())
        .spawn()
        .expect("the manager starts");
    vec![server, manager]
}

fn check(net: &Net, capture: &Path, workers: u32, via: Via) {
    let what = format!("{} with {workers} worker(s), {via:?}", capture.display());
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let (refs, caps, reports) = (
        tmp.path().join("ref"),
        tmp.path().join("caps"),
        tmp.path().join("reports.jsonl"),
    );
    let (mut run, mut err, others) = start(net, via, workers, tmp.path());
    net.replay(capture, &what);
    // The last windows close and their captures' spans pass meanwhile.
    std::thread::sleep(Duration::from_millis(2500));
    // SAFETY: kill on our own child's pid (`ip netns exec` became clarion).
    assert_eq!(unsafe { libc::kill(run.id() as libc::pid_t, libc::SIGINT) }, 0);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).expect("its summary");
    assert!(run.wait().expect("ends").success(), "{what}: {rest}");
    for mut o in others {
        let _ = o.kill();
        let _ = o.wait();
    }
    assert!(rest.contains("0 kernel drops"), "{what}: {rest}");
    assert!(!rest.contains("capture not written"), "{what}: {rest}");

    // What arrived, with the kernel's times: every worker's reference files.
    let mut arrived: Vec<Frame> = Vec::new();
    for e in std::fs::read_dir(&refs).expect("reference files") {
        arrived.extend(frames(&e.expect("an entry").path()));
    }
    assert!(arrived.len() > 10_000, "{what}: {} frames arrived", arrived.len());
    let reports: Vec<Value> = std::fs::read_to_string(&reports)
        .expect("reports")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a report"))
        .collect();
    let mut files = 0;
    for r in reports.iter().filter(|r| r["event"] == "busy_flow") {
        let c = &r["capture"];
        let end = r["window"]["end_ns"].as_u64().expect("end");
        let start = r["window"]["start_ns"].as_u64().expect("start");
        let (from, to) = (
            c["from_ns"].as_u64().expect("from"),
            c["to_ns"].as_u64().expect("to"),
        );
        assert_eq!(to, end + 500_000_000, "{what}: {r}");
        assert!(
            from >= start - 1_000_000_000 && from <= start,
            "{what}: the ring reaches the window: {r}"
        );
        let file = c["file"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: no file in {r}"));
        let got = frames(Path::new(file));
        assert!(
            got.windows(2).all(|p| p[0].ts_ns <= p[1].ts_ns),
            "{what}: {file} in time order"
        );
        let mut want: Vec<(u64, Vec<u8>, u32)> = arrived
            .iter()
            .filter(|f| (from..to).contains(&f.ts_ns) && in_group(&r["group"], &f.key))
            .map(|f| (f.ts_ns, f.data.clone(), f.orig_len))
            .collect();
        let mut got: Vec<(u64, Vec<u8>, u32)> =
            got.into_iter().map(|f| (f.ts_ns, f.data, f.orig_len)).collect();
        want.sort();
        got.sort();
        assert!(
            got.len() >= 8,
            "{what}: the window's own packets at least: {file}"
        );
        assert!(
            got == want,
            "{what}: {file}: {} frames, {} of the group arrived in its span",
            got.len(),
            want.len()
        );
        files += 1;
    }
    assert!(files > 0, "{what}: some report captured");
    assert_eq!(
        std::fs::read_dir(&caps).expect("captures").count(),
        files,
        "{what}: one file a report"
    );
    eprintln!("{what}: {files} capture files checked");
}
