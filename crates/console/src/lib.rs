//! The web console's built assets, embedded in the binary.
//!
//! `console/` holds the TypeScript sources; `npm run build` there writes
//! `console/dist`, which is committed, so building Clarion never needs
//! Node (scripts/test.sh rebuilds it and fails if the committed build is
//! not the sources' build). This crate embeds every file of it with
//! `include_bytes!` and says how each is served: its path (`/` for the
//! page, `/console/NAME` for the rest), its `Content-Type`, and the
//! headers every asset carries ([`SECURITY_HEADERS`]: a Content-Security-
//! Policy allowing this origin only, no framing, no sniffing, no
//! referrer). A core without I/O: the control API's server (crates/control)
//! routes requests here.
//!
//! The assets hold no data: the page reads everything from the API with
//! the token the operator types, so they may be served without one.
//!
//! Invariants: every file of `console/dist` is in [`ASSETS`] (a test reads
//! the directory); paths are unique. Cost: [`asset`] is a linear search
//! over a handful of entries; ETags are computed at compile time.

/// One embedded file and how it is served.
#[derive(Debug)]
pub struct Asset {
    /// The request path it answers.
    pub path: &'static str,
    /// Its file name in `console/dist`.
    pub file: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
    /// A strong validator of `body` (`"` FNV-1a 64 hex `"`), for `If-None-Match`.
    pub etag: &'static str,
}

/// `Cache-Control` of every asset: revalidate each time (the names carry
/// no hash, so a new binary's page must never be mixed with an old
/// bundle); with the ETag, a reload costs a 304.
pub const CACHE_CONTROL: &str = "no-cache";

/// The Content-Security-Policy of every asset: scripts, styles, images
/// and API calls from this origin only; no inline script or style, no
/// plugins, no framing, no form posting anywhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Headers every asset is served with (besides its type, cache policy and ETag).
pub const SECURITY_HEADERS: [(&str, &str); 4] = [
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
];

/// FNV-1a, 64 bits: cheap, const, and enough to tell two builds apart.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

/// `"` + 16 lowercase hex digits of `h` + `"`.
const fn etag_of(h: u64) -> [u8; 18] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [b'"'; 18];
    let mut i = 0;
    while i < 16 {
        out[1 + i] = HEX[((h >> (60 - 4 * i)) & 0xf) as usize];
        i += 1;
    }
    out
}

macro_rules! asset {
    ($path:literal, $file:literal, $type:literal) => {{
        const BODY: &[u8] = include_bytes!(concat!("../../../console/dist/", $file));
        const TAG: [u8; 18] = etag_of(fnv1a(BODY));
        Asset {
            path: $path,
            file: $file,
            content_type: $type,
            body: BODY,
            etag: match std::str::from_utf8(&TAG) {
                Ok(s) => s,
                Err(_) => panic!("an ETag is ASCII"),
            },
        }
    }};
}

/// Every asset of the console.
pub static ASSETS: [Asset; 4] = [
    asset!("/", "index.html", "text/html; charset=utf-8"),
    asset!(
        "/console/console.js",
        "console.js",
        "text/javascript; charset=utf-8"
    ),
    asset!("/console/console.css", "console.css", "text/css; charset=utf-8"),
    asset!("/console/favicon.svg", "favicon.svg", "image/svg+xml"),
];

/// The asset a request path names, if any (`/index.html` is `/`).
pub fn asset(path: &str) -> Option<&'static Asset> {
    let path = if path == "/index.html" { "/" } else { path };
    ASSETS.iter().find(|a| a.path == path)
}

