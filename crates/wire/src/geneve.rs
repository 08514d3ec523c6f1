//! Geneve headers (RFC 8926): after UDP destination port 6081, 8 fixed
//! bytes, then `opt_len` × 4 bytes of options, then the payload whose
//! EtherType the header names.
//!
//! Options are skipped by their total length without being read (their
//! TLVs mean nothing to a flow key). `check_len` makes sure the options
//! were captured, so `payload` never panics. Version must be 0: a later
//! version may lay the header out differently, so the parser keeps the
//! outer record for it.

use crate::bytes::{be16, be32, Field};
use crate::error::{need, Layer, ParseError};

/// The IANA UDP port of Geneve.
pub const PORT: u16 = 6081;

mod field {
    use super::Field;
    pub const VER_OPTLEN: usize = 0;
    pub const PROTOCOL: Field = 2..4;
    pub const VNI: Field = 4..8;
}

/// Length of the fixed Geneve header.
pub const HEADER_LEN: usize = field::VNI.end;

/// A read-only view of a Geneve header, its options and payload.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it; getters panic unless [`check_len`](Self::check_len) holds.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len); use this for untrusted input.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Fails with `Truncated` when the buffer cannot hold the fixed header
    /// and the options its length field announces.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let data = self.buffer.as_ref();
        need(Layer::Geneve, data, HEADER_LEN)?;
        need(Layer::Geneve, data, self.header_len())
    }

    /// The 2-bit version (0 is the only one defined).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_OPTLEN] >> 6
    }

    /// Header length with options, in bytes (at most 8 + 63 × 4 = 260).
    #[inline]
    pub fn header_len(&self) -> usize {
        HEADER_LEN + usize::from(self.buffer.as_ref()[field::VER_OPTLEN] & 0x3f) * 4
    }

    /// The EtherType of the payload (0x6558 for an Ethernet frame).
    #[inline]
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PROTOCOL.start)
    }

    /// The 24-bit virtual network identifier.
    pub fn vni(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VNI.start) >> 8
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// What follows the options, as captured.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Version 0, one 4-byte option, Ethernet payload, VNI 7.
    static HEADER: [u8; 14] = [
        0x01, 0x00, 0x65, 0x58, 0x00, 0x00, 0x07, 0x00, // fixed
        0x01, 0x02, 0x03, 0x00, // one option word
        0xaa, 0xbb,
    ];

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&HEADER[..]).unwrap();
        assert_eq!(
            (p.version(), p.header_len(), p.protocol(), p.vni()),
            (0, 12, 0x6558, 7)
        );
        assert_eq!(p.payload(), &[0xaa, 0xbb]);
    }

    #[test]
    fn test_truncated() {
        for len in 0..12 {
            let need = if len < HEADER_LEN { 8 } else { 12 };
            assert_eq!(
                Packet::new_checked(&HEADER[..len]).unwrap_err(),
                ParseError::truncated(Layer::Geneve, need, len)
            );
        }
        // The longest option length announced over a short buffer.
        let mut h = HEADER;
        h[0] = 0x3f;
        assert_eq!(
            Packet::new_checked(&h[..]).unwrap_err(),
            ParseError::truncated(Layer::Geneve, 260, 14)
        );
    }
}
