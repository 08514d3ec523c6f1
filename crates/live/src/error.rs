//! The one error type of live capture.

use std::fmt;
use std::io;
use std::time::Duration;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum LiveError {
    #[error("no such interface `{0}` (see `ip link` for the interfaces here)")]
    NoInterface(String),
    #[error(
        "cannot {what} on {interface}: permission denied; run as root or grant the binary \
         CAP_NET_RAW and CAP_NET_ADMIN (setcap cap_net_raw,cap_net_admin+ep $(which clarion))"
    )]
    Permission { interface: String, what: &'static str },
    /// The OS error's text is in the message, so it is not also the
    /// error's source: a chain printed in full (`{:#}`) says it once.
    #[error("cannot {what} on {interface}: {error}")]
    Io {
        interface: String,
        what: &'static str,
        error: io::Error,
    },
    #[error("interface {interface} has link type {arphrd} (from /sys/class/net/{interface}/type), which Clarion cannot parse; supported: Ethernet, loopback, raw IP (tun)")]
    LinkType { interface: String, arphrd: u32 },
    #[error("{0}")]
    Down(InterfaceLost),
    #[error("cannot capture on {interface} again: {why}")]
    Reopened { interface: String, why: String },
    #[error("invalid ring settings: {0}")]
    Ring(String),
    #[cfg(feature = "xdp")]
    #[error(transparent)]
    Xdp(#[from] clarion_xdp::XdpError),
    #[error("capture filter `{filter}`: {why}")]
    Filter { filter: String, why: String },
    /// What the worker drives beside its monitor failed (a sink, a thread).
    #[error(transparent)]
    Chain(Box<dyn std::error::Error + Send + Sync>),
}

/// An interface down (or removed) for longer than a worker waits for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceLost {
    pub interface: String,
    /// Removed, rather than set down or without carrier.
    pub gone: bool,
    pub down_for: Duration,
    pub timeout: Duration,
    /// Why capturing on it again failed, if it came back and that was tried.
    pub why: Option<String>,
}

impl fmt::Display for InterfaceLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "interface {} {} {} ago and was not back within the down timeout ({})",
            self.interface,
            if self.gone { "was removed" } else { "went down" },
            secs(self.down_for),
            secs(self.timeout)
        )?;
        match &self.why {
            Some(why) => write!(f, "; {why}"),
            None => Ok(()),
        }
    }
}

/// "1.0 s", "250 ms".
pub(crate) fn secs(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

impl LiveError {
    /// Wraps an OS error, turning EPERM/EACCES into the capability hint and ENODEV into "no such interface".
    pub(crate) fn os(interface: &str, what: &'static str, e: io::Error) -> LiveError {
        match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => LiveError::Permission {
                interface: interface.to_string(),
                what,
            },
            Some(libc::ENODEV) | Some(libc::ENXIO) => LiveError::NoInterface(interface.to_string()),
            _ => LiveError::Io {
                interface: interface.to_string(),
                what,
                error: e,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interface_not_back_in_time_says_how_long_it_waited() {
        let e = LiveError::Down(InterfaceLost {
            interface: "eth1".into(),
            gone: true,
            down_for: Duration::from_millis(1_040),
            timeout: Duration::from_secs(1),
            why: None,
        });
        assert_eq!(
            e.to_string(),
            "interface eth1 was removed 1.0 s ago and was not back within the down timeout (1.0 s)"
        );
        let e = LiveError::Down(InterfaceLost {
            interface: "eth1".into(),
            gone: false,
            down_for: Duration::ZERO,
            timeout: Duration::ZERO,
            why: Some("cannot capture on eth1 again: it came back with another link type".into()),
        });
        assert!(
            e.to_string().starts_with("interface eth1 went down 0 ms ago"),
            "{e}"
        );
        assert!(e.to_string().ends_with("another link type"), "{e}");
    }

    /// Issue 18: "No such device (os error 19): No such device (os error 19)".
    #[test]
    fn an_os_error_is_said_once_in_the_chain() {
        for errno in [libc::ENODEV, libc::EIO, libc::ENETDOWN] {
            let os = io::Error::from_raw_os_error(errno).to_string();
            let e = LiveError::os("eth9", "bind", io::Error::from_raw_os_error(errno));
            let mut chain = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                chain.push_str(&format!(": {c}"));
                cause = c.source();
            }
            assert!(chain.matches(&os).count() <= 1, "{chain}");
        }
        let e = LiveError::os("eth9", "bind", io::Error::from_raw_os_error(libc::EIO));
        assert_eq!(
            e.to_string(),
            format!("cannot bind on eth9: {}", io::Error::from_raw_os_error(libc::EIO))
        );
    }
}
