//! Threshold splitting: a network-wide event as per-host triggers that
//! never miss it, and the network-wide decision from the hosts' values.
//!
//! A network-wide event holds for a group in a window when its predicate
//! holds on the aggregates of the group's packets *on all hosts together*.
//! Each host can only test its own share, so each host gets a weaker,
//! *local* predicate with this guarantee: whenever the network-wide
//! predicate holds, the local one holds on at least one host that saw
//! packets of the group. That host reports; the manager then gathers every
//! host's values for the group and window and decides.
//!
//! # What splits, and how
//! Over `n` hosts, with `S_h` a host's value:
//! - a comparison of a *linear form* of sums and counts with a number,
//!   rewritten as `L > T` or `L >= T` (aggregates on the left, a negative
//!   coefficient turns `<` into `>`): the network-wide `L` is the sum of the
//!   hosts' `L_h`, so if it exceeds `T`, some host's `L_h` exceeds `T / k`
//!   for the `k <= n` hosts with packets, hence `T / n` when `T >= 0`. The
//!   local predicate is `L > T / n`. `T < 0` is refused: hosts without
//!   packets of the group (which never report) would have to count;
//! - `avg(x) > c` (and `>=`, `<`, `<=`) is `sum(x) - c * n(x) > 0` with
//!   `n(x)` the number of packets where `x` is defined (internally
//!   `sum(x * 0 + 1)`), a linear form with `T = 0`;
//! - `max(x) > c` and `min(x) < c` (and `>=`, `<=`): the network-wide
//!   maximum is the largest host's, so the local predicate is the same;
//! - `and` and `or` of those: the local predicate is the `or` of the local
//!   predicates of every comparison (for `and`, the host that makes one
//!   side hold may not make the other hold).
//!
//! Refused, with the reason: `stddev`, `max(x) < c`, `min(x) > c`, `=` and
//! `!=`, `not`, products or quotients of aggregates, connection-state
//! variables outside aggregates.
//!
//! The network-wide decision combines the hosts' values of the local
//! predicate's aggregates (sums and counts add, maxima and minima combine)
//! and evaluates the original predicate on them, `avg` as the combined sum
//! over the combined number of defined values.

use clarion_lang::spec::{AggCall, AggFunc, ArithOp, CmpOp, EventSpec, PacketExpr, Pred, Quorum, Scope};

use crate::ManagerError;

/// How the hosts' values of one aggregate combine into the network's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    Add,
    Max,
    Min,
}

impl Combine {
    fn of(func: AggFunc) -> Combine {
        match func {
            AggFunc::Max => Combine::Max,
            AggFunc::Min => Combine::Min,
            _ => Combine::Add,
        }
    }

    /// Folds one host's value in; an undefined maximum or minimum (NaN: the
    /// host had no defined value) leaves the other side.
    fn fold(self, acc: f64, v: f64) -> f64 {
        match self {
            Combine::Add => acc + v,
            Combine::Max => acc.max(v),
            Combine::Min => acc.min(v),
        }
    }

    fn start(self) -> f64 {
        match self {
            Combine::Add => 0.0,
            Combine::Max | Combine::Min => f64::NAN,
        }
    }
}

/// A network-wide event split for `hosts` hosts. See the module documentation.
#[derive(Clone, Debug)]
pub struct Split {
    /// The trigger every host installs: the event's filters, granularity
    /// and interval with the local predicate.
    pub local: EventSpec,
    /// The local predicate's aggregates, in the order hosts report their
    /// values (`local.aggregates()`), each with how it combines.
    pub needs: Vec<(AggCall, Combine)>,
    network: EventSpec,
    /// A counting event (`across more than ...`): hosts count, values do not add.
    quorum: Option<Quorum>,
    /// The event's aggregates and their canonical text, computed once (a
    /// report names each value).
    aggregates: Vec<(AggCall, String)>,
    hosts: usize,
}

