//! One AF_XDP socket in copy mode, bound to one RX queue.

use std::fmt;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use crate::error::XdpError;
use crate::program::{Shared, XdpMode, XdpProgram};
use crate::ring::{Consumer, Producer, RawRing};

/// Sizes of one socket's memory. The defaults (2 KiB frames, 4096 of them,
/// an RX ring of 2048) take 8 MiB of UMEM per queue and hold frames up to
/// 1792 bytes (the kernel keeps 256 bytes of headroom in each frame), which
/// covers a 1500-byte MTU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdpConfig {
    /// The attach mode, for callers that build one config for
    /// [`XdpProgram::attach`] and [`XdpSocket::open`]; sockets ignore it.
    pub mode: XdpMode,
    /// Bytes per UMEM frame: a power of two from 2048 to the page size.
    pub frame_size: u32,
    /// UMEM frames; also the fill ring's size, so a power of two.
    pub frames: u32,
    /// RX ring entries: a power of two.
    pub ring_size: u32,
}

impl Default for XdpConfig {
    fn default() -> Self {
        XdpConfig {
            mode: XdpMode::Native,
            frame_size: 2048,
            frames: 4096,
            ring_size: 2048,
        }
    }
}

/// Kernel headroom in front of every frame's data (XDP_PACKET_HEADROOM).
const XDP_PACKET_HEADROOM: u32 = 256;
/// Largest ring / frame count accepted (2^20 frames of 2 KiB = 2 GiB).
const MAX_ENTRIES: u32 = 1 << 20;
/// The completion ring is required by bind but unused by a receive-only socket.
const COMPLETION_RING_SIZE: u32 = 64;

impl XdpConfig {
    /// Checks every field; `page_size` is the system's.
    pub fn validate(&self, page_size: u32) -> Result<(), XdpError> {
        let bad = |s: String| Err(XdpError::InvalidConfig(s));
        if !self.frame_size.is_power_of_two() || self.frame_size < 2048 || self.frame_size > page_size {
            return bad(format!(
                "frame_size {} must be a power of two from 2048 to the page size {page_size}",
                self.frame_size
            ));
        }
        for (name, v) in [("frames", self.frames), ("ring_size", self.ring_size)] {
            if !v.is_power_of_two() || v > MAX_ENTRIES {
                return bad(format!(
                    "{name} {v} must be a power of two from 1 to {MAX_ENTRIES}"
                ));
            }
        }
        Ok(())
    }

    /// The largest frame a socket with this config receives whole; longer
    /// frames are dropped by the kernel and counted in `rx_dropped`.
    pub fn max_frame_len(&self) -> u32 {
        self.frame_size.saturating_sub(XDP_PACKET_HEADROOM)
    }

    fn umem_len(&self) -> Result<usize, XdpError> {
        usize::try_from(u64::from(self.frames) * u64::from(self.frame_size))
            .map_err(|_| XdpError::InvalidConfig(format!("a UMEM of {} frames does not fit", self.frames)))
    }
}

/// Cumulative counters of one socket: the kernel's XDP_STATISTICS plus the
/// descriptors this side had to discard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpStats {
    /// Frames the kernel dropped before the RX ring: no free frame in the
    /// fill ring (also counted in `rx_fill_ring_empty_descs`), or a frame
    /// longer than [`XdpConfig::max_frame_len`].
    pub rx_dropped: u64,
    /// Invalid descriptors the kernel saw on the RX side.
    pub rx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full (the consumer was slow).
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty (a cause of `rx_dropped`).
    pub rx_fill_ring_empty_descs: u64,
    /// RX descriptors pointing outside the UMEM, discarded here (a kernel bug
    /// if ever non-zero).
    pub malformed_descs: u64,
}

impl XdpStats {
    /// Frames lost on this socket, all causes: `rx_dropped + rx_ring_full +
    /// rx_invalid_descs + malformed_descs` (`rx_fill_ring_empty_descs` is a
    /// cause already inside `rx_dropped`).
    pub fn dropped(&self) -> u64 {
        self.rx_dropped
            .saturating_add(self.rx_ring_full)
            .saturating_add(self.rx_invalid_descs)
            .saturating_add(self.malformed_descs)
    }
}

