//! `clarion split`: a capture of several hosts' traffic, split by an
//! inventory into one capture per host (each packet to the owners of its
//! source and destination addresses, as `clarion run --inventory` splits it
//! in memory), so that each host's agent can replay its own.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use clarion_capture::{PacketSource, PcapWriter, RawPacket, TsResolution};
use clarion_manager::Inventory;

use crate::failure::runtime;
use crate::network::read_inventory;
use crate::summary::thousands;
use crate::Failure;

pub const AFTER_HELP: &str = "Examples:
  clarion split --pcap examples/demo.pcap --inventory examples/demo-hosts.txt --out-dir /tmp/hosts
  clarion agent --host sender-1 --pcap /tmp/hosts/sender-1.pcap

Writes DIR/HOST.pcap for every host of the inventory (nanosecond
timestamps, the input's link type). Frames that are not IP, do not parse,
or belong to no host are left out and counted.";

#[derive(Args, Debug)]
pub struct SplitArgs {
    /// The capture to split (pcap or pcapng).
    #[arg(long, value_name = "FILE")]
    pub pcap: PathBuf,

    /// The hosts and their prefixes (see docs/manager.md).
    #[arg(long, value_name = "FILE")]
    pub inventory: PathBuf,

    /// Where to write one capture per host (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out_dir: PathBuf,
}

pub fn split(a: &SplitArgs) -> Result<ExitCode, Failure> {
    let inventory = read_inventory(&a.inventory)?;
    let mut source = crate::host_spec::open_capture(&a.pcap)?;
    std::fs::create_dir_all(&a.out_dir)
        .with_context(|| format!("cannot create {}", a.out_dir.display()))
        .map_err(runtime)?;
    let mut out = HostFiles::new(&inventory, &a.out_dir);
    let (mut frames, mut unowned, mut not_ip) = (0u64, 0u64, 0u64);
    let mut damage = None;
    while let Some(item) = source.next_packet() {
        let raw = match item {
            Ok(r) => r,
            Err(e) if e.is_fatal() => {
                damage = Some(e);
                break;
            }
            // Named once per interface (its later packets are skipped silently).
            Err(e) if matches!(e.in_file(), clarion_capture::CaptureError::Skipped { .. }) => continue,
            Err(e) => {
                eprintln!("clarion: warning: {e}");
                continue;
            }
        };
        frames += 1;
        let Ok(rec) = clarion_wire::parse_frame(raw.link, raw.data, raw.ts_ns, raw.orig_len) else {
            not_ip += 1;
            continue;
        };
        let src = inventory.owner(rec.key.src_addr());
        let dst = inventory.owner(rec.key.dst_addr()).filter(|d| Some(*d) != src);
        if src.is_none() && dst.is_none() {
            unowned += 1;
        }
        for h in [src, dst].into_iter().flatten() {
            out.write(h, &raw)?;
        }
    }
    out.finish()?;
    eprintln!(
        "clarion: split {} frames into {}: {} of no host, {} not IP or malformed",
        thousands(frames),
        a.out_dir.display(),
        thousands(unowned),
        thousands(not_ip)
    );
    Ok(match damage {
        Some(e) => {
            eprintln!("clarion: warning: {e}; the split covers the packets before the damage");
            ExitCode::from(1)
        }
        None => ExitCode::SUCCESS,
    })
}

/// One capture per host, opened on the host's first packet (the link type is the packet's).
struct HostFiles<'a> {
    inventory: &'a Inventory,
    dir: &'a Path,
    writers: HashMap<usize, PcapWriter<BufWriter<File>>>,
    counts: Vec<u64>,
}

impl<'a> HostFiles<'a> {
    fn new(inventory: &'a Inventory, dir: &'a Path) -> Self {
        HostFiles {
            inventory,
            dir,
            writers: HashMap::new(),
            counts: vec![0; inventory.hosts().len()],
        }
    }

    fn write(&mut self, h: usize, raw: &RawPacket<'_>) -> Result<(), Failure> {
        let w = match self.writers.entry(h) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let path = self.dir.join(format!("{}.pcap", self.inventory.hosts()[h].name));
                let f = File::create(&path)
                    .with_context(|| format!("cannot create {}", path.display()))
                    .map_err(runtime)?;
                let w = PcapWriter::new(BufWriter::new(f), raw.link, TsResolution::Nano)
                    .with_context(|| format!("cannot write {}", path.display()))
                    .map_err(runtime)?;
                v.insert(w)
            }
        };
        w.write_packet(raw.ts_ns, raw.data, raw.orig_len)
            .context("cannot write a host's capture")
            .map_err(runtime)?;
        self.counts[h] += 1;
        Ok(())
    }

    /// Flushes every file and says how many packets each host got.
    fn finish(self) -> Result<(), Failure> {
        for (h, w) in self.writers {
            w.into_inner()
                .and_then(|mut b| std::io::Write::flush(&mut b))
                .with_context(|| format!("cannot write the capture of {}", self.inventory.hosts()[h].name))
                .map_err(runtime)?;
        }
        for (host, n) in self.inventory.hosts().iter().zip(&self.counts) {
            let note = if *n == 0 {
                " (no packets: no file written)"
            } else {
                ""
            };
            eprintln!("  {}: {} packets{note}", host.name, thousands(*n));
        }
        Ok(())
    }
}
