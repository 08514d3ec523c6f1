//! `clarion collect`: receive the header streams of export policies
//! (`send headers to collector ...`) and write them as JSON lines or
//! pcapng. Thin: flags in, `clarion_collector::Collector::run` out, a
//! summary of what arrived and what was lost at the end.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::anyhow;
use clap::{Args, ValueEnum};
use clarion_cmdline::parse_duration;
use clarion_collector::{CollectStats, Collector, HeaderOut, JsonLines, PcapngHeaders, Until};
use clarion_headers::{Auth, Key};

use crate::summary::thousands;
use crate::Failure;

pub const AFTER_HELP: &str = "Examples:
  clarion collect --make-key headers.key              (once; copy it to the exporters)
  clarion collect --key headers.key -o headers.pcapng
  clarion run -i eth0 --exports policies.clarion --export-key headers.key
  clarion collect --key headers.key --listen [::]:9739 --format jsonl | jq .dst_ip
  clarion collect --insecure --listen 127.0.0.1:9739 -o web.jsonl --count 100000 --duration 10m

Authentication: every datagram must carry an HMAC-SHA256 tag made with the
key of --key (the exporters' --export-key, the same file). Datagrams without
a tag or with a wrong one are refused and counted per source address;
without --key the collector refuses to start, unless --insecure says to
take any datagram (anyone who can reach the port can then add headers).

Each datagram names its exporter (--exporter-name, by default its host
name), worker and session (drawn when the exporter starts): lost, late and
repeated datagrams are counted per stream and listed at the end by name and
session (repeats are not written twice); a restarted exporter is a new
session, not a loss. A jump in sequence numbers of over 2^20 datagrams is
counted as a reset, not as loss. A datagram that does not decode, or of
another format version, is counted and skipped; the next one decodes on its
own. Ctrl-C or SIGTERM (or the end of --duration) reads what is still
queued in the socket, then writes the summary.

Exit status: 0 when nothing was lost; 1 when anything was (datagrams missing
from a stream, dropped by the kernel, left unread at the stop, not
readable, or a reset), the summary saying what; 2 for bad usage.

In pcapng, each record is the frame of the packet's headers (Ethernet,
IP, TCP/UDP; no payload) with the packet's original length on the wire,
one interface per exporter interface: tshark, Wireshark and Zeek read it.
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

    /// Take only datagrams tagged with the key in FILE (the exporters'
    /// --export-key); make one with --make-key.
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,

    /// Take datagrams without a tag too (any sender that reaches the port;
    /// with --key, tagged ones are still checked). For a trusted network
    /// or a test only.
    #[arg(long)]
    pub insecure: bool,

    /// Write a new random key to FILE (mode 0600, never over an existing
    /// file) and exit: give it to the collector (--key) and the exporters
    /// (--export-key).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["key", "insecure", "output", "count", "duration"])]
    pub make_key: Option<PathBuf>,

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

/// The header-stream key in `path` (a key file as `--make-key` writes
/// it), checked as the control API's token file is: a regular file only
/// its owner may read or write (the mode of the file opened, not of a
/// name that could change meanwhile), read up to 4 KiB.
pub fn read_key(path: &Path) -> Result<Key, Failure> {
    use std::io::Read;
    let fail = |why: String| Failure::Usage(format!("clarion: key file {}: {why}", path.display()));
    let file = File::open(path).map_err(|e| fail(e.to_string()))?;
    let meta = file.metadata().map_err(|e| fail(e.to_string()))?;
    if !meta.is_file() {
        return Err(fail("is not a regular file".into()));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(fail(format!(
            "mode {mode:04o} lets others than its owner read or write the key; `chmod 600` it"
        )));
    }
    let mut text = String::new();
    file.take(4096)
        .read_to_string(&mut text)
        .map_err(|e| fail(e.to_string()))?;
    Key::parse(&text).map_err(|e| fail(format!("{e}; make a key with `clarion collect --make-key FILE`")))
}

/// The machine's host name (the default exporter name), `unnamed` if
/// the system will not say. Read from the kernel's own file (Linux), which
/// needs no `unsafe` call.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unnamed".to_string())
}

