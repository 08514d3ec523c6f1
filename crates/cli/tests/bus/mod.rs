//! Helpers of the NATS transport's tests: a real `nats-server` on a free
//! loopback port, generated traffic for four hosts, the reference
//! evaluator over all of it, and running `clarion`.

#![allow(dead_code)] // Each test file uses its own part.

pub mod two_hosts;

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use clarion_capture::{PcapWriter, TsResolution};
use clarion_reference::{evaluate, Config, Input};
use clarion_wire::build::{FrameSpec, IpPair, Transport};
use clarion_wire::LinkType;
use serde_json::Value;

pub const MS: u64 = 1_000_000;
pub const T0: u64 = 1_700_000_000_000 * MS;

pub const INVENTORY: &str = "\
web-1 10.0.128.0/26
web-2 10.0.128.64/26
web-3 10.0.128.128/26
web-4 10.0.128.192/26
";

/// Trumpet's "service load spike", and an average that splits through sum and count.
pub const EVENTS: &str = "\
event service_load_spike
  filter dst_ip in 10.0.128.0/24 and dst_port = 80
  when sum(volume) > 40KB
  per dst_ip/24
  every 10ms
  across hosts

event big_packets_to_a_host
  filter dst_ip in 10.0.128.0/24
  when avg(size) > 1000 and count(packets) > 5
  per dst_ip
  every 20ms
  across hosts

event busy_on_most_hosts
  filter dst_ip in 10.0.128.0/24
  when sum(volume) > 9KB
  per dst_ip/24
  every 10ms
  across more than 50% of hosts
";

/// Where a test that needs a NATS server finds it; `None`: the test says it is skipped.
pub fn require_server() -> Option<PathBuf> {
    let s = nats_server();
    if s.is_none() {
        eprintln!("skipped: nats-server is not installed (apt-get install nats-server)");
    }
    s
}

