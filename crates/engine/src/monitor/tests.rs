use super::*;
use clarion_lang::spec::{
    AggCall, AggFunc, BaseVar, CmpOp, Filter, Granularity, PacketExpr, Pred, PrefixLens, Scope, Var,
};
use clarion_report::Window;
use clarion_wire::{FlowKey, TcpInfo};

use crate::config::Tuning;

pub(crate) const MS: u64 = 1_000_000;
pub(crate) const T0: u64 = 1_700_000_000_000 * MS;

fn var(b: BaseVar) -> PacketExpr {
    PacketExpr::Var(Var {
        base: b,
        last_epoch: false,
    })
}

pub(crate) fn agg(func: AggFunc, b: BaseVar) -> Pred {
    Pred::Agg(AggCall { func, arg: var(b) })
}

fn gt(l: Pred, r: f64) -> Pred {
    Pred::Cmp(CmpOp::Gt, Box::new(l), Box::new(Pred::Num(r)))
}

pub(crate) fn event(name: &str, pred: Pred, g: Granularity, interval_ms: u64) -> EventSpec {
    EventSpec {
        capture: None,
        priority: None,
        name: name.into(),
        filters: vec![Filter::default()],
        predicate: pred,
        granularity: g,
        interval_ns: interval_ms * MS,
        scope: Scope::Host,
        drill_downs: Vec::new(),
        on_demand: false,
    }
}

pub(crate) fn pkt(ts: u64, src: u8, sport: u16, volume: u32) -> PacketRecord {
    let key = FlowKey::new(
        format!("10.0.0.{src}").parse().unwrap(),
        "10.0.1.1".parse().unwrap(),
        17,
        Some((sport, 53)),
        None,
    );
    PacketRecord {
        ts_ns: ts,
        key,
        size: volume + 28,
        volume,
        ttl: 64,
        ..PacketRecord::default()
    }
}

/// A monitor configuration whose closed windows are kept, as a polled host's.
fn polled() -> MonitorConfig {
    MonitorConfig {
        history_windows: crate::POLLED_HISTORY_WINDOWS,
        ..MonitorConfig::default()
    }
}

/// A monitor with one event: a 5-tuple sending more than 150 bytes in 10 ms.
fn big_flows_monitor() -> Monitor {
    let mut m = Monitor::new(MonitorConfig::default());
    m.install(event(
        "big",
        gt(agg(AggFunc::Sum, BaseVar::Volume), 150.0),
        Granularity::FIVE_TUPLE,
        10,
    ))
    .unwrap();
    m
}

fn run(m: &mut Monitor, pkts: &[PacketRecord]) -> Vec<Report> {
    let mut out = Vec::new();
    for p in pkts {
        m.process(p, &mut out);
    }
    m.finish(&mut out);
    out
}

/// A sum beyond 64 bits (never met in practice: 2^63 bytes in a window)
/// is tested by the general predicate, not the sweep's integer range.
#[test]
fn a_sum_beyond_64_bits_is_tested_as_any_predicate() {
    let mut m = big_flows_monitor();
    let lt = Pred::Cmp(
        CmpOp::Lt,
        Box::new(agg(AggFunc::Sum, BaseVar::Volume)),
        Box::new(Pred::Num(150.0)),
    );
    m.install(event("small", lt, Granularity::FIVE_TUPLE, 10))
        .unwrap();
    let mut out = Vec::new();
    m.process(&pkt(T0, 1, 1000, 100), &mut out);
    // 2^64 + 100 bytes: the high word of every sum of the flow's record.
    let half = (m.epoch_seq & 1) as usize;
    let mut widened = 0;
    for set in &mut m.sets {
        let sums: Vec<usize> = (0..set.triggers.len())
            .filter_map(|pos| set.sum_word(pos))
            .collect();
        let mut rec = 0;
        while let Some(next) = set.next_record(rec, half) {
            let w = set.record_words_mut(rec as u32, half).unwrap();
            for &at in &sums {
                w[at + 1] = 1;
                widened += 1;
            }
            rec = next;
        }
    }
    assert_eq!(widened, 2, "the flow's record holds both events' sums");
    m.process(&pkt(T0 + 12 * MS, 1, 1000, 100), &mut out);
    let first: Vec<_> = out.iter().filter(|r| r.window.start_ns == T0).collect();
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(&*first[0].event, "big");
    assert_eq!(first[0].values[0].1, 18_446_744_073_709_551_716.0);
}

#[test]
fn sums_per_flow_per_window() {
    let mut m = big_flows_monitor();
    let out = run(
        &mut m,
        &[
            pkt(T0, 1, 1000, 100),
            pkt(T0 + 2 * MS, 1, 1000, 100),
            pkt(T0 + 3 * MS, 2, 1000, 100),
            pkt(T0 + 12 * MS, 1, 1000, 200),
        ],
    );
    assert_eq!(out.len(), 2, "{out:#?}");
    assert_eq!(
        out[0].window,
        Window {
            start_ns: T0,
            end_ns: T0 + 10 * MS
        }
    );
    assert_eq!(out[0].values[..], [("sum(volume)".into(), 200.0)]);
    assert!(out[0].completeness.complete);
    assert_eq!(out[0].completeness.packets, 3);
    assert_eq!(out[1].window.start_ns, T0 + 10 * MS);
    assert!(
        !out[1].completeness.complete,
        "the input ended inside the last window"
    );
    let c = m.counters();
    assert_eq!(
        (c.packets, c.flows_created, c.reports, c.triggers_matched),
        (4, 2, 2, 2)
    );
}

#[test]
fn coarse_granularity_and_longer_windows_over_gaps() {
    let mut m = Monitor::new(MonitorConfig::default());
    let per_src24 = Granularity {
        src_ip: Some(PrefixLens { v4: 24, v6: 64 }),
        ..Granularity::default()
    };
    m.install(event(
        "fast",
        gt(agg(AggFunc::Count, BaseVar::Packets), 0.0),
        Granularity::FIVE_TUPLE,
        10,
    ))
    .unwrap();
    m.install(event(
        "slow",
        gt(agg(AggFunc::Sum, BaseVar::Packets), 2.0),
        per_src24,
        20,
    ))
    .unwrap();
    assert_eq!(m.epoch_ns(), 10 * MS);
    // Three packets from two hosts in [T0, T0+20ms), then a long gap.
    let out = run(
        &mut m,
        &[
            pkt(T0 + MS, 1, 1, 10),
            pkt(T0 + 11 * MS, 2, 2, 10),
            pkt(T0 + 15 * MS, 1, 1, 10),
            pkt(T0 + 95 * MS, 1, 1, 10),
        ],
    );
    let slow: Vec<_> = out.iter().filter(|r| &*r.event == "slow").collect();
    assert_eq!(slow.len(), 1);
    assert_eq!(
        slow[0].window,
        Window {
            start_ns: T0,
            end_ns: T0 + 20 * MS
        }
    );
    assert_eq!(slow[0].group.src_ip, Some(("10.0.0.0".parse().unwrap(), 24)));
    assert_eq!(slow[0].values[0].1, 3.0);
    assert_eq!(out.iter().filter(|r| &*r.event == "fast").count(), 4);
    // Reports come out in canonical order.
    let keys: Vec<_> = out.iter().map(Report::sort_key).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
}

/// The reports of many flows' firings (made at the sweep's end,
/// `firings.rs`) and of windows closed after the gather come out in one
/// canonical order, whatever order the flows were swept in.
#[test]
fn firings_and_closed_windows_come_out_in_canonical_order() {
    let mut m = Monitor::new(MonitorConfig::default());
    let per_src = Granularity {
        src_ip: Some(PrefixLens { v4: 32, v6: 128 }),
        ..Granularity::default()
    };
    for (name, gran, interval) in [
        ("b", Granularity::FIVE_TUPLE, 10),
        ("a", Granularity::FIVE_TUPLE, 10),
        ("c", per_src, 20),
    ] {
        m.install(event(
            name,
            gt(agg(AggFunc::Count, BaseVar::Packets), 0.0),
            gran,
            interval,
        ))
        .unwrap();
    }
    // Flows arrive in an order unlike their keys' (a stride through the ports).
    let mut pkts: Vec<_> = (0..300u64)
        .map(|i| pkt(T0 + i * 60_000, (i % 7) as u8, ((i * 37) % 300) as u16, 10))
        .collect();
    pkts.push(pkt(T0 + 45 * MS, 1, 1, 10));
    let out = run(&mut m, &pkts);
    for name in ["a", "b", "c"] {
        assert!(out.iter().filter(|r| &*r.event == name).count() >= 7, "{name}");
    }
    let keys: Vec<_> = out.iter().map(Report::sort_key).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    // Each flow of a window once per trigger.
    let mut dedup = sorted.clone();
    dedup.dedup();
    assert_eq!(dedup.len(), sorted.len());
}

