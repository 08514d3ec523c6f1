//! A deliberately simple, slow, obviously correct evaluator of the event
//! semantics in `docs/semantics.md`: the judge the monitor is tested against.
//!
//! It shares no code with the monitor (`clarion-engine`); it reads only the
//! checked event model, the per-packet record and the report type. Every step
//! is done the direct way: collect all frames, compute their packet times,
//! bucket the event's packets by window and group, compute each aggregate from
//! the full list of per-packet values and evaluate the predicate.
//!
//! The per-flow variables (`rwnd`, `is_burst`, and the TCP connection state
//! `is_lost`, `seq`, `ack`, `dup` and RTT samples) come from one replay of
//! all frames in input order (`replay`), written straight from the
//! numbered steps of the contract: it gives every packet its values and
//! lists every RTT sample with its flow and time. Samples then join their
//! flow's groups beside the packets.
//!
//! Events the reference cannot evaluate (division or `X_lastepoch` inside a
//! per-packet expression, which the checker refuses; a zero interval) are skipped by
//! [`evaluate`]; [`unsupported`] tells why.
//!
//! An event's scope plays no part here: a spec is evaluated over whatever
//! frames it is given, so a network-wide (`across hosts`) event over all
//! hosts' frames together is the network-wide truth the manager's decision
//! is held to.

mod drill;
pub mod flows;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use clarion_lang::spec::{
    AggCall, AggFunc, ArithOp, BaseVar, CmpOp, EventSpec, Filter, Granularity, IpPrefix, PacketExpr,
    PortRange, Pred, PrefixLens, Var,
};
use clarion_report::{Completeness, GroupKey, Name, Origin, Report, Window};
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
    /// A flow idle for longer than this starts afresh (forgets its window
    /// scale, its previous packet for `is_burst` and its TCP state); a
    /// reverse flow idle for longer is not alive and ignores acks.
    pub flow_timeout_ns: u64,
    /// `is_burst` is 1 when the flow's previous packet (in its current life)
    /// arrived at most this long before (packet times). Default 1 ms.
    pub burst_gap_ns: u64,
    /// Most first transmissions listed per flow awaiting their ack (default
    /// 1024); a first transmission that finds the list full is not listed
    /// and so gives no RTT sample.
    pub max_first_transmissions: usize,
    /// Origin written into every report.
    pub host: String,
    pub worker: u32,
}

/// The burst gap the monitor uses unless told otherwise (1 ms).
pub const DEFAULT_BURST_GAP_NS: u64 = 1_000_000;

/// The length of a flow's list of first transmissions unless told otherwise.
pub const DEFAULT_MAX_FIRST_TRANSMISSIONS: usize = 1024;

impl Default for Config {
    fn default() -> Self {
        Config {
            flow_timeout_ns: DEFAULT_FLOW_TIMEOUT_NS,
            burst_gap_ns: DEFAULT_BURST_GAP_NS,
            max_first_transmissions: DEFAULT_MAX_FIRST_TRANSMISSIONS,
            host: String::new(),
            worker: 0,
        }
    }
}

/// Why the reference cannot evaluate `event`, or `None` when it can.
///
/// Every variable, bare state value and `X_lastepoch` is evaluated; only
/// what the checker never produces is refused. [`evaluate`] skips such
/// events.
pub fn unsupported(event: &EventSpec) -> Option<String> {
    if event.interval_ns == 0 {
        return Some("interval is zero".into());
    }
    let mut problem = None;
    event.predicate.visit_aggs(&mut |a| {
        if problem.is_none() && has_division(&a.arg) {
            problem = Some("division inside a per-packet expression".into());
        }
        a.arg.visit_vars(&mut |v| {
            if problem.is_none() && v.last_epoch {
                problem = Some(format!("`{v}` inside an aggregate"));
            }
        });
    });
    problem
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

/// An event's packets and RTT samples with one group key in one window.
/// It exists only when it has at least one packet.
#[derive(Default)]
struct Bucket<'a> {
    packets: Vec<&'a Packet<'a>>,
    samples: Vec<&'a RttSample>,
}

/// What the predicate of one group in one window reads.
struct GroupWindow<'a> {
    this: &'a Bucket<'a>,
    /// The same group in the event's previous window, if it existed there.
    previous: Option<&'a Bucket<'a>>,
}

