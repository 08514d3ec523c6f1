//! The sender against a UDP socket on this host that reads what arrives.

use std::time::Duration;

use super::*;
use crate::{encapsulate, HEADER_LEN, MAX_BATCH};

#[test]
fn analyzer_addresses() {
    let ok = [
        ("192.0.2.9", "192.0.2.9:4789"),
        ("192.0.2.9:4790", "192.0.2.9:4790"),
        ("2001:db8::9", "[2001:db8::9]:4789"),
        ("[2001:db8::9]", "[2001:db8::9]:4789"),
        ("[2001:db8::9]:5", "[2001:db8::9]:5"),
        ("localhost:4790", "127.0.0.1:4790"),
    ];
    for (text, want) in ok {
        let got = parse_analyzer(text).unwrap();
        if text.starts_with("localhost") {
            assert!(got.ip().is_loopback() && got.port() == 4790, "{got}");
        } else {
            assert_eq!(got, want.parse::<SocketAddr>().unwrap(), "{text}");
        }
    }
    for bad in ["192.0.2.9:99999", "192.0.2.9:x", "no such host.invalid"] {
        let e = parse_analyzer(bad).unwrap_err();
        assert!(
            e.to_string().starts_with(&format!("analyzer address {bad:?}")),
            "{e}"
        );
    }
}

fn roundtrip(local: &str) {
    let rx = match UdpSocket::bind(local) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("skipped: cannot bind {local}: {e}");
            return;
        }
    };
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let vni = Vni::new(4242).unwrap();
    let mut m = VxlanMirror::new(rx.local_addr().unwrap(), vni).unwrap();
    let frames: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i; 14 + usize::from(i) * 20]).collect();
    let mut want_bytes = 0;
    for f in &frames {
        let r = m.send(LinkType::Ethernet, f);
        assert_eq!(r, SendOutcome::Sent(HEADER_LEN + f.len()));
        want_bytes += (HEADER_LEN + f.len()) as u64;
        // Paced by reading each back: no loss on a busy machine.
        let mut buf = [0u8; 2048];
        let (n, from) = rx.recv_from(&mut buf).unwrap();
        let mut want = Vec::new();
        encapsulate(vni, f, &mut want);
        assert_eq!(&buf[..n], &want[..]);
        assert_eq!(from.port(), m.local_addr().unwrap().port());
    }
    let s = m.stats();
    assert_eq!(
        (s.packets, s.bytes, s.dropped, s.send_errors),
        (50, want_bytes, 0, 0)
    );
}

#[test]
fn datagrams_arrive_over_ipv4() {
    roundtrip("127.0.0.1:0");
}

#[test]
fn datagrams_arrive_over_ipv6() {
    roundtrip("[::1]:0");
}

#[test]
fn every_packet_is_counted_once_and_sending_never_blocks() {
    // A receiver that never reads: its queue fills, the sender goes on.
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut m = VxlanMirror::new(rx.local_addr().unwrap(), Vni::new(1).unwrap()).unwrap();
    let frame = vec![0u8; 1400];
    let n = 20_000u64;
    for _ in 0..n {
        m.send(LinkType::Ethernet, &frame);
    }
    assert_eq!(m.send(LinkType::RawIp, &[0x10]), SendOutcome::Unencapsulable);
    // Over 64 KiB: the kernel refuses (EMSGSIZE), counted and kept.
    assert_eq!(m.send(LinkType::Ethernet, &vec![0; 70_000]), SendOutcome::Failed);
    let s = m.stats();
    assert_eq!(s.packets + s.dropped + s.send_errors, n + 1, "{s:?}");
    assert_eq!((s.unencapsulable, s.send_errors >= 1), (1, true), "{s:?}");
    assert!(m.last_error().is_some());
}

/// The fate a scripted kernel gives one datagram.
#[derive(Clone, Copy, Debug)]
enum Fate {
    Sent,
    /// EINTR once, then sent.
    Interrupted,
    Full,
    Refused,
}

