//! AF_PACKET with a memory-mapped receive ring, in one of two layouts.
//!
//! - **Frames** (TPACKET_V2, the default): fixed slots, one packet each,
//!   handed over as soon as the kernel has written it (the slot's status
//!   becomes `TP_STATUS_USER`). A packet is visible microseconds after it
//!   was stamped, so the worker's clock can follow the wire closely: what
//!   a timely network-wide decision needs. libpcap makes the same choice
//!   for tcpdump's `--immediate-mode`.
//! - **Blocks** (TPACKET_V3): the kernel packs packets into blocks and
//!   hands a block over when it is full or when its retire timer fires;
//!   fewer wake-ups and denser memory at the highest rates, but at low
//!   rates a packet waits unseen for up to three timer ticks (12 ms at
//!   HZ=250).
//!
//! Either way the reader walks what was handed over in place and gives it
//! back (`TP_STATUS_KERNEL`): no copy and no system call per packet. Drops
//! (a full ring) are counted by the kernel and read with
//! `PACKET_STATISTICS`.
//!
//! # Invariants
//! - `cur` is the next block (or frame) to read; the kernel hands them over
//!   in ring order, so one that is not ready means none after it is either.
//! - A block or frame is given back only after its frames were handed to
//!   the callback; frames borrow the mapping only during the callback.
//! - Status words are read with Acquire and written with Release, pairing
//!   with the kernel's barriers around them (as libpcap and the kernel's
//!   documentation do).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::filter::Insn;
use crate::interface::Interface;
use crate::{Frame, LiveError};

/// How the kernel hands packets over (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RingMode {
    /// TPACKET_V2: each packet as soon as it is written.
    #[default]
    Frames,
    /// TPACKET_V3: a block at a time, when full or when its timer fires.
    Blocks,
}

/// Sizes of the ring and what each packet keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    pub mode: RingMode,
    /// Bytes per block: a power of two, a multiple of the page size, larger
    /// than a frame of `snaplen` bytes plus its header.
    pub block_size: u32,
    pub blocks: u32,
    /// Blocks: the frame slot size the kernel checks the ring against (V3
    /// packs frames tightly; this only has to divide the block size).
    /// Frames lays its slots out by the snap length instead.
    pub frame_size: u32,
    /// Blocks: one that is not full is handed over after this many
    /// milliseconds, the longest a packet can wait unseen at low rates.
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
            mode: RingMode::Frames,
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

/// Room in a frame slot before the packet: the `tpacket2_hdr` and
/// `sockaddr_ll` (52 bytes) and the link header aligned after them (the
/// kernel puts the network header at a 16-byte boundary at least 16 bytes
/// past them), with margin for link headers up to 60 bytes.
const SLOT_HEADROOM: u32 = 128;

