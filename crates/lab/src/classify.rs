//! `clarion-lab classify`: Trident's fast-path comparison (Table 2, Fig. 6)
//! on this implementation: USS + uniflows against TSS + megaflows.
//!
//! For each rule set (ACL or firewall, drawn from ClassBench's `acl1_seed`
//! or `fw1_seed` by `clarion_classify::gen`) and size, one trace drawn
//! from the rules (Pareto locality unless `--no-locality`) is classified
//! by both fast paths, each with a cache of `--cache` entries, in the same
//! run: fast-path hash lookups per packet, hit rate, mean log2 space of
//! the cached entries, slow-path lookups per miss and packets per second
//! (median of `--runs` timed passes, each
//! with an empty cache, on whatever core the OS gives; the two fast paths'
//! passes alternate, so both see the same machine load). Both answers are
//! compared packet by packet (first-match semantics), and `--reference`
//! packets spread over the trace (10,000 by default) against the linear
//! reference; a disagreement is a runtime failure (exit 1), as in the
//! crate's tests.
//!
//! `--warm` measures the fast paths alone, at a 100% hit rate: each pass
//! first classifies, untimed, the trace's first `--cache` distinct headers
//! (filling either cache with every entry it will need), then times
//! `--packets` packets drawn uniformly from those headers
//! (`clarion_classify::gen::hot_trace`); the counters are those of the
//! timed part, so the hit rate reads 100%.
//!
//! Beside them, the size of the full USS table (Algorithms 1-3) or the
//! fact that it exceeds 4 Mi uniflows.
//!
//! Results and method: docs/performance.md, "Export classification (USS
//! and megaflows)".

use std::process::ExitCode;
use std::time::Instant;

use anyhow::anyhow;
use clap::{Args, ValueEnum};
use clarion_classify::gen::{self, Kind, Locality};
use clarion_classify::reference;
use clarion_classify::{Classifier, ClassifyError, FastPath, Semantics, Stats, UssTable, Verdict};
use clarion_wire::FlowKey;

use crate::Failure;

#[derive(Args, Debug)]
pub struct ClassifyArgs {
    /// Rule set kinds, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [RuleKind::Acl, RuleKind::Fw], value_name = "KIND,..")]
    pub rules: Vec<RuleKind>,

    /// Rule set sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [100usize, 1000, 10_000], value_name = "N,..")]
    pub sizes: Vec<usize>,

    /// Fast-path cache capacity (entries), the same for both fast paths.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub cache: usize,

    /// Packets per trace.
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    pub packets: usize,

    /// Seed of the rule sets and traces.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Draw every packet independently (no Pareto repetition of headers).
    #[arg(long)]
    pub no_locality: bool,

    /// Timed passes per fast path (each with a fresh, empty cache); the
    /// median packets/s is reported (the machine is shared).
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub runs: usize,

    /// Measure at a 100% hit rate: warm each cache with the trace's first
    /// --cache distinct headers, then time --packets packets drawn from them.
    #[arg(long)]
    pub warm: bool,

    /// Packets, spread evenly over each trace, whose answer (both fast
    /// paths agree on every packet) is also checked against the linear
    /// reference (`clarion_classify::reference`); a disagreement is a
    /// failure. 0 checks none.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub reference: usize,

    /// One JSON object per rule set instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RuleKind {
    /// Access-control lists from ClassBench's `acl1_seed`.
    Acl,
    /// Firewall rules from ClassBench's `fw1_seed`.
    Fw,
}

/// Uniflows beyond which the full USS table is reported as not fitting.
const FULL_USS_LIMIT: usize = 1 << 22;

struct Run {
    stats: Stats,
    pps: f64,
}

