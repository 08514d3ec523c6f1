//! Expressions: the predicate of `when` and the arguments of aggregates.
//!
//! Precedence, loosest first (all binary operators associate to the left,
//! except comparisons, which do not chain):
//!
//! | level | operators                       |
//! |-------|---------------------------------|
//! | 1     | `or` `\|\|`                     |
//! | 2     | `and` `&&`                      |
//! | 3     | `not` `!` (prefix)              |
//! | 4     | `<` `<=` `>` `>=` `==` `!=`     |
//! | 5     | `+` `-`                         |
//! | 6     | `*` `/`                         |
//! | 7     | `-` (prefix)                    |
//!
//! Primaries are numbers with an optional unit, variables, calls
//! `name(expr)` and parenthesised expressions.
//!
//! Depth is bounded: both the nesting of the input (parentheses, prefix
//! operators, calls) and the depth of the resulting tree are limited to
//! [`MAX_DEPTH`], so that no later recursive pass over the tree can run out
//! of stack, whatever the input.

use super::{is_keyword, PResult, Parser};
use crate::ast::{BinOp, Expr, ExprKind, NumLit, Quantity, UnOp, Unit};
use crate::error::{codes, Diagnostic};
use crate::span::Span;
use crate::suggest::closest;
use crate::token::{Token, TokenKind};

/// The deepest nesting and the deepest tree an expression may have.
pub const MAX_DEPTH: usize = 64;

/// An expression with the depth of its tree.
type Parsed = (Expr, usize);

fn too_deep(span: Span) -> Diagnostic {
    Diagnostic::new(
        codes::TOO_DEEP,
        format!("expression nested more than {MAX_DEPTH} levels deep"),
        span,
    )
    .here("too deep")
    .help("simplify the expression: parentheses, operators and aggregates each add a level")
}

fn enter(nest: usize, span: Span) -> PResult<()> {
    if nest > MAX_DEPTH {
        return Err(too_deep(span));
    }
    Ok(())
}

fn binary(op: BinOp, op_span: Span, (l, dl): Parsed, (r, dr): Parsed) -> PResult<Parsed> {
    let depth = dl.max(dr) + 1;
    if depth > MAX_DEPTH {
        return Err(too_deep(op_span));
    }
    let span = l.span.to(r.span);
    let kind = ExprKind::Binary {
        op,
        op_span,
        left: Box::new(l),
        right: Box::new(r),
    };
    Ok((Expr { kind, span }, depth))
}

fn unary(op: UnOp, op_span: Span, (e, d): Parsed) -> PResult<Parsed> {
    if d + 1 > MAX_DEPTH {
        return Err(too_deep(op_span));
    }
    let span = op_span.to(e.span);
    Ok((
        Expr {
            kind: ExprKind::Unary {
                op,
                op_span,
                expr: Box::new(e),
            },
            span,
        },
        d + 1,
    ))
}

fn cmp_op(k: &TokenKind) -> Option<BinOp> {
    Some(match k {
        TokenKind::Lt => BinOp::Lt,
        TokenKind::Le => BinOp::Le,
        TokenKind::Gt => BinOp::Gt,
        TokenKind::Ge => BinOp::Ge,
        TokenKind::EqEq | TokenKind::Assign => BinOp::Eq,
        TokenKind::Ne => BinOp::Ne,
        _ => return None,
    })
}

