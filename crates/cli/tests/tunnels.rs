//! Tunnels made by real Linux devices: TCP connections through a VXLAN,
//! Geneve, GRE or GRE-tap device between two network namespaces, captured
//! at once on the veth under the tunnel (outer headers) and on the tunnel
//! device (inner headers). `clarion run` with the same events on both
//! captures must report the same thing: the parser opens the tunnel, so
//! the inner headers drive filters, grouping and TCP state. The events
//! filter on the inner service port and group per 5-tuple and per
//! destination port, so a monitor reading the outer headers (UDP 4789 or
//! 6081, GRE) reports nothing and fails.
//!
//! Needs root, `ip`, `tcpdump` and `python3`; each tunnel kind the kernel
//! lacks (a container without the `geneve` or `ip_gre` module) is skipped
//! saying so, the others still run. So that Geneve and GRE are made by a
//! real implementation on such kernels too, the same comparison runs on
//! tunnels made by Open vSwitch's userspace datapath (tunnels/ovs.rs;
//! needs `openvswitch-switch`), whose captures are also committed
//! (crates/testdata/tunnels) and checked without any tool. tshark, where
//! installed, confirms that each outer capture carries the service's
//! packets in the tunnel's encapsulation.
//!
//! Also: every frame of the real captures (../shared/captures), wrapped in
//! VXLAN, Geneve, GRE and MPLS, parses as the frame alone.

mod common;
#[path = "tunnels/ovs.rs"]
mod ovs;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clarion_capture::PacketSource;
use clarion_wire::build::{FrameSpec, Transport};
use clarion_wire::{parse_frame, FlowKey, LinkType, PacketRecord, ParseError};
use common::netns::Net;
use common::{clarion, repo};
use serde_json::Value;

/// The service port inside the tunnel.
const PORT: u16 = 5555;
const CONNECTIONS: usize = 3;
const EXCHANGES: usize = 5;
/// Window length of every event; the traffic is kept clear of its edges.
const WINDOW_S: u64 = 60;

const EVENTS: &str = "\
event service_connections
  filter proto = tcp and dst_port = 5555
  when sum(packets) >= 1 and seq >= 0 and ack >= 0
  per 5tuple
  every 60s

event service_replies
  filter proto = tcp and src_port = 5555
  when sum(volume) > 0 and count(is_lost == 1) >= 0 and max(ttl) > 0
  per 5tuple
  every 60s

event service_port
  filter proto = tcp and dst_port = 5555
  when sum(size) > 0
  per dst_port
  every 60s

event tenant_connections
  filter proto = tcp and dst_port = 5555
  when sum(packets) >= 1
  per (vni, src_ip, dst_ip, src_port, dst_port, proto)
  every 60s
";

/// A server answering each message with it twice, and a client making
/// `connections` connections of `exchanges` request/response rounds
/// (one segment in flight at a time, so no offload merges or splits
/// segments differently on the two devices).
const TRAFFIC: &str = r#"
import socket, sys
role, addr, port, conns, exchanges = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
if role == "server":
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((addr, port))
    srv.listen(16)
    print("ready", flush=True)
    srv.settimeout(30)
    for _ in range(conns):
        c, _ = srv.accept()
        c.settimeout(30)
        while True:
            d = c.recv(65536)
            if not d:
                break
            c.sendall(d * 2)
        c.close()
else:
    for i in range(conns):
        s = socket.create_connection((addr, port), timeout=30)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for k in range(exchanges):
            msg = bytes([k]) * (100 + 50 * k)
            s.sendall(msg)
            got = 0
            while got < 2 * len(msg):
                got += len(s.recv(65536))
        s.close()
"#;

