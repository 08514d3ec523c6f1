//! The event manager's persistent store: one SQLite file holding every
//! installed network-wide event (its id, name and canonical source), the
//! drill-down instances its events' firings installed (what made each:
//! an instance is a function of its firing and its parent's source), the
//! export policies its hosts run (in order, with the set's version), the
//! network-wide reports it wrote (a bounded history: [`history`]) and a
//! few numbers of the manager's (when it was last alive, the latest window
//! it saw). A manager that restarts reinstalls the events and instances
//! under the same ids (hosts still holding their triggers keep them),
//! sends its hosts the same export policies, and reports the windows it
//! could not decide while it was down.
//!
//! The source, not a serialized spec, is what is kept: it is what the
//! operator wrote, and it is checked again by the language of the version
//! that reads it.
//!
//! Schemas: 1 held events and numbers; 2 added export policies and
//! drill-down instances; 3 the reports' history. A
//! store of an older schema is brought up to date when opened (the tables
//! it lacks created, nothing else touched).
//!
//! A missing file is created with the schema (a first start). An existing
//! file must already be a store: one that is empty, or an SQLite database
//! without the store's tables, is refused ([`StoreError::NoSchema`]) unless
//! opened with [`Store::init`], which creates them; a file that is not
//! SQLite, or a database holding other tables or tables of another shape,
//! is refused either way ([`StoreError::Foreign`]): a mistyped path never
//! turns someone else's file into an empty store.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};
use thiserror::Error;

pub mod history;
pub use history::{HistoryPage, HistoryQuery, NewReport, StoredReport};

#[derive(Debug, Error)]
pub enum StoreError {
    /// SQLite's error is in the message, not a source: said once.
    #[error("event store {path}: {error}")]
    Sqlite { path: String, error: rusqlite::Error },
    #[error("event store {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("event store {path} was written by a newer Clarion (schema {found}, this one reads {known})")]
    Schema { path: String, found: i64, known: i64 },
    #[error(
        "event store {path} {why}; if it is meant to be the store, --init creates its tables \
         (its events are gone), else give another --store"
    )]
    NoSchema { path: String, why: String },
    #[error("{path} is not a Clarion event store: {why}; give another --store (it is left untouched)")]
    Foreign { path: String, why: String },
    #[error("event store {path} is damaged: {why}")]
    Damaged { path: String, why: String },
}

impl StoreError {
    /// Whether the operator gave the wrong file (a flag to change) rather
    /// than the file failing to be read or written.
    pub fn is_usage(&self) -> bool {
        matches!(self, StoreError::NoSchema { .. } | StoreError::Foreign { .. })
    }
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

/// One export policy the manager's hosts run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredExport {
    pub name: String,
    /// The policy's canonical source (one `export ...` block).
    pub source: String,
    /// When it was added, nanoseconds since the Unix epoch.
    pub added_ns: u64,
}

/// One drill-down instance: drill-down `drill` (its index among the
/// parent's `then install`) of event `parent`, fired for `group` (a
/// report's group, as JSON) in the window `[window_start_ns,
/// window_end_ns)`, decided at `decided_ns`; it lasts until `end_ns`
/// (extensions included; `None`: until removed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredInstance {
    pub id: u64,
    pub name: String,
    pub parent: u64,
    pub drill: u64,
    pub window_start_ns: u64,
    pub window_end_ns: u64,
    pub group: String,
    pub decided_ns: u64,
    pub end_ns: Option<u64>,
}

const SCHEMA: i64 = 3;

/// The store's tables, the schema that introduced each, and their columns in order.
const TABLES: [(&str, i64, &[&str]); 5] = [
    ("events", 1, &["id", "name", "source", "added_ns"]),
    ("meta", 1, &["key", "value"]),
    ("exports", 2, &["position", "name", "source", "added_ns"]),
    (
        "instances",
        2,
        &[
            "id",
            "name",
            "parent",
            "drill",
            "window_start_ns",
            "window_end_ns",
            "group_key",
            "decided_ns",
            "end_ns",
        ],
    ),
    (
        "reports",
        3,
        &[
            "seq",
            "event",
            "window_start_ns",
            "group_key",
            "written_ns",
            "report",
        ],
    ),
];

/// The meta number holding the export policies' version.
const EXPORTS_VERSION: &str = "exports_version";

/// See the crate documentation.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: String,
    /// How many reports the history holds, counted once and then kept up
    /// to date by this connection's writes (a count is a scan of the
    /// table); `None` after a failed write: counted again.
    kept: std::cell::Cell<Option<u64>>,
}

