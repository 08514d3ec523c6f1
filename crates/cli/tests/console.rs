//! The web console end to end, in headless Chromium: a real nats-server,
//! `clarion manager` serving the console on its control API, and
//! console/e2e/console.mjs (Playwright, `playwright-core` from
//! console/node_modules, Debian's /usr/bin/chromium) signing in with the
//! token, adding an event through the form (after a broken one, whose
//! error and span must show inline), then, while agents replay a capture,
//! waiting until the reports of the event are in the live feed and on its
//! chart. The feed must hold exactly the reports the manager wrote (JSON
//! lines), newest first, the newest 500 when there are more; those must
//! be the reference's: the reference evaluator's on generated traffic for
//! four hosts, `clarion run`'s (one monitor, no manager) on a real
//! capture. Screenshots go to the test's directory; with
//! CLARION_UPDATE_SCREENSHOTS=1 the first test's replace docs/console/*.png.
//!
//! Skipped, saying why, without node (20 or later), console/node_modules
//! (scripts/test.sh runs `npm ci` there first), /usr/bin/chromium or
//! nats-server.

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
/// The page's bounds (console/src/main.ts, docs/console.md).
const FEED_MAX: usize = 500;

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

/// (event, window start, group, values) of a report: what the feed shows.
type FeedRow = (String, String, Value, Value);

fn feed_row(r: &Value) -> FeedRow {
    (
        r["event"].as_str().unwrap_or_default().to_string(),
        r["window"]["start"].as_str().unwrap_or_default().to_string(),
        r["group"].clone(),
        r["values"].clone(),
    )
}

fn rows_of(text: &str) -> Vec<FeedRow> {
    text.lines()
        .map(|l| feed_row(&serde_json::from_str(l).expect("a JSON report")))
        .collect()
}

/// One console session on the API at `port` (with `token`): the event
/// `source` (named `name`, charting `value`) added through the page,
/// `replay` started, then, once `ready` gives how many reports the page
/// must show at least, the feed read back (newest first). `exact`: the
/// chart must then hold exactly that many points (no more may come).
struct Session<'a> {
    source: &'a str,
    name: &'a str,
    value: &'a str,
    hosts: usize,
    exact: bool,
}

