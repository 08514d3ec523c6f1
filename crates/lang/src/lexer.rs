//! The lexer: source text to [`Token`]s.
//!
//! Whitespace and `#` comments separate tokens and are dropped. The lexer
//! never stops at a bad character: it reports it and goes on, so that one
//! pass finds every lexical error.
//!
//! Three shapes need care because the language has no quoting:
//! - A run of hex digits, `:` and `.` that contains a `:` is an IPv6
//!   address (`2001:db8::`, `fe80::1`, `::ffff:10.0.0.1`); `:` appears
//!   nowhere else in the language.
//! - A run of digits and `.` with two or more single dots is an IPv4
//!   address; `..` always ends a number (`1..1024` is a port range).
//! - The word right after `event` (or `export`) is a name and may contain `-`;
//!   the names of an export policy's `interface A, B` list may also contain `.`.
//!
//! A number and the unit after it (`125KB`, `10ms`) are separate tokens;
//! the parser joins them.

use crate::error::{codes, Diagnostic};
use crate::span::Span;
use crate::token::{Token, TokenKind};

/// Splits `src` into tokens, reporting characters that start no token.
pub fn lex(src: &str) -> (Vec<Token>, Vec<Diagnostic>) {
    let mut lx = Lexer {
        src,
        // A leading byte-order mark is skipped: editors on Windows write
        // one, and it says only that the text is UTF-8.
        pos: if src.starts_with(BOM) { BOM.len_utf8() } else { 0 },
        toks: Vec::new(),
        diags: Vec::new(),
        iface_list: false,
    };
    lx.run();
    (lx.toks, lx.diags)
}

/// U+FEFF, the byte-order mark (elsewhere than first: a zero-width no-break space).
const BOM: char = '\u{FEFF}';

struct Lexer<'a> {
    src: &'a str,
    /// Always on a `char` boundary.
    pos: usize,
    toks: Vec<Token>,
    diags: Vec<Diagnostic>,
    /// Inside an export policy's `interface A, B, ...` list: a word after
    /// a comma is an interface name.
    iface_list: bool,
}

/// A character as a message quotes it: invisible ones by code point and
/// name, so that the message says what is there.
fn shown(c: char) -> String {
    match c {
        BOM => "U+FEFF (a byte-order mark)".into(),
        '\u{A0}' => "U+00A0 (a no-break space)".into(),
        '\u{200B}' => "U+200B (a zero-width space)".into(),
        c if invisible(c) => format!("U+{:04X}", u32::from(c)),
        c => format!("`{c}`"),
    }
}

