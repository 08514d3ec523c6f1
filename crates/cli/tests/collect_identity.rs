//! `clarion collect` with several exporters, a forger and a stop (issue 33,
//! part 1: "the header collector silently loses and mixes data"):
//! - two hosts replaying one capture at once, each `--exporter-name`d and
//!   keyed, while a forger sends junk, an untagged and a wrongly tagged
//!   datagram: both hosts' headers are written exactly (each header of
//!   the capture twice), each host's stream is listed with its own counts,
//!   and the forger's datagrams are refused and counted under its address;
//! - SIGTERM right after a replay (the collector stopped meanwhile, so the
//!   datagrams wait in its socket): everything queued is read and written
//!   before the summary;
//! - a gap is loss (exit 1, said in the summary), a forged jump of 2^51 is
//!   one reset, not 2^51 lost; an old version is refused and counted;
//! - without a key nor --insecure the collector refuses to start, saying
//!   how to make a key.

mod common;

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use clarion_headers::{Encoder, EncoderConfig, ExporterName, HeaderRecord, Key};
use common::{clarion, clarion_process, repo, stderr};

/// The largest shared capture (the bundled one without them).
fn capture() -> PathBuf {
    let shared = repo().join("../shared/captures/pathspider_real.pcap");
    if shared.is_file() {
        shared
    } else {
        eprintln!("note: no shared captures; the bundled one");
        repo().join("examples/demo.pcap")
    }
}

/// The header record of every packet of a capture that parses, with its
/// original length on the wire, as JSON text (comparable, sortable).
fn headers_of(path: &Path) -> Vec<String> {
    use clarion_capture::PacketSource;
    let mut src = clarion_capture::CaptureFile::open(path).expect("open capture");
    let mut out = Vec::new();
    while let Some(r) = src.next_packet() {
        let p = r.expect("undamaged capture");
        if let Ok(rec) = clarion_wire::parse_frame(p.link, p.data, p.ts_ns, p.orig_len) {
            let h = HeaderRecord::from_packet(&rec, 0, 1).with_wire_len(p.orig_len);
            out.push(serde_json::to_string(&h).expect("JSON"));
        }
    }
    out
}

/// The records of a JSON lines output, as normalised JSON text.
fn written(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .expect("headers written")
        .lines()
        .map(|l| {
            let h: HeaderRecord = serde_json::from_str(l).expect("a header record");
            serde_json::to_string(&h).expect("JSON")
        })
        .collect()
}

/// A new key file, by `clarion collect --make-key`.
fn make_key(dir: &Path) -> PathBuf {
    let path = dir.join("headers.key");
    let o = clarion()
        .args(["collect", "--make-key"])
        .arg(&path)
        .output()
        .expect("clarion collect --make-key");
    assert!(o.status.success(), "{}", stderr(&o));
    path
}

/// `clarion collect ARGS` on a free loopback port; the process and its port.
fn collector(args: &[&str], output: &Path) -> (Child, u16) {
    // At most two minutes unless told.
    let limit: &[&str] = if args.contains(&"--duration") {
        &[]
    } else {
        &["--duration", "120s"]
    };
    let mut collect = clarion_process();
    collect
        .args(["collect", "--listen", "127.0.0.1:0", "--format", "jsonl"])
        .args(limit)
        .args(args)
        .arg("-o")
        .arg(output);
    common::collecting(collect)
}

/// `clarion run` replaying `capture` with every packet's headers to `port`.
fn exporter(dir: &Path, capture: &Path, port: u16, name: &str, key: &Path) -> Command {
    let policies = dir.join(format!("{name}.clarion"));
    std::fs::write(
        &policies,
        format!("export everything\n  send headers to collector 127.0.0.1 port {port}\n"),
    )
    .expect("policies written");
    let mut c = clarion_process();
    c.arg("run")
        .arg("--pcap")
        .arg(capture)
        .arg("--exports")
        .arg(&policies)
        .args(["--exporter-name", name, "--export-key"])
        .arg(key)
        .arg("-q");
    c
}

/// The summary's line of exporter `name`.
fn stream_line<'a>(summary: &'a str, name: &str) -> Vec<&'a str> {
    summary
        .lines()
        .filter(|l| l.trim_start().starts_with(&format!("exporter {name} ")))
        .collect()
}

/// A datagram of one record, from `name` worker 0, tagged with `key`.
fn datagram(name: &str, session: u64, key: Option<Key>, sequences: &[u64]) -> Vec<Vec<u8>> {
    let rec = HeaderRecord::from_packet(&clarion_wire::build::FrameSpec::default().record(5), 0, 1);
    let mut enc = Encoder::new(EncoderConfig {
        exporter: ExporterName::new(name).expect("a name"),
        session,
        key,
        ..EncoderConfig::default()
    })
    .expect("an encoder");
    // The encoder numbers its datagrams from 0: make them all, keep those asked.
    let last = sequences.iter().copied().max().unwrap_or(0);
    let mut out = Vec::new();
    for s in 0..=last.min(10) {
        enc.push(&rec);
        let d = enc.flush().expect("a datagram").to_vec();
        if sequences.contains(&s) {
            out.push(d);
        }
    }
    out
}

