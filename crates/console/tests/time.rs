//! The page's times (console/src/time.ts) run in Node on times as
//! clarion-report writes them: the nanoseconds read back exactly (past
//! 2^53, where a JS number cannot hold them), shown to the millisecond as
//! humantime cuts them, and the `/v1/flows` query of a firing carrying
//! the window's exact nanoseconds (console/src/flows.ts).

mod common;

use common::{run_node, Lcg};
use serde_json::Value;

#[test]
fn times_read_back_exactly_and_show_to_the_millisecond() {
    let mut rng = Lcg(37);
    // From 1970 to 2200, most with nanoseconds, some on whole seconds and milliseconds.
    let mut ns: Vec<u64> = (0..400)
        .map(|i| {
            let t = rng.next(7_258_118_400) * 1_000_000_000 + rng.next(1_000_000_000);
            match i % 4 {
                0 => t / 1_000_000_000 * 1_000_000_000,
                1 => t / 1_000_000 * 1_000_000,
                _ => t,
            }
        })
        .collect();
    ns.extend([0, 1, 999_999_999, 1_796_649_408_700_000_001, (1 << 53) + 1]);
    let texts: Vec<String> = ns.iter().map(|&n| clarion_report::rfc3339(n)).collect();
    let Some(out) = run_node("time.mjs", &serde_json::to_string(&texts).expect("JSON")) else {
        return;
    };
    let seen: Vec<Value> = serde_json::from_str(&out).expect("JSON");
    assert_eq!(seen.len(), ns.len());
    for (i, ((n, text), s)) in ns.iter().zip(&texts).zip(&seen).enumerate() {
        assert_eq!(s["ns"], n.to_string(), "{text}");
        let millis =
            humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_nanos(*n))
                .to_string();
        // 2026-12-07T13:16:48.700Z -> 2026-12-07 13:16:48.700 UTC
        let human = format!("{} UTC", millis.replace('T', " ").trim_end_matches('Z'));
        assert_eq!(s["human"], human, "{text}");
        assert_eq!(s["clock"], human[11..23], "{text}");
        assert_eq!(s["title"], format!("{text} ({n} ns since 1970)"));
        let path = s["path"].as_str().expect("a path");
        let query: Vec<(String, String)> = path
            .strip_prefix("/v1/flows?")
            .expect("the route")
            .split('&')
            .map(|kv| {
                let (k, v) = kv.split_once('=').expect("k=v");
                let v = v.replace('+', " ");
                let v = percent_decode(&v);
                (k.to_string(), v)
            })
            .collect();
        let from = ns[i.saturating_sub(1)];
        let want = [
            ("event", "e".to_string()),
            ("group", r#"{"dst_port":80}"#.to_string()),
            ("from", from.to_string()),
            ("to", n.to_string()),
            ("top", "7".to_string()),
            ("by", "packets".to_string()),
        ];
        let want: Vec<(String, String)> = want.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        assert_eq!(query, want, "{path}");
    }
}

/// `%XX` escapes undone (the query's values are ASCII here).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).expect("ASCII");
            out.push(u8::from_str_radix(hex, 16).expect("hex"));
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("UTF-8")
}
