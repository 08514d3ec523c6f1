//! Grouped packet vectors as Parquet: [`ParquetGpvs`], a
//! [`Sink<Gpv>`](clarion_sinks::Sink), and [`read_gpvs`], its inverse.
//!
//! One row per GPV: the header's fields as columns, the packets' features
//! as list columns of the same length (`packet_count`). Times are
//! absolute (`start_ns + delta`): an analyst's `unnest(ts_ns)` gives each
//! packet's time with no arithmetic, and [`read_gpvs`] recomputes the
//! deltas. The schema name `clarion.gpv/1` is the file's key-value
//! metadata `clarion.schema`.
//!
//! | column | Arrow type | Parquet physical (logical) | null |
//! |---|---|---|---|
//! | `src_ip`, `dst_ip` | Utf8 | BYTE_ARRAY (STRING) | no |
//! | `src_port`, `dst_port` | UInt16 | INT32 (INT(16, unsigned)) | when the flow has no ports |
//! | `proto` | UInt8 | INT32 (INT(8, unsigned)) | no |
//! | `vlan` | UInt16 | INT32 (INT(16, unsigned)) | when untagged |
//! | `vni` | UInt32 | INT32 (INT(32, unsigned)) | when the flow came out of no tunnel |
//! | `community_id` | Utf8 | BYTE_ARRAY (STRING) | no |
//! | `interface` | UInt16 | INT32 (INT(16, unsigned)) | no |
//! | `start_ns` | Timestamp(ns, "UTC") | INT64 (TIMESTAMP(NANOS, UTC)) | no |
//! | `packet_count` | UInt32 | INT32 (INT(32, unsigned)) | no |
//! | `cause` | Utf8 ([`EvictCause::name`]) | BYTE_ARRAY (STRING), dictionary-encoded | no |
//! | `ts_ns` | List<Timestamp(ns, "UTC")> | LIST of INT64 (TIMESTAMP(NANOS, UTC)) | no (nor its items) |
//! | `size` | List<UInt16> | LIST of INT32 (INT(16, unsigned)) | no (nor its items) |
//! | `tcp_flags` | List<UInt8> | LIST of INT32 (INT(8, unsigned)) | no (nor its items) |
//! | `seq`, `ack` | List<UInt32> | LIST of INT32 (INT(32, unsigned)) | the list no; an item where the packet had no TCP header |
//!
//! The flow key's columns are those of the flow records (`key.rs`),
//! so a join on `community_id` or on the five-tuple matches a GPV to its
//! flow record. Item `j` of every list column is packet `j` of the GPV.
//!
//! # Buffering and cost
//!
//! As the flow-record writer: `write` appends to Arrow builders (one
//! `community_id` SHA-1 per GPV, the rest copies), and the writing is
//! `file.rs`'s `Table`: every `row_group_rows` GPVs become one row group,
//! and flushing never splits one. Row groups count GPVs,
//! [`DEFAULT_GPV_ROW_GROUP_ROWS`] of them: a GPV holds up to 28 packets
//! with the default cache (narrow 4 + wide 24), so 16 Ki GPVs are about
//! as many values as 64 Ki flow records. Memory is bounded by one row
//! group encoded plus one of builders. The file is readable only after
//! `finish` wrote the footer (see the crate's documentation).
//!
//! Refused, closing the sink (the seam's contract): a GPV whose
//! `packet_count` is not its number of packets, or one with a packet time
//! after 2262-04-11 (a Parquet nanosecond timestamp is a signed 64-bit
//! integer).

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{
    ListBuilder, StringBuilder, TimestampNanosecondBuilder, UInt16Builder, UInt32Builder, UInt8Builder,
};
use arrow_array::{
    Array, ArrayRef, ListArray, RecordBatch, StringArray, TimestampNanosecondArray, UInt16Array, UInt32Array,
    UInt8Array,
};
use arrow_schema::{DataType, Field, FieldRef, Schema, SchemaRef, TimeUnit};
use clarion_gpv::{EvictCause, Gpv, GpvHeader, PacketFeatures, TcpSeq};
use clarion_records::community_id;
use clarion_sinks::{Sink, SinkError};

