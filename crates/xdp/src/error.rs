//! The crate's one error type, and the mapping of OS errors onto it.

use std::io;

use crate::XdpMode;

/// What the capabilities message says, in one place.
pub(crate) const NEEDS_CAPS: &str = "AF_XDP needs root or CAP_NET_ADMIN+CAP_NET_RAW+CAP_BPF";

/// Everything that can go wrong attaching the program or using a socket.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    /// The process lacks a capability (EPERM/EACCES from the kernel).
    #[error("{op}: permission denied; {NEEDS_CAPS}")]
    Permission {
        /// The operation that was refused.
        op: &'static str,
        #[source]
        source: io::Error,
    },

    /// The interface does not exist (in this network namespace).
    #[error("no such interface {0}")]
    NoSuchInterface(String),

    /// The device (or kernel) refuses this attach mode.
    #[error("{interface} does not support {mode} XDP ({reason}); try {other} mode")]
    ModeUnsupported {
        interface: String,
        mode: XdpMode,
        other: XdpMode,
        reason: String,
    },

    /// Attaching failed for another reason (e.g. another XDP program is attached).
    #[error("attaching XDP ({mode} mode) to {interface} failed: {reason}")]
    Attach {
        interface: String,
        mode: XdpMode,
        reason: String,
    },

    /// Loading the XDP program into the kernel failed.
    #[error("loading the XDP program failed: {0}")]
    Load(String),

    /// The kernel has no AF_XDP support.
    #[error("this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS); needs Linux >= 5.4")]
    Unsupported,

    /// An `XdpConfig` field is out of range.
    #[error("invalid XDP configuration: {0}")]
    InvalidConfig(String),

    /// The queue is not one of the device's RX queues.
    #[error("{interface} has {queues} RX queue(s); queue {queue} does not exist")]
    NoSuchQueue {
        interface: String,
        queue: u32,
        queues: u32,
    },

    /// This program already has a socket on the queue, or another AF_XDP socket
    /// (another process) is bound to it.
    #[error("RX queue {queue} of {interface} already has an AF_XDP socket")]
    QueueBusy { interface: String, queue: u32 },

    /// Registering the UMEM exceeded RLIMIT_MEMLOCK (without CAP_IPC_LOCK).
    #[error(
        "registering the {bytes}-byte UMEM exceeds RLIMIT_MEMLOCK; raise it (ulimit -l), \
         grant CAP_IPC_LOCK, or use fewer/smaller frames"
    )]
    Memlock {
        bytes: u64,
        #[source]
        source: io::Error,
    },

    /// Registering the socket in the program's XSKMAP failed.
    #[error("registering the socket for queue {queue} in the XSKMAP failed: {reason}")]
    Map { queue: u32, reason: String },

    /// Any other failed system call. The OS error's text is in the
    /// message, so it is not also the error's source (said once in a chain).
    #[error("{op} failed: {error}")]
    Sys { op: &'static str, error: io::Error },
}

impl XdpError {
    /// EPERM/EACCES become [`XdpError::Permission`], anything else [`XdpError::Sys`].
    pub(crate) fn sys(op: &'static str, source: io::Error) -> Self {
        if is_permission(source.raw_os_error()) {
            XdpError::Permission { op, source }
        } else {
            XdpError::Sys { op, error: source }
        }
    }

    /// The last OS error of a failed call, classified as in [`XdpError::sys`].
    pub(crate) fn last_os(op: &'static str) -> Self {
        Self::sys(op, io::Error::last_os_error())
    }

    /// True for [`XdpError::Permission`].
    pub fn is_permission(&self) -> bool {
        matches!(self, XdpError::Permission { .. })
    }
}

pub(crate) fn is_permission(errno: Option<i32>) -> bool {
    matches!(errno, Some(libc::EPERM) | Some(libc::EACCES))
}

/// The first OS error number found along an error's source chain (aya wraps
/// the `io::Error` of the failed syscall a level or two down).
pub(crate) fn errno_in_chain(err: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            if let Some(n) = io.raw_os_error() {
                return Some(n);
            }
        }
        if let Some(nl) = e.downcast_ref::<aya::sys::NetlinkError>() {
            if let Some(n) = nl.raw_os_error() {
                return Some(n);
            }
        }
        cur = e.source();
    }
    None
}

/// An error and its sources on one line: "a: b: c".
pub(crate) fn chain_message(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !out.ends_with(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eperm_and_eacces_are_permission_errors() {
        for n in [libc::EPERM, libc::EACCES] {
            let e = XdpError::sys("socket(AF_XDP)", io::Error::from_raw_os_error(n));
            assert!(e.is_permission());
            let msg = e.to_string();
            assert!(msg.contains("root or CAP_NET_ADMIN+CAP_NET_RAW+CAP_BPF"), "{msg}");
        }
        let e = XdpError::sys("bind", io::Error::from_raw_os_error(libc::EINVAL));
        assert!(!e.is_permission());
    }

    #[test]
    fn a_failed_call_says_its_os_error_once() {
        let e = XdpError::sys("bind", io::Error::from_raw_os_error(libc::ENODEV));
        assert_eq!(
            e.to_string(),
            format!("bind failed: {}", io::Error::from_raw_os_error(libc::ENODEV))
        );
        // Its source would repeat the text in `{:#}` and in chain_message.
        assert!(std::error::Error::source(&e).is_none());
    }

    #[test]
    fn errno_is_found_down_the_chain() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] io::Error);
        let e = Outer(io::Error::from_raw_os_error(libc::EPERM));
        assert_eq!(errno_in_chain(&e), Some(libc::EPERM));
        assert_eq!(
            chain_message(&e),
            format!("outer: {}", io::Error::from_raw_os_error(libc::EPERM))
        );
    }

    #[test]
    fn messages_name_the_interface_and_the_other_mode() {
        assert_eq!(
            XdpError::NoSuchInterface("nope0".into()).to_string(),
            "no such interface nope0"
        );
        let e = XdpError::ModeUnsupported {
            interface: "eth0".into(),
            mode: XdpMode::Native,
            other: XdpMode::Generic,
            reason: "Operation not supported".into(),
        };
        assert!(e.to_string().contains("try generic mode"), "{e}");
    }
}
