//! BSD loopback encapsulation: a 4-byte address family before the IP packet.
//!
//! DLT_NULL (0) stores the family in the *capturing host's* byte order,
//! which the file does not record, so [`Packet::family`] guesses the way
//! libpcap does: families are small, so a value whose low half is zero was
//! written big-endian. DLT_LOOP (108) always uses network order.

use crate::bytes::{be32, set_be32, Field, Rest};
use crate::error::{need, Layer, ParseError};

/// Address-family values that announce IP across the BSDs, Linux and macOS.
pub mod family {
    pub const INET: u32 = 2;
    pub const INET6_LINUX: u32 = 10;
    pub const INET6_BSD: u32 = 24;
    pub const INET6_FREEBSD: u32 = 28;
    pub const INET6_DARWIN: u32 = 30;

    /// Whether `f` is one of the platforms' AF_INET6 values.
    pub fn is_inet6(f: u32) -> bool {
        matches!(f, INET6_LINUX | INET6_BSD | INET6_FREEBSD | INET6_DARWIN)
    }
}

mod field {
    use super::{Field, Rest};
    pub const FAMILY: Field = 0..4;
    pub const PAYLOAD: Rest = FAMILY.end..;
}

/// Length of the loopback header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A read/write view of a loopback header and what follows.
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

    /// Fails with `Truncated` when the buffer cannot hold the 4-byte family.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(Layer::Loopback, self.buffer.as_ref(), HEADER_LEN)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The family of a DLT_NULL frame, byte order guessed (see the module doc).
    #[inline]
    pub fn family(&self) -> u32 {
        let be = be32(self.buffer.as_ref(), field::FAMILY.start);
        let le = be.swap_bytes();
        if le & 0xffff == 0 && le != 0 {
            be
        } else {
            le
        }
    }

    /// The family of a DLT_LOOP frame (network byte order).
    #[inline]
    pub fn family_network_order(&self) -> u32 {
        be32(self.buffer.as_ref(), field::FAMILY.start)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes the family little-endian, as DLT_NULL captures on x86 hosts carry it.
    pub fn set_family_little_endian(&mut self, f: u32) {
        set_be32(self.buffer.as_mut(), field::FAMILY.start, f.swap_bytes());
    }

    /// Writes the family in network order (DLT_LOOP).
    pub fn set_family_network_order(&mut self, f: u32) {
        set_be32(self.buffer.as_mut(), field::FAMILY.start, f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_deconstruct_both_orders() {
        let le = [2u8, 0, 0, 0, 0x45];
        let p = Packet::new_checked(&le[..]).unwrap();
        assert_eq!(p.family(), family::INET);
        assert_eq!(p.payload(), &[0x45]);
        let be = [0u8, 0, 0, 30];
        let p = Packet::new_checked(&be[..]).unwrap();
        assert_eq!(p.family(), family::INET6_DARWIN);
        assert_eq!(p.family_network_order(), 30);
    }

    #[test]
    fn test_construct() {
        let mut b = [0u8; 4];
        Packet::new_unchecked(&mut b[..]).set_family_little_endian(24);
        assert_eq!(b, [24, 0, 0, 0]);
        Packet::new_unchecked(&mut b[..]).set_family_network_order(24);
        assert_eq!(b, [0, 0, 0, 24]);
    }

    #[test]
    fn test_truncated() {
        assert_eq!(
            Packet::new_checked(&[2u8, 0][..]).unwrap_err(),
            ParseError::truncated(Layer::Loopback, 4, 2)
        );
    }

    #[test]
    fn inet6_values() {
        assert!([10, 24, 28, 30].iter().all(|&f| family::is_inet6(f)));
        assert!(!family::is_inet6(2));
    }
}
