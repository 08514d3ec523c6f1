//! Structured diagnostics: what went wrong, where, and how to fix it.
//!
//! Every stage (lexer, parser, checker) reports problems as [`Diagnostic`]
//! values: a stable code, a one-line message, the byte span to underline,
//! optional secondary labels and an optional help text. Nothing here
//! formats for a terminal except [`Diagnostics::render`], which turns them
//! into `ariadne` reports; callers that want JSON or LSP output read the
//! fields directly.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Deref, Range};

use ariadne::{Color, Config, IndexType, Report, ReportKind, Source};

use crate::span::Span;

/// Stable error codes, one per kind of mistake. `E01xx` come from the
/// lexer, `E02xx` from the parser, `E03xx` from the checker.
pub mod codes {
    pub const UNEXPECTED_CHAR: &str = "E0101";
    pub const BAD_NUMBER: &str = "E0102";
    pub const INVALID_UTF8: &str = "E0103";
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
    pub const MISSING_SEND: &str = "E0212";
    pub const BAD_ALERT: &str = "E0213";
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
    pub const BAD_CAPTURE: &str = "E0357";
    pub const BAD_INTERVAL: &str = "E0330";
    pub const BAD_SEND: &str = "E0360";
    pub const DUPLICATE_POLICY: &str = "E0361";
    pub const MISPLACED_ITEM: &str = "E0362";
    pub const BAD_PRIORITY: &str = "E0370";
    pub const BAD_ALERT_COUNT: &str = "E0371";
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
    /// The same diagnostic under another code (a generic "expected"
    /// message that belongs to a specific mistake).
    pub(crate) fn with_code(self, code: &'static str) -> Diagnostic {
        Diagnostic { code, ..self }
    }

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

/// One line per diagnostic, the first [`MAX_RENDERED`] only (like [`Diagnostics::render`]).
fn summary(diags: &[Diagnostic]) -> String {
    let mut lines: Vec<String> = diags
        .iter()
        .take(MAX_RENDERED)
        .map(|d| format!("error[{}]: {}", d.code, clip(&d.message)))
        .collect();
    if diags.len() > MAX_RENDERED {
        lines.push(more(diags.len() - MAX_RENDERED, diags.len()));
    }
    lines.join("\n")
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

/// How many diagnostics [`Diagnostics::render`] shows; one closing line
/// counts the rest. Nobody reads thousands of reports, and rendering them
/// all would cost time and memory in proportion (the manager renders what
/// its API refuses, on its own thread).
pub const MAX_RENDERED: usize = 50;

/// A source line longer than this (in characters) is shown as windows
/// around the underlined places: printed whole under each of its errors, a
/// long line with many errors made the output quadratic.
const LONG_LINE: usize = 160;

/// Characters kept on each side of an underlined place in a long line.
const CONTEXT: usize = 40;

/// Messages, labels and help texts are cut to this many characters: they
/// quote the source, and a name can be megabytes long.
const MAX_TEXT: usize = 300;

impl Diagnostics {
    /// Sorts by position (stable, so diagnostics at one place keep their order).
    pub(crate) fn sorted(mut diags: Vec<Diagnostic>) -> Diagnostics {
        diags.sort_by_key(|d| d.span.start);
        Diagnostics(diags)
    }

    /// Renders the first [`MAX_RENDERED`] diagnostics as `ariadne` reports
    /// against `src`, then a line counting the others ("and 3,950 more
    /// errors"): see [`Diagnostics::render_first`].
    pub fn render(&self, source_name: &str, src: &str, color: bool) -> String {
        self.render_first(MAX_RENDERED, source_name, src, color)
    }

    /// Renders the first `max` diagnostics as `ariadne` reports against
    /// `src`: code, message, `source_name:line:col`, the source line with the
    /// span underlined, secondary labels, and the help text; then, if some
    /// were left out, a line counting them.
    ///
    /// The output is bounded whatever the source: a line longer than 160
    /// characters is shown as windows of 40 characters around each
    /// underlined place (`…` marks what is left out), and messages are cut
    /// at 300 characters. Line and column are the source's, counting lines
    /// at `\n`.
    pub fn render_first(&self, max: usize, source_name: &str, src: &str, color: bool) -> String {
        let mut out = String::new();
        let config = Config::default()
            .with_color(color)
            .with_index_type(IndexType::Byte);
        let text = Text::new(src);
        // Built once: a `Source` indexes every line of the text.
        let whole = Source::from(text.plain.as_ref());
        for d in self.0.iter().take(max) {
            let spans: Vec<Range<usize>> = std::iter::once(&d.span)
                .chain(d.labels.iter().map(|l| &l.span))
                .map(|s| visible_span(src, s.clone()))
                .collect();
            let mut one = Vec::new();
            // The column `ariadne` puts in the heading: it counts in the
            // text it is given, where lines may be cut or characters blanked.
            let shown = if text.fits(&spans) {
                draw(d, source_name, config, &spans, &whole, &mut one);
                text.column_in(&text.plain, spans[0].start)
            } else {
                let ex = Excerpt::new(&text, &spans);
                let mapped: Vec<Range<usize>> = spans.iter().map(|s| ex.at(s.start)..ex.at(s.end)).collect();
                draw(
                    d,
                    source_name,
                    config,
                    &mapped,
                    &Source::from(ex.text.as_str()),
                    &mut one,
                );
                ex.column(mapped[0].start)
            };
            let mut one = String::from_utf8_lossy(&one).into_owned();
            let at = spans[0].start;
            let (line, col) = (text.line_of(at) + 1, text.column_in(src, at));
            if shown != col {
                let wrong = format!("[ {source_name}:{line}:{shown} ]");
                one = one.replacen(&wrong, &format!("[ {source_name}:{line}:{col} ]"), 1);
            }
            out.push_str(&one);
        }
        let left = self.0.len().saturating_sub(max);
        if left > 0 {
            out.push_str(&more(left, self.0.len()));
            out.push('\n');
        }
        out
    }
}

/// "and 3,950 more errors (4,000 in all)".
fn more(left: usize, all: usize) -> String {
    let noun = if left == 1 { "error" } else { "errors" };
    format!("and {} more {noun} ({} in all)", thousands(left), thousands(all))
}

/// `n` with a comma every three digits.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `s`, cut to [`MAX_TEXT`] characters.
fn clip(s: &str) -> Cow<'_, str> {
    match s.char_indices().nth(MAX_TEXT) {
        Some((at, _)) if s.len() > MAX_TEXT => Cow::Owned(format!("{}…", &s[..at])),
        _ => Cow::Borrowed(s),
    }
}

/// Writes one diagnostic's report; `spans` holds its primary span, then
/// its labels' spans, as offsets into `source`.
fn draw(
    d: &Diagnostic,
    source_name: &str,
    config: Config,
    spans: &[Range<usize>],
    source: &Source<&str>,
    out: &mut Vec<u8>,
) {
    let Some(span) = spans.first().cloned() else {
        return;
    };
    // A label on the primary span replaces the message under the underline.
    let primary = d
        .labels
        .iter()
        .find(|l| l.span == d.span)
        .map_or(&d.message, |l| &l.message);
    let mut report = Report::build(ReportKind::Error, (source_name, span.clone()))
        .with_config(config)
        .with_code(d.code)
        .with_message(clip(&d.message))
        .with_label(
            ariadne::Label::new((source_name, span))
                .with_message(clip(primary))
                .with_color(Color::Red)
                .with_order(0),
        );
    let secondary = d.labels.iter().zip(&spans[1..]).filter(|(l, _)| l.span != d.span);
    for (i, (l, at)) in secondary.enumerate() {
        let order = i32::try_from(i).unwrap_or(i32::MAX).saturating_add(1);
        report = report.with_label(
            ariadne::Label::new((source_name, at.clone()))
                .with_message(clip(&l.message))
                .with_color(Color::Blue)
                .with_order(order),
        );
    }
    if let Some(help) = &d.help {
        report = report.with_help(clip(help));
    }
    // Writing to a Vec cannot fail; a failure would only lose this report.
    let _ = report.finish().write((source_name, source), out);
}

/// Characters `ariadne` breaks lines at besides `\n`; Clarion's lines (and
/// [`Diagnostic::line_col`]) end at `\n` only.
fn breaks_line(c: char) -> bool {
    matches!(c, '\r' | '\x0B' | '\x0C' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// The source as rendered: its lines, found once.
struct Text<'s> {
    src: &'s str,
    /// `src` with [`breaks_line`] characters turned into as many spaces as
    /// they have bytes, so that `ariadne`'s lines are ours and every offset
    /// stays put.
    plain: Cow<'s, str>,
    /// Byte offset of each line's first byte.
    starts: Vec<usize>,
}

impl<'s> Text<'s> {
    fn new(src: &'s str) -> Text<'s> {
        let plain = if src.chars().any(breaks_line) {
            let mut s = String::with_capacity(src.len());
            for c in src.chars() {
                if breaks_line(c) {
                    s.extend(std::iter::repeat_n(' ', c.len_utf8()));
                } else {
                    s.push(c);
                }
            }
            Cow::Owned(s)
        } else {
            Cow::Borrowed(src)
        };
        let starts = std::iter::once(0)
            .chain(src.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Text { src, plain, starts }
    }

    /// The 0-based line holding byte `at`.
    fn line_of(&self, at: usize) -> usize {
        self.starts.partition_point(|&s| s <= at).saturating_sub(1)
    }

    /// Line `i`'s bytes, without its `\n`.
    fn line(&self, i: usize) -> Range<usize> {
        let start = self.starts.get(i).copied().unwrap_or(self.src.len());
        let end = self.starts.get(i + 1).map_or(self.src.len(), |n| n - 1);
        start..end.max(start)
    }

    /// 1-based column (in characters) of byte `at`, counted in `text`
    /// (the source, or [`Text::plain`]: the same lines).
    fn column_in(&self, text: &str, at: usize) -> usize {
        let line = self.line(self.line_of(at));
        let at = floor_char_boundary(text, at.clamp(line.start, line.end));
        text.get(line.start..at).map_or(0, |s| s.chars().count()) + 1
    }

    fn is_long(&self, i: usize) -> bool {
        let line = &self.src[self.line(i)];
        line.len() > LONG_LINE && line.chars().nth(LONG_LINE).is_some()
    }

    /// The line of a span's last byte.
    fn last_line(&self, span: &Range<usize>) -> usize {
        self.line_of(span.end.saturating_sub(1).max(span.start))
    }

    /// Whether the whole source can be shown for these spans: each lies on
    /// one line, and no such line is long.
    fn fits(&self, spans: &[Range<usize>]) -> bool {
        spans.iter().all(|s| {
            let line = self.line_of(s.start);
            line == self.last_line(s) && !self.is_long(line)
        })
    }
}

/// The lines one diagnostic needs, at their own line numbers (the lines
/// before and between them left empty), each long one cut to windows.
struct Excerpt {
    text: String,
    /// Kept pieces: (offset in the source, offset in `text`, length). A
    /// piece that reaches its line's end also covers the `\n` after it.
    pieces: Vec<(usize, usize, usize)>,
}

impl Excerpt {
    fn new(t: &Text<'_>, spans: &[Range<usize>]) -> Excerpt {
        // Places to show, by line: both ends of every span.
        let mut points: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for s in spans {
            points.entry(t.line_of(s.start)).or_default().push(s.start);
            points.entry(t.last_line(s)).or_default().push(s.end);
        }
        let mut ex = Excerpt {
            text: String::new(),
            pieces: Vec::new(),
        };
        let mut next_line = 0;
        for (line, mut at) in points {
            // Empty lines keep the line numbers `ariadne` prints.
            ex.text.extend(std::iter::repeat_n('\n', line - next_line));
            next_line = line + 1;
            let range = t.line(line);
            let len = range.len();
            at.iter_mut()
                .for_each(|p| *p = p.saturating_sub(range.start).min(len));
            at.sort_unstable();
            let text = &t.plain[range.clone()];
            let windows = if t.is_long(line) {
                windows(text, &at)
            } else {
                // The whole line: one window.
                std::iter::once(0..len).collect()
            };
            let mut shown = 0;
            for w in windows {
                if w.start > shown {
                    ex.text.push('…');
                }
                let covers_break = usize::from(w.end == len);
                ex.pieces
                    .push((range.start + w.start, ex.text.len(), w.len() + covers_break));
                ex.text.push_str(&text[w.clone()]);
                shown = w.end;
            }
            if shown < len {
                ex.text.push('…');
            }
            ex.text.push('\n');
        }
        ex
    }

    /// Where source offset `at` (an end of a span) is in the excerpt.
    fn at(&self, at: usize) -> usize {
        self.pieces
            .iter()
            .find(|(from, _, len)| (*from..=from + len).contains(&at))
            .map_or(self.text.len(), |(from, to, _)| to + (at - from))
    }

    /// 1-based column (in characters) of excerpt offset `at`.
    fn column(&self, at: usize) -> usize {
        let at = floor_char_boundary(&self.text, at);
        let before = &self.text[..at];
        let start = before.rfind('\n').map_or(0, |i| i + 1);
        before[start..].chars().count() + 1
    }
}

/// Windows of a long line around the places `at` (sorted byte offsets
/// into `line`): [`CONTEXT`] characters on each side, merged when they
/// touch.
fn windows(line: &str, at: &[usize]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for &p in at {
        let p = floor_char_boundary(line, p);
        let start = line[..p]
            .char_indices()
            .rev()
            .nth(CONTEXT.saturating_sub(1))
            .map_or(0, |(i, _)| i);
        let end = line[p..]
            .char_indices()
            .nth(CONTEXT)
            .map_or(line.len(), |(i, _)| p + i);
        match out.last_mut() {
            // Merged when the gap would be shorter than the `…` marking it.
            Some(last) if start <= last.end + 3 => last.end = last.end.max(end),
            _ => out.push(start..end),
        }
    }
    out
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