pub fn nats_server() -> Option<PathBuf> {
    let out = Command::new("sh")
        .args(["-c", "command -v nats-server"])
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if out.status.success() && !path.is_empty() {
        return Some(PathBuf::from(path));
    }
    // Debian installs it in /usr/sbin, which a user's PATH may lack.
    use std::os::unix::fs::PermissionsExt;
    let sbin = PathBuf::from("/usr/sbin/nats-server");
    let runnable = std::fs::metadata(&sbin).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    runnable.then_some(sbin)
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Kills the child when dropped (a failed assertion leaves no process behind).
pub struct Guard(Option<Child>);

impl Guard {
    pub fn new(child: Child) -> Guard {
        Guard(Some(child))
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// The child, no longer killed on drop.
    pub fn take(mut self) -> Child {
        self.0.take().expect("a guard holds its child until taken")
    }

    /// Sends SIGTERM (a clean stop) and waits for the child's output.
    pub fn terminate(self, what: &str) -> std::process::Output {
        let child = self.take();
        // SAFETY: kill(2) on our own child, which has not been waited for, so its pid is still ours.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        wait(child, what, Duration::from_secs(30))
    }

    /// SIGKILL: the process dies at once, as in a crash.
    pub fn kill(mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A `nats-server` on a free loopback port, and that port.
pub fn start_server(bin: &Path) -> (Guard, u16) {
    start_server_with(bin, &[])
}

/// A server with more options (`--auth TOKEN`, `--tls ...`), on a free port.
pub fn start_server_with(bin: &Path, extra: &[&str]) -> (Guard, u16) {
    listen_on_free_port("nats-server", |port| nats_server_on(bin, port, extra))
}

/// A server on `port` again (a restart), waiting until it listens.
pub fn restart_server(bin: &Path, port: u16) -> Guard {
    listening_again(
        "nats-server",
        port,
        Duration::from_secs(10),
        nats_server_on(bin, port, &[]),
    )
}

fn nats_server_on(bin: &Path, port: u16, extra: &[&str]) -> Child {
    Command::new(bin)
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nats-server starts")
}

/// Starts what `spawn(port)` starts on a free loopback port and waits until
/// it listens there. A port `free_port` found can be taken before the child
/// binds it (an outgoing connection of a test running beside this one gets
/// it as its local port); the child then exits, and another port is tried.
pub fn listen_on_free_port(what: &str, mut spawn: impl FnMut(u16) -> Child) -> (Guard, u16) {
    let mut why = String::new();
    for _ in 0..5 {
        let port = free_port();
        let mut child = Guard::new(spawn(port));
        match wait_listening(&mut child, port, Duration::from_secs(20)) {
            Ok(()) => return (child, port),
            Err(e) => why = e,
        }
    }
    panic!("{what} did not listen on any of 5 free ports; the last time: {why}");
}

/// `child`, started again on `port` (which it had), once it listens there.
fn listening_again(what: &str, port: u16, limit: Duration, child: Child) -> Guard {
    let mut child = Guard::new(child);
    if let Err(why) = wait_listening(&mut child, port, limit) {
        panic!("{what} did not come back on {port}: {why}");
    }
    child
}

/// Waits until something listens on the loopback `port`; `Err` (with the
/// child's standard error when it is piped) when the child exits first.
fn wait_listening(child: &mut Guard, port: u16, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    let c = child.0.as_mut().expect("a guard holds its child until taken");
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = c.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = c.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return Err(format!("it exited ({status}) before listening on {port}: {err}"));
        }
        if Instant::now() > deadline {
            return Err(format!("it did not listen on {port} within {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A manager (`clarion manager` on `url` with `flags`, see [`manager`])
/// with its control API on a free loopback port, and that port.
pub fn api_manager(d: &Path, url: &str, flags: &[&str]) -> (Guard, u16) {
    listen_on_free_port("the manager's control API", |port| {
        api_manager_on(d, url, port, flags)
    })
}

/// A manager with its control API on `port` (a restart on the same address),
/// waiting until it listens.
pub fn restart_api_manager(d: &Path, url: &str, port: u16, flags: &[&str]) -> Guard {
    listening_again(
        "the manager's control API",
        port,
        Duration::from_secs(20),
        api_manager_on(d, url, port, flags),
    )
}

fn api_manager_on(d: &Path, url: &str, port: u16, flags: &[&str]) -> Child {
    let api = format!("127.0.0.1:{port}");
    let mut all = vec!["--api", &api];
    all.extend_from_slice(flags);
    manager(d, url, &all)
}

/// `clarion manager` on `url` with the inventory `hosts.txt` of `d`,
/// writing JSON lines, with `flags` added; its standard error is piped.
pub fn manager(d: &Path, url: &str, flags: &[&str]) -> Child {
    clarion()
        .args([
            "manager",
            "--insecure",
            "--nats",
            url,
            "--inventory",
            "hosts.txt",
            "--format",
            "json",
        ])
        .args(flags)
        .current_dir(d)
        .stderr(Stdio::piped())
        .spawn()
        .expect("manager starts")
}

/// What a manager replaying captures usually gets: the events, no store,
/// no API, run until every agent has finished, reports to `net.jsonl`.
pub const REPLAY: [&str; 7] = [
    "--events",
    "events.clarion",
    "--no-store",
    "--no-api",
    "--until-finished",
    "-o",
    "net.jsonl",
];

/// A small deterministic generator (no dependency on the order of other tests).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// `windows` × 10 ms of clients (outside every host) and hosts (to each other)
/// sending UDP to the service, at a load that crosses 40 KB per 10 ms in
/// some windows only.
pub fn traffic(windows: u64) -> Vec<(u64, Vec<u8>)> {
    let mut rng = Lcg(7);
    let mut frames = Vec::new();
    for w in 0..windows {
        let n = rng.next(90);
        for _ in 0..n {
            let ts = T0 + w * 10 * MS + rng.next(10 * MS);
            let from_host = rng.next(8) == 0;
            let src = if from_host {
                Ipv4Addr::new(10, 0, 128, rng.next(256) as u8)
            } else {
                Ipv4Addr::new(192, 0, 2, 1 + rng.next(20) as u8)
            };
            let dst = Ipv4Addr::new(10, 0, 128, rng.next(256) as u8);
            let dst_port = if rng.next(6) == 0 { 443 } else { 80 };
            let spec = FrameSpec {
                link: LinkType::Ethernet,
                ip: IpPair::V4 { src, dst },
                transport: Transport::Udp {
                    src_port: 30_000 + rng.next(50) as u16,
                    dst_port,
                },
                payload_len: 100 + rng.next(1300) as usize,
                ttl: 64,
                ..FrameSpec::default()
            };
            frames.push((ts, spec.build()));
        }
    }
    frames.sort_by_key(|f| f.0);
    frames
}

pub fn write_pcap(path: &Path, frames: &[(u64, Vec<u8>)]) {
    let f = std::fs::File::create(path).expect("create");
    let mut w =
        PcapWriter::new(std::io::BufWriter::new(f), LinkType::Ethernet, TsResolution::Nano).expect("header");
    for (ts, data) in frames {
        w.write_packet(*ts, data, data.len() as u32).expect("write");
    }
    let mut inner = w.into_inner().expect("flush");
    std::io::Write::flush(&mut inner).expect("flush");
}

pub type Row = (String, u64, String, String);

pub fn row(r: &Value) -> Row {
    (
        r["event"].as_str().unwrap_or_default().to_string(),
        r["window"]["start_ns"].as_u64().unwrap_or_default(),
        r["group"].to_string(),
        r["values"].to_string(),
    )
}

pub fn rows_of_jsonl(text: &str) -> BTreeSet<Row> {
    text.lines()
        .map(|l| row(&serde_json::from_str(l).expect("a JSON report")))
        .collect()
}

/// The reference evaluator over every host's packets together (a packet
/// between two hosts counted on both, as both see it); a counting event
/// (`across more than ...`) host by host, counting the hosts that report it.
pub fn reference(frames: &[(u64, Vec<u8>)]) -> BTreeSet<Row> {
    reference_of(EVENTS, frames)
}

/// [`reference`] for the network-wide events of `events` (drill-downs included).
pub fn reference_of(events: &str, frames: &[(u64, Vec<u8>)]) -> BTreeSet<Row> {
    reference_seen(events, frames, |_, _| true)
}

/// [`reference_of`] where host `h` (inventory order) sees a packet of
/// time `ts` only when `sees(h, ts)` (a host that left sees nothing more).
pub fn reference_seen(
    events: &str,
    frames: &[(u64, Vec<u8>)],
    sees: impl Fn(usize, u64) -> bool,
) -> BTreeSet<Row> {
    let inventory = clarion_manager::Inventory::parse(INVENTORY).expect("inventory");
    let all = clarion_lang::check(events).expect("events");
    // `on demand` events are evaluated through their parents' drill-downs.
    let specs: Vec<_> = all.iter().filter(|s| !s.on_demand).cloned().collect();
    let records: Vec<_> = frames
        .iter()
        .map(|(ts, data)| {
            clarion_wire::parse_frame(LinkType::Ethernet, data, *ts, data.len() as u32).expect("parses")
        })
        .collect();
    let owners = |rec: &clarion_wire::PacketRecord| {
        let src = inventory.owner(rec.key.src_addr());
        let dst = inventory.owner(rec.key.dst_addr()).filter(|d| Some(*d) != src);
        [src, dst]
            .into_iter()
            .flatten()
            .filter(|&h| sees(h, rec.ts_ns))
            .collect::<Vec<_>>()
    };
    let mut rows = BTreeSet::new();
    for spec in specs {
        let clarion_lang::spec::Scope::Quorum(q) = spec.scope else {
            let inputs: Vec<Input> = records
                .iter()
                .flat_map(|r| owners(r).into_iter().map(|_| Input::Packet(*r)))
                .collect();
            let mut with_installed = vec![spec];
            with_installed.extend(all.iter().filter(|s| s.on_demand).cloned());
            rows.extend(
                evaluate(&with_installed, &inputs, &Config::default())
                    .iter()
                    .map(|r| row(&r.to_json())),
            );
            continue;
        };
        let placed = inventory.placement(&spec);
        let mut fired: std::collections::BTreeMap<(u64, String), usize> = Default::default();
        for &h in &placed {
            let inputs: Vec<Input> = records
                .iter()
                .filter(|r| owners(r).contains(&h))
                .map(|r| Input::Packet(*r))
                .collect();
            for r in evaluate(std::slice::from_ref(&spec), &inputs, &Config::default()) {
                let j = r.to_json();
                *fired
                    .entry((r.window.start_ns, j["group"].to_string()))
                    .or_default() += 1;
            }
        }
        for ((start, group), n) in fired {
            if q.holds(n, placed.len()) {
                rows.insert((spec.name.clone(), start, group, format!("{{\"hosts\":{n}}}")));
            }
        }
    }
    rows
}

/// `clarion`, with the control API's token kept in the tests' own file
/// (shared by every manager and client of these tests, never the user's
/// ~/.config/clarion/api-token) and no token from the environment.
pub fn clarion() -> Command {
    let mut c = Command::cargo_bin("clarion").expect("binary");
    c.env("CLARION_API_TOKEN_FILE", test_token_file())
        .env_remove("CLARION_API_TOKEN");
    c
}

/// The API token file of the tests (generated by the first manager).
pub fn test_token_file() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("clarion-api-token")
}

pub fn wait(mut child: Child, what: &str, limit: Duration) -> std::process::Output {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{what} did not finish in {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The frames host `host` (inventory order) sees, from `from_ns` on.
pub fn host_frames(frames: &[(u64, Vec<u8>)], host: usize, from_ns: u64) -> Vec<(u64, Vec<u8>)> {
    let inventory = clarion_manager::Inventory::parse(INVENTORY).expect("inventory");
    frames
        .iter()
        .filter(|(ts, data)| {
            let Ok(rec) = clarion_wire::parse_frame(LinkType::Ethernet, data, *ts, data.len() as u32) else {
                return false;
            };
            *ts >= from_ns
                && (inventory.owner(rec.key.src_addr()) == Some(host)
                    || inventory.owner(rec.key.dst_addr()) == Some(host))
        })
        .cloned()
        .collect()
}

/// Starts `clarion agent` for `host` on `pcap` (relative to `dir`), at the capture's pace.
pub fn paced_agent(dir: &Path, nats: &str, host: &str, pcap: &str) -> Guard {
    agent_at(dir, nats, host, pcap, "1")
}

/// The same at `speed` times the capture's pace.
fn agent_at(dir: &Path, nats: &str, host: &str, pcap: &str, speed: &str) -> Guard {
    agent_with(dir, nats, host, pcap, &["--speed", speed, "--linger", "60s"])
}

/// Starts `clarion agent` for `host` on `pcap` (relative to `dir`) with
/// `flags` added; its standard error is piped.
pub fn agent_with(dir: &Path, nats: &str, host: &str, pcap: &str, flags: &[&str]) -> Guard {
    let child = clarion()
        .args(["agent", "--nats", nats, "--host", host, "--pcap", pcap])
        .args(flags)
        .current_dir(dir)
        .stderr(Stdio::piped())
        .spawn()
        .expect("agent starts");
    Guard::new(child)
}

/// The network-wide reports of `net.jsonl` in `d` equal `want`, row for
/// row; `context` is added to the message otherwise.
#[track_caller]
pub fn assert_reports_equal(d: &Path, want: &BTreeSet<Row>, context: &str) {
    let got = rows_of_jsonl(&std::fs::read_to_string(d.join("net.jsonl")).expect("reports"));
    let missed: Vec<_> = want.difference(&got).collect();
    let spurious: Vec<_> = got.difference(want).collect();
    assert!(
        missed.is_empty() && spurious.is_empty(),
        "missed {missed:#?}\nspurious {spurious:#?}\n{context}"
    );
}

/// Waits for every agent to end (each within `limit`), successfully.
pub fn wait_agents(agents: Vec<Guard>, limit: Duration) {
    for a in agents {
        let o = wait(a.take(), "an agent", limit);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

/// The four agents, each replaying `hosts/HOST.pcap` of `dir` at the capture's pace.
pub fn paced_agents(dir: &Path, nats: &str) -> Vec<Guard> {
    paced_agents_at(dir, nats, "1")
}

/// The same at `speed` times the capture's pace.
pub fn paced_agents_at(dir: &Path, nats: &str, speed: &str) -> Vec<Guard> {
    (1..=4)
        .map(|i| {
            agent_at(
                dir,
                nats,
                &format!("web-{i}"),
                &format!("hosts/web-{i}.pcap"),
                speed,
            )
        })
        .collect()
}

/// The reports of a JSON-lines text whose window starts in `[from, to)`, as rows.
pub fn rows_between(text: &str, from: u64, to: u64) -> BTreeSet<Row> {
    rows_of_jsonl(text)
        .into_iter()
        .filter(|r| r.1 >= from && r.1 < to)
        .collect()
}

/// The same for the reference.
pub fn reference_between(frames: &[(u64, Vec<u8>)], from: u64, to: u64) -> BTreeSet<Row> {
    reference(frames)
        .into_iter()
        .filter(|r| r.1 >= from && r.1 < to)
        .collect()
}

/// Writes `windows` × 10 ms of traffic (`all.pcap`), the inventory
/// (`hosts.txt`) and the events (`events.clarion`) into `d`, and splits the
/// capture into `hosts/HOST.pcap` with `clarion split`.
pub fn setup(d: &Path, windows: u64) -> Vec<(u64, Vec<u8>)> {
    let frames = traffic(windows);
    write_pcap(&d.join("all.pcap"), &frames);
    std::fs::write(d.join("hosts.txt"), INVENTORY).expect("inventory");
    std::fs::write(d.join("events.clarion"), EVENTS).expect("events");
    let split = clarion()
        .args([
            "split",
            "--pcap",
            "all.pcap",
            "--inventory",
            "hosts.txt",
            "--out-dir",
            "hosts",
        ])
        .current_dir(d)
        .output()
        .expect("split runs");
    assert!(
        split.status.success(),
        "{}",
        String::from_utf8_lossy(&split.stderr)
    );
    frames
}

/// A manager (until every agent has finished, no store, no API, JSON
/// reports to `net.jsonl`) and the four agents replaying `hosts/HOST.pcap`,
/// run to the end, with `manager_flags` and `agent_flags` added. Checks
/// that every agent succeeded; returns the manager's output.
pub fn run_network(
    d: &Path,
    url: &str,
    manager_flags: &[&str],
    agent_flags: &[&str],
) -> std::process::Output {
    let flags: Vec<&str> = REPLAY.iter().chain(manager_flags).copied().collect();
    let manager = manager(d, url, &flags);
    let agents: Vec<Child> = (1..=4)
        .map(|i| {
            let host = format!("web-{i}");
            clarion()
                .args([
                    "agent",
                    "--nats",
                    url,
                    "--host",
                    &host,
                    "--pcap",
                    &format!("hosts/{host}.pcap"),
                ])
                // `{host}` in a flag is the agent's host (its own key file).
                .args(agent_flags.iter().map(|f| f.replace("{host}", &host)))
                .current_dir(d)
                .stderr(Stdio::piped())
                .spawn()
                .expect("agent starts")
        })
        .collect();
    let out = wait(manager, "the manager", Duration::from_secs(120));
    for (i, a) in agents.into_iter().enumerate() {
        let o = wait(a, "an agent", Duration::from_secs(60));
        assert!(
            o.status.success(),
            "agent web-{}: {}",
            i + 1,
            String::from_utf8_lossy(&o.stderr)
        );
    }
    out
}

/// A veth pair: `a` in this namespace (captured), its peer in a network
/// namespace of its own (replayed into); no addresses, no IPv6, so only
/// the replayed frames cross. Removed when dropped.
pub struct Veth {
    pub a: String,
    pub b: String,
    pub ns: String,
}

impl Veth {
    pub fn new() -> Option<Veth> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || std::process::Command::new("ip").arg("-V").output().is_err() {
            eprintln!("skipped: needs root and ip (a network namespace and a veth pair)");
            return None;
        }
        // Tests of one file run at once in one process: each its own pair.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = std::process::id() % 100_000;
        let v = Veth {
            a: format!("clrxm{id}{k}a"),
            b: format!("clrxm{id}{k}b"),
            ns: format!("clrxm{id}{k}"),
        };
        if !ip(&["netns", "add", &v.ns]) {
            eprintln!("skipped: cannot create a network namespace");
            return None;
        }
        let b = v.b.clone();
        assert!(
            ip(&["link", "add", &v.a, "type", "veth", "peer", "name", &b, "netns", &v.ns]),
            "a veth pair"
        );
        // Before it is up, so it never gets a link-local address.
        let quiet = std::process::Command::new("sysctl")
            .args(["-qw", &format!("net.ipv6.conf.{}.disable_ipv6=1", v.a)])
            .status()
            .is_ok_and(|s| s.success());
        let quiet_b = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &v.ns,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
            ])
            .status()
            .is_ok_and(|s| s.success());
        assert!(quiet && quiet_b, "IPv6 off on the pair");
        assert!(ip(&["link", "set", &v.a, "up"]) && ip(&["-n", &v.ns, "link", "set", &b, "up"]));
        Some(v)
    }

    /// Sends a capture's frames into the captured end, and waits until sent.
    pub fn replay(&self, capture: &Path) {
        let o = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns,
                "tcpreplay",
                "-q",
                "--pps",
                "10000",
                "-i",
            ])
            .arg(&self.b)
            .arg(capture)
            .output()
            .expect("tcpreplay runs");
        assert!(
            o.status.success(),
            "tcpreplay: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        ip(&["link", "del", &self.a]);
        ip(&["netns", "del", &self.ns]);
    }
}

fn ip(args: &[&str]) -> bool {
    std::process::Command::new("ip")
        .args(args)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `GET path` on the API at `port` with `token`: the status and the body
/// as JSON (null when it is not).
pub fn api_get(port: u16, path: &str, token: &str) -> (u16, Value) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .expect("sent");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let code = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    (code, serde_json::from_str(body).unwrap_or(Value::Null))
}
