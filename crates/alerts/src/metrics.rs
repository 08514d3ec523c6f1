//! Alert delivery as Prometheus series: per target kind, reports accepted,
//! delivered, retried and dead-lettered (counters), and those still
//! pending (a gauge), in the text exposition format 0.0.4.
//!
//! Design: pure (no I/O, no clock): the caller gives `(target, Stats)`
//! pairs read from its sinks and appends the text to its page. The label
//! set is bounded by the caller's target kinds ("webhook", "syslog"),
//! never a URL: a URL would multiply series and could leak a token kept
//! in its path. Several sinks of one kind (a process that made a new sink)
//! are summed, so each family has one sample per kind and counters never
//! go back while the process lives.
//!
//! Invariant: `accepted = delivered + dead_lettered + queue_depth` up to
//! the reports that moved between the reads of one scrape (the outcomes
//! are read before `accepted`, so the depth is never understated and
//! never negative). Cost: a few lines per target and scrape.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::Stats;

/// The families, in the order they are written: name, type, help, value.
type Family = (&'static str, &'static str, &'static str, fn(&Stats) -> u64);

const FAMILIES: [Family; 5] = [
    (
        "clarion_alerts_accepted_total",
        "counter",
        "Reports given to the alert target for delivery.",
        |s| s.accepted,
    ),
    (
        "clarion_alerts_delivered_total",
        "counter",
        "Reports the alert target acknowledged (webhook: a 2xx answer; syslog: sent).",
        |s| s.delivered,
    ),
    (
        "clarion_alerts_retries_total",
        "counter",
        "Delivery attempts after a report's first one.",
        |s| s.retries,
    ),
    (
        "clarion_alerts_dead_lettered_total",
        "counter",
        "Reports written to the dead-letter file instead of delivered.",
        |s| s.dead_lettered,
    ),
    (
        "clarion_alerts_queue_depth",
        "gauge",
        "Reports accepted and not yet delivered or dead-lettered (queued or being attempted).",
        Stats::pending,
    ),
];

/// Appends the alert families for `targets` (a kind and its counts; kinds
/// repeated are summed) to `out`. Nothing when `targets` is empty, so a
/// process without alerts shows no alert series.
pub fn render_prometheus<'a>(out: &mut String, targets: impl IntoIterator<Item = (&'a str, Stats)>) {
    let mut by_kind: BTreeMap<&str, Stats> = BTreeMap::new();
    for (kind, s) in targets {
        let t = by_kind.entry(kind).or_default();
        t.accepted += s.accepted;
        t.delivered += s.delivered;
        t.dead_lettered += s.dead_lettered;
        t.retries += s.retries;
    }
    if by_kind.is_empty() {
        return;
    }
    for (name, kind, help, value) in FAMILIES {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (target, s) in &by_kind {
            let _ = writeln!(out, "{name}{{target=\"{}\"}} {}", escape(target), value(s));
        }
    }
}

/// A label value as the exposition format wants it: `\`, `"` and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    /// An independent reading of the page: per (family, target), the value;
    /// and per family its TYPE line. Panics on a line it does not know.
    fn read(page: &str) -> (HashMap<(String, String), u64>, HashMap<String, String>) {
        let mut samples = HashMap::new();
        let mut types = HashMap::new();
        for line in page.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(
                    types.insert(name.to_string(), kind.to_string()).is_none(),
                    "{name} typed twice"
                );
            } else if line.starts_with("# HELP ") {
                continue;
            } else {
                let (series, value) = line.rsplit_once(' ').unwrap();
                let (name, labels) = series.split_once('{').unwrap();
                let target = labels
                    .strip_prefix("target=\"")
                    .and_then(|l| l.strip_suffix("\"}"))
                    .unwrap();
                assert!(types.contains_key(name), "{name} sampled before its TYPE");
                let old = samples.insert((name.to_string(), target.to_string()), value.parse().unwrap());
                assert!(old.is_none(), "{line} twice");
            }
        }
        (samples, types)
    }

    fn stats() -> impl Strategy<Value = Stats> {
        (0u64..1 << 40, 0u64..1 << 40, 0u64..1 << 40, 0u64..1 << 40).prop_map(|(a, b, c, r)| {
            // delivered + dead-lettered never exceed accepted.
            let accepted = a + b + c;
            Stats {
                accepted,
                delivered: b,
                dead_lettered: c,
                retries: r,
            }
        })
    }

    proptest! {
        #[test]
        fn each_kind_is_the_sum_of_its_sinks(
            sinks in proptest::collection::vec((prop_oneof![Just("webhook"), Just("syslog")], stats()), 1..6)
        ) {
            let mut page = String::new();
            render_prometheus(&mut page, sinks.iter().map(|(k, s)| (*k, *s)));
            let (samples, types) = read(&page);
            prop_assert_eq!(types.len(), 5);
            for kind in ["webhook", "syslog"] {
                let mine: Vec<&Stats> = sinks.iter().filter(|(k, _)| *k == kind).map(|(_, s)| s).collect();
                let get = |name: &str| samples.get(&(name.to_string(), kind.to_string())).copied();
                if mine.is_empty() {
                    prop_assert!(get("clarion_alerts_accepted_total").is_none());
                    continue;
                }
                let sum = |f: fn(&Stats) -> u64| mine.iter().map(|s| f(s)).sum::<u64>();
                prop_assert_eq!(get("clarion_alerts_accepted_total"), Some(sum(|s| s.accepted)));
                prop_assert_eq!(get("clarion_alerts_delivered_total"), Some(sum(|s| s.delivered)));
                prop_assert_eq!(get("clarion_alerts_retries_total"), Some(sum(|s| s.retries)));
                prop_assert_eq!(get("clarion_alerts_dead_lettered_total"), Some(sum(|s| s.dead_lettered)));
                prop_assert_eq!(
                    get("clarion_alerts_queue_depth"),
                    Some(sum(|s| s.accepted) - sum(|s| s.delivered) - sum(|s| s.dead_lettered))
                );
            }
            for (name, kind) in &types {
                let want = if name.ends_with("_total") { "counter" } else { "gauge" };
                prop_assert_eq!(kind.as_str(), want);
            }
        }
    }

    #[test]
    fn no_targets_no_series() {
        let mut page = String::from("x 1\n");
        render_prometheus(&mut page, []);
        assert_eq!(page, "x 1\n");
    }

    #[test]
    fn label_values_are_escaped() {
        let mut page = String::new();
        render_prometheus(&mut page, [("a\"b\\c", Stats::default())]);
        assert!(
            page.contains(r#"clarion_alerts_accepted_total{target="a\"b\\c"} 0"#),
            "{page}"
        );
    }
}
