//! Export policies installed and removed at runtime on a live host
//! (`clarion run -i VETH --api ADDR`, no `--exports`), through
//! `clarion exports add|list|show|rm`: generated UDP traffic in three
//! phases, each to its own destination port, is replayed into the
//! captured interface — before a `send packets to pcapng` policy is
//! added, while it is installed, and after it is removed. The policy's
//! files hold exactly the middle phase's frames (bytes, lengths, order);
//! `list` counts them while it is installed; `show` of the removed policy
//! is refused (404, exit 2), as are a policy the language refuses (its
//! diagnostics), one already installed, and a request without the token
//! (401). And SIGHUP makes the installed policies those of the `--exports`
//! file as it now reads.
//!
//! The frames go from `vb` in one network namespace to `va` in another
//! (tcpreplay), where Clarion captures; neither end has an address nor
//! IPv6, so nothing but the replayed frames crosses the wire. Needs root,
//! `ip` and `tcpreplay`; skipped, saying why, otherwise.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clarion_capture::PacketSource;
use clarion_wire::build::{FrameSpec, IpPair, Transport};
use clarion_wire::LinkType;
use common::netns::{clarion_in, Net};

const TOKEN: &str = "runtime-exports-test-token";

/// `n` UDP frames to port `port`, their payload sizes varied.
fn phase(port: u16, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            FrameSpec {
                ip: IpPair::V4 {
                    src: [10, 1, 0, 1 + (i % 5) as u8].into(),
                    dst: [10, 2, 0, 1].into(),
                },
                transport: Transport::Udp {
                    src_port: 40_000 + (i % 7) as u16,
                    dst_port: port,
                },
                payload_len: 20 + (i * 37) % 400,
                ..FrameSpec::default()
            }
            .build()
        })
        .collect()
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let file = std::fs::File::create(path).expect("a capture file");
    let mut w = clarion_capture::PcapWriter::new(
        std::io::BufWriter::new(file),
        LinkType::Ethernet,
        clarion_capture::TsResolution::Micro,
    )
    .expect("a pcap header");
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(1_000_000_000 + i as u64 * 1_000, f, f.len() as u32)
            .expect("a frame written");
    }
    w.flush().expect("flushed");
}

/// A live host on `va` with the control API, and how to drive it.
struct Host<'a> {
    net: &'a Net,
    home: &'a Path,
    run: std::process::Child,
    err: BufReader<std::process::ChildStderr>,
    url: String,
}

impl<'a> Host<'a> {
    /// `clarion run -i va --workers N --api ... --export-dir DIR` and `extra`.
    fn start(net: &'a Net, home: &'a Path, dir: &Path, workers: u32, extra: &[&std::ffi::OsStr]) -> Host<'a> {
        let mut run = clarion_in(&net.a)
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
            // Events beside, as a host has them (the policies do not change them).
            .args(["--events", "examples/demo.clarion"])
            .args(["--api", "127.0.0.1:0", "--api-token", TOKEN])
            .args(["--workers", &workers.to_string()])
            .arg("--export-dir")
            .arg(dir)
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .expect("clarion run starts");
        let mut err = BufReader::new(run.stderr.take().expect("its stderr"));
        let mut url = None;
        let mut seen = String::new();
        for _ in 0..10 {
            let mut line = String::new();
            if err.read_line(&mut line).expect("a line") == 0 {
                break;
            }
            seen += &line;
            if let Some(rest) = line.split("http://").nth(1) {
                url = rest.split('/').next().map(|a| format!("http://{a}"));
                break;
            }
        }
        let url = url.unwrap_or_else(|| panic!("no API address in {seen}"));
        Host {
            net,
            home,
            run,
            err,
            url,
        }
    }

    /// `clarion exports ARGS` against the host, with `token` if given.
    fn exports(&self, args: &[&str], token: Option<&str>) -> std::process::Output {
        let mut c = clarion_in(&self.net.a);
        c.args(["exports", "--api", &self.url]).args(args);
        c.env_remove("CLARION_API_TOKEN").env("HOME", self.home);
        if let Some(t) = token {
            c.args(["--token", t]);
        }
        c.output().expect("clarion exports runs")
    }

    /// Waits until `clarion exports list` says `want` (10 s at most).
    fn wait_listed(&self, want: &str) {
        let t = Instant::now();
        loop {
            let listed = self.exports(&["list"], Some(TOKEN));
            if text(&listed).contains(want) {
                return;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "{want}: {}", text(&listed));
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn replay(&self, file: &Path) {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.net.b,
                "tcpreplay",
                "-q",
                "-i",
                "vb",
                "--pps",
                "5000",
            ])
            .arg(file)
            .output()
            .expect("tcpreplay runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill on our own child's pid (`ip netns exec` became clarion).
        assert_eq!(unsafe { libc::kill(self.run.id() as libc::pid_t, sig) }, 0);
    }

    /// Stops the host (SIGINT); its summary.
    fn stop(mut self) -> String {
        self.signal(libc::SIGINT);
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.err, &mut rest).expect("its summary");
        assert!(self.run.wait().expect("ends").success(), "{rest}");
        rest
    }
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The phases' frames written as captures to replay.
fn phase_files(dir: &Path, phases: &[Vec<Vec<u8>>]) -> Vec<PathBuf> {
    phases
        .iter()
        .enumerate()
        .map(|(i, frames)| {
            let p = dir.join(format!("phase{i}.pcap"));
            write_pcap(&p, frames);
            p
        })
        .collect()
}

