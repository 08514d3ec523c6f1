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
    #[error("cannot {what} on {interface}: {source}")]
    Io {
        interface: String,
        what: &'static str,
        #[source]
        source: io::Error,
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
                source: e,
            },
        }
    }
}
