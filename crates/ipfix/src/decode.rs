//! A plain IPFIX decoder: the reference the encoder's tests check against.
//!
//! # Design
//!
//! Written apart from the encoder on purpose: it shares nothing with it
//! but the information element numbers, which it spells out again here,
//! and it reads whatever templates a message defines (any order of
//! elements, any reduced-size length, unknown elements skipped), as a
//! collector would. Messages are decoded one at a time
//! ([`Decoder::message`]) or as a stream laid end to end
//! ([`Decoder::stream`]: an RFC 5655 file or a TCP byte stream).
//!
//! # Invariants
//!
//! - Every length is checked before it is read: malformed input is an
//!   [`IpfixError::Malformed`], never a panic.
//! - Bytes at the end of a data set too short for one more record are
//!   padding (RFC 7011 §3.3.1) and must be zero.
//!
//! # Cost
//!
//! Not a hot path: one `HashMap` lookup per set and one small `Vec` per
//! record.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use clarion_records::{EndReason, FlowRecord};
use clarion_wire::FlowKey;

use crate::IpfixError;

/// One field specifier of a template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub id: u16,
    pub enterprise: Option<u32>,
    /// 65535: variable length.
    pub length: u16,
}

/// A decoded data record: the flow record and the Community ID it carried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    pub record: FlowRecord,
    pub community_id: Option<String>,
    /// The template it was decoded with.
    pub template: u16,
    /// `flowStartMilliseconds` and `flowEndMilliseconds`, when present.
    pub first_ms: Option<u64>,
    pub last_ms: Option<u64>,
}

/// One decoded message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub length: u16,
    pub export_time: u32,
    pub sequence: u32,
    pub observation_domain: u32,
    /// Templates the message defined (ids).
    pub templates: Vec<u16>,
    pub records: Vec<Decoded>,
}

/// Decodes messages, remembering the templates they defined (per
/// observation domain).
#[derive(Debug, Default)]
pub struct Decoder {
    templates: HashMap<(u32, u16), Vec<Field>>,
}

fn malformed(what: impl Into<String>) -> IpfixError {
    IpfixError::Malformed(what.into())
}

/// A cursor over a byte slice whose every read is checked.
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], IpfixError> {
        if self.data.len() - self.at < n {
            return Err(malformed(format!(
                "{what}: needs {n} bytes, {} left",
                self.data.len() - self.at
            )));
        }
        let s = &self.data[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn u8(&mut self, what: &str) -> Result<u8, IpfixError> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &str) -> Result<u16, IpfixError> {
        let b = self.take(2, what)?;
        Ok(u16::from(b[0]) << 8 | u16::from(b[1]))
    }

    fn u32(&mut self, what: &str) -> Result<u32, IpfixError> {
        let hi = self.u16(what)?;
        let lo = self.u16(what)?;
        Ok(u32::from(hi) << 16 | u32::from(lo))
    }

    fn left(&self) -> usize {
        self.data.len() - self.at
    }
}

/// An unsigned number of 1 to 8 big-endian bytes.
fn number(b: &[u8]) -> Result<u64, IpfixError> {
    if b.is_empty() || b.len() > 8 {
        return Err(malformed(format!("a number of {} bytes", b.len())));
    }
    Ok(b.iter().fold(0u64, |acc, &x| acc << 8 | u64::from(x)))
}

