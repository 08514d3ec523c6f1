//! `then install` and `on demand`: drill-downs between the events of one file.
//!
//! A drill-down names an `on demand` event of the same file, narrows it on
//! fields its own groups keep, and may give a duration. The checks here
//! need the whole file (the named event's scope and interval, the firing
//! event's granularity), so they run after every event is lowered; then
//! each drill-down embeds the named event's spec, its own drill-downs
//! included. Cycles are refused, and so are chains deeper than
//! [`MAX_CHAIN`] or expanding to more than [`MAX_EXPANDED`] events, so that
//! embedding stays small and never recurses deeply.

use std::collections::{HashMap, HashSet};

use crate::ast::{Event, Field, File, Then, Unit};
use crate::error::{codes, Diagnostic};
use crate::spec::{DrillDown, EventSpec, Granularity, PrefixLens};
use crate::suggest::closest;

use super::every::whole_ms;
use super::per::lower_fields;

/// The longest chain of drill-downs (A installs B installs C ...).
const MAX_CHAIN: usize = 8;

/// The most events one event's drill-downs may embed, all levels together.
const MAX_EXPANDED: usize = 256;

/// The longest drill-down duration: one day.
const MAX_DURATION_MS: u64 = 86_400_000;

const NS_PER_MS: u64 = 1_000_000;

/// How many unknown drill-down targets get a "did you mean": each reads
/// every event name, so thousands of them took minutes. Past the first
/// screens of errors nobody reads them.
const SUGGESTIONS: usize = 64;

/// A checked `then install`: the target's index, its narrowing and duration.
type Edge = (usize, Granularity, Option<u64>);

/// Each event's checked drill-downs, by the event's index.
type Edges = HashMap<usize, Vec<Edge>>;

/// Checks every `then install` and `on demand` of `file`, and fills each
/// spec's drill-downs. `specs` holds the events that lowered, by their
/// index in `file.events`.
pub fn resolve(file: &File, specs: Vec<(usize, EventSpec)>, diags: &mut Vec<Diagnostic>) -> Vec<EventSpec> {
    let before = diags.len();
    let by_name: HashMap<&str, usize> = file
        .events
        .iter()
        .enumerate()
        .rev()
        .map(|(i, e)| (e.name.as_str(), i))
        .collect();
    let lowered: HashMap<usize, &EventSpec> = specs.iter().map(|(i, s)| (*i, s)).collect();
    // Per event, its checked drill-downs: (target index, on, duration).
    let mut edges: Edges = HashMap::new();
    let mut suggestions = SUGGESTIONS;
    for (i, e) in file.events.iter().enumerate() {
        for t in &e.then {
            if let Some(edge) = check_then(file, &by_name, &lowered, i, t, &mut suggestions, diags) {
                edges.entry(i).or_default().push(edge);
            }
        }
    }
    // A misspelt target is reported once, not again as an event never installed.
    let misspelt = diags[before..].iter().any(|d| d.code == codes::UNKNOWN_EVENT);
    // Every target, once: a search of all events per event was quadratic.
    let named: HashSet<&str> = file
        .events
        .iter()
        .flat_map(|p| p.then.iter().map(|t| &*t.event))
        .collect();
    for e in file.events.iter().filter(|_| !misspelt) {
        let Some(span) = e.on_demand else { continue };
        if !named.contains(e.name.as_str()) {
            diags.push(
                Diagnostic::new(
                    codes::BAD_ON_DEMAND,
                    format!("event `{}` is never installed", e.name),
                    span,
                )
                .here("installed only on demand")
                .help(format!(
                    "name it in another event's `then install {}`, or remove `on demand` to install it from the start",
                    e.name
                )),
            );
        }
    }
    check_shape(file, &edges, diags);
    if diags.len() > before {
        return specs.into_iter().map(|(_, s)| s).collect();
    }
    let mut done: HashMap<usize, EventSpec> = HashMap::new();
    let order = topological(&edges, file.events.len());
    for i in order {
        let Some(spec) = lowered.get(&i) else { continue };
        let mut spec = (*spec).clone();
        for (target, on, duration_ns) in edges.get(&i).into_iter().flatten() {
            if let Some(event) = done.get(target) {
                spec.drill_downs.push(DrillDown {
                    event: Box::new(event.clone()),
                    on: *on,
                    duration_ns: *duration_ns,
                });
            }
        }
        done.insert(i, spec);
    }
    specs
        .into_iter()
        .map(|(i, s)| done.remove(&i).unwrap_or(s))
        .collect()
}