/// An AF_XDP socket on one RX queue of the program's interface, in copy mode
/// (XDP_COPY), registered in the program's XSKMAP so the program redirects
/// the queue's frames to it.
///
/// Not shared between threads; `Send`, so a worker thread can own it.
/// On drop: its XSKMAP entry is removed (the queue's frames go back to
/// XDP_PASS), the socket is closed, its memory unmapped, and its share of the
/// program released (the program detaches after its last socket and the
/// [`XdpProgram`] are gone).
pub struct XdpSocket {
    // Field order is drop order (after `Drop::drop` unregistered the socket):
    // close the fd and unmap its memory, then give the queue claim back.
    io: Io,
    claim: Claim,
}

/// The socket proper: fd, rings, UMEM.
struct Io {
    // Field order is drop order: close the fd, then unmap the rings and UMEM.
    fd: OwnedFd,
    rx: Consumer<libc::xdp_desc>,
    fill: Producer<u64>,
    _rx_map: Mmap,
    _fill_map: Mmap,
    umem: Mmap,
    /// Frame addresses received and waiting for room in the fill ring.
    pending: Vec<u64>,
    frame_size: u32,
    malformed: u64,
}

/// How long `open` retries a queue the kernel still reports busy: it
/// releases a closed socket's queue from a work queue, a moment later.
const BUSY_RETRY: Duration = Duration::from_secs(1);

// SAFETY: the raw pointers in the rings and mappings point into memory owned
// by this socket alone (its own mmaps); the only other party is the kernel,
// which synchronises through the ring indices whatever thread we run on.
// Nothing is thread-affine. (XdpSocket is then Send as its Claim's
// Arc<Shared> is Send + Sync; a unit test checks.)
unsafe impl Send for Io {}

impl XdpSocket {
    /// Opens a copy-mode socket on `queue` of the program's interface and
    /// registers it in the program's map.
    pub fn open(prog: &XdpProgram, queue: u32, cfg: &XdpConfig) -> Result<Self, XdpError> {
        cfg.validate(page_size())?;
        let shared = Arc::clone(prog.shared());
        shared.claim(queue)?;
        // From here on, `claim` gives the queue back if anything fails.
        let claim = Claim { shared, queue };
        let started = std::time::Instant::now();
        let io = loop {
            match Io::open(prog, queue, cfg) {
                Err(XdpError::QueueBusy { .. }) if started.elapsed() < BUSY_RETRY => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                r => break r?,
            }
        };
        claim.shared.register(queue, io.fd.as_fd())?;
        Ok(XdpSocket { io, claim })
    }

    /// The socket's fd, for poll/epoll (readable when the RX ring has frames).
    pub fn fd(&self) -> RawFd {
        self.io.fd.as_raw_fd()
    }

    /// The RX queue this socket is bound to.
    pub fn queue(&self) -> u32 {
        self.claim.queue
    }

    /// Waits up to `timeout` for received frames; true if there are some.
    /// An interrupted wait returns false.
    pub fn wait(&self, timeout: Duration) -> Result<bool, XdpError> {
        self.io.wait(timeout)
    }

