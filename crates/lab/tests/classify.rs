//! `clarion-lab classify` end to end on small sets: one JSON object per
//! rule set, USS at exactly one fast-path lookup per packet and megaflows at
//! one or more per hit, counters consistent with the trace, and bad usage refused.

use assert_cmd::Command;

fn lab(args: &[&str]) -> std::process::Output {
    Command::cargo_bin("clarion-lab")
        .expect("binary builds")
        .args(args)
        .output()
        .expect("clarion-lab runs")
}

#[test]
fn small_sets_report_both_fast_paths() {
    let o = lab(&[
        "classify",
        "--sizes",
        "100,300",
        "--packets",
        "20000",
        "--cache",
        "50",
        "--runs",
        "1",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{err}");
    let rows: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let names: Vec<&str> = rows.iter().map(|r| r["rules"].as_str().unwrap()).collect();
    assert_eq!(names, ["acl_100", "acl_300", "fw_100", "fw_300"], "{out}");
    for r in &rows {
        // The full USS table: its size, or null when over the limit.
        assert!(
            r["full_uss_uniflows"].is_null() || r["full_uss_uniflows"].as_u64().unwrap() > 0,
            "{r}"
        );
        // 10,000 packets (the default) agreed with the linear reference.
        assert_eq!(r["reference_checked"].as_u64(), Some(10_000), "{r}");
        let (u, m) = (&r["uss"], &r["megaflow"]);
        assert_eq!(u["fast_lookups_per_packet"].as_f64(), Some(1.0), "{r}");
        // Every megaflow hit costs at least one lookup (a miss on an empty cache costs none).
        assert!(
            m["fast_lookups_per_packet"].as_f64().unwrap() >= m["hit_rate"].as_f64().unwrap(),
            "{r}"
        );
        for side in [u, m] {
            let hit = side["hit_rate"].as_f64().unwrap();
            assert!((0.0..1.0).contains(&hit), "{r}");
            assert_eq!(side["cache_entries"].as_u64(), Some(50), "{r}: the cache fills");
            assert!(side["packets_per_second"].as_f64().unwrap() > 0.0);
        }
    }
}

/// `--warm`: after the untimed warm-up every timed packet hits, on both
/// fast paths, and nothing is evicted (the headers fit the cache).
#[test]
fn warm_passes_hit_every_packet() {
    let o = lab(&[
        "classify",
        "--warm",
        "--rules",
        "acl,fw",
        "--sizes",
        "100",
        "--packets",
        "20000",
        "--cache",
        "200",
        "--runs",
        "2",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{err}");
    let rows: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 2, "{out}");
    for r in &rows {
        assert_eq!(r["warm"], true, "{r}");
        assert_eq!(r["distinct_headers"].as_u64(), Some(200), "{r}");
        // 10,000 packets (the default) agreed with the linear reference.
        assert_eq!(r["reference_checked"].as_u64(), Some(10_000), "{r}");
        let (u, m) = (&r["uss"], &r["megaflow"]);
        assert_eq!(u["fast_lookups_per_packet"].as_f64(), Some(1.0), "{r}");
        for side in [u, m] {
            assert_eq!(side["hit_rate"].as_f64(), Some(1.0), "{r}");
            assert_eq!(side["evictions"].as_u64(), Some(0), "{r}");
            assert!(side["cache_entries"].as_u64().unwrap() <= 200, "{r}");
            assert!(side["ns_per_packet"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
}

#[test]
fn zero_cache_is_bad_usage() {
    let o = lab(&["classify", "--cache", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--cache"));
}
