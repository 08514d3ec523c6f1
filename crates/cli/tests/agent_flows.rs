//! Issue 37: the flows behind a firing through a live agent's own API
//! (`clarion agent -i lo --api --records`), the code `clarion run -i`
//! shares, end to end: three UDP flows of known sizes sent over loopback
//! to the port an event of the agent watches; once they ended (idle
//! timeout, packet time moved on by datagrams to another port),
//! `GET /v1/flows` over the windows the event fired in lists exactly
//! those three flows, each with the packets and bytes sent. The same
//! through the manager's API for a network-wide event, from an agent
//! without an API of its own (its manager asks it over NATS). Root only
//! (a packet socket); needs nats-server (the agent registers with a
//! manager). Skipped, saying why, otherwise.

mod bus;

use std::net::UdpSocket;
use std::process::Stdio;
use std::time::{Duration, Instant};

use bus::*;
use serde_json::Value;

const TOKEN: &str = "agent-flows-token";

fn get(port: u16, path: &str) -> (u16, Value) {
    api_get(port, path, TOKEN)
}

/// Three UDP flows of known sizes to `udp` on loopback, then datagrams
/// to another port for 3 s (packet time moves on past the 1 s idle
/// timeout: the three flows end); each flow's (source port, packets, IP
/// bytes), sorted.
fn send_three_flows(udp: u16) -> Vec<(u64, u64, u64)> {
    // Three flows: (datagrams, payload bytes), from three sockets.
    let sent = [(5u64, 100u64), (12, 40), (3, 900)];
    let sockets: Vec<UdpSocket> = sent
        .iter()
        .map(|_| UdpSocket::bind("127.0.0.1:0").expect("a socket"))
        .collect();
    for i in 0..12 {
        for ((n, size), s) in sent.iter().zip(&sockets) {
            if i < *n {
                s.send_to(&vec![7u8; *size as usize], ("127.0.0.1", udp))
                    .expect("sent");
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let tick = UdpSocket::bind("127.0.0.1:0").expect("a socket");
    let other = free_port();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(3) {
        let _ = tick.send_to(b"tick", ("127.0.0.1", other));
        std::thread::sleep(Duration::from_millis(50));
    }
    // IP bytes: 20 (IPv4) + 8 (UDP) + the payload, per datagram.
    let mut want: Vec<(u64, u64, u64)> = sent
        .iter()
        .zip(&sockets)
        .map(|((n, size), s)| {
            (
                u64::from(s.local_addr().expect("bound").port()),
                *n,
                n * (28 + size),
            )
        })
        .collect();
    want.sort();
    want
}

#[test]
fn a_live_agents_api_lists_the_flows_behind_its_firings() {
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
        d.join("own.clarion"),
        format!(
            "event probe\n  filter proto = udp and dst_port = {udp}\n  when count(packets) > 0\n  per dst_port\n  every 100ms\n"
        ),
    )
    .expect("events");
    let (_nats, nats_port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{nats_port}");
    let _manager = Guard::new(manager(d, &nats, &["--no-store", "--no-api"]));
    let (agent, api) = listen_on_free_port("clarion agent -i lo --api", |port| {
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
            .args(["--records", "flows.parquet", "--record-idle-timeout", "1s"])
            .args(["--api", &format!("127.0.0.1:{port}"), "--api-token", TOKEN])
            .args(["--format", "json", "-o", "reports.jsonl"])
            .current_dir(d)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("agent starts")
    });
    let want = send_three_flows(udp);
    let written = std::fs::read_to_string(d.join("reports.jsonl")).unwrap_or_default();
    let fired: Vec<Value> = written
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["event"] == "probe")
        .collect();
    assert!(!fired.is_empty(), "probe fired: {written}");
    let from = fired
        .iter()
        .filter_map(|r| r["window"]["start_ns"].as_u64())
        .min()
        .expect("a start");
    let to = fired
        .iter()
        .filter_map(|r| r["window"]["end_ns"].as_u64())
        .max()
        .expect("an end");
    let group = format!("%7B%22dst_port%22%3A{udp}%7D");
    let (code, answer) = get(
        api,
        &format!("/v1/flows?event=probe&group={group}&from={from}&to={to}&by=packets"),
    );
    let out = agent.terminate("clarion agent -i lo");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["complete"], true, "{answer}");
    let mut got: Vec<(u64, u64, u64)> = answer["talkers"]
        .as_array()
        .expect("talkers")
        .iter()
        .map(|t| {
            assert_eq!(
                (t["dst_port"].as_u64(), t["proto"].as_u64()),
                (Some(u64::from(udp)), Some(17)),
                "{t}"
            );
            let port = t["src_port"].as_u64().expect("a source port");
            (
                port,
                t["packets"].as_u64().unwrap_or(0),
                t["bytes"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    got.sort();
    assert_eq!(got, want, "the flows behind probe's firings: {answer}");
    // Ranked by packets, as asked.
    let ranks: Vec<u64> = answer["talkers"]
        .as_array()
        .expect("talkers")
        .iter()
        .filter_map(|t| t["packets"].as_u64())
        .collect();
    assert!(ranks.windows(2).all(|w| w[0] >= w[1]), "{ranks:?}");
    eprintln!("{} firings; the agent's flows: {got:?}", fired.len());
}

/// The same flows through the manager's API for a network-wide event,
/// from an agent that serves no API of its own (`clarion agent -i lo
/// --records`, no `--api`): the manager asks it over NATS
/// (`clarion.host.vm.flows`) and lists exactly the three flows, each
/// with the packets and bytes sent, the host named as answering.
#[test]
fn the_managers_api_lists_the_flows_an_agent_without_an_api_keeps() {
    const MANAGER_TOKEN: &str = "agent-flows-manager-token";
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
            "event probe\n  filter proto = udp and dst_port = {udp}\n  when count(packets) > 0\n  per dst_port\n  every 100ms\n  across hosts\n"
        ),
    )
    .expect("events");
    let (_nats, nats_port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{nats_port}");
    let flags = [
        "--events",
        "net.clarion",
        "--no-store",
        "--api-token",
        MANAGER_TOKEN,
        "-o",
        "net.jsonl",
    ];
    let (_manager, api) = api_manager(d, &nats, &flags);
    let agent = Guard::new(
        clarion()
            .args(["agent", "--nats", &nats, "--host", "vm", "-i", "lo"])
            .args(["--duration", "90s", "--stats-every", "0", "-q"])
            .args(["--records", "flows.parquet", "--record-idle-timeout", "1s"])
            .current_dir(d)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("agent starts"),
    );
    // Registered, its trigger installed, before the traffic.
    let t = Instant::now();
    while api_get(api, "/v1/hosts", MANAGER_TOKEN).1[0]["state"] != "up" {
        assert!(t.elapsed() < Duration::from_secs(30), "the agent registers");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let want = send_three_flows(udp);
    let written = std::fs::read_to_string(d.join("net.jsonl")).unwrap_or_default();
    let fired: Vec<Value> = written
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["event"] == "probe")
        .collect();
    assert!(!fired.is_empty(), "probe fired: {written}");
    let ns = |f: &str| -> Vec<u64> { fired.iter().filter_map(|r| r["window"][f].as_u64()).collect() };
    let from = ns("start_ns").into_iter().min().expect("a start");
    let to = ns("end_ns").into_iter().max().expect("an end");
    let group = format!("%7B%22dst_port%22%3A{udp}%7D");
    let path = format!("/v1/flows?event=probe&group={group}&from={from}&to={to}&by=packets");
    let (code, answer) = api_get(api, &path, MANAGER_TOKEN);
    let out = agent.terminate("clarion agent -i lo");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["missing_hosts"], serde_json::json!([]), "{answer}");
    assert_eq!(answer["hosts"][0]["host"], "vm", "{answer}");
    assert_eq!(
        (&answer["complete"], &answer["truncated"]),
        (&Value::Bool(true), &Value::Bool(false))
    );
    let mut got: Vec<(u64, u64, u64)> = answer["talkers"]
        .as_array()
        .expect("talkers")
        .iter()
        .map(|t| {
            let n = |f: &str| t[f].as_u64().unwrap_or(0);
            (n("src_port"), n("packets"), n("bytes"))
        })
        .collect();
    got.sort();
    assert_eq!(
        got, want,
        "the flows behind probe's firings, through the manager: {answer}"
    );
}
