//! The argument groups commands share (monitor, live capture, exports,
//! formats): parsing only; `run.rs` and `check.rs` do the work. The
//! commands themselves (`Cli`, `Command`) are the binary's root, above
//! every command's module. The research harness (bench, gen, dos,
//! feasibility) is `clarion-lab`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
pub use clarion_cmdline::parse_duration;

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["pcap", "interface"])))]
// The export settings stand on a live host without --exports: policies
// may be installed at runtime (--api, `clarion exports add`).
#[command(
    group(clap::ArgGroup::new("exporting").multiple(true).args(["exports", "interface"])),
    mut_arg("export_dir", |a| a
        .requires(clap::builder::Resettable::<clap::Id>::Reset)
        .requires("exporting")),
    mut_arg("export_fast_path", |a| a
        .requires(clap::builder::Resettable::<clap::Id>::Reset)
        .requires("exporting")),
    mut_arg("export_cache", |a| a
        .requires(clap::builder::Resettable::<clap::Id>::Reset)
        .requires("exporting")),
    mut_arg("export_cpu", |a| a
        .requires(clap::builder::Resettable::<clap::Id>::Reset)
        .requires("exporting"))
)]
pub struct RunArgs {
    /// Capture file to read (pcap or pcapng; '-' reads standard input).
    /// With --inventory, repeat as NAME=FILE for one capture per host
    /// (merged by time; each host measures its own capture's packets).
    #[arg(
        long,
        value_name = "FILE",
        value_parser = parse_capture,
        required_unless_present = "interface",
        conflicts_with = "interface"
    )]
    pub pcap: Vec<CaptureArg>,

    /// Capture live from this interface (repeat for several). Needs root or
    /// CAP_NET_RAW; runs until Ctrl-C (or SIGTERM) or --duration.
    #[arg(long, short = 'i', value_name = "IFACE", help_heading = "Live capture")]
    pub interface: Vec<String>,

    /// Hosts and the prefixes each owns (one per line: a name, then its
    /// prefixes). One monitor per host, fed the packets of its addresses
    /// from one capture, or its own capture (--pcap NAME=FILE); network-wide
    /// events (`across hosts`) are decided over all of them.
    #[arg(long, value_name = "FILE", requires = "pcap")]
    pub inventory: Option<PathBuf>,

    /// Write a JSON line (schema clarion.health/1: window, host, worker,
    /// completeness) for every epoch not seen in full, whether or not an
    /// event fired in it: frames malformed or skipped, packets untracked,
    /// the input starting or ending inside it. One worker (with --inventory,
    /// every host's). Live captures: see --epoch-stats.
    #[arg(long, value_name = "FILE", conflicts_with = "interface")]
    pub health: Option<PathBuf>,

    /// Events file (the Clarion event language, conventionally *.clarion).
    /// Optional with --records, --gpv, --app or --exports.
    #[arg(long, value_name = "FILE", required_unless_present_any = ["records", "gpv", "app", "exports"])]
    pub events: Option<PathBuf>,

    /// Report format: 'json' (one JSON object per line, schema clarion.report/1),
    /// 'table' (aligned columns for people), or 'auto' (table on a terminal, else json).
    #[arg(long, value_enum, default_value_t = Format::Auto, value_name = "FORMAT")]
    pub format: Format,

    /// Write reports to FILE instead of standard output, or publish them to
    /// a NATS JetStream stream: nats://HOST:PORT/STREAM (subject
    /// clarion.reports.<--host>; see docs/records.md).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Host name put in every report (default: this machine's name).
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,

    /// Show a progress bar over a capture file: 'auto' (when standard error
    /// is a terminal), 'always', 'never'.
    #[arg(long, value_enum, default_value_t = When::Auto, value_name = "WHEN", conflicts_with = "interface")]
    pub progress: When,

    /// Replay a capture file at this many times its own pace (1: as it was
    /// captured, so that what follows the reports, such as an alert
    /// receiver's timers, sees them spread as live ones); default: as fast
    /// as possible. Packet time is unchanged: reports carry the capture's
    /// times.
    #[arg(long, value_name = "FACTOR", value_parser = parse_speed, conflicts_with = "interface")]
    pub speed: Option<f64>,

    /// Do not print the summary at the end.
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// Worker threads, each with its own monitor and a share of the flows
    /// (both directions of a connection together: the kernel's fanout live,
    /// a symmetric flow hash on files); their statistics are merged per
    /// event, group and window before testing, so the reports are one
    /// monitor's. Events with drill-downs need one worker.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,

    #[command(flatten)]
    pub monitor: MonitorArgs,

    #[command(flatten)]
    pub export: ExportArgs,

    #[command(flatten)]
    pub alerts: crate::alerts::AlertArgs,

    // Last: its heading would carry over to the flags after it.
    #[command(flatten)]
    pub live: LiveArgs,
}

