//! The IPFIX message encoder (RFC 7011), without I/O.
//!
//! # Design
//!
//! Two templates describe every record: [`TEMPLATE_V4`] (id 256) for IPv4
//! flows and [`TEMPLATE_V6`] (id 257) for IPv6 flows. Both list the
//! elements of the one table [`ELEMENTS`], in its order, taking the address
//! elements of their family: the table is where a `FlowRecord` field meets
//! its information element, and `docs/records.md` mirrors it.
//!
//! An [`Encoder`] fills one pending message at a time: a record goes into
//! the open data set if it has the record's template, otherwise a new set
//! opens. When the next record would push the message past the maximum
//! size, [`Encoder::push`] hands the full message back and starts the next
//! one with that record; [`Encoder::finish`] hands back a partial one.
//! Template sets travel in messages of their own
//! ([`Encoder::template_message`]), so the transport decides when to send
//! them (once per TCP connection or file, periodically over UDP).
//!
//! # Invariants
//!
//! - A message never exceeds the configured maximum (checked at
//!   [`Encoder::new`]: the largest record fits an otherwise empty message).
//! - The header's sequence number is the number of data records in the
//!   messages finished before it, modulo 2^32 (RFC 7011 §3.1); template
//!   messages do not advance it.
//! - No padding: sets end at their last record (padding is optional,
//!   §3.3.1, and records here are not of a fixed length anyway because of
//!   the variable-length Community ID).
//! - Times go out twice: as `flowStart/EndNanoseconds`, exact, and as
//!   `flowStart/EndMilliseconds`, because nfdump 1.7 reads only the
//!   latter (without them it stores every flow at 1970-01-01; checked by
//!   `tests/nfcapd.rs`).
//! - Absent ports and VLAN are exported as 0 (the templates are fixed; a
//!   collector reads 0 as "none", as for ICMP flows in NetFlow).
//!
//! # Cost
//!
//! One `Vec` per message, reused; a record costs a few dozen byte copies
//! and one Community ID (a SHA-1 of 40 bytes).

use clarion_records::FlowRecord;

use crate::IpfixError;

/// IPFIX version number in the message header.
pub const VERSION: u16 = 10;
/// Set id of a template set.
pub const TEMPLATE_SET_ID: u16 = 2;
/// Template id of IPv4 flows.
pub const TEMPLATE_V4: u16 = 256;
/// Template id of IPv6 flows.
pub const TEMPLATE_V6: u16 = 257;
/// RFC 5612's private enterprise number for documentation: the Community
/// ID element is enterprise-specific under it, since IANA has none.
pub const PEN: u32 = 32473;
/// Element length meaning "variable length" (RFC 7011 §7).
pub const VARIABLE: u16 = 65535;
/// Bytes of the message header.
pub const HEADER_LEN: usize = 16;
/// Bytes of a set header.
pub const SET_HEADER_LEN: usize = 4;
/// Default maximum message size for UDP (below a 1500-byte MTU).
pub const DEFAULT_UDP_MESSAGE_SIZE: usize = 1400;
/// The largest message the 16-bit length field can describe.
pub const MAX_MESSAGE_SIZE: usize = 65535;
/// Seconds from the NTP epoch (1900-01-01) to the Unix epoch (1970-01-01).
pub const NTP_UNIX_OFFSET_S: u64 = 2_208_988_800;

/// Which templates carry an element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Both,
    V4,
    V6,
}

/// One information element of the templates and the record field it holds.
#[derive(Clone, Copy, Debug)]
pub struct Element {
    /// The IPFIX name (IANA registry, or ours under [`PEN`]).
    pub name: &'static str,
    pub id: u16,
    /// The private enterprise number of an enterprise-specific element.
    pub enterprise: Option<u32>,
    /// Length on the wire ([`VARIABLE`] for variable length).
    pub length: u16,
    /// The `FlowRecord` / JSON field it holds.
    pub field: &'static str,
    pub family: Family,
    /// Appends the element's value (with its length prefix if variable).
    write: fn(&FlowRecord, &mut Vec<u8>),
}

impl Element {
    fn in_family(&self, v6: bool) -> bool {
        match self.family {
            Family::Both => true,
            Family::V4 => !v6,
            Family::V6 => v6,
        }
    }
}

