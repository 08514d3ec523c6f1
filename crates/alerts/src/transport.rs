//! Transports: how one report reaches one destination, one attempt at a
//! time. The retry loop, the queue and the dead letters are `delivery.rs`'s;
//! a transport only says whether an attempt worked and, if not, whether
//! another could.
//!
//! Webhooks go through `ureq` (blocking; rustls for https), one agent per
//! sink so connections are kept alive between reports. Redirects are not
//! followed: a POST that is redirected is a configuration error to fix,
//! not something to retry. Syslog goes over UDP (one datagram per
//! message), TCP (octet-counted, RFC 6587; reconnected after any error) or
//! a Unix datagram socket (`/dev/log`).
//!
//! Cost: one request or one send per attempt; nothing is shared between
//! threads (a transport lives on its sink's delivery thread).

use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::time::Duration;

use crate::format::{body, Predicates, WebhookFormat};
use crate::notice::Notice;
use crate::syslog;
use crate::AlertError;

/// Why an attempt failed.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// Worth another attempt (a timeout, a refused connection, HTTP 5xx,
    /// 408, 429); with the delay the receiver asked for (`Retry-After`).
    Retry(String, Option<Duration>),
    /// Another attempt would fail the same way (HTTP 4xx, a redirect).
    Permanent(String),
}

/// One destination. `send` makes one attempt, taking at most about `timeout`.
pub trait Transport: Send {
    fn send(&mut self, notice: &Notice, timeout: Duration) -> Result<(), Failure>;

    /// How often [`Transport::tick`] is called when nothing is queued;
    /// `None` (the default): never.
    fn tick_every(&self) -> Option<Duration> {
        None
    }

    /// Periodic work between notices (Alertmanager: re-send what fires).
    fn tick(&mut self, _timeout: Duration) -> Result<(), Failure> {
        Ok(())
    }

    /// The destination as logs and dead letters name it (no secrets:
    /// webhook URLs often carry a token in their path).
    fn describe(&self) -> String;
}

/// A webhook's settings.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// `http://` or `https://` URL.
    pub url: String,
    pub format: WebhookFormat,
    /// Extra headers, e.g. `("Authorization", "Bearer ...")`.
    pub headers: Vec<(String, String)>,
    /// Each event's predicate as written, for the chat formats.
    pub predicates: Predicates,
}

pub(crate) struct Webhook {
    agent: ureq::Agent,
    config: WebhookConfig,
    describe: String,
}

/// `scheme://host[:port]`, and `/…` when there is a path: enough to tell
/// which receiver, without the path's secrets.
pub(crate) fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    // Drop user:password@ too.
    let host = authority.rsplit('@').next().unwrap_or(authority);
    let more = if rest.len() > authority.len() { "/…" } else { "" };
    format!("{scheme}://{host}{more}")
}

/// Checks that `url` is an `http://` or `https://` URL with a host, for
/// the target `what` (`webhook`, `Alertmanager`), which takes the form
/// `form` (shown when it is not).
pub(crate) fn check_http_url(what: &str, url: &str, form: &str) -> Result<(), AlertError> {
    let uri: ureq::http::Uri = url
        .parse()
        .map_err(|e| AlertError::Target(format!("{what} URL `{}`: {e}", redact(url))))?;
    match uri.scheme_str() {
        Some("http") | Some("https") if uri.host().is_some() => Ok(()),
        _ => Err(AlertError::Target(format!(
            "{what} URL `{}` must be {form}",
            redact(url)
        ))),
    }
}

/// An HTTP client for a target: statuses are answers, not errors (see
/// [`answer`]), and redirects are not followed.
pub(crate) fn http_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(concat!("clarion/", env!("CARGO_PKG_VERSION")))
        .build()
        .new_agent()
}

impl Webhook {
    pub(crate) fn new(config: WebhookConfig) -> Result<Webhook, AlertError> {
        check_http_url("webhook", &config.url, "http://HOST/... or https://HOST/...")?;
        for (name, value) in &config.headers {
            ureq::http::HeaderName::try_from(name.as_str())
                .map_err(|_| AlertError::Target(format!("`{name}` is not a valid HTTP header name")))?;
            ureq::http::HeaderValue::try_from(value.as_str()).map_err(|_| {
                AlertError::Target(format!("the value of header `{name}` is not valid in HTTP"))
            })?;
        }
        Ok(Webhook {
            agent: http_agent(),
            describe: format!("webhook {}", redact(&config.url)),
            config,
        })
    }
}

