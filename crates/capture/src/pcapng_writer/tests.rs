//! The writer against our own reader (an independent decoder of the same
//! format, tested on hand-built blocks and real captures), by example and
//! on random packets over several interfaces and link types.

use proptest::prelude::*;

use super::*;
use crate::{PacketSource, SliceReader};

/// What the reader gives back: (ts, link, data, orig_len) per packet.
fn read_back(bytes: &[u8]) -> Vec<(u64, LinkType, Vec<u8>, u32)> {
    let mut r = SliceReader::new(bytes).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        assert_eq!(p.index, out.len() as u64);
        out.push((p.ts_ns, p.link, p.data.to_vec(), p.orig_len));
    }
    out
}

#[test]
fn section_header_bytes() {
    let b = PcapngWriter::new(Vec::new()).unwrap().into_inner().unwrap();
    assert_eq!(&b[..4], &[0x0a, 0x0d, 0x0d, 0x0a]);
    let len = u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize;
    assert_eq!(len, b.len());
    assert_eq!(&b[8..12], &[0x4d, 0x3c, 0x2b, 0x1a]);
    assert_eq!(&b[12..16], &[1, 0, 0, 0]);
    assert_eq!(&b[16..24], &[0xff; 8]);
    // shb_userappl, then the end of options, then the trailer.
    assert_eq!(&b[24..26], &[4, 0]);
    let appl_len = u16::from_le_bytes([b[26], b[27]]) as usize;
    assert_eq!(&b[28..28 + appl_len], USER_APPL.as_bytes());
    assert!(USER_APPL.starts_with("clarion 0."));
    assert_eq!(&b[len - 8..], &[0, 0, 0, 0, len as u8, 0, 0, 0]);
}

#[test]
fn packets_on_two_interfaces_read_back() {
    let mut w = PcapngWriter::new(Vec::new()).unwrap();
    let eth = w.add_interface(LinkType::Ethernet, 65_535, Some("eth0")).unwrap();
    w.write_packet(eth, 1_700_000_000_123_456_789, &[1, 2, 3], 60)
        .unwrap();
    let raw = w.add_interface(LinkType::RawIp, 0, None).unwrap();
    w.write_packet_with_comment(raw, 5, &[0x45; 21], 21, Some("héllo"))
        .unwrap();
    w.write_packet(eth, u64::MAX, &[], 0).unwrap();
    assert_eq!((eth, raw, w.interfaces()), (0, 1, 2));
    let n = w.bytes_written();
    let b = w.into_inner().unwrap();
    assert_eq!(n, b.len() as u64);
    assert_eq!(
        read_back(&b),
        [
            (1_700_000_000_123_456_789, LinkType::Ethernet, vec![1, 2, 3], 60),
            (5, LinkType::RawIp, vec![0x45; 21], 21),
            (u64::MAX, LinkType::Ethernet, vec![], 0),
        ]
    );
}

#[test]
fn unknown_interface_is_refused_and_nothing_written() {
    let mut w = PcapngWriter::new(Vec::new()).unwrap();
    let before = w.bytes_written();
    let e = w.write_packet(0, 1, &[1], 1).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("interface 0"), "{e}");
    assert_eq!(w.bytes_written(), before);
    assert_eq!(w.into_inner().unwrap().len() as u64, before);
}

#[test]
fn oversized_block_is_refused() {
    let mut w = PcapngWriter::new(Vec::new()).unwrap();
    w.add_interface(LinkType::Ethernet, 0, None).unwrap();
    let big = vec![0u8; MAX_RECORD as usize];
    let e = w.write_packet(0, 1, &big, 1).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn long_comment_is_cut_at_a_char_boundary() {
    // 'é' is two bytes: 40,000 of them straddle the 65,535 limit.
    let long = "é".repeat(40_000);
    assert_eq!(cut(&long).len(), 65_534);
    let mut w = PcapngWriter::new(Vec::new()).unwrap();
    w.add_interface(LinkType::Ethernet, 0, None).unwrap();
    let before = w.bytes_written();
    w.write_packet_with_comment(0, 1, &[7; 5], 5, Some(&long))
        .unwrap();
    assert_eq!(w.bytes_written() - before, packet_block_len(5, Some(&long)));
    let b = w.into_inner().unwrap();
    assert_eq!(read_back(&b), [(1, LinkType::Ethernet, vec![7; 5], 5)]);
}

fn link() -> impl Strategy<Value = LinkType> {
    prop::sample::select(LinkType::ALL.to_vec())
}

proptest! {
    /// Random interfaces and packets: the reader returns every packet, in
    /// order, with its interface's link type, and the byte counts agree
    /// with the output and with `packet_block_len`.
    #[test]
    fn random_packets_read_back(
        links in prop::collection::vec((link(), any::<u32>(), prop::option::of("[a-z0-9]{0,12}")), 1..5),
        packets in prop::collection::vec(
            (any::<prop::sample::Index>(), any::<u64>(), prop::collection::vec(any::<u8>(), 0..300),
             any::<u32>(), prop::option::of(".{0,40}")),
            0..40),
    ) {
        let mut w = PcapngWriter::new(Vec::new()).unwrap();
        for (i, (l, snap, name)) in links.iter().enumerate() {
            prop_assert_eq!(w.add_interface(*l, *snap, name.as_deref()).unwrap(), i as u32);
        }
        let mut want = Vec::new();
        for (iface, ts, data, orig, comment) in &packets {
            let i = iface.index(links.len());
            let before = w.bytes_written();
            w.write_packet_with_comment(i as u32, *ts, data, *orig, comment.as_deref()).unwrap();
            prop_assert_eq!(w.bytes_written() - before, packet_block_len(data.len(), comment.as_deref()));
            want.push((*ts, links[i].0, data.clone(), *orig));
        }
        let n = w.bytes_written();
        let b = w.into_inner().unwrap();
        prop_assert_eq!(n, b.len() as u64);
        prop_assert_eq!(read_back(&b), want);
    }
}
