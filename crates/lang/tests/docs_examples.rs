//! Every ```clarion block of docs/language.md, of the pages of
//! docs/variables/ (and of the README) is accepted by `check`, and every
//! ```clarion-error block is refused (with the code its comment names, when
//! it names one); the same for the ```clarion-export blocks of
//! docs/exports.md and `check_exports`. Failures name the file and line of
//! the block.

use clarion_lang::spec::{BaseVar, EventSpec, Scope};
use clarion_lang::{check, Diagnostics};

struct Block {
    /// The file, relative to the workspace root.
    file: String,
    line: usize,
    must_fail: bool,
    /// The block's lines, after as many empty lines as precede them in the
    /// file, so diagnostics point at the file's own lines.
    text: String,
}

impl Block {
    /// `docs/language.md:42`, for failure messages.
    fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    /// The diagnostics of the block, rendered against its file name.
    fn render(&self, d: &Diagnostics) -> String {
        d.render(&self.file, &self.text, false)
    }
}

fn root() -> String {
    format!("{}/../..", env!("CARGO_MANIFEST_DIR"))
}

fn blocks() -> Vec<Block> {
    blocks_of("docs/language.md")
}

fn blocks_of(relative: &str) -> Vec<Block> {
    blocks_marked(relative, "clarion")
}

/// The blocks of `relative` marked ```` ```MARK ```` (accepted) and
/// ```` ```MARK-error ```` (refused).
fn blocks_marked(relative: &str, mark: &str) -> Vec<Block> {
    let (ok, error) = (format!("```{mark}"), format!("```{mark}-error"));
    let path = format!("{}/{relative}", root());
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    let mut current: Option<Block> = None;
    for (i, line) in doc.lines().enumerate() {
        let open = |must_fail| {
            Some(Block {
                file: relative.to_string(),
                line: i + 1,
                must_fail,
                text: "\n".repeat(i + 1),
            })
        };
        match (&mut current, line.trim_end()) {
            (None, l) if l == ok => current = open(false),
            (None, l) if l == error => current = open(true),
            (Some(_), "```") => out.extend(current.take()),
            (Some(b), _) => {
                b.text.push_str(line);
                b.text.push('\n');
            }
            (None, _) => {}
        }
    }
    if let Some(b) = current {
        panic!("{}: unclosed block", b.at());
    }
    out
}

/// The pages of docs/variables/, sorted, relative to the workspace root.
fn variable_pages() -> Vec<String> {
    let dir = format!("{}/docs/variables", root());
    let mut pages: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/variables/{name}"))
        .collect();
    pages.sort();
    pages
}

/// The code named in a block's comment, as in `# Error E0203: ...`.
fn expected_code(text: &str) -> Option<&str> {
    let at = text.find("Error E")?;
    text.get(at + 6..at + 11)
}

/// Checks every block as marked; gives the specs of the accepted ones, with their blocks.
fn check_as_marked(blocks: &[Block]) -> Vec<(&Block, Vec<EventSpec>)> {
    let mut accepted = Vec::new();
    for b in blocks {
        match (check(&b.text), b.must_fail) {
            (Ok(specs), false) => {
                assert!(!specs.is_empty(), "{}: block has no event", b.at());
                accepted.push((b, specs));
            }
            (Err(d), false) => panic!("{}: block fails:\n{}", b.at(), b.render(&d)),
            (Ok(_), true) => panic!("{}: block should fail but checks", b.at()),
            (Err(d), true) => {
                if let Some(code) = expected_code(&b.text) {
                    assert!(
                        d.iter().any(|d| d.code == code),
                        "{}: expected {code}, got:\n{}",
                        b.at(),
                        b.render(&d)
                    );
                }
            }
        }
    }
    accepted
}

/// Printing an accepted block and parsing it again gives the same tree and the same specs.
fn round_trip(blocks: &[Block]) {
    for b in blocks.iter().filter(|b| !b.must_fail) {
        let file = clarion_lang::parse(&b.text).expect("the block checks");
        let printed = file.to_string();
        let again = clarion_lang::parse(&printed).expect("printed text parses");
        assert!(
            file.eq_ignoring_spans(&again),
            "{}: printed differently:\n{printed}",
            b.at()
        );
        assert_eq!(
            clarion_lang::lower(&again).expect("printed text checks"),
            check(&b.text).expect("the block checks"),
            "{}: lowers differently after printing",
            b.at()
        );
    }
}

/// docs/exports.md: policies accepted and refused as marked, and printed
/// back to the same tree and the same specs.
#[test]
fn export_policy_examples_check_as_marked() {
    // Its events (`then capture`) check as events do.
    let events = blocks_marked("docs/exports.md", "clarion");
    assert!(!events.is_empty());
    let captures = check_as_marked(&events);
    assert!(captures
        .iter()
        .any(|(_, specs)| specs.iter().any(|s| s.capture.is_some())));
    round_trip(&events);
    let blocks = blocks_marked("docs/exports.md", "clarion-export");
    assert!(blocks.iter().filter(|b| !b.must_fail).count() >= 2);
    assert!(blocks.iter().filter(|b| b.must_fail).count() >= 5);
    for b in &blocks {
        match (clarion_lang::check_exports(&b.text), b.must_fail) {
            (Ok(specs), false) => {
                assert!(!specs.is_empty(), "{}: block has no policy", b.at());
                let printed = clarion_lang::parse(&b.text)
                    .expect("the block parses")
                    .to_string();
                assert_eq!(
                    clarion_lang::check_exports(&printed).expect("printed text checks"),
                    specs,
                    "{}: lowers differently after printing:\n{printed}",
                    b.at()
                );
            }
            (Err(d), false) => panic!("{}: block fails:\n{}", b.at(), b.render(&d)),
            (Ok(_), true) => panic!("{}: block should fail but checks", b.at()),
            (Err(d), true) => {
                if let Some(code) = expected_code(&b.text) {
                    assert!(
                        d.iter().any(|d| d.code == code),
                        "{}: expected {code}, got:\n{}",
                        b.at(),
                        b.render(&d)
                    );
                }
            }
        }
    }
}

