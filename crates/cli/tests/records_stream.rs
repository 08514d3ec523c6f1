//! `--records nats://…/STREAM` and `--output nats://…/STREAM`: a replay's
//! flow records and reports published to a real `nats-server -js`, read
//! back from the stream, equal to the same run's JSON lines (count,
//! packets and bytes, also the Parquet file's; reports line for line); a fleet's four agents and
//! its manager publishing to streams, one subject a host; per-host keys
//! and tokens; and a stream that does not take the subject refused with
//! the reason.
//!
//! Skipped, saying so, where `nats-server` is not installed (Debian
//! package `nats-server`).

mod bus;

use std::path::{Path, PathBuf};

use bus::*;
use serde_json::Value;

/// A shared capture of 3,668 flows (many batches of publishes), else the
/// bundled one.
fn capture() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let shared = root.join("../shared/captures/pathspider_icmp_ttl.pcap");
    if shared.is_file() {
        return shared;
    }
    eprintln!("{}: absent; the bundled capture instead", shared.display());
    root.join("examples/demo.pcap")
}

/// Every message of `stream`, in order, as (subject, payload).
fn read_stream(url: &str, stream: &str) -> Vec<(String, String)> {
    read_stream_as(async_nats::ConnectOptions::new(), url, stream)
}

/// [`read_stream`] with credentials.
fn read_stream_as(opts: async_nats::ConnectOptions, url: &str, stream: &str) -> Vec<(String, String)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = opts.connect(url).await.expect("connects");
        let js = async_nats::jetstream::new(client);
        let mut stream = js.get_stream(stream).await.expect("the stream exists");
        let n = stream.info().await.expect("info").state.messages;
        let mut out = Vec::new();
        for seq in 1..=n {
            let m = stream.get_raw_message(seq).await.expect("message");
            out.push((
                m.subject.to_string(),
                String::from_utf8_lossy(&m.payload).to_string(),
            ));
        }
        out
    })
}

/// (count, sum of packets, sum of bytes) of JSON records.
fn totals<'a>(records: impl IntoIterator<Item = &'a str>) -> (u64, u64, u64) {
    records.into_iter().fold((0, 0, 0), |(n, p, b), line| {
        let v: Value = serde_json::from_str(line).expect("a JSON record");
        let field = |f: &str| v[f].as_u64().unwrap_or_else(|| panic!("{f} in {v}"));
        (n + 1, p + field("packets"), b + field("bytes"))
    })
}

fn run(dir: &Path, capture: &Path, args: &[&str]) -> std::process::Output {
    clarion()
        .args(["run", "--quiet", "--pcap"])
        .arg(capture)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("clarion runs")
}

