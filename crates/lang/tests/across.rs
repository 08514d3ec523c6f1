//! The `across` clause (`across hosts`, `across more than N hosts`,
//! `across more than N% of hosts`): parsing, its mistakes, printing, lowering.

use clarion_lang::{codes, parse, Diagnostic};

const SPIKE: &str = "event service_load_spike
  filter dst_ip in 10.0.128.0/24 and dst_port = 80
  when sum(volume) > 100MB
  per dst_ip/24
  every 10ms
  across hosts
";

const HELP: &str = "write `across hosts` (over all hosts' packets together), `across more than 3 hosts` or `across more than 50% of hosts` (the event holds on that many hosts)";

/// The one diagnostic `src` gives.
#[track_caller]
fn only_error(src: &str) -> Diagnostic {
    let d = match parse(src) {
        Ok(f) => panic!("expected an error, got {f:?}"),
        Err(d) => d,
    };
    assert_eq!(d.len(), 1, "{}", d.render("test", src, false));
    d[0].clone()
}

/// The byte range of the `nth` (from 0) occurrence of `needle` in `src`.
fn range_of(src: &str, needle: &str, nth: usize) -> std::ops::Range<usize> {
    let start = src
        .match_indices(needle)
        .nth(nth)
        .map(|(i, _)| i)
        .expect("needle in the source");
    start..start + needle.len()
}

#[test]
fn across_hosts_parses_with_its_span() {
    let file = parse(SPIKE).expect("parses");
    let e = &file.events[0];
    let across = e.across.as_ref().expect("the clause is kept");
    assert_eq!(&SPIKE[across.span.range()], "across hosts");
    assert_eq!(across.quorum, None);
    assert!(
        SPIKE[e.span.range()].ends_with("across hosts"),
        "the event ends with the clause"
    );
    assert_eq!(
        parse("event e when sum(volume) > 1").expect("parses").events[0].across,
        None
    );
}

#[test]
fn across_may_come_anywhere_among_the_clauses() {
    let src = "event e across hosts when sum(volume) > 1MB\nevent f when count(packets) > 5 across hosts per dst_ip";
    let file = parse(src).expect("parses");
    assert!(file.events.iter().all(|e| e.across.is_some()));
}

#[test]
fn another_word_after_across_is_refused_where_it_stands() {
    let src = "event e\n  when sum(volume) > 1MB\n  across racks\n";
    let d = only_error(src);
    assert_eq!(d.code, codes::BAD_SCOPE);
    assert_eq!(
        d.message,
        "expected `hosts` or `more than` in `across`, found `racks`"
    );
    assert_eq!(d.span, range_of(src, "racks", 0));
    assert_eq!(d.help.as_deref(), Some(HELP));
}

#[test]
fn a_near_miss_or_a_symbol_after_across_is_refused_too() {
    for (src, found) in [
        ("event e when sum(volume) > 1MB across host", "host"),
        ("event e when sum(volume) > 1MB across 5", "5"),
        ("event e when sum(volume) > 1MB across (hosts)", "("),
        ("event e when sum(volume) > 1MB across every 10ms", "every"),
    ] {
        let d = only_error(src);
        assert_eq!(d.code, codes::BAD_SCOPE, "{src}");
        let after = range_of(src, "across ", 0).end;
        assert_eq!(d.span, after..after + found.len(), "{src}");
        assert_eq!(d.help.as_deref(), Some(HELP), "{src}");
    }
}

#[test]
fn across_at_the_end_of_input_points_at_across() {
    let src = "event e when sum(volume) > 1MB across";
    let d = only_error(src);
    assert_eq!(d.code, codes::BAD_SCOPE);
    assert_eq!(
        d.message,
        "expected `hosts` or `more than` in `across`, found end of input"
    );
    assert_eq!(d.span, range_of(src, "across", 0));
    assert_eq!(d.help.as_deref(), Some(HELP));
}

#[test]
fn a_bad_scope_spoils_only_its_own_event() {
    let src = "event a when sum(volume) > 1MB across\nevent b when sum(volume) > 2MB across hosts";
    let d = only_error(src);
    assert_eq!(
        d.span,
        range_of(src, "event", 1),
        "the next event is what came instead"
    );
    let all = clarion_lang::check(src).expect_err("event a is broken");
    assert_eq!(all.len(), 1, "event b checks");
}

#[test]
fn a_second_across_is_a_duplicate_clause() {
    let src = "event e\n  when sum(volume) > 1MB\n  across hosts\n  across hosts\n";
    let d = only_error(src);
    assert_eq!(d.code, codes::DUPLICATE_CLAUSE);
    assert_eq!(d.message, "duplicate `across` clause");
    assert_eq!(d.span, range_of(src, "across", 1));
    assert_eq!(d.labels.len(), 2, "{:?}", d.labels);
    assert!(d
        .labels
        .iter()
        .any(|l| l.span == range_of(src, "across", 0) && l.message == "first `across` clause here"));
}

