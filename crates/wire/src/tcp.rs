//! TCP headers and the two options Clarion reads (MSS, window scale).

use crate::bytes::{be16, be32, set_be16, set_be32, Field};
use crate::error::{need, Layer, Malformation, ParseError};

mod field {
    use super::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const SEQ_NUM: Field = 4..8;
    pub const ACK_NUM: Field = 8..12;
    pub const DATA_OFF: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WIN_SIZE: Field = 14..16;
    pub const CHECKSUM: Field = 16..18;
    pub const URGENT: Field = 18..20;
}

/// Length of the TCP header without options.
pub const HEADER_LEN: usize = field::URGENT.end;

/// RFC 7323: shifts above 14 are treated as 14.
pub const MAX_WINDOW_SCALE: u8 = 14;

/// A read/write view of a TCP segment.
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

    /// Fails with `Truncated` when the fixed 20-byte header is cut and with
    /// `Malformed` when the data offset is below 5 (`set_header_len` undoes it).
    /// Options cut by the snap length are not an error: [`options`](Packet::options)
    /// returns what was captured.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let data = self.buffer.as_ref();
        need(Layer::Tcp, data, HEADER_LEN)?;
        let off = data[field::DATA_OFF] >> 4;
        if off < 5 {
            return Err(ParseError::malformed(
                Layer::Tcp,
                Malformation::TcpDataOffset(off),
            ));
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT.start)
    }

    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT.start)
    }

    #[inline]
    pub fn seq_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ_NUM.start)
    }

    #[inline]
    pub fn ack_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ACK_NUM.start)
    }

    /// Header length in bytes (data offset × 4).
    #[inline]
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[field::DATA_OFF] >> 4) * 4
    }

    /// The flags byte (CWR … FIN), see [`crate::tcp_flags`].
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    #[inline]
    pub fn window_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WIN_SIZE.start)
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    pub fn urgent_at(&self) -> u16 {
        be16(self.buffer.as_ref(), field::URGENT.start)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The captured part of the options area.
    #[inline]
    pub fn options(&self) -> &'a [u8] {
        let data = self.buffer.as_ref();
        let end = usize::from(self.header_len()).min(data.len());
        &data[HEADER_LEN..end]
    }

    /// Window scale (clamped to 14) and MSS options.
    ///
    /// Both are `None` when the options are malformed, since nothing after a
    /// bad length can be trusted. An option cut by the snap length is just
    /// not seen; the ones before it count.
    #[inline]
    pub fn wscale_mss(&self) -> (Option<u8>, Option<u16>) {
        let cut = usize::from(self.header_len()) > self.buffer.as_ref().len();
        let mut rest = self.options();
        let (mut wscale, mut mss) = (None, None);
        while !rest.is_empty() {
            match TcpOption::parse(rest) {
                Ok((_, TcpOption::EndOfList)) => break,
                Ok((next, opt)) => {
                    match opt {
                        TcpOption::WindowScale(s) => wscale = Some(s.min(MAX_WINDOW_SCALE)),
                        TcpOption::MaxSegmentSize(m) => mss = Some(m),
                        _ => {}
                    }
                    rest = next;
                }
                Err(_) if cut => break,
                Err(_) => return (None, None),
            }
        }
        (wscale, mss)
    }

    /// The bytes after the header, as captured.
    pub fn payload(&self) -> &'a [u8] {
        let data = self.buffer.as_ref();
        data.get(usize::from(self.header_len())..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_src_port(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::SRC_PORT.start, v);
    }

    pub fn set_dst_port(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::DST_PORT.start, v);
    }

    pub fn set_seq_number(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::SEQ_NUM.start, v);
    }

    pub fn set_ack_number(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::ACK_NUM.start, v);
    }

    /// Sets the data offset from a length in bytes (rounded down to 4).
    pub fn set_header_len(&mut self, len: u8) {
        self.buffer.as_mut()[field::DATA_OFF] = ((len / 4) & 0x0f) << 4;
    }

    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }

    pub fn set_window_len(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::WIN_SIZE.start, v);
    }

    pub fn set_checksum(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::CHECKSUM.start, v);
    }

    pub fn set_urgent_at(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::URGENT.start, v);
    }

    /// The options area as the data offset sizes it.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.header_len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// One TCP option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpOption<'a> {
    EndOfList,
    NoOperation,
    MaxSegmentSize(u16),
    /// The shift as sent (not clamped).
    WindowScale(u8),
    Unknown {
        kind: u8,
        data: &'a [u8],
    },
}

