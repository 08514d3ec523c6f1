//! `clarion-lab export-cost`: what export policies cost the host, in one
//! run (Trident's "0.3 core for header statistics at 2×10^5 pps").
//!
//! 1. Read the capture into memory (not timed) and loop it as one paced
//!    stream ([`Looped`]): `--rate` packets a second for `--seconds`, copy
//!    `k` of the capture with the second and third bytes of both addresses
//!    XORed with `k` (new flows per copy, conversations kept whole) and
//!    timestamps on the paced schedule, so packet time and wall time agree
//!    as on a live link at that rate.
//! 2. Each round runs every variant once, in an order rotated per round
//!    (machines drift): the monitor alone (the events of `--events`), then
//!    the same with one export policy: classification only (a policy no
//!    packet matches), headers of every packet to a collector, packets to
//!    pcapng files, packets to a VXLAN mirror, headers of about
//!    `--fraction` of the packets (a source-port range chosen on the
//!    capture). Each run is [`clarion_host::replay`] into the stage
//!    `clarion run --exports` builds (a [`Pipeline`] of the [`Monitor`]
//!    and [`ExportPolicies`]), so what is measured is that loop: parse, classify,
//!    export, monitor. The source paces it: frames are released in
//!    bursts every `--tick-us` (1 ms), one sleep a burst, as a poll loop
//!    takes a live link's packets (`clarion run --speed`'s sleep before
//!    every early packet would cost more CPU than the packets at these
//!    rates, and the same in every variant). One uncounted run of the
//!    monitor alone comes first (page cache, allocator, CPU frequency).
//! 3. The replay thread's CPU time (user + system, `RUSAGE_THREAD`) over the
//!    run, divided by its wall time, is the cores used at that rate. The
//!    receivers (a UDP socket per collector or mirror, read by a thread of
//!    their own that decodes the header datagrams) are timed apart, on
//!    their own thread, and never counted in it; pcapng files are read
//!    back after the run. What arrived is checked against what the
//!    exporter says it sent.
//! 4. Per variant, medians over rounds: cores used, CPU ns a packet (and
//!    times `--rate`, the cores the rate needs, which is what a run that
//!    fell behind the rate tells), the
//!    ratio to the monitor alone in the same round, CPU ns per exported
//!    packet ((CPU with export − CPU of the monitor alone in that round) /
//!    packets exported), the classifier's fast-path hit rate and hash
//!    lookups a packet, the receiver's cores.
//!
//! Costs: the capture once in memory plus one frame of scratch; the files
//! of the pcapng variant (about the capture's size per copy) live in a
//! temporary directory for one run and are removed after it is read back.

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use clap::{Args, ValueEnum};
use serde_json::json;

use clarion_capture::{CaptureError, PacketSource, RawPacket, SliceReader, SourceStats};
use clarion_engine::{Monitor, Report};
use clarion_export::{ExportConfig, ExportStats, Exporter};
use clarion_host::{replay, Driver, Frames, ReplayOptions};
use clarion_lang::spec::EventSpec;
use clarion_pipeline::{ExportPolicies, Pipeline, Stage, Stages};
use clarion_wire::{LinkType, PacketRecord};

use crate::thousands;
use crate::Failure;

#[derive(Args, Debug)]
pub struct ExportCostArgs {
    /// The capture to loop (pcap or pcapng), e.g. ../shared/captures/pathspider_real.pcap.
    #[arg(long, value_name = "FILE")]
    pub pcap: PathBuf,

    /// Events the monitor runs, as `clarion run --events` installs them.
    #[arg(long, default_value = "examples/demo.clarion", value_name = "FILE")]
    pub events: PathBuf,

    /// Packets a second the stream is paced at.
    #[arg(long, default_value_t = 200_000, value_name = "PPS",
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub rate: u64,

    /// Seconds each run lasts (the stream holds rate × seconds packets).
    #[arg(long, default_value_t = 5.0, value_name = "S")]
    pub seconds: f64,

    /// Rounds; each runs every variant once and figures are medians over rounds.
    #[arg(long, default_value_t = 3, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,

    /// The share of packets the `headers-part` policy takes (chosen as a
    /// source-port range on the capture; the share achieved is reported).
    #[arg(long, default_value_t = 0.1, value_name = "F")]
    pub fraction: f64,

    /// Variants to run (comma-separated; default all). `monitor` always runs: the others are measured against it.
    #[arg(long, value_delimiter = ',', value_name = "V")]
    pub variants: Vec<Variant>,

    /// Packets are released in bursts this often (microseconds): one
    /// sleep a burst, as a poll loop takes a link's packets.
    #[arg(long, default_value_t = 1000, value_name = "US",
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub tick_us: u64,

    /// Where the pcapng variant writes (default: a temporary directory).
    #[arg(long, value_name = "DIR")]
    pub export_dir: Option<PathBuf>,

    /// Core to pin the replay thread to (default: not pinned).
    #[arg(long, value_name = "C")]
    pub core: Option<usize>,

    /// Print the results as one JSON object on standard output.
    #[arg(long)]
    pub json: bool,
}

/// One configuration measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Variant {
    /// The monitor alone (no export policy).
    Monitor,
    /// One policy that takes no packet: classification alone.
    Classify,
    /// Headers of every packet to a collector (UDP, decoded by the harness).
    Headers,
    /// Every packet to pcapng files.
    Pcapng,
    /// Every packet to a VXLAN mirror (UDP).
    Vxlan,
    /// Headers of about --fraction of the packets to a collector.
    HeadersPart,
}

impl Variant {
    const ALL: [Variant; 6] = [
        Variant::Monitor,
        Variant::Classify,
        Variant::Headers,
        Variant::Pcapng,
        Variant::Vxlan,
        Variant::HeadersPart,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::Monitor => "monitor",
            Variant::Classify => "classify",
            Variant::Headers => "headers",
            Variant::Pcapng => "pcapng",
            Variant::Vxlan => "vxlan",
            Variant::HeadersPart => "headers-part",
        }
    }

    /// What the receiver of this variant listens for, if it has one.
    fn receiver(self) -> Option<Listen> {
        match self {
            Variant::Monitor | Variant::Pcapng => None,
            Variant::Classify | Variant::Headers | Variant::HeadersPart => Some(Listen::Headers),
            Variant::Vxlan => Some(Listen::Vxlan),
        }
    }
}

