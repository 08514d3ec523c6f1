//! Byte fixtures of the encoder (worked out by hand from RFC 7011) and the
//! round trip through the independent decoder on generated records.

use std::net::IpAddr;

use clarion_records::{EndReason, FlowRecord};
use clarion_wire::FlowKey;
use proptest::prelude::*;

use super::*;
use crate::decode::Decoder;

const NS: u64 = 1_000_000_000;
/// 2026-01-01T00:00:00Z.
const NEW_YEAR_2026: u64 = 1_767_225_600;

fn v4_record() -> FlowRecord {
    let key = FlowKey::new(
        "10.0.0.1".parse().unwrap(),
        "10.0.0.2".parse().unwrap(),
        6,
        Some((1234, 80)),
        Some(7),
    );
    let mut r = FlowRecord::of_packet(key, NEW_YEAR_2026 * NS + NS / 2, 40, 0x02);
    r.merge(&FlowRecord::of_packet(
        key,
        (NEW_YEAR_2026 + 1) * NS + NS / 4,
        1500,
        0x11,
    ));
    r.merge(&FlowRecord::of_packet(
        key,
        NEW_YEAR_2026 * NS + NS * 3 / 4,
        60,
        0x10,
    ));
    r.end_reason = EndReason::End;
    r
}

#[test]
fn ntp_time_of_known_dates() {
    // The Unix epoch is 2208988800 s after the NTP epoch (RFC 5905 fig. 4).
    assert_eq!(ntp_timestamp(0), 0x83aa_7e80_0000_0000);
    // 2026-01-01T00:00:00.5Z: 3976214400 = 0xed003780 s, half a second = 2^31.
    assert_eq!(ntp_timestamp(NEW_YEAR_2026 * NS + NS / 2), 0xed00_3780_8000_0000);
    // One nanosecond is 4.294967296 fraction units: rounds to 4.
    assert_eq!(ntp_timestamp(NEW_YEAR_2026 * NS + 1) & 0xffff_ffff, 4);
    // The last nanosecond of a second stays in that second.
    assert_eq!(ntp_timestamp(NEW_YEAR_2026 * NS + NS - 1), 0xed00_3780_ffff_fffc);
}

#[test]
fn header_layout() {
    let e = Encoder::new(EncoderConfig {
        observation_domain: 0x0102_0304,
        max_message_size: 1400,
    })
    .unwrap();
    let m = e.template_message(0x6555_0000);
    assert_eq!(&m[0..2], &[0, 10], "version 10");
    assert_eq!(usize::from(u16::from_be_bytes([m[2], m[3]])), m.len(), "length");
    assert_eq!(&m[4..8], &[0x65, 0x55, 0, 0], "export time");
    assert_eq!(&m[8..12], &[0, 0, 0, 0], "sequence number");
    assert_eq!(&m[12..16], &[1, 2, 3, 4], "observation domain");
}

#[test]
fn template_set_layout() {
    let e = Encoder::new(EncoderConfig::default()).unwrap();
    let m = e.template_message(0);
    let set = &m[HEADER_LEN..];
    assert_eq!(&set[0..2], &[0, 2], "set id 2");
    assert_eq!(
        usize::from(u16::from_be_bytes([set[2], set[3]])),
        set.len(),
        "set length"
    );
    // Template 256 with 17 fields: sourceIPv4Address (8) of 4 bytes first...
    assert_eq!(&set[4..12], &[0x01, 0x00, 0, 17, 0, 8, 0, 4]);
    // ...then destinationIPv4Address (12) of 4 bytes.
    assert_eq!(&set[12..16], &[0, 12, 0, 4]);
    // It ends with the Community ID: enterprise bit + 1, variable, PEN 32473.
    let v4_end = 4 + 4 + 16 * 4 + 8;
    assert_eq!(
        &set[v4_end - 8..v4_end],
        &[0x80, 0x01, 0xff, 0xff, 0, 0, 0x7e, 0xd9]
    );
    // Template 257 follows, with the IPv6 addresses (27 and 28, 16 bytes).
    assert_eq!(
        &set[v4_end..v4_end + 12],
        &[0x01, 0x01, 0, 17, 0, 27, 0, 16, 0, 28, 0, 16]
    );
    assert_eq!(set.len(), 2 * (4 + 16 * 4 + 8) + 4);
}

#[test]
fn data_record_layout() {
    let r = v4_record();
    let mut e = Encoder::new(EncoderConfig::default()).unwrap();
    assert!(e.push(&r, 0).is_none());
    let m = e.finish(0x6555_0000).unwrap();
    let set = &m[HEADER_LEN..];
    let cid = r.community_id();
    assert_eq!(cid.len(), 30);
    let mut want: Vec<u8> = vec![0x01, 0x00]; // set id 256
    let record_len = 4 + 4 + 2 + 2 + 1 + 2 + 8 + 8 + 8 + 8 + 8 + 8 + 2 + 4 + 4 + 1 + 1 + 30;
    want.extend_from_slice(&((4 + record_len) as u16).to_be_bytes());
    want.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    want.extend_from_slice(&[0x04, 0xd2, 0, 80, 6, 0, 7]); // ports, TCP, VLAN 7
    want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x06, 0x40]); // 1600 bytes
    want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 3]); // 3 packets
    want.extend_from_slice(&[0xed, 0x00, 0x37, 0x80, 0x80, 0, 0, 0]); // 00:00:00.5
    want.extend_from_slice(&[0xed, 0x00, 0x37, 0x81, 0x40, 0, 0, 0]); // 00:00:01.25
    want.extend_from_slice(&1_767_225_600_500u64.to_be_bytes()); // ms
    want.extend_from_slice(&1_767_225_601_250u64.to_be_bytes());
    want.extend_from_slice(&[0, 0x13]); // SYN|ACK|FIN
    want.extend_from_slice(&[0, 0, 0, 40, 0, 0, 0x05, 0xdc]); // 40..1500
    want.push(3); // end of flow detected
    want.push(30);
    want.extend_from_slice(cid.as_bytes());
    assert_eq!(set, &want[..]);
    assert_eq!(&m[8..12], &[0, 0, 0, 0], "no record before this message");
}

