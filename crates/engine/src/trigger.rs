//! An installed trigger: its compiled event, the window being gathered and
//! the values of its last windows (its flows' statistics are kept by match
//! set, `epoch_log.rs`).

use clarion_adapt::{SeenGroup, WindowSample};
use rustc_hash::FxHashMap;

use clarion_lang::spec::{AggCall, AggFunc, ArithOp, BaseVar, CmpOp, EventSpec, PacketExpr, Pred, Var};
use clarion_report::{Completeness, GroupKey, Name, Origin, Report, Window};
use clarion_wire::FlowKey;

use crate::history::History;
use crate::int_threshold::IntRange;
use crate::key::{one_flow_per_group, report_group, KeyMask, TagsSeen, TAG_STATES};
use crate::measure::{Acc, Expr, StatFlags};
use crate::merge::WindowPartial;
use crate::prefetch::prefetch;
use crate::trigger_index::TriggerId;

/// The predicate with aggregates and state values replaced by their index.
#[derive(Clone, Debug)]
enum CPred {
    Num(f64),
    /// Index into the values: the aggregates', then the state values'.
    Agg(usize),
    Neg(Box<CPred>),
    Arith(ArithOp, Box<CPred>, Box<CPred>),
    Cmp(CmpOp, Box<CPred>, Box<CPred>),
    /// `Cmp(op, Agg(i), Num(c))`, the usual threshold (`sum(volume) > 1000`),
    /// without the recursion: the sweep tests it for every group.
    CmpAggNum(CmpOp, usize, f64),
    And(Box<CPred>, Box<CPred>),
    Or(Box<CPred>, Box<CPred>),
    Not(Box<CPred>),
}

fn truthy(v: f64) -> bool {
    v != 0.0 && !v.is_nan()
}

