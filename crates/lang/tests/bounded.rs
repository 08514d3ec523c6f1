//! Checking and rendering stay linear in the input and the rendered text
//! bounded, however many mistakes a file holds (issue 18: 4,000 errors on
//! one line took 50 s and 2 GB to render; 10,000 duplicate conditions,
//! over 2 minutes). Times are for `cargo test --release`.

use std::time::{Duration, Instant};

use clarion_lang::{check, decode, MAX_RENDERED};

/// Checks and renders `src`: (the number of errors, the rendered text),
/// both within ten seconds: the quadratic cases took 50 s to minutes, the
/// linear ones well under a second in release, and over a second in a
/// debug build on a loaded machine (a bound that tight failed there).
#[track_caller]
fn check_and_render(src: &str) -> (usize, String) {
    let t = Instant::now();
    let diags = check(src).expect_err("mistakes");
    let text = diags.render("big.clarion", src, false);
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "{took:?} for {} errors in {} bytes",
        diags.len(),
        src.len()
    );
    (diags.len(), text)
}

/// The first [`MAX_RENDERED`] reports, then the count of the others, in a
/// few kilobytes each at most.
#[track_caller]
fn assert_capped(errors: usize, text: &str, more: &str) {
    assert_eq!(text.matches(" Error: ").count(), MAX_RENDERED, "{errors} errors");
    assert!(
        text.ends_with(&format!("{more}\n")),
        "{}",
        &text[text.len().saturating_sub(200)..]
    );
    assert!(text.len() < MAX_RENDERED * 2_000, "{} bytes", text.len());
}

#[test]
fn ten_thousand_errors_on_one_line() {
    let src: String = (0..10_000)
        .map(|i| format!("event e{i} when sum(volumx) > 1 "))
        .collect();
    let (n, text) = check_and_render(&src);
    assert_eq!(n, 10_000);
    assert_capped(n, &text, "and 9,950 more errors (10,000 in all)");
    // Far along the line, the heading still gives the source's column.
    let last = text.rfind("big.clarion:1:").expect("a heading");
    assert!(
        text[last..].starts_with("big.clarion:1:1529 ]"),
        "{}",
        &text[last..last + 30]
    );
}

#[test]
fn ten_thousand_errors_on_their_own_lines() {
    let src: String = (0..10_000)
        .map(|i| format!("event e{i}\n  when sum(volumx) > 1\n"))
        .collect();
    let (n, text) = check_and_render(&src);
    assert_capped(n, &text, "and 9,950 more errors (10,000 in all)");
}

#[test]
fn a_hundred_thousand_duplicate_conditions() {
    let conds = vec!["proto = tcp"; 100_000].join(" and ");
    let src = format!("event a\n  filter {conds}\n  when sum(volume) > 1\n");
    let (n, text) = check_and_render(&src);
    assert_capped(n, &text, "and 99,949 more errors (99,999 in all)");
    // One per line, too.
    let conds = vec!["proto = tcp"; 100_000].join("\n    and ");
    let src = format!("event a\n  filter {conds}\n  when sum(volume) > 1\n");
    let (n, text) = check_and_render(&src);
    assert_capped(n, &text, "and 99,949 more errors (99,999 in all)");
}

#[test]
fn a_hundred_thousand_duplicate_fields() {
    let fields = vec!["src_ip"; 100_000].join(", ");
    let src = format!("event a\n  when sum(volume) > 1\n  per ({fields})\n");
    let (n, text) = check_and_render(&src);
    assert_capped(n, &text, "and 99,949 more errors (99,999 in all)");
}

#[test]
fn ten_thousand_drill_downs_to_unknown_events() {
    // Each unknown target was compared with every event's name (70 s).
    let src: String = (0..10_000)
        .map(|i| format!("event e{i:05}\n  when sum(volume) > 1\n  then install f{i:05}\n"))
        .collect();
    let (n, text) = check_and_render(&src);
    assert_capped(n, &text, "and 9,950 more errors (10,000 in all)");
    assert!(
        text.contains("did you mean `e00000`?"),
        "the first ones still get a suggestion"
    );
}

#[test]
fn ten_thousand_on_demand_events_never_installed() {
    let src: String = (0..10_000)
        .map(|i| format!("event e{i}\n  when sum(volume) > 1\n  on demand\n"))
        .collect();
    let (n, text) = check_and_render(&src);
    assert_capped(n, &text, "and 9,950 more errors (10,000 in all)");
}

#[test]
fn ten_thousand_syntax_errors_on_one_line() {
    let src: String = (0..10_000)
        .map(|i| format!("event e{i} when sum(volume) > > 1 "))
        .collect();
    let (n, text) = check_and_render(&src);
    assert_capped(n, &text, "and 9,950 more errors (10,000 in all)");
}

#[test]
fn a_megabyte_name_is_cut_in_messages() {
    let name = "v".repeat(1 << 20);
    let src = format!("event a\n  when sum({name}) > 1\n");
    let (_, text) = check_and_render(&src);
    assert!(text.len() < 3_000, "{} bytes", text.len());
    assert!(text.contains("unknown variable `vvvv"), "{text}");
}

#[test]
fn a_leading_byte_order_mark_is_skipped() {
    let src = "\u{FEFF}event a\n  when sum(volume) > 1\n";
    let specs = check(src).expect("accepted");
    assert_eq!(specs[0].name, "a");
    let printed = clarion_lang::parse(src).expect("parses").to_string();
    assert!(printed.starts_with("event a\n"), "{printed:?}");
    assert_eq!(decode(src.as_bytes()), Ok(src));
}

#[test]
fn invalid_utf8_is_found_at_its_byte() {
    let cut = decode(b"event a\n  when sum(volume) > 1 # \xE2\x82").expect_err("cut short");
    assert_eq!(
        cut[0].message,
        "invalid UTF-8: the text ends inside a character (0xE2 0x82)"
    );
    let lossy = String::from_utf8_lossy(b"event a\n  when sum(volume) > 1 # \xE2\x82");
    assert_eq!(cut[0].line_col(&lossy), (2, 26));
    let bad = decode(b"event a\xC0\xAF").expect_err("overlong");
    assert_eq!(bad[0].message, "invalid UTF-8: byte 0xC0 is not UTF-8");
}
