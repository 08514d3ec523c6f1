//! Snapshots of the rendered text of typical mistakes (plain, no color).
//!
//! Trailing spaces are ignored: `ariadne` pads some lines.

use clarion_lang::{check, decode, Diagnostics};

#[track_caller]
fn assert_renders(src: &str, expected: &str) {
    let diags = match check(src) {
        Ok(specs) => panic!("expected an error, got {specs:?}"),
        Err(d) => d,
    };
    assert_rendered(&diags.render("rack.clarion", src, false), expected);
}

/// Like [`assert_renders`], showing the first `max` diagnostics only.
#[track_caller]
fn assert_renders_first(max: usize, src: &str, expected: &str) {
    let diags = match check(src) {
        Ok(specs) => panic!("expected an error, got {specs:?}"),
        Err(d) => d,
    };
    assert_rendered(&diags.render_first(max, "rack.clarion", src, false), expected);
}

#[track_caller]
fn assert_rendered(got: &str, expected: &str) {
    let trim = |s: &str| {
        s.lines()
            .map(str::trim_end)
            .collect::<Vec<_>>()
            .join("\n")
            .trim()
            .to_string()
    };
    let (got, expected) = (trim(got), trim(expected));
    assert!(got == expected, "rendered:\n{got}\n\nexpected:\n{expected}");
}

#[test]
fn host_bits_set() {
    assert_renders(
        "event rack\n  filter dst_ip in 10.0.128.1/24\n  when sum(volume) > 125KB\n",
        r#"
[E0303] Error: `10.0.128.1/24` has bits set after the first 24
   ╭─[ rack.clarion:2:20 ]
   │
 2 │   filter dst_ip in 10.0.128.1/24
   │                    ──────┬──────
   │                          ╰──────── host bits set
   │
   │ Help: did you mean 10.0.128.0/24?
───╯
"#,
    );
}

#[test]
fn misspelt_clause() {
    assert_renders(
        "event rack\n  wehn sum(volume) > 125KB\n",
        r#"
[E0202] Error: expected a clause (`filter`, `when`, `per`, `every`, `across`, `then`, `on demand`, `priority`, `alert`) or the next `event`, found `wehn`
   ╭─[ rack.clarion:2:3 ]
   │
 2 │   wehn sum(volume) > 125KB
   │   ──┬─
   │     ╰─── not a clause
   │
   │ Help: did you mean `when`?
───╯
"#,
    );
}

#[test]
fn duplicate_event_name() {
    assert_renders(
        "event rack\n  when sum(volume) > 125KB\n\nevent rack\n  when count(packets) > 10\n",
        r#"
[E0301] Error: duplicate event name `rack`
   ╭─[ rack.clarion:4:7 ]
   │
 1 │ event rack
   │       ──┬─
   │         ╰─── first defined here
   │
 4 │ event rack
   │       ──┬─
   │         ╰─── defined again here
   │
   │ Help: event names must be unique in a file: rename one of them
───╯
"#,
    );
}

#[test]
fn unknown_variable() {
    assert_renders(
        "event rack\n  when sum(volum) > 125KB\n",
        r#"
[E0310] Error: unknown variable `volum`
   ╭─[ rack.clarion:2:12 ]
   │
 2 │   when sum(volum) > 125KB
   │            ──┬──
   │              ╰──── not a variable
   │
   │ Help: did you mean `volume`?
───╯
"#,
    );
}

#[test]
fn bare_per_packet_variable() {
    assert_renders(
        "event low_ttl\n  when ttl < 5\n",
        r#"
[E0311] Error: `ttl` is a per-packet value and needs an aggregate
   ╭─[ rack.clarion:2:8 ]
   │
 2 │   when ttl < 5
   │        ─┬─
   │         ╰─── needs an aggregate
   │
   │ Help: wrap it in an aggregate, e.g. `max(ttl) > 5` or `sum(ttl) > 5`
───╯
"#,
    );
}

#[test]
fn division_inside_aggregate() {
    assert_renders(
        "event half\n  when sum(volume / 2) > 1KB\n",
        r#"
[E0315] Error: division is not allowed inside an aggregate
   ╭─[ rack.clarion:2:19 ]
   │
 2 │   when sum(volume / 2) > 1KB
   │        ─┬─        ┬
   │         │         ╰── division
   │         │
   │         ╰──────────── in this aggregate
   │
   │ Help: divide the aggregate instead: `sum(volume) / 2`
───╯
"#,
    );
}

