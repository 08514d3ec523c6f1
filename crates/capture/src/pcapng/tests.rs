//! pcapng blocks built by hand, in both byte orders.

use super::*;
use crate::testutil::Ng;

/// Runs the decoder over a whole buffer, collecting steps until it ends or fails.
type Packets = Vec<(Meta, Vec<u8>)>;

fn run(bytes: &[u8]) -> (Packets, Option<Result<Step, Fail>>) {
    let mut d = NgDecoder::new();
    let mut at = 0;
    let mut out = Vec::new();
    while at < bytes.len() {
        match d.step(&bytes[at..]) {
            Ok(Step::Packet { meta, data, consumed }) => {
                out.push((meta, bytes[at..][data].to_vec()));
                at += consumed;
            }
            Ok(Step::Skip(n)) => at += n,
            other => return (out, Some(other)),
        }
    }
    (out, None)
}

#[test]
fn two_interfaces_with_their_own_link_and_resolution() {
    for e in [Endian::Little, Endian::Big] {
        let ng = Ng(e);
        let mut f = ng.shb();
        f.extend(ng.idb(1, None)); // Ethernet, microseconds
        f.extend(ng.idb(101, Some(9))); // raw IP, nanoseconds
        f.extend(ng.epb(0, 1_500_000, &[1, 2, 3], 60));
        f.extend(ng.epb(1, 1_500_000_123, &[4, 5, 6, 7, 8], 5));
        let (pkts, end) = run(&f);
        assert_eq!(end, None);
        assert_eq!(pkts.len(), 2);
        assert_eq!(
            pkts[0].0,
            Meta {
                ts_ns: 1_500_000_000,
                link: LinkType::Ethernet,
                orig_len: 60
            }
        );
        assert_eq!(pkts[0].1, [1, 2, 3]);
        assert_eq!(
            pkts[1].0,
            Meta {
                ts_ns: 1_500_000_123,
                link: LinkType::RawIp,
                orig_len: 5
            }
        );
        assert_eq!(pkts[1].1, [4, 5, 6, 7, 8]);
    }
}

#[test]
fn sections_switch_byte_order_and_reset_interfaces() {
    let (le, be) = (Ng(Endian::Little), Ng(Endian::Big));
    let mut f = le.shb();
    f.extend(le.idb(1, None));
    f.extend(le.epb(0, 1, &[1], 1));
    f.extend(be.shb());
    f.extend(be.idb(229, Some(0x80 | 10))); // 2^-10 s
    f.extend(be.block(0x0bad, &[1, 2, 3, 4])); // custom block: skipped
    f.extend(be.epb(0, 1024, &[0x60], 1));
    let (pkts, end) = run(&f);
    assert_eq!(end, None);
    assert_eq!(
        pkts.iter().map(|p| p.0).collect::<Vec<_>>(),
        [
            Meta {
                ts_ns: 1_000,
                link: LinkType::Ethernet,
                orig_len: 1
            },
            Meta {
                ts_ns: 1_000_000_000,
                link: LinkType::Ipv6,
                orig_len: 1
            },
        ]
    );
    // Interface 1 of the first section is gone in the second.
    let mut g = f.clone();
    g.extend(be.epb(1, 0, &[], 0));
    assert_eq!(
        run(&g).1,
        Some(Err(Fail::Corrupt(Corruption::UnknownInterface {
            id: 1,
            count: 1
        })))
    );
}

#[test]
fn simple_and_obsolete_packet_blocks() {
    let ng = Ng(Endian::Little);
    let mut f = ng.shb();
    let mut idb = ng.u16(1).to_vec();
    idb.extend_from_slice(&[0, 0]);
    idb.extend_from_slice(&ng.u32(4)); // snap length 4
    f.extend(ng.block(IDB_TYPE, &idb));
    f.extend(ng.epb(0, 7, &[9], 1));
    let mut spb = ng.u32(6).to_vec();
    spb.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
    f.extend(ng.block(SPB_TYPE, &spb));
    let mut pb = ng.u16(0).to_vec();
    pb.extend_from_slice(&ng.u16(3)); // 3 drops
    pb.extend_from_slice(&ng.u32(0));
    pb.extend_from_slice(&ng.u32(8));
    pb.extend_from_slice(&ng.u32(2));
    pb.extend_from_slice(&ng.u32(2));
    pb.extend_from_slice(&[0xaa, 0xbb]);
    f.extend(ng.block(PB_TYPE, &pb));
    let mut isb = ng.u32(0).to_vec();
    isb.extend_from_slice(&[0; 8]);
    isb.extend_from_slice(&ng.option(
        ISB_IFDROP,
        &ng.u32(5).into_iter().chain([0; 4]).collect::<Vec<_>>(),
    ));
    f.extend(ng.block(ISB_TYPE, &isb));
    let mut d = NgDecoder::new();
    let mut at = 0;
    let mut got = Vec::new();
    while at < f.len() {
        match d.step(&f[at..]).unwrap() {
            Step::Packet { meta, data, consumed } => {
                got.push((meta.ts_ns, f[at..][data].to_vec()));
                at += consumed;
            }
            Step::Skip(n) => at += n,
            s => panic!("{s:?}"),
        }
    }
    // The SPB takes the previous timestamp and is cut to the snap length.
    assert_eq!(
        got,
        [
            (7_000, vec![9]),
            (7_000, vec![1, 2, 3, 4]),
            (8_000, vec![0xaa, 0xbb])
        ]
    );
    assert_eq!(d.dropped(), 3 + 5);
}

