//! Drill-down instances, with no I/O: when an event with `then install`
//! fires for a group in a window, which narrowed event is installed, from
//! which window and until which, and what to do when one is already there.
//!
//! ```text
//! event lossy_web ... per 5tuple every 10ms
//!   then install heavy_to_dst on dst_ip/24 for 100ms
//!
//! lossy_web fires in [20ms, 30ms) for 10.0.0.1:5000 -> 10.0.128.7:80,
//! decided when the next packet arrives, at 31 ms
//!   => instance `heavy_to_dst[dst_ip=10.0.128.0/24]`: heavy_to_dst's filters
//!      each with `dst_ip in 10.0.128.0/24` added, windows [40ms, 140ms)
//! ```
//!
//! The contract (`docs/semantics.md`, "Drill-downs"): a window is decided
//! when the first packet after it arrives (at `decided`); an instance
//! starts at the first window boundary of the installed event at or after
//! the end of the firing event's window holding `decided`, and covers
//! `duration` from there, or every later window without one. The same instance (same event, same
//! narrowed values) fired again while installed is extended, not installed
//! twice; its windows are the union of its firings' spans. A group without
//! a value for a narrowing field (an ICMP packet's ports, an untagged
//! frame's VLAN) installs nothing, and neither does a narrowing that leaves
//! no filter able to match.
//!
//! The monitor (`clarion-engine`) and the event manager use this crate;
//! the reference evaluator implements the contract on its own.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use clarion_lang::spec::{DrillDown, EventSpec, Filter, IpPrefix, PortRange, PrefixLens};
use clarion_report::{proto_name, GroupKey, Window};

/// One narrowed event to install, and the windows it covers.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// The installed event narrowed to the group, named
    /// `EVENT[field=value,...]` (just `EVENT` without `on`), not `on demand`.
    pub spec: EventSpec,
    /// Its first window's start.
    pub start_ns: u64,
    /// The end of its last window; `None`: until removed.
    pub end_ns: Option<u64>,
}

/// The instance `d` installs when its event (of interval
/// `parent_interval_ns`) fires for `group` in `window`, decided at packet
/// time `decided_ns`; see the crate documentation for when there is none.
pub fn instance(
    d: &DrillDown,
    parent_interval_ns: u64,
    window: Window,
    group: &GroupKey,
    decided_ns: u64,
) -> Option<Instance> {
    let template = &d.event;
    let interval = template.interval_ns.max(1);
    let parent_interval = parent_interval_ns.max(1);
    let decided = decided_ns.max(window.end_ns);
    let due = (decided - decided % parent_interval).checked_add(parent_interval)?;
    let start_ns = due.checked_next_multiple_of(interval)?;
    let end_ns = match d.duration_ns {
        Some(dur) => Some(start_ns.checked_add(dur)?),
        None => None,
    };
    let narrow = Narrowing::of(d, group)?;
    let filters: Vec<Filter> = template.filters.iter().filter_map(|f| narrow.apply(f)).collect();
    if filters.is_empty() {
        return None;
    }
    let spec = EventSpec {
        name: narrow.name(&template.name),
        filters,
        on_demand: false,
        ..(**template).clone()
    };
    Some(Instance {
        spec,
        start_ns,
        end_ns,
    })
}

/// The firing group's values of the narrowing fields.
#[derive(Default)]
struct Narrowing {
    src_ip: Option<IpPrefix>,
    dst_ip: Option<IpPrefix>,
    src_port: Option<u16>,
    dst_port: Option<u16>,
    proto: Option<u8>,
    vlan: Option<u16>,
    vni: Option<u32>,
}

impl Narrowing {
    /// `None` when the group has no value for one of `d.on`'s fields.
    fn of(d: &DrillDown, g: &GroupKey) -> Option<Narrowing> {
        let on = d.on;
        let addr = |lens: Option<PrefixLens>, key: Option<(IpAddr, u8)>| -> Option<Option<IpPrefix>> {
            match lens {
                None => Some(None),
                Some(l) => {
                    let (a, kept) = key?;
                    let len = match a {
                        IpAddr::V4(_) => l.v4,
                        IpAddr::V6(_) => l.v6,
                    }
                    .min(kept);
                    Some(Some(prefix(a, len)))
                }
            }
        };
        fn value<T>(wanted: bool, key: Option<Option<T>>) -> Option<Option<T>> {
            if wanted {
                key.flatten().map(Some)
            } else {
                Some(None)
            }
        }
        Some(Narrowing {
            src_ip: addr(on.src_ip, g.src_ip)?,
            dst_ip: addr(on.dst_ip, g.dst_ip)?,
            src_port: value(on.src_port, g.src_port)?,
            dst_port: value(on.dst_port, g.dst_port)?,
            proto: if on.proto { Some(g.proto?) } else { None },
            vlan: value(on.vlan, g.vlan)?,
            vni: value(on.vni, g.vni)?,
        })
    }

    /// `f` with the narrowing's conditions added; `None` when they exclude each other.
    fn apply(&self, f: &Filter) -> Option<Filter> {
        Some(Filter {
            src_ip: both_prefixes(f.src_ip, self.src_ip)?,
            dst_ip: both_prefixes(f.dst_ip, self.dst_ip)?,
            src_port: both_ports(f.src_port, self.src_port)?,
            dst_port: both_ports(f.dst_port, self.dst_port)?,
            proto: both_equal(f.proto, self.proto)?,
            vlan: both_equal(f.vlan, self.vlan)?,
            vni: both_equal(f.vni, self.vni)?,
        })
    }