impl Parser<'_> {
    /// An expression after the keyword `after` (for the error message).
    pub(super) fn expr_after(&mut self, after: &str) -> PResult<Expr> {
        if self.at_clause_start() {
            return Err(self
                .expected(&format!("an expression after {after}"))
                .help("write a predicate, e.g. `when sum(volume) > 125KB`"));
        }
        self.or(0).map(|(e, _)| e)
    }

    fn bin_op(&mut self, f: impl Fn(&TokenKind) -> Option<BinOp>) -> Option<(BinOp, Span)> {
        let t = self.peek()?;
        let op = f(&t.kind)?;
        self.pos += 1;
        Some((op, t.span))
    }

    fn or(&mut self, nest: usize) -> PResult<Parsed> {
        let mut l = self.and(nest)?;
        while let Some((op, span)) =
            self.bin_op(|k| (k.is_word("or") || *k == TokenKind::OrOr).then_some(BinOp::Or))
        {
            let r = self.and(nest)?;
            l = binary(op, span, l, r)?;
        }
        Ok(l)
    }

    fn and(&mut self, nest: usize) -> PResult<Parsed> {
        let mut l = self.not(nest)?;
        while let Some((op, span)) =
            self.bin_op(|k| (k.is_word("and") || *k == TokenKind::AndAnd).then_some(BinOp::And))
        {
            let r = self.not(nest)?;
            l = binary(op, span, l, r)?;
        }
        Ok(l)
    }

    fn not(&mut self, nest: usize) -> PResult<Parsed> {
        if let Some(t) = self.eat(|k| k.is_word("not") || *k == TokenKind::Bang) {
            enter(nest + 1, t.span)?;
            let e = self.not(nest + 1)?;
            return unary(UnOp::Not, t.span, e);
        }
        self.cmp(nest)
    }

    fn cmp(&mut self, nest: usize) -> PResult<Parsed> {
        let l = self.add(nest)?;
        let Some((op, span)) = self.bin_op(cmp_op) else {
            return Ok(l);
        };
        let r = self.add(nest)?;
        if let Some(t) = self.peek().filter(|t| cmp_op(&t.kind).is_some()) {
            return Err(
                Diagnostic::new(codes::CHAINED_COMPARISON, "comparisons cannot be chained", t.span)
                    .here("second comparison")
                    .label(span, "after this comparison")
                    .help("compare twice and join with `and`, e.g. `a < b and b < c`"),
            );
        }
        binary(op, span, l, r)
    }

    fn add(&mut self, nest: usize) -> PResult<Parsed> {
        let mut l = self.mul(nest)?;
        while let Some((op, span)) = self.bin_op(|k| match k {
            TokenKind::Plus => Some(BinOp::Add),
            TokenKind::Minus => Some(BinOp::Sub),
            _ => None,
        }) {
            let r = self.mul(nest)?;
            l = binary(op, span, l, r)?;
        }
        Ok(l)
    }

    fn mul(&mut self, nest: usize) -> PResult<Parsed> {
        let mut l = self.neg(nest)?;
        while let Some((op, span)) = self.bin_op(|k| match k {
            TokenKind::Star => Some(BinOp::Mul),
            TokenKind::Slash => Some(BinOp::Div),
            _ => None,
        }) {
            let r = self.neg(nest)?;
            l = binary(op, span, l, r)?;
        }
        Ok(l)
    }

    fn neg(&mut self, nest: usize) -> PResult<Parsed> {
        if let Some(t) = self.eat(|k| *k == TokenKind::Minus) {
            enter(nest + 1, t.span)?;
            let e = self.neg(nest + 1)?;
            return unary(UnOp::Neg, t.span, e);
        }
        self.primary(nest)
    }

    fn primary(&mut self, nest: usize) -> PResult<Parsed> {
        let Some(t) = self.peek() else {
            return Err(self.expected("an expression"));
        };
        match &t.kind {
            TokenKind::Int(_) | TokenKind::Dec(_) => {
                let q = self.quantity()?;
                Ok((
                    Expr {
                        kind: ExprKind::Num(q),
                        span: q.span,
                    },
                    0,
                ))
            }
            TokenKind::Ident(w) if !is_keyword(w) => {
                self.pos += 1;
                let Some(open) = self.eat(|k| *k == TokenKind::LParen) else {
                    return Ok((
                        Expr {
                            kind: ExprKind::Var(w.clone()),
                            span: t.span,
                        },
                        0,
                    ));
                };
                enter(nest + 1, open.span)?;
                let (arg, d) = self.or(nest + 1)?;
                if let Some(comma) = self.peek().filter(|t| t.kind == TokenKind::Comma) {
                    return Err(Diagnostic::new(
                        codes::UNEXPECTED_TOKEN,
                        format!("`{w}` takes one argument"),
                        comma.span,
                    )
                    .help("combine values inside the argument, e.g. `sum(is_lost and is_burst)`"));
                }
                let close = self.close_paren(open)?;
                let kind = ExprKind::Call {
                    func: w.clone(),
                    func_span: t.span,
                    arg: Box::new(arg),
                };
                unary_depth(
                    Expr {
                        kind,
                        span: t.span.to(close),
                    },
                    d,
                    t.span,
                )
            }
            TokenKind::LParen => {
                self.pos += 1;
                enter(nest + 1, t.span)?;
                let (mut e, d) = self.or(nest + 1)?;
                e.span = t.span.to(self.close_paren(t)?);
                Ok((e, d))
            }
            TokenKind::Plus => Err(self
                .expected("an expression")
                .help("there is no unary `+`: remove it")),
            _ => Err(self.expected("an expression")),
        }
    }

    fn close_paren(&mut self, open: &Token) -> PResult<Span> {
        match self.eat(|k| *k == TokenKind::RParen) {
            Some(t) => Ok(t.span),
            None => Err(self.expected("`)`").label(open.span, "to close this parenthesis")),
        }
    }

    /// A number and its unit, if any: `125KB`, `125 KB`, `10%`, `0.5`.
    pub(super) fn quantity(&mut self) -> PResult<Quantity> {
        let Some(t) = self.bump() else {
            return Err(self.expected("a number"));
        };
        let value = match t.kind {
            TokenKind::Int(n) => NumLit::Int(n),
            TokenKind::Dec(x) => NumLit::Dec(x),
            _ => {
                self.pos -= 1;
                return Err(self.expected("a number"));
            }
        };
        let mut q = Quantity {
            value,
            unit: None,
            span: t.span,
        };
        match self.peek() {
            Some(u) if u.kind == TokenKind::Percent => {
                self.pos += 1;
                q.unit = Some(Unit::Percent);
                q.span = q.span.to(u.span);
            }
            Some(Token {
                kind: TokenKind::Ident(w),
                span,
            }) => {
                if let Some(unit) = Unit::from_name(w) {
                    self.pos += 1;
                    q.unit = Some(unit);
                    q.span = q.span.to(*span);
                    return Ok(q);
                }
                let names = Unit::ALL.into_iter().map(Unit::name);
                let suggestion = closest(w, names.clone());
                let adjacent = span.start == t.span.end && !is_keyword(w);
                let same_but_case = suggestion.is_some_and(|s| s.eq_ignore_ascii_case(w));
                if adjacent || same_but_case {
                    let d = Diagnostic::new(codes::UNKNOWN_UNIT, format!("unknown unit `{w}`"), *span)
                        .here("not a unit");
                    let list = names.map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
                    return Err(match suggestion {
                        Some(s) if same_but_case => {
                            d.help(format!("did you mean `{s}`? (units are case-sensitive)"))
                        }
                        Some(s) => d.help(format!("did you mean `{s}`?")),
                        None => d.help(format!("the units are {list}")),
                    });
                }
            }
            _ => {}
        }
        Ok(q)
    }
}

/// A call adds one level to its argument's tree.
fn unary_depth(e: Expr, d: usize, span: Span) -> PResult<Parsed> {
    if d + 1 > MAX_DEPTH {
        return Err(too_deep(span));
    }
    Ok((e, d + 1))
}
