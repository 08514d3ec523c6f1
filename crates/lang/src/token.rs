//! Tokens: what the lexer hands the parser.

use std::fmt;

use crate::span::Span;

#[derive(Clone, Debug, PartialEq)]
pub enum TokenKind {
    /// A word: keyword, variable, function, field, unit or protocol name.
    /// Right after `event` it may also contain `-` (an event name).
    Ident(String),
    /// An integer literal.
    Int(u64),
    /// A literal with a decimal point (`0.5`, `1.25`).
    Dec(f64),
    /// Something shaped like an IP address (`10.0.0.1`, `2001:db8::`);
    /// the parser decides whether it really is one.
    Addr(String),
    LParen,
    RParen,
    Comma,
    Slash,
    Star,
    Plus,
    Minus,
    Percent,
    DotDot,
    Lt,
    Le,
    Gt,
    Ge,
    /// `=`
    Assign,
    /// `==`
    EqEq,
    /// `!=`
    Ne,
    /// `&&`
    AndAnd,
    /// `||`
    OrOr,
    /// `!`
    Bang,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub kind: TokenKind,
    pub span: Span,
}

impl TokenKind {
    /// Whether this is the word `kw`.
    pub fn is_word(&self, kw: &str) -> bool {
        matches!(self, TokenKind::Ident(s) if s == kw)
    }
}

impl Token {
    /// Whether this is the word `kw`.
    pub fn is_word(&self, kw: &str) -> bool {
        self.kind.is_word(kw)
    }
}

impl fmt::Display for TokenKind {
    /// How the token is named in error messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sym = match self {
            TokenKind::Ident(s) => return write!(f, "`{s}`"),
            TokenKind::Int(n) => return write!(f, "number `{n}`"),
            TokenKind::Dec(x) => return write!(f, "number `{x}`"),
            TokenKind::Addr(s) => return write!(f, "address `{s}`"),
            TokenKind::LParen => "(",
            TokenKind::RParen => ")",
            TokenKind::Comma => ",",
            TokenKind::Slash => "/",
            TokenKind::Star => "*",
            TokenKind::Plus => "+",
            TokenKind::Minus => "-",
            TokenKind::Percent => "%",
            TokenKind::DotDot => "..",
            TokenKind::Lt => "<",
            TokenKind::Le => "<=",
            TokenKind::Gt => ">",
            TokenKind::Ge => ">=",
            TokenKind::Assign => "=",
            TokenKind::EqEq => "==",
            TokenKind::Ne => "!=",
            TokenKind::AndAnd => "&&",
            TokenKind::OrOr => "||",
            TokenKind::Bang => "!",
        };
        write!(f, "`{sym}`")
    }
}
