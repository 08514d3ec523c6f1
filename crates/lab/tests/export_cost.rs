//! `clarion-lab export-cost`: every variant replays the looped stream in
//! full, each policy exports exactly the packets its filter takes (counted
//! here from the capture, read and parsed on its own), everything exported
//! arrives (decoded headers, VXLAN frames, packets read back from files),
//! and export policies never change the events' reports.

// Test helpers may unwrap: a missing field is the test's failure.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use clarion_capture::PacketSource;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn lab() -> Command {
    let mut c = Command::cargo_bin("clarion-lab").expect("binary builds");
    c.current_dir(repo());
    c
}

/// Per frame of the capture: whether it parses as IP, and its source port
/// if it has ports.
fn frames(path: &Path) -> Vec<(bool, Option<u16>)> {
    let mut r = clarion_capture::open(path).expect("the capture opens");
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let Ok(p) = p else { continue };
        out.push(
            match clarion_wire::parse_frame(p.link, p.data, p.ts_ns, p.orig_len) {
                Ok(rec) => (true, rec.key.has_ports().then_some(rec.key.src_port)),
                Err(_) => (false, None),
            },
        );
    }
    out
}

/// `reporting`: whether the demo events report on this capture.
fn run(pcap: &Path, rate: u64, seconds: &str, reporting: bool) {
    let out = lab()
        .args(["export-cost", "--pcap"])
        .arg(pcap)
        .args([
            "--rate",
            &rate.to_string(),
            "--seconds",
            seconds,
            "--rounds",
            "1",
            "--json",
        ])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let j: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let total = j["packets"].as_u64().unwrap();
    assert_eq!(
        total as f64,
        (rate as f64 * seconds.parse::<f64>().unwrap()).round()
    );

    // The stream, counted from the capture: frame i is frame i mod n of it.
    let f = frames(pcap);
    let n = f.len() as u64;
    let at = |i: u64| f[(i % n) as usize];
    let ip = (0..total).filter(|&i| at(i).0).count() as u64;
    let (lo, hi) = (
        j["headers_part"]["src_port_lo"].as_u64().unwrap() as u16,
        j["headers_part"]["src_port_hi"].as_u64().unwrap() as u16,
    );
    let part = (0..total)
        .filter(|&i| at(i).1.is_some_and(|p| (lo..=hi).contains(&p)))
        .count() as u64;

    let variants = j["variants"].as_array().unwrap();
    let names: Vec<&str> = variants.iter().map(|v| v["variant"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "monitor",
            "classify",
            "headers",
            "pcapng",
            "vxlan",
            "headers-part"
        ]
    );
    let reports = variants[0]["reports"].as_u64().unwrap();
    assert_eq!(reports > 0, reporting, "{reports} reports");
    for v in variants {
        let name = v["variant"].as_str().unwrap();
        assert_eq!(v["frames"].as_u64(), Some(total), "{name}");
        assert_eq!(
            v["reports"].as_u64(),
            Some(reports),
            "{name}: exports change no report"
        );
        assert!(v["cores"].as_f64().unwrap() > 0.0, "{name}");
        // One entry a round, with the run's own counts.
        let rounds = v["rounds"].as_array().unwrap();
        assert_eq!(rounds.len(), 1, "{name}");
        assert_eq!(rounds[0]["frames"].as_u64(), Some(total), "{name}");
        assert_eq!(v["errors"].as_u64(), Some(0), "{name}: no send or write error");
        let want = match name {
            "monitor" | "classify" => 0,
            "headers" | "pcapng" | "vxlan" => ip,
            "headers-part" => part,
            other => panic!("unknown variant {other}"),
        };
        assert_eq!(v["exported"].as_u64(), Some(want), "{name}");
        let delivered = v["delivered"].as_u64().unwrap();
        // The receivers ask for 16 MiB buffers, which only root is given
        // beyond net.core.rmem_max: elsewhere a busy machine may drop a
        // few mirrored datagrams (one a packet) on loopback.
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        if root || name != "vxlan" {
            assert_eq!(delivered, want, "{name}: everything exported arrives");
        } else {
            assert!(
                delivered <= want && delivered * 100 >= want * 99,
                "{name}: {delivered} of {want} arrived"
            );
        }
        let datagrams = v["datagrams"].as_u64().unwrap();
        match name {
            // One datagram a frame.
            "vxlan" => assert_eq!(datagrams, want),
            // Many headers a datagram, at least one datagram when any.
            "headers" | "headers-part" => assert!(
                datagrams <= want.div_ceil(10) && (want == 0) == (datagrams == 0),
                "{name}: {datagrams}"
            ),
            _ => assert_eq!(datagrams, 0, "{name}"),
        }
        if name != "monitor" {
            let hit = v["fast_path_hit_rate"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&hit), "{name}: {hit}");
            assert!(v["cpu_ns_per_exported"].is_null() == (want == 0), "{name}");
        }
    }
    // The part is near the fraction asked (0.1) on the capture.
    let share = j["headers_part"]["capture_share"].as_f64().unwrap();
    assert!((share - 0.1).abs() < 0.05, "{share}");
}

#[test]
fn export_cost_on_the_demo_capture() {
    run(&repo().join("examples/demo.pcap"), 20_000, "1", true);
}

#[test]
fn export_cost_on_a_real_capture() {
    let path = repo().join("../shared/captures/pathspider_real.pcap");
    if !path.exists() {
        eprintln!("skipped: {} is missing", path.display());
        return;
    }
    // 100,000 packets: the capture looped twice (62,781 frames a copy).
    // The demo events see its TCP (per 5-tuple) but never fire on it.
    run(&path, 50_000, "2", false);
}

#[test]
fn export_cost_refuses_bad_usage() {
    for args in [
        &["--fraction", "0"][..],
        &["--seconds", "-1"][..],
        &["--rate", "0"][..],
    ] {
        let out = lab()
            .args(["export-cost", "--pcap", "examples/demo.pcap"])
            .args(args)
            .output()
            .expect("runs");
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
