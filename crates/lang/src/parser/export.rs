//! Export policies: `export NAME`, then `filter` and `send` clauses.
//!
//! ```text
//! export web_headers
//!   interface eth0, veth-a
//!   filter proto = tcp and dst_port = 443
//!   send headers to collector 10.0.0.9 port 4739
//!   send packets snap 128B to vxlan 10.0.0.10 vni 42
//!   send packets to pcapng rotate 100MB or 60s
//! ```
//!
//! A policy runs from `export` to the next `event` or `export`, as an event
//! does; its filters are an event's. Destinations name no file: `pcapng`
//! files go to the host's export directory under the policy's name, so a
//! policy installed from afar cannot write elsewhere.

use super::{PResult, Parser};
use crate::ast::{Dest, Export, Quantity, Send, SendWhat};
use crate::error::{codes, Diagnostic};
use crate::span::Span;
use crate::token::{Token, TokenKind};

const SEND_HELP: &str =
    "write e.g. `send headers to collector 10.0.0.9`, `send packets to vxlan 10.0.0.9 vni 42` or `send packets to pcapng`";

impl Parser<'_> {
    pub(super) fn export(&mut self) -> PResult<Export> {
        let kw = self.bump().map_or(Span::default(), |t| t.span);
        let (name, name_span) = match self.peek() {
            Some(Token {
                kind: TokenKind::Ident(s),
                span,
            }) if !super::is_keyword(s) && s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') => {
                if let Some(d) = super::too_long("an export policy", s, *span) {
                    return Err(d);
                }
                self.pos += 1;
                (s.clone(), *span)
            }
            _ => {
                let d = self.expected("a policy name after `export`");
                let d = Diagnostic {
                    code: codes::BAD_EVENT_NAME,
                    ..d
                };
                return Err(d.help("name the policy, e.g. `export web_headers`"));
            }
        };
        let mut filters = Vec::new();
        let mut interfaces = Vec::new();
        let mut sends = Vec::new();
        while let Some(t) = self.peek() {
            match &t.kind {
                TokenKind::Ident(w) if w == "event" || w == "export" => break,
                TokenKind::Ident(w) if w == "filter" => {
                    self.pos += 1;
                    filters.push(self.filter(t.span)?);
                }
                TokenKind::Ident(w) if w == "interface" => {
                    self.pos += 1;
                    loop {
                        match self.peek() {
                            Some(Token {
                                kind: TokenKind::Ident(name),
                                span,
                            }) if !super::is_keyword(name) => {
                                self.pos += 1;
                                interfaces.push((name.clone(), *span));
                            }
                            _ => {
                                return Err(self
                                    .expected("an interface name")
                                    .help("write e.g. `interface eth0` or `interface eth0, veth-a`"))
                            }
                        }
                        if self.eat(|k| *k == TokenKind::Comma).is_none() {
                            break;
                        }
                    }
                }
                TokenKind::Ident(w) if w == "send" => {
                    self.pos += 1;
                    sends.push(self.send(t.span)?);
                }
                _ => {
                    let d = self.expected("`filter`, `interface`, `send`, or the next `event` or `export`");
                    let d = Diagnostic {
                        code: codes::UNKNOWN_CLAUSE,
                        ..d
                    };
                    let help = match &t.kind {
                        TokenKind::Ident(w)
                            if ["when", "per", "every", "across", "then", "priority", "alert"].contains(&w.as_str()) =>
                        {
                            format!("`{w}` belongs to events; a policy has `filter` and `send` clauses")
                        }
                        _ => "a policy has `filter` clauses (which packets) and `send` clauses (what, and where)"
                            .to_string(),
                    };
                    return Err(d.help(help));
                }
            }
        }
        if sends.is_empty() {
            return Err(Diagnostic::new(
                codes::MISSING_SEND,
                format!("export policy `{name}` has no `send` clause"),
                name_span,
            )
            .here("this policy sends nothing")
            .help(SEND_HELP));
        }
        Ok(Export {
            name,
            name_span,
            filters,
            interfaces,
            sends,
            span: kw.to(self.prev_span()),
        })
    }

    /// What follows `send`: `headers` or `packets [snap N]`, `to`, a destination.
    fn send(&mut self, kw: Span) -> PResult<Send> {
        let what_start = self.peek().map_or(kw, |t| t.span);
        let what = if self.eat(|k| k.is_word("headers")).is_some() {
            SendWhat::Headers
        } else if self.eat(|k| k.is_word("packets")).is_some() {
            let snap = match self.eat(|k| k.is_word("snap")) {
                Some(_) if matches!(self.peek_kind(), Some(TokenKind::Int(_))) => Some(self.quantity()?),
                Some(_) => {
                    return Err(self
                        .expected("a length after `snap`")
                        .help("write e.g. `send packets snap 128B to pcapng`"))
                }
                None => None,
            };
            SendWhat::Packets { snap }
        } else {
            return Err(self
                .expected("`headers` or `packets` after `send`")
                .help(SEND_HELP));
        };
        let what_span = what_start.to(self.prev_span());
        if self.eat(|k| k.is_word("to")).is_none() {
            return Err(self.expected("`to` and a destination").help(SEND_HELP));
        }
        let dest_start = self.peek().map_or(kw, |t| t.span);
        let dest = if self.eat(|k| k.is_word("collector")).is_some() {
            let addr = self.dest_addr("collector")?;
            let port = self.option_int("port")?;
            Dest::Collector { addr, port }
        } else if self.eat(|k| k.is_word("vxlan")).is_some() {
            let addr = self.dest_addr("vxlan")?;
            let (mut port, mut vni) = (None, None);
            // `port` and `vni` in either order, each at most once.
            for _ in 0..2 {
                if port.is_none() {
                    port = self.option_int("port")?;
                }
                if vni.is_none() {
                    vni = self.option_int("vni")?;
                }
            }
            Dest::Vxlan { addr, port, vni }
        } else if self.eat(|k| k.is_word("pcapng")).is_some() {
            let mut rotate: Vec<Quantity> = Vec::new();
            if self.eat(|k| k.is_word("rotate")).is_some() {
                rotate.push(self.rotate_limit()?);
                while self.eat(|k| k.is_word("or") || *k == TokenKind::OrOr).is_some() {
                    rotate.push(self.rotate_limit()?);
                }
            }
            Dest::Pcapng { rotate }
        } else {
            return Err(self
                .expected("a destination (`collector`, `vxlan` or `pcapng`)")
                .help(SEND_HELP));
        };
        let dest_span = dest_start.to(self.prev_span());
        Ok(Send {
            what,
            what_span,
            dest,
            dest_span,
            span: kw.to(self.prev_span()),
        })
    }

    fn dest_addr(&mut self, dest: &str) -> PResult<std::net::IpAddr> {
        let help = format!("write the {dest}'s IP address, e.g. `{dest} 10.0.0.9` or `{dest} 2001:db8::9`");
        match self.peek() {
            Some(Token {
                kind: TokenKind::Addr(text),
                span,
            }) => match text.parse() {
                Ok(addr) => {
                    self.pos += 1;
                    Ok(addr)
                }
                Err(_) => {
                    Err(
                        Diagnostic::new(codes::BAD_ADDRESS, format!("invalid IP address `{text}`"), *span)
                            .here("not an IP address")
                            .help(help),
                    )
                }
            },
            _ => Err(self.expected(&format!("an IP address after `{dest}`")).help(help)),
        }
    }

    /// `WORD N`, when the next token is `word`.
    fn option_int(&mut self, word: &str) -> PResult<Option<(u64, Span)>> {
        if self.eat(|k| k.is_word(word)).is_none() {
            return Ok(None);
        }
        let (n, span) = self.int(&format!("a number after `{word}`"))?;
        Ok(Some((n, span)))
    }

    fn rotate_limit(&mut self) -> PResult<Quantity> {
        if !matches!(self.peek_kind(), Some(TokenKind::Int(_) | TokenKind::Dec(_))) {
            return Err(self.expected("a size or a duration after `rotate`").help(
                "write e.g. `pcapng rotate 100MB`, `pcapng rotate 60s` or `pcapng rotate 100MB or 60s`",
            ));
        }
        self.quantity()
    }
}
