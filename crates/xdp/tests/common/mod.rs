//! Helpers of the live tests: root and `ip netns` detection, a veth pair
//! with one end in a namespace, a dummy link; all removed on drop.
#![allow(dead_code)] // each test file uses a different subset

use std::process::Command;

/// Why the live tests cannot run here, if they cannot.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    if Command::new("python3").arg("--version").output().is_err() {
        return Some("no python3 (the sender)".into());
    }
    match Command::new("ip").args(["netns", "list"]).output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "`ip netns list` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("no `ip` command: {e}")),
    }
}

pub fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A veth pair: `host` in the root namespace (10.231.0.{4k+1}/30) and `peer`
/// in namespace `ns` (.{4k+2}). Removed on drop.
pub struct Veth {
    pub host: String,
    pub peer: String,
    pub ns: String,
    pub host_ip: String,
    pub peer_ip: String,
    pub rx_queues_requested: bool,
}

impl Veth {
    pub fn new(tag: char, subnet: u8) -> Result<Veth, String> {
        let pid = std::process::id() % 10_000_000;
        let base = subnet * 4;
        let mut v = Veth {
            host: format!("cxdp{tag}{pid}a"),
            peer: format!("cxdp{tag}{pid}b"),
            ns: format!("cxdp-tx-{tag}{pid}"),
            host_ip: format!("10.231.0.{}", base + 1),
            peer_ip: format!("10.231.0.{}", base + 2),
            rx_queues_requested: true,
        };
        v.cleanup(); // leftovers of an earlier run with the same pid
                     // On failure `v` drops here, which removes whatever was made.
        v.rx_queues_requested = v.setup()?;
        Ok(v)
    }

    fn setup(&self) -> Result<bool, String> {
        let (h, p, ns) = (&*self.host, self.peer.as_str(), self.ns.as_str());
        run(&["ip", "netns", "add", ns])?;
        let two = ["numrxqueues", "2", "numtxqueues", "2"];
        let mut args = vec!["ip", "link", "add", h];
        args.extend(two);
        args.extend(["type", "veth", "peer", "name", p]);
        args.extend(two);
        args.extend(["netns", ns]);
        let multi = match run(&args) {
            Ok(_) => true,
            Err(e) => {
                println!("two-queue veth refused ({e}); using one queue");
                run(&[
                    "ip", "link", "add", h, "type", "veth", "peer", "name", p, "netns", ns,
                ])?;
                false
            }
        };
        // No IPv6 (router solicitations, MLD) on the pair: only our frames.
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{h}/disable_ipv6"), "1");
        run(&[
            "ip",
            "netns",
            "exec",
            ns,
            "sysctl",
            "-qw",
            &format!("net.ipv6.conf.{p}.disable_ipv6=1"),
        ])?;
        run(&["ip", "addr", "add", &format!("{}/30", self.host_ip), "dev", h])?;
        run(&["ip", "link", "set", h, "up"])?;
        run(&[
            "ip",
            "-n",
            ns,
            "addr",
            "add",
            &format!("{}/30", self.peer_ip),
            "dev",
            p,
        ])?;
        run(&["ip", "-n", ns, "link", "set", p, "up"])?;
        run(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
        // Frames carry what the kernel computed, not a partial checksum.
        if let Err(e) = run(&["ip", "netns", "exec", ns, "ethtool", "-K", p, "tx", "off"]) {
            println!("ethtool -K {p} tx off: {e} (checksums are not checked)");
        }
        // ARP requests would be redirected to the sockets and never answered:
        // a permanent neighbour entry lets the sender skip ARP.
        let mac =
            std::fs::read_to_string(format!("/sys/class/net/{h}/address")).map_err(|e| e.to_string())?;
        run(&[
            "ip",
            "-n",
            ns,
            "neigh",
            "replace",
            &self.host_ip,
            "lladdr",
            mac.trim(),
            "dev",
            p,
            "nud",
            "permanent",
        ])?;
        Ok(multi)
    }

    fn cleanup(&self) {
        let _ = run(&["ip", "netns", "del", &self.ns]); // takes the peer, and so the pair
        let _ = run(&["ip", "link", "del", &self.host]);
    }

    /// Sends `n` UDP datagrams from the namespace to the host end, from 8
    /// source ports (so a multi-queue veth spreads them over its queues); the
    /// payload is "cxdp-TAG-SEQ-" plus padding.
    pub fn send(&self, tag: &str, n: usize) -> Result<(), String> {
        let script = "import socket, sys\n\
             dst, n, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]\n\
             socks = []\n\
             for p in range(8):\n\
             \x20   s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
             \x20   s.bind(('0.0.0.0', 40000 + p))\n\
             \x20   socks.append(s)\n\
             for i in range(n):\n\
             \x20   socks[i % 8].sendto(('cxdp-%s-%d-' % (tag, i)).encode() + b'x' * 40, (dst, 9999))\n";
        run(&[
            "ip",
            "netns",
            "exec",
            &self.ns,
            "python3",
            "-c",
            script,
            &self.host_ip,
            &n.to_string(),
            tag,
        ])?;
        Ok(())
    }

    /// The XDP attachment `ip link` shows for the host end, if any.
    pub fn xdp_attached(&self) -> bool {
        run(&["ip", "link", "show", &self.host]).is_ok_and(|s| s.contains("prog/xdp"))
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// A link in the root namespace without native XDP support (a dummy, an ifb
/// or an empty bridge: whichever the kernel has), removed on drop.
pub struct Dummy(pub String);

impl Dummy {
    pub fn new(tag: char) -> Result<Dummy, String> {
        let d = Dummy(format!("cxdp{tag}{}d", std::process::id() % 10_000_000));
        let _ = run(&["ip", "link", "del", &d.0]);
        let mut errors = Vec::new();
        for kind in ["dummy", "ifb", "bridge"] {
            match run(&["ip", "link", "add", &d.0, "type", kind]) {
                Ok(_) => {
                    run(&["ip", "link", "set", &d.0, "up"])?;
                    return Ok(d);
                }
                Err(e) => errors.push(e),
            }
        }
        Err(errors.join("; "))
    }
}

impl Drop for Dummy {
    fn drop(&mut self) {
        let _ = run(&["ip", "link", "del", &self.0]);
    }
}
