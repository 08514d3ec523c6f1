//! A live agent: the host's workers, merged, as the desk sees them, and
//! the loop that routes their reports and serves the manager and the
//! host's own control API between short waits.

use std::sync::Arc;
use std::time::Duration;

use clarion_engine::{Report, TriggerId, WindowValues};
use clarion_gpv::AppRuntime;
use clarion_host::{Live, LiveHost};
use clarion_host_api::LocalEvents;
use clarion_lang::spec::EventSpec;
use clarion_nats::{Triggers, Wake};
use tracing::warn;

use crate::agent::Agent;

/// Where a live host's output goes besides the manager (the command
/// line's: sinks, epoch statistics, periodic lines): the host's own
/// reports, epoch statistics, interface events, records and GPVs.
pub trait LiveOutputs {
    type Error;
    fn take(&mut self, l: Live) -> Result<(), Self::Error>;
    /// Runs between waits: periodic lines, flushes.
    fn tick(&mut self) -> Result<(), Self::Error>;
    /// The apps on the host's GPVs; `None` when it makes none.
    fn apps(&mut self) -> Option<&mut AppRuntime>;
}

/// Wakes `host`'s loop whenever a message from the manager arrives, so a
/// poll is answered as it arrives, not when the wait for the workers'
/// next event times out.
pub fn wake(host: &LiveHost) -> Wake {
    let waker = host.waker();
    Wake(Arc::new(move || waker.wake()))
}

/// A live host's workers as the desk sees them: installed alike, merged,
/// their closed windows kept by the merger.
pub struct Merged<'a>(pub &'a mut LiveHost);

impl Triggers for Merged<'_> {
    fn install(
        &mut self,
        spec: EventSpec,
        start_ns: Option<u64>,
        end_ns: Option<u64>,
    ) -> Result<TriggerId, String> {
        self.0
            .install(&spec, start_ns, end_ns)
            .map(|(id, _)| id)
            .map_err(|e| e.to_string())
    }
    fn remove(&mut self, id: TriggerId) {
        if let Err(e) = self.0.remove(id) {
            warn!(target: "agent", trigger = id, reason = %e, "cannot remove trigger {id}: {e}");
        }
    }
    fn set_end(&mut self, id: TriggerId, end_ns: Option<u64>) {
        self.0.set_end(id, end_ns)
    }
    fn has_event(&self, name: &str) -> bool {
        self.0.has_event(name)
    }
    fn closed_to(&self) -> u64 {
        self.0.closed_to()
    }
    fn window_values(&self, id: TriggerId, window_start_ns: u64) -> Option<WindowValues> {
        self.0.window_values(id, window_start_ns)
    }
}

impl Agent {
    /// [`Agent::route`], the host's own reports to its control API's
    /// watchers and `out`; `lag_ns`: see there.
    pub fn route_live<O: LiveOutputs + ?Sized>(
        &mut self,
        reports: &mut Vec<Report>,
        decided_ns: u64,
        lag_ns: Option<u64>,
        out: &mut O,
        local: &LocalEvents,
    ) -> Result<(), O::Error> {
        self.route(reports, decided_ns, lag_ns);
        let own = std::mem::take(reports);
        own.iter().for_each(|r| local.publish(r));
        if !own.is_empty() {
            out.take(Live::Reports(own))?;
        }
        Ok(())
    }

    /// Until the host ends: its reports routed, the manager's messages and
    /// the host's own control API served between short waits.
    pub fn live_loop<O: LiveOutputs + ?Sized>(
        &mut self,
        host: &mut LiveHost,
        out: &mut O,
        local: &mut LocalEvents,
    ) -> Result<(), O::Error> {
        loop {
            match host.next(Duration::from_micros(500)) {
                Live::Ended => return Ok(()),
                Live::Reports(mut reports) => {
                    let decided = host.closed_to();
                    self.route_live(&mut reports, decided, Some(host.clock_lag_ns()), out, local)?;
                }
                other => out.take(other)?,
            }
            self.serve(&mut Merged(host));
            self.apply_exports(host);
            // Before a SIGHUP reload of --exports, which keeps them.
            local.keep_managers_exports(&self.from_manager);
            local.set_link_counts(self.link_counts());
            local.service(host, out.apps());
            out.tick()?;
        }
    }
}
