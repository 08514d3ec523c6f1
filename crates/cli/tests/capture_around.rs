//! `then capture`: each report of a capturing event names a pcapng file
//! holding exactly the group's packets (those passing the event's
//! filters, in the group) with times in `[start - before, end + after)`,
//! checked against the source capture read plainly; on the bundled
//! capture and every shared one, with a ring too small to reach back (the
//! report says where the file really starts), and with a full disk (the
//! report carries the error).

mod common;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use clarion_capture::PacketSource;
use common::{clarion, repo, stderr};
use serde_json::Value;

const EVENTS: &str = "\
event busy_flow
  filter proto = tcp
  filter proto = udp and dst_port in 0..1023
  when sum(packets) >= 8
  per 5tuple
  every 1s
  then capture 2s before 500ms after

event busy_net
  filter src_ip in 0.0.0.0/0
  when sum(packets) >= 40
  per (src_ip/24, proto)
  every 2s
  then capture 1s after
";

fn captures() -> Vec<PathBuf> {
    let mut v = vec![repo().join("examples/demo.pcap")];
    if let Ok(entries) = std::fs::read_dir(repo().join("../shared/captures")) {
        let mut shared: Vec<PathBuf> = entries
            .map(|e| e.expect("directory entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
            .collect();
        shared.sort();
        v.extend(shared);
    } else {
        eprintln!("note: no shared captures; the bundled one only");
    }
    v
}

struct Frame {
    ts_ns: u64,
    data: Vec<u8>,
    orig_len: u32,
    key: Option<clarion_wire::FlowKey>,
}

fn frames(path: &Path) -> Vec<Frame> {
    let mut src = clarion_capture::CaptureFile::open(path).expect("a capture");
    let mut out = Vec::new();
    while let Some(r) = src.next_packet() {
        let p = r.expect("a packet");
        let key = clarion_wire::parse_frame(p.link, p.data, p.ts_ns, p.orig_len)
            .ok()
            .map(|r| r.key);
        out.push(Frame {
            ts_ns: p.ts_ns,
            data: p.data.to_vec(),
            orig_len: p.orig_len,
            key,
        });
    }
    out
}

/// `a.b.c.d` or `a.b.c.d/len` masked, against an address.
fn addr_in(group: &Value, field: &str, a: IpAddr) -> bool {
    let Some(text) = group.get(field).and_then(Value::as_str) else {
        return true;
    };
    let (addr, len) = match text.split_once('/') {
        Some((a, l)) => (
            a.parse::<IpAddr>().expect("an address"),
            l.parse::<u32>().expect("a length"),
        ),
        None => {
            let a: IpAddr = text.parse().expect("an address");
            (a, if a.is_ipv4() { 32 } else { 128 })
        }
    };
    match (addr, a) {
        (IpAddr::V4(x), IpAddr::V4(y)) => {
            let m = u32::MAX.checked_shl(32 - len).unwrap_or(0);
            u32::from(x) & m == u32::from(y) & m
        }
        (IpAddr::V6(x), IpAddr::V6(y)) => {
            let m = u128::MAX.checked_shl(128 - len).unwrap_or(0);
            u128::from(x) & m == u128::from(y) & m
        }
        _ => false,
    }
}

/// The packets of `event`'s group `group` by the definitions, written out.
fn takes(event: &str, group: &Value, k: &clarion_wire::FlowKey) -> bool {
    let passes = match event {
        "busy_flow" => k.proto == 6 || (k.proto == 17 && k.has_ports() && k.dst_port <= 1023),
        _ => !k.is_ipv6(),
    };
    let port = |f: &str, v: u16| match group.get(f) {
        None => true,
        Some(Value::Null) => !k.has_ports(),
        Some(p) => k.has_ports() && p.as_u64() == Some(u64::from(v)),
    };
    let proto = |p: &Value| match p {
        Value::String(s) => (0..=255u8)
            .find(|&n| clarion_report::proto_name(n) == Some(s.as_str()))
            .map(u64::from),
        other => other.as_u64(),
    };
    passes
        && addr_in(group, "src_ip", k.src_addr())
        && addr_in(group, "dst_ip", k.dst_addr())
        && port("src_port", k.src_port)
        && port("dst_port", k.dst_port)
        && group
            .get("proto")
            .is_none_or(|p| proto(p) == Some(u64::from(k.proto)))
}

fn run(capture: &Path, dir: &Path, extra: &[&str]) -> Vec<Value> {
    let events = dir.join("events.clarion");
    std::fs::write(&events, EVENTS).expect("events written");
    let o = clarion()
        .args(["run", "--format", "json", "-q", "--pcap"])
        .arg(capture)
        .arg("--events")
        .arg(&events)
        .arg("--capture-dir")
        .arg(dir.join("caps"))
        .args(extra)
        .output()
        .expect("clarion run");
    assert!(o.status.success(), "{}", stderr(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a report"))
        .collect()
}

fn check(capture: &Path, reports: &[Value], source: &[Frame], before: &dyn Fn(&str) -> u64) -> usize {
    let name = capture.display();
    let mut files = 0;
    for r in reports {
        let event = r["event"].as_str().expect("an event");
        let c = &r["capture"];
        let start = r["window"]["start_ns"].as_u64().expect("start");
        let end = r["window"]["end_ns"].as_u64().expect("end");
        let (from, to) = (
            c["from_ns"].as_u64().expect("from"),
            c["to_ns"].as_u64().expect("to"),
        );
        let after = if event == "busy_flow" {
            500_000_000
        } else {
            1_000_000_000
        };
        assert_eq!(to, end + after, "{name}: {r}");
        assert!(from >= start.saturating_sub(before(event)), "{name}: {r}");
        let file = c["file"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no file in {r}"));
        let got = frames(Path::new(file));
        let want: Vec<&Frame> = source
            .iter()
            .filter(|f| (from..to).contains(&f.ts_ns) && f.key.is_some_and(|k| takes(event, &r["group"], &k)))
            .collect();
        assert_eq!(got.len(), want.len(), "{name}: {file}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(
                (g.ts_ns, &g.data, g.orig_len),
                (w.ts_ns, &w.data, w.orig_len),
                "{name}: {file}"
            );
        }
        if from <= start {
            assert!(
                !got.is_empty(),
                "{name}: the window's own packets at least: {file}"
            );
        }
        files += 1;
    }
    files
}

#[test]
fn every_report_names_exactly_its_groups_packets() {
    let mut total = 0;
    for capture in captures() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let reports = run(&capture, tmp.path(), &[]);
        let source = frames(&capture);
        // The default ring holds all of these captures: every file starts
        // where it was asked to.
        for r in &reports {
            let before = if r["event"] == "busy_flow" {
                2_000_000_000
            } else {
                0
            };
            let start = r["window"]["start_ns"].as_u64().expect("start");
            assert_eq!(
                r["capture"]["from_ns"].as_u64(),
                Some(start.saturating_sub(before)),
                "{r}"
            );
        }
        total += check(&capture, &reports, &source, &|e| {
            if e == "busy_flow" {
                2_000_000_000
            } else {
                0
            }
        });
    }
    assert!(total > 20, "only {total} captures over all captures");
}

#[test]
fn a_small_ring_says_where_its_files_start() {
    let capture = repo().join("../shared/captures/pathspider_real.pcap");
    if !capture.exists() {
        eprintln!("skipped: no shared captures");
        return;
    }
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let reports = run(&capture, tmp.path(), &["--capture-buffer", "3000"]);
    let source = frames(&capture);
    let late = reports
        .iter()
        .filter(|r| {
            let before = if r["event"] == "busy_flow" {
                2_000_000_000
            } else {
                0
            };
            r["capture"]["from_ns"].as_u64() > r["window"]["start_ns"].as_u64().map(|s| s - before)
        })
        .count();
    assert!(late > 0, "a 3 kB ring reaches back less than 2 s somewhere");
    check(&capture, &reports, &source, &|e| {
        if e == "busy_flow" {
            2_000_000_000
        } else {
            0
        }
    });
}

#[test]
fn no_room_is_an_error_on_the_report_not_a_stall() {
    if unsafe_euid() != 0 {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let small = tmp.path().join("small");
    std::fs::create_dir(&small).expect("a directory");
    let mount = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&small)
        .status();
    if !mount.is_ok_and(|s| s.success()) {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    }
    let events = tmp.path().join("events.clarion");
    std::fs::write(&events, EVENTS).expect("events written");
    let o = clarion()
        .args(["run", "--format", "json", "-q", "--pcap"])
        .arg(repo().join("examples/demo.pcap"))
        .arg("--events")
        .arg(&events)
        .arg("--capture-dir")
        .arg(&small)
        .output()
        .expect("clarion run");
    let _ = std::process::Command::new("umount").arg(&small).status();
    assert!(o.status.success(), "{}", stderr(&o));
    let reports: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a report"))
        .collect();
    assert!(!reports.is_empty());
    for r in &reports {
        let e = r["capture"]["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error in {r}"));
        assert!(e.contains("bytes free"), "{e}");
        assert!(r["capture"].get("file").is_none(), "{r}");
    }
}

fn unsafe_euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[test]
fn capturing_needs_a_directory() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let events = tmp.path().join("events.clarion");
    std::fs::write(&events, EVENTS).expect("events written");
    let o = clarion()
        .args(["run", "-q", "--pcap"])
        .arg(repo().join("examples/demo.pcap"))
        .arg("--events")
        .arg(&events)
        .output()
        .expect("clarion run");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--capture-dir"), "{}", stderr(&o));
}

/// Worker threads deliver reports long after the reader passed their
/// packets; the captures are the same as one monitor's, byte for byte.
#[test]
fn two_workers_capture_what_one_monitor_does() {
    for capture in captures() {
        let one = tempfile::tempdir().expect("a temporary directory");
        let two = tempfile::tempdir().expect("a temporary directory");
        let a = run(&capture, one.path(), &[]);
        let b = run(&capture, two.path(), &["--workers", "2"]);
        assert_eq!(a.len(), b.len(), "{}", capture.display());
        for (x, y) in a.iter().zip(&b) {
            let (fx, fy) = (x["capture"]["file"].as_str(), y["capture"]["file"].as_str());
            let (fx, fy) = (fx.expect("a file"), fy.expect("a file"));
            assert_eq!(
                x["capture"]["from_ns"],
                y["capture"]["from_ns"],
                "{}",
                capture.display()
            );
            let (bx, by) = (
                std::fs::read(fx).expect("written"),
                std::fs::read(fy).expect("written"),
            );
            assert!(bx == by, "{}: {fx} and {fy} differ", capture.display());
        }
    }
}

/// Where captures are not made, asking for them is refused, not ignored.
#[test]
fn captures_elsewhere_are_refused() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let events = tmp.path().join("events.clarion");
    std::fs::write(&events, EVENTS).expect("events written");
    let inventory = tmp.path().join("hosts.txt");
    std::fs::write(&inventory, "web-1 10.0.0.0/8\n").expect("inventory written");
    let cases: [(Vec<&str>, &str); 2] = [
        (
            vec![
                "run",
                "--inventory",
                inventory.to_str().expect("utf-8"),
                "--pcap",
                "examples/demo.pcap",
            ],
            "not with --inventory",
        ),
        (
            vec![
                "agent",
                "--host",
                "web-1",
                "--pcap",
                "examples/demo.pcap",
                "--nats",
                "nats://127.0.0.1:1",
            ],
            "a replaying agent does not do",
        ),
    ];
    for (args, says) in cases {
        let o = clarion()
            .args(&args)
            .arg("--events")
            .arg(&events)
            .output()
            .expect("clarion");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}