/// A 10 ms per-5-tuple event named `any` that fires on any packet.
fn any() -> EventSpec {
    event(
        "any",
        gt(agg(AggFunc::Sum, BaseVar::Packets), 0.0),
        Granularity::FIVE_TUPLE,
        10,
    )
}

#[test]
fn install_mid_stream_starts_at_next_window_and_remove_stops() {
    let mut m = Monitor::new(MonitorConfig::default());
    let mut out = Vec::new();
    m.process(&pkt(T0 + MS, 1, 1, 10), &mut out);
    let id = m.install(any()).unwrap();
    m.process(&pkt(T0 + 2 * MS, 1, 1, 10), &mut out);
    assert_eq!(
        m.trigger_flows(id),
        Some(1),
        "existing flows are matched at install"
    );
    m.process(&pkt(T0 + 12 * MS, 1, 1, 10), &mut out);
    assert!(
        out.is_empty(),
        "the window the event was installed in is not reported: {out:?}"
    );
    m.process(&pkt(T0 + 22 * MS, 1, 1, 10), &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].window.start_ns, T0 + 10 * MS);
    m.remove(id).unwrap();
    m.finish(&mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(m.remove(id), Err(EngineError::UnknownTrigger(id)));
}

#[test]
fn has_event_follows_installs_and_removals_of_a_name() {
    let mut m = Monitor::new(MonitorConfig::default());
    assert!(!m.has_event("any"));
    // Two triggers of one name live side by side (an instance replaced
    // while its last windows are swept): the name stays until both go.
    let (a, b) = (m.install(any()).unwrap(), m.install(any()).unwrap());
    assert!(m.has_event("any") && !m.has_event("an"));
    m.remove(a).unwrap();
    assert!(m.has_event("any"));
    m.remove(b).unwrap();
    assert!(!m.has_event("any"));
    assert_eq!(m.has_event("any"), m.triggers().any(|(_, s)| s.name == "any"));
}

#[test]
fn network_wide_events_are_refused_with_the_way_to_run_them() {
    let mut m = Monitor::new(MonitorConfig::default());
    let spike = EventSpec {
        scope: Scope::Network,
        drill_downs: Vec::new(),
        on_demand: false,
        ..event(
            "spike",
            gt(agg(AggFunc::Sum, BaseVar::Volume), 100e6),
            Granularity::FIVE_TUPLE,
            10,
        )
    };
    let err = m.install(spike.clone()).unwrap_err();
    assert_eq!(
        err,
        EngineError::NetworkWide {
            event: "spike".into()
        }
    );
    assert_eq!(
        err.to_string(),
        "event `spike` is network-wide (`across hosts`): a monitor runs host triggers; \
         give `clarion run` an inventory (--inventory) so the event manager splits it"
    );
    assert_eq!(m.triggers().count(), 0, "nothing is installed");
    // The same event as a host trigger (what the manager hands a host) installs.
    let host = EventSpec {
        scope: Scope::Host,
        drill_downs: Vec::new(),
        on_demand: false,
        ..spike
    };
    assert!(m.install(host).is_ok());
}

/// A 10 ms per-5-tuple event that never fires: only its kept values matter.
fn install_never_firing(m: &mut Monitor) -> TriggerId {
    m.install(event(
        "never",
        gt(agg(AggFunc::Sum, BaseVar::Volume), 1e12),
        Granularity::FIVE_TUPLE,
        10,
    ))
    .unwrap()
}

#[test]
fn windows_without_data_are_known_empty_once_closed() {
    let mut m = Monitor::new(polled());
    let id = install_never_firing(&mut m);
    let mut out = Vec::new();
    for ts in [T0 + MS, T0 + 31 * MS, T0 + 52 * MS] {
        m.process(&pkt(ts, 1, 1, 7), &mut out);
    }
    assert_eq!(m.window_values(id, T0).map(|w| w.groups.len()), Some(1));
    let quiet = m.window_values(id, T0 + 10 * MS).expect("closed and known");
    assert!(quiet.groups.is_empty(), "no packet: no group");
    assert_eq!(m.window_values(id, T0 + 30 * MS).map(|w| w.groups.len()), Some(1));
    assert!(m.window_values(id, T0 + 50 * MS).is_none(), "still open");
    assert!(m.window_values(id, T0 + 5 * MS).is_none(), "not a window start");
    assert!(
        m.window_values(id, T0 - 10 * MS).is_none(),
        "before the first packet: never observed, so unknown rather than empty"
    );
}

/// A kept window's values come with the monitor's packets in it (every
/// packet, of the event or not), while its epochs are logged.
#[test]
fn kept_windows_carry_the_packets_of_their_epochs() {
    let mut m = Monitor::new(polled());
    // Per source /24: kept in the trigger's history (16 windows).
    let per_src24 = Granularity {
        src_ip: Some(PrefixLens { v4: 24, v6: 64 }),
        ..Granularity::default()
    };
    let id = m
        .install(event(
            "never",
            gt(agg(AggFunc::Sum, BaseVar::Volume), 1e12),
            per_src24,
            10,
        ))
        .unwrap();
    let mut out = Vec::new();
    for ts in [T0 + MS, T0 + 2 * MS, T0 + 3 * MS, T0 + 31 * MS, T0 + 52 * MS] {
        m.process(&pkt(ts, 1, (ts / MS % 3) as u16, 7), &mut out);
    }
    let packets = |m: &Monitor, start| m.window_values(id, start).and_then(|w| w.packets);
    assert_eq!(packets(&m, T0), Some(3));
    assert_eq!(packets(&m, T0 + 10 * MS), Some(0), "known empty");
    assert_eq!(packets(&m, T0 + 30 * MS), Some(1));
    assert!(m.window_values(id, T0 + 50 * MS).is_none(), "still open");
    // Far beyond the event's interval: the log reaches back over the 16
    // kept windows.
    for i in 6..16 {
        m.process(&pkt(T0 + i * 10 * MS + MS, 1, 1, 7), &mut out);
    }
    assert_eq!(packets(&m, T0), Some(3), "{:?}", m.window_values(id, T0));
    for i in 16..40 {
        m.process(&pkt(T0 + i * 10 * MS + MS, 1, 1, 7), &mut out);
    }
    assert!(m.window_values(id, T0).is_none(), "no longer kept");
    assert_eq!(packets(&m, T0 + 30 * 10 * MS), Some(1));
}

#[test]
fn history_keeps_all_groups_of_recent_windows() {
    let cfg = MonitorConfig {
        history_windows: 2,
        ..MonitorConfig::default()
    };
    let mut m = Monitor::new(cfg);
    let id = install_never_firing(&mut m);
    let pkts: Vec<_> = (0..5).map(|i| pkt(T0 + i * 10 * MS + MS, 1, 1, 7)).collect();
    assert!(run(&mut m, &pkts).is_empty());
    assert!(
        m.window_values(id, T0).is_none(),
        "only the last two windows are kept"
    );
    let w = m.window_values(id, T0 + 40 * MS).unwrap();
    assert_eq!(w.groups.len(), 1);
    assert_eq!(w.groups[0].1, vec![7.0]);
}

#[test]
fn per_flow_values_are_kept_for_the_last_epochs_swept() {
    // `sparse` sees port 1000 only, in the first epoch; `busy` keeps
    // epochs being swept. Both are tested flow by flow.
    let cfg = MonitorConfig {
        history_windows: 2,
        ..MonitorConfig::default()
    };
    let mut m = Monitor::new(cfg);
    let mut sparse = event(
        "sparse",
        gt(agg(AggFunc::Sum, BaseVar::Volume), 1e12),
        Granularity::FIVE_TUPLE,
        10,
    );
    sparse.filters = vec![Filter {
        src_port: Some(clarion_lang::spec::PortRange { lo: 1000, hi: 1000 }),
        ..Filter::default()
    }];
    let sparse = m.install(sparse).unwrap();
    let busy = install_never_firing(&mut m);
    let mut pkts = vec![pkt(T0 + MS, 1, 1000, 7)];
    pkts.extend((0..3).map(|i| pkt(T0 + i * 10 * MS + 2 * MS, 2, 2000, 5)));
    let mut out = Vec::new();
    for p in &pkts {
        m.process(p, &mut out);
    }
    // Swept: epochs 0 and 1; epoch 2 is running.
    let w = m.window_values(sparse, T0).expect("kept");
    assert_eq!(w.groups.len(), 1);
    assert_eq!(w.groups[0].1, vec![7.0]);
    let quiet = m
        .window_values(sparse, T0 + 10 * MS)
        .expect("swept, in the last two");
    assert!(quiet.groups.is_empty());
    assert_eq!(m.window_values(busy, T0).map(|w| w.groups.len()), Some(2));
    m.finish(&mut out);
    // Epoch 2 swept too: epoch 0 is no longer among the last two, for
    // either trigger, though `sparse` had no group since.
    assert!(m.window_values(sparse, T0).is_none(), "dropped, so unknown");
    assert!(m.window_values(busy, T0).is_none());
    assert_eq!(
        m.window_values(sparse, T0 + 20 * MS).map(|w| w.groups.len()),
        Some(0)
    );
    assert_eq!(
        m.window_values(busy, T0 + 20 * MS).map(|w| w.groups.len()),
        Some(1)
    );
}

