//! Classification throughput: TSS alone, TSS + megaflows, USS + uniflows,
//! on ACL and firewall sets from ClassBench's `acl1` and `fw1` seeds with a
//! Pareto-local trace, cache of 1,000 entries (Trident's evaluation
//! setting). Each iteration classifies the whole trace with a classifier
//! kept warm across iterations (the steady state a host stage sees).
//!
//! The `*_warm` groups measure the fast paths alone at a 100% hit rate:
//! the cache is first filled with the trace's first 1,000 distinct
//! headers, and each iteration classifies 20,000 packets drawn from them
//! (`gen::hot_trace`, as `clarion-lab classify --warm`), one call a packet
//! (`uss`, `megaflow`) or one `classify_batch` call (`*_batch`, as the lab).

use clarion_classify::gen::{self, Kind, Locality};
use clarion_classify::{Classifier, FastPath, Semantics};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    for (kind, name) in [(Kind::Acl, "acl"), (Kind::Fw, "fw")] {
        for n in [100usize, 1000, 10_000] {
            let rules = gen::rules(kind, n, 1);
            let trace = gen::trace(&rules, 20_000, Some(Locality::CLASSBENCH), 1);
            let mut g = c.benchmark_group(format!("{name}_{n}"));
            g.throughput(Throughput::Elements(trace.len() as u64));
            g.sample_size(10);
            for (label, fp) in [
                ("tss", FastPath::None),
                ("megaflow", FastPath::Megaflow { capacity: 1000 }),
                ("uss", FastPath::Uss { capacity: 1000 }),
            ] {
                let mut cl =
                    Classifier::new(&rules, Semantics::FirstMatch, fp).expect("generated rules are valid");
                g.bench_function(label, |b| {
                    b.iter_batched(
                        || (),
                        |()| {
                            for k in &trace {
                                black_box(cl.classify(k));
                            }
                        },
                        BatchSize::PerIteration,
                    )
                });
            }
            g.finish();

            let (headers, hot) = gen::hot_trace(&trace, 1000, 20_000, 1);
            let mut g = c.benchmark_group(format!("{name}_{n}_warm"));
            g.throughput(Throughput::Elements(hot.len() as u64));
            g.sample_size(10);
            for (label, fp) in [
                ("megaflow", FastPath::Megaflow { capacity: 1000 }),
                ("uss", FastPath::Uss { capacity: 1000 }),
            ] {
                let mut cl =
                    Classifier::new(&rules, Semantics::FirstMatch, fp).expect("generated rules are valid");
                for k in &headers {
                    black_box(cl.classify(k));
                }
                g.bench_function(label, |b| {
                    b.iter(|| {
                        for k in &hot {
                            black_box(cl.classify(k));
                        }
                    })
                });
                let mut out = Vec::with_capacity(hot.len());
                g.bench_function(format!("{label}_batch"), |b| {
                    b.iter(|| {
                        out.clear();
                        cl.classify_batch(&hot, &mut out);
                        black_box(&out);
                    })
                });
                let s = cl.stats();
                assert_eq!(s.evictions, 0, "{name}_{n} {label}: the headers fit the cache");
            }
            g.finish();
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
