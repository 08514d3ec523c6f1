//! A real Prometheus scrapes a running `clarion run -i lo` (UDP traffic
//! sent so its event fires), a running `clarion manager` and two live
//! `clarion agent -i lo` (hosts `h1` and `h2` over a real nats-server);
//! then every expression of the Grafana dashboard (dashboards/clarion.json)
//! is asked of Prometheus's HTTP API and must return a series, and the
//! "events fired per second" panel's network line must equal the count of
//! reports the manager wrote over the same interval, within one scrape
//! (its host line counts both agents' trigger firings, about twice as
//! many: the double count the `scope` label keeps apart). Every page is
//! also checked by Prometheus's own exposition-format linter, `promtool
//! check metrics`. Alerts are on (a local webhook receiver for run and
//! agents, a UDP socket as the manager's syslog): their `clarion_alerts_*`
//! series must be there, and the run's delivered count must equal the
//! keys the receiver saw.
//!
//! Skipped, saying why, without Prometheus (Debian `prometheus`, see
//! scripts/deps.sh) or nats-server (the fleet panels read the manager),
//! or when not root (a packet socket on lo). Scrapes every second; the
//! test waits only as long as the series take to appear (a few seconds),
//! with a generous deadline for a busy machine, then 10 s for the
//! comparison.

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

/// The dashboard's panels, checked for what Grafana needs: unique ids,
/// panels that do not overlap, a query in each.
fn dashboard() -> (Vec<serde_json::Value>, Vec<String>) {
    let path = common::repo().join("dashboards/clarion.json");
    let text = std::fs::read_to_string(&path).expect("dashboards/clarion.json");
    let d: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let panels = d["panels"].as_array().cloned().expect("panels");
    let mut ids = std::collections::HashSet::new();
    let mut cells = std::collections::HashSet::new();
    for p in &panels {
        assert!(ids.insert(p["id"].as_u64().expect("a panel id")), "id twice: {p}");
        let at = |k: &str| p["gridPos"][k].as_u64().expect("gridPos");
        for x in at("x")..at("x") + at("w") {
            for y in at("y")..at("y") + at("h") {
                assert!(
                    x < 24 && cells.insert((x, y)),
                    "{} overlaps or leaves the grid",
                    p["title"]
                );
            }
        }
        assert!(
            p["targets"].as_array().is_some_and(|t| !t.is_empty()),
            "{} has no query",
            p["title"]
        );
    }
    let variables: Vec<String> = d["templating"]["list"]
        .as_array()
        .expect("variables")
        .iter()
        .map(|v| v["name"].as_str().expect("a variable's name").to_string())
        .collect();
    (panels, variables)
}

/// A panel's query with Grafana's variables given values a query can run
/// with: every template variable all (`.*`), `$__rate_interval` `rate`.
fn runnable(expr: &str, variables: &[String], rate: &str) -> String {
    let mut e = expr.replace("$__rate_interval", rate);
    for v in variables {
        e = e.replace(&format!("${v}"), ".*");
    }
    assert!(
        !e.contains('$'),
        "a variable the dashboard does not define: {expr}"
    );
    e
}

/// Every PromQL expression of the dashboard's panels, runnable.
fn dashboard_exprs() -> Vec<String> {
    let (panels, variables) = dashboard();
    panels
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| runnable(t["expr"].as_str().expect("a target's expr"), &variables, "5s"))
        .collect()
}

/// The fleet: nats-server, a manager deciding `net_events` over hosts `h1`
/// and `h2`, and a live agent on lo for each, all with --metrics; `h1`
/// also runs `own_events`, its host's own. The processes, the manager's
/// metrics address and the agents'.
struct Fleet {
    _processes: Vec<Running>,
    manager: String,
    agents: Vec<String>,
}