impl RingConfig {
    /// Bytes of one frame slot in [`RingMode::Frames`]: a packet of the
    /// snap length and its headers. The kernel truncates what does not fit.
    pub fn slot_size(&self) -> u32 {
        (self.snaplen + SLOT_HEADROOM).next_multiple_of(16)
    }

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
        if u64::from(self.snaplen) + u64::from(SLOT_HEADROOM) > u64::from(self.block_size) {
            return err(format!(
                "block size {} cannot hold a frame of snap length {} (raise --ring-block-size)",
                self.block_size, self.snaplen
            ));
        }
        if self.mode == RingMode::Blocks
            && (self.frame_size < 128 || !self.block_size.is_multiple_of(self.frame_size))
        {
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
        if self.mode == RingMode::Blocks && self.retire_ms == 0 {
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

/// How the mapping is laid out and read.
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// `cur` is a block; a partly read one is resumed at `in_block`.
    Blocks { in_block: Option<InBlock> },
    /// `cur` is a frame slot; slots do not cross blocks.
    Frames {
        slot: usize,
        per_block: usize,
        slots: usize,
    },
}

/// One interface's receive ring. See the module documentation.
#[derive(Debug)]
pub struct PacketRing {
    fd: OwnedFd,
    map: *mut u8,
    map_len: usize,
    block_size: usize,
    blocks: usize,
    layout: Layout,
    cur: usize,
    interface: Interface,
    /// What it was opened with, to open it anew ([`PacketRing::reopen`]).
    opened: Opened,
    /// A frame with its VLAN tag put back (the kernel strips it into the header).
    vlan_frame: Vec<u8>,
}

// SAFETY: the mapping belongs to this value alone (the kernel is the only
// other party and synchronizes through the status words), so moving it to
// another thread is sound; it is not Sync (reading mutates state).
unsafe impl Send for PacketRing {}

// <linux/if_packet.h>
const TPACKET_V2: libc::c_int = 1;
const TPACKET_V3: libc::c_int = 2;
/// Offset of `block_status` in `struct tpacket_block_desc` (version, offset_to_priv, then the header).
const BLOCK_STATUS: usize = 8;
const NUM_PKTS: usize = 12;
const FIRST_PKT: usize = 16;

/// Where a packet header's fields are, by layout.
struct HeaderOffsets {
    sec: usize,
    nsec: usize,
    snaplen: usize,
    len: usize,
    status: usize,
    mac: usize,
    vlan_tci: usize,
    vlan_tpid: usize,
    /// `sockaddr_ll` follows the header at a 16-byte boundary.
    sockaddr: usize,
}

/// `struct tpacket3_hdr` (48 bytes; `tp_next_offset` at 0, the VLAN fields in `hv1`).
const V3: HeaderOffsets = HeaderOffsets {
    sec: 4,
    nsec: 8,
    snaplen: 12,
    len: 16,
    status: 20,
    mac: 24,
    vlan_tci: 32,
    vlan_tpid: 36,
    sockaddr: 48,
};

/// `struct tpacket2_hdr` (32 bytes; `tp_status` first, the slot's status word).
const V2: HeaderOffsets = HeaderOffsets {
    sec: 16,
    nsec: 20,
    snaplen: 8,
    len: 4,
    status: 0,
    mac: 12,
    vlan_tci: 24,
    vlan_tpid: 26,
    sockaddr: 32,
};

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

/// A packet socket of the ring's TPACKET version, stamping packets in the
/// kernel, with `filter` attached; not yet bound (it receives nothing).
fn packet_socket(interface: &Interface, cfg: &RingConfig, filter: &[Insn]) -> Result<OwnedFd, LiveError> {
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
    let os = |what: &'static str| move |e: io::Error| LiveError::os(&interface.name, what, e);
    let version = match cfg.mode {
        RingMode::Frames => TPACKET_V2,
        RingMode::Blocks => TPACKET_V3,
    };
    setsockopt(sfd, libc::SOL_PACKET, libc::PACKET_VERSION, &version)
        .map_err(os("select the ring's TPACKET version"))?;
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
    Ok(fd)
}

/// Asks the kernel for the receive ring `cfg` describes on socket `sfd`.
fn request_ring(sfd: RawFd, cfg: &RingConfig) -> io::Result<Layout> {
    match cfg.mode {
        RingMode::Frames => {
            let slot = cfg.slot_size();
            let per_block = cfg.block_size / slot;
            let req = libc::tpacket_req {
                tp_block_size: cfg.block_size,
                tp_block_nr: cfg.blocks,
                tp_frame_size: slot,
                tp_frame_nr: per_block * cfg.blocks,
            };
            setsockopt(sfd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)?;
            Ok(Layout::Frames {
                slot: slot as usize,
                per_block: per_block as usize,
                slots: (per_block * cfg.blocks) as usize,
            })
        }
        RingMode::Blocks => {
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
            setsockopt(sfd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)?;
            Ok(Layout::Blocks { in_block: None })
        }
    }
}

/// Binds socket `sfd` to `interface`, every protocol: packets arrive from now on.
fn bind_to(sfd: RawFd, interface: &Interface) -> Result<(), LiveError> {
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
    Ok(())
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
        let fd = packet_socket(interface, cfg, filter)?;
        let sfd = fd.as_raw_fd();
        let layout = request_ring(sfd, cfg).map_err(|e| {
            let what = "set up the receive ring (try fewer or smaller --ring-blocks)";
            LiveError::os(&interface.name, what, e)
        })?;
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
        // Made before the bind: a failure after it unmaps the ring.
        let ring = PacketRing {
            fd,
            map: map.cast(),
            map_len,
            block_size: cfg.block_size as usize,
            blocks: cfg.blocks as usize,
            layout,
            cur: 0,
            interface: interface.clone(),
            opened: Opened {
                cfg: *cfg,
                filter: filter.to_vec(),
                fanout_base: fanout.map(|g| g.wrapping_sub(interface.index as u16)),
            },
            vlan_frame: Vec::new(),
        };
        bind_to(sfd, interface)?;
        if let Some(group) = fanout {
            let arg: u32 = u32::from(group) | (libc::PACKET_FANOUT_HASH << 16);
            setsockopt(sfd, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg)
                .map_err(|e| LiveError::os(&interface.name, "join the fanout group", e))?;
        }
        Ok(ring)
    }

    pub fn interface(&self) -> &Interface {
        &self.interface
    }

    /// How the kernel hands packets over.
    pub fn mode(&self) -> RingMode {
        self.opened.cfg.mode
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

    /// Where unit `i` (a block, or a frame slot) starts, and its size.
    fn unit(&self, i: usize) -> (*mut u8, usize) {
        match self.layout {
            Layout::Blocks { .. } => (self.block(i), self.block_size),
            Layout::Frames { slot, per_block, .. } => {
                // SAFETY: i < slots = per_block * blocks and per_block * slot
                // <= block_size, so the slot lies inside block i / per_block.
                let at = unsafe { self.block(i / per_block).add(i % per_block * slot) };
                (at, slot)
            }
        }
    }

    /// Blocks or frame slots in the ring.
    fn units(&self) -> usize {
        match self.layout {
            Layout::Blocks { .. } => self.blocks,
            Layout::Frames { slots, .. } => slots,
        }
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        let at = match self.layout {
            // SAFETY: the block status word is inside block i's descriptor.
            Layout::Blocks { .. } => unsafe { self.block(i).add(BLOCK_STATUS) },
            // `tp_status` is the slot's first word.
            Layout::Frames { .. } => self.unit(i).0,
        };
        // SAFETY: the status word is 4-byte aligned (blocks are page
        // aligned, slots a multiple of 16 bytes), lives as long as the
        // mapping (and so `self`), and is only accessed atomically here.
        unsafe { AtomicU32::from_ptr(at.cast()) }
    }

    fn ready(&self, i: usize) -> bool {
        self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// Handed-over blocks waiting to be read, counted up to `limit`
    /// (the queue-adaptive loop only asks "is the backlog above a mark?").
    /// Frame slots are counted in blocks' worth of slots, so the mark
    /// means the same in either layout.
    pub fn backlog_blocks(&self, limit: usize) -> usize {
        let limit = limit.min(self.blocks);
        let (step, first) = match self.layout {
            Layout::Blocks { .. } => (1, 0),
            Layout::Frames { per_block, .. } => (per_block, per_block - 1),
        };
        let units = self.units();
        (0..limit)
            .take_while(|k| self.ready((self.cur + first + k * step) % units))
            .count()
    }

    pub fn retire_ms(&self) -> u32 {
        self.opened.cfg.retire_ms
    }

    pub fn blocks(&self) -> usize {
        self.blocks
    }

    fn read_u32(at: *const u8) -> u32 {
        // SAFETY: callers keep the 4 bytes inside a unit that is ours (status USER).
        unsafe { at.cast::<u32>().read_unaligned() }
    }

    fn read_u16(at: *const u8) -> u16 {
        // SAFETY: as in `read_u32`.
        unsafe { at.cast::<u16>().read_unaligned() }
    }

    /// Gives unit `cur` back to the kernel and moves to the next.
    fn give_back(&mut self) {
        self.status(self.cur)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.cur = (self.cur + 1) % self.units();
        if let Layout::Blocks { in_block } = &mut self.layout {
            *in_block = None;
        }
    }

    /// Hands up to `max` received frames to `f` without blocking; returns how many.
    pub fn recv(&mut self, max: usize, f: &mut dyn FnMut(Frame<'_>)) -> usize {
        match self.layout {
            Layout::Blocks { .. } => self.recv_blocks(max, f),
            Layout::Frames { .. } => self.recv_frames(max, f),
        }
    }

    fn recv_frames(&mut self, max: usize, f: &mut dyn FnMut(Frame<'_>)) -> usize {
        let mut n = 0;
        while n < max && self.ready(self.cur) {
            let (at, size) = self.unit(self.cur);
            if let Some(fr) = self.frame_at(at, size, &V2) {
                f(fr);
                n += 1;
            }
            self.give_back();
        }
        n
    }

    /// A partly read block is resumed by the next call; a block read to
    /// its end goes back to the kernel at once.
    fn recv_blocks(&mut self, max: usize, f: &mut dyn FnMut(Frame<'_>)) -> usize {
        let mut n = 0;
        while n < max {
            let block = self.block(self.cur);
            let mut at = match self.layout {
                Layout::Blocks { in_block: Some(b) } => b,
                _ => {
                    if !self.ready(self.cur) {
                        break;
                    }
                    // SAFETY: the descriptor's fields are inside the block, which is ours.
                    unsafe {
                        InBlock {
                            left: Self::read_u32(block.add(NUM_PKTS)),
                            offset: Self::read_u32(block.add(FIRST_PKT)) as usize,
                        }
                    }
                }
            };
            while at.left > 0 && n < max {
                if at.offset + V3.sockaddr + std::mem::size_of::<libc::sockaddr_ll>() > self.block_size {
                    // A header that does not fit the block: never written by
                    // a correct kernel; skip the rest of the block.
                    at.left = 0;
                    break;
                }
                // SAFETY: checked just above that the header lies inside the block.
                let hdr = unsafe { block.add(at.offset) };
                let next = Self::read_u32(hdr) as usize;
                at.left -= 1;
                if let Some(fr) = self.frame_at(hdr, self.block_size - at.offset, &V3) {
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
                self.layout = Layout::Blocks { in_block: Some(at) };
            }
        }
        n
    }

    /// The frame whose header of layout `o` starts at `hdr`, with `room`
    /// bytes of the mapping from there on; `None` when it is skipped (the
    /// sent copy on loopback) or does not fit (never written by a correct
    /// kernel).
    fn frame_at(&mut self, hdr: *const u8, room: usize, o: &HeaderOffsets) -> Option<Frame<'_>> {
        if o.sockaddr + std::mem::size_of::<libc::sockaddr_ll>() > room {
            return None;
        }
        // SAFETY (every `add` below): the offsets lie inside the header and
        // its sockaddr_ll, which fit in `room` (checked above).
        let field = |at: usize| unsafe { hdr.add(at) };
        let sec = u64::from(Self::read_u32(field(o.sec)));
        let nsec = u64::from(Self::read_u32(field(o.nsec)));
        let snaplen = Self::read_u32(field(o.snaplen)) as usize;
        let len = Self::read_u32(field(o.len));
        let status = Self::read_u32(field(o.status));
        let mac = Self::read_u16(field(o.mac)) as usize;
        let vlan_tci = Self::read_u16(field(o.vlan_tci));
        let vlan_tpid = Self::read_u16(field(o.vlan_tpid));
        // sll_pkttype: after family (2), protocol (2), ifindex (4), hatype (2).
        // SAFETY: inside the sockaddr_ll (checked above).
        let pkttype = unsafe { *field(o.sockaddr + 10) };
        if mac + snaplen > room {
            return None;
        }
        if self.interface.loopback && pkttype == libc::PACKET_OUTGOING {
            return None;
        }
        let ts_ns = sec * 1_000_000_000 + nsec;
        // SAFETY: bounds checked above; the unit is ours until `give_back`,
        // which needs `&mut self` and so waits for this borrow to end.
        let data = unsafe { std::slice::from_raw_parts(field(mac), snaplen) };
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
            return Some(Frame {
                ts_ns,
                data: &self.vlan_frame,
                orig_len: len + 4,
            });
        }
        Some(Frame {
            ts_ns,
            data,
            orig_len: len,
        })
    }

    /// Waits until a block or frame is handed over or `timeout` passes.
    pub fn wait(&self, timeout: Duration) -> Result<(), LiveError> {
        let resuming = matches!(self.layout, Layout::Blocks { in_block: Some(_) });
        if resuming || self.ready(self.cur) {
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
