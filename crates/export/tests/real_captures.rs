//! On every shared capture, what the exporter sends equals what a plain
//! reading of the policies takes from the capture:
//! - the header stream, decoded, is `HeaderRecord::from_packet` of every
//!   packet a `headers` policy takes, in order, once even when two
//!   policies take it;
//! - the pcapng files hold exactly the frames a `packets` policy takes,
//!   cut to the snap length, with their times and lengths on the wire,
//!   for every fast path;
//! - the VXLAN mirror's datagrams carry VNI 42 and, inside, exactly the
//!   frames a mirror policy takes, cut to the snap length (Ethernet
//!   frames byte for byte; others behind an Ethernet header, parsing to
//!   the same packet).

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clarion_capture::{CaptureFile, PacketSource};
use clarion_export::{ExportConfig, Exporter, FastPathKind, Frame};
use clarion_headers::{decode_datagram, HeaderRecord};
use clarion_wire::{parse_frame, LinkType, PacketRecord};

struct Packet {
    link: LinkType,
    data: Vec<u8>,
    orig_len: u32,
    rec: PacketRecord,
}

fn captures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("skipped: no captures at {}", dir.display());
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    v.sort();
    v
}

/// Every frame that parses as IP, with its record.
fn load(path: &Path) -> Vec<Packet> {
    let mut src = CaptureFile::open(path).expect("open capture");
    let mut out = Vec::new();
    while let Some(r) = src.next_packet() {
        let Ok(p) = r else { continue };
        if let Ok(rec) = parse_frame(p.link, p.data, p.ts_ns, p.orig_len) {
            out.push(Packet {
                link: p.link,
                data: p.data.to_vec(),
                orig_len: p.orig_len,
                rec,
            });
        }
    }
    out
}

/// The policies of this test, and which packets each takes, written out
/// from the language's definition of a filter.
const POLICIES: &str = "\
export tcp_heads
  filter proto = tcp
  send headers to collector 127.0.0.1 port PORT
export low_ports
  filter proto = udp and dst_port in 0..1023
  filter proto = icmp
  filter proto = tcp and dst_port in 0..1023
  send headers to collector 127.0.0.1 port PORT
  send packets snap 64B to pcapng rotate 64KB
export udp_mirror
  filter proto = udp
  send packets snap 100 to vxlan 127.0.0.1 port MIRROR vni 42
";

fn takes_headers(r: &PacketRecord) -> bool {
    let k = &r.key;
    k.proto == 6 || (k.proto == 17 && k.has_ports() && k.dst_port <= 1023) || k.proto == 1
}

fn takes_packets(r: &PacketRecord) -> bool {
    let k = &r.key;
    (matches!(k.proto, 6 | 17) && k.has_ports() && k.dst_port <= 1023) || k.proto == 1
}

#[test]
fn exports_equal_the_policies_read_plainly() {
    for path in captures() {
        let packets = load(&path);
        for fast in [
            FastPathKind::default(),
            FastPathKind::Uss { capacity: 4 },
            FastPathKind::Megaflow { capacity: 4 },
            FastPathKind::None,
        ] {
            check(&path, &packets, fast);
        }
    }
}

