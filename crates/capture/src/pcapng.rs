//! pcapng: a sequence of blocks, each `type, length, body, length`.
//!
//! A section header block (SHB) fixes the byte order of its section (its
//! type reads the same both ways; its byte-order magic tells which) and
//! resets the interface list. Each interface description block (IDB) adds
//! an interface with its own link type and timestamp unit (`if_tsresol`,
//! default microseconds; `if_tsoffset` in seconds). Packets come in
//! enhanced (EPB), simple (SPB, no timestamp: it takes the previous
//! packet's) and obsolete (PB) packet blocks. Every other block is skipped.

use clarion_wire::LinkType;

use crate::decode::{Endian, Fail, Meta, Step, MAX_RECORD};
use crate::error::{Corruption, Want};

const SHB_TYPE: u32 = 0x0a0d_0d0a;
const IDB_TYPE: u32 = 1;
const PB_TYPE: u32 = 2;
const SPB_TYPE: u32 = 3;
const ISB_TYPE: u32 = 5;
const EPB_TYPE: u32 = 6;

const OPT_END: u16 = 0;
const IF_TSRESOL: u16 = 9;
const IF_TSOFFSET: u16 = 14;
const ISB_IFDROP: u16 = 5;

/// How to turn an interface's raw timestamp into nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TsUnit {
    Mul(u64),
    Div(u64),
    /// 2^-n seconds.
    Pow2(u32),
    /// Units so fine that every representable time is below 1 ns.
    Zero,
}

impl TsUnit {
    fn from_tsresol(b: u8) -> Self {
        let n = u32::from(b & 0x7f);
        if b & 0x80 != 0 {
            return TsUnit::Pow2(n);
        }
        if n <= 9 {
            TsUnit::Mul(10u64.pow(9 - n))
        } else {
            10u64.checked_pow(n - 9).map_or(TsUnit::Zero, TsUnit::Div)
        }
    }

    #[inline]
    fn to_ns(self, ts: u64) -> u64 {
        match self {
            TsUnit::Mul(m) => ts.saturating_mul(m),
            TsUnit::Div(d) => ts / d,
            TsUnit::Pow2(n) => u64::try_from((u128::from(ts) * 1_000_000_000) >> n).unwrap_or(u64::MAX),
            TsUnit::Zero => 0,
        }
    }
}

#[derive(Debug, Clone)]
struct Interface {
    /// The link type, or the DLT number Clarion cannot parse.
    link: Result<LinkType, u32>,
    unit: TsUnit,
    offset_ns: i64,
    snaplen: u32,
    /// The unsupported link type was reported already.
    warned: bool,
    /// Latest `isb_ifdrop`.
    dropped: u64,
}

/// Decodes the blocks of a pcapng stream, across sections.
#[derive(Debug)]
pub(crate) struct NgDecoder {
    endian: Endian,
    interfaces: Vec<Interface>,
    /// Time of the last packet, for simple packet blocks.
    last_ts: u64,
    /// Drops counted in earlier sections and in obsolete packet blocks.
    dropped_before: u64,
}

impl NgDecoder {
    pub fn new() -> Self {
        NgDecoder {
            endian: Endian::Little,
            interfaces: Vec::new(),
            last_ts: 0,
            dropped_before: 0,
        }
    }

    pub fn dropped(&self) -> u64 {
        self.interfaces
            .iter()
            .fold(self.dropped_before, |acc, i| acc.saturating_add(i.dropped))
    }

