//! Byte spans into the source text.
//!
//! Every token and every AST node carries the [`Span`] of the text it came
//! from, so that errors found at any stage can underline the exact place.
//! Clarion reads one source at a time, so a span needs no source id.

use std::ops::Range;

/// A half-open byte range `start..end` of the source text. Both ends lie on
/// `char` boundaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub const fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    /// The smallest span covering both `self` and `other`.
    pub fn to(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }

    pub fn range(self) -> Range<usize> {
        self.start..self.end
    }

    pub fn is_empty(self) -> bool {
        self.end <= self.start
    }
}

impl From<Span> for Range<usize> {
    fn from(s: Span) -> Range<usize> {
        s.range()
    }
}

impl From<Range<usize>> for Span {
    fn from(r: Range<usize>) -> Span {
        Span {
            start: r.start,
            end: r.end,
        }
    }
}
