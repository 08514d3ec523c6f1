//! The one error type of the crate, worded for operators.
//!
//! Damage is located twice: by packet (how many packets were read intact
//! before it) and by byte offset (where the damaged record starts), so an
//! operator can cut the file there or compare with another tool.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a capture could not be read (further).
///
/// An OS error's text is part of the message and not also its
/// [`source`](std::error::Error::source), so a chain printed in full
/// (`anyhow`'s `{:#}`) says it once.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("cannot open {}: {error}", path.display())]
    Open { path: PathBuf, error: io::Error },

    #[error("read error {} at byte offset {byte_offset}: {error}", after(*packet_index))]
    Read {
        packet_index: u64,
        byte_offset: u64,
        error: io::Error,
    },

    /// An error met while reading a file opened by path, naming it.
    #[error("{}: {error}", path.display())]
    File { path: PathBuf, error: Box<CaptureError> },

    #[error("not a capture file: {0}")]
    NotCapture(NotCapture),

    /// Writing: a file to write could not be created.
    #[error("cannot create {}: {error}", path.display())]
    Create { path: PathBuf, error: io::Error },

    /// Writing: the file to write exists; it is never overwritten.
    #[error("{} exists already; not overwriting it (choose another name or move the old files away)", path.display())]
    Exists { path: PathBuf },

    /// Writing to a file failed (disk full, I/O error), or a packet was
    /// refused (`InvalidInput`: an interface never added, a packet over
    /// the block size limit).
    #[error("cannot write {}: {error}", path.display())]
    Write { path: PathBuf, error: io::Error },

    /// Writing stopped after an earlier error, said again to later calls.
    #[error("not writing packets: writing {} failed earlier: {reason}", path.display())]
    WriteStopped { path: PathBuf, reason: String },

    /// A link type Clarion cannot parse. For a pcap file it is fatal and has
    /// no packet index; for a pcapng interface it is reported once, at its
    /// first packet, and that interface's packets are skipped (counted in
    /// [`SourceStats::skipped`](crate::SourceStats::skipped)) while reading goes on.
    #[error("unsupported link type {dlt}{}{}{}", dlt_name(*dlt), on_interface(*interface), at_packet(*packet_index))]
    UnsupportedLinkType {
        dlt: u32,
        interface: Option<u32>,
        packet_index: Option<u64>,
    },

    /// Another packet of an interface already reported as
    /// [`CaptureError::UnsupportedLinkType`], skipped too: returned so that
    /// the reader's caller can count it where it belongs (completeness),
    /// not for the operator (it was told once).
    #[error("packet {packet_index} skipped: interface {interface} has a link type Clarion cannot parse")]
    Skipped { interface: u32, packet_index: u64 },

    /// The file ends inside a record. Packets before it were returned.
    #[error("capture truncated {} at byte offset {byte_offset}: {detail}", after(*packet_index))]
    Truncated {
        packet_index: u64,
        byte_offset: u64,
        detail: Truncation,
    },

    /// A record or block is impossible. Packets before it were returned.
    #[error("capture corrupt {} at byte offset {byte_offset}: {detail}", after(*packet_index))]
    Corrupt {
        packet_index: u64,
        byte_offset: u64,
        detail: Corruption,
    },
}

impl CaptureError {
    /// Whether the source stops after this error (every error but a
    /// per-interface unsupported link type and its later skipped packets).
    pub fn is_fatal(&self) -> bool {
        match self {
            CaptureError::UnsupportedLinkType {
                packet_index: Some(_),
                ..
            }
            | CaptureError::Skipped { .. } => false,
            CaptureError::File { error, .. } => error.is_fatal(),
            _ => true,
        }
    }

    /// The error without the file it was met in ([`CaptureError::File`]'s inner one).
    pub fn in_file(&self) -> &CaptureError {
        match self {
            CaptureError::File { error, .. } => error.in_file(),
            other => other,
        }
    }
}

/// "after packet N": the index of the damaged packet is the number read intact.
fn after(packet_index: u64) -> String {
    if packet_index == 0 {
        "before the first packet".to_string()
    } else {
        format!("after packet {packet_index}")
    }
}

