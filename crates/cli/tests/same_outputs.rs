//! The same outputs, byte for byte, whichever path the packets take
//! (issue 34's safety net for one pipeline): reports, flow records (JSON
//! lines and Parquet), GPVs, exported header records (through `clarion
//! collect`), exported pcapng files and the files of `then capture`, from
//! - `clarion run --pcap F` and `clarion run --pcap F --workers 2`, on the
//!   bundled capture and on every shared one;
//! - `clarion run -i va` with F replayed into the veth (tcpreplay), and
//!   `clarion run --pcap R` on R, the frames that live run received, with
//!   the kernel's times: its own `export all ... to pcapng` file. F is
//!   first reduced to what a policy exports (IP frames) by the file run's
//!   own export, so R holds every frame the live run saw. The bundled
//!   capture and a shared one of many real flows (when present).
//!
//! What is normalised, and only this:
//! - a report's `worker`: 0 from one monitor, null from merged workers
//!   (it says who made the report, not what it is);
//! - a capture file's directory in a report (each run writes its own);
//! - live against R: `complete` of the windows holding R's first or last
//!   packet: R starts and ends inside them, but the live run watched them
//!   whole (it ran before the first packet and after the last);
//! - live against R: the GPVs still open at R's last packet: R's run ends
//!   there and flushes them (`flush`), while the live run's clock goes on
//!   for the seconds before it stops, so its scans take the old ones
//!   first (`scan`); the same GPVs, compared sorted with one cause.
//!
//! The live part needs root, `ip` and `tcpreplay` (skipped, saying why,
//! otherwise); the file part runs everywhere.

mod common;

use std::collections::BTreeMap;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use clarion_capture::PacketSource;
use clarion_gpv::{EvictCause, Gpv};
use common::netns::{capturing_on_va, clarion_in, Net};
use common::{clarion_process, collecting, repo};
use serde_json::Value;

/// Events with every kind of output a report has: a few groupings and
/// windows, TCP state, and a capture around the busiest flows.
const EVENTS: &str = "\
event busy_sources
  when sum(packets) >= 5
  per src_ip
  every 100ms

event tcp_flows
  filter proto = tcp
  when sum(packets) >= 20
  per 5tuple
  every 1s
  then capture 1s before 500ms after

event lossy_tcp
  filter proto = tcp
  when sum(is_lost) > 0 or max(rtt) > 1ms
  per 5tuple
  every 1s
";

/// What one run wrote.
#[derive(Debug, PartialEq)]
struct Outputs {
    reports: Vec<Value>,
    records: Vec<u8>,
    parquet: Vec<u8>,
    gpvs: Vec<Gpv>,
    headers: Vec<u8>,
    /// The one pcapng file of the policy `all`.
    exported: Vec<u8>,
    /// `then capture` files by name.
    captures: BTreeMap<String, Vec<u8>>,
}

/// Every shared capture and the bundled one.
fn captures() -> Vec<PathBuf> {
    let mut v = vec![repo().join("examples/demo.pcap")];
    let shared = repo().join("../shared/captures");
    match std::fs::read_dir(&shared) {
        Ok(dir) => {
            let mut s: Vec<PathBuf> = dir.filter_map(|e| Some(e.ok()?.path())).collect();
            s.sort();
            v.extend(s);
        }
        Err(_) => eprintln!("{}: missing; the bundled capture only", shared.display()),
    }
    v
}

#[test]
fn files_with_one_and_two_workers_write_the_same_bytes() {
    for capture in captures() {
        let one = tempfile::tempdir().expect("a temporary directory");
        let two = tempfile::tempdir().expect("a temporary directory");
        let a = file_run(&capture, 1, one.path());
        let b = file_run(&capture, 2, two.path());
        let what = capture.display();
        assert!(!a.reports.is_empty(), "{what}: some reports");
        same(&what.to_string(), &a, &b);
        eprintln!(
            "{what}: {} reports, {} GPVs, {} captures the same with 2 workers",
            a.reports.len(),
            a.gpvs.len(),
            a.captures.len()
        );
    }
}

#[test]
fn a_live_run_writes_what_a_file_run_writes_on_the_frames_it_received() {
    let Some(net) = Net::new("s") else { return };
    if Command::new("tcpreplay").arg("-V").output().is_err() {
        eprintln!("skipped: tcpreplay is not installed (apt-get install tcpreplay)");
        return;
    }
    let mut live = vec![repo().join("examples/demo.pcap")];
    let real = repo().join("../shared/captures/pathspider_real.pcap");
    if real.exists() {
        live.push(real);
    } else {
        eprintln!("{}: missing; the bundled capture only", real.display());
    }
    for capture in live {
        let what = capture.display().to_string();
        let dirs: Vec<tempfile::TempDir> = (0..3)
            .map(|_| tempfile::tempdir().expect("a temporary directory"))
            .collect();
        // The frames a policy exports, at the capture's times, to replay.
        file_run(&capture, 1, dirs[0].path());
        let sent = exported_file(dirs[0].path());
        let got = live_run(&net, &sent, dirs[1].path());
        let received = exported_file(dirs[1].path());
        let mut want = file_run(&received, 1, dirs[2].path());
        let span = first_and_last(&received);
        let mut got = got;
        for o in [&mut got, &mut want] {
            unmark_edges(&mut o.reports, span);
            o.gpvs = flushed_alike(std::mem::take(&mut o.gpvs), span.1);
        }
        same(&format!("{what} live"), &got, &want);
        eprintln!(
            "{what}: live {} reports, {} GPVs, {} captures as the file of what it received",
            got.reports.len(),
            got.gpvs.len(),
            got.captures.len()
        );
    }
}