#[test]
fn across_is_a_keyword() {
    for src in [
        "event across when sum(volume) > 1",
        "event e when sum(across) > 1",
        "event e filter proto = across when sum(volume) > 1",
    ] {
        assert!(parse(src).is_err(), "{src}");
    }
    // `hosts` is not one: it is only special right after `across`.
    assert!(parse("event hosts when sum(volume) > 1 across hosts").is_ok());
}

#[test]
fn clause_errors_list_across() {
    let d = only_error("event e when sum(volume) > 1 acros hosts");
    assert_eq!(d.code, codes::UNKNOWN_CLAUSE);
    assert!(
        d.message
            .contains("`every`, `across`, `then`, `on demand`, `priority`, `alert`)"),
        "{}",
        d.message
    );
    assert_eq!(d.help.as_deref(), Some("did you mean `across`?"));
    let d = only_error("event e when sum(volume) > 1 5");
    assert_eq!(
        d.help.as_deref(),
        Some("each clause starts with `filter`, `when`, `per`, `every`, `across`, `then install`, `then capture`, `on demand`, `priority` or `alert`")
    );
}

#[test]
fn canonical_form_puts_across_hosts_last() {
    let src = "event e across hosts every 1s per dst_ip when sum(volume) > 1MB filter proto = tcp";
    let file = parse(src).expect("parses");
    let printed = file.to_string();
    assert_eq!(
        printed,
        "event e\n  filter proto = tcp\n  when sum(volume) > 1MB\n  per dst_ip\n  every 1s\n  across hosts\n"
    );
    let again = parse(&printed).expect("printed text parses");
    assert!(file.eq_ignoring_spans(&again));
    assert_eq!(again.to_string(), printed);
    assert_eq!(
        parse(SPIKE).expect("parses").to_string(),
        SPIKE,
        "SPIKE is canonical"
    );
}

#[test]
fn a_quorum_of_hosts_parses_prints_and_lowers() {
    use clarion_lang::spec::{Quorum, Scope};
    for (clause, more_than, percent) in [
        ("across more than 50% of hosts", 50, true),
        ("across more than 2 hosts", 2, false),
        ("across more than 0 hosts", 0, false),
    ] {
        let src = format!("event e\n  when sum(volume) > 1MB\n  per dst_ip\n  {clause}\n");
        let file = parse(&src).expect("parses");
        let a = file.events[0].across.as_ref().expect("kept");
        assert_eq!(&src[a.span.range()], clause);
        assert_eq!(file.to_string(), src, "canonical");
        let spec = clarion_lang::check(&src).expect("checks").remove(0);
        assert_eq!(spec.scope, Scope::Quorum(Quorum { more_than, percent }));
        assert!(spec.scope.is_network());
    }
}

#[test]
fn a_quorum_holds_above_its_count_or_share() {
    use clarion_lang::spec::Quorum;
    let half = Quorum {
        more_than: 50,
        percent: true,
    };
    assert!(!half.holds(2, 4) && half.holds(3, 4) && half.holds(1, 1) && !half.holds(0, 1));
    let two = Quorum {
        more_than: 2,
        percent: false,
    };
    assert!(!two.holds(2, 10) && two.holds(3, 4));
}

#[test]
fn a_broken_quorum_says_what_is_missing() {
    for (src, message, at) in [
        (
            "event e when sum(volume) > 1 across more 3 hosts",
            "expected `than` after `more` in `across`, found number `3`",
            "3",
        ),
        (
            "event e when sum(volume) > 1 across more than x hosts",
            "expected a whole number after `more than` in `across`, found `x`",
            "x",
        ),
        (
            "event e when sum(volume) > 1 across more than 30% hosts",
            "expected `of hosts` after the percentage in `across`, found `hosts`",
            "hosts",
        ),
        (
            "event e when sum(volume) > 1 across more than 3 racks",
            "expected `hosts` in `across`, found `racks`",
            "racks",
        ),
    ] {
        let d = only_error(src);
        assert_eq!(d.code, codes::BAD_SCOPE, "{src}");
        assert_eq!(d.message, message, "{src}");
        let start = src.rfind(at).expect("in the source");
        assert_eq!(d.span, start..start + at.len(), "{src}");
        assert_eq!(d.help.as_deref(), Some(HELP), "{src}");
    }
    let src = "event e when sum(volume) > 1 across more than 150% of hosts";
    let d = clarion_lang::check(src).expect_err("out of range");
    assert_eq!(d[0].code, codes::BAD_QUORUM);
    assert_eq!(d[0].span, range_of(src, "150%", 0));
}
