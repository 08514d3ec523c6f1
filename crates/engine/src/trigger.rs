//! An installed trigger: its compiled event, its flows, the window being
//! gathered and the values of its last windows.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use clarion_lang::spec::{AggCall, ArithOp, CmpOp, EventSpec, Pred};
use clarion_report::{Completeness, GroupKey, Window};
use clarion_wire::FlowKey;

use crate::key::KeyMask;
use crate::measure::Acc;

/// A flow as a trigger's list names it: entry number and generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FlowRef {
    pub(crate) entry: u32,
    pub(crate) gen: u32,
}

/// A list of flows in fixed-size chunks: compact (8 bytes a flow), appends
/// never move existing chunks, and the sweep compacts a chunk in place once
/// it has passed it.
#[derive(Debug, Default)]
pub(crate) struct FlowList {
    pub(crate) chunks: Vec<Vec<FlowRef>>,
}

const CHUNK: usize = 1024;

impl FlowList {
    pub(crate) fn push(&mut self, r: FlowRef) {
        match self.chunks.last_mut() {
            Some(c) if c.len() < CHUNK => c.push(r),
            _ => {
                let mut c = Vec::with_capacity(CHUNK);
                c.push(r);
                self.chunks.push(c);
            }
        }
    }

    /// Drops emptied chunks (except the last, which takes appends).
    pub(crate) fn drop_empty_chunks(&mut self) {
        let n = self.chunks.len();
        let mut i = 0;
        self.chunks.retain(|c| {
            i += 1;
            !c.is_empty() || i == n
        });
    }

    pub(crate) fn len(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }
}

/// The predicate with aggregates replaced by their index.
#[derive(Clone, Debug)]
enum CPred {
    Num(f64),
    Agg(usize),
    Neg(Box<CPred>),
    Arith(ArithOp, Box<CPred>, Box<CPred>),
    Cmp(CmpOp, Box<CPred>, Box<CPred>),
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

impl CPred {
    /// `None` when the predicate uses connection state, which is refused at install.
    fn compile(p: &Pred, aggs: &[AggCall]) -> Option<CPred> {
        let b = |x: &Pred| CPred::compile(x, aggs).map(Box::new);
        Some(match p {
            Pred::Num(v) => CPred::Num(*v),
            Pred::Agg(a) => CPred::Agg(aggs.iter().position(|x| x == a)?),
            Pred::State(_) => return None,
            Pred::Neg(x) => CPred::Neg(b(x)?),
            Pred::Arith(op, l, r) => CPred::Arith(*op, b(l)?, b(r)?),
            Pred::Cmp(op, l, r) => CPred::Cmp(*op, b(l)?, b(r)?),
            Pred::And(l, r) => CPred::And(b(l)?, b(r)?),
            Pred::Or(l, r) => CPred::Or(b(l)?, b(r)?),
            Pred::Not(x) => CPred::Not(b(x)?),
        })
    }

    fn eval(&self, vals: &[f64]) -> f64 {
        match self {
            CPred::Num(v) => *v,
            CPred::Agg(i) => vals.get(*i).copied().unwrap_or(f64::NAN),
            CPred::Neg(x) => -x.eval(vals),
            CPred::Arith(op, l, r) => {
                let (a, b) = (l.eval(vals), r.eval(vals));
                match op {
                    ArithOp::Add => a + b,
                    ArithOp::Sub => a - b,
                    ArithOp::Mul => a * b,
                    ArithOp::Div if b == 0.0 => f64::NAN,
                    ArithOp::Div => a / b,
                }
            }
            CPred::Cmp(op, l, r) => {
                let (a, b) = (l.eval(vals), r.eval(vals));
                // IEEE comparisons are already false with NaN, except `!=`.
                bool_f(match op {
                    CmpOp::Lt => a < b,
                    CmpOp::Le => a <= b,
                    CmpOp::Gt => a > b,
                    CmpOp::Ge => a >= b,
                    CmpOp::Eq => a == b,
                    CmpOp::Ne => !a.is_nan() && !b.is_nan() && a != b,
                })
            }
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
    /// Group key → one accumulator per aggregate.
    pub(crate) groups: FxHashMap<FlowKey, Vec<Acc>>,
    pub(crate) completeness: Completeness,
}

/// The values of every group of one closed window.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowValues {
    pub window: Window,
    /// Each group with one value per aggregate, in the order of [`EventSpec::aggregates`].
    pub groups: Vec<(GroupKey, Vec<f64>)>,
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Trigger {
    pub(crate) spec: EventSpec,
    pub(crate) aggs: Vec<AggCall>,
    pub(crate) agg_names: Vec<String>,
    pred: CPred,
    pub(crate) rules: Vec<(KeyMask, FlowKey)>,
    pub(crate) flows: FlowList,
    /// Start of the first window this trigger reports.
    pub(crate) start_ns: u64,
    pub(crate) open: Option<OpenWindow>,
    pub(crate) history: VecDeque<WindowValues>,
}

impl Trigger {
    /// `None` when the predicate needs state the monitor does not compute.
    pub(crate) fn new(spec: EventSpec, rules: Vec<(KeyMask, FlowKey)>, start_ns: u64) -> Option<Self> {
        let aggs = spec.aggregates();
        let pred = CPred::compile(&spec.predicate, &aggs)?;
        let agg_names = aggs.iter().map(ToString::to_string).collect();
        Some(Trigger {
            spec,
            aggs,
            agg_names,
            pred,
            rules,
            flows: FlowList::default(),
            start_ns,
            open: None,
            history: VecDeque::new(),
        })
    }

    pub(crate) fn interval(&self) -> u64 {
        self.spec.interval_ns
    }

    /// The open window for the epoch starting at `epoch_start`, created on demand.
    pub(crate) fn window_for(&mut self, epoch_start: u64) -> &mut OpenWindow {
        let start_ns = epoch_start - epoch_start % self.spec.interval_ns;
        self.open.get_or_insert_with(|| OpenWindow {
            start_ns,
            groups: FxHashMap::default(),
            completeness: Completeness::default(),
        })
    }

    /// True when the predicate holds for these aggregate values.
    pub(crate) fn fires(&self, vals: &[f64]) -> bool {
        truthy(self.pred.eval(vals))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_lang::spec::{AggFunc, BaseVar, Granularity, PacketExpr, Var};

    fn sum_volume() -> AggCall {
        AggCall {
            func: AggFunc::Sum,
            arg: PacketExpr::Var(Var {
                base: BaseVar::Volume,
                last_epoch: false,
            }),
        }
    }

    fn spec(pred: Pred) -> EventSpec {
        EventSpec {
            name: "t".into(),
            filters: vec![Default::default()],
            predicate: pred,
            granularity: Granularity::FIVE_TUPLE,
            interval_ns: 10_000_000,
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
    fn state_predicates_are_refused() {
        let s = spec(Pred::State(Var {
            base: BaseVar::Ack,
            last_epoch: false,
        }));
        assert!(Trigger::new(s, vec![], 0).is_none());
    }

    #[test]
    fn flow_list_chunks() {
        let mut l = FlowList::default();
        for i in 0..2500 {
            l.push(FlowRef { entry: i, gen: 0 });
        }
        assert_eq!(l.chunks.len(), 3);
        l.chunks[0].clear();
        l.drop_empty_chunks();
        assert_eq!((l.chunks.len(), l.len()), (2, 1476));
    }
}
