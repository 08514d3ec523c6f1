//! The VXLAN mirror's batches through the exporter: fewer datagrams than
//! a batch wait for `Exporter::tick` (or `finish`), a full batch leaves
//! at once, and the analyzer receives every frame of a real capture once,
//! in order, as the VXLAN header (VNI 42) written out here followed by
//! the frame.

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::path::Path;
use std::time::Duration;

use clarion_capture::{CaptureFile, PacketSource};
use clarion_export::{ExportConfig, Exporter, Frame};
use clarion_mirror::DEFAULT_BATCH;
use clarion_wire::{parse_frame, LinkType, PacketRecord};

/// Up to `n` Ethernet frames of the capture that parse, with their records.
fn load(path: &Path, n: usize) -> Vec<(Vec<u8>, u32, PacketRecord)> {
    let mut src = CaptureFile::open(path).expect("open capture");
    let mut out = Vec::new();
    while let Some(r) = src.next_packet() {
        let Ok(p) = r else { continue };
        if p.link != LinkType::Ethernet {
            continue;
        }
        if let Ok(rec) = parse_frame(p.link, p.data, p.ts_ns, p.orig_len) {
            out.push((p.data.to_vec(), p.orig_len, rec));
        }
        if out.len() == n {
            break;
        }
    }
    out
}

/// Datagrams waiting at the analyzer now (after a moment for loopback).
fn arrived(analyzer: &UdpSocket) -> Vec<Vec<u8>> {
    std::thread::sleep(Duration::from_millis(50));
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65_536];
    loop {
        match analyzer.recv(&mut buf) {
            Ok(n) => got.push(buf[..n].to_vec()),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return got,
            Err(e) => panic!("recv: {e}"),
        }
    }
}

#[test]
fn mirrored_datagrams_leave_by_batch_tick_and_finish_in_order() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures/dpkt_http.pcap");
    if !path.exists() {
        eprintln!("skipped: no capture at {}", path.display());
        return;
    }
    let few = 5;
    let packets = load(&path, few + DEFAULT_BATCH + 3);
    assert_eq!(packets.len(), few + DEFAULT_BATCH + 3, "frames in the capture");
    let analyzer = UdpSocket::bind("127.0.0.1:0").expect("a local socket");
    analyzer.set_nonblocking(true).expect("non-blocking");
    let port = analyzer.local_addr().expect("its address").port();
    let text = format!("export all\n  send packets to vxlan 127.0.0.1 port {port} vni 42\n");
    let policies = clarion_lang::check_exports(&text).expect("policies");
    let mut x = Exporter::new(&policies, &ExportConfig::default()).expect("an exporter");
    let offer = |x: &mut Exporter, range: std::ops::Range<usize>| {
        for (data, orig_len, rec) in &packets[range] {
            let frame = Frame {
                link: LinkType::Ethernet,
                data,
                orig_len: *orig_len,
                interface: 0,
            };
            x.offer(rec, &frame);
        }
    };
    let dest = |x: &Exporter| x.stats().destinations[0].clone();

    // Fewer than a batch: nothing leaves before the tick.
    offer(&mut x, 0..few);
    let mut got = arrived(&analyzer);
    assert_eq!(got.len(), 0, "datagrams before the tick");
    assert_eq!((dest(&x).packets, dest(&x).datagrams), (few as u64, 0));
    x.tick(packets[few - 1].2.ts_ns);
    got.extend(arrived(&analyzer));
    assert_eq!(got.len(), few, "datagrams after the tick");
    assert_eq!(dest(&x).datagrams, few as u64);

    // A full batch leaves without a tick; the rest at finish.
    offer(&mut x, few..packets.len());
    got.extend(arrived(&analyzer));
    assert_eq!(got.len(), few + DEFAULT_BATCH, "datagrams of a full batch");
    x.finish();
    got.extend(arrived(&analyzer));

    let want: Vec<Vec<u8>> = packets
        .iter()
        .map(|(data, _, _)| {
            let mut d = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
            d.extend_from_slice(data);
            d
        })
        .collect();
    assert_eq!(got.len(), want.len(), "datagrams in all");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "datagram {i}");
    }
    let d = dest(&x);
    let bytes: usize = want.iter().map(Vec::len).sum();
    assert_eq!(
        (d.packets, d.datagrams, d.bytes, d.dropped, d.errors),
        (want.len() as u64, want.len() as u64, bytes as u64, 0, 0),
        "{d:?}"
    );
}
