//! The checked, lowered form of an event: what the monitor and the
//! reference evaluator consume.
//!
//! The surface syntax (units, percentages, rates, `in` vs `=`) is gone here:
//! every number is in base units, percentages have become ratios to the
//! group's packet count, and every variable is known to exist. The meaning
//! of each type is documented in `docs/semantics.md` (summarised in
//! `docs/language.md`); both consumers implement that text independently.

use std::fmt;
use std::net::IpAddr;

/// One event, ready to install.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct EventSpec {
    pub name: String,
    /// A packet belongs to the event when it matches at least one filter. Never empty.
    pub filters: Vec<Filter>,
    pub predicate: Pred,
    pub granularity: Granularity,
    /// Length of the event's time interval (its windows), nanoseconds, a multiple of 1 ms.
    pub interval_ns: u64,
    /// Whose packets the predicate is about: one monitor's, all hosts'
    /// (`across hosts`), or each host's with a quorum (`across more than ...`).
    pub scope: Scope,
    /// Events this one installs when it fires (`then install`), in source order.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Vec::is_empty"))]
    pub drill_downs: Vec<DrillDown>,
    /// Installed only by another event's drill-down (`on demand`), never on its own.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "std::ops::Not::not"))]
    pub on_demand: bool,
    /// `then capture`: the firing group's packets around its window are
    /// written to a pcapng file. Does not change when the event fires.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Option::is_none"))]
    pub capture: Option<CaptureSpec>,
    /// `priority N`, 0 to 100: under overload (`--adapt`) the measurement
    /// work of lower priorities is shed first, higher ones last. `None`
    /// when not written: the engine then orders by measured cost. An
    /// instance installed by a drill-down has its event's priority.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Option::is_none"))]
    pub priority: Option<u8>,
}

/// `then capture B before A after`: when the event fires for a group in
/// window `[s, e)`, the group's packets (those passing the event's filters,
/// in the group) with times in `[s - B, e + A)` go to a pcapng file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CaptureSpec {
    pub before_ns: u64,
    pub after_ns: u64,
}

impl CaptureSpec {
    /// The longest span either side: an hour (the packets are kept in memory).
    pub const MAX_NS: u64 = 3_600_000_000_000;
}

/// `then install EVENT on FIELDS for DURATION`: when the event fires for a
/// group in a window, an *instance* of `event` is installed, its filters
/// narrowed to the group's values of the fields of `on`, for the windows
/// of `event` in `[start, start + duration)` (or from `start` on, without
/// a duration). `start` is the first window boundary of `event` at or
/// after the end of the firing window plus the firing event's interval:
/// the firing window's decision is due by then, so every monitor can count
/// the instance's windows whole. See `docs/semantics.md`.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DrillDown {
    /// The event installed (an `on demand` event, with its own drill-downs).
    pub event: Box<EventSpec>,
    /// The firing group's fields that narrow the instance; every one is in
    /// the firing event's granularity, with addresses no longer than kept there.
    pub on: Granularity,
    /// How long an instance stays installed, a multiple of `event`'s
    /// interval; `None`: until removed (or the end of the input).
    pub duration_ns: Option<u64>,
}

/// Where an event's predicate holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Scope {
    /// On the packets one monitor sees: a host trigger, installed as it is.
    #[default]
    Host,
    /// On the aggregates of each group's packets on all hosts together
    /// (`across hosts`). No monitor installs it as it is: an event manager
    /// splits it into per-host triggers and decides from their values.
    Network,
    /// On each host's own packets, and the event holds for a group when it
    /// holds on more than a number (or a share) of the hosts it is placed on
    /// (`across more than 50% of hosts`): a network-wide counting event.
    Quorum(Quorum),
}

impl Scope {
    /// True for events an event manager decides (`across ...`), which no monitor installs as they are.
    pub fn is_network(self) -> bool {
        !matches!(self, Scope::Host)
    }
}

/// How many hosts must see an event hold: more than `more_than` hosts, or
/// more than `more_than` percent of the hosts it is placed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Quorum {
    pub more_than: u32,
    pub percent: bool,
}

impl Quorum {
    /// True when `fired` of `placed` hosts is more than the quorum asks.
    pub fn holds(self, fired: usize, placed: usize) -> bool {
        if self.percent {
            fired as u128 * 100 > u128::from(self.more_than) * placed as u128
        } else {
            fired as u128 > u128::from(self.more_than)
        }
    }
}

impl fmt::Display for Quorum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.percent {
            write!(f, "more than {}% of hosts", self.more_than)
        } else {
            write!(f, "more than {} hosts", self.more_than)
        }
    }
}