/// A replay's pace: a factor above 0 (`--speed` of `clarion run` and `clarion agent`).
pub fn parse_speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a speed: give a factor above 0, e.g. 1 (capture pace) or 10"
        )),
    }
}

/// The monitor's flags, shared by `clarion run` and `clarion agent`
/// (issue 34); `crate::monitor::config` turns them into the engine's
/// `MonitorConfig`, and `crate::monitor::file_refusal` refuses those a
/// capture file cannot use. Each flag names its heading: a flattened
/// struct's `next_help_heading` would carry over to the flags after it.
#[derive(Args, Debug, Clone)]
pub struct MonitorArgs {
    /// Most flows tracked at once; packets of further flows are counted as untracked.
    #[arg(long, help_heading = "Monitor", default_value_t = 1 << 20, value_name = "N")]
    pub flow_capacity: usize,

    /// Forget a flow after it has been idle this long (e.g. 60s, 500ms); its
    /// entry is free for another flow within a quarter of this more.
    #[arg(long, help_heading = "Monitor", default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub flow_timeout: u64,

    /// `is_burst` holds for a packet at most this long after its flow's previous one.
    #[arg(long, help_heading = "Monitor", default_value = "1ms", value_parser = parse_duration, value_name = "DURATION")]
    pub burst_gap: u64,

    /// Segments awaiting acknowledgement listed per TCP flow for RTT samples; beyond it they are counted.
    #[arg(long, help_heading = "Monitor", default_value_t = 1024, value_name = "N")]
    pub tcp_segment_limit: usize,

    /// DoS filter: match and insert a new flow only once it has sent more
    /// than BYTES (IP length) in one epoch; 0 turns the filter off.
    #[arg(long, help_heading = "Monitor", default_value_t = 0, value_name = "BYTES")]
    pub dos_threshold: u32,

    /// Raise the DoS threshold by itself (double it, from 40 B when 0) each
    /// time a sweep is found unfinished as the next epoch ends. Live
    /// capture (-i): a file's sweeps finish before its next packet is read.
    #[arg(long, help_heading = "Monitor")]
    pub dos_auto_raise: bool,

    /// Degraded mode under overload (MONA): rather than let the kernel drop
    /// packets when the monitor cannot keep up, measure fewer events for
    /// some flows, lowest `priority` first, and say in every report how
    /// many flows of its event went unmeasured and its estimated recall.
    /// Live capture (-i); see docs/adapt.md.
    #[arg(long, help_heading = "Monitor")]
    pub adapt: bool,
}

/// Flow records and grouped packet vectors (TurboFlow, *Flow) beside the
/// events; see `docs/records.md`.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Flow records and GPVs")]
pub struct ExportArgs {
    /// Write a flow record per flow (ended by an idle or active timeout, a
    /// TCP FIN or RST, or the end of input) to DEST; repeat for several:
    /// FILE.jsonl (JSON lines), FILE.parquet, FILE.csv, FILE.ipfix (RFC 5655 file),
    /// ipfix+udp://HOST:PORT or ipfix+tcp://HOST:PORT (an IPFIX collector:
    /// nfcapd, pmacct, goflow2, ipfixcol2, ntopng), nats://HOST:PORT/STREAM
    /// (a NATS JetStream stream, subject clarion.records.<host>, created if
    /// absent), clickhouse+http://HOST:PORT/TABLE (batched INSERTs into a
    /// ClickHouse table; docs/records.md defines it); JSON lines also to -
    /// (standard output, if the reports are not there) and to a named pipe
    /// or character device (/dev/null) whatever its name.
    #[arg(long, value_name = "DEST")]
    pub records: Vec<String>,

