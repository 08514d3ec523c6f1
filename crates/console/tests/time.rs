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

/// The charts' axes (console/src/chart.ts `niceTicks`): on value ranges
/// and on times (milliseconds since 1970, spans from 1 ms to days), the
/// ticks are the multiples of the step a reference picks from a list of
/// 1, 2 and 5 times powers of ten (the smallest at least the span over
/// the ticks wanted, or a smaller one while fewer than two ticks) inside
/// the range: none off the axis, evenly spaced, round, at least two.
#[test]
fn axis_ticks_are_the_round_multiples_inside_the_range() {
    let mut rng = Lcg(5);
    let mut cases: Vec<(f64, f64, u32)> = Vec::new();
    for i in 0..300 {
        let want = [4, 6][i % 2];
        if i % 3 == 0 {
            // A chart's values: 0 up to a maximum and 5% more.
            let hi = (1 + rng.next(10_000_000)) as f64 * 1.05;
            cases.push((0.0, hi, want));
        } else {
            // A chart's window ends, milliseconds since 1970.
            let t0 = (1_600_000_000_000 + rng.next(400_000_000_000)) as f64;
            let span = [1, 37, 760, 9_000, 86_400_000][rng.next(5) as usize] as f64;
            cases.push((t0, t0 + span * (1 + rng.next(9)) as f64 / 3.0, want));
        }
    }
    let input = serde_json::to_string(&cases).expect("JSON");
    let Some(out) = run_node("ticks.mjs", &input) else {
        return;
    };
    let seen: Vec<Vec<f64>> = serde_json::from_str(&out).expect("JSON");
    for ((lo, hi, want), ticks) in cases.iter().zip(&seen) {
        // The round steps, smallest first, from far below to far above the span.
        let steps: Vec<f64> = (-6..16)
            .flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e)))
            .collect();
        let inside = |step: f64| -> Vec<f64> {
            let first = (lo / step).ceil();
            let last = (hi / step + 1e-9).floor();
            (0..=((last - first) as i64))
                .map(|k| (first + k as f64) * step)
                .collect()
        };
        // The smallest at least span/want, or smaller ones while fewer than two ticks.
        let at = steps
            .iter()
            .position(|s| *s >= (hi - lo) / f64::from(*want))
            .expect("a step");
        let at = (0..=at)
            .rev()
            .find(|i| inside(steps[*i]).len() >= 2)
            .expect("two ticks");
        let step = steps[at];
        let expect = inside(step);
        assert_eq!(ticks.len(), expect.len(), "[{lo}, {hi}] by {step}: {ticks:?}");
        for (t, e) in ticks.iter().zip(&expect) {
            // Equal up to a millionth of the step, or a double's rounding
            // at this magnitude (a time in ms: 13 digits).
            let close = step * 1e-6 + e.abs() * 1e-14;
            assert!((t - e).abs() <= close, "[{lo}, {hi}]: {t} vs {e}");
            assert!(*t >= lo - close && *t <= hi + close, "{t} off [{lo}, {hi}]");
        }
        assert!(
            (2..=2 * usize::try_from(*want).unwrap_or(0)).contains(&ticks.len()),
            "{} ticks on [{lo}, {hi}] (want {want})",
            ticks.len()
        );
    }
}
