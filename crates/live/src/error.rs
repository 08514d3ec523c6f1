//! The one error type of live capture.

use std::io;

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
    #[error("interface {0} went down or was removed while capturing (nothing it carried since was seen)")]
    Down(String),
    #[error("invalid ring settings: {0}")]
    Ring(String),
    #[error(transparent)]
    Xdp(#[from] clarion_xdp::XdpError),
    #[error("capture filter `{filter}`: {why}")]
    Filter { filter: String, why: String },
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
