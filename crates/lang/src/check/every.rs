//! `every DURATION`: the event's interval.

use crate::ast::{NumLit, Quantity, Unit};
use crate::error::{codes, Diagnostic};

/// The interval of an event without `every`: 10 ms.
pub const DEFAULT_NS: u64 = 10_000_000;

const NS_PER_MS: u64 = 1_000_000;

/// The longest interval: one hour.
const MAX_MS: u64 = 3_600_000;

/// The interval in nanoseconds: a whole, positive number of milliseconds,
/// at most an hour. `None` after reporting a problem.
pub fn lower_every(q: Option<&Quantity>, diags: &mut Vec<Diagnostic>) -> Option<u64> {
    let Some(q) = q else { return Some(DEFAULT_NS) };
    let err = |here: &str, msg: String| Diagnostic::new(codes::BAD_INTERVAL, msg, q.span).here(here);
    let Some(unit) = q.unit else {
        diags.push(
            err("no unit", "the interval has no unit".into()).help(format!("write `every {}ms`", q.value)),
        );
        return None;
    };
    let Some(unit_ns) = unit.nanos() else {
        diags.push(
            err("not a unit of time", format!("`{unit}` is not a unit of time"))
                .help("intervals are in `ms` or `s`, e.g. `every 10ms`"),
        );
        return None;
    };
    let Some(ms) = whole_ms(q.value, unit_ns) else {
        let help = match unit {
            Unit::Us => "intervals are whole milliseconds: `1000us` is `1ms`",
            _ => "intervals are whole milliseconds, e.g. `every 10ms` or `every 1.5s`",
        };
        diags.push(
            err(
                "not whole milliseconds",
                format!("the interval `{q}` is not a whole number of milliseconds"),
            )
            .help(help),
        );
        return None;
    };
    if ms == 0 {
        diags.push(err("zero", "the interval must be longer than zero".into()).help("e.g. `every 10ms`"));
        return None;
    }
    if ms > MAX_MS {
        diags.push(
            err("too long", format!("the interval `{q}` is longer than an hour"))
                .help("write at most `every 3600s`"),
        );
        return None;
    }
    Some(ms * NS_PER_MS)
}

/// The value in whole milliseconds, if it is one (values past an hour
/// saturate, to be refused by the caller).
pub(super) fn whole_ms(v: NumLit, unit_ns: u64) -> Option<u64> {
    match v {
        NumLit::Int(n) => {
            let ns = u128::from(n) * u128::from(unit_ns);
            let ms = ns / u128::from(NS_PER_MS);
            (ns % u128::from(NS_PER_MS) == 0).then(|| u64::try_from(ms).unwrap_or(u64::MAX))
        }
        NumLit::Dec(x) => {
            let ms = x * (unit_ns as f64 / NS_PER_MS as f64);
            if ms > MAX_MS as f64 {
                return Some(MAX_MS + 1);
            }
            let rounded = ms.round();
            ((ms - rounded).abs() <= 1e-9 * rounded.max(1.0)).then_some(rounded as u64)
        }
    }
}
