//! A Linux `vxlan` device receives the mirror: in a fresh network
//! namespace joined to the host by a veth pair, `vx0` (VNI 42, port
//! 4789) decapsulates the datagrams sent from the host, and tcpdump on
//! `vx0` must see every inner frame, byte for byte and in order.
//!
//! Needs root, `ip` and `tcpdump`; skips saying why otherwise. The
//! namespace and the veth pair are named after the test's pid (parallel
//! runs do not clash) and removed by a guard even when the test fails.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::Duration;

use clarion_capture::{open, PacketSource};
use clarion_mirror::{SendOutcome, Vni, VxlanMirror, DEFAULT_PORT};
use common::{captures_dir, expected_inner, frames, require, Tcpdump};

/// Runs `ip ARGS`; the error carries its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The namespace and the host end of the veth pair, deleted on drop.
struct Lab {
    ns: String,
    host_veth: String,
}

impl Drop for Lab {
    fn drop(&mut self) {
        // Deleting the namespace deletes its veth end, and with it the pair;
        // the second command covers a pair whose peer never moved there.
        let _ = ip(&["netns", "del", &self.ns]);
        let _ = ip(&["link", "del", &self.host_veth]);
    }
}

#[test]
fn a_linux_vxlan_device_receives_the_inner_frames() {
    let Some(dir) = captures_dir() else { return };
    if !require("ip", "iproute2") || !require("tcpdump", "tcpdump") {
        return;
    }
    let pid = std::process::id();
    let lab = Lab {
        ns: format!("clarion-mirror-{pid}"),
        host_veth: format!("cmh{}", pid % 1_000_000),
    };
    if let Err(e) = ip(&["netns", "add", &lab.ns]) {
        eprintln!("skipped: cannot create a network namespace (needs root): {e}");
        return;
    }
    let ns_veth = format!("cmn{}", pid % 1_000_000);
    // A /30 picked by pid, so parallel runs use different addresses.
    let (a, b) = (((pid >> 6) & 0xff) as u8, ((pid & 0x3f) << 2) as u8);
    let host_addr = Ipv4Addr::new(10, 251, a, b + 1);
    let ns_addr = Ipv4Addr::new(10, 251, a, b + 2);
    let (host_cidr, ns_cidr) = (format!("{host_addr}/30"), format!("{ns_addr}/30"));
    let ns_mac = "02:00:00:c1:a7:02";
    let ns_addr_s = ns_addr.to_string();
    let ns = lab.ns.as_str();
    let setup = [
        vec![
            "link",
            "add",
            &lab.host_veth,
            "mtu",
            "9000",
            "type",
            "veth",
            "peer",
            "name",
            &ns_veth,
        ],
        vec!["link", "set", &ns_veth, "netns", ns],
        vec!["addr", "add", &host_cidr, "dev", &lab.host_veth],
        vec!["link", "set", &lab.host_veth, "up"],
        vec!["-n", ns, "link", "set", "lo", "up"],
        vec![
            "-n", ns, "link", "set", &ns_veth, "address", ns_mac, "mtu", "9000", "up",
        ],
        vec!["-n", ns, "addr", "add", &ns_cidr, "dev", &ns_veth],
        // No ARP to wait for: the first datagrams would queue or be lost.
        vec![
            "neigh",
            "replace",
            &ns_addr_s,
            "lladdr",
            ns_mac,
            "dev",
            &lab.host_veth,
            "nud",
            "permanent",
        ],
        vec![
            "-n", ns, "link", "add", "vx0", "type", "vxlan", "id", "42", "dstport", "4789", "local",
            &ns_addr_s, "dev", &ns_veth,
        ],
        vec!["-n", ns, "link", "set", "vx0", "mtu", "8950", "up"],
    ];
    for args in &setup {
        ip(args).unwrap();
    }

    let mut sent = frames(&dir, "dpkt_http.pcap", 43);
    sent.extend(frames(&dir, "libtrace_anon-v6.pcap", 141));
    sent.extend(frames(&dir, "pathspider_icmp_ttl.pcap", 100));
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("vx0.pcap");
    let count = sent.len().to_string();
    // Incoming only: vx0's own IPv6 router solicitations and MLD reports
    // would otherwise count towards -c.
    let Some(dump) = Tcpdump::start(Some(ns), &["-c", &count, "-Q", "in", "-i", "vx0"], &file) else {
        return;
    };

    let analyzer = SocketAddr::new(ns_addr.into(), DEFAULT_PORT);
    // Batched as the exporter sends: a sendmmsg each 16 packets.
    let mut m = VxlanMirror::new(analyzer, Vni::new(42).unwrap())
        .unwrap()
        .with_batch(16);
    for (i, (link, f)) in sent.iter().enumerate() {
        let r = m.send(*link, f);
        assert!(
            matches!(r, SendOutcome::Queued | SendOutcome::Sent(_)),
            "packet {i}: {r:?} {:?}",
            m.last_error()
        );
        // Paced: nothing reads these datagrams back to slow the sender down.
        if i % 16 == 15 {
            assert_eq!(m.pending(), 0);
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    m.flush();
    dump.wait(20);

    let mut got = Vec::new();
    let mut cap = open(&file).unwrap();
    while let Some(p) = cap.next_packet() {
        got.push(p.unwrap().data.to_vec());
    }
    let want: Vec<Vec<u8>> = sent.iter().map(|(l, f)| expected_inner(*l, f)).collect();
    assert_eq!(got.len(), want.len(), "frames seen on vx0");
    let (bytes_got, bytes_want) = (
        got.iter().map(Vec::len).sum::<usize>(),
        want.iter().map(Vec::len).sum::<usize>(),
    );
    assert_eq!(bytes_got, bytes_want);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "frame {i}");
    }
    let s = m.stats();
    assert_eq!((s.packets, s.dropped, s.send_errors), (sent.len() as u64, 0, 0));
    drop(lab);
}
