//! The checker: semantic checks on the syntax tree, and lowering to the
//! [`spec`](crate::spec) model.
//!
//! Checking and lowering are one pass: each part of an event is lowered
//! by its own module ([`filter`], [`pred`], [`per`], [`every`]), which
//! pushes a diagnostic for every problem it finds and goes on, so that one
//! run reports every mistake in every event. An event with any problem
//! produces no [`EventSpec`].
//!
//! The meaning of the lowered model is the contract in `docs/semantics.md`.

mod every;
mod export;
mod filter;
mod per;
mod pred;
mod then;

use std::collections::HashMap;

use crate::ast::{Capture, Event, File, Quantity};
use crate::error::{codes, Diagnostic};
use crate::span::Span;
use crate::spec::{CaptureSpec, EventSpec, ExportSpec, Scope};

/// Lowers every export policy of `file` (refusing events there), pushing a
/// diagnostic per problem.
pub fn lower_export_file(file: &File, diags: &mut Vec<Diagnostic>) -> Vec<ExportSpec> {
    for e in &file.events {
        diags.push(
            Diagnostic::new(
                codes::MISPLACED_ITEM,
                format!("event `{}` in a file of export policies", e.name),
                e.name_span,
            )
            .here("an event")
            .help("events and export policies are installed apart: put this event in the events file (`--events`)"),
        );
    }
    export::lower_exports(&file.exports, diags)
}

/// Lowers every event of `file` (refusing export policies there), pushing
/// a diagnostic per problem.
pub fn lower_file(file: &File, diags: &mut Vec<Diagnostic>) -> Vec<EventSpec> {
    for x in &file.exports {
        diags.push(
            Diagnostic::new(
                codes::MISPLACED_ITEM,
                format!("export policy `{}` in an events file", x.name),
                x.name_span,
            )
            .here("an export policy")
            .help("events and export policies are installed apart: put this policy in a file of its own and pass it with `--exports`"),
        );
    }
    let mut first_by_name: HashMap<&str, Span> = HashMap::new();
    let mut specs = Vec::new();
    for (i, e) in file.events.iter().enumerate() {
        if let Some(first) = first_by_name.get(e.name.as_str()) {
            diags.push(
                Diagnostic::new(
                    codes::DUPLICATE_EVENT,
                    format!("duplicate event name `{}`", e.name),
                    e.name_span,
                )
                .here("defined again here")
                .label(*first, "first defined here")
                .help("event names must be unique in a file: rename one of them"),
            );
        } else {
            first_by_name.insert(&e.name, e.name_span);
        }
        if let Some(spec) = lower_event(e, diags) {
            specs.push((i, spec));
        }
    }
    then::resolve(file, specs, diags)
}

fn lower_event(e: &Event, diags: &mut Vec<Diagnostic>) -> Option<EventSpec> {
    let before = diags.len();
    let filters = filter::lower_filters(&e.filters, diags);
    let granularity = per::lower_per(e.per.as_ref(), diags);
    let interval_ns = every::lower_every(e.every.as_ref(), diags);
    // Rates need the interval; with a bad one, check the rest against the default.
    let predicate = pred::lower_pred(&e.when, interval_ns.unwrap_or(every::DEFAULT_NS), diags);
    let capture = e
        .capture
        .as_ref()
        .and_then(|c| capture(c, e.across.is_some(), diags));
    let priority = e.priority.map(|p| priority(p, diags));
    if let Some(a) = &e.alert {
        alert(a, diags);
    }
    if diags.len() > before {
        return None;
    }
    let spec = EventSpec {
        name: e.name.clone(),
        filters,
        predicate: predicate?,
        granularity,
        interval_ns: interval_ns?,
        scope: scope(e.across.as_ref(), diags)?,
        drill_downs: Vec::new(),
        on_demand: e.on_demand.is_some(),
        capture,
        priority: priority.flatten(),
    };
    if let Some(span) = e.on_demand {
        if spec.needs_connection_state() {
            diags.push(
                Diagnostic::new(
                    codes::BAD_ON_DEMAND,
                    format!("event `{}` reads TCP connection state and cannot be installed on demand", e.name),
                    span,
                )
                .here("installed mid-stream")
                .help("`is_lost`, `rtt`, `seq`, `ack` and `dup` follow a connection from its first packet, which an event installed on demand has not seen; use them in an event installed from the start"),
            );
            return None;
        }
    }
    Some(spec)
}

