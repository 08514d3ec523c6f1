//! Network-wide events on several hosts equal the reference evaluator run
//! over all the placed hosts' packets together: the same windows, groups
//! and values, none missed, none spurious.

use std::collections::BTreeSet;
use std::net::IpAddr;

use clarion_engine::{MonitorConfig, Report};
use clarion_lang::spec::{
    AggCall, AggFunc, BaseVar, CmpOp, DrillDown, EventSpec, Filter, Granularity, IpPrefix, PacketExpr, Pred,
    PrefixLens, Quorum, Scope, Var,
};
use clarion_manager::Inventory;
use clarion_network::Network;
use clarion_reference::{evaluate, Config, Input};
use clarion_wire::{FlowKey, PacketRecord};
use proptest::prelude::*;

const MS: u64 = 1_000_000;
const T0: u64 = 1_700_000_000_000 * MS;
const INVENTORY: &str = "h0 10.0.0.0/24\nh1 10.0.1.0/24\nh2 10.0.2.0/24\n";
/// Host addresses, and one outside every host.
const ADDRS: [&str; 6] = [
    "10.0.0.1",
    "10.0.0.2",
    "10.0.1.1",
    "10.0.1.2",
    "10.0.2.1",
    "192.0.2.9",
];

fn addr(i: usize) -> IpAddr {
    ADDRS[i].parse().expect("address")
}

fn packet(ts: u64, src: usize, dst: usize, sport: u16, volume: u32, ttl: u8) -> PacketRecord {
    PacketRecord {
        ts_ns: ts,
        key: FlowKey::new(addr(src), addr(dst), 17, Some((sport, 80)), None),
        size: volume + 28,
        volume,
        ttl,
        ..PacketRecord::default()
    }
}

fn arb_traffic() -> impl Strategy<Value = Vec<PacketRecord>> {
    prop::collection::vec(
        (
            0u64..3_000_000,
            0..ADDRS.len(),
            0..ADDRS.len(),
            1000u16..1003,
            0u32..400,
            1u8..70,
        ),
        1..160,
    )
    .prop_map(|v| {
        let mut ts = T0 + 3 * MS;
        v.into_iter()
            .filter(|(_, s, d, ..)| s != d)
            .map(|(gap, s, d, sport, vol, ttl)| {
                ts += gap;
                packet(ts, s, d, sport, vol, ttl)
            })
            .collect()
    })
}

fn var(base: BaseVar) -> PacketExpr {
    PacketExpr::Var(Var {
        base,
        last_epoch: false,
    })
}

fn arb_atom() -> impl Strategy<Value = Pred> {
    (
        prop::sample::select(vec![
            AggFunc::Sum,
            AggFunc::Count,
            AggFunc::Max,
            AggFunc::Avg,
            AggFunc::Min,
        ]),
        prop::bool::ANY,
        0u32..1500,
    )
        .prop_map(|(func, vol, c)| {
            let base = if vol { BaseVar::Volume } else { BaseVar::Ttl };
            let (op, c) = match func {
                AggFunc::Min => (CmpOp::Lt, f64::from(c % 70)),
                AggFunc::Count => (CmpOp::Gt, f64::from(c % 12)),
                AggFunc::Max | AggFunc::Avg if !vol => (CmpOp::Gt, f64::from(c % 70)),
                AggFunc::Max | AggFunc::Avg => (CmpOp::Ge, f64::from(c % 400)),
                _ => (CmpOp::Gt, f64::from(c)),
            };
            Pred::Cmp(
                op,
                Box::new(Pred::Agg(AggCall { func, arg: var(base) })),
                Box::new(Pred::Num(c)),
            )
        })
}