/// Every report the events produce over the frames, in canonical order
/// ([`Report::sort_key`]), drill-down instances included. Events that
/// [`unsupported`] refuses are skipped.
pub fn evaluate(events: &[EventSpec], inputs: &[Input], config: &Config) -> Vec<Report> {
    let frames = packet_times(inputs);
    let (Some(first_time), Some(last_time)) = (frames.first().map(|f| f.time), frames.last().map(|f| f.time))
    else {
        return Vec::new();
    };
    let (packets, samples) = replay(&frames, config);
    let run = Run {
        origin: Origin {
            host: config.host.clone().into(),
            worker: config.worker,
        },
        frames: &frames,
        span: (first_time, last_time),
        packets: &packets,
        samples: &samples,
        completeness_of: RefCell::new(HashMap::new()),
    };
    let mut reports = Vec::new();
    for event in events.iter().filter(|e| !e.on_demand) {
        reports.extend(run.event_reports(event, &event.name, &|_, _| true));
    }
    let instances = drill::instance_reports(&run, events, &reports);
    reports.extend(instances);
    reports.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    reports
}

/// One evaluation's frames and per-packet values, shared by its events.
struct Run<'a> {
    origin: Origin,
    frames: &'a [Frame<'a>],
    /// The first and last packet times.
    span: (u64, u64),
    packets: &'a [Packet<'a>],
    samples: &'a [RttSample],
    /// Per interval length: the completeness of every window on its grid that saw a frame.
    completeness_of: RefCell<HashMap<u64, BTreeMap<Window, Completeness>>>,
}

impl Run<'_> {
    /// The reports of `event`, named `name`, over the packets (and RTT
    /// samples) of its filters that `admits` takes, by flow and packet time.
    fn event_reports(
        &self,
        event: &EventSpec,
        name: &str,
        admits: &dyn Fn(&FlowKey, u64) -> bool,
    ) -> Vec<Report> {
        if unsupported(event).is_some() {
            return Vec::new();
        }
        let matches = |key: &FlowKey, time: u64| {
            event.filters.iter().any(|f| filter_matches(f, key)) && admits(key, time)
        };
        let place = |time: u64, key: &FlowKey| {
            (
                window_of(time, event.interval_ns),
                group_key(&event.granularity, key),
            )
        };
        let mut buckets: BTreeMap<(Window, GroupKey), Bucket> = BTreeMap::new();
        for p in self.packets {
            if matches(&p.record.key, p.time) {
                buckets
                    .entry(place(p.time, &p.record.key))
                    .or_default()
                    .packets
                    .push(p);
            }
        }
        // A sample joins its flow's group only where that group exists (has a packet).
        for s in self.samples {
            if matches(&s.flow, s.time) {
                if let Some(b) = buckets.get_mut(&place(s.time, &s.flow)) {
                    b.samples.push(s);
                }
            }
        }
        let aggs: Vec<(String, AggCall)> = event
            .aggregates()
            .into_iter()
            .map(|a| (a.to_string(), a))
            .collect();
        let states: Vec<(String, Var)> = event
            .state_values()
            .into_iter()
            .map(|v| (v.to_string(), v))
            .collect();
        let mut reports = Vec::new();
        for ((window, group), bucket) in &buckets {
            let previous = window
                .start_ns
                .checked_sub(event.interval_ns)
                .map(|start| {
                    (
                        Window {
                            start_ns: start,
                            end_ns: window.start_ns,
                        },
                        *group,
                    )
                })
                .and_then(|k| buckets.get(&k));
            let gw = GroupWindow {
                this: bucket,
                previous,
            };
            if !truthy(eval_pred(&event.predicate, &gw)) {
                continue;
            }
            let values = aggs
                .iter()
                .map(|(text, a)| (Name::from(text.as_str()), aggregate(a, bucket)))
                .chain(
                    states
                        .iter()
                        .map(|(text, v)| (Name::from(text.as_str()), state_value(*v, &gw))),
                )
                .collect();
            let completeness = self
                .completeness_of
                .borrow_mut()
                .entry(event.interval_ns)
                .or_insert_with(|| completeness_grid(self.frames, event.interval_ns, self.span))
                .get(window)
                .copied()
                .unwrap_or_default();
            reports.push(Report {
                capture: None,
                missing_hosts: Box::default(),
                event: name.to_string().into(),
                window: *window,
                group: *group,
                values,
                origin: self.origin.clone(),
                completeness,
            });
        }
        reports
    }
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

/// An IP packet with its packet time and its per-flow values (`None` when undefined).
struct Packet<'a> {
    record: &'a PacketRecord,
    time: u64,
    rwnd: Option<i64>,
    is_burst: i64,
    /// `is_lost`, `seq`, `ack`, `dup`: on TCP packets with a TCP header.
    tcp: Option<TcpValues>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TcpValues {
    is_lost: i64,
    seq: i64,
    ack: i64,
    dup: i64,
}