#[test]
fn messages_stay_below_the_maximum_and_number_records() {
    let mut e = Encoder::new(EncoderConfig {
        observation_domain: 1,
        max_message_size: 400,
    })
    .unwrap();
    let mut v6 = v4_record();
    v6.key = FlowKey::new(
        "::1".parse().unwrap(),
        "::2".parse().unwrap(),
        17,
        Some((53, 53)),
        None,
    );
    let mut messages = Vec::new();
    for i in 0..50 {
        let r = if i % 3 == 0 { v6 } else { v4_record() };
        messages.extend(e.push(&r, 0));
    }
    messages.extend(e.finish(0));
    assert!(messages.len() > 10, "{} messages", messages.len());
    let mut d = Decoder::new();
    d.message(&e.template_message(0)).unwrap();
    let mut seen = 0u32;
    for m in &messages {
        assert!(m.len() <= 400, "{} bytes", m.len());
        let decoded = d.message(m).unwrap();
        assert_eq!(decoded.sequence, seen, "records before this message");
        seen += decoded.records.len() as u32;
    }
    assert_eq!(seen, 50);
    assert_eq!(e.sequence(), 50);
    assert!(e.finish(0).is_none(), "nothing pending");
}

#[test]
fn sizes_outside_the_limits_are_refused() {
    for size in [0, 100, 65536] {
        let e = Encoder::new(EncoderConfig {
            observation_domain: 0,
            max_message_size: size,
        });
        assert!(matches!(e, Err(IpfixError::MessageSize { .. })), "{size}");
    }
    assert!(Encoder::new(EncoderConfig {
        observation_domain: 0,
        max_message_size: 65535
    })
    .is_ok());
}

fn arb_record() -> impl Strategy<Value = FlowRecord> {
    let addr = prop_oneof![
        any::<[u8; 4]>().prop_map(|b| (IpAddr::from(b), IpAddr::from([b[3], b[2], b[1], b[0]]))),
        (any::<[u8; 16]>(), any::<[u8; 16]>()).prop_map(|(a, b)| (IpAddr::from(a), IpAddr::from(b))),
    ];
    let ports = prop::option::of((1u16.., any::<u16>()));
    let vlan = prop::option::of(1u16..4096);
    let times = (0u64..4_000_000_000 * NS, 0u64..86_400 * NS);
    let sizes = (20u32..65536, 0u32..65536);
    (
        addr,
        any::<u8>(),
        ports,
        vlan,
        times,
        1u64..u64::MAX / 65536,
        any::<u8>(),
        sizes,
        0usize..4,
    )
        .prop_map(
            |((src, dst), proto, ports, vlan, (first, dur), packets, flags, (min, span), reason)| {
                let key = FlowKey::new(src, dst, proto, ports, vlan);
                FlowRecord {
                    key,
                    first_ns: first,
                    last_ns: first + dur,
                    packets,
                    bytes: packets * u64::from(min),
                    tcp_flags: flags,
                    min_size: min,
                    max_size: min.saturating_add(span),
                    end_reason: [
                        EndReason::Idle,
                        EndReason::Active,
                        EndReason::End,
                        EndReason::Flush,
                    ][reason],
                }
            },
        )
}

proptest! {
    /// Whatever the records, the decoder reads back the same records,
    /// their Community IDs and millisecond times, in order.
    #[test]
    fn encode_decode_round_trip(
        records in prop::collection::vec(arb_record(), 0..60),
        size in 200usize..=65535,
        domain in any::<u32>(),
    ) {
        let mut e = Encoder::new(EncoderConfig { observation_domain: domain, max_message_size: size }).unwrap();
        let mut stream = e.template_message(7);
        for r in &records {
            if let Some(m) = e.push(r, 7) {
                prop_assert!(m.len() <= size);
                stream.extend(m);
            }
        }
        stream.extend(e.finish(7).unwrap_or_default());
        let messages = Decoder::new().stream(&stream).unwrap();
        let decoded: Vec<_> = messages.iter().flat_map(|m| m.records.iter()).collect();
        prop_assert_eq!(decoded.len(), records.len());
        for (d, r) in decoded.iter().zip(&records) {
            prop_assert_eq!(&d.record, r);
            prop_assert_eq!(d.community_id.clone(), Some(r.community_id()));
            prop_assert_eq!(d.first_ms, Some(r.first_ns / 1_000_000));
            prop_assert_eq!(d.last_ms, Some(r.last_ns / 1_000_000));
            prop_assert_eq!(d.template, if r.key.is_ipv6() { TEMPLATE_V6 } else { TEMPLATE_V4 });
        }
        for m in &messages {
            prop_assert_eq!(m.observation_domain, domain);
            prop_assert_eq!(m.export_time, 7);
        }
    }
}
