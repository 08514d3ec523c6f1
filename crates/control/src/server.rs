//! The control API's HTTP server.
//!
//! Every route turns into a [`Command`] sent to the manager's owner, which
//! answers on the command's channel; fired events reach `/v1/reports`
//! through a broadcast channel (a slow reader that falls behind loses the
//! oldest and is told how many, as an SSE comment).
//!
//! With a token, every route but `/v1/health` needs `Authorization: Bearer
//! <token>` (compared in constant time); the caller decides the token
//! ([`crate::token::ServerToken`]: given, or kept in a file, or none on
//! loopback when asked for).
//!
//! Every route checks `Host` and `Origin`, so that a web page in the
//! operator's browser can neither call the API (a foreign `Origin`, sent
//! by browsers with every cross-site POST) nor reach it through a name it
//! controls (DNS rebinding: a foreign `Host`). Allowed: `localhost`,
//! loopback addresses, the address the API is bound to, and the names the
//! caller adds ([`ControlHandle::allow_host`]); any port.
//!
//! The web console (`clarion_console`: a page and its bundle, embedded) is
//! served at `/` and `/console/*` without the token (the files hold no
//! data; the page calls `/v1/*` with the token its operator types) but
//! behind the same `Host`/`Origin` checks.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
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

use crate::model::{AppRequest, Command, ControlError, ErrorBody, ExportsCommand, Reply};

/// What the routes need: where commands go, and the stream of fired events (JSON text).
#[derive(Clone, Debug)]
pub struct ControlHandle {
    pub commands: mpsc::Sender<Command>,
    pub reports: broadcast::Sender<String>,
    token: Option<String>,
    /// Host names (lowercase, no port) requests may name besides loopback ones.
    hosts: Vec<String>,
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
            hosts: Vec::new(),
        }
    }

    /// Also accepts requests naming `host` (a DNS name or an address the
    /// operator reaches the API by), in `Host` and `Origin`.
    pub fn allow_host(mut self, host: &str) -> Self {
        self.hosts
            .push(host.trim_matches(['[', ']']).to_ascii_lowercase());
        self
    }

    fn allows(&self, authority: &str) -> bool {
        let host = host_of(authority);
        host == "localhost"
            || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
            || self.hosts.contains(&host)
    }
}

/// The host of an authority (`host`, `host:port`, `[v6]:port`), lowercase.
fn host_of(authority: &str) -> String {
    let a = authority.trim();
    let host = if let Some(rest) = a.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        match a.rsplit_once(':') {
            Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) && !h.contains(':') => h,
            _ => a,
        }
    };
    host.to_ascii_lowercase()
}

impl IntoResponse for ControlError {
    fn into_response(self) -> Response {
        let status = match self {
            ControlError::Invalid(_) => StatusCode::BAD_REQUEST,
            ControlError::NotFound(_) => StatusCode::NOT_FOUND,
            ControlError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ControlError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
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
        Ok(v) => big_json(StatusCode::OK, v).await,
        Err(e) => e.into_response(),
    }
}

/// The most bytes a request's body may hold: 100,000 events (a manager's
/// `--max-events` by default) of 300 bytes each. A larger body is refused
/// whole with 413, saying the limit (axum's default is 2 MB, which about
/// 10,000 events of ordinary length already pass).
pub const MAX_BODY: usize = 32 << 20;

/// The body of a request, or why it is refused (over [`MAX_BODY`], or
/// cut off by the client).
fn body_of(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ControlError> {
    body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ControlError::TooLarge(format!(
                "the request's body is over the API's limit of {} MiB: send its events in several requests",
                MAX_BODY >> 20
            ))
        } else {
            ControlError::Invalid(format!("the request's body could not be read: {e}"))
        }
    })
}

