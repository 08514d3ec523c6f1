//! The web console end to end, in headless Chromium: a real nats-server,
//! `clarion manager` serving the console on its control API, and
//! console/e2e/console.mjs (Playwright, `playwright-core` from
//! console/node_modules, Debian's /usr/bin/chromium) signing in with the
//! token, adding an event through the form (after a broken one, whose
//! error and span must show inline), then, while four agents replay the
//! generated capture, waiting until every report of the event is in the
//! live feed and on its chart. The feed must hold exactly the reports the
//! manager wrote (JSON lines), which must be the reference evaluator's.
//! Screenshots go to the test's directory; with
//! CLARION_UPDATE_SCREENSHOTS=1 they replace docs/console/*.png.
//!
//! Skipped, saying why, without node, console/node_modules (scripts/test.sh
//! runs `npm ci` there first), /usr/bin/chromium or nats-server.

mod bus;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bus::*;
use serde_json::Value;

const EVENT: &str = "\
event service_load_spike
  filter dst_ip in 10.0.128.0/24 and dst_port = 80
  when sum(volume) > 40KB
  per dst_ip/24
  every 10ms
  across hosts
";
const BROKEN: &str = "event x\n  when sum(volum) > 1\n  across hosts\n";

fn console_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../console")
}

/// Node, Playwright and Chromium, or `None` having said which is missing.
fn require_browser() -> Option<PathBuf> {
    let node = Command::new("node").arg("--version").output();
    let Some(version) = node.ok().filter(|o| o.status.success()) else {
        eprintln!("skipped: node is not installed (Node.js 20 or later, with npm)");
        return None;
    };
    // "v20.20.2": playwright-core needs 20 or later (Debian 12's nodejs is 18).
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let major: u32 = version
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if major < 20 {
        eprintln!("skipped: node is {version}, Playwright needs Node.js 20 or later");
        return None;
    }
    if !console_dir().join("node_modules/playwright-core").is_dir() {
        eprintln!(
            "skipped: console/node_modules is missing (run `npm ci` in console/; scripts/test.sh does)"
        );
        return None;
    }
    if !Path::new("/usr/bin/chromium").exists() {
        eprintln!("skipped: chromium is not installed (apt-get install chromium)");
        return None;
    }
    Some(console_dir().join("e2e/console.mjs"))
}

/// (event, window start, group, values) of a report.
type FeedRow = (String, String, Value, Value);

fn feed_row(r: &Value) -> FeedRow {
    (
        r["event"].as_str().unwrap_or_default().to_string(),
        r["window"]["start"].as_str().unwrap_or_default().to_string(),
        r["group"].clone(),
        r["values"].clone(),
    )
}

