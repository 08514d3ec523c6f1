//! Items (flow records, reports) published to a JetStream stream: the
//! destination `nats://HOST:PORT/STREAM` (or `tls://…`) of `--records`
//! and `--output`, so any consumer can take a fleet's flows.
//!
//! - **Subjects.** One a host: `clarion.records.<host>` for flow records,
//!   `clarion.reports.<host>` for reports ([`StreamKind`]); the payload is
//!   the item's JSON line (no newline), the same object `FILE.jsonl` holds.
//! - **The stream** is looked up by name and created if absent, taking
//!   `clarion.records.>` (or `clarion.reports.>`) with the server's
//!   defaults (file storage, limits retention, no limits). An existing
//!   stream must take that wildcard or the host's subject, else the
//!   destination is refused at open rather than every publish failing.
//! - **Delivery.** Items are published in batches of [`BATCH`], and each
//!   batch's acknowledgements are awaited before the next is sent, so at
//!   most [`BATCH`] publishes are ever unacknowledged. A publish the
//!   stream does not acknowledge within [`ACK_TIMEOUT`] (or refuses) is an
//!   error that closes the sink and ends the run; it is not retried,
//!   because a retry after later items were stored would reorder the
//!   stream, which the sink contract forbids. `flush` and `finish` send
//!   the partial batch and wait for its acknowledgements.
//! - **Credentials** as the `--nats-*` flags take them, in the URL:
//!   `nats://TOKEN@HOST:PORT/STREAM`, and the query's `nkey=FILE` (a seed),
//!   `ca=FILE` (TLS required, the server checked against it), `cert=FILE`
//!   with `key=FILE` (a client certificate). `tls://` requires TLS with the
//!   system's roots.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use clarion_sinks::{JsonLine, Latch, Sink, SinkError};

use crate::{Auth, NatsError, Security};

/// Items published before their acknowledgements are awaited: the bound
/// on publishes in flight.
pub const BATCH: usize = 256;

/// How long the stream may take to acknowledge a publish.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// Which items a stream holds, which names its subjects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    Records,
    Reports,
}

impl StreamKind {
    fn prefix(self) -> &'static str {
        match self {
            StreamKind::Records => "clarion.records",
            StreamKind::Reports => "clarion.reports",
        }
    }

    /// The subject a host's items go to.
    pub fn subject(self, host: &str) -> String {
        format!("{}.{host}", self.prefix())
    }

    /// The subjects a created stream takes: every host's.
    pub fn wildcard(self) -> String {
        format!("{}.>", self.prefix())
    }
}

/// A `nats://` or `tls://` destination, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamTarget {
    /// The server's URL as the client connects to it (`nats://HOST:PORT`).
    pub server: String,
    pub stream: String,
    pub security: Security,
}

/// Whether a destination's scheme is one of this module's.
pub fn is_stream_scheme(scheme: &str) -> bool {
    matches!(scheme, "nats" | "tls")
}

impl StreamTarget {
    /// Reads `nats://[TOKEN@]HOST:PORT/STREAM[?nkey=FILE&ca=FILE&cert=FILE&key=FILE]`
    /// (or `tls://…`); every file is read or checked here, so a wrong one
    /// is refused before anything connects.
    pub fn parse(text: &str) -> Result<StreamTarget, NatsError> {
        let bad = |why: &str| {
            NatsError::Destination(format!(
                "{text}: {why}; give nats://HOST:PORT/STREAM (credentials: nats://TOKEN@HOST:PORT/STREAM, \
                 ?nkey=FILE, ?ca=FILE, ?cert=FILE&key=FILE)"
            ))
        };
        let (scheme, rest) = text.split_once("://").ok_or_else(|| bad("not a URL"))?;
        if !is_stream_scheme(scheme) {
            return Err(bad("the scheme is not nats or tls"));
        }
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, stream) = rest.split_once('/').ok_or_else(|| bad("no stream named"))?;
        if stream.is_empty()
            || !stream
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(bad("a stream's name is letters, digits, `-` and `_`"));
        }
        let (token, address) = match authority.rsplit_once('@') {
            Some((token, address)) => (Some(token), address),
            None => (None, authority),
        };
        if address.is_empty() {
            return Err(bad("no server named"));
        }
        let mut security = Security {
            auth: token.map_or(Auth::None, |t| Auth::Token(t.to_string())),
            ..Security::default()
        };
        let (mut cert, mut key) = (None, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| bad("a query option is NAME=FILE"))?;
            let file = PathBuf::from(value);
            if !file.is_file() {
                return Err(bad(&format!("{name}={value} is not a readable file")));
            }
            match name {
                "nkey" if token.is_none() => {
                    security.auth = Auth::NkeySeed(read_nkey_seed(&file).map_err(|e| bad(&e))?)
                }
                "nkey" => return Err(bad("give a token or an nkey, not both")),
                "ca" => security.ca = Some(file),
                "cert" => cert = Some(file),
                "key" => key = Some(file),
                other => return Err(bad(&format!("unknown option `{other}`"))),
            }
        }
        security.client_cert = match (cert, key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => return Err(bad("cert=FILE and key=FILE go together")),
        };
        Ok(StreamTarget {
            server: format!("{scheme}://{address}"),
            stream: stream.to_string(),
            security,
        })
    }
}