#[test]
fn percent_needs_sum_or_count() {
    assert_renders(
        "event loss\n  when max(ttl) > 10%\n",
        r#"
[E0317] Error: a percentage must be compared with a `sum(...)` or `count(...)`
   ╭─[ rack.clarion:2:19 ]
   │
 2 │   when max(ttl) > 10%
   │                   ─┬─
   │                    ╰─── not compared with a `sum` or `count`
   │
   │ Help: a percentage is a share of the group's packets, e.g. `sum(is_lost) > 10%`
───╯
"#,
    );
}

#[test]
fn unit_case() {
    assert_renders(
        "event rack\n  when sum(volume) > 125kb\n",
        r#"
[E0207] Error: unknown unit `kb`
   ╭─[ rack.clarion:2:25 ]
   │
 2 │   when sum(volume) > 125kb
   │                         ─┬
   │                          ╰── not a unit
   │
   │ Help: did you mean `KB`? (units are case-sensitive)
───╯
"#,
    );
}

#[test]
fn missing_when() {
    assert_renders(
        "event rack\n  filter dst_ip in 10.0.128.0/24\n  per 5tuple\n",
        r#"
[E0203] Error: event `rack` has no `when` clause
   ╭─[ rack.clarion:1:7 ]
   │
 1 │ event rack
   │       ──┬─
   │         ╰─── this event has no predicate
   │
   │ Help: every event needs a predicate, e.g. `when sum(volume) > 125KB`
───╯
"#,
    );
}

#[test]
fn duplicate_when() {
    assert_renders(
        "event rack\n  when sum(volume) > 125KB\n  when count(packets) > 10\n",
        r#"
[E0204] Error: duplicate `when` clause
   ╭─[ rack.clarion:3:3 ]
   │
 2 │   when sum(volume) > 125KB
   │   ──┬─
   │     ╰─── first `when` clause here
 3 │   when count(packets) > 10
   │   ──┬─
   │     ╰─── second `when` clause
   │
   │ Help: an event has one predicate; combine conditions with `and` or `or`
───╯
"#,
    );
}

#[test]
fn chained_comparison() {
    assert_renders(
        "event band\n  when 1KB < sum(volume) < 2KB\n",
        r#"
[E0205] Error: comparisons cannot be chained
   ╭─[ rack.clarion:2:26 ]
   │
 2 │   when 1KB < sum(volume) < 2KB
   │            ┬             ┬
   │            │             ╰── second comparison
   │            │
   │            ╰──────────────── after this comparison
   │
   │ Help: compare twice and join with `and`, e.g. `a < b and b < c`
───╯
"#,
    );
}

#[test]
fn nested_aggregate() {
    assert_renders(
        "event spread\n  when sum(max(ttl)) > 10\n",
        r#"
[E0314] Error: aggregates cannot be nested
   ╭─[ rack.clarion:2:12 ]
   │
 2 │   when sum(max(ttl)) > 10
   │        ─┬─ ─┬─
   │         │   ╰─── nested aggregate
   │         │
   │         ╰─────── inside this aggregate
   │
   │ Help: an aggregate's argument is computed per packet; combine aggregates outside, e.g. `max(ttl) - min(ttl) > 10`
───╯
"#,
    );
}

#[test]
fn lastepoch_in_aggregate() {
    assert_renders(
        "event acks\n  when sum(ack_lastepoch) > 10\n",
        r#"
[E0312] Error: `ack_lastepoch` cannot be used inside an aggregate
   ╭─[ rack.clarion:2:12 ]
   │
 2 │   when sum(ack_lastepoch) > 10
   │        ─┬─ ──────┬──────
   │         │        ╰──────── one value per group
   │         │
   │         ╰───────────────── in this aggregate
   │
   │ Help: `ack_lastepoch` is one value per group, not per packet: use it outside the aggregate
───╯
"#,
    );
}

#[test]
fn empty_port_range() {
    assert_renders(
        "event high_ports\n  filter dst_port in 1024..80\n  when count(packets) > 10\n",
        r#"
[E0302] Error: the port range `1024..80` is empty
   ╭─[ rack.clarion:2:22 ]
   │
 2 │   filter dst_port in 1024..80
   │                      ────┬───
   │                          ╰───── empty range
   │
   │ Help: write the lower port first: `80..1024`
───╯
"#,
    );
}

#[test]
fn interval_without_unit() {
    assert_renders(
        "event rack\n  when sum(volume) > 125KB\n  every 10\n",
        r#"
[E0330] Error: the interval has no unit
   ╭─[ rack.clarion:3:9 ]
   │
 3 │   every 10
   │         ─┬
   │          ╰── no unit
   │
   │ Help: write `every 10ms`
───╯
"#,
    );
}

