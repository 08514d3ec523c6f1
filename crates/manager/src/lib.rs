//! The event manager's logic, with no I/O: turns a network-wide event into
//! the trigger each host installs, and decides the network-wide event from
//! the hosts' values (Trumpet's event manager, §4 of the paper).
//!
//! - [`split`]: threshold splitting. A network-wide predicate over
//!   aggregates that add up across hosts (sum, count, avg through sum and
//!   count) or combine by max/min becomes a host-local predicate that holds
//!   on at least one host whenever the network-wide one holds, so no
//!   network-wide event can be missed; predicates without that property are
//!   refused with the reason.
//!
//! - [`inventory`]: the hosts and the prefixes each owns; placement of an
//!   event's triggers on the hosts that may see its packets.
//! - [`manager`]: the state machine of satisfaction reports, polls,
//!   answers and decisions (partial ones when hosts do not answer).
//! - [`drill`]: network-wide drill-downs, the instances a fired decision
//!   installs, extends and, once ended, removes.
//! - [`manager_loop`]: the manager's loop over those, once for every
//!   transport: polls outstanding, decisions, drill-downs, reports in
//!   window order, as effects a transport carries out.
//!
//! Transports (in-process in `clarion_network`, NATS in `clarion_nats`)
//! carry its messages; they live elsewhere.

pub mod drill;
mod error;
pub mod inventory;
pub mod manager;
pub mod manager_loop;
pub mod split;

pub use drill::{DrillAction, Firing, Instance};
pub use error::ManagerError;
pub use inventory::{host_name_problem, Host, Inventory, MAX_HOST_NAME_LEN};
pub use manager::{Decision, EventId, HostId, Manager, NetworkEvent, Poll, NETWORK_WORKER};
pub use manager_loop::{Effect, LoopCounters, ManagerLoop};
pub use split::{split, Combine, Split};
