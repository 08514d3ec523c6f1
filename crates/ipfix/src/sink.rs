//! [`IpfixSink`]: flow records as IPFIX over UDP, over TCP or to a file.
//!
//! # Destinations
//!
//! - `ipfix+udp://HOST:PORT`: one message per datagram, at most 1400
//!   bytes by default. Templates go out at the start and again every
//!   20 messages or 10 seconds, whichever comes first (RFC 7011 §8.4: a
//!   collector that started late, or lost the template datagram, learns
//!   them).
//! - `ipfix+tcp://HOST:PORT`: a stream of messages of up to 65535 bytes;
//!   templates once, first.
//! - a path ending in `.ipfix`: an RFC 5655 file, the TCP stream's bytes.
//!
//! Options ride in the query: `?observation_domain=N`,
//! `max_message_size=N`, `template_refresh_messages=N`,
//! `template_refresh_seconds=N`, `max_send_failures=N` (e.g.
//! `ipfix+udp://127.0.0.1:4739?observation_domain=7`); a file path takes
//! none.
//!
//! # Errors
//!
//! A TCP or file write error is a [`SinkError::Io`] and closes the sink.
//! UDP cannot know whether a datagram arrived; what the kernel does tell
//! (mostly `ECONNREFUSED` from an ICMP port unreachable while no
//! collector listens) is counted, not fatal at once, as exporters such as
//! nProbe keep going through a collector's restart: the sink fails with
//! [`SinkError::Io`] when `max_send_failures` (default 5) sends failed
//! without two successful sends in a row between them. (Linux reports the
//! ICMP error on the send after the lost one and drops that send too, so
//! with no collector sends alternate between success and failure: one
//! success must not reset the count.) The records of failed datagrams are
//! counted, and [`Sink::finish`] fails naming them if any were lost,
//! so a run never ends looking complete when it was not.
//!
//! # Cost
//!
//! One syscall per message (about 14 IPv4 records per UDP datagram); a
//! wall-clock read per message for the export time and the refresh.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clarion_records::FlowRecord;
use clarion_sinks::{Sink, SinkError};

use crate::encode::{Encoder, EncoderConfig, DEFAULT_UDP_MESSAGE_SIZE, MAX_MESSAGE_SIZE};
use crate::IpfixError;

const UDP_SCHEME: &str = "ipfix+udp://";
const TCP_SCHEME: &str = "ipfix+tcp://";
const FILE_SUFFIX: &str = ".ipfix";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether a destination string names an IPFIX destination (for the
/// command line's dispatch): an `ipfix+udp://` or `ipfix+tcp://` URL, or
/// a path ending in `.ipfix`.
pub fn is_ipfix_destination(destination: &str) -> bool {
    destination.starts_with(UDP_SCHEME)
        || destination.starts_with(TCP_SCHEME)
        || destination.ends_with(FILE_SUFFIX)
}

/// The transport of a sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
    File,
}

/// How a sink encodes and sends; [`SinkOptions::for_transport`] gives the defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SinkOptions {
    pub observation_domain: u32,
    pub max_message_size: usize,
    /// UDP: resend the templates after this many messages...
    pub template_refresh_messages: u32,
    /// ...or this much wall time, whichever comes first.
    pub template_refresh_interval: Duration,
    /// UDP: fail after this many failed sends (see the module doc).
    pub max_send_failures: u32,
}

impl SinkOptions {
    /// The defaults: 1400-byte messages over UDP, 65535 over TCP and in
    /// files; UDP templates every 20 messages or 10 s; 5 failed sends.
    pub fn for_transport(transport: Transport) -> SinkOptions {
        SinkOptions {
            observation_domain: 0,
            max_message_size: match transport {
                Transport::Udp => DEFAULT_UDP_MESSAGE_SIZE,
                Transport::Tcp | Transport::File => MAX_MESSAGE_SIZE,
            },
            template_refresh_messages: 20,
            template_refresh_interval: Duration::from_secs(10),
            max_send_failures: 5,
        }
    }
}

enum Output {
    Udp(UdpSocket),
    Tcp(TcpStream),
    File(BufWriter<File>),
}

