//! Reader behaviour end to end: equivalence of backings, damage at every
//! byte, non-fatal link-type errors, statistics.

use std::io::{self, Read};

use clarion_wire::LinkType;
use proptest::prelude::*;

use super::*;
use crate::decode::Endian;
use crate::testutil::{Ng, EPB_TYPE, IDB_TYPE};
use crate::writer::{PcapHeader, PcapWriter, TsResolution};
use crate::{CaptureFile, Corruption};

/// Hands out at most `n` bytes per read.
struct Trickle<'a>(&'a [u8], usize);

impl Read for Trickle<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = out.len().min(self.1).min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

/// Packet sizes 0, 7, 14, … with distinct contents and times.
fn sample_pcap(resolution: TsResolution, big_endian: bool) -> (Vec<u8>, Vec<u64>) {
    let header = PcapHeader {
        dlt: 1,
        resolution,
        snaplen: 65535,
        big_endian,
    };
    let mut w = PcapWriter::with_header(Vec::new(), header).unwrap();
    let mut offsets = Vec::new();
    let mut at = 24u64;
    for i in 0..20u32 {
        let data: Vec<u8> = (0..i * 7).map(|b| (b ^ i) as u8).collect();
        offsets.push(at);
        at += 16 + data.len() as u64;
        w.write_packet(
            1_700_000_000_000_000_000 + u64::from(i) * 1_001_000,
            &data,
            i * 7 + 4,
        )
        .unwrap();
    }
    (w.into_inner().unwrap(), offsets)
}

/// Everything a source yields, owned: packets as (index, ts, link, data, orig, offset), errors as text.
type Owned = (u64, u64, LinkType, Vec<u8>, u32, u64);

fn drain(src: &mut dyn PacketSource) -> Vec<Result<Owned, String>> {
    let mut out = Vec::new();
    while let Some(r) = src.next_packet() {
        out.push(
            r.map(|p| {
                (
                    p.index,
                    p.ts_ns,
                    p.link,
                    p.data.to_vec(),
                    p.orig_len,
                    p.byte_offset,
                )
            })
            .map_err(|e| e.to_string()),
        );
        assert!(out.len() < 100_000, "source does not end");
    }
    out
}

#[test]
fn pcap_round_trip_in_every_flavour() {
    for res in [TsResolution::Micro, TsResolution::Nano] {
        for big in [false, true] {
            let (file, offsets) = sample_pcap(res, big);
            let got = drain(&mut SliceReader::new(&file).unwrap());
            assert_eq!(got.len(), 20);
            for (i, p) in got.iter().enumerate() {
                let (index, ts, link, data, orig, offset) = p.clone().unwrap();
                assert_eq!((index, link, offset), (i as u64, LinkType::Ethernet, offsets[i]));
                assert_eq!(data.len(), i * 7);
                assert_eq!(orig, i as u32 * 7 + 4);
                let want = 1_700_000_000_000_000_000 + i as u64 * 1_001_000;
                assert_eq!(ts, want, "{res:?} big={big}");
            }
        }
    }
}

#[test]
fn stream_and_memory_agree() {
    let (file, _) = sample_pcap(TsResolution::Nano, false);
    let slice = drain(&mut SliceReader::new(&file).unwrap());
    for chunk in [1, 5, 16, 4096] {
        let stream = drain(&mut StreamReader::new(Trickle(&file, chunk)).unwrap());
        assert_eq!(stream, slice, "chunk {chunk}");
    }
    let owned = drain(&mut CaptureFile::from_bytes(file.clone()).unwrap());
    assert_eq!(owned, slice);
}

