//! Measures: the per-packet quantities a flow keeps statistics of.
//!
//! A measure is one distinct aggregate argument (`volume`, `is_lost and
//! is_burst`, …). Several aggregates over the same argument share it:
//! `sum(volume)` and `avg(volume)` need the sum and the number of defined
//! values of one measure. [`StatFlags`] records which statistics are kept,
//! so a flow pays only for what its triggers read.

use clarion_lang::spec::{AggFunc, ArithOp, BaseVar, CmpOp, PacketExpr};
use clarion_wire::PacketRecord;

/// Which running statistics of a measure a flow keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub(crate) struct StatFlags(u8);

impl StatFlags {
    pub(crate) const N: StatFlags = StatFlags(1);
    pub(crate) const NZ: StatFlags = StatFlags(2);
    pub(crate) const SUM: StatFlags = StatFlags(4);
    pub(crate) const MIN: StatFlags = StatFlags(8);
    pub(crate) const MAX: StatFlags = StatFlags(16);
    pub(crate) const SQ: StatFlags = StatFlags(32);
    /// The value with the latest time (ties: the largest), for values read outside aggregates.
    pub(crate) const LAST: StatFlags = StatFlags(64);

    pub(crate) fn for_agg(f: AggFunc) -> StatFlags {
        match f {
            AggFunc::Sum => Self::SUM,
            AggFunc::Count => Self::NZ,
            AggFunc::Min => Self::MIN.union(Self::N),
            AggFunc::Max => Self::MAX.union(Self::N),
            AggFunc::Avg => Self::SUM.union(Self::N),
            AggFunc::Stddev => Self::SUM.union(Self::N).union(Self::SQ),
        }
    }

    pub(crate) const fn union(self, o: StatFlags) -> StatFlags {
        StatFlags(self.0 | o.0)
    }

    pub(crate) const fn has(self, o: StatFlags) -> bool {
        self.0 & o.0 == o.0
    }

    /// 64-bit words these statistics occupy in a flow's block.
    pub(crate) fn words(self) -> usize {
        let mut w = 0;
        for (f, n) in Self::LAYOUT {
            if self.has(f) {
                w += n;
            }
        }
        w
    }

    /// Word offset of one statistic inside the measure's words.
    fn offset_of(self, which: StatFlags) -> usize {
        let mut w = 0;
        for (f, n) in Self::LAYOUT {
            if f == which {
                return w;
            }
            if self.has(f) {
                w += n;
            }
        }
        w
    }

    /// Storage order and width: sums of squares and sums are 128-bit; LAST is (time, value).
    const LAYOUT: [(StatFlags, usize); 7] = [
        (Self::N, 1),
        (Self::NZ, 1),
        (Self::SUM, 2),
        (Self::MIN, 1),
        (Self::MAX, 1),
        (Self::SQ, 2),
        (Self::LAST, 2),
    ];
}

/// Positions in [`Slot::at`], in [`StatFlags::LAYOUT`] order.
const AT_NZ: usize = 1;
const AT_SUM: usize = 2;
const AT_MIN: usize = 3;
const AT_MAX: usize = 4;
const AT_SQ: usize = 5;
const AT_LAST: usize = 6;

/// The statistics sets the packet path updates without testing each flag
/// (a `Slot`'s shape, from its flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// `sum(x)`: the 128-bit sum at the offset.
    Sum,
    /// `count(x)`: the count of non-zero values at the offset.
    Count,
    /// A value read outside aggregates: its count at the offset, then (time, value).
    Last,
    /// Anything else: every kept statistic in turn.
    Other,
}

/// Where one measure's statistics sit inside a flow's stats half-block.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    pub(crate) offset: usize,
    pub(crate) flags: StatFlags,
    shape: Shape,
    /// Word index of each kept statistic, in [`StatFlags::LAYOUT`] order
    /// (computed once: the packet path and the sweep read it for every stat).
    at: [usize; 7],
    words: usize,
}

fn get128(w: &[u64], at: usize) -> i128 {
    (u128::from(w[at]) | (u128::from(w[at + 1]) << 64)) as i128
}

fn put128(w: &mut [u64], at: usize, v: i128) {
    w[at] = v as u64;
    w[at + 1] = ((v as u128) >> 64) as u64;
}

