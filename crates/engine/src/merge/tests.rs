use super::*;
use clarion_lang::spec::{AggFunc, BaseVar, CmpOp, Granularity, Pred, PrefixLens};
use clarion_wire::PacketRecord;

use crate::{Monitor, MonitorConfig};

use crate::monitor::tests::{agg, event, pkt, MS, T0};

fn cmp(op: CmpOp, l: Pred, r: f64) -> Pred {
    Pred::Cmp(op, Box::new(l), Box::new(Pred::Num(r)))
}

fn and(l: Pred, r: Pred) -> Pred {
    Pred::And(Box::new(l), Box::new(r))
}

/// Groups every flow of [`pkt`] together (they share their destination).
fn per_dst() -> Granularity {
    Granularity {
        dst_ip: Some(PrefixLens::FULL),
        ..Granularity::default()
    }
}

fn big(threshold: f64, granularity: Granularity) -> EventSpec {
    event(
        "big",
        cmp(CmpOp::Gt, agg(AggFunc::Sum, BaseVar::Volume), threshold),
        granularity,
        10,
    )
}

fn config(worker: u32, five_tuple_fanout: bool) -> MonitorConfig {
    MonitorConfig {
        host: "h".into(),
        worker,
        merge_output: true,
        five_tuple_fanout,
        // Polled: values are kept (a manager's polls read them).
        history_windows: crate::POLLED_HISTORY_WINDOWS,
        ..MonitorConfig::default()
    }
}

/// `n` workers with `events` installed.
fn workers(n: u32, five_tuple_fanout: bool, events: &[EventSpec]) -> Vec<Monitor> {
    (0..n)
        .map(|w| {
            let mut m = Monitor::new(config(w, five_tuple_fanout));
            for e in events {
                m.install(e.clone()).unwrap();
            }
            m
        })
        .collect()
}

fn merger(workers: u32) -> Merger {
    Merger::new(MergerConfig {
        host: "h".into(),
        workers,
        history_windows: 4,
        adapt: None,
    })
}

/// Hands each packet to its worker, every worker's clock kept at the
/// host's latest time, then finishes them; returns each worker's partials.
fn drive(workers: &mut [Monitor], pkts: &[(usize, PacketRecord)]) -> Vec<Vec<Partials>> {
    let mut none = Vec::new();
    let mut now = None;
    for (w, p) in pkts {
        let clock = now.unwrap_or(p.ts_ns);
        for m in workers.iter_mut() {
            m.tick(clock, &mut none);
        }
        workers[*w].process(p, &mut none);
        now = Some(clock.max(p.ts_ns));
    }
    for m in workers.iter_mut() {
        if let Some(t) = now {
            m.tick(t, &mut none);
        }
        m.finish(&mut none);
    }
    assert!(none.is_empty(), "workers report nothing themselves");
    workers.iter_mut().map(Monitor::take_partials).collect()
}

/// Pushes the partials, the last worker's first, and returns the reports.
fn merge_all(m: &mut Merger, parts: Vec<Vec<Partials>>) -> Vec<Report> {
    let mut out = Vec::new();
    for p in parts.into_iter().rev().flatten() {
        m.push(p, &mut out).unwrap();
    }
    out
}

/// One monitor on the packets (workers ignored).
fn single(events: &[EventSpec], pkts: &[(usize, PacketRecord)]) -> (Monitor, Vec<Report>) {
    let mut m = Monitor::new(MonitorConfig {
        host: "h".into(),
        history_windows: crate::POLLED_HISTORY_WINDOWS,
        ..MonitorConfig::default()
    });
    for e in events {
        m.install(e.clone()).unwrap();
    }
    let mut out = Vec::new();
    for (_, p) in pkts {
        m.process(p, &mut out);
    }
    m.finish(&mut out);
    (m, out)
}

