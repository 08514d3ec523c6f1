//! The messages agents and the manager exchange, and their subjects.
//!
//! Every message is two bytes of header, [`MAGIC`] and [`VERSION`], then
//! one MessagePack document (`rmp-serde`, structs as maps of their field
//! names, so that a field an older peer lacks reads as its default):
//! compact, and several times cheaper to write and read than the JSON the
//! protocol had before version 1 (the manager's cost is mostly its
//! messages, docs/performance.md, Fleet scale). A message of another
//! version, of JSON (a peer from before version 1) or damaged is refused
//! with an error saying which ([`decode`]); nothing here panics on what a
//! peer sends. JSON stays for what people and other programs read: the
//! API, the reports, `clarion.events`. Subjects:
//!
//! | subject | from → to | message | kind |
//! |---|---|---|---|
//! | `clarion.register` | agent → manager | [`Register`] → [`RegisterReply`] | request-reply (queue group `clarion-managers`) |
//! | `clarion.up.<host>` | agent → manager | [`Up`]: satisfaction reports, status | publish, in order |
//! | `clarion.host.<host>.control` | manager → agent | [`Control`]: install, remove, export policies, shut down | publish |
//! | `clarion.host.<host>.poll` | manager → agent | a batch of [`PollRequest`]s → their [`Answer`]s, in order | request-reply |
//! | `clarion.host.<host>.flows` | manager → agent | a [`crate::flows::FlowsAsk`] → a [`crate::flows::FlowsReply`] (the host's top talkers) | request-reply |
//! | `clarion.events` | manager → anyone | a network-wide report (schema `clarion.report/1`) | publish |
//!
//! One subject carries all of an agent's own messages so that the manager
//! reads them in the order they were sent (NATS keeps the order of one
//! connection's messages on one subject): a host's satisfaction reports
//! always arrive before its "finished". An agent answers a poll of a
//! window only after sending its satisfaction reports of it, on the same
//! connection; the manager handles the answer, which comes on its own
//! reply subject, after the report (`crates/nats/src/arrivals.rs`).
//!
//! Satisfaction reports are delivered at least once: each carries the
//! agent's sequence number, and the agent keeps it, sending it again every
//! [`RESEND_AFTER`], until the manager acknowledges it
//! ([`Control::Ack`]) once the decision it took part in is made (or it
//! can take part in none). A manager that dies loses no report: its
//! successor gets every unacknowledged one again and polls the hosts'
//! kept windows. A report may so be decided twice around a crash; the
//! manager ignores one it is still deciding.
//!
//! Export policies travel as the host's whole set ([`ExportSet`], see
//! [`crate::exports`]): in the registration reply (late joiners) and in
//! [`Control::Exports`] whenever the manager's set changes; the agent says
//! what it made of each ([`Up::Exports`]).
//!
//! Each heartbeat is preceded by the host's health ([`Up::Health`]) when
//! the agent was given a way to measure it; the manager keeps the latest
//! per host for `GET /v1/hosts`.

use clarion_control::HostHealth;
use clarion_lang::spec::EventSpec;
use clarion_report::{GroupKey, Report};
use serde::{Deserialize, Serialize};

pub use crate::exports::ExportSet;
use crate::NatsError;

pub const REGISTER: &str = "clarion.register";
/// Managers answer registrations as one queue group: each request reaches one.
pub const MANAGER_QUEUE: &str = "clarion-managers";
pub const UP_ALL: &str = "clarion.up.>";
pub const EVENTS: &str = "clarion.events";

pub fn up(host: &str) -> String {
    format!("clarion.up.{host}")
}

pub fn control(host: &str) -> String {
    format!("clarion.host.{host}.control")
}

pub fn poll(host: &str) -> String {
    format!("clarion.host.{host}.poll")
}

/// A host name travels inside subjects, so it must be one subject token
/// ([`clarion_manager::host_name_problem`]).
pub fn check_host_name(host: &str) -> Result<(), NatsError> {
    match clarion_manager::host_name_problem(host) {
        None => Ok(()),
        Some(why) => Err(NatsError::HostName(why)),
    }
}

