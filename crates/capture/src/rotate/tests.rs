//! Rotation in a temporary directory: every packet in exactly one file
//! and in order (read back with our reader), every file within its limits
//! and every rotation needed, naming, refusing to overwrite, and errors.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use crate::{open, PacketSource};

type Packet = (u64, LinkType, Vec<u8>, u32);

/// The packets of one file, read with our reader.
fn read_file(path: &Path) -> (Vec<Packet>, Option<CaptureError>) {
    let mut f = open(path).unwrap();
    let mut out = Vec::new();
    while let Some(p) = f.next_packet() {
        match p {
            Ok(p) => out.push((p.ts_ns, p.link, p.data.to_vec(), p.orig_len)),
            Err(e) => return (out, Some(e)),
        }
    }
    (out, None)
}

fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

/// Writes `packets` (interface 1 is added before packet `second_at`) and
/// checks the files against the limits; returns them.
fn write_and_check(limits: Rotation, packets: &[(u64, Vec<u8>)], second_at: usize) -> Vec<WrittenFile> {
    let dir = tempfile::tempdir().unwrap();
    let mut w = RotatingPcapng::create(&dir.path().join("cap.pcapng"), limits).unwrap();
    w.add_interface(LinkType::Ethernet, 0, Some("eth0")).unwrap();
    let mut want = Vec::new();
    for (i, (ts, data)) in packets.iter().enumerate() {
        if i == second_at {
            w.add_interface(LinkType::RawIp, 1500, None).unwrap();
        }
        let iface = u32::from(i >= second_at && i % 2 == 1);
        let link = [LinkType::Ethernet, LinkType::RawIp][iface as usize];
        w.write_packet(iface, *ts, data, data.len() as u32 + 4).unwrap();
        want.push((*ts, link, data.clone(), data.len() as u32 + 4));
    }
    let files = w.finish().unwrap();

    // Naming: exactly the files reported, numbered from 0 without gaps.
    let expected: BTreeSet<String> = (0..files.len()).map(|n| format!("cap-{n:06}.pcapng")).collect();
    assert_eq!(names(dir.path()), expected);

    let mut got = Vec::new();
    let mut first_of_next: Vec<(u64, u64)> = Vec::new(); // (ts, block len) of each file's first packet
    for f in &files {
        assert!(f.complete);
        assert_eq!(std::fs::metadata(&f.path).unwrap().len(), f.bytes, "{f}");
        let (pkts, err) = read_file(&f.path);
        assert!(err.is_none(), "{f}: {err:?}");
        assert_eq!(pkts.len() as u64, f.packets, "{f}");
        assert_eq!(f.first_ts_ns, pkts.first().map(|p| p.0));
        assert_eq!(f.last_ts_ns, pkts.last().map(|p| p.0));
        if let Some(p) = pkts.first() {
            first_of_next.push((p.0, packet_block_len(p.2.len(), None)));
        }
        // Within limits (a file's first packet is always written).
        if let (Some(max), true) = (limits.max_bytes, f.packets > 1) {
            assert!(f.bytes <= max, "{f} is over {max} bytes");
        }
        if let (Some(age), Some(first)) = (limits.max_age, pkts.first()) {
            for p in &pkts {
                assert!(
                    p.0.saturating_sub(first.0) < age.as_nanos() as u64,
                    "{f}: {} is too late",
                    p.0
                );
            }
        }
        got.extend(pkts);
    }
    // Every packet in exactly one file, in order.
    assert_eq!(got, want);
    // Every rotation was needed: the next file's first packet fitted
    // neither the size nor the time window of the previous file.
    for k in 1..files.len() {
        let prev = &files[k - 1];
        let (ts, len) = first_of_next[k];
        let over_size = limits.max_bytes.is_some_and(|m| prev.bytes + len > m);
        let over_age = limits
            .max_age
            .is_some_and(|a| ts.saturating_sub(prev.first_ts_ns.unwrap()) >= a.as_nanos() as u64);
        assert!(over_size || over_age, "file {k} started without need");
    }
    files
}

#[test]
fn by_size() {
    let packets: Vec<_> = (0..100u64)
        .map(|i| (i, vec![i as u8; 100 + i as usize]))
        .collect();
    let files = write_and_check(
        Rotation {
            max_bytes: Some(2_000),
            max_age: None,
        },
        &packets,
        30,
    );
    assert!(files.len() > 5, "{}", files.len());
}