/// Reports as one monitor's: the origin's worker set to 0.
fn as_single(mut reports: Vec<Report>) -> Vec<Report> {
    for r in &mut reports {
        assert_eq!(r.origin.worker, MERGED_WORKER);
        r.origin.worker = 0;
    }
    reports
}

#[test]
fn every_aggregate_merges_across_workers_as_on_one_monitor() {
    let all = [
        (AggFunc::Sum, CmpOp::Gt, 0.0),
        (AggFunc::Min, CmpOp::Ge, 0.0),
        (AggFunc::Max, CmpOp::Gt, 0.0),
        (AggFunc::Avg, CmpOp::Gt, 0.0),
        (AggFunc::Stddev, CmpOp::Ge, 0.0),
        (AggFunc::Count, CmpOp::Gt, 0.0),
    ];
    let pred = all
        .iter()
        .map(|&(f, op, v)| cmp(op, agg(f, BaseVar::Volume), v))
        .reduce(and)
        .unwrap();
    let events = [event("all", pred, per_dst(), 10)];
    // One group, four flows, two per worker; the window closes at T0 + 10 ms.
    let pkts = [
        (0, pkt(T0, 1, 1000, 100)),
        (1, pkt(T0 + 2 * MS, 2, 1000, 50)),
        (0, pkt(T0 + 3 * MS, 3, 1000, 300)),
        (1, pkt(T0 + 4 * MS, 4, 1000, 700)),
        (1, pkt(T0 + 4 * MS, 4, 1000, 0)),
        (0, pkt(T0 + 15 * MS, 9, 9, 1)),
    ];
    let mut ws = workers(2, false, &events);
    let merged = as_single(merge_all(&mut merger(2), drive(&mut ws, &pkts)));
    let (_, expected) = single(&events, &pkts);
    assert_eq!(merged, expected);
    let values: Vec<f64> = merged[0].values.iter().map(|v| v.1).collect();
    let (n, sum, sq) = (5.0, 1150.0, 100.0f64 * 100.0 + 2500.0 + 90_000.0 + 490_000.0);
    let stddev = ((n * sq - sum * sum) / (n * n)).sqrt();
    assert_eq!(values, vec![1150.0, 0.0, 700.0, 230.0, stddev, 4.0]);
    assert_eq!(merged[0].completeness.packets, 5, "both workers' packets");
    assert!(merged[0].completeness.complete);
}

#[test]
fn a_group_spanning_workers_fires_only_when_merged() {
    let events = [big(150.0, per_dst())];
    let share = |w: usize| {
        [
            (w, pkt(T0 + MS, 1 + w as u8, 1000, 100)),
            (w, pkt(T0 + 12 * MS, 1 + w as u8, 1000, 1)),
        ]
    };
    let (a, b) = (share(0), share(1));
    // Neither worker's share fires on its own...
    assert!(single(&events, &a).1.is_empty());
    assert!(single(&events, &b).1.is_empty());
    // ...together they do, once.
    let pkts = [a[0], b[0], a[1], b[1]];
    let mut ws = workers(2, false, &events);
    let mut m = merger(2);
    let out = merge_all(&mut m, drive(&mut ws, &pkts));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].values[..], [("sum(volume)".into(), 200.0)]);
    assert_eq!(&*out[0].origin.host, "h");
    assert_eq!(as_single(out), single(&events, &pkts).1);
    assert_eq!(m.released_to(), u64::MAX);
    assert_eq!(m.pending_windows(), 0);
}