#[test]
fn doc_examples_check_as_marked() {
    let blocks = blocks();
    assert!(blocks.iter().filter(|b| !b.must_fail).count() >= 10);
    assert!(blocks.iter().filter(|b| b.must_fail).count() >= 10);
    check_as_marked(&blocks);
}

/// The section on `across hosts` shows a network-wide event that checks.
#[test]
fn doc_examples_show_a_network_wide_event() {
    let blocks = blocks();
    let network: Vec<String> = check_as_marked(&blocks)
        .into_iter()
        .flat_map(|(_, specs)| specs)
        .filter(|s| s.scope == Scope::Network)
        .map(|s| s.name)
        .collect();
    assert_eq!(network, ["service_load_spike"]);
}

#[test]
fn doc_examples_round_trip_through_the_printer() {
    round_trip(&blocks());
}

#[test]
fn variable_pages_check_as_marked() {
    let pages = variable_pages();
    assert!(!pages.is_empty(), "docs/variables/ has no pages");
    for page in &pages {
        let blocks = blocks_of(page);
        check_as_marked(&blocks);
        round_trip(&blocks);
    }
}

/// One page per variable of the language, each with an accepted example
/// that reads it, and no page for a variable that does not exist; the
/// index links every page.
#[test]
fn every_variable_has_a_page_with_an_example() {
    let pages = variable_pages();
    let index_path = "docs/variables/README.md";
    assert!(pages.iter().any(|p| p == index_path), "{index_path} is missing");
    let index = std::fs::read_to_string(format!("{}/{index_path}", root())).expect("the index page");
    for v in BaseVar::ALL {
        let page = format!("docs/variables/{}.md", v.name());
        assert!(pages.contains(&page), "{page} is missing");
        assert!(
            index.contains(&format!("({}.md)", v.name())),
            "{index_path} does not link {page}"
        );
        let blocks = blocks_of(&page);
        let reads = check_as_marked(&blocks).into_iter().any(|(_, specs)| {
            specs.iter().any(|s| {
                let mut found = false;
                s.predicate.visit_vars(&mut |x| found |= x.base == v);
                found
            })
        });
        assert!(reads, "{page}: no `clarion` example reads `{}`", v.name());
    }
    for page in pages.iter().filter(|p| *p != index_path) {
        let name = page.trim_start_matches("docs/variables/").trim_end_matches(".md");
        assert!(
            BaseVar::from_name(name).is_some(),
            "{page}: not a variable of the language"
        );
    }
}

#[test]
fn readme_examples_check() {
    let blocks = blocks_of("README.md");
    assert_eq!(
        blocks.len(),
        2,
        "the language in five examples, then a drill-down"
    );
    let specs: Vec<_> = blocks
        .iter()
        .map(|b| {
            check(&b.text).unwrap_or_else(|d| panic!("{}: README block fails:\n{}", b.at(), b.render(&d)))
        })
        .collect();
    assert_eq!(
        specs[0].len(),
        5,
        "{}: the README shows the language in five examples",
        blocks[0].at()
    );
    assert_eq!(
        specs[1].len(),
        2,
        "{}: a drill-down and its event",
        blocks[1].at()
    );
    assert_eq!(specs[1][0].drill_downs.len(), 1);
}

#[test]
fn manager_page_and_network_example_check() {
    let blocks = blocks_of("docs/manager.md");
    assert!(!blocks.is_empty(), "docs/manager.md shows a network-wide event");
    for (b, specs) in check_as_marked(&blocks) {
        assert!(
            specs
                .iter()
                .all(|s| s.scope == clarion_lang::spec::Scope::Network),
            "{}: the manager's page shows network-wide events",
            b.at()
        );
    }
    let path = format!("{}/examples/network.clarion", root());
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let specs = check(&src).unwrap_or_else(|_| panic!("{path} does not check"));
    assert!(specs
        .iter()
        .all(|s| s.scope == clarion_lang::spec::Scope::Network));
}

/// Every examples/*.clarion checks: an events file with `check`, a file
/// of export policies (one with an `export` and no `event`) with
/// `check_exports`; and prints back to the same specs.
#[test]
fn example_files_check() {
    let dir = format!("{}/examples", root());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "clarion"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    for path in &files {
        let src = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = path.display().to_string();
        let file = clarion_lang::parse(&src).unwrap_or_else(|d| panic!("{}", d.render(&name, &src, false)));
        if file.events.is_empty() && !file.exports.is_empty() {
            let specs = clarion_lang::check_exports(&src)
                .unwrap_or_else(|d| panic!("{}", d.render(&name, &src, false)));
            assert_eq!(specs.len(), file.exports.len(), "{name}");
            continue;
        }
        let specs = check(&src).unwrap_or_else(|d| panic!("{}", d.render(&name, &src, false)));
        assert!(!specs.is_empty(), "{name}: no event");
        let again = check(&file.to_string()).unwrap_or_else(|d| panic!("{name} printed: {d}"));
        assert_eq!(again, specs, "{name}: lowers differently after printing");
    }
}
