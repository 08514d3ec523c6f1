//! The Parquet file of a real capture's flows, read by real Python
//! readers (pyarrow, DuckDB, pandas, Polars) with no Clarion code: each
//! reports the row count, the sums of `packets`, `bytes` and `first_ns`
//! (as integer nanoseconds, summed exactly: every reader must keep all
//! nine digits), the
//! distinct Community IDs, the flows without ports, the rows of one
//! source address (a string filter) and the schema name in the metadata;
//! all must equal the totals computed here from the records written.
//!
//! The records are folded here per `FlowKey` from
//! `shared/captures/pathspider_real.pcap` parsed with `clarion-wire`:
//! one record per key, which is all a Parquet reader test needs, and
//! three copies with nanoseconds in their times.
//!
//! The readers live in `target/pyenv` (`scripts/pyenv.sh`, run by
//! `scripts/deps.sh`); without it, or without the capture, the test says
//! `skipped: ...` and passes.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use clarion_capture::{CaptureFile, PacketSource};
use clarion_records::FlowRecord;
use clarion_sinks::Sink;
use clarion_wire::parse_frame;

const READERS: &str = r#"
import json, sys
path = sys.argv[1]
src = sys.argv[2]
out = []

import pyarrow.parquet as pq, pyarrow.compute as pc, pyarrow as pa
t = pq.read_table(path)
meta = pq.read_metadata(path).metadata or {}
out.append({
    "reader": "pyarrow",
    "rows": t.num_rows,
    "packets": pc.sum(t["packets"]).as_py(),
    "bytes": pc.sum(t["bytes"]).as_py(),
    "first_ns": str(sum(t["first_ns"].cast(pa.int64()).to_pylist())),
    "community_ids": pc.count_distinct(t["community_id"]).as_py(),
    "no_ports": t["src_port"].null_count,
    "from_src": pc.sum(pc.equal(t["src_ip"], src)).as_py(),
    "schema": meta.get(b"clarion.schema", b"").decode(),
})

import duckdb
con = duckdb.connect()
rows, packets, nbytes, first, ids, no_ports, from_src = con.execute(
    "select count(*), sum(packets), sum(bytes), sum(epoch_ns(first_ns)),"
    " count(distinct community_id), count(*) filter (where src_port is null),"
    " count(*) filter (where src_ip = $src) from read_parquet($path)",
    {"path": path, "src": src},
).fetchone()
schema = con.execute(
    "select decode(value) from parquet_kv_metadata($path) where decode(key) = 'clarion.schema'",
    {"path": path},
).fetchone()
out.append({"reader": "duckdb", "rows": rows, "packets": int(packets), "bytes": int(nbytes),
            "first_ns": str(int(first)), "community_ids": ids, "no_ports": no_ports,
            "from_src": from_src, "schema": schema[0] if schema else ""})

import pandas as pd
df = pd.read_parquet(path)
out.append({"reader": "pandas", "rows": len(df), "packets": int(df["packets"].sum()),
            "bytes": int(df["bytes"].sum()),
            "first_ns": str(sum(int(x) for x in df["first_ns"].astype("int64"))),
            "community_ids": int(df["community_id"].nunique()),
            "no_ports": int(df["src_port"].isna().sum()),
            "from_src": int((df["src_ip"] == src).sum())})

import polars as pl
d = pl.read_parquet(path)
out.append({"reader": "polars", "rows": d.height, "packets": int(d["packets"].sum()),
            "bytes": int(d["bytes"].sum()),
            "first_ns": str(sum(d["first_ns"].dt.epoch("ns").to_list())),
            "community_ids": d["community_id"].n_unique(),
            "no_ports": d["src_port"].null_count(),
            "from_src": d.filter(pl.col("src_ip") == src).height,
            "schema": pl.read_parquet_metadata(path).get("clarion.schema", "")})

for o in out:
    print(json.dumps(o))
"#;

/// One record per flow key of the capture, in order of first packet.
fn flows_of(capture: &Path) -> Vec<FlowRecord> {
    let mut file = CaptureFile::open(capture).unwrap();
    let mut flows: HashMap<_, FlowRecord> = HashMap::new();
    while let Some(p) = file.next_packet() {
        let p = p.unwrap();
        let Ok(rec) = parse_frame(p.link, p.data, p.ts_ns, p.orig_len) else {
            continue;
        };
        let flags = rec.tcp.map_or(0, |t| t.flags);
        let one = FlowRecord::of_packet(rec.key, rec.ts_ns, rec.size, flags);
        flows.entry(rec.key).and_modify(|r| r.merge(&one)).or_insert(one);
    }
    let mut records: Vec<FlowRecord> = flows.into_values().collect();
    records.sort_by_key(|r| (r.first_ns, r.key));
    records
}

#[test]
fn python_readers_see_the_records_written() {
    let Some((python, capture)) = common::python_and_capture() else {
        return;
    };
    let mut records = flows_of(&capture);
    assert!(records.len() > 1000, "{} flows", records.len());
    // The capture's times are whole microseconds: three records with odd
    // nanoseconds make a reader that rounds them fail the first_ns sum.
    for (i, r) in records.clone().iter().take(3).enumerate() {
        let mut r = *r;
        r.first_ns += 1 + i as u64 * 333;
        r.last_ns = r.last_ns.max(r.first_ns);
        records.push(r);
    }

    let path =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("pyarrow-{}.parquet", std::process::id()));
    // Small row groups so that the readers cross several.
    let file = std::fs::File::create(&path).unwrap();
    let mut sink = clarion_parquet::ParquetRecords::with_row_group_rows(file, "test", 4096).unwrap();
    for r in &records {
        sink.write(r).unwrap();
    }
    sink.finish().unwrap();
    assert!(sink.row_groups() > 1);

    let src = records[records.len() / 2].src_addr().to_string();
    let want = serde_json::json!({
        "rows": records.len(),
        "packets": records.iter().map(|r| r.packets).sum::<u64>(),
        "bytes": records.iter().map(|r| r.bytes).sum::<u64>(),
        // A string: the sum passes u64 (JSON here has no big integers).
        "first_ns": records.iter().map(|r| u128::from(r.first_ns)).sum::<u128>().to_string(),
        "community_ids": records.iter().map(|r| r.community_id()).collect::<HashSet<_>>().len(),
        "no_ports": records.iter().filter(|r| !r.key.has_ports()).count(),
        "from_src": records.iter().filter(|r| r.src_addr().to_string() == src).count(),
        "schema": "clarion.flow/1",
    });

    let Some(got) = common::run_readers(&python, READERS, &[path.as_os_str(), OsStr::new(&src)]) else {
        return;
    };
    let mut readers = Vec::new();
    for (reader, got) in got {
        let mut want = want.clone();
        if reader == "pandas" {
            // pandas has no call for the file's metadata.
            want.as_object_mut().unwrap().remove("schema");
        }
        assert_eq!(got, want, "{reader} read other totals than were written");
        readers.push(reader);
    }
    assert_eq!(readers, ["pyarrow", "duckdb", "pandas", "polars"]);
    std::fs::remove_file(&path).unwrap();
}
