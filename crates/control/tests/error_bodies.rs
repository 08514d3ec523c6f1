//! The add route's error path over HTTP: error bodies are capped whatever
//! the manager answers (issue 18, bounded diagnostics).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clarion_control::model::MAX_ERROR_BYTES;
use clarion_control::{Client, ClientError, Command, ControlError, ControlHandle};
use tokio::sync::{broadcast, mpsc};

/// An API on a loopback port whose manager refuses every added file with
/// `answer`, as an unbounded renderer did (10,000 errors: gigabytes).
fn serve(answer: String) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let (tx, mut rx) = mpsc::channel(4);
    let (reports, _) = broadcast::channel(4);
    let addr = clarion_control::spawn(listener, ControlHandle::new(tx, reports, None)).expect("serves");
    std::thread::spawn(move || {
        while let Some(c) = rx.blocking_recv() {
            if let Command::Add { reply, .. } = c {
                let _ = reply.send(Err(ControlError::Invalid(answer.clone())));
            }
        }
    });
    addr
}

#[test]
fn a_huge_refusal_is_cut_to_the_cap() {
    let report = "[E0310] Error: unknown variable `volumx`\n   │ …\n───╯\n";
    let addr = serve(report.repeat(100_000));
    let t = Instant::now();
    let refused = Client::new(&format!("http://{addr}"), None).add("event a\n  when sum(volumx) > 1\n");
    let took = t.elapsed();
    let Err(ClientError::Refused { status, message }) = refused else {
        panic!("expected a refusal, got {refused:?}");
    };
    assert_eq!(status, 400);
    assert!(message.len() <= MAX_ERROR_BYTES + 64, "{} bytes", message.len());
    assert!(message.starts_with(report), "{}", &message[..200]);
    assert!(
        message.ends_with(&format!(" of {} bytes", report.len() * 100_000)),
        "{}",
        &message[message.len() - 80..]
    );
    assert!(took < Duration::from_secs(1), "{took:?}");
}
