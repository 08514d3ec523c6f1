//! Drill-downs (`then install EVENT on FIELDS for DURATION`, `on demand`):
//! parsing, printing, lowering and every mistake the checker refuses.

use clarion_lang::spec::{Granularity, PrefixLens};
use clarion_lang::{check, codes, parse, Diagnostic};

const PAIR: &str = "event lossy_web
  filter dst_port = 80
  when sum(volume) > 10KB
  per 5tuple
  every 10ms
  then install heavy_to_dst on dst_ip/24 for 100ms

event heavy_to_dst
  when sum(volume) > 1KB
  per (src_ip, dst_ip)
  every 10ms
  on demand
";

/// The one diagnostic checking `src` gives.
#[track_caller]
fn only_error(src: &str) -> Diagnostic {
    let d = match check(src) {
        Ok(s) => panic!("expected an error, got {s:?}"),
        Err(d) => d,
    };
    assert_eq!(d.len(), 1, "{}", d.render("test", src, false));
    d[0].clone()
}

#[test]
fn a_drill_down_lowers_with_the_installed_event_embedded() {
    let specs = check(PAIR).expect("checks");
    assert_eq!(specs.len(), 2);
    let (parent, child) = (&specs[0], &specs[1]);
    assert!(!parent.on_demand && child.on_demand);
    assert_eq!(parent.drill_downs.len(), 1);
    let d = &parent.drill_downs[0];
    assert_eq!(*d.event, *child);
    assert_eq!(d.duration_ns, Some(100_000_000));
    assert_eq!(
        d.on,
        Granularity {
            dst_ip: Some(PrefixLens { v4: 24, v6: 24 }),
            ..Granularity::default()
        }
    );
}

#[test]
fn it_prints_canonically_and_reads_back() {
    let file = parse(PAIR).expect("parses");
    let printed = file.to_string();
    assert!(
        printed.contains("  then install heavy_to_dst on dst_ip/24 for 100ms\n"),
        "{printed}"
    );
    assert!(printed.contains("  on demand\n"), "{printed}");
    assert!(parse(&printed).expect("reparses").eq_ignoring_spans(&file));
}

#[test]
fn an_address_without_length_narrows_as_the_group_keeps_it() {
    let src = PAIR
        .replace("per 5tuple", "per dst_ip/16/48")
        .replace("on dst_ip/24", "on dst_ip");
    let specs = check(&src).expect("checks");
    assert_eq!(
        specs[0].drill_downs[0].on.dst_ip,
        Some(PrefixLens { v4: 16, v6: 48 })
    );
    // Several fields, no duration: until removed. Chains embed their own drill-downs.
    let src = "event a when sum(volume) > 1 per 5tuple then install b on src_ip, dst_port
event b when sum(volume) > 1 per src_ip on demand then install c on src_ip/8 for 20ms
event c when count(packets) > 1 every 10ms on demand";
    let specs = check(src).expect("checks");
    let b = &specs[0].drill_downs[0];
    assert_eq!(b.duration_ns, None);
    assert!(b.on.src_ip.is_some() && b.on.dst_port && !b.on.src_port);
    assert_eq!(b.event.drill_downs[0].event.name, "c");
}

#[test]
fn names_with_dashes_are_read_after_then_install() {
    let src =
        "event a-1 when count(packets) > 1 then install b-2\nevent b-2 when count(packets) > 1 on demand";
    let specs = check(src).expect("checks");
    assert_eq!(specs[0].drill_downs[0].event.name, "b-2");
}

#[test]
fn unknown_events_are_suggested() {
    let d = only_error(&PAIR.replace("install heavy_to_dst", "install heavy_to_dts"));
    assert_eq!(d.code, codes::UNKNOWN_EVENT);
    assert_eq!(d.help.as_deref(), Some("did you mean `heavy_to_dst`?"));
}

