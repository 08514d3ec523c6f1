//! The flow key's seven columns, the first seven of every Clarion schema
//! (flow records and GPVs alike, so a join on the five-tuple matches a
//! GPV to its flow record):
//!
//! | column | Arrow type | null |
//! |---|---|---|
//! | `src_ip`, `dst_ip` | Utf8 (the address as text) | no |
//! | `src_port`, `dst_port` | UInt16 | when the flow has no ports |
//! | `proto` | UInt8 | no |
//! | `vlan` | UInt16 | when untagged |
//! | `vni` | UInt32 | when the flow came out of no tunnel (or GRE without a key) |
//!
//! [`KeyColumns`] appends a key per row; [`KeyReader`] gives it back,
//! refusing an unparsable address or one port without the other. Files
//! written before the `vni` column read as keys without a VNI.
//! Cost: two addresses formatted into a reused `String` per row written,
//! two parsed per row read.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Arc;

use arrow_array::builder::{StringBuilder, UInt16Builder, UInt32Builder, UInt8Builder};
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray, UInt16Array, UInt32Array, UInt8Array};
use arrow_schema::{DataType, Field};
use clarion_wire::FlowKey;

use crate::file::column;

/// The key's fields, in schema order.
pub(crate) fn key_fields() -> [Field; 7] {
    [
        Field::new("src_ip", DataType::Utf8, false),
        Field::new("dst_ip", DataType::Utf8, false),
        Field::new("src_port", DataType::UInt16, true),
        Field::new("dst_port", DataType::UInt16, true),
        Field::new("proto", DataType::UInt8, false),
        Field::new("vlan", DataType::UInt16, true),
        Field::new("vni", DataType::UInt32, true),
    ]
}

/// One builder per key column, in [`key_fields`]'s order.
pub(crate) struct KeyColumns {
    src_ip: StringBuilder,
    dst_ip: StringBuilder,
    src_port: UInt16Builder,
    dst_port: UInt16Builder,
    proto: UInt8Builder,
    vlan: UInt16Builder,
    vni: UInt32Builder,
    /// Reused for formatting addresses.
    text: String,
}

impl KeyColumns {
    pub(crate) fn new() -> KeyColumns {
        KeyColumns {
            src_ip: StringBuilder::new(),
            dst_ip: StringBuilder::new(),
            src_port: UInt16Builder::new(),
            dst_port: UInt16Builder::new(),
            proto: UInt8Builder::new(),
            vlan: UInt16Builder::new(),
            vni: UInt32Builder::new(),
            text: String::with_capacity(48),
        }
    }

    pub(crate) fn append(&mut self, k: &FlowKey) {
        self.text.clear();
        // Writing to a String cannot fail.
        let _ = write!(self.text, "{}", k.src_addr());
        self.src_ip.append_value(&self.text);
        self.text.clear();
        let _ = write!(self.text, "{}", k.dst_addr());
        self.dst_ip.append_value(&self.text);
        let ports = k.has_ports().then_some((k.src_port, k.dst_port));
        self.src_port.append_option(ports.map(|p| p.0));
        self.dst_port.append_option(ports.map(|p| p.1));
        self.proto.append_value(k.proto);
        self.vlan.append_option(k.has_vlan().then_some(k.vlan));
        self.vni.append_option(k.tunnel_id());
    }

    /// The keys so far as arrays, in [`key_fields`]'s order; the builders
    /// start empty again.
    pub(crate) fn finish(&mut self) -> [ArrayRef; 7] {
        [
            Arc::new(self.src_ip.finish()),
            Arc::new(self.dst_ip.finish()),
            Arc::new(self.src_port.finish()),
            Arc::new(self.dst_port.finish()),
            Arc::new(self.proto.finish()),
            Arc::new(self.vlan.finish()),
            Arc::new(self.vni.finish()),
        ]
    }
}

/// The key columns of a batch read back.
pub(crate) struct KeyReader<'a> {
    src_ip: &'a StringArray,
    dst_ip: &'a StringArray,
    src_port: &'a UInt16Array,
    dst_port: &'a UInt16Array,
    proto: &'a UInt8Array,
    vlan: &'a UInt16Array,
    /// Absent from files written before the column.
    vni: Option<&'a UInt32Array>,
}

impl<'a> KeyReader<'a> {
    /// The key columns of `b`, or which one is missing or of another type.
    pub(crate) fn new(b: &'a RecordBatch) -> Result<Self, String> {
        Ok(KeyReader {
            src_ip: column(b, "src_ip")?,
            dst_ip: column(b, "dst_ip")?,
            src_port: column(b, "src_port")?,
            dst_port: column(b, "dst_port")?,
            proto: column(b, "proto")?,
            vlan: column(b, "vlan")?,
            vni: match b.column_by_name("vni") {
                Some(_) => Some(column(b, "vni")?),
                None => None,
            },
        })
    }

    /// The key of row `i`.
    pub(crate) fn key(&self, i: usize) -> Result<FlowKey, String> {
        let ip = |a: &StringArray| {
            a.value(i)
                .parse::<IpAddr>()
                .map_err(|_| format!("row {i}: {:?} is not an address", a.value(i)))
        };
        let opt = |a: &UInt16Array| a.is_valid(i).then(|| a.value(i));
        let ports = match (opt(self.src_port), opt(self.dst_port)) {
            (Some(s), Some(d)) => Some((s, d)),
            (None, None) => None,
            _ => return Err(format!("row {i}: one port without the other")),
        };
        let mut key = FlowKey::new(
            ip(self.src_ip)?,
            ip(self.dst_ip)?,
            self.proto.value(i),
            ports,
            opt(self.vlan),
        );
        if let Some(v) = self.vni.filter(|a| a.is_valid(i)) {
            key.vni = v.value(i);
            key.flags |= FlowKey::HAS_VNI;
        }
        Ok(key)
    }
}
