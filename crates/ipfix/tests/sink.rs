//! The three transports end to end, read back with the independent
//! decoder: every record of a real capture's flows arrives, in order,
//! with its Community ID; sequence numbers count the records before each
//! message; templates come first (and again over UDP); and failures are
//! errors, never panics or silent drops.

mod common;

use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::time::Duration;

use clarion_ipfix::encode::{TEMPLATE_V4, TEMPLATE_V6};
use clarion_ipfix::{Decoder, Message, Transport};
use clarion_records::FlowRecord;
use clarion_sinks::{Sink, SinkError};
use common::{capture, flows_of};

fn real_flows() -> Option<Vec<FlowRecord>> {
    let mut flows = flows_of(&capture("pathspider_real.pcap")?);
    flows.extend(flows_of(&capture("libtrace_anon-v6.pcap")?));
    Some(flows)
}

/// The messages carry exactly `flows`, in order, numbered right; returns
/// how many template messages there were.
fn check_messages(messages: &[Message], flows: &[FlowRecord]) -> usize {
    assert!(
        messages[0].records.is_empty() && messages[0].templates == [TEMPLATE_V4, TEMPLATE_V6],
        "templates first"
    );
    let mut before = 0u32;
    let mut decoded = Vec::new();
    for m in messages {
        assert_eq!(m.sequence, before, "records before this message");
        before += m.records.len() as u32;
        decoded.extend(m.records.iter().cloned());
    }
    assert_eq!(decoded.len(), flows.len());
    for (d, f) in decoded.iter().zip(flows) {
        assert_eq!(&d.record, f);
        assert_eq!(d.community_id.as_deref(), Some(f.community_id().as_str()));
    }
    messages.iter().filter(|m| !m.templates.is_empty()).count()
}

#[test]
fn udp_datagrams_carry_every_record_and_refresh_templates() {
    let Some(flows) = real_flows() else { return };
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    socket.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = socket.recv(&mut buf) {
            got.push(buf[..n].to_vec());
        }
        got
    });
    let mut sink = clarion_ipfix::open(&format!(
        "ipfix+udp://127.0.0.1:{port}?template_refresh_messages=7&observation_domain=42"
    ))
    .unwrap();
    assert_eq!(sink.transport(), Transport::Udp);
    common::write_paced(&mut sink, &flows);
    sink.finish().unwrap();
    assert!(matches!(sink.write(&flows[0]), Err(SinkError::Closed { .. })));
    let datagrams = receiver.join().unwrap();

    let mut d = Decoder::new();
    let messages: Vec<Message> = datagrams.iter().map(|g| d.message(g).unwrap()).collect();
    assert!(
        datagrams.iter().all(|g| g.len() <= 1400),
        "UDP messages fit 1400 bytes"
    );
    assert!(messages.iter().all(|m| m.observation_domain == 42));
    let templates = check_messages(&messages, &flows);
    let data = messages.len() - templates;
    // Templates at the start and before every 8th data message.
    assert_eq!(templates, 1 + (data - 1) / 7, "{data} data messages");
}

#[test]
fn udp_templates_also_refresh_by_time() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let mut sink = clarion_ipfix::open(&format!(
        "ipfix+udp://127.0.0.1:{port}?template_refresh_seconds=0"
    ))
    .unwrap();
    let f = FlowRecord::of_packet(
        clarion_wire::FlowKey::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            17,
            Some((1, 2)),
            None,
        ),
        1_700_000_000_000_000_000,
        100,
        0,
    );
    for _ in 0..3 {
        sink.write(&f).unwrap();
        sink.flush().unwrap();
    }
    sink.finish().unwrap();
    let mut buf = vec![0u8; 65536];
    let mut d = Decoder::new();
    let kinds: Vec<bool> = (0..7)
        .map(|_| {
            let n = socket.recv(&mut buf).unwrap();
            d.message(&buf[..n]).unwrap().records.is_empty()
        })
        .collect();
    assert_eq!(
        kinds,
        [true, true, false, true, false, true, false],
        "templates before each message"
    );
}

#[test]
fn tcp_stream_carries_every_record_with_templates_once() {
    let Some(flows) = real_flows() else { return };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut bytes = Vec::new();
        s.read_to_end(&mut bytes).unwrap();
        bytes
    });
    let mut sink = clarion_ipfix::open(&format!("ipfix+tcp://127.0.0.1:{port}")).unwrap();
    assert_eq!(sink.transport(), Transport::Tcp);
    for f in &flows {
        sink.write(f).unwrap();
    }
    sink.finish().unwrap();
    let bytes = reader.join().unwrap();
    let messages = Decoder::new().stream(&bytes).unwrap();
    assert_eq!(
        check_messages(&messages, &flows),
        1,
        "templates once per connection"
    );
    assert!(
        messages.iter().any(|m| m.length > 60_000),
        "large messages over TCP"
    );
}

