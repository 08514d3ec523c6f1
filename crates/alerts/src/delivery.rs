//! The alert sink: a report [`Sink`] that hands each report to a delivery
//! thread, which sends it to one destination at least once or writes it to
//! the dead-letter file.
//!
//! # Design
//!
//! The monitor's thread only clones the report into a bounded queue (a
//! `sync_channel`); one delivery thread per sink takes reports in order and
//! makes attempts through a [`Transport`]. One thread and FIFO order give
//! the ordering guarantee directly: a report is not attempted before every
//! earlier report of the sink was delivered or dead-lettered, so each
//! event's reports arrive in window order. The price is head-of-line
//! blocking while one report is retried, bounded by the retry budget.
//!
//! # Retries
//!
//! An attempt that fails with [`Failure::Retry`] is retried after
//! `backoff × 2^(n-1)` (capped at `backoff_max`, at least what a
//! `Retry-After` asked, within the cap), with equal jitter (half fixed,
//! half random) so many hosts do not retry in step. After `retries`
//! retries, or at once on [`Failure::Permanent`], the report becomes a
//! dead letter with the reason and the number of attempts.
//!
//! # A full queue
//!
//! [`Overflow::Block`] makes `write` wait for room (one warning through
//! `notify`): right when reading a file, where waiting only slows the
//! replay. [`Overflow::DeadLetter`] writes the report to the dead-letter
//! file at once with reason "queue full": right on live capture, where a
//! blocked monitor would make the kernel drop packets. Either way nothing
//! is dropped silently.
//!
//! # Exit
//!
//! [`AlertSink::finish`] (or dropping the sink) closes the queue and gives
//! the thread `drain` more time: attempts and backoffs go on until then;
//! whatever is left after it is dead-lettered with the reason. So `finish`
//! returns within about `drain` and every accepted report is accounted
//! for: `accepted = delivered + dead_lettered`.
//!
//! `flush` does not wait for delivery (the monitor calls it after every
//! batch); it only reports a failed sink. The sink fails — `write` and
//! `flush` return an error — only when a dead letter cannot be written,
//! since then a report would be lost.
//!
//! Cost on the monitor's thread: one report clone, one SHA-256, one channel send.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clarion_report::{GroupKey, Report};
use clarion_sinks::{Sink, SinkError};

use crate::alertmanager::{Alertmanager, AlertmanagerConfig};
use crate::deadletter::DeadLetter;
use crate::lifecycle::{Change, Lifecycle};
use crate::notice::{Notice, Rule, Rules, Transition};
use crate::transport::{Failure, Syslog, SyslogConfig, Transport, Webhook, WebhookConfig};
use crate::AlertError;

/// What `write` does when the queue is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Wait for room (the monitor waits too).
    Block,
    /// Dead-letter the report at once, reason "queue full".
    DeadLetter,
}

/// How reports are delivered.
#[derive(Clone, Debug)]
pub struct DeliveryConfig {
    /// Attempts after the first.
    pub retries: u32,
    /// Longest one attempt may take.
    pub timeout: Duration,
    /// Delay before the first retry; doubles with each one.
    pub backoff: Duration,
    /// Longest delay between two attempts.
    pub backoff_max: Duration,
    /// Reports waiting for delivery at most (at least 1).
    pub queue: usize,
    pub overflow: Overflow,
    /// At exit, how long delivery goes on before the rest is dead-lettered.
    pub drain: Duration,
    /// What is sent: transitions (the default) or every window's report.
    pub alerting: Alerting,
}

/// What a sink sends, and the events' rules.
#[derive(Clone, Debug, Default)]
pub struct Alerting {
    /// Every window's report, as before alerts had a lifecycle; otherwise
    /// only transitions (firing, resolved).
    pub every_window: bool,
    /// Each event's rule (hold, severity, predicate); others get the default.
    pub rules: Arc<Rules>,
    /// The console's URL, linked from transitions.
    pub console: Option<String>,
    /// On live capture: windows ending this long before "now" are closed
    /// (at each `flush`), so groups that stop firing resolve even when
    /// nothing else fires; "now" is the latest report's window end plus
    /// the wall time since it came (the reports' clock, which runs at the
    /// wall's pace and also serves replays of past captures). `None`: time
    /// is seen from reports only.
    pub clock_grace: Option<Duration>,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig {
            retries: 8,
            timeout: Duration::from_secs(10),
            backoff: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            queue: 4096,
            overflow: Overflow::Block,
            drain: Duration::from_secs(30),
            alerting: Alerting::default(),
        }
    }
}