mod kind {
    pub const END: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WS: u8 = 3;
}

impl<'a> TcpOption<'a> {
    /// Parses the option at the start of `buf`, returning the rest.
    pub fn parse(buf: &'a [u8]) -> Result<(&'a [u8], TcpOption<'a>), ParseError> {
        let bad = |kind| ParseError::malformed(Layer::Tcp, Malformation::TcpOption { kind });
        match *buf {
            [] => Err(ParseError::truncated(Layer::Tcp, 1, 0)),
            [kind::END, ..] => Ok((&[], TcpOption::EndOfList)),
            [kind::NOP, ref rest @ ..] => Ok((rest, TcpOption::NoOperation)),
            [kind, len, ..] => {
                let len = usize::from(len);
                let (Some(body), Some(rest)) = (buf.get(2..len.max(2)), buf.get(len..)) else {
                    return Err(bad(kind));
                };
                let opt = match (kind, body) {
                    (_, _) if len < 2 => return Err(bad(kind)),
                    (kind::MSS, &[a, b]) => TcpOption::MaxSegmentSize(u16::from_be_bytes([a, b])),
                    (kind::WS, &[s]) => TcpOption::WindowScale(s),
                    (kind::MSS | kind::WS, _) => return Err(bad(kind)),
                    (kind, data) => TcpOption::Unknown { kind, data },
                };
                Ok((rest, opt))
            }
            [kind] => Err(bad(kind)),
        }
    }

    /// Bytes this option takes on the wire.
    pub fn buffer_len(&self) -> usize {
        match self {
            TcpOption::EndOfList | TcpOption::NoOperation => 1,
            TcpOption::MaxSegmentSize(_) => 4,
            TcpOption::WindowScale(_) => 3,
            TcpOption::Unknown { data, .. } => 2 + data.len(),
        }
    }

