//! [`CaptureFile`]: a capture opened by path, or stdin for "-".
//!
//! # Why a memory map
//!
//! A capture can be far larger than memory; mapping it lets the kernel page
//! it in as the reader walks it, and packets are handed out as slices of
//! the map with no copy at all. The price is the usual one of `mmap`: if
//! another process truncates or rewrites the file while it is mapped,
//! reads of the vanished pages fault (SIGBUS) or see changed bytes. Do not
//! point Clarion at a file something is still writing; stream it instead
//! (`tcpdump -w - | clarion … -`), which goes through [`StreamReader`](crate::StreamReader)'s
//! copying buffer and is immune.

use std::fs::File;
use std::io;
use std::path::Path;

use memmap2::Mmap;

use crate::input::{MemoryInput, StreamInput};
use crate::reader::Reader;
use crate::{CaptureError, PacketSource, RawPacket, SourceStats};

/// A capture file source with static dispatch over its three backings.
#[derive(Debug)]
pub struct CaptureFile {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Mapped(Reader<MemoryInput<Mmap>>),
    Owned(Reader<MemoryInput<Vec<u8>>>),
    Stdin(Reader<StreamInput<io::StdinLock<'static>>>),
}

impl CaptureFile {
    /// Opens `path` (memory-mapped), or standard input when it is "-",
    /// and reads the file header.
    pub fn open(path: &Path) -> Result<Self, CaptureError> {
        if path.as_os_str() == "-" {
            return Self::stdin();
        }
        let open_err = |source| CaptureError::Open {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(open_err)?;
        let len = file.metadata().map_err(open_err)?.len();
        if len == 0 {
            // Nothing to map (mapping zero bytes is an error on some systems).
            return Self::from_bytes(Vec::new());
        }
        // SAFETY: the map is read-only and private to this reader, and every
        // access goes through bounds-checked slices of it. What Rust cannot
        // rule out is another process truncating or rewriting the file while
        // it is mapped (a fault or changed bytes on read); the module doc
        // tells operators to stream files that are still being written.
        let map = unsafe { Mmap::map(&file) }.map_err(open_err)?;
        Ok(CaptureFile {
            inner: Inner::Mapped(Reader::new(MemoryInput::new(map))?),
        })
    }

    /// Reads a capture already in memory (tests, fuzzing, embedded data).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, CaptureError> {
        Ok(CaptureFile {
            inner: Inner::Owned(Reader::new(MemoryInput::new(bytes))?),
        })
    }

    /// Streams a capture from standard input through a reusable buffer.
    pub fn stdin() -> Result<Self, CaptureError> {
        Ok(CaptureFile {
            inner: Inner::Stdin(Reader::new(StreamInput::new(io::stdin().lock()))?),
        })
    }
}

impl PacketSource for CaptureFile {
    #[inline]
    fn next_packet(&mut self) -> Option<Result<RawPacket<'_>, CaptureError>> {
        match &mut self.inner {
            Inner::Mapped(r) => r.next_packet(),
            Inner::Owned(r) => r.next_packet(),
            Inner::Stdin(r) => r.next_packet(),
        }
    }

    fn stats(&self) -> SourceStats {
        match &self.inner {
            Inner::Mapped(r) => r.stats(),
            Inner::Owned(r) => r.stats(),
            Inner::Stdin(r) => r.stats(),
        }
    }
}

/// Opens a capture by path ("-" for stdin); see [`CaptureFile::open`].
pub fn open(path: &Path) -> Result<CaptureFile, CaptureError> {
    CaptureFile::open(path)
}
