//! `clarion run --records`: flow records from the command line, equal to
//! the reference evaluator's (`clarion_reference::flows`) on the bundled
//! capture and every shared one, the same in every format, beside events
//! without changing their reports; and the mistakes an operator makes.

mod common;

use std::path::{Path, PathBuf};

use clarion_records::{EndReason, FlowRecord};
use clarion_wire::FlowKey;
use common::{clarion, load, repo, stderr};
use serde_json::Value;

const IDLE_NS: u64 = 15_000_000_000;
const ACTIVE_NS: u64 = 300_000_000_000;

/// A record as comparable fields (key, times, counts, flags, sizes, reason).
type Row = (FlowKey, u64, u64, u64, u64, u8, u32, u32, EndReason);

fn row(r: &FlowRecord) -> Row {
    (
        r.key,
        r.first_ns,
        r.last_ns,
        r.packets,
        r.bytes,
        r.tcp_flags,
        r.min_size,
        r.max_size,
        r.end_reason,
    )
}

fn sorted(records: impl IntoIterator<Item = Row>) -> Vec<Row> {
    let mut v: Vec<Row> = records.into_iter().collect();
    v.sort();
    v
}

/// A JSON line back into a record's fields (the key rebuilt from its parts).
fn from_json(v: &Value) -> Row {
    let ip = |f: &str| v[f].as_str().expect("address").parse().expect("an address");
    let port = |f: &str| v[f].as_u64().map(|p| p as u16);
    let ports = port("src_port").zip(port("dst_port"));
    let vlan = v["vlan"].as_u64().map(|x| x as u16);
    let key = FlowKey::new(
        ip("src_ip"),
        ip("dst_ip"),
        v["proto"].as_u64().expect("proto") as u8,
        ports,
        vlan,
    );
    let n = |f: &str| v[f].as_u64().unwrap_or_else(|| panic!("{f} in {v}"));
    let reason = EndReason::from_name(v["end_reason"].as_str().expect("end_reason")).expect("a reason");
    (
        key,
        n("first_ns"),
        n("last_ns"),
        n("packets"),
        n("bytes"),
        n("tcp_flags") as u8,
        n("min_size") as u32,
        n("max_size") as u32,
        reason,
    )
}

fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("records written")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
        .collect()
}

/// Runs `clarion run --pcap capture --records ...` with `extra` flags.
fn run_records(capture: &Path, dests: &[&Path], extra: &[&str]) -> std::process::Output {
    let mut c = clarion();
    c.arg("run").arg("--pcap").arg(capture).arg("--quiet");
    for d in dests {
        c.arg("--records").arg(d);
    }
    c.args(extra);
    c.output().expect("clarion runs")
}

/// The bundled capture and every shared one.
fn captures() -> Vec<PathBuf> {
    let mut v = vec![repo().join("examples/demo.pcap")];
    match std::fs::read_dir(repo().join("../shared/captures")) {
        Ok(dir) => {
            let mut shared: Vec<PathBuf> = dir
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
                .collect();
            shared.sort();
            v.extend(shared);
        }
        Err(e) => eprintln!("../shared/captures: {e}; only the example runs"),
    }
    v
}

#[test]
fn records_equal_the_reference_on_every_capture() {
    let dir = tempfile::tempdir().expect("temp dir");
    for capture in captures() {
        let packets = load(&capture);
        let want = sorted(
            clarion_reference::flows::flow_records(&packets, IDLE_NS, ACTIVE_NS)
                .iter()
                .map(row),
        );
        for cache in ["1", "4096"] {
            let out = dir.path().join("r.jsonl");
            let o = run_records(&capture, &[&out], &["--record-cache", cache]);
            assert!(o.status.success(), "{}: {}", capture.display(), stderr(&o));
            let lines = json_lines(&out);
            for v in &lines {
                assert_eq!(v["schema"], "clarion.flow/1");
                assert!(
                    v["community_id"].as_str().is_some_and(|c| c.starts_with("1:")),
                    "{v}"
                );
            }
            let got = sorted(lines.iter().map(from_json));
            assert_eq!(
                got.len(),
                want.len(),
                "{} with {cache} slots: record count",
                capture.display()
            );
            assert!(
                got == want,
                "{} with {cache} slots: records differ from the reference",
                capture.display()
            );
            let packets_total: u64 = got.iter().map(|r| r.3).sum();
            assert_eq!(
                packets_total,
                packets.len() as u64,
                "every parsed packet is in a record"
            );
        }
    }
}