fn check(path: &Path, packets: &[Packet], fast: FastPathKind) {
    let name = path.file_name().expect("a file name").to_string_lossy();
    let receiver = UdpSocket::bind("127.0.0.1:0").expect("a local socket");
    receiver
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("a timeout");
    let port = receiver.local_addr().expect("its address").port();
    let analyzer = UdpSocket::bind("127.0.0.1:0").expect("a local socket");
    analyzer
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("a timeout");
    let mirror_port = analyzer.local_addr().expect("its address").port();
    let text = POLICIES
        .replace("MIRROR", &mirror_port.to_string())
        .replace("PORT", &port.to_string());
    let policies = clarion_lang::check_exports(&text).expect("policies");
    let dir = tempdir(&format!("{name}-{fast:?}"));
    let config = ExportConfig {
        export_dir: Some(dir.clone()),
        fast_path: fast,
        run_id: "test".into(),
        ..ExportConfig::default()
    };
    let mut exporter = Exporter::new(&policies, &config).expect("an exporter");
    // The receiver reads while the exporter sends.
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65_536];
        while let Ok(n) = receiver.recv(&mut buf) {
            decode_datagram(&buf[..n], &mut got).expect("a datagram that decodes");
        }
        got
    });
    let mirrored = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65_536];
        while let Ok(n) = analyzer.recv(&mut buf) {
            got.push(buf[..n].to_vec());
        }
        got
    });
    for (i, p) in packets.iter().enumerate() {
        let frame = Frame {
            link: p.link,
            data: &p.data,
            orig_len: p.orig_len,
            interface: 0,
        };
        exporter.offer(&p.rec, &frame);
        // Paced, so that loopback's socket buffer keeps up.
        if i % 256 == 255 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    exporter.finish();
    let got = reader.join().expect("the reader");
    let want: Vec<HeaderRecord> = packets
        .iter()
        .filter(|p| takes_headers(&p.rec))
        .map(|p| HeaderRecord::from_packet(&p.rec, 0, 1).with_wire_len(p.orig_len))
        .collect();
    let stats = exporter.stats();
    assert_eq!(stats.destinations[0].dropped, 0, "{name}: {stats:?}");
    // No budget: no sampler, and every packet handed stands for itself.
    assert_eq!(stats.sampling, None);
    for d in &stats.destinations {
        assert_eq!(d.represented, d.packets, "{name}: {d:?}");
    }
    assert_eq!(got.len(), want.len(), "{name} {fast:?}: headers received");
    assert!(got == want, "{name} {fast:?}: headers differ");

    // The files, in order, hold the frames `low_ports` takes, cut to 64 bytes.
    let files = &stats.destinations[1].files;
    let mut frames = Vec::new();
    for f in files {
        assert!(f.complete, "{name}: {f:?}");
        let mut src = CaptureFile::open(&f.path).expect("a written file");
        while let Some(r) = src.next_packet() {
            let p = r.expect("a packet");
            frames.push((p.ts_ns, p.link, p.data.to_vec(), p.orig_len));
        }
    }
    let want: Vec<_> = packets
        .iter()
        .filter(|p| takes_packets(&p.rec))
        .map(|p| {
            (
                p.rec.ts_ns,
                p.link,
                p.data[..p.data.len().min(64)].to_vec(),
                p.orig_len,
            )
        })
        .collect();
    assert_eq!(frames.len(), want.len(), "{name} {fast:?}: frames in files");
    assert!(frames == want, "{name} {fast:?}: frames differ");
    let matched: Vec<u64> = stats.policies.iter().map(|p| p.matched).collect();
    let tcp = packets.iter().filter(|p| p.rec.key.proto == 6).count() as u64;
    let udp: Vec<&Packet> = packets.iter().filter(|p| p.rec.key.proto == 17).collect();
    assert_eq!(matched, [tcp, want.len() as u64, udp.len() as u64], "{name}");

    let datagrams = mirrored.join().expect("the analyzer");
    assert_eq!(stats.destinations[2].dropped, 0, "{name}: {stats:?}");
    assert_eq!(datagrams.len(), udp.len(), "{name} {fast:?}: mirrored datagrams");
    for (d, p) in datagrams.iter().zip(&udp) {
        assert_eq!(&d[..8], &[0x08, 0, 0, 0, 0, 0, 42, 0], "{name}: VXLAN header");
        let inner = &d[8..];
        if p.link == LinkType::Ethernet {
            assert_eq!(inner, &p.data[..p.data.len().min(100)], "{name}: inner frame");
        } else {
            assert!(inner.len() <= 100, "{name}: snap");
            let again =
                parse_frame(LinkType::Ethernet, inner, p.rec.ts_ns, p.orig_len).expect("inner parses");
            assert_eq!(again.key, p.rec.key, "{name}: inner frame's packet");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("clarion-export-{}-{tag}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    dir
}
