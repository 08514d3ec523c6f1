//! The manager's report history: the network-wide reports it wrote, kept
//! in the store so that the console (and any client of the API) can read
//! what fired before it looked, also after the manager restarted.
//!
//! Each report gets a sequence number (`seq`) when first stored: SQLite's
//! `AUTOINCREMENT`, so numbers only grow and are never given again, not
//! even after every row was dropped. Pages are read by cursor on that
//! number (`before`: older than it, `after`: newer than it), never by
//! offset: reports appended or dropped between two pages shift nothing,
//! so a client walking the pages sees each report at most once, and every
//! report that stayed kept meanwhile exactly once (tested against a plain
//! model below).
//!
//! A report of the same event, window and group as one kept already (a
//! restarted manager decides again the windows whose satisfaction reports
//! it had not acknowledged) replaces that one's text and keeps its place:
//! the history holds one report per decision.
//!
//! Bounded: at most `max_reports` (the oldest dropped as new ones come)
//! and, when the manager asks, none written before a given time (the
//! oldest dropped while they are older). Dropped reports are counted in
//! the store (`history_dropped`), so the count survives restarts.

use rusqlite::{params, params_from_iter, types::Value};

use crate::{set_meta, Store, StoreError};

/// The meta number counting the reports dropped from the history.
const DROPPED: &str = "history_dropped";

/// A report to append to the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewReport {
    pub event: String,
    pub window_start_ns: u64,
    /// The report's group as JSON (its identity with event and window).
    pub group: String,
    /// When the manager wrote it (wall clock, nanoseconds since 1970):
    /// what the age bound reads.
    pub written_ns: u64,
    /// The report as JSON, as the manager wrote it.
    pub report: String,
}

/// A report read back, with its place in the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredReport {
    pub seq: u64,
    pub report: String,
}

/// Which reports a page holds: those matching the filters, at most
/// `limit`, the newest (no cursor), or the newest of those older than
/// `before`, or the oldest of those newer than `after` (not both).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistoryQuery {
    pub event: Option<String>,
    /// Reports whose window starts in `[from_ns, to_ns)`.
    pub from_ns: Option<u64>,
    pub to_ns: Option<u64>,
    pub limit: usize,
    pub before: Option<u64>,
    pub after: Option<u64>,
}

/// One page of the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryPage {
    /// Newest first.
    pub reports: Vec<StoredReport>,
    /// The cursor (`before`) of the next older page, if any report
    /// matching the filters is older than this page.
    pub older: Option<u64>,
    /// The cursor (`after`) of the next newer page, if any report
    /// matching the filters is newer than this page.
    pub newer: Option<u64>,
    /// The greatest sequence number given so far (0: none): `after` it
    /// come only reports stored after this answer.
    pub last: u64,
    /// Reports kept, and dropped since the store was made.
    pub kept: u64,
    pub dropped: u64,
}

impl Store {
    /// Appends `reports` in one transaction (one commit: one sync of the
    /// log for all of them), then drops the oldest beyond `max_reports`.
    /// Returns how many were dropped.
    pub fn append_reports(&self, reports: &[NewReport], max_reports: u64) -> Result<u64, StoreError> {
        let r = self.unsynced(|| self.append_in_tx(reports, max_reports));
        if r.is_err() {
            // Rolled back: the count kept may be wrong.
            self.kept.set(None);
        }
        r
    }

    fn append_in_tx(&self, reports: &[NewReport], max_reports: u64) -> Result<u64, StoreError> {
        let mut kept = self.reports_kept()?;
        let tx = self.conn.unchecked_transaction().map_err(|e| self.err(e))?;
        {
            // The update first: an insert that meets the key would use up
            // a number (SQLite's sequence moves on conflicts too).
            let mut update = tx
                .prepare_cached(
                    "UPDATE reports SET report = ?4
                     WHERE event = ?1 AND window_start_ns = ?2 AND group_key = ?3",
                )
                .map_err(|e| self.err(e))?;
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO reports (event, window_start_ns, group_key, written_ns, report)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(|e| self.err(e))?;
            for r in reports {
                let start = r.window_start_ns as i64;
                let replaced = update
                    .execute(params![r.event, start, r.group, r.report])
                    .map_err(|e| self.err(e))?;
                if replaced == 0 {
                    insert
                        .execute(params![r.event, start, r.group, r.written_ns as i64, r.report])
                        .map_err(|e| self.err(e))?;
                    kept += 1;
                }
            }
        }
        let dropped = kept.saturating_sub(max_reports);
        if dropped > 0 {
            tx.execute(
                "DELETE FROM reports WHERE seq IN (SELECT seq FROM reports ORDER BY seq LIMIT ?1)",
                params![dropped as i64],
            )
            .map_err(|e| self.err(e))?;
            self.count_dropped(&tx, dropped)?;
        }
        tx.commit().map_err(|e| self.err(e))?;
        self.kept.set(Some(kept - dropped));
        Ok(dropped)
    }

