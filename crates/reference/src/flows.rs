//! Flow records from packets, evaluated the plain way: the judge
//! `clarion-flows` (microflow cache + aggregator) is held to.
//!
//! Packets are walked in input order with one map from flow key to its
//! open record. The packet clock is the largest timestamp so far. For a
//! packet of key `k` at clock `c`:
//!
//! 1. if `k` has an open record and `c` is more than `idle_ns` past its
//!    last packet clock, it ends `Idle`; else if `c` is more than
//!    `active_ns` past its first packet clock, it ends `Active`;
//! 2. the packet joins `k`'s open record (starting one if there is none);
//! 3. if the packet has TCP FIN or RST, the record ends `End`.
//!
//! At the end every open record ends: `Idle` if the final clock is more
//! than `idle_ns` past its last packet clock, else `Flush`.
//!
//! Shares no code with `clarion-flows`.

use std::collections::BTreeMap;

use clarion_records::{EndReason, FlowRecord};
use clarion_wire::{tcp_flags, FlowKey, PacketRecord};

struct Open {
    record: FlowRecord,
    first_clock: u64,
    last_clock: u64,
}

fn end(o: Open, reason: EndReason, out: &mut Vec<FlowRecord>) {
    let mut r = o.record;
    r.end_reason = reason;
    out.push(r);
}

/// Every flow record of `packets` (in input order), in the order they end.
pub fn flow_records(packets: &[PacketRecord], idle_ns: u64, active_ns: u64) -> Vec<FlowRecord> {
    let mut open: BTreeMap<FlowKey, Open> = BTreeMap::new();
    let mut out = Vec::new();
    let mut clock = 0u64;
    for p in packets {
        clock = clock.max(p.ts_ns);
        if let Some(o) = open.get(&p.key) {
            let reason = if clock - o.last_clock > idle_ns {
                Some(EndReason::Idle)
            } else if clock - o.first_clock > active_ns {
                Some(EndReason::Active)
            } else {
                None
            };
            if let Some(reason) = reason {
                let o = open.remove(&p.key).expect("just found");
                end(o, reason, &mut out);
            }
        }
        let flags = p.tcp.map_or(0, |t| t.flags);
        match open.get_mut(&p.key) {
            None => {
                let record = FlowRecord {
                    key: p.key,
                    first_ns: p.ts_ns,
                    last_ns: p.ts_ns,
                    packets: 1,
                    bytes: u64::from(p.size),
                    tcp_flags: flags,
                    min_size: p.size,
                    max_size: p.size,
                    end_reason: EndReason::Flush,
                };
                open.insert(
                    p.key,
                    Open {
                        record,
                        first_clock: clock,
                        last_clock: clock,
                    },
                );
            }
            Some(o) => {
                let r = &mut o.record;
                r.first_ns = r.first_ns.min(p.ts_ns);
                r.last_ns = r.last_ns.max(p.ts_ns);
                r.packets += 1;
                r.bytes += u64::from(p.size);
                r.tcp_flags |= flags;
                r.min_size = r.min_size.min(p.size);
                r.max_size = r.max_size.max(p.size);
                o.last_clock = clock;
            }
        }
        if flags & (tcp_flags::FIN | tcp_flags::RST) != 0 {
            let o = open.remove(&p.key).expect("just inserted");
            end(o, EndReason::End, &mut out);
        }
    }
    for (_, o) in std::mem::take(&mut open) {
        let reason = if clock - o.last_clock > idle_ns {
            EndReason::Idle
        } else {
            EndReason::Flush
        };
        end(o, reason, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_wire::TcpInfo;

    fn pkt(ts: u64, flags: u8) -> PacketRecord {
        PacketRecord {
            ts_ns: ts,
            key: FlowKey::new([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), 6, Some((1, 2)), None),
            size: 100,
            tcp: Some(TcpInfo {
                flags,
                ..TcpInfo::default()
            }),
            ..PacketRecord::default()
        }
    }

    #[test]
    fn each_rule() {
        // idle 10, active 100: 0, 5 | idle | 20, 30, ..., 120 | active | 130 FIN | 200 (flush).
        let mut ps = vec![pkt(0, 0), pkt(5, 0)];
        ps.extend((2..=12).map(|i| pkt(i * 10, 0)));
        ps.push(pkt(130, tcp_flags::FIN));
        ps.push(pkt(200, 0));
        let got: Vec<(u64, u64, u64, EndReason)> = flow_records(&ps, 10, 100)
            .iter()
            .map(|r| (r.first_ns, r.last_ns, r.packets, r.end_reason))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 5, 2, EndReason::Idle),
                (20, 120, 11, EndReason::Active),
                (130, 130, 1, EndReason::End),
                (200, 200, 1, EndReason::Flush),
            ]
        );
        // Idle at the final clock (another key's packet): Idle, not Flush.
        let mut other = pkt(12, 0);
        other.key = other.key.reversed();
        let r = flow_records(&[pkt(0, 0), pkt(1, 0), other], 10, 100);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].packets, r[0].end_reason), (2, EndReason::Idle));
        assert_eq!(r[1].end_reason, EndReason::Flush);
        let r = flow_records(
            &[pkt(0, 0), pkt(1, 0), PacketRecord { ts_ns: 11, ..other }],
            10,
            100,
        );
        assert_eq!(
            r[0].end_reason,
            EndReason::Flush,
            "exactly the timeout is not idle"
        );
    }
}