/// An agent announces itself.
///
/// A host's triggers can be more than one message holds (NATS refuses a
/// message over its `max_payload`, 1 MB by default: about 2,000
/// triggers). An agent that sets [`Register::pages`] takes them a page at
/// a time: each reply carries at most [`REGISTER_PAGE_BYTES`] of triggers
/// and, while more follow, the id to ask from ([`RegisterReply::Accepted`]'s
/// `next`); the agent asks again with [`Register::from`] set to it. Only the
/// first request registers (a continuation changes nothing on the
/// manager). A trigger added or removed between pages reaches the agent as
/// [`Control`] as well, on the subject it listens to before registering.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Register {
    pub host: String,
    /// The prefixes the agent believes it owns (checked against the manager's inventory).
    pub prefixes: Vec<String>,
    /// The agent takes its triggers a page at a time (an agent from
    /// before pages gets them all in one reply, or a refusal saying why not).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pages: bool,
    /// A continuation: the triggers of events from this id on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<u64>,
    /// A live agent's monitor started then (Unix ns): it holds no window
    /// that ended before, so polls for those are not sent; a restarted
    /// agent says so. None: a replay (its windows are its capture's), or an
    /// agent from before this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers_from_ns: Option<u64>,
    /// This request repeats one that got no reply in time (the manager
    /// may have taken it and been slow, or died with it): a manager that
    /// registered the host from this agent's earlier request counts and
    /// says it once. Absent (false) from agents before the field; a
    /// manager before it ignores it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retry: bool,
}

/// How many bytes of triggers one registration reply carries at most
/// (half of NATS's default `max_payload`: the rest of the reply, the
/// export policies, fit beside them).
pub const REGISTER_PAGE_BYTES: usize = 512 * 1024;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RegisterReply {
    /// The host's triggers, to install before monitoring.
    Accepted {
        manager: String,
        triggers: Vec<Trigger>,
        /// The manager's export policies, to apply before monitoring (none:
        /// the manager never had any, or predates them).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exports: Option<ExportSet>,
        /// More triggers follow: ask from this event id ([`Register::from`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next: Option<u64>,
    },
    Refused {
        reason: String,
    },
}

/// One host's local trigger of a network-wide event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trigger {
    /// The manager's id of the network-wide event.
    pub event: u64,
    pub spec: EventSpec,
    /// How many of the trigger's values the manager reads (its aggregates, in order).
    pub needs: usize,
    /// A drill-down instance's windows: from `start_ns` (a window boundary)
    /// to `end_ns` (none: no end). Absent for every other trigger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ns: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Control {
    Install(Trigger),
    Remove {
        event: u64,
    },
    /// A drill-down instance now lasts until `end_ns` (none: no end).
    Extend {
        event: u64,
        end_ns: Option<u64>,
    },
    /// The manager is done (its input hosts finished): agents replaying a file may exit.
    Done,
    /// The satisfaction reports of these sequence numbers were decided (or
    /// can be part of no decision): the agent forgets them.
    Ack {
        seqs: Vec<u64>,
    },
    /// The host's whole set of export policies now (replacing the one it
    /// applied, unless that one is newer).
    Exports(ExportSet),
}

/// An agent sends an unacknowledged satisfaction report again after this.
pub const RESEND_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// What an agent sends the manager, on its own subject.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Up {
    /// A local trigger fired: its values for one window and group, and the
    /// host's packet time when its monitor closed the window (the window's
    /// decision time, for drill-downs; 0 from older agents).
    Satisfied {
        event: u64,
        report: Box<Report>,
        #[serde(default)]
        decided_ns: u64,
        /// The agent's sequence number of the report, acknowledged by
        /// [`Control::Ack`] (0: an agent that wants no acknowledgement).
        #[serde(default)]
        seq: u64,
    },
    /// The agent's input ended (a file replayed to its end); every window is
    /// closed and it keeps answering polls. Sent instead of the heartbeat
    /// from then on: the host is done once `unacked` is 0.
    Finished {
        /// Satisfaction reports the agent still holds for acknowledgement.
        unacked: u64,
    },
    /// The agent held more unacknowledged satisfaction reports than it
    /// keeps and forgot the oldest: `reports` of them, of windows starting
    /// from `first_ns` to `last_ns`. The manager reports the gap.
    Dropped {
        reports: u64,
        first_ns: u64,
        last_ns: u64,
    },
    /// Sent every second: the host is alive (the manager lists hosts' health
    /// from it, and re-sends the triggers of a host that comes back).
    Heartbeat,
    /// Sent just before each heartbeat (or "finished") by agents that
    /// measure it: the host's health now. Older agents send none; the
    /// manager then lists the host's health as absent. (A manager from
    /// before it counts the message as unreadable and goes on.)
    Health(HostHealth),
    /// What the agent made of the export policies of `version`: applied,
    /// or refused (`refused`: why; the set it applied before stays).
    Exports {
        version: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refused: Option<String>,
    },
    /// The agent is leaving (its last message): the manager polls it no
    /// more, deciding at once without it, until it is heard from again.
    /// (A manager from before it counts the message as unreadable, and
    /// polls the host until its polls time out.)
    Bye,
}

