//! The Clarion event language.
//!
//! A source holds events such as
//!
//! ```text
//! event rack_heavy_flows
//!   filter dst_ip in 10.0.128.0/24
//!   when sum(volume) > 125KB
//!   per 5tuple
//!   every 10ms
//! ```
//!
//! and export policies (Trident's match-action rules, in files of their own)
//! such as
//!
//! ```text
//! export web_headers
//!   filter proto = tcp and dst_port = 443
//!   send headers to collector 10.0.0.9
//! ```
//!
//! The pipeline is the usual one, one module per stage: `lexer` (text to
//! tokens), `parser` (tokens to the [`ast`]), `check` (the [`ast`] to the
//! lowered [`spec`] model: [`check`], [`lower`]), and `printer` (the
//! canonical form: `Display` for [`ast::File`]). Every stage reports problems as structured
//! [`Diagnostic`]s with byte spans; [`Diagnostics::render`] turns them into
//! readable reports. The language is described in `docs/language.md`, the
//! meaning of the lowered model in `docs/semantics.md`.
//!
//! No input makes any of these functions panic: nesting is limited to
//! [`MAX_DEPTH`] levels, and every value is range-checked.

pub mod ast;
mod check;
pub mod error;
mod lexer;
mod parser;
mod printer;
pub mod span;
pub mod spec;
mod suggest;
mod token;

pub use error::{codes, Diagnostic, Diagnostics, Label, MAX_RENDERED};
pub use parser::{MAX_DEPTH, MAX_NAME_LEN};

/// The text of an events file read as bytes. A leading byte-order mark
/// is kept (the lexer skips it, so spans stay offsets into the file).
///
/// Invalid UTF-8 is a diagnostic at the first bad byte, so that it shows
/// a line and a column like any other: render it against
/// `String::from_utf8_lossy(bytes)`, which is the same text up to there
/// and shows the bad bytes as `�`.
pub fn decode(bytes: &[u8]) -> Result<&str, Diagnostics> {
    let e = match std::str::from_utf8(bytes) {
        Ok(text) => return Ok(text),
        Err(e) => e,
    };
    let at = e.valid_up_to();
    let bad = match e.error_len() {
        Some(n) => bytes.get(at..at + n).unwrap_or_default(),
        None => bytes.get(at..).unwrap_or_default(),
    };
    let hex: Vec<String> = bad.iter().map(|b| format!("0x{b:02X}")).collect();
    let (what, here) = match (e.error_len(), hex.len()) {
        (None, _) => (
            format!("the text ends inside a character ({})", hex.join(" ")),
            "cut short",
        ),
        (Some(_), 1) => (format!("byte {} is not UTF-8", hex.join(" ")), "not UTF-8"),
        (Some(_), _) => (format!("bytes {} are not UTF-8", hex.join(" ")), "not UTF-8"),
    };
    // In the lossy text the bad bytes are one U+FFFD (3 bytes) at `at`.
    let d = Diagnostic::new(
        codes::INVALID_UTF8,
        format!("invalid UTF-8: {what}"),
        span::Span::new(at, at + 3),
    )
    .here(here)
    .help("events files are UTF-8 text: convert this one, e.g. `iconv -f latin1 -t utf-8 FILE`");
    Err(Diagnostics(vec![d]))
}

/// Parses `src` (syntax only: values are not range-checked).
pub fn parse(src: &str) -> Result<ast::File, Diagnostics> {
    let (file, diags) = parser::parse_partial(src);
    if diags.is_empty() {
        Ok(file)
    } else {
        Err(Diagnostics::sorted(diags))
    }
}

/// Checks a parsed file and lowers its events.
///
/// The tree should come from [`parse`]: a hand-built tree nested far
/// deeper than [`MAX_DEPTH`] may exhaust the stack.
pub fn lower(file: &ast::File) -> Result<Vec<spec::EventSpec>, Diagnostics> {
    let mut diags = Vec::new();
    let specs = check::lower_file(file, &mut diags);
    if diags.is_empty() {
        Ok(specs)
    } else {
        Err(Diagnostics::sorted(diags))
    }
}

/// Parses, checks and lowers a file of export policies (`export NAME ...`).
/// On failure, reports every problem found; an `event` there is one.
pub fn check_exports(src: &str) -> Result<Vec<spec::ExportSpec>, Diagnostics> {
    let (file, mut diags) = parser::parse_partial(src);
    let specs = check::lower_export_file(&file, &mut diags);
    if diags.is_empty() {
        Ok(specs)
    } else {
        Err(Diagnostics::sorted(diags))
    }
}

/// Parses, checks and lowers `src`. On failure, reports every problem
/// found: syntax errors, and semantic errors in the events that parsed.
pub fn check(src: &str) -> Result<Vec<spec::EventSpec>, Diagnostics> {
    let (file, mut diags) = parser::parse_partial(src);
    let specs = check::lower_file(&file, &mut diags);
    if diags.is_empty() {
        Ok(specs)
    } else {
        Err(Diagnostics::sorted(diags))
    }
}
