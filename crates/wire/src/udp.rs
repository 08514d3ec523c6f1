//! UDP headers.

use crate::bytes::{be16, set_be16, Field};
use crate::error::{need, Layer, ParseError};

mod field {
    use super::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

/// A read/write view of a UDP datagram.
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
    /// The length field is not checked: volumes come from the IP header.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(Layer::Udp, self.buffer.as_ref(), HEADER_LEN)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT.start)
    }

    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT.start)
    }

    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Whether the length field claims an empty datagram (not even a header).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The bytes after the header, as captured.
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_src_port(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::SRC_PORT.start, v);
    }

    pub fn set_dst_port(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::DST_PORT.start, v);
    }

    pub fn set_len(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::LENGTH.start, v);
    }

    pub fn set_checksum(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::CHECKSUM.start, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static DATAGRAM: [u8; 12] = [
        0xbf, 0x00, 0x00, 0x35, 0x00, 0x0c, 0x12, 0x4d, 0xaa, 0x00, 0x00, 0xff,
    ];

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&DATAGRAM[..]).unwrap();
        assert_eq!(p.src_port(), 48896);
        assert_eq!(p.dst_port(), 53);
        assert_eq!(p.len(), 12);
        assert!(!p.is_empty());
        assert_eq!(p.checksum(), 0x124d);
        assert_eq!(p.payload(), &[0xaa, 0x00, 0x00, 0xff]);
    }

    #[test]
    fn test_construct() {
        let mut b = [0u8; 12];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_src_port(48896);
        p.set_dst_port(53);
        p.set_len(12);
        p.set_checksum(0x124d);
        b[8..].copy_from_slice(&[0xaa, 0x00, 0x00, 0xff]);
        assert_eq!(b, DATAGRAM);
    }

    #[test]
    fn test_truncated() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&DATAGRAM[..len]).unwrap_err(),
                ParseError::truncated(Layer::Udp, 8, len)
            );
        }
    }
}
