//! `simulate` against an obviously-correct simulator written apart: one
//! that steps simulated time a nanosecond at a time and counts busy time
//! tick by tick. Both drive the same feedback server (its service times
//! depend on the window figures it was told), and must make the same calls
//! in the same order: same service starts, so same departure times, same
//! drops, same window figures. Also: Lindley's recursion for departures
//! with an unbounded ring, a fluid bound under constant overload, and real
//! captures' arrival times.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::collections::VecDeque;

use clarion_overload::{simulate, Constant, Recorded, Server, WindowStats};
use proptest::prelude::*;

#[derive(Clone, Debug, PartialEq)]
enum Call {
    Serve {
        arrival: u64,
        start: u64,
        waiting: usize,
        service: u64,
    },
    Window(WindowStats),
    Dropped(u64),
}

/// Service times from a list (cycled), times a factor the window figures
/// set: any difference in a window's figures changes later services.
struct Feedback {
    services: Vec<u64>,
    n: usize,
    factor: u64,
    log: Vec<Call>,
}

impl Feedback {
    fn new(services: Vec<u64>) -> Self {
        Feedback {
            services,
            n: 0,
            factor: 1,
            log: Vec::new(),
        }
    }
}

impl Server for Feedback {
    fn serve(&mut self, arrival: u64, start: u64, waiting: usize) -> u64 {
        let service = self.services[self.n % self.services.len()] * self.factor;
        self.n += 1;
        self.log.push(Call::Serve {
            arrival,
            start,
            waiting,
            service,
        });
        service
    }
    fn window_end(&mut self, w: &WindowStats) {
        self.factor = 1 + (w.dropped + w.queue_at_end as u64 + w.busy_ns + w.queue_max as u64) % 3;
        self.log.push(Call::Window(w.clone()));
    }
    fn dropped(&mut self, arrival: u64) {
        self.log.push(Call::Dropped(arrival));
    }
}

/// The reference: every nanosecond t in turn: close the window ending at
/// t, finish the service ending at t (starting the next waiting packet),
/// take the arrivals at t, then count [t, t+1) as busy or not.
struct Reference<'s, S> {
    server: &'s mut S,
    cap: usize,
    queue: VecDeque<u64>,
    busy_until: Option<u64>,
    last_departure: u64,
    last_start: u64,
    // The open window's counters.
    arrivals: u64,
    served: u64,
    dropped: u64,
    qmax: usize,
    busy: u64,
    work: u64,
    wait_max: u64,
}

impl<S: Server> Reference<'_, S> {
    fn start(&mut self, a: u64, t: u64) {
        self.last_start = t;
        let x = self.server.serve(a, t, self.queue.len());
        self.served += 1;
        self.work += x;
        self.wait_max = self.wait_max.max(t - a);
        self.busy_until = Some(t + x);
    }

    /// Services ending at t end; each frees the server for the ring's head.
    fn settle(&mut self, t: u64) {
        while self.busy_until == Some(t) {
            self.busy_until = None;
            self.last_departure = t;
            if let Some(a) = self.queue.pop_front() {
                self.start(a, t);
            }
        }
    }

    fn arrive(&mut self, t: u64) {
        self.arrivals += 1;
        if self.busy_until.is_none() {
            self.start(t, t);
            self.settle(t);
        } else if self.queue.len() < self.cap {
            self.queue.push_back(t);
            self.qmax = self.qmax.max(self.queue.len());
        } else {
            self.dropped += 1;
            self.server.dropped(t);
        }
    }

    fn close(&mut self, k: u64, w_ns: u64) -> WindowStats {
        let w = WindowStats {
            index: k,
            start_ns: k * w_ns,
            end_ns: (k + 1) * w_ns,
            arrivals: self.arrivals,
            served: self.served,
            dropped: self.dropped,
            queue_max: self.qmax,
            queue_at_end: self.queue.len(),
            busy_ns: self.busy,
            work_ns: self.work,
            wait_max_ns: self.wait_max,
            arrival_rate_pps: self.arrivals as f64 * 1e9 / w_ns as f64,
        };
        self.server.window_end(&w);
        (
            self.arrivals,
            self.served,
            self.dropped,
            self.busy,
            self.work,
            self.wait_max,
        ) = (0, 0, 0, 0, 0, 0);
        self.qmax = self.queue.len();
        w
    }
}

