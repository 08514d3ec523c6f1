//! The sink seam: where everything the pipeline makes goes.
//!
//! One trait, [`Sink<T>`], for every item a host writes out: reports
//! ([`clarion_report::Report`], here), flow records (`clarion-records`), GPVs
//! (`clarion-gpv`). A sink takes items in order, may buffer them, is
//! flushed when latency matters and finished once at the end; it names
//! its destination for messages. The producer never knows which sink it
//! holds: `clarion-outputs` opens one from a destination string.
//!
//! Here too: the one error of the seam ([`SinkError`]), [`FanOut`] (one
//! stream to several sinks), [`Writer`] (a buffered writer under the
//! seam's error rules; [`Latch`], the same rules for a sink that is not
//! over `io::Write`), [`Encoded`] (the one sink over `io::Write`: each
//! item's bytes from an [`Encoder`]), and its two encoders of reports:
//! [`JsonLinesSink`] (one JSON object per line, for programs; any item
//! that is [`JsonLine`]) and [`TableSink`] (aligned columns, for people at
//! a terminal). The JSON schema and the table layout are documented in
//! `docs/reports.md`.

mod json;
mod table;

use std::io::{self, BufWriter, Write};

pub use json::{JsonLine, JsonLines, JsonLinesSink};
pub use table::{Table, TableSink};

/// Why a sink could not take an item.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The reader went away (EPIPE, e.g. `clarion run ... | head`). Not a
    /// failure of the producer: stop producing and exit successfully,
    /// without a message, as `grep` and `rg` do.
    #[error("the reader closed the output (broken pipe)")]
    BrokenPipe,
    /// A write failed (disk full, permission, a closed socket, a collector
    /// gone...).
    #[error("cannot write to {destination}")]
    Io {
        destination: String,
        #[source]
        source: io::Error,
    },
    /// An item could not be encoded, or the destination's format refused
    /// it (e.g. Parquet's writer); the message says which.
    #[error("cannot encode for {destination}: {message}")]
    Encode { destination: String, message: String },
    /// Called after an earlier error or after `finish`.
    #[error("the sink for {destination} is closed after an earlier error or its end")]
    Closed { destination: String },
}

impl SinkError {
    /// `e`, writing to `destination`: a broken pipe apart, as the contract says.
    pub fn io(destination: &str, e: io::Error) -> SinkError {
        if e.kind() == io::ErrorKind::BrokenPipe {
            SinkError::BrokenPipe
        } else {
            SinkError::Io {
                destination: destination.to_string(),
                source: e,
            }
        }
    }
}

/// A destination for items of type `T`: the seam every output implements.
///
/// # Contract
///
/// - **Order.** `write` is called with items in the order the producer
///   emits them (reports by window end, then event, then group; flow
///   records as the aggregator ends them; GPVs as the cache evicts them).
///   A sink keeps that order; it never reorders, merges or drops items: an
///   item it cannot deliver is an error.
/// - **Buffering.** `write` may buffer. An item is only guaranteed to have
///   reached the destination once a later `flush` returned `Ok`. Callers
///   flush after each batch when latency matters (live capture, a
///   collector reading records as a long capture is read).
/// - **Finish** is called once at the end: formats with a trailer
///   (Parquet's footer) write it there, and a file is complete only after
///   it returned `Ok`. Nothing is called after it. The default flushes.
/// - **Stopping.** [`SinkError::BrokenPipe`] means nobody is reading any
///   more: stop producing and exit quietly with success. Any other error
///   aborts the run. After an error the sink is closed: later calls fail
///   again (a broken pipe stays `BrokenPipe`, else [`SinkError::Closed`])
///   and write nothing.
/// - **Dropping** a sink without `finish` may lose buffered items, and any
///   error while writing them is lost too.
/// - **Threads.** A sink is used from one thread at a time; one that must
///   be shared is wrapped by the caller or fed through a channel.
pub trait Sink<T: ?Sized> {
    /// Accepts one item.
    fn write(&mut self, item: &T) -> Result<(), SinkError>;

    /// Pushes every accepted item to the destination.
    fn flush(&mut self) -> Result<(), SinkError>;