/// The manager asks a host for its values of an event's trigger in one window and group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PollRequest {
    pub event: u64,
    pub window_start_ns: u64,
    pub group: GroupKey,
    /// Answer with the host's packets in the window ([`Answer::Counted`]).
    /// A manager that holds answers to them asks; one that predates them
    /// does not (absent: false), and an agent that predates them ignores
    /// the field and answers [`Answer::Values`], which is still taken.
    #[serde(default)]
    pub counts: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Answer {
    /// The trigger's values for the group (`None`: the host had no packets
    /// of it), from a host that no longer knows its traffic in the window.
    Values(Option<Vec<f64>>),
    /// The values, with the host's packets in the window (every IP packet
    /// its monitor handled, as a report's completeness counts them): the
    /// manager holds the values to them, as it does a satisfaction report's.
    Counted { values: Option<Vec<f64>>, packets: u64 },
    /// The window is older than the host keeps (`--history-windows`).
    Gone,
    /// The host has no trigger of this event.
    UnknownEvent,
}

/// The first byte of every message: one MessagePack never uses (`0xc1`),
/// and no JSON document starts with.
pub const MAGIC: u8 = 0xc1;
/// The protocol's version, the second byte of every message. Version 1:
/// MessagePack (before it, JSON documents without a header).
pub const VERSION: u8 = 1;

pub fn encode<T: Serialize>(m: &T) -> bytes::Bytes {
    // A satisfaction report takes about 250 bytes: one allocation, no growth.
    framed(320, |buf| rmp_serde::encode::write_named(buf, m))
}

/// [`encode`], with structs as MessagePack arrays of their fields in
/// order instead of maps of their names: for the messages a fleet sends
/// most (poll requests, answers, acknowledgements), whose types skip no
/// field, so that every field is in its place. Any version-1 peer reads
/// them ([`decode`] takes a struct as a map or an array), so this is no
/// new protocol version. A poll request of one group of one address
/// takes 33 bytes instead of 115 (`compact_messages_are_smaller_and_read_by_every_peer`).
/// Not for a type with `skip_serializing_if` (a skipped field would shift
/// the ones after it): [`Report`] and the registration messages stay named.
pub fn encode_compact<T: Serialize>(m: &T) -> bytes::Bytes {
    framed(64, |buf| rmp_serde::encode::write(buf, m))
}

/// The header, then what `write` puts after it.
fn framed(
    capacity: usize,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), rmp_serde::encode::Error>,
) -> bytes::Bytes {
    let mut buf = Vec::with_capacity(capacity);
    buf.extend_from_slice(&[MAGIC, VERSION]);
    // Serializing these types into a Vec cannot fail: MessagePack takes
    // every serde type they use (maps, options, floats, NaN included).
    if write(&mut buf).is_err() {
        buf.truncate(2);
    }
    buf.into()
}

/// True when `payload` is a JSON document (a peer from before version 1):
/// a manager answers such a registration in JSON, so that the old agent
/// can say why it is refused.
pub fn is_json(payload: &[u8]) -> bool {
    matches!(
        payload.iter().find(|b| !b.is_ascii_whitespace()),
        Some(b'{' | b'[' | b'"')
    )
}

