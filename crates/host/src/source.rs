//! Where a replay's frames come from: one capture, or several merged by time.

use clarion_capture::{CaptureError, CaptureFile, PacketSource, RawPacket, SourceStats};
use clarion_wire::LinkType;

/// A source of frames for [`crate::replay`], each with the input it came
/// from (0 for a single capture; `k` for the k-th of several).
///
/// Contract: as [`PacketSource`]'s (input order, `None` forever after the
/// end or a fatal error, no panic on any input).
pub trait Frames {
    fn next_frame(&mut self) -> Option<Result<(usize, RawPacket<'_>), CaptureError>>;
    /// Counters over all inputs.
    fn source_stats(&self) -> SourceStats;
}

impl<S: PacketSource + ?Sized> Frames for S {
    #[inline]
    fn next_frame(&mut self) -> Option<Result<(usize, RawPacket<'_>), CaptureError>> {
        self.next_packet().map(|r| r.map(|p| (0, p)))
    }
    fn source_stats(&self) -> SourceStats {
        self.stats()
    }
}

/// An input's next frame, copied out of its reader so the others can be read.
#[derive(Debug)]
struct Head {
    index: u64,
    ts_ns: u64,
    link: LinkType,
    data: Vec<u8>,
    orig_len: u32,
    byte_offset: u64,
}

/// Several captures merged into one stream by timestamp (ties: the input
/// given first), each frame tagged with its input: one capture per host.
///
/// Each input's next frame is held in a buffer of its own (a copy), and
/// the earliest is handed out. A warning (a skipped frame) of any input
/// is passed on as it is met; damage in any input (a fatal error) ends the
/// whole stream, since windows after it would be missing that input's
/// packets: the reports then cover the frames before the damage.
#[derive(Debug)]
pub struct MergedCaptures {
    inputs: Vec<CaptureFile>,
    heads: Vec<Option<Head>>,
    /// Inputs whose head must be read before the next pick.
    stale: Vec<usize>,
    ended: bool,
}

impl MergedCaptures {
    pub fn new(inputs: Vec<CaptureFile>) -> MergedCaptures {
        let n = inputs.len();
        MergedCaptures {
            inputs,
            heads: (0..n).map(|_| None).collect(),
            stale: (0..n).collect(),
            ended: false,
        }
    }

    /// Reads input `k`'s next frame into its head; a warning or an error is returned.
    fn refill(&mut self, k: usize) -> Option<CaptureError> {
        let head = &mut self.heads[k];
        match self.inputs[k].next_packet() {
            None => {
                *head = None;
                None
            }
            Some(Ok(p)) => {
                let h = head.get_or_insert_with(|| Head {
                    index: 0,
                    ts_ns: 0,
                    link: p.link,
                    data: Vec::new(),
                    orig_len: 0,
                    byte_offset: 0,
                });
                h.index = p.index;
                h.ts_ns = p.ts_ns;
                h.link = p.link;
                h.data.clear();
                h.data.extend_from_slice(p.data);
                h.orig_len = p.orig_len;
                h.byte_offset = p.byte_offset;
                None
            }
            Some(Err(e)) => {
                if e.is_fatal() {
                    *head = None;
                } else {
                    // Read past the skipped frame on the next call.
                    self.stale.push(k);
                }
                Some(e)
            }
        }
    }
}

impl Frames for MergedCaptures {
    fn next_frame(&mut self) -> Option<Result<(usize, RawPacket<'_>), CaptureError>> {
        if self.ended {
            return None;
        }
        while let Some(k) = self.stale.pop() {
            if let Some(e) = self.refill(k) {
                if e.is_fatal() {
                    self.ended = true;
                }
                return Some(Err(e));
            }
        }
        let (k, _) = self
            .heads
            .iter()
            .enumerate()
            .filter_map(|(k, h)| h.as_ref().map(|h| (k, h.ts_ns)))
            .min_by_key(|&(k, ts)| (ts, k))?;
        self.stale.push(k);
        let h = self.heads[k].as_ref()?;
        Some(Ok((
            k,
            RawPacket {
                index: h.index,
                ts_ns: h.ts_ns,
                link: h.link,
                data: &h.data,
                orig_len: h.orig_len,
                byte_offset: h.byte_offset,
            },
        )))
    }

    fn source_stats(&self) -> SourceStats {
        let mut total = SourceStats {
            bytes_total: Some(0),
            ..SourceStats::default()
        };
        for i in &self.inputs {
            let s = i.stats();
            total.packets += s.packets;
            total.bytes += s.bytes;
            total.dropped += s.dropped;
            total.skipped += s.skipped;
            total.bytes_read += s.bytes_read;
            total.bytes_total = match (total.bytes_total, s.bytes_total) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use clarion_capture::{PcapWriter, TsResolution};

    use super::*;

    /// A pcap in memory with one frame per timestamp (its bytes: the timestamp's low byte).
    fn capture(times: &[u64]) -> Vec<u8> {
        let mut w = PcapWriter::new(Vec::new(), LinkType::Ethernet, TsResolution::Nano).expect("header");
        for &t in times {
            w.write_packet(t, &[t as u8; 14], 14).expect("written");
        }
        w.into_inner().expect("flushed")
    }

    fn drain(m: &mut MergedCaptures) -> Vec<Result<(usize, u64), String>> {
        let mut out = Vec::new();
        while let Some(item) = m.next_frame() {
            out.push(
                item.map(|(k, p)| {
                    assert_eq!(p.data, &[p.ts_ns as u8; 14]);
                    (k, p.ts_ns)
                })
                .map_err(|e| e.to_string()),
            );
        }
        out
    }

    #[test]
    fn frames_come_merged_by_time_ties_to_the_first_input() {
        let inputs = [vec![10, 30, 30, 50], vec![20, 30, 40], vec![]]
            .iter()
            .map(|t| CaptureFile::from_bytes(capture(t)).expect("a capture"))
            .collect();
        let mut m = MergedCaptures::new(inputs);
        let got: Vec<_> = drain(&mut m).into_iter().map(|r| r.expect("no error")).collect();
        assert_eq!(
            got,
            [(0, 10), (1, 20), (0, 30), (0, 30), (1, 30), (1, 40), (0, 50)]
        );
        assert_eq!(m.source_stats().packets, 7);
        assert!(m.next_frame().is_none(), "None after the end");
    }

    #[test]
    fn damage_in_one_input_ends_the_stream_after_the_frames_before_it() {
        let mut damaged = capture(&[15, 25, 35]);
        // Cut the last record in half.
        damaged.truncate(damaged.len() - 10);
        let inputs = vec![
            CaptureFile::from_bytes(capture(&[10, 20, 30, 40])).expect("a capture"),
            CaptureFile::from_bytes(damaged).expect("a capture"),
        ];
        let got = drain(&mut MergedCaptures::new(inputs));
        let frames: Vec<_> = got.iter().filter_map(|r| r.as_ref().ok().copied()).collect();
        assert_eq!(frames, [(0, 10), (1, 15), (0, 20), (1, 25)]);
        assert!(
            got.last().is_some_and(|r| r.is_err()),
            "the damage is the last item: {got:?}"
        );
    }
}