fn arb_event() -> impl Strategy<Value = EventSpec> {
    let pred = arb_atom().prop_recursive(1, 3, 2, |inner| {
        (inner.clone(), inner, prop::bool::ANY).prop_map(|(l, r, and)| {
            if and {
                Pred::And(Box::new(l), Box::new(r))
            } else {
                Pred::Or(Box::new(l), Box::new(r))
            }
        })
    });
    let granularity = prop::sample::select(vec![
        Granularity::FIVE_TUPLE,
        Granularity {
            dst_ip: Some(PrefixLens::FULL),
            ..Granularity::default()
        },
        Granularity {
            src_ip: Some(PrefixLens { v4: 16, v6: 64 }),
            ..Granularity::default()
        },
        Granularity::default(),
    ]);
    let filter = prop::sample::select(vec![
        None,
        Some("10.0.0.0/23"),
        Some("10.0.2.0/24"),
        Some("10.0.0.0/16"),
    ]);
    (pred, granularity, filter, prop::bool::ANY).prop_map(|(predicate, granularity, f, long)| EventSpec {
        capture: None,
        priority: None,
        name: "net".into(),
        filters: vec![Filter {
            dst_ip: f.map(|p| {
                let (a, l) = p.split_once('/').expect("prefix");
                IpPrefix {
                    addr: a.parse().expect("addr"),
                    len: l.parse().expect("len"),
                }
            }),
            ..Filter::default()
        }],
        predicate,
        granularity,
        interval_ns: if long { 20 * MS } else { 10 * MS },
        scope: Scope::Network,
        drill_downs: Vec::new(),
        on_demand: false,
    })
}

/// The embedded network's reports for `event` over `traffic`, or `None`
/// when the manager refuses the event (not splittable).
fn network_reports(
    inventory: &Inventory,
    event: &EventSpec,
    traffic: &[PacketRecord],
) -> Option<Vec<Report>> {
    let mut net = Network::new(inventory.clone(), "manager", &MonitorConfig::default());
    net.install(event.clone()).ok()?;
    let mut got = Vec::new();
    for p in traffic {
        net.process(p, &mut got);
    }
    net.finish(&mut got);
    Some(got)
}

