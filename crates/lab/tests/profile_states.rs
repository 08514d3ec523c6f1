//! `clarion-lab profile-states` end to end, at small sizes: it exits 0,
//! every figure is positive and finite, the fitted per-word and pair
//! costs are not negative, and the JSON parses. No timing is asserted
//! (the machine is shared); the fit and the word counts are tested
//! against references in the module's unit tests.

#![allow(clippy::unwrap_used)]

use assert_cmd::Command;
use serde_json::Value;

fn run(extra: &[&str]) -> Value {
    let out = Command::cargo_bin("clarion-lab")
        .unwrap()
        .args([
            "profile-states",
            "--flows",
            "4096",
            "--packets",
            "16384",
            "--repeat",
            "2",
            "--json",
        ])
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn positive(v: &Value, at: &str) {
    let x = v.as_f64().unwrap_or_else(|| panic!("{at} is not a number: {v}"));
    assert!(x.is_finite() && x > 0.0, "{at} = {x}");
}

#[test]
fn profiles_and_fits_every_cost() {
    let j = run(&[]);
    for k in ["lookup_hit_ns", "lookup_miss_ns"] {
        positive(&j[k], k);
    }
    let words = j["words"].as_array().unwrap();
    assert_eq!(words.len(), 6);
    for w in words {
        positive(&w["words"], "words");
        positive(&w["ns_per_packet"], "ns_per_packet");
    }
    positive(&j["tcp"]["sum_volume_ns"], "tcp");
    positive(&j["tcp"]["sum_is_lost_ns"], "tcp");
    let pairs = j["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 6);
    for p in pairs {
        positive(&p["sweep_ns_per_flow_epoch"], "sweep");
    }
    positive(&j["insert"]["new_flow_ns"], "insert");
    positive(&j["insert"]["known_first_ns"], "insert");
    for k in [
        "lookup_ns",
        "update_ns",
        "insert_ns",
        "per_word_ns",
        "tcp_ns",
        "pair_ns",
    ] {
        let x = j["fitted"][k].as_f64().unwrap();
        assert!(x.is_finite() && x >= 0.0, "fitted {k} = {x}");
        positive(&j["default"][k], k);
    }
    positive(&j["fitted"]["lookup_ns"], "fitted lookup");
    let check = j["check"].as_array().unwrap();
    assert_eq!(check.len(), 6);
    for c in check {
        for k in [
            "measured_epoch_ns",
            "measured_sweep_ns",
            "predicted_fitted_ns",
            "predicted_default_ns",
            "ratio_fitted",
            "ratio_default",
        ] {
            positive(&c[k], k);
        }
    }
}

#[test]
fn refuses_zero_sizes() {
    let out = Command::cargo_bin("clarion-lab")
        .unwrap()
        .args(["profile-states", "--flows", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--flows"));
}