/// The frames (bytes, length on the wire) of policy `policy`'s files in
/// `dir`, in order; every file there must be some policy's of `known`.
fn written(dir: &Path, policy: &str, known: &[&str]) -> Vec<(Vec<u8>, u32)> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.expect("an entry").path()).collect())
        .unwrap_or_default();
    names.sort();
    let mut out = Vec::new();
    for f in &names {
        let name = f.file_name().expect("a name").to_string_lossy().into_owned();
        assert!(
            name.ends_with(".pcapng") && known.iter().any(|k| name.starts_with(&format!("{k}-"))),
            "{name}"
        );
        if !name.starts_with(&format!("{policy}-")) {
            continue;
        }
        let mut src = clarion_capture::CaptureFile::open(f).expect("a pcapng");
        while let Some(p) = src.next_packet() {
            let p = p.expect("a packet");
            out.push((p.data.to_vec(), p.orig_len));
        }
    }
    out
}

fn as_sent(frames: &[Vec<u8>]) -> Vec<(Vec<u8>, u32)> {
    frames.iter().map(|f| (f.clone(), f.len() as u32)).collect()
}

fn can_replay() -> bool {
    if Command::new("tcpreplay").arg("-V").output().is_err() {
        eprintln!("skipped: tcpreplay is not installed (apt-get install tcpreplay)");
        return false;
    }
    true
}

/// With one worker, and with two (each its own exporter, every one
/// given the new set).
#[test]
fn a_policy_exports_only_while_it_is_installed() {
    let Some(net) = Net::new("t") else { return };
    if !can_replay() {
        return;
    }
    for workers in [1, 2] {
        install_and_remove(&net, workers);
    }
}

