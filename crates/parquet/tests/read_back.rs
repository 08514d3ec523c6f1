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

mod common;

use std::fs::File;

use clarion_parquet::{read_records, ParquetRecords};
use clarion_records::{to_json, EndReason, FlowRecord};
use clarion_sinks::Sink;
use clarion_wire::FlowKey;
use common::{addr, assert_rows_equal, rows_of_file, temp_path, tunnelled};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

fn record() -> impl Strategy<Value = FlowRecord> {
    (
        addr(),
        any::<u8>(),
        proptest::option::of(any::<(u16, u16)>()),
        (
            proptest::option::of(0u16..4096),
            proptest::option::of(any::<u32>()),
        ),
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
            |((src, dst), proto, ports, (vlan, vni), (first, span), (packets, bytes, flags), (a, b), end)| {
                FlowRecord {
                    key: tunnelled(FlowKey::new(src, dst, proto, ports, vlan), vni),
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

    let got = rows_of_file(&path, "clarion.flow/1", records.len(), rows)?;
    let want: Vec<_> = records
        .iter()
        .map(|r| {
            let mut want = to_json(r).as_object().unwrap().clone();
            want.shift_remove("schema"); // the file's metadata, not a column
            want
        })
        .collect();
    assert_rows_equal(&got, &want)?;

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
