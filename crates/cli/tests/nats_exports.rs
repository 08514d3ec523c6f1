//! Export policies installed from the manager onto its agents: a real
//! nats-server, a manager with its control API, two agents replaying
//! generated traffic at the capture's pace and a third registering after
//! the install (on a real capture when the shared ones are there). A
//! `send packets to pcapng` policy is added to the manager with `clarion
//! exports add FILE --api MANAGER` (its `/v1/exports`), then removed. Each agent says from which frame (of the
//! frames that parse, counted from 0) it applied each set; its pcapng files
//! must hold exactly the frames the filter takes (read plainly from the
//! capture) between the install's frame and the removal's, whatever the
//! timing: for the late agent, from its first frame. A live agent (`-i`,
//! root) applies them on its workers: of three replays into its interface
//! around the install and the removal, the files hold exactly the middle
//! one's frames the filter takes. The manager answers
//! list and show with the canonical source, refuses a policy that does not
//! check with the language's words, and an agent refuses (and says) a set
//! its host cannot run.

mod bus;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bus::*;
use clarion_capture::PacketSource;

const POLICY: &str = "export web\n  filter dst_port = 80\n  send packets to pcapng\n";
/// A host's own policy (`--exports`).
const OWN: &str = "export own\n  filter dst_port = 443\n  send packets to pcapng\n";

/// A frame as the files and the capture hold it.
type Frame = (u64, Vec<u8>, u32);

/// An agent whose standard error is collected line by line.
struct Agent {
    guard: Guard,
    pid: u32,
    lines: Arc<Mutex<Vec<String>>>,
    reader: std::thread::JoinHandle<()>,
}

impl Agent {
    fn start(d: &Path, nats: &str, host: &str, pcap: &Path, paced: bool, extra: &[&str]) -> Agent {
        let mut c = clarion();
        c.args(["agent", "--nats", nats, "--host", host, "--pcap"])
            .arg(pcap)
            .args(extra)
            .args(["--linger", "1s", "--export-dir", &format!("out-{host}")]);
        if paced {
            c.args(["--speed", "1"]);
        }
        let child = c
            .current_dir(d)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("agent starts");
        Agent::from_child(child)
    }

    fn text(&self) -> String {
        self.lines.lock().expect("lines").join("\n")
    }

    /// Waits for a line holding `what`; gives it.
    fn line(&self, what: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(l) = self
                .lines
                .lock()
                .expect("lines")
                .iter()
                .find(|l| l.contains(what))
            {
                return l.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no line with {what:?} within {limit:?}: {}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The frame from which the agent applied the set whose names are `names`.
    fn applied_from(&self, names: &str) -> usize {
        let l = self.line(&format!("on: {names}"), Duration::from_secs(20));
        l.split("from frame ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no frame in {l:?}"))
    }

    fn finish(self) -> String {
        let o = wait(self.guard.take(), "an agent", Duration::from_secs(60));
        self.reader.join().expect("reader");
        let text = self.lines.lock().expect("lines").join("\n");
        assert!(o.status.success(), "{text}");
        text
    }
}

/// The frames of a capture that parse (as an agent counts them), and
/// whether the manager's policy's filter takes each: read plainly.
fn parsed_frames(path: &Path) -> Vec<(Frame, bool)> {
    frames_to_port(path, 80)
}

/// The same for a filter `dst_port = PORT`.
fn frames_to_port(path: &Path, port: u16) -> Vec<(Frame, bool)> {
    let mut src = clarion_capture::CaptureFile::open(path).expect("the capture");
    let mut out = Vec::new();
    while let Some(r) = src.next_packet() {
        let p = r.expect("a packet");
        if let Ok(rec) = clarion_wire::parse_frame(p.link, p.data, p.ts_ns, p.orig_len) {
            let takes = rec.key.has_ports() && rec.key.dst_port == port;
            out.push(((p.ts_ns, p.data.to_vec(), p.orig_len), takes));
        }
    }
    out
}

/// What the files of `policy` in `dir` hold, in file order (names sort by run and sequence).
fn exported(dir: &Path, policy: &str) -> Vec<Frame> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.expect("entry").path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{policy}-")))
            })
            .collect(),
        Err(_) => return Vec::new(),
    };
    files.sort();
    let mut got = Vec::new();
    for f in &files {
        let name = f.file_name().expect("a name").to_string_lossy().into_owned();
        assert!(name.ends_with(".pcapng"), "{name}");
        let mut src = clarion_capture::CaptureFile::open(f).expect("a pcapng");
        while let Some(r) = src.next_packet() {
            let p = r.expect("a packet");
            got.push((p.ts_ns, p.data.to_vec(), p.orig_len));
        }
    }
    got
}

