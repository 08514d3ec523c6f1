//! Host health end to end (issue 23): agents replay captures through a real
//! `nats-server`, send their health with every heartbeat, and the
//! manager's `GET /v1/hosts` (read with `clarion events hosts --json`, and
//! its table) shows it: every packet of the capture counted (counted here
//! with a pcap reader of the test's own, independent of Clarion's),
//! nothing lost in a paced replay (completeness 1, no drops), a rate
//! consistent with the total, and no health for a host never heard from.
//! Real captures (../shared/captures) and generated traffic; and, as
//! root, a live agent on loopback whose health counts the datagrams sent
//! and measures its sweeps.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

mod bus;
mod common;
use bus::{api_manager, clarion, free_port, require_server, setup, start_server, Guard};

/// Frames in a classic pcap file, read here without Clarion's reader:
/// a 24-byte header, then per frame a 16-byte header whose third word is
/// the captured length (the magic says the byte order).
fn pcap_frames(path: &Path) -> u64 {
    let data = std::fs::read(path).expect("capture");
    let le = match data[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => panic!("{} is not a classic pcap file", path.display()),
    };
    let word = |at: usize| {
        let b: [u8; 4] = data[at..at + 4].try_into().expect("4 bytes");
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    let (mut at, mut n) = (24, 0);
    while at + 16 <= data.len() {
        at += 16 + word(at + 8) as usize;
        n += 1;
    }
    assert_eq!(at, data.len(), "{}: whole frames only", path.display());
    n
}

/// `clarion events hosts --json` against the manager's API: host name → its JSON.
fn hosts(port: u16, token: &str) -> BTreeMap<String, Value> {
    let out = clarion()
        .args([
            "events",
            "--api",
            &format!("http://127.0.0.1:{port}"),
            "--token",
            token,
        ])
        .args(["hosts", "--json"])
        .output()
        .expect("clarion events hosts");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).expect("a JSON array");
    list.into_iter()
        .map(|h| (h["name"].as_str().expect("a name").to_string(), h))
        .collect()
}

