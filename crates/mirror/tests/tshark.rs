//! tshark decodes mirrored datagrams as VXLAN, and the inner frames are
//! the frames of real captures byte for byte (raw IP ones behind the
//! documented synthetic Ethernet header).
//!
//! The datagrams go to UDP sockets on 127.0.0.1 and ::1 that read them
//! (which paces the sender, so none is lost); tcpdump captures them on
//! `lo` with their IP and UDP headers; tshark decodes that file.
//! Skips, saying why, without tcpdump, tshark, the captures or root.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use clarion_mirror::{SendOutcome, Vni, VxlanMirror};
use clarion_wire::LinkType;
use common::{captures_dir, expected_inner, frames, require, Tcpdump};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn tshark_decodes_vxlan_and_the_inner_frames_are_the_originals() {
    let Some(dir) = captures_dir() else { return };
    if !require("tcpdump", "tcpdump") || !require("tshark", "tshark") {
        return;
    }
    let rx4 = UdpSocket::bind("127.0.0.1:0").unwrap();
    let rx6 = match UdpSocket::bind("[::1]:0") {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("no IPv6 on lo ({e}): testing IPv4 only");
            None
        }
    };
    let ports: Vec<u16> = [Some(&rx4), rx6.as_ref()]
        .into_iter()
        .flatten()
        .map(|s| s.local_addr().unwrap().port())
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("mirror.pcap");
    let filter = ports
        .iter()
        .map(|p| format!("udp dst port {p}"))
        .collect::<Vec<_>>()
        .join(" or ");
    // (frames, receiver): Ethernet v4 and v6 traffic and raw IP over IPv4;
    // Ethernet over IPv6 when there is IPv6.
    let mut plan = vec![
        (frames(&dir, "dpkt_http.pcap", 43), &rx4),
        (frames(&dir, "libtrace_anon-v6.pcap", 141), &rx4),
        (frames(&dir, "pathspider_icmp_ttl.pcap", 200), &rx4),
    ];
    if let Some(rx6) = &rx6 {
        plan.push((frames(&dir, "libtrace_anon-v4.pcap", 252), rx6));
    }
    let count = plan.iter().map(|p| p.0.len()).sum::<usize>().to_string();
    let Some(dump) = Tcpdump::start(None, &["-c", &count, "-i", "lo", &filter], &file) else {
        return;
    };

    let mut sent = Vec::new();
    let vni = Vni::new(0x00ab_cdef).unwrap();
    for (fs, rx) in plan {
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // Batched as the exporter sends; each batch read back (paced).
        let mut m = VxlanMirror::new(rx.local_addr().unwrap(), vni)
            .unwrap()
            .with_batch(16);
        let mut buf = vec![0u8; 65_536];
        for chunk in fs.chunks(16) {
            for (link, f) in chunk {
                let r = m.send(*link, f);
                assert!(matches!(r, SendOutcome::Queued | SendOutcome::Sent(_)), "{r:?}");
                sent.push((*link, f.clone()));
            }
            m.flush();
            for _ in chunk {
                rx.recv_from(&mut buf).unwrap();
            }
        }
        assert_eq!(m.stats().dropped + m.stats().send_errors, 0);
        assert_eq!(m.stats().packets, fs.len() as u64);
    }
    dump.wait(20);

    let mut cmd = std::process::Command::new("tshark");
    cmd.args(["-n", "-r"]).arg(&file);
    for p in &ports {
        cmd.args(["-d", &format!("udp.port=={p},vxlan")]);
    }
    let out = cmd
        .args(["-T", "json", "-x", "--no-duplicate-keys"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pkts = v.as_array().unwrap();
    assert_eq!(pkts.len(), sent.len(), "every datagram captured once");
    for (i, (p, (link, f))) in pkts.iter().zip(&sent).enumerate() {
        let l = &p["_source"]["layers"];
        assert_eq!(
            l["vxlan"]["vxlan.vni"].as_str(),
            Some("11259375"),
            "packet {i}: {}",
            l["vxlan"]
        );
        let flags = &l["vxlan"]["vxlan.flags_tree"];
        assert_eq!(
            flags["vxlan.flag_i"].as_str(),
            Some("1"),
            "packet {i}: {}",
            l["vxlan"]
        );
        assert_eq!(
            flags["vxlan.flags_reserved"].as_str(),
            Some("0x0000"),
            "packet {i}: {}",
            l["vxlan"]
        );
        assert_eq!(
            l["vxlan"]["vxlan.reserved8"].as_str(),
            Some("0"),
            "packet {i}: {}",
            l["vxlan"]
        );
        let frame = hex(l["frame_raw"][0].as_str().unwrap());
        let at = l["vxlan_raw"][1].as_u64().unwrap() as usize;
        let inner = &frame[at + 8..];
        assert_eq!(inner, &expected_inner(*link, f)[..], "packet {i} ({link:?})");
        // tshark decoded the inner Ethernet header too (the second eth layer).
        let eth = &l["eth"][1];
        if *link == LinkType::RawIp {
            assert_eq!(
                eth["eth.src"].as_str(),
                Some("02:00:00:00:00:01"),
                "packet {i}: {eth}"
            );
            assert_eq!(
                eth["eth.dst"].as_str(),
                Some("02:00:00:00:00:02"),
                "packet {i}: {eth}"
            );
        }
        // An EtherType, or the length of an 802.3 frame (STP in the captures).
        let kind = eth["eth.type"].as_str().or(eth["eth.len"].as_str());
        assert!(kind.is_some(), "packet {i}: {eth}");
    }
}
