//! `when PREDICATE`: the predicate and the aggregates' per-packet arguments.
//!
//! Numbers lose their units here (`docs/semantics.md`): sizes become
//! bytes, rates become bytes per interval, and a percentage compared with
//! a `sum` or `count` becomes a ratio to the group's packet count.

use crate::ast::{BinOp, Expr, ExprKind, Field, NumLit, Quantity, UnOp, Unit};
use crate::error::{codes, Diagnostic};
use crate::span::Span;
use crate::spec::{AggCall, AggFunc, ArithOp, BaseVar, CmpOp, PacketExpr, Pred, Var};
use crate::suggest::closest;

const LASTEPOCH: &str = "_lastepoch";

/// Lowers the predicate of an event whose interval is `interval_ns`.
pub fn lower_pred(e: &Expr, interval_ns: u64, diags: &mut Vec<Diagnostic>) -> Option<Pred> {
    Cx { interval_ns, diags }.pred(e)
}

struct Cx<'a> {
    interval_ns: u64,
    diags: &'a mut Vec<Diagnostic>,
}

fn cmp_op(op: BinOp) -> Option<CmpOp> {
    Some(match op {
        BinOp::Lt => CmpOp::Lt,
        BinOp::Le => CmpOp::Le,
        BinOp::Gt => CmpOp::Gt,
        BinOp::Ge => CmpOp::Ge,
        BinOp::Eq => CmpOp::Eq,
        BinOp::Ne => CmpOp::Ne,
        _ => return None,
    })
}

fn arith_op(op: BinOp) -> Option<ArithOp> {
    Some(match op {
        BinOp::Add => ArithOp::Add,
        BinOp::Sub => ArithOp::Sub,
        BinOp::Mul => ArithOp::Mul,
        BinOp::Div => ArithOp::Div,
        _ => return None,
    })
}

fn percent(e: &Expr) -> Option<f64> {
    match &e.kind {
        ExprKind::Num(Quantity {
            value,
            unit: Some(Unit::Percent),
            ..
        }) => Some(value.as_f64()),
        _ => None,
    }
}

/// Whether `e` is exactly a `sum(...)` or `count(...)` call.
fn is_share_aggregate(e: &Expr) -> bool {
    matches!(&e.kind, ExprKind::Call { func, .. } if func == "sum" || func == "count")
}

fn packets_sum() -> Pred {
    Pred::Agg(AggCall {
        func: AggFunc::Sum,
        arg: PacketExpr::Var(Var {
            base: BaseVar::Packets,
            last_epoch: false,
        }),
    })
}

fn var_names() -> impl Iterator<Item = String> {
    BaseVar::ALL
        .into_iter()
        .flat_map(|b| [b.name().to_string(), format!("{}{LASTEPOCH}", b.name())])
}

