//! Structured diagnostics: what went wrong, where, and how to fix it.
//!
//! Every stage (lexer, parser, checker) reports problems as [`Diagnostic`]
//! values: a stable code, a one-line message, the byte span to underline,
//! optional secondary labels and an optional help text. Nothing here
//! formats for a terminal except [`Diagnostics::render`], which turns them
//! into `ariadne` reports; callers that want JSON or LSP output read the
//! fields directly.

use std::fmt;
use std::ops::{Deref, Range};

use ariadne::{Color, Config, IndexType, Report, ReportKind, Source};

use crate::span::Span;

/// Stable error codes, one per kind of mistake. `E01xx` come from the
/// lexer, `E02xx` from the parser, `E03xx` from the checker.
pub mod codes {
    pub const UNEXPECTED_CHAR: &str = "E0101";
    pub const BAD_NUMBER: &str = "E0102";
    pub const UNEXPECTED_TOKEN: &str = "E0201";
    pub const UNKNOWN_CLAUSE: &str = "E0202";
    pub const MISSING_WHEN: &str = "E0203";
    pub const DUPLICATE_CLAUSE: &str = "E0204";
    pub const CHAINED_COMPARISON: &str = "E0205";
    pub const TOO_DEEP: &str = "E0206";
    pub const UNKNOWN_UNIT: &str = "E0207";
    pub const BAD_EVENT_NAME: &str = "E0208";
    pub const UNKNOWN_FIELD: &str = "E0209";
    pub const BAD_ADDRESS: &str = "E0210";
    pub const BAD_SCOPE: &str = "E0211";
    pub const DUPLICATE_EVENT: &str = "E0301";
    pub const BAD_FILTER_VALUE: &str = "E0302";
    pub const HOST_BITS: &str = "E0303";
    pub const DUPLICATE_FIELD: &str = "E0304";
    pub const UNKNOWN_VARIABLE: &str = "E0310";
    pub const BARE_VARIABLE: &str = "E0311";
    pub const LASTEPOCH_IN_AGGREGATE: &str = "E0312";
    pub const UNKNOWN_FUNCTION: &str = "E0313";
    pub const NESTED_AGGREGATE: &str = "E0314";
    pub const DIVISION_IN_AGGREGATE: &str = "E0315";
    pub const BAD_PACKET_NUMBER: &str = "E0316";
    pub const MISPLACED_PERCENT: &str = "E0317";
    pub const MISPLACED_UNIT: &str = "E0318";
    pub const BAD_GRANULARITY: &str = "E0320";
    pub const BAD_QUORUM: &str = "E0340";
    pub const UNKNOWN_EVENT: &str = "E0350";
    pub const NOT_ON_DEMAND: &str = "E0351";
    pub const DRILL_DOWN_CYCLE: &str = "E0352";
    pub const BAD_NARROWING: &str = "E0353";
    pub const BAD_DURATION: &str = "E0354";
    pub const BAD_ON_DEMAND: &str = "E0355";
    pub const DRILL_DOWN_SCOPE: &str = "E0356";
    pub const BAD_INTERVAL: &str = "E0330";
}

/// A location attached to a diagnostic ("first defined here"). A label on
/// the diagnostic's own span gives the text under its underline (the
/// message is used otherwise).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    pub span: Range<usize>,
    pub message: String,
}

/// One problem in the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// A stable code from [`codes`].
    pub code: &'static str,
    /// One line, lower case, no trailing period.
    pub message: String,
    /// Bytes of the source to underline.
    pub span: Range<usize>,
    pub labels: Vec<Label>,
    /// How to fix it, when we can tell.
    pub help: Option<String>,
}

impl Diagnostic {
    pub(crate) fn new(code: &'static str, message: impl Into<String>, span: Span) -> Diagnostic {
        Diagnostic {
            code,
            message: message.into(),
            span: span.range(),
            labels: Vec::new(),
            help: None,
        }
    }

    pub(crate) fn label(mut self, span: Span, message: impl Into<String>) -> Diagnostic {
        self.labels.push(Label {
            span: span.range(),
            message: message.into(),
        });
        self
    }

    /// The text under the primary underline (short; the message is the headline).
    pub(crate) fn here(self, message: impl Into<String>) -> Diagnostic {
        let span = Span::from(self.span.clone());
        self.label(span, message)
    }

    pub(crate) fn help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    /// 1-based line and column (in characters) of the start of the span.
    pub fn line_col(&self, src: &str) -> (usize, usize) {
        let at = floor_char_boundary(src, self.span.start);
        let before = &src[..at];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = before[line_start..].chars().count() + 1;
        (line, col)
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error[{}]: {}", self.code, self.message)
    }
}

/// All the problems found in one source, in source order. This is the
/// crate's error type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", summary(.0))]
pub struct Diagnostics(pub Vec<Diagnostic>);

fn summary(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl Deref for Diagnostics {
    type Target = [Diagnostic];

    fn deref(&self) -> &[Diagnostic] {
        &self.0
    }
}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl Diagnostics {
    /// Sorts by position (stable, so diagnostics at one place keep their order).
    pub(crate) fn sorted(mut diags: Vec<Diagnostic>) -> Diagnostics {
        diags.sort_by_key(|d| d.span.start);
        Diagnostics(diags)
    }

    /// Renders every diagnostic as an `ariadne` report against `src`: code,
    /// message, `source_name:line:col`, the source line with the span
    /// underlined, secondary labels, and the help text.
    pub fn render(&self, source_name: &str, src: &str, color: bool) -> String {
        let mut out = Vec::new();
        let config = Config::default()
            .with_color(color)
            .with_index_type(IndexType::Byte);
        let source = Source::from(src);
        for d in &self.0 {
            let span = visible_span(src, d.span.clone());
            // A label on the primary span replaces the message under the underline.
            let primary = d
                .labels
                .iter()
                .find(|l| l.span == d.span)
                .map_or(&d.message, |l| &l.message);
            let mut report = Report::build(ReportKind::Error, (source_name, span.clone()))
                .with_config(config)
                .with_code(d.code)
                .with_message(&d.message)
                .with_label(
                    ariadne::Label::new((source_name, span))
                        .with_message(primary)
                        .with_color(Color::Red)
                        .with_order(0),
                );
            let secondary = d.labels.iter().filter(|l| l.span != d.span);
            for (i, l) in secondary.enumerate() {
                let order = i32::try_from(i).unwrap_or(i32::MAX).saturating_add(1);
                report = report.with_label(
                    ariadne::Label::new((source_name, visible_span(src, l.span.clone())))
                        .with_message(&l.message)
                        .with_color(Color::Blue)
                        .with_order(order),
                );
            }
            if let Some(help) = &d.help {
                report = report.with_help(help);
            }
            // Writing to a Vec cannot fail; a failure would only lose this report.
            let _ = report.finish().write((source_name, &source), &mut out);
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

fn floor_char_boundary(src: &str, mut at: usize) -> usize {
    at = at.min(src.len());
    while !src.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Clamps a span to the source and to `char` boundaries, and widens an
/// empty span to one character so that there is something to underline.
fn visible_span(src: &str, span: Range<usize>) -> Range<usize> {
    let start = floor_char_boundary(src, span.start);
    let mut end = floor_char_boundary(src, span.end.max(start));
    if end == start {
        if let Some(c) = src[start..].chars().next() {
            end = start + c.len_utf8();
        } else if let Some(c) = src[..start].chars().next_back() {
            return start - c.len_utf8()..start;
        }
    }
    start..end
}