fn bool_f(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// `a op b`; IEEE comparisons are already false with NaN, except `!=`.
#[inline]
pub(crate) fn compare(op: CmpOp, a: f64, b: f64) -> bool {
    match op {
        CmpOp::Lt => a < b,
        CmpOp::Le => a <= b,
        CmpOp::Gt => a > b,
        CmpOp::Ge => a >= b,
        CmpOp::Eq => a == b,
        CmpOp::Ne => !a.is_nan() && !b.is_nan() && a != b,
    }
}

/// One step of a predicate in postfix order (see [`Program`]).
#[derive(Clone, Copy, Debug)]
enum Op {
    Num(f64),
    Load(usize),
    Neg,
    Arith(ArithOp),
    Cmp(CmpOp),
    CmpLoadNum(CmpOp, usize, f64),
    And,
    Or,
    Not,
}

/// Values a program's stack holds without allocating (a power of two);
/// deeper predicates (not met in practice: 16 nested binary operators)
/// use a `Vec`.
const STACK: usize = 16;

/// The predicate in postfix order, run over a small stack: the sweep tests
/// it for every group of every closed window, and the tree's recursion
/// through boxes cost about three times as many instructions. Same values
/// as [`CPred::eval`] (both operands of `and`/`or` are evaluated there too,
/// and nothing has side effects).
#[derive(Clone, Debug)]
struct Program {
    ops: Vec<Op>,
    depth: usize,
}

impl Program {
    fn of(p: &CPred) -> Program {
        let mut ops = Vec::new();
        let depth = Self::emit(p, &mut ops);
        Program { ops, depth }
    }

    /// Appends `p`'s steps; gives the stack depth they need.
    fn emit(p: &CPred, ops: &mut Vec<Op>) -> usize {
        let binary = |l: &CPred, r: &CPred, op: Op, ops: &mut Vec<Op>| {
            let dl = Self::emit(l, ops);
            let dr = Self::emit(r, ops);
            ops.push(op);
            dl.max(dr + 1)
        };
        match p {
            CPred::Num(v) => {
                ops.push(Op::Num(*v));
                1
            }
            CPred::Agg(i) => {
                ops.push(Op::Load(*i));
                1
            }
            CPred::CmpAggNum(op, i, c) => {
                ops.push(Op::CmpLoadNum(*op, *i, *c));
                1
            }
            CPred::Neg(x) => {
                let d = Self::emit(x, ops);
                ops.push(Op::Neg);
                d
            }
            CPred::Not(x) => {
                let d = Self::emit(x, ops);
                ops.push(Op::Not);
                d
            }
            CPred::Arith(op, l, r) => binary(l, r, Op::Arith(*op), ops),
            CPred::Cmp(op, l, r) => binary(l, r, Op::Cmp(*op), ops),
            CPred::And(l, r) => binary(l, r, Op::And, ops),
            CPred::Or(l, r) => binary(l, r, Op::Or, ops),
        }
    }

    #[inline]
    fn eval(&self, vals: &[f64]) -> f64 {
        if self.depth <= STACK {
            self.run(vals, &mut [0.0; STACK])
        } else {
            self.run(vals, &mut vec![0.0; self.depth.next_power_of_two()])
        }
    }

    /// Runs the steps on `st`, a power of two at least `depth` long.
    /// Positions are taken modulo its length, which for the fixed stack
    /// needs no bounds check (a well-formed program never wraps; a
    /// malformed one gives a wrong value, never a panic): about a third of
    /// the instructions of checking every push and pop.
    #[inline(always)]
    fn run(&self, vals: &[f64], st: &mut [f64]) -> f64 {
        debug_assert!(st.len().is_power_of_two() && st.len() >= self.depth);
        let mask = st.len().wrapping_sub(1);
        let load = |i: usize| vals.get(i).copied().unwrap_or(f64::NAN);
        let mut n: usize = 0;
        for op in &self.ops {
            match *op {
                Op::Num(v) => {
                    st[n & mask] = v;
                    n = n.wrapping_add(1);
                }
                Op::Load(i) => {
                    st[n & mask] = load(i);
                    n = n.wrapping_add(1);
                }
                Op::CmpLoadNum(op, i, c) => {
                    st[n & mask] = bool_f(compare(op, load(i), c));
                    n = n.wrapping_add(1);
                }
                Op::Neg => {
                    let t = n.wrapping_sub(1) & mask;
                    st[t] = -st[t];
                }
                Op::Not => {
                    let t = n.wrapping_sub(1) & mask;
                    st[t] = bool_f(!truthy(st[t]));
                }
                Op::Arith(_) | Op::Cmp(_) | Op::And | Op::Or => {
                    n = n.wrapping_sub(1);
                    let b = st[n & mask];
                    let t = n.wrapping_sub(1) & mask;
                    let a = st[t];
                    st[t] = match *op {
                        Op::Arith(op) => arith(op, a, b),
                        Op::Cmp(op) => bool_f(compare(op, a, b)),
                        Op::And => bool_f(truthy(a) && truthy(b)),
                        _ => bool_f(truthy(a) || truthy(b)),
                    };
                }
            }
        }
        st[n.wrapping_sub(1) & mask]
    }
}

#[inline]
fn arith(op: ArithOp, a: f64, b: f64) -> f64 {
    match op {
        ArithOp::Add => a + b,
        ArithOp::Sub => a - b,
        ArithOp::Mul => a * b,
        ArithOp::Div if b == 0.0 => f64::NAN,
        ArithOp::Div => a / b,
    }
}

impl CPred {
    /// Values are numbered aggregates first, then state values; `None` if
    /// the predicate names one not in the lists.
    fn compile(p: &Pred, aggs: &[AggCall], state: &[Var]) -> Option<CPred> {
        let b = |x: &Pred| CPred::compile(x, aggs, state).map(Box::new);
        Some(match p {
            Pred::Num(v) => CPred::Num(*v),
            Pred::Agg(a) => CPred::Agg(aggs.iter().position(|x| x == a)?),
            Pred::State(v) => CPred::Agg(aggs.len() + state.iter().position(|x| x == v)?),
            Pred::Neg(x) => CPred::Neg(b(x)?),
            Pred::Arith(op, l, r) => CPred::Arith(*op, b(l)?, b(r)?),
            Pred::Cmp(op, l, r) => match (*b(l)?, *b(r)?) {
                (CPred::Agg(i), CPred::Num(c)) => CPred::CmpAggNum(*op, i, c),
                (l, r) => CPred::Cmp(*op, Box::new(l), Box::new(r)),
            },
            Pred::And(l, r) => CPred::And(b(l)?, b(r)?),
            Pred::Or(l, r) => CPred::Or(b(l)?, b(r)?),
            Pred::Not(x) => CPred::Not(b(x)?),
        })
    }

    /// The tree's value, the reference [`Program`] is tested against.
    #[cfg(test)]
    fn eval(&self, vals: &[f64]) -> f64 {
        match self {
            CPred::Num(v) => *v,
            CPred::Agg(i) => vals.get(*i).copied().unwrap_or(f64::NAN),
            CPred::Neg(x) => -x.eval(vals),
            CPred::Arith(op, l, r) => arith(*op, l.eval(vals), r.eval(vals)),
            CPred::Cmp(op, l, r) => bool_f(compare(*op, l.eval(vals), r.eval(vals))),
            CPred::CmpAggNum(op, i, c) => bool_f(compare(*op, vals.get(*i).copied().unwrap_or(f64::NAN), *c)),
            CPred::And(l, r) => bool_f(truthy(l.eval(vals)) && truthy(r.eval(vals))),
            CPred::Or(l, r) => bool_f(truthy(l.eval(vals)) || truthy(r.eval(vals))),
            CPred::Not(x) => bool_f(!truthy(x.eval(vals))),
        }
    }
}

/// The window a trigger is gathering.
#[derive(Debug)]
pub(crate) struct OpenWindow {
    pub(crate) start_ns: u64,
    /// Group key → its number: its statistics are `accs[n·reads..(n+1)·reads]`
    /// and `packets[n]` (one flat arena, no allocation per group).
    pub(crate) groups: FxHashMap<FlowKey, u32>,
    /// Packets (not RTT samples) per group: a group exists only where it had packets.
    pub(crate) packets: Vec<u64>,
    pub(crate) accs: Vec<Acc>,
    /// Degraded mode: flow-epochs of the trigger measured and shed in the
    /// window (see `monitor/shed.rs`).
    pub(crate) measured: u64,
    pub(crate) unmeasured: u64,
    /// Degraded mode: flow-epochs of the trigger estimated bypassed in the
    /// window (see `monitor/bypass.rs`).
    pub(crate) bypassed: f64,
}

impl OpenWindow {
    /// Flow-epochs of the window not measured: shed, and estimated bypassed.
    pub(crate) fn unmeasured_total(&self) -> u64 {
        self.unmeasured + self.bypassed.round() as u64
    }

    /// The statistics of group `g` (created empty on first use) and its packet count.
    #[inline]
    pub(crate) fn group(&mut self, g: FlowKey, reads: usize) -> (&mut [Acc], &mut u64) {
        let n = self.packets.len() as u32;
        let i = *self.groups.entry(g).or_insert(n) as usize;
        if i == self.packets.len() {
            self.packets.push(0);
            self.accs.resize(self.accs.len() + reads, Acc::default());
        }
        (&mut self.accs[i * reads..(i + 1) * reads], &mut self.packets[i])
    }
}

/// The values of every group of one closed window.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowValues {
    pub window: Window,
    /// Each group, in key order, with its values: one per aggregate in the
    /// order of [`EventSpec::aggregates`], then the state values.
    pub groups: Vec<(GroupKey, Vec<f64>)>,
    /// The host's packets in the window (every IP packet its monitor
    /// handled, of the event or not, as a report's completeness counts
    /// them), while it still knows them: what an event manager holds a
    /// poll's answer to.
    pub packets: Option<u64>,
}

