//! Classification throughput: TSS alone, TSS + megaflows, USS + uniflows,
//! on ClassBench-style ACL and firewall sets with a Pareto-local trace,
//! cache of 1,000 entries (Trident's evaluation setting). Each iteration
//! classifies the whole trace with a classifier kept warm across
//! iterations (the steady state a host stage sees).

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
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
