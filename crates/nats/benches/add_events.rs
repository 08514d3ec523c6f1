//! Adding events to the manager's book (`POST /v1/events`, issue 33): one
//! request of N events, parsed, checked, placed, split and stored in one
//! transaction. Linear in N: the book finds names through an index and
//! the store commits once (it was O(N²) in the names and one commit per
//! event: 10,000 events took 34 s with the API in between).
//!
//! `cargo bench -p clarion-nats --bench add_events`

use std::time::Instant;

use clarion_manager::{Inventory, Manager};
use clarion_nats::{EventBook, OnDuplicate};
use clarion_store::Store;

fn main() {
    let inv = Inventory::parse("a 10.0.0.0/24\nb 10.0.1.0/24\nc 10.0.2.0/24\n").expect("inventory");
    println!("events  in memory  with a store  (one request each)");
    for n in [1_000usize, 5_000, 20_000] {
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&format!(
                "event e{i}\n  filter dst_ip in 10.0.0.0/23\n  when sum(volume) > 300\n  per dst_ip/16\n  every 10ms\n  across hosts\n"
            ));
        }
        let mut took = Vec::new();
        for store in [false, true] {
            let dir = tempfile::tempdir().expect("tempdir");
            let st = store.then(|| Store::open(&dir.path().join("m.sqlite")).expect("store"));
            let mut book = EventBook::new(Manager::new("m", inv.clone()), st);
            let t = Instant::now();
            let (added, _) = book.add(&text, OnDuplicate::Refuse).expect("adds");
            took.push(t.elapsed());
            assert_eq!(added.len(), n);
        }
        println!("{n:>6}  {:>9.1?}  {:>12.1?}", took[0], took[1]);
    }
}
