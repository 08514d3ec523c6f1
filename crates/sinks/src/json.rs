//! JSON lines: one compact `clarion.report/1` object per line.

use std::io::{BufWriter, Write};

use clarion_report::Report;

use crate::{ReportSink, SinkError, State};

/// Writes each report as one line of compact JSON (schema
/// [`clarion_report::SCHEMA`]), buffered. Lines are self-contained, so the
/// output can be cut, concatenated or tailed with line tools.
#[derive(Debug)]
pub struct JsonLinesSink<W: Write> {
    out: BufWriter<W>,
    /// One encoded line, reused: encoding can't then leave half a report in
    /// the output, and the buffer's allocation is kept across reports.
    line: Vec<u8>,
    state: State,
}

impl<W: Write> JsonLinesSink<W> {
    pub fn new(out: W) -> Self {
        JsonLinesSink {
            out: BufWriter::new(out),
            line: Vec::with_capacity(512),
            state: State::Open,
        }
    }

    /// The destination, for inspection. Buffered reports are not in it yet.
    pub fn get_ref(&self) -> &W {
        self.out.get_ref()
    }

    /// Flushes and gives back the destination.
    pub fn into_inner(mut self) -> Result<W, SinkError> {
        ReportSink::flush(&mut self)?;
        self.out.into_inner().map_err(|e| SinkError::from(e.into_error()))
    }
}

impl<W: Write> ReportSink for JsonLinesSink<W> {
    fn write(&mut self, report: &Report) -> Result<(), SinkError> {
        self.state.check()?;
        self.line.clear();
        let encoded = serde_json::to_writer(&mut self.line, &report.to_json()).map_err(SinkError::Json);
        self.state.record(encoded)?;
        self.line.push(b'\n');
        let written = self.out.write_all(&self.line).map_err(SinkError::from);
        self.state.record(written)
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        self.state.check()?;
        let flushed = self.out.flush().map_err(SinkError::from);
        self.state.record(flushed)
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use clarion_report::{GroupKey, SCHEMA};
    use serde_json::Value;

    use super::*;
    use crate::test_util::*;

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
        let mut sink = JsonLinesSink::new(Vec::new());
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
        let mut sink = JsonLinesSink::new(Failing(io::ErrorKind::BrokenPipe));
        // Buffered: the failure shows at the latest on flush.
        sink.write(&r).unwrap();
        assert!(matches!(sink.flush(), Err(SinkError::BrokenPipe)));
        assert!(matches!(sink.write(&r), Err(SinkError::BrokenPipe)));
        assert!(matches!(sink.flush(), Err(SinkError::BrokenPipe)));
    }

    #[test]
    fn other_write_errors_are_io() {
        let r = report("e", T0, 10_000_000, GroupKey::default(), &[]);
        let mut sink = JsonLinesSink::new(Failing(io::ErrorKind::PermissionDenied));
        sink.write(&r).unwrap();
        assert!(matches!(sink.flush(), Err(SinkError::Io(e)) if e.kind() == io::ErrorKind::PermissionDenied));
        assert!(matches!(sink.write(&r), Err(SinkError::Io(_))));
    }
}
