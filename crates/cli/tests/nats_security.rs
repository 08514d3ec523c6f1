//! Agents and the manager authenticate to NATS: with a token, and over TLS
//! with a CA the operator names. Without the credentials the connection is
//! refused with a message that says what to give.

mod bus;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use bus::*;
use serde_json::Value;

fn agent_alone(d: &Path, url: &str, flags: &[&str]) -> Output {
    clarion()
        .args([
            "agent",
            "--nats",
            url,
            "--host",
            "web-1",
            "--pcap",
            "hosts/web-1.pcap",
        ])
        .args(["--register-timeout", "2s"])
        .args(flags)
        .env_remove("CLARION_NATS_TOKEN")
        .current_dir(d)
        .output()
        .expect("agent runs")
}

#[test]
fn a_token_protected_server_admits_only_clients_with_the_token() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let frames = setup(d, 60);
    let (_server, port) = start_server_with(&server, &["--auth", "s3cret"]);
    let url = format!("nats://127.0.0.1:{port}");
    let denied = agent_alone(d, &url, &[]);
    assert_eq!(denied.status.code(), Some(1));
    let e = String::from_utf8_lossy(&denied.stderr);
    assert!(e.contains("cannot connect to the NATS server"), "{e}");
    let out = run_network(d, &url, &["--nats-token", "s3cret"], &["--nats-token", "s3cret"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got = rows_of_jsonl(&std::fs::read_to_string(d.join("net.jsonl")).expect("reports"));
    assert_eq!(got, reference(&frames));
}

fn openssl(d: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(d)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn over_tls_clients_trust_the_ca_they_are_given() {
    let Some(server) = require_server() else {
        return;
    };
    if Command::new("openssl").arg("version").output().is_err() {
        eprintln!("skipped: openssl is not installed");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let frames = setup(d, 60);
    // A private CA, and a certificate for 127.0.0.1 signed by it.
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=Clarion test CA",
        ],
    );
    std::fs::write(d.join("san.ext"), "subjectAltName = IP:127.0.0.1\n").expect("ext");
    openssl(
        d,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    let cert = d.join("server.pem");
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            &cert.to_string_lossy(),
        ],
    );
    let key = d.join("server.key");
    let (_server, port) = start_server_with(
        &server,
        &[
            "--tls",
            "--tlscert",
            &cert.to_string_lossy(),
            "--tlskey",
            &key.to_string_lossy(),
        ],
    );
    let url = format!("tls://127.0.0.1:{port}");
    let untrusted = agent_alone(d, &url, &[]);
    assert_eq!(untrusted.status.code(), Some(1));
    let e = String::from_utf8_lossy(&untrusted.stderr);
    assert!(e.contains("cannot connect to the NATS server"), "{e}");
    let out = run_network(d, &url, &["--nats-ca", "ca.pem"], &["--nats-ca", "ca.pem"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got = rows_of_jsonl(&std::fs::read_to_string(d.join("net.jsonl")).expect("reports"));
    assert_eq!(got, reference(&frames));
}

/// A raw client with `seed` publishes on `subject`; the server's answer to
/// it (a permissions violation, or nothing).
fn publish_as(url: &str, seed: &str, subject: &str) -> Option<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let client = async_nats::ConnectOptions::with_nkey(seed.trim().to_string())
            .event_callback(move |e| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(e.to_string());
                }
            })
            .connect(url)
            .await
            .expect("connects with its key");
        client
            .publish(subject.to_string(), "{}".into())
            .await
            .expect("hands over");
        client.flush().await.expect("flush");
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
        while let Ok(Some(e)) = tokio::time::timeout_at(deadline, rx.recv()).await {
            if e.contains("ermission") {
                return Some(e);
            }
        }
        None
    })
}

