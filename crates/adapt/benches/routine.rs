//! Alg. 1 on the size the brief bounds: 64 states over 50 tasks.
//!
//! The graph: one chain removing the lowest-ranked of 50 tasks per step
//! (51 states, depth 50), and 13 more full states branching into it at
//! varied depths (their own extra task), so 64 states, every one with
//! packets. Three budgets: one that fits unshed (one dot product), one
//! met half-way down the chain, one that saturates (every depth tried,
//! the worst case). Prints the time per `compute`.
//!
//! Run: `cargo bench -p clarion-adapt --bench routine`.

use criterion::{black_box, criterion_group, criterion_main, Criterion};

use clarion_adapt::{GraphBuilder, Routine, StateGraph};

fn graph() -> StateGraph {
    let mut b = GraphBuilder::new();
    // Chain: state k measures tasks 0..k at 10 + 4k ns.
    let mut prev = b.add_state(None, 10.0, &[]);
    let mut chain = vec![prev];
    for k in 1..=50u16 {
        let tasks: Vec<u16> = (0..k).collect();
        prev = b.add_state(Some(prev), 10.0 + 4.0 * f64::from(k), &tasks);
        chain.push(prev);
    }
    for i in 0..13u16 {
        let base = usize::from(10 + 3 * i); // branch into chain state `base`
        let mut tasks: Vec<u16> = (0..base as u16).collect();
        tasks.push(49 - i); // one task ranked above the rest of its set
        b.add_state(Some(chain[base]), 10.0 + 4.0 * base as f64 + 7.0, &tasks);
    }
    b.build().expect("valid bench graph")
}

fn bench(c: &mut Criterion) {
    let g = graph();
    assert_eq!(g.len(), 64);
    let r = Routine::new(&g);
    let packets: Vec<u64> = (0..g.len() as u64).map(|i| 1_000 + 37 * i).collect();
    let full = r.compute(&packets, f64::INFINITY).expect("len").full_ns;
    let mut group = c.benchmark_group("routine_64_states_50_tasks");
    for (name, target) in [("fits", full + 1.0), ("half", full / 2.0), ("saturated", 1.0)] {
        group.bench_function(name, |b| {
            b.iter(|| r.compute(black_box(&packets), black_box(target)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
