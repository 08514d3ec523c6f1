//! Helpers every CLI test file needs: the repository root and the
//! `clarion` binary run from it. Each test file is its own crate and uses
//! some of them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The repository root, where `examples/` and `scripts/` are.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `clarion`, run from the repository root, for commands that end.
pub fn clarion() -> assert_cmd::Command {
    let mut c = assert_cmd::Command::cargo_bin("clarion").expect("binary builds");
    c.current_dir(repo());
    c
}

/// `clarion` as a process to spawn and drive, run from the repository root.
pub fn clarion_process() -> std::process::Command {
    let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("clarion"));
    c.current_dir(repo());
    c
}

/// A finished command's standard error, as text.
pub fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every frame of a capture that parses, as `clarion run` parses it (the
/// capture must be undamaged).
pub fn load(path: &Path) -> Vec<clarion_wire::PacketRecord> {
    use clarion_capture::PacketSource;
    let mut src = clarion_capture::CaptureFile::open(path).expect("open capture");
    let mut out = Vec::new();
    while let Some(r) = src.next_packet() {
        let p = r.expect("undamaged capture");
        if let Ok(rec) = clarion_wire::parse_frame(p.link, p.data, p.ts_ns, p.orig_len) {
            out.push(rec);
        }
    }
    out
}
pub mod metrics;
pub mod netns;

/// `clarion collect` (run by `clarion`, e.g. inside a namespace) on a free
/// loopback port, stopping after `count` headers (or a minute); the
/// process and its port.
pub fn collector_by(
    mut clarion: std::process::Command,
    output: &Path,
    count: usize,
) -> (std::process::Child, u16) {
    clarion
        // Untagged datagrams: the exporters of these tests run without
        // --export-key (tests/collect_identity.rs checks keys).
        .args([
            "collect",
            "--insecure",
            "--listen",
            "127.0.0.1:0",
            "--duration",
            "60s",
        ])
        .arg("--count")
        .arg(count.to_string())
        .arg("-o")
        .arg(output);
    collecting(clarion)
}

/// `collect`, a `clarion collect` command listening on `127.0.0.1:0`,
/// started: the process and the port it says it listens on.
pub fn collecting(mut collect: std::process::Command) -> (std::process::Child, u16) {
    use std::io::{BufRead, BufReader};
    let mut child = collect
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("clarion collect starts");
    let mut line = String::new();
    BufReader::new(child.stderr.as_mut().expect("its stderr"))
        .read_line(&mut line)
        .expect("its first line");
    // "clarion: collecting headers on 127.0.0.1:PORT (receive buffer ...)"
    let port = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("127.0.0.1:"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    (child, port)
}

/// A tool on PATH or in /usr/sbin, /usr/bin (Debian's places).
pub fn tool(name: &str) -> Option<PathBuf> {
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if out.status.success() && !path.is_empty() {
        return Some(PathBuf::from(path));
    }
    ["/usr/sbin", "/usr/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// SO_RCVBUFFORCE (root) or SO_RCVBUF (up to rmem_max) of 8 MiB: a burst
/// of syslog datagrams could overflow the default buffer on a busy machine.
pub fn grow_receive_buffer(sock: &std::net::UdpSocket) {
    use std::os::fd::AsRawFd;
    let size: libc::c_int = 8 << 20;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: a valid socket, a pointer to a c_int and its length.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return;
        }
    }
}
