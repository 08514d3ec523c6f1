//! A live host's own events change at runtime (`clarion run -i --api`):
//! an event added through the control API reports from the window its
//! answer names on; a removed one stops after the window it names; SIGHUP
//! reloads the events file. Live capture on `lo`, so root only.

use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn event(name: &str, port: u16) -> String {
    format!(
        "event {name}\n  filter proto = udp and dst_port = {port}\n  when count(packets) > 0\n  per dst_port\n  every 100ms\n"
    )
}

/// Waits until the child's standard error (a file) says `what`; returns the line.
fn said(err: &std::path::Path, what: &str, child: &mut Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(err).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains(what)) {
            return line.to_string();
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("clarion exited ({status}) before saying `{what}`: {text}");
        }
        assert!(Instant::now() < deadline, "clarion did not say `{what}`: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `clarion events` on `api`, with the token kept in `token_file`.
fn events_cli(api: &str, token_file: &std::path::Path, args: &[&str]) -> String {
    let out = Command::cargo_bin("clarion")
        .expect("binary")
        .env("CLARION_API_TOKEN_FILE", token_file)
        .env_remove("CLARION_API_TOKEN")
        .args(["events", "--api", api])
        .args(args)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The window starts (or ends) of an event's reports, as RFC 3339 text.
fn windows(reports: &[serde_json::Value], event: &str, edge: &str) -> Vec<String> {
    reports
        .iter()
        .filter(|r| r["event"] == event)
        .map(|r| r["window"][edge].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn events_are_added_removed_and_reloaded_without_a_restart() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: opening a packet socket needs root");
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (port, api_port) = (free_port(), free_port());
    let api = format!("http://127.0.0.1:{api_port}");
    let events = dir.path().join("host.clarion");
    std::fs::write(&events, event("probe_a", port)).expect("written");
    let (out, err) = (dir.path().join("reports.jsonl"), dir.path().join("err.txt"));
    let token = dir.path().join("api-token");
    let mut child = Command::cargo_bin("clarion")
        .expect("binary")
        .env("CLARION_API_TOKEN_FILE", &token)
        .env_remove("CLARION_API_TOKEN")
        .args([
            "run",
            "-i",
            "lo",
            "--format",
            "json",
            "--stats-every",
            "0",
            "--duration",
            "20s",
        ])
        .arg("--events")
        .arg(&events)
        .args(["--api", &format!("127.0.0.1:{api_port}")])
        .arg("-o")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).expect("created"))
        .spawn()
        .expect("starts");
    said(&err, "control API for this host's events", &mut child);
    // Closed by default: a token generated at start, private, and needed.
    said(&err, "control API token generated", &mut child);
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token)
            .expect("token file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let anonymous = Command::cargo_bin("clarion")
        .expect("binary")
        .env("CLARION_API_TOKEN_FILE", dir.path().join("none"))
        .args(["events", "--api", &api, "--token", "wrong", "list"])
        .output()
        .expect("runs");
    assert_eq!(anonymous.status.code(), Some(2), "401 without the token");

    // One datagram every 10 ms to the events' port, until told to stop.
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let sender = std::thread::spawn(move || {
        let s = UdpSocket::bind("127.0.0.1:0").expect("a socket");
        while stop_rx.try_recv().is_err() {
            let _ = s.send_to(b"probe", ("127.0.0.1", port));
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    std::thread::sleep(Duration::from_millis(600));
    let b = dir.path().join("b.clarion");
    std::fs::write(&b, event("probe_b", port)).expect("written");
    let added = events_cli(&api, &token, &["add", b.to_str().expect("utf-8")]);
    assert!(added.contains("probe_b"), "{added}");
    let starts = said(
        &err,
        "event probe_b added; its first window starts at ",
        &mut child,
    );
    let starts = starts.rsplit(' ').next().expect("a time").to_string();
    // An event that captures needs the host's --capture-dir (none here):
    // refused, saying so, and nothing installed.
    let capturing = dir.path().join("c.clarion");
    // Listed after an event that alone would install: neither does.
    let text = event("probe_d", port) + &event("probe_capture", port) + "  then capture 1s after\n";
    std::fs::write(&capturing, text).expect("written");
    let refused = Command::cargo_bin("clarion")
        .expect("binary")
        .env("CLARION_API_TOKEN_FILE", &token)
        .env_remove("CLARION_API_TOKEN")
        .args(["events", "--api", &api, "add"])
        .arg(&capturing)
        .output()
        .expect("runs");
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{why}");
    assert!(
        why.contains("--capture-dir") && why.contains("probe_capture"),
        "{why}"
    );
    let listed = events_cli(&api, &token, &["list"]);
    assert!(
        !listed.contains("probe_capture") && !listed.contains("probe_d"),
        "{listed}"
    );
    assert!(
        listed.contains("probe_a") && listed.contains("probe_b"),
        "{listed}"
    );

    std::thread::sleep(Duration::from_millis(600));
    events_cli(&api, &token, &["rm", "probe_a"]);
    let ends = said(
        &err,
        "event probe_a removed; its last window ends at ",
        &mut child,
    );
    let ends = ends.rsplit(' ').next().expect("a time").to_string();

    std::thread::sleep(Duration::from_millis(600));
    std::fs::write(&events, event("probe_c", port)).expect("written");
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    said(&err, "SIGHUP: reloaded", &mut child);
    let c_from = said(
        &err,
        "event probe_c added; its first window starts at ",
        &mut child,
    );
    let c_from = c_from.rsplit(' ').next().expect("a time").to_string();
    std::thread::sleep(Duration::from_millis(600));

    let _ = stop_tx.send(());
    sender.join().expect("the sender ends");
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().expect("waits");
    let mut text = String::new();
    std::fs::File::open(&err)
        .and_then(|mut f| f.read_to_string(&mut text))
        .expect("read");
    assert!(status.success(), "{text}");

    let reports: Vec<serde_json::Value> = std::fs::read_to_string(&out)
        .expect("reports")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let a_ends = windows(&reports, "probe_a", "end");
    let b_starts = windows(&reports, "probe_b", "start");
    let c_starts = windows(&reports, "probe_c", "start");
    assert!(
        a_ends.len() >= 5,
        "probe_a reported before its removal: {a_ends:?}\n{text}"
    );
    assert!(
        a_ends.iter().all(|e| *e <= ends),
        "probe_a stops by {ends}: {a_ends:?}"
    );
    assert!(
        a_ends.contains(&ends),
        "probe_a reports its last window, ending {ends}: {a_ends:?}"
    );
    assert!(
        b_starts.len() >= 10,
        "probe_b reports once added: {b_starts:?}\n{text}"
    );
    assert_eq!(
        b_starts.first(),
        Some(&starts),
        "probe_b reports from the window it named"
    );
    assert!(
        c_starts.len() >= 3,
        "probe_c reports once reloaded: {c_starts:?}\n{text}"
    );
    assert_eq!(
        c_starts.first(),
        Some(&c_from),
        "probe_c reports from the window it named"
    );
}