/// `--make-key FILE`: 32 random bytes from the kernel, as hex.
fn make_key(path: &Path, quiet: bool) -> Result<ExitCode, Failure> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| Failure::Runtime(anyhow!("cannot draw a random key from /dev/urandom: {e}")))?;
    let fail = |e: std::io::Error| Failure::Runtime(anyhow!("cannot write {}: {e}", path.display()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(fail)?;
    f.write_all(clarion_headers::key_file_text(&bytes).as_bytes())
        .map_err(fail)?;
    f.sync_all().map_err(fail)?;
    if !quiet {
        eprintln!(
            "clarion: new header-stream key in {}: `clarion collect --key {0}` and `clarion run ... --export-key {0}` (copy it to the exporters only)",
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Whose datagrams are taken: `--key`'s exporters', or (`--insecure`) anyone's.
fn auth(a: &CollectArgs) -> Result<Auth, Failure> {
    let key = a.key.as_deref().map(read_key).transpose()?;
    match (key, a.insecure) {
        (Some(k), false) => Ok(Auth::Key(k)),
        (k, true) => Ok(Auth::Insecure(k)),
        (None, false) => Err(Failure::Usage(
            "clarion: collect needs a key to tell its exporters' datagrams from anyone else's: \
             make one with `clarion collect --make-key headers.key`, then run \
             `clarion collect --key headers.key` and the exporters with `--export-key headers.key` \
             (or, on a trusted network only, `clarion collect --insecure`)"
                .to_string(),
        )),
    }
}

/// Where the headers go (`--output`, else standard output), as pcapng or
/// JSON lines (`--format`, else by the file's extension).
fn header_out(a: &CollectArgs) -> Result<Box<dyn HeaderOut>, Failure> {
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
    Ok(if pcapng {
        Box::new(
            PcapngHeaders::new(writer).map_err(|e| Failure::Runtime(anyhow!("cannot write pcapng: {e}")))?,
        )
    } else {
        Box::new(JsonLines::new(writer))
    })
}

pub fn collect(a: &CollectArgs) -> Result<ExitCode, Failure> {
    if let Some(path) = &a.make_key {
        return make_key(path, a.quiet);
    }
    let auth = auth(a)?;
    let mut out = header_out(a)?;
    // Before the socket is announced: a signal from then on (a test that
    // stops the collector as soon as it says where it listens) finds the
    // handlers in place and ends with the drain and the summary.
    let stop = crate::failure::stop_flag()?;
    let insecure = matches!(auth, Auth::Insecure(_));
    let mut collector =
        Collector::bind(a.listen, a.recv_buffer, auth).map_err(|e| Failure::Runtime(anyhow!(e)))?;
    let local = collector.local_addr().map_err(|e| Failure::Runtime(anyhow!(e)))?;
    if !a.quiet {
        eprintln!(
            "clarion: collecting headers on {local} (receive buffer {} bytes){}",
            thousands(collector.recv_buffer() as u64),
            if insecure {
                "; INSECURE: datagrams without a valid tag are taken"
            } else {
                ""
            }
        );
    }
    let until = Until {
        records: a.count,
        duration: a.duration.map(std::time::Duration::from_nanos),
    };
    let result = collector.run(out.as_mut(), until, &stop);
    let stats = collector.stats();
    let losses = stats.losses();
    if !a.quiet {
        eprint!("{}", summary(&stats));
    }
    result.map_err(|e| Failure::Runtime(anyhow!(e)))?;
    if losses.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        // Said even with -q: the exit status alone does not say what.
        eprintln!("clarion: headers were LOST: {}", losses.join("; "));
        Ok(ExitCode::from(1))
    }
}

fn summary(s: &CollectStats) -> String {
    let mut out = format!(
        "clarion: {} headers from {} datagrams ({} bytes)\n",
        thousands(s.records),
        thousands(s.datagrams),
        thousands(s.bytes)
    );
    for (id, e) in &s.streams {
        out += &format!(
            "  exporter {} worker {} session {:016x}: {} datagrams, {} headers; lost {} datagrams ({} headers), {} late, {} repeated, {} too old, {} resets\n",
            id.exporter,
            id.worker,
            id.session,
            thousands(e.datagrams),
            thousands(e.records),
            thousands(e.lost_datagrams),
            thousands(e.lost_records),
            thousands(e.late),
            thousands(e.duplicates),
            thousands(e.too_old),
            thousands(e.resets),
        );
    }
    if s.refused_total() > 0 {
        let reasons: Vec<String> = s
            .refused
            .iter()
            .map(|(r, n)| format!("{} {r}", thousands(*n)))
            .collect();
        out += &format!(
            "  refused {} datagrams: {} (first: {})\n",
            thousands(s.refused_total()),
            reasons.join(", "),
            s.first_error.as_deref().unwrap_or("?")
        );
        for (from, n) in &s.refused_from {
            out += &format!("    from {from}: {}\n", thousands(*n));
        }
        if s.refused_from_others > 0 {
            out += &format!("    from other addresses: {}\n", thousands(s.refused_from_others));
        }
    }
    if s.drained > 0 {
        out += &format!("  read {} datagrams queued at the stop\n", thousands(s.drained));
    }
    match s.kernel_drops {
        Some(d) if d > 0 => {
            out += &format!(
                "  the kernel dropped {} datagrams (receive buffer full)\n",
                thousands(d)
            )
        }
        Some(_) => {}
        None => out += "  the kernel's drop count could not be read\n",
    }
    if let Some(b) = s.left_unread {
        out += &format!("  left unread in the socket: {} bytes\n", thousands(b));
    }
    out
}
