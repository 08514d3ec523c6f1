//! Adding events to the manager's book (`POST /v1/events`, issue 33): one
//! request of N events, in its two halves. `prepare` (parse, lower, check,
//! place, split, the API's answers) runs on a blocking task, apart from
//! the manager's loop; `apply` (names and the bound checked again, one
//! store transaction, each event recorded) is what the loop itself does.
//! Both linear in N: the book finds names through an index and the store
//! commits once (it was O(N²) in the names and one commit per event:
//! 10,000 events took 34 s with the API in between).
//!
//! `cargo bench -p clarion-nats --bench add_events`

use std::time::{Duration, Instant};

use clarion_manager::{Inventory, Manager};
use clarion_nats::{EventBook, OnDuplicate};
use clarion_store::Store;

fn main() {
    let inv = Inventory::parse("a 10.0.0.0/24\nb 10.0.1.0/24\nc 10.0.2.0/24\n").expect("inventory");
    println!("events  prepare (off the loop)  apply in memory  apply with a store  (median of 5)");
    for n in [1_000usize, 5_000, 20_000] {
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&format!(
                "event e{i}\n  filter dst_ip in 10.0.0.0/23\n  when sum(volume) > 300\n  per dst_ip/16\n  every 10ms\n  across hosts\n"
            ));
        }
        let (mut prepare, mut memory, mut stored) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..5 {
            for store in [false, true] {
                let dir = tempfile::tempdir().expect("tempdir");
                let st = store.then(|| Store::open(&dir.path().join("m.sqlite")).expect("store"));
                let mut book = EventBook::new(Manager::new("m", inv.clone()), st);
                let t = Instant::now();
                let prepared = EventBook::prepare(&inv, &text).expect("checks");
                prepare.push(t.elapsed());
                let t = Instant::now();
                let applied = book.apply(prepared, OnDuplicate::Refuse).expect("applies");
                if store { &mut stored } else { &mut memory }.push(t.elapsed());
                assert_eq!(applied.added.len(), n);
            }
        }
        let median = |v: &mut Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        println!(
            "{n:>6}  {:>22.1?}  {:>15.1?}  {:>18.1?}",
            median(&mut prepare),
            median(&mut memory),
            median(&mut stored)
        );
    }
}
