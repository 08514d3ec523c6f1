//! The traffic generator.
//!
//! # Model
//!
//! Packet `i` is stamped `start + i·10^9/rate` ns: the nominal rate, exactly,
//! with no jitter. Time drives two processes:
//!
//! - **Flows.** Flows arrive as a Poisson process (exponential
//!   inter-arrival times with mean `1/arrival_rate`) and live an
//!   exponentially distributed time with mean `active_flows / arrival_rate`,
//!   so by Little's law `active_flows` are active on average. The run starts
//!   in the steady state, with `active_flows` flows whose remaining lives are
//!   drawn from the same distribution (it is memoryless). Each flow picks a
//!   group of the [address plan](crate::layout) at random; its source host
//!   and port come from a counter, so no two flows share a 5-tuple.
//! - **Packets.** An ordinary packet continues the current *burst*: `burst`
//!   consecutive ordinary packets of one flow, after which the next burst
//!   picks, uniformly, an active flow other than the last one (with
//!   `burst = 1` every packet changes flow). A burst ends early if its flow
//!   expires. Should no flow be active (only with tiny `active_flows`), one
//!   arrives on the spot. With heavy-tailed `flow_sizes`
//!   ([`FlowSizes::Pareto`]) the pick is instead proportional to a weight
//!   each flow draws when it starts (after its other draws, so the uniform
//!   default's bytes are unchanged), and a few flows carry most packets.
//!
//! Five-tuples are unique for the first 32 × 64,512 = 2,064,384 flows of a
//! run (initial ones and arrivals); after that a flow may reuse an earlier
//! flow's source host and port, and shares its 5-tuple if it also drew the
//! same group (one chance in `groups`).
//!
//! A share `dos_fraction` of the packets, spread evenly (packet `i` is an
//! attack packet when `⌊(i+1)·f⌋ > ⌊i·f⌋`), belong to attack flows instead:
//! new flows in the same groups (hosts 32–63), `dos_packets` packets each,
//! taken round robin from `dos_packets` flows in flight so consecutive attack
//! packets come from different flows. An attack packet is a minimal frame
//! ([`DOS_FRAME_LEN`] bytes, padded): in a TCP group a bare SYN, then bare
//! ACKs; in a UDP group, empty datagrams.
//!
//! # Frames
//!
//! Ethernet, IPv4, TTL 64, `packet_size` bytes captured (no frame check
//! sequence; 64 by default, so 10 bytes of TCP payload or 22 of UDP). TCP
//! segments carry ACK|PSH and advance the flow's sequence number by their
//! payload; a share `retransmit_fraction` of a flow's segments after its
//! first resend the previous segment instead, which the monitor's `is_lost`
//! counts. There is no reverse traffic.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;

use clarion_capture::{PcapWriter, TsResolution};
use clarion_wire::build::{FrameSpec, IpPair, TcpSpec, Transport};
use clarion_wire::{tcp_flags, LinkType};

use crate::layout::{self, Proto, HOSTS, MAX_GROUPS};
use crate::rng::Rng;
use crate::sizes::{FlowSizes, Weights};
use crate::{invalid, WorkloadError};

/// Length of an attack packet's frame, in bytes.
pub const DOS_FRAME_LEN: usize = 64;

/// Most packets per attack flow (attack flows in flight are kept in a ring of this size).
pub const MAX_DOS_PACKETS: u32 = 1 << 16;

/// Smallest `packet_size` (the minimum Ethernet frame without its check sequence).
pub const MIN_PACKET_SIZE: usize = 60;

/// Largest `packet_size` (a 9,000-byte jumbo payload plus the Ethernet header).
pub const MAX_PACKET_SIZE: usize = 9_014;

const ETH_IPV4: usize = 14 + 20;
const TCP_HEADERS: usize = ETH_IPV4 + 20;
const UDP_HEADERS: usize = ETH_IPV4 + 8;

