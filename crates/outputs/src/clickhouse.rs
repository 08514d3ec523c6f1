//! Flow records inserted into a ClickHouse table over its HTTP interface
//! (`clickhouse+http://[USER[:PASSWORD]@]HOST:PORT/[DATABASE.]TABLE`):
//! batches of JSON lines, `INSERT INTO TABLE FORMAT JSONEachRow`, each
//! record the object `FILE.jsonl` holds (`docs/records.md` has the
//! table's definition).
//!
//! - **Batches** of [`BATCH`] records, and whatever is held at a flush
//!   (a live host flushes after each batch of records) or at the end.
//! - **Retries**: a batch the server did not take for a reason that may
//!   pass (no connection, a timeout, HTTP 5xx) is sent again, at most
//!   [`ATTEMPTS`] times in all, [`BACKOFF`] apart, doubling; then, or at
//!   once for a refusal (HTTP 4xx: no such table, a column's type), the
//!   run ends with ClickHouse's message. A batch the server applied but
//!   whose answer was lost is inserted twice by its retry (a
//!   `ReplicatedMergeTree` table drops the repeated block; a `MergeTree`
//!   keeps both).
//! - **At open** the table is looked up (`EXISTS TABLE`), so a missing one
//!   is refused before the run, naming the definition to create.

use std::time::Duration;

use clarion_records::FlowRecord;
use clarion_sinks::{BoxSink, Latch, Sink, SinkError};

use crate::{Backend, Destination, Kind, OutputError, Target};

pub const BACKEND: Backend = Backend {
    name: "ClickHouse",
    feature: None,
    built: true,
    forms: "clickhouse+http://HOST:PORT/TABLE",
    claims: |t: &Target, _: Kind| t.scheme() == Some("clickhouse+http"),
    reports: None,
    records: Some(open),
    gpvs: None,
};

/// Records a request carries.
pub const BATCH: usize = 8192;
/// Tries of one batch, the first included.
pub const ATTEMPTS: u32 = 3;
/// The wait before the second try (doubled before the third).
pub const BACKOFF: Duration = Duration::from_millis(500);
/// The longest one request may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A destination's parts: the server's base URL, the credentials and the table.
#[derive(Debug, PartialEq, Eq)]
struct Table {
    /// `http://HOST:PORT/`.
    base: String,
    user: Option<(String, Option<String>)>,
    table: String,
}

impl Table {
    fn parse(text: &str) -> Result<Table, String> {
        let bad = |why: &str| {
            let text = redact(text);
            format!("{text}: {why}; give clickhouse+http://[USER[:PASSWORD]@]HOST:PORT/[DATABASE.]TABLE")
        };
        let rest = text
            .strip_prefix("clickhouse+http://")
            .ok_or_else(|| bad("not a clickhouse+http URL"))?;
        let (authority, table) = rest.split_once('/').ok_or_else(|| bad("no table named"))?;
        let name_ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !table.split('.').all(name_ok) || table.split('.').count() > 2 {
            return Err(bad("a table is [DATABASE.]TABLE, each letters, digits and `_`"));
        }
        let (user, address) = match authority.rsplit_once('@') {
            Some((user, address)) => {
                let (name, password) = match user.split_once(':') {
                    Some((n, p)) => (n, Some(p.to_string())),
                    None => (user, None),
                };
                (Some((name.to_string(), password)), address)
            }
            None => (None, authority),
        };
        if address.is_empty() {
            return Err(bad("no server named"));
        }
        Ok(Table {
            base: format!("http://{address}/"),
            user,
            table: table.to_string(),
        })
    }

    /// The URL of `query`, with the credentials (query parameters, which
    /// every ClickHouse version takes).
    fn url(&self, query: &str) -> String {
        let mut url = format!("{}?query={}", self.base, encode(query));
        if let Some((user, password)) = &self.user {
            url.push_str(&format!("&user={}", encode(user)));
            if let Some(p) = password {
                url.push_str(&format!("&password={}", encode(p)));
            }
        }
        url
    }
}

