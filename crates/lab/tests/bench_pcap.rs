//! `clarion-lab bench --pcap`: the table and JSON carry every pass, and the
//! file path it times is `clarion run`'s loop: its reports on the demo
//! capture number what `clarion run` writes on it.

use std::path::{Path, PathBuf};

use assert_cmd::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn lab() -> Command {
    let mut c = Command::cargo_bin("clarion-lab").expect("binary builds");
    c.current_dir(repo());
    c
}

/// Reports `clarion run` writes on the demo capture: its golden output
/// (JSON lines), which the conformance and CLI tests hold it to.
fn run_reports() -> usize {
    std::fs::read_to_string(repo().join("crates/conformance/tests/golden/demo.jsonl"))
        .expect("the golden reports")
        .lines()
        .count()
}

#[test]
fn bench_pcap_times_the_file_path_of_clarion_run() {
    let out = lab()
        .args(["bench", "--pcap", "examples/demo.pcap", "--runs", "1", "--json"])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // The table, on stderr with --json.
    assert!(
        err.starts_with("clarion-lab bench --pcap examples/demo.pcap: 19,456 frames"),
        "{err}"
    );
    for line in [
        "read (capture reader)",
        "read + parse (parse_frame)",
        "file path (replay, Monitor)",
        "file path / read + parse floor:",
        "RSS ",
    ] {
        assert!(err.contains(line), "no `{line}` in:\n{err}");
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["schema"], "clarion.bench-pcap/1");
    assert_eq!(v["capture"]["frames"], 19_456);
    assert_eq!(v["runs"], 1);
    for pass in ["read", "read_parse", "file_path"] {
        let ns = v["passes"][pass]["ns_per_packet"]["median"]
            .as_f64()
            .expect("a number");
        assert!(ns > 0.0, "{pass}: {ns}");
        assert!(v["passes"][pass]["packets_per_s"].as_f64().expect("a number") > 0.0);
    }
    assert!(
        v["ratio_file_path_to_read_parse"]["median"]
            .as_f64()
            .expect("a number")
            > 0.0
    );
    // One worker: the fourth pass splits the monitor's time.
    assert!(
        err.contains("the monitor, a fourth pass timing each batch: packet path "),
        "{err}"
    );
    let split = &v["monitor_split"];
    assert!(split["packet_path_ns_per_packet"].as_f64().expect("a number") > 0.0);
    assert!(split["sweep_ns_per_packet"].as_f64().expect("a number") >= 0.0);
    assert_eq!(split["sweeps"], v["counters"]["sweeps_completed"]);
    if cfg!(target_os = "linux") {
        // The capture (2.5 MB) is resident.
        assert!(v["rss_kib"]["after_loading"].as_u64().expect("VmRSS") > 2_000);
    }
    let reports = v["reports"].as_u64().expect("a count");
    assert!(reports > 0, "the demo's events fire on the demo capture");
    assert_eq!(v["counters"]["reports"], reports);
    assert_eq!(
        reports as usize,
        run_reports(),
        "the same loop gives the same reports"
    );
}

#[test]
fn bench_pcap_with_workers_merges_to_the_same_reports() {
    let reports = |workers: &str| {
        let out = lab()
            .args(["bench", "--pcap", "examples/demo.pcap", "--runs", "1", "--json"])
            .args(["--workers", workers])
            .output()
            .expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        v["reports"].as_u64().expect("a count")
    };
    assert_eq!(reports("2"), reports("1"));
}

#[test]
fn bench_pcap_refuses_what_is_not_a_capture() {
    let out = lab()
        .args(["bench", "--pcap", "examples/demo.clarion", "--runs", "1"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot read capture examples/demo.clarion"), "{err}");
    let out = lab()
        .args(["bench", "--events", "examples/demo.clarion"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2), "--events needs --pcap");
    // The synthetic workload's and the monitor's flags do not apply to a capture.
    for flag in [
        ["--flows", "5000"],
        ["--flow-sizes", "pareto:1.2"],
        ["--flow-capacity", "100"],
    ] {
        let out = lab()
            .args(["bench", "--pcap", "examples/demo.pcap", "--runs", "1"])
            .args(flag)
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(2), "{flag:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(flag[0]) && err.contains("cannot be used with"),
            "{err}"
        );
    }
}

/// The demo capture's packets as the replay loop parses them.
fn demo_packets() -> Vec<clarion_wire::PacketRecord> {
    use clarion_capture::PacketSource;
    let mut src = clarion_capture::CaptureFile::open(&repo().join("examples/demo.pcap")).expect("open");
    let mut out = Vec::new();
    while let Some(r) = src.next_packet() {
        let p = r.expect("undamaged capture");
        if let Ok(rec) = clarion_wire::parse_frame(p.link, p.data, p.ts_ns, p.orig_len) {
            out.push(rec);
        }
    }
    out
}

#[test]
fn bench_pcap_times_records_and_gpvs_beside_the_monitor() {
    let out = lab()
        .args(["bench", "--pcap", "examples/demo.pcap", "--runs", "2", "--json"])
        .args(["--records", "--gpv"])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for line in [
        "+ flow meter (records to a Vec)",
        "+ GPV cache (GPVs dropped)",
        "the file path alone (rounds ",
    ] {
        assert!(err.contains(line), "no `{line}` in:\n{err}");
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    // What the passes made is what a meter and a cache make of the packets.
    let packets = demo_packets();
    let mut meter = clarion_flows::FlowMeter::new(clarion_flows::FlowConfig::default()).expect("default");
    let mut records = Vec::new();
    meter.process_batch(&packets, &mut records);
    meter.finish(&mut records);
    let mut cache = clarion_gpv::GpvCache::new(clarion_gpv::CacheConfig::default()).expect("default");
    let mut gpvs = Vec::new();
    packets.iter().for_each(|p| cache.push(p, &mut gpvs));
    cache.finish(&mut gpvs);
    assert_eq!(v["beside"]["records"]["made"], records.len() as u64);
    assert_eq!(v["beside"]["gpv"]["made"], gpvs.len() as u64);
    let file = v["passes"]["file_path"]["ns_per_packet"]["median"]
        .as_f64()
        .expect("a number");
    for side in ["records", "gpv"] {
        let b = &v["beside"][side];
        let ns = b["pass"]["ns_per_packet"]["median"].as_f64().expect("a number");
        let ratio = b["ratio_to_file_path"]["median"].as_f64().expect("a number");
        assert!(ns > 0.0 && ratio > 0.0, "{side}: {ns} {ratio}");
        let added = b["ns_per_packet_added"].as_f64().expect("a number");
        assert!(
            (added - (ns - file)).abs() < 1e-9,
            "{side}: {added} vs {ns} - {file}"
        );
    }
    // Without them, no such passes.
    let out = lab()
        .args(["bench", "--pcap", "examples/demo.pcap", "--runs", "1", "--json"])
        .output()
        .expect("runs");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["beside"], serde_json::json!({}));
    let out = lab().args(["bench", "--records"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(2), "--records needs --pcap");
}
