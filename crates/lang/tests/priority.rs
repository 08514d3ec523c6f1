//! `priority N`: what is shed first under overload (MONA, issue 22).
//!
//! Each test compares with the rule as the docs state it, written out
//! independently of the parser: a priority is a whole number from 0 to
//! 100, at most once per event, kept in the spec as written (`None` when
//! absent), inherited by the instances a drill-down installs, and refused
//! on export policies.

use clarion_lang::spec::EventSpec;
use clarion_lang::{check, check_exports, codes, parse, Diagnostic};
use proptest::prelude::*;

fn one(src: &str) -> EventSpec {
    let mut specs = check(src).unwrap_or_else(|d| panic!("{}", d.render("test", src, false)));
    assert_eq!(specs.len(), 1);
    specs.remove(0)
}

/// The only diagnostic `check` gives for `src`.
#[track_caller]
fn only_error(src: &str) -> Diagnostic {
    let d = check(src).expect_err("an error");
    assert_eq!(d.len(), 1, "{}", d.render("test", src, false));
    d[0].clone()
}

/// The byte range of `needle` in `src` (its only occurrence).
fn range_of(src: &str, needle: &str) -> std::ops::Range<usize> {
    assert_eq!(src.matches(needle).count(), 1, "{needle} in {src}");
    let start = src.find(needle).unwrap_or_default();
    start..start + needle.len()
}

const HEAVY: &str =
    "event heavy\n  filter proto = tcp\n  when sum(volume) > 125KB\n  per 5tuple\n  every 10ms\n";

#[test]
fn absent_is_none() {
    assert_eq!(one(HEAVY).priority, None);
}

#[test]
fn accepted_anywhere_among_the_clauses() {
    assert_eq!(one(&format!("{HEAVY}  priority 3\n")).priority, Some(3));
    let first =
        one("event heavy priority 7 filter proto = tcp when sum(volume) > 125KB per 5tuple every 10ms");
    assert_eq!(first.priority, Some(7));
    // Nothing else changes.
    assert_eq!(
        EventSpec {
            priority: None,
            ..first
        },
        one(HEAVY)
    );
}

#[test]
fn bounds_are_included() {
    assert_eq!(one(&format!("{HEAVY}  priority 0\n")).priority, Some(0));
    assert_eq!(one(&format!("{HEAVY}  priority 100\n")).priority, Some(100));
}

#[test]
fn priority_is_not_a_keyword() {
    // Still a name: of an event, of an installed event.
    let specs = check(
        "event priority when sum(volume) > 1 then install urgent priority 9\n\
         event urgent when sum(volume) > 2 on demand priority 90",
    )
    .unwrap_or_else(|d| panic!("{d}"));
    assert_eq!(specs.len(), 2);
    assert_eq!(specs[0].name, "priority");
    assert_eq!(specs[0].priority, Some(9));
    assert_eq!(specs[1].priority, Some(90));
}

#[test]
fn duplicate() {
    let src = format!("{HEAVY}  priority 3\n  priority 5\n");
    let d = only_error(&src);
    assert_eq!(d.code, codes::DUPLICATE_CLAUSE);
    assert_eq!(
        d.span,
        range_of(&src, "priority 5").start..range_of(&src, "priority 5").start + 8
    );
    assert_eq!(
        d.labels[1].span,
        range_of(&src, "priority 3").start..range_of(&src, "priority 3").start + 8
    );
    assert!(d.help.is_some());
}

#[test]
fn out_of_range() {
    for n in ["101", "255", "256", "1000", "18446744073709551615"] {
        let src = format!("{HEAVY}  priority {n}\n");
        let d = only_error(&src);
        assert_eq!(d.code, codes::BAD_PRIORITY, "{n}");
        assert_eq!(d.span, range_of(&src, n), "{n}");
        assert_eq!(d.message, format!("priority `{n}` is above 100"));
        assert!(d.help.as_deref().is_some_and(|h| h.contains("0 to 100")));
    }
}

#[test]
fn negative() {
    for n in ["-1", "- 5", "-2.5"] {
        let src = format!("{HEAVY}  priority {n}\n");
        let d = only_error(&src);
        assert_eq!(d.code, codes::BAD_PRIORITY, "{n}");
        assert_eq!(d.span, range_of(&src, n), "{n}");
        assert!(d.message.ends_with("is below 0"), "{}", d.message);
        assert!(d.help.as_deref().is_some_and(|h| h.contains("0 to 100")));
    }
}

#[test]
fn not_a_whole_number() {
    for n in ["2.5", "50.0", "0.1"] {
        let src = format!("{HEAVY}  priority {n}\n");
        let d = only_error(&src);
        assert_eq!(d.code, codes::BAD_PRIORITY, "{n}");
        assert_eq!(d.span, range_of(&src, n), "{n}");
        assert_eq!(d.message, format!("priority `{n}` is not a whole number"));
    }
}

