//! The `alert` clause: how an event's alerts fire and resolve (issue 37).

use clarion_lang::ast::Severity;
use clarion_lang::{check, parse};

fn alert_of(src: &str) -> Option<(u64, u64, Severity)> {
    let file = parse(src).unwrap_or_else(|d| panic!("{src}: {d}"));
    check(src).unwrap_or_else(|d| panic!("{src}: {d}"));
    file.events[0]
        .alert
        .as_ref()
        .map(|a| (a.fire_after(), a.resolve_after_windows(), a.severity()))
}

#[test]
fn parts_in_any_order_commas_optional() {
    let want = Some((3, 10, Severity::Critical));
    for clause in [
        "alert after 3 windows, resolve after 10 windows, severity critical",
        "alert after 3 windows resolve after 10 windows severity critical",
        "alert severity critical, resolve after 10 windows, after 3 windows",
    ] {
        let src = format!("event e\n  when sum(volume) > 1\n  every 100ms\n  {clause}\n  per src_ip\n");
        assert_eq!(alert_of(&src), want, "{clause}");
    }
}

#[test]
fn absent_parts_take_the_defaults() {
    assert_eq!(alert_of("event e when sum(volume) > 1"), None);
    assert_eq!(
        alert_of("event e when sum(volume) > 1 alert severity info"),
        Some((1, 1, Severity::Info))
    );
    assert_eq!(
        alert_of("event e when sum(volume) > 1 alert after 1 window"),
        Some((1, 1, Severity::Warning))
    );
    assert_eq!(
        alert_of("event e when sum(volume) > 1 alert resolve after 5 windows"),
        Some((1, 5, Severity::Warning))
    );
}

#[test]
fn alert_still_names_a_variable() {
    // Not a keyword: a clause only when `after`, `resolve` or `severity` follows.
    let file = parse("event alert when sum(alert) > 1 alert after 2 windows").unwrap();
    assert_eq!(file.events[0].name, "alert");
    assert_eq!(file.events[0].alert.as_ref().map(|a| a.fire_after()), Some(2));
}

#[test]
fn printed_as_written() {
    let src = "event e\n  when sum(volume) > 1\n  alert after 1 window, resolve after 10 windows, severity notice\n";
    let file = parse(src).unwrap();
    assert_eq!(file.to_string(), src);
}