async fn add(State(h): State<ControlHandle>, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match body_of(body) {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let source = match crate::model::events_text(&body) {
        Ok(source) => source,
        Err(e) => return e.into_response(),
    };
    // The language's checks run here, on a blocking thread, so that a large
    // or broken body never holds up the loop that owns the events (the
    // manager's, which also reads hosts' messages); only text that checks
    // reaches it.
    let checked = tokio::task::spawn_blocking(move || precheck(source)).await;
    let source = match checked {
        Ok(Ok(source)) => source,
        Ok(Err(e)) => return e.into_response(),
        Err(e) => return ControlError::Failed(format!("the check stopped: {e}")).into_response(),
    };
    match ask(&h, |reply| Command::Add { source, reply }).await {
        Ok(v) => big_json(StatusCode::CREATED, v).await,
        Err(e) => e.into_response(),
    }
}

/// A JSON answer that may be large (20,000 events: megabytes), made on a
/// blocking thread: this server's one thread goes on answering the other
/// requests (`GET /v1/hosts`) meanwhile.
async fn big_json<T: serde::Serialize + Send + 'static>(status: StatusCode, v: T) -> Response {
    match tokio::task::spawn_blocking(move || serde_json::to_vec(&v)).await {
        Ok(Ok(body)) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Ok(Err(e)) => ControlError::Failed(format!("the answer cannot be written: {e}")).into_response(),
        Err(e) => ControlError::Failed(format!("the answer stopped: {e}")).into_response(),
    }
}

/// The events' text if the language accepts it, else its diagnostics as
/// the loop would render them.
fn precheck(source: String) -> Result<String, ControlError> {
    let invalid = |d: clarion_lang::Diagnostics| ControlError::Invalid(d.render("request", &source, false));
    let file = clarion_lang::parse(&source).map_err(invalid)?;
    clarion_lang::lower(&file).map_err(invalid)?;
    Ok(source)
}

/// A name in a path or body (an event, policy or app) is checked before
/// anything is asked of the loop: names are what the language allows
/// (`clarion_lang::MAX_NAME_LEN` ASCII letters, digits and `_`), so an
/// over-long one is refused with its length, never echoed back.
fn named(name: &str) -> Result<(), ControlError> {
    let max = clarion_lang::MAX_NAME_LEN;
    if name.len() > max {
        return Err(ControlError::Invalid(format!(
            "a name is at most {max} characters (ASCII letters, digits and `_`); this one has {}",
            name.chars().count()
        )));
    }
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(ControlError::Invalid(format!(
            "{name:?} is not a name: names are ASCII letters, digits and `_`"
        )));
    }
    Ok(())
}

/// The most a drill-down instance's narrowing (`[src_ip=…/128,dst_port=…]`,
/// see `clarion-drilldown`) adds to its event's name.
const MAX_NARROWING_LEN: usize = 256;

/// [`named`] for an event: an installed event's name, or a drill-down
/// instance's (`EVENT[field=value,...]`).
fn named_event(name: &str) -> Result<(), ControlError> {
    let (base, narrowing) = name.split_at(name.find('[').unwrap_or(name.len()));
    if narrowing.len() > MAX_NARROWING_LEN || !narrowing.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ControlError::Invalid(format!(
            "an instance's narrowing is at most {MAX_NARROWING_LEN} printable ASCII characters; this one has {}",
            narrowing.chars().count()
        )));
    }
    named(base)
}

