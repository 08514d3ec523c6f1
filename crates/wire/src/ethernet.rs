//! Ethernet II frames (DLT 1).

use crate::bytes::{be16, set_be16, Field, Rest};
use crate::error::{need, Layer, ParseError};

/// EtherType values Clarion recognises.
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    pub const IPV6: u16 = 0x86dd;
    /// 802.1Q customer VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service VLAN tag (QinQ outer tag).
    pub const QINQ: u16 = 0x88a8;
    /// Pre-standard QinQ outer tag still seen on some switches.
    pub const QINQ_LEGACY: u16 = 0x9100;
    pub const LLDP: u16 = 0x88cc;

    /// Whether `t` announces a VLAN tag (any of the three TPIDs).
    #[inline(always)]
    pub fn is_vlan(t: u16) -> bool {
        matches!(t, VLAN | QINQ | QINQ_LEGACY)
    }
}

mod field {
    use super::{Field, Rest};
    pub const DESTINATION: Field = 0..6;
    pub const SOURCE: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    pub const PAYLOAD: Rest = ETHERTYPE.end..;
}

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A read/write view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking it; getters panic if it is shorter than [`HEADER_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Frame { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len); use this for untrusted input.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Fails with `Truncated` when the buffer cannot hold the 14-byte header.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(Layer::Ethernet, self.buffer.as_ref(), HEADER_LEN)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn dst_addr(&self) -> [u8; 6] {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DESTINATION]);
        a
    }

    pub fn src_addr(&self) -> [u8; 6] {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SOURCE]);
        a
    }

    /// The EtherType (or, below 0x0600, an 802.3 length).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE.start)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Frame<&'a T> {
    /// Everything after the header, borrowed from the original buffer.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    pub fn set_dst_addr(&mut self, a: [u8; 6]) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&a);
    }

    pub fn set_src_addr(&mut self, a: [u8; 6]) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&a);
    }

    pub fn set_ethertype(&mut self, t: u16) {
        set_be16(self.buffer.as_mut(), field::ETHERTYPE.start, t);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static FRAME: [u8; 18] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, // dst
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // src
        0x08, 0x00, // IPv4
        0xaa, 0xbb, 0xcc, 0xdd,
    ];

    #[test]
    fn test_deconstruct() {
        let f = Frame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.dst_addr(), [2, 0, 0, 0, 0, 2]);
        assert_eq!(f.src_addr(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(f.ethertype(), ethertype::IPV4);
        assert_eq!(f.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
    }

    #[test]
    fn test_construct() {
        let mut bytes = [0u8; 18];
        let mut f = Frame::new_unchecked(&mut bytes[..]);
        f.set_dst_addr([2, 0, 0, 0, 0, 2]);
        f.set_src_addr([2, 0, 0, 0, 0, 1]);
        f.set_ethertype(ethertype::IPV4);
        f.payload_mut().copy_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(bytes, FRAME);
    }

    #[test]
    fn test_truncated() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Frame::new_checked(&FRAME[..len]).unwrap_err(),
                ParseError::truncated(Layer::Ethernet, 14, len)
            );
        }
        assert!(Frame::new_checked(&FRAME[..HEADER_LEN])
            .unwrap()
            .payload()
            .is_empty());
    }

    #[test]
    fn vlan_tpids() {
        assert!(ethertype::is_vlan(0x8100) && ethertype::is_vlan(0x88a8) && ethertype::is_vlan(0x9100));
        assert!(!ethertype::is_vlan(ethertype::IPV4));
    }
}
