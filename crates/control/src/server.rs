//! The control API's HTTP server.
//!
//! Every route turns into a [`Command`] sent to the manager's owner, which
//! answers on the command's channel; fired events reach `/v1/reports`
//! through a broadcast channel (a slow reader that falls behind loses the
//! oldest and is told how many, as an SSE comment).
//!
//! With a token, every route but `/v1/health` needs `Authorization: Bearer
//! <token>`; the caller decides when a token is required (beyond loopback).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures_util::{Stream, StreamExt};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_stream::wrappers::BroadcastStream;

use crate::model::{Command, ControlError, ErrorBody, Reply};

/// What the routes need: where commands go, and the stream of fired events (JSON text).
#[derive(Clone, Debug)]
pub struct ControlHandle {
    pub commands: mpsc::Sender<Command>,
    pub reports: broadcast::Sender<String>,
    token: Option<String>,
}

impl ControlHandle {
    pub fn new(
        commands: mpsc::Sender<Command>,
        reports: broadcast::Sender<String>,
        token: Option<String>,
    ) -> Self {
        ControlHandle {
            commands,
            reports,
            token,
        }
    }
}

impl IntoResponse for ControlError {
    fn into_response(self) -> Response {
        let status = match self {
            ControlError::Invalid(_) => StatusCode::BAD_REQUEST,
            ControlError::NotFound(_) => StatusCode::NOT_FOUND,
            ControlError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ControlError::Gone => StatusCode::SERVICE_UNAVAILABLE,
        };
        (
            status,
            Json(ErrorBody {
                error: self.to_string(),
            }),
        )
            .into_response()
    }
}

/// Sends a command and waits for its answer.
async fn ask<T>(h: &ControlHandle, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, ControlError> {
    let (tx, rx) = oneshot::channel();
    h.commands.send(make(tx)).await.map_err(|_| ControlError::Gone)?;
    rx.await.map_err(|_| ControlError::Gone)?
}

async fn health() -> &'static str {
    "ok\n"
}

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/yaml")], crate::OPENAPI)
}

async fn list(State(h): State<ControlHandle>) -> Response {
    match ask(&h, |reply| Command::List { reply }).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn add(State(h): State<ControlHandle>, body: Bytes) -> Response {
    let Ok(source) = String::from_utf8(body.to_vec()) else {
        return ControlError::Invalid("the body must be an events file's text (UTF-8)".into())
            .into_response();
    };
    match ask(&h, |reply| Command::Add { source, reply }).await {
        Ok(v) => (StatusCode::CREATED, Json(v)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn show(State(h): State<ControlHandle>, Path(name): Path<String>) -> Response {
    match ask(&h, |reply| Command::Show { name, reply }).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn remove(State(h): State<ControlHandle>, Path(name): Path<String>) -> Response {
    match ask(&h, |reply| Command::Remove { name, reply }).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn hosts(State(h): State<ControlHandle>) -> Response {
    match ask(&h, |reply| Command::Hosts { reply }).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn reports(State(h): State<ControlHandle>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let stream = BroadcastStream::new(h.reports.subscribe()).map(|item| {
        Ok(match item {
            Ok(json) => Event::default().event("report").data(json),
            Err(BroadcastStreamRecvError::Lagged(n)) => {
                Event::default().comment(format!("lagged: {n} reports lost"))
            }
        })
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
}

async fn check_token(State(h): State<ControlHandle>, req: Request, next: Next) -> Response {
    if let Some(token) = &h.token {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if given != Some(token.as_str()) {
            let body = ErrorBody {
                error: "this API needs `Authorization: Bearer <token>` (clarion events --token, or CLARION_API_TOKEN)"
                    .into(),
            };
            return (StatusCode::UNAUTHORIZED, Json(body)).into_response();
        }
    }
    next.run(req).await
}

/// The API's routes.
pub fn router(h: ControlHandle) -> Router {
    let guarded = Router::new()
        .route("/v1/events", get(list).post(add))
        .route("/v1/events/{name}", get(show).delete(remove))
        .route("/v1/hosts", get(hosts))
        .route("/v1/reports", get(reports))
        .route("/v1/openapi.yaml", get(openapi))
        .route_layer(middleware::from_fn_with_state(h.clone(), check_token));
    Router::new()
        .route("/v1/health", get(health))
        .merge(guarded)
        .with_state(h)
}

/// Serves the API on `listener` (bound by the caller, so a busy port is
/// reported at start) from a thread of its own, until the process exits.
pub fn spawn(listener: std::net::TcpListener, h: ControlHandle) -> std::io::Result<SocketAddr> {
    let bound = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let app = router(h);
    std::thread::Builder::new()
        .name("clarion-api".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("clarion: warning: control API not started: {e}");
                    return;
                }
            };
            rt.block_on(async move {
                let served = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => axum::serve(l, app).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = served {
                    eprintln!("clarion: warning: control API stopped: {e}");
                }
            });
        })?;
    Ok(bound)
}