/// The traffic to generate. See the module documentation for the model.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadSpec {
    /// Packets in the workload.
    pub packets: u64,
    /// Nominal packet rate (packets per second of packet time).
    pub rate_pps: u64,
    /// Bytes of every ordinary frame as captured.
    pub packet_size: usize,
    /// Average number of active ordinary flows.
    pub active_flows: u32,
    /// New ordinary flows per second (exponential inter-arrival times).
    pub arrival_rate: f64,
    /// How the packets are shared among the active flows: evenly (the
    /// default, Trumpet's) or heavy-tailed.
    pub flow_sizes: FlowSizes,
    /// Consecutive ordinary packets of one flow.
    pub burst: u32,
    /// Share of all packets that are attack packets, 0–1.
    pub dos_fraction: f64,
    /// Packets per attack flow.
    pub dos_packets: u32,
    /// Share of TCP segments (after a flow's first) that are retransmissions.
    pub retransmit_fraction: f64,
    /// Address groups the flows are spread over; must equal the trigger
    /// set's [`crate::TriggerSpec::traffic_groups`].
    pub groups: u32,
    pub seed: u64,
    /// Timestamp of the first packet, ns since the epoch (aligned to 10 ms
    /// by default, so the first window is observed in full).
    pub start_ns: u64,
}

impl Default for WorkloadSpec {
    /// Trumpet's baseline: 14.88 Mpps (10 Gb/s of 64-byte frames), 300
    /// active flows, 1,000 new flows/s, bursts of one, no attack; one
    /// million packets over 512 groups (4,096 triggers, 8 per packet).
    fn default() -> Self {
        WorkloadSpec {
            packets: 1_000_000,
            rate_pps: 14_880_000,
            packet_size: 64,
            active_flows: 300,
            arrival_rate: 1_000.0,
            flow_sizes: FlowSizes::Uniform,
            burst: 1,
            dos_fraction: 0.0,
            dos_packets: 1,
            retransmit_fraction: 0.01,
            groups: 512,
            seed: 1,
            start_ns: 1_700_000_000_000_000_000,
        }
    }
}

impl WorkloadSpec {
    pub fn validate(&self) -> Result<(), WorkloadError> {
        if self.rate_pps == 0 {
            return Err(invalid("packet rate", "must be at least 1 packet/s"));
        }
        if !(MIN_PACKET_SIZE..=MAX_PACKET_SIZE).contains(&self.packet_size) {
            return Err(invalid(
                "packet size",
                format!(
                    "{} bytes is outside {MIN_PACKET_SIZE}..={MAX_PACKET_SIZE}",
                    self.packet_size
                ),
            ));
        }
        if self.active_flows == 0 {
            return Err(invalid("active flows", "must be at least 1"));
        }
        if !(self.arrival_rate.is_finite() && self.arrival_rate > 0.0) {
            return Err(invalid(
                "flow arrival rate",
                format!("{} is not a positive number of flows/s", self.arrival_rate),
            ));
        }
        self.flow_sizes
            .check()
            .map_err(|reason| invalid("flow sizes", reason))?;
        if self.burst == 0 {
            return Err(invalid("burst size", "must be at least 1 packet"));
        }
        if !(0.0..=1.0).contains(&self.dos_fraction) {
            return Err(invalid(
                "DoS fraction",
                format!("{} is outside 0..=1", self.dos_fraction),
            ));
        }
        if !(1..=MAX_DOS_PACKETS).contains(&self.dos_packets) {
            return Err(invalid(
                "packets per DoS flow",
                format!("{} is outside 1..={MAX_DOS_PACKETS}", self.dos_packets),
            ));
        }
        if !(0.0..=1.0).contains(&self.retransmit_fraction) {
            return Err(invalid(
                "retransmit fraction",
                format!("{} is outside 0..=1", self.retransmit_fraction),
            ));
        }
        if self.groups == 0 || self.groups > MAX_GROUPS {
            return Err(invalid(
                "groups",
                format!("{} is outside 1..={MAX_GROUPS}", self.groups),
            ));
        }
        Ok(())
    }

    /// Mean flow lifetime in ns (Little's law: active flows / arrival rate).
    pub fn flow_lifetime_ns(&self) -> f64 {
        f64::from(self.active_flows) / self.arrival_rate * 1e9
    }

    /// Timestamp of packet `i`.
    pub fn timestamp(&self, i: u64) -> u64 {
        let off = u128::from(i) * 1_000_000_000 / u128::from(self.rate_pps.max(1));
        self.start_ns
            .saturating_add(u64::try_from(off).unwrap_or(u64::MAX))
    }

