//! Linux cooked capture v2 (SLL2, DLT 276): the 20-byte pseudo-header of
//! newer libpcap, which adds the interface index.

use crate::bytes::{be16, be32, set_be16, set_be32, Field, Rest};
use crate::error::{need, Layer, ParseError};

mod field {
    use super::{Field, Rest};
    pub const PROTOCOL: Field = 0..2;
    pub const RESERVED: Field = 2..4;
    pub const IF_INDEX: Field = 4..8;
    pub const HA_TYPE: Field = 8..10;
    pub const PACKET_TYPE: usize = 10;
    pub const HA_LEN: usize = 11;
    pub const ADDRESS: Field = 12..20;
    pub const PAYLOAD: Rest = ADDRESS.end..;
}

/// Length of the SLL2 header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A read/write view of an SLL2 header and what follows.
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

    /// Fails with `Truncated` when the buffer cannot hold the 20-byte header.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(Layer::LinuxSll2, self.buffer.as_ref(), HEADER_LEN)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The protocol of the payload (an EtherType).
    #[inline]
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PROTOCOL.start)
    }

    pub fn reserved(&self) -> u16 {
        be16(self.buffer.as_ref(), field::RESERVED.start)
    }

    pub fn if_index(&self) -> u32 {
        be32(self.buffer.as_ref(), field::IF_INDEX.start)
    }

    pub fn ha_type(&self) -> u16 {
        be16(self.buffer.as_ref(), field::HA_TYPE.start)
    }

    pub fn packet_type(&self) -> u8 {
        self.buffer.as_ref()[field::PACKET_TYPE]
    }

    pub fn ha_len(&self) -> u8 {
        self.buffer.as_ref()[field::HA_LEN]
    }

    pub fn address(&self) -> [u8; 8] {
        let mut a = [0; 8];
        a.copy_from_slice(&self.buffer.as_ref()[field::ADDRESS]);
        a
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_protocol(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::PROTOCOL.start, v);
    }

    pub fn set_reserved(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::RESERVED.start, v);
    }

    pub fn set_if_index(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::IF_INDEX.start, v);
    }

    pub fn set_ha_type(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::HA_TYPE.start, v);
    }

    pub fn set_packet_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::PACKET_TYPE] = v;
    }

    pub fn set_ha_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::HA_LEN] = v;
    }

    pub fn set_address(&mut self, a: [u8; 8]) {
        self.buffer.as_mut()[field::ADDRESS].copy_from_slice(&a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static HDR: [u8; 21] = [
        0x08, 0x00, // IPv4
        0x00, 0x00, // reserved
        0x00, 0x00, 0x00, 0x03, // ifindex 3
        0x00, 0x01, // ARPHRD_ETHER
        0x00, // to us
        0x06, // address length
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, // address
        0x45,
    ];

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&HDR[..]).unwrap();
        assert_eq!(p.protocol(), 0x0800);
        assert_eq!(p.reserved(), 0);
        assert_eq!(p.if_index(), 3);
        assert_eq!(p.ha_type(), 1);
        assert_eq!(p.packet_type(), 0);
        assert_eq!(p.ha_len(), 6);
        assert_eq!(p.address(), [2, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(p.payload(), &[0x45]);
    }

    #[test]
    fn test_construct() {
        let mut b = [0u8; 20];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_protocol(0x0800);
        p.set_reserved(0);
        p.set_if_index(3);
        p.set_ha_type(1);
        p.set_packet_type(0);
        p.set_ha_len(6);
        p.set_address([2, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(b, HDR[..20]);
    }

    #[test]
    fn test_truncated() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&HDR[..len]).unwrap_err(),
                ParseError::truncated(Layer::LinuxSll2, 20, len)
            );
        }
    }
}