// ---------------------------------------------------------------------
// The looped, paced stream.
// ---------------------------------------------------------------------

/// One frame of the capture, kept for looping.
#[derive(Clone, Debug)]
struct Stored {
    link: LinkType,
    data: std::ops::Range<usize>,
    orig_len: u32,
    /// Where the source address starts and each address's length (4 or
    /// 16), when the frame parses as IP.
    addr: Option<(usize, usize)>,
}

/// The capture looped into a stream of `total` frames at `rate` packets a
/// second from `t0_ns` (see the module doc). Copy 0 is the capture as is.
pub(crate) struct Looped {
    bytes: Vec<u8>,
    frames: Vec<Stored>,
    total: u64,
    next: u64,
    t0_ns: u64,
    rate: u64,
    scratch: Vec<u8>,
    stats: SourceStats,
    /// Release granularity when paced (see [`Looped::paced`]); 0: not paced.
    tick_ns: u64,
    /// When the first frame was handed out (the schedule's origin).
    started: Option<Instant>,
    /// The release offset already waited for: frames released with it need no clock read.
    released_ns: Option<u64>,
}

/// Copies of a capture a stream can hold: the XOR mask has 16 bits.
pub(crate) const MAX_COPIES: u64 = 1 << 16;

impl Looped {
    /// The frames of the capture in `file`, to be looped.
    pub(crate) fn new(file: &[u8], total: u64, rate: u64) -> Result<Looped, CaptureError> {
        let mut src = SliceReader::new(file)?;
        let mut bytes = Vec::with_capacity(file.len());
        let mut frames = Vec::new();
        let mut t0_ns = None;
        while let Some(item) = src.next_packet() {
            let p = match item {
                Ok(p) => p,
                Err(e) if e.is_fatal() => break,
                Err(_) => continue,
            };
            t0_ns.get_or_insert(p.ts_ns);
            let at = bytes.len();
            bytes.extend_from_slice(p.data);
            let addr = clarion_wire::parse_frame(p.link, p.data, p.ts_ns, p.orig_len)
                .ok()
                .and_then(|rec| locate(p.data, &rec));
            frames.push(Stored {
                link: p.link,
                data: at..bytes.len(),
                orig_len: p.orig_len,
                addr,
            });
        }
        Ok(Looped {
            bytes,
            frames,
            total,
            next: 0,
            t0_ns: t0_ns.unwrap_or(0),
            rate: rate.max(1),
            scratch: Vec::new(),
            stats: SourceStats::default(),
            tick_ns: 0,
            started: None,
            released_ns: None,
        })
    }

    /// Hands frames out no earlier than their time on the schedule, in
    /// bursts every `tick` (a frame is released at the end of the tick its
    /// time falls in): as a NIC poll loop takes a link's packets, with one
    /// sleep a tick rather than one a packet (a sleep and its wake-up cost
    /// microseconds of CPU, more than the work on a packet). A consumer
    /// that falls behind gets the late frames at once.
    pub(crate) fn paced(mut self, tick: Duration) -> Looped {
        self.tick_ns = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX).max(1);
        self
    }

    /// Frames in the capture.
    pub(crate) fn capture_len(&self) -> usize {
        self.frames.len()
    }

    /// Copies of the capture the stream spans.
    pub(crate) fn copies(&self) -> u64 {
        let n = self.frames.len().max(1) as u64;
        self.total.div_ceil(n)
    }

    /// The stream again from its first frame.
    pub(crate) fn rewind(&mut self) {
        self.next = 0;
        self.stats = SourceStats::default();
        self.started = None;
        self.released_ns = None;
    }

    /// Frame `i`'s offset from the first on the paced schedule, ns.
    fn offset_ns(&self, i: u64) -> u64 {
        let offset = u128::from(i) * 1_000_000_000 / u128::from(self.rate);
        u64::try_from(offset).unwrap_or(u64::MAX)
    }

    /// Time of frame `i` on the paced schedule.
    fn ts(&self, i: u64) -> u64 {
        self.t0_ns.saturating_add(self.offset_ns(i))
    }

    /// Waits until frame `i` is due (see [`Looped::paced`]).
    fn wait_for(&mut self, i: u64) {
        if self.tick_ns == 0 {
            return;
        }
        let started = *self.started.get_or_insert_with(Instant::now);
        let release = self
            .offset_ns(i)
            .div_ceil(self.tick_ns)
            .saturating_mul(self.tick_ns);
        if self.released_ns.is_some_and(|r| release <= r) {
            return;
        }
        self.released_ns = Some(release);
        let due = started + Duration::from_nanos(release);
        if let Some(left) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(left);
        }
    }

    /// The parsed records of the capture's frames (copy 0, capture time).
    pub(crate) fn records(&self) -> impl Iterator<Item = PacketRecord> + '_ {
        self.frames.iter().filter_map(|f| {
            clarion_wire::parse_frame(f.link, &self.bytes[f.data.clone()], 0, f.orig_len).ok()
        })
    }
}

/// Where `rec`'s addresses sit in `data`: the offset of the source
/// address (followed by the destination, as in IPv4 and IPv6 headers) and
/// the length of one. The first match behind a version nibble of its
/// family (12 bytes before in IPv4, 8 in IPv6) is the outer header: link
/// headers are skipped even if their bytes match, and an ICMP error's
/// quoted header comes after it.
fn locate(data: &[u8], rec: &PacketRecord) -> Option<(usize, usize)> {
    let (len, version, back) = if rec.key.is_ipv6() { (16, 6, 8) } else { (4, 4, 12) };
    let mut needle = Vec::with_capacity(2 * len);
    needle.extend_from_slice(&rec.key.src_ip[..len]);
    needle.extend_from_slice(&rec.key.dst_ip[..len]);
    data.windows(2 * len)
        .enumerate()
        .find(|&(at, w)| w == needle && at >= back && data[at - back] >> 4 == version)
        .map(|(at, _)| (at, len))
}