/// The elements of both templates, in template order: the one mapping of
/// record fields to IPFIX. Lengths below the IANA type's are reduced-size
/// encodings (RFC 7011 §6.2).
pub const ELEMENTS: &[Element] = &[
    Element {
        name: "sourceIPv4Address",
        id: 8,
        enterprise: None,
        length: 4,
        field: "src_ip",
        family: Family::V4,
        write: |r, b| b.extend_from_slice(&r.key.src_ip[..4]),
    },
    Element {
        name: "destinationIPv4Address",
        id: 12,
        enterprise: None,
        length: 4,
        field: "dst_ip",
        family: Family::V4,
        write: |r, b| b.extend_from_slice(&r.key.dst_ip[..4]),
    },
    Element {
        name: "sourceIPv6Address",
        id: 27,
        enterprise: None,
        length: 16,
        field: "src_ip",
        family: Family::V6,
        write: |r, b| b.extend_from_slice(&r.key.src_ip),
    },
    Element {
        name: "destinationIPv6Address",
        id: 28,
        enterprise: None,
        length: 16,
        field: "dst_ip",
        family: Family::V6,
        write: |r, b| b.extend_from_slice(&r.key.dst_ip),
    },
    Element {
        name: "sourceTransportPort",
        id: 7,
        enterprise: None,
        length: 2,
        field: "src_port",
        family: Family::Both,
        write: |r, b| b.extend_from_slice(&r.key.src_port.to_be_bytes()),
    },
    Element {
        name: "destinationTransportPort",
        id: 11,
        enterprise: None,
        length: 2,
        field: "dst_port",
        family: Family::Both,
        write: |r, b| b.extend_from_slice(&r.key.dst_port.to_be_bytes()),
    },
    Element {
        name: "protocolIdentifier",
        id: 4,
        enterprise: None,
        length: 1,
        field: "proto",
        family: Family::Both,
        write: |r, b| b.push(r.key.proto),
    },
    Element {
        name: "vlanId",
        id: 58,
        enterprise: None,
        length: 2,
        field: "vlan",
        family: Family::Both,
        write: |r, b| b.extend_from_slice(&r.vlan().unwrap_or(0).to_be_bytes()),
    },
    Element {
        name: "octetDeltaCount",
        id: 1,
        enterprise: None,
        length: 8,
        field: "bytes",
        family: Family::Both,
        write: |r, b| b.extend_from_slice(&r.bytes.to_be_bytes()),
    },
    Element {
        name: "packetDeltaCount",
        id: 2,
        enterprise: None,
        length: 8,
        field: "packets",
        family: Family::Both,
        write: |r, b| b.extend_from_slice(&r.packets.to_be_bytes()),
    },
    Element {
        name: "flowStartNanoseconds",
        id: 156,
        enterprise: None,
        length: 8,
        field: "first_ns",
        family: Family::Both,
        write: |r, b| b.extend_from_slice(&ntp_timestamp(r.first_ns).to_be_bytes()),
    },
    Element {
        name: "flowEndNanoseconds",
        id: 157,
        enterprise: None,
        length: 8,
        field: "last_ns",
        family: Family::Both,
        write: |r, b| b.extend_from_slice(&ntp_timestamp(r.last_ns).to_be_bytes()),
    },
    Element {
        name: "flowStartMilliseconds",
        id: 152,
        enterprise: None,
        length: 8,
        field: "first_ns",
        family: Family::Both,
        write: |r, b| b.extend_from_slice(&(r.first_ns / 1_000_000).to_be_bytes()),
    },
    Element {
        name: "flowEndMilliseconds",
        id: 153,
        enterprise: None,
        length: 8,
        field: "last_ns",
        family: Family::Both,
        write: |r, b| b.extend_from_slice(&(r.last_ns / 1_000_000).to_be_bytes()),
    },
    Element {
        name: "tcpControlBits",
        id: 6,
        enterprise: None,
        length: 2,
        field: "tcp_flags",
        family: Family::Both,
        write: |r, b| b.extend_from_slice(&u16::from(r.tcp_flags).to_be_bytes()),
    },
    Element {
        name: "minimumIpTotalLength",
        id: 25,
        enterprise: None,
        length: 4,
        field: "min_size",
        family: Family::Both,
        write: |r, b| b.extend_from_slice(&r.min_size.to_be_bytes()),
    },
    Element {
        name: "maximumIpTotalLength",
        id: 26,
        enterprise: None,
        length: 4,
        field: "max_size",
        family: Family::Both,
        write: |r, b| b.extend_from_slice(&r.max_size.to_be_bytes()),
    },
    Element {
        name: "flowEndReason",
        id: 136,
        enterprise: None,
        length: 1,
        field: "end_reason",
        family: Family::Both,
        write: |r, b| b.push(r.end_reason.ipfix_code()),
    },
    Element {
        name: "communityId",
        id: 1,
        enterprise: Some(PEN),
        length: VARIABLE,
        field: "community_id",
        family: Family::Both,
        write: |r, b| {
            let id = r.community_id();
            // "1:" and base64 of a SHA-1: always 30 bytes; the cap only
            // keeps the size bound of `max_record_len` true by construction.
            let len = id.len().min(COMMUNITY_ID_MAX);
            b.push(len as u8);
            b.extend_from_slice(&id.as_bytes()[..len]);
        },
    },
];