#[test]
fn by_packet_time() {
    // One packet every 0.25 s: a 1 s window holds 4 (the fifth is at its
    // end, which the half-open window excludes).
    let packets: Vec<_> = (0..20u64)
        .map(|i| (1_000_000_000 + i * 250_000_000, vec![1; 60]))
        .collect();
    let files = write_and_check(
        Rotation {
            max_bytes: None,
            max_age: Some(Duration::from_secs(1)),
        },
        &packets,
        0,
    );
    assert_eq!(
        files.iter().map(|f| f.packets).collect::<Vec<_>>(),
        [4, 4, 4, 4, 4]
    );
}

#[test]
fn a_file_may_be_exactly_max_bytes() {
    let header = write_and_check(Rotation::default(), &[], 0)[0].bytes;
    let two = header + 2 * packet_block_len(100, None);
    let packets: Vec<_> = (0..6u64).map(|i| (i, vec![9; 100])).collect();
    let limits = Rotation {
        max_bytes: Some(two),
        max_age: None,
    };
    let files = write_and_check(limits, &packets, 6);
    assert_eq!(
        files.iter().map(|f| (f.packets, f.bytes)).collect::<Vec<_>>(),
        [(2, two); 3]
    );
}

#[test]
fn a_packet_larger_than_the_limit_gets_a_file_of_its_own() {
    let packets = vec![(1, vec![0; 10]), (2, vec![0; 5_000]), (3, vec![0; 10])];
    let files = write_and_check(
        Rotation {
            max_bytes: Some(1_000),
            max_age: None,
        },
        &packets,
        3,
    );
    assert_eq!(files.iter().map(|f| f.packets).collect::<Vec<_>>(), [1, 1, 1]);
}

#[test]
fn no_limits_one_file_and_no_packets_still_a_valid_file() {
    let files = write_and_check(Rotation::default(), &[], 0);
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].packets, 0);
}

/// An interface added to a file holding packets never takes it past its
/// size: every size limit around the boundary (CI found one at random).
#[test]
fn an_interface_block_starts_the_next_file_when_it_would_not_fit() {
    let packets: Vec<_> = (0..4u64).map(|i| (i, vec![i as u8; 100])).collect();
    for max in 300..700 {
        let limits = Rotation {
            max_bytes: Some(max),
            max_age: None,
        };
        write_and_check(limits, &packets, 2);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn random_sizes_and_times(
        max_bytes in prop::option::of(200u64..5_000),
        max_age_ms in prop::option::of(1u64..2_000),
        gaps in prop::collection::vec((0u64..500_000_000, 0usize..1_600), 0..80),
        second_at in 0usize..80,
    ) {
        let mut ts = 1_600_000_000_000_000_000u64;
        let packets: Vec<_> = gaps
            .iter()
            .map(|(gap, len)| {
                ts += gap;
                (ts, (0..*len).map(|b| b as u8).collect())
            })
            .collect();
        let limits = Rotation { max_bytes, max_age: max_age_ms.map(Duration::from_millis) };
        write_and_check(limits, &packets, second_at);
    }
}

#[test]
fn refuses_when_files_of_the_sequence_exist() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("cap-000003.pcapng");
    std::fs::write(&old, b"old").unwrap();
    // Names of other sequences do not count.
    std::fs::write(dir.path().join("cap-x.pcapng"), b"").unwrap();
    std::fs::write(dir.path().join("capture-000000.pcapng"), b"").unwrap();
    let e = RotatingPcapng::create(&dir.path().join("cap"), Rotation::default()).unwrap_err();
    assert!(matches!(&e, CaptureError::Exists { path } if *path == old), "{e}");
    assert!(e.to_string().contains("not overwriting"), "{e}");
    assert_eq!(std::fs::read(&old).unwrap(), b"old");
    assert!(!dir.path().join("cap-000000.pcapng").exists());
    RotatingPcapng::create(&dir.path().join("other"), Rotation::default()).unwrap();
}

