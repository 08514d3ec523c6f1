//! `check` (and rendering its diagnostics) never panics, whatever the input.

use clarion_lang::check;
use proptest::prelude::*;

fn paper() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/paper.clarion");
    std::fs::read_to_string(path).expect("examples/paper.clarion")
}

fn run(src: &str) {
    if let Err(d) = check(src) {
        assert!(!d.is_empty());
        let text = d.render("fuzz", src, false);
        assert!(text.contains("Error"));
        let _ = d.render("fuzz", src, true);
        for diag in d.iter() {
            let _ = diag.line_col(src);
            assert!(
                diag.span.start <= diag.span.end && diag.span.end <= src.len(),
                "{diag:?}"
            );
        }
    }
}

/// Pieces of the language, to make random sources that get past the lexer.
const VOCAB: &[&str] = &[
    "event",
    "e",
    "x-1",
    "filter",
    "when",
    "per",
    "every",
    "across",
    "hosts",
    "and",
    "or",
    "not",
    "in",
    "*",
    "=",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "+",
    "-",
    "/",
    "(",
    ")",
    ",",
    "..",
    "%",
    "&&",
    "||",
    "!",
    "sum",
    "count",
    "max",
    "stddev",
    "volume",
    "ttl",
    "ack",
    "ack_lastepoch",
    "is_lost",
    "src_ip",
    "dst_ip",
    "dst_port",
    "proto",
    "vlan",
    "tcp",
    "5tuple",
    "5",
    "0",
    "1.5",
    "65536",
    "10.0.128.0",
    "10.0.128.0/24",
    "2001:db8::",
    "/",
    "/33",
    "KB",
    "KiB",
    "Gbps",
    "ms",
    "s",
    "us",
    "\n",
    "#c\n",
    "18446744073709551616",
    "é",
    ":",
    "1.2.3",
    ".5",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn arbitrary_strings(s in any::<String>()) {
        run(&s);
    }

    #[test]
    fn ascii_noise(s in "[ -~\n]{0,300}") {
        run(&s);
    }

    #[test]
    fn token_soup(words in prop::collection::vec(prop::sample::select(VOCAB.to_vec()), 0..60), glue in any::<bool>()) {
        run(&words.join(if glue { "" } else { " " }));
    }

    #[test]
    fn mutated_paper_events(edits in prop::collection::vec((any::<usize>(), any::<usize>(), 0u8..4, any::<String>()), 1..6)) {
        let mut src = paper();
        for (at, len, kind, text) in edits {
            let mut at = at % (src.len() + 1);
            while !src.is_char_boundary(at) { at -= 1; }
            let mut end = (at + len % 40).min(src.len());
            while !src.is_char_boundary(end) { end -= 1; }
            match kind {
                0 => src.replace_range(at..end, ""),
                1 => src.insert_str(at, &text),
                2 => { let piece = src[at..end].to_string(); src.insert_str(at, &piece) }
                _ => src.replace_range(at..end, &text),
            }
        }
        run(&src);
    }
}

#[test]
fn pathological_inputs() {
    for src in [
        String::new(),
        "event".into(),
        "event e".into(),
        "event e when".into(),
        "(".repeat(100_000),
        format!("event e when {}", "(".repeat(100_000)),
        format!("event e when {}", "-".repeat(20_000)),
        format!("event e when {}", "not ".repeat(20_000)),
        format!("event e when sum({}1{}) > 1", "(".repeat(1000), ")".repeat(1000)),
        format!("event e when 1{}", " * 1".repeat(20_000)),
        format!("event e when x{}", " < x".repeat(1000)),
        format!("event e filter {}", "src_ip = * and ".repeat(5_000)),
        "event e when sum(volume) > 1\n".repeat(500),
        "a".repeat(100_000),
        format!("event e when {} > 1", "a".repeat(100_000)),
        "event e when sum(volume) > 1 every 18446744073709551615s".into(),
        "event e when sum(volume) > 1 every 99999999999999999999.5s".into(),
        "event e when sum(volume) > 18446744073709551615GiB".into(),
        "event e when sum(volume * 18446744073709551615GiB) > 1".into(),
        "event e per dst_ip/18446744073709551615 when 1".into(),
        "event e filter src_ip in 10.0.0.0/18446744073709551615 when 1".into(),
        "event e filter src_ip in ::/0 and dst_ip = 0.0.0.0/0 when 1".into(),
        "\u{feff}event e when 1".into(),
        "event e when 1\r\n".into(),
    ] {
        run(&src);
    }
}
