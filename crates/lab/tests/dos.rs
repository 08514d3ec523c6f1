//! `clarion-lab dos --quick` end to end: the cost model is profiled, both
//! attacks run, the CSV compares the model's breaking point with the
//! measured one, and no flow above the threshold is left unmonitored.

use assert_cmd::Command;

#[test]
fn quick_attack_bench_prints_model_and_measured_breaking_points() {
    let o = Command::cargo_bin("clarion-lab")
        .expect("binary builds")
        .args(["dos", "--quick"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("clarion-lab dos: costs at"), "{err}");
    assert!(
        err.contains("0 flows above the threshold left unmonitored"),
        "{err}"
    );
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("attack,threshold_bytes,dos_packets,model_max_fraction,measured_max_fraction,ratio,runs,flows_over_threshold,unmonitored")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    // SYN at 0 and 384 B, threshold attack at 384 B (0 is the SYN attack).
    let kinds: Vec<(&str, &str, &str)> = rows.iter().map(|r| (r[0], r[1], r[2])).collect();
    assert_eq!(
        kinds,
        [("syn", "0", "1"), ("syn", "384", "1"), ("threshold", "384", "10")],
        "{out}"
    );
    for r in &rows {
        assert_eq!(r.len(), 9, "{out}");
        for v in [r[3], r[4]] {
            let f: f64 = v.parse().unwrap();
            assert!((0.0..=1.0).contains(&f), "{out}");
        }
        assert_eq!(r[8], "0", "{out}");
    }
}

#[test]
fn bench_reports_the_dos_threshold() {
    let o = Command::cargo_bin("clarion-lab")
        .expect("binary builds")
        .args([
            "bench",
            "--packets",
            "50000",
            "--triggers",
            "512",
            "--dos-fraction",
            "0.9",
            "--dos-threshold",
            "832",
            "--json",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("DoS threshold 832 B (from 832 B, 0 raises)"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["dos"]["final_threshold_bytes"], 832);
    assert!(v["dos"]["packets_filtered"].as_u64().unwrap() > 40_000, "{v}");
}

#[test]
fn bad_dos_threshold_is_a_usage_error() {
    Command::cargo_bin("clarion-lab")
        .expect("binary builds")
        .args(["bench", "--dos-threshold", "lots"])
        .assert()
        .code(2);
}
