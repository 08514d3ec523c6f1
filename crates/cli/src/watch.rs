//! `clarion events watch`: the control API's stream of fired events
//! (`GET /v1/reports`), as the JSON lines it sends or as `clarion run`'s
//! table, of every event or of those named.
//!
//! The stream carries `clarion.report/1` objects. JSON lines pass through
//! as sent, byte for byte. The table needs the [`Report`] back: [`report`]
//! reads every field `Report::to_json` writes, so a report read back
//! writes the same object again (the tests hold it).

use std::io::Write;
use std::net::IpAddr;
use std::sync::Arc;

use clap::Args;
use clarion_control::{Client, ClientError};
use clarion_report::{CaptureRef, Completeness, GroupKey, Origin, Report, Window, NO_WORKER, SCHEMA};
use clarion_sinks::{ReportSink, TableSink};
use serde_json::Value;

use crate::args::Format;
use crate::Failure;

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// Report format: 'json' (each report's line as the API sends it,
    /// schema clarion.report/1), 'table' (clarion run's aligned columns),
    /// or 'auto' (table on a terminal, else json).
    #[arg(long, value_enum, default_value_t = Format::Auto, value_name = "FORMAT")]
    pub format: Format,

    /// Only the reports of this event, and of its drill-down instances
    /// (NAME[...]); repeat for several (default: every event's).
    #[arg(long = "event", value_name = "NAME")]
    pub events: Vec<String>,
}

impl WatchArgs {
    /// Whether the reports of the event named `name` are watched.
    fn wants(&self, name: &str) -> bool {
        self.events.is_empty()
            || self.events.iter().any(|e| {
                name.strip_prefix(e.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('['))
            })
    }
}

/// Streams the reports until the server closes the stream or the reader
/// goes away. `is_tty`: standard output is a terminal (for 'auto').
pub fn watch(
    client: &Client,
    failure: impl Fn(ClientError) -> Failure,
    a: &WatchArgs,
    out: &mut impl Write,
    is_tty: bool,
) -> Result<(), Failure> {
    if !a.events.is_empty() {
        // A name not installed is likely a typo; it may also be added later.
        let installed = client.list().map_err(&failure)?;
        for e in a
            .events
            .iter()
            .filter(|e| !installed.iter().any(|i| i.name == **e))
        {
            eprintln!("clarion: warning: --event {e}: no such event is installed (yet); watching for it");
        }
    }
    let table = match a.format {
        Format::Table => true,
        Format::Json => false,
        Format::Auto => is_tty,
    };
    let (mut sink, mut plain) = if table {
        (Some(TableSink::new(out)), None)
    } else {
        (None, Some(out))
    };
    let mut failed = None;
    let mut each = |line: &str| -> Result<(), Failure> {
        if let Some(sink) = sink.as_mut() {
            match serde_json::from_str(line)
                .map_err(|e| e.to_string())
                .and_then(|v| report(&v))
            {
                Ok(r) if a.wants(&r.event) => {
                    sink.write(&r).map_err(crate::run::sink_error)?;
                    sink.flush().map_err(crate::run::sink_error)?;
                }
                Ok(_) => {}
                Err(why) => skipped(line, &why),
            }
        } else if let Some(out) = plain.as_mut() {
            if !a.events.is_empty() {
                let v: Value = match serde_json::from_str(line) {
                    Ok(v) => v,
                    Err(e) => {
                        skipped(line, &e.to_string());
                        return Ok(());
                    }
                };
                if !v["event"].as_str().is_some_and(|n| a.wants(n)) {
                    return Ok(());
                }
            }
            writeln!(out, "{line}")
                .and_then(|_| out.flush())
                .map_err(crate::events::io)?;
        }
        Ok(())
    };
    client
        .watch(|line| match each(line) {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        })
        .map_err(failure)?;
    failed.map_or(Ok(()), Err)
}

/// A line of the stream that is not a report: said, and the stream goes on.
fn skipped(line: &str, why: &str) {
    let start: String = line.chars().take(80).collect();
    eprintln!(
        "clarion: warning: skipped a line of the stream that is not a {SCHEMA} report ({why}): {start}"
    );
}

/// A `clarion.report/1` object read back into the report it was written from.
pub fn report(v: &Value) -> Result<Report, String> {
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
        None => Vec::new(),
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
        Some(x) => Some(CaptureRef {
            file: x["file"].as_str().map(str::to_string),
            from_ns: u64_at(x, &["from_ns"])?,
            to_ns: u64_at(x, &["to_ns"])?,
            error: x["error"].as_str().map(str::to_string),
        }),
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
                .find(|p| clarion_report::proto_name(*p) == Some(name.as_str()))
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
            values: vec![(Arc::from("sum(volume)"), 57920.0)],
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
            missing_hosts: Vec::new(),
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
        ];
        r.origin = Origin {
            host: Arc::from("network"),
            worker: NO_WORKER,
        };
        r.missing_hosts = vec![Arc::from("web-2"), Arc::from("web-3")];
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
        r.capture = Some(CaptureRef {
            file: Some("captures/x.pcapng".into()),
            from_ns: 1,
            to_ns: 2,
            error: None,
        });
        all.push(r);
        let mut r = base();
        r.capture = Some(CaptureRef {
            file: None,
            from_ns: 3,
            to_ns: 4,
            error: Some("no space left".into()),
        });
        all.push(r);
        for r in all {
            let written = r.to_json();
            let back = report(&written).unwrap_or_else(|e| panic!("{e}: {written}"));
            assert_eq!(back.to_json(), written);
        }
    }

    #[test]
    fn what_is_not_a_report_is_named() {
        let v = base().to_json();
        let mut other = v.clone();
        other["schema"] = "clarion.health/1".into();
        assert!(report(&other).unwrap_err().contains("schema"));
        let mut bad = v.clone();
        bad["group"]["src_ip"] = "10.0.0.1/33".into();
        assert!(report(&bad).unwrap_err().contains("group.src_ip"));
        let mut bad = v;
        bad["window"]["end_ns"] = Value::Null;
        assert!(report(&bad).unwrap_err().contains("window.end_ns"));
    }

    #[test]
    fn an_event_named_takes_its_drill_down_instances() {
        let a = WatchArgs {
            format: Format::Json,
            events: vec!["spike".into(), "low_ttl".into()],
        };
        assert!(a.wants("spike"));
        assert!(a.wants("spike[dst_ip=10.0.0.0/24]"));
        assert!(a.wants("low_ttl"));
        assert!(!a.wants("spikes"));
        assert!(!a.wants("heavy"));
        let all = WatchArgs {
            format: Format::Json,
            events: Vec::new(),
        };
        assert!(all.wants("anything"));
    }
}