#[test]
fn timeouts_from_the_command_line_reach_the_meter() {
    let dir = tempfile::tempdir().expect("temp dir");
    let capture = repo().join("examples/demo.pcap");
    let packets = load(&capture);
    let (idle, active) = (50_000_000, 200_000_000);
    let out = dir.path().join("r.jsonl");
    let o = run_records(
        &capture,
        &[&out],
        &[
            "--record-idle-timeout",
            "50ms",
            "--record-active-timeout",
            "200ms",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let got = sorted(json_lines(&out).iter().map(from_json));
    let want = sorted(
        clarion_reference::flows::flow_records(&packets, idle, active)
            .iter()
            .map(row),
    );
    assert!(
        got.iter().any(|r| r.8 == EndReason::Active),
        "short timeouts end records early"
    );
    assert!(got == want, "records differ from the reference at 50 ms / 200 ms");
}

#[test]
fn every_format_holds_the_same_records_and_events_are_unchanged() {
    let dir = tempfile::tempdir().expect("temp dir");
    let capture = repo().join("examples/demo.pcap");
    let (jsonl, parquet, ipfix) = (
        dir.path().join("r.jsonl"),
        dir.path().join("r.parquet"),
        dir.path().join("r.ipfix"),
    );
    let reports_alone = dir.path().join("alone.jsonl");
    let reports_with = dir.path().join("with.jsonl");
    let events = repo().join("examples/demo.clarion");
    let o = clarion()
        .args(["run", "--quiet", "--format", "json", "--pcap"])
        .arg(&capture)
        .arg("--events")
        .arg(&events)
        .arg("--output")
        .arg(&reports_alone)
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run_records(
        &capture,
        &[&jsonl, &parquet, &ipfix],
        &[
            "--events",
            events.to_str().expect("utf-8 path"),
            "--format",
            "json",
            "--output",
            reports_with.to_str().expect("utf-8 path"),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let alone = std::fs::read_to_string(&reports_alone).expect("reports");
    assert!(!alone.is_empty());
    assert_eq!(
        alone,
        std::fs::read_to_string(&reports_with).expect("reports"),
        "records change no report"
    );

    let from_jsonl = sorted(json_lines(&jsonl).iter().map(from_json));
    let from_parquet = sorted(
        clarion_parquet::read_records(&parquet)
            .expect("parquet reads back")
            .iter()
            .map(row),
    );
    assert_eq!(from_jsonl, from_parquet, "Parquet holds the JSON lines' records");
    let bytes = std::fs::read(&ipfix).expect("ipfix file");
    let messages = clarion_ipfix::Decoder::new()
        .stream(&bytes)
        .expect("IPFIX messages");
    let from_ipfix = sorted(
        messages
            .iter()
            .flat_map(|m| m.records.iter())
            .map(|d| row(&d.record)),
    );
    assert_eq!(
        from_jsonl, from_ipfix,
        "the IPFIX file holds the JSON lines' records"
    );
}

#[test]
fn mistakes_are_named() {
    let capture = repo().join("examples/demo.pcap");
    let o = run_records(&capture, &[Path::new("flows.txt")], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--records flows.txt") && stderr(&o).contains("FILE.jsonl"),
        "{}",
        stderr(&o)
    );

    let o = run_records(&capture, &[Path::new("kafka://broker:9092")], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown scheme"), "{}", stderr(&o));

    // A TCP collector that is not there: the run fails, naming it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let dest = format!("ipfix+tcp://127.0.0.1:{port}");
    let o = run_records(&capture, &[Path::new(&dest)], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains(&dest), "{}", stderr(&o));

    // The meter's settings without a meter are refused, not ignored.
    let o = clarion()
        .args(["run", "--pcap"])
        .arg(&capture)
        .args(["--events", "examples/demo.clarion", "--record-cache", "64"])
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--records"), "{}", stderr(&o));

    let o = clarion()
        .args(["run", "--pcap"])
        .arg(&capture)
        .output()
        .expect("runs");
    assert_eq!(
        o.status.code(),
        Some(2),
        "no events and no records: nothing to do"
    );
    assert!(stderr(&o).contains("--events"), "{}", stderr(&o));
}

/// Issue 37: a destination without a format's extension that is not a
/// file to create (`/dev/null`, a named pipe, `-` for standard output)
/// takes JSON lines, the same records as `FILE.jsonl`; a regular file so
/// named is still refused, and `-` beside the reports on standard output.
#[test]
fn records_go_to_dev_null_a_named_pipe_and_standard_output() {
    use std::os::unix::fs::OpenOptionsExt;

    let capture = repo().join("examples/demo.pcap");
    let packets = load(&capture);
    let want = sorted(
        clarion_reference::flows::flow_records(&packets, IDLE_NS, ACTIVE_NS)
            .iter()
            .map(row),
    );
    let rows = |text: &str| -> Vec<Row> {
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
            .collect();
        assert!(lines.iter().all(|v| v["schema"] == "clarion.flow/1"), "{text}");
        sorted(lines.iter().map(from_json))
    };

    let o = run_records(&capture, &[Path::new("/dev/null")], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stdout.is_empty());

    let o = run_records(&capture, &[Path::new("-")], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        rows(&String::from_utf8_lossy(&o.stdout)) == want,
        "records on standard output differ from the reference"
    );

    // A reader gone (`| head`) ends the run quietly, as it does the reports'.
    let mut child = common::clarion_process()
        .args(["run", "--quiet", "--records", "-", "--pcap"])
        .arg(&capture)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("clarion starts");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("clarion ends");
    assert!(
        o.status.success() && o.stderr.is_empty(),
        "{:?}: {}",
        o.status,
        stderr(&o)
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let fifo = dir.path().join("flows");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf-8 path")).expect("no NUL");
    // SAFETY: a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).expect("the pipe reads"))
    };
    let o = run_records(&capture, &[&fifo], &[]);
    // Had clarion not opened the pipe, the reader would wait for a writer:
    // one that opens and closes at once ends it (ENXIO if it had ended).
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo);
    let text = reader.join().expect("reader");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        rows(&text) == want,
        "records through the pipe differ from the reference"
    );

    // A regular file without an extension is refused, not guessed, and left as it was.
    let plain = dir.path().join("plain");
    std::fs::write(&plain, "kept\n").expect("a file");
    let o = run_records(&capture, &[&plain], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("extension") && stderr(&o).contains("/dev/null"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&plain).expect("still there"), "kept\n");

    // Standard output holds one stream.
    let o = run_records(
        &capture,
        &[Path::new("-")],
        &["--events", "examples/demo.clarion"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--records -") && stderr(&o).contains("--output"),
        "{}",
        stderr(&o)
    );
    let o = run_records(&capture, &[Path::new("-"), Path::new("-")], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = run_records(
        &capture,
        &[Path::new("-"), Path::new("/dev/null")],
        &["--events", "examples/demo.clarion", "--output", "/dev/null"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(rows(&String::from_utf8_lossy(&o.stdout)) == want);
}

/// `--records FILE.csv` (issue 34's example of a back end added as one
/// module): read back, a header of the JSON line's names and one line a
/// record, each the JSON line of the same record in the same order.
#[test]
fn a_csv_file_holds_the_json_lines_records() {
    let dir = tempfile::tempdir().expect("temp dir");
    let capture = repo().join("examples/demo.pcap");
    let (jsonl, csv) = (dir.path().join("r.jsonl"), dir.path().join("r.csv"));
    let o = run_records(&capture, &[&jsonl, &csv], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&csv).expect("csv written");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let from_csv: Vec<Value> = lines
        .map(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            assert_eq!(fields.len(), header.len(), "{line}");
            let object = header.iter().zip(fields).map(|(name, field)| {
                let value = match field.parse::<u64>() {
                    _ if field.is_empty() => Value::Null,
                    Ok(n) => Value::from(n),
                    Err(_) => Value::from(field),
                };
                (name.to_string(), value)
            });
            Value::Object(object.collect())
        })
        .collect();
    let from_jsonl: Vec<Value> = json_lines(&jsonl)
        .into_iter()
        .map(|mut v| {
            v.as_object_mut().expect("an object").remove("schema");
            v
        })
        .collect();
    assert!(!from_jsonl.is_empty());
    assert_eq!(from_csv, from_jsonl, "the CSV holds the JSON lines' records");
}
