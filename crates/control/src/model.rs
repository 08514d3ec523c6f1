//! Bodies of the control API and the commands behind its routes.

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::oneshot;

/// One installed network-wide event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventInfo {
    pub id: u64,
    pub name: String,
    /// The event's canonical source.
    pub source: String,
    /// The hosts holding its trigger.
    pub hosts: Vec<String>,
    /// The predicate each of those hosts tests (the split threshold).
    pub local_predicate: String,
    pub interval_ns: u64,
    /// When it was installed (RFC 3339).
    pub added: String,
    /// A live host's event added at runtime: the start of its first window
    /// (the next window boundary every worker reaches), nanoseconds since
    /// the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_ns: Option<u64>,
}

/// One host of the inventory as the manager sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    pub name: String,
    pub prefixes: Vec<String>,
    /// `up` (heard from in the last 3 s), `down` (heard from before, not since) or `unknown`.
    pub state: String,
    /// Milliseconds since the host was last heard from.
    pub last_seen_ms: Option<u64>,
    /// The host's capture ended (replays).
    pub finished: bool,
    /// Network-wide triggers installed on it.
    pub triggers: usize,
    pub satisfaction_reports: u64,
    pub polls_answered: u64,
    /// Polls it did not answer in time, or answered "window no longer kept".
    pub polls_missed: u64,
    /// Its reports and answers the manager refused as impossible, by
    /// reason (`beyond_the_link`, `wrong_group`, …; docs/security.md).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub refused: std::collections::BTreeMap<String, u64>,
    /// What the host last said of its health (absent: an agent that sends
    /// none, or none heard since the manager started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HostHealth>,
}

/// A host's health as it measures it (see [`crate::health`] for how).
/// Totals count from the host's start; a rate is over the last few seconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostHealth {
    /// Frames that reached the monitor per second (IP or not, parsed or
    /// not), over the last [`HostHealth::rate_window_s`] seconds.
    pub packets_per_second: f64,
    /// The window of `packets_per_second`, in seconds: 5, or less just
    /// after the host started.
    pub rate_window_s: f64,
    /// Frames that reached the monitor (a capture file: every packet it holds).
    pub packets_total: u64,
    /// Packets lost: `drops_kernel_total + malformed_total + untracked_total`.
    pub drops_total: u64,
    /// Packets the kernel dropped before the monitor (full ring; 0 for files).
    pub drops_kernel_total: u64,
    /// Frames that could not be parsed.
    pub malformed_total: u64,
    /// Packets of flows the full flow table could not track (0 where the
    /// host does not count them: a live host's workers report none).
    pub untracked_total: u64,
    /// The fraction of packets inspected, in `[0, 1]`:
    /// `(packets_total − malformed − untracked) / (packets_total + drops_kernel)`,
    /// 1 before any packet. Since the host started.
    pub completeness: f64,
    /// Epochs swept, and of those the sweeps unfinished when the next epoch ended.
    pub sweeps_total: u64,
    pub late_sweeps_total: u64,
    /// Wall time of the latest epoch's sweep, and the longest since the
    /// host started, in seconds (absent: a replay, which sweeps inline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_seconds_last: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_seconds_max: Option<f64>,
    /// Seconds since the host started.
    pub uptime_s: f64,
}

/// The metric apps of a live host (`/v1/apps`): those running on its GPVs,
/// and those it knows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AppsInfo {
    pub running: Vec<String>,
    pub available: Vec<String>,
}

/// The body of `POST /v1/apps`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AppRequest {
    pub name: String,
}

/// One export policy installed on a live host (`/v1/exports`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExportInfo {
    pub name: String,
    /// The policy's canonical source (one `export` block).
    pub source: String,
    /// Packets it took so far, every worker's.
    pub matched: u64,
    /// When it was installed (RFC 3339).
    pub added: String,
}

