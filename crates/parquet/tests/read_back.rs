//! Random flow records (IPv4 and IPv6, with and without ports and VLAN,
//! any end reason) written with `ParquetRecords` in several row groups,
//! with flushes between, come back field for field:
//!
//! - read with the parquet crate's own Arrow reader and compared, column
//!   by column and name by name, with `clarion_records::to_json` (the
//!   schema's definition), so names, order, types and nulls are checked
//!   against a reference that shares no code with the writer;
//! - read with `read_records` and compared with the records;
//! - the row groups are `ceil(n / rows)`: flushing adds none.

// Tests may unwrap (the helpers here are not #[test] functions).
#![allow(clippy::unwrap_used)]

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::cast::AsArray;
use arrow_array::types::{TimestampNanosecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use clarion_parquet::{read_records, ParquetRecords, SCHEMA_KEY};
use clarion_records::{to_json, EndReason, FlowRecord, RecordSink};
use clarion_wire::FlowKey;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use serde_json::{Map, Value};

fn addr() -> impl Strategy<Value = (IpAddr, IpAddr)> {
    prop_oneof![
        (any::<u32>(), any::<u32>())
            .prop_map(|(a, b)| (IpAddr::V4(Ipv4Addr::from(a)), IpAddr::V4(Ipv4Addr::from(b)))),
        (any::<u128>(), any::<u128>())
            .prop_map(|(a, b)| (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)))),
    ]
}

fn record() -> impl Strategy<Value = FlowRecord> {
    (
        addr(),
        any::<u8>(),
        proptest::option::of(any::<(u16, u16)>()),
        proptest::option::of(0u16..4096),
        (0u64..i64::MAX as u64, 0u64..1_000_000_000_000),
        (1u64..u64::MAX / 2, any::<u64>(), any::<u8>()),
        (any::<u32>(), any::<u32>()),
        prop_oneof![
            Just(EndReason::Idle),
            Just(EndReason::Active),
            Just(EndReason::End),
            Just(EndReason::Flush)
        ],
    )
        .prop_map(
            |((src, dst), proto, ports, vlan, (first, span), (packets, bytes, flags), (a, b), end)| {
                FlowRecord {
                    key: FlowKey::new(src, dst, proto, ports, vlan),
                    first_ns: first,
                    last_ns: first.saturating_add(span).min(i64::MAX as u64),
                    packets,
                    bytes,
                    tcp_flags: flags,
                    min_size: a.min(b),
                    max_size: a.max(b),
                    end_reason: end,
                }
            },
        )
}

/// A file of its own for each call (the tests run in parallel).
fn temp_path(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}-{n}.parquet", std::process::id()))
}

/// Row `i` of `batch` as JSON, by the reference's rules: strings stay
/// strings, integers numbers, nulls null, timestamps their nanoseconds.
fn row_as_json(batch: &RecordBatch, i: usize) -> Map<String, Value> {
    let mut m = Map::new();
    for (field, col) in batch.schema().fields().iter().zip(batch.columns()) {
        let v = if col.is_null(i) {
            Value::Null
        } else {
            match col.data_type() {
                DataType::Utf8 => Value::from(col.as_string::<i32>().value(i)),
                DataType::UInt8 => Value::from(col.as_primitive::<UInt8Type>().value(i)),
                DataType::UInt16 => Value::from(col.as_primitive::<UInt16Type>().value(i)),
                DataType::UInt32 => Value::from(col.as_primitive::<UInt32Type>().value(i)),
                DataType::UInt64 => Value::from(col.as_primitive::<UInt64Type>().value(i)),
                DataType::Timestamp(_, Some(tz)) if tz.as_ref() == "UTC" => {
                    let ns = col.as_primitive::<TimestampNanosecondType>().value(i);
                    Value::from(u64::try_from(ns).unwrap())
                }
                other => panic!("unexpected type {other} of {}", field.name()),
            }
        };
        m.insert(field.name().clone(), v);
    }
    m
}

fn check(records: &[FlowRecord], rows: usize, flush_every: usize) -> Result<(), TestCaseError> {
    let path = temp_path("read_back");
    let mut sink =
        ParquetRecords::with_row_group_rows(File::create(&path).unwrap(), "read_back", rows).unwrap();
    for (i, r) in records.iter().enumerate() {
        sink.write(r).unwrap();
        if (i + 1) % flush_every == 0 {
            sink.flush().unwrap();
        }
    }
    sink.finish().unwrap();

    let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap()).unwrap();
    let meta = builder.metadata().clone();
    let kv = meta.file_metadata().key_value_metadata().unwrap();
    let schema = kv.iter().find(|k| k.key == SCHEMA_KEY).unwrap();
    prop_assert_eq!(schema.value.as_deref(), Some("clarion.flow/1"));
    prop_assert_eq!(meta.num_row_groups(), records.len().div_ceil(rows));
    prop_assert!(meta.row_groups().iter().all(|g| g.num_rows() as usize <= rows));

    let mut got = Vec::new();
    for batch in builder.build().unwrap() {
        let batch = batch.unwrap();
        for i in 0..batch.num_rows() {
            got.push(row_as_json(&batch, i));
        }
    }
    prop_assert_eq!(got.len(), records.len());
    for (row, r) in got.iter().zip(records) {
        let mut want = to_json(r).as_object().unwrap().clone();
        want.shift_remove("schema"); // the file's metadata, not a column
                                     // Same names in the same order, same values.
        prop_assert_eq!(row.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
        prop_assert_eq!(row, &want);
    }

    prop_assert_eq!(read_records(&path).unwrap(), records.to_vec());
    std::fs::remove_file(&path).unwrap();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn records_come_back_field_for_field(
        records in proptest::collection::vec(record(), 0..300),
        rows in 1usize..64,
        flush_every in 1usize..100,
    ) {
        check(&records, rows, flush_every)?;
    }
}

#[test]
fn many_records_in_default_row_groups() {
    // A full default row group and a partial one, as a long run writes.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = record();
    let records: Vec<FlowRecord> = (0..clarion_parquet::DEFAULT_ROW_GROUP_ROWS + 1000)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect();
    check(&records, clarion_parquet::DEFAULT_ROW_GROUP_ROWS, 10_000).unwrap();
}