#[test]
fn truncation_at_every_byte() {
    let (file, offsets) = sample_pcap(TsResolution::Micro, false);
    for cut in 0..file.len() {
        let bytes = &file[..cut];
        let mut r = match SliceReader::new(bytes) {
            Ok(r) => r,
            Err(e) => {
                assert!(cut < 24, "cut {cut}: {e}");
                let msg = e.to_string();
                match cut {
                    0 => assert_eq!(msg, "not a capture file: the file is empty"),
                    1..=3 => assert!(msg.contains("too short"), "{msg}"),
                    _ => assert_eq!(
                        msg,
                        format!(
                            "capture truncated before the first packet at byte offset 0: \
                             file header needs 24 bytes but only {cut} remain"
                        )
                    ),
                }
                continue;
            }
        };
        let got = drain(&mut r);
        let file_end = file.len() as u64;
        let ends = offsets.iter().skip(1).chain([&file_end]);
        let complete = offsets.iter().zip(ends);
        let intact = complete.filter(|(_, &end)| end <= cut as u64).count();
        let ok: Vec<_> = got.iter().take_while(|p| p.is_ok()).collect();
        assert_eq!(ok.len(), intact, "cut {cut}");
        let at_boundary = cut == 24 || offsets.contains(&(cut as u64));
        if at_boundary {
            assert_eq!(got.len(), intact, "cut {cut} at a record boundary is a clean end");
        } else {
            assert_eq!(got.len(), intact + 1, "cut {cut}: exactly one error, then None");
            let err = got[intact].clone().unwrap_err();
            let start = offsets[intact];
            let after = if intact == 0 {
                "before the first packet".to_string()
            } else {
                format!("after packet {intact}")
            };
            let prefix = format!("capture truncated {after} at byte offset {start}: ");
            assert!(err.starts_with(&prefix), "cut {cut}: {err}");
            let left = cut as u64 - start;
            if left < 16 {
                assert!(
                    err.ends_with(&format!("record header needs 16 bytes but only {left} remain")),
                    "{err}"
                );
            } else {
                let declared = intact * 7;
                let rest = left - 16;
                assert!(
                    err.ends_with(&format!(
                        "record header says {declared} bytes but only {rest} remain"
                    )),
                    "{err}"
                );
            }
        }
        assert!(r.next_packet().is_none());
        let s = r.stats();
        assert_eq!(s.packets, intact as u64);
        assert_eq!(s.bytes_total, Some(cut as u64));
    }
}

#[test]
fn stream_reports_the_same_truncation() {
    let (file, _) = sample_pcap(TsResolution::Micro, true);
    for cut in [100, 333, file.len() - 1] {
        let mem = drain(&mut SliceReader::new(&file[..cut]).unwrap());
        let stream = drain(&mut StreamReader::new(Trickle(&file[..cut], 7)).unwrap());
        assert_eq!(mem, stream);
        assert!(mem.last().unwrap().is_err());
    }
}

#[test]
fn corrupt_record_stops_the_source() {
    let (mut file, offsets) = sample_pcap(TsResolution::Micro, false);
    let at = offsets[3] as usize + 8;
    file[at..at + 4].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    let got = drain(&mut SliceReader::new(&file).unwrap());
    assert_eq!(got.len(), 4);
    assert_eq!(
        got[3].clone().unwrap_err(),
        format!(
            "capture corrupt after packet 3 at byte offset {}: record header says 2147483647 bytes, \
             more than the 16777216 any capture record can hold",
            offsets[3]
        )
    );
}

#[test]
fn file_level_errors() {
    let header = PcapHeader {
        dlt: 105,
        resolution: TsResolution::Micro,
        snaplen: 0,
        big_endian: false,
    };
    let file = PcapWriter::with_header(Vec::new(), header)
        .unwrap()
        .into_inner()
        .unwrap();
    let e = SliceReader::new(&file).unwrap_err();
    assert_eq!(e.to_string(), "unsupported link type 105 (IEEE 802.11 wireless)");
    assert!(e.is_fatal());
    let e = SliceReader::new(b"\x1f\x8b\x08\x00rest").unwrap_err();
    assert!(e.to_string().contains("gzip"), "{e}");
    assert!(matches!(
        CaptureFile::open(std::path::Path::new("/nonexistent/x.pcap")),
        Err(CaptureError::Open { .. })
    ));
}

fn pcapng_two_interfaces() -> Vec<u8> {
    let ng = Ng(Endian::Big);
    let mut f = ng.shb();
    f.extend(ng.idb(1, None));
    f.extend(ng.idb(127, None)); // radiotap: unsupported
    f.extend(ng.idb(113, Some(9)));
    f.extend(ng.epb(0, 10, &[1; 14], 14));
    f.extend(ng.epb(1, 11, &[2; 5], 5));
    f.extend(ng.epb(2, 12, &[3; 16], 16));
    f.extend(ng.epb(1, 13, &[4; 5], 5));
    f.extend(ng.epb(0, 14, &[5; 3], 3));
    f
}

