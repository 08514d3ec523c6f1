//! Reading a `clarion.report/1` object back into its [`Report`], the
//! inverse of [`Report::to_json`], for clients of a report stream
//! (`clarion events watch` renders one as a table).

use std::net::IpAddr;
use std::sync::Arc;

use serde_json::Value;

use crate::{proto_name, CaptureRef, Completeness, GroupKey, Origin, Report, Window, NO_WORKER, SCHEMA};

/// Why a JSON object is not a report: the field at fault, by its path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ReadError(String);

impl Report {
    /// A [`SCHEMA`] object read back into the report it was written from:
    /// every field [`Report::to_json`] writes, so a report read back writes
    /// the same object again (the tests hold it).
    pub fn from_json(v: &Value) -> Result<Report, ReadError> {
        read(v).map_err(ReadError)
    }
}

/// A report's `group` object read back into its key (what a client such
/// as the console sends to ask about a firing's group).
pub fn group_from_json(g: &Value) -> Result<GroupKey, ReadError> {
    group(g).map_err(ReadError)
}

fn read(v: &Value) -> Result<Report, String> {
    if v["schema"] != SCHEMA {
        return Err(format!("schema {}", v["schema"]));
    }
    let window = Window {
        start_ns: u64_at(v, &["window", "start_ns"])?,
        end_ns: u64_at(v, &["window", "end_ns"])?,
    };
    let values = v["values"]
        .as_object()
        .ok_or("no values")?
        .iter()
        // JSON has no NaN: an undefined value was written null.
        .map(|(k, x)| (Arc::from(k.as_str()), x.as_f64().unwrap_or(f64::NAN)))
        .collect();
    let worker = match &v["worker"] {
        Value::Null => NO_WORKER,
        w => w
            .as_u64()
            .and_then(|w| u32::try_from(w).ok())
            .ok_or("worker is not a number")?,
    };
    let c = &v["completeness"];
    let missing_hosts = match c.get("missing_hosts") {
        None => Box::default(),
        Some(m) => m
            .as_array()
            .ok_or("missing_hosts is not a list")?
            .iter()
            .map(|h| h.as_str().map(Arc::from).ok_or("a missing host is not a name"))
            .collect::<Result<_, _>>()?,
    };
    let completeness = Completeness {
        packets: u64_at(c, &["packets"])?,
        malformed: u64_at(c, &["malformed"])?,
        not_ip: u64_at(c, &["not_ip"])?,
        dropped: u64_at(c, &["dropped"])?,
        untracked: u64_at(c, &["untracked"])?,
        out_of_order: u64_at(c, &["out_of_order"])?,
        complete: c["complete"].as_bool().ok_or("completeness.complete")?,
        degraded: c["degraded"].as_bool().unwrap_or(false),
        flows_unmeasured: c["flows_unmeasured"].as_u64().unwrap_or(0),
        recall_estimate: c["recall_estimate"].as_f64(),
    };
    let capture = match v.get("capture") {
        None => None,
        Some(x) => Some(Box::new(CaptureRef {
            file: x["file"].as_str().map(str::to_string),
            from_ns: u64_at(x, &["from_ns"])?,
            to_ns: u64_at(x, &["to_ns"])?,
            error: x["error"].as_str().map(str::to_string),
        })),
    };
    Ok(Report {
        event: Arc::from(v["event"].as_str().ok_or("no event")?),
        window,
        group: group(&v["group"])?,
        values,
        origin: Origin {
            host: Arc::from(v["host"].as_str().ok_or("no host")?),
            worker,
        },
        completeness,
        capture,
        missing_hosts,
    })
}

fn u64_at(v: &Value, path: &[&str]) -> Result<u64, String> {
    path.iter()
        .fold(v, |v, k| &v[k])
        .as_u64()
        .ok_or_else(|| format!("{} is not a count", path.join(".")))
}

