//! The console reads fired events from `/v1/reports` with its own
//! server-sent-events parser (console/src/sse.ts; EventSource cannot send
//! the token). Checked on generated streams: messages (named or not, data
//! of several lines, empty lines, `:` and leading spaces, non-ASCII) and
//! comments, with `\n`, `\r\n` or `\r` line ends, encoded here as the
//! format says, then cut into chunks anywhere (a `\r\n` too) and fed to
//! the parser: it must see exactly what was encoded, in order.

mod common;

use common::{run_node, Lcg};
use serde_json::{json, Value};

const WORDS: &[&str] = &[
    "report",
    "x",
    "a:b",
    " lead",
    "ünï",
    "😀",
    "{\"v\":1}",
    "",
    "data: no",
    ":colon",
];

fn text(rng: &mut Lcg, max_words: u64) -> String {
    (0..rng.next(max_words + 1))
        .map(|_| WORDS[rng.next(WORDS.len() as u64) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn the_parser_sees_what_was_sent_however_it_is_cut() {
    let mut rng = Lcg(0x55e0_0001);
    let mut cases = Vec::new();
    let mut wanted = Vec::new();
    for _ in 0..500 {
        // One line end per stream: a `\r` followed by an empty line's `\n` would read as one `\r\n`.
        let eol = ["\n", "\r\n", "\r"][rng.next(3) as usize];
        let mut stream = String::new();
        let mut want = Vec::new();
        for _ in 0..1 + rng.next(6) {
            if rng.next(4) == 0 {
                // A comment; the parser drops the spaces after the colon.
                let c = text(&mut rng, 3).trim_start().to_string();
                stream.push_str(&format!(":{}{c}{eol}", if rng.next(2) == 0 { " " } else { "" }));
                want.push(json!(["comment", c]));
                continue;
            }
            let name = if rng.next(3) == 0 {
                String::new()
            } else {
                text(&mut rng, 2)
            };
            if !name.is_empty() {
                stream.push_str(&format!("event: {name}{eol}"));
            }
            let lines: Vec<String> = (0..1 + rng.next(3)).map(|_| text(&mut rng, 4)).collect();
            for l in &lines {
                // One space after the colon is dropped by the reader: without it only when the value starts with none.
                let sep = if l.starts_with(' ') || rng.next(2) == 0 {
                    ": "
                } else {
                    ":"
                };
                stream.push_str(&format!("data{sep}{l}{eol}"));
            }
            stream.push_str(eol);
            let event = if name.is_empty() {
                "message".to_string()
            } else {
                name
            };
            want.push(json!(["message", event, lines.join("\n")]));
        }
        let chars = stream.chars().count() as u64;
        let mut cuts: Vec<u64> = (0..rng.next(12)).map(|_| rng.next(chars + 1)).collect();
        cuts.sort_unstable();
        cases.push(json!({ "text": stream, "cuts": cuts }));
        wanted.push(Value::Array(want));
    }
    let Some(out) = run_node("sse.mjs", &Value::Array(cases.clone()).to_string()) else {
        return;
    };
    let got: Vec<Value> = serde_json::from_str(&out).expect("JSON");
    assert_eq!(got.len(), wanted.len());
    for ((case, want), got) in cases.iter().zip(&wanted).zip(&got) {
        assert_eq!(got, want, "{case}");
    }
}
