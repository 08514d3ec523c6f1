//! PPPoE session frames (RFC 2516), EtherType 0x8864: a 6-byte PPPoE
//! header (version/type, code, session id, length), then the 2-byte PPP
//! protocol, then the payload.
//!
//! Discovery frames (0x8863) carry no IP and stay *not IP*. The length
//! field is not checked: sizes come from the IP header, as elsewhere.

use crate::bytes::{be16, Field, Rest};
use crate::error::{need, Layer, ParseError};

/// The EtherType of PPPoE session frames.
pub const ETHERTYPE_SESSION: u16 = 0x8864;

mod field {
    use super::{Field, Rest};
    pub const VER_TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const SESSION: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const PROTOCOL: Field = 6..8;
    pub const PAYLOAD: Rest = PROTOCOL.end..;
}

/// Length of the PPPoE header and the PPP protocol after it.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A read-only view of a PPPoE session frame.
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

    /// Fails with `Truncated` when the buffer cannot hold the 8 bytes.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(Layer::Pppoe, self.buffer.as_ref(), HEADER_LEN)
    }

    /// Version and type nibbles (0x11 for RFC 2516).
    pub fn ver_type(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TYPE]
    }

    /// Code (0 in session frames).
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    pub fn session_id(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SESSION.start)
    }

    /// PPP payload length (protocol field included).
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Whether the length field is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The PPP protocol of the payload (see [`crate::ppp_protocol`]).
    #[inline]
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PROTOCOL.start)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The bytes after the PPP protocol.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static FRAME: [u8; 9] = [0x11, 0x00, 0x12, 0x34, 0x00, 0x03, 0x00, 0x21, 0x45];

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&FRAME[..]).unwrap();
        assert_eq!(
            (p.ver_type(), p.code(), p.session_id(), p.len()),
            (0x11, 0, 0x1234, 3)
        );
        assert!(!p.is_empty());
        assert_eq!(p.protocol(), 0x0021);
        assert_eq!(p.payload(), &[0x45]);
    }

    #[test]
    fn test_truncated() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&FRAME[..len]).unwrap_err(),
                ParseError::truncated(Layer::Pppoe, 8, len)
            );
        }
    }
}
