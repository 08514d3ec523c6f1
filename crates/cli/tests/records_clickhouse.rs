//! `--records clickhouse+http://HOST:PORT/TABLE`: a replay's flow records
//! inserted into a real ClickHouse (Debian `clickhouse-server`), table as
//! `docs/records.md` defines it: `SELECT count(), sum(packets),
//! sum(bytes)` equals the same run's Parquet file; a missing table is
//! refused before the run.
//!
//! Skipped, saying so, where `clickhouse-server` is not installed.

mod bus;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use bus::{clarion, free_port, listen_on_free_port, Guard};

/// The table of docs/records.md ("Flow records in ClickHouse"), as there.
const TABLE: &str = "CREATE TABLE flows (
    schema String,
    src_ip String, dst_ip String,
    src_port Nullable(UInt16), dst_port Nullable(UInt16),
    proto UInt8, vlan Nullable(UInt16), vni Nullable(UInt32),
    first_ns UInt64, last_ns UInt64,
    packets UInt64, bytes UInt64,
    tcp_flags UInt8, min_size UInt32, max_size UInt32,
    end_reason String, community_id String
) ENGINE = MergeTree ORDER BY first_ns";

fn server() -> Option<PathBuf> {
    let path = PathBuf::from("/usr/sbin/clickhouse-server");
    if path.is_file() && Path::new("/etc/clickhouse-server/config.xml").is_file() {
        return Some(path);
    }
    eprintln!("skipped: clickhouse-server is not installed (apt-get install clickhouse-server)");
    None
}

/// A ClickHouse server with its data in `dir`, its HTTP interface on a
/// free loopback port (returned), its other ports free too.
fn start(bin: &Path, dir: &Path) -> (Guard, u16) {
    let path = |p: &str| format!("{}/{p}/", dir.display());
    listen_on_free_port("clickhouse-server", |http| -> Child {
        Command::new(bin)
            .arg("--config-file=/etc/clickhouse-server/config.xml")
            .arg("--")
            .arg(format!("--http_port={http}"))
            .arg(format!("--tcp_port={}", free_port()))
            .arg(format!("--interserver_http_port={}", free_port()))
            .arg("--listen_host=127.0.0.1")
            .arg(format!("--path={}", path("data")))
            .arg(format!("--tmp_path={}", path("tmp")))
            .arg(format!("--user_files_path={}", path("user_files")))
            .arg(format!("--format_schema_path={}", path("format_schemas")))
            .arg(format!("--logger.log={}", dir.join("server.log").display()))
            .arg(format!("--logger.errorlog={}", dir.join("server.err").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("clickhouse-server starts")
    })
}

/// `query` over HTTP: the status line's code and the body.
fn query(port: u16, query: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connects");
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{query}",
        query.len()
    )
    .expect("sends");
    let mut answer = String::new();
    s.read_to_string(&mut answer).expect("reads");
    let code = answer.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    // Chunked: one chunk's text, between its size line and the next.
    let body = if head.to_lowercase().contains("transfer-encoding: chunked") {
        body.split("\r\n").nth(1).unwrap_or("")
    } else {
        body
    };
    (code, body.trim().to_string())
}

/// 18,408 flows (three batches of inserts), else the bundled capture.
fn capture() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let shared = root.join("../shared/captures/pathspider_real.pcap");
    if shared.is_file() {
        return shared;
    }
    eprintln!("{}: absent; the bundled capture instead", shared.display());
    root.join("examples/demo.pcap")
}

#[test]
fn a_replays_records_in_clickhouse_total_as_its_parquet_file() {
    let Some(bin) = server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (_server, port) = start(&bin, &d.join("ch"));
    let dest = format!("clickhouse+http://127.0.0.1:{port}/flows");

    // No table yet: refused before the run, naming the definition.
    let o = clarion()
        .args(["run", "--quiet", "--pcap"])
        .arg(capture())
        .args(["--records", &dest])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("no table flows") && err.contains("docs/records.md"),
        "{err}"
    );

    let (code, answer) = query(port, TABLE);
    assert_eq!(code, 200, "{answer}");
    let parquet = d.join("f.parquet");
    let o = clarion()
        .args(["run", "--quiet", "--pcap"])
        .arg(capture())
        .args(["--records", &dest, "--records"])
        .arg(&parquet)
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let records = clarion_parquet::read_records(&parquet).expect("the Parquet file");
    let want = format!(
        "{}\t{}\t{}",
        records.len(),
        records.iter().map(|r| r.packets).sum::<u64>(),
        records.iter().map(|r| r.bytes).sum::<u64>()
    );
    assert!(!records.is_empty());
    let (code, got) = query(port, "SELECT count(), sum(packets), sum(bytes) FROM flows");
    assert_eq!(code, 200, "{got}");
    assert_eq!(got, want);
}
