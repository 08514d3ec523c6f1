//! A real Prometheus scrapes a running `clarion run -i lo` (UDP traffic
//! sent so its event fires) and, when nats-server is installed, a running
//! `clarion manager` and a live `clarion agent -i lo`; then every expression of the Grafana dashboard
//! (dashboards/clarion.json) is asked of Prometheus's HTTP API and must
//! return a series. Both pages are also checked by Prometheus's own
//! exposition-format linter, `promtool check metrics`. Alerts are on
//! (a local webhook receiver for run and agent, a UDP socket as the
//! manager's syslog): their `clarion_alerts_*` series must be there, and
//! the run's delivered count must equal the keys the receiver saw.
//!
//! Skipped, saying why, without Prometheus (Debian `prometheus`, see
//! scripts/deps.sh) or when not root (a packet socket on lo). Scrapes
//! every second; the test waits only as long as the series take to appear
//! (a few seconds), with a generous deadline for a busy machine.

mod common;
#[path = "../../alerts/tests/receiver/mod.rs"]
mod receiver;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A child process killed (and reaped) when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET path` over HTTP/1.0: (status, body).
fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let sock = addr.parse().ok()?;
    let mut c = TcpStream::connect_timeout(&sock, Duration::from_secs(2)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(c, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    c.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// A query string's value, percent-encoded (all but unreserved characters).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The series Prometheus returns for `expr` now (its `data.result`).
fn query(prom: &str, expr: &str) -> Vec<serde_json::Value> {
    let Some((200, body)) = get(prom, &format!("/api/v1/query?query={}", encode(expr))) else {
        return Vec::new();
    };
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(v["status"], "success", "{expr}: {body}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// Every PromQL expression of the dashboard's panels, with Grafana's
/// variables given values a query can run with.
fn dashboard_exprs() -> Vec<String> {
    let path = common::repo().join("dashboards/clarion.json");
    let text = std::fs::read_to_string(&path).expect("dashboards/clarion.json");
    let d: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let panels = d["panels"].as_array().expect("panels");
    let exprs: Vec<String> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().expect("a target's expr").to_string())
        .map(|e| e.replace("$__rate_interval", "5s").replace("$instance", ".*"))
        .collect();
    assert!(exprs.len() >= panels.len(), "a panel without a query");
    exprs
}

/// Starts nats-server, a manager and a live agent on lo (with `events`),
/// both with --metrics; the processes and the two metrics addresses.
fn manager_and_agent(dir: &Path, events: &Path, hook: &str) -> Option<(Vec<Running>, String, String)> {
    let Some(nats) = common::tool("nats-server") else {
        eprintln!("nats-server not installed: the manager's and agent's metrics are not scraped");
        return None;
    };
    let port = free_port();
    let server = Running(
        Command::new(nats)
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts"),
    );
    let until = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < until, "nats-server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let inventory = dir.join("hosts.txt");
    std::fs::write(&inventory, "h1 10.0.0.0/8\n").expect("inventory written");
    let m = common::clarion_process()
        .args([
            "manager",
            "--insecure",
            "--no-store",
            "--no-api",
            "--metrics",
            "127.0.0.1:0",
        ])
        .arg("--nats")
        .arg(format!("nats://127.0.0.1:{port}"))
        .arg("--inventory")
        .arg(&inventory)
        .arg("-o")
        .arg(dir.join("manager.jsonl"))
        .args(["--duration", "120s"])
        // Nothing listens there: UDP sends count as delivered all the same.
        .args(["--syslog", &format!("udp://127.0.0.1:{}", free_port())])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("clarion manager starts");
    let mut m = Running(m);
    let addr = common::metrics::address(m.0.stderr.take().expect("stderr piped"));
    let agent = common::clarion_process()
        .args(["agent", "-i", "lo", "--host", "h1"])
        .args(["--metrics", "127.0.0.1:0", "--duration", "120s"])
        .arg("--nats")
        .arg(format!("nats://127.0.0.1:{port}"))
        .arg("--events")
        .arg(events)
        .arg("-o")
        .arg(dir.join("agent.jsonl"))
        .args(["--webhook", hook])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("clarion agent starts");
    let mut agent = Running(agent);
    let agent_addr = common::metrics::address(agent.0.stderr.take().expect("stderr piped"));
    Some((vec![agent, m, server], addr, agent_addr))
}

/// A sample's value on a page: `series value`.
fn sample(page: &str, series: &str) -> Option<u64> {
    common::metrics::sample(page, series).map(|v| v as u64)
}

/// Once the traffic has stopped and the run's last reports are out (within
/// a deadline), its page counts as delivered exactly the keys that reached
/// `/run`, every accepted report delivered and none pending.
fn run_delivered_what_the_receiver_saw(addr: &str, rx: &receiver::Receiver) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let keys: std::collections::HashSet<String> = rx
            .requests()
            .iter()
            .filter(|q| q.path == "/run")
            .filter_map(|q| q.header("idempotency-key").map(str::to_string))
            .collect();
        let (_, page) = get(addr, "/metrics").expect("clarion run's page");
        let value = |name: &str| sample(&page, &format!("{name}{{target=\"webhook\"}}"));
        let got = (
            value("clarion_alerts_accepted_total"),
            value("clarion_alerts_delivered_total"),
            value("clarion_alerts_queue_depth"),
        );
        let n = keys.len() as u64;
        if n > 0 && got == (Some(n), Some(n), Some(0)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "(accepted, delivered, pending) {got:?}, receiver saw {n} keys:\n{page}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn prometheus_scrapes_every_series_the_dashboard_uses() {
    let Some(prometheus) = common::tool("prometheus") else {
        eprintln!("skipped: prometheus is not installed (apt-get install prometheus)");
        return;
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: opening a packet socket on lo needs root");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    // The event fires on our UDP traffic only (lo carries other tests' too).
    let udp_port = free_port();
    let events = dir.path().join("prom.clarion");
    std::fs::write(
        &events,
        format!(
            "event prom_udp\n  filter proto = udp and dst_port = {udp_port}\n  when sum(size) > 100\n  per dst_port\n  every 100ms\n"
        ),
    )
    .expect("events written");
    let rx = receiver::Receiver::start(Box::new(|_, _| 200));
    let run = common::clarion_process()
        .args([
            "run",
            "-i",
            "lo",
            "--flow-capacity",
            "4096",
            "--metrics",
            "127.0.0.1:0",
        ])
        .arg("--events")
        .arg(&events)
        .args(["--format", "json", "--duration", "120s", "-o"])
        .arg(dir.path().join("reports.jsonl"))
        .args(["--webhook", &rx.url("/run")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("clarion run starts");
    let mut run = Running(run);
    let run_addr = common::metrics::address(run.0.stderr.take().expect("stderr piped"));
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let s = UdpSocket::bind("127.0.0.1:0").expect("udp socket");
            while !stop.load(Ordering::Relaxed) {
                let _ = s.send_to(&[0u8; 200], ("127.0.0.1", udp_port));
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let manager = manager_and_agent(dir.path(), &events, &rx.url("/agent"));

    let prom_port = free_port();
    let prom_addr = format!("127.0.0.1:{prom_port}");
    let mut config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: clarion\n    static_configs:\n      - targets: ['{run_addr}']\n"
    );
    if let Some((_, addr, agent)) = &manager {
        config.push_str(&format!(
            "  - job_name: manager\n    static_configs:\n      - targets: ['{addr}']\n  - job_name: agent\n    static_configs:\n      - targets: ['{agent}']\n"
        ));
    }
    let config_file = dir.path().join("prometheus.yml");
    std::fs::write(&config_file, config).expect("config written");
    let _prom = Running(
        Command::new(prometheus)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={prom_addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts"),
    );

    // Every dashboard expression, then each job's scrape health and the
    // manager's own series; each polled until it returns a series.
    let mut wanted: Vec<String> = dashboard_exprs();
    wanted.push("up{job=\"clarion\"} == 1".into());
    wanted.push("clarion_event_fired_total{event=\"prom_udp\"} > 0".into());
    wanted.push("clarion_alerts_delivered_total{job=\"clarion\",target=\"webhook\"} > 0".into());
    wanted.push("clarion_alerts_queue_depth{job=\"clarion\",target=\"webhook\"}".into());
    // Prometheus's own scrapes are connections the metrics server accepted.
    wanted.push("clarion_http_connections_total{job=\"clarion\",server=\"metrics\"} > 0".into());
    if manager.is_some() {
        for e in [
            "up{job=\"manager\"} == 1",
            "clarion_build_info{job=\"manager\"}",
            "clarion_reports_total{job=\"manager\"}",
            "process_start_time_seconds{job=\"manager\"}",
            "up{job=\"agent\"} == 1",
            "clarion_packets_total{job=\"agent\"} > 0",
            "clarion_event_fired_total{job=\"agent\",event=\"prom_udp\"} > 0",
            "clarion_sweep_seconds_count{job=\"agent\"} > 0",
            "clarion_alerts_accepted_total{job=\"agent\",target=\"webhook\"} > 0",
            "clarion_alerts_dead_lettered_total{job=\"manager\",target=\"syslog\"}",
        ] {
            wanted.push(e.into());
        }
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    let mut missing = wanted.clone();
    while !missing.is_empty() && Instant::now() < deadline {
        missing.retain(|e| query(&prom_addr, e).is_empty());
        if !missing.is_empty() {
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = sender.join();
    assert!(
        missing.is_empty(),
        "no series after {:?} for:\n{}",
        started.elapsed(),
        missing.join("\n")
    );
    eprintln!(
        "{} expressions returned series {:?} after Prometheus started",
        wanted.len(),
        started.elapsed()
    );

    let (status, page) = get(&run_addr, "/metrics").expect("clarion run's page");
    assert_eq!(status, 200);
    common::metrics::promtool_accepts(&page, "clarion run");
    run_delivered_what_the_receiver_saw(&run_addr, &rx);
    if let Some((_, addr, agent)) = &manager {
        let (status, page) = get(addr, "/metrics").expect("the manager's page");
        assert_eq!(status, 200);
        common::metrics::promtool_accepts(&page, "clarion manager");
        let (status, page) = get(agent, "/metrics").expect("the agent's page");
        assert_eq!(status, 200);
        common::metrics::promtool_accepts(&page, "clarion agent");
    }
}
