//! AF_PACKET with a TPACKET_V3 memory-mapped receive ring.
//!
//! The kernel fills blocks of packets in a ring shared with this process
//! and hands a block over (its status becomes `TP_STATUS_USER`) when it is
//! full or when the retire timeout expires; the reader walks the packets of
//! the block and gives it back (`TP_STATUS_KERNEL`). No copy and no system
//! call per packet. Drops (a full ring) are counted by the kernel and read
//! with `PACKET_STATISTICS`.
//!
//! # Invariants
//! - Block `cur` is the next one to read; blocks are handed over in ring
//!   order, so a block that is not ready means none after it is either.
//! - A block is given back only after every frame of it was handed to the
//!   callback; frames borrow the mapping only during the callback.
//! - The status word is read with Acquire and written with Release, pairing
//!   with the kernel's barriers around it (as libpcap and the kernel's
//!   documentation do).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::filter::Insn;
use crate::interface::Interface;
use crate::{Frame, LiveError};

/// Sizes of the ring and what each packet keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Bytes per block: a power of two, a multiple of the page size, larger
    /// than a frame of `snaplen` bytes plus its header.
    pub block_size: u32,
    pub blocks: u32,
    /// Frame slot size the kernel checks the ring against (V3 packs frames
    /// tightly; this only has to divide the block size).
    pub frame_size: u32,
    /// A block that is not full is handed over after this many milliseconds:
    /// the longest a packet can wait unseen at low rates.
    pub retire_ms: u32,
    /// Bytes kept of each packet. Headers are all Clarion reads, and the
    /// wire length is kept apart, so a short snap length costs nothing in
    /// precision. veth and other offloading devices deliver segments of up
    /// to 64 KB; they are truncated to this deliberately.
    pub snaplen: u32,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            // Small blocks: under load a block is handed over when full, so
            // its size bounds the delay (64 KiB hold ~450 minimal frames).
            block_size: 1 << 16,
            blocks: 512,
            frame_size: 2048,
            retire_ms: 1,
            snaplen: 256,
        }
    }
}

impl RingConfig {
    fn check(&self) -> Result<(), LiveError> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u32;
        let err = |m: String| Err(LiveError::Ring(m));
        if !self.block_size.is_power_of_two() || self.block_size < page {
            return err(format!(
                "block size {} must be a power of two of at least the page size ({page})",
                self.block_size
            ));
        }
        if self.snaplen == 0 || self.snaplen > 262_144 {
            return err(format!(
                "snap length {} must be between 1 and 262144",
                self.snaplen
            ));
        }
        if u64::from(self.snaplen) + 128 > u64::from(self.block_size) {
            return err(format!(
                "block size {} cannot hold a frame of snap length {} (raise --ring-block-size)",
                self.block_size, self.snaplen
            ));
        }
        if self.frame_size < 128 || !self.block_size.is_multiple_of(self.frame_size) {
            return err(format!(
                "frame size {} must divide the block size",
                self.frame_size
            ));
        }
        if self.blocks == 0 || u64::from(self.blocks) * u64::from(self.block_size) > 1 << 34 {
            return err(format!(
                "{} blocks of {} bytes is not a usable ring",
                self.blocks, self.block_size
            ));
        }
        if self.retire_ms == 0 {
            return err("the block retire timeout must be at least 1 ms".into());
        }
        Ok(())
    }
}

/// Counters the kernel keeps for the socket since the previous read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Packets that reached the socket, dropped ones included.
    pub packets: u64,
    /// Packets dropped because the ring was full.
    pub drops: u64,
}

/// A ring's settings, kept to open it again.
#[derive(Clone, Debug)]
struct Opened {
    cfg: RingConfig,
    filter: Vec<Insn>,
    /// The fanout group less the interface's index (see [`PacketRing::reopen`]).
    fanout_base: Option<u16>,
}

/// Where the reader is inside a handed-over block.
#[derive(Clone, Copy, Debug)]
struct InBlock {
    left: u32,
    offset: usize,
}

/// One interface's receive ring. See the module documentation.
#[derive(Debug)]
pub struct PacketRing {
    fd: OwnedFd,
    map: *mut u8,
    map_len: usize,
    block_size: usize,
    blocks: usize,
    cur: usize,
    in_block: Option<InBlock>,
    interface: Interface,
    retire_ms: u32,
    /// What it was opened with, to open it anew ([`PacketRing::reopen`]).
    opened: Opened,
    /// A frame with its VLAN tag put back (the kernel strips it into the header).
    vlan_frame: Vec<u8>,
}