    /// Write grouped packet vectors (a flow key and per-packet features:
    /// time, size, TCP flags) to FILE (.gpv, Clarion's own; or .parquet)
    /// for metric apps (`clarion apps`).
    #[arg(long, value_name = "FILE")]
    pub gpv: Option<PathBuf>,

    /// Run a metric app on the GPVs as they are made (repeat for several):
    /// profiler (packet gaps per source host), classifier (the first 8
    /// packets' sizes and gaps per flow), microburst (the flows of the last
    /// millisecond, by bytes). Their report (schema clarion.apps/1) is
    /// written at the end; `clarion apps run` gives the same from a GPV file.
    #[arg(long, value_name = "NAME")]
    pub app: Vec<String>,

    /// Where the apps' report goes at the end, theirs and those added at
    /// runtime through the control API and still running (default:
    /// standard output, after the events' reports).
    #[arg(long, value_name = "FILE")]
    pub app_output: Option<PathBuf>,

    /// A flow's record ends after it has been idle this long.
    #[arg(long, requires = "records", default_value = "15s", value_parser = parse_duration, value_name = "DURATION")]
    pub record_idle_timeout: u64,

    /// A long flow's record ends after this long, and the flow goes on in a new one.
    #[arg(long, requires = "records", default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    pub record_active_timeout: u64,

    /// Slots of the microflow cache in front of the record aggregator (a
    /// record of a flow leaves the cache when another flow needs its slot).
    #[arg(long, requires = "records", default_value_t = 4096, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=(1 << 24)))]
    pub record_cache: u32,

    /// On a live host with --api: keep the newest N flow records in memory
    /// for the control API's /v1/flows (the console's top talkers behind a
    /// firing; 88 bytes each); the oldest are dropped and counted.
    /// 0: keep none. A live agent keeps them with or without --api (its
    /// manager asks for them), with this default.
    #[arg(long, requires = "records", requires = "api", conflicts_with = "pcap", default_value_t = clarion_flow_window::DEFAULT_RECORDS, value_name = "N")]
    pub flow_window: usize,

    /// ... and drop a kept record once its last packet is this much older
    /// (in packet time) than the newest record's.
    #[arg(long, requires = "records", requires = "api", conflicts_with = "pcap", default_value = "15m", value_parser = parse_duration, value_name = "DURATION")]
    pub flow_window_age: u64,

    #[command(flatten)]
    pub policies: PolicyArgs,
}

/// Export policies (Trident): headers and packets of chosen traffic to
/// collectors, analyzers and files; and the files of events that capture
/// (`then capture`). See `docs/exports.md`.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Export policies and captures")]
pub struct PolicyArgs {
    /// Export policies file (`export NAME filter ... send ...`): headers to
    /// a collector (`clarion collect`), packets to a VXLAN analyzer or to
    /// pcapng files. Every packet is still measured by the events.
    #[arg(long, value_name = "FILE")]
    pub exports: Option<PathBuf>,

    /// Directory of the pcapng files the policies write
    /// (POLICY-RUN-NNNNNN.pcapng, RUN the start time); created if missing.
    #[arg(long, requires = "exports", value_name = "DIR")]
    pub export_dir: Option<PathBuf>,

    /// Fast path of the policies' classifier: 'uss' (Trident's unified
    /// space search over cached uniflows: about one hash lookup a packet),
    /// 'megaflow' (Open vSwitch's), or 'none' (tuple space search for
    /// every packet).
    #[arg(long, requires = "exports", value_enum, default_value_t = FastPathArg::Uss, value_name = "KIND")]
    pub export_fast_path: FastPathArg,