/// Characters that print as nothing or as a plain space.
fn invisible(c: char) -> bool {
    c.is_control()
        || c.is_whitespace()
        || matches!(c, '\u{AD}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | BOM)
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn is_addr_byte(b: u8) -> bool {
    b.is_ascii_hexdigit() || b == b':' || b == b'.'
}

impl Lexer<'_> {
    fn byte_at(&self, i: usize) -> Option<u8> {
        self.src.as_bytes().get(i).copied()
    }

    /// End of the run of bytes satisfying `f` starting at `start`.
    fn run_end(&self, start: usize, f: impl Fn(u8) -> bool) -> usize {
        let bytes = self.src.as_bytes();
        let mut end = start;
        while end < bytes.len() && f(bytes[end]) {
            end += 1;
        }
        end
    }

    fn push(&mut self, kind: TokenKind, start: usize, end: usize) {
        if kind != TokenKind::Comma {
            self.iface_list = false;
        }
        self.toks.push(Token {
            kind,
            span: Span::new(start, end),
        });
        self.pos = end;
    }

    fn run(&mut self) {
        while let Some(c) = self.src[self.pos..].chars().next() {
            let start = self.pos;
            let next = self.byte_at(start + 1);
            let single = |k: TokenKind| (k, 1);
            let (kind, len) = match c {
                ' ' | '\t' | '\r' | '\n' => {
                    self.pos += 1;
                    continue;
                }
                '#' => {
                    self.pos = self.src[start..].find('\n').map_or(self.src.len(), |i| start + i);
                    continue;
                }
                '0'..='9' => {
                    self.number_or_address(start);
                    continue;
                }
                ':' => {
                    let end = self.run_end(start, is_addr_byte);
                    self.push(TokenKind::Addr(self.src[start..end].to_string()), start, end);
                    continue;
                }
                'a'..='z' | 'A'..='Z' | '_' => {
                    self.word(start);
                    continue;
                }
                '.' if next == Some(b'.') => (TokenKind::DotDot, 2),
                '.' if next.is_some_and(|b| b.is_ascii_digit()) => {
                    let end = self.run_end(start + 1, |b| b.is_ascii_digit());
                    let text = &self.src[start..end];
                    self.diags.push(
                        Diagnostic::new(
                            codes::BAD_NUMBER,
                            "a number must start with a digit",
                            Span::new(start, end),
                        )
                        .help(format!("write `0{text}`")),
                    );
                    // Recover as if the `0` were there.
                    let value = format!("0{text}").parse().unwrap_or(0.0);
                    self.push(TokenKind::Dec(value), start, end);
                    continue;
                }
                '(' => single(TokenKind::LParen),
                ')' => single(TokenKind::RParen),
                ',' => single(TokenKind::Comma),
                '/' => single(TokenKind::Slash),
                '*' => single(TokenKind::Star),
                '+' => single(TokenKind::Plus),
                '-' => single(TokenKind::Minus),
                '%' => single(TokenKind::Percent),
                '<' if next == Some(b'=') => (TokenKind::Le, 2),
                '<' => single(TokenKind::Lt),
                '>' if next == Some(b'=') => (TokenKind::Ge, 2),
                '>' => single(TokenKind::Gt),
                '=' if next == Some(b'=') => (TokenKind::EqEq, 2),
                '=' => single(TokenKind::Assign),
                '!' if next == Some(b'=') => (TokenKind::Ne, 2),
                '!' => single(TokenKind::Bang),
                '&' if next == Some(b'&') => (TokenKind::AndAnd, 2),
                '|' if next == Some(b'|') => (TokenKind::OrOr, 2),
                _ => {
                    self.unexpected(c, start);
                    continue;
                }
            };
            self.push(kind, start, start + len);
        }
    }

    fn unexpected(&mut self, c: char, start: usize) {
        let span = Span::new(start, start + c.len_utf8());
        let mut d = Diagnostic::new(
            codes::UNEXPECTED_CHAR,
            format!("unexpected character {}", shown(c)),
            span,
        );
        d = match c {
            '&' => d.help("write `and` (or `&&`)"),
            '|' => d.help("write `or` (or `||`)"),
            '"' | '\'' => d.help("Clarion has no strings: write names and addresses without quotes"),
            ';' => d.help("clauses need no separator: start the next one on a new line"),
            BOM => d.help(
                "a byte-order mark is allowed only as the first character of the file: remove this one",
            ),
            c if invisible(c) => d.help("remove it (it does not show in most editors)"),
            _ => d,
        };
        self.diags.push(d);
        self.pos = span.end;
    }

    fn word(&mut self, start: usize) {
        // Event names may contain `-`: after `event`, and after `then install`.
        let n = self.toks.len();
        let after_event = self
            .toks
            .last()
            .is_some_and(|t| t.is_word("event") || t.is_word("export"))
            || (n >= 2 && self.toks[n - 1].is_word("install") && self.toks[n - 2].is_word("then"));
        if after_event {
            let end = self.run_end(start, |b| is_word_byte(b) || b == b'-');
            self.push(TokenKind::Ident(self.src[start..end].to_string()), start, end);
            return;
        }
        // Interface names (`interface eth0, veth-a, eth0.100`) may contain `-` and `.`.
        let iface = self
            .toks
            .last()
            .is_some_and(|t| t.is_word("interface") || (t.kind == TokenKind::Comma && self.iface_list));
        if iface {
            let end = self.run_end(start, |b| is_word_byte(b) || b == b'-' || b == b'.');
            self.push(TokenKind::Ident(self.src[start..end].to_string()), start, end);
            self.iface_list = true;
            return;
        }
        let addr_end = self.run_end(start, is_addr_byte);
        if self.src[start..addr_end].contains(':') {
            self.push(
                TokenKind::Addr(self.src[start..addr_end].to_string()),
                start,
                addr_end,
            );
            return;
        }
        let end = self.run_end(start, is_word_byte);
        self.push(TokenKind::Ident(self.src[start..end].to_string()), start, end);
    }

    fn number_or_address(&mut self, start: usize) {
        let addr_end = self.run_end(start, is_addr_byte);
        if self.src[start..addr_end].contains(':') {
            self.push(
                TokenKind::Addr(self.src[start..addr_end].to_string()),
                start,
                addr_end,
            );
            return;
        }
        let mut end = self.run_end(start, |b| b.is_ascii_digit() || b == b'.');
        if let Some(i) = self.src[start..end].find("..") {
            end = start + i;
        }
        let text = &self.src[start..end];
        let span = Span::new(start, end);
        let kind = match text.matches('.').count() {
            0 => match text.parse::<u64>() {
                Ok(n) => TokenKind::Int(n),
                Err(_) => {
                    self.diags.push(
                        Diagnostic::new(codes::BAD_NUMBER, "number too large", span)
                            .help(format!("numbers are at most {}", u64::MAX)),
                    );
                    TokenKind::Int(u64::MAX)
                }
            },
            1 if text.ends_with('.') => {
                let whole = &text[..text.len() - 1];
                self.diags.push(
                    Diagnostic::new(
                        codes::BAD_NUMBER,
                        "expected a digit after the decimal point",
                        span,
                    )
                    .help(format!("write `{whole}` or `{whole}.0`")),
                );
                TokenKind::Int(whole.parse().unwrap_or(0))
            }
            1 => match text.parse::<f64>() {
                Ok(x) if x.is_finite() => TokenKind::Dec(x),
                _ => {
                    self.diags
                        .push(Diagnostic::new(codes::BAD_NUMBER, "number too large", span));
                    TokenKind::Dec(0.0)
                }
            },
            _ => TokenKind::Addr(text.to_string()),
        };
        self.push(kind, start, end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<TokenKind> {
        let (toks, diags) = lex(src);
        assert!(diags.is_empty(), "{diags:?}");
        toks.into_iter().map(|t| t.kind).collect()
    }

    fn ident(s: &str) -> TokenKind {
        TokenKind::Ident(s.to_string())
    }

    #[test]
    fn numbers_units_and_ranges() {
        use TokenKind::*;
        assert_eq!(kinds("125KB"), vec![Int(125), ident("KB")]);
        assert_eq!(kinds("0.5 %"), vec![Dec(0.5), Percent]);
        assert_eq!(kinds("1..1024"), vec![Int(1), DotDot, Int(1024)]);
        assert_eq!(kinds("5tuple"), vec![Int(5), ident("tuple")]);
    }

    #[test]
    fn addresses() {
        use TokenKind::*;
        assert_eq!(
            kinds("10.0.128.0/24"),
            vec![Addr("10.0.128.0".into()), Slash, Int(24)]
        );
        assert_eq!(
            kinds("2001:db8::/32"),
            vec![Addr("2001:db8::".into()), Slash, Int(32)]
        );
        assert_eq!(
            kinds("fe80::1 ::1"),
            vec![Addr("fe80::1".into()), Addr("::1".into())]
        );
        assert_eq!(kinds("feed"), vec![ident("feed")]);
    }

    #[test]
    fn event_names_may_contain_dashes() {
        use TokenKind::*;
        assert_eq!(kinds("event a-b-1"), vec![ident("event"), ident("a-b-1")]);
        assert_eq!(kinds("a-b"), vec![ident("a"), Minus, ident("b")]);
    }

    #[test]
    fn operators_and_comments() {
        use TokenKind::*;
        assert_eq!(
            kinds("a<=b # c\n!= ! && ||"),
            vec![ident("a"), Le, ident("b"), Ne, Bang, AndAnd, OrOr]
        );
    }

    #[test]
    fn bad_characters_are_reported_and_skipped() {
        let (toks, diags) = lex("a & é b");
        assert_eq!(toks.len(), 2);
        assert_eq!(diags.len(), 2);
        assert_eq!(diags[1].span, 4..6);
    }

    #[test]
    fn bad_numbers() {
        for src in ["1.", ".5", "99999999999999999999999"] {
            assert_eq!(lex(src).1.len(), 1, "{src}");
        }
    }
}
