//! Several managers on one NATS server (`clarion manager --shared`): the
//! events and their owners live in JetStream key-value buckets, each event
//! is decided by exactly one manager, and when a manager dies the others
//! take its events over.

mod bus;

use std::process::Child;
use std::time::{Duration, Instant};

use bus::*;

const S: u64 = 1_000 * MS;

/// A JetStream-enabled server on a free port, storing in `d`.
fn jetstream_server(d: &std::path::Path) -> Option<(Guard, String)> {
    let server = require_server()?;
    let store = d.join("js");
    let (guard, port) = start_server_with(&server, &["-js", "-sd", &store.display().to_string()]);
    Some((guard, format!("nats://127.0.0.1:{port}")))
}

/// A shared manager named `name`, writing its reports to `NAME.jsonl`.
fn shared_manager(d: &std::path::Path, url: &str, name: &str) -> Child {
    let out = format!("{name}.jsonl");
    manager(
        d,
        url,
        &[
            "--shared",
            "--name",
            name,
            "--events",
            "events.clarion",
            "--no-api",
            "--until-finished",
            "-o",
            &out,
        ],
    )
}

/// The event names of a JSON-lines text.
fn events_in(text: &str) -> std::collections::BTreeSet<String> {
    rows_of_jsonl(text).into_iter().map(|r| r.0).collect()
}

fn read(d: &std::path::Path, file: &str) -> String {
    std::fs::read_to_string(d.join(file)).unwrap_or_default()
}

#[test]
fn two_managers_share_the_events_and_decide_each_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let Some((_server, url)) = jetstream_server(d) else {
        return;
    };
    let frames = setup(d, 300);
    let m1 = Guard::new(shared_manager(d, &url, "m1"));
    std::thread::sleep(Duration::from_millis(500));
    let m2 = Guard::new(shared_manager(d, &url, "m2"));
    // Ownership settles within a tend or two: m1 gives back one event, m2 claims it.
    std::thread::sleep(Duration::from_millis(3_000));
    let agents: Vec<Guard> = (1..=4)
        .map(|i| {
            let host = format!("web-{i}");
            let child = clarion()
                .args(["agent", "--nats", &url, "--host", &host])
                .args(["--pcap", &format!("hosts/{host}.pcap"), "--linger", "10s"])
                .current_dir(d)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("agent starts");
            Guard::new(child)
        })
        .collect();
    let o1 = wait(m1.take(), "manager m1", Duration::from_secs(60));
    let o2 = wait(m2.take(), "manager m2", Duration::from_secs(60));
    wait_agents(agents, Duration::from_secs(60));
    let (e1, e2) = (
        String::from_utf8_lossy(&o1.stderr),
        String::from_utf8_lossy(&o2.stderr),
    );
    assert!(o1.status.success() && o2.status.success(), "m1: {e1}\nm2: {e2}");
    assert!(e1.contains("manager: m1 now deciding"), "{e1}");
    assert!(
        e1.contains("manager: m1 handed over"),
        "m1 gave one back when m2 came: {e1}"
    );
    assert!(e2.contains("manager: m2 now deciding"), "{e2}");
    let (r1, r2) = (read(d, "m1.jsonl"), read(d, "m2.jsonl"));
    let (n1, n2) = (events_in(&r1), events_in(&r2));
    assert!(!n1.is_empty() && !n2.is_empty(), "both decide: {n1:?} {n2:?}");
    assert!(
        n1.is_disjoint(&n2),
        "each event decided by one manager: {n1:?} {n2:?}"
    );
    let mut got = rows_of_jsonl(&r1);
    got.extend(rows_of_jsonl(&r2));
    assert_eq!(
        got.len(),
        r1.lines().count() + r2.lines().count(),
        "no report twice"
    );
    assert_eq!(got, reference(&frames));
}

#[test]
fn a_killed_manager_s_events_are_taken_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let Some((_server, url)) = jetstream_server(d) else {
        return;
    };
    let frames = setup(d, 1_000);
    let m1 = Guard::new(shared_manager(d, &url, "m1"));
    std::thread::sleep(Duration::from_millis(500));
    let m2 = Guard::new(shared_manager(d, &url, "m2"));
    std::thread::sleep(Duration::from_millis(3_000));
    let start = Instant::now();
    let agents = paced_agents(d, &url);
    std::thread::sleep(Duration::from_millis(2_000).saturating_sub(start.elapsed()));
    m1.kill();
    let o2 = wait(m2.take(), "manager m2", Duration::from_secs(60));
    let e2 = String::from_utf8_lossy(&o2.stderr);
    assert!(o2.status.success(), "{e2}");
    wait_agents(agents, Duration::from_secs(60));
    // m2 took m1's events over once their entries expired (3 s lease).
    assert!(e2.matches("manager: m2 now deciding").count() >= 2, "{e2}");
    let (r1, r2) = (read(d, "m1.jsonl"), read(d, "m2.jsonl"));
    let mut before = rows_between(&r1, T0, T0 + 3 * S / 2);
    before.extend(rows_between(&r2, T0, T0 + 3 * S / 2));
    assert_eq!(
        before,
        reference_between(&frames, T0, T0 + 3 * S / 2),
        "before the kill"
    );
    // Killed at 2 s; the lease expires by 5 s, the next tend claims by 6 s.
    let after = rows_between(&r2, T0 + 7 * S, T0 + 10 * S);
    assert!(!after.is_empty());
    assert_eq!(
        after,
        reference_between(&frames, T0 + 7 * S, T0 + 10 * S),
        "after the takeover"
    );
}

/// `clarion events` on the API of shared manager `port`.
fn events(port: u16, args: &[&str]) -> std::process::Output {
    clarion()
        .args(["events", "--api", &format!("http://127.0.0.1:{port}")])
        .args(args)
        .env_remove("CLARION_API_TOKEN")
        .output()
        .expect("clarion events runs")
}

/// Polls `clarion events list` on `port` until `pred` holds on its output (5 s at most).
fn list_until(port: u16, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let o = events(port, &["list"]);
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        if pred(&out) || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn an_event_added_on_one_manager_is_installed_on_all_and_removed_from_all() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let Some((_server, url)) = jetstream_server(d) else {
        return;
    };
    setup(d, 10);
    let (managers, ports): (Vec<Guard>, Vec<u16>) = ["m1", "m2"]
        .iter()
        .map(|name| api_manager(d, &url, &["--shared", "--name", name, "--duration", "20s"]))
        .unzip();
    let new = d.join("new.clarion");
    std::fs::write(
        &new,
        "event late_spike\n  when sum(volume) > 1MB\n  per dst_ip\n  across hosts\n",
    )
    .expect("write");
    let o = events(ports[1], &["add", &new.display().to_string()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let on_m1 = list_until(ports[0], |l| l.contains("late_spike"));
    assert!(on_m1.contains("late_spike"), "m1 installs what m2 added: {on_m1}");
    // The same name again, on the other manager: refused.
    let o = events(ports[0], &["add", &new.display().to_string()]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    let o = events(ports[0], &["rm", "late_spike"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let on_m2 = list_until(ports[1], |l| !l.contains("late_spike"));
    assert!(
        !on_m2.contains("late_spike"),
        "m2 forgets what m1 removed: {on_m2}"
    );
    for m in managers {
        m.kill();
    }
}