/// Splits `event` for `hosts` hosts, or says why it cannot be.
pub fn split(event: &EventSpec, hosts: usize) -> Result<Split, ManagerError> {
    if hosts == 0 {
        return Err(ManagerError::NoHosts);
    }
    let refuse = |why: String| ManagerError::NotSplittable {
        event: event.name.clone(),
        why,
    };
    let quorum = match event.scope {
        Scope::Quorum(q) => Some(q),
        _ => None,
    };
    let local_pred = match quorum {
        // Each host tests the predicate itself; the manager counts the hosts.
        Some(_) => {
            let mut state = false;
            event.predicate.visit_state(&mut |_| state = true);
            if state {
                return Err(refuse(
                    "a host's connection-state values outside aggregates cannot be polled; use aggregates"
                        .into(),
                ));
            }
            event.predicate.clone()
        }
        None => local(&event.predicate, hosts as f64).map_err(refuse)?,
    };
    let local = EventSpec {
        predicate: local_pred,
        // What a host installs is a host trigger, whatever the event's scope:
        // a monitor refuses network-wide specs. Its drill-downs are the
        // manager's to apply, on network-wide decisions, not the host's.
        scope: Scope::Host,
        drill_downs: Vec::new(),
        on_demand: false,
        ..event.clone()
    };
    let needs = local
        .aggregates()
        .into_iter()
        .map(|a| {
            let c = Combine::of(a.func);
            (a, c)
        })
        .collect();
    Ok(Split {
        local,
        needs,
        network: event.clone(),
        quorum,
        aggregates: event
            .aggregates()
            .into_iter()
            .map(|a| {
                let text = a.to_string();
                (a, text)
            })
            .collect(),
        hosts,
    })
}

impl Split {
    /// Hosts the thresholds were split over.
    pub fn hosts(&self) -> usize {
        self.hosts
    }

    /// The network-wide event as written.
    pub fn network(&self) -> &EventSpec {
        &self.network
    }

    /// Decides one group in one window from the values of [`Split::needs`]
    /// reported by each host that saw packets of the group. Returns whether
    /// the network-wide predicate holds and the network-wide value of each
    /// aggregate of the event's predicate (canonical text, first-use order),
    /// as a report carries them.
    pub fn decide(&self, hosts: &[&[f64]]) -> Result<(bool, Vec<(String, f64)>), ManagerError> {
        if let Some(q) = self.quorum {
            return self.count(q, hosts);
        }
        let mut combined: Vec<f64> = self.needs.iter().map(|(_, c)| c.start()).collect();
        for values in hosts {
            if values.len() != self.needs.len() {
                return Err(ManagerError::ValueCount {
                    got: values.len(),
                    want: self.needs.len(),
                });
            }
            for ((acc, (_, c)), &v) in combined.iter_mut().zip(&self.needs).zip(values.iter()) {
                *acc = c.fold(*acc, v);
            }
        }
        let lookup = |a: &AggCall| -> f64 {
            let find = |want: &AggCall| {
                self.needs
                    .iter()
                    .position(|(n, _)| n == want)
                    .map_or(f64::NAN, |i| combined[i])
            };
            match a.func {
                AggFunc::Avg => {
                    let n = find(&defined_count(&a.arg));
                    if n > 0.0 {
                        find(&AggCall {
                            func: AggFunc::Sum,
                            arg: a.arg.clone(),
                        }) / n
                    } else {
                        f64::NAN
                    }
                }
                _ => find(a),
            }
        };
        let holds = eval(&self.network.predicate, &lookup) != 0.0;
        let values = self
            .aggregates
            .iter()
            .map(|(a, text)| (text.clone(), lookup(a)))
            .collect();
        Ok((holds, values))
    }
}

impl Split {
    /// A counting event: how many hosts' values make the predicate hold,
    /// against the quorum of the placed hosts. The report's one value is
    /// that number, named `hosts`.
    fn count(&self, q: Quorum, hosts: &[&[f64]]) -> Result<(bool, Vec<(String, f64)>), ManagerError> {
        let mut fired = 0;
        for values in hosts {
            if values.len() != self.needs.len() {
                return Err(ManagerError::ValueCount {
                    got: values.len(),
                    want: self.needs.len(),
                });
            }
            let lookup = |a: &AggCall| {
                self.needs
                    .iter()
                    .position(|(n, _)| n == a)
                    .map_or(f64::NAN, |i| values[i])
            };
            if eval(&self.local.predicate, &lookup) != 0.0 {
                fired += 1;
            }
        }
        Ok((
            q.holds(fired, self.hosts),
            vec![("hosts".to_string(), fired as f64)],
        ))
    }
}

/// `sum(x * 0 + 1)`: the number of packets where `x` is defined.
fn defined_count(x: &PacketExpr) -> AggCall {
    AggCall {
        func: AggFunc::Sum,
        arg: PacketExpr::Arith(
            ArithOp::Add,
            Box::new(PacketExpr::Arith(
                ArithOp::Mul,
                Box::new(x.clone()),
                Box::new(PacketExpr::Int(0)),
            )),
            Box::new(PacketExpr::Int(1)),
        ),
    }
}