impl Transport for Webhook {
    fn send(&mut self, notice: &Notice, timeout: Duration) -> Result<(), Failure> {
        let key = notice.key.as_str();
        let payload = body(self.config.format, notice, &self.config.predicates);
        // Matrix's send endpoint takes a transaction id in the path and
        // deduplicates on it: the idempotency key is one.
        let request = match self.config.format {
            WebhookFormat::Matrix => {
                let url = format!("{}/{key}", self.config.url.trim_end_matches('/'));
                self.agent.put(&url)
            }
            _ => self.agent.post(&self.config.url),
        };
        let mut request = request
            .header("Content-Type", "application/json")
            .header("Idempotency-Key", key);
        for (name, value) in &self.config.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let sent = request
            .config()
            .timeout_global(Some(timeout))
            .build()
            .send(&payload[..]);
        answer(sent)
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }
}

/// An HTTP answer as an attempt's outcome: `2xx` delivered; `5xx`, 408,
/// 429 and failed requests retried (with `Retry-After`); redirects and
/// other `4xx` refused.
pub(crate) fn answer(sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<(), Failure> {
    let mut response = match sent {
        Ok(r) => r,
        Err(e) => return Err(Failure::Retry(e.to_string(), None)),
    };
    let status = response.status();
    if status.is_success() {
        // Read (a little of) the body so the connection can be reused.
        let _ = response.body_mut().with_config().limit(4096).read_to_string();
        return Ok(());
    }
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let text: String = response
        .body_mut()
        .with_config()
        .limit(4096)
        .read_to_string()
        .unwrap_or_default()
        .chars()
        .take(200)
        .collect();
    let reason = format!(
        "HTTP {status}{}{}",
        if text.is_empty() { "" } else { ": " },
        text.trim()
    );
    let code = status.as_u16();
    if code >= 500 || code == 408 || code == 429 {
        Err(Failure::Retry(reason, retry_after))
    } else if status.is_redirection() {
        let to = response
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(redact)
            .unwrap_or_default();
        Err(Failure::Permanent(format!(
            "{reason} (redirect to {to} not followed; fix the URL)"
        )))
    } else {
        Err(Failure::Permanent(reason))
    }
}

/// Where syslog messages go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyslogAddr {
    Udp(String),
    Tcp(String),
    Unix(PathBuf),
}

impl SyslogAddr {
    /// `udp://HOST:PORT`, `tcp://HOST:PORT` or `unix:///PATH`; the port
    /// defaults to 514 (UDP) and 601 (TCP, RFC 3195's).
    pub fn parse(s: &str) -> Result<SyslogAddr, AlertError> {
        let with_port = |rest: &str, port: u16| {
            if rest.is_empty() {
                Err(AlertError::Target(format!("syslog address `{s}` has no host")))
            } else if rest
                .rsplit_once(':')
                .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
                && !rest.ends_with(']')
            {
                Ok(rest.to_string())
            } else {
                Ok(format!("{rest}:{port}"))
            }
        };
        if let Some(rest) = s.strip_prefix("udp://") {
            Ok(SyslogAddr::Udp(with_port(rest, 514)?))
        } else if let Some(rest) = s.strip_prefix("tcp://") {
            Ok(SyslogAddr::Tcp(with_port(rest, 601)?))
        } else if let Some(rest) = s.strip_prefix("unix://") {
            if rest.starts_with('/') {
                Ok(SyslogAddr::Unix(PathBuf::from(rest)))
            } else {
                Err(AlertError::Target(format!(
                    "syslog address `{s}`: a Unix socket needs an absolute path, e.g. unix:///dev/log"
                )))
            }
        } else {
            Err(AlertError::Target(format!(
                "syslog address `{s}`: use udp://HOST:514, tcp://HOST:601 or unix:///dev/log"
            )))
        }
    }
}

/// Syslog's settings.
#[derive(Clone, Debug)]
pub struct SyslogConfig {
    pub addr: SyslogAddr,
    /// 0..=23; 16 is local0.
    pub facility: u8,
}

pub(crate) struct Syslog {
    config: SyslogConfig,
    procid: u32,
    udp: Option<UdpSocket>,
    tcp: Option<TcpStream>,
    unix: Option<UnixDatagram>,
}

impl Syslog {
    pub(crate) fn new(config: SyslogConfig) -> Result<Syslog, AlertError> {
        // Resolve now, so a typo is an error at start rather than a dead letter later.
        if let SyslogAddr::Udp(a) | SyslogAddr::Tcp(a) = &config.addr {
            a.to_socket_addrs()
                .map_err(|e| AlertError::Target(format!("syslog address {a}: {e}")))?;
        }
        Ok(Syslog {
            config,
            procid: std::process::id(),
            udp: None,
            tcp: None,
            unix: None,
        })
    }

