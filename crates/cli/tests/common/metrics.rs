//! Reading a `/metrics` page in tests: fetch it, pick a sample, and lint
//! it with Prometheus's own parser (`promtool check metrics`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::Duration;

/// Reads a clarion process's standard error up to its `metrics at
/// http://ADDR/metrics` line; ADDR. The rest of the pipe is drained on a
/// thread (the process must never block on a full pipe).
pub fn address(err: std::process::ChildStderr) -> String {
    let mut lines = BufReader::new(err).lines();
    let mut seen = String::new();
    for line in lines.by_ref() {
        let line = line.expect("stderr readable");
        seen.push_str(&line);
        seen.push('\n');
        if let Some(rest) = line.split("metrics at http://").nth(1) {
            let addr = rest.split("/metrics").next().unwrap_or_default().to_string();
            std::thread::spawn(move || for _ in lines {});
            return addr;
        }
    }
    panic!("no metrics line; stderr:\n{seen}");
}

/// The `/metrics` page at `addr` (`HOST:PORT`), over HTTP/1.0, read to
/// the end; panics unless the answer is 200.
pub fn page(addr: &str) -> String {
    let mut c = TcpStream::connect(addr).expect("metrics address");
    c.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(c, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request");
    let mut text = String::new();
    c.read_to_string(&mut text).expect("response");
    let (head, body) = text.split_once("\r\n\r\n").expect("a header and a body");
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    body.to_string()
}

/// A sample's value on a page: the line `SERIES VALUE`, where `series`
/// is written whole (`name{label="v"}`).
pub fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// `promtool check metrics` on a page: no format error, no lint
/// complaint. Without promtool, says so and checks nothing.
pub fn promtool_accepts(page: &str, what: &str) {
    let Some(promtool) = super::tool("promtool") else {
        eprintln!("promtool not installed: {what}'s page not linted");
        return;
    };
    let mut c = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    c.stdin
        .take()
        .expect("stdin")
        .write_all(page.as_bytes())
        .expect("page written");
    let o = c.wait_with_output().expect("promtool ends");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.status.success() && said.trim().is_empty(),
        "{what}: promtool says:\n{said}\n{page}"
    );
}