/// The local predicate of a predicate (see the module documentation).
fn local(p: &Pred, hosts: f64) -> Result<Pred, String> {
    match p {
        Pred::And(l, r) | Pred::Or(l, r) => Ok(Pred::Or(Box::new(local(l, hosts)?), Box::new(local(r, hosts)?))),
        Pred::Cmp(op, l, r) => atom(*op, l, r, hosts),
        Pred::Not(_) => Err(format!(
            "`{p}` negates a condition; a host cannot tell alone that a network-wide condition fails (write the comparison the other way round)"
        )),
        _ => Err(format!("`{p}` is not a comparison")),
    }
}

fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Ge => CmpOp::Le,
        other => other,
    }
}

fn atom(op: CmpOp, l: &Pred, r: &Pred, hosts: f64) -> Result<Pred, String> {
    let text = Pred::Cmp(op, Box::new(l.clone()), Box::new(r.clone())).to_string();
    if matches!(op, CmpOp::Eq | CmpOp::Ne) {
        return Err(format!(
            "`{text}`: = and != cannot be split into per-host thresholds; use <, <=, > or >="
        ));
    }
    // An aggregate compared with a number: max, min and avg have rules of their own.
    let single = match (l, r) {
        (Pred::Agg(a), Pred::Num(c)) => Some((a, op, *c)),
        (Pred::Num(c), Pred::Agg(a)) => Some((a, flip(op), *c)),
        _ => None,
    };
    let form = match single {
        Some((a, op, c)) => match (a.func, op) {
            (AggFunc::Max, CmpOp::Gt | CmpOp::Ge) | (AggFunc::Min, CmpOp::Lt | CmpOp::Le) => {
                return Ok(Pred::Cmp(op, Box::new(Pred::Agg(a.clone())), Box::new(Pred::Num(c))));
            }
            (AggFunc::Max, _) => {
                return Err(format!(
                    "`{text}`: a maximum below a bound needs every host's maximum; only `max(..) > c` or `>=` split"
                ))
            }
            (AggFunc::Min, _) => {
                return Err(format!(
                    "`{text}`: a minimum above a bound needs every host's minimum; only `min(..) < c` or `<=` split"
                ))
            }
            (AggFunc::Avg, _) => {
                // avg(x) op c  <=>  sum(x) - c * n(x) op 0, for groups with a defined x.
                let sum = AggCall {
                    func: AggFunc::Sum,
                    arg: a.arg.clone(),
                };
                Some((
                    op,
                    Linear {
                        terms: vec![(sum, 1.0), (defined_count(&a.arg), -c)],
                        constant: 0.0,
                    },
                ))
            }
            _ => None,
        },
        None => None,
    };
    let (op, diff) = match form {
        Some(f) => f,
        None => {
            let l = linear(l).map_err(|why| format!("`{text}`: {why}"))?;
            let r = linear(r).map_err(|why| format!("`{text}`: {why}"))?;
            (op, l.plus(r, -1.0))
        }
    };
    // diff op 0, i.e. terms op -constant; turn < into > by negating.
    let (op, terms, threshold) = match op {
        CmpOp::Gt | CmpOp::Ge => (op, diff.terms, -diff.constant),
        _ => (
            flip(op),
            diff.terms.into_iter().map(|(a, k)| (a, -k)).collect::<Vec<_>>(),
            diff.constant,
        ),
    };
    // Terms whose coefficient cancelled stay (as `0 * ..`): the decision
    // does not need them, but the report carries every aggregate's value.
    if terms.iter().all(|(_, k)| *k == 0.0) {
        return Err(format!("`{text}` compares numbers only"));
    }
    if threshold < 0.0 || !threshold.is_finite() {
        return Err(format!(
            "`{text}` holds when the aggregates are below a positive bound, so hosts without packets of a group would have to report too; only conditions that grow with traffic split (e.g. `sum(..) > c` with c >= 0)"
        ));
    }
    // `+ 0.0` turns a threshold of -0 into 0.
    Ok(Pred::Cmp(
        op,
        Box::new(pred_of(&terms)),
        Box::new(Pred::Num(threshold / hosts + 0.0)),
    ))
}

/// `Σ k·aggregate + constant`, over sums and counts only.
#[derive(Clone, Debug, Default)]
struct Linear {
    terms: Vec<(AggCall, f64)>,
    constant: f64,
}

impl Linear {
    fn plus(mut self, o: Linear, sign: f64) -> Linear {
        for (a, k) in o.terms {
            match self.terms.iter_mut().find(|(b, _)| *b == a) {
                Some((_, j)) => *j += sign * k,
                None => self.terms.push((a, sign * k)),
            }
        }
        self.constant += sign * o.constant;
        self
    }

