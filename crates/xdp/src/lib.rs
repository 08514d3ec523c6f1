//! Clarion's AF_XDP receive source (Linux).
//!
//! An XDP program ([`XdpProgram`], C source in `bpf/redirect.bpf.c`, the
//! compiled object committed next to it and loaded with aya) is attached to
//! one interface, natively in the driver or generically in the stack
//! ([`XdpMode`]). It redirects every frame of an RX queue to the AF_XDP
//! socket registered for that queue in its XSKMAP, and passes frames of
//! queues without a socket to the kernel stack as usual. Frames redirected to
//! a socket do not reach the kernel stack: capture on a mirror port, a tap,
//! or an interface dedicated to monitoring.
//!
//! One [`XdpSocket`] per RX queue, in copy mode (XDP_COPY; zero-copy needs
//! driver support and is not used). A worker thread owns a socket, waits on
//! it ([`XdpSocket::wait`] or its fd in its own poll loop), and drains it with
//! [`XdpSocket::recv`]. Frames the kernel could not deliver are counted, never
//! silent: [`XdpSocket::stats`] reads XDP_STATISTICS.
//!
//! Needs root, or CAP_NET_ADMIN + CAP_NET_RAW + CAP_BPF (and CAP_IPC_LOCK or
//! a large enough RLIMIT_MEMLOCK for the UMEM); the errors say so.
//!
//! ```no_run
//! # fn main() -> Result<(), clarion_xdp::XdpError> {
//! use clarion_xdp::{XdpConfig, XdpMode, XdpProgram, XdpSocket};
//! use std::time::Duration;
//!
//! let cfg = XdpConfig::default();
//! let prog = XdpProgram::attach("eth0", XdpMode::Native)?;
//! let mut socks = (0..prog.queues())
//!     .map(|q| XdpSocket::open(&prog, q, &cfg))
//!     .collect::<Result<Vec<_>, _>>()?;
//! let sock = &mut socks[0];
//! if sock.wait(Duration::from_millis(100))? {
//!     sock.recv(64, &mut |frame| println!("{} bytes", frame.len()))?;
//! }
//! println!("dropped so far: {}", sock.stats()?.dropped());
//! # Ok(()) }
//! ```

#[cfg(target_os = "linux")]
mod error;
#[cfg(target_os = "linux")]
mod program;
#[cfg(target_os = "linux")]
mod ring;
#[cfg(target_os = "linux")]
mod socket;

#[cfg(target_os = "linux")]
pub use error::XdpError;
#[cfg(target_os = "linux")]
pub use program::{XdpMode, XdpProgram};
#[cfg(target_os = "linux")]
pub use socket::{XdpConfig, XdpSocket, XdpStats};
