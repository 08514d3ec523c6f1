//! The shared real captures (`../shared/captures`, beside the checkout)
//! for tests and benches, read one way everywhere.
//!
//! A missing directory or tool is not a failure: the caller gets nothing
//! (or `false`) and a line on standard error saying what is skipped and
//! why, as every test of the workspace does. Panics on a capture that
//! cannot be read: test data that is there must be good.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clarion_capture::{CaptureFile, PacketSource};
use clarion_wire::{parse_frame, LinkType, PacketRecord};

/// The shared captures directory, or `None` (after saying so) when absent.
pub fn captures_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("skipped: no captures at {}", dir.display());
        None
    }
}

/// Every shared capture (pcap and pcapng), sorted by name; empty (after
/// saying so) when there are none.
pub fn capture_files() -> Vec<PathBuf> {
    captures_dir().map_or_else(Vec::new, |dir| captures_in(&dir))
}

/// The captures (pcap and pcapng) of a directory, sorted by name.
pub fn captures_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    v.sort();
    v
}

/// One shared capture by file name, or `None` (after saying so).
pub fn capture(name: &str) -> Option<PathBuf> {
    let path = captures_dir()?.join(name);
    if path.is_file() {
        Some(path)
    } else {
        eprintln!("skipped: no capture {}", path.display());
        None
    }
}

/// The file name of a capture, for messages.
pub fn name(path: &Path) -> String {
    path.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

/// One frame as read, with its packet when it parses as IP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub ts_ns: u64,
    pub link: LinkType,
    pub data: Vec<u8>,
    pub orig_len: u32,
    pub record: Option<PacketRecord>,
}

/// Every frame of a capture, in file order (frames the reader skips,
/// such as an unsupported pcapng interface's, are left out).
pub fn frames(path: &Path) -> Vec<Frame> {
    let mut src = CaptureFile::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(r) = src.next_packet() {
        let Ok(p) = r else { continue };
        out.push(Frame {
            ts_ns: p.ts_ns,
            link: p.link,
            data: p.data.to_vec(),
            orig_len: p.orig_len,
            record: parse_frame(p.link, p.data, p.ts_ns, p.orig_len).ok(),
        });
    }
    out
}

/// Every frame of a capture that parses as IP, as `clarion run` parses it.
pub fn records(path: &Path) -> Vec<PacketRecord> {
    frames(path).into_iter().filter_map(|f| f.record).collect()
}

/// Whether `tool` runs (`tool ARG`); says which test skips and why when not.
pub fn require_tool(tool: &str, arg: &str, package: &str) -> bool {
    let ok = Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !ok {
        eprintln!("skipped: {tool} is not installed (apt-get install {package})");
    }
    ok
}