/// Copy `k`'s addresses: bytes 1 and 2 of each XORed with `k`'s low and
/// high bytes. The same map on both addresses keeps the two directions of
/// a conversation together; distinct `k` give distinct flows. Checksums
/// are left as they were: nothing on the measured path checks them.
fn shift(addr: &mut [u8], k: u64) {
    addr[1] ^= k as u8;
    addr[2] ^= (k >> 8) as u8;
}

impl Frames for Looped {
    fn next_frame(&mut self) -> Option<Result<(usize, RawPacket<'_>), CaptureError>> {
        let n = self.frames.len() as u64;
        if self.next >= self.total || n == 0 {
            return None;
        }
        let i = self.next;
        self.next += 1;
        self.wait_for(i);
        let ts_ns = self.ts(i);
        let f = &self.frames[(i % n) as usize];
        let copy = (i / n) % MAX_COPIES;
        let original = &self.bytes[f.data.clone()];
        let data: &[u8] = match f.addr {
            Some((at, len)) if copy > 0 => {
                self.scratch.clear();
                self.scratch.extend_from_slice(original);
                shift(&mut self.scratch[at..at + len], copy);
                shift(&mut self.scratch[at + len..at + 2 * len], copy);
                &self.scratch
            }
            _ => original,
        };
        self.stats.packets += 1;
        self.stats.bytes += data.len() as u64;
        Some(Ok((
            0,
            RawPacket {
                index: i,
                ts_ns,
                link: f.link,
                data,
                orig_len: f.orig_len,
                byte_offset: 0,
            },
        )))
    }

    fn source_stats(&self) -> SourceStats {
        self.stats
    }
}

/// The source-port range `lo..=hi` whose packets' share of `records` is
/// nearest `fraction` (packets without ports count in the whole, never in
/// a range); with that share.
pub(crate) fn port_range(
    records: impl Iterator<Item = PacketRecord>,
    fraction: f64,
) -> Option<(u16, u16, f64)> {
    let mut hist = vec![0u64; 1 << 16];
    let mut total = 0u64;
    for r in records {
        total += 1;
        if r.key.has_ports() {
            hist[usize::from(r.key.src_port)] += 1;
        }
    }
    if total == 0 {
        return None;
    }
    let target = fraction * total as f64;
    // Two pointers: for each start, the shortest range reaching the target
    // and the one just short of it are the candidates.
    let mut best: Option<(usize, usize, u64)> = None;
    let mut consider = |lo: usize, hi: usize, sum: u64| {
        if sum == 0 {
            return;
        }
        let better = match best {
            None => true,
            Some((_, _, s)) => (sum as f64 - target).abs() < (s as f64 - target).abs(),
        };
        if better {
            best = Some((lo, hi, sum));
        }
    };
    let (mut hi, mut sum) = (0usize, 0u64);
    for lo in 0..hist.len() {
        if hi < lo {
            hi = lo;
            sum = 0;
        }
        while hi < hist.len() && (sum as f64) < target {
            sum += hist[hi];
            hi += 1;
        }
        // [lo, hi) reaches the target (or the end); [lo, hi - 1) falls short.
        if hi > lo {
            consider(lo, hi - 1, sum);
            if hi - 1 > lo {
                consider(lo, hi - 2, sum - hist[hi - 1]);
            }
        }
        sum -= hist[lo].min(sum);
    }
    best.map(|(lo, hi, sum)| (lo as u16, hi as u16, sum as f64 / total as f64))
}

// ---------------------------------------------------------------------
// Receivers.
// ---------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Listen {
    /// Clarion header datagrams, decoded.
    Headers,
    /// VXLAN datagrams, their header checked.
    Vxlan,
}

/// What a receiver took in.
#[derive(Clone, Copy, Debug, Default)]
struct Received {
    datagrams: u64,
    /// Header records decoded, or VXLAN frames.
    packets: u64,
    /// Datagrams that did not decode.
    bad: u64,
    cpu_ns: u64,
}

/// A UDP socket on 127.0.0.1 read by a thread of its own.
struct Receiver {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Received>,
}

impl Receiver {
    fn start(kind: Listen) -> std::io::Result<Receiver> {
        let socket = UdpSocket::bind("127.0.0.1:0")?;
        socket.set_read_timeout(Some(Duration::from_millis(20)))?;
        grow_receive_buffer(&socket, 16 << 20);
        let addr = socket.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("export-cost-rx".into())
            .spawn(move || receive(&socket, kind, &stopping))?;
        Ok(Receiver { addr, stop, thread })
    }

    /// Reads what is queued, then stops (every datagram sent on loopback
    /// is queued by the time its send returned).
    fn finish(self) -> Received {
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap_or_default()
    }
}

fn receive(socket: &UdpSocket, kind: Listen, stop: &AtomicBool) -> Received {
    let cpu0 = thread_cpu_ns();
    let mut got = Received::default();
    let mut buf = vec![0u8; 65_536];
    let mut records = Vec::new();
    loop {
        match socket.recv(&mut buf) {
            Ok(n) => {
                got.datagrams += 1;
                let d = &buf[..n];
                match kind {
                    Listen::Headers => {
                        records.clear();
                        match clarion_headers::decode_datagram(d, &mut records) {
                            Ok(_) => got.packets += records.len() as u64,
                            Err(_) => got.bad += 1,
                        }
                    }
                    // RFC 7348: 8-byte header, flags 0x08 (VNI valid), an inner frame.
                    Listen::Vxlan => {
                        if n > 8 && d[0] == 0x08 {
                            got.packets += 1;
                        } else {
                            got.bad += 1;
                        }
                    }
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if stop.load(Ordering::Acquire) {
                    break;
                }
            }
            Err(_) => got.bad += 1,
        }
    }
    got.cpu_ns = thread_cpu_ns().saturating_sub(cpu0);
    got
}

/// Asks for a receive buffer of `bytes` (the kernel caps it at
/// `net.core.rmem_max`, or forces it as root); losses are counted anyway.
fn grow_receive_buffer(socket: &UdpSocket, bytes: i32) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let fd = socket.as_raw_fd();
        for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
            // SAFETY: `fd` is an open socket owned by `socket`; the option
            // value is an i32 of the size passed, read by the kernel only.
            let r = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    (&bytes as *const i32).cast(),
                    std::mem::size_of::<i32>() as libc::socklen_t,
                )
            };
            if r == 0 {
                return;
            }
        }
    }
}

