//! `clarion-lab gen` and `clarion-lab bench` end to end: a deterministic capture,
//! events that check, and a benchmark whose JSON carries every figure and
//! finds no missed event. That `clarion run` monitors the workload is
//! tested in the product crate (crates/cli/tests/cli.rs), which cannot run
//! this crate's binary.

use assert_cmd::Command;

fn lab() -> Command {
    Command::cargo_bin("clarion-lab").expect("binary builds")
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn gen_is_deterministic_and_its_events_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = |n: &str| dir.path().join(n);
    let gen = |out: &str, seed: &str| {
        let o = lab()
            .args([
                "gen",
                "--packets",
                "50000",
                "--dos-fraction",
                "0.1",
                "--seed",
                seed,
                "--out",
            ])
            .arg(path(out))
            .arg("--events-out")
            .arg(path("bench.clarion"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stderr(&o).contains("wrote 50,000 packets"), "{}", stderr(&o));
        std::fs::read(path(out)).unwrap()
    };
    let (a, b, c) = (gen("a.pcap", "7"), gen("b.pcap", "7"), gen("c.pcap", "8"));
    assert_eq!(a, b, "same seed, same bytes");
    assert_ne!(a, c, "another seed, other bytes");
    // Nanosecond pcap, 50,000 records of 64 bytes.
    assert_eq!(&a[..4], &0xa1b2_3c4du32.to_le_bytes());
    assert_eq!(a.len(), 24 + 50_000 * (16 + 64));

    // The events check: 4,096 triggers, one event each.
    let text = std::fs::read_to_string(path("bench.clarion")).unwrap();
    let specs =
        clarion_lang::check(&text).unwrap_or_else(|d| panic!("{}", d.render("bench.clarion", &text, false)));
    assert_eq!(specs.len(), 4096);
    assert!(specs.iter().all(|s| s.name.starts_with('g')));
}

#[test]
fn bench_reports_every_figure_and_misses_nothing() {
    // A modest rate: 5,000 packets per 10 ms epoch, 40 epochs.
    let o = lab()
        .args(["bench", "--packets", "200000", "--rate", "500000", "--json"])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.starts_with("clarion-lab bench: 200,000 packets"), "{err}");
    assert_eq!(err.lines().count(), 1, "one summary line: {err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    for field in [
        "packets_per_s",
        "elapsed_s",
        "sweeps_completed",
        "sweeps_late",
        "epochs_over_budget",
        "reports",
        "missed_events",
    ] {
        assert!(v[field].is_number(), "{field} in {v}");
    }
    for field in ["mean", "median", "p99"] {
        assert!(v["ns_per_packet"][field].as_f64().is_some_and(|x| x > 0.0), "{v}");
    }
    for field in ["count", "median", "p99", "max"] {
        assert!(v["sweep_ns"][field].as_u64().is_some_and(|x| x > 0), "{v}");
    }
    assert_eq!(v["missed_events"], 0);
    assert_eq!(v["verify"]["packets"], 200_000);
    assert_eq!(v["verify"]["windows"], 39);
    assert!(v["verify"]["reports"].as_u64().is_some_and(|n| n > 0), "{v}");
    assert_eq!(v["sweeps_completed"], 39);
    assert_eq!(v["sweep_ns"]["samples"].as_array().map(Vec::len), Some(39));
    assert_eq!(v["sweeps_late"], 0);
    assert_eq!(v["triggers_matched"], v["flows_created"].as_u64().unwrap() * 8);
    // Whether an epoch's packets and sweep fit in its 10 ms is a timing, and
    // this machine's two cores are shared with the other tests: only bounded.
    assert!(v["epochs_over_budget"].as_u64().is_some_and(|n| n <= 39), "{v}");
    // Epochs in which the kernel took the core: counted on Linux, at most one an epoch.
    if cfg!(target_os = "linux") {
        assert!(v["epochs_preempted"].as_u64().is_some_and(|n| n <= 39), "{v}");
    }
    // The heap and the flow table are committed before the timed loop: the
    // monitor growing into fresh pages cost ~500 faults a million packets
    // before (each microseconds); a few may remain (the loop's own vectors).
    if cfg!(target_os = "linux") {
        assert!(v["page_faults"].as_u64().is_some_and(|n| n < 40), "{v}");
    }
}

