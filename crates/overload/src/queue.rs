//! The overload queue: one server behind a bounded ring, in simulated time.
//!
//! # Semantics
//!
//! - **One server, FIFO, work-conserving.** Packets are served one at a
//!   time in arrival order; the server is never idle while a packet waits,
//!   and a service, once started, is never preempted. Packet i starts at
//!   `max(arrival_i, departure of the packet before it)` and departs at
//!   start + the service time [`Server::serve`] returned for it.
//! - **The ring holds waiting packets only.** At most `ring_capacity`
//!   packets wait; the packet in service is *not* in the ring (it has been
//!   taken off, as a poll loop takes a packet off the NIC ring before
//!   processing it). `ring_capacity == 0` means no waiting room.
//! - **Tail drop.** An arrival that finds the server busy and the ring full
//!   is dropped ([`Server::dropped`]); it never enters the ring.
//! - **Windows** are the fixed spans `[k·W, (k+1)·W)` of simulated time.
//!   [`Server::window_end`] is called for window k once every event before
//!   `(k+1)·W` is done and before any event at or after it (so before
//!   serving any packet that starts at or after the window end). A service
//!   that straddles the end was started, so costed, in window k.
//! - **Order of events at one instant:** a window end, then departures
//!   (each immediately starts the next waiting packet), then arrivals in
//!   input order. So a packet finishing at t makes room for an arrival at
//!   t, and a zero-length service ends before the next arrival at its
//!   instant.
//! - **The run** covers `[0, end)` with `end = max(last arrival + 1, last
//!   service start + 1, last departure)`: windows `0..⌈end/W⌉` are
//!   reported (every window with an arrival, a start or a busy nanosecond,
//!   and the empty ones in between); no input, no window.
//!
//! Deterministic: the same arrivals, capacity, window and server calls give
//! the same run; the server is called in simulated-time order.
//!
//! # Packet balance (MONA Fig. 7)
//!
//! Whether a window's arrivals could be processed within the window, at
//! the cost the server had in that window:
//! `balance_ns = W − arrivals · mean service`, where the mean service is
//! `work_ns / served` over the packets that *started* service in the
//! window. In packets, `balance = W / mean service − arrivals`. Negative:
//! the server could not keep up with that window's rate. Undefined (None)
//! in a window where no packet started, which gives no cost.
//!
//! # Cost
//!
//! O(1) per arrival, departure and window (a `VecDeque` ring, amortised);
//! memory: the ring's occupancy and one [`WindowStats`] per window.

use std::collections::VecDeque;

use crate::error::{invalid, OverloadError};

/// What the simulated queue serves with: the monitor, or a model of it.
pub trait Server {
    /// Serve the next packet of the input (in order; it arrived at
    /// `arrival_ns`, service starts at `start_ns`, `waiting` packets wait
    /// in the ring behind it); return its service time in ns.
    fn serve(&mut self, arrival_ns: u64, start_ns: u64, waiting: usize) -> u64;
    /// At each window end (in simulated time), with that window's figures;
    /// the server may reconfigure for the next window.
    fn window_end(&mut self, w: &WindowStats);
    /// A packet dropped because the ring was full (the server still learns
    /// that packet `arrival_ns` existed, e.g. to advance its input).
    fn dropped(&mut self, arrival_ns: u64);
}

/// One window's figures. Packets are counted in the window of the event:
/// arrivals and drops at their arrival, `served` and `work_ns` at the
/// start of service.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WindowStats {
    /// k, for the window `[k·W, (k+1)·W)`.
    pub index: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Packets that arrived (served or dropped).
    pub arrivals: u64,
    /// Packets whose service started.
    pub served: u64,
    /// Arrivals dropped: the ring was full.
    pub dropped: u64,
    /// Most packets waiting in the ring at any instant (counting those
    /// carried in from the window before).
    pub queue_max: usize,
    /// Packets waiting in the ring at the window's end.
    pub queue_at_end: usize,
    /// Time the server was busy within the window (a service straddling an
    /// end counts in both windows, each its part).
    pub busy_ns: u64,
    /// Sum of the service times of the packets started in the window.
    pub work_ns: u64,
    /// Longest wait in the ring (start − arrival) of a packet started here.
    pub wait_max_ns: u64,
    /// `arrivals / W`, in packets per second.
    pub arrival_rate_pps: f64,
}

impl WindowStats {
    fn open(index: u64, window_ns: u64, queued: usize) -> Self {
        WindowStats {
            index,
            start_ns: index * window_ns,
            end_ns: (index + 1) * window_ns,
            queue_max: queued,
            ..WindowStats::default()
        }
    }