/// An RTT sample: it belongs to the flow whose data was acknowledged, at
/// the packet time of the acknowledging packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RttSample {
    /// The flow whose data was acknowledged.
    pub flow: FlowKey,
    /// Packet time of the acknowledgement.
    pub time: u64,
    /// Nanoseconds.
    pub rtt: i64,
}

/// Every RTT sample the inputs give, in input order (`docs/semantics.md`,
/// *RTT samples*), whether or not an event would count it: for validating
/// the definition against other tools.
pub fn rtt_samples(inputs: &[Input], config: &Config) -> Vec<RttSample> {
    replay(&packet_times(inputs), config).1
}

/// What the reference remembers about one flow (exact key, one direction) in its current life.
struct FlowLife {
    /// Packet time of the flow's latest packet.
    last_time: u64,
    wscale: Option<u8>,
    /// TCP connection state, from the first TCP packet with a header in this life.
    tcp: Option<Connection>,
}

/// TCP connection state of one flow direction: sequence numbers are
/// relative to `isn`, unwrapped into 64 bits.
struct Connection {
    isn: u32,
    snd_max: i64,
    snd_una: i64,
    dup: i64,
    mss: i64,
    /// First transmissions awaiting their ack, in sending order.
    sent: Vec<FirstTransmission>,
}

struct FirstTransmission {
    start: i64,
    end: i64,
    time: u64,
    retransmitted: bool,
}

impl Connection {
    fn new(isn: u32) -> Self {
        Connection {
            isn,
            snd_max: 0,
            snd_una: 0,
            dup: 0,
            mss: 0,
            sent: Vec::new(),
        }
    }

    /// `snd_max + (x − (isn + snd_max mod 2³²))` with the difference taken as a signed 32-bit number.
    fn unwrap(&self, x: u32) -> i64 {
        let here = self.isn.wrapping_add((self.snd_max.rem_euclid(1 << 32)) as u32);
        self.snd_max + i64::from(x.wrapping_sub(here) as i32)
    }
}

fn has(flags: u8, bit: u8) -> bool {
    flags & bit != 0
}

