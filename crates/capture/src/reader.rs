//! The record loop every source shares, and the public readers over it.

use std::io::Read;
use std::mem;

use crate::decode::{truncated, Decoder, Step};
use crate::error::{CaptureError, NotCapture, Want};
use crate::input::{Input, MemoryInput, StreamInput};
use crate::{PacketSource, RawPacket, SourceStats};

/// A decoder driven over an input.
#[derive(Debug)]
pub(crate) struct Reader<I> {
    input: I,
    decoder: Decoder,
    /// Index the next packet gets; also the number of packets before it.
    next_index: u64,
    /// Length of the record last handed out, consumed on the next call so
    /// the packet's bytes stay in place while the caller holds them.
    pending: usize,
    done: bool,
    packets: u64,
    bytes: u64,
    skipped: u64,
}

/// Where the loop stopped.
type Found = (crate::decode::Meta, std::ops::Range<usize>, usize);

impl<I: Input> Reader<I> {
    /// Reads the file header, so a non-capture fails here and not at the first packet.
    pub fn new(input: I) -> Result<Self, CaptureError> {
        let mut r = Reader {
            input,
            decoder: Decoder::Start,
            next_index: 0,
            pending: 0,
            done: false,
            packets: 0,
            bytes: 0,
            skipped: 0,
        };
        r.pump(true)?;
        Ok(r)
    }

    #[inline]
    pub fn next_packet(&mut self) -> Option<Result<RawPacket<'_>, CaptureError>> {
        if self.done {
            return None;
        }
        self.input.consume(mem::take(&mut self.pending));
        let (meta, data, consumed) = match self.pump(false) {
            Ok(Some(found)) => found,
            Ok(None) => {
                self.done = true;
                return None;
            }
            Err(e) => {
                self.done = e.is_fatal();
                return Some(Err(e));
            }
        };
        let (index, byte_offset) = (self.next_index, self.input.offset());
        let have = self.input.window().len();
        self.next_index += 1;
        self.pending = consumed;
        let Some(bytes) = self.input.window().get(data.clone()) else {
            // The decoder checked the range against this very window; kept as an error, not a panic.
            self.done = true;
            return Some(Err(truncated(
                Want::RecordHeader,
                data.end,
                have,
                index,
                byte_offset,
            )));
        };
        self.packets += 1;
        self.bytes += bytes.len() as u64;
        Some(Ok(RawPacket {
            index,
            ts_ns: meta.ts_ns,
            link: meta.link,
            data: bytes,
            orig_len: meta.orig_len,
            byte_offset,
        }))
    }

    pub fn stats(&self) -> SourceStats {
        SourceStats {
            packets: self.packets,
            bytes: self.bytes,
            dropped: self.decoder.dropped(),
            skipped: self.skipped,
            bytes_read: self.input.offset() + self.pending as u64,
            bytes_total: self.input.total(),
        }
    }

    /// Steps the decoder until a packet, the end of input, or (with
    /// `until_started`) the end of the file header.
    fn pump(&mut self, until_started: bool) -> Result<Option<Found>, CaptureError> {
        loop {
            if until_started && !self.decoder.at_start() {
                return Ok(None);
            }
            if self.fill(1)? == 0 {
                if self.decoder.at_start() {
                    return Err(CaptureError::NotCapture(NotCapture::Empty));
                }
                return Ok(None);
            }
            let step = self.decoder.step(self.input.window());
            match step {
                Ok(Step::Packet { meta, data, consumed }) => return Ok(Some((meta, data, consumed))),
                Ok(Step::Skip(n)) => self.input.consume(n),
                Ok(Step::Need { want, need }) => {
                    let have = self.fill(need)?;
                    if have < need {
                        if want == Want::FileHeader && have < 4 {
                            return Err(CaptureError::NotCapture(NotCapture::TooShort(have)));
                        }
                        let offset = self.input.offset();
                        return Err(truncated(want, need, have, self.next_index, offset));
                    }
                }
                Ok(Step::Unsupported {
                    dlt,
                    interface,
                    first,
                    consumed,
                }) => {
                    let index = self.next_index;
                    self.next_index += 1;
                    self.skipped += 1;
                    self.input.consume(consumed);
                    return Err(if first {
                        CaptureError::UnsupportedLinkType {
                            dlt,
                            interface: Some(interface),
                            packet_index: Some(index),
                        }
                    } else {
                        CaptureError::Skipped {
                            interface,
                            packet_index: index,
                        }
                    });
                }
                Err(fail) => return Err(fail.into_error(self.next_index, self.input.offset())),
            }
        }
    }

    fn fill(&mut self, need: usize) -> Result<usize, CaptureError> {
        self.input.fill(need).map_err(|error| CaptureError::Read {
            packet_index: self.next_index,
            byte_offset: self.input.offset(),
            error,
        })
    }
}

/// Reads a capture held in memory, handing out slices of it (zero copy).
#[derive(Debug)]
pub struct SliceReader<'a>(Reader<MemoryInput<&'a [u8]>>);

impl<'a> SliceReader<'a> {
    /// Checks the file header; fails if `bytes` is not a capture.
    pub fn new(bytes: &'a [u8]) -> Result<Self, CaptureError> {
        Reader::new(MemoryInput::new(bytes)).map(SliceReader)
    }
}

impl PacketSource for SliceReader<'_> {
    #[inline]
    fn next_packet(&mut self) -> Option<Result<RawPacket<'_>, CaptureError>> {
        self.0.next_packet()
    }

    fn stats(&self) -> SourceStats {
        self.0.stats()
    }
}

/// Reads a capture from any byte stream (a pipe, a socket) through one
/// reusable buffer; each packet's bytes are valid until the next call.
#[derive(Debug)]
pub struct StreamReader<R: Read>(Reader<StreamInput<R>>);

impl<R: Read> StreamReader<R> {
    /// Reads the file header; fails if the stream is not a capture.
    pub fn new(reader: R) -> Result<Self, CaptureError> {
        Reader::new(StreamInput::new(reader)).map(StreamReader)
    }
}

impl<R: Read> PacketSource for StreamReader<R> {
    #[inline]
    fn next_packet(&mut self) -> Option<Result<RawPacket<'_>, CaptureError>> {
        self.0.next_packet()
    }

    fn stats(&self) -> SourceStats {
        self.0.stats()
    }
}

#[cfg(test)]
mod tests;
