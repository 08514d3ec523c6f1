//! `clarion run`'s flags: none silently ignored (nor a ring flag the live
//! source does not read), `--workers` on files, the help's headings.

use std::path::Path;

mod common;
use common::{clarion, repo, stderr};

/// Every flag of live capture, with a valid value, refused beside --pcap with its name.
#[test]
fn live_capture_flags_are_errors_with_a_capture_file() {
    let flags: &[&[&str]] = &[
        &["--filter", "tcp"],
        &["--cpus", "0"],
        &["--metrics", "127.0.0.1:9464"],
        &["--source", "xdp"],
        &["--xdp-mode", "generic"],
        &["--snaplen", "128"],
        &["--ring-block-size", "65536"],
        &["--ring-blocks", "64"],
        &["--ring-frame-size", "2048"],
        &["--ring-retire", "2ms"],
        &["--ring-mode", "blocks"],
        &["--clock-lag", "1ms"],
        &["--step-budget", "10us"],
        &["--low-water", "8"],
        &["--duration", "5s"],
        &["--epoch-stats", "/tmp/never-written.jsonl"],
        &["--stats-every", "1s"],
        &["--api", "127.0.0.1:8701"],
        &["--api-no-auth"],
    ];
    for flag in flags {
        let o = clarion()
            .args([
                "run",
                "--pcap",
                "examples/demo.pcap",
                "--events",
                "examples/demo.clarion",
            ])
            .args(*flag)
            .output()
            .expect("runs");
        assert_eq!(o.status.code(), Some(2), "{flag:?} with --pcap: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains(flag[0]) && err.contains("--pcap") && err.contains("cannot be used with"),
            "{flag:?}: {err}"
        );
        assert!(o.stdout.is_empty(), "{flag:?}: no reports");
    }
}