/// The predicate when it is one threshold on the trigger's only value, an
/// aggregate (`sum(volume) > 1000`, as most are): the sweep tests it from
/// the trigger's first cache line, without the predicate's tree.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Threshold {
    pub(crate) func: AggFunc,
    op: CmpOp,
    c: f64,
}

impl Threshold {
    /// True when the predicate holds for the value `v` (as [`Trigger::fires`] on `[v]`).
    #[cfg(test)]
    pub(crate) fn holds(&self, v: f64) -> bool {
        compare(self.op, v, self.c)
    }

    /// The integers for which it holds (see `int_threshold.rs`).
    pub(crate) fn int_range(&self) -> IntRange {
        IntRange::of(self.op, self.c)
    }
}

/// What the sweep reads of a trigger to test a flow, copied into one dense
/// array beside the triggers (`Monitor::heads`, by id): a set's ~8
/// triggers, consecutive ids, then cost the sweep a few lines, not a
/// pointer and a cold line each. A copy, refreshed ([`Head::of`]) wherever
/// one of these fields of the trigger changes; whether the trigger was
/// ever tested flow by flow is kept here only.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Head {
    start_ns: u64,
    interval_ns: u64,
    /// The predicate as the integers a sum passes, when it is one
    /// threshold on a sum (`sum(x) op c`, see `int_threshold.rs`).
    sum_range: Option<IntRange>,
    flags: u16,
}

const LIVE: u16 = 1;
/// `per_flow[0]`; `per_flow[s]` is `PER_FLOW << s` (four bits).
const PER_FLOW: u16 = 2;
const EXPORTED: u16 = 32;
const OPEN: u16 = 64;
const HAS_END: u16 = 128;
const TESTED: u16 = 256;

impl Head {
    /// A removed trigger's.
    pub(crate) const GONE: Head = Head {
        start_ns: 0,
        interval_ns: 0,
        sum_range: None,
        flags: 0,
    };

    /// The copy of `t`'s fields, with whether it was tested per flow.
    pub(crate) fn of(t: &Trigger, tested: bool) -> Head {
        let bit = |on: bool, b: u16| if on { b } else { 0 };
        let per_flow = (0..TAG_STATES).fold(0, |acc, s| acc | bit(t.per_flow[s], PER_FLOW << s));
        Head {
            start_ns: t.start_ns,
            interval_ns: t.interval_ns,
            sum_range: t
                .threshold
                .filter(|th| th.func == AggFunc::Sum)
                .map(|th| th.int_range()),
            flags: LIVE
                | per_flow
                | bit(t.exported, EXPORTED)
                | bit(t.open.is_some(), OPEN)
                | bit(t.has_end, HAS_END)
                | bit(tested, TESTED),
        }
    }

    /// Installed (not removed).
    #[inline]
    pub(crate) fn live(&self) -> bool {
        self.flags & LIVE != 0
    }

    /// True when the epoch starting at `epoch_start` belongs to a window
    /// the trigger gathers: at or after its start, before its end (`end`,
    /// read only when it has one: a drill-down instance).
    #[inline]
    pub(crate) fn gathers(&self, epoch_start: u64, end: impl FnOnce() -> u64) -> bool {
        epoch_start >= self.start_ns && (self.flags & HAS_END == 0 || epoch_start < end())
    }

    /// True when the window of the epoch `epoch_start..+epoch_len` is
    /// tested flow by flow, during the gather (`Tuning::flow_windows`; see
    /// `monitor/sweep.rs`): the window is that one epoch, each flow its own
    /// group, every value an aggregate, and no window already open.
    /// `aligned`: the epoch starts at a multiple of its length (the caller
    /// decides it once per set, not per trigger).
    #[inline]
    pub(crate) fn tested_per_flow(&self, epoch_len: u64, aligned: bool, seen: TagsSeen) -> bool {
        aligned
            && self.flags & (EXPORTED | OPEN) == 0
            && self.flags & (PER_FLOW << (seen & 3)) != 0
            && self.interval_ns == epoch_len
    }

    /// The predicate as the integers a sum passes, if it is one threshold on a sum.
    #[inline]
    pub(crate) fn sum_range(&self) -> Option<IntRange> {
        self.sum_range
    }

    /// Whether a window is being gathered (the trigger's `open` is `Some`).
    #[inline]
    pub(crate) fn set_open(&mut self, open: bool) {
        self.flags = if open {
            self.flags | OPEN
        } else {
            self.flags & !OPEN
        };
    }

    /// Some window of the trigger was tested flow by flow.
    #[inline]
    pub(crate) fn tested(&self) -> bool {
        self.flags & TESTED != 0
    }

    #[inline]
    pub(crate) fn mark_tested(&mut self) {
        self.flags |= TESTED;
    }
}

