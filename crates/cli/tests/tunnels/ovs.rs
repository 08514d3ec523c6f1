//! Tunnels made by Open vSwitch's userspace datapath (`datapath_type=netdev`,
//! "native tunneling"): Geneve, GRE carrying IP, GRE carrying Ethernet and
//! VXLAN encapsulated and decapsulated by OVS itself, in user space, so a
//! kernel without the `geneve` or `ip_gre` modules (a Firecracker VM, a
//! container) still gets real Geneve and GRE traffic from a widely used
//! implementation.
//!
//! Design: one `ovsdb-server` and one `ovs-vswitchd` per namespace, each in
//! its own directory (database, sockets, logs; `OVS_RUNDIR` and friends
//! point there), never the system's service. In each namespace, as OVS's
//! "userspace tunneling" guide lays out: `br-phy` holds the veth and the
//! underlay address (10.77.0.x), `br-int` holds the tunnel port and the
//! inner address (10.78.0.x) on its local port, a tap device. Both ends'
//! MAC addresses are fixed and the remote underlay MAC is set in OVS's
//! neighbour cache, so no ARP is needed to start. GRE carrying IP is the
//! port option `packet_type=legacy_l3` with two OpenFlow rules (OVS adds a
//! dummy Ethernet header on receive; the rule writes the local MAC in it);
//! a Geneve option is a TLV map and a `set_field` rule, as OVN does.
//!
//! Invariants: every process started is stopped when its [`Switch`] drops
//! (SIGTERM, then SIGKILL after 5 s), also when a test panics, and the
//! tap devices it made (persistent) are deleted; nothing is written
//! outside the test's temporary directory.
//!
//! Cost: about a second to start a pair of switches, a few MB of memory;
//! the OVS datapath threads sleep when no packet comes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::netns::Net;
use crate::common::tool;

/// The OVS tools the tests run, all from `openvswitch-switch` (and the
/// `openvswitch-common` it depends on).
const TOOLS: [&str; 6] = [
    "ovs-vswitchd",
    "ovsdb-server",
    "ovsdb-tool",
    "ovs-vsctl",
    "ovs-appctl",
    "ovs-ofctl",
];
const SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

/// One tunnel kind as an OVS interface.
pub struct OvsKind {
    pub name: &'static str,
    /// The interface `type`.
    pub iface_type: &'static str,
    /// Its options besides `remote_ip`.
    pub options: &'static [&'static str],
    /// How `br-int` forwards.
    pub flows: Flows,
    /// tcpdump's filter for the outer packets.
    pub outer_filter: &'static str,
    /// The outer IP protocol; after the IP header, the UDP destination
    /// port or GRE protocol type; and Geneve's option length (4-byte
    /// words; 0 for the others): the encapsulation as bytes.
    pub wire: (u8, u16, u8),
    /// tshark's display filter for the outer packets carrying the
    /// service's TCP in this encapsulation, as Wireshark's dissectors read it.
    pub tshark_filter: &'static str,
    /// The VNI or GRE key the tunnel puts on its packets.
    pub vni: Option<u32>,
}

/// How `br-int` forwards between its local port and the tunnel.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Flows {
    /// A learning switch (OVS's default `NORMAL` flow).
    Normal,
    /// IP straight after the tunnel header, no Ethernet frame: IP from the
    /// local port goes in as it is; IP coming out gets the local port's
    /// MAC in the dummy Ethernet header OVS gives it.
    L3,
    /// `NORMAL`, and every frame from the local port leaves with a 4-byte
    /// Geneve option (class 0x0102, OVN's, type 0x80, critical), as OVN
    /// tags its traffic.
    GeneveOption,
}

