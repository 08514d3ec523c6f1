//! The GPV file format: lossless round trips, and damaged or truncated
//! input gives an error, never a panic or a wrong GPV count.

mod common;

use clarion_gpv::{
    decode_gpv, encode_gpv, EvictCause, Gpv, GpvError, GpvHeader, GpvReader, GpvWriter, PacketFeatures,
    TcpSeq, MAGIC, VERSION,
};
use clarion_wire::FlowKey;
use common::*;
use proptest::prelude::*;

fn flow_key() -> impl Strategy<Value = FlowKey> {
    (
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        any::<u8>(),
        prop::option::of(any::<(u16, u16)>()),
        prop::option::of(0u16..4096),
        any::<bool>(),
        prop::option::of(any::<u32>()),
    )
        .prop_map(|(s, d, proto, ports, vlan, v6, vni)| {
            let (src, dst): (std::net::IpAddr, std::net::IpAddr) = if v6 {
                (
                    std::net::Ipv6Addr::from(s).into(),
                    std::net::Ipv6Addr::from(d).into(),
                )
            } else {
                (
                    std::net::Ipv4Addr::new(s[0], s[1], s[2], s[3]).into(),
                    std::net::Ipv4Addr::new(d[0], d[1], d[2], d[3]).into(),
                )
            };
            let mut key = FlowKey::new(src, dst, proto, ports, vlan);
            if let Some(v) = vni {
                key.vni = v;
                key.flags |= FlowKey::HAS_VNI;
            }
            key
        })
}

fn gpv() -> impl Strategy<Value = Gpv> {
    let packet = (
        any::<u32>(),
        any::<u16>(),
        any::<u8>(),
        prop::option::of(any::<(u32, u32)>()),
    )
        .prop_map(|(delta, size, tcp_flags, tcp)| PacketFeatures {
            delta,
            size,
            tcp_flags,
            tcp: tcp.map(|(seq, ack)| TcpSeq { seq, ack }),
        });
    (
        flow_key(),
        any::<u16>(),
        0u64..=u64::MAX - u64::from(u32::MAX),
        0u8..6,
        prop::collection::vec(packet, 0..40),
    )
        .prop_map(|(key, interface, start_ns, cause, packets)| Gpv {
            header: GpvHeader {
                key,
                interface,
                start_ns,
                packet_count: packets.len() as u32,
                cause: EvictCause::from_code(cause).expect("0..6 are causes"),
            },
            packets,
        })
}

fn file(gpvs: &[Gpv]) -> Vec<u8> {
    let mut w = GpvWriter::new(Vec::new()).expect("writing to memory");
    gpvs.iter().for_each(|g| w.write(g).expect("writing to memory"));
    w.finish().expect("writing to memory")
}

fn read_all(bytes: &[u8]) -> (Vec<Gpv>, Option<GpvError>) {
    let reader = match GpvReader::new(bytes) {
        Ok(r) => r,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let mut ok = Vec::new();
    for r in reader {
        match r {
            Ok(g) => ok.push(g),
            Err(e) => return (ok, Some(e)),
        }
    }
    (ok, None)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn round_trip(gpvs in prop::collection::vec(gpv(), 0..8)) {
        let bytes = file(&gpvs);
        let (back, err) = read_all(&bytes);
        prop_assert!(err.is_none(), "{err:?}");
        prop_assert_eq!(back, gpvs);
    }

    /// Every cut of a file reads the whole GPVs before the cut, then either
    /// ends (a cut between records) or says truncated.
    #[test]
    fn truncations(gpvs in prop::collection::vec(gpv(), 1..4), cut in any::<prop::sample::Index>()) {
        let bytes = file(&gpvs);
        let at = cut.index(bytes.len());
        let (ok, err) = read_all(&bytes[..at]);
        prop_assert!(gpvs.starts_with(&ok));
        let boundary = (0..=gpvs.len()).any(|n| file(&gpvs[..n]).len() == at);
        match err {
            None => prop_assert!(boundary, "cut at {} read as complete", at),
            Some(GpvError::Truncated { .. }) => prop_assert!(!boundary),
            Some(e) => prop_assert!(false, "cut at {}: {}", at, e),
        }
    }

    /// Random bytes after a valid header: no panic, and at most as many
    /// GPVs as records could fit.
    #[test]
    fn random_bytes(tail in prop::collection::vec(any::<u8>(), 0..600)) {
        let mut bytes = MAGIC.to_vec();
        bytes.push(VERSION);
        bytes.extend_from_slice(&tail);
        let (ok, _) = read_all(&bytes);
        prop_assert!(ok.len() <= tail.len() / 2);
        let _ = decode_gpv(&tail);
        let _ = read_all(&tail);
    }

    /// Flipped bytes in a valid file: no panic; whatever decodes re-encodes
    /// to a record the reader accepts (the checks keep GPVs well formed).
    #[test]
    fn damaged_files(gpvs in prop::collection::vec(gpv(), 1..4), flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..6)) {
        let mut bytes = file(&gpvs);
        for (i, x) in flips {
            let at = i.index(bytes.len());
            bytes[at] ^= x;
        }
        let (ok, _) = read_all(&bytes);
        let (again, err) = read_all(&file(&ok));
        prop_assert!(err.is_none());
        prop_assert_eq!(again, ok);
    }
}