/// The window of recent flow records serves only a live host's control
/// API: its flags on a capture file, or live without `--api`, are usage
/// errors naming what they need.
#[test]
fn flow_window_flags_need_the_control_api() {
    for flag in [["--flow-window", "5"], ["--flow-window-age", "1m"]] {
        let o = clarion()
            .args(["run", "-i", "lo", "--records", "/dev/null"])
            .args(flag)
            .output()
            .expect("runs");
        assert_eq!(o.status.code(), Some(2), "{flag:?} live: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(flag[0]) && err.contains("--api"), "{flag:?}: {err}");
        let o = clarion()
            .args([
                "run",
                "--pcap",
                "examples/demo.pcap",
                "--events",
                "examples/demo.clarion",
                "--records",
                "/dev/null",
            ])
            .args(flag)
            .output()
            .expect("runs");
        assert_eq!(o.status.code(), Some(2), "{flag:?} with --pcap: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains(flag[0]) && err.contains("--pcap") && err.contains("cannot be used with"),
            "{flag:?}: {err}"
        );
        assert!(o.stdout.is_empty(), "{flag:?}: no reports");
    }
}

/// An agent's flags of capture files are refused with an interface, and its live flags with a file.
#[test]
fn agent_flags_that_do_not_apply_are_errors() {
    let cases: &[&[&str]] = &[
        &["-i", "lo", "--speed", "1"],
        &["-i", "lo", "--linger", "5s"],
        &["-i", "lo", "--pcap", "examples/demo.pcap"],
        &["--pcap", "examples/demo.pcap", "--workers", "2"],
        &["--pcap", "examples/demo.pcap", "--filter", "tcp"],
        &["--pcap", "examples/demo.pcap", "--api", "127.0.0.1:8701"],
    ];
    for args in cases {
        let o = clarion()
            .args(["agent", "--host", "h", "--nats", "nats://127.0.0.1:1"])
            .args(*args)
            .output()
            .expect("runs");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("cannot be used with"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
}

/// No interface has this name: a ring flag's refusal comes before any
/// interface is looked up, and a flag that is read fails later, on the name.
const NO_SUCH_INTERFACE: &str = "clr-none0";

/// `clarion run -i` (and `clarion agent -i`) with `flags`: its output.
fn live_with(command: &str, flags: &[&str]) -> std::process::Output {
    let mut c = clarion();
    match command {
        "run" => c.args(["run", "--events", "examples/demo.clarion"]),
        _ => c.args(["agent", "--host", "h", "--nats", "nats://127.0.0.1:1"]),
    };
    c.args(["-i", NO_SUCH_INTERFACE, "--stats-every", "0", "--duration", "1s"])
        .args(flags)
        .output()
        .expect("runs")
}

/// A ring flag the source or layout would not read is a usage error that
/// names it and says where it applies (found in review: they were taken and
/// ignored): AF_XDP reads none of them, frames neither the retire timer nor
/// the frame slot size of blocks.
#[test]
fn ring_flags_the_source_does_not_read_are_usage_errors() {
    let xdp = "applies to --source packet only (AF_XDP has no AF_PACKET ring";
    let blocks = "applies to --ring-mode blocks only";
    let cases: &[(&[&str], &str, &str)] = &[
        (&["--source", "xdp", "--ring-mode", "frames"], "--ring-mode", xdp),
        (&["--source", "xdp", "--ring-mode", "blocks"], "--ring-mode", xdp),
        (
            &["--source", "xdp", "--ring-block-size", "65536"],
            "--ring-block-size",
            xdp,
        ),
        (&["--source", "xdp", "--ring-blocks", "64"], "--ring-blocks", xdp),
        (
            &["--source", "xdp", "--ring-frame-size", "2048"],
            "--ring-frame-size",
            xdp,
        ),
        (&["--source", "xdp", "--ring-retire", "1ms"], "--ring-retire", xdp),
        (
            &["--source", "xdp", "--snaplen", "128"],
            "--snaplen",
            "applies to --source packet only (AF_XDP copies whole frames",
        ),
        (
            &["--xdp-mode", "generic"],
            "--xdp-mode",
            "applies to --source xdp only",
        ),
        (
            &["--source", "packet", "--xdp-mode", "native"],
            "--xdp-mode",
            "applies to --source xdp only",
        ),
        (&["--ring-retire", "2ms"], "--ring-retire", blocks),
        (
            &["--ring-mode", "frames", "--ring-retire", "1ms"],
            "--ring-retire",
            blocks,
        ),
        (&["--ring-frame-size", "4096"], "--ring-frame-size", blocks),
        (
            &[
                "--source",
                "packet",
                "--ring-mode",
                "frames",
                "--ring-frame-size",
                "2048",
            ],
            "--ring-frame-size",
            blocks,
        ),
    ];
    for command in ["run", "agent"] {
        for (flags, flag, why) in cases {
            let o = live_with(command, flags);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{command} {flags:?}: {err}");
            assert!(
                err.contains(&format!("clarion: {flag} {why}")),
                "{command} {flags:?}: {err}"
            );
            assert!(
                !err.contains(NO_SUCH_INTERFACE),
                "{command} {flags:?}: refused before the interface: {err}"
            );
            assert!(o.stdout.is_empty(), "{command} {flags:?}");
        }
    }
    let o = live_with("run", &["--ring-retire", "2ms"]);
    assert!(
        stderr(&o).contains("(frames are handed over one by one)"),
        "says why: {}",
        stderr(&o)
    );
}

/// Ring flags the source and layout read pass the check: such a run goes
/// on to the interface (and fails there, on a name no interface has).
#[test]
fn ring_flags_the_source_reads_are_accepted() {
    let cases: &[&[&str]] = &[
        &["--ring-mode", "blocks", "--ring-retire", "2ms"],
        &[
            "--ring-mode",
            "blocks",
            "--ring-frame-size",
            "4096",
            "--ring-block-size",
            "131072",
        ],
        &[
            "--ring-mode",
            "frames",
            "--ring-blocks",
            "8",
            "--ring-block-size",
            "131072",
        ],
        &["--source", "packet", "--ring-blocks", "8"],
        &["--source", "xdp"],
    ];
    for command in ["run", "agent"] {
        for flags in cases {
            let o = live_with(command, flags);
            let err = stderr(&o);
            assert!(!err.contains("applies to"), "{command} {flags:?}: {err}");
            assert!(
                err.contains(NO_SUCH_INTERFACE),
                "{command} {flags:?}: fails on the interface: {err}"
            );
        }
    }
}

#[test]
fn progress_is_an_error_with_an_interface() {
    let o = clarion()
        .args([
            "run",
            "-i",
            "lo",
            "--events",
            "examples/demo.clarion",
            "--progress",
            "always",
        ])
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--progress"), "{}", stderr(&o));
}

#[test]
fn workers_with_an_inventory_is_an_error() {
    let o = clarion()
        .args([
            "run",
            "--pcap",
            "examples/demo.pcap",
            "--events",
            "examples/network.clarion",
        ])
        .args(["--inventory", "examples/demo-hosts.txt", "--workers", "2"])
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--workers"), "{}", stderr(&o));
}

#[test]
fn drill_downs_on_several_workers_are_an_error_that_says_what_to_do() {
    let o = clarion()
        .args([
            "run",
            "--pcap",
            "examples/demo.pcap",
            "--events",
            "examples/drilldown.clarion",
        ])
        .args(["--workers", "2"])
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--workers 1"), "{}", stderr(&o));
}

/// JSON lines of a run, with the origin's worker (which names the merged
/// workers on several) blanked.
fn reports(capture: &Path, events: &Path, workers: u32) -> Vec<String> {
    let o = clarion()
        .args(["run", "--format", "json", "-q", "--host", "h", "--events"])
        .arg(events)
        .arg("--pcap")
        .arg(capture)
        .args(["--workers", &workers.to_string()])
        .output()
        .expect("runs");
    assert!(
        o.status.success(),
        "{} on {workers}: {}",
        capture.display(),
        stderr(&o)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).expect("a JSON report");
            v["worker"] = serde_json::Value::Null;
            v.to_string()
        })
        .collect()
}

/// `--workers N` on a file: the bundled example and every shared capture
/// give one worker's reports.
#[test]
fn workers_on_capture_files_report_as_one() {
    let repo = repo();
    let mut runs = vec![(
        repo.join("examples/demo.pcap"),
        repo.join("examples/demo.clarion"),
    )];
    // The golden events of real captures but their drill-downs (which need one worker).
    let golden = std::fs::read_to_string(repo.join("crates/conformance/tests/golden/real_captures.clarion"))
        .expect("golden events");
    let (without_drill_downs, _) = golden
        .split_once("\n# Drill-downs")
        .expect("drill-downs come last");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let real = dir.path().join("real.clarion");
    std::fs::write(&real, without_drill_downs).expect("written");
    match std::fs::read_dir(repo.join("../shared/captures")) {
        Ok(dir) => {
            let mut files: Vec<_> = dir.flatten().map(|e| e.path()).collect();
            files.sort();
            runs.extend(files.into_iter().map(|f| (f, real.clone())));
        }
        Err(e) => eprintln!("../shared/captures: {e}; only the example runs"),
    }
    for (capture, events) in runs {
        let one = reports(&capture, &events, 1);
        assert!(!one.is_empty(), "{}: no reports", capture.display());
        for n in [2, 4] {
            assert_eq!(
                reports(&capture, &events, n),
                one,
                "{} on {n} workers",
                capture.display()
            );
        }
    }
}

/// General flags are listed under "Options", live capture's under their own heading.
#[test]
fn run_help_lists_general_flags_before_live_capture() {
    let o = clarion().args(["run", "--help"]).output().expect("runs");
    let help = String::from_utf8_lossy(&o.stdout);
    let live = help.find("Live capture:").expect("a live capture heading");
    for flag in [
        "--events",
        "--format",
        "--output",
        "--host",
        "--workers",
        "--quiet",
    ] {
        let at = help
            .find(&format!("  {flag}"))
            .or_else(|| help.find(&format!(", {flag}")));
        assert!(at.is_some_and(|i| i < live), "{flag} is a general flag:\n{help}");
    }
    for flag in ["--filter", "--cpus", "--metrics", "--snaplen"] {
        assert!(
            help.find(&format!("  {flag}")).is_some_and(|i| i > live),
            "{flag} is live capture's:\n{help}"
        );
    }
}

/// `--inventory` with one capture per host (as `clarion split` writes them,
/// as tcpdump on each host's interface would) reports what one capture of
/// all hosts' traffic does.
#[test]
fn one_capture_per_host_reports_as_one_capture_of_all() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let o = clarion()
        .args([
            "split",
            "--pcap",
            "examples/demo.pcap",
            "--inventory",
            "examples/demo-hosts.txt",
            "--out-dir",
        ])
        .arg(dir.path())
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let network = |captures: &[String]| {
        let mut c = clarion();
        c.args([
            "run",
            "--format",
            "json",
            "-q",
            "--events",
            "examples/network.clarion",
        ])
        .args(["--inventory", "examples/demo-hosts.txt"]);
        for p in captures {
            c.args(["--pcap", p]);
        }
        let o = c.output().expect("runs");
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let per_host: Vec<String> = ["sender-1", "sender-2", "receiver"]
        .iter()
        .map(|h| format!("{h}={}", dir.path().join(format!("{h}.pcap")).display()))
        .collect();
    let one = network(&["examples/demo.pcap".to_string()]);
    assert!(one.lines().count() > 5, "the example fires network-wide: {one}");
    assert_eq!(network(&per_host), one);
}

#[test]
fn capture_host_mistakes_are_usage_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["--pcap", "receiver=examples/demo.pcap"], "give --inventory"),
        (
            &["--pcap", "examples/demo.pcap", "--pcap", "examples/demo.pcap"],
            "--inventory",
        ),
        (
            &[
                "--inventory",
                "examples/demo-hosts.txt",
                "--pcap",
                "nosuch=examples/demo.pcap",
            ],
            "no host nosuch",
        ),
        (
            &[
                "--inventory",
                "examples/demo-hosts.txt",
                "--pcap",
                "receiver=examples/demo.pcap",
                "--pcap",
                "receiver=examples/demo.pcap",
            ],
            "two captures for host receiver",
        ),
        (
            &[
                "--inventory",
                "examples/demo-hosts.txt",
                "--pcap",
                "receiver=examples/demo.pcap",
                "--pcap",
                "examples/demo.pcap",
            ],
            "--pcap NAME=examples/demo.pcap",
        ),
    ];
    for (args, says) in cases {
        let o = clarion()
            .args(["run", "--events", "examples/network.clarion"])
            .args(*args)
            .output()
            .expect("runs");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

/// The example config file runs the README's job; a mistake in a config
/// names the file, the table and the key.
#[test]
fn config_files_set_defaults_and_name_their_mistakes() {
    let o = clarion()
        .args([
            "--config",
            "examples/clarion.toml",
            "run",
            "--pcap",
            "examples/demo.pcap",
            "-q",
        ])
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().count(),
        69,
        "the example's 69 reports, as JSON"
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[run]\nworkerz = 2\n").expect("written");
    let o = clarion()
        .arg("--config")
        .arg(&bad)
        .args(["run", "--pcap", "examples/demo.pcap"])
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("[run] workerz") && stderr(&o).contains("bad.toml"),
        "{}",
        stderr(&o)
    );
}

