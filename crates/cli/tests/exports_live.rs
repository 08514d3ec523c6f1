//! Export policies on live capture (`clarion run -i VETH --exports`),
//! against the capture replayed into the interface, read plainly:
//! - a `packets` policy's pcapng files hold exactly the replayed frames it
//!   takes (bytes and lengths), each flow's in the capture's order, and no
//!   two workers write one file;
//! - a `headers` policy's stream, through `clarion collect`, gives back
//!   the header record of every replayed frame (all but the capture time,
//!   which is the live kernel's), each flow's in order, one exporter id per
//!   worker and no datagram lost;
//!
//! with one worker and with two (a fanout group: each worker its own
//! exporter).
//!
//! The frames go from `vb` in one network namespace to `va` in another
//! (tcpreplay), where Clarion captures; neither end has an address nor
//! IPv6, so nothing but the replayed frames crosses the wire. Needs root,
//! `ip` and `tcpreplay`; skipped, saying why, otherwise.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use clarion_capture::PacketSource;
use clarion_headers::HeaderRecord;
use common::netns::{clarion_in, collector, Net};
use common::repo;

/// The captures replayed: the bundled one, and a shared one of many real
/// flows when present (skipped, saying so, when not).
fn captures() -> Vec<PathBuf> {
    let mut v = vec![repo().join("examples/demo.pcap")];
    let real = repo().join("../shared/captures/pathspider_real.pcap");
    if real.exists() {
        v.push(real);
    } else {
        eprintln!("{}: missing; the bundled capture only", real.display());
    }
    v
}

#[test]
fn live_exports_equal_the_replayed_frames_with_one_and_two_workers() {
    let Some(net) = Net::new("r") else { return };
    if Command::new("tcpreplay").arg("-V").output().is_err() {
        eprintln!("skipped: tcpreplay is not installed (apt-get install tcpreplay)");
        return;
    }
    for capture in captures() {
        for workers in [1u32, 2] {
            check(&net, &capture, workers);
        }
    }
}

/// With several interfaces, a header record carries its interface's
/// index in `-i` (`wa` first, `va` second: 1 for the frames replayed into
/// `va`), on every worker's rings.
#[test]
fn headers_carry_the_index_of_their_interface() {
    let Some(net) = Net::new("i") else { return };
    if Command::new("tcpreplay").arg("-V").output().is_err() {
        eprintln!("skipped: tcpreplay is not installed (apt-get install tcpreplay)");
        return;
    }
    assert!(net.pair("wa", "wb"), "a second veth pair");
    let capture = repo().join("examples/demo.pcap");
    let sent = 500;
    let frames = read_frames(&capture, true);
    assert!(frames.len() >= sent);
    for workers in ["1", "2"] {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let headers = tmp.path().join("h.jsonl");
        let (collector, port) = collector(&net.a, &headers, sent);
        let policies = tmp.path().join("p.clarion");
        std::fs::write(
            &policies,
            format!("export all\n  send headers to collector 127.0.0.1 port {port}\n"),
        )
        .expect("policies written");
        let mut run = clarion_in(&net.a)
            .args([
                "run",
                "-i",
                "wa",
                "-i",
                "va",
                "--stats-every",
                "0",
                "--duration",
                "60s",
            ])
            .args(["--workers", workers, "--exports"])
            .arg(&policies)
            .stderr(Stdio::piped())
            .spawn()
            .expect("clarion run starts");
        let mut err = BufReader::new(run.stderr.take().expect("its stderr"));
        let first = capture_started(&mut err);
        assert!(first.contains("capturing on wa, va"), "{first}");
        let replay = Command::new("ip")
            .args([
                "netns",
                "exec",
                &net.b,
                "tcpreplay",
                "-q",
                "-i",
                "vb",
                "--pps",
                "10000",
            ])
            .arg(format!("--limit={sent}"))
            .arg(&capture)
            .output()
            .expect("tcpreplay runs");
        assert!(
            replay.status.success(),
            "{}",
            String::from_utf8_lossy(&replay.stderr)
        );
        let collected = collector.wait_with_output().expect("collect ends");
        // SAFETY: kill on our own child's pid (`ip netns exec` became clarion).
        assert_eq!(unsafe { libc::kill(run.id() as libc::pid_t, libc::SIGINT) }, 0);
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut err, &mut rest).expect("its summary");
        assert!(run.wait().expect("ends").success(), "{rest}");
        assert!(
            collected.status.success(),
            "{}",
            String::from_utf8_lossy(&collected.stderr)
        );
        let got: Vec<HeaderRecord> = std::fs::read_to_string(&headers)
            .expect("headers written")
            .lines()
            .map(|l| serde_json::from_str(l).expect("a header record"))
            .collect();
        assert_eq!(got.len(), sent, "{workers} worker(s)");
        let mut want: BTreeMap<String, Vec<HeaderRecord>> = BTreeMap::new();
        for f in &frames[..sent] {
            let h = HeaderRecord::from_packet(&f.record, 1, 1);
            want.entry(flow_of(&h))
                .or_default()
                .push(HeaderRecord { ts_ns: 0, ..h });
        }
        let mut by_flow: BTreeMap<String, Vec<HeaderRecord>> = BTreeMap::new();
        for h in &got {
            by_flow
                .entry(flow_of(h))
                .or_default()
                .push(HeaderRecord { ts_ns: 0, ..*h });
        }
        assert!(
            by_flow == want,
            "{workers} worker(s): headers (interface 1) differ"
        );
    }
}

