//! Interfaces by name: index and link type, and whether one is up.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

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

/// What [`LinkWatch::state`] found of an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// Administratively up with its lower layer up (IFF_UP and IFF_RUNNING:
    /// operstate up, or unknown as on loopback and tun).
    Up,
    /// Set down, or without carrier.
    Down,
    /// No interface of that name any more.
    Gone,
    /// An interface of that name with another index: the one captured was
    /// removed and another created under its name (`up` as for [`LinkState::Up`]).
    Replaced { index: u32, up: bool },
}

/// Asks the kernel about one interface by name (SIOCGIFINDEX, SIOCGIFFLAGS
/// and its carrier in sysfs: a few system calls, no lock the packet path
/// takes), so a worker can check it every 100 ms. A packet socket learns of an
/// interface going down (ENETDOWN) but not of lost carrier, nor of it
/// coming back; this does.
#[derive(Debug)]
pub struct LinkWatch {
    name: String,
    /// The index captured.
    index: u32,
    /// Any socket takes the interface ioctls; a Unix one needs no privilege.
    sock: OwnedFd,
}

impl LinkWatch {
    pub fn new(name: &str, index: u32) -> Result<LinkWatch, LiveError> {
        // SAFETY: plain system call.
        let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(LiveError::os(
                name,
                "open a socket to watch the interface",
                io::Error::last_os_error(),
            ));
        }
        Ok(LinkWatch {
            name: name.to_string(),
            index,
            // SAFETY: `raw` is a fresh descriptor that nothing else owns.
            sock: unsafe { OwnedFd::from_raw_fd(raw) },
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The index now captured (after the capture was opened anew on a re-created interface).
    pub fn set_index(&mut self, index: u32) {
        self.index = index;
    }

    /// The carrier as the device has it now. IFF_RUNNING follows the
    /// operational state, which the kernel updates from the carrier up to a
    /// second late (linkwatch); `None` when sysfs does not say.
    fn carrier(&self) -> Option<bool> {
        let text = std::fs::read_to_string(format!("/sys/class/net/{}/carrier", self.name)).ok()?;
        match text.trim() {
            "1" => Some(true),
            "0" => Some(false),
            _ => None,
        }
    }

    pub fn state(&self) -> LinkState {
        // SAFETY: an all-zero ifreq is valid (an empty name, a zero union).
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        let name = self.name.as_bytes();
        if name.len() >= req.ifr_name.len() {
            return LinkState::Gone;
        }
        for (d, &b) in req.ifr_name.iter_mut().zip(name) {
            *d = b as libc::c_char;
        }
        let fd = self.sock.as_raw_fd();
        // SAFETY: `req` is a valid ifreq with a NUL-terminated name; the kernel writes the union.
        if unsafe { libc::ioctl(fd, libc::SIOCGIFINDEX, &mut req) } != 0 {
            return LinkState::Gone;
        }
        // SAFETY: SIOCGIFINDEX wrote the index member.
        let index = unsafe { req.ifr_ifru.ifru_ifindex } as u32;
        // SAFETY: as above; SIOCGIFFLAGS writes the flags member.
        if unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) } != 0 {
            return LinkState::Gone;
        }
        // SAFETY: SIOCGIFFLAGS wrote the flags member.
        let flags = i32::from(unsafe { req.ifr_ifru.ifru_flags }) & 0xffff;
        let up = flags & libc::IFF_UP != 0 && self.carrier().unwrap_or(flags & libc::IFF_RUNNING != 0);
        match (index == self.index, up) {
            (false, up) => LinkState::Replaced { index, up },
            (true, true) => LinkState::Up,
            (true, false) => LinkState::Down,
        }
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

    #[test]
    fn loopback_is_up_and_missing_or_renumbered_interfaces_are_told_apart() {
        let lo = Interface::lookup("lo").expect("lo");
        let watch = LinkWatch::new("lo", lo.index).expect("a unix socket");
        // lo may be down in a fresh namespace; it is never gone.
        assert!(matches!(watch.state(), LinkState::Up | LinkState::Down));
        let other = LinkWatch::new("lo", lo.index + 1000).expect("a unix socket");
        assert!(
            matches!(other.state(), LinkState::Replaced { index, .. } if index == lo.index),
            "{:?}",
            other.state()
        );
        let gone = LinkWatch::new("clarion-no-such0", 7).expect("a unix socket");
        assert_eq!(gone.state(), LinkState::Gone);
        let long = LinkWatch::new("a-name-longer-than-ifnamsiz", 7).expect("a unix socket");
        assert_eq!(long.state(), LinkState::Gone);
    }
}