    fn try_send(&mut self, frame: &str, timeout: Duration) -> std::io::Result<()> {
        match &self.config.addr {
            SyslogAddr::Udp(a) => {
                if self.udp.is_none() {
                    let target = a
                        .to_socket_addrs()?
                        .next()
                        .ok_or_else(|| std::io::Error::other("no address"))?;
                    let local = if target.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
                    let s = UdpSocket::bind(local)?;
                    s.connect(target)?;
                    self.udp = Some(s);
                }
                if let Some(s) = &self.udp {
                    s.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))?;
                    s.send(frame.as_bytes())?;
                }
            }
            SyslogAddr::Tcp(a) => {
                if self.tcp.is_none() {
                    let target = a
                        .to_socket_addrs()?
                        .next()
                        .ok_or_else(|| std::io::Error::other("no address"))?;
                    let s = TcpStream::connect_timeout(&target, timeout.max(Duration::from_millis(1)))?;
                    s.set_nodelay(true)?;
                    self.tcp = Some(s);
                }
                if let Some(s) = &mut self.tcp {
                    s.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))?;
                    s.write_all(&syslog::octet_counted(frame))?;
                }
            }
            SyslogAddr::Unix(p) => {
                if self.unix.is_none() {
                    let s = UnixDatagram::unbound()?;
                    s.connect(p)?;
                    self.unix = Some(s);
                }
                if let Some(s) = &self.unix {
                    s.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))?;
                    s.send(frame.as_bytes())?;
                }
            }
        }
        Ok(())
    }
}

impl Transport for Syslog {
    fn send(&mut self, notice: &Notice, timeout: Duration) -> Result<(), Failure> {
        let json = notice.to_json().to_string();
        let msg = syslog::message(notice, &json, self.config.facility, self.procid);
        self.try_send(&msg, timeout).map_err(|e| {
            // A stream broken mid-message cannot be resumed: start a new one.
            self.tcp = None;
            self.udp = None;
            self.unix = None;
            Failure::Retry(e.to_string(), None)
        })
    }

    fn describe(&self) -> String {
        match &self.config.addr {
            SyslogAddr::Udp(a) => format!("syslog udp://{a}"),
            SyslogAddr::Tcp(a) => format!("syslog tcp://{a}"),
            SyslogAddr::Unix(p) => format!("syslog unix://{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_redacted_to_scheme_and_host() {
        assert_eq!(
            redact("https://hooks.slack.com/services/T000/B000/XXXX"),
            "https://hooks.slack.com/…"
        );
        assert_eq!(redact("http://u:pw@127.0.0.1:8080"), "http://127.0.0.1:8080");
        assert_eq!(redact("http://h:1/?token=x"), "http://h:1/…");
    }

    #[test]
    fn webhook_urls_are_checked_at_start() {
        let cfg = |url: &str| WebhookConfig {
            url: url.into(),
            format: WebhookFormat::Json,
            headers: vec![],
            predicates: Predicates::new(),
        };
        assert!(Webhook::new(cfg("http://127.0.0.1:9/hook")).is_ok());
        assert!(Webhook::new(cfg("https://example.invalid/x")).is_ok());
        for bad in ["ftp://h/x", "127.0.0.1:9", "http://", "not a url"] {
            assert!(Webhook::new(cfg(bad)).is_err(), "{bad}");
        }
        let mut c = cfg("http://h/x");
        c.headers.push(("Bad Name".into(), "v".into()));
        assert!(Webhook::new(c).is_err());
    }

    #[test]
    fn syslog_addresses() {
        assert_eq!(
            SyslogAddr::parse("udp://10.0.0.1").ok(),
            Some(SyslogAddr::Udp("10.0.0.1:514".into()))
        );
        assert_eq!(
            SyslogAddr::parse("udp://h:1514").ok(),
            Some(SyslogAddr::Udp("h:1514".into()))
        );
        assert_eq!(
            SyslogAddr::parse("tcp://h").ok(),
            Some(SyslogAddr::Tcp("h:601".into()))
        );
        assert_eq!(
            SyslogAddr::parse("tcp://[::1]").ok(),
            Some(SyslogAddr::Tcp("[::1]:601".into()))
        );
        assert_eq!(
            SyslogAddr::parse("tcp://[::1]:6514").ok(),
            Some(SyslogAddr::Tcp("[::1]:6514".into()))
        );
        assert_eq!(
            SyslogAddr::parse("unix:///dev/log").ok(),
            Some(SyslogAddr::Unix("/dev/log".into()))
        );
        for bad in ["udp://", "unix://dev/log", "http://h", "h:514"] {
            assert!(SyslogAddr::parse(bad).is_err(), "{bad}");
        }
    }
}
