//! PPP headers (RFC 1661, framing of RFC 1662) as pcap's DLT 9 stores
//! them, and the PPP protocol numbers Clarion reads.
//!
//! A frame may start with the HDLC address and control bytes 0xFF 0x03
//! or, when they were negotiated away (address/control field
//! compression), directly with the protocol. The protocol is two bytes,
//! or one when protocol field compression made its first byte odd
//! (RFC 1661 §6.5: a valid protocol's high byte is even, its low byte
//! odd). The header is therefore 1 to 4 bytes, found by `header_len`.

use crate::bytes::be16;
use crate::error::{need, Layer, ParseError};

/// PPP protocol numbers.
pub mod protocol {
    pub const IPV4: u16 = 0x0021;
    pub const IPV6: u16 = 0x0057;
    pub const MPLS: u16 = 0x0281;
}

const ADDRESS_CONTROL: [u8; 2] = [0xff, 0x03];

/// A read-only view of a PPP frame.
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

    /// Fails with `Truncated` when the protocol field is not all captured.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let data = self.buffer.as_ref();
        let at = self.protocol_at();
        need(Layer::Ppp, data, at + 1)?;
        need(Layer::Ppp, data, at + self.protocol_len())
    }

    /// Where the protocol starts: after 0xFF 0x03 if they are there.
    #[inline]
    fn protocol_at(&self) -> usize {
        if self.buffer.as_ref().starts_with(&ADDRESS_CONTROL) {
            2
        } else {
            0
        }
    }

    /// 1 when the protocol was compressed to one odd byte, else 2.
    #[inline]
    fn protocol_len(&self) -> usize {
        match self.buffer.as_ref().get(self.protocol_at()) {
            Some(b) if b & 1 == 1 => 1,
            _ => 2,
        }
    }

    /// Bytes before the payload (1 to 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        self.protocol_at() + self.protocol_len()
    }

    /// The protocol of the payload, widened to 16 bits if compressed.
    #[inline]
    pub fn protocol(&self) -> u16 {
        let at = self.protocol_at();
        let data = self.buffer.as_ref();
        if self.protocol_len() == 1 {
            u16::from(data[at])
        } else {
            be16(data, at)
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The bytes after the protocol field.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// The EtherType that means the same as PPP protocol `p`, for the ones
/// Clarion follows; `None` for the rest (LCP, IPCP, CHAP, …).
#[inline]
pub fn ethertype_of(p: u16) -> Option<u16> {
    match p {
        protocol::IPV4 => Some(crate::ethertype::IPV4),
        protocol::IPV6 => Some(crate::ethertype::IPV6),
        protocol::MPLS => Some(0x8847),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_deconstruct() {
        let cases: [(&[u8], usize, u16); 5] = [
            (&[0xff, 0x03, 0x00, 0x21, 0x45], 4, protocol::IPV4),
            (&[0x00, 0x57, 0x60], 2, protocol::IPV6),
            (&[0xff, 0x03, 0x21, 0x45], 3, protocol::IPV4),
            (&[0x21, 0x45], 1, protocol::IPV4),
            (&[0xc0, 0x21, 0x01], 2, 0xc021),
        ];
        for (bytes, len, proto) in cases {
            let p = Packet::new_checked(bytes).unwrap();
            assert_eq!((p.header_len(), p.protocol()), (len, proto), "{bytes:02x?}");
            assert_eq!(p.payload(), &bytes[len..]);
        }
        assert_eq!(ethertype_of(protocol::IPV6), Some(0x86dd));
        assert_eq!(ethertype_of(0xc021), None);
    }

    #[test]
    fn test_truncated() {
        assert_eq!(
            Packet::new_checked(&[][..]).unwrap_err(),
            ParseError::truncated(Layer::Ppp, 1, 0)
        );
        assert_eq!(
            Packet::new_checked(&[0xff, 0x03][..]).unwrap_err(),
            ParseError::truncated(Layer::Ppp, 3, 2)
        );
        assert_eq!(
            Packet::new_checked(&[0xff, 0x03, 0x00][..]).unwrap_err(),
            ParseError::truncated(Layer::Ppp, 4, 3)
        );
        assert_eq!(
            Packet::new_checked(&[0x00][..]).unwrap_err(),
            ParseError::truncated(Layer::Ppp, 2, 1)
        );
    }
}
