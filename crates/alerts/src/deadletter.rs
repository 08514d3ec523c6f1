//! The dead-letter file: reports that could not be delivered, one JSON
//! line each (schema `clarion.dead-letter/1`), with why and after how many
//! attempts — so nothing given to an alert sink disappears without a trace.
//!
//! Design: opened for appending (a restart adds to it, never truncates),
//! each line written whole and flushed at once: dead letters are rare, and
//! one must survive the process dying right after. Without a file, the
//! lines go to standard error. Invariant: a line is either fully written
//! or the writer reports an error; the caller then fails the sink (a lost
//! dead letter is lost data). Cost: one write and flush per dead letter.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::notice::Notice;
use serde_json::json;

/// Schema of a dead-letter line.
pub const DEAD_LETTER_SCHEMA: &str = "clarion.dead-letter/1";

/// Where dead letters go.
#[derive(Debug)]
pub enum DeadLetter {
    File { path: PathBuf, file: File },
    Stderr,
}

impl DeadLetter {
    /// Opens (creating if missing) `path` for appending.
    pub fn open(path: &Path) -> Result<DeadLetter, crate::AlertError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| crate::AlertError::DeadLetterFile {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(DeadLetter::File {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Where the lines go, for messages.
    pub fn describe(&self) -> String {
        match self {
            DeadLetter::File { path, .. } => path.display().to_string(),
            DeadLetter::Stderr => "standard error".into(),
        }
    }

    /// Appends one dead letter.
    pub fn write(&mut self, target: &str, notice: &Notice, reason: &str, attempts: u32) -> io::Result<()> {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let mut line = json!({
            "schema": DEAD_LETTER_SCHEMA,
            "target": target,
            "reason": reason,
            "attempts": attempts,
            "key": notice.key,
            "at": clarion_report::rfc3339(now),
            "report": notice.report.to_json(),
        });
        // A transition also keeps what was to be sent (state, rule, times).
        if notice.transition.is_some() {
            line["alert"] = notice.to_json();
        }
        let mut bytes = line.to_string().into_bytes();
        bytes.push(b'\n');
        match self {
            DeadLetter::File { file, .. } => {
                // One write_all of the whole line on an O_APPEND file: lines
                // of several sinks sharing the file do not interleave.
                file.write_all(&bytes)?;
                file.flush()
            }
            DeadLetter::Stderr => {
                let mut e = io::stderr().lock();
                e.write_all(b"clarion: dead letter: ")?;
                e.write_all(&bytes)
            }
        }
    }
}
