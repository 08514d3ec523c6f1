//! GRE headers (RFC 2784, with the key and sequence number of RFC 2890),
//! IP protocol 47.
//!
//! Four fixed bytes (flags, version, protocol type), then an optional
//! checksum word (C), key word (K) and sequence word (S), in that order.
//! Only version 0 without the RFC 1701 routing bit is read: version 1 is
//! PPTP's enhanced GRE and routing entries have no fixed length, so the
//! parser keeps the outer record for both (`is_plain`).

use crate::bytes::{be16, be32, Field};
use crate::error::{need, Layer, ParseError};

/// The IP protocol number of GRE.
pub const PROTOCOL: u8 = 47;

mod field {
    use super::Field;
    pub const FLAGS_VER: Field = 0..2;
    pub const PROTOCOL: Field = 2..4;
}

/// Length of the GRE header without optional words.
pub const HEADER_LEN: usize = field::PROTOCOL.end;

const FLAG_C: u16 = 0x8000;
const FLAG_R: u16 = 0x4000;
const FLAG_K: u16 = 0x2000;
const FLAG_S: u16 = 0x1000;
const VERSION: u16 = 0x0007;

/// A read-only view of a GRE header and its payload.
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

    /// Fails with `Truncated` when the buffer cannot hold the fixed header
    /// and the optional words its flags announce.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let data = self.buffer.as_ref();
        need(Layer::Gre, data, HEADER_LEN)?;
        need(Layer::Gre, data, self.header_len())
    }

    #[inline]
    fn flags_ver(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FLAGS_VER.start)
    }

    /// The 3-bit version (0 for RFC 2784 GRE, 1 for PPTP).
    pub fn version(&self) -> u8 {
        (self.flags_ver() & VERSION) as u8
    }

    /// Version 0 without routing: a header this view can walk past.
    #[inline]
    pub fn is_plain(&self) -> bool {
        self.flags_ver() & (FLAG_R | VERSION) == 0
    }

    /// Header length: 4, plus 4 for each of checksum, key and sequence present.
    #[inline]
    pub fn header_len(&self) -> usize {
        let f = self.flags_ver();
        let words =
            usize::from(f & FLAG_C != 0) + usize::from(f & FLAG_K != 0) + usize::from(f & FLAG_S != 0);
        HEADER_LEN + 4 * words
    }

    /// The EtherType of the payload.
    #[inline]
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PROTOCOL.start)
    }

    /// The key word (RFC 2890), when the K flag announces one: after the
    /// checksum word if there is one.
    #[inline]
    pub fn key(&self) -> Option<u32> {
        let f = self.flags_ver();
        (f & FLAG_K != 0).then(|| {
            let at = HEADER_LEN + 4 * usize::from(f & FLAG_C != 0);
            be32(self.buffer.as_ref(), at)
        })
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// What follows the header and its optional words, as captured.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_deconstruct() {
        // C, K and S: checksum+reserved, key, sequence, then IPv4.
        let h = [0xb0, 0x00, 0x08, 0x00, 0, 0, 0, 0, 0, 0, 0, 42, 0, 0, 0, 1, 0x45];
        let p = Packet::new_checked(&h[..]).unwrap();
        assert_eq!((p.header_len(), p.protocol(), p.version()), (16, 0x0800, 0));
        assert_eq!(p.key(), Some(42));
        assert!(p.is_plain());
        // K alone: the key is the first optional word.
        let k = [0x20, 0x00, 0x08, 0x00, 0xde, 0xad, 0xbe, 0xef];
        assert_eq!(Packet::new_checked(&k[..]).unwrap().key(), Some(0xdead_beef));
        assert_eq!(p.payload(), &[0x45]);
        let p = Packet::new_checked(&[0x00, 0x00, 0x65, 0x58][..]).unwrap();
        assert_eq!((p.header_len(), p.protocol(), p.key()), (4, 0x6558, None));
        assert!(p.payload().is_empty());
        // PPTP's version 1 and RFC 1701 routing are not walked.
        assert!(
            !Packet::new_checked(&[0x30, 0x01, 0x88, 0x0b, 0, 0, 0, 0, 0, 0, 0, 0][..])
                .unwrap()
                .is_plain()
        );
        assert!(!Packet::new_checked(&[0x40, 0x00, 0x08, 0x00][..])
            .unwrap()
            .is_plain());
    }

    #[test]
    fn test_truncated() {
        let h = [0x20, 0x00, 0x08, 0x00, 0, 0, 0, 7];
        for len in 0..h.len() {
            let need = if len < HEADER_LEN { 4 } else { 8 };
            assert_eq!(
                Packet::new_checked(&h[..len]).unwrap_err(),
                ParseError::truncated(Layer::Gre, need, len)
            );
        }
    }
}
