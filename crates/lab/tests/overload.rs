//! `clarion-lab overload` end to end (the built binary), MONA's sine from 0
//! to twice the sustainable rate into a 4,096-packet ring, the monitor
//! running MONA's Config.1 chain over 10 ms windows (`mona_chain.clarion`
//! here: the golden file's 1 s windows would give one window a run):
//!
//! - every run's books balance against independent counts: arrivals per
//!   window are what the sine's rate integral gives (`Sine::expected`,
//!   not the generator), served + dropped = arrived, windows sum to the
//!   totals, satisfaction is satisfied / windows;
//! - period 100 ms: adaptation at least halves the drops (MONA §VI-A);
//! - period 250 ms: the static monitor drops, the adaptive one nothing
//!   (MONA's claim), thanks to relief within a window in its first
//!   windows: without it (`--no-relief`) they drop;
//! - `--windows` lines agree with the JSON's per-event figures and its
//!   queue table, window by window;
//! - the same flags give the same JSON, byte for byte;
//! - generated traffic (`clarion-lab gen`) at a constant 1.5× load, and
//!   the shared LAN capture (skipped with a message where absent; there
//!   adaptation drops nothing at 250 ms nor at 100 ms: issue 36's
//!   acceptance, at most 0.2x and 0.5x static's drops).

// Test helpers may unwrap: a missing field is the test's failure.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use clarion_overload::Sine;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn chain() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mona_chain.clarion")
}

/// Runs the command; returns its standard output (the JSON text).
fn run(pcap: &Path, extra: &[&str]) -> String {
    let out = Command::cargo_bin("clarion-lab")
        .unwrap()
        .current_dir(repo())
        .args(["overload", "--pcap"])
        .arg(pcap)
        .arg("--events")
        .arg(chain())
        .args(extra)
        .arg("--json")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    eprint!("{err}");
    String::from_utf8(out.stdout).unwrap()
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn mode<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["modes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mode"] == name)
        .unwrap_or_else(|| panic!("no {name} mode in {r}"))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Checks a run's figures against independent counts (module doc).
fn check_books(r: &Value) {
    let packets = u(&r["packets"]);
    let window = u(&r["window_ns"]);
    let sine = (r["load"] == "sine").then(|| {
        Sine::new(
            r["mean_pps"].as_f64().unwrap(),
            r["amplitude"].as_f64().unwrap(),
            u(&r["period_ns"]),
        )
        .unwrap()
    });
    if let Some(s) = &sine {
        // ⌈Λ(duration)⌉ packets arrive in [0, duration).
        let expected = s.expected(u(&r["duration_ns"])).ceil() as u64;
        assert!(
            packets.abs_diff(expected) <= 1,
            "{packets} arrivals, Λ gives {expected}"
        );
    }
    for m in r["modes"].as_array().unwrap() {
        let name = m["mode"].as_str().unwrap();
        assert_eq!(u(&m["packets"]), packets, "{name}");
        assert_eq!(
            u(&m["served"]) + u(&m["drops"]),
            packets,
            "{name}: served + dropped"
        );
        assert_eq!(
            u(&m["monitor"]["packets"]),
            u(&m["served"]),
            "{name}: the monitor saw what was served"
        );
        assert_eq!(
            u(&m["monitor"]["dropped"]),
            u(&m["drops"]),
            "{name}: the monitor was told of every drop"
        );
        let table = m["table"].as_array().unwrap();
        assert_eq!(table.len() as u64, u(&m["windows"]));
        let (mut arrivals, mut drops, mut with_drops) = (0, 0, 0);
        for (i, row) in table.iter().enumerate() {
            assert_eq!(u(&row["window"]), i as u64);
            arrivals += u(&row["arrivals"]);
            drops += u(&row["drops"]);
            with_drops += u64::from(u(&row["drops"]) > 0);
            assert!(u(&row["queue_max"]) <= u(&r["ring"]));
            if let Some(s) = &sine {
                // Window k's arrivals: ⌈Λ(end)⌉ − ⌈Λ(start)⌉, capped at the duration.
                let end = ((i as u64 + 1) * window).min(u(&r["duration_ns"]));
                let start = (i as u64 * window).min(end);
                let want = s.expected(end).ceil() as i64 - s.expected(start).ceil() as i64;
                let got = u(&row["arrivals"]) as i64;
                assert!(
                    (got - want).abs() <= 1,
                    "{name} window {i}: {got} arrivals, Λ gives {want}"
                );
            }
            let shed = row["shed"].as_f64().unwrap();
            if name == "static" {
                assert_eq!(shed, 0.0, "the static monitor never sheds");
            }
        }
        assert_eq!(arrivals, packets, "{name}: windows' arrivals");
        assert_eq!(drops, u(&m["drops"]), "{name}: windows' drops");
        assert_eq!(with_drops, u(&m["windows_with_drops"]), "{name}");
        for e in m["events"].as_array().unwrap() {
            let (w, s) = (u(&e["windows"]), u(&e["satisfied"]));
            assert!(s <= w);
            if w > 0 {
                let sat = e["satisfaction"].as_f64().unwrap();
                assert!((sat - s as f64 / w as f64).abs() < 1e-12, "{e}");
            }
        }
    }
}

