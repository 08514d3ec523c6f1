//! The control API's bearer token: closed by default, like Jupyter's.
//!
//! A server (`clarion manager`, a live host's `--api`) takes, in order:
//! no token with `--api-no-auth` (loopback only), the token given
//! (`--api-token`, `CLARION_API_TOKEN`), or the one kept in the token file
//! (`--api-token-file`, `CLARION_API_TOKEN_FILE`, else
//! `$XDG_CONFIG_HOME/clarion/api-token`, i.e. `~/.config/clarion/api-token`),
//! generated there at first start. A client (`clarion events`) looks in the
//! same places, so the default flow needs no typing: the same user on the
//! same machine shares one token for every API it serves.
//!
//! The file is the secret, so it is treated as ssh treats a private key: it
//! is created with mode 0600 (and its directory 0700), and one that others
//! may read or write is refused rather than used. Creation is atomic: the
//! token is written to a private temporary file which is then hard-linked
//! to the final name, so two servers starting at once agree on one token
//! and neither reads a half-written file.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

/// The environment variable holding a token (servers and clients).
pub const TOKEN_ENV: &str = "CLARION_API_TOKEN";
/// The environment variable naming the token file (servers and clients).
pub const TOKEN_FILE_ENV: &str = "CLARION_API_TOKEN_FILE";

/// A longer file is not a token (and is not read whole).
const MAX_TOKEN_LEN: u64 = 4096;

#[derive(Debug, Error)]
pub enum TokenError {
    #[error(
        "no default place for the API token file (neither XDG_CONFIG_HOME nor HOME is set); give --api-token-file FILE"
    )]
    NoHome,
    #[error(
        "the API token file {path} may be read or written by others (mode {mode:04o}); run `chmod 600 {path}` (a token others can read is no secret)"
    )]
    Exposed { path: String, mode: u32 },
    #[error("the API token file {path} is not a regular file")]
    NotAFile { path: String },
    #[error(
        "the API token file {path} {why}; write one token in it, or remove it to have one generated at the next start"
    )]
    Unusable { path: String, why: &'static str },
    #[error("the API token given (--api-token, --token or CLARION_API_TOKEN) {0}")]
    BadToken(&'static str),
    #[error(
        "--api-no-auth leaves the control API open to anyone who can reach {addr}: bind it to a loopback address (127.0.0.1, ::1), or keep the token"
    )]
    OpenBeyondLoopback { addr: SocketAddr },
    #[error("cannot read the API token file {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot create the API token file {path} (give --api-token-file FILE elsewhere, or --api-token)"
    )]
    Create {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot generate an API token (reading /dev/urandom)")]
    Random(#[source] std::io::Error),
}

impl TokenError {
    /// Whether the operator must change something (a flag, a file's mode)
    /// rather than the system failing.
    pub fn is_usage(&self) -> bool {
        !matches!(
            self,
            TokenError::Read { .. } | TokenError::Create { .. } | TokenError::Random(_)
        )
    }
}

/// The default token file: `$XDG_CONFIG_HOME/clarion/api-token`, else
/// `$HOME/.config/clarion/api-token` (relative or empty values are
/// ignored, as the XDG specification says).
pub fn default_path() -> Result<PathBuf, TokenError> {
    default_path_from(std::env::var_os("XDG_CONFIG_HOME"), std::env::var_os("HOME"))
}

fn default_path_from(
    xdg: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Result<PathBuf, TokenError> {
    let absolute = |v: Option<std::ffi::OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    absolute(xdg)
        .or_else(|| absolute(home).map(|h| h.join(".config")))
        .map(|c| c.join("clarion").join("api-token"))
        .ok_or(TokenError::NoHome)
}

/// Refuses a token no client could send or a server compare usefully:
/// empty, or with control or non-ASCII characters (HTTP header values).
pub fn check_token(token: &str) -> Result<(), TokenError> {
    if token.trim().is_empty() {
        return Err(TokenError::BadToken(
            "is empty; give a non-empty one (or none to use the token file)",
        ));
    }
    if !token.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
        return Err(TokenError::BadToken(
            "has control or non-ASCII characters, which HTTP headers cannot carry",
        ));
    }
    Ok(())
}

/// The token kept in `path`: a regular file that only its owner may read
/// or write, holding one token (surrounding whitespace ignored).
pub fn read(path: &Path) -> Result<String, TokenError> {
    let name = path.display().to_string();
    let read_err = |source| TokenError::Read {
        path: name.clone(),
        source,
    };
    let file = File::open(path).map_err(read_err)?;
    // The mode of the file opened, not of a name that could change meanwhile.
    let meta = file.metadata().map_err(read_err)?;
    if !meta.is_file() {
        return Err(TokenError::NotAFile { path: name });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(TokenError::Exposed { path: name, mode });
    }
    let mut text = String::new();
    let unusable = |why| TokenError::Unusable {
        path: name.clone(),
        why,
    };
    file.take(MAX_TOKEN_LEN + 1)
        .read_to_string(&mut text)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => unusable("is not text (UTF-8)"),
            _ => read_err(e),
        })?;
    if text.len() as u64 > MAX_TOKEN_LEN {
        return Err(unusable("is too long to be a token (over 4 KiB)"));
    }
    let token = text.trim();
    if token.is_empty() {
        return Err(unusable("is empty"));
    }
    if token.lines().count() > 1 {
        return Err(unusable("holds more than one line"));
    }
    check_token(token).map_err(|_| unusable("holds control or non-ASCII characters"))?;
    Ok(token.to_string())
}

