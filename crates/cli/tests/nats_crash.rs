//! Fault injection: the manager killed with SIGKILL at random moments while
//! four agents send satisfaction reports, and started again on its store.
//! Agents keep every satisfaction report until a manager acknowledges it
//! (after its decision is written), so between them the two managers
//! write every network-wide report the reference evaluator finds: none is
//! lost, whatever the moment (mid-decision, polls in flight, reports
//! written but not yet acknowledged, which are decided again).
//!
//! The history the managers keep in their store (`--report-history`)
//! loses none either: a report is stored before its satisfaction reports
//! are acknowledged, so one a kill kept out of the store is decided (and
//! stored) again by the next manager.
//!
//! The moments come from a seed printed by the test (`CLARION_CRASH_SEED`
//! repeats a run); `CLARION_CRASH_RUNS` sets how many (20 by default).

mod bus;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use bus::*;

/// Rows of a manager's JSON lines; a last line cut by the kill is not a
/// report (it was not acknowledged, so the next manager decides it).
fn rows_written(text: &str) -> BTreeSet<Row> {
    let rows = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok());
    rows.map(|v| row(&v)).collect()
}

fn agent(d: &std::path::Path, nats: &str, i: usize) -> Guard {
    let host = format!("web-{i}");
    let pcap = format!("hosts/web-{i}.pcap");
    let child = clarion()
        .args(["agent", "--nats", nats, "--host", &host, "--pcap", &pcap])
        .args(["--speed", "2", "--linger", "60s", "-q"])
        .current_dir(d)
        .stderr(Stdio::piped())
        .spawn()
        .expect("agent starts");
    Guard::new(child)
}

fn manager_on(d: &std::path::Path, nats: &str, out: &str) -> Guard {
    let flags = [
        "--store",
        "m.sqlite",
        "--no-api",
        "--until-finished",
        "--events",
        "events.clarion",
        "-o",
        out,
    ];
    Guard::new(manager(d, nats, &flags))
}

#[test]
fn no_network_wide_report_is_lost_when_the_manager_is_killed_at_random_moments() {
    let Some(server) = require_server() else {
        return;
    };
    let runs: u64 = std::env::var("CLARION_CRASH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("CLARION_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| Instant::now().elapsed().as_nanos() as u64 ^ std::process::id() as u64);
    eprintln!("CLARION_CRASH_SEED={seed}");
    let mut rng = Lcg(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // 2 s of traffic, replayed at twice its pace.
    let frames = setup(d, 200);
    let want = reference(&frames);
    assert!(want.len() > 20, "the reference fires: {}", want.len());
    let (_server, port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{port}");
    for run in 0..runs {
        let _ = std::fs::remove_file(d.join("m.sqlite"));
        // The agents replay for about 1 s: killed within it.
        let kill_at = Duration::from_millis(100 + rng.next(800));
        let down_for = Duration::from_millis(50 + rng.next(1_500));
        let first = manager_on(d, &nats, "net1.jsonl");
        std::thread::sleep(Duration::from_millis(300));
        let start = Instant::now();
        let agents: Vec<Guard> = (1..=4).map(|i| agent(d, &nats, i)).collect();
        std::thread::sleep(kill_at);
        let mut first = first.take();
        let ended = first.try_wait().expect("wait");
        assert!(
            ended.is_none(),
            "run {run}: the first manager ended before it was killed ({ended:?}): the replay is too short for {kill_at:?}"
        );
        first.kill().expect("SIGKILL");
        let _ = first.wait();
        std::thread::sleep(down_for);
        let second = manager_on(d, &nats, "net2.jsonl");
        let out = wait(second.take(), "the restarted manager", Duration::from_secs(60));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "run {run}: {err}");
        wait_agents(agents, Duration::from_secs(30));
        let mut got = rows_written(&std::fs::read_to_string(d.join("net1.jsonl")).unwrap_or_default());
        got.extend(rows_written(
            &std::fs::read_to_string(d.join("net2.jsonl")).expect("reports"),
        ));
        let missing: Vec<_> = want.difference(&got).collect();
        let extra: Vec<_> = got.difference(&want).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "run {run} (seed {seed}: killed {kill_at:?} after the agents started, down {down_for:?}, {:?} in all): {} missing, {} not in the reference: {missing:?} {extra:?}\n{err}",
            start.elapsed(),
            missing.len(),
            extra.len()
        );
        assert!(
            !err.contains("gap:"),
            "run {run}: nothing to report as a gap: {err}"
        );
        let kept = history(&d.join("m.sqlite"));
        assert_eq!(
            kept.len(),
            want.len(),
            "run {run} (seed {seed}): one report per decision in the history"
        );
        let kept: BTreeSet<Row> = kept.iter().map(row).collect();
        assert!(
            kept == want,
            "run {run} (seed {seed}): the history's reports are the reference's: {:?} missing",
            want.difference(&kept).collect::<Vec<_>>()
        );
    }
}