/// CPU time (user + system) this thread has used, ns.
pub(crate) fn thread_cpu_ns() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `u` is a writable, properly sized rusage; getrusage only
        // writes it, and on success (0) every field is initialized.
        let r = unsafe { libc::getrusage(libc::RUSAGE_THREAD, u.as_mut_ptr()) };
        if r != 0 {
            return 0;
        }
        // SAFETY: getrusage succeeded, so it filled the structure.
        let u = unsafe { u.assume_init() };
        let ns = |t: libc::timeval| {
            u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000
                + u64::try_from(t.tv_usec).unwrap_or(0) * 1_000
        };
        ns(u.ru_utime) + ns(u.ru_stime)
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

// ---------------------------------------------------------------------
// Runs.
// ---------------------------------------------------------------------

/// Counts the reports and drops them.
#[derive(Default)]
struct Discard {
    reports: u64,
}

impl<St: Stage + ?Sized> Driver<St> for Discard {
    type Error = Failure;
    fn reports(&mut self, _stage: &mut St, reports: &mut Vec<Report>) -> Result<(), Failure> {
        self.reports += reports.len() as u64;
        reports.clear();
        Ok(())
    }
}

/// One variant's run.
#[derive(Clone, Debug)]
struct Run {
    variant: Variant,
    wall: Duration,
    cpu_ns: u64,
    frames: u64,
    reports: u64,
    /// Packets the policy took (0 for the monitor alone).
    exported: u64,
    /// What the exporter counted at its destination (None without one).
    export: Option<ExportStats>,
    /// What arrived: decoded headers, VXLAN frames, or packets read back
    /// from the files.
    delivered: u64,
    receiver: Received,
}

impl Run {
    fn cores(&self) -> f64 {
        self.cpu_ns as f64 / self.wall.as_nanos().max(1) as f64
    }
    fn ns_per_packet(&self) -> f64 {
        self.cpu_ns as f64 / self.frames.max(1) as f64
    }
    fn pps(&self) -> f64 {
        self.frames as f64 / self.wall.as_secs_f64().max(1e-9)
    }
    /// Packets the destination was handed but could not take.
    fn dropped(&self) -> u64 {
        self.export
            .as_ref()
            .map_or(0, |x| x.destinations.iter().map(|d| d.dropped).sum())
    }
}

/// Everything a run needs besides the variant.
struct Bench<'a> {
    a: &'a ExportCostArgs,
    specs: Vec<EventSpec>,
    looped: Looped,
    /// The `headers-part` source-port range.
    part: (u16, u16),
    dir: PathBuf,
}

impl Bench<'_> {
    /// The policy file of a variant, its destination at `addr`.
    fn policy(&self, v: Variant, addr: Option<SocketAddr>) -> Option<String> {
        let port = addr.map_or(0, |a| a.port());
        let (lo, hi) = self.part;
        Some(match v {
            Variant::Monitor => return None,
            // IP protocol 253 is reserved for experiments (RFC 3692): no real packet carries it.
            Variant::Classify => {
                format!("export none\n  filter proto = 253\n  send headers to collector 127.0.0.1 port {port}\n")
            }
            Variant::Headers => format!("export all\n  send headers to collector 127.0.0.1 port {port}\n"),
            Variant::Pcapng => "export all\n  send packets to pcapng rotate 1GB\n".to_string(),
            Variant::Vxlan => format!("export all\n  send packets to vxlan 127.0.0.1 port {port} vni 42\n"),
            Variant::HeadersPart => format!(
                "export part\n  filter src_port in {lo}..{hi}\n  send headers to collector 127.0.0.1 port {port}\n"
            ),
        })
    }

    fn monitor(&self) -> Result<Monitor, Failure> {
        crate::real::build_monitor(&crate::real::run_config(), &self.specs, &self.a.events)
    }

    fn run(&mut self, v: Variant, round: u32) -> Result<Run, Failure> {
        let receiver = v
            .receiver()
            .map(Receiver::start)
            .transpose()
            .map_err(|e| Failure::Runtime(anyhow!("cannot open a receiver on 127.0.0.1: {e}")))?;
        let exporter = match self.policy(v, receiver.as_ref().map(|r| r.addr)) {
            None => None,
            Some(src) => {
                let policies = clarion_lang::check_exports(&src).map_err(|d| {
                    Failure::Runtime(anyhow!(
                        "generated policy refused: {}",
                        d.render("policy", &src, false)
                    ))
                })?;
                let config = ExportConfig {
                    export_dir: Some(self.dir.clone()),
                    run_id: format!("round{round}"),
                    ..ExportConfig::default()
                };
                Some(Exporter::new(&policies, &config).map_err(|e| Failure::Runtime(anyhow!(e)))?)
            }
        };
        let monitor = self.monitor()?;
        self.looped.rewind();
        // Paced by the source (see `Looped::paced`), not by the replay's
        // per-packet sleeps.
        let options = ReplayOptions::default();
        let mut driver = Discard::default();
        let (replayed, cpu_ns, export) = match exporter {
            None => {
                let mut stage = monitor;
                let cpu0 = thread_cpu_ns();
                let r = replay(&mut self.looped, &mut stage, &mut driver, &options)?;
                (r, thread_cpu_ns().saturating_sub(cpu0), None)
            }
            Some(x) => {
                let stages = Stages {
                    exports: Some(ExportPolicies::new(x)),
                    ..Stages::default()
                };
                let mut stage = Pipeline::new(monitor, stages);
                let cpu0 = thread_cpu_ns();
                let r = replay(&mut self.looped, &mut stage, &mut driver, &options)?;
                let stats = stage.stage::<ExportPolicies>().map(|x| x.exporter().stats());
                (r, thread_cpu_ns().saturating_sub(cpu0), stats)
            }
        };
        let received = receiver.map(Receiver::finish).unwrap_or_default();
        let exported = export
            .as_ref()
            .map_or(0, |x| x.policies.iter().map(|p| p.matched).sum());
        let delivered = match v {
            Variant::Pcapng => read_back(export.as_ref())?,
            _ => received.packets,
        };
        Ok(Run {
            variant: v,
            wall: replayed.elapsed,
            cpu_ns,
            frames: replayed.frames,
            reports: driver.reports,
            exported,
            export,
            delivered,
            receiver: received,
        })
    }
}