#[test]
fn full_table_counts_untracked_packets_in_completeness() {
    let cfg = MonitorConfig {
        flow_capacity: 1,
        ..MonitorConfig::default()
    };
    let mut m = Monitor::new(cfg);
    m.install(any()).unwrap();
    let out = run(
        &mut m,
        &[pkt(T0, 1, 1, 1), pkt(T0 + 1, 2, 2, 1), pkt(T0 + 2, 2, 2, 1)],
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].completeness.untracked, 2);
    assert!(!out[0].completeness.is_lossless());
    assert_eq!(m.counters().packets_untracked, 2);
}

#[test]
fn stepwise_sweep_equals_synchronous_and_lateness_is_counted() {
    let pkts: Vec<_> = (0..400u64)
        .map(|i| pkt(T0 + i * MS / 4, (i % 7) as u8, (i % 13) as u16, (i % 100) as u32))
        .collect();
    let ev = || {
        event(
            "e",
            gt(agg(AggFunc::Avg, BaseVar::Volume), 40.0),
            Granularity::FIVE_TUPLE,
            10,
        )
    };
    let mut sync = Monitor::new(MonitorConfig::default());
    sync.install(ev()).unwrap();
    let expect = run(&mut sync, &pkts);

    let mut step = Monitor::new(MonitorConfig {
        synchronous_sweep: false,
        ..MonitorConfig::default()
    });
    step.install(ev()).unwrap();
    let mut out = Vec::new();
    for p in &pkts {
        step.process(p, &mut out);
        step.sweep_step(3, &mut out);
    }
    step.finish(&mut out);
    assert_eq!(out, expect);
    assert_eq!(step.counters().sweeps_late, 0);

    let mut lazy = Monitor::new(MonitorConfig {
        synchronous_sweep: false,
        ..MonitorConfig::default()
    });
    lazy.install(ev()).unwrap();
    assert_eq!(
        run(&mut lazy, &pkts),
        expect,
        "a late sweep is finished before the next epoch's packets"
    );
    assert!(lazy.counters().sweeps_late > 0);
}

#[test]
fn rwnd_uses_the_syn_scale_until_the_flow_times_out() {
    let cfg = MonitorConfig {
        flow_timeout_ns: 1_000 * MS,
        ..MonitorConfig::default()
    };
    let mut m = Monitor::new(cfg);
    m.install(event(
        "w",
        gt(agg(AggFunc::Max, BaseVar::Rwnd), 0.0),
        Granularity::FIVE_TUPLE,
        10,
    ))
    .unwrap();
    let tcp = |ts: u64, flags: u8, wscale: Option<u8>| {
        let mut p = pkt(ts, 1, 1, 0);
        p.key.proto = 6;
        p.tcp = Some(TcpInfo {
            window: 100,
            flags,
            wscale,
            ..TcpInfo::default()
        });
        p
    };
    let out = run(
        &mut m,
        &[
            tcp(T0, tcp_flags::SYN, Some(3)),
            tcp(T0 + 10 * MS, tcp_flags::ACK, None),
            tcp(T0 + 2_000 * MS, tcp_flags::ACK, None),
        ],
    );
    let maxes: Vec<f64> = out.iter().map(|r| r.values[0].1).collect();
    assert_eq!(maxes, vec![100.0, 800.0, 100.0]);
}

fn tcp(ts: u64, from_a: bool, seq: u32, ack: u32, flags: u8, volume: u32) -> PacketRecord {
    let (a, b): (std::net::IpAddr, std::net::IpAddr) =
        ("10.0.0.1".parse().unwrap(), "10.0.1.1".parse().unwrap());
    let key = if from_a {
        FlowKey::new(a, b, 6, Some((40000, 80)), None)
    } else {
        FlowKey::new(b, a, 6, Some((80, 40000)), None)
    };
    PacketRecord {
        ts_ns: ts,
        key,
        size: volume + 40,
        volume,
        ttl: 64,
        tcp: Some(TcpInfo {
            seq,
            ack,
            flags,
            ..TcpInfo::default()
        }),
        ..PacketRecord::default()
    }
}

fn state(base: BaseVar, last_epoch: bool) -> Pred {
    Pred::State(Var { base, last_epoch })
}

/// `Monitor::memory`: TCP states are 32 bytes reserved per flow of the
/// capacity, and lists of first transmissions exist only for flows whose
/// triggers read `rtt`.
#[test]
fn memory_keeps_segment_lists_only_where_rtt_is_read() {
    use clarion_wire::tcp_flags::{ACK, SYN};
    let capacity = 1024;
    let run = |src: &str| {
        let mut m = Monitor::new(MonitorConfig {
            flow_capacity: capacity,
            ..MonitorConfig::default()
        });
        for e in clarion_lang::check(src).expect("checks") {
            m.install(e).expect("installs");
        }
        let mut out = Vec::new();
        m.process(&tcp(1_000, true, 100, 0, SYN, 0), &mut out);
        m.process(&tcp(2_000, true, 101, 0, ACK, 500), &mut out);
        m.memory()
    };
    let lost = run("event l\n when sum(is_lost) > 5\n per 5tuple\n every 10ms\n");
    let rtt = run("event r\n when max(rtt) > 1s\n per 5tuple\n every 10ms\n");
    let states = capacity * std::mem::size_of::<crate::tcp_state::TcpState>();
    assert_eq!(std::mem::size_of::<crate::tcp_state::TcpState>(), 32);
    assert_eq!(lost.tcp_states, states as u64, "{lost:?}");
    assert!(rtt.tcp_states > lost.tcp_states, "{rtt:?}");
    assert_eq!(lost.flow_entries, rtt.flow_entries);
    assert_eq!(
        lost.flow_entries,
        64 * capacity as u64,
        "one line a flow, no wide keys: {lost:?}"
    );
    assert!(lost.epoch_logs > 0 && lost.flow_slots > 0, "{lost:?}");
}

#[test]
fn tcp_state_rtt_samples_and_values_outside_aggregates() {
    use clarion_wire::tcp_flags::{ACK, SYN};
    let mut m = Monitor::new(MonitorConfig::default());
    let sum = |l: Pred, r: Pred| Pred::Arith(clarion_lang::spec::ArithOp::Add, Box::new(l), Box::new(r));
    // Always true; reads every TCP variable.
    let pred = Pred::Or(
        Box::new(gt(agg(AggFunc::Sum, BaseVar::Packets), 0.0)),
        Box::new(Pred::Cmp(
            CmpOp::Gt,
            Box::new(sum(
                sum(
                    agg(AggFunc::Max, BaseVar::Rtt),
                    agg(AggFunc::Sum, BaseVar::IsLost),
                ),
                sum(
                    agg(AggFunc::Count, BaseVar::IsBurst),
                    sum(state(BaseVar::Ack, false), state(BaseVar::Seq, false)),
                ),
            )),
            Box::new(state(BaseVar::Ack, true)),
        )),
    );
    let mut ev = event("conn", pred, Granularity::FIVE_TUPLE, 10);
    ev.filters = vec![Filter {
        src_port: Some(clarion_lang::spec::PortRange { lo: 40000, hi: 40000 }),
        ..Filter::default()
    }];
    m.install(ev).unwrap();
    let isn = 7000;
    let out = run(
        &mut m,
        &[
            tcp(T0, true, isn, 0, SYN, 0),
            tcp(T0 + 2 * MS, false, 99, isn + 1, SYN | ACK, 0),
            tcp(T0 + 3 * MS, true, isn + 1, 100, ACK, 1000),
            tcp(T0 + 3 * MS + MS / 2, true, isn + 1001, 100, ACK, 1000),
            tcp(T0 + 8 * MS, false, 100, isn + 2001, ACK, 0),
            tcp(T0 + 12 * MS, true, isn + 1, 100, ACK, 1000),
        ],
    );
    assert_eq!(out.len(), 2, "{out:?}");
    let names: Vec<&str> = out[0].values.iter().map(|(k, _)| &**k).collect();
    assert_eq!(
        names,
        [
            "sum(packets)",
            "max(rtt)",
            "sum(is_lost)",
            "count(is_burst)",
            "ack",
            "seq",
            "ack_lastepoch"
        ]
    );
    let vals = |r: &Report| r.values.iter().map(|(_, v)| *v).collect::<Vec<f64>>();
    let w0 = vals(&out[0]);
    // Samples: the handshake (2 ms) and one delayed ack for both segments,
    // measured from the later one (4.5 ms).
    assert_eq!(w0[..6], [3.0, 4.5e6, 0.0, 1.0, 1.0, 2001.0]);
    assert!(w0[6].is_nan(), "no previous window");
    // The retransmission; the ack of 8 ms shows on the flow's next packet.
    let w1 = vals(&out[1]);
    assert!(w1[1].is_nan(), "no RTT sample in the second window");
    assert_eq!(
        [w1[0], w1[2], w1[3], w1[4], w1[5], w1[6]],
        [1.0, 1.0, 0.0, 2001.0, 2001.0, 1.0]
    );
    let c = m.counters();
    assert_eq!(c.rtt_samples, 2);
}

