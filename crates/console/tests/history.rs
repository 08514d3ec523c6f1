//! The history panel's filter (console/src/history.ts) run in Node: times
//! typed as the page shows them (`2026-12-07 13:16:48.700 UTC`) or as the
//! API writes them (RFC 3339, clarion-report's) become the exact
//! nanoseconds of `/v1/reports/history`'s `from` and `to`; the event and
//! the page's cursor go as they are; a time that is not one, or `to` not
//! after `from`, is refused naming the field, and nothing is asked.

mod common;

use std::collections::BTreeMap;

use common::{run_node, Lcg};
use serde_json::{json, Value};

fn query(q: &str) -> BTreeMap<String, String> {
    q.split('&')
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("k=v");
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// The page's way of showing `ns`: to the millisecond, ` UTC`.
fn shown(ns: u64) -> String {
    let millis =
        humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns))
            .to_string();
    format!("{} UTC", millis.replace('T', " ").trim_end_matches('Z'))
}

#[test]
fn typed_times_become_exact_nanoseconds_and_bad_ones_are_refused() {
    let mut rng = Lcg(71);
    let mut cases = Vec::new();
    let mut want = Vec::new();
    for i in 0..300u64 {
        // From 2001 to 2100, with nanoseconds.
        let from = (978_307_200 + rng.next(3_155_760_000)) * 1_000_000_000 + rng.next(1_000_000_000);
        let to = from + 1 + rng.next(86_400_000_000_000);
        // Half as the API writes them (exact), half as the page shows them (to the ms).
        let (f, t, from_ns, to_ns) = if i % 2 == 0 {
            (
                clarion_report::rfc3339(from),
                clarion_report::rfc3339(to),
                from,
                to,
            )
        } else {
            let (a, b) = (from / 1_000_000 * 1_000_000, to / 1_000_000 * 1_000_000);
            (shown(from), shown(to), a, b)
        };
        let event = if i % 3 == 0 {
            String::new()
        } else {
            format!("event_{i}")
        };
        let at = match i % 4 {
            0 => json!({}),
            1 => json!({"before": i * 7}),
            _ => json!({"after": i}),
        };
        cases.push(json!({"filter": {"event": event, "from": f, "to": t}, "at": at, "limit": 25}));
        let mut q = BTreeMap::new();
        q.insert("limit".to_string(), "25".to_string());
        if !event.is_empty() {
            q.insert("event".into(), event.clone());
        }
        if to_ns > from_ns {
            q.insert("from".into(), from_ns.to_string());
            q.insert("to".into(), to_ns.to_string());
            if let Some(b) = at["before"].as_u64() {
                q.insert("before".into(), b.to_string());
            }
            if let Some(a) = at["after"].as_u64() {
                q.insert("after".into(), a.to_string());
            }
            want.push(Ok(q));
        } else {
            // Cut to the millisecond, both fell in one.
            want.push(Err("to must be after from".to_string()));
        }
    }
    // Empty fields filter nothing; minutes alone; `T` and `Z`; mistakes.
    let more = [
        (json!({"event": " ", "from": "", "to": ""}), Ok(vec![])),
        (
            json!({"event": "dns", "from": "2026-12-07 13:16", "to": "2026-12-07T13:17:00Z"}),
            Ok(vec![
                ("event", "dns".to_string()),
                ("from", "1796649360000000000".into()),
                ("to", "1796649420000000000".into()),
            ]),
        ),
        (
            json!({"event": "", "from": "yesterday", "to": ""}),
            Err("from: `yesterday`"),
        ),
        (
            json!({"event": "", "from": "", "to": "2026-13-07 10:00"}),
            Err("to: "),
        ),
        (
            json!({"event": "", "from": "2026-12-07 13:16:48+01:00", "to": ""}),
            Err("from: "),
        ),
        (
            json!({"event": "", "from": "2026-12-07 13:17", "to": "2026-12-07 13:16"}),
            Err("to must be after from"),
        ),
    ];
    for (filter, w) in &more {
        cases.push(json!({"filter": filter, "at": {}, "limit": 25}));
        want.push(match w {
            Ok(pairs) => {
                let mut q: BTreeMap<String, String> =
                    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
                q.insert("limit".into(), "25".into());
                Ok(q)
            }
            Err(e) => Err(e.to_string()),
        });
    }
    let Some(out) = run_node("history.mjs", &Value::Array(cases.clone()).to_string()) else {
        return;
    };
    let seen: Vec<Value> = serde_json::from_str(&out).expect("JSON");
    assert_eq!(seen.len(), want.len());
    for ((c, s), w) in cases.iter().zip(&seen).zip(&want) {
        match w {
            Ok(q) => assert_eq!(
                &query(s["query"].as_str().unwrap_or_else(|| panic!("{c}: {s}"))),
                q,
                "{c}"
            ),
            Err(e) => {
                let got = s["error"].as_str().unwrap_or_else(|| panic!("{c}: {s}"));
                assert!(got.starts_with(e.as_str()), "{c}: {got}");
            }
        }
    }
}
