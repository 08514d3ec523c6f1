//! A deliberately simple, slow, obviously correct evaluator of the event
//! semantics in `docs/semantics.md`: the judge the monitor is tested against.
//!
//! It shares no code with the monitor (`clarion-engine`); it reads only the
//! checked event model, the per-packet record and the report type. Every step
//! is done the direct way: collect all frames, compute their packet times,
//! bucket the event's packets by window and group, compute each aggregate from
//! the full list of per-packet values and evaluate the predicate.
//!
//! Events the reference cannot evaluate (TCP connection-state variables,
//! `_lastepoch` variables, division inside a per-packet expression, a zero
//! interval) are skipped by [`evaluate`]; [`unsupported`] tells why.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use clarion_lang::spec::{
    AggCall, AggFunc, ArithOp, BaseVar, CmpOp, EventSpec, Filter, Granularity, IpPrefix, PacketExpr,
    PortRange, Pred, PrefixLens, Var,
};
use clarion_report::{Completeness, GroupKey, Origin, Report, Window};
use clarion_wire::{proto, tcp_flags, FlowKey, PacketRecord};

/// The flow timeout the monitor uses unless told otherwise (60 s).
pub const DEFAULT_FLOW_TIMEOUT_NS: u64 = 60_000_000_000;

/// One captured frame, as the parser saw it.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// An IPv4 or IPv6 packet.
    Packet(PacketRecord),
    /// A frame that could not be parsed.
    Malformed { ts_ns: u64 },
    /// A frame that is not IP (ARP, LLDP, ...).
    NotIp { ts_ns: u64 },
}

impl Input {
    /// The frame's capture timestamp.
    pub fn ts_ns(&self) -> u64 {
        match self {
            Input::Packet(p) => p.ts_ns,
            Input::Malformed { ts_ns } | Input::NotIp { ts_ns } => *ts_ns,
        }
    }
}

/// What the reference needs to know beyond the events and the frames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// A flow idle for longer than this starts afresh (forgets its window scale).
    pub flow_timeout_ns: u64,
    /// Origin written into every report.
    pub host: String,
    pub worker: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            flow_timeout_ns: DEFAULT_FLOW_TIMEOUT_NS,
            host: String::new(),
            worker: 0,
        }
    }
}

/// Why the reference cannot evaluate `event`, or `None` when it can.
///
/// [`evaluate`] skips such events (the monitor refuses them at install).
pub fn unsupported(event: &EventSpec) -> Option<String> {
    if event.interval_ns == 0 {
        return Some("interval is zero".into());
    }
    if let Some(v) = event.unsupported_variables().first() {
        return Some(format!("variable `{v}` is not computed yet"));
    }
    let mut problem = None;
    event.predicate.visit_vars(&mut |v| {
        // `X_lastepoch` is connection state too: no per-packet meaning here.
        if v.last_epoch && problem.is_none() {
            problem = Some(format!("variable `{v}` is not computed yet"));
        }
    });
    if problem.is_none() && has_state(&event.predicate) {
        problem = Some("bare connection-state variable in the predicate".into());
    }
    if problem.is_none() {
        event.predicate.visit_aggs(&mut |a| {
            if problem.is_none() && has_division(&a.arg) {
                problem = Some("division inside a per-packet expression".into());
            }
        });
    }
    problem
}

fn has_state(p: &Pred) -> bool {
    match p {
        Pred::State(_) => true,
        Pred::Num(_) | Pred::Agg(_) => false,
        Pred::Neg(x) | Pred::Not(x) => has_state(x),
        Pred::Arith(_, l, r) | Pred::Cmp(_, l, r) | Pred::And(l, r) | Pred::Or(l, r) => {
            has_state(l) || has_state(r)
        }
    }
}

fn has_division(e: &PacketExpr) -> bool {
    match e {
        PacketExpr::Arith(ArithOp::Div, _, _) => true,
        PacketExpr::Int(_) | PacketExpr::Var(_) => false,
        PacketExpr::Neg(x) | PacketExpr::Not(x) => has_division(x),
        PacketExpr::Arith(_, l, r)
        | PacketExpr::Cmp(_, l, r)
        | PacketExpr::And(l, r)
        | PacketExpr::Or(l, r) => has_division(l) || has_division(r),
    }
}