/// Polls the manager until every host of `want` shows health counting
/// that many packets (or panics after two minutes), checking each health
/// seen on the way; returns the last list and the highest rate seen per host.
fn until_counted(
    port: u16,
    token: &str,
    want: &BTreeMap<String, u64>,
) -> (BTreeMap<String, Value>, BTreeMap<String, f64>) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut top: BTreeMap<String, f64> = BTreeMap::new();
    loop {
        let list = hosts(port, token);
        let mut done = true;
        for (name, packets) in want {
            let h = &list[name]["health"];
            if h.is_null() {
                done = false;
                continue;
            }
            consistent(name, h);
            let pps = h["packets_per_second"].as_f64().expect("a rate");
            let best = top.entry(name.clone()).or_default();
            *best = best.max(pps);
            done &= h["packets_total"].as_u64() == Some(*packets);
        }
        if done {
            return (list, top);
        }
        assert!(
            Instant::now() < deadline,
            "the hosts' health never counted {want:?}: {list:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What must hold of any health: the rate counts no more packets than the
/// total over its window; the causes add up; completeness in [0, 1].
fn consistent(name: &str, h: &Value) {
    let f = |k: &str| h[k].as_f64().unwrap_or_else(|| panic!("{name}: {k} in {h}"));
    let u = |k: &str| h[k].as_u64().unwrap_or_else(|| panic!("{name}: {k} in {h}"));
    assert!(
        f("packets_per_second") * f("rate_window_s") <= u("packets_total") as f64 + 1e-6,
        "{name}: {h}"
    );
    assert!(
        f("rate_window_s") <= 5.5 && f("uptime_s") >= f("rate_window_s"),
        "{name}: {h}"
    );
    assert_eq!(
        u("drops_total"),
        u("drops_kernel_total") + u("malformed_total") + u("untracked_total"),
        "{name}: {h}"
    );
    assert!((0.0..=1.0).contains(&f("completeness")), "{name}: {h}");
    assert!(u("late_sweeps_total") <= u("sweeps_total"), "{name}: {h}");
}

/// A paced replay loses nothing: completeness 1, no drops of any cause.
fn lossless(name: &str, h: &Value) {
    assert_eq!(h["completeness"].as_f64(), Some(1.0), "{name}: {h}");
    assert_eq!(h["drops_total"].as_u64(), Some(0), "{name}: {h}");
    // A replay sweeps between packets: no sweep time of its own.
    assert!(h.get("sweep_seconds_last").is_none(), "{name}: {h}");
}

/// The value of one sample (`name{host="HOST"}`) of a page, if present.
fn sample(page: &str, name: &str, host: &str) -> Option<f64> {
    common::metrics::sample(page, &format!("{name}{{host=\"{host}\"}}"))
}

/// Until the page's per-host series say what the API says (they are
/// written every second): each host of `want` with its packets counted.
fn until_scraped(port: u16, want: &BTreeMap<String, u64>) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = common::metrics::page(&format!("127.0.0.1:{port}"));
        if want
            .iter()
            .all(|(h, n)| sample(&page, "clarion_host_packets_total", h) == Some(*n as f64))
        {
            return page;
        }
        assert!(
            Instant::now() < deadline,
            "the metrics never counted {want:?}:\n{page}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn manager(d: &Path, nats: &str, extra: &[&str]) -> (Guard, u16, String) {
    let token = format!("health-test-{}", std::process::id());
    let mut flags = vec!["--no-store", "--api-token", &token, "-o", "net.jsonl"];
    flags.extend_from_slice(extra);
    let (m, port) = api_manager(d, nats, &flags);
    (m, port, token)
}

fn agent(d: &Path, nats: &str, host: &str, pcap: &Path, speed: &str) -> Guard {
    let child = clarion()
        .args(["agent", "--nats", nats, "--host", host, "--pcap"])
        .arg(pcap)
        .args(["--speed", speed, "--linger", "120s", "-q"])
        .current_dir(d)
        .stderr(Stdio::null())
        .spawn()
        .expect("agent starts");
    Guard::new(child)
}

#[test]
fn real_captures_replayed_show_every_packet_in_the_managers_host_health() {
    let captures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures");
    if !captures.is_dir() {
        eprintln!("skipped: {} is missing (the shared captures)", captures.display());
        return;
    }
    let Some(server) = require_server() else {
        return;
    };
    // An HTTP exchange (30 s) and anonymised traffic with 55 frames that
    // are not IP (26 s), each at 10 times its pace.
    for capture in ["dpkt_http.pcap", "libtrace_anon-v4.pcap"] {
        let path = captures.join(capture);
        let frames = pcap_frames(&path);
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        std::fs::write(d.join("hosts.txt"), "lan 0.0.0.0/0 ::/0\n").expect("inventory");
        let (_nats, nats_port) = start_server(&server);
        let nats = format!("nats://127.0.0.1:{nats_port}");
        let (_m, port, token) = manager(d, &nats, &[]);
        let before = hosts(port, &token);
        assert!(
            before["lan"].get("health").is_none(),
            "{capture}: no health before the agent: {before:?}"
        );
        let _agent = agent(d, &nats, "lan", &path, "10");
        let want = BTreeMap::from([("lan".to_string(), frames)]);
        let (list, top) = until_counted(port, &token, &want);
        let h = &list["lan"]["health"];
        lossless(capture, h);
        assert!(
            top["lan"] > 0.0,
            "{capture}: a rate was seen while it replayed: {h}"
        );
        eprintln!("{capture}: {frames} frames, health {h}");

        // The table shows the same, with completeness as a percentage.
        let table = clarion()
            .args([
                "events",
                "--api",
                &format!("http://127.0.0.1:{port}"),
                "--token",
                &token,
                "hosts",
            ])
            .output()
            .expect("clarion events hosts");
        let text = String::from_utf8_lossy(&table.stdout);
        let row = text
            .lines()
            .find(|l| l.starts_with("lan "))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(row.contains(" 100% "), "{row}");
        assert!(
            text.lines()
                .next()
                .is_some_and(|l| l.contains("pkt/s") && l.contains("complete")),
            "{text}"
        );
    }
}

#[test]
fn generated_traffic_is_counted_host_by_host_and_a_silent_host_has_no_health() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // 2 s of traffic, split into one capture per host of the inventory.
    setup(d, 200);
    let (_nats, nats_port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{nats_port}");
    let metrics = free_port();
    let metrics_addr = format!("127.0.0.1:{metrics}");
    let (_m, port, token) = manager(
        d,
        &nats,
        &["--events", "events.clarion", "--metrics", &metrics_addr],
    );
    // web-4's agent never starts.
    let want: BTreeMap<String, u64> = (1..=3)
        .map(|i| {
            (
                format!("web-{i}"),
                pcap_frames(&d.join(format!("hosts/web-{i}.pcap"))),
            )
        })
        .collect();
    assert!(want.values().all(|&n| n > 0), "{want:?}");
    let _agents: Vec<Guard> = want
        .keys()
        .map(|h| agent(d, &nats, h, &d.join(format!("hosts/{h}.pcap")), "1"))
        .collect();
    let (list, top) = until_counted(port, &token, &want);
    for name in want.keys() {
        lossless(name, &list[name]["health"]);
        assert!(top[name] > 0.0, "{name}: a rate was seen while it replayed");
    }
    let silent = &list["web-4"];
    assert_eq!(silent["state"], "unknown", "{silent}");
    assert!(
        silent.get("health").is_none(),
        "a host never heard from has no health: {silent}"
    );

    // The manager's /metrics: a series per inventory host, health where heard.
    let page = until_scraped(metrics, &want);
    for name in want.keys() {
        assert_eq!(
            sample(&page, "clarion_host_up", name),
            Some(1.0),
            "{name}\n{page}"
        );
        assert_eq!(
            sample(&page, "clarion_host_completeness", name),
            Some(1.0),
            "{name}\n{page}"
        );
        assert_eq!(
            sample(&page, "clarion_host_drops_total", name),
            Some(0.0),
            "{name}\n{page}"
        );
    }
    assert_eq!(sample(&page, "clarion_host_up", "web-4"), Some(0.0), "{page}");
    assert_eq!(
        sample(&page, "clarion_host_packets_total", "web-4"),
        None,
        "no health, no series: {page}"
    );
    common::metrics::promtool_accepts(&page, "clarion manager");
}

/// A live agent (`clarion agent -i lo`, filtered to one UDP port) counts
/// exactly the datagrams the test sends, loses none at this pace, and
/// measures its sweeps (a live host has sweep times; a replay has none).
#[test]
fn a_live_agent_counts_the_datagrams_sent_and_times_its_sweeps() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: opening a packet socket needs root");
        return;
    }
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("hosts.txt"), "vm 127.0.0.0/8\n").expect("inventory");
    let (_nats, nats_port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{nats_port}");
    let (_m, port, token) = manager(d, &nats, &[]);
    let udp = free_port();
    let agent = clarion()
        .args(["agent", "--nats", &nats, "--host", "vm", "-i", "lo", "-q"])
        .args([
            "--filter",
            &format!("udp and dst port {udp}"),
            "--duration",
            "120s",
        ])
        .current_dir(d)
        .stderr(Stdio::null())
        .spawn()
        .expect("agent starts");
    let _agent = Guard::new(agent);
    // Capturing once its health is heard (it registers, then captures).
    let deadline = Instant::now() + Duration::from_secs(60);
    while hosts(port, &token)["vm"].get("health").is_none() {
        assert!(Instant::now() < deadline, "the live agent never sent its health");
        std::thread::sleep(Duration::from_millis(100));
    }
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("a socket");
    let sent = 300u64;
    for i in 0..sent {
        sock.send_to(&vec![7u8; 20 + (i % 200) as usize], ("127.0.0.1", udp))
            .expect("sent");
        std::thread::sleep(Duration::from_millis(3));
    }
    let want = BTreeMap::from([("vm".to_string(), sent)]);
    let (list, top) = until_counted(port, &token, &want);
    let h = &list["vm"]["health"];
    lossless_live(h);
    assert!(top["vm"] > 0.0, "a rate was seen: {h}");
    eprintln!("live agent: {sent} datagrams sent, health {h}");
    // Nothing more comes: the count stays (no datagram counted twice).
    std::thread::sleep(Duration::from_millis(1500));
    let again = &hosts(port, &token)["vm"]["health"];
    assert_eq!(again["packets_total"].as_u64(), Some(sent), "{again}");
}

/// A live host at a gentle pace: nothing lost, and its sweeps timed.
fn lossless_live(h: &Value) {
    assert_eq!(h["completeness"].as_f64(), Some(1.0), "{h}");
    assert_eq!(h["drops_total"].as_u64(), Some(0), "{h}");
    assert!(h["sweeps_total"].as_u64() > Some(0), "{h}");
    let last = h["sweep_seconds_last"]
        .as_f64()
        .expect("a live host times its sweeps");
    let max = h["sweep_seconds_max"].as_f64().expect("and keeps the longest");
    assert!(last <= max && max < 10.0, "{h}");
}