/// `alert after N windows, resolve after M windows`: each count from 1 to
/// [`AlertClause::MAX_WINDOWS`] (the parser has refused decimals).
fn alert(a: &crate::ast::AlertClause, diags: &mut Vec<Diagnostic>) {
    const MAX: u64 = crate::ast::AlertClause::MAX_WINDOWS;
    for (part, count) in [("after", a.after), ("resolve after", a.resolve_after)] {
        let Some((n, span)) = count else { continue };
        let d = if n == 0 {
            let help = if part == "after" {
                "an alert fires at the earliest in the first window its predicate holds: leave `after` out (the default is `after 1 window`) to fire at once"
            } else {
                "an alert resolves at the earliest once a window closed without a firing: leave `resolve after` out (the default is `resolve after 1 window`)"
            };
            Diagnostic::new(
                codes::BAD_ALERT_COUNT,
                format!("`{part} 0 windows` is not a count of windows"),
                span,
            )
            .here("at least 1")
            .help(help)
        } else if n > MAX {
            Diagnostic::new(
                codes::BAD_ALERT_COUNT,
                format!("`{part} {n} windows` is more than {MAX} windows"),
                span,
            )
            .here(format!("at most {MAX}"))
            .help(crate::parser::ALERT_HELP)
        } else {
            continue;
        };
        diags.push(d);
    }
}

/// `priority N`: 0 to 100 (the parser has refused decimals and negatives).
fn priority((n, span): (u64, Span), diags: &mut Vec<Diagnostic>) -> Option<u8> {
    const MAX_PRIORITY: u8 = EventSpec::MAX_PRIORITY;
    match u8::try_from(n) {
        Ok(p) if p <= MAX_PRIORITY => Some(p),
        _ => {
            diags.push(
                Diagnostic::new(
                    codes::BAD_PRIORITY,
                    format!("priority `{n}` is above {MAX_PRIORITY}"),
                    span,
                )
                .here(format!("above {MAX_PRIORITY}"))
                .help(crate::parser::PRIORITY_HELP),
            );
            None
        }
    }
}

/// `then capture`: each span a duration of at most an hour; not on
/// network-wide events (each host keeps only its own packets).
fn capture(c: &Capture, network: bool, diags: &mut Vec<Diagnostic>) -> Option<CaptureSpec> {
    let bad = |msg: String, span: Span, here: &str, help: &str| {
        Diagnostic::new(codes::BAD_CAPTURE, msg, span)
            .here(here)
            .help(help)
    };
    if network {
        diags.push(bad(
            "`then capture` on a network-wide event".into(),
            c.span,
            "each host keeps only its own packets",
            "capture around the per-host event instead: write `then capture` on an event without `across`",
        ));
        return None;
    }
    let mut ns = |q: &Option<Quantity>| -> Option<u64> {
        let Some(q) = q else { return Some(0) };
        let nanos = q.unit.and_then(crate::ast::Unit::nanos);
        let value = nanos.map(|n| q.value.as_f64() * n as f64);
        match value {
            Some(v) if (0.0..=CaptureSpec::MAX_NS as f64).contains(&v) => Some(v.round() as u64),
            Some(_) => {
                diags.push(bad(
                    format!("`{q}` is longer than an hour"),
                    q.span,
                    "too long",
                    "captured packets wait in memory: capture at most `3600s` either side",
                ));
                None
            }
            None => {
                diags.push(bad(
                    format!("`{q}` is not a duration"),
                    q.span,
                    "not a duration",
                    "write a time, e.g. `then capture 5s before 500ms after`",
                ));
                None
            }
        }
    };
    let before_ns = ns(&c.before);
    let after_ns = ns(&c.after);
    Some(CaptureSpec {
        before_ns: before_ns?,
        after_ns: after_ns?,
    })
}

/// The event's scope; a share above 100% or a count beyond 2^32 is refused.
fn scope(across: Option<&crate::ast::Across>, diags: &mut Vec<Diagnostic>) -> Option<Scope> {
    let Some(a) = across else {
        return Some(Scope::Host);
    };
    let Some(q) = &a.quorum else {
        return Some(Scope::Network);
    };
    let max = if q.percent { 99 } else { u64::from(u32::MAX) };
    match u32::try_from(q.n) {
        Ok(n) if q.n <= max => Some(Scope::Quorum(crate::spec::Quorum {
            more_than: n,
            percent: q.percent,
        })),
        _ => {
            let (msg, help) = if q.percent {
                (
                    format!("no share of the hosts is more than {}%", q.n),
                    "a share is 0 to 99: `across more than 50% of hosts`",
                )
            } else {
                (
                    format!("{} hosts is more than Clarion counts", q.n),
                    "count hosts up to 4294967295",
                )
            };
            diags.push(
                Diagnostic::new(codes::BAD_QUORUM, msg, q.span)
                    .here("out of range")
                    .help(help),
            );
            None
        }
    }
}