    /// Decodes the block at the start of `window`.
    pub fn step(&mut self, window: &[u8]) -> Result<Step, Fail> {
        let Some(head) = window.first_chunk::<8>() else {
            return Ok(Step::Need {
                want: Want::BlockHeader,
                need: 8,
            });
        };
        if head[..4] == SHB_TYPE.to_be_bytes() {
            return self.section(window);
        }
        let e = self.endian;
        let (block_type, len) = (e.u32(window, 0), e.u32(window, 4));
        let body = match block(e, window, block_type, len, 12)? {
            Ok(body) => body,
            Err(need) => return Ok(need),
        };
        let consumed = len as usize;
        match block_type {
            IDB_TYPE => self.interface(body, len),
            EPB_TYPE => {
                if body.len() < 20 {
                    return Err(too_short("enhanced packet block", len, 32));
                }
                let ts = e.u64_hi_lo(body, 4);
                let (caplen, orig_len) = (e.u32(body, 12), e.u32(body, 16));
                let data = data_range(28, caplen, body.len() - 20)?;
                self.packet(e.u32(body, 0), Some(ts), data, orig_len, consumed)
            }
            PB_TYPE => {
                if body.len() < 20 {
                    return Err(too_short("packet block", len, 32));
                }
                self.dropped_before = self.dropped_before.saturating_add(u64::from(e.u16(body, 2)));
                let ts = e.u64_hi_lo(body, 4);
                let (caplen, orig_len) = (e.u32(body, 12), e.u32(body, 16));
                let data = data_range(28, caplen, body.len() - 20)?;
                self.packet(u32::from(e.u16(body, 0)), Some(ts), data, orig_len, consumed)
            }
            SPB_TYPE => {
                if body.len() < 4 {
                    return Err(too_short("simple packet block", len, 16));
                }
                let orig_len = e.u32(body, 0);
                let room = body.len() - 4;
                // The captured length is implied: the original length, cut by the block and the snap length.
                let snap = self.interfaces.first().map_or(0, |i| i.snaplen);
                let mut caplen = (orig_len as usize).min(room);
                if snap != 0 {
                    caplen = caplen.min(snap as usize);
                }
                self.packet(0, None, 12..12 + caplen, orig_len, consumed)
            }
            ISB_TYPE => {
                if body.len() < 12 {
                    return Err(too_short("interface statistics block", len, 24));
                }
                let id = e.u32(body, 0) as usize;
                let mut drops = None;
                options(e, body.get(12..).unwrap_or_default(), |code, v| {
                    if code == ISB_IFDROP && v.len() >= 8 {
                        drops = Some(e.u64(v, 0));
                    }
                });
                if let (Some(d), Some(i)) = (drops, self.interfaces.get_mut(id)) {
                    i.dropped = d;
                }
                Ok(Step::Skip(consumed))
            }
            _ => Ok(Step::Skip(consumed)),
        }
    }

    /// A section header: new byte order, no interfaces.
    fn section(&mut self, window: &[u8]) -> Result<Step, Fail> {
        let Some(head) = window.first_chunk::<12>() else {
            return Ok(Step::Need {
                want: Want::BlockHeader,
                need: 12,
            });
        };
        let e = match [head[8], head[9], head[10], head[11]] {
            [0x1a, 0x2b, 0x3c, 0x4d] => Endian::Big,
            [0x4d, 0x3c, 0x2b, 0x1a] => Endian::Little,
            m => return Err(Fail::Corrupt(Corruption::ByteOrderMagic(m))),
        };
        let len = e.u32(window, 4);
        if let Err(need) = block(e, window, SHB_TYPE, len, 28)? {
            return Ok(need);
        }
        let (major, minor) = (e.u16(window, 12), e.u16(window, 14));
        if major != 1 {
            return Err(Fail::Corrupt(Corruption::Version {
                format: "pcapng",
                major,
                minor,
            }));
        }
        self.dropped_before = self.dropped();
        self.interfaces.clear();
        self.endian = e;
        Ok(Step::Skip(len as usize))
    }

    fn interface(&mut self, body: &[u8], len: u32) -> Result<Step, Fail> {
        if body.len() < 8 {
            return Err(too_short("interface description block", len, 20));
        }
        let e = self.endian;
        let dlt = u32::from(e.u16(body, 0));
        let mut iface = Interface {
            link: LinkType::from_dlt(dlt).ok_or(dlt),
            unit: TsUnit::Mul(1_000),
            offset_ns: 0,
            snaplen: e.u32(body, 4),
            warned: false,
            dropped: 0,
        };
        options(e, body.get(8..).unwrap_or_default(), |code, v| match (code, v) {
            (IF_TSRESOL, [r, ..]) => iface.unit = TsUnit::from_tsresol(*r),
            (IF_TSOFFSET, v) if v.len() >= 8 => {
                iface.offset_ns = (e.u64(v, 0) as i64).saturating_mul(1_000_000_000);
            }
            _ => {}
        });
        self.interfaces.push(iface);
        Ok(Step::Skip(len as usize))
    }

