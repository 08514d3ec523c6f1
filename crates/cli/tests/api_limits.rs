//! A live host's control API against slow clients (issue 33): thousands of
//! connections that send part of a request's header and then nothing, as
//! a slowloris attack does. Each must be closed within the header timeout
//! (10 s), the server's descriptors must return to what they were, and a
//! normal request must be answered at once throughout.
//!
//! Needs root (`clarion run -i lo` opens a packet socket); skipped, saying
//! why, otherwise.

mod bus;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use bus::*;

/// Slow clients opened: issue 33's 5,000, fewer if this process may not
/// hold that many sockets (each also costs the server one descriptor).
const SLOW: usize = 5_000;
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// A whole `GET /v1/health`; how long until the status line came.
fn health(port: u16) -> Duration {
    let t = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .expect("sent");
    let mut buf = [0u8; 32];
    let n = s.read(&mut buf).expect("an answer");
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    t.elapsed()
}

#[test]
fn slow_clients_are_closed_at_the_header_timeout_and_never_delay_a_request() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: opening a packet socket needs root");
        return;
    }
    // As the server raises its own (`clarion-http-serve`).
    let limit = clarion_http_serve::raise_open_file_limit().unwrap_or(1024);
    let slow = SLOW.min(usize::try_from(limit).unwrap_or(usize::MAX).saturating_sub(200));
    if slow < SLOW {
        eprintln!("only {slow} slow clients: this process may open {limit} files");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("e.clarion"),
        "event seed\n  filter proto = icmp\n  when count(packets) > 0\n  every 1s\n",
    )
    .expect("events");
    let (host, port) = listen_on_free_port("clarion run -i lo --api", |api| {
        clarion()
            .args(["run", "-i", "lo", "--stats-every", "0", "--duration", "120s"])
            .args(["--events", "e.clarion", "-o", "reports.jsonl"])
            .args(["--api", &format!("127.0.0.1:{api}"), "--api-token", "limits-test"])
            .current_dir(dir.path())
            .stderr(Stdio::piped())
            .spawn()
            .expect("clarion run starts")
    });
    let pid = host.id();
    health(port);
    std::thread::sleep(Duration::from_millis(200));
    let baseline = descriptors(pid);

    // The slow clients, opened from another thread (on a loaded machine
    // that takes seconds), each with the time it was opened.
    let opener = std::thread::spawn(move || {
        (0..slow)
            .map(|_| {
                let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connects");
                s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: 127.0")
                    .expect("sent");
                (s, Instant::now())
            })
            .collect::<Vec<_>>()
    });
    // Requests meanwhile, until the last slow client has been open a while.
    let started = Instant::now();
    let mut took = Vec::new();
    let mut held = 0;
    while !opener.is_finished() || took.len() < 20 {
        took.push(health(port));
        held = held.max(descriptors(pid));
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut clients = opener.join().expect("opened");
    let all_open = started.elapsed();
    took.sort();
    let worst = took.last().copied().unwrap_or_default();
    eprintln!(
        "{slow} slow clients opened in {all_open:?}; the server held up to {held} descriptors ({baseline} before); \
         {} requests meanwhile: median {:?}, worst {worst:?}",
        took.len(),
        took[took.len() / 2]
    );
    assert!(
        held >= baseline + slow / 2,
        "the server took them: {held} descriptors"
    );
    // Answered at once (0.4 ms median, 0.8 ms worst on a quiet machine);
    // the bound leaves room for a loaded one, and is far below the 10 s a
    // request would wait if the slow clients held the server.
    assert!(
        took[took.len() / 2] < Duration::from_millis(100) && worst < Duration::from_secs(1),
        "requests took {took:?}"
    );

    // Each slow client is closed by the server within the timeout of its opening.
    for (s, opened) in &mut clients {
        let deadline = *opened + HEADER_TIMEOUT + Duration::from_secs(3);
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        s.set_read_timeout(Some(left)).expect("timeout");
        let mut buf = [0u8; 256];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue, // a 408 before the close
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!(
                    "a slow client still open {:?} after it was: {e}",
                    opened.elapsed()
                ),
            }
        }
    }
    drop(clients);
    eprintln!("all closed by the server within {:?}", started.elapsed());
    let until = Instant::now() + Duration::from_secs(5);
    while descriptors(pid) > baseline + 2 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = descriptors(pid);
    assert!(after <= baseline + 2, "descriptors {after}, {baseline} before");
    assert!(health(port) < Duration::from_secs(1));
    let out = host.terminate("clarion run -i lo");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