/// Asserts equal outputs field by field, so a failure says which.
fn same(what: &str, a: &Outputs, b: &Outputs) {
    assert_eq!(a.reports.len(), b.reports.len(), "{what}: report count");
    for (x, y) in a.reports.iter().zip(&b.reports) {
        assert_eq!(x, y, "{what}: a report");
    }
    assert!(a.records == b.records, "{what}: flow records (JSON lines)");
    assert!(a.parquet == b.parquet, "{what}: flow records (Parquet)");
    assert_eq!(a.gpvs.len(), b.gpvs.len(), "{what}: GPV count");
    for (x, y) in a.gpvs.iter().zip(&b.gpvs) {
        assert_eq!(x, y, "{what}: a GPV");
    }
    assert!(a.headers == b.headers, "{what}: header records");
    assert!(a.exported == b.exported, "{what}: exported pcapng");
    assert_eq!(
        a.captures.keys().collect::<Vec<_>>(),
        b.captures.keys().collect::<Vec<_>>(),
        "{what}: capture files"
    );
    assert!(a.captures == b.captures, "{what}: capture files' bytes");
}

/// The flags of every run, writing into `dir`: events, reports, records,
/// GPVs, captures, and the policies (every frame to pcapng, every header
/// to the collector on `port`).
fn output_flags(c: &mut Command, dir: &Path, port: u16) {
    let events = dir.join("events.clarion");
    std::fs::write(&events, EVENTS).expect("events written");
    let policies = dir.join("policies.clarion");
    let text = format!(
        "export all\n  send packets to pcapng\n\
         export headers\n  send headers to collector 127.0.0.1 port {port}\n"
    );
    std::fs::write(&policies, text).expect("policies written");
    c.args(["--host", "h", "--format", "json", "-o"])
        .arg(dir.join("reports.jsonl"))
        .arg("--events")
        .arg(events)
        .arg("--records")
        .arg(dir.join("records.jsonl"))
        .arg("--records")
        .arg(dir.join("records.parquet"))
        .arg("--gpv")
        .arg(dir.join("g.gpv"))
        .arg("--capture-dir")
        .arg(dir.join("caps"))
        .arg("--exports")
        .arg(policies)
        .arg("--export-dir")
        .arg(dir.join("exp"));
}

/// `clarion collect` on a free loopback port (in namespace `ns` if
/// given) writing JSON lines to `dir/headers.jsonl`, until stopped.
fn collector(ns: Option<&str>, dir: &Path) -> (Child, u16) {
    let mut c = match ns {
        Some(ns) => clarion_in(ns),
        None => clarion_process(),
    };
    c.args(["collect", "--insecure", "--listen", "127.0.0.1:0"])
        .args(["--duration", "120s", "-o"])
        .arg(dir.join("headers.jsonl"));
    collecting(c)
}

/// Stops a process with SIGINT and waits for it, which must succeed.
fn interrupt(mut child: Child, what: &str) -> String {
    // SAFETY: kill on our own child's pid (`ip netns exec` execs clarion).
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) }, 0);
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        std::io::Read::read_to_string(&mut e, &mut err).expect("its stderr");
    }
    assert!(child.wait().expect("it ends").success(), "{what}: {err}");
    err
}

fn file_run(capture: &Path, workers: u32, dir: &Path) -> Outputs {
    let (collect, port) = collector(None, dir);
    let mut c = clarion_process();
    c.arg("run").arg("--pcap").arg(capture);
    c.args(["--workers", &workers.to_string()]);
    output_flags(&mut c, dir, port);
    let out = c.output().expect("clarion run runs");
    let what = format!("{} with {workers} worker(s)", capture.display());
    assert!(out.status.success(), "{what}: {}", common::stderr(&out));
    // The datagrams are on the loopback already; the collector's socket
    // holds them until it reads them.
    std::thread::sleep(Duration::from_millis(500));
    interrupt(collect, &what);
    read_outputs(dir)
}

