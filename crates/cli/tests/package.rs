//! The Debian package (`scripts/package-deb.sh`) on a clean Debian: built
//! from the tested binary, installed with `dpkg` into a fresh Debian root
//! (`mmdebstrap`), booted with systemd as its init (`systemd-nspawn
//! --boot`), and its `clarion-manager` and `clarion-agent` units started
//! by systemd. Checked against what the units and the issues promise, read
//! from the kernel:
//!
//! - the package: a stripped binary whose debug information is in
//!   `clarion-dbgsym` under its build id; manual pages; completions; the
//!   units, which `systemd-analyze verify` accepts; the configuration as a
//!   conffile readable by the services only;
//! - the agent's process (`/proc/PID/status`): a non-root user (the
//!   package's `clarion`), exactly CAP_NET_RAW, CAP_NET_ADMIN and CAP_BPF
//!   effective, permitted, ambient and in the bounding set, no new
//!   privileges;
//! - the manager's process (issue 37): the same user, no capability in
//!   any set, no new privileges; its store and its API's token (private)
//!   in its state directory, and its API answering `clarion events` with
//!   that token;
//! - it captures: frames `tcpreplay` sends into a veth pair are reported
//!   by the agent's own event, registered with the packaged manager, each
//!   report's flow one that `clarion run` finds in the same capture.
//!
//! Needs root, `dpkg-deb`, `objcopy`, `mmdebstrap` (and a Debian mirror),
//! `systemd-nspawn`, `nats-server`, `tcpreplay` and `ip`; skipped, saying
//! which is missing, otherwise (`scripts/deps.sh` installs them).

mod bus;
mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bus::*;
use common::{repo, tool};

/// Capability bits (linux/capability.h).
const CAP_NET_ADMIN: u32 = 12;
const CAP_NET_RAW: u32 = 13;
const CAP_SYS_RESOURCE: u32 = 24;
const CAP_BPF: u32 = 39;

fn run(cmd: &mut Command, what: &str) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        o.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Builds both packages from the binary under test; (clarion, clarion-dbgsym).
fn package(out: &Path) -> (PathBuf, PathBuf) {
    let bin = assert_cmd::cargo::cargo_bin("clarion");
    let printed = run(
        Command::new("bash")
            .arg(repo().join("scripts/package-deb.sh"))
            .arg("--no-build")
            .arg("--bin")
            .arg(&bin)
            .arg("--out")
            .arg(out),
        "scripts/package-deb.sh",
    );
    let mut debs = printed.lines().map(PathBuf::from);
    let (Some(main), Some(dbg)) = (debs.next(), debs.next()) else {
        panic!("package-deb.sh printed {printed}");
    };
    (main, dbg)
}

/// The ELF notes' build id of `file`.
fn build_id(file: &Path) -> String {
    let notes = run(Command::new("readelf").arg("-n").arg(file), "readelf -n");
    notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("no build id in {}", file.display()))
        .to_string()
}

fn sections(file: &Path) -> String {
    run(Command::new("readelf").args(["-S", "-W"]).arg(file), "readelf -S")
}

/// A capability set of `/proc/PID/status` as its bit numbers.
fn caps(status: &str, field: &str) -> BTreeSet<u32> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {field} in {status}"));
    let bits = u64::from_str_radix(hex, 16).expect("hex capabilities");
    (0..64).filter(|b| bits >> b & 1 == 1).collect()
}

/// The systemd-booted Debian root; powered off and removed when dropped.
struct Container {
    nspawn: Option<Child>,
    root: PathBuf,
}

