//! Live capture from the command line: usage and permission errors, --duration.

use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;

fn clarion() -> Command {
    let mut c = Command::cargo_bin("clarion").expect("binary");
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    c
}

fn run(c: &mut Command) -> (i32, String) {
    let out = c.output().expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_missing_interface_is_named() {
    let (code, err) =
        run(clarion().args(["run", "-i", "clarion-nope0", "--events", "examples/demo.clarion"]));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no such interface `clarion-nope0`"), "{err}");
}

#[test]
fn a_file_and_an_interface_together_are_refused() {
    let (code, err) = run(clarion().args([
        "run",
        "-i",
        "lo",
        "--pcap",
        "examples/demo.pcap",
        "--events",
        "examples/demo.clarion",
    ]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    let (code, err) = run(clarion().args(["run", "--events", "examples/demo.clarion"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--pcap") && err.contains("--interface"), "{err}");
}

#[test]
fn a_bad_filter_is_a_usage_error_with_tcpdump_s_words() {
    if Command::new("tcpdump").arg("--version").output().is_err() {
        eprintln!("skipped: no tcpdump");
        return;
    }
    let (code, err) = run(clarion().args([
        "run",
        "-i",
        "lo",
        "--filter",
        "tcp port 99999",
        "--events",
        "examples/demo.clarion",
    ]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("illegal port number"), "{err}");
}

#[test]
fn without_the_capability_the_error_says_what_to_grant() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped: needs root (to drop to an unprivileged user) and setpriv");
        return;
    }
    let bin = assert_cmd::cargo::cargo_bin("clarion");
    let events = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/demo.clarion");
    let mut c = Command::new("setpriv");
    c.args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "--"])
        .arg(bin)
        .args(["run", "-i", "lo", "--events", events]);
    let (code, err) = run(&mut c);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("permission denied; run as root or grant"), "{err}");
    assert!(err.contains("CAP_NET_RAW"), "{err}");
}

#[test]
fn duration_stops_a_live_run_with_its_summary() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: opening a packet socket needs root");
        return;
    }
    let started = std::time::Instant::now();
    let out = clarion()
        .args([
            "run",
            "-i",
            "lo",
            "--duration",
            "300ms",
            "--flow-capacity",
            "1024",
            "--events",
            "examples/demo.clarion",
            "--format",
            "json",
        ])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert!(err.contains("capturing on lo (AF_PACKET) with 1 worker"), "{err}");
    assert!(err.contains("live: 0 kernel drops"), "{err}");
}

/// An interface that goes down (or away) while captured stops the run with
/// an error naming it, instead of quiet windows that saw nothing.
#[test]
fn an_interface_going_down_is_an_error_naming_it() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || Command::new("ip").arg("-V").output().is_err() {
        eprintln!("skipped: needs root and ip");
        return;
    }
    let (a, b) = (
        format!("clrdn{}a", std::process::id() % 10_000),
        format!("clrdn{}b", std::process::id() % 10_000),
    );
    let ip = |args: &[&str]| Command::new("ip").args(args).status().is_ok_and(|s| s.success());
    assert!(
        ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]),
        "a veth pair"
    );
    ip(&["link", "set", &a, "up"]);
    ip(&["link", "set", &b, "up"]);
    let child = clarion()
        .args([
            "run",
            "-i",
            &a,
            "--events",
            "examples/demo.clarion",
            "--stats-every",
            "0",
            "--duration",
            "30s",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starts");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    ip(&["link", "set", &a, "down"]);
    let started = std::time::Instant::now();
    let out = child.wait_with_output().expect("ends");
    ip(&["link", "del", &a]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("interface {a} went down")), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "noticed at once"
    );
}