use crate::file::{self, column, Builders, Table};
use crate::key::{key_fields, KeyColumns, KeyReader};
use crate::ParquetError;

/// The schema name in the key-value metadata `clarion.schema`.
pub const GPV_SCHEMA: &str = "clarion.gpv/1";

/// GPVs in a row group unless the writer is told otherwise.
pub const DEFAULT_GPV_ROW_GROUP_ROWS: usize = 16_384;

const UTC: &str = "UTC";

fn timestamp() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some(UTC.into()))
}

/// The item field of a list column (Arrow's usual name `item`); the
/// builders are given the same field so their arrays match the schema.
fn item(data_type: DataType, nullable: bool) -> FieldRef {
    Arc::new(Field::new("item", data_type, nullable))
}

fn list(name: &str, item: &FieldRef) -> Field {
    Field::new(name, DataType::List(item.clone()), false)
}

/// The Arrow schema of a GPV file, `clarion.gpv/1` (the module's table).
pub fn gpv_schema() -> SchemaRef {
    let mut fields = Vec::from(key_fields());
    fields.extend([
        Field::new("community_id", DataType::Utf8, false),
        Field::new("interface", DataType::UInt16, false),
        Field::new("start_ns", timestamp(), false),
        Field::new("packet_count", DataType::UInt32, false),
        Field::new("cause", DataType::Utf8, false),
        list("ts_ns", &item(timestamp(), false)),
        list("size", &item(DataType::UInt16, false)),
        list("tcp_flags", &item(DataType::UInt8, false)),
        list("seq", &item(DataType::UInt32, true)),
        list("ack", &item(DataType::UInt32, true)),
    ]);
    Arc::new(Schema::new(fields))
}

/// Creates the file at `path` and starts a GPV Parquet stream in it (row
/// groups of [`DEFAULT_GPV_ROW_GROUP_ROWS`] GPVs).
pub fn create_gpvs(path: &Path) -> Result<ParquetGpvs<File>, ParquetError> {
    let out = file::create_file(path)?;
    ParquetGpvs::new(out, path.display().to_string())
}

/// One builder per column of [`gpv_schema`], in its order.
struct Columns {
    key: KeyColumns,
    community_id: StringBuilder,
    interface: UInt16Builder,
    start_ns: TimestampNanosecondBuilder,
    packet_count: UInt32Builder,
    cause: StringBuilder,
    ts_ns: ListBuilder<TimestampNanosecondBuilder>,
    size: ListBuilder<UInt16Builder>,
    tcp_flags: ListBuilder<UInt8Builder>,
    seq: ListBuilder<UInt32Builder>,
    ack: ListBuilder<UInt32Builder>,
    rows: usize,
}

impl Builders for Columns {
    type Row = Gpv;
    const SCHEMA_NAME: &'static str = GPV_SCHEMA;

    fn schema() -> SchemaRef {
        gpv_schema()
    }

    fn new() -> Columns {
        Columns {
            key: KeyColumns::new(),
            community_id: StringBuilder::new(),
            interface: UInt16Builder::new(),
            start_ns: TimestampNanosecondBuilder::new().with_timezone(UTC),
            packet_count: UInt32Builder::new(),
            cause: StringBuilder::new(),
            ts_ns: ListBuilder::new(TimestampNanosecondBuilder::new().with_timezone(UTC))
                .with_field(item(timestamp(), false)),
            size: ListBuilder::new(UInt16Builder::new()).with_field(item(DataType::UInt16, false)),
            tcp_flags: ListBuilder::new(UInt8Builder::new()).with_field(item(DataType::UInt8, false)),
            seq: ListBuilder::new(UInt32Builder::new()).with_field(item(DataType::UInt32, true)),
            ack: ListBuilder::new(UInt32Builder::new()).with_field(item(DataType::UInt32, true)),
            rows: 0,
        }
    }

