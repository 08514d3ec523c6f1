//! Golden round trip on every shared capture, with the compression it
//! achieves; the headers back as frames that parse to the same fields.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use clarion_headers::{Decoder, EncoderConfig, HeaderRecord};
use clarion_wire::{parse_frame, LinkType};
use common::{capture_files, captures_dir, decode_all, encode_all, load};

/// Every capture: parse, make records (one interface), encode at the
/// default MTU, decode: equal exactly. Prints the compression table.
#[test]
fn every_capture_round_trips_and_compresses() {
    let Some(dir) = captures_dir() else { return };
    eprintln!(
        "{:<26} {:>7} {:>6} {:>9} {:>8} {:>9} {:>9} {:>9} {:>10}",
        "capture", "packets", "dgrams", "rec/dgram", "B/rec", "hdr B", "out B", "hdr:out", "pkt:out"
    );
    for path in capture_files(&dir) {
        let recs: Vec<HeaderRecord> = load(&path)
            .iter()
            .map(|(_, p)| HeaderRecord::from_packet(p, 0, 1))
            .collect();
        assert!(!recs.is_empty(), "{}", path.display());
        let config = EncoderConfig {
            worker: 3,
            mtu: clarion_headers::DEFAULT_MTU,
            ..EncoderConfig::default()
        };
        let (dgrams, enc) = encode_all(&recs, config.clone());
        assert_eq!(decode_all(&dgrams), recs, "{}", path.display());
        let s = enc.stats();
        // Independent of the encoder's own counts: the datagrams' sizes and
        // the headers' bytes as Ethernet frames from the parsed lengths.
        let out: u64 = dgrams.iter().map(|d| d.len() as u64).sum();
        assert_eq!(s.bytes_out, out);
        let hdr: u64 = recs
            .iter()
            .map(|r| 14 + 4 * u64::from(r.vlan.is_some()) + u64::from(r.size.saturating_sub(r.volume)))
            .sum();
        assert_eq!(s.header_bytes, hdr);
        let pkt: u64 = recs
            .iter()
            .map(|r| 14 + 4 * u64::from(r.vlan.is_some()) + u64::from(r.size))
            .sum();
        assert_eq!(s.packet_bytes, pkt);
        let per_dgram = recs.len() as f64 / dgrams.len() as f64;
        // Less each datagram's header (its fixed part and the name).
        let header = (clarion_headers::HEADER_LEN + config.exporter.as_bytes().len()) as f64;
        let per_rec = (out as f64 - header * dgrams.len() as f64) / recs.len() as f64;
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        eprintln!(
            "{:<26} {:>7} {:>6} {:>9.1} {:>8.2} {:>9} {:>9} {:>8.2}:1 {:>8.1}:1",
            name,
            recs.len(),
            dgrams.len(),
            per_dgram,
            per_rec,
            hdr,
            out,
            hdr as f64 / out as f64,
            pkt as f64 / out as f64
        );
        // Trident's 22-49-byte records give 29-66 packets a 1500-byte
        // datagram; small captures end with a part-filled datagram.
        if dgrams.len() >= 4 {
            assert!(per_dgram >= 29.0, "{name}: {per_dgram:.1} records per datagram");
        }
        assert!(hdr as f64 / out as f64 >= 2.0, "{name}: bytes {hdr} -> {out}");
    }
}

/// All captures at once, interleaved by time, one interface each: the
/// per-interface state keeps them apart and the round trip is exact.
#[test]
fn captures_interleaved_on_several_interfaces_round_trip() {
    let Some(dir) = captures_dir() else { return };
    let mut recs: Vec<HeaderRecord> = Vec::new();
    for (i, path) in capture_files(&dir).iter().enumerate() {
        recs.extend(
            load(path)
                .iter()
                .map(|(_, p)| HeaderRecord::from_packet(p, i as u16 * 1000, 1 + i as u32)),
        );
    }
    recs.sort_by_key(|r| r.ts_ns);
    for mtu in [clarion_headers::MIN_MTU, 1400, 9000] {
        let (dgrams, _) = encode_all(
            &recs,
            EncoderConfig {
                worker: 9,
                mtu,
                ..EncoderConfig::default()
            },
        );
        assert_eq!(decode_all(&dgrams), recs, "mtu {mtu}");
    }
}

/// Every Ethernet packet of every capture: its record's frame parses back
/// to the same key, size, TTL, ECN, fragment flag and TCP fields.
#[test]
fn frames_of_real_packets_parse_back() {
    let Some(dir) = captures_dir() else { return };
    let mut n = 0;
    for path in capture_files(&dir) {
        for (link, p) in load(&path) {
            if link != LinkType::Ethernet {
                continue;
            }
            let r = HeaderRecord::from_packet(&p, 0, 1);
            let frame = r.to_frame();
            let back = parse_frame(LinkType::Ethernet, &frame, p.ts_ns, r.frame_len()).unwrap();
            let want = (p.key, p.size, p.ttl, p.ecn, p.is_later_fragment, p.tcp);
            let got = (
                back.key,
                back.size,
                back.ttl,
                back.ecn,
                back.is_later_fragment,
                back.tcp,
            );
            assert_eq!(got, want, "{}: {p:?}", path.display());
            assert_eq!(frame.len() as u32, back.captured_len);
            n += 1;
        }
    }
    assert!(n > 60_000, "{n} frames");
}

/// The decoder keeps going after a damaged datagram.
#[test]
fn a_bad_datagram_does_not_hurt_the_next() {
    let Some(dir) = captures_dir() else { return };
    let recs: Vec<HeaderRecord> = load(&dir.join("pathspider_tcp_ecn.pcap"))
        .iter()
        .map(|(_, p)| HeaderRecord::from_packet(p, 0, 1))
        .collect();
    let (dgrams, _) = encode_all(&recs, EncoderConfig::default());
    let mut dec = Decoder::new();
    let mut got = Vec::new();
    for d in &dgrams {
        let mut bad = d.clone();
        let mid = bad.len() / 2;
        bad.truncate(mid);
        assert!(dec.decode(&bad).is_err());
        got.extend(dec.decode(d).unwrap().records);
    }
    assert_eq!(got, recs);
    assert_eq!(dec.errors(), dgrams.len() as u64);
}