/// A [`Sink<FlowRecord>`] writing IPFIX; see the module doc.
pub struct IpfixSink {
    destination: String,
    transport: Transport,
    output: Output,
    encoder: Encoder,
    options: SinkOptions,
    /// The templates must go before the next data message.
    templates_due: bool,
    /// UDP refresh: data messages and time since the templates went out.
    messages_since_templates: u32,
    templates_at: Instant,
    /// UDP: failed sends since the last two successes in a row.
    failures: u32,
    last_send_ok: bool,
    lost_records: u64,
    lost_datagrams: u64,
    last_failure: Option<io::Error>,
    closed: bool,
}

impl std::fmt::Debug for IpfixSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IpfixSink")
            .field("destination", &self.destination)
            .field("transport", &self.transport)
            .field("options", &self.options)
            .finish()
    }
}

/// Opens a destination with the default options of its transport (and
/// those in its query); see the module doc for the forms.
pub fn open(destination: &str) -> Result<IpfixSink, IpfixError> {
    let (transport, _, query) = split(destination)?;
    let mut options = SinkOptions::for_transport(transport);
    apply_query(destination, query, &mut options)?;
    open_with(destination, options)
}

/// Opens a destination with the given options (a query in the
/// destination is ignored).
pub fn open_with(destination: &str, options: SinkOptions) -> Result<IpfixSink, IpfixError> {
    let (transport, target, _) = split(destination)?;
    let encoder = Encoder::new(EncoderConfig {
        observation_domain: options.observation_domain,
        max_message_size: options.max_message_size,
    })?;
    let open_err = |source| IpfixError::Open {
        destination: destination.to_string(),
        source,
    };
    let output = match transport {
        Transport::Udp => {
            let addr = resolve(target).map_err(open_err)?;
            let local: SocketAddr = if addr.is_ipv6() {
                "[::]:0"
                    .parse()
                    .map_err(|_| open_err(io::ErrorKind::InvalidInput.into()))?
            } else {
                "0.0.0.0:0"
                    .parse()
                    .map_err(|_| open_err(io::ErrorKind::InvalidInput.into()))?
            };
            let socket = UdpSocket::bind(local).map_err(open_err)?;
            // Connected, so the kernel reports ICMP errors to us.
            socket.connect(addr).map_err(open_err)?;
            Output::Udp(socket)
        }
        Transport::Tcp => {
            let addr = resolve(target).map_err(open_err)?;
            Output::Tcp(TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(open_err)?)
        }
        Transport::File => Output::File(BufWriter::new(File::create(target).map_err(open_err)?)),
    };
    let mut sink = IpfixSink {
        destination: destination.to_string(),
        transport,
        output,
        encoder,
        options,
        templates_due: true,
        messages_since_templates: 0,
        templates_at: Instant::now(),
        failures: 0,
        last_send_ok: true,
        lost_records: 0,
        lost_datagrams: 0,
        last_failure: None,
        closed: false,
    };
    // Templates first, even if no record follows: an empty run still
    // leaves a valid file and tells the collector what is coming.
    sink.send_templates(None).map_err(|e| match e {
        SinkError::Io { source, .. } => open_err(source),
        other => open_err(io::Error::other(other.to_string())),
    })?;
    Ok(sink)
}

fn split(destination: &str) -> Result<(Transport, &str, &str), IpfixError> {
    let bad = |reason: &str| IpfixError::Destination {
        destination: destination.to_string(),
        reason: reason.to_string(),
    };
    let (transport, rest) = if let Some(rest) = destination.strip_prefix(UDP_SCHEME) {
        (Transport::Udp, rest)
    } else if let Some(rest) = destination.strip_prefix(TCP_SCHEME) {
        (Transport::Tcp, rest)
    } else if destination.ends_with(FILE_SUFFIX) {
        return Ok((Transport::File, destination, ""));
    } else {
        return Err(bad(
            "expected ipfix+udp://HOST:PORT, ipfix+tcp://HOST:PORT or a path ending in .ipfix",
        ));
    };
    let (target, query) = rest.split_once('?').unwrap_or((rest, ""));
    if target.is_empty() || target.contains('/') {
        return Err(bad("expected HOST:PORT after the scheme"));
    }
    Ok((transport, target, query))
}

