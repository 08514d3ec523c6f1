//! IPv4 headers, options included.

use std::net::Ipv4Addr;

use crate::bytes::{be16, be32, set_be16, Field};
use crate::checksum;
use crate::error::{need, Layer, Malformation, ParseError};

mod field {
    use super::Field;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC_ADDR: Field = 12..16;
    pub const DST_ADDR: Field = 16..20;
}

/// Length of the IPv4 header without options.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// A read/write view of an IPv4 packet.
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

    /// Ensures every getter and `payload` stay in bounds.
    ///
    /// Fails with `Truncated` when the buffer cannot hold the fixed header or
    /// the options IHL announces, and with `Malformed` when IHL is below 5 or
    /// the total length is below the header length (`set_header_len` and
    /// `set_total_len` undo those). A total length *beyond* the buffer is
    /// fine: that is a capture cut by its snap length.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let data = self.buffer.as_ref();
        need(Layer::Ipv4, data, HEADER_LEN)?;
        let ihl = data[field::VER_IHL] & 0x0f;
        if ihl < 5 {
            return Err(ParseError::malformed(
                Layer::Ipv4,
                Malformation::Ipv4HeaderLen(ihl),
            ));
        }
        let header_len = usize::from(ihl) * 4;
        need(Layer::Ipv4, data, header_len)?;
        let total = self.total_len();
        if usize::from(total) < header_len {
            return Err(ParseError::malformed(
                Layer::Ipv4,
                Malformation::Ipv4TotalLen {
                    total,
                    header: ihl * 4,
                },
            ));
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4).
    #[inline]
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    /// The two ECN bits of the TOS byte.
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }

    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT.start)
    }

    pub fn dont_frag(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & FLAG_DF != 0
    }

    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & FLAG_MF != 0
    }

    /// Fragment offset in bytes (the field counts 8-byte units).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (be16(self.buffer.as_ref(), field::FLG_OFF.start) & OFFSET_MASK) << 3
    }

    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(be32(self.buffer.as_ref(), field::SRC_ADDR.start))
    }

    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(be32(self.buffer.as_ref(), field::DST_ADDR.start))
    }

    /// Whether the header checksum is correct (parsing never checks it: offloaded checksums).
    pub fn verify_checksum(&self) -> bool {
        let data = self.buffer.as_ref();
        checksum::finish(checksum::sum(0, &data[..usize::from(self.header_len())])) == 0
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The options between the fixed header and the payload.
    pub fn options(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.header_len())]
    }

    /// The payload as the total length declares it, cut to the captured bytes.
    pub fn payload(&self) -> &'a [u8] {
        let data = self.buffer.as_ref();
        let end = usize::from(self.total_len()).min(data.len());
        &data[usize::from(self.header_len())..end]
    }

    /// Every captured byte after the header, whatever the total length says.
    ///
    /// The parser locates the next header here: headers are found by their
    /// own lengths, the IP length only sizes the packet.
    #[inline]
    pub fn after_header(&self) -> &'a [u8] {
        &self.buffer.as_ref()[usize::from(self.header_len())..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version 4 and the header length in bytes (rounded down to 4).
    pub fn set_version_and_header_len(&mut self, header_len: u8) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) & 0x0f);
    }

    pub fn set_dscp_ecn(&mut self, dscp: u8, ecn: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = (dscp << 2) | (ecn & 0x03);
    }

    pub fn set_total_len(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::LENGTH.start, v);
    }

    pub fn set_ident(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::IDENT.start, v);
    }

    /// Sets DF, MF and the fragment offset given in bytes (rounded down to 8).
    pub fn set_frag(&mut self, dont_frag: bool, more_frags: bool, offset_bytes: u16) {
        let mut v = (offset_bytes >> 3) & OFFSET_MASK;
        if dont_frag {
            v |= FLAG_DF;
        }
        if more_frags {
            v |= FLAG_MF;
        }
        set_be16(self.buffer.as_mut(), field::FLG_OFF.start, v);
    }

    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }

    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }

    pub fn set_checksum(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::CHECKSUM.start, v);
    }

    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// Computes and stores the header checksum over the header length.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = usize::from(self.header_len());
        let c = checksum::finish(checksum::sum(0, &self.buffer.as_ref()[..hl]));
        self.set_checksum(c);
    }

    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = usize::from(self.header_len());
        &mut self.buffer.as_mut()[HEADER_LEN..hl]
    }

    /// Everything after the header (the builder sizes the buffer exactly).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = usize::from(self.header_len());
        &mut self.buffer.as_mut()[hl..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 24-byte header (one NOP-padded option word), UDP, 4 payload bytes.
    static PACKET: [u8; 28] = [
        0x46, 0x21, 0x00, 0x1c, // v4 IHL 6, DSCP 8 ECN 1, total 28
        0x12, 0x34, 0x20, 0x02, // ident, MF + offset 2 (16 bytes)
        0x40, 0x11, 0x00, 0x00, // TTL 64, UDP, checksum
        0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x02, // addresses
        0x01, 0x01, 0x01, 0x00, // options: NOP NOP NOP EOL
        0xde, 0xad, 0xbe, 0xef,
    ];

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.dscp(), 8);
        assert_eq!(p.ecn(), 1);
        assert_eq!(p.total_len(), 28);
        assert_eq!(p.ident(), 0x1234);
        assert!(!p.dont_frag());
        assert!(p.more_frags());
        assert_eq!(p.frag_offset(), 16);
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), 17);
        assert_eq!(p.src_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(p.options(), &[1, 1, 1, 0]);
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
    }

    #[test]
    fn test_construct() {
        let mut b = [0u8; 28];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_version_and_header_len(24);
        p.set_dscp_ecn(8, 1);
        p.set_total_len(28);
        p.set_ident(0x1234);
        p.set_frag(false, true, 16);
        p.set_ttl(64);
        p.set_protocol(17);
        p.set_src_addr(Ipv4Addr::new(10, 0, 0, 1));
        p.set_dst_addr(Ipv4Addr::new(10, 0, 0, 2));
        p.options_mut().copy_from_slice(&[1, 1, 1, 0]);
        p.payload_mut().copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(b, PACKET);
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.fill_checksum();
        assert!(p.verify_checksum());
    }

    #[test]
    fn snap_length_cut_payload_is_fine() {
        let p = Packet::new_checked(&PACKET[..26]).unwrap();
        assert_eq!(p.payload(), &[0xde, 0xad]);
    }

    #[test]
    fn padding_beyond_total_length_is_not_payload() {
        let mut b = PACKET.to_vec();
        b.extend_from_slice(&[0; 6]);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload().len(), 4);
        assert_eq!(p.after_header().len(), 10);
    }

    #[test]
    fn test_truncated() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&PACKET[..len]).unwrap_err(),
                ParseError::truncated(Layer::Ipv4, 20, len)
            );
        }
        // The options IHL announces are cut.
        assert_eq!(
            Packet::new_checked(&PACKET[..22]).unwrap_err(),
            ParseError::truncated(Layer::Ipv4, 24, 22)
        );
    }

    #[test]
    fn test_impossible_len() {
        let mut b = PACKET;
        b[0] = 0x44;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            ParseError::malformed(Layer::Ipv4, Malformation::Ipv4HeaderLen(4))
        );
        let mut b = PACKET;
        b[3] = 20;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            ParseError::malformed(
                Layer::Ipv4,
                Malformation::Ipv4TotalLen {
                    total: 20,
                    header: 24
                }
            )
        );
    }
}