/// Every report the events produce over the frames, in canonical order
/// ([`Report::sort_key`]). Events that [`unsupported`] refuses are skipped.
pub fn evaluate(events: &[EventSpec], inputs: &[Input], config: &Config) -> Vec<Report> {
    let frames = packet_times(inputs);
    let (Some(first_time), Some(last_time)) = (frames.first().map(|f| f.time), frames.last().map(|f| f.time))
    else {
        return Vec::new();
    };
    let packets = packets_with_rwnd(&frames, config.flow_timeout_ns);
    let origin = Origin {
        host: config.host.clone(),
        worker: config.worker,
    };

    // Per interval length: the completeness of every window on its grid that saw a frame.
    let mut completeness_of: HashMap<u64, BTreeMap<Window, Completeness>> = HashMap::new();
    let mut reports = Vec::new();
    for event in events {
        if unsupported(event).is_some() {
            continue;
        }
        let mut buckets: BTreeMap<(Window, GroupKey), Vec<&Packet>> = BTreeMap::new();
        for p in &packets {
            if event.filters.iter().any(|f| filter_matches(f, &p.record.key)) {
                let window = window_of(p.time, event.interval_ns);
                let group = group_key(&event.granularity, &p.record.key);
                buckets.entry((window, group)).or_default().push(p);
            }
        }
        let aggs: Vec<(String, AggCall)> = event
            .aggregates()
            .into_iter()
            .map(|a| (a.to_string(), a))
            .collect();
        for ((window, group), members) in buckets {
            if !truthy(eval_pred(&event.predicate, &members)) {
                continue;
            }
            let values = aggs
                .iter()
                .map(|(text, a)| (text.clone(), aggregate(a, &members)))
                .collect();
            let completeness = completeness_of
                .entry(event.interval_ns)
                .or_insert_with(|| completeness_grid(&frames, event.interval_ns, (first_time, last_time)))
                .get(&window)
                .copied()
                .unwrap_or_default();
            reports.push(Report {
                event: event.name.clone(),
                window,
                group,
                values,
                origin: origin.clone(),
                completeness,
            });
        }
    }
    reports.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    reports
}

// ---------------------------------------------------------------- time

/// A frame with its packet time (running maximum of timestamps).
struct Frame<'a> {
    input: &'a Input,
    time: u64,
    /// Its own timestamp is earlier than one seen before it.
    out_of_order: bool,
}

fn packet_times(inputs: &[Input]) -> Vec<Frame<'_>> {
    let mut max_so_far: Option<u64> = None;
    let mut out = Vec::with_capacity(inputs.len());
    for input in inputs {
        let ts = input.ts_ns();
        let out_of_order = max_so_far.is_some_and(|m| ts < m);
        let time = max_so_far.map_or(ts, |m| m.max(ts));
        max_so_far = Some(time);
        out.push(Frame {
            input,
            time,
            out_of_order,
        });
    }
    out
}

/// The window `[k·I, (k+1)·I)` containing `t`.
fn window_of(t: u64, interval: u64) -> Window {
    let start = t / interval * interval;
    Window {
        start_ns: start,
        // Only saturates for times within one interval of u64::MAX.
        end_ns: start.saturating_add(interval),
    }
}

/// Counts of all frames (not only an event's) by the window of `interval` their packet time falls in.
/// A window is complete when the input neither started nor ended inside it.
fn completeness_grid(
    frames: &[Frame],
    interval: u64,
    (first_time, last_time): (u64, u64),
) -> BTreeMap<Window, Completeness> {
    let mut grid: BTreeMap<Window, Completeness> = BTreeMap::new();
    for f in frames {
        let w = window_of(f.time, interval);
        let c = grid.entry(w).or_insert(Completeness {
            complete: first_time <= w.start_ns && w.end_ns <= last_time,
            ..Completeness::default()
        });
        match f.input {
            Input::Packet(_) => c.packets += 1,
            Input::Malformed { .. } => c.malformed += 1,
            Input::NotIp { .. } => c.not_ip += 1,
        }
        if f.out_of_order {
            c.out_of_order += 1;
        }
    }
    grid
}