fn reference(arrivals: &[u64], cap: usize, w_ns: u64, server: &mut impl Server) -> Vec<WindowStats> {
    let mut r = Reference {
        server,
        cap,
        queue: VecDeque::new(),
        busy_until: None,
        last_departure: 0,
        last_start: 0,
        arrivals: 0,
        served: 0,
        dropped: 0,
        qmax: 0,
        busy: 0,
        work: 0,
        wait_max: 0,
    };
    let mut out = Vec::new();
    let mut k = 0u64;
    let mut i = 0;
    let mut t = 0u64;
    while i < arrivals.len() || r.busy_until.is_some() {
        if t > 0 && t.is_multiple_of(w_ns) {
            out.push(r.close(k, w_ns));
            k += 1;
        }
        r.settle(t);
        while i < arrivals.len() && arrivals[i] == t {
            r.arrive(t);
            i += 1;
        }
        if r.busy_until.is_some_and(|d| d > t) {
            r.busy += 1;
        }
        t += 1;
    }
    // Through the last arrival, the last start and the last busy nanosecond.
    let end = match arrivals.last() {
        None => 0,
        Some(a) => (a + 1).max(r.last_start + 1).max(r.last_departure),
    };
    while k * w_ns < end {
        out.push(r.close(k, w_ns));
        k += 1;
    }
    out
}

fn compare(arrivals: &[u64], cap: usize, w_ns: u64, services: &[u64]) -> clarion_overload::Run {
    let mut fast = Feedback::new(services.to_vec());
    let run = simulate(arrivals.iter().copied(), cap, w_ns, &mut fast).unwrap();
    let mut slow = Feedback::new(services.to_vec());
    let windows = reference(arrivals, cap, w_ns, &mut slow);
    assert_eq!(fast.log.len(), slow.log.len(), "same number of calls");
    for (i, (f, s)) in fast.log.iter().zip(&slow.log).enumerate() {
        assert_eq!(f, s, "call {i} differs");
    }
    assert_eq!(run.windows, windows);
    let t = &run.totals;
    assert_eq!(t.arrivals, arrivals.len() as u64);
    assert_eq!(
        t.arrivals,
        t.served + t.dropped,
        "every packet served or dropped once"
    );
    assert_eq!(t.busy_ns, t.work_ns, "all work is done by the end");
    run
}

