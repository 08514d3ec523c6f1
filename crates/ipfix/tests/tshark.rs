//! IPFIX over UDP as Wireshark's dissector reads it: the datagrams the
//! sink sends to a socket of the test are wrapped in Ethernet/IPv4/UDP
//! frames into a pcap (deterministic, no capture privileges), and
//! `tshark` must decode every record of a real capture's flows without a
//! malformed packet or an expert warning, with the same addresses, counts
//! and bytes.

mod common;

use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

use clarion_capture::{PcapWriter, TsResolution};
use clarion_records::FlowRecord;
use clarion_sinks::Sink;
use clarion_wire::build::{FrameSpec, IpPair, Transport};
use clarion_wire::LinkType;
use common::{capture, flows_of, require};

/// The datagrams the sink sends for `records`, as a collector receives them.
fn datagrams(records: &[FlowRecord], options: &str) -> (u16, Vec<Vec<u8>>) {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("a loopback UDP socket");
    let port = socket.local_addr().expect("a bound socket's address").port();
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("a read timeout");
    // Received on a thread while the sink sends, so no datagram is lost.
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = socket.recv(&mut buf) {
            got.push(buf[..n].to_vec());
        }
        got
    });
    let mut sink =
        clarion_ipfix::open(&format!("ipfix+udp://127.0.0.1:{port}{options}")).expect("the sink opens");
    common::write_paced(&mut sink, records);
    sink.finish().expect("the sink finishes");
    (port, receiver.join().expect("the receiver thread"))
}

/// A pcap of the datagrams in Ethernet/IPv4/UDP frames to `port`.
fn pcap_of(datagrams: &[Vec<u8>], port: u16, path: &std::path::Path) {
    let file = std::fs::File::create(path).expect("the pcap file");
    let mut w = PcapWriter::new(file, LinkType::Ethernet, TsResolution::Nano).expect("the pcap header");
    for (i, d) in datagrams.iter().enumerate() {
        let spec = FrameSpec {
            ip: IpPair::V4 {
                src: "127.0.0.1".parse().expect("an address"),
                dst: "127.0.0.1".parse().expect("an address"),
            },
            transport: Transport::Udp {
                src_port: 40000,
                dst_port: port,
            },
            payload_len: d.len(),
            ..FrameSpec::default()
        };
        let mut frame = spec.build();
        let at = frame.len() - d.len();
        frame[at..].copy_from_slice(d);
        // No UDP checksum (allowed over IPv4): the builder's covered zeros.
        frame[at - 2..at].copy_from_slice(&[0, 0]);
        w.write_packet(
            1_700_000_000_000_000_000 + i as u64 * 1000,
            &frame,
            frame.len() as u32,
        )
        .expect("the pcap writes");
    }
    w.flush().expect("the pcap writes");
}

fn tshark(args: &[&str]) -> String {
    let out = Command::new("tshark")
        .args(args)
        .output()
        .expect("the tool starts");
    assert!(
        out.status.success(),
        "tshark {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the tool prints UTF-8")
}

/// All values of a field over all packets (tshark joins a packet's with ',').
fn values(fields_out: &str, column: usize) -> Vec<String> {
    fields_out
        .lines()
        .filter_map(|l| l.split('\t').nth(column))
        .flat_map(|c| c.split(','))
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .collect()
}

fn counted<T: Ord>(items: impl IntoIterator<Item = T>) -> BTreeMap<T, usize> {
    let mut m = BTreeMap::new();
    for i in items {
        *m.entry(i).or_insert(0) += 1;
    }
    m
}

fn check(name: &str, flows: &[FlowRecord], options: &str) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (port, sent) = datagrams(flows, options);
    let pcap = dir.path().join("ipfix.pcap");
    pcap_of(&sent, port, &pcap);
    let pcap = pcap.to_str().expect("a UTF-8 path");
    let decode_as = format!("udp.port=={port},cflow");

    let verbose = tshark(&["-r", pcap, "-d", &decode_as, "-V"]);
    for bad in [
        "Malformed",
        "Expert Info (Error",
        "Expert Info (Warning",
        "Unknown Field Type",
    ] {
        let line = verbose.lines().find(|l| l.contains(bad));
        assert!(line.is_none(), "{name}: tshark says {line:?}");
    }
    assert!(
        verbose.contains("communityId") || verbose.contains("32473"),
        "{name}: the enterprise element"
    );

    let fields = tshark(&[
        "-r",
        pcap,
        "-d",
        &decode_as,
        "-T",
        "fields",
        "-e",
        "cflow.srcaddr",
        "-e",
        "cflow.srcaddrv6",
        "-e",
        "cflow.packets",
        "-e",
        "cflow.octets",
        "-e",
        "cflow.flowset_id",
    ]);
    let packets: Vec<u64> = values(&fields, 2)
        .iter()
        .map(|v| v.parse().expect("a number from tshark"))
        .collect();
    let octets: Vec<u64> = values(&fields, 3)
        .iter()
        .map(|v| v.parse().expect("a number from tshark"))
        .collect();
    assert_eq!(packets.len(), flows.len(), "{name}: records tshark decoded");
    assert_eq!(octets.len(), flows.len(), "{name}: records with bytes");
    assert_eq!(
        packets.iter().sum::<u64>(),
        flows.iter().map(|f| f.packets).sum::<u64>(),
        "{name}"
    );
    assert_eq!(
        octets.iter().sum::<u64>(),
        flows.iter().map(|f| f.bytes).sum::<u64>(),
        "{name}"
    );
    let src = |v6: bool| {
        counted(
            flows
                .iter()
                .filter(|f| f.key.is_ipv6() == v6)
                .map(|f| f.src_addr().to_string()),
        )
    };
    assert_eq!(counted(values(&fields, 0)), src(false), "{name}: IPv4 sources");
    assert_eq!(counted(values(&fields, 1)), src(true), "{name}: IPv6 sources");
    let template_sets = values(&fields, 4).iter().filter(|v| *v == "2").count();
    eprintln!(
        "{name}: {} records in {} datagrams, {template_sets} template sets",
        flows.len(),
        sent.len()
    );
    assert!(
        template_sets > (sent.len() - 1) / 21,
        "{name}: templates refreshed every 20 messages"
    );
}

#[test]
fn tshark_decodes_every_record_without_warnings() {
    if require("tshark", "tshark").is_none() {
        return;
    }
    for name in ["pathspider_real.pcap", "libtrace_anon-v6.pcap", "dpkt_http.pcap"] {
        let Some(path) = capture(name) else { continue };
        let flows = flows_of(&path);
        check(name, &flows, "");
    }
    // Both families in one stream, in small messages.
    let (Some(a), Some(b)) = (capture("libtrace_anon-v4.pcap"), capture("libtrace_anon-v6.pcap")) else {
        return;
    };
    let mut mixed = flows_of(&a);
    mixed.extend(flows_of(&b));
    mixed.sort_by_key(|f| f.first_ns);
    check("libtrace v4+v6", &mixed, "?max_message_size=300");
}
