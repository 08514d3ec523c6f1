//! Relief within a window: when the receive ring fills faster than the
//! per-window decision can react (our extension to MONA §IV-B).
//!
//! # Why
//! MONA decides once per window, from the window before. A window that
//! starts under a surge (the first one of a run, or one after a quiet
//! window) is served as the last decision said, and a 4,096-packet ring
//! in front of a 250 ns packet holds about 1 ms: it overflows long before
//! the window's end, and the backlog it leaves is served at the old cost
//! in the next window too. On MONA's sine (period 250 ms) every drop the
//! adaptive monitor still had came from the first two windows
//! (docs/performance.md, "Relief within a window").
//!
//! # The decision
//! The driver reports each packet it serves: when it arrived, what serving
//! it cost (in the driver's measure: wall time live, the cost model in
//! simulation), and how many packets wait behind it in a ring of what
//! capacity. Once the ring is [`Relief::FILL`] full at the end of a block of
//! [`Relief::BLOCK`] packets served, the
//! time available a packet for the next `horizon` is what drains the
//! backlog while keeping up with the arrivals:
//!
//! `available = horizon / (rate · horizon + waiting)`,
//!
//! with `rate` the arrival rate of the block's packets (the same rule as
//! [`crate::Budget`], over a shorter past). If
//! the packets served cost more than that on average, the driver hands
//! both figures to the monitor, which bypasses more flows at once
//! (`Monitor::relieve`). Each block is judged on its own packets, served
//! after the relief before took force, so a raise is not asked twice for
//! the same overload.
//!
//! # Cost
//! A few additions per packet; a division when the ring is over the fill
//! mark.

/// See the module documentation.
#[derive(Clone, Copy, Debug)]
pub struct Relief {
    horizon_ns: u64,
    /// Packets of the block being served, their summed cost, and the
    /// first and last arrival among them.
    served: u64,
    cost_ns: f64,
    first_arrival_ns: u64,
    last_arrival_ns: u64,
}

/// What the monitor is to be told: the cost of the packets served lately
/// and the time available a packet from now on, ns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Relieve {
    pub serving_ns: f64,
    pub available_ns: f64,
}

impl Relief {
    /// Share of the ring's capacity waiting from which relief is judged.
    pub const FILL: f64 = 0.5;
    /// Packets served per judgement: the ring's fill is looked at after
    /// each block of them, their mean cost and arrival rate are the
    /// block's (enough packets to mean something, recent enough to follow
    /// a surge).
    pub const BLOCK: u64 = 256;

    /// Relief that drains a backlog over `horizon_ns` (a window, typically).
    pub fn new(horizon_ns: u64) -> Self {
        Relief {
            horizon_ns: horizon_ns.max(1),
            served: 0,
            cost_ns: 0.0,
            first_arrival_ns: 0,
            last_arrival_ns: 0,
        }
    }

    /// One packet served: it arrived at `arrival_ns`, cost `cost_ns`, and
    /// leaves `waiting` packets in a ring of `capacity`. Returns what to
    /// tell the monitor when relief is due now.
    pub fn served(&mut self, arrival_ns: u64, cost_ns: f64, waiting: u64, capacity: u64) -> Option<Relieve> {
        if self.served == 0 {
            self.first_arrival_ns = arrival_ns;
        }
        self.served += 1;
        self.cost_ns += cost_ns;
        self.last_arrival_ns = self.last_arrival_ns.max(arrival_ns);
        if self.served < Self::BLOCK {
            return None;
        }
        let span = self.last_arrival_ns.saturating_sub(self.first_arrival_ns);
        let serving_ns = self.cost_ns / self.served as f64;
        // (served − 1) gaps between the first and last arrivals.
        let rate = if span == 0 {
            f64::INFINITY
        } else {
            (self.served - 1) as f64 / span as f64
        };
        self.served = 0;
        self.cost_ns = 0.0;
        self.last_arrival_ns = 0;
        if (waiting as f64) < Self::FILL * capacity as f64 {
            return None;
        }
        let h = self.horizon_ns as f64;
        let available_ns = h / (rate * h + waiting as f64);
        (serving_ns > available_ns).then_some(Relieve {
            serving_ns,
            available_ns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packets arriving every `gap` ns, each costing `cost`, with `waiting`
    /// behind them in a ring of 4,096: the first relief asked, if any, and
    /// after how many packets.
    fn run(gap: u64, cost: f64, waiting: u64) -> Option<(u64, Relieve)> {
        let mut r = Relief::new(10_000_000);
        (0..10_000u64).find_map(|i| r.served(i * gap, cost, waiting, 4096).map(|d| (i + 1, d)))
    }

    #[test]
    fn a_full_ring_fed_faster_than_served_asks_for_what_drains_it() {
        let (after, d) = run(200, 250.0, 3_000).unwrap();
        assert_eq!(after, Relief::BLOCK);
        assert_eq!(d.serving_ns, 250.0);
        // 50,000 packets expected in 10 ms and 3,000 waiting.
        assert!((d.available_ns - 10e6 / 53_000.0).abs() < 1e-6, "{d:?}");
    }

    #[test]
    fn no_relief_below_the_fill_mark_or_when_the_packets_fit() {
        assert_eq!(run(200, 250.0, 2_047), None);
        // Served at 100 ns, arriving every 200: the backlog drains alone.
        assert_eq!(run(200, 100.0, 4_000), None);
    }

    #[test]
    fn each_relief_is_judged_on_packets_served_after_the_last() {
        let mut r = Relief::new(10_000_000);
        let asked: Vec<u64> = (0..1_000u64)
            .filter(|&i| r.served(i * 200, 250.0, 4_000, 4096).is_some())
            .collect();
        assert_eq!(asked, vec![255, 511, 767]);
    }

    #[test]
    fn packets_arriving_together_leave_no_time() {
        let mut r = Relief::new(10_000_000);
        let d = (0..256).find_map(|_| r.served(5, 10.0, 4_000, 4096)).unwrap();
        assert_eq!(d.available_ns, 0.0);
    }
}