/// A monitor forgetting flows idle for 50 ms, with one event matching every flow.
fn reclaiming_monitor() -> Monitor {
    let cfg = MonitorConfig {
        flow_timeout_ns: 50 * MS,
        ..MonitorConfig::default()
    };
    let mut m = Monitor::new(cfg);
    m.install(any()).unwrap();
    m
}

#[test]
fn idle_flows_are_reclaimed() {
    let mut m = reclaiming_monitor();
    let mut out = Vec::new();
    for i in 0..50u8 {
        m.process(&pkt(T0 + u64::from(i) * 1000, i, 1, 1), &mut out);
    }
    assert_eq!(m.counters().flows_active, 50);
    for i in 0..20u64 {
        m.process(&pkt(T0 + 200 * MS + i * 10 * MS, 200, 1, 1), &mut out);
    }
    assert_eq!(m.counters().flows_active, 1);
    assert_eq!(m.counters().flows_evicted, 50);
}

/// A flow busy past the timeout is queued again, not freed; once idle it
/// goes too, and a new flow in a freed entry stays.
#[test]
fn busy_flows_stay_and_reused_entries_keep_their_flow() {
    let mut m = reclaiming_monitor();
    let mut out = Vec::new();
    for i in 0..10u8 {
        m.process(&pkt(T0 + u64::from(i), i, 1, 1), &mut out);
    }
    // Flow 0 every 10 ms for 300 ms: the others go idle and are freed.
    for k in 1..=30u64 {
        m.process(&pkt(T0 + k * 10 * MS, 0, 1, 1), &mut out);
    }
    assert_eq!(m.counters().flows_active, 1);
    assert_eq!(m.counters().flows_evicted, 9);
    // A new flow takes a freed entry; flow 0 stops.
    m.process(&pkt(T0 + 301 * MS, 100, 1, 1), &mut out);
    for k in 0..4u64 {
        m.process(&pkt(T0 + 310 * MS + k * 10 * MS, 100, 1, 1), &mut out);
    }
    assert_eq!(
        m.counters().flows_active,
        2,
        "flow 100 alive, flow 0 not yet idle long enough"
    );
    for k in 0..10u64 {
        m.process(&pkt(T0 + 360 * MS + k * 10 * MS, 100, 1, 1), &mut out);
    }
    assert_eq!(m.counters().flows_active, 1, "flow 0 freed, flow 100 kept");
    assert!(m.is_tracked(&pkt(0, 100, 1, 1).key));
    assert_eq!(m.counters().flows_evicted, 10);
}

/// A table larger than one reclaim scan: the hand goes round it within a
/// quarter of the timeout, so every idle flow goes within 1.25 timeouts,
/// none before its timeout.
#[test]
fn idle_flows_of_a_large_table_go_within_a_quarter_timeout_more() {
    let mut m = reclaiming_monitor(); // 50 ms timeout, 10 ms epochs: 5 sweeps a turn
    let mut out = Vec::new();
    let flows = 30_000u64; // paced: a fifth of them a 10 ms sweep
    for f in 0..flows {
        let mut p = pkt(T0 + f, 1, 1, 1);
        p.key.src_port = f as u16;
        m.process(&p, &mut out);
    }
    assert_eq!(m.counters().flows_active, flows);
    // One flow keeps the clock going; the others are idle from T0 + 30 µs.
    let mut t = T0 + MS;
    while t <= T0 + 50 * MS {
        m.process(&pkt(t, 200, 1, 1), &mut out);
        assert_eq!(m.counters().flows_evicted, 0, "none idle past 50 ms at {t}");
        t += MS;
    }
    while t <= T0 + 50 * MS + 50 * MS / 4 + 10 * MS {
        m.process(&pkt(t, 200, 1, 1), &mut out);
        t += MS;
    }
    assert_eq!(
        m.counters().flows_evicted,
        flows,
        "all gone within 1.25 timeouts and a sweep"
    );
    assert_eq!(m.counters().flows_active, 1);
}

/// The reclaim's hand moves with packet time, not with sweeps: at a 60 s
/// timeout (a turn in 15 s), a sweep 10 ms after the last reads 1/1,500
/// of the entries, and one after a quiet second 1/15 of them (paced by
/// sweeps, each read 4,096, which on a sparse capture was a third of
/// the sweeps' work); under load, one more per packet since the last
/// reclaim, up to 4,096.
#[test]
fn the_reclaim_reads_entries_in_proportion_to_packet_time() {
    let mut m = Monitor::new(MonitorConfig {
        flow_timeout_ns: 60_000 * MS,
        ..MonitorConfig::default()
    });
    m.install(any()).unwrap();
    let mut out = Vec::new();
    let flows = 30_000u64;
    for f in 0..flows {
        let mut p = pkt(T0 + f, 1, 1, 1);
        p.key.src_port = f as u16;
        m.process(&p, &mut out);
    }
    // The first sweep has no reclaim before it: a whole turn.
    m.process(&pkt(T0 + 10 * MS, 2, 1, 1), &mut out);
    let start = m.reclaim_hand;
    m.process(&pkt(T0 + 20 * MS, 2, 1, 1), &mut out);
    let used = m.flows.entries.len() as u64;
    let moved = |from: usize, to: usize| ((to + used as usize - from) % used as usize) as u64;
    assert_eq!(
        moved(start, m.reclaim_hand),
        used.div_ceil(1_500),
        "10 ms of 15 s"
    );
    let before = m.reclaim_hand;
    m.process(&pkt(T0 + 1_020 * MS, 2, 1, 1), &mut out);
    assert_eq!(moved(before, m.reclaim_hand), used.div_ceil(15), "1 s of 15 s");
    let before = m.reclaim_hand;
    for k in 0..10_000u64 {
        m.process(&pkt(T0 + 1_021 * MS + k, 2, 1, 1), &mut out);
    }
    m.process(&pkt(T0 + 1_030 * MS, 2, 1, 1), &mut out);
    assert_eq!(moved(before, m.reclaim_hand), 4096, "under load");
    assert_eq!(m.counters().flows_evicted, 0);
}

/// The sweep's report and firing vectors keep the room a burst of reports
/// took only while later sweeps come near it.
#[test]
fn a_burst_of_reports_memory_is_given_back_after_quiet_sweeps() {
    let mut m = reclaiming_monitor(); // a report a flow and 10 ms window
    let mut out = Vec::new();
    for f in 0..5_000u64 {
        let mut p = pkt(T0 + f, 1, 1, 1);
        p.key.src_port = f as u16;
        m.process(&p, &mut out);
    }
    m.process(&pkt(T0 + 10 * MS, 1, 1, 1), &mut out);
    m.process(&pkt(T0 + 20 * MS, 1, 1, 1), &mut out);
    assert!(out.len() >= 5_000, "{}", out.len());
    let burst = m.memory().sweep_reports;
    // A firing each (`firings.rs`: its trigger, group and value).
    assert!(burst >= 5_000 * 64, "{burst}");
    for k in 3..40u64 {
        m.process(&pkt(T0 + k * 10 * MS, 1, 1, 1), &mut out);
    }
    let quiet = m.memory().sweep_reports;
    assert!(quiet * 20 < burst, "{quiet} of {burst}");
}

