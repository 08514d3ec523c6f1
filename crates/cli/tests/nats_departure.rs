//! A host that leaves costs the others nothing (issue 35): an agent that
//! says goodbye is polled no more, so the decisions that would have waited
//! for its answer (the poll timeout, here 30 s) are made at once, without
//! it. The manager says when it left.
//!
//! Four agents replay their captures at the capture's pace through a real
//! nats-server; web-4's capture ends after 1 s of the 3 s, and it leaves
//! (with a second's linger to answer the polls of its last windows). The
//! network-wide reports must equal the reference evaluator's over the same
//! traffic with web-4 seeing nothing from the second on, every partial one
//! must name web-4 (`completeness.missing_hosts`), and no poll may have
//! waited for its timeout.

mod bus;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use bus::*;

/// `clarion agent` for web-`i`, replaying its capture at the capture's
/// pace, lingering `linger` after its end.
fn agent(d: &Path, url: &str, i: usize, linger: &str) -> Guard {
    let host = format!("web-{i}");
    let pcap = format!("hosts/{host}.pcap");
    agent_with(d, url, &host, &pcap, &["--speed", "1", "--linger", linger])
}

/// Every partial report of `net.jsonl` in `d` names web-4 as the host
/// that did not answer, and only those name any; how many do.
fn partial_reports_name_web_4(d: &Path) -> usize {
    let text = std::fs::read_to_string(d.join("net.jsonl")).expect("reports");
    let mut named = 0;
    for line in text.lines() {
        let r: serde_json::Value = serde_json::from_str(line).expect("a JSON report");
        let c = &r["completeness"];
        let missing = c["missing_hosts"].clone();
        if c["complete"] == false {
            assert_eq!(missing, serde_json::json!(["web-4"]), "{line}");
            named += 1;
        } else {
            assert!(missing.is_null(), "{line}");
        }
    }
    named
}

#[test]
fn a_host_that_says_goodbye_is_not_polled_and_the_others_are_decided_at_once() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let frames = setup(d, 300);
    // web-4 sees its packets of the first second only (a window boundary
    // of every event: 10 and 20 ms).
    let cut = T0 + 1_000 * MS;
    let early: Vec<_> = host_frames(&frames, 3, 0)
        .into_iter()
        .filter(|(ts, _)| *ts < cut)
        .collect();
    write_pcap(&d.join("hosts/web-4.pcap"), &early);
    let want = reference_seen(EVENTS, &frames, |h, ts| h != 3 || ts < cut);
    let after: Vec<_> = want.iter().filter(|r| r.1 >= cut).collect();
    assert!(after.len() > 10, "reports after web-4 left: {after:?}");

    let (_server, port) = start_server(&server);
    let url = format!("nats://127.0.0.1:{port}");
    let flags: Vec<&str> = REPLAY.iter().copied().chain(["--poll-timeout", "30s"]).collect();
    let manager = manager(d, &url, &flags);
    let agents: Vec<Guard> = (1..=4)
        .map(|i| agent(d, &url, i, if i == 4 { "1s" } else { "60s" }))
        .collect();
    // Without the goodbye, every window after web-4 left would wait 30 s.
    let m = wait(manager, "the manager", Duration::from_secs(120));
    let m_err = String::from_utf8_lossy(&m.stderr).to_string();
    wait_agents(agents, Duration::from_secs(60));
    assert!(m.status.success(), "{m_err}");
    assert!(
        m_err.contains("host web-4 left (it said goodbye)"),
        "the manager says when it left: {m_err}"
    );
    assert!(m_err.contains("host web-1 registered: 3 trigger(s)"), "{m_err}");
    assert!(
        m_err.contains("(0 unanswered,"),
        "no poll waited for its timeout: {m_err}"
    );
    let not_sent: u64 = m_err
        .split(" not sent to hosts that had left")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.replace(',', "").parse().ok())
        .unwrap_or(0);
    assert!(not_sent > 0, "web-4's polls were given up at once: {m_err}");

    // Every partial report names the host that did not answer, and only those.
    let named = partial_reports_name_web_4(d);
    assert!(named > 0, "some reports were decided without web-4");
    assert_reports_equal(d, &want, &format!("manager: {m_err}"));
}

/// A killed agent says no goodbye: after 3 s of silence the manager takes
/// it for gone, gives up its polls in flight and decides the others'
/// windows without it, naming it in every partial report.
#[test]
fn a_killed_host_is_taken_for_gone_after_its_silence() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // 6 s of traffic: web-4 is killed after 1.5 s of it.
    setup(d, 600);
    let (_server, port) = start_server(&server);
    let url = format!("nats://127.0.0.1:{port}");
    let (manager, _api) = api_manager(
        d,
        &url,
        &[
            "--events",
            "events.clarion",
            "--no-store",
            "--api-no-auth",
            "-o",
            "net.jsonl",
            "--poll-timeout",
            "30s",
        ],
    );
    // A short linger: no --until-finished, so no manager says it is done.
    let mut agents: Vec<Guard> = (1..=4).map(|i| agent(d, &url, i, "2s")).collect();
    let web4 = agents.pop().expect("four agents");
    std::thread::sleep(Duration::from_millis(1_500));
    web4.kill();
    wait_agents(agents, Duration::from_secs(90));
    let out = manager.terminate("the manager");
    let m_err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{m_err}");
    assert!(m_err.contains("host web-4 left (silent for"), "{m_err}");
    // A poll waiting for its 30 s timeout would be counted unanswered (and
    // hold the run): those to web-4 were given up once it was taken for gone.
    assert!(m_err.contains("(0 unanswered,"), "{m_err}");
    let named = partial_reports_name_web_4(d);
    assert!(named > 0, "reports after web-4 was killed name it: {m_err}");
}

/// A live agent killed and started again says, as it registers, from
/// which window on it can answer (its monitor kept nothing from before);
/// the manager says so and polls it for no earlier window. Needs root (a
/// veth pair); skipped, saying why, otherwise.
#[test]
fn a_restarted_live_agent_says_from_which_window_it_answers() {
    let Some(server) = require_server() else {
        return;
    };
    let Some(veth) = Veth::new() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    setup(d, 10);
    let (_server, port) = start_server(&server);
    let url = format!("nats://127.0.0.1:{port}");
    let m = Guard::new(manager(
        d,
        &url,
        &["--events", "events.clarion", "--no-store", "--no-api"],
    ));
    let live = |n: u32| {
        let err = d.join(format!("agent-{n}.err"));
        let child = clarion()
            .args([
                "agent",
                "--nats",
                &url,
                "--host",
                "web-1",
                "-i",
                &veth.a,
                "--duration",
                "60s",
            ])
            .current_dir(d)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).expect("a file"))
            .spawn()
            .expect("agent starts");
        let t = std::time::Instant::now();
        while !std::fs::read_to_string(&err)
            .unwrap_or_default()
            .contains("capturing on")
        {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "agent {n}: {}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Guard::new(child)
    };
    live(1).kill();
    let again = live(2);
    let out = m.terminate("the manager");
    again.kill();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "host web-1 registered again: 3 trigger(s); it restarted and answers for windows from 20"
        ),
        "{err}"
    );
}