// ---------------------------------------------------------------- flows

/// An IP packet with its packet time and its `rwnd` value (None when undefined).
struct Packet<'a> {
    record: &'a PacketRecord,
    time: u64,
    rwnd: Option<i64>,
}

/// What the reference remembers about one flow (exact key, one direction) in its current life.
struct FlowLife {
    last_time: u64,
    wscale: Option<u8>,
}

fn packets_with_rwnd<'a>(frames: &[Frame<'a>], flow_timeout_ns: u64) -> Vec<Packet<'a>> {
    let mut flows: HashMap<FlowKey, FlowLife> = HashMap::new();
    let mut out = Vec::new();
    for f in frames {
        let Input::Packet(record) = f.input else {
            continue;
        };
        let life = flows.entry(record.key).or_insert(FlowLife {
            last_time: f.time,
            wscale: None,
        });
        if f.time.saturating_sub(life.last_time) > flow_timeout_ns {
            // Idle longer than the timeout: the flow starts afresh.
            life.wscale = None;
        }
        life.last_time = f.time;
        let rwnd = match record.tcp {
            Some(tcp) if record.key.proto == proto::TCP => {
                if tcp.flags & tcp_flags::SYN != 0 {
                    // The latest SYN decides: one without the option announces no scale.
                    life.wscale = tcp.wscale;
                    // RFC 7323: the window of a SYN segment is never scaled.
                    Some(i64::from(tcp.window))
                } else {
                    // The record promises 0..=14; clamp anyway so a hand-built record cannot overflow.
                    let shift = life.wscale.unwrap_or(0).min(14);
                    Some(i64::from(tcp.window) << shift)
                }
            }
            _ => None,
        };
        out.push(Packet {
            record,
            time: f.time,
            rwnd,
        });
    }
    out
}

// ---------------------------------------------------------------- filters and groups

fn family_bits(v6: bool) -> u8 {
    if v6 {
        128
    } else {
        32
    }
}

/// The address as a 128-bit number with its `len` leading bits kept (IPv4 in the top 32 bits).
fn masked_bits(addr: IpAddr, len: u8) -> u128 {
    let (bits, width) = match addr {
        IpAddr::V4(a) => (u128::from(u32::from(a)) << 96, 32),
        IpAddr::V6(a) => (u128::from(a), 128),
    };
    let keep = u32::from(len.min(width));
    if keep == 0 {
        0
    } else {
        bits & (u128::MAX << (128 - keep))
    }
}

fn masked_addr(addr: IpAddr, len: u8) -> IpAddr {
    let bits = masked_bits(addr, len);
    match addr {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from((bits >> 96) as u32)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(bits)),
    }
}

fn prefix_matches(p: &IpPrefix, addr: IpAddr) -> bool {
    addr.is_ipv4() == p.addr.is_ipv4() && masked_bits(addr, p.len) == masked_bits(p.addr, p.len)
}

fn port_matches(r: &PortRange, key: &FlowKey, port: u16) -> bool {
    key.has_ports() && r.lo <= port && port <= r.hi
}

/// An absent condition matches anything.
fn holds<T>(cond: Option<T>, test: impl FnOnce(T) -> bool) -> bool {
    match cond {
        None => true,
        Some(c) => test(c),
    }
}

fn filter_matches(f: &Filter, key: &FlowKey) -> bool {
    holds(f.src_ip.as_ref(), |p| prefix_matches(p, key.src_addr()))
        && holds(f.dst_ip.as_ref(), |p| prefix_matches(p, key.dst_addr()))
        && holds(f.src_port.as_ref(), |r| port_matches(r, key, key.src_port))
        && holds(f.dst_port.as_ref(), |r| port_matches(r, key, key.dst_port))
        && holds(f.proto, |p| p == key.proto)
        && holds(f.vlan, |v| key.has_vlan() && key.vlan == v)
}

