//! Issue 37: a live agent's own API (`clarion agent -i lo --api`) shows
//! the host's row as its manager counts it: `triggers` the network-wide
//! triggers the manager installed (not the host's own events, listed
//! apart), `satisfaction_reports` and `polls_answered` what the agent
//! sent (it showed 0 where the manager counted 251). UDP datagrams over
//! loopback fire a network-wide event of the manager and an event of the
//! agent's own; once quiet, the agent's row and the manager's row of the
//! same host must agree. Root only (a packet socket); needs nats-server.
//! Skipped, saying why, otherwise.

mod bus;

use std::net::UdpSocket;
use std::process::Stdio;
use std::time::{Duration, Instant};

use bus::*;
use serde_json::Value;

const TOKEN: &str = "agent-hosts-token";

/// The one row of `/v1/hosts` named `vm`.
fn row(port: u16) -> Value {
    let (code, hosts) = api_get(port, "/v1/hosts", TOKEN);
    assert_eq!(code, 200, "{hosts}");
    hosts
        .as_array()
        .and_then(|a| a.iter().find(|h| h["name"] == "vm"))
        .cloned()
        .unwrap_or_else(|| panic!("no host vm in {hosts}"))
}

#[test]
fn a_live_agents_host_row_counts_what_its_manager_counts() {
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
    let udp = free_port();
    std::fs::write(d.join("hosts.txt"), "vm 127.0.0.0/8\n").expect("inventory");
    std::fs::write(
        d.join("net.clarion"),
        format!(
            "event net_probe\n  filter proto = udp and dst_port = {udp}\n  when count(packets) > 0\n  per dst_port\n  every 100ms\n  across hosts\n"
        ),
    )
    .expect("network events");
    std::fs::write(
        d.join("own.clarion"),
        format!(
            "event own_probe\n  filter proto = udp and dst_port = {udp}\n  when count(packets) > 0\n  every 100ms\n"
        ),
    )
    .expect("own events");
    let (_nats, nats_port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{nats_port}");
    let (_manager, manager_api) = api_manager(
        d,
        &nats,
        &[
            "--no-store",
            "--api-token",
            TOKEN,
            "--events",
            "net.clarion",
            "-o",
            "net.jsonl",
        ],
    );
    let (agent, agent_api) = listen_on_free_port("clarion agent -i lo --api", |port| {
        clarion()
            .args(["agent", "--nats", &nats, "--host", "vm", "-i", "lo"])
            .args([
                "--duration",
                "90s",
                "--stats-every",
                "0",
                "--events",
                "own.clarion",
            ])
            .args(["--api", &format!("127.0.0.1:{port}"), "--api-token", TOKEN])
            .args(["--format", "json", "-o", "reports.jsonl"])
            .current_dir(d)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("agent starts")
    });
    // The manager placed its event: wait until the agent holds its trigger.
    let t = Instant::now();
    while row(agent_api)["triggers"] != 1 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no trigger: {}",
            row(agent_api)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // One datagram every 20 ms for a second: both events fire ~10 windows.
    let probe = UdpSocket::bind("127.0.0.1:0").expect("a socket");
    for _ in 0..50 {
        probe.send_to(b"probe", ("127.0.0.1", udp)).expect("sent");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Quiet: the rows agree once the last windows closed (100 ms after
    // their end) and their satisfaction reports arrived: the same counts
    // twice, half a second apart.
    let t = Instant::now();
    let counts = |r: &Value| (r["satisfaction_reports"].clone(), r["polls_answered"].clone());
    let mut before = None;
    let (mine, theirs) = loop {
        std::thread::sleep(Duration::from_millis(500));
        let (mine, theirs) = (row(agent_api), row(manager_api));
        let now = counts(&mine);
        if now == counts(&theirs)
            && mine["satisfaction_reports"].as_u64() > Some(0)
            && before.as_ref() == Some(&now)
        {
            break (mine, theirs);
        }
        before = Some(now);
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the agent's row {mine} against the manager's {theirs}"
        );
    };
    // One network-wide trigger (the manager's), though the host runs two events.
    assert_eq!(mine["triggers"], 1, "{mine}");
    assert_eq!(theirs["triggers"], 1, "{theirs}");
    let (code, own) = api_get(agent_api, "/v1/events", TOKEN);
    assert_eq!(code, 200);
    let names: Vec<&str> = own
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(names, ["own_probe"]);
    let out = agent.terminate("clarion agent -i lo");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // Its summary says the same number sent.
    let sent = mine["satisfaction_reports"].as_u64().expect("a count");
    assert!(
        err.contains(&format!("{sent} satisfaction reports sent")),
        "{sent} sent: {err}"
    );
    eprintln!("agent row {mine}\nmanager row {theirs}");
}