    /// Refuses a GPV whose `packet_count` is not its number of packets,
    /// and one with a time after 2262-04-11.
    fn append(&mut self, gpv: &Gpv) -> Result<(), String> {
        let h = &gpv.header;
        if usize::try_from(h.packet_count).ok() != Some(gpv.packets.len()) {
            return Err(format!(
                "a GPV's packet_count {} is not its {} packets",
                h.packet_count,
                gpv.packets.len()
            ));
        }
        let last = h
            .start_ns
            .checked_add(u64::from(gpv.packets.iter().map(|p| p.delta).max().unwrap_or(0)));
        let (Ok(start), Some(Ok(_))) = (i64::try_from(h.start_ns), last.map(i64::try_from)) else {
            return Err(format!(
                "a GPV starting at {} ns has times after 2262-04-11, beyond a Parquet nanosecond timestamp",
                h.start_ns
            ));
        };
        self.push(gpv, start);
        Ok(())
    }

    fn len(&self) -> usize {
        self.rows
    }

    /// The rows so far as a batch; the builders start empty again.
    fn finish_batch(&mut self, schema: &SchemaRef) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let mut columns = Vec::from(self.key.finish());
        columns.extend::<[ArrayRef; 10]>([
            Arc::new(self.community_id.finish()),
            Arc::new(self.interface.finish()),
            Arc::new(self.start_ns.finish()),
            Arc::new(self.packet_count.finish()),
            Arc::new(self.cause.finish()),
            Arc::new(self.ts_ns.finish()),
            Arc::new(self.size.finish()),
            Arc::new(self.tcp_flags.finish()),
            Arc::new(self.seq.finish()),
            Arc::new(self.ack.finish()),
        ]);
        self.rows = 0;
        RecordBatch::try_new(schema.clone(), columns)
    }
}

impl Columns {
    /// Appends one row; `start` and every packet time were checked to fit
    /// an `i64`.
    fn push(&mut self, gpv: &Gpv, start: i64) {
        let h = &gpv.header;
        let k = &h.key;
        self.key.append(k);
        self.community_id.append_value(community_id(k, 0));
        self.interface.append_value(h.interface);
        self.start_ns.append_value(start);
        self.packet_count.append_value(h.packet_count);
        self.cause.append_value(h.cause.name());
        for p in &gpv.packets {
            // start + u32 delta cannot overflow i64: the caller checked the
            // largest delta.
            self.ts_ns.values().append_value(start + i64::from(p.delta));
            self.size.values().append_value(p.size);
            self.tcp_flags.values().append_value(p.tcp_flags);
            self.seq.values().append_option(p.tcp.map(|t| t.seq));
            self.ack.values().append_option(p.tcp.map(|t| t.ack));
        }
        self.ts_ns.append(true);
        self.size.append(true);
        self.tcp_flags.append(true);
        self.seq.append(true);
        self.ack.append(true);
        self.rows += 1;
    }
}

/// Writes GPVs as a Parquet file (the module's schema) to `W`.
///
/// `W` needs no `Seek`: Parquet writes its footer last, so a pipe works.
/// Dropping the sink without `finish` leaves a file without a footer,
/// which no reader opens.
pub struct ParquetGpvs<W: Write + Send> {
    table: Table<W, Columns>,
}

impl<W: Write + Send> ParquetGpvs<W> {
    /// Starts a file on `out` (writes the magic bytes), with row groups of
    /// [`DEFAULT_GPV_ROW_GROUP_ROWS`] GPVs; `destination` names it in errors.
    pub fn new(out: W, destination: impl Into<String>) -> Result<Self, ParquetError> {
        Self::with_row_group_rows(out, destination, DEFAULT_GPV_ROW_GROUP_ROWS)
    }

