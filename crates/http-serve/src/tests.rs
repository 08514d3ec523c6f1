//! Real sockets on loopback against the real server.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use axum::routing::get;

use super::*;

/// A server of `limits` on a port of its own, in a thread with its runtime.
fn server(limits: Limits) -> (SocketAddr, Arc<Counts>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = listener.local_addr().expect("its address");
    listener.set_nonblocking(true).expect("non-blocking");
    let counts = Arc::new(Counts::default());
    let c = Arc::clone(&counts);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async move {
            let l = TcpListener::from_std(listener).expect("a tokio listener");
            let app = Router::new().route("/", get(|| async { "ok" }));
            let _ = serve(l, app, limits, c).await;
        });
    });
    (addr, counts)
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

/// Sends a whole request and reads the response's first bytes; how long it took.
fn request(addr: SocketAddr) -> Duration {
    let t = Instant::now();
    let mut s = TcpStream::connect(addr).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(GET).expect("sent");
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).expect("an answer");
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    t.elapsed()
}

/// Reads until the server closes `s`; how long that took from `since`.
fn closed_after(s: &mut TcpStream, since: Instant) -> Duration {
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return since.elapsed(),
            // A 408 or the response to a completed request: read on.
            Ok(_) => {}
        }
    }
}

fn limits(timeout_ms: u64, max: usize) -> Limits {
    Limits {
        header_read_timeout: Duration::from_millis(timeout_ms),
        max_connections: max,
    }
}

#[test]
fn a_partial_header_a_silent_client_and_an_idle_kept_alive_connection_are_closed_at_the_timeout() {
    let (addr, counts) = server(limits(300, 64));
    let t = Instant::now();
    let mut partial = TcpStream::connect(addr).expect("connects");
    partial.write_all(b"GET / HTTP/1.1\r\nHost: 127.0").expect("sent");
    let mut silent = TcpStream::connect(addr).expect("connects");
    let mut kept = TcpStream::connect(addr).expect("connects");
    kept.write_all(GET).expect("sent");
    for (what, s) in [
        ("partial", &mut partial),
        ("silent", &mut silent),
        ("kept alive", &mut kept),
    ] {
        let after = closed_after(s, t);
        assert!(
            after >= Duration::from_millis(250) && after < Duration::from_secs(3),
            "{what}: closed after {after:?}"
        );
    }
    // The server still answers.
    assert!(request(addr) < Duration::from_secs(2));
    assert_eq!(counts.accepted.load(Ordering::Relaxed), 4);
}

#[test]
fn many_slow_clients_leave_room_for_a_normal_request_and_all_go_at_the_timeout() {
    // 400 clients (800 descriptors in this process: under the usual 1,024)
    // trickle a header; requests meanwhile answer at once.
    const SLOW: usize = 400;
    let (addr, _) = server(limits(1_000, 1_000));
    let t = Instant::now();
    let mut slow: Vec<TcpStream> = (0..SLOW)
        .map(|_| {
            let mut s = TcpStream::connect(addr).expect("connects");
            s.write_all(b"GET / HTTP/1.1\r\n").expect("sent");
            s
        })
        .collect();
    let mut worst = Duration::ZERO;
    while t.elapsed() < Duration::from_millis(800) {
        worst = worst.max(request(addr));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(worst < Duration::from_millis(100), "a request took {worst:?}");
    for s in &mut slow {
        let after = closed_after(s, t);
        assert!(after < Duration::from_secs(5), "a slow client stayed {after:?}");
    }
}

#[test]
fn beyond_the_connection_limit_a_client_waits_for_room_and_is_then_served() {
    let (addr, counts) = server(limits(500, 2));
    let t = Instant::now();
    let _a = TcpStream::connect(addr).expect("connects");
    let _b = TcpStream::connect(addr).expect("connects");
    // Both slots are held by silent clients until their timeout.
    let took = request(addr);
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(3),
        "the third waited {took:?}, since {:?}",
        t.elapsed()
    );
    assert_eq!(counts.accepted.load(Ordering::Relaxed), 3);
}

#[test]
fn a_full_server_queues_a_thousand_connections_in_its_backlog() {
    // One slot, held by a silent client for 5 s: every other connection
    // waits in the backlog. With the standard 128, connects beyond it
    // would have their handshakes dropped and take a second or more.
    let (addr, _) = server(limits(5_000, 1));
    let _held = TcpStream::connect(addr).expect("connects");
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    let queued: Vec<TcpStream> = (0..1_000)
        .map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("queued"))
        .collect();
    let took = t.elapsed();
    assert!(took < Duration::from_secs(1), "1,000 connects took {took:?}");
    drop(queued);
}

#[test]
fn the_soft_open_file_limit_is_raised_to_the_hard_one() {
    let soft = raise_open_file_limit().expect("raised");
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: as in `open_file_limit`.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0);
    assert_eq!((soft, r.rlim_cur), (r.rlim_max, r.rlim_max));
}

#[test]
fn counts_are_shown_by_server_name() {
    let a = counts_for("test-a");
    a.accepted.fetch_add(3, Ordering::Relaxed);
    counts_for("test-a").failed.fetch_add(1, Ordering::Relaxed);
    let mut page = String::new();
    render_prometheus(&mut page);
    assert!(
        page.contains("clarion_http_connections_total{server=\"test-a\"} 3\n"),
        "{page}"
    );
    assert!(
        page.contains("clarion_http_connections_failed_total{server=\"test-a\"} 1\n"),
        "{page}"
    );
    assert!(
        page.contains("clarion_http_accept_errors_total{server=\"test-a\"} 0\n"),
        "{page}"
    );
    assert_eq!(
        page.matches("# TYPE clarion_http_connections_total counter")
            .count(),
        1
    );
}

#[test]
fn the_default_leaves_descriptors_to_the_rest_of_the_process() {
    let d = Limits::default();
    assert_eq!(d.header_read_timeout, Duration::from_secs(10));
    assert!(d.max_connections >= 1 && d.max_connections <= MAX_CONNECTIONS);
    assert!(d.max_connections <= open_file_limit() / 2 || open_file_limit() < 2);
}