/// Percent-encodes all but unreserved characters (RFC 3986).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The destination as messages name it: without the credentials.
fn redact(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_string();
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    match authority.rsplit_once('@') {
        Some((_, host)) if rest.contains('/') => format!("{scheme}://…@{host}/{path}"),
        Some((_, host)) => format!("{scheme}://…@{host}"),
        None => text.to_string(),
    }
}

fn open(d: &Destination<FlowRecord>) -> Result<BoxSink<FlowRecord>, OutputError> {
    let destination = redact(d.text());
    let backend = |m: String| OutputError::Backend(m.into());
    let table = Table::parse(d.text()).map_err(backend)?;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(TIMEOUT))
        .user_agent(concat!("clarion/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let sink = ClickHouse {
        insert: table.url(&format!("INSERT INTO {} FORMAT JSONEachRow", table.table))
            + "&input_format_skip_unknown_fields=1",
        agent,
        latch: Latch::new(destination),
        body: Vec::new(),
        rows: 0,
    };
    let exists = sink
        .post(&table.url(&format!("EXISTS TABLE {}", table.table)), &[])
        .map_err(|(m, _)| backend(format!("{}: {m}", sink.latch.destination())))?;
    if exists.trim() != "1" {
        return Err(backend(format!(
            "{}: no table {}; create it as docs/records.md says (\"Flow records in ClickHouse\")",
            sink.latch.destination(),
            table.table
        )));
    }
    Ok(Box::new(sink))
}

/// Records to a ClickHouse table (see the module docs).
struct ClickHouse {
    agent: ureq::Agent,
    /// The INSERT's URL.
    insert: String,
    latch: Latch,
    /// JSON lines not yet sent, `rows` of them.
    body: Vec<u8>,
    rows: usize,
}

impl ClickHouse {
    /// One request: the answer's text, or why not and whether another try may work.
    fn post(&self, url: &str, body: &[u8]) -> Result<String, (String, bool)> {
        let mut response = self
            .agent
            .post(url)
            .header("Content-Type", "application/x-ndjson")
            .send(body)
            .map_err(|e| (e.to_string(), true))?;
        let status = response.status();
        let text = response
            .body_mut()
            .with_config()
            .limit(64 * 1024)
            .read_to_string()
            .unwrap_or_default();
        if status.is_success() {
            return Ok(text);
        }
        let message: String = text.trim().chars().take(400).collect();
        Err((format!("HTTP {status}: {message}"), status.is_server_error()))
    }

    /// Inserts the held records, retried as the module docs say.
    fn send(&mut self) -> Result<(), SinkError> {
        self.latch.check()?;
        if self.rows == 0 {
            return Ok(());
        }
        let mut wait = BACKOFF;
        for attempt in 1..=ATTEMPTS {
            match self.post(&self.insert, &self.body) {
                Ok(_) => {
                    self.body.clear();
                    self.rows = 0;
                    return Ok(());
                }
                Err((m, retry)) if !retry || attempt == ATTEMPTS => {
                    let rows = self.rows;
                    return Err(self.latch.fail(format!(
                        "an INSERT of {rows} records failed (try {attempt} of at most {ATTEMPTS}): {m}"
                    )));
                }
                Err(_) => {
                    std::thread::sleep(wait);
                    wait *= 2;
                }
            }
        }
        Ok(())
    }
}