/// The token kept in `path`, or a new one written there (mode 0600, its
/// directory created with mode 0700) when there is none; true when it was
/// created by this call.
pub fn read_or_create(path: &Path) -> Result<(String, bool), TokenError> {
    match fs::symlink_metadata(path) {
        Ok(_) => return read(path).map(|t| (t, false)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(TokenError::Read {
                path: path.display().to_string(),
                source,
            })
        }
    }
    let token = generate()?;
    if create(path, &token)? {
        Ok((token, true))
    } else {
        // Another server created it first: use theirs.
        read(path).map(|t| (t, false))
    }
}

/// Writes `token` to `path` unless a file is there; false when one was.
fn create(path: &Path, token: &str) -> Result<bool, TokenError> {
    let name = path.display().to_string();
    let create_err = |source| TokenError::Create {
        path: name.clone(),
        source,
    };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(dir) = dir {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(create_err)?;
    }
    let file_name = path
        .file_name()
        .map_or_else(|| "api-token".into(), |n| n.to_string_lossy());
    // Unique to this call: concurrent callers each write their own.
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let tmp = path.with_file_name(format!(".{file_name}.{}.{call}.tmp", std::process::id()));
    let written = write_new(&tmp, token).map_err(create_err);
    let linked = written.and_then(|()| match fs::hard_link(&tmp, path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        // No hard links here (some network or FAT file systems): create the
        // final name directly; a reader racing this sees it empty at worst.
        Err(_) => match write_new(path, token) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(create_err(e)),
        },
    });
    let _ = fs::remove_file(&tmp);
    linked
}

/// Creates `path` (never an existing file) with mode 0600 and writes `token` in it.
fn write_new(path: &Path, token: &str) -> std::io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    writeln!(f, "{token}")?;
    f.sync_all()
}

