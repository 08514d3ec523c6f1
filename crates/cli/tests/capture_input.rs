//! Capture input and standard output edges of issue 18: a capture
//! truncated while read, FIFOs, process substitution and `/dev/stdin` as
//! `--pcap`, and a closed standard output.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::repo;

fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("clarion")
}

/// The README's command with golden output, on `pcap` as bash sees it
/// (`pcap` may be `<(…)`); `stdin` is bash's standard input redirection.
fn golden_run(pcap: &str, stdin: &str) -> std::process::Output {
    Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{} run --pcap {pcap} --events examples/demo.clarion --format json --host golden -q {stdin}",
            bin().display()
        ))
        .current_dir(repo())
        .output()
        .expect("bash runs")
}

fn golden() -> String {
    std::fs::read_to_string(repo().join("crates/conformance/tests/golden/demo.jsonl"))
        .expect("the golden reports")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Issue 18: these were refused as "the file is empty" (a memory map of a
/// pipe has length 0); only `--pcap -` worked. Each now reads as a stream
/// and reports exactly what the file gives.
#[test]
fn fifo_process_substitution_and_dev_stdin_read_like_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("capture.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo");
    let demo = repo().join("examples/demo.pcap");
    let writer = {
        let (demo, fifo) = (demo.clone(), fifo.clone());
        // Opening a FIFO for writing waits for its reader: clarion.
        std::thread::spawn(move || std::fs::copy(demo, fifo).unwrap())
    };
    let cases = [
        ("a named FIFO", golden_run(&fifo.display().to_string(), "")),
        (
            "process substitution",
            golden_run("<(cat examples/demo.pcap)", ""),
        ),
        (
            "/dev/stdin from a pipe",
            golden_run("/dev/stdin", "< <(cat examples/demo.pcap)"),
        ),
        (
            "/dev/stdin from a file",
            golden_run("/dev/stdin", "< examples/demo.pcap"),
        ),
        ("- from a pipe", golden_run("-", "< <(cat examples/demo.pcap)")),
    ];
    writer.join().unwrap();
    let want = golden();
    for (what, o) in cases {
        assert!(o.status.success(), "{what}: {:?} {}", o.status, text(&o.stderr));
        assert!(
            text(&o.stdout) == want,
            "{what}: reports differ from the golden file's"
        );
    }
}

/// Issue 18: a capture truncated while read was memory-mapped, and the
/// process died of SIGBUS with no message, no reports and no summary. Now
/// the reports before the cut are written, then a warning names the file,
/// the packet and the offset, the summary follows, and the status is 1.
///
/// Deterministic without sleeping for clarion: its reports fill the pipe
/// to this test, which reads one line and then stops reading, so clarion
/// blocks long before the cut; the file is truncated, then the pipe drained.
#[test]
fn capture_truncated_while_read_keeps_the_reports_before_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(repo().join("examples/demo.pcap")).unwrap();
    let pcap = dir.path().join("shrinking.pcap");
    std::fs::write(&pcap, &bytes).unwrap();
    // Every flow every millisecond: about 1 KB of reports per 2 KB of capture.
    let events = dir.path().join("all.clarion");
    std::fs::write(&events, "event all\n  when sum(packets) > 0\n  every 1ms\n").unwrap();
    let mut child = Command::new(bin())
        .args(["run", "--format", "json", "--pcap"])
        .arg(&pcap)
        .arg("--events")
        .arg(&events)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.starts_with('{'), "a first report: {first:?}");
    // Let it run into the full pipe (it would get no further in any case).
    std::thread::sleep(Duration::from_millis(300));
    let cut = bytes.len() / 2 + 7;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&pcap)
        .unwrap()
        .set_len(cut as u64)
        .unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{status:?} (a signal is the bug): {err}");
    let reports = 1 + rest.lines().count();
    assert!(reports > 100, "the reports before the cut are written: {reports}");
    let warning = format!("clarion: warning: {}: read error after packet ", pcap.display());
    assert!(err.contains(&warning), "names the file and the packet: {err}");
    assert!(
        err.contains(&format!(
            "the file ended at byte {cut} but had {} bytes when opened: another process truncated it",
            bytes.len()
        )),
        "{err}"
    );
    assert!(err.contains(" frames in "), "the summary is printed: {err}");
}

/// Runs `clarion ARGS` under bash with `redirect` applied to its stdout.
fn with_stdout(args: &str, redirect: &str) -> std::process::Output {
    Command::new("bash")
        .arg("-c")
        .arg(format!("{} {args} {redirect}", bin().display()))
        .current_dir(repo())
        .output()
        .expect("bash runs")
}

