//! Every ```clarion block of docs/language.md (and of the README) is
//! accepted by `check`, and every ```clarion-error block is refused (with
//! the code its comment names, when it names one).

use clarion_lang::check;

struct Block {
    line: usize,
    must_fail: bool,
    text: String,
}

fn blocks() -> Vec<Block> {
    blocks_of("docs/language.md")
}

fn blocks_of(relative: &str) -> Vec<Block> {
    let path = format!("{}/../../{relative}", env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    let mut current: Option<Block> = None;
    for (i, line) in doc.lines().enumerate() {
        match (&mut current, line.trim_end()) {
            (None, "```clarion") => {
                current = Some(Block {
                    line: i + 1,
                    must_fail: false,
                    text: String::new(),
                })
            }
            (None, "```clarion-error") => {
                current = Some(Block {
                    line: i + 1,
                    must_fail: true,
                    text: String::new(),
                })
            }
            (Some(_), "```") => out.extend(current.take()),
            (Some(b), _) => {
                b.text.push_str(line);
                b.text.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "unclosed block in {relative}");
    out
}

/// The code named in a block's comment, as in `# Error E0203: ...`.
fn expected_code(text: &str) -> Option<&str> {
    let at = text.find("Error E")?;
    text.get(at + 6..at + 11)
}

#[test]
fn doc_examples_check_as_marked() {
    let blocks = blocks();
    assert!(blocks.iter().filter(|b| !b.must_fail).count() >= 10);
    assert!(blocks.iter().filter(|b| b.must_fail).count() >= 10);
    for b in &blocks {
        match (check(&b.text), b.must_fail) {
            (Ok(specs), false) => assert!(!specs.is_empty(), "block at line {} has no event", b.line),
            (Err(d), false) => panic!(
                "block at line {} fails:\n{}",
                b.line,
                d.render("language.md", &b.text, false)
            ),
            (Ok(_), true) => panic!("block at line {} should fail but checks", b.line),
            (Err(d), true) => {
                if let Some(code) = expected_code(&b.text) {
                    assert!(
                        d.iter().any(|d| d.code == code),
                        "block at line {}: expected {code}, got:\n{}",
                        b.line,
                        d.render("language.md", &b.text, false)
                    );
                }
            }
        }
    }
}

#[test]
fn doc_examples_round_trip_through_the_printer() {
    for b in blocks().iter().filter(|b| !b.must_fail) {
        let file = clarion_lang::parse(&b.text).unwrap();
        let printed = file.to_string();
        let again = clarion_lang::parse(&printed).unwrap();
        assert!(
            file.eq_ignoring_spans(&again),
            "block at line {}:\n{printed}",
            b.line
        );
        assert_eq!(clarion_lang::lower(&again).unwrap(), check(&b.text).unwrap());
    }
}

#[test]
fn readme_examples_check() {
    let blocks = blocks_of("README.md");
    assert!(!blocks.is_empty(), "the README shows the language");
    for b in blocks {
        let specs = check(&b.text).unwrap_or_else(|d| {
            panic!(
                "README block at line {}:\n{}",
                b.line,
                d.render("README.md", &b.text, false)
            )
        });
        assert_eq!(specs.len(), 5, "the README shows the language in five examples");
    }
}