/// The nkey seed in a file (a line starting with `S`, as `nk -gen user`
/// or `clarion credentials` writes it).
pub fn read_nkey_seed(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read nkey seed {}: {e}", path.display()))?;
    text.lines()
        .map(str::trim)
        .find(|l| l.starts_with('S'))
        .map(str::to_string)
        .ok_or_else(|| {
            format!(
                "{} holds no nkey seed (a line starting with `S`, e.g. `SUAB...`)",
                path.display()
            )
        })
}

/// Items of `T` published to a JetStream stream (see the module docs).
pub struct StreamSink<T: ?Sized> {
    /// One worker thread drives the connection, and the sink's calls wait
    /// for it (see [`run`]), so a sink works from any thread, one inside
    /// another runtime included (the manager writes reports there).
    /// `None` once dropped.
    rt: Option<tokio::runtime::Runtime>,
    js: jetstream::Context,
    client: async_nats::Client,
    /// What the server refused, if anything: a refused publish's ack
    /// only times out.
    refusals: crate::Refusals,
    subject: async_nats::Subject,
    latch: Latch,
    /// Encoded items not yet published (at most [`BATCH`]).
    batch: Vec<Bytes>,
    _items: PhantomData<fn(&T)>,
}

impl<T: ?Sized> std::fmt::Debug for StreamSink<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSink")
            .field("destination", &self.latch.destination())
            .field("subject", &self.subject)
            .field("batch", &self.batch.len())
            .finish_non_exhaustive()
    }
}

impl<T: ?Sized> StreamSink<T> {
    /// Connects to `text`'s server and finds or creates its stream; `host`'s
    /// items go to `kind`'s subject for it.
    pub fn open(text: &str, kind: StreamKind, host: &str) -> Result<StreamSink<T>, NatsError> {
        crate::protocol::check_host_name(host)?;
        let target = StreamTarget::parse(text)?;
        let subject = kind.subject(host);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("clarion-stream")
            .enable_all()
            .build()?;
        let (stream_name, wanted, server, security) = (
            target.stream.clone(),
            subject.clone(),
            target.server.clone(),
            target.security.clone(),
        );
        let text_owned = text.to_string();
        let host_owned = host.to_string();
        let opened = run(&rt, async move {
            let text = text_owned;
            // Acks come back on the host's own inbox, the one its per-host
            // key may read (`credentials`).
            let inbox = crate::credentials::reply_inbox_prefix(&host_owned);
            let (client, refusals) =
                crate::connect(&server, &security, "clarion-stream", Some(inbox)).await?;
            let refused = |e: String| explain(&refusals, e);
            let js = jetstream::ContextBuilder::new()
                .ack_timeout(ACK_TIMEOUT)
                .build(client.clone());
            let config = stream::Config {
                name: stream_name.clone(),
                subjects: vec![kind.wildcard()],
                ..Default::default()
            };
            let mut found = js.get_or_create_stream(config).await.map_err(|e| {
                NatsError::Destination(format!(
                    "{text}: cannot find or create stream {stream_name}: {}",
                    refused(e.to_string())
                ))
            })?;
            let info = found.info().await.map_err(|e| {
                NatsError::Destination(format!("{text}: cannot read stream {stream_name}: {e}"))
            })?;
            let subjects = &info.config.subjects;
            if !subjects.iter().any(|s| *s == kind.wildcard() || *s == wanted) {
                return Err(NatsError::Destination(format!(
                    "{text}: stream {stream_name} takes subjects {subjects:?}, not {wanted}; name another \
                     stream (one is created taking {})",
                    kind.wildcard()
                )));
            }
            Ok::<_, NatsError>((client, js, refusals))
        });
        let (client, js, refusals) = match opened {
            Ok(Ok(opened)) => opened,
            Ok(Err(e)) => {
                rt.shutdown_background();
                return Err(e);
            }
            Err(stopped) => {
                rt.shutdown_background();
                return Err(NatsError::Nats(stopped));
            }
        };
        Ok(StreamSink {
            rt: Some(rt),
            js,
            client,
            refusals,
            subject: subject.into(),
            latch: Latch::new(text),
            batch: Vec::with_capacity(BATCH),
            _items: PhantomData,
        })
    }