/// Called with warnings and the exit summary (the CLI prints them to stderr).
pub type Notify = Arc<dyn Fn(&str) + Send + Sync>;

/// Counts of one sink's reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Given to `write`.
    pub accepted: u64,
    /// Acknowledged by the destination (2xx; for syslog: sent).
    pub delivered: u64,
    /// Written to the dead-letter file.
    pub dead_lettered: u64,
    /// Attempts after a first one.
    pub retries: u64,
}

impl Stats {
    /// Accepted, neither delivered nor dead-lettered yet: queued or being attempted.
    pub fn pending(&self) -> u64 {
        self.accepted.saturating_sub(self.delivered + self.dead_lettered)
    }
}

/// An alert's identity: (host, event, group).
type AlertKey = (Arc<str>, Arc<str>, GroupKey);

type Job = Notice;

struct Shared {
    target: String,
    accepted: AtomicU64,
    delivered: AtomicU64,
    dead_lettered: AtomicU64,
    retries: AtomicU64,
    /// Why the sink failed (a dead letter could not be written).
    failed: Mutex<Option<String>>,
    /// Set by `finish`: delivery stops at this instant.
    deadline: Mutex<Option<Instant>>,
    wake: Condvar,
    dead_letter: Mutex<DeadLetter>,
    notify: Notify,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere does not make these values wrong.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn stats(&self) -> Stats {
        // Outcomes before `accepted` (which is counted before its report is
        // queued): a concurrent read never shows more outcomes than reports.
        let delivered = self.delivered.load(SeqCst);
        let dead_lettered = self.dead_lettered.load(SeqCst);
        let retries = self.retries.load(Relaxed);
        Stats {
            accepted: self.accepted.load(SeqCst),
            delivered,
            dead_lettered,
            retries,
        }
    }

    fn dead_letter(&self, job: &Job, reason: &str, attempts: u32) -> Result<(), String> {
        let written = lock(&self.dead_letter).write(&self.target, job, reason, attempts);
        match written {
            Ok(()) => {
                self.dead_lettered.fetch_add(1, SeqCst);
                Ok(())
            }
            Err(e) => {
                let where_ = lock(&self.dead_letter).describe();
                let msg = format!(
                    "{}: cannot write a dead letter to {where_}: {e} (report {} of {} lost)",
                    self.target, job.key, job.report.event
                );
                (self.notify)(&msg);
                *lock(&self.failed) = Some(msg.clone());
                Err(msg)
            }
        }
    }

