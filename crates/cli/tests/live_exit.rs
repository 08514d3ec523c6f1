//! A live run that fails mid-way still finishes its files (issue 34):
//! the flow records' and GPVs' Parquet files (their footers: the
//! project's reader takes them), the export policy's pcapng file and the
//! files of `then capture` (capinfos reads them, when installed, and so
//! does Clarion's own reader, to their last byte). Two failures, each
//! while tcpreplay sends the bundled capture into the veth:
//! - the report sink cannot be written (`-o /dev/full`): the run stops
//!   with that error, exit 1;
//! - the interface is deleted, with `--down-timeout 0`: the run stops
//!   saying so, exit 1.
//!
//! Needs root, `ip` and `tcpreplay`; skipped, saying why, otherwise.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use clarion_capture::PacketSource;
use common::netns::{clarion_in, tcpreplay, Net};
use common::repo;

const EVENTS: &str = "\
event tcp_flows
  filter proto = tcp
  when sum(packets) >= 20
  per 5tuple
  every 100ms
  then capture 1s before 100ms after
";

#[test]
fn a_failed_report_sink_leaves_finished_files() {
    let Some(net) = Net::new("f") else { return };
    if !tcpreplay() {
        return;
    }
    let err = fail_mid_way(&net, &["-o", "/dev/full"], |_| {});
    assert!(err.contains("cannot write reports"), "{err}");
}

#[test]
fn a_deleted_interface_leaves_finished_files() {
    let Some(net) = Net::new("g") else { return };
    if !tcpreplay() {
        return;
    }
    let args = ["--down-timeout", "0", "-o", "/dev/null"];
    let err = fail_mid_way(&net, &args, |net| {
        assert!(net.ip(&["-n", &net.a, "link", "del", "va"]), "va deleted");
    });
    assert!(err.contains("not back within the down timeout"), "{err}");
}

/// Runs `clarion run -i va` with `args`, replays the bundled capture and,
/// a second into it, calls `fail`; the run must exit 1 with every file
/// finished. Its standard error.
fn fail_mid_way(net: &Net, args: &[&str], fail: impl FnOnce(&Net)) -> String {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let d = tmp.path();
    std::fs::write(d.join("events.clarion"), EVENTS).expect("events written");
    std::fs::write(d.join("p.clarion"), "export all\n  send packets to pcapng\n").expect("policies written");
    let run = clarion_in(&net.a)
        .args(["run", "-i", "va", "--stats-every", "0", "--duration", "60s"])
        .args(["--snaplen", "2048", "--format", "json"])
        .args(args)
        .arg("--events")
        .arg(d.join("events.clarion"))
        .arg("--records")
        .arg(d.join("records.parquet"))
        .arg("--gpv")
        .arg(d.join("gpvs.parquet"))
        .arg("--exports")
        .arg(d.join("p.clarion"))
        .arg("--export-dir")
        .arg(d.join("exp"))
        .arg("--capture-dir")
        .arg(d.join("caps"))
        .stderr(Stdio::piped())
        .spawn()
        .expect("clarion run starts");
    std::thread::sleep(Duration::from_millis(1500));
    let mut replay = Command::new("ip")
        .args(["netns", "exec", &net.b, "tcpreplay", "-q", "-i", "vb"])
        .args(["--pps", "5000"])
        .arg(repo().join("examples/demo.pcap"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tcpreplay starts");
    std::thread::sleep(Duration::from_millis(1000));
    fail(net);
    let out = run.wait_with_output().expect("clarion run ends");
    // tcpreplay fails once the veth is gone; its status does not matter.
    let _ = replay.wait();
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");

    let records = clarion_parquet::read_records(&d.join("records.parquet"))
        .unwrap_or_else(|e| panic!("the records' Parquet file is finished: {e}\n{err}"));
    let gpvs = clarion_parquet::read_gpvs(&d.join("gpvs.parquet"))
        .unwrap_or_else(|e| panic!("the GPVs' Parquet file is finished: {e}\n{err}"));
    assert!(!records.is_empty() && !gpvs.is_empty(), "{err}");
    let exported = files(&d.join("exp"));
    assert_eq!(exported.len(), 1, "{exported:?}");
    let captures = files(&d.join("caps"));
    assert!(!captures.is_empty(), "some capture around the event: {err}");
    for f in exported.iter().chain(&captures) {
        assert!(whole(f) > 0, "{} holds packets", f.display());
    }
    eprintln!(
        "{} records, {} GPVs, {} exported packets, {} captures finished",
        records.len(),
        gpvs.len(),
        whole(&exported[0]),
        captures.len()
    );
    err
}

fn files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("an entry").path())
        .collect()
}

/// The packets of a pcapng file read to its end without damage, by
/// Clarion's reader and by capinfos (when installed).
fn whole(path: &Path) -> u64 {
    let mut src = clarion_capture::CaptureFile::open(path).expect("a capture file");
    let mut n = 0;
    while let Some(p) = src.next_packet() {
        p.unwrap_or_else(|e| panic!("{}: damaged: {e}", path.display()));
        n += 1;
    }
    if let Some(capinfos) = common::tool("capinfos") {
        let out = Command::new(capinfos)
            .args(["-c", "-M"])
            .arg(path)
            .output()
            .expect("capinfos runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "capinfos {}: {}",
            path.display(),
            common::stderr(&out)
        );
        assert!(
            text.contains(&format!("Number of packets:   {n}")),
            "capinfos counts {n}: {text}"
        );
    } else {
        eprintln!("capinfos is not installed (apt-get install wireshark-common): Clarion's reader only");
    }
    n
}