    fn scale(mut self, k: f64) -> Linear {
        for (_, j) in &mut self.terms {
            *j *= k;
        }
        self.constant *= k;
        self
    }

    fn constant_only(&self) -> Option<f64> {
        self.terms.is_empty().then_some(self.constant)
    }
}

fn linear(p: &Pred) -> Result<Linear, String> {
    Ok(match p {
        Pred::Num(c) => Linear {
            terms: Vec::new(),
            constant: *c,
        },
        Pred::Agg(a) => match a.func {
            AggFunc::Sum | AggFunc::Count => Linear {
                terms: vec![(a.clone(), 1.0)],
                constant: 0.0,
            },
            AggFunc::Avg => return Err(format!("{a} may only be compared with a number")),
            AggFunc::Max | AggFunc::Min => return Err(format!("{a} may only be compared with a number")),
            AggFunc::Stddev => return Err(format!("{a} does not combine from per-host thresholds")),
        },
        Pred::Neg(x) => linear(x)?.scale(-1.0),
        Pred::Arith(op, l, r) => {
            let (l, r) = (linear(l)?, linear(r)?);
            match op {
                ArithOp::Add => l.plus(r, 1.0),
                ArithOp::Sub => l.plus(r, -1.0),
                ArithOp::Mul => match (l.constant_only(), r.constant_only()) {
                    (Some(k), _) => r.scale(k),
                    (_, Some(k)) => l.scale(k),
                    _ => return Err("a product of aggregates does not add up across hosts".into()),
                },
                ArithOp::Div => match r.constant_only() {
                    Some(k) if k != 0.0 => l.scale(1.0 / k),
                    _ => return Err("a division by an aggregate does not add up across hosts".into()),
                },
            }
        }
        Pred::State(v) => return Err(format!("`{v}` is one host's connection state, not an aggregate")),
        Pred::Cmp(..) | Pred::And(..) | Pred::Or(..) | Pred::Not(..) => {
            return Err("a condition inside arithmetic".into())
        }
    })
}

fn pred_of(terms: &[(AggCall, f64)]) -> Pred {
    let term = |a: &AggCall, k: f64| -> Pred {
        let agg = Pred::Agg(a.clone());
        if k == 1.0 {
            agg
        } else {
            Pred::Arith(ArithOp::Mul, Box::new(Pred::Num(k)), Box::new(agg))
        }
    };
    let mut it = terms.iter();
    let Some((a, k)) = it.next() else {
        return Pred::Num(0.0);
    };
    let mut out = term(a, *k);
    for (a, k) in it {
        out = if *k < 0.0 {
            Pred::Arith(ArithOp::Sub, Box::new(out), Box::new(term(a, -k)))
        } else {
            Pred::Arith(ArithOp::Add, Box::new(out), Box::new(term(a, *k)))
        };
    }
    out
}

/// Evaluates a predicate on aggregate values: comparisons give 1 or 0 and
/// are false on an undefined (NaN) side, as in the monitor.
pub(crate) fn eval(p: &Pred, value: &dyn Fn(&AggCall) -> f64) -> f64 {
    let b = |x: bool| if x { 1.0 } else { 0.0 };
    match p {
        Pred::Num(c) => *c,
        Pred::Agg(a) => value(a),
        Pred::State(_) => f64::NAN,
        Pred::Neg(x) => -eval(x, value),
        Pred::Arith(op, l, r) => {
            let (l, r) = (eval(l, value), eval(r, value));
            match op {
                ArithOp::Add => l + r,
                ArithOp::Sub => l - r,
                ArithOp::Mul => l * r,
                ArithOp::Div if r == 0.0 => f64::NAN,
                ArithOp::Div => l / r,
            }
        }
        Pred::Cmp(op, l, r) => {
            let (l, r) = (eval(l, value), eval(r, value));
            b(match op {
                CmpOp::Lt => l < r,
                CmpOp::Le => l <= r,
                CmpOp::Gt => l > r,
                CmpOp::Ge => l >= r,
                CmpOp::Eq => l == r,
                CmpOp::Ne => !l.is_nan() && !r.is_nan() && l != r,
            })
        }
        Pred::And(l, r) => b(eval(l, value) != 0.0 && eval(r, value) != 0.0),
        Pred::Or(l, r) => b(eval(l, value) != 0.0 || eval(r, value) != 0.0),
        Pred::Not(x) => b(eval(x, value) == 0.0),
    }
}

#[cfg(test)]
mod tests;