    /// Ends the output (see the contract).
    fn finish(&mut self) -> Result<(), SinkError> {
        self.flush()
    }

    /// Where items go, for messages (a path, a URL, "standard output").
    fn destination(&self) -> &str;
}

/// A sink of `T` chosen at run time, that a worker thread can own (what
/// `clarion-outputs` opens).
pub type BoxSink<T> = Box<dyn Sink<T> + Send>;

impl<T: ?Sized, S: Sink<T> + ?Sized> Sink<T> for Box<S> {
    fn write(&mut self, item: &T) -> Result<(), SinkError> {
        (**self).write(item)
    }
    fn flush(&mut self) -> Result<(), SinkError> {
        (**self).flush()
    }
    fn finish(&mut self) -> Result<(), SinkError> {
        (**self).finish()
    }
    fn destination(&self) -> &str {
        (**self).destination()
    }
}

impl<T: ?Sized, S: Sink<T> + ?Sized> Sink<T> for &mut S {
    fn write(&mut self, item: &T) -> Result<(), SinkError> {
        (**self).write(item)
    }
    fn flush(&mut self) -> Result<(), SinkError> {
        (**self).flush()
    }
    fn finish(&mut self) -> Result<(), SinkError> {
        (**self).finish()
    }
    fn destination(&self) -> &str {
        (**self).destination()
    }
}

/// Collects items in memory: for tests, and for callers that post-process.
impl<T: Clone> Sink<T> for Vec<T> {
    fn write(&mut self, item: &T) -> Result<(), SinkError> {
        self.push(item.clone());
        Ok(())
    }
    fn flush(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
    fn destination(&self) -> &str {
        "memory"
    }
}

/// Several sinks fed the same items, in the order given (`--records A
/// --records B`; a run's output, then its alerts). The first error ends
/// the fan-out: it is returned, and every later call fails as a closed
/// sink's would.
pub struct FanOut<S> {
    sinks: Vec<S>,
    closed: bool,
}

impl<S> FanOut<S> {
    pub fn new(sinks: Vec<S>) -> FanOut<S> {
        FanOut { sinks, closed: false }
    }

    pub fn is_empty(&self) -> bool {
        self.sinks.is_empty()
    }

    fn each<T: ?Sized>(&mut self, mut f: impl FnMut(&mut S) -> Result<(), SinkError>) -> Result<(), SinkError>
    where
        S: Sink<T>,
    {
        if self.closed {
            return Err(SinkError::Closed {
                destination: Sink::<T>::destination(self).to_string(),
            });
        }
        for s in &mut self.sinks {
            if let Err(e) = f(s) {
                self.closed = true;
                return Err(e);
            }
        }
        Ok(())
    }
}

impl<T: ?Sized, S: Sink<T>> Sink<T> for FanOut<S> {
    fn write(&mut self, item: &T) -> Result<(), SinkError> {
        self.each(|s| s.write(item))
    }
    fn flush(&mut self) -> Result<(), SinkError> {
        self.each(|s| s.flush())
    }
    fn finish(&mut self) -> Result<(), SinkError> {
        let r = self.each(|s| s.finish());
        self.closed = true;
        r
    }
    fn destination(&self) -> &str {
        match self.sinks.as_slice() {
            [one] => one.destination(),
            _ => "several sinks",
        }
    }
}

impl<S> std::fmt::Debug for FanOut<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FanOut")
            .field("sinks", &self.sinks.len())
            .field("closed", &self.closed)
            .finish()
    }
}

/// A buffered writer under the seam's rules, for sinks over `io::Write`:
/// errors name the destination, a broken pipe is told apart, and the
/// first error closes it (later calls fail again and write nothing).
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: BufWriter<W>,
    destination: String,
    state: State,
}

/// The first error is kept, so a closed writer keeps saying why.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    #[default]
    Open,
    BrokenPipe,
    Closed,
}

impl<W: Write> Writer<W> {
    pub fn new(out: W, destination: impl Into<String>) -> Self {
        Writer {
            out: BufWriter::new(out),
            destination: destination.into(),
            state: State::Open,
        }
    }

    pub fn destination(&self) -> &str {
        &self.destination
    }