/// See the module documentation.
///
/// What the sweep reads for a trigger whose flows join groups comes
/// first, `start_ns` to `history`, in the first two cache lines (the
/// struct is aligned to one); a trigger tested flow by flow is read
/// through its [`Head`] instead, and here only to report.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Trigger {
    /// Start of the first window this trigger reports.
    pub(crate) start_ns: u64,
    /// `spec.interval_ns`, here beside the rest.
    interval_ns: u64,
    pub(crate) threshold: Option<Threshold>,
    /// Every group is one flow and every value an aggregate, so a window of
    /// one epoch can be tested flow by flow: while no flow had a VLAN tag
    /// (`[0]`), and since one had (`[1]`).
    /// [`one_flow_per_group`] for each [`TagsSeen`].
    per_flow: [bool; TAG_STATES],
    /// Its closed windows leave as partials for a host-level merger instead
    /// of being tested here (`MonitorConfig::merge_output`).
    pub(crate) exported: bool,
    /// `end_ns` is set (a drill-down instance): the sweep reads it only then.
    has_end: bool,
    /// The last few closed windows.
    pub(crate) history: History,
    open: Option<OpenWindow>,
    pub(crate) spec: EventSpec,
    aggs: Vec<AggCall>,
    /// Values read outside aggregates ([`EventSpec::state_values`]), each
    /// with whether it is an `X_lastepoch` and the index of `X` in `lasts`.
    state: Vec<(bool, usize)>,
    /// Variables whose latest value the state values need.
    lasts: Vec<BaseVar>,
    /// What each flow keeps for this trigger: the aggregates' statistics, then the lasts'.
    pub(crate) reads: Vec<(Expr, StatFlags)>,
    /// Report keys of the values: the aggregates', then the state values'
    /// (shared by its reports, as is `name`).
    pub(crate) value_names: Vec<Name>,
    /// The event's name (`spec.name`), for its reports.
    pub(crate) name: Name,
    pred: Program,
    /// The last closed window's containers, emptied, for the next window.
    spare: Option<OpenWindow>,
    /// Latest values (one per `lasts`) of each group of the last closed
    /// window, for `X_lastepoch`; `None` before the first close.
    prev: Option<Lasts>,
    /// The containers of the window before that one, emptied, for the
    /// next close (no allocation per close or per group); while its flows
    /// are tested one by one, the epoch's values being gathered.
    spare_lasts: Lasts,
    /// The epoch whose values `spare_lasts` is gathering flow by flow
    /// ([`Trigger::flow_states`]), until [`Trigger::end_flow_epoch`].
    flow_epoch: Option<u64>,
    /// Packets of each group of the newest closed window, in the history's
    /// order: degraded mode's recall estimate weighs groups by them.
    newest_packets: Vec<u64>,
    pub(crate) rules: Vec<(KeyMask, FlowKey)>,
    /// No window starting at or after this is gathered (a drill-down
    /// instance's end; `u64::MAX` for every other trigger).
    end_ns: u64,
}

/// Most packets a report's survival of drops is computed for exactly
/// (`Trigger::survival`): beyond, the share kept is within about a tenth
/// of `s` and scaling by it does.
const BINOMIAL_PACKETS: f64 = 64.0;

/// Most groups of a window [`Trigger::window_recall`] tests (every
/// `n / RECALL_GROUPS`th of `n`, each standing for as many).
const RECALL_GROUPS: usize = 4096;

/// Most reports of a window [`Trigger::rethinned_recall`] thins (each up
/// to [`BINOMIAL_PACKETS`] + 1 tests of the predicate).
const RETHINNED_REPORTS: u64 = 256;

/// What a degraded window's recall estimate knows of its sampling: its
/// flow-epochs measured and not, its traffic seen and dropped.
fn sample_of(measured: u64, unmeasured: u64, c: &Completeness, one_flow: bool) -> WindowSample {
    WindowSample {
        measured,
        unmeasured,
        seen_packets: c.packets,
        dropped_packets: c.dropped,
        one_flow,
    }
}

/// A group's state values ([`Trigger::state`]: each an `X` or an
/// `X_lastepoch` and its place among the lasts) from its latest values in
/// this window (`now`) and in the window before (`before`, if it had the
/// group); NaN where undefined.
fn state_values<'a>(
    state: &'a [(bool, usize)],
    now: &'a [f64],
    before: Option<&'a [f64]>,
) -> impl Iterator<Item = f64> + 'a {
    state.iter().map(move |&(last_epoch, i)| {
        let from = if last_epoch { before } else { Some(now) };
        from.and_then(|l| l.get(i)).copied().unwrap_or(f64::NAN)
    })
}

/// The latest values of `lasts` for every group of one closed window, in
/// one flat array (`stride` values a group), for the next window's
/// `X_lastepoch`.
#[derive(Debug, Default)]
struct Lasts {
    start_ns: u64,
    rows: FxHashMap<FlowKey, u32>,
    values: Vec<f64>,
}

impl Lasts {
    fn clear(&mut self, start_ns: u64) {
        self.start_ns = start_ns;
        self.rows.clear();
        self.values.clear();
    }

    /// Adds group `g`'s values (`stride` of them); gives its row.
    fn push(&mut self, g: FlowKey, values: impl Iterator<Item = f64>, stride: usize) -> usize {
        let row = self.values.len() / stride.max(1);
        self.values.extend(values);
        self.rows.insert(g, row as u32);
        row
    }

    fn row_at(&self, row: usize, stride: usize) -> &[f64] {
        self.values.get(row * stride..(row + 1) * stride).unwrap_or(&[])
    }

    /// Group `g`'s values, if it had packets in that window.
    fn row(&self, g: &FlowKey, stride: usize) -> Option<&[f64]> {
        let row = *self.rows.get(g)? as usize;
        Some(self.row_at(row, stride))
    }
}

impl Trigger {
    /// `None` when the predicate cannot be compiled (never for a checked event).
    pub(crate) fn new(spec: EventSpec, rules: Vec<(KeyMask, FlowKey)>, start_ns: u64) -> Option<Self> {
        let aggs = spec.aggregates();
        let state = spec.state_values();
        let pred = CPred::compile(&spec.predicate, &aggs, &state)?;
        let mut lasts: Vec<BaseVar> = Vec::new();
        let mut state_reads = Vec::with_capacity(state.len());
        for v in &state {
            let i = lasts.iter().position(|b| *b == v.base).unwrap_or_else(|| {
                lasts.push(v.base);
                lasts.len() - 1
            });
            state_reads.push((v.last_epoch, i));
        }
        let last = StatFlags::N.union(StatFlags::LAST);
        let reads = aggs
            .iter()
            .map(|a| (Expr::compile(&a.arg), StatFlags::for_agg(a.func)))
            .chain(lasts.iter().map(|&base| {
                let v = PacketExpr::Var(Var {
                    base,
                    last_epoch: false,
                });
                (Expr::compile(&v), last)
            }))
            .collect();
        let value_names: Vec<Name> = aggs
            .iter()
            .map(ToString::to_string)
            .chain(state.iter().map(ToString::to_string))
            .map(Name::from)
            .collect();
        let history = History::new(value_names.len());
        let threshold = match &pred {
            &CPred::CmpAggNum(op, 0, c) if aggs.len() == 1 && state.is_empty() => Some(Threshold {
                func: aggs[0].func,
                op,
                c,
            }),
            _ => None,
        };
        let per_flow = std::array::from_fn(|seen| one_flow_per_group(&spec.granularity, seen as TagsSeen));
        let name = Name::from(spec.name.as_str());
        Some(Trigger {
            interval_ns: spec.interval_ns,
            threshold,
            per_flow,
            has_end: false,
            spec,
            aggs,
            state: state_reads,
            lasts,
            reads,
            value_names,
            name,
            pred: Program::of(&pred),
            spare: None,
            prev: None,
            spare_lasts: Lasts::default(),
            newest_packets: Vec::new(),
            flow_epoch: None,
            rules,
            start_ns,
            end_ns: u64::MAX,
            open: None,
            history,
            exported: false,
        })
    }

