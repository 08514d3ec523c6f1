//! The NATS transport end to end: a real `nats-server`, one `clarion
//! manager`, four `clarion agent`s each replaying its own host's capture.
//! The network-wide events fire exactly in the windows and groups where
//! the reference evaluator, run over all four hosts' traffic together, says
//! they hold (with the same values), and the embedded transport (`clarion
//! run --inventory` on the whole capture) gives the same reports.
//!
//! Skipped, saying so, where `nats-server` is not installed (`.ci/run`
//! installs it: Debian package `nats-server`).

mod bus;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use bus::*;

#[test]
fn four_agents_and_a_manager_over_nats_equal_the_reference_and_the_embedded_transport() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let frames = setup(d, 200);
    let want = reference(&frames);
    let fired: BTreeSet<&str> = want.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(fired.len(), 3, "every event should fire somewhere: {want:?}");
    assert!(want.len() > 20 && want.len() < 300, "{} reports", want.len());

    let (_server, port) = start_server(&server);
    let url = format!("nats://127.0.0.1:{port}");
    let m = run_network(d, &url, &["--poll-timeout", "20s"], &["--linger", "60s"]);
    let m_err = String::from_utf8_lossy(&m.stderr).to_string();
    assert!(m.status.success(), "{m_err}");
    assert!(m_err.contains("4 registrations"), "{m_err}");
    assert!(
        m_err.contains("0 partial"),
        "every host answered every poll: {m_err}"
    );
    let got = rows_of_jsonl(&std::fs::read_to_string(d.join("net.jsonl")).expect("reports"));
    let missed: Vec<_> = want.difference(&got).collect();
    let spurious: Vec<_> = got.difference(&want).collect();
    assert!(
        missed.is_empty() && spurious.is_empty(),
        "missed {missed:#?}\nspurious {spurious:#?}"
    );

    let embedded = clarion()
        .args([
            "run",
            "--pcap",
            "all.pcap",
            "--inventory",
            "hosts.txt",
            "--events",
            "events.clarion",
        ])
        .args(["--format", "json", "--quiet"])
        .current_dir(d)
        .output()
        .expect("run");
    assert!(
        embedded.status.success(),
        "{}",
        String::from_utf8_lossy(&embedded.stderr)
    );
    assert_eq!(rows_of_jsonl(&String::from_utf8_lossy(&embedded.stdout)), got);
}

#[test]
fn the_demo_script_over_nats_equals_the_embedded_run() {
    if require_server().is_none() {
        return;
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let bin = assert_cmd::cargo::cargo_bin("clarion");
    let demo = std::process::Command::new("bash")
        .arg("scripts/nats-demo.sh")
        .env("CLARION", &bin)
        .current_dir(root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the demo runs");
    let demo = wait(demo, "scripts/nats-demo.sh", Duration::from_secs(60));
    assert!(demo.status.success(), "{}", String::from_utf8_lossy(&demo.stderr));
    let embedded = clarion()
        .args([
            "run",
            "--pcap",
            "examples/demo.pcap",
            "--inventory",
            "examples/demo-hosts.txt",
        ])
        .args([
            "--events",
            "examples/network.clarion",
            "--format",
            "json",
            "--quiet",
        ])
        .current_dir(root)
        .output()
        .expect("run");
    let want = rows_of_jsonl(&String::from_utf8_lossy(&embedded.stdout));
    assert!(!want.is_empty());
    assert_eq!(rows_of_jsonl(&String::from_utf8_lossy(&demo.stdout)), want);
}

#[test]
fn with_jetstream_fired_events_are_kept_in_a_stream() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    setup(d, 60);
    let store = d.join("js");
    let (_server, port) = start_server_with(&server, &["-js", "-sd", &store.to_string_lossy()]);
    let url = format!("nats://127.0.0.1:{port}");
    let m = run_network(d, &url, &["--jetstream"], &[]);
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let written = std::fs::read_to_string(d.join("net.jsonl")).expect("reports");
    assert!(!written.is_empty());
    // Read the stream back after the fact, as a durable consumer would.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let stored: Vec<String> = rt.block_on(async {
        let client = async_nats::connect(&url).await.expect("connects");
        let js = async_nats::jetstream::new(client);
        let mut stream = js.get_stream("CLARION_EVENTS").await.expect("the stream exists");
        let n = stream.info().await.expect("info").state.messages;
        let mut out = Vec::new();
        for seq in 1..=n {
            let m = stream.get_raw_message(seq).await.expect("message");
            out.push(String::from_utf8_lossy(&m.payload).to_string());
        }
        out
    });
    assert_eq!(rows_of_jsonl(&stored.join("\n")), rows_of_jsonl(&written));
    assert_eq!(stored.len(), written.lines().count());

    // Without JetStream on the server, --jetstream is refused with the reason.
    let (_plain, plain_port) = start_server(&server);
    let refused = clarion()
        .args([
            "manager",
            "--insecure",
            "--nats",
            &format!("nats://127.0.0.1:{plain_port}"),
            "--inventory",
            "hosts.txt",
        ])
        .args([
            "--events",
            "events.clarion",
            "--jetstream",
            "--no-store",
            "--no-api",
        ])
        .current_dir(d)
        .output()
        .expect("runs");
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("nats-server -js"));
}
