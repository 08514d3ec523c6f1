//! Test support for holding the monitor to the reference evaluator:
//! proptest strategies for events ([`arb_events`]) and traffic
//! ([`arb_traffic`], random frames and TCP connections played by both
//! ends), and the bridge from generated frames to the reference's inputs
//! ([`parse_traffic`]).
//!
//! Events and traffic draw on the same small pools ([`pool`]) so that
//! filters match, groups collide and predicates fire often but not always.

pub mod connection;
pub mod events;
pub mod pool;
pub mod traffic;

pub use events::{
    arb_drill_down_events, arb_events, arb_expr, arb_filters, arb_granularity, arb_pred, arb_tcp_pred,
};
pub use traffic::{
    arb_traffic, arb_traffic_with, expected_inputs, parse_traffic, Content, Frame, FramePlan, Traffic,
    TEST_BURST_GAP_NS, TEST_FLOW_TIMEOUT_NS,
};