/// The group key: a field absent is not in the key, a field `null` is in
/// it without a value (`Some(None)`).
fn group(g: &Value) -> Result<GroupKey, String> {
    let g = g.as_object().ok_or("no group")?;
    let ip = |f: &str| -> Result<Option<(IpAddr, u8)>, String> {
        let Some(x) = g.get(f) else { return Ok(None) };
        let text = x.as_str().ok_or_else(|| format!("group.{f} is not an address"))?;
        let bad = || format!("group.{f} {text:?} is not an address or a prefix");
        let (addr, len) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let full = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => full,
            Some(l) => l.parse().ok().filter(|l| *l <= full).ok_or_else(bad)?,
        };
        Ok(Some((addr, len)))
    };
    fn present<T: TryFrom<u64>>(
        g: &serde_json::Map<String, Value>,
        f: &str,
    ) -> Result<Option<Option<T>>, String> {
        match g.get(f) {
            None => Ok(None),
            Some(Value::Null) => Ok(Some(None)),
            Some(x) => x
                .as_u64()
                .and_then(|n| T::try_from(n).ok())
                .map(|n| Some(Some(n)))
                .ok_or_else(|| format!("group.{f} is not a number")),
        }
    }
    let proto = match g.get("proto") {
        None => None,
        Some(Value::String(name)) => Some(
            (0..=u8::MAX)
                .find(|p| proto_name(*p) == Some(name.as_str()))
                .ok_or_else(|| format!("group.proto {name:?} is not a protocol"))?,
        ),
        Some(x) => Some(
            x.as_u64()
                .and_then(|p| u8::try_from(p).ok())
                .ok_or("group.proto is not a protocol")?,
        ),
    };
    Ok(GroupKey {
        src_ip: ip("src_ip")?,
        dst_ip: ip("dst_ip")?,
        src_port: present(g, "src_port")?,
        dst_port: present(g, "dst_port")?,
        proto,
        vlan: present(g, "vlan")?,
        vni: present(g, "vni")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Report {
        Report {
            event: Arc::from("heavy_tcp_flows"),
            window: Window {
                start_ns: 1_795_327_271_840_000_000,
                end_ns: 1_795_327_271_850_000_000,
            },
            group: GroupKey {
                src_ip: Some(("10.0.128.11".parse().unwrap(), 32)),
                dst_ip: Some(("10.20.93.10".parse().unwrap(), 32)),
                src_port: Some(Some(51068)),
                dst_port: Some(Some(5204)),
                proto: Some(6),
                vlan: None,
                vni: None,
            },
            values: vec![(Arc::from("sum(volume)"), 57920.0)].into(),
            origin: Origin {
                host: Arc::from("demo"),
                worker: 0,
            },
            completeness: Completeness {
                packets: 73,
                complete: true,
                ..Completeness::default()
            },
            capture: None,
            missing_hosts: Box::default(),
        }
    }

    /// Every field `to_json` writes, in each of its shapes, reads back.
    #[test]
    fn a_report_read_back_writes_the_same_object() {
        let mut all = vec![base()];
        let mut r = base();
        r.event = Arc::from("senders_to_lossy_dst[dst_ip=10.20.93.0/24]");
        r.group = GroupKey {
            src_ip: Some(("fd00:0:128::".parse().unwrap(), 48)),
            dst_ip: Some(("10.20.93.0".parse().unwrap(), 24)),
            src_port: Some(None),
            dst_port: None,
            proto: Some(47),
            vlan: Some(None),
            vni: Some(Some(4_000_000)),
        };
        r.values = vec![
            (Arc::from("avg(size)"), 512.25),
            (Arc::from("max(ttl)"), f64::NAN),
            (Arc::from("count(ecn == 0)"), 3.0),
        ]
        .into();
        r.origin = Origin {
            host: Arc::from("network"),
            worker: NO_WORKER,
        };
        r.missing_hosts = vec![Arc::from("web-2"), Arc::from("web-3")].into();
        r.completeness = Completeness {
            packets: 10,
            malformed: 1,
            not_ip: 2,
            dropped: 3,
            untracked: 4,
            out_of_order: 5,
            complete: false,
            degraded: true,
            flows_unmeasured: 7,
            recall_estimate: Some(0.875),
        };
        all.push(r);
        let mut r = base();
        r.group = GroupKey {
            proto: Some(17),
            vlan: Some(Some(100)),
            ..GroupKey::default()
        };
        r.capture = Some(Box::new(CaptureRef {
            file: Some("captures/x.pcapng".into()),
            from_ns: 1,
            to_ns: 2,
            error: None,
        }));
        all.push(r);
        let mut r = base();
        r.capture = Some(Box::new(CaptureRef {
            file: None,
            from_ns: 3,
            to_ns: 4,
            error: Some("no space left".into()),
        }));
        all.push(r);
        for r in all {
            let written = r.to_json();
            let back = Report::from_json(&written).unwrap_or_else(|e| panic!("{e}: {written}"));
            assert_eq!(back.to_json(), written);
        }
    }

    #[test]
    fn what_is_not_a_report_is_named() {
        let v = base().to_json();
        let mut other = v.clone();
        other["schema"] = "clarion.health/1".into();
        assert!(Report::from_json(&other)
            .unwrap_err()
            .to_string()
            .contains("schema"));
        let mut bad = v.clone();
        bad["group"]["src_ip"] = "10.0.0.1/33".into();
        assert!(Report::from_json(&bad)
            .unwrap_err()
            .to_string()
            .contains("group.src_ip"));
        let mut bad = v;
        bad["window"]["end_ns"] = Value::Null;
        assert!(Report::from_json(&bad)
            .unwrap_err()
            .to_string()
            .contains("window.end_ns"));
    }
}