/// The default snap length (headers only) would cut what a packets
/// policy sends: the run says so, naming the policy and the fix; not for
/// headers, a snap within the ring's, or a ring long enough.
#[test]
fn a_snap_length_that_cuts_exported_packets_is_named() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: opening a packet socket needs root");
        return;
    }
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let policies = tmp.path().join("p.clarion");
    std::fs::write(
        &policies,
        "export whole
  send packets to pcapng
         export short
  send packets snap 128B to pcapng
         export heads
  send headers to collector 127.0.0.1 port 9
",
    )
    .expect("policies written");
    for (snaplen, warned) in [("256", true), ("1518", false)] {
        let out = common::clarion_process()
            .args(["run", "-i", "lo", "--duration", "200ms", "--snaplen", snaplen])
            .arg("--exports")
            .arg(&policies)
            .arg("--export-dir")
            // One directory a run: two runs in one second share a run id,
            // so the second would find the first's files (lo carries other
            // processes' packets) and refuse to overwrite them.
            .arg(tmp.path().join(format!("out-{snaplen}")))
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(err.contains(", export policies; Ctrl-C stops"), "{err}");
        // The snap length's warning (beside the one for the unkeyed header
        // stream, which this test does not concern).
        let line = err.lines().find(|l| l.contains("warning: --snaplen"));
        if warned {
            assert_eq!(
                line,
                Some(
                    "clarion: warning: --snaplen 256 cuts the frames export policy whole sends; \
                     raise --snaplen to the largest frame (1518, 9216 with jumbo frames)"
                ),
                "{err}"
            );
        } else {
            assert_eq!(line, None, "{err}");
        }
    }
}

