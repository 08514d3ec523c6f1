//! `clarion-lab thrash`: a co-runner that thrashes the shared cache, as in
//! MONA's contention experiment (§VI-A, after Dobrescu et al.): processes
//! on the other cores that only fetch table entries, to push the monitor's
//! own entries out of the L3.
//!
//! # Design
//!
//! Each thread owns a buffer of `--bytes` (several times the L3) cut into
//! 64-byte lines, and the lines hold one random cycle through all of them
//! (Sattolo's algorithm: a uniformly random cyclic permutation, so the
//! chase visits every line before repeating). Following the cycle is a
//! chain of *dependent* loads: the next address is the value just loaded,
//! so the prefetchers cannot guess it and the core cannot overlap misses;
//! with the buffer far over the L3, nearly every access misses it and goes
//! to memory, evicting a line of whoever shares the cache.
//!
//! # Cost
//!
//! Building the cycle writes every line once (about 1 s per GiB); the
//! chase is one load per access. The clock and the stop flag are read
//! every [`BATCH`] accesses (well under a millisecond at memory latency),
//! so SIGINT, SIGTERM and `--seconds` stop it promptly.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use clap::Args;
use rand_core::{Rng as _, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::args::parse_duration;
use crate::{thousands, Failure};

/// Accesses between two looks at the clock and the stop flag.
const BATCH: u64 = 4096;

/// A cache line: the index of the next line in the cycle, and padding.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line {
    next: usize,
    _pad: [u64; 7],
}

const LINE: u64 = std::mem::size_of::<Line>() as u64;

#[derive(Args, Debug, Clone)]
pub struct ThrashArgs {
    /// Buffer per thread (e.g. 64MiB, 1GiB, 500MB): several times the L3.
    #[arg(long, default_value = "64MiB", value_parser = parse_bytes)]
    pub bytes: u64,

    /// Run this long (a bare number: seconds; or 500ms, 2m), unless SIGINT or SIGTERM come first.
    #[arg(long, default_value = "10", value_parser = parse_duration, value_name = "DURATION")]
    pub seconds: u64,

    /// Threads, each chasing its own buffer (one co-runner each).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub threads: u32,

    /// Seed of the random cycles (thread i uses seed + i).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Print the result as one JSON object on standard output.
    #[arg(long)]
    pub json: bool,
}

/// Parses `64MiB`, `1GiB`, `512KiB`, `500MB`, `4096` (bytes): K, M, G and
/// KiB, MiB, GiB are powers of 1024; KB, MB, GB powers of 1000.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size; write e.g. 64MiB or 1GiB"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        u => {
            return Err(format!(
                "unknown unit `{u}` in `{s}`; use B, KiB, MiB, GiB, KB, MB or GB"
            ))
        }
    };
    n.checked_mul(mult).ok_or_else(|| format!("`{s}` is too large"))
}

