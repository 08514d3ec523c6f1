//! The agent's state: its link to the manager, the desk of the manager's
//! triggers, the manager's export policies, and its counts; registration,
//! the manager's messages, polls and the routing of reports, for the
//! replay and the live agent alike.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clarion_control::HealthHandle;
use clarion_engine::Report;
use clarion_lang::spec::ExportSpec;
use clarion_nats::protocol::{Control, ExportSet};
use clarion_nats::{AgentLink, AgentOptions, AppliedExports, Arrived, HostDesk, Inbound, Triggers, Wake};
use clarion_sinks::Sink;
use tracing::{info, warn};

use crate::exports::{names, ExportTarget};
use crate::{AgentSettings, Error};

/// The agent's counts, for its summary.
#[derive(Default)]
struct Tally {
    /// Live: how long after its window closed here each satisfaction
    /// report left (wall clock minus window end minus the clock's lag).
    close_to_sent: Vec<u64>,
    satisfied: u64,
    answered: u64,
    invalid: u64,
    manager_done: bool,
}

/// What an agent did, for its summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Satisfaction reports sent to the manager.
    pub satisfied: u64,
    /// Poll answers sent (one per request).
    pub answered: u64,
    /// Messages from the manager that could not be read.
    pub invalid: u64,
    /// Satisfaction reports no manager acknowledged.
    pub unacked: u64,
    /// Polls still waiting for windows the host never reached.
    pub deferred: usize,
}

/// One host's side of the manager's protocol (see the crate's documentation).
pub struct Agent {
    pub(crate) link: AgentLink,
    desk: HostDesk<async_nats::Subject>,
    /// The host's own events' reports (none: a live agent's go to its live output).
    sink: Option<Box<dyn Sink<Report>>>,
    tally: Tally,
    stop: Arc<AtomicBool>,
    /// The manager's export policies: the version applied last, and a set
    /// that checked, waiting to be applied by the loop that owns the exporter.
    exports: AppliedExports,
    pending_exports: Option<(u64, Vec<ExportSpec>)>,
    /// The names of the manager's policies the host runs: the others are
    /// the host's own (`--exports`, its API), kept beside them.
    pub(crate) from_manager: Vec<String>,
    pub(crate) settings: AgentSettings,
    /// The host's health: recorded from the replay's monitor (from the
    /// workers by `LocalEvents`, live), sent with every heartbeat.
    pub(crate) health: HealthHandle,
}

/// An agent registered, before its own reports' sink is given
/// ([`Registered::with_sink`]); the caller opens that sink in between.
pub struct Registered {
    link: AgentLink,
    desk: HostDesk<async_nats::Subject>,
    exports: Option<ExportSet>,
    stop: Arc<AtomicBool>,
    settings: AgentSettings,
    health: HealthHandle,
}

impl Agent {
    /// Registers with a manager and installs the network-wide triggers it
    /// sends into `host`. `wake` is called whenever a message from the
    /// manager arrives; `answers_from_ns`: a live host's start (see
    /// `Register::answers_from_ns`); `flows`: its recent flow records, for
    /// the manager's flows requests; `stop` ends the agent's loops.
    pub fn register<T: Triggers + ?Sized>(
        settings: AgentSettings,
        host: &mut T,
        stop: Arc<AtomicBool>,
        wake: Option<Wake>,
        answers_from_ns: Option<u64>,
        flows: Option<clarion_flow_window::SharedWindow>,
    ) -> Result<Registered, Error> {
        let opts = AgentOptions {
            url: settings.url.clone(),
            security: settings.security.clone(),
            host: settings.host.clone(),
            prefixes: settings.prefixes.clone(),
            register_timeout: settings.register_timeout,
            health: Some(HealthHandle::new()),
            wake,
            answers_from_ns,
            flows,
        };
        let health = opts.health.clone().unwrap_or_default();
        let url = &settings.url;
        let mut link = AgentLink::connect(&opts, || {
            info!(target: "agent", nats = %url, "waiting for a manager on {url} (subject clarion.register)")
        })
        .map_err(Error::Register)?;
        let mut desk = HostDesk::new();
        for t in link.take_triggers() {
            desk.install(host, t).map_err(Error::Install)?;
        }
        let exports = link.take_exports();
        if !settings.quiet {
            // "manager manager" read oddly: the default name is left out.
            let named = match link.manager() {
                "manager" => String::new(),
                m => format!(" `{m}`"),
            };
            let host = &settings.host;
            info!(target: "agent", host = %host, manager = %link.manager(), triggers = desk.events(),
                "{host} registered with manager{named}: {} network-wide trigger(s)", desk.events());
        }
        Ok(Registered {
            link,
            desk,
            exports,
            stop,
            settings,
            health,
        })
    }

