//! Running the page's TypeScript modules in Node (console/test/*.mjs
//! bundles them with esbuild): skipped, saying why, without Node or
//! console/node_modules.
#![allow(dead_code)] // each test file uses part of it

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub fn console_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../console")
}

/// `node console/test/SCRIPT` with `input` on its standard input: its
/// standard output, or `None` having said why the test is skipped.
pub fn run_node(script: &str, input: &str) -> Option<String> {
    if !Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("skipped: node is not installed (Node.js 20 or later, with npm)");
        return None;
    }
    if !console_dir().join("node_modules/esbuild").is_dir() {
        eprintln!(
            "skipped: console/node_modules is missing (run `npm ci` in console/; scripts/test.sh does)"
        );
        return None;
    }
    let mut child = Command::new("node")
        .arg(console_dir().join("test").join(script))
        .current_dir(console_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_string();
    // Written from a thread: a large input must not block on a full pipe while node writes.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("node runs");
    writer.join().expect("writer").expect("input written");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).expect("UTF-8"))
}

/// A tiny deterministic generator (the cases must be the same on every run).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n.max(1)
    }
}