pub fn thrash(a: &ThrashArgs) -> Result<ExitCode, Failure> {
    let lines = a.bytes / LINE;
    if lines < 2 {
        return Err(Failure::Usage(format!(
            "clarion-lab: --bytes must hold at least two 64-byte lines, not {} B",
            a.bytes
        )));
    }
    if a.threads == 0 {
        return Err(Failure::Usage("clarion-lab: --threads must be at least 1".into()));
    }
    let lines = usize::try_from(lines).map_err(|_| anyhow!("--bytes is too large for this machine"))?;
    if let Some(l3) = l3_bytes() {
        if a.bytes < 4 * l3 {
            eprintln!(
                "clarion-lab: warning: --bytes {} is under 4x the L3 ({} KiB): many accesses will hit",
                a.bytes,
                l3 / 1024
            );
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("cannot install the signal handlers")?;
    }
    let deadline = Instant::now() + Duration::from_nanos(a.seconds);
    let ready = Barrier::new(a.threads as usize);
    let results: Vec<(u64, Duration)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..a.threads)
            .map(|i| {
                let (stop, ready) = (&stop, &ready);
                let seed = a.seed.wrapping_add(u64::from(i));
                s.spawn(move || {
                    let buf = cycle(lines, seed);
                    if ready.wait().is_leader() {
                        eprintln!(
                            "clarion-lab thrash: chasing {} thread(s) x {} MiB",
                            a.threads,
                            a.bytes >> 20
                        );
                    }
                    chase(&buf, stop, deadline)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect::<Result<_, _>>()
    })
    .map_err(|_| anyhow!("a thrashing thread panicked"))?;
    let accesses: u64 = results.iter().map(|r| r.0).sum();
    let secs = results.iter().map(|r| r.1.as_secs_f64()).fold(0.0, f64::max);
    let per_s = if secs > 0.0 { accesses as f64 / secs } else { 0.0 };
    let ns_per = results
        .iter()
        .map(|(n, d)| {
            if *n > 0 {
                d.as_nanos() as f64 / *n as f64
            } else {
                0.0
            }
        })
        .sum::<f64>()
        / results.len() as f64;
    if a.json {
        let o = serde_json::json!({
            "threads": a.threads,
            "bytes_per_thread": a.bytes,
            "seconds": secs,
            "accesses": accesses,
            "accesses_per_s": per_s,
            "ns_per_access": ns_per,
            "stopped_by_signal": stop.load(Ordering::Relaxed),
        });
        println!("{o}");
    } else {
        println!(
            "{} accesses/s ({} thread(s) x {} B, {:.2} s, {:.1} ns per access per thread)",
            thousands(per_s as u64),
            a.threads,
            thousands(a.bytes),
            secs,
            ns_per
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `n` lines holding one random cycle through all of them (Sattolo).
fn cycle(n: usize, seed: u64) -> Vec<Line> {
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    let mut v: Vec<Line> = (0..n)
        .map(|i| Line {
            next: i,
            _pad: [0; 7],
        })
        .collect();
    for i in (1..n).rev() {
        // j uniform in 0..i (never i): the permutation stays one cycle.
        let j = ((u128::from(rng.next_u64()) * i as u128) >> 64) as usize;
        let (a, b) = (v[i].next, v[j].next);
        v[i].next = b;
        v[j].next = a;
    }
    v
}

/// Follows the cycle until `stop` or `deadline`; returns the accesses made
/// and the time taken.
fn chase(buf: &[Line], stop: &AtomicBool, deadline: Instant) -> (u64, Duration) {
    let began = Instant::now();
    let mut at = 0usize;
    let mut accesses = 0u64;
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        for _ in 0..BATCH {
            at = buf[at].next; // the next address is the value loaded: no overlap
        }
        accesses += BATCH;
    }
    std::hint::black_box(at);
    (accesses, began.elapsed())
}

/// The L3 size as the kernel reports it (`/sys/.../index3/size`, e.g. `32768K`).
fn l3_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index3/size").ok()?;
    parse_bytes(s.trim()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("32768K"), Ok(32 << 20));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("500MB"), Ok(500_000_000));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("64XB").is_err());
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("99999999999999999999G").is_err());
    }

    #[test]
    fn the_chain_is_one_cycle_through_every_line() {
        for (n, seed) in [(2, 1), (3, 9), (1000, 7), (65_537, 3)] {
            let v = cycle(n, seed);
            let mut seen = vec![false; n];
            let mut at = 0;
            for _ in 0..n {
                assert!(!seen[at], "line {at} visited twice before the cycle closed");
                seen[at] = true;
                at = v[at].next;
            }
            assert_eq!(at, 0, "back at the start after n steps");
            assert!(seen.iter().all(|s| *s));
        }
    }

    #[test]
    fn a_line_is_a_cache_line() {
        assert_eq!(LINE, 64);
        assert_eq!(std::mem::align_of::<Line>(), 64);
    }
}