#[test]
fn two_exporters_and_a_forger_to_one_collector() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let key_path = make_key(tmp.path());
    // The file is the owner's alone, and never overwritten.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key_path)
        .expect("key file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let again = clarion()
        .args(["collect", "--make-key"])
        .arg(&key_path)
        .output()
        .expect("clarion collect --make-key");
    assert!(!again.status.success(), "a key file is never overwritten");

    let capture = capture();
    let want = headers_of(&capture);
    let out = tmp.path().join("headers.jsonl");
    let total = 2 * want.len();
    let (child, port) = collector(
        &[
            "--key",
            key_path.to_str().expect("a UTF-8 path"),
            "--count",
            &total.to_string(),
        ],
        &out,
    );

    // The forger first: junk, then datagrams that name host-a, one untagged
    // and one tagged with another key.
    let forger = UdpSocket::bind("127.0.0.1:0").expect("a socket");
    forger.connect(("127.0.0.1", port)).expect("connect");
    let forger_addr = forger.local_addr().expect("its address");
    let wrong = Key::new(&[9; 32]).expect("a key");
    let mut forged = vec![b"not a header datagram".to_vec()];
    forged.extend(datagram("host-a", 1, None, &[0]));
    forged.extend(datagram("host-a", 1, Some(wrong), &[0]));
    for d in &forged {
        forger.send(d).expect("sent");
    }

    // Two hosts at once, both worker 0 (the issue: both were "exporter 0").
    let a = exporter(tmp.path(), &capture, port, "host-a", &key_path)
        .spawn()
        .expect("host-a runs");
    let b = exporter(tmp.path(), &capture, port, "host-b", &key_path)
        .spawn()
        .expect("host-b runs");
    for (name, run) in [("host-a", a), ("host-b", b)] {
        let o = run.wait_with_output().expect("the run ends");
        assert!(o.status.success(), "{name}: {}", stderr(&o));
    }
    let collected = child.wait_with_output().expect("collect ends");
    let summary = stderr(&collected);
    assert!(collected.status.success(), "{summary}");

    // Every header of the capture exactly twice, nothing else.
    let mut got = written(&out);
    let mut want2: Vec<String> = want.iter().chain(&want).cloned().collect();
    got.sort();
    want2.sort();
    assert_eq!(got.len(), want2.len(), "{summary}");
    assert!(
        got == want2,
        "the headers written are not both hosts' exactly\n{summary}"
    );

    // Each host's own stream, complete.
    for name in ["host-a", "host-b"] {
        let lines = stream_line(&summary, name);
        assert_eq!(lines.len(), 1, "one stream of {name}:\n{summary}");
        let l = lines[0];
        assert!(l.contains(" worker 0 session "), "{l}");
        assert!(
            l.contains(&format!(
                ", {} headers; lost 0 datagrams (0 headers), 0 late, 0 repeated, 0 too old, 0 resets",
                clarion_cmdline::thousands(want.len() as u64)
            )),
            "{l}\n{summary}"
        );
    }
    // The forger: refused, counted by reason and under its address.
    assert!(
        summary.contains("refused 3 datagrams: 1 bad_tag, 1 not_clarion, 1 unauthenticated"),
        "{summary}"
    );
    assert!(summary.contains(&format!("from {forger_addr}: 3")), "{summary}");
    assert!(!summary.contains("LOST"), "{summary}");
}

#[test]
fn sigterm_right_after_a_replay_reads_what_is_queued() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let key_path = make_key(tmp.path());
    let capture = capture();
    let want = headers_of(&capture);
    let out = tmp.path().join("headers.jsonl");
    let (child, port) = collector(&["--key", key_path.to_str().expect("a UTF-8 path")], &out);
    let pid = i32::try_from(child.id()).expect("a pid");
    // Stopped, the collector reads nothing: the whole replay waits in its
    // socket (64 MiB asked; as root granted) when SIGTERM comes.
    // SAFETY: signals to our own child, whose pid is live until waited for.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let o = exporter(tmp.path(), &capture, port, "replayer", &key_path)
        .output()
        .expect("the run");
    assert!(o.status.success(), "{}", stderr(&o));
    // SAFETY: as above.
    unsafe {
        assert_eq!(libc::kill(pid, libc::SIGTERM), 0);
        assert_eq!(libc::kill(pid, libc::SIGCONT), 0);
    }
    let collected = child.wait_with_output().expect("collect ends");
    let summary = stderr(&collected);
    let mut got = written(&out);
    let mut want = want;
    got.sort();
    want.sort();
    if collected.status.success() {
        assert!(got == want, "all queued headers written\n{summary}");
        assert!(summary.contains("read "), "the drain is reported:\n{summary}");
        assert!(summary.contains(" datagrams queued at the stop"), "{summary}");
    } else {
        // Only without root can the buffer be too small: then the loss
        // must be said, never silent.
        assert_eq!(collected.status.code(), Some(1), "{summary}");
        assert!(summary.contains("LOST"), "{summary}");
        assert!(summary.contains("dropped by the kernel"), "{summary}");
    }
}