/// What an exports route asks of a live host.
#[derive(Debug)]
pub enum ExportsCommand {
    List {
        reply: Reply<Vec<ExportInfo>>,
    },
    /// Install every policy of the text (all or none; checked already).
    Add {
        source: String,
        reply: Reply<Vec<ExportInfo>>,
    },
    Show {
        name: String,
        reply: Reply<ExportInfo>,
    },
    Remove {
        name: String,
        reply: Reply<ExportInfo>,
    },
}

impl ExportsCommand {
    /// Answers with 404 saying `why` (where no policies are installed: a manager).
    pub fn refuse(self, why: &str) {
        fn no<T>(why: &str) -> Result<T, ControlError> {
            Err(ControlError::NotFound(why.to_string()))
        }
        match self {
            ExportsCommand::List { reply } | ExportsCommand::Add { reply, .. } => drop(reply.send(no(why))),
            ExportsCommand::Show { reply, .. } | ExportsCommand::Remove { reply, .. } => {
                drop(reply.send(no(why)))
            }
        }
    }
}

/// The body of every error response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Sent cut to [`MAX_ERROR_BYTES`].
    #[serde(serialize_with = "capped")]
    pub error: String,
}

/// The most bytes of an error text a response carries. The manager renders
/// at most 50 diagnostics, each cut to a bounded size (a few kilobytes at
/// worst), so this bounds what any other error could send: a 4,000-error
/// body once made a 1.4 GB answer.
pub const MAX_ERROR_BYTES: usize = 64 * 1024;

/// `text` cut to [`MAX_ERROR_BYTES`] at a line's end (or a character's, for
/// one long line), with a last line saying so.
pub fn cap_error(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= MAX_ERROR_BYTES {
        return text.into();
    }
    let mut end = MAX_ERROR_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    // Keep whole lines when there are any: a rendered report cut mid-line is harder to read.
    let end = text[..end].rfind('\n').map_or(end, |i| i + 1);
    format!(
        "{}\n… cut at {} of {} bytes",
        text[..end].trim_end(),
        end,
        text.len()
    )
    .into()
}

fn capped<S: serde::Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&cap_error(text))
}

/// The text of an events file sent as a body. Invalid UTF-8 is refused
/// with its line and column, as `clarion check` shows it.
pub fn events_text(body: &[u8]) -> Result<String, ControlError> {
    match std::str::from_utf8(body) {
        Ok(text) => Ok(text.to_string()),
        Err(e) => {
            let before = &body[..e.valid_up_to()];
            let line = before.iter().filter(|b| **b == b'\n').count() + 1;
            let start = before.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            // `before` is valid UTF-8: its characters are counted exactly.
            let column = String::from_utf8_lossy(&before[start..]).chars().count() + 1;
            let byte = body.get(e.valid_up_to()).copied().unwrap_or_default();
            Err(ControlError::Invalid(format!(
                "the body must be an events file's text in UTF-8: byte 0x{byte:02X} at line {line}, column {column} is not"
            )))
        }
    }
}

/// Why a command failed; each maps to an HTTP status.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum ControlError {
    /// The request is wrong (an invalid event, a host event, a name in use): 400.
    #[error("{0}")]
    Invalid(String),
    /// No such event: 404.
    #[error("{0}")]
    NotFound(String),
    /// The manager could not do it (its store failed): 500.
    #[error("{0}")]
    Failed(String),
    /// The request's body is over the API's limit: 413.
    #[error("{0}")]
    TooLarge(String),
    /// The manager is shutting down: 503.
    #[error("the manager is shutting down")]
    Gone,
}

pub type Reply<T> = oneshot::Sender<Result<T, ControlError>>;