/// One tunnel kind: its `ip link add … type` words (local and remote
/// filled in) and the tcpdump filter that selects its outer packets.
struct Kind {
    name: &'static str,
    link: fn(local: &str, remote: &str) -> Vec<String>,
    outer_filter: &'static str,
    /// tshark's display filter for the outer packets carrying the service.
    tshark_filter: &'static str,
    /// The VNI or GRE key the tunnel puts on its packets.
    vni: Option<u32>,
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

const KINDS: [Kind; 4] = [
    Kind {
        name: "vxlan",
        link: |l, r| words(&format!("type vxlan id 42 local {l} remote {r} dstport 4789")),
        outer_filter: "udp port 4789",
        tshark_filter: "vxlan.vni == 42 && tcp.port == 5555",
        vni: Some(42),
    },
    Kind {
        name: "geneve",
        link: |_, r| words(&format!("type geneve id 7 remote {r}")),
        outer_filter: "udp port 6081",
        tshark_filter: "geneve.vni == 7 && tcp.port == 5555",
        vni: Some(7),
    },
    // Layer 3: IPv4 straight after the GRE header (protocol 0x0800).
    Kind {
        name: "gre",
        link: |l, r| words(&format!("type gre local {l} remote {r}")),
        outer_filter: "ip proto 47",
        tshark_filter: "gre.proto == 0x0800 && tcp.port == 5555",
        vni: None,
    },
    // Layer 2: a whole Ethernet frame (protocol 0x6558).
    Kind {
        name: "gretap",
        link: |l, r| words(&format!("type gretap local {l} remote {r}")),
        outer_filter: "ip proto 47",
        tshark_filter: "gre.proto == 0x6558 && tcp.port == 5555",
        vni: None,
    },
];

#[test]
fn tunnelled_traffic_reports_as_its_inner_traffic() {
    let Some(net) = Net::new("tun") else { return };
    for (tool, package) in [("tcpdump", "tcpdump"), ("python3", "python3")] {
        if Command::new(tool).arg("--version").output().is_err() {
            eprintln!("skipped: {tool} is not installed (apt-get install {package})");
            return;
        }
    }
    let (a, b) = (net.a.as_str(), net.b.as_str());
    for args in [
        vec!["-n", a, "addr", "add", "10.77.0.1/24", "dev", "va"],
        vec!["-n", b, "addr", "add", "10.77.0.2/24", "dev", "vb"],
        vec!["-n", b, "link", "set", "lo", "up"],
    ] {
        assert!(net.ip(&args), "ip {args:?}");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let events = dir.path().join("tunnels.clarion");
    std::fs::write(&events, EVENTS).expect("events file");
    let mut ran = 0;
    for kind in &KINDS {
        if run_kind(&net, kind, dir.path(), &events) {
            ran += 1;
        }
    }
    eprintln!("{ran} of {} tunnel kinds checked", KINDS.len());
}

/// Checks one kind; false if the kernel cannot make its devices.
fn run_kind(net: &Net, kind: &Kind, dir: &Path, events: &Path) -> bool {
    let (a, b) = (net.a.as_str(), net.b.as_str());
    let ends = [
        (a, "10.77.0.1", "10.77.0.2", "10.78.0.1/24"),
        (b, "10.77.0.2", "10.77.0.1", "10.78.0.2/24"),
    ];
    for (ns, local, remote, addr) in ends {
        let mut args: Vec<String> = words(&format!("-n {ns} link add tun0"));
        args.extend((kind.link)(local, remote));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if !net.ip(&args) {
            eprintln!(
                "skipped: {}: the kernel cannot make {} devices (ip link add … type {} failed)",
                kind.name, kind.name, kind.name
            );
            // The other end may have one already.
            net.ip(&["-n", a, "link", "del", "tun0"]);
            return false;
        }
        assert!(
            net.ip(&["-n", ns, "addr", "add", addr, "dev", "tun0"]),
            "tunnel address"
        );
        assert!(net.ip(&["-n", ns, "link", "set", "tun0", "up"]), "tunnel up");
    }
    // The inner capture on `any`: its cooked link type suits every device,
    // and the filter matches the inner packets only (outer ones are UDP or GRE).
    let taps = Taps {
        name: kind.name,
        outer_filter: kind.outer_filter,
        inner_iface: "any",
        tshark_filter: kind.tshark_filter,
        vni: kind.vni,
    };
    compare(net, &taps, dir, events, &String::new);
    assert!(net.ip(&["-n", a, "link", "del", "tun0"]) && net.ip(&["-n", b, "link", "del", "tun0"]));
    true
}

/// Where one tunnel's traffic is captured, in namespace `a`: on the veth
/// under the tunnel (`va`, outer headers) and on `inner_iface`.
struct Taps {
    name: &'static str,
    outer_filter: &'static str,
    inner_iface: &'static str,
    /// tshark's display filter matching the outer packets that carry the
    /// service's TCP in this encapsulation.
    tshark_filter: &'static str,
    vni: Option<u32>,
}

/// Runs the traffic through a tunnel that is up (10.78.0.1 in `a` to
/// 10.78.0.2 in `b`), captures it outside and inside, and checks that
/// `clarion run` reports the same on both captures. `logs` gives what
/// failure messages add (the tunnel makers' logs).
fn compare(net: &Net, taps: &Taps, dir: &Path, events: &Path, logs: &dyn Fn() -> String) {
    let (a, b) = (net.a.as_str(), net.b.as_str());
    let name = taps.name;
    let outer_path = dir.join(format!("{name}-outer.pcap"));
    let inner_path = dir.join(format!("{name}-inner.pcap"));
    let inner_filter = format!("tcp port {PORT}");
    let mut outer = tcpdump(a, "va", taps.outer_filter, &outer_path);
    let mut inner = tcpdump(a, taps.inner_iface, &inner_filter, &inner_path);

    keep_clear_of_window_edges();
    let mut server = python(b, &["server", "10.78.0.2"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("server");
    let mut ready = String::new();
    BufReader::new(server.stdout.take().expect("stdout"))
        .read_line(&mut ready)
        .expect("server output");
    assert_eq!(ready.trim(), "ready", "{name}: the server did not start");
    let client = python(a, &["client", "10.78.0.2"]).status().expect("client");
    assert!(client.success(), "{name}: the client failed\n{}", logs());
    assert!(
        server.wait().expect("server").success(),
        "{name}: the server failed"
    );

    // Both captures hold every packet before tcpdump is stopped (packets
    // still in its ring when it is stopped are lost, not written).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = (0, 0);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = (service_packets(&outer_path), service_packets(&inner_path));
        if (now.0 == now.1 && now.0 > 0 && now == last) || Instant::now() > deadline {
            break;
        }
        last = now;
    }
    let outer_log = stop(&mut outer);
    let inner_log = stop(&mut inner);

    let inner_count = service_packets(&inner_path);
    match tshark_count(&outer_path, taps.tshark_filter) {
        Some(n) => assert_eq!(
            n, inner_count,
            "{name}: tshark finds {n} service packets in the outer capture ({}), \
             the inner capture holds {inner_count}",
            taps.tshark_filter
        ),
        None => eprintln!("skipped: {name}: tshark is not installed (apt-get install tshark): the outer capture's encapsulation not checked"),
    }
    let logs = format!("{outer_log}\n{inner_log}\n{}", logs());
    assert_alike(
        name,
        taps.vni,
        &reports(&outer_path, events),
        &reports(&inner_path, events),
        &logs,
    );
    if let Some(keep) = std::env::var_os("CLARION_KEEP_TUNNEL_CAPTURES") {
        let keep = Path::new(&keep);
        std::fs::create_dir_all(keep).expect("keep directory");
        for p in [&outer_path, &inner_path] {
            std::fs::copy(p, keep.join(p.file_name().expect("file name"))).expect("keep a capture");
        }
    }
    eprintln!("{name}: reports alike from {inner_count} tunnelled service packets");
}

/// Frames of `pcap` that tshark's display `filter` matches; `None` without tshark.
fn tshark_count(pcap: &Path, filter: &str) -> Option<usize> {
    let o = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(pcap)
        .args(["-Y", filter, "-T", "fields", "-e", "frame.number"])
        .output()
        .ok()?;
    assert!(o.status.success(), "tshark -Y {filter:?}: {}", common::stderr(&o));
    Some(String::from_utf8_lossy(&o.stdout).lines().count())
}

/// The reports on the inner capture hold the events' groups (one per
/// connection each way, one port), and those on the outer capture are
/// the same. A group may name the tunnel's identifier (`vni`): on the
/// outer capture it must be the tunnel's `vni` (null if it has none), on
/// the inner one null (no tunnel there); then it is left out of the
/// comparison, as the inner capture cannot know it.
fn assert_alike(name: &str, vni: Option<u32>, outer_reports: &[Value], inner_reports: &[Value], logs: &str) {
    let count = |event: &str| inner_reports.iter().filter(|r| r["event"] == event).count();
    assert_eq!(
        (
            count("service_connections"),
            count("service_replies"),
            count("service_port"),
            count("tenant_connections")
        ),
        (CONNECTIONS, CONNECTIONS, 1, CONNECTIONS),
        "{name}: the events on the inner port must fire\n{logs}"
    );
    // Equal but for completeness: the outer capture's frame count also
    // holds tunnelled frames that are not the service's TCP (ARP and
    // neighbour traffic inside an L2 tunnel, kept under their outer
    // headers), which the inner capture's filter leaves out.
    let strip = |rs: &[Value], vni: Option<u32>, side: &str| {
        let mut v: Vec<String> = rs
            .iter()
            .map(|r| {
                let mut r = r.clone();
                let o = r.as_object_mut().expect("object");
                o.remove("completeness");
                let group = o.get_mut("group").and_then(Value::as_object_mut);
                if let Some(got) = group.and_then(|g| g.remove("vni")) {
                    assert_eq!(got, serde_json::json!(vni), "{name}: the {side} capture's vni");
                }
                r.to_string()
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        strip(outer_reports, vni, "outer"),
        strip(inner_reports, None, "inner"),
        "{name}: reports on the outer capture differ from the inner one's\n{logs}"
    );
}

/// The same comparison on tunnels that Open vSwitch's userspace datapath
/// makes (see tunnels/ovs.rs): real Geneve and GRE where the kernel has
/// no such devices, and VXLAN from a second implementation. The inner
/// capture is on `br-int`, the tap device OVS hands the inner frames to.
#[test]
fn tunnels_made_by_open_vswitch_report_as_their_inner_traffic() {
    let Some(net) = Net::new("ovs") else { return };
    for (tool, package) in [("tcpdump", "tcpdump"), ("python3", "python3")] {
        if Command::new(tool).arg("--version").output().is_err() {
            eprintln!("skipped: {tool} is not installed (apt-get install {package})");
            return;
        }
    }
    if let Some(why) = ovs::missing() {
        eprintln!("skipped: {why}");
        return;
    }
    assert!(net.ip(&["-n", &net.b, "link", "set", "lo", "up"]), "lo up");
    let dir = tempfile::tempdir().expect("temp dir");
    let events = dir.path().join("tunnels.clarion");
    std::fs::write(&events, EVENTS).expect("events file");
    for kind in &ovs::OVS_KINDS {
        let switches = ovs::tunnel(&net, kind, &dir.path().join(kind.name));
        let taps = Taps {
            name: kind.name,
            outer_filter: kind.outer_filter,
            inner_iface: "br-int",
            tshark_filter: kind.tshark_filter,
            vni: kind.vni,
        };
        compare(&net, &taps, dir.path(), &events, &|| {
            format!("{}\n{}", switches[0].logs(), switches[1].logs())
        });
    }
}

/// Captures the OVS test made (crates/testdata/tunnels, written with
/// CLARION_KEEP_TUNNEL_CAPTURES): on any machine, `clarion run` reports on
/// each outer capture as on its inner one. The encapsulation is checked
/// from the bytes first: every outer frame is IPv4 carrying the tunnel
/// (UDP to its port, or GRE with its protocol type).
#[test]
fn open_vswitch_tunnel_captures_report_as_their_inner_traffic() {
    let dir = repo().join("crates/testdata/tunnels");
    let tmp = tempfile::tempdir().expect("temp dir");
    let events = tmp.path().join("tunnels.clarion");
    std::fs::write(&events, EVENTS).expect("events file");
    for kind in &ovs::OVS_KINDS {
        let outer = dir.join(format!("{}-outer.pcap", kind.name));
        let inner = dir.join(format!("{}-inner.pcap", kind.name));
        let mut src = clarion_capture::CaptureFile::open(&outer).expect("the committed outer capture");
        let (mut frames, mut tunnelled) = (0usize, 0usize);
        while let Some(p) = src.next_packet() {
            let p = p.expect("an undamaged capture");
            frames += 1;
            tunnelled += usize::from(p.link == LinkType::Ethernet && carries(p.data, kind.wire));
        }
        assert!(frames > 0, "{}: an empty capture", kind.name);
        assert_eq!(
            tunnelled, frames,
            "{}: frames that are not the tunnel's",
            kind.name
        );
        assert_alike(
            kind.name,
            kind.vni,
            &reports(&outer, &events),
            &reports(&inner, &events),
            "",
        );
        eprintln!("{}: {frames} outer frames, reports alike", kind.name);
    }
}

/// Whether an Ethernet frame is IPv4 carrying `(protocol, what, words)`:
/// UDP (17) to port `what`, or GRE (47) whose protocol type is `what`; for
/// Geneve (UDP 6081), with `words` 4-byte words of options.
fn carries(f: &[u8], (proto, what, words): (u8, u16, u8)) -> bool {
    let be = |i: usize| f.get(i..i + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    if be(12) != Some(0x0800) || f.len() < 34 || f[23] != proto {
        return false;
    }
    // The UDP destination port and the GRE protocol type are both the
    // second 16-bit word after the IP header.
    let l4 = 14 + usize::from(f[14] & 0x0f) * 4;
    let geneve_ok = proto != 17 || what != 6081 || f.get(l4 + 8).map(|b| b & 0x3f) == Some(words);
    matches!(proto, 17 | 47) && be(l4 + 2) == Some(what) && geneve_ok
}

fn python(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "python3", "-c", TRAFFIC])
        .args(args)
        .args([PORT.to_string(), CONNECTIONS.to_string(), EXCHANGES.to_string()]);
    c
}

/// tcpdump in `ns` on `iface`, writing every matching packet at once
/// (its first 512 bytes); returns once it is listening.
fn tcpdump(ns: &str, iface: &str, filter: &str, out: &Path) -> (Child, BufReader<ChildStderr>) {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "tcpdump", "--immediate-mode", "-U", "-n"])
        // Immediate mode gives each packet a ring slot of the snap length:
        // with the defaults (256 KiB, 2 MiB of buffer) 8 slots, which a busy
        // machine overruns. Headers are all that is read; sizes come from them.
        .args(["-s", "512", "-B", "16384", "-i", iface, "-w"])
        .arg(out)
        .arg(filter)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump starts");
    let mut err = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    while !line.contains("listening on") {
        line.clear();
        if err.read_line(&mut line).expect("tcpdump output") == 0 {
            panic!("tcpdump on {iface} exited: {line}");
        }
    }
    (child, err)
}

/// Stops tcpdump as an operator would (SIGTERM, so it closes the file);
/// its closing words (packets captured, dropped).
fn stop((child, err): &mut (Child, BufReader<ChildStderr>)) -> String {
    // SAFETY: a plain system call on the id of a child this test started
    // and has not yet waited for.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    child.wait().expect("tcpdump ends");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(err, &mut rest);
    rest
}

/// The service's TCP packets a capture holds so far, as Clarion parses
/// them (through the tunnel for the outer one); a record cut by the
/// writer ends the count.
fn service_packets(path: &Path) -> usize {
    let Ok(mut src) = clarion_capture::CaptureFile::open(path) else {
        return 0;
    };
    let mut n = 0;
    while let Some(Ok(p)) = src.next_packet() {
        if let Ok(r) = parse_frame(p.link, p.data, p.ts_ns, p.orig_len) {
            n += usize::from(r.key.proto == 6 && (r.key.src_port == PORT || r.key.dst_port == PORT));
        }
    }
    n
}

fn reports(pcap: &Path, events: &Path) -> Vec<Value> {
    let o = clarion()
        .args(["run", "--format", "json", "--host", "t", "-q", "--pcap"])
        .arg(pcap)
        .arg("--events")
        .arg(events)
        .output()
        .expect("clarion runs");
    assert!(o.status.success(), "clarion: {}", common::stderr(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON report"))
        .collect()
}

/// Waits, if need be, so that the traffic (a few seconds at most) starts
/// well inside a window: a packet's two capture times, microseconds
/// apart, must not fall in different windows.
fn keep_clear_of_window_edges() {
    let into = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        % WINDOW_S;
    if into + 20 > WINDOW_S {
        std::thread::sleep(Duration::from_secs(WINDOW_S - into + 1));
    }
}

/// `carried` as the payload of an Ethernet/IPv4 packet of `transport`.
fn outer(transport: Transport, carried: &[u8]) -> (FrameSpec, Vec<u8>) {
    let spec = FrameSpec {
        transport,
        payload_len: carried.len(),
        ..FrameSpec::default()
    };
    let mut f = spec.build();
    let at = f.len() - carried.len();
    f[at..].copy_from_slice(carried);
    (spec, f)
}

/// A real frame inside each tunnel that can carry it, and in MPLS: the
/// outer frame (Ethernet), the outer packet's spec (`None` for MPLS,
/// which has no outer packet to fall back to) and the tunnel's VNI or GRE
/// key (`None` for keyless GRE and MPLS).
fn wrappings(link: LinkType, frame: &[u8]) -> Vec<(Option<FrameSpec>, Vec<u8>, Option<u32>)> {
    let with = |header: &[u8], inner: &[u8]| [header, inner].concat();
    let udp = |dst_port| Transport::Udp {
        src_port: 49152,
        dst_port,
    };
    let mut out = Vec::new();
    let mut push = |(spec, f): (FrameSpec, Vec<u8>), vni| out.push((Some(spec), f, vni));
    // The IP packet and its EtherType, where the link has one to give.
    let ip = match link {
        LinkType::Ethernet if frame.len() > 14 => match u16::from_be_bytes([frame[12], frame[13]]) {
            t @ (0x0800 | 0x86dd) => Some((t, &frame[14..])),
            _ => None,
        },
        LinkType::RawIp | LinkType::Ipv4 | LinkType::Ipv6 => match frame.first().map(|b| b >> 4) {
            Some(4) => Some((0x0800, frame)),
            Some(6) => Some((0x86dd, frame)),
            _ => None,
        },
        _ => None,
    };
    if link == LinkType::Ethernet {
        push(
            outer(udp(4789), &with(&[0x08, 0, 0, 0, 0, 0, 42, 0], frame)),
            Some(42),
        );
        // Geneve with one option word.
        push(
            outer(
                udp(6081),
                &with(&[0x01, 0, 0x65, 0x58, 0, 0, 7, 0, 0x01, 0x02, 0x80, 0], frame),
            ),
            Some(7),
        );
        // GRE with key and sequence number, transparent Ethernet bridging.
        push(
            outer(
                Transport::Other(47),
                &with(&[0x30, 0, 0x65, 0x58, 0, 0, 0, 9, 0, 0, 0, 1], frame),
            ),
            Some(9),
        );
    }
    if let Some((etype, ip)) = ip {
        let t = etype.to_be_bytes();
        // GRE with a checksum word, IP straight after.
        push(
            outer(
                Transport::Other(47),
                &with(&[0x80, 0, t[0], t[1], 0, 0, 0, 0], ip),
            ),
            None,
        );
        // Two MPLS labels between Ethernet and IP.
        let mut mpls = vec![0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02, 0x88, 0x47];
        mpls.extend_from_slice(&[0x00, 0x01, 0x00, 0x40, 0x00, 0x3e, 0x81, 0x40]);
        out.push((None, with(&mpls, ip), None));
    }
    out
}

#[test]
fn real_captures_wrapped_in_tunnels_parse_as_themselves() {
    let dir = repo().join("../shared/captures");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("skipped: no captures at {}", dir.display());
        return;
    };
    let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        let Ok(mut src) = clarion_capture::CaptureFile::open(&path) else {
            continue;
        };
        let (mut inner, mut kept_outer) = (0usize, 0usize);
        while let Some(Ok(p)) = src.next_packet() {
            let alone = parse_frame(p.link, p.data, p.ts_ns, p.orig_len);
            for (spec, f, vni) in wrappings(p.link, p.data) {
                let got = parse_frame(LinkType::Ethernet, &f, p.ts_ns, p.orig_len);
                let captured = |r: PacketRecord| PacketRecord {
                    captured_len: f.len() as u32,
                    ..r
                };
                let want: Result<PacketRecord, ParseError> = match (alone, spec) {
                    // The inner packet, with the tunnel's identifier in its key.
                    (Ok(r), _) => Ok(captured(PacketRecord {
                        key: vni.map_or(r.key, |vni| FlowKey {
                            vni,
                            flags: r.key.flags | FlowKey::HAS_VNI,
                            ..r.key
                        }),
                        ..r
                    })),
                    // A tunnel whose inner frame does not parse: the outer packet.
                    (Err(_), Some(spec)) => Ok(captured(PacketRecord {
                        ts_ns: p.ts_ns,
                        ..spec.record(p.ts_ns)
                    })),
                    (Err(e), None) => Err(e),
                };
                assert_eq!(
                    got,
                    want,
                    "{}: a wrapped frame {:02x?}",
                    path.display(),
                    &f[..f.len().min(80)]
                );
                match alone {
                    Ok(_) => inner += 1,
                    Err(_) => kept_outer += 1,
                }
            }
        }
        eprintln!(
            "{}: {inner} wrapped frames parsed as their inner packet; {kept_outer} whose inner frame \
             does not parse alone (ARP, …) gave the outer packet (tunnels) or the same error (MPLS)",
            path.display()
        );
        assert!(inner > 0, "{}: no frame could be wrapped", path.display());
    }
}

/// Events for any traffic: every connection, every service port.
const ANY_TRAFFIC: &str = "\
event connections
  when sum(packets) >= 1 and max(ttl) > 0
  per 5tuple
  every 1s

event ports
  filter proto = tcp
  when sum(size) > 0 and count(is_lost == 1) >= 0
  per dst_port
  every 1s
";

/// Frames to write: time, bytes, original length.
type Frames = Vec<(u64, Vec<u8>, u32)>;

/// `frames` as a pcap file of link type `link`.
fn write_pcap(path: &Path, link: LinkType, frames: &Frames) {
    let f = std::fs::File::create(path).expect("create");
    let mut w = clarion_capture::PcapWriter::new(
        std::io::BufWriter::new(f),
        link,
        clarion_capture::TsResolution::Nano,
    )
    .expect("header");
    for (ts, data, orig) in frames {
        w.write_packet(*ts, data, *orig).expect("write");
    }
    let mut inner = w.into_inner().expect("flush");
    std::io::Write::flush(&mut inner).expect("flush");
}

/// The IP packets of real Ethernet captures, written as pcap files of
/// link type PPP (DLT 9), Cisco HDLC (DLT 104) and Ethernet with PPPoE:
/// `clarion run` reports on each exactly as on the same packets in plain
/// Ethernet frames, completeness included (the same packets, none lost).
#[test]
fn ppp_hdlc_and_pppoe_captures_report_as_ethernet() {
    let dir = repo().join("../shared/captures");
    if !dir.is_dir() {
        eprintln!("skipped: no captures at {}", dir.display());
        return;
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    let events = tmp.path().join("any.clarion");
    std::fs::write(&events, ANY_TRAFFIC).expect("events file");
    for name in [
        "dpkt_http.pcap",
        "pathspider_tcp_ecn.pcap",
        "libtrace_anon-v6.pcap",
    ] {
        let mut src = clarion_capture::CaptureFile::open(&dir.join(name)).expect("open capture");
        // (time, IP bytes, their original length, EtherType) of every
        // untagged IPv4/IPv6 frame.
        let mut packets = Vec::new();
        while let Some(Ok(p)) = src.next_packet() {
            if p.link != LinkType::Ethernet || p.data.len() <= 14 {
                continue;
            }
            let etype = u16::from_be_bytes([p.data[12], p.data[13]]);
            if matches!(etype, 0x0800 | 0x86dd) {
                packets.push((
                    p.ts_ns,
                    p.data[14..].to_vec(),
                    p.orig_len.saturating_sub(14),
                    etype,
                ));
            }
        }
        assert!(!packets.is_empty(), "{name}: no IP frames");
        let framed = |header: &dyn Fn(u16) -> Vec<u8>| -> Frames {
            packets
                .iter()
                .map(|(ts, ip, orig, etype)| {
                    let h = header(*etype);
                    ([h.as_slice(), ip].concat(), *ts, *orig + h.len() as u32)
                })
                .map(|(f, ts, orig)| (ts, f, orig))
                .collect()
        };
        let ppp_protocol = |etype: u16| if etype == 0x0800 { 0x0021u16 } else { 0x0057 };
        let mac = [0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01];
        let variants: [(&str, LinkType, Frames); 5] = [
            (
                "ethernet",
                LinkType::Ethernet,
                framed(&|t| [&mac[..], &t.to_be_bytes()].concat()),
            ),
            (
                "ppp",
                LinkType::Ppp,
                framed(&|t| [&[0xff, 0x03][..], &ppp_protocol(t).to_be_bytes()].concat()),
            ),
            // Address and control compressed away, protocol compressed to a byte.
            (
                "ppp-acfc-pfc",
                LinkType::Ppp,
                framed(&|t| vec![ppp_protocol(t) as u8]),
            ),
            (
                "c_hdlc",
                LinkType::CiscoHdlc,
                framed(&|t| [&[0x0f, 0x00][..], &t.to_be_bytes()].concat()),
            ),
            (
                "pppoe",
                LinkType::Ethernet,
                framed(&|t| {
                    let session = [0x11, 0x00, 0x12, 0x34, 0x00, 0x00];
                    [&mac[..], &[0x88, 0x64], &session, &ppp_protocol(t).to_be_bytes()].concat()
                }),
            ),
        ];
        let mut want: Option<Vec<String>> = None;
        for (variant, link, frames) in &variants {
            let path = tmp.path().join(format!("{variant}.pcap"));
            write_pcap(&path, *link, frames);
            let got: Vec<String> = reports(&path, &events).iter().map(Value::to_string).collect();
            assert!(!got.is_empty(), "{name} as {variant}: no reports");
            match &want {
                None => want = Some(got),
                Some(w) => assert_eq!(&got, w, "{name} as {variant} differs from Ethernet"),
            }
        }
        eprintln!("{name}: {} packets, reports alike on 5 framings", packets.len());
    }
}
