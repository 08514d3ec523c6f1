//! The syntax tree: what the source says, before any checking.
//!
//! The tree keeps everything the canonical printer needs (units as written,
//! integers vs decimals, the `5tuple` shorthand) and a [`Span`] on every
//! node, but none of the source's layout: parentheses become tree shape,
//! `&&` becomes `and`, `==` becomes `=`. Values are not range-checked here:
//! `vlan = 5000` parses, and the checker rejects it.
//!
//! Equality is structural and includes spans; compare with
//! [`File::eq_ignoring_spans`] to ask whether two trees say the same thing.

use std::net::IpAddr;

use crate::span::Span;

/// A whole source: its events and its export policies, each in order.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct File {
    pub events: Vec<Event>,
    pub exports: Vec<Export>,
}

/// `export NAME filter ... send ...`: a match-action export policy
/// (Trident): the packets that pass any filter go, as headers or whole,
/// to every destination of its `send` clauses.
#[derive(Clone, Debug, PartialEq)]
pub struct Export {
    pub name: String,
    pub name_span: Span,
    /// In source order; empty means "all packets", as in an event.
    pub filters: Vec<FilterClause>,
    /// `interface A, B`: only packets received on these; empty: any.
    pub interfaces: Vec<(String, Span)>,
    /// At least one after parsing.
    pub sends: Vec<Send>,
    /// From `export` to the end of the last clause.
    pub span: Span,
}

/// `send WHAT to DESTINATION`.
#[derive(Clone, Debug, PartialEq)]
pub struct Send {
    pub what: SendWhat,
    pub what_span: Span,
    pub dest: Dest,
    pub dest_span: Span,
    /// From `send` to the end of the clause.
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum SendWhat {
    /// `headers`: one header record per packet.
    Headers,
    /// `packets [snap N]`: the frames, cut to `snap` bytes when given.
    Packets { snap: Option<Quantity> },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Dest {
    /// `collector ADDR [port N]`: the header stream `clarion collect` reads.
    Collector { addr: IpAddr, port: Option<(u64, Span)> },
    /// `vxlan ADDR [port N] [vni N]`: a VXLAN-encapsulated mirror.
    Vxlan {
        addr: IpAddr,
        port: Option<(u64, Span)>,
        vni: Option<(u64, Span)>,
    },
    /// `pcapng [rotate SIZE|DURATION ...]`: files named after the policy
    /// in the host's export directory.
    Pcapng { rotate: Vec<Quantity> },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub name: String,
    pub name_span: Span,
    /// In source order; empty means "all packets".
    pub filters: Vec<FilterClause>,
    pub when: Expr,
    pub per: Option<Per>,
    pub every: Option<Quantity>,
    /// `across hosts` or `across more than N[%] [of] hosts`, when written:
    /// the event is network-wide.
    pub across: Option<Across>,
    /// `then install ...` clauses, in source order: drill-downs.
    pub then: Vec<Then>,
    /// `then capture ...`, when written: the firing group's packets around
    /// the window go to a pcapng file.
    pub capture: Option<Capture>,
    /// The `on demand` clause, when written: the event is installed only
    /// by another event's drill-down.
    pub on_demand: Option<Span>,
    /// `priority N`, when written: the number as written and its span
    /// (not range-checked here; the checker refuses more than 100).
    pub priority: Option<(u64, Span)>,
    /// `alert after N windows, resolve after M windows, severity S`, when
    /// written: how the event's alerts fire and resolve.
    pub alert: Option<AlertClause>,
    /// From `event` to the end of the last clause.
    pub span: Span,
}

/// `alert [after N windows] [resolve after M windows] [severity S]` (at
/// least one part, in any order, optionally separated by commas). Counts
/// are as written (the checker refuses 0 and more than
/// [`AlertClause::MAX_WINDOWS`]); absent parts take the defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertClause {
    /// Consecutive windows the predicate must hold before the alert fires.
    pub after: Option<(u64, Span)>,
    /// Consecutive windows without a firing before a firing alert resolves.
    pub resolve_after: Option<(u64, Span)>,
    pub severity: Option<(Severity, Span)>,
    /// From `alert` to the end of the clause.
    pub span: Span,
}

impl AlertClause {
    /// The most windows either count may be: a million windows of 1 ms is
    /// over 16 minutes, of 1 s over 11 days; longer is a typo.
    pub const MAX_WINDOWS: u64 = 1_000_000;
    /// Windows the predicate must hold before firing (default: 1, at once).
    pub fn fire_after(&self) -> u64 {
        self.after.map_or(1, |(n, _)| n)
    }
    /// Windows without a firing before resolving (default: 1).
    pub fn resolve_after_windows(&self) -> u64 {
        self.resolve_after.map_or(1, |(n, _)| n)
    }
    /// The severity (default: warning).
    pub fn severity(&self) -> Severity {
        self.severity.map_or(Severity::Warning, |(s, _)| s)
    }
}

/// An alert's severity: the syslog severities a fired event can have
/// (RFC 5424 §6.2.1, 2 to 6), named as Alertmanager's `severity` labels
/// usually are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Severity {
    Critical,
    Error,
    /// An event's severity when its `alert` clause names none, or it has none.
    #[default]
    Warning,
    Notice,
    Info,
}

