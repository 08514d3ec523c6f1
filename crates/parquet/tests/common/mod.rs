//! Helpers the integration tests share (each test file has `mod common;`):
//! random address pairs, a temporary path per call, a batch's rows as
//! JSON by the references' rules, the checks of a written file's
//! metadata, and starting the Python readers (or saying `skipped: ...`).
//!
//! None of them knows the writer's code: they read what the parquet
//! crate's reader or a Python reader sees.

// Each test file uses some of the helpers.
#![allow(dead_code, clippy::unwrap_used)]

use std::ffi::OsStr;
use std::fs::File;
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::cast::AsArray;
use arrow_array::types::{TimestampNanosecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use clarion_parquet::SCHEMA_KEY;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use proptest::prelude::*;
use serde_json::{Map, Value};

/// Two IPv4 or two IPv6 addresses.
pub fn addr() -> impl Strategy<Value = (IpAddr, IpAddr)> {
    prop_oneof![
        (any::<u32>(), any::<u32>())
            .prop_map(|(a, b)| (IpAddr::V4(Ipv4Addr::from(a)), IpAddr::V4(Ipv4Addr::from(b)))),
        (any::<u128>(), any::<u128>())
            .prop_map(|(a, b)| (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)))),
    ]
}

/// A flow key with an optional tunnel VNI.
pub fn tunnelled(key: clarion_wire::FlowKey, vni: Option<u32>) -> clarion_wire::FlowKey {
    match vni {
        Some(v) => clarion_wire::FlowKey {
            vni: v,
            flags: key.flags | clarion_wire::FlowKey::HAS_VNI,
            ..key
        },
        None => key,
    }
}

/// A file of its own for each call (the tests run in parallel).
pub fn temp_path(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}-{n}.parquet", std::process::id()))
}

/// Value `i` of `col` as JSON: strings stay strings, integers numbers,
/// nulls null, timestamps their nanoseconds, lists arrays.
pub fn value_as_json(col: &ArrayRef, i: usize) -> Value {
    if col.is_null(i) {
        return Value::Null;
    }
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

/// Row `i` of `batch` as JSON, column name to value, in the file's order.
pub fn row_as_json(batch: &RecordBatch, i: usize) -> Map<String, Value> {
    let schema = batch.schema();
    let mut m = Map::new();
    for (field, col) in schema.fields().iter().zip(batch.columns()) {
        m.insert(field.name().clone(), value_as_json(col, i));
    }
    m
}

/// The rows of the finished file at `path`, read with the parquet crate's
/// own Arrow reader, after checking its metadata: the schema name
/// `schema_name`, `ceil(written / rows)` row groups (flushing adds none)
/// of at most `rows` rows.
pub fn rows_of_file(
    path: &Path,
    schema_name: &str,
    written: usize,
    rows: usize,
) -> Result<Vec<Map<String, Value>>, TestCaseError> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap()).unwrap();
    let meta = builder.metadata().clone();
    let kv = meta.file_metadata().key_value_metadata().unwrap();
    let schema = kv.iter().find(|k| k.key == SCHEMA_KEY).unwrap();
    prop_assert_eq!(schema.value.as_deref(), Some(schema_name));
    prop_assert_eq!(meta.num_row_groups(), written.div_ceil(rows));
    prop_assert!(meta.row_groups().iter().all(|g| g.num_rows() as usize <= rows));

    let mut got = Vec::new();
    for batch in builder.build().unwrap() {
        let batch = batch.unwrap();
        for i in 0..batch.num_rows() {
            got.push(row_as_json(&batch, i));
        }
    }
    prop_assert_eq!(got.len(), written);
    Ok(got)
}

/// Each row equals its reference: the same names in the same order, the
/// same values.
pub fn assert_rows_equal(
    got: &[Map<String, Value>],
    want: &[Map<String, Value>],
) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.len(), want.len());
    for (row, want) in got.iter().zip(want) {
        prop_assert_eq!(row.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
        prop_assert_eq!(row, want);
    }
    Ok(())
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python with the readers and the real capture, or `None` after
/// printing why the test is skipped.
pub fn python_and_capture() -> Option<(PathBuf, PathBuf)> {
    let python = repo().join("target/pyenv/bin/python");
    if !python.exists() {
        println!(
            "skipped: pyarrow is not installed (no {}; scripts/pyenv.sh makes it)",
            python.display()
        );
        return None;
    }
    let capture = repo().join("../shared/captures/pathspider_real.pcap");
    if !capture.exists() {
        println!("skipped: no capture at {}", capture.display());
        return None;
    }
    Some((python, capture))
}

/// Runs the Python program `script` with `args`; each line it prints is
/// one reader's JSON object, returned as (its `reader`, the rest). `None`
/// after printing why when the venv's Python is gone.
pub fn run_readers(python: &Path, script: &str, args: &[&OsStr]) -> Option<Vec<(String, Value)>> {
    let out = match Command::new(python).arg("-c").arg(script).args(args).output() {
        Ok(out) => out,
        // A venv whose base Python is gone (hidden on a fresh machine).
        Err(e) if e.kind() == ErrorKind::NotFound => {
            println!("skipped: python is not installed ({}: {e})", python.display());
            return None;
        }
        Err(e) => panic!("{}: {e}", python.display()),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the Python readers failed:\n{}{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut readers = Vec::new();
    for line in stdout.lines() {
        let mut got: Value = serde_json::from_str(line).unwrap();
        let reader = got["reader"].as_str().unwrap().to_string();
        got.as_object_mut().unwrap().remove("reader");
        println!("{reader}: {got}");
        readers.push((reader, got));
    }
    Some(readers)
}