impl Session<'_> {
    fn run<A>(
        &self,
        (script, shots): (&Path, &Path),
        (port, token): (u16, &str),
        replay: impl FnOnce() -> A,
        ready: impl Fn() -> Option<usize>,
    ) -> Vec<FeedRow> {
        let mut child = Command::new("node")
            .arg(script)
            .current_dir(console_dir())
            .env("CONSOLE_URL", format!("http://127.0.0.1:{port}/"))
            .env("CONSOLE_TOKEN", token)
            .env("CONSOLE_EVENT", self.source)
            .env("CONSOLE_EVENT_NAME", self.name)
            .env("CONSOLE_BROKEN", BROKEN)
            .env("CONSOLE_BROKEN_SPAN", "volum")
            .env("CONSOLE_VALUE", self.value)
            .env("CONSOLE_HOSTS", self.hosts.to_string())
            .env("CONSOLE_EXACT", if self.exact { "1" } else { "0" })
            .env("CONSOLE_SHOTS", shots)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node starts");
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
        let next = || lines.recv_timeout(Duration::from_secs(180)).ok();
        let fail = |browser: Guard, what: &str| -> ! {
            let out = browser.terminate("the console script");
            panic!("{what}: {}", String::from_utf8_lossy(&out.stderr));
        };

        let started = Instant::now();
        match next() {
            Some(l) if l == "added" => {}
            other => fail(browser, &format!("said {other:?} instead of `added`")),
        }
        eprintln!("{:?}: the event is added through the form", started.elapsed());
        let _agents = replay();
        let deadline = Instant::now() + Duration::from_secs(120);
        let n = loop {
            if let Some(n) = ready() {
                break n;
            }
            if Instant::now() > deadline {
                fail(browser, "the reports did not all come within 120 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        eprintln!("{:?}: {n} reports written", started.elapsed());
        writeln!(stdin, "expect {n}").expect("told");

        let feed = match next() {
            Some(l) if l.starts_with("feed ") => l["feed ".len()..].to_string(),
            other => fail(browser, &format!("said {other:?} instead of the feed")),
        };
        eprintln!("{:?}: the feed and the chart hold them", started.elapsed());
        let out = wait(browser.take(), "the console script", Duration::from_secs(60));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        let shown: Vec<Value> = serde_json::from_str(&feed).expect("the feed as JSON");
        shown
            .iter()
            .map(|r| {
                (
                    r["event"].as_str().unwrap_or_default().to_string(),
                    r["start"].as_str().unwrap_or_default().to_string(),
                    r["group"].clone(),
                    r["values"].clone(),
                )
            })
            .collect()
    }
}

/// A manager on `nats` with the inventory of `d`, its API on a free port
/// with a token of its own, reporting to `net.jsonl`; and the port and token.
fn console_manager(d: &Path, nats: &str) -> (Guard, u16, String) {
    let token = format!("console-test-{}-{}", std::process::id(), T0 % 997);
    // A long poll timeout: on a busy machine a late answer must not make
    // an incomplete report (which would differ from the reference).
    let flags = [
        "--no-store",
        "--api-token",
        &token,
        "-o",
        "net.jsonl",
        "--poll-timeout",
        "30s",
    ];
    let (manager, port) = api_manager(d, nats, &flags);
    (manager, port, token)
}

/// What the manager wrote so far (a line at a time).
fn net_jsonl(d: &Path) -> String {
    std::fs::read_to_string(d.join("net.jsonl")).unwrap_or_default()
}

/// The feed is the newest `FEED_MAX` reports the manager wrote, newest first.
fn assert_feed_is_newest_first(shown: &[FeedRow], written: &str) {
    let rows = rows_of(written);
    let newest: Vec<&FeedRow> = rows.iter().rev().take(FEED_MAX).collect();
    assert_eq!(shown.len(), newest.len(), "each report once, at most {FEED_MAX}");
    for (i, (s, w)) in shown.iter().zip(newest).enumerate() {
        assert_eq!(s, w, "feed entry {i} (newest first)");
    }
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
    let (_manager, port, token) = console_manager(d, &nats);
    let session = Session {
        source: EVENT,
        name: "service_load_spike",
        value: "sum(volume)",
        hosts: 4,
        exact: true,
    };
    // The agents replay at the capture's pace, as live hosts would (each
    // lingers to answer polls; killed when the session ends).
    let shown = session.run(
        (&script, &shots),
        (port, &token),
        || paced_agents(d, &nats),
        || {
            let text = net_jsonl(d);
            (rows_of_jsonl(&text).len() >= expected.len()).then(|| text.lines().count())
        },
    );
    let written = net_jsonl(d);
    assert_eq!(rows_of_jsonl(&written), expected, "the manager's reports");
    assert_feed_is_newest_first(&shown, &written);
    let starts: BTreeSet<&str> = shown.iter().map(|r| r.1.as_str()).collect();
    assert!(starts.len() > 3, "reports of several windows");
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

/// A real capture (an hour of an enterprise LAN) through one agent: more
/// reports than the feed keeps (it shows the newest 500) and than a chart
/// keeps (300 points); IPv4 groups of two addresses. The reference is
/// `clarion run` on the same capture, one monitor and no manager.
#[test]
fn a_real_capture_fills_the_feed_up_to_its_bound() {
    let capture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures/pathspider_real.pcap");
    if !capture.exists() {
        eprintln!("skipped: {} is missing (the shared captures)", capture.display());
        return;
    }
    let Some(server) = require_server() else {
        return;
    };
    let Some(script) = require_browser() else {
        return;
    };
    let event =
        "event busy_pairs\n  when count(packets) > 20\n  per (src_ip, dst_ip)\n  every 10s\n  across hosts\n";
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("hosts.txt"), "lan 0.0.0.0/0 ::/0\n").expect("inventory");
    std::fs::write(d.join("local.clarion"), event.replace("  across hosts\n", "")).expect("events");
    let local = clarion()
        .args([
            "run",
            "--pcap",
            &capture.to_string_lossy(),
            "--events",
            "local.clarion",
        ])
        .args(["--format", "json", "-q"])
        .current_dir(d)
        .output()
        .expect("clarion run");
    assert!(
        local.status.success(),
        "{}",
        String::from_utf8_lossy(&local.stderr)
    );
    let local = String::from_utf8(local.stdout).expect("UTF-8");
    let mut reference = rows_of(&local);
    reference.iter_mut().for_each(|r| r.0 = "busy_pairs".into());
    let reference: BTreeSet<String> = reference.iter().map(|r| format!("{r:?}")).collect();
    assert!(
        reference.len() > FEED_MAX,
        "{} reports: more than the feed keeps",
        reference.len()
    );

    let shots = d.join("shots");
    std::fs::create_dir(&shots).expect("shots dir");
    let (_nats, nats_port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{nats_port}");
    let (_manager, port, token) = console_manager(d, &nats);
    let session = Session {
        source: event,
        name: "busy_pairs",
        value: "count(packets)",
        hosts: 1,
        exact: true,
    };
    let as_set =
        |text: &str| -> BTreeSet<String> { rows_of(text).iter().map(|r| format!("{r:?}")).collect() };
    let shown = session.run(
        (&script, &shots),
        (port, &token),
        || {
            let agent = clarion()
                .args(["agent", "--nats", &nats, "--host", "lan", "--pcap"])
                .arg(&capture)
                .current_dir(d)
                .stderr(Stdio::piped())
                .spawn()
                .expect("agent starts");
            Guard::new(agent)
        },
        || {
            let text = net_jsonl(d);
            (as_set(&text).len() >= reference.len()).then(|| text.lines().count())
        },
    );
    let written = net_jsonl(d);
    assert_eq!(
        as_set(&written),
        reference,
        "the manager's reports are the monitor's"
    );
    assert_eq!(written.lines().count(), reference.len(), "each once");
    assert_feed_is_newest_first(&shown, &written);
}

/// A live host's own API serves the console too (`clarion run -i lo
/// --api`): an event on the host's own traffic added through the page
/// fires live. Root only (a packet socket). Every report the feed shows
/// is one the host wrote to its output, newest first.
#[test]
fn a_live_host_serves_the_console_for_its_own_events() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: opening a packet socket needs root");
        return;
    }
    let Some(script) = require_browser() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let shots = d.join("shots");
    std::fs::create_dir(&shots).expect("shots dir");
    let probe = std::net::UdpSocket::bind("127.0.0.1:0").expect("a socket");
    let port = free_port();
    // The host starts with an event of its own, on other traffic.
    std::fs::write(
        d.join("host.clarion"),
        "event seed\n  filter proto = icmp\n  when count(packets) > 0\n  every 1s\n",
    )
    .expect("events");
    let token = format!("console-live-{}", std::process::id());
    let (host, api_port) = listen_on_free_port("clarion run -i lo --api", |api| {
        clarion()
            .args(["run", "-i", "lo", "--format", "json", "--stats-every", "0"])
            .args(["--duration", "120s", "--events", "host.clarion"])
            .args(["--api", &format!("127.0.0.1:{api}"), "--api-token", &token])
            .args(["-o", "reports.jsonl"])
            .current_dir(d)
            .stderr(Stdio::piped())
            .spawn()
            .expect("clarion run starts")
    });
    let event = format!(
        "event udp_probe\n  filter proto = udp and dst_port = {port}\n  when count(packets) > 0\n  per dst_port\n  every 100ms\n"
    );
    let session = Session {
        source: &event,
        name: "udp_probe",
        value: "count(packets)",
        hosts: 1,
        exact: false,
    };
    // One datagram every 10 ms to the event's port, until the session ends.
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let sender = std::thread::spawn(move || {
        // Until told, or until the test ends (the sender is dropped, also on a panic).
        while let Err(mpsc::TryRecvError::Empty) = stop_rx.try_recv() {
            let _ = probe.send_to(b"probe", ("127.0.0.1", port));
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    let shown = session.run((&script, &shots), (api_port, &token), || (), || Some(5));
    drop(stop_tx);
    sender.join().expect("sender");
    let out = host.terminate("clarion run -i lo");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let written = std::fs::read_to_string(d.join("reports.jsonl")).expect("reports");
    let rows: BTreeSet<String> = rows_of(&written)
        .iter()
        .filter(|r| r.0 == "udp_probe")
        .map(|r| format!("{r:?}"))
        .collect();
    assert!(shown.len() >= 5, "{shown:?}");
    for r in &shown {
        assert!(
            rows.contains(&format!("{r:?}")),
            "{r:?} is not in the host's output"
        );
        assert_eq!(r.2, serde_json::json!({ "dst_port": port }));
    }
    assert!(
        shown.windows(2).all(|w| w[0].1 > w[1].1),
        "newest first, one report per window: {shown:?}"
    );
}