    /// Publishes the batch and waits for every acknowledgement.
    fn send(&mut self) -> Result<(), SinkError> {
        self.latch.check()?;
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        let (js, subject) = (self.js.clone(), self.subject.clone());
        let sent = self.run(async move {
            let mut acks = Vec::with_capacity(batch.len());
            for payload in batch {
                let ack = js
                    .publish(subject.clone(), payload)
                    .await
                    .map_err(|e| format!("cannot publish to {subject}: {e}"))?;
                acks.push(ack);
            }
            let sent = acks.len();
            for ack in acks {
                ack.await.map_err(|e| {
                    format!(
                        "a publish to {subject} was not acknowledged ({e}); the stream may hold \
                         part of the last {sent} items"
                    )
                })?;
            }
            Ok::<_, String>(())
        });
        self.batch = Vec::with_capacity(BATCH);
        sent.and_then(|r| r)
            .map_err(|m| explain(&self.refusals, m))
            .map_err(|m| self.latch.fail(m))
    }

    fn run<F>(&self, f: F) -> Result<F::Output, String>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.rt {
            Some(rt) => run(rt, f),
            None => Err("the NATS client's runtime is gone".into()),
        }
    }
}

/// `e`, or why the server refused what this connection sent (it says so
/// only in an error message, while the refused request times out).
fn explain(refusals: &crate::Refusals, e: String) -> String {
    match refusals.lock().ok().and_then(|r| r.clone()) {
        Some(r) => format!("{e}: the NATS server refused it ({r}); the credentials do not allow it"),
        None => e,
    }
}

/// Runs `f` on `rt`'s worker and waits for it on this thread: unlike
/// `block_on`, this works inside another runtime too.
fn run<F>(rt: &tokio::runtime::Runtime, f: F) -> Result<F::Output, String>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        // The receiver waits below; it is gone only if this thread is.
        let _ = tx.send(f.await);
    });
    rx.recv()
        .map_err(|_| "the NATS client's runtime stopped".to_string())
}

impl<T: ?Sized> Drop for StreamSink<T> {
    fn drop(&mut self) {
        // Dropping a runtime waits for its tasks, which panics inside
        // another runtime; nothing is left to wait for after `finish`.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl<T: JsonLine + ?Sized> Sink<T> for StreamSink<T> {
    fn write(&mut self, item: &T) -> Result<(), SinkError> {
        let mut line = Vec::with_capacity(512);
        self.latch.encode(item, &mut line)?;
        // The message is the JSON line without its newline.
        line.pop();
        self.batch.push(line.into());
        if self.batch.len() >= BATCH {
            self.send()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        self.send()
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        self.send()?;
        let client = self.client.clone();
        let flushed = self.run(async move { client.flush().await.map_err(|e| e.to_string()) });
        let flushed = flushed
            .and_then(|r| r)
            .map_err(|e| self.latch.fail(format!("cannot flush the connection: {e}")));
        self.latch.close();
        flushed
    }

    fn destination(&self) -> &str {
        self.latch.destination()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_a_server_a_stream_and_credentials() {
        let t = StreamTarget::parse("nats://127.0.0.1:4222/FLOWS").unwrap();
        assert_eq!(t.server, "nats://127.0.0.1:4222");
        assert_eq!(t.stream, "FLOWS");
        assert_eq!(t.security, Security::default());
        let t = StreamTarget::parse("tls://s3cret@nats.example:4222/FLOWS").unwrap();
        assert_eq!(t.server, "tls://nats.example:4222");
        assert_eq!(t.security.auth, Auth::Token("s3cret".into()));

        let dir = tempfile::tempdir().unwrap();
        let seed = dir.path().join("web-1.nk");
        std::fs::write(&seed, "# web-1\nSUAXYZ\n").unwrap();
        let t = StreamTarget::parse(&format!(
            "nats://h:4222/F?nkey={}&ca={}",
            seed.display(),
            seed.display()
        ))
        .unwrap();
        assert_eq!(t.security.auth, Auth::NkeySeed("SUAXYZ".into()));
        assert_eq!(t.security.ca.as_deref(), Some(seed.as_path()));
    }

    #[test]
    fn wrong_targets_say_why() {
        for (text, why) in [
            ("nats://127.0.0.1:4222", "no stream named"),
            ("nats://127.0.0.1:4222/", "letters, digits"),
            ("nats://127.0.0.1:4222/a.b", "letters, digits"),
            ("nats:///FLOWS", "no server named"),
            ("nats://h:1/F?ca=/nonexistent", "not a readable file"),
            ("nats://h:1/F?cert=/etc/hostname", "go together"),
            ("nats://h:1/F?user=/etc/hostname", "unknown option"),
        ] {
            let e = StreamTarget::parse(text).unwrap_err().to_string();
            assert!(e.contains(why) && e.starts_with(text), "{text}: {e}");
        }
    }

    #[test]
    fn subjects_are_one_a_host_under_the_kinds_wildcard() {
        assert_eq!(StreamKind::Records.subject("web-1"), "clarion.records.web-1");
        assert_eq!(StreamKind::Records.wildcard(), "clarion.records.>");
        assert_eq!(StreamKind::Reports.subject("web-1"), "clarion.reports.web-1");
    }
}