pub const OVS_KINDS: [OvsKind; 5] = [
    OvsKind {
        name: "ovs-geneve",
        iface_type: "geneve",
        options: &["options:key=7"],
        flows: Flows::Normal,
        outer_filter: "udp port 6081",
        wire: (17, 6081, 0),
        tshark_filter: "geneve.vni == 7 && geneve.proto_type == 0x6558 && tcp.port == 5555",
        vni: Some(7),
    },
    // Geneve with an option: 8 bytes of options the parser must skip.
    OvsKind {
        name: "ovs-geneve-opt",
        iface_type: "geneve",
        options: &["options:key=7"],
        flows: Flows::GeneveOption,
        outer_filter: "udp port 6081",
        wire: (17, 6081, 2),
        tshark_filter: "geneve.vni == 7 && geneve.option.class == 0x0102 && geneve.option.length == 8 && tcp.port == 5555",
        vni: Some(7),
    },
    // Ethernet over GRE (protocol 0x6558), with a key.
    OvsKind {
        name: "ovs-gretap",
        iface_type: "gre",
        options: &["options:key=9"],
        flows: Flows::Normal,
        outer_filter: "ip proto 47",
        wire: (47, 0x6558, 0),
        tshark_filter: "gre.proto == 0x6558 && gre.key == 9 && tcp.port == 5555",
        vni: Some(9),
    },
    // IPv4 straight after GRE (protocol 0x0800), with a checksum word.
    OvsKind {
        name: "ovs-gre",
        iface_type: "gre",
        options: &["options:csum=true", "options:packet_type=legacy_l3"],
        flows: Flows::L3,
        outer_filter: "ip proto 47",
        wire: (47, 0x0800, 0),
        tshark_filter: "gre.proto == 0x0800 && gre.flags.checksum == 1 && tcp.port == 5555",
        vni: None,
    },
    OvsKind {
        name: "ovs-vxlan",
        iface_type: "vxlan",
        options: &["options:key=42"],
        flows: Flows::Normal,
        outer_filter: "udp port 4789",
        wire: (17, 4789, 0),
        tshark_filter: "vxlan.vni == 42 && tcp.port == 5555",
        vni: Some(42),
    },
];

