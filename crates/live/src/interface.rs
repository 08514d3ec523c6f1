//! Interfaces by name: index and link type.

use std::ffi::CString;

use clarion_wire::LinkType;

use crate::LiveError;

/// A network interface of this namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub index: u32,
    pub link: LinkType,
    /// The loopback device: a packet socket sees each packet twice there
    /// (sent, then received), so the sent copy is skipped, as libpcap does.
    pub loopback: bool,
}

// ARPHRD_* of <linux/if_arp.h> that Clarion parses.
const ARPHRD_ETHER: u32 = 1;
const ARPHRD_LOOPBACK: u32 = 772;
const ARPHRD_NONE: u32 = 65534;

impl Interface {
    pub fn lookup(name: &str) -> Result<Interface, LiveError> {
        let c = CString::new(name).map_err(|_| LiveError::NoInterface(name.to_string()))?;
        // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
        let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
        if index == 0 {
            return Err(LiveError::NoInterface(name.to_string()));
        }
        let path = format!("/sys/class/net/{name}/type");
        let arphrd: u32 = std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| LiveError::NoInterface(name.to_string()))?;
        let link = link_type(arphrd).ok_or_else(|| LiveError::LinkType {
            interface: name.to_string(),
            arphrd,
        })?;
        Ok(Interface {
            name: name.to_string(),
            index,
            link,
            loopback: arphrd == ARPHRD_LOOPBACK,
        })
    }
}

/// The frame format a packet socket delivers for an ARPHRD type
/// (the loopback device carries a zeroed Ethernet header).
pub fn link_type(arphrd: u32) -> Option<LinkType> {
    match arphrd {
        ARPHRD_ETHER | ARPHRD_LOOPBACK => Some(LinkType::Ethernet),
        ARPHRD_NONE => Some(LinkType::RawIp),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_ethernet_framed_and_missing_interfaces_are_named() {
        match Interface::lookup("lo") {
            Ok(lo) => assert_eq!(lo.link, LinkType::Ethernet),
            Err(e) => panic!("lo: {e}"),
        }
        let e = Interface::lookup("clarion-no-such0").expect_err("missing interface");
        assert_eq!(
            e.to_string(),
            LiveError::NoInterface("clarion-no-such0".into()).to_string()
        );
        assert!(Interface::lookup("bad\0name").is_err());
        assert_eq!(link_type(24), None);
    }
}