    /// As [`ParquetGpvs::new`] with row groups of `rows` GPVs (at least 1).
    pub fn with_row_group_rows(
        out: W,
        destination: impl Into<String>,
        rows: usize,
    ) -> Result<Self, ParquetError> {
        let table = Table::start(out, destination.into(), rows)?;
        Ok(ParquetGpvs { table })
    }

    /// Row groups written to `W` so far (all of them after `finish`).
    pub fn row_groups(&self) -> usize {
        self.table.row_groups()
    }

    /// The destination (after `finish` returned `Ok` it holds the whole
    /// file: a file in memory for tests).
    pub fn inner(&self) -> &W {
        self.table.inner()
    }
}

impl<W: Write + Send> Sink<Gpv> for ParquetGpvs<W> {
    fn write(&mut self, gpv: &Gpv) -> Result<(), SinkError> {
        self.table.write(gpv)
    }

    /// Hands the buffered GPVs to the encoder and pushes finished row
    /// groups to `W`. The file stays unreadable until `finish`.
    fn flush(&mut self) -> Result<(), SinkError> {
        self.table.flush()
    }

    /// Writes the last row group and the footer: the file is complete.
    fn finish(&mut self) -> Result<(), SinkError> {
        self.table.finish()
    }

    fn destination(&self) -> &str {
        self.table.destination()
    }
}

/// Reads a finished GPV file back into GPVs, in file order (the order
/// they were written: the cache's eviction order).
///
/// Deltas are `ts_ns - start_ns`. The error says when the file has no
/// footer (a run still writing it, or one killed before `finish`), and
/// when it is Parquet but not `clarion.gpv/1` or its rows break the
/// schema's rules (lists of unequal lengths, a time before the start).
pub fn read_gpvs(path: &Path) -> Result<Vec<Gpv>, ParquetError> {
    file::read(path, GPV_SCHEMA, decode_batch)
}

/// A list column and its items as an array of type `T`.
fn list_column<'a, T: Array + 'static>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<(&'a ListArray, &'a T), String> {
    let l = column::<ListArray>(batch, name)?;
    let items = l
        .values()
        .as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| format!("column {name} holds {}", l.values().data_type()))?;
    Ok((l, items))
}