#[test]
fn missing_number() {
    for (src, found) in [
        (format!("{HEAVY}  priority\n"), None),
        (format!("{HEAVY}  priority high\n"), Some("high")),
        (
            format!("{HEAVY}  priority\nevent next when sum(volume) > 1\n"),
            Some("event"),
        ),
    ] {
        let d = parse(&src).expect_err("an error");
        assert_eq!(d.len(), 1, "{}", d.render("test", &src, false));
        assert_eq!(d[0].code, codes::UNEXPECTED_TOKEN);
        assert!(
            d[0].message.contains("a priority from 0 to 100"),
            "{}",
            d[0].message
        );
        if let Some(word) = found {
            let start = src.rfind(word).unwrap_or_default();
            assert_eq!(d[0].span, start..start + word.len());
        }
    }
}

#[test]
fn a_unit_after_the_number_is_not_a_priority() {
    let d = only_error(&format!("{HEAVY}  priority 3%\n"));
    assert_eq!(d.code, codes::UNKNOWN_CLAUSE);
}

#[test]
fn misspelt_clause_suggests_priority() {
    let d = only_error(&format!("{HEAVY}  priorty 3\n"));
    assert_eq!(d.code, codes::UNKNOWN_CLAUSE);
    assert_eq!(d.help.as_deref(), Some("did you mean `priority`?"));
}

#[test]
fn instances_inherit_their_events_priority() {
    let specs = check(
        "event lossy\n  filter proto = tcp\n  when sum(is_lost) > 0\n  per 5tuple\n  every 10ms\n  priority 90\n  then install senders on dst_ip/24 for 20ms\n\n\
         event senders\n  when sum(volume) > 20KB\n  per src_ip\n  every 10ms\n  on demand\n  priority 20\n",
    )
    .unwrap_or_else(|d| panic!("{d}"));
    assert_eq!(specs.len(), 2);
    assert_eq!(specs[0].priority, Some(90));
    assert_eq!(specs[1].priority, Some(20));
    assert_eq!(specs[0].drill_downs[0].event.priority, Some(20));
}

#[test]
fn export_policies_have_no_priority() {
    let src = "export web\n  filter proto = tcp\n  priority 3\n  send headers to collector 10.0.0.9\n";
    let d = check_exports(src).expect_err("refused");
    assert_eq!(d.len(), 1, "{}", d.render("test", src, false));
    assert_eq!(d[0].code, codes::UNKNOWN_CLAUSE);
    assert_eq!(d[0].span, range_of(src, "priority"));
    assert_eq!(
        d[0].help.as_deref(),
        Some("`priority` belongs to events; a policy has `filter` and `send` clauses")
    );
}

/// How a generated priority is written.
#[derive(Clone, Debug)]
enum Written {
    Int(u64),
    Dec(u32, u32),
    Negative(u64),
}

fn written() -> impl Strategy<Value = Written> {
    prop_oneof![
        (0u64..=120).prop_map(Written::Int),
        any::<u64>().prop_map(Written::Int),
        (0u32..200, 1u32..100).prop_map(|(a, b)| Written::Dec(a, b)),
        (0u64..200).prop_map(Written::Negative),
    ]
}

proptest! {
    /// The reference: an integer 0..=100 is kept as is; anything else is
    /// refused with E0370 and a span on the number as written.
    #[test]
    fn accepted_exactly_when_a_whole_number_from_0_to_100(w in written(), at_start in any::<bool>()) {
        let text = match w {
            Written::Int(n) => n.to_string(),
            Written::Dec(a, b) => format!("{a}.{b:02}"),
            Written::Negative(n) => format!("-{n}"),
        };
        let clause = format!("priority {text}");
        let src = if at_start {
            format!("event e {clause} when sum(volume) > 1 every 10ms")
        } else {
            format!("event e when sum(volume) > 1 every 10ms {clause}")
        };
        let expected = match w {
            Written::Int(n) if n <= 100 => Some(n),
            _ => None,
        };
        match (check(&src), expected) {
            (Ok(specs), Some(n)) => prop_assert_eq!(specs[0].priority.map(u64::from), Some(n)),
            (Err(d), None) => {
                prop_assert_eq!(d.len(), 1);
                prop_assert_eq!(d[0].code, codes::BAD_PRIORITY);
                let start = src.find(&clause).unwrap_or_default() + "priority ".len();
                prop_assert_eq!(d[0].span.clone(), start..start + text.len());
            }
            (got, _) => prop_assert!(false, "{src}: {got:?}"),
        }
    }
}

#[test]
fn priority_and_on_may_start_a_predicate() {
    // `when` ends only where a clause is written as one: `priority 5`,
    // `on demand`. Found by the round-trip property test (a function `on`).
    for src in [
        "event a when priority > 3",
        "event a when priority(volume) > 3 priority 7",
        "event a when on(volume) > 1 on demand",
        "event a when on > 1",
    ] {
        let file = parse(src).unwrap_or_else(|d| panic!("{src}: {d}"));
        assert_eq!(file.events.len(), 1, "{src}");
    }
    for src in ["event a when priority 5", "event a when on demand"] {
        let d = parse(src).expect_err(src);
        assert!(
            d.to_string().contains("expected an expression after `when`"),
            "{src}: {d}"
        );
    }
}
