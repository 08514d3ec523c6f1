//! The address plan: where flows live and which filters select them.
//!
//! # What?
//!
//! The synthesizer must promise two things about triggers it has never seen
//! traffic for: every packet matches exactly K of them, and together they
//! use exactly P distinct tuple-space patterns (a pattern is the set of
//! header bits a filter constrains: which fields, which prefix lengths).
//! Both follow from a plan the generator and the synthesizer share.
//!
//! # Groups
//!
//! Traffic is split into *groups*. Group `g` owns
//!
//! - a source block `10.0.0.0/8 + g·2^10`, a /22 (so at most
//!   [`MAX_GROUPS`] = 16,384 groups), whose first 64 addresses are the only
//!   ones used: hosts 0–31 send the ordinary flows, hosts 32–63 the attack
//!   flows;
//! - one destination host `172.16.0.0/12 + g·2^6 + 1`, alone in its /26;
//! - one protocol: UDP when `g mod 4 = 3`, else TCP;
//! - one destination port, `[80, 443, 8080, 53][g mod 4]`.
//!
//! Every flow belongs to one group; flows of a group differ in source host
//! and source port.
//!
//! # Patterns
//!
//! Each of these conditions selects exactly group `g`'s flows among all
//! flows of the plan, whatever other conditions it is joined with:
//!
//! - `src_ip in` the group's source block at any length 22–26 (the block is
//!   alone in its /22, and its flows all sit in its first /26);
//! - `dst_ip in` the group's destination host at any length 26–32;
//!
//! and these hold for every flow of the group:
//!
//! - `proto =` the group's protocol;
//! - `dst_port =` the group's port.
//!
//! A [`Pattern`] picks a source length or none, a destination length or
//! none (not both none), and whether to add the protocol and the port:
//! (6 × 8 − 1) × 2 × 2 = [`MAX_PATTERNS`] = 188 patterns. The filter of a
//! pattern for group `g` matches exactly the flows of group `g`, and two
//! patterns give two different tuple-space masks (the engine's index keys a
//! mask by exactly these choices). So a trigger is placed by choosing a
//! group (which flows it matches) and a pattern (which mask it adds)
//! independently; `triggers.rs` does the counting.
//!
//! [`patterns`] lists the patterns in a fixed order that varies the source
//! and destination lengths together, so the first few already mix fields.

use std::net::Ipv4Addr;

/// Most groups the plan has room for (source /22s in 10.0.0.0/8).
pub const MAX_GROUPS: u32 = 1 << 14;

/// Distinct filter patterns the plan can express.
pub const MAX_PATTERNS: usize = 188;

/// Source hosts per group for ordinary flows (and as many for attack flows).
pub const HOSTS: u32 = 32;

const SRC_BASE: u32 = 10 << 24;
const SRC_BLOCK_BITS: u32 = 10;
const DST_BASE: u32 = (172 << 24) | (16 << 16);
const DST_BLOCK_BITS: u32 = 6;

/// Source prefix lengths that select exactly one group.
pub const SRC_LENS: [u8; 5] = [22, 23, 24, 25, 26];
/// Destination prefix lengths that select exactly one group.
pub const DST_LENS: [u8; 7] = [26, 27, 28, 29, 30, 31, 32];

/// A group's transport protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    /// Its name in the event language.
    pub fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// The first address of group `g`'s source block.
pub fn src_block(g: u32) -> Ipv4Addr {
    Ipv4Addr::from(SRC_BASE + (g << SRC_BLOCK_BITS))
}

/// Source address of host `host` (0–63) of group `g`.
pub fn src_addr(g: u32, host: u32) -> Ipv4Addr {
    Ipv4Addr::from(SRC_BASE + (g << SRC_BLOCK_BITS) + (host % (2 * HOSTS)))
}

/// Group `g`'s one destination host.
pub fn dst_addr(g: u32) -> Ipv4Addr {
    Ipv4Addr::from(DST_BASE + (g << DST_BLOCK_BITS) + 1)
}

pub fn proto(g: u32) -> Proto {
    if g % 4 == 3 {
        Proto::Udp
    } else {
        Proto::Tcp
    }
}

pub fn dst_port(g: u32) -> u16 {
    [80, 443, 8080, 53][(g % 4) as usize]
}