/// `dateTimeNanoseconds` (NTP: seconds since 1900, 2^-32 s fraction) to
/// nanoseconds since 1970, the fraction rounded to the nearest nanosecond.
fn from_ntp(v: u64) -> Result<u64, IpfixError> {
    let mut secs = v >> 32;
    // RFC 4330 §3: seconds with the top bit clear are in era 1 (from
    // 2036-02-07), so one 32-bit field spans 1968 to 2104.
    if secs < 1 << 31 {
        secs += 1 << 32;
    }
    let frac = u128::from(v & 0xffff_ffff);
    let secs_1970 = secs
        .checked_sub(2_208_988_800)
        .ok_or_else(|| malformed("an NTP time before 1970"))?;
    let ns = (frac * 1_000_000_000 + (1u128 << 31)) >> 32;
    Ok(secs_1970 * 1_000_000_000 + ns as u64)
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Decodes messages laid end to end (a file or a TCP stream).
    pub fn stream(&mut self, mut data: &[u8]) -> Result<Vec<Message>, IpfixError> {
        let mut out = Vec::new();
        while !data.is_empty() {
            if data.len() < 4 {
                return Err(malformed("a truncated message header at the end"));
            }
            let len = usize::from(u16::from_be_bytes([data[2], data[3]]));
            if len < 16 || len > data.len() {
                return Err(malformed(format!(
                    "a message of length {len} with {} bytes left",
                    data.len()
                )));
            }
            out.push(self.message(&data[..len])?);
            data = &data[len..];
        }
        Ok(out)
    }

    /// Decodes one message (exactly `data`).
    pub fn message(&mut self, data: &[u8]) -> Result<Message, IpfixError> {
        let mut b = Bytes { data, at: 0 };
        let version = b.u16("header")?;
        if version != 10 {
            return Err(malformed(format!("version {version}, not 10")));
        }
        let length = b.u16("header")?;
        if usize::from(length) != data.len() {
            return Err(malformed(format!(
                "header length {length} but {} bytes",
                data.len()
            )));
        }
        let mut m = Message {
            length,
            export_time: b.u32("header")?,
            sequence: b.u32("header")?,
            observation_domain: b.u32("header")?,
            templates: Vec::new(),
            records: Vec::new(),
        };
        while b.left() > 0 {
            let set_id = b.u16("set header")?;
            let set_len = usize::from(b.u16("set header")?);
            if set_len < 4 {
                return Err(malformed(format!("set length {set_len}")));
            }
            let body = b.take(set_len - 4, "set")?;
            match set_id {
                2 => self.template_set(m.observation_domain, body, &mut m.templates)?,
                3 => {} // options templates: none are sent; skipped
                256.. => {
                    let fields = self
                        .templates
                        .get(&(m.observation_domain, set_id))
                        .ok_or_else(|| malformed(format!("data set {set_id} before its template")))?;
                    data_set(set_id, fields, body, &mut m.records)?;
                }
                _ => return Err(malformed(format!("reserved set id {set_id}"))),
            }
        }
        Ok(m)
    }

    fn template_set(&mut self, domain: u32, body: &[u8], ids: &mut Vec<u16>) -> Result<(), IpfixError> {
        let mut b = Bytes { data: body, at: 0 };
        // A template record is at least 4 bytes; fewer are padding.
        while b.left() >= 4 {
            let id = b.u16("template")?;
            let count = b.u16("template")?;
            if id < 256 {
                return Err(malformed(format!("template id {id}")));
            }
            let mut fields = Vec::with_capacity(usize::from(count));
            for _ in 0..count {
                let raw = b.u16("field specifier")?;
                let length = b.u16("field specifier")?;
                let enterprise = if raw & 0x8000 != 0 {
                    Some(b.u32("enterprise number")?)
                } else {
                    None
                };
                fields.push(Field {
                    id: raw & 0x7fff,
                    enterprise,
                    length,
                });
            }
            self.templates.insert((domain, id), fields);
            ids.push(id);
        }
        Ok(())
    }
}

fn data_set(template: u16, fields: &[Field], body: &[u8], out: &mut Vec<Decoded>) -> Result<(), IpfixError> {
    // The shortest record: fixed lengths, and one length byte per variable field.
    let min: usize = fields
        .iter()
        .map(|f| {
            if f.length == 65535 {
                1
            } else {
                usize::from(f.length)
            }
        })
        .sum();
    if min == 0 {
        return Err(malformed(format!("template {template} has an empty record")));
    }
    let mut b = Bytes { data: body, at: 0 };
    while b.left() >= min {
        out.push(record(template, fields, &mut b)?);
    }
    if b.data[b.at..].iter().any(|&x| x != 0) {
        return Err(malformed(format!(
            "non-zero padding after a record of template {template}"
        )));
    }
    Ok(())
}

