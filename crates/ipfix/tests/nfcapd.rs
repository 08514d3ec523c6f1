//! IPFIX over UDP to a real collector: `nfcapd` stores what it receives,
//! `nfdump` prints it, and the flows must be those folded from a real
//! capture (counts, totals, and every flow's key, counters and times).

mod common;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use clarion_records::FlowRecord;
use clarion_sinks::Sink;
use common::{capture, flows_of, free_udp_port, require, wait_for_udp_listener, Guard};
use serde_json::Value;

/// Sends `records` to a fresh nfcapd and returns nfdump's JSON records.
fn through_nfcapd(records: &[FlowRecord], options: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let port = free_udp_port();
    let nfcapd = Command::new("nfcapd")
        .args(["-b", "127.0.0.1", "-p", &port.to_string(), "-w"])
        .arg(dir.path())
        .args(["-t", "3600", "-B", "4000000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nfcapd starts");
    let nfcapd = Guard(Some(nfcapd));
    wait_for_udp_listener(port);

    let mut sink =
        clarion_ipfix::open(&format!("ipfix+udp://127.0.0.1:{port}{options}")).expect("the sink opens");
    common::write_paced(&mut sink, records);
    sink.finish().expect("the sink finishes");
    std::thread::sleep(Duration::from_millis(500));
    nfcapd.terminate();

    let files: Vec<_> = std::fs::read_dir(dir.path())
        .expect("nfcapd's directory lists")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("nfcapd."))
        })
        .collect();
    assert_eq!(files.len(), 1, "one nfcapd file: {files:?}");
    let out = Command::new("nfdump")
        .env("TZ", "UTC")
        .arg("-r")
        .arg(&files[0])
        .args(["-o", "json"])
        .output()
        .expect("the tool runs");
    assert!(
        out.status.success(),
        "nfdump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("the tool prints UTF-8");
    if text.trim().is_empty() {
        return Vec::new();
    }
    serde_json::from_str::<Vec<Value>>(&text).unwrap_or_else(|e| panic!("nfdump's JSON: {e}\n{text}"))
}

fn num(v: &Value, name: &str) -> u64 {
    v[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no number {name} in {v}"))
}

fn text<'a>(v: &'a Value, name: &str) -> &'a str {
    v[name]
        .as_str()
        .unwrap_or_else(|| panic!("no string {name} in {v}"))
}

/// nfdump's "YYYY-MM-DDThh:mm:ss.mmm" (UTC: it runs with TZ=UTC) as
/// milliseconds since the epoch.
fn nfdump_ms(s: &str) -> u64 {
    let n: Vec<i64> = s
        .split(['-', 'T', ':', '.'])
        .map(|x| x.parse().expect("a number in the time"))
        .collect();
    let [y, m, d, hh, mm, ss, ms] = n[..] else {
        panic!("a time {s}")
    };
    // Days from 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (((days * 24 + hh) * 60 + mm) * 60 + ss) as u64 * 1000 + ms as u64
}

/// nfdump's flags, "CEUAPRSF" with '.' for a clear bit, as the flag byte.
fn nfdump_flags(s: &str) -> u8 {
    assert_eq!(s.len(), 8, "{s}");
    s.bytes().fold(0, |acc, c| acc << 1 | u8::from(c != b'.'))
}

