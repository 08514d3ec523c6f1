//! Records back to frames and to JSON.
//!
//! - Frames built by `clarion_wire::build` parse to a record whose frame
//!   parses back to the same key, size, TTL, ECN, fragment flag and TCP
//!   fields (generated traffic; the real captures are in captures.rs).
//! - tshark, the real tool, reads a pcap of such frames and finds the
//!   fields the records hold.
//! - The JSON object has the documented names and values.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::Command;

use clarion_capture::{PcapWriter, TsResolution};
use clarion_headers::{HeaderRecord, JsonRecord};
use clarion_wire::build::{Fragment, FrameSpec, IpPair, TcpSpec, Transport, Vlan};
use clarion_wire::{parse_frame, LinkType, PacketRecord};
use common::{arb_record, capture_files, captures_dir, load};
use proptest::prelude::*;
use serde_json::json;

fn arb_spec() -> impl Strategy<Value = FrameSpec> {
    let ip = prop_oneof![
        any::<([u8; 4], [u8; 4])>().prop_map(|(s, d)| IpPair::V4 {
            src: Ipv4Addr::from(s),
            dst: Ipv4Addr::from(d)
        }),
        any::<([u8; 16], [u8; 16])>().prop_map(|(s, d)| IpPair::V6 {
            src: Ipv6Addr::from(s),
            dst: Ipv6Addr::from(d)
        }),
    ];
    let tcp = (
        any::<(u16, u16, u32, u32, u8, u16)>(),
        prop::option::of(0u8..15),
        prop::option::of(any::<u16>()),
    )
        .prop_map(|((src_port, dst_port, seq, ack, flags, window), wscale, mss)| {
            Transport::Tcp(TcpSpec {
                src_port,
                dst_port,
                seq,
                ack,
                flags,
                window,
                wscale,
                mss,
            })
        });
    let transport = prop_oneof![
        tcp,
        any::<(u16, u16)>().prop_map(|(src_port, dst_port)| Transport::Udp { src_port, dst_port }),
        Just(Transport::Icmp { msg_type: 0, code: 0 }),
        Just(Transport::Icmpv6 { msg_type: 0, code: 0 }),
        prop::sample::select(vec![47u8, 50, 132]).prop_map(Transport::Other),
    ];
    (
        ip,
        transport,
        prop::option::of(0u16..4096),
        0usize..3000,
        any::<u8>(),
        0u8..4,
        prop::option::of(1u16..100),
    )
        .prop_map(|(ip, transport, vlan, payload_len, ttl, ecn, frag)| FrameSpec {
            link: LinkType::Ethernet,
            vlans: vlan.map(Vlan::dot1q).into_iter().collect(),
            ip,
            transport,
            payload_len,
            ttl,
            ecn,
            fragment: frag.map(|f| Fragment {
                offset: f * 8,
                more: false,
            }),
            ..FrameSpec::default()
        })
}

fn parsed_fields(p: &PacketRecord) -> impl PartialEq + std::fmt::Debug {
    (p.key, p.size, p.ttl, p.ecn, p.is_later_fragment, p.tcp)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn frames_parse_back_to_the_record(spec in arb_spec(), ts in any::<u64>()) {
        let frame = spec.build();
        let p = parse_frame(LinkType::Ethernet, &frame, ts, frame.len() as u32).unwrap();
        prop_assert_eq!(p, spec.record(ts));
        let r = HeaderRecord::from_packet(&p, 2, 1);
        let back = parse_frame(LinkType::Ethernet, &r.to_frame(), ts, r.frame_len()).unwrap();
        prop_assert_eq!(parsed_fields(&back), parsed_fields(&p));
        // The frame is the headers: as long as the original without payload
        // (IPv4 options and extension headers are not kept, and specs here have none).
        prop_assert_eq!(r.to_frame().len(), frame.len() - (p.volume as usize));
        prop_assert_eq!(r.frame_len() as usize, frame.len());
        prop_assert_eq!(r.header_frame_len() as usize, frame.len() - p.volume as usize);
    }

    #[test]
    fn json_names_every_field(r in arb_record()) {
        let v = serde_json::to_value(r).unwrap();
        let t = r.tcp;
        let want = json!({
            "ts_ns": r.ts_ns,
            "interface": r.interface,
            "sample_ratio": r.sample_ratio,
            "family": if matches!(r.src, IpAddr::V6(_)) { 6 } else { 4 },
            "src_ip": r.src.to_string(),
            "dst_ip": r.dst.to_string(),
            "src_port": r.ports.map(|p| p.0),
            "dst_port": r.ports.map(|p| p.1),
            "proto": r.proto,
            "vlan": r.vlan,
            "size": r.size,
            "volume": r.volume,
            "ttl": r.ttl,
            "ecn": r.ecn,
            "later_fragment": r.later_fragment,
            "captured_len": r.captured_len,
            "wire_len": r.wire_len,
            "tcp_seq": t.map(|t| t.seq),
            "tcp_ack": t.map(|t| t.ack),
            "tcp_window": t.map(|t| t.window),
            "tcp_flags": t.map(|t| t.flags),
            "tcp_wscale": t.and_then(|t| t.wscale),
            "tcp_mss": t.and_then(|t| t.mss),
        });
        prop_assert_eq!(&v, &want);
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        let names = ["ts_ns", "interface", "sample_ratio", "family", "src_ip", "dst_ip", "src_port", "dst_port", "proto", "vlan", "size", "volume", "ttl", "ecn", "later_fragment", "captured_len", "wire_len", "tcp_seq", "tcp_ack", "tcp_window", "tcp_flags", "tcp_wscale", "tcp_mss"];
        prop_assert_eq!(keys, names.iter().collect::<Vec<_>>(), "order is stable");
        let back: HeaderRecord = serde_json::from_value(v).unwrap();
        prop_assert_eq!(back, r);
    }
}

