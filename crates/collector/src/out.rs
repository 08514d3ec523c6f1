//! Where collected header records go.

use std::io::{self, Write};

use clarion_capture::PcapngWriter;
use clarion_headers::HeaderRecord;
use clarion_wire::LinkType;

/// A destination of records; [`HeaderOut::flush`] is called when the
/// socket is quiet and at the end.
pub trait HeaderOut {
    fn write(&mut self, r: &HeaderRecord) -> io::Result<()>;
    fn flush(&mut self) -> io::Result<()>;
}

/// One JSON object per record and line (the fields of `HeaderRecord`'s JSON form).
#[derive(Debug)]
pub struct JsonLines<W: Write> {
    out: W,
}

impl<W: Write> JsonLines<W> {
    pub fn new(out: W) -> JsonLines<W> {
        JsonLines { out }
    }
}

impl<W: Write> HeaderOut for JsonLines<W> {
    fn write(&mut self, r: &HeaderRecord) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, r)?;
        self.out.write_all(b"\n")
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// A pcapng file of the headers: each record as the Ethernet frame of
/// its headers ([`HeaderRecord::to_frame`]) with the packet's original
/// length on the wire ([`HeaderRecord::wire_len`]), one interface per
/// exporter interface.
#[derive(Debug)]
pub struct PcapngHeaders<W: Write> {
    out: PcapngWriter<W>,
    /// Record interface → file interface.
    interfaces: Vec<(u16, u32)>,
}

impl<W: Write> PcapngHeaders<W> {
    pub fn new(out: W) -> io::Result<PcapngHeaders<W>> {
        Ok(PcapngHeaders {
            out: PcapngWriter::new(out)?,
            interfaces: Vec::new(),
        })
    }
}

impl<W: Write> HeaderOut for PcapngHeaders<W> {
    fn write(&mut self, r: &HeaderRecord) -> io::Result<()> {
        let id = match self.interfaces.iter().find(|(i, _)| *i == r.interface) {
            Some((_, id)) => *id,
            None => {
                let name = format!("exporter interface {}", r.interface);
                let id = self.out.add_interface(LinkType::Ethernet, 65_535, Some(&name))?;
                self.interfaces.push((r.interface, id));
                id
            }
        };
        let frame = r.to_frame();
        // The frame's length on the wire as the exporter captured it (not
        // the rebuilt frame's 14 + IP length: the link layer may have been
        // another, or carried more); never less than the bytes written.
        let orig_len = r.wire_len.max(u32::try_from(frame.len()).unwrap_or(u32::MAX));
        self.out.write_packet(id, r.ts_ns, &frame, orig_len)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}
