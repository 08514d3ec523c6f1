//! Cisco HDLC frames (DLT 104): address, control, then a 2-byte protocol
//! that is an EtherType, so the rest of the walk is Ethernet's.

use crate::bytes::{be16, Field, Rest};
use crate::error::{need, Layer, ParseError};

mod field {
    use super::{Field, Rest};
    pub const ADDRESS: usize = 0;
    pub const CONTROL: usize = 1;
    pub const PROTOCOL: Field = 2..4;
    pub const PAYLOAD: Rest = PROTOCOL.end..;
}

/// Length of the Cisco HDLC header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// Address byte of unicast frames (0x8F is broadcast).
pub const UNICAST: u8 = 0x0f;

/// A read/write view of a Cisco HDLC frame.
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

    /// Fails with `Truncated` when the buffer cannot hold the 4-byte header.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(Layer::CiscoHdlc, self.buffer.as_ref(), HEADER_LEN)
    }

    pub fn address(&self) -> u8 {
        self.buffer.as_ref()[field::ADDRESS]
    }

    pub fn control(&self) -> u8 {
        self.buffer.as_ref()[field::CONTROL]
    }

    /// The EtherType of the payload.
    #[inline]
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PROTOCOL.start)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_address(&mut self, v: u8) {
        self.buffer.as_mut()[field::ADDRESS] = v;
    }

    pub fn set_control(&mut self, v: u8) {
        self.buffer.as_mut()[field::CONTROL] = v;
    }

    pub fn set_protocol(&mut self, v: u16) {
        crate::bytes::set_be16(self.buffer.as_mut(), field::PROTOCOL.start, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static FRAME: [u8; 5] = [0x0f, 0x00, 0x86, 0xdd, 0x60];

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&FRAME[..]).unwrap();
        assert_eq!((p.address(), p.control(), p.protocol()), (UNICAST, 0, 0x86dd));
        assert_eq!(p.payload(), &[0x60]);
    }

    #[test]
    fn test_construct() {
        let mut b = [0u8; 4];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_address(UNICAST);
        p.set_control(0);
        p.set_protocol(0x86dd);
        assert_eq!(b, FRAME[..4]);
    }

    #[test]
    fn test_truncated() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&FRAME[..len]).unwrap_err(),
                ParseError::truncated(Layer::CiscoHdlc, 4, len)
            );
        }
    }
}
