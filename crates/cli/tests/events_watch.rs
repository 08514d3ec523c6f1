//! `clarion events watch` (issue 37): the stream of fired events as the
//! JSON lines the API sends or as `clarion run`'s table, of every event or
//! of those named with `--event`. The API is a stand-in serving, as
//! server-sent events, the reports `clarion run` makes of the bundled
//! capture (`tests/nats_control.rs` watches a real manager's).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Output;

use common::{clarion, stderr};
use serde_json::Value;

/// Not a report: a table skips it, saying so; JSON lines pass it on.
const NOT_A_REPORT: &str = r#"{"schema":"clarion.health/1","host":"demo"}"#;

/// `clarion run` on the bundled capture and events, in `format`.
fn run(format: &str) -> String {
    let o = clarion()
        .args(["run", "--quiet", "--pcap", "examples/demo.pcap"])
        .args(["--events", "examples/demo.clarion", "--format", format])
        .output()
        .expect("clarion runs");
    assert!(o.status.success(), "{}", stderr(&o));
    String::from_utf8(o.stdout).expect("utf-8")
}

/// A control API on a free loopback port: `GET /v1/events` lists
/// `installed`, `GET /v1/reports` sends `lines` as server-sent events (a
/// line starting with `:` as a comment, as it is) and ends the stream. Its
/// base URL.
fn api(installed: &[&str], lines: Vec<String>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    let url = format!("http://{}", listener.local_addr().expect("bound"));
    let events: Vec<Value> = installed
        .iter()
        .enumerate()
        .map(|(id, name)| {
            serde_json::json!({
                "id": id, "name": name, "source": "", "hosts": [], "local_predicate": "",
                "interval_ns": 1_000_000, "added": "2026-11-22T06:00:00Z",
            })
        })
        .collect();
    let list = Value::Array(events).to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut head = Vec::new();
            let mut reader = BufReader::new(conn.try_clone().expect("socket"));
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push(line);
            }
            let path = head.first().and_then(|l| l.split(' ').nth(1)).unwrap_or("");
            let (kind, body) = match path {
                "/v1/events" => ("application/json", list.clone()),
                "/v1/reports" => (
                    "text/event-stream",
                    lines
                        .iter()
                        .map(|l| match l.starts_with(':') {
                            true => format!("{l}\n\n"),
                            false => format!("data: {l}\n\n"),
                        })
                        .collect(),
                ),
                _ => ("application/json", r#"{"error":"not here"}"#.to_string()),
            };
            let status = if kind == "application/json" && body.starts_with(r#"{"error""#) {
                "404 Not Found"
            } else {
                "200 OK"
            };
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nConnection: close\r\n\r\n{body}"
            );
        }
    });
    url
}

fn watch(url: &str, args: &[&str]) -> Output {
    clarion()
        .args(["events", "--api", url, "--token", "t", "watch"])
        .args(args)
        .env_remove("CLARION_API_TOKEN")
        .output()
        .expect("clarion events watch runs")
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", stderr(o));
    String::from_utf8(o.stdout.clone()).expect("utf-8")
}

fn event_of(line: &str) -> String {
    let v: Value = serde_json::from_str(line).expect("a JSON line");
    v["event"].as_str().expect("an event").to_string()
}

#[test]
fn watch_prints_json_lines_or_the_run_table_of_the_events_named() {
    let json = run("json");
    let table = run("table");
    let reports: Vec<String> = json.lines().map(str::to_string).collect();
    assert!(reports.len() > 10, "{json}");
    let mut stream = vec![NOT_A_REPORT.to_string()];
    stream.extend(reports.iter().cloned());
    let url = api(&["low_ttl", "udp_burst"], stream.clone());

    // Not a terminal: JSON lines by default, each as sent.
    let out = ok(&watch(&url, &[]));
    assert_eq!(out.lines().collect::<Vec<_>>(), stream);

    // The table is `clarion run`'s, row for row; what is not a report is said and skipped.
    let o = watch(&url, &["--format", "table"]);
    assert_eq!(ok(&o), table);
    assert!(
        stderr(&o).contains("skipped") && stderr(&o).contains("clarion.health/1"),
        "{}",
        stderr(&o)
    );

    // --event keeps the reports of the events named, in JSON lines...
    let wanted = |e: &str| e == "low_ttl" || e == "udp_burst";
    let kept: Vec<&String> = reports.iter().filter(|l| wanted(&event_of(l))).collect();
    assert!(!kept.is_empty() && kept.len() < reports.len());
    let o = watch(
        &url,
        &["--format", "json", "--event", "low_ttl", "--event", "udp_burst"],
    );
    assert_eq!(ok(&o).lines().collect::<Vec<_>>(), kept);
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));

    // ... and in the table: a header, date lines, and a row per report kept.
    let out = ok(&watch(&url, &["--format", "table", "--event", "low_ttl"]));
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with("EVENT") && !l.starts_with("--") && !l.starts_with('!'))
        .collect();
    let low_ttl = reports.iter().filter(|l| event_of(l) == "low_ttl").count();
    assert_eq!(rows.len(), low_ttl, "{out}");
    assert!(rows.iter().all(|r| r.starts_with("low_ttl ")), "{out}");

    // A name not installed is warned about (it may be added later), and watched.
    let o = watch(&url, &["--event", "low_tll"]);
    assert_eq!(ok(&o), "");
    assert!(
        stderr(&o).contains("--event low_tll: no such event"),
        "{}",
        stderr(&o)
    );

    let o = watch(&url, &["--format", "xml"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn reports_the_server_dropped_for_a_slow_watcher_are_said_not_skipped_silently() {
    let json = run("json");
    let reports: Vec<String> = json.lines().map(str::to_string).collect();
    let mut stream = vec![reports[0].clone(), ": lagged: 7 reports lost".to_string()];
    stream.extend(reports[1..].iter().cloned());
    stream.push(": keep-alive".to_string());
    let url = api(&["low_ttl", "udp_burst"], stream);
    for format in ["json", "table"] {
        let o = watch(&url, &["--format", format]);
        let out = ok(&o);
        if format == "json" {
            assert_eq!(out.lines().collect::<Vec<_>>(), reports, "the reports, as sent");
        }
        let err = stderr(&o);
        assert!(err.contains("7 report(s) lost"), "{format}: {err}");
        assert_eq!(err.matches("lost").count(), 1, "a keep-alive is no loss: {err}");
    }
}
