//! Linux cooked capture v1 (SLL, DLT 113): the 16-byte pseudo-header
//! `tcpdump -i any` writes instead of a link-layer header.

use crate::bytes::{be16, set_be16, Field, Rest};
use crate::error::{need, Layer, ParseError};

mod field {
    use super::{Field, Rest};
    pub const PACKET_TYPE: Field = 0..2;
    pub const HA_TYPE: Field = 2..4;
    pub const HA_LEN: Field = 4..6;
    pub const ADDRESS: Field = 6..14;
    pub const PROTOCOL: Field = 14..16;
    pub const PAYLOAD: Rest = PROTOCOL.end..;
}

/// Length of the SLL header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A read/write view of an SLL header and what follows.
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

    /// Fails with `Truncated` when the buffer cannot hold the 16-byte header.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(Layer::LinuxSll, self.buffer.as_ref(), HEADER_LEN)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// 0 to us, 1 broadcast, 2 multicast, 3 to someone else, 4 sent by us.
    pub fn packet_type(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PACKET_TYPE.start)
    }

    /// The ARPHRD_ type of the device (1 = Ethernet).
    pub fn ha_type(&self) -> u16 {
        be16(self.buffer.as_ref(), field::HA_TYPE.start)
    }

    pub fn ha_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::HA_LEN.start)
    }

    /// The first (up to) eight bytes of the link-layer source address.
    pub fn address(&self) -> [u8; 8] {
        let mut a = [0; 8];
        a.copy_from_slice(&self.buffer.as_ref()[field::ADDRESS]);
        a
    }

    /// The protocol of the payload, an EtherType for the devices that matter here.
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
    pub fn set_packet_type(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::PACKET_TYPE.start, v);
    }

    pub fn set_ha_type(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::HA_TYPE.start, v);
    }

    pub fn set_ha_len(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::HA_LEN.start, v);
    }

    pub fn set_address(&mut self, a: [u8; 8]) {
        self.buffer.as_mut()[field::ADDRESS].copy_from_slice(&a);
    }

    pub fn set_protocol(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::PROTOCOL.start, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static HDR: [u8; 17] = [
        0x00, 0x04, // outgoing
        0x00, 0x01, // ARPHRD_ETHER
        0x00, 0x06, // address length
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, // address
        0x86, 0xdd, // IPv6
        0x60,
    ];

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&HDR[..]).unwrap();
        assert_eq!(p.packet_type(), 4);
        assert_eq!(p.ha_type(), 1);
        assert_eq!(p.ha_len(), 6);
        assert_eq!(p.address(), [2, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(p.protocol(), 0x86dd);
        assert_eq!(p.payload(), &[0x60]);
    }

    #[test]
    fn test_construct() {
        let mut b = [0u8; 16];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_packet_type(4);
        p.set_ha_type(1);
        p.set_ha_len(6);
        p.set_address([2, 0, 0, 0, 0, 1, 0, 0]);
        p.set_protocol(0x86dd);
        assert_eq!(b, HDR[..16]);
    }

    #[test]
    fn test_truncated() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&HDR[..len]).unwrap_err(),
                ParseError::truncated(Layer::LinuxSll, 16, len)
            );
        }
    }
}