/// One `then install` clause of event `i`: its target, narrowing and duration.
fn check_then(
    file: &File,
    by_name: &HashMap<&str, usize>,
    lowered: &HashMap<usize, &EventSpec>,
    i: usize,
    t: &Then,
    suggestions: &mut usize,
    diags: &mut Vec<Diagnostic>,
) -> Option<Edge> {
    let parent = &file.events[i];
    let Some(&target) = by_name.get(&*t.event) else {
        let d = Diagnostic::new(
            codes::UNKNOWN_EVENT,
            format!("no event named `{}` in this file", t.event),
            t.event_span,
        )
        .here("unknown event");
        let names = file.events.iter().map(|e| e.name.as_str());
        // Each suggestion reads every name: only the first few get one.
        let suggested = if *suggestions > 0 {
            *suggestions -= 1;
            closest(&t.event, names)
        } else {
            None
        };
        diags.push(match suggested {
            Some(s) => d.help(format!("did you mean `{s}`?")),
            None => d.help(format!(
                "define it in the same file with `on demand`: `event {} ... on demand`",
                t.event
            )),
        });
        return None;
    };
    let child = &file.events[target];
    if child.on_demand.is_none() {
        diags.push(
            Diagnostic::new(
                codes::NOT_ON_DEMAND,
                format!(
                    "event `{}` is installed from the start, not on demand",
                    child.name
                ),
                t.event_span,
            )
            .here("not an `on demand` event")
            .label(child.name_span, "defined here")
            .help(format!(
                "add the clause `on demand` to `{}`, so that only drill-downs install it",
                child.name
            )),
        );
        return None;
    }
    // The rest needs both events lowered; their own errors are reported already.
    let (Some(p), Some(c)) = (lowered.get(&i), lowered.get(&target)) else {
        return None;
    };
    if p.scope.is_network() != c.scope.is_network() {
        let (this, that) = if p.scope.is_network() {
            ("a network-wide event", "a host event")
        } else {
            ("a host event", "a network-wide event")
        };
        diags.push(
            Diagnostic::new(
                codes::DRILL_DOWN_SCOPE,
                format!(
                    "`{}` is {this} and cannot install `{}`, {that}",
                    parent.name, child.name
                ),
                t.span,
            )
            .here("scopes differ")
            .help("a host event installs host events, a network-wide (`across`) event network-wide ones"),
        );
        return None;
    }
    let on = narrowing(parent, p, t, diags)?;
    let duration = match &t.duration {
        None => None,
        Some(q) => Some(duration(q, c, diags)?),
    };
    Some((target, on, duration))
}

/// The `on` fields, each kept by the firing event's groups. An address
/// written without a length narrows to the length the groups keep.
fn narrowing(parent: &Event, p: &EventSpec, t: &Then, diags: &mut Vec<Diagnostic>) -> Option<Granularity> {
    let before = diags.len();
    let mut on = lower_fields(&t.on, "the drill-down's fields", diags);
    let g = p.granularity;
    for gf in &t.on {
        let bad = |why: String| {
            Diagnostic::new(codes::BAD_NARROWING, why, gf.span)
                .here("not in the firing group")
                .help(format!(
                    "narrow on fields that `{}`'s `per` keeps ({}), at most as long as it keeps them",
                    parent.name,
                    granularity_text(&g)
                ))
        };
        let name = gf.field.name();
        let kept = match gf.field {
            Field::SrcIp => address(&mut on.src_ip, g.src_ip, gf.lens.is_empty()),
            Field::DstIp => address(&mut on.dst_ip, g.dst_ip, gf.lens.is_empty()),
            Field::SrcPort => Ok(g.src_port),
            Field::DstPort => Ok(g.dst_port),
            Field::Proto => Ok(g.proto),
            Field::Vlan => Ok(g.vlan),
            Field::Vni => Ok(g.vni),
        };
        match kept {
            Ok(true) => {}
            Ok(false) => diags.push(bad(format!(
                "the groups of `{}` do not keep `{name}`",
                parent.name
            ))),
            Err(lens) => diags.push(bad(format!(
                "the groups of `{}` keep `{name}` to /{} (IPv4) and /{} (IPv6) only",
                parent.name, lens.v4, lens.v6
            ))),
        }
    }
    (diags.len() == before).then_some(on)
}

/// Whether an address narrowing fits the group's lengths (`Err` with the
/// group's lengths when it does not); an unwritten length takes the group's.
fn address(
    on: &mut Option<PrefixLens>,
    group: Option<PrefixLens>,
    unwritten: bool,
) -> Result<bool, PrefixLens> {
    let Some(group) = group else { return Ok(false) };
    if unwritten {
        *on = Some(group);
    }
    match *on {
        Some(l) if l.v4 <= group.v4 && l.v6 <= group.v6 => Ok(true),
        Some(_) => Err(group),
        // Its own length was out of range: reported by `lower_fields`.
        None => Ok(true),
    }
}

fn granularity_text(g: &Granularity) -> String {
    let addr = |name: &str, l: Option<PrefixLens>| {
        l.map(|l| match (l.v4, l.v6) {
            (32, 128) => name.to_string(),
            (a, b) if u16::from(a) == u16::from(b) => format!("{name}/{a}"),
            (a, b) => format!("{name}/{a}/{b}"),
        })
    };
    let mut out: Vec<String> = [addr("src_ip", g.src_ip), addr("dst_ip", g.dst_ip)]
        .into_iter()
        .flatten()
        .collect();
    for (kept, name) in [
        (g.src_port, "src_port"),
        (g.dst_port, "dst_port"),
        (g.proto, "proto"),
        (g.vlan, "vlan"),
        (g.vni, "vni"),
    ] {
        if kept {
            out.push(name.to_string());
        }
    }
    if out.is_empty() {
        "no fields".to_string()
    } else {
        out.join(", ")
    }
}