    pub(crate) fn interval(&self) -> u64 {
        self.interval_ns
    }

    /// The start of the first window not gathered (`u64::MAX`: none).
    pub(crate) fn end_ns(&self) -> u64 {
        self.end_ns
    }

    /// Sets the start of the first window not gathered (`u64::MAX`: none).
    pub(crate) fn set_end_ns(&mut self, end_ns: u64) {
        self.end_ns = end_ns;
        self.has_end = end_ns != u64::MAX;
    }

    /// The window being gathered, if any.
    pub(crate) fn open(&self) -> Option<&OpenWindow> {
        self.open.as_ref()
    }

    /// Takes the window being gathered out (to close or export it).
    pub(crate) fn take_open(&mut self) -> Option<OpenWindow> {
        self.open.take()
    }

    /// Starts loading the window being gathered.
    #[inline]
    pub(crate) fn prefetch_open(&self) {
        prefetch(&self.open);
    }

    /// True while a window is being gathered.
    #[inline]
    pub(crate) fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// The open window for the epoch starting at `epoch_start`, created on
    /// demand (only triggers with data in an epoch have one).
    pub(crate) fn window_for(&mut self, epoch_start: u64) -> &mut OpenWindow {
        let start_ns = epoch_start - epoch_start % self.interval_ns;
        let spare = &mut self.spare;
        self.open.get_or_insert_with(|| match spare.take() {
            // The last window's containers, already sized for a steady load.
            Some(mut w) => {
                w.start_ns = start_ns;
                w.measured = 0;
                w.unmeasured = 0;
                w.bypassed = 0.0;
                w
            }
            None => OpenWindow {
                start_ns,
                groups: FxHashMap::default(),
                packets: Vec::new(),
                accs: Vec::new(),
                measured: 0,
                unmeasured: 0,
                bypassed: 0.0,
            },
        })
    }

    /// The aggregates' values from their statistics (`accs`, one per read), into `out`.
    pub(crate) fn values_into(&self, accs: &[Acc], out: &mut Vec<f64>) {
        out.clear();
        out.extend(self.aggs.iter().zip(accs).map(|(a, x)| x.value(a.func)));
    }

    /// Appends the state values of one flow tested on its own (its group is
    /// the flow: [`Head::tested_per_flow`]) in the one-epoch window starting
    /// at `epoch_start`, from its statistics `accs` (one per read), to the
    /// aggregates' values in `values`: what [`Trigger::close`] gives a group.
    /// Its latest values join the epoch's, which become the last window's
    /// at [`Trigger::end_flow_epoch`]. True for the epoch's first such flow.
    pub(crate) fn flow_states(
        &mut self,
        epoch_start: u64,
        key: &FlowKey,
        accs: &[Acc],
        values: &mut Vec<f64>,
    ) -> bool {
        let stride = self.lasts.len();
        if stride == 0 {
            return false;
        }
        let first = self.flow_epoch != Some(epoch_start);
        if first {
            self.spare_lasts.clear(epoch_start);
            self.flow_epoch = Some(epoch_start);
        }
        let now = &mut self.spare_lasts;
        let n_aggs = self.aggs.len();
        let row = now.push(*key, accs.iter().skip(n_aggs).map(Acc::last_value), stride);
        let interval = self.spec.interval_ns;
        let before = self
            .prev
            .as_ref()
            .filter(|p| p.start_ns.checked_add(interval) == Some(epoch_start))
            .and_then(|p| p.row(key, stride));
        values.extend(state_values(&self.state, now.row_at(row, stride), before));
        first
    }

    /// Ends the epoch starting at `epoch_start` for a trigger tested flow by
    /// flow: the latest values its flows gathered become the last window's,
    /// as closing the window does.
    pub(crate) fn end_flow_epoch(&mut self, epoch_start: u64) {
        if self.flow_epoch != Some(epoch_start) {
            return;
        }
        self.flow_epoch = None;
        let now = std::mem::take(&mut self.spare_lasts);
        if let Some(old) = self.prev.replace(now) {
            self.spare_lasts = old;
        }
    }

    /// The report of group `g` (its key under the granularity) with these values.
    pub(crate) fn report(
        &self,
        window: Window,
        g: &FlowKey,
        vals: &[f64],
        origin: &Origin,
        completeness: Completeness,
    ) -> Report {
        self.group_report(
            window,
            report_group(g, &self.spec.granularity),
            vals,
            origin,
            completeness,
        )
    }

    /// The report of `group` with these values.
    pub(crate) fn group_report(
        &self,
        window: Window,
        group: GroupKey,
        vals: &[f64],
        origin: &Origin,
        completeness: Completeness,
    ) -> Report {
        Report {
            capture: None,
            missing_hosts: Box::default(),
            event: self.name.clone(),
            window,
            group,
            values: self
                .value_names
                .iter()
                .cloned()
                .zip(vals.iter().copied())
                .collect(),
            origin: origin.clone(),
            completeness,
        }
    }

    /// True when the predicate holds for these values (aggregates, then state values).
    pub(crate) fn fires(&self, vals: &[f64]) -> bool {
        truthy(self.pred.eval(vals))
    }

