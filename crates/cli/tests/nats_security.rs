//! Agents and the manager authenticate to NATS: with a token, and over TLS
//! with a CA the operator names. Without the credentials the connection is
//! refused with a message that says what to give.

mod bus;

use std::path::Path;
use std::process::{Command, Output};

use bus::*;

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