impl Slot {
    pub(crate) fn new(offset: usize, flags: StatFlags) -> Slot {
        let mut at = [0; 7];
        for (i, (f, _)) in StatFlags::LAYOUT.iter().enumerate() {
            at[i] = offset + flags.offset_of(*f);
        }
        let shape = if flags == StatFlags::SUM {
            Shape::Sum
        } else if flags == StatFlags::NZ {
            Shape::Count
        } else if flags == StatFlags::N.union(StatFlags::LAST) {
            Shape::Last
        } else {
            Shape::Other
        };
        Slot {
            offset,
            flags,
            shape,
            at,
            words: flags.words(),
        }
    }

    /// Zeroes the statistics for a new epoch (min/max start at their identities).
    #[inline]
    pub(crate) fn reset(&self, w: &mut [u64]) {
        let base = self.offset;
        for x in &mut w[base..base + self.words] {
            *x = 0;
        }
        if self.flags.has(StatFlags::MIN) {
            w[self.at[AT_MIN]] = i64::MAX as u64;
        }
        if self.flags.has(StatFlags::MAX) {
            w[self.at[AT_MAX]] = i64::MIN as u64;
        }
        if self.flags.has(StatFlags::LAST) {
            w[self.at[AT_LAST] + 1] = i64::MIN as u64;
        }
    }

    /// Folds one defined per-packet value, seen at packet time `t`, into
    /// the statistics. The shapes inline into the packet loop; the rest is
    /// a call.
    #[inline(always)]
    pub(crate) fn update(&self, w: &mut [u64], v: i64, t: u64) {
        let b = self.offset;
        match self.shape {
            Shape::Sum => add_sum(w, b, v),
            Shape::Count => w[b] += u64::from(v != 0),
            Shape::Last => {
                w[b] += 1;
                if (t, v) >= (w[b + 1], w[b + 2] as i64) {
                    w[b + 1] = t;
                    w[b + 2] = v as u64;
                }
            }
            Shape::Other => self.update_each(w, v, t),
        }
    }

    /// [`Slot::update`] flag by flag, for any statistics.
    #[inline(never)]
    fn update_each(&self, w: &mut [u64], v: i64, t: u64) {
        let f = self.flags;
        let b = self.offset;
        if f.has(StatFlags::N) {
            w[b] += 1;
        }
        if f.has(StatFlags::NZ) && v != 0 {
            let at = self.at[AT_NZ];
            w[at] += 1;
        }
        if f.has(StatFlags::SUM) {
            let at = self.at[AT_SUM];
            put128(w, at, get128(w, at).saturating_add(i128::from(v)));
        }
        if f.has(StatFlags::MIN) {
            let at = self.at[AT_MIN];
            w[at] = (w[at] as i64).min(v) as u64;
        }
        if f.has(StatFlags::MAX) {
            let at = self.at[AT_MAX];
            w[at] = (w[at] as i64).max(v) as u64;
        }
        if f.has(StatFlags::SQ) {
            let at = self.at[AT_SQ];
            let sq = i128::from(v) * i128::from(v);
            put128(w, at, get128(w, at).saturating_add(sq));
        }
        if f.has(StatFlags::LAST) {
            let at = self.at[AT_LAST];
            if (t, v) >= (w[at], w[at + 1] as i64) {
                w[at] = t;
                w[at + 1] = v as u64;
            }
        }
    }

    /// Merges the statistics into `acc`, as `acc.merge(&self.read(w))`.
    #[inline]
    pub(crate) fn merge_into(&self, w: &[u64], acc: &mut Acc) {
        let b = self.offset;
        // The shapes merge the statistics they keep and nothing else.
        match self.shape {
            Shape::Sum => acc.sum = acc.sum.saturating_add(get128(w, b)),
            Shape::Count => acc.nz += w[b],
            Shape::Last => {
                acc.n += w[b];
                acc.last = acc.last.max((w[b + 1], w[b + 2] as i64));
            }
            Shape::Other => acc.merge(&self.read(w)),
        }
    }

    /// Word offset of the sum, if this measure keeps one.
    pub(crate) fn sum_at(&self) -> Option<usize> {
        self.flags.has(StatFlags::SUM).then_some(self.at[AT_SUM])
    }

