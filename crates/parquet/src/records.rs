//! Flow records as Parquet: [`ParquetRecords`], a
//! [`Sink<FlowRecord>`](clarion_sinks::Sink), and [`read_records`], its inverse.
//!
//! The schema is [`flow_schema`]'s table.
//!
//! # Buffering and cost
//!
//! `write` appends to Arrow column builders (one `community_id` string
//! and SHA-1 per record, the rest copies); the writing, row groups and
//! closing after errors are `file.rs`'s `Table`: every `row_group_rows`
//! records become one row group, flushes never split one, and memory is
//! bounded by one row group encoded plus one of builders. The file is
//! readable only after `finish` wrote the footer (see the crate's
//! documentation). A reader that went away is `BrokenPipe`, and stays it.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{
    StringBuilder, TimestampNanosecondBuilder, UInt32Builder, UInt64Builder, UInt8Builder,
};
use arrow_array::{
    ArrayRef, RecordBatch, StringArray, TimestampNanosecondArray, UInt32Array, UInt64Array, UInt8Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use clarion_records::{EndReason, FlowRecord, SCHEMA};
use clarion_sinks::{Sink, SinkError};

use crate::file::{self, column, Builders, Table, DEFAULT_ROW_GROUP_ROWS};
use crate::key::{key_fields, KeyColumns, KeyReader};
use crate::ParquetError;

const UTC: &str = "UTC";

/// The Arrow schema of a flow-record file, `clarion.flow/1`.
///
/// The names and order of [`clarion_records::to_json`]; the JSON's
/// `schema` field is the file's key-value metadata `clarion.schema`.
///
/// | column | Arrow type | Parquet physical (logical) | null |
/// |---|---|---|---|
/// | `src_ip`, `dst_ip` | Utf8 | BYTE_ARRAY (STRING) | no |
/// | `src_port`, `dst_port` | UInt16 | INT32 (INT(16, unsigned)) | when the flow has no ports |
/// | `proto` | UInt8 | INT32 (INT(8, unsigned)) | no |
/// | `vlan` | UInt16 | INT32 (INT(16, unsigned)) | when untagged |
/// | `vni` | UInt32 | INT32 (INT(32, unsigned)) | when the flow came out of no tunnel |
/// | `first_ns`, `last_ns` | Timestamp(ns, "UTC") | INT64 (TIMESTAMP(NANOS, UTC)) | no |
/// | `packets`, `bytes` | UInt64 | INT64 (INT(64, unsigned)) | no |
/// | `tcp_flags` | UInt8 | INT32 (INT(8, unsigned)) | no |
/// | `min_size`, `max_size` | UInt32 | INT32 (INT(32, unsigned)) | no |
/// | `end_reason` | Utf8 | BYTE_ARRAY (STRING), dictionary-encoded | no |
/// | `community_id` | Utf8 | BYTE_ARRAY (STRING) | no |
///
/// Addresses are strings, the readable form the JSON has, because that is
/// what people filter on (`WHERE src_ip = '10.0.0.1'`). Times are
/// timestamps rather than integers: pyarrow, pandas and Polars show
/// `datetime[ns, UTC]` and DuckDB `TIMESTAMPTZ_NS` (2.0 reads all nine
/// digits; `epoch_ns(first_ns)` gives the integer back). The price is the
/// signed 64-bit range: a time after 2262-04-11 is refused with an error
/// rather than wrapped. pandas reads a nullable integer column (`src_port`,
/// `vlan`) as float64 unless asked for `dtype_backend="pyarrow"`.
pub fn flow_schema() -> SchemaRef {
    let ts = DataType::Timestamp(TimeUnit::Nanosecond, Some(UTC.into()));
    let mut fields = Vec::from(key_fields());
    fields.extend([
        Field::new("first_ns", ts.clone(), false),
        Field::new("last_ns", ts, false),
        Field::new("packets", DataType::UInt64, false),
        Field::new("bytes", DataType::UInt64, false),
        Field::new("tcp_flags", DataType::UInt8, false),
        Field::new("min_size", DataType::UInt32, false),
        Field::new("max_size", DataType::UInt32, false),
        Field::new("end_reason", DataType::Utf8, false),
        Field::new("community_id", DataType::Utf8, false),
    ]);
    Arc::new(Schema::new(fields))
}

/// Creates the file at `path` and starts a flow-record Parquet stream in
/// it (row groups of [`DEFAULT_ROW_GROUP_ROWS`]).
pub fn create(path: &Path) -> Result<ParquetRecords<File>, ParquetError> {
    let out = file::create_file(path)?;
    ParquetRecords::new(out, path.display().to_string())
}

/// One builder per column of [`flow_schema`], in its order.
struct Columns {
    key: KeyColumns,
    first_ns: TimestampNanosecondBuilder,
    last_ns: TimestampNanosecondBuilder,
    packets: UInt64Builder,
    bytes: UInt64Builder,
    tcp_flags: UInt8Builder,
    min_size: UInt32Builder,
    max_size: UInt32Builder,
    end_reason: StringBuilder,
    community_id: StringBuilder,
    rows: usize,
}

impl Builders for Columns {
    type Row = FlowRecord;
    const SCHEMA_NAME: &'static str = SCHEMA;

    fn schema() -> SchemaRef {
        flow_schema()
    }

    fn new() -> Columns {
        Columns {
            key: KeyColumns::new(),
            first_ns: TimestampNanosecondBuilder::new().with_timezone(UTC),
            last_ns: TimestampNanosecondBuilder::new().with_timezone(UTC),
            packets: UInt64Builder::new(),
            bytes: UInt64Builder::new(),
            tcp_flags: UInt8Builder::new(),
            min_size: UInt32Builder::new(),
            max_size: UInt32Builder::new(),
            end_reason: StringBuilder::new(),
            community_id: StringBuilder::new(),
            rows: 0,
        }
    }

    /// Refuses a time after 2262-04-11 (beyond a Parquet nanosecond
    /// timestamp) rather than wrapping it.
    fn append(&mut self, r: &FlowRecord) -> Result<(), String> {
        let (Ok(first), Ok(last)) = (i64::try_from(r.first_ns), i64::try_from(r.last_ns)) else {
            return Err(format!(
                "the times {}..{} ns are after 2262-04-11, beyond a Parquet nanosecond timestamp",
                r.first_ns, r.last_ns
            ));
        };
        self.push(r, first, last);
        Ok(())
    }

    fn len(&self) -> usize {
        self.rows
    }

    /// The rows so far as a batch; the builders start empty again.
    fn finish_batch(&mut self, schema: &SchemaRef) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let mut columns = Vec::from(self.key.finish());
        columns.extend::<[ArrayRef; 9]>([
            Arc::new(self.first_ns.finish()),
            Arc::new(self.last_ns.finish()),
            Arc::new(self.packets.finish()),
            Arc::new(self.bytes.finish()),
            Arc::new(self.tcp_flags.finish()),
            Arc::new(self.min_size.finish()),
            Arc::new(self.max_size.finish()),
            Arc::new(self.end_reason.finish()),
            Arc::new(self.community_id.finish()),
        ]);
        self.rows = 0;
        RecordBatch::try_new(schema.clone(), columns)
    }
}

