//! A host holding more triggers than one NATS message carries registers
//! (issue 33): NATS refuses a message over its `max_payload` (1 MB by
//! default, about 2,000 triggers), so a registration reply with all of
//! them never arrived and the agent said "no manager answered". The agent
//! now takes its triggers a page at a time.
//!
//! 3,000 events that never fire are placed on web-1 beside the usual
//! three; four agents replay their captures through a real nats-server.
//! web-1 must install all 3,003 triggers, and the network-wide reports
//! must equal the reference evaluator's.

mod bus;

use std::time::Duration;

use bus::*;

const BULK: usize = 3_000;

/// `n` events on web-1's addresses (10.0.128.0/26) that no packet of the
/// generated traffic fires: a million packets in 10 ms.
fn quiet_events(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "event quiet{i} filter dst_ip in 10.0.128.{}/32 and dst_port = 9 \
                 when count(packets) > 1000000 per dst_ip every 10ms across hosts\n",
                i % 64
            )
        })
        .collect()
}

#[test]
fn a_host_with_thousands_of_triggers_registers_a_page_at_a_time() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let frames = setup(d, 100);
    let want = reference(&frames);
    assert!(!want.is_empty(), "the usual events fire");
    std::fs::write(
        d.join("events.clarion"),
        format!("{EVENTS}\n{}", quiet_events(BULK)),
    )
    .expect("events");

    let (_server, port) = start_server(&server);
    let url = format!("nats://127.0.0.1:{port}");
    let flags: Vec<&str> = REPLAY.iter().copied().chain(["--poll-timeout", "20s"]).collect();
    let manager = manager(d, &url, &flags);
    let agents: Vec<Guard> = (1..=4)
        .map(|i| {
            let host = format!("web-{i}");
            let pcap = format!("hosts/{host}.pcap");
            agent_with(d, &url, &host, &pcap, &["--linger", "60s"])
        })
        .collect();
    let m = wait(manager, "the manager", Duration::from_secs(180));
    let m_err = String::from_utf8_lossy(&m.stderr).to_string();
    let mut said = Vec::new();
    for a in agents {
        let o = wait(a.take(), "an agent", Duration::from_secs(60));
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{err}\nmanager: {m_err}");
        said.push(err);
    }
    assert!(m.status.success(), "{m_err}");
    assert!(
        said[0].contains(&format!(": {} network-wide trigger(s)", BULK + 3)),
        "web-1 installs every trigger: {}",
        said[0]
    );
    for other in &said[1..] {
        assert!(other.contains(": 3 network-wide trigger(s)"), "{other}");
    }
    assert!(
        m_err.contains("4 registrations"),
        "the pages are not registrations: {m_err}"
    );
    assert!(
        m_err.contains("0 partial"),
        "every host answered every poll: {m_err}"
    );
    assert_reports_equal(d, &want, &m_err);
}