/// Whether an `If-None-Match` header value matches `etag` (a list of
/// tags, weak ones compared weakly, or `*`; RFC 9110 §13.1.2).
pub fn not_modified(if_none_match: &str, etag: &str) -> bool {
    if_none_match
        .split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.trim_start_matches("W/") == etag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::path::Path;

    fn dist() -> &'static Path {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../console/dist"))
    }

    #[test]
    fn every_built_file_is_embedded_as_it_is_on_disk() {
        let on_disk: BTreeSet<String> = std::fs::read_dir(dist())
            .expect("console/dist")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        let embedded: BTreeSet<String> = ASSETS.iter().map(|a| a.file.to_string()).collect();
        assert_eq!(on_disk, embedded, "add new files of console/dist to ASSETS");
        for a in &ASSETS {
            let bytes = std::fs::read(dist().join(a.file)).expect("file");
            assert_eq!(a.body, bytes.as_slice(), "{}", a.file);
            assert_eq!(asset(a.path).map(|b| b.file), Some(a.file));
        }
        let paths: BTreeSet<&str> = ASSETS.iter().map(|a| a.path).collect();
        assert_eq!(paths.len(), ASSETS.len(), "unique paths");
    }

    #[test]
    fn content_types_are_those_of_the_extensions() {
        for a in &ASSETS {
            let guess = mime_guess::from_path(a.file).first().expect("a known extension");
            let ours = a.content_type.split(';').next().unwrap_or_default();
            // mime_guess still says application/javascript; RFC 9239 made text/javascript the one to send.
            let theirs = match guess.essence_str() {
                "application/javascript" => "text/javascript",
                other => other,
            };
            assert_eq!(ours, theirs, "{}", a.file);
            if a.content_type.starts_with("text/") {
                assert!(a.content_type.ends_with("charset=utf-8"), "{}", a.file);
                assert!(std::str::from_utf8(a.body).is_ok(), "{} is UTF-8", a.file);
            }
        }
    }

    /// The page must work under the policy: every script and style it
    /// loads is one of ours, and nothing is inline (the policy would
    /// block it; the Playwright test also fails on any CSP violation).
    #[test]
    fn the_page_loads_only_embedded_files_and_nothing_inline() {
        let page = std::str::from_utf8(ASSETS[0].body).expect("UTF-8");
        let mut refs = Vec::new();
        for attr in ["src=\"", "href=\""] {
            for (i, _) in page.match_indices(attr) {
                let rest = &page[i + attr.len()..];
                refs.push(&rest[..rest.find('"').expect("a closing quote")]);
            }
        }
        assert!(refs.len() >= 3, "{refs:?}");
        for r in &refs {
            assert!(asset(r).is_some(), "{r} is not embedded");
        }
        assert_eq!(
            page.matches("<script").count(),
            page.matches("<script type=\"module\" src=").count(),
            "inline scripts"
        );
        assert!(!page.contains("<style"), "inline styles");
        assert!(!page.contains(" style="), "style attributes");
        assert!(
            !page
                .split_whitespace()
                .any(|w| w.starts_with("on") && w.contains("=\"")),
            "event handler attributes"
        );
        let js = std::str::from_utf8(ASSETS[1].body).expect("UTF-8");
        assert!(!js.contains("eval("), "the policy forbids eval");
        assert!(
            !js.contains("innerHTML"),
            "the bundle builds the DOM, never markup"
        );
    }

    #[test]
    fn etags_are_hashes_of_the_bodies() {
        for a in &ASSETS {
            // A reference FNV-1a, written out independently.
            let mut h = 14_695_981_039_346_656_037u64;
            for b in a.body {
                h = (h ^ u64::from(*b)).wrapping_mul(1_099_511_628_211);
            }
            assert_eq!(a.etag, format!("\"{h:016x}\""), "{}", a.file);
            assert!(not_modified(a.etag, a.etag));
            assert!(not_modified(&format!("\"x\", W/{}", a.etag), a.etag));
            assert!(not_modified("*", a.etag));
            assert!(!not_modified("\"0000000000000000\"", a.etag));
        }
        let tags: BTreeSet<&str> = ASSETS.iter().map(|a| a.etag).collect();
        assert_eq!(tags.len(), ASSETS.len());
    }

    #[test]
    fn the_policy_allows_this_origin_only() {
        for directive in CONTENT_SECURITY_POLICY.split(';').map(str::trim) {
            let mut words = directive.split_whitespace();
            let name = words.next().expect("a directive name");
            for source in words {
                assert!(source == "'self'" || source == "'none'", "{name} allows {source}");
            }
        }
        assert!(CONTENT_SECURITY_POLICY.starts_with("default-src 'none'"));
        assert!(CONTENT_SECURITY_POLICY.contains("frame-ancestors 'none'"));
    }
}