fn apply_query(destination: &str, query: &str, o: &mut SinkOptions) -> Result<(), IpfixError> {
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let bad = |reason: String| IpfixError::Destination {
            destination: destination.to_string(),
            reason,
        };
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| bad(format!("option {pair:?} has no value (name=value)")))?;
        let n: u64 = value
            .parse()
            .map_err(|_| bad(format!("option {name} needs a whole number, not {value:?}")))?;
        let small = |n: u64| u32::try_from(n).map_err(|_| bad(format!("option {name}={n} is too large")));
        match name {
            "observation_domain" => o.observation_domain = small(n)?,
            "max_message_size" => o.max_message_size = small(n)? as usize,
            "template_refresh_messages" => o.template_refresh_messages = small(n)?,
            "template_refresh_seconds" => o.template_refresh_interval = Duration::from_secs(n),
            "max_send_failures" => o.max_send_failures = small(n)?,
            _ => {
                return Err(bad(format!(
                    "unknown option {name:?} (observation_domain, max_message_size, \
                     template_refresh_messages, template_refresh_seconds, max_send_failures)"
                )))
            }
        }
    }
    Ok(())
}

fn resolve(target: &str) -> io::Result<SocketAddr> {
    target.to_socket_addrs()?.next().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{target} resolves to no address"),
        )
    })
}

/// Seconds since the Unix epoch, for the export time.
fn now_s() -> u32 {
    let s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // The header's field is 32 bits: wraps in 2106, as every exporter's.
    s as u32
}

impl IpfixSink {
    pub fn transport(&self) -> Transport {
        self.transport
    }

    pub fn options(&self) -> SinkOptions {
        self.options
    }

    /// UDP: records in datagrams the kernel refused to send, and those datagrams.
    pub fn lost(&self) -> (u64, u64) {
        (self.lost_records, self.lost_datagrams)
    }

    fn io_error(&self, source: io::Error) -> SinkError {
        SinkError::Io {
            destination: self.destination.clone(),
            source,
        }
    }

    fn check_open(&self) -> Result<(), SinkError> {
        if self.closed {
            return Err(SinkError::Closed {
                destination: self.destination.clone(),
            });
        }
        Ok(())
    }

    /// Sends the templates. Before a data message they carry its sequence
    /// number: the encoder has already counted that message's records,
    /// which are not sent yet (collectors check the numbers, e.g.
    /// Wireshark's "unexpected flow sequence").
    fn send_templates(&mut self, before: Option<&[u8]>) -> Result<(), SinkError> {
        let mut m = self.encoder.template_message(now_s());
        if let Some(seq) = before.and_then(|d| d.get(8..12)) {
            m[8..12].copy_from_slice(seq);
        }
        let sent = self.send(&m, 0)?;
        // A lost template datagram is sent again before the next data.
        self.templates_due = !sent;
        self.messages_since_templates = 0;
        self.templates_at = Instant::now();
        Ok(())
    }

    /// Sends a data message, preceded by the templates when due.
    fn send_data(&mut self, m: &[u8], records: u32) -> Result<(), SinkError> {
        let refresh = self.transport == Transport::Udp
            && (self.messages_since_templates >= self.options.template_refresh_messages
                || self.templates_at.elapsed() >= self.options.template_refresh_interval);
        if self.templates_due || refresh {
            self.send_templates(Some(m))?;
        }
        self.send(m, records)?;
        self.messages_since_templates += 1;
        Ok(())
    }