    fn handle<T: Triggers + ?Sized>(&mut self, monitor: &mut T, item: Inbound) {
        match item {
            Inbound::Control(Control::Install(t)) => {
                let name = t.spec.name.clone();
                if let Err(e) = self.desk.install(monitor, t) {
                    warn!(target: "agent", event = %name, reason = %e, "cannot install {name}: {e}");
                }
            }
            Inbound::Control(Control::Remove { event }) => self.desk.remove(monitor, event),
            Inbound::Control(Control::Extend { event, end_ns }) => self.desk.extend(monitor, event, end_ns),
            Inbound::Control(Control::Done) => self.tally.manager_done = true,
            Inbound::Control(Control::Exports(set)) => self.exports_arrived(&set),
            // The link takes acknowledgements itself.
            Inbound::Control(Control::Ack { .. }) => {}
            Inbound::Poll { reqs, reply } => {
                if let Some((reply, answers)) = self.desk.poll(monitor, reqs, reply) {
                    self.tally.answered += answers.len() as u64;
                    self.link.answer(reply, &answers);
                }
            }
            Inbound::Invalid(e) => {
                self.tally.invalid += 1;
                if self.tally.invalid == 1 {
                    warn!(target: "agent", reason = %e, "{e} (ignored; later ones are counted in the summary)");
                }
            }
        }
    }

    /// The manager's export policies arrived: kept to apply if newer and
    /// checking, else refused (said here and to the manager).
    fn exports_arrived(&mut self, set: &ExportSet) {
        match self.exports.arrived(set) {
            Arrived::Stale => {}
            Arrived::Apply(specs) => self.pending_exports = Some((set.version, specs)),
            Arrived::Refused(why) => self.exports_done(set.version, Err(why)),
        }
    }

    /// The host applied (or refused) the export policies of `version`:
    /// said on standard error and to the manager. `applied`: where from.
    fn exports_done(&mut self, version: u64, applied: Result<String, String>) {
        self.exports.applied(version);
        match applied {
            Ok(from) => {
                if !self.settings.quiet {
                    info!(target: "agent", version, "export policies of version {version} applied {from}");
                }
                self.link.exports_applied(version, None);
            }
            Err(why) => {
                warn!(target: "agent", version, reason = %why,
                    "the manager's export policies of version {version} are refused (the policies running stay): {why}");
                self.link.exports_applied(version, Some(why));
            }
        }
    }

    /// Applies waiting export policies to `target` (a replay's pipeline,
    /// a live host's workers), beside the host's own.
    pub fn apply_exports<X: ExportTarget + ?Sized>(&mut self, target: &mut X) {
        let Some((version, specs)) = self.pending_exports.take() else {
            return;
        };
        let at = target.applied_at();
        let r = target
            .running()
            .and_then(|running| with_own(&self.from_manager, &running, &specs))
            .and_then(|all| target.set(&all))
            .map(|()| format!("{at}: {}", names(&specs)));
        if r.is_ok() {
            self.from_manager = specs.iter().map(|p| p.name.clone()).collect();
        }
        self.exports_done(version, r);
    }

    /// Sends network-wide triggers' reports to the manager (`decided_ns`:
    /// the host's time as their windows closed) and leaves the host's own
    /// in `reports`. `lag_ns`, live: how far the workers' clocks lag the
    /// wall clock, to time how long after its window closed each left
    /// (none: untimed, a replay's or a stopping host's).
    pub fn route(&mut self, reports: &mut Vec<Report>, decided_ns: u64, lag_ns: Option<u64>) {
        reports.retain(|r| {
            let Some(event) = self.desk.network_event(r) else {
                return true;
            };
            self.tally.satisfied += 1;
            self.link.satisfied(event, r, decided_ns.max(r.window.end_ns));
            if let Some(lag_ns) = lag_ns {
                let since_close = clarion_live::realtime_ns()
                    .saturating_sub(r.window.end_ns)
                    .saturating_sub(lag_ns);
                self.tally.close_to_sent.push(since_close);
            }
            false
        });
    }

    /// [`Agent::route`], the host's own reports written to its sink.
    pub(crate) fn route_to_sink(&mut self, reports: &mut Vec<Report>, decided_ns: u64) -> Result<(), Error> {
        self.route(reports, decided_ns, None);
        for r in reports.drain(..) {
            if let Some(sink) = self.sink.as_mut() {
                sink.write(&r).map_err(Error::Reports)?;
            }
        }
        Ok(())
    }

    /// Flushes the host's own reports' sink.
    pub(crate) fn flush_sink(&mut self) -> Result<(), Error> {
        match self.sink.as_mut() {
            Some(sink) => sink.flush().map_err(Error::Reports),
            None => Ok(()),
        }
    }

