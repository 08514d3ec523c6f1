//! `clarion model`: the measured columns are a `FlowMeter`'s on the same
//! packets, the predictions are `clarion_flows::model`'s and within the
//! bound the flows crate holds them to (the reuse-distance model within 10%
//! of the meter's mean over hash seeds, or three standard errors of it), on
//! the bundled capture and every shared one; and the mistakes an operator makes.

mod common;

use std::path::{Path, PathBuf};

use clarion_flows::model::{compare, measure, predict};
use clarion_flows::{FlowConfig, FlowMeter};
use common::{clarion, load, repo, stderr};
use serde_json::Value;

/// Meter packets the seed average may take per capture and size.
const BUDGET: u64 = if cfg!(debug_assertions) {
    1_500_000
} else {
    5_000_000
};

/// JSON numbers come back within an ulp or two of the f64 written.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

fn run_json(pcap: &Path, sizes: &[usize]) -> Value {
    let mut cmd = clarion();
    cmd.arg("model")
        .arg("--pcap")
        .arg(pcap)
        .args(["--runs", "1", "--json"]);
    for s in sizes {
        cmd.args(["--record-cache", &s.to_string()]);
    }
    let o = cmd.output().expect("runs");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("one JSON object")
}

/// Every row against a meter and the models computed here.
fn check(pcap: &Path, sizes: &[usize]) {
    let name = pcap.display();
    let packets = load(pcap);
    let v = run_json(pcap, sizes);
    let config = FlowConfig::default();
    let stats = measure(&packets, config.timeouts());
    assert_eq!(v["packets"], packets.len() as u64, "{name}");
    assert_eq!(v["records"], stats.records, "{name}");
    assert!(
        close(v["active_flows"].as_f64().expect("a number"), stats.active_flows),
        "{name}"
    );
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), sizes.len(), "{name}: a row per size");
    for (row, &slots) in rows.iter().zip(sizes) {
        assert_eq!(row["slots"], slots, "{name}");
        let config = FlowConfig {
            cache_slots: slots,
            ..config
        };
        let mut m = FlowMeter::new(config).expect("valid config");
        let mut out = Vec::new();
        m.process_batch(&packets, &mut out);
        m.finish(&mut out);
        let st = m.stats();
        let (meas, pred) = (&row["measured"], &row["predicted"]);
        let f = |v: &Value| v.as_f64().expect("a number");
        assert!(
            close(f(&meas["eviction_ratio"]), st.eviction_ratio()),
            "{name} {slots}"
        );
        assert!(
            close(f(&meas["packets_per_record"]), st.packets_per_microflow_record()),
            "{name} {slots}"
        );
        assert_eq!(meas["microflow_records"], st.microflow_records, "{name} {slots}");
        assert_eq!(meas["collisions"], st.collisions, "{name} {slots}");
        assert_eq!(meas["records"], out.len() as u64, "{name} {slots}");

        let p = predict(&stats, slots, 1);
        assert!(close(f(&pred["p_eviction"]), p.p_eviction), "{name} {slots}");
        assert!(close(f(&pred["packets_per_record_eq22"]), p.packets_per_record));
        assert!(close(
            f(&pred["packets_per_record_reuse"]),
            p.reuse_packets_per_record
        ));

        // The bound: reuse model against the meter's mean over hash seeds
        // (enough of them: with ten, a capture with a few heavy flows gave
        // a mean 18% off, the rare seed that puts two heavy flows in one
        // slot being missing from the sample).
        let seeds = (BUDGET / packets.len().max(1) as u64).clamp(32, 1024);
        let c = compare(&packets, config, seeds).expect("valid config");
        let off = (packets.len() as f64 / p.reuse_packets_per_record - c.microflow_records).abs();
        let pct = 100.0 * (p.reuse_packets_per_record / c.packets_per_record - 1.0);
        eprintln!(
            "{name} {slots}: reuse {:.3}, seed mean {:.3} ({pct:+.1}%), this meter {:.3}; ns/pkt predicted {:.1}, warm {:.1}, cold {:.1}",
            p.reuse_packets_per_record,
            c.packets_per_record,
            st.packets_per_microflow_record(),
            f(&pred["ns_per_packet_reuse"]),
            f(&meas["ns_per_packet_warm"]),
            f(&meas["ns_per_packet_cold"]),
        );
        assert!(
            pct.abs() <= 10.0 || off <= 3.0 * c.microflow_records_std_error,
            "{name} {slots}: reuse model {pct:+.1}% off"
        );

        for k in ["ns_per_packet_eq22", "ns_per_packet_reuse"] {
            let ns = f(&pred[k]);
            assert!(ns.is_finite() && ns > 0.0, "{name} {slots} {k}: {ns}");
        }
        // The measured time is printed, not tested: on a shared machine a
        // loaded moment made it 12 times the prediction (CI, 6 Dec 2026).
        // The predictions' accuracy in time is a benchmark's
        // (docs/performance.md), not a test's.
        let warm = f(&meas["ns_per_packet_warm"]);
        assert!(warm.is_finite() && warm > 0.0, "{name} {slots}: {warm}");
    }
}

#[test]
fn the_bundled_capture_against_a_meter_and_the_models() {
    check(
        &repo().join("examples/demo.pcap"),
        &[256, 1024, 4096, 16384, 65536],
    );
}

#[test]
fn every_shared_capture_against_a_meter_and_the_models() {
    let dir = repo().join("../shared/captures");
    if !dir.is_dir() {
        eprintln!("skipped: no captures at {}", dir.display());
        return;
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("captures directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    files.sort();
    for f in files {
        check(&f, &[64, 4096]);
    }
}

#[test]
fn the_table_has_a_row_per_size() {
    let o = clarion()
        .args(["model", "--pcap", "examples/demo.pcap", "--runs", "1"])
        .args(["--record-cache", "512", "--record-cache", "2048", "--ways", "2"])
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() == 11 && w[0].parse::<u64>().is_ok())
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert_eq!((rows[0][0], rows[0][1]), ("512", "2"), "{text}");
    assert_eq!((rows[1][0], rows[1][1]), ("2048", "2"), "{text}");
    let packets = load(&repo().join("examples/demo.pcap"));
    let stats = measure(&packets, FlowConfig::default().timeouts());
    let p = predict(&stats, 2048, 2);
    assert_eq!(rows[1][3], format!("{:.4}", p.p_eviction), "{text}");
}

#[test]
fn bad_input_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.pcap");
    let text = dir.path().join("notes.pcap");
    std::fs::write(&text, "these are not packets\n").expect("write");
    let cut = dir.path().join("cut.pcap");
    let demo = std::fs::read(repo().join("examples/demo.pcap")).expect("demo");
    std::fs::write(&cut, &demo[..demo.len() / 2 + 7]).expect("write");
    for bad in [&missing, &text, &cut] {
        let o = clarion()
            .arg("model")
            .arg("--pcap")
            .arg(bad)
            .output()
            .expect("runs");
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{}: {err}", bad.display());
        assert!(err.contains(&bad.display().to_string()), "{err}");
        assert!(o.stdout.is_empty(), "no table for a bad capture");
    }
}

#[test]
fn bad_sizes_are_usage_errors() {
    for args in [
        &["--record-cache", "0"][..],
        &["--record-cache", "1000", "--ways", "16"][..],
        &["--ways", "0"][..],
    ] {
        let o = clarion()
            .args(["model", "--pcap", "examples/demo.pcap"])
            .args(args)
            .output()
            .expect("runs");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
}