fn group_addr(lens: PrefixLens, addr: IpAddr) -> (IpAddr, u8) {
    let len = if addr.is_ipv4() { lens.v4 } else { lens.v6 };
    let len = len.min(family_bits(addr.is_ipv6()));
    (masked_addr(addr, len), len)
}

fn group_key(g: &Granularity, key: &FlowKey) -> GroupKey {
    let port = |p: u16| key.has_ports().then_some(p);
    GroupKey {
        src_ip: g.src_ip.map(|lens| group_addr(lens, key.src_addr())),
        dst_ip: g.dst_ip.map(|lens| group_addr(lens, key.dst_addr())),
        src_port: g.src_port.then(|| port(key.src_port)),
        dst_port: g.dst_port.then(|| port(key.dst_port)),
        proto: g.proto.then_some(key.proto),
        vlan: g.vlan.then(|| key.has_vlan().then_some(key.vlan)),
    }
}

// ---------------------------------------------------------------- per-packet values

fn var_value(v: Var, p: &Packet) -> Option<i64> {
    let r = p.record;
    let tcp = r.tcp.filter(|_| r.key.proto == proto::TCP);
    match v.base {
        BaseVar::Packets => Some(1),
        BaseVar::Size => Some(i64::from(r.size)),
        BaseVar::Volume => Some(i64::from(r.volume)),
        BaseVar::Ttl => Some(i64::from(r.ttl)),
        BaseVar::Ecn => Some(i64::from(r.ecn)),
        BaseVar::TcpFlags => tcp.map(|t| i64::from(t.flags)),
        BaseVar::Rwnd => p.rwnd,
        // Refused by `unsupported` before evaluation.
        BaseVar::IsLost | BaseVar::IsBurst | BaseVar::Rtt | BaseVar::Seq | BaseVar::Ack | BaseVar::Dup => {
            None
        }
    }
}

fn bool_int(b: bool) -> i64 {
    i64::from(b)
}

/// The expression's value on the packet; `None` when any variable it reads is undefined.
fn eval_packet(e: &PacketExpr, p: &Packet) -> Option<i64> {
    // Every operand is evaluated (no short-circuit): one undefined variable
    // anywhere makes the whole expression undefined.
    Some(match e {
        PacketExpr::Int(n) => *n,
        PacketExpr::Var(v) => var_value(*v, p)?,
        PacketExpr::Neg(x) => eval_packet(x, p)?.saturating_neg(),
        PacketExpr::Not(x) => bool_int(eval_packet(x, p)? == 0),
        PacketExpr::Arith(op, l, r) => {
            let (l, r) = (eval_packet(l, p)?, eval_packet(r, p)?);
            match op {
                ArithOp::Add => l.saturating_add(r),
                ArithOp::Sub => l.saturating_sub(r),
                ArithOp::Mul => l.saturating_mul(r),
                // Refused by `unsupported` before evaluation.
                ArithOp::Div => return None,
            }
        }
        PacketExpr::Cmp(op, l, r) => {
            let (l, r) = (eval_packet(l, p)?, eval_packet(r, p)?);
            bool_int(match op {
                CmpOp::Lt => l < r,
                CmpOp::Le => l <= r,
                CmpOp::Gt => l > r,
                CmpOp::Ge => l >= r,
                CmpOp::Eq => l == r,
                CmpOp::Ne => l != r,
            })
        }
        PacketExpr::And(l, r) => {
            let (l, r) = (eval_packet(l, p)?, eval_packet(r, p)?);
            bool_int(l != 0 && r != 0)
        }
        PacketExpr::Or(l, r) => {
            let (l, r) = (eval_packet(l, p)?, eval_packet(r, p)?);
            bool_int(l != 0 || r != 0)
        }
    })
}

// ---------------------------------------------------------------- aggregates