/// Packets in the files an exporter wrote, read back; the files removed.
fn read_back(export: Option<&ExportStats>) -> Result<u64, Failure> {
    let mut packets = 0;
    for f in export.iter().flat_map(|x| &x.destinations).flat_map(|d| &d.files) {
        let mut file = clarion_capture::open(&f.path)
            .map_err(|e| Failure::Runtime(anyhow!("cannot read back {}: {e}", f.path.display())))?;
        while let Some(p) = file.next_packet() {
            match p {
                Ok(_) => packets += 1,
                // A file whose writing failed (a full disk) may end in a
                // partial block; the exporter counted the error.
                Err(e) if e.is_fatal() && !f.complete => break,
                Err(e) if e.is_fatal() => {
                    return Err(Failure::Runtime(anyhow!("{} is damaged: {e}", f.path.display())))
                }
                Err(_) => {}
            }
        }
        drop(file);
        // A failed removal leaves a file in a temporary directory; not worth failing for.
        let _ = std::fs::remove_file(&f.path);
    }
    Ok(packets)
}

// ---------------------------------------------------------------------
// Figures.
// ---------------------------------------------------------------------

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// A variant's medians over rounds; ratios and per-export costs against
/// the monitor alone of the same round.
#[derive(Clone, Debug)]
struct Row {
    variant: Variant,
    pps: f64,
    cores: f64,
    ns_per_packet: f64,
    ratio: f64,
    /// (CPU − CPU of the monitor alone) / exported, ns; NaN if nothing was exported.
    ns_per_export: f64,
    /// Extra cores over the monitor alone.
    extra_cores: f64,
    exported: u64,
    delivered: u64,
    dropped: u64,
    /// Datagrams the destination sent (header streams, mirrors).
    datagrams: u64,
    /// Send or write errors at the destination, and the first one's message.
    errors: u64,
    first_error: Option<String>,
    receiver_cores: f64,
    hit_rate: f64,
    lookups: f64,
    reports: u64,
    frames: u64,
}

fn rows(runs: &[Vec<Run>]) -> Vec<Row> {
    // runs[round] holds every variant's run of that round; the monitor's is the base.
    let variants: Vec<Variant> = runs
        .first()
        .map(|r| r.iter().map(|x| x.variant).collect())
        .unwrap_or_default();
    let base = |round: &[Run]| round.iter().find(|r| r.variant == Variant::Monitor).cloned();
    let mut out = Vec::new();
    for v in variants {
        let mine: Vec<(Run, Option<Run>)> = runs
            .iter()
            .filter_map(|round| Some((round.iter().find(|r| r.variant == v)?.clone(), base(round))))
            .collect();
        let get = |f: &dyn Fn(&Run, Option<&Run>) -> f64| {
            median(mine.iter().map(|(r, b)| f(r, b.as_ref())).collect())
        };
        let last = mine.last().map(|(r, _)| r.clone());
        let stats = last.as_ref().and_then(|r| r.export.clone());
        out.push(Row {
            variant: v,
            pps: get(&|r, _| r.pps()),
            cores: get(&|r, _| r.cores()),
            ns_per_packet: get(&|r, _| r.ns_per_packet()),
            ratio: get(&|r, b| b.map_or(f64::NAN, |b| r.cpu_ns as f64 / b.cpu_ns.max(1) as f64)),
            ns_per_export: get(&|r, b| match b {
                Some(b) if r.exported > 0 => (r.cpu_ns as f64 - b.cpu_ns as f64) / r.exported as f64,
                _ => f64::NAN,
            }),
            extra_cores: get(&|r, b| b.map_or(f64::NAN, |b| r.cores() - b.cores())),
            exported: last.as_ref().map_or(0, |r| r.exported),
            delivered: last.as_ref().map_or(0, |r| r.delivered),
            dropped: last.as_ref().map_or(0, Run::dropped),
            errors: stats
                .as_ref()
                .map_or(0, |x| x.destinations.iter().map(|d| d.errors).sum()),
            datagrams: stats
                .as_ref()
                .map_or(0, |x| x.destinations.iter().map(|d| d.datagrams).sum()),
            first_error: stats
                .as_ref()
                .and_then(|x| x.destinations.iter().find_map(|d| d.first_error.clone())),
            receiver_cores: get(&|r, _| r.receiver.cpu_ns as f64 / r.wall.as_nanos().max(1) as f64),
            hit_rate: stats.as_ref().map_or(f64::NAN, |x| x.classifier.hit_rate()),
            lookups: stats
                .as_ref()
                .map_or(f64::NAN, |x| x.classifier.fast_lookups_per_packet()),
            reports: last.as_ref().map_or(0, |r| r.reports),
            frames: last.as_ref().map_or(0, |r| r.frames),
        });
    }
    out
}

fn table(rows: &[Row], rate: u64) -> String {
    let mut t = format!(
        "{:<13} {:>10} {:>10} {:>9} {:>9} {:>8} {:>8} {:>6} {:>9} {:>11} {:>8} {:>8} {:>7}\n",
        "variant",
        "exported",
        "delivered",
        "kpps",
        "cores",
        format!("need@{}k", rate / 1000),
        "ns/pkt",
        "ratio",
        "+cores",
        "ns/exported",
        "rx_cores",
        "hit_rate",
        "lk/pkt"
    );
    let opt = |x: f64, prec: usize| {
        if x.is_finite() {
            format!("{x:.prec$}")
        } else {
            "-".into()
        }
    };
    for r in rows {
        t += &format!(
            "{:<13} {:>10} {:>10} {:>9.1} {:>9.3} {:>8.3} {:>8.0} {:>6.2} {:>9} {:>11} {:>8} {:>8} {:>7}\n",
            r.variant.name(),
            thousands(r.exported),
            thousands(r.delivered),
            r.pps / 1e3,
            r.cores,
            r.ns_per_packet * rate as f64 / 1e9,
            r.ns_per_packet,
            r.ratio,
            opt(r.extra_cores, 3),
            opt(r.ns_per_export, 0),
            opt(r.receiver_cores, 3),
            opt(r.hit_rate, 4),
            opt(r.lookups, 2),
        );
    }
    t
}