    fn packet(
        &mut self,
        id: u32,
        ts: Option<u64>,
        data: std::ops::Range<usize>,
        orig_len: u32,
        consumed: usize,
    ) -> Result<Step, Fail> {
        let count = self.interfaces.len();
        let Some(iface) = self.interfaces.get_mut(id as usize) else {
            return Err(Fail::Corrupt(Corruption::UnknownInterface { id, count }));
        };
        let link = match iface.link {
            Ok(link) => link,
            Err(dlt) => {
                let first = !iface.warned;
                iface.warned = true;
                return Ok(Step::Unsupported {
                    dlt,
                    interface: id,
                    first,
                    consumed,
                });
            }
        };
        let ts_ns = match ts {
            Some(t) => iface.unit.to_ns(t).saturating_add_signed(iface.offset_ns),
            None => self.last_ts,
        };
        self.last_ts = ts_ns;
        Ok(Step::Packet {
            meta: Meta {
                ts_ns,
                link,
                orig_len,
            },
            data,
            consumed,
        })
    }
}

impl Endian {
    /// pcapng's 64-bit timestamps are two 32-bit words, high first, each in section order.
    fn u64_hi_lo(self, b: &[u8], at: usize) -> u64 {
        (u64::from(self.u32(b, at)) << 32) | u64::from(self.u32(b, at + 4))
    }
}

/// Validates a block's length and trailer; gives its body, or the `Need` step.
fn block(e: Endian, window: &[u8], block_type: u32, len: u32, min: u32) -> Result<Result<&[u8], Step>, Fail> {
    if len < min || len & 3 != 0 {
        return Err(Fail::Corrupt(Corruption::BlockLength { block_type, len }));
    }
    if len > MAX_RECORD {
        return Err(Fail::Corrupt(Corruption::BlockTooLarge {
            block_type,
            len,
            limit: MAX_RECORD,
        }));
    }
    let n = len as usize;
    if window.len() < n {
        return Ok(Err(Step::Need {
            want: Want::Block { declared: len },
            need: n,
        }));
    }
    let trailer = e.u32(window, n - 4);
    if trailer != len {
        return Err(Fail::Corrupt(Corruption::TrailerMismatch {
            header: len,
            trailer,
        }));
    }
    Ok(Ok(window.get(8..n - 4).unwrap_or_default()))
}

/// The packet data range at `start`, if `caplen` fits in `room`.
fn data_range(start: usize, caplen: u32, room: usize) -> Result<std::ops::Range<usize>, Fail> {
    if caplen as usize > room {
        return Err(Fail::Corrupt(Corruption::PacketOverflowsBlock {
            caplen,
            room: u32::try_from(room).unwrap_or(u32::MAX),
        }));
    }
    Ok(start..start + caplen as usize)
}

fn too_short(block: &'static str, len: u32, need: u32) -> Fail {
    Fail::Corrupt(Corruption::BlockTooShort { block, len, need })
}

/// Calls `f(code, value)` for each option; a malformed list ends silently,
/// keeping what came before (options only refine defaults).
fn options(e: Endian, opts: &[u8], mut f: impl FnMut(u16, &[u8])) {
    let mut at = 0;
    while let Some(head) = opts.get(at..at + 4) {
        let (code, len) = (e.u16(head, 0), usize::from(e.u16(head, 2)));
        let Some(value) = opts.get(at + 4..at + 4 + len) else {
            break;
        };
        if code == OPT_END {
            break;
        }
        f(code, value);
        at += 4 + len.next_multiple_of(4);
    }
}

#[cfg(test)]
mod tests;
