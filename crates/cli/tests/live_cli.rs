//! Live capture from the command line: usage and permission errors,
//! --duration, an interface going down or away (network namespaces and a
//! veth pair; skipped, saying why, when not root).

use std::io::{Read, Write};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::clarion_process as clarion;

fn run(c: &mut Command) -> (i32, String) {
    let out = c.output().expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_missing_interface_is_named() {
    let (code, err) =
        run(clarion().args(["run", "-i", "clarion-nope0", "--events", "examples/demo.clarion"]));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no such interface `clarion-nope0`"), "{err}");
}

#[test]
fn a_file_and_an_interface_together_are_refused() {
    let (code, err) = run(clarion().args([
        "run",
        "-i",
        "lo",
        "--pcap",
        "examples/demo.pcap",
        "--events",
        "examples/demo.clarion",
    ]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    let (code, err) = run(clarion().args(["run", "--events", "examples/demo.clarion"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--pcap") && err.contains("--interface"), "{err}");
}

#[test]
fn a_bad_filter_is_a_usage_error_with_tcpdump_s_words() {
    if Command::new("tcpdump").arg("--version").output().is_err() {
        eprintln!("skipped: no tcpdump");
        return;
    }
    let (code, err) = run(clarion().args([
        "run",
        "-i",
        "lo",
        "--filter",
        "tcp port 99999",
        "--events",
        "examples/demo.clarion",
    ]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("illegal port number"), "{err}");
}

#[test]
fn without_the_capability_the_error_says_what_to_grant() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped: needs root (to drop to an unprivileged user) and setpriv");
        return;
    }
    let bin = assert_cmd::cargo::cargo_bin("clarion");
    let events = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/demo.clarion");
    let mut c = Command::new("setpriv");
    c.args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "--"])
        .arg(bin)
        .args(["run", "-i", "lo", "--events", events]);
    let (code, err) = run(&mut c);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("permission denied; run as root or grant"), "{err}");
    assert!(err.contains("CAP_NET_RAW"), "{err}");
}

#[test]
fn duration_stops_a_live_run_with_its_summary() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: opening a packet socket needs root");
        return;
    }
    let started = std::time::Instant::now();
    let out = clarion()
        .args([
            "run",
            "-i",
            "lo",
            "--duration",
            "300ms",
            "--flow-capacity",
            "1024",
            "--events",
            "examples/demo.clarion",
            "--format",
            "json",
        ])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        err.contains("capturing on lo (AF_PACKET frames) with 1 worker"),
        "{err}"
    );
    assert!(err.contains("live: 0 kernel drops"), "{err}");
}

