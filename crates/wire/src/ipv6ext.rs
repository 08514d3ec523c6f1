//! IPv6 extension headers and the walk over their chain.
//!
//! Hop-by-hop, routing and destination options share one shape (next
//! header, length in 8-byte units not counting the first 8); AH counts in
//! 4-byte units not counting the first 8 (RFC 4302); the fragment header is
//! a fixed 8 bytes. ESP and "no next header" end the walk: what follows is
//! opaque, so they are reported as the packet's protocol.

use crate::bytes::{be16, be32, set_be16, set_be32, Field};
use crate::error::{need, Layer, ParseError};

/// Next-header values that matter to the walk.
pub mod next_header {
    pub const HOP_BY_HOP: u8 = 0;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const ESP: u8 = 50;
    pub const AUTH: u8 = 51;
    pub const NO_NEXT: u8 = 59;
    pub const DEST_OPTS: u8 = 60;
}

mod field {
    use super::Field;
    pub const NXT_HDR: usize = 0;
    pub const LENGTH: usize = 1;
    pub const FRAG_OFF: Field = 2..4;
    pub const FRAG_IDENT: Field = 4..8;
}

/// Every extension header is at least this long; the fragment header is exactly this.
pub const MIN_HEADER_LEN: usize = field::FRAG_IDENT.end;

/// A view of a hop-by-hop, routing, destination-options or AH header.
#[derive(Debug, Clone)]
pub struct ExtHeader<T: AsRef<[u8]>> {
    buffer: T,
    /// AH counts its length in 4-byte units, the others in 8-byte units.
    auth: bool,
}

impl<T: AsRef<[u8]>> ExtHeader<T> {
    /// Wraps a buffer without checking it; `auth` selects AH's length unit.
    pub const fn new_unchecked(buffer: T, auth: bool) -> Self {
        ExtHeader { buffer, auth }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len); use this for untrusted input.
    pub fn new_checked(buffer: T, auth: bool) -> Result<Self, ParseError> {
        let h = Self::new_unchecked(buffer, auth);
        h.check_len()?;
        Ok(h)
    }

    /// Fails with `Truncated` when the buffer cannot hold the length the header declares.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let data = self.buffer.as_ref();
        need(Layer::Ipv6Ext, data, field::LENGTH + 1)?;
        need(Layer::Ipv6Ext, data, self.header_len())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// The raw length field.
    pub fn hdr_ext_len(&self) -> u8 {
        self.buffer.as_ref()[field::LENGTH]
    }

    /// The header's length in bytes.
    #[inline]
    pub fn header_len(&self) -> usize {
        let n = usize::from(self.hdr_ext_len());
        if self.auth {
            (n + 2) * 4
        } else {
            (n + 1) * 8
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> ExtHeader<&'a T> {
    /// The bytes after this header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ExtHeader<T> {
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = v;
    }

    pub fn set_hdr_ext_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::LENGTH] = v;
    }
}

/// A view of the IPv6 fragment header.
#[derive(Debug, Clone)]
pub struct FragHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> FragHeader<T> {
    /// Wraps a buffer without checking it; getters panic if it is shorter than 8 bytes.
    pub const fn new_unchecked(buffer: T) -> Self {
        FragHeader { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len); use this for untrusted input.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let h = Self::new_unchecked(buffer);
        h.check_len()?;
        Ok(h)
    }

    /// Fails with `Truncated` when the buffer cannot hold the 8-byte header.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(Layer::Ipv6Ext, self.buffer.as_ref(), MIN_HEADER_LEN)
    }

    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// Fragment offset in bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FRAG_OFF.start) & 0xfff8
    }

    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FRAG_OFF.start) & 1 != 0
    }

    pub fn ident(&self) -> u32 {
        be32(self.buffer.as_ref(), field::FRAG_IDENT.start)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> FragHeader<&'a T> {
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[MIN_HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FragHeader<T> {
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = v;
        self.buffer.as_mut()[field::LENGTH] = 0;
    }

    /// Sets the offset (bytes, rounded down to 8) and the M flag.
    pub fn set_frag(&mut self, offset_bytes: u16, more_frags: bool) {
        set_be16(
            self.buffer.as_mut(),
            field::FRAG_OFF.start,
            (offset_bytes & 0xfff8) | u16::from(more_frags),
        );
    }

    pub fn set_ident(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::FRAG_IDENT.start, v);
    }
}

/// Where the extension-header chain led.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chain<'a> {
    /// The upper-layer protocol (or ESP / no-next-header).
    pub protocol: u8,
    /// Bytes of extension headers walked over.
    pub ext_len: u32,
    /// A fragment header with a nonzero offset was met: no upper-layer header follows.
    pub later_fragment: bool,
    /// The captured bytes after the last extension header.
    pub rest: &'a [u8],
}