fn summary(r: &Value) -> String {
    let mut s = format!(
        "sustainable {:.0} pps, {} packets:",
        r["sustainable_pps"].as_f64().unwrap(),
        r["packets"]
    );
    for m in r["modes"].as_array().unwrap() {
        s += &format!(
            " {} drops {} (windows {}, negative balance {}, shed mean {:.2}, saturated {});",
            m["mode"].as_str().unwrap(),
            m["drops"],
            m["windows_with_drops"],
            m["windows_negative_balance"],
            m["shed_mean"].as_f64().unwrap_or(0.0),
            m["saturated_windows"],
        );
        for e in m["events"].as_array().unwrap() {
            s += &format!(
                " {}={:.2}/{:.3}",
                e["event"].as_str().unwrap(),
                e["satisfaction"].as_f64().unwrap_or(f64::NAN),
                e["mean_estimate_error"].as_f64().unwrap_or(f64::NAN)
            );
        }
    }
    s
}

fn demo() -> PathBuf {
    repo().join("examples/demo.pcap")
}

#[test]
fn period_100ms_adaptation_halves_the_drops_and_runs_are_identical() {
    let args = ["--period", "100ms", "--duration", "200ms"];
    let first = run(&demo(), &args);
    let second = run(&demo(), &args);
    assert!(first == second, "two runs with the same flags differ");
    let r = parse(&first);
    check_books(&r);
    eprintln!("period 100 ms: {}", summary(&r));
    let (st, ad) = (u(&mode(&r, "static")["drops"]), u(&mode(&r, "adapt")["drops"]));
    assert!(
        st > 0,
        "the static monitor keeps up with twice its sustainable rate?"
    );
    assert!(2 * ad <= st, "adapt drops {ad}, static {st}: less than halved");
}

/// `--windows`' lines against the run's own JSON: each mode's and
/// event's windows with a true report, their summed true recall and
/// satisfied count, and the mean estimate error are the per-event figures;
/// each line's false reports are its reports less the true ones; its
/// arrivals and drops are the queue's table's for that window.
fn check_windows(r: &Value, lines: &str) {
    let lines: Vec<Value> = lines.lines().map(parse).collect();
    assert!(!lines.is_empty(), "no --windows line");
    for m in r["modes"].as_array().unwrap() {
        let name = m["mode"].as_str().unwrap();
        let mine: Vec<&Value> = lines.iter().filter(|l| l["mode"] == name).collect();
        for l in &mine {
            assert_eq!(l["schema"], "clarion.overload-window/1");
            assert_eq!(
                u(&l["false_reports"]),
                u(&l["reports"]) - u(&l["true_positives"]),
                "{l}"
            );
            assert!(u(&l["true_positives"]) <= u(&l["true_reports"]), "{l}");
            let row = m["table"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| u(&t["window"]) * u(&r["window_ns"]) == u(&l["start_ns"]))
                .unwrap_or_else(|| panic!("no queue window for {l}"));
            assert_eq!(
                (&l["arrivals"], &l["drops"]),
                (&row["arrivals"], &row["drops"]),
                "{l}"
            );
        }
        for e in m["events"].as_array().unwrap() {
            let ev: Vec<&&Value> = mine
                .iter()
                .filter(|l| l["event"] == e["event"] && u(&l["true_reports"]) > 0)
                .collect();
            assert_eq!(ev.len() as u64, u(&e["windows"]), "{name} {e}");
            let recall: f64 = ev.iter().map(|l| l["true_recall"].as_f64().unwrap()).sum();
            if let Some(mean) = e["mean_true_recall"].as_f64() {
                assert!((recall / ev.len() as f64 - mean).abs() < 1e-9, "{name} {e}");
            }
            let satisfied = ev
                .iter()
                .filter(|l| l["true_recall"].as_f64().unwrap() >= 0.75)
                .count();
            assert_eq!(satisfied as u64, u(&e["satisfied"]), "{name} {e}");
            let errors: Vec<f64> = ev.iter().filter_map(|l| l["estimate_error"].as_f64()).collect();
            assert_eq!(errors.len() as u64, u(&e["estimated_windows"]), "{name} {e}");
            if let Some(mean) = e["mean_estimate_error"].as_f64() {
                let got = errors.iter().sum::<f64>() / errors.len() as f64;
                assert!((got - mean).abs() < 1e-9, "{name} {e}: {got}");
            }
        }
    }
}

