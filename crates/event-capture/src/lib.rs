//! Capture around an event (`then capture 5s before 5s after`): when an
//! event fires for a group in window `[s, e)`, the group's packets with
//! times in `[s - before, e + after)` are written to a pcapng file named
//! by event, window and group, and the report carries the file's name.
//!
//! ```text
//!  frame ──► FrameRing (recent packets, bounded by bytes and seconds)
//!        └─► open jobs: the frame joins each whose group and span it is in
//!  report (event with capture) ──► job: the ring's frames of the group from s - before
//!                               └─► report.capture = {file, from_ns, to_ns}
//!  packet time ≥ e + after ──► job done ──► writer thread ──► pcapng file
//! ```
//!
//! - The packet path only copies: a frame into the ring, and into the
//!   jobs it belongs to. Files are created and written on a thread of
//!   their own, so a slow or full disk never stalls the packets.
//! - Nothing is pretended: if the ring no longer holds the start of the
//!   span (its byte bound evicted it), the report's `from_ns` says where
//!   the file really starts; if the export directory has too little space
//!   left, or too many captures are open at once, the report carries the
//!   error instead of a file, and the packets are not copied. A write
//!   that fails later is kept for the summary ([`CaptureStats::errors`]).
//! - At the end of input every open job is written with what it has.

mod ring;
pub mod select;

pub use ring::{FrameRing, StoredFrame};

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use clarion_capture::{PcapngWriter, RawPacket};
use clarion_lang::spec::{CaptureSpec, EventSpec, Filter};
use clarion_report::{CaptureRef, GroupKey, Report};
use clarion_wire::{LinkType, PacketRecord};

/// How a host captures around its events.
#[derive(Clone, Debug)]
pub struct CaptureConfig {
    /// Where the files go.
    pub dir: PathBuf,
    /// Bytes of recent frames kept for `before` spans.
    pub ring_bytes: usize,
    /// Captures open at once; more are refused on their report.
    pub max_open: usize,
    /// Free space below which a capture is refused on its report.
    pub min_free_bytes: u64,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig {
            dir: PathBuf::from("."),
            ring_bytes: 64 << 20,
            max_open: 256,
            min_free_bytes: 64 << 20,
        }
    }
}

/// What capturing has done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaptureStats {
    /// Files written, with their packet counts.
    pub files: Vec<(PathBuf, u64)>,
    /// Captures refused on their report (no space, too many open).
    pub refused: u64,
    /// Files that could not be written, and why.
    pub errors: Vec<String>,
}

#[derive(Debug)]
struct Job {
    path: PathBuf,
    filters: Vec<Filter>,
    group: GroupKey,
    from_ns: u64,
    to_ns: u64,
    frames: Vec<StoredFrame>,
}

impl Job {
    fn takes(&self, ts_ns: u64, key: &clarion_wire::FlowKey) -> bool {
        (self.from_ns..self.to_ns).contains(&ts_ns)
            && select::in_group(&self.group, key)
            && select::passes(&self.filters, key)
    }
}

/// The capturing of a host (see the module doc).
#[derive(Debug)]
pub struct Captures {
    config: CaptureConfig,
    /// Per capturing event: its spec (filters, span).
    events: HashMap<String, (CaptureSpec, Vec<Filter>)>,
    ring: FrameRing,
    open: Vec<Job>,
    now_ns: u64,
    writer: Option<(mpsc::Sender<Job>, JoinHandle<CaptureStats>)>,
    refused: u64,
}

impl Captures {
    /// Captures for the events of `specs` that have `then capture`
    /// (drill-down targets too); `None` when none has.
    pub fn new(specs: &[EventSpec], config: CaptureConfig) -> Result<Option<Captures>, std::io::Error> {
        let mut events = HashMap::new();
        let mut keep_ns = 0u64;
        let mut stack: Vec<&EventSpec> = specs.iter().collect();
        while let Some(s) = stack.pop() {
            if let Some(c) = s.capture {
                keep_ns = keep_ns.max(s.interval_ns.saturating_add(c.before_ns));
                events.insert(s.name.clone(), (c, s.filters.clone()));
            }
            stack.extend(s.drill_downs.iter().map(|d| d.event.as_ref()));
        }
        if events.is_empty() {
            return Ok(None);
        }
        std::fs::create_dir_all(&config.dir)?;
        let (tx, rx) = mpsc::channel::<Job>();
        let writer = std::thread::Builder::new()
            .name("clarion-capture".into())
            .spawn(move || write_jobs(&rx))?;
        // The sweep reports a window after it ends: keep a second more.
        let keep_ns = keep_ns.saturating_add(1_000_000_000);
        Ok(Some(Captures {
            ring: FrameRing::new(config.ring_bytes, keep_ns),
            config,
            events,
            open: Vec::new(),
            now_ns: 0,
            writer: Some((tx, writer)),
            refused: 0,
        }))
    }