#[test]
fn pcapng_unsupported_interface_is_named_once_and_its_packets_skipped() {
    let f = pcapng_two_interfaces();
    let mut r = SliceReader::new(&f).unwrap();
    let got = drain(&mut r);
    let summary: Vec<_> = got
        .iter()
        .map(|p| {
            p.as_ref()
                .map(|(i, ts, link, ..)| (*i, *ts, *link))
                .map_err(|e| e.clone())
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            Ok((0, 10_000, LinkType::Ethernet)),
            Err("unsupported link type 127 (802.11 with radiotap) on interface 1 \
                 (first seen at packet 1; its packets are skipped)"
                .to_string()),
            Ok((2, 12, LinkType::LinuxSll)),
            // Each later packet of it, for the caller to count.
            Err("packet 3 skipped: interface 1 has a link type Clarion cannot parse".to_string()),
            Ok((4, 14_000, LinkType::Ethernet)),
        ]
    );
    let s = r.stats();
    assert_eq!((s.packets, s.skipped, s.bytes), (3, 2, 14 + 16 + 3));
    assert_eq!(
        (s.bytes_read, s.bytes_total),
        (f.len() as u64, Some(f.len() as u64))
    );
}

#[test]
fn pcapng_truncation_and_corruption() {
    let f = pcapng_two_interfaces();
    let ng = Ng(Endian::Big);
    let first_epb = 28 + 20 + 20 + 32; // SHB, two plain IDBs, one with if_tsresol
    let got = drain(&mut SliceReader::new(&f[..first_epb + 48 + 40 + 10]).unwrap());
    assert_eq!(got.len(), 3);
    assert_eq!(
        got[2].clone().unwrap_err(),
        format!(
            "capture truncated after packet 2 at byte offset {}: block header says 48 bytes but only 10 remain",
            first_epb + 48 + 40
        )
    );
    let mut g = f[..first_epb].to_vec();
    g.extend(ng.block(EPB_TYPE, &[0; 8]));
    let got = drain(&mut SliceReader::new(&g).unwrap());
    assert!(got[0]
        .clone()
        .unwrap_err()
        .ends_with("enhanced packet block of 20 bytes is shorter than its 32-byte fixed part"));
    let mut g = f[..first_epb].to_vec();
    g.extend(ng.block(IDB_TYPE, &[0; 8]));
    g.extend(ng.epb(9, 0, &[], 0));
    let got = drain(&mut SliceReader::new(&g).unwrap());
    assert_eq!(
        got[0].clone().unwrap_err(),
        format!(
            "capture corrupt before the first packet at byte offset {}: \
             packet refers to interface 9 but the section describes 4",
            first_epb + 20
        )
    );
    let _ = Corruption::BlockLength {
        block_type: 0,
        len: 0,
    };
}

/// A path for a test file, unique per process and name.
fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("clarion-capture-{}-{name}", std::process::id()))
}

#[test]
fn file_reads_like_memory() {
    let (file, _) = sample_pcap(TsResolution::Nano, false);
    let path = temp_path("whole.pcap");
    std::fs::write(&path, &file).unwrap();
    let mut opened = crate::open(&path).unwrap();
    let read = drain(&mut opened);
    let stats = opened.stats();
    let empty = temp_path("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let e = CaptureFile::open(&empty).unwrap_err();
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&empty);
    assert_eq!(read, drain(&mut SliceReader::new(&file).unwrap()));
    assert_eq!(
        stats.bytes_total,
        Some(file.len() as u64),
        "a regular file's size is known"
    );
    assert_eq!(stats.bytes_read, file.len() as u64);
    assert_eq!(e.to_string(), "not a capture file: the file is empty");
}

/// A capture of `n` packets of 1,000 bytes: far more than one read's worth.
fn big_pcap(n: u32) -> Vec<u8> {
    let mut w = PcapWriter::new(Vec::new(), LinkType::Ethernet, TsResolution::Nano).unwrap();
    for i in 0..n {
        let data = vec![i as u8; 1000];
        w.write_packet(1_700_000_000_000_000_000 + u64::from(i) * 1000, &data, 1000)
            .unwrap();
    }
    w.into_inner().unwrap()
}