    /// Degraded mode: the recall of the window just closed (the newest in
    /// the history), of `found` reports, given MONA's per-flow estimate
    /// `mona`, the window's `measured` and `unmeasured` flow-epochs and
    /// its traffic (`completeness`: packets seen and dropped before the
    /// monitor), by `clarion_adapt::groups`: the groups missed are those
    /// that fire once their sums and counts are scaled back up (drops thin
    /// every group's packets; shedding and bypassing take a uniform share
    /// of a group's flows, by hash), and those not seen at all
    /// (Horvitz–Thompson, from the groups seen and their packets).
    /// `mona` where no group fires even scaled up (nothing to extrapolate
    /// from in the window; MONA's estimate draws on the earlier ones).
    /// docs/adapt.md has the derivation.
    pub(crate) fn window_recall(
        &self,
        mona: Option<f64>,
        measured: u64,
        unmeasured: u64,
        found: u64,
        completeness: &Completeness,
    ) -> Option<f64> {
        let one_flow = one_flow_per_group(&self.spec.granularity, 0);
        let sample = sample_of(measured, unmeasured, completeness, one_flow);
        if !sample.sampled() || measured == 0 {
            return mona;
        }
        let scale = sample.scale();
        let mut buf = Vec::new();
        let total: u64 = self.newest_packets.iter().sum();
        let Some((_, groups)) = self.history.newest() else {
            return mona;
        };
        // A sample of the groups where there are many: the window closes
        // on the packet core, which may be overloaded.
        let every = self.newest_packets.len().div_ceil(RECALL_GROUPS).max(1);
        let groups = groups
            .zip(&self.newest_packets)
            .step_by(every)
            .map(|((_, v), &packets)| SeenGroup {
                fires: self.fires(v),
                fires_scaled: self.fires_scaled(v, scale, &mut buf),
                packets,
            });
        sample.recall(found, total, groups, every as u64).or(mona)
    }