impl Severity {
    pub const ALL: [Severity; 5] = [
        Severity::Critical,
        Severity::Error,
        Severity::Warning,
        Severity::Notice,
        Severity::Info,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Notice => "notice",
            Severity::Info => "info",
        }
    }

    pub fn from_name(s: &str) -> Option<Severity> {
        Severity::ALL.into_iter().find(|v| v.name() == s)
    }

    /// The RFC 5424 severity code: critical 2 ... info 6.
    pub fn syslog_code(self) -> u8 {
        match self {
            Severity::Critical => 2,
            Severity::Error => 3,
            Severity::Warning => 4,
            Severity::Notice => 5,
            Severity::Info => 6,
        }
    }
}

/// `then install EVENT [on FIELDS] [for DURATION]`: when this event fires
/// for a group, install `EVENT` narrowed to the group's values of `FIELDS`.
#[derive(Clone, Debug, PartialEq)]
pub struct Then {
    pub event: String,
    pub event_span: Span,
    /// The group fields that narrow the installed event, as in `per`.
    pub on: Vec<GroupField>,
    /// How long each instance stays installed; absent: until removed.
    pub duration: Option<Quantity>,
    /// From `then` to the end of the clause.
    pub span: Span,
}

/// `then capture [DURATION before] [DURATION after]` (at least one).
#[derive(Clone, Debug, PartialEq)]
pub struct Capture {
    pub before: Option<Quantity>,
    pub after: Option<Quantity>,
    /// From `then` to the end of the clause.
    pub span: Span,
}

/// The `across` clause. The span covers all its words.
#[derive(Clone, Debug, PartialEq)]
pub struct Across {
    pub span: Span,
    /// `more than N hosts` (`percent: false`) or `more than N% of hosts`.
    pub quorum: Option<QuorumLit>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct QuorumLit {
    pub n: u64,
    pub percent: bool,
    /// The number (and `%`).
    pub span: Span,
}

/// `filter COND and COND ...`; no conditions means `filter *`.
#[derive(Clone, Debug, PartialEq)]
pub struct FilterClause {
    pub conds: Vec<Cond>,
    pub span: Span,
}

/// `FIELD = VALUE` (also written `==` or `in`).
#[derive(Clone, Debug, PartialEq)]
pub struct Cond {
    pub field: Field,
    pub field_span: Span,
    pub value: CondValue,
    pub value_span: Span,
}

/// A header field, as used by filters and granularities.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    SrcIp,
    DstIp,
    SrcPort,
    DstPort,
    Proto,
    Vlan,
    /// The tunnel's VNI (VXLAN, Geneve) or key (GRE).
    Vni,
}

impl Field {
    pub const ALL: [Field; 7] = [
        Field::SrcIp,
        Field::DstIp,
        Field::SrcPort,
        Field::DstPort,
        Field::Proto,
        Field::Vlan,
        Field::Vni,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Field::SrcIp => "src_ip",
            Field::DstIp => "dst_ip",
            Field::SrcPort => "src_port",
            Field::DstPort => "dst_port",
            Field::Proto => "proto",
            Field::Vlan => "vlan",
            Field::Vni => "vni",
        }
    }

    pub fn from_name(s: &str) -> Option<Field> {
        Field::ALL.into_iter().find(|f| f.name() == s)
    }

    pub fn is_address(self) -> bool {
        matches!(self, Field::SrcIp | Field::DstIp)
    }
}

