//! LEB128 varints, zigzag, and a bounds-checked reader.
//!
//! Unsigned LEB128 (7 bits a byte, low group first, high bit = more
//! follows), as in protobuf and DWARF; signed values go through zigzag
//! (0, -1, 1, -2, … → 0, 1, 2, 3, …) so small magnitudes of either sign
//! stay short. The writer appends to a fixed scratch array the caller sized
//! for the worst case; the reader never panics: a short buffer or a varint
//! longer than ten bytes (or overflowing 64 bits) is an error.
//!
//! Hand-written rather than a crate: three tiny loops on the hot path,
//! checked against the `leb128` crate in the tests.

/// Why reading failed; the caller adds the record it was in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadFault {
    Short,
    Varint,
}

pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Appends to a fixed buffer; the caller guarantees room (see `MAX_RECORD_LEN`).
pub(crate) struct Writer<'a> {
    pub buf: &'a mut [u8],
    pub len: usize,
}

impl Writer<'_> {
    #[inline]
    pub fn u8(&mut self, v: u8) {
        self.buf[self.len] = v;
        self.len += 1;
    }

    #[inline]
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    #[inline]
    pub fn be16(&mut self, v: u16) {
        self.bytes(&v.to_be_bytes());
    }

    #[inline]
    pub fn be32(&mut self, v: u32) {
        self.bytes(&v.to_be_bytes());
    }

    #[inline]
    pub fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.u8(v as u8 | 0x80);
            v >>= 7;
        }
        self.u8(v as u8);
    }
}

/// Reads a byte slice front to back; every method fails instead of panicking.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pub pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], pos: usize) -> Self {
        Reader { buf, pos }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    #[inline]
    pub fn u8(&mut self) -> Result<u8, ReadFault> {
        let b = *self.buf.get(self.pos).ok_or(ReadFault::Short)?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], ReadFault> {
        let end = self.pos.checked_add(n).ok_or(ReadFault::Short)?;
        let b = self.buf.get(self.pos..end).ok_or(ReadFault::Short)?;
        self.pos = end;
        Ok(b)
    }

    #[inline]
    pub fn be16(&mut self) -> Result<u16, ReadFault> {
        let b = self.bytes(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    #[inline]
    pub fn be32(&mut self) -> Result<u32, ReadFault> {
        let b = self.bytes(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    #[inline]
    pub fn be64(&mut self) -> Result<u64, ReadFault> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// An unsigned LEB128 of at most ten bytes whose value fits 64 bits.
    #[inline]
    pub fn varint(&mut self) -> Result<u64, ReadFault> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.u8()?;
            let group = u64::from(b & 0x7f);
            // The tenth byte may only hold the top bit of a u64.
            if i == 9 && group > 1 {
                return Err(ReadFault::Varint);
            }
            v |= group << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ReadFault::Varint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varint_matches_the_leb128_crate(v in any::<u64>().prop_map(|v| v >> (v % 64))) {
            let mut want = Vec::new();
            leb128::write::unsigned(&mut want, v).unwrap();
            let mut buf = [0u8; 16];
            let mut w = Writer { buf: &mut buf, len: 0 };
            w.varint(v);
            let len = w.len;
            prop_assert_eq!(&buf[..len], &want[..]);
            let mut r = Reader::new(&want, 0);
            prop_assert_eq!(r.varint(), Ok(v));
            prop_assert_eq!(r.pos, want.len());
            // Every cut of it is short.
            for cut in 0..want.len() {
                prop_assert_eq!(Reader::new(&want[..cut], 0).varint(), Err(ReadFault::Short));
            }
        }

        #[test]
        fn zigzag_matches_the_definition(v in any::<i64>()) {
            // 0, -1, 1, -2, ... -> 0, 1, 2, 3, ...: 2v for v >= 0, -2v - 1 below.
            let want = if v >= 0 { (v as u64) * 2 } else { (-(v as i128) * 2 - 1) as u64 };
            prop_assert_eq!(zigzag(v), want);
            prop_assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    #[test]
    fn overlong_and_overflowing_varints_are_refused() {
        // Eleven bytes.
        let long = [0x80u8; 10].iter().copied().chain([0]).collect::<Vec<_>>();
        assert_eq!(Reader::new(&long, 0).varint(), Err(ReadFault::Varint));
        // Ten bytes whose last group overflows 64 bits.
        let mut over = [0xffu8; 10];
        over[9] = 0x02;
        assert_eq!(Reader::new(&over, 0).varint(), Err(ReadFault::Varint));
        over[9] = 0x01;
        assert_eq!(Reader::new(&over, 0).varint(), Ok(u64::MAX));
    }
}