/// What a route asks of the manager.
#[derive(Debug)]
pub enum Command {
    /// Install every event of an events file's text (all or none).
    Add {
        source: String,
        reply: Reply<Vec<EventInfo>>,
    },
    Remove {
        name: String,
        reply: Reply<EventInfo>,
    },
    /// Shared, not copied: a manager holding 20,000 events lists them
    /// without building each again in the loop that decides.
    List {
        reply: Reply<Vec<std::sync::Arc<EventInfo>>>,
    },
    Show {
        name: String,
        reply: Reply<EventInfo>,
    },
    Hosts {
        reply: Reply<Vec<HostInfo>>,
    },
    /// A live host's metric apps: those running and those known.
    Apps {
        reply: Reply<AppsInfo>,
    },
    /// Starts an app on the host's GPVs from now on.
    AddApp {
        name: String,
        reply: Reply<AppsInfo>,
    },
    /// A running app's report so far.
    ShowApp {
        name: String,
        reply: Reply<serde_json::Value>,
    },
    /// Stops an app; the answer is its last report.
    RemoveApp {
        name: String,
        reply: Reply<serde_json::Value>,
    },
    /// A live host's export policies.
    Exports(ExportsCommand),
    /// The top talkers of an event's group and window, from the flow
    /// records the host keeps in memory (the answer: `FlowsAnswer` in
    /// docs/api/openapi.yaml).
    Flows {
        request: FlowsRequest,
        reply: Reply<serde_json::Value>,
    },
    /// A page of the network-wide reports the manager kept (the answer:
    /// `HistoryPage` in docs/api/openapi.yaml).
    History {
        request: HistoryRequest,
        reply: Reply<serde_json::Value>,
    },
}

/// A query's parameters, each once and each one `allowed` (`route` names
/// the route in the refusal), in the order given.
fn query_params(query: &str, allowed: &[&str], route: &str) -> Result<Vec<(String, String)>, ControlError> {
    let mut seen: Vec<(String, String)> = Vec::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if !allowed.contains(&&*k) {
            return Err(ControlError::Invalid(format!(
                "unknown parameter `{k}`: {route} takes {}",
                allowed.join(", ")
            )));
        }
        if seen.iter().any(|(s, _)| *s == k) {
            return Err(ControlError::Invalid(format!("parameter `{k}` given twice")));
        }
        seen.push((k.into_owned(), v.into_owned()));
    }
    Ok(seen)
}

/// `GET /v1/reports/history`'s query, checked: which reports (an event,
/// windows starting in `[from, to)`), how many, and where (`before` or
/// `after` a report's `seq`, not both; neither: the newest).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistoryRequest {
    pub event: Option<String>,
    pub from_ns: Option<u64>,
    pub to_ns: Option<u64>,
    pub limit: usize,
    pub before: Option<u64>,
    pub after: Option<u64>,
}

impl HistoryRequest {
    /// Reports in a page when the query names no `limit`.
    pub const DEFAULT_LIMIT: usize = 100;
    /// The most `limit` may ask for.
    pub const MAX_LIMIT: usize = 1_000;

    /// Reads `[event=NAME][&from=NS][&to=NS][&limit=N][&before=SEQ|&after=SEQ]`;
    /// a parameter unknown, repeated or out of range is refused, named.
    pub fn from_query(query: &str) -> Result<HistoryRequest, ControlError> {
        let bad = |m: String| ControlError::Invalid(m);
        let seen = query_params(
            query,
            &["event", "from", "to", "limit", "before", "after"],
            "/v1/reports/history",
        )?;
        let get = |k: &str| seen.iter().find(|(s, _)| s == k).map(|(_, v)| v.as_str());
        let number = |k: &str, what: &str| -> Result<Option<u64>, ControlError> {
            get(k)
                .map(|v| v.parse().map_err(|_| bad(format!("`{k}` must be {what}"))))
                .transpose()
        };
        let ns = "a time in nanoseconds since 1970 (a report's window.start_ns)";
        let seq = "a report's `seq` (a page's `older` or `newer`)";
        let r = HistoryRequest {
            event: get("event").map(str::to_string),
            from_ns: number("from", ns)?,
            to_ns: number("to", ns)?,
            limit: match get("limit") {
                None => Self::DEFAULT_LIMIT,
                Some(l) => l
                    .parse()
                    .ok()
                    .filter(|l| (1..=Self::MAX_LIMIT).contains(l))
                    .ok_or_else(|| bad(format!("`limit` must be a number from 1 to {}", Self::MAX_LIMIT)))?,
            },
            before: number("before", seq)?,
            after: number("after", seq)?,
        };
        if r.before.is_some() && r.after.is_some() {
            return Err(bad(
                "give `before` (older reports) or `after` (newer ones), not both".into(),
            ));
        }
        if let (Some(from), Some(to)) = (r.from_ns, r.to_ns) {
            if from >= to {
                return Err(bad(format!(
                    "the span is empty: from {from} is not before to {to}"
                )));
            }
        }
        Ok(r)
    }
}

