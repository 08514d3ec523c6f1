//! A replaying agent: the host's capture read through its pipeline by
//! `clarion_host::replay`, the agent its driver, then polls answered
//! while it lingers.

use std::time::{Duration, Instant};

use clarion_capture::CaptureError;
use clarion_engine::{Monitor, Report};
use clarion_host::{replay, Driver, Frames, ReplayOptions, Replayed};
use clarion_host_api::monitor_health;
use clarion_pipeline::Pipeline;

use crate::agent::Agent;
use crate::Error;

impl Agent {
    /// Replays `source` through `pipeline` (the host's monitor with its
    /// exports around it), the manager's policies applied from the first
    /// frame on, at [`crate::AgentSettings::speed`]. Damage ends the
    /// replay and is in what it returns.
    pub fn replay<S: Frames + ?Sized>(
        &mut self,
        source: &mut S,
        pipeline: &mut Pipeline<Monitor>,
    ) -> Result<Replayed, Error> {
        self.apply_exports(pipeline);
        let options = ReplayOptions {
            speed: self.settings.speed,
            ..ReplayOptions::default()
        };
        replay(source, pipeline, self, &options)
    }

    /// After a replay: the own reports' sink flushed, then, every window
    /// closed now, polls answered at once, until the manager is done, the
    /// agent stopped or [`crate::AgentSettings::linger`] over; then goodbye.
    pub fn linger(&mut self, monitor: &mut Monitor) -> Result<(), Error> {
        self.flush_sink()?;
        self.health.record(monitor_health(&monitor.counters()));
        self.serve(monitor);
        self.link.finished();
        self.serve_until(monitor, Instant::now() + self.settings.linger);
        self.link.bye(Duration::from_secs(5));
        Ok(())
    }
}

/// The agent's side of the replay: network-wide triggers' reports go to
/// the manager, the host's own to the sink; between frames, the manager's
/// messages are served and its export policies applied.
impl Driver<Pipeline<Monitor>> for Agent {
    type Error = Error;

    fn reports(&mut self, stage: &mut Pipeline<Monitor>, reports: &mut Vec<Report>) -> Result<(), Error> {
        let now = stage.head_mut().now_ns();
        self.route_to_sink(reports, now)
    }

    fn service(&mut self, stage: &mut Pipeline<Monitor>) -> Result<bool, Error> {
        let monitor = stage.head_mut();
        self.health.record(monitor_health(&monitor.counters()));
        self.serve(monitor);
        self.apply_exports(stage);
        Ok(!self.stopped())
    }

    fn warning(&mut self, error: &CaptureError) {
        eprintln!("clarion: warning: {error}");
    }
}
