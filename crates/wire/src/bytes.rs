//! Network-order field access shared by the views.
//!
//! Callers index only within lengths their view's `check_len` established,
//! so these never panic on a checked view.

pub(crate) type Field = core::ops::Range<usize>;
pub(crate) type Rest = core::ops::RangeFrom<usize>;

#[inline(always)]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline(always)]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline(always)]
pub(crate) fn set_be16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline(always)]
pub(crate) fn set_be32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut b = [0u8; 6];
        set_be16(&mut b, 0, 0x1234);
        set_be32(&mut b, 2, 0xdead_beef);
        assert_eq!(b, [0x12, 0x34, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(be16(&b, 0), 0x1234);
        assert_eq!(be32(&b, 2), 0xdead_beef);
    }
}
