//! `Exporter::set_policies`: policies replaced while packets flow.
//!
//! On every shared capture (and on generated traffic), the packets are
//! offered in three phases: {files, heads}, then {heads} alone, then
//! {heads, files} again. Checked against a plain reading of the filters:
//! - the collector's stream is one (one source address, datagram and
//!   record sequences without a gap) and holds the headers of every
//!   packet `heads` takes in all three phases, in order;
//! - the first file sequence holds exactly the frames `files` takes in
//!   phase one, and the second (`-r2`, opened when the policy came back)
//!   exactly those of phase three;
//! - `heads` keeps its count across the changes; `files` counts phase
//!   three only (it was removed, not kept).
//!
//! A change that fails (a pcapng send without an export directory)
//! changes nothing.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clarion_capture::{CaptureFile, PacketSource};
use clarion_export::{ExportConfig, ExportError, Exporter, Frame};
use clarion_headers::{decode_datagram, HeaderRecord};
use clarion_wire::build::{FrameSpec, Transport};
use clarion_wire::{parse_frame, LinkType, PacketRecord};
use proptest::prelude::*;

struct Packet {
    link: LinkType,
    data: Vec<u8>,
    orig_len: u32,
    rec: PacketRecord,
}

const FILES: &str = "\
export files
  filter proto = udp
  filter proto = tcp and dst_port in 0..1023
  send packets snap 80B to pcapng
";
const HEADS: &str = "\
export heads
  filter proto = tcp
  send headers to collector 127.0.0.1 port PORT
";

fn takes_files(r: &PacketRecord) -> bool {
    let k = &r.key;
    k.proto == 17 || (k.proto == 6 && k.has_ports() && k.dst_port <= 1023)
}