pub fn decode<'a, T: Deserialize<'a>>(subject: &str, payload: &'a [u8]) -> Result<T, NatsError> {
    let refused = |message: String| NatsError::Decode {
        subject: subject.to_string(),
        message,
    };
    match payload {
        [MAGIC, VERSION, body @ ..] => {
            rmp_serde::from_slice(body).map_err(|e| refused(format!("a damaged message ({e})")))
        }
        [MAGIC, v, ..] => Err(refused(format!(
            "protocol version {v}, and this Clarion speaks version {VERSION}: run the same version of Clarion on agents and managers"
        ))),
        _ if is_json(payload) => Err(refused(format!(
            "a JSON message, as Clarion sent before protocol version 1; this Clarion speaks version {VERSION} (binary): \
             run the same version of Clarion on agents and managers"
        ))),
        [] => Err(refused("an empty message".into())),
        [first, ..] => Err(refused(format!(
            "not a Clarion protocol message (it starts with byte {first:#04x}, not {MAGIC:#04x})"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_report::{Completeness, Origin, Window};
    use proptest::prelude::*;
    use serde_json::json;

    /// A message of the shape `v` writes in JSON notation (a peer that
    /// sends fewer fields, or a variant as it is spelled), in the protocol's encoding.
    fn shaped(v: serde_json::Value) -> bytes::Bytes {
        encode(&v)
    }

    #[test]
    fn host_names_are_single_subject_tokens() {
        assert!(check_host_name("web-1_a").is_ok());
        for bad in ["", "a.b", "a b", "a*", ">"] {
            assert!(check_host_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_host_name(&"h".repeat(63)).is_ok());
        let long = check_host_name(&"h".repeat(100_000))
            .expect_err("too long")
            .to_string();
        assert_eq!(long, "a host name is at most 63 characters; this one has 100000");
    }

    #[test]
    fn messages_round_trip_including_undefined_values() {
        let specs = clarion_lang::check(
            "event e\n  filter dst_ip in 10.0.0.0/8 and dst_port = 80\n  when sum(volume) > 33.333333333333336 or avg(ttl) < 3\n  per dst_ip/24\n  every 10ms\n",
        )
        .expect("valid");
        let t = Trigger {
            event: 3,
            spec: specs[0].clone(),
            needs: 2,
            start_ns: None,
            end_ns: None,
        };
        let back: Control = decode("s", &encode(&Control::Install(t.clone()))).expect("decodes");
        assert_eq!(back, Control::Install(t));
        let r = Report {
            capture: None,
            missing_hosts: Box::default(),
            event: "e".into(),
            window: Window {
                start_ns: 10,
                end_ns: 20,
            },
            group: GroupKey {
                dst_ip: Some(("10.1.2.0".parse().expect("addr"), 24)),
                dst_port: Some(None),
                ..GroupKey::default()
            },
            values: vec![("sum(volume)".into(), 0.1 + 0.2), ("avg(ttl)".into(), f64::NAN)].into(),
            origin: Origin {
                host: "h".into(),
                worker: 0,
            },
            completeness: Completeness::default(),
        };
        let up = Up::Satisfied {
            event: 1,
            report: Box::new(r),
            decided_ns: 7,
            seq: 1,
        };
        let Up::Satisfied { report: back, .. } = decode::<Up>("s", &encode(&up)).expect("decodes") else {
            panic!("wrong variant");
        };
        assert_eq!(back.values[0].1, 0.1 + 0.2, "floats travel exactly");
        assert!(back.values[1].1.is_nan(), "an undefined value stays undefined");
        assert_eq!(back.group, up_group(&up));
    }

    fn up_group(u: &Up) -> GroupKey {
        match u {
            Up::Satisfied { report, .. } => report.group,
            _ => GroupKey::default(),
        }
    }

    #[test]
    fn every_example_event_travels_unchanged() {
        for src in [
            include_str!("../../../examples/paper.clarion"),
            include_str!("../../../examples/demo.clarion"),
            include_str!("../../../examples/network.clarion"),
        ] {
            for spec in clarion_lang::check(src).expect("valid") {
                let t = Trigger {
                    event: 0,
                    spec,
                    needs: 0,
                    start_ns: None,
                    end_ns: None,
                };
                assert_eq!(decode::<Trigger>("s", &encode(&t)).expect("decodes"), t);
            }
        }
    }

    fn arb_present() -> impl Strategy<Value = Option<Option<u16>>> {
        prop_oneof![
            Just(None),
            Just(Some(None)),
            any::<u16>().prop_map(|p| Some(Some(p)))
        ]
    }

    fn arb_addr() -> impl Strategy<Value = Option<(std::net::IpAddr, u8)>> {
        prop_oneof![
            Just(None),
            (any::<u32>(), 0u8..=32).prop_map(|(a, l)| Some((std::net::Ipv4Addr::from(a).into(), l))),
            (any::<u128>(), 0u8..=128).prop_map(|(a, l)| Some((std::net::Ipv6Addr::from(a).into(), l))),
        ]
    }

    proptest! {
        #[test]
        fn every_group_key_travels_unchanged(
            src_ip in arb_addr(),
            dst_ip in arb_addr(),
            src_port in arb_present(),
            dst_port in arb_present(),
            proto in prop::option::of(any::<u8>()),
            vlan in arb_present(),
            vni in prop::option::of(prop::option::of(any::<u32>())),
        ) {
            let group = GroupKey { src_ip, dst_ip, src_port, dst_port, proto, vlan, vni };
            let req = PollRequest {
                event: 1,
                window_start_ns: 2,
                group,
                counts: true,
            };
            prop_assert_eq!(decode::<PollRequest>("s", &encode(&req)).expect("decodes"), req.clone());
            prop_assert_eq!(decode::<PollRequest>("s", &encode_compact(&req)).expect("decodes"), req);
        }

        /// Poll requests, answers and acknowledgements written compact read
        /// back as written, through the decoder every version-1 peer runs.
        #[test]
        fn compact_messages_travel_unchanged(
            reqs in proptest::collection::vec((any::<u64>(), any::<u64>(), arb_addr(), arb_present(), any::<bool>()), 0..20),
            answers in proptest::collection::vec(prop_oneof![
                prop::option::of(proptest::collection::vec(any::<f64>(), 0..3)).prop_map(Answer::Values),
                (prop::option::of(proptest::collection::vec(any::<f64>(), 0..3)), any::<u64>())
                    .prop_map(|(values, packets)| Answer::Counted { values, packets }),
                Just(Answer::Gone),
                Just(Answer::UnknownEvent),
            ], 0..20),
            seqs in proptest::collection::vec(any::<u64>(), 0..50),
        ) {
            let reqs: Vec<PollRequest> = reqs
                .into_iter()
                .map(|(event, window_start_ns, dst_ip, dst_port, counts)| PollRequest {
                    event,
                    window_start_ns,
                    group: GroupKey { dst_ip, dst_port, ..GroupKey::default() },
                    counts,
                })
                .collect();
            prop_assert_eq!(decode::<Vec<PollRequest>>("s", &encode_compact(&reqs)).expect("decodes"), reqs);
            // NaN is not equal to itself: compared by bits.
            let bits = |a: &[Answer]| format!("{:?}", a.iter().map(|a| match a {
                Answer::Values(v) => (0, v.as_ref().map(|v| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>()), 0),
                Answer::Counted { values, packets } => (1, values.as_ref().map(|v| v.iter().map(|f| f.to_bits()).collect()), *packets),
                Answer::Gone => (2, None, 0),
                Answer::UnknownEvent => (3, None, 0),
            }).collect::<Vec<_>>());
            let back: Vec<Answer> = decode("s", &encode_compact(&answers)).expect("decodes");
            prop_assert_eq!(bits(&back), bits(&answers));
            let ack = Control::Ack { seqs };
            prop_assert_eq!(decode::<Control>("s", &encode_compact(&ack)).expect("decodes"), ack);
        }
    }

    #[test]
    fn compact_messages_are_smaller_and_read_by_every_peer() {
        let req = vec![PollRequest {
            event: 12,
            window_start_ns: 1_765_000_000_000_000_000,
            group: GroupKey {
                dst_ip: Some(("10.0.42.7".parse().expect("addr"), 32)),
                ..GroupKey::default()
            },
            counts: true,
        }];
        let (named, compact) = (encode(&req), encode_compact(&req));
        assert_eq!((named.len(), compact.len()), (115, 33));
        assert_eq!(decode::<Vec<PollRequest>>("s", &compact).expect("decodes"), req);
        // What a version-1 peer from before this function sent is still read.
        assert_eq!(decode::<Vec<PollRequest>>("s", &named).expect("decodes"), req);
        let answer = vec![Answer::Counted {
            values: Some(vec![1e6]),
            packets: 700,
        }];
        assert!(encode_compact(&answer).len() < encode(&answer).len());
        assert_eq!(
            decode::<Vec<Answer>>("s", &encode_compact(&answer)).expect("decodes"),
            answer
        );
    }

    #[test]
    fn polls_and_answers_of_older_peers_are_understood() {
        // A manager from before counted answers: no `counts`.
        let req = PollRequest {
            event: 1,
            window_start_ns: 2,
            group: GroupKey::default(),
            counts: true,
        };
        let mut old = serde_json::to_value(&req).expect("encodes");
        old.as_object_mut().expect("an object").remove("counts");
        let req: PollRequest = decode("s", &shaped(old)).expect("decodes");
        assert!(!req.counts);
        // An agent from before them answers values only.
        let answers: Vec<Answer> =
            decode("s", &shaped(json!([{"Values":[5.0]},{"Values":null},"Gone"]))).expect("decodes");
        assert_eq!(
            answers,
            vec![
                Answer::Values(Some(vec![5.0])),
                Answer::Values(None),
                Answer::Gone
            ]
        );
        let counted = Answer::Counted {
            values: Some(vec![5.0]),
            packets: 3,
        };
        assert_eq!(
            decode::<Answer>("s", &encode(&counted)).expect("decodes"),
            counted
        );
    }

    #[test]
    fn export_sets_travel_and_older_peers_still_understand() {
        let set = ExportSet {
            version: 7,
            source: "export a\n  filter proto = udp\n  send packets to pcapng\n".into(),
        };
        let c = Control::Exports(set.clone());
        assert_eq!(decode::<Control>("s", &encode(&c)).expect("decodes"), c);
        // A manager from before export policies: its reply has no `exports`.
        let old = shaped(json!({"Accepted":{"manager":"m","triggers":[]}}));
        let RegisterReply::Accepted { exports, .. } = decode::<RegisterReply>("s", &old).expect("decodes")
        else {
            panic!("accepted");
        };
        assert_eq!(exports, None);
        let new = RegisterReply::Accepted {
            manager: "m".into(),
            triggers: Vec::new(),
            exports: Some(set),
            next: Some(3),
        };
        assert_eq!(decode::<RegisterReply>("s", &encode(&new)).expect("decodes"), new);
        // An agent from before pages registers without `pages` or `from`,
        // and one of now sends neither when it need not.
        let old = shaped(json!({"host":"h","prefixes":["10.0.0.0/24"]}));
        let reg = decode::<Register>("s", &old).expect("decodes");
        assert!(!reg.pages && reg.from.is_none(), "{reg:?}");
        assert_eq!(&encode(&reg)[..], &old[..]);
        let paged = Register {
            pages: true,
            from: Some(9),
            answers_from_ns: Some(5),
            retry: true,
            ..reg
        };
        assert_eq!(decode::<Register>("s", &encode(&paged)).expect("decodes"), paged);
        let up = Up::Exports {
            version: 7,
            refused: Some("why".into()),
        };
        assert_eq!(decode::<Up>("s", &encode(&up)).expect("decodes"), up);
    }

    #[test]
    fn health_travels_and_agents_without_it_still_speak() {
        let mut meter = clarion_control::HealthMeter::new(0, 5_000_000_000, 0);
        meter.record(
            2_000_000_000,
            clarion_control::HealthCounters {
                packets: 10,
                drops_kernel: 1,
                sweeps: 4,
                sweeps_late: 1,
                sweep_last_ns: Some(123_456),
                sweep_max_ns: Some(999_999),
                ..Default::default()
            },
        );
        let sent = meter.health(2_000_000_000);
        let Up::Health(got) = decode::<Up>("s", &encode(&Up::Health(sent.clone()))).expect("decodes") else {
            panic!("wrong variant");
        };
        // serde_json reads a float back within one unit in the last place.
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-15 * b.abs().max(1.0);
        assert!(
            close(got.packets_per_second, 5.0) && close(got.completeness, 10.0 / 11.0),
            "{got:?}"
        );
        assert!(
            close(got.sweep_seconds_last.unwrap_or_default(), 123_456e-9),
            "{got:?}"
        );
        let integers = |h: &clarion_control::HostHealth| {
            (
                h.packets_total,
                h.drops_total,
                h.drops_kernel_total,
                h.sweeps_total,
                h.late_sweeps_total,
            )
        };
        assert_eq!(integers(&got), integers(&sent));
        assert_eq!(integers(&got), (10, 1, 1, 4, 1));
        // What an agent from before health sends every second, as it sends it.
        assert_eq!(
            decode::<Up>("s", &shaped(json!("Heartbeat"))).expect("decodes"),
            Up::Heartbeat
        );
        assert_eq!(
            decode::<Up>("s", &shaped(json!({"Finished":{"unacked":0}}))).expect("decodes"),
            Up::Finished { unacked: 0 }
        );
        // The goodbye, as an agent sends it last.
        assert_eq!(encode(&Up::Bye), shaped(json!("Bye")));
    }

    #[test]
    fn garbage_is_a_decode_error() {
        let e = decode::<Up>("clarion.up.h", b"\xc1\x01{not msgpack").expect_err("fails");
        assert!(e.to_string().contains("clarion.up.h"), "{e}");
        assert!(e.to_string().contains("damaged"), "{e}");
    }

    /// A Satisfied report as an agent sends it.
    fn satisfied() -> Up {
        Up::Satisfied {
            event: 4,
            report: Box::new(Report {
                capture: None,
                missing_hosts: Box::default(),
                event: "e".into(),
                window: Window {
                    start_ns: 10,
                    end_ns: 20,
                },
                group: GroupKey {
                    dst_ip: Some(("10.1.2.0".parse().expect("addr"), 24)),
                    ..GroupKey::default()
                },
                values: vec![("sum(volume)".into(), 1e6)].into(),
                origin: Origin {
                    host: "h".into(),
                    worker: 0,
                },
                completeness: Completeness::default(),
            }),
            decided_ns: 20,
            seq: 9,
        }
    }

    #[test]
    fn other_versions_and_json_are_refused_saying_why() {
        let mut next = encode(&satisfied()).to_vec();
        next[1] = VERSION + 1;
        let e = decode::<Up>("clarion.up.h", &next)
            .expect_err("another version")
            .to_string();
        assert!(e.contains("protocol version 2") && e.contains("version 1"), "{e}");
        // What an agent from before version 1 sent.
        let json = serde_json::to_vec(&satisfied()).expect("json");
        let e = decode::<Up>("clarion.up.h", &json).expect_err("JSON").to_string();
        assert!(
            e.contains("JSON") && e.contains("before protocol version 1"),
            "{e}"
        );
        assert!(is_json(&json) && !is_json(&encode(&satisfied())));
        let e = decode::<Up>("s", b"").expect_err("empty").to_string();
        assert!(e.contains("empty"), "{e}");
        let e = decode::<Up>("s", b"\x93\x01").expect_err("no header").to_string();
        assert!(e.contains("0x93"), "{e}");
    }

    #[test]
    fn a_damaged_or_lying_message_is_an_error_not_a_panic() {
        let whole = encode(&satisfied());
        assert_eq!(decode::<Up>("s", &whole).expect("decodes"), satisfied());
        // Cut anywhere: refused.
        for n in 0..whole.len() {
            assert!(decode::<Up>("s", &whole[..n]).is_err(), "cut at {n}");
        }
        // A list that says it holds 4 billion answers, and holds one: refused
        // at once, without making room for them.
        let mut lying = vec![MAGIC, VERSION, 0xdd, 0xff, 0xff, 0xff, 0xff];
        lying.extend_from_slice(&encode(&Answer::Gone)[2..]);
        let e = decode::<Vec<Answer>>("s", &lying).expect_err("lies").to_string();
        assert!(e.contains("damaged"), "{e}");
        // A string that says it is 4 GB long.
        let lying = [MAGIC, VERSION, 0xdb, 0xff, 0xff, 0xff, 0xff, b'B', b'y', b'e'];
        assert!(decode::<Up>("s", &lying).is_err());
        // Nested ever deeper: refused, not a stack overflow.
        let mut deep = vec![MAGIC, VERSION];
        deep.extend(vec![0x91; 100_000]);
        assert!(decode::<Up>("s", &deep).is_err());
        // A field of the wrong type.
        let wrong = shaped(json!({"Finished":{"unacked":"many"}}));
        assert!(decode::<Up>("s", &wrong).is_err());
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_fail_without_panicking(
            body in prop::collection::vec(any::<u8>(), 0..64),
            flip in any::<(usize, u8)>(),
        ) {
            let mut m = vec![MAGIC, VERSION];
            m.extend_from_slice(&body);
            let _ = decode::<Up>("s", &m);
            let _ = decode::<Vec<PollRequest>>("s", &m);
            let _ = decode::<Vec<Answer>>("s", &m);
            let _ = decode::<Control>("s", &m);
            // A real message with one byte changed.
            let mut real = encode(&satisfied()).to_vec();
            let at = 2 + flip.0 % (real.len() - 2);
            real[at] ^= flip.1;
            let _ = decode::<Up>("s", &real);
        }
    }
}