    /// Takes what the manager sent, and answers the polls whose windows have
    /// closed. Called after the reports of those windows were routed, so
    /// that a host's report of a window leaves before its answer to a poll
    /// of it, which the manager handles in that order (clarion-nats'
    /// `arrivals`).
    pub fn serve<T: Triggers + ?Sized>(&mut self, monitor: &mut T) {
        while let Some(item) = self.link.try_recv() {
            self.handle(monitor, item);
        }
        for (reply, answers) in self.desk.ready(monitor) {
            self.tally.answered += answers.len() as u64;
            self.link.answer(reply, &answers);
        }
    }

    /// Serves `monitor` until the manager is done, the agent stopped or
    /// `until` passed, waking at least every 50 ms.
    pub(crate) fn serve_until<T: Triggers + ?Sized>(&mut self, monitor: &mut T, until: std::time::Instant) {
        while !self.tally.manager_done && !self.stopped() && std::time::Instant::now() < until {
            if let Some(item) = self.link.recv_timeout(Duration::from_millis(50)) {
                self.handle(monitor, item);
            }
            self.serve(monitor);
        }
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// The host's health, as its heartbeats send it.
    pub fn health(&self) -> HealthHandle {
        self.health.clone()
    }

    /// Tells the manager this host is finished, and says goodbye (waiting
    /// up to 5 s for the satisfaction reports not yet acknowledged).
    pub fn bye(&mut self) {
        self.link.finished();
        self.link.bye(Duration::from_secs(5));
    }

    /// What the agent did so far.
    pub fn counts(&self) -> Counts {
        Counts {
            satisfied: self.tally.satisfied,
            answered: self.tally.answered,
            invalid: self.tally.invalid,
            unacked: self.link.unacked(),
            deferred: self.desk.deferred(),
        }
    }

    /// What the host's control API says of the link (`/v1/hosts`).
    pub(crate) fn link_counts(&self) -> clarion_host_api::LinkCounts {
        clarion_host_api::LinkCounts {
            satisfaction_reports: self.tally.satisfied,
            polls_answered: self.tally.answered,
        }
    }

    /// Live: how long after their window closed here the satisfaction
    /// reports left, in ns, in the order sent (taken: the next call has
    /// only those sent since).
    pub fn take_close_to_sent(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.tally.close_to_sent)
    }
}

impl Registered {
    /// The agent, the host's own reports going to `sink` (none: the caller
    /// routes them, as a live agent does to its live output); the export
    /// policies the registration carried wait to be applied.
    pub fn with_sink(self, sink: Option<Box<dyn Sink<Report>>>) -> Agent {
        let mut ag = Agent {
            link: self.link,
            desk: self.desk,
            sink,
            tally: Tally::default(),
            stop: self.stop,
            exports: AppliedExports::default(),
            pending_exports: None,
            from_manager: Vec::new(),
            settings: self.settings,
            health: self.health,
        };
        if let Some(set) = self.exports {
            ag.exports_arrived(&set);
        }
        ag
    }
}

/// The manager's new policies `specs` beside the host's own (those of the
/// `running` set not named in `from_manager`, the manager's last ones);
/// refused if one takes an own name.
fn with_own(
    from_manager: &[String],
    running: &[ExportSpec],
    specs: &[ExportSpec],
) -> Result<Vec<ExportSpec>, String> {
    let mut all: Vec<ExportSpec> = running
        .iter()
        .filter(|p| !from_manager.contains(&p.name))
        .cloned()
        .collect();
    if let Some(p) = specs.iter().find(|p| all.iter().any(|o| o.name == p.name)) {
        return Err(format!(
            "policy `{}` is this host's own (--exports or its API): the manager's cannot replace it",
            p.name
        ));
    }
    all.extend(specs.iter().cloned());
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policies(names: &[&str]) -> Vec<ExportSpec> {
        let src: String = names
            .iter()
            .map(|n| {
                format!("export {n}\n  filter proto = tcp\n  send headers to collector 127.0.0.1 port 9739\n")
            })
            .collect();
        clarion_lang::check_exports(&src).expect("policies check")
    }

    fn names(specs: &[ExportSpec]) -> Vec<&str> {
        specs.iter().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn the_managers_policies_replace_its_last_ones_beside_the_hosts_own() {
        let running = policies(&["own", "m_old"]);
        let all = with_own(&["m_old".into()], &running, &policies(&["m_new"])).expect("applies");
        assert_eq!(names(&all), ["own", "m_new"]);
        // An empty set leaves the host's own alone.
        let all = with_own(&["m_old".into()], &running, &[]).expect("applies");
        assert_eq!(names(&all), ["own"]);
    }

    #[test]
    fn a_managers_policy_taking_an_own_name_is_refused() {
        let running = policies(&["own"]);
        let e = with_own(&[], &running, &policies(&["own"])).expect_err("refused");
        assert!(e.contains("policy `own` is this host's own"), "{e}");
        // The manager's own earlier policy of that name is replaced, not refused.
        let all = with_own(&["own".into()], &running, &policies(&["own"])).expect("applies");
        assert_eq!(names(&all), ["own"]);
    }
}