fn install_and_remove(net: &Net, workers: u32) {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let phases = [phase(1111, 40), phase(2222, 60), phase(3333, 50)];
    let files = phase_files(tmp.path(), &phases);
    let dir = tmp.path().join("out");
    let host = Host::start(net, tmp.path(), &dir, workers, &[]);

    // Phase one: no policy.
    host.replay(&files[0]);
    let listed = host.exports(&["list"], Some(TOKEN));
    assert!(listed.status.success(), "{}", text(&listed));
    assert!(
        text(&listed).contains("no export policy is installed"),
        "{}",
        text(&listed)
    );
    // The workers read phase one's frames before the policy arrives.
    std::thread::sleep(Duration::from_millis(500));

    let policy = tmp.path().join("rt.clarion");
    std::fs::write(
        &policy,
        "export rt\n  filter proto = udp\n  send packets to pcapng\n",
    )
    .expect("written");
    let policy = policy.to_str().expect("utf-8");
    let bad = tmp.path().join("bad.clarion");
    std::fs::write(&bad, "export bad\n  send packets to nowhere\n").expect("written");
    let refused = host.exports(&["add", bad.to_str().expect("utf-8")], Some(TOKEN));
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    // The diagnostic names the file, not the API's request.
    assert!(
        text(&refused).contains("bad.clarion:2:") && !text(&refused).contains("request:"),
        "{}",
        text(&refused)
    );
    let anonymous = host.exports(&["add", policy], None);
    assert_eq!(anonymous.status.code(), Some(2), "{}", text(&anonymous));
    assert!(text(&anonymous).contains("Bearer"), "{}", text(&anonymous));
    let added = host.exports(&["add", policy], Some(TOKEN));
    assert!(added.status.success(), "{}", text(&added));
    assert!(
        text(&added).contains("installed rt: 0 packets"),
        "{}",
        text(&added)
    );
    let again = host.exports(&["add", policy], Some(TOKEN));
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("installed already"), "{}", text(&again));

    // Phase two: installed. Its count reaches the phase's frames.
    host.replay(&files[1]);
    let want = format!("rt: {} packets taken", phases[1].len());
    host.wait_listed(&want);
    let shown = host.exports(&["show", "rt"], Some(TOKEN));
    assert!(
        text(&shown).contains("send packets to pcapng"),
        "{}",
        text(&shown)
    );
    let removed = host.exports(&["rm", "rt"], Some(TOKEN));
    assert!(removed.status.success(), "{}", text(&removed));
    assert!(
        text(&removed).contains(&format!("removed {want}")),
        "{}",
        text(&removed)
    );
    let gone = host.exports(&["show", "rt"], Some(TOKEN));
    assert_eq!(gone.status.code(), Some(2), "{}", text(&gone));
    assert!(
        text(&gone).contains("no export policy of this host is named `rt`"),
        "{}",
        text(&gone)
    );

    // Phase three: removed.
    host.replay(&files[2]);
    std::thread::sleep(Duration::from_millis(500));
    let summary = host.stop();
    let mut got = written(&dir, "rt", &["rt"]);
    let mut want = as_sent(&phases[1]);
    assert_eq!(
        got.len(),
        want.len(),
        "{workers} worker(s): frames in the files: {summary}"
    );
    if workers > 1 {
        // Each worker writes its own files (its flows, in order): compared as sets.
        got.sort();
        want.sort();
    }
    assert!(
        got == want,
        "{workers} worker(s): the files hold exactly phase two's frames"
    );
}

/// SIGHUP reloads `--exports`: the installed set becomes the file's. A
/// policy for port 1111 runs from the start; the file then says one for
/// port 2222 instead. Each policy's files hold exactly the frames of its
/// port replayed while it was installed.
#[test]
fn sighup_makes_the_installed_policies_the_files() {
    let Some(net) = Net::new("h") else { return };
    if !can_replay() {
        return;
    }
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let phases = [phase(1111, 40), phase(2222, 60)];
    let files = phase_files(tmp.path(), &phases);
    let dir = tmp.path().join("out");
    let policies = tmp.path().join("policies.clarion");
    let policy = |name: &str, port: u16| {
        format!("export {name}\n  filter proto = udp and dst_port = {port}\n  send packets to pcapng\n")
    };
    std::fs::write(&policies, policy("one", 1111)).expect("written");
    let host = Host::start(
        &net,
        tmp.path(),
        &dir,
        1,
        &["--exports".as_ref(), policies.as_os_str()],
    );
    host.wait_listed("one: 0 packets taken");
    host.replay(&files[0]);
    host.replay(&files[1]);
    host.wait_listed(&format!("one: {} packets taken", phases[0].len()));
    std::fs::write(&policies, policy("two", 2222)).expect("rewritten");
    host.signal(libc::SIGHUP);
    host.wait_listed("two: 0 packets taken");
    let listed = host.exports(&["list"], Some(TOKEN));
    assert!(!text(&listed).contains("one:"), "{}", text(&listed));
    host.replay(&files[1]);
    host.replay(&files[0]);
    host.wait_listed(&format!("two: {} packets taken", phases[1].len()));
    std::thread::sleep(Duration::from_millis(300));
    let summary = host.stop();
    assert!(summary.contains("SIGHUP: reloaded"), "{summary}");
    assert!(
        written(&dir, "one", &["one", "two"]) == as_sent(&phases[0]),
        "one's files: {summary}"
    );
    assert!(
        written(&dir, "two", &["one", "two"]) == as_sent(&phases[1]),
        "two's files: {summary}"
    );
}
