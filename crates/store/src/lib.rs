//! The event manager's persistent store: one SQLite file holding every
//! installed network-wide event (its id, name and canonical source) and a
//! few numbers of the manager's (when it was last alive, the latest window
//! it saw). A manager that restarts reinstalls the events under the same
//! ids (hosts still holding their triggers keep them) and reports the
//! windows it could not decide while it was down.
//!
//! The source, not a serialized spec, is what is kept: it is what the
//! operator wrote, and it is checked again by the language of the version
//! that reads it.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("event store {path}: {source}")]
    Sqlite {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("event store {path} was written by a newer Clarion (schema {found}, this one reads {known})")]
    Schema { path: String, found: i64, known: i64 },
}

/// One installed event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredEvent {
    pub id: u64,
    pub name: String,
    /// The event's canonical source (one `event ...` block).
    pub source: String,
    /// When it was installed, nanoseconds since the Unix epoch.
    pub added_ns: u64,
}

const SCHEMA: i64 = 1;

/// See the crate documentation.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: String,
}

impl Store {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let name = path.display().to_string();
        let conn = Connection::open(path).map_err(|source| StoreError::Sqlite {
            path: name.clone(),
            source,
        })?;
        Store::init(conn, name)
    }

    /// A store that lives as long as the value (tests, `--no-store`).
    pub fn in_memory() -> Result<Store, StoreError> {
        let conn = Connection::open_in_memory().map_err(|source| StoreError::Sqlite {
            path: ":memory:".into(),
            source,
        })?;
        Store::init(conn, ":memory:".into())
    }

    fn init(conn: Connection, path: String) -> Result<Store, StoreError> {
        let s = Store { conn, path };
        let found: i64 = s
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| s.err(e))?;
        if found > SCHEMA {
            return Err(StoreError::Schema {
                path: s.path,
                found,
                known: SCHEMA,
            });
        }
        s.conn
            .execute_batch(
                "PRAGMA journal_mode = WAL;
                 CREATE TABLE IF NOT EXISTS events (
                     id INTEGER PRIMARY KEY,
                     name TEXT NOT NULL UNIQUE,
                     source TEXT NOT NULL,
                     added_ns INTEGER NOT NULL
                 );
                 CREATE TABLE IF NOT EXISTS meta (
                     key TEXT PRIMARY KEY,
                     value INTEGER NOT NULL
                 );
                 PRAGMA user_version = 1;",
            )
            .map_err(|e| s.err(e))?;
        Ok(s)
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// Every stored event, by id.
    pub fn events(&self) -> Result<Vec<StoredEvent>, StoreError> {
        let mut st = self
            .conn
            .prepare("SELECT id, name, source, added_ns FROM events ORDER BY id")
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map([], |r| {
                Ok(StoredEvent {
                    id: r.get::<_, i64>(0)? as u64,
                    name: r.get(1)?,
                    source: r.get(2)?,
                    added_ns: r.get::<_, i64>(3)? as u64,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// Adds an event, or replaces the one with its id; another event's name is refused.
    pub fn put(&self, e: &StoredEvent) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO events (id, name, source, added_ns) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(id) DO UPDATE SET name = excluded.name, source = excluded.source,
                 added_ns = excluded.added_ns",
                params![e.id as i64, e.name, e.source, e.added_ns as i64],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Forgets an event; false when there was none with that id.
    pub fn remove(&self, id: u64) -> Result<bool, StoreError> {
        let n = self
            .conn
            .execute("DELETE FROM events WHERE id = ?1", params![id as i64])
            .map_err(|e| self.err(e))?;
        Ok(n > 0)
    }

    /// Sets a named number (the manager's bookkeeping: when it was last
    /// alive, how far its windows went).
    pub fn set_meta(&self, key: &str, value: u64) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![key, value as i64],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    pub fn meta(&self, key: &str) -> Result<Option<u64>, StoreError> {
        let v: Option<i64> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| self.err(e))?;
        Ok(v.map(|v| v as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: u64, name: &str) -> StoredEvent {
        StoredEvent {
            id,
            name: name.into(),
            source: format!("event {name}\n  when sum(volume) > 1\n  across hosts\n"),
            added_ns: 1_700_000_000_000_000_000 + id,
        }
    }

    #[test]
    fn events_and_progress_survive_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m.sqlite");
        {
            let s = Store::open(&path).expect("opens");
            s.put(&ev(3, "a")).expect("put");
            s.put(&ev(1, "b")).expect("put");
            s.set_meta("alive_ns", 500).expect("meta");
            s.set_meta("alive_ns", 600).expect("meta");
        }
        let s = Store::open(&path).expect("reopens");
        assert_eq!(s.events().expect("events"), vec![ev(1, "b"), ev(3, "a")]);
        assert_eq!(s.meta("alive_ns").expect("read"), Some(600));
        assert_eq!(s.meta("other").expect("read"), None);
        assert!(s.remove(3).expect("remove"));
        assert!(!s.remove(3).expect("remove"));
        assert_eq!(s.events().expect("events"), vec![ev(1, "b")]);
    }

    #[test]
    fn names_are_unique_and_a_newer_schema_is_refused() {
        let s = Store::in_memory().expect("opens");
        s.put(&ev(1, "a")).expect("put");
        assert!(s.put(&ev(2, "a")).is_err(), "a second event named a");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("new.sqlite");
        Connection::open(&path)
            .and_then(|c| c.execute_batch("PRAGMA user_version = 9;"))
            .expect("write");
        let e = Store::open(&path).expect_err("refused");
        assert!(e.to_string().contains("newer Clarion"), "{e}");
    }

    #[test]
    fn a_file_that_is_not_sqlite_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("junk");
        std::fs::write(&path, b"this is not a database, just some text long enough").expect("write");
        let e = Store::open(&path).expect_err("refused");
        assert!(e.to_string().contains("junk"), "{e}");
    }
}
