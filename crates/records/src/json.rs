//! JSON lines: one `clarion.flow/1` object per record.

use clarion_sinks::JsonLine;
use serde_json::{json, Value};

use crate::{FlowRecord, SCHEMA};

/// A record as JSON, with the schema's field names (`docs/records.md`).
/// Ports, the VLAN and the VNI are `null` when the flow has none.
pub fn to_json(r: &FlowRecord) -> Value {
    let k = &r.key;
    let port = |p: u16| if k.has_ports() { json!(p) } else { Value::Null };
    json!({
        "schema": SCHEMA,
        "src_ip": r.src_addr().to_string(),
        "dst_ip": r.dst_addr().to_string(),
        "src_port": port(k.src_port),
        "dst_port": port(k.dst_port),
        "proto": k.proto,
        "vlan": r.vlan(),
        "vni": k.tunnel_id(),
        "first_ns": r.first_ns,
        "last_ns": r.last_ns,
        "packets": r.packets,
        "bytes": r.bytes,
        "tcp_flags": r.tcp_flags,
        "min_size": r.min_size,
        "max_size": r.max_size,
        "end_reason": r.end_reason.name(),
        "community_id": r.community_id(),
    })
}

/// A record's JSON line: [`to_json`], compact.
impl JsonLine for FlowRecord {
    fn write_json(&self, line: &mut Vec<u8>) -> serde_json::Result<()> {
        serde_json::to_writer(line, &to_json(self))
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use clarion_sinks::{JsonLinesSink, Sink, SinkError};

    use super::*;
    use crate::EndReason;
    use clarion_wire::FlowKey;

    #[test]
    fn a_record_is_one_line_with_the_schemas_names() {
        let key = FlowKey::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            6,
            Some((1234, 80)),
            Some(100),
        );
        let key = FlowKey {
            vni: 5001,
            flags: key.flags | FlowKey::HAS_VNI,
            ..key
        };
        let mut r = FlowRecord::of_packet(key, 1_000, 60, 0x02);
        r.merge(&FlowRecord::of_packet(key, 2_000, 1500, 0x11));
        r.end_reason = EndReason::End;
        let mut sink = JsonLinesSink::new(Vec::new(), "memory");
        sink.write(&r).unwrap();
        let out = String::from_utf8(sink.into_inner().unwrap()).unwrap();
        assert_eq!(out.lines().count(), 1);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["schema"], "clarion.flow/1");
        assert_eq!(v["src_ip"], "10.0.0.1");
        assert_eq!(v["dst_port"], 80);
        assert_eq!(v["vlan"], 100);
        assert_eq!(v["vni"], 5001);
        assert_eq!(
            (v["packets"].as_u64(), v["bytes"].as_u64()),
            (Some(2), Some(1560))
        );
        assert_eq!(
            (v["first_ns"].as_u64(), v["last_ns"].as_u64()),
            (Some(1_000), Some(2_000))
        );
        assert_eq!(v["tcp_flags"], 0x13);
        assert_eq!(
            (v["min_size"].as_u64(), v["max_size"].as_u64()),
            (Some(60), Some(1500))
        );
        assert_eq!(v["end_reason"], "end");
        assert!(v["community_id"].as_str().unwrap().starts_with("1:"));
    }

    #[test]
    fn no_ports_and_no_vlan_are_null() {
        let key = FlowKey::new(
            "fd00::1".parse().unwrap(),
            "fd00::2".parse().unwrap(),
            58,
            None,
            None,
        );
        let v = to_json(&FlowRecord::of_packet(key, 1, 48, 0));
        assert!(v["src_port"].is_null() && v["dst_port"].is_null() && v["vlan"].is_null());
        assert!(v["vni"].is_null());
        assert_eq!(v["dst_ip"], "fd00::2");
    }

    struct Closed;
    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
    }

    #[test]
    fn a_closed_reader_is_a_broken_pipe_and_stays_one() {
        let key = FlowKey::default();
        let mut sink = JsonLinesSink::new(Closed, "stdout");
        sink.write(&FlowRecord::of_packet(key, 1, 40, 0)).unwrap(); // buffered
        assert!(matches!(sink.flush(), Err(SinkError::BrokenPipe)));
        assert!(matches!(
            sink.write(&FlowRecord::of_packet(key, 1, 40, 0)),
            Err(SinkError::BrokenPipe)
        ));
    }
}
