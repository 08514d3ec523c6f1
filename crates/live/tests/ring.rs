//! The AF_PACKET ring on a private loopback device: every datagram sent is
//! received exactly once, and a fanout group keeps each flow on one socket.
//! Needs root (a network namespace of its own); skipped, saying why, otherwise.

use std::collections::{HashMap, HashSet};
use std::net::UdpSocket;
use std::process::Command;
use std::time::{Duration, Instant};

use clarion_live::{filter, Interface, PacketRing, RingConfig, RingMode};

/// Runs `f` on a thread in a new network namespace with `lo` up; `None` when that is not permitted.
fn in_private_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    std::thread::spawn(move || {
        // SAFETY: plain system call; it moves only this thread to a new namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            eprintln!(
                "skipped: cannot create a network namespace ({})",
                std::io::Error::last_os_error()
            );
            return None;
        }
        let up = Command::new("ip").args(["link", "set", "lo", "up"]).status();
        if !up.is_ok_and(|s| s.success()) {
            eprintln!("skipped: cannot bring lo up in the namespace");
            return None;
        }
        Some(f())
    })
    .join()
    .expect("test thread")
}

const MARK: &[u8] = b"clarion-ring-test";

/// (source port, sequence) of our datagrams in a frame: Ethernet (14) + IPv4 (20) + UDP (8).
fn ours(data: &[u8]) -> Option<(u16, u32)> {
    let payload = data.get(42..)?;
    if !payload.starts_with(MARK) {
        return None;
    }
    let sport = u16::from_be_bytes([data[34], data[35]]);
    let seq = u32::from_be_bytes(payload.get(MARK.len()..MARK.len() + 4)?.try_into().ok()?);
    Some((sport, seq))
}

fn send(from: &UdpSocket, to: u16, seq: u32) {
    let mut buf = MARK.to_vec();
    buf.extend_from_slice(&seq.to_be_bytes());
    from.send_to(&buf, ("127.0.0.1", to)).expect("send");
}

#[test]
fn every_datagram_is_received_once_with_its_wire_length_in_frames() {
    every_datagram_is_received_once_with_its_wire_length(RingMode::Frames);
}

#[test]
fn every_datagram_is_received_once_with_its_wire_length_in_blocks() {
    every_datagram_is_received_once_with_its_wire_length(RingMode::Blocks);
}

fn every_datagram_is_received_once_with_its_wire_length(mode: RingMode) {
    let Some(()) = in_private_netns(move || {
        let lo = Interface::lookup("lo").expect("lo");
        let cfg = RingConfig {
            mode,
            block_size: 1 << 16,
            blocks: 8,
            snaplen: 64,
            ..RingConfig::default()
        };
        let mut ring = PacketRing::open(&lo, &cfg, &filter::snap_only(cfg.snaplen), None).expect("ring");
        let rx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let port = rx.local_addr().expect("addr").port();
        let n = 3000u32;
        let mut seen = HashSet::new();
        let mut lens = HashSet::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut sent = 0;
        while (seen.len() as u32) < n && Instant::now() < deadline {
            // Send in rounds the ring can hold, then read them back.
            for _ in 0..200 {
                if sent < n {
                    send(&tx, port, sent);
                    sent += 1;
                }
            }
            ring.wait(Duration::from_millis(5)).expect("wait");
            ring.recv(usize::MAX, &mut |fr| {
                if let Some((_, seq)) = ours(fr.data) {
                    assert!(seen.insert(seq), "datagram {seq} received twice");
                    assert!(fr.data.len() <= 64, "snap length not applied");
                    lens.insert(fr.orig_len);
                    assert!(fr.ts_ns > 1_600_000_000_000_000_000, "timestamp is Unix time");
                }
            });
        }
        assert_eq!(seen.len() as u32, n, "every datagram once");
        let wire = (14 + 20 + 8 + MARK.len() + 4) as u32;
        assert_eq!(lens, HashSet::from([wire]), "wire length, not the snap length");
        assert_eq!(ring.stats().expect("stats").drops, 0);
    }) else {
        return;
    };
}