    /// Degraded mode: the recall of a window of one-flow groups whose only
    /// record is its `reports` (a trigger tested flow by flow keeps no
    /// group that did not fire), given MONA's estimate `mona`, the
    /// window's `measured` and `unmeasured` flow-epochs and its traffic.
    /// Flows are shed by hash, a uniform share `p` of them measured; a drop
    /// thins each flow's packets to the share `s` seen. The share of the
    /// measured flows' true reports that survive the drops is estimated by
    /// thinning the reports made once more: the share expected to still
    /// fire, each packet kept with probability `s` (exact when the sums
    /// above the threshold follow a power law, which thinning only shifts;
    /// `Trigger::survival`). The recall is `p` times that share; `mona`
    /// without a report (nothing to extrapolate from). A flow every packet
    /// of which was dropped is not counted (docs/adapt.md).
    ///
    /// Of `found` reports, at most [`RETHINNED_REPORTS`] are thinned (every
    /// `found / RETHINNED_REPORTS`th): the window closes on the packet core,
    /// while the ring drops.
    pub(crate) fn rethinned_recall<'a>(
        &self,
        mona: Option<f64>,
        (measured, unmeasured): (u64, u64),
        found: u64,
        reports: impl IntoIterator<Item = &'a Report>,
        completeness: &Completeness,
    ) -> Option<f64> {
        let sample = sample_of(measured, unmeasured, completeness, true);
        if !sample.sampled() {
            return mona;
        }
        let s = sample.seen_share();
        let stride = usize::try_from(found.div_ceil(RETHINNED_REPORTS))
            .unwrap_or(usize::MAX)
            .max(1);
        let (mut found, mut kept) = (0u64, 0.0);
        let (mut vals, mut buf) = (Vec::new(), Vec::new());
        for r in reports.into_iter().step_by(stride) {
            vals.clear();
            vals.extend(r.values.iter().map(|(_, v)| *v));
            found += 1;
            kept += self.survival(&vals, s, &mut buf);
        }
        if found == 0 {
            return mona;
        }
        Some(sample.measured_share() * kept / found as f64)
    }

    /// The probability that a group with these values still fires once
    /// each of its packets is kept with probability `s`. Of `k` packets
    /// (its largest count) `Binomial(k, s)` are kept, and its sums and
    /// counts shrink by the share kept; with no count or many packets
    /// (where the share kept is about `s`) they are scaled by `s`.
    fn survival(&self, vals: &[f64], s: f64, buf: &mut Vec<f64>) -> f64 {
        let k = self
            .aggs
            .iter()
            .zip(vals)
            .filter(|(a, _)| a.func == AggFunc::Count)
            .map(|(_, v)| *v)
            .fold(0.0, f64::max);
        if !(1.0..=BINOMIAL_PACKETS).contains(&k) || s >= 0.9999 {
            return if self.fires_scaled(vals, s, buf) { 1.0 } else { 0.0 };
        }
        let n = k as u32;
        // P(b kept), from P(0) = (1 − s)^n (at least 1e-4^64, no underflow).
        let mut pb = (1.0 - s).powi(n as i32);
        let odds = s / (1.0 - s);
        let mut held = 0.0;
        for b in 0..=n {
            if self.fires_scaled(vals, f64::from(b) / k, buf) {
                held += pb;
            }
            pb *= f64::from(n - b) / f64::from(b + 1) * odds;
        }
        held.min(1.0)
    }

    /// Whether every aggregate is a sum or count of the traffic's own
    /// amount (packets, payload or IP bytes, and of nothing else): what
    /// drops thin in proportion, so that scaling by the share seen undoes
    /// them. Losses, bursts and RTTs change otherwise under drops
    /// (docs/adapt.md, "What the estimate does not see").
    pub(crate) fn scales_with_traffic(&self) -> bool {
        self.aggs.iter().all(|a| {
            let mut amount = matches!(a.func, AggFunc::Sum | AggFunc::Count);
            a.arg.visit_vars(&mut |v| {
                amount &= matches!(v.base, BaseVar::Packets | BaseVar::Volume | BaseVar::Size);
            });
            amount
        })
    }

    /// Whether the predicate holds once every sum and count among the
    /// values is multiplied by `scale` (the other aggregates and the state
    /// values as they are): what a group measured on a uniform share
    /// `1 / scale` of its flows would have given measured on all of them.
    /// `buf` is scratch space.
    pub(crate) fn fires_scaled(&self, vals: &[f64], scale: f64, buf: &mut Vec<f64>) -> bool {
        buf.clear();
        buf.extend_from_slice(vals);
        for (v, agg) in buf.iter_mut().zip(&self.aggs) {
            if matches!(agg.func, AggFunc::Sum | AggFunc::Count) {
                *v *= scale;
            }
        }
        truthy(self.pred.eval(buf))
    }

    /// Closes the open window `w` (which ends at `end_ns`) into the
    /// history, as its newest window of at most `keep`: the values of every
    /// group that had packets, in no particular order. Remembers the latest
    /// values for the next window's `X_lastepoch`.
    pub(crate) fn close(&mut self, mut w: OpenWindow, end_ns: u64, keep: usize) {
        let n_aggs = self.aggs.len();
        let interval = self.spec.interval_ns;
        let mut now = std::mem::take(&mut self.spare_lasts);
        now.clear(w.start_ns);
        self.flow_epoch = None;
        // The last window's values count only if it is the one just before.
        let prev = self.prev.take();
        let adjacent = prev
            .as_ref()
            .filter(|p| p.start_ns.checked_add(interval) == Some(w.start_ns));
        self.history.start_window(
            Window {
                start_ns: w.start_ns,
                end_ns,
            },
            keep,
        );
        let reads = self.reads.len();
        let stride = self.lasts.len();
        self.newest_packets.clear();
        for (g, &i) in &w.groups {
            let i = i as usize;
            if w.packets[i] == 0 {
                continue;
            }
            self.newest_packets.push(w.packets[i]);
            let accs = &w.accs[i * reads..(i + 1) * reads];
            let aggs = self.aggs.iter().zip(accs).map(|(a, x)| x.value(a.func));
            if stride == 0 {
                self.history.push_group(*g, aggs);
                continue;
            }
            let row = now.push(*g, accs[n_aggs..].iter().map(Acc::last_value), stride);
            let before = adjacent.and_then(|p| p.row(g, stride));
            let states = state_values(&self.state, now.row_at(row, stride), before);
            self.history.push_group(*g, aggs.chain(states));
        }
        self.prev = Some(now);
        if let Some(old) = prev {
            self.spare_lasts = old;
        }
        w.groups.clear();
        w.packets.clear();
        w.accs.clear();
        self.spare = Some(w);
    }

    /// Hands the open window `w` (of trigger `id`, ending at `end_ns`) out
    /// as a partial for the merger instead of closing it here; its group
    /// map stays as the next window's spare.
    pub(crate) fn export(&mut self, mut w: OpenWindow, id: TriggerId, end_ns: u64) -> WindowPartial {
        let mut keys = vec![FlowKey::default(); w.packets.len()];
        for (g, &i) in &w.groups {
            if let Some(k) = keys.get_mut(i as usize) {
                *k = *g;
            }
        }
        w.groups.clear();
        let partial = WindowPartial {
            trigger: id,
            window: Window {
                start_ns: w.start_ns,
                end_ns,
            },
            keys,
            packets: std::mem::take(&mut w.packets),
            accs: std::mem::take(&mut w.accs),
            measured: w.measured,
            unmeasured: w.unmeasured_total(),
        };
        self.spare = Some(w);
        partial
    }

    /// Number of statistics each group keeps.
    pub(crate) fn reads_len(&self) -> usize {
        self.reads.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_lang::spec::{AggFunc, BaseVar, Granularity, PacketExpr, Scope, Var};

    fn sum_volume() -> AggCall {
        AggCall {
            func: AggFunc::Sum,
            arg: PacketExpr::Var(Var {
                base: BaseVar::Volume,
                last_epoch: false,
            }),
        }
    }

    /// A predicate tree drawn from `next` (a deterministic generator),
    /// at most `depth` levels deep, over `n` values.
    fn random_pred(next: &mut impl FnMut() -> u64, depth: u32, n: usize) -> CPred {
        let ops = [CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge, CmpOp::Eq, CmpOp::Ne];
        let ariths = [ArithOp::Add, ArithOp::Sub, ArithOp::Mul, ArithOp::Div];
        let nums = [0.0, 1.0, -2.5, 0.5, f64::NAN, 1e300];
        let leaf = depth == 0 || next().is_multiple_of(4);
        if leaf {
            return match next() % 3 {
                0 => CPred::Num(nums[next() as usize % nums.len()]),
                // One index past the values: a missing value reads as NaN.
                1 => CPred::Agg(next() as usize % (n + 1)),
                _ => CPred::CmpAggNum(
                    ops[next() as usize % 6],
                    next() as usize % n,
                    nums[next() as usize % 6],
                ),
            };
        }
        let d = depth - 1;
        match next() % 7 {
            0 => CPred::Neg(Box::new(random_pred(next, d, n))),
            1 => CPred::Not(Box::new(random_pred(next, d, n))),
            2 => CPred::Arith(
                ariths[next() as usize % 4],
                Box::new(random_pred(next, d, n)),
                Box::new(random_pred(next, d, n)),
            ),
            3 => CPred::Cmp(
                ops[next() as usize % 6],
                Box::new(random_pred(next, d, n)),
                Box::new(random_pred(next, d, n)),
            ),
            4 => CPred::And(
                Box::new(random_pred(next, d, n)),
                Box::new(random_pred(next, d, n)),
            ),
            5 => CPred::Or(
                Box::new(random_pred(next, d, n)),
                Box::new(random_pred(next, d, n)),
            ),
            // A right-leaning chain: each level adds one to the stack.
            _ => CPred::Arith(
                ArithOp::Add,
                Box::new(CPred::Agg(0)),
                Box::new(random_pred(next, d, n)),
            ),
        }
    }

    /// The postfix program gives the tree's value (bit for bit, NaN as
    /// NaN) on random predicates, including ones deeper than its fixed stack.
    #[test]
    fn program_equals_the_tree() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let values = [
            vec![1.0, 0.0, -3.0],
            vec![f64::NAN, 2.0, 0.0],
            vec![1e308, -1e308, 0.5],
        ];
        let mut deep = 0;
        for i in 0..20_000 {
            let depth = if i % 100 == 0 { 40 } else { 6 };
            let tree = random_pred(&mut next, depth, 3);
            let program = Program::of(&tree);
            deep += usize::from(program.depth > STACK);
            for vals in &values {
                let (a, b) = (tree.eval(vals), program.eval(vals));
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "{tree:?} on {vals:?}: {a} vs {b}"
                );
            }
        }
        assert!(deep > 0, "no program needed more than the fixed stack");
    }

    fn spec(pred: Pred) -> EventSpec {
        EventSpec {
            capture: None,
            priority: None,
            name: "t".into(),
            filters: vec![Default::default()],
            predicate: pred,
            granularity: Granularity::FIVE_TUPLE,
            interval_ns: 10_000_000,
            scope: Scope::Host,
            drill_downs: Vec::new(),
            on_demand: false,
        }
    }

    #[test]
    fn nan_rules() {
        let a = || Box::new(Pred::Agg(sum_volume()));
        let div0 = Pred::Arith(ArithOp::Div, a(), Box::new(Pred::Num(0.0)));
        let t = Trigger::new(
            spec(Pred::Cmp(
                CmpOp::Ne,
                Box::new(div0.clone()),
                Box::new(Pred::Num(1.0)),
            )),
            vec![],
            0,
        )
        .unwrap();
        assert!(!t.fires(&[5.0]));
        let t = Trigger::new(spec(Pred::Not(Box::new(div0))), vec![], 0).unwrap();
        assert!(t.fires(&[5.0]));
        let t = Trigger::new(
            spec(Pred::Cmp(CmpOp::Gt, a(), Box::new(Pred::Num(4.0)))),
            vec![],
            0,
        )
        .unwrap();
        assert!(t.fires(&[5.0]) && !t.fires(&[4.0]));
    }

    #[test]
    fn threshold_fast_path_agrees_with_the_general_comparison() {
        let ops = [CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge, CmpOp::Eq, CmpOp::Ne];
        for op in ops {
            for c in [4.0, 5.0, f64::NAN] {
                let a = || Box::new(Pred::Agg(sum_volume()));
                let num = || Box::new(Pred::Num(c));
                let fast = Trigger::new(spec(Pred::Cmp(op, a(), num())), vec![], 0).unwrap();
                assert!(matches!(fast.pred.ops[..], [Op::CmpLoadNum(..)]));
                // `x + 0` is not the plain pattern: the general comparison.
                let plus0 = Box::new(Pred::Arith(ArithOp::Add, a(), Box::new(Pred::Num(0.0))));
                let general = Trigger::new(spec(Pred::Cmp(op, plus0, num())), vec![], 0).unwrap();
                for v in [4.0, 5.0, f64::NAN] {
                    assert_eq!(fast.fires(&[v]), general.fires(&[v]), "{op:?} {v} {c}");
                }
                assert_eq!(fast.fires(&[]), general.fires(&[]));
            }
        }
    }

    #[test]
    fn a_head_is_48_bytes() {
        // Four a line and a half: the sweep reads a set's ~8 consecutive heads.
        assert_eq!(std::mem::size_of::<Head>(), 48);
    }

    #[test]
    fn what_the_sweep_reads_fits_the_first_two_lines() {
        assert_eq!(std::mem::align_of::<Trigger>(), 64);
        let end = std::mem::offset_of!(Trigger, history) + std::mem::size_of::<History>();
        assert!(end <= 128, "history ends at byte {end}");
    }

    #[test]
    fn threshold_is_the_predicate_of_one_aggregate_only() {
        let a = || Box::new(Pred::Agg(sum_volume()));
        let t = Trigger::new(
            spec(Pred::Cmp(CmpOp::Ge, a(), Box::new(Pred::Num(4.0)))),
            vec![],
            0,
        )
        .unwrap();
        let th = t.threshold.expect("sum(volume) >= 4");
        for v in [3.0, 4.0, 5.0, f64::NAN] {
            assert_eq!(th.holds(v), t.fires(&[v]), "{v}");
        }
        let two = Pred::And(
            Box::new(Pred::Cmp(CmpOp::Ge, a(), Box::new(Pred::Num(4.0)))),
            Box::new(Pred::Cmp(CmpOp::Le, a(), Box::new(Pred::Num(9.0)))),
        );
        assert!(Trigger::new(spec(two), vec![], 0).unwrap().threshold.is_none());
    }

    #[test]
    fn state_values_follow_the_aggregates() {
        let ack = |last_epoch| {
            Box::new(Pred::State(Var {
                base: BaseVar::Ack,
                last_epoch,
            }))
        };
        let pred = Pred::Cmp(
            CmpOp::Gt,
            Box::new(Pred::Arith(ArithOp::Sub, ack(false), ack(true))),
            Box::new(Pred::Agg(sum_volume())),
        );
        let t = Trigger::new(spec(pred), vec![], 0).unwrap();
        assert_eq!(
            t.value_names.iter().map(|n| &**n).collect::<Vec<_>>(),
            ["sum(volume)", "ack", "ack_lastepoch"]
        );
        assert_eq!(t.reads_len(), 2, "one sum, one latest ack for both state values");
        assert!(t.fires(&[1.0, 10.0, 5.0]) && !t.fires(&[5.0, 10.0, 5.0]));
        assert!(!t.fires(&[1.0, 10.0, f64::NAN]));
    }
}