    /// Drops the oldest reports beyond `max_reports` (a manager started
    /// with a lower bound than the history holds). Returns how many.
    pub fn trim_reports(&self, max_reports: u64) -> Result<u64, StoreError> {
        self.append_reports(&[], max_reports)
    }

    /// Drops the oldest reports while they were written before
    /// `before_ns` (the age bound). Returns how many.
    pub fn expire_reports(&self, before_ns: u64) -> Result<u64, StoreError> {
        let r = self.unsynced(|| self.expire_in_tx(before_ns));
        if r.is_err() {
            self.kept.set(None);
        }
        r
    }

    fn expire_in_tx(&self, before_ns: u64) -> Result<u64, StoreError> {
        let kept = self.reports_kept()?;
        let tx = self.conn.unchecked_transaction().map_err(|e| self.err(e))?;
        // The first report young enough, from the oldest: a scan that stops
        // there (an index on the time would cost every insert).
        let young: Option<i64> = tx
            .query_row(
                "SELECT seq FROM reports WHERE written_ns >= ?1 ORDER BY seq LIMIT 1",
                params![before_ns.min(i64::MAX as u64) as i64],
                |r| r.get(0),
            )
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })
            .map_err(|e| self.damaged_or(e))?;
        let dropped = tx
            .execute(
                "DELETE FROM reports WHERE seq < ?1",
                params![young.unwrap_or(i64::MAX)],
            )
            .map_err(|e| self.err(e))? as u64;
        if dropped > 0 {
            self.count_dropped(&tx, dropped)?;
        }
        tx.commit().map_err(|e| self.err(e))?;
        self.kept.set(Some(kept.saturating_sub(dropped)));
        Ok(dropped)
    }

    /// Runs `write` with SQLite's `synchronous = NORMAL`, then sets back
    /// what the connection had (FULL: events and policies are synced at
    /// each commit). In WAL mode NORMAL commits reach the operating
    /// system, not the disk: a killed manager loses none of them (the
    /// property nats_crash.rs tests), a power cut may lose the last ones,
    /// as it may the output file's, which is not synced either. Measured
    /// on a history of 100,000 (disk of the development VM, release):
    /// appending 1, 100 and 1,000 reports took 3.8, 4.4 and 34 ms synced,
    /// 0.06, 1.2 and 11 ms so; on the loop that decides.
    fn unsynced<T>(&self, write: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
        let before: i64 = self
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        self.conn
            .execute_batch("PRAGMA synchronous = NORMAL")
            .map_err(|e| self.err(e))?;
        let r = write();
        let back = self
            .conn
            .execute_batch(&format!("PRAGMA synchronous = {}", before.clamp(0, 3)))
            .map_err(|e| self.err(e));
        let v = r?;
        back.map(|()| v)
    }

    fn count_dropped(&self, tx: &rusqlite::Transaction<'_>, n: u64) -> Result<(), StoreError> {
        let before = self.meta(DROPPED)?.unwrap_or(0);
        set_meta(tx, DROPPED, before.saturating_add(n)).map_err(|e| self.err(e))
    }

    /// How many reports the history holds.
    pub fn reports_kept(&self) -> Result<u64, StoreError> {
        if let Some(n) = self.kept.get() {
            return Ok(n);
        }
        let n: i64 = self
            .conn
            .query_row("SELECT count(*) FROM reports", [], |r| r.get(0))
            .map_err(|e| self.damaged_or(e))?;
        let n = n.max(0) as u64;
        self.kept.set(Some(n));
        Ok(n)
    }

    /// One page of the history (see [`HistoryQuery`]); `limit` 0 is read as 1.
    pub fn reports_page(&self, q: &HistoryQuery) -> Result<HistoryPage, StoreError> {
        let mut filters = String::new();
        let mut args: Vec<Value> = Vec::new();
        if let Some(e) = &q.event {
            args.push(Value::Text(e.clone()));
            filters += &format!(" AND event = ?{}", args.len());
        }
        if let Some(from) = q.from_ns {
            args.push(Value::Integer(clamp(from)));
            filters += &format!(" AND window_start_ns >= ?{}", args.len());
        }
        if let Some(to) = q.to_ns {
            args.push(Value::Integer(clamp(to)));
            filters += &format!(" AND window_start_ns < ?{}", args.len());
        }
        let limit = q.limit.max(1);
        let (cursor, order) = match (q.before, q.after) {
            (_, Some(a)) => (format!(" AND seq > {}", clamp(a)), "ASC"),
            (Some(b), None) => (format!(" AND seq < {}", clamp(b)), "DESC"),
            (None, None) => (String::new(), "DESC"),
        };
        let sql = format!(
            "SELECT seq, report FROM reports WHERE 1{filters}{cursor} ORDER BY seq {order} LIMIT {limit}"
        );
        let mut st = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let rows = st
            .query_map(params_from_iter(args.iter()), |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| self.damaged_or(e))?;
        let mut reports = rows
            .into_iter()
            .map(|(seq, report)| {
                let seq = self.unsigned(seq, || "a stored report".into(), "number")?;
                Ok(StoredReport { seq, report })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        if order == "ASC" {
            reports.reverse();
        }
        let exists = |cond: String| -> Result<bool, StoreError> {
            let sql = format!("SELECT EXISTS (SELECT 1 FROM reports WHERE 1{filters}{cond})");
            self.conn
                .query_row(&sql, params_from_iter(args.iter()), |r| r.get(0))
                .map_err(|e| self.damaged_or(e))
        };
        let (older, newer) = match (reports.last(), reports.first()) {
            (Some(oldest), Some(newest)) => (
                Some(oldest.seq).filter(|_| exists(format!(" AND seq < {}", oldest.seq)).unwrap_or(false)),
                Some(newest.seq).filter(|_| exists(format!(" AND seq > {}", newest.seq)).unwrap_or(false)),
            ),
            // An empty page: nothing older than a `before` cursor (or
            // anything at all); what is newer than a `before` cursor is
            // `after` the number below it.
            _ => match (q.before, q.after) {
                (Some(b), None) if b > 0 && exists(format!(" AND seq >= {}", clamp(b)))? => {
                    (None, Some(b - 1))
                }
                _ => (None, None),
            },
        };
        let last: i64 = self
            .conn
            .query_row("SELECT COALESCE(MAX(seq), 0) FROM reports", [], |r| r.get(0))
            .map_err(|e| self.damaged_or(e))?;
        let from_sequence: i64 = self
            .conn
            .query_row(
                "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'reports'), 0)",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.damaged_or(e))?;
        Ok(HistoryPage {
            reports,
            older,
            newer,
            last: last.max(from_sequence).max(0) as u64,
            kept: self.reports_kept()?,
            dropped: self.meta(DROPPED)?.unwrap_or(0),
        })
    }
}

/// A cursor or time as SQLite's integer (past its range: its greatest).
fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A model row: number, identity (event, window, group), time written, text.
    type Row = (u64, (String, u64, String), u64, String);

    /// The plain model: a list in the order stored.
    #[derive(Default)]
    struct Model {
        rows: Vec<Row>,
        next: u64,
        dropped: u64,
    }

    impl Model {
        fn append(&mut self, reports: &[NewReport], max: u64) {
            for r in reports {
                let key = (r.event.clone(), r.window_start_ns, r.group.clone());
                match self.rows.iter_mut().find(|row| row.1 == key) {
                    Some(row) => row.3 = r.report.clone(),
                    None => {
                        self.next += 1;
                        self.rows.push((self.next, key, r.written_ns, r.report.clone()));
                    }
                }
            }
            let over = self.rows.len().saturating_sub(max as usize);
            self.rows.drain(..over);
            self.dropped += over as u64;
        }

        fn expire(&mut self, before_ns: u64) {
            let old = self.rows.iter().take_while(|r| r.2 < before_ns).count();
            self.rows.drain(..old);
            self.dropped += old as u64;
        }

        fn page(&self, q: &HistoryQuery) -> HistoryPage {
            let matching: Vec<&Row> = self
                .rows
                .iter()
                .filter(|r| q.event.as_ref().is_none_or(|e| *e == r.1 .0))
                .filter(|r| q.from_ns.is_none_or(|f| r.1 .1 >= f))
                .filter(|r| q.to_ns.is_none_or(|t| r.1 .1 < t))
                .collect();
            let limit = q.limit.max(1);
            let mut page: Vec<_> = match (q.before, q.after) {
                (_, Some(a)) => matching.iter().filter(|r| r.0 > a).take(limit).collect(),
                (Some(b), None) => matching.iter().rev().filter(|r| r.0 < b).take(limit).collect(),
                (None, None) => matching.iter().rev().take(limit).collect(),
            };
            page.sort_by_key(|r| std::cmp::Reverse(r.0));
            let reports: Vec<StoredReport> = page
                .iter()
                .map(|r| StoredReport {
                    seq: r.0,
                    report: r.3.clone(),
                })
                .collect();
            let (older, newer) = match (reports.last(), reports.first()) {
                (Some(o), Some(n)) => (
                    Some(o.seq).filter(|&s| matching.iter().any(|r| r.0 < s)),
                    Some(n.seq).filter(|&s| matching.iter().any(|r| r.0 > s)),
                ),
                _ => match (q.before, q.after) {
                    (Some(b), None) if b > 0 && matching.iter().any(|r| r.0 >= b) => (None, Some(b - 1)),
                    _ => (None, None),
                },
            };
            HistoryPage {
                reports,
                older,
                newer,
                last: self.next,
                kept: self.rows.len() as u64,
                dropped: self.dropped,
            }
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// Reports of (event, window, group), written at a time step.
        Append(Vec<(u8, u8, u8)>, u64),
        Expire(u64),
        Page(HistoryQuery),
    }

    fn query() -> impl Strategy<Value = HistoryQuery> {
        (
            proptest::option::of(0u8..3),
            proptest::option::of(0u64..12),
            proptest::option::of(0u64..12),
            0usize..7,
            proptest::option::of(0u64..60),
            proptest::option::weighted(0.3, 0u64..60),
        )
            .prop_map(|(event, from_ns, to_ns, limit, before, after)| HistoryQuery {
                event: event.map(|e| format!("e{e}")),
                from_ns,
                to_ns,
                limit,
                before,
                after,
            })
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (proptest::collection::vec((0u8..3, 0u8..10, 0u8..2), 0..6), 0u64..3)
                .prop_map(|(r, step)| Op::Append(r, step)),
            1 => (0u64..40).prop_map(Op::Expire),
            3 => query().prop_map(Op::Page),
        ]
    }

    /// Reports numbered by `n`, so that a replaced one differs.
    fn reports(spec: &[(u8, u8, u8)], at: u64, n: &mut u64) -> Vec<NewReport> {
        spec.iter()
            .map(|&(e, w, g)| {
                *n += 1;
                NewReport {
                    event: format!("e{e}"),
                    window_start_ns: u64::from(w),
                    group: format!("{{\"g\":{g}}}"),
                    written_ns: at,
                    report: format!("{{\"n\":{n}}}"),
                }
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Every page, cursor and count equals the plain model's, through
        /// appends, replacements, drops by count and by age.
        #[test]
        fn pages_equal_the_models(ops in proptest::collection::vec(op(), 1..40), max in 1u64..12) {
            let s = Store::in_memory().expect("store");
            let mut m = Model::default();
            let (mut n, mut at) = (0u64, 0u64);
            for op in ops {
                match op {
                    Op::Append(spec, step) => {
                        at += step;
                        let r = reports(&spec, at, &mut n);
                        let before = m.dropped;
                        m.append(&r, max);
                        prop_assert_eq!(s.append_reports(&r, max).expect("append"), m.dropped - before);
                    }
                    Op::Expire(t) => {
                        let before = m.dropped;
                        m.expire(t);
                        prop_assert_eq!(s.expire_reports(t).expect("expire"), m.dropped - before);
                    }
                    Op::Page(q) => prop_assert_eq!(s.reports_page(&q).expect("page"), m.page(&q), "{:?}", q),
                }
            }
        }

        /// Walking older pages while reports are appended and dropped
        /// between them: newest first throughout, none seen twice, none
        /// seen that was not kept when the walk began, and every one kept
        /// from its start to its end seen.
        #[test]
        fn a_walk_through_older_pages_loses_and_repeats_nothing(
            first in proptest::collection::vec((0u8..3, 0u8..10, 0u8..2), 1..30),
            between in proptest::collection::vec((proptest::collection::vec((0u8..3, 10u8..40, 0u8..2), 0..5), 0u64..3), 0..12),
            limit in 1usize..5,
            max in 5u64..40,
        ) {
            let s = Store::in_memory().expect("store");
            let mut n = 0;
            s.append_reports(&reports(&first, 0, &mut n), max).expect("append");
            let all = |s: &Store| s.reports_page(&HistoryQuery { limit: 10_000, ..HistoryQuery::default() }).expect("page").reports;
            let at_start = all(&s);
            let mut seen: Vec<StoredReport> = Vec::new();
            let mut cursor = None;
            let mut more = between.into_iter();
            loop {
                let page = s.reports_page(&HistoryQuery { limit, before: cursor, ..HistoryQuery::default() }).expect("page");
                seen.extend(page.reports);
                if let Some((spec, step)) = more.next() {
                    s.append_reports(&reports(&spec, step, &mut n), max).expect("append");
                    if step == 2 {
                        s.expire_reports(1).expect("expire");
                    }
                }
                match page.older {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
            let at_end = all(&s);
            prop_assert!(seen.windows(2).all(|w| w[0].seq > w[1].seq), "newest first, each once");
            for r in &seen {
                prop_assert!(at_start.iter().any(|a| a.seq == r.seq), "{:?} was kept at the start", r);
            }
            for r in at_start.iter().filter(|r| at_end.iter().any(|e| e.seq == r.seq)) {
                prop_assert!(seen.iter().any(|x| x.seq == r.seq), "{:?} kept throughout, not seen", r);
            }
        }
    }

    #[test]
    fn the_history_and_its_drops_survive_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m.sqlite");
        let mut n = 0;
        let spec: Vec<(u8, u8, u8)> = (0..10).map(|w| (0, w, 0)).collect();
        {
            let s = Store::open(&path).expect("opens");
            assert_eq!(
                s.append_reports(&reports(&spec, 5, &mut n), 8).expect("append"),
                2
            );
        }
        let s = Store::open(&path).expect("reopens");
        let page = s
            .reports_page(&HistoryQuery {
                limit: 100,
                ..HistoryQuery::default()
            })
            .expect("page");
        let numbers: Vec<u64> = page.reports.iter().map(|r| r.seq).collect();
        assert_eq!(numbers, [10, 9, 8, 7, 6, 5, 4, 3]);
        assert_eq!((page.kept, page.dropped, page.last), (8, 2, 10));
        // The history's writes leave events' and policies' commits synced.
        let sync: i64 = s
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .expect("pragma");
        assert_eq!(sync, 2, "FULL");
        // A lower bound at the next start drops the oldest at once.
        assert_eq!(s.trim_reports(3).expect("trim"), 5);
        // Numbers are never given again, not even once every row is gone.
        assert_eq!(s.expire_reports(6).expect("expire"), 3);
        s.append_reports(&reports(&[(1, 0, 0)], 7, &mut n), 8)
            .expect("append");
        let page = s.reports_page(&HistoryQuery::default()).expect("page");
        assert_eq!(page.reports.iter().map(|r| r.seq).collect::<Vec<_>>(), [11]);
        assert_eq!((page.kept, page.dropped), (1, 10));
    }
}