    /// Reads the statistics back as an accumulator (absent ones stay at identity).
    pub(crate) fn read(&self, w: &[u64]) -> Acc {
        let f = self.flags;
        let b = self.offset;
        let mut a = Acc::default();
        if f.has(StatFlags::N) {
            a.n = w[b];
        }
        if f.has(StatFlags::NZ) {
            a.nz = w[self.at[AT_NZ]];
        }
        if f.has(StatFlags::SUM) {
            a.sum = get128(w, self.at[AT_SUM]);
        }
        if f.has(StatFlags::MIN) {
            a.min = w[self.at[AT_MIN]] as i64;
        }
        if f.has(StatFlags::MAX) {
            a.max = w[self.at[AT_MAX]] as i64;
        }
        if f.has(StatFlags::SQ) {
            a.sq = get128(w, self.at[AT_SQ]);
        }
        if f.has(StatFlags::LAST) {
            let at = self.at[AT_LAST];
            a.last = (w[at], w[at + 1] as i64);
        }
        a
    }

    /// Copies the statistics both slots keep from `from` (words `src`) into `self` (words `dst`).
    pub(crate) fn copy_common(&self, dst: &mut [u64], from: &Slot, src: &[u64]) {
        for (flag, n) in StatFlags::LAYOUT {
            if self.flags.has(flag) && from.flags.has(flag) {
                let d = self.offset + self.flags.offset_of(flag);
                let s = from.offset + from.flags.offset_of(flag);
                dst[d..d + n].copy_from_slice(&src[s..s + n]);
            }
        }
    }
}

/// The 128-bit sum at `at` in a record's words `w`, if it fits in 64
/// bits (nearly always: the high word only sign-extends the low one) and
/// `w` holds it. Its value as `Acc::value(AggFunc::Sum)` gives it is its
/// conversion to `f64`.
#[inline(always)]
pub(crate) fn narrow_sum(w: &[u64], at: usize) -> Option<i64> {
    let &[lo, hi] = w.get(at..at + 2)? else {
        return None;
    };
    (hi == ((lo as i64) >> 63) as u64).then_some(lo as i64)
}

/// Adds `v` to the 128-bit sum at `at`: `sum(x)` alone, the most common
/// aggregate. No saturation needed: fewer than 2^64 values of at most 2^63
/// each cannot leave an i128.
#[inline(always)]
pub(crate) fn add_sum(w: &mut [u64], at: usize, v: i64) {
    if let Some(pair) = w.get_mut(at..at + 2) {
        let s = (u128::from(pair[0]) | (u128::from(pair[1]) << 64)).wrapping_add(v as i128 as u128);
        pair[0] = s as u64;
        pair[1] = (s >> 64) as u64;
    }
}

/// Merged statistics of a measure over flows and epochs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Acc {
    pub(crate) n: u64,
    pub(crate) nz: u64,
    pub(crate) sum: i128,
    pub(crate) min: i64,
    pub(crate) max: i64,
    pub(crate) sq: i128,
    /// (time, value) of the latest value; meaningful when `n > 0`.
    pub(crate) last: (u64, i64),
}

impl Default for Acc {
    fn default() -> Self {
        Acc {
            n: 0,
            nz: 0,
            sum: 0,
            min: i64::MAX,
            max: i64::MIN,
            sq: 0,
            last: (0, i64::MIN),
        }
    }
}

impl Acc {
    pub(crate) fn merge(&mut self, o: &Acc) {
        self.n += o.n;
        self.nz += o.nz;
        self.sum = self.sum.saturating_add(o.sum);
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.sq = self.sq.saturating_add(o.sq);
        self.last = self.last.max(o.last);
    }

    /// The latest value (`docs/semantics.md`, *Values outside aggregates*).
    pub(crate) fn last_value(&self) -> f64 {
        if self.n == 0 {
            f64::NAN
        } else {
            self.last.1 as f64
        }
    }

