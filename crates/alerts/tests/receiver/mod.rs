//! A webhook receiver for tests: a small HTTP/1.1 server on a std
//! `TcpListener` (requests parsed by `httparse`, keep-alive honoured) that
//! records every request and answers with the status its responder picks.
//! It can be stopped (listener and open connections closed) and started
//! again on the same port, as a receiver restarted mid-run.
//!
//! Shared by crates/alerts/tests and crates/cli/tests/{alerts,manager_alerts}.rs.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The status answered.
    pub status: u16,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// Picks the status for the n-th request (0-based, over the receiver's life).
pub type Responder = Box<dyn FnMut(&Request, usize) -> u16 + Send>;

struct State {
    requests: Vec<Request>,
    responder: Responder,
    conns: Vec<TcpStream>,
}

pub struct Receiver {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Receiver {
    pub fn start(responder: Responder) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let state = Arc::new(Mutex::new(State {
            requests: Vec::new(),
            responder,
            conns: Vec::new(),
        }));
        Receiver::serve(listener, state)
    }

    fn serve(listener: TcpListener, state: Arc<Mutex<State>>) -> Receiver {
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !sp.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        conn.set_nonblocking(false).unwrap();
                        st.lock().unwrap().conns.push(conn.try_clone().unwrap());
                        let st = st.clone();
                        std::thread::spawn(move || handle(conn, st));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Receiver {
            addr,
            state,
            stop,
            thread: Some(thread),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The reports acknowledged (2xx), each once by idempotency key, in the
    /// order of their first acknowledgement; a copy (its answer was lost)
    /// must carry the same report.
    pub fn delivered(&self) -> Vec<serde_json::Value> {
        let mut seen: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        let mut order = Vec::new();
        for q in self.requests().iter().filter(|q| (200..300).contains(&q.status)) {
            let key = q
                .header("idempotency-key")
                .expect("every request has a key")
                .to_string();
            let body = q.json();
            match seen.get(&key) {
                Some(first) => assert_eq!(first, &body, "two reports under key {key}"),
                None => {
                    seen.insert(key, body.clone());
                    order.push(body);
                }
            }
        }
        order
    }

    /// Closes the listener and every open connection (the port refuses).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        for c in self.state.lock().unwrap().conns.drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    /// Listens again on the same port, keeping the record and responder.
    pub fn restart(&mut self) {
        self.stop();
        let listener = loop {
            match TcpListener::bind(self.addr) {
                Ok(l) => break l,
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        let mut again = Receiver::serve(listener, self.state.clone());
        // Take over its thread and flag; dropping `again` then stops nothing.
        self.thread = again.thread.take();
        std::mem::swap(&mut self.stop, &mut again.stop);
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop();
        }
    }
}

fn handle(mut conn: TcpStream, state: Arc<Mutex<State>>) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        // One request: headers, then Content-Length bytes of body.
        let (head_len, method, path, headers) = loop {
            let mut hs = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut hs);
            if let Ok(httparse::Status::Complete(n)) = req.parse(&buf) {
                let headers: Vec<(String, String)> = req
                    .headers
                    .iter()
                    .map(|h| (h.name.to_string(), String::from_utf8_lossy(h.value).into_owned()))
                    .collect();
                break (
                    n,
                    req.method.unwrap_or("").to_string(),
                    req.path.unwrap_or("").to_string(),
                    headers,
                );
            }
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(k) => buf.extend_from_slice(&chunk[..k]),
            }
        };
        let len: usize = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < head_len + len {
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(k) => buf.extend_from_slice(&chunk[..k]),
            }
        }
        let body = buf[head_len..head_len + len].to_vec();
        buf.drain(..head_len + len);
        let mut request = Request {
            method,
            path,
            headers,
            body,
            status: 0,
        };
        let status = {
            let mut s = state.lock().unwrap();
            let n = s.requests.len();
            let status = (s.responder)(&request, n);
            request.status = status;
            s.requests.push(request);
            status
        };
        let answer = format!("HTTP/1.1 {status} X\r\nContent-Length: 2\r\n\r\nok");
        if conn.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// Each event's reports, in the order given.
pub fn per_event(reports: &[serde_json::Value]) -> BTreeMap<String, Vec<serde_json::Value>> {
    let mut m: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for r in reports {
        m.entry(r["event"].as_str().unwrap().to_string())
            .or_default()
            .push(r.clone());
    }
    m
}

/// Every reference report (more than `at_least`: the run fired)
/// delivered exactly once, each event's in window order (the reference's
/// order per event is window order: the sink contract).
pub fn assert_all_delivered_in_order(
    got: &[serde_json::Value],
    reference: &[serde_json::Value],
    at_least: usize,
) {
    assert!(
        reference.len() > at_least,
        "the run fires: {} reports",
        reference.len()
    );
    assert_eq!(got.len(), reference.len(), "delivered once each");
    assert_eq!(per_event(got), per_event(reference));
    for reports in per_event(got).values() {
        let ends: Vec<u64> = reports
            .iter()
            .map(|r| r["window"]["end_ns"].as_u64().unwrap())
            .collect();
        assert!(ends.windows(2).all(|w| w[0] <= w[1]), "window order");
    }
}