impl EventSpec {
    /// The highest [`EventSpec::priority`]: the last to be shed.
    pub const MAX_PRIORITY: u8 = 100;

    /// Every event its drill-downs install, at every level (an event named
    /// by two drill-downs comes once per naming), parents before children.
    pub fn installed_events(&self) -> Vec<&EventSpec> {
        let mut out: Vec<&EventSpec> = self.drill_downs.iter().map(|d| d.event.as_ref()).collect();
        let mut next = 0;
        while let Some(e) = out.get(next).copied() {
            out.extend(e.drill_downs.iter().map(|d| d.event.as_ref()));
            next += 1;
        }
        out
    }

    /// Every aggregate the predicate uses, in first-use order, without duplicates.
    pub fn aggregates(&self) -> Vec<AggCall> {
        let mut out = Vec::new();
        self.predicate.visit_aggs(&mut |a| {
            if !out.contains(a) {
                out.push(a.clone());
            }
        });
        out
    }

    /// Variables the predicate reads outside aggregates (`ack`, `seq_lastepoch`),
    /// in first-use order, without duplicates. Reports carry their values
    /// after the aggregates', keyed by their names.
    pub fn state_values(&self) -> Vec<Var> {
        let mut out = Vec::new();
        self.predicate.visit_state(&mut |v| {
            if !out.contains(&v) {
                out.push(v);
            }
        });
        out
    }

    /// Whether the event reads TCP connection state (`is_lost`, `rtt`, `seq`,
    /// `ack`, `dup`), which flows it matches must then keep.
    pub fn needs_connection_state(&self) -> bool {
        let mut needs = false;
        self.predicate
            .visit_vars(&mut |v| needs |= v.base.is_connection_state());
        needs
    }

    /// Variables the predicate uses that the monitor does not compute, in
    /// first-use order (none today: every variable of the language is computed).
    pub fn unsupported_variables(&self) -> Vec<Var> {
        let mut out = Vec::new();
        self.predicate.visit_vars(&mut |v| {
            if !v.base.is_implemented() && !out.contains(&v) {
                out.push(v);
            }
        });
        out
    }
}

/// A conjunction of header conditions; an absent field is a wildcard.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Filter {
    pub src_ip: Option<IpPrefix>,
    pub dst_ip: Option<IpPrefix>,
    pub src_port: Option<PortRange>,
    pub dst_port: Option<PortRange>,
    pub proto: Option<u8>,
    pub vlan: Option<u16>,
    /// The tunnel's VNI or GRE key; it never matches a packet that came
    /// out of no tunnel (or out of GRE without a key).
    pub vni: Option<u32>,
}

/// An address prefix. It matches only addresses of its own family; the
/// address has no bits set beyond `len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct IpPrefix {
    pub addr: IpAddr,
    pub len: u8,
}

/// An inclusive port range (`lo == hi` for one port). A port condition
/// never matches a packet without ports (ICMP, non-first fragments).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PortRange {
    pub lo: u16,
    pub hi: u16,
}

/// Which header fields make up a group, with the prefix length kept of
/// each address. Fields not listed are not part of the group key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Granularity {
    pub src_ip: Option<PrefixLens>,
    pub dst_ip: Option<PrefixLens>,
    pub src_port: bool,
    pub dst_port: bool,
    pub proto: bool,
    pub vlan: bool,
    /// The tunnel's VNI or GRE key (absent for packets of no tunnel).
    pub vni: bool,
}

/// Bits of an address kept in a group key, per family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PrefixLens {
    pub v4: u8,
    pub v6: u8,
}

impl PrefixLens {
    pub const FULL: PrefixLens = PrefixLens { v4: 32, v6: 128 };
}

impl Granularity {
    /// The classic 5-tuple: both full addresses, both ports, the protocol.
    pub const FIVE_TUPLE: Granularity = Granularity {
        src_ip: Some(PrefixLens::FULL),
        dst_ip: Some(PrefixLens::FULL),
        src_port: true,
        dst_port: true,
        proto: true,
        vlan: false,
        vni: false,
    };
}

/// The predicate: evaluated per group at the end of each window, in `f64`.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Pred {
    Num(f64),
    Agg(AggCall),
    /// A connection-state variable used bare (`ack`, `seq_lastepoch`): its
    /// value for the group at the end of the window. TCP state, next issue.
    State(Var),
    Neg(Box<Pred>),
    Arith(ArithOp, Box<Pred>, Box<Pred>),
    Cmp(CmpOp, Box<Pred>, Box<Pred>),
    And(Box<Pred>, Box<Pred>),
    Or(Box<Pred>, Box<Pred>),
    Not(Box<Pred>),
}