    /// `EVENT[src_ip=10.0.0.0/24,dst_port=80]`: the event and the values, in field order.
    fn name(&self, event: &str) -> String {
        let mut parts = Vec::new();
        for (field, p) in [("src_ip", self.src_ip), ("dst_ip", self.dst_ip)] {
            if let Some(p) = p {
                parts.push(format!("{field}={}/{}", p.addr, p.len));
            }
        }
        for (field, v) in [("src_port", self.src_port), ("dst_port", self.dst_port)] {
            if let Some(v) = v {
                parts.push(format!("{field}={v}"));
            }
        }
        if let Some(p) = self.proto {
            match proto_name(p) {
                Some(n) => parts.push(format!("proto={n}")),
                None => parts.push(format!("proto={p}")),
            }
        }
        if let Some(v) = self.vlan {
            parts.push(format!("vlan={v}"));
        }
        if let Some(v) = self.vni {
            parts.push(format!("vni={v}"));
        }
        if parts.is_empty() {
            event.to_string()
        } else {
            format!("{event}[{}]", parts.join(","))
        }
    }
}

/// `addr` with the bits beyond `len` cleared.
fn prefix(addr: IpAddr, len: u8) -> IpPrefix {
    let addr = match addr {
        IpAddr::V4(a) => {
            let len = len.min(32);
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
        }
        IpAddr::V6(a) => {
            let len = len.min(128);
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
        }
    };
    IpPrefix { addr, len }
}

/// Whether every address of `inner` is in `outer`.
fn contains(outer: IpPrefix, inner: IpPrefix) -> bool {
    outer.len <= inner.len
        && outer.addr.is_ipv4() == inner.addr.is_ipv4()
        && prefix(inner.addr, outer.len).addr == outer.addr
}

/// The condition matching what both match: `Some(None)` for "any",
/// `None` when nothing matches both.
fn both_prefixes(a: Option<IpPrefix>, b: Option<IpPrefix>) -> Option<Option<IpPrefix>> {
    match (a, b) {
        (None, x) | (x, None) => Some(x),
        (Some(a), Some(b)) if contains(a, b) => Some(Some(b)),
        (Some(a), Some(b)) if contains(b, a) => Some(Some(a)),
        _ => None,
    }
}

fn both_ports(a: Option<PortRange>, port: Option<u16>) -> Option<Option<PortRange>> {
    match (a, port) {
        (a, None) => Some(a),
        (None, Some(p)) => Some(Some(PortRange { lo: p, hi: p })),
        (Some(r), Some(p)) if (r.lo..=r.hi).contains(&p) => Some(Some(PortRange { lo: p, hi: p })),
        _ => None,
    }
}

fn both_equal<T: PartialEq + Copy>(a: Option<T>, b: Option<T>) -> Option<Option<T>> {
    match (a, b) {
        (None, x) | (x, None) => Some(x),
        (Some(a), Some(b)) if a == b => Some(Some(a)),
        _ => None,
    }
}

/// What to do with an instance that fired.
#[derive(Clone, Debug, PartialEq)]
pub enum Action<H> {
    /// Not installed (or its installation ends before this one starts):
    /// install it, then call [`Book::installed`].
    Install(Instance),
    /// Installed, and now lasting until `end_ns` (`None`: until removed).
    Extend { handle: H, end_ns: Option<u64> },
    /// Installed already for every window this firing asks for.
    Nothing,
}

/// The instances installed in one monitor or manager, by name, each with
/// the handle its installer gave it (a trigger id, an event id).
#[derive(Clone, Debug)]
pub struct Book<H> {
    by_name: HashMap<String, Vec<(H, Option<u64>)>>,
}

impl<H> Default for Book<H> {
    fn default() -> Self {
        Book {
            by_name: HashMap::new(),
        }
    }
}

impl<H: Copy + PartialEq> Book<H> {
    /// What `instance`, just fired, asks for: the installed instance of
    /// the same name whose span reaches its start is extended; otherwise
    /// it is installed (beside one ending before it starts, still swept).
    pub fn fired(&mut self, instance: Instance) -> Action<H> {
        let live = self.by_name.entry(instance.spec.name.clone()).or_default();
        let reaching = live
            .iter_mut()
            .find(|(_, end)| end.is_none_or(|e| e >= instance.start_ns));
        match reaching {
            None => Action::Install(instance),
            Some((handle, end)) => {
                let longer = match (*end, instance.end_ns) {
                    (None, _) => None,
                    (Some(_), None) => Some(None),
                    (Some(a), Some(b)) => (b > a).then_some(Some(b)),
                };
                match longer {
                    Some(new_end) => {
                        *end = new_end;
                        Action::Extend {
                            handle: *handle,
                            end_ns: new_end,
                        }
                    }
                    None => Action::Nothing,
                }
            }
        }
    }

    /// Records an instance installed after [`Action::Install`].
    pub fn installed(&mut self, name: &str, handle: H, end_ns: Option<u64>) {
        self.by_name
            .entry(name.to_string())
            .or_default()
            .push((handle, end_ns));
    }

    /// Forgets the instances whose last window ends by `closed_to` (every
    /// window of theirs is closed) and returns their handles, to remove.
    pub fn expired(&mut self, closed_to: u64) -> Vec<H> {
        let mut out = Vec::new();
        self.by_name.retain(|_, live| {
            live.retain(|&(h, end)| {
                let done = end.is_some_and(|e| e <= closed_to);
                if done {
                    out.push(h);
                }
                !done
            });
            !live.is_empty()
        });
        out
    }

    /// Forgets one instance (removed by its installer).
    pub fn forget(&mut self, handle: H) {
        self.by_name.retain(|_, live| {
            live.retain(|&(h, _)| h != handle);
            !live.is_empty()
        });
    }

    /// How many instances are installed.
    pub fn len(&self) -> usize {
        self.by_name.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

#[cfg(test)]
mod tests;