    /// `Err` when an earlier call failed or the writer was finished.
    pub fn check(&self) -> Result<(), SinkError> {
        match self.state {
            State::Open => Ok(()),
            State::BrokenPipe => Err(SinkError::BrokenPipe),
            State::Closed => Err(SinkError::Closed {
                destination: self.destination.clone(),
            }),
        }
    }

    /// Closes the writer after `e` (an encoder's refusal, say) and passes it on.
    pub fn fail(&mut self, e: SinkError) -> SinkError {
        self.state = match e {
            SinkError::BrokenPipe => State::BrokenPipe,
            _ => State::Closed,
        };
        e
    }

    fn record(&mut self, r: io::Result<()>) -> Result<(), SinkError> {
        r.map_err(|e| {
            let e = SinkError::io(&self.destination, e);
            self.fail(e)
        })
    }

    /// Writes all of `bytes` (buffered).
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), SinkError> {
        self.check()?;
        let r = self.out.write_all(bytes);
        self.record(r)
    }

    pub fn flush(&mut self) -> Result<(), SinkError> {
        self.check()?;
        let r = self.out.flush();
        self.record(r)
    }

    /// Flushes; nothing is written after.
    pub fn finish(&mut self) -> Result<(), SinkError> {
        let r = self.flush();
        if self.state == State::Open {
            self.state = State::Closed;
        }
        r
    }

    /// The destination, for inspection. Buffered bytes are not in it yet.
    pub fn get_ref(&self) -> &W {
        self.out.get_ref()
    }

    /// Flushes and gives back the destination.
    pub fn into_inner(mut self) -> Result<W, SinkError> {
        self.flush()?;
        let destination = self.destination;
        self.out
            .into_inner()
            .map_err(|e| SinkError::io(&destination, e.into_error()))
    }
}

/// The seam's error rules for a sink not over `io::Write` (a message
/// stream, a database over HTTP): errors name the destination, and the
/// first closes the sink (later calls fail again and send nothing).
#[derive(Debug)]
pub struct Latch {
    destination: String,
    closed: bool,
}

impl Latch {
    pub fn new(destination: impl Into<String>) -> Latch {
        Latch {
            destination: destination.into(),
            closed: false,
        }
    }

    pub fn destination(&self) -> &str {
        &self.destination
    }

    /// `Err` when an earlier call failed or the sink was finished.
    pub fn check(&self) -> Result<(), SinkError> {
        if self.closed {
            return Err(SinkError::Closed {
                destination: self.destination.clone(),
            });
        }
        Ok(())
    }

    /// Closes after a failure to deliver, saying why.
    pub fn fail(&mut self, message: String) -> SinkError {
        self.closed = true;
        SinkError::Io {
            destination: self.destination.clone(),
            source: io::Error::other(message),
        }
    }

    /// Appends `item`'s JSON line and a newline to `out`; an item that
    /// cannot be encoded closes the sink, leaving `out` as it was.
    pub fn encode<T: JsonLine + ?Sized>(&mut self, item: &T, out: &mut Vec<u8>) -> Result<(), SinkError> {
        self.check()?;
        let before = out.len();
        if let Err(e) = item.write_json(out) {
            out.truncate(before);
            self.closed = true;
            return Err(SinkError::Encode {
                destination: self.destination.clone(),
                message: e.to_string(),
            });
        }
        out.push(b'\n');
        Ok(())
    }

    /// Nothing is sent after.
    pub fn close(&mut self) {
        self.closed = true;
    }
}

/// How items become bytes for an [`Encoded`] sink (a line format).
pub trait Encoder<T: ?Sized> {
    /// Appends `item`'s bytes to `out`, or says why it cannot.
    fn encode(&mut self, item: &T, out: &mut Vec<u8>) -> Result<(), String>;
}

/// Writes each item's encoding to a [`Writer`]: every sink over
/// `io::Write` (JSON lines, the table, CSV) is one of these, so the
/// seam's rules are written once.
#[derive(Debug)]
pub struct Encoded<W: Write, E> {
    out: Writer<W>,
    encoder: E,
    /// One item's bytes, reused: a refused item leaves nothing half
    /// written, and the allocation is kept across items.
    item: Vec<u8>,
}

