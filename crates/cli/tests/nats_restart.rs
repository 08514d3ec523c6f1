//! Robustness of the NATS transport, with agents replaying at the capture's
//! pace like live hosts: an agent killed and started again, then the
//! manager killed and started again. No installed event is lost, reports
//! resume (equal to the reference evaluator's once everyone is back), and
//! the gap is reported: decisions made without the dead agent are marked
//! incomplete and listed per host. A manager killed and restarted loses no
//! report: the agents send again what it had not acknowledged.

mod bus;

use std::time::{Duration, Instant};

use bus::*;

const S: u64 = 1_000 * MS;

/// Reports of windows in the first second (`before`, written before the
/// failure) and from `back_ns` on (`after`) equal the reference, and some
/// come after `back_ns`: they resumed.
fn assert_reference_outside_the_gap(before: &str, after: &str, frames: &[(u64, Vec<u8>)], back_ns: u64) {
    assert_eq!(
        rows_between(before, T0, T0 + S),
        reference_between(frames, T0, T0 + S)
    );
    let end = T0 + 10 * S;
    let resumed = rows_between(after, back_ns, end);
    assert!(!resumed.is_empty(), "reports resume");
    assert_eq!(resumed, reference_between(frames, back_ns, end));
}

fn sleep_until(start: Instant, after: Duration) {
    if let Some(left) = (start + after).checked_duration_since(Instant::now()) {
        std::thread::sleep(left);
    }
}