#[test]
fn a_window_the_input_started_inside_is_incomplete() {
    let mut m = Monitor::new(MonitorConfig::default());
    m.install(any()).unwrap();
    let out = run(
        &mut m,
        &[
            pkt(T0 + MS, 1, 1, 1),
            pkt(T0 + 11 * MS, 1, 1, 1),
            pkt(T0 + 25 * MS, 1, 1, 1),
        ],
    );
    let complete: Vec<bool> = out.iter().map(|r| r.completeness.complete).collect();
    assert_eq!(complete, vec![false, true, false]);
}

/// Issue 4, item 6: a SYN-style flood (one 28-byte packet per new flow)
/// with a sweep budget too small for it. The monitor finds its sweeps
/// unfinished, raises the DoS threshold by itself until they finish again;
/// from then on attack flows are no longer inserted, while a good flow
/// started later, above the threshold, is still monitored and reported.
#[test]
fn dos_threshold_rises_by_itself_when_sweeps_do_not_finish() {
    let mut m = Monitor::new(MonitorConfig {
        synchronous_sweep: false,
        dos_auto_raise: true,
        flow_timeout_ns: 5 * MS,
        ..MonitorConfig::default()
    });
    m.install(event(
        "heavy",
        gt(agg(AggFunc::Sum, BaseVar::Volume), 1000.0),
        Granularity::FIVE_TUPLE,
        10,
    ))
    .unwrap();
    assert_eq!(m.dos_threshold(), 0);
    const EPOCHS: u64 = 24;
    const LATE_FROM: u64 = 14; // good flow B starts here
    const PER_EPOCH: u64 = 1_100; // 1,000 attack packets, 100 of flow A (and B)
    let mut out = Vec::new();
    let mut attack = 0u32;
    let mut threshold_at = Vec::new();
    let mut created_at = Vec::new();
    for epoch in 0..EPOCHS {
        threshold_at.push(m.dos_threshold());
        created_at.push(m.counters().flows_created);
        for i in 0..PER_EPOCH {
            let ts = T0 + epoch * 10 * MS + i * (10 * MS / PER_EPOCH);
            let p = if i % 11 == 0 {
                pkt(ts, 1, 1, 100) // good flow A: 100 packets of 128 B per epoch
            } else if i % 11 == 5 && epoch >= LATE_FROM {
                pkt(ts, 2, 2, 1400) // good flow B: 100 packets of 1,428 B per epoch
            } else {
                attack += 1;
                pkt(ts, 100 + (attack >> 16) as u8, attack as u16, 0)
            };
            m.process(&p, &mut out);
            // The caller's sweep budget: 880 flow visits per epoch, fewer
            // than the attack's 1,000 new flows an epoch.
            if i % 10 == 0 {
                m.sweep_step(8, &mut out);
            }
        }
    }
    m.finish(&mut out);
    let c = m.counters();
    assert!(c.sweeps_late > 0, "{c:?}");
    assert!(c.dos_threshold_raises > 0, "{c:?}");
    assert_eq!(
        c.dos_threshold_raises as usize,
        threshold_at.windows(2).filter(|w| w[1] != w[0]).count()
    );
    let t = m.dos_threshold();
    assert!(t >= crate::DOS_FLOOR_THRESHOLD, "threshold {t}");
    // The threshold settled before flow B started, and the sweeps caught up.
    assert_eq!(threshold_at[LATE_FROM as usize], t, "{threshold_at:?}");
    // Attack flows stopped being inserted: in the last epochs only B was new.
    let after = created_at[EPOCHS as usize - 1] - created_at[LATE_FROM as usize];
    assert_eq!(after, 1, "flows created since B started: {created_at:?}");
    assert!(c.packets_dos_filtered > 0);
    // B sends more than the threshold each epoch: it is tracked and reported in every full window.
    assert!(u64::from(t) < 100 * 1428, "threshold {t}");
    let b = FlowKey::new(
        "10.0.0.2".parse().unwrap(),
        "10.0.1.1".parse().unwrap(),
        17,
        Some((2, 53)),
        None,
    );
    assert!(m.is_tracked(&b));
    let b_reports: Vec<&Report> = out.iter().filter(|r| r.group.src_port == Some(Some(2))).collect();
    assert_eq!(b_reports.len() as u64, EPOCHS - LATE_FROM, "{b_reports:?}");
    // Windows in which attack packets were filtered say so.
    assert!(out.iter().any(|r| r.completeness.untracked > 0));
}

#[test]
fn lists_hold_the_flows_written_since_the_last_sweep_and_a_removal_moves_each_once() {
    let never = || gt(agg(AggFunc::Sum, BaseVar::Packets), 1e9);
    let mut m = Monitor::new(polled());
    // A sees flows F and H; C sees F, G and H. F and H share the set {A, C}, G is in {C}.
    let mut a = event("a", never(), Granularity::FIVE_TUPLE, 10);
    a.filters = vec![Filter {
        src_port: Some(clarion_lang::spec::PortRange { lo: 1000, hi: 1000 }),
        ..Filter::default()
    }];
    let a = m.install(a).unwrap();
    let c = m
        .install(event("c", never(), Granularity::FIVE_TUPLE, 10))
        .unwrap();
    let f = |ts| pkt(ts, 1, 1000, 10);
    let g = |ts| pkt(ts, 2, 2000, 10);
    let h = |ts| pkt(ts, 3, 1000, 10);
    // F once, then only G and H, for three epochs.
    let mut quiet_f = vec![f(T0 + MS)];
    for ms in [1, 11, 21, 31] {
        quiet_f.extend([g(T0 + ms * MS), h(T0 + ms * MS)]);
    }
    let mut out = Vec::new();
    for p in &quiet_f {
        m.process(p, &mut out);
    }
    // Swept epoch 2: the lists hold epoch 3's flows, G and H, not F, idle
    // since epoch 0 (A reads H's set, C both sets).
    assert_eq!(m.trigger_flows(c), Some(2));
    assert_eq!(m.trigger_flows(a), Some(1));
    // Removing A moves F and H to the set {C}: H with epoch 3's statistics
    // (listed there for it), F with none; F's next packet lists it.
    m.remove(a).unwrap();
    for p in [f(T0 + 32 * MS), g(T0 + 32 * MS), h(T0 + 32 * MS), g(T0 + 41 * MS)] {
        m.process(&p, &mut out);
    }
    let w = m.window_values(c, T0 + 30 * MS).expect("closed and kept");
    assert_eq!(w.groups.len(), 3, "F, G and H: {w:?}");
    let packets: Vec<f64> = w.groups.iter().map(|(_, v)| v[0]).collect();
    assert_eq!(packets, [1.0, 2.0, 2.0], "each flow's packets once: {w:?}");
}

#[test]
fn per_5tuple_joins_the_same_5tuple_on_two_vlans() {
    // Tested flow by flow while no packet had a VLAN tag; once one has,
    // `per 5tuple` must merge the two VLANs' flows into one group.
    let mut m = big_flows_monitor();
    let on_vlan = |ts, vlan| {
        let mut p = pkt(ts, 1, 1000, 100);
        p.key = FlowKey::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.1.1".parse().unwrap(),
            17,
            Some((1000, 53)),
            vlan,
        );
        p
    };
    let out = run(
        &mut m,
        &[
            on_vlan(T0, None),
            on_vlan(T0 + 12 * MS, Some(10)),
            on_vlan(T0 + 13 * MS, Some(20)),
        ],
    );
    let windows: Vec<_> = out.iter().map(|r| (r.window.start_ns - T0) / MS).collect();
    assert_eq!(windows, [10], "one group of 200 B in the second window: {out:?}");
    assert_eq!(out[0].values[0].1, 200.0);
}

#[test]
fn a_window_gathered_flow_by_flow_is_not_shown_before_the_sweep_ends() {
    let mut m = Monitor::new(MonitorConfig {
        synchronous_sweep: false,
        ..polled()
    });
    let id = install_never_firing(&mut m);
    let mut out = Vec::new();
    for p in [
        pkt(T0, 1, 1, 7),
        pkt(T0 + MS, 2, 1, 7),
        pkt(T0 + 11 * MS, 1, 1, 7),
    ] {
        m.process(&p, &mut out);
    }
    assert!(m.sweep_pending());
    assert!(!m.sweep_step(1, &mut out), "one flow per step: not done");
    assert!(m.window_values(id, T0).is_none(), "half gathered");
    while !m.sweep_step(1, &mut out) {}
    assert_eq!(m.window_values(id, T0).map(|w| w.groups.len()), Some(2));
}

