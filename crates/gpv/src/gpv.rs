//! The grouped packet vector: one flow key and the features of a run of
//! its consecutive packets.
//!
//! Layout follows *Flow's (§3.6): a fixed header (key, interface, start
//! time, packet count) and a vector of small per-packet tuples. Unlike
//! *Flow's 20-bit deltas, [`PacketFeatures::delta`] is 32 bits of
//! nanoseconds *since the GPV's start* (not since the previous packet), so
//! a packet's time is exact and a GPV spans at most 4.29 s; the cache
//! splits a GPV before a delta would overflow. Deltas from the start, not
//! from the previous packet, make each packet's time one add and survive
//! a capture whose clock steps backwards by less than the GPV's age.
//!
//! Invariant: `header.packet_count == packets.len()` (the cache and the
//! decoder build them so; the encoder refuses others).

use clarion_wire::FlowKey;

/// TCP sequence and acknowledgement numbers of a packet with a TCP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TcpSeq {
    pub seq: u32,
    pub ack: u32,
}

/// One packet's features in a GPV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PacketFeatures {
    /// Nanoseconds from the GPV's `start_ns` to this packet.
    pub delta: u32,
    /// IP length (`PacketRecord::size`), saturated at 65535 (only IPv6
    /// jumbograms exceed it).
    pub size: u16,
    /// TCP flag byte (0 for other protocols or without a TCP header).
    pub tcp_flags: u8,
    /// Sequence and acknowledgement numbers, when the packet had a TCP header.
    pub tcp: Option<TcpSeq>,
}

impl PacketFeatures {
    /// A packet's size as a GPV keeps it: the IP length, saturated at 65535.
    pub fn size_of(ip_len: u32) -> u16 {
        u16::try_from(ip_len).unwrap_or(u16::MAX)
    }
}

/// Why the cache let a GPV go; the header keeps it so consumers can tell
/// a flow's natural breaks from cache pressure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EvictCause {
    /// Another flow hashed to the slot.
    Collision = 0,
    /// The narrow buffer was full and no wide buffer was free, or the wide
    /// buffer was full too.
    Full = 1,
    /// The next packet's delta would not fit (more than the maximum delta
    /// after the start, or before the start): the flow goes on in a new GPV.
    Split = 2,
    /// The GPV was older than the maximum age when its flow's next packet came.
    Age = 3,
    /// The periodic scan found the GPV older than the maximum age.
    Scan = 4,
    /// [`crate::GpvCache::finish`]: the input ended.
    Flush = 5,
}

impl EvictCause {
    pub const ALL: [EvictCause; 6] = [
        EvictCause::Collision,
        EvictCause::Full,
        EvictCause::Split,
        EvictCause::Age,
        EvictCause::Scan,
        EvictCause::Flush,
    ];

    /// The cause's code in the file format.
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<EvictCause> {
        EvictCause::ALL.get(usize::from(code)).copied()
    }

    pub fn name(self) -> &'static str {
        match self {
            EvictCause::Collision => "collision",
            EvictCause::Full => "full",
            EvictCause::Split => "split",
            EvictCause::Age => "age",
            EvictCause::Scan => "scan",
            EvictCause::Flush => "flush",
        }
    }
}

/// The GPV's fixed part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpvHeader {
    pub key: FlowKey,
    /// The interface or host the packets were seen on (the cache's
    /// [`crate::CacheConfig::interface`]).
    pub interface: u16,
    /// Time of the GPV's first packet, nanoseconds since the Unix epoch.
    pub start_ns: u64,
    /// `packets.len()`.
    pub packet_count: u32,
    pub cause: EvictCause,
}

/// A grouped packet vector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpv {
    pub header: GpvHeader,
    pub packets: Vec<PacketFeatures>,
}

impl Gpv {
    /// Each packet's absolute time (`start_ns + delta`) with its features,
    /// in arrival order.
    pub fn timed(&self) -> impl Iterator<Item = (u64, &PacketFeatures)> + '_ {
        let start = self.header.start_ns;
        // Saturating only for hand-built GPVs: the cache and the decoder never
        // make one whose last packet time passes u64::MAX.
        self.packets
            .iter()
            .map(move |p| (start.saturating_add(u64::from(p.delta)), p))
    }

    /// Sum of the packets' sizes.
    pub fn bytes(&self) -> u64 {
        self.packets.iter().map(|p| u64::from(p.size)).sum()
    }
}