/// Replays every frame in input order, keeping each flow's life, window
/// scale and TCP connection state: every IP packet with its values, and
/// every RTT sample.
fn replay<'a>(frames: &[Frame<'a>], config: &Config) -> (Vec<Packet<'a>>, Vec<RttSample>) {
    let timeout = config.flow_timeout_ns;
    let mut flows: HashMap<FlowKey, FlowLife> = HashMap::new();
    let mut packets = Vec::new();
    let mut samples = Vec::new();
    for f in frames {
        let Input::Packet(record) = f.input else {
            continue;
        };
        let t = f.time;
        let key = record.key;

        // Flow lifetime: idle longer than the timeout, the flow starts afresh.
        let previous_time = match flows.get(&key) {
            Some(life) if t - life.last_time <= timeout => Some(life.last_time),
            _ => None,
        };
        if previous_time.is_none() {
            flows.insert(
                key,
                FlowLife {
                    last_time: t,
                    wscale: None,
                    tcp: None,
                },
            );
        }
        let is_burst = i64::from(previous_time.is_some_and(|prev| t - prev <= config.burst_gap_ns));
        let life = flows.get_mut(&key).expect("inserted above");
        life.last_time = t;

        let Some(tcp) = record.tcp.filter(|_| key.proto == proto::TCP) else {
            packets.push(Packet {
                record,
                time: t,
                rwnd: None,
                is_burst,
                tcp: None,
            });
            continue;
        };

        // rwnd.
        let rwnd = if has(tcp.flags, tcp_flags::SYN) {
            // The latest SYN decides: one without the option announces no scale.
            life.wscale = tcp.wscale;
            // RFC 7323: the window of a SYN segment is never scaled.
            i64::from(tcp.window)
        } else {
            // The record promises 0..=14; clamp anyway so a hand-built record cannot overflow.
            let shift = life.wscale.unwrap_or(0).min(14);
            i64::from(tcp.window) << shift
        };

        // Step 1: the connection starts with the first packet of the life, or anew with a SYN of another ISN.
        let conn = life.tcp.get_or_insert_with(|| Connection::new(tcp.seq));
        if has(tcp.flags, tcp_flags::SYN) && tcp.seq != conn.isn {
            *conn = Connection::new(tcp.seq);
        }
        // Step 2.
        let payload = i64::from(record.volume);
        let len =
            payload + i64::from(has(tcp.flags, tcp_flags::SYN)) + i64::from(has(tcp.flags, tcp_flags::FIN));
        let start = conn.unwrap(tcp.seq);
        let end = start + len;
        // Step 3.
        let probe = !has(tcp.flags, tcp_flags::SYN)
            && !has(tcp.flags, tcp_flags::FIN)
            && payload == 1
            && end == conn.snd_max;
        let is_lost = len > 0 && start < conn.snd_max && !probe;
        // Step 4.
        if len > 0 && start >= conn.snd_max && conn.sent.len() < config.max_first_transmissions {
            conn.sent.push(FirstTransmission {
                start,
                end,
                time: t,
                retransmitted: false,
            });
        }
        if is_lost {
            for s in conn.sent.iter_mut() {
                if s.start < end && start < s.end {
                    s.retransmitted = true;
                }
            }
        }
        // Step 5.
        conn.snd_max = conn.snd_max.max(end);
        conn.mss = conn.mss.max(payload);

        // Step 6: the ack is for the reverse flow, if it is alive and has TCP state.
        if has(tcp.flags, tcp_flags::ACK) {
            let reverse = key.reversed();
            if let Some(r_life) = flows.get_mut(&reverse) {
                let alive = t - r_life.last_time <= timeout;
                if let (true, Some(r)) = (alive, r_life.tcp.as_mut()) {
                    let a = r.unwrap(tcp.ack);
                    if a > r.snd_una {
                        let (acked, waiting): (Vec<_>, Vec<_>) = r.sent.drain(..).partition(|s| s.end <= a);
                        r.sent = waiting;
                        if let Some(latest) = acked.iter().map(|s| s.time).max() {
                            // Karn's rule: no sample when any acked segment was sent again.
                            if acked.iter().all(|s| !s.retransmitted) {
                                samples.push(RttSample {
                                    flow: reverse,
                                    time: t,
                                    rtt: i64::try_from(t - latest).unwrap_or(i64::MAX),
                                });
                            }
                        }
                        r.dup = (r.dup - (a - r.snd_una)).max(0);
                        r.snd_una = a;
                    } else if a == r.snd_una
                        && payload == 0
                        && !has(tcp.flags, tcp_flags::SYN | tcp_flags::FIN | tcp_flags::RST)
                        && r.snd_max > r.snd_una
                    {
                        r.dup = r.dup.saturating_add(r.mss);
                    }
                }
            }
        }

        // Step 7: the flow's own state after all of the above (the reverse
        // flow is the flow itself when addresses and ports are symmetric).
        let conn = flows
            .get(&key)
            .and_then(|l| l.tcp.as_ref())
            .expect("started in step 1");
        packets.push(Packet {
            record,
            time: t,
            rwnd: Some(rwnd),
            is_burst,
            tcp: Some(TcpValues {
                is_lost: i64::from(is_lost),
                seq: conn.snd_max,
                ack: conn.snd_una,
                dup: conn.dup,
            }),
        });
    }
    (packets, samples)
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
        && holds(f.vni, |v| key.has_vni() && key.vni == v)
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
        vni: g.vni.then(|| key.has_vni().then_some(key.vni)),
    }
}

// ---------------------------------------------------------------- per-packet values

/// The variable's value on the packet; `None` when undefined there. `rtt` is never defined on packets.
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
        BaseVar::IsBurst => Some(p.is_burst),
        BaseVar::IsLost => p.tcp.map(|t| t.is_lost),
        BaseVar::Seq => p.tcp.map(|t| t.seq),
        BaseVar::Ack => p.tcp.map(|t| t.ack),
        BaseVar::Dup => p.tcp.map(|t| t.dup),
        BaseVar::Rtt => None,
    }
}

/// The variable's value on an RTT sample: only `rtt` is defined there.
fn sample_var_value(v: Var, s: &RttSample) -> Option<i64> {
    (v.base == BaseVar::Rtt).then_some(s.rtt)
}

fn reads_rtt(e: &PacketExpr) -> bool {
    let mut reads = false;
    e.visit_vars(&mut |v| reads |= v.base == BaseVar::Rtt);
    reads
}

fn bool_int(b: bool) -> i64 {
    i64::from(b)
}

/// The expression's value on a packet; `None` when any variable it reads is undefined there.
fn eval_packet(e: &PacketExpr, p: &Packet) -> Option<i64> {
    eval_expr(e, &|v| var_value(v, p))
}

