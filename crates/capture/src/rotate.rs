//! Rotating pcapng files: a sequence of complete captures, each cut by
//! size or by packet time.
//!
//! # Naming
//!
//! For a base path `DIR/NAME` the files are `DIR/NAME-000000.pcapng`,
//! `DIR/NAME-000001.pcapng`, ... (six digits, more past 999,999). A base
//! ending in `.pcapng` loses that extension first (`trace.pcapng` gives
//! `trace-000000.pcapng`).
//!
//! # Never overwriting
//!
//! [`RotatingPcapng::create`] refuses ([`CaptureError::Exists`]) when any
//! file of that sequence (`NAME-<digits>.pcapng`) is in the directory, so
//! one run's files are never mixed with another's; and every file is
//! opened with `O_CREAT|O_EXCL`, so even a file appearing later (another
//! process) is refused, never overwritten.
//!
//! # When a new file starts
//!
//! Before a packet is written, a new file starts if the current one holds
//! a packet already and either the packet's block would take the file past
//! `max_bytes` (the size counts the section and interface blocks), or the
//! packet's time is `max_age` or more after the file's first packet (so a
//! file spans a half-open window `[first, first + max_age)` of packet
//! time; a packet earlier than the first stays). A file's first packet is
//! always written, even one larger than `max_bytes` alone. Each file is a
//! complete pcapng: its own section header and every interface added so
//! far; an interface added mid-file is appended to the current file, or
//! starts the next one when its block would take a file holding packets
//! past `max_bytes`.
//!
//! # Errors
//!
//! Errors name the file and are never panics. A failed write or a failed
//! file creation at rotation (disk full, permissions) stops the writer:
//! the error is returned once, the file it happened in is marked
//! incomplete in [`RotatingPcapng::files`], and every later call returns
//! [`CaptureError::WriteStopped`] naming it, without touching the disk
//! (a full disk does not turn into a storm of empty files). A packet
//! refused before anything is written (an interface never added, a block
//! over 16 MiB) returns [`CaptureError::Write`] with
//! [`std::io::ErrorKind::InvalidInput`] and does not stop the writer.
//! Files are written through a `BufWriter`, so a disk-full error may be
//! reported at a later packet than the one that did not fit, and
//! [`RotatingPcapng::finish`] must be called to see the last flush's
//! error (dropping the writer flushes too, ignoring errors).
//!
//! # Cost
//!
//! One buffered write per block (see [`PcapngWriter`]); a rotation closes
//! one file and creates another (one directory scan only at `create`).

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clarion_wire::LinkType;

use crate::decode::MAX_RECORD;
use crate::pcapng_writer::{packet_block_len, PcapngWriter};
use crate::CaptureError;

/// When to start a new file; `None` for no limit of that kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rotation {
    pub max_bytes: Option<u64>,
    /// In packet time (capture timestamps), not wall-clock time.
    pub max_age: Option<Duration>,
}

/// One file of the sequence, as written so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenFile {
    pub path: PathBuf,
    pub packets: u64,
    /// Bytes written to it (its size once flushed).
    pub bytes: u64,
    /// Times of its first and last packets, nanoseconds since the epoch.
    pub first_ts_ns: Option<u64>,
    pub last_ts_ns: Option<u64>,
    /// False when writing it failed: it may end in a partial block.
    pub complete: bool,
}

impl std::fmt::Display for WrittenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} packets, {} bytes{}",
            self.path.display(),
            self.packets,
            self.bytes,
            if self.complete {
                ""
            } else {
                " (incomplete: writing it failed)"
            }
        )
    }
}

/// An interface as added, rewritten at the start of every file.
#[derive(Debug)]
struct Interface {
    link: LinkType,
    snaplen: u32,
    name: Option<String>,
}