#[test]
fn the_installed_event_must_be_on_demand_and_named() {
    let d = only_error(&PAIR.replace("  on demand\n", ""));
    assert_eq!(d.code, codes::NOT_ON_DEMAND);
    assert!(d
        .help
        .as_deref()
        .is_some_and(|h| h.contains("add the clause `on demand`")));
    let d = only_error(&PAIR.replace("  then install heavy_to_dst on dst_ip/24 for 100ms\n", ""));
    assert_eq!(d.code, codes::BAD_ON_DEMAND);
    assert_eq!(d.message, "event `heavy_to_dst` is never installed");
}

#[test]
fn narrowing_needs_fields_the_firing_group_keeps() {
    let d = only_error(&PAIR.replace("per 5tuple", "per src_ip"));
    assert_eq!(d.code, codes::BAD_NARROWING);
    assert_eq!(d.message, "the groups of `lossy_web` do not keep `dst_ip`");
    assert!(
        d.help.as_deref().is_some_and(|h| h.contains("(src_ip)")),
        "{:?}",
        d.help
    );
    let d = only_error(&PAIR.replace("per 5tuple", "per dst_ip/16"));
    assert_eq!(
        d.message,
        "the groups of `lossy_web` keep `dst_ip` to /16 (IPv4) and /16 (IPv6) only"
    );
    let src = PAIR.replace("on dst_ip/24", "on dst_ip/24, dst_ip");
    assert_eq!(only_error(&src).code, codes::DUPLICATE_FIELD);
}

#[test]
fn durations_are_whole_windows_of_the_installed_event() {
    for (dur, why) in [
        ("105ms", "is not a whole number of `heavy_to_dst`'s 10ms windows"),
        ("0ms", "longer than zero"),
        ("100", "whole milliseconds"),
        ("5KB", "whole milliseconds"),
        ("2days", "whole milliseconds"),
        ("100000s", "at most a day"),
    ] {
        let src = PAIR.replace("for 100ms", &format!("for {dur}"));
        match check(&src) {
            Ok(_) => panic!("{dur} accepted"),
            Err(d) => {
                let d = d
                    .iter()
                    .find(|d| d.code == codes::BAD_DURATION || d.code == codes::UNKNOWN_UNIT);
                let d = d.unwrap_or_else(|| panic!("{dur}: no duration error"));
                assert!(
                    d.code == codes::UNKNOWN_UNIT || d.message.contains(why),
                    "{dur}: {}",
                    d.message
                );
            }
        }
    }
}

#[test]
fn cycles_and_deep_chains_are_refused() {
    let src = "event a when count(packets) > 1 on demand then install b
event b when count(packets) > 1 on demand then install a
event c when count(packets) > 1 then install a";
    let d = only_error(src);
    assert_eq!(d.code, codes::DRILL_DOWN_CYCLE);
    assert!(d.message.contains("cycle"), "{}", d.message);
    let self_loop = "event a when count(packets) > 1 then install a\n";
    assert!(check(self_loop).is_err());
    let mut chain = String::from("event e0 when count(packets) > 1 then install e1\n");
    for i in 1..=9 {
        chain += &format!(
            "event e{i} when count(packets) > 1 on demand then install e{}\n",
            i + 1
        );
    }
    chain += "event e10 when count(packets) > 1 on demand\n";
    let d = check(&chain).expect_err("too deep");
    assert!(d.iter().any(|d| d.message.contains("go too deep")), "{d}");
}

#[test]
fn scopes_match_and_connection_state_is_refused_on_demand() {
    let d = only_error(&PAIR.replace("  on demand", "  across hosts\n  on demand"));
    assert_eq!(d.code, codes::DRILL_DOWN_SCOPE);
    let d = only_error(&PAIR.replace("when sum(volume) > 1KB", "when sum(is_lost) > 1"));
    assert_eq!(d.code, codes::BAD_ON_DEMAND);
    assert!(d.message.contains("TCP connection state"), "{}", d.message);
}

#[test]
fn syntax_mistakes_point_at_the_clause() {
    for src in [
        "event a when count(packets) > 1 then heavy",
        "event a when count(packets) > 1 then install",
        "event a when count(packets) > 1 then install b on",
        "event a when count(packets) > 1 then install b for",
        "event a when count(packets) > 1 then install b for soon",
        "event a when count(packets) > 1 on demand on demand",
    ] {
        assert!(parse(src).is_err(), "{src}");
    }
}
