//! The console draws each value's threshold, read from the event's
//! canonical source by the page (reports carry no thresholds). Checked
//! against the language itself: on generated events (aggregates, both
//! orders, every unit, `and`/`or`/`not`, parentheses, intervals), the
//! thresholds the page reads are the comparisons of one aggregate with a
//! number in the lowered predicate (clarion-lang), by the aggregate's
//! canonical text (the name reports use), with the value in the same
//! units.

mod common;

use std::collections::BTreeMap;

use clarion_lang::spec::{CmpOp, Pred};
use common::{run_node, Lcg};
use serde_json::{json, Value};

const AGGS: &[&str] = &[
    "sum(volume)",
    "count(packets)",
    "max(ttl)",
    "avg(size)",
    "min(size)",
    "count(tcp_flags == 2)",
    "count(volume > 1Mbps)",
    "sum(volume / 2)",
];
const OPS: &[&str] = &[">", ">=", "<", "<=", "=", "!="];
const UNITS: &[&str] = &[
    "", "%", "B", "KB", "MB", "GB", "KiB", "MiB", "GiB", "bps", "Kbps", "Mbps", "Gbps", "us", "ms", "s",
];
const EVERY: &[&str] = &["1ms", "10ms", "20ms", "100ms", "1s", "5s"];

fn pick<'a>(rng: &mut Lcg, from: &[&'a str]) -> &'a str {
    from[rng.next(from.len() as u64) as usize]
}

fn comparison(rng: &mut Lcg) -> String {
    let agg = pick(rng, AGGS);
    let op = pick(rng, OPS);
    let unit = pick(rng, UNITS);
    let n = if rng.next(4) == 0 && matches!(unit, "us" | "ms" | "s" | "") {
        format!("{}.{}", rng.next(100), 1 + rng.next(9))
    } else {
        format!("{}", rng.next(5000))
    };
    match rng.next(3) {
        0 => format!("{n}{unit} {op} {agg}"),
        _ => format!("{agg} {op} {n}{unit}"),
    }
}

fn predicate(rng: &mut Lcg, depth: u32) -> String {
    match rng.next(if depth > 2 { 1 } else { 5 }) {
        0 | 1 => comparison(rng),
        2 => format!("not {}", comparison(rng)),
        3 => format!("({} or {})", predicate(rng, depth + 1), predicate(rng, depth + 1)),
        _ => format!("{} and {}", predicate(rng, depth + 1), predicate(rng, depth + 1)),
    }
}

/// The reference: every `aggregate op number` (either order) in the
/// predicate's tree, the first per aggregate, with the op as seen from the aggregate.
fn reference(p: &Pred, out: &mut BTreeMap<String, (String, f64)>) {
    let text = |op: CmpOp, flip: bool| {
        let op = match (op, flip) {
            (CmpOp::Gt, false) | (CmpOp::Lt, true) => ">",
            (CmpOp::Lt, false) | (CmpOp::Gt, true) => "<",
            (CmpOp::Ge, false) | (CmpOp::Le, true) => ">=",
            (CmpOp::Le, false) | (CmpOp::Ge, true) => "<=",
            (CmpOp::Eq, _) => "==", // as the canonical form writes it
            (CmpOp::Ne, _) => "!=",
        };
        op.to_string()
    };
    match p {
        Pred::Cmp(op, l, r) => match (&**l, &**r) {
            (Pred::Agg(a), Pred::Num(n)) => {
                out.entry(a.to_string()).or_insert((text(*op, false), *n));
            }
            (Pred::Num(n), Pred::Agg(a)) => {
                out.entry(a.to_string()).or_insert((text(*op, true), *n));
            }
            _ => {}
        },
        Pred::And(l, r) | Pred::Or(l, r) => {
            reference(l, out);
            reference(r, out);
        }
        Pred::Not(x) => reference(x, out),
        _ => {}
    }
}

#[test]
fn the_thresholds_drawn_are_the_languages() {
    let mut rng = Lcg(0x0007_e570_f7e5);
    let mut cases = Vec::new();
    let mut wanted = Vec::new();
    while cases.len() < 400 {
        let src = format!(
            "event e\n  when {}\n  per 5tuple\n  every {}\n",
            predicate(&mut rng, 0),
            pick(&mut rng, EVERY)
        );
        let Ok(file) = clarion_lang::parse(&src) else {
            continue;
        };
        let Ok(specs) = clarion_lang::lower(&file) else {
            continue;
        };
        let canonical = file.to_string();
        let mut want = BTreeMap::new();
        reference(&specs[0].predicate, &mut want);
        cases.push(json!({ "source": canonical, "interval_ns": specs[0].interval_ns }));
        wanted.push((canonical, want));
    }
    let Some(out) = run_node("thresholds.mjs", &Value::Array(cases).to_string()) else {
        return;
    };
    let got: Vec<BTreeMap<String, (String, f64)>> = serde_json::from_str(&out).expect("JSON");
    let mut compared = 0;
    for ((src, want), got) in wanted.iter().zip(&got) {
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "aggregates of\n{src}"
        );
        for (agg, (op, v)) in want {
            let (gop, gv) = &got[agg];
            assert_eq!(gop, op, "{agg} in\n{src}");
            assert!(
                (gv - v).abs() <= 1e-9 * v.abs().max(1.0),
                "{agg}: {gv} ≠ {v} in\n{src}"
            );
            compared += 1;
        }
    }
    assert!(compared > 400, "{compared} thresholds compared");
}
