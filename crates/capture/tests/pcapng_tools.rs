//! Files from [`PcapngWriter`] and [`RotatingPcapng`] read by Wireshark's
//! own tools: `tshark` must give back every packet (interface, time to the
//! nanosecond, lengths, comment, bytes) and `capinfos` the interfaces and
//! counts. Packets come from the real captures in `shared/captures/` and
//! from generated frames of the link types those lack.
//!
//! Each test prints `skipped: ...` and passes when its tool or the
//! captures are missing.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use clarion_capture::{open, PacketSource, PcapngWriter, RotatingPcapng, Rotation};
use clarion_wire::build::{FrameSpec, IpPair, Transport};
use clarion_wire::LinkType;

/// One packet as written: interface, time, bytes, original length, comment.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Written {
    iface: u32,
    ts_ns: u64,
    data: Vec<u8>,
    orig_len: u32,
    comment: Option<String>,
}

fn captures_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("skipped: no captures at {}", dir.display());
        None
    }
}

fn tool(name: &str, package: &str) -> bool {
    let ok = Command::new(name)
        .arg("-v")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipped: {name} is not installed (apt-get install {package})");
    }
    ok
}

/// Interfaces (link, name) and packets: up to `per_file` packets of each
/// real capture on its own interface, then generated SLL, SLL2 and
/// loopback frames. Every fifth packet gets a comment.
fn sample(dir: &Path, per_file: usize) -> (Vec<(LinkType, String)>, Vec<Written>) {
    let mut ifaces = Vec::new();
    let mut pkts = Vec::new();
    for name in [
        "dpkt_http.pcap",
        "libtrace_anon-v6.pcap",
        "pathspider_icmp_ttl.pcap",
        "gopacket_test301.pcapng",
    ] {
        let mut f = open(&dir.join(name)).unwrap();
        let iface = ifaces.len() as u32;
        let mut link = None;
        while let Some(p) = f.next_packet() {
            let p = p.unwrap();
            link = Some(p.link);
            pkts.push(Written {
                iface,
                ts_ns: p.ts_ns,
                data: p.data.to_vec(),
                orig_len: p.orig_len,
                comment: None,
            });
            if pkts.iter().filter(|w| w.iface == iface).count() == per_file {
                break;
            }
        }
        ifaces.push((link.unwrap(), name.to_string()));
    }
    for (k, link) in [LinkType::LinuxSll, LinkType::LinuxSll2, LinkType::Null]
        .into_iter()
        .enumerate()
    {
        let iface = ifaces.len() as u32;
        ifaces.push((link, format!("generated-{k}")));
        for i in 0..20u16 {
            let spec = FrameSpec {
                link,
                ip: if i % 2 == 0 {
                    IpPair::V4 {
                        src: [192, 0, 2, 1].into(),
                        dst: [198, 51, 100, 7].into(),
                    }
                } else {
                    IpPair::V6 {
                        src: "2001:db8::1".parse().unwrap(),
                        dst: "2001:db8::2".parse().unwrap(),
                    }
                },
                transport: Transport::Udp {
                    src_port: 1000 + i,
                    dst_port: 53,
                },
                payload_len: usize::from(i) * 7,
                ..FrameSpec::default()
            };
            let data = spec.build();
            pkts.push(Written {
                iface,
                ts_ns: 1_700_000_000_000_000_000 + u64::from(i) * 1_000_000_001,
                orig_len: data.len() as u32,
                data,
                comment: None,
            });
        }
    }
    for (i, p) in pkts.iter_mut().enumerate() {
        if i % 5 == 0 {
            p.comment = Some(format!("packet {i}: ünïcode, tabs\tand \"quotes\""));
        }
    }
    (ifaces, pkts)
}