#[test]
fn a_killed_agent_comes_back_and_the_windows_it_missed_are_marked() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let frames = setup(d, 400);
    // What web-2 sees once it is back: its traffic from 2.5 s on.
    write_pcap(
        &d.join("web-2-late.pcap"),
        &host_frames(&frames, 1, T0 + 2_500 * MS),
    );
    let (_server, port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{port}");
    let manager = Guard::new(manager(d, &nats, &REPLAY));
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let mut agents: Vec<Guard> = [1, 3, 4]
        .iter()
        .map(|i| paced_agent(d, &nats, &format!("web-{i}"), &format!("hosts/web-{i}.pcap")))
        .collect();
    let web2 = paced_agent(d, &nats, "web-2", "hosts/web-2.pcap");
    sleep_until(start, Duration::from_millis(1_500));
    web2.kill();
    sleep_until(start, Duration::from_millis(2_300));
    agents.push(paced_agent(d, &nats, "web-2", "web-2-late.pcap"));

    let out = wait(manager.take(), "the manager", Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    wait_agents(agents, Duration::from_secs(30));
    assert!(err.contains("5 registrations"), "web-2 registered again: {err}");
    assert!(
        err.contains("host web-2: did not answer polls for"),
        "the gap is listed: {err}"
    );
    let text = std::fs::read_to_string(d.join("net.jsonl")).expect("reports");
    // Before the kill and once web-2 is back: exactly the reference.
    assert_reference_outside_the_gap(&text, &text, &frames, T0 + 2_600 * MS);
    // In between, whatever differs from the reference was decided without web-2 and says so.
    let want = reference(&frames);
    for line in text.lines() {
        let r: serde_json::Value = serde_json::from_str(line).expect("json");
        if !want.contains(&row(&r)) {
            assert_eq!(
                r["completeness"]["complete"], false,
                "a partial decision is marked: {r}"
            );
        }
    }
}

#[test]
fn a_killed_manager_comes_back_with_its_events_and_loses_no_report() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let frames = setup(d, 400);
    let (_server, port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{port}");
    let with_store = |out: &str, events: bool| {
        let mut flags = vec!["--store", "m.sqlite", "--no-api", "--until-finished", "-o", out];
        if events {
            flags.extend(["--events", "events.clarion"]);
        }
        Guard::new(manager(d, &nats, &flags))
    };
    let first = with_store("net1.jsonl", true);
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let agents = paced_agents(d, &nats);
    sleep_until(start, Duration::from_millis(1_500));
    first.kill();
    sleep_until(start, Duration::from_millis(2_000));
    // No --events: the store brings them back.
    let second = with_store("net2.jsonl", false);
    let out = wait(second.take(), "the restarted manager", Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    wait_agents(agents, Duration::from_secs(30));
    let n = clarion_lang::check(EVENTS).expect("events").len();
    assert!(err.contains(&format!("{n} event(s) restored")), "{err}");
    assert!(
        err.contains("restarted (last alive"),
        "the restart is said: {err}"
    );
    assert!(!err.contains("gap:"), "no gap: {err}");
    // The agents sent again what the first manager had not acknowledged:
    // every window is decided by one of the two, as the reference decides it.
    let before = std::fs::read_to_string(d.join("net1.jsonl")).expect("reports");
    let after = std::fs::read_to_string(d.join("net2.jsonl")).expect("reports");
    let mut both = rows_of_jsonl(&before);
    both.extend(rows_of_jsonl(&after));
    assert_eq!(both, reference(&frames));
}

#[test]
fn everyone_reconnects_when_the_nats_server_comes_back() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let frames = setup(d, 700);
    let (first, port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{port}");
    let manager = Guard::new(manager(d, &nats, &REPLAY));
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let agents = paced_agents(d, &nats);
    sleep_until(start, Duration::from_millis(1_500));
    first.kill();
    // Down for longer than a host may be silent (3 s): the manager re-sends every host's triggers.
    sleep_until(start, Duration::from_millis(5_000));
    let _second = restart_server(&server, port);
    let out = wait(manager.take(), "the manager", Duration::from_secs(90));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    wait_agents(agents, Duration::from_secs(60));
    assert!(
        err.contains("is back after"),
        "hosts silent during the outage get their triggers again: {err}"
    );
    let text = std::fs::read_to_string(d.join("net.jsonl")).expect("reports");
    assert_reference_outside_the_gap(&text, &text, &frames, T0 + 6_500 * MS);
}

/// `clarion manager --store FILE` with `flags`, no API, on a NATS server
/// that is not there (a manager that gets past its store fails on it).
fn manager_on_store(d: &std::path::Path, store: &str, flags: &[&str]) -> std::process::Output {
    clarion()
        .args([
            "manager",
            "--insecure",
            "--nats",
            "nats://127.0.0.1:1",
            "--inventory",
            "hosts.txt",
            "--no-api",
        ])
        .args(["--store", store])
        .args(flags)
        .current_dir(d)
        .output()
        .expect("runs")
}

#[test]
fn an_empty_or_foreign_store_is_refused_unless_init() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("hosts.txt"), INVENTORY).expect("inventory");
    std::fs::write(d.join("empty.sqlite"), b"").expect("empty");
    std::fs::write(d.join("notes.txt"), b"not a database\n").expect("text");

    let out = manager_on_store(d, "empty.sqlite", &[]);
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("empty.sqlite is empty") && e.contains("--init"), "{e}");
    assert_eq!(std::fs::metadata(d.join("empty.sqlite")).expect("kept").len(), 0);

    let out = manager_on_store(d, "notes.txt", &["--init"]);
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("notes.txt is not a Clarion event store"), "{e}");
    assert_eq!(
        std::fs::read(d.join("notes.txt")).expect("kept"),
        b"not a database\n"
    );

    // --init makes the empty file a store; a missing file is created without it.
    for (store, flags) in [("empty.sqlite", &["--init"][..]), ("new.sqlite", &[])] {
        let out = manager_on_store(d, store, flags);
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            e.contains("cannot connect to the NATS server"),
            "past the store: {e}"
        );
        assert!(
            clarion_store::Store::open(&d.join(store)).is_ok(),
            "{store} is a store"
        );
    }
}

#[test]
fn events_edited_into_the_store_are_checked_as_the_api_checks_them() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("hosts.txt"), INVENTORY).expect("inventory");
    let store = clarion_store::Store::open(&d.join("m.sqlite")).expect("store");
    let put = |id: u64, name: &str, source: &str| {
        store
            .put(&clarion_store::StoredEvent {
                id,
                name: name.into(),
                source: source.into(),
                added_ns: T0,
            })
            .expect("put");
    };
    put(0, "net", "event net\n  when sum(volume) > 1000\n  across hosts\n");
    // A host's own event, which the API refuses: not network-wide.
    put(1, "own", "event own\n  when sum(volume) > 1000\n");
    put(2, "bad", "event bad\n  when sum(volum) > 1000\n  across hosts\n");
    drop(store);
    let (_server, nats_port) = start_server(&server);
    let out = manager(
        d,
        &format!("nats://127.0.0.1:{nats_port}"),
        &["--store", "m.sqlite", "--no-api", "--duration", "1s"],
    )
    .wait_with_output()
    .expect("manager runs");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{e}");
    assert!(e.contains("1 event(s) restored"), "{e}");
    assert!(
        e.contains("stored event `own` not installed") && e.contains("across hosts"),
        "{e}"
    );
    assert!(e.contains("stored event `bad` not installed"), "{e}");
}