#[test]
fn gaps_are_loss_and_a_forged_jump_is_a_reset() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let key_path = make_key(tmp.path());
    let text = std::fs::read_to_string(&key_path).expect("key file");
    let key = Key::parse(&text).expect("a key");
    let out = tmp.path().join("headers.jsonl");
    let (child, port) = collector(
        &[
            "--key",
            key_path.to_str().expect("a UTF-8 path"),
            "--duration",
            "3s",
        ],
        &out,
    );
    let tx = UdpSocket::bind("127.0.0.1:0").expect("a socket");
    tx.connect(("127.0.0.1", port)).expect("connect");
    // Datagrams 0, 1 and 3 of a stream: 2 is lost.
    for d in datagram("gappy", 5, Some(key.clone()), &[0, 1, 3]) {
        tx.send(&d).expect("sent");
    }
    // Another stream: 0, then one whose sequence number says 2^51 (tagged
    // with the key: a key holder's bug or a corrupted exporter).
    let mut ds = datagram("jumpy", 6, Some(key.clone()), &[0, 1]);
    let mut d1 = ds.pop().expect("datagram 1");
    d1[24..32].copy_from_slice(&(1u64 << 51).to_be_bytes());
    let n = d1.len() - clarion_headers::TAG_LEN;
    let tag = key.tag(&d1[..n]);
    d1[n..].copy_from_slice(&tag);
    tx.send(&ds[0]).expect("sent");
    tx.send(&d1).expect("sent");
    // A version 1 datagram.
    let mut v1 = b"CLHR".to_vec();
    v1.extend([1, 40, 0, 0, 0, 40, 0, 0]);
    v1.resize(40, 0);
    tx.send(&v1).expect("sent");
    let collected = child.wait_with_output().expect("collect ends");
    let summary = stderr(&collected);
    assert_eq!(collected.status.code(), Some(1), "{summary}");
    let gappy = stream_line(&summary, "gappy");
    assert!(
        gappy.len() == 1 && gappy[0].contains("lost 1 datagrams (1 headers)"),
        "{summary}"
    );
    let jumpy = stream_line(&summary, "jumpy");
    assert!(
        jumpy.len() == 1 && jumpy[0].contains("lost 0 datagrams (0 headers)"),
        "{summary}"
    );
    assert!(jumpy[0].contains(", 1 resets"), "{summary}");
    assert!(summary.contains("1 version"), "{summary}");
    assert!(
        summary.contains("headers were LOST: 1 datagrams missing"),
        "{summary}"
    );
    assert!(summary.contains("1 implausible sequence jumps"), "{summary}");
    assert_eq!(written(&out).len(), 5, "every readable datagram's header written");
}

#[test]
fn no_key_no_start() {
    let o = clarion()
        .args(["collect", "--listen", "127.0.0.1:0", "--duration", "1s"])
        .output()
        .expect("clarion collect");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("--make-key") && e.contains("--insecure"), "{e}");
    let help = clarion().args(["collect", "--help"]).output().expect("help");
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    for says in ["--key", "--insecure", "--make-key", "Exit status", "lost"] {
        assert!(help.contains(says), "--help says {says}:\n{help}");
    }
}

#[test]
fn exporter_names_and_keys_are_checked() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let policies = tmp.path().join("p.clarion");
    std::fs::write(
        &policies,
        "export h\n  send headers to collector 127.0.0.1 port 9\n",
    )
    .expect("written");
    let run = |extra: &[&str]| {
        clarion()
            .args(["run", "--pcap"])
            .arg(repo().join("examples/demo.pcap"))
            .arg("--exports")
            .arg(&policies)
            .args(extra)
            .arg("-q")
            .output()
            .expect("clarion run")
    };
    let o = run(&["--exporter-name", "two words"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--exporter-name"), "{}", stderr(&o));
    // Without a key the operator is told that a collector will refuse them.
    let o = run(&[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not authenticated (no --export-key)"),
        "{}",
        stderr(&o)
    );
    // A key file that is not one is refused, saying how to make one.
    use std::os::unix::fs::PermissionsExt;
    let bad = tmp.path().join("bad.key");
    std::fs::write(&bad, "not hex\n").expect("written");
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let o = run(&["--export-key", bad.to_str().expect("UTF-8")]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--make-key"), "{}", stderr(&o));
    let key = make_key(tmp.path());
    // A key others may read is refused, as the API's token file is.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let o = run(&["--export-key", key.to_str().expect("UTF-8")]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("chmod 600"), "{}", stderr(&o));
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let o = run(&["--export-key", key.to_str().expect("UTF-8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("not authenticated"), "{}", stderr(&o));
}