#[test]
fn a_window_waits_for_the_slowest_worker() {
    let events = [big(150.0, per_dst())];
    let mut ws = workers(2, false, &events);
    let mut m = merger(2);
    let (mut none, mut out) = (Vec::new(), Vec::new());
    ws[0].process(&pkt(T0 + MS, 1, 1000, 100), &mut none);
    ws[1].process(&pkt(T0 + MS, 2, 1000, 100), &mut none);
    // Worker 0 moves past the window's end; worker 1 has no traffic.
    ws[0].process(&pkt(T0 + 25 * MS, 1, 1000, 1), &mut none);
    let fast = ws[0].take_partials();
    assert_eq!(fast.len(), 1, "one sweep");
    assert_eq!(fast[0].watermark(), T0 + 20 * MS);
    assert_eq!(fast[0].groups(), 1);
    for p in fast {
        m.push(p, &mut out).unwrap();
    }
    assert!(out.is_empty(), "worker 1 may still hold data for the window");
    assert_eq!(m.pending_windows(), 1);
    assert!(ws[1].take_partials().is_empty());
    // A tick closes worker 1's epoch without a packet: the window is released.
    ws[1].tick(T0 + 25 * MS, &mut none);
    let slow = ws[1].take_partials();
    assert_eq!(
        slow.iter().map(Partials::watermark).collect::<Vec<_>>(),
        [T0 + 20 * MS]
    );
    for p in slow {
        m.push(p, &mut out).unwrap();
    }
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].values[0].1, 200.0);
    assert_eq!(out[0].completeness.packets, 2);
    assert!(
        !out[0].completeness.complete,
        "the workers started observing inside the window"
    );
    assert_eq!(m.released_to(), T0 + 20 * MS);
    assert!(none.is_empty());
}

#[test]
fn five_tuple_triggers_are_tested_on_their_worker_with_the_host_completeness() {
    let events = [big(150.0, Granularity::FIVE_TUPLE), big(150.0, per_dst())];
    let pkts = [
        (0, pkt(T0 + MS, 1, 1000, 200)),
        (1, pkt(T0 + 2 * MS, 2, 1000, 100)),
        (1, pkt(T0 + 3 * MS, 2, 1000, 100)),
        (0, pkt(T0 + 12 * MS, 1, 1000, 1)),
    ];
    let mut ws = workers(2, true, &events);
    let parts = drive(&mut ws, &pkts);
    let groups: usize = parts.iter().flatten().map(Partials::groups).sum();
    // The per-dst trigger's group: on both workers in the first window, on
    // worker 0 in the second; nothing of the 5-tuple trigger.
    assert_eq!(groups, 3);
    let mut m = merger(2);
    let out = merge_all(&mut m, parts);
    assert_eq!(m.tests_locally(0), Some(true));
    assert_eq!(m.tests_locally(1), Some(false));
    let (_, expected) = single(&events, &pkts);
    assert_eq!(expected.len(), 3, "two flows and their destination: {expected:?}");
    assert_eq!(as_single(out), expected);
    // Without the 5-tuple fanout, the same trigger is merged instead, with the same reports.
    let mut ws = workers(2, false, &events);
    let parts = drive(&mut ws, &pkts);
    assert_eq!(parts.iter().flatten().map(Partials::groups).sum::<usize>(), 6);
    let out = merge_all(&mut merger(2), parts);
    assert_eq!(as_single(out), expected);
}

#[test]
fn a_trigger_reports_the_windows_every_worker_covers() {
    let e = big(0.0, per_dst());
    let (mut none, mut out) = (Vec::new(), Vec::new());
    let mut ws = workers(2, false, &[]);
    let mut m = merger(2);
    let every_ms = |ws: &mut [Monitor], m: &mut Merger, out: &mut Vec<Report>, from: u64, to: u64| {
        let mut none = Vec::new();
        for t in from..to {
            for (w, mon) in ws.iter_mut().enumerate() {
                mon.process(&pkt(T0 + t * MS, w as u8, 1, 10), &mut none);
            }
            for p in ws.iter_mut().flat_map(Monitor::take_partials) {
                m.push(p, out).unwrap();
            }
        }
    };
    every_ms(&mut ws, &mut m, &mut out, 1, 5);
    // Worker 0 installs in the first window; worker 1 only in the second.
    assert_eq!(ws[0].install(e.clone()), Ok(0));
    every_ms(&mut ws, &mut m, &mut out, 5, 12);
    assert_eq!(ws[1].install(e.clone()), Ok(0));
    every_ms(&mut ws, &mut m, &mut out, 12, 45);
    // Removed by worker 1 in the fifth window: the fourth is the last reported.
    ws[1].remove(0).unwrap();
    every_ms(&mut ws, &mut m, &mut out, 45, 55);
    ws[0].remove(0).unwrap();
    for w in &mut ws {
        w.finish(&mut none);
    }
    for p in ws.iter_mut().flat_map(Monitor::take_partials) {
        m.push(p, &mut out).unwrap();
    }
    let starts: Vec<u64> = out.iter().map(|r| (r.window.start_ns - T0) / MS).collect();
    // Worker 0 started at 10 ms, worker 1 at 20 ms.
    assert_eq!(starts, [20, 30]);
    assert!(out.iter().all(|r| r.values[0].1 == 200.0), "{out:?}");
    assert_eq!(m.tests_locally(0), None, "forgotten once every worker removed it");
    assert!(none.is_empty());
}