fn live_run(net: &Net, capture: &Path, dir: &Path) -> Outputs {
    let what = format!("{} live", capture.display());
    let (collect, port) = collector(Some(&net.a), dir);
    let mut c = clarion_in(&net.a);
    // A clock 20 ms behind the wall clock: a frame the kernel holds longer
    // than the default 100 µs (a loaded machine) would be out of order
    // live and not in R, a difference of scheduling, not of the pipeline.
    c.args(["run", "-i", "va", "--stats-every", "0", "--duration", "120s"])
        .args(["--snaplen", "2048", "--clock-lag", "20ms"]);
    output_flags(&mut c, dir, port);
    let mut run = c.stderr(Stdio::piped()).spawn().expect("clarion run starts");
    let mut err = BufReader::new(run.stderr.take().expect("its stderr"));
    // Warnings first (the unauthenticated header datagrams), then this.
    capturing_on_va(&mut err, &what);
    net.replay(capture, &what);
    // The last windows close and their captures' spans pass meanwhile.
    std::thread::sleep(Duration::from_millis(2500));
    run.stderr = Some(err.into_inner());
    let rest = interrupt(run, &what);
    assert!(rest.contains("live: 0 kernel drops"), "{what}: {rest}");
    std::thread::sleep(Duration::from_millis(500));
    interrupt(collect, &what);
    read_outputs(dir)
}

fn read_outputs(dir: &Path) -> Outputs {
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let caps = dir.join("caps");
    let mut captures = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir(&caps) {
        for e in entries {
            let path = e.expect("an entry").path();
            let name = path.file_name().expect("a name").to_string_lossy().into_owned();
            captures.insert(name, std::fs::read(&path).expect("a capture file"));
        }
    }
    let prefix = format!("{}/", caps.display());
    let reports = std::fs::read_to_string(dir.join("reports.jsonl"))
        .expect("reports")
        .lines()
        .map(|l| {
            let mut r: Value = serde_json::from_str(l).expect("a report");
            r["worker"] = Value::Null;
            if let Some(f) = r["capture"]["file"].as_str() {
                let name = f.strip_prefix(&prefix).unwrap_or(f).to_string();
                r["capture"]["file"] = Value::String(name);
            }
            r
        })
        .collect();
    let gpvs = clarion_gpv::GpvReader::new(BufReader::new(
        std::fs::File::open(dir.join("g.gpv")).expect("the GPV file"),
    ))
    .expect("a GPV file")
    .collect::<Result<_, _>>()
    .expect("undamaged GPVs");
    Outputs {
        reports,
        records: read("records.jsonl"),
        parquet: read("records.parquet"),
        gpvs,
        headers: read("headers.jsonl"),
        exported: std::fs::read(exported_file(dir)).expect("the exported file"),
        captures,
    }
}

/// The policy `all`'s one pcapng file in `dir/exp`.
fn exported_file(dir: &Path) -> PathBuf {
    let files: Vec<PathBuf> = std::fs::read_dir(dir.join("exp"))
        .expect("the export directory")
        .map(|e| e.expect("an entry").path())
        .collect();
    assert_eq!(files.len(), 1, "one exported file: {files:?}");
    files.into_iter().next().expect("one")
}

/// The first and last packet times of a capture.
fn first_and_last(path: &Path) -> (u64, u64) {
    let mut src = clarion_capture::CaptureFile::open(path).expect("a capture");
    let (mut first, mut last) = (u64::MAX, 0);
    while let Some(p) = src.next_packet() {
        let ts = p.expect("a packet").ts_ns;
        first = first.min(ts);
        last = last.max(ts);
    }
    (first, last)
}

/// Drops `complete` from the reports of windows holding `first` or `last`.
fn unmark_edges(reports: &mut [Value], (first, last): (u64, u64)) {
    for r in reports {
        let w = &r["window"];
        let (Some(start), Some(end)) = (w["start_ns"].as_u64(), w["end_ns"].as_u64()) else {
            panic!("a report without its window: {r}");
        };
        if (start..end).contains(&first) || (start..end).contains(&last) {
            r["completeness"]["complete"] = Value::Null;
        }
    }
}

/// The GPVs in order up to the first one still open at `last` (started at
/// or after `last - 1 s`, the age a scan evicts at, and flushed or scanned
/// after the last packet), then those, sorted and all marked `flush`.
fn flushed_alike(gpvs: Vec<Gpv>, last: u64) -> Vec<Gpv> {
    let open = |g: &Gpv| {
        matches!(g.header.cause, EvictCause::Flush | EvictCause::Scan)
            && g.timed().last().is_some_and(|(t, _)| t + 1_000_000_000 >= last)
    };
    let cut = gpvs.iter().position(open).unwrap_or(gpvs.len());
    let mut gpvs = gpvs;
    let mut tail = gpvs.split_off(cut);
    for g in &mut tail {
        g.header.cause = EvictCause::Flush;
    }
    tail.sort_by_key(|g| (g.header.start_ns, g.header.key));
    gpvs.extend(tail);
    gpvs
}