/// The frames the filter takes among parsed frames `from..to`.
fn wanted(frames: &[(Frame, bool)], from: usize, to: usize) -> Vec<Frame> {
    frames[from.min(frames.len())..to.min(frames.len())]
        .iter()
        .filter(|(_, takes)| *takes)
        .map(|(f, _)| f.clone())
        .collect()
}

fn assert_frames(host: &str, got: &[Frame], want: &[Frame]) {
    assert!(
        got == want,
        "{host}: the files hold {} frames, the filter takes {} (first differing at {:?})",
        got.len(),
        want.len(),
        got.iter().zip(want).position(|(a, b)| a != b)
    );
}

#[test]
fn policies_installed_on_the_manager_reach_every_agent_from_then_on() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // 6 s of traffic for four hosts, replayed at its pace.
    setup(d, 600);
    let (_server, nats_port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{nats_port}");
    let (_m, port) = api_manager(d, &nats, &["--no-store"]);
    let token = std::fs::read_to_string(test_token_file()).expect("the API token");
    let api = clarion_control::Client::new(&format!("http://127.0.0.1:{port}"), Some(token.trim().into()));

    // Mistakes are the language's, before anything reaches a host.
    let e = api
        .add_exports("export web\n  filter dst_prot = 80\n  send packets to pcapng\n")
        .expect_err("refused");
    assert!(e.to_string().contains("dst_prot"), "{e}");
    assert!(api.exports().expect("a list").is_empty());

    std::fs::write(d.join("own.clarion"), OWN).expect("the host's own policy");
    let early: Vec<(String, PathBuf, Agent)> = ["web-1", "web-2"]
        .iter()
        .map(|h| {
            let pcap = d.join(format!("hosts/{h}.pcap"));
            // web-1 has a policy of its own, which runs beside the manager's.
            let own: &[&str] = if *h == "web-1" {
                &["--exports", "own.clarion"]
            } else {
                &[]
            };
            let a = Agent::start(d, &nats, h, &pcap, true, own);
            (h.to_string(), pcap, a)
        })
        .collect();
    for (_, _, a) in &early {
        a.line("registered with manager", Duration::from_secs(20));
    }
    // Some traffic passes before the install.
    std::thread::sleep(Duration::from_millis(800));
    std::fs::write(d.join("web.clarion"), POLICY).expect("the policy");
    let url = format!("http://127.0.0.1:{port}");
    let added = exports_cli(d, &url, &["add", "web.clarion"]);
    assert!(added.contains("web"), "{added}");
    let shown = api.show_export("web").expect("shown");
    assert_eq!(shown.source, POLICY, "the canonical source");
    let from: Vec<usize> = early.iter().map(|(_, _, a)| a.applied_from("web")).collect();

    // A host registering now gets the policies before its first frame.
    let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures/dpkt_http.pcap");
    let late_pcap = if real.exists() {
        real
    } else {
        eprintln!("note: no shared captures; the late agent replays generated traffic");
        d.join("hosts/web-3.pcap")
    };
    let late = Agent::start(d, &nats, "web-3", &late_pcap, false, &[]);
    assert_eq!(late.applied_from("web"), 0, "{}", late.text());

    // More traffic passes, then the policy goes.
    std::thread::sleep(Duration::from_millis(1500));
    exports_cli(d, &url, &["rm", "web"]);
    assert!(api.show_export("web").is_err());
    let to: Vec<usize> = early.iter().map(|(_, _, a)| a.applied_from("none")).collect();

    eprintln!("the early agents applied the policy from frames {from:?} to {to:?}");
    for (host, pcap, a) in early {
        let text = a.finish();
        let frames = parsed_frames(&pcap);
        let i = early_index(&host);
        assert!(
            from[i] > 0 && to[i] > from[i] && to[i] < frames.len(),
            "{host}: the install (frame {}) and the removal (frame {}) fall inside the replay of {} frames: {text}",
            from[i],
            to[i],
            frames.len()
        );
        let want = wanted(&frames, from[i], to[i]);
        assert!(!want.is_empty(), "{host}: the filter takes frames in between");
        let out = d.join(format!("out-{host}"));
        assert_frames(&host, &exported(&out, "web"), &want);
        let own = exported(&out, "own");
        if host == "web-1" {
            // Untouched by the manager's install and removal: all of them.
            let to_443 = frames_to_port(&pcap, 443);
            let want = wanted(&to_443, 0, to_443.len());
            assert!(!want.is_empty());
            assert_frames("web-1's own policy", &own, &want);
        } else {
            assert!(own.is_empty());
        }
    }
    late.finish();
    let frames = parsed_frames(&late_pcap);
    let want = wanted(&frames, 0, frames.len());
    assert!(!want.is_empty());
    assert_frames("web-3", &exported(&d.join("out-web-3"), "web"), &want);
}