/// The expression's value on an RTT sample. Only expressions that read
/// `rtt` see samples (`sum(1)` counts packets, not samples), and any other
/// variable is undefined there.
fn eval_sample(e: &PacketExpr, s: &RttSample) -> Option<i64> {
    if !reads_rtt(e) {
        return None;
    }
    eval_expr(e, &|v| sample_var_value(v, s))
}

/// The expression with variables looked up in `value`; `None` when any of them is undefined.
fn eval_expr(e: &PacketExpr, value: &dyn Fn(Var) -> Option<i64>) -> Option<i64> {
    // Every operand is evaluated (no short-circuit): one undefined variable
    // anywhere makes the whole expression undefined.
    Some(match e {
        PacketExpr::Int(n) => *n,
        PacketExpr::Var(v) => value(*v)?,
        PacketExpr::Neg(x) => eval_expr(x, value)?.saturating_neg(),
        PacketExpr::Not(x) => bool_int(eval_expr(x, value)? == 0),
        PacketExpr::Arith(op, l, r) => {
            let (l, r) = (eval_expr(l, value)?, eval_expr(r, value)?);
            match op {
                ArithOp::Add => l.saturating_add(r),
                ArithOp::Sub => l.saturating_sub(r),
                ArithOp::Mul => l.saturating_mul(r),
                // Refused by `unsupported` before evaluation.
                ArithOp::Div => return None,
            }
        }
        PacketExpr::Cmp(op, l, r) => {
            let (l, r) = (eval_expr(l, value)?, eval_expr(r, value)?);
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
            let (l, r) = (eval_expr(l, value)?, eval_expr(r, value)?);
            bool_int(l != 0 && r != 0)
        }
        PacketExpr::Or(l, r) => {
            let (l, r) = (eval_expr(l, value)?, eval_expr(r, value)?);
            bool_int(l != 0 || r != 0)
        }
    })
}

// ---------------------------------------------------------------- values outside aggregates

/// `X` for a group in a window: its value on the last packet (or sample, for
/// `rtt`) on which it is defined, latest packet time first, then largest value.
fn last_value(base: BaseVar, b: &Bucket) -> Option<i64> {
    let v = Var {
        base,
        last_epoch: false,
    };
    let on_packets = b
        .packets
        .iter()
        .filter_map(|p| var_value(v, p).map(|x| (p.time, x)));
    let on_samples = b
        .samples
        .iter()
        .filter_map(|s| sample_var_value(v, s).map(|x| (s.time, x)));
    on_packets.chain(on_samples).max().map(|(_, x)| x)
}

/// A variable read outside an aggregate, as the predicate sees it (NaN = undefined).
fn state_value(v: Var, gw: &GroupWindow) -> f64 {
    let bucket = if v.last_epoch { gw.previous } else { Some(gw.this) };
    bucket
        .and_then(|b| last_value(v.base, b))
        .map_or(f64::NAN, |x| x as f64)
}

// ---------------------------------------------------------------- aggregates

/// The aggregate over the group's packets and RTT samples, as the predicate sees it (`f64`, NaN = undefined).
fn aggregate(a: &AggCall, b: &Bucket) -> f64 {
    let on_packets = b.packets.iter().filter_map(|p| eval_packet(&a.arg, p));
    let on_samples = b.samples.iter().filter_map(|s| eval_sample(&a.arg, s));
    let xs: Vec<i64> = on_packets.chain(on_samples).collect();
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

fn eval_pred(p: &Pred, gw: &GroupWindow) -> f64 {
    match p {
        Pred::Num(x) => *x,
        Pred::Agg(a) => aggregate(a, gw.this),
        Pred::State(v) => state_value(*v, gw),
        Pred::Neg(x) => -eval_pred(x, gw),
        Pred::Not(x) => bool_f64(!truthy(eval_pred(x, gw))),
        Pred::Arith(op, l, r) => {
            let (l, r) = (eval_pred(l, gw), eval_pred(r, gw));
            match op {
                ArithOp::Add => l + r,
                ArithOp::Sub => l - r,
                ArithOp::Mul => l * r,
                ArithOp::Div if r == 0.0 => f64::NAN,
                ArithOp::Div => l / r,
            }
        }
        Pred::Cmp(op, l, r) => {
            let (l, r) = (eval_pred(l, gw), eval_pred(r, gw));
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
            let (l, r) = (eval_pred(l, gw), eval_pred(r, gw));
            bool_f64(truthy(l) && truthy(r))
        }
        Pred::Or(l, r) => {
            let (l, r) = (eval_pred(l, gw), eval_pred(r, gw));
            bool_f64(truthy(l) || truthy(r))
        }
    }
}

#[cfg(test)]
mod tests;
