//! The cost of a fast-path hit, for profilers: one fast path, a warm cache
//! of 1,000 entries, `passes` passes over 200,000 packets that all hit
//! (`gen::hot_trace`, as `clarion-lab classify --warm`).
//!
//! Instructions a hit, by callgrind: run with 1 and with 6 passes and
//! divide the difference by 10^6 packets (setup cancels out):
//!
//! ```sh
//! cargo build --release -p clarion-classify --example hit_cost
//! for p in 1 6; do valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!   target/release/examples/hit_cost uss acl 100 batch $p; done
//! ```
//!
//! Arguments: `uss|megaflow`, `acl|fw`, rules, `batch|single` (one
//! `classify_batch` call a pass, or one `classify` call a packet), passes.
//! Prints ns a packet (the median pass) and the timed passes' hit rate.

use std::hint::black_box;
use std::time::Instant;

use clarion_classify::gen::{self, Kind, Locality};
use clarion_classify::{Classifier, FastPath, Semantics};

fn main() -> Result<(), String> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| a.get(i).cloned().unwrap_or_else(|| default.to_string());
    let fast = match arg(0, "uss").as_str() {
        "uss" => FastPath::Uss { capacity: 1000 },
        "megaflow" => FastPath::Megaflow { capacity: 1000 },
        other => return Err(format!("fast path {other:?}: uss or megaflow")),
    };
    let kind = match arg(1, "acl").as_str() {
        "acl" => Kind::Acl,
        "fw" => Kind::Fw,
        other => return Err(format!("rule kind {other:?}: acl or fw")),
    };
    let n: usize = arg(2, "100").parse().map_err(|e| format!("rules: {e}"))?;
    let batch = arg(3, "batch") == "batch";
    let passes: usize = arg(4, "5").parse().map_err(|e| format!("passes: {e}"))?;

    let rules = gen::rules(kind, n, 1);
    let trace = gen::trace(&rules, 1_000_000, Some(Locality::CLASSBENCH), 1);
    let (headers, hot) = gen::hot_trace(&trace, 1000, 200_000, 1);
    let mut c = Classifier::new(&rules, Semantics::FirstMatch, fast).map_err(|e| e.to_string())?;
    for k in &headers {
        black_box(c.classify(k));
    }
    let before = c.stats();
    let mut out = Vec::with_capacity(hot.len());
    let mut ns = Vec::with_capacity(passes);
    for _ in 0..passes {
        out.clear();
        let t = Instant::now();
        if batch {
            c.classify_batch(&hot, &mut out);
        } else {
            for k in &hot {
                out.push(c.classify(k));
            }
        }
        ns.push(t.elapsed().as_secs_f64() * 1e9 / hot.len().max(1) as f64);
        black_box(&out);
    }
    ns.sort_by(f64::total_cmp);
    let s = c.stats().since(&before);
    println!(
        "{:.1} ns a packet (median of {passes}), hit rate {:.4}",
        ns.get(ns.len() / 2).copied().unwrap_or(0.0),
        s.hit_rate()
    );
    Ok(())
}
