//! `clarion-lab feasibility --quick` end to end: it writes the CSV (header and
//! one row per point of the tiny grid) and a PNG plot.

use assert_cmd::Command;

#[test]
fn quick_grid_writes_csv_and_png() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("f.csv");
    let png = dir.path().join("f.png");
    let o = Command::cargo_bin("clarion-lab")
        .expect("binary builds")
        .args(["feasibility", "--quick", "--csv"])
        .arg(&csv)
        .arg("--png")
        .arg(&png)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("clarion-lab feasibility: 2 points"), "{err}");

    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("per_flow,interval_ms,flows,ns_per_packet,sweep_p99_us,max_rate_mpps,verified,arrivals_per_s")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.len() >= 2, "{text}");
    for r in &rows {
        assert_eq!(r.len(), 8, "{text}");
        assert_eq!(r[7], "1000", "{text}");
        for v in &r[..6] {
            assert!(v.parse::<f64>().is_ok(), "not a number: {v} in {text}");
        }
        assert!(
            r[6] == "no" || r[6] == "n/a" || r[6].starts_with("yes@"),
            "{text}"
        );
    }

    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.len() > 1000, "PNG of {} bytes", bytes.len());
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
}

#[test]
fn empty_grid_is_a_usage_error() {
    Command::cargo_bin("clarion-lab")
        .expect("binary builds")
        .args(["feasibility", "--intervals", "0"])
        .assert()
        .code(2);
}

/// The committed data-center grid redraws from its CSV (nothing measured),
/// and a file that is not one is refused naming it.
#[test]
fn a_grid_redraws_from_its_csv() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("scale.png");
    let csv = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/feasibility-scale.csv");
    let o = Command::cargo_bin("clarion-lab")
        .expect("binary builds")
        .args(["feasibility", "--from-csv", csv, "--png"])
        .arg(&png)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");

    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "per_flow,interval_ms\n8,10\n").unwrap();
    let o = Command::cargo_bin("clarion-lab")
        .expect("binary builds")
        .args(["feasibility", "--from-csv"])
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("bad.csv: line 2: fewer than 7 columns"), "{err}");

    // A flag of the measurement, with nothing measured, is refused.
    let o = Command::cargo_bin("clarion-lab")
        .expect("binary builds")
        .args(["feasibility", "--from-csv", csv, "--per-flow", "8"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--per-flow"), "{err}");
}