#[test]
fn window_values_are_the_host_s() {
    let events = [big(1e12, per_dst()), big(1e12, Granularity::FIVE_TUPLE)];
    let pkts = [
        (0, pkt(T0 + MS, 1, 1000, 100)),
        (1, pkt(T0 + 2 * MS, 2, 1000, 50)),
        (1, pkt(T0 + 3 * MS, 2, 1000, 7)),
        (0, pkt(T0 + 35 * MS, 1, 1000, 1)),
    ];
    let mut ws = workers(2, true, &events);
    let parts = drive(&mut ws, &pkts);
    let mut m = merger(2);
    assert!(merge_all(&mut m, parts).is_empty());
    let (one, _) = single(&events, &pkts);
    for start in [T0, T0 + 10 * MS, T0 + 30 * MS, T0 + 40 * MS, T0 + 3 * MS] {
        let merged = m.window_values(0, start);
        assert_eq!(merged, one.window_values(0, start), "{start}");
        assert_eq!(
            ws[0].window_values(0, start),
            None,
            "merged values live in the merger"
        );
        let joined = join_window_values(ws.iter().map(|w| w.window_values(1, start)));
        assert_eq!(joined, one.window_values(1, start), "{start}");
    }
    let first = m.window_values(0, T0).unwrap();
    assert_eq!(first.groups.len(), 1);
    assert_eq!(first.groups[0].1, vec![157.0]);
    assert_eq!(first.packets, Some(3), "both workers' packets of the window");
    let joined = join_window_values(ws.iter().map(|w| w.window_values(1, T0)));
    assert_eq!(joined.and_then(|j| j.packets), Some(3));
    assert_eq!(m.window_values(1, T0), None, "tested on the workers");
    assert_eq!(m.window_values(7, T0), None);
}

