//! The parser: tokens to an [`ast::File`](crate::ast::File).
//!
//! Recursive descent over the token list. A file is a list of events; an
//! event runs from its `event` keyword to the next `event` or the end of
//! input, so after an error the parser skips to the next `event` and goes
//! on: every broken event gets one diagnostic, and the well-formed ones
//! still come out (see [`parse_partial`]).
//!
//! The grammar of expressions is in [`expr`]; this module handles events
//! and clauses.

mod export;
mod expr;

pub use expr::MAX_DEPTH;

use crate::ast::{
    Across, AlertClause, Capture, Cond, CondValue, Event, Expr, Field, File, FilterClause, GroupField,
    NumLit, Per, PerKind, PrefixLen, Quantity, QuorumLit, Severity, Then,
};
use crate::error::{codes, Diagnostic};
use crate::lexer::lex;
use crate::span::Span;
use crate::suggest::closest;
use crate::token::{Token, TokenKind};

/// The words that start a clause. `priority` and `alert` are not
/// keywords: they may still name a variable, a value or an event.
const CLAUSES: [&str; 9] = [
    "filter", "when", "per", "every", "across", "then", "on", "priority", "alert",
];

/// The words that may follow `alert` (its parts).
const ALERT_PARTS: [&str; 3] = ["after", "resolve", "severity"];

/// The longest name of an event or export policy, in characters (names
/// are ASCII letters, digits and `_`). Names become file names (captures,
/// exported pcapng files: the name and a suffix within a file system's
/// 255 bytes), metric labels and console rows; 64 is ample for a name a
/// person reads.
pub const MAX_NAME_LEN: usize = 64;

/// `Some` (E0208) when the name `s` of `what` ("an event") at `span` is longer than [`MAX_NAME_LEN`].
pub(crate) fn too_long(what: &str, s: &str, span: Span) -> Option<Diagnostic> {
    (s.len() > MAX_NAME_LEN).then(|| {
        Diagnostic::new(
            codes::BAD_EVENT_NAME,
            format!(
                "the name of {what} is {} characters long; at most {MAX_NAME_LEN} are allowed",
                s.len()
            ),
            span,
        )
        .here("this name")
        .help("names become file names and labels: shorten it")
    })
}

/// Words that can never be a name, variable or value.
const KEYWORDS: [&str; 12] = [
    "event", "export", "filter", "when", "per", "every", "across", "then", "and", "or", "not", "in",
];

/// How a clause list is named in messages ("each clause starts with …").
const CLAUSE_LIST: &str =
    "`filter`, `when`, `per`, `every`, `across`, `then install`, `then capture`, `on demand`, `priority` or `alert`";

/// How to write an alert clause, for every error about one (the checker's too).
pub(crate) const ALERT_HELP: &str =
    "write e.g. `alert after 3 windows, resolve after 10 windows, severity critical` (each part optional; counts in windows of the event's `every`)";

/// How to write a priority, for every error about one (the checker's too).
pub(crate) const PRIORITY_HELP: &str =
    "write a whole number from 0 to 100, e.g. `priority 80`: under overload, lower priorities are shed first";

fn is_keyword(s: &str) -> bool {
    KEYWORDS.contains(&s)
}

type PResult<T> = Result<T, Diagnostic>;

/// Parses what can be parsed: the events that are well-formed, and one
/// diagnostic per lexical error and per broken event.
pub fn parse_partial(src: &str) -> (File, Vec<Diagnostic>) {
    let (toks, mut diags) = lex(src);
    let mut p = Parser { toks: &toks, pos: 0 };
    let file = p.file(&mut diags);
    (file, diags)
}

struct Parser<'t> {
    toks: &'t [Token],
    /// Index of the next token to read.
    pos: usize,
}