/// Writes packets into `BASE-NNNNNN.pcapng` files, rotating by size and time.
#[derive(Debug)]
pub struct RotatingPcapng {
    /// Directory and name stem of the files.
    dir: PathBuf,
    stem: String,
    limits: Rotation,
    interfaces: Vec<Interface>,
    /// The file being written: the last of `files`.
    current: Option<PcapngWriter<BufWriter<File>>>,
    files: Vec<WrittenFile>,
    /// Set by the first failure; later calls return it again.
    failed: Option<(PathBuf, String)>,
}

impl RotatingPcapng {
    /// Creates `BASE-000000.pcapng` (see the module doc for naming and
    /// why it refuses when files of the sequence exist).
    pub fn create(base: &Path, limits: Rotation) -> Result<Self, CaptureError> {
        let (dir, stem) = split(base).map_err(|error| CaptureError::Create {
            path: base.to_path_buf(),
            error,
        })?;
        if let Some(path) = existing(&dir, &stem) {
            return Err(CaptureError::Exists { path });
        }
        let mut w = RotatingPcapng {
            dir,
            stem,
            limits,
            interfaces: Vec::new(),
            current: None,
            files: Vec::new(),
            failed: None,
        };
        w.open_next()?;
        Ok(w)
    }

    /// Whether the first file of `base`'s sequence could be created now:
    /// it is created new and removed at once, so it fails as the real
    /// file would (a directory not writable, a read-only file system, a
    /// name too long, a file already there). Gives the file's path either way.
    pub fn probe(base: &Path) -> (PathBuf, io::Result<()>) {
        match split(base) {
            Ok((dir, stem)) => {
                let first = numbered(&dir, &stem, 0);
                let made = probe_create(&first);
                (first, made)
            }
            Err(e) => (base.to_path_buf(), Err(e)),
        }
    }

    /// The path of file number `n` of this sequence.
    pub fn path_of(&self, n: usize) -> PathBuf {
        numbered(&self.dir, &self.stem, n)
    }

    /// Adds an interface to this and every later file; returns its id.
    pub fn add_interface(
        &mut self,
        link: LinkType,
        snaplen: u32,
        name: Option<&str>,
    ) -> Result<u32, CaptureError> {
        self.check_stopped()?;
        // An interface block that would take a file holding packets past
        // its size starts the next file (which lists every interface), so
        // no file with more than one packet is over `max_bytes`.
        let holds_packets = self.files.last().is_some_and(|f| f.packets > 0);
        let over = match self.limits.max_bytes {
            Some(max) if holds_packets => {
                let bytes = self.files.last().map_or(0, |f| f.bytes);
                bytes + interface_block_len(link, snaplen, name)? > max
            }
            _ => false,
        };
        if over {
            self.interfaces.push(Interface {
                link,
                snaplen,
                name: name.map(str::to_string),
            });
            self.close_current()?;
            self.open_next()?;
            return Ok(u32::try_from(self.interfaces.len() - 1).unwrap_or(u32::MAX));
        }
        let id = self.current_mut()?.add_interface(link, snaplen, name);
        let id = self.after_write(id)?;
        self.interfaces.push(Interface {
            link,
            snaplen,
            name: name.map(str::to_string),
        });
        Ok(id)
    }

    /// Writes one packet, starting a new file first if a limit says so.
    pub fn write_packet(
        &mut self,
        interface: u32,
        ts_ns: u64,
        data: &[u8],
        orig_len: u32,
    ) -> Result<(), CaptureError> {
        self.write_packet_with_comment(interface, ts_ns, data, orig_len, None)
    }