// SAFETY: the mapping belongs to this value alone (the kernel is the only
// other party and synchronizes through the block status words), so moving
// it to another thread is sound; it is not Sync (reading mutates state).
unsafe impl Send for PacketRing {}

// <linux/if_packet.h>
const TPACKET_V3: libc::c_int = 2;
/// Offset of `block_status` in `struct tpacket_block_desc` (version, offset_to_priv, then the header).
const BLOCK_STATUS: usize = 8;
const NUM_PKTS: usize = 12;
const FIRST_PKT: usize = 16;
/// `struct tpacket3_hdr` is 48 bytes; the `sockaddr_ll` follows at the next 16-byte boundary.
const SOCKADDR_LL_OFFSET: usize = 48;

fn last_os_error(interface: &Interface, what: &'static str) -> LiveError {
    LiveError::os(&interface.name, what, io::Error::last_os_error())
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live T of the given size for the duration of the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl PacketRing {
    /// Opens a ring on `interface` that keeps what `filter` accepts; with
    /// `fanout`, joins that hash fanout group (flows spread over the group's
    /// sockets by a symmetric hash, so both directions land together).
    pub fn open(
        interface: &Interface,
        cfg: &RingConfig,
        filter: &[Insn],
        fanout: Option<u16>,
    ) -> Result<PacketRing, LiveError> {
        cfg.check()?;
        let name = &interface.name;
        // Protocol 0 until bound: a socket of ETH_P_ALL would receive from
        // every interface before the bind and the filter.
        // SAFETY: plain system call.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(last_os_error(interface, "open a packet socket"));
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let sfd = fd.as_raw_fd();
        let os = |what: &'static str| move |e: io::Error| LiveError::os(name, what, e);
        setsockopt(sfd, libc::SOL_PACKET, libc::PACKET_VERSION, &TPACKET_V3)
            .map_err(os("select TPACKET_V3"))?;
        // Asking for timestamps turns on the kernel's stamping of every skb
        // where it enters (or leaves) the stack, instead of each packet
        // socket reading the clock when the packet reaches it: the time is
        // closer to the wire, and every capture of the host (tcpdump too)
        // sees the same timestamp for a packet.
        setsockopt(sfd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &1 as &libc::c_int)
            .map_err(os("enable kernel timestamps"))?;
        let prog: Vec<libc::sock_filter> = filter
            .iter()
            .map(|i| libc::sock_filter {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect();
        let fprog = libc::sock_fprog {
            len: prog.len() as libc::c_ushort,
            filter: prog.as_ptr().cast_mut(),
        };
        setsockopt(sfd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
            .map_err(os("attach the capture filter"))?;
        let req = libc::tpacket_req3 {
            tp_block_size: cfg.block_size,
            tp_block_nr: cfg.blocks,
            tp_frame_size: cfg.frame_size,
            tp_frame_nr: (u64::from(cfg.block_size) / u64::from(cfg.frame_size) * u64::from(cfg.blocks))
                as u32,
            tp_retire_blk_tov: cfg.retire_ms,
            tp_sizeof_priv: 0,
            // No TP_FT_REQ_FILL_RXHASH: the flow hash would cost the kernel a
            // flow dissection per packet, and Clarion hashes flows itself.
            tp_feature_req_word: 0,
        };
        setsockopt(sfd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
            .map_err(os("set up the receive ring (try fewer or smaller --ring-blocks)"))?;
        let map_len = cfg.block_size as usize * cfg.blocks as usize;
        // SAFETY: maps the ring the kernel just allocated for this socket; checked below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                sfd,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(last_os_error(interface, "map the receive ring"));
        }
        let ring = PacketRing {
            fd,
            map: map.cast(),
            map_len,
            block_size: cfg.block_size as usize,
            blocks: cfg.blocks as usize,
            cur: 0,
            in_block: None,
            interface: interface.clone(),
            retire_ms: cfg.retire_ms,
            opened: Opened {
                cfg: *cfg,
                filter: filter.to_vec(),
                fanout_base: fanout.map(|g| g.wrapping_sub(interface.index as u16)),
            },
            vlan_frame: Vec::new(),
        };
        // SAFETY: an all-zero sockaddr_ll is valid; the fields are set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = interface.index as i32;
        // SAFETY: `sll` is a valid sockaddr_ll of the size given.
        let rc = unsafe {
            libc::bind(
                sfd,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(last_os_error(interface, "bind the packet socket"));
        }
        if let Some(group) = fanout {
            let arg: u32 = u32::from(group) | (libc::PACKET_FANOUT_HASH << 16);
            setsockopt(sfd, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg)
                .map_err(os("join the fanout group"))?;
        }
        Ok(ring)
    }

    pub fn interface(&self) -> &Interface {
        &self.interface
    }

    /// Opens the ring anew, with the same settings, on the interface that
    /// now has this one's name: a socket bound to an interface that was
    /// removed never sees another, even one created under the same name.
    /// (One set down and up again needs nothing: the kernel re-attaches
    /// the socket when it comes up.) Frames not yet read are lost. The
    /// interface must be up: a socket joins a fanout group only then.
    ///
    /// The old fanout group cannot be joined again (its members bound to
    /// the removed interface stay in it until every worker has reopened),
    /// so the group moves by the change of index: every worker of the
    /// interface computes the same new group, other processes' groups stay
    /// apart as before.
    pub fn reopen(&mut self) -> Result<(), LiveError> {
        let interface = Interface::lookup(&self.interface.name)?;
        if interface.link != self.interface.link {
            return Err(LiveError::Reopened {
                interface: interface.name,
                why: "it came back with another link type".into(),
            });
        }
        let o = self.opened.clone();
        let fanout = o.fanout_base.map(|b| b.wrapping_add(interface.index as u16));
        *self = PacketRing::open(&interface, &o.cfg, &o.filter, fanout)?;
        Ok(())
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn block(&self, i: usize) -> *mut u8 {
        // SAFETY: i < blocks, so the offset stays inside the mapping.
        unsafe { self.map.add(i * self.block_size) }
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: the status word is 4-byte aligned inside block i's
        // descriptor, lives as long as the mapping (and so `self`), and is
        // only accessed atomically by this process.
        unsafe { AtomicU32::from_ptr(self.block(i).add(BLOCK_STATUS).cast()) }
    }

    fn ready(&self, i: usize) -> bool {
        self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// Handed-over blocks waiting to be read, counted up to `limit`
    /// (the queue-adaptive loop only asks "is the backlog above a mark?").
    pub fn backlog_blocks(&self, limit: usize) -> usize {
        let limit = limit.min(self.blocks);
        (0..limit)
            .take_while(|k| self.ready((self.cur + k) % self.blocks))
            .count()
    }

    pub fn retire_ms(&self) -> u32 {
        self.retire_ms
    }

    pub fn blocks(&self) -> usize {
        self.blocks
    }

    fn read_u32(&self, at: usize) -> u32 {
        let block = self.block(self.cur);
        // SAFETY: callers keep `at + 4 <= block_size`; the block belongs to us (status USER).
        unsafe { block.add(at).cast::<u32>().read_unaligned() }
    }

    fn read_u16(&self, at: usize) -> u16 {
        let block = self.block(self.cur);
        // SAFETY: as in `read_u32`.
        unsafe { block.add(at).cast::<u16>().read_unaligned() }
    }

    fn give_back(&mut self) {
        self.status(self.cur)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.cur = (self.cur + 1) % self.blocks;
        self.in_block = None;
    }

    /// Hands up to `max` received frames to `f` without blocking; returns how many.
    /// A partly read block is resumed by the next call; a block read to
    /// its end goes back to the kernel at once.
    pub fn recv(&mut self, max: usize, f: &mut dyn FnMut(Frame<'_>)) -> usize {
        let mut n = 0;
        while n < max {
            let mut at = match self.in_block {
                Some(b) => b,
                None => {
                    if !self.ready(self.cur) {
                        break;
                    }
                    InBlock {
                        left: self.read_u32(NUM_PKTS),
                        offset: self.read_u32(FIRST_PKT) as usize,
                    }
                }
            };
            while at.left > 0 && n < max {
                let Some((next, frame)) = self.frame_at(at.offset) else {
                    // A header that does not fit the block: never written by
                    // a correct kernel; skip the rest of the block.
                    at.left = 0;
                    break;
                };
                at.left -= 1;
                if let Some(fr) = frame {
                    f(fr);
                    n += 1;
                }
                if at.left > 0 {
                    if next == 0 {
                        at.left = 0;
                        break;
                    }
                    at.offset += next;
                }
            }
            if at.left == 0 {
                self.give_back();
            } else {
                self.in_block = Some(at);
            }
        }
        n
    }

    /// The frame whose header starts at `off` in the current block:
    /// `(offset to the next header, frame)`, the frame `None` when it is
    /// skipped (the sent copy on loopback); `None` when out of bounds.
    fn frame_at(&mut self, off: usize) -> Option<(usize, Option<Frame<'_>>)> {
        if off + SOCKADDR_LL_OFFSET + std::mem::size_of::<libc::sockaddr_ll>() > self.block_size {
            return None;
        }
        let next = self.read_u32(off) as usize;
        let sec = u64::from(self.read_u32(off + 4));
        let nsec = u64::from(self.read_u32(off + 8));
        let snaplen = self.read_u32(off + 12) as usize;
        let len = self.read_u32(off + 16);
        let status = self.read_u32(off + 20);
        let mac = self.read_u16(off + 24) as usize;
        let vlan_tci = self.read_u32(off + 32) as u16;
        let vlan_tpid = self.read_u16(off + 36);
        // sll_pkttype: after family (2), protocol (2), ifindex (4), hatype (2).
        let pkttype = {
            let block = self.block(self.cur);
            // SAFETY: bounds checked above.
            unsafe { *block.add(off + SOCKADDR_LL_OFFSET + 10) }
        };
        if off + mac + snaplen > self.block_size {
            return None;
        }
        if self.interface.loopback && pkttype == libc::PACKET_OUTGOING {
            return Some((next, None));
        }
        let ts_ns = sec * 1_000_000_000 + nsec;
        // SAFETY: bounds checked above; the block is ours until `give_back`,
        // which needs `&mut self` and so waits for this borrow to end.
        let data = unsafe { std::slice::from_raw_parts(self.block(self.cur).add(off + mac), snaplen) };
        if status & libc::TP_STATUS_VLAN_VALID != 0 && data.len() >= 12 {
            // Put the tag back where it was on the wire.
            let tpid = if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                vlan_tpid
            } else {
                0x8100
            };
            self.vlan_frame.clear();
            self.vlan_frame.extend_from_slice(&data[..12]);
            self.vlan_frame.extend_from_slice(&tpid.to_be_bytes());
            self.vlan_frame.extend_from_slice(&vlan_tci.to_be_bytes());
            self.vlan_frame.extend_from_slice(&data[12..]);
            return Some((
                next,
                Some(Frame {
                    ts_ns,
                    data: &self.vlan_frame,
                    orig_len: len + 4,
                }),
            ));
        }
        Some((
            next,
            Some(Frame {
                ts_ns,
                data,
                orig_len: len,
            }),
        ))
    }

    /// Waits until a block is handed over or `timeout` passes.
    pub fn wait(&self, timeout: Duration) -> Result<(), LiveError> {
        if self.ready(self.cur) || self.in_block.is_some() {
            return Ok(());
        }
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN | libc::POLLERR,
            revents: 0,
        };
        poll_fds(std::slice::from_mut(&mut pfd), timeout)
            .map_err(|e| LiveError::os(&self.interface.name, "wait for packets", e))
    }

    /// The kernel's counters since the previous call (reading resets them).
    pub fn stats(&self) -> Result<RingStats, LiveError> {
        let mut st = libc::tpacket_stats_v3 {
            tp_packets: 0,
            tp_drops: 0,
            tp_freeze_q_cnt: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid for writes of the given size.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats_v3).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(last_os_error(&self.interface, "read the ring's drop counters"));
        }
        Ok(RingStats {
            packets: u64::from(st.tp_packets),
            drops: u64::from(st.tp_drops),
        })
    }
}

/// `ppoll` with a microsecond-grained timeout; EINTR counts as a wake-up.
pub fn poll_fds(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<()> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `fds` is a valid array of its length; `ts` lives across the call.
    let rc = unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, std::ptr::null()) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
    Ok(())
}

impl Drop for PacketRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`; no frame borrows it any more.
        unsafe {
            libc::munmap(self.map.cast(), self.map_len);
        }
    }
}
