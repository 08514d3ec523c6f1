//! The Parquet GPV file of a real capture, read by real Python readers
//! (pyarrow and DuckDB) with no Clarion code: each reports the rows
//! (GPVs), the packets twice (the sum of `packet_count`, and the sum of
//! the `ts_ns` lists' lengths), the bytes (the sum of the unnested
//! `size`s), the packets without TCP numbers (null `seq` items), the
//! first and last packet times (as integer nanoseconds) and the schema
//! name; all must equal the totals of the parsed packets themselves
//! (counted before the cache grouped them), which the GPVs must hold too.
//!
//! The GPVs are built from `shared/captures/pathspider_real.pcap`, parsed
//! with `clarion-wire`, by `clarion_gpv::GpvCache` with its default
//! configuration (*Flow's), every packet pushed and the cache finished,
//! as the host does.
//!
//! The readers live in `target/pyenv` (`scripts/pyenv.sh`, run by
//! `scripts/deps.sh`); without it, or without the capture, the test says
//! `skipped: ...` and passes.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use clarion_capture::{CaptureFile, PacketSource};
use clarion_gpv::{CacheConfig, Gpv, GpvCache, PacketFeatures};
use clarion_sinks::Sink;
use clarion_wire::parse_frame;

const READERS: &str = r#"
import json, sys
path = sys.argv[1]
out = []

import pyarrow.parquet as pq, pyarrow.compute as pc, pyarrow as pa
t = pq.read_table(path)
meta = pq.read_metadata(path).metadata or {}
ts = pc.list_flatten(t["ts_ns"]).cast(pa.int64())
out.append({
    "reader": "pyarrow",
    "rows": t.num_rows,
    "packets": pc.sum(t["packet_count"]).as_py(),
    "list_packets": pc.sum(pc.list_value_length(t["ts_ns"])).as_py(),
    "bytes": pc.sum(pc.list_flatten(t["size"])).as_py(),
    "no_tcp": pc.list_flatten(t["seq"]).null_count,
    "min_ts_ns": pc.min(ts).as_py(),
    "max_ts_ns": pc.max(ts).as_py(),
    "schema": meta.get(b"clarion.schema", b"").decode(),
})

import duckdb
con = duckdb.connect()
rows, packets, list_packets = con.execute(
    "select count(*), sum(packet_count), sum(len(ts_ns)) from read_parquet($path)",
    {"path": path},
).fetchone()
nbytes, = con.execute(
    "select sum(s) from (select unnest(size) as s from read_parquet($path))",
    {"path": path},
).fetchone()
no_tcp, = con.execute(
    "select count(*) filter (where q is null) from (select unnest(seq) as q from read_parquet($path))",
    {"path": path},
).fetchone()
lo, hi = con.execute(
    "select min(epoch_ns(t)), max(epoch_ns(t)) from (select unnest(ts_ns) as t from read_parquet($path))",
    {"path": path},
).fetchone()
schema = con.execute(
    "select decode(value) from parquet_kv_metadata($path) where decode(key) = 'clarion.schema'",
    {"path": path},
).fetchone()
out.append({"reader": "duckdb", "rows": rows, "packets": int(packets),
            "list_packets": int(list_packets), "bytes": int(nbytes), "no_tcp": no_tcp,
            "min_ts_ns": int(lo), "max_ts_ns": int(hi), "schema": schema[0] if schema else ""})

for o in out:
    print(json.dumps(o))
"#;

/// What the parsed packets themselves say, before any grouping.
#[derive(Debug, PartialEq, Eq)]
struct Totals {
    packets: u64,
    bytes: u64,
    no_tcp: u64,
    min_ts_ns: u64,
    max_ts_ns: u64,
}

/// The capture's GPVs, as the host's cache evicts them, and the totals of
/// the packets pushed.
fn gpvs_of(capture: &Path) -> (Vec<Gpv>, Totals) {
    let mut file = CaptureFile::open(capture).unwrap();
    let mut cache = GpvCache::new(CacheConfig::default()).unwrap();
    let mut gpvs = Vec::new();
    let mut t = Totals {
        packets: 0,
        bytes: 0,
        no_tcp: 0,
        min_ts_ns: u64::MAX,
        max_ts_ns: 0,
    };
    while let Some(p) = file.next_packet() {
        let p = p.unwrap();
        let Ok(rec) = parse_frame(p.link, p.data, p.ts_ns, p.orig_len) else {
            continue;
        };
        t.packets += 1;
        t.bytes += u64::from(PacketFeatures::size_of(rec.size));
        t.no_tcp += u64::from(rec.tcp.is_none());
        t.min_ts_ns = t.min_ts_ns.min(rec.ts_ns);
        t.max_ts_ns = t.max_ts_ns.max(rec.ts_ns);
        cache.push(&rec, &mut gpvs);
    }
    cache.finish(&mut gpvs);
    (gpvs, t)
}

#[test]
fn python_readers_see_the_gpvs_written() {
    let Some((python, capture)) = common::python_and_capture() else {
        return;
    };
    let (gpvs, totals) = gpvs_of(&capture);
    assert!(gpvs.len() > 1000, "{} GPVs", gpvs.len());
    // The GPVs hold every packet pushed, with its size, time and TCP
    // numbers or their absence.
    let times = || gpvs.iter().flat_map(|g| g.timed().map(|(t, _)| t));
    let of_gpvs = Totals {
        packets: gpvs.iter().map(|g| u64::from(g.header.packet_count)).sum(),
        bytes: gpvs.iter().map(Gpv::bytes).sum(),
        no_tcp: gpvs
            .iter()
            .flat_map(|g| &g.packets)
            .filter(|p| p.tcp.is_none())
            .count() as u64,
        min_ts_ns: times().min().unwrap(),
        max_ts_ns: times().max().unwrap(),
    };
    assert_eq!(of_gpvs, totals);

    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("pyarrow-gpv-{}.parquet", std::process::id()));
    // Small row groups so that the readers cross several.
    let file = std::fs::File::create(&path).unwrap();
    let mut sink = clarion_parquet::ParquetGpvs::with_row_group_rows(file, "test", 2048).unwrap();
    for g in &gpvs {
        sink.write(g).unwrap();
    }
    sink.finish().unwrap();
    assert!(sink.row_groups() > 1);
    // For the record, not asserted: the size beside the .gpv encoding's.
    let mut codec = clarion_gpv::GpvWriter::new(Vec::new()).unwrap();
    for g in &gpvs {
        codec.write(g).unwrap();
    }
    println!(
        "{} GPVs: Parquet {} bytes, .gpv {} bytes",
        gpvs.len(),
        std::fs::metadata(&path).unwrap().len(),
        codec.finish().unwrap().len()
    );

    let want = serde_json::json!({
        "rows": gpvs.len(),
        "packets": totals.packets,
        "list_packets": totals.packets,
        "bytes": totals.bytes,
        "no_tcp": totals.no_tcp,
        "min_ts_ns": totals.min_ts_ns,
        "max_ts_ns": totals.max_ts_ns,
        "schema": "clarion.gpv/1",
    });
    println!("rust: {want}");

    let Some(got) = common::run_readers(&python, READERS, &[path.as_os_str()]) else {
        return;
    };
    let mut readers = Vec::new();
    for (reader, got) in got {
        assert_eq!(got, want, "{reader} read other totals than were written");
        readers.push(reader);
    }
    assert_eq!(readers, ["pyarrow", "duckdb"]);
    // And read_gpvs gives the GPVs themselves back.
    assert_eq!(clarion_parquet::read_gpvs(&path).unwrap(), gpvs);
    std::fs::remove_file(&path).unwrap();
}
