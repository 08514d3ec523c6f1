//! An RFC 5424 parser for tests, written from the RFC's ABNF (§6) and
//! independent of clarion-alerts' encoder: it checks every header field's
//! syntax and lengths, splits the structured data and unescapes its
//! values (§6.3.3), and returns the parts. Also RFC 6587 octet-counting
//! frames. Shared by crates/alerts/tests and crates/cli/tests/alerts.rs.
#![allow(dead_code, clippy::unwrap_used)]

#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub pri: u8,
    pub version: u32,
    pub timestamp: String,
    pub hostname: String,
    pub app_name: String,
    pub procid: String,
    pub msgid: String,
    /// (SD-ID, [(name, unescaped value)]) per element.
    pub sd: Vec<(String, Vec<(String, String)>)>,
    pub msg: Option<String>,
}

impl Message {
    pub fn param(&self, id: &str, name: &str) -> Option<&str> {
        self.sd
            .iter()
            .find(|(i, _)| i == id)?
            .1
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn printusascii(b: u8) -> bool {
    (33..=126).contains(&b)
}

/// Splits off one SP-terminated header field of 1..=max PRINTUSASCII.
fn field<'a>(s: &'a str, max: usize, what: &str) -> Result<(&'a str, &'a str), String> {
    let end = s.find(' ').ok_or(format!("{what}: no space after it"))?;
    let f = &s[..end];
    if f.is_empty() || f.len() > max || !f.bytes().all(printusascii) {
        return Err(format!("{what}: `{f}` is not 1..{max} PRINTUSASCII"));
    }
    Ok((f, &s[end + 1..]))
}

fn digits(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| b.is_ascii_digit())
}

/// FULL-DATE "T" FULL-TIME, TIME-SECFRAC at most 6 digits.
fn timestamp_ok(t: &str) -> bool {
    let b = t.as_bytes();
    if t.len() < 20 || !t.is_ascii() {
        return false;
    }
    let date =
        digits(&t[0..4], 4) && b[4] == b'-' && digits(&t[5..7], 2) && b[7] == b'-' && digits(&t[8..10], 2);
    let time = b[10] == b'T'
        && digits(&t[11..13], 2)
        && b[13] == b':'
        && digits(&t[14..16], 2)
        && b[16] == b':'
        && digits(&t[17..19], 2);
    let mut rest = &t[19..];
    if let Some(r) = rest.strip_prefix('.') {
        let n = r.bytes().take_while(|c| c.is_ascii_digit()).count();
        if !(1..=6).contains(&n) {
            return false;
        }
        rest = &r[n..];
    }
    let offset = rest == "Z"
        || (rest.len() == 6
            && (rest.starts_with('+') || rest.starts_with('-'))
            && digits(&rest[1..3], 2)
            && &rest[3..4] == ":"
            && digits(&rest[4..6], 2));
    date && time && offset
}

fn sd_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s.bytes()
            .all(|b| printusascii(b) && !matches!(b, b'=' | b']' | b'"'))
}