fn row_json(r: &Row, rate: u64, runs: &[Vec<Run>]) -> serde_json::Value {
    let num = |x: f64| if x.is_finite() { json!(x) } else { json!(null) };
    let rounds: Vec<serde_json::Value> = runs
        .iter()
        .flatten()
        .filter(|run| run.variant == r.variant)
        .map(|run| {
            json!({
                "frames": run.frames,
                "wall_ns": u64::try_from(run.wall.as_nanos()).unwrap_or(u64::MAX),
                "cpu_ns": run.cpu_ns,
                "receiver_cpu_ns": run.receiver.cpu_ns,
                "exported": run.exported,
                "delivered": run.delivered,
            })
        })
        .collect();
    json!({
        "variant": r.variant.name(),
        "cores_needed_at_rate": r.ns_per_packet * rate as f64 / 1e9,
        "rounds": rounds,
        "frames": r.frames,
        "reports": r.reports,
        "exported": r.exported,
        "delivered": r.delivered,
        "dropped": r.dropped,
        "errors": r.errors,
        "datagrams": r.datagrams,
        "packets_per_s": r.pps,
        "cores": r.cores,
        "cpu_ns_per_packet": r.ns_per_packet,
        "ratio_to_monitor": num(r.ratio),
        "extra_cores": num(r.extra_cores),
        "cpu_ns_per_exported": num(r.ns_per_export),
        "receiver_cores": num(r.receiver_cores),
        "fast_path_hit_rate": num(r.hit_rate),
        "fast_lookups_per_packet": num(r.lookups),
    })
}