/// Issue 18: `>&-` discarded every report with status 0. Rust reopens a
/// closed fd 1 on /dev/null read-write before `main`; `>/dev/null` is
/// write-only and stays allowed, as does a closed stdout with --output.
#[test]
fn closed_stdout_is_an_error_but_dev_null_is_not() {
    let run = "run --pcap examples/demo.pcap --events examples/demo.clarion --format json --host golden -q";
    let o = with_stdout(run, ">&-");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stderr),
        "clarion: stdout is closed; use --output FILE or redirect to /dev/null explicitly\n"
    );
    let o = with_stdout(run, ">/dev/null");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.jsonl");
    let o = with_stdout(&format!("{run} --output {}", file.display()), ">&-");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        std::fs::read_to_string(&file).unwrap() == golden(),
        "every report written"
    );
    let o = with_stdout("check examples/demo.clarion", ">&-");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).starts_with("clarion: stdout is closed; use --quiet"),
        "{}",
        text(&o.stderr)
    );
    let o = with_stdout("check --quiet examples/demo.clarion", ">&-");
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// A pcapng file, little-endian: one section, interfaces of the given link
/// types (microsecond timestamps), and `(interface, ts_ns, frame)` packets.
fn pcapng(links: &[u16], packets: &[(u32, u64, Vec<u8>)]) -> Vec<u8> {
    fn block(kind: u32, body: &[u8]) -> Vec<u8> {
        let mut padded = body.to_vec();
        padded.resize(body.len().div_ceil(4) * 4, 0);
        let len = (12 + padded.len()) as u32;
        let mut b = kind.to_le_bytes().to_vec();
        b.extend(len.to_le_bytes());
        b.extend(padded);
        b.extend(len.to_le_bytes());
        b
    }
    let mut shb = 0x1A2B_3C4Du32.to_le_bytes().to_vec();
    shb.extend(1u16.to_le_bytes());
    shb.extend(0u16.to_le_bytes());
    shb.extend((-1i64).to_le_bytes());
    let mut out = block(0x0A0D_0D0A, &shb);
    for &link in links {
        let mut idb = link.to_le_bytes().to_vec();
        idb.extend(0u16.to_le_bytes());
        idb.extend(65_535u32.to_le_bytes());
        out.extend(block(1, &idb));
    }
    for (iface, ts_ns, frame) in packets {
        let us = ts_ns / 1_000;
        let mut epb = iface.to_le_bytes().to_vec();
        epb.extend(((us >> 32) as u32).to_le_bytes());
        epb.extend((us as u32).to_le_bytes());
        epb.extend((frame.len() as u32).to_le_bytes());
        epb.extend((frame.len() as u32).to_le_bytes());
        epb.extend(frame);
        out.extend(block(6, &epb));
    }
    out
}

/// An Ethernet/IPv4/UDP frame from 10.0.0.1 to 10.0.0.2 (checksums are not checked).
fn udp_frame() -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    f.extend([0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend([0x30, 0x39, 0x00, 0x35, 0, 8, 0, 0]);
    f
}

#[test]
fn frames_of_an_unsupported_link_type_count_in_their_windows_completeness() {
    let dir = tempfile::tempdir().expect("tempdir");
    const MS: u64 = 1_000_000;
    let t0 = 1_700_000_000_000 * MS;
    // Interface 0 is Ethernet, interface 1 of link type 147 (user-defined):
    // three of its frames in the second window, one in the fourth.
    let mut packets: Vec<(u32, u64, Vec<u8>)> = (0..50).map(|i| (0, t0 + i * MS, udp_frame())).collect();
    for ts in [12, 13, 15, 31] {
        packets.push((1, t0 + ts * MS, vec![0xAB; 40]));
    }
    packets.sort_by_key(|p| p.1);
    let pcap = dir.path().join("mixed.pcapng");
    std::fs::write(&pcap, pcapng(&[1, 147], &packets)).expect("written");
    let events = dir.path().join("e.clarion");
    std::fs::write(&events, "event busy\n  when count(packets) > 0\n  every 10ms\n").expect("written");
    let out = Command::new(bin())
        .args(["run", "--format", "json", "-q", "--pcap"])
        .arg(&pcap)
        .arg("--events")
        .arg(&events)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("147"),
        "the link type is named: {}",
        text(&out.stderr)
    );
    let malformed: Vec<(u64, u64)> = text(&out.stdout)
        .lines()
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).expect("a report");
            let start = r["window"]["start_ns"].as_u64().expect("start");
            (
                (start - t0) / MS,
                r["completeness"]["malformed"].as_u64().expect("malformed"),
            )
        })
        .collect();
    assert_eq!(malformed, vec![(0, 0), (10, 3), (20, 0), (30, 1), (40, 0)]);
}
