//! Shared by the integration tests: the real captures and a record generator.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use clarion_headers::{Decoder, Encoder, EncoderConfig, HeaderRecord, TcpHeader};
use clarion_wire::{LinkType, PacketRecord};
use proptest::prelude::*;

#[allow(unused_imports)]
pub use clarion_testdata::{captures_dir, captures_in as capture_files};

/// Every frame of the file that parses as IP, with its link type.
pub fn load(path: &Path) -> Vec<(LinkType, PacketRecord)> {
    clarion_testdata::frames(path)
        .into_iter()
        .filter_map(|f| f.record.map(|r| (f.link, r)))
        .collect()
}

/// Encodes `recs`, checking every datagram's size; returns the datagrams and the encoder.
pub fn encode_all(recs: &[HeaderRecord], config: EncoderConfig) -> (Vec<Vec<u8>>, Encoder) {
    let mut enc = Encoder::new(config).unwrap();
    let mut out = Vec::new();
    for r in recs {
        if let Some(d) = enc.push(r) {
            out.push(d.to_vec());
        }
    }
    out.extend(enc.flush().map(<[u8]>::to_vec));
    for d in &out {
        assert!(
            d.len() <= enc.config().mtu,
            "datagram of {} bytes > MTU {}",
            d.len(),
            enc.config().mtu
        );
    }
    (out, enc)
}

/// Decodes every datagram with one decoder, in order.
pub fn decode_all(dgrams: &[Vec<u8>]) -> Vec<HeaderRecord> {
    let mut dec = Decoder::new();
    let mut out = Vec::new();
    for d in dgrams {
        dec.decode_into(d, &mut out).unwrap();
    }
    out
}

/// Records drawn from small value sets, so that conversations repeat in
/// both directions and interleave, plus anything at random; timestamps walk
/// forward, back, and jump by up to the whole range.
pub fn arb_record() -> impl Strategy<Value = HeaderRecord> {
    let addr = prop_oneof![
        4 => (0u8..4).prop_map(|i| IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))),
        1 => any::<[u8; 4]>().prop_map(|a| IpAddr::V4(a.into())),
        2 => (0u16..3).prop_map(|i| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i))),
        1 => any::<[u8; 16]>().prop_map(|a| IpAddr::V6(a.into())),
    ];
    let port = prop_oneof![3 => prop::sample::select(vec![80u16, 443, 40000]), 1 => any::<u16>()];
    let seq = prop_oneof![
        3 => prop::sample::select(vec![1000u32, 1001, 2448, 0, u32::MAX - 10]),
        1 => any::<u32>(),
    ];
    let tcp = (
        seq.clone(),
        seq,
        prop_oneof![Just(65535u16), any::<u16>()],
        any::<u8>(),
        prop::option::of(0u8..15),
        prop::option::of(any::<u16>()),
    )
        .prop_map(|(seq, ack, window, flags, wscale, mss)| TcpHeader {
            seq,
            ack,
            window,
            flags,
            wscale,
            mss,
        });
    let small = |v: Vec<u32>| prop_oneof![3 => prop::sample::select(v), 1 => any::<u32>()];
    (
        (
            prop_oneof![3 => 0u16..3, 1 => any::<u16>()],
            prop_oneof![4 => Just(1u32), 1 => any::<u32>()],
            addr.clone(),
            addr,
            prop::option::of((port.clone(), port)),
        ),
        (
            prop::sample::select(vec![6u8, 17, 1, 58, 47]),
            prop::option::of(prop_oneof![Just(7u16), any::<u16>()]),
            small(vec![40, 52, 60, 1500]),
            small(vec![0, 8, 1448]),
            any::<u8>(),
            0u8..4,
            any::<bool>(),
            small(vec![54, 66, 74, 1514]),
            prop::option::of(tcp),
            small(vec![0, 0, 1448]),
        ),
    )
        .prop_map(
            |(
                (interface, sample_ratio, src, dst, ports),
                (proto, vlan, size, volume, ttl, ecn, later_fragment, captured_len, tcp, cut),
            )| {
                HeaderRecord {
                    ts_ns: 0,
                    interface,
                    sample_ratio,
                    src,
                    dst,
                    ports,
                    proto,
                    vlan,
                    size,
                    volume,
                    ttl,
                    ecn,
                    later_fragment,
                    captured_len,
                    wire_len: captured_len + cut,
                    tcp,
                }
            },
        )
}

/// A sequence of records with timestamps from a random walk starting anywhere.
pub fn arb_records(max: usize) -> impl Strategy<Value = Vec<HeaderRecord>> {
    let step = prop_oneof![
        8 => 0i64..2_000_000,
        1 => -1_000_000i64..0,
        1 => any::<i64>(),
    ];
    (any::<u64>(), prop::collection::vec((arb_record(), step), 0..max)).prop_map(|(start, v)| {
        let mut ts = start;
        v.into_iter()
            .map(|(mut r, step)| {
                ts = ts.wrapping_add(step as u64);
                r.ts_ns = ts;
                r
            })
            .collect()
    })
}