    /// The aggregate's value as the semantics define it (`docs/semantics.md`).
    pub(crate) fn value(&self, f: AggFunc) -> f64 {
        match f {
            AggFunc::Sum => i128_to_f64(self.sum),
            AggFunc::Count => self.nz as f64,
            _ if self.n == 0 => f64::NAN,
            AggFunc::Min => self.min as f64,
            AggFunc::Max => self.max as f64,
            AggFunc::Avg => i128_to_f64(self.sum) / self.n as f64,
            AggFunc::Stddev => {
                let n = i128::from(self.n);
                // N = n·Σx² − (Σx)², exact; rounded to f64 once.
                let exact = n
                    .checked_mul(self.sq)
                    .and_then(|a| self.sum.checked_mul(self.sum).map(|b| a - b));
                match exact {
                    Some(num) => (num as f64 / (n * n) as f64).sqrt(),
                    None => {
                        let mean = self.sum as f64 / self.n as f64;
                        (self.sq as f64 / self.n as f64 - mean * mean).max(0.0).sqrt()
                    }
                }
            }
        }
    }
}

/// A per-packet expression compiled for evaluation on the hot path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Expr {
    Int(i64),
    Var(BaseVar),
    Neg(Box<Expr>),
    Arith(ArithOp, Box<Expr>, Box<Expr>),
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
}

/// `x` rounded to the nearest `f64`, as `x as f64`, but without the slow
/// 128-bit conversion for the sums that fit in 64 bits (nearly all): both
/// round the same exact integer, so the results are identical.
#[inline]
fn i128_to_f64(x: i128) -> f64 {
    match i64::try_from(x) {
        Ok(small) => small as f64,
        Err(_) => x as f64,
    }
}

/// What a flow knows beyond the packet itself.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FlowContext {
    /// Window-scale shift from this flow's SYN, if seen in its current life.
    pub(crate) wscale: Option<u8>,
    pub(crate) is_burst: bool,
    /// Connection state after the packet, for flows that keep it.
    pub(crate) tcp: Option<TcpValues>,
}

/// The connection-state variables on one packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TcpValues {
    pub(crate) is_lost: bool,
    pub(crate) seq: i64,
    pub(crate) ack: i64,
    pub(crate) dup: i64,
}

/// A measure's argument as the packet path computes it: the usual shapes
/// (`volume`, `tcp_flags == 2`) without the interpreter's recursion.
#[derive(Clone, Debug)]
pub(crate) enum Arg {
    Var(BaseVar),
    /// `var op constant`.
    CmpVarInt(CmpOp, BaseVar, i64),
    Expr(Expr),
}

impl Arg {
    pub(crate) fn of(e: &Expr) -> Arg {
        match e {
            Expr::Var(v) => Arg::Var(*v),
            Expr::Cmp(op, l, r) => match (&**l, &**r) {
                (Expr::Var(v), Expr::Int(c)) => Arg::CmpVarInt(*op, *v, *c),
                _ => Arg::Expr(e.clone()),
            },
            _ => Arg::Expr(e.clone()),
        }
    }

    /// The value on a packet, as [`Expr::eval`].
    #[inline]
    pub(crate) fn eval(&self, p: &PacketRecord, cx: &FlowContext) -> Option<i64> {
        match self {
            Arg::Var(v) => var(*v, p, cx),
            Arg::CmpVarInt(op, v, c) => Some(i64::from(cmp_int(*op, var(*v, p, cx)?, *c))),
            Arg::Expr(e) => e.eval(p, cx),
        }
    }
}

#[inline]
fn cmp_int(op: CmpOp, a: i64, b: i64) -> bool {
    match op {
        CmpOp::Lt => a < b,
        CmpOp::Le => a <= b,
        CmpOp::Gt => a > b,
        CmpOp::Ge => a >= b,
        CmpOp::Eq => a == b,
        CmpOp::Ne => a != b,
    }
}

impl Expr {
    pub(crate) fn compile(e: &PacketExpr) -> Expr {
        let b = |x: &PacketExpr| Box::new(Expr::compile(x));
        match e {
            PacketExpr::Int(v) => Expr::Int(*v),
            PacketExpr::Var(v) => Expr::Var(v.base),
            PacketExpr::Neg(x) => Expr::Neg(b(x)),
            PacketExpr::Arith(op, l, r) => Expr::Arith(*op, b(l), b(r)),
            PacketExpr::Cmp(op, l, r) => Expr::Cmp(*op, b(l), b(r)),
            PacketExpr::And(l, r) => Expr::And(b(l), b(r)),
            PacketExpr::Or(l, r) => Expr::Or(b(l), b(r)),
            PacketExpr::Not(x) => Expr::Not(b(x)),
        }
    }

