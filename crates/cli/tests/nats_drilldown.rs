//! Network-wide drill-downs over NATS: when the manager decides that a
//! network-wide event fired, it installs the narrowed instance on the
//! agents for its windows (from the window after the decision), extends it
//! when it fires again, and decides it like any network-wide event.
//!
//! Agents replay paced, like live hosts: an instance's first window starts
//! at most one window of the firing event after the decision, so the
//! install has that long to reach the agents. One that arrives later
//! starts at the next window on that agent, and the decisions of the
//! windows it missed are partial and marked incomplete. At the capture's
//! own pace that is 10 ms, less than the decision's p99 with four agents,
//! a manager and a server on two loaded cores (CI saw 78 % of the
//! instance reports once); at half the pace it is 20 ms.

mod bus;

use std::collections::BTreeSet;
use std::time::Duration;

use bus::*;

const EVENTS_DD: &str = "\
event service_load_spike
  filter dst_ip in 10.0.128.0/24 and dst_port = 80
  when sum(volume) > 40KB
  per dst_ip/24
  every 10ms
  across hosts
  then install busy_sources on dst_ip for 50ms

event busy_sources
  filter dst_ip in 10.0.128.0/24
  when sum(volume) > 2KB
  per src_ip/24
  every 10ms
  across hosts
  on demand
";

/// The complete reports of a JSON-lines text, as rows.
fn complete_rows(text: &str) -> BTreeSet<Row> {
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON report"))
        .filter(|r| r["completeness"]["complete"].as_bool() == Some(true))
        .map(|r| row(&r))
        .collect()
}

#[test]
fn a_fired_network_wide_event_installs_its_instance_on_the_agents() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let frames = setup(d, 250);
    std::fs::write(d.join("events.clarion"), EVENTS_DD).expect("events");
    let (_server, port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{port}");
    let manager = Guard::new(manager(d, &nats, &REPLAY));
    std::thread::sleep(Duration::from_millis(300));
    let agents = paced_agents_at(d, &nats, "0.5");
    let out = wait(manager.take(), "the manager", Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    wait_agents(agents, Duration::from_secs(30));
    let text = std::fs::read_to_string(d.join("net.jsonl")).expect("reports");
    let want = reference_of(EVENTS_DD, &frames);
    let is_instance = |r: &Row| r.0.starts_with("busy_sources[");
    let (want_parent, want_instance): (BTreeSet<Row>, BTreeSet<Row>) =
        want.into_iter().partition(|r| !is_instance(r));
    let got = rows_of_jsonl(&text);
    let got_parent: BTreeSet<Row> = got.iter().filter(|r| !is_instance(r)).cloned().collect();
    assert_eq!(got_parent, want_parent, "the firing event equals the reference");
    assert!(
        want_instance.len() >= 20,
        "the scenario installs instances: {}",
        want_instance.len()
    );
    // Every complete instance report is the reference's; nearly all of the
    // reference's are there (a late install leaves a partial window).
    let complete: BTreeSet<Row> = complete_rows(&text).into_iter().filter(is_instance).collect();
    let wrong: Vec<&Row> = complete.difference(&want_instance).collect();
    assert!(
        wrong.is_empty(),
        "complete instance reports the reference does not have: {wrong:?}\n{err}"
    );
    let found = want_instance.iter().filter(|r| got.contains(*r)).count();
    eprintln!(
        "{found} of {} instance reports as the reference says, {} complete",
        want_instance.len(),
        complete.len()
    );
    assert!(
        found * 10 >= want_instance.len() * 9,
        "{found} of {} instance reports\n{err}",
        want_instance.len()
    );
    assert!(err.contains("drill-down instances"), "{err}");
}

/// Issue 35: a manager killed (as in a crash) and restarted keeps the
/// drill-down instances its events' firings installed: the same instances
/// under the same ids, said at its start.
#[test]
fn a_restarted_manager_keeps_its_drill_down_instances() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    setup(d, 250);
    // Without `for`: an instance lasts until removed, so it is there to keep.
    let events = EVENTS_DD.replace(" for 50ms", "");
    std::fs::write(d.join("events.clarion"), &events).expect("events");
    let (_server, port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{port}");
    let flags: &[&str] = &[
        "--events",
        "events.clarion",
        "--store",
        "m.sqlite",
        "-o",
        "net.jsonl",
    ];
    let (manager, api_port) = api_manager(d, &nats, flags);
    let token = std::fs::read_to_string(test_token_file()).expect("the API token");
    let api =
        clarion_control::Client::new(&format!("http://127.0.0.1:{api_port}"), Some(token.trim().into()));
    let agents = paced_agents_at(d, &nats, "0.5");
    let instances = || -> Vec<(u64, String)> {
        let mut v: Vec<(u64, String)> = api
            .list()
            .expect("the events")
            .into_iter()
            .filter(|e| e.name.starts_with("busy_sources["))
            .map(|e| (e.id, e.name))
            .collect();
        v.sort();
        v
    };
    let t = std::time::Instant::now();
    while instances().is_empty() {
        assert!(t.elapsed() < Duration::from_secs(30), "no instance was installed");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The manager stores its instances once a second.
    std::thread::sleep(Duration::from_millis(2500));
    let before = instances();
    manager.kill();

    let manager = restart_api_manager(d, &nats, api_port, flags);
    let after = instances();
    let out = manager.terminate("the restarted manager");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!before.is_empty());
    // Instances installed in the last second before the kill may be lost
    // (the next firing installs them again); the rest are kept as they were.
    let kept: Vec<&(u64, String)> = before.iter().filter(|i| after.contains(i)).collect();
    assert!(
        kept.len() * 2 >= before.len() && !kept.is_empty(),
        "before the kill {before:?}, after the restart {after:?}\n{err}"
    );
    assert!(
        err.contains("drill-down instance(s) restored from m.sqlite"),
        "{err}"
    );
    wait_agents(agents, Duration::from_secs(60));
}