impl Columns {
    /// Appends one row; the times were checked to fit an `i64`.
    fn push(&mut self, r: &FlowRecord, first_ns: i64, last_ns: i64) {
        self.key.append(&r.key);
        self.first_ns.append_value(first_ns);
        self.last_ns.append_value(last_ns);
        self.packets.append_value(r.packets);
        self.bytes.append_value(r.bytes);
        self.tcp_flags.append_value(r.tcp_flags);
        self.min_size.append_value(r.min_size);
        self.max_size.append_value(r.max_size);
        self.end_reason.append_value(r.end_reason.name());
        self.community_id.append_value(r.community_id());
        self.rows += 1;
    }
}

/// Writes flow records as a Parquet file (the module's schema) to `W`.
///
/// `W` needs no `Seek`: Parquet writes its footer last, so a pipe works.
/// Dropping the sink without `finish` leaves a file without a footer,
/// which no reader opens.
pub struct ParquetRecords<W: Write + Send> {
    table: Table<W, Columns>,
}

impl<W: Write + Send> ParquetRecords<W> {
    /// Starts a file on `out` (writes the magic bytes), with row groups of
    /// [`DEFAULT_ROW_GROUP_ROWS`]; `destination` names it in errors.
    pub fn new(out: W, destination: impl Into<String>) -> Result<Self, ParquetError> {
        Self::with_row_group_rows(out, destination, DEFAULT_ROW_GROUP_ROWS)
    }

