//! Report sinks: where a monitor's [`Report`]s go.
//!
//! A sink renders each report it is given, in the order given, to some
//! destination. Two ship here: [`JsonLinesSink`] (one `clarion.report/1`
//! object per line, for programs) and [`TableSink`] (aligned columns, for
//! people at a terminal). Later sinks (HTTP, a message bus) implement the
//! same [`ReportSink`] trait, so the command line and the controller never
//! need to know which one they hold.
//!
//! The JSON schema and the table layout are documented in `docs/reports.md`.

mod json;
mod table;

use std::io;

use clarion_report::Report;

pub use json::JsonLinesSink;
pub use table::TableSink;

/// Why a sink could not take a report.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The reader went away (EPIPE, e.g. `clarion run ... | head`). Not a
    /// failure of the monitor: the caller should stop producing reports and
    /// exit successfully, without a message, as `grep` and `rg` do.
    #[error("the reader closed the output (broken pipe)")]
    BrokenPipe,
    /// Any other write failure (disk full, permission, a closed socket...).
    #[error("write failed")]
    Io(#[source] io::Error),
    /// A report could not be encoded. Not expected in practice: reports hold
    /// only strings and numbers, and non-finite numbers become `null`.
    #[error("cannot encode report as JSON")]
    Json(#[source] serde_json::Error),
}

impl From<io::Error> for SinkError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::BrokenPipe {
            SinkError::BrokenPipe
        } else {
            SinkError::Io(e)
        }
    }
}

/// A destination for reports: the seam that every output implements.
///
/// # Contract
///
/// - **Order.** `write` is called with reports in the order the producer
///   emits them (for the monitor: by window end, then event, then group,
///   [`Report::sort_key`]). A sink keeps that order; it never reorders,
///   merges or drops reports.
/// - **Buffering.** `write` may buffer. A report is only guaranteed to have
///   reached the destination once a later `flush` returned `Ok`. Callers
///   flush at the end of input, and after each batch of reports when
///   latency matters (live capture), so a reader sees a window's reports
///   when the window closes.
/// - **Stopping.** The return value says whether to go on. `Ok` means the
///   report was accepted. [`SinkError::BrokenPipe`] means nobody is reading
///   any more: stop producing and exit quietly with success. Any other error
///   aborts the run. After an error the sink is finished: further calls
///   return an error again (`BrokenPipe` stays `BrokenPipe`) and write
///   nothing.
/// - **Dropping** a sink without `flush` may lose buffered reports, and any
///   error while writing them is lost too.
/// - **Threads.** Sinks are used from one thread; one that must be shared
///   is wrapped by the caller (e.g. in a `Mutex`) or fed through a channel.
pub trait ReportSink {
    /// Accepts one report.
    fn write(&mut self, report: &Report) -> Result<(), SinkError>;

    /// Pushes every accepted report to the destination.
    fn flush(&mut self) -> Result<(), SinkError>;
}

impl<S: ReportSink + ?Sized> ReportSink for Box<S> {
    fn write(&mut self, report: &Report) -> Result<(), SinkError> {
        (**self).write(report)
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        (**self).flush()
    }
}

impl<S: ReportSink + ?Sized> ReportSink for &mut S {
    fn write(&mut self, report: &Report) -> Result<(), SinkError> {
        (**self).write(report)
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        (**self).flush()
    }
}

/// Collects reports in memory: for tests, and for callers that post-process.
impl ReportSink for Vec<Report> {
    fn write(&mut self, report: &Report) -> Result<(), SinkError> {
        self.push(report.clone());
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// The state both writer-backed sinks share: the first error is kept, so a
/// finished sink keeps saying why it finished (see the contract above).
#[derive(Debug, Default)]
enum State {
    #[default]
    Open,
    BrokenPipe,
    Failed,
}

impl State {
    /// `Err` when an earlier call already failed.
    fn check(&self) -> Result<(), SinkError> {
        match self {
            State::Open => Ok(()),
            State::BrokenPipe => Err(SinkError::BrokenPipe),
            State::Failed => Err(SinkError::Io(io::Error::other(
                "an earlier write to this sink failed",
            ))),
        }
    }

    /// Records the outcome of a call and passes it on.
    fn record<T>(&mut self, r: Result<T, SinkError>) -> Result<T, SinkError> {
        match &r {
            Ok(_) => {}
            Err(SinkError::BrokenPipe) => *self = State::BrokenPipe,
            Err(_) => *self = State::Failed,
        }
        r
    }
}

#[cfg(test)]
pub(crate) mod test_util {
    use std::io::{self, Write};
    use std::net::IpAddr;

    use clarion_report::{Completeness, GroupKey, Name, Origin, Report, Window};

    /// A writer that fails with the given error kind on every write and flush.
    pub struct Failing(pub io::ErrorKind);

    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(self.0))
        }
        fn flush(&mut self) -> io::Result<()> {
            Err(io::Error::from(self.0))
        }
    }

    pub fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// 2026-11-22T06:01:10.840Z
    pub const T0: u64 = 1_795_327_270_840_000_000;

    pub fn report(
        event: &str,
        start_ns: u64,
        len_ns: u64,
        group: GroupKey,
        values: &[(&str, f64)],
    ) -> Report {
        Report {
            capture: None,
            missing_hosts: Vec::new(),
            event: event.into(),
            window: Window {
                start_ns,
                end_ns: start_ns + len_ns,
            },
            group,
            values: values.iter().map(|(k, v)| (Name::from(*k), *v)).collect(),
            origin: Origin {
                host: "demo".into(),
                worker: 0,
            },
            completeness: Completeness {
                packets: 2_500,
                complete: true,
                ..Completeness::default()
            },
        }
    }

    pub fn five_tuple(src: &str, sport: u16, dst: &str, dport: u16, proto: u8) -> GroupKey {
        let full = |a: IpAddr| (a, if a.is_ipv4() { 32 } else { 128 });
        GroupKey {
            src_ip: Some(full(ip(src))),
            dst_ip: Some(full(ip(dst))),
            src_port: Some(Some(sport)),
            dst_port: Some(Some(dport)),
            proto: Some(proto),
            vlan: None,
            vni: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use clarion_report::GroupKey;

    use super::test_util::*;
    use super::*;

    #[test]
    fn io_errors_map_broken_pipe_apart() {
        assert!(matches!(
            SinkError::from(io::Error::from(io::ErrorKind::BrokenPipe)),
            SinkError::BrokenPipe
        ));
        assert!(matches!(
            SinkError::from(io::Error::from(io::ErrorKind::PermissionDenied)),
            SinkError::Io(_)
        ));
    }

    #[test]
    fn vec_and_boxed_sinks_collect_in_order() {
        let a = report(
            "a",
            T0,
            10_000_000,
            five_tuple("10.0.0.1", 1, "10.0.0.2", 2, 6),
            &[],
        );
        let b = report("b", T0, 10_000_000, GroupKey::default(), &[]);
        let mut v: Vec<Report> = Vec::new();
        {
            let mut boxed: Box<dyn ReportSink + '_> = Box::new(&mut v);
            boxed.write(&a).unwrap();
            boxed.write(&b).unwrap();
            boxed.flush().unwrap();
        }
        assert_eq!(v, vec![a, b]);
    }
}