#[test]
fn period_250ms_static_drops_and_adaptation_drops_far_less() {
    let dir = tempfile::tempdir().unwrap();
    let windows = dir.path().join("windows.jsonl");
    let r = parse(&run(
        &demo(),
        &[
            "--period",
            "250ms",
            "--duration",
            "250ms",
            "--windows",
            windows.to_str().unwrap(),
        ],
    ));
    check_books(&r);
    check_windows(&r, &std::fs::read_to_string(&windows).unwrap());
    eprintln!("period 250 ms: {}", summary(&r));
    let (st, ad) = (mode(&r, "static"), mode(&r, "adapt"));
    assert!(u(&st["drops"]) > 0);
    assert!(ad["shed_max"].as_f64().unwrap() > 0.0, "adapt never shed");
    // MONA's claim for T = 250 ms (§VI-A, Fig. 7a): nothing dropped.
    assert_eq!(u(&ad["drops"]), 0, "{}", summary(&r));
    let reliefs: u64 = ad["table"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| u(&w["reliefs"]))
        .sum();
    assert!(reliefs > 0, "no relief within a window was needed?");
}

/// A static run has no relief to turn off: the flag is refused, not ignored.
#[test]
fn no_relief_is_refused_for_a_static_run() {
    let out = Command::cargo_bin("clarion-lab")
        .unwrap()
        .current_dir(repo())
        .args(["overload", "--pcap"])
        .arg(demo())
        .arg("--events")
        .arg(chain())
        .args(["--mode", "static", "--no-relief"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--no-relief") && err.contains("--mode static"),
        "{err}"
    );
}

/// What the relief within a window gives: no decision exists before the
/// first epoch is swept, and the sine starts at the mean, rising, so
/// without relief the first windows fill the ring (docs/performance.md,
/// "Relief within a window").
#[test]
fn without_relief_the_first_windows_drop() {
    let args = ["--period", "250ms", "--duration", "250ms", "--mode", "adapt"];
    let r = parse(&run(&demo(), &[&args[..], &["--no-relief"]].concat()));
    let ad = mode(&r, "adapt");
    assert!(u(&ad["drops"]) > 0, "{}", summary(&r));
    let rows = ad["table"].as_array().unwrap();
    assert!(rows.iter().all(|w| u(&w["reliefs"]) == 0));
    let first = rows.iter().find(|w| u(&w["drops"]) > 0).unwrap();
    assert!(u(&first["window"]) < 3, "{first}");
}

#[test]
fn generated_traffic_at_a_constant_overload() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("gen.pcap");
    let out = Command::cargo_bin("clarion-lab")
        .unwrap()
        .args(["gen", "--packets", "20000", "--flows", "2000", "--out"])
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = parse(&run(
        &pcap,
        &["--load", "constant", "--mean-load", "1.5", "--duration", "50ms"],
    ));
    check_books(&r);
    eprintln!("generated, constant 1.5x: {}", summary(&r));
    let (st, ad) = (u(&mode(&r, "static")["drops"]), u(&mode(&r, "adapt")["drops"]));
    // A third of the arrivals beyond what the static monitor serves, less the ring.
    assert!(st > 0);
    assert!(ad < st, "adapt drops {ad}, static {st}");
}

/// Issue 36's acceptance on the shared capture over 10,000 packets
/// (demo.pcap's is checked above): adaptive drops at most 0.5x static's
/// at a 100 ms period and 0.2x at 250 ms (both 0 here: docs/performance.md
/// has the 1 s runs).
#[test]
fn the_lan_capture() {
    let Some(pcap) = clarion_testdata::capture("pathspider_real.pcap") else {
        eprintln!("skipped: ../shared/captures/pathspider_real.pcap is absent");
        return;
    };
    for (period, duration, bound) in [("250ms", "250ms", 0.2), ("100ms", "200ms", 0.5)] {
        let r = parse(&run(&pcap, &["--period", period, "--duration", duration]));
        check_books(&r);
        eprintln!("pathspider_real, period {period}: {}", summary(&r));
        let (st, ad) = (u(&mode(&r, "static")["drops"]), u(&mode(&r, "adapt")["drops"]));
        assert!(st > 0, "{period}");
        assert!(
            ad as f64 <= bound * st as f64,
            "{period}: adapt drops {ad}, static {st}"
        );
        // Insertion-bound: bypassed flows are never inserted (docs/performance.md).
        assert_eq!(ad, 0, "{period}: adapt drops {ad}, static {st}");
    }
}