    /// As [`ParquetRecords::new`] with row groups of `rows` rows (at least 1).
    pub fn with_row_group_rows(
        out: W,
        destination: impl Into<String>,
        rows: usize,
    ) -> Result<Self, ParquetError> {
        let table = Table::start(out, destination.into(), rows)?;
        Ok(ParquetRecords { table })
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

impl<W: Write + Send> Sink<FlowRecord> for ParquetRecords<W> {
    fn write(&mut self, record: &FlowRecord) -> Result<(), SinkError> {
        self.table.write(record)
    }

    /// Hands the buffered rows to the encoder and pushes finished row
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

/// Reads a finished flow-record file back into records, in file order.
///
/// The error says when the file has no footer (a run still writing it,
/// or one killed before `finish`), and when it is Parquet but not
/// `clarion.flow/1`.
pub fn read_records(path: &Path) -> Result<Vec<FlowRecord>, ParquetError> {
    file::read(path, SCHEMA, decode_batch)
}

fn decode_batch(b: &RecordBatch, out: &mut Vec<FlowRecord>) -> Result<(), String> {
    let keys = KeyReader::new(b)?;
    let first_ns = column::<TimestampNanosecondArray>(b, "first_ns")?;
    let last_ns = column::<TimestampNanosecondArray>(b, "last_ns")?;
    let packets = column::<UInt64Array>(b, "packets")?;
    let bytes = column::<UInt64Array>(b, "bytes")?;
    let tcp_flags = column::<UInt8Array>(b, "tcp_flags")?;
    let min_size = column::<UInt32Array>(b, "min_size")?;
    let max_size = column::<UInt32Array>(b, "max_size")?;
    let end_reason = column::<StringArray>(b, "end_reason")?;
    let time = |a: &TimestampNanosecondArray, i: usize| {
        u64::try_from(a.value(i)).map_err(|_| format!("row {i}: a time before 1970"))
    };
    for i in 0..b.num_rows() {
        let key = keys.key(i)?;
        let end_reason = EndReason::from_name(end_reason.value(i))
            .ok_or_else(|| format!("row {i}: end_reason {:?}", end_reason.value(i)))?;
        out.push(FlowRecord {
            key,
            first_ns: time(first_ns, i)?,
            last_ns: time(last_ns, i)?,
            packets: packets.value(i),
            bytes: bytes.value(i),
            tcp_flags: tcp_flags.value(i),
            min_size: min_size.value(i),
            max_size: max_size.value(i),
            end_reason,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_wire::FlowKey;
    use parquet::arrow::ArrowWriter;
    use std::path::PathBuf;

    fn record(ts: u64) -> FlowRecord {
        let key = FlowKey::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            6,
            Some((1234, 80)),
            None,
        );
        FlowRecord::of_packet(key, ts, 60, 0x02)
    }

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("clarion-parquet-{}-{name}.parquet", std::process::id()))
    }

    #[test]
    fn the_sink_is_send_for_fan_out() {
        fn send<T: Send>() {}
        send::<ParquetRecords<File>>();
        send::<ParquetRecords<Vec<u8>>>();
    }

    #[test]
    fn a_file_is_readable_only_after_finish_and_the_error_says_so() {
        let path = temp("unfinished");
        let mut sink = create(&path).unwrap();
        sink.write(&record(1)).unwrap();
        sink.flush().unwrap();
        let e = read_records(&path).unwrap_err();
        assert!(matches!(e, ParquetError::Read { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains(&path.display().to_string()) && msg.contains("finished"),
            "{msg}"
        );
        sink.finish().unwrap();
        assert_eq!(read_records(&path).unwrap(), vec![record(1)]);
        assert!(matches!(sink.write(&record(2)), Err(SinkError::Closed { .. })));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn create_names_the_path_it_cannot_create() {
        let path = Path::new("/nonexistent-dir/flows.parquet");
        let e = create(path).err().unwrap();
        assert!(matches!(e, ParquetError::Create { .. }));
        assert!(e.to_string().contains("/nonexistent-dir/flows.parquet"), "{e}");
    }

    #[test]
    fn a_time_past_2262_is_refused_and_closes_the_sink() {
        let mut sink = ParquetRecords::new(Vec::new(), "memory").unwrap();
        sink.write(&record(1)).unwrap();
        let e = sink.write(&record(i64::MAX as u64 + 1)).unwrap_err();
        assert!(
            matches!(e, SinkError::Encode { .. }) && e.to_string().contains("2262"),
            "{e}"
        );
        assert!(matches!(sink.flush(), Err(SinkError::Closed { .. })));
    }

    #[test]
    fn the_largest_time_fits() {
        let mut sink = ParquetRecords::new(Vec::new(), "memory").unwrap();
        sink.write(&record(i64::MAX as u64)).unwrap();
        sink.finish().unwrap();
        let bytes = sink.inner().clone();
        let path = temp("largest");
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(read_records(&path).unwrap(), vec![record(i64::MAX as u64)]);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_closed_reader_is_a_broken_pipe_and_stays_one() {
        let mut sink = ParquetRecords::with_row_group_rows(file::BrokenPipe, "stdout", 1).unwrap();
        // The header and the first row group sit in the encoder's buffer.
        sink.write(&record(1)).unwrap();
        assert!(matches!(sink.flush(), Err(SinkError::BrokenPipe)));
        assert!(matches!(sink.write(&record(2)), Err(SinkError::BrokenPipe)));
        assert!(matches!(sink.finish(), Err(SinkError::BrokenPipe)));
    }

    #[test]
    fn a_parquet_file_of_another_schema_is_named_as_such() {
        let path = temp("other");
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::UInt8, false)]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(UInt8Array::from(vec![1u8]))]).unwrap();
        let mut w = ArrowWriter::try_new(File::create(&path).unwrap(), schema, None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let e = read_records(&path).unwrap_err();
        assert!(matches!(e, ParquetError::Schema { .. }), "{e:?}");
        assert!(e.to_string().contains("clarion.schema"), "{e}");
        std::fs::remove_file(&path).unwrap();
    }
}
