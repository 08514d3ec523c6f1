//! The XDP program: loaded from the committed object, attached to one
//! interface, with the XSKMAP the sockets register in.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use aya::maps::{MapData, XskMap};
use aya::programs::xdp::XdpLinkId;
use aya::programs::{ProgramError, Xdp};
use aya::{Ebpf, EbpfLoader};

use crate::error::{chain_message, errno_in_chain, is_permission, XdpError};

/// The compiled program, 8-byte aligned: the ELF parser reads its headers in
/// place and wants them aligned, which a plain `include_bytes!` does not give.
#[repr(C)]
struct Aligned<A, B: ?Sized> {
    _align: [A; 0],
    bytes: B,
}
static OBJECT: &Aligned<u64, [u8]> = &Aligned {
    _align: [],
    bytes: *include_bytes!("../bpf/redirect.bpf.o"),
};

/// Names inside bpf/redirect.bpf.c.
const PROGRAM_NAME: &str = "clarion_redirect";
const MAP_NAME: &str = "xsks";

/// How the program is attached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum XdpMode {
    /// In the driver (XDP_FLAGS_DRV_MODE): before an skb is built. Needs
    /// driver support (veth, virtio_net, most 10G+ NICs).
    #[default]
    Native,
    /// In the core stack (XDP_FLAGS_SKB_MODE): works on any device, slower.
    Generic,
}

impl XdpMode {
    /// The other mode, for "try the other mode" hints.
    pub fn other(self) -> XdpMode {
        match self {
            XdpMode::Native => XdpMode::Generic,
            XdpMode::Generic => XdpMode::Native,
        }
    }

    fn aya(self) -> aya::programs::XdpMode {
        match self {
            XdpMode::Native => aya::programs::XdpMode::Driver,
            XdpMode::Generic => aya::programs::XdpMode::Skb,
        }
    }
}

impl fmt::Display for XdpMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
        })
    }
}

/// The redirect program attached to one interface.
///
/// Sockets opened on it ([`crate::XdpSocket::open`]) share its state, so the
/// order on drop is fixed whatever order the owners drop in: each socket
/// removes its queue's entry from the XSKMAP and closes; the program is
/// detached and unloaded only when the `XdpProgram` *and* every socket opened
/// on it are gone. Dropping the `XdpProgram` while worker threads still own
/// sockets therefore leaves the program attached until the last socket drops.
pub struct XdpProgram {
    shared: Arc<Shared>,
}

/// What the program and its sockets share.
pub(crate) struct Shared {
    pub(crate) interface: String,
    pub(crate) ifindex: u32,
    pub(crate) queues: u32,
    pub(crate) mode: XdpMode,
    state: Mutex<State>,
}

struct State {
    /// The XSKMAP, taken out of `ebpf` (which would otherwise own it).
    map: XskMap<MapData>,
    /// Queues that have a socket of ours.
    in_use: BTreeSet<u32>,
    ebpf: Ebpf,
    link: Option<XdpLinkId>,
}

impl XdpProgram {
    /// Loads the redirect program and attaches it to `interface` in `mode`.
    pub fn attach(interface: &str, mode: XdpMode) -> Result<Self, XdpError> {
        let ifindex = ifindex(interface)?;
        let queues =
            rx_queues(&Path::new("/sys/class/net").join(interface).join("queues")).map_err(|source| {
                XdpError::Sys {
                    op: "reading the interface's RX queues from /sys",
                    error: source,
                }
            })?;

        let mut ebpf = EbpfLoader::new()
            .map_max_entries(MAP_NAME, queues.max(1))
            .load(&OBJECT.bytes)
            .map_err(|e| load_error("loading the XDP program (BPF_PROG_LOAD/BPF_MAP_CREATE)", &e))?;
        let map = ebpf
            .take_map(MAP_NAME)
            .ok_or_else(|| XdpError::Load(format!("no map {MAP_NAME}")))?;
        let map = XskMap::try_from(map).map_err(|e| load_error("the XSKMAP", &e))?;
        let program: &mut Xdp = ebpf
            .program_mut(PROGRAM_NAME)
            .ok_or_else(|| XdpError::Load(format!("no program {PROGRAM_NAME}")))?
            .try_into()
            .map_err(|e: ProgramError| load_error("the XDP program", &e))?;
        program
            .load()
            .map_err(|e| load_error("loading the XDP program (BPF_PROG_LOAD)", &e))?;
        let link = program
            .attach_to_if_index(ifindex, mode.aya())
            .map_err(|e| attach_error(interface, mode, &e))?;

        Ok(XdpProgram {
            shared: Arc::new(Shared {
                interface: interface.to_owned(),
                ifindex,
                queues,
                mode,
                state: Mutex::new(State {
                    map,
                    in_use: BTreeSet::new(),
                    ebpf,
                    link: Some(link),
                }),
            }),
        })
    }