    /// Writes the option at the start of `buf` (which must hold `buffer_len` bytes)
    /// and returns the rest.
    pub fn emit<'b>(&self, buf: &'b mut [u8]) -> &'b mut [u8] {
        let len = self.buffer_len();
        let (head, rest) = buf.split_at_mut(len);
        match *self {
            TcpOption::EndOfList => head[0] = kind::END,
            TcpOption::NoOperation => head[0] = kind::NOP,
            TcpOption::MaxSegmentSize(m) => {
                head[..2].copy_from_slice(&[kind::MSS, 4]);
                head[2..].copy_from_slice(&m.to_be_bytes());
            }
            TcpOption::WindowScale(s) => head.copy_from_slice(&[kind::WS, 3, s]),
            TcpOption::Unknown { kind, data } => {
                head[0] = kind;
                head[1] = len as u8;
                head[2..].copy_from_slice(data);
            }
        }
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp_flags;

    static SEGMENT: [u8; 32] = [
        0x30, 0x39, 0x00, 0x50, // ports 12345 -> 80
        0x01, 0x02, 0x03, 0x04, // seq
        0x0a, 0x0b, 0x0c, 0x0d, // ack
        0x70, 0x12, 0xff, 0xff, // data offset 7, SYN|ACK, window
        0x00, 0x00, 0x00, 0x00, // checksum, urgent
        0x02, 0x04, 0x05, 0xb4, // MSS 1460
        0x01, 0x03, 0x03, 0x07, // NOP, WS 7
        0xaa, 0xbb, 0xcc, 0xdd, // payload
    ];

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&SEGMENT[..]).unwrap();
        assert_eq!(p.src_port(), 12345);
        assert_eq!(p.dst_port(), 80);
        assert_eq!(p.seq_number(), 0x0102_0304);
        assert_eq!(p.ack_number(), 0x0a0b_0c0d);
        assert_eq!(p.header_len(), 28);
        assert_eq!(p.flags(), tcp_flags::SYN | tcp_flags::ACK);
        assert_eq!(p.window_len(), 0xffff);
        assert_eq!(p.options().len(), 8);
        assert_eq!(p.wscale_mss(), (Some(7), Some(1460)));
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
    }

    #[test]
    fn test_construct() {
        let mut b = [0u8; 32];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_src_port(12345);
        p.set_dst_port(80);
        p.set_seq_number(0x0102_0304);
        p.set_ack_number(0x0a0b_0c0d);
        p.set_header_len(28);
        p.set_flags(tcp_flags::SYN | tcp_flags::ACK);
        p.set_window_len(0xffff);
        let rest = TcpOption::MaxSegmentSize(1460).emit(p.options_mut());
        let rest = TcpOption::NoOperation.emit(rest);
        let rest = TcpOption::WindowScale(7).emit(rest);
        assert!(rest.is_empty());
        b[28..].copy_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(b, SEGMENT);
    }

    #[test]
    fn test_truncated() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&SEGMENT[..len]).unwrap_err(),
                ParseError::truncated(Layer::Tcp, 20, len)
            );
        }
        // Options cut by the snap length: the header still parses, the cut option is dropped.
        let p = Packet::new_checked(&SEGMENT[..26]).unwrap();
        assert_eq!(p.options().len(), 6);
        assert_eq!(p.wscale_mss(), (None, Some(1460)));
        let p = Packet::new_checked(&SEGMENT[..24]).unwrap();
        assert_eq!(p.wscale_mss(), (None, Some(1460)));
    }

    #[test]
    fn test_impossible_len() {
        let mut b = SEGMENT;
        b[12] = 0x40;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            ParseError::malformed(Layer::Tcp, Malformation::TcpDataOffset(4))
        );
    }

    #[test]
    fn window_scale_is_clamped() {
        let mut b = SEGMENT;
        b[27] = 200;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap().wscale_mss(),
            (Some(14), Some(1460))
        );
    }

    macro_rules! assert_option_parses {
        ($opt:expr, $bytes:expr) => {{
            let bytes: &[u8] = $bytes;
            assert_eq!(TcpOption::parse(bytes), Ok((&[][..], $opt)));
            let mut buf = vec![0u8; $opt.buffer_len()];
            assert!($opt.emit(&mut buf).is_empty());
            assert_eq!(&buf[..], bytes);
        }};
    }

    #[test]
    fn test_tcp_options() {
        assert_option_parses!(TcpOption::NoOperation, &[0x01]);
        assert_option_parses!(TcpOption::MaxSegmentSize(1500), &[0x02, 0x04, 0x05, 0xdc]);
        assert_option_parses!(TcpOption::WindowScale(12), &[0x03, 0x03, 0x0c]);
        assert_option_parses!(
            TcpOption::Unknown {
                kind: 8,
                data: &[1, 2, 3, 4, 5, 6, 7, 8]
            },
            &[0x08, 0x0a, 1, 2, 3, 4, 5, 6, 7, 8]
        );
        assert_eq!(
            TcpOption::parse(&[0x00, 0x99]),
            Ok((&[][..], TcpOption::EndOfList))
        );
    }

    #[test]
    fn test_malformed_tcp_options() {
        let bad = |kind| {
            Err(ParseError::malformed(
                Layer::Tcp,
                Malformation::TcpOption { kind },
            ))
        };
        assert_eq!(TcpOption::parse(&[0x0c]), bad(12));
        assert_eq!(TcpOption::parse(&[0x0c, 0x05, 0, 0]), bad(12));
        assert_eq!(TcpOption::parse(&[0x0c, 0x01, 0, 0]), bad(12));
        assert_eq!(TcpOption::parse(&[0x0c, 0x00]), bad(12));
        assert_eq!(TcpOption::parse(&[0x02, 0x03, 0x05]), bad(2));
        assert_eq!(TcpOption::parse(&[0x03, 0x04, 0x05, 0x06]), bad(3));
        // A malformed option hides every option of the segment.
        let mut b = SEGMENT;
        b[25] = 0x01;
        b[26] = 0x22;
        assert_eq!(Packet::new_checked(&b[..]).unwrap().wscale_mss(), (None, None));
    }
}
