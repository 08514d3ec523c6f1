//! The sender against a UDP socket on this host that reads what arrives.

use std::time::Duration;

use super::*;
use crate::{encapsulate, HEADER_LEN};

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
