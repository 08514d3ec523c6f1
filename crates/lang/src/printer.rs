//! The canonical pretty-printer: `Display` for the syntax tree.
//!
//! The output is the canonical form of a source: one clause per line,
//! indented two spaces, in the order `filter`s, `when`, `per`, `every`,
//! `across hosts`, `then install`s, `then capture`, `on demand`, `priority`; a blank line between events; comments dropped; words
//! instead of `&&`, `||`, `!`; the fewest parentheses that keep the tree's
//! shape; a unit written right after its number (`125KB`). Parsing the
//! output gives back the same tree, up to spans.

use std::fmt::{self, Display, Formatter};

use crate::ast::{
    Cond, CondValue, Dest, Event, Export, Expr, ExprKind, File, FilterClause, GroupField, NumLit, Per,
    PerKind, Quantity, SendWhat, UnOp, Unit,
};

impl Display for File {
    /// Events first, then export policies.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let items = self
            .events
            .iter()
            .map(|e| e as &dyn Display)
            .chain(self.exports.iter().map(|x| x as &dyn Display));
        for (i, item) in items.enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{item}")?;
        }
        Ok(())
    }
}

impl Display for Export {
    /// `export NAME`, its filters, then its `send` clauses.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        writeln!(f, "export {}", self.name)?;
        if !self.interfaces.is_empty() {
            let names: Vec<&str> = self.interfaces.iter().map(|(n, _)| n.as_str()).collect();
            writeln!(f, "  interface {}", names.join(", "))?;
        }
        for filter in &self.filters {
            writeln!(f, "  {filter}")?;
        }
        for s in &self.sends {
            match &s.what {
                SendWhat::Headers => f.write_str("  send headers")?,
                SendWhat::Packets { snap: None } => f.write_str("  send packets")?,
                SendWhat::Packets { snap: Some(q) } => write!(f, "  send packets snap {q}")?,
            }
            f.write_str(" to ")?;
            let opt = |f: &mut Formatter<'_>, word: &str, v: &Option<(u64, crate::span::Span)>| match v {
                Some((n, _)) => write!(f, " {word} {n}"),
                None => Ok(()),
            };
            match &s.dest {
                Dest::Collector { addr, port } => {
                    write!(f, "collector {addr}")?;
                    opt(f, "port", port)?;
                }
                Dest::Vxlan { addr, port, vni } => {
                    write!(f, "vxlan {addr}")?;
                    opt(f, "port", port)?;
                    opt(f, "vni", vni)?;
                }
                Dest::Pcapng { rotate } => {
                    f.write_str("pcapng")?;
                    for (i, q) in rotate.iter().enumerate() {
                        f.write_str(if i == 0 { " rotate " } else { " or " })?;
                        write!(f, "{q}")?;
                    }
                }
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

impl Display for Event {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        writeln!(f, "event {}", self.name)?;
        for filter in &self.filters {
            writeln!(f, "  {filter}")?;
        }
        writeln!(f, "  when {}", self.when)?;
        if let Some(per) = &self.per {
            writeln!(f, "  {per}")?;
        }
        if let Some(every) = &self.every {
            writeln!(f, "  every {every}")?;
        }
        if let Some(a) = &self.across {
            match &a.quorum {
                None => writeln!(f, "  across hosts")?,
                Some(q) if q.percent => writeln!(f, "  across more than {}% of hosts", q.n)?,
                Some(q) => writeln!(f, "  across more than {} hosts", q.n)?,
            }
        }
        for t in &self.then {
            write!(f, "  then install {}", t.event)?;
            for (i, g) in t.on.iter().enumerate() {
                f.write_str(if i == 0 { " on " } else { ", " })?;
                write!(f, "{g}")?;
            }
            if let Some(d) = &t.duration {
                write!(f, " for {d}")?;
            }
            writeln!(f)?;
        }
        if let Some(c) = &self.capture {
            f.write_str("  then capture")?;
            if let Some(q) = &c.before {
                write!(f, " {q} before")?;
            }
            if let Some(q) = &c.after {
                write!(f, " {q} after")?;
            }
            writeln!(f)?;
        }
        if self.on_demand.is_some() {
            writeln!(f, "  on demand")?;
        }
        if let Some((n, _)) = self.priority {
            writeln!(f, "  priority {n}")?;
        }
        if let Some(a) = &self.alert {
            let mut parts = Vec::new();
            if let Some((n, _)) = a.after {
                parts.push(format!("after {n} {}", windows(n)));
            }
            if let Some((n, _)) = a.resolve_after {
                parts.push(format!("resolve after {n} {}", windows(n)));
            }
            if let Some((s, _)) = a.severity {
                parts.push(format!("severity {}", s.name()));
            }
            writeln!(f, "  alert {}", parts.join(", "))?;
        }
        Ok(())
    }
}

impl Display for FilterClause {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if self.conds.is_empty() {
            return f.write_str("filter *");
        }
        f.write_str("filter ")?;
        for (i, c) in self.conds.iter().enumerate() {
            if i > 0 {
                f.write_str(" and ")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

impl Display for Cond {
    /// `in` for ranges and for prefixes shorter than a full address, `=` otherwise.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let field = self.field.name();
        match &self.value {
            CondValue::Any => write!(f, "{field} = *"),
            CondValue::Int(n) => write!(f, "{field} = {n}"),
            CondValue::Range(lo, hi) => write!(f, "{field} in {lo}..{hi}"),
            CondValue::Name(n) => write!(f, "{field} = {n}"),
            CondValue::Addr { addr, len: None } => write!(f, "{field} = {addr}"),
            CondValue::Addr { addr, len: Some(len) } => {
                let full = if addr.is_ipv4() { 32 } else { 128 };
                let op = if *len < full { "in" } else { "=" };
                write!(f, "{field} {op} {addr}/{len}")
            }
        }
    }
}

impl Display for Per {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match &self.kind {
            PerKind::FiveTuple => f.write_str("per 5tuple"),
            PerKind::Fields(fields) if fields.len() == 1 => write!(f, "per {}", fields[0]),
            PerKind::Fields(fields) => {
                f.write_str("per (")?;
                for (i, g) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{g}")?;
                }
                f.write_str(")")
            }
        }
    }
}

impl Display for GroupField {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(self.field.name())?;
        for l in &self.lens {
            write!(f, "/{}", l.value)?;
        }
        Ok(())
    }
}