async fn show(State(h): State<ControlHandle>, Path(name): Path<String>) -> Response {
    if let Err(e) = named_event(&name) {
        return e.into_response();
    }
    match ask(&h, |reply| Command::Show { name, reply }).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn remove(State(h): State<ControlHandle>, Path(name): Path<String>) -> Response {
    if let Err(e) = named_event(&name) {
        return e.into_response();
    }
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

async fn apps(State(h): State<ControlHandle>) -> Response {
    match ask(&h, |reply| Command::Apps { reply }).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn add_app(State(h): State<ControlHandle>, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match body_of(body) {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let name = match serde_json::from_slice::<AppRequest>(&body) {
        Ok(r) => r.name,
        Err(e) => {
            return ControlError::Invalid(format!("the body must be {{\"name\": \"APP\"}}: {e}"))
                .into_response()
        }
    };
    if let Err(e) = named(&name) {
        return e.into_response();
    }
    match ask(&h, |reply| Command::AddApp { name, reply }).await {
        Ok(v) => (StatusCode::CREATED, Json(v)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn show_app(State(h): State<ControlHandle>, Path(name): Path<String>) -> Response {
    if let Err(e) = named(&name) {
        return e.into_response();
    }
    match ask(&h, |reply| Command::ShowApp { name, reply }).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn remove_app(State(h): State<ControlHandle>, Path(name): Path<String>) -> Response {
    if let Err(e) = named(&name) {
        return e.into_response();
    }
    match ask(&h, |reply| Command::RemoveApp { name, reply }).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn exports(State(h): State<ControlHandle>) -> Response {
    match ask(&h, |reply| Command::Exports(ExportsCommand::List { reply })).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn add_exports(State(h): State<ControlHandle>, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match body_of(body) {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let source = match crate::model::events_text(&body) {
        Ok(source) => source,
        Err(e) => return e.into_response(),
    };
    // Checked on a blocking thread, as events are (see `add`).
    let checked = tokio::task::spawn_blocking(move || precheck_exports(source)).await;
    let source = match checked {
        Ok(Ok(source)) => source,
        Ok(Err(e)) => return e.into_response(),
        Err(e) => return ControlError::Failed(format!("the check stopped: {e}")).into_response(),
    };
    match ask(&h, |reply| {
        Command::Exports(ExportsCommand::Add { source, reply })
    })
    .await
    {
        Ok(v) => (StatusCode::CREATED, Json(v)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The policies' text if the language accepts it (at least one `export`
/// block, no event), else its diagnostics rendered.
fn precheck_exports(source: String) -> Result<String, ControlError> {
    match clarion_lang::check_exports(&source) {
        Ok(specs) if specs.is_empty() => Err(ControlError::Invalid("no export policy in the request".into())),
        Ok(_) => Ok(source),
        Err(d) => Err(ControlError::Invalid(d.render("request", &source, false))),
    }
}

async fn show_export(State(h): State<ControlHandle>, Path(name): Path<String>) -> Response {
    if let Err(e) = named(&name) {
        return e.into_response();
    }
    match ask(&h, |reply| Command::Exports(ExportsCommand::Show { name, reply })).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn remove_export(State(h): State<ControlHandle>, Path(name): Path<String>) -> Response {
    if let Err(e) = named(&name) {
        return e.into_response();
    }
    match ask(&h, |reply| {
        Command::Exports(ExportsCommand::Remove { name, reply })
    })
    .await
    {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /v1/flows?event=NAME&group=JSON&from=NS&to=NS&top=N&by=bytes|packets`:
/// the top talkers of a firing, from the host's flow window.
async fn flows(State(h): State<ControlHandle>, req: Request) -> Response {
    let request = match crate::model::FlowsRequest::from_query(req.uri().query().unwrap_or("")) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = named_event(&request.event) {
        return e.into_response();
    }
    match ask(&h, |reply| Command::Flows { request, reply }).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /v1/reports/history?event=&from=&to=&limit=&before=|after=`: a
/// page of the reports the manager kept.
async fn history(State(h): State<ControlHandle>, req: Request) -> Response {
    let request = match crate::model::HistoryRequest::from_query(req.uri().query().unwrap_or("")) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if let Some(Err(e)) = request.event.as_deref().map(named_event) {
        return e.into_response();
    }
    match ask(&h, |reply| Command::History { request, reply }).await {
        Ok(v) => big_json(StatusCode::OK, v).await,
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

/// One of the console's embedded files, or 404; 304 when the browser holds it already.
async fn console_file(req: Request) -> Response {
    let Some(a) = clarion_console::asset(req.uri().path()) else {
        return (
            StatusCode::NOT_FOUND,
            Json(ErrorBody {
                error: format!("no console file `{}`", req.uri().path()),
            }),
        )
            .into_response();
    };
    let fresh = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| clarion_console::not_modified(v, a.etag));
    let mut r = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, a.content_type)], a.body).into_response()
    };
    let h = r.headers_mut();
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static(clarion_console::CACHE_CONTROL),
    );
    h.insert(header::ETAG, header::HeaderValue::from_static(a.etag));
    for (name, value) in clarion_console::SECURITY_HEADERS {
        h.insert(name, header::HeaderValue::from_static(value));
    }
    r
}

/// Refuses requests that name a foreign host or come from a foreign page.
async fn check_origin(State(h): State<ControlHandle>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    // A browser always sends `Host`; a request without one (HTTP/1.0
    // health checks) cannot come from a rebound page.
    if let Some(host) = headers.get(header::HOST) {
        let host = host.to_str().unwrap_or("");
        if !h.allows(host) {
            return forbidden(format!(
                "requests must name this API's host (`Host: {host}` is not one; --api-host NAME allows a name)"
            ));
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("null");
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .map(|rest| rest.split('/').next().unwrap_or_default());
        if !authority.is_some_and(|a| h.allows(a)) {
            return forbidden(format!(
                "requests from web pages of other sites are refused (`Origin: {origin}`)"
            ));
        }
    }
    next.run(req).await
}

fn forbidden(error: String) -> Response {
    (StatusCode::FORBIDDEN, Json(ErrorBody { error })).into_response()
}

async fn check_token(State(h): State<ControlHandle>, req: Request, next: Next) -> Response {
    if let Some(token) = &h.token {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let same =
            given.is_some_and(|g| bool::from(subtle::ConstantTimeEq::ct_eq(g.as_bytes(), token.as_bytes())));
        if !same {
            let body = ErrorBody {
                error: "this API needs `Authorization: Bearer <token>`: the token the server printed \
                        when it created its token file (by default ~/.config/clarion/api-token, which \
                        clarion events reads), or the one it was given (clarion events --token, or \
                        CLARION_API_TOKEN)"
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
        .route("/v1/apps", get(apps).post(add_app))
        .route("/v1/apps/{name}", get(show_app).delete(remove_app))
        .route("/v1/exports", get(exports).post(add_exports))
        .route("/v1/exports/{name}", get(show_export).delete(remove_export))
        .route("/v1/reports", get(reports))
        .route("/v1/reports/history", get(history))
        .route("/v1/flows", get(flows))
        .route("/v1/openapi.yaml", get(openapi))
        .route_layer(middleware::from_fn_with_state(h.clone(), check_token));
    Router::new()
        .route("/v1/health", get(health))
        .route("/", get(console_file))
        .route("/index.html", get(console_file))
        .route("/console/{file}", get(console_file))
        .merge(guarded)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn_with_state(h.clone(), check_origin))
        .with_state(h)
}

/// Serves the API on `listener` (bound by the caller, so a busy port is
/// reported at start) from a thread of its own, until the process exits.
pub fn spawn(listener: std::net::TcpListener, h: ControlHandle) -> std::io::Result<SocketAddr> {
    let bound = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    // Requests may name the address the API is bound to.
    let h = if bound.ip().is_unspecified() {
        h
    } else {
        h.allow_host(&bound.ip().to_string())
    };
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
                // Header and idle timeouts, a bound on connections
                // (`clarion-http-serve`): a slow client cannot hold the API.
                if let Err(e) = clarion_http_serve::raise_open_file_limit() {
                    eprintln!("clarion: warning: cannot raise the open-file limit for the control API: {e}");
                }
                let limits = clarion_http_serve::Limits::default();
                let counts = clarion_http_serve::counts_for("api");
                let served = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => clarion_http_serve::serve(l, app, limits, counts).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = served {
                    eprintln!("clarion: warning: control API stopped: {e}");
                }
            });
        })?;
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    use super::*;
    use crate::model::ExportInfo;

    /// An API on a loopback port whose commands nobody answers (these tests
    /// stop at the checks, or use routes that ask nothing).
    fn serve(token: Option<&str>) -> (SocketAddr, mpsc::Receiver<Command>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let (tx, rx) = mpsc::channel(4);
        let (reports, _) = broadcast::channel(4);
        let h = ControlHandle::new(tx, reports, token.map(str::to_string)).allow_host("Clarion.Example");
        (spawn(listener, h).expect("serves"), rx)
    }

    /// The status code of one raw HTTP/1.1 request.
    fn status(addr: SocketAddr, head: &str) -> u16 {
        answer(addr, head, "").0
    }

    /// Status and body of one raw HTTP/1.1 request (`head`: its request
    /// line and headers but `Connection` and `Content-Length`).
    fn answer(addr: SocketAddr, head: &str, body: &str) -> (u16, String) {
        let mut s = TcpStream::connect(addr).expect("connects");
        s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        write!(
            s,
            "{head}Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .expect("sent");
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        let code = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
        (code, body)
    }

    /// `/v1/flows`: the token needed; its query decoded (URL-encoded JSON
    /// group) into the command the owner gets, the owner's answer sent as
    /// it is; each wrong parameter refused, named, before the owner is asked.
    #[test]
    fn flows_queries_reach_the_owner_decoded_and_wrong_ones_are_refused() {
        let (addr, mut commands) = serve(Some("t0k"));
        let (seen_tx, seen) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            while let Some(c) = commands.blocking_recv() {
                if let Command::Flows { request, reply } = c {
                    let _ = reply.send(Ok(serde_json::json!({ "event": request.event, "talkers": [] })));
                    let _ = seen_tx.send(request);
                }
            }
        });
        let get = |q: &str, token: &str| {
            let head =
                format!("GET /v1/flows?{q} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n");
            answer(addr, &head, "")
        };
        let q =
            "event=busy_service&group=%7B%22dst_ip%22%3A%2210.20.93.10%2F32%22%2C%22dst_port%22%3A5201%7D\
                 &from=1000&to=2000&top=3&by=packets";
        assert_eq!(get(q, "wrong").0, 401);
        let (code, body) = get(q, "t0k");
        assert_eq!(code, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(v["event"], "busy_service");
        let asked = seen
            .recv_timeout(Duration::from_secs(5))
            .expect("the owner was asked");
        assert_eq!(
            asked,
            crate::model::FlowsRequest {
                event: "busy_service".into(),
                group: serde_json::json!({ "dst_ip": "10.20.93.10/32", "dst_port": 5201 }),
                from_ns: 1000,
                to_ns: 2000,
                top: 3,
                by: "packets".into(),
            }
        );
        assert_eq!(get("event=e&from=1&to=2", "t0k").0, 200);
        let asked = seen.recv_timeout(Duration::from_secs(5)).expect("asked");
        assert_eq!(
            (asked.group, asked.top, asked.by.as_str()),
            (serde_json::json!({}), 10, "bytes"),
            "defaults"
        );
        for (bad, says) in [
            ("event=e&from=1", "`to`"),
            ("event=e&from=2&to=2", "empty"),
            ("event=e&from=x&to=2", "`from`"),
            ("event=e&from=1&to=2&top=0", "`top`"),
            ("event=e&from=1&to=2&top=1001", "`top`"),
            ("event=e&from=1&to=2&by=flows", "`by`"),
            ("event=e&from=1&to=2&group=%5B1%5D", "`group`"),
            ("event=e&from=1&to=2&group=%7B", "`group`"),
            ("event=e&from=1&to=2&limit=3", "`limit`"),
            ("event=e&event=f&from=1&to=2", "twice"),
            ("from=1&to=2", "`event`"),
            ("event=a%2Fb&from=1&to=2", "not a name"),
        ] {
            let (code, text) = get(bad, "t0k");
            assert_eq!(code, 400, "{bad}: {text}");
            assert!(text.contains(says), "{bad}: {text}");
        }
        assert!(seen.try_recv().is_err(), "no refused query reached the owner");
    }

    #[test]
    fn names_over_the_limit_or_outside_the_alphabet_are_refused_at_the_door() {
        // Nobody answers the commands: a request that got past the check would time out.
        let (addr, _commands) = serve(None);
        let long = "a".repeat(5_000);
        for (method, path, body) in [
            ("GET", format!("/v1/events/{long}"), String::new()),
            ("DELETE", format!("/v1/events/{long}"), String::new()),
            ("GET", format!("/v1/events/e[{}]", "x".repeat(300)), String::new()),
            ("GET", format!("/v1/exports/{long}"), String::new()),
            ("DELETE", format!("/v1/exports/{long}"), String::new()),
            ("GET", format!("/v1/apps/{long}"), String::new()),
            ("DELETE", format!("/v1/apps/{long}"), String::new()),
            (
                "POST",
                "/v1/apps".to_string(),
                format!("{{\"name\": \"{long}\"}}"),
            ),
            (
                "POST",
                "/v1/apps".to_string(),
                "{\"name\": \"a/../b\"}".to_string(),
            ),
            ("GET", "/v1/exports/%0Aname".to_string(), String::new()),
        ] {
            let head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
            let (code, text) = answer(addr, &head, &body);
            assert_eq!(code, 400, "{method} {}: {text}", &path[..path.len().min(40)]);
            assert!(text.len() < 300 && !text.contains(&"a".repeat(100)), "{text}");
            assert!(text.contains("name") || text.contains("narrowing"), "{text}");
        }
        // The longest name allowed gets past the check (and waits for the loop).
        let max = "a".repeat(clarion_lang::MAX_NAME_LEN);
        assert!(named(&max).is_ok() && named_event(&format!("{max}[dst_ip=10.0.0.0/8,proto=tcp]")).is_ok());
    }

    #[test]
    fn a_body_over_the_limit_is_refused_saying_the_limit() {
        // Nobody answers the commands: a body that got past the limit would time out.
        let (addr, _commands) = serve(None);
        for path in ["/v1/events", "/v1/exports", "/v1/apps"] {
            let mut s = TcpStream::connect(addr).expect("connects");
            s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
            write!(
                s,
                "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
                MAX_BODY + 1
            )
            .expect("sent");
            // The server stops reading once past the limit: later writes may fail.
            let chunk = vec![b'#'; 1 << 20];
            for _ in 0..=MAX_BODY >> 20 {
                if s.write_all(&chunk).is_err() {
                    break;
                }
            }
            let mut text = String::new();
            let _ = s.read_to_string(&mut text);
            assert!(text.starts_with("HTTP/1.1 413"), "{path}: {text}");
            assert!(
                text.contains("over the API's limit of 32 MiB: send its events in several requests"),
                "{text}"
            );
        }
    }

    #[test]
    fn foreign_hosts_and_origins_are_refused() {
        let (addr, _commands) = serve(None);
        let port = addr.port();
        let get = |path: &str, extra: &str| format!("GET {path} HTTP/1.1\r\n{extra}");
        assert_eq!(
            status(addr, &get("/v1/health", &format!("Host: 127.0.0.1:{port}\r\n"))),
            200
        );
        assert_eq!(
            status(addr, &get("/v1/health", &format!("Host: localhost:{port}\r\n"))),
            200
        );
        assert_eq!(
            status(addr, &get("/v1/health", &format!("Host: [::1]:{port}\r\n"))),
            200
        );
        assert_eq!(
            status(addr, &get("/v1/health", "Host: clarion.example\r\n")),
            200,
            "an allowed name"
        );
        // DNS rebinding: the page's own name, resolved to loopback.
        assert_eq!(
            status(
                addr,
                &get("/v1/health", &format!("Host: evil.example:{port}\r\n"))
            ),
            403
        );
        assert_eq!(
            status(addr, &get("/v1/openapi.yaml", "Host: 127.0.0.1.evil.example\r\n")),
            403
        );
        // A page of another site posting to the API (a "simple" text/plain POST).
        let post = format!(
            "POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://evil.example\r\nContent-Type: text/plain\r\n"
        );
        assert_eq!(status(addr, &post), 403);
        let null = format!("GET /v1/openapi.yaml HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: null\r\n");
        assert_eq!(status(addr, &null), 403);
        let same = format!(
            "GET /v1/openapi.yaml HTTP/1.1\r\nHost: localhost:{port}\r\nOrigin: http://localhost:{port}\r\n"
        );
        assert_eq!(status(addr, &same), 200, "the API's own origin");
    }

    #[test]
    fn the_token_must_match_exactly() {
        let (addr, _commands) = serve(Some("s3cret"));
        let with = |auth: &str| {
            status(
                addr,
                &format!("GET /v1/openapi.yaml HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}"),
            )
        };
        assert_eq!(with(""), 401);
        assert_eq!(with("Authorization: Bearer s3cre\r\n"), 401);
        assert_eq!(with("Authorization: Bearer s3crets\r\n"), 401);
        assert_eq!(with("Authorization: Bearer s3cret\r\n"), 200);
        assert_eq!(
            status(addr, "GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n"),
            200,
            "health needs none"
        );
    }

    /// Answers exports commands from a book of policies by name, as a
    /// live host does (or refuses them all with `refuse`); returns the
    /// texts it was asked to add.
    fn answer_exports(
        mut rx: mpsc::Receiver<Command>,
        mut book: Vec<ExportInfo>,
        refuse: Option<&'static str>,
    ) -> std::thread::JoinHandle<Vec<String>> {
        std::thread::spawn(move || {
            let mut added = Vec::new();
            let missing = |n: &str| ControlError::NotFound(format!("no policy `{n}`"));
            while let Some(cmd) = rx.blocking_recv() {
                let Command::Exports(c) = cmd else { continue };
                if let Some(why) = refuse {
                    c.refuse(why);
                    continue;
                }
                match c {
                    ExportsCommand::List { reply } => drop(reply.send(Ok(book.clone()))),
                    ExportsCommand::Add { source, reply } => {
                        let info = ExportInfo {
                            name: "new".into(),
                            source: source.clone(),
                            matched: 0,
                            added: "now".into(),
                        };
                        added.push(source);
                        book.push(info.clone());
                        drop(reply.send(Ok(vec![info])));
                    }
                    ExportsCommand::Show { name, reply } => {
                        let found = book.iter().find(|i| i.name == name).cloned();
                        drop(reply.send(found.ok_or_else(|| missing(&name))));
                    }
                    ExportsCommand::Remove { name, reply } => {
                        let at = book.iter().position(|i| i.name == name);
                        drop(reply.send(at.map(|i| book.remove(i)).ok_or_else(|| missing(&name))));
                    }
                }
            }
            added
        })
    }

    fn refused(r: Result<impl std::fmt::Debug, crate::ClientError>) -> (u16, String) {
        match r {
            Err(crate::ClientError::Refused { status, message }) => (status, message),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn exports_routes_answer_as_the_host_does() {
        let (addr, rx) = serve(Some("tok"));
        let one = ExportInfo {
            name: "web".into(),
            source: "export web\n  send headers to collector 127.0.0.1\n".into(),
            matched: 7,
            added: "then".into(),
        };
        let answering = answer_exports(rx, vec![one.clone()], None);
        let c = crate::Client::new(&format!("http://{addr}"), Some("tok".into()));
        assert_eq!(c.exports().expect("a list"), vec![one.clone()]);
        assert_eq!(c.show_export("web").expect("shown"), one);
        assert_eq!(refused(c.show_export("nope")).0, 404);
        assert_eq!(refused(c.remove_export("nope")).0, 404);
        // A policy the language refuses never reaches the host: 400 with the diagnostics.
        let (status, message) = refused(c.add_exports("export bad\n  send headers to nowhere\n"));
        assert_eq!(status, 400);
        let want = clarion_lang::check_exports("export bad\n  send headers to nowhere\n")
            .expect_err("invalid")
            .render("request", "export bad\n  send headers to nowhere\n", false);
        assert_eq!(message, want);
        assert!(message.contains("request:2:"), "{message}");
        let (status, message) = refused(c.add_exports("event e\n  when count() > 1 per 1s\n"));
        assert_eq!(status, 400, "{message}");
        assert_eq!(
            refused(c.add_exports("")),
            (400, "no export policy in the request".to_string())
        );
        let good = "export new\n  filter proto = udp\n  send packets to pcapng\n";
        let added = c.add_exports(good).expect("added");
        assert_eq!(added.len(), 1);
        assert_eq!(c.remove_export("web").expect("removed"), one);
        assert_eq!(refused(c.show_export("web")).0, 404);
        assert_eq!(c.exports().expect("a list").len(), 1);
        // Every route needs the token.
        let anonymous = crate::Client::new(&format!("http://{addr}"), None);
        assert_eq!(refused(anonymous.exports()).0, 401);
        assert_eq!(refused(anonymous.show_export("new")).0, 401);
        assert_eq!(refused(anonymous.remove_export("new")).0, 401);
        assert_eq!(refused(anonymous.add_exports(good)).0, 401);
        let wrong = crate::Client::new(&format!("http://{addr}"), Some("tok2".into()));
        assert_eq!(refused(wrong.remove_export("new")).0, 401);
        assert_eq!(
            c.exports().expect("a list").len(),
            1,
            "unchanged by refused requests"
        );
        drop(answering);
    }

    /// An owner that keeps no policies refuses every exports route with 404.
    #[test]
    fn refused_exports_commands_answer_404() {
        let (addr, rx) = serve(None);
        let why = "this server keeps no export policies";
        let _answering = answer_exports(rx, Vec::new(), Some(why));
        let c = crate::Client::new(&format!("http://{addr}"), None);
        assert_eq!(refused(c.exports()), (404, why.to_string()));
        assert_eq!(refused(c.show_export("x")), (404, why.to_string()));
        assert_eq!(refused(c.remove_export("x")), (404, why.to_string()));
        let good = "export x\n  send headers to collector 127.0.0.1\n";
        assert_eq!(refused(c.add_exports(good)), (404, why.to_string()));
    }

    /// One raw HTTP/1.1 exchange: the status, the headers (lowercase names) and the body.
    fn exchange(addr: SocketAddr, head: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
        let mut s = TcpStream::connect(addr).expect("connects");
        s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        write!(s, "{head}Connection: close\r\n\r\n").expect("sent");
        let mut all = Vec::new();
        let _ = s.read_to_end(&mut all);
        let end = all.windows(4).position(|w| w == b"\r\n\r\n").expect("a head");
        let text = String::from_utf8_lossy(&all[..end]).to_string();
        let mut lines = text.split("\r\n");
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        (status, headers, all[end + 4..].to_vec())
    }

    fn header_of<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
        headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn the_console_is_served_without_the_token_with_its_headers() {
        let (addr, _commands) = serve(Some("s3cret"));
        for a in &clarion_console::ASSETS {
            let (status, headers, body) =
                exchange(addr, &format!("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\n", a.path));
            assert_eq!(status, 200, "{}", a.path);
            assert_eq!(body, a.body, "{}", a.path);
            assert_eq!(header_of(&headers, "content-type"), Some(a.content_type));
            assert_eq!(header_of(&headers, "cache-control"), Some("no-cache"));
            assert_eq!(header_of(&headers, "etag"), Some(a.etag));
            for (name, value) in clarion_console::SECURITY_HEADERS {
                assert_eq!(header_of(&headers, name), Some(value), "{name} of {}", a.path);
            }
            // Revalidation: the same ETag gets 304 and no body; another gets the file.
            let head = format!(
                "GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\nIf-None-Match: {}\r\n",
                a.path, a.etag
            );
            let (status, headers, body) = exchange(addr, &head);
            assert_eq!((status, body.len()), (304, 0), "{}", a.path);
            assert_eq!(header_of(&headers, "etag"), Some(a.etag));
            let head = format!(
                "GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\nIf-None-Match: \"0\"\r\n",
                a.path
            );
            assert_eq!(exchange(addr, &head).0, 200);
        }
        let index = exchange(addr, "GET /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        assert_eq!(
            (index.0, index.2.as_slice()),
            (200, clarion_console::ASSETS[0].body)
        );
        assert_eq!(
            exchange(addr, "GET /console/nope.js HTTP/1.1\r\nHost: 127.0.0.1\r\n").0,
            404
        );
        assert_eq!(
            exchange(addr, "GET /console/ HTTP/1.1\r\nHost: 127.0.0.1\r\n").0,
            404
        );
        assert_eq!(
            exchange(
                addr,
                "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n"
            )
            .0,
            405
        );
        // The page's own data still needs the token...
        assert_eq!(
            exchange(addr, "GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n").0,
            401
        );
        // ...and the console, like the API, refuses a rebound name or a foreign page.
        assert_eq!(exchange(addr, "GET / HTTP/1.1\r\nHost: evil.example\r\n").0, 403);
        let foreign =
            "GET /console/console.js HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\n";
        assert_eq!(exchange(addr, foreign).0, 403);
    }

    #[test]
    fn hosts_are_read_from_authorities() {
        assert_eq!(host_of("LocalHost:8700"), "localhost");
        assert_eq!(host_of("[::1]:8700"), "::1");
        assert_eq!(host_of("::1"), "::1");
        assert_eq!(host_of("10.0.0.5"), "10.0.0.5");
    }
}