#[test]
fn a_replays_records_and_reports_read_back_from_the_stream_equal_its_json_lines() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let store = d.join("js");
    let (_server, port) = start_server_with(&server, &["-js", "-sd", &store.to_string_lossy()]);
    let url = format!("nats://127.0.0.1:{port}");

    // Records: the stream and files from the same run (JSON lines, and
    // Parquet where the binary writes it).
    let flows = format!("{url}/FLOWS");
    let mut args = vec!["--host", "web-1", "--records", &flows, "--records", "f.jsonl"];
    if cfg!(feature = "parquet") {
        args.extend(["--records", "f.parquet"]);
    }
    let o = run(d, &capture(), &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let file = std::fs::read_to_string(d.join("f.jsonl")).expect("records file");
    let stored = read_stream(&url, "FLOWS");
    let want = totals(file.lines());
    assert!(want.0 > 0, "{want:?}");
    assert_eq!(totals(stored.iter().map(|(_, p)| p.as_str())), want);
    assert!(
        stored.iter().all(|(s, _)| s == "clarion.records.web-1"),
        "{:?}",
        stored[0]
    );
    // Issue 37's acceptance: the stream's totals are the Parquet file's.
    #[cfg(feature = "parquet")]
    {
        let records = clarion_parquet::read_records(&d.join("f.parquet")).expect("the Parquet file");
        let parquet = (
            records.len() as u64,
            records.iter().map(|r| r.packets).sum::<u64>(),
            records.iter().map(|r| r.bytes).sum::<u64>(),
        );
        assert_eq!(
            want, parquet,
            "the stream's count, packets and bytes are the Parquet file's"
        );
        eprintln!("stream = JSON lines = Parquet: {parquet:?} (records, packets, bytes)");
    }
    // The same objects, in the same order.
    assert_eq!(
        stored.iter().map(|(_, p)| p.as_str()).collect::<Vec<_>>(),
        file.lines().collect::<Vec<_>>()
    );

    // Reports (the bundled events on the bundled capture, where they fire):
    // -o to the stream, and to a file in a second run.
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let (demo, events) = (examples.join("demo.pcap"), examples.join("demo.clarion"));
    let events = events.to_str().expect("UTF-8");
    let reports = format!("{url}/REPORTS");
    let o = run(d, &demo, &["--host", "web-1", "--events", events, "-o", &reports]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(
        d,
        &demo,
        &["--host", "web-1", "--events", events, "-o", "r.jsonl"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let file = std::fs::read_to_string(d.join("r.jsonl")).expect("reports file");
    let stored = read_stream(&url, "REPORTS");
    assert!(!stored.is_empty(), "the demo events fire on the capture");
    assert!(stored.iter().all(|(s, _)| s == "clarion.reports.web-1"));
    assert_eq!(
        stored.iter().map(|(_, p)| p.as_str()).collect::<Vec<_>>(),
        file.lines().collect::<Vec<_>>()
    );

    // Records to the reports' stream: refused before the run, saying why.
    let o = run(d, &demo, &["--records", &reports]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("takes subjects") && err.contains("clarion.records"),
        "{err}"
    );
}

#[test]
fn without_jetstream_on_the_server_the_destination_is_refused() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (_server, port) = start_server(&server);
    let o = run(
        dir.path(),
        &capture(),
        &["--records", &format!("nats://127.0.0.1:{port}/FLOWS")],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("cannot find or create stream FLOWS"), "{err}");
}

#[test]
fn with_per_host_keys_a_host_publishes_its_own_records_to_a_stream_it_did_not_create() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("hosts.txt"), "web-1 10.0.1.0/24\nweb-2 10.0.2.0/24\n").expect("inventory");
    let made = clarion()
        .args([
            "credentials",
            "--inventory",
            "hosts.txt",
            "--out-dir",
            "creds",
            "--quiet",
        ])
        .current_dir(d)
        .output()
        .expect("runs");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let conf = d.join("creds/nats-server.conf");
    let store = d.join("js");
    let (_server, port) = start_server_with(
        &server,
        &[
            "-c",
            conf.to_str().expect("utf-8"),
            "-js",
            "-sd",
            &store.to_string_lossy(),
        ],
    );
    let flows = |key: &str| {
        format!(
            "nats://127.0.0.1:{port}/FLOWS?nkey={}",
            d.join("creds").join(key).display()
        )
    };

    // A host's key may not create the stream; refused with the reason.
    let o = run(
        d,
        &capture(),
        &["--host", "web-1", "--records", &flows("web-1.nk")],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("cannot find or create stream FLOWS") && err.contains("refused"),
        "{err}"
    );

    // Created with the manager's key, then written with the host's.
    let o = run(
        d,
        &capture(),
        &["--host", "web-2", "--records", &flows("manager.nk")],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(
        d,
        &capture(),
        &[
            "--host",
            "web-1",
            "--records",
            &flows("web-1.nk"),
            "--records",
            "f.jsonl",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let file = std::fs::read_to_string(d.join("f.jsonl")).expect("records file");

    let seed = std::fs::read_to_string(d.join("creds/manager.nk")).expect("seed");
    let seed = seed
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with('S'))
        .expect("a seed")
        .to_string();
    let stored = read_stream_as(
        async_nats::ConnectOptions::with_nkey(seed),
        &format!("nats://127.0.0.1:{port}"),
        "FLOWS",
    );
    let web1: Vec<&str> = stored
        .iter()
        .filter(|(subject, _)| subject == "clarion.records.web-1")
        .map(|(_, payload)| payload.as_str())
        .collect();
    assert!(stored.len() > web1.len(), "web-2's records too");
    assert_eq!(totals(web1), totals(file.lines()));
}

#[test]
fn a_token_in_the_url_is_the_servers_token() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("js");
    let (_server, port) = start_server_with(
        &server,
        &["--auth", "s3cret", "-js", "-sd", &store.to_string_lossy()],
    );
    let o = run(
        dir.path(),
        &capture(),
        &["--records", &format!("nats://127.0.0.1:{port}/FLOWS")],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("cannot connect to the NATS server"),
        "{err}"
    );
    let o = run(
        dir.path(),
        &capture(),
        &["--records", &format!("nats://s3cret@127.0.0.1:{port}/FLOWS")],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_fleets_agents_and_manager_publish_to_streams_one_subject_a_host() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let frames = setup(d, 60);
    let store = d.join("js");
    let (_server, port) = start_server_with(&server, &["-js", "-sd", &store.to_string_lossy()]);
    let url = format!("nats://127.0.0.1:{port}");
    // The manager's decisions to a stream (written inside its NATS
    // service's runtime), each agent's records to another.
    let decisions = format!("{url}/DECISIONS");
    let m = manager(
        d,
        &url,
        &[
            "--events",
            "events.clarion",
            "--no-store",
            "--no-api",
            "--until-finished",
            "-o",
            &decisions,
        ],
    );
    let flows = format!("{url}/FLOWS");
    let agents: Vec<Guard> = (1..=4)
        .map(|i| {
            let host = format!("web-{i}");
            let file = format!("{host}.jsonl");
            let pcap = format!("hosts/{host}.pcap");
            agent_with(d, &url, &host, &pcap, &["--records", &flows, "--records", &file])
        })
        .collect();
    let m = wait(m, "the manager", std::time::Duration::from_secs(120));
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    wait_agents(agents, std::time::Duration::from_secs(60));

    let stored = read_stream(&url, "DECISIONS");
    assert!(!stored.is_empty(), "the events fire");
    assert!(stored.iter().all(|(s, _)| s == "clarion.reports.manager"));
    let lines: Vec<&str> = stored.iter().map(|(_, p)| p.as_str()).collect();
    assert_eq!(rows_of_jsonl(&lines.join("\n")), reference(&frames));

    let stored = read_stream(&url, "FLOWS");
    for i in 1..=4 {
        let host = format!("web-{i}");
        let file = std::fs::read_to_string(d.join(format!("{host}.jsonl"))).expect("records file");
        let subject = format!("clarion.records.{host}");
        let mine = stored
            .iter()
            .filter(|(s, _)| *s == subject)
            .map(|(_, p)| p.as_str());
        let want = totals(file.lines());
        assert!(want.0 > 0, "{host}");
        assert_eq!(totals(mine), want, "{host}");
    }
}
