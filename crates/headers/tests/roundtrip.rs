//! Records → datagrams → decoder gives the records back, exactly, for
//! random traffic over several interfaces and MTUs; datagrams stay within
//! the MTU; losing, repeating or reordering datagrams costs exactly their
//! own records and is reported.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use clarion_headers::{
    decode_datagram, Arrival, Auth, Decoder, EncoderConfig, ExporterName, HeaderRecord, Key, StreamId,
    DEFAULT_MTU, MAX_MTU, MIN_MTU,
};
use common::{arb_records, encode_all};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

/// Worker `id`'s stream of exporter `h1`, session 42, tagged with `key`.
fn config(id: u32, mtu: usize, key: Option<Key>) -> EncoderConfig {
    EncoderConfig {
        exporter: ExporterName::new("h1").unwrap(),
        worker: id,
        session: 42,
        mtu,
        key,
    }
}

fn stream(id: u32) -> StreamId {
    StreamId {
        exporter: ExporterName::new("h1").unwrap(),
        worker: id,
        session: 42,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_records_round_trip(
        recs in arb_records(400),
        mtu in prop_oneof![Just(MIN_MTU), Just(300usize), Just(DEFAULT_MTU), Just(9000usize), Just(MAX_MTU)],
        id in any::<u32>(),
        keyed in any::<bool>(),
    ) {
        let key = keyed.then(|| Key::new(&[7; 32]).unwrap());
        let (dgrams, enc) = encode_all(&recs, config(id, mtu, key.clone()));
        let mut dec = match key {
            Some(k) => Decoder::with_auth(Auth::Key(k)),
            None => Decoder::new(),
        };
        let mut got = Vec::new();
        let mut record_seq = 0u64;
        for (i, d) in dgrams.iter().enumerate() {
            let out = dec.decode(d).unwrap();
            prop_assert_eq!(out.header.stream, stream(id));
            prop_assert_eq!(out.header.tagged, keyed);
            prop_assert_eq!(out.header.sequence, i as u64);
            prop_assert_eq!(out.header.record_sequence, record_seq);
            prop_assert_eq!(out.header.first_ts_ns, out.records[0].ts_ns);
            prop_assert_eq!(out.arrival, if i == 0 { Arrival::First } else { Arrival::InOrder });
            record_seq += out.records.len() as u64;
            got.extend(out.records);
        }
        prop_assert_eq!(&got, &recs);
        let s = enc.stats();
        prop_assert_eq!(s.records, recs.len() as u64);
        prop_assert_eq!(s.datagrams, dgrams.len() as u64);
        prop_assert_eq!(s.bytes_out, dgrams.iter().map(|d| d.len() as u64).sum::<u64>());
        let e = dec.stream(&stream(id));
        prop_assert_eq!(e.map(|e| (e.records, e.lost_datagrams)), (!recs.is_empty()).then_some((recs.len() as u64, 0)));
    }

    /// Dropping, repeating and swapping datagrams: every datagram that
    /// arrives decodes to exactly the records it was given, and the
    /// decoder's counts match what was done.
    #[test]
    fn losses_cost_only_their_own_datagrams(recs in arb_records(600), drops in prop::collection::vec(any::<bool>(), 64)) {
        let config = config(7, 300, None);
        // Which records each datagram holds, from the encoder's own returns.
        let mut enc = clarion_headers::Encoder::new(config).unwrap();
        let mut dgrams: Vec<(Vec<u8>, Vec<HeaderRecord>)> = Vec::new();
        let mut pending = Vec::new();
        for r in &recs {
            if let Some(d) = enc.push(r) {
                dgrams.push((d.to_vec(), std::mem::take(&mut pending)));
            }
            pending.push(*r);
        }
        if let Some(d) = enc.flush() {
            dgrams.push((d.to_vec(), pending));
        }
        let mut dec = Decoder::new();
        let (mut lost_d, mut lost_r, mut last_kept) = (0u64, 0u64, None::<usize>);
        for (i, (d, want)) in dgrams.iter().enumerate() {
            // Always keep the first and the last so the counts are final.
            if i != 0 && i + 1 != dgrams.len() && drops[i % drops.len()] {
                lost_d += 1;
                lost_r += want.len() as u64;
                continue;
            }
            let out = dec.decode(d).unwrap();
            prop_assert_eq!(&out.records, want);
            let gap = last_kept.map_or(0, |k| i - k - 1) as u64;
            let lost_here: u64 = last_kept.map_or(0, |k| dgrams[k + 1..i].iter().map(|x| x.1.len() as u64).sum());
            let want_arrival = match last_kept {
                None => Arrival::First,
                Some(_) if gap == 0 => Arrival::InOrder,
                Some(_) => Arrival::Gap { datagrams: gap, records: lost_here },
            };
            prop_assert_eq!(out.arrival, want_arrival);
            // The same datagram again is a duplicate with the same records.
            let again = dec.decode(d).unwrap();
            prop_assert_eq!(again.arrival, Arrival::Duplicate);
            prop_assert_eq!(&again.records, want);
            last_kept = Some(i);
        }
        let s = dec.stream(&stream(7));
        if !dgrams.is_empty() {
            let s = s.unwrap();
            prop_assert_eq!((s.lost_datagrams, s.lost_records), (lost_d, lost_r));
            // A dropped datagram arriving late is recognised and uncounted.
            if let Some((i, (d, want))) = dgrams.iter().enumerate().skip(1).find(|(i, _)| *i + 1 < dgrams.len() && drops[i % drops.len()]) {
                let late = dec.decode(d).unwrap();
                let behind = dgrams.len() - 1 - i;
                let want_arrival = if (behind as u64) < clarion_headers::WINDOW { Arrival::Late } else { Arrival::TooOld };
                prop_assert_eq!(late.arrival, want_arrival);
                prop_assert_eq!(&late.records, want);
                if want_arrival == Arrival::Late {
                    let s = dec.stream(&stream(7)).unwrap();
                    prop_assert_eq!((s.lost_datagrams, s.lost_records), (lost_d - 1, lost_r - want.len() as u64));
                }
            }
        }
    }
}

/// Each datagram decodes alone, without the ones before it.
#[test]
fn every_datagram_decodes_alone() {
    let mut runner = proptest::test_runner::TestRunner::default();
    let recs = arb_records(800).new_tree(&mut runner).unwrap().current();
    let (dgrams, _) = encode_all(
        &recs,
        EncoderConfig {
            mtu: MIN_MTU,
            key: Some(Key::new(&[1; 16]).unwrap()),
            ..config(1, MIN_MTU, None)
        },
    );
    let mut got = Vec::new();
    for d in dgrams.iter().rev() {
        let mut one = Vec::new();
        decode_datagram(d, &mut one).unwrap();
        got.splice(0..0, one);
    }
    assert_eq!(got, recs);
}

#[test]
fn mtus_outside_the_range_are_refused() {
    for mtu in [0, MIN_MTU - 1, MAX_MTU + 1] {
        let e = clarion_headers::Encoder::new(EncoderConfig {
            mtu,
            ..EncoderConfig::default()
        })
        .unwrap_err();
        assert_eq!(e, clarion_headers::HeadersError::Mtu { mtu });
    }
}
