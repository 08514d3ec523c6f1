//! ICMP and ICMPv6 headers: type, code, checksum and four bytes whose
//! meaning depends on the type. Both share this layout.
//!
//! The record needs nothing from them beyond their fixed 8-byte size, so
//! the parser does not require this header to be captured.

use crate::bytes::{be16, set_be16, Field};
use crate::error::{need, Layer, ParseError};

mod field {
    use super::Field;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const REST: Field = 4..8;
}

/// Length of the ICMP header.
pub const HEADER_LEN: usize = field::REST.end;

/// A read/write view of an ICMP or ICMPv6 message.
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
        need(Layer::Icmp, self.buffer.as_ref(), HEADER_LEN)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// The type-specific second word (identifier and sequence for echo).
    pub fn rest_of_header(&self) -> [u8; 4] {
        let mut r = [0; 4];
        r.copy_from_slice(&self.buffer.as_ref()[field::REST]);
        r
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_msg_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::TYPE] = v;
    }

    pub fn set_msg_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::CODE] = v;
    }

    pub fn set_checksum(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::CHECKSUM.start, v);
    }

    pub fn set_rest_of_header(&mut self, r: [u8; 4]) {
        self.buffer.as_mut()[field::REST].copy_from_slice(&r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static ECHO: [u8; 10] = [0x08, 0x00, 0xf7, 0xfc, 0x00, 0x01, 0x00, 0x02, 0xaa, 0xbb];

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!((p.msg_type(), p.msg_code()), (8, 0));
        assert_eq!(p.checksum(), 0xf7fc);
        assert_eq!(p.rest_of_header(), [0, 1, 0, 2]);
        assert_eq!(p.payload(), &[0xaa, 0xbb]);
    }

    #[test]
    fn test_construct() {
        let mut b = [0u8; 10];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_msg_type(8);
        p.set_msg_code(0);
        p.set_checksum(0xf7fc);
        p.set_rest_of_header([0, 1, 0, 2]);
        b[8..].copy_from_slice(&[0xaa, 0xbb]);
        assert_eq!(b, ECHO);
    }

    #[test]
    fn test_truncated() {
        assert_eq!(
            Packet::new_checked(&ECHO[..7]).unwrap_err(),
            ParseError::truncated(Layer::Icmp, 8, 7)
        );
    }
}