    /// Whether the expression reads `rtt`, so is defined on RTT samples only.
    pub(crate) fn reads_rtt(&self) -> bool {
        match self {
            Expr::Int(_) => false,
            Expr::Var(v) => *v == BaseVar::Rtt,
            Expr::Neg(x) | Expr::Not(x) => x.reads_rtt(),
            Expr::Arith(_, l, r) | Expr::Cmp(_, l, r) | Expr::And(l, r) | Expr::Or(l, r) => {
                l.reads_rtt() || r.reads_rtt()
            }
        }
    }

    /// The expression's value on a packet, `None` where it is undefined.
    #[inline]
    pub(crate) fn eval(&self, p: &PacketRecord, cx: &FlowContext) -> Option<i64> {
        // Most measures are a bare variable: skip the interpreter.
        if let Expr::Var(v) = self {
            return var(*v, p, cx);
        }
        self.eval_with(&|v| var(v, p, cx))
    }

    /// The expression's value on an RTT sample: only `rtt` is defined there.
    pub(crate) fn eval_sample(&self, rtt: i64) -> Option<i64> {
        self.eval_with(&|v| (v == BaseVar::Rtt).then_some(rtt))
    }

    #[inline]
    fn eval_with(&self, var: &impl Fn(BaseVar) -> Option<i64>) -> Option<i64> {
        Some(match self {
            Expr::Int(v) => *v,
            Expr::Var(v) => var(*v)?,
            Expr::Neg(x) => x.eval_with(var)?.saturating_neg(),
            Expr::Arith(op, l, r) => {
                let (a, b) = (l.eval_with(var)?, r.eval_with(var)?);
                match op {
                    ArithOp::Add => a.saturating_add(b),
                    ArithOp::Sub => a.saturating_sub(b),
                    ArithOp::Mul => a.saturating_mul(b),
                    // The checker refuses division inside aggregates; keep it total anyway.
                    ArithOp::Div => a.checked_div(b)?,
                }
            }
            Expr::Cmp(op, l, r) => i64::from(cmp_int(*op, l.eval_with(var)?, r.eval_with(var)?)),
            Expr::And(l, r) => {
                let (a, b) = (l.eval_with(var)?, r.eval_with(var)?);
                i64::from(a != 0 && b != 0)
            }
            Expr::Or(l, r) => {
                let (a, b) = (l.eval_with(var)?, r.eval_with(var)?);
                i64::from(a != 0 || b != 0)
            }
            Expr::Not(x) => i64::from(x.eval_with(var)? == 0),
        })
    }
}

/// The packet variables whose sums `MatchSet` adds on its fast path, by
/// their index in [`common_values`]; `None` for the others (interpreted).
pub(crate) fn common_index(v: BaseVar) -> Option<u8> {
    Some(match v {
        BaseVar::Packets => 0,
        BaseVar::Volume => 1,
        BaseVar::Size => 2,
        BaseVar::IsBurst => 3,
        BaseVar::IsLost => 4,
        _ => return None,
    })
}

/// How many variables [`common_index`] numbers.
pub(crate) const COMMON_VARS: usize = 5;

/// The values of the [`common_index`] variables on a packet and a mask of
/// those defined (bit `i` for index `i`), as [`var`] gives them.
#[inline(always)]
pub(crate) fn common_values(p: &PacketRecord, cx: &FlowContext) -> ([i64; COMMON_VARS], u32) {
    let (lost, has_tcp) = match cx.tcp {
        Some(t) => (i64::from(t.is_lost), 1 << 4),
        None => (0, 0),
    };
    let values = [
        1,
        i64::from(p.volume),
        i64::from(p.size),
        i64::from(cx.is_burst),
        lost,
    ];
    (values, 0b1111 | has_tcp)
}