/// Every flow nfdump printed is one sent, with the same key, VLAN,
/// counters, times (to the millisecond) and TCP flags; and none is missing.
fn same_flows(sent: &[FlowRecord], got: &[Value]) {
    assert_eq!(got.len(), sent.len(), "flow count");
    let packets: u64 = sent.iter().map(|f| f.packets).sum();
    let bytes: u64 = sent.iter().map(|f| f.bytes).sum();
    assert_eq!(
        got.iter().map(|v| num(v, "in_packets")).sum::<u64>(),
        packets,
        "packets"
    );
    assert_eq!(
        got.iter().map(|v| num(v, "in_bytes")).sum::<u64>(),
        bytes,
        "bytes"
    );

    let mut want: HashMap<_, &FlowRecord> = HashMap::new();
    for f in sent {
        let k = (
            f.src_addr().to_string(),
            f.dst_addr().to_string(),
            u64::from(f.key.src_port),
            u64::from(f.key.dst_port),
            u64::from(f.key.proto),
            u64::from(f.vlan().unwrap_or(0)),
        );
        assert!(want.insert(k, f).is_none(), "keys are unique");
    }
    for v in got {
        let (src, dst) = if v.get("src4_addr").is_some() {
            (text(v, "src4_addr"), text(v, "dst4_addr"))
        } else {
            (text(v, "src6_addr"), text(v, "dst6_addr"))
        };
        // ICMP flows show type and code (0 here) instead of ports.
        let port = |name| v.get(name).map_or(0, |_| num(v, name));
        let k = (
            src.to_string(),
            dst.to_string(),
            port("src_port"),
            port("dst_port"),
            num(v, "proto"),
            num(v, "src_vlan"),
        );
        let f = want
            .remove(&k)
            .unwrap_or_else(|| panic!("nfdump has a flow not sent, or twice: {v}"));
        assert_eq!(num(v, "in_packets"), f.packets, "{v}");
        assert_eq!(num(v, "in_bytes"), f.bytes, "{v}");
        assert_eq!(nfdump_ms(text(v, "first")), f.first_ns / 1_000_000, "{v}");
        assert_eq!(nfdump_ms(text(v, "last")), f.last_ns / 1_000_000, "{v}");
        if f.key.proto == 6 {
            assert_eq!(nfdump_flags(text(v, "tcp_flags")), f.tcp_flags, "{v}");
        }
    }
}

#[test]
fn nfcapd_stores_the_flows_of_a_real_capture() {
    if require("nfcapd", "nfdump").is_none() || require("nfdump", "nfdump").is_none() {
        return;
    }
    assert_eq!(nfdump_ms("2012-11-23T17:00:39.425"), 1_353_690_039_425);
    for name in ["pathspider_real.pcap", "libtrace_anon-v6.pcap"] {
        let Some(path) = capture(name) else { continue };
        let flows = flows_of(&path);
        assert!(!flows.is_empty(), "{name}: no flow");
        let got = through_nfcapd(&flows, "");
        eprintln!(
            "{name}: {} flows, first as nfdump prints it: {}",
            flows.len(),
            got[0]
        );
        same_flows(&flows, &got);
    }
}

/// Generated flows: both families, VLANs, ports or none, long counters,
/// in messages of every size from small to the 65535 maximum.
#[test]
fn nfcapd_stores_generated_flows() {
    if require("nfcapd", "nfdump").is_none() || require("nfdump", "nfdump").is_none() {
        return;
    }
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        // xorshift64*: reproducible, and no dependency.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let mut flows = Vec::new();
    for i in 0..500u64 {
        let r = next();
        let (src, dst): (std::net::IpAddr, std::net::IpAddr) = if i % 2 == 0 {
            (
                (r as u32).to_be_bytes().into(),
                ((r >> 32) as u32).to_be_bytes().into(),
            )
        } else {
            let a = u128::from(r) << 64 | u128::from(next());
            (a.to_be_bytes().into(), (!a).to_be_bytes().into())
        };
        let proto = [6u8, 17, 1, 47][(r % 4) as usize];
        let ports = matches!(proto, 6 | 17).then_some(((r >> 8) as u16 | 1, (r >> 24) as u16));
        let vlan = (i % 3 == 0).then_some(1 + (r >> 40) as u16 % 4094);
        let key = clarion_wire::FlowKey::new(src, dst, proto, ports, vlan);
        let first = 1_600_000_000_000_000_000 + next() % 100_000_000_000_000_000;
        let mut f = FlowRecord::of_packet(key, first, 40 + (r % 1400) as u32, 0);
        f.last_ns = first + next() % 3_600_000_000_000;
        f.packets = 1 + next() % (1 << 40);
        f.bytes = f.packets * 40 + next() % (1 << 20);
        f.tcp_flags = if proto == 6 { (r >> 16) as u8 } else { 0 };
        flows.push(f);
    }
    for options in [
        "",
        "?max_message_size=300",
        "?max_message_size=65535&observation_domain=9",
    ] {
        let got = through_nfcapd(&flows, options);
        same_flows(&flows, &got);
    }
}