/// What tshark decodes: one `Written` per frame, and the interface names.
fn tshark_read(path: &Path) -> (Vec<Written>, Vec<String>) {
    let out = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(path)
        .args(["-T", "json", "-x", "--no-duplicate-keys"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut pkts = Vec::new();
    let mut names = Vec::new();
    for f in v.as_array().unwrap() {
        let layers = &f["_source"]["layers"];
        let frame = &layers["frame"];
        let s = |k: &str| {
            frame[k]
                .as_str()
                .unwrap_or_else(|| panic!("no {k} in {frame}"))
                .to_string()
        };
        let (secs, nanos) = s("frame.time_epoch")
            .split_once('.')
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .unwrap();
        assert_eq!(nanos.len(), 9, "nanosecond precision");
        let comment = frame["frame.comment"]
            .as_str()
            .or_else(|| layers["frame.comment"].as_str())
            .or_else(|| {
                // tshark 4.0 puts comments in a "pkt_comment" tree.
                layers["pkt_comment"]["frame.comment"].as_str()
            })
            .map(str::to_string);
        let raw = layers["frame_raw"][0].as_str().unwrap();
        names.push(
            frame["frame.interface_id_tree"]["frame.interface_name"]
                .as_str()
                .unwrap()
                .to_string(),
        );
        pkts.push(Written {
            iface: s("frame.interface_id").parse().unwrap(),
            ts_ns: secs.parse::<u64>().unwrap() * 1_000_000_000 + nanos.parse::<u64>().unwrap(),
            data: hex(raw),
            orig_len: s("frame.len").parse().unwrap(),
            comment,
        });
    }
    (pkts, names)
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn capinfos(path: &Path) -> String {
    let out = Command::new("capinfos").args(["-M"]).arg(path).output().unwrap();
    assert!(
        out.status.success(),
        "capinfos: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn tshark_and_capinfos_read_what_the_writer_wrote() {
    let Some(dir) = captures_dir() else { return };
    if !tool("tshark", "tshark") || !tool("capinfos", "wireshark-common") {
        return;
    }
    let (ifaces, pkts) = sample(&dir, 60);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("out.pcapng");
    let mut w = PcapngWriter::new(std::io::BufWriter::new(std::fs::File::create(&path).unwrap())).unwrap();
    for (link, name) in &ifaces {
        w.add_interface(*link, 262_144, Some(name)).unwrap();
    }
    for p in &pkts {
        w.write_packet_with_comment(p.iface, p.ts_ns, &p.data, p.orig_len, p.comment.as_deref())
            .unwrap();
    }
    w.into_inner().unwrap();

    let (got, names) = tshark_read(&path);
    assert_eq!(got.len(), pkts.len());
    for (i, (g, p)) in got.iter().zip(&pkts).enumerate() {
        assert_eq!(g, p, "packet {i}");
        assert_eq!(names[i], ifaces[p.iface as usize].1);
    }

    let info = capinfos(&path);
    assert!(
        info.contains(&format!("Number of packets:   {}", pkts.len())),
        "{info}"
    );
    assert!(
        info.contains(&format!("Number of interfaces in file: {}", ifaces.len())),
        "{info}"
    );
    assert!(info.contains("Capture application: clarion "), "{info}");
    assert_eq!(
        info.matches("Time precision = nanoseconds (9)").count(),
        ifaces.len(),
        "{info}"
    );
    for (k, _) in ifaces.iter().enumerate() {
        let n = pkts.iter().filter(|p| p.iface == k as u32).count();
        let section = info.split(&format!("Interface #{k} info:")).nth(1).unwrap();
        assert!(
            section.contains(&format!("Name = {}", ifaces[k].1)),
            "interface {k}: {info}"
        );
        assert!(
            section.contains(&format!("Number of packets = {n}")),
            "interface {k}: {info}"
        );
    }
}

#[test]
fn tshark_reads_every_rotated_file() {
    let Some(dir) = captures_dir() else { return };
    if !tool("tshark", "tshark") {
        return;
    }
    let (ifaces, pkts) = sample(&dir, 40);
    let tmp = tempfile::tempdir().unwrap();
    let limits = Rotation {
        max_bytes: Some(16_384),
        max_age: None,
    };
    let mut w = RotatingPcapng::create(&tmp.path().join("rot"), limits).unwrap();
    for (link, name) in &ifaces {
        w.add_interface(*link, 0, Some(name)).unwrap();
    }
    for p in &pkts {
        w.write_packet_with_comment(p.iface, p.ts_ns, &p.data, p.orig_len, p.comment.as_deref())
            .unwrap();
    }
    let files = w.finish().unwrap();
    assert!(files.len() > 3, "{files:?}");
    let mut got = Vec::new();
    for f in &files {
        let (pk, _) = tshark_read(&f.path);
        assert_eq!(pk.len() as u64, f.packets, "{f}");
        got.extend(pk);
    }
    assert_eq!(got, pkts);
}
