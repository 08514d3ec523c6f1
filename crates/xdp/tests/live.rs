//! Live tests: a veth pair with one end in a network namespace, the XDP
//! program on the root end, a socket per RX queue, UDP frames sent from the
//! namespace. They need root and `ip netns`; without them they print why and
//! pass. Each test uses its own link, namespace and /30, named after the
//! process id, so tests (and concurrent runs) do not collide; a Drop guard
//! removes them even when the test fails.
#![cfg(target_os = "linux")]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clarion_xdp::{XdpConfig, XdpError, XdpMode, XdpProgram, XdpSocket, XdpStats};

mod common;
use common::{unavailable, Dummy, Veth};

const FRAMES: usize = 2000;
const UDP_PORT: u16 = 9999;

/// The sequence number of one of our frames, by fixed offsets: Ethernet
/// (IPv4 ethertype), IPv4 (UDP, any header length), UDP (our port), payload
/// "cxdp-TAG-SEQ-". None for any other frame.
fn our_seq(frame: &[u8], tag: &str) -> Option<usize> {
    if frame.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let ihl = usize::from(frame.get(14)? & 0x0f) * 4;
    if frame.get(14)? >> 4 != 4 || *frame.get(23)? != 17 {
        return None;
    }
    let udp = 14 + ihl;
    if frame.get(udp + 2..udp + 4)? != UDP_PORT.to_be_bytes() {
        return None;
    }
    let payload = frame.get(udp + 8..)?;
    let prefix = format!("cxdp-{tag}-");
    let rest = payload.strip_prefix(prefix.as_bytes())?;
    let end = rest.iter().position(|&b| b == b'-')?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

struct QueueResult {
    queue: u32,
    seqs: Vec<usize>,
    others: usize,
    stats: XdpStats,
}

/// Receives on every socket (one thread each) until `want` of our frames
/// arrived, or a deadline; then keeps going briefly to catch duplicates.
fn receive_while<F: FnOnce()>(socks: Vec<XdpSocket>, tag: &str, want: usize, send: F) -> Vec<QueueResult> {
    let total = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = socks
        .into_iter()
        .map(|mut sock| {
            let (total, stop, tag) = (Arc::clone(&total), Arc::clone(&stop), tag.to_owned());
            std::thread::spawn(move || {
                let (mut seqs, mut others) = (Vec::new(), 0usize);
                while !stop.load(Ordering::Relaxed) {
                    if !sock.wait(Duration::from_millis(20)).expect("wait") {
                        continue;
                    }
                    sock.recv(64, &mut |frame| match our_seq(frame, &tag) {
                        Some(s) => {
                            seqs.push(s);
                            total.fetch_add(1, Ordering::Relaxed);
                        }
                        None => others += 1,
                    })
                    .expect("recv");
                }
                let stats = sock.stats().expect("stats");
                QueueResult {
                    queue: sock.queue(),
                    seqs,
                    others,
                    stats,
                }
            })
        })
        .collect();
    send();
    let deadline = Instant::now() + Duration::from_secs(10);
    while total.load(Ordering::Relaxed) < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    workers.into_iter().map(|w| w.join().expect("worker")).collect()
}

fn live(mode: XdpMode, tag: char, subnet: u8) {
    if let Some(why) = unavailable() {
        println!("skipping the live AF_XDP test: {why}");
        return;
    }
    let veth = Veth::new(tag, subnet).expect("veth setup");
    let prog = match XdpProgram::attach(&veth.host, mode) {
        Ok(p) => p,
        Err(e) => panic!("attach {mode} to {}: {e}", veth.host),
    };
    assert!(veth.xdp_attached(), "ip link shows no XDP program");
    let queues = prog.queues();
    println!(
        "{mode}: {} has {queues} RX queue(s) (2 requested: {})",
        veth.host, veth.rx_queues_requested
    );
    if veth.rx_queues_requested {
        assert_eq!(queues, 2);
    }

    let cfg = XdpConfig {
        mode,
        ..XdpConfig::default()
    };
    let socks: Vec<XdpSocket> = (0..queues)
        .map(|q| XdpSocket::open(&prog, q, &cfg).unwrap_or_else(|e| panic!("open queue {q}: {e}")))
        .collect();
    match XdpSocket::open(&prog, 0, &cfg) {
        Err(XdpError::QueueBusy { queue: 0, .. }) => {}
        other => panic!("a second socket on queue 0: {other:?}"),
    }
    match XdpSocket::open(&prog, queues, &cfg) {
        Err(e @ XdpError::NoSuchQueue { .. }) => println!("expected: {e}"),
        other => panic!("a socket on queue {queues}: {other:?}"),
    }

    let label = format!("{tag}{}", std::process::id());
    let started = Instant::now();
    let mut send_time = Duration::ZERO;
    let results = receive_while(socks, &label, FRAMES, || {
        let t = Instant::now();
        veth.send(&label, FRAMES).expect("send");
        send_time = t.elapsed();
    });
    let elapsed = started.elapsed();

    let mut seen = vec![0u32; FRAMES];
    let mut per_queue = BTreeMap::new();
    let mut stray = 0usize;
    for r in &results {
        per_queue.insert(r.queue, r.seqs.len());
        stray += r.others;
        for &s in &r.seqs {
            match seen.get_mut(s) {
                Some(c) => *c += 1,
                None => panic!("sequence number {s} out of range"),
            }
        }
        println!(
            "{mode}: queue {}: {} frames, {} other, stats {:?}",
            r.queue,
            r.seqs.len(),
            r.others,
            r.stats
        );
        assert_eq!(
            r.stats.dropped(),
            0,
            "queue {} dropped frames: {:?}",
            r.queue,
            r.stats
        );
    }
    println!(
        "{mode}: {FRAMES} frames sent in {send_time:?} ({:.0} frames/s), received per queue {per_queue:?}, \
         {stray} other frames, {elapsed:?} in all",
        FRAMES as f64 / send_time.as_secs_f64()
    );
    let missing: Vec<usize> = (0..FRAMES).filter(|&i| seen[i] == 0).collect();
    let dups: Vec<usize> = (0..FRAMES).filter(|&i| seen[i] > 1).collect();
    assert!(
        missing.is_empty(),
        "{} frames missing, first {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    assert!(
        dups.is_empty(),
        "{} frames received twice, first {:?}",
        dups.len(),
        &dups[..dups.len().min(10)]
    );

    // The sockets were dropped in their threads: their queues can be opened
    // again at once (the kernel releases a closed socket's queue lazily).
    for round in 0..3 {
        let again: Vec<XdpSocket> = (0..queues)
            .map(|q| {
                XdpSocket::open(&prog, q, &cfg).unwrap_or_else(|e| panic!("reopen {round} queue {q}: {e}"))
            })
            .collect();
        drop(again);
    }

    // Sockets are gone; dropping the program
    // detaches it (the kernel frees a bpf_link asynchronously: allow a moment).
    drop(prog);
    assert!(detached(&veth), "the XDP program is still attached after drop");
}

fn detached(veth: &Veth) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    while veth.xdp_attached() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[test]
fn native_mode_receives_every_frame_on_every_queue() {
    live(XdpMode::Native, 'n', 0);
}

#[test]
fn generic_mode_receives_every_frame_on_every_queue() {
    live(XdpMode::Generic, 'g', 1);
}

/// Small rings nobody drains: the kernel drops, and the counters account
/// for every frame: received + dropped = sent, on each queue together.
#[test]
fn drops_are_counted_not_silent() {
    if let Some(why) = unavailable() {
        println!("skipping the live AF_XDP test: {why}");
        return;
    }
    let veth = Veth::new('d', 2).expect("veth setup");
    let prog = XdpProgram::attach(&veth.host, XdpMode::Native).expect("attach");
    let cfg = XdpConfig {
        ring_size: 32,
        frames: 64,
        ..XdpConfig::default()
    };
    let mut socks: Vec<XdpSocket> = (0..prog.queues())
        .map(|q| XdpSocket::open(&prog, q, &cfg).unwrap_or_else(|e| panic!("open queue {q}: {e}")))
        .collect();
    let label = format!("d{}", std::process::id());
    veth.send(&label, FRAMES).expect("send");
    std::thread::sleep(Duration::from_millis(200));
    let (mut received, mut dropped) = (0usize, 0u64);
    for s in &mut socks {
        assert!(s.rx_pending() <= cfg.ring_size);
        while s
            .recv(usize::MAX, &mut |f| {
                received += usize::from(our_seq(f, &label).is_some())
            })
            .expect("recv")
            > 0
        {}
        let st = s.stats().expect("stats");
        println!("queue {}: {st:?}", s.queue());
        dropped += st.dropped();
    }
    println!("received {received}, dropped {dropped} of {FRAMES}");
    assert!(
        dropped > 0,
        "nothing was dropped: the test did not overflow the ring"
    );
    assert_eq!(received as u64 + dropped, FRAMES as u64, "frames unaccounted for");
}

/// A dummy device has no native XDP: the error says to try generic mode,
/// which then works.
#[test]
fn an_unsupported_mode_says_try_the_other() {
    if let Some(why) = unavailable() {
        println!("skipping the live AF_XDP test: {why}");
        return;
    }
    let dummy = Dummy::new('u').expect("dummy link");
    match XdpProgram::attach(&dummy.0, XdpMode::Native) {
        Err(e @ XdpError::ModeUnsupported { .. }) => {
            println!("expected: {e}");
            assert!(e.to_string().contains("try generic mode"), "{e}");
        }
        other => panic!("native XDP on a dummy link: {other:?}"),
    }
    let prog = XdpProgram::attach(&dummy.0, XdpMode::Generic).expect("generic XDP on a dummy link");
    assert_eq!(prog.queues(), 1);
    // A second program on the same interface is refused with a clear error.
    match XdpProgram::attach(&dummy.0, XdpMode::Generic) {
        Err(e) => println!("second attach: {e}"),
        Ok(_) => panic!("a second XDP program attached to {}", dummy.0),
    }
}

#[test]
fn a_missing_interface_is_a_clear_error() {
    for mode in [XdpMode::Native, XdpMode::Generic] {
        match XdpProgram::attach("cxdp-missing", mode) {
            Err(e @ XdpError::NoSuchInterface(_)) => {
                assert_eq!(e.to_string(), "no such interface cxdp-missing")
            }
            other => panic!("{mode}: {other:?}"),
        }
    }
}
