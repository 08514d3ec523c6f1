//! The `clarion` binary end to end: the README's main command, exit codes,
//! error messages, damaged input, output formats.

use assert_cmd::Command;

mod common;
use common::{clarion, repo, stderr};

/// `clarion run` on a capture with the given events file (paths from the repository root).
fn run(pcap: &str, events: &str) -> Command {
    let mut c = clarion();
    c.args(["run", "--pcap", pcap, "--events", events]);
    c
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn readme_command_reports_the_golden_lines() {
    let o = run("examples/demo.pcap", "examples/demo.clarion")
        .args(["--format", "json", "--host", "golden"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let golden = std::fs::read_to_string(repo().join("crates/conformance/tests/golden/demo.jsonl")).unwrap();
    assert_eq!(stdout(&o), golden);
    let err = stderr(&o);
    assert!(err.contains("19,456 frames"), "summary names the frames: {err}");
    assert!(err.contains("69 reports"), "{err}");
}

#[test]
fn table_format_and_output_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.txt");
    let o = run("examples/demo.pcap", "examples/demo.clarion")
        .args(["--format", "table", "-q"])
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        o.stdout.is_empty() && o.stderr.is_empty(),
        "-q and --output leave the terminal quiet"
    );
    let text = std::fs::read_to_string(out).unwrap();
    assert!(text.starts_with("EVENT"), "{text}");
    assert!(text.contains("heavy_tcp_flows"));
}

#[test]
fn bad_events_file_exits_2_with_line_column_and_help() {
    let dir = tempfile::tempdir().unwrap();
    let ev = dir.path().join("bad.clarion");
    std::fs::write(&ev, "event x\n  when sum(volum) > 5\n").unwrap();
    let o = clarion()
        .args(["run", "--pcap", "examples/demo.pcap", "--events"])
        .arg(&ev)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("bad.clarion:2:"), "{err}");
    assert!(err.contains("volume"), "suggests the right name: {err}");
    let o = clarion().arg("check").arg(&ev).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn the_paper_events_check_and_run() {
    let o = clarion()
        .args(["check", "examples/paper.clarion"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let printed = stdout(&o);
    assert_eq!(printed.matches("event ").count(), 6);
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    let o = run("examples/demo.pcap", "examples/paper.clarion")
        .args(["--format", "json", "--burst-gap", "500us"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn the_benchmark_workload_checks_and_runs() {
    // What `clarion-lab gen --packets 50000 --dos-fraction 0.1 --seed 7
    // --events-out` writes (crates/lab tests the command), made here with
    // the same library, since this crate cannot run that binary.
    let dir = tempfile::tempdir().unwrap();
    let (pcap, events) = (dir.path().join("a.pcap"), dir.path().join("bench.clarion"));
    let triggers = clarion_workload::TriggerSpec::default();
    let traffic = clarion_workload::WorkloadSpec {
        packets: 50_000,
        dos_fraction: 0.1,
        seed: 7,
        groups: triggers.traffic_groups(),
        ..clarion_workload::WorkloadSpec::default()
    };
    let set = triggers.synthesize(&traffic).expect("a valid workload");
    std::fs::write(&events, set.text).unwrap();
    let out = std::io::BufWriter::new(std::fs::File::create(&pcap).unwrap());
    traffic.write_pcap(out).expect("pcap written");

    let check = clarion().arg("check").arg(&events).output().unwrap();
    assert!(check.status.success(), "{}", stderr(&check));
    assert_eq!(stdout(&check).matches("event g").count(), 4096);

    let o = clarion()
        .args(["run", "--format", "json", "--pcap"])
        .arg(&pcap)
        .arg("--events")
        .arg(&events)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("50,000 frames"), "{}", stderr(&o));
}

#[test]
fn check_output_is_canonical_and_stable() {
    let first = clarion()
        .args(["check", "examples/demo.clarion"])
        .output()
        .unwrap();
    assert!(first.status.success());
    let dir = tempfile::tempdir().unwrap();
    let again = dir.path().join("again.clarion");
    std::fs::write(&again, &first.stdout).unwrap();
    let second = clarion().arg("check").arg(&again).output().unwrap();
    assert_eq!(
        stdout(&first),
        stdout(&second),
        "printing the canonical form again changes nothing"
    );
}

/// The network-wide example of docs/language.md, written out of canonical order.
const SERVICE_SPIKE: &str = "event service_load_spike across hosts
  filter dst_ip in 10.0.128.0/24 and dst_port = 80
  when sum(volume) > 100MB every 10ms per dst_ip/24
";

#[test]
fn check_prints_across_hosts_as_the_last_clause() {
    let dir = tempfile::tempdir().unwrap();
    let ev = dir.path().join("spike.clarion");
    std::fs::write(&ev, SERVICE_SPIKE).unwrap();
    let o = clarion().arg("check").arg(&ev).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "event service_load_spike
  filter dst_ip in 10.0.128.0/24 and dst_port = 80
  when sum(volume) > 100MB
  per dst_ip/24
  every 10ms
  across hosts
"
    );
}

#[test]
fn run_without_an_inventory_refuses_a_network_wide_event() {
    let dir = tempfile::tempdir().unwrap();
    let ev = dir.path().join("spike.clarion");
    std::fs::write(&ev, SERVICE_SPIKE).unwrap();
    let o = clarion()
        .args(["run", "--pcap", "examples/demo.pcap", "--events"])
        .arg(&ev)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(
            "event `service_load_spike` is network-wide (`across hosts`): a monitor runs host triggers; \
             give `clarion run` an inventory (--inventory) so the event manager splits it"
        ),
        "{err}"
    );
    assert!(o.stdout.is_empty(), "no reports");
}

#[test]
fn drill_down_example_reports_instances_and_counts_them() {
    let o = run("examples/demo.pcap", "examples/drilldown.clarion")
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for name in [
        "\"event\":\"lossy_flow\"",
        "\"event\":\"senders_to_lossy_dst[dst_ip=10.20.93.0/24]\"",
        "\"event\":\"senders_to_lossy_dst[dst_ip=fd00:20:93::/64]\"",
    ] {
        assert!(out.contains(name), "{name} in {out}");
    }
    assert!(
        !out.contains("\"event\":\"senders_to_lossy_dst\""),
        "never installed on its own"
    );
    let err = stderr(&o);
    assert!(err.contains("drill-downs: 3 instances installed"), "{err}");
    assert!(err.contains("0 started late"), "{err}");
    // The embedded network runs host drill-downs on every host, and network-wide ones.
    let o = run("examples/demo.pcap", "examples/drilldown.clarion")
        .args(["--inventory", "examples/demo-hosts.txt", "-o", "/dev/null"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run("examples/demo.pcap", "examples/network-drilldown.clarion")
        .args(["--inventory", "examples/demo-hosts.txt", "--format", "json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("\"event\":\"senders_to_busy_port[dst_port="),
        "{}",
        stdout(&o)
    );
    assert!(
        stderr(&o).contains("drill-down instances installed"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn missing_capture_exits_1() {
    let o = run("no/such.pcap", "examples/demo.clarion").output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with("clarion: cannot read capture no/such.pcap"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        stderr(&o).matches("No such file").count(),
        1,
        "the reason once: {}",
        stderr(&o)
    );
}

#[test]
fn truncated_capture_is_processed_up_to_the_damage_then_exits_1() {
    let bytes = std::fs::read(repo().join("examples/demo.pcap")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.pcap");
    std::fs::write(&cut, &bytes[..bytes.len() / 2 + 7]).unwrap();
    let o = clarion()
        .args([
            "run",
            "--events",
            "examples/demo.clarion",
            "--format",
            "json",
            "--pcap",
        ])
        .arg(&cut)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("truncated") && err.contains("byte offset"), "{err}");
    assert!(
        stdout(&o).lines().count() > 5,
        "reports before the damage are written"
    );
}

#[test]
fn usage_errors_exit_2_and_help_teaches() {
    let o = clarion().args(["run", "--pcap"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = clarion().args(["run", "--help"]).output().unwrap();
    assert!(o.status.success());
    let help = stdout(&o);
    assert!(
        help.contains("Examples:") && help.contains("--flow-timeout"),
        "{help}"
    );
}

#[test]
fn closed_pipe_is_not_an_error() {
    // `head -1` closes the pipe early; clarion must exit 0 without a message.
    // Every flow every 10 ms: far more output than a pipe buffers.
    let dir = tempfile::tempdir().unwrap();
    let ev = dir.path().join("all.clarion");
    std::fs::write(&ev, "event all\n  when sum(packets) > 0\n  every 1ms\n").unwrap();
    let bin = assert_cmd::cargo::cargo_bin("clarion");
    let o = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; {} run --pcap examples/demo.pcap --events {} --format json -q | head -1 >/dev/null",
            bin.display(),
            ev.display()
        ))
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(o.status.success(), "exit status {:?}: {}", o.status, stderr(&o));
    assert!(!stderr(&o).contains("Broken pipe"), "{}", stderr(&o));
}

/// The commands `clarion --help` lists (the reference for completions and pages).
fn commands() -> Vec<String> {
    let o = clarion().arg("--help").output().expect("clarion --help runs");
    let help = stdout(&o);
    help.split("Commands:")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .unwrap_or_default()
        .lines()
        // A command's line; its wrapped description is indented further.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.strip_prefix("  ").and_then(|l| l.split_whitespace().next()))
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

#[test]
fn completions_know_every_command_and_flag() {
    let commands = commands();
    assert!(commands.len() > 10, "{commands:?}");
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = clarion().args(["completions", shell]).output().unwrap();
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        let script = stdout(&o);
        for c in &commands {
            assert!(script.contains(c.as_str()), "{shell} completes `{c}`");
        }
        assert!(
            script.contains("adapt"),
            "{shell} completes run's flags (--adapt)"
        );
    }
    let o = clarion().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("possible values"), "{}", stderr(&o));
}

#[test]
fn man_writes_a_page_per_command() {
    let dir = tempfile::tempdir().unwrap();
    let o = clarion()
        .args(["man", "--out-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let page = |name: &str| std::fs::read_to_string(dir.path().join(format!("{name}.1")));
    let top = page("clarion").unwrap();
    assert!(top.contains(".TH clarion 1"), "{top}");
    for c in commands() {
        let p = page(&format!("clarion-{c}")).unwrap_or_else(|e| panic!("clarion-{c}.1: {e}"));
        let title = format!(".TH clarion-{c} 1  \"clarion-{c} {}\"", env!("CARGO_PKG_VERSION"));
        assert!(p.contains(&title), "clarion-{c}.1 titled {title}:\n{p}");
    }
    // A flag's help reaches its page.
    assert!(page("clarion-run").unwrap().contains("adapt"));
}