fn decode_batch(b: &RecordBatch, out: &mut Vec<Gpv>) -> Result<(), String> {
    let keys = KeyReader::new(b)?;
    let interface = column::<UInt16Array>(b, "interface")?;
    let start_ns = column::<TimestampNanosecondArray>(b, "start_ns")?;
    let packet_count = column::<UInt32Array>(b, "packet_count")?;
    let cause = column::<StringArray>(b, "cause")?;
    let (ts_list, ts) = list_column::<TimestampNanosecondArray>(b, "ts_ns")?;
    let (size_list, size) = list_column::<UInt16Array>(b, "size")?;
    let (flags_list, flags) = list_column::<UInt8Array>(b, "tcp_flags")?;
    let (seq_list, seq) = list_column::<UInt32Array>(b, "seq")?;
    let (ack_list, ack) = list_column::<UInt32Array>(b, "ack")?;
    for i in 0..b.num_rows() {
        let key = keys.key(i)?;
        let start = start_ns.value(i);
        let start_u = u64::try_from(start).map_err(|_| format!("row {i}: a start before 1970"))?;
        let cause = EvictCause::ALL
            .into_iter()
            .find(|c| c.name() == cause.value(i))
            .ok_or_else(|| format!("row {i}: cause {:?}", cause.value(i)))?;
        let count = packet_count.value(i);
        // Item j of every list is packet j: the lists' ranges of items
        // (offsets into their own item arrays) must all hold `count`.
        let range = |l: &ListArray, name: &str| {
            let o = l.value_offsets();
            let (lo, hi) = (o[i], o[i + 1]);
            let (lo, hi) = (
                usize::try_from(lo).map_err(|_| format!("row {i}: {name} offsets"))?,
                usize::try_from(hi).map_err(|_| format!("row {i}: {name} offsets"))?,
            );
            if l.is_null(i) || hi.checked_sub(lo) != usize::try_from(count).ok() {
                return Err(format!(
                    "row {i}: packet_count is {count} but {name} holds {} items",
                    hi.saturating_sub(lo)
                ));
            }
            Ok((lo, hi - lo))
        };
        let (t0, n) = range(ts_list, "ts_ns")?;
        let (s0, _) = range(size_list, "size")?;
        let (f0, _) = range(flags_list, "tcp_flags")?;
        let (q0, _) = range(seq_list, "seq")?;
        let (a0, _) = range(ack_list, "ack")?;
        let mut packets = Vec::with_capacity(n);
        for j in 0..n {
            let t = ts.value(t0 + j);
            let delta = t
                .checked_sub(start)
                .and_then(|d| u32::try_from(d).ok())
                .ok_or_else(|| {
                    format!("row {i}: packet {j} at {t} ns is not within 2^32 ns after start_ns {start}")
                })?;
            let tcp = match (seq.is_valid(q0 + j), ack.is_valid(a0 + j)) {
                (true, true) => Some(TcpSeq {
                    seq: seq.value(q0 + j),
                    ack: ack.value(a0 + j),
                }),
                (false, false) => None,
                _ => return Err(format!("row {i}: packet {j} has one of seq and ack")),
            };
            packets.push(PacketFeatures {
                delta,
                size: size.value(s0 + j),
                tcp_flags: flags.value(f0 + j),
                tcp,
            });
        }
        out.push(Gpv {
            header: GpvHeader {
                key,
                interface: interface.value(i),
                start_ns: start_u,
                packet_count: count,
                cause,
            },
            packets,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_wire::FlowKey;
    use std::path::PathBuf;

    fn gpv(start_ns: u64, deltas: &[u32]) -> Gpv {
        let key = FlowKey::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            6,
            Some((1234, 80)),
            None,
        );
        Gpv {
            header: GpvHeader {
                key,
                interface: 3,
                start_ns,
                packet_count: deltas.len() as u32,
                cause: EvictCause::Flush,
            },
            packets: deltas
                .iter()
                .map(|&delta| PacketFeatures {
                    delta,
                    size: 60,
                    tcp_flags: 0x10,
                    tcp: Some(TcpSeq { seq: 1, ack: 2 }),
                })
                .collect(),
        }
    }

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!(
            "clarion-parquet-gpv-{}-{name}.parquet",
            std::process::id()
        ))
    }

    #[test]
    fn the_sink_is_send_for_the_host() {
        fn send<T: Send>() {}
        send::<ParquetGpvs<File>>();
        let boxed: Box<dyn Sink<Gpv>> = Box::new(ParquetGpvs::new(Vec::new(), "memory").unwrap());
        assert_eq!(boxed.destination(), "memory");
    }

    #[test]
    fn a_file_is_readable_only_after_finish_and_the_error_says_so() {
        let path = temp("unfinished");
        let mut sink = create_gpvs(&path).unwrap();
        sink.write(&gpv(1, &[0, 5])).unwrap();
        sink.flush().unwrap();
        let e = read_gpvs(&path).unwrap_err();
        assert!(matches!(e, ParquetError::Read { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains(&path.display().to_string()) && msg.contains("finished"),
            "{msg}"
        );
        sink.finish().unwrap();
        assert_eq!(read_gpvs(&path).unwrap(), vec![gpv(1, &[0, 5])]);
        assert!(matches!(sink.write(&gpv(2, &[0])), Err(SinkError::Closed { .. })));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn create_names_the_path_it_cannot_create() {
        let e = create_gpvs(Path::new("/nonexistent-dir/gpvs.parquet"))
            .err()
            .unwrap();
        assert!(matches!(e, ParquetError::Create { .. }));
        assert!(e.to_string().contains("/nonexistent-dir/gpvs.parquet"), "{e}");
    }

    #[test]
    fn a_time_past_2262_is_refused_and_closes_the_sink() {
        let max = i64::MAX as u64;
        // The last packet, not the start, passes the limit.
        let mut sink = ParquetGpvs::new(Vec::new(), "memory").unwrap();
        sink.write(&gpv(1, &[0])).unwrap();
        let e = sink.write(&gpv(max - 10, &[0, 11])).unwrap_err();
        assert!(
            matches!(&e, SinkError::Encode { destination, .. } if destination == "memory")
                && e.to_string().contains("2262"),
            "{e}"
        );
        assert!(matches!(sink.flush(), Err(SinkError::Closed { .. })));

        // Exactly the limit fits.
        let mut sink = ParquetGpvs::new(Vec::new(), "memory").unwrap();
        sink.write(&gpv(max - 10, &[0, 10])).unwrap();
        sink.finish().unwrap();
        let path = temp("largest");
        std::fs::write(&path, sink.inner()).unwrap();
        assert_eq!(read_gpvs(&path).unwrap(), vec![gpv(max - 10, &[0, 10])]);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_gpv_whose_count_is_not_its_packets_is_refused() {
        let mut sink = ParquetGpvs::new(Vec::new(), "memory").unwrap();
        let mut g = gpv(1, &[0, 1]);
        g.header.packet_count = 3;
        let e = sink.write(&g).unwrap_err();
        assert!(e.to_string().contains("packet_count 3"), "{e}");
        assert!(matches!(sink.finish(), Err(SinkError::Closed { .. })));
    }

    #[test]
    fn a_closed_reader_is_a_broken_pipe_and_closes_the_sink() {
        let mut sink = ParquetGpvs::with_row_group_rows(file::BrokenPipe, "stdout", 1).unwrap();
        sink.write(&gpv(1, &[0])).unwrap();
        let e = sink.flush().unwrap_err();
        assert!(matches!(&e, SinkError::BrokenPipe), "{e:?}");
        assert!(matches!(sink.write(&gpv(2, &[0])), Err(SinkError::BrokenPipe)));
    }

    /// A file of the right schema name whose rows break its rules: the
    /// columns built directly, bypassing the sink's checks.
    fn bad_file(name: &str, g: &Gpv) -> PathBuf {
        let path = temp(name);
        let schema = gpv_schema();
        let mut w = file::start(
            file::create_file(&path).unwrap(),
            "bad",
            schema.clone(),
            GPV_SCHEMA,
            8,
        )
        .unwrap();
        let mut c = Columns::new();
        c.push(g, i64::try_from(g.header.start_ns).unwrap());
        w.write(&c.finish_batch(&schema).unwrap()).unwrap();
        w.close().unwrap();
        path
    }

    #[test]
    fn a_row_breaking_the_schema_is_named_by_the_reader() {
        let mut g = gpv(1, &[0, 1]);
        g.header.packet_count = 3;
        let path = bad_file("count", &g);
        let e = read_gpvs(&path).unwrap_err();
        assert!(matches!(e, ParquetError::Schema { .. }), "{e:?}");
        assert!(
            e.to_string()
                .contains("row 0: packet_count is 3 but ts_ns holds 2"),
            "{e}"
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_flow_record_file_is_not_a_gpv_file() {
        let path = temp("flows");
        let mut sink = crate::create(&path).unwrap();
        sink.finish().unwrap();
        let e = read_gpvs(&path).unwrap_err();
        assert!(matches!(e, ParquetError::Schema { .. }), "{e:?}");
        assert!(
            e.to_string().contains("clarion.flow/1") && e.to_string().contains("clarion.gpv/1"),
            "{e}"
        );
        std::fs::remove_file(&path).unwrap();
    }
}