impl Store {
    /// Opens the store at `path`, creating it if there is no file there;
    /// an existing file without the store's tables is refused.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Store::open_with(path, false)
    }

    /// Opens the store at `path`, also creating its tables in an existing
    /// file that lacks them, if it holds nothing else (`--init`).
    pub fn init(path: &Path) -> Result<Store, StoreError> {
        Store::open_with(path, true)
    }

    fn open_with(path: &Path, init: bool) -> Result<Store, StoreError> {
        let name = path.display().to_string();
        // Checked before SQLite opens it, which would create it.
        let fresh = match std::fs::metadata(path) {
            Ok(_) => false,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(source) => return Err(StoreError::Io { path: name, source }),
        };
        let conn = Connection::open(path).map_err(|error| StoreError::Sqlite {
            path: name.clone(),
            error,
        })?;
        Store::ready(conn, name, fresh || init)
    }

    /// A store that lives as long as the value (tests, `--no-store`).
    pub fn in_memory() -> Result<Store, StoreError> {
        let conn = Connection::open_in_memory().map_err(|error| StoreError::Sqlite {
            path: ":memory:".into(),
            error,
        })?;
        Store::ready(conn, ":memory:".into(), true)
    }

    /// Checks what the file holds before writing anything to it, then
    /// creates the missing tables when `create` allows.
    fn ready(conn: Connection, path: String, create: bool) -> Result<Store, StoreError> {
        let s = Store {
            conn,
            path,
            kept: std::cell::Cell::new(None),
        };
        let found: i64 = s
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| s.read_err(e))?;
        if found > SCHEMA {
            return Err(StoreError::Schema {
                path: s.path,
                found,
                known: SCHEMA,
            });
        }
        // A store of an older schema must hold that schema's tables; those
        // of later schemas are added below.
        let required = |since: i64| found == 0 || since <= found;
        let missing: Vec<&str> = s
            .check_tables()?
            .into_iter()
            .filter(|t| {
                TABLES
                    .iter()
                    .any(|(name, since, _)| name == t && required(*since))
            })
            .collect();
        if !missing.is_empty() && !create {
            let why = if found == 0 && missing.len() == TABLES.len() {
                "is empty (it has none of the store's tables)".to_string()
            } else {
                format!("lacks its table(s) {}", missing.join(", "))
            };
            return Err(StoreError::NoSchema { path: s.path, why });
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
                 CREATE TABLE IF NOT EXISTS exports (
                     position INTEGER PRIMARY KEY,
                     name TEXT NOT NULL UNIQUE,
                     source TEXT NOT NULL,
                     added_ns INTEGER NOT NULL
                 );
                 CREATE TABLE IF NOT EXISTS instances (
                     id INTEGER PRIMARY KEY,
                     name TEXT NOT NULL,
                     parent INTEGER NOT NULL,
                     drill INTEGER NOT NULL,
                     window_start_ns INTEGER NOT NULL,
                     window_end_ns INTEGER NOT NULL,
                     group_key TEXT NOT NULL,
                     decided_ns INTEGER NOT NULL,
                     end_ns INTEGER
                 );
                 CREATE TABLE IF NOT EXISTS reports (
                     seq INTEGER PRIMARY KEY AUTOINCREMENT,
                     event TEXT NOT NULL,
                     window_start_ns INTEGER NOT NULL,
                     group_key TEXT NOT NULL,
                     written_ns INTEGER NOT NULL,
                     report TEXT NOT NULL,
                     UNIQUE (event, window_start_ns, group_key),
                     UNIQUE (event, seq)
                 );
                 PRAGMA user_version = 3;",
            )
            .map_err(|e| s.err(e))?;
        Ok(s)
    }

    /// The store's tables the file lacks; an error when it holds anything
    /// else (another program's tables, views or indexes) or a table of the
    /// store's name with other columns.
    fn check_tables(&self) -> Result<Vec<&'static str>, StoreError> {
        let mut st = self
            .conn
            .prepare("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")
            .map_err(|e| self.read_err(e))?;
        let objects = st
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| self.read_err(e))?;
        let others: Vec<String> = objects
            .iter()
            .filter(|(kind, name)| !(kind == "table" && TABLES.iter().any(|(t, _, _)| t == name)))
            .map(|(kind, name)| format!("{kind} {name}"))
            .collect();
        if !others.is_empty() {
            return Err(StoreError::Foreign {
                path: self.path.clone(),
                why: format!("it is an SQLite database holding {}", others.join(", ")),
            });
        }
        let mut missing = Vec::new();
        for (table, _, columns) in TABLES {
            if !objects.iter().any(|(_, name)| name == table) {
                missing.push(table);
                continue;
            }
            let mut st = self
                .conn
                .prepare(&format!("PRAGMA table_info({table})"))
                .map_err(|e| self.read_err(e))?;
            let found = st
                .query_map([], |r| r.get::<_, String>(1))
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| self.read_err(e))?;
            if found != columns {
                return Err(StoreError::Foreign {
                    path: self.path.clone(),
                    why: format!(
                        "its table {table} has columns ({}), the store's has ({})",
                        found.join(", "),
                        columns.join(", ")
                    ),
                });
            }
        }
        Ok(missing)
    }

    /// A read's error: a file SQLite does not recognise is foreign.
    fn read_err(&self, source: rusqlite::Error) -> StoreError {
        match source.sqlite_error_code() {
            Some(rusqlite::ErrorCode::NotADatabase) => StoreError::Foreign {
                path: self.path.clone(),
                why: "it is not an SQLite database".into(),
            },
            _ => self.err(source),
        }
    }

    fn err(&self, error: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.clone(),
            error,
        }
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// Every stored event, by id.
    pub fn events(&self) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = self.rows("SELECT id, name, source, added_ns FROM events ORDER BY id", |r| {
            Ok((r.get(0)?, r.get::<_, String>(1)?, r.get(2)?, r.get(3)?))
        })?;
        rows.into_iter()
            .map(|(id, name, source, added_ns)| {
                let of = || format!("event `{name}`");
                Ok(StoredEvent {
                    id: self.unsigned(id, of, "id")?,
                    added_ns: self.unsigned(added_ns, of, "time")?,
                    name: name.clone(),
                    source,
                })
            })
            .collect()
    }

    /// The rows `sql` selects, each read by `row`.
    fn rows<T>(
        &self,
        sql: &str,
        row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>, StoreError> {
        let mut st = self.conn.prepare(sql).map_err(|e| self.err(e))?;
        st.query_map([], row)
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| self.damaged_or(e))
    }

    /// A stored id, time or count, never negative here: one that is was
    /// edited in. `of` names its row, `what` the value.
    fn unsigned(&self, v: i64, of: impl Fn() -> String, what: &str) -> Result<u64, StoreError> {
        u64::try_from(v).map_err(|_| StoreError::Damaged {
            path: self.path.clone(),
            why: format!("{} has a negative {what}", of()),
        })
    }

    /// A row's value of the wrong type (NULL, text for a number) is damage.
    fn damaged_or(&self, source: rusqlite::Error) -> StoreError {
        match source {
            rusqlite::Error::InvalidColumnType(_, column, kind) => StoreError::Damaged {
                path: self.path.clone(),
                why: format!("a row has {kind} in column {column}"),
            },
            other => self.err(other),
        }
    }

    /// Adds an event, or replaces the one with its id; another event's name is refused.
    pub fn put(&self, e: &StoredEvent) -> Result<(), StoreError> {
        self.put_all(std::slice::from_ref(e))
    }

    /// [`Store::put`] for each of `events`, in one transaction: all or
    /// none are stored, and a request of many events costs one commit (one
    /// sync of the log), not one each.
    pub fn put_all(&self, events: &[StoredEvent]) -> Result<(), StoreError> {
        let tx = self.conn.unchecked_transaction().map_err(|e| self.err(e))?;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO events (id, name, source, added_ns) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT(id) DO UPDATE SET name = excluded.name, source = excluded.source,
                     added_ns = excluded.added_ns",
                )
                .map_err(|e| self.err(e))?;
            for e in events {
                insert
                    .execute(params![e.id as i64, e.name, e.source, e.added_ns as i64])
                    .map_err(|e| self.err(e))?;
            }
        }
        tx.commit().map_err(|e| self.err(e))
    }

    /// Forgets an event; false when there was none with that id.
    pub fn remove(&self, id: u64) -> Result<bool, StoreError> {
        let n = self
            .conn
            .execute("DELETE FROM events WHERE id = ?1", params![id as i64])
            .map_err(|e| self.err(e))?;
        Ok(n > 0)
    }

    /// The export policies, in the order they were added, and the set's
    /// version (0: never set).
    pub fn exports(&self) -> Result<(Vec<StoredExport>, u64), StoreError> {
        let rows = self.rows(
            "SELECT name, source, added_ns FROM exports ORDER BY position",
            |r| Ok((r.get::<_, String>(0)?, r.get(1)?, r.get(2)?)),
        )?;
        let policies = rows
            .into_iter()
            .map(|(name, source, added_ns)| {
                let added_ns = self.unsigned(added_ns, || format!("export policy `{name}`"), "time")?;
                Ok(StoredExport {
                    name,
                    source,
                    added_ns,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok((policies, self.meta(EXPORTS_VERSION)?.unwrap_or(0)))
    }

    /// Replaces the export policies with `policies` (in this order) and
    /// their set's version, in one transaction: a restarted manager finds
    /// the set it last sent, whole.
    pub fn set_exports(&self, policies: &[StoredExport], version: u64) -> Result<(), StoreError> {
        let tx = self.conn.unchecked_transaction().map_err(|e| self.err(e))?;
        tx.execute("DELETE FROM exports", []).map_err(|e| self.err(e))?;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO exports (position, name, source, added_ns) VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(|e| self.err(e))?;
            for (i, p) in policies.iter().enumerate() {
                insert
                    .execute(params![i as i64, p.name, p.source, p.added_ns as i64])
                    .map_err(|e| self.err(e))?;
            }
        }
        set_meta(&tx, EXPORTS_VERSION, version).map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))
    }

    /// Every drill-down instance, by id.
    pub fn instances(&self) -> Result<Vec<StoredInstance>, StoreError> {
        type Row = (i64, String, i64, i64, i64, i64, String, i64, Option<i64>);
        let rows: Vec<Row> = self.rows(
            "SELECT id, name, parent, drill, window_start_ns, window_end_ns, group_key, decided_ns, end_ns
             FROM instances ORDER BY id",
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                ))
            },
        )?;
        rows.into_iter()
            .map(|(id, name, parent, drill, ws, we, group, decided, end)| {
                let of = || format!("drill-down instance `{name}`");
                let n = |v: i64, what: &str| self.unsigned(v, of, what);
                Ok(StoredInstance {
                    id: n(id, "id")?,
                    parent: n(parent, "parent")?,
                    drill: n(drill, "drill-down number")?,
                    window_start_ns: n(ws, "window")?,
                    window_end_ns: n(we, "window")?,
                    decided_ns: n(decided, "time")?,
                    end_ns: end.map(|e| n(e, "end")).transpose()?,
                    group,
                    name: name.clone(),
                })
            })
            .collect()
    }

    /// Replaces the drill-down instances with `instances`, in one transaction.
    pub fn set_instances(&self, instances: &[StoredInstance]) -> Result<(), StoreError> {
        let tx = self.conn.unchecked_transaction().map_err(|e| self.err(e))?;
        tx.execute("DELETE FROM instances", []).map_err(|e| self.err(e))?;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO instances (id, name, parent, drill, window_start_ns, window_end_ns,
                     group_key, decided_ns, end_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )
                .map_err(|e| self.err(e))?;
            for i in instances {
                insert
                    .execute(params![
                        i.id as i64,
                        i.name,
                        i.parent as i64,
                        i.drill as i64,
                        i.window_start_ns as i64,
                        i.window_end_ns as i64,
                        i.group,
                        i.decided_ns as i64,
                        i.end_ns.map(|e| e as i64),
                    ])
                    .map_err(|e| self.err(e))?;
            }
        }
        tx.commit().map_err(|e| self.err(e))
    }

    /// Sets a named number (the manager's bookkeeping: when it was last
    /// alive, how far its windows went).
    pub fn set_meta(&self, key: &str, value: u64) -> Result<(), StoreError> {
        set_meta(&self.conn, key, value).map_err(|e| self.err(e))
    }

    pub fn meta(&self, key: &str) -> Result<Option<u64>, StoreError> {
        let v: Option<i64> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| self.damaged_or(e))?;
        v.map(|v| {
            u64::try_from(v).map_err(|_| StoreError::Damaged {
                path: self.path.clone(),
                why: format!("its number {key} is negative"),
            })
        })
        .transpose()
    }
}