#[test]
fn with_per_host_keys_each_host_speaks_only_as_itself() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let frames = setup(d, 60);
    let made = clarion()
        .args(["credentials", "--inventory", "hosts.txt", "--out-dir", "creds"])
        .current_dir(d)
        .output()
        .expect("runs");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let mode = |f: &str| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(d.join("creds").join(f))
            .expect("written")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!((mode("web-1.nk"), mode("manager.nk")), (0o600, 0o600));
    // Never over keys already made.
    let again = clarion()
        .args(["credentials", "--inventory", "hosts.txt", "--out-dir", "creds"])
        .current_dir(d)
        .output()
        .expect("runs");
    assert_eq!(again.status.code(), Some(2));

    let conf = d.join("creds/nats-server.conf");
    let (_server, port) = start_server_with(&server, &["-c", conf.to_str().expect("utf-8")]);
    let url = format!("nats://127.0.0.1:{port}");
    let out = run_network(
        d,
        &url,
        &["--nats-nkey", "creds/manager.nk"],
        &["--nats-nkey", "creds/{host}.nk"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got = rows_of_jsonl(&std::fs::read_to_string(d.join("net.jsonl")).expect("reports"));
    assert_eq!(
        got,
        reference(&frames),
        "every host speaks as itself: as without keys"
    );

    // web-1's key may not publish as web-2, nor read web-2's polls.
    let seed = std::fs::read_to_string(d.join("creds/web-1.nk")).expect("seed");
    let refused = publish_as(&url, &seed, "clarion.up.web-2");
    assert!(
        refused.is_some_and(|e| e.contains("clarion.up.web-2")),
        "the server refuses it"
    );
    assert_eq!(
        publish_as(&url, &seed, "clarion.up.web-1"),
        None,
        "its own subject is fine"
    );
    // An agent posing as web-2 with web-1's key cannot even register, and
    // is told why (before, only nats-server's log said it).
    let posing = clarion()
        .args([
            "agent",
            "--nats",
            &url,
            "--host",
            "web-2",
            "--pcap",
            "hosts/web-2.pcap",
        ])
        .args(["--nats-nkey", "creds/web-1.nk", "--register-timeout", "2s", "-q"])
        .current_dir(d)
        .output()
        .expect("agent runs");
    assert_eq!(posing.status.code(), Some(1));
    let e = String::from_utf8_lossy(&posing.stderr);
    assert!(
        e.contains("the NATS server refused what host web-2 sent or asked for")
            && e.contains("the credentials given are not web-2's"),
        "the refusal is said plainly: {e}"
    );
}

#[test]
fn a_manager_without_credentials_refuses_to_run_unless_insecure() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("hosts.txt"), INVENTORY).expect("inventory");
    let out = clarion()
        .current_dir(dir.path())
        .args([
            "manager",
            "--nats",
            "nats://127.0.0.1:1",
            "--inventory",
            "hosts.txt",
            "--no-api",
            "--no-store",
        ])
        .env_remove("CLARION_NATS_TOKEN")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("no NATS credentials") && e.contains("--insecure") && e.contains("clarion credentials"),
        "{e}"
    );
}

/// Publishes `payload` on `subject` with no credentials, and flushes.
fn publish_plain(url: &str, subject: &str, payload: Vec<u8>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = async_nats::connect(url).await.expect("connects");
        client
            .publish(subject.to_string(), payload.into())
            .await
            .expect("hands over");
        client.flush().await.expect("flush");
    });
}

/// Answers the polls sent to `host` for the next 3 s with `value` for each
/// group and `packets` counted in the window; the number of polls answered.
/// Subscribed when it returns.
fn answer_polls_as(url: &str, host: &str, value: f64, packets: u64) -> std::thread::JoinHandle<usize> {
    use clarion_nats::protocol::{decode, encode, Answer, PollRequest};
    use futures_util::StreamExt;
    let (url, subject) = (url.to_string(), format!("clarion.host.{host}.poll"));
    let (ready, subscribed) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let client = async_nats::connect(&url).await.expect("connects");
            let mut sub = client.subscribe(subject.clone()).await.expect("subscribes");
            client.flush().await.expect("flush");
            let _ = ready.send(());
            let mut answered = 0;
            let until = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
            while let Ok(Some(msg)) = tokio::time::timeout_at(until, sub.next()).await {
                let reqs: Vec<PollRequest> = decode(&subject, &msg.payload).expect("polls");
                let answers: Vec<Answer> = reqs
                    .iter()
                    .map(|_| Answer::Counted {
                        values: Some(vec![value]),
                        packets,
                    })
                    .collect();
                if let Some(reply) = msg.reply {
                    client.publish(reply, encode(&answers)).await.expect("answers");
                    client.flush().await.expect("flush");
                    answered += reqs.len();
                }
            }
            answered
        })
    });
    subscribed.recv().expect("subscribed");
    handle
}