    /// A parsed frame: into the ring and the open jobs it belongs to; jobs
    /// whose span it passes are handed to the writer.
    pub fn on_frame(&mut self, rec: &PacketRecord, raw: &RawPacket<'_>) {
        self.now_ns = self.now_ns.max(rec.ts_ns);
        let frame = StoredFrame {
            ts_ns: rec.ts_ns,
            link: raw.link,
            orig_len: raw.orig_len,
            key: rec.key,
            data: raw.data.into(),
        };
        for job in &mut self.open {
            if job.takes(frame.ts_ns, &frame.key) {
                job.frames.push(frame.clone());
            }
        }
        self.ring.push(frame);
        self.close_due();
    }

    /// Starts a capture for every report of a capturing event, and says
    /// where in the report.
    pub fn on_reports(&mut self, reports: &mut [Report]) {
        for r in reports {
            let Some((spec, filters)) = self.events.get(&r.event) else {
                continue;
            };
            let from_ns = r.window.start_ns.saturating_sub(spec.before_ns);
            let to_ns = r.window.end_ns.saturating_add(spec.after_ns);
            let refused = |why: String| CaptureRef {
                file: None,
                from_ns,
                to_ns,
                error: Some(why),
            };
            if self.open.len() >= self.config.max_open {
                self.refused += 1;
                r.capture = Some(refused(format!(
                    "{} captures are open already (the most at once)",
                    self.config.max_open
                )));
                continue;
            }
            match free_bytes(&self.config.dir) {
                Some(free) if free < self.config.min_free_bytes => {
                    self.refused += 1;
                    r.capture = Some(refused(format!(
                        "{} has {} bytes free, less than the {} a capture needs",
                        self.config.dir.display(),
                        free,
                        self.config.min_free_bytes
                    )));
                    continue;
                }
                _ => {}
            }
            let mut job = Job {
                path: self
                    .config
                    .dir
                    .join(file_name(&r.event, r.window.start_ns, &r.group)),
                filters: filters.clone(),
                group: r.group,
                from_ns,
                to_ns,
                frames: Vec::new(),
            };
            // The span starts where the ring still holds every packet, so
            // the file is exactly the span the report states.
            job.from_ns = from_ns.max(self.ring.covers_from());
            job.frames = self
                .ring
                .iter()
                .filter(|f| job.takes(f.ts_ns, &f.key))
                .cloned()
                .collect();
            r.capture = Some(CaptureRef {
                file: Some(job.path.display().to_string()),
                from_ns: job.from_ns,
                to_ns,
                error: None,
            });
            self.open.push(job);
        }
        self.close_due();
    }

    /// The monitor has measured the packets up to `ts_ns` (and reported
    /// what they closed): the ring may forget what no report can ask for.
    pub fn processed(&mut self, ts_ns: u64) {
        self.ring.processed(ts_ns);
    }

    /// Packet time has reached `now_ns` (a quiet wire): jobs it ends are written.
    pub fn tick(&mut self, now_ns: u64) {
        self.now_ns = self.now_ns.max(now_ns);
        self.close_due();
    }

    fn close_due(&mut self) {
        let now = self.now_ns;
        let mut i = 0;
        while i < self.open.len() {
            if self.open[i].to_ns <= now {
                let job = self.open.swap_remove(i);
                self.send(job);
            } else {
                i += 1;
            }
        }
    }

    fn send(&mut self, job: Job) {
        if let Some((tx, _)) = &self.writer {
            // The writer ends only when this side hangs up.
            let _ = tx.send(job);
        }
    }

    /// Writes every open job with what it has, waits for the writer, and
    /// gives what was done.
    pub fn finish(&mut self) -> CaptureStats {
        for job in std::mem::take(&mut self.open) {
            self.send(job);
        }
        let mut stats = match self.writer.take() {
            Some((tx, handle)) => {
                drop(tx);
                handle.join().unwrap_or_else(|_| CaptureStats {
                    errors: vec!["the capture writer thread panicked".into()],
                    ..CaptureStats::default()
                })
            }
            None => CaptureStats::default(),
        };
        stats.refused = self.refused;
        stats
    }

    /// Captures open now.
    pub fn open(&self) -> usize {
        self.open.len()
    }
}