fn record(template: u16, fields: &[Field], b: &mut Bytes) -> Result<Decoded, IpfixError> {
    let mut src: Option<IpAddr> = None;
    let mut dst: Option<IpAddr> = None;
    let (mut sport, mut dport, mut proto, mut vlan) = (0u16, 0u16, 0u8, 0u16);
    let mut r = FlowRecord::of_packet(FlowKey::default(), 0, 0, 0);
    r.packets = 0;
    let mut start_ns = None;
    let mut end_ns = None;
    let mut start_ms = None;
    let mut end_ms = None;
    let mut community_id = None;
    for f in fields {
        let len = if f.length == 65535 {
            let short = b.u8("variable length")?;
            if short == 255 {
                usize::from(b.u16("variable length")?)
            } else {
                usize::from(short)
            }
        } else {
            usize::from(f.length)
        };
        let v = b.take(len, "field")?;
        match (f.enterprise, f.id) {
            (None, 8) | (None, 12) => {
                let a: [u8; 4] = v
                    .try_into()
                    .map_err(|_| malformed("an IPv4 address not 4 bytes"))?;
                let a = Some(IpAddr::V4(Ipv4Addr::from(a)));
                if f.id == 8 {
                    src = a;
                } else {
                    dst = a;
                }
            }
            (None, 27) | (None, 28) => {
                let a: [u8; 16] = v
                    .try_into()
                    .map_err(|_| malformed("an IPv6 address not 16 bytes"))?;
                let a = Some(IpAddr::V6(Ipv6Addr::from(a)));
                if f.id == 27 {
                    src = a;
                } else {
                    dst = a;
                }
            }
            (None, 7) => sport = number(v)? as u16,
            (None, 11) => dport = number(v)? as u16,
            (None, 4) => proto = number(v)? as u8,
            (None, 58) => vlan = number(v)? as u16,
            (None, 1) => r.bytes = number(v)?,
            (None, 2) => r.packets = number(v)?,
            (None, 156) => start_ns = Some(from_ntp(number(v)?)?),
            (None, 157) => end_ns = Some(from_ntp(number(v)?)?),
            (None, 152) => start_ms = Some(number(v)?),
            (None, 153) => end_ms = Some(number(v)?),
            (None, 6) => r.tcp_flags = number(v)? as u8,
            (None, 25) => r.min_size = number(v)? as u32,
            (None, 26) => r.max_size = number(v)? as u32,
            (None, 136) => {
                r.end_reason = match number(v)? {
                    1 => EndReason::Idle,
                    2 => EndReason::Active,
                    3 => EndReason::End,
                    4 => EndReason::Flush,
                    c => return Err(malformed(format!("flowEndReason {c}"))),
                }
            }
            (Some(32473), 1) => {
                let s = std::str::from_utf8(v).map_err(|_| malformed("a Community ID not UTF-8"))?;
                community_id = Some(s.to_string());
            }
            _ => {} // an element this decoder does not know: skipped
        }
    }
    let (Some(src), Some(dst)) = (src, dst) else {
        return Err(malformed(format!(
            "a record of template {template} without addresses"
        )));
    };
    // Ports and VLAN 0 mean "none" (the encoder writes absent ones as 0).
    let ports = (sport != 0 || dport != 0).then_some((sport, dport));
    r.key = FlowKey::new(src, dst, proto, ports, (vlan != 0).then_some(vlan));
    // Nanoseconds when present, else milliseconds.
    let ms_to_ns = |ms: Option<u64>| -> Result<Option<u64>, IpfixError> {
        ms.map(|ms| {
            ms.checked_mul(1_000_000)
                .ok_or_else(|| malformed("milliseconds past 2554"))
        })
        .transpose()
    };
    r.first_ns = start_ns.or(ms_to_ns(start_ms)?).unwrap_or(0);
    r.last_ns = end_ns.or(ms_to_ns(end_ms)?).unwrap_or(0);
    Ok(Decoded {
        record: r,
        community_id,
        template,
        first_ms: start_ms,
        last_ms: end_ms,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::encode::{Encoder, EncoderConfig};

    fn a_stream() -> Vec<u8> {
        let key = FlowKey::new(
            "10.0.0.1".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
            6,
            Some((1, 2)),
            Some(3),
        );
        let mut e = Encoder::new(EncoderConfig::default()).unwrap();
        let mut s = e.template_message(1);
        for i in 0..5 {
            s.extend(
                e.push(
                    &FlowRecord::of_packet(key, 1_700_000_000_000_000_000 + i, 60, 2),
                    1,
                )
                .unwrap_or_default(),
            );
        }
        s.extend(e.finish(1).unwrap());
        s
    }

    #[test]
    fn data_before_its_template_and_bad_versions_are_malformed() {
        let s = a_stream();
        let templates_len = usize::from(u16::from_be_bytes([s[2], s[3]]));
        let e = Decoder::new().message(&s[templates_len..]).unwrap_err();
        assert!(e.to_string().contains("before its template"), "{e}");
        let mut v9 = s.clone();
        v9[1] = 9;
        assert!(Decoder::new().stream(&v9).is_err());
    }

    #[test]
    fn padding_after_the_last_record_is_skipped() {
        let s = a_stream();
        let templates_len = usize::from(u16::from_be_bytes([s[2], s[3]]));
        let mut d = Decoder::new();
        d.message(&s[..templates_len]).unwrap();
        let mut data = s[templates_len..].to_vec();
        // Three zero bytes of padding in the (only) data set and the message.
        data.extend_from_slice(&[0, 0, 0]);
        let set_len = u16::from_be_bytes([data[18], data[19]]) + 3;
        data[18..20].copy_from_slice(&set_len.to_be_bytes());
        let len = data.len() as u16;
        data[2..4].copy_from_slice(&len.to_be_bytes());
        assert_eq!(d.message(&data).unwrap().records.len(), 5);
        // Non-zero "padding" is not padding.
        let last = data.len() - 1;
        data[last] = 1;
        assert!(d.message(&data).is_err());
    }

    proptest! {
        /// Truncated or corrupted input is an error, never a panic.
        #[test]
        fn corrupt_input_never_panics(cut in 0usize..2000, flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..8)) {
            let mut s = a_stream();
            for (at, x) in flips {
                let n = s.len();
                s[at % n] ^= x;
            }
            s.truncate(cut.min(s.len()));
            let _ = Decoder::new().stream(&s);
        }

        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
            let _ = Decoder::new().stream(&bytes);
            let _ = Decoder::new().message(&bytes);
        }
    }
}