/// A `sendmmsg` with the kernel's contract: sends datagrams in order, at
/// most `cap` a call, stopping before the first it cannot send; that
/// one's error if it is first. Records the first byte of each call's
/// first datagram, to check that each call starts where the last ended.
fn scripted<'a>(
    fates: &'a mut [Fate],
    cap: usize,
    starts: &'a mut Vec<u8>,
) -> impl FnMut(&[&[u8]], &mut [usize]) -> io::Result<usize> + 'a {
    let mut next = 0; // index of datagrams[0] in `fates`
    move |datagrams, lens| {
        starts.push(datagrams[0][0]);
        let mut k = 0;
        while k < datagrams.len().min(cap) {
            match fates[next + k] {
                Fate::Sent => {
                    lens[k] = datagrams[k].len();
                    k += 1;
                }
                _ if k > 0 => break,
                Fate::Interrupted => {
                    fates[next] = Fate::Sent;
                    return Err(io::ErrorKind::Interrupted.into());
                }
                Fate::Full => return Err(io::ErrorKind::WouldBlock.into()),
                Fate::Refused => {
                    next += 1;
                    return Err(io::Error::from_raw_os_error(90));
                }
            }
        }
        next += k;
        Ok(k)
    }
}

fn fate() -> impl proptest::strategy::Strategy<Value = Fate> {
    use proptest::prelude::*;
    prop_oneof![
        6 => Just(Fate::Sent),
        1 => Just(Fate::Interrupted),
        1 => Just(Fate::Full),
        1 => Just(Fate::Refused),
    ]
}

proptest::proptest! {
    /// Partial sends: against a plain reading of the contract, datagram by
    /// datagram — sent, refused (counted, the rest still sent) or a full
    /// buffer (it and every later one dropped).
    #[test]
    fn every_datagram_of_a_batch_gets_one_fate(
        fates in proptest::collection::vec(fate(), 1..=MAX_BATCH),
        cap in 1usize..=MAX_BATCH,
    ) {
        let queued: Vec<Vec<u8>> = (0..fates.len()).map(|i| vec![i as u8; 10 + i]).collect();
        let mut want = Flushed::default();
        let mut want_bytes = 0u64;
        let mut want_last = SendOutcome::Queued;
        for (i, f) in fates.iter().enumerate() {
            match f {
                Fate::Sent | Fate::Interrupted => {
                    want.sent += 1;
                    want_bytes += (10 + i) as u64;
                    want_last = SendOutcome::Sent(10 + i);
                }
                Fate::Refused => {
                    want.failed += 1;
                    want_last = SendOutcome::Failed;
                }
                Fate::Full => {
                    want.dropped = fates.len() - i;
                    want_last = SendOutcome::Dropped;
                    break;
                }
            }
        }
        let (mut script, mut starts) = (fates.clone(), Vec::new());
        let mut stats = MirrorStats::default();
        let mut last_error = None;
        let (done, last) = drain(&queued, scripted(&mut script, cap, &mut starts), &mut stats, &mut last_error);
        proptest::prop_assert_eq!(done, want);
        proptest::prop_assert_eq!(last, want_last);
        proptest::prop_assert_eq!(
            (stats.packets, stats.bytes, stats.dropped, stats.send_errors),
            (want.sent as u64, want_bytes, want.dropped as u64, want.failed as u64)
        );
        proptest::prop_assert_eq!(last_error.is_some(), want.failed > 0);
        // Each call starts at a datagram not yet sent, in order.
        proptest::prop_assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{:?}", starts);
    }
}

#[test]
fn a_full_buffer_drops_the_rest_of_the_batch() {
    let queued: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 20]).collect();
    // Three sent, one refused, two sent, then the buffer is full.
    let mut fates = [Fate::Sent; 10];
    fates[3] = Fate::Refused;
    fates[6] = Fate::Full;
    let (mut starts, mut stats, mut err) = (Vec::new(), MirrorStats::default(), None);
    let (done, last) = drain(
        &queued,
        scripted(&mut fates, 64, &mut starts),
        &mut stats,
        &mut err,
    );
    assert_eq!(
        done,
        Flushed {
            sent: 5,
            dropped: 4,
            failed: 1
        }
    );
    assert_eq!(last, SendOutcome::Dropped);
    assert_eq!(starts, [0, 3, 4, 6]);
    assert_eq!(
        (stats.packets, stats.bytes, stats.dropped, stats.send_errors),
        (5, 100, 4, 1)
    );
}