/// Issue 35: a manager restarted (killed, as in a crash) keeps the export
/// policies of its store: it lists them, says so, and a host registering
/// with it runs them from its first frame; a removal is kept too.
#[test]
fn a_restarted_manager_keeps_its_export_policies() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    setup(d, 100);
    let (_server, nats_port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{nats_port}");
    let store: &[&str] = &["--store", "m.sqlite"];
    let (m, port) = api_manager(d, &nats, store);
    let token = std::fs::read_to_string(test_token_file()).expect("the API token");
    let api = clarion_control::Client::new(&format!("http://127.0.0.1:{port}"), Some(token.trim().into()));
    api.add_exports(POLICY).expect("added");
    m.kill();

    let m = restart_api_manager(d, &nats, port, store);
    let listed: Vec<(String, String)> = api
        .exports()
        .expect("a list")
        .into_iter()
        .map(|p| (p.name, p.source))
        .collect();
    assert_eq!(listed, [("web".to_string(), POLICY.to_string())]);
    let a = Agent::start(d, &nats, "web-1", &d.join("hosts/web-1.pcap"), false, &[]);
    assert_eq!(a.applied_from("web"), 0, "{}", a.text());
    a.finish();
    api.remove_export("web").expect("removed");
    let out = m.terminate("the manager");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1 export policy(ies) restored from m.sqlite"),
        "{err}"
    );

    let _m = restart_api_manager(d, &nats, port, store);
    assert!(api.exports().expect("a list").is_empty(), "the removal was kept");
}

/// `clarion exports --api URL ARGS...` in `d`, successful; its output.
fn exports_cli(d: &Path, url: &str, args: &[&str]) -> String {
    let o = clarion()
        .args(["exports", "--api", url])
        .args(args)
        .current_dir(d)
        .output()
        .expect("clarion exports runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn early_index(host: &str) -> usize {
    match host {
        "web-1" => 0,
        _ => 1,
    }
}

#[test]
fn an_agent_refuses_a_set_its_host_cannot_run_and_keeps_running() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    setup(d, 300);
    let (_server, nats_port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{nats_port}");
    let (m, port) = api_manager(d, &nats, &["--no-store"]);
    let token = std::fs::read_to_string(test_token_file()).expect("the API token");
    let api = clarion_control::Client::new(&format!("http://127.0.0.1:{port}"), Some(token.trim().into()));
    // No --export-dir: a pcapng policy cannot run on this host.
    let mut c = clarion();
    c.args([
        "agent",
        "--nats",
        &nats,
        "--host",
        "web-1",
        "--pcap",
        "hosts/web-1.pcap",
    ])
    .args(["--speed", "1", "--linger", "1s"]);
    let child = c
        .current_dir(d)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agent starts");
    let a = Agent::from_child(child);
    // A host whose own policy has the manager's policy's name.
    std::fs::write(d.join("mine.clarion"), POLICY.replace("80", "443")).expect("its own");
    let web = Path::new("hosts/web-2.pcap");
    let own = ["--exports", "mine.clarion"];
    let b = Agent::start(d, &nats, "web-2", web, true, &own);
    a.line("registered with manager", Duration::from_secs(20));
    b.line("registered with manager", Duration::from_secs(20));
    api.add_exports(POLICY).expect("the manager takes it");
    let l = a.line("are refused", Duration::from_secs(20));
    assert!(l.contains("export") && l.contains("web"), "{l}");
    let l = b.line("are refused", Duration::from_secs(20));
    assert!(l.contains("`web` is this host's own"), "{l}");
    let text = a.finish();
    assert!(text.contains("frames"), "the replay went on to its end: {text}");
    b.finish();
    // Its own policy ran throughout: every frame to port 443.
    let to_443 = frames_to_port(&d.join(web), 443);
    let want = wanted(&to_443, 0, to_443.len());
    assert!(!want.is_empty());
    assert_frames(
        "web-2's own policy",
        &exported(&d.join("out-web-2"), "web"),
        &want,
    );
    let out = m.terminate("the manager");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("host web-1 refused the export policies"),
        "the manager says so: {e}"
    );
}

