//! Drill-downs, straight from the contract (`docs/semantics.md`,
//! "Drill-downs"), sharing nothing with the monitor's way of doing them.
//!
//! Every report of an event with `then install` names an instance (the
//! installed event, narrowed to the report's group on the `on` fields) and
//! a span of time. The report's window is decided at the packet time of
//! the first frame at or after its end (none: no instance); the span starts
//! at the first boundary of the installed event's grid at or after the end
//! of the firing event's window holding that time, and lasts the duration
//! (or forever). An instance is evaluated like
//! any event, over the packets of its filters that also have the group's
//! values of the `on` fields and a packet time inside one of its spans.
//! Instances' own reports fire further drill-downs, so the whole is
//! repeated until nothing changes (chains are at most eight deep).

use std::collections::BTreeMap;
use std::net::IpAddr;

use clarion_lang::spec::{DrillDown, EventSpec, Granularity};
use clarion_report::{proto_name, GroupKey, Report};
use clarion_wire::FlowKey;

use crate::{group_addr, group_key, Run};

/// One instance: its event, the group values packets must have, its spans.
struct Instance {
    event: EventSpec,
    on: Granularity,
    /// The firing group's values of the `on` fields (others `None`).
    values: GroupKey,
    /// `[start, end)` in packet time; `u64::MAX` for "until removed".
    spans: Vec<(u64, u64)>,
}

impl Instance {
    fn admits(&self, key: &FlowKey, time: u64) -> bool {
        group_key(&self.on, key) == self.values && self.spans.iter().any(|&(s, e)| s <= time && time < e)
    }
}

/// Rounds after which chains must have settled: one per level, and one to see nothing change.
const ROUNDS: usize = 10;

/// The reports of every drill-down instance that `reports` (of the
/// installed events) and the instances' own reports give rise to.
pub(crate) fn instance_reports(run: &Run, events: &[EventSpec], reports: &[Report]) -> Vec<Report> {
    let by_name: BTreeMap<&str, &EventSpec> = events.iter().map(|e| (e.name.as_str(), e)).collect();
    let mut produced: Vec<Report> = Vec::new();
    for _ in 0..ROUNDS {
        let mut instances: BTreeMap<String, Instance> = BTreeMap::new();
        // The spec each report was made by: an installed event, or an instance's event.
        let mut firings: Vec<(&EventSpec, &Report)> = Vec::new();
        for r in reports {
            if let Some(e) = by_name.get(&*r.event) {
                firings.push((e, r));
            }
        }
        let previous: BTreeMap<String, EventSpec> = instance_events(events, &produced);
        for r in &produced {
            if let Some(e) = previous.get(&*r.event) {
                firings.push((e, r));
            }
        }
        for (parent, r) in firings {
            // The first frame at or after the window's end decides it.
            let at = run.frames.partition_point(|f| f.time < r.window.end_ns);
            let Some(decided) = run.frames.get(at).map(|f| f.time) else {
                continue;
            };
            for d in &parent.drill_downs {
                fire(d, parent.interval_ns, r, decided, &mut instances);
            }
        }
        let next: Vec<Report> = instances
            .iter()
            .flat_map(|(name, inst)| {
                run.event_reports(&inst.event, name, &|key, time| inst.admits(key, time))
            })
            .collect();
        if next == produced {
            break;
        }
        produced = next;
    }
    produced
}

/// The installed event of every instance named in `reports`, by instance
/// name (instances' names are `EVENT[...]` or `EVENT`).
fn instance_events(events: &[EventSpec], reports: &[Report]) -> BTreeMap<String, EventSpec> {
    let mut out = BTreeMap::new();
    let all: Vec<&EventSpec> = events
        .iter()
        .flat_map(|e| std::iter::once(e).chain(e.installed_events()))
        .collect();
    for r in reports {
        let base = r.event.split('[').next().unwrap_or(&r.event);
        if let Some(e) = all.iter().find(|e| e.on_demand && e.name == base) {
            out.insert(r.event.to_string(), (*e).clone());
        }
    }
    out
}

/// Adds the span that report `r` of an event of interval `parent_interval`,
/// decided at `decided`, gives its instance of `d`.
fn fire(
    d: &DrillDown,
    parent_interval: u64,
    r: &Report,
    decided: u64,
    instances: &mut BTreeMap<String, Instance>,
) {
    let Some((values, name)) = narrowing(d, &r.group) else {
        return;
    };
    let interval = d.event.interval_ns;
    let due = (decided / parent_interval + 1) * parent_interval;
    let start = due.div_ceil(interval) * interval;
    let end = d.duration_ns.map_or(u64::MAX, |dur| start + dur);
    let name = if name.is_empty() {
        d.event.name.clone()
    } else {
        format!("{}[{name}]", d.event.name)
    };
    instances
        .entry(name)
        .or_insert_with(|| Instance {
            event: EventSpec {
                on_demand: false,
                ..d.event.as_ref().clone()
            },
            on: d.on,
            values,
            spans: Vec::new(),
        })
        .spans
        .push((start, end));
}

/// The group's values of `d.on`'s fields and their text (`dst_ip=10.0.128.0/24,...`);
/// `None` when the group has no value for one of them.
fn narrowing(d: &DrillDown, g: &GroupKey) -> Option<(GroupKey, String)> {
    let on = d.on;
    let mut text = Vec::new();
    let mut addr = |field: &str, lens, value: Option<(IpAddr, u8)>| -> Option<Option<(IpAddr, u8)>> {
        let Some(lens) = lens else { return Some(None) };
        let (a, l) = group_addr(lens, value?.0);
        text.push(format!("{field}={a}/{l}"));
        Some(Some((a, l)))
    };
    let src_ip = addr("src_ip", on.src_ip, g.src_ip)?;
    let dst_ip = addr("dst_ip", on.dst_ip, g.dst_ip)?;
    let mut value = |field: &str, wanted: bool, v: Option<Option<u16>>| -> Option<Option<Option<u16>>> {
        if !wanted {
            return Some(None);
        }
        let v = v.flatten()?;
        text.push(format!("{field}={v}"));
        Some(Some(Some(v)))
    };
    let src_port = value("src_port", on.src_port, g.src_port)?;
    let dst_port = value("dst_port", on.dst_port, g.dst_port)?;
    let proto = if on.proto {
        let p = g.proto?;
        text.push(format!(
            "proto={}",
            proto_name(p).map_or_else(|| p.to_string(), String::from)
        ));
        Some(p)
    } else {
        None
    };
    let vlan = if on.vlan {
        let v = g.vlan.flatten()?;
        text.push(format!("vlan={v}"));
        Some(Some(v))
    } else {
        None
    };
    let vni = if on.vni {
        let v = g.vni.flatten()?;
        text.push(format!("vni={v}"));
        Some(Some(v))
    } else {
        None
    };
    let values = GroupKey {
        src_ip,
        dst_ip,
        src_port,
        dst_port,
        proto,
        vlan,
        vni,
    };
    Some((values, text.join(",")))
}