#[test]
fn primed_packets_are_not_timed_but_are_verified() {
    // 100,000 packets primed, then 100,000 timed: 20 epochs each.
    let o = lab()
        .args([
            "bench",
            "--packets",
            "100000",
            "--prime",
            "100000",
            "--rate",
            "500000",
        ])
        .args(["--verify-prefix", "200000", "--json"])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.starts_with("clarion-lab bench: 100,000 packets after 100,000 primed,"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(
        (v["prime"].as_u64(), v["packets_timed"].as_u64()),
        (Some(100_000), Some(100_000))
    );
    // Only the timed epochs' sweeps are timed; every report of both is verified.
    assert_eq!(v["sweep_ns"]["samples"].as_array().map(Vec::len), Some(20));
    assert_eq!(v["verify"]["packets"], 200_000);
    assert_eq!(v["verify"]["windows"], 39);
    assert_eq!(v["missed_events"], 0);
}

#[test]
fn many_flows_are_all_tracked_and_their_memory_reported() {
    // 200,000 active flows and 100,000 new ones a second, heavy-tailed: the
    // flow table's default holds them all, and the JSON says how much memory
    // the monitor took for how many flows.
    let o = lab()
        .args([
            "bench",
            "--packets",
            "300000",
            "--rate",
            "3000000",
            "--flows",
            "200000",
        ])
        .args([
            "--arrival",
            "100000",
            "--flow-sizes",
            "pareto:1.2",
            "--verify-prefix",
            "0",
            "--json",
        ])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("warning"), "{err}");
    assert!(err.contains("flows tracked"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(v["packets_untracked"], 0, "{v}");
    assert_eq!(v["workload"]["flow_sizes"], "pareto:1.2");
    let m = &v["memory"];
    assert!(m["flows_tracked"].as_u64().is_some_and(|n| n > 50_000), "{v}");
    assert_eq!(m["flow_capacity"], 1 << 20);
    if cfg!(target_os = "linux") {
        for field in [
            "rss_before_monitor_bytes",
            "rss_after_run_bytes",
            "monitor_rss_bytes",
            "peak_rss_bytes",
        ] {
            assert!(m[field].as_u64().is_some_and(|b| b > 0), "{field} in {m}");
        }
    }
}

#[test]
fn a_full_flow_table_is_said() {
    let o = lab()
        .args([
            "bench",
            "--packets",
            "100000",
            "--flows",
            "5000",
            "--flow-capacity",
            "1000",
        ])
        .args(["--verify-prefix", "0", "--json"])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("were not tracked") && err.contains("full at 1,000 flows; raise --flow-capacity"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert!(v["packets_untracked"].as_u64().is_some_and(|n| n > 0), "{v}");
}

#[test]
fn without_optimizations_the_bench_still_misses_nothing() {
    // Bursts of 4, so the last-flow cache has hits when it is on.
    for no_opt in ["all", "batch-prefetch,last-flow"] {
        let o = lab()
            .args([
                "bench",
                "--packets",
                "100000",
                "--rate",
                "500000",
                "--burst",
                "4",
                "--json",
            ])
            .args(["--no-opt", no_opt])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
        assert_eq!(v["missed_events"], 0, "{no_opt}: {v}");
        assert!(v["verify"]["reports"].as_u64().is_some_and(|n| n > 0), "{v}");
    }
}

#[test]
fn ablation_measures_each_optimization_against_all_on_and_all_off() {
    let o = lab()
        .args([
            "bench",
            "--ablation",
            "--rounds",
            "1",
            "--packets",
            "30000",
            "--json",
        ])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    let names: Vec<&str> = v["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["variant"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "all on",
            "no batch-prefetch",
            "no header-prefetch",
            "no sweep-prefetch",
            "no last-flow",
            "no huge-pages",
            "no active-sweep",
            "no flow-windows",
            "no prefault",
            "no match-cache",
            "all off"
        ]
    );
    assert_eq!(v["variants"][0]["all_on_over_this"], 1.0);
    let all_off = v["variants"].as_array().and_then(|a| a.last()).unwrap();
    assert_eq!(all_off["speedup_over_all_off"], 1.0);
    assert!(err.contains("round 1/1, all off"), "{err}");
    assert!(
        err.contains("/all_off"),
        "the table goes to stderr with --json: {err}"
    );
    let o = lab()
        .args(["bench", "--ablation", "--no-opt", "all"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "--ablation sets the tuning itself");
}

#[test]
fn impossible_workloads_are_usage_errors() {
    let o = lab().args(["bench", "--per-packet", "0"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("invalid triggers per packet"),
        "{}",
        stderr(&o)
    );
    let o = lab()
        .args(["gen", "--out", "/dev/null", "--patterns", "500"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("1..=188"), "{}", stderr(&o));
    let help = lab().args(["bench", "--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("clarion-lab bench --packets 5000000"));
}