/// The aggregate over the group's packets, as the predicate sees it (`f64`, NaN = undefined).
fn aggregate(a: &AggCall, members: &[&Packet]) -> f64 {
    let xs: Vec<i64> = members.iter().filter_map(|p| eval_packet(&a.arg, p)).collect();
    let n = xs.len();
    let sum: i128 = xs.iter().map(|&x| i128::from(x)).sum();
    match a.func {
        AggFunc::Sum => sum as f64,
        AggFunc::Count => xs.iter().filter(|&&x| x != 0).count() as f64,
        AggFunc::Min => xs.iter().min().map_or(f64::NAN, |&m| m as f64),
        AggFunc::Max => xs.iter().max().map_or(f64::NAN, |&m| m as f64),
        AggFunc::Avg if n == 0 => f64::NAN,
        AggFunc::Avg => sum as f64 / n as f64,
        AggFunc::Stddev if n == 0 => f64::NAN,
        AggFunc::Stddev => stddev(&xs, sum),
    }
}

/// `sqrt(N / n²)` with `N = n·Σx² − (Σx)²` exact.
///
/// N is computed as `Σ (n·xᵢ − S)² / n`, which equals it exactly (expand the
/// square: n²Σx² − 2nS² + nS² = n·N) and is a sum of squares, so it cannot go
/// negative. NaN only if an intermediate leaves 128 bits (values near the
/// i64 limits), where the contract's exact N does not fit either.
fn stddev(xs: &[i64], sum: i128) -> f64 {
    let exact = || -> Option<(u128, u128)> {
        let n = i128::try_from(xs.len()).ok()?;
        let mut n_times_big_n: u128 = 0;
        for &x in xs {
            let d = n.checked_mul(i128::from(x))?.checked_sub(sum)?.unsigned_abs();
            n_times_big_n = n_times_big_n.checked_add(d.checked_mul(d)?)?;
        }
        let n = n.unsigned_abs();
        Some((n_times_big_n.checked_div(n)?, n.checked_mul(n)?))
    };
    match exact() {
        Some((big_n, n_sq)) => (big_n as f64 / n_sq as f64).sqrt(),
        None => f64::NAN,
    }
}

// ---------------------------------------------------------------- predicate

fn truthy(v: f64) -> bool {
    v != 0.0 && !v.is_nan()
}

fn bool_f64(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

fn eval_pred(p: &Pred, members: &[&Packet]) -> f64 {
    match p {
        Pred::Num(x) => *x,
        Pred::Agg(a) => aggregate(a, members),
        // Refused by `unsupported` before evaluation.
        Pred::State(_) => f64::NAN,
        Pred::Neg(x) => -eval_pred(x, members),
        Pred::Not(x) => bool_f64(!truthy(eval_pred(x, members))),
        Pred::Arith(op, l, r) => {
            let (l, r) = (eval_pred(l, members), eval_pred(r, members));
            match op {
                ArithOp::Add => l + r,
                ArithOp::Sub => l - r,
                ArithOp::Mul => l * r,
                ArithOp::Div if r == 0.0 => f64::NAN,
                ArithOp::Div => l / r,
            }
        }
        Pred::Cmp(op, l, r) => {
            let (l, r) = (eval_pred(l, members), eval_pred(r, members));
            if l.is_nan() || r.is_nan() {
                return 0.0;
            }
            bool_f64(match op {
                CmpOp::Lt => l < r,
                CmpOp::Le => l <= r,
                CmpOp::Gt => l > r,
                CmpOp::Ge => l >= r,
                CmpOp::Eq => l == r,
                CmpOp::Ne => l != r,
            })
        }
        Pred::And(l, r) => {
            let (l, r) = (eval_pred(l, members), eval_pred(r, members));
            bool_f64(truthy(l) && truthy(r))
        }
        Pred::Or(l, r) => {
            let (l, r) = (eval_pred(l, members), eval_pred(r, members));
            bool_f64(truthy(l) || truthy(r))
        }
    }
}

#[cfg(test)]
mod tests;