impl Display for Quantity {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.value)?;
        if let Some(u) = self.unit {
            write!(f, "{u}")?;
        }
        Ok(())
    }
}

impl Display for NumLit {
    /// A decimal always shows its point (`2.0`), so that it reads back as a decimal.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            NumLit::Int(n) => write!(f, "{n}"),
            NumLit::Dec(x) => {
                let s = x.to_string();
                f.write_str(&s)?;
                if !s.contains('.') {
                    f.write_str(".0")?;
                }
                Ok(())
            }
        }
    }
}

impl Display for Unit {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Binding strength of an expression's top node; see `parser::expr`.
fn precedence(e: &Expr) -> u8 {
    match &e.kind {
        ExprKind::Binary { op, .. } => op.precedence(),
        ExprKind::Unary { op: UnOp::Not, .. } => 3,
        ExprKind::Unary { op: UnOp::Neg, .. } => 7,
        ExprKind::Num(_) | ExprKind::Var(_) | ExprKind::Call { .. } => 8,
    }
}

/// Writes `e`, in parentheses if it binds looser than `min`.
fn write_at(f: &mut Formatter<'_>, e: &Expr, min: u8) -> fmt::Result {
    if precedence(e) < min {
        write!(f, "({e})")
    } else {
        write!(f, "{e}")
    }
}

impl Display for Expr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ExprKind::Num(q) => write!(f, "{q}"),
            ExprKind::Var(v) => f.write_str(v),
            ExprKind::Call { func, arg, .. } => write!(f, "{func}({arg})"),
            ExprKind::Unary {
                op: UnOp::Not, expr, ..
            } => {
                f.write_str("not ")?;
                write_at(f, expr, 3)
            }
            ExprKind::Unary {
                op: UnOp::Neg, expr, ..
            } => {
                f.write_str("-")?;
                write_at(f, expr, 7)
            }
            ExprKind::Binary { op, left, right, .. } => {
                let p = op.precedence();
                // Left-associative; comparisons do not chain, so neither side may be one.
                let (lmin, rmin) = if op.is_comparison() {
                    (p + 1, p + 1)
                } else {
                    (p, p + 1)
                };
                write_at(f, left, lmin)?;
                write!(f, " {} ", op.symbol())?;
                write_at(f, right, rmin)
            }
        }
    }
}

fn windows(n: u64) -> &'static str {
    if n == 1 {
        "window"
    } else {
        "windows"
    }
}