    /// Ordinary packets one flow sends in `interval_ns`, on average.
    pub fn packets_per_flow(&self, interval_ns: u64) -> f64 {
        self.rate_pps as f64 * (1.0 - self.dos_fraction) * interval_ns as f64
            / 1e9
            / f64::from(self.active_flows.max(1))
    }

    /// Payload bytes of an ordinary packet of a group with this protocol.
    pub fn payload_len(&self, proto: Proto) -> usize {
        let headers = match proto {
            Proto::Tcp => TCP_HEADERS,
            Proto::Udp => UDP_HEADERS,
        };
        self.packet_size.saturating_sub(headers)
    }

    /// Every frame in one buffer.
    pub fn generate(&self) -> Result<Workload, WorkloadError> {
        let mut g = Generator::new(self)?;
        let n = usize::try_from(self.packets)
            .map_err(|_| invalid("packets", "too many for this machine's memory"))?;
        let size = n.saturating_mul(self.packet_size.max(DOS_FRAME_LEN));
        let too_big = |_| {
            invalid(
                "packets",
                format!(
                    "{n} packets of {} bytes do not fit in this machine's memory",
                    self.packet_size
                ),
            )
        };
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(size).map_err(too_big)?;
        let mut frames = Vec::new();
        frames.try_reserve_exact(n).map_err(too_big)?;
        loop {
            let offset = bytes.len();
            let Some(ts_ns) = g.next_into(&mut bytes) else {
                break;
            };
            frames.push(FrameRef {
                offset: offset as u64,
                ts_ns,
                len: (bytes.len() - offset) as u32,
            });
        }
        Ok(Workload {
            bytes,
            frames,
            stats: g.stats(),
        })
    }

    /// Streams every frame to a nanosecond pcap file; returns the statistics.
    pub fn write_pcap<W: Write>(&self, out: W) -> Result<WorkloadStats, WorkloadError> {
        let mut g = Generator::new(self)?;
        let mut w = PcapWriter::new(out, LinkType::Ethernet, TsResolution::Nano)?;
        let mut buf = Vec::with_capacity(MAX_PACKET_SIZE);
        while let Some(ts) = g.next_into(&mut buf) {
            w.write_packet(ts, &buf, buf.len() as u32)?;
            buf.clear();
        }
        w.flush()?;
        Ok(g.stats())
    }
}

/// Where one frame sits in [`Workload::bytes`], and its timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameRef {
    pub offset: u64,
    pub ts_ns: u64,
    pub len: u32,
}

/// A generated workload held in memory: one flat buffer and an index.
#[derive(Clone, Debug)]
pub struct Workload {
    bytes: Vec<u8>,
    frames: Vec<FrameRef>,
    stats: WorkloadStats,
}

impl Workload {
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// All frames, back to back.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn frames(&self) -> &[FrameRef] {
        &self.frames
    }

    /// Frame `i`'s bytes and timestamp.
    pub fn frame(&self, i: usize) -> Option<(&[u8], u64)> {
        let f = self.frames.get(i)?;
        let start = usize::try_from(f.offset).ok()?;
        Some((self.bytes.get(start..start + f.len as usize)?, f.ts_ns))
    }

    /// Every frame's bytes and timestamp, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], u64)> + '_ {
        (0..self.len()).filter_map(|i| self.frame(i))
    }

    pub fn stats(&self) -> &WorkloadStats {
        &self.stats
    }

    /// Writes the frames as a nanosecond pcap file.
    pub fn write_pcap<W: Write>(&self, out: W) -> Result<(), WorkloadError> {
        let mut w = PcapWriter::new(out, LinkType::Ethernet, TsResolution::Nano)?;
        for (data, ts) in self.iter() {
            w.write_packet(ts, data, data.len() as u32)?;
        }
        w.flush()?;
        Ok(())
    }
}

/// What the generator did, for checking the workload against its spec.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WorkloadStats {
    pub packets: u64,
    /// Ordinary flows active at the start.
    pub initial_flows: u64,
    /// Ordinary flows that arrived during the run (including any started
    /// because none was active).
    pub arrivals: u64,
    pub dos_packets: u64,
    pub dos_flows: u64,
    pub retransmissions: u64,
    /// Active ordinary flows, averaged over packets (so over packet time).
    pub mean_active_flows: f64,
    /// From the first packet's timestamp to the last one's.
    pub duration_ns: u64,
}