#[test]
fn unsupported_link_type_is_reported_once() {
    let ng = Ng(Endian::Little);
    let mut f = ng.shb();
    f.extend(ng.idb(127, None));
    let mut d = NgDecoder::new();
    let mut at = 0;
    for _ in 0..2 {
        let Step::Skip(n) = d.step(&f[at..]).unwrap() else {
            panic!()
        };
        at += n;
    }
    let p = ng.epb(0, 0, &[1], 1);
    assert_eq!(
        d.step(&p),
        Ok(Step::Unsupported {
            dlt: 127,
            interface: 0,
            first: true,
            consumed: 36
        })
    );
    assert_eq!(
        d.step(&p),
        Ok(Step::Unsupported {
            dlt: 127,
            interface: 0,
            first: false,
            consumed: 36
        })
    );
}

#[test]
fn damaged_blocks() {
    let ng = Ng(Endian::Little);
    let shb = ng.shb();
    let mut d = NgDecoder::new();
    assert_eq!(
        d.step(&shb[..5]),
        Ok(Step::Need {
            want: Want::BlockHeader,
            need: 8
        })
    );
    assert_eq!(
        d.step(&shb[..10]),
        Ok(Step::Need {
            want: Want::BlockHeader,
            need: 12
        })
    );
    assert_eq!(
        d.step(&shb[..20]),
        Ok(Step::Need {
            want: Want::Block { declared: 28 },
            need: 28
        })
    );
    let mut bad = shb.clone();
    bad[8] = 0;
    assert_eq!(
        d.step(&bad),
        Err(Fail::Corrupt(Corruption::ByteOrderMagic([0, 0x3c, 0x2b, 0x1a])))
    );
    let mut bad = shb.clone();
    bad[12] = 2;
    assert_eq!(
        d.step(&bad),
        Err(Fail::Corrupt(Corruption::Version {
            format: "pcapng",
            major: 2,
            minor: 0
        }))
    );
    let mut bad = shb.clone();
    bad[24] = 32;
    assert_eq!(
        d.step(&bad),
        Err(Fail::Corrupt(Corruption::TrailerMismatch {
            header: 28,
            trailer: 32
        }))
    );
    assert_eq!(d.step(&shb), Ok(Step::Skip(28)));
    let mut blk = ng.block(IDB_TYPE, &[1, 0, 0, 0, 0, 0, 0, 0]);
    blk[4] = 13;
    assert_eq!(
        d.step(&blk),
        Err(Fail::Corrupt(Corruption::BlockLength {
            block_type: 1,
            len: 13
        }))
    );
    blk[4..8].copy_from_slice(&0xffff_fffcu32.to_le_bytes());
    assert!(matches!(
        d.step(&blk),
        Err(Fail::Corrupt(Corruption::BlockTooLarge { .. }))
    ));
    let short = ng.block(IDB_TYPE, &[1, 0, 0, 0]);
    assert_eq!(
        d.step(&short),
        Err(Fail::Corrupt(Corruption::BlockTooShort {
            block: "interface description block",
            len: 16,
            need: 20
        }))
    );
    assert_eq!(d.step(&ng.idb(1, None)), Ok(Step::Skip(20)));
    let mut epb = ng.epb(0, 0, &[1, 2, 3, 4], 4);
    epb[20] = 9; // caplen 9 > room 4
    assert_eq!(
        d.step(&epb),
        Err(Fail::Corrupt(Corruption::PacketOverflowsBlock {
            caplen: 9,
            room: 4
        }))
    );
}

#[test]
fn timestamp_units() {
    assert_eq!(TsUnit::from_tsresol(6), TsUnit::Mul(1_000));
    assert_eq!(TsUnit::from_tsresol(9), TsUnit::Mul(1));
    assert_eq!(TsUnit::from_tsresol(12), TsUnit::Div(1_000));
    assert_eq!(TsUnit::from_tsresol(127), TsUnit::Zero);
    assert_eq!(TsUnit::from_tsresol(12).to_ns(5_000), 5);
    assert_eq!(TsUnit::from_tsresol(0x80 | 20).to_ns(1 << 20), 1_000_000_000);
    assert_eq!(TsUnit::from_tsresol(0).to_ns(u64::MAX), u64::MAX);
    assert_eq!(TsUnit::from_tsresol(0x80).to_ns(u64::MAX), u64::MAX);
}

#[test]
fn malformed_options_keep_defaults() {
    let ng = Ng(Endian::Little);
    let mut body = ng.u16(1).to_vec();
    body.extend_from_slice(&[0; 6]);
    body.extend_from_slice(&ng.u16(IF_TSRESOL));
    body.extend_from_slice(&ng.u16(200)); // longer than the block
    body.extend_from_slice(&[9, 0, 0, 0]);
    let mut d = NgDecoder::new();
    d.step(&ng.shb()).unwrap();
    d.step(&ng.block(IDB_TYPE, &body)).unwrap();
    assert_eq!(d.interfaces[0].unit, TsUnit::Mul(1_000));
}
