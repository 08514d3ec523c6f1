//! 802.1Q / 802.1ad VLAN tags, as they follow a VLAN TPID.
//!
//! The TPID itself (0x8100, 0x88a8, 0x9100) is the EtherType field of the
//! header before; what this view covers is the rest of the tag: the TCI and
//! the EtherType of what follows. Stacked tags (QinQ) are simply several of
//! these in a row.

use crate::bytes::{be16, set_be16, Field, Rest};
use crate::error::{need, Layer, ParseError};

mod field {
    use super::{Field, Rest};
    pub const TCI: Field = 0..2;
    pub const ETHERTYPE: Field = 2..4;
    pub const PAYLOAD: Rest = ETHERTYPE.end..;
}

/// Length of the tag after its TPID.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A read/write view of one VLAN tag.
#[derive(Debug, Clone)]
pub struct Tag<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Tag<T> {
    /// Wraps a buffer without checking it; getters panic if it is shorter than [`HEADER_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Tag { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len); use this for untrusted input.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let tag = Self::new_unchecked(buffer);
        tag.check_len()?;
        Ok(tag)
    }

    /// Fails with `Truncated` when the buffer cannot hold the 4-byte tag.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(Layer::Vlan, self.buffer.as_ref(), HEADER_LEN)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole tag control information (priority, DEI, id).
    pub fn tci(&self) -> u16 {
        be16(self.buffer.as_ref(), field::TCI.start)
    }

    /// The 12-bit VLAN identifier.
    #[inline]
    pub fn vlan_id(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// The 3-bit priority code point.
    pub fn priority(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// The EtherType of what follows the tag (possibly another TPID).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE.start)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Tag<&'a T> {
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Tag<T> {
    pub fn set_tci(&mut self, tci: u16) {
        set_be16(self.buffer.as_mut(), field::TCI.start, tci);
    }

    pub fn set_ethertype(&mut self, t: u16) {
        set_be16(self.buffer.as_mut(), field::ETHERTYPE.start, t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static TAG: [u8; 6] = [0xa0, 0x64, 0x86, 0xdd, 0x60, 0x00];

    #[test]
    fn test_deconstruct() {
        let t = Tag::new_checked(&TAG[..]).unwrap();
        assert_eq!(t.vlan_id(), 100);
        assert_eq!(t.priority(), 5);
        assert_eq!(t.ethertype(), 0x86dd);
        assert_eq!(t.payload(), &[0x60, 0x00]);
    }

    #[test]
    fn test_construct() {
        let mut b = [0u8; 4];
        let mut t = Tag::new_unchecked(&mut b[..]);
        t.set_tci(0xa064);
        t.set_ethertype(0x86dd);
        assert_eq!(b, TAG[..4]);
    }

    #[test]
    fn test_truncated() {
        for len in 0..HEADER_LEN {
            assert!(matches!(
                Tag::new_checked(&TAG[..len]),
                Err(ParseError::Truncated {
                    layer: Layer::Vlan,
                    need: 4,
                    ..
                })
            ));
        }
    }
}