fn fleet(nats: &Path, dir: &Path, own_events: &Path, net_events: &Path, hook: &str) -> Fleet {
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
    std::fs::write(&inventory, "h1 10.1.0.0/16\nh2 10.2.0.0/16\n").expect("inventory written");
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
        .arg("--events")
        .arg(net_events)
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
    let manager = common::metrics::address(m.0.stderr.take().expect("stderr piped"));
    let mut processes = vec![m, server];
    let mut agents = Vec::new();
    for host in ["h1", "h2"] {
        let mut c = common::clarion_process();
        c.args(["agent", "-i", "lo", "--host", host])
            .args(["--metrics", "127.0.0.1:0", "--duration", "120s"])
            .arg("--nats")
            .arg(format!("nats://127.0.0.1:{port}"))
            .arg("-o")
            .arg(dir.join(format!("{host}.jsonl")))
            .args(["--webhook", hook]);
        if host == "h1" {
            c.arg("--events").arg(own_events);
        }
        let agent = c
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("clarion agent starts");
        let mut agent = Running(agent);
        agents.push(common::metrics::address(
            agent.0.stderr.take().expect("stderr piped"),
        ));
        // Agents first: dropped (killed) before the manager and the server.
        processes.insert(0, agent);
    }
    Fleet {
        _processes: processes,
        manager,
        agents,
    }
}

/// Complete lines of the manager's reports of `event` so far.
fn manager_reports(file: &Path, event: &str) -> usize {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    // The last segment, unterminated, may be a line being written.
    let mut lines: Vec<&str> = text.split('\n').collect();
    lines.pop();
    lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["event"] == event)
        .count()
}