    /// Entries of the classifier's fast-path cache.
    #[arg(long, requires = "exports", default_value_t = 4096, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=(1 << 24)))]
    pub export_cache: u32,

    /// CPU budget of export work, as a fraction of one core (e.g. 0.3):
    /// above it, only a sampled share of the packets a policy takes is
    /// exported (Trident's AIMD on the sampling ratio, which every header
    /// record carries); events still see every packet. Default: export all.
    #[arg(long, requires = "exports", value_parser = parse_fraction, value_name = "FRACTION")]
    pub export_cpu: Option<f64>,

    /// Tag every header datagram with the key in FILE (HMAC-SHA256), which
    /// the collector checks (`clarion collect --key FILE`, the same file);
    /// make one with `clarion collect --make-key FILE`. Without it the
    /// datagrams are untagged and a collector takes them only when run
    /// with --insecure.
    #[arg(long, value_name = "FILE")]
    pub export_key: Option<PathBuf>,

    /// The name the header datagrams give this exporter, which the
    /// collector's summary lists (default: the machine's host name;
    /// 1 to 64 of A-Z a-z 0-9 . - _ :).
    #[arg(long, value_name = "NAME")]
    pub exporter_name: Option<String>,

    /// Directory of the files of events with `then capture` (one pcapng per
    /// report: EVENT-WINDOW-GROUP.pcapng); created if missing. Required
    /// when an event captures.
    #[arg(long, value_name = "DIR")]
    pub capture_dir: Option<PathBuf>,

    /// Bytes of recent packets kept for `then capture ... before`: the
    /// span a capture can reach back (its report says where its file
    /// really starts).
    #[arg(long, default_value_t = 64 << 20, value_name = "BYTES")]
    pub capture_buffer: usize,
}

/// A fraction of a core: (0, 1].
fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x <= 1.0 => Ok(x),
        _ => Err(format!("`{s}` is not a fraction of a core in (0, 1], e.g. 0.3")),
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FastPathArg {
    Uss,
    Megaflow,
    None,
}

/// Options of live capture (`--interface`); see `clarion run --help`.
#[derive(Args, Debug)]
#[command(next_help_heading = "Live capture")]
pub struct LiveArgs {
    /// Receive path: 'packet' (AF_PACKET ring, see --ring-mode; sees both
    /// directions, the host keeps receiving) or 'xdp' (AF_XDP, copy mode,
    /// sockets of a fixed size, so no --ring-* flag applies: frames
    /// redirected by an XDP program never reach the host's stack, so use it
    /// on a mirror port, a tap or an interface dedicated to monitoring).
    #[arg(long, conflicts_with = "pcap", value_enum, default_value_t = SourceKind::Packet, value_name = "KIND")]
    pub source: SourceKind,

    /// XDP attach mode, --source xdp only: 'native' (in the driver) or
    /// 'generic' (any device, slower) [default: native]
    #[arg(long, conflicts_with = "pcap", value_enum, value_name = "MODE")]
    pub xdp_mode: Option<XdpModeArg>,

    /// Pin worker k to the k-th CPU of this list (e.g. 1,0); default: not pinned.
    #[arg(long, conflicts_with = "pcap", value_delimiter = ',', value_name = "CPUS")]
    pub cpus: Vec<usize>,

    /// Keep only packets matching this tcpdump expression, in the kernel
    /// (compiled by `tcpdump -ddd`, so the syntax is exactly tcpdump's).
    #[arg(long, conflicts_with = "pcap", value_name = "EXPR")]
    pub filter: Option<String>,

    /// Bytes kept of each packet, --source packet only (AF_XDP copies
    /// whole frames). Clarion reads headers only and takes the length from
    /// the wire, so the default loses nothing; raise it for deep IPv6
    /// extension chains or export policies that send whole frames
    /// [default: 256]
    #[arg(long, conflicts_with = "pcap", value_name = "BYTES")]
    pub snaplen: Option<u32>,