/// One replay of `capture` into a run of `workers` workers.
fn check(net: &Net, capture: &Path, workers: u32) {
    let what = format!("{} with {workers} worker(s)", capture.display());
    // What crosses the wire: tcpreplay sends each frame's captured bytes
    // (a capture cut at a snap length gives shorter frames).
    let frames = read_frames(capture, true);
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let headers = tmp.path().join("headers.jsonl");
    let (collector, port) = collector(&net.a, &headers, frames.len());
    let policies = tmp.path().join("policies.clarion");
    std::fs::write(
        &policies,
        format!(
            "export udp\n  filter proto = udp\n  send packets to pcapng rotate 64KB\n\
             export all\n  send headers to collector 127.0.0.1 port {port}\n"
        ),
    )
    .expect("policies written");
    let dir = tmp.path().join("out");
    let mut run = clarion_in(&net.a)
        // Whole frames (the default snap length keeps the headers alone);
        // stopped by SIGINT once the replay is done, or after a minute.
        .args([
            "run",
            "-i",
            "va",
            "--stats-every",
            "0",
            "--duration",
            "60s",
            "--snaplen",
            "2048",
        ])
        .args(["--workers", &workers.to_string()])
        .arg("--exports")
        .arg(&policies)
        .arg("--export-dir")
        .arg(&dir)
        .stderr(Stdio::piped())
        .spawn()
        .expect("clarion run starts");
    let mut err = BufReader::new(run.stderr.take().expect("its stderr"));
    let first = capture_started(&mut err);
    assert!(first.contains("capturing on va"), "{what}: {first}");
    net.replay(capture, &what);
    // The last frames out of the ring before the stop.
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill on our own child's pid (`ip netns exec` became clarion).
    let sent = unsafe { libc::kill(run.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(sent, 0, "{what}: SIGINT sent");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).expect("its summary");
    let status = run.wait().expect("clarion run ends");
    assert!(status.success(), "{what}: {first}{rest}");
    assert!(rest.contains("live: 0 kernel drops"), "{what}: {rest}");
    // The summary's counters, summed over the workers' lines.
    let udp = frames.iter().filter(|f| f.key.proto == 17).count() as u64;
    assert_eq!(policy_total(&rest, "udp"), udp, "{what}: {rest}");
    assert_eq!(policy_total(&rest, "all"), frames.len() as u64, "{what}: {rest}");
    if workers > 1 {
        assert!(rest.contains("worker 1:"), "{what}: per worker: {rest}");
    }

    // Packets: the UDP frames, each flow's in order, every file one worker's.
    let want: Vec<&Frame> = frames.iter().filter(|f| f.key.proto == 17).collect();
    assert!(!want.is_empty(), "{what}: UDP frames to export");
    let files = written_files(&dir, workers);
    let mut got: Vec<Frame> = Vec::new();
    for worker_files in files.values() {
        for f in worker_files {
            got.extend(read_frames(f, false));
        }
    }
    assert_eq!(got.len(), want.len(), "{what}: frames in the files");
    assert!(
        by_flow(got.iter(), |f| (f.data.clone(), f.orig_len))
            == by_flow(want.iter().copied(), |f| (f.data.clone(), f.orig_len)),
        "{what}: the files' frames differ from the capture's UDP frames"
    );

    // Headers: every frame's, through the collector.
    let collected = collector.wait_with_output().expect("collect ends");
    let said = String::from_utf8_lossy(&collected.stderr);
    assert!(collected.status.success(), "{what}: collect: {said}");
    for w in 0..workers {
        assert!(
            said.contains(&format!(" worker {w} session "))
                && !said.contains(&format!(" worker {workers} session ")),
            "{what}: one stream per worker: {said}"
        );
    }
    let got: Vec<HeaderRecord> = std::fs::read_to_string(&headers)
        .expect("headers written")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a header record"))
        .collect();
    assert_eq!(got.len(), frames.len(), "{what}: headers");
    let untimed = |r: &HeaderRecord| HeaderRecord { ts_ns: 0, ..*r };
    let want_headers: Vec<(clarion_wire::FlowKey, HeaderRecord)> = frames
        .iter()
        .map(|f| (f.key, untimed(&HeaderRecord::from_packet(&f.record, 0, 1))))
        .collect();
    let mut want_by_flow: BTreeMap<String, Vec<HeaderRecord>> = BTreeMap::new();
    for (_, h) in &want_headers {
        want_by_flow.entry(flow_of(h)).or_default().push(*h);
    }
    let mut got_by_flow: BTreeMap<String, Vec<HeaderRecord>> = BTreeMap::new();
    for h in &got {
        got_by_flow.entry(flow_of(h)).or_default().push(untimed(h));
    }
    assert_eq!(
        got_by_flow.len(),
        want_by_flow.len(),
        "{what}: flows of the headers"
    );
    for (flow, w) in &want_by_flow {
        assert!(
            got_by_flow.get(flow) == Some(w),
            "{what}: headers of flow {flow} differ"
        );
    }
    // Live times: the kernel's, in each worker's order.
    assert!(
        got.iter().all(|h| h.ts_ns > 1_600_000_000_000_000_000),
        "{what}: live times"
    );
}

/// One frame of a capture or an exported file, parsed.
struct Frame {
    data: Vec<u8>,
    orig_len: u32,
    key: clarion_wire::FlowKey,
    record: clarion_wire::PacketRecord,
}

/// The frames of a file; `as_sent`: as tcpreplay sends them (the
/// captured bytes, whatever the length on the capture's wire).
/// The line of a live run's standard error saying it is capturing, read
/// past the warnings before it (the header stream is not keyed here: the
/// run warns that its datagrams are not authenticated); all lines read,
/// if none says so within the first eight.
fn capture_started(err: &mut impl BufRead) -> String {
    let mut seen = String::new();
    for _ in 0..8 {
        let mut line = String::new();
        if err.read_line(&mut line).expect("its first lines") == 0 {
            break;
        }
        if line.contains("capturing on") {
            return line;
        }
        seen.push_str(&line);
    }
    seen
}

fn read_frames(path: &Path, as_sent: bool) -> Vec<Frame> {
    let mut src = clarion_capture::CaptureFile::open(path).expect("a capture");
    let mut out = Vec::new();
    while let Some(r) = src.next_packet() {
        let p = r.expect("undamaged");
        let orig_len = if as_sent { p.data.len() as u32 } else { p.orig_len };
        if let Ok(rec) = clarion_wire::parse_frame(p.link, p.data, p.ts_ns, orig_len) {
            out.push(Frame {
                data: p.data.to_vec(),
                orig_len,
                key: rec.key,
                record: rec,
            });
        }
    }
    out
}

/// Per flow (one direction), what `f` gives of each frame, in order.
fn by_flow<'a, T>(
    frames: impl Iterator<Item = &'a Frame>,
    f: impl Fn(&Frame) -> T,
) -> BTreeMap<clarion_wire::FlowKey, Vec<T>> {
    let mut m: BTreeMap<clarion_wire::FlowKey, Vec<T>> = BTreeMap::new();
    for fr in frames {
        m.entry(fr.key).or_default().push(f(fr));
    }
    m
}