impl Pred {
    pub fn visit_aggs<'a>(&'a self, f: &mut impl FnMut(&'a AggCall)) {
        match self {
            Pred::Agg(a) => f(a),
            Pred::Num(_) | Pred::State(_) => {}
            Pred::Neg(x) | Pred::Not(x) => x.visit_aggs(f),
            Pred::Arith(_, l, r) | Pred::Cmp(_, l, r) | Pred::And(l, r) | Pred::Or(l, r) => {
                l.visit_aggs(f);
                r.visit_aggs(f);
            }
        }
    }

    /// Visits the variables read outside aggregates.
    pub fn visit_state(&self, f: &mut impl FnMut(Var)) {
        match self {
            Pred::State(v) => f(*v),
            Pred::Agg(_) | Pred::Num(_) => {}
            Pred::Neg(x) | Pred::Not(x) => x.visit_state(f),
            Pred::Arith(_, l, r) | Pred::Cmp(_, l, r) | Pred::And(l, r) | Pred::Or(l, r) => {
                l.visit_state(f);
                r.visit_state(f);
            }
        }
    }

    pub fn visit_vars(&self, f: &mut impl FnMut(Var)) {
        match self {
            Pred::Agg(a) => a.arg.visit_vars(f),
            Pred::State(v) => f(*v),
            Pred::Num(_) => {}
            Pred::Neg(x) | Pred::Not(x) => x.visit_vars(f),
            Pred::Arith(_, l, r) | Pred::Cmp(_, l, r) | Pred::And(l, r) | Pred::Or(l, r) => {
                l.visit_vars(f);
                r.visit_vars(f);
            }
        }
    }
}

/// An aggregate over the group's packets in the window.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AggCall {
    pub func: AggFunc,
    pub arg: PacketExpr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum AggFunc {
    /// Sum of the defined values (0 when none).
    Sum,
    /// Number of packets whose value is defined and non-zero.
    Count,
    /// Smallest defined value (undefined when none).
    Min,
    /// Largest defined value (undefined when none).
    Max,
    /// Sum / number of defined values (undefined when none).
    Avg,
    /// Population standard deviation of the defined values (undefined when none).
    Stddev,
}

impl AggFunc {
    pub fn name(self) -> &'static str {
        match self {
            AggFunc::Sum => "sum",
            AggFunc::Count => "count",
            AggFunc::Min => "min",
            AggFunc::Max => "max",
            AggFunc::Avg => "avg",
            AggFunc::Stddev => "stddev",
        }
    }

    pub const ALL: [AggFunc; 6] = [
        AggFunc::Sum,
        AggFunc::Count,
        AggFunc::Min,
        AggFunc::Max,
        AggFunc::Avg,
        AggFunc::Stddev,
    ];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
    /// Only in predicates (`f64`); division by zero gives an undefined value (NaN).
    Div,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

/// A per-packet expression, the argument of an aggregate: evaluated on each
/// packet in `i64` with saturating arithmetic; comparisons and logic give
/// 0 or 1. If any variable it reads is undefined on the packet, the whole
/// expression is undefined there and aggregates skip the packet.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum PacketExpr {
    Int(i64),
    Var(Var),
    Neg(Box<PacketExpr>),
    /// `Div` never appears here (the checker refuses it).
    Arith(ArithOp, Box<PacketExpr>, Box<PacketExpr>),
    Cmp(CmpOp, Box<PacketExpr>, Box<PacketExpr>),
    And(Box<PacketExpr>, Box<PacketExpr>),
    Or(Box<PacketExpr>, Box<PacketExpr>),
    Not(Box<PacketExpr>),
}

impl PacketExpr {
    pub fn visit_vars(&self, f: &mut impl FnMut(Var)) {
        match self {
            PacketExpr::Int(_) => {}
            PacketExpr::Var(v) => f(*v),
            PacketExpr::Neg(x) | PacketExpr::Not(x) => x.visit_vars(f),
            PacketExpr::Arith(_, l, r)
            | PacketExpr::Cmp(_, l, r)
            | PacketExpr::And(l, r)
            | PacketExpr::Or(l, r) => {
                l.visit_vars(f);
                r.visit_vars(f);
            }
        }
    }
}