    /// Receive ring layout, --source packet only: 'frames' (TPACKET_V2:
    /// each packet handed over as soon as the kernel has written it, so
    /// epochs close and network-wide decisions come within about a
    /// millisecond of a window's end) or 'blocks' (TPACKET_V3: a block at a
    /// time, when full or after --ring-retire; fewer wake-ups at the highest
    /// rates, but at low rates a packet waits unseen for up to three kernel
    /// ticks, 12 ms at HZ=250) [default: frames]
    #[arg(long, conflicts_with = "pcap", value_enum, value_name = "LAYOUT")]
    pub ring_mode: Option<RingModeArg>,

    /// How far the monitor's clock stays behind the wall clock when the wire
    /// is quiet, beyond what the ring hides (with --ring-mode blocks, its
    /// retire timer): a packet the kernel holds longer than this between
    /// stamping it and handing it over is counted out of order. It grows by
    /// itself to a quarter more than the longest queueing delay of the last
    /// 128 epochs.
    #[arg(long, conflicts_with = "pcap", default_value = "100us", value_parser = parse_duration, value_name = "DURATION")]
    pub clock_lag: u64,

    /// Receive ring, --source packet: bytes per block (a power of two). Under
    /// load the kernel hands a block over when it is full, so its size
    /// bounds the queueing delay (64 KiB: about 450 minimal frames)
    /// [default: 65536]
    #[arg(long, conflicts_with = "pcap", value_name = "BYTES")]
    pub ring_block_size: Option<u32>,

    /// Receive ring, --source packet: blocks per worker and interface
    /// (512 x 64 KiB = 32 MiB) [default: 512]
    #[arg(long, conflicts_with = "pcap", value_name = "N")]
    pub ring_blocks: Option<u32>,

    /// Receive ring, --ring-mode blocks only: frame slot size the kernel
    /// checks the ring against (it must divide the block size; TPACKET_V3
    /// packs frames tightly anyway). With frames, slots take the snap length
    /// plus 128 bytes [default: 2048]
    #[arg(long, conflicts_with = "pcap", value_name = "BYTES")]
    pub ring_frame_size: Option<u32>,

    /// --ring-mode blocks only: a block not yet full is handed over after
    /// this long (whole milliseconds): the longest a packet waits unseen
    /// when traffic is light [default: 1ms]
    #[arg(long, conflicts_with = "pcap", value_parser = parse_duration, value_name = "DURATION")]
    pub ring_retire: Option<u64>,

    /// Longest a sweep step runs before the worker looks at its rings again.
    #[arg(long, conflicts_with = "pcap", default_value = "5us", value_parser = parse_duration, value_name = "DURATION")]
    pub step_budget: u64,

    /// Sweep steps also run between batches while at most this many ring
    /// blocks (AF_XDP: frames) wait; past half an epoch a pending sweep
    /// gets a step after every batch whatever the backlog.
    #[arg(long, conflicts_with = "pcap", default_value_t = 16, value_name = "N")]
    pub low_water: usize,

    /// Stop after this long (e.g. 30s, 5m); default: until Ctrl-C or SIGTERM.
    #[arg(long, conflicts_with = "pcap", value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Option<u64>,

    /// How long an interface may stay down or away (removed) before the run
    /// ends with status 1, its summary written; 0 ends it at once. Meanwhile
    /// windows are reported incomplete, and a removed interface created
    /// again under its name is captured anew (AF_PACKET).
    #[arg(long, conflicts_with = "pcap", default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub down_timeout: u64,

    /// Write one JSON line per worker and epoch (packets, drops, sweep time,
    /// late sweeps, queueing delay p99 and max) to FILE.
    #[arg(long, conflicts_with = "pcap", value_name = "FILE")]
    pub epoch_stats: Option<PathBuf>,