/// Source port of the `n`-th flow of a kind: with the host `n mod 32`, unique
/// for the first 32 × 64,512 flows.
pub fn src_port(n: u64) -> u16 {
    1024 + ((n / u64::from(HOSTS)) % 64_512) as u16
}

/// Which header bits a filter constrains. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pattern {
    pub src_len: Option<u8>,
    pub dst_len: Option<u8>,
    pub proto: bool,
    pub dst_port: bool,
}

fn masked(a: Ipv4Addr, len: u8) -> Ipv4Addr {
    let mask = if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    };
    Ipv4Addr::from(u32::from(a) & mask)
}

impl Pattern {
    /// The `filter` conditions (without the keyword) selecting group `g`.
    pub fn filter(&self, g: u32) -> String {
        let mut conds = Vec::with_capacity(4);
        if let Some(l) = self.src_len {
            conds.push(format!("src_ip in {}/{l}", masked(src_block(g), l)));
        }
        if let Some(l) = self.dst_len {
            conds.push(format!("dst_ip in {}/{l}", masked(dst_addr(g), l)));
        }
        if self.proto {
            conds.push(format!("proto = {}", proto(g).name()));
        }
        if self.dst_port {
            conds.push(format!("dst_port = {}", dst_port(g)));
        }
        conds.join(" and ")
    }
}

/// All [`MAX_PATTERNS`] patterns, in the order the synthesizer uses them.
pub fn patterns() -> Vec<Pattern> {
    // Address choices, most common first; index 0 of each is "none" only for dst.
    let src: Vec<Option<u8>> = [Some(24), Some(22), Some(26), Some(23), Some(25), None].into();
    let dst: Vec<Option<u8>> = [
        None,
        Some(32),
        Some(26),
        Some(28),
        Some(30),
        Some(27),
        Some(29),
        Some(31),
    ]
    .into();
    let mut addr = Vec::with_capacity(src.len() * dst.len());
    // Diagonals: (0,0), (0,1), (1,0), (0,2), (1,1), (2,0), ...
    for d in 0..src.len() + dst.len() - 1 {
        for (i, s) in src.iter().enumerate() {
            let Some(j) = d.checked_sub(i) else { continue };
            if let Some(t) = dst.get(j) {
                if s.is_some() || t.is_some() {
                    addr.push((*s, *t));
                }
            }
        }
    }
    let mut out = Vec::with_capacity(MAX_PATTERNS);
    for (src_len, dst_len) in addr {
        for (proto, dst_port) in [(false, false), (true, false), (false, true), (true, true)] {
            out.push(Pattern {
                src_len,
                dst_len,
                proto,
                dst_port,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_distinct_and_complete() {
        let p = patterns();
        assert_eq!(p.len(), MAX_PATTERNS);
        let set: std::collections::HashSet<_> = p.iter().collect();
        assert_eq!(set.len(), MAX_PATTERNS);
        assert!(p.iter().all(|p| p.src_len.is_some() || p.dst_len.is_some()));
        assert_eq!(p[0].src_len, Some(24));
        assert!(p.iter().all(|p| p.src_len.is_none_or(|l| SRC_LENS.contains(&l))));
        assert!(p.iter().all(|p| p.dst_len.is_none_or(|l| DST_LENS.contains(&l))));
    }

    #[test]
    fn addresses() {
        assert_eq!(src_block(0), Ipv4Addr::new(10, 0, 0, 0));
        assert_eq!(src_block(1), Ipv4Addr::new(10, 0, 4, 0));
        assert_eq!(src_block(MAX_GROUPS - 1), Ipv4Addr::new(10, 255, 252, 0));
        assert_eq!(src_addr(1, 33), Ipv4Addr::new(10, 0, 4, 33));
        assert_eq!(dst_addr(0), Ipv4Addr::new(172, 16, 0, 1));
        assert_eq!(dst_addr(MAX_GROUPS - 1), Ipv4Addr::new(172, 31, 255, 193));
        let p = Pattern {
            src_len: Some(23),
            dst_len: Some(27),
            proto: true,
            dst_port: true,
        };
        assert_eq!(
            p.filter(7),
            "src_ip in 10.0.28.0/23 and dst_ip in 172.16.1.192/27 and proto = udp and dst_port = 53"
        );
    }
}