/// One timed pass with a new classifier: `warmup` classified untimed
/// first, then `trace` timed (one `classify_batch` call, as for either
/// fast path), its verdicts left in `out`; the counters are those of the
/// timed part.
fn pass(
    rules: &[clarion_classify::Rule],
    fp: FastPath,
    warmup: &[FlowKey],
    trace: &[FlowKey],
    out: &mut Vec<Verdict>,
) -> Result<(Stats, f64), Failure> {
    let mut c = Classifier::new(rules, Semantics::FirstMatch, fp).map_err(|e| anyhow!("{e}"))?;
    for k in warmup {
        std::hint::black_box(c.classify(k));
    }
    let before = c.stats();
    out.clear();
    let t = Instant::now();
    c.classify_batch(trace, out);
    let pps = trace.len() as f64 / t.elapsed().as_secs_f64().max(1e-9);
    Ok((c.stats().since(&before), pps))
}

/// `runs` passes of each fast path, alternating (which goes first swaps
/// every round): the median packets/s of each, and the counters of its
/// last pass (every pass counts alike: same trace, same seeds).
fn run_both(
    rules: &[clarion_classify::Rule],
    cache: usize,
    warmup: &[FlowKey],
    trace: &[FlowKey],
    runs: usize,
    (vu, vm): (&mut Vec<Verdict>, &mut Vec<Verdict>),
) -> Result<(Run, Run), Failure> {
    let (uss, mf) = (
        FastPath::Uss { capacity: cache },
        FastPath::Megaflow { capacity: cache },
    );
    let (mut pu, mut pm) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    let (mut su, mut sm) = (Stats::default(), Stats::default());
    for round in 0..runs.max(1) {
        for first_uss in [round % 2 == 0, round % 2 == 1] {
            if first_uss {
                let (s, p) = pass(rules, uss, warmup, trace, vu)?;
                su = s;
                pu.push(p);
            } else {
                let (s, p) = pass(rules, mf, warmup, trace, vm)?;
                sm = s;
                pm.push(p);
            }
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok((
        Run {
            stats: su,
            pps: median(pu),
        },
        Run {
            stats: sm,
            pps: median(pm),
        },
    ))
}

pub fn classify(a: &ClassifyArgs) -> Result<ExitCode, Failure> {
    if a.cache == 0 || a.packets == 0 || a.sizes.contains(&0) {
        return Err(Failure::Usage(
            "clarion-lab: error: --cache, --packets and --sizes must be positive".into(),
        ));
    }
    let locality = (!a.no_locality).then_some(Locality::CLASSBENCH);
    if !a.json {
        println!(
            "{:<10} {:>7} {:>6} {:>9} | {:>9} {:>9} {:>9} {:>9} {:>8} | {:>9} {:>9} {:>9} {:>9} {:>8} | {:>6}",
            "rules",
            "entries",
            "tuples",
            "full uss",
            "uss lk/p",
            "uss hit",
            "uss sp2",
            "uss Mp/s",
            "uss ns/p",
            "mf lk/p",
            "mf hit",
            "mf sp2",
            "mf Mp/s",
            "mf ns/p",
            "ratio"
        );
    }
    let (mut vu, mut vm) = (Vec::with_capacity(a.packets), Vec::with_capacity(a.packets));
    for &kind in &a.rules {
        for &n in &a.sizes {
            let (k, name) = match kind {
                RuleKind::Acl => (Kind::Acl, "acl"),
                RuleKind::Fw => (Kind::Fw, "fw"),
            };
            let rules = gen::rules(k, n, a.seed);
            let trace = gen::trace(&rules, a.packets, locality, a.seed);
            let (warmup, trace) = if a.warm {
                gen::hot_trace(&trace, a.cache, a.packets, a.seed)
            } else {
                (Vec::new(), trace)
            };
            let entries = Classifier::new(&rules, Semantics::FirstMatch, FastPath::None)
                .map_err(|e| anyhow!("{e}"))?
                .entry_count();
            // The full USS table (Algorithms 1-3), if it fits: its size shows
            // why Trident caches uniflows instead.
            let full = match UssTable::new(&rules, Semantics::FirstMatch, FULL_USS_LIMIT) {
                Ok(t) => Some(t.uniflow_count()),
                Err(ClassifyError::TooManyUniflows { .. }) => None,
                Err(e) => return Err(anyhow!("{e}").into()),
            };
            let (u, m) = run_both(&rules, a.cache, &warmup, &trace, a.runs, (&mut vu, &mut vm))?;
            if let Some(i) = (0..trace.len()).find(|&i| vu[i] != vm[i]) {
                return Err(anyhow!(
                    "{name}_{n}: USS and megaflow disagree on packet {i}: {:?} vs {:?}",
                    vu[i],
                    vm[i]
                )
                .into());
            }
            let label = format!("{name}_{n}");
            let checked = check_reference(&rules, &trace, &vu, a.reference).map_err(|i| {
                anyhow!(
                    "{label}: packet {i} classified {:?}, the linear reference says {:?}",
                    vu[i],
                    reference::first_match(&rules, &trace[i])
                )
            })?;
            let (su, sm) = (&u.stats, &m.stats);
            if a.json {
                let side = |r: &Run| {
                    serde_json::json!({
                        "fast_lookups_per_packet": r.stats.fast_lookups_per_packet(),
                        "hit_rate": r.stats.hit_rate(),
                        "mean_cached_space_log2": r.stats.mean_cached_space_log2(),
                        "slow_lookups_per_miss": r.stats.slow_lookups as f64 / r.stats.misses.max(1) as f64,
                        "evictions": r.stats.evictions,
                        "cache_entries": r.stats.cache_entries,
                        "fast_subtables": r.stats.fast_subtables,
                        "packets_per_second": r.pps,
                        "ns_per_packet": 1e9 / r.pps,
                    })
                };
                println!(
                    "{}",
                    serde_json::json!({
                        "rules": label, "entries": entries, "tuples": su.slow_tuples,
                        "reference_checked": checked,
                        "packets": trace.len(), "cache": a.cache, "warm": a.warm, "distinct_headers": a.warm.then_some(warmup.len()),
                        "full_uss_uniflows": full,
                        "uss": side(&u), "megaflow": side(&m), "pps_ratio_uss_over_megaflow": u.pps / m.pps,
                    })
                );
            } else {
                println!(
                    "{:<10} {:>7} {:>6} {:>9} | {:>9.3} {:>8.1}% {:>9.1} {:>9.2} {:>8.1} | {:>9.3} {:>8.1}% {:>9.1} {:>9.2} {:>8.1} | {:>6.2}",
                    label,
                    entries,
                    su.slow_tuples,
                    full.map_or_else(|| ">4M".to_string(), |n| n.to_string()),
                    su.fast_lookups_per_packet(),
                    100.0 * su.hit_rate(),
                    su.mean_cached_space_log2(),
                    u.pps / 1e6,
                    1e9 / u.pps,
                    sm.fast_lookups_per_packet(),
                    100.0 * sm.hit_rate(),
                    sm.mean_cached_space_log2(),
                    m.pps / 1e6,
                    1e9 / m.pps,
                    u.pps / m.pps
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Checks `n` packets of `trace`, evenly spread, against the linear
/// reference: `Ok(packets checked)`, or the index of the first packet whose
/// verdict disagrees.
fn check_reference(
    rules: &[clarion_classify::Rule],
    trace: &[FlowKey],
    got: &[Verdict],
    n: usize,
) -> Result<usize, usize> {
    if n == 0 || trace.is_empty() {
        return Ok(0);
    }
    let step = (trace.len() / n).max(1);
    let mut checked = 0;
    for (i, (k, v)) in trace.iter().zip(got).enumerate().step_by(step).take(n) {
        let want = match reference::first_match(rules, k) {
            Some(a) => Verdict::Action(a),
            None => Verdict::NoMatch,
        };
        if *v != want {
            return Err(i);
        }
        checked += 1;
    }
    Ok(checked)
}