#[test]
fn ticks_end_quiet_epochs_on_time_and_drops_reach_completeness() {
    let mut m = big_flows_monitor();
    let mut out = Vec::new();
    m.tick(T0, &mut out);
    m.process(&pkt(T0 + MS, 1, 1000, 200), &mut out);
    m.note_dropped(3);
    // Nothing more arrives: the clock alone ends the epoch.
    m.tick(T0 + 9 * MS, &mut out);
    assert!(out.is_empty() && !m.sweep_pending());
    m.tick(T0 + 10 * MS, &mut out);
    m.sweep_step(usize::MAX, &mut out);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].window.start_ns, T0);
    assert_eq!(out[0].completeness.dropped, 3);
    assert!(
        out[0].completeness.complete,
        "the first tick started observation at the window's start"
    );
    assert_eq!(m.counters().dropped, 3);
    // A tick never moves the clock back.
    m.tick(T0, &mut out);
    assert_eq!(m.now_ns(), T0 + 10 * MS);
}

/// A flow idle long enough to have left its triggers' lists still leaves
/// a removed trigger's set: it keeps no connection state for it, so a TCP
/// event installed later starts the flow's state afresh, as it does with
/// every optimization off.
#[test]
fn a_removed_trigger_releases_its_idle_flows_too() {
    use clarion_wire::tcp_flags::ACK;
    let lost = event(
        "lost",
        gt(agg(AggFunc::Sum, BaseVar::IsLost), -1.0),
        Granularity::FIVE_TUPLE,
        10,
    );
    let seq = event(
        "seq",
        Pred::Cmp(
            CmpOp::Ge,
            Box::new(state(BaseVar::Seq, false)),
            Box::new(Pred::Num(0.0)),
        ),
        Granularity::FIVE_TUPLE,
        10,
    );
    for tuning in [Tuning::ALL, Tuning::NONE] {
        let mut m = Monitor::new(MonitorConfig {
            tuning,
            ..MonitorConfig::default()
        });
        let id = m.install(lost.clone()).unwrap();
        let mut out = Vec::new();
        // The client sends 100 bytes, then idles while the server's acks keep the trigger swept.
        m.process(&tcp(T0 + MS, true, 1000, 0, ACK, 100), &mut out);
        for t in [11, 21, 31] {
            m.process(&tcp(T0 + t * MS, false, 5000, 1100, ACK, 0), &mut out);
        }
        m.remove(id).unwrap();
        m.install(seq.clone()).unwrap();
        m.process(&tcp(T0 + 45 * MS, true, 1100, 0, ACK, 100), &mut out);
        m.process(&tcp(T0 + 55 * MS, false, 5000, 1200, ACK, 0), &mut out);
        m.finish(&mut out);
        let client: Vec<_> = out
            .iter()
            .filter(|r| &*r.event == "seq" && r.group.src_port == Some(Some(40000)))
            .map(|r| (r.window.start_ns, r.values.to_vec()))
            .collect();
        // A fresh state from the first packet after `seq` was installed: 100 bytes sent.
        assert_eq!(
            client,
            [(T0 + 40 * MS, vec![("seq".into(), 100.0)])],
            "{tuning:?}"
        );
    }
}

/// Installs and removals between the steps of a sweep move flows between
/// match sets while their sets are being gathered: every flow's statistics
/// must still be gathered once, as when the sweep had finished first.
#[test]
fn installs_and_removals_between_sweep_steps_gather_every_flow_once() {
    let per_src = Granularity {
        src_ip: Some(PrefixLens { v4: 32, v6: 128 }),
        ..Granularity::default()
    };
    let events = [
        event(
            "a",
            gt(agg(AggFunc::Sum, BaseVar::Volume), 0.0),
            Granularity::FIVE_TUPLE,
            10,
        ),
        event("b", gt(agg(AggFunc::Sum, BaseVar::Packets), 0.0), per_src, 10),
        event(
            "c",
            gt(agg(AggFunc::Max, BaseVar::Volume), 5.0),
            Granularity::FIVE_TUPLE,
            20,
        ),
    ];
    let mut late = event(
        "late",
        gt(agg(AggFunc::Count, BaseVar::Packets), 0.0),
        Granularity::FIVE_TUPLE,
        10,
    );
    late.filters = vec![Filter {
        src_port: Some(clarion_lang::spec::PortRange { lo: 1, hi: 3 }),
        ..Filter::default()
    }];
    let pkts: Vec<_> = (0..600u64)
        .map(|i| pkt(T0 + i * MS / 8, (i % 5) as u8, (i % 7) as u16, (i % 50) as u32))
        .collect();
    // At these packets, install `late`, then remove it (and `b`).
    let (install_at, remove_at) = (170, 420);
    let drive = |stepwise: bool| {
        let mut m = Monitor::new(MonitorConfig {
            synchronous_sweep: !stepwise,
            ..MonitorConfig::default()
        });
        let ids: Vec<_> = events.iter().map(|e| m.install(e.clone()).unwrap()).collect();
        let mut late_id = None;
        let mut out = Vec::new();
        let mut mid_sweep = 0;
        for (i, p) in pkts.iter().enumerate() {
            m.process(p, &mut out);
            if stepwise {
                m.sweep_step(1, &mut out);
            }
            if i == install_at || i == remove_at {
                mid_sweep += usize::from(m.sweep_pending());
            }
            if i == install_at {
                late_id = Some(m.install(late.clone()).unwrap());
            }
            if i == remove_at {
                m.remove(late_id.unwrap()).unwrap();
                m.remove(ids[1]).unwrap();
            }
        }
        m.finish(&mut out);
        let values: Vec<_> = (0..6u64)
            .map(|w| {
                (
                    m.window_values(ids[0], T0 + w * 10 * MS),
                    m.window_values(late_id.unwrap(), T0 + w * 10 * MS),
                )
            })
            .collect();
        (out, values, mid_sweep)
    };
    // A trigger removed during a sweep loses the window being swept (as
    // documented for `remove`), unlike one removed after it: compare the
    // removed triggers' reports up to that window only.
    let comparable = |(out, values, mid): (Vec<Report>, _, usize)| {
        let keep = |r: &Report| &*r.event == "a" || &*r.event == "c" || r.window.end_ns <= T0 + 40 * MS;
        (out.into_iter().filter(keep).collect::<Vec<_>>(), values, mid)
    };
    let (expect, expect_values, _) = comparable(drive(false));
    let (got, got_values, mid_sweep) = comparable(drive(true));
    assert_eq!(mid_sweep, 2, "both changes land between sweep steps");
    assert!(expect.iter().any(|r| &*r.event == "late"));
    let first_difference = got.iter().zip(&expect).position(|(g, e)| g != e);
    assert_eq!(
        (got.len(), first_difference),
        (expect.len(), None),
        "first difference: {:?}",
        first_difference.map(|i| (&got[i], &expect[i]))
    );
    assert_eq!(got_values, expect_values);
}

/// Issue 18: a live interface down for a while. The driver notes the
/// outage as it goes on (and ticks the clock); the windows it overlaps are
/// incomplete even though they counted packets, the others are not.
#[test]
fn windows_overlapping_a_blind_span_are_incomplete() {
    let mut m = Monitor::new(MonitorConfig {
        synchronous_sweep: false,
        ..MonitorConfig::default()
    });
    m.install(any()).unwrap();
    let mut out = Vec::new();
    let step = |m: &mut Monitor, out: &mut Vec<Report>| while !m.sweep_step(usize::MAX, out) {};
    m.tick(T0, &mut out);
    for ms in [1, 11, 21] {
        m.process(&pkt(T0 + ms * MS, 1, 1, 1), &mut out);
        step(&mut m, &mut out);
    }
    // Down at 23 ms; noted at each tick while it lasts, then up at 35 ms.
    for now in [25, 30, 33] {
        m.note_blind(T0 + 23 * MS, T0 + now * MS);
        m.tick(T0 + now * MS, &mut out);
        step(&mut m, &mut out);
    }
    m.note_blind(T0 + 23 * MS, T0 + 35 * MS);
    assert_eq!(m.blind_ns(T0 + 20 * MS, T0 + 30 * MS), 7 * MS);
    for ms in [36, 41, 51] {
        m.process(&pkt(T0 + ms * MS, 1, 1, 1), &mut out);
        step(&mut m, &mut out);
    }
    m.tick(T0 + 60 * MS, &mut out);
    step(&mut m, &mut out);
    let complete: Vec<(u64, bool)> = out
        .iter()
        .map(|r| ((r.window.start_ns - T0) / MS, r.completeness.complete))
        .collect();
    assert_eq!(
        complete,
        [
            (0, true),
            (10, true),
            (20, false),
            (30, false),
            (40, true),
            (50, true)
        ]
    );
    assert_eq!(
        m.blind_ns(T0, T0 + 60 * MS),
        0,
        "forgotten once no open window reaches it"
    );
}