fn on_interface(i: Option<u32>) -> String {
    i.map(|i| format!(" on interface {i}")).unwrap_or_default()
}

fn at_packet(p: Option<u64>) -> String {
    p.map(|p| format!(" (first seen at packet {p}; its packets are skipped)"))
        .unwrap_or_default()
}

/// Names of link types people meet in practice, to make the error actionable.
fn dlt_name(dlt: u32) -> &'static str {
    match dlt {
        6 => " (IEEE 802.5 Token Ring)",
        9 => " (PPP)",
        50 => " (PPP in HDLC framing)",
        104 => " (Cisco HDLC)",
        105 => " (IEEE 802.11 wireless)",
        119 => " (Prism 802.11)",
        127 => " (802.11 with radiotap)",
        143 => " (DOCSIS)",
        147..=162 => " (user-defined)",
        189 | 220 => " (USB)",
        192 => " (PPI)",
        195 | 215 | 230 => " (IEEE 802.15.4)",
        249 => " (USB over IP)",
        252 => " (Wireshark upper PDU)",
        253 => " (Linux netlink)",
        _ => "",
    }
}

/// Why the data is not a capture file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotCapture {
    Empty,
    /// Fewer bytes than any magic number.
    TooShort(usize),
    /// The first four bytes.
    Magic([u8; 4]),
}

impl fmt::Display for NotCapture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            NotCapture::Empty => f.write_str("the file is empty"),
            NotCapture::TooShort(n) => write!(f, "only {n} bytes, too short for a pcap or pcapng header"),
            NotCapture::Magic(m) => {
                write!(
                    f,
                    "it starts with 0x{:08x}, which is neither a pcap nor a pcapng magic number",
                    u32::from_be_bytes(m)
                )?;
                if m[..2] == [0x1f, 0x8b] {
                    f.write_str(" (it looks gzip-compressed: decompress it first)")?;
                }
                Ok(())
            }
        }
    }
}

/// What the file ended inside of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    FileHeader,
    RecordHeader,
    /// Packet data whose length a pcap record header declared.
    RecordData {
        declared: u32,
    },
    BlockHeader,
    /// A pcapng block whose length its header declared.
    Block {
        declared: u32,
    },
}

/// How much was missing when the file ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncation {
    pub want: Want,
    /// Bytes the damaged record needs, counted from its start.
    pub need: usize,
    /// Bytes left in the file from the damaged record's start.
    pub have: usize,
}

impl fmt::Display for Truncation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (need, have) = (self.need, self.have);
        match self.want {
            Want::FileHeader => write!(f, "file header needs {need} bytes but only {have} remain"),
            Want::RecordHeader => write!(f, "record header needs {need} bytes but only {have} remain"),
            Want::RecordData { declared } => {
                let hdr = need.saturating_sub(declared as usize);
                let left = have.saturating_sub(hdr);
                write!(f, "record header says {declared} bytes but only {left} remain")
            }
            Want::BlockHeader => write!(f, "block header needs {need} bytes but only {have} remain"),
            Want::Block { declared } => {
                write!(f, "block header says {declared} bytes but only {have} remain")
            }
        }
    }
}