#[test]
fn json_refuses_inconsistent_objects() {
    let r = HeaderRecord::from_packet(&FrameSpec::default().record(5), 0, 1);
    let mut v = serde_json::to_value(JsonRecord::from(r)).unwrap();
    v["src_port"] = serde_json::Value::Null;
    assert!(serde_json::from_value::<HeaderRecord>(v.clone()).is_err());
    v["src_port"] = json!(1);
    v["family"] = json!(6);
    assert!(serde_json::from_value::<HeaderRecord>(v.clone()).is_err());
    v["family"] = json!(4);
    v["surprise"] = json!(1);
    assert!(serde_json::from_value::<HeaderRecord>(v).is_err());
}

/// tshark reads a pcap of the frames of three real Ethernet captures (IPv4
/// TCP with ECN, IPv6, HTTP) and finds each record's fields.
#[test]
fn tshark_reads_the_frames() {
    let Some(dir) = captures_dir() else { return };
    if Command::new("tshark").arg("-v").output().is_err() {
        eprintln!("skipped: tshark is not installed (apt-get install tshark)");
        return;
    }
    let mut recs = Vec::new();
    for path in capture_files(&dir) {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if [
            "pathspider_tcp_ecn.pcap",
            "libtrace_anon-v6.pcap",
            "dpkt_http.pcap",
        ]
        .contains(&name.as_str())
        {
            recs.extend(
                load(&path)
                    .iter()
                    .filter(|(l, _)| *l == LinkType::Ethernet)
                    .map(|(_, p)| HeaderRecord::from_packet(p, 0, 1)),
            );
        }
    }
    assert!(recs.len() > 600);
    let file = std::env::temp_dir().join(format!("clarion-headers-tshark-{}.pcap", std::process::id()));
    let mut w = PcapWriter::new(
        std::fs::File::create(&file).unwrap(),
        LinkType::Ethernet,
        TsResolution::Nano,
    )
    .unwrap();
    for r in &recs {
        w.write_packet(r.ts_ns, &r.to_frame(), r.frame_len()).unwrap();
    }
    w.flush().unwrap();
    drop(w);
    let fields = [
        "frame.len",
        "ip.src",
        "ip.dst",
        "ipv6.src",
        "ipv6.dst",
        "ip.len",
        "ipv6.plen",
        "ip.ttl",
        "ipv6.hlim",
        "ip.dsfield.ecn",
        "ipv6.tclass.ecn",
        "tcp.srcport",
        "tcp.dstport",
        "udp.srcport",
        "udp.dstport",
        "tcp.seq_raw",
        "tcp.ack_raw",
        "tcp.window_size_value",
        "tcp.flags",
        "frame.time_epoch",
    ];
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"])
        .arg(&file)
        .args(["-T", "fields", "-E", "separator=|", "-E", "occurrence=f"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().unwrap();
    std::fs::remove_file(&file).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), recs.len());
    for (line, r) in lines.iter().zip(&recs) {
        let f: Vec<&str> = line.split('|').collect();
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let v6 = r.src.is_ipv6();
        let (src, dst) = if v6 { (f[3], f[4]) } else { (f[1], f[2]) };
        let ip_size = if v6 {
            f[6].parse::<u32>().unwrap() + 40
        } else {
            f[5].parse().unwrap()
        };
        let ttl = if v6 { f[8] } else { f[7] };
        let ecn = if v6 { f[10] } else { f[9] };
        let ports = opt(f[11]).or(opt(f[13])).map(|s| {
            (
                s.parse::<u16>().unwrap(),
                opt(f[12]).or(opt(f[14])).unwrap().parse::<u16>().unwrap(),
            )
        });
        let got = (
            f[0].parse::<u32>().unwrap(),
            src.parse::<IpAddr>().unwrap(),
            dst.parse::<IpAddr>().unwrap(),
            ip_size,
            ttl.parse::<u8>().unwrap(),
            ecn.parse::<u8>().unwrap(),
            ports,
        );
        let want = (r.frame_len(), r.src, r.dst, r.size, r.ttl, r.ecn, r.ports);
        assert_eq!(got, want, "{line}");
        if let Some(t) = r.tcp {
            let flags = u8::from_str_radix(f[18].trim_start_matches("0x"), 16).unwrap();
            let got = (
                f[15].parse::<u32>().unwrap(),
                f[16].parse::<u32>().unwrap(),
                f[17].parse::<u16>().unwrap(),
                flags,
            );
            assert_eq!(got, (t.seq, t.ack, t.window, t.flags), "{line}");
        }
        // Nanosecond timestamps survive (tshark prints seconds.nanoseconds).
        let (s, ns) = f[19].split_once('.').unwrap();
        assert_eq!(
            s.parse::<u64>().unwrap() * 1_000_000_000 + ns.parse::<u64>().unwrap(),
            r.ts_ns,
            "{line}"
        );
    }
}