/// The reason the OVS tests cannot run here, if any.
pub fn missing() -> Option<String> {
    if let Some(t) = TOOLS.iter().find(|t| tool(t).is_none()) {
        return Some(format!(
            "{t} is not installed (apt-get install openvswitch-switch)"
        ));
    }
    if !Path::new(SCHEMA).is_file() {
        return Some(format!(
            "no OVS schema at {SCHEMA} (apt-get install openvswitch-common)"
        ));
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun (OVS's userspace bridges are tap devices)".into());
    }
    None
}

/// An `ovsdb-server` and an `ovs-vswitchd` of one namespace, private to
/// the test; stopped when dropped.
pub struct Switch {
    ns: String,
    dir: PathBuf,
    db: Child,
    vswitchd: Option<Child>,
}

impl Switch {
    /// Starts both daemons, `ovs-vswitchd` inside `ns`, with everything in
    /// `dir` (which must exist); panics, with their logs, if they fail.
    pub fn start(ns: &str, dir: &Path) -> Switch {
        let conf = dir.join("conf.db");
        let o = ovs("ovsdb-tool", dir)
            .arg("create")
            .arg(&conf)
            .arg(SCHEMA)
            .output()
            .expect("ovsdb-tool runs");
        assert!(
            o.status.success(),
            "ovsdb-tool create: {}",
            crate::common::stderr(&o)
        );
        let db = ovs("ovsdb-server", dir)
            .arg(&conf)
            .arg(format!("--remote=punix:{}", dir.join("db.sock").display()))
            .args(files(dir, "ovsdb-server"))
            // Never read: a pipe could fill and stall it.
            .stderr(Stdio::null())
            .spawn()
            .expect("ovsdb-server starts");
        let mut sw = Switch {
            ns: ns.to_string(),
            dir: dir.to_path_buf(),
            db,
            vswitchd: None,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !dir.join("db.sock").exists() {
            assert!(
                Instant::now() < deadline && sw.db.try_wait().ok().flatten().is_none(),
                "ovsdb-server did not open its socket\n{}",
                sw.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        sw.vsctl(&["--no-wait", "init"]);
        // `ip netns exec` execs the daemon: the child's id is its id.
        let mut vswitchd = Command::new("ip");
        vswitchd
            .args(["netns", "exec", ns])
            .arg(tool("ovs-vswitchd").expect("checked by missing()"))
            .arg(sw.db_arg())
            .args(files(dir, "ovs-vswitchd"))
            .envs(env(dir))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        sw.vswitchd = Some(vswitchd.spawn().expect("ovs-vswitchd starts"));
        sw
    }

    fn db_arg(&self) -> String {
        format!("unix:{}", self.dir.join("db.sock").display())
    }

    /// Runs an OVS tool on this switch; panics with the daemons' logs if
    /// it fails. Its standard output.
    fn run(&self, tool_name: &str, args: &[String]) -> String {
        let o = ovs(tool_name, &self.dir)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{tool_name}: {e}"));
        assert!(
            o.status.success(),
            "{tool_name} {args:?}: {}\n{}",
            crate::common::stderr(&o),
            self.logs()
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// `ovs-vsctl`; without `--no-wait` it returns once ovs-vswitchd has
    /// applied the change (bridges and ports made).
    pub fn vsctl(&self, args: &[&str]) -> String {
        let mut a = vec![format!("--db={}", self.db_arg()), "--timeout=30".into()];
        a.extend(args.iter().map(|s| s.to_string()));
        self.run("ovs-vsctl", &a)
    }

    /// `ovs-appctl` to this ovs-vswitchd.
    pub fn appctl(&self, args: &[&str]) -> String {
        let mut a = vec!["-t".to_string(), self.ctl()];
        a.extend(args.iter().map(|s| s.to_string()));
        self.run("ovs-appctl", &a)
    }

    /// `ovs-ofctl COMMAND` on bridge `bridge` of this switch.
    pub fn ofctl(&self, command: &str, bridge: &str, rest: &[&str]) -> String {
        let mut a = vec![
            command.to_string(),
            format!("unix:{}", self.dir.join(format!("{bridge}.mgmt")).display()),
        ];
        a.extend(rest.iter().map(|s| s.to_string()));
        self.run("ovs-ofctl", &a)
    }

    fn ctl(&self) -> String {
        self.dir.join("ovs-vswitchd.ctl").display().to_string()
    }

    /// The daemons' logs, for failure messages.
    pub fn logs(&self) -> String {
        ["ovsdb-server", "ovs-vswitchd"]
            .iter()
            .map(|d| {
                let log = std::fs::read_to_string(self.dir.join(format!("{d}.log"))).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                format!(
                    "--- {d} in {} (last lines)\n{}",
                    self.ns,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        for child in self.vswitchd.iter_mut().chain(std::iter::once(&mut self.db)) {
            stop(child);
        }
        // The tap devices of netdev bridges are persistent: they outlive
        // ovs-vswitchd, and the next switch in this namespace needs the names.
        for dev in ["br-phy", "br-int", "ovs-netdev"] {
            let _ = Command::new("ip")
                .args(["-n", &self.ns, "link", "del", dev])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// SIGTERM, then SIGKILL if the process has not ended within 5 s.
fn stop(child: &mut Child) {
    if child.try_wait().ok().flatten().is_some() {
        return;
    }
    // SAFETY: a plain system call on the id of a child this test started
    // and has not yet waited for.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The variables that make every OVS program use `dir`, not /var/run,
/// /etc or /var/log (ovs-vswitchd puts its bridges' sockets there).
fn env(dir: &Path) -> Vec<(&'static str, PathBuf)> {
    ["OVS_RUNDIR", "OVS_DBDIR", "OVS_LOGDIR", "OVS_SYSCONFDIR"]
        .into_iter()
        .map(|v| (v, dir.to_path_buf()))
        .collect()
}

/// A daemon's pid file, control socket and log file in `dir`.
fn files(dir: &Path, daemon: &str) -> Vec<String> {
    let f = |ext: &str| dir.join(format!("{daemon}.{ext}")).display().to_string();
    vec![
        format!("--pidfile={}", f("pid")),
        format!("--unixctl={}", f("ctl")),
        format!("--log-file={}", f("log")),
        // Errors go to the log file; the console would interleave them
        // with the test's output.
        "-vconsole:off".into(),
    ]
}

fn ovs(name: &str, dir: &Path) -> Command {
    let mut c = Command::new(tool(name).unwrap_or_else(|| PathBuf::from(name)));
    c.envs(env(dir)).stdin(Stdio::null()).stderr(Stdio::piped());
    c
}

/// One tunnel end's addresses.
struct End<'a> {
    ns: &'a str,
    veth: &'a str,
    underlay: &'a str,
    remote_underlay: &'a str,
    phy_mac: &'a str,
    remote_phy_mac: &'a str,
    inner: &'a str,
    remote_inner: &'a str,
    int_mac: &'a str,
}

/// The two switches of a tunnel of `kind` between `net`'s namespaces,
/// `br-int` holding 10.78.0.1 in `a` and 10.78.0.2 in `b`, checked to
/// carry a ping both ways. `dir` is a fresh directory for both.
pub fn tunnel(net: &Net, kind: &OvsKind, dir: &Path) -> [Switch; 2] {
    let ends = [
        End {
            ns: &net.a,
            veth: "va",
            underlay: "10.77.0.1",
            remote_underlay: "10.77.0.2",
            phy_mac: "02:00:00:00:77:01",
            remote_phy_mac: "02:00:00:00:77:02",
            inner: "10.78.0.1",
            remote_inner: "10.78.0.2",
            int_mac: "02:00:00:00:78:01",
        },
        End {
            ns: &net.b,
            veth: "vb",
            underlay: "10.77.0.2",
            remote_underlay: "10.77.0.1",
            phy_mac: "02:00:00:00:77:02",
            remote_phy_mac: "02:00:00:00:77:01",
            inner: "10.78.0.2",
            remote_inner: "10.78.0.1",
            int_mac: "02:00:00:00:78:02",
        },
    ];
    let switches = ends.map(|end| {
        let d = dir.join(&end.ns[end.ns.len() - 1..]);
        std::fs::create_dir_all(&d).expect("switch directory");
        let sw = Switch::start(end.ns, &d);
        set_up(net, kind, &sw, &end);
        sw
    });
    // The first packets must not be lost while OVS learns its routes (they
    // come from the kernel over netlink after `ip addr add`): a ping each
    // way through the tunnel first. ICMP is outside the tests' filters.
    for (from, to) in [(&net.a, "10.78.0.2"), (&net.b, "10.78.0.1")] {
        let reached = (0..20).any(|_| {
            Command::new("ip")
                .args(["netns", "exec", from, "ping", "-c", "1", "-W", "1", to])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        assert!(
            reached,
            "{}: no ping through the OVS tunnel from {from} to {to}\n{}\n{}",
            kind.name,
            switches[0].logs(),
            switches[1].logs()
        );
    }
    switches
}

fn set_up(net: &Net, kind: &OvsKind, sw: &Switch, end: &End) {
    sw.vsctl(&[
        "add-br",
        "br-phy",
        "--",
        "set",
        "bridge",
        "br-phy",
        "datapath_type=netdev",
        &format!("other-config:hwaddr={}", end.phy_mac),
        "--",
        "add-port",
        "br-phy",
        end.veth,
    ]);
    let mut tun = vec![
        "add-br".to_string(),
        "br-int".into(),
        "--".into(),
        "set".into(),
        "bridge".into(),
        "br-int".into(),
        "datapath_type=netdev".into(),
        format!("other-config:hwaddr={}", end.int_mac),
        "--".into(),
        "add-port".into(),
        "br-int".into(),
        "tun0".into(),
        "--".into(),
        "set".into(),
        "interface".into(),
        "tun0".into(),
        format!("type={}", kind.iface_type),
        format!("options:remote_ip={}", end.remote_underlay),
    ];
    tun.extend(kind.options.iter().map(|o| o.to_string()));
    sw.vsctl(&tun.iter().map(String::as_str).collect::<Vec<_>>());
    let ns = end.ns;
    for args in [
        vec![
            "-n",
            ns,
            "addr",
            "add",
            &format!("{}/24", end.underlay),
            "dev",
            "br-phy",
        ],
        vec!["-n", ns, "link", "set", "br-phy", "up"],
        vec![
            "-n",
            ns,
            "addr",
            "add",
            &format!("{}/24", end.inner),
            "dev",
            "br-int",
        ],
        // Room for the outer headers (at most 50 bytes here) in the veth's 1500.
        vec!["-n", ns, "link", "set", "br-int", "mtu", "1400", "up"],
    ] {
        assert!(net.ip(&args), "ip {args:?}");
    }
    sw.appctl(&["tnl/arp/set", "br-phy", end.remote_underlay, end.remote_phy_mac]);
    match kind.flows {
        Flows::Normal => {}
        Flows::L3 => {
            sw.ofctl("del-flows", "br-int", &[]);
            sw.ofctl(
                "add-flow",
                "br-int",
                &[&format!(
                    "in_port=tun0,ip,actions=mod_dl_dst:{},LOCAL",
                    end.int_mac
                )],
            );
            sw.ofctl("add-flow", "br-int", &["in_port=LOCAL,ip,actions=output:tun0"]);
            // The kernel needs some neighbour entry to send at all.
            let neigh = [
                "-n",
                ns,
                "neigh",
                "replace",
                end.remote_inner,
                "lladdr",
                "02:00:00:00:78:ff",
                "dev",
                "br-int",
                "nud",
                "permanent",
            ];
            assert!(net.ip(&neigh), "ip {neigh:?}");
        }
        Flows::GeneveOption => {
            // Both ends map the option, or the receiver drops the packets
            // (the option is critical).
            sw.ofctl(
                "add-tlv-map",
                "br-int",
                &["{class=0x0102,type=0x80,len=4}->tun_metadata0"],
            );
            sw.ofctl(
                "add-flow",
                "br-int",
                &["priority=10,in_port=LOCAL,actions=set_field:0xc1a510e0->tun_metadata0,NORMAL"],
            );
        }
    }
}
