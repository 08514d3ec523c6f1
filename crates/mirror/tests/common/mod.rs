//! Shared by the tool tests: real frames, the inner frames they must
//! become (built here independently of the crate), and a tcpdump process.

#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use clarion_capture::{open, PacketSource};
use clarion_wire::LinkType;

#[allow(unused_imports)]
pub use clarion_testdata::captures_dir;

/// Whether `tool` runs; says which test skips and why when it does not.
pub fn require(tool: &str, package: &str) -> bool {
    clarion_testdata::require_tool(tool, "--version", package)
}

/// Up to `n` frames of a shared capture.
pub fn frames(dir: &Path, name: &str, n: usize) -> Vec<(LinkType, Vec<u8>)> {
    let mut f = open(&dir.join(name)).unwrap();
    let mut out = Vec::new();
    while let Some(p) = f.next_packet() {
        let p = p.unwrap();
        out.push((p.link, p.data.to_vec()));
        if out.len() == n {
            break;
        }
    }
    out
}

/// The inner Ethernet frame a mirrored frame must arrive as: an Ethernet
/// frame itself; a raw IP packet behind the documented synthetic header.
pub fn expected_inner(link: LinkType, frame: &[u8]) -> Vec<u8> {
    match link {
        LinkType::Ethernet => frame.to_vec(),
        LinkType::RawIp => {
            let mut f = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01];
            f.extend_from_slice(if frame[0] >> 4 == 6 {
                &[0x86, 0xdd]
            } else {
                &[0x08, 0x00]
            });
            f.extend_from_slice(frame);
            f
        }
        other => panic!("no reference for {other:?}"),
    }
}

/// A tcpdump writing a pcap, stopped (SIGINT, by its pid) on drop.
pub struct Tcpdump {
    child: Child,
}

impl Tcpdump {
    /// Starts `tcpdump -U -n -w FILE <args>` (under `ip netns exec NS`
    /// when given) and waits until it listens; `None` (with the reason
    /// printed) when it cannot capture.
    pub fn start(netns: Option<&str>, args: &[&str], file: &Path) -> Option<Tcpdump> {
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "tcpdump"]);
                c
            }
            None => Command::new("tcpdump"),
        };
        cmd.args(["-U", "-n", "-B", "16384", "-w"]).arg(file).args(args);
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().ok()?;
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).ok()?;
        if !line.contains("listening on") {
            eprintln!("skipped: tcpdump cannot capture (not root?): {line}");
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        // Keep draining its stderr so it never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while err.read_line(&mut sink).is_ok_and(|n| n > 0) {
                sink.clear();
            }
        });
        Some(Tcpdump { child })
    }

    /// Waits for it to exit by itself (started with `-c N`: it exits once
    /// it has written N packets), for up to `secs` seconds, then stops it.
    /// Stopping it early with SIGINT would lose the packets of its ring
    /// block not yet handed over (up to a second's worth), and immediate
    /// mode, which avoids that, drops packets under load.
    pub fn wait(mut self, secs: u64) {
        for _ in 0..secs * 10 {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        eprintln!("tcpdump did not see every packet in {secs} s: stopping it");
        self.interrupt();
    }

    fn interrupt(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        let _ = self.child.wait();
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.interrupt();
        }
    }
}