/// Batches against the real kernel: nothing leaves before the batch is
/// full or flushed, then every datagram arrives, in order.
#[test]
fn a_batch_leaves_when_full_or_flushed_in_order() {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let vni = Vni::new(7).unwrap();
    let mut m = VxlanMirror::new(rx.local_addr().unwrap(), vni)
        .unwrap()
        .with_batch(8);
    let frames: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 14 + usize::from(i) * 30]).collect();
    let mut buf = [0u8; 2048];
    let mut want_bytes = 0;
    for (i, f) in frames.iter().enumerate() {
        let r = m.send(LinkType::Ethernet, f);
        want_bytes += (HEADER_LEN + f.len()) as u64;
        if i % 8 == 7 {
            assert_eq!(r, SendOutcome::Sent(HEADER_LEN + f.len()), "packet {i}");
            assert_eq!(m.pending(), 0);
        } else {
            assert_eq!(r, SendOutcome::Queued, "packet {i}");
            assert_eq!(m.pending(), i % 8 + 1);
        }
    }
    assert_eq!(m.stats().packets, 16);
    // The last 4 wait for the flush.
    rx.set_nonblocking(true).unwrap();
    for _ in 0..16 {
        while rx.recv(&mut buf).is_err() {}
    }
    assert!(rx.recv(&mut buf).is_err(), "a datagram left before the flush");
    rx.set_nonblocking(false).unwrap();
    assert_eq!(
        m.flush(),
        Flushed {
            sent: 4,
            dropped: 0,
            failed: 0
        }
    );
    assert_eq!(m.flush(), Flushed::default());
    let s = m.stats();
    assert_eq!(
        (s.packets, s.bytes, s.dropped, s.send_errors),
        (20, want_bytes, 0, 0)
    );
    // Order: read all again from a fresh mirror dropped without a flush.
    let mut m = VxlanMirror::new(rx.local_addr().unwrap(), vni)
        .unwrap()
        .with_batch(64);
    for f in &frames {
        assert_eq!(m.send(LinkType::Ethernet, f), SendOutcome::Queued);
    }
    drop(m);
    let mut want = Vec::new();
    for f in &frames[16..] {
        let n = rx.recv(&mut buf).unwrap();
        encapsulate(vni, f, &mut want);
        assert_eq!(&buf[..n], &want[..]);
    }
    for (i, f) in frames.iter().enumerate() {
        let n = rx.recv(&mut buf).unwrap();
        encapsulate(vni, f, &mut want);
        assert_eq!(&buf[..n], &want[..], "datagram {i} after the drop");
    }
}

/// A partial batch from the real kernel: a datagram over 64 KiB in the
/// middle is refused and counted, the ones around it sent in order.
#[test]
fn a_refused_datagram_does_not_lose_the_rest_of_its_batch() {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut m = VxlanMirror::new(rx.local_addr().unwrap(), Vni::new(1).unwrap())
        .unwrap()
        .with_batch(5);
    let frames = [
        vec![1u8; 60],
        vec![2; 61],
        vec![3; 70_000],
        vec![4; 62],
        vec![5; 63],
    ];
    for f in &frames[..4] {
        assert_eq!(m.send(LinkType::Ethernet, f), SendOutcome::Queued);
    }
    assert_eq!(m.send(LinkType::Ethernet, &frames[4]), SendOutcome::Sent(8 + 63));
    let s = m.stats();
    assert_eq!((s.packets, s.dropped, s.send_errors), (4, 0, 1));
    assert_eq!(s.bytes, 4 * 8 + 60 + 61 + 62 + 63);
    assert_eq!(
        m.last_error().and_then(io::Error::raw_os_error),
        Some(libc::EMSGSIZE)
    );
    let mut buf = [0u8; 2048];
    for (byte, len) in [(1u8, 60), (2, 61), (4, 62), (5, 63)] {
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!((n, buf[8]), (8 + len, byte));
    }
}

#[test]
fn batched_sending_counts_every_packet_once_and_never_blocks() {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut m = VxlanMirror::new(rx.local_addr().unwrap(), Vni::new(1).unwrap())
        .unwrap()
        .with_batch(DEFAULT_BATCH);
    let frame = vec![0u8; 1400];
    let n = 20_001u64;
    for _ in 0..n {
        m.send(LinkType::Ethernet, &frame);
    }
    assert_eq!(m.send(LinkType::RawIp, &[0x10]), SendOutcome::Unencapsulable);
    assert_eq!(m.pending() as u64, n % DEFAULT_BATCH as u64);
    m.flush();
    let s = m.stats();
    assert_eq!(s.packets + s.dropped + s.send_errors, n, "{s:?}");
    assert_eq!((s.unencapsulable, m.pending()), (1, 0), "{s:?}");
}
