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

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::cast::AsArray;
use arrow_array::types::{TimestampNanosecondType, UInt16Type, UInt32Type, UInt8Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use clarion_gpv::{EvictCause, Gpv, GpvHeader, GpvSink, PacketFeatures, TcpSeq};
use clarion_parquet::{read_gpvs, ParquetGpvs, SCHEMA_KEY};
use clarion_wire::FlowKey;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

fn addr() -> impl Strategy<Value = (IpAddr, IpAddr)> {
    prop_oneof![
        (any::<u32>(), any::<u32>())
            .prop_map(|(a, b)| (IpAddr::V4(Ipv4Addr::from(a)), IpAddr::V4(Ipv4Addr::from(b)))),
        (any::<u128>(), any::<u128>())
            .prop_map(|(a, b)| (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)))),
    ]
}

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
        proptest::option::of(0u16..4096),
        (any::<u16>(), 0u64..i64::MAX as u64 - u64::from(u32::MAX)),
        proptest::sample::select(EvictCause::ALL.to_vec()),
        proptest::collection::vec(packet(), 1..=30),
    )
        .prop_map(
            |((src, dst), proto, ports, vlan, (interface, start_ns), cause, mut packets)| {
                // A GPV's first packet is its start (as the cache builds them).
                packets[0].delta = 0;
                Gpv {
                    header: GpvHeader {
                        key: FlowKey::new(src, dst, proto, ports, vlan),
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

/// A file of its own for each call (the tests run in parallel).
fn temp_path(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}-{n}.parquet", std::process::id()))
}

/// Value `i` of `col` as JSON: strings stay strings, integers numbers,
/// nulls null, timestamps their nanoseconds, lists arrays.
fn value_as_json(col: &ArrayRef, i: usize) -> Value {
    if col.is_null(i) {
        return Value::Null;
    }
    match col.data_type() {
        DataType::Utf8 => Value::from(col.as_string::<i32>().value(i)),
        DataType::UInt8 => Value::from(col.as_primitive::<UInt8Type>().value(i)),
        DataType::UInt16 => Value::from(col.as_primitive::<UInt16Type>().value(i)),
        DataType::UInt32 => Value::from(col.as_primitive::<UInt32Type>().value(i)),
        DataType::Timestamp(_, Some(tz)) if tz.as_ref() == "UTC" => {
            let ns = col.as_primitive::<TimestampNanosecondType>().value(i);
            Value::from(u64::try_from(ns).unwrap())
        }
        DataType::List(_) => {
            let items = col.as_list::<i32>().value(i);
            Value::from(
                (0..items.len())
                    .map(|j| value_as_json(&items, j))
                    .collect::<Vec<_>>(),
            )
        }
        other => panic!("unexpected type {other}"),
    }
}

fn row_as_json(batch: &RecordBatch, i: usize) -> Map<String, Value> {
    let schema = batch.schema();
    let mut m = Map::new();
    for (field, col) in schema.fields().iter().zip(batch.columns()) {
        m.insert(field.name().clone(), value_as_json(col, i));
    }
    m
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

    let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap()).unwrap();
    let meta = builder.metadata().clone();
    let kv = meta.file_metadata().key_value_metadata().unwrap();
    let schema = kv.iter().find(|k| k.key == SCHEMA_KEY).unwrap();
    prop_assert_eq!(schema.value.as_deref(), Some("clarion.gpv/1"));
    prop_assert_eq!(meta.num_row_groups(), gpvs.len().div_ceil(rows));
    prop_assert!(meta.row_groups().iter().all(|g| g.num_rows() as usize <= rows));

    let mut got = Vec::new();
    for batch in builder.build().unwrap() {
        let batch = batch.unwrap();
        for i in 0..batch.num_rows() {
            got.push(row_as_json(&batch, i));
        }
    }
    prop_assert_eq!(got.len(), gpvs.len());
    for (row, g) in got.iter().zip(gpvs) {
        let want = reference(g);
        prop_assert_eq!(row.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
        prop_assert_eq!(row, &want);
    }

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