/// The packets policy `name` took, by the summary's lines (one a worker).
fn policy_total(summary: &str, name: &str) -> u64 {
    summary
        .lines()
        .filter_map(|l| l.trim().strip_prefix(&format!("policy {name}: ")))
        .map(|n| {
            let digits: String = n
                .chars()
                .take_while(|c| *c != ' ')
                .filter(char::is_ascii_digit)
                .collect();
            digits.parse::<u64>().expect("a count")
        })
        .sum()
}

/// A header record's flow, as text (the record's own fields).
fn flow_of(h: &HeaderRecord) -> String {
    format!("{} {} {:?} {} {:?}", h.src, h.dst, h.ports, h.proto, h.vlan)
}

/// The policy's files by worker (`udp-RUN[-wK]-NNNNNN.pcapng`), each
/// worker's in order. Several workers: every file names one of them.
fn written_files(dir: &Path, workers: u32) -> BTreeMap<String, Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.expect("an entry").path()).collect())
        .unwrap_or_default();
    files.sort();
    let mut by_worker: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for f in files {
        let name = f.file_name().expect("a name").to_string_lossy().into_owned();
        assert!(name.starts_with("udp-") && name.ends_with(".pcapng"), "{name}");
        let worker = if workers == 1 {
            String::new()
        } else {
            let w = name
                .split('-')
                .find(|p| {
                    p.strip_prefix('w')
                        .is_some_and(|n| n.parse::<u32>().is_ok_and(|n| n < workers))
                })
                .unwrap_or_else(|| panic!("{name} names no worker"));
            w.to_string()
        };
        by_worker.entry(worker).or_default().push(f);
    }
    by_worker
}
