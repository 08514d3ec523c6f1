//! Test helpers shared by the unit tests: hand-built pcapng blocks.

use crate::decode::Endian;

pub(crate) const SHB_TYPE: u32 = 0x0a0d_0d0a;
pub(crate) const IDB_TYPE: u32 = 1;
pub(crate) const EPB_TYPE: u32 = 6;
const IF_TSRESOL: u16 = 9;
const OPT_END: u16 = 0;

/// Builds blocks in one byte order.
pub(crate) struct Ng(pub Endian);

impl Ng {
    pub fn u16(&self, v: u16) -> [u8; 2] {
        match self.0 {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        }
    }

    pub fn u32(&self, v: u32) -> [u8; 4] {
        match self.0 {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        }
    }

    pub fn block(&self, block_type: u32, body: &[u8]) -> Vec<u8> {
        let len = 12 + body.len().next_multiple_of(4);
        let mut b = self.u32(block_type).to_vec();
        b.extend_from_slice(&self.u32(len as u32));
        b.extend_from_slice(body);
        b.resize(len - 4, 0);
        b.extend_from_slice(&self.u32(len as u32));
        b
    }

    pub fn shb(&self) -> Vec<u8> {
        let mut body = self.u32(0x1a2b_3c4d).to_vec();
        body.extend_from_slice(&self.u16(1));
        body.extend_from_slice(&self.u16(0));
        body.extend_from_slice(&[0xff; 8]);
        self.block(SHB_TYPE, &body)
    }

    pub fn option(&self, code: u16, value: &[u8]) -> Vec<u8> {
        let mut o = self.u16(code).to_vec();
        o.extend_from_slice(&self.u16(value.len() as u16));
        o.extend_from_slice(value);
        o.resize(4 + value.len().next_multiple_of(4), 0);
        o
    }

    pub fn idb(&self, dlt: u16, tsresol: Option<u8>) -> Vec<u8> {
        let mut body = self.u16(dlt).to_vec();
        body.extend_from_slice(&[0, 0]);
        body.extend_from_slice(&self.u32(0));
        if let Some(r) = tsresol {
            body.extend_from_slice(&self.option(IF_TSRESOL, &[r]));
            body.extend_from_slice(&self.option(OPT_END, &[]));
        }
        self.block(IDB_TYPE, &body)
    }

    pub fn epb(&self, iface: u32, ts: u64, data: &[u8], orig: u32) -> Vec<u8> {
        let mut body = self.u32(iface).to_vec();
        body.extend_from_slice(&self.u32((ts >> 32) as u32));
        body.extend_from_slice(&self.u32(ts as u32));
        body.extend_from_slice(&self.u32(data.len() as u32));
        body.extend_from_slice(&self.u32(orig));
        body.extend_from_slice(data);
        self.block(EPB_TYPE, &body)
    }
}
