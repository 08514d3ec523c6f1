//! Every real capture in `shared/captures/`: packet counts, and every
//! packet through `clarion_wire::parse_frame` without a panic.
//!
//! The captures live outside the repository; when they are absent the
//! test says so and passes.

use std::path::{Path, PathBuf};

use clarion_capture::{CaptureFile, PacketSource, SliceReader, StreamReader};
use clarion_wire::parse_frame;

const EXPECTED: [(&str, u64); 7] = [
    ("pathspider_real.pcap", 62_781),
    ("pathspider_icmp_ttl.pcap", 9_009),
    ("pathspider_tcp_ecn.pcap", 479),
    ("gopacket_test301.pcapng", 276),
    ("libtrace_anon-v4.pcap", 252),
    ("libtrace_anon-v6.pcap", 141),
    ("dpkt_http.pcap", 43),
];

fn captures_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures");
    if dir.is_dir() {
        Some(dir)
    } else {
        println!("skipping: no captures at {}", dir.display());
        None
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    packets: u64,
    ip: u64,
    not_ip: u64,
    malformed: u64,
    errors: u64,
}

fn tally(src: &mut dyn PacketSource) -> Tally {
    let mut t = Tally::default();
    let mut last_index = None;
    while let Some(r) = src.next_packet() {
        let p = match r {
            Ok(p) => p,
            Err(e) => {
                println!("  error: {e}");
                t.errors += 1;
                continue;
            }
        };
        assert_eq!(
            p.index,
            last_index.map_or(0, |i| i + 1),
            "indexes are consecutive"
        );
        last_index = Some(p.index);
        t.packets += 1;
        match parse_frame(p.link, p.data, p.ts_ns, p.orig_len) {
            Ok(rec) => {
                t.ip += 1;
                assert!(rec.size >= rec.volume);
                assert_eq!(rec.captured_len as usize, p.data.len());
            }
            Err(e) if e.is_not_ip() => t.not_ip += 1,
            Err(_) => t.malformed += 1,
        }
    }
    t
}

#[test]
fn real_captures_count_and_parse() {
    let Some(dir) = captures_dir() else { return };
    for (name, want) in EXPECTED {
        let path = dir.join(name);
        if !path.exists() {
            println!("skipping {name}: absent");
            continue;
        }
        let mut file = CaptureFile::open(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let t = tally(&mut file);
        println!(
            "{name}: {} packets, {} IP, {} not IP, {} malformed",
            t.packets, t.ip, t.not_ip, t.malformed
        );
        assert_eq!(t.packets, want, "{name}");
        assert_eq!(t.errors, 0, "{name}");
        let s = file.stats();
        assert_eq!(s.packets, want);
        assert_eq!(Some(s.bytes_read), s.bytes_total, "{name}: read to the end");
        // The streaming path sees exactly the same.
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let streamed = tally(&mut StreamReader::new(&bytes[..]).unwrap_or_else(|e| panic!("{name}: {e}")));
        assert_eq!(streamed, t, "{name}: stream");
    }
}

#[test]
fn real_captures_cut_short_report_truncation() {
    let Some(dir) = captures_dir() else { return };
    let path = dir.join("dpkt_http.pcap");
    let Ok(bytes) = std::fs::read(&path) else { return };
    let cut = &bytes[..bytes.len() - 100];
    let mut r = SliceReader::new(cut).unwrap_or_else(|e| panic!("{e}"));
    let mut ok = 0;
    let mut last_err = None;
    while let Some(p) = r.next_packet() {
        match p {
            Ok(_) => ok += 1,
            Err(e) => last_err = Some(e.to_string()),
        }
    }
    let err = last_err.unwrap_or_default();
    println!("{err}");
    assert!(ok < 43);
    assert!(
        err.starts_with(&format!("capture truncated after packet {ok} at byte offset ")),
        "{err}"
    );
}
