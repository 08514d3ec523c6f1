//! `then capture` on live capture (`clarion run -i VETH --capture-dir`),
//! with one worker and with two: every report of the capturing event
//! names one file holding exactly the frames of its group received in its
//! stated span, from every worker, in time order. The reference of what
//! arrived and when is the same run's export policy sending every frame to
//! pcapng (the kernel's timestamps; tcpreplay's differ from the file's).
//!
//! The frames go from `vb` in one network namespace to `va` in another
//! (tcpreplay, at a steady 10,000 frames a second). Needs root, `ip` and
//! `tcpreplay`; skipped, saying why, otherwise.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use clarion_capture::PacketSource;
use common::netns::{clarion_in, Net};
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

#[test]
fn every_live_capture_holds_its_groups_frames_with_one_and_two_workers() {
    let Some(net) = Net::new("c") else { return };
    if Command::new("tcpreplay").arg("-V").output().is_err() {
        eprintln!("skipped: tcpreplay is not installed (apt-get install tcpreplay)");
        return;
    }
    for workers in [1u32, 2] {
        check(&net, &repo().join("examples/demo.pcap"), workers);
    }
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

fn check(net: &Net, capture: &Path, workers: u32) {
    let what = format!("{} with {workers} worker(s)", capture.display());
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let events = tmp.path().join("events.clarion");
    std::fs::write(&events, EVENTS).expect("events written");
    let policies = tmp.path().join("p.clarion");
    std::fs::write(&policies, "export all\n  send packets to pcapng\n").expect("policies written");
    let (refs, caps, reports) = (
        tmp.path().join("ref"),
        tmp.path().join("caps"),
        tmp.path().join("reports.jsonl"),
    );
    let mut run = clarion_in(&net.a)
        .args(["run", "-i", "va", "--stats-every", "0", "--duration", "60s"])
        .args(["--snaplen", "2048", "--format", "json", "-o"])
        .arg(&reports)
        .args(["--workers", &workers.to_string(), "--events"])
        .arg(&events)
        .arg("--capture-dir")
        .arg(&caps)
        .arg("--exports")
        .arg(&policies)
        .arg("--export-dir")
        .arg(&refs)
        .stderr(Stdio::piped())
        .spawn()
        .expect("clarion run starts");
    let mut err = BufReader::new(run.stderr.take().expect("its stderr"));
    let mut first = String::new();
    err.read_line(&mut first).expect("its first line");
    assert!(first.contains("capturing on va"), "{what}: {first}");
    let replay = Command::new("ip")
        .args([
            "netns",
            "exec",
            &net.b,
            "tcpreplay",
            "-q",
            "-i",
            "vb",
            "--pps",
            "10000",
        ])
        .arg(capture)
        .output()
        .expect("tcpreplay runs");
    assert!(
        replay.status.success(),
        "{what}: tcpreplay: {}",
        String::from_utf8_lossy(&replay.stderr)
    );
    // The last windows close and their captures' spans pass meanwhile.
    std::thread::sleep(Duration::from_millis(2500));
    // SAFETY: kill on our own child's pid (`ip netns exec` became clarion).
    assert_eq!(unsafe { libc::kill(run.id() as libc::pid_t, libc::SIGINT) }, 0);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).expect("its summary");
    assert!(run.wait().expect("ends").success(), "{what}: {first}{rest}");
    assert!(rest.contains("live: 0 kernel drops"), "{what}: {rest}");
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