    /// Non-blocking: hands up to `max` received frames to `f`, in arrival
    /// order, returns their frames to the fill ring, and returns how many
    /// descriptors it took from the RX ring (the frames handed over, plus any
    /// malformed descriptor, which is skipped and counted in `stats`). The
    /// slice is valid only during the call.
    pub fn recv(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> Result<usize, XdpError> {
        self.io.recv(max, f)
    }

    /// Frames waiting in the RX ring.
    pub fn rx_pending(&self) -> u32 {
        self.io.rx.available()
    }

    /// The cumulative counters (XDP_STATISTICS, plus `malformed_descs`).
    pub fn stats(&self) -> Result<XdpStats, XdpError> {
        self.io.stats()
    }
}

impl Io {
    /// A socket bound to `queue` with its rings mapped and filled; not yet in
    /// the program's map.
    fn open(prog: &XdpProgram, queue: u32, cfg: &XdpConfig) -> Result<Io, XdpError> {
        // SAFETY: plain syscall; the result is checked below.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EAFNOSUPPORT) => XdpError::Unsupported,
                _ => XdpError::sys("socket(AF_XDP)", e),
            });
        }
        // SAFETY: `raw` is a fresh, valid fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let umem = Mmap::anonymous(cfg.umem_len()?)?;
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr.as_ptr() as u64,
            len: umem.len as u64,
            chunk_size: cfg.frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(&fd, libc::XDP_UMEM_REG, &reg).map_err(|e| match e.raw_os_error() {
            // xdp_umem_account_pages: over RLIMIT_MEMLOCK without CAP_IPC_LOCK.
            Some(libc::ENOBUFS) => XdpError::Memlock {
                bytes: umem.len as u64,
                source: e,
            },
            _ => XdpError::sys("setsockopt(XDP_UMEM_REG)", e),
        })?;
        let sys = |op| move |e| XdpError::sys(op, e);
        setsockopt(&fd, libc::XDP_UMEM_FILL_RING, &cfg.frames)
            .map_err(sys("setsockopt(XDP_UMEM_FILL_RING)"))?;
        setsockopt(&fd, libc::XDP_UMEM_COMPLETION_RING, &COMPLETION_RING_SIZE)
            .map_err(sys("setsockopt(XDP_UMEM_COMPLETION_RING)"))?;
        setsockopt(&fd, libc::XDP_RX_RING, &cfg.ring_size).map_err(sys("setsockopt(XDP_RX_RING)"))?;
        let off: libc::xdp_mmap_offsets =
            getsockopt(&fd, libc::XDP_MMAP_OFFSETS).map_err(sys("getsockopt(XDP_MMAP_OFFSETS)"))?;

        let rx_len = ring_len(off.rx.desc, cfg.ring_size, size_of::<libc::xdp_desc>())?;
        let rx_map = Mmap::ring(&fd, rx_len, libc::XDP_PGOFF_RX_RING)?;
        let fill_len = ring_len(off.fr.desc, cfg.frames, size_of::<u64>())?;
        let fill_map = Mmap::ring(&fd, fill_len, libc::XDP_UMEM_PGOFF_FILL_RING as libc::off_t)?;
        // SAFETY: the offsets come from the kernel for these very mappings,
        // which are long enough for the indices and `size` entries (`ring_len`),
        // live as long as the socket (fields of it), and are used by one
        // consumer (us) and one producer (the kernel) each. The kernel aligns
        // the indices and the entry arrays (to a cache line).
        let (rx, fill) = unsafe {
            let rx = RawRing::new(
                rx_map.at(off.rx.producer)?.cast(),
                rx_map.at(off.rx.consumer)?.cast(),
                rx_map.at(off.rx.desc)?.cast(),
                cfg.ring_size,
            );
            let fill = RawRing::new(
                fill_map.at(off.fr.producer)?.cast(),
                fill_map.at(off.fr.consumer)?.cast(),
                fill_map.at(off.fr.desc)?.cast(),
                cfg.frames,
            );
            (rx, fill)
        };
        let bad_ring = || XdpError::Sys {
            op: "mapping the rings",
            error: io::Error::other("bad ring layout"),
        };
        let (rx, mut fill) = (
            Consumer::new(rx.ok_or_else(bad_ring)?),
            Producer::new(fill.ok_or_else(bad_ring)?),
        );

        // Every frame goes to the fill ring (it has exactly `frames` slots).
        let mut pending: Vec<u64> = (0..u64::from(cfg.frames))
            .map(|i| i * u64::from(cfg.frame_size))
            .collect();
        let n = fill.push(&pending);
        pending.drain(..n);

        bind(&fd, prog.ifindex(), queue).map_err(|e| match e.raw_os_error() {
            // Another socket (perhaps one just closed: see BUSY_RETRY).
            Some(libc::EBUSY) => XdpError::QueueBusy {
                interface: prog.interface().to_owned(),
                queue,
            },
            _ => XdpError::sys("bind(AF_XDP)", e),
        })?;
        Ok(Io {
            fd,
            rx,
            fill,
            _rx_map: rx_map,
            _fill_map: fill_map,
            umem,
            pending,
            frame_size: cfg.frame_size,
            malformed: 0,
        })
    }

    fn wait(&self, timeout: Duration) -> Result<bool, XdpError> {
        if self.rx.available() > 0 {
            return Ok(true);
        }
        let mut ms = timeout.as_millis();
        if Duration::from_millis(ms as u64) < timeout {
            ms += 1; // round up: never spin on a sub-millisecond timeout
        }
        let ms = i32::try_from(ms).unwrap_or(i32::MAX);
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is one valid pollfd, alive for the call.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok(false);
            }
            return Err(XdpError::sys("poll", e));
        }
        if pfd.revents & (libc::POLLERR | libc::POLLNVAL) != 0 {
            return Err(XdpError::Sys {
                op: "poll",
                error: io::Error::other("error condition on the socket"),
            });
        }
        Ok(pfd.revents & libc::POLLIN != 0)
    }

    fn recv(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> Result<usize, XdpError> {
        let n = self.rx.available().min(u32::try_from(max).unwrap_or(u32::MAX));
        for i in 0..n {
            let desc = self.rx.get(i);
            match frame_bounds(desc.addr, desc.len, self.frame_size, self.umem.len) {
                Some((start, len, base)) => {
                    // SAFETY: `frame_bounds` checked start + len <= the UMEM's
                    // length. The kernel wrote this frame before publishing its
                    // descriptor (Acquire in `available`) and does not touch it
                    // again until we hand it back through the fill ring below,
                    // after `f` returned.
                    let bytes = unsafe { std::slice::from_raw_parts(self.umem.ptr.as_ptr().add(start), len) };
                    f(bytes);
                    self.pending.push(base);
                }
                None => self.malformed += 1,
            }
        }
        self.rx.release(n);
        self.refill();
        Ok(n as usize)
    }

    fn stats(&self) -> Result<XdpStats, XdpError> {
        let s: libc::xdp_statistics = getsockopt(&self.fd, libc::XDP_STATISTICS)
            .map_err(|e| XdpError::sys("getsockopt(XDP_STATISTICS)", e))?;
        Ok(XdpStats {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
            malformed_descs: self.malformed,
        })
    }

    fn refill(&mut self) {
        if !self.pending.is_empty() {
            let n = self.fill.push(&self.pending);
            self.pending.drain(..n);
        }
    }
}