/// What was impossible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corruption {
    /// pcap caplen beyond any real capture.
    RecordTooLarge {
        caplen: u32,
        limit: u32,
    },
    /// pcapng block length below 12 (28 for a section header) or not a multiple of 4.
    BlockLength {
        block_type: u32,
        len: u32,
    },
    BlockTooLarge {
        block_type: u32,
        len: u32,
        limit: u32,
    },
    /// pcapng: the length after the body differs from the one before it.
    TrailerMismatch {
        header: u32,
        trailer: u32,
    },
    /// A block shorter than its fixed fields.
    BlockTooShort {
        block: &'static str,
        len: u32,
        need: u32,
    },
    /// Packet data runs past the end of its block.
    PacketOverflowsBlock {
        caplen: u32,
        room: u32,
    },
    /// A packet names an interface its section never described.
    UnknownInterface {
        id: u32,
        count: usize,
    },
    /// Section header byte-order magic is neither order of 0x1a2b3c4d.
    ByteOrderMagic([u8; 4]),
    Version {
        format: &'static str,
        major: u16,
        minor: u16,
    },
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Corruption::RecordTooLarge { caplen, limit } => {
                write!(
                    f,
                    "record header says {caplen} bytes, more than the {limit} any capture record can hold"
                )
            }
            Corruption::BlockLength { block_type, len } => {
                write!(f, "block of type {block_type:#x} has an impossible length {len}")
            }
            Corruption::BlockTooLarge {
                block_type,
                len,
                limit,
            } => {
                write!(
                    f,
                    "block of type {block_type:#x} claims {len} bytes, more than the {limit} limit"
                )
            }
            Corruption::TrailerMismatch { header, trailer } => {
                write!(f, "block length {header} at its start but {trailer} at its end")
            }
            Corruption::BlockTooShort { block, len, need } => {
                write!(
                    f,
                    "{block} of {len} bytes is shorter than its {need}-byte fixed part"
                )
            }
            Corruption::PacketOverflowsBlock { caplen, room } => {
                write!(
                    f,
                    "packet of {caplen} bytes overflows its block, which has room for {room}"
                )
            }
            Corruption::UnknownInterface { id, count } => {
                write!(
                    f,
                    "packet refers to interface {id} but the section describes {count}"
                )
            }
            Corruption::ByteOrderMagic(m) => {
                write!(
                    f,
                    "section header byte-order magic is 0x{:08x}, not 0x1a2b3c4d",
                    u32::from_be_bytes(m)
                )
            }
            Corruption::Version { format, major, minor } => {
                write!(f, "unsupported {format} version {major}.{minor}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_messages() {
        let e = CaptureError::Truncated {
            packet_index: 1234,
            byte_offset: 567890,
            detail: Truncation {
                want: Want::RecordData { declared: 1514 },
                need: 1530,
                have: 316,
            },
        };
        assert_eq!(
            e.to_string(),
            "capture truncated after packet 1234 at byte offset 567890: \
             record header says 1514 bytes but only 300 remain"
        );
        assert!(e.is_fatal());
        let e = CaptureError::NotCapture(NotCapture::Magic(*b"GET "));
        assert_eq!(
            e.to_string(),
            "not a capture file: it starts with 0x47455420, which is neither a pcap nor a pcapng magic number"
        );
        let e = CaptureError::UnsupportedLinkType {
            dlt: 127,
            interface: Some(1),
            packet_index: Some(5),
        };
        assert_eq!(
            e.to_string(),
            "unsupported link type 127 (802.11 with radiotap) on interface 1 \
             (first seen at packet 5; its packets are skipped)"
        );
        assert!(!e.is_fatal());
        let e = CaptureError::Corrupt {
            packet_index: 0,
            byte_offset: 0,
            detail: Corruption::Version {
                format: "pcap",
                major: 3,
                minor: 0,
            },
        };
        assert_eq!(
            e.to_string(),
            "capture corrupt before the first packet at byte offset 0: unsupported pcap version 3.0"
        );
        let e = CaptureError::File {
            path: "/srv/a.pcap".into(),
            error: Box::new(e),
        };
        assert_eq!(
            e.to_string(),
            "/srv/a.pcap: capture corrupt before the first packet at byte offset 0: unsupported pcap version 3.0"
        );
        assert!(e.is_fatal() && matches!(e.in_file(), CaptureError::Corrupt { .. }));
    }

    /// An OS error is said once when the chain is printed in full (`{:#}`):
    /// in the message, not again as the source.
    #[test]
    fn os_errors_are_said_once() {
        let os = || io::Error::from_raw_os_error(19);
        let errors = [
            CaptureError::Open {
                path: "/x.pcap".into(),
                error: os(),
            },
            CaptureError::Read {
                packet_index: 3,
                byte_offset: 90,
                error: os(),
            },
        ];
        for e in errors {
            assert!(e.to_string().ends_with(&os().to_string()), "{e}");
            assert!(std::error::Error::source(&e).is_none(), "{e}");
        }
    }
}
