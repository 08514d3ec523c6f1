//! VXLAN headers (RFC 7348): 8 bytes after UDP destination port 4789,
//! then a whole Ethernet frame.
//!
//! Only the I flag is read: a header without it carries no valid VNI, and
//! Linux drops such packets, so the parser does too (it keeps the outer
//! record). The other bits are reserved and ignored, as the RFC asks.

use crate::bytes::{be32, Field, Rest};
use crate::error::{need, Layer, ParseError};

/// The IANA UDP port of VXLAN.
pub const PORT: u16 = 4789;

mod field {
    use super::{Field, Rest};
    pub const FLAGS: usize = 0;
    /// The VNI sits in the top 24 bits of the second word.
    pub const VNI: Field = 4..8;
    pub const PAYLOAD: Rest = VNI.end..;
}

/// Length of the VXLAN header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// The I flag: the VNI is valid.
const FLAG_VNI: u8 = 0x08;

/// A read-only view of a VXLAN header and the frame it carries.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it; getters panic if it is shorter than [`HEADER_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len); use this for untrusted input.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Fails with `Truncated` when the buffer cannot hold the 8-byte header.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(Layer::Vxlan, self.buffer.as_ref(), HEADER_LEN)
    }

    /// Whether the I flag says the VNI is valid.
    #[inline]
    pub fn vni_valid(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & FLAG_VNI != 0
    }

    /// The 24-bit VXLAN network identifier.
    pub fn vni(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VNI.start) >> 8
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The inner Ethernet frame, as captured.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static HEADER: [u8; 10] = [0x08, 0, 0, 0, 0x00, 0x00, 0x2a, 0x00, 0xaa, 0xbb];

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&HEADER[..]).unwrap();
        assert!(p.vni_valid());
        assert_eq!(p.vni(), 42);
        assert_eq!(p.payload(), &[0xaa, 0xbb]);
        let mut no_i = HEADER;
        no_i[0] = 0;
        assert!(!Packet::new_checked(&no_i[..]).unwrap().vni_valid());
    }

    #[test]
    fn test_truncated() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&HEADER[..len]).unwrap_err(),
                ParseError::truncated(Layer::Vxlan, 8, len)
            );
        }
    }
}