/// Walks the chain starting with `next` over `bytes` (what follows the fixed header).
///
/// Terminates: every step consumes at least 8 bytes of a finite slice.
#[inline]
pub(crate) fn walk(mut next: u8, mut bytes: &[u8]) -> Result<Chain<'_>, ParseError> {
    use next_header::*;
    let mut ext_len = 0u32; // sum of the headers walked over, at most bytes.len()
    loop {
        match next {
            HOP_BY_HOP | ROUTING | DEST_OPTS | AUTH => {
                let h = ExtHeader::new_checked(bytes, next == AUTH)?;
                next = h.next_header();
                ext_len = ext_len.saturating_add(h.header_len() as u32);
                bytes = h.payload();
            }
            FRAGMENT => {
                let h = FragHeader::new_checked(bytes)?;
                next = h.next_header();
                ext_len = ext_len.saturating_add(MIN_HEADER_LEN as u32);
                bytes = h.payload();
                if h.frag_offset() != 0 {
                    return Ok(Chain {
                        protocol: next,
                        ext_len,
                        later_fragment: true,
                        rest: bytes,
                    });
                }
            }
            _ => {
                return Ok(Chain {
                    protocol: next,
                    ext_len,
                    later_fragment: false,
                    rest: bytes,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::next_header::*;
    use super::*;

    #[test]
    fn test_deconstruct_ext() {
        let b = [6u8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xaa];
        let h = ExtHeader::new_checked(&b[..], false).unwrap();
        assert_eq!(h.next_header(), 6);
        assert_eq!(h.header_len(), 16);
        assert_eq!(h.payload(), &[0xaa]);
        let h = ExtHeader::new_checked(&b[..], true).unwrap();
        assert_eq!(h.header_len(), 12);
    }

    #[test]
    fn test_deconstruct_frag() {
        let b = [17u8, 0, 0x05, 0x51, 0, 0, 0, 9, 0xaa];
        let h = FragHeader::new_checked(&b[..]).unwrap();
        assert_eq!(h.next_header(), 17);
        assert_eq!(h.frag_offset(), 0x550);
        assert!(h.more_frags());
        assert_eq!(h.ident(), 9);
        assert_eq!(h.payload(), &[0xaa]);
    }

    #[test]
    fn test_construct_frag() {
        let mut b = [0xffu8; 8];
        let mut h = FragHeader::new_unchecked(&mut b[..]);
        h.set_next_header(17);
        h.set_frag(0x550, true);
        h.set_ident(9);
        assert_eq!(b, [17, 0, 0x05, 0x51, 0, 0, 0, 9]);
    }

    #[test]
    fn test_truncated() {
        let b = [6u8, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            ExtHeader::new_checked(&b[..], false).unwrap_err(),
            ParseError::truncated(Layer::Ipv6Ext, 16, 10)
        );
        assert_eq!(
            ExtHeader::new_checked(&b[..1], false).unwrap_err(),
            ParseError::truncated(Layer::Ipv6Ext, 2, 1)
        );
        assert_eq!(
            FragHeader::new_checked(&b[..7]).unwrap_err(),
            ParseError::truncated(Layer::Ipv6Ext, 8, 7)
        );
    }

    #[test]
    fn walk_chain() {
        // HBH(8) -> AH(12) -> DST(8) -> TCP
        let mut b = vec![AUTH, 0, 0, 0, 0, 0, 0, 0];
        b.extend_from_slice(&[DEST_OPTS, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&[6, 0, 0, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&[0xaa, 0xbb]);
        let c = walk(HOP_BY_HOP, &b).unwrap();
        assert_eq!(c.protocol, 6);
        assert_eq!(c.ext_len, 28);
        assert!(!c.later_fragment);
        assert_eq!(c.rest, &[0xaa, 0xbb]);
    }

    #[test]
    fn walk_stops_at_later_fragment_and_esp() {
        let b = [6u8, 0, 0, 0x08, 0, 0, 0, 1, 0xaa];
        let c = walk(FRAGMENT, &b).unwrap();
        assert_eq!((c.protocol, c.ext_len, c.later_fragment), (6, 8, true));
        // First fragment: the walk goes on to the upper layer.
        let b = [ESP, 0, 0, 0x01, 0, 0, 0, 1, 0xaa];
        let c = walk(FRAGMENT, &b).unwrap();
        assert_eq!((c.protocol, c.ext_len, c.later_fragment), (ESP, 8, false));
        let c = walk(NO_NEXT, &[]).unwrap();
        assert_eq!((c.protocol, c.ext_len), (NO_NEXT, 0));
    }
}
