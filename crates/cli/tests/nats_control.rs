//! The manager's control API through `clarion events`: events added,
//! listed, shown and removed at runtime (all or none, with the language's
//! errors), kept across a restart under the same ids, fired events
//! streamed to `clarion events watch` exactly as the manager writes them;
//! the API closed by default (a token generated at first start, kept
//! private, printed once, found by the client), open only on loopback and
//! only when asked for.

mod bus;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
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
    assert!(
        e.contains("bad.clarion:2:") && !e.contains("request:"),
        "the place in the file: {e}"
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

/// A manager on `url` with its API on a free loopback port, its token
/// file in the default place under `conf` (XDG_CONFIG_HOME), and `extra`.
fn default_token_manager(d: &Path, url: &str, conf: &Path, extra: &[&str]) -> (Guard, u16) {
    listen_on_free_port("the manager's control API", |port| {
        clarion()
            .env_remove("CLARION_API_TOKEN_FILE")
            .env("XDG_CONFIG_HOME", conf)
            .args([
                "manager",
                "--insecure",
                "--nats",
                url,
                "--inventory",
                "hosts.txt",
                "--no-store",
            ])
            .args(["--api", &format!("127.0.0.1:{port}")])
            .args(extra)
            .current_dir(d)
            .stderr(Stdio::piped())
            .spawn()
            .expect("manager starts")
    })
}

/// `clarion events` with the default token file under `conf`.
fn events_with_conf(api: &str, conf: &Path, args: &[&str]) -> Output {
    clarion()
        .env_remove("CLARION_API_TOKEN_FILE")
        .env("XDG_CONFIG_HOME", conf)
        .args(["events", "--api", api])
        .args(args)
        .output()
        .expect("clarion events runs")
}

#[test]
fn the_api_is_closed_by_default_with_a_token_made_once() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("hosts.txt"), INVENTORY).expect("inventory");
    let (_server, nats_port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{nats_port}");
    let conf = d.join("conf");
    let file = conf.join("clarion/api-token");

    // First start: a token generated in ~/.config/clarion/api-token (here
    // under XDG_CONFIG_HOME), private, printed with how to use it.
    let (m, port) = default_token_manager(d, &nats, &conf, &[]);
    let api = format!("http://127.0.0.1:{port}");
    let mode = std::fs::metadata(&file).expect("token file").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let token = std::fs::read_to_string(&file).expect("token").trim().to_string();
    assert_eq!(token.len(), 64, "{token}");
    // The same user's client finds it: nothing to type.
    ok(&events_with_conf(&api, &conf, &["list"]));
    // Anyone else gets 401, told which token was sent.
    let e = refused(&events_with_conf(&api, &d.join("elsewhere"), &["list"]));
    assert!(e.contains("Bearer") && e.contains("no token was sent"), "{e}");
    let e = refused(&events_with_conf(&api, &conf, &["--token", "wrong", "list"]));
    assert!(e.contains("the token given"), "{e}");
    assert!(clarion_control::Client::new(&api, None).list().is_err());
    assert!(clarion_control::Client::new(&api, Some(token.clone()))
        .list()
        .is_ok());
    let out = m.terminate("the manager");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(said.matches(&token).count(), 1, "printed once: {said}");
    assert!(
        said.contains(&format!(
            "curl -H \"Authorization: Bearer $(cat '{}')\"",
            file.display()
        )),
        "{said}"
    );

    // Next start: the same token, not printed again.
    let (m, port) = default_token_manager(d, &nats, &conf, &["-q"]);
    ok(&events_with_conf(
        &format!("http://127.0.0.1:{port}"),
        &conf,
        &["list"],
    ));
    let out = m.terminate("the manager");
    assert!(!String::from_utf8_lossy(&out.stderr).contains(&token));
    assert_eq!(std::fs::read_to_string(&file).expect("token").trim(), token);

    // A token file others may read is refused, as ssh refuses such a key.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let exposed = clarion()
        .env_remove("CLARION_API_TOKEN_FILE")
        .env("XDG_CONFIG_HOME", &conf)
        .args([
            "manager",
            "--insecure",
            "--nats",
            &nats,
            "--inventory",
            "hosts.txt",
            "--no-store",
        ])
        .args(["--api", "127.0.0.1:0"])
        .current_dir(d)
        .output()
        .expect("runs");
    assert_eq!(exposed.status.code(), Some(2));
    let e = String::from_utf8_lossy(&exposed.stderr);
    assert!(
        e.contains("chmod 600") && e.contains(&file.display().to_string()),
        "{e}"
    );
    let e = refused(&events_with_conf(&api, &conf, &["list"]));
    assert!(e.contains("chmod 600"), "the client refuses it too: {e}");
}

#[test]
fn no_auth_is_for_loopback_only_and_a_given_token_is_required() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("hosts.txt"), INVENTORY).expect("inventory");
    let open = clarion()
        .args([
            "manager",
            "--insecure",
            "--inventory",
            "hosts.txt",
            "--no-store",
            "--api",
            "0.0.0.0:0",
            "--api-no-auth",
        ])
        .current_dir(d)
        .output()
        .expect("runs");
    assert_eq!(open.status.code(), Some(2));
    let e = String::from_utf8_lossy(&open.stderr);
    assert!(e.contains("--api-no-auth") && e.contains("loopback"), "{e}");

    let (_server, nats_port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{nats_port}");
    let (m, port) = manager_with_api(d, &nats, &["--no-store", "--api-no-auth"]);
    let api = format!("http://127.0.0.1:{port}");
    assert!(
        clarion_control::Client::new(&api, None).list().is_ok(),
        "open on loopback"
    );
    m.terminate("the manager");

    let (m, port) = manager_with_api(d, &nats, &["--no-store", "--api-token", "s3cret"]);
    let api = format!("http://127.0.0.1:{port}");
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
