//! The feed's note of a report's completeness, run in Node on reports as
//! clarion-report serializes them (so a renamed field shows here): the
//! report is lossless exactly when nothing was dropped, malformed or
//! untracked, the window was complete and every host answered; a
//! network-wide report decided without some hosts names them, in order.

mod common;

use std::sync::Arc;

use clarion_report::{Completeness, GroupKey, Origin, Report, Window};
use common::{run_node, Lcg};
use serde_json::Value;

const HOSTS: &[&str] = &["web-1", "web-2", "db-1", "cache-7"];

fn report(rng: &mut Lcg) -> Report {
    let pick = |rng: &mut Lcg| if rng.next(3) == 0 { 1 + rng.next(5000) } else { 0 };
    let dropped = pick(rng);
    let malformed = pick(rng);
    let untracked = pick(rng);
    let complete = rng.next(3) != 0;
    // Only a report that is not complete can lack hosts.
    let missing_hosts = if complete {
        Vec::new()
    } else {
        HOSTS
            .iter()
            .filter(|_| rng.next(2) == 0)
            .map(|h| Arc::<str>::from(*h))
            .collect()
    };
    Report {
        event: Arc::from("e"),
        window: Window {
            start_ns: 1_000_000_000,
            end_ns: 1_100_000_000,
        },
        group: GroupKey::default(),
        values: vec![(Arc::from("sum(volume)"), 1.0)].into(),
        origin: Origin {
            host: Arc::from("manager"),
            worker: u32::MAX,
        },
        completeness: Completeness {
            packets: 10,
            dropped,
            malformed,
            untracked,
            complete,
            ..Completeness::default()
        },
        capture: None,
        missing_hosts: missing_hosts.into(),
    }
}

#[test]
fn the_feed_notes_what_was_lost_and_which_hosts_did_not_answer() {
    let mut rng = Lcg(7);
    let reports: Vec<Report> = (0..300).map(|_| report(&mut rng)).collect();
    let input = Value::Array(reports.iter().map(Report::to_json).collect()).to_string();
    let Some(out) = run_node("completeness.mjs", &input) else {
        return;
    };
    let notes: Vec<Value> = serde_json::from_str(&out).expect("the notes as JSON");
    assert_eq!(notes.len(), reports.len());
    let (mut lossy, mut partial) = (0, 0);
    for (r, n) in reports.iter().zip(&notes) {
        let c = &r.completeness;
        let lossless = c.dropped == 0
            && c.malformed == 0
            && c.untracked == 0
            && c.complete
            && r.missing_hosts.is_empty();
        assert_eq!(n["lossless"], lossless, "{n} for {}", r.to_json());
        let missing: Vec<&str> = r.missing_hosts.iter().map(|h| &**h).collect();
        assert_eq!(n["missing"], serde_json::json!(missing), "{}", r.to_json());
        let title = n["title"].as_str().expect("a title");
        assert_eq!(title.is_empty(), lossless, "{title}");
        for h in &missing {
            assert!(title.contains(h), "{title} names {h}");
        }
        if c.dropped > 0 {
            assert!(
                title.contains(&format!("{} packets dropped", c.dropped)),
                "{title}"
            );
        }
        lossy += usize::from(!lossless);
        partial += usize::from(!missing.is_empty());
    }
    assert!(lossy > 50 && partial > 20, "{lossy} lossy, {partial} partial");
}