#[test]
fn refuses_partials_that_break_the_rules() {
    let e = big(0.0, per_dst());
    let mut ws = workers(2, false, std::slice::from_ref(&e));
    let parts = drive(
        &mut ws,
        &[(0, pkt(T0 + MS, 1, 1, 10)), (0, pkt(T0 + 12 * MS, 1, 1, 10))],
    );
    let (mut out, mut m) = (Vec::new(), merger(1));
    let first = parts[1][0].clone();
    assert_eq!(
        m.push(first, &mut out),
        Err(EngineError::UnknownWorker {
            worker: 1,
            workers: 1
        })
    );
    let mut m = merger(2);
    let mut w0 = parts[0].iter().cloned();
    let with_data = w0.next().unwrap();
    assert_eq!(with_data.groups(), 1);
    m.push(with_data.clone(), &mut out).unwrap();
    assert_eq!(
        m.push(with_data, &mut out),
        Err(EngineError::TriggerMismatch { worker: 0, id: 0 }),
        "installed twice"
    );
    for p in w0 {
        m.push(p, &mut out).unwrap();
    }
    let last = parts[0].last().unwrap().clone();
    assert!(last.is_last());
    assert_eq!(
        m.push(last, &mut out),
        Err(EngineError::AfterLastPartials { worker: 0 })
    );
    // Another worker installed something else under the same id.
    let mut other = workers(2, false, &[big(1.0, per_dst())]);
    let parts = drive(&mut other, &[(1, pkt(T0 + MS, 1, 1, 10))]);
    let theirs = parts[1][0].clone();
    assert_eq!(
        m.push(theirs, &mut out),
        Err(EngineError::TriggerMismatch { worker: 1, id: 0 })
    );
    let mut late = workers(2, false, &[e]);
    let pkts = [1, 12, 25].map(|t| (1, pkt(T0 + t * MS, 1, 1, 10)));
    let parts = drive(&mut late, &pkts);
    let w1 = &parts[1];
    assert_eq!(w1.iter().map(Partials::groups).collect::<Vec<_>>(), [1, 1, 1]);
    let mut m = merger(2);
    // Partials lost: a window of a trigger whose install was in them.
    assert_eq!(
        m.push(w1[1].clone(), &mut out),
        Err(EngineError::NotInstalled { worker: 1, id: 0 })
    );
    // Reordered: a window behind the worker's watermark.
    let mut second = w1[1].clone();
    second.installed = w1[0].installed.clone();
    m.push(second, &mut out).unwrap();
    let mut first = w1[0].clone();
    first.installed.clear();
    assert_eq!(
        m.push(first, &mut out),
        Err(EngineError::PartialsOutOfOrder {
            worker: 1,
            end_ns: T0 + 10 * MS
        })
    );
    assert!(out.is_empty(), "worker 0 never reached the windows");
}

#[test]
fn fanout_keeps_connections_and_five_tuples_together() {
    let mut seen = [0u32; 3];
    for i in 0..300u32 {
        let k = pkt(0, (i % 250) as u8, (i * 7) as u16, 1).key;
        let tagged = FlowKey {
            vlan: 12,
            flags: k.flags | FlowKey::HAS_VLAN,
            ..k
        };
        let w = fanout_worker(&k, 3, 42);
        assert_eq!(fanout_worker(&k.reversed(), 3, 42), w, "both directions together");
        assert_eq!(fanout_worker(&tagged, 3, 42), w, "the VLAN is not read");
        assert_eq!(fanout_worker(&k, 1, 42), 0);
        seen[w as usize] += 1;
    }
    assert!(seen.iter().all(|&n| n > 60), "spread: {seen:?}");
}

#[test]
fn partials_and_the_merger_move_between_threads() {
    fn send<T: Send>() {}
    send::<Partials>();
    send::<Merger>();
}

/// A blind span one worker's driver noted makes the host's windows it
/// overlaps incomplete, and only those.
#[test]
fn a_worker_s_blind_span_makes_the_host_s_window_incomplete() {
    let events = [big(0.0, per_dst())];
    let pkts = [
        (0, pkt(T0 + MS, 1, 1000, 100)),
        (1, pkt(T0 + 2 * MS, 2, 1000, 100)),
        (0, pkt(T0 + 11 * MS, 1, 1000, 100)),
        (1, pkt(T0 + 12 * MS, 2, 1000, 100)),
        (0, pkt(T0 + 21 * MS, 1, 1000, 100)),
        (1, pkt(T0 + 31 * MS, 2, 1000, 100)),
    ];
    let mut ws = workers(2, false, &events);
    ws[1].tick(T0, &mut Vec::new());
    ws[1].note_blind(T0 + 14 * MS, T0 + 16 * MS);
    let merged = merge_all(&mut merger(2), drive(&mut ws, &pkts));
    let complete: Vec<(u64, bool)> = merged
        .iter()
        .map(|r| ((r.window.start_ns - T0) / MS, r.completeness.complete))
        .collect();
    // The first window started before worker 0's first frame (T0 + 1 ms);
    // the last one ends with the input.
    assert_eq!(complete, [(0, false), (10, false), (20, true), (30, false)]);
}