/// `GET /v1/flows`'s query, checked: which event, group and window, how
/// many talkers, ranked by what.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowsRequest {
    pub event: String,
    /// A report's `group` object (`{}`: the event has no granularity).
    pub group: serde_json::Value,
    pub from_ns: u64,
    pub to_ns: u64,
    pub top: usize,
    /// `bytes` or `packets`.
    pub by: String,
}

impl FlowsRequest {
    /// Talkers listed when the query names no `top`.
    pub const DEFAULT_TOP: usize = 10;
    /// The most `top` may ask for.
    pub const MAX_TOP: usize = 1_000;

    /// Reads `event=NAME&group=JSON&from=NS&to=NS[&top=N][&by=bytes|packets]`
    /// (URL-encoded); a parameter missing, repeated, unknown or out of
    /// range is refused, named.
    pub fn from_query(query: &str) -> Result<FlowsRequest, ControlError> {
        let bad = |m: String| ControlError::Invalid(m);
        let seen = query_params(query, &["event", "group", "from", "to", "top", "by"], "/v1/flows")?;
        let get = |k: &str| seen.iter().find(|(s, _)| s == k).map(|(_, v)| v.as_str());
        let need = |k: &str| get(k).ok_or_else(|| bad(format!("parameter `{k}` is missing")));
        let ns = |k: &str| -> Result<u64, ControlError> {
            need(k)?.parse().map_err(|_| {
                bad(format!(
                    "`{k}` must be a time in nanoseconds since 1970 (a report's window.{k}_ns)"
                ))
            })
        };
        let (from_ns, to_ns) = (ns("from")?, ns("to")?);
        if from_ns >= to_ns {
            return Err(bad(format!(
                "the window is empty: from {from_ns} is not before to {to_ns}"
            )));
        }
        let group: serde_json::Value = match get("group") {
            None => serde_json::json!({}),
            Some(g) => serde_json::from_str(g)
                .ok()
                .filter(serde_json::Value::is_object)
                .ok_or_else(|| {
                    bad("`group` must be a report's group: a JSON object such as {\"dst_port\":80}".into())
                })?,
        };
        let top = match get("top") {
            None => Self::DEFAULT_TOP,
            Some(t) => t
                .parse()
                .ok()
                .filter(|t| (1..=Self::MAX_TOP).contains(t))
                .ok_or_else(|| bad(format!("`top` must be a number from 1 to {}", Self::MAX_TOP)))?,
        };
        let by = get("by").unwrap_or("bytes");
        if by != "bytes" && by != "packets" {
            return Err(bad(format!("`by` must be bytes or packets, not {by:?}")));
        }
        Ok(FlowsRequest {
            event: need("event")?.to_string(),
            group,
            from_ns,
            to_ns,
            top,
            by: by.to_string(),
        })
    }
}