impl Drop for XdpSocket {
    fn drop(&mut self) {
        // First out of the map, so the program stops redirecting to a socket
        // that is going away; the fields then close and unmap it.
        self.claim.shared.unregister(self.claim.queue);
    }
}

impl AsFd for XdpSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.io.fd.as_fd()
    }
}

impl AsRawFd for XdpSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd()
    }
}

impl fmt::Debug for XdpSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdpSocket")
            .field("interface", &self.claim.shared.interface)
            .field("queue", &self.claim.queue)
            .field("fd", &self.fd())
            .finish()
    }
}

/// A claimed queue; gives it back on drop (last, after the socket closed).
struct Claim {
    shared: Arc<Shared>,
    queue: u32,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.shared.unclaim(self.queue);
    }
}

/// Where a descriptor's frame lies in the UMEM: (start, len, frame base), or
/// None if it is not inside one frame of a UMEM of `umem_len` bytes.
fn frame_bounds(addr: u64, len: u32, frame_size: u32, umem_len: usize) -> Option<(usize, usize, u64)> {
    let frame_size = u64::from(frame_size);
    let base = addr & !(frame_size - 1);
    let end = addr.checked_add(u64::from(len))?;
    if end > base + frame_size || end > umem_len as u64 {
        return None;
    }
    Some((usize::try_from(addr).ok()?, len as usize, base))
}

/// Bytes to map for a ring whose entries start at `desc_off`.
fn ring_len(desc_off: u64, entries: u32, entry_size: usize) -> Result<usize, XdpError> {
    usize::try_from(desc_off)
        .ok()
        .and_then(|o| o.checked_add((entries as usize).checked_mul(entry_size)?))
        .ok_or_else(|| XdpError::Sys {
            op: "mapping the rings",
            error: io::Error::other("ring too large"),
        })
}

fn page_size() -> u32 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u32::try_from(p).unwrap_or(4096)
}