#[test]
fn epochs_not_seen_in_full_are_kept_for_the_health_stream_even_when_nothing_fires() {
    let mut m = Monitor::new(MonitorConfig {
        keep_health: true,
        ..MonitorConfig::default()
    });
    // An event that never fires: health does not depend on reports.
    install_never_firing(&mut m);
    let mut out = Vec::new();
    // Started inside [0, 10) ms; a malformed frame in [20, 30); [10, 20) and [30, 40) clean.
    for (ts, malformed) in [
        (1, false),
        (11, false),
        (21, false),
        (22, true),
        (31, false),
        (41, false),
    ] {
        if malformed {
            m.note_unparsed(T0 + ts * MS, crate::Unparsed::Malformed, &mut out);
        } else {
            m.process(&pkt(T0 + ts * MS, 1, 1, 1), &mut out);
        }
    }
    m.finish(&mut out);
    assert!(out.is_empty(), "nothing fired");
    let mut health = Vec::new();
    m.take_health(&mut health);
    let starts: Vec<(u64, u64, bool)> = health
        .iter()
        .map(|h| {
            (
                (h.window.start_ns - T0) / MS,
                h.completeness.malformed,
                h.completeness.complete,
            )
        })
        .collect();
    // The first (input started inside), the malformed one, the last (input ended inside).
    assert_eq!(starts, vec![(0, 0, false), (20, 1, true), (40, 0, false)]);
    m.take_health(&mut health);
    assert_eq!(health.len(), 3, "taken once");

    // Off by default: nothing kept.
    let mut quiet = Monitor::new(MonitorConfig::default());
    install_never_firing(&mut quiet);
    quiet.note_unparsed(T0, crate::Unparsed::Malformed, &mut out);
    quiet.finish(&mut out);
    quiet.take_health(&mut health);
    assert_eq!(health.len(), 3);
}

/// A monitor in degraded mode with `adapt`, running the events of `src`.
fn degraded(src: &str, adapt: crate::config::AdaptConfig) -> Monitor {
    let mut m = Monitor::new(MonitorConfig {
        adapt: Some(adapt),
        ..MonitorConfig::default()
    });
    for e in clarion_lang::check(src).expect("checks") {
        m.install(e).expect("installs");
    }
    m
}

/// Degraded mode's chains: interned lazily, each depth's set keeps the
/// triggers its full set's shed order leaves, and its cost is the one the
/// routine was told (`chain_costs`); the default state exists at once.
#[test]
fn shed_chains_match_their_predicted_costs() {
    let src = "event a\n filter proto = tcp\n when sum(volume) > 1\n per 5tuple\n every 10ms\n priority 90\n\
               event b\n filter proto = tcp\n when stddev(size) > 1\n per src_ip\n every 10ms\n priority 10\n\
               event c\n filter proto = tcp\n when sum(is_lost) > 0\n per 5tuple\n every 10ms\n priority 50\n";
    let mut m = degraded(src, crate::config::AdaptConfig::default());
    let mut out = Vec::new();
    let t0 = 1_000_000_000_000u64;
    let packet = |f: u16, t: u64| PacketRecord {
        ts_ns: t,
        key: FlowKey::new(
            "10.0.0.1".parse().expect("ip"),
            "10.0.0.2".parse().expect("ip"),
            6,
            Some((f, 80)),
            None,
        ),
        size: 100,
        volume: 60,
        tcp: Some(TcpInfo {
            seq: 1,
            ack: 0,
            window: 100,
            flags: clarion_wire::tcp_flags::ACK,
            wscale: None,
            mss: None,
        }),
        ..PacketRecord::default()
    };
    m.process(&packet(1, t0), &mut out);
    let full = m.flows.entries[m.last_entry as usize].set;
    let f = &m.sets[full as usize];
    // Shed order: b (priority 10), c (50), a (90).
    assert_eq!(f.shed_order, vec![1, 2, 0]);
    assert_eq!(f.chain[0], full);
    assert!(f.chain[1..3].iter().all(|&c| c == crate::match_set::UNINTERNED));
    assert_ne!(
        f.chain[3],
        crate::match_set::UNINTERNED,
        "the default state is interned at once"
    );
    // Every depth, each taken by a flow of its own in its own epoch.
    for depth in 0..4u32 {
        m.set_shed(crate::Shed {
            steps: depth,
            extra: 0.0,
        });
        let t = t0 + 10_000_000 * u64::from(depth + 1);
        m.process(&packet(2 + depth as u16, t), &mut out);
        m.process(&packet(1, t + 1), &mut out);
        let here = m.flows.entries[m.last_entry as usize].set;
        let f = &m.sets[full as usize];
        assert_eq!(f.chain[depth as usize], here, "depth {depth}");
        let set = &m.sets[here as usize];
        let mut kept = f.shed_order[depth as usize..].to_vec();
        kept.sort_unstable();
        let mut dropped = f.shed_order[..depth as usize].to_vec();
        dropped.sort_unstable();
        assert_eq!((&set.triggers, &set.dropped, set.full), (&kept, &dropped, full));
        assert!(
            (set.cost_ns - f.chain_costs[depth as usize]).abs() < 1e-9,
            "depth {depth}: {} against {}",
            set.cost_ns,
            f.chain_costs[depth as usize]
        );
        assert_eq!(set.needs_tcp, kept.contains(&2));
    }
}

/// Degraded mode below the lightest states: when even they do not fit,
/// `adapt_to` bypasses the share of flows that brings the predicted time
/// to the time available (Eq. 4 at the deepest shedding, against the
/// bypass cost): at once for the flows not measured in the epoch yet,
/// for all of them from the next; bypassed packets are counted, priced
/// at `bypass_ns`, and the share is given back half the way.
/// A 100-byte UDP packet at `t` of flow `f` (source port `f` to port 53):
/// the degraded-mode tests' flows.
fn dns_packet(f: u16, t: u64) -> PacketRecord {
    PacketRecord {
        ts_ns: t,
        key: FlowKey::new(
            "10.0.0.1".parse().expect("ip"),
            "10.0.0.2".parse().expect("ip"),
            17,
            Some((f, 53)),
            None,
        ),
        size: 100,
        volume: 92,
        ..PacketRecord::default()
    }
}

/// An epoch whose every packet began a flow (a handful of packets, as at
/// light load): Eq. 4 does not depend on the shedding then, so a budget a
/// new flow's packet fits sheds nothing, and one it does not fit bypasses.
#[test]
fn adapt_to_sheds_nothing_when_every_packet_began_a_flow_and_fits() {
    let src = "event a\n when sum(volume) > 1000000\n per 5tuple\n every 10ms\n";
    let mut m = degraded(src, crate::config::AdaptConfig::default());
    let mut out = Vec::new();
    let t0 = 1_000_000_000_000u64;
    let packet = dns_packet;
    m.process(&packet(1, t0), &mut out);
    m.process(&packet(2, t0 + 1_000), &mut out);
    m.process(&packet(3, t0 + 10_000_000), &mut out);
    m.sweep_step(usize::MAX, &mut out);
    let load = m.epoch_load().expect("a load");
    assert_eq!((load.packets, load.new_flows), (2, 2));
    let costs = crate::config::StateCosts::default();
    let roomy = m.adapt_to(5_000_000.0).expect("a decision");
    assert_eq!((roomy.shed.depth(), roomy.bypass), (0.0, 0.0), "{roomy:?}");
    let short = m.adapt_to(0.5 * costs.insert_ns).expect("a decision");
    assert!(short.bypass > 0.0, "{short:?}");
}