/// The manager took an agent's registration and died with it unanswered
/// (stopped, then killed): the agent asks again within a quarter second,
/// so it registers with the restarted manager as soon as that is up. It
/// used to wait 2 s for the lost reply, replay 2 s behind the agents that
/// had registered before the kill, and the restarted manager's polls of
/// its windows timed out (2 s): a run of windows was decided without it,
/// their sums one host short (1 run in 60 of the test above).
#[test]
fn a_registration_lost_with_a_killed_manager_costs_no_window() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let frames = setup(d, 200);
    let want = reference(&frames);
    let (_server, port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{port}");
    let first = manager_on(d, &nats, "net1.jsonl");
    std::thread::sleep(Duration::from_millis(300));
    let mut agents: Vec<Guard> = (1..=3).map(|i| agent(d, &nats, i)).collect();
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: kill(2) on our own child, not waited for yet: its pid is ours.
    unsafe { libc::kill(first.id() as i32, libc::SIGSTOP) };
    agents.push(agent(d, &nats, 4));
    // Its registration reaches the stopped manager, which never answers.
    std::thread::sleep(Duration::from_millis(200));
    first.kill();
    std::thread::sleep(Duration::from_millis(300));
    let second = manager_on(d, &nats, "net2.jsonl");
    let out = wait(second.take(), "the restarted manager", Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    wait_agents(agents, Duration::from_secs(30));
    assert!(err.contains("host web-4 registered: 3 trigger(s)"), "{err}");
    assert!(!err.contains("did not answer polls"), "{err}");
    let mut got = rows_written(&std::fs::read_to_string(d.join("net1.jsonl")).unwrap_or_default());
    got.extend(rows_written(
        &std::fs::read_to_string(d.join("net2.jsonl")).expect("reports"),
    ));
    assert!(
        got == want,
        "missing: {:?}\nnot in the reference: {:?}\n{err}",
        want.difference(&got).collect::<Vec<_>>(),
        got.difference(&want).collect::<Vec<_>>()
    );
}

/// Every report the store's history keeps, newest first.
fn history(path: &std::path::Path) -> Vec<serde_json::Value> {
    let store = clarion_store::Store::open(path).expect("the store");
    let page = store
        .reports_page(&clarion_store::HistoryQuery {
            limit: 1 << 20,
            ..Default::default()
        })
        .expect("the history");
    page.reports
        .iter()
        .map(|r| serde_json::from_str(&r.report).expect("a JSON report"))
        .collect()
}

/// The NATS server gone under a running manager: SIGTERM still stops it,
/// within the bounded wait for the server at exit (5 s), saying what is
/// lost. (It used to wait for the server for ever.)
#[test]
fn a_manager_whose_server_is_gone_still_stops_when_told() {
    let Some(server) = require_server() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("hosts.txt"), INVENTORY).expect("inventory");
    let (nats, port) = start_server(&server);
    let url = format!("nats://127.0.0.1:{port}");
    let m = Guard::new(manager(d, &url, &["--no-store", "--no-api"]));
    std::thread::sleep(Duration::from_millis(500));
    nats.kill();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    // `terminate` waits up to 30 s and fails the test past it.
    let out = m.terminate("the manager, its server gone");
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(took < Duration::from_secs(20), "stopped in {took:?}: {err}");
    assert!(err.contains("the NATS server took nothing"), "{err}");
}
