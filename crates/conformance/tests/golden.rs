//! Golden tests on real captures (`../shared/captures/`, beside the
//! checkout): the monitor and the reference evaluator must produce the same
//! reports on every capture, for a set of events that fire on real traffic;
//! and the bundled example's reports must equal the committed golden file.
//!
//! Captures absent from this machine are skipped with a message.

mod common;

use common::{assert_same_reports, events, lines, monitor, read_inputs, reference, repo};

/// (capture file, minimum number of reports the golden events must produce on it)
const CAPTURES: &[(&str, usize)] = &[
    ("pathspider_real.pcap", 1000),
    ("pathspider_icmp_ttl.pcap", 100),
    ("pathspider_tcp_ecn.pcap", 10),
    ("gopacket_test301.pcapng", 10),
    ("libtrace_anon-v4.pcap", 10),
    ("libtrace_anon-v6.pcap", 10),
    ("dpkt_http.pcap", 3),
];

#[test]
fn monitor_equals_reference_on_real_captures() {
    let dir = repo().join("../shared/captures");
    if !dir.is_dir() {
        eprintln!(
            "skipping: {} not found (real captures live beside the checkout)",
            dir.display()
        );
        return;
    }
    let evs = events(&repo().join("crates/conformance/tests/golden/real_captures.clarion"));
    let mut fired = std::collections::BTreeSet::new();
    let mut all_present = true;
    for (name, min_reports) in CAPTURES {
        let path = dir.join(name);
        if !path.exists() {
            eprintln!("skipping {name}: not found");
            all_present = false;
            continue;
        }
        let inputs = read_inputs(&path);
        let expected = reference(&evs, &inputs);
        let got = monitor(&evs, &inputs);
        assert!(
            expected.len() >= *min_reports,
            "{name}: only {} reports; the test would prove little",
            expected.len()
        );
        assert_same_reports(name, &got, &expected);
        eprintln!(
            "{name}: {} frames, {} reports, monitor = reference",
            inputs.len(),
            got.len()
        );
        // A drill-down instance (`event[field=value]`) counts for its event.
        fired.extend(
            expected
                .iter()
                .map(|r| r.event.split('[').next().unwrap_or(&r.event).to_string()),
        );
    }
    if all_present {
        for e in &evs {
            assert!(
                fired.contains(&e.name),
                "{} fires on no capture; it proves nothing",
                e.name
            );
        }
    }
}

#[test]
fn paper_events_match_reference_on_the_example() {
    let evs = events(&repo().join("examples/paper.clarion"));
    assert_eq!(evs.len(), 6, "the six events of the paper");
    let inputs = read_inputs(&repo().join("examples/demo.pcap"));
    assert_eq!(lines(&monitor(&evs, &inputs)), lines(&reference(&evs, &inputs)));
}

#[test]
fn drill_down_example_matches_reference() {
    let evs = events(&repo().join("examples/drilldown.clarion"));
    let inputs = read_inputs(&repo().join("examples/demo.pcap"));
    let got = monitor(&evs, &inputs);
    let instances = got
        .iter()
        .filter(|r| r.event.starts_with("senders_to_lossy_dst["))
        .count();
    assert!(instances >= 10, "only {instances} reports from instances");
    assert_eq!(lines(&got), lines(&reference(&evs, &inputs)));
}

#[test]
fn example_reports_equal_the_golden_file() {
    let evs = events(&repo().join("examples/demo.clarion"));
    let inputs = read_inputs(&repo().join("examples/demo.pcap"));
    let got = monitor(&evs, &inputs);
    assert_eq!(lines(&got), lines(&reference(&evs, &inputs)));
    let golden_path = repo().join("crates/conformance/tests/golden/demo.jsonl");
    let text = lines(&got).join("\n") + "\n";
    if std::env::var_os("CLARION_BLESS").is_some() {
        std::fs::write(&golden_path, &text).expect("write golden file");
    }
    let golden = std::fs::read_to_string(&golden_path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with CLARION_BLESS=1 to create it)",
            golden_path.display()
        )
    });
    assert!(
        got.len() >= 5,
        "the bundled events should fire on the bundled capture"
    );
    assert_eq!(
        text, golden,
        "reports changed; if intended, rerun with CLARION_BLESS=1 and review the diff"
    );
}