#[test]
fn a_file_appearing_later_is_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Rotation {
        max_bytes: Some(1),
        max_age: None,
    };
    let mut w = RotatingPcapng::create(&dir.path().join("cap"), limits).unwrap();
    w.add_interface(LinkType::Ethernet, 0, None).unwrap();
    w.write_packet(0, 1, &[1; 20], 20).unwrap();
    let intruder = dir.path().join("cap-000001.pcapng");
    std::fs::write(&intruder, b"mine").unwrap();
    let e = w.write_packet(0, 2, &[2; 20], 20).unwrap_err();
    assert!(
        matches!(&e, CaptureError::Exists { path } if *path == intruder),
        "{e}"
    );
    assert_eq!(std::fs::read(&intruder).unwrap(), b"mine");
    // Stopped: the error is said again, nothing more is written.
    let again = w.write_packet(0, 3, &[3; 20], 20).unwrap_err();
    assert!(
        matches!(&again, CaptureError::WriteStopped { path, .. } if *path == intruder),
        "{again}"
    );
    assert!(w.is_stopped());
    assert_eq!(names(dir.path()).len(), 2);
    // The first file is complete and holds the one packet.
    assert_eq!(read_file(&w.files()[0].path).0.len(), 1);
}

#[test]
fn cannot_create_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain");
    std::fs::write(&file, b"").unwrap();
    let e = RotatingPcapng::create(&file.join("cap"), Rotation::default()).unwrap_err();
    assert!(
        matches!(&e, CaptureError::Create { path, .. } if path.ends_with("plain/cap-000000.pcapng")),
        "{e}"
    );
}

#[test]
fn refused_packets_do_not_stop_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Rotation {
        max_bytes: Some(1_000),
        max_age: None,
    };
    let mut w = RotatingPcapng::create(&dir.path().join("cap"), limits).unwrap();
    let e = w.write_packet(0, 1, &[1], 1).unwrap_err();
    assert!(
        matches!(&e, CaptureError::Write { error, .. } if error.kind() == io::ErrorKind::InvalidInput),
        "{e}"
    );
    w.add_interface(LinkType::Ethernet, 0, None).unwrap();
    w.write_packet(0, 1, &[1], 1).unwrap();
    // Too large for any reader: refused without starting a file.
    let huge = vec![0u8; 16 * 1024 * 1024];
    let e = w.write_packet(0, 2, &huge, 1).unwrap_err();
    assert!(
        matches!(&e, CaptureError::Write { error, .. } if error.kind() == io::ErrorKind::InvalidInput),
        "{e}"
    );
    w.write_packet(0, 3, &[3], 1).unwrap();
    let files = w.finish().unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].packets, 2);
}

/// A tmpfs of `size` mounted on a fresh directory, unmounted on drop.
struct TinyFs {
    dir: tempfile::TempDir,
}

impl TinyFs {
    fn mount(size: &str) -> Option<TinyFs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(TinyFs { dir })
    }
}

impl Drop for TinyFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn disk_full_is_a_clean_error() {
    let Some(fs) = TinyFs::mount("64k") else {
        eprintln!("skipped: cannot mount a tmpfs (needs root); disk-full path not tested");
        return;
    };
    let limits = Rotation {
        max_bytes: Some(20_000),
        max_age: None,
    };
    let mut w = RotatingPcapng::create(&fs.dir.path().join("cap"), limits).unwrap();
    w.add_interface(LinkType::Ethernet, 0, None).unwrap();
    let mut written = 0u64;
    let err = loop {
        match w.write_packet(0, written, &[written as u8; 1000], 1000) {
            Ok(()) => written += 1,
            Err(e) => break e,
        }
        assert!(written < 1_000, "a 64 KiB file system never filled");
    };
    let CaptureError::Write { path, error } = &err else {
        panic!("{err}");
    };
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{err}");
    assert!(path.starts_with(fs.dir.path()));
    assert!(w.is_stopped());
    let again = w.write_packet(0, 0, &[0; 10], 10).unwrap_err();
    assert!(
        matches!(&again, CaptureError::WriteStopped { path: p, .. } if p == path),
        "{again}"
    );
    let files = w.files().to_vec();
    assert!(!files.last().unwrap().complete);
    assert!(files[..files.len() - 1].iter().all(|f| f.complete));
    // What reached the disk is a prefix of what was written, in order.
    let mut got = Vec::new();
    for f in &files {
        got.extend(read_file(&f.path).0.into_iter().map(|p| p.0));
    }
    assert!(got.len() as u64 <= written);
    assert_eq!(got, (0..got.len() as u64).collect::<Vec<_>>());
    assert!(w.finish().is_err());
}
