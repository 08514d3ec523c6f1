//! IPv6 fixed headers. Extension headers are in [`crate::ipv6ext`].

use std::net::Ipv6Addr;

use crate::bytes::{be16, be32, set_be16, set_be32, Field};
use crate::error::{need, Layer, ParseError};

mod field {
    use super::Field;
    pub const VER_TC_FLOW: Field = 0..4;
    pub const LENGTH: Field = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Field = 8..24;
    pub const DST_ADDR: Field = 24..40;
}

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// A read/write view of an IPv6 packet.
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

    /// Fails with `Truncated` when the buffer cannot hold the 40-byte header.
    /// A payload length beyond the buffer is fine (snap length).
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(Layer::Ipv6, self.buffer.as_ref(), HEADER_LEN)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TC_FLOW.start] >> 4
    }

    pub fn traffic_class(&self) -> u8 {
        (be16(self.buffer.as_ref(), field::VER_TC_FLOW.start) >> 4) as u8
    }

    /// The two ECN bits of the traffic class.
    #[inline]
    pub fn ecn(&self) -> u8 {
        (self.buffer.as_ref()[field::VER_TC_FLOW.start + 1] >> 4) & 0x03
    }

    pub fn flow_label(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VER_TC_FLOW.start) & 0x000f_ffff
    }

    /// The payload length field; 0 means a jumbogram (see [`payload`](Packet::payload)).
    #[inline]
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.addr(field::SRC_ADDR.start))
    }

    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.addr(field::DST_ADDR.start))
    }

    #[inline]
    fn addr(&self, at: usize) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[at..at + 16]);
        a
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The payload the length field declares, cut to the captured bytes;
    /// for a jumbogram (length 0) everything captured after the header.
    pub fn payload(&self) -> &'a [u8] {
        let data = self.buffer.as_ref();
        let rest = &data[HEADER_LEN..];
        match self.payload_len() {
            0 => rest,
            n => &rest[..usize::from(n).min(rest.len())],
        }
    }

    /// Every captured byte after the fixed header.
    #[inline]
    pub fn after_header(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version 6, the traffic class and the flow label.
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let v = (6 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        set_be32(self.buffer.as_mut(), field::VER_TC_FLOW.start, v);
    }

    pub fn set_payload_len(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::LENGTH.start, v);
    }

    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = v;
    }

    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }

    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static PACKET: [u8; 44] = [
        0x6b, 0x2a, 0xbc, 0xde, // v6, TC 0xb2 (ECN 2), flow 0xabcde
        0x00, 0x04, 0x11, 0x40, // payload 4, UDP, hop limit 64
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, // src
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, // dst
        0xde, 0xad, 0xbe, 0xef,
    ];

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xb2);
        assert_eq!(p.ecn(), 2);
        assert_eq!(p.flow_label(), 0xabcde);
        assert_eq!(p.payload_len(), 4);
        assert_eq!(p.next_header(), 17);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
    }

    #[test]
    fn test_construct() {
        let mut b = [0u8; 44];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_version_tc_flow(0xb2, 0xabcde);
        p.set_payload_len(4);
        p.set_next_header(17);
        p.set_hop_limit(64);
        p.set_src_addr("2001:db8::1".parse().unwrap());
        p.set_dst_addr("2001:db8::2".parse().unwrap());
        p.payload_mut().copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(b, PACKET);
    }

    #[test]
    fn jumbogram_payload_is_everything_captured() {
        let mut b = PACKET;
        b[5] = 0;
        assert_eq!(Packet::new_checked(&b[..]).unwrap().payload().len(), 4);
    }

    #[test]
    fn test_truncated() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&PACKET[..len]).unwrap_err(),
                ParseError::truncated(Layer::Ipv6, 40, len)
            );
        }
        assert_eq!(
            Packet::new_checked(&PACKET[..42]).unwrap().payload(),
            &[0xde, 0xad]
        );
    }
}
