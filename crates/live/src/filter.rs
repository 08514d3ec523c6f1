//! Classic BPF programs attached to a packet socket: the snap length
//! alone, or a tcpdump-syntax capture filter.
//!
//! The filter is compiled by tcpdump itself (`tcpdump -ddd`, i.e. libpcap's
//! compiler), so its syntax and meaning are exactly tcpdump's, and Clarion
//! links no C library. The kernel runs the program before a packet enters
//! the ring: rejected packets cost nothing, and the program's return value
//! (the snap length) truncates the rest.

use std::process::Command;

use clarion_wire::LinkType;

use crate::LiveError;

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// `ret #k`.
const BPF_RET_K: u16 = 0x06;

/// A program that accepts every packet and keeps its first `snaplen` bytes.
pub fn snap_only(snaplen: u32) -> Vec<Insn> {
    vec![Insn {
        code: BPF_RET_K,
        jt: 0,
        jf: 0,
        k: snaplen,
    }]
}

/// Compiles a tcpdump expression for frames of `link`, keeping `snaplen` bytes of accepted packets.
pub fn compile(expr: &str, link: LinkType, snaplen: u32) -> Result<Vec<Insn>, LiveError> {
    let fail = |why: String| LiveError::Filter {
        filter: expr.to_string(),
        why,
    };
    let dlt = match link {
        LinkType::Ethernet => "EN10MB",
        LinkType::RawIp => "RAW",
        other => return Err(fail(format!("no filter compiler for link type {other:?}"))),
    };
    let out = Command::new("tcpdump")
        .args(["-ddd", "-y", dlt, "-s", &snaplen.to_string(), "--", expr])
        .output()
        .map_err(|e| {
            fail(format!(
                "cannot run tcpdump to compile it ({e}); install it (apt-get install tcpdump) or omit --filter"
            ))
        })?;
    if !out.status.success() {
        let msg = String::from_utf8_lossy(&out.stderr);
        let msg = msg.trim().trim_start_matches("tcpdump: ");
        return Err(fail(msg.to_string()));
    }
    parse_ddd(&String::from_utf8_lossy(&out.stdout)).map_err(fail)
}

/// Parses `tcpdump -ddd` output: a count, then one `code jt jf k` line per instruction.
pub fn parse_ddd(text: &str) -> Result<Vec<Insn>, String> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let n: usize = lines
        .next()
        .and_then(|l| l.parse().ok())
        .ok_or("tcpdump printed no instruction count")?;
    let mut prog = Vec::with_capacity(n);
    for line in lines {
        let f: Vec<&str> = line.split_whitespace().collect();
        let insn = match f.as_slice() {
            [code, jt, jf, k] => (|| {
                Some(Insn {
                    code: code.parse().ok()?,
                    jt: jt.parse().ok()?,
                    jf: jf.parse().ok()?,
                    k: k.parse().ok()?,
                })
            })(),
            _ => None,
        };
        prog.push(insn.ok_or_else(|| format!("cannot read tcpdump's instruction `{line}`"))?);
    }
    if prog.len() != n || n == 0 || n > 4096 {
        return Err(format!(
            "tcpdump announced {n} instructions and printed {}",
            prog.len()
        ));
    }
    Ok(prog)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tcpdump_ddd_output() {
        let p = parse_ddd("3\n40 0 0 12\n21 0 1 2048\n6 0 0 256\n").expect("valid");
        assert_eq!(p.len(), 3);
        assert_eq!(
            p[1],
            Insn {
                code: 21,
                jt: 0,
                jf: 1,
                k: 2048
            }
        );
        assert!(parse_ddd("2\n40 0 0 12\n").is_err(), "count mismatch");
        assert!(parse_ddd("1\n40 x 0 12\n").is_err());
        assert!(parse_ddd("").is_err());
        assert_eq!(
            snap_only(96),
            vec![Insn {
                code: 6,
                jt: 0,
                jf: 0,
                k: 96
            }]
        );
    }

    #[test]
    fn compiles_with_tcpdump_and_reports_its_error() {
        if Command::new("tcpdump").arg("--version").output().is_err() {
            eprintln!("skipped: tcpdump is not installed");
            return;
        }
        let p = compile("tcp port 80", LinkType::Ethernet, 256).expect("compiles");
        assert!(p.len() > 3);
        assert!(p.iter().any(|i| i.code == BPF_RET_K && i.k == 256), "{p:?}");
        let e = compile("tcp port 99999", LinkType::Ethernet, 256).expect_err("bad port");
        assert!(e.to_string().contains("illegal port number"), "{e}");
    }
}
