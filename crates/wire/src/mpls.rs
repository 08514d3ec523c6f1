//! MPLS label stacks (RFC 3032), EtherTypes 0x8847 (unicast) and 0x8848
//! (multicast).
//!
//! A stack is 4-byte entries up to the one with the bottom-of-stack bit;
//! nothing says what follows it, so the payload is guessed from its first
//! nibble, as routers and Wireshark do: 4 is IPv4, 6 is IPv6, anything
//! else (a pseudowire control word, an Ethernet frame) is *not IP*.
//! The walk costs one bounds check per label and never loops past the
//! captured bytes.

use crate::bytes::be32;
use crate::error::{need, Layer, ParseError};

/// Length of one label stack entry.
pub const ENTRY_LEN: usize = 4;

const BOTTOM_OF_STACK: u32 = 0x100;

/// Whether `t` announces an MPLS label stack.
#[inline(always)]
pub fn is_mpls(t: u16) -> bool {
    matches!(t, 0x8847 | 0x8848)
}

/// One label stack entry, read from the first 4 bytes of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry(u32);

impl Entry {
    /// The entry at the start of `buf`; `Truncated` if it was not captured.
    pub fn parse(buf: &[u8]) -> Result<Entry, ParseError> {
        need(Layer::Mpls, buf, ENTRY_LEN)?;
        Ok(Entry(be32(buf, 0)))
    }

    /// The 20-bit label.
    pub fn label(self) -> u32 {
        self.0 >> 12
    }

    /// Whether this is the last entry of the stack.
    pub fn is_bottom(self) -> bool {
        self.0 & BOTTOM_OF_STACK != 0
    }

    pub fn ttl(self) -> u8 {
        self.0 as u8
    }
}

/// The bytes after the bottom of the stack that starts `buf`.
///
/// `Truncated` when the capture ends inside the stack.
#[inline]
pub fn skip_stack(mut buf: &[u8]) -> Result<&[u8], ParseError> {
    // Terminates: each step consumes 4 bytes of a finite slice or fails.
    loop {
        let e = Entry::parse(buf)?;
        buf = &buf[ENTRY_LEN..];
        if e.is_bottom() {
            return Ok(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_deconstruct() {
        // Label 16, TTL 64, then label 1000 bottom of stack, TTL 1.
        let s = [0x00, 0x01, 0x00, 0x40, 0x00, 0x3e, 0x81, 0x01, 0x45];
        let e = Entry::parse(&s).unwrap();
        assert_eq!((e.label(), e.is_bottom(), e.ttl()), (16, false, 64));
        let e = Entry::parse(&s[4..]).unwrap();
        assert_eq!((e.label(), e.is_bottom(), e.ttl()), (1000, true, 1));
        assert_eq!(skip_stack(&s).unwrap(), &[0x45]);
    }

    #[test]
    fn test_truncated() {
        // No bottom of stack before the end.
        let s = [0x00, 0x01, 0x00, 0x40, 0x00, 0x3e];
        assert_eq!(skip_stack(&s), Err(ParseError::truncated(Layer::Mpls, 4, 2)));
        assert_eq!(skip_stack(&[]), Err(ParseError::truncated(Layer::Mpls, 4, 0)));
        assert!(is_mpls(0x8847) && is_mpls(0x8848) && !is_mpls(0x0800));
    }
}
