//! The classification key: seven fields packed in three words.
//!
//! # Design
//!
//! Every classifier here works on values under bit masks, so the key is a
//! plain bit string that masks with one AND per word and hashes as three
//! words:
//!
//! | field | bits | word | meaning |
//! |---|---|---|---|
//! | family | 1 | 2 | 0 IPv4, 1 IPv6 |
//! | src_ip, dst_ip | 128 each | 0, 1 | IPv4 LEFT-aligned in the top 32 bits |
//! | src_port, dst_port | 17 each | 2 | `0x1_0000` = the packet has no ports |
//! | proto | 8 | 2 | IP protocol |
//! | vlan | 13 | 2 | `0x1000` = untagged |
//!
//! Left-aligning IPv4 lets one sub-prefix (the top 16 bits) index both
//! families in USS's mask arrays. The out-of-range values for "no ports" and
//! "untagged" make the language's rules fall out of plain prefix matching: a
//! port or VLAN condition is a prefix whose top bit is 0, which the marker
//! value (top bit 1) never matches.
//!
//! # Invariants
//!
//! - Bits outside the fields of word 2 are always zero (keys and masks).
//! - A mask is, per field, a prefix mask (leading ones), so a field's mask
//!   is fully described by its length ([`Key::lens`]).
//!
//! # Cost
//!
//! Building a key from a [`FlowKey`] is a few shifts; masking is three ANDs;
//! hashing feeds three words to the hasher.

use clarion_wire::FlowKey;

/// Field indices, in the order used by every per-field array.
pub const FAMILY: usize = 0;
pub const SRC_IP: usize = 1;
pub const DST_IP: usize = 2;
pub const SRC_PORT: usize = 3;
pub const DST_PORT: usize = 4;
pub const PROTO: usize = 5;
pub const VLAN: usize = 6;
/// Number of fields.
pub const NFIELDS: usize = 7;

/// The port value of a packet without ports (ICMP, later fragments).
pub const NO_PORTS: u128 = 0x1_0000;
/// The VLAN value of an untagged packet.
pub const UNTAGGED: u128 = 0x1000;

/// Where a field sits and how wide it is; `sub_bits` is USS's sub-prefix
/// width (the number of leading bits indexing its mask array).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FieldDesc {
    pub word: usize,
    pub shift: u32,
    pub width: u32,
    pub sub_bits: u32,
}

/// Trident's sub-prefix sizes adapted to our widths: 16 bits of each
/// address (as the paper); 9 of the 17-bit ports (the paper's 8 over 16
/// bits, plus the no-ports bit); the whole of the narrow fields (protocol,
/// VLAN, family), whose arrays are then exact and still small (8 Ki entries
/// at most). Total: 2×64 Ki + 2×512 + 256 + 8 Ki + 2 cells; `uss.rs`
/// stores the narrow fields' cells as ready masks (8 bytes, the VLAN's 2),
/// ≈ 156 KiB a protocol group (the uniflow cache keeps 8 groups).
pub(crate) const FIELDS: [FieldDesc; NFIELDS] = [
    FieldDesc {
        word: 2,
        shift: 55,
        width: 1,
        sub_bits: 1,
    },
    FieldDesc {
        word: 0,
        shift: 0,
        width: 128,
        sub_bits: 16,
    },
    FieldDesc {
        word: 1,
        shift: 0,
        width: 128,
        sub_bits: 16,
    },
    FieldDesc {
        word: 2,
        shift: 38,
        width: 17,
        sub_bits: 9,
    },
    FieldDesc {
        word: 2,
        shift: 21,
        width: 17,
        sub_bits: 9,
    },
    FieldDesc {
        word: 2,
        shift: 13,
        width: 8,
        sub_bits: 8,
    },
    FieldDesc {
        word: 2,
        shift: 0,
        width: 13,
        sub_bits: 13,
    },
];

/// The all-ones value of a field `width` bits wide.
#[inline]
pub(crate) const fn ones(width: u32) -> u128 {
    if width >= 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    }
}

