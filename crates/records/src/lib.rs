//! Flow records: what a host says about each flow it saw, in one schema
//! for every output.
//!
//! A [`FlowRecord`] is a flow's totals over one stretch of its life (it
//! ends at an idle or active timeout, a TCP FIN or RST, or the end of
//! input, [`EndReason`]). The field names here are the names in every
//! encoding: the JSON lines ([`JsonLine`]), the Parquet columns
//! and, where IPFIX has a standard information element, the element it
//! maps to (`docs/records.md` has the table). Every record carries the
//! flow's [Community ID] (v1, seed 0), so records join with Zeek's,
//! Suricata's and other tools' logs of the same traffic.
//!
//! Records go to a [`clarion_sinks::Sink<FlowRecord>`], the seam of every
//! output (JSON lines through [`clarion_sinks::JsonLinesSink`]; IPFIX and
//! Parquet in their own crates), so the host that produces records never
//! knows which ones it holds.
//!
//! [Community ID]: https://github.com/corelight/community-id-spec

mod community_id;
mod json;

use std::net::IpAddr;

use clarion_wire::FlowKey;

pub use community_id::community_id;
pub use json::to_json;

/// The schema name and version of a JSON record (`"schema"`).
pub const SCHEMA: &str = "clarion.flow/1";

/// Why a record ended (IPFIX `flowEndReason`, RFC 5102 §5.11.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EndReason {
    /// No packet for the idle timeout.
    Idle,
    /// The record was open for the active timeout; the flow goes on in a
    /// new record.
    Active,
    /// The flow ended: a TCP FIN or RST.
    End,
    /// The input ended, or the host stopped (the final flush).
    Flush,
}

impl EndReason {
    /// The name in JSON and Parquet.
    pub fn name(self) -> &'static str {
        match self {
            EndReason::Idle => "idle",
            EndReason::Active => "active",
            EndReason::End => "end",
            EndReason::Flush => "flush",
        }
    }

    /// The IPFIX `flowEndReason` code: idle timeout (1), active timeout
    /// (2), end of flow detected (3), forced end (4).
    pub fn ipfix_code(self) -> u8 {
        match self {
            EndReason::Idle => 1,
            EndReason::Active => 2,
            EndReason::End => 3,
            EndReason::Flush => 4,
        }
    }

    /// The reason of a name given by [`EndReason::name`].
    pub fn from_name(name: &str) -> Option<EndReason> {
        [
            EndReason::Idle,
            EndReason::Active,
            EndReason::End,
            EndReason::Flush,
        ]
        .into_iter()
        .find(|r| r.name() == name)
    }
}

/// One flow's totals over one stretch of its life.
///
/// Sizes are IP lengths from the header (IPv4 total length, IPv6 40 plus
/// payload length), as IPFIX `octetDeltaCount` counts them; timestamps are
/// packet times in nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    /// Addresses, ports, protocol and VLAN (ports and VLAN zero when absent).
    pub key: FlowKey,
    /// Time of the first and of the last packet.
    pub first_ns: u64,
    pub last_ns: u64,
    pub packets: u64,
    /// IP bytes.
    pub bytes: u64,
    /// Union of the TCP flag bytes of the packets (0 for other protocols).
    pub tcp_flags: u8,
    /// Smallest and largest IP length of a packet.
    pub min_size: u32,
    pub max_size: u32,
    pub end_reason: EndReason,
}

impl FlowRecord {
    /// A record of one packet.
    pub fn of_packet(key: FlowKey, ts_ns: u64, size: u32, tcp_flags: u8) -> FlowRecord {
        FlowRecord {
            key,
            first_ns: ts_ns,
            last_ns: ts_ns,
            packets: 1,
            bytes: u64::from(size),
            tcp_flags,
            min_size: size,
            max_size: size,
            end_reason: EndReason::Flush,
        }
    }

    /// Folds in a later part of the same flow (another record of the same
    /// key): counts add, flags join, extremes widen. Any order of merges
    /// gives the same totals; the end reason is `later`'s.
    pub fn merge(&mut self, later: &FlowRecord) {
        self.first_ns = self.first_ns.min(later.first_ns);
        self.last_ns = self.last_ns.max(later.last_ns);
        self.packets += later.packets;
        self.bytes += later.bytes;
        self.tcp_flags |= later.tcp_flags;
        self.min_size = self.min_size.min(later.min_size);
        self.max_size = self.max_size.max(later.max_size);
        self.end_reason = later.end_reason;
    }

    pub fn src_addr(&self) -> IpAddr {
        self.key.src_addr()
    }

    pub fn dst_addr(&self) -> IpAddr {
        self.key.dst_addr()
    }

    /// The VLAN id, if the flow's frames carried a tag.
    pub fn vlan(&self) -> Option<u16> {
        self.key.has_vlan().then_some(self.key.vlan)
    }

    /// The flow's Community ID (v1, seed 0).
    pub fn community_id(&self) -> String {
        community_id(&self.key, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> FlowKey {
        FlowKey::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            6,
            Some((1234, 80)),
            None,
        )
    }

    #[test]
    fn merge_adds_counts_and_widens_extremes() {
        let mut a = FlowRecord::of_packet(key(), 100, 60, 0x02);
        let mut b = FlowRecord::of_packet(key(), 300, 1500, 0x10);
        b.end_reason = EndReason::End;
        let c = FlowRecord::of_packet(key(), 200, 40, 0x01);
        a.merge(&b);
        a.merge(&c);
        assert_eq!((a.first_ns, a.last_ns), (100, 300));
        assert_eq!((a.packets, a.bytes), (3, 1600));
        assert_eq!(a.tcp_flags, 0x13);
        assert_eq!((a.min_size, a.max_size), (40, 1500));
        assert_eq!(
            a.end_reason,
            EndReason::Flush,
            "the end reason is the later part's"
        );
    }

    #[test]
    fn end_reasons_round_trip_by_name() {
        for r in [
            EndReason::Idle,
            EndReason::Active,
            EndReason::End,
            EndReason::Flush,
        ] {
            assert_eq!(EndReason::from_name(r.name()), Some(r));
        }
        assert_eq!(EndReason::from_name("lack of resources"), None);
    }
}