/// A variable: a base quantity, optionally as it stood at the end of the
/// previous window (`X_lastepoch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Var {
    pub base: BaseVar,
    pub last_epoch: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum BaseVar {
    /// Transport payload bytes (from the headers' length fields).
    Volume,
    /// IP length (IPv4 total length; IPv6 40 + payload length).
    Size,
    /// 1 for every packet.
    Packets,
    /// IPv4 TTL / IPv6 hop limit.
    Ttl,
    /// The 2-bit ECN field.
    Ecn,
    /// TCP receive window, scaled by the flow's window-scale option. TCP only.
    Rwnd,
    /// TCP flags byte. TCP only.
    TcpFlags,
    // --- TCP connection state (implemented by the TCP-variables issue) ---
    IsLost,
    IsBurst,
    Rtt,
    Seq,
    Ack,
    Dup,
}

impl BaseVar {
    pub const ALL: [BaseVar; 13] = [
        BaseVar::Volume,
        BaseVar::Size,
        BaseVar::Packets,
        BaseVar::Ttl,
        BaseVar::Ecn,
        BaseVar::Rwnd,
        BaseVar::TcpFlags,
        BaseVar::IsLost,
        BaseVar::IsBurst,
        BaseVar::Rtt,
        BaseVar::Seq,
        BaseVar::Ack,
        BaseVar::Dup,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BaseVar::Volume => "volume",
            BaseVar::Size => "size",
            BaseVar::Packets => "packets",
            BaseVar::Ttl => "ttl",
            BaseVar::Ecn => "ecn",
            BaseVar::Rwnd => "rwnd",
            BaseVar::TcpFlags => "tcp_flags",
            BaseVar::IsLost => "is_lost",
            BaseVar::IsBurst => "is_burst",
            BaseVar::Rtt => "rtt",
            BaseVar::Seq => "seq",
            BaseVar::Ack => "ack",
            BaseVar::Dup => "dup",
        }
    }

    pub fn from_name(s: &str) -> Option<BaseVar> {
        BaseVar::ALL.into_iter().find(|v| v.name() == s)
    }

    /// Computed by the monitor. Every variable is today; a variable added to
    /// the language before the monitor computes it returns false here, and
    /// events using it check but are refused at install with a clear message.
    pub fn is_implemented(self) -> bool {
        true
    }

    /// Computed from the flow's TCP connection state (both directions).
    pub fn is_connection_state(self) -> bool {
        matches!(
            self,
            BaseVar::IsLost | BaseVar::Rtt | BaseVar::Seq | BaseVar::Ack | BaseVar::Dup
        )
    }

    /// Connection state rather than a per-packet value: may be used bare in a predicate.
    pub fn is_state(self) -> bool {
        matches!(self, BaseVar::Seq | BaseVar::Ack | BaseVar::Dup)
    }
}

impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.base.name())?;
        if self.last_epoch {
            f.write_str("_lastepoch")?;
        }
        Ok(())
    }
}

// --- Canonical text -------------------------------------------------------
//
// The same syntax and the same minimal parentheses as the language's
// printer: `sum(volume)`, `sum(is_lost and is_burst)`, `count(ttl < 64)`.
// Reports use these strings as the keys of aggregate values.

impl ArithOp {
    pub fn symbol(self) -> &'static str {
        match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
        }
    }

    fn precedence(self) -> u8 {
        match self {
            ArithOp::Add | ArithOp::Sub => 5,
            ArithOp::Mul | ArithOp::Div => 6,
        }
    }
}

impl CmpOp {
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
        }
    }
}

/// Precedence levels shared by both expression types (see the language docs).
const OR: u8 = 1;
const AND: u8 = 2;
const NOT: u8 = 3;
const CMP: u8 = 4;
const NEG: u8 = 7;
const ATOM: u8 = 8;

/// Writes `x` at precedence `p`, parenthesised when looser than `min`.
fn write_at(f: &mut fmt::Formatter<'_>, x: &dyn fmt::Display, p: u8, min: u8) -> fmt::Result {
    if p < min {
        write!(f, "({x})")
    } else {
        write!(f, "{x}")
    }
}

/// Writes a binary operation with minimal parentheses (left-associative;
/// comparisons do not chain).
fn write_binary<T: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    (l, lp): (&T, u8),
    op: &str,
    p: u8,
    (r, rp): (&T, u8),
) -> fmt::Result {
    let lmin = if p == CMP { p + 1 } else { p };
    write_at(f, l, lp, lmin)?;
    write!(f, " {op} ")?;
    write_at(f, r, rp, p + 1)
}

impl PacketExpr {
    fn precedence(&self) -> u8 {
        match self {
            PacketExpr::Int(n) if *n < 0 => NEG,
            PacketExpr::Int(_) | PacketExpr::Var(_) => ATOM,
            PacketExpr::Neg(_) => NEG,
            PacketExpr::Arith(op, ..) => op.precedence(),
            PacketExpr::Cmp(..) => CMP,
            PacketExpr::And(..) => AND,
            PacketExpr::Or(..) => OR,
            PacketExpr::Not(_) => NOT,
        }
    }
}

