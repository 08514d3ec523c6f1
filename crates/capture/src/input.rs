//! Where a reader's bytes come from: memory (a loaded file, a slice) or a
//! stream (a file, stdin, a pipe) copied into one reusable buffer.

use std::io::{self, Read};

/// A growable window onto the input, starting at the current record.
pub(crate) trait Input {
    /// Tries to make the window at least `need` bytes long; returns its
    /// length, shorter than `need` only at the end of input.
    fn fill(&mut self, need: usize) -> io::Result<usize>;
    /// The bytes from the current record on, as far as they are loaded.
    fn window(&self) -> &[u8];
    /// Moves the window's start `n` bytes on.
    fn consume(&mut self, n: usize);
    /// Offset of the window's first byte in the whole input.
    fn offset(&self) -> u64;
    /// Length of the whole input, when known up front.
    fn total(&self) -> Option<u64>;
}

/// All bytes present from the start: "need more" means the input ended.
#[derive(Debug)]
pub(crate) struct MemoryInput<B> {
    bytes: B,
    pos: usize, // invariant: pos <= bytes.len()
}

impl<B: AsRef<[u8]>> MemoryInput<B> {
    pub fn new(bytes: B) -> Self {
        MemoryInput { bytes, pos: 0 }
    }
}

impl<B: AsRef<[u8]>> Input for MemoryInput<B> {
    #[inline]
    fn fill(&mut self, _need: usize) -> io::Result<usize> {
        Ok(self.window().len())
    }

    #[inline]
    fn window(&self) -> &[u8] {
        self.bytes.as_ref().get(self.pos..).unwrap_or_default()
    }

    #[inline]
    fn consume(&mut self, n: usize) {
        self.pos = self.pos.saturating_add(n).min(self.bytes.as_ref().len());
    }

    fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn total(&self) -> Option<u64> {
        Some(self.bytes.as_ref().len() as u64)
    }
}

/// Reads are at least this large, so small records cost few system calls.
const CHUNK: usize = 256 * 1024;

/// A stream copied into one buffer that is reused (and grown only for a
/// record larger than any before).
#[derive(Debug)]
pub(crate) struct StreamInput<R> {
    reader: R,
    buf: Vec<u8>,
    start: usize, // invariant: start <= end <= buf.len()
    end: usize,
    offset: u64, // input offset of buf[start]
    eof: bool,
    total: Option<u64>, // a regular file's size when opened: ending before it means it shrank
}

impl<R: Read> StreamInput<R> {
    pub fn new(reader: R) -> Self {
        Self::with_total(reader, None)
    }

    /// A stream whose length is known, such as a regular file: for
    /// progress, and to tell a file that shrank while read from damage.
    pub fn with_total(reader: R, total: Option<u64>) -> Self {
        StreamInput {
            reader,
            buf: Vec::new(),
            start: 0,
            end: 0,
            offset: 0,
            eof: false,
            total,
        }
    }
}

impl<R: Read> Input for StreamInput<R> {
    fn fill(&mut self, need: usize) -> io::Result<usize> {
        while self.end - self.start < need && !self.eof {
            if self.end == self.buf.len() || self.buf.len() - self.start < need {
                // Slide the live bytes to the front; grow only if the record still cannot fit.
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
                let want = need.max(CHUNK);
                if self.buf.len() < want {
                    self.buf.resize(want, 0);
                }
            }
            match self.reader.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    let ended = self.offset + (self.end - self.start) as u64;
                    if let Some(size) = self.total.filter(|&size| ended < size) {
                        // Not damage in the capture: the file lost its tail while being read.
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!(
                                "the file ended at byte {ended} but had {size} bytes when opened: \
                                 another process truncated it while it was read"
                            ),
                        ));
                    }
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(self.end - self.start)
    }

    #[inline]
    fn window(&self) -> &[u8] {
        self.buf.get(self.start..self.end).unwrap_or_default()
    }

    #[inline]
    fn consume(&mut self, n: usize) {
        let n = n.min(self.end - self.start);
        self.start += n;
        self.offset += n as u64;
    }

    fn offset(&self) -> u64 {
        self.offset
    }

    fn total(&self) -> Option<u64> {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hands out at most 3 bytes per read, with an interruption now and then.
    struct Trickle(Vec<u8>, usize, bool);

    impl Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            self.2 = !self.2;
            if self.2 {
                return Err(io::ErrorKind::Interrupted.into());
            }
            let n = out.len().min(3).min(self.0.len() - self.1);
            out[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
            self.1 += n;
            Ok(n)
        }
    }

    #[test]
    fn stream_window_fills_slides_and_grows() {
        let data: Vec<u8> = (0..=255)
            .cycle()
            .take(CHUNK * 2 + 10)
            .map(|b: i32| b as u8)
            .collect();
        let mut s = StreamInput::new(Trickle(data.clone(), 0, false));
        assert!(s.fill(10).unwrap() >= 10);
        assert_eq!(s.window()[..10], data[..10]);
        s.consume(7);
        assert_eq!(s.offset(), 7);
        // A record bigger than the buffer forces growth.
        let need = CHUNK + 100;
        assert_eq!(s.fill(need).unwrap(), need);
        assert_eq!(s.window()[..need], data[7..7 + need]);
        s.consume(need);
        assert_eq!(s.fill(data.len()).unwrap(), data.len() - 7 - need);
        assert_eq!(s.window(), &data[7 + need..]);
        s.consume(usize::MAX);
        assert_eq!(s.fill(1).unwrap(), 0);
        assert_eq!(s.offset(), data.len() as u64);
        assert_eq!(s.total(), None);
    }

    #[test]
    fn memory_window() {
        let mut m = MemoryInput::new(vec![1u8, 2, 3]);
        assert_eq!(m.fill(100).unwrap(), 3);
        m.consume(2);
        assert_eq!(m.window(), &[3]);
        m.consume(10);
        assert_eq!((m.window().len(), m.offset(), m.total()), (0, 3, Some(3)));
    }
}