#[inline(always)]
pub(crate) fn var(v: BaseVar, p: &PacketRecord, cx: &FlowContext) -> Option<i64> {
    Some(match v {
        BaseVar::Packets => 1,
        BaseVar::Volume => i64::from(p.volume),
        BaseVar::Size => i64::from(p.size),
        BaseVar::Ttl => i64::from(p.ttl),
        BaseVar::Ecn => i64::from(p.ecn),
        BaseVar::TcpFlags => i64::from(p.tcp?.flags),
        BaseVar::Rwnd => {
            let t = p.tcp?;
            // RFC 7323: a SYN's window is never scaled; shifts beyond 14 are invalid.
            let shift = if t.flags & clarion_wire::tcp_flags::SYN != 0 {
                0
            } else {
                cx.wscale.unwrap_or(0).min(14)
            };
            i64::from(t.window) << shift
        }
        BaseVar::IsBurst => i64::from(cx.is_burst),
        BaseVar::IsLost => i64::from(cx.tcp?.is_lost),
        BaseVar::Seq => cx.tcp?.seq,
        BaseVar::Ack => cx.tcp?.ack,
        BaseVar::Dup => cx.tcp?.dup,
        // RTT values are samples, never packets.
        BaseVar::Rtt => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shapes' straight-line updates leave the words the flag-by-flag
    /// update leaves, on values out of time order and at the extremes.
    #[test]
    fn shaped_updates_equal_the_general_one() {
        let values = [0i64, 5, -3, i64::MAX, i64::MIN, 7, 7, 0, 1];
        let times = [10u64, 12, 11, 12, 30, 30, 29, 31, 31];
        for flags in [StatFlags::SUM, StatFlags::NZ, StatFlags::N.union(StatFlags::LAST)] {
            let shaped = Slot::new(3, flags);
            assert_ne!(shaped.shape, Shape::Other, "{flags:?}");
            let general = Slot {
                shape: Shape::Other,
                ..shaped
            };
            let (mut a, mut b) = (vec![0u64; 3 + shaped.words], vec![0u64; 3 + shaped.words]);
            shaped.reset(&mut a);
            general.reset(&mut b);
            for (&v, &t) in values.iter().zip(&times) {
                shaped.update(&mut a, v, t);
                general.update(&mut b, v, t);
                assert_eq!(a, b, "{flags:?} after {v} at {t}");
                // Merged into accumulators that already hold something.
                let mut acc_a = general.read(&b);
                let mut acc_b = acc_a;
                shaped.merge_into(&a, &mut acc_a);
                general.merge_into(&b, &mut acc_b);
                assert_eq!(acc_a, acc_b, "{flags:?} merged after {v} at {t}");
            }
        }
    }

    /// `Arg` gives the interpreter's value on every comparison shape.
    #[test]
    fn args_evaluate_as_the_interpreter() {
        let ops = [CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge, CmpOp::Eq, CmpOp::Ne];
        let p = PacketRecord {
            volume: 100,
            ttl: 3,
            ..PacketRecord::default()
        };
        let cx = FlowContext::default();
        for op in ops {
            for (v, c) in [(BaseVar::Volume, 100), (BaseVar::Ttl, 5), (BaseVar::Seq, 0)] {
                let e = Expr::Cmp(op, Box::new(Expr::Var(v)), Box::new(Expr::Int(c)));
                let arg = Arg::of(&e);
                assert!(matches!(arg, Arg::CmpVarInt(..)));
                assert_eq!(
                    arg.eval(&p, &cx),
                    e.eval_with(&|x| var(x, &p, &cx)),
                    "{op:?} {v:?} {c}"
                );
            }
        }
        let e = Expr::Neg(Box::new(Expr::Var(BaseVar::Volume)));
        assert!(matches!(Arg::of(&e), Arg::Expr(_)));
        assert_eq!(Arg::of(&e).eval(&p, &cx), Some(-100));
    }

    #[test]
    fn sums_convert_to_f64_exactly_as_128_bit_values() {
        for x in [
            0i128,
            1,
            -1,
            (1 << 53) + 1,
            -(1 << 53) - 1,
            i128::from(i64::MAX),
            i128::from(i64::MIN),
            i128::from(i64::MAX) + 1,
            i128::MAX,
            i128::MIN,
            123_456_789_012_345_678,
        ] {
            assert_eq!(i128_to_f64(x).to_bits(), (x as f64).to_bits(), "{x}");
            let mut w = [0u64; 3];
            put128(&mut w, 1, x);
            match narrow_sum(&w, 1) {
                Some(v) => assert_eq!((v as f64).to_bits(), (x as f64).to_bits(), "{x}"),
                None => assert!(i64::try_from(x).is_err(), "{x} fits in 64 bits"),
            }
        }
    }

    #[test]
    fn common_values_are_what_var_reads() {
        use clarion_wire::TcpInfo;
        let p = PacketRecord {
            volume: 7,
            size: 60,
            ttl: 3,
            ecn: 1,
            tcp: Some(TcpInfo {
                flags: 0x12,
                window: 9,
                ..TcpInfo::default()
            }),
            ..PacketRecord::default()
        };
        let tcp = TcpValues {
            is_lost: true,
            seq: 5,
            ack: 4,
            dup: 2,
        };
        let all = [
            BaseVar::Packets,
            BaseVar::Volume,
            BaseVar::Size,
            BaseVar::Ttl,
            BaseVar::Ecn,
            BaseVar::TcpFlags,
            BaseVar::Rwnd,
            BaseVar::IsBurst,
            BaseVar::IsLost,
            BaseVar::Seq,
            BaseVar::Ack,
            BaseVar::Dup,
            BaseVar::Rtt,
        ];
        for cx in [
            FlowContext::default(),
            FlowContext {
                wscale: Some(3),
                is_burst: true,
                tcp: Some(tcp),
            },
        ] {
            for q in [p, PacketRecord::default()] {
                let (values, defined) = common_values(&q, &cx);
                for v in all {
                    let Some(i) = common_index(v) else { continue };
                    let i = usize::from(i);
                    let fast = (defined & (1 << i) != 0).then_some(values[i]);
                    assert_eq!(fast, var(v, &q, &cx), "{v:?}");
                }
            }
        }
    }

    #[test]
    fn slot_round_trip_all_stats() {
        let flags = StatFlags::N
            .union(StatFlags::NZ)
            .union(StatFlags::SUM)
            .union(StatFlags::MIN)
            .union(StatFlags::MAX)
            .union(StatFlags::SQ)
            .union(StatFlags::LAST);
        assert_eq!(flags.words(), 10);
        let slot = Slot::new(3, flags);
        let mut w = vec![0u64; 13];
        slot.reset(&mut w);
        for (t, v) in [(1, 5), (2, 0), (4, -3), (4, 7), (3, 9)] {
            slot.update(&mut w, v, t);
        }
        let a = slot.read(&w);
        assert_eq!((a.n, a.nz, a.sum, a.min, a.max, a.sq), (5, 4, 18, -3, 9, 164));
        // The latest time wins; among equal times, the largest value.
        assert_eq!(a.last, (4, 7));
        assert_eq!(a.last_value(), 7.0);
        assert_eq!(a.value(AggFunc::Avg), 3.6);
        // population variance: 164/5 - 3.6² = 19.84
        assert_eq!(
            a.value(AggFunc::Stddev),
            ((5.0f64 * 164.0 - 18.0 * 18.0) / 25.0).sqrt()
        );
    }

    #[test]
    fn empty_measures_are_undefined_except_sum_and_count() {
        let a = Acc::default();
        assert_eq!(a.value(AggFunc::Sum), 0.0);
        assert_eq!(a.value(AggFunc::Count), 0.0);
        assert!(a.value(AggFunc::Min).is_nan());
        assert!(a.value(AggFunc::Stddev).is_nan());
        assert!(a.last_value().is_nan());
    }

    #[test]
    fn partial_layouts_copy_what_they_share() {
        let a = Slot::new(0, StatFlags::SUM.union(StatFlags::N));
        let b = Slot::new(1, StatFlags::SUM.union(StatFlags::MAX));
        let mut wa = vec![0u64; 3];
        a.reset(&mut wa);
        a.update(&mut wa, 10, 0);
        let mut wb = vec![0u64; 4];
        b.reset(&mut wb);
        b.copy_common(&mut wb, &a, &wa);
        let r = b.read(&wb);
        assert_eq!((r.sum, r.max), (10, i64::MIN));
    }
}
