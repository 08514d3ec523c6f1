//! RFC 5424 syslog messages for reports, and RFC 6587 octet-counting
//! framing for TCP. Pure encoding; the sockets are in `transport.rs`.
//!
//! A message is
//! `<PRI>1 TIMESTAMP HOSTNAME clarion PROCID report [clarion@32473 ...] JSON`:
//! PRI is facility × 8 + 4 (warning); TIMESTAMP the window's end in RFC 3339
//! UTC with microseconds (RFC 5424 §6.2.3 allows at most six fractional
//! digits); HOSTNAME the report's host; the structured data names the
//! report (event, window, group, idempotency key) so a collector can filter
//! without parsing JSON; MSG is the `clarion.report/1` object. MSG carries
//! no BOM: it is then MSG-ANY (§6.4), which collectors keep byte for byte,
//! so the JSON stays parseable.
//!
//! Invariants: header fields hold only PRINTUSASCII (33..=126) and are
//! never empty (`-` is NILVALUE); PARAM-VALUEs escape `"`, `\` and `]`
//! (§6.3.3); nothing in a message is a line break except inside MSG, and
//! the compact JSON has none. Cost: one string of about the JSON's size.

use std::time::{Duration, UNIX_EPOCH};

use crate::notice::Notice;

/// Clarion's private enterprise number for SD-IDs (`clarion@32473`):
/// 32473 is IANA's number reserved for documentation (RFC 5612).
pub const SD_ID: &str = "clarion@32473";

/// Severity of an event without a rule: warning (4). A fired event is
/// something to look at, not an error of the monitor.
pub const SEVERITY_WARNING: u8 = 4;

/// A facility, by its RFC 5424 name (`local0`) or number (0..=23).
pub fn parse_facility(s: &str) -> Result<u8, String> {
    const NAMES: [&str; 24] = [
        "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv", "ftp",
        "ntp", "audit", "alert", "clock", "local0", "local1", "local2", "local3", "local4", "local5",
        "local6", "local7",
    ];
    if let Some(i) = NAMES.iter().position(|n| n.eq_ignore_ascii_case(s)) {
        return Ok(i as u8);
    }
    match s.parse::<u8>() {
        Ok(n) if n <= 23 => Ok(n),
        _ => Err(format!(
            "`{s}` is not a syslog facility; use local0..local7, daemon, user, ... or a number 0-23"
        )),
    }
}

/// A header field: PRINTUSASCII only (others become `_`), at most `max`
/// octets, `-` when empty.
fn header_field(s: &str, max: usize) -> String {
    let f: String = s
        .chars()
        .map(|c| if ('!'..='~').contains(&c) { c } else { '_' })
        .take(max)
        .collect();
    if f.is_empty() {
        "-".into()
    } else {
        f
    }
}

/// A PARAM-VALUE with `"`, `\` and `]` escaped by a backslash (§6.3.3).
pub fn escape_param_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    for c in s.chars() {
        if matches!(c, '"' | '\\' | ']') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The RFC 5424 message for a notice: `json` is its JSON text
/// (`clarion.report/1` or `clarion.alert/1`). Severity is the event's;
/// MSGID `report` (per window), `firing` or `resolved`.
pub fn message(notice: &Notice, json: &str, facility: u8, procid: u32) -> String {
    let report = &notice.report;
    let key = &notice.key;
    let pri = u16::from(facility.min(23)) * 8 + u16::from(notice.rule.severity.syslog_code());
    let msgid = notice.transition.as_ref().map_or("report", |t| t.state.name());
    let ts = humantime::format_rfc3339_micros(UNIX_EPOCH + Duration::from_nanos(report.window.end_ns));
    let mut sd = format!("[{SD_ID}");
    let mut param = |name: &str, value: &str| {
        sd.push_str(&format!(" {name}=\"{}\"", escape_param_value(value)));
    };
    param("event", &report.event);
    param("window_start", &clarion_report::rfc3339(report.window.start_ns));
    param("window_end", &clarion_report::rfc3339(report.window.end_ns));
    for (name, value) in report.group.fields() {
        param(name, value.as_deref().unwrap_or("null"));
    }
    if let Some(t) = &notice.transition {
        param("state", t.state.name());
        param("starts_at", &clarion_report::rfc3339(t.starts_at_ns));
        if let Some(end) = t.ends_at_ns {
            param("ends_at", &clarion_report::rfc3339(end));
        }
    }
    param("severity", notice.rule.severity.name());
    param("key", key);
    sd.push(']');
    format!(
        "<{pri}>1 {ts} {} clarion {procid} {msgid} {sd} {json}",
        header_field(&report.origin.host, 255)
    )
}

/// RFC 6587 octet counting: `LEN SP MSG`, for TCP.
pub fn octet_counted(msg: &str) -> Vec<u8> {
    let mut out = format!("{} ", msg.len()).into_bytes();
    out.extend_from_slice(msg.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facilities_by_name_and_number() {
        assert_eq!(parse_facility("local0"), Ok(16));
        assert_eq!(parse_facility("LOCAL7"), Ok(23));
        assert_eq!(parse_facility("daemon"), Ok(3));
        assert_eq!(parse_facility("5"), Ok(5));
        assert!(parse_facility("24").is_err());
        assert!(parse_facility("local8").is_err());
    }

    #[test]
    fn escaping_per_6_3_3() {
        assert_eq!(escape_param_value(r#"a"b\c]d[e"#), r#"a\"b\\c\]d[e"#);
        assert_eq!(escape_param_value("plain é"), "plain é");
    }

    #[test]
    fn header_fields_are_printable_and_never_empty() {
        assert_eq!(header_field("", 255), "-");
        assert_eq!(header_field("web 1\n", 255), "web_1_");
        assert_eq!(header_field("héllo", 255), "h_llo");
        assert_eq!(header_field(&"x".repeat(300), 255).len(), 255);
    }

    #[test]
    fn framing_counts_octets() {
        assert_eq!(octet_counted("<132>1 é"), b"9 <132>1 \xc3\xa9".to_vec());
    }
}
