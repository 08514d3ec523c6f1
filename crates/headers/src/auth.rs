//! Who may send headers: exporter names, and the HMAC-SHA256 tag that
//! proves a datagram came from a holder of the shared key.
//!
//! # Why a tag and not a source address
//!
//! The collector listens on UDP: anything that can reach the port can
//! send it a datagram with any source address. Before version 2 every
//! well-formed datagram was believed, so a stray or hostile sender could
//! mix its headers into the output and poison the loss accounting (one
//! forged sequence number made a collector report 2^51 lost datagrams).
//! A tag over the whole datagram, keyed by a secret the exporters and the
//! collector share, lets the collector refuse what no key holder wrote,
//! before it decodes or counts anything of it.
//!
//! # What it does not do
//!
//! The datagrams are not encrypted (headers are readable on the path),
//! and a key holder can still lie. Replays are caught only as far as
//! sequence numbers catch them: within a stream's window a replay is a
//! duplicate and is not written; a datagram of an earlier session
//! replayed starts a stream of its own (see `docs/security.md`).
//!
//! # Cost
//!
//! One HMAC-SHA256 over each datagram (about 1,400 bytes, some 100
//! headers): a few microseconds, tens of nanoseconds a header. The keyed
//! state is computed once and cloned per datagram.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::HeadersError;

/// Bytes of the tag at the end of an authenticated datagram.
pub const TAG_LEN: usize = 32;
/// The shortest key accepted: 128 bits.
pub const MIN_KEY_LEN: usize = 16;
/// The longest exporter name (a Linux host name's limit).
pub const MAX_NAME_LEN: usize = 64;

/// A key shared by exporters and a collector.
#[derive(Clone)]
pub struct Key {
    /// Keyed once; cloned for each datagram.
    mac: Hmac<Sha256>,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret.
        f.write_str("Key(..)")
    }
}

impl Key {
    /// A key of raw bytes, at least [`MIN_KEY_LEN`] of them.
    pub fn new(bytes: &[u8]) -> Result<Key, HeadersError> {
        if bytes.len() < MIN_KEY_LEN {
            return Err(HeadersError::Key(format!(
                "{} bytes; a key has at least {MIN_KEY_LEN}",
                bytes.len()
            )));
        }
        let mac = Hmac::<Sha256>::new_from_slice(bytes)
            .map_err(|e| HeadersError::Key(format!("not usable as an HMAC key: {e}")))?;
        Ok(Key { mac })
    }

    /// The key of a key file's text: the first line that is neither empty
    /// nor a `#` comment, in hex (as [`key_file_text`] writes it).
    pub fn parse(text: &str) -> Result<Key, HeadersError> {
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .ok_or_else(|| HeadersError::Key("no key line (hex digits)".into()))?;
        let bytes = from_hex(line)
            .ok_or_else(|| HeadersError::Key("the key line is not an even number of hex digits".into()))?;
        Key::new(&bytes)
    }

    /// The tag of `data`.
    pub fn tag(&self, data: &[u8]) -> [u8; TAG_LEN] {
        let mut m = self.mac.clone();
        m.update(data);
        m.finalize().into_bytes().into()
    }

    /// Whether `tag` is `data`'s (in constant time: a forger learns nothing
    /// from how long a refusal takes).
    pub fn verify(&self, data: &[u8], tag: &[u8]) -> bool {
        let mut m = self.mac.clone();
        m.update(data);
        m.verify_slice(tag).is_ok()
    }
}

/// A key file's text for `bytes` (write it with mode 0600).
pub fn key_file_text(bytes: &[u8]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "# Clarion header-stream key (HMAC-SHA256): give it to the exporters (--export-key) and the collector (--key) only\n{hex}\n"
    )
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|p| u8::from_str_radix(p, 16).ok()))
        .collect()
}

/// An exporter's name as datagrams carry it: 1 to [`MAX_NAME_LEN`] bytes of
/// `A-Z a-z 0-9 . - _ :` (a host name, or an id the operator chose). The
/// set is closed so that a name printed in a summary cannot carry terminal
/// control codes. Inline and `Copy`: a stream's identity costs no allocation.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExporterName {
    len: u8,
    bytes: [u8; MAX_NAME_LEN],
}

impl ExporterName {
    pub fn new(name: &str) -> Result<ExporterName, HeadersError> {
        Self::from_bytes(name.as_bytes()).ok_or_else(|| HeadersError::Name(name.escape_default().to_string()))
    }

    /// `name` made acceptable: other characters become `_`, cut to
    /// [`MAX_NAME_LEN`] bytes, `unnamed` if empty (for a machine's host
    /// name, which the exporter does not choose).
    pub fn sanitized(name: &str) -> ExporterName {
        let mut bytes = [0u8; MAX_NAME_LEN];
        let mut len = 0;
        for (slot, c) in bytes.iter_mut().zip(name.chars()) {
            *slot = if c.is_ascii() && allowed(c as u8) {
                c as u8
            } else {
                b'_'
            };
            len += 1;
        }
        if len == 0 {
            return Self::from_bytes(b"unnamed").unwrap_or(ExporterName {
                len: 1,
                bytes: [b'_'; MAX_NAME_LEN],
            });
        }
        ExporterName {
            len: len as u8,
            bytes,
        }
    }

    pub(crate) fn from_bytes(b: &[u8]) -> Option<ExporterName> {
        if b.is_empty() || b.len() > MAX_NAME_LEN || !b.iter().all(|&c| allowed(c)) {
            return None;
        }
        let mut bytes = [0u8; MAX_NAME_LEN];
        bytes[..b.len()].copy_from_slice(b);
        Some(ExporterName {
            len: b.len() as u8,
            bytes,
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII is ever stored.
        std::str::from_utf8(self.as_bytes()).unwrap_or("?")
    }
}

fn allowed(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_' | b':')
}

impl Default for ExporterName {
    fn default() -> Self {
        ExporterName::sanitized("unnamed")
    }
}

impl fmt::Display for ExporterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for ExporterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_from_their_file_text() {
        let bytes: Vec<u8> = (0..32).collect();
        let k = Key::parse(&key_file_text(&bytes)).unwrap();
        let direct = Key::new(&bytes).unwrap();
        assert_eq!(k.tag(b"abc"), direct.tag(b"abc"));
        assert!(k.verify(b"abc", &direct.tag(b"abc")));
        assert!(!k.verify(b"abd", &direct.tag(b"abc")));
        assert!(matches!(
            Key::parse("# only a comment\n"),
            Err(HeadersError::Key(_))
        ));
        assert!(matches!(Key::parse("abc\n"), Err(HeadersError::Key(_))));
        assert!(matches!(Key::parse("zz00\n"), Err(HeadersError::Key(_))));
        assert!(
            matches!(Key::parse("00112233\n"), Err(HeadersError::Key(_))),
            "too short"
        );
        assert_eq!(format!("{k:?}"), "Key(..)");
    }

    #[test]
    fn names_are_checked_or_sanitized() {
        assert_eq!(
            ExporterName::new("web-1.example:0").unwrap().as_str(),
            "web-1.example:0"
        );
        assert!(ExporterName::new("").is_err());
        assert!(ExporterName::new("a b").is_err());
        assert!(ExporterName::new("\u{1b}[2J").is_err());
        assert!(ExporterName::new(&"x".repeat(65)).is_err());
        assert_eq!(ExporterName::sanitized("a b\u{e9}").as_str(), "a_b_");
        assert_eq!(ExporterName::sanitized("").as_str(), "unnamed");
        assert_eq!(ExporterName::sanitized(&"y".repeat(80)).as_str().len(), 64);
    }
}