impl Sink<FlowRecord> for ClickHouse {
    fn write(&mut self, item: &FlowRecord) -> Result<(), SinkError> {
        self.latch.encode(item, &mut self.body)?;
        self.rows += 1;
        if self.rows >= BATCH {
            self.send()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        self.send()
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        let r = self.send();
        self.latch.close();
        r
    }

    fn destination(&self) -> &str {
        self.latch.destination()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_destination_names_a_server_a_table_and_credentials() {
        let t = Table::parse("clickhouse+http://127.0.0.1:8123/flows").unwrap();
        assert_eq!(t.base, "http://127.0.0.1:8123/");
        assert_eq!(t.table, "flows");
        assert_eq!(t.user, None);
        let t = Table::parse("clickhouse+http://ingest:p%w@ch:8123/net.flows").unwrap();
        assert_eq!(t.user, Some(("ingest".into(), Some("p%w".into()))));
        assert_eq!(
            t.url("EXISTS TABLE net.flows"),
            "http://ch:8123/?query=EXISTS%20TABLE%20net.flows&user=ingest&password=p%25w"
        );
        for (text, why) in [
            ("clickhouse+http://ch:8123", "no table"),
            ("clickhouse+http://ch:8123/a.b.c", "[DATABASE.]TABLE"),
            ("clickhouse+http://ch:8123/fl-ows", "[DATABASE.]TABLE"),
            ("clickhouse+http:///flows", "no server"),
        ] {
            let e = Table::parse(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
        assert_eq!(
            redact("clickhouse+http://u:secret@ch:8123/t"),
            "clickhouse+http://…@ch:8123/t"
        );
        let e = Table::parse("clickhouse+http://u:secret@ch:8123").unwrap_err();
        assert!(
            e.starts_with("clickhouse+http://…@ch:8123: no table") && !e.contains("secret"),
            "{e}"
        );
    }

    /// A server answering each request with the next of `answers` (status,
    /// body), then closing; the requests' first lines, in order.
    fn scripted(answers: Vec<(u16, &'static str)>) -> (u16, std::thread::JoinHandle<Vec<String>>) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let handle = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for (status, body) in answers {
                let (stream, _) = listener.accept().unwrap();
                let mut reader = BufReader::new(stream);
                let mut first = String::new();
                reader.read_line(&mut first).unwrap();
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    if let Some(v) = line.to_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap();
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut sent = vec![0; length];
                reader.read_exact(&mut sent).unwrap();
                seen.push(format!(
                    "{} {}",
                    first.trim(),
                    String::from_utf8_lossy(&sent).lines().count()
                ));
                let mut stream = reader.into_inner();
                write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
            }
            seen
        });
        (port, handle)
    }

    fn record() -> FlowRecord {
        FlowRecord::of_packet(Default::default(), 7, 48, 0)
    }

    #[test]
    fn a_failed_insert_is_retried_and_a_refused_one_ends_the_run() {
        // EXISTS, then an INSERT answered 503 and taken on the second try.
        let (port, server) = scripted(vec![(200, "1\n"), (503, "busy"), (200, "")]);
        let mut sink =
            crate::open::<FlowRecord>(&format!("clickhouse+http://127.0.0.1:{port}/flows")).unwrap();
        sink.write(&record()).unwrap();
        sink.write(&record()).unwrap();
        sink.finish().unwrap();
        let seen = server.join().unwrap();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(seen[0].contains("EXISTS%20TABLE%20flows"), "{seen:?}");
        assert!(seen[1].contains("INSERT%20INTO%20flows%20FORMAT%20JSONEachRow") && seen[1].ends_with(" 2"));
        assert_eq!(seen[1], seen[2], "the same batch again");

        // A refusal (4xx) is not retried: ClickHouse's message ends the run.
        let (port, server) = scripted(vec![(200, "1\n"), (400, "Code: 26, Cannot parse JSON")]);
        let mut sink =
            crate::open::<FlowRecord>(&format!("clickhouse+http://127.0.0.1:{port}/flows")).unwrap();
        sink.write(&record()).unwrap();
        let e = sink.flush().unwrap_err();
        let said = format!(
            "{e}: {}",
            std::error::Error::source(&e)
                .map(|s| s.to_string())
                .unwrap_or_default()
        );
        assert!(
            said.contains("127.0.0.1") && said.contains("HTTP 400") && said.contains("Cannot parse JSON"),
            "{said}"
        );
        assert!(
            matches!(sink.flush(), Err(SinkError::Closed { .. })),
            "closed after the error"
        );
        assert_eq!(server.join().unwrap().len(), 2);

        // No table: refused at open.
        let (port, server) = scripted(vec![(200, "0\n")]);
        let Err(e) = crate::open::<FlowRecord>(&format!("clickhouse+http://127.0.0.1:{port}/flows")) else {
            panic!("a missing table is refused");
        };
        assert!(e.to_string().contains("no table flows"), "{e}");
        server.join().unwrap();
    }
}
