//! The manager's satisfaction processing on one core: a host's report, the
//! polls it causes, the other hosts' answers and the decision, for 256
//! network-wide events over 4 hosts (the setting), per report.
//!
//!     cargo bench -p clarion-manager --bench decide

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use clarion_lang::spec::{
    AggCall, AggFunc, BaseVar, CmpOp, EventSpec, Filter, Granularity, PacketExpr, Pred, PrefixLens, Scope,
    Var,
};
use clarion_manager::{Inventory, Manager};
use clarion_report::{Completeness, GroupKey, Origin, Report, Window};

const EVENTS: usize = 256;

fn event(i: usize) -> EventSpec {
    EventSpec {
        capture: None,
        priority: None,
        name: format!("spike_{i}"),
        filters: vec![Filter::default()],
        predicate: Pred::Cmp(
            CmpOp::Gt,
            Box::new(Pred::Agg(AggCall {
                func: AggFunc::Sum,
                arg: PacketExpr::Var(Var {
                    base: BaseVar::Volume,
                    last_epoch: false,
                }),
            })),
            Box::new(Pred::Num(1000.0)),
        ),
        granularity: Granularity {
            dst_ip: Some(PrefixLens { v4: 24, v6: 64 }),
            ..Granularity::default()
        },
        interval_ns: 10_000_000,
        scope: Scope::Network,
        drill_downs: Vec::new(),
        on_demand: false,
    }
}

fn bench(c: &mut Criterion) {
    let inventory =
        Inventory::parse("a 10.0.0.0/24\nb 10.0.1.0/24\nc 10.0.2.0/24\nd 10.0.3.0/24\n").expect("inventory");
    let mut m = Manager::new("bench", inventory);
    let ids: Vec<usize> = (0..EVENTS)
        .map(|i| m.install(&event(i)).expect("installs").0)
        .collect();
    let mut window = 0u64;
    let mut g = c.benchmark_group("manager");
    g.throughput(Throughput::Elements(EVENTS as u64));
    g.bench_function(
        "256 events satisfied on 1 of 4 hosts, 3 answers each, decided",
        |b| {
            b.iter(|| {
                window += 10_000_000;
                let mut fired = 0;
                for &id in &ids {
                    let r = Report {
                        capture: None,
                        missing_hosts: Box::default(),
                        event: "".into(),
                        window: Window {
                            start_ns: window,
                            end_ns: window + 10_000_000,
                        },
                        group: GroupKey::default(),
                        values: vec![("".into(), 400.0)].into(),
                        origin: Origin::default(),
                        completeness: Completeness {
                            packets: 100,
                            ..Completeness::default()
                        },
                    };
                    let (polls, _) = m.satisfied(id, 0, &r).expect("satisfied");
                    for p in polls {
                        if let Ok(Some(d)) = m.answer(&p, Some(vec![250.0]), None) {
                            fired += usize::from(d.report.is_some());
                        }
                    }
                }
                black_box(fired)
            })
        },
    );
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