/// Sets a named number on `conn` (the store's, or a transaction of it).
fn set_meta(conn: &Connection, key: &str, value: u64) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?1, ?2)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        params![key, value as i64],
    )
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlites_error_is_said_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let Err(e) = Store::open(dir.path()) else {
            panic!("a directory is no store")
        };
        // In the message, and not again as a source a chain would print.
        assert!(matches!(e, StoreError::Sqlite { .. }), "{e:?}");
        assert!(e.to_string().starts_with("event store "), "{e}");
        assert!(std::error::Error::source(&e).is_none(), "{e}");
    }

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

    fn policy(name: &str, at: u64) -> StoredExport {
        StoredExport {
            name: name.into(),
            source: format!(
                "export {name}\n  filter proto = udp\n  send headers to ipfix+udp://127.0.0.1:4739\n"
            ),
            added_ns: at,
        }
    }

    #[test]
    fn export_policies_survive_a_reopen_in_order_with_their_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m.sqlite");
        {
            let s = Store::open(&path).expect("opens");
            assert_eq!(s.exports().expect("read"), (vec![], 0), "none at first");
            s.set_exports(&[policy("b", 1), policy("a", 2)], 7).expect("set");
            s.set_exports(&[policy("z", 3), policy("b", 1), policy("a", 2)], 9)
                .expect("set");
        }
        let s = Store::open(&path).expect("reopens");
        let (policies, version) = s.exports().expect("read");
        let names: Vec<&str> = policies.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            (names, version),
            (vec!["z", "b", "a"], 9),
            "the last set, in its order"
        );
        assert_eq!(policies[1], policy("b", 1));
        // All or nothing: a set naming a policy twice stores none of it.
        assert!(s.set_exports(&[policy("x", 4), policy("x", 5)], 10).is_err());
        assert_eq!(s.exports().expect("read").1, 9);
        s.set_exports(&[], 11).expect("set");
        assert_eq!(
            s.exports().expect("read"),
            (vec![], 11),
            "removed, the version kept"
        );
    }

    #[test]
    fn drill_down_instances_survive_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m.sqlite");
        let inst = |id: u64, end_ns: Option<u64>| StoredInstance {
            id,
            name: format!("by_source[dst_port={id}]"),
            parent: 2,
            drill: 0,
            window_start_ns: 10,
            window_end_ns: 20,
            group: r#"{"dst_port":80}"#.into(),
            decided_ns: 21,
            end_ns,
        };
        {
            let s = Store::open(&path).expect("opens");
            assert!(s.instances().expect("read").is_empty());
            s.set_instances(&[inst(9, Some(40)), inst(7, None)]).expect("set");
        }
        let s = Store::open(&path).expect("reopens");
        assert_eq!(
            s.instances().expect("read"),
            vec![inst(7, None), inst(9, Some(40))]
        );
        s.set_instances(&[inst(9, Some(50))]).expect("set");
        assert_eq!(s.instances().expect("read"), vec![inst(9, Some(50))]);
    }

    /// A store written by schema 1 (events and numbers) is opened as is
    /// and gains the export policies' table; its events are kept.
    #[test]
    fn a_schema_1_store_is_brought_up_to_date() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m.sqlite");
        Connection::open(&path)
            .and_then(|c| {
                c.execute_batch(
                    "CREATE TABLE events (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
                         source TEXT NOT NULL, added_ns INTEGER NOT NULL);
                     CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
                     INSERT INTO events VALUES (4, 'a', 'event a', 5);
                     INSERT INTO meta VALUES ('alive_ns', 6);
                     PRAGMA user_version = 1;",
                )
            })
            .expect("a schema 1 store");
        let s = Store::open(&path).expect("opens without --init");
        assert_eq!(s.events().expect("events").len(), 1);
        assert_eq!(s.meta("alive_ns").expect("meta"), Some(6));
        assert_eq!(s.exports().expect("exports"), (vec![], 0));
        s.set_exports(&[policy("p", 1)], 2).expect("set");
        let version: i64 = s
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .expect("version");
        assert_eq!(version, SCHEMA);
    }

    #[test]
    fn names_are_unique_and_a_newer_schema_is_refused() {
        let s = Store::in_memory().expect("opens");
        s.put(&ev(1, "a")).expect("put");
        assert!(s.put(&ev(2, "a")).is_err(), "a second event named a");
        // A batch is all or nothing: one refused row stores none of it.
        assert!(s.put_all(&[ev(5, "e"), ev(6, "a"), ev(7, "f")]).is_err());
        let names: Vec<String> = s.events().expect("read").into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["a"]);
        s.put_all(&[ev(5, "e"), ev(7, "f")]).expect("put_all");
        assert_eq!(s.events().expect("read").len(), 3);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("new.sqlite");
        Connection::open(&path)
            .and_then(|c| c.execute_batch("PRAGMA user_version = 9;"))
            .expect("write");
        let e = Store::open(&path).expect_err("refused");
        assert!(e.to_string().contains("newer Clarion"), "{e}");
    }

    #[test]
    fn a_file_that_is_not_sqlite_is_refused_even_with_init() {
        let dir = tempfile::tempdir().expect("tempdir");
        for text in [
            &b"this is not a database, just some text long enough"[..],
            b"x\n",
            &[0u8; 4096],
        ] {
            let path = dir.path().join("junk");
            std::fs::write(&path, text).expect("write");
            for open in [Store::open, Store::init] {
                let e = open(&path).expect_err("refused");
                assert!(matches!(e, StoreError::Foreign { .. }), "{e}");
                assert!(
                    e.to_string().contains("junk") && e.to_string().contains("not an SQLite"),
                    "{e}"
                );
                assert!(e.is_usage());
            }
            assert_eq!(std::fs::read(&path).expect("read"), text, "left untouched");
        }
    }

    #[test]
    fn an_empty_file_needs_init() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m.sqlite");
        std::fs::write(&path, b"").expect("write");
        let e = Store::open(&path).expect_err("refused");
        assert!(matches!(e, StoreError::NoSchema { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("m.sqlite") && text.contains("is empty") && text.contains("--init"),
            "{text}"
        );
        assert_eq!(
            std::fs::metadata(&path).expect("meta").len(),
            0,
            "nothing written"
        );
        let s = Store::init(&path).expect("init creates the tables");
        s.put(&ev(1, "a")).expect("put");
        drop(s);
        let s = Store::open(&path).expect("a store now");
        assert_eq!(s.events().expect("events"), vec![ev(1, "a")]);
    }

    #[test]
    fn a_missing_table_needs_init_and_another_database_is_never_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A store whose events table was dropped.
        let path = dir.path().join("m.sqlite");
        Store::open(&path)
            .and_then(|s| s.put(&ev(1, "a")).map(|()| s))
            .expect("a store");
        Connection::open(&path)
            .and_then(|c| c.execute_batch("DROP TABLE events;"))
            .expect("drop");
        let e = Store::open(&path).expect_err("refused");
        assert!(e.to_string().contains("lacks its table(s) events"), "{e}");
        let s = Store::init(&path).expect("init recreates it");
        assert!(s.events().expect("events").is_empty());

        // Another program's database.
        let other = dir.path().join("other.db");
        Connection::open(&other)
            .and_then(|c| c.execute_batch("CREATE TABLE users (id INTEGER, name TEXT);"))
            .expect("write");
        let before = std::fs::read(&other).expect("read");
        for open in [Store::open, Store::init] {
            let e = open(&other).expect_err("refused");
            assert!(matches!(e, StoreError::Foreign { .. }), "{e}");
            assert!(e.to_string().contains("table users"), "{e}");
        }
        assert_eq!(std::fs::read(&other).expect("read"), before, "left untouched");

        // A table of the store's name and another shape.
        let shaped = dir.path().join("shaped.db");
        Connection::open(&shaped)
            .and_then(|c| c.execute_batch("CREATE TABLE events (id INTEGER, what TEXT);"))
            .expect("write");
        let e = Store::init(&shaped).expect_err("refused");
        assert!(e.to_string().contains("has columns (id, what)"), "{e}");
    }

    #[test]
    fn damaged_rows_are_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m.sqlite");
        let s = Store::open(&path).expect("a store");
        s.conn
            .execute_batch("INSERT INTO events VALUES (-1, 'a', 'event a', 0);")
            .expect("insert");
        let e = s.events().expect_err("a negative id");
        assert!(
            matches!(e, StoreError::Damaged { .. }) && e.to_string().contains("negative id"),
            "{e}"
        );
        s.conn
            .execute_batch("UPDATE events SET id = 1, added_ns = 'x';")
            .expect("update");
        let e = s.events().expect_err("text for a time");
        assert!(
            matches!(e, StoreError::Damaged { .. }) && e.to_string().contains("added_ns"),
            "{e}"
        );
        s.set_meta("alive_ns", 5).expect("meta");
        s.conn
            .execute_batch("UPDATE meta SET value = -5;")
            .expect("update");
        assert!(matches!(s.meta("alive_ns"), Err(StoreError::Damaged { .. })));
    }
}