impl Agent {
    fn from_child(mut child: Child) -> Agent {
        let pid = child.id();
        let err = child.stderr.take().expect("its stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&lines);
        let reader = std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                kept.lock().expect("lines").push(l);
            }
        });
        Agent {
            guard: Guard::new(child),
            pid,
            lines,
            reader,
        }
    }
}

/// A live agent (`clarion agent -i`) takes the manager's policies on its
/// workers between batches: of three replays into its interface (before
/// the install, between install and removal, after the removal; each
/// once the agent said it applied the set), the files hold exactly the
/// middle one's frames the filter takes, in order. Needs root, `ip` and
/// `tcpreplay`; skipped, saying why, otherwise.
/// A live agent (`clarion agent -i` on a veth, `extra` flags, its
/// export files in `out`) registered with a manager whose control API
/// installs policies, with what keeps them running; `None` (the test
/// skipped, saying why) without root, `ip`, `tcpreplay` or nats-server.
struct LiveAgent {
    agent: Agent,
    api: clarion_control::Client,
    veth: Veth,
    _servers: (Guard, Guard),
}

impl LiveAgent {
    fn start(d: &Path, extra: &[&str]) -> Option<LiveAgent> {
        let server = require_server()?;
        let veth = Veth::new()?;
        if std::process::Command::new("tcpreplay")
            .arg("-V")
            .output()
            .is_err()
        {
            eprintln!("skipped: tcpreplay is not installed (apt-get install tcpreplay)");
            return None;
        }
        std::fs::write(d.join("hosts.txt"), INVENTORY).expect("inventory");
        let (nats_guard, nats_port) = start_server(&server);
        let nats = format!("nats://127.0.0.1:{nats_port}");
        let (manager, port) = api_manager(d, &nats, &["--no-store"]);
        let token = std::fs::read_to_string(test_token_file()).expect("the API token");
        let api =
            clarion_control::Client::new(&format!("http://127.0.0.1:{port}"), Some(token.trim().into()));
        let child = clarion()
            .args(["agent", "--nats", &nats, "--host", "web-1", "-i", &veth.a])
            .args(["--snaplen", "2048", "--duration", "60s", "--export-dir", "out"])
            .args(extra)
            .current_dir(d)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("agent starts");
        let agent = Agent::from_child(child);
        agent.line("capturing on", Duration::from_secs(20));
        Some(LiveAgent {
            agent,
            api,
            veth,
            _servers: (nats_guard, manager),
        })
    }
}

#[test]
fn a_live_agent_applies_the_managers_policies_on_its_workers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // `_servers` bound: they run until the test ends.
    let Some(LiveAgent {
        agent: a,
        api,
        veth,
        _servers,
    }) = LiveAgent::start(d, &[])
    else {
        return;
    };
    // Around the policy: generated UDP to port 80 (and 443); inside it a
    // real HTTP exchange when the shared captures are there.
    let outside = d.join("generated.pcap");
    write_pcap(&outside, &traffic(20));
    let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures/dpkt_http.pcap");
    let inside = if real.exists() {
        real
    } else {
        eprintln!("note: no shared captures; generated traffic in every phase");
        outside.clone()
    };
    veth.replay(&outside);
    api.add_exports(POLICY).expect("installed");
    a.line("applied on every worker: web", Duration::from_secs(20));
    veth.replay(&inside);
    // The last frames through the worker before the removal.
    std::thread::sleep(Duration::from_millis(300));
    api.remove_export("web").expect("removed");
    a.line("applied on every worker: none", Duration::from_secs(20));
    veth.replay(&outside);
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on our own child, not yet waited for.
    let sent = unsafe { libc::kill(a.pid as libc::pid_t, libc::SIGINT) };
    assert_eq!(sent, 0);
    let text = a.finish();
    assert!(text.contains("live: 0 kernel drops"), "{text}");
    // What crosses the wire: each frame's captured bytes.
    let want: Vec<Vec<u8>> = parsed_frames(&inside)
        .into_iter()
        .filter(|(_, takes)| *takes)
        .map(|((_, data, _), _)| data)
        .collect();
    assert!(!want.is_empty());
    assert!(
        parsed_frames(&outside).iter().any(|(_, takes)| *takes),
        "the other replays hold frames the filter takes (their absence is the test)"
    );
    let got: Vec<Vec<u8>> = exported(&d.join("out"), "web")
        .into_iter()
        .map(|(_, data, _)| data)
        .collect();
    assert!(
        got == want,
        "the files hold {} frames, the middle replay's filter takes {}",
        got.len(),
        want.len()
    );
}