fn setsockopt<T>(fd: &OwnedFd, opt: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live T of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads a socket option of plain-data type T (all-zero is a valid T), which
/// the kernel must fill completely.
fn getsockopt<T: Copy>(fd: &OwnedFd, opt: libc::c_int) -> io::Result<T> {
    let mut value = MaybeUninit::<T>::zeroed();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` has room for `len` bytes and `len` is a valid socklen_t,
    // both live for the call.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            value.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != size_of::<T>() {
        return Err(io::Error::other(format!(
            "kernel returned {len} bytes, expected {} (kernel older than 5.4?)",
            size_of::<T>()
        )));
    }
    // SAFETY: T is one of libc's plain C structs (only integers), zeroed
    // above and filled by the kernel.
    Ok(unsafe { value.assume_init() })
}

fn bind(fd: &OwnedFd, ifindex: u32, queue: u32) -> io::Result<()> {
    let addr = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: libc::XDP_COPY,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: 0,
    };
    // SAFETY: `addr` is a live sockaddr_xdp of the size passed.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_xdp).cast(),
            size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// An owned memory mapping, unmapped on drop.
struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mmap {
    /// Private anonymous memory for the UMEM.
    fn anonymous(len: usize) -> Result<Self, XdpError> {
        Self::map(
            len,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
            "mmap(UMEM)",
        )
    }

    /// A ring of the socket, at the kernel's page offset for it.
    fn ring(fd: &OwnedFd, len: usize, offset: libc::off_t) -> Result<Self, XdpError> {
        Self::map(
            len,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            offset,
            "mmap(ring)",
        )
    }

    fn map(
        len: usize,
        flags: i32,
        fd: RawFd,
        offset: libc::off_t,
        op: &'static str,
    ) -> Result<Self, XdpError> {
        // SAFETY: a fresh mapping chosen by the kernel (null hint); nothing
        // aliases it until we hand out pointers into it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(XdpError::last_os(op));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| XdpError::last_os(op))?;
        Ok(Mmap { ptr, len })
    }

    /// A pointer `off` bytes in, if inside the mapping.
    fn at(&self, off: u64) -> Result<*mut u8, XdpError> {
        match usize::try_from(off) {
            // SAFETY: off < len, so the result stays inside the mapping.
            Ok(o) if o < self.len => Ok(unsafe { self.ptr.as_ptr().add(o) }),
            _ => Err(XdpError::Sys {
                op: "mapping the rings",
                error: io::Error::other("offset outside the ring"),
            }),
        }
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly one mapping made in `map`, unmapped only
        // here; every pointer into it belongs to the socket being dropped.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_valid_and_fits_a_1500_mtu() {
        let c = XdpConfig::default();
        c.validate(4096).expect("default config");
        assert!(c.max_frame_len() >= 1514);
        assert_eq!(c.umem_len().expect("len"), 8 << 20);
    }

    #[test]
    fn config_rejects_non_powers_of_two_and_out_of_range_frames() {
        let base = XdpConfig::default();
        for c in [
            XdpConfig {
                frame_size: 3000,
                ..base.clone()
            },
            XdpConfig {
                frame_size: 1024,
                ..base.clone()
            },
            XdpConfig {
                frame_size: 8192,
                ..base.clone()
            },
            XdpConfig {
                frames: 0,
                ..base.clone()
            },
            XdpConfig {
                frames: 1000,
                ..base.clone()
            },
            XdpConfig {
                ring_size: 3,
                ..base.clone()
            },
            XdpConfig {
                ring_size: 1 << 21,
                ..base.clone()
            },
        ] {
            assert!(
                matches!(c.validate(4096), Err(XdpError::InvalidConfig(_))),
                "{c:?}"
            );
        }
        XdpConfig {
            frame_size: 4096,
            ..base
        }
        .validate(4096)
        .expect("4 KiB frames");
    }

    #[test]
    fn frame_bounds_accepts_frames_inside_one_chunk_only() {
        let umem = 4 * 2048;
        assert_eq!(frame_bounds(256, 100, 2048, umem), Some((256, 100, 0)));
        assert_eq!(
            frame_bounds(2048 + 256, 1792, 2048, umem),
            Some((2304, 1792, 2048))
        );
        assert_eq!(
            frame_bounds(2048 + 256, 1793, 2048, umem),
            None,
            "crosses into the next frame"
        );
        assert_eq!(
            frame_bounds(4 * 2048 + 256, 10, 2048, umem),
            None,
            "past the UMEM"
        );
        assert_eq!(frame_bounds(u64::MAX - 5, 100, 2048, umem), None, "overflow");
    }

    #[test]
    fn stats_dropped_sums_the_loss_counters() {
        let s = XdpStats {
            rx_dropped: 1,
            rx_invalid_descs: 2,
            rx_ring_full: 4,
            rx_fill_ring_empty_descs: 1,
            malformed_descs: 8,
        };
        assert_eq!(s.dropped(), 15);
    }

    #[test]
    fn ring_len_adds_the_entries() {
        assert_eq!(ring_len(128, 2048, 16).expect("len"), 128 + 2048 * 16);
    }

    fn assert_send<T: Send>() {}

    #[test]
    fn socket_and_program_are_send() {
        assert_send::<XdpSocket>();
        assert_send::<XdpProgram>();
    }
}
