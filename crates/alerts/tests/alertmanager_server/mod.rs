//! A real Prometheus Alertmanager (Debian `prometheus-alertmanager`,
//! scripts/deps.sh) for tests, on a free loopback port with its own
//! configuration and storage; killed when dropped. Shared by this crate's
//! tests and the CLI's (`#[path]`).
#![allow(dead_code)] // each test crate uses part of it

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = "prometheus-alertmanager";

pub struct Am {
    child: Child,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Am {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The configuration of one route to a webhook `hook` (resolved alerts
/// sent too), grouped by the labels `group_by`, with its timers.
pub fn webhook_config(hook: &str, group_by: &[&str], group_wait: &str, group_interval: &str) -> String {
    let by: Vec<String> = group_by.iter().map(|l| format!("'{l}'")).collect();
    format!(
        "route:\n  receiver: hook\n  group_by: [{}]\n  group_wait: {group_wait}\n  group_interval: {group_interval}\n  repeat_interval: 1h\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: {hook}\n        send_resolved: true\n",
        by.join(", ")
    )
}

/// Starts Alertmanager with `config` (YAML) and waits until it is ready;
/// `None` (the caller skips) when it is not installed.
pub fn start(config: &str) -> Option<Am> {
    if Command::new(BIN).arg("--version").output().is_err() {
        eprintln!("skipped: {BIN} is not installed (apt-get install prometheus-alertmanager)");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("alertmanager.yml");
    std::fs::write(&file, config).unwrap();
    let port = free_port();
    let child = Command::new(BIN)
        .arg(format!("--config.file={}", file.display()))
        .arg(format!("--storage.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--cluster.listen-address=")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let am = Am {
        child,
        url: format!("http://127.0.0.1:{port}"),
        _dir: dir,
    };
    let ready = format!("{}/-/ready", am.url);
    let t0 = Instant::now();
    while ureq::get(&ready)
        .call()
        .map(|r| r.status() != 200)
        .unwrap_or(true)
    {
        assert!(t0.elapsed() < Duration::from_secs(20), "Alertmanager not ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(am)
}

/// Alertmanager's alerts (`GET /api/v2/alerts`).
pub fn alerts(am: &Am) -> Vec<serde_json::Value> {
    let body = ureq::get(&format!("{}/api/v2/alerts", am.url))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    serde_json::from_str(&body).unwrap()
}
