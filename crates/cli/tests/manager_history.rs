//! Issue 37: the manager's report history. A manager with a store replays
//! four agents' captures to the end; started again on the same store (no
//! agent, nothing new to decide), its API's `/v1/reports/history` pages
//! back exactly the reports the first run wrote, newest first, each once,
//! whatever the page size and filters; started once more with a lower
//! `--report-history`, it keeps the newest only and counts the others
//! dropped. Needs nats-server (skipped, saying so, without it).

mod bus;

use std::time::Duration;

use bus::*;
use serde_json::Value;

const TOKEN: &str = "history-test-token";

fn get(port: u16, path: &str) -> (u16, Value) {
    api_get(port, path, TOKEN)
}

/// Every report of the history matching `query`, walking its pages of
/// `limit` from the newest, and the last page's answer.
fn walk(port: u16, query: &str, limit: usize) -> (Vec<Value>, Value) {
    let mut all = Vec::new();
    let mut before = String::new();
    loop {
        let (code, page) = get(port, &format!("/v1/reports/history?limit={limit}{query}{before}"));
        assert_eq!(code, 200, "{page}");
        let reports = page["reports"].as_array().expect("reports");
        assert!(
            reports.len() <= limit,
            "{} reports in a page of {limit}",
            reports.len()
        );
        all.extend(reports.iter().map(|r| r["report"].clone()));
        match page["older"].as_u64() {
            Some(c) => before = format!("&before={c}"),
            None => return (all, page),
        }
    }
}

/// The manager's reports as written, newest first.
fn written_newest_first(d: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(d.join("net.jsonl")).expect("reports");
    let mut v: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON report"))
        .collect();
    v.reverse();
    v
}

#[test]
fn the_history_pages_back_what_the_manager_wrote_across_a_restart() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let frames = setup(d, 100);
    let (_server, port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{port}");
    let first = manager(
        d,
        &nats,
        &[
            "--events",
            "events.clarion",
            "--store",
            "m.sqlite",
            "--no-api",
            "--until-finished",
            "-o",
            "net.jsonl",
        ],
    );
    let agents: Vec<Guard> = (1..=4)
        .map(|i| agent_with(d, &nats, &format!("web-{i}"), &format!("hosts/web-{i}.pcap"), &[]))
        .collect();
    let out = wait(first, "the manager", Duration::from_secs(120));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_agents(agents, Duration::from_secs(60));
    assert_reports_equal(d, &reference(&frames), "the first run");
    let written = written_newest_first(d);
    assert!(written.len() > 20, "{} reports", written.len());

    // Started again on its store: nothing new is decided, the history is the first run's.
    let flags = ["--store", "m.sqlite", "--api-token", TOKEN];
    let (again, api) = api_manager(d, &nats, &flags);
    for limit in [1000, 7, 1] {
        let (history, last) = walk(api, "", limit);
        assert_eq!(
            history, written,
            "pages of {limit}: the reports as written, newest first"
        );
        assert_eq!(
            (last["kept"].as_u64(), last["dropped"].as_u64()),
            (Some(written.len() as u64), Some(0))
        );
    }
    // The answer is what docs/api/openapi.yaml's HistoryPage says, field for field.
    let (_, page) = get(api, "/v1/reports/history?limit=1");
    let mut fields: Vec<&str> = page
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort();
    let yaml = include_str!("../../../docs/api/openapi.yaml");
    let at = yaml
        .find("    HistoryPage:")
        .expect("HistoryPage in the OpenAPI description");
    let required = yaml[at..]
        .lines()
        .find_map(|l| l.trim().strip_prefix("required: [")?.strip_suffix(']'))
        .expect("its required fields");
    let mut documented: Vec<&str> = required.split(", ").collect();
    documented.sort();
    assert_eq!(fields, documented, "{page}");
    // Filters: one event, windows starting in [from, to).
    let starts: Vec<u64> = written
        .iter()
        .filter_map(|r| r["window"]["start_ns"].as_u64())
        .collect();
    let (lo, hi) = (
        starts.iter().min().copied().unwrap_or(0),
        starts.iter().max().copied().unwrap_or(0),
    );
    let (from, to) = (lo + (hi - lo) / 4, lo + (hi - lo) / 2);
    let event = written[0]["event"].as_str().expect("event").to_string();
    let (history, _) = walk(api, &format!("&event={event}&from={from}&to={to}"), 5);
    let want: Vec<Value> = written
        .iter()
        .filter(|r| r["event"] == event.as_str())
        .filter(|r| {
            r["window"]["start_ns"]
                .as_u64()
                .is_some_and(|s| s >= from && s < to)
        })
        .cloned()
        .collect();
    assert!(!want.is_empty(), "the filter selects some reports");
    assert_eq!(
        history, want,
        "{event}'s reports of windows starting in [{from}, {to})"
    );
    // Newer pages: after the page's newest, nothing (no report since).
    let (_, newest) = get(api, "/v1/reports/history?limit=3");
    let after = newest["reports"][0]["seq"].as_u64().expect("seq");
    let (code, none) = get(api, &format!("/v1/reports/history?after={after}"));
    assert_eq!(
        (code, none["reports"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{none}"
    );
    let (_, newer) = get(api, &format!("/v1/reports/history?after={}&limit=2", after - 5));
    let seqs: Vec<u64> = newer["reports"]
        .as_array()
        .expect("reports")
        .iter()
        .filter_map(|r| r["seq"].as_u64())
        .collect();
    assert_eq!(seqs.len(), 2, "{newer}");
    assert!(
        seqs[0] > seqs[1] && seqs[1] > after - 5,
        "the oldest two after {}: {seqs:?}",
        after - 5
    );
    // Refusals name the parameter.
    for (query, says) in [
        ("limit=0", "limit"),
        ("before=1&after=2", "not both"),
        ("from=5&to=5", "empty"),
        ("page=2", "unknown parameter `page`"),
        ("event=a%20b", "not a name"),
    ] {
        let (code, body) = get(api, &format!("/v1/reports/history?{query}"));
        let error = body["error"].as_str().unwrap_or_default();
        assert!(code == 400 && error.contains(says), "{query}: {code} {body}");
    }
    eprintln!(
        "{} reports paged back after a restart ({} of {event} in [{from}, {to}))",
        written.len(),
        want.len()
    );
    let out = again.terminate("the restarted manager");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // A lower bound: the newest 10 kept, the others dropped and counted.
    let flags = [
        "--store",
        "m.sqlite",
        "--api-token",
        TOKEN,
        "--report-history",
        "10",
    ];
    let (bounded, api) = api_manager(d, &nats, &flags);
    let (history, last) = walk(api, "", 4);
    assert_eq!(history, written[..10], "the newest 10");
    assert_eq!(last["dropped"].as_u64(), Some(written.len() as u64 - 10));
    assert_eq!(last["max_reports"].as_u64(), Some(10));
    let out = bounded.terminate("the bounded manager");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // No store, no history: said so.
    let (none, api) = api_manager(d, &nats, &["--no-store", "--api-token", TOKEN]);
    let (code, body) = get(api, "/v1/reports/history");
    assert!(
        code == 404 && body["error"].as_str().unwrap_or_default().contains("--no-store"),
        "{code} {body}"
    );
    drop(none);
    let refused = clarion()
        .args([
            "manager",
            "--insecure",
            "--inventory",
            "hosts.txt",
            "--no-store",
            "--report-history",
            "5",
        ])
        .current_dir(d)
        .output()
        .expect("runs");
    assert_eq!(
        refused.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}
