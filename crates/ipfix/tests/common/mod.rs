//! Helpers of the IPFIX tests: flow records folded from a real capture
//! (a plain per-key fold, independent of the flow meter), external tools
//! and a child process killed when dropped.

#![allow(dead_code)] // Each test file uses its own part.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use clarion_capture::{CaptureFile, PacketSource};
use clarion_records::FlowRecord;
use clarion_wire::parse_frame;

/// Writes `records` to a UDP sink paced (a pause every 64 records, about
/// five datagrams), so that the receiving socket's buffer never
/// overflows however busy the machine: a datagram lost on loopback would
/// fail a test of what was sent.
pub fn write_paced(sink: &mut clarion_ipfix::IpfixSink, records: &[FlowRecord]) {
    use clarion_sinks::Sink;
    for (i, r) in records.iter().enumerate() {
        sink.write(r).expect("the sink takes the record");
        if i % 64 == 63 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// A real capture, or `None` (the test says it is skipped).
pub fn capture(name: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/captures")
        .join(name);
    if path.exists() {
        Some(path)
    } else {
        eprintln!("skipped: no capture at {}", path.display());
        None
    }
}

/// One record per flow key over the whole capture, in order of first packet.
pub fn flows_of(path: &Path) -> Vec<FlowRecord> {
    let mut src = CaptureFile::open(path).expect("the capture opens");
    let mut order = Vec::new();
    let mut flows: HashMap<clarion_wire::FlowKey, FlowRecord> = HashMap::new();
    while let Some(p) = src.next_packet() {
        let p = p.expect("a packet reads");
        let Ok(rec) = parse_frame(p.link, p.data, p.ts_ns, p.orig_len) else {
            continue;
        };
        let flags = rec.tcp.map_or(0, |t| t.flags);
        let one = FlowRecord::of_packet(rec.key, rec.ts_ns, rec.size, flags);
        match flows.get_mut(&rec.key) {
            Some(f) => f.merge(&one),
            None => {
                order.push(rec.key);
                flows.insert(rec.key, one);
            }
        }
    }
    order.iter().map(|k| flows[k]).collect()
}

/// The path of an installed tool, or `None` after saying the test is skipped.
pub fn require(tool: &str, package: &str) -> Option<PathBuf> {
    for dir in std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
    {
        let p = Path::new(dir).join(tool);
        if p.is_file() {
            return Some(p);
        }
    }
    eprintln!("skipped: {tool} is not installed (apt-get install {package})");
    None
}

/// A free UDP port on 127.0.0.1 (free when asked).
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .expect("a loopback UDP socket")
        .local_addr()
        .expect("a bound socket's address")
        .port()
}

/// Waits until something holds UDP `port` on 127.0.0.1 (a collector is up).
pub fn wait_for_udp_listener(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
        assert!(Instant::now() < deadline, "nothing listens on UDP port {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills the child when dropped (a failed assertion leaves no process behind).
pub struct Guard(pub Option<Child>);

impl Guard {
    /// SIGTERM (a clean stop, which makes nfcapd write its file) and wait.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let mut child = self.0.take().expect("the guard holds its child");
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(s) = child.try_wait().expect("waiting for the child") {
                return s;
            }
            assert!(Instant::now() < deadline, "the child did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