    /// Time left before the drain deadline, if one is set.
    fn remaining(&self) -> Option<Duration> {
        lock(&self.deadline).map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Sleeps `d`; false (at once) if a drain deadline comes before its end.
    fn sleep(&self, d: Duration) -> bool {
        let wake = Instant::now() + d;
        let mut g = lock(&self.deadline);
        loop {
            if g.is_some_and(|dl| dl < wake) {
                return false;
            }
            let now = Instant::now();
            if now >= wake {
                return true;
            }
            g = self
                .wake
                .wait_timeout(g, wake - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// The delay before retry `n` (1-based).
fn backoff(cfg: &DeliveryConfig, n: u32, asked: Option<Duration>) -> Duration {
    let exp = cfg
        .backoff
        .saturating_mul(1u32 << (n - 1).min(20))
        .min(cfg.backoff_max);
    let half = exp / 2;
    let jittered = half + half.mul_f64(fastrand::f64());
    jittered.max(asked.unwrap_or_default().min(cfg.backoff_max))
}

fn deliver(t: &mut dyn Transport, job: &Job, shared: &Shared, cfg: &DeliveryConfig) {
    let mut attempts = 0u32;
    let mut last = String::from("no attempt made");
    loop {
        let timeout = match shared.remaining() {
            None => cfg.timeout,
            Some(r) if r.is_zero() => {
                let why =
                    format!("not delivered before the exit deadline ({attempts} attempts; last: {last})");
                let _ = shared.dead_letter(job, &why, attempts);
                return;
            }
            Some(r) => r.min(cfg.timeout),
        };
        attempts += 1;
        match t.send(job, timeout) {
            Ok(()) => {
                shared.delivered.fetch_add(1, SeqCst);
                return;
            }
            Err(Failure::Permanent(why)) => {
                let _ = shared.dead_letter(job, &format!("refused: {why}"), attempts);
                return;
            }
            Err(Failure::Retry(why, asked)) => {
                if attempts > cfg.retries {
                    let _ = shared.dead_letter(
                        job,
                        &format!(
                            "gave up after {attempts} attempt{}: {why}",
                            if attempts == 1 { "" } else { "s" }
                        ),
                        attempts,
                    );
                    return;
                }
                shared.retries.fetch_add(1, Relaxed);
                if !shared.sleep(backoff(cfg, attempts, asked)) {
                    let why =
                        format!("not delivered before the exit deadline ({attempts} attempts; last: {why})");
                    let _ = shared.dead_letter(job, &why, attempts);
                    return;
                }
                last = why;
            }
        }
    }
}

/// Reads one sink's counts from another thread; see [`AlertSink::watch`].
#[derive(Clone)]
pub struct StatsHandle(Arc<Shared>);

impl StatsHandle {
    /// Counts so far (final once the sink is finished).
    pub fn stats(&self) -> Stats {
        self.0.stats()
    }
}

/// A report sink that delivers to a webhook or syslog; see the module doc.
pub struct AlertSink {
    tx: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    config: DeliveryConfig,
    warned_full: bool,
    /// The alerts' states (transitions mode).
    lifecycle: Lifecycle<AlertKey, Report>,
    default_rule: Arc<Rule>,
    /// The latest window end of the reports seen, and when it came: the
    /// reports' own time, moved on at the wall clock's pace
    /// ([`Alerting::clock_grace`]).
    latest: Option<(u64, Instant)>,
}

impl AlertSink {
    /// Delivers to a webhook.
    pub fn webhook(
        webhook: WebhookConfig,
        config: DeliveryConfig,
        dead_letter: DeadLetter,
        notify: Notify,
    ) -> Result<AlertSink, AlertError> {
        let t = Webhook::new(webhook)?;
        AlertSink::with_transport(Box::new(t), config, dead_letter, notify)
    }

    /// Delivers to syslog.
    pub fn syslog(
        syslog: SyslogConfig,
        config: DeliveryConfig,
        dead_letter: DeadLetter,
        notify: Notify,
    ) -> Result<AlertSink, AlertError> {
        let t = Syslog::new(syslog)?;
        AlertSink::with_transport(Box::new(t), config, dead_letter, notify)
    }

    /// Delivers to a Prometheus Alertmanager (transitions only, re-sent
    /// while firing).
    pub fn alertmanager(
        am: AlertmanagerConfig,
        mut config: DeliveryConfig,
        dead_letter: DeadLetter,
        notify: Notify,
    ) -> Result<AlertSink, AlertError> {
        let t = Alertmanager::new(am)?;
        // Alertmanager tracks alerts, not windows: it is always given transitions.
        config.alerting.every_window = false;
        AlertSink::with_transport(Box::new(t), config, dead_letter, notify)
    }

    /// Delivers through any transport.
    pub fn with_transport(
        mut transport: Box<dyn Transport>,
        config: DeliveryConfig,
        dead_letter: DeadLetter,
        notify: Notify,
    ) -> Result<AlertSink, AlertError> {
        let (tx, rx): (SyncSender<Job>, Receiver<Job>) = sync_channel(config.queue.max(1));
        let shared = Arc::new(Shared {
            target: transport.describe(),
            accepted: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            failed: Mutex::new(None),
            deadline: Mutex::new(None),
            wake: Condvar::new(),
            dead_letter: Mutex::new(dead_letter),
            notify,
        });
        let (s, cfg) = (shared.clone(), config.clone());
        let thread = std::thread::Builder::new()
            .name("clarion-alerts".into())
            .spawn(move || loop {
                // A transport that re-sends what is active (Alertmanager)
                // is woken at its interval even when nothing is queued.
                let job = match transport.tick_every() {
                    None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                    Some(every) => rx.recv_timeout(every),
                };
                match job {
                    Ok(job) => deliver(&mut *transport, &job, &s, &cfg),
                    Err(RecvTimeoutError::Timeout) => {
                        if let Err(e) = transport.tick(cfg.timeout) {
                            (s.notify)(&format!(
                                "{}: re-sending active alerts failed (tried again in a while): {e:?}",
                                s.target
                            ));
                        }
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            })
            .map_err(AlertError::Thread)?;
        Ok(AlertSink {
            tx: Some(tx),
            thread: Some(thread),
            shared,
            config,
            warned_full: false,
            lifecycle: Lifecycle::new(),
            default_rule: Arc::new(Rule::default()),
            latest: None,
        })
    }

    /// The destination, as messages name it.
    pub fn target(&self) -> &str {
        &self.shared.target
    }

    /// Counts so far.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// A reader of this sink's counts that stays valid after the sink is
    /// finished or moved into a [`clarion_sinks::FanOut`] (for a metrics page).
    pub fn watch(&self) -> StatsHandle {
        StatsHandle(self.shared.clone())
    }

    /// Delivers or dead-letters every accepted report (within the drain
    /// time), stops the thread and returns the counts.
    pub fn finish(mut self) -> Result<Stats, AlertError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<Stats, AlertError> {
        if let Some(thread) = self.thread.take() {
            *lock(&self.shared.deadline) = Some(Instant::now() + self.config.drain);
            self.shared.wake.notify_all();
            // The thread ends once it has taken every queued report.
            drop(self.tx.take());
            if thread.join().is_err() {
                *lock(&self.shared.failed) =
                    Some(format!("{}: the delivery thread panicked", self.shared.target));
            }
            let s = self.stats();
            let lost = s.accepted.saturating_sub(s.delivered + s.dead_lettered);
            if lost > 0 && lock(&self.shared.failed).is_none() {
                *lock(&self.shared.failed) = Some(format!(
                    "{}: {lost} reports not accounted for",
                    self.shared.target
                ));
            }
            if s.dead_lettered > 0 {
                let where_ = lock(&self.shared.dead_letter).describe();
                (self.shared.notify)(&format!(
                    "{}: {} of {} reports delivered, {} dead-lettered to {where_}",
                    self.shared.target, s.delivered, s.accepted, s.dead_lettered
                ));
            }
        }
        match lock(&self.shared.failed).clone() {
            Some(msg) => Err(AlertError::Failed(msg)),
            None => Ok(self.stats()),
        }
    }

    fn check(&self) -> Result<(), SinkError> {
        match &*lock(&self.shared.failed) {
            None => Ok(()),
            Some(msg) => Err(SinkError::Io {
                destination: self.shared.target.clone(),
                source: std::io::Error::other(msg.clone()),
            }),
        }
    }

    fn rule(&self, event: &str) -> Arc<Rule> {
        match self.config.alerting.rules.get(event) {
            Some(r) => Arc::new(r.clone()),
            None => self.default_rule.clone(),
        }
    }

    /// The notices a report makes: itself (per-window mode), or the
    /// transitions it brings about.
    fn notices(&mut self, report: &Report) -> Vec<Notice> {
        let rule = self.rule(&report.event);
        if self.config.alerting.every_window {
            return vec![Notice::window(report.clone(), rule)];
        }
        let key = (report.origin.host.clone(), report.event.clone(), report.group);
        let changes = self.lifecycle.fired(
            key,
            rule.hold,
            report.window.start_ns,
            report.window.end_ns,
            report.clone(),
        );
        self.to_notices(changes)
    }

    fn to_notices(&self, mut changes: Vec<Change<AlertKey, Report>>) -> Vec<Notice> {
        // Resolutions come out of a map: put them in a stable order (by
        // end, event, group), as reports are.
        changes.sort_by(|a, b| {
            (a.ends_at_ns.is_none(), a.ends_at_ns, &a.key.1, &a.key.2).cmp(&(
                b.ends_at_ns.is_none(),
                b.ends_at_ns,
                &b.key.1,
                &b.key.2,
            ))
        });
        changes
            .into_iter()
            .map(|c| {
                let rule = self.rule(&c.key.1);
                let t = Transition {
                    state: c.state,
                    starts_at_ns: c.starts_at_ns,
                    ends_at_ns: c.ends_at_ns,
                };
                Notice::change(c.payload, t, rule, self.config.alerting.console.clone())
            })
            .collect()
    }

    /// Queues one notice (or dead-letters it when the queue is full and
    /// the sink must not wait).
    fn queue(&mut self, job: Job) -> Result<(), SinkError> {
        self.shared.accepted.fetch_add(1, SeqCst);
        let Some(tx) = &self.tx else {
            return self.spill(&job, "the sink was already finished");
        };
        match tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(job)) => match self.config.overflow {
                Overflow::Block => {
                    if !self.warned_full {
                        self.warned_full = true;
                        (self.shared.notify)(&format!(
                            "{}: {} reports wait for delivery (queue full): the monitor waits for the receiver",
                            self.shared.target, self.config.queue
                        ));
                    }
                    match tx.send(job) {
                        Ok(()) => Ok(()),
                        Err(e) => self.spill(&e.0, "the delivery thread stopped"),
                    }
                }
                Overflow::DeadLetter => {
                    let reason = format!("queue full ({} reports waiting for delivery)", self.config.queue);
                    self.spill(&job, &reason)
                }
            },
            Err(TrySendError::Disconnected(job)) => self.spill(&job, "the delivery thread stopped"),
        }
    }

    fn spill(&self, job: &Job, reason: &str) -> Result<(), SinkError> {
        self.shared
            .dead_letter(job, reason, 0)
            .map_err(|m| SinkError::Io {
                destination: self.shared.target.clone(),
                source: std::io::Error::other(m),
            })
    }
}

impl Sink<Report> for AlertSink {
    fn write(&mut self, report: &Report) -> Result<(), SinkError> {
        self.check()?;
        if self.latest.is_none_or(|(end, _)| report.window.end_ns > end) {
            self.latest = Some((report.window.end_ns, Instant::now()));
        }
        for job in self.notices(report) {
            self.queue(job)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        self.check()?;
        if let (Some(grace), false, Some((end, at))) = (
            self.config.alerting.clock_grace,
            self.config.alerting.every_window,
            self.latest,
        ) {
            // Live: what the monitor closed long enough ago and did not
            // report did not fire. "Now" is the reports' time (the latest
            // window end, plus the wall time since it came), not the wall
            // clock's: a manager whose agents replay a capture of last
            // month at its pace must not close its windows at once.
            let now = end.saturating_add(at.elapsed().as_nanos() as u64);
            let through = now.saturating_sub(grace.as_nanos() as u64);
            if through > self.lifecycle.closed_ns() && !self.lifecycle.is_empty() {
                let changes = self.lifecycle.close(through);
                for job in self.to_notices(changes) {
                    self.queue(job)?;
                }
            }
        }
        Ok(())
    }

    fn destination(&self) -> &str {
        &self.shared.target
    }
}

impl Drop for AlertSink {
    fn drop(&mut self) {
        if self.thread.is_none() {
            return; // finished already
        }
        if let Err(e) = self.shutdown() {
            (self.shared.notify)(&e.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use clarion_report::{Completeness, GroupKey, Origin, Window};
    use serde_json::Value;

    use super::*;

    type Script = Box<dyn FnMut(&Report, u32) -> Result<(), Failure> + Send>;

    /// A transport that answers as `script` says (given the report and its
    /// attempt number) and records what it accepted.
    struct Scripted {
        script: Script,
        attempts: HashMap<String, u32>,
        got: Arc<Mutex<Vec<(String, u64)>>>,
    }

    impl Transport for Scripted {
        fn send(&mut self, notice: &Notice, _: Duration) -> Result<(), Failure> {
            let (report, key) = (&notice.report, &notice.key);
            let n = self.attempts.entry(key.to_string()).or_default();
            *n += 1;
            let r = (self.script)(report, *n);
            if r.is_ok() {
                lock(&self.got).push((report.event.to_string(), report.window.end_ns));
            }
            r
        }
        fn describe(&self) -> String {
            "scripted".into()
        }
    }

    fn report(event: &str, end_ns: u64) -> Report {
        Report {
            event: event.into(),
            window: Window {
                start_ns: end_ns - 10,
                end_ns,
            },
            group: GroupKey::default(),
            values: vec![].into(),
            origin: Origin {
                host: "h".into(),
                worker: 0,
            },
            completeness: Completeness::default(),
            capture: None,
            missing_hosts: Box::default(),
        }
    }

    fn fast(retries: u32, queue: usize, overflow: Overflow) -> DeliveryConfig {
        DeliveryConfig {
            retries,
            timeout: Duration::from_secs(1),
            backoff: Duration::from_millis(1),
            backoff_max: Duration::from_millis(4),
            queue,
            overflow,
            drain: Duration::from_secs(5),
            // These tests are of delivery: one notice per report.
            alerting: Alerting {
                every_window: true,
                ..Alerting::default()
            },
        }
    }

    struct Run {
        sink: AlertSink,
        got: Arc<Mutex<Vec<(String, u64)>>>,
        dead: tempfile::NamedTempFile,
        notes: Arc<Mutex<Vec<String>>>,
    }

    fn start(script: Script, cfg: DeliveryConfig) -> Run {
        let got = Arc::new(Mutex::new(Vec::new()));
        let dead = tempfile::NamedTempFile::new().unwrap();
        let notes = Arc::new(Mutex::new(Vec::new()));
        let n = notes.clone();
        let t = Scripted {
            script,
            attempts: HashMap::new(),
            got: got.clone(),
        };
        let sink = AlertSink::with_transport(
            Box::new(t),
            cfg,
            DeadLetter::open(dead.path()).unwrap(),
            Arc::new(move |m: &str| lock(&n).push(m.to_string())),
        )
        .unwrap();
        Run {
            sink,
            got,
            dead,
            notes,
        }
    }

    /// Records each transition sent: (state, starts at, ends at).
    type Sent = Arc<Mutex<Vec<(crate::lifecycle::AlertState, u64, Option<u64>)>>>;

    struct Transitions(Sent);

    impl Transport for Transitions {
        fn send(&mut self, notice: &Notice, _: Duration) -> Result<(), Failure> {
            if let Some(t) = &notice.transition {
                lock(&self.0).push((t.state, t.starts_at_ns, t.ends_at_ns));
            }
            Ok(())
        }
        fn describe(&self) -> String {
            "transitions".into()
        }
    }

    /// Live alerting (a manager's) on reports of a capture a month old,
    /// replayed at its pace and flushed after each report: the windows are
    /// closed on the reports' time, so the alert fires after two windows
    /// and resolves once two windows passed quiet. (On the wall clock,
    /// each flush closed every window at once: pending alerts were
    /// dropped before their second window, and none ever fired.)
    #[test]
    fn a_replay_of_a_past_capture_is_closed_on_its_own_time() {
        const MS: u64 = 1_000_000;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let t0 = now - 30 * 86_400_000 * MS;
        let mut rules = Rules::new();
        let hold = crate::Hold {
            fire_after: 2,
            resolve_after: 2,
        };
        rules.insert(
            "loss".into(),
            Rule {
                hold,
                ..Rule::default()
            },
        );
        let cfg = DeliveryConfig {
            alerting: Alerting {
                rules: Arc::new(rules),
                clock_grace: Some(Duration::from_millis(50)),
                ..Alerting::default()
            },
            ..DeliveryConfig::default()
        };
        let sent = Sent::default();
        let dead = tempfile::NamedTempFile::new().unwrap();
        let mut sink = AlertSink::with_transport(
            Box::new(Transitions(sent.clone())),
            cfg,
            DeadLetter::open(dead.path()).unwrap(),
            Arc::new(|_: &str| {}),
        )
        .unwrap();
        let window = |i: u64| {
            let mut r = report("loss", t0 + (i + 1) * 100 * MS);
            r.window.start_ns = t0 + i * 100 * MS;
            r
        };
        for i in 0..5 {
            sink.write(&window(i)).unwrap();
            sink.flush().unwrap();
        }
        // Quiet for the grace and more than two windows of the reports' time.
        std::thread::sleep(Duration::from_millis(400));
        sink.flush().unwrap();
        sink.finish().unwrap();
        use crate::lifecycle::AlertState::{Firing, Resolved};
        assert_eq!(
            *lock(&sent),
            vec![(Firing, t0, None), (Resolved, t0, Some(t0 + 500 * MS))]
        );
    }

    fn dead_letters(dead: &tempfile::NamedTempFile) -> Vec<Value> {
        std::fs::read_to_string(dead.path())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn reports(n: u64) -> Vec<Report> {
        (1..=n)
            .flat_map(|i| [report("a", i * 100), report("b", i * 100)])
            .collect()
    }

    #[test]
    fn retried_reports_arrive_once_each_in_order() {
        // Every report fails twice (a flaky receiver), then is taken.
        let Run {
            mut sink,
            got,
            dead,
            notes,
        } = start(
            Box::new(|_, n| {
                if n < 3 {
                    Err(Failure::Retry("503".into(), None))
                } else {
                    Ok(())
                }
            }),
            fast(3, 4, Overflow::Block),
        );
        let sent = reports(10);
        let watch = sink.watch();
        for r in &sent {
            sink.write(r).unwrap();
            // Never more outcomes than reports, never more pending than can wait.
            let s = watch.stats();
            assert!(
                s.delivered + s.dead_lettered <= s.accepted && s.pending() <= 5,
                "{s:?}"
            );
        }
        let stats = sink.finish().unwrap();
        // The handle outlives the sink and ends with its final counts.
        assert_eq!(watch.stats(), stats);
        assert_eq!(stats.pending(), 0);
        let want: Vec<(String, u64)> = sent
            .iter()
            .map(|r| (r.event.to_string(), r.window.end_ns))
            .collect();
        assert_eq!(*lock(&got), want);
        assert_eq!(
            stats,
            Stats {
                accepted: 20,
                delivered: 20,
                dead_lettered: 0,
                retries: 40
            }
        );
        assert!(dead_letters(&dead).is_empty());
        // The queue of 4 filled: one warning, not one per report.
        assert_eq!(
            lock(&notes).iter().filter(|m| m.contains("queue full")).count(),
            1
        );
    }

    #[test]
    fn budget_spent_or_refused_goes_to_the_dead_letter_file() {
        // Event "a" always fails (retryable), "b" is refused (permanent).
        let Run {
            mut sink,
            dead,
            notes,
            ..
        } = start(
            Box::new(|r, _| {
                if &*r.event == "a" {
                    Err(Failure::Retry("HTTP 500".into(), None))
                } else {
                    Err(Failure::Permanent("HTTP 404".into()))
                }
            }),
            fast(2, 64, Overflow::Block),
        );
        let sent = reports(3);
        for r in &sent {
            sink.write(r).unwrap();
        }
        let stats = sink.finish().unwrap();
        assert_eq!((stats.delivered, stats.dead_lettered, stats.retries), (0, 6, 6));
        let dead = dead_letters(&dead);
        assert_eq!(dead.len(), 6);
        for (d, r) in dead.iter().zip(&sent) {
            assert_eq!(d["schema"], crate::DEAD_LETTER_SCHEMA);
            assert_eq!(d["report"], r.to_json());
            assert_eq!(d["key"], crate::key::idempotency_key(r));
            assert_eq!(d["target"], "scripted");
            if &*r.event == "a" {
                assert_eq!(d["attempts"], 3);
                assert!(d["reason"]
                    .as_str()
                    .unwrap()
                    .starts_with("gave up after 3 attempts: HTTP 500"));
            } else {
                assert_eq!(d["attempts"], 1);
                assert_eq!(d["reason"], "refused: HTTP 404");
            }
        }
        assert!(lock(&notes)
            .iter()
            .any(|m| m.contains("0 of 6 reports delivered, 6 dead-lettered")));
    }

    #[test]
    fn a_full_queue_spills_to_the_dead_letter_file_without_waiting() {
        // The receiver holds the first report until released; the queue holds 2.
        let gate = Arc::new(Mutex::new(()));
        let held = lock(&gate);
        let g = gate.clone();
        let run = start(
            Box::new(move |_, _| {
                drop(lock(&g));
                Ok(())
            }),
            fast(0, 2, Overflow::DeadLetter),
        );
        let mut sink = run.sink;
        let sent = reports(5);
        let t0 = Instant::now();
        for r in &sent {
            sink.write(r).unwrap();
        }
        assert!(t0.elapsed() < Duration::from_secs(1), "write must not wait");
        drop(held);
        let stats = sink.finish().unwrap();
        // At most 3 in flight (one taken by the thread, two queued).
        assert!(stats.dead_lettered >= 7, "{stats:?}");
        assert_eq!(stats.delivered + stats.dead_lettered, 10);
        let dead = dead_letters(&run.dead);
        assert_eq!(dead.len() as u64, stats.dead_lettered);
        assert!(dead
            .iter()
            .all(|d| d["reason"].as_str().unwrap().starts_with("queue full") && d["attempts"] == 0));
        // Delivered and spilled together are exactly the reports written.
        let mut all: Vec<(String, u64)> = lock(&run.got).clone();
        all.extend(dead.iter().map(|d| {
            (
                d["report"]["event"].as_str().unwrap().to_string(),
                d["report"]["window"]["end_ns"].as_u64().unwrap(),
            )
        }));
        all.sort();
        let mut want: Vec<(String, u64)> = sent
            .iter()
            .map(|r| (r.event.to_string(), r.window.end_ns))
            .collect();
        want.sort();
        assert_eq!(all, want);
    }

    #[test]
    fn exit_deadline_bounds_the_drain() {
        let mut cfg = fast(1000, 64, Overflow::Block);
        cfg.backoff = Duration::from_millis(20);
        cfg.backoff_max = Duration::from_millis(20);
        cfg.drain = Duration::from_millis(200);
        let run = start(Box::new(|_, _| Err(Failure::Retry("down".into(), None))), cfg);
        let mut sink = run.sink;
        for r in reports(5) {
            sink.write(&r).unwrap();
        }
        let t0 = Instant::now();
        let stats = sink.finish().unwrap();
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        assert_eq!(stats.dead_lettered, 10);
        let text = std::fs::read_to_string(run.dead.path()).unwrap();
        assert_eq!(text.matches("not delivered before the exit deadline").count(), 10);
    }

    #[test]
    fn an_unwritable_dead_letter_fails_the_sink() {
        let dead = DeadLetter::File {
            path: "/dev/full".into(),
            file: std::fs::OpenOptions::new()
                .append(true)
                .open("/dev/full")
                .unwrap(),
        };
        let mut sink = AlertSink::with_transport(
            Box::new(Scripted {
                script: Box::new(|_, _| Err(Failure::Permanent("no".into()))),
                attempts: HashMap::new(),
                got: Arc::new(Mutex::new(Vec::new())),
            }),
            fast(0, 4, Overflow::Block),
            dead,
            Arc::new(|_: &str| {}),
        )
        .unwrap();
        sink.write(&report("a", 100)).unwrap();
        // The thread fails the dead letter; the sink says so from then on.
        let t0 = Instant::now();
        while sink.flush().is_ok() {
            assert!(t0.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(sink.write(&report("a", 200)).is_err());
        assert!(
            matches!(sink.finish(), Err(AlertError::Failed(m)) if m.contains("cannot write a dead letter"))
        );
    }

    #[test]
    fn backoff_doubles_with_jitter_and_cap() {
        let cfg = DeliveryConfig {
            backoff: Duration::from_millis(100),
            backoff_max: Duration::from_millis(1000),
            ..DeliveryConfig::default()
        };
        for n in 1..=8u32 {
            let full = Duration::from_millis((100u64 << (n - 1)).min(1000));
            for _ in 0..50 {
                let d = backoff(&cfg, n, None);
                assert!(
                    d >= full / 2 && d <= full,
                    "retry {n}: {d:?} not in [{:?}, {full:?}]",
                    full / 2
                );
            }
        }
        assert_eq!(
            backoff(&cfg, 1, Some(Duration::from_secs(5))),
            Duration::from_millis(1000)
        );
        assert!(backoff(&cfg, 40, None) <= Duration::from_millis(1000));
    }
}
