//! The time available per packet in the next window (MONA §IV-B).
//!
//! # What?
//!
//! The next window must take the packets expected to arrive in it and the
//! backlog waiting at its start: `available = window / (expected +
//! backlog)`, what Eq. 4 solves for (MONA's `1/λ_pkt`, with the queue).
//!
//! # The forecast
//!
//! - [`Forecast::Last`] (MONA): the last window's arrivals.
//! - [`Forecast::Rise`] (ours, the default): the last window's arrivals
//!   plus its rise over the window before, `last + max(0, last −
//!   previous)`. On a rising load the last window's count is always short
//!   by the rise, which the queue then absorbs or drops; a falling load is
//!   not extrapolated, so flows get their events back no faster than the
//!   load leaves. On MONA's sine (period 250 ms, 0–2× the sustainable
//!   rate, a 4,096-packet ring) it took the simulated drops from 304k to
//!   105k (docs/performance.md, "Overload and adaptation").
//!
//! # Cost
//!
//! A few integer operations per window.

/// How the next window's arrivals are expected (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Forecast {
    Last,
    #[default]
    Rise,
}

/// The forecast's memory between windows.
#[derive(Clone, Copy, Debug, Default)]
pub struct Budget {
    forecast: Forecast,
    previous: Option<u64>,
}

impl Budget {
    pub fn new(forecast: Forecast) -> Self {
        Budget {
            forecast,
            previous: None,
        }
    }

    /// Folds in a window of `window_ns` that brought `arrivals` packets
    /// (processed and dropped) and left `backlog` waiting; returns the time
    /// available per packet in the next window, ns (infinite when nothing
    /// is expected).
    pub fn after_window(&mut self, window_ns: u64, arrivals: u64, backlog: u64) -> f64 {
        let previous = self.previous.replace(arrivals);
        let expected = match (self.forecast, previous) {
            (Forecast::Rise, Some(p)) => arrivals + arrivals.saturating_sub(p),
            _ => arrivals,
        };
        let packets = expected.saturating_add(backlog);
        if packets == 0 {
            f64::INFINITY
        } else {
            window_ns as f64 / packets as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_is_monas_rise_adds_only_rises() {
        let mut last = Budget::new(Forecast::Last);
        let mut rise = Budget::new(Forecast::Rise);
        let w = 10_000_000;
        // First window: no history, both expect it again.
        assert_eq!(last.after_window(w, 1_000, 0), 10_000.0);
        assert_eq!(rise.after_window(w, 1_000, 0), 10_000.0);
        // A rise of 500: Rise expects 2,000.
        assert_eq!(last.after_window(w, 1_500, 0), w as f64 / 1_500.0);
        assert_eq!(rise.after_window(w, 1_500, 0), w as f64 / 2_000.0);
        // A fall: neither extrapolates it.
        assert_eq!(last.after_window(w, 1_200, 0), w as f64 / 1_200.0);
        assert_eq!(rise.after_window(w, 1_200, 0), w as f64 / 1_200.0);
        // The backlog counts; nothing at all is infinite time.
        assert_eq!(rise.after_window(w, 1_200, 800), w as f64 / 2_000.0);
        assert_eq!(rise.after_window(w, 0, 0), f64::INFINITY);
    }
}