#[derive(Clone, Debug)]
struct Flow {
    group: u32,
    host: u32,
    src_port: u16,
    /// Next sequence number; `prev_seq` is the last segment's.
    seq: u32,
    prev_seq: u32,
    ack: u32,
    sent: u32,
}

#[derive(Clone, Copy, Debug)]
struct DosFlow {
    group: u32,
    host: u32,
    src_port: u16,
    isn: u32,
    left: u32,
}

/// Produces a workload's frames one at a time. See the module documentation.
#[derive(Debug)]
pub struct Generator {
    spec: WorkloadSpec,
    rng: Rng,
    lifetime_ns: f64,
    interarrival_ns: f64,
    next: u64,
    /// Flows by slot; a slot is live while it is listed in `active`.
    flows: Vec<Flow>,
    free: Vec<u32>,
    active: Vec<u32>,
    /// Position of each live slot in `active`.
    pos: Vec<u32>,
    /// (expiry ns after start, slot) of every live slot, soonest first.
    expiry: BinaryHeap<Reverse<(u64, u32)>>,
    /// Each live slot's weight, 0 for free ones; `None` when flows are
    /// picked uniformly ([`FlowSizes::Uniform`]).
    weights: Option<Weights>,
    /// Arrival time (ns after start) of the next flow.
    next_arrival: f64,
    flows_started: u64,
    current: Option<u32>,
    burst_left: u32,
    dos_acc: f64,
    dos: Vec<DosFlow>,
    dos_cursor: usize,
    dos_started: u64,
    stats: WorkloadStats,
    active_sum: u128,
}

impl Generator {
    pub fn new(spec: &WorkloadSpec) -> Result<Self, WorkloadError> {
        spec.validate()?;
        let mut g = Generator {
            spec: spec.clone(),
            rng: Rng::new(spec.seed),
            lifetime_ns: spec.flow_lifetime_ns(),
            interarrival_ns: 1e9 / spec.arrival_rate,
            next: 0,
            flows: Vec::new(),
            free: Vec::new(),
            active: Vec::new(),
            pos: Vec::new(),
            expiry: BinaryHeap::new(),
            weights: match spec.flow_sizes {
                FlowSizes::Uniform => None,
                FlowSizes::Pareto { .. } => Some(Weights::default()),
            },
            next_arrival: 0.0,
            flows_started: 0,
            current: None,
            burst_left: 0,
            dos_acc: 0.0,
            dos: Vec::new(),
            dos_cursor: 0,
            dos_started: 0,
            stats: WorkloadStats::default(),
            active_sum: 0,
        };
        for _ in 0..spec.active_flows {
            g.start_flow(0.0);
        }
        g.stats.initial_flows = u64::from(spec.active_flows);
        g.next_arrival = g.rng.exp(g.interarrival_ns);
        Ok(g)
    }

    /// Statistics of the frames produced so far.
    pub fn stats(&self) -> WorkloadStats {
        let mut s = self.stats;
        s.packets = self.next;
        s.mean_active_flows = if self.next == 0 {
            0.0
        } else {
            self.active_sum as f64 / self.next as f64
        };
        s.duration_ns = if self.next == 0 {
            0
        } else {
            self.spec.timestamp(self.next - 1) - self.spec.start_ns
        };
        s
    }