impl<W: Write, E> Encoded<W, E> {
    /// Items of `encoder` to `out` (which may hold a header already).
    pub fn with(out: Writer<W>, encoder: E) -> Self {
        Encoded {
            out,
            encoder,
            item: Vec::with_capacity(512),
        }
    }

    /// The destination, for inspection. Buffered items are not in it yet.
    pub fn get_ref(&self) -> &W {
        self.out.get_ref()
    }

    /// Flushes and gives back the destination.
    pub fn into_inner(self) -> Result<W, SinkError> {
        self.out.into_inner()
    }
}

impl<T: ?Sized, W: Write, E: Encoder<T>> Sink<T> for Encoded<W, E> {
    fn write(&mut self, item: &T) -> Result<(), SinkError> {
        self.out.check()?;
        self.item.clear();
        if let Err(message) = self.encoder.encode(item, &mut self.item) {
            let e = SinkError::Encode {
                destination: self.out.destination().to_string(),
                message,
            };
            return Err(self.out.fail(e));
        }
        self.out.write_all(&self.item)
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        self.out.flush()
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        self.out.finish()
    }

    fn destination(&self) -> &str {
        self.out.destination()
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
            missing_hosts: Box::default(),
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
    use clarion_report::{GroupKey, Report};

    use super::test_util::*;
    use super::*;

    #[test]
    fn io_errors_map_broken_pipe_apart() {
        assert!(matches!(
            SinkError::io("x", io::Error::from(io::ErrorKind::BrokenPipe)),
            SinkError::BrokenPipe
        ));
        let e = SinkError::io("x.jsonl", io::Error::from(io::ErrorKind::PermissionDenied));
        assert!(matches!(&e, SinkError::Io { .. }));
        assert!(e.to_string().contains("x.jsonl"), "{e}");
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
            let mut boxed: Box<dyn Sink<Report> + '_> = Box::new(&mut v);
            boxed.write(&a).unwrap();
            boxed.write(&b).unwrap();
            boxed.flush().unwrap();
        }
        assert_eq!(v, vec![a, b]);
    }

    struct Refusing(&'static str);
    impl Sink<u32> for Refusing {
        fn write(&mut self, _: &u32) -> Result<(), SinkError> {
            Err(SinkError::Encode {
                destination: self.0.into(),
                message: "refused".into(),
            })
        }
        fn flush(&mut self) -> Result<(), SinkError> {
            Ok(())
        }
        fn destination(&self) -> &str {
            self.0
        }
    }

    #[test]
    fn fan_out_writes_each_sink_and_closes_at_the_first_error() {
        type Boxed = Box<dyn Sink<u32>>;
        let mut ok: FanOut<Boxed> =
            FanOut::new(vec![Box::new(Vec::<u32>::new()), Box::new(Vec::<u32>::new())]);
        ok.write(&1).unwrap();
        ok.finish().unwrap();
        assert!(
            matches!(ok.write(&1), Err(SinkError::Closed { .. })),
            "closed after finish"
        );

        let mut bad: FanOut<Boxed> =
            FanOut::new(vec![Box::new(Vec::<u32>::new()), Box::new(Refusing("x.ipfix"))]);
        let e = bad.write(&1).unwrap_err();
        assert!(e.to_string().contains("x.ipfix"), "{e}");
        assert!(matches!(bad.flush(), Err(SinkError::Closed { .. })));
    }

    #[test]
    fn a_writer_keeps_its_first_error() {
        let mut w = Writer::new(Failing(io::ErrorKind::PermissionDenied), "out.csv");
        w.write_all(b"buffered").unwrap();
        assert!(matches!(w.flush(), Err(SinkError::Io { destination, .. }) if destination == "out.csv"));
        assert!(matches!(w.write_all(b"x"), Err(SinkError::Closed { .. })));
        let mut w = Writer::new(Vec::new(), "memory");
        w.write_all(b"a").unwrap();
        w.finish().unwrap();
        assert!(matches!(w.write_all(b"b"), Err(SinkError::Closed { .. })));
        assert_eq!(w.get_ref(), b"a");
    }
}
