//! Loading the shared real captures for the integration tests and benches.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use clarion_capture::{CaptureFile, PacketSource};
use clarion_wire::{parse_frame, PacketRecord};

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

/// Every capture file in the directory, sorted by name.
pub fn capture_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("captures directory")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    v.sort();
    v
}

/// Every frame of the file that parses as IP, in file order.
pub fn load(path: &Path) -> Vec<PacketRecord> {
    let mut src = CaptureFile::open(path).expect("open capture");
    let mut out = Vec::new();
    while let Some(r) = src.next_packet() {
        let Ok(p) = r else { continue };
        if let Ok(rec) = parse_frame(p.link, p.data, p.ts_ns, p.orig_len) {
            out.push(rec);
        }
    }
    out
}