impl Drop for Container {
    fn drop(&mut self) {
        if let Some(mut c) = self.nspawn.take() {
            // SIGTERM makes systemd-nspawn shut the container down cleanly.
            // SAFETY: kill(2) on our own child, not yet waited for.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline && c.try_wait().ok().flatten().is_none() {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The pid (in this namespace) of the process running `/usr/bin/clarion
/// COMMAND` whose root directory is `root` (the same inode: its
/// `/proc/PID/root` link reads `/`, the path inside its namespace).
fn clarion_pid(root: &Path, command: &str) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let want = std::fs::metadata(root).ok()?;
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|d| {
        let pid: u32 = d.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(d.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let is_it =
            args.first() == Some(&&b"/usr/bin/clarion"[..]) && args.get(1) == Some(&command.as_bytes());
        let its = std::fs::metadata(d.path().join("root/")).ok()?;
        (is_it && (its.dev(), its.ino()) == (want.dev(), want.ino())).then_some(pid)
    })
}

/// The started `clarion COMMAND` service's `/proc/PID/status`, once systemd
/// has started it (within 60 s).
fn service_status(root: &Path, command: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let pid = loop {
        if let Some(pid) = clarion_pid(root, command) {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "systemd started no clarion {command} within 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("the {command}'s status: {e}"))
}

/// The real, effective, saved and fs uids of a `/proc/PID/status`.
fn uids(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .map(|l| l.split_whitespace().filter_map(|u| u.parse().ok()).collect())
        .unwrap_or_default()
}

#[test]
fn the_debian_package_installs_and_its_unit_captures_as_an_unprivileged_user() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root (dpkg in a Debian root, systemd-nspawn, a veth pair)");
        return;
    }
    for (name, package) in [
        ("dpkg-deb", "dpkg"),
        ("objcopy", "binutils"),
        ("readelf", "binutils"),
        ("mmdebstrap", "mmdebstrap"),
        ("systemd-nspawn", "systemd-container"),
        ("tcpreplay", "tcpreplay"),
    ] {
        if tool(name).is_none() {
            eprintln!("skipped: {name} is not installed (apt-get install {package})");
            return;
        }
    }
    let Some(server) = require_server() else { return };
    let capture = repo().join("examples/demo.pcap");
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();

    // The packages.
    let (deb, dbgsym) = package(&d.join("debs"));
    let contents = run(Command::new("dpkg-deb").arg("-c").arg(&deb), "dpkg-deb -c");
    for path in [
        "./usr/bin/clarion",
        "./usr/share/man/man1/clarion.1.gz",
        "./usr/share/man/man1/clarion-agent.1.gz",
        "./usr/share/man/man1/clarion-manager.1.gz",
        "./usr/share/bash-completion/completions/clarion",
        "./usr/share/zsh/vendor-completions/_clarion",
        "./usr/share/fish/vendor_completions.d/clarion.fish",
        "./usr/lib/systemd/system/clarion-agent.service",
        "./usr/lib/systemd/system/clarion-manager.service",
        "./etc/clarion/clarion.toml",
    ] {
        assert!(
            contents.lines().any(|l| l.ends_with(path)),
            "{path} in the package:\n{contents}"
        );
    }
    let unpacked = d.join("unpacked");
    run(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked),
        "dpkg-deb -x",
    );
    run(
        Command::new("dpkg-deb").arg("-x").arg(&dbgsym).arg(&unpacked),
        "dpkg-deb -x dbgsym",
    );
    let shipped = unpacked.join("usr/bin/clarion");
    let shipped_sections = sections(&shipped);
    assert!(
        !shipped_sections.contains(".debug_info"),
        "stripped:\n{shipped_sections}"
    );
    assert!(
        shipped_sections.contains(".gnu_debuglink"),
        "linked to its debug file"
    );
    assert!(
        shipped_sections.contains(".symtab"),
        "symbols kept (perf, backtraces)"
    );
    let id = build_id(&shipped);
    let debug = unpacked.join(format!("usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..]));
    assert!(
        sections(&debug).contains(".debug_info"),
        "debug information in clarion-dbgsym"
    );
    assert_eq!(build_id(&debug), id);
    let full = std::fs::metadata(assert_cmd::cargo::cargo_bin("clarion")).map(|m| m.len());
    let small = std::fs::metadata(&shipped).map(|m| m.len());
    eprintln!("binary: {full:?} bytes built, {small:?} shipped");

    // A clean Debian with systemd, and the package installed into it.
    let root = d.join("debian");
    run(
        Command::new("mmdebstrap")
            .args([
                "--quiet",
                "--variant=minbase",
                "--include=systemd,systemd-sysv,adduser,dbus",
            ])
            .arg("bookworm")
            .arg(&root),
        "mmdebstrap bookworm (needs a Debian mirror)",
    );
    let mut container = Container {
        nspawn: None,
        root: root.clone(),
    };
    std::fs::copy(&deb, root.join("tmp/clarion.deb")).expect("package copied in");
    run(
        Command::new("chroot")
            .arg(&root)
            .args(["dpkg", "-i", "/tmp/clarion.deb"]),
        "dpkg -i clarion.deb",
    );
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).expect("passwd");
    let uid: u32 = passwd
        .lines()
        .find_map(|l| l.strip_prefix("clarion:"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| panic!("the package made a clarion user:\n{passwd}"));
    assert_ne!(uid, 0);
    run(
        Command::new("chroot").arg(&root).args([
            "systemd-analyze",
            "verify",
            // A minimal Debian has no `man` to look the manual pages up with.
            "--man=no",
            "clarion-agent.service",
            "clarion-manager.service",
        ]),
        "systemd-analyze verify (the units as installed)",
    );

    // The agent's network: a veth pair (one end here, where the container
    // lives too) and a NATS server on this loopback; the manager is the
    // package's service, its API on a free loopback port.
    let Some(veth) = Veth::new() else { return };
    std::fs::write(root.join("etc/clarion/hosts.txt"), INVENTORY).expect("inventory");
    let (_server, nats_port) = start_server(&server);
    let nats = format!("nats://127.0.0.1:{nats_port}");
    let api = format!("127.0.0.1:{}", free_port());
    let local = "event flows\n  when count(packets) >= 1\n  per 5tuple\n  every 100ms\n";
    std::fs::write(root.join("etc/clarion/local.clarion"), local).expect("events");
    let config = format!(
        "[agent]\nnats = \"{nats}\"\nhost = \"web-1\"\ninterface = [\"{}\"]\n\
         events = \"/etc/clarion/local.clarion\"\noutput = \"/var/lib/clarion/reports.jsonl\"\nformat = \"json\"\n\
         \n[manager]\nnats = \"{nats}\"\ninventory = \"/etc/clarion/hosts.txt\"\ninsecure = true\napi = \"{api}\"\n",
        veth.a
    );
    std::fs::write(root.join("etc/clarion/clarion.toml"), config).expect("configuration");
    run(
        Command::new("chroot").arg(&root).args([
            "systemctl",
            "enable",
            "clarion-manager.service",
            "clarion-agent.service",
        ]),
        "systemctl enable",
    );
    let own = std::fs::read_to_string("/proc/self/status").expect("status");
    if !caps(&own, "CapBnd:").contains(&CAP_SYS_RESOURCE) {
        // This sandbox cannot raise a hard limit, so systemd could not set
        // the unit's LimitMEMLOCK (for AF_XDP; this test captures with
        // AF_PACKET): only that line is overridden.
        let dropin = root.join("etc/systemd/system/clarion-agent.service.d");
        std::fs::create_dir_all(&dropin).expect("drop-in directory");
        std::fs::write(dropin.join("sandbox.conf"), "[Service]\nLimitMEMLOCK=\n").expect("drop-in");
        eprintln!("note: no CAP_SYS_RESOURCE here; the unit's LimitMEMLOCK is reset");
    }
    container.nspawn = Some(
        Command::new("systemd-nspawn")
            .arg("--directory")
            .arg(&root)
            .args([
                "--boot",
                "--register=no",
                "--keep-unit",
                "--console=pipe",
                "--quiet",
            ])
            // The container shares this network namespace (the veth, the
            // NATS server); nspawn grants CAP_NET_ADMIN and CAP_BPF only to
            // containers with their own, so they are granted here for the
            // unit to pass on.
            .arg("--capability=CAP_NET_ADMIN,CAP_BPF")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("systemd-nspawn starts"),
    );

    // The services' processes, as the kernel sees them.
    let sets = ["CapEff:", "CapPrm:", "CapAmb:", "CapBnd:"];
    let status = service_status(&root, "manager");
    assert_eq!(
        uids(&status),
        vec![uid; 4],
        "the manager's real, effective, saved and fs uid: the clarion user\n{status}"
    );
    for set in sets {
        assert_eq!(
            caps(&status, set),
            BTreeSet::new(),
            "{set} of the manager\n{status}"
        );
    }
    assert!(status.lines().any(|l| l == "NoNewPrivs:\t1"), "{status}");
    let status = service_status(&root, "agent");
    assert_eq!(
        uids(&status),
        vec![uid; 4],
        "real, effective, saved and fs uid: the clarion user\n{status}"
    );
    let granted: BTreeSet<u32> = [CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF].into();
    for set in sets {
        assert_eq!(caps(&status, set), granted, "{set} of the agent\n{status}");
    }
    assert!(status.lines().any(|l| l == "NoNewPrivs:\t1"), "{status}");

    // It captures: replay until the agent's event reports (it registers
    // with the manager first).
    let reports = root.join("var/lib/clarion/reports.jsonl");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        veth.replay(&capture);
        let text = std::fs::read_to_string(&reports).unwrap_or_default();
        if text.lines().count() > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no report from the service within 60 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_millis(300));
    let groups = |text: &str| -> BTreeSet<String> {
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|r| r["group"].to_string())
            .collect()
    };
    let live = groups(&std::fs::read_to_string(&reports).unwrap_or_default());
    let events = d.join("local.clarion");
    std::fs::write(&events, local).expect("events");
    let offline = run(
        clarion()
            .args(["run", "--quiet", "--format", "json", "--pcap"])
            .arg(&capture)
            .arg("--events")
            .arg(&events),
        "clarion run on the capture",
    );
    let reference = groups(&offline);

    // The manager (the agent registered with it): its store and its
    // token in its state directory, the token private, its API answering.
    use std::os::unix::fs::MetadataExt;
    let state = root.join("var/lib/clarion-manager");
    let store = std::fs::metadata(state.join("clarion-manager.sqlite")).expect("the manager's store");
    assert_eq!(store.uid(), uid);
    let token = state.join("api-token");
    let meta = std::fs::metadata(&token).expect("the API's token, made at the first start");
    assert_eq!((meta.uid(), meta.mode() & 0o777), (uid, 0o600));
    let hosts = run(
        clarion()
            .env_remove("CLARION_API_TOKEN")
            .args(["events", "--api", &format!("http://{api}"), "--token-file"])
            .arg(&token)
            .args(["hosts", "--json"]),
        "clarion events hosts, through the manager service's API",
    );
    let hosts: serde_json::Value = serde_json::from_str(&hosts).expect("hosts as JSON");
    assert!(
        hosts
            .as_array()
            .is_some_and(|h| h.iter().any(|h| h["name"] == "web-1" && h["state"] == "up")),
        "web-1 up: {hosts:#}"
    );

    assert!(!live.is_empty());
    assert!(
        live.is_subset(&reference),
        "every flow the service reports is one of the capture's: {:?}",
        live.difference(&reference).collect::<Vec<_>>()
    );
    eprintln!(
        "the service reported {} of the capture's {} flows",
        live.len(),
        reference.len()
    );
}

/// `(key, value)` of a unit file's `[Service]` section, in order.
fn service_settings(unit: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("packaging").join(unit)).expect("the unit");
    text.lines()
        .skip_while(|l| *l != "[Service]")
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Issue 37: the manager's unit has every protection of the agent's but
/// what capture needs, no capability, and its own state directory. Read
/// from the files (no root needed); the test above starts both.
#[test]
fn the_manager_unit_has_the_agents_protections_without_capture() {
    let agent = service_settings("clarion-agent.service");
    let manager = service_settings("clarion-manager.service");
    let get = |k: &str| -> Vec<&str> {
        manager
            .iter()
            .filter(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    // Capture's, or naming the agent's own command and directory.
    let the_agents = [
        "AmbientCapabilities",
        "CapabilityBoundingSet",
        "LimitMEMLOCK",
        "RestrictAddressFamilies",
        "StateDirectory",
        "WorkingDirectory",
        "ExecStart",
    ];
    for (k, v) in agent.iter().filter(|(k, _)| !the_agents.contains(&k.as_str())) {
        assert!(get(k).contains(&v.as_str()), "the manager's unit lacks {k}={v}");
    }
    assert_eq!(get("ExecStart"), ["/usr/bin/clarion manager"]);
    assert_eq!(get("CapabilityBoundingSet"), [""], "an empty bounding set");
    assert!(get("AmbientCapabilities").iter().all(|v| v.is_empty()));
    assert!(get("LimitMEMLOCK").is_empty());
    assert_eq!(get("StateDirectory"), ["clarion-manager"]);
    assert_eq!(get("WorkingDirectory"), ["/var/lib/clarion-manager"]);
    let families = get("RestrictAddressFamilies").join(" ");
    assert!(
        families.contains("AF_INET") && !families.contains("AF_PACKET") && !families.contains("AF_XDP"),
        "{families}"
    );
    assert!(
        get("Environment").contains(&"CLARION_API_TOKEN_FILE=/var/lib/clarion-manager/api-token"),
        "the token kept in the state directory"
    );
    let script = std::fs::read_to_string(repo().join("scripts/package-deb.sh")).expect("the script");
    assert!(
        script.contains("clarion-manager"),
        "scripts/package-deb.sh packs the unit"
    );
}