    /// [`RotatingPcapng::write_packet`] with an optional packet comment.
    pub fn write_packet_with_comment(
        &mut self,
        interface: u32,
        ts_ns: u64,
        data: &[u8],
        orig_len: u32,
        comment: Option<&str>,
    ) -> Result<(), CaptureError> {
        self.check_stopped()?;
        // Refused before any rotation, so a bad call cannot start a file.
        let block_len = packet_block_len(data.len(), comment);
        let refused = if interface as usize >= self.interfaces.len() {
            Some(format!(
                "packet names interface {interface} but only {} were added",
                self.interfaces.len()
            ))
        } else if block_len > u64::from(MAX_RECORD) {
            Some(format!(
                "packet block of {block_len} bytes is over the {MAX_RECORD}-byte limit"
            ))
        } else {
            None
        };
        if let Some(why) = refused {
            return Err(CaptureError::Write {
                path: self.current_path(),
                error: io::Error::new(io::ErrorKind::InvalidInput, why),
            });
        }
        if self.must_rotate(ts_ns, block_len) {
            self.close_current()?;
            self.open_next()?;
        }
        let r = self
            .current_mut()?
            .write_packet_with_comment(interface, ts_ns, data, orig_len, comment);
        match r {
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => Err(CaptureError::Write {
                path: self.current_path(),
                error: e,
            }),
            r => {
                self.after_write(r)?;
                if let Some(f) = self.files.last_mut() {
                    f.packets += 1;
                    f.first_ts_ns.get_or_insert(ts_ns);
                    f.last_ts_ns = Some(ts_ns);
                }
                Ok(())
            }
        }
    }

    /// The files written so far, in order; the last is still open.
    pub fn files(&self) -> &[WrittenFile] {
        &self.files
    }

    /// Whether an error stopped the writer.
    pub fn is_stopped(&self) -> bool {
        self.failed.is_some()
    }

    /// Flushes the current file (its pending error is returned here).
    pub fn flush(&mut self) -> Result<(), CaptureError> {
        self.check_stopped()?;
        let r = self.current_mut()?.flush();
        self.after_write(r)
    }

    /// Flushes and closes the last file; gives the list of files written.
    pub fn finish(mut self) -> Result<Vec<WrittenFile>, CaptureError> {
        self.check_stopped()?;
        self.close_current()?;
        Ok(std::mem::take(&mut self.files))
    }

    fn must_rotate(&self, ts_ns: u64, block_len: u64) -> bool {
        let Some(f) = self.files.last() else {
            return false;
        };
        let Some(first) = f.first_ts_ns else {
            return false; // a file's first packet is always written
        };
        let too_big = self.limits.max_bytes.is_some_and(|m| f.bytes + block_len > m);
        let too_old = self.limits.max_age.is_some_and(|a| {
            let age = u64::try_from(a.as_nanos()).unwrap_or(u64::MAX);
            ts_ns.saturating_sub(first) >= age
        });
        too_big || too_old
    }