impl<'t> Parser<'t> {
    fn peek(&self) -> Option<&'t Token> {
        self.toks.get(self.pos)
    }

    /// Whether the next tokens end the current clause: the input's end, a
    /// new item, or a clause. `on` and `priority` are not keywords, so they
    /// start a clause only as one is written (`on demand`, `priority 5`);
    /// otherwise they may name a function or a variable in an expression.
    fn at_clause_start(&self) -> bool {
        let Some(t) = self.peek() else { return true };
        let next = self.toks.get(self.pos + 1);
        match &t.kind {
            TokenKind::Ident(w) => match w.as_str() {
                "on" => next.is_some_and(|n| n.is_word("demand")),
                "priority" => next.is_some_and(|n| matches!(n.kind, TokenKind::Int(_) | TokenKind::Dec(_))),
                "alert" => next.is_some_and(|n| ALERT_PARTS.iter().any(|p| n.is_word(p))),
                w => w == "event" || w == "export" || CLAUSES.contains(&w),
            },
            _ => false,
        }
    }

    fn peek_kind(&self) -> Option<&'t TokenKind> {
        self.peek().map(|t| &t.kind)
    }

    fn bump(&mut self) -> Option<&'t Token> {
        let t = self.toks.get(self.pos);
        if t.is_some() {
            self.pos += 1;
        }
        t
    }

    /// Consumes the next token if `f` accepts it.
    fn eat(&mut self, f: impl Fn(&TokenKind) -> bool) -> Option<&'t Token> {
        let t = self.peek().filter(|t| f(&t.kind))?;
        self.pos += 1;
        Some(t)
    }

    /// The span of the last token read (where "end of input" errors point).
    fn prev_span(&self) -> Span {
        self.pos
            .checked_sub(1)
            .and_then(|i| self.toks.get(i))
            .map_or(Span::default(), |t| t.span)
    }

    /// "expected WHAT, found …" at the next token.
    fn expected(&self, what: &str) -> Diagnostic {
        match self.peek() {
            Some(t) => Diagnostic::new(
                codes::UNEXPECTED_TOKEN,
                format!("expected {what}, found {}", t.kind),
                t.span,
            )
            .here(format!("expected {what}")),
            None => Diagnostic::new(
                codes::UNEXPECTED_TOKEN,
                format!("expected {what}, found end of input"),
                self.prev_span(),
            )
            .here(format!("expected {what} after this")),
        }
    }

    /// Skips to the next `event` or `export`: where the next item starts.
    fn skip_to_event(&mut self) {
        while self.peek().is_some_and(|t| !starts_item(t)) {
            self.pos += 1;
        }
    }

    fn file(&mut self, diags: &mut Vec<Diagnostic>) -> File {
        let mut file = File::default();
        if self.peek().is_some_and(|t| !starts_item(t)) {
            diags.push(
                self.expected("`event`")
                    .help("a file is a list of events, each starting with `event NAME` (and of export policies, each starting with `export NAME`)"),
            );
            self.skip_to_event();
        }
        while let Some(t) = self.peek() {
            let item = if t.is_word("export") {
                self.export().map(|x| file.exports.push(x))
            } else {
                self.event().map(|e| file.events.push(e))
            };
            if let Err(d) = item {
                diags.push(d);
                self.skip_to_event();
            }
        }
        file
    }

    fn event(&mut self) -> PResult<Event> {
        let kw = self.bump().map_or(Span::default(), |t| t.span);
        let (name, name_span) = match self.peek() {
            Some(Token {
                kind: TokenKind::Ident(s),
                span,
            }) if !is_keyword(s) && s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') => {
                if let Some(d) = too_long("an event", s, *span) {
                    return Err(d);
                }
                self.pos += 1;
                (s.clone(), *span)
            }
            _ => {
                let d = self.expected("an event name after `event`");
                let d = Diagnostic {
                    code: codes::BAD_EVENT_NAME,
                    ..d
                };
                return Err(d.help("name the event, e.g. `event heavy_flows`"));
            }
        };
        let mut filters = Vec::new();
        let mut when: Option<(Span, Expr)> = None;
        let mut per: Option<(Span, Per)> = None;
        let mut every: Option<(Span, Quantity)> = None;
        let mut across: Option<(Span, Across)> = None;
        let mut then = Vec::new();
        let mut capture: Option<(Span, Capture)> = None;
        let mut on_demand: Option<(Span, ())> = None;
        let mut priority: Option<(Span, (u64, Span))> = None;
        let mut alert: Option<(Span, AlertClause)> = None;
        while let Some(t) = self.peek() {
            let TokenKind::Ident(word) = &t.kind else {
                return Err(self.unknown_clause(!filters.is_empty()));
            };
            match word.as_str() {
                "event" | "export" => break,
                "filter" => {
                    self.pos += 1;
                    filters.push(self.filter(t.span)?);
                }
                "when" => {
                    check_duplicate(&when, "when", t.span)?;
                    self.pos += 1;
                    let e = self.expr_after("`when`")?;
                    when = Some((t.span, e));
                }
                "per" => {
                    check_duplicate(&per, "per", t.span)?;
                    self.pos += 1;
                    per = Some((t.span, self.per(t.span)?));
                }
                "every" => {
                    check_duplicate(&every, "every", t.span)?;
                    self.pos += 1;
                    every = Some((t.span, self.every()?));
                }
                "across" => {
                    check_duplicate(&across, "across", t.span)?;
                    self.pos += 1;
                    across = Some((t.span, self.across(t.span)?));
                }
                "then" if self.toks.get(self.pos + 1).is_some_and(|n| n.is_word("capture")) => {
                    let span = t.span.to(self.toks[self.pos + 1].span);
                    check_duplicate(&capture, "then capture", span)?;
                    self.pos += 2;
                    capture = Some((span, self.capture(t.span)?));
                }
                "then" => {
                    self.pos += 1;
                    then.push(self.then(t.span)?);
                }
                "on" if self.toks.get(self.pos + 1).is_some_and(|n| n.is_word("demand")) => {
                    let span = t.span.to(self.toks[self.pos + 1].span);
                    check_duplicate(&on_demand, "on demand", span)?;
                    self.pos += 2;
                    on_demand = Some((span, ()));
                }
                "priority" => {
                    check_duplicate(&priority, "priority", t.span)?;
                    self.pos += 1;
                    priority = Some((t.span, self.priority()?));
                }
                "alert" => {
                    check_duplicate(&alert, "alert", t.span)?;
                    self.pos += 1;
                    alert = Some((t.span, self.alert(t.span)?));
                }
                _ => return Err(self.unknown_clause(!filters.is_empty())),
            }
        }
        let Some((_, when)) = when else {
            return Err(Diagnostic::new(
                codes::MISSING_WHEN,
                format!("event `{name}` has no `when` clause"),
                name_span,
            )
            .here("this event has no predicate")
            .help("every event needs a predicate, e.g. `when sum(volume) > 125KB`"));
        };
        Ok(Event {
            name,
            name_span,
            filters,
            when,
            per: per.map(|(_, p)| p),
            every: every.map(|(_, q)| q),
            across: across.map(|(_, s)| s),
            then,
            capture: capture.map(|(_, c)| c),
            on_demand: on_demand.map(|(s, ())| s),
            priority: priority.map(|(_, p)| p),
            alert: alert.map(|(_, a)| a),
            span: kw.to(self.prev_span()),
        })
    }

    /// What follows `then capture`: `[DURATION before] [DURATION after]`,
    /// at least one of them.
    fn capture(&mut self, kw: Span) -> PResult<Capture> {
        let help = "write e.g. `then capture 5s before 5s after`";
        let part = |p: &mut Self, word: &str| -> PResult<Option<Quantity>> {
            let at = p.pos;
            if !matches!(p.peek_kind(), Some(TokenKind::Int(_) | TokenKind::Dec(_))) {
                return Ok(None);
            }
            let q = p.quantity()?;
            if p.eat(|k| k.is_word(word)).is_some() {
                Ok(Some(q))
            } else {
                p.pos = at;
                Ok(None)
            }
        };
        let before = part(self, "before")?;
        let after = part(self, "after")?;
        if before.is_none() && after.is_none() {
            return Err(self
                .expected("`DURATION before` or `DURATION after` after `then capture`")
                .help(help));
        }
        Ok(Capture {
            before,
            after,
            span: kw.to(self.prev_span()),
        })
    }

    /// What follows `priority`: a whole number. A decimal or a negative
    /// number is refused here, where its sign and point are still seen;
    /// one above 100 by the checker, like every other range.
    fn priority(&mut self) -> PResult<(u64, Span)> {
        let bad = |value: String, span: Span, why: &str| {
            Diagnostic::new(codes::BAD_PRIORITY, format!("priority `{value}` is {why}"), span)
                .here(why.to_string())
                .help(PRIORITY_HELP)
        };
        let number = |t: Option<&Token>| match t.map(|t| (&t.kind, t.span)) {
            Some((TokenKind::Int(n), span)) => Some((NumLit::Int(*n), span)),
            Some((TokenKind::Dec(x), span)) => Some((NumLit::Dec(*x), span)),
            _ => None,
        };
        let minus = self.peek().filter(|t| t.kind == TokenKind::Minus);
        if let Some(m) = minus {
            if let Some((n, span)) = number(self.toks.get(self.pos + 1)) {
                return Err(bad(format!("-{n}"), m.span.to(span), "below 0"));
            }
        }
        match number(self.peek()) {
            Some((NumLit::Int(n), span)) => {
                self.pos += 1;
                Ok((n, span))
            }
            Some((n, span)) => Err(bad(n.to_string(), span, "not a whole number")),
            None => Err(self
                .expected("a priority from 0 to 100 after `priority`")
                .help(PRIORITY_HELP)),
        }
    }

    /// What follows `alert`: at least one of `after N windows`, `resolve
    /// after N windows` and `severity NAME`, each at most once, in any
    /// order, optionally separated by commas.
    fn alert(&mut self, kw: Span) -> PResult<AlertClause> {
        let mut a = AlertClause {
            after: None,
            resolve_after: None,
            severity: None,
            span: kw,
        };
        let mut seen: Vec<(&'static str, Span)> = Vec::new();
        let mut comma = false;
        loop {
            let part = self.peek().and_then(|t| {
                ALERT_PARTS
                    .into_iter()
                    .find(|p| t.is_word(p))
                    .map(|p| (p, t.span))
            });
            let Some((part, span)) = part else {
                if seen.is_empty() || comma {
                    return Err(self.alert_part_expected(&seen));
                }
                break;
            };
            if let Some((_, first)) = seen.iter().find(|(p, _)| *p == part) {
                return Err(Diagnostic::new(
                    codes::BAD_ALERT,
                    format!("`{part}` twice in one `alert` clause"),
                    span,
                )
                .here(format!("second `{part}`"))
                .label(*first, format!("first `{part}` here"))
                .help(ALERT_HELP));
            }
            seen.push((part, span));
            self.pos += 1;
            match part {
                "after" => a.after = Some(self.window_count("after")?),
                "resolve" => {
                    if self.eat(|k| k.is_word("after")).is_none() {
                        return Err(self
                            .expected("`after` after `resolve`")
                            .with_code(codes::BAD_ALERT)
                            .help("write e.g. `resolve after 10 windows`"));
                    }
                    a.resolve_after = Some(self.window_count("resolve after")?);
                }
                _ => a.severity = Some(self.severity()?),
            }
            // A comma only between parts: one before the next clause is an error above.
            comma = self.eat(|k| *k == TokenKind::Comma).is_some();
        }
        a.span = kw.to(self.prev_span());
        Ok(a)
    }

    fn alert_part_expected(&self, seen: &[(&'static str, Span)]) -> Diagnostic {
        let left: Vec<String> = [
            ("after", "`after N windows`"),
            ("resolve", "`resolve after N windows`"),
            ("severity", "`severity NAME`"),
        ]
        .into_iter()
        .filter(|(p, _)| !seen.iter().any(|(s, _)| s == p))
        .map(|(_, w)| w.to_string())
        .collect();
        let list = match left.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            Some((last, _)) => last.clone(),
            None => "the next clause".to_string(),
        };
        let what = if seen.is_empty() {
            format!("{list} after `alert`")
        } else {
            format!("{list} after the comma")
        };
        let d = self.expected(&what).with_code(codes::BAD_ALERT);
        match self.peek() {
            Some(Token {
                kind: TokenKind::Ident(w),
                ..
            }) => match closest(w, ALERT_PARTS) {
                Some(s) => d.help(format!("did you mean `{s}`?")),
                None => d.help(ALERT_HELP),
            },
            _ => d.help(ALERT_HELP),
        }
    }

    /// `N window[s]` after `after` or `resolve after`: a whole count of the
    /// event's windows, not a duration.
    fn window_count(&mut self, after: &str) -> PResult<(u64, Span)> {
        let help = format!("write a whole number of windows, e.g. `{after} 3 windows`: counts are in windows of the event's `every`");
        let (n, span) = match self.peek().map(|t| (&t.kind, t.span)) {
            Some((TokenKind::Int(n), span)) => (*n, span),
            Some((TokenKind::Dec(x), span)) => {
                return Err(Diagnostic::new(
                    codes::BAD_ALERT,
                    format!("`{x}` windows is not a whole number"),
                    span,
                )
                .here("not a whole number")
                .help(help))
            }
            _ => {
                return Err(self
                    .expected(&format!("a number of windows after `{after}`"))
                    .with_code(codes::BAD_ALERT)
                    .help(help))
            }
        };
        self.pos += 1;
        match self.peek() {
            Some(t) if t.is_word("windows") || t.is_word("window") => {
                self.pos += 1;
                Ok((n, span))
            }
            Some(Token {
                kind: TokenKind::Ident(w),
                span: unit,
            }) if crate::ast::Unit::from_name(w).is_some() => Err(Diagnostic::new(
                codes::BAD_ALERT,
                format!("`{n}{w}` is a duration; alerts count windows"),
                span.to(*unit),
            )
            .here("a duration")
            .help(format!(
                "write a number of windows of the event's `every`: with `every 100ms`, `{after} 300ms` is `{after} 3 windows`"
            ))),
            _ => Err(self
                .expected(&format!("`windows` after `{after} {n}`"))
                .with_code(codes::BAD_ALERT)
                .help(help)),
        }
    }

    /// What follows `severity`: one of [`Severity::ALL`].
    fn severity(&mut self) -> PResult<(Severity, Span)> {
        let names = || Severity::ALL.into_iter().map(Severity::name);
        let list = names().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
        match self.peek() {
            Some(Token {
                kind: TokenKind::Ident(w),
                span,
            }) => match Severity::from_name(w) {
                Some(s) => {
                    self.pos += 1;
                    Ok((s, *span))
                }
                None => {
                    let d = Diagnostic::new(codes::BAD_ALERT, format!("unknown severity `{w}`"), *span)
                        .here("not a severity");
                    Err(match closest(w, names()) {
                        Some(s) => d.help(format!("did you mean `{s}`? Severities: {list}")),
                        None => d.help(format!("severities: {list}")),
                    })
                }
            },
            _ => Err(self
                .expected("a severity after `severity`")
                .with_code(codes::BAD_ALERT)
                .help(format!("severities: {list}"))),
        }
    }

    fn unknown_clause(&self, had_filter: bool) -> Diagnostic {
        let d = self.expected(
            "a clause (`filter`, `when`, `per`, `every`, `across`, `then`, `on demand`, `priority`, `alert`) or the next `event`",
        );
        let Some(t) = self.peek() else { return d };
        let d = Diagnostic {
            code: codes::UNKNOWN_CLAUSE,
            labels: Vec::new(),
            ..d
        }
        .here("not a clause");
        match &t.kind {
            TokenKind::Ident(w) if (w == "or") && had_filter => d.help(
                "all conditions of a filter must hold; to match either, write one `filter` clause for each",
            ),
            TokenKind::OrOr if had_filter => d.help(
                "all conditions of a filter must hold; to match either, write one `filter` clause for each",
            ),
            TokenKind::Ident(w) => match closest(w, CLAUSES.into_iter().chain(["event"])) {
                Some(s) => d.help(format!("did you mean `{s}`?")),
                None => d.help(format!("each clause starts with {CLAUSE_LIST}")),
            },
            _ => d.help(format!("each clause starts with {CLAUSE_LIST}")),
        }
    }

    fn filter(&mut self, kw: Span) -> PResult<FilterClause> {
        if let Some(star) = self.eat(|k| *k == TokenKind::Star) {
            return Ok(FilterClause {
                conds: Vec::new(),
                span: kw.to(star.span),
            });
        }
        let mut conds = vec![self.cond()?];
        while self
            .eat(|k| *k == TokenKind::AndAnd || k.is_word("and"))
            .is_some()
        {
            conds.push(self.cond()?);
        }
        Ok(FilterClause {
            conds,
            span: kw.to(self.prev_span()),
        })
    }

    fn field(&mut self, what: &str, extra: &[&'static str]) -> PResult<(Field, Span)> {
        let names = || {
            Field::ALL
                .into_iter()
                .map(Field::name)
                .chain(extra.iter().copied())
        };
        let list = names().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
        match self.peek() {
            Some(Token {
                kind: TokenKind::Ident(w),
                span,
            }) if !is_keyword(w) => {
                if let Some(f) = Field::from_name(w) {
                    self.pos += 1;
                    return Ok((f, *span));
                }
                let d = Diagnostic::new(codes::UNKNOWN_FIELD, format!("unknown {what} `{w}`"), *span)
                    .here("not a field");
                if w.contains("tuple") && extra.contains(&"5tuple") {
                    return Err(d.help("write `5tuple`"));
                }
                Err(match closest(w, names()) {
                    Some(s) => d.help(format!("did you mean `{s}`?")),
                    None => d.help(format!("the fields are {list}")),
                })
            }
            Some(Token {
                kind: TokenKind::Int(5),
                span,
            }) if extra.contains(&"5tuple") => {
                // `5tupel`, `5tuples`: a number and a word written together.
                if let Some(Token {
                    kind: TokenKind::Ident(w),
                    span: next,
                }) = self.toks.get(self.pos + 1)
                {
                    if next.start == span.end {
                        let d = Diagnostic::new(
                            codes::UNKNOWN_FIELD,
                            format!("unknown {what} `5{w}`"),
                            span.to(*next),
                        )
                        .here("not a field");
                        return Err(d.help("did you mean `5tuple`?"));
                    }
                }
                Err(self
                    .expected(&format!("a {what}"))
                    .help("write `5tuple`, without a space or a dash"))
            }
            _ => Err(self
                .expected(&format!("a {what}"))
                .help(format!("the fields are {list}"))),
        }
    }

    fn cond(&mut self) -> PResult<Cond> {
        let (field, field_span) = self.field("filter field", &[])?;
        if self
            .eat(|k| matches!(k, TokenKind::Assign | TokenKind::EqEq) || k.is_word("in"))
            .is_none()
        {
            return Err(self.expected(&format!("`=` or `in` after `{}`", field.name())));
        }
        let value_start = self.peek().map(|t| t.span);
        let value = self.cond_value(field)?;
        let value_span = value_start.unwrap_or_default().to(self.prev_span());
        Ok(Cond {
            field,
            field_span,
            value,
            value_span,
        })
    }

    fn cond_value(&mut self, field: Field) -> PResult<CondValue> {
        let Some(t) = self.peek() else {
            return Err(self.expected(&format!("a value for `{}`", field.name())));
        };
        let value = match &t.kind {
            TokenKind::Star => CondValue::Any,
            TokenKind::Addr(text) => {
                let Ok(addr) = text.parse() else {
                    return Err(Diagnostic::new(
                        codes::BAD_ADDRESS,
                        format!("invalid IP address `{text}`"),
                        t.span,
                    )
                    .here("not an IP address")
                    .help("write an IPv4 address like `10.0.128.0` or an IPv6 address like `2001:db8::`"));
                };
                self.pos += 1;
                let len = match self.eat(|k| *k == TokenKind::Slash) {
                    Some(_) => Some(self.int("a prefix length after `/`")?.0),
                    None => None,
                };
                return Ok(CondValue::Addr { addr, len });
            }
            TokenKind::Int(n) => {
                self.pos += 1;
                if self.eat(|k| *k == TokenKind::DotDot).is_some() {
                    let (hi, _) = self.int("the end of the range after `..`")?;
                    return Ok(CondValue::Range(*n, hi));
                }
                if self.peek_kind() == Some(&TokenKind::Slash) {
                    return Err(
                        Diagnostic::new(codes::BAD_ADDRESS, "incomplete IP address", t.span)
                            .here("not an IP address")
                            .help("write all four parts of an IPv4 address, e.g. `10.0.0.0/8`"),
                    );
                }
                return Ok(CondValue::Int(*n));
            }
            TokenKind::Ident(w) if !is_keyword(w) => CondValue::Name(w.clone()),
            _ => {
                return Err(self.expected(&format!("a value for `{}`", field.name())).help(
                    "values are addresses or prefixes, numbers, ranges `LO..HI`, protocol names, or `*`",
                ))
            }
        };
        self.pos += 1;
        Ok(value)
    }

    fn int(&mut self, what: &str) -> PResult<(u64, Span)> {
        match self.peek() {
            Some(Token {
                kind: TokenKind::Int(n),
                span,
            }) => {
                self.pos += 1;
                Ok((*n, *span))
            }
            _ => Err(self.expected(what)),
        }
    }

    fn per(&mut self, kw: Span) -> PResult<Per> {
        let kind = if self.five_tuple() {
            PerKind::FiveTuple
        } else if self.eat(|k| *k == TokenKind::LParen).is_some() {
            let mut fields = vec![self.group_field()?];
            while self.eat(|k| *k == TokenKind::Comma).is_some() {
                fields.push(self.group_field()?);
            }
            if self.eat(|k| *k == TokenKind::RParen).is_none() {
                return Err(self.expected("`,` or `)`"));
            }
            PerKind::Fields(fields)
        } else {
            let mut fields = vec![self.group_field()?];
            while self
                .eat(|k| *k == TokenKind::AndAnd || k.is_word("and"))
                .is_some()
            {
                fields.push(self.group_field()?);
            }
            PerKind::Fields(fields)
        };
        Ok(Per {
            kind,
            span: kw.to(self.prev_span()),
        })
    }

    /// `5tuple`: the number 5 immediately followed by the word `tuple`.
    fn five_tuple(&mut self) -> bool {
        let (Some(five), Some(tuple)) = (self.toks.get(self.pos), self.toks.get(self.pos + 1)) else {
            return false;
        };
        let found =
            five.kind == TokenKind::Int(5) && tuple.is_word("tuple") && five.span.end == tuple.span.start;
        if found {
            self.pos += 2;
        }
        found
    }

    fn group_field(&mut self) -> PResult<GroupField> {
        let (field, span) = self.field("granularity field", &["5tuple"])?;
        let mut lens = Vec::new();
        while self.eat(|k| *k == TokenKind::Slash).is_some() {
            let (value, span) = self.int("a prefix length after `/`")?;
            if lens.len() == 2 {
                return Err(
                    Diagnostic::new(codes::BAD_GRANULARITY, "too many prefix lengths", span)
                        .help("write at most two: the IPv4 and the IPv6 length, e.g. `src_ip/24/64`"),
                );
            }
            lens.push(PrefixLen { value, span });
        }
        Ok(GroupField {
            field,
            lens,
            span: span.to(self.prev_span()),
        })
    }

    fn every(&mut self) -> PResult<Quantity> {
        if !matches!(self.peek_kind(), Some(TokenKind::Int(_) | TokenKind::Dec(_))) {
            return Err(self
                .expected("a duration after `every`")
                .help("write e.g. `every 10ms` or `every 1s`"));
        }
        self.quantity()
    }

    /// What follows `across`: `hosts`, `more than N hosts` or `more than N%
    /// of hosts`. Anything else is refused where it stands rather than read
    /// as the next clause.
    fn across(&mut self, kw: Span) -> PResult<Across> {
        if let Some(hosts) = self.eat(|k| k.is_word("hosts")) {
            return Ok(Across {
                span: kw.to(hosts.span),
                quorum: None,
            });
        }
        if self.eat(|k| k.is_word("more")).is_some() {
            self.eat(|k| k.is_word("than"))
                .ok_or_else(|| self.scope_error(kw, "`than` after `more`"))?;
            let (n, start) = match self.peek().map(|t| (&t.kind, t.span)) {
                Some((TokenKind::Int(n), span)) => (*n, span),
                _ => return Err(self.scope_error(kw, "a whole number after `more than`")),
            };
            self.pos += 1;
            let mut span = start;
            let percent = match self.eat(|k| *k == TokenKind::Percent) {
                Some(t) => {
                    span = start.to(t.span);
                    self.eat(|k| k.is_word("of"))
                        .ok_or_else(|| self.scope_error(kw, "`of hosts` after the percentage"))?;
                    true
                }
                None => false,
            };
            let hosts = self
                .eat(|k| k.is_word("hosts"))
                .ok_or_else(|| self.scope_error(kw, "`hosts`"))?;
            return Ok(Across {
                span: kw.to(hosts.span),
                quorum: Some(QuorumLit { n, percent, span }),
            });
        }
        Err(self.scope_error(kw, "`hosts` or `more than`"))
    }

    /// What follows `then`: `install EVENT [on FIELD, ...] [for DURATION]`.
    fn then(&mut self, kw: Span) -> PResult<Then> {
        let help = "write e.g. `then install heavy_to_dst on dst_ip/24 for 100ms` or `then capture 5s before 5s after`";
        if self.eat(|k| k.is_word("install")).is_none() {
            return Err(self.expected("`install` or `capture` after `then`").help(help));
        }
        let (event, event_span) = match self.peek() {
            Some(Token {
                kind: TokenKind::Ident(s),
                span,
            }) if !is_keyword(s) => {
                self.pos += 1;
                (s.clone(), *span)
            }
            _ => return Err(self.expected("the name of the event to install").help(help)),
        };
        let mut on = Vec::new();
        let narrows = self.peek().is_some_and(|t| t.is_word("on"))
            && !self.toks.get(self.pos + 1).is_some_and(|t| t.is_word("demand"));
        if narrows {
            self.pos += 1;
            on.push(self.group_field()?);
            while self
                .eat(|k| *k == TokenKind::Comma || *k == TokenKind::AndAnd || k.is_word("and"))
                .is_some()
            {
                on.push(self.group_field()?);
            }
        }
        let duration = match self.eat(|k| k.is_word("for")) {
            Some(_) if matches!(self.peek_kind(), Some(TokenKind::Int(_) | TokenKind::Dec(_))) => {
                Some(self.quantity()?)
            }
            Some(_) => return Err(self.expected("a duration after `for`").help(help)),
            None => None,
        };
        Ok(Then {
            event,
            event_span,
            on,
            duration,
            span: kw.to(self.prev_span()),
        })
    }

    fn scope_error(&self, kw: Span, want: &str) -> Diagnostic {
        let d = match self.peek() {
            Some(t) => Diagnostic::new(
                codes::BAD_SCOPE,
                format!("expected {want} in `across`, found {}", t.kind),
                t.span,
            )
            .here(format!("expected {want}")),
            None => Diagnostic::new(
                codes::BAD_SCOPE,
                format!("expected {want} in `across`, found end of input"),
                self.prev_span(),
            )
            .here(format!("expected {want} after this"))
            .label(kw, "in this `across` clause"),
        };
        d.help(
            "write `across hosts` (over all hosts' packets together), `across more than 3 hosts` or `across more than 50% of hosts` (the event holds on that many hosts)",
        )
    }
}

fn starts_item(t: &Token) -> bool {
    t.is_word("event") || t.is_word("export")
}

fn check_duplicate<T>(first: &Option<(Span, T)>, clause: &str, here: Span) -> PResult<()> {
    let Some((first, _)) = first else { return Ok(()) };
    let help = match clause {
        "when" => "an event has one predicate; combine conditions with `and` or `or`",
        "per" => "list all the fields in one clause, e.g. `per (src_ip/24, dst_port)`",
        "across" => "an event has one scope: write `across` once",
        "on demand" => "write `on demand` once",
        "then capture" => "one `then capture` per event: give it the longest span you need",
        "priority" => "an event has one priority: write `priority` once",
        "alert" => "an event has one `alert` clause: put all its parts in it, e.g. `alert after 3 windows, severity critical`",
        _ => "an event has one interval",
    };
    Err(Diagnostic::new(
        codes::DUPLICATE_CLAUSE,
        format!("duplicate `{clause}` clause"),
        here,
    )
    .here(format!("second `{clause}` clause"))
    .label(*first, format!("first `{clause}` clause here"))
    .help(help))
}