#[test]
fn adapt_to_bypasses_flows_when_the_lightest_states_do_not_fit() {
    let src = "event a\n when sum(volume) > 1000000\n per 5tuple\n every 10ms\n";
    let mut m = degraded(
        src,
        crate::config::AdaptConfig {
            accuracy_threshold: None,
            ..crate::config::AdaptConfig::default()
        },
    );
    let mut out = Vec::new();
    let t0 = 1_000_000_000_000u64;
    let packet = dns_packet;
    // Epoch 0: 1,000 flows, 4 packets each; a packet of epoch 1 sweeps it.
    let flows = 1000u16;
    let epoch = |m: &mut Monitor, out: &mut Vec<Report>, k: u64| {
        for i in 0..4u64 {
            for f in 0..flows {
                m.process(&packet(f, t0 + k * 10_000_000 + i * 1000 + u64::from(f)), out);
            }
        }
    };
    epoch(&mut m, &mut out, 0);
    m.process(&packet(0, t0 + 10_000_000), &mut out);
    m.sweep_step(usize::MAX, &mut out);
    let roomy = m.adapt_to(1e6).expect("a decision");
    assert_eq!((roomy.saturated, roomy.bypass), (false, 0.0));
    let costs = crate::config::StateCosts::default();
    let tight = m.adapt_to(30.0).expect("a decision");
    assert!(tight.saturated, "{tight:?}");
    let load = m.epoch_load().expect("a load");
    let new_ratio = load.new_flows as f64 / load.packets as f64;
    let lightest = (1.0 - new_ratio) * (costs.lookup_ns + tight.predicted_ns) + new_ratio * costs.insert_ns;
    let want = (lightest - 0.9 * 30.0) / (lightest - costs.bypass_ns);
    assert!(
        (tight.bypass - want).abs() < 1e-9,
        "{} against {want}",
        tight.bypass
    );
    assert!(
        tight.bypass > 0.2 && tight.bypass < crate::MAX_BYPASS,
        "{tight:?}"
    );
    // Raised at once, in epoch 1, for the flows it has not measured yet:
    // flow 0's packet came before the decision.
    assert_eq!(m.bypass(), tight.bypass);
    assert_eq!(m.counters().packets_bypassed, 0);
    let taken: Vec<u16> = (0..flows).filter(|&f| m.bypasses(&packet(f, 0).key)).collect();
    let share = taken.len() as f64 / f64::from(flows);
    assert!((share - tight.bypass).abs() < 0.05, "{share} of flows bypassed");
    epoch(&mut m, &mut out, 1);
    let in_epoch_1 = 4 * taken.iter().filter(|&&f| f != 0).count() as u64;
    assert_eq!(m.counters().packets_bypassed, in_epoch_1);
    // From epoch 2, every one of them, flow 0 included.
    m.process(&packet(1, t0 + 20_000_000), &mut out);
    epoch(&mut m, &mut out, 2);
    let first = u64::from(taken.contains(&1));
    assert_eq!(
        m.counters().packets_bypassed,
        in_epoch_1 + first + 4 * taken.len() as u64
    );
    let f = (0..flows)
        .find(|&f| m.bypasses(&packet(f, 0).key))
        .expect("a bypassed flow");
    m.process(&packet(f, t0 + 29_000_000), &mut out);
    assert_eq!(m.last_packet_cost_ns(), costs.bypass_ns);
    // Room again: half the way back, then all of it.
    m.process(&packet(0, t0 + 30_000_000), &mut out);
    m.sweep_step(usize::MAX, &mut out);
    let back = m.adapt_to(1e6).expect("a decision");
    assert!((back.bypass - tight.bypass / 2.0).abs() < 1e-9, "{back:?}");
    let mut last = back.bypass;
    for _ in 0..10 {
        last = m.adapt_to(1e6).expect("a decision").bypass;
    }
    assert_eq!(last, 0.0);
}

/// Relief within an epoch (`bypass.rs`, `Monitor::relieve`): before any
/// sweep (no load known, so `adapt_to` cannot decide), a driver falling
/// behind raises the bypassed share at once, for the flows the epoch has
/// not measured; flows measured before it keep being measured; the share
/// carries into the next epoch and a relief never lowers it.
#[test]
fn relieve_bypasses_unmeasured_flows_at_once_in_the_first_epoch() {
    let src = "event a\n when sum(volume) > 1000000\n per 5tuple\n every 10ms\n";
    let mut m = degraded(src, crate::config::AdaptConfig::default());
    let mut out = Vec::new();
    let t0 = 1_000_000_000_000u64;
    let packet = dns_packet;
    for f in 0..500u16 {
        m.process(&packet(f, t0 + u64::from(f)), &mut out);
    }
    assert!(m.adapt_to(100.0).is_none(), "nothing swept yet");
    let costs = crate::config::StateCosts::default();
    // Serving at 250 ns, 100 available: 150 of 242 ns above T_bypass.
    let share = m.relieve(250.0, 100.0).expect("degraded mode");
    let want = 150.0 / (250.0 - costs.bypass_ns);
    assert!((share - want).abs() < 1e-9, "{share} against {want}");
    assert_eq!(m.bypass(), share);
    // Flows 0..500 were measured: their packets still are; of 500 new
    // ones, about `share` are bypassed.
    for f in 0..500u16 {
        m.process(&packet(f, t0 + 1_000 + u64::from(f)), &mut out);
    }
    assert_eq!(m.counters().packets_bypassed, 0);
    for f in 500..1000u16 {
        m.process(&packet(f, t0 + 2_000 + u64::from(f)), &mut out);
    }
    let bypassed = m.counters().packets_bypassed as f64 / 500.0;
    assert!(
        (bypassed - share).abs() < 0.08,
        "{bypassed} of new flows bypassed"
    );
    // Asked again with the packets it serves now (some bypassed): more.
    let more = m.relieve(150.0, 100.0).expect("degraded mode");
    assert!(more > share, "{more} after {share}");
    // Never less, and nothing for figures that are not numbers.
    assert_eq!(m.relieve(50.0, 100.0), Some(more));
    assert_eq!(m.relieve(f64::NAN, 100.0), None);
    assert_eq!(m.bypass(), more);
    // The next epoch starts with it: flow 0 is bypassed there if taken.
    m.process(&packet(0, t0 + 10_000_000), &mut out);
    m.sweep_step(usize::MAX, &mut out);
    assert_eq!(m.bypass(), more);
    // Normal mode: nothing to relieve.
    let mut normal = Monitor::new(MonitorConfig::default());
    assert_eq!(normal.relieve(250.0, 100.0), None);
}

/// Degraded mode with drops, events tested flow by flow (a count through
/// the general test, a sum through the fast one): the recall estimate is
/// the reports over the flows that fire as seen or with their sums and
/// counts scaled by 1 / s, each weighed by the chance that it was seen at
/// all (`clarion_adapt::seen_flow_weight`). Four flows of 5 packets fire,
/// four of 3 do not but would with the third of packets dropped restored.
/// A maximum does not grow with traffic: its reports are thinned again
/// instead, which keeps every one of them here (recall 1).
#[test]
fn flows_tested_one_by_one_are_scaled_back_up_under_drops() {
    let src = "event busy\n when count(packets) > 4\n per 5tuple\n every 10ms\n\
               event big\n when sum(volume) > 400\n per 5tuple\n every 10ms\n\
               event peak\n when max(volume) > 50\n per 5tuple\n every 10ms\n";
    let mut m = degraded(
        src,
        crate::config::AdaptConfig {
            accuracy_threshold: None,
            ..crate::config::AdaptConfig::default()
        },
    );
    let mut out = Vec::new();
    let mut t = T0;
    for (src, n) in [(1, 5), (2, 5), (3, 5), (4, 5), (5, 3), (6, 3), (7, 3), (8, 3)] {
        for _ in 0..n {
            t += 1_000;
            m.process(&pkt(t, src, 1000, 100), &mut out);
        }
    }
    m.note_dropped(16); // 32 of 48 packets seen: s = 2/3
    m.tick(T0 + 10 * MS, &mut out);
    m.sweep_step(usize::MAX, &mut out);
    let mut acc = Vec::new();
    m.take_accuracy(&mut acc);
    let s = 2.0 / 3.0;
    let want =
        4.0 / (4.0 * clarion_adapt::seen_flow_weight(5, s) + 4.0 * clarion_adapt::seen_flow_weight(3, s));
    for event in ["busy", "big"] {
        let a = acc
            .iter()
            .find(|a| &*a.event == event)
            .expect("an accuracy record");
        assert_eq!(a.reports, 4, "{a:?}");
        assert!(
            (a.recall_estimate - want).abs() < 1e-9,
            "{event}: {a:?}, want {want}"
        );
    }
    let peak = acc.iter().find(|a| &*a.event == "peak").expect("peak's record");
    assert_eq!((peak.reports, peak.recall_estimate), (8, 1.0), "{peak:?}");
    // Without drops the same window is exact.
    let mut m = degraded(src, crate::config::AdaptConfig::default());
    for (i, src) in (1..=4).enumerate() {
        m.process(&pkt(T0 + i as u64 * 1_000, src, 1000, 100), &mut out);
    }
    m.tick(T0 + 10 * MS, &mut out);
    m.sweep_step(usize::MAX, &mut out);
    acc.clear();
    m.take_accuracy(&mut acc);
    assert!(acc.iter().all(|a| a.recall_estimate == 1.0), "{acc:?}");
}
