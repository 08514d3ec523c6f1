//! An agent's answers from a real window, its refusals, and its bound.

#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr};

use clarion_flow_window::FlowWindow;
use clarion_records::{EndReason, FlowRecord};

use super::*;

fn key(n: u8) -> FlowKey {
    let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, n));
    let b = IpAddr::V4(Ipv4Addr::new(10, 0, 128, 1));
    FlowKey::new(a, b, 17, Some((1000 + u16::from(n), 80)), None)
}

fn record(n: u8, first_ns: u64, packets: u64, bytes: u64) -> FlowRecord {
    FlowRecord {
        key: key(n),
        first_ns,
        last_ns: first_ns + 10,
        packets,
        bytes,
        tcp_flags: 0,
        min_size: 40,
        max_size: 1500,
        end_reason: EndReason::Idle,
    }
}

fn ask(top: u32) -> Bytes {
    let group = clarion_report::group_from_json(&serde_json::json!({})).unwrap();
    protocol::encode(&FlowsAsk {
        event: "spike".into(),
        // An event without `filter` has one that holds every packet.
        filters: vec![Filter::default()],
        group,
        from_ns: 0,
        to_ns: 1_000,
        top,
        by_packets: false,
    })
}

fn reply(body: &[u8]) -> FlowsReply {
    protocol::decode::<FlowsReply>("test", body).unwrap()
}

#[test]
fn an_agent_answers_from_its_window_with_at_most_top_talkers() {
    let w = FlowWindow::shared(100, u64::MAX);
    for (n, bytes) in [(1u8, 500u64), (2, 900), (3, 100)] {
        w.lock().unwrap().push(&record(n, 100, 5, bytes));
    }
    w.lock().unwrap().push(&record(4, 5_000, 1, 60));
    let FlowsReply::Answer(a) = reply(&answer("s", &ask(2), Some(&w))) else {
        panic!("an answer")
    };
    let got: Vec<(FlowKey, u64)> = a.talkers.iter().map(|t| (Talker::from(t).key, t.bytes)).collect();
    assert_eq!(got, vec![(key(2), 900), (key(1), 500)]);
    assert_eq!((a.flows, a.packets, a.bytes), (3, 15, 1_500));
    assert!(a.complete && a.truncated, "three flows, two listed");
}

#[test]
fn an_agent_refuses_saying_why() {
    let why = |body: Bytes| match reply(&body) {
        FlowsReply::Refused { reason } => reason,
        other => panic!("a refusal: {other:?}"),
    };
    assert!(why(answer("s", &ask(10), None)).contains("keeps no flow records"));
    let w = FlowWindow::shared(10, u64::MAX);
    assert!(why(answer("s", b"{\"json\":1}", Some(&w))).contains("not a valid Clarion message"));
    assert!(why(answer("s", &[0u8; ASK_BYTES + 1], Some(&w))).contains("over the"));
}

#[test]
fn an_answer_too_large_lists_fewer_talkers_and_says_so() {
    let t = Talker {
        key: key(1),
        packets: 1,
        bytes: 1,
        records: 1,
        first_ns: 0,
        last_ns: 0,
    };
    let many = HostFlows {
        talkers: vec![WireTalker::from(&t); 5_000],
        flows: 5_000,
        records: 5_000,
        packets: 5_000,
        bytes: 5_000,
        complete: true,
        truncated: false,
    };
    let body = within_bounds(many);
    assert!(body.len() <= ANSWER_BYTES, "{}", body.len());
    let FlowsReply::Answer(a) = reply(&body) else {
        panic!("an answer")
    };
    assert!(a.truncated && !a.talkers.is_empty() && a.talkers.len() < 5_000);
}

#[test]
fn a_talker_survives_the_wire_and_a_backwards_span_is_put_right() {
    let t = Talker {
        key: key(7),
        packets: 3,
        bytes: 300,
        records: 2,
        first_ns: 10,
        last_ns: 20,
    };
    assert_eq!(Talker::from(&WireTalker::from(&t)), t);
    let mut w = WireTalker::from(&t);
    (w.first_ns, w.last_ns) = (20, 10);
    assert_eq!(Talker::from(&w), t);
}

fn request(event: &str, group: serde_json::Value, top: usize) -> FlowsRequest {
    FlowsRequest {
        event: event.into(),
        group,
        from_ns: 100,
        to_ns: 200,
        top,
        by: "packets".into(),
    }
}

#[test]
fn the_manager_asks_each_host_of_the_event_with_its_local_filters() {
    let inv = clarion_manager::Inventory::parse("a 10.0.0.0/24\nb 10.0.1.0/24\nc 10.0.2.0/24\n").unwrap();
    let mut book = EventBook::new(clarion_manager::Manager::new("m", inv), None);
    let spike = "event spike\n  filter dst_ip in 10.0.0.0/23 and proto = udp\n  when sum(volume) > 1MB\n  per dst_ip/24\n  every 10ms\n  across hosts\n";
    book.add(spike, crate::book::OnDuplicate::Refuse).unwrap();
    let group = serde_json::json!({"dst_ip": "10.0.1.0/24"});
    let (to_ask, q) = asked(&book, &request("spike", group.clone(), 10)).unwrap();
    // Placed on the two hosts under the filter's prefix, not on c.
    let hosts: Vec<&str> = to_ask.iter().map(|a| a.host.as_str()).collect();
    assert_eq!(hosts, vec!["a", "b"]);
    assert_eq!((q.top, q.by, q.from_ns, q.to_ns), (10, Rank::Packets, 100, 200));
    let ask: FlowsAsk = protocol::decode("s", &to_ask[0].ask).unwrap();
    assert_eq!(ask.top, 100, "ten times top, at least 100");
    assert!(ask.by_packets);
    assert_eq!(ask.filters.len(), 1);
    assert_eq!(ask.filters[0].proto, Some(17));
    assert_eq!(ask.group, clarion_report::group_from_json(&group).unwrap());
    let (_, q) = asked(&book, &request("spike", group, 500)).unwrap();
    let (asked_500, _) = asked(&book, &request("spike", serde_json::json!({}), 500)).unwrap();
    let ask: FlowsAsk = protocol::decode("s", &asked_500[0].ask).unwrap();
    assert_eq!((q.top, ask.top), (500, 1_000), "at most 1,000");
    // Refusals: no such event (404), a field outside its `per` (400).
    let e = asked(&book, &request("nope", serde_json::json!({}), 10))
        .err()
        .unwrap();
    assert!(matches!(e, ControlError::NotFound(_)), "{e}");
    let e = asked(&book, &request("spike", serde_json::json!({"src_port": 1}), 10))
        .err()
        .unwrap();
    assert!(
        matches!(&e, ControlError::Invalid(m) if m.contains("src_port")),
        "{e}"
    );
}
