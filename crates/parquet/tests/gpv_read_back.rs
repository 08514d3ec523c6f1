//! Random GPVs (IPv4 and IPv6, with and without ports and VLAN, 1 to 30
//! packets with and without TCP sequence numbers, any eviction cause)
//! written with `ParquetGpvs` in several row groups, with flushes
//! between, come back:
//!
//! - read with the parquet crate's own Arrow reader and compared, row by
//!   row and name by name, with a JSON reference built here from the GPVs
//!   (absolute packet times, nulls where a packet had no TCP header,
//!   Community IDs from `clarion_records`), sharing no code with the
//!   writer;
//! - read with `read_gpvs` and compared with the GPVs;
//! - the row groups are `ceil(n / rows)`: flushing adds none.

#![allow(clippy::unwrap_used)]

mod common;

use std::fs::File;

use clarion_gpv::{EvictCause, Gpv, GpvHeader, PacketFeatures, TcpSeq};
use clarion_parquet::{read_gpvs, ParquetGpvs};
use clarion_sinks::Sink;
use clarion_wire::FlowKey;
use common::{addr, assert_rows_equal, rows_of_file, temp_path, tunnelled};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

fn packet() -> impl Strategy<Value = PacketFeatures> {
    (
        any::<u32>(),
        any::<u16>(),
        any::<u8>(),
        proptest::option::of((any::<u32>(), any::<u32>())),
    )
        .prop_map(|(delta, size, tcp_flags, tcp)| PacketFeatures {
            delta,
            size,
            tcp_flags,
            tcp: tcp.map(|(seq, ack)| TcpSeq { seq, ack }),
        })
}

fn gpv() -> impl Strategy<Value = Gpv> {
    (
        addr(),
        any::<u8>(),
        proptest::option::of(any::<(u16, u16)>()),
        (
            proptest::option::of(0u16..4096),
            proptest::option::of(any::<u32>()),
        ),
        (any::<u16>(), 0u64..i64::MAX as u64 - u64::from(u32::MAX)),
        proptest::sample::select(EvictCause::ALL.to_vec()),
        proptest::collection::vec(packet(), 1..=30),
    )
        .prop_map(
            |((src, dst), proto, ports, (vlan, vni), (interface, start_ns), cause, mut packets)| {
                // A GPV's first packet is its start (as the cache builds them).
                packets[0].delta = 0;
                Gpv {
                    header: GpvHeader {
                        key: tunnelled(FlowKey::new(src, dst, proto, ports, vlan), vni),
                        interface,
                        start_ns,
                        packet_count: packets.len() as u32,
                        cause,
                    },
                    packets,
                }
            },
        )
}

/// The reference: a GPV's row as the schema describes it.
fn reference(g: &Gpv) -> Map<String, Value> {
    let k = &g.header.key;
    let ports = k.has_ports().then_some((k.src_port, k.dst_port));
    let times: Vec<u64> = g
        .packets
        .iter()
        .map(|p| g.header.start_ns + u64::from(p.delta))
        .collect();
    let v = json!({
        "src_ip": k.src_addr().to_string(),
        "dst_ip": k.dst_addr().to_string(),
        "src_port": ports.map(|p| p.0),
        "dst_port": ports.map(|p| p.1),
        "proto": k.proto,
        "vlan": k.has_vlan().then_some(k.vlan),
        "vni": k.tunnel_id(),
        "community_id": clarion_records::community_id(k, 0),
        "interface": g.header.interface,
        "start_ns": g.header.start_ns,
        "packet_count": g.packets.len(),
        "cause": g.header.cause.name(),
        "ts_ns": times,
        "size": g.packets.iter().map(|p| p.size).collect::<Vec<_>>(),
        "tcp_flags": g.packets.iter().map(|p| p.tcp_flags).collect::<Vec<_>>(),
        "seq": g.packets.iter().map(|p| p.tcp.map(|t| t.seq)).collect::<Vec<_>>(),
        "ack": g.packets.iter().map(|p| p.tcp.map(|t| t.ack)).collect::<Vec<_>>(),
    });
    v.as_object().unwrap().clone()
}

fn check(gpvs: &[Gpv], rows: usize, flush_every: usize) -> Result<(), TestCaseError> {
    let path = temp_path("gpv_read_back");
    let mut sink =
        ParquetGpvs::with_row_group_rows(File::create(&path).unwrap(), "gpv_read_back", rows).unwrap();
    for (i, g) in gpvs.iter().enumerate() {
        sink.write(g).unwrap();
        if (i + 1) % flush_every == 0 {
            sink.flush().unwrap();
        }
    }
    sink.finish().unwrap();
    prop_assert_eq!(sink.row_groups(), gpvs.len().div_ceil(rows));

    let got = rows_of_file(&path, "clarion.gpv/1", gpvs.len(), rows)?;
    let want: Vec<_> = gpvs.iter().map(reference).collect();
    assert_rows_equal(&got, &want)?;

    prop_assert_eq!(read_gpvs(&path).unwrap(), gpvs.to_vec());
    std::fs::remove_file(&path).unwrap();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    #[test]
    fn gpvs_come_back_packet_for_packet(
        gpvs in proptest::collection::vec(gpv(), 0..200),
        rows in 1usize..48,
        flush_every in 1usize..80,
    ) {
        check(&gpvs, rows, flush_every)?;
    }
}
