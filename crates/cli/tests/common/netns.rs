//! Live tests' network: two namespaces joined by a veth pair, Clarion
//! run inside one, and `clarion collect` there. Needs root and `ip`;
//! without them `Net::new` says so and the test skips.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::repo;

/// `clarion collect` in namespace `ns` on a free loopback port, stopping
/// after `count` headers (or a minute); the process and its port.
pub fn collector(ns: &str, output: &Path, count: usize) -> (Child, u16) {
    super::collector_by(clarion_in(ns), output, count)
}

/// Clarion inside network namespace `ns`.
pub fn clarion_in(ns: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns])
        .arg(assert_cmd::cargo::cargo_bin("clarion"))
        .current_dir(repo());
    c
}

/// Whether tcpreplay is installed; if not, says the test is skipped.
pub fn tcpreplay() -> bool {
    let there = Command::new("tcpreplay").arg("-V").output().is_ok();
    if !there {
        eprintln!("skipped: tcpreplay is not installed (apt-get install tcpreplay)");
    }
    there
}

/// Reads a live run's standard error up to the line saying it captures on
/// `va` (warnings may come first); everything read, or a panic naming
/// `what` if it ended before.
pub fn capturing_on_va(err: &mut impl std::io::BufRead, what: &str) -> String {
    let mut said = String::new();
    while !said.contains("capturing on va") {
        let n = err.read_line(&mut said).expect("its first lines");
        assert!(n > 0, "{what}: ended before capturing: {said}");
    }
    said
}

/// Runs `f` on a thread moved into network namespace `ns` (e.g. to reach
/// a server Clarion serves on the namespace's loopback); `None` if the
/// thread could not enter it.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    use std::os::fd::AsRawFd;
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).ok()?;
        // SAFETY: a plain system call on a namespace file held open; it
        // moves only this thread, which ends with `f`.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return None;
        }
        Some(f())
    })
    .join()
    .ok()
    .flatten()
}

/// Two network namespaces of this test joined by a veth pair, `va` in `a`
/// (captured) and `vb` in `b` (replayed into), without addresses or IPv6.
/// Removed when dropped.
pub struct Net {
    pub a: String,
    pub b: String,
}

impl Net {
    /// `None`, saying why, when not root or without `ip` and namespaces.
    pub fn new(tag: &str) -> Option<Net> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || Command::new("ip").arg("-V").output().is_err() {
            eprintln!("skipped: needs root and ip (network namespaces and a veth pair)");
            return None;
        }
        let id = std::process::id() % 100_000;
        let net = Net {
            a: format!("clrx{tag}{id}a"),
            b: format!("clrx{tag}{id}b"),
        };
        if !(net.ip(&["netns", "add", &net.a]) && net.ip(&["netns", "add", &net.b])) {
            eprintln!("skipped: cannot create network namespaces");
            return None;
        }
        for ns in [&net.a, &net.b] {
            // Before the veth exists, so it never gets a link-local address.
            let quiet = Command::new("ip")
                .args(["netns", "exec", ns, "sysctl", "-qw"])
                .args([
                    "net.ipv6.conf.all.disable_ipv6=1",
                    "net.ipv6.conf.default.disable_ipv6=1",
                ])
                .status()
                .is_ok_and(|s| s.success());
            assert!(quiet, "IPv6 off in {ns}");
        }
        assert!(net.ip(&["-n", &net.a, "link", "set", "lo", "up"]), "lo up");
        assert!(net.pair("va", "vb"), "a veth pair between the namespaces");
        Some(net)
    }

    /// A veth pair, up: `va` in `a`, `vb` in `b`.
    pub fn pair(&self, va: &str, vb: &str) -> bool {
        let (a, b) = (self.a.as_str(), self.b.as_str());
        self.ip(&[
            "-n", a, "link", "add", va, "type", "veth", "peer", "name", vb, "netns", b,
        ]) && self.ip(&["-n", a, "link", "set", va, "up"])
            && self.ip(&["-n", b, "link", "set", vb, "up"])
    }

    /// Sends `capture` into `vb` from namespace `b` with tcpreplay, at a
    /// steady 10,000 frames a second, and waits until it has; panics,
    /// saying why and naming `what`, if it fails.
    pub fn replay(&self, capture: &Path, what: &str) {
        let replay = Command::new("ip")
            .args(["netns", "exec", &self.b, "tcpreplay", "-q", "-i", "vb"])
            .args(["--pps", "10000"])
            .arg(capture)
            .output()
            .expect("tcpreplay runs");
        assert!(
            replay.status.success(),
            "{what}: tcpreplay: {}",
            String::from_utf8_lossy(&replay.stderr)
        );
    }

    pub fn ip(&self, args: &[&str]) -> bool {
        Command::new("ip")
            .args(args)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.ip(&["netns", "del", &self.a]);
        self.ip(&["netns", "del", &self.b]);
    }
}