/// 32 random bytes from the kernel, in hex (64 characters).
pub fn generate() -> Result<String, TokenError> {
    let mut bytes = [0u8; 32];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(TokenError::Random)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The token a server uses, and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerToken {
    /// `--api-no-auth`: none (loopback only).
    Open,
    /// Given on the command line or in the environment.
    Given(String),
    /// Kept in a file; `created` when this start generated it.
    File {
        token: String,
        path: PathBuf,
        created: bool,
    },
}

impl ServerToken {
    /// Decides a server's token from its settings: `no_auth` (refused
    /// beyond loopback), else `given`, else the file `file` or the default
    /// one, created if missing.
    pub fn resolve(
        addr: SocketAddr,
        no_auth: bool,
        given: Option<&str>,
        file: Option<&Path>,
    ) -> Result<ServerToken, TokenError> {
        if no_auth {
            if !addr.ip().is_loopback() {
                return Err(TokenError::OpenBeyondLoopback { addr });
            }
            return Ok(ServerToken::Open);
        }
        if let Some(t) = given {
            check_token(t)?;
            return Ok(ServerToken::Given(t.to_string()));
        }
        let path = match file {
            Some(p) => p.to_path_buf(),
            None => default_path()?,
        };
        let (token, created) = read_or_create(&path)?;
        Ok(ServerToken::File { token, path, created })
    }

    /// The token requests need, if any.
    pub fn token(&self) -> Option<&str> {
        match self {
            ServerToken::Open => None,
            ServerToken::Given(t) | ServerToken::File { token: t, .. } => Some(t),
        }
    }

    /// What to print once, when the token was generated: the token, where
    /// it is kept, and how to send it to the API at `bound`.
    pub fn announcement(&self, bound: SocketAddr) -> Option<String> {
        let ServerToken::File {
            token,
            path,
            created: true,
        } = self
        else {
            return None;
        };
        // A wildcard bind is reached through loopback from this machine.
        let host = match bound.ip() {
            ip if ip.is_unspecified() && bound.is_ipv4() => "127.0.0.1".to_string(),
            ip if ip.is_unspecified() => "[::1]".to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        let path = path.display();
        Some(format!(
            "clarion: control API token generated (shown this once; kept in {path}, mode 0600):\n  \
             {token}\n\
             clarion events reads it from there; other clients send it as a bearer token:\n  \
             curl -H \"Authorization: Bearer $(cat '{path}')\" http://{host}:{port}/v1/events",
            port = bound.port()
        ))
    }
}

/// The token a client sends: `given` (`--token`, `CLARION_API_TOKEN`),
/// else the one in `file` (which must be usable), else the one in the
/// default file if there is one. Also where it looked, for a 401's hint.
pub fn client_token(
    given: Option<&str>,
    file: Option<&Path>,
) -> Result<(Option<String>, Option<PathBuf>), TokenError> {
    if let Some(t) = given {
        check_token(t)?;
        return Ok((Some(t.to_string()), None));
    }
    if let Some(p) = file {
        return read(p).map(|t| (Some(t), Some(p.to_path_buf())));
    }
    // No default place (no HOME): no token, as for a server without one.
    let Ok(p) = default_path() else {
        return Ok((None, None));
    };
    match fs::symlink_metadata(&p) {
        Ok(_) => read(&p).map(|t| (Some(t), Some(p))),
        Err(_) => Ok((None, Some(p))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory removed when dropped (no dev-dependency for so little).
    struct TempDir(PathBuf);

    impl TempDir {
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    mod tempfile {
        pub(super) fn tempdir() -> std::io::Result<super::TempDir> {
            use std::sync::atomic::{AtomicU64, Ordering};
            static N: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!(
                "clarion-token-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir(&p)?;
            Ok(super::TempDir(p))
        }
    }

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).expect("metadata").permissions().mode() & 0o777
    }

    #[test]
    fn a_token_is_created_private_once_then_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("conf/clarion/api-token");
        let (t, created) = read_or_create(&path).expect("created");
        assert!(created);
        assert_eq!(t.len(), 64);
        assert!(t.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().expect("dir")), 0o700);
        assert_eq!(fs::read_to_string(&path).expect("text"), format!("{t}\n"));
        assert_eq!(read_or_create(&path).expect("reused"), (t.clone(), false));
        let leftovers = fs::read_dir(path.parent().expect("dir")).expect("list").count();
        assert_eq!(leftovers, 1, "no temporary file is left");
        let other = read_or_create(&dir.path().join("other")).expect("another");
        assert_ne!(other.0, t, "tokens are random");
    }

    #[test]
    fn servers_starting_together_agree_on_one_token() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("api-token");
        let tokens: Vec<(String, bool)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8).map(|_| s.spawn(|| read_or_create(&path))).collect();
            hs.into_iter()
                .map(|h| h.join().expect("joined").expect("a token"))
                .collect()
        });
        assert!(tokens.iter().all(|(t, _)| *t == tokens[0].0), "{tokens:?}");
        assert!(tokens.iter().filter(|(_, c)| *c).count() <= 1);
    }

    #[test]
    fn a_file_others_may_read_or_a_bad_one_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("api-token");
        fs::write(&path, "s3cret\n").expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = read_or_create(&path).expect_err("world-readable");
        assert!(matches!(e, TokenError::Exposed { mode: 0o644, .. }), "{e}");
        assert!(e.to_string().contains("chmod 600"), "{e}");
        assert!(e.is_usage());
        fs::set_permissions(&path, fs::Permissions::from_mode(0o620)).expect("chmod");
        assert!(matches!(read(&path), Err(TokenError::Exposed { .. })));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o400)).expect("chmod");
        assert_eq!(read(&path).expect("private"), "s3cret");
        assert_eq!(
            fs::read_to_string(&path).expect("text"),
            "s3cret\n",
            "an existing file is never rewritten"
        );

        let bad = |text: &[u8]| {
            let p = dir.path().join("bad");
            let _ = fs::remove_file(&p);
            write_new(&p, "").expect("create");
            fs::write(&p, text).expect("write");
            read(&p)
        };
        assert!(matches!(
            bad(b""),
            Err(TokenError::Unusable { why: "is empty", .. })
        ));
        assert!(matches!(bad(b" \n\n"), Err(TokenError::Unusable { .. })));
        assert!(matches!(bad(b"a\nb\n"), Err(TokenError::Unusable { .. })));
        assert!(matches!(bad(b"\xff\xfe"), Err(TokenError::Unusable { .. })));
        assert!(matches!(bad(b"t\x07k"), Err(TokenError::Unusable { .. })));
        assert!(matches!(bad(&[b'a'; 5000]), Err(TokenError::Unusable { .. })));
        assert_eq!(bad(b"  tok en \n").expect("trimmed"), "tok en");
        let e = read(dir.path()).expect_err("a directory");
        assert!(
            matches!(e, TokenError::NotAFile { .. } | TokenError::Read { .. }),
            "{e}"
        );
    }

    #[test]
    fn servers_resolve_their_token_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("t");
        let lo: SocketAddr = "127.0.0.1:8700".parse().expect("addr");
        let any: SocketAddr = "0.0.0.0:8700".parse().expect("addr");
        assert_eq!(
            ServerToken::resolve(lo, true, Some("x"), None).expect("open"),
            ServerToken::Open
        );
        assert!(matches!(
            ServerToken::resolve(any, true, None, None),
            Err(TokenError::OpenBeyondLoopback { .. })
        ));
        assert_eq!(
            ServerToken::resolve(any, false, Some("x"), Some(&file)).expect("given"),
            ServerToken::Given("x".into())
        );
        assert!(ServerToken::resolve(lo, false, Some(" "), None).is_err());
        let first = ServerToken::resolve(any, false, None, Some(&file)).expect("created");
        let said = first.announcement(any).expect("announced once");
        let token = first.token().expect("a token").to_string();
        assert!(said.contains(&token), "{said}");
        assert!(said.contains("curl -H \"Authorization: Bearer $(cat '"), "{said}");
        assert!(said.contains("http://127.0.0.1:8700/v1/events"), "{said}");
        let again = ServerToken::resolve(lo, false, None, Some(&file)).expect("reused");
        assert_eq!(again.token(), Some(token.as_str()));
        assert_eq!(again.announcement(lo), None, "printed only when created");
        assert_eq!(
            client_token(None, Some(&file)).expect("client").0.as_deref(),
            Some(token.as_str())
        );
        assert_eq!(
            client_token(Some("y"), Some(&file)).expect("client").0.as_deref(),
            Some("y")
        );
        assert!(client_token(None, Some(&dir.path().join("none"))).is_err());
    }

    #[test]
    fn the_default_file_follows_xdg() {
        let p = |x: Option<&str>, h: Option<&str>| {
            default_path_from(x.map(Into::into), h.map(Into::into)).map(|p| p.display().to_string())
        };
        assert_eq!(p(Some("/x"), Some("/h")).expect("xdg"), "/x/clarion/api-token");
        assert_eq!(
            p(Some("rel"), Some("/h")).expect("home"),
            "/h/.config/clarion/api-token"
        );
        assert_eq!(
            p(Some(""), Some("/h")).expect("home"),
            "/h/.config/clarion/api-token"
        );
        assert!(matches!(p(None, None), Err(TokenError::NoHome)));
        assert!(check_token("a b").is_ok());
        assert!(check_token("a\nb").is_err());
        assert!(check_token("é").is_err());
    }
}