impl Command {
    /// Answers an apps command where no apps run (a manager) with 404
    /// saying `why`; any other command is refused as a bug would be (500).
    pub fn refuse_apps(self, why: &str) {
        fn no<T>(why: &str) -> Result<T, ControlError> {
            Err(ControlError::NotFound(why.to_string()))
        }
        match self {
            Command::Apps { reply } | Command::AddApp { reply, .. } => drop(reply.send(no(why))),
            Command::ShowApp { reply, .. } | Command::RemoveApp { reply, .. } => drop(reply.send(no(why))),
            Command::Add { reply, .. } => {
                drop(reply.send(Err(ControlError::Failed("not an apps command".into()))))
            }
            Command::List { reply } => {
                drop(reply.send(Err(ControlError::Failed("not an apps command".into()))))
            }
            Command::Remove { reply, .. } | Command::Show { reply, .. } => {
                drop(reply.send(Err(ControlError::Failed("not an apps command".into()))))
            }
            Command::Hosts { reply } => {
                drop(reply.send(Err(ControlError::Failed("not an apps command".into()))))
            }
            Command::Exports(c) => c.refuse("not an apps command"),
            Command::Flows { reply, .. } | Command::History { reply, .. } => {
                drop(reply.send(Err(ControlError::Failed("not an apps command".into()))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_query_is_read_or_refused_naming_its_fault() {
        assert_eq!(
            HistoryRequest::from_query(""),
            Ok(HistoryRequest {
                limit: HistoryRequest::DEFAULT_LIMIT,
                ..HistoryRequest::default()
            })
        );
        assert_eq!(
            HistoryRequest::from_query("event=spike&from=10&to=20&limit=5&before=9"),
            Ok(HistoryRequest {
                event: Some("spike".into()),
                from_ns: Some(10),
                to_ns: Some(20),
                limit: 5,
                before: Some(9),
                after: None,
            })
        );
        for (query, says) in [
            ("limit=0", "`limit` must be a number from 1 to 1000"),
            ("limit=1001", "`limit` must be"),
            ("before=1&after=2", "not both"),
            ("after=-1", "`after` must be a report's `seq`"),
            ("from=x", "`from` must be a time in nanoseconds"),
            ("from=5&to=5", "the span is empty"),
            ("limit=1&limit=2", "parameter `limit` given twice"),
            (
                "cursor=3",
                "unknown parameter `cursor`: /v1/reports/history takes event, from",
            ),
        ] {
            let e = HistoryRequest::from_query(query).expect_err(query);
            assert!(
                matches!(&e, ControlError::Invalid(m) if m.contains(says)),
                "{query}: {e}"
            );
        }
    }

    #[test]
    fn error_bodies_are_capped_at_a_line_end() {
        let line = "x".repeat(99) + "\n";
        let text = line.repeat(10_000);
        let body = serde_json::to_string(&ErrorBody { error: text.clone() }).expect("serializes");
        let sent: ErrorBody = serde_json::from_str(&body).expect("reads back");
        assert!(sent.error.len() <= MAX_ERROR_BYTES + 64, "{}", sent.error.len());
        assert!(
            sent.error
                .ends_with(&format!("… cut at 65500 of {} bytes", text.len())),
            "{}",
            &sent.error[sent.error.len() - 80..]
        );
        assert!(
            sent.error.lines().rev().skip(1).all(|l| l.len() == 99),
            "whole lines only"
        );
        // Short texts go as they are.
        assert_eq!(cap_error("short"), "short");
    }

    #[test]
    fn one_long_line_is_cut_at_a_character() {
        let text = "é".repeat(MAX_ERROR_BYTES);
        let cut = cap_error(&text);
        assert!(cut.len() <= MAX_ERROR_BYTES + 64);
        assert!(
            cut.starts_with("éé") && cut.contains("… cut at 65536 of 131072 bytes"),
            "{}",
            &cut[cut.len() - 40..]
        );
    }

    #[test]
    fn invalid_utf8_is_placed_by_line_and_column() {
        assert_eq!(events_text(b"event a\n").as_deref(), Ok("event a\n"));
        let e = events_text(b"event a\n  when \xC3\xA9 \xFF\n").expect_err("invalid");
        assert_eq!(
            e.to_string(),
            "the body must be an events file's text in UTF-8: byte 0xFF at line 2, column 10 is not"
        );
    }
}
