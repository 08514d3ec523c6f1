//! The Internet checksum (RFC 1071), for the frame builder.
//!
//! Parsing never verifies checksums: captures taken on the sending host
//! usually carry offloaded, not-yet-computed values.

/// Adds `data` to a running one's-complement sum (not yet folded).
pub(crate) fn sum(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        if let [hi, lo] = *c {
            acc = acc.wrapping_add(u32::from(u16::from_be_bytes([hi, lo])));
        }
    }
    if let [last] = *chunks.remainder() {
        acc = acc.wrapping_add(u32::from(last) << 8);
    }
    // Fold early so long buffers cannot overflow the accumulator.
    (acc & 0xffff) + (acc >> 16)
}

/// Folds a running sum into the final complemented checksum.
pub(crate) fn finish(mut acc: u32) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// The pseudo-header sum for TCP/UDP/ICMPv6 over IPv4 or IPv6.
pub(crate) fn pseudo_header(src: &[u8], dst: &[u8], proto: u8, len: u32) -> u32 {
    let mut acc = sum(0, src);
    acc = sum(acc, dst);
    acc = acc.wrapping_add(u32::from(proto));
    acc = acc.wrapping_add(len >> 16).wrapping_add(len & 0xffff);
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // The worked example of RFC 1071 section 3: sum 0xddf2, checksum 0x220d.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(finish(sum(0, &data)), !0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(finish(sum(0, &[0x12])), finish(sum(0, &[0x12, 0x00])));
    }

    #[test]
    fn valid_header_sums_to_zero() {
        let hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01,
            0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(finish(sum(0, &hdr)), 0);
    }
}