    fn check_stopped(&self) -> Result<(), CaptureError> {
        match &self.failed {
            Some((path, reason)) => Err(CaptureError::WriteStopped {
                path: path.clone(),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    fn current_path(&self) -> PathBuf {
        self.files
            .last()
            .map_or_else(|| self.path_of(0), |f| f.path.clone())
    }

    /// The open file. It is always set while the writer is not stopped
    /// (after `create`); were it not, the writer says it stopped.
    fn current_mut(&mut self) -> Result<&mut PcapngWriter<BufWriter<File>>, CaptureError> {
        let path = self.current_path();
        self.current.as_mut().ok_or_else(|| CaptureError::WriteStopped {
            path,
            reason: "the file is closed".to_string(),
        })
    }

    /// Records the outcome of a write on the current file: updates its
    /// byte count, or stops the writer.
    fn after_write<T>(&mut self, r: io::Result<T>) -> Result<T, CaptureError> {
        let written = self.current.as_ref().map(|c| c.bytes_written());
        if let (Some(f), Some(n)) = (self.files.last_mut(), written) {
            f.bytes = n;
        }
        r.map_err(|error| self.stop_with(error))
    }

    fn stop_with(&mut self, error: io::Error) -> CaptureError {
        let path = self.current_path();
        if let Some(f) = self.files.last_mut() {
            f.complete = false;
        }
        self.current = None;
        self.failed = Some((path.clone(), error.to_string()));
        CaptureError::Write { path, error }
    }

    fn close_current(&mut self) -> Result<(), CaptureError> {
        let Some(w) = self.current.take() else {
            return Ok(());
        };
        let r = w
            .into_inner()
            .and_then(|b| b.into_inner().map_err(|e| e.into_error()));
        match r {
            Ok(_file) => Ok(()),
            Err(error) => Err(self.stop_with(error)),
        }
    }

    /// Creates the next file and writes its section and interface blocks.
    fn open_next(&mut self) -> Result<(), CaptureError> {
        let path = self.path_of(self.files.len());
        let file = OpenOptions::new().write(true).create_new(true).open(&path);
        let file = match file {
            Ok(f) => f,
            Err(error) => {
                self.failed = Some((path.clone(), error.to_string()));
                return Err(if error.kind() == io::ErrorKind::AlreadyExists {
                    CaptureError::Exists { path }
                } else {
                    CaptureError::Create { path, error }
                });
            }
        };
        self.files.push(WrittenFile {
            path,
            packets: 0,
            bytes: 0,
            first_ts_ns: None,
            last_ts_ns: None,
            complete: true,
        });
        let r = self.start_file(BufWriter::new(file));
        let w = self.after_write_new(r)?;
        self.current = Some(w);
        Ok(())
    }

    fn start_file(&self, out: BufWriter<File>) -> io::Result<PcapngWriter<BufWriter<File>>> {
        let mut w = PcapngWriter::new(out)?;
        for i in &self.interfaces {
            w.add_interface(i.link, i.snaplen, i.name.as_deref())?;
        }
        Ok(w)
    }

    fn after_write_new(
        &mut self,
        r: io::Result<PcapngWriter<BufWriter<File>>>,
    ) -> Result<PcapngWriter<BufWriter<File>>, CaptureError> {
        match r {
            Ok(w) => {
                if let Some(f) = self.files.last_mut() {
                    f.bytes = w.bytes_written();
                }
                Ok(w)
            }
            Err(error) => Err(self.stop_with(error)),
        }
    }
}

/// The first file of the sequence `stem-<digits>.pcapng` found in `dir`
/// (by name order), if any. An unreadable directory finds none: creating
/// the first file will report the real problem.
fn existing(dir: &Path, stem: &str) -> Option<PathBuf> {
    let prefix = format!("{stem}-");
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let Some(name) = name.to_str() else { return false };
            let digits = name
                .strip_prefix(&prefix)
                .and_then(|r| r.strip_suffix(".pcapng"))
                .unwrap_or("");
            digits.len() >= 6 && digits.bytes().all(|b| b.is_ascii_digit())
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found.into_iter().next()
}

/// The bytes of the interface block `add_interface` writes for these.
fn interface_block_len(link: LinkType, snaplen: u32, name: Option<&str>) -> Result<u64, CaptureError> {
    let io = |error| CaptureError::Write {
        path: PathBuf::new(),
        error,
    };
    let mut probe = PcapngWriter::new(Vec::new()).map_err(io)?;
    let before = probe.bytes_written();
    probe.add_interface(link, snaplen, name).map_err(io)?;
    Ok(probe.bytes_written() - before)
}

#[cfg(test)]
mod tests;

/// Creates `path` new (never over a file there) and removes it at once:
/// whether a file can be made there now, leaving nothing behind.
pub fn probe_create(path: &Path) -> io::Result<()> {
    drop(OpenOptions::new().write(true).create_new(true).open(path)?);
    std::fs::remove_file(path)
}

/// The directory and name stem of the files of base path `base` (see the
/// module documentation).
fn split(base: &Path) -> io::Result<(PathBuf, String)> {
    let name = base.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the base name must be a UTF-8 file name",
        )
    })?;
    let stem = name.strip_suffix(".pcapng").unwrap_or(name).to_string();
    let dir = match base.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, stem))
}

/// File number `n` of the sequence with stem `stem` in `dir`.
fn numbered(dir: &Path, stem: &str, n: usize) -> PathBuf {
    dir.join(format!("{stem}-{n:06}.pcapng"))
}