#[test]
fn an_event_added_in_the_console_fires_live_in_its_feed_and_chart() {
    let Some(server) = require_server() else {
        return;
    };
    let Some(script) = require_browser() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let frames = setup(d, 100);
    let expected = reference_of(EVENT, &frames);
    assert!(
        expected.len() > 3,
        "the traffic makes the event fire: {expected:?}"
    );
    let shots = d.join("shots");
    std::fs::create_dir(&shots).expect("shots dir");

    let (_nats, nats_port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{nats_port}");
    let token = format!("console-test-{}-{}", std::process::id(), T0 % 997);
    // A long poll timeout: on a busy machine a late answer must not make
    // an incomplete report (which would differ from the reference).
    let (manager, port) = api_manager(
        d,
        &nats,
        &[
            "--no-store",
            "--api-token",
            &token,
            "-o",
            "net.jsonl",
            "--poll-timeout",
            "30s",
        ],
    );

    let mut browser = Guard::new(
        Command::new("node")
            .arg(&script)
            .current_dir(console_dir())
            .env("CONSOLE_URL", format!("http://127.0.0.1:{port}/"))
            .env("CONSOLE_TOKEN", &token)
            .env("CONSOLE_EVENT", EVENT)
            .env("CONSOLE_EVENT_NAME", "service_load_spike")
            .env("CONSOLE_BROKEN", BROKEN)
            .env("CONSOLE_BROKEN_SPAN", "volum")
            .env("CONSOLE_VALUE", "sum(volume)")
            .env("CONSOLE_HOSTS", "4")
            .env("CONSOLE_SHOTS", &shots)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node starts"),
    );
    let mut child = browser.take();
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let browser = Guard::new(child);
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = |what: &str| -> Option<String> {
        lines.recv_timeout(Duration::from_secs(180)).ok().or_else(|| {
            eprintln!("the console script said nothing while {what}");
            None
        })
    };
    let fail = |browser: Guard, what: &str| -> ! {
        let out = browser.terminate("the console script");
        panic!("{what}: {}", String::from_utf8_lossy(&out.stderr));
    };

    let started = Instant::now();
    let Some(added) = next("adding the event") else {
        fail(browser, "no `added`")
    };
    if added != "added" {
        fail(browser, &format!("said `{added}` instead of `added`"));
    }
    eprintln!("{:?}: the event is added through the form", started.elapsed());
    // The event is installed (through the form): the agents replay at
    // the capture's pace, as live hosts would (each lingers to answer
    // polls; killed when the test ends).
    let _agents = paced_agents(d, &nats);
    // The manager writes each report as it streams it: wait for all of them.
    let deadline = Instant::now() + Duration::from_secs(120);
    let written = loop {
        let text = std::fs::read_to_string(d.join("net.jsonl")).unwrap_or_default();
        let rows = rows_of_jsonl(&text);
        if rows.len() >= expected.len() || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if rows_of_jsonl(&written) != expected {
        let out = manager.terminate("the manager");
        panic!(
            "the manager's reports are not the reference's ({} written, {} expected): {}",
            rows_of_jsonl(&written).len(),
            expected.len(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!(
        "{:?}: the manager wrote {} reports",
        started.elapsed(),
        expected.len()
    );
    writeln!(stdin, "expect {}", expected.len()).expect("told");

    let Some(feed) = next("waiting for the feed") else {
        fail(browser, "no feed")
    };
    let Some(feed) = feed.strip_prefix("feed ") else {
        fail(browser, &format!("said `{feed}` instead of the feed"))
    };
    eprintln!("{:?}: the feed and the chart hold them", started.elapsed());
    let out = wait(browser.take(), "the console script", Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    let shown: Vec<Value> = serde_json::from_str(feed).expect("the feed as JSON");
    let shown_rows: Vec<FeedRow> = shown
        .iter()
        .map(|r| {
            (
                r["event"].as_str().unwrap_or_default().to_string(),
                r["start"].as_str().unwrap_or_default().to_string(),
                r["group"].clone(),
                r["values"].clone(),
            )
        })
        .collect();
    let written_rows: Vec<FeedRow> = written
        .lines()
        .map(|l| feed_row(&serde_json::from_str(l).expect("a JSON report")))
        .collect();
    assert_eq!(
        shown_rows.len(),
        written_rows.len(),
        "each report once in the feed"
    );
    let key = |r: &FeedRow| format!("{} {} {} {}", r.0, r.1, r.2, r.3);
    assert_eq!(
        shown_rows.iter().map(key).collect::<BTreeSet<_>>(),
        written_rows.iter().map(key).collect::<BTreeSet<_>>()
    );
    // Newest first: window starts never increase down the feed.
    assert!(
        shown_rows.windows(2).all(|w| w[0].1 >= w[1].1),
        "newest first: {shown_rows:?}"
    );
    for shot in ["error.png", "console.png"] {
        let png = std::fs::read(shots.join(shot)).expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "{shot}");
        if std::env::var_os("CLARION_UPDATE_SCREENSHOTS").is_some() {
            let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/console");
            std::fs::create_dir_all(&docs).expect("docs/console");
            std::fs::write(docs.join(shot), png).expect("screenshot copied");
        }
    }
}
