//! JSON lines: one compact JSON object per line (reports: `clarion.report/1`).

use std::io::Write;
use std::marker::PhantomData;

use clarion_report::Report;

use crate::{Encoded, Encoder, Writer};

/// An item with a JSON form of one line: its object, compact, no newline.
pub trait JsonLine {
    fn write_json(&self, line: &mut Vec<u8>) -> serde_json::Result<()>;
}

impl JsonLine for Report {
    fn write_json(&self, line: &mut Vec<u8>) -> serde_json::Result<()> {
        serde_json::to_writer(line, &self.to_json())
    }
}

/// One line of compact JSON an item (reports with schema
/// [`clarion_report::SCHEMA`]). Lines are self-contained, so the output
/// can be cut, concatenated or tailed with line tools.
#[derive(Debug)]
pub struct JsonLines<T: ?Sized>(PhantomData<fn(&T)>);

impl<T: JsonLine + ?Sized> Encoder<T> for JsonLines<T> {
    fn encode(&mut self, item: &T, out: &mut Vec<u8>) -> Result<(), String> {
        item.write_json(out).map_err(|e| e.to_string())?;
        out.push(b'\n');
        Ok(())
    }
}

/// JSON lines of `T` to `W`, buffered. One item type per sink, so a
/// caller's `flush` needs no annotation.
pub type JsonLinesSink<W, T = Report> = Encoded<W, JsonLines<T>>;

impl<W: Write, T: ?Sized> Encoded<W, JsonLines<T>> {
    /// Lines to `out`; `destination` names it in errors.
    pub fn new(out: W, destination: impl Into<String>) -> Self {
        Encoded::with(Writer::new(out, destination), JsonLines(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use clarion_report::{GroupKey, SCHEMA};
    use serde_json::Value;

    use super::*;
    use crate::test_util::*;
    use crate::{Sink, SinkError};

    #[test]
    fn lines_parse_back_to_the_reports() {
        let reports = [
            report(
                "heavy_tcp_flows",
                T0,
                10_000_000,
                five_tuple("10.0.128.11", 51068, "10.20.93.10", 5204, 6),
                &[("sum(volume)", 60816.0)],
            ),
            report(
                "udp_burst",
                T0,
                100_000_000,
                GroupKey {
                    src_ip: Some((ip("10.0.128.0"), 24)),
                    ..GroupKey::default()
                },
                &[("sum(volume)", 464400.0), ("avg(size)", f64::NAN)],
            ),
        ];
        let mut sink = JsonLinesSink::new(Vec::new(), "memory");
        for r in &reports {
            sink.write(r).unwrap();
        }
        let out = String::from_utf8(sink.into_inner().unwrap()).unwrap();

        assert!(out.ends_with('\n'));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), reports.len());
        for (line, r) in lines.iter().zip(&reports) {
            assert!(!line.contains(": "), "compact encoding: {line}");
            let v: Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["schema"], SCHEMA);
            assert_eq!(v, r.to_json());
        }
        let second: Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(second["group"]["src_ip"], "10.0.128.0/24");
        assert_eq!(second["values"]["avg(size)"], Value::Null);
    }

    #[test]
    fn broken_pipe_is_distinct_and_sticky() {
        let r = report("e", T0, 10_000_000, GroupKey::default(), &[]);
        let mut sink = JsonLinesSink::new(Failing(io::ErrorKind::BrokenPipe), "stdout");
        // Buffered: the failure shows at the latest on flush.
        sink.write(&r).unwrap();
        assert!(matches!(sink.flush(), Err(SinkError::BrokenPipe)));
        assert!(matches!(sink.write(&r), Err(SinkError::BrokenPipe)));
        assert!(matches!(sink.flush(), Err(SinkError::BrokenPipe)));
    }

    #[test]
    fn other_write_errors_are_io() {
        let r = report("e", T0, 10_000_000, GroupKey::default(), &[]);
        let mut sink = JsonLinesSink::new(Failing(io::ErrorKind::PermissionDenied), "out.jsonl");
        sink.write(&r).unwrap();
        assert!(
            matches!(sink.flush(), Err(SinkError::Io { source, .. }) if source.kind() == io::ErrorKind::PermissionDenied)
        );
        assert!(matches!(sink.write(&r), Err(SinkError::Closed { .. })));
    }
}