/// Issue 18: a file truncated while read was memory-mapped and killed the
/// process with SIGBUS. Read, it ends with an error naming the file, the
/// packet and the offset, after every packet before the cut.
#[test]
fn file_truncated_while_read_ends_with_an_error_naming_it() {
    let bytes = big_pcap(3000); // 3 MB: the cut lies many reads ahead
    let path = temp_path("shrinking.pcap");
    std::fs::write(&path, &bytes).unwrap();
    let mut src = crate::open(&path).unwrap();
    let first = src
        .next_packet()
        .unwrap()
        .map(|p| p.index)
        .map_err(|e| e.to_string());
    let cut = bytes.len() / 2 + 7; // inside a record
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(cut as u64)
        .unwrap();
    let rest = drain(&mut src);
    let _ = std::fs::remove_file(&path);
    assert_eq!(first, Ok(0));
    let (last, packets) = rest.split_last().unwrap();
    let whole = drain(&mut SliceReader::new(&bytes).unwrap());
    assert_eq!(
        packets,
        &whole[1..=packets.len()],
        "the packets before the cut, intact"
    );
    let n = packets.len() + 1; // with the first
    let at = 24 + 1016 * n; // where packet n's record starts
    assert!(at < cut && cut < at + 1016, "the cut is in packet {n}'s record");
    let err = last.clone().unwrap_err();
    assert_eq!(
        err,
        format!(
            "{}: read error after packet {n} at byte offset {at}: the file ended at byte {cut} \
             but had {} bytes when opened: another process truncated it while it was read",
            path.display(),
            bytes.len()
        )
    );
    assert!(src.next_packet().is_none(), "the error is the last item");
}

/// Issue 18: FIFOs, `<(…)` and `/dev/stdin` were refused as "the file is
/// empty" (a map of a pipe has length 0). What the path opens decides:
/// here `/proc/self/fd/N` of a pipe, a FIFO by `fstat`.
#[test]
fn a_pipe_by_path_is_read_as_a_stream() {
    let bytes = big_pcap(700); // more than one read
    let (reader, mut writer) = std::io::pipe().unwrap();
    let fed = bytes.clone();
    let feeder = std::thread::spawn(move || {
        use std::io::Write;
        writer.write_all(&fed).unwrap();
    });
    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&reader));
    let mut src = CaptureFile::open(std::path::Path::new(&path)).unwrap();
    drop(reader); // the path opened its own descriptor of the pipe
    let got = drain(&mut src);
    feeder.join().unwrap();
    assert_eq!(got, drain(&mut SliceReader::new(&bytes).unwrap()));
    let stats = src.stats();
    assert_eq!((stats.bytes_total, stats.bytes_read), (None, bytes.len() as u64));
}

#[test]
fn a_directory_is_refused_at_open() {
    let e = CaptureFile::open(&std::env::temp_dir()).unwrap_err();
    assert!(
        matches!(e, CaptureError::Open { .. }) && e.to_string().ends_with(": it is a directory"),
        "{e}"
    );
}

/// Damage met in a file opened by path names the file; the packets before
/// it are returned as from memory.
#[test]
fn damage_in_a_file_names_it() {
    let (file, _) = sample_pcap(TsResolution::Micro, false);
    let cut = &file[..file.len() - 3];
    let path = temp_path("cut.pcap");
    std::fs::write(&path, cut).unwrap();
    let got = drain(&mut crate::open(&path).unwrap());
    let _ = std::fs::remove_file(&path);
    let want = drain(&mut SliceReader::new(cut).unwrap());
    assert_eq!(got.len(), want.len());
    assert_eq!(got[..got.len() - 1], want[..want.len() - 1]);
    let (got, want) = (got.last().unwrap(), want.last().unwrap());
    assert_eq!(
        got.clone().unwrap_err(),
        format!("{}: {}", path.display(), want.clone().unwrap_err())
    );
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_and_backings_agree(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        chunk in 1usize..50,
    ) {
        let mem = SliceReader::new(&bytes).map(|mut r| drain(&mut r)).map_err(|e| e.to_string());
        let stream = StreamReader::new(Trickle(&bytes, chunk)).map(|mut r| drain(&mut r)).map_err(|e| e.to_string());
        prop_assert_eq!(mem, stream);
    }

    #[test]
    fn mutated_captures_never_panic(
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        ng in any::<bool>(),
    ) {
        let mut f = if ng { pcapng_two_interfaces() } else { sample_pcap(TsResolution::Micro, false).0 };
        for (at, v) in flips {
            let n = f.len();
            f[at % n] = v;
        }
        if let Ok(mut r) = SliceReader::new(&f) {
            let _ = drain(&mut r);
        }
    }
}