/// An empty API token would refuse every request: it is an error at start,
/// for the manager and for a live host's own API.
#[test]
fn an_empty_api_token_is_refused_at_start() {
    let o = clarion()
        .args([
            "manager",
            "--insecure",
            "--inventory",
            "examples/demo-hosts.txt",
            "--no-store",
            "--api",
            "127.0.0.1:0",
        ])
        .args(["--api-token", ""])
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--api-token") && stderr(&o).contains("is empty"),
        "{}",
        stderr(&o)
    );
}

/// `--adapt` sheds work when live traffic outruns the monitor: refused on a
/// file, saying where to study overload instead.
#[test]
fn adapt_is_refused_on_a_file() {
    let o = clarion()
        .args([
            "run",
            "--pcap",
            "examples/demo.pcap",
            "--events",
            "examples/demo.clarion",
            "--adapt",
        ])
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("--adapt") && err.contains("-i IFACE") && err.contains("clarion-lab overload"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

#[test]
fn speed_is_a_factor_above_zero_on_capture_files() {
    for (flags, says) in [
        (
            &["--pcap", "examples/demo.pcap", "--speed", "0"][..],
            "not a speed",
        ),
        (
            &["--pcap", "examples/demo.pcap", "--speed", "fast"][..],
            "not a speed",
        ),
        (&["-i", "lo", "--speed", "1"][..], "--speed"),
    ] {
        let o = clarion()
            .arg("run")
            .args(flags)
            .args(["--events", "examples/demo.clarion"])
            .output()
            .expect("runs");
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{flags:?}: {}", stderr(&o));
    }
}

/// A paced replay (scenarios/golden/burst_loss.pcap, 3 s, at 10 times its
/// pace) reports exactly what an unpaced one does: pacing changes when
/// reports leave, not their windows.
#[test]
fn a_paced_replay_reports_as_an_unpaced_one() {
    let capture = repo().join("scenarios/golden/burst_loss.pcap");
    let events = repo().join("scenarios/use-cases.clarion");
    let run = |speed: &[&str]| {
        let o = clarion()
            .arg("run")
            .arg("--pcap")
            .arg(&capture)
            .arg("--events")
            .arg(&events)
            .args(["--format", "json", "-q"])
            .args(speed)
            .output()
            .expect("runs");
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    let t0 = std::time::Instant::now();
    let paced = run(&["--speed", "10"]);
    // The capture spans 2.9 s of packet time: 0.29 s at 10 times its pace.
    assert!(
        t0.elapsed() >= std::time::Duration::from_millis(250),
        "{:?}",
        t0.elapsed()
    );
    let unpaced = run(&[]);
    assert!(unpaced.lines().count() > 100);
    assert_eq!(paced, unpaced);
}
