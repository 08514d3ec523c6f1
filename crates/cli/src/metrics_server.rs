//! `--metrics ADDR`: the Prometheus endpoint (`GET /metrics`) of a live run,
//! served by axum on a thread of its own so it never delays a worker.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use clarion_live::{render_metrics, HostMetrics, WorkerMetrics};

use crate::Failure;

#[derive(Clone)]
struct Metrics {
    workers: Arc<Vec<Arc<WorkerMetrics>>>,
    host: Arc<HostMetrics>,
}

async fn metrics(State(m): State<Metrics>) -> impl IntoResponse {
    let mut page = render_metrics(&m.workers, &m.host);
    render_sources(&mut page);
    clarion_http_serve::render_prometheus(&mut page);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        page,
    )
}

/// Appends whole metric families (HELP, TYPE, samples) to the page.
pub type Source = Box<dyn Fn(&mut String) + Send + Sync>;

/// Families from parts of the process that start after the server (the
/// alert sinks: their counters live in `clarion-alerts`), rendered after
/// the host's, in the order added. Process-wide: one page per process.
static SOURCES: std::sync::Mutex<Vec<Source>> = std::sync::Mutex::new(Vec::new());

/// Adds `source` to every page served from now on (by any server of the process).
pub fn add_source(source: Source) {
    SOURCES.lock().unwrap_or_else(|e| e.into_inner()).push(source);
}

fn render_sources(page: &mut String) {
    for s in SOURCES.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        s(page);
    }
}

/// Binds `addr` now (so a busy port is reported before capture starts) and
/// serves until the process exits. Returns the bound address (port 0 picks one).
pub fn serve(
    addr: SocketAddr,
    workers: Vec<Arc<WorkerMetrics>>,
    host: Arc<HostMetrics>,
) -> Result<SocketAddr, Failure> {
    let std_listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("cannot serve metrics on {addr}"))
        .map_err(Failure::Runtime)?;
    let bound = std_listener
        .local_addr()
        .map_err(|e| Failure::Runtime(anyhow!(e)))?;
    std_listener
        .set_nonblocking(true)
        .map_err(|e| Failure::Runtime(anyhow!(e)))?;
    let state = Metrics {
        workers: Arc::new(workers),
        host,
    };
    let app = Router::new().route("/metrics", get(metrics)).with_state(state);
    std::thread::Builder::new()
        .name("clarion-metrics".into())
        .spawn(move || {
            // Time too: the connections' header and idle timeouts.
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("clarion: warning: metrics endpoint not started: {e}");
                    return;
                }
            };
            rt.block_on(async move {
                if let Err(e) = clarion_http_serve::raise_open_file_limit() {
                    eprintln!(
                        "clarion: warning: cannot raise the open-file limit for the metrics endpoint: {e}"
                    );
                }
                let limits = clarion_http_serve::Limits::default();
                let served = match tokio::net::TcpListener::from_std(std_listener) {
                    Ok(l) => {
                        let counts = clarion_http_serve::counts_for("metrics");
                        clarion_http_serve::serve(l, app, limits, counts).await
                    }
                    Err(e) => Err(e),
                };
                if let Err(e) = served {
                    eprintln!("clarion: warning: metrics endpoint stopped: {e}");
                }
            });
        })
        .map_err(|e| Failure::Runtime(anyhow!(e).context("cannot start the metrics thread")))?;
    Ok(bound)
}