impl fmt::Display for PacketExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PacketExpr::Int(n) => write!(f, "{n}"),
            PacketExpr::Var(v) => write!(f, "{v}"),
            PacketExpr::Neg(x) => {
                f.write_str("-")?;
                write_at(f, x, x.precedence(), NEG)
            }
            PacketExpr::Not(x) => {
                f.write_str("not ")?;
                write_at(f, x, x.precedence(), NOT)
            }
            PacketExpr::Arith(op, l, r) => write_binary(
                f,
                (&**l, l.precedence()),
                op.symbol(),
                op.precedence(),
                (&**r, r.precedence()),
            ),
            PacketExpr::Cmp(op, l, r) => write_binary(
                f,
                (&**l, l.precedence()),
                op.symbol(),
                CMP,
                (&**r, r.precedence()),
            ),
            PacketExpr::And(l, r) => {
                write_binary(f, (&**l, l.precedence()), "and", AND, (&**r, r.precedence()))
            }
            PacketExpr::Or(l, r) => write_binary(f, (&**l, l.precedence()), "or", OR, (&**r, r.precedence())),
        }
    }
}

impl fmt::Display for AggCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.func.name(), self.arg)
    }
}

impl Pred {
    fn precedence(&self) -> u8 {
        match self {
            Pred::Num(x) if x.is_sign_negative() => NEG,
            Pred::Num(_) | Pred::Agg(_) | Pred::State(_) => ATOM,
            Pred::Neg(_) => NEG,
            Pred::Arith(op, ..) => op.precedence(),
            Pred::Cmp(..) => CMP,
            Pred::And(..) => AND,
            Pred::Or(..) => OR,
            Pred::Not(_) => NOT,
        }
    }
}

impl fmt::Display for Pred {
    /// The lowered predicate in the language's syntax, numbers in base
    /// units (`sum(volume) > 125000`), for logs and debugging.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pred::Num(x) => write!(f, "{x}"),
            Pred::Agg(a) => write!(f, "{a}"),
            Pred::State(v) => write!(f, "{v}"),
            Pred::Neg(x) => {
                f.write_str("-")?;
                write_at(f, x, x.precedence(), NEG)
            }
            Pred::Not(x) => {
                f.write_str("not ")?;
                write_at(f, x, x.precedence(), NOT)
            }
            Pred::Arith(op, l, r) => write_binary(
                f,
                (&**l, l.precedence()),
                op.symbol(),
                op.precedence(),
                (&**r, r.precedence()),
            ),
            Pred::Cmp(op, l, r) => write_binary(
                f,
                (&**l, l.precedence()),
                op.symbol(),
                CMP,
                (&**r, r.precedence()),
            ),
            Pred::And(l, r) => write_binary(f, (&**l, l.precedence()), "and", AND, (&**r, r.precedence())),
            Pred::Or(l, r) => write_binary(f, (&**l, l.precedence()), "or", OR, (&**r, r.precedence())),
        }
    }
}

/// An export policy, ready to install: Trident's match-action rule. A
/// packet that passes any filter is sent, as each `send` says, to its
/// destination. Policies never change what events see.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ExportSpec {
    pub name: String,
    /// As an event's: a packet matches when it passes one. Never empty.
    pub filters: Vec<Filter>,
    /// Only packets received on these interfaces (by name); empty: any.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Vec::is_empty"))]
    pub interfaces: Vec<String>,
    /// Never empty.
    pub sends: Vec<SendSpec>,
}

/// What a policy sends, and where.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SendSpec {
    pub action: ExportAction,
    pub destination: Destination,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum ExportAction {
    /// One header record per packet (time, key fields, sizes, TCP fields).
    Headers,
    /// The frame, cut to `snap` bytes when given (at least 1).
    Packets { snap: Option<u32> },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Destination {
    /// The compressed header stream over UDP that `clarion collect` reads.
    Collector(std::net::SocketAddr),
    /// Each frame in a VXLAN datagram (RFC 7348) to an analyzer.
    Vxlan {
        analyzer: std::net::SocketAddr,
        vni: u32,
    },
    /// pcapng files named after the policy in the host's export directory,
    /// a new one when either limit is reached (packet time for the age).
    Pcapng {
        max_bytes: Option<u64>,
        max_age_ns: Option<u64>,
    },
}

impl Destination {
    /// The default UDP port of `clarion collect`.
    pub const COLLECTOR_PORT: u16 = 9739;
    /// VXLAN's IANA port.
    pub const VXLAN_PORT: u16 = 4789;
}