#[test]
fn unknown_protocol() {
    assert_renders(
        "event rack\n  filter proto = tpc\n  when sum(volume) > 125KB\n",
        r#"
[E0302] Error: unknown protocol `tpc`
   ╭─[ rack.clarion:2:18 ]
   │
 2 │   filter proto = tpc
   │                  ─┬─
   │                   ╰─── unknown protocol
   │
   │ Help: did you mean `tcp`?
───╯
"#,
    );
}

#[test]
fn five_tuple_misspelt_is_named_whole() {
    assert_renders(
        "event rack\n  when sum(volume) > 125KB\n  per 5tupel\n  every 10ms\n",
        r#"
[E0209] Error: unknown granularity field `5tupel`
   ╭─[ rack.clarion:3:7 ]
   │
 3 │   per 5tupel
   │       ───┬──
   │          ╰──── not a field
   │
   │ Help: did you mean `5tuple`?
───╯
"#,
    );
}

#[test]
fn unclosed_parenthesis() {
    assert_renders(
        "event rack\n  when (sum(volume) > 125KB\n  per 5tuple\n",
        r#"
[E0201] Error: expected `)`, found `per`
   ╭─[ rack.clarion:3:3 ]
   │
 2 │   when (sum(volume) > 125KB
   │        ┬
   │        ╰── to close this parenthesis
 3 │   per 5tuple
   │   ─┬─
   │    ╰─── expected `)`
───╯
"#,
    );
}

#[test]
fn or_between_conditions() {
    assert_renders(
        "event web\n  filter dst_port = 80 or dst_port = 443\n  when count(packets) > 10\n",
        r#"
[E0202] Error: expected a clause (`filter`, `when`, `per`, `every`, `across`, `then`, `on demand`, `priority`, `alert`) or the next `event`, found `or`
   ╭─[ rack.clarion:2:24 ]
   │
 2 │   filter dst_port = 80 or dst_port = 443
   │                        ─┬
   │                         ╰── not a clause
   │
   │ Help: all conditions of a filter must hold; to match either, write one `filter` clause for each
───╯
"#,
    );
}

#[test]
fn field_twice_in_filter() {
    assert_renders(
        "event web\n  filter dst_port = 80 and dst_port = 443\n  when count(packets) > 10\n",
        r#"
[E0304] Error: `dst_port` appears twice in one filter
   ╭─[ rack.clarion:2:28 ]
   │
 2 │   filter dst_port = 80 and dst_port = 443
   │          ────┬───          ────┬───
   │              │                 ╰───── second condition on this field
   │              │
   │              ╰─────────────────────── first condition on it here
   │
   │ Help: all conditions of a filter must hold; to match either value, write two `filter` clauses
───╯
"#,
    );
}

#[test]
fn two_errors_in_two_events() {
    assert_renders(
        "event a\n  when sum(volume) > 1XB\n\nevent b\n  filter vlan = 5000\n  when count(packets) > 1\n",
        r#"
[E0207] Error: unknown unit `XB`
   ╭─[ rack.clarion:2:23 ]
   │
 2 │   when sum(volume) > 1XB
   │                       ─┬
   │                        ╰── not a unit
   │
   │ Help: did you mean `KB`?
───╯
[E0302] Error: VLAN id 5000 is out of range
   ╭─[ rack.clarion:5:17 ]
   │
 5 │   filter vlan = 5000
   │                 ──┬─
   │                   ╰─── out of range
   │
   │ Help: VLAN ids are 0 to 4095
───╯
"#,
    );
}

#[test]
fn across_without_hosts() {
    assert_renders(
        "event rack\n  when sum(volume) > 100MB\n  across racks\n",
        r#"
[E0211] Error: expected `hosts` or `more than` in `across`, found `racks`
   ╭─[ rack.clarion:3:10 ]
   │
 3 │   across racks
   │          ──┬──
   │            ╰──── expected `hosts` or `more than`
   │
   │ Help: write `across hosts` (over all hosts' packets together), `across more than 3 hosts` or `across more than 50% of hosts` (the event holds on that many hosts)
───╯
"#,
    );
}

#[test]
fn errors_past_the_limit_are_counted() {
    let src = format!(
        "event rack\n  when sum(volume) > 1\n  per (src_ip, {})\n",
        ["src_ip"; 3].join(", ")
    );
    assert_renders_first(
        1,
        &src,
        r#"
[E0304] Error: `src_ip` appears twice in the granularity
   ╭─[ rack.clarion:3:16 ]
   │
 3 │   per (src_ip, src_ip, src_ip, src_ip)
   │        ───┬──  ───┬──
   │           │       ╰──── listed again
   │           │
   │           ╰──────────── first listed here
   │
   │ Help: list each field once
───╯
and 2 more errors (3 in all)
"#,
    );
}

#[test]
fn a_long_line_is_shown_around_each_place() {
    // 60 fields: a line of 486 characters, shown as windows of 40 on each side.
    let src = format!(
        "event rack\n  when sum(volume) > 1\n  per ({})\n",
        ["src_ip"; 60].join(", ")
    );
    assert_renders_first(
        1,
        &src[..],
        r#"
[E0304] Error: `src_ip` appears twice in the granularity
   ╭─[ rack.clarion:3:16 ]
   │
 3 │   per (src_ip, src_ip, src_ip, src_ip, src_ip, src_ip, src_ip…
   │        ───┬──  ───┬──
   │           │       ╰──── listed again
   │           │
   │           ╰──────────── first listed here
   │
   │ Help: list each field once
───╯
and 58 more errors (59 in all)
"#,
    );
    // Far along the line: the column is the source's, not the window's.
    let diags = check(&src).expect_err("duplicates");
    let last = Diagnostics(diags.0[58..].to_vec());
    assert_rendered(
        &last.render("rack.clarion", &src, false),
        r#"
[E0304] Error: `src_ip` appears twice in the granularity
   ╭─[ rack.clarion:3:480 ]
   │
 3 │   per (src_ip, src_ip, src_ip, src_ip, src_ip, src_ip…src_ip, src_ip, src_ip, src_ip, src_ip, src_ip)
   │        ───┬──                                                                                 ───┬──
   │           │                                                                                      ╰──── listed again
   │           │
   │           ╰─────────────────────────────────────────────────────────────────────────────────────────── first listed here
   │
   │ Help: list each field once
───╯
"#,
    );
}

#[test]
fn a_byte_order_mark_is_named() {
    // A leading one is skipped; another is an error that says what it is.
    assert_renders(
        "\u{FEFF}event rack\n  when sum(volume) > 1\u{FEFF}\n",
        r#"
[E0101] Error: unexpected character U+FEFF (a byte-order mark)
   ╭─[ rack.clarion:2:23 ]
   │
 2 │   when sum(volume) > 1﻿
   │
   │                       ── unexpected character U+FEFF (a byte-order mark)
   │
   │ Help: a byte-order mark is allowed only as the first character of the file: remove this one
───╯
"#,
    );
}

#[test]
fn invalid_utf8_has_a_line_and_a_column() {
    let bytes: &[u8] = b"event rack\n  when sum(volume) > 1\n  per src_ip # caf\xE9\n";
    let diags = decode(bytes).expect_err("not UTF-8");
    assert_rendered(
        &diags.render("rack.clarion", &String::from_utf8_lossy(bytes), false),
        r#"
[E0103] Error: invalid UTF-8: byte 0xE9 is not UTF-8
   ╭─[ rack.clarion:3:19 ]
   │
 3 │   per src_ip # caf�
   │                   ┬
   │                   ╰── not UTF-8
   │
   │ Help: events files are UTF-8 text: convert this one, e.g. `iconv -f latin1 -t utf-8 FILE`
───╯
"#,
    );
}

#[test]
fn headers_to_files() {
    let src = "export web\n  filter proto = tcp\n  send headers to pcapng\n";
    let diags = clarion_lang::check_exports(src).expect_err("headers go to a collector");
    assert_rendered(
        &diags.render("policies.clarion", src, false),
        r#"
[E0360] Error: headers go to a collector
   ╭─[ policies.clarion:3:3 ]
   │
 3 │   send headers to pcapng
   │   ───────────┬──────────
   │              ╰──────────── headers to a packet destination
   │
   │ Help: write `send headers to collector ADDR` (`clarion collect` writes them as pcapng or JSON lines), or `send packets snap 128B to ...` to keep the first bytes of each packet
───╯
"#,
    );
}

#[test]
fn policy_in_an_events_file() {
    assert_renders(
        "event heavy\n  when sum(volume) > 1MB\n\nexport web\n  send headers to collector 10.0.0.9\n",
        r#"
[E0362] Error: export policy `web` in an events file
   ╭─[ rack.clarion:4:8 ]
   │
 4 │ export web
   │        ─┬─
   │         ╰─── an export policy
   │
   │ Help: events and export policies are installed apart: put this policy in a file of its own and pass it with `--exports`
───╯
"#,
    );
}

#[test]
fn priority_above_100() {
    assert_renders(
        "event heavy\n  when sum(volume) > 125KB\n  priority 250\n",
        r#"
[E0370] Error: priority `250` is above 100
   ╭─[ rack.clarion:3:12 ]
   │
 3 │   priority 250
   │            ─┬─
   │             ╰─── above 100
   │
   │ Help: write a whole number from 0 to 100, e.g. `priority 80`: under overload, lower priorities are shed first
───╯
"#,
    );
}

#[test]
fn negative_priority() {
    assert_renders(
        "event heavy\n  when sum(volume) > 125KB\n  priority -1\n",
        r#"
[E0370] Error: priority `-1` is below 0
   ╭─[ rack.clarion:3:12 ]
   │
 3 │   priority -1
   │            ─┬
   │             ╰── below 0
   │
   │ Help: write a whole number from 0 to 100, e.g. `priority 80`: under overload, lower priorities are shed first
───╯
"#,
    );
}

#[test]
fn duplicate_priority() {
    assert_renders(
        "event heavy\n  when sum(volume) > 125KB\n  priority 3\n  priority 5\n",
        r#"
[E0204] Error: duplicate `priority` clause
   ╭─[ rack.clarion:4:3 ]
   │
 3 │   priority 3
   │   ────┬───
   │       ╰───── first `priority` clause here
 4 │   priority 5
   │   ────┬───
   │       ╰───── second `priority` clause
   │
   │ Help: an event has one priority: write `priority` once
───╯
"#,
    );
}

#[test]
fn names_longer_than_64_characters() {
    let long = "a".repeat(65);
    assert_renders(
        &format!("event {long}\n  when sum(volume) > 1KB\n"),
        r#"
[E0208] Error: the name of an event is 65 characters long; at most 64 are allowed
   ╭─[ rack.clarion:1:7 ]
   │
 1 │ event aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
   │       ────────────────────────────────┬────────────────────────────────
   │                                       ╰────────────────────────────────── this name
   │
   │ Help: names become file names and labels: shorten it
───╯
"#,
    );
    // 64 is allowed; a policy's name is held to the same; a huge one is
    // refused with its length, not echoed in the message.
    assert!(check(&format!("event {}\n  when sum(volume) > 1KB\n", "a".repeat(64))).is_ok());
    let policy = clarion_lang::check_exports(&format!("export {long}\n  send headers to 127.0.0.1:4739\n"))
        .expect_err("refused");
    assert_eq!(policy.0[0].code, "E0208", "{policy:?}");
    assert!(
        policy.0[0].message.contains("export policy is 65 characters"),
        "{policy:?}"
    );
    let huge = check(&format!(
        "event {}\n  when sum(volume) > 1KB\n",
        "b".repeat(500_000)
    ))
    .expect_err("refused");
    assert!(huge.0[0].message.len() < 100, "{}", huge.0[0].message);
}

#[test]
fn alert_after_a_duration() {
    assert_renders(
        "event heavy\n  when sum(volume) > 125KB\n  every 100ms\n  alert after 300ms\n",
        r#"
[E0213] Error: `300ms` is a duration; alerts count windows
   ╭─[ rack.clarion:4:15 ]
   │
 4 │   alert after 300ms
   │               ──┬──
   │                 ╰──── a duration
   │
   │ Help: write a number of windows of the event's `every`: with `every 100ms`, `after 300ms` is `after 3 windows`
───╯
"#,
    );
}

#[test]
fn alert_without_windows() {
    assert_renders(
        "event heavy\n  when sum(volume) > 125KB\n  alert after 3\n  per src_ip\n",
        r#"
[E0213] Error: expected `windows` after `after 3`, found `per`
   ╭─[ rack.clarion:4:3 ]
   │
 4 │   per src_ip
   │   ─┬─
   │    ╰─── expected `windows` after `after 3`
   │
   │ Help: write a whole number of windows, e.g. `after 3 windows`: counts are in windows of the event's `every`
───╯
"#,
    );
}

#[test]
fn alert_misspelt_severity() {
    assert_renders(
        "event heavy\n  when sum(volume) > 125KB\n  alert after 3 windows, severity critcal\n",
        r#"
[E0213] Error: unknown severity `critcal`
   ╭─[ rack.clarion:3:35 ]
   │
 3 │   alert after 3 windows, severity critcal
   │                                   ───┬───
   │                                      ╰───── not a severity
   │
   │ Help: did you mean `critical`? Severities: `critical`, `error`, `warning`, `notice`, `info`
───╯
"#,
    );
}

#[test]
fn alert_misspelt_part() {
    assert_renders(
        "event heavy\n  when sum(volume) > 125KB\n  per src_ip\n  alert aftr 3 windows\n",
        r#"
[E0213] Error: expected `after N windows`, `resolve after N windows` or `severity NAME` after `alert`, found `aftr`
   ╭─[ rack.clarion:4:9 ]
   │
 4 │   alert aftr 3 windows
   │         ──┬─
   │           ╰─── expected `after N windows`, `resolve after N windows` or `severity NAME` after `alert`
   │
   │ Help: did you mean `after`?
───╯
"#,
    );
}

#[test]
fn alert_resolve_without_after() {
    assert_renders(
        "event heavy\n  when sum(volume) > 125KB\n  alert resolve 10 windows\n",
        r#"
[E0213] Error: expected `after` after `resolve`, found number `10`
   ╭─[ rack.clarion:3:17 ]
   │
 3 │   alert resolve 10 windows
   │                 ─┬
   │                  ╰── expected `after` after `resolve`
   │
   │ Help: write e.g. `resolve after 10 windows`
───╯
"#,
    );
}

#[test]
fn alert_part_twice() {
    assert_renders(
        "event heavy\n  when sum(volume) > 125KB\n  alert after 2 windows, severity info, after 3 windows\n",
        r#"
[E0213] Error: `after` twice in one `alert` clause
   ╭─[ rack.clarion:3:41 ]
   │
 3 │   alert after 2 windows, severity info, after 3 windows
   │         ──┬──                           ──┬──
   │           │                               ╰──── second `after`
   │           │
   │           ╰──────────────────────────────────── first `after` here
   │
   │ Help: write e.g. `alert after 3 windows, resolve after 10 windows, severity critical` (each part optional; counts in windows of the event's `every`)
───╯
"#,
    );
}

#[test]
fn alert_trailing_comma() {
    assert_renders(
        "event heavy\n  when sum(volume) > 125KB\n  alert after 2 windows,\n",
        r#"
[E0213] Error: expected `resolve after N windows` or `severity NAME` after the comma, found end of input
   ╭─[ rack.clarion:3:24 ]
   │
 3 │   alert after 2 windows,
   │                        ┬
   │                        ╰── expected `resolve after N windows` or `severity NAME` after the comma after this
   │
   │ Help: write e.g. `alert after 3 windows, resolve after 10 windows, severity critical` (each part optional; counts in windows of the event's `every`)
───╯
"#,
    );
}

#[test]
fn alert_after_zero_windows() {
    assert_renders(
        "event heavy\n  when sum(volume) > 125KB\n  alert after 0 windows, resolve after 2000000 windows\n",
        r#"
[E0371] Error: `after 0 windows` is not a count of windows
   ╭─[ rack.clarion:3:15 ]
   │
 3 │   alert after 0 windows, resolve after 2000000 windows
   │               ┬
   │               ╰── at least 1
   │
   │ Help: an alert fires at the earliest in the first window its predicate holds: leave `after` out (the default is `after 1 window`) to fire at once
───╯
[E0371] Error: `resolve after 2000000 windows` is more than 1000000 windows
   ╭─[ rack.clarion:3:40 ]
   │
 3 │   alert after 0 windows, resolve after 2000000 windows
   │                                        ───┬───
   │                                           ╰───── at most 1000000
   │
   │ Help: write e.g. `alert after 3 windows, resolve after 10 windows, severity critical` (each part optional; counts in windows of the event's `every`)
───╯
"#,
    );
}

#[test]
fn alert_clause_twice() {
    assert_renders(
        "event heavy\n  when sum(volume) > 125KB\n  alert after 2 windows\n  alert severity critical\n",
        r#"
[E0204] Error: duplicate `alert` clause
   ╭─[ rack.clarion:4:3 ]
   │
 3 │   alert after 2 windows
   │   ──┬──
   │     ╰──── first `alert` clause here
 4 │   alert severity critical
   │   ──┬──
   │     ╰──── second `alert` clause
   │
   │ Help: an event has one `alert` clause: put all its parts in it, e.g. `alert after 3 windows, severity critical`
───╯
"#,
    );
}
