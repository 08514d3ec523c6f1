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

mod jobs;
mod ring;
pub mod select;

pub use jobs::{Part, RingJobs};
pub use ring::{FrameRing, StoredFrame};
pub use select::Selection;

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

/// The capturing events of a host: each one's span and filters, and
/// how long a ring must keep frames for them.
#[derive(Clone, Debug, Default)]
pub struct CaptureEvents {
    events: HashMap<String, (CaptureSpec, Vec<Filter>)>,
    keep_ns: u64,
}

impl CaptureEvents {
    /// The events of `specs` that have `then capture` (drill-down targets too).
    pub fn from_specs(specs: &[EventSpec]) -> CaptureEvents {
        let mut c = CaptureEvents::default();
        for s in specs {
            c.add(s);
        }
        c
    }

    /// Adds `spec`'s capturing events (itself, its drill-down targets).
    pub fn add(&mut self, spec: &EventSpec) {
        let mut stack = vec![spec];
        while let Some(s) = stack.pop() {
            if let Some(c) = s.capture {
                self.keep_ns = self.keep_ns.max(s.interval_ns.saturating_add(c.before_ns));
                self.events.insert(s.name.clone(), (c, s.filters.clone()));
            }
            stack.extend(s.drill_downs.iter().map(|d| d.event.as_ref()));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// How far back a ring must reach behind the packets measured: a
    /// window and its `before` span, and a second more, since the sweep
    /// reports a window after it ends.
    pub fn keep_ns(&self) -> u64 {
        self.keep_ns.saturating_add(1_000_000_000)
    }

    /// What report `r` captures, if its event does: the event's filters,
    /// the report's group and `[start - before, end + after)`.
    pub fn selection(&self, r: &Report) -> Option<Selection> {
        let (spec, filters) = self.events.get(&*r.event)?;
        Some(Selection {
            filters: filters.clone(),
            group: r.group,
            from_ns: r.window.start_ns.saturating_sub(spec.before_ns),
            to_ns: r.window.end_ns.saturating_add(spec.after_ns),
        })
    }
}

/// Why a new capture is refused, if it is: too many open, or too little
/// space left in the directory.
fn refusal(config: &CaptureConfig, open: usize) -> Option<String> {
    if open >= config.max_open {
        return Some(format!(
            "{} captures are open already (the most at once)",
            config.max_open
        ));
    }
    match free_bytes(&config.dir) {
        Some(free) if free < config.min_free_bytes => Some(format!(
            "{} has {} bytes free, less than the {} a capture needs",
            config.dir.display(),
            free,
            config.min_free_bytes
        )),
        _ => None,
    }
}

/// A file to write: its frames, in parts (several rings' frames, merged
/// by time on the writer thread), and what went wrong gathering them.
#[derive(Debug)]
struct Job {
    path: PathBuf,
    parts: Vec<Vec<StoredFrame>>,
    notes: Vec<String>,
}

/// The writer thread and the way to it.
#[derive(Debug)]
struct Writer(Option<(mpsc::Sender<Job>, JoinHandle<CaptureStats>)>);

impl Writer {
    fn start() -> std::io::Result<Writer> {
        let (tx, rx) = mpsc::channel::<Job>();
        let handle = std::thread::Builder::new()
            .name("clarion-capture".into())
            .spawn(move || write_jobs(&rx))?;
        Ok(Writer(Some((tx, handle))))
    }

    fn send(&self, job: Job) {
        if let Some((tx, _)) = &self.0 {
            // The writer ends only when this side hangs up.
            let _ = tx.send(job);
        }
    }

    fn finish(&mut self) -> CaptureStats {
        match self.0.take() {
            Some((tx, handle)) => {
                drop(tx);
                handle.join().unwrap_or_else(|_| CaptureStats {
                    errors: vec!["the capture writer thread panicked".into()],
                    ..CaptureStats::default()
                })
            }
            None => CaptureStats::default(),
        }
    }
}

fn capture_ref(path: &Path, from_ns: u64, to_ns: u64) -> CaptureRef {
    CaptureRef {
        file: Some(path.display().to_string()),
        from_ns,
        to_ns,
        error: None,
    }
}

fn refused_ref(sel: &Selection, why: String) -> CaptureRef {
    CaptureRef {
        file: None,
        from_ns: sel.from_ns,
        to_ns: sel.to_ns,
        error: Some(why),
    }
}

/// The capturing of a host that sees every frame (see the module doc).
#[derive(Debug)]
pub struct Captures {
    config: CaptureConfig,
    events: CaptureEvents,
    jobs: RingJobs,
    /// Open captures' files, by id.
    paths: HashMap<u64, PathBuf>,
    next_id: u64,
    parts: Vec<Part>,
    writer: Writer,
    refused: u64,
}

impl Captures {
    /// Captures for the events of `specs` that have `then capture`
    /// (drill-down targets too); `None` when none has.
    pub fn new(specs: &[EventSpec], config: CaptureConfig) -> Result<Option<Captures>, std::io::Error> {
        let events = CaptureEvents::from_specs(specs);
        if events.is_empty() {
            return Ok(None);
        }
        check_dir(&config.dir)?;
        Ok(Some(Captures {
            jobs: RingJobs::new(config.ring_bytes, events.keep_ns()),
            config,
            events,
            paths: HashMap::new(),
            next_id: 0,
            parts: Vec::new(),
            writer: Writer::start()?,
            refused: 0,
        }))
    }

    /// A parsed frame: into the ring and the open captures it belongs to;
    /// captures whose span it passes are handed to the writer.
    pub fn on_frame(&mut self, rec: &PacketRecord, raw: &RawPacket<'_>) {
        self.jobs.push(StoredFrame {
            ts_ns: rec.ts_ns,
            link: raw.link,
            orig_len: raw.orig_len,
            key: rec.key,
            data: raw.data.into(),
        });
        self.close_due();
    }

    /// Starts a capture for every report of a capturing event, and says
    /// where in the report.
    pub fn on_reports(&mut self, reports: &mut [Report]) {
        for r in reports {
            let Some(sel) = self.events.selection(r) else {
                continue;
            };
            if let Some(why) = refusal(&self.config, self.jobs.open_count()) {
                self.refused += 1;
                r.capture = Some(Box::new(refused_ref(&sel, why)));
                continue;
            }
            let path = self
                .config
                .dir
                .join(file_name(&r.event, r.window.start_ns, &r.group));
            let id = self.next_id;
            self.next_id += 1;
            let to_ns = sel.to_ns;
            // The span starts where the ring still holds every packet, so
            // the file is exactly the span the report states.
            let from_ns = self.jobs.open(id, sel);
            r.capture = Some(Box::new(capture_ref(&path, from_ns, to_ns)));
            self.paths.insert(id, path);
        }
        self.close_due();
    }

    /// Every window ending before `ts_ns` has been reported: the ring may
    /// forget what no later report can ask for (a window ending at or
    /// after it, with its `before`, is at most the longest interval plus
    /// `before` earlier).
    pub fn processed(&mut self, ts_ns: u64) {
        self.jobs.processed(ts_ns);
    }

    /// Packet time has reached `now_ns` (a quiet wire): captures it ends are written.
    pub fn tick(&mut self, now_ns: u64) {
        self.jobs.advance(now_ns);
        self.close_due();
    }

    fn close_due(&mut self) {
        self.jobs.take_due(&mut self.parts);
        self.write_parts();
    }

    fn write_parts(&mut self) {
        for p in self.parts.drain(..) {
            if let Some(path) = self.paths.remove(&p.id) {
                self.writer.send(Job {
                    path,
                    parts: vec![p.frames],
                    notes: Vec::new(),
                });
            }
        }
    }

    /// Writes every open capture with what it has, waits for the writer,
    /// and gives what was done.
    pub fn finish(&mut self) -> CaptureStats {
        self.jobs.take_all(&mut self.parts);
        self.write_parts();
        let mut stats = self.writer.finish();
        stats.refused = self.refused;
        stats
    }

    /// Captures open now.
    pub fn open(&self) -> usize {
        self.jobs.open_count()
    }

    /// The configuration it was made with.
    pub fn config(&self) -> &CaptureConfig {
        &self.config
    }
}

impl Drop for Captures {
    fn drop(&mut self) {
        if self.writer.0.is_some() {
            self.finish();
        }
    }
}

/// The file side of captures whose frames come in parts, one from each
/// of several rings (a live host's workers, each with its own
/// [`RingJobs`]): the caller starts a capture on a report
/// ([`PartedCaptures::start`]), opens it on every ring with the
/// [`Selection`] returned, states where the rings' frames really start
/// ([`PartedCaptures::covered_from`]), and hands over each ring's
/// [`Part`] as it comes ([`PartedCaptures::part`]). Once every part is in,
/// the writer thread merges them by time into the one file.
///
/// Invariants: the file holds exactly the selection's frames in
/// `[from_ns, to_ns)` as the report states them (each part is cut to the
/// latest start of all rings, so no ring's older frames stand alone); a
/// part that never comes ([`PartedCaptures::missing`], or still missing
/// at [`PartedCaptures::finish`]) leaves a file of the parts that came,
/// and an error naming it in [`CaptureStats::errors`].
#[derive(Debug)]
pub struct PartedCaptures {
    config: CaptureConfig,
    events: CaptureEvents,
    pending: HashMap<u64, Pending>,
    next_id: u64,
    writer: Writer,
    refused: u64,
}

#[derive(Debug)]
struct Pending {
    sel: Selection,
    job: Job,
    parts_left: u32,
}

impl PartedCaptures {
    /// Captures for the events of `specs` that have `then capture`, or
    /// none (events may be added with [`PartedCaptures::add_event`]).
    pub fn new(specs: &[EventSpec], config: CaptureConfig) -> std::io::Result<PartedCaptures> {
        check_dir(&config.dir)?;
        Ok(PartedCaptures {
            events: CaptureEvents::from_specs(specs),
            config,
            pending: HashMap::new(),
            next_id: 0,
            writer: Writer::start()?,
            refused: 0,
        })
    }

    /// An event installed later: its reports capture too.
    pub fn add_event(&mut self, spec: &EventSpec) {
        self.events.add(spec);
    }

    pub fn events(&self) -> &CaptureEvents {
        &self.events
    }

    pub fn config(&self) -> &CaptureConfig {
        &self.config
    }

    /// A report: when its event captures, a capture of `parts` parts is
    /// started (its file named in the report, from the asked start), or
    /// refused (the error in the report). Returns the capture's id and
    /// what each ring is to select.
    pub fn start(&mut self, r: &mut Report, parts: u32) -> Option<(u64, Selection)> {
        let sel = self.events.selection(r)?;
        if let Some(why) = refusal(&self.config, self.pending.len()) {
            self.refused += 1;
            r.capture = Some(Box::new(refused_ref(&sel, why)));
            return None;
        }
        let path = self
            .config
            .dir
            .join(file_name(&r.event, r.window.start_ns, &r.group));
        r.capture = Some(Box::new(capture_ref(&path, sel.from_ns, sel.to_ns)));
        let id = self.next_id;
        self.next_id += 1;
        let job = Job {
            path,
            parts: Vec::new(),
            notes: Vec::new(),
        };
        self.pending.insert(
            id,
            Pending {
                sel: sel.clone(),
                job,
                parts_left: parts,
            },
        );
        if parts == 0 {
            self.done(id);
        }
        Some((id, sel))
    }

    /// A ring holds every frame of capture `id` from `from_ns` on only:
    /// the file starts there (the latest of the rings), as `r` then says.
    pub fn covered_from(&mut self, id: u64, r: &mut Report, from_ns: u64) {
        if let Some(p) = self.pending.get_mut(&id) {
            p.sel.from_ns = p.sel.from_ns.max(from_ns);
            if let Some(c) = r.capture.as_mut() {
                c.from_ns = p.sel.from_ns;
            }
        }
    }

    /// One ring's part of a capture.
    pub fn part(&mut self, part: Part) {
        let Some(p) = self.pending.get_mut(&part.id) else {
            return;
        };
        p.job.parts.push(part.frames);
        p.parts_left = p.parts_left.saturating_sub(1);
        if p.parts_left == 0 {
            self.done(part.id);
        }
    }

    /// One ring's part of capture `id` will not come, because of `why`.
    pub fn missing(&mut self, id: u64, why: &str) {
        let Some(p) = self.pending.get_mut(&id) else {
            return;
        };
        p.job.notes.push(format!("written without a part: {why}"));
        p.parts_left = p.parts_left.saturating_sub(1);
        if p.parts_left == 0 {
            self.done(id);
        }
    }

    /// Every part is in: cut to the span as it is finally stated, and written.
    fn done(&mut self, id: u64) {
        if let Some(mut p) = self.pending.remove(&id) {
            let sel = &p.sel;
            for part in &mut p.job.parts {
                part.retain(|f| sel.takes(f.ts_ns, &f.key));
            }
            self.writer.send(p.job);
        }
    }

    /// Captures waiting for parts.
    pub fn open(&self) -> usize {
        self.pending.len()
    }

    /// Writes every capture still waiting with the parts it has (saying
    /// how many are missing), waits for the writer, and gives what was done.
    pub fn finish(&mut self) -> CaptureStats {
        let ids: Vec<u64> = self.pending.keys().copied().collect();
        for id in ids {
            if let Some(p) = self.pending.get_mut(&id) {
                let left = p.parts_left;
                p.job
                    .notes
                    .push(format!("written without {left} part(s) that never came"));
            }
            self.done(id);
        }
        let mut stats = self.writer.finish();
        stats.refused = self.refused;
        stats
    }
}

impl Drop for PartedCaptures {
    fn drop(&mut self) {
        if self.writer.0.is_some() {
            self.finish();
        }
    }
}

/// Makes `dir` if missing and checks that files can be created in it: a
/// probe file created new and removed at once. A directory the captures
/// cannot be written to is so refused when the captures start (`clarion
/// run`, a live host, an agent), not found out at the first report, whose
/// capture would fail in the writer thread.
pub fn check_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let probe = dir.join(format!(".clarion-probe-{}-{nanos}", std::process::id()));
    clarion_capture::probe_create(&probe)
        .map_err(|e| std::io::Error::new(e.kind(), format!("no file can be created in it ({e})")))
}

/// The writer thread: one file per job, created new (never overwriting).
fn write_jobs(rx: &mpsc::Receiver<Job>) -> CaptureStats {
    let mut stats = CaptureStats::default();
    while let Ok(job) = rx.recv() {
        match write_job(&job) {
            Ok(path) => {
                let n = job.parts.iter().map(Vec::len).sum::<usize>();
                stats.files.push((path, n as u64));
            }
            Err(e) => stats.errors.push(format!("{}: {e}", job.path.display())),
        }
        for n in &job.notes {
            stats.errors.push(format!("{}: {n}", job.path.display()));
        }
    }
    stats
}

fn write_job(job: &Job) -> std::io::Result<PathBuf> {
    let (file, path) = create_new(&job.path)?;
    let mut w = PcapngWriter::new(BufWriter::new(file))?;
    let mut interfaces: Vec<(LinkType, u32)> = Vec::new();
    for f in merged(&job.parts) {
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

/// The parts' frames merged by time, each part's in its own order (the
/// earliest head first; ties to the earlier part). O(frames x parts):
/// parts are a host's workers, a handful.
fn merged(parts: &[Vec<StoredFrame>]) -> impl Iterator<Item = &StoredFrame> {
    let mut next = vec![0usize; parts.len()];
    std::iter::from_fn(move || {
        let k = (0..parts.len())
            .filter_map(|k| parts[k].get(next[k]).map(|f| (f.ts_ns, k)))
            .min()?
            .1;
        next[k] += 1;
        parts[k].get(next[k] - 1)
    })
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
    fn opt<T: ToString>(v: Option<T>) -> String {
        v.map_or_else(|| "none".to_string(), |p| p.to_string())
    }
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
    if let Some(v) = g.vni {
        parts.push(format!("vni={}", opt(v)));
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
    fn a_directory_files_cannot_be_created_in_is_refused_at_start() {
        let dir = std::env::temp_dir().join(format!("clarion-check-dir-{}", std::process::id()));
        let fresh = dir.join("captures");
        check_dir(&fresh).expect("made and writable");
        assert_eq!(
            std::fs::read_dir(&fresh).expect("reads").count(),
            0,
            "no probe left"
        );
        // A file where the directory should be; /proc, which no one writes files in.
        let file = dir.join("f");
        std::fs::write(&file, b"x").expect("a file");
        assert!(check_dir(&file).is_err());
        let _ = std::fs::remove_dir_all(&dir);
        let e = check_dir(Path::new("/proc")).expect_err("not writable");
        assert!(e.to_string().contains("no file can be created in it"), "{e}");
    }

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