impl Cx<'_> {
    fn push(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    fn pred(&mut self, e: &Expr) -> Option<Pred> {
        match &e.kind {
            ExprKind::Num(q) => self.number(q).map(Pred::Num),
            ExprKind::Var(name) => {
                let v = self.var(name, e.span)?;
                if v.base.is_state() || v.last_epoch {
                    return Some(Pred::State(v));
                }
                self.push(
                    Diagnostic::new(
                        codes::BARE_VARIABLE,
                        format!("`{name}` is a per-packet value and needs an aggregate"),
                        e.span,
                    )
                    .here("needs an aggregate")
                    .help(format!(
                        "wrap it in an aggregate, e.g. `max({name}) > 5` or `sum({name}) > 5`"
                    )),
                );
                None
            }
            ExprKind::Call { func, func_span, arg } => self.agg(func, *func_span, arg).map(Pred::Agg),
            ExprKind::Unary { op, expr, .. } => {
                let x = Box::new(self.pred(expr)?);
                Some(match op {
                    UnOp::Neg => Pred::Neg(x),
                    UnOp::Not => Pred::Not(x),
                })
            }
            ExprKind::Binary { op, left, right, .. } => {
                if let Some(cmp) = cmp_op(*op) {
                    if percent(left).is_some() || percent(right).is_some() {
                        return self.share(cmp, left, right);
                    }
                }
                let (l, r) = (self.pred(left), self.pred(right));
                let (l, r) = (Box::new(l?), Box::new(r?));
                Some(match (*op, cmp_op(*op), arith_op(*op)) {
                    (_, Some(c), _) => Pred::Cmp(c, l, r),
                    (_, _, Some(a)) => Pred::Arith(a, l, r),
                    (BinOp::And, ..) => Pred::And(l, r),
                    _ => Pred::Or(l, r),
                })
            }
        }
    }

    /// A comparison with a percentage on (at least) one side: `agg CMP N%`
    /// becomes `agg / sum(packets) CMP N/100`, sides kept as written.
    fn share(&mut self, op: CmpOp, left: &Expr, right: &Expr) -> Option<Pred> {
        let side = |cx: &mut Cx, this: &Expr, other: &Expr| -> Option<Pred> {
            if let Some(p) = percent(this) {
                if is_share_aggregate(other) {
                    return Some(Pred::Num(p / 100.0));
                }
                cx.misplaced_percent(this.span);
                return None;
            }
            let agg = cx.pred(this)?;
            Some(Pred::Arith(ArithOp::Div, Box::new(agg), Box::new(packets_sum())))
        };
        let l = side(self, left, right);
        let r = side(self, right, left);
        Some(Pred::Cmp(op, Box::new(l?), Box::new(r?)))
    }

    fn misplaced_percent(&mut self, span: Span) {
        self.push(
            Diagnostic::new(
                codes::MISPLACED_PERCENT,
                "a percentage must be compared with a `sum(...)` or `count(...)`",
                span,
            )
            .here("not compared with a `sum` or `count`")
            .help("a percentage is a share of the group's packets, e.g. `sum(is_lost) > 10%`"),
        );
    }

    /// A predicate number in base units.
    fn number(&mut self, q: &Quantity) -> Option<f64> {
        let Some(unit) = q.unit else {
            return Some(q.value.as_f64());
        };
        if let Some(bytes) = unit.bytes() {
            return Some(match q.value {
                NumLit::Int(n) => (u128::from(n) * u128::from(bytes)) as f64,
                NumLit::Dec(x) => x * bytes as f64,
            });
        }
        if let Some(bps) = unit.bits_per_second() {
            // R bits/s over the interval, in bytes: R / 8 × I.
            return Some(q.value.as_f64() * bps as f64 * self.interval_ns as f64 / 8e9);
        }
        if let Some(ns) = unit.nanos() {
            // Times compare with `rtt`, which is in nanoseconds.
            return Some(q.value.as_f64() * ns as f64);
        }
        self.misplaced_percent(q.span);
        None
    }

    fn var(&mut self, name: &str, span: Span) -> Option<Var> {
        let (base, last_epoch) = match name.strip_suffix(LASTEPOCH) {
            Some(base) => (base, true),
            None => (name, false),
        };
        if let Some(base) = BaseVar::from_name(base) {
            return Some(Var { base, last_epoch });
        }
        let d = Diagnostic::new(
            codes::UNKNOWN_VARIABLE,
            format!("unknown variable `{name}`"),
            span,
        )
        .here("not a variable");
        let names: Vec<String> = var_names().collect();
        let d = if let Some(s) = closest(name, names.iter().map(String::as_str)) {
            d.help(format!("did you mean `{s}`?"))
        } else if AggFunc::ALL.iter().any(|f| f.name() == name) {
            d.help(format!(
                "`{name}` is an aggregate: call it, e.g. `{name}(volume)`"
            ))
        } else if Field::from_name(name).is_some() {
            d.help(format!("`{name}` is a header field: use it in `filter` or `per`"))
        } else {
            let list = BaseVar::ALL.map(|b| format!("`{}`", b.name())).join(", ");
            d.help(format!("the variables are {list}"))
        };
        self.push(d);
        None
    }

    fn agg(&mut self, func: &str, func_span: Span, arg: &Expr) -> Option<AggCall> {
        let f = AggFunc::ALL.into_iter().find(|f| f.name() == func);
        if f.is_none() {
            let d = Diagnostic::new(
                codes::UNKNOWN_FUNCTION,
                format!("unknown aggregate `{func}`"),
                func_span,
            )
            .here("not an aggregate");
            let list = AggFunc::ALL.map(|f| format!("`{}`", f.name())).join(", ");
            self.push(match closest(func, AggFunc::ALL.map(AggFunc::name)) {
                Some(s) => d.help(format!("did you mean `{s}`?")),
                None => d.help(format!("the aggregates are {list}")),
            });
        }
        let arg = self.packet(arg, (func, func_span));
        Some(AggCall { func: f?, arg: arg? })
    }

    /// The argument of the aggregate `outer`: a per-packet integer expression.
    fn packet(&mut self, e: &Expr, outer: (&str, Span)) -> Option<PacketExpr> {
        let (func, func_span) = outer;
        match &e.kind {
            ExprKind::Num(q) => self.packet_number(q, func),
            ExprKind::Var(name) => {
                let v = self.var(name, e.span)?;
                if v.last_epoch {
                    self.push(
                        Diagnostic::new(
                            codes::LASTEPOCH_IN_AGGREGATE,
                            format!("`{name}` cannot be used inside an aggregate"),
                            e.span,
                        )
                        .here("one value per group")
                        .label(func_span, "in this aggregate")
                        .help(format!(
                            "`{name}` is one value per group, not per packet: use it outside the aggregate"
                        )),
                    );
                    return None;
                }
                Some(PacketExpr::Var(v))
            }
            ExprKind::Call { func_span: inner, .. } => {
                self.push(
                    Diagnostic::new(codes::NESTED_AGGREGATE, "aggregates cannot be nested", *inner)
                        .here("nested aggregate")
                        .label(func_span, "inside this aggregate")
                        .help("an aggregate's argument is computed per packet; combine aggregates outside, e.g. `max(ttl) - min(ttl) > 10`"),
                );
                None
            }
            ExprKind::Unary { op, expr, .. } => {
                let x = Box::new(self.packet(expr, outer)?);
                Some(match op {
                    UnOp::Neg => PacketExpr::Neg(x),
                    UnOp::Not => PacketExpr::Not(x),
                })
            }
            ExprKind::Binary {
                op: BinOp::Div,
                op_span,
                left,
                right,
            } => {
                let _ = self.packet(left, outer);
                let _ = self.packet(right, outer);
                self.push(
                    Diagnostic::new(
                        codes::DIVISION_IN_AGGREGATE,
                        "division is not allowed inside an aggregate",
                        *op_span,
                    )
                    .here("division")
                    .label(func_span, "in this aggregate")
                    .help(format!(
                        "divide the aggregate instead: `{func}({left}) / {right}`"
                    )),
                );
                None
            }
            ExprKind::Binary { op, left, right, .. } => {
                let (l, r) = (self.packet(left, outer), self.packet(right, outer));
                let (l, r) = (Box::new(l?), Box::new(r?));
                Some(match (*op, cmp_op(*op), arith_op(*op)) {
                    (_, Some(c), _) => PacketExpr::Cmp(c, l, r),
                    (_, _, Some(a)) => PacketExpr::Arith(a, l, r),
                    (BinOp::And, ..) => PacketExpr::And(l, r),
                    _ => PacketExpr::Or(l, r),
                })
            }
        }
    }

    fn packet_number(&mut self, q: &Quantity, func: &str) -> Option<PacketExpr> {
        let err = |code, msg: &str, help: String| Diagnostic::new(code, msg, q.span).help(help);
        let d = match (q.value, q.unit) {
            (NumLit::Dec(_), _) => err(
                codes::BAD_PACKET_NUMBER,
                "decimal numbers are not allowed inside an aggregate",
                "per-packet values are integers; compare the aggregate with a decimal instead: `avg(ttl) > 0.5`"
                    .to_string(),
            ),
            (_, Some(Unit::Percent)) => err(
                codes::MISPLACED_PERCENT,
                "a percentage is not allowed inside an aggregate",
                format!("compare the aggregate with it instead, e.g. `{func}(is_lost) > 10%`"),
            ),
            (_, Some(u)) if u.bits_per_second().is_some() => err(
                codes::MISPLACED_UNIT,
                "a rate is not allowed inside an aggregate",
                format!("compare the aggregate with it instead, e.g. `{func}(volume) > 100Mbps`"),
            ),
            (NumLit::Int(n), unit) => {
                let scale = unit.and_then(|u| u.bytes().or(u.nanos())).unwrap_or(1);
                match n.checked_mul(scale).and_then(|v| i64::try_from(v).ok()) {
                    Some(v) => return Some(PacketExpr::Int(v)),
                    None => err(
                        codes::BAD_PACKET_NUMBER,
                        "number too large for a per-packet expression",
                        format!("per-packet values are at most {}", i64::MAX),
                    ),
                }
            }
        };
        self.push(d);
        None
    }
}
