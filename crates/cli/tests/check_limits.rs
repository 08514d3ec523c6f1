//! `clarion check` on files with thousands of mistakes, and on events files
//! that are not plain UTF-8 (issue 18: 4,000 errors on one line took 50 s
//! and 2 GB; a byte-order mark was refused with an invisible character;
//! invalid UTF-8 had no line and column). Times are for `cargo test --release`.

use std::time::{Duration, Instant};

mod common;
use common::clarion;

/// `clarion check` on `text`: its exit code and standard error, within a second.
#[track_caller]
fn check(text: &[u8]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("big.clarion");
    std::fs::write(&file, text).expect("written");
    let t = Instant::now();
    let o = clarion().arg("check").arg(&file).output().expect("runs");
    let took = t.elapsed();
    assert!(took < Duration::from_secs(1), "{took:?}");
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[track_caller]
fn assert_capped(err: &str, more: &str) {
    assert_eq!(err.matches(" Error: ").count(), 50);
    assert!(
        err.trim_end().ends_with(more),
        "{}",
        &err[err.len().saturating_sub(300)..]
    );
    assert!(err.len() < 100_000, "{} bytes", err.len());
}

#[test]
fn ten_thousand_errors_on_one_line() {
    let text: String = (0..10_000)
        .map(|i| format!("event e{i} when sum(volumx) > 1 "))
        .collect();
    let (code, err) = check(text.as_bytes());
    assert_eq!(code, Some(2));
    assert_capped(&err, "and 9,950 more errors (10,000 in all)");
}

#[test]
fn a_hundred_thousand_duplicate_conditions() {
    let conds = vec!["proto = tcp"; 100_000].join(" and ");
    let text = format!("event a\n  filter {conds}\n  when sum(volume) > 1\n");
    let (code, err) = check(text.as_bytes());
    assert_eq!(code, Some(2));
    assert_capped(&err, "and 99,949 more errors (99,999 in all)");
}

#[test]
fn a_leading_byte_order_mark_is_skipped() {
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("bom.clarion");
    std::fs::write(&file, "\u{FEFF}event a\n  when sum(volume) > 1\n").expect("written");
    let o = clarion().arg("check").arg(&file).output().expect("runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "event a\n  when sum(volume) > 1\n"
    );
}

#[test]
fn invalid_utf8_has_a_line_and_a_column() {
    let text = b"event a\n  when sum(volume) > 1\n  per src_ip # caf\xE9\n";
    let (code, err) = check(text);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("[E0103] Error: invalid UTF-8: byte 0xE9 is not UTF-8"),
        "{err}"
    );
    assert!(err.contains("big.clarion:3:19 ]"), "{err}");
    // `clarion run` reads events files the same way.
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("run.clarion");
    std::fs::write(&file, text).expect("written");
    let o = clarion()
        .args(["run", "--pcap", "examples/demo.pcap", "--events"])
        .arg(&file)
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("run.clarion:3:19 ]"), "{err}");
}

#[test]
fn events_add_refuses_invalid_utf8_before_sending() {
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("add.clarion");
    std::fs::write(&file, b"event a\n  when sum(volume) > \xFF1\n").expect("written");
    // Nothing listens on port 1: the file is refused before any request.
    let o = clarion()
        .args(["events", "--api", "http://127.0.0.1:1", "--token", "t", "add"])
        .arg(&file)
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("add.clarion:2:22 ]") && err.contains("E0103"),
        "{err}"
    );
}
