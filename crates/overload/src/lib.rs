//! Reproducible overload: paced packet arrivals through a bounded ring,
//! simulated deterministically (MONA, §VI-A).
//!
//! # What?
//!
//! MONA's evaluation drives a monitor with a sine-shaped packet rate (0 to
//! 14.8 Mpps) into a 4,096-packet ring and reports, per 10 ms window, the
//! *packet balance* and the packets lost. This crate reproduces that setup
//! without a NIC, a clock or a thread: arrival times come from a generator
//! ([`arrivals`]), a single FIFO server with a bounded waiting ring serves
//! them in simulated time ([`queue::simulate`]), and the caller's
//! [`Server`] says how long each packet takes (e.g. the monitor's predicted
//! service time) and is told each window's figures so it can adapt.
//!
//! # Invariants
//!
//! - No I/O, no clocks, no randomness: the same arrivals, ring, window and
//!   server give the same [`Run`], call for call.
//! - No packet is invented or lost by the simulator: every arrival is
//!   either served once or dropped once (`arrivals = served + dropped` in
//!   [`Totals`]), and the server hears of each in arrival order.
//!
//! # Cost
//!
//! `simulate` is O(1) per arrival, per departure and per window, plus the
//! server's own work; memory is the ring's occupancy (at most
//! `ring_capacity` arrival times) and one [`WindowStats`] per window.
//! Generators: see each one's doc ([`Sine`] inverts its rate integral
//! numerically, a few cosine evaluations per arrival).

pub mod arrivals;
mod error;
pub mod queue;

pub use arrivals::{Constant, Recorded, Sine};
pub use error::OverloadError;
pub use queue::{simulate, Run, Server, Totals, WindowStats};