/// Issue 20, live: `--records`, `--gpv` and `--app` without events on a
/// live interface. Three UDP flows of known packet counts and sizes are
/// sent, then the wire goes quiet: each flow's record carries exactly what
/// was sent and ends idle (the worker's clock ends records on a quiet
/// wire, before the run ends); the Parquet file written beside the JSON
/// lines holds the same records (its footer written when the run
/// stopped); the GPVs hold each flow's packets, and the app's report on
/// the host equals `clarion apps run` on the GPV file it wrote.
#[test]
fn live_flow_records_and_gpvs_count_every_packet() {
    let Some(net) = Net::new("r") else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let (jsonl, parquet) = (dir.path().join("r.jsonl"), dir.path().join("r.parquet"));
    let (gpv, apps) = (dir.path().join("g.gpv"), dir.path().join("apps.json"));
    let child = clarion_in(&net.a)
        .args(["run", "-i", "va", "--stats-every", "0", "--duration", "4s"])
        .args(["--record-idle-timeout", "1s"])
        .arg("--records")
        .arg(&jsonl)
        .arg("--records")
        .arg(&parquet)
        .arg("--gpv")
        .arg(&gpv)
        .args(["--app", "classifier", "--app-output"])
        .arg(&apps)
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    std::thread::sleep(Duration::from_millis(1200));
    let flows = [(40_001u16, 20u64), (40_002, 30), (40_003, 40)];
    let sent = in_netns(&net.b, move || {
        for (port, n) in flows {
            let sock = UdpSocket::bind(("10.231.0.2", port)).ok()?;
            for _ in 0..n {
                sock.send_to(&[7u8; 100], "10.231.0.1:9999").ok()?;
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        Some(())
    })
    .flatten();
    assert!(sent.is_some(), "sent the datagrams");
    let out = child.wait_with_output().expect("ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("flow records"), "{err}");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&jsonl)
        .expect("records")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    for (port, n) in flows {
        let of_flow: Vec<_> = lines
            .iter()
            .filter(|v| v["proto"] == 17 && v["src_port"] == port && v["dst_port"] == 9999)
            .collect();
        assert_eq!(of_flow.len(), 1, "one record of flow {port}: {lines:?}");
        let r = of_flow[0];
        assert_eq!(
            (r["src_ip"].as_str(), r["dst_ip"].as_str()),
            (Some("10.231.0.2"), Some("10.231.0.1"))
        );
        assert_eq!(r["packets"], n, "{r}");
        assert_eq!(r["bytes"], n * 128, "IP bytes: 20 + 8 + 100 a datagram: {r}");
        assert_eq!(
            (r["min_size"].as_u64(), r["max_size"].as_u64()),
            (Some(128), Some(128))
        );
        assert_eq!(
            r["end_reason"], "idle",
            "ended on the quiet wire, not at the end: {r}"
        );
    }
    let from_parquet = clarion_parquet::read_records(&parquet).expect("the Parquet file was finished");
    assert_eq!(from_parquet.len(), lines.len(), "the same records in both");
    let packets: u64 = from_parquet.iter().map(|r| r.packets).sum();
    let want: u64 = lines.iter().filter_map(|v| v["packets"].as_u64()).sum();
    assert_eq!(packets, want);

    let f = std::fs::File::open(&gpv).expect("GPV file");
    let gpvs: Vec<clarion_gpv::Gpv> = clarion_gpv::GpvReader::new(std::io::BufReader::new(f))
        .expect("a GPV file")
        .collect::<Result<_, _>>()
        .expect("undamaged");
    for (port, n) in flows {
        let of_flow: Vec<u16> = gpvs
            .iter()
            .filter(|g| g.header.key.proto == 17 && g.header.key.src_port == port)
            .flat_map(|g| g.packets.iter().map(|p| p.size))
            .collect();
        assert_eq!(
            of_flow,
            vec![128; n as usize],
            "flow {port}'s packets in its GPVs"
        );
    }
    let from_file = Command::new(assert_cmd::cargo::cargo_bin("clarion"))
        .args(["apps", "run", "classifier", "--gpv"])
        .arg(&gpv)
        .output()
        .expect("runs");
    assert!(
        from_file.status.success(),
        "{}",
        String::from_utf8_lossy(&from_file.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&apps).expect("the apps' report"),
        String::from_utf8_lossy(&from_file.stdout),
        "the app on the host and on its GPV file"
    );
}

/// Both ring layouts (`--ring-mode frames`, the default, and `blocks`)
/// count every datagram of a flow on a live veth, and a run says which it
/// used.
#[test]
fn both_ring_layouts_count_every_packet() {
    for (k, mode) in ["frames", "blocks"].into_iter().enumerate() {
        let Some(net) = Net::new(&format!("m{k}")) else {
            return;
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let jsonl = dir.path().join("r.jsonl");
        let child = clarion_in(&net.a)
            .args([
                "run",
                "-i",
                "va",
                "--ring-mode",
                mode,
                "--stats-every",
                "0",
                "--duration",
                "3s",
            ])
            .arg("--records")
            .arg(&jsonl)
            .stderr(Stdio::piped())
            .spawn()
            .expect("starts");
        std::thread::sleep(Duration::from_millis(1000));
        let sent = in_netns(&net.b, || {
            let sock = UdpSocket::bind(("10.231.0.2", 40_100)).ok()?;
            for _ in 0..50 {
                sock.send_to(&[7u8; 60], "10.231.0.1:9999").ok()?;
                std::thread::sleep(Duration::from_millis(1));
            }
            Some(())
        })
        .flatten();
        assert!(sent.is_some(), "sent the datagrams");
        let out = child.wait_with_output().expect("ends");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{mode}: {err}");
        assert!(err.contains(&format!("AF_PACKET {mode}")), "{mode}: {err}");
        let records: Vec<serde_json::Value> = std::fs::read_to_string(&jsonl)
            .expect("records")
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON"))
            .filter(|v: &serde_json::Value| v["src_port"] == 40_100)
            .collect();
        assert_eq!(records.len(), 1, "{mode}: {records:?}");
        assert_eq!(records[0]["packets"], 50, "{mode}: {}", records[0]);
    }
}

/// Issue 20: metric apps started and stopped on a running host through its
/// control API, without a restart. The profiler, started before the
/// traffic, reports on the sender exactly what `clarion apps run` reports
/// on the GPV file the host wrote; a stopped app answers with its last
/// report; mistakes are refused with the API's words.
#[test]
fn apps_start_and_stop_on_a_running_host_through_the_control_api() {
    let Some(net) = Net::new("p") else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let (gpv, apps) = (dir.path().join("g.gpv"), dir.path().join("apps.json"));
    let api = "http://127.0.0.1:8795";
    let mut child = clarion_in(&net.a)
        .args(["run", "-i", "va", "--stats-every", "0", "--duration", "8s"])
        .args(["--api", "127.0.0.1:8795", "--api-no-auth", "--gpv"])
        .arg(&gpv)
        .arg("--app-output")
        .arg(&apps)
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let apps_cli = |args: &[&str]| {
        let o = clarion_in(&net.a)
            .args(["apps", "--api", api])
            .args(args)
            .output()
            .expect("runs");
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    // Up once the API answers (the host commits its memory first).
    let up = Instant::now();
    while apps_cli(&["running"]).0 != 0 && up.elapsed() < Duration::from_secs(10) {
        if child.try_wait().ok().flatten().is_some() {
            let mut err = String::new();
            child.stderr.take().map(|mut e| e.read_to_string(&mut err));
            panic!("the host ended before its API answered: {err}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, out, err) = apps_cli(&["add", "profiler"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("running: profiler"), "{out}");
    let (code, _, err) = apps_cli(&["add", "profiler"]);
    assert_eq!(code, 2, "twice: {err}");
    assert!(err.contains("already running"), "{err}");
    let (code, _, err) = apps_cli(&["add", "sniffer"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no app named \"sniffer\""), "{err}");
    let (code, _, err) = apps_cli(&["show", "microburst"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no app `microburst` is running"), "{err}");
    let (code, _, err) = apps_cli(&["add", "classifier"]);
    assert_eq!(code, 0, "{err}");

    let sent = in_netns(&net.b, || {
        let sock = UdpSocket::bind(("10.231.0.2", 40_010)).ok()?;
        for i in 0..50u64 {
            sock.send_to(&vec![1u8; 100 + i as usize], "10.231.0.1:9999")
                .ok()?;
            std::thread::sleep(Duration::from_millis(3));
        }
        Some(())
    })
    .flatten();
    assert!(sent.is_some(), "sent the datagrams");
    std::thread::sleep(Duration::from_millis(1500));
    let (code, out, err) = apps_cli(&["rm", "classifier"]);
    assert_eq!(code, 0, "{err}");
    let last: serde_json::Value = serde_json::from_str(&out).expect("the classifier's last report");
    assert!(last.to_string().contains("10.231.0.2"), "it saw the flow: {last}");
    let (code, out, _) = apps_cli(&["running"]);
    assert_eq!((code, out.trim()), (0, "profiler"));

    let run = child.wait_with_output().expect("ends");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(
        err.contains("app profiler started") && err.contains("app classifier stopped"),
        "{err}"
    );
    let on_host: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&apps).expect("the apps' report")).expect("JSON");
    let from_file = Command::new(assert_cmd::cargo::cargo_bin("clarion"))
        .args(["apps", "run", "profiler", "--gpv"])
        .arg(&gpv)
        .output()
        .expect("runs");
    assert!(
        from_file.status.success(),
        "{}",
        String::from_utf8_lossy(&from_file.stderr)
    );
    let from_file: serde_json::Value = serde_json::from_slice(&from_file.stdout).expect("JSON");
    let sender = |v: &serde_json::Value| {
        v["apps"]["profiler"]["hosts"]
            .as_array()
            .and_then(|hosts| hosts.iter().find(|h| h["host"] == "10.231.0.2").cloned())
    };
    let host = sender(&on_host).expect("the sender in the host's report");
    assert_eq!(host["packets"], 50, "{host}");
    assert_eq!(
        Some(host),
        sender(&from_file),
        "the host's profiler and the file's agree"
    );
}

/// With `--down-timeout 0`, an interface that goes down stops the run at
/// once with an error naming it, instead of quiet windows that saw nothing.
#[test]
fn an_interface_going_down_with_no_time_to_wait_is_an_error_naming_it() {
    let Some(net) = Net::new("z") else { return };
    let child = clarion_in(&net.a)
        .args(["run", "-i", "va", "--events", "examples/demo.clarion"])
        .args(["--stats-every", "0", "--duration", "30s", "--down-timeout", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    std::thread::sleep(Duration::from_millis(1500));
    net.ip(&["-n", &net.a, "link", "set", "va", "down"]);
    let started = Instant::now();
    let out = child.wait_with_output().expect("ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("interface va went down"), "{err}");
    assert!(err.contains("not back within the down timeout (0 ms)"), "{err}");
    assert!(
        err.contains("live: 0 kernel drops"),
        "the summary is written: {err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5), "noticed at once");
}

/// Issue 18, interface removal: set down for a second, then up again. The
/// run goes on; standard error names the outage; the windows overlapping
/// it are incomplete, those well before and after complete; the epoch
/// statistics and the metrics show it.
#[test]
fn an_interface_down_for_a_second_marks_its_windows_incomplete_and_the_run_goes_on() {
    let Some(net) = Net::new("d") else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let (events, reports, epochs) = (
        dir.path().join("e.clarion"),
        dir.path().join("r.jsonl"),
        dir.path().join("epochs.jsonl"),
    );
    std::fs::write(&events, EVERY_WINDOW).expect("events");
    let child = clarion_in(&net.a)
        .args([
            "run",
            "-i",
            "va",
            "--format",
            "json",
            "--stats-every",
            "0",
            "--duration",
            "4s",
        ])
        .args(["--metrics", "127.0.0.1:9464"])
        .arg("--events")
        .arg(&events)
        .arg("--output")
        .arg(&reports)
        .arg("--epoch-stats")
        .arg(&epochs)
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let sender = net.send_udp();
    std::thread::sleep(Duration::from_millis(1200));
    let before_down = now_ns();
    net.ip(&["-n", &net.a, "link", "set", "va", "down"]);
    let down = now_ns();
    std::thread::sleep(Duration::from_millis(1000));
    let up = now_ns();
    net.ip(&["-n", &net.a, "link", "set", "va", "up"]);
    let after_up = now_ns();
    std::thread::sleep(Duration::from_millis(700));
    let metrics = in_netns(&net.a, || {
        let mut c = std::net::TcpStream::connect("127.0.0.1:9464").ok()?;
        c.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .ok()?;
        let mut page = String::new();
        c.read_to_string(&mut page).ok()?;
        Some(page)
    })
    .flatten()
    .unwrap_or_default();
    let out = child.wait_with_output().expect("ends");
    drop(sender);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("interface va is down since"), "{err}");
    assert!(err.contains("waiting up to 30s"), "{err}");
    assert!(err.contains("va is back after 1."), "{err}");
    assert!(err.contains("interfaces: down 1 time"), "{err}");

    let windows = windows_of(&reports);
    let overlapping: Vec<_> = windows.iter().filter(|w| w.0 < up && w.1 > down).collect();
    assert!(!overlapping.is_empty(), "{windows:?}");
    assert!(
        overlapping.iter().all(|w| !w.2),
        "overlapping the outage: {windows:?}"
    );
    // Before: all but the first window (the capture started inside it).
    let first = windows.iter().map(|w| w.0).min().unwrap_or(0);
    let before: Vec<_> = windows
        .iter()
        .filter(|w| w.0 > first && w.1 + 50_000_000 <= before_down)
        .collect();
    assert!(!before.is_empty() && before.iter().all(|w| w.2), "{windows:?}");
    // After: once the state check (every 100 ms) saw it up; not the last window.
    let last = windows.iter().map(|w| w.0).max().unwrap_or(0);
    let after: Vec<_> = windows
        .iter()
        .filter(|w| w.0 >= after_up + 300_000_000 && w.0 < last)
        .collect();
    assert!(
        !after.is_empty() && after.iter().all(|w| w.2),
        "after {after_up}: {windows:?} {err}"
    );

    let epochs = std::fs::read_to_string(&epochs).expect("epoch statistics");
    let down_ns: u64 = epochs
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["down_ns"].as_u64())
        .sum();
    assert!(
        (900_000_000..1_600_000_000).contains(&down_ns),
        "{down_ns} ns down in the epoch statistics"
    );
    assert!(
        metrics.contains("clarion_interface_down_total{interface=\"va\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("clarion_interface_up{interface=\"va\"} 1\n"),
        "{metrics}"
    );
}

/// Issue 18, interface removal: an interface removed and not back within
/// `--down-timeout` ends the run with status 1, a message saying so and
/// the summary.
#[test]
fn a_removed_interface_not_back_in_time_ends_the_run_with_its_summary() {
    let Some(net) = Net::new("r") else { return };
    let child = clarion_in(&net.a)
        .args([
            "run",
            "-i",
            "va",
            "--events",
            "examples/demo.clarion",
            "--format",
            "json",
        ])
        .args(["--stats-every", "0", "--duration", "30s", "--down-timeout", "1s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    std::thread::sleep(Duration::from_millis(1200));
    net.ip(&["-n", &net.a, "link", "del", "va"]);
    let removed = Instant::now();
    let out = child.wait_with_output().expect("ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let waited = removed.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
        "{waited:?}: {err}"
    );
    assert!(err.contains("interface va is down since"), "{err}");
    assert!(err.contains("interface va was removed; waiting"), "{err}");
    assert!(
        err.contains("clarion: interface va was removed 1.")
            && err.contains("ago and was not back within the down timeout (1.0 s)"),
        "{err}"
    );
    assert!(
        err.contains("live: 0 kernel drops"),
        "the summary is written: {err}"
    );
    assert!(err.contains("interfaces: down 1 time"), "{err}");
}

/// Issue 18, interface removal: removed and created again under its name
/// within the timeout, it is captured anew (two workers: a new fanout
/// group), and its windows are complete again.
#[test]
fn a_removed_interface_created_again_is_captured_anew() {
    let Some(net) = Net::new("c") else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let (events, reports) = (dir.path().join("e.clarion"), dir.path().join("r.jsonl"));
    std::fs::write(&events, EVERY_WINDOW).expect("events");
    let child = clarion_in(&net.a)
        .args(["run", "-i", "va", "--workers", "2", "--format", "json"])
        .args(["--stats-every", "0", "--duration", "4s", "--down-timeout", "10s"])
        .arg("--events")
        .arg(&events)
        .arg("--output")
        .arg(&reports)
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let sender = net.send_udp();
    std::thread::sleep(Duration::from_millis(1200));
    net.ip(&["-n", &net.a, "link", "del", "va"]);
    std::thread::sleep(Duration::from_millis(500));
    net.pair();
    let back = now_ns();
    let out = child.wait_with_output().expect("ends");
    drop(sender);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("interface va was removed; waiting"), "{err}");
    assert!(err.contains("(created again: captured anew)"), "{err}");
    let windows = windows_of(&reports);
    let last = windows.iter().map(|w| w.0).max().unwrap_or(0);
    // The last two windows are left out: --duration stops the two workers
    // a moment apart, so the windows it cuts may be incomplete.
    let after: Vec<_> = windows
        .iter()
        .filter(|w| w.0 >= back + 300_000_000 && w.0 + 400_000_000 <= last)
        .collect();
    assert!(
        !after.is_empty(),
        "packets of the new interface seen: {windows:?}"
    );
    assert!(after.iter().all(|w| w.2), "{windows:?}");
}

/// One report per window with traffic (every packet is UDP or ICMP).
const EVERY_WINDOW: &str = "event seen\n  when sum(packets) > 0\n  per proto\n  every 200ms\n";

fn now_ns() -> u64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    d.as_nanos() as u64
}

/// (start, end, complete) of every report's window.
fn windows_of(path: &std::path::Path) -> Vec<(u64, u64, bool)> {
    std::fs::read_to_string(path)
        .expect("reports")
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|r| {
            Some((
                r["window"]["start_ns"].as_u64()?,
                r["window"]["end_ns"].as_u64()?,
                r["completeness"]["complete"].as_bool()?,
            ))
        })
        .collect()
}

/// Clarion inside network namespace `ns`.
fn clarion_in(ns: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns])
        .arg(assert_cmd::cargo::cargo_bin("clarion"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    c
}

/// Runs `f` on a thread moved into network namespace `ns`.
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).ok()?;
        // SAFETY: plain system call on a namespace file we hold open; it
        // moves only this thread.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return None;
        }
        Some(f())
    })
    .join()
    .ok()
    .flatten()
}

/// Two network namespaces of this test, joined by a veth pair: `va`
/// (10.231.0.1, where Clarion captures) in `a`, `vb` (10.231.0.2) in `b`.
/// Removed when dropped.
struct Net {
    a: String,
    b: String,
}

impl Net {
    /// `None`, saying why, when not root or without `ip` and namespaces.
    fn new(tag: &str) -> Option<Net> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || Command::new("ip").arg("-V").output().is_err() {
            eprintln!("skipped: needs root and ip (network namespaces and a veth pair)");
            return None;
        }
        let id = std::process::id() % 100_000;
        let net = Net {
            a: format!("clr{tag}{id}a"),
            b: format!("clr{tag}{id}b"),
        };
        if !(net.ip(&["netns", "add", &net.a]) && net.ip(&["netns", "add", &net.b])) {
            eprintln!("skipped: cannot create network namespaces");
            return None;
        }
        net.ip(&["-n", &net.a, "link", "set", "lo", "up"]);
        assert!(net.pair(), "a veth pair between the namespaces");
        Some(net)
    }

    /// Creates the veth pair (again), addressed and up.
    fn pair(&self) -> bool {
        let (a, b) = (self.a.as_str(), self.b.as_str());
        self.ip(&[
            "-n", a, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", b,
        ]) && self.ip(&["-n", a, "addr", "add", "10.231.0.1/24", "dev", "va"])
            && self.ip(&["-n", b, "addr", "add", "10.231.0.2/24", "dev", "vb"])
            && self.ip(&["-n", a, "link", "set", "va", "up"])
            && self.ip(&["-n", b, "link", "set", "vb", "up"])
    }

    fn ip(&self, args: &[&str]) -> bool {
        Command::new("ip")
            .args(args)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// UDP datagrams from `b` to `a` every 10 ms until the guard is dropped.
    fn send_udp(&self) -> Sender {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let b = self.b.clone();
        let handle = std::thread::spawn(move || {
            in_netns(&b, move || {
                let Ok(sock) = UdpSocket::bind("0.0.0.0:0") else {
                    return;
                };
                while !flag.load(Ordering::Relaxed) {
                    // Fails while the interface is away: sent again next time.
                    let _ = sock.send_to(b"clarion", "10.231.0.1:9");
                    std::thread::sleep(Duration::from_millis(10));
                }
            });
        });
        Sender {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.ip(&["netns", "del", &self.a]);
        self.ip(&["netns", "del", &self.b]);
    }
}

/// Stops its sender when dropped.
struct Sender {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