/// `for DURATION`: whole milliseconds, a positive multiple of the installed event's interval.
fn duration(q: &crate::ast::Quantity, c: &EventSpec, diags: &mut Vec<Diagnostic>) -> Option<u64> {
    let interval_ms = c.interval_ns / NS_PER_MS;
    let err = |msg: String, label: &str| {
        Diagnostic::new(codes::BAD_DURATION, msg, q.span).here(label).help(format!(
            "write a whole number of `{}`'s interval ({interval_ms}ms), e.g. `for {}ms`, or leave `for` out to keep it until removed",
            c.name,
            interval_ms * 10
        ))
    };
    let unit_ns = q.unit.and_then(Unit::nanos);
    let Some(ms) = unit_ns.and_then(|ns| whole_ms(q.value, ns)) else {
        diags.push(err(
            format!("`{q}` is not a duration in whole milliseconds"),
            "not a duration",
        ));
        return None;
    };
    if ms == 0 || ms > MAX_DURATION_MS || interval_ms == 0 || ms % interval_ms != 0 {
        let (why, label) = if ms == 0 {
            ("a drill-down lasts longer than zero".to_string(), "zero")
        } else if ms > MAX_DURATION_MS {
            (
                "a drill-down lasts at most a day (`for 86400s`)".to_string(),
                "too long",
            )
        } else {
            let why = format!(
                "`{q}` is not a whole number of `{}`'s {interval_ms}ms windows",
                c.name
            );
            (why, "not whole windows")
        };
        diags.push(err(why, label));
        return None;
    }
    Some(ms * NS_PER_MS)
}

/// Refuses cycles, chains deeper than [`MAX_CHAIN`] and expansions beyond [`MAX_EXPANDED`].
fn check_shape(file: &File, edges: &Edges, diags: &mut Vec<Diagnostic>) {
    // Depth and size by memoised search; `None` while on the stack (a cycle).
    let mut memo: HashMap<usize, Option<(usize, usize)>> = HashMap::new();
    for start in 0..file.events.len() {
        if memo.contains_key(&start) {
            continue;
        }
        // Explicit stack: (node, next child position).
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        memo.insert(start, None);
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            let children = edges.get(&node).map_or(&[][..], Vec::as_slice);
            if let Some(&(child, _, _)) = children.get(*next) {
                *next += 1;
                match memo.get(&child) {
                    Some(None) => {
                        let e = &file.events[node];
                        let span = e
                            .then
                            .iter()
                            .find(|t| t.event == file.events[child].name)
                            .map_or(e.name_span, |t| t.span);
                        diags.push(
                            Diagnostic::new(
                                codes::DRILL_DOWN_CYCLE,
                                format!("drill-downs form a cycle: `{}` installs `{}`, which leads back to it", e.name, file.events[child].name),
                                span,
                            )
                            .here("closes the cycle")
                            .help("an event cannot install itself, directly or through others: remove one `then install`"),
                        );
                        return;
                    }
                    Some(Some(_)) => {}
                    None => {
                        memo.insert(child, None);
                        stack.push((child, 0));
                    }
                }
                continue;
            }
            let (depth, size) = children.iter().fold((0, 1), |(d, s), (c, _, _)| {
                let (cd, cs) = memo.get(c).copied().flatten().unwrap_or((0, 1));
                (d.max(cd + 1), s + cs)
            });
            memo.insert(node, Some((depth, size)));
            stack.pop();
            if depth > MAX_CHAIN || size > MAX_EXPANDED {
                let e = &file.events[node];
                diags.push(
                    Diagnostic::new(
                        codes::DRILL_DOWN_CYCLE,
                        format!("the drill-downs of `{}` go too deep", e.name),
                        e.name_span,
                    )
                    .here(format!("{depth} levels, {size} events"))
                    .help(format!(
                        "chains of drill-downs are at most {MAX_CHAIN} deep and {MAX_EXPANDED} events in all"
                    )),
                );
                return;
            }
        }
    }
}

/// Events in an order where every drill-down's target comes before the
/// event naming it (the graph has no cycle: [`check_shape`] ran).
fn topological(edges: &Edges, n: usize) -> Vec<usize> {
    let mut order = Vec::with_capacity(n);
    let mut seen = vec![false; n];
    for start in 0..n {
        if seen[start] {
            continue;
        }
        seen[start] = true;
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            let children = edges.get(&node).map_or(&[][..], Vec::as_slice);
            if let Some(&(child, _, _)) = children.get(*next) {
                *next += 1;
                if !seen[child] {
                    seen[child] = true;
                    stack.push((child, 0));
                }
                continue;
            }
            order.push(node);
            stack.pop();
        }
    }
    order
}
