//! [`CaptureFile`]: a capture opened by path, or stdin for "-".
//!
//! # Why buffered reads, not a memory map
//!
//! Every path is read with `read(2)` into [`StreamInput`]'s one reusable
//! buffer. A memory map saved that copy, but a file truncated by another
//! process while mapped killed the reader with SIGBUS (no message, no
//! reports, no summary), and no safe handler can turn that fault into an
//! error. With reads, a file that shrinks underneath just ends early, and
//! ends like a damaged capture: the packets before it, then one
//! [`CaptureError::Read`] naming the file, the packet and the offset, and
//! saying the file shrank. The copy costs about 2.5% of `clarion run` on a
//! 180 MB capture (docs/architecture.md, "Sources").
//!
//! # Files, pipes and devices
//!
//! What the path is decides nothing; what it opens does (`fstat`): a
//! regular file has a size (progress bars), anything else (a FIFO, `<(…)`,
//! `/dev/stdin`, `/proc/self/fd/N`, a character device, a socket) is a
//! stream of unknown length. Both go through the same reader.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use crate::input::{MemoryInput, StreamInput};
use crate::reader::Reader;
use crate::{CaptureError, PacketSource, RawPacket, SourceStats};

/// A capture file source with static dispatch over its backings.
#[derive(Debug)]
pub struct CaptureFile {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    /// A path: errors met while reading name it.
    Path {
        reader: Reader<StreamInput<File>>,
        path: PathBuf,
    },
    Owned(Reader<MemoryInput<Vec<u8>>>),
    Stdin(Reader<StreamInput<io::StdinLock<'static>>>),
}

impl CaptureFile {
    /// Opens `path`, or standard input when it is "-", and reads the file
    /// header. Errors here do not name the path (but for
    /// [`CaptureError::Open`]); the caller says what it was opening.
    pub fn open(path: &Path) -> Result<Self, CaptureError> {
        if path.as_os_str() == "-" {
            return Self::stdin();
        }
        let open_err = |error| CaptureError::Open {
            path: path.to_path_buf(),
            error,
        };
        let file = File::open(path).map_err(open_err)?;
        let meta = file.metadata().map_err(open_err)?;
        if meta.is_dir() {
            return Err(open_err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "it is a directory",
            )));
        }
        // Only a regular file has a length worth knowing; a FIFO's or a device's is 0.
        let size = meta.is_file().then_some(meta.len());
        Ok(CaptureFile {
            inner: Inner::Path {
                reader: Reader::new(StreamInput::with_total(file, size))?,
                path: path.to_path_buf(),
            },
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
            Inner::Path { reader, path } => match reader.next_packet() {
                Some(Err(e)) => Some(Err(in_file(path, e))),
                other => other,
            },
            Inner::Owned(r) => r.next_packet(),
            Inner::Stdin(r) => r.next_packet(),
        }
    }

    fn stats(&self) -> SourceStats {
        match &self.inner {
            Inner::Path { reader, .. } => reader.stats(),
            Inner::Owned(r) => r.stats(),
            Inner::Stdin(r) => r.stats(),
        }
    }
}

/// Names the file an error was met in (only the path knows it).
#[cold]
fn in_file(path: &Path, error: CaptureError) -> CaptureError {
    CaptureError::File {
        path: path.to_path_buf(),
        error: Box::new(error),
    }
}

/// Opens a capture by path ("-" for stdin); see [`CaptureFile::open`].
pub fn open(path: &Path) -> Result<CaptureFile, CaptureError> {
    CaptureFile::open(path)
}