pub fn export_cost(a: &ExportCostArgs) -> Result<ExitCode, Failure> {
    if !(a.seconds > 0.0 && a.seconds.is_finite()) {
        return Err(Failure::Usage(
            "clarion-lab: --seconds must be a positive number\n".into(),
        ));
    }
    if !(a.fraction > 0.0 && a.fraction <= 1.0) {
        return Err(Failure::Usage(
            "clarion-lab: --fraction must be in (0, 1]\n".into(),
        ));
    }
    let specs = crate::real::load_events(&a.events)?;
    let file = std::fs::read(&a.pcap)
        .map_err(|e| Failure::Usage(format!("clarion-lab: cannot read {}: {e}\n", a.pcap.display())))?;
    let total = ((a.rate as f64) * a.seconds).round().max(1.0) as u64;
    let looped = Looped::new(&file, total, a.rate)
        .map_err(|e| Failure::Usage(format!("clarion-lab: cannot read {}: {e}\n", a.pcap.display())))?
        .paced(Duration::from_micros(a.tick_us));
    if looped.capture_len() == 0 {
        return Err(Failure::Usage(format!(
            "clarion-lab: {} holds no frame\n",
            a.pcap.display()
        )));
    }
    if looped.copies() > MAX_COPIES {
        return Err(Failure::Usage(format!(
            "clarion-lab: {} packets would loop the capture more than {} times; lower --rate or --seconds\n",
            thousands(total),
            thousands(MAX_COPIES)
        )));
    }
    let (lo, hi, share) = port_range(looped.records(), a.fraction).unwrap_or((0, 0, 0.0));
    let tmp;
    let dir = match &a.export_dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir()
                .map_err(|e| Failure::Runtime(anyhow!("cannot make a temporary directory: {e}")))?;
            tmp.path().to_path_buf()
        }
    };
    let mut variants: Vec<Variant> = if a.variants.is_empty() {
        Variant::ALL.to_vec()
    } else {
        let mut v = vec![Variant::Monitor];
        v.extend(a.variants.iter().filter(|&&v| v != Variant::Monitor));
        v
    };
    variants.dedup();
    let pinned = match a.core {
        Some(c) => {
            if core_affinity::set_for_current(core_affinity::CoreId { id: c }) {
                format!("pinned to core {c}")
            } else {
                format!("NOT pinned (core {c} refused)")
            }
        }
        None => "not pinned".to_string(),
    };
    eprintln!(
        "clarion-lab export-cost: {} looped {}x ({} frames a copy) = {} packets at {} pps ({:.1} s a run), \
         {} variants x {} rounds, events {}; headers-part takes src_port {lo}..{hi} ({:.1}% of the capture's packets); {pinned}",
        a.pcap.display(),
        looped.copies(),
        thousands(looped.capture_len() as u64),
        thousands(total),
        thousands(a.rate),
        a.seconds,
        variants.len(),
        a.rounds,
        a.events.display(),
        share * 100.0
    );
    let mut bench = Bench {
        a,
        specs,
        looped,
        part: (lo, hi),
        dir,
    };
    let warm = bench.run(Variant::Monitor, 0)?;
    eprintln!(
        "clarion-lab export-cost: warm-up, monitor {:>7.1} kpps, {:.3} cores (not counted)",
        warm.pps() / 1e3,
        warm.cores()
    );
    let mut runs: Vec<Vec<Run>> = Vec::new();
    for round in 1..=a.rounds {
        let mut this = Vec::new();
        let n = variants.len();
        for k in 0..n {
            let v = variants[(k + round as usize - 1) % n];
            let r = bench.run(v, round)?;
            eprintln!(
                "clarion-lab export-cost: round {round}/{}, {:<12} {:>7.1} kpps, {:.3} cores, {:.0} ns/packet, {} exported, {} delivered",
                a.rounds,
                v.name(),
                r.pps() / 1e3,
                r.cores(),
                r.ns_per_packet(),
                thousands(r.exported),
                thousands(r.delivered)
            );
            this.push(r);
        }
        runs.push(this);
    }
    let rows = rows(&runs);
    eprint!("{}", table(&rows, a.rate));
    let mut status = ExitCode::SUCCESS;
    for r in &rows {
        if r.pps < 0.97 * a.rate as f64 {
            eprintln!(
                "clarion-lab: warning: {} ran at {:.1} kpps, below the {:.1} kpps asked: this machine did not sustain the rate",
                r.variant.name(),
                r.pps / 1e3,
                a.rate as f64 / 1e3
            );
        }
        if r.delivered > r.exported {
            eprintln!(
                "clarion-lab: {} delivered {} packets but exported {}: the harness miscounts",
                r.variant.name(),
                r.delivered,
                r.exported
            );
            status = ExitCode::from(1);
        } else if r.delivered < r.exported || r.errors > 0 {
            eprintln!(
                "clarion-lab: warning: {} lost {} of {} exported packets ({} counted as dropped by the exporter, {} errors{})",
                r.variant.name(),
                thousands(r.exported - r.delivered),
                thousands(r.exported),
                thousands(r.dropped),
                r.errors,
                r.first_error.as_deref().map(|e| format!(", first: {e}")).unwrap_or_default()
            );
        }
    }
    if a.json {
        let j = json!({
            "schema": "clarion.export_cost/1",
            "pcap": a.pcap.display().to_string(),
            "events": a.events.display().to_string(),
            "rate_pps": a.rate,
            "seconds": a.seconds,
            "packets": total,
            "copies": bench.looped.copies(),
            "capture_frames": bench.looped.capture_len(),
            "rounds": a.rounds,
            "headers_part": { "src_port_lo": lo, "src_port_hi": hi, "capture_share": share },
            "core": a.core,
            "variants": rows.iter().map(|r| row_json(r, a.rate, &runs)).collect::<Vec<_>>(),
        });
        println!("{j}");
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_capture::{PcapWriter, TsResolution};
    use clarion_wire::build::{FrameSpec, IpPair, TcpSpec, Transport, Vlan};
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const CAPTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/captures");

    /// The key of copy `k` written out from the rule: bytes 1 and 2 of
    /// both addresses XORed with `k`'s low and high bytes.
    fn shifted_key(mut key: clarion_wire::FlowKey, k: u64) -> clarion_wire::FlowKey {
        for a in [&mut key.src_ip, &mut key.dst_ip] {
            a[1] ^= (k & 0xff) as u8;
            a[2] ^= ((k >> 8) & 0xff) as u8;
        }
        key
    }

    fn spec_with_key(spec: &FrameSpec, k: u64) -> FrameSpec {
        let mut s = spec.clone();
        s.ip = match spec.ip {
            IpPair::V4 { src, dst } => {
                let f = |a: Ipv4Addr| {
                    let mut o = a.octets();
                    o[1] ^= (k & 0xff) as u8;
                    o[2] ^= ((k >> 8) & 0xff) as u8;
                    Ipv4Addr::from(o)
                };
                IpPair::V4 {
                    src: f(src),
                    dst: f(dst),
                }
            }
            IpPair::V6 { src, dst } => {
                let f = |a: Ipv6Addr| {
                    let mut o = a.octets();
                    o[1] ^= (k & 0xff) as u8;
                    o[2] ^= ((k >> 8) & 0xff) as u8;
                    Ipv6Addr::from(o)
                };
                IpPair::V6 {
                    src: f(src),
                    dst: f(dst),
                }
            }
        };
        s
    }

    fn pcap_of(frames: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        {
            let mut w = PcapWriter::new(&mut out, LinkType::Ethernet, TsResolution::Nano).unwrap();
            for (i, f) in frames.iter().enumerate() {
                w.write_packet(1_000_000 + i as u64, f, f.len() as u32).unwrap();
            }
        }
        out
    }

    /// Every frame of `looped`, parsed, with its time.
    fn stream(looped: &mut Looped) -> Vec<(u64, Result<PacketRecord, ()>, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(Ok((_, p))) = looped.next_frame() {
            let rec = clarion_wire::parse_frame(p.link, p.data, p.ts_ns, p.orig_len).map_err(|_| ());
            out.push((p.ts_ns, rec, p.data.to_vec()));
        }
        out
    }

    fn arb_spec() -> impl Strategy<Value = FrameSpec> {
        let ip = prop_oneof![
            (any::<u32>(), any::<u32>()).prop_map(|(a, b)| IpPair::V4 {
                src: Ipv4Addr::from(a),
                dst: Ipv4Addr::from(b)
            }),
            (any::<u128>(), any::<u128>()).prop_map(|(a, b)| IpPair::V6 {
                src: Ipv6Addr::from(a),
                dst: Ipv6Addr::from(b)
            }),
        ];
        let transport = prop_oneof![
            (any::<u16>(), any::<u16>()).prop_map(|(s, d)| Transport::Tcp(TcpSpec {
                src_port: s,
                dst_port: d,
                ..TcpSpec::default()
            })),
            (any::<u16>(), any::<u16>()).prop_map(|(s, d)| Transport::Udp {
                src_port: s,
                dst_port: d
            }),
        ];
        (ip, transport, proptest::option::of(0u16..4096), 0usize..64).prop_map(
            |(ip, transport, vlan, payload_len)| FrameSpec {
                ip,
                transport,
                vlans: vlan.map(Vlan::dot1q).into_iter().collect(),
                payload_len,
                ..FrameSpec::default()
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Generated traffic: copy k of each frame parses as the builder's
        /// own record of the same frame built with copy k's addresses, at
        /// the paced time; bytes other than the addresses (and the IPv4
        /// header checksum, which the stream does not fix) are untouched.
        #[test]
        fn copies_are_the_frames_with_shifted_addresses(
            specs in proptest::collection::vec(arb_spec(), 1..8),
            copies in 1u64..40,
            rate in 1u64..10_000_000,
        ) {
            let frames: Vec<Vec<u8>> = specs.iter().map(FrameSpec::build).collect();
            let n = frames.len() as u64;
            let total = n * copies - (copies > 1) as u64; // a partial last copy too
            let mut looped = Looped::new(&pcap_of(&frames), total, rate).unwrap();
            let got = stream(&mut looped);
            prop_assert_eq!(got.len() as u64, total);
            for (i, (ts, rec, data)) in got.into_iter().enumerate() {
                let i = i as u64;
                let (k, j) = (i / n, (i % n) as usize);
                let want_ts = 1_000_000 + (i as u128 * 1_000_000_000 / rate as u128) as u64;
                prop_assert_eq!(ts, want_ts);
                let want = spec_with_key(&specs[j], k);
                let rec = rec.map_err(|_| TestCaseError::fail("a copy did not parse"))?;
                prop_assert_eq!(rec, want.record(want_ts));
                prop_assert_eq!(rec.key, shifted_key(specs[j].flow_key(), k));
                let built = want.build();
                prop_assert_eq!(data.len(), built.len());
                let differ = data.iter().zip(&built).filter(|(a, b)| a != b).count();
                // At most the checksums the stream does not fix differ:
                // IPv4's header checksum and the TCP or UDP one (whose
                // pseudo-header holds the addresses), two bytes each.
                prop_assert!(differ <= 4, "{} bytes differ", differ);
            }
        }

        /// The port range's share is as near the target as any range's,
        /// found by trying every range (ports kept small so that is cheap).
        #[test]
        fn port_range_is_the_nearest(
            ports in proptest::collection::vec(proptest::option::of(0u16..48), 1..300),
            fraction in 0.01f64..1.0,
        ) {
            let recs: Vec<PacketRecord> = ports
                .iter()
                .map(|p| {
                    let spec = match p {
                        Some(p) => FrameSpec {
                            transport: Transport::Udp { src_port: *p, dst_port: 53 },
                            ..FrameSpec::default()
                        },
                        None => FrameSpec { transport: Transport::Icmp { msg_type: 8, code: 0 }, ..FrameSpec::default() },
                    };
                    spec.record(0)
                })
                .collect();
            let total = recs.len() as f64;
            let share = |lo: u16, hi: u16| {
                ports.iter().filter(|p| p.is_some_and(|p| (lo..=hi).contains(&p))).count() as f64 / total
            };
            let got = port_range(recs.iter().cloned(), fraction);
            let mut best: Option<f64> = None;
            for lo in 0..48u16 {
                for hi in lo..48 {
                    let s = share(lo, hi);
                    if s > 0.0 && best.is_none_or(|b| (s - fraction).abs() < (b - fraction).abs()) {
                        best = Some(s);
                    }
                }
            }
            match (got, best) {
                (None, None) => {}
                (Some((lo, hi, s)), Some(b)) => {
                    prop_assert!((s - share(lo, hi)).abs() < 1e-12, "reported share is the range's");
                    prop_assert!((s - fraction).abs() <= (b - fraction).abs() + 1e-12, "{} vs best {}", s, b);
                }
                (g, b) => prop_assert!(false, "{:?} vs {:?}", g, b),
            }
        }
    }

    /// Real captures: copy k of every frame parses as the original frame
    /// (read by the capture reader on its own) with copy k's key, every IP
    /// frame's addresses were found, and frames that are not IP are untouched.
    #[test]
    fn real_captures_loop_with_shifted_keys() {
        let Ok(dir) = std::fs::read_dir(CAPTURES) else {
            eprintln!("skipped: {CAPTURES} is missing");
            return;
        };
        let mut checked = 0;
        for entry in dir {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            let mut originals = Vec::new();
            let mut reader = clarion_capture::open(&path).unwrap();
            while let Some(p) = reader.next_packet() {
                let Ok(p) = p else { continue };
                originals.push((p.link, p.data.to_vec(), p.orig_len));
            }
            let n = originals.len() as u64;
            let total = n * 3;
            let rate = 200_000;
            let mut looped = Looped::new(&bytes, total, rate).unwrap();
            let t0 = looped.t0_ns;
            let got = stream(&mut looped);
            assert_eq!(got.len() as u64, total, "{}", path.display());
            for (i, (ts, rec, data)) in got.into_iter().enumerate() {
                let i = i as u64;
                let (k, j) = (i / n, (i % n) as usize);
                let (link, orig, orig_len) = &originals[j];
                let want_ts = t0 + i * 1_000_000_000 / rate;
                assert_eq!(ts, want_ts);
                match clarion_wire::parse_frame(*link, orig, want_ts, *orig_len) {
                    Ok(mut want) => {
                        want.key = shifted_key(want.key, k);
                        assert_eq!(rec, Ok(want), "{} frame {j} copy {k}", path.display());
                    }
                    Err(_) => assert_eq!(&data, orig, "{} frame {j}: not IP, untouched", path.display()),
                }
                checked += 1;
            }
        }
        eprintln!("{checked} looped frames checked");
    }

    /// Paced: no frame is handed out before its tick ends, and the stream
    /// lasts about its schedule.
    #[test]
    fn paced_frames_never_come_early() {
        let frames: Vec<Vec<u8>> = (0..10).map(|_| FrameSpec::default().build()).collect();
        let rate = 100_000;
        let tick = Duration::from_millis(1);
        let mut looped = Looped::new(&pcap_of(&frames), 20_000, rate).unwrap().paced(tick);
        let mut at = Vec::new();
        let mut started = None;
        while let Some(Ok((_, p))) = looped.next_frame() {
            let s = *started.get_or_insert_with(Instant::now);
            at.push((p.index, s.elapsed()));
        }
        let schedule_start = looped.started.unwrap();
        let offset = started.unwrap().duration_since(schedule_start);
        for (i, t) in at {
            let due_ns = (i * 1_000_000_000 / rate).div_ceil(1_000_000) * 1_000_000;
            assert!(
                t + offset >= Duration::from_nanos(due_ns),
                "frame {i} at {t:?}, due {due_ns} ns"
            );
        }
        let total = started.unwrap().elapsed();
        assert!(total >= Duration::from_millis(199), "{total:?}");
        assert!(total < Duration::from_secs(5), "{total:?}");
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