    /// Sends one message: `Ok(false)` for a UDP failure that was only
    /// counted; `Err` closes the sink.
    fn send(&mut self, m: &[u8], records: u32) -> Result<bool, SinkError> {
        let result = match &mut self.output {
            Output::Udp(s) => s.send(m).and_then(|n| {
                if n == m.len() {
                    Ok(())
                } else {
                    Err(io::Error::other(format!("sent {n} of {} bytes", m.len())))
                }
            }),
            Output::Tcp(s) => s.write_all(m),
            Output::File(f) => f.write_all(m),
        };
        let Err(e) = result else {
            if self.last_send_ok {
                self.failures = 0;
            }
            self.last_send_ok = true;
            return Ok(true);
        };
        if self.transport != Transport::Udp {
            self.closed = true;
            return Err(self.io_error(e));
        }
        self.last_send_ok = false;
        self.failures += 1;
        self.lost_datagrams += 1;
        self.lost_records += u64::from(records);
        if self.failures >= self.options.max_send_failures {
            self.closed = true;
            let e = io::Error::new(
                e.kind(),
                format!(
                    "{} sends failed in a row ({} records in {} datagrams lost so far): {e}",
                    self.failures, self.lost_records, self.lost_datagrams
                ),
            );
            return Err(self.io_error(e));
        }
        self.last_failure = Some(e);
        Ok(false)
    }
}

impl Sink<FlowRecord> for IpfixSink {
    fn write(&mut self, record: &FlowRecord) -> Result<(), SinkError> {
        self.check_open()?;
        let records = self.encoder.pending_records();
        if let Some(m) = self.encoder.push(record, now_s()) {
            self.send_data(&m, records)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        self.check_open()?;
        let records = self.encoder.pending_records();
        if let Some(m) = self.encoder.finish(now_s()) {
            self.send_data(&m, records)?;
        }
        if let Output::File(f) = &mut self.output {
            if let Err(e) = f.flush() {
                self.closed = true;
                return Err(self.io_error(e));
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        self.flush()?;
        self.closed = true;
        let result = match &mut self.output {
            Output::File(f) => f.get_ref().sync_all(),
            // The collector sees the end of the stream.
            Output::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
            Output::Udp(_) => Ok(()),
        };
        result.map_err(|e| self.io_error(e))?;
        if self.lost_records > 0 {
            let last = self
                .last_failure
                .as_ref()
                .map_or(String::new(), |e| format!(" (last error: {e})"));
            let e = io::Error::other(format!(
                "{} records in {} datagrams were not delivered{last}",
                self.lost_records, self.lost_datagrams
            ));
            return Err(self.io_error(e));
        }
        Ok(())
    }

    fn destination(&self) -> &str {
        &self.destination
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_are_recognised_and_parsed() {
        assert!(is_ipfix_destination("ipfix+udp://127.0.0.1:4739"));
        assert!(is_ipfix_destination("ipfix+tcp://collector:4739"));
        assert!(is_ipfix_destination("out/flows.ipfix"));
        assert!(!is_ipfix_destination("flows.jsonl"));
        assert!(!is_ipfix_destination("udp://127.0.0.1:4739"));

        let (t, target, q) = split("ipfix+udp://[::1]:4739?observation_domain=7").unwrap();
        assert_eq!(
            (t, target, q),
            (Transport::Udp, "[::1]:4739", "observation_domain=7")
        );
        assert!(split("ipfix+tcp://").is_err());
        assert!(split("ipfix+tcp://host:1/path").is_err());
        assert!(split("flows.json").is_err());
    }

    #[test]
    fn query_options_set_and_unknown_ones_fail() {
        let mut o = SinkOptions::for_transport(Transport::Udp);
        apply_query(
            "d",
            "observation_domain=7&template_refresh_seconds=3&max_message_size=512",
            &mut o,
        )
        .unwrap();
        assert_eq!(o.observation_domain, 7);
        assert_eq!(o.template_refresh_interval, Duration::from_secs(3));
        assert_eq!(o.max_message_size, 512);
        let e = apply_query("d", "mtu=1500", &mut o).unwrap_err();
        assert!(e.to_string().contains("unknown option \"mtu\""), "{e}");
        assert!(apply_query("d", "observation_domain=x", &mut o).is_err());
    }

    #[test]
    fn the_sink_can_go_to_another_thread() {
        fn send<T: Send>() {}
        send::<IpfixSink>();
        let _: Option<Box<dyn Sink<FlowRecord> + Send>> = None::<IpfixSink>.map(|s| Box::new(s) as _);
    }

    #[test]
    fn a_too_small_message_size_is_refused_at_open() {
        let e = open("ipfix+udp://127.0.0.1:9?max_message_size=100").unwrap_err();
        assert!(matches!(e, IpfixError::MessageSize { size: 100, .. }), "{e}");
    }
}