    fn start_flow(&mut self, at: f64) -> u32 {
        let n = self.flows_started;
        self.flows_started += 1;
        let flow = Flow {
            group: self.rng.below(self.spec.groups),
            host: (n % u64::from(HOSTS)) as u32,
            src_port: layout::src_port(n),
            seq: self.rng.u32(),
            prev_seq: 0,
            ack: self.rng.u32(),
            sent: 0,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.flows[s as usize] = flow;
                s
            }
            None => {
                self.flows.push(flow);
                self.pos.push(0);
                (self.flows.len() - 1) as u32
            }
        };
        self.pos[slot as usize] = self.active.len() as u32;
        self.active.push(slot);
        let end = at + self.rng.exp(self.lifetime_ns);
        self.expiry.push(Reverse((end as u64, slot)));
        // Drawn last, so that uniform sizes draw exactly as before.
        if let (Some(w), Some(weights)) = (self.spec.flow_sizes.draw(&mut self.rng), &mut self.weights) {
            weights.set(slot, w);
        }
        slot
    }

    fn end_flow(&mut self, slot: u32) {
        let p = self.pos[slot as usize] as usize;
        self.active.swap_remove(p);
        if let Some(&moved) = self.active.get(p) {
            self.pos[moved as usize] = p as u32;
        }
        self.free.push(slot);
        if let Some(weights) = &mut self.weights {
            weights.set(slot, 0);
        }
        if self.current == Some(slot) {
            self.current = None;
        }
    }

    /// Brings the flow population to `t` ns after the start.
    fn advance_flows(&mut self, t: u64) {
        loop {
            let expiry = self.expiry.peek().map(|Reverse((e, _))| *e);
            let arrival = self.next_arrival;
            // Handle events in time order: expiries before arrivals at the same instant.
            match expiry {
                Some(e) if e <= t && (e as f64) <= arrival => {
                    if let Some(Reverse((_, slot))) = self.expiry.pop() {
                        self.end_flow(slot);
                    }
                }
                _ if arrival <= t as f64 => {
                    self.start_flow(arrival);
                    self.stats.arrivals += 1;
                    self.next_arrival += self.rng.exp(self.interarrival_ns);
                }
                _ => break,
            }
        }
    }

    /// Appends the next frame to `out` and returns its timestamp, or `None`
    /// once the workload is complete.
    pub fn next_into(&mut self, out: &mut Vec<u8>) -> Option<u64> {
        if self.next >= self.spec.packets {
            return None;
        }
        let i = self.next;
        self.next += 1;
        let ts = self.spec.timestamp(i);
        self.advance_flows(ts - self.spec.start_ns);
        self.active_sum += self.active.len() as u128;
        self.dos_acc += self.spec.dos_fraction;
        if self.dos_acc >= 1.0 {
            self.dos_acc -= 1.0;
            self.emit_dos(out);
        } else {
            self.emit_ordinary(ts, out);
        }
        Some(ts)
    }

    fn pick_flow(&mut self, ts: u64) -> u32 {
        if self.active.is_empty() {
            let at = (ts - self.spec.start_ns) as f64;
            self.start_flow(at);
            self.stats.arrivals += 1;
        }
        if let Some(weights) = &self.weights {
            // Every live slot has a weight of at least MIN_WEIGHT, so one is found.
            if let Some(s) = weights.pick(&mut self.rng, self.current) {
                return s;
            }
        }
        let n = self.active.len() as u32;
        match self.current {
            Some(cur) if n > 1 => {
                // Uniform over the others: draw among n - 1 and skip the current one.
                let k = self.rng.below(n - 1) as usize;
                let s = self.active[k];
                if s == cur {
                    self.active[(n - 1) as usize]
                } else {
                    s
                }
            }
            _ => self.active[self.rng.below(n) as usize],
        }
    }

    fn emit_ordinary(&mut self, ts: u64, out: &mut Vec<u8>) {
        let slot = match self.current {
            Some(s) if self.burst_left > 0 => s,
            _ => {
                let s = self.pick_flow(ts);
                self.current = Some(s);
                self.burst_left = self.spec.burst;
                s
            }
        };
        self.burst_left -= 1;
        let retransmit_draw = self.rng.unit();
        let f = &mut self.flows[slot as usize];
        let group = f.group;
        let proto = layout::proto(group);
        let payload = self.spec.payload_len(proto);
        let transport = match proto {
            Proto::Tcp => {
                let seq = if f.sent > 0 && retransmit_draw < self.spec.retransmit_fraction {
                    self.stats.retransmissions += 1;
                    f.prev_seq
                } else {
                    let s = f.seq;
                    f.seq = f.seq.wrapping_add(payload as u32);
                    s
                };
                f.prev_seq = seq;
                Transport::Tcp(TcpSpec {
                    src_port: f.src_port,
                    dst_port: layout::dst_port(group),
                    seq,
                    ack: f.ack,
                    flags: tcp_flags::ACK | tcp_flags::PSH,
                    window: 512,
                    ..TcpSpec::default()
                })
            }
            Proto::Udp => Transport::Udp {
                src_port: f.src_port,
                dst_port: layout::dst_port(group),
            },
        };
        let ip_id = f.sent;
        f.sent = f.sent.wrapping_add(1);
        let spec = FrameSpec {
            ip: IpPair::V4 {
                src: layout::src_addr(group, f.host),
                dst: layout::dst_addr(group),
            },
            transport,
            payload_len: payload,
            ip_id,
            ..FrameSpec::default()
        };
        spec.emit_into(out);
    }

    fn emit_dos(&mut self, out: &mut Vec<u8>) {
        self.stats.dos_packets += 1;
        if self.dos.is_empty() {
            let none = DosFlow {
                group: 0,
                host: 0,
                src_port: 0,
                isn: 0,
                left: 0,
            };
            self.dos = vec![none; self.spec.dos_packets as usize];
        }
        let cursor = self.dos_cursor;
        self.dos_cursor = (cursor + 1) % self.dos.len();
        if self.dos[cursor].left == 0 {
            // Attack flow d: groups round robin, then a unique host and port within the group.
            let d = self.dos_started;
            self.dos_started += 1;
            self.stats.dos_flows += 1;
            let groups = u64::from(self.spec.groups);
            let x = d / groups;
            self.dos[cursor] = DosFlow {
                group: (d % groups) as u32,
                host: HOSTS + (x % u64::from(HOSTS)) as u32,
                src_port: layout::src_port(x),
                isn: self.rng.u32(),
                left: self.spec.dos_packets,
            };
        }
        let f = &mut self.dos[cursor];
        let first = f.left == self.spec.dos_packets;
        f.left -= 1;
        let transport = match layout::proto(f.group) {
            Proto::Tcp => Transport::Tcp(TcpSpec {
                src_port: f.src_port,
                dst_port: layout::dst_port(f.group),
                seq: if first { f.isn } else { f.isn.wrapping_add(1) },
                flags: if first { tcp_flags::SYN } else { tcp_flags::ACK },
                window: 512,
                ..TcpSpec::default()
            }),
            Proto::Udp => Transport::Udp {
                src_port: f.src_port,
                dst_port: layout::dst_port(f.group),
            },
        };
        let spec = FrameSpec {
            ip: IpPair::V4 {
                src: layout::src_addr(f.group, f.host),
                dst: layout::dst_addr(f.group),
            },
            transport,
            ..FrameSpec::default()
        };
        let start = out.len();
        spec.emit_into(out);
        if out.len() - start < DOS_FRAME_LEN {
            out.resize(start + DOS_FRAME_LEN, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_follow_the_nominal_rate() {
        let s = WorkloadSpec {
            rate_pps: 3,
            start_ns: 0,
            ..WorkloadSpec::default()
        };
        assert_eq!(
            (0..4).map(|i| s.timestamp(i)).collect::<Vec<_>>(),
            [0, 333_333_333, 666_666_666, 1_000_000_000]
        );
    }

    #[test]
    fn frames_have_the_requested_size() {
        let s = WorkloadSpec {
            packets: 2_000,
            dos_fraction: 0.25,
            packet_size: 100,
            ..WorkloadSpec::default()
        };
        let w = s.generate().unwrap();
        assert_eq!(w.len(), 2_000);
        let sizes: std::collections::BTreeSet<usize> = w.iter().map(|(d, _)| d.len()).collect();
        assert_eq!(sizes.into_iter().collect::<Vec<_>>(), [DOS_FRAME_LEN, 100]);
        assert_eq!(w.stats().dos_packets, 500);
    }

    #[test]
    fn refuses_nonsense() {
        for bad in [
            WorkloadSpec {
                rate_pps: 0,
                ..WorkloadSpec::default()
            },
            WorkloadSpec {
                packet_size: 59,
                ..WorkloadSpec::default()
            },
            WorkloadSpec {
                dos_fraction: 1.5,
                ..WorkloadSpec::default()
            },
            WorkloadSpec {
                arrival_rate: 0.0,
                ..WorkloadSpec::default()
            },
            WorkloadSpec {
                groups: MAX_GROUPS + 1,
                ..WorkloadSpec::default()
            },
        ] {
            assert!(bad.generate().is_err(), "{bad:?}");
        }
    }
}