    /// The device's RX queues (from /sys/class/net/IF/queues): sockets can be
    /// opened for queues `0..queues()`.
    pub fn queues(&self) -> u32 {
        self.shared.queues
    }

    /// The interface the program is attached to.
    pub fn interface(&self) -> &str {
        &self.shared.interface
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.shared.ifindex
    }

    /// The attach mode.
    pub fn mode(&self) -> XdpMode {
        self.shared.mode
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl fmt::Debug for XdpProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdpProgram")
            .field("interface", &self.shared.interface)
            .field("mode", &self.shared.mode)
            .field("queues", &self.shared.queues)
            .finish()
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave State inconsistent
        // (each operation is one map call plus one set update), so a poisoned
        // lock is used as is.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Claims `queue` for a new socket.
    pub(crate) fn claim(&self, queue: u32) -> Result<(), XdpError> {
        if queue >= self.queues {
            return Err(XdpError::NoSuchQueue {
                interface: self.interface.clone(),
                queue,
                queues: self.queues,
            });
        }
        if !self.state().in_use.insert(queue) {
            return Err(XdpError::QueueBusy {
                interface: self.interface.clone(),
                queue,
            });
        }
        Ok(())
    }

    /// Gives up a claim (the socket failed to open, or was dropped).
    pub(crate) fn unclaim(&self, queue: u32) {
        self.state().in_use.remove(&queue);
    }

    /// Points the program at the socket for `queue`.
    pub(crate) fn register(&self, queue: u32, fd: std::os::fd::BorrowedFd<'_>) -> Result<(), XdpError> {
        self.state().map.set(queue, fd, 0).map_err(|e| {
            if is_permission(errno_in_chain(&e)) {
                XdpError::Permission {
                    op: "updating the XSKMAP",
                    source: std::io::Error::other(e),
                }
            } else {
                XdpError::Map {
                    queue,
                    reason: chain_message(&e),
                }
            }
        })
    }

    /// Removes `queue`'s socket from the map (frames on the queue go back to
    /// XDP_PASS). Errors are ignored: closing the socket removes it from the
    /// map in the kernel anyway.
    pub(crate) fn unregister(&self, queue: u32) {
        let _ = self.state().map.unset(queue);
    }
}

impl Drop for Shared {
    /// Runs after the last socket dropped (each holds an `Arc<Shared>`):
    /// detach, then unload the program and close the map with `ebpf`/`map`.
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(link) = state.link.take() {
            if let Some(program) = state.ebpf.program_mut(PROGRAM_NAME) {
                let program: Result<&mut Xdp, _> = program.try_into();
                if let Ok(program) = program {
                    // A failed detach has nowhere to go; aya's own drop of the
                    // link (with `ebpf`) retries it.
                    let _ = program.detach(link);
                }
            }
        }
    }
}