    /// Mean service time of the packets started in the window.
    pub fn mean_service_ns(&self) -> Option<f64> {
        (self.served > 0).then(|| self.work_ns as f64 / self.served as f64)
    }

    /// `W − arrivals · mean service` (see the module doc); negative when
    /// the window's arrivals need more than the window.
    pub fn balance_ns(&self) -> Option<f64> {
        let w = (self.end_ns - self.start_ns) as f64;
        self.mean_service_ns().map(|s| w - self.arrivals as f64 * s)
    }

    /// `W / mean service − arrivals`, in packets: MONA's packet balance.
    /// Infinite when the packets served cost nothing.
    pub fn packet_balance(&self) -> Option<f64> {
        let w = (self.end_ns - self.start_ns) as f64;
        self.mean_service_ns().map(|s| w / s - self.arrivals as f64)
    }
}

/// The whole run's figures.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub arrivals: u64,
    pub served: u64,
    pub dropped: u64,
    pub busy_ns: u64,
    pub work_ns: u64,
    /// Most packets ever waiting in the ring.
    pub queue_max: usize,
    pub wait_max_ns: u64,
    /// The run's end: `max(last arrival + 1, last start + 1, last
    /// departure)`, 0 if empty.
    pub end_ns: u64,
}

/// What [`simulate`] returns: every window in order, and the totals.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Run {
    pub windows: Vec<WindowStats>,
    pub totals: Totals,
}

impl Run {
    /// Dropped over arrived (0 with no arrival).
    pub fn loss(&self) -> f64 {
        if self.totals.arrivals == 0 {
            0.0
        } else {
            self.totals.dropped as f64 / self.totals.arrivals as f64
        }
    }
}

/// Runs `arrivals` (ns, non-decreasing; a finite iterator) through a ring
/// of `ring_capacity` waiting packets in front of `server`, with windows of
/// `window_ns`. See the module doc for the exact semantics.
///
/// Fails for `window_ns == 0`, for an arrival earlier than the one before
/// it, and if a departure or a window end would pass `u64::MAX` ns; the
/// server has then been called for the events before the failure.
pub fn simulate(
    arrivals: impl IntoIterator<Item = u64>,
    ring_capacity: usize,
    window_ns: u64,
    server: &mut impl Server,
) -> Result<Run, OverloadError> {
    if window_ns == 0 {
        return Err(invalid("window", "must be at least 1 ns"));
    }
    let mut sim = Sim {
        window_ns,
        ring: VecDeque::new(),
        busy_until: None,
        window: WindowStats::open(0, window_ns, 0),
        run: Run::default(),
    };
    let mut arrivals = arrivals.into_iter().peekable();
    let mut index = 0u64;
    let mut previous = 0u64; // arrivals never go below it
    loop {
        let next_arrival = arrivals.peek().copied();
        let next_departure = sim.busy_until;
        let Some(t) = opt_min(next_arrival, next_departure) else {
            break; // input done and the server idle (so the ring empty)
        };
        if t >= sim.window.end_ns {
            sim.close(server)?;
            continue;
        }
        match (next_departure, next_arrival) {
            // Departures go before arrivals at the same instant.
            (Some(d), a) if a.is_none_or(|a| d <= a) => {
                sim.busy_until = None;
                sim.run.totals.end_ns = sim.run.totals.end_ns.max(d);
                if let Some(waiting) = sim.ring.pop_front() {
                    sim.start(waiting, d, server)?;
                }
            }
            (_, Some(a)) => {
                arrivals.next();
                if a < previous {
                    return Err(OverloadError::OutOfOrder {
                        index,
                        previous_ns: previous,
                        arrival_ns: a,
                    });
                }
                previous = a;
                index += 1;
                sim.window.arrivals += 1;
                sim.run.totals.end_ns = sim.run.totals.end_ns.max(a.saturating_add(1));
                if sim.busy_until.is_none() {
                    sim.start(a, a, server)?; // idle, so the ring is empty
                } else if sim.ring.len() < ring_capacity {
                    sim.ring.push_back(a);
                    sim.window.queue_max = sim.window.queue_max.max(sim.ring.len());
                } else {
                    sim.window.dropped += 1;
                    server.dropped(a);
                }
            }
            (_, None) => unreachable!("t came from one of the two"),
        }
    }
    while sim.window.start_ns < sim.run.totals.end_ns {
        sim.close(server)?;
    }
    Ok(sim.run)
}

struct Sim {
    window_ns: u64,
    /// Arrival times of the waiting packets, oldest first.
    ring: VecDeque<u64>,
    /// Departure of the packet in service; None when idle (ring empty).
    busy_until: Option<u64>,
    /// The open window, filled as its events happen.
    window: WindowStats,
    run: Run,
}

