//! Hostile and damaged datagrams: random bytes, every truncation and
//! every single-byte corruption of real datagrams are an error or a valid
//! decode, never a panic; and the decoder's next datagram is unaffected.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use clarion_headers::{
    decode_datagram, Decoder, EncoderConfig, HeaderRecord, HeadersError, HEADER_LEN, MAGIC,
};
use common::{arb_records, captures_dir, encode_all, load};
use proptest::prelude::*;

/// A decode that succeeded must describe records the bytes could hold.
fn check(d: &[u8]) {
    let mut out = Vec::new();
    if let Ok(h) = decode_datagram(d, &mut out) {
        assert_eq!(usize::from(h.count), out.len());
        assert_eq!(usize::from(h.length), d.len());
    } else {
        assert!(out.is_empty(), "records left behind by a failed decode");
    }
}

/// Real datagrams: a few from pathspider_real, or generated ones.
fn sample_datagrams() -> Vec<Vec<u8>> {
    let recs: Vec<HeaderRecord> = match captures_dir() {
        Some(dir) => load(&dir.join("pathspider_real.pcap"))
            .iter()
            .take(2000)
            .enumerate()
            .map(|(i, (_, p))| HeaderRecord::from_packet(p, (i % 3) as u16, 1))
            .collect(),
        None => {
            let mut runner = proptest::test_runner::TestRunner::deterministic();
            use proptest::strategy::ValueTree;
            arb_records(2000).new_tree(&mut runner).unwrap().current()
        }
    };
    let (dgrams, _) = encode_all(&recs, EncoderConfig::default());
    // First, middle and last: the last one is part-filled.
    let n = dgrams.len();
    vec![dgrams[0].clone(), dgrams[n / 2].clone(), dgrams[n - 1].clone()]
}

#[test]
fn every_truncation_is_an_error() {
    for d in sample_datagrams() {
        for cut in 0..d.len() {
            let mut out = Vec::new();
            let e = decode_datagram(&d[..cut], &mut out).unwrap_err();
            // Cutting never goes unnoticed: the header's length says more.
            assert!(
                matches!(e, HeadersError::ShortHeader { .. } | HeadersError::Length { .. }),
                "cut at {cut}: {e}"
            );
            assert!(out.is_empty());
        }
    }
}

#[test]
fn every_single_byte_corruption_is_an_error_or_a_decode() {
    let mut decoder = Decoder::new();
    for d in sample_datagrams() {
        let mut want = Vec::new();
        decode_datagram(&d, &mut want).unwrap();
        for at in 0..d.len() {
            for x in [0x01u8, 0x02, 0x10, 0x80, 0xff] {
                let mut bad = d.clone();
                bad[at] ^= x;
                check(&bad);
                let _ = decoder.decode(&bad);
                // Whatever came before, the intact datagram decodes the same.
                let mut again = Vec::new();
                decode_datagram(&d, &mut again).unwrap();
                assert_eq!(again, want);
            }
        }
    }
}

#[test]
fn header_damage_is_named() {
    let d = &sample_datagrams()[0];
    let mut out = Vec::new();
    let mut bad = d.clone();
    bad[0] = b'X';
    let want_magic = (MAGIC & 0x00ff_ffff) | u32::from(b'X') << 24;
    assert_eq!(
        decode_datagram(&bad, &mut out),
        Err(HeadersError::BadMagic { found: want_magic })
    );
    let mut bad = d.clone();
    bad[4] = 1;
    assert_eq!(decode_datagram(&bad, &mut out), Err(HeadersError::Version(1)));
    let mut bad = d.clone();
    bad.push(0);
    assert!(matches!(
        decode_datagram(&bad, &mut out),
        Err(HeadersError::Length { .. })
    ));
    // The count says one record more than there is.
    let mut bad = d.clone();
    let count = u16::from_be_bytes([bad[6], bad[7]]) + 1;
    bad[6..8].copy_from_slice(&count.to_be_bytes());
    assert!(
        matches!(
            decode_datagram(&bad, &mut out),
            Err(HeadersError::Record { .. } | HeadersError::Count { .. })
        ),
        "{:?}",
        decode_datagram(&bad, &mut out)
    );
    // One record fewer: bytes left over.
    let mut bad = d.clone();
    let count = u16::from_be_bytes([bad[6], bad[7]]) - 1;
    bad[6..8].copy_from_slice(&count.to_be_bytes());
    assert!(matches!(
        decode_datagram(&bad, &mut out),
        Err(HeadersError::Trailing { .. })
    ));
    // A count no bytes could hold.
    let mut bad = d.clone();
    bad[6..8].copy_from_slice(&u16::MAX.to_be_bytes());
    assert!(matches!(
        decode_datagram(&bad, &mut out),
        Err(HeadersError::Count { .. })
    ));
    assert!(out.is_empty());
    assert_eq!(HEADER_LEN, 49);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(d in prop::collection::vec(any::<u8>(), 0..600)) {
        check(&d);
    }

    /// Random bytes behind a valid header: the record decoder itself.
    #[test]
    fn random_records_behind_a_valid_header_never_panic(
        body in prop::collection::vec(any::<u8>(), 0..600),
        count in 0u16..200,
    ) {
        // The header as the table in datagram.rs lays it out, name "x".
        let len = (HEADER_LEN + 1 + body.len()) as u16;
        let mut d = MAGIC.to_be_bytes().to_vec();
        d.extend([2, HEADER_LEN as u8 + 1]);
        d.extend(count.to_be_bytes());
        d.extend(len.to_be_bytes());
        d.extend([0, 0]);
        d.extend(5u32.to_be_bytes());
        d.extend([0u8; 32]);
        d.extend([1, b'x']);
        assert_eq!(d.len(), HEADER_LEN + 1);
        d.extend(&body);
        check(&d);
    }
}