/// The index of `interface`, or `NoSuchInterface`.
pub(crate) fn ifindex(interface: &str) -> Result<u32, XdpError> {
    let missing = || XdpError::NoSuchInterface(interface.to_owned());
    if interface.is_empty() || interface.len() >= libc::IFNAMSIZ {
        return Err(missing());
    }
    let name = CString::new(interface).map_err(|_| missing())?;
    // SAFETY: `name` is a valid NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return Err(missing());
    }
    Ok(index)
}

/// Counts the `rx-N` entries of a /sys/class/net/IF/queues directory.
pub(crate) fn rx_queues(dir: &Path) -> std::io::Result<u32> {
    let mut n = 0u32;
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if name.strip_prefix("rx-").is_some_and(|q| q.parse::<u32>().is_ok()) {
            n = n.saturating_add(1);
        }
    }
    Ok(n.max(1))
}

fn load_error(what: &str, e: &(dyn std::error::Error + 'static)) -> XdpError {
    if is_permission(errno_in_chain(e)) {
        XdpError::Permission {
            op: "loading the XDP program",
            source: std::io::Error::other(chain_message(e)),
        }
    } else {
        XdpError::Load(format!("{what}: {}", chain_message(e)))
    }
}

fn attach_error(interface: &str, mode: XdpMode, e: &ProgramError) -> XdpError {
    let errno = errno_in_chain(e);
    let reason = chain_message(e);
    match errno {
        _ if is_permission(errno) => XdpError::Permission {
            op: "attaching the XDP program",
            source: std::io::Error::other(reason),
        },
        Some(libc::ENODEV) => XdpError::NoSuchInterface(interface.to_owned()),
        // EOPNOTSUPP: the driver has no native XDP (or generic is refused);
        // EINVAL/ERANGE/ENOSPC: the device's configuration (MTU, queue
        // counts, offloads) rules the mode out.
        Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ERANGE | libc::ENOSPC) => XdpError::ModeUnsupported {
            interface: interface.to_owned(),
            mode,
            other: mode.other(),
            reason,
        },
        Some(libc::EBUSY | libc::EEXIST) => XdpError::Attach {
            interface: interface.to_owned(),
            mode,
            reason: format!("{reason} (another XDP program, or one in the other mode, is attached)"),
        },
        _ => XdpError::Attach {
            interface: interface.to_owned(),
            mode,
            reason,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_malformed_interfaces_are_no_such_interface() {
        for name in [
            "",
            "cxdp-definitely-not-here",
            "a\0b",
            "waytoolongnameforaninterface",
        ] {
            match ifindex(name) {
                Err(XdpError::NoSuchInterface(n)) => assert_eq!(n, name),
                other => panic!("{name:?}: {other:?}"),
            }
        }
        assert!(ifindex("lo").is_ok());
    }

    #[test]
    fn rx_queues_counts_rx_entries_only() {
        let dir = std::env::temp_dir().join(format!("clarion-xdp-queues-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for d in ["rx-0", "rx-1", "rx-2", "tx-0", "tx-1", "rx-x"] {
            std::fs::create_dir_all(dir.join(d)).expect("mkdir");
        }
        assert_eq!(rx_queues(&dir).expect("count"), 3);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(rx_queues(&dir).is_err());
    }

    #[test]
    fn the_object_is_a_bpf_elf_with_the_program_and_map() {
        let b = &OBJECT.bytes;
        assert_eq!(b.get(..4), Some(&b"\x7fELF"[..]));
        // e_machine (little-endian u16 at 18) is EM_BPF.
        assert_eq!(b.get(18..20), Some(&247u16.to_le_bytes()[..]));
        let strings = String::from_utf8_lossy(b);
        assert!(strings.contains(PROGRAM_NAME) && strings.contains(MAP_NAME));
        assert_eq!(
            (OBJECT as *const Aligned<u64, [u8]>).cast::<u8>().align_offset(8),
            0
        );
    }

    #[test]
    fn modes_name_each_other() {
        assert_eq!(XdpMode::Native.other(), XdpMode::Generic);
        assert_eq!(XdpMode::Generic.other().to_string(), "native");
    }
}