fn takes_heads(r: &PacketRecord) -> bool {
    r.key.proto == 6
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

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("clarion-export-rt-{}-{tag}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    dir
}

fn offer_all(x: &mut Exporter, packets: &[Packet]) {
    for (i, p) in packets.iter().enumerate() {
        let frame = Frame {
            link: p.link,
            data: &p.data,
            orig_len: p.orig_len,
            interface: 0,
        };
        x.offer(&p.rec, &frame);
        // Paced, so that loopback's socket buffer keeps up.
        if i % 256 == 255 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Frames of every file of `files`, in order.
fn frames_of(files: &[clarion_capture::WrittenFile]) -> Vec<(u64, Vec<u8>, u32)> {
    let mut out = Vec::new();
    for f in files {
        let mut src = CaptureFile::open(&f.path).expect("a written file");
        while let Some(r) = src.next_packet() {
            let p = r.expect("a packet");
            out.push((p.ts_ns, p.data.to_vec(), p.orig_len));
        }
    }
    out
}

fn want_frames(packets: &[Packet]) -> Vec<(u64, Vec<u8>, u32)> {
    packets
        .iter()
        .filter(|p| takes_files(&p.rec))
        .map(|p| (p.rec.ts_ns, p.data[..p.data.len().min(80)].to_vec(), p.orig_len))
        .collect()
}

fn run_phases(tag: &str, packets: &[Packet], cut1: usize, cut2: usize) {
    let receiver = UdpSocket::bind("127.0.0.1:0").expect("a local socket");
    receiver
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("a timeout");
    let port = receiver.local_addr().expect("its address").port();
    let heads = clarion_lang::check_exports(&HEADS.replace("PORT", &port.to_string())).expect("heads");
    let files = clarion_lang::check_exports(FILES).expect("files");
    let dir = tempdir(tag);
    let config = ExportConfig {
        export_dir: Some(dir.clone()),
        run_id: "t".into(),
        ..ExportConfig::default()
    };
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut from: Vec<SocketAddr> = Vec::new();
        let mut seqs = Vec::new();
        let mut buf = vec![0u8; 65_536];
        // Until the empty datagram sent after the exporter finished.
        while let Ok((n, addr)) = receiver.recv_from(&mut buf) {
            if n == 0 {
                break;
            }
            if !from.contains(&addr) {
                from.push(addr);
            }
            let h = decode_datagram(&buf[..n], &mut got).expect("a datagram that decodes");
            seqs.push((h.sequence, h.record_sequence, h.count));
        }
        (got, from, seqs)
    });
    let both: Vec<_> = files.iter().chain(&heads).cloned().collect();
    let mut x = Exporter::new(&both, &config).expect("an exporter");
    offer_all(&mut x, &packets[..cut1]);
    // A failing change changes nothing.
    let no_dir = ExportConfig {
        export_dir: None,
        ..config.clone()
    };
    let mut other = Exporter::new(&heads, &no_dir).expect("an exporter");
    assert!(matches!(
        other.set_policies(&both),
        Err(ExportError::NoExportDir { .. })
    ));
    assert_eq!(other.policies().len(), 1);
    let dup: Vec<_> = heads.iter().chain(&heads).cloned().collect();
    assert!(matches!(
        x.set_policies(&dup),
        Err(ExportError::DuplicatePolicy(_))
    ));
    assert_eq!(x.policies(), &both[..]);

    x.set_policies(&heads).expect("files removed");
    offer_all(&mut x, &packets[cut1..cut2]);
    let back: Vec<_> = heads.iter().chain(&files).cloned().collect();
    x.set_policies(&back).expect("files back");
    offer_all(&mut x, &packets[cut2..]);
    x.finish();
    let end = UdpSocket::bind("127.0.0.1:0").expect("a local socket");
    end.send_to(&[], ("127.0.0.1", port)).expect("the end mark");
    let (got, from, seqs) = reader.join().expect("the reader");

    let stats = x.stats();
    let want: Vec<HeaderRecord> = packets
        .iter()
        .filter(|p| takes_heads(&p.rec))
        .map(|p| HeaderRecord::from_packet(&p.rec, 0, 1).with_wire_len(p.orig_len))
        .collect();
    let collector = stats
        .destinations
        .iter()
        .find(|d| d.label.starts_with("collector"))
        .expect("the collector");
    assert_eq!(collector.dropped, 0, "{tag}: {collector:?}");
    assert_eq!(got.len(), want.len(), "{tag}: headers received");
    assert!(got == want, "{tag}: headers differ");
    assert!(from.len() <= 1, "{tag}: one stream, got {from:?}");
    let mut records = 0u64;
    for (i, &(seq, rseq, count)) in seqs.iter().enumerate() {
        assert_eq!(seq, i as u64, "{tag}: datagram sequence");
        assert_eq!(rseq, records, "{tag}: record sequence");
        records += u64::from(count);
    }

    let file_dests: Vec<_> = stats
        .destinations
        .iter()
        .filter(|d| d.label.starts_with("pcapng"))
        .collect();
    assert_eq!(file_dests.len(), 2, "{tag}: {file_dests:?}");
    let first = frames_of(&file_dests[0].files);
    let second = frames_of(&file_dests[1].files);
    assert!(first == want_frames(&packets[..cut1]), "{tag}: phase one's files");
    assert!(
        second == want_frames(&packets[cut2..]),
        "{tag}: phase three's files"
    );
    for f in &file_dests[1].files {
        let name = f.path.file_name().expect("a name").to_string_lossy().into_owned();
        assert!(name.starts_with("files-t-r2-"), "{tag}: {name}");
    }
    let matched = |n: &str| stats.policies.iter().find(|p| p.name == n).map(|p| p.matched);
    let count = |ps: &[Packet], f: fn(&PacketRecord) -> bool| ps.iter().filter(|p| f(&p.rec)).count() as u64;
    assert_eq!(matched("heads"), Some(count(packets, takes_heads)), "{tag}");
    assert_eq!(
        matched("files"),
        Some(count(&packets[cut2..], takes_files)),
        "{tag}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn policies_replaced_on_real_captures() {
    for path in captures() {
        let packets = load(&path);
        let tag = path.file_name().expect("a name").to_string_lossy().into_owned();
        let n = packets.len();
        run_phases(&tag, &packets, n / 3, 2 * n / 3);
    }
}

fn packet(i: usize, proto: u8, dst_port: u16, len: usize) -> Packet {
    let transport = match proto {
        6 => Transport::Tcp(clarion_wire::build::TcpSpec {
            src_port: 40_000,
            dst_port,
            ..Default::default()
        }),
        17 => Transport::Udp {
            src_port: 40_000,
            dst_port,
        },
        _ => Transport::Other(proto),
    };
    let spec = FrameSpec {
        transport,
        payload_len: len,
        ..FrameSpec::default()
    };
    let data = spec.build();
    let ts = 1_000_000_000 + i as u64 * 1_000;
    let orig_len = data.len() as u32;
    let rec = parse_frame(LinkType::Ethernet, &data, ts, orig_len).expect("a built frame parses");
    Packet {
        link: LinkType::Ethernet,
        data,
        orig_len,
        rec,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn policies_replaced_on_generated_traffic(
        kinds in proptest::collection::vec((prop_oneof![Just(6u8), Just(17u8), Just(47u8)], 0u16..2048, 0usize..200), 0..300),
        a in 0usize..300,
        b in 0usize..300,
    ) {
        let packets: Vec<Packet> = kinds.iter().enumerate().map(|(i, &(p, d, l))| packet(i, p, d, l)).collect();
        let n = packets.len();
        let (a, b) = (a.min(b).min(n), a.max(b).min(n));
        run_phases(&format!("gen-{a}-{b}"), &packets, a, b);
    }
}
