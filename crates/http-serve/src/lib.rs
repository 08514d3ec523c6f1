//! Serves an axum [`Router`] on a TCP listener with the limits a server
//! reachable by anyone on the network needs, which `axum::serve` does not
//! set: it runs hyper without a timer, so a client that sends part of a
//! request's header, or nothing, holds its connection and descriptor for
//! ever (issue 33: 3,000 such connections stayed open 50 s and more).
//!
//! - **Header read timeout** ([`Limits::header_read_timeout`]): a request
//!   whose header has not fully arrived within it closes the connection.
//!   hyper starts it whenever it waits for a request's header, so it is
//!   also the idle timeout of a kept-alive connection between requests.
//!   A response being written (the event stream) is not bounded by it.
//! - **Concurrent connections** ([`Limits::max_connections`]): the loop
//!   accepts a connection only when fewer are open; the others wait in the
//!   kernel's backlog, holding no descriptor of this process. The backlog
//!   is widened to [`BACKLOG`] (the standard library listens with 128): a
//!   burst of connections beyond it has its handshakes dropped and retried
//!   a second later, a request of an operator among them too.
//! - **Accept errors** (out of descriptors, a connection reset before it
//!   was accepted) are counted and waited out, never the end of the server.
//!
//! Used by every HTTP server of Clarion: the control API with its console
//! and the Prometheus metrics endpoint.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The limits of one server. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
}

impl Default for Limits {
    /// 10 s for a request's header (nginx's `client_header_timeout` is 60 s,
    /// Apache's `RequestReadTimeout` 20–40 s; the clients are programs and
    /// browser pages on a management network), and 8,192 connections, or
    /// half the process's open-file limit if that is less: enough that
    /// thousands of clients holding connections open until the timeout
    /// leave room for everyone else, and never so many that the process
    /// runs out of descriptors for its captures and files.
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            max_connections: MAX_CONNECTIONS.min(open_file_limit() / 2).max(1),
        }
    }
}

const MAX_CONNECTIONS: usize = 8192;

/// Raises the process's soft limit on open files to its hard limit, as
/// Go's runtime and most servers do at start: the soft limit is often
/// 1,024 (systemd's default for services), the hard limit far higher, and
/// the connection limit is taken from it ([`Limits::default`]). Returns
/// the soft limit now; leaves it as it was on error.
pub fn raise_open_file_limit() -> io::Result<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a valid pointer to a local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if r.rlim_cur < r.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: r.rlim_max,
            rlim_max: r.rlim_max,
        };
        // SAFETY: setrlimit reads one rlimit through a valid pointer to a
        // local; raising the soft limit up to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(io::Error::last_os_error());
        }
        r.rlim_cur = r.rlim_max;
    }
    Ok(r.rlim_cur)
}

/// The soft limit on open files (`RLIMIT_NOFILE`), or 1,024 if unknown.
fn open_file_limit() -> usize {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a valid pointer to a
    // local, and has no other precondition.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    if got != 0 || r.rlim_cur == libc::RLIM_INFINITY {
        return if got != 0 { 1024 } else { usize::MAX };
    }
    usize::try_from(r.rlim_cur).unwrap_or(usize::MAX)
}

/// Connections the kernel queues for the accept loop (Linux caps it at
/// `net.core.somaxconn`, 4,096 by default).
pub const BACKLOG: i32 = 4096;

/// Listens again on the listening socket with [`BACKLOG`]: on Linux a
/// second `listen` only sets the backlog.
fn widen_backlog(listener: &TcpListener) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: listen(2) on the descriptor the listener owns, which is open
    // and listening for as long as `listener` is borrowed; nothing else is
    // read or written.
    if unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The servers of this process and their counts, as [`render_prometheus`] shows them.
static SERVERS: std::sync::Mutex<Vec<(&'static str, Arc<Counts>)>> = std::sync::Mutex::new(Vec::new());

/// The counts of the server named `server` (`api`, `metrics`), shown on
/// every `/metrics` page of the process; the same counts for the same name.
pub fn counts_for(server: &'static str) -> Arc<Counts> {
    let mut all = SERVERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = all.iter().find(|(s, _)| *s == server) {
        return Arc::clone(c);
    }
    let c = Arc::new(Counts::default());
    all.push((server, Arc::clone(&c)));
    c
}

/// Appends the servers' counts to a Prometheus page: the families
/// `clarion_http_connections_total`, `clarion_http_connections_failed_total`
/// and `clarion_http_accept_errors_total`, labelled `server`.
pub fn render_prometheus(page: &mut String) {
    use std::fmt::Write;
    let all = SERVERS.lock().unwrap_or_else(|e| e.into_inner());
    if all.is_empty() {
        return;
    }
    type Get = fn(&Counts) -> u64;
    let families: [(&str, &str, Get); 3] = [
        ("clarion_http_connections_total", "Connections the server accepted.", |c| {
            c.accepted.load(Ordering::Relaxed)
        }),
        (
            "clarion_http_connections_failed_total",
            "Connections that ended in an error: a request header not in within the timeout, a malformed request, a reset.",
            |c| c.failed.load(Ordering::Relaxed),
        ),
        (
            "clarion_http_accept_errors_total",
            "Errors accepting a connection (out of descriptors, a connection reset while queued).",
            |c| c.accept_errors.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, get) in families {
        let _ = writeln!(page, "# HELP {name} {help}\n# TYPE {name} counter");
        for (server, c) in all.iter() {
            let _ = writeln!(page, "{name}{{server=\"{server}\"}} {}", get(c));
        }
    }
}

/// What a server counted while it ran (for its owner to show).
#[derive(Debug, Default)]
pub struct Counts {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections that ended in an error: a header that did not arrive in
    /// time, a malformed request, a reset.
    pub failed: AtomicU64,
    /// Errors of `accept` itself (out of descriptors, a connection reset
    /// while queued), each followed by a pause.
    pub accept_errors: AtomicU64,
}

/// How long the loop waits after an accept error: the condition (no
/// descriptors left) lasts a while, and retrying at once would spin.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

/// Serves `app` on `listener` until the listener fails for good (never,
/// in practice: accept errors are waited out). Runs on the caller's tokio
/// runtime; each connection is a task of its own.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    counts: Arc<Counts>,
) -> io::Result<()> {
    widen_backlog(&listener)?;
    let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        // Wait for room before accepting, so the excess waits in the backlog.
        let permit = Arc::clone(&open)
            .acquire_owned()
            .await
            .map_err(|e| io::Error::other(e.to_string()))?;
        let stream = match listener.accept().await {
            Ok((stream, _peer)) => stream,
            Err(_) => {
                counts.accept_errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(ACCEPT_PAUSE).await;
                continue;
            }
        };
        counts.accepted.fetch_add(1, Ordering::Relaxed);
        let service = TowerToHyperService::new(app.clone());
        let counts = Arc::clone(&counts);
        tokio::spawn(async move {
            let served = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if served.is_err() {
                counts.failed.fetch_add(1, Ordering::Relaxed);
            }
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests;
