//! A table for terminals: fixed-width columns, printed as reports stream.
//!
//! Reports arrive one at a time and the table never sees the end, so column
//! widths can't be measured first. They start at a fixed width; an event
//! name (a drill-down instance's is long) or a group wider than its column
//! is printed whole and widens the column for that row and every later one,
//! so nothing is ever cut and rows stay aligned once the widest has passed.
//! Cost: one `chars().count()` per cell. Layout:
//!
//! ```text
//! EVENT                 WINDOW               GROUP                                               VALUES
//! -- 2026-11-22 UTC --
//! heavy_tcp_flows       06:01:10.840   10ms  10.0.128.11:51068 > 10.20.93.10:5204 tcp            sum(volume)=60816
//! ```

use std::fmt::Write as _;
use std::io::Write;
use std::net::IpAddr;

use clarion_report::{proto_name, rfc3339, GroupKey, Report};

use crate::{Encoded, Encoder, Writer};

const EVENT_WIDTH: usize = 20;
/// `HH:MM:SS.mmm` plus a space plus the window length, right-aligned in 6.
const WINDOW_WIDTH: usize = 12 + 1 + LEN_WIDTH;
const LEN_WIDTH: usize = 6;
/// Fits an IPv4 5-tuple with room to spare and a short IPv6 one exactly.
const GROUP_WIDTH: usize = 50;
const GAP: &str = "  ";

const LEGEND: &str = "! partial view: the window was not seen in full, packets were dropped, \
                      malformed or untracked, or hosts did not answer (the JSON report's completeness says which)";

/// Writes reports as rows of a table for people, buffered: a header before
/// the first row, a date line before the first row of each UTC date, and
/// a trailing `!` on rows whose completeness is not lossless (explained by a
/// legend line under the first such row). Times are UTC.
#[derive(Debug)]
pub struct Table {
    header_done: bool,
    legend_done: bool,
    /// `YYYY-MM-DD` of the last row written.
    date: String,
    /// Current widths of the EVENT and GROUP columns: the initial ones, or
    /// the widest cell written so far (never narrower).
    event_width: usize,
    group_width: usize,
    row: String,
}

/// The table of reports to `W`, buffered.
pub type TableSink<W> = Encoded<W, Table>;

impl<W: Write> Encoded<W, Table> {
    /// Rows to `out`; `destination` names it in errors.
    pub fn new(out: W, destination: impl Into<String>) -> Self {
        Encoded::with(Writer::new(out, destination), Table::default())
    }
}

impl Default for Table {
    fn default() -> Self {
        Table {
            header_done: false,
            legend_done: false,
            date: String::new(),
            event_width: EVENT_WIDTH,
            group_width: GROUP_WIDTH,
            row: String::with_capacity(256),
        }
    }
}

impl Table {
    /// Renders everything the report adds to the output into `self.row`.
    fn render(&mut self, r: &Report) {
        let row = &mut self.row;
        row.clear();
        // Writing to a String can't fail; the results are ignored.
        if !self.header_done {
            let _ = writeln!(
                row,
                "{:<EVENT_WIDTH$}{GAP}{:<WINDOW_WIDTH$}{GAP}{:<GROUP_WIDTH$}{GAP}VALUES",
                "EVENT", "WINDOW", "GROUP"
            );
            self.header_done = true;
        }
        let stamp = rfc3339(r.window.start_ns);
        // `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`; the fallbacks only guard the slicing.
        let date = stamp.get(..10).unwrap_or(&stamp);
        let time = stamp.get(11..23).unwrap_or(&stamp);
        if date != self.date {
            let _ = writeln!(row, "-- {date} UTC --");
            self.date = date.to_string();
        }
        let length = duration_text(r.window.end_ns.saturating_sub(r.window.start_ns));
        let group = group_text(&r.group);
        // `{:<w$}` pads by chars, as these widths count.
        self.event_width = self.event_width.max(r.event.chars().count());
        self.group_width = self.group_width.max(group.chars().count());
        let (ew, gw) = (self.event_width, self.group_width);
        let _ = write!(
            row,
            "{:<ew$}{GAP}{time} {length:>LEN_WIDTH$}{GAP}{group:<gw$}{GAP}",
            r.event,
        );
        for (i, (name, v)) in r.values.iter().enumerate() {
            let sep = if i == 0 { "" } else { GAP };
            let _ = write!(row, "{sep}{name}={}", value_text(*v));
        }
        let lossy = !r.completeness.is_lossless();
        if lossy {
            row.push_str(" !");
        }
        if !r.missing_hosts.is_empty() {
            let _ = write!(row, " (without {})", r.missing_host_names().join(", "));
        }
        // No trailing blanks when there are no values to show.
        row.truncate(row.trim_end().len());
        row.push('\n');
        if lossy && !self.legend_done {
            row.push_str(LEGEND);
            row.push('\n');
            self.legend_done = true;
        }
    }
}