impl Drop for Captures {
    fn drop(&mut self) {
        if self.writer.is_some() {
            self.finish();
        }
    }
}

/// The writer thread: one file per job, created new (never overwriting).
fn write_jobs(rx: &mpsc::Receiver<Job>) -> CaptureStats {
    let mut stats = CaptureStats::default();
    while let Ok(job) = rx.recv() {
        match write_job(&job) {
            Ok(path) => stats.files.push((path, job.frames.len() as u64)),
            Err(e) => stats.errors.push(format!("{}: {e}", job.path.display())),
        }
    }
    stats
}

fn write_job(job: &Job) -> std::io::Result<PathBuf> {
    let (file, path) = create_new(&job.path)?;
    let mut w = PcapngWriter::new(BufWriter::new(file))?;
    let mut interfaces: Vec<(LinkType, u32)> = Vec::new();
    for f in &job.frames {
        let id = match interfaces.iter().find(|(l, _)| *l == f.link) {
            Some((_, id)) => *id,
            None => {
                let id = w.add_interface(f.link, 262_144, None)?;
                interfaces.push((f.link, id));
                id
            }
        };
        w.write_packet(id, f.ts_ns, &f.data, f.orig_len)?;
    }
    w.flush()?;
    Ok(path)
}

/// `path`, or `path` with `-1`, `-2`, ... before the extension when taken.
fn create_new(path: &Path) -> std::io::Result<(File, PathBuf)> {
    let mut candidate = path.to_path_buf();
    for n in 1..1000 {
        match OpenOptions::new().write(true).create_new(true).open(&candidate) {
            Ok(f) => return Ok((f, candidate)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let stem = path
                    .file_stem()
                    .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
                candidate = path.with_file_name(format!("{stem}-{n}.pcapng"));
            }
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        "a thousand files of that name exist",
    ))
}

/// `EVENT-WINDOWSTART-GROUP.pcapng`: the window's start as UTC with
/// nanoseconds, the group's fields as `field=value` joined by `_`;
/// characters a file name should not hold become `-`.
pub fn file_name(event: &str, start_ns: u64, g: &GroupKey) -> String {
    let mut parts = Vec::new();
    let addr = |(a, len): (std::net::IpAddr, u8)| format!("{a}/{len}");
    let opt = |v: Option<u16>| v.map_or_else(|| "none".to_string(), |p| p.to_string());
    if let Some(a) = g.src_ip {
        parts.push(format!("src_ip={}", addr(a)));
    }
    if let Some(a) = g.dst_ip {
        parts.push(format!("dst_ip={}", addr(a)));
    }
    if let Some(p) = g.src_port {
        parts.push(format!("src_port={}", opt(p)));
    }
    if let Some(p) = g.dst_port {
        parts.push(format!("dst_port={}", opt(p)));
    }
    if let Some(p) = g.proto {
        parts.push(format!("proto={p}"));
    }
    if let Some(v) = g.vlan {
        parts.push(format!("vlan={}", opt(v)));
    }
    let group = if parts.is_empty() {
        "all".to_string()
    } else {
        parts.join("_")
    };
    let time = clarion_report::rfc3339(start_ns).replace([':', '-'], "");
    let name = format!("{event}-{time}-{group}");
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._=-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{clean}.pcapng")
}

/// Free bytes for unprivileged users on the file system of `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut s = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c` is a NUL-terminated path alive for the call, and `s`
    // points to writable memory the size of a `statvfs`, which the call
    // fills on success (it is read only then).
    let r = unsafe { libc::statvfs(c.as_ptr(), s.as_mut_ptr()) };
    if r != 0 {
        return None;
    }
    // SAFETY: the call succeeded, so the struct is initialized.
    let s = unsafe { s.assume_init() };
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_space_of_a_real_directory() {
        let free = free_bytes(Path::new("/")).expect("statvfs on /");
        assert!(free > 0);
        assert_eq!(free_bytes(Path::new("/no/such/dir")), None);
    }

    #[test]
    fn file_names_say_event_window_and_group() {
        let g = GroupKey {
            src_ip: Some(("2001:db8::".parse().unwrap(), 32)),
            dst_port: Some(None),
            ..GroupKey::default()
        };
        assert_eq!(
            file_name("heavy", 1_500_000_000_123_000_000, &g),
            "heavy-20170714T024000.123000000Z-src_ip=2001-db8---32_dst_port=none.pcapng"
        );
        assert_eq!(
            file_name("e", 0, &GroupKey::default()),
            "e-19700101T000000.000000000Z-all.pcapng"
        );
    }
}
