//! The manager's control API through `clarion events`: events added,
//! listed, shown and removed at runtime (all or none, with the language's
//! errors), kept across a restart under the same ids, a token required when
//! asked for (and refused beyond loopback without one), fired events
//! streamed to `clarion events watch` exactly as the manager writes them.

mod bus;

use std::process::{Child, Output, Stdio};
use std::time::Duration;

use bus::*;

fn events(api: &str, args: &[&str]) -> Output {
    clarion()
        .args(["events", "--api", api])
        .args(args)
        .env_remove("CLARION_API_TOKEN")
        .output()
        .expect("clarion events runs")
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn refused(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stdout));
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// A manager on `nats` with its API on a free port, reporting to
/// `net.jsonl`, once the API answers; and the API's port.
fn manager_with_api(dir: &std::path::Path, nats: &str, extra: &[&str]) -> (Guard, u16) {
    let mut flags = vec!["-o", "net.jsonl"];
    flags.extend_from_slice(extra);
    api_manager(dir, nats, &flags)
}

#[test]
fn events_are_managed_at_runtime_kept_across_restarts_and_streamed() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let frames = setup(d, 100);
    std::fs::write(
        d.join("bad.clarion"),
        "event x\n  when sum(volum) > 1\n  across hosts\n",
    )
    .expect("bad");
    std::fs::write(d.join("host.clarion"), "event h\n  when sum(volume) > 1\n").expect("host event");

    let (_server, nats_port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{nats_port}");
    let (m, port) = manager_with_api(d, &nats, &["--store", "m.sqlite"]);
    let api = format!("http://127.0.0.1:{port}");

    assert!(ok(&events(&api, &["list"])).is_empty());
    let e = refused(&events(&api, &["add", &d.join("bad.clarion").to_string_lossy()]));
    assert!(
        e.contains("volum") && e.contains("volume"),
        "the language's error, with the fix: {e}"
    );
    let e = refused(&events(&api, &["add", &d.join("host.clarion").to_string_lossy()]));
    assert!(e.contains("across hosts"), "{e}");
    let added = ok(&events(
        &api,
        &["add", &d.join("events.clarion").to_string_lossy()],
    ));
    assert!(
        added.contains("service_load_spike (id 0): on 4 host(s)"),
        "{added}"
    );
    assert!(
        added.contains("sum(volume) > 10000"),
        "the split threshold: {added}"
    );
    let e = refused(&events(
        &api,
        &["add", &d.join("events.clarion").to_string_lossy()],
    ));
    assert!(e.contains("remove it first"), "{e}");
    let shown = ok(&events(&api, &["show", "big_packets_to_a_host"]));
    assert!(shown.contains("every 20ms\n  across hosts"), "{shown}");
    let e = refused(&events(&api, &["rm", "nope"]));
    assert!(e.contains("no network-wide event is named `nope`"), "{e}");
    let hosts = ok(&events(&api, &["hosts"]));
    assert!(hosts.contains("web-3") && hosts.contains("unknown"), "{hosts}");

    // Restart: the events come back under the same ids.
    let before = ok(&events(&api, &["list"]));
    let out = m.terminate("the manager");
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && summary.contains("0 registrations"),
        "{summary}"
    );
    let m = restart_api_manager(
        d,
        &nats,
        port,
        &["-o", "net.jsonl", "--store", "m.sqlite", "--until-finished"],
    );
    assert_eq!(ok(&events(&api, &["list"])), before);

    // Fired events reach `watch` as the manager writes them.
    let watch: Child = clarion()
        .args(["events", "--api", &api, "watch"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("watch starts");
    std::thread::sleep(Duration::from_millis(300));
    let agents: Vec<Child> = (1..=4)
        .map(|i| {
            let host = format!("web-{i}");
            clarion()
                .args([
                    "agent",
                    "--nats",
                    &nats,
                    "--host",
                    &host,
                    "--pcap",
                    &format!("hosts/{host}.pcap"),
                ])
                .current_dir(d)
                .stderr(Stdio::null())
                .spawn()
                .expect("agent starts")
        })
        .collect();
    let out = wait(m.take(), "the manager", Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for a in agents {
        assert!(wait(a, "an agent", Duration::from_secs(30)).status.success());
    }
    let watched = wait(watch, "watch", Duration::from_secs(10));
    let written = std::fs::read_to_string(d.join("net.jsonl")).expect("reports");
    assert!(written.lines().count() > 10, "{written}");
    assert_eq!(
        rows_of_jsonl(&String::from_utf8_lossy(&watched.stdout)),
        rows_of_jsonl(&written)
    );
    assert_eq!(rows_of_jsonl(&written), reference(&frames));
    let e = String::from_utf8_lossy(&watched.stderr);
    assert!(e.contains("closed the stream"), "watch says why it ended: {e}");
}

#[test]
fn a_token_is_required_when_given_and_beyond_loopback() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("hosts.txt"), INVENTORY).expect("inventory");
    let open = clarion()
        .args([
            "manager",
            "--inventory",
            "hosts.txt",
            "--no-store",
            "--api",
            "0.0.0.0:0",
        ])
        .env_remove("CLARION_API_TOKEN")
        .current_dir(d)
        .output()
        .expect("runs");
    assert_eq!(open.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&open.stderr).contains("--api-token"));

    let (_server, nats_port) = start_server(&server);
    let (m, port) = manager_with_api(
        d,
        &format!("nats://127.0.0.1:{nats_port}"),
        &["--no-store", "--api-token", "s3cret"],
    );
    let api = format!("http://127.0.0.1:{port}");
    let e = refused(&events(&api, &["list"]));
    assert!(e.contains("Bearer"), "{e}");
    let e = refused(&events(&api, &["--token", "wrong", "list"]));
    assert!(e.contains("Bearer"), "{e}");
    ok(&events(&api, &["--token", "s3cret", "list"]));
    let anonymous = clarion_control::Client::new(&api, None);
    assert!(anonymous.list().is_err());
    let health = std::net::TcpStream::connect(("127.0.0.1", port)).and_then(|mut s| {
        use std::io::{Read, Write};
        s.write_all(b"GET /v1/health HTTP/1.0\r\n\r\n")?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        Ok(text)
    });
    assert!(
        health.expect("health answers").contains("200 OK"),
        "health needs no token"
    );
    m.terminate("the manager");
}