impl Encoder<Report> for Table {
    fn encode(&mut self, report: &Report, out: &mut Vec<u8>) -> Result<(), String> {
        self.render(report);
        out.extend_from_slice(self.row.as_bytes());
        Ok(())
    }
}

/// `10ms`, `1s`, `1500ms`: the largest unit that divides the length exactly.
fn duration_text(ns: u64) -> String {
    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;
    if ns == 0 {
        return "0s".into();
    }
    for (unit, suffix) in [(S, "s"), (MS, "ms"), (US, "us")] {
        // Not `is_multiple_of`: it needs Rust 1.87, and the workspace supports 1.80.
        let rest = ns % unit;
        if rest == 0 {
            return format!("{}{suffix}", ns / unit);
        }
    }
    format!("{ns}ns")
}

/// Integers as integers; fractions to 3 decimals, or 4 significant digits
/// when smaller than 1; huge values in exponent form; undefined (NaN) as
/// `undefined`.
fn value_text(v: f64) -> String {
    if v.is_nan() {
        return "undefined".into();
    }
    if v.is_infinite() || v.abs() >= 9.007_199_254_740_992e15 {
        // Beyond 2^53 the digits would be noise.
        return format!("{v:e}");
    }
    if v.fract() == 0.0 {
        return format!("{v}");
    }
    let magnitude = v.abs().log10().floor();
    // Clamped, so the cast is exact: 3 decimals from 1 up, more below.
    let decimals = (3.0 - magnitude).clamp(3.0, 17.0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// `10.0.0.1:443 > 10.0.0.2:51234 tcp` for a 5-tuple of full addresses,
/// otherwise `field=value` pairs (`none` for a port or VLAN the packets
/// lack); `*` when the key has no field at all.
fn group_text(g: &GroupKey) -> String {
    let full = |(a, len): (IpAddr, u8)| len == if a.is_ipv4() { 32 } else { 128 };
    if let (Some(src), Some(dst), Some(sp), Some(dp), Some(proto)) =
        (g.src_ip, g.dst_ip, g.src_port, g.dst_port, g.proto)
    {
        if full(src) && full(dst) {
            let proto = proto_name(proto)
                .map(str::to_string)
                .unwrap_or_else(|| proto.to_string());
            let mut s = format!("{} > {} {proto}", endpoint(src.0, sp), endpoint(dst.0, dp));
            if let Some(vlan) = g.vlan {
                let _ = write!(
                    s,
                    " vlan={}",
                    vlan.map_or_else(|| "none".to_string(), |v| v.to_string())
                );
            }
            if let Some(vni) = g.vni {
                let _ = write!(
                    s,
                    " vni={}",
                    vni.map_or_else(|| "none".to_string(), |v| v.to_string())
                );
            }
            return s;
        }
    }
    let fields = g.fields();
    if fields.is_empty() {
        return "*".into();
    }
    let pairs: Vec<String> = fields
        .into_iter()
        .map(|(name, text)| format!("{name}={}", text.as_deref().unwrap_or("none")))
        .collect();
    pairs.join(" ")
}

fn endpoint(addr: IpAddr, port: Option<u16>) -> String {
    match (addr, port) {
        (_, None) => addr.to_string(),
        (IpAddr::V4(a), Some(p)) => format!("{a}:{p}"),
        (IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use clarion_report::{Completeness, GroupKey};

    use super::*;
    use crate::test_util::*;
    use crate::{Sink, SinkError};

    const MS: u64 = 1_000_000;

    fn render(reports: &[Report]) -> String {
        let mut sink = TableSink::new(Vec::new(), "memory");
        for r in reports {
            sink.write(r).unwrap();
        }
        String::from_utf8(sink.into_inner().unwrap()).unwrap()
    }

    #[test]
    fn snapshot() {
        let mut partial = report(
            "port_scan",
            T0 + 1_160 * MS,
            1_000 * MS,
            GroupKey {
                src_ip: Some((ip("10.0.128.12"), 32)),
                dst_ip: Some((ip("10.20.93.10"), 32)),
                ..GroupKey::default()
            },
            &[("count(tcp_flags == 2)", 66.0)],
        );
        partial.completeness.complete = false;
        partial.missing_hosts = vec!["web-4".into()].into();
        let mut dropped = report(
            "icmp_watch",
            T0 + 1_200 * MS,
            100 * MS,
            GroupKey {
                src_ip: Some((ip("10.0.128.11"), 32)),
                dst_ip: Some((ip("10.20.93.10"), 32)),
                src_port: Some(None),
                dst_port: Some(None),
                proto: Some(1),
                vlan: Some(None),
                vni: Some(Some(5001)),
            },
            &[("min(ttl)", 1.0)],
        );
        dropped.completeness = Completeness {
            packets: 10,
            dropped: 3,
            complete: true,
            ..Completeness::default()
        };
        let reports = [
            report(
                "heavy_tcp_flows",
                T0,
                10 * MS,
                five_tuple("10.0.128.11", 51068, "10.20.93.10", 5204, 6),
                &[("sum(volume)", 60816.0)],
            ),
            report(
                "bulk_tcp_without_ecn",
                T0,
                500 * MS,
                five_tuple("fd00:0:128::12", 35454, "fd00:20:93::10", 5202, 6),
                &[("sum(volume)", 937_000.0), ("count(ecn == 0)", 0.987_654_3)],
            ),
            report(
                "a_rather_long_event_name",
                T0 + 10 * MS,
                1_500 * MS,
                GroupKey {
                    src_ip: Some((ip("10.0.128.0"), 24)),
                    dst_ip: Some((ip("2001:db8:1234:5678:9abc:def0:1234:5678"), 128)),
                    dst_port: Some(None),
                    vlan: Some(Some(100)),
                    proto: Some(132),
                    ..GroupKey::default()
                },
                &[
                    ("avg(size)", 1234.5678),
                    ("min(rwnd)", f64::NAN),
                    ("avg(ecn)", 0.000_123_456),
                ],
            ),
            partial,
            dropped,
            report(
                "everything",
                T0 + 86_400_000 * MS,
                10 * MS,
                GroupKey::default(),
                &[],
            ),
        ];
        let expected = "\
EVENT                 WINDOW               GROUP                                               VALUES
-- 2026-11-22 UTC --
heavy_tcp_flows       06:01:10.840   10ms  10.0.128.11:51068 > 10.20.93.10:5204 tcp            sum(volume)=60816
bulk_tcp_without_ecn  06:01:10.840  500ms  [fd00:0:128::12]:35454 > [fd00:20:93::10]:5202 tcp  sum(volume)=937000  count(ecn == 0)=0.9877
a_rather_long_event_name  06:01:10.850 1500ms  src_ip=10.0.128.0/24 dst_ip=2001:db8:1234:5678:9abc:def0:1234:5678 dst_port=none proto=132 vlan=100  avg(size)=1234.568  min(rwnd)=undefined  avg(ecn)=0.0001235
port_scan                 06:01:12.000     1s  src_ip=10.0.128.12 dst_ip=10.20.93.10                                                                count(tcp_flags == 2)=66 ! (without web-4)
! partial view: the window was not seen in full, packets were dropped, malformed or untracked, or hosts did not answer (the JSON report's completeness says which)
icmp_watch                06:01:12.040  100ms  10.0.128.11 > 10.20.93.10 icmp vlan=none vni=5001                                                    min(ttl)=1 !
-- 2026-11-23 UTC --
everything                06:01:10.840   10ms  *
";
        assert_eq!(render(&reports), expected);
    }

    /// Drill-down instances are named after their network-wide event and
    /// the group they drill into: long. The reference is the report itself:
    /// every row, split at its two-space gaps, holds the whole event name
    /// and group text, and the columns after a wide row stay aligned.
    #[test]
    fn long_instance_names_are_never_cut() {
        let names = [
            "short",
            "heavy_hitter_drill/src_ip=10.0.128.0/24/dst_ip=10.20.93.10",
            "x",
            "another_instance_name_that_is_longer_than_the_column_too_by_far",
            "y",
        ];
        let reports: Vec<Report> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                report(
                    n,
                    T0 + i as u64 * MS,
                    10 * MS,
                    five_tuple("10.0.128.11", 51068, "10.20.93.10", 5204, 6),
                    &[("count", i as f64)],
                )
            })
            .collect();
        let text = render(&reports);
        let rows: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with("--") && !l.starts_with("EVENT"))
            .collect();
        assert_eq!(rows.len(), names.len(), "{text}");
        for (row, r) in rows.iter().zip(&reports) {
            let cells: Vec<&str> = row.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
            assert_eq!(cells[0], &*r.event, "{row}");
            assert!(cells.contains(&group_text(&r.group).as_str()), "{row}");
        }
        // After the widest name, the window column starts at one place.
        let widest = names[1..].iter().map(|n| n.len()).max().unwrap_or(0);
        let after: Vec<usize> = rows[3..].iter().map(|r| r.find("06:01").unwrap()).collect();
        assert!(after.iter().all(|&c| c == widest + GAP.len()), "{text}");
    }

    #[test]
    fn nothing_written_prints_nothing() {
        assert_eq!(render(&[]), "");
    }

    #[test]
    fn values_read_naturally() {
        assert_eq!(value_text(125_001.0), "125001");
        assert_eq!(value_text(-3.0), "-3");
        assert_eq!(value_text(12.5), "12.5");
        assert_eq!(value_text(2.0 / 3.0), "0.6667");
        assert_eq!(value_text(f64::NAN), "undefined");
        assert_eq!(value_text(1e300), "1e300");
    }

    #[test]
    fn durations_use_the_largest_exact_unit() {
        assert_eq!(duration_text(10 * MS), "10ms");
        assert_eq!(duration_text(3_600_000 * MS), "3600s");
        assert_eq!(duration_text(1_500 * MS), "1500ms");
        assert_eq!(duration_text(1_500), "1500ns");
        assert_eq!(duration_text(2_000), "2us");
    }

    #[test]
    fn broken_pipe_is_distinct_and_sticky() {
        let r = report("e", T0, 10 * MS, GroupKey::default(), &[]);
        let mut sink = TableSink::new(Failing(io::ErrorKind::BrokenPipe), "stdout");
        sink.write(&r).unwrap();
        assert!(matches!(sink.flush(), Err(SinkError::BrokenPipe)));
        assert!(matches!(sink.write(&r), Err(SinkError::BrokenPipe)));
    }
}