/// The right-hand side of a condition, as written.
#[derive(Clone, Debug, PartialEq)]
pub enum CondValue {
    /// `*`: any value.
    Any,
    Int(u64),
    /// `LO..HI`
    Range(u64, u64),
    /// An address, with the prefix length if one was written.
    Addr {
        addr: IpAddr,
        len: Option<u64>,
    },
    /// A word such as `tcp`.
    Name(String),
}

/// `per ...`
#[derive(Clone, Debug, PartialEq)]
pub struct Per {
    pub kind: PerKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum PerKind {
    /// `per 5tuple`
    FiveTuple,
    /// One field, a parenthesised list, or fields joined by `and`.
    Fields(Vec<GroupField>),
}

/// A field of a group key: `dst_ip`, `dst_ip/24`, `dst_ip/24/64`.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupField {
    pub field: Field,
    /// The prefix lengths after the field, at most two.
    pub lens: Vec<PrefixLen>,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PrefixLen {
    pub value: u64,
    pub span: Span,
}

/// A number with an optional unit: `125KB`, `10%`, `10ms`, `0.5`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quantity {
    pub value: NumLit,
    pub unit: Option<Unit>,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NumLit {
    Int(u64),
    /// Written with a decimal point. Always finite.
    Dec(f64),
}

impl NumLit {
    pub fn as_f64(self) -> f64 {
        match self {
            NumLit::Int(n) => n as f64,
            NumLit::Dec(x) => x,
        }
    }
}

/// Units that may follow a number. Which ones are allowed where is the
/// checker's business.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    B,
    KB,
    MB,
    GB,
    KiB,
    MiB,
    GiB,
    Percent,
    Bps,
    Kbps,
    Mbps,
    Gbps,
    Us,
    Ms,
    S,
}

impl Unit {
    pub const ALL: [Unit; 15] = [
        Unit::B,
        Unit::KB,
        Unit::MB,
        Unit::GB,
        Unit::KiB,
        Unit::MiB,
        Unit::GiB,
        Unit::Percent,
        Unit::Bps,
        Unit::Kbps,
        Unit::Mbps,
        Unit::Gbps,
        Unit::Us,
        Unit::Ms,
        Unit::S,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Unit::B => "B",
            Unit::KB => "KB",
            Unit::MB => "MB",
            Unit::GB => "GB",
            Unit::KiB => "KiB",
            Unit::MiB => "MiB",
            Unit::GiB => "GiB",
            Unit::Percent => "%",
            Unit::Bps => "bps",
            Unit::Kbps => "Kbps",
            Unit::Mbps => "Mbps",
            Unit::Gbps => "Gbps",
            Unit::Us => "us",
            Unit::Ms => "ms",
            Unit::S => "s",
        }
    }

    pub fn from_name(s: &str) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.name() == s)
    }

    /// Bytes per unit, for sizes.
    pub fn bytes(self) -> Option<u64> {
        Some(match self {
            Unit::B => 1,
            Unit::KB => 1_000,
            Unit::MB => 1_000_000,
            Unit::GB => 1_000_000_000,
            Unit::KiB => 1 << 10,
            Unit::MiB => 1 << 20,
            Unit::GiB => 1 << 30,
            _ => return None,
        })
    }

    /// Bits per second per unit, for rates.
    pub fn bits_per_second(self) -> Option<u64> {
        Some(match self {
            Unit::Bps => 1,
            Unit::Kbps => 1_000,
            Unit::Mbps => 1_000_000,
            Unit::Gbps => 1_000_000_000,
            _ => return None,
        })
    }

    /// Nanoseconds per unit, for durations.
    pub fn nanos(self) -> Option<u64> {
        Some(match self {
            Unit::Us => 1_000,
            Unit::Ms => 1_000_000,
            Unit::S => 1_000_000_000,
            _ => return None,
        })
    }
}

/// An expression: the predicate of `when`, or the argument of an aggregate.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    /// Covers the whole expression, including any parentheses around it.
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Num(Quantity),
    /// A variable name (checked later).
    Var(String),
    /// `name(arg)`: an aggregate call (the name is checked later).
    Call {
        func: String,
        func_span: Span,
        arg: Box<Expr>,
    },
    Unary {
        op: UnOp,
        op_span: Span,
        expr: Box<Expr>,
    },
    Binary {
        op: BinOp,
        op_span: Span,
        left: Box<Expr>,
        right: Box<Expr>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    Neg,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Or,
    And,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    Add,
    Sub,
    Mul,
    Div,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Or => "or",
            BinOp::And => "and",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
        }
    }

    /// Binding strength: higher binds tighter. `not` sits at 3, unary minus at 7.
    pub fn precedence(self) -> u8 {
        match self {
            BinOp::Or => 1,
            BinOp::And => 2,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne => 4,
            BinOp::Add | BinOp::Sub => 5,
            BinOp::Mul | BinOp::Div => 6,
        }
    }

    pub fn is_comparison(self) -> bool {
        self.precedence() == 4
    }
}