/// Sorted arrivals from random gaps (many zero gaps: bursts).
fn arrivals_from(gaps: &[u64]) -> Vec<u64> {
    gaps.iter()
        .scan(0u64, |t, g| {
            *t += g;
            Some(*t)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn matches_the_tick_reference(
        gaps in prop::collection::vec(prop_oneof![Just(0u64), 0u64..40], 0..200),
        services in prop::collection::vec(prop_oneof![Just(0u64), 0u64..60], 1..20),
        cap in 0usize..10,
        w_ns in 1u64..150,
    ) {
        compare(&arrivals_from(&gaps), cap, w_ns, &services);
    }

    #[test]
    fn unbounded_ring_departs_as_lindley_says(
        gaps in prop::collection::vec(0u64..1000, 1..300),
        services in prop::collection::vec(0u64..2000, 300),
        w_ns in 1u64..100_000,
    ) {
        let arrivals = arrivals_from(&gaps);
        let mut fixed = Feedback::new(services.clone());
        fixed.factor = 1;
        struct NoFeedback(Feedback);
        impl Server for NoFeedback {
            fn serve(&mut self, a: u64, s: u64, w: usize) -> u64 { self.0.serve(a, s, w) }
            fn window_end(&mut self, _: &WindowStats) {}
            fn dropped(&mut self, a: u64) { self.0.dropped(a) }
        }
        let mut server = NoFeedback(fixed);
        let run = simulate(arrivals.iter().copied(), usize::MAX, w_ns, &mut server).unwrap();
        prop_assert_eq!(run.totals.dropped, 0);
        // Lindley: d_i = max(a_i, d_{i-1}) + s_i.
        let mut d = 0u64;
        let mut departures = Vec::new();
        for (i, a) in arrivals.iter().enumerate() {
            d = d.max(*a) + services[i];
            departures.push(d);
        }
        let got: Vec<u64> = server.0.log.iter().filter_map(|c| match c {
            Call::Serve { start, service, .. } => Some(start + service),
            _ => None,
        }).collect();
        prop_assert_eq!(got, departures);
        prop_assert_eq!(run.windows.len() as u64, run.totals.end_ns.div_ceil(w_ns));
    }

    #[test]
    fn constant_overload_loses_what_a_fluid_bound_says(
        pps in 1_000_000u64..20_000_000,
        service in 50u64..1000,
        cap in 1usize..2000,
    ) {
        // N packets at a constant rate into a server of a fixed service time.
        let n = 20_000u64;
        let arrivals: Vec<u64> = Constant::new(pps).unwrap().take(n as usize).collect();
        struct Fixed(u64);
        impl Server for Fixed {
            fn serve(&mut self, _: u64, _: u64, _: usize) -> u64 { self.0 }
            fn window_end(&mut self, _: &WindowStats) {}
            fn dropped(&mut self, _: u64) {}
        }
        let run = simulate(arrivals.iter().copied(), cap, 1_000_000, &mut Fixed(service)).unwrap();
        let t = &run.totals;
        prop_assert_eq!(t.served * service, t.busy_ns);
        prop_assert_eq!(t.arrivals, t.served + t.dropped);
        let gap = 1_000_000_000 / pps; // every gap is gap or gap + 1
        if service <= gap {
            // Never busy at an arrival: nothing waits, nothing drops.
            prop_assert_eq!(t.dropped, 0);
            prop_assert_eq!(t.queue_max, 0);
        } else if service * pps >= 1_100_000_000 {
            // 10% overload or more: busy from t = 0 on (the ring always holds
            // the next packet), so by the last arrival floor(last/service) + 1
            // services started, the ring holds at most cap, the rest dropped.
            let last = *arrivals.last().unwrap();
            let started = last / service + 1;
            let expected = n.saturating_sub(started + cap as u64);
            prop_assert!(t.dropped + 1 >= expected && t.dropped <= expected + 1,
                "dropped {} expected {expected}", t.dropped);
        }
    }
}

#[test]
fn real_captures_match_the_tick_reference() {
    for path in clarion_testdata::capture_files() {
        let name = clarion_testdata::name(&path);
        let stamps: Vec<u64> = clarion_testdata::frames(&path).iter().map(|f| f.ts_ns).collect();
        // Sped up to 3 ns per packet on average, against services of 0 to 9
        // ns: the busy moments overload the server, and the tick reference
        // walks about 3 ticks per packet.
        let span = stamps.iter().max().unwrap() - stamps[0];
        let speedup = (span as f64 / (3.0 * stamps.len() as f64)).max(1.0);
        let window = 500;
        let arrivals: Vec<u64> = Recorded::new(stamps, speedup).unwrap().collect();
        let run = compare(&arrivals, 32, window, &[3, 1, 4, 1, 5, 9, 2, 6]);
        assert!(run.totals.dropped > 0, "{name}: the speedup overloads the server");
        eprintln!(
            "{name}: {} arrivals, {} dropped, {} windows over {} ns",
            run.totals.arrivals,
            run.totals.dropped,
            run.windows.len(),
            run.totals.end_ns
        );
    }
}
