//! Two live agents and a manager, for the flows behind a network-wide
//! event (manager_flows.rs, console.rs): a real nats-server, a manager
//! with its API (`spike`, across hosts, per dst_ip/24: its group spans
//! both hosts), and two agents (`clarion agent -i VETH --records --api`,
//! each also holding `spike` as its own event, `spike_here`), each
//! capturing one end of a veth pair into which its host's part of
//! generated traffic is replayed (tcpreplay). Root only.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use clarion_wire::build::{FrameSpec, IpPair, Transport};
use clarion_wire::LinkType;
use serde_json::Value;

use super::*;

pub const TOKEN: &str = "two-hosts-token";
const HOSTS: &str = "web-1 10.0.128.0/26\nweb-2 10.0.128.64/26\n";

/// `spike` as the manager holds it (across hosts) or an agent as its own.
fn event(name: &str, across: bool) -> String {
    format!(
        "event {name}\n  filter dst_ip in 10.0.128.0/24 and dst_port = 80\n  when sum(volume) > 20KB\n  per dst_ip/24\n  every 100ms\n{}",
        if across { "  across hosts\n" } else { "" }
    )
}

/// Frames the event does not count (another network), to move packet time on.
fn ticks(n: u64) -> Vec<(u64, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let spec = FrameSpec {
                link: LinkType::Ethernet,
                ip: IpPair::V4 {
                    src: Ipv4Addr::new(192, 0, 2, 200),
                    dst: Ipv4Addr::new(198, 51, 100, 1),
                },
                transport: Transport::Udp {
                    src_port: 9,
                    dst_port: 9,
                },
                payload_len: 4,
                ttl: 64,
                ..FrameSpec::default()
            };
            (T0 + i * 50 * MS, spec.build())
        })
        .collect()
}

fn tcpreplay(veth: &Veth, pcap: &Path, pps: &str) {
    let o = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &veth.ns,
            "tcpreplay",
            "-q",
            "--pps",
            pps,
            "-i",
            &veth.b,
        ])
        .arg(pcap)
        .output()
        .expect("tcpreplay runs");
    assert!(
        o.status.success(),
        "tcpreplay: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A live agent for `host` capturing `veth.a`, with its own API (and
/// `spike_here`), recording flows; its guard and API port.
fn agent(d: &Path, nats: &str, host: &str, veth: &Veth) -> (Guard, u16) {
    listen_on_free_port("clarion agent -i VETH --api", |port| {
        clarion()
            .args(["agent", "--nats", nats, "--host", host, "-i", &veth.a])
            .args([
                "--duration",
                "150s",
                "--stats-every",
                "0",
                "--events",
                "own.clarion",
            ])
            .args([
                "--records",
                &format!("{host}.parquet"),
                "--record-idle-timeout",
                "1s",
            ])
            .args(["--api", &format!("127.0.0.1:{port}"), "--api-token", TOKEN])
            .args(["--format", "json", "-o", &format!("{host}.jsonl")])
            .current_dir(d)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("agent starts")
    })
}

/// See the module's documentation. Dropped in field order: agents,
/// manager, server, then the veth pairs.
pub struct TwoHosts {
    /// web-1's and web-2's agents, each with its API's port.
    pub agents: Vec<(Guard, u16)>,
    pub manager: Guard,
    /// The manager's API.
    pub api: u16,
    _nats: Guard,
    veths: [Veth; 2],
    pub dir: tempfile::TempDir,
}

impl TwoHosts {
    /// Everything started and registered, or `None` having said why not
    /// (not root, no nats-server, no tcpreplay).
    pub fn start() -> Option<TwoHosts> {
        let server = require_server()?;
        if std::process::Command::new("tcpreplay")
            .arg("-V")
            .output()
            .is_err()
        {
            eprintln!("skipped: tcpreplay is not installed (apt-get install tcpreplay)");
            return None;
        }
        let veths = [Veth::new()?, Veth::new()?];
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        std::fs::write(d.join("hosts.txt"), HOSTS).expect("inventory");
        std::fs::write(d.join("events.clarion"), event("spike", true)).expect("events");
        std::fs::write(d.join("own.clarion"), event("spike_here", false)).expect("own events");
        let frames = traffic(60);
        write_pcap(&d.join("web-1.pcap"), &host_frames(&frames, 0, 0));
        write_pcap(&d.join("web-2.pcap"), &host_frames(&frames, 1, 0));
        write_pcap(&d.join("ticks.pcap"), &ticks(60));
        let (nats, nats_port) = start_server(&server);
        let url = format!("nats://127.0.0.1:{nats_port}");
        let flags = [
            "--events",
            "events.clarion",
            "--no-store",
            "--api-token",
            TOKEN,
            "-o",
            "net.jsonl",
        ];
        let (manager, api) = api_manager(d, &url, &flags);
        let agents = vec![
            agent(d, &url, "web-1", &veths[0]),
            agent(d, &url, "web-2", &veths[1]),
        ];
        // Registered (and the triggers installed) before the traffic.
        std::thread::sleep(Duration::from_secs(2));
        Some(TwoHosts {
            agents,
            manager,
            api,
            _nats: nats,
            veths,
            dir,
        })
    }

    /// Each host's traffic replayed into its pair, then frames the event
    /// does not count for 3 s: packet time moves on past the idle
    /// timeout on both hosts, every flow ends and its record is in its
    /// host's memory.
    pub fn replay(&self) {
        let d = self.dir.path();
        let [v1, v2] = &self.veths;
        for (pcap, pps) in [
            (["web-1.pcap", "web-2.pcap"], "4000"),
            (["ticks.pcap", "ticks.pcap"], "20"),
        ] {
            std::thread::scope(|s| {
                s.spawn(|| tcpreplay(v1, &d.join(pcap[0]), pps));
                tcpreplay(v2, &d.join(pcap[1]), pps);
            });
        }
    }

    /// The manager's reports of `spike` so far.
    pub fn fired(&self) -> Vec<Value> {
        let written = std::fs::read_to_string(self.dir.path().join("net.jsonl")).unwrap_or_default();
        written
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["event"] == "spike")
            .collect()
    }
}

/// `GET /v1/flows` of `event` for report `r`'s group and window, top 1,000.
pub fn flows_query(event: &str, r: &Value) -> String {
    let group = serde_json::to_string(&r["group"]).expect("JSON");
    let group: String = group
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'_' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let (from, to) = (&r["window"]["start_ns"], &r["window"]["end_ns"]);
    format!("/v1/flows?event={event}&group={group}&from={from}&to={to}&top=1000")
}