#[test]
fn what_a_host_cannot_have_seen_is_refused_and_counted() {
    use clarion_nats::protocol::{encode, Up};
    use clarion_report::{Completeness, GroupKey, Origin, Report, Window};
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    setup(d, 10);
    let (_server, port) = start_server(&server);
    let url = format!("nats://127.0.0.1:{port}");
    let metrics_port = free_port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let mgr = manager(
        d,
        &url,
        &[
            "--events",
            "events.clarion",
            "--no-store",
            "--no-api",
            "--metrics",
            &metrics,
            "--duration",
            "7s",
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(800));
    // The forgeries of a report of `service_load_spike` (event 0:
    // sum(volume) > 40KB per dst_ip/24 every 10ms) on web-1's own subject.
    let dst = |a: &str, len| GroupKey {
        dst_ip: Some((a.parse().expect("addr"), len)),
        ..GroupKey::default()
    };
    let good = Window {
        start_ns: T0,
        end_ns: T0 + 10 * MS,
    };
    let forged = |window: Window, group: GroupKey, value: f64, origin: &str| Up::Satisfied {
        event: 0,
        report: Box::new(Report {
            capture: None,
            missing_hosts: Box::default(),
            event: "service_load_spike".into(),
            window,
            group,
            values: vec![("sum(volume)".into(), value)].into(),
            origin: Origin {
                host: origin.into(),
                worker: 0,
            },
            completeness: Completeness::default(),
        }),
        decided_ns: 0,
        seq: 0,
    };
    let group = || dst("10.0.128.0", 24);
    // The year 2100, a window of the event's interval.
    let y2100 = 4_102_444_800 * 1_000 * MS;
    let forgeries = [
        // a window of 1 ns, not one of the event's
        forged(
            Window {
                start_ns: T0 + 1,
                end_ns: T0 + 2,
            },
            group(),
            1e3,
            "web-1",
        ),
        // a negative sum of bytes
        forged(good, group(), -5.0, "web-1"),
        // more than any link carries in 10 ms
        forged(good, group(), 1e12, "web-1"),
        forged(good, group(), 1e300, "web-1"),
        forged(
            Window {
                start_ns: y2100,
                end_ns: y2100 + 10 * MS,
            },
            group(),
            1e5,
            "web-1",
        ),
        // groups not of `per dst_ip/24`
        forged(good, dst("10.0.128.5", 24), 1e5, "web-1"),
        forged(good, dst("10.0.128.0", 25), 1e5, "web-1"),
        forged(good, dst("10.0.128.128", 33), 1e5, "web-1"),
        forged(good, GroupKey::default(), 1e5, "web-1"),
        // another host's name
        forged(good, group(), 1e5, "web-2"),
        // 100 KB from a host that counted 1 packet in the window
        {
            let mut up = forged(good, group(), 1e5, "web-1");
            if let Up::Satisfied { report, .. } = &mut up {
                report.completeness.packets = 1;
            }
            up
        },
    ];
    for up in &forgeries {
        publish_plain(&url, "clarion.up.web-1", encode(up).to_vec());
    }
    // A sound report (20 KB of 100 packets, over web-1's share of 40 KB)
    // starts a decision: the manager polls the other hosts, and a forger
    // answering for web-2 claims 100 KB in a window in which it counted 1
    // packet. Refused: the decision stays below 40 KB, nothing is reported.
    let forger = answer_polls_as(&url, "web-2", 1e5, 1);
    let mut sound = forged(good, group(), 2e4, "web-1");
    if let Up::Satisfied { report, .. } = &mut sound {
        report.completeness.packets = 100;
    }
    publish_plain(&url, "clarion.up.web-1", encode(&sound).to_vec());
    assert!(forger.join().expect("forger") >= 1, "the manager polled web-2");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let page = http_get(metrics_port, "/metrics");
    let out = wait(mgr, "the manager", std::time::Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("refused a message of host web-1"), "named: {err}");
    assert!(
        err.contains(
            "12 host reports and answers refused as impossible: 2 beyond_its_counters, 2 beyond_the_link, \
             1 future_window, 1 impossible_value, 1 not_a_window, 4 wrong_group, 1 wrong_origin"
        ),
        "counted by reason: {err}"
    );
    assert!(!err.contains("could not be read"), "read, and refused: {err}");
    for (reason, n) in [
        ("beyond_its_counters", 1),
        ("beyond_the_link", 2),
        ("future_window", 1),
        ("impossible_value", 1),
        ("not_a_window", 1),
        ("wrong_group", 4),
        ("wrong_origin", 1),
    ] {
        let line = format!("clarion_host_refused_total{{host=\"web-1\",reason=\"{reason}\"}} {n}\n");
        assert!(page.contains(&line), "{line} in:\n{page}");
    }
    // The forged answer is web-2's.
    let line = "clarion_host_refused_total{host=\"web-2\",reason=\"beyond_its_counters\"} 1\n";
    assert!(page.contains(line), "{line} in:\n{page}");
    assert!(out.stdout.is_empty(), "nothing decided from them: {err}");
}

/// The body of `GET path` on the loopback `port`.
fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connects");
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .expect("sent");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

/// Issue 37: with per-host keys, the manager's flows requests
/// (`clarion.host.<host>.flows`) reach each host on its own subject and
/// its answer comes back: replaying agents, which keep no flow records,
/// each refuse, saying so, rather than time out (which a permission the
/// keys lack would look like).
#[test]
fn with_per_host_keys_each_host_answers_the_managers_flows_requests() {
    const TOKEN: &str = "security-flows-token";
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    setup(d, 20);
    let made = clarion()
        .args(["credentials", "--inventory", "hosts.txt", "--out-dir", "creds"])
        .current_dir(d)
        .output()
        .expect("runs");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let conf = d.join("creds/nats-server.conf");
    let (_server, port) = start_server_with(&server, &["-c", conf.to_str().expect("utf-8")]);
    let url = format!("nats://127.0.0.1:{port}");
    let flags = [
        "--nats-nkey",
        "creds/manager.nk",
        "--events",
        "events.clarion",
        "--no-store",
    ];
    let (_manager, api) = api_manager(d, &url, &[&flags[..], &["--api-token", TOKEN]].concat());
    let _agents: Vec<Guard> = (1..=4)
        .map(|i| {
            let key = format!("creds/web-{i}.nk");
            let flags = ["--nats-nkey", &key, "--linger", "60s", "-q"];
            agent_with(
                d,
                &url,
                &format!("web-{i}"),
                &format!("hosts/web-{i}.pcap"),
                &flags,
            )
        })
        .collect();
    let path = "/v1/flows?event=service_load_spike&from=1&to=2";
    let refused = |a: &Value| {
        a["missing"].as_array().is_some_and(|m| {
            m.len() == 4
                && m.iter().all(|h| {
                    h["reason"]
                        .as_str()
                        .is_some_and(|r| r.starts_with("refused: this host keeps no flow records"))
                })
        })
    };
    // Until every agent has registered (and subscribed).
    let t = Instant::now();
    let answer = loop {
        let (code, a) = api_get(api, path, TOKEN);
        assert_eq!(code, 200, "{a}");
        if refused(&a) || t.elapsed() > Duration::from_secs(30) {
            break a;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(refused(&answer), "each host answered, refusing: {answer}");
    assert_eq!(
        answer["missing_hosts"],
        serde_json::json!(["web-1", "web-2", "web-3", "web-4"]),
        "{answer}"
    );
}