pub fn parse(text: &str) -> Result<Message, String> {
    let rest = text.strip_prefix('<').ok_or("no PRI")?;
    let close = rest.find('>').ok_or("PRI not closed")?;
    let pri_text = &rest[..close];
    if pri_text.is_empty() || pri_text.len() > 3 || !pri_text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("bad PRI `{pri_text}`"));
    }
    let pri: u32 = pri_text.parse().map_err(|_| "bad PRI")?;
    if pri > 191 || (pri_text.len() > 1 && pri_text.starts_with('0')) {
        return Err(format!("PRI {pri} out of range"));
    }
    let rest = &rest[close + 1..];
    let (version, rest) = field(rest, 3, "VERSION")?;
    if version.starts_with('0') || !version.bytes().all(|b| b.is_ascii_digit()) {
        return Err("bad VERSION".into());
    }
    let (timestamp, rest) = field(rest, 64, "TIMESTAMP")?;
    if timestamp != "-" && !timestamp_ok(timestamp) {
        return Err(format!("bad TIMESTAMP `{timestamp}`"));
    }
    let (hostname, rest) = field(rest, 255, "HOSTNAME")?;
    let (app_name, rest) = field(rest, 48, "APP-NAME")?;
    let (procid, rest) = field(rest, 128, "PROCID")?;
    let (msgid, rest) = field(rest, 32, "MSGID")?;
    // STRUCTURED-DATA: "-" or SD-ELEMENTs.
    let mut sd = Vec::new();
    let mut chars = rest.char_indices().peekable();
    let after_sd: usize;
    if rest.starts_with('-') {
        after_sd = 1;
    } else {
        loop {
            match chars.next() {
                Some((_, '[')) => {}
                Some((i, c)) if !sd.is_empty() && c == ' ' => {
                    after_sd = i;
                    break;
                }
                None if !sd.is_empty() => {
                    after_sd = rest.len();
                    break;
                }
                other => return Err(format!("expected an SD-ELEMENT, found {other:?}")),
            }
            let mut id = String::new();
            while let Some(&(_, c)) = chars.peek() {
                if c == ' ' || c == ']' {
                    break;
                }
                id.push(c);
                chars.next();
            }
            if !sd_name(&id) {
                return Err(format!("bad SD-ID `{id}`"));
            }
            let mut params = Vec::new();
            loop {
                match chars.next() {
                    Some((_, ']')) => break,
                    Some((_, ' ')) => {}
                    other => return Err(format!("in [{id}: expected SP or ], found {other:?}")),
                }
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some((_, '=')) => break,
                        Some((_, c)) => name.push(c),
                        None => return Err("PARAM-NAME not ended".into()),
                    }
                }
                if !sd_name(&name) {
                    return Err(format!("bad PARAM-NAME `{name}`"));
                }
                if chars.next().map(|c| c.1) != Some('"') {
                    return Err(format!("{name}: value not quoted"));
                }
                let mut value = String::new();
                loop {
                    match chars.next() {
                        Some((_, '\\')) => match chars.next() {
                            Some((_, c @ ('"' | '\\' | ']'))) => value.push(c),
                            // §6.3.3: a backslash before anything else is itself.
                            Some((_, c)) => {
                                value.push('\\');
                                value.push(c);
                            }
                            None => return Err("value not ended".into()),
                        },
                        Some((_, '"')) => break,
                        Some((_, ']')) => return Err(format!("{name}: unescaped ] in value")),
                        Some((_, c)) => value.push(c),
                        None => return Err(format!("{name}: value not ended")),
                    }
                }
                params.push((name, value));
            }
            sd.push((id, params));
        }
    }
    let tail = &rest[after_sd..];
    let msg = match tail.strip_prefix(' ') {
        Some(m) => Some(m.to_string()),
        None if tail.is_empty() => None,
        None => return Err(format!("junk after STRUCTURED-DATA: `{tail}`")),
    };
    Ok(Message {
        pri: pri as u8,
        version: version.parse().map_err(|_| "bad VERSION")?,
        timestamp: timestamp.into(),
        hostname: hostname.into(),
        app_name: app_name.into(),
        procid: procid.into(),
        msgid: msgid.into(),
        sd,
        msg,
    })
}

/// Splits an RFC 6587 octet-counted stream into messages; the remainder
/// (an incomplete frame) is left in `buf`.
pub fn frames(buf: &mut Vec<u8>) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    loop {
        let Some(sp) = buf.iter().position(|&b| b == b' ') else {
            return Ok(out);
        };
        let len_text = std::str::from_utf8(&buf[..sp]).map_err(|_| "MSG-LEN not ASCII")?;
        if len_text.is_empty() || len_text.starts_with('0') || !len_text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("bad MSG-LEN `{len_text}`"));
        }
        let len: usize = len_text.parse().map_err(|_| "bad MSG-LEN")?;
        if buf.len() < sp + 1 + len {
            return Ok(out);
        }
        let msg = String::from_utf8(buf[sp + 1..sp + 1 + len].to_vec()).map_err(|_| "frame not UTF-8")?;
        buf.drain(..sp + 1 + len);
        out.push(msg);
    }
}