/// Managers sharing the load keep no common set of policies yet: one
/// refuses to install any, saying so, instead of leaving the agents that
/// register with another without them.
#[test]
fn shared_managers_refuse_policies_for_now() {
    let Some(server) = require_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("hosts.txt"), INVENTORY).expect("inventory");
    let store = d.join("js");
    let (_server, nats_port) = start_server_with(&server, &["-js", "-sd", &store.display().to_string()]);
    let nats = format!("nats://127.0.0.1:{nats_port}");
    let (_m, port) = api_manager(d, &nats, &["--shared", "--name", "m1", "--no-store"]);
    let token = std::fs::read_to_string(test_token_file()).expect("the API token");
    let api = clarion_control::Client::new(&format!("http://127.0.0.1:{port}"), Some(token.trim().into()));
    let e = api.add_exports(POLICY).expect_err("refused");
    assert!(e.to_string().contains("--shared"), "{e}");
    assert!(api.exports().expect("a list").is_empty());
}

/// SIGHUP on a live agent reloads its own `--exports` file and keeps the
/// manager's policies running beside it (issue 34: the reload made the
/// set the file's alone, dropping the manager's until its next change).
/// After the reload, a replay's frames reach both policies' files: the
/// manager's (`dst_port = 80`) and the host's own (`dst_port = 443`).
/// Needs root, `ip`, `tcpreplay` and nats-server; skipped, saying why,
/// otherwise.
#[test]
fn a_sighup_on_a_live_agent_keeps_the_managers_policies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let traffic_file = d.join("generated.pcap");
    write_pcap(&traffic_file, &traffic(20));
    std::fs::write(d.join("own.clarion"), OWN).expect("own policies");
    // `_servers` bound: they run until the test ends.
    let Some(LiveAgent {
        agent: a,
        api,
        veth,
        _servers,
    }) = LiveAgent::start(d, &["--exports", "own.clarion"])
    else {
        return;
    };
    api.add_exports(POLICY).expect("installed");
    a.line("applied on every worker: web", Duration::from_secs(20));
    // SAFETY: kill(2) on our own child, not yet waited for.
    assert_eq!(unsafe { libc::kill(a.pid as libc::pid_t, libc::SIGHUP) }, 0);
    let reloaded = a.line("SIGHUP: reloaded", Duration::from_secs(20));
    assert!(reloaded.contains("the manager's web kept"), "{reloaded}");
    veth.replay(&traffic_file);
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(a.pid as libc::pid_t, libc::SIGINT) }, 0);
    let text = a.finish();
    assert!(text.contains("live: 0 kernel drops"), "{text}");
    for (policy, port) in [("web", 80), ("own", 443)] {
        let want: Vec<Vec<u8>> = frames_to_port(&traffic_file, port)
            .into_iter()
            .filter(|(_, takes)| *takes)
            .map(|((_, data, _), _)| data)
            .collect();
        assert!(!want.is_empty(), "the replay holds frames to port {port}");
        let got: Vec<Vec<u8>> = exported(&d.join("out"), policy)
            .into_iter()
            .map(|(_, data, _)| data)
            .collect();
        assert!(
            got == want,
            "{policy}: the files hold {} frames, the replay {} to port {port}",
            got.len(),
            want.len()
        );
    }
}
