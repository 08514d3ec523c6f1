//! The idempotency key: one stable name per fired report, so a receiver
//! that sees a report twice (at-least-once delivery retries after a lost
//! answer) can drop the copy.
//!
//! Design: SHA-256 over the parts that identify a report — schema, host,
//! event, window end and group — each length-prefixed so no choice of
//! names can make two different tuples hash the same bytes; the first 16
//! bytes in hex (32 characters). Values, completeness and the worker are
//! left out on purpose: they describe the report, they do not name it, and
//! a host makes at most one report per (event, window, group).
//!
//! Invariant: the key depends only on those parts and on this encoding,
//! never on the process, the platform or the build; it changes only with
//! the schema. Cost: one SHA-256 of about a hundred bytes per report.

use clarion_report::{Report, SCHEMA};
use sha2::{Digest, Sha256};

/// The report's idempotency key: 32 lowercase hex digits.
pub fn idempotency_key(report: &Report) -> String {
    let mut h = Sha256::new();
    let mut part = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    };
    part(SCHEMA.as_bytes());
    part(report.origin.host.as_bytes());
    part(report.event.as_bytes());
    part(&report.window.end_ns.to_be_bytes());
    for (name, value) in report.group.fields() {
        part(name.as_bytes());
        // `None` (a port-less packet's port) is distinct from any text.
        match value {
            Some(v) => part(format!("={v}").as_bytes()),
            None => part(b"null"),
        }
    }
    let digest = h.finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use clarion_report::{Completeness, GroupKey, Origin, Window};
    use proptest::prelude::*;

    use super::*;

    fn report(host: &str, event: &str, end_ns: u64, group: GroupKey) -> Report {
        Report {
            event: event.into(),
            window: Window {
                start_ns: end_ns.saturating_sub(10_000_000),
                end_ns,
            },
            group,
            values: vec![("sum(volume)".into(), 1.0)].into(),
            origin: Origin {
                host: host.into(),
                worker: 0,
            },
            completeness: Completeness::default(),
            capture: None,
            missing_hosts: Box::default(),
        }
    }

    fn group(src: Option<u32>, port: Option<Option<u16>>) -> GroupKey {
        GroupKey {
            src_ip: src.map(|a| (IpAddr::from(a.to_be_bytes()), 32)),
            dst_port: port,
            ..GroupKey::default()
        }
    }

    fn arb_group() -> impl Strategy<Value = GroupKey> {
        (
            proptest::option::of(any::<u32>()),
            proptest::option::of(proptest::option::of(any::<u16>())),
        )
            .prop_map(|(s, p)| group(s, p))
    }

    #[test]
    fn is_32_hex_digits() {
        let k = idempotency_key(&report("demo", "e", 10, GroupKey::default()));
        assert_eq!(k.len(), 32);
        assert!(k
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    }

    proptest! {
        // The reference: two reports have the same key exactly when their
        // (host, event, window end, group) tuples are equal.
        #[test]
        fn same_key_iff_same_identity(
            a in ("[a-c]{0,2}", "[a-c]{1,2}", 0u64..3, arb_group()),
            b in ("[a-c]{0,2}", "[a-c]{1,2}", 0u64..3, arb_group()),
        ) {
            let ka = idempotency_key(&report(&a.0, &a.1, a.2, a.3));
            let kb = idempotency_key(&report(&b.0, &b.1, b.2, b.3));
            prop_assert_eq!(ka == kb, a == b);
        }

        #[test]
        fn ignores_what_does_not_name_the_report(v in any::<f64>(), worker in any::<u32>(), packets in any::<u64>()) {
            let a = report("demo", "e", 20_000_000, group(Some(7), Some(None)));
            let mut b = a.clone();
            b.values = vec![("max(size)".into(), v)].into();
            b.origin.worker = worker;
            b.completeness.packets = packets;
            prop_assert_eq!(idempotency_key(&a), idempotency_key(&b));
        }
    }

    #[test]
    fn separators_cannot_collide() {
        // Host "ab" + event "c" against host "a" + event "bc".
        let a = report("ab", "c", 1, GroupKey::default());
        let b = report("a", "bc", 1, GroupKey::default());
        assert_ne!(idempotency_key(&a), idempotency_key(&b));
        // A port-less group against no port field at all.
        let c = report("h", "e", 1, group(None, Some(None)));
        let d = report("h", "e", 1, group(None, None));
        assert_ne!(idempotency_key(&c), idempotency_key(&d));
    }
}