/// The template id of a record's family.
pub fn template_id(record: &FlowRecord) -> u16 {
    if record.key.is_ipv6() {
        TEMPLATE_V6
    } else {
        TEMPLATE_V4
    }
}

/// The elements of a template, in order.
pub fn template_elements(template: u16) -> impl Iterator<Item = &'static Element> {
    let v6 = template == TEMPLATE_V6;
    ELEMENTS.iter().filter(move |e| e.in_family(v6))
}

/// A time in nanoseconds since the Unix epoch as IPFIX `dateTimeNanoseconds`
/// (RFC 7011 §6.1.10): a 64-bit NTP timestamp, seconds since 1900-01-01 in
/// the high 32 bits and the fraction of a second in units of 2^-32 s in the
/// low 32 bits. The fraction is rounded to the nearest unit (a unit is
/// 0.23 ns, so every nanosecond value converts back exactly). Seconds wrap
/// modulo 2^32 (NTP era 1 starts in 2036-02-07), as RFC 5905's format
/// does; collectors place values with the top bit clear in era 1
/// (RFC 4330 §3), so times up to 2104 read back right.
pub fn ntp_timestamp(unix_ns: u64) -> u64 {
    let secs = unix_ns / 1_000_000_000 + NTP_UNIX_OFFSET_S;
    let ns = u128::from(unix_ns % 1_000_000_000);
    // < 2^32: 999_999_999 rounds to 4_294_967_292.
    let fraction = ((ns << 32) + 500_000_000) / 1_000_000_000;
    ((secs & 0xffff_ffff) << 32) | fraction as u64
}

/// What an encoder produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncoderConfig {
    /// The header's observation domain id.
    pub observation_domain: u32,
    /// The largest message in bytes (at most [`MAX_MESSAGE_SIZE`]).
    pub max_message_size: usize,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        EncoderConfig {
            observation_domain: 0,
            max_message_size: DEFAULT_UDP_MESSAGE_SIZE,
        }
    }
}

/// Builds IPFIX messages from records; see the module doc.
#[derive(Debug)]
pub struct Encoder {
    config: EncoderConfig,
    /// Data records in the messages finished so far (mod 2^32).
    sequence: u32,
    /// The pending message's sets, without the message header.
    body: Vec<u8>,
    /// Records in `body`.
    records: u32,
    /// The open data set: its template id and where its header starts in `body`.
    open_set: Option<(u16, usize)>,
    /// A record's encoding, reused.
    scratch: Vec<u8>,
}

/// The longest Community ID written (it is 30 bytes: "1:" and 28 of base64).
const COMMUNITY_ID_MAX: usize = 63;