#[test]
fn cache_output_round_trips() {
    for (name, packets) in captures() {
        for cfg in small_configs() {
            let gpvs = build_gpvs(&packets, cfg);
            let bytes = file(&gpvs);
            assert_eq!(through_file(&gpvs), gpvs, "{name}");
            eprintln!(
                "{name}: {} packets, {} GPVs, {:.1} bytes a packet",
                packets.len(),
                gpvs.len(),
                bytes.len() as f64 / packets.len().max(1) as f64
            );
        }
    }
}

fn one() -> Gpv {
    let key = FlowKey::new([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), 6, Some((1, 2)), None);
    Gpv {
        header: GpvHeader {
            key,
            interface: 1,
            start_ns: 5,
            packet_count: 1,
            cause: EvictCause::Flush,
        },
        packets: vec![PacketFeatures {
            delta: 0,
            size: 60,
            tcp_flags: 2,
            tcp: Some(TcpSeq { seq: 7, ack: 0 }),
        }],
    }
}

#[test]
fn header_errors() {
    assert!(matches!(
        read_all(b"").1,
        Some(GpvError::Truncated { offset: 0, .. })
    ));
    assert!(matches!(
        read_all(&MAGIC[..3]).1,
        Some(GpvError::Truncated { .. })
    ));
    assert!(matches!(read_all(b"{\"json\": 1}").1, Some(GpvError::BadMagic)));
    let mut v2 = MAGIC.to_vec();
    v2.push(2);
    assert!(matches!(read_all(&v2).1, Some(GpvError::UnsupportedVersion(2))));
    // A header alone is an empty stream.
    let (gpvs, err) = read_all(&file(&[]));
    assert!(gpvs.is_empty() && err.is_none());
}

#[test]
fn record_errors() {
    let good = file(&[one()]);
    let body = &good[6..];
    assert_eq!(usize::from(good[5]), body.len());
    let with = |len: &[u8], body: &[u8]| {
        let mut f = good[..5].to_vec();
        f.extend_from_slice(len);
        f.extend_from_slice(body);
        read_all(&f).1
    };
    // Length 0, over the limit, an endless varint.
    assert!(matches!(
        with(&[0], &[]),
        Some(GpvError::Corrupt { offset: 5, .. })
    ));
    assert!(matches!(
        with(&[0x80, 0x80, 0x80, 0x10], &[]),
        Some(GpvError::RecordTooLarge { .. })
    ));
    assert!(matches!(with(&[0xff; 11], &[]), Some(GpvError::Corrupt { .. })));
    // A byte more than the body: the extra byte is read as the body's end.
    let mut longer = body.to_vec();
    longer.push(0);
    let e = with(&[longer.len() as u8], &longer).unwrap();
    assert!(e.to_string().contains("bytes after the last packet"), "{e}");
    // Unknown key flags, unknown cause.
    let mut bad = body.to_vec();
    bad[0] |= 0x80;
    assert!(matches!(
        with(&[bad.len() as u8], &bad),
        Some(GpvError::Corrupt { .. })
    ));
    let cause_at = 2 + 8 + 4 + 1 + 1; // flags proto addrs ports interface start
    assert_eq!(body[cause_at], EvictCause::Flush.code());
    let mut bad = body.to_vec();
    bad[cause_at] = 6;
    let e = with(&[bad.len() as u8], &bad).unwrap();
    assert!(e.to_string().contains("cause"), "{e}");
    // The writer refuses an inconsistent GPV.
    let mut g = one();
    g.header.packet_count = 2;
    assert!(matches!(
        encode_gpv(&g, &mut Vec::new()),
        Err(GpvError::Inconsistent(_))
    ));
    let mut g = one();
    g.header.key.src_ip[9] = 1;
    assert!(matches!(
        encode_gpv(&g, &mut Vec::new()),
        Err(GpvError::Inconsistent(_))
    ));
}
