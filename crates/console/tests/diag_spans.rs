//! The console marks the spans of the language's errors by reading them
//! back from the rendered diagnostics (the API sends only the rendering).
//! Checked against the diagnostics' own spans (clarion-lang), on broken
//! events written by hand and on hundreds made by deleting or doubling a
//! character of the examples' events, some after lines of non-ASCII
//! comments (columns count characters, the textarea UTF-16 units).

mod common;

use common::{run_node, Lcg};
use serde_json::{json, Value};

const HAND: &[&str] = &[
    "event x\n  when sum(volum) > 1\n  across hosts\n",
    "event x\n  when sum(volume) > 125kb\n",
    "event x\n  when 1KB < sum(volume) < 2KB\n",
    "event x\n  filter dst_port = 80\n  when sum(volume) > 1\n  per 5tupl\n",
    "# café ≥ naïve 😀\nevent é\n  when count(packets) > 1\n",
    "# 😀😀 ü\n# ∑\nevent x\n  when max(ttl) > 1\n  every 7parsecs\n",
    "event a\n  when sum(volume) > 1\nevent a\n  when sum(volume) > 2\n",
    "event x\n  when sum(volume) >\n",
];

/// A diagnostic's span as the page must mark it: UTF-16 offsets.
fn utf16(src: &str, byte: usize) -> usize {
    src[..byte.min(src.len())].encode_utf16().count()
}

fn mutations(n: usize) -> Vec<String> {
    let examples: Vec<String> = ["demo", "paper", "network", "priority", "drilldown"]
        .iter()
        .filter_map(|e| {
            std::fs::read_to_string(format!(
                "{}/../../examples/{e}.clarion",
                env!("CARGO_MANIFEST_DIR")
            ))
            .ok()
        })
        .collect();
    assert!(!examples.is_empty(), "examples/*.clarion");
    let prefixes = ["", "# ünïcödé 😀 comment\n", "# 𝔘𝔫𝔦 ∀x\n# é\n"];
    let mut rng = Lcg(0x5eed_c0de);
    let mut out = Vec::new();
    while out.len() < n {
        let src = &examples[rng.next(examples.len() as u64) as usize];
        let chars: Vec<(usize, char)> = src.char_indices().collect();
        let (at, c) = chars[rng.next(chars.len() as u64) as usize];
        let line_start = src[..at].rfind('\n').map_or(0, |i| i + 1);
        // Comments accept anything: a change there is no error.
        if !c.is_ascii_alphanumeric() || src[line_start..].trim_start().starts_with('#') {
            continue;
        }
        let mut m = String::from(prefixes[rng.next(prefixes.len() as u64) as usize]);
        m.push_str(&src[..at]);
        if rng.next(2) == 0 {
            m.push_str(&src[at + c.len_utf8()..]); // deleted
        } else {
            m.push(c);
            m.push_str(&src[at..]); // doubled
        }
        out.push(m);
    }
    out
}

fn diagnostics(src: &str) -> Option<clarion_lang::Diagnostics> {
    match clarion_lang::parse(src) {
        Err(d) => Some(d),
        Ok(file) => clarion_lang::lower(&file).err(),
    }
}

#[test]
fn the_marked_spans_are_the_diagnostics_spans() {
    let sources: Vec<String> = HAND.iter().map(|s| s.to_string()).chain(mutations(600)).collect();
    let mut cases = Vec::new();
    let mut wanted = Vec::new();
    for src in &sources {
        let Some(d) = diagnostics(src) else { continue };
        let rendered = d.render("request", src, false);
        cases.push(json!({ "source": src, "rendered": rendered }));
        wanted.push((src.clone(), rendered, d));
    }
    assert!(cases.len() > 200, "most mutations are errors: {}", cases.len());
    let Some(out) = run_node("diag-spans.mjs", &Value::Array(cases).to_string()) else {
        return;
    };
    let got: Vec<Vec<(usize, usize)>> = serde_json::from_str(&out).expect("JSON");
    assert_eq!(got.len(), wanted.len());
    let mut exact_ends = 0;
    for ((src, rendered, d), spans) in wanted.iter().zip(&got) {
        let shown: Vec<_> = d.0.iter().take(clarion_lang::MAX_RENDERED).collect();
        assert_eq!(
            spans.len(),
            shown.len(),
            "one span per diagnostic:\n{src}\n{rendered}"
        );
        for (diag, &(start, end)) in shown.iter().zip(spans) {
            let want_start = utf16(src, diag.span.start);
            assert_eq!(start, want_start, "start of {diag}:\n{src}\n{rendered}");
            // The end is read from the underline: exact for a one-line span
            // of a line ariadne shows whole (≤ 160 characters, no tabs).
            let line_of = |b: usize| src[..b.min(src.len())].matches('\n').count();
            let line = src.lines().nth(line_of(diag.span.start)).unwrap_or_default();
            let one_line = line_of(diag.span.start) == line_of(diag.span.end);
            if one_line && !diag.span.is_empty() && line.chars().count() <= 160 && !line.contains('\t') {
                assert_eq!(
                    end,
                    utf16(src, diag.span.end),
                    "end of {diag}:\n{src}\n{rendered}"
                );
                exact_ends += 1;
            } else {
                assert!(end >= start, "{diag}");
            }
        }
    }
    eprintln!("{} sources, {exact_ends} ends checked exactly", got.len());
    assert!(exact_ends > 200, "{exact_ends} ends checked exactly");
}