/// The largest data record: every element of the larger template at its
/// longest (a Community ID of at most [`COMMUNITY_ID_MAX`] bytes plus its
/// length byte).
fn max_record_len() -> usize {
    [TEMPLATE_V4, TEMPLATE_V6]
        .into_iter()
        .map(|t| {
            template_elements(t)
                .map(|e| {
                    if e.length == VARIABLE {
                        1 + COMMUNITY_ID_MAX
                    } else {
                        usize::from(e.length)
                    }
                })
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0)
}

impl Encoder {
    /// An encoder; fails if the largest record could not fit a message.
    pub fn new(config: EncoderConfig) -> Result<Encoder, IpfixError> {
        let smallest = HEADER_LEN + SET_HEADER_LEN + max_record_len();
        let template_message = HEADER_LEN + template_set().len();
        let needed = smallest.max(template_message);
        if config.max_message_size < needed || config.max_message_size > MAX_MESSAGE_SIZE {
            return Err(IpfixError::MessageSize {
                size: config.max_message_size,
                min: needed,
                max: MAX_MESSAGE_SIZE,
            });
        }
        Ok(Encoder {
            config,
            sequence: 0,
            body: Vec::with_capacity(config.max_message_size),
            records: 0,
            open_set: None,
            scratch: Vec::with_capacity(256),
        })
    }

    pub fn config(&self) -> EncoderConfig {
        self.config
    }

    /// The sequence number the next finished message carries.
    pub fn sequence(&self) -> u32 {
        self.sequence
    }

    /// Records in the pending message.
    pub fn pending_records(&self) -> u32 {
        self.records
    }

    /// A message holding one template set with both templates. Its sequence
    /// number is the current one; it does not advance it.
    pub fn template_message(&self, export_time: u32) -> Vec<u8> {
        let set = template_set();
        let mut m = Vec::with_capacity(HEADER_LEN + set.len());
        self.header(&mut m, HEADER_LEN + set.len(), export_time);
        m.extend_from_slice(&set);
        m
    }

    /// Adds a record to the pending message. If it does not fit, the
    /// pending message is finished (with `export_time`, seconds since the
    /// Unix epoch) and returned, and the record starts the next one.
    pub fn push(&mut self, record: &FlowRecord, export_time: u32) -> Option<Vec<u8>> {
        self.scratch.clear();
        let template = template_id(record);
        for e in template_elements(template) {
            (e.write)(record, &mut self.scratch);
        }
        let same_set = matches!(self.open_set, Some((t, _)) if t == template);
        let extra = self.scratch.len() + if same_set { 0 } else { SET_HEADER_LEN };
        let mut full = None;
        if HEADER_LEN + self.body.len() + extra > self.config.max_message_size {
            full = self.finish(export_time);
        }
        if !matches!(self.open_set, Some((t, _)) if t == template) {
            self.close_set();
            self.open_set = Some((template, self.body.len()));
            self.body.extend_from_slice(&template.to_be_bytes());
            self.body.extend_from_slice(&[0, 0]); // length, set by close_set
        }
        self.body.extend_from_slice(&self.scratch);
        self.records += 1;
        full
    }

    /// The pending message, finished, if it holds any record.
    pub fn finish(&mut self, export_time: u32) -> Option<Vec<u8>> {
        if self.records == 0 {
            return None;
        }
        self.close_set();
        let len = HEADER_LEN + self.body.len();
        let mut m = Vec::with_capacity(len);
        self.header(&mut m, len, export_time);
        m.extend_from_slice(&self.body);
        self.sequence = self.sequence.wrapping_add(self.records);
        self.body.clear();
        self.records = 0;
        Some(m)
    }

    fn close_set(&mut self) {
        if let Some((_, start)) = self.open_set.take() {
            // Fits: the whole message is at most 65535 bytes.
            let len = (self.body.len() - start) as u16;
            self.body[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
        }
    }

    fn header(&self, m: &mut Vec<u8>, len: usize, export_time: u32) {
        m.extend_from_slice(&VERSION.to_be_bytes());
        m.extend_from_slice(&(len as u16).to_be_bytes());
        m.extend_from_slice(&export_time.to_be_bytes());
        m.extend_from_slice(&self.sequence.to_be_bytes());
        m.extend_from_slice(&self.config.observation_domain.to_be_bytes());
    }
}

/// The template set (set id 2) with both templates (RFC 7011 §3.4.1).
fn template_set() -> Vec<u8> {
    let mut s = Vec::with_capacity(256);
    s.extend_from_slice(&TEMPLATE_SET_ID.to_be_bytes());
    s.extend_from_slice(&[0, 0]);
    for t in [TEMPLATE_V4, TEMPLATE_V6] {
        let count = template_elements(t).count() as u16;
        s.extend_from_slice(&t.to_be_bytes());
        s.extend_from_slice(&count.to_be_bytes());
        for e in template_elements(t) {
            match e.enterprise {
                Some(pen) => {
                    s.extend_from_slice(&(e.id | 0x8000).to_be_bytes());
                    s.extend_from_slice(&e.length.to_be_bytes());
                    s.extend_from_slice(&pen.to_be_bytes());
                }
                None => {
                    s.extend_from_slice(&e.id.to_be_bytes());
                    s.extend_from_slice(&e.length.to_be_bytes());
                }
            }
        }
    }
    let len = s.len() as u16;
    s[2..4].copy_from_slice(&len.to_be_bytes());
    s
}

#[cfg(test)]
mod tests;