/// The leading `len` bits of a `width`-bit field, as a field value.
#[inline]
pub(crate) const fn prefix_bits(width: u32, len: u32) -> u128 {
    if len == 0 {
        0
    } else {
        ones(width) & !ones(width - len)
    }
}

/// A packed key, or a mask over one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Key {
    pub(crate) w: [u128; 3],
}

impl Key {
    /// The all-zero key (as a mask: everything wildcarded).
    pub const ZERO: Key = Key { w: [0; 3] };

    /// The classification key of a parsed packet.
    ///
    /// Word 2 is assembled in one go from the fields' constant shifts
    /// rather than field by field with [`Key::set`]: this runs once per
    /// packet ahead of every fast path, and the generic form cost about
    /// 50 instructions of 128-bit shifts and masks (callgrind).
    #[inline]
    pub fn from_flow(k: &FlowKey) -> Key {
        let v6 = k.is_ipv6();
        // IPv4 sits in the first 4 bytes, i.e. the top 32 bits already; the
        // rest is zero by FlowKey's contract, cleared to be sure.
        let ip_mask = if v6 { u128::MAX } else { prefix_bits(128, 32) };
        let (sp, dp) = if k.has_ports() {
            (u64::from(k.src_port), u64::from(k.dst_port))
        } else {
            (NO_PORTS as u64, NO_PORTS as u64)
        };
        let vlan = if k.has_vlan() {
            u64::from(k.vlan & 0x0fff)
        } else {
            UNTAGGED as u64
        };
        // Every value fits its field (ports 17 bits, VLAN 13, protocol 8,
        // family 1), so no per-field masking is needed.
        let w2 = (u64::from(v6) << FIELDS[FAMILY].shift)
            | (sp << FIELDS[SRC_PORT].shift)
            | (dp << FIELDS[DST_PORT].shift)
            | (u64::from(k.proto) << FIELDS[PROTO].shift)
            | (vlan << FIELDS[VLAN].shift);
        Key {
            w: [
                u128::from_be_bytes(k.src_ip) & ip_mask,
                u128::from_be_bytes(k.dst_ip) & ip_mask,
                u128::from(w2),
            ],
        }
    }

    /// Field `f`'s value.
    #[inline]
    pub fn get(&self, f: usize) -> u128 {
        let d = FIELDS[f];
        (self.w[d.word] >> d.shift) & ones(d.width)
    }

    /// Sets field `f` (the value is truncated to the field's width).
    #[inline]
    pub fn set(&mut self, f: usize, v: u128) {
        let d = FIELDS[f];
        let m = ones(d.width) << d.shift;
        self.w[d.word] = (self.w[d.word] & !m) | ((v << d.shift) & m);
    }

    /// The mask with, per field, a prefix of `lens[f]` bits.
    pub fn mask_of(lens: &[u8; NFIELDS]) -> Key {
        let mut m = Key::ZERO;
        for (f, &l) in lens.iter().enumerate() {
            m.set(f, prefix_bits(FIELDS[f].width, u32::from(l)));
        }
        m
    }

    /// Bitwise AND (masking).
    #[inline]
    pub fn and(&self, m: &Key) -> Key {
        Key {
            w: [self.w[0] & m.w[0], self.w[1] & m.w[1], self.w[2] & m.w[2]],
        }
    }

    /// Bitwise OR (un-wildcarding).
    #[inline]
    pub fn or(&self, m: &Key) -> Key {
        Key {
            w: [self.w[0] | m.w[0], self.w[1] | m.w[1], self.w[2] | m.w[2]],
        }
    }

    /// Per field, the number of leading one bits (the prefix length, for a
    /// prefix mask).
    pub fn lens(&self) -> [u8; NFIELDS] {
        let mut out = [0u8; NFIELDS];
        for (f, o) in out.iter_mut().enumerate() {
            let d = FIELDS[f];
            let v = self.get(f);
            // Leading ones of the field = leading zeros of its complement,
            // counted within the field's width.
            let inv = !v & ones(d.width);
            let lz = inv.leading_zeros() - (128 - d.width);
            *o = lz as u8;
        }
        out
    }

