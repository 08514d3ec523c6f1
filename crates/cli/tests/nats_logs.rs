//! Structured logs (issue 35): with `--log-format json`, everything the
//! manager and an agent write to standard error is one JSON object a line
//! (`timestamp`, `level`, `target`, `message`, and the event's fields at
//! the top level), summaries included; a log shipper needs no other
//! parser. `CLARION_LOG` filters them as `RUST_LOG` would; one that does
//! not parse is a usage error naming it. Four agents replay their
//! captures through a real nats-server; web-4 ends early and says goodbye.

mod bus;

use std::path::Path;
use std::time::Duration;

use bus::*;
use serde_json::Value;

/// Every line of `text` as JSON; fails naming a line that is not.
fn json_lines(text: &str, who: &str) -> Vec<Value> {
    text.lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{who}: not a JSON line ({e}): {l:?}\n{text}"))
        })
        .collect()
}

/// The events whose message contains `what`.
fn with<'a>(lines: &'a [Value], what: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|v| v["message"].as_str().is_some_and(|m| m.contains(what)))
        .collect()
}

fn agent(d: &Path, url: &str, i: usize, linger: &str) -> Guard {
    let host = format!("web-{i}");
    let pcap = format!("hosts/{host}.pcap");
    agent_with(
        d,
        url,
        &host,
        &pcap,
        &["--speed", "4", "--linger", linger, "--log-format", "json"],
    )
}

#[test]
fn manager_and_agents_log_json_lines_with_fields() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    setup(d, 200);
    let (_server, port) = start_server(&server);
    let url = format!("nats://127.0.0.1:{port}");
    let flags: Vec<&str> = REPLAY.iter().copied().chain(["--log-format", "json"]).collect();
    let manager = manager(d, &url, &flags);
    let agents: Vec<Guard> = (1..=4)
        .map(|i| agent(d, &url, i, if i == 4 { "0s" } else { "30s" }))
        .collect();
    let m = wait(manager, "the manager", Duration::from_secs(120));
    let m_err = String::from_utf8_lossy(&m.stderr).to_string();
    assert!(m.status.success(), "{m_err}");
    let lines = json_lines(&m_err, "the manager");
    for v in &lines {
        assert!(
            v["timestamp"].is_string() && v["level"].is_string() && v["target"] == "manager",
            "{v}"
        );
    }
    let registered = with(&lines, "registered");
    let hosts: std::collections::BTreeSet<&str> =
        registered.iter().filter_map(|v| v["host"].as_str()).collect();
    assert_eq!(hosts, ["web-1", "web-2", "web-3", "web-4"].into(), "{m_err}");
    assert!(registered
        .iter()
        .all(|v| v["level"] == "INFO" && v["triggers"].is_u64()));
    let left = with(&lines, "host web-4 left");
    assert_eq!(left.len(), 1, "{m_err}");
    assert_eq!(
        (left[0]["host"].as_str(), left[0]["reason"].as_str()),
        (Some("web-4"), Some("it said goodbye"))
    );
    assert!(
        with(&lines, "registrations,")
            .iter()
            .any(|v| v["summary"] == true),
        "the summary, as events: {m_err}"
    );
    for a in agents {
        let o = wait(a.take(), "an agent", Duration::from_secs(60));
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{err}");
        let lines = json_lines(&err, "an agent");
        let reg = with(&lines, "registered with manager");
        assert_eq!(reg.len(), 1, "{err}");
        assert_eq!(reg[0]["target"], "agent");
        assert!(
            reg[0]["host"].as_str().is_some_and(|h| h.starts_with("web-")),
            "{err}"
        );
        assert!(with(&lines, "satisfaction reports sent")
            .iter()
            .all(|v| v["summary"] == true));
    }
}

#[test]
fn the_log_filter_selects_and_a_bad_one_is_named() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    setup(d, 50);
    let (_server, port) = start_server(&server);
    let url = format!("nats://127.0.0.1:{port}");
    // Warnings only: the start-up line is left out.
    let o = clarion()
        .env("CLARION_LOG", "manager=warn")
        .args([
            "manager",
            "--insecure",
            "--nats",
            &url,
            "--inventory",
            "hosts.txt",
        ])
        .args(["--no-store", "--no-api", "--duration", "1s", "--quiet"])
        .current_dir(d)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("waiting for agents"), "{err}");
    let o = clarion()
        .env("CLARION_LOG", "manager=loud")
        .args([
            "manager",
            "--insecure",
            "--nats",
            &url,
            "--inventory",
            "hosts.txt",
            "--no-store",
        ])
        .current_dir(d)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("CLARION_LOG=\"manager=loud\" is not a log filter"),
        "{err}"
    );
}

/// Issue 37's small fix: the start-up line read "manager manager started
/// on …" with the default name; the default is left out, another name is
/// given.
#[test]
fn the_start_up_line_names_the_manager_once() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("hosts.txt"), INVENTORY).expect("inventory");
    let (_server, port) = start_server(&server);
    let url = format!("nats://127.0.0.1:{port}");
    let start_line = |name: &[&str]| {
        let o = clarion()
            .args([
                "manager",
                "--insecure",
                "--nats",
                &url,
                "--inventory",
                "hosts.txt",
            ])
            .args(["--no-store", "--no-api", "--duration", "300ms"])
            .args(name)
            .current_dir(d)
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{err}");
        err.lines()
            .find(|l| l.contains(&format!("started on {url}")))
            .unwrap_or_else(|| panic!("no start-up line: {err}"))
            .to_string()
    };
    let plain = start_line(&[]);
    assert!(
        !plain.contains("manager manager") && !plain.contains('`'),
        "{plain}"
    );
    let named = start_line(&["--name", "m2"]);
    assert!(named.contains("`m2` started on"), "{named}");
}