#[test]
fn a_closed_tcp_connection_is_an_error_not_a_panic() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let closer = std::thread::spawn(move || drop(listener.accept().unwrap()));
    let mut sink = clarion_ipfix::open(&format!("ipfix+tcp://127.0.0.1:{port}")).unwrap();
    closer.join().unwrap();
    let f = FlowRecord::of_packet(
        clarion_wire::FlowKey::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            6,
            Some((1, 2)),
            None,
        ),
        1_700_000_000_000_000_000,
        100,
        0,
    );
    // The first writes may land in the socket buffer; the peer's reset ends them.
    let error = (0..100_000)
        .find_map(|_| sink.write(&f).and_then(|()| sink.flush()).err())
        .expect("writing to a closed connection fails");
    assert!(matches!(error, SinkError::Io { .. }), "{error}");
    assert!(
        error.to_string().contains(&format!("127.0.0.1:{port}")),
        "{error}"
    );
    assert!(matches!(sink.write(&f), Err(SinkError::Closed { .. })));
    assert!(matches!(sink.finish(), Err(SinkError::Closed { .. })));
}

#[test]
fn nothing_listening_over_tcp_fails_at_open() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = clarion_ipfix::open(&format!("ipfix+tcp://127.0.0.1:{port}")).unwrap_err();
    assert!(e.to_string().contains("cannot open IPFIX destination"), "{e}");
}

#[test]
fn udp_without_a_collector_fails_after_the_failures_allowed() {
    let port = common::free_udp_port(); // nothing listens there
    let f = FlowRecord::of_packet(
        clarion_wire::FlowKey::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            17,
            Some((1, 2)),
            None,
        ),
        1_700_000_000_000_000_000,
        100,
        0,
    );
    let mut sink = clarion_ipfix::open(&format!("ipfix+udp://127.0.0.1:{port}?max_send_failures=4")).unwrap();
    let mut sent = 0;
    let error = loop {
        match sink.write(&f).and_then(|()| sink.flush()) {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
        assert!(sent < 100, "no error after {sent} datagrams to a closed port");
    };
    assert!(matches!(error, SinkError::Io { .. }), "{error}");
    let text = format!("{error}: {}", std::error::Error::source(&error).unwrap());
    assert!(text.contains("4 sends failed"), "{text}");
    let (lost, _) = sink.lost();
    assert!(lost >= 3, "{lost} records counted lost");

    // Fewer failures than allowed: the run goes on, and finish says what was lost.
    let mut sink =
        clarion_ipfix::open(&format!("ipfix+udp://127.0.0.1:{port}?max_send_failures=1000")).unwrap();
    for _ in 0..10 {
        sink.write(&f).unwrap();
        sink.flush().unwrap();
    }
    let (lost, datagrams) = sink.lost();
    assert!(
        lost >= 4 && datagrams >= 4,
        "{lost} records in {datagrams} datagrams lost"
    );
    let e = sink.finish().unwrap_err();
    let text = format!("{e}: {}", std::error::Error::source(&e).unwrap());
    assert!(
        text.contains(&format!(
            "{lost} records in {datagrams} datagrams were not delivered"
        )),
        "{text}"
    );
}

#[test]
fn a_file_holds_templates_then_every_record() {
    let Some(flows) = real_flows() else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flows.ipfix");
    let destination = path.to_str().unwrap();
    assert!(clarion_ipfix::is_ipfix_destination(destination));
    let mut sink = clarion_ipfix::open(destination).unwrap();
    assert_eq!(sink.transport(), Transport::File);
    for f in &flows {
        sink.write(f).unwrap();
    }
    sink.finish().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let messages = Decoder::new().stream(&bytes).unwrap();
    assert_eq!(check_messages(&messages, &flows), 1);

    // An empty run still leaves a valid file: the templates.
    let empty = dir.path().join("empty.ipfix");
    clarion_ipfix::open(empty.to_str().unwrap())
        .unwrap()
        .finish()
        .unwrap();
    let messages = Decoder::new().stream(&std::fs::read(&empty).unwrap()).unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].templates, [TEMPLATE_V4, TEMPLATE_V6]);
}

#[test]
fn a_file_in_a_missing_directory_fails_at_open() {
    let e = clarion_ipfix::open("/nonexistent/dir/flows.ipfix").unwrap_err();
    assert!(e.to_string().contains("/nonexistent/dir/flows.ipfix"), "{e}");
}