impl Sim {
    fn start(&mut self, arrival: u64, start: u64, server: &mut impl Server) -> Result<(), OverloadError> {
        let service = server.serve(arrival, start, self.ring.len());
        let departure = start
            .checked_add(service)
            .ok_or(OverloadError::TimeOverflow { what: "a departure" })?;
        // Its window is reported even if the service takes no time.
        self.run.totals.end_ns = self.run.totals.end_ns.max(start.saturating_add(1));
        let w = &mut self.window;
        w.served += 1;
        w.work_ns += service;
        w.busy_ns += departure.min(w.end_ns) - start;
        w.wait_max_ns = w.wait_max_ns.max(start - arrival);
        self.busy_until = Some(departure);
        Ok(())
    }

    /// Reports the open window and opens the next one.
    fn close(&mut self, server: &mut impl Server) -> Result<(), OverloadError> {
        let next = self.window.index + 1;
        next.checked_add(1)
            .and_then(|n| n.checked_mul(self.window_ns))
            .ok_or(OverloadError::TimeOverflow { what: "a window end" })?;
        let mut w = std::mem::replace(
            &mut self.window,
            WindowStats::open(next, self.window_ns, self.ring.len()),
        );
        w.queue_at_end = self.ring.len();
        w.arrival_rate_pps = w.arrivals as f64 * 1e9 / self.window_ns as f64;
        server.window_end(&w);
        let t = &mut self.run.totals;
        t.arrivals += w.arrivals;
        t.served += w.served;
        t.dropped += w.dropped;
        t.busy_ns += w.busy_ns;
        t.work_ns += w.work_ns;
        t.queue_max = t.queue_max.max(w.queue_max);
        t.wait_max_ns = t.wait_max_ns.max(w.wait_max_ns);
        self.run.windows.push(w);
        // A service carried over from the window before is busy here too.
        if let Some(d) = self.busy_until {
            let nw = &mut self.window;
            nw.busy_ns += d.min(nw.end_ns).saturating_sub(nw.start_ns);
        }
        Ok(())
    }
}

fn opt_min(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves every packet in a fixed time; logs nothing.
    struct Fixed(u64);
    impl Server for Fixed {
        fn serve(&mut self, _: u64, _: u64, _: usize) -> u64 {
            self.0
        }
        fn window_end(&mut self, _: &WindowStats) {}
        fn dropped(&mut self, _: u64) {}
    }

    #[test]
    fn empty_input_has_no_window() {
        let run = simulate([], 4, 10, &mut Fixed(3)).unwrap();
        assert!(run.windows.is_empty());
        assert_eq!(run.totals, Totals::default());
    }

    #[test]
    fn the_packet_in_service_is_not_in_the_ring() {
        // Ring of 1: the first packet is served, the second waits, the third is dropped.
        let run = simulate([0, 1, 2], 1, 100, &mut Fixed(10)).unwrap();
        assert_eq!((run.totals.served, run.totals.dropped), (2, 1));
        // No waiting room at all: only the packet the idle server takes.
        let run = simulate([0, 1, 2], 0, 100, &mut Fixed(10)).unwrap();
        assert_eq!((run.totals.served, run.totals.dropped), (1, 2));
    }

    #[test]
    fn a_departure_makes_room_for_an_arrival_at_its_instant() {
        let run = simulate([0, 1, 10], 1, 100, &mut Fixed(10)).unwrap();
        assert_eq!(run.totals.dropped, 0);
        assert_eq!(run.totals.end_ns, 30);
    }

    #[test]
    fn out_of_order_and_zero_window_are_refused() {
        assert!(matches!(
            simulate([5, 4], 1, 10, &mut Fixed(1)),
            Err(OverloadError::OutOfOrder {
                index: 1,
                previous_ns: 5,
                arrival_ns: 4
            })
        ));
        assert!(simulate([5], 1, 0, &mut Fixed(1)).is_err());
        assert!(matches!(
            simulate([5], 1, 10, &mut Fixed(u64::MAX)),
            Err(OverloadError::TimeOverflow { .. })
        ));
    }

    #[test]
    fn balance_in_packets_and_ns() {
        let w = WindowStats {
            start_ns: 0,
            end_ns: 1000,
            arrivals: 150,
            served: 100,
            work_ns: 1000,
            ..WindowStats::default()
        };
        assert_eq!(w.mean_service_ns(), Some(10.0));
        assert_eq!(w.balance_ns(), Some(-500.0));
        assert_eq!(w.packet_balance(), Some(-50.0));
        assert_eq!(WindowStats::default().packet_balance(), None);
    }
}