/// A lone packet on a quiet wire is readable at once in frames, where a
/// block of a TPACKET_V3 ring would hold it until its retire timer fires
/// (here 10 s, far beyond the wait).
#[test]
fn a_lone_packet_is_handed_over_at_once_in_frames() {
    let Some(()) = in_private_netns(|| {
        let lo = Interface::lookup("lo").expect("lo");
        let mut seen = Vec::new();
        for mode in [RingMode::Frames, RingMode::Blocks] {
            let cfg = RingConfig {
                mode,
                blocks: 4,
                retire_ms: 10_000,
                ..RingConfig::default()
            };
            let mut ring = PacketRing::open(&lo, &cfg, &filter::snap_only(cfg.snaplen), None).expect("ring");
            let rx = UdpSocket::bind("127.0.0.1:0").expect("bind");
            let tx = UdpSocket::bind("127.0.0.1:0").expect("bind");
            send(&tx, rx.local_addr().expect("addr").port(), 7);
            let deadline = Instant::now() + Duration::from_secs(2);
            let mut got = false;
            while !got && Instant::now() < deadline {
                ring.wait(Duration::from_millis(100)).expect("wait");
                ring.recv(usize::MAX, &mut |fr| {
                    got |= ours(fr.data) == Some((tx.local_addr().expect("addr").port(), 7))
                });
            }
            seen.push((mode, got));
        }
        assert_eq!(seen, [(RingMode::Frames, true), (RingMode::Blocks, false)]);
    }) else {
        return;
    };
}

#[test]
fn a_fanout_group_keeps_both_directions_of_a_flow_on_one_socket() {
    let Some(()) = in_private_netns(|| {
        let lo = Interface::lookup("lo").expect("lo");
        let cfg = RingConfig {
            block_size: 1 << 16,
            blocks: 16,
            ..RingConfig::default()
        };
        let prog = filter::snap_only(cfg.snaplen);
        let mut rings: Vec<PacketRing> = (0..2)
            .map(|_| PacketRing::open(&lo, &cfg, &prog, Some(0x4c1e)).expect("ring in fanout"))
            .collect();
        let server = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let sport = server.local_addr().expect("addr").port();
        let clients: Vec<UdpSocket> = (0..32)
            .map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind"))
            .collect();
        for (i, c) in clients.iter().enumerate() {
            for k in 0..5 {
                send(c, sport, (i * 10 + k) as u32);
                // The reply: same flow, other direction.
                let cport = c.local_addr().expect("addr").port();
                send(&server, cport, (i * 10 + k) as u32 + 100_000);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
        // Flow (unordered port pair) -> sockets that saw it.
        let mut where_: HashMap<(u16, u16), HashSet<usize>> = HashMap::new();
        let mut total = 0;
        for (r, ring) in rings.iter_mut().enumerate() {
            ring.wait(Duration::from_millis(5)).expect("wait");
            ring.recv(usize::MAX, &mut |fr| {
                if ours(fr.data).is_some() {
                    let a = u16::from_be_bytes([fr.data[34], fr.data[35]]);
                    let b = u16::from_be_bytes([fr.data[36], fr.data[37]]);
                    where_.entry((a.min(b), a.max(b))).or_default().insert(r);
                    total += 1;
                }
            });
        }
        assert_eq!(total, 32 * 5 * 2, "every datagram, once, on some socket");
        assert_eq!(where_.len(), 32);
        assert!(
            where_.values().all(|s| s.len() == 1),
            "a flow split across sockets: {where_:?}"
        );
        let used: HashSet<usize> = where_.values().flatten().copied().collect();
        assert_eq!(used.len(), 2, "32 flows all hashed to one socket");
    }) else {
        return;
    };
}

#[test]
fn missing_interfaces_and_bad_rings_are_clear_errors() {
    let e = Interface::lookup("clarion-nope0").expect_err("no such interface");
    assert!(e.to_string().contains("no such interface `clarion-nope0`"), "{e}");
    let lo = Interface::lookup("lo").expect("lo");
    let bad = RingConfig {
        block_size: 3000,
        ..RingConfig::default()
    };
    let e = PacketRing::open(&lo, &bad, &filter::snap_only(64), None).expect_err("bad block size");
    assert!(e.to_string().contains("power of two"), "{e}");
}