/// Seconds since the Unix epoch, as Prometheus's `time` parameter takes them.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The series of `expr` evaluated at `time`.
fn query_at(prom: &str, expr: &str, time: f64) -> Vec<serde_json::Value> {
    let path = format!("/api/v1/query?query={}&time={time:.3}", encode(expr));
    let Some((200, body)) = get(prom, &path) else {
        return Vec::new();
    };
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(v["status"], "success", "{expr}: {body}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// The "events fired per second" panel's value for `event` and `scope`
/// at `time`, its rate taken over `range_ms`.
fn fired_panel(prom: &str, event: &str, scope: &str, time: f64, range_ms: u64) -> Option<f64> {
    let (panels, variables) = dashboard();
    let panel = panels
        .iter()
        .find(|p| {
            p["title"]
                .as_str()
                .is_some_and(|t| t.starts_with("Events fired per second"))
        })
        .expect("the events fired panel");
    let expr = panel["targets"][0]["expr"].as_str().expect("its query");
    let expr = runnable(expr, &variables, &format!("{range_ms}ms"));
    query_at(prom, &expr, time)
        .iter()
        .find(|s| s["metric"]["event"] == event && s["metric"]["scope"] == scope)
        .and_then(|s| s["value"][1].as_str()?.parse().ok())
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
    let Some(nats) = common::tool("nats-server") else {
        eprintln!("skipped: nats-server is not installed (apt-get install nats-server): the fleet panels read a manager");
        return;
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: opening a packet socket on lo needs root");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    // The events fire on our UDP traffic only (lo carries other tests' too).
    let udp_port = free_port();
    let events = dir.path().join("prom.clarion");
    std::fs::write(
        &events,
        format!(
            "event prom_udp\n  filter proto = udp and dst_port = {udp_port}\n  when sum(size) > 100\n  per dst_port\n  every 100ms\n"
        ),
    )
    .expect("events written");
    // Network-wide: placed on both hosts (no address in its filter), each
    // with half the threshold; both see every packet on lo, so both fire
    // in every window and the manager decides each window once.
    let net_events = dir.path().join("net.clarion");
    std::fs::write(
        &net_events,
        format!(
            "event prom_net\n  filter proto = udp and dst_port = {udp_port}\n  when sum(size) > 100\n  per dst_port\n  every 100ms\n  across hosts\n"
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
    let fleet = fleet(&nats, dir.path(), &events, &net_events, &rx.url("/agent"));
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

    let prom_port = free_port();
    let prom_addr = format!("127.0.0.1:{prom_port}");
    let agents: Vec<String> = fleet.agents.iter().map(|a| format!("'{a}'")).collect();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: clarion\n    static_configs:\n      - targets: ['{run_addr}']\n  - job_name: manager\n    static_configs:\n      - targets: ['{}']\n  - job_name: agent\n    static_configs:\n      - targets: [{}]\n",
        fleet.manager,
        agents.join(", ")
    );
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
    // series the fleet must have; each polled until it returns a series.
    let mut wanted: Vec<String> = dashboard_exprs();
    for e in [
        "up{job=\"clarion\"} == 1".to_string(),
        "clarion_event_fired_total{job=\"clarion\",event=\"prom_udp\",scope=\"host\"} > 0".into(),
        "clarion_alerts_delivered_total{job=\"clarion\",target=\"webhook\"} > 0".into(),
        "clarion_alerts_queue_depth{job=\"clarion\",target=\"webhook\"}".into(),
        // Prometheus's own scrapes are connections the metrics server accepted.
        "clarion_http_connections_total{job=\"clarion\",server=\"metrics\"} > 0".into(),
        "up{job=\"manager\"} == 1".into(),
        "clarion_build_info{job=\"manager\"}".into(),
        "process_start_time_seconds{job=\"manager\"}".into(),
        "clarion_event_fired_total{job=\"manager\",event=\"prom_net\",scope=\"network\"} > 0".into(),
        format!("clarion_event_last_value{{job=\"manager\",event=\"prom_net\",scope=\"network\",group=\"dst_port={udp_port}\",aggregate=\"sum(size)\"}} > 100"),
        "clarion_host_up{job=\"manager\",host=\"h1\"} == 1".into(),
        "clarion_host_up{job=\"manager\",host=\"h2\"} == 1".into(),
        "clarion_host_packets_per_second{host=\"h2\"} > 0".into(),
        "clarion_alerts_dead_lettered_total{job=\"manager\",target=\"syslog\"}".into(),
        "count(up{job=\"agent\"} == 1) == 2".into(),
        "count(clarion_packets_total{job=\"agent\"} > 0) == 2".into(),
        "count(clarion_event_fired_total{job=\"agent\",event=\"prom_net\",scope=\"host\"} > 0) == 2".into(),
        "clarion_event_fired_total{job=\"agent\",event=\"prom_udp\",scope=\"host\"} > 0".into(),
        "clarion_sweep_seconds_count{job=\"agent\"} > 0".into(),
        "clarion_alerts_accepted_total{job=\"agent\",target=\"webhook\"} > 0".into(),
    ] {
        wanted.push(e);
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
    if !missing.is_empty() {
        stop.store(true, Ordering::Relaxed);
    }
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

    // The panel against the manager's own reports over the same 10 s: the
    // network line is the decisions written; the host line both agents'
    // trigger firings, one per window each.
    let reports = dir.path().join("manager.jsonl");
    let (from, before) = (unix_now(), manager_reports(&reports, "prom_net"));
    std::thread::sleep(Duration::from_secs(10));
    let (to, after) = (unix_now(), manager_reports(&reports, "prom_net"));
    // Prometheus's scrape after `to`.
    std::thread::sleep(Duration::from_millis(2_500));
    let range_ms = ((to - from) * 1e3).round() as u64;
    let network = fired_panel(&prom_addr, "prom_net", "network", to, range_ms).expect("a network line");
    let host = fired_panel(&prom_addr, "prom_net", "host", to, range_ms).expect("a host line");
    stop.store(true, Ordering::Relaxed);
    let _ = sender.join();
    let written = (after - before) as f64;
    let seconds = to - from;
    // One scrape (1 s) of decisions either way, and one report.
    let slack = written / seconds + 1.0;
    eprintln!(
        "over {seconds:.2} s: {written} decisions written; panel: network {:.2}/s ({:.1}), host {:.2}/s",
        network,
        network * seconds,
        host
    );
    assert!(written > 10.0, "the event fired too little to compare: {written}");
    assert!(
        (network * seconds - written).abs() <= slack,
        "the panel's network line {network}/s over {seconds} s is not the {written} decisions written (± {slack})"
    );
    assert!(
        (1.5..=2.5).contains(&(host / network)),
        "two hosts fire the trigger of each decision: host {host}/s, network {network}/s"
    );

    let (status, page) = get(&run_addr, "/metrics").expect("clarion run's page");
    assert_eq!(status, 200);
    common::metrics::promtool_accepts(&page, "clarion run");
    run_delivered_what_the_receiver_saw(&run_addr, &rx);
    let (status, page) = get(&fleet.manager, "/metrics").expect("the manager's page");
    assert_eq!(status, 200);
    common::metrics::promtool_accepts(&page, "clarion manager");
    for agent in &fleet.agents {
        let (status, page) = get(agent, "/metrics").expect("an agent's page");
        assert_eq!(status, 200);
        common::metrics::promtool_accepts(&page, "clarion agent");
    }
}