impl File {
    /// The same tree with every span set to `0..0`.
    pub fn without_spans(&self) -> File {
        let mut f = self.clone();
        for e in &mut f.events {
            e.strip_spans();
        }
        for x in &mut f.exports {
            x.strip_spans();
        }
        f
    }

    /// Whether both trees say the same thing, wherever it was written.
    pub fn eq_ignoring_spans(&self, other: &File) -> bool {
        self.without_spans() == other.without_spans()
    }
}

impl Export {
    fn strip_spans(&mut self) {
        self.name_span = Span::default();
        self.span = Span::default();
        strip_filter_spans(&mut self.filters);
        for (_, span) in &mut self.interfaces {
            *span = Span::default();
        }
        for s in &mut self.sends {
            s.span = Span::default();
            s.what_span = Span::default();
            s.dest_span = Span::default();
            if let SendWhat::Packets { snap: Some(q) } = &mut s.what {
                q.span = Span::default();
            }
            let clear = |o: &mut Option<(u64, Span)>| {
                if let Some((_, span)) = o {
                    *span = Span::default();
                }
            };
            match &mut s.dest {
                Dest::Collector { port, .. } => clear(port),
                Dest::Vxlan { port, vni, .. } => {
                    clear(port);
                    clear(vni);
                }
                Dest::Pcapng { rotate } => rotate.iter_mut().for_each(|q| q.span = Span::default()),
            }
        }
    }
}

fn strip_filter_spans(filters: &mut [FilterClause]) {
    for f in filters {
        f.span = Span::default();
        for c in &mut f.conds {
            c.field_span = Span::default();
            c.value_span = Span::default();
        }
    }
}

impl Event {
    fn strip_spans(&mut self) {
        self.name_span = Span::default();
        self.span = Span::default();
        strip_filter_spans(&mut self.filters);
        self.when.strip_spans();
        if let Some(per) = &mut self.per {
            per.span = Span::default();
            if let PerKind::Fields(fields) = &mut per.kind {
                fields.iter_mut().for_each(GroupField::strip_spans);
            }
        }
        if let Some(q) = &mut self.every {
            q.span = Span::default();
        }
        if let Some(a) = &mut self.across {
            a.span = Span::default();
            if let Some(q) = &mut a.quorum {
                q.span = Span::default();
            }
        }
        if let Some(c) = &mut self.capture {
            c.span = Span::default();
            for q in [&mut c.before, &mut c.after].into_iter().flatten() {
                q.span = Span::default();
            }
        }
        for t in &mut self.then {
            t.span = Span::default();
            t.event_span = Span::default();
            t.on.iter_mut().for_each(GroupField::strip_spans);
            if let Some(q) = &mut t.duration {
                q.span = Span::default();
            }
        }
        if self.on_demand.is_some() {
            self.on_demand = Some(Span::default());
        }
        if let Some((_, span)) = &mut self.priority {
            *span = Span::default();
        }
        if let Some(a) = &mut self.alert {
            a.span = Span::default();
            for (_, span) in [&mut a.after, &mut a.resolve_after].into_iter().flatten() {
                *span = Span::default();
            }
            if let Some((_, span)) = &mut a.severity {
                *span = Span::default();
            }
        }
    }
}

impl GroupField {
    fn strip_spans(&mut self) {
        self.span = Span::default();
        for l in &mut self.lens {
            l.span = Span::default();
        }
    }
}

impl Expr {
    fn strip_spans(&mut self) {
        self.span = Span::default();
        match &mut self.kind {
            ExprKind::Num(q) => q.span = Span::default(),
            ExprKind::Var(_) => {}
            ExprKind::Call { func_span, arg, .. } => {
                *func_span = Span::default();
                arg.strip_spans();
            }
            ExprKind::Unary { op_span, expr, .. } => {
                *op_span = Span::default();
                expr.strip_spans();
            }
            ExprKind::Binary {
                op_span, left, right, ..
            } => {
                *op_span = Span::default();
                left.strip_spans();
                right.strip_spans();
            }
        }
    }
}