    /// log2 of the number of packets a (key, mask) entry covers: the
    /// wildcarded bits summed over fields, counting an address as 32 bits
    /// wide for an IPv4 key (the low 96 bits of an IPv4 address are always
    /// zero, so counting them would inflate every IPv4 entry alike).
    pub fn space_log2(&self, mask: &Key) -> u32 {
        let v6 = self.get(FAMILY) == 1;
        let lens = mask.lens();
        let mut bits = 0;
        for (f, &l) in lens.iter().enumerate() {
            let w = match f {
                SRC_IP | DST_IP if !v6 => 32,
                _ => FIELDS[f].width,
            };
            bits += w - u32::from(l).min(w);
        }
        bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_do_not_overlap_and_fit_word_2() {
        let mut used = 0u128;
        for (f, d) in FIELDS.iter().enumerate().filter(|(_, d)| d.word == 2) {
            let m = ones(d.width) << d.shift;
            assert_eq!(used & m, 0, "field {f}");
            used |= m;
        }
        assert!(used < 1u128 << 64);
    }

    #[test]
    fn set_get_and_lens_round_trip() {
        let mut k = Key::ZERO;
        for (f, d) in FIELDS.iter().enumerate() {
            k.set(f, ones(d.width));
            assert_eq!(k.get(f), ones(d.width));
        }
        for l in 0..=13u8 {
            let mut lens = [0u8; NFIELDS];
            lens[VLAN] = l;
            lens[SRC_IP] = l * 9;
            lens[SRC_PORT] = l.min(17);
            assert_eq!(Key::mask_of(&lens).lens(), lens);
        }
    }

    /// The one-go word 2 equals the field-by-field form.
    #[test]
    fn from_flow_equals_field_by_field() {
        for (i, flags) in [0, FlowKey::HAS_PORTS, FlowKey::HAS_VLAN | FlowKey::IPV6, 0x0f]
            .into_iter()
            .enumerate()
        {
            let mut f = FlowKey {
                proto: 200 + i as u8,
                flags,
                src_port: 0xffff,
                dst_port: 0x1234,
                vlan: 0xffff,
                ..Default::default()
            };
            f.src_ip = [0xab; 16];
            f.dst_ip = [0x5c; 16];
            let v6 = f.is_ipv6();
            let mut want = Key::ZERO;
            let addr =
                |a: [u8; 16]| u128::from_be_bytes(a) & if v6 { u128::MAX } else { prefix_bits(128, 32) };
            want.set(SRC_IP, addr(f.src_ip));
            want.set(DST_IP, addr(f.dst_ip));
            want.set(FAMILY, u128::from(v6));
            let ports = f.has_ports();
            want.set(SRC_PORT, if ports { u128::from(f.src_port) } else { NO_PORTS });
            want.set(DST_PORT, if ports { u128::from(f.dst_port) } else { NO_PORTS });
            want.set(PROTO, u128::from(f.proto));
            want.set(
                VLAN,
                if f.has_vlan() {
                    u128::from(f.vlan & 0x0fff)
                } else {
                    UNTAGGED
                },
            );
            assert_eq!(Key::from_flow(&f), want, "flags {flags:#x}");
        }
    }

    #[test]
    fn from_flow_markers() {
        let mut f = FlowKey {
            proto: 1,
            ..Default::default()
        };
        f.src_ip[..4].copy_from_slice(&[10, 1, 2, 3]);
        let k = Key::from_flow(&f);
        assert_eq!(k.get(SRC_PORT), NO_PORTS);
        assert_eq!(k.get(VLAN), UNTAGGED);
        assert_eq!(k.get(SRC_IP) >> 96, 0x0a01_0203);
        assert_eq!(k.get(FAMILY), 0);
        f.flags = FlowKey::HAS_PORTS | FlowKey::HAS_VLAN | FlowKey::IPV6;
        f.src_port = 80;
        f.vlan = 7;
        let k = Key::from_flow(&f);
        assert_eq!((k.get(SRC_PORT), k.get(VLAN), k.get(FAMILY)), (80, 7, 1));
    }
}