/// (window start, group, values) of each report.
fn summary(reports: &[Report]) -> BTreeSet<(u64, String, String)> {
    reports
        .iter()
        .map(|r| {
            (
                r.window.start_ns,
                format!("{:?}", r.group),
                format!("{:?}", r.values),
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    #[test]
    fn network_wide_reports_equal_the_reference_on_all_hosts_packets(
        event in arb_event(),
        traffic in arb_traffic(),
    ) {
        let inventory = Inventory::parse(INVENTORY).expect("inventory");
        let placed = inventory.placement(&event);
        let Some(got) = network_reports(&inventory, &event, &traffic) else {
            // Not splittable: refused, nothing to compare.
            return Ok(());
        };
        // The reference sees each packet once per placed host that owns one of its addresses.
        let mut inputs = Vec::new();
        for p in &traffic {
            let src = inventory.owner(p.key.src_addr());
            let dst = inventory.owner(p.key.dst_addr()).filter(|d| Some(*d) != src);
            for h in [src, dst].into_iter().flatten() {
                if placed.contains(&h) {
                    inputs.push(Input::Packet(*p));
                }
            }
        }
        let want = if inputs.is_empty() { Vec::new() } else { evaluate(std::slice::from_ref(&event), &inputs, &Config::default()) };
        prop_assert_eq!(summary(&got), summary(&want), "event {:?}", event.predicate.to_string());
    }
}

fn arb_quorum() -> impl Strategy<Value = Quorum> {
    prop_oneof![
        (0u32..3).prop_map(|n| Quorum {
            more_than: n,
            percent: false
        }),
        prop::sample::select(vec![0u32, 33, 50, 66]).prop_map(|p| Quorum {
            more_than: p,
            percent: true
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    /// A counting event (`across more than ...`) fires for a window and
    /// group exactly when more than its quorum of the placed hosts would
    /// each report the event on their own packets (the reference, run host
    /// by host), and says how many did.
    #[test]
    fn counting_events_equal_the_reference_host_by_host(
        event in arb_event(),
        quorum in arb_quorum(),
        traffic in arb_traffic(),
    ) {
        let event = EventSpec { scope: Scope::Quorum(quorum), ..event };
        let inventory = Inventory::parse(INVENTORY).expect("inventory");
        let placed = inventory.placement(&event);
        let Some(got) = network_reports(&inventory, &event, &traffic) else {
            return Ok(());
        };
        // Each placed host alone, as a host event.
        let host_event = EventSpec { scope: Scope::Host, ..event.clone() };
        let mut fired: std::collections::BTreeMap<(u64, String), usize> = Default::default();
        for &h in &placed {
            let inputs: Vec<Input> = traffic
                .iter()
                .filter(|p| {
                    inventory.owner(p.key.src_addr()) == Some(h) || inventory.owner(p.key.dst_addr()) == Some(h)
                })
                .map(|p| Input::Packet(*p))
                .collect();
            if inputs.is_empty() {
                continue;
            }
            for r in evaluate(std::slice::from_ref(&host_event), &inputs, &Config::default()) {
                *fired.entry((r.window.start_ns, format!("{:?}", r.group))).or_default() += 1;
            }
        }
        let want: BTreeSet<(u64, String, String)> = fired
            .into_iter()
            .filter(|(_, n)| quorum.holds(*n, placed.len()))
            .map(|((w, g), n)| (w, g, format!("{:?}", vec![("hosts".to_string(), n as f64)])))
            .collect();
        prop_assert_eq!(summary(&got), want, "event {:?} {}", event.predicate.to_string(), quorum);
    }
}

/// A network-wide event installing a network-wide one, narrowed to the
/// firing group's source port or not, for a few windows or for good. Both
/// filter on no address, so both are placed on every host and the
/// reference over every host's packets is the truth for both.
fn arb_drill_down() -> impl Strategy<Value = Vec<EventSpec>> {
    (
        arb_event(),
        arb_event(),
        prop::bool::ANY,
        prop::option::of(1u64..4),
    )
        .prop_map(|(parent, child, narrow, windows)| {
            let child = EventSpec {
                name: "t".into(),
                filters: vec![Filter::default()],
                on_demand: true,
                ..child
            };
            let mut parent = EventSpec {
                name: "p".into(),
                filters: vec![Filter::default()],
                ..parent
            };
            if narrow {
                parent.granularity = Granularity::FIVE_TUPLE;
            }
            parent.drill_downs.push(DrillDown {
                on: Granularity {
                    src_port: narrow,
                    ..Granularity::default()
                },
                duration_ns: windows.map(|k| k * child.interval_ns),
                event: Box::new(child.clone()),
            });
            vec![parent, child]
        })
}

/// (event, window start, group, values) of each report.
fn named(reports: &[Report]) -> BTreeSet<(String, u64, String, String)> {
    reports
        .iter()
        .map(|r| {
            (
                r.event.to_string(),
                r.window.start_ns,
                format!("{:?}", r.group),
                format!("{:?}", r.values),
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Network-wide drill-downs: the manager installs each instance on the
    /// hosts from the window after the decision, for its windows, and
    /// decides it like any network-wide event.
    #[test]
    fn network_drill_downs_equal_the_reference(events in arb_drill_down(), traffic in arb_traffic()) {
        let inventory = Inventory::parse(INVENTORY).expect("inventory");
        let mut net = Network::new(inventory.clone(), "manager", &MonitorConfig::default());
        if events.iter().try_for_each(|e| net.install(e.clone())).is_err() {
            return Ok(()); // not splittable: refused
        }
        let mut got = Vec::new();
        for p in &traffic {
            net.process(p, &mut got);
        }
        net.finish(&mut got);
        let mut inputs = Vec::new();
        for p in &traffic {
            let src = inventory.owner(p.key.src_addr());
            let dst = inventory.owner(p.key.dst_addr()).filter(|d| Some(*d) != src);
            inputs.extend([src, dst].into_iter().flatten().map(|_| Input::Packet(*p)));
        }
        let want = if inputs.is_empty() { Vec::new() } else { evaluate(&events, &inputs, &Config::default()) };
        prop_assert_eq!(named(&got), named(&want));
    }
}

/// The generated drill-down cases install and report from instances
/// (else the property above would prove little).
#[test]
fn generated_network_drill_downs_report_from_instances() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let inventory = Inventory::parse(INVENTORY).expect("inventory");
    let (n, mut reporting) = (200, 0);
    for _ in 0..n {
        let events = arb_drill_down().new_tree(&mut runner).expect("events").current();
        let traffic = arb_traffic().new_tree(&mut runner).expect("traffic").current();
        let mut net = Network::new(inventory.clone(), "manager", &MonitorConfig::default());
        if events.iter().try_for_each(|e| net.install(e.clone())).is_err() {
            continue;
        }
        let mut got = Vec::new();
        for p in &traffic {
            net.process(p, &mut got);
        }
        net.finish(&mut got);
        reporting += usize::from(got.iter().any(|r| r.event.starts_with('t')));
    }
    eprintln!("{reporting} of {n} cases report from an instance");
    assert!(reporting * 4 >= n, "{reporting} of {n}");
}
