//! `clarion collect`: receive the header streams of export policies
//! (`send headers to collector ...`) and write them as JSON lines or
//! pcapng. Thin: flags in, `clarion_collector::Collector::run` out, a
//! summary of what arrived and what was lost at the end.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::anyhow;
use clap::{Args, ValueEnum};
use clarion_cmdline::parse_duration;
use clarion_collector::{CollectStats, Collector, HeaderOut, JsonLines, PcapngHeaders, Until};

use crate::summary::thousands;
use crate::Failure;

pub const AFTER_HELP: &str = "Examples:
  clarion collect -o headers.pcapng
  clarion collect --listen [::]:9739 --format jsonl | jq .dst
  clarion collect --listen 127.0.0.1:9739 -o web.jsonl --count 100000 --duration 10m

Each datagram carries its exporter's id and a sequence number: lost,
late and repeated datagrams are counted per exporter and reported at the
end (repeats are not written twice). A datagram that does not decode is
counted and skipped; the next one decodes on its own. Ctrl-C or SIGTERM
writes what has arrived and the summary.

In pcapng, each record is the frame of the packet's headers (Ethernet,
IP, TCP/UDP; no payload) with the packet's length on the wire, one
interface per exporter interface: tshark, Wireshark and Zeek read it.
In JSON lines, one object per packet (docs/exports.md lists the fields).";

#[derive(Args, Debug)]
pub struct CollectArgs {
    /// Address and UDP port to receive on (IPv4 or IPv6).
    #[arg(long, default_value = "0.0.0.0:9739", value_name = "ADDR:PORT")]
    pub listen: SocketAddr,

    /// Write the headers to FILE (default: standard output, JSON lines).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// 'jsonl', 'pcapng', or 'auto' (pcapng for a *.pcapng file, else jsonl).
    #[arg(long, value_enum, default_value_t = CollectFormat::Auto, value_name = "FORMAT")]
    pub format: CollectFormat,

    /// Stop after this many headers.
    #[arg(long, short = 'c', value_name = "N")]
    pub count: Option<u64>,

    /// Stop after this long.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Option<u64>,

    /// Receive buffer to ask the kernel for, in bytes: bursts from a
    /// host replaying a capture wait there (as root it may pass
    /// net.core.rmem_max).
    #[arg(long, default_value_t = 64 << 20, value_name = "BYTES")]
    pub recv_buffer: usize,

    /// Do not print the summary at the end.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollectFormat {
    Auto,
    Jsonl,
    Pcapng,
}

pub fn collect(a: &CollectArgs) -> Result<ExitCode, Failure> {
    let pcapng = match a.format {
        CollectFormat::Pcapng => true,
        CollectFormat::Jsonl => false,
        CollectFormat::Auto => a
            .output
            .as_ref()
            .is_some_and(|p| p.extension().is_some_and(|e| e == "pcapng")),
    };
    let writer: Box<dyn Write> = match &a.output {
        Some(path) => {
            Box::new(BufWriter::new(File::create(path).map_err(|e| {
                Failure::Runtime(anyhow!("cannot create {}: {e}", path.display()))
            })?))
        }
        None => Box::new(BufWriter::new(std::io::stdout().lock())),
    };
    let mut out: Box<dyn HeaderOut> = if pcapng {
        Box::new(
            PcapngHeaders::new(writer).map_err(|e| Failure::Runtime(anyhow!("cannot write pcapng: {e}")))?,
        )
    } else {
        Box::new(JsonLines::new(writer))
    };
    let mut collector = Collector::bind(a.listen, a.recv_buffer).map_err(|e| Failure::Runtime(anyhow!(e)))?;
    let local = collector.local_addr().map_err(|e| Failure::Runtime(anyhow!(e)))?;
    if !a.quiet {
        eprintln!(
            "clarion: collecting headers on {local} (receive buffer {} bytes)",
            thousands(collector.recv_buffer() as u64)
        );
    }
    let stop = crate::live::stop_flag()?;
    let until = Until {
        records: a.count,
        duration: a.duration.map(std::time::Duration::from_nanos),
    };
    let result = collector.run(out.as_mut(), until, &stop);
    let stats = collector.stats();
    if !a.quiet {
        eprint!("{}", summary(&stats));
    }
    result.map_err(|e| Failure::Runtime(anyhow!(e)))?;
    let lost: u64 = stats.exporters.iter().map(|(_, e)| e.lost_datagrams).sum();
    Ok(if lost > 0 || stats.bad_datagrams > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn summary(s: &CollectStats) -> String {
    let mut out = format!(
        "clarion: {} headers from {} datagrams ({} bytes)\n",
        thousands(s.records),
        thousands(s.datagrams),
        thousands(s.bytes)
    );
    for (id, e) in &s.exporters {
        out += &format!(
            "  exporter {id}: {} datagrams, {} headers; lost {} datagrams ({} headers), {} late, {} repeated\n",
            thousands(e.datagrams),
            thousands(e.records),
            thousands(e.lost_datagrams),
            thousands(e.lost_records),
            thousands(e.late),
            thousands(e.duplicates + e.too_old),
        );
    }
    if s.bad_datagrams > 0 {
        out += &format!(
            "  {} datagrams did not decode (first: {})\n",
            thousands(s.bad_datagrams),
            s.first_error.as_deref().unwrap_or("?")
        );
    }
    out
}