    /// Serve self-metrics for Prometheus at http://ADDR/metrics (e.g. 127.0.0.1:9464).
    #[arg(long, conflicts_with = "pcap", value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,

    /// Serve the control API for this host's own events at ADDR (e.g.
    /// 127.0.0.1:8701): add, list, show and remove them at runtime, with the
    /// manager's routes (`clarion events --api http://ADDR`), with the
    /// token of --api-token or --api-token-file (generated at first start)
    /// unless --api-no-auth. SIGHUP reloads the events file with or without it.
    #[arg(long, conflicts_with = "pcap", value_name = "ADDR")]
    pub api: Option<std::net::SocketAddr>,

    /// Also accept control API requests naming this host (repeat for
    /// several); loopback names and the bound address always are.
    #[arg(long = "api-host", conflicts_with = "pcap", value_name = "NAME")]
    pub api_hosts: Vec<String>,

    /// Bearer token the control API (--api) requires, instead of the token file's.
    #[arg(long, env = "CLARION_API_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub api_token: Option<String>,

    /// Where the control API's token is kept: read if present (mode 0600
    /// only), else generated there and printed once. Default:
    /// $XDG_CONFIG_HOME/clarion/api-token (~/.config/clarion/api-token),
    /// where clarion events looks too.
    #[arg(long, env = "CLARION_API_TOKEN_FILE", value_name = "FILE")]
    pub api_token_file: Option<PathBuf>,

    /// No token on the control API: any local process may change events.
    /// Only with a loopback --api (tests, demos); a token given or a token
    /// file is then ignored.
    #[arg(long, conflicts_with = "pcap")]
    pub api_no_auth: bool,

    /// Print a summary line to standard error this often (0 for never).
    #[arg(long, conflicts_with = "pcap", default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub stats_every: u64,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Events file to check (or a file of export policies, `--exports`).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Only validate; print nothing on success.
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// Print the predicted cost of the events (per packet, per new flow,
    /// per epoch; docs/performance.md, "Cost warning") as a note, even
    /// with --quiet.
    #[arg(long)]
    pub cost: bool,

    /// Colour in error messages: 'auto', 'always', 'never'.
    #[arg(long, value_enum, default_value_t = When::Auto, value_name = "WHEN")]
    pub color: When,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SourceKind {
    Packet,
    Xdp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RingModeArg {
    Frames,
    Blocks,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum XdpModeArg {
    Native,
    Generic,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Auto,
    Json,
    Table,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum When {
    Auto,
    Always,
    Never,
}

/// A capture file, or one host's: `FILE` or `NAME=FILE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureArg {
    pub host: Option<String>,
    pub path: PathBuf,
}

/// `NAME=FILE` when the text before the first `=` is non-empty and has no
/// `/` (so `./a=b.pcap` is a file); else a file.
pub fn parse_capture(s: &str) -> Result<CaptureArg, String> {
    match s.split_once('=') {
        Some((name, path)) if !name.is_empty() && !name.contains('/') => {
            if path.is_empty() {
                return Err(format!("`{s}` names host {name} but no file; write {name}=FILE"));
            }
            Ok(CaptureArg {
                host: Some(name.to_string()),
                path: PathBuf::from(path),
            })
        }
        _ => Ok(CaptureArg {
            host: None,
            path: PathBuf::from(s),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_are_files_or_hosts_files() {
        let c = |s| parse_capture(s).map(|c| (c.host, c.path.display().to_string()));
        assert_eq!(c("a.pcap"), Ok((None, "a.pcap".into())));
        assert_eq!(c("-"), Ok((None, "-".into())));
        assert_eq!(c("web-1=w1.pcap"), Ok((Some("web-1".into()), "w1.pcap".into())));
        assert_eq!(
            c("web-1=dir/a=b.pcap"),
            Ok((Some("web-1".into()), "dir/a=b.pcap".into()))
        );
        assert_eq!(c("./a=b.pcap"), Ok((None, "./a=b.pcap".into())));
        assert!(c("web-1=").is_err());
    }
}
